//! Dumping: each rank writes the records a read would return from its own
//! region to its shard, skipping stale copies, damage and held locks.

use std::collections::{BTreeSet, HashMap};
use std::fs::File;
use std::io::{BufWriter, Seek as _, SeekFrom, Write as _};
use std::path::{Path, PathBuf};

use fabkit_core::Bootstrap;

use super::files::{io, part, prev, remove, round, shard};
use super::format::{le64, record_crc, words, Header};
use super::{Dumped, HEADER_LEN, MAX_READS, MAX_SHARDS, ROUND_BLOCKS, SCAN};
use crate::collective::agree;
use crate::layout::{Bucket, Layout, Variant, STATE_EMPTY, STATE_FULL};
use crate::message::Messenger;
use crate::outcome::{Error, Result};
use crate::table::Dht;
use crate::transport::{Op, Remote, Transport};
use crate::variant::word;
use crate::variant::Settled;

/// The 8-byte word at the start of bucket bytes `b` (fine's lock word,
/// chunked's state word).
fn first_word(b: &[u8]) -> u64 {
    le64(b, 0)
}

/// The part of bucket `b` (whole bucket bytes) a reader decodes.
pub(super) fn data<'a>(l: &Layout, b: &'a [u8]) -> Bucket<'a> {
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

impl<T: Transport, M: Messenger> Dht<T, M> {
    /// Writes this rank's records to `<prefix>.rank<r>` (see the module
    /// docs for the format), each key once. Collective: every rank dumps
    /// its own region, in bounded rounds, and a failure on any rank fails
    /// the dump on every rank with that rank's message
    /// ([`Error::Collective`]), leaving the shards of an earlier dump under
    /// `prefix` as they were.
    pub fn dump(&self, prefix: &Path, boot: &dyn Bootstrap) -> Result<Dumped> {
        // Every rank has stopped writing once all are here; all take rank
        // 0's id, which marks the shards of this one dump.
        // A prefix that names a directory is refused on every rank.
        let mine = check_prefix(prefix).and_then(|()| {
            fabkit_core::random_u64()
                .map(|id| id.to_le_bytes().to_vec())
                .map_err(Error::Bootstrap)
        });
        let ids = agree(boot, "dump", mine)?;
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
            // 0600: it holds the table's data.
            let file = fabkit_core::private::create(&d.part).map_err(io("creating", &d.part))?;
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
            let hash = self.key_hash.hash(key);
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
}

/// A dump's prefix names files (`PREFIX.rankN`), never a directory: `/` or
/// `out/` would make hidden files (`/.rank0`) in it.
fn check_prefix(prefix: &Path) -> Result<()> {
    let text = prefix.as_os_str().as_encoded_bytes();
    if text.is_empty() || text.ends_with(b"/") || prefix.is_dir() {
        return Err(Error::Config(format!(
            "the dump prefix {:?} is empty or names a directory, and its shards would be hidden files in \
             it ({}): give a file prefix inside it, e.g. {}",
            prefix.display().to_string(),
            shard(prefix, 0).display(),
            prefix.join("table").display()
        )));
    }
    Ok(())
}
