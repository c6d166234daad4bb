//! Executing batches of operations in an epoch: checked once and issued
//! (`MPI_Put`, `MPI_Get`, `MPI_Compare_and_swap`, `MPI_Fetch_and_op`), or
//! prepared once and issued again for every window of a benchmark.

use std::ffi::c_void;

use mpi::ffi;

use fabkit_core::{Op, OpKind, Remote};

use fabkit_core::Error as CoreError;

use crate::error::{error_string, Error, Result};
#[cfg(feature = "test-seams")]
use crate::shim::fabkit_mpi_err_other;
use crate::shim::{fabkit_mpi_no_op, fabkit_mpi_replace, fabkit_mpi_success};

use super::{check_on, lock_kind, Sync, Window};

impl Window<'_> {
    /// Executes a batch inside the passive-target epoch already open on its
    /// targets (from [`Window::lock`] or [`Window::lock_all`]): issues the
    /// operations, then `MPI_Win_flush` per target, so results are delivered
    /// when it returns.
    ///
    /// Every write is therefore remotely complete when this returns: "the
    /// operations are completed both at the origin and at the target"
    /// (MPI 3.1, 11.5.4, `MPI_Win_flush`). That is what
    /// [`Completion::Delivery`](fabkit_core::Completion::Delivery) asks for, so
    /// both completions are posted alike (`MPI_Put`), and an operation of a
    /// later batch (a lock release) cannot overtake them. The targets are
    /// flushed even when issuing fails part-way, so that what was issued
    /// is complete before the caller's error path (a release) runs and no
    /// result lands in a buffer after this returns.
    ///
    /// # Aborts
    ///
    /// When a flush fails: what was issued may still be in flight and MPI
    /// cannot cancel it, so the process ends the MPI job (`MPI_Abort`, then
    /// `abort()`) rather than return with the caller's buffers still
    /// targeted.
    pub fn execute_in_epoch(&mut self, ops: &mut [Op<'_>]) -> Result<()> {
        let mut targets = self.take_targets();
        let r = self
            .validate_all(ops, &mut targets)
            .and_then(|()| self.in_epoch(ops, targets.as_slice()));
        self.targets = targets;
        r
    }

    /// The window's reusable target set, taken out while `self` is
    /// borrowed (and put back after the batch). A batch that panicked
    /// never put it back and left an empty set of no ranks, which would
    /// drop every target and flush none: a fresh one replaces it.
    fn take_targets(&mut self) -> Targets {
        let t = std::mem::take(&mut self.targets);
        if t.ranks == self.size {
            t
        } else {
            Targets::new(self.size)
        }
    }

    /// [`Window::execute_in_epoch`] after validation.
    fn in_epoch(&mut self, ops: &mut [Op<'_>], targets: &[usize]) -> Result<()> {
        if !self.locked_all {
            if let Some(t) = targets.iter().find(|t| !self.locked.contains(t)) {
                return Err(Error::from(CoreError::InvalidArgument(format!(
                    "an operation on rank {t} outside an epoch: lock it (or lock_all) first"
                ))));
            }
        }
        let issued = self.issue(ops.iter_mut());
        for &t in targets {
            // SAFETY: the window is live and in an epoch on t.
            let rc = unsafe { ffi::MPI_Win_flush(t as i32, self.win) };
            self.closed("MPI_Win_flush", Some(t), rc);
        }
        issued
    }

    /// Checks one op against the window and returns its target rank. The
    /// common case, a valid op, is one match and a few comparisons; the
    /// error is worked out apart ([`Window::invalid`]).
    #[inline]
    fn validate(&self, op: &Op<'_>) -> Result<usize> {
        let (at, len, atomic) = match op {
            Op::Read { from, into } => (from, into.len(), false),
            Op::Write { to, from, .. } => (to, from.len(), false),
            Op::CompareAndSwap { at, .. }
            | Op::FetchAdd { at, .. }
            | Op::Fetch { at, .. }
            | Op::Swap { at, .. } => (at, 8, true),
            Op::Send { .. } | Op::Recv { .. } => return Err(self.invalid(op)),
        };
        let fits = at
            .offset
            .checked_add(len as u64)
            .is_some_and(|end| end <= self.len as u64);
        if at.rank < self.size
            && fits
            && len <= i32::MAX as usize
            && (!atomic || at.offset.is_multiple_of(8))
        {
            return Ok(at.rank);
        }
        Err(self.invalid(op))
    }

    /// Why `op` is refused (it failed [`Window::validate`]).
    #[cold]
    fn invalid(&self, op: &Op<'_>) -> Error {
        match self.explain(op) {
            Err(e) => e,
            Ok(()) => unreachable!("validate refused an op explain accepts: {op:?}"),
        }
    }

    /// Every check of an op, each refusal with its own message.
    fn explain(&self, op: &Op<'_>) -> Result<()> {
        let at = op.target();
        let kind = op.kind();
        if matches!(kind, OpKind::Send | OpKind::Recv) {
            return Err(Error::from(CoreError::InvalidArgument(format!(
                "{kind} is not a one-sided operation: MPI windows do RMA and atomics only"
            ))));
        }
        if at.rank >= self.size {
            return Err(Error::from(CoreError::NoSuchRank {
                peer: at.rank,
                ranks: self.size,
            }));
        }
        let len = op.len();
        let fits = usize::try_from(at.offset)
            .ok()
            .and_then(|o| o.checked_add(len))
            .is_some_and(|end| end <= self.len);
        if !fits || len > i32::MAX as usize {
            return Err(Error::from(CoreError::OutOfBounds {
                op: kind,
                peer: at.rank,
                offset: at.offset,
                len,
                region_len: self.len,
            }));
        }
        if kind.is_atomic() && !at.offset.is_multiple_of(8) {
            return Err(Error::from(CoreError::InvalidArgument(format!(
                "{kind} at offset {}: atomics need an 8-byte aligned offset",
                at.offset
            ))));
        }
        Ok(())
    }

    /// Validates every op and makes `targets` their distinct ranks, in one
    /// pass (on an error, `targets` holds those of the ops before it).
    fn validate_all(&self, ops: &[Op<'_>], targets: &mut Targets) -> Result<()> {
        targets.clear();
        for op in ops {
            targets.add(self.validate(op)?);
        }
        targets.sort();
        Ok(())
    }

    /// Executes a batch from this origin under `sync` and returns when every
    /// operation is complete at the origin (results delivered). Everything
    /// is validated before the first call; when an MPI call fails part-way,
    /// the epoch still ends (flush, unlock, fence or complete) before the
    /// error is returned, so the window is ready for the next batch. For
    /// [`Sync::Fence`] every rank must fence once per batch; for
    /// [`Sync::Pscw`] each target must [`Window::post`] before and
    /// [`Window::wait`] after. Under those two, a batch that fails before
    /// anything is issued (a bad op, a failed group or `MPI_Win_start`)
    /// still takes part in the epoch the other ranks are in: it fences, or
    /// starts and completes an empty access epoch on the valid targets, so
    /// that no target is left in its fence or wait. An active-target batch
    /// inside an open lock epoch is refused without any MPI call (mixing
    /// them is erroneous MPI); the other ranks' fence or wait is then not
    /// met.
    ///
    /// # Aborts
    ///
    /// When the call that completes the epoch (flush, unlock, fence,
    /// complete) fails: what was issued may still be in flight and MPI
    /// cannot cancel it, so the process ends the MPI job (`MPI_Abort`, then
    /// `abort()`) rather than return with the caller's buffers still
    /// targeted.
    pub fn execute(&mut self, sync: Sync, ops: &mut [Op<'_>]) -> Result<()> {
        self.refuse_active_in_lock(sync)?;
        let mut targets = self.take_targets();
        let valid = self.validate_all(ops, &mut targets);
        if valid.is_err() && sync == Sync::Pscw {
            // The targets that posted for this origin expect an access
            // epoch: give every rank in range an empty one.
            targets.fill(ops.iter().map(|o| o.target().rank));
        }
        let r = self.run_epoch(sync, ops, valid, targets.as_slice());
        self.targets = targets;
        r
    }

    /// Checks `ops` against this window once, as [`Window::execute`] does
    /// on every call, for [`Window::execute_prepared`] to run them again and
    /// again without the check. The same errors as `execute`'s, before any
    /// MPI call; the ops are dropped then.
    pub fn prepare<'b>(&self, ops: Vec<Op<'b>>) -> Result<Prepared<'b>> {
        let mut firsts: Vec<(usize, usize)> = Vec::new();
        for (i, op) in ops.iter().enumerate() {
            let rank = self.validate(op)?;
            if !firsts.iter().any(|&(t, _)| t == rank) {
                firsts.push((rank, i));
            }
        }
        firsts.sort_unstable();
        Ok(Prepared {
            prefix: Vec::with_capacity(firsts.len()),
            ops,
            firsts,
            window: self.id,
        })
    }

    /// Executes the first `count` ops of a batch [`Window::prepare`]d for
    /// this window, as [`Window::execute`] would execute them (the same
    /// synchronisation, errors and aborts), without checking each op again:
    /// what a benchmark loop that repeats one window of operations needs,
    /// so that it costs what the MPI calls cost and no more. A batch
    /// prepared for another window, or a `count` beyond it, is refused
    /// before any MPI call (under fence and PSCW the other ranks' epoch is
    /// then not met, as for a batch inside a lock epoch).
    pub fn execute_prepared(
        &mut self,
        sync: Sync,
        batch: &mut Prepared<'_>,
        count: usize,
    ) -> Result<()> {
        if batch.window != self.id {
            return Err(Error::from(CoreError::InvalidArgument(
                "a batch prepared for another window; prepare it on this one".into(),
            )));
        }
        if count > batch.ops.len() {
            return Err(Error::from(CoreError::InvalidArgument(format!(
                "the first {count} ops of a prepared batch of {}",
                batch.ops.len()
            ))));
        }
        self.refuse_active_in_lock(sync)?;
        let Prepared {
            ops,
            firsts,
            prefix,
            ..
        } = batch;
        prefix.clear();
        prefix.extend(
            firsts
                .iter()
                .filter(|&&(_, first)| first < count)
                .map(|&(t, _)| t),
        );
        self.run_epoch(sync, &mut ops[..count], Ok(()), prefix)
    }

    /// One batch's epoch under `sync`: `valid` is the batch's validation
    /// (under fence and PSCW a failed one still takes part in the epoch),
    /// `targets` its distinct targets in rank order.
    fn run_epoch(
        &mut self,
        sync: Sync,
        ops: &mut [Op<'_>],
        valid: Result<()>,
        targets: &[usize],
    ) -> Result<()> {
        match sync {
            Sync::LockAll => {
                valid?;
                self.lock_all()?;
                self.in_epoch(ops, targets)
            }
            Sync::LockShared | Sync::LockExclusive => {
                valid?;
                let lock = lock_kind(sync == Sync::LockExclusive);
                for &t in targets {
                    // SAFETY: the window is live; t is a valid rank. A
                    // failure here leaves nothing issued on t, and every
                    // earlier target is already unlocked.
                    check_on("MPI_Win_lock", t, unsafe {
                        ffi::MPI_Win_lock(lock, t as i32, 0, self.win)
                    })?;
                    let r = self.issue(ops.iter_mut().filter(|o| o.target().rank == t));
                    // SAFETY: locked just above.
                    let rc = unsafe { ffi::MPI_Win_unlock(t as i32, self.win) };
                    self.closed("MPI_Win_unlock", Some(t), rc);
                    r?;
                }
                Ok(())
            }
            Sync::Fence => {
                // Fence even when validation or issuing failed: it completes
                // what was issued, and every other rank is in its fence.
                let r = valid.and_then(|()| self.issue(ops.iter_mut()));
                // SAFETY: the window is live.
                let rc = unsafe { ffi::MPI_Win_fence(0, self.win) };
                self.closed("MPI_Win_fence", None, rc);
                r
            }
            Sync::Pscw => {
                if let Err(e) = self.start(targets) {
                    // Nothing was issued and no epoch is open; the targets
                    // end their wait at their timeout.
                    return Err(valid.err().unwrap_or(e));
                }
                let r = valid.and_then(|()| self.issue(ops.iter_mut()));
                // SAFETY: the access epoch was started above.
                let rc = unsafe { ffi::MPI_Win_complete(self.win) };
                self.closed("MPI_Win_complete", None, rc);
                r
            }
        }
    }

    /// The return code the test seam ([`Window::fail_after`]) puts in place
    /// of the call, if it is armed and this call is the one to fail.
    #[cfg(feature = "test-seams")]
    fn injected(&self) -> Option<i32> {
        let left = self.fail_after.get()?;
        if left == 0 {
            self.fail_after.set(None);
            // SAFETY: a plain constant exported by the shim.
            Some(unsafe { fabkit_mpi_err_other })
        } else {
            self.fail_after.set(Some(left - 1));
            None
        }
    }

    #[cfg(not(feature = "test-seams"))]
    fn injected(&self) -> Option<i32> {
        None
    }

    /// Issues the MPI calls, stopping at the first that fails (the caller
    /// ends the epoch either way). Buffers are the ops' own (borrowed for
    /// the whole `execute`), so they outlive the epoch that completes them.
    /// Takes the ops as an iterator, so that a subset (one target's) needs
    /// no list of its own.
    fn issue<'o, 'b: 'o>(&self, ops: impl Iterator<Item = &'o mut Op<'b>>) -> Result<()> {
        // SAFETY: reading MPI constants exported by rsmpi and the shim.
        let (u8t, u64t, ok) =
            unsafe { (ffi::RSMPI_UINT8_T, ffi::RSMPI_UINT64_T, fabkit_mpi_success) };
        let win = self.win;
        // The rank and displacement MPI takes for `at` (both checked by
        // validation: a rank below the communicator's size, an offset in
        // the window).
        let to = |at: &Remote| (at.rank as i32, at.offset as ffi::MPI_Aint);
        // One match per op, issuing the call: this loop is all there is
        // between the caller's batch and MPI (what an OSU loop costs more).
        for op in ops {
            let rc = if let Some(rc) = self.injected() {
                rc
            } else {
                // SAFETY: every pointer is into the op's borrowed buffers or
                // fields, which live until `execute` returns, after the epoch
                // (flush, unlock, fence or complete) that completes them;
                // lengths fit in i32 and offsets in the window (validated).
                unsafe {
                    match op {
                        Op::Read { from, into } => {
                            let ((rank, disp), n) = (to(from), into.len() as i32);
                            ffi::MPI_Get(into.as_mut_ptr().cast(), n, u8t, rank, disp, n, u8t, win)
                        }
                        Op::Write { to: at, from, .. } => {
                            let ((rank, disp), n) = (to(at), from.len() as i32);
                            ffi::MPI_Put(
                                from.as_ptr() as *const c_void,
                                n,
                                u8t,
                                rank,
                                disp,
                                n,
                                u8t,
                                win,
                            )
                        }
                        Op::CompareAndSwap {
                            at,
                            expected,
                            new,
                            old,
                        } => {
                            let (rank, disp) = to(at);
                            ffi::MPI_Compare_and_swap(
                                (new as *const u64).cast(),
                                (expected as *const u64).cast(),
                                (*old as *mut u64).cast(),
                                u64t,
                                rank,
                                disp,
                                win,
                            )
                        }
                        Op::FetchAdd { at, delta, old } => {
                            let (rank, disp) = to(at);
                            ffi::MPI_Fetch_and_op(
                                (delta as *const u64).cast(),
                                (*old as *mut u64).cast(),
                                u64t,
                                rank,
                                disp,
                                ffi::RSMPI_SUM,
                                win,
                            )
                        }
                        Op::Fetch { at, value } => {
                            let (rank, disp) = to(at);
                            ffi::MPI_Fetch_and_op(
                                std::ptr::null(),
                                (*value as *mut u64).cast(),
                                u64t,
                                rank,
                                disp,
                                fabkit_mpi_no_op,
                                win,
                            )
                        }
                        Op::Swap { at, new, old } => {
                            let (rank, disp) = to(at);
                            ffi::MPI_Fetch_and_op(
                                (new as *const u64).cast(),
                                (*old as *mut u64).cast(),
                                u64t,
                                rank,
                                disp,
                                fabkit_mpi_replace,
                                win,
                            )
                        }
                        Op::Send { .. } | Op::Recv { .. } => unreachable!("validated"),
                    }
                }
            };
            if rc != ok {
                return Err(op_failed(op, rc));
            }
        }
        Ok(())
    }
}

/// The error of `op`'s MPI call that returned `rc`.
#[cold]
fn op_failed(op: &Op<'_>, rc: i32) -> Error {
    let kind = op.kind();
    Error::MpiOp {
        op: kind,
        peer: op.target().rank,
        call: match kind {
            OpKind::Read => "MPI_Get",
            OpKind::Write => "MPI_Put",
            OpKind::CompareAndSwap => "MPI_Compare_and_swap",
            _ => "MPI_Fetch_and_op",
        },
        code: rc,
        msg: error_string(rc),
    }
}

/// A batch checked once against a window ([`Window::prepare`]) to execute
/// any number of times ([`Window::execute_prepared`]): a benchmark's window
/// of operations, which OSU's loops post again and again with no check at
/// all. It owns its ops, so they cannot change after the check;
/// [`Prepared::into_ops`] gives them back.
#[derive(Debug)]
pub struct Prepared<'b> {
    ops: Vec<Op<'b>>,
    /// Each distinct target with the index of its first op, in rank order:
    /// a prefix's targets without a pass over its ops.
    firsts: Vec<(usize, usize)>,
    /// The targets of the prefix being executed (reused: no allocation).
    prefix: Vec<usize>,
    /// The window it was checked against.
    window: u64,
}

impl<'b> Prepared<'b> {
    /// Ops in the batch.
    pub fn len(&self) -> usize {
        self.ops.len()
    }

    /// Whether it has none.
    pub fn is_empty(&self) -> bool {
        self.ops.is_empty()
    }

    /// The ops, read-only (results of reads and atomics are in their
    /// buffers).
    pub fn ops(&self) -> &[Op<'b>] {
        &self.ops
    }

    /// Gives the ops back.
    pub fn into_ops(self) -> Vec<Op<'b>> {
        self.ops
    }
}

/// The distinct ranks a batch targets, in rank order, found without an
/// allocation per batch: `seen` marks ranks (one bit each, sized for the
/// communicator at window creation) and `list` keeps them, both cleared for
/// the next batch. A batch's ops name one or a few targets, so the sort is
/// of a handful. (The `BTreeSet` and the `Vec`s each batch allocated were
/// about a third of `fabkit mpi-perf`'s time at one op per batch: malloc,
/// free, building and sorting the set; see
/// results/dht-speed/mpi-perf-before.perf.txt.)
#[derive(Debug, Default)]
pub(super) struct Targets {
    ranks: usize,
    seen: Vec<u64>,
    list: Vec<usize>,
}

impl Targets {
    /// An empty set for a communicator of `ranks` ranks.
    pub(super) fn new(ranks: usize) -> Targets {
        Targets {
            ranks,
            seen: vec![0; ranks.div_ceil(64)],
            list: Vec::with_capacity(ranks.min(64)),
        }
    }

    /// Empties the set.
    pub(super) fn clear(&mut self) {
        for &r in &self.list {
            self.seen[r / 64] &= !(1 << (r % 64));
        }
        self.list.clear();
    }

    /// Adds `r` unless it is there already or beyond the communicator
    /// (validation reports those). The batch's ops mostly name the rank the
    /// one before named: that is checked first.
    #[inline]
    pub(super) fn add(&mut self, r: usize) {
        debug_assert!(r < self.ranks, "rank {r} of {} validated", self.ranks);
        if self.list.last() == Some(&r) || r >= self.ranks {
            return;
        }
        let (word, bit) = (&mut self.seen[r / 64], 1u64 << (r % 64));
        if *word & bit == 0 {
            *word |= bit;
            self.list.push(r);
        }
    }

    /// Puts the ranks in order; call after the last [`Targets::add`].
    fn sort(&mut self) {
        self.list.sort_unstable();
    }

    /// Makes the set the distinct `ranks`, in order.
    fn fill(&mut self, ranks: impl Iterator<Item = usize>) {
        self.clear();
        let n = self.ranks;
        ranks.filter(|&r| r < n).for_each(|r| self.add(r));
        self.sort();
    }

    pub(super) fn as_slice(&self) -> &[usize] {
        &self.list
    }
}

#[cfg(test)]
mod tests {
    use super::Targets;

    #[test]
    fn targets_are_distinct_in_rank_order_and_cleared_between_batches() {
        let mut t = Targets::new(130);
        t.fill([129, 3, 64, 3, 0, 129, 130, 1000].into_iter());
        assert_eq!(t.as_slice(), [0, 3, 64, 129], "130 and 1000 are no ranks");
        t.fill([5].into_iter());
        assert_eq!(t.as_slice(), [5]);
        t.fill([3, 129].into_iter());
        assert_eq!(
            t.as_slice(),
            [3, 129],
            "the last batch's marks were cleared"
        );
        t.fill(std::iter::empty());
        assert!(t.as_slice().is_empty());
        let mut none = Targets::default();
        none.fill([0].into_iter());
        assert!(none.as_slice().is_empty(), "a set for no ranks holds none");
    }
}
