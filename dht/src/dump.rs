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

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::fs::File;
use std::io::{BufReader, BufWriter, Read as _, Seek as _, SeekFrom, Write as _};
use std::os::unix::fs::MetadataExt as _;
use std::path::{Path, PathBuf};

use fabkit_core::Bootstrap;

use crate::collective::agree;
use crate::layout::{Bucket, Layout, Variant, STATE_EMPTY, STATE_FULL};
use crate::outcome::{Error, Result, Write};
use crate::placement::hash_key;
use crate::table::Dht;
use crate::transport::{Op, Remote, Transport};
use crate::variant::word;
use crate::variant::Settled;

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

/// A shard's header.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Header {
    variant: Variant,
    key_len: u64,
    value_len: u64,
    records: u64,
    ranks: u64,
    shard: u64,
    buckets: u64,
    dump_id: u64,
}

fn le64(b: &[u8], at: u64) -> u64 {
    let at = at as usize;
    let mut w = [0u8; 8];
    w.copy_from_slice(&b[at..at + 8]);
    u64::from_le_bytes(w)
}

fn le32(b: &[u8], at: u64) -> u32 {
    let at = at as usize;
    u32::from_le_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
}

/// Words as little-endian bytes, for agreement payloads.
fn words(xs: &[u64]) -> Vec<u8> {
    xs.iter().flat_map(|x| x.to_le_bytes()).collect()
}

impl Header {
    fn encode(&self) -> [u8; HEADER_LEN] {
        let mut h = [0u8; HEADER_LEN];
        h[..8].copy_from_slice(MAGIC);
        h[8..12].copy_from_slice(&FORMAT_VERSION.to_le_bytes());
        h[at::VARIANT as usize] = self.variant.code();
        for (at, x) in [
            (at::KEY_LEN, self.key_len),
            (at::VALUE_LEN, self.value_len),
            (at::RECORDS, self.records),
            (at::RANKS, self.ranks),
            (at::SHARD, self.shard),
            (at::BUCKETS, self.buckets),
            (at::DUMP_ID, self.dump_id),
        ] {
            h[at as usize..at as usize + 8].copy_from_slice(&x.to_le_bytes());
        }
        let c = at::CRC as usize;
        let crc = crc32fast::hash(&h[..c]);
        h[c..c + 4].copy_from_slice(&crc.to_le_bytes());
        h
    }

    /// Decodes and checks a header read from `path`: its magic, checksum,
    /// version, zero bytes and variant, in that order (a damaged byte is
    /// reported as damage, whichever field it is in).
    fn decode(path: &Path, h: &[u8; HEADER_LEN]) -> Result<Header> {
        let bad = |offset: u64, what: String| Error::Shard {
            path: path.to_path_buf(),
            offset,
            what,
        };
        if &h[..8] != MAGIC {
            return Err(bad(
                0,
                "not a fabkit DHT dump shard (its magic is not FKDHTDMP), or its first bytes \
                 are damaged"
                    .into(),
            ));
        }
        let version = le32(h, at::VERSION);
        let c = at::CRC as usize;
        let stored = le32(h, at::CRC);
        let crc = crc32fast::hash(&h[..c]);
        if stored != crc {
            return Err(bad(
                at::CRC,
                format!(
                    "the header fails its checksum (stored {stored:#010x}, computed {crc:#010x}): \
                     bytes 0..{c} are damaged, or the shard was never finished"
                ),
            ));
        }
        if !(OLDEST_READ..=FORMAT_VERSION).contains(&version) {
            return Err(bad(
                at::VERSION,
                format!(
                    "format version {version}; this build reads versions {OLDEST_READ} to \
                     {FORMAT_VERSION}: restore it with the fabkit that wrote it"
                ),
            ));
        }
        for range in [at::PAD..at::KEY_LEN, at::RESERVED..at::CRC] {
            if let Some(i) = range.clone().find(|&i| h[i as usize] != 0) {
                return Err(bad(
                    i,
                    format!(
                        "bytes {}..{} must be zero in version {FORMAT_VERSION}; byte {i} is {:#04x}",
                        range.start, range.end, h[i as usize]
                    ),
                ));
            }
        }
        let code = h[at::VARIANT as usize];
        let variant = Variant::from_code(code).ok_or_else(|| {
            bad(
                at::VARIANT,
                format!("variant code {code} is none this build knows"),
            )
        })?;
        Ok(Header {
            variant,
            key_len: le64(h, at::KEY_LEN),
            value_len: le64(h, at::VALUE_LEN),
            records: le64(h, at::RECORDS),
            ranks: le64(h, at::RANKS),
            shard: le64(h, at::SHARD),
            buckets: le64(h, at::BUCKETS),
            dump_id: le64(h, at::DUMP_ID),
        })
    }
}

/// The checksum of record `index` of shard `shard` of dump `dump_id`.
fn record_crc(dump_id: u64, shard: u64, index: u64, key: &[u8], value: &[u8]) -> u32 {
    let mut h = crc32fast::Hasher::new();
    h.update(&dump_id.to_le_bytes());
    h.update(&shard.to_le_bytes());
    h.update(&index.to_le_bytes());
    h.update(key);
    h.update(value);
    h.finalize()
}

fn with_suffix(prefix: &Path, suffix: &str) -> PathBuf {
    let mut p = prefix.as_os_str().to_owned();
    p.push(suffix);
    PathBuf::from(p)
}

fn shard(prefix: &Path, rank: usize) -> PathBuf {
    with_suffix(prefix, &format!(".rank{rank}"))
}

fn part(prefix: &Path, rank: usize) -> PathBuf {
    with_suffix(prefix, &format!(".rank{rank}.part"))
}

fn prev(prefix: &Path, rank: usize) -> PathBuf {
    with_suffix(prefix, &format!(".rank{rank}.prev"))
}

fn io<'p>(what: &'static str, path: &'p Path) -> impl FnOnce(std::io::Error) -> Error + 'p {
    move |source| Error::Io {
        what,
        path: path.to_path_buf(),
        source,
    }
}

/// Removes `path`; a file that is not there is no error.
fn remove(path: &Path) -> Result<()> {
    match std::fs::remove_file(path) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(io("removing", path)(e)),
        _ => Ok(()),
    }
}

/// One bounded round of a collective step: every rank contributes whether
/// it has more to do and a payload, or its error. Returns each rank's flag
/// and payload, in rank order.
fn round(
    boot: &dyn Bootstrap,
    op: &'static str,
    local: Result<(bool, Vec<u8>)>,
) -> Result<Vec<(bool, Vec<u8>)>> {
    let local = local.map(|(more, p)| [&[u8::from(more)][..], &p].concat());
    agree(boot, op, local)?
        .into_iter()
        .enumerate()
        .map(|(r, p)| match p.split_first() {
            Some((&f, rest)) if f <= 1 => Ok((f == 1, rest.to_vec())),
            _ => Err(Error::Mismatch(format!(
                "rank {r} sent a {op} round of {} B without a more-to-do flag",
                p.len()
            ))),
        })
        .collect()
}

/// What identifies a file's contents as checked: if any of these changed,
/// so may have the bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Stamp {
    dev: u64,
    ino: u64,
    len: u64,
    mtime: (i64, i64),
}

impl Stamp {
    fn of(m: &std::fs::Metadata) -> Self {
        Stamp {
            dev: m.dev(),
            ino: m.ino(),
            len: m.len(),
            mtime: (m.mtime(), m.mtime_nsec()),
        }
    }
}

/// Takes a batch of checked records (key, value) of a shard.
type Sink<'a> = dyn FnMut(&[(&[u8], &[u8])]) -> Result<()> + 'a;

/// A shard being read: its header checked, its records handed out in
/// batches as each batch passes its checksums.
struct ShardReader {
    path: PathBuf,
    r: BufReader<File>,
    h: Header,
    stamp: Stamp,
    /// The next record's index.
    next: u64,
    key_len: usize,
    value_len: usize,
    buf: Vec<u8>,
}

impl ShardReader {
    /// Opens shard `s` of `shards` and checks its header and length
    /// against a table of `key_len` and `value_len` (and, if known, against
    /// dump `dump_id` and the `stamp` it had when it was checked).
    fn open(
        prefix: &Path,
        s: usize,
        shards: usize,
        (key_len, value_len): (usize, usize),
        checked: Option<(u64, Stamp)>,
    ) -> Result<Self> {
        let path = shard(prefix, s);
        let bad = |offset: u64, what: String| Error::Shard {
            path: path.clone(),
            offset,
            what,
        };
        // Asked before opening: opening a FIFO or a device could block.
        match std::fs::metadata(&path) {
            Ok(m) if !m.is_file() => {
                return Err(bad(
                    0,
                    format!(
                        "is not a regular file ({:?}): a shard is a file a dump wrote",
                        m.file_type()
                    ),
                ))
            }
            Ok(_) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                return Err(bad(
                    0,
                    format!(
                        "missing: shard {s} of {shards} (is the prefix right, and were all \
                         shards copied?)"
                    ),
                ))
            }
            Err(e) => return Err(io("reading", &path)(e)),
        }
        let file = File::open(&path).map_err(io("opening", &path))?;
        let meta = file.metadata().map_err(io("reading", &path))?;
        let stamp = Stamp::of(&meta);
        if !meta.is_file() {
            return Err(bad(0, "was replaced by something not a file".into()));
        }
        if let Some((_, was)) = checked.filter(|(_, was)| *was != stamp) {
            return Err(bad(
                0,
                format!(
                    "changed since it was checked ({was:?}, now {stamp:?}): restore from a \
                     dump nothing writes to"
                ),
            ));
        }
        let len = stamp.len;
        if len < HEADER_LEN as u64 {
            return Err(bad(
                len,
                format!("ends after {len} B, inside its {HEADER_LEN} B header: truncated"),
            ));
        }
        let mut r = BufReader::new(file);
        let mut head = [0u8; HEADER_LEN];
        r.read_exact(&mut head).map_err(io("reading", &path))?;
        let h = Header::decode(&path, &head)?;
        let (kl, vl) = (key_len as u64, value_len as u64);
        if h.key_len != kl || h.value_len != vl {
            let at = if h.key_len != kl {
                at::KEY_LEN
            } else {
                at::VALUE_LEN
            };
            return Err(bad(
                at,
                format!(
                    "holds {} B keys and {} B values; this table takes {kl} B and {vl} B: \
                     restore into a table created with the dump's lengths",
                    h.key_len, h.value_len
                ),
            ));
        }
        if h.ranks != shards as u64 {
            return Err(bad(
                at::RANKS,
                format!(
                    "is of a dump by {} ranks, so of {} shards, but {shards} were asked for: \
                     give shards = {}",
                    h.ranks, h.ranks, h.ranks
                ),
            ));
        }
        if h.shard != s as u64 {
            return Err(bad(
                at::SHARD,
                format!(
                    "is shard {} of its dump, but its name says shard {s}: renamed, or copied \
                     over another shard",
                    h.shard
                ),
            ));
        }
        if let Some((id, _)) = checked.filter(|(id, _)| *id != h.dump_id) {
            return Err(bad(
                at::DUMP_ID,
                format!(
                    "is of dump {:#x}, not {id:#x}: replaced since it was checked",
                    h.dump_id
                ),
            ));
        }
        let rec = kl + vl + RECORD_CRC;
        let Some(end) = h
            .records
            .checked_mul(rec)
            .and_then(|b| b.checked_add(HEADER_LEN as u64))
        else {
            return Err(bad(
                at::RECORDS,
                format!(
                    "claims {} records of {rec} B, more than any file holds",
                    h.records
                ),
            ));
        };
        if len < end {
            return Err(bad(
                len,
                format!(
                    "ends after {len} B, but its header promises {} records of {rec} B ({end} B): \
                     truncated, or its record count raised",
                    h.records
                ),
            ));
        }
        if len > end {
            return Err(bad(
                end,
                format!(
                    "{} B follow the last of its {} records: its record count was lowered, or \
                     data appended",
                    len - end,
                    h.records
                ),
            ));
        }
        Ok(ShardReader {
            path,
            r,
            h,
            stamp,
            next: 0,
            key_len,
            value_len,
            buf: Vec::new(),
        })
    }

    fn done(&self) -> bool {
        self.next >= self.h.records
    }

    /// Reads and checks up to `max` more records; hands them to `sink`.
    /// Returns how many.
    fn read(&mut self, max: usize, sink: &mut Sink<'_>) -> Result<u64> {
        let (kl, vl) = (self.key_len, self.value_len);
        let rec = kl + vl + RECORD_CRC as usize;
        // At most 16 MiB of records in memory, whatever `max` says.
        let per = max.min((16 << 20) / rec).max(1);
        let n = (self.h.records - self.next).min(per as u64) as usize;
        let offset = HEADER_LEN as u64 + self.next * rec as u64;
        self.buf.resize(n * rec, 0);
        let path = &self.path;
        self.r.read_exact(&mut self.buf).map_err(|e| {
            if e.kind() == std::io::ErrorKind::UnexpectedEof {
                Error::Shard {
                    path: path.clone(),
                    offset,
                    what: "ends early: the file shrank while it was read".into(),
                }
            } else {
                io("reading", path)(e)
            }
        })?;
        let mut items = Vec::with_capacity(n);
        for (i, e) in self.buf.chunks_exact(rec).enumerate() {
            let (key, rest) = e.split_at(kl);
            let (value, crc) = rest.split_at(vl);
            let k = self.next + i as u64;
            if le32(crc, 0) != record_crc(self.h.dump_id, self.h.shard, k, key, value) {
                let from = HEADER_LEN as u64 + k * rec as u64;
                return Err(Error::Shard {
                    path: path.clone(),
                    offset: from,
                    what: format!(
                        "record {k} (bytes {from}..{}) fails its checksum: damaged",
                        from + rec as u64
                    ),
                });
            }
            items.push((key, value));
        }
        sink(&items)?;
        self.next += n as u64;
        Ok(n as u64)
    }
}

/// The 8-byte word at the start of bucket bytes `b` (fine's lock word,
/// chunked's state word).
fn first_word(b: &[u8]) -> u64 {
    le64(b, 0)
}

/// The part of bucket `b` (whole bucket bytes) a reader decodes.
fn data<'a>(l: &Layout, b: &'a [u8]) -> Bucket<'a> {
    let s = l.data_start();
    let state = if l.variant == Variant::Chunked {
        STATE_FULL
    } else {
        0
    };
    l.decode(&b[s..s + l.data_len()], state)
}

/// Whether bucket `b` holds anything: a record, whole or not, or a held
/// lock or claim. What holds something and is not dumped is skipped.
fn holds_something(l: &Layout, b: &[u8]) -> bool {
    match l.variant {
        Variant::Chunked => first_word(b) != STATE_EMPTY,
        Variant::Fine => word::held(first_word(b)) || data(l, b).occupied(),
        Variant::Lockfree | Variant::Coarse => data(l, b).occupied(),
    }
}

/// What a read of `key` does at bucket `b` (whole bucket bytes) of a quiet
/// table: the variant's own rule ([`crate::variant::look`]), re-reads spent.
fn verdict(l: &Layout, b: &[u8], key: &[u8]) -> Settled {
    crate::variant::look(l.variant, first_word(b), &data(l, b), key).settled()
}

/// A record found in the block being dumped, and how far the walk along
/// its key's buckets has come.
struct Walk<'a> {
    /// Its bucket's index in the block.
    j: usize,
    key: &'a [u8],
    /// The key's candidates: where the buckets a read looks at start.
    starts: Vec<u64>,
    /// How many buckets from each start a read looks at (chunked: a
    /// chunk; else 1).
    run: u64,
    /// How far along (bucket `pos % run` from start `pos / run`).
    pos: u64,
}

impl Walk<'_> {
    /// The bucket `pos` steps along, if the read goes that far.
    fn at(&self, pos: u64, buckets: u64) -> Option<u64> {
        let s = self.starts.get(usize::try_from(pos / self.run).ok()?)?;
        Some((s + pos % self.run) % buckets)
    }
}

/// A dump in progress on this rank.
struct Dumping {
    part: PathBuf,
    dump_id: u64,
    /// The shard being written (None before the first round and after the
    /// last).
    out: Option<BufWriter<File>>,
    /// The next bucket to scan.
    first: u64,
    records: u64,
    skipped: u64,
    /// Coarse: the region word when the scan began.
    region: Option<u64>,
    /// Written, headed and synced.
    done: bool,
}

impl<T: Transport> Dht<T> {
    /// Writes this rank's records to `<prefix>.rank<r>` (see the module
    /// docs for the format), each key once. Collective: every rank dumps
    /// its own region, in bounded rounds, and a failure on any rank fails
    /// the dump on every rank with that rank's message
    /// ([`Error::Collective`]), leaving the shards of an earlier dump under
    /// `prefix` as they were.
    pub fn dump(&self, prefix: &Path, boot: &dyn Bootstrap) -> Result<Dumped> {
        // Every rank has stopped writing once all are here; all take rank
        // 0's id, which marks the shards of this one dump.
        let ids = boot
            .allgather(&fabkit_core::random_u64().to_le_bytes())
            .map_err(Error::transport)?;
        let dump_id = ids
            .first()
            .and_then(|b| <[u8; 8]>::try_from(b.as_slice()).ok())
            .map(u64::from_le_bytes)
            .ok_or_else(|| Error::Mismatch("rank 0 sent no 8-byte dump id".into()))?;
        let me = self.t.rank();
        let (path, prev) = (shard(prefix, me), prev(prefix, me));
        let mut d = Dumping {
            part: part(prefix, me),
            dump_id,
            out: None,
            first: 0,
            records: 0,
            skipped: 0,
            region: None,
            done: false,
        };
        // 1. Scan and write, a bounded round at a time. Agreed before any
        // rank publishes its shard, so that a failed dump replaces none.
        loop {
            let local = self.dump_round(&mut d);
            if local.is_err() {
                d.out = None;
                let _ = remove(&d.part);
            }
            match round(boot, "dump", local.map(|more| (more, Vec::new()))) {
                Ok(all) if all.iter().any(|a| a.0) => {}
                Ok(_) => break,
                Err(e) => {
                    d.out = None;
                    let _ = remove(&d.part);
                    return Err(e);
                }
            }
        }
        // 2. Keep the previous shard until every rank has its new one.
        let had_old = std::fs::symlink_metadata(&path).is_ok();
        let kept = remove(&prev).and_then(|()| {
            if had_old {
                std::fs::hard_link(&path, &prev).map_err(io("keeping the previous shard as", &prev))
            } else {
                Ok(())
            }
        });
        if let Err(e) = agree(boot, "dump", kept.map(|()| Vec::new())) {
            let _ = remove(&prev);
            let _ = remove(&d.part);
            return Err(e);
        }
        // 3. Publish; on any failure every rank puts its previous shard back.
        let renamed =
            std::fs::rename(&d.part, &path).map_err(io("renaming the finished shard to", &path));
        let moved = renamed.is_ok();
        let counts = renamed.map(|()| words(&[d.records, d.skipped]));
        let all = match agree(boot, "dump", counts) {
            Ok(all) => all,
            Err(e) => {
                if !moved {
                    let _ = remove(&d.part);
                } else if had_old {
                    let _ = std::fs::rename(&prev, &path);
                } else {
                    let _ = remove(&path);
                }
                let _ = remove(&prev);
                return Err(e);
            }
        };
        let _ = remove(&prev);
        if me == 0 {
            // Shards of an earlier dump by more ranks are not of this one.
            for r in self.t.ranks()..MAX_SHARDS {
                let old = shard(prefix, r);
                if std::fs::symlink_metadata(&old).is_err() || remove(&old).is_err() {
                    break;
                }
            }
        }
        let mut done = Dumped {
            records: d.records,
            skipped: d.skipped,
            ..Dumped::default()
        };
        for (r, p) in all.iter().enumerate() {
            if p.len() != 16 {
                return Err(Error::Mismatch(format!(
                    "rank {r} sent {} B of dump counts, not 16",
                    p.len()
                )));
            }
            done.total_records += le64(p, 0);
            done.total_skipped += le64(p, 8);
        }
        Ok(done)
    }

    /// The word at the start of this rank's region (coarse's region
    /// lock); an error if it is held.
    fn region_word(&self) -> Result<u64> {
        let me = self.t.rank();
        let mut w = [0u8; 8];
        self.exec(&mut [Op::Read {
            from: Remote::new(me, 0),
            into: &mut w,
        }])?;
        let w = u64::from_le_bytes(w);
        if word::held(w) {
            let by = word::holder(w).map_or(String::new(), |r| format!(" by rank {r}"));
            return Err(Error::Held {
                rank: me,
                what: format!("its region lock is held{by} (word {w:#x})"),
            });
        }
        Ok(w)
    }

    /// One round of a dump: at most [`ROUND_BLOCKS`] blocks scanned and
    /// written; after the last, the header and a sync. Returns whether
    /// there is more to do.
    fn dump_round(&self, d: &mut Dumping) -> Result<bool> {
        let l = self.cfg.layout();
        let bl = l.bucket_len;
        let buckets = self.cfg.buckets;
        if d.done {
            return Ok(false);
        }
        if d.out.is_none() {
            let file = File::create(&d.part).map_err(io("creating", &d.part))?;
            let mut out = BufWriter::new(file);
            // A zero header until the records are written: a shard left
            // unfinished fails its header checksum.
            out.write_all(&[0u8; HEADER_LEN])
                .map_err(io("writing", &d.part))?;
            d.out = Some(out);
            if self.cfg.variant == Variant::Coarse {
                d.region = Some(self.region_word()?);
            }
        }
        let per = (SCAN / bl).max(1) as u64;
        let end = d
            .first
            .saturating_add(per.saturating_mul(ROUND_BLOCKS))
            .min(buckets);
        let me = self.t.rank();
        let (part, dump_id) = (d.part.clone(), d.dump_id);
        let out = d
            .out
            .as_mut()
            .ok_or_else(|| Error::Internal("a dump round without its shard".into()))?;
        while d.first < end {
            let n = per.min(end - d.first);
            let mut block = vec![0u8; n as usize * bl];
            self.exec(&mut [Op::Read {
                from: Remote::new(me, l.offset(d.first)),
                into: &mut block,
            }])?;
            let keep = self.current_copies(&block, d.first)?;
            for (j, b) in block.chunks_exact(bl).enumerate() {
                if keep.binary_search(&j).is_err() {
                    d.skipped += u64::from(holds_something(&l, b));
                    continue;
                }
                let bk = data(&l, b);
                let crc = record_crc(dump_id, me as u64, d.records, bk.key, bk.value);
                for x in [bk.key, bk.value, &crc.to_le_bytes()[..]] {
                    out.write_all(x).map_err(io("writing", &part))?;
                }
                d.records += 1;
            }
            d.first += n;
        }
        if d.first < buckets {
            return Ok(true);
        }
        if let Some(was) = d.region {
            let now = self.region_word()?;
            if now != was {
                return Err(Error::Held {
                    rank: me,
                    what: format!(
                        "its region lock went from {was:#x} to {now:#x} while the dump read the \
                         region: a writer wrote"
                    ),
                });
            }
        }
        let out = d
            .out
            .take()
            .ok_or_else(|| Error::Internal("a dump round without its shard".into()))?;
        let mut file = out
            .into_inner()
            .map_err(|e| io("writing", &part)(e.into_error()))?;
        let header = Header {
            variant: self.cfg.variant,
            key_len: self.cfg.key_len as u64,
            value_len: self.cfg.value_len as u64,
            records: d.records,
            ranks: self.t.ranks() as u64,
            shard: me as u64,
            buckets,
            dump_id,
        };
        file.seek(SeekFrom::Start(0))
            .and_then(|_| file.write_all(&header.encode()))
            .map_err(io("writing", &part))?;
        file.sync_all().map_err(io("syncing", &part))?;
        d.done = true;
        Ok(false)
    }

    /// The buckets (indices into `block`, whose first bucket is `first`)
    /// holding the copy of their key that a read returns.
    fn current_copies(&self, block: &[u8], first: u64) -> Result<Vec<usize>> {
        let l = self.cfg.layout();
        let bl = l.bucket_len;
        let place = self.shape.place;
        let me = self.t.rank();
        let n = (block.len() / bl) as u64;
        let buckets = self.cfg.buckets;
        let run = if self.cfg.variant == Variant::Chunked {
            u64::from(self.cfg.chunk).min(buckets)
        } else {
            1
        };
        let mut walks = Vec::new();
        for (j, b) in block.chunks_exact(bl).enumerate() {
            let key = data(&l, b).key;
            // Only what a read of its own key could return.
            if verdict(&l, b, key) != Settled::Hit {
                continue;
            }
            let hash = hash_key(key);
            // No read of the key comes to this rank.
            if place.rank_of(hash) as usize != me {
                continue;
            }
            walks.push(Walk {
                j,
                key,
                starts: place.candidates_of(hash).collect(),
                run,
                pos: 0,
            });
        }
        let mut cache: HashMap<u64, Vec<u8>> = HashMap::new();
        let mut keep = Vec::new();
        while !walks.is_empty() {
            let mut need = BTreeSet::new();
            walks.retain_mut(|w| loop {
                let Some(x) = w.at(w.pos, buckets) else {
                    // Off its key's buckets: no read finds it.
                    return false;
                };
                if x == first + w.j as u64 {
                    keep.push(w.j);
                    return false;
                }
                let bytes = if (first..first + n).contains(&x) {
                    let o = (x - first) as usize * bl;
                    &block[o..o + bl]
                } else if let Some(c) = cache.get(&x) {
                    c.as_slice()
                } else {
                    // With the rest of its chunk (at most 64 buckets),
                    // which the read looks at next: a chunk per round trip.
                    let rest = (w.run - w.pos % w.run).min(64);
                    need.extend(
                        (0..rest)
                            .filter_map(|i| w.at(w.pos + i, buckets))
                            .filter(|y| !(first..first + n).contains(y) && !cache.contains_key(y)),
                    );
                    return true;
                };
                if verdict(&l, bytes, w.key) != Settled::Next {
                    // A read returns another copy, or ends, before this one.
                    return false;
                }
                w.pos += 1;
            });
            self.fetch_buckets(&need, &mut cache)?;
        }
        keep.sort_unstable();
        keep.dedup();
        Ok(keep)
    }

    /// Reads the buckets `need` of this rank's region into `cache`.
    fn fetch_buckets(&self, need: &BTreeSet<u64>, cache: &mut HashMap<u64, Vec<u8>>) -> Result<()> {
        let l = self.cfg.layout();
        let me = self.t.rank();
        let need: Vec<u64> = need.iter().copied().collect();
        for xs in need.chunks(MAX_READS) {
            let mut bufs: Vec<Vec<u8>> = xs.iter().map(|_| vec![0u8; l.bucket_len]).collect();
            let mut ops: Vec<Op<'_>> = xs
                .iter()
                .zip(bufs.iter_mut())
                .map(|(&x, into)| Op::Read {
                    from: Remote::new(me, l.offset(x)),
                    into,
                })
                .collect();
            self.exec(&mut ops)?;
            drop(ops);
            cache.extend(xs.iter().copied().zip(bufs));
        }
        Ok(())
    }

    /// Reads the shards of a dump (`<prefix>.rank0` .. `.rank<shards-1>`)
    /// into this table, whatever its size, rank count or variant. Keys and
    /// values must have this table's lengths. Collective (see the module
    /// docs for its errors): every shard is checked and the ranks agree
    /// before anything is written, so a damaged shard restores nothing
    /// anywhere. `batch` records are written per operation, and
    /// 16 batches (at most 65536 records) per round between
    /// two agreements.
    pub fn restore(
        &self,
        prefix: &Path,
        shards: usize,
        boot: &dyn Bootstrap,
        batch: usize,
    ) -> Result<Restored> {
        let (me, ranks) = (self.t.rank(), self.t.ranks().max(1));
        let budget = batch.max(1).saturating_mul(ROUND_BATCHES).min(MAX_ROUND);
        let batch = batch.clamp(1, budget);
        let lens = (self.cfg.key_len, self.cfg.value_len);
        let mut first = if shards == 0 {
            Some(Error::Config(
                "a dump has at least one shard: give shards = the rank count it was dumped with"
                    .into(),
            ))
        } else if shards > MAX_SHARDS {
            Some(Error::Config(format!(
                "{shards} shards asked for; a dump has at most {MAX_SHARDS}: give shards = the \
                 rank count it was dumped with"
            )))
        } else {
            None
        };
        // 1. Check every shard this rank will read, a round at a time;
        // tell the others which dump each is of.
        let mut mine = (me..shards).step_by(ranks);
        let mut cur: Option<ShardReader> = None;
        let mut stamps: BTreeMap<usize, Stamp> = BTreeMap::new();
        let mut ids: BTreeMap<u64, u64> = BTreeMap::new();
        loop {
            let local = match first.take() {
                Some(e) => Err(e),
                None => check_round(
                    prefix,
                    &mut mine,
                    &mut cur,
                    &mut stamps,
                    shards,
                    lens,
                    budget,
                ),
            };
            let all = round(boot, "restore", local)?;
            // Judged from agreed data only: every rank returns the same.
            let asked: Vec<u64> = all
                .iter()
                .map(|(_, p)| if p.len() >= 8 { le64(p, 0) } else { 0 })
                .collect();
            if let Some(r) = asked.iter().position(|a| *a != asked[0]) {
                return Err(Error::Mismatch(format!(
                    "rank 0 restores {} shards, rank {r} {}: give every rank the same shard count",
                    asked[0], asked[r]
                )));
            }
            for (r, (_, p)) in all.iter().enumerate() {
                if p.len() < 8 || (p.len() - 8) % 16 != 0 {
                    return Err(Error::Mismatch(format!(
                        "rank {r} sent {} B of shard ids, not a count and pairs of 8-byte words",
                        p.len()
                    )));
                }
                for pair in p[8..].chunks_exact(16) {
                    let s = le64(pair, 0);
                    if s >= asked[0] || s % ranks as u64 != r as u64 {
                        return Err(Error::Mismatch(format!(
                            "rank {r} reported shard {s}, which is not one of its own"
                        )));
                    }
                    ids.insert(s, le64(pair, 8));
                }
            }
            if !all.iter().any(|a| a.0) {
                break;
            }
        }
        // 2. All shards must be of one dump.
        let id0 = ids.get(&0).copied();
        if let Some(s) = (0..shards as u64).find(|s| !ids.contains_key(s)) {
            return Err(Error::Mismatch(format!(
                "no rank reported shard {s} as checked"
            )));
        }
        if let Some((&s, &id)) = ids.iter().find(|(_, id)| Some(**id) != id0) {
            return Err(Error::Shard {
                path: shard(prefix, s as usize),
                offset: at::DUMP_ID,
                what: format!(
                    "is of another dump than {} (dump ids {id:#x} and {:#x}): a shard left from \
                     an earlier dump, or copied in from one; restore from one complete dump",
                    shard(prefix, 0).display(),
                    id0.unwrap_or(0)
                ),
            });
        }
        let id0 = id0.unwrap_or(0);
        // 3. Write, a round at a time. Lock-free writers racing for one
        // empty bucket can lose an insert; a restore must not, so into a
        // lock-free table ranks take turns, a round each. The other
        // variants claim or lock buckets and restore in parallel.
        let turns = self.cfg.variant == Variant::Lockfree;
        let mut mine = (me..shards).step_by(ranks);
        let mut cur: Option<ShardReader> = None;
        let mut more = vec![true; ranks];
        let mut turn = 0;
        let mut done = Restored::default();
        loop {
            let local = if more[me] && (!turns || turn == me) {
                let w = WriteRound {
                    prefix,
                    shards,
                    lens,
                    dump_id: id0,
                    stamps: &stamps,
                    budget,
                    batch,
                };
                self.write_round(&w, &mut mine, &mut cur, &mut done)
            } else {
                Ok(more[me])
            };
            let counts = words(&[done.restored, done.dropped]);
            let all = round(boot, "restore", local.map(|m| (m, counts)))?;
            more = all.iter().map(|a| a.0).collect();
            if more.len() != ranks {
                return Err(Error::Mismatch(format!(
                    "{} ranks answered a restore round of {ranks}",
                    more.len()
                )));
            }
            if more.iter().any(|m| *m) {
                if turns {
                    turn = (1..=ranks)
                        .map(|d| (turn + d) % ranks)
                        .find(|r| more[*r])
                        .unwrap_or(0);
                }
                continue;
            }
            for (r, (_, p)) in all.iter().enumerate() {
                if p.len() != 16 {
                    return Err(Error::Mismatch(format!(
                        "rank {r} sent {} B of restore counts, not 16",
                        p.len()
                    )));
                }
                done.total_restored += le64(p, 0);
                done.total_dropped += le64(p, 8);
            }
            return Ok(done);
        }
    }

    /// One round of writing: at most `w.budget` records of this rank's
    /// shards through the table. Returns whether there is more to do.
    fn write_round(
        &self,
        w: &WriteRound<'_>,
        mine: &mut std::iter::StepBy<std::ops::Range<usize>>,
        cur: &mut Option<ShardReader>,
        done: &mut Restored,
    ) -> Result<bool> {
        let mut left = w.budget as u64;
        while left > 0 {
            let Some(r) = cur.as_mut() else {
                let Some(s) = mine.next() else {
                    return Ok(false);
                };
                let stamp = w.stamps.get(&s).copied().ok_or_else(|| {
                    Error::Internal(format!("shard {s} is to be written but was not checked"))
                })?;
                *cur = Some(ShardReader::open(
                    w.prefix,
                    s,
                    w.shards,
                    w.lens,
                    Some((w.dump_id, stamp)),
                )?);
                left -= 1;
                continue;
            };
            if r.done() {
                *cur = None;
                continue;
            }
            let batch = (w.batch as u64).min(left) as usize;
            left -= r
                .read(batch, &mut |items| {
                    let out = self.write_many(items)?;
                    let evicted = out.iter().filter(|w| **w == Write::Evicted).count() as u64;
                    done.dropped += evicted;
                    done.restored += items.len() as u64 - evicted;
                    Ok(())
                })
                .map_err(|e| match e {
                    // Checked a moment ago: the file changed since.
                    Error::Shard { path, offset, what } => Error::Shard {
                        path,
                        offset,
                        what: format!("{what} (the shard changed while it was restored)"),
                    },
                    e => e,
                })?
                .max(1);
        }
        Ok(true)
    }
}

/// What a restore's write rounds need to know.
struct WriteRound<'a> {
    prefix: &'a Path,
    shards: usize,
    lens: (usize, usize),
    dump_id: u64,
    stamps: &'a BTreeMap<usize, Stamp>,
    budget: usize,
    batch: usize,
}

/// One round of a restore's check: at most `budget` records of this rank's
/// shards read and checked. Returns whether there is more to do and the
/// payload: the shard count asked for, then (shard, dump id) of each shard
/// whose check finished.
fn check_round(
    prefix: &Path,
    mine: &mut std::iter::StepBy<std::ops::Range<usize>>,
    cur: &mut Option<ShardReader>,
    stamps: &mut BTreeMap<usize, Stamp>,
    shards: usize,
    lens: (usize, usize),
    budget: usize,
) -> Result<(bool, Vec<u8>)> {
    let mut pay = vec![shards as u64];
    let mut left = budget as u64;
    while left > 0 {
        let Some(r) = cur.as_mut() else {
            let Some(s) = mine.next() else {
                return Ok((false, words(&pay)));
            };
            *cur = Some(ShardReader::open(prefix, s, shards, lens, None)?);
            left -= 1;
            continue;
        };
        if r.done() {
            stamps.insert(r.h.shard as usize, r.stamp);
            pay.extend([r.h.shard, r.h.dump_id]);
            *cur = None;
            continue;
        }
        left -= r.read(left as usize, &mut |_| Ok(()))?.max(1);
    }
    Ok((true, words(&pay)))
}
