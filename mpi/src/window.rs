//! MPI one-sided RMA windows that execute the same [`Op`] batches as a fabric
//! fabric rank (fabkit-fabric's `Rank`), so one algorithm runs over native libfabric and over MPI
//! and the two can be compared directly.
//!
//! Synchronisation is explicit ([`Sync`]), as in seed 003's comparison:
//! `lock_all` plus flush, lock/unlock per batch (shared or exclusive), fence,
//! and post-start-complete-wait. Windows come from `MPI_Win_allocate` or from
//! `MPI_Win_create` over `MPI_Alloc_mem`, which Open MPI treats very
//! differently (on one node `allocate` maps shared memory for `osc sm`).
//!
//! A [`Window`] borrows the [`MpiBootstrap`] that owns the MPI environment,
//! so it cannot outlive `MPI_Finalize` (a compile error, not a crash); a
//! window leaked with `mem::forget` ends the borrow, so the bootstrap also
//! counts live windows and skips `MPI_Finalize` while one is left. Freeing
//! is explicit and collective ([`Window::free`]); dropping a window does no
//! collective (it may be an error path on one rank only): it leaves the
//! window to the process's end and the bootstrap skips `MPI_Finalize`.
//!
//! Errors never leave an epoch open: whatever fails while a batch is being
//! issued, the epoch that completes what was issued (flush, unlock, fence,
//! complete) still runs before the error is returned, so no Get or atomic
//! result lands in a buffer the caller has got back. If that closing call
//! itself fails, the process aborts the MPI job (see [`Window::execute`]).
//!
//! # What is bounded and what is not
//!
//! Bounded by the bootstrap's timeout ([`MpiBootstrap::set_timeout`]):
//! everything that waits for other ranks before a window exists or around
//! its creation and free (the size agreement, the agreement on
//! `MPI_Alloc_mem`'s and the creation call's result, the barriers before
//! `MPI_Win_free` and `MPI_Finalize`), and the PSCW target's
//! [`Window::wait`] (an `MPI_Win_test` loop). Not bounded, because MPI has
//! no non-blocking form of them and Open MPI spins inside: `MPI_Win_allocate`
//! and `MPI_Win_create` themselves once every rank has entered them (a rank
//! failing locally inside the call leaves the others in it), `MPI_Win_fence`,
//! `MPI_Win_start`, `MPI_Win_lock`/`unlock`, `MPI_Win_flush`,
//! `MPI_Win_complete` and `MPI_Win_free`. A rank that dies while a peer is in
//! one of those is handled by the launcher, which ends the job (under
//! `--enable-recovery` the peer waits until mpirun is stopped).

use std::cell::RefCell;
use std::collections::BTreeSet;
use std::ffi::c_void;
use std::io::Write as _;
use std::sync::atomic::{AtomicU64, Ordering as AtomicOrdering};
use std::time::{Duration, Instant};

use mpi::ffi;
use serde::Serialize;

use fabkit_core::{Bootstrap, Op, OpKind, Remote};

use crate::bootstrap::MpiBootstrap;
use fabkit_core::Error as CoreError;

use crate::error::{check, error_string, Error, Result};
use crate::shim::*;

/// Where a [`WindowKind::Create`] window starts: a page boundary.
const PAGE: usize = 4096;

/// How the window's memory is obtained.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum WindowKind {
    /// `MPI_Win_allocate`: MPI allocates (and may map shared memory).
    Allocate,
    /// `MPI_Win_create` over memory from `MPI_Alloc_mem`, starting on a
    /// page.
    Create,
}

/// How an origin's batch is synchronised.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Sync {
    /// One `MPI_Win_lock_all` for the window's life; `MPI_Win_flush` per batch.
    LockAll,
    /// `MPI_Win_lock(SHARED)` / `unlock` around each batch, per target.
    LockShared,
    /// `MPI_Win_lock(EXCLUSIVE)` / `unlock` around each batch, per target.
    LockExclusive,
    /// `MPI_Win_fence` after each batch; collective: every rank fences.
    Fence,
    /// `MPI_Win_start`/`complete` at the origin, `post`/`wait` at targets.
    Pscw,
}

/// An RMA window over `len` bytes on every rank of the bootstrap's
/// communicator. Borrows the [`MpiBootstrap`], which owns MPI, so the window
/// is freed before MPI is finalized:
///
/// ```compile_fail,E0505
/// use fabkit_mpi::{MpiBootstrap, Window, WindowKind};
/// let boot = MpiBootstrap::init().unwrap();
/// let win = Window::new(&boot, 64, WindowKind::Allocate).unwrap();
/// drop(boot); // MPI_Finalize while `win` lives: refused by the compiler
/// win.free().unwrap();
/// ```
///
/// Free it with [`Window::free`] (collective) on every rank; see the module
/// docs for what dropping it does instead.
#[doc(alias = "MPI_Win")]
pub struct Window<'env> {
    win: ffi::MPI_Win,
    base: *mut u8,
    /// For [`WindowKind::Create`], the block from `MPI_Alloc_mem` that
    /// `base` lies in (what `MPI_Free_mem` takes); null otherwise.
    alloc: *mut u8,
    len: usize,
    kind: WindowKind,
    rank: usize,
    size: usize,
    locked_all: bool,
    /// Targets locked with [`Window::lock`].
    locked: BTreeSet<usize>,
    /// The origins of the open PSCW exposure epoch ([`Window::post`]).
    posted: RefCell<Vec<usize>>,
    /// The distinct targets of the batch being executed, kept from batch to
    /// batch so that executing one allocates nothing (see [`Targets`]).
    targets: Targets,
    /// Unique in the process: names this window in its [`Prepared`]
    /// batches (a handle could be reused by a later window).
    id: u64,
    boot: &'env MpiBootstrap,
    /// Test seam: how many more data-moving calls succeed before one fails.
    #[cfg(feature = "test-seams")]
    fail_after: std::cell::Cell<Option<usize>>,
}

impl std::fmt::Debug for Window<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Window")
            .field("len", &self.len)
            .field("kind", &self.kind)
            .field("rank", &self.rank)
            .finish()
    }
}

/// `MPI_LOCK_EXCLUSIVE` or `MPI_LOCK_SHARED`.
fn lock_kind(exclusive: bool) -> i32 {
    // SAFETY: plain constants exported by the shim.
    unsafe {
        if exclusive {
            fabkit_mpi_lock_exclusive
        } else {
            fabkit_mpi_lock_shared
        }
    }
}

/// Turns an MPI return code of a call on `peer`'s window into a Result
/// naming both.
fn check_on(call: &'static str, peer: usize, rc: i32) -> Result<()> {
    check(call, rc).map_err(|_| Error::MpiPeer {
        call,
        peer,
        code: rc,
        msg: error_string(rc),
    })
}

/// Every rank's MPI return code of `call` (collective, bounded by the
/// bootstrap's timeout): `Ok` when all succeeded, else the first failure,
/// named by rank, on every rank alike.
fn agree_on_rc(boot: &MpiBootstrap, call: &'static str, rc: i32) -> Result<()> {
    let all = boot.allgather(&rc.to_le_bytes())?;
    // SAFETY: a plain constant exported by the shim.
    let ok = unsafe { fabkit_mpi_success };
    for (r, b) in all.iter().enumerate() {
        let code = <[u8; 4]>::try_from(b.as_slice())
            .map(i32::from_le_bytes)
            .map_err(|_| {
                Error::from(CoreError::Mismatch {
                    what: "the window creation message".into(),
                    detail: format!("rank {r} sent something other than an MPI return code"),
                })
            })?;
        if code != ok {
            return Err(Error::from(CoreError::Mismatch {
                what: format!("whether {call} succeeded"),
                detail: format!(
                    "it failed on rank {r}: {} (MPI error {code}); no window was made",
                    error_string(code)
                ),
            }));
        }
    }
    Ok(())
}

/// Per-rank window sizes as the allgather delivered them: all equal and
/// non-zero, or one error every rank reaches alike.
fn agree_on_len(all: &[Vec<u8>]) -> Result<usize> {
    let lens: Vec<u64> = all
        .iter()
        .map(|b| <[u8; 8]>::try_from(b.as_slice()).map(u64::from_le_bytes))
        .collect::<std::result::Result<_, _>>()
        .map_err(|_| {
            Error::from(CoreError::Mismatch {
                what: "the window creation message".into(),
                detail: "a rank sent something other than a u64 length".into(),
            })
        })?;
    if let Some(r) = lens.iter().position(|&l| l == 0) {
        return Err(Error::from(CoreError::InvalidArgument(format!(
            "an MPI window needs at least 1 byte per rank; rank {r} asked for 0"
        ))));
    }
    if lens.windows(2).any(|w| w[0] != w[1]) {
        let detail: Vec<String> = lens
            .iter()
            .enumerate()
            .map(|(r, l)| format!("rank {r}: {l} B"))
            .collect();
        return Err(Error::from(CoreError::Mismatch {
            what: "the MPI window size".into(),
            detail: detail.join(", "),
        }));
    }
    let len = lens[0];
    usize::try_from(len)
        .ok()
        .filter(|&l| ffi::MPI_Aint::try_from(l).is_ok())
        .ok_or_else(|| {
            Error::from(CoreError::InvalidArgument(format!(
                "an MPI window of {len} B is too large"
            )))
        })
}

impl<'env> Window<'env> {
    /// Creates a zeroed window of `len` bytes on every rank of `boot`.
    /// Collective: every rank passes the same `len` (checked first, through
    /// the bootstrap's bounded allgather, so a rank that asks for another
    /// size or never comes fails every rank instead of hanging them). For
    /// [`WindowKind::Create`] the ranks also agree that `MPI_Alloc_mem`
    /// succeeded everywhere before `MPI_Win_create`, and for both kinds that
    /// the creation call did; a rank whose creation call fails inside MPI
    /// while the others wait in it is not bounded (see the module docs).
    pub fn new(boot: &'env MpiBootstrap, len: usize, kind: WindowKind) -> Result<Window<'env>> {
        let all = boot.allgather(&(len as u64).to_le_bytes())?;
        let len = agree_on_len(&all)?;
        let comm = boot.comm();
        // SAFETY: reading an MPI handle constant exported by rsmpi.
        let mut win: ffi::MPI_Win = unsafe { ffi::RSMPI_WIN_NULL };
        let mut base: *mut u8 = std::ptr::null_mut();
        let mut alloc: *mut u8 = std::ptr::null_mut();
        let size = len as ffi::MPI_Aint; // checked by agree_on_len
        let (call, rc) = match kind {
            WindowKind::Allocate => {
                // SAFETY: out-parameters are valid; the communicator is live
                // and returns errors (MpiBootstrap sets MPI_ERRORS_RETURN).
                let rc = unsafe {
                    ffi::MPI_Win_allocate(
                        size,
                        1,
                        ffi::RSMPI_INFO_NULL,
                        comm,
                        (&mut base as *mut *mut u8).cast(),
                        &mut win,
                    )
                };
                ("MPI_Win_allocate", rc)
            }
            WindowKind::Create => {
                // The window starts on a page, as MPI_Win_allocate's memory
                // and the memory OSU's benchmarks expose do: Open MPI 4.1's
                // MPI_Alloc_mem is malloc (16-byte aligned), and a copy
                // whose ends sit at other offsets in their cache lines
                // costs more. Every rank has the same len, so all fail here
                // alike.
                let padded = ffi::MPI_Aint::try_from(len)
                    .ok()
                    .and_then(|l| l.checked_add(PAGE as ffi::MPI_Aint))
                    .ok_or_else(|| {
                        Error::from(CoreError::InvalidArgument(format!(
                            "an MPI window of {len} B is too large"
                        )))
                    })?;
                // SAFETY: the out-parameter is valid.
                let rc = unsafe {
                    ffi::MPI_Alloc_mem(
                        padded,
                        ffi::RSMPI_INFO_NULL,
                        (&mut alloc as *mut *mut u8).cast(),
                    )
                };
                // A rank without memory must not leave the others in
                // MPI_Win_create: agree first, bounded.
                let agreed = agree_on_rc(boot, "MPI_Alloc_mem", rc);
                if agreed.is_err() {
                    // SAFETY: a plain constant exported by the shim.
                    if rc == unsafe { fabkit_mpi_success } {
                        // SAFETY: allocated just above, not exposed.
                        unsafe { ffi::MPI_Free_mem(alloc.cast()) };
                    }
                    agreed?;
                }
                // SAFETY: alloc holds len + PAGE bytes, so the first page
                // boundary in it is followed by at least len of them.
                base = unsafe { alloc.add(alloc.align_offset(PAGE)) };
                // SAFETY: base holds `size` bytes from MPI_Alloc_mem; the
                // communicator is live and returns errors.
                let rc = unsafe {
                    ffi::MPI_Win_create(base.cast(), size, 1, ffi::RSMPI_INFO_NULL, comm, &mut win)
                };
                ("MPI_Win_create", rc)
            }
        };
        // SAFETY: a plain constant exported by the shim.
        let created = rc == unsafe { fabkit_mpi_success };
        if created {
            boot.window_created();
        } else if kind == WindowKind::Create {
            // SAFETY: from MPI_Alloc_mem above; no window exposes it.
            unsafe { ffi::MPI_Free_mem(alloc.cast()) };
        }
        // From here Drop leaves the window (no collective), and the
        // bootstrap, which counts it live, skips MPI_Finalize.
        let w = Window {
            win,
            base,
            alloc,
            len,
            kind,
            rank: boot.rank(),
            size: boot.size(),
            locked_all: false,
            locked: BTreeSet::new(),
            posted: RefCell::new(Vec::new()),
            targets: Targets::new(boot.size()),
            id: NEXT_WINDOW_ID.fetch_add(1, AtomicOrdering::Relaxed),
            boot,
            #[cfg(feature = "test-seams")]
            fail_after: std::cell::Cell::new(None),
        };
        // Every rank learns whether every rank has a window, bounded: a
        // rank whose call failed returns here instead of in a later
        // collective the others would wait for.
        let agreed = agree_on_rc(boot, call, rc);
        if !created {
            std::mem::forget(w);
            agreed?;
            return check(call, rc).map(|_| unreachable!("agreed on a failure"));
        }
        agreed?;
        // SAFETY: the window is live; the handler constant comes from rsmpi.
        // Errors come back to the caller, naming the call, instead of
        // aborting the job.
        check("MPI_Win_set_errhandler", unsafe {
            ffi::MPI_Win_set_errhandler(w.win, ffi::RSMPI_ERRORS_RETURN)
        })?;
        // SAFETY: base points to our `len` bytes of the window; no one
        // accesses them before the barrier below.
        unsafe { std::ptr::write_bytes(w.base, 0, len) };
        boot.barrier()?;
        Ok(w)
    }

    /// Frees the window: collective, every rank calls it at the same point.
    /// Ends the epochs this rank holds, meets the other ranks in the
    /// bootstrap's bounded barrier, then `MPI_Win_free` (which waits without
    /// a deadline, hence the barrier first). When the barrier fails, or the
    /// bootstrap is already broken, the window is left to the process's end
    /// and the error returned; MPI is then not finalized.
    pub fn free(mut self) -> Result<()> {
        self.boot.usable()?;
        self.unlock_all()?;
        for t in std::mem::take(&mut self.locked) {
            // SAFETY: the window is live and locked on t by us.
            check_on("MPI_Win_unlock", t, unsafe {
                ffi::MPI_Win_unlock(t as i32, self.win)
            })?;
        }
        self.boot.barrier()?;
        // SAFETY: the window is live; every rank reached the barrier above
        // and frees its window next. The bootstrap (and so MPI) outlives
        // self, which borrows it.
        let rc = unsafe { ffi::MPI_Win_free(&mut self.win) };
        check("MPI_Win_free", rc)?;
        self.boot.window_freed();
        if self.kind == WindowKind::Create {
            // SAFETY: from MPI_Alloc_mem; the window exposing it is freed.
            unsafe { ffi::MPI_Free_mem(self.alloc.cast()) };
        }
        std::mem::forget(self);
        Ok(())
    }

    /// Bytes per rank.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Never empty (creation refuses 0).
    pub fn is_empty(&self) -> bool {
        false
    }

    /// How the memory was obtained.
    pub fn kind(&self) -> WindowKind {
        self.kind
    }

    /// Test seam (feature `test-seams`, for this crate's tests only): the
    /// next `calls` data-moving MPI calls (Put, Get, the atomics) are
    /// issued, and the one after fails with `MPI_ERR_OTHER` without reaching
    /// MPI; then the seam is off again. It exists because neither of Open
    /// MPI's one-node components returns an error for an operation that
    /// passes [`Window::execute`]'s checks: `osc sm` copies through shared
    /// memory, and `osc pt2pt` reports a bad target access at the target,
    /// not to the origin's call. So an MPI error mid-batch cannot be
    /// provoked here for real.
    #[cfg(feature = "test-seams")]
    #[doc(hidden)]
    pub fn fail_after(&self, calls: usize) {
        self.fail_after.set(Some(calls));
    }

    /// Checks the return code of the call that completes an epoch's
    /// operations, and ends the process if it failed: MPI cannot cancel an
    /// RMA operation, so a Get or atomic result could land in a buffer after
    /// the caller got it back. The message goes to stderr (a failed write is
    /// ignored: nothing may unwind from here), then `MPI_Abort` ends the job
    /// through the launcher, and should it return, `abort()` ends this
    /// process.
    fn closed(&self, call: &'static str, peer: Option<usize>, rc: i32) {
        let Err(e) = (match peer {
            Some(p) => check_on(call, p, rc),
            None => check(call, rc),
        }) else {
            return;
        };
        let _ = writeln!(
            std::io::stderr().lock(),
            "fabkit: rank {}: {e}: operations of the epoch may still write the \
             caller's buffers, so this rank aborts the MPI job",
            self.rank
        );
        // SAFETY: the communicator is live.
        unsafe { ffi::MPI_Abort(self.boot.comm(), 1) };
        std::process::abort();
    }

    /// Starts a passive-target epoch on all ranks (`MPI_Win_lock_all`).
    pub fn lock_all(&mut self) -> Result<()> {
        if !self.locked_all {
            if !self.locked.is_empty() {
                return Err(Error::from(CoreError::InvalidArgument(format!(
                    "MPI_Win_lock_all while ranks {:?} are locked is erroneous; unlock them first",
                    self.locked
                ))));
            }
            // SAFETY: the window is live.
            check("MPI_Win_lock_all", unsafe {
                ffi::MPI_Win_lock_all(0, self.win)
            })?;
            self.locked_all = true;
        }
        Ok(())
    }

    /// Ends the `lock_all` epoch. If `MPI_Win_unlock_all` fails the epoch
    /// counts as still open.
    pub fn unlock_all(&mut self) -> Result<()> {
        if self.locked_all {
            // SAFETY: the window is live and locked by us.
            check("MPI_Win_unlock_all", unsafe {
                ffi::MPI_Win_unlock_all(self.win)
            })?;
            self.locked_all = false;
        }
        Ok(())
    }

    /// Starts a passive-target epoch on `rank` alone (`MPI_Win_lock`), shared
    /// or exclusive. Not while [`Window::lock_all`] is held.
    pub fn lock(&mut self, rank: usize, exclusive: bool) -> Result<()> {
        if self.locked_all {
            return Err(Error::from(CoreError::InvalidArgument(
                "MPI_Win_lock inside a lock_all epoch is erroneous; unlock_all first".into(),
            )));
        }
        if rank >= self.size {
            return Err(Error::from(CoreError::NoSuchRank {
                peer: rank,
                ranks: self.size,
            }));
        }
        if self.locked.contains(&rank) {
            return Err(Error::from(CoreError::InvalidArgument(format!(
                "rank {rank}'s window is already locked by this rank; unlock it first"
            ))));
        }
        // SAFETY: the window is live and rank is valid.
        check_on("MPI_Win_lock", rank, unsafe {
            ffi::MPI_Win_lock(lock_kind(exclusive), rank as i32, 0, self.win)
        })?;
        self.locked.insert(rank);
        Ok(())
    }

    /// Ends the epoch [`Window::lock`] started on `rank`.
    ///
    /// # Aborts
    ///
    /// When `MPI_Win_unlock` fails (see [`Window::execute`]).
    pub fn unlock(&mut self, rank: usize) -> Result<()> {
        if !self.locked.remove(&rank) {
            return Err(Error::from(CoreError::InvalidArgument(format!(
                "rank {rank}'s window is not locked by this rank"
            ))));
        }
        // SAFETY: the window is live and locked on `rank` by us.
        let rc = unsafe { ffi::MPI_Win_unlock(rank as i32, self.win) };
        self.closed("MPI_Win_unlock", Some(rank), rc);
        Ok(())
    }

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

    /// `MPI_Win_fence`: collective; ends one active-target epoch and opens the
    /// next. Targets of [`Sync::Fence`] call this once per origin batch. Not
    /// bounded (see the module docs).
    pub fn fence(&self) -> Result<()> {
        // SAFETY: the window is live.
        check("MPI_Win_fence", unsafe { ffi::MPI_Win_fence(0, self.win) })
    }

    /// The group of `ranks` (distinct, in rank order) in the window's
    /// communicator.
    fn group_of(&self, ranks: &[usize]) -> Result<ffi::MPI_Group> {
        // SAFETY: reading MPI handle constants exported by rsmpi.
        let (mut world, mut g) = unsafe { (ffi::RSMPI_GROUP_NULL, ffi::RSMPI_GROUP_NULL) };
        let list: Vec<i32> = ranks.iter().map(|&r| r as i32).collect();
        // SAFETY: the window is live; list holds valid ranks (validated).
        unsafe {
            check(
                "MPI_Win_get_group",
                ffi::MPI_Win_get_group(self.win, &mut world),
            )?;
            let rc = ffi::MPI_Group_incl(world, list.len() as i32, list.as_ptr(), &mut g);
            ffi::MPI_Group_free(&mut world);
            check("MPI_Group_incl", rc)?;
        }
        Ok(g)
    }

    /// PSCW target side: exposes the window to `origins` for one epoch
    /// (`MPI_Win_post`); end it with [`Window::wait`].
    pub fn post(&self, origins: &[usize]) -> Result<()> {
        if let Some(&r) = origins.iter().find(|&&r| r >= self.size) {
            return Err(Error::from(CoreError::NoSuchRank {
                peer: r,
                ranks: self.size,
            }));
        }
        let mut distinct = origins.to_vec();
        distinct.sort_unstable();
        distinct.dedup();
        let mut g = self.group_of(&distinct)?;
        // SAFETY: window and group are live; the group is freed after use.
        unsafe {
            let rc = ffi::MPI_Win_post(g, 0, self.win);
            ffi::MPI_Group_free(&mut g);
            check("MPI_Win_post", rc)?;
        }
        *self.posted.borrow_mut() = origins.to_vec();
        Ok(())
    }

    /// PSCW target side: waits until the origins completed their access
    /// epoch, through `MPI_Win_test` with naps (50 us doubling up to the
    /// bootstrap's nap ceiling), for at most the bootstrap's timeout. On a
    /// timeout the exposure epoch stays open and the error names the origins
    /// waited for; the window cannot take part in another epoch then.
    pub fn wait(&self) -> Result<()> {
        let limit = self.boot.wait_limit();
        let start = Instant::now();
        let mut nap = Duration::from_micros(50);
        loop {
            let mut done = 0;
            // SAFETY: the window is live and posted.
            check("MPI_Win_test", unsafe {
                ffi::MPI_Win_test(self.win, &mut done)
            })?;
            if done != 0 {
                self.posted.borrow_mut().clear();
                return Ok(());
            }
            let waited = start.elapsed();
            if waited >= limit {
                let origins: Vec<String> =
                    self.posted.borrow().iter().map(|r| r.to_string()).collect();
                return Err(Error::WindowTimeout {
                    call: "MPI_Win_wait",
                    rank: self.rank,
                    origins: origins.join(", "),
                    timeout: limit,
                });
            }
            std::thread::sleep(nap.min(limit - waited));
            nap = (nap * 2).min(Duration::from_millis(5));
        }
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

    /// An active-target epoch inside a lock epoch is erroneous MPI: refused.
    fn refuse_active_in_lock(&self, sync: Sync) -> Result<()> {
        if sync != Sync::LockAll && (self.locked_all || !self.locked.is_empty()) {
            return Err(Error::from(CoreError::InvalidArgument(format!(
                "a {sync:?} execute inside an open lock epoch is erroneous; unlock first"
            ))));
        }
        Ok(())
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

    /// `MPI_Win_start` on `targets` (PSCW origin side).
    fn start(&self, targets: &[usize]) -> Result<()> {
        let mut g = self.group_of(targets)?;
        // SAFETY: window and group live; the group is freed below.
        let rc = unsafe { ffi::MPI_Win_start(g, 0, self.win) };
        // SAFETY: as above.
        unsafe { ffi::MPI_Group_free(&mut g) };
        check("MPI_Win_start", rc).map_err(|e| match (e, targets.first()) {
            (Error::Mpi { call, code, msg }, Some(&peer)) if targets.len() == 1 => Error::MpiPeer {
                call,
                peer,
                code,
                msg,
            },
            (e, _) => e,
        })
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

/// Where window ids come from ([`Window`]'s `id`).
static NEXT_WINDOW_ID: AtomicU64 = AtomicU64::new(1);

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
struct Targets {
    ranks: usize,
    seen: Vec<u64>,
    list: Vec<usize>,
}

impl Targets {
    /// An empty set for a communicator of `ranks` ranks.
    fn new(ranks: usize) -> Targets {
        Targets {
            ranks,
            seen: vec![0; ranks.div_ceil(64)],
            list: Vec::with_capacity(ranks.min(64)),
        }
    }

    /// Empties the set.
    fn clear(&mut self) {
        for &r in &self.list {
            self.seen[r / 64] &= !(1 << (r % 64));
        }
        self.list.clear();
    }

    /// Adds `r` unless it is there already or beyond the communicator
    /// (validation reports those). The batch's ops mostly name the rank the
    /// one before named: that is checked first.
    #[inline]
    fn add(&mut self, r: usize) {
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

    fn as_slice(&self) -> &[usize] {
        &self.list
    }
}

impl Drop for Window<'_> {
    /// No collective: a window dropped without [`Window::free`] is on an
    /// error path (one rank's `?` or panic), where the others may be in any
    /// collective. It is left to the process's end; the bootstrap still
    /// counts it live and so skips `MPI_Finalize`.
    fn drop(&mut self) {}
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
