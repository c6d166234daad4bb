//! Fine-grained locking (the MPI-DHT paper, 4.1): an 8-byte lock word per bucket.
//!
//! A writer takes the bucket's word by compare-and-swap (free value to the
//! same value plus its tag, see [`super::word`]), reads the bucket, writes
//! it if it takes it, and gives the word back in a later batch (to a new
//! version if it wrote). The first guess of the free value is 0, a fresh
//! bucket's; a wrong guess returns the real value, and the next round uses
//! it. Four batches for a write to a fresh bucket, as before.
//!
//! A reader takes no lock: it fetches the word, reads the data, fetches the
//! word again, and keeps the data only if both fetches saw the same free
//! value (a sequence lock; three batches, as the seed's fetch-add, read,
//! fetch-add; one batch on a transport that keeps a batch's order,
//! [`crate::transport::Caps::in_order`]). So a steady stream of
//! readers cannot starve a writer, and a reader that fails holds nothing. The seed's readers count themselves
//! into the word instead; an increment whose batch failed could be neither
//! kept (the bucket would stay read-locked) nor safely undone.

use std::time::Instant;

use super::run::Waited;
use super::{
    lock_failed, lock_released, locked_look, locked_read, release_step, take, word, Batch, Hold,
    Look, Machine, Mode, Outcome, Role, Run, Step,
};
use crate::outcome::{Error, Result, Stats, Write};

/// Fine's read rule, given the bucket's lock word as the reader saw it: a
/// held lock is never read through (a writer that died, or gave up, may
/// have torn what lies under it); a free one is a locked read's rule.
pub(crate) fn look(lock: u64, bk: &crate::layout::Bucket<'_>, key: &[u8]) -> Look {
    if word::held(lock) {
        Look::Held
    } else {
        locked_look(bk, key)
    }
}

pub(crate) struct Fine<'a> {
    run: Run<'a>,
    releasing: bool,
}

impl<'a> Fine<'a> {
    pub(crate) fn new(run: Run<'a>) -> Self {
        let first = if run.mode == Mode::Read {
            Role::Snap
        } else {
            Role::Acquire
        };
        for p in run.probes.iter_mut() {
            p.phase = Some(first);
            p.free = 0;
        }
        Fine {
            run,
            releasing: false,
        }
    }

    /// Reads the completion of op `j` of `b` into its probe's state;
    /// returns whether the probe moved on (rather than waiting). An op
    /// planned ahead of a step its probe did not reach (a merged read's
    /// data after a snapshot that found the lock held) is passed over.
    fn complete(&mut self, b: &Batch, j: usize, now: Instant) -> bool {
        let shape = *self.run.shape;
        let op = b.op(j);
        let i = op.probe as usize;
        if self.run.probes[i].phase != Some(op.role) {
            return false;
        }
        match op.role {
            Role::Snap => {
                let w = b.word(j);
                let p = &mut self.run.probes[i];
                p.seen = w;
                if word::held(w) {
                    // A writer has it: snapshot again after a wait.
                    self.run.past_deadline(i, now, Waited::ConsistentRead);
                    return false;
                }
                p.phase = Some(Role::Data);
            }
            Role::Data => {
                let bk = shape.layout.decode(b.bytes(j), 0);
                let key = self.run.keys[i];
                if self.run.mode == Mode::Read {
                    // Decided only if the check finds the word unchanged
                    // (another key's: the check moves on, or misses).
                    let seen = look(self.run.probes[i].seen, &bk, key);
                    let o = locked_read(&mut self.run, i, seen, bk.value);
                    let p = &mut self.run.probes[i];
                    p.pending = o;
                    p.phase = Some(Role::Check);
                } else {
                    match take(
                        bk.occupied(),
                        bk.key == key,
                        self.run.probes[i].last(&shape),
                    ) {
                        Some(w) => {
                            let same = (w == Write::Updated).then_some(bk.value);
                            self.run.old_value(i, same, b.bytes(j));
                            let p = &mut self.run.probes[i];
                            p.pending = Outcome::of(w);
                            p.phase = Some(Role::Store);
                        }
                        None => self.run.probes[i].phase = Some(Role::Release),
                    }
                }
            }
            Role::Check => {
                let w = b.word(j);
                let p = &mut self.run.probes[i];
                if w != p.seen {
                    // A writer came and went: the data may be torn.
                    p.seen = w;
                    p.phase = Some(Role::Snap);
                    self.run.stats.lock_retries += 1;
                    self.run.past_deadline(i, now, Waited::ConsistentRead);
                    return true;
                }
                match p.pending {
                    Outcome::Pending => {
                        if p.advance(&shape) {
                            p.phase = Some(Role::Snap);
                        } else {
                            self.run.decide(i, Outcome::Miss);
                        }
                    }
                    o => self.run.decide(i, o),
                }
            }
            Role::Acquire => {
                let old = b.word(j);
                let p = &mut self.run.probes[i];
                if old == p.free {
                    p.hold = Hold::Held;
                    p.phase = Some(Role::Data);
                } else if !word::held(old) {
                    // The guess of the free value was wrong: now we know it.
                    p.free = old;
                    self.run.past_deadline(i, now, Waited::Lock);
                } else {
                    // Held by another writer: try its likely release value.
                    p.seen = old;
                    p.free = word::free(old);
                    self.run.past_deadline(i, now, Waited::Lock);
                    return false;
                }
            }
            Role::Store => self.run.probes[i].phase = Some(Role::Release),
            Role::Release => {
                if b.word(j) != self.run.probes[i].word {
                    self.run.lost(i, Waited::Lock, b.word(j));
                }
                let p = &mut self.run.probes[i];
                p.hold = Hold::None;
                p.dirty = false;
                match p.pending {
                    Outcome::Pending => {
                        // Another key's bucket: on to the next candidate.
                        p.advance(&shape);
                        p.free = 0;
                        p.phase = Some(Role::Acquire);
                    }
                    o => self.run.decide(i, o),
                }
            }
            _ => unreachable!("fine plans snapshots, reads, checks, acquires, stores, releases"),
        }
        true
    }

    fn plan(&mut self, b: &mut Batch, progressed: bool, now: Instant) -> Step {
        b.clear();
        if self.run.error.is_some() {
            // A deadline passed: give back what is held.
            self.releasing = true;
            for p in self.run.probes.iter_mut() {
                p.done = true;
            }
            self.run.failed_at(now);
            return release_step(&mut self.run, b, now);
        }
        let shape = *self.run.shape;
        for i in 0..self.run.probes.len() {
            let p = self.run.probes[i];
            if p.done {
                continue;
            }
            let word_at = shape.word_at(p.rank, p.bucket);
            match p.phase {
                Some(Role::Snap) if shape.in_order => {
                    // The three steps of a read in one batch: none
                    // depends on an earlier one's result, only whether it
                    // is kept does (see `complete`).
                    b.fetch(word_at, i, Role::Snap);
                    self.run.plan_read(b, i, Role::Data);
                    b.fetch(word_at, i, Role::Check);
                }
                Some(Role::Snap) | Some(Role::Check) => {
                    b.fetch(word_at, i, p.phase.unwrap());
                }
                Some(Role::Data) => self.run.plan_read(b, i, Role::Data),
                Some(Role::Acquire) => {
                    let held = p.free | self.run.tag(i);
                    self.run.probes[i].word = held;
                    b.cas(word_at, p.free, held, i, Role::Acquire);
                }
                Some(Role::Store) if self.run.accumulate(i) => {
                    self.run.probes[i].dirty = true;
                    self.run.plan_store(b, i);
                }
                Some(Role::Store) => {
                    // An accumulation that keeps the bucket as it was.
                    self.run.probes[i].phase = Some(Role::Release);
                    b.cas(word_at, p.word, p.free, i, Role::Release);
                }
                Some(Role::Release) => {
                    let to = if p.dirty {
                        word::bumped(p.word)
                    } else {
                        p.free
                    };
                    b.cas(word_at, p.word, to, i, Role::Release);
                }
                _ => unreachable!("every open fine probe has a phase"),
            }
        }
        if b.is_empty() {
            return Step::Done;
        }
        self.run.pace(b, progressed);
        Step::Issue
    }
}

impl Machine for Fine<'_> {
    fn start(&mut self, b: &mut Batch, now: Instant) -> Step {
        self.plan(b, true, now)
    }

    fn on_complete(&mut self, b: &mut Batch, now: Instant) -> Step {
        if self.releasing {
            return lock_released(&mut self.run, b, now);
        }
        let mut progressed = false;
        for j in 0..b.len() {
            progressed |= self.complete(b, j, now);
        }
        self.plan(b, progressed, now)
    }

    fn on_error(&mut self, e: Error, b: &mut Batch, now: Instant) -> Step {
        lock_failed(&mut self.run, &mut self.releasing, e, b, now)
    }

    fn finish(&mut self, stats: &mut Stats) -> Result<()> {
        self.run.finish(stats)
    }
}
