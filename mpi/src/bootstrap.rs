//! Ranks launched by `mpirun` or `srun` find each other through MPI
//! collectives: an allgather of small byte strings and a barrier, each with
//! a deadline. MPI is only the launcher and bootstrap here when data moves
//! through libfabric; the same bootstrap owns MPI for the [`Window`](crate::Window)s.

use std::cell::Cell;
use std::time::{Duration, Instant};

use mpi::ffi;
use mpi::traits::AsRaw;

use fabkit_core::Bootstrap;

use fabkit_core::Error as CoreError;

use crate::error::{check, Error, Result};

/// How long a collective waits for the other ranks unless told otherwise
/// ([`MpiBootstrap::set_timeout`]): the same as `fabkit launch`'s file
/// bootstrap, times [`fabkit_core::time::timeout_scale`].
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(60);

/// Ranks launched by `mpirun`/`srun`, exchanging through MPI collectives.
/// Owns the MPI environment: MPI is finalized when this is dropped, and
/// an [`Window`](crate::Window) borrows it, so no
/// window outlives MPI.
///
/// Every collective has a deadline: it is started non-blocking
/// (`MPI_Iallgather`, `MPI_Ibarrier`) and tested with naps in between,
/// so a rank that died under a launcher that keeps the survivors alive
/// (`mpirun --enable-recovery`, fault-tolerant launchers) ends the
/// survivors' collective in [`CoreError::CollectiveTimeout`] instead of a
/// hang. After a collective times out or fails the job cannot run
/// another (the ranks no longer agree which one they are in): later
/// ones are refused with [`CoreError::BootstrapBroken`], and window frees
/// and `MPI_Finalize` (which would wait for the missing ranks) are
/// skipped, so the launcher sees a rank that did not finalize.
///
/// `MPI_Finalize` also waits for every rank without a deadline, so it
/// runs only after a bounded barrier on a communicator of its own; it is
/// skipped when that barrier fails, when this is dropped during a panic,
/// and while a window is still counted live (one dropped without
/// [`Window::free`](crate::Window::free), or leaked with
/// `mem::forget`, which ends the borrow but not the window).
pub struct MpiBootstrap {
    /// MPI_COMM_WORLD, or the caller's communicator: only duplicated and
    /// asked for its rank and size, never freed.
    world: ffi::MPI_Comm,
    /// A duplicate of the world communicator that returns errors instead
    /// of aborting, for the bootstrap's collectives and the windows, so
    /// they never match a collective of the caller's on the world.
    comm: ffi::MPI_Comm,
    /// Another duplicate, for the barrier before `MPI_Finalize` only: a
    /// rank tearing down never matches a peer's collective on `comm`.
    fin_comm: ffi::MPI_Comm,
    rank: usize,
    size: usize,
    /// As set, before [`fabkit_core::time::scaled`].
    timeout: Cell<Duration>,
    /// The longest nap between two `MPI_Test` calls.
    max_nap: Cell<Duration>,
    /// The collective that timed out or failed, if one did.
    broken: Cell<Option<&'static str>>,
    /// Windows created on `comm` and not yet freed.
    live_windows: Cell<usize>,
    universe: Option<mpi::environment::Universe>,
}

impl std::fmt::Debug for MpiBootstrap {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "MpiBootstrap({}/{})", self.rank, self.size)
    }
}

/// The longest nap between two `MPI_Test` calls unless told otherwise
/// ([`MpiBootstrap::set_max_nap`]).
pub const DEFAULT_MAX_NAP: Duration = Duration::from_millis(5);

/// With a nap ceiling of zero, how many `MPI_Test` calls a collective
/// makes back to back between two yields of the core (and two looks at
/// its deadline): tens of microseconds under osc pt2pt.
pub const SPIN_TESTS: u32 = 256;

impl MpiBootstrap {
    /// Initializes MPI (once per process); collectives wait
    /// [`DEFAULT_TIMEOUT`] for the other ranks.
    pub fn init() -> Result<Self> {
        Self::init_with_timeout(DEFAULT_TIMEOUT)
    }

    /// Initializes MPI (once per process); collectives, this first one
    /// included, wait `timeout` (times [`fabkit_core::time::timeout_scale`]) for
    /// the other ranks.
    pub fn init_with_timeout(timeout: Duration) -> Result<Self> {
        Self::init_threads(timeout, false)
    }

    /// [`MpiBootstrap::init_with_timeout`], asking MPI for
    /// `MPI_THREAD_MULTIPLE` where `multiple` (the DHT's message path
    /// answers requests from a thread of its own: [`crate::Mailbox`]).
    /// Not asked for otherwise: Open MPI 4.1's one-sided component
    /// `pt2pt`, the one that serves `MPI_Win_create` and other nodes,
    /// refuses to run under it.
    pub fn init_threads(timeout: Duration, multiple: bool) -> Result<Self> {
        let init = if multiple {
            mpi::initialize_with_threading(mpi::Threading::Multiple).map(|(u, _)| u)
        } else {
            mpi::initialize()
        };
        let universe = init.ok_or_else(|| {
            Error::from(CoreError::Bootstrap(
                "MPI is already initialized in this process".into(),
            ))
        })?;
        let world = universe.world().as_raw();
        MpiBootstrap::on(
            world,
            Some(universe),
            timeout,
            [
                "duplicating the world communicator",
                "duplicating the world communicator for teardown",
            ],
        )
    }

    /// A bootstrap on a communicator of the caller's, in a process whose
    /// MPI the caller initialised and finalises (a C program that hands its
    /// `MPI_Comm` to `DHT_create`; a sub-communicator works too, so two
    /// tables can live on two halves of a job). The communicator is
    /// duplicated first, by `MPI_Comm_idup` under the timeout, so nothing
    /// fabkit does, frees or sets touches the caller's, and a rank whose
    /// peers never come fails instead of waiting for ever; dropping the
    /// bootstrap frees the duplicates after a bounded barrier and never
    /// frees the caller's communicator nor finalises MPI. Collective over
    /// `comm`.
    ///
    /// # Safety
    ///
    /// `comm` is a live intra-communicator of this process's MPI (not
    /// `MPI_COMM_NULL`), every rank of it makes this call, and the
    /// bootstrap is dropped before the caller finalises MPI.
    pub unsafe fn on_communicator(comm: ffi::MPI_Comm, timeout: Duration) -> Result<Self> {
        let (mut init, mut fin) = (0, 0);
        // SAFETY: both may be called at any time, before MPI_Init too.
        unsafe {
            ffi::MPI_Initialized(&mut init);
            ffi::MPI_Finalized(&mut fin);
        }
        if init == 0 || fin != 0 {
            return Err(CoreError::Bootstrap(format!(
                "MPI is {}: call MPI_Init before making a table on a communicator, and \
                 MPI_Finalize only after freeing it",
                if init == 0 {
                    "not initialised"
                } else {
                    "already finalised"
                }
            ))
            .into());
        }
        // SAFETY: reading an MPI handle constant exported by rsmpi.
        let null = unsafe { ffi::RSMPI_COMM_NULL };
        if comm == null {
            return Err(CoreError::InvalidArgument(
                "the communicator is MPI_COMM_NULL: give the one the ranks share".into(),
            )
            .into());
        }
        MpiBootstrap::on(
            comm,
            None,
            timeout,
            [
                "duplicating the caller's communicator",
                "duplicating the caller's communicator for teardown",
            ],
        )
    }

    /// The bootstrap over `world` (whose ranks it names), with its own two
    /// duplicates of it (collectives, teardown); `universe` is MPI when it
    /// is ours to finalise. `dups` say what each duplication is, in errors.
    fn on(
        world: ffi::MPI_Comm,
        universe: Option<mpi::environment::Universe>,
        timeout: Duration,
        dups: [&'static str; 2],
    ) -> Result<Self> {
        // SAFETY: reading an MPI handle constant exported by rsmpi.
        let null = unsafe { ffi::RSMPI_COMM_NULL };
        let (mut rank, mut size) = (0, 0);
        // SAFETY: `world` is a live intra-communicator (MPI_COMM_WORLD, or
        // the caller's, by on_communicator's contract).
        check("MPI_Comm_rank", unsafe {
            ffi::MPI_Comm_rank(world, &mut rank)
        })?;
        // SAFETY: as above.
        check("MPI_Comm_size", unsafe {
            ffi::MPI_Comm_size(world, &mut size)
        })?;
        let mut boot = MpiBootstrap {
            rank: usize::try_from(rank).unwrap_or(0),
            size: usize::try_from(size).unwrap_or(0),
            world,
            comm: null,
            fin_comm: null,
            timeout: Cell::new(timeout),
            max_nap: Cell::new(DEFAULT_MAX_NAP),
            broken: Cell::new(None),
            live_windows: Cell::new(0),
            universe,
        };
        boot.comm = boot.dup_world(dups[0])?;
        boot.fin_comm = boot.dup_world(dups[1])?;
        Ok(boot)
    }

    /// A communicator of the caller's own over this bootstrap's ranks (a
    /// duplicate, made under its deadline, that returns errors): the
    /// message path's. Collective.
    pub(crate) fn duplicate(&self, what: &'static str) -> Result<ffi::MPI_Comm> {
        self.usable()?;
        self.dup_world(what)
    }

    /// A duplicate of the world communicator that returns errors,
    /// through a bounded `MPI_Comm_idup`.
    fn dup_world(&self, what: &'static str) -> Result<ffi::MPI_Comm> {
        let deadline = self.deadline();
        // The new handle is written when the duplication completes, so it
        // lives on the heap: after a timeout MPI may still write it.
        // SAFETY: reading MPI handle constants exported by rsmpi.
        let (mut dup, mut req) = unsafe {
            (
                Box::new(ffi::RSMPI_COMM_NULL),
                Box::new(ffi::RSMPI_REQUEST_NULL),
            )
        };
        // SAFETY: the world communicator is live; `dup` and `req` stay
        // valid until the request completes (or are leaked by complete).
        let rc = unsafe { ffi::MPI_Comm_idup(self.world, &mut *dup, &mut *req) };
        self.started(what, "MPI_Comm_idup", rc)?;
        // SAFETY: `req` is active on `dup`, a heap cell `keep` owns.
        let dup = unsafe { self.complete(what, req, deadline, dup)? };
        let comm = *dup;
        // SAFETY: the communicator was just created; the handler constant
        // comes from rsmpi.
        check("MPI_Comm_set_errhandler", unsafe {
            ffi::MPI_Comm_set_errhandler(comm, ffi::RSMPI_ERRORS_RETURN)
        })?;
        Ok(comm)
    }

    /// How long each collective waits for the other ranks from now on
    /// (times [`fabkit_core::time::timeout_scale`], applied at each wait).
    pub fn set_timeout(&self, timeout: Duration) {
        self.timeout.set(timeout);
    }

    /// The timeout as set, before [`fabkit_core::time::timeout_scale`]:
    /// `set_timeout(timeout())` changes nothing. See
    /// [`MpiBootstrap::wait_limit`] for what a collective waits.
    pub fn timeout(&self) -> Duration {
        self.timeout.get()
    }

    /// How long a collective waits for the other ranks: the timeout
    /// times [`fabkit_core::time::timeout_scale`].
    pub fn wait_limit(&self) -> Duration {
        fabkit_core::time::scaled(self.timeout.get())
    }

    /// The longest nap between two `MPI_Test` calls of a collective
    /// (default [`DEFAULT_MAX_NAP`]; naps start at 50 us and double up
    /// to it). A rank that waits in a collective while a peer measures
    /// latencies that need this rank's progress (`osc pt2pt`) should
    /// lower it, so that the peer measures the operation, not the nap.
    /// Zero spins instead: tests back to back, as a blocking
    /// `MPI_Barrier` does, so that such a peer is served at once, and
    /// gives the core up only once every [`SPIN_TESTS`] tests (a yield
    /// between every two tests made `fabkit mpi-perf`'s osc pt2pt
    /// latencies 0.78-0.83 of OSU's, whose target waits in
    /// `MPI_Barrier`; spinning, 0.97-1.1).
    pub fn set_max_nap(&self, nap: Duration) {
        self.max_nap.set(nap);
    }

    /// The nap ceiling in force ([`MpiBootstrap::set_max_nap`]).
    pub fn max_nap(&self) -> Duration {
        self.max_nap.get()
    }

    /// Ends every process of the job with exit code `code`
    /// (`MPI_Abort` on the world communicator: MPI_COMM_WORLD, or the
    /// caller's this bootstrap was made on).
    pub fn abort(&self, code: i32) -> ! {
        // SAFETY: the world communicator is live while MPI is initialised,
        // which it is while this bootstrap exists.
        unsafe { ffi::MPI_Abort(self.world, code) };
        // MPI_Abort does not return; should an MPI's ever do, end here.
        std::process::exit(code)
    }

    /// The bootstrap's own communicator (a duplicate of the world's that
    /// returns errors), for windows.
    pub(crate) fn comm(&self) -> ffi::MPI_Comm {
        self.comm
    }

    /// Whether a collective timed out or failed, so that MPI calls every
    /// rank must make together would wait for ever.
    pub fn is_broken(&self) -> bool {
        self.broken.get().is_some()
    }

    /// Records that `what` did not complete on every rank.
    pub(crate) fn mark_broken(&self, what: &'static str) {
        if self.broken.get().is_none() {
            self.broken.set(Some(what));
        }
    }

    /// A window was created on [`MpiBootstrap::comm`].
    pub(crate) fn window_created(&self) {
        self.live_windows.set(self.live_windows.get() + 1);
    }

    /// A window was freed (`MPI_Win_free` returned).
    pub(crate) fn window_freed(&self) {
        self.live_windows
            .set(self.live_windows.get().saturating_sub(1));
    }

    fn deadline(&self) -> Instant {
        Instant::now()
            .checked_add(self.wait_limit())
            .unwrap_or_else(|| Instant::now() + Duration::from_secs(86400 * 365))
    }

    pub(crate) fn usable(&self) -> fabkit_core::Result<()> {
        match self.broken.get() {
            None => Ok(()),
            Some(what) => Err(CoreError::BootstrapBroken {
                rank: self.rank,
                what,
            }),
        }
    }

    /// The result of starting collective `what` with `call`: on an error
    /// the bootstrap is broken, since the peers started theirs and this
    /// rank's next collective would be matched against it.
    fn started(&self, what: &'static str, call: &'static str, rc: i32) -> fabkit_core::Result<()> {
        check(call, rc).map_err(|e| {
            self.mark_broken(what);
            self.failed(what, e)
        })
    }

    fn failed(&self, what: &'static str, e: Error) -> CoreError {
        match e {
            Error::Mpi { call, code, msg } => CoreError::CollectiveFailed {
                what,
                rank: self.rank,
                call,
                code,
                msg,
            },
            Error::Core(e) => e,
            e => CoreError::Bootstrap(format!("{what}: {e}")),
        }
    }

    /// Waits for `req` until `deadline`, testing it with naps that grow
    /// from 50 us to the nap ceiling ([`MpiBootstrap::set_max_nap`]):
    /// MPI_Test drives MPI's progress, and the naps leave the core to the
    /// peer ranks (on 2 cores a busy test loop starves them). `keep` is
    /// handed back on completion. On a timeout or an error the request
    /// may still be active and write `keep` later, so it is leaked, on
    /// purpose, and the bootstrap is marked broken.
    ///
    /// # Safety
    ///
    /// `req` is an active request whose every buffer is heap storage
    /// owned by `keep` (a `Box` or boxed slice, or a tuple of them):
    /// moving `keep` must not move what MPI reads or writes. A `K` with
    /// inline storage would be moved here while MPI still writes its old
    /// address.
    pub(crate) unsafe fn complete<K>(
        &self,
        what: &'static str,
        mut req: Box<ffi::MPI_Request>,
        deadline: Instant,
        keep: K,
    ) -> fabkit_core::Result<K> {
        let ceiling = self.max_nap.get();
        let mut nap = Duration::from_micros(50).min(ceiling);
        let mut tests = 0u32;
        loop {
            let mut done = 0;
            // SAFETY: `req` is an active request on buffers owned by
            // `keep` (the caller's contract); the status is ignored.
            let rc = unsafe { ffi::MPI_Test(&mut *req, &mut done, ffi::RSMPI_STATUS_IGNORE) };
            if let Err(e) = check("MPI_Test", rc) {
                self.mark_broken(what);
                std::mem::forget((req, keep));
                return Err(self.failed(what, e));
            }
            if done != 0 {
                return Ok(keep);
            }
            tests = tests.wrapping_add(1);
            if nap.is_zero() && !tests.is_multiple_of(SPIN_TESTS) {
                // Spinning: the next test at once, not even a clock read.
                continue;
            }
            let now = Instant::now();
            if now >= deadline {
                self.mark_broken(what);
                std::mem::forget((req, keep));
                return Err(CoreError::CollectiveTimeout {
                    what,
                    rank: self.rank,
                    others: self.size.saturating_sub(1),
                    timeout: self.wait_limit(),
                });
            }
            if nap.is_zero() {
                std::thread::yield_now();
            } else {
                std::thread::sleep(nap.min(deadline - now));
            }
            nap = (nap * 2).min(ceiling);
        }
    }

    /// The bounded barrier before `MPI_Finalize`, on its own
    /// communicator.
    fn teardown_barrier(&self) -> fabkit_core::Result<()> {
        let deadline = self.deadline();
        let what = "barrier before MPI_Finalize";
        // SAFETY: reading an MPI handle constant exported by rsmpi.
        let mut req = Box::new(unsafe { ffi::RSMPI_REQUEST_NULL });
        // SAFETY: the communicator is live; `req` outlives the request.
        let rc = unsafe { ffi::MPI_Ibarrier(self.fin_comm, &mut *req) };
        self.started(what, "MPI_Ibarrier", rc)?;
        // SAFETY: a barrier touches no buffer.
        unsafe { self.complete(what, req, deadline, ()) }
    }
}

impl Drop for MpiBootstrap {
    fn drop(&mut self) {
        // MPI_Comm_free and MPI_Finalize wait for every rank without a
        // deadline: only when every rank is known to be here. Otherwise
        // end without them (the launcher reports a rank that did not
        // finalize; a caller's MPI keeps our duplicates).
        let skip = self.is_broken()
            || self.live_windows.get() > 0
            || std::thread::panicking()
            || self.teardown_barrier().is_err();
        let universe = self.universe.take();
        if skip {
            std::mem::forget(universe);
            return;
        }
        // SAFETY: reading an MPI handle constant exported by rsmpi.
        let null = unsafe { ffi::RSMPI_COMM_NULL };
        for c in [&mut self.comm, &mut self.fin_comm] {
            if *c != null {
                // SAFETY: we own the duplicate; no window is left on it
                // (live_windows is 0).
                unsafe { ffi::MPI_Comm_free(c) };
            }
        }
        drop(universe); // MPI_Finalize, if MPI is ours
    }
}

impl Bootstrap for MpiBootstrap {
    fn rank(&self) -> usize {
        self.rank
    }

    fn set_wait(&self, wait: Duration) -> bool {
        self.set_timeout(wait);
        true
    }

    fn size(&self) -> usize {
        self.size
    }

    fn allgather(&self, mine: &[u8]) -> fabkit_core::Result<Vec<Vec<u8>>> {
        self.usable()?;
        let deadline = self.deadline();
        let n = self.size;
        let len = i32::try_from(mine.len()).map_err(|_| {
            // The peers start theirs: this rank's next one would match it.
            self.mark_broken("allgather of message lengths");
            CoreError::InvalidArgument(format!(
                "bootstrap message of {} B: MPI counts stop at 2 GiB",
                mine.len()
            ))
        })?;
        // SAFETY: reading MPI constants exported by rsmpi.
        let (i32t, u8t, null) = unsafe {
            (
                ffi::RSMPI_INT32_T,
                ffi::RSMPI_UINT8_T,
                ffi::RSMPI_REQUEST_NULL,
            )
        };
        // Every buffer a request touches is on the heap, so `complete`
        // can leak it if the request never ends.
        let (send, mut counts) = (Box::new(len), vec![0i32; n].into_boxed_slice());
        let mut req = Box::new(null);
        let what = "allgather of message lengths";
        // SAFETY: one i32 out of `send`, one i32 per rank into `counts`;
        // both live until the request completes or are leaked with it.
        self.started(what, "MPI_Iallgather", unsafe {
            ffi::MPI_Iallgather(
                (&*send as *const i32).cast(),
                1,
                i32t,
                counts.as_mut_ptr().cast(),
                1,
                i32t,
                self.comm,
                &mut *req,
            )
        })?;
        // SAFETY: the request is active on `send` and `counts`, both
        // boxed.
        let (_, counts) = unsafe { self.complete(what, req, deadline, (send, counts))? };
        // Every rank holds the same counts, so every rank takes the same
        // branch here: none is left waiting in the next collective.
        let mut displs = Vec::with_capacity(n);
        let mut total: i32 = 0;
        for (r, &c) in counts.iter().enumerate() {
            displs.push(total);
            total = total.checked_add(c).filter(|_| c >= 0).ok_or_else(|| {
                CoreError::InvalidArgument(format!(
                    "bootstrap messages up to rank {r} exceed 2 GiB together"
                ))
            })?;
        }
        if total == 0 {
            // Every message is empty (and every rank knows it): an
            // all-gather of no bytes, whose null buffers Open MPI refuses.
            return Ok(vec![Vec::new(); n]);
        }
        let send = mine.to_vec().into_boxed_slice();
        let mut buf = vec![0u8; total as usize].into_boxed_slice();
        let displs = displs.into_boxed_slice();
        let mut req = Box::new(null);
        // SAFETY: `send` holds `len` bytes; `buf` holds the sum of
        // `counts` at offsets `displs`; all live until completion or are
        // leaked with the request.
        self.started("allgather", "MPI_Iallgatherv", unsafe {
            ffi::MPI_Iallgatherv(
                send.as_ptr().cast(),
                len,
                u8t,
                buf.as_mut_ptr().cast(),
                counts.as_ptr(),
                displs.as_ptr(),
                u8t,
                self.comm,
                &mut *req,
            )
        })?;
        // SAFETY: the request is active on the four boxed slices.
        let (_, buf, counts, displs) =
            unsafe { self.complete("allgather", req, deadline, (send, buf, counts, displs))? };
        Ok(counts
            .iter()
            .zip(displs.iter())
            .map(|(&c, &d)| buf[d as usize..(d + c) as usize].to_vec())
            .collect())
    }

    fn barrier(&self) -> fabkit_core::Result<()> {
        self.usable()?;
        let deadline = self.deadline();
        // SAFETY: reading an MPI handle constant exported by rsmpi.
        let mut req = Box::new(unsafe { ffi::RSMPI_REQUEST_NULL });
        // SAFETY: the communicator is live; `req` outlives the request.
        self.started("barrier", "MPI_Ibarrier", unsafe {
            ffi::MPI_Ibarrier(self.comm, &mut *req)
        })?;
        // SAFETY: a barrier touches no buffer.
        unsafe { self.complete("barrier", req, deadline, ()) }
    }
}
