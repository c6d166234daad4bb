//! Lock-free (seed 000, 4.2): plain reads and writes; the writer stores a
//! CRC32 of key and value, the reader recomputes it, re-reads on mismatch,
//! and after repeated mismatches marks the bucket invalid so that a later
//! write can reuse it. No atomics: a lock-free read hit on the first
//! candidate is one remote read. It holds nothing, so an error has nothing
//! to give back.

use std::time::Instant;

use super::{store_or_advance, take, Batch, Machine, Mode, Outcome, Role, Run, Step};
use crate::layout::INVALID;
use crate::outcome::{Error, Result, Stats};
use crate::transport::Remote;

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
        if bk.occupied() && !bk.checksum_ok() {
            // A write in flight (or damage): its key bytes may be torn too,
            // so neither "mine" nor "another key's" can be trusted yet.
            let p = &mut self.run.probes[i];
            if p.retries < shape.checksum_retries {
                p.retries += 1;
                self.run.stats.checksum_retries += 1;
                if self.run.past_deadline(i, now, "a consistent read") {
                    self.run.probes[i].done = true;
                }
                return;
            }
            if self.run.mode == Mode::Read && mine {
                // Still failing: give up on it, and mark it for reuse.
                p.pending = Outcome::Corrupt;
                p.phase = Some(Role::Invalidate);
                return;
            }
            // A reader moves past it; a writer takes it as damaged.
        }
        let damaged = bk.occupied() && !bk.checksum_ok();
        if self.run.mode == Mode::Read {
            if !bk.occupied() && !bk.invalid() {
                // Buckets never become empty again: the key is not further on.
                return self.run.decide(i, Outcome::Miss);
            }
            if bk.occupied() && mine && !damaged {
                self.run.keep_value(i, bk.value);
                return self.run.decide(i, Outcome::Hit);
            }
            if !self.run.probes[i].advance(&shape) {
                self.run.decide(i, Outcome::Miss);
            }
            return;
        }
        let last = self.run.probes[i].last(&shape);
        let choice = take(bk.occupied(), bk.invalid() || damaged, mine, last);
        store_or_advance(&mut self.run, b, i, choice);
    }

    fn plan(&mut self, b: &mut Batch) -> Step {
        b.clear();
        if self.run.error.is_some() {
            return Step::Done;
        }
        let shape = *self.run.shape;
        for i in 0..self.run.probes.len() {
            let p = self.run.probes[i];
            if p.done {
                continue;
            }
            match p.phase {
                Some(Role::Data) => {
                    b.read(
                        shape.data_at(p.rank, p.bucket),
                        shape.layout.data_len(),
                        i,
                        Role::Data,
                    );
                }
                Some(Role::Store) => {
                    let buf = b.write(
                        shape.data_at(p.rank, p.bucket),
                        shape.layout.data_len(),
                        i,
                        Role::Store,
                    );
                    self.run.encode(i, buf);
                }
                Some(Role::Invalidate) => {
                    let at = shape
                        .layout
                        .meta
                        .expect("lockfree buckets have a meta byte");
                    let to = Remote::new(p.rank, shape.layout.offset(p.bucket) + at as u64);
                    b.write(to, 1, i, Role::Invalidate)[0] = INVALID;
                }
                Some(Role::Defer) => self.run.probes[i].phase = Some(Role::Data),
                _ => unreachable!("lockfree plans reads, stores and invalidations"),
            }
        }
        if b.is_empty() {
            Step::Done
        } else {
            Step::Issue
        }
    }
}

impl Machine for Lockfree<'_> {
    fn start(&mut self, b: &mut Batch, _now: Instant) -> Step {
        self.plan(b)
    }

    fn on_complete(&mut self, b: &mut Batch, now: Instant) -> Step {
        for j in 0..b.len() {
            let op = b.op(j);
            let i = op.probe as usize;
            match op.role {
                Role::Data => self.seen(b, j, now),
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
        self.plan(b)
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
