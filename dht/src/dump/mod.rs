//! Dump a table to files and restore it, also into a table of another size,
//! rank count or variant: the resize-at-checkpoint that seed 000 names as
//! future work.
//!
//! # What is dumped
//! Each rank writes its own region to its own shard, `<prefix>.rank<r>`.
//! A dump holds each key once: the copy a read of the key would return.
//! Writers can leave older copies of a key further along its candidates
//! (a lock-free bucket reused after damage, a lock or claim broken at a
//! deadline); a read stops at the first copy, so those are not dumped.
//! For every record in the region the dump walks the key's candidates (for
//! chunked, the buckets of its chunks) in the order a read does, judging
//! each bucket as the variant's read would on a quiet table, and keeps the
//! record only if the walk ends on it; buckets outside the block being
//! scanned are fetched in batches. A fine bucket whose lock is held is one
//! a read waits on until its deadline, so neither it nor anything behind it
//! is dumped; a coarse region whose lock is held (or changes while it is
//! scanned) refuses the dump ([`Error::Held`]). Records not dumped are
//! counted ([`Dumped::skipped`]). The table must be quiescent (no writes)
//! while dumping.
//!
//! # Shard format (version [`FORMAT_VERSION`])
//! Version 4 came with the word-wise key hash and word-padded buckets. Its
//! records are as version 3's, and a restore places every record afresh
//! with this build's hash, so version 3 shards restore too
//! ([`OLDEST_READ`]).
//! All integers little-endian. An 80-byte header:
//!
//! | bytes | field |
//! |---|---|
//! | 0..8 | magic `FKDHTDMP` |
//! | 8..12 | format version (u32) |
//! | 12 | variant code of the dumping table ([`Variant::code`]) |
//! | 13..16 | zero |
//! | 16..24 | key length (u64) |
//! | 24..32 | value length (u64) |
//! | 32..40 | record count (u64) |
//! | 40..48 | rank count of the dumping table = shards in the dump (u64) |
//! | 48..56 | this shard's index (u64) |
//! | 56..64 | buckets per rank of the dumping table (u64) |
//! | 64..72 | dump id: one random number shared by the dump's shards (u64) |
//! | 72..76 | zero |
//! | 76..80 | CRC32 of bytes 0..76 (u32) |
//!
//! then the records, each `key ‖ value ‖ CRC32(dump id ‖ shard index ‖
//! record index ‖ key ‖ value)` (the indices as u64), so a flipped byte, a
//! record moved within the file, to another shard or taken from another
//! dump fails its checksum. The file is exactly `80 + records × (key +
//! value + 4)` bytes long. A shard is written as `<prefix>.rank<r>.part`;
//! once every rank has written its own, each keeps its previous shard as
//! `<prefix>.rank<r>.prev` (a hard link), renames the new one into place,
//! and, once all have, removes the `.prev`; if any rank fails, every rank
//! puts its previous shard back. So a failed dump leaves the earlier dump
//! as it was. Rank 0 then removes shards of an earlier dump by more ranks
//! (`<prefix>.rank<n>` upwards, n the rank count).
//!
//! # Collective steps and errors
//! Every step is collective, and works in bounded rounds: at most a round's
//! records (or blocks of region) of local work, then an agreement
//! ([`crate::collective::agree`]) in which each rank says whether it has
//! more to do, so no rank waits in a bootstrap collective for longer than
//! one round of a peer's work. A failure on a rank is returned by that rank
//! and every other as the same [`Error::Collective`] naming it and its
//! message (the failing rank keeps its own typed error, an [`Error::Shard`]
//! or [`Error::Io`] say, as `local`). What the ranks judge from agreed data
//! (shards of two dumps; ranks asked for different shard counts) is the
//! same [`Error::Shard`] or [`Error::Mismatch`] on every rank.
//!
//! # Restoring
//! Shard i is read by rank i mod ranks, and its records are written
//! through the table, so they land wherever the new placement puts them.
//! Restoring checks every shard a rank will read (header, size, every
//! record's checksum, that all shards are of one dump) and the ranks agree
//! on the outcome before any rank writes anything: a damaged, truncated,
//! missing, foreign or misnamed shard names the file and the byte, and
//! nothing is restored. A shard that changed after it was checked (another
//! file, length or modification time) is refused when it is written; a
//! failure while writing (the transport, or such a change) is agreed the
//! same way, so no rank waits on a peer that gave up, but what was written
//! before it stays. A table too small for the dump evicts records;
//! [`Restored`] says how many. Into a lock-free table, ranks take turns, a
//! round each, so that no insert is lost to a race.
//!
//! ```
//! use fabkit_dht::{transport::local::LocalTransport, Config, Dht, Read, Variant};
//! use fabkit_core::bootstrap::ThreadGroup;
//! use std::time::Duration;
//!
//! let dir = tempfile::tempdir().unwrap();
//! let prefix = dir.path().join("cache");
//! let mut cfg = Config::new(Variant::Lockfree);
//! (cfg.key_len, cfg.value_len, cfg.buckets) = (8, 16, 64);
//! let boot = ThreadGroup::members(1, Duration::from_secs(5)).pop().unwrap();
//! let t = LocalTransport::group(1, cfg.region_len()).pop().unwrap();
//! let a = Dht::create(t, cfg, &boot).unwrap();
//! a.write(b"key-0001", b"value-0000000001").unwrap();
//! assert_eq!(a.dump(&prefix, &boot).unwrap().total_records, 1);
//! // Into a chunked table of twice the size.
//! (cfg.variant, cfg.buckets) = (Variant::Chunked, 128);
//! let t = LocalTransport::group(1, cfg.region_len()).pop().unwrap();
//! let b = Dht::create(t, cfg, &boot).unwrap();
//! let r = b.restore(&prefix, 1, &boot, 64).unwrap();
//! assert_eq!((r.restored, r.dropped), (1, 0));
//! assert_eq!(b.read(b"key-0001").unwrap(), Read::Hit(b"value-0000000001".to_vec()));
//! ```
//!
//! The module by job: here the shard format's constants and what the two
//! operations return; `format`, a shard's header, its records' checksums and
//! reading it back; `files`, the names a dump writes and the bounded rounds
//! of its collective steps; `write` ([`Dht::dump`]) and `read`
//! ([`Dht::restore`]).

#[cfg(doc)]
use crate::{layout::Variant, outcome::Error, table::Dht};

mod files;
mod format;
mod read;
mod write;

/// The shard format this build writes and reads.
pub const FORMAT_VERSION: u32 = 4;

/// The oldest shard format this build restores.
pub const OLDEST_READ: u32 = 3;

/// The most shards a dump may have (and so ranks that may dump).
pub const MAX_SHARDS: usize = 1 << 16;

const MAGIC: &[u8; 8] = b"FKDHTDMP";
const HEADER_LEN: usize = 80;
/// Bytes of own region read per remote operation while dumping.
const SCAN: usize = 1 << 16;
/// Blocks of [`SCAN`] bytes a rank dumps between two agreements.
const ROUND_BLOCKS: u64 = 4;
/// Restore: batches of records a rank checks or writes between two
/// agreements, and the most records in a round whatever the batch.
const ROUND_BATCHES: usize = 16;
const MAX_ROUND: usize = 1 << 16;
/// Bucket reads per batch when a dump looks at a key's earlier candidates.
const MAX_READS: usize = 1024;
/// Bytes a record adds to its key and value: its CRC32.
const RECORD_CRC: u64 = 4;

/// Where each header field starts.
mod at {
    pub(super) const VERSION: u64 = 8;
    pub(super) const VARIANT: u64 = 12;
    pub(super) const PAD: u64 = 13;
    pub(super) const KEY_LEN: u64 = 16;
    pub(super) const VALUE_LEN: u64 = 24;
    pub(super) const RECORDS: u64 = 32;
    pub(super) const RANKS: u64 = 40;
    pub(super) const SHARD: u64 = 48;
    pub(super) const BUCKETS: u64 = 56;
    pub(super) const DUMP_ID: u64 = 64;
    pub(super) const RESERVED: u64 = 72;
    pub(super) const CRC: u64 = 76;
}

/// What a dump did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct Dumped {
    /// Records this rank wrote to its shard.
    pub records: u64,
    /// Buckets of this rank holding something that was not dumped: a stale
    /// copy of a key (a read returns another), a damaged record, one under
    /// a held lock, or one of a key no read of which comes here.
    pub skipped: u64,
    /// `records` summed over all ranks (the same on every rank).
    pub total_records: u64,
    /// `skipped` summed over all ranks (the same on every rank).
    pub total_skipped: u64,
}

/// What a restore did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct Restored {
    /// Records this rank read from its shards and kept: written, less the
    /// records its writes pushed out of a full table.
    pub restored: u64,
    /// Records this rank's writes could not keep: each write that evicted
    /// another record (the target table was too small) lost one.
    pub dropped: u64,
    /// `restored` summed over all ranks (the same on every rank).
    pub total_restored: u64,
    /// `dropped` summed over all ranks (the same on every rank).
    pub total_dropped: u64,
}
