//! Restoring: every shard is checked and agreed on before any record is
//! written, then written in bounded rounds into a table of any size, rank
//! count or variant.

use std::collections::BTreeMap;
use std::path::Path;

use fabkit_core::Bootstrap;

use super::files::{round, shard};
use super::format::{le64, words, ShardReader, Stamp};
use super::{at, Restored, MAX_ROUND, MAX_SHARDS, ROUND_BATCHES};
use crate::layout::Variant;
use crate::message::Messenger;
use crate::outcome::{Error, Result, Write};
use crate::table::Dht;
use crate::transport::Transport;

impl<T: Transport, M: Messenger> Dht<T, M> {
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
