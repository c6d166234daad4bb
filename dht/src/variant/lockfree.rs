//! Lock-free (the MPI-DHT paper, 4.2): plain reads and writes; the writer stores a
//! CRC32 of key and value, the reader recomputes it, re-reads on mismatch,
//! and after repeated mismatches marks the bucket invalid so that a later
//! write can reuse it. No atomics: a lock-free read hit on the first
//! candidate is one remote read. It holds nothing, so an error has nothing
//! to give back.
//!
//! What it guarantees, and what it does not:
//! - A hit is a whole record of the key, up to the CRC32: a torn record
//!   passes it with probability 2^-32 per torn read.
//! - Two writers racing for one bucket (an insert of two keys, or two
//!   updates of one) may lose one of the writes, never mix them into a
//!   record that passes the checksum (up to the same 2^-32).
//! - An invalidation hides no record that was whole at its last look: it
//!   looks again after a pause, marks only the same failing bytes, and adds
//!   the invalid bit to the occupied one, so a record that lands between
//!   its look and its mark is still read (a whole record counts whatever
//!   the bit says).
//! - A writer reuses a damaged bucket only once the candidates after it
//!   are known not to hold its key, so no older copy is left further on.

use std::time::{Duration, Instant};

use super::run::Waited;
use super::{store_or_advance, take, Batch, Look, Machine, Mode, Outcome, Role, Run, Step};
use crate::layout::{INVALID, OCCUPIED};
use crate::outcome::{Error, Result, Stats, Write};
use crate::transport::Remote;

/// How long a reader waits before its last look at a bucket it is about
/// to mark invalid: a write in flight has landed by then.
const INVALIDATE_PAUSE: Duration = Duration::from_millis(1);

/// Lockfree's read rule. A record failing its checksum is torn, whatever
/// else it says; an empty bucket never marked invalid ends the probe
/// (buckets never become empty again); a whole record of the key is a hit
/// whatever its invalid bit says (the bit may have landed after a write
/// that made the bucket whole again).
pub(crate) fn look(bk: &crate::layout::Bucket<'_>, key: &[u8]) -> Look {
    let mine = bk.key == key;
    if bk.occupied() && !bk.checksum_ok() {
        Look::Torn { mine }
    } else if !bk.occupied() && !bk.invalid() {
        Look::End
    } else if mine {
        Look::Hit
    } else {
        Look::Next
    }
}

pub(crate) struct Lockfree<'a> {
    run: Run<'a>,
}

impl<'a> Lockfree<'a> {
    pub(crate) fn new(run: Run<'a>) -> Self {
        for p in run.probes.iter_mut() {
            p.phase = Some(Role::Data);
        }
        Lockfree { run }
    }

    /// A bucket's data arrived for probe `i`.
    fn seen(&mut self, b: &Batch, j: usize, now: Instant) {
        let i = b.op(j).probe as usize;
        let data = b.bytes(j);
        let shape = *self.run.shape;
        let bk = shape.layout.decode(data, 0);
        let key = self.run.keys[i];
        let mine = bk.key == key;
        let seen = look(&bk, key);
        let damaged = matches!(seen, Look::Torn { .. });
        if damaged {
            // A write in flight (or damage): its key bytes may be torn too,
            // so neither "mine" nor "another key's" can be trusted yet.
            let p = &mut self.run.probes[i];
            if p.retries < shape.checksum_retries {
                p.retries += 1;
                self.run.stats.checksum_retries += 1;
                if self.run.past_deadline(i, now, Waited::ConsistentRead) {
                    self.run.probes[i].done = true;
                }
                return;
            }
            if self.run.mode == Mode::Read && mine {
                if p.pending == Outcome::Corrupt {
                    // Failing again after a last look that found it
                    // changed: writes keep tearing it. Corrupt, unmarked.
                    return self.run.decide(i, Outcome::Corrupt);
                }
                // Still failing: look once more after a pause, and mark it
                // invalid only if it still shows these very bytes. The
                // pause is this key's: the run's other keys go on.
                p.seen = crate::layout::fingerprint(data);
                p.phase = Some(Role::Check);
                p.since = now.checked_add(INVALIDATE_PAUSE);
                return;
            }
        }
        if self.run.mode == Mode::Read {
            match seen {
                Look::End => return self.run.decide(i, Outcome::Miss),
                Look::Hit => {
                    self.run.keep_value(i, bk.value);
                    return self.run.decide(i, Outcome::Hit);
                }
                _ => {}
            }
            if !self.run.probes[i].advance(&shape) {
                self.run.decide(i, Outcome::Miss);
            }
            return;
        }
        let reusable = damaged || (!bk.occupied() && bk.invalid());
        self.write_choice(b, i, bk.occupied(), reusable, mine);
    }

    /// Where a writer stores, given what its current candidate holds. A
    /// damaged bucket (or one marked invalid before it was written again)
    /// is reused only once the candidates after it are known not to hold
    /// the key: an older copy left further on would come back when the
    /// reused bucket is damaged again.
    fn write_choice(&mut self, b: &Batch, i: usize, occupied: bool, damaged: bool, mine: bool) {
        let shape = *self.run.shape;
        let p = &mut self.run.probes[i];
        let here = p.bucket;
        let choice = if damaged && !(occupied && mine) {
            p.spare.get_or_insert(here);
            if p.advance(&shape) {
                return;
            }
            Some(Write::Inserted)
        } else {
            // This key's bucket, whole or torn, is updated in place; with a
            // damaged bucket to reuse, nothing is evicted.
            take(occupied, mine, p.last(&shape)).map(|w| match (w, p.spare) {
                (Write::Evicted, Some(_)) => Write::Inserted,
                _ => w,
            })
        };
        let target = match choice {
            Some(Write::Updated) | None => here,
            Some(_) => p.spare.unwrap_or(here),
        };
        if target == here {
            return store_or_advance(&mut self.run, b, i, choice);
        }
        p.bucket = target;
        store_or_advance(&mut self.run, b, i, choice);
        let p = &mut self.run.probes[i];
        if p.phase != Some(Role::Store) {
            // Another key of the run stores to the spare: start over.
            p.k = 0;
            p.bucket = shape.place.candidate(p.hash, 0);
            p.spare = None;
            p.retries = 0;
        }
    }

    fn plan(&mut self, b: &mut Batch, now: Instant) -> Step {
        b.clear();
        if self.run.error.is_some() {
            return Step::Done;
        }
        let shape = *self.run.shape;
        // The soonest a pausing key's last look is due, if one waits.
        let mut due: Option<Instant> = None;
        for i in 0..self.run.probes.len() {
            let p = self.run.probes[i];
            if p.done {
                continue;
            }
            match p.phase {
                Some(Role::Data) => self.run.plan_read(b, i, Role::Data),
                Some(Role::Store) => self.run.plan_store(b, i),
                Some(Role::Check) => match p.since {
                    Some(t) if now < t => due = Some(due.map_or(t, |d| d.min(t))),
                    _ => self.run.plan_read(b, i, Role::Check),
                },
                Some(Role::Invalidate) => {
                    // The invalid bit is added, the occupied bit kept: a
                    // whole record that lands first stays readable.
                    let at = shape
                        .layout
                        .meta
                        .expect("lockfree buckets have a meta byte");
                    let to = Remote::new(p.rank, shape.layout.offset(p.bucket) + at as u64);
                    b.write(to, 1, i, Role::Invalidate)[0] = OCCUPIED | INVALID;
                }
                Some(Role::Defer) => self.run.probes[i].phase = Some(Role::Data),
                _ => unreachable!("lockfree plans reads, stores and invalidations"),
            }
        }
        match (b.is_empty(), due) {
            (false, _) => Step::Issue,
            // Only pausing keys are left: wait for the first of them.
            (true, Some(t)) => {
                b.wait = Some(t.saturating_duration_since(now));
                Step::Issue
            }
            (true, None) => Step::Done,
        }
    }
}

impl Machine for Lockfree<'_> {
    fn start(&mut self, b: &mut Batch, now: Instant) -> Step {
        self.plan(b, now)
    }

    fn on_complete(&mut self, b: &mut Batch, now: Instant) -> Step {
        for j in 0..b.len() {
            let op = b.op(j);
            let i = op.probe as usize;
            match op.role {
                Role::Data => self.seen(b, j, now),
                Role::Check => {
                    let p = &mut self.run.probes[i];
                    p.since = None;
                    if crate::layout::fingerprint(b.bytes(j)) == p.seen {
                        p.pending = Outcome::Corrupt;
                        p.phase = Some(Role::Invalidate);
                    } else {
                        // Changed since: judge it afresh, from a read (a
                        // whole record is a hit; still failing, corrupt).
                        p.pending = Outcome::Corrupt;
                        p.phase = Some(Role::Data);
                        self.seen(b, j, now);
                    }
                }
                Role::Store => {
                    // Back to reading for a probe that must go on; a
                    // decided store ends here.
                    let o = self.run.probes[i].pending;
                    self.run.decide(i, o);
                }
                Role::Invalidate => {
                    self.run.stats.invalidations += 1;
                    let o = self.run.probes[i].pending;
                    self.run.decide(i, o);
                }
                _ => {}
            }
        }
        // A probe whose store lost the bucket to an earlier key reads again.
        for p in self.run.probes.iter_mut() {
            if !p.done && p.phase.is_none() {
                p.phase = Some(Role::Data);
            }
        }
        self.plan(b, now)
    }

    fn on_error(&mut self, e: Error, b: &mut Batch, now: Instant) -> Step {
        // Nothing is held: a failed lock-free write may have left a torn
        // bucket, which readers detect by its checksum.
        self.run.failed(e, now);
        b.clear();
        Step::Done
    }

    fn finish(&mut self, stats: &mut Stats) -> Result<()> {
        self.run.finish(stats)
    }
}
