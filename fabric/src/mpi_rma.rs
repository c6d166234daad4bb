//! MPI one-sided RMA windows that execute the same [`Op`] batches as a fabric
//! [`crate::Rank`], so one algorithm runs over native libfabric and over MPI
//! and the two can be compared directly.
//!
//! Synchronisation is explicit ([`Sync`]), as in seed 003's comparison:
//! `lock_all` plus flush, lock/unlock per batch (shared or exclusive), fence,
//! and post-start-complete-wait. Windows come from `MPI_Win_allocate` or from
//! `MPI_Win_create` over `MPI_Alloc_mem`, which Open MPI treats very
//! differently (on one node `allocate` maps shared memory for `osc sm`).
//!
//! MPI calls have no timeouts: a dead rank is handled by the launcher, which
//! ends the job.

use std::collections::BTreeSet;
use std::ffi::c_void;

use mpi::collective::CommunicatorCollectives;
use mpi::ffi;
use mpi::topology::{Communicator, SimpleCommunicator};
use mpi::traits::AsRaw;
use serde::Serialize;

use crate::error::{Error, OpKind, Result};
use crate::rank::Op;

#[allow(non_upper_case_globals)]
extern "C" {
    static fabkit_mpi_replace: ffi::MPI_Op;
    static fabkit_mpi_no_op: ffi::MPI_Op;
    static fabkit_mpi_lock_shared: i32;
    static fabkit_mpi_lock_exclusive: i32;
    static fabkit_mpi_success: i32;
    static fabkit_mpi_max_error_string: i32;
}

/// How the window's memory is obtained.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum WindowKind {
    /// `MPI_Win_allocate`: MPI allocates (and may map shared memory).
    Allocate,
    /// `MPI_Win_create` over memory from `MPI_Alloc_mem`.
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

impl Sync {
    /// Whether targets take part in every epoch (fence, PSCW).
    pub fn is_active_target(self) -> bool {
        matches!(self, Sync::Fence | Sync::Pscw)
    }
}

fn check(call: &'static str, rc: i32) -> Result<()> {
    // SAFETY: a plain constant exported by the shim.
    if rc == unsafe { fabkit_mpi_success } {
        return Ok(());
    }
    // SAFETY: as above.
    let mut buf = vec![0u8; unsafe { fabkit_mpi_max_error_string } as usize + 1];
    let mut len = 0;
    // SAFETY: buf has room for MPI_MAX_ERROR_STRING characters.
    unsafe { ffi::MPI_Error_string(rc, buf.as_mut_ptr().cast(), &mut len) };
    buf.truncate(len.max(0) as usize);
    Err(Error::Mpi {
        call,
        code: rc,
        msg: String::from_utf8_lossy(&buf).into_owned(),
    })
}

/// An RMA window over `len` bytes on every rank of a communicator.
pub struct Window {
    win: ffi::MPI_Win,
    comm: ffi::MPI_Comm,
    base: *mut u8,
    len: usize,
    kind: WindowKind,
    rank: usize,
    size: usize,
    locked_all: bool,
}

impl std::fmt::Debug for Window {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Window")
            .field("len", &self.len)
            .field("kind", &self.kind)
            .field("rank", &self.rank)
            .finish()
    }
}

impl Window {
    /// Creates a zeroed window of `len` bytes on every rank of `comm`.
    /// Collective.
    pub fn new(comm: &SimpleCommunicator, len: usize, kind: WindowKind) -> Result<Window> {
        if len == 0 {
            return Err(Error::InvalidArgument(
                "an MPI window needs at least 1 byte".into(),
            ));
        }
        let raw_comm = comm.as_raw();
        // SAFETY: reading an MPI handle constant exported by rsmpi.
        let mut win: ffi::MPI_Win = unsafe { ffi::RSMPI_WIN_NULL };
        let mut base: *mut u8 = std::ptr::null_mut();
        let size = len as ffi::MPI_Aint;
        // SAFETY: out-parameters are valid; the communicator is live.
        unsafe {
            match kind {
                WindowKind::Allocate => check(
                    "MPI_Win_allocate",
                    ffi::MPI_Win_allocate(
                        size,
                        1,
                        ffi::RSMPI_INFO_NULL,
                        raw_comm,
                        (&mut base as *mut *mut u8).cast(),
                        &mut win,
                    ),
                )?,
                WindowKind::Create => {
                    check(
                        "MPI_Alloc_mem",
                        ffi::MPI_Alloc_mem(
                            size,
                            ffi::RSMPI_INFO_NULL,
                            (&mut base as *mut *mut u8).cast(),
                        ),
                    )?;
                    check(
                        "MPI_Win_create",
                        ffi::MPI_Win_create(
                            base.cast(),
                            size,
                            1,
                            ffi::RSMPI_INFO_NULL,
                            raw_comm,
                            &mut win,
                        ),
                    )?;
                }
            }
            // Report errors instead of aborting, so they can name the call.
            ffi::MPI_Win_set_errhandler(win, ffi::RSMPI_ERRORS_RETURN);
            // Zero our part before anyone may access it.
            std::ptr::write_bytes(base, 0, len);
        }
        let w = Window {
            win,
            comm: raw_comm,
            base,
            len,
            kind,
            rank: comm.rank() as usize,
            size: comm.size() as usize,
            locked_all: false,
        };
        comm.barrier();
        Ok(w)
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

    /// Starts a passive-target epoch on all ranks (`MPI_Win_lock_all`).
    pub fn lock_all(&mut self) -> Result<()> {
        if !self.locked_all {
            // SAFETY: the window is live.
            check("MPI_Win_lock_all", unsafe {
                ffi::MPI_Win_lock_all(0, self.win)
            })?;
            self.locked_all = true;
        }
        Ok(())
    }

    /// Ends the `lock_all` epoch.
    pub fn unlock_all(&mut self) -> Result<()> {
        if self.locked_all {
            self.locked_all = false;
            // SAFETY: the window is live and locked by us.
            check("MPI_Win_unlock_all", unsafe {
                ffi::MPI_Win_unlock_all(self.win)
            })?;
        }
        Ok(())
    }

    /// Starts a passive-target epoch on `rank` alone (`MPI_Win_lock`), shared
    /// or exclusive. Not while [`Window::lock_all`] is held.
    pub fn lock(&mut self, rank: usize, exclusive: bool) -> Result<()> {
        if self.locked_all {
            return Err(Error::InvalidArgument(
                "MPI_Win_lock inside a lock_all epoch is erroneous; unlock_all first".into(),
            ));
        }
        // SAFETY: plain constants exported by the shim.
        let kind = unsafe {
            if exclusive {
                fabkit_mpi_lock_exclusive
            } else {
                fabkit_mpi_lock_shared
            }
        };
        // SAFETY: the window is live; a bad rank is an error MPI returns.
        check("MPI_Win_lock", unsafe {
            ffi::MPI_Win_lock(kind, rank as i32, 0, self.win)
        })
    }

    /// Ends the epoch [`Window::lock`] started on `rank`.
    pub fn unlock(&mut self, rank: usize) -> Result<()> {
        // SAFETY: the window is live and locked on `rank` by us.
        check("MPI_Win_unlock", unsafe {
            ffi::MPI_Win_unlock(rank as i32, self.win)
        })
    }

    /// Executes a batch inside the passive-target epoch already open on its
    /// targets (from [`Window::lock`] or [`Window::lock_all`]): issues the
    /// operations, then `MPI_Win_flush` per target, so results are delivered
    /// when it returns.
    ///
    /// Every write is therefore remotely complete when this returns: "the
    /// operations are completed both at the origin and at the target"
    /// (MPI 3.1, 11.5.4, `MPI_Win_flush`). That is what
    /// [`Completion::Delivery`](crate::Completion::Delivery) asks for, so
    /// both completions are posted alike (`MPI_Put`), and an operation of a
    /// later batch (a lock release) cannot overtake them. The targets are
    /// flushed even when issuing fails part-way, so that what was issued
    /// is complete before the caller's error path (a release) runs.
    pub fn execute_in_epoch(&mut self, ops: &mut [Op<'_>]) -> Result<()> {
        for op in ops.iter() {
            self.validate(op)?;
        }
        let targets: BTreeSet<usize> = ops.iter().map(|o| o.target().rank).collect();
        let issued = self.issue(ops);
        let mut flushed = Ok(());
        for &t in &targets {
            // SAFETY: the window is live and in an epoch on t.
            let r = check("MPI_Win_flush", unsafe {
                ffi::MPI_Win_flush(t as i32, self.win)
            });
            flushed = flushed.and(r);
        }
        issued.and(flushed)
    }

    /// Whether a `lock_all` epoch is open.
    pub fn is_locked_all(&self) -> bool {
        self.locked_all
    }

    /// `MPI_Win_fence`: collective; ends one active-target epoch and opens the
    /// next. Targets of [`Sync::Fence`] call this once per origin batch.
    pub fn fence(&self) -> Result<()> {
        // SAFETY: the window is live.
        check("MPI_Win_fence", unsafe { ffi::MPI_Win_fence(0, self.win) })
    }

    fn group_of(&self, ranks: &BTreeSet<usize>) -> Result<ffi::MPI_Group> {
        // SAFETY: reading MPI handle constants exported by rsmpi.
        let (mut world, mut g) = unsafe { (ffi::RSMPI_GROUP_NULL, ffi::RSMPI_GROUP_NULL) };
        let list: Vec<i32> = ranks.iter().map(|&r| r as i32).collect();
        // SAFETY: the communicator is live; list holds valid ranks.
        unsafe {
            check("MPI_Comm_group", ffi::MPI_Comm_group(self.comm, &mut world))?;
            check(
                "MPI_Group_incl",
                ffi::MPI_Group_incl(world, list.len() as i32, list.as_ptr(), &mut g),
            )?;
            ffi::MPI_Group_free(&mut world);
        }
        Ok(g)
    }

    /// PSCW target side: exposes the window to `origins` for one epoch
    /// (`MPI_Win_post`); end it with [`Window::wait`].
    pub fn post(&self, origins: &[usize]) -> Result<()> {
        let mut g = self.group_of(&origins.iter().copied().collect())?;
        // SAFETY: window and group are live; the group is freed after use.
        unsafe {
            let rc = ffi::MPI_Win_post(g, 0, self.win);
            ffi::MPI_Group_free(&mut g);
            check("MPI_Win_post", rc)
        }
    }

    /// PSCW target side: waits until the origins completed (`MPI_Win_wait`).
    pub fn wait(&self) -> Result<()> {
        // SAFETY: the window is live and posted.
        check("MPI_Win_wait", unsafe { ffi::MPI_Win_wait(self.win) })
    }

    fn validate(&self, op: &Op<'_>) -> Result<()> {
        let at = op.target();
        let kind = op.kind();
        if matches!(kind, OpKind::Send | OpKind::Recv) {
            return Err(Error::InvalidArgument(format!(
                "{kind} is not a one-sided operation: MPI windows do RMA and atomics only"
            )));
        }
        if at.rank >= self.size {
            return Err(Error::NoSuchRank {
                peer: at.rank,
                ranks: self.size,
            });
        }
        let len = op.len();
        let fits = usize::try_from(at.offset)
            .ok()
            .and_then(|o| o.checked_add(len))
            .is_some_and(|end| end <= self.len);
        if !fits || len > i32::MAX as usize {
            return Err(Error::OutOfBounds {
                op: kind,
                peer: at.rank,
                offset: at.offset,
                len,
                region_len: self.len,
            });
        }
        if kind.is_atomic() && !at.offset.is_multiple_of(8) {
            return Err(Error::InvalidArgument(format!(
                "{kind} at offset {}: atomics need an 8-byte aligned offset",
                at.offset
            )));
        }
        Ok(())
    }

    /// Executes a batch from this origin under `sync` and returns when every
    /// operation is complete at the origin (results delivered). Everything
    /// is validated before the first call. For [`Sync::Fence`] every rank
    /// must fence once per batch; for [`Sync::Pscw`] each target must
    /// [`Window::post`] before and [`Window::wait`] after.
    pub fn execute(&mut self, sync: Sync, ops: &mut [Op<'_>]) -> Result<()> {
        for op in ops.iter() {
            self.validate(op)?;
        }
        let targets: BTreeSet<usize> = ops.iter().map(|o| o.target().rank).collect();
        match sync {
            Sync::LockAll => {
                self.lock_all()?;
                self.execute_in_epoch(ops)
            }
            Sync::LockShared | Sync::LockExclusive => {
                // SAFETY: plain constants exported by the shim.
                let lock = unsafe {
                    if sync == Sync::LockShared {
                        fabkit_mpi_lock_shared
                    } else {
                        fabkit_mpi_lock_exclusive
                    }
                };
                for &t in &targets {
                    // SAFETY: the window is live; t is a valid rank.
                    check("MPI_Win_lock", unsafe {
                        ffi::MPI_Win_lock(lock, t as i32, 0, self.win)
                    })?;
                    let mut mine: Vec<&mut Op<'_>> =
                        ops.iter_mut().filter(|o| o.target().rank == t).collect();
                    let r = self.issue_refs(&mut mine);
                    // SAFETY: locked just above.
                    let u = check("MPI_Win_unlock", unsafe {
                        ffi::MPI_Win_unlock(t as i32, self.win)
                    });
                    r.and(u)?;
                }
                Ok(())
            }
            Sync::Fence => {
                self.issue(ops)?;
                self.fence()
            }
            Sync::Pscw => {
                let mut g = self.group_of(&targets)?;
                // SAFETY: window and group live; the group is freed below.
                let rc = unsafe { ffi::MPI_Win_start(g, 0, self.win) };
                // SAFETY: as above.
                unsafe { ffi::MPI_Group_free(&mut g) };
                check("MPI_Win_start", rc)?;
                let r = self.issue(ops);
                // SAFETY: the access epoch was started above.
                let c = check("MPI_Win_complete", unsafe {
                    ffi::MPI_Win_complete(self.win)
                });
                r.and(c)
            }
        }
    }

    fn issue(&self, ops: &mut [Op<'_>]) -> Result<()> {
        let mut refs: Vec<&mut Op<'_>> = ops.iter_mut().collect();
        self.issue_refs(&mut refs)
    }

    /// Issues the MPI calls. Buffers are the ops' own (borrowed for the
    /// whole `execute`), so they outlive the epoch that completes them.
    fn issue_refs(&self, ops: &mut [&mut Op<'_>]) -> Result<()> {
        // SAFETY: reading MPI datatype constants exported by rsmpi.
        let (u8t, u64t) = unsafe { (ffi::RSMPI_UINT8_T, ffi::RSMPI_UINT64_T) };
        for op in ops.iter_mut() {
            let at = op.target();
            let (rank, disp) = (at.rank as i32, at.offset as ffi::MPI_Aint);
            let win = self.win;
            // SAFETY: every pointer is into the op's borrowed buffers or
            // fields, which live until `execute` returns, after the epoch
            // (flush, unlock, fence or complete) that completes them.
            unsafe {
                match &mut **op {
                    Op::Read { into, .. } => {
                        let n = into.len() as i32;
                        check(
                            "MPI_Get",
                            ffi::MPI_Get(into.as_mut_ptr().cast(), n, u8t, rank, disp, n, u8t, win),
                        )?
                    }
                    Op::Write { from, .. } => {
                        let n = from.len() as i32;
                        check(
                            "MPI_Put",
                            ffi::MPI_Put(
                                from.as_ptr() as *const c_void,
                                n,
                                u8t,
                                rank,
                                disp,
                                n,
                                u8t,
                                win,
                            ),
                        )?
                    }
                    Op::CompareAndSwap {
                        expected, new, old, ..
                    } => check(
                        "MPI_Compare_and_swap",
                        ffi::MPI_Compare_and_swap(
                            (new as *const u64).cast(),
                            (expected as *const u64).cast(),
                            (*old as *mut u64).cast(),
                            u64t,
                            rank,
                            disp,
                            win,
                        ),
                    )?,
                    Op::FetchAdd { delta, old, .. } => check(
                        "MPI_Fetch_and_op",
                        ffi::MPI_Fetch_and_op(
                            (delta as *const u64).cast(),
                            (*old as *mut u64).cast(),
                            u64t,
                            rank,
                            disp,
                            ffi::RSMPI_SUM,
                            win,
                        ),
                    )?,
                    Op::Fetch { value, .. } => check(
                        "MPI_Fetch_and_op",
                        ffi::MPI_Fetch_and_op(
                            std::ptr::null(),
                            (*value as *mut u64).cast(),
                            u64t,
                            rank,
                            disp,
                            fabkit_mpi_no_op,
                            win,
                        ),
                    )?,
                    Op::Swap { new, old, .. } => check(
                        "MPI_Fetch_and_op",
                        ffi::MPI_Fetch_and_op(
                            (new as *const u64).cast(),
                            (*old as *mut u64).cast(),
                            u64t,
                            rank,
                            disp,
                            fabkit_mpi_replace,
                            win,
                        ),
                    )?,
                    Op::Send { .. } | Op::Recv { .. } => unreachable!("validated"),
                }
            }
        }
        Ok(())
    }
}

impl Drop for Window {
    fn drop(&mut self) {
        let _ = self.unlock_all();
        // SAFETY: the window is live; MPI_Win_free is collective, and every
        // rank drops its window at the same point of the program.
        unsafe {
            ffi::MPI_Win_free(&mut self.win);
            if self.kind == WindowKind::Create {
                ffi::MPI_Free_mem(self.base.cast());
            }
        }
    }
}
