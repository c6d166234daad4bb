//! Coarse-grained locking (the MPI-DHT paper, 3.1): one lock on a rank's whole region
//! per operation, taken once per batch for all of the batch's keys on that
//! rank (ranks are visited one after another, lowest first).
//!
//! Over MPI the lock is the window's own (`MPI_Win_lock`, shared for reads,
//! exclusive for writes), as in the seed. Elsewhere it is the 8-byte word at
//! the start of the region, used as the fine variant uses its bucket words
//! (see [`super::word`]): a writer takes it by compare-and-swap with its tag
//! and gives it back to a new version if it wrote; readers take nothing,
//! and keep what they read only if the word was the same free value before
//! and after (else they read the rank's keys again).

use std::time::Instant;

use super::run::Waited;
use super::{
    locked_look, locked_read, plan_lock_release, store_or_advance, take, word, Batch, Hold, Look,
    Machine, Mode, Outcome, Role, Run, Step,
};
use crate::outcome::{Error, Result, Stats, Write};
use crate::transport::Remote;

/// Where the current rank's group is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Group {
    /// Asking the transport for its own region lock.
    Lock,
    /// Reader: fetching the word before the data.
    Snap,
    /// Writer: taking the word.
    Acquire,
    /// Probing the group's keys, a round per batch.
    Probe,
    /// Reader: fetching the word after the data.
    Check,
    /// Writer: giving the word back.
    Release,
    /// Giving the transport's region lock back.
    Unlock,
}

/// Coarse's read rule: under the region lock, the first empty bucket ends
/// the probe.
pub(crate) fn look(bk: &crate::layout::Bucket<'_>, key: &[u8]) -> Look {
    locked_look(bk, key)
}

pub(crate) struct Coarse<'a> {
    run: Run<'a>,
    /// The rank being worked on, and the probe that keeps the region hold.
    rank: usize,
    lead: usize,
    group: Group,
    /// The transport's own lock was taken (MPI).
    native: bool,
    releasing: bool,
}

impl<'a> Coarse<'a> {
    pub(crate) fn new(run: Run<'a>) -> Self {
        Coarse {
            run,
            rank: 0,
            lead: 0,
            group: Group::Lock,
            native: false,
            releasing: false,
        }
    }

    fn member(&self, i: usize) -> bool {
        let p = &self.run.probes[i];
        p.rank == self.rank && !p.done
    }

    /// Starts on the lowest rank that has undecided keys.
    fn next_group(&mut self, b: &mut Batch) -> Step {
        b.clear();
        if self.run.error.is_some() {
            // A lock found lost when given back: nothing more is held.
            for p in self.run.probes.iter_mut() {
                p.done = true;
            }
            return Step::Done;
        }
        let next = (0..self.run.probes.len())
            .filter(|&i| !self.run.probes[i].done)
            .min_by_key(|&i| self.run.probes[i].rank);
        let Some(lead) = next else {
            return Step::Done;
        };
        self.lead = lead;
        self.rank = self.run.probes[lead].rank;
        self.group = Group::Lock;
        self.native = false;
        Step::LockRegion {
            rank: self.rank,
            exclusive: self.run.mode != Mode::Read,
        }
    }

    /// Every key of the group back to its first candidate.
    fn restart_members(&mut self) {
        let shape = *self.run.shape;
        for i in 0..self.run.probes.len() {
            if self.member(i) {
                let p = &mut self.run.probes[i];
                p.k = 0;
                p.retries = 0;
                p.bucket = shape.place.candidate(p.hash, 0);
                p.pending = Outcome::Pending;
                p.phase = Some(Role::Data);
            }
        }
    }

    /// The group's decisions become the keys' outcomes.
    fn commit_members(&mut self) {
        for i in 0..self.run.probes.len() {
            if self.member(i) {
                let o = self.run.probes[i].pending;
                self.run.decide(i, o);
            }
        }
    }

    fn word_at(&self) -> Remote {
        Remote::new(self.rank, 0)
    }

    /// Plans the group's lock step (or the next probing round).
    fn plan(&mut self, b: &mut Batch, progressed: bool, now: Instant) -> Step {
        b.clear();
        if self.run.error.is_some() {
            return self.fail(b, now);
        }
        let lead = self.lead;
        match self.group {
            Group::Snap | Group::Check => b.fetch(self.word_at(), lead, Role::Check),
            Group::Acquire => {
                let p = self.run.probes[lead];
                let held = p.free | self.run.tag(lead);
                self.run.probes[lead].word = held;
                b.cas(self.word_at(), p.free, held, lead, Role::Acquire);
            }
            Group::Release => {
                let p = self.run.probes[lead];
                let to = if p.dirty {
                    word::bumped(p.word)
                } else {
                    p.free
                };
                b.cas(self.word_at(), p.word, to, lead, Role::Release);
            }
            Group::Probe => {
                for i in 0..self.run.probes.len() {
                    if !self.member(i) {
                        continue;
                    }
                    let phase = self.run.probes[i].phase;
                    match phase {
                        Some(Role::Data) => self.run.plan_read(b, i, Role::Data),
                        Some(Role::Store) if self.run.accumulate(i) => {
                            self.run.probes[i].dirty = true;
                            self.run.probes[lead].dirty = true;
                            self.run.plan_store(b, i);
                        }
                        // An accumulation that keeps the bucket as it was.
                        Some(Role::Store) => self.run.probes[i].phase = None,
                        Some(Role::Defer) => self.run.probes[i].phase = Some(Role::Data),
                        _ => {}
                    }
                }
                if b.is_empty() {
                    // Every key of the group is decided: close the group.
                    self.group = if self.native {
                        Group::Unlock
                    } else if self.run.mode == Mode::Read {
                        Group::Check
                    } else {
                        Group::Release
                    };
                    return self.plan(b, true, now);
                }
            }
            Group::Unlock => return Step::UnlockRegion { rank: self.rank },
            Group::Lock => unreachable!("the region lock is asked for by next_group"),
        }
        self.run.pace(b, progressed);
        Step::Issue
    }

    /// A probing round's data for probe `i`.
    fn seen(&mut self, b: &Batch, j: usize) {
        let i = b.op(j).probe as usize;
        let data = b.bytes(j);
        let shape = *self.run.shape;
        let bk = shape.layout.decode(data, 0);
        if self.run.mode == Mode::Read {
            let seen = look(&bk, self.run.keys[i]);
            let o = match locked_read(&mut self.run, i, seen, bk.value) {
                Outcome::Pending if self.run.probes[i].advance(&shape) => return,
                Outcome::Pending => Outcome::Miss,
                o => o,
            };
            let p = &mut self.run.probes[i];
            p.pending = o;
            p.phase = None;
            return;
        }
        let last = self.run.probes[i].last(&shape);
        let choice = take(bk.occupied(), bk.key == self.run.keys[i], last);
        if let Some(w) = choice {
            // Under the region lock: what this store replaces.
            let same = (w == Write::Updated).then_some(bk.value);
            self.run.old_value(i, same, data);
        }
        store_or_advance(&mut self.run, b, i, choice);
    }

    /// After an error: rewrite what may be torn, give the region back.
    fn fail(&mut self, b: &mut Batch, now: Instant) -> Step {
        self.releasing = true;
        for p in self.run.probes.iter_mut() {
            p.done = true;
        }
        self.run.failed_at(now);
        if plan_lock_release(&mut self.run, b) && self.run.may_retry_release(now) {
            return Step::Issue;
        }
        b.clear();
        if self.native && self.group != Group::Unlock {
            self.group = Group::Unlock;
            return Step::UnlockRegion { rank: self.rank };
        }
        Step::Done
    }
}

impl Machine for Coarse<'_> {
    fn start(&mut self, b: &mut Batch, _now: Instant) -> Step {
        self.next_group(b)
    }

    fn on_complete(&mut self, b: &mut Batch, now: Instant) -> Step {
        if self.releasing {
            if self.group == Group::Unlock {
                return Step::Done;
            }
            super::released(&mut self.run, b);
            return self.fail(b, now);
        }
        let lead = self.lead;
        let mut progressed = true;
        match self.group {
            Group::Lock => {
                self.native = b.native;
                self.restart_members();
                self.group = if self.native {
                    Group::Probe
                } else if self.run.mode == Mode::Read {
                    Group::Snap
                } else {
                    self.run.probes[lead].free = 0;
                    Group::Acquire
                };
            }
            Group::Snap => {
                let w = b.word(0);
                self.run.probes[lead].seen = w;
                if word::held(w) {
                    self.run.past_deadline(lead, now, Waited::RegionLock);
                    progressed = false;
                } else {
                    self.group = Group::Probe;
                }
            }
            Group::Acquire => {
                let old = b.word(0);
                let p = &mut self.run.probes[lead];
                if old == p.free {
                    p.hold = Hold::Held;
                    self.group = Group::Probe;
                } else if !word::held(old) {
                    p.free = old;
                    self.run.past_deadline(lead, now, Waited::RegionLock);
                } else {
                    p.seen = old;
                    p.free = word::free(old);
                    self.run.past_deadline(lead, now, Waited::RegionLock);
                    progressed = false;
                }
            }
            Group::Probe => {
                for j in 0..b.len() {
                    let op = b.op(j);
                    let i = op.probe as usize;
                    match op.role {
                        Role::Data => self.seen(b, j),
                        Role::Store => self.run.probes[i].phase = None,
                        _ => {}
                    }
                }
            }
            Group::Check => {
                if b.word(0) == self.run.probes[lead].seen {
                    self.commit_members();
                    return self.next_group(b);
                }
                // A writer came and went: read the rank's keys again, after
                // a pause, within the deadline.
                self.run.stats.lock_retries += 1;
                self.restart_members();
                self.group = Group::Snap;
                self.run.past_deadline(lead, now, Waited::ConsistentRead);
                progressed = false;
            }
            Group::Release => {
                if b.word(0) != self.run.probes[lead].word {
                    self.run.lost(lead, Waited::RegionLock, b.word(0));
                }
                let p = &mut self.run.probes[lead];
                p.hold = Hold::None;
                p.dirty = false;
                self.commit_members();
                return self.next_group(b);
            }
            Group::Unlock => {
                self.commit_members();
                return self.next_group(b);
            }
        }
        self.plan(b, progressed, now)
    }

    fn on_error(&mut self, e: Error, b: &mut Batch, now: Instant) -> Step {
        let was_releasing = self.releasing;
        self.run.failed(e, now);
        if self.group == Group::Lock || (was_releasing && self.group == Group::Unlock) {
            // The region lock was not taken, or not given back: nothing
            // more can be done from here.
            b.clear();
            return Step::Done;
        }
        if self.group == Group::Acquire && self.run.probes[self.lead].hold == Hold::None {
            self.run.probes[self.lead].hold = Hold::Maybe;
        }
        let step = self.fail(b, now);
        if was_releasing && step == Step::Issue {
            b.wait = Some(std::time::Duration::from_millis(1));
        }
        step
    }

    fn finish(&mut self, stats: &mut Stats) -> Result<()> {
        self.run.finish(stats)
    }
}
