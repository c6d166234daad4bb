//! A transport that wraps any other and injects faults from a seed, for the
//! variants' tests: the idea of smoltcp's `FaultInjector`, applied to
//! one-sided operations instead of packets. Everything it does is drawn from
//! a small PRNG (splitmix64) seeded by [`Faults::seed`], so the same seed and
//! the same sequence of calls give the same faults.
//!
//! The faults, what each models on a real NIC, and where the model stops:
//!
//! - **Reordering** ([`Faults::reorder`]): the ops of a batch are executed
//!   one by one through the inner transport, in a seeded random order. A NIC
//!   posts a batch's ops at once and they may complete, and take effect at
//!   the target, in any order (the [`Transport`] contract: ops of one batch
//!   are unordered). Send and Recv ops are not reordered: they are passed
//!   through unchanged, together as one inner batch (executing a Recv alone
//!   before the matching Send of the same batch could deadlock two ranks).
//! - **Split reads** ([`Faults::split_reads`]): a Read of at least 16 bytes
//!   becomes two inner reads, cut at a random 8-byte-aligned remote offset
//!   strictly inside the range. A NIC moves a large read in several packets
//!   or DMA transactions with no atomicity beyond (at best) aligned 8-byte
//!   words. With reordering, the two halves are scheduled independently, so
//!   other ops of the batch may run between them (and the second half may
//!   run first).
//! - **Torn reads** ([`Faults::tear_reads`]): a concurrent writer between the
//!   two halves of a split read. Every whole aligned 8-byte word of the
//!   second half's remote range is atomically swapped for seeded garbage
//!   (never equal to the word's old value), the second half is read, and each
//!   word is restored with a compare-and-swap (expected: the garbage; new: the
//!   old value), so a real concurrent write that landed meanwhile is kept.
//!   The reader sees a torn value (first half old, whole words of the second
//!   half garbage) exactly once, and the table is unchanged afterwards. It
//!   models a writer that ignores the reader's locks, so use it on variants
//!   that claim to detect torn reads (checksums), not on locking ones. It
//!   needs atomics in the inner transport: without
//!   [`Caps::atomics`], reads are split but never torn. Other ranks
//!   can see the garbage while it is there, as they would see a real
//!   writer's bytes; a trailing partial word of the second half is not torn.
//! - **Delayed writes** ([`Faults::delay_writes`], [`Faults::delay_prob`]): a
//!   Write is reported complete at once, but its bytes are copied and applied
//!   to the target later. [`Delay::UntilNextBatch`] applies them at the start
//!   of this transport's next [`Transport::execute`] (before that batch's
//!   ops): transmit-complete with in-order delivery on one queue pair, where
//!   other ranks can see the old bytes in between. [`Delay::PastNextBatch`]
//!   applies them at the end of the next `execute` (after that batch's ops,
//!   e.g. after a lock release): the reordering a transmit-complete write
//!   permits on a real NIC. Where the model stops: a write of this transport
//!   that overlaps a write still pending from the previous batch is always
//!   delayed too, so this transport's own writes to the same bytes land in
//!   the order issued; but its own reads and atomics may pass its pending
//!   writes (as they may on a NIC without `FI_ORDER_*`). Pending writes are
//!   applied by [`FaultyTransport::flush`] and on drop, not by
//!   [`Transport::lock_region`]/[`Transport::unlock_region`], which are
//!   delegated unchanged (a delayed write can land after an MPI-style region
//!   unlock, which MPI itself forbids). If no further batch comes, a pending
//!   write lands only at `flush` or drop.
//!
//!   A write that asks for [`Completion::Delivery`] is never delayed: the
//!   transport contract is that it is visible when its batch returns (what
//!   `FI_DELIVERY_COMPLETE`, a fence or `MPI_Win_flush` give a real one).
//!   Pending writes it overlaps are applied first, so this transport's
//!   writes to the same bytes still land in the order issued.
//!   [`Faults::ignore_delivery`] delays Delivery writes like Transmit ones:
//!   a transport that does not honour delivery completion, so a test can
//!   show what goes wrong without ordering.
//! - **A failing op** ([`Faults::fail_op`]): counting every op this transport
//!   is asked to execute, from 1, across batches, the Nth fails, once. With
//!   seeded probability 1/2 it still takes effect at the target (executed
//!   through the inner transport) or not at all, because a real error
//!   completion does not tell which. The other ops of that batch are executed
//!   normally, and `execute` returns [`Error::Timeout`] naming the failed op's
//!   kind and target rank, with a timeout of zero. It models a lost
//!   completion or a dead link for one op, not a rank that stays dead: later
//!   batches succeed.
//!
//! Ops that cannot be faulted safely are passed through whole: reads and
//! writes outside the target's region (so the inner transport reports the
//! real error), atomics (never split, delayed or torn themselves), and
//! messages. [`FaultyTransport::injected`] counts what was actually injected,
//! so a test can assert that a fault happened rather than trust a
//! probability.

use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use fabkit_core::rng::Rng;
use fabkit_core::{Completion, Error, Op, Remote};

use super::wrap::{WrapLane, WrapperLane};
use super::{Caps, Transport};

/// When a delayed write becomes visible at its target.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Delay {
    /// At the start of this transport's next `execute`, before that batch's
    /// ops.
    UntilNextBatch,
    /// At the end of this transport's next `execute`, after that batch's ops.
    PastNextBatch,
}

/// Which faults to inject. [`Default`] injects none.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Faults {
    /// Seed of the PRNG every decision is drawn from.
    pub seed: u64,
    /// Execute each batch's ops one by one in a random order.
    pub reorder: bool,
    /// Probability that a Read of at least 16 bytes is split in two.
    pub split_reads: f64,
    /// Probability that a split read is torn by a concurrent writer between
    /// its halves (needs atomics in the inner transport).
    pub tear_reads: f64,
    /// Delay the visibility of writes, and until when.
    pub delay_writes: Option<Delay>,
    /// Probability that a Write is delayed (with `delay_writes` set).
    pub delay_prob: f64,
    /// Delay writes that ask for [`Completion::Delivery`] too (by default
    /// they are never delayed).
    pub ignore_delivery: bool,
    /// The Nth op (from 1, across batches) fails, once.
    pub fail_op: Option<u64>,
    /// Batches a driver may keep in flight (0 and 1: none). A batch posted
    /// runs, with its faults, only when it is completed, and a lane in
    /// flight says it is ready by chance (one in two), so batches of
    /// several lanes run in an order other than the one they were posted
    /// in.
    pub lanes: usize,
}

impl Faults {
    /// No faults yet, PRNG seeded with `seed`; add faults with the builder
    /// methods.
    pub fn seeded(seed: u64) -> Self {
        Faults {
            seed,
            ..Faults::default()
        }
    }

    /// Reorder the ops of every batch.
    pub fn reorder(mut self) -> Self {
        self.reorder = true;
        self
    }

    /// Split reads of at least 16 bytes with probability `p`.
    pub fn split_reads(mut self, p: f64) -> Self {
        self.split_reads = p;
        self
    }

    /// Tear split reads with probability `p`.
    pub fn tear_reads(mut self, p: f64) -> Self {
        self.tear_reads = p;
        self
    }

    /// Delay writes with probability `p` until `delay`.
    pub fn delay_writes(mut self, delay: Delay, p: f64) -> Self {
        self.delay_writes = Some(delay);
        self.delay_prob = p;
        self
    }

    /// Models a provider or transport that does not honour delivery
    /// completion: writes with [`Completion::Delivery`] are delayed like
    /// [`Completion::Transmit`] ones (with `delay_writes`), so a test can
    /// show what goes wrong without ordering.
    pub fn ignore_delivery(mut self) -> Self {
        self.ignore_delivery = true;
        self
    }

    /// Fail the `n`th op (from 1).
    pub fn fail_op(mut self, n: u64) -> Self {
        self.fail_op = Some(n);
        self
    }

    /// Let a driver keep `n` batches in flight, run in another order than
    /// posted (see [`Faults::lanes`]).
    pub fn lanes(mut self, n: usize) -> Self {
        self.lanes = n;
        self
    }
}

/// What a [`FaultyTransport`] has injected so far.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Injected {
    /// Batches executed in an order other than the submitted one.
    pub reordered_batches: u64,
    /// Reads split in two.
    pub split_reads: u64,
    /// Split reads whose second half saw garbage (at least one word).
    pub torn_reads: u64,
    /// Writes whose visibility was delayed.
    pub delayed_writes: u64,
    /// Ops failed.
    pub failed_ops: u64,
    /// Of those, the ones that nevertheless took effect at the target.
    pub failed_applied: u64,
    /// Batches run while a batch posted before them was still in flight.
    pub overtaking_batches: u64,
}

/// A write reported complete but not yet applied.
#[derive(Debug)]
struct PendingWrite {
    to: Remote,
    data: Vec<u8>,
    completion: Completion,
}

impl PendingWrite {
    fn overlaps(&self, to: Remote, len: usize) -> bool {
        let (a, b) = (self.to.offset, to.offset);
        self.to.rank == to.rank && a < b + len as u64 && b < a + self.data.len() as u64
    }
}

#[derive(Debug)]
struct State {
    rng: Rng,
    seen: u64,
    fail_op: Option<u64>,
    pending: Vec<PendingWrite>,
    injected: Injected,
    /// Batches posted on lanes and not yet run, by posting number.
    in_flight: Vec<u64>,
    posted: u64,
}

/// A [`FaultyTransport`]'s own part of a lane: a batch posted, not yet
/// run.
#[derive(Debug, Default)]
pub struct FaultyLane {
    deferred: super::Deferred,
    /// Its posting number.
    number: u64,
}

/// One unit of a planned batch.
#[derive(Debug)]
enum Step {
    /// One op, unchanged, alone.
    Whole(usize),
    /// A message op (only while planning; merged into a `Batch`).
    Message(usize),
    /// These ops (ascending indices), unchanged, as one inner batch.
    Batch(Vec<usize>),
    /// The first `cut` bytes of a read.
    First { op: usize, cut: usize },
    /// The rest of a read, torn by swapping in `garbage` (one value per whole
    /// word; empty: not torn).
    Second {
        op: usize,
        cut: usize,
        garbage: Vec<u64>,
    },
    /// The injected failure; `apply`: it still takes effect.
    Fail { op: usize, apply: bool },
}

/// Wraps a transport and injects [`Faults`] into the batches it executes.
#[derive(Debug)]
pub struct FaultyTransport<T: Transport> {
    inner: T,
    faults: Faults,
    state: Mutex<State>,
}

impl<T: Transport> FaultyTransport<T> {
    /// Injects `faults` into what `inner` executes.
    pub fn new(inner: T, faults: Faults) -> Self {
        let state = State {
            rng: Rng::new(faults.seed),
            seen: 0,
            fail_op: faults.fail_op,
            pending: Vec::new(),
            injected: Injected::default(),
            in_flight: Vec::new(),
            posted: 0,
        };
        FaultyTransport {
            inner,
            faults,
            state: Mutex::new(state),
        }
    }

    /// The wrapped transport.
    pub fn inner(&self) -> &T {
        &self.inner
    }

    /// The configured faults.
    pub fn faults(&self) -> &Faults {
        &self.faults
    }

    /// What has been injected so far.
    pub fn injected(&self) -> Injected {
        self.state().injected
    }

    /// Ops this transport was asked to execute since creation or the last
    /// [`FaultyTransport::reset_count`] (submitted ops, not the inner ops
    /// the faults turn them into).
    pub fn ops_seen(&self) -> u64 {
        self.state().seen
    }

    /// Restarts the op count at zero.
    pub fn reset_count(&self) {
        self.state().seen = 0;
    }

    /// Arms (or with `None` disarms) the failure of the `n`th op, counted as
    /// [`FaultyTransport::ops_seen`] counts. It fires once, then disarms.
    pub fn set_fail_op(&self, n: Option<u64>) {
        self.state().fail_op = n;
    }

    /// Delayed writes not yet applied.
    pub fn pending_writes(&self) -> usize {
        self.state().pending.len()
    }

    /// Applies every pending delayed write now, in the order issued. Returns
    /// the first error (the others are still attempted).
    pub fn flush(&self) -> Result<(), T::Error> {
        let pending = std::mem::take(&mut self.state().pending);
        let mut first = None;
        for w in &pending {
            keep(&mut first, self.apply(w));
        }
        first.map_or(Ok(()), Err)
    }

    /// Batches a driver may keep in flight: its own lanes, 1 for none.
    fn lanes(&self) -> usize {
        self.faults.lanes.max(1)
    }

    fn state(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn apply(&self, w: &PendingWrite) -> Result<(), T::Error> {
        self.inner.execute(&mut [Op::Write {
            to: w.to,
            from: &w.data,
            completion: w.completion,
        }])
    }

    /// Whether `len` bytes at `at` lie inside the target's region.
    fn fits(&self, at: Remote, len: usize) -> bool {
        at.rank < self.inner.ranks()
            && usize::try_from(at.offset)
                .ok()
                .and_then(|o| o.checked_add(len))
                .is_some_and(|end| end <= self.inner.region_len(at.rank))
    }

    /// Decides every fault of this batch under the lock. Returns the steps,
    /// the pending writes to apply before them and those to apply after.
    fn plan(&self, ops: &[Op<'_>]) -> (Vec<Step>, Vec<PendingWrite>, Vec<PendingWrite>) {
        let f = &self.faults;
        let mut guard = self.state();
        let st = &mut *guard;
        let taken = std::mem::take(&mut st.pending);
        let (mut early, mut late) = match f.delay_writes {
            Some(Delay::PastNextBatch) => (Vec::new(), taken),
            _ => (taken, Vec::new()),
        };
        let mut steps = Vec::with_capacity(ops.len());
        for (i, op) in ops.iter().enumerate() {
            st.seen += 1;
            if st.fail_op == Some(st.seen) {
                st.fail_op = None;
                let apply = st.rng.next_u64() & 1 == 1;
                st.injected.failed_ops += 1;
                st.injected.failed_applied += u64::from(apply);
                steps.push(Step::Fail { op: i, apply });
                continue;
            }
            match op {
                Op::Send { .. } | Op::Recv { .. } => steps.push(Step::Message(i)),
                Op::Read { from, into }
                    if into.len() >= 16
                        && self.fits(*from, into.len())
                        && st.rng.chance(f.split_reads) =>
                {
                    let (off, len) = (from.offset, into.len() as u64);
                    // Aligned boundaries strictly inside (off, off + len).
                    let lo = (off / 8 + 1) * 8;
                    let hi = (off + len - 1) / 8 * 8;
                    let at = lo + 8 * st.rng.below((hi - lo) / 8 + 1);
                    let cut = (at - off) as usize;
                    let tear = self.inner.caps().atomics && st.rng.chance(f.tear_reads);
                    let words = if tear { (into.len() - cut) / 8 } else { 0 };
                    let garbage = (0..words).map(|_| st.rng.next_u64()).collect();
                    st.injected.split_reads += 1;
                    steps.push(Step::First { op: i, cut });
                    steps.push(Step::Second {
                        op: i,
                        cut,
                        garbage,
                    });
                }
                Op::Write {
                    to,
                    from,
                    completion,
                } if f.delay_writes.is_some()
                    && !from.is_empty()
                    && self.fits(*to, from.len())
                    && (*completion == Completion::Transmit || f.ignore_delivery)
                    && (late.iter().any(|w| w.overlaps(*to, from.len()))
                        || st.rng.chance(f.delay_prob)) =>
                {
                    st.injected.delayed_writes += 1;
                    st.pending.push(PendingWrite {
                        to: *to,
                        data: from.to_vec(),
                        completion: *completion,
                    });
                }
                Op::Write { to, from, .. } if late.iter().any(|w| w.overlaps(*to, from.len())) => {
                    // A write that is not delayed (a Delivery one) must not
                    // be overwritten by an older pending write: land them all
                    // before this batch, in the order issued.
                    early.append(&mut late);
                    steps.push(Step::Whole(i));
                }
                _ => steps.push(Step::Whole(i)),
            }
        }
        let steps = if f.reorder {
            // Messages travel together, where the first of them was.
            let messages: Vec<usize> = steps
                .iter()
                .filter_map(|s| match s {
                    Step::Message(i) => Some(*i),
                    _ => None,
                })
                .collect();
            let mut merged: Vec<Step> = Vec::with_capacity(steps.len());
            let mut messages = Some(messages);
            for s in steps {
                match s {
                    Step::Message(_) => {
                        if let Some(m) = messages.take() {
                            merged.push(Step::Batch(m));
                        }
                    }
                    s => merged.push(s),
                }
            }
            let mut order: Vec<(usize, Step)> = merged.into_iter().enumerate().collect();
            for k in (1..order.len()).rev() {
                let j = st.rng.below(k as u64 + 1) as usize;
                order.swap(k, j);
            }
            if order.iter().enumerate().any(|(k, (was, _))| k != *was) {
                st.injected.reordered_batches += 1;
            }
            order.into_iter().map(|(_, s)| s).collect()
        } else {
            // Everything unfaulted as one inner batch, then the rest.
            let mut plain = Vec::new();
            let mut rest = Vec::new();
            for s in steps {
                match s {
                    Step::Whole(i) | Step::Message(i) => plain.push(i),
                    s => rest.push(s),
                }
            }
            let mut out = Vec::with_capacity(rest.len() + 1);
            if !plain.is_empty() {
                out.push(Step::Batch(plain));
            }
            out.extend(rest);
            out
        };
        (steps, early, late)
    }

    fn run(&self, step: &Step, ops: &mut [Op<'_>]) -> Result<(), T::Error> {
        match step {
            Step::Whole(i) | Step::Message(i) => {
                self.inner.execute(std::slice::from_mut(&mut ops[*i]))
            }
            Step::Batch(idx) => run_subset(&self.inner, ops, idx),
            Step::First { op, cut } => {
                let Op::Read { from, into } = &mut ops[*op] else {
                    unreachable!("only reads are split")
                };
                self.inner.execute(&mut [Op::Read {
                    from: *from,
                    into: &mut into[..*cut],
                }])
            }
            Step::Second { op, cut, garbage } => {
                let Op::Read { from, into } = &mut ops[*op] else {
                    unreachable!("only reads are split")
                };
                let at = Remote::new(from.rank, from.offset + *cut as u64);
                self.torn_read(at, &mut into[*cut..], garbage)
            }
            Step::Fail { op, apply } => {
                let (kind, peer) = (ops[*op].kind(), ops[*op].target().rank);
                if *apply {
                    self.inner.execute(std::slice::from_mut(&mut ops[*op]))?;
                }
                Err(Error::Timeout {
                    op: kind,
                    peer,
                    timeout: Duration::ZERO,
                }
                .into())
            }
        }
    }

    /// Reads `into.len()` bytes at the aligned `at`, with `garbage` swapped
    /// into its first `garbage.len()` words meanwhile and restored after.
    fn torn_read(&self, at: Remote, into: &mut [u8], garbage: &[u64]) -> Result<(), T::Error> {
        let read = |into: &mut [u8]| self.inner.execute(&mut [Op::Read { from: at, into }]);
        if garbage.is_empty() {
            return read(into);
        }
        let word = |k: usize| Remote::new(at.rank, at.offset + 8 * k as u64);
        let mut old = vec![0u64; garbage.len()];
        let mut swaps: Vec<Op<'_>> = old
            .iter_mut()
            .zip(garbage)
            .enumerate()
            .map(|(k, (old, &new))| Op::Swap {
                at: word(k),
                new,
                old,
            })
            .collect();
        self.inner.execute(&mut swaps)?;
        drop(swaps);
        // A word that already held its garbage value gets another one, so
        // the garbage never equals the old value.
        let mut used = garbage.to_vec();
        for k in 0..used.len() {
            if old[k] == used[k] {
                used[k] = !used[k];
                let mut was = 0;
                self.inner.execute(&mut [Op::Swap {
                    at: word(k),
                    new: used[k],
                    old: &mut was,
                }])?;
                // Our first garbage, or what a concurrent writer stored since.
                old[k] = was;
            }
        }
        let result = read(into);
        let mut seen = vec![0u64; used.len()];
        let mut restores: Vec<Op<'_>> = seen
            .iter_mut()
            .enumerate()
            .map(|(k, seen)| Op::CompareAndSwap {
                at: word(k),
                expected: used[k],
                new: old[k],
                old: seen,
            })
            .collect();
        let restored = self.inner.execute(&mut restores);
        drop(restores);
        if result.is_ok() && restored.is_ok() {
            self.state().injected.torn_reads += 1;
        }
        result.and(restored)
    }
}

/// Executes `ops[idx]` (ascending indices) as one inner batch: swaps them to
/// the front, executes, and swaps them back, so the caller's slice is
/// unchanged.
fn run_subset<T: Transport>(inner: &T, ops: &mut [Op<'_>], idx: &[usize]) -> Result<(), T::Error> {
    for (j, &i) in idx.iter().enumerate() {
        ops.swap(j, i);
    }
    let result = inner.execute(&mut ops[..idx.len()]);
    for (j, &i) in idx.iter().enumerate().rev() {
        ops.swap(j, i);
    }
    result
}

/// Keeps the first error.
fn keep<E>(first: &mut Option<E>, result: Result<(), E>) {
    if let Err(e) = result {
        first.get_or_insert(e);
    }
}

impl<T: Transport> super::wrap::Wrapper for FaultyTransport<T> {
    type Inner = T;
    type OwnLane = FaultyLane;

    fn inner(&self) -> &T {
        &self.inner
    }
    fn by_memory(&self, rank: usize) -> bool {
        self.inner.by_memory(rank)
    }
    fn name(&self) -> String {
        format!("faulty {}", self.inner.name())
    }
    fn caps(&self) -> Caps {
        Caps {
            // It reorders a batch's ops (and splits its reads), so it
            // never keeps their order, whatever the inner transport does.
            in_order: false,
            // Its own lanes: batches held back until completed.
            depth: self.lanes(),
            ..self.inner.caps()
        }
    }

    /// Applies the writes delayed until this batch, executes the batch with
    /// its faults, applies the writes delayed past it, and returns the first
    /// error of all that (the injected failure's error where it occurred).
    fn execute(&self, ops: &mut [Op<'_>]) -> Result<(), T::Error> {
        let (steps, early, late) = self.plan(ops);
        let mut first = None;
        for w in &early {
            keep(&mut first, self.apply(w));
        }
        for step in &steps {
            keep(&mut first, self.run(step, ops));
        }
        for w in &late {
            keep(&mut first, self.apply(w));
        }
        first.map_or(Ok(()), Err)
    }

    /// Its own lane only: a batch runs, with its faults, through the inner
    /// transport's `execute`, never on the inner's lanes, so none is made.
    fn lane(&self) -> Result<WrapperLane<Self>, T::Error> {
        Ok(WrapLane::default())
    }
    fn post(&self, lane: &mut WrapperLane<Self>, ops: &mut [Op<'_>]) -> Result<bool, T::Error> {
        let lane = &mut lane.own;
        if !lane.deferred.post(self.lanes()) {
            return Transport::execute(self, ops).map(|()| false);
        }
        let mut st = self.state.lock().unwrap();
        st.posted += 1;
        lane.number = st.posted;
        st.in_flight.push(lane.number);
        Ok(true)
    }
    /// By chance, one in two, so that batches complete in another order
    /// than posted.
    fn ready(&self, _lane: &WrapperLane<Self>) -> bool {
        self.state.lock().unwrap().rng.chance(0.5)
    }
    fn complete(&self, lane: &mut WrapperLane<Self>, ops: &mut [Op<'_>]) -> Result<(), T::Error> {
        let lane = &mut lane.own;
        if !lane.deferred.take() {
            return Ok(());
        }
        {
            let mut st = self.state.lock().unwrap();
            let n = lane.number;
            if st.in_flight.iter().any(|&m| m < n) {
                st.injected.overtaking_batches += 1;
            }
            st.in_flight.retain(|&m| m != n);
        }
        Transport::execute(self, ops)
    }
    // lock_region and unlock_region are the inner transport's, unchanged
    // (see the module's docs on delayed writes).
}

impl<T: Transport> Drop for FaultyTransport<T> {
    /// Applies the pending delayed writes (errors ignored).
    fn drop(&mut self) {
        let _ = self.flush();
    }
}

#[cfg(test)]
mod tests;
