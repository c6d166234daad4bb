//! Lock-free (seed 000, 4.2): plain reads and writes; the writer stores a
//! CRC32 of key and value, the reader recomputes it, re-reads on mismatch,
//! and after repeated mismatches marks the bucket invalid so that a later
//! write can reuse it. No atomics: a lock-free read hit on the first
//! candidate is one remote read. It holds nothing, so an error has nothing
//! to give back.

use std::time::Instant;

use super::{take, Batch, Machine, Mode, Outcome, Role, Run, Step};
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
    fn seen(&mut self, i: usize, data: &[u8], now: Instant) {
        let shape = *self.run.shape;
        let b = shape.layout.decode(data, 0);
        let key = self.run.keys[i];
        if self.run.mode == Mode::Read {
            if !b.occupied() && !b.invalid() {
                // Buckets never become empty again: the key is not further on.
                return self.run.decide(i, Outcome::Miss);
            }
            if b.occupied() && b.key == key {
                if b.checksum_ok() {
                    self.run.keep_value(i, b.value);
                    return self.run.decide(i, Outcome::Hit);
                }
                let p = &mut self.run.probes[i];
                if p.retries < shape.checksum_retries {
                    // Probably a write in flight: read the same bucket again.
                    p.retries += 1;
                    self.run.stats.checksum_retries += 1;
                    if self.run.past_deadline(i, now, "a consistent read") {
                        self.run.probes[i].done = true;
                    }
                    return;
                }
                p.pending = Outcome::Corrupt;
                p.phase = Some(Role::Invalidate);
                return;
            }
            if !self.run.probes[i].advance(&shape) {
                self.run.decide(i, Outcome::Miss);
            }
            return;
        }
        let last = self.run.probes[i].last(&shape);
        match take(b.occupied(), b.invalid(), b.key == key, last) {
            Some(w) => {
                let (rank, bucket) = (self.run.probes[i].rank, self.run.probes[i].bucket);
                // Two keys of this run that chose one bucket in this round do
                // not both write it: the later one reads it again next round.
                let taken = self.run.probes[..i]
                    .iter()
                    .any(|q| q.phase == Some(Role::Store) && q.rank == rank && q.bucket == bucket);
                if !taken {
                    let p = &mut self.run.probes[i];
                    p.pending = super::Outcome::of(w);
                    p.phase = Some(Role::Store);
                }
            }
            None => {
                self.run.probes[i].advance(&shape);
            }
        }
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
                Role::Data => self.seen(i, b.bytes(j), now),
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
