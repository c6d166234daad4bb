//! MPI one-sided RMA windows that execute the same [`Op`](fabkit_core::Op)
//! batches as a libfabric rank (fabkit-fabric's `Rank`), so one algorithm
//! runs over native libfabric and over MPI and the two can be compared
//! directly.
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
//!
//! The module by job: here the window itself (creation, free, what it
//! is); `epoch`, the synchronisation calls (locks, fence, PSCW); `batch`,
//! executing batches of operations in an epoch, prepared or not.

use std::cell::RefCell;
use std::collections::BTreeSet;
use std::io::Write as _;
use std::rc::Rc;
use std::sync::atomic::{AtomicU64, Ordering as AtomicOrdering};

use mpi::ffi;
use serde::Serialize;

use fabkit_core::Bootstrap;

use crate::bootstrap::MpiBootstrap;
use fabkit_core::Error as CoreError;

use crate::error::{check, error_string, Error, Result};
use crate::shim::{fabkit_mpi_lock_exclusive, fabkit_mpi_lock_shared, fabkit_mpi_success};

mod batch;
mod epoch;

pub use batch::Prepared;
use batch::Targets;

/// Where window ids come from ([`Window`]'s `id`).
static NEXT_WINDOW_ID: AtomicU64 = AtomicU64::new(1);

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
    boot: BootRef<'env>,
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

/// How a window holds the bootstrap that owns MPI: borrowed, so the
/// compiler sees that the window cannot outlive it, or shared, so the
/// window keeps it alive (a table handed to C owns its MPI this way, with
/// no borrow to tie it to a stack frame).
#[derive(Clone)]
enum BootRef<'env> {
    Borrowed(&'env MpiBootstrap),
    Shared(Rc<MpiBootstrap>),
}

impl std::ops::Deref for BootRef<'_> {
    type Target = MpiBootstrap;
    fn deref(&self) -> &MpiBootstrap {
        match self {
            BootRef::Borrowed(b) => b,
            BootRef::Shared(b) => b,
        }
    }
}

impl<'env> Window<'env> {
    /// [`Window::new`] on a bootstrap the window shares: it keeps `boot`
    /// (and so MPI) alive for as long as it lives, so it can be kept in a
    /// value of its own (an owned table) with any lifetime. Collective.
    pub fn new_shared(boot: Rc<MpiBootstrap>, len: usize, kind: WindowKind) -> Result<Self> {
        Window::make(BootRef::Shared(boot), len, kind)
    }

    /// Creates a zeroed window of `len` bytes on every rank of `boot`.
    /// Collective: every rank passes the same `len` (checked first, through
    /// the bootstrap's bounded allgather, so a rank that asks for another
    /// size or never comes fails every rank instead of hanging them). For
    /// [`WindowKind::Create`] the ranks also agree that `MPI_Alloc_mem`
    /// succeeded everywhere before `MPI_Win_create`, and for both kinds that
    /// the creation call did; a rank whose creation call fails inside MPI
    /// while the others wait in it is not bounded (see the module docs).
    pub fn new(boot: &'env MpiBootstrap, len: usize, kind: WindowKind) -> Result<Window<'env>> {
        Window::make(BootRef::Borrowed(boot), len, kind)
    }

    fn make(held: BootRef<'env>, len: usize, kind: WindowKind) -> Result<Window<'env>> {
        let boot: &MpiBootstrap = &held;
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
            boot: held.clone(),
            #[cfg(feature = "test-seams")]
            fail_after: std::cell::Cell::new(None),
        };
        // Every rank learns whether every rank has a window, bounded: a
        // rank whose call failed returns here instead of in a later
        // collective the others would wait for.
        let agreed = agree_on_rc(boot, call, rc);
        if !created {
            // Nothing was made: dropping it does no MPI call (and lets go
            // of a shared bootstrap).
            drop(w);
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
        // Dropping does no MPI call; it lets go of a shared bootstrap, which
        // may then end MPI if this was the last handle on it.
        drop(self);
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
}

impl Drop for Window<'_> {
    /// No collective: a window dropped without [`Window::free`] is on an
    /// error path (one rank's `?` or panic), where the others may be in any
    /// collective. It is left to the process's end; the bootstrap still
    /// counts it live and so skips `MPI_Finalize`.
    fn drop(&mut self) {}
}
