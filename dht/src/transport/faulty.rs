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
//!   [`Transport::has_atomics`], reads are split but never torn. Other ranks
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

use fabkit_core::{Completion, Error, Op, Remote};

use super::Transport;

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
}

/// splitmix64: small, fast, and good enough for choosing faults.
#[derive(Debug)]
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// Uniform in `0..n`, `n > 0`.
    fn below(&mut self, n: u64) -> u64 {
        ((u128::from(self.next()) * u128::from(n)) >> 64) as u64
    }

    /// True with probability `p`; draws nothing when `p` is 0 or 1.
    fn chance(&mut self, p: f64) -> bool {
        if p <= 0.0 || p.is_nan() {
            false
        } else if p >= 1.0 {
            true
        } else {
            ((self.next() >> 11) as f64) * (1.0 / (1u64 << 53) as f64) < p
        }
    }
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
            rng: Rng(faults.seed),
            seen: 0,
            fail_op: faults.fail_op,
            pending: Vec::new(),
            injected: Injected::default(),
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
                let apply = st.rng.next() & 1 == 1;
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
                    let tear = self.inner.has_atomics() && st.rng.chance(f.tear_reads);
                    let words = if tear { (into.len() - cut) / 8 } else { 0 };
                    let garbage = (0..words).map(|_| st.rng.next()).collect();
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

impl<T: Transport> Transport for FaultyTransport<T> {
    type Error = T::Error;

    fn rank(&self) -> usize {
        self.inner.rank()
    }
    fn ranks(&self) -> usize {
        self.inner.ranks()
    }
    fn region_len(&self, rank: usize) -> usize {
        self.inner.region_len(rank)
    }
    fn has_atomics(&self) -> bool {
        self.inner.has_atomics()
    }
    fn delivers(&self) -> bool {
        self.inner.delivers()
    }
    fn near(&self) -> bool {
        self.inner.near()
    }
    fn name(&self) -> String {
        format!("faulty {}", self.inner.name())
    }
    fn lock_region(&self, rank: usize, exclusive: bool) -> Result<bool, T::Error> {
        self.inner.lock_region(rank, exclusive)
    }
    fn unlock_region(&self, rank: usize) -> Result<(), T::Error> {
        self.inner.unlock_region(rank)
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
}

impl<T: Transport> Drop for FaultyTransport<T> {
    /// Applies the pending delayed writes (errors ignored).
    fn drop(&mut self) {
        let _ = self.flush();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::transport::hooked::HookedTransport;
    use crate::transport::local::LocalTransport;
    use crate::transport::recording::{Logged, RecordingTransport};
    use fabkit_core::OpKind;
    use std::sync::Arc;

    fn group() -> Vec<LocalTransport> {
        LocalTransport::group(2, 256)
    }

    /// Reads through a plain handle, as another rank would.
    fn peek(t: &LocalTransport, rank: usize, offset: u64, len: usize) -> Vec<u8> {
        let mut out = vec![0; len];
        t.execute(&mut [Op::Read {
            from: Remote::new(rank, offset),
            into: &mut out,
        }])
        .unwrap();
        out
    }

    fn poke(t: &LocalTransport, rank: usize, offset: u64, data: &[u8]) {
        write(t, Remote::new(rank, offset), data, Completion::Transmit);
    }

    /// A batch of one write through `t`, which must succeed.
    fn write(t: &impl Transport, to: Remote, from: &[u8], completion: Completion) {
        t.execute(&mut [Op::Write {
            to,
            from,
            completion,
        }])
        .unwrap();
    }

    fn logged(ops: &[Op<'_>]) -> Vec<Logged> {
        ops.iter()
            .map(|o| Logged {
                kind: o.kind(),
                at: o.target(),
                len: o.len(),
            })
            .collect()
    }

    fn pattern() -> Vec<u8> {
        (0..64u8)
            .map(|i| i.wrapping_mul(37).wrapping_add(11))
            .collect()
    }

    #[test]
    fn name_and_delegation() {
        let g = group();
        let f = FaultyTransport::new(g[1].clone(), Faults::default());
        assert_eq!(f.name(), "faulty local");
        assert_eq!((f.rank(), f.ranks(), f.region_len(0)), (1, 2, 256));
        assert!(f.has_atomics());
        assert!(!f.lock_region(0, true).unwrap());
        f.unlock_region(0).unwrap();
    }

    #[test]
    fn no_faults_pass_batches_through_whole() {
        let g = group();
        let f = FaultyTransport::new(RecordingTransport::new(g[0].clone()), Faults::seeded(3));
        let mut got = [0u8; 32];
        let mut ops = [
            Op::Write {
                to: Remote::new(1, 0),
                from: &[5; 16],
                completion: Completion::Transmit,
            },
            Op::Read {
                from: Remote::new(1, 64),
                into: &mut got,
            },
        ];
        let submitted = logged(&ops);
        f.execute(&mut ops).unwrap();
        assert_eq!(f.inner().batches(), vec![submitted]);
        assert_eq!(f.injected(), Injected::default());
        assert_eq!(f.ops_seen(), 2);
    }

    #[test]
    fn fail_op_fails_only_the_nth_op_once() {
        let mut outcomes = [0; 2];
        for seed in 0..32 {
            let g = group();
            let f = FaultyTransport::new(g[0].clone(), Faults::seeded(seed).fail_op(3));
            let data: Vec<[u8; 8]> = (1..=5u8).map(|i| [i; 8]).collect();
            let mut ops: Vec<Op<'_>> = data
                .iter()
                .enumerate()
                .map(|(i, d)| Op::Write {
                    to: Remote::new(1, 8 * i as u64),
                    from: d,
                    completion: Completion::Transmit,
                })
                .collect();
            let err = f.execute(&mut ops).unwrap_err();
            assert!(
                matches!(
                    err,
                    Error::Timeout {
                        op: OpKind::Write,
                        peer: 1,
                        timeout: Duration::ZERO
                    }
                ),
                "{err:?}"
            );
            assert_eq!(f.ops_seen(), 5);
            let inj = f.injected();
            assert_eq!(inj.failed_ops, 1);
            let applied = inj.failed_applied == 1;
            outcomes[usize::from(applied)] += 1;
            for (i, d) in data.iter().enumerate() {
                let got = peek(&g[1], 1, 8 * i as u64, 8);
                if i == 2 && !applied {
                    assert_eq!(got, [0; 8], "seed {seed}: the skipped op landed");
                } else {
                    assert_eq!(got, d, "seed {seed}: op {} did not land", i + 1);
                }
            }
            // The next batch succeeds.
            write(&f, Remote::new(1, 64), &[9; 8], Completion::Transmit);
            assert_eq!(f.ops_seen(), 6);
            assert_eq!(peek(&g[1], 1, 64, 8), [9; 8]);
            assert_eq!(f.injected().failed_ops, 1);
        }
        assert!(
            outcomes[0] > 0 && outcomes[1] > 0,
            "both outcomes over 32 seeds: {outcomes:?}"
        );
    }

    #[test]
    fn fail_op_armed_after_setup() {
        let g = group();
        let f = FaultyTransport::new(g[0].clone(), Faults::seeded(1));
        let mut v = 0;
        for _ in 0..4 {
            f.execute(&mut [Op::Fetch {
                at: Remote::new(1, 0),
                value: &mut v,
            }])
            .unwrap();
        }
        assert_eq!(f.ops_seen(), 4);
        f.reset_count();
        f.set_fail_op(Some(2));
        let mut old = 0;
        let mut add = |f: &FaultyTransport<LocalTransport>| {
            f.execute(&mut [Op::FetchAdd {
                at: Remote::new(0, 8),
                delta: 1,
                old: &mut old,
            }])
        };
        add(&f).unwrap();
        let err = add(&f).unwrap_err();
        assert!(matches!(
            err,
            Error::Timeout {
                op: OpKind::FetchAdd,
                peer: 0,
                ..
            }
        ));
        add(&f).unwrap();
        // Disarmed once fired, even if the count restarts.
        f.reset_count();
        add(&f).unwrap();
        add(&f).unwrap();
        assert_eq!(f.injected().failed_ops, 1);
        let word = u64::from_le_bytes(peek(&g[0], 0, 8, 8).try_into().unwrap());
        assert_eq!(word, 4 + f.injected().failed_applied);
    }

    /// Index of the first byte where `a` and `b` differ.
    fn first_diff(a: &[u8], b: &[u8]) -> Option<usize> {
        a.iter().zip(b).position(|(x, y)| x != y)
    }

    #[test]
    fn torn_read_differs_in_the_second_half_only_and_leaves_the_table_intact() {
        let pattern = pattern();
        let mut cuts = std::collections::BTreeSet::new();
        for seed in 0..16 {
            let g = group();
            poke(&g[1], 1, 0, &pattern);
            let f = FaultyTransport::new(
                g[0].clone(),
                Faults::seeded(seed).split_reads(1.0).tear_reads(1.0),
            );
            let mut got = [0u8; 64];
            f.execute(&mut [Op::Read {
                from: Remote::new(1, 0),
                into: &mut got,
            }])
            .unwrap();
            let d = first_diff(&got, &pattern).expect("the read was not torn");
            assert!(
                d.is_multiple_of(8) && d > 0 && d < 64,
                "seed {seed}: cut at {d}"
            );
            cuts.insert(d);
            // Every whole word of the second half is garbage.
            for w in d / 8..8 {
                assert_ne!(got[8 * w..8 * w + 8], pattern[8 * w..8 * w + 8]);
            }
            let inj = f.injected();
            assert_eq!((inj.split_reads, inj.torn_reads), (1, 1));
            // Intact afterwards, for another rank and for this one.
            assert_eq!(peek(&g[1], 1, 0, 64), pattern);
            assert_eq!(peek(&g[0], 1, 0, 64), pattern);
        }
        assert!(cuts.len() > 1, "the cut is random: {cuts:?}");
    }

    #[test]
    fn unaligned_torn_read_is_cut_at_an_aligned_remote_offset() {
        let pattern = pattern();
        for seed in 0..16 {
            let g = group();
            poke(&g[1], 1, 0, &pattern);
            let f = FaultyTransport::new(
                g[0].clone(),
                Faults::seeded(seed).split_reads(1.0).tear_reads(1.0),
            );
            // Remote bytes 3..43: boundaries 8, 16, 24, 32, 40.
            let mut got = [0u8; 40];
            f.execute(&mut [Op::Read {
                from: Remote::new(1, 3),
                into: &mut got,
            }])
            .unwrap();
            let want = &pattern[3..43];
            assert_eq!(f.injected().split_reads, 1);
            if f.injected().torn_reads == 1 {
                let d = first_diff(&got, want).expect("counted torn but not torn");
                assert_eq!((3 + d) % 8, 0, "seed {seed}");
            } else {
                // Cut at 40: the second half has no whole word to tear.
                assert_eq!(got, want);
            }
            assert_eq!(peek(&g[1], 1, 0, 64), pattern);
        }
    }

    /// A local transport that claims no atomics.
    #[derive(Debug)]
    struct NoAtomics(LocalTransport);

    impl Transport for NoAtomics {
        type Error = Error;

        fn rank(&self) -> usize {
            self.0.rank()
        }
        fn ranks(&self) -> usize {
            self.0.ranks()
        }
        fn region_len(&self, rank: usize) -> usize {
            self.0.region_len(rank)
        }
        fn has_atomics(&self) -> bool {
            false
        }
        fn execute(&self, ops: &mut [Op<'_>]) -> Result<(), Error> {
            self.0.execute(ops)
        }
        fn name(&self) -> String {
            "no atomics".into()
        }
    }

    #[test]
    fn no_tear_without_atomics() {
        let pattern = pattern();
        let g = group();
        poke(&g[1], 1, 0, &pattern);
        let f = FaultyTransport::new(
            NoAtomics(g[0].clone()),
            Faults::seeded(5).split_reads(1.0).tear_reads(1.0),
        );
        let mut got = [0u8; 64];
        f.execute(&mut [Op::Read {
            from: Remote::new(1, 0),
            into: &mut got,
        }])
        .unwrap();
        assert_eq!(got[..], pattern[..]);
        let inj = f.injected();
        assert_eq!((inj.split_reads, inj.torn_reads), (1, 0));
    }

    #[test]
    fn out_of_bounds_ops_are_not_faulted_and_fail_as_the_inner_one_does() {
        let g = group();
        let f = FaultyTransport::new(
            g[0].clone(),
            Faults::seeded(2)
                .split_reads(1.0)
                .tear_reads(1.0)
                .delay_writes(Delay::UntilNextBatch, 1.0),
        );
        let mut got = [0u8; 32];
        let err = f
            .execute(&mut [Op::Read {
                from: Remote::new(1, 240),
                into: &mut got,
            }])
            .unwrap_err();
        assert!(matches!(err, Error::OutOfBounds { .. }));
        let err = f
            .execute(&mut [Op::Write {
                to: Remote::new(2, 0),
                from: &[1; 8],
                completion: Completion::Transmit,
            }])
            .unwrap_err();
        assert!(matches!(err, Error::NoSuchRank { .. }));
        assert_eq!(f.injected(), Injected::default());
    }

    #[test]
    fn delay_past_next_batch_lands_after_the_next_batch_or_at_flush() {
        let g = group();
        let f = FaultyTransport::new(
            g[0].clone(),
            Faults::seeded(1).delay_writes(Delay::PastNextBatch, 1.0),
        );
        write(&f, Remote::new(1, 0), &[7; 16], Completion::Transmit);
        assert_eq!(peek(&g[1], 1, 0, 16), [0; 16], "visible at once");
        assert_eq!(f.pending_writes(), 1);
        // The next batch: a write elsewhere, and a read of the delayed bytes,
        // which does not see them (they land after the batch's ops).
        let mut got = [0u8; 16];
        f.execute(&mut [
            Op::Write {
                to: Remote::new(1, 128),
                from: &[8; 16],
                completion: Completion::Transmit,
            },
            Op::Read {
                from: Remote::new(1, 0),
                into: &mut got,
            },
        ])
        .unwrap();
        assert_eq!(got, [0; 16], "visible to the next batch's ops");
        assert_eq!(peek(&g[1], 1, 0, 16), [7; 16], "not applied after it");
        // The second write is now the pending one: invisible until flush.
        assert_eq!(peek(&g[1], 1, 128, 16), [0; 16]);
        assert_eq!(f.pending_writes(), 1);
        f.flush().unwrap();
        assert_eq!(peek(&g[1], 1, 128, 16), [8; 16]);
        assert_eq!(f.pending_writes(), 0);
        assert_eq!(f.injected().delayed_writes, 2);
    }

    #[test]
    fn delay_until_next_batch_lands_before_the_next_batch() {
        let g = group();
        let f = FaultyTransport::new(
            g[0].clone(),
            Faults::seeded(1).delay_writes(Delay::UntilNextBatch, 1.0),
        );
        write(&f, Remote::new(1, 0), &[7; 16], Completion::Transmit);
        assert_eq!(peek(&g[1], 1, 0, 16), [0; 16]);
        let mut got = [0u8; 16];
        f.execute(&mut [Op::Read {
            from: Remote::new(1, 0),
            into: &mut got,
        }])
        .unwrap();
        assert_eq!(got, [7; 16], "the next batch sees it");
        assert_eq!(f.pending_writes(), 0);
    }

    #[test]
    fn pending_writes_land_on_drop() {
        let g = group();
        let f = FaultyTransport::new(
            g[0].clone(),
            Faults::seeded(1).delay_writes(Delay::UntilNextBatch, 1.0),
        );
        write(&f, Remote::new(1, 8), &[3; 5], Completion::Transmit);
        assert_eq!(peek(&g[1], 1, 8, 5), [0; 5]);
        drop(f);
        assert_eq!(peek(&g[1], 1, 8, 5), [3; 5]);
    }

    #[test]
    fn delayed_writes_of_one_transport_to_the_same_bytes_keep_their_order() {
        let mut checked = 0;
        for seed in 0..64 {
            let g = group();
            let f = FaultyTransport::new(
                g[0].clone(),
                Faults::seeded(seed).delay_writes(Delay::PastNextBatch, 0.5),
            );
            write(&f, Remote::new(1, 4), &[1; 12], Completion::Transmit);
            if f.injected().delayed_writes == 0 {
                continue;
            }
            checked += 1;
            write(&f, Remote::new(1, 8), &[2; 8], Completion::Transmit);
            f.flush().unwrap();
            let mut want = vec![0; 4];
            want.extend([1; 4]);
            want.extend([2; 8]);
            assert_eq!(peek(&g[1], 1, 0, 16), want, "seed {seed}");
        }
        assert!(checked > 0);
    }

    /// A writer's publish: data with `completion`, then (a later batch) the
    /// release of a lock word. Returns the data a reader sees at the
    /// release, the data after the writer's batches, and what was injected.
    fn publish(faults: Faults, completion: Completion) -> (Vec<u8>, Vec<u8>, Injected) {
        let g = group();
        let data = Remote::new(1, 64);
        // Right after each inner batch that holds a compare-and-swap, the
        // bytes another rank would read at `data`: what a reader that takes
        // the lock as soon as it is released sees.
        let observer = HookedTransport::new(g[0].clone());
        let seen = Arc::new(Mutex::new(Vec::new()));
        let (local, seen2) = (g[0].clone(), seen.clone());
        observer.after(Some(Box::new(move |ops| {
            if ops.iter().any(|o| o.kind() == OpKind::CompareAndSwap) {
                seen2.lock().unwrap().push(peek(&local, 1, 64, 24));
            }
        })));
        let f = FaultyTransport::new(observer, faults);
        poke(&g[1], 1, 0, &1u64.to_le_bytes()); // locked by the writer
        write(&f, data, &[7; 24], completion);
        let mut old = 0;
        f.execute(&mut [Op::CompareAndSwap {
            at: Remote::new(1, 0),
            expected: 1,
            new: 0,
            old: &mut old,
        }])
        .unwrap();
        assert_eq!(old, 1);
        let seen = seen.lock().unwrap().clone();
        assert_eq!(seen.len(), 1, "one release");
        let after = peek(&g[1], 1, 64, 24);
        (seen[0].clone(), after, f.injected())
    }

    #[test]
    fn delivery_writes_are_never_delayed() {
        for delay in [Delay::UntilNextBatch, Delay::PastNextBatch] {
            let faults = || Faults::seeded(5).reorder().delay_writes(delay, 1.0);
            // Alone: visible when its batch returns.
            let g = group();
            let f = FaultyTransport::new(g[0].clone(), faults());
            f.execute(&mut [
                Op::Write {
                    to: Remote::new(1, 0),
                    from: &[3; 16],
                    completion: Completion::Delivery,
                },
                Op::Write {
                    to: Remote::new(1, 32),
                    from: &[4; 16],
                    completion: Completion::Transmit,
                },
            ])
            .unwrap();
            assert_eq!(peek(&g[1], 1, 0, 16), [3; 16], "{delay:?}");
            assert_eq!(
                peek(&g[1], 1, 32, 16),
                [0; 16],
                "{delay:?}: transmit delayed"
            );
            assert_eq!(f.injected().delayed_writes, 1, "{delay:?}");
            assert_eq!(f.pending_writes(), 1, "{delay:?}");
            // In a publish: the reader sees the data once the lock is free.
            let (at_release, _, inj) = publish(faults(), Completion::Delivery);
            assert_eq!(at_release, [7; 24], "{delay:?}");
            assert_eq!(inj.delayed_writes, 0, "{delay:?}");
        }
    }

    #[test]
    fn a_delivery_write_lands_after_older_pending_writes_to_the_same_bytes() {
        let g = group();
        let f = FaultyTransport::new(
            g[0].clone(),
            Faults::seeded(1).delay_writes(Delay::PastNextBatch, 1.0),
        );
        write(&f, Remote::new(1, 4), &[1; 12], Completion::Transmit);
        assert_eq!(f.pending_writes(), 1);
        write(&f, Remote::new(1, 8), &[2; 8], Completion::Delivery);
        // The older write landed first, the Delivery one over it.
        assert_eq!(
            peek(&g[1], 1, 0, 16),
            [&[0; 4][..], &[1; 4], &[2; 8]].concat()
        );
        assert_eq!(f.pending_writes(), 0);
        f.flush().unwrap();
        assert_eq!(
            peek(&g[1], 1, 0, 16),
            [&[0; 4][..], &[1; 4], &[2; 8]].concat()
        );
    }

    #[test]
    fn ignore_delivery_delays_delivery_writes_and_a_reader_sees_old_bytes_after_the_release() {
        let faults = Faults::seeded(1)
            .delay_writes(Delay::PastNextBatch, 1.0)
            .ignore_delivery();
        assert!(faults.ignore_delivery);
        // What a transport without delivery completion does to a publish:
        // when the lock is released, the data are still the old bytes; they
        // land later.
        let (at_release, after, inj) = publish(faults.clone(), Completion::Delivery);
        assert_eq!((at_release, after), (vec![0; 24], vec![7; 24]));
        assert_eq!(inj.delayed_writes, 1);
        // A transmit-complete write does the same with or without the knob.
        let past = Faults::seeded(1).delay_writes(Delay::PastNextBatch, 1.0);
        let (at_release, _, _) = publish(past.clone(), Completion::Transmit);
        assert_eq!(at_release, [0; 24]);
        // Without the knob, the same faults leave a Delivery write alone.
        let (at_release, _, inj) = publish(past, Completion::Delivery);
        assert_eq!((at_release, inj.delayed_writes), (vec![7; 24], 0));
        // The knob alone delays nothing: it only widens delay_writes.
        let (at_release, _, inj) =
            publish(Faults::seeded(1).ignore_delivery(), Completion::Delivery);
        assert_eq!((at_release, inj.delayed_writes), (vec![7; 24], 0));
    }

    #[test]
    fn reorder_changes_the_order_and_executes_every_op_once() {
        let mut reordered = 0;
        for seed in 0..32 {
            let g = group();
            let f = FaultyTransport::new(
                RecordingTransport::new(g[0].clone()),
                Faults::seeded(seed).reorder(),
            );
            let (mut got, mut old, mut value) = ([0u8; 8], 0, 0);
            let mut ops = [
                Op::Write {
                    to: Remote::new(1, 0),
                    from: &[1; 8],
                    completion: Completion::Transmit,
                },
                Op::Write {
                    to: Remote::new(1, 8),
                    from: &[2; 8],
                    completion: Completion::Transmit,
                },
                Op::Read {
                    from: Remote::new(1, 16),
                    into: &mut got,
                },
                Op::FetchAdd {
                    at: Remote::new(1, 24),
                    delta: 5,
                    old: &mut old,
                },
                Op::Write {
                    to: Remote::new(0, 32),
                    from: &[3; 16],
                    completion: Completion::Transmit,
                },
                Op::Fetch {
                    at: Remote::new(1, 48),
                    value: &mut value,
                },
            ];
            let submitted = logged(&ops);
            f.execute(&mut ops).unwrap();
            let batches = f.inner().batches();
            assert!(batches.iter().all(|b| b.len() == 1), "one by one");
            let executed: Vec<Logged> = batches.into_iter().flatten().collect();
            assert_eq!(executed.len(), submitted.len());
            for s in &submitted {
                assert_eq!(executed.iter().filter(|e| *e == s).count(), 1);
            }
            let differs = executed != submitted;
            reordered += usize::from(differs);
            assert_eq!(f.injected().reordered_batches, u64::from(differs));
            // And they all took effect.
            assert_eq!(peek(&g[1], 1, 0, 16), [[1; 8], [2; 8]].concat());
            assert_eq!(peek(&g[1], 0, 32, 16), [3; 16]);
            assert_eq!(peek(&g[1], 1, 24, 8), 5u64.to_le_bytes());
        }
        assert!(reordered > 0, "never reordered over 32 seeds");
    }

    #[test]
    fn reordered_split_read_halves_run_apart() {
        let pattern = pattern();
        let mut apart = 0;
        for seed in 0..32 {
            let g = group();
            poke(&g[1], 1, 0, &pattern);
            let f = FaultyTransport::new(
                RecordingTransport::new(g[0].clone()),
                Faults::seeded(seed).reorder().split_reads(1.0),
            );
            let mut got = [0u8; 32];
            let mut value = 0;
            f.execute(&mut [
                Op::Read {
                    from: Remote::new(1, 0),
                    into: &mut got,
                },
                Op::Write {
                    to: Remote::new(1, 64),
                    from: &[1; 8],
                    completion: Completion::Transmit,
                },
                Op::Fetch {
                    at: Remote::new(1, 72),
                    value: &mut value,
                },
            ])
            .unwrap();
            assert_eq!(got[..], pattern[..32]);
            let executed: Vec<Logged> = f.inner().batches().into_iter().flatten().collect();
            let reads: Vec<usize> = (0..executed.len())
                .filter(|&k| executed[k].kind == OpKind::Read)
                .collect();
            assert_eq!((executed.len(), reads.len()), (4, 2));
            let (a, b) = (executed[reads[0]], executed[reads[1]]);
            assert_eq!(a.len + b.len, 32);
            let (lo, hi) = if a.at.offset < b.at.offset {
                (a, b)
            } else {
                (b, a)
            };
            assert_eq!((lo.at.offset, hi.at.offset), (0, lo.len as u64));
            assert_eq!(hi.at.offset % 8, 0);
            apart += usize::from(reads[1] - reads[0] > 1);
        }
        assert!(apart > 0, "halves always adjacent over 32 seeds");
    }

    #[test]
    fn messages_pass_through_together_when_reordering() {
        let g = group();
        let f = FaultyTransport::new(
            RecordingTransport::new(g[0].clone()),
            Faults::seeded(4).reorder(),
        );
        let (mut into, mut len) = ([0u8; 8], 0);
        // The local transport has no messages: the error comes from it.
        let err = f
            .execute(&mut [
                Op::Send {
                    to: 1,
                    data: &[1; 4],
                },
                Op::Write {
                    to: Remote::new(1, 0),
                    from: &[1; 8],
                    completion: Completion::Transmit,
                },
                Op::Recv {
                    from: 1,
                    into: &mut into,
                    len: &mut len,
                },
            ])
            .unwrap_err();
        assert!(matches!(err, Error::InvalidArgument(_)));
        let kinds = f.inner().kinds();
        assert!(
            kinds.contains(&vec![OpKind::Send, OpKind::Recv]),
            "{kinds:?}"
        );
        assert!(kinds.contains(&vec![OpKind::Write]), "{kinds:?}");
    }

    /// A mixed workload with every fault on; returns what it observed.
    fn workload(seed: u64) -> (Vec<Vec<Logged>>, Vec<u8>, Injected, Vec<u8>) {
        let g = group();
        poke(&g[1], 1, 0, &pattern());
        let f = FaultyTransport::new(
            RecordingTransport::new(g[0].clone()),
            Faults::seeded(seed)
                .reorder()
                .split_reads(0.5)
                .tear_reads(0.5)
                .delay_writes(Delay::PastNextBatch, 0.5)
                .fail_op(7),
        );
        let mut seen = Vec::new();
        for round in 0..12u8 {
            let (mut a, mut b, mut old) = ([0u8; 32], [0u8; 24], 0);
            let r = f.execute(&mut [
                Op::Read {
                    from: Remote::new(1, 8 * u64::from(round % 4)),
                    into: &mut a,
                },
                Op::Write {
                    to: Remote::new(1, 128 + 8 * u64::from(round % 3)),
                    from: &[round; 16],
                    completion: Completion::Transmit,
                },
                Op::Read {
                    from: Remote::new(1, 130),
                    into: &mut b,
                },
                Op::FetchAdd {
                    at: Remote::new(1, 200),
                    delta: 1,
                    old: &mut old,
                },
            ]);
            seen.push(u8::from(r.is_ok()));
            seen.extend(a);
            seen.extend(b);
            seen.extend(old.to_le_bytes());
        }
        f.flush().unwrap();
        (
            f.inner().batches(),
            seen,
            f.injected(),
            peek(&g[1], 1, 0, 256),
        )
    }

    #[test]
    fn same_seed_same_faults() {
        let first = workload(42);
        assert_eq!(first, workload(42));
        let inj = first.2;
        assert!(inj.reordered_batches > 0 && inj.split_reads > 0 && inj.torn_reads > 0);
        assert!(inj.delayed_writes > 0 && inj.failed_ops == 1);
        assert!((0..4).any(|s| workload(s) != first), "the seed matters");
    }
}
