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
//! scanned are fetched in batches. The table must be quiescent (no writes)
//! while dumping.
//!
//! # Shard format (version [`FORMAT_VERSION`])
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
//! | 72..76 | CRC32 of bytes 0..72 (u32) |
//! | 76..80 | zero |
//!
//! then the records, each `key ‖ value ‖ CRC32(dump id ‖ record index ‖ key
//! ‖ value)` (the index as u64), so a flipped byte, a record moved within
//! the file or taken from another dump fails its checksum. The file is
//! exactly `80 + records × (key + value + 4)` bytes long. A shard is
//! written as `<prefix>.rank<r>.part` and renamed once every rank has
//! written its own: a failed dump leaves no new shard behind.
//!
//! # Restoring
//! Shard i is read by rank i mod ranks, and its records are written
//! through the table, so they land wherever the new placement puts them.
//! Restoring checks every shard a rank will read (header, size, every
//! record's checksum, that all shards are of one dump) and the ranks agree
//! on the outcome ([`crate::collective::agree`]) before any rank writes
//! anything: a damaged, truncated, missing, foreign or misnamed shard is an
//! [`Error::Shard`] naming the file and the byte, on every rank, and
//! nothing is restored. A failure while writing (the transport) is agreed
//! the same way, so no rank waits on a peer that gave up. A table too small
//! for the dump evicts records; [`Restored`] says how many.
//! Into a lock-free table, ranks take turns, so that no insert is lost to
//! a race.
//!
//! ```
//! use fabkit_dht::{transport::local::LocalTransport, Config, Dht, Read, Variant};
//! use fabkit_fabric::bootstrap::ThreadGroup;
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
//! assert_eq!(a.dump(&prefix, &boot).unwrap(), 1);
//! // Into a chunked table of twice the size.
//! (cfg.variant, cfg.buckets) = (Variant::Chunked, 128);
//! let t = LocalTransport::group(1, cfg.region_len()).pop().unwrap();
//! let b = Dht::create(t, cfg, &boot).unwrap();
//! let r = b.restore(&prefix, 1, &boot, 64).unwrap();
//! assert_eq!((r.restored, r.dropped), (1, 0));
//! assert_eq!(b.read(b"key-0001").unwrap(), Read::Hit(b"value-0000000001".to_vec()));
//! ```

use std::collections::{BTreeSet, HashMap};
use std::fs::File;
use std::io::{BufReader, BufWriter, Read as _, Seek as _, SeekFrom, Write as _};
use std::path::{Path, PathBuf};

use fabkit_fabric::bootstrap::Bootstrap;

use crate::collective::agree;
use crate::layout::{is_claimed, Bucket, Layout, Variant, STATE_EMPTY, STATE_FULL};
use crate::outcome::{Error, Result, Write};
use crate::placement::hash_key;
use crate::table::Dht;
use crate::transport::{Op, Remote, Transport};

/// The shard format this build writes and reads.
pub const FORMAT_VERSION: u32 = 2;

const MAGIC: &[u8; 8] = b"FKDHTDMP";
const HEADER_LEN: usize = 80;
/// Bytes of own region read per remote operation while dumping.
const SCAN: usize = 1 << 16;
/// Bucket reads per batch when a dump looks at a key's earlier candidates.
const MAX_READS: usize = 1024;
/// Bytes a record adds to its key and value: its CRC32.
const RECORD_CRC: u64 = 4;

/// Where each header field starts.
mod at {
    pub(super) const VERSION: u64 = 8;
    pub(super) const VARIANT: u64 = 12;
    pub(super) const KEY_LEN: u64 = 16;
    pub(super) const VALUE_LEN: u64 = 24;
    pub(super) const RECORDS: u64 = 32;
    pub(super) const RANKS: u64 = 40;
    pub(super) const SHARD: u64 = 48;
    pub(super) const DUMP_ID: u64 = 64;
    pub(super) const CRC: u64 = 72;
}

/// What a restore did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
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

impl Header {
    fn encode(&self) -> [u8; HEADER_LEN] {
        let mut h = [0u8; HEADER_LEN];
        h[..8].copy_from_slice(MAGIC);
        h[8..12].copy_from_slice(&FORMAT_VERSION.to_le_bytes());
        h[12] = self.variant.code();
        for (at, x) in [
            (at::KEY_LEN, self.key_len),
            (at::VALUE_LEN, self.value_len),
            (at::RECORDS, self.records),
            (at::RANKS, self.ranks),
            (at::SHARD, self.shard),
            (56, self.buckets),
            (at::DUMP_ID, self.dump_id),
        ] {
            h[at as usize..at as usize + 8].copy_from_slice(&x.to_le_bytes());
        }
        let crc = crc32fast::hash(&h[..at::CRC as usize]);
        h[at::CRC as usize..at::CRC as usize + 4].copy_from_slice(&crc.to_le_bytes());
        h
    }

    /// Decodes and checks a header read from `path`: its magic, version,
    /// checksum and variant.
    fn decode(path: &Path, h: &[u8; HEADER_LEN]) -> Result<Header> {
        let bad = |offset: u64, what: String| Error::Shard {
            path: path.to_path_buf(),
            offset,
            what,
        };
        if &h[..8] != MAGIC {
            return Err(bad(
                0,
                "not a fabkit DHT dump shard (its magic is not FKDHTDMP)".into(),
            ));
        }
        let version = u32::from_le_bytes([h[8], h[9], h[10], h[11]]);
        if version != FORMAT_VERSION {
            return Err(bad(
                at::VERSION,
                format!(
                    "format version {version}; this build reads version {FORMAT_VERSION}: \
                     restore it with the fabkit that wrote it"
                ),
            ));
        }
        let c = at::CRC as usize;
        let stored = u32::from_le_bytes([h[c], h[c + 1], h[c + 2], h[c + 3]]);
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
        let variant = Variant::from_code(h[12]).ok_or_else(|| {
            bad(
                at::VARIANT,
                format!("variant code {} is none this build knows", h[12]),
            )
        })?;
        Ok(Header {
            variant,
            key_len: le64(h, at::KEY_LEN),
            value_len: le64(h, at::VALUE_LEN),
            records: le64(h, at::RECORDS),
            ranks: le64(h, at::RANKS),
            shard: le64(h, at::SHARD),
            buckets: le64(h, 56),
            dump_id: le64(h, at::DUMP_ID),
        })
    }
}

/// The checksum of record `index` of dump `dump_id`.
fn record_crc(dump_id: u64, index: u64, key: &[u8], value: &[u8]) -> u32 {
    let mut h = crc32fast::Hasher::new();
    h.update(&dump_id.to_le_bytes());
    h.update(&index.to_le_bytes());
    h.update(key);
    h.update(value);
    h.finalize()
}

fn shard(prefix: &Path, rank: usize) -> PathBuf {
    let mut p = prefix.as_os_str().to_owned();
    p.push(format!(".rank{rank}"));
    PathBuf::from(p)
}

fn part(prefix: &Path, rank: usize) -> PathBuf {
    let mut p = shard(prefix, rank).into_os_string();
    p.push(".part");
    PathBuf::from(p)
}

fn io<'p>(what: &'static str, path: &'p Path) -> impl FnOnce(std::io::Error) -> Error + 'p {
    move |source| Error::Io {
        what,
        path: path.to_path_buf(),
        source,
    }
}

/// A number no other dump is likely to have drawn.
fn random_id() -> u64 {
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u32(std::process::id());
    if let Ok(t) = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH) {
        h.write_u128(t.as_nanos());
    }
    h.finish()
}

/// What a variant's read makes of one bucket, for a key, on a quiet table.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Verdict {
    /// The read returns this bucket's value.
    Hit,
    /// The read ends here without a value (a miss, or corrupt).
    Stop,
    /// The read looks at the next bucket.
    Next,
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

/// Mirrors the reads of `crate::variant`, once their re-reads are spent
/// (a quiet table: what fails its checksum now fails it for good).
fn verdict(l: &Layout, b: &[u8], key: &[u8]) -> Verdict {
    let bk = data(l, b);
    let mine = bk.key == key;
    match l.variant {
        Variant::Chunked => {
            let mut w = [0u8; 8];
            w.copy_from_slice(&b[..8]);
            let state = u64::from_le_bytes(w);
            // Empty, or claimed while empty (a first fill): a miss.
            if state == STATE_EMPTY || (is_claimed(state) && state & 2 == 0) {
                Verdict::Stop
            } else if !bk.checksum_ok() {
                // This key's damage is corrupt; other keys' is passed over.
                if mine {
                    Verdict::Stop
                } else {
                    Verdict::Next
                }
            } else if mine {
                Verdict::Hit
            } else {
                Verdict::Next
            }
        }
        Variant::Lockfree => {
            let damaged = bk.occupied() && !bk.checksum_ok();
            // This key's damage is corrupt; an empty bucket that was never
            // marked ends the probe: a miss.
            if (damaged && mine) || (!bk.occupied() && !bk.invalid()) {
                Verdict::Stop
            } else if mine && !damaged {
                Verdict::Hit
            } else {
                Verdict::Next
            }
        }
        Variant::Fine | Variant::Coarse => {
            if !bk.occupied() {
                Verdict::Stop
            } else if mine {
                Verdict::Hit
            } else {
                Verdict::Next
            }
        }
    }
}

/// Takes the key and value of each record a dump keeps.
type Emit<'a> = dyn FnMut(&[u8], &[u8]) -> Result<()> + 'a;
/// Takes a batch of checked records (key, value) of a shard.
type Sink<'a> = dyn FnMut(&[(&[u8], &[u8])]) -> Result<()> + 'a;

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

impl<T: Transport> Dht<T> {
    /// Writes this rank's records to `<prefix>.rank<r>` (see the module
    /// docs for the format), each key once; returns how many. Collective:
    /// every rank dumps its own region, and a failure on any rank fails the
    /// dump on every rank with that rank's message
    /// ([`Error::Collective`]), leaving no new shard behind.
    pub fn dump(&self, prefix: &Path, boot: &dyn Bootstrap) -> Result<u64> {
        // Every rank has stopped writing once all are here; all take rank
        // 0's id, which marks the shards of this one dump.
        let ids = boot
            .allgather(&random_id().to_le_bytes())
            .map_err(Error::Transport)?;
        let dump_id = ids
            .first()
            .and_then(|b| <[u8; 8]>::try_from(b.as_slice()).ok())
            .map(u64::from_le_bytes)
            .ok_or_else(|| Error::Mismatch("rank 0 sent no 8-byte dump id".into()))?;
        let me = self.t.rank();
        let (path, part) = (shard(prefix, me), part(prefix, me));
        let wrote = self.write_shard(&part, dump_id);
        let count = *wrote.as_ref().unwrap_or(&0);
        if wrote.is_err() {
            let _ = std::fs::remove_file(&part);
        }
        // Agreed before any rank publishes its shard, so that a failed dump
        // replaces no shard of an earlier one.
        if let Err(e) = agree(boot, "dump", wrote.map(|_| Vec::new())) {
            let _ = std::fs::remove_file(&part);
            return Err(e);
        }
        let renamed = std::fs::rename(&part, &path)
            .map(|()| Vec::new())
            .map_err(io("renaming the finished shard to", &path));
        if let Err(e) = agree(boot, "dump", renamed) {
            let _ = std::fs::remove_file(&part);
            let _ = std::fs::remove_file(&path);
            return Err(e);
        }
        Ok(count)
    }

    /// Writes this rank's shard to `part`; returns its record count.
    fn write_shard(&self, part: &Path, dump_id: u64) -> Result<u64> {
        let file = File::create(part).map_err(io("creating", part))?;
        let mut out = BufWriter::new(file);
        // A zero header until the records are written: a shard left
        // unfinished fails its header checksum.
        out.write_all(&[0u8; HEADER_LEN])
            .map_err(io("writing", part))?;
        let mut count = 0u64;
        self.scan_region(&mut |key, value| {
            let crc = record_crc(dump_id, count, key, value);
            for b in [key, value, &crc.to_le_bytes()[..]] {
                out.write_all(b).map_err(io("writing", part))?;
            }
            count += 1;
            Ok(())
        })?;
        let mut file = out
            .into_inner()
            .map_err(|e| io("writing", part)(e.into_error()))?;
        let header = Header {
            variant: self.cfg.variant,
            key_len: self.cfg.key_len as u64,
            value_len: self.cfg.value_len as u64,
            records: count,
            ranks: self.t.ranks() as u64,
            shard: self.t.rank() as u64,
            buckets: self.cfg.buckets,
            dump_id,
        };
        file.seek(SeekFrom::Start(0))
            .and_then(|_| file.write_all(&header.encode()))
            .map_err(io("writing", part))?;
        file.sync_all().map_err(io("syncing", part))?;
        Ok(count)
    }

    /// Calls `emit` with the key and value of every record of this rank's
    /// region that a read of its key returns, in bucket order.
    fn scan_region(&self, emit: &mut Emit<'_>) -> Result<()> {
        let l = self.cfg.layout();
        let bl = l.bucket_len;
        let me = self.t.rank();
        let per = (SCAN / bl).max(1) as u64;
        let mut first = 0u64;
        while first < self.cfg.buckets {
            let n = per.min(self.cfg.buckets - first);
            let mut block = vec![0u8; n as usize * bl];
            self.exec(&mut [Op::Read {
                from: Remote::new(me, l.offset(first)),
                into: &mut block,
            }])?;
            for j in self.current_copies(&block, first)? {
                let bk = data(&l, &block[j * bl..(j + 1) * bl]);
                emit(bk.key, bk.value)?;
            }
            first += n;
        }
        Ok(())
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
            if verdict(&l, b, key) != Verdict::Hit {
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
                if verdict(&l, bytes, w.key) != Verdict::Next {
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
    /// values must have this table's lengths. Collective: every shard is
    /// checked and the ranks agree before anything is written, so a
    /// damaged shard restores nothing anywhere, and a failure on one rank
    /// is the same [`Error::Collective`] on every rank. `batch` records are
    /// written per operation.
    pub fn restore(
        &self,
        prefix: &Path,
        shards: usize,
        boot: &dyn Bootstrap,
        batch: usize,
    ) -> Result<Restored> {
        let (me, ranks) = (self.t.rank(), self.t.ranks());
        let mine: Vec<usize> = (me..shards).step_by(ranks.max(1)).collect();
        // 1. Check every shard this rank will read; tell the others which
        // dump each is of.
        let checked = if shards == 0 {
            Err(Error::Config(
                "a dump has at least one shard: give shards = the rank count it was dumped with"
                    .into(),
            ))
        } else {
            mine.iter()
                .map(|&s| {
                    let h = self.read_shard(prefix, s, shards, None, batch, &mut |_| Ok(()))?;
                    Ok([s as u64, h.dump_id]
                        .iter()
                        .flat_map(|x| x.to_le_bytes())
                        .collect::<Vec<u8>>())
                })
                .collect::<Result<Vec<Vec<u8>>>>()
                .map(|v| v.concat())
        };
        let all = agree(boot, "restore", checked)?;
        // 2. All shards must be of one dump (every rank judges the same
        // data, so every rank returns the same error).
        let mut ids = vec![None; shards];
        for p in &all {
            if p.len() % 16 != 0 {
                return Err(Error::Mismatch(format!(
                    "a rank sent {} B of shard ids, not pairs of 8-byte words",
                    p.len()
                )));
            }
            for pair in p.chunks_exact(16) {
                let s = le64(pair, 0) as usize;
                if let Some(slot) = ids.get_mut(s) {
                    *slot = Some(le64(pair, 8));
                }
            }
        }
        let id0 = ids.first().copied().flatten();
        if let Some(s) = ids.iter().position(|id| *id != id0) {
            return Err(Error::Shard {
                path: shard(prefix, s),
                offset: at::DUMP_ID,
                what: format!(
                    "is of another dump than {} (dump ids {:#x} and {:#x}): a shard left from an \
                     earlier dump, or copied in from one; restore from one complete dump",
                    shard(prefix, 0).display(),
                    ids[s].unwrap_or(0),
                    id0.unwrap_or(0)
                ),
            });
        }
        // 3. Write. Lock-free writers racing for one empty bucket can lose
        // an insert; a restore must not, so into a lock-free table ranks
        // take turns. The other variants claim or lock buckets and restore
        // in parallel. Each turn ends in an agreement, not a barrier.
        let turns = if self.cfg.variant == Variant::Lockfree {
            ranks
        } else {
            1
        };
        let mut done = Restored::default();
        for turn in 0..turns {
            let local = if turns == 1 || turn == me {
                self.write_shards(prefix, &mine, shards, id0, batch)
                    .map(|r| {
                        done = r;
                        Vec::new()
                    })
            } else {
                Ok(Vec::new())
            };
            agree(boot, "restore", local)?;
        }
        let mine = [done.restored, done.dropped]
            .iter()
            .flat_map(|x| x.to_le_bytes())
            .collect();
        for p in agree(boot, "restore", Ok(mine))? {
            if p.len() != 16 {
                return Err(Error::Mismatch(format!(
                    "a rank sent {} B of restore counts, not 16",
                    p.len()
                )));
            }
            done.total_restored += le64(&p, 0);
            done.total_dropped += le64(&p, 8);
        }
        Ok(done)
    }

    /// Writes the records of shards `mine` through the table.
    fn write_shards(
        &self,
        prefix: &Path,
        mine: &[usize],
        shards: usize,
        dump_id: Option<u64>,
        batch: usize,
    ) -> Result<Restored> {
        let mut r = Restored::default();
        for &s in mine {
            self.read_shard(prefix, s, shards, dump_id, batch, &mut |items| {
                let out = self.write_many(items)?;
                let evicted = out.iter().filter(|w| **w == Write::Evicted).count() as u64;
                r.dropped += evicted;
                r.restored += items.len() as u64 - evicted;
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
            })?;
        }
        Ok(r)
    }

    /// Reads and checks shard `s` of `shards` (of dump `dump_id`, if
    /// known), handing its records to `sink` in batches of up to `batch`
    /// as each batch passes its checksums. Returns its header.
    #[allow(clippy::too_many_arguments)]
    fn read_shard(
        &self,
        prefix: &Path,
        s: usize,
        shards: usize,
        dump_id: Option<u64>,
        batch: usize,
        sink: &mut Sink<'_>,
    ) -> Result<Header> {
        let path = shard(prefix, s);
        let bad = |offset: u64, what: String| Error::Shard {
            path: path.clone(),
            offset,
            what,
        };
        let file = match File::open(&path) {
            Ok(f) => f,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                return Err(bad(
                    0,
                    format!(
                        "missing: shard {s} of {shards} (is the prefix right, and were all \
                         shards copied?)"
                    ),
                ))
            }
            Err(e) => return Err(io("opening", &path)(e)),
        };
        let len = file.metadata().map_err(io("reading", &path))?.len();
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
        let (kl, vl) = (self.cfg.key_len as u64, self.cfg.value_len as u64);
        if h.key_len != kl || h.value_len != vl {
            return Err(bad(
                at::KEY_LEN,
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
        if let Some(id) = dump_id.filter(|id| *id != h.dump_id) {
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
        let (kl, vl, rec) = (kl as usize, vl as usize, rec as usize);
        // At most 16 MiB of records in memory, whatever `batch` says.
        let per = batch.min((16 << 20) / rec).max(1);
        let mut buf = vec![0u8; per * rec];
        let mut index = 0u64;
        while index < h.records {
            let n = (h.records - index).min(per as u64) as usize;
            let offset = HEADER_LEN as u64 + index * rec as u64;
            r.read_exact(&mut buf[..n * rec]).map_err(|e| {
                if e.kind() == std::io::ErrorKind::UnexpectedEof {
                    bad(
                        offset,
                        "ends early: the file shrank while it was read".into(),
                    )
                } else {
                    io("reading", &path)(e)
                }
            })?;
            let mut items = Vec::with_capacity(n);
            for (i, e) in buf[..n * rec].chunks_exact(rec).enumerate() {
                let (key, rest) = e.split_at(kl);
                let (value, crc) = rest.split_at(vl);
                let stored = u32::from_le_bytes([crc[0], crc[1], crc[2], crc[3]]);
                let k = index + i as u64;
                if stored != record_crc(h.dump_id, k, key, value) {
                    let from = HEADER_LEN as u64 + k * rec as u64;
                    return Err(bad(
                        from,
                        format!(
                            "record {k} (bytes {from}..{}) fails its checksum: damaged",
                            from + rec as u64
                        ),
                    ));
                }
                items.push((key, value));
            }
            sink(&items)?;
            index += n as u64;
        }
        Ok(h)
    }
}
