//! How ranks find each other: an allgather of small byte strings (endpoint
//! names, region keys) and a barrier.
//!
//! - [`ThreadGroup`]: N ranks as threads of one process, the embedded default.
//! - [`FileBootstrap`]: N processes sharing a directory, no launcher needed
//!   (tests that kill a peer use it).
//! - [`MpiBootstrap`] (feature `mpi`): ranks launched by `mpirun` or `srun`.
//!   MPI is only the launcher and bootstrap here; data moves through libfabric.

use std::path::PathBuf;
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use crate::error::{Error, Result};

/// What ranks must be able to do together before they can talk through the
/// fabric.
pub trait Bootstrap {
    /// This rank, in `0..size()`.
    fn rank(&self) -> usize;
    /// Number of ranks.
    fn size(&self) -> usize;
    /// Every rank contributes `mine`; returns all contributions in rank order.
    fn allgather(&self, mine: &[u8]) -> Result<Vec<Vec<u8>>>;
    /// Returns when every rank has called it.
    fn barrier(&self) -> Result<()> {
        self.allgather(&[]).map(drop)
    }
    /// Whether all ranks run on this host (then socket providers can use the
    /// loopback interface). A host is a machine and a network namespace:
    /// see [`host_id`].
    fn same_host(&self) -> Result<bool> {
        let me = host_id();
        let all = self.allgather(me.as_bytes())?;
        Ok(all.iter().all(|h| h == me.as_bytes()))
    }
    /// This rank failed (`why`) and takes part in no more exchanges: the
    /// others' waiting ones end at once with an error that names it and
    /// says why, instead of at their timeout. Under MPI the launcher ends
    /// the job (`MPI_Abort`), so nothing is needed here.
    fn leave(&self, why: &str) {
        let _ = why;
    }
}

/// Who this rank's host is: the host name and the network namespace
/// (`net:[inode]`). Ranks in two namespaces of one machine are two hosts:
/// their loopback interfaces are not each other's, so neither `lo` nor a
/// same-node shortcut may be used between them.
pub fn host_id() -> String {
    let ns = std::fs::read_link("/proc/thread-self/ns/net")
        .map(|p| p.to_string_lossy().into_owned())
        .unwrap_or_default();
    format!("{}/{ns}", hostname())
}

/// This host's name.
pub fn hostname() -> String {
    let mut buf = [0u8; 256];
    // SAFETY: buf is writable for its length; gethostname NUL-terminates on
    // success (we also cap at the first NUL).
    let rc = unsafe { libc::gethostname(buf.as_mut_ptr().cast(), buf.len()) };
    if rc != 0 {
        return "localhost".into();
    }
    let end = buf.iter().position(|&b| b == 0).unwrap_or(buf.len());
    String::from_utf8_lossy(&buf[..end]).into_owned()
}

/// Whether this process was started by an MPI launcher (Open MPI's mpirun,
/// Hydra, or srun with PMI/PMIx).
pub fn launched_by_mpi() -> bool {
    ["OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_RANK", "PMI_RANK"]
        .iter()
        .any(|v| std::env::var_os(v).is_some())
}

fn missing_ranks(present: impl Iterator<Item = bool>) -> String {
    let v: Vec<String> = present
        .enumerate()
        .filter(|(_, p)| !p)
        .map(|(i, _)| i.to_string())
        .collect();
    v.join(", ")
}

struct Round {
    generation: u64,
    arrived: Vec<Option<Vec<u8>>>,
    last: Arc<Vec<Vec<u8>>>,
    /// The first rank that left the group, and why.
    left: Option<(usize, String)>,
}

/// The error of an exchange with a rank that left the job.
fn left_error(rank: usize, why: &str) -> Error {
    Error::PeerLeft {
        rank,
        why: why.to_string(),
    }
}

struct Shared {
    round: Mutex<Round>,
    cv: Condvar,
}

/// Creates the members of an in-process group of ranks.
#[derive(Debug)]
pub struct ThreadGroup;

impl ThreadGroup {
    /// `n` bootstrap handles, one per thread-rank; waits time out after
    /// `timeout` (times [`crate::env::timeout_scale`]) naming the ranks that
    /// did not arrive.
    pub fn members(n: usize, timeout: Duration) -> Vec<ThreadBootstrap> {
        let timeout = crate::env::scaled(timeout);
        let shared = Arc::new(Shared {
            round: Mutex::new(Round {
                generation: 0,
                arrived: vec![None; n],
                last: Arc::new(Vec::new()),
                left: None,
            }),
            cv: Condvar::new(),
        });
        (0..n)
            .map(|rank| ThreadBootstrap {
                rank,
                size: n,
                timeout,
                shared: shared.clone(),
            })
            .collect()
    }
}

/// One rank of an in-process group (see [`ThreadGroup`]).
pub struct ThreadBootstrap {
    rank: usize,
    size: usize,
    timeout: Duration,
    shared: Arc<Shared>,
}

impl std::fmt::Debug for ThreadBootstrap {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "ThreadBootstrap({}/{})", self.rank, self.size)
    }
}

impl Bootstrap for ThreadBootstrap {
    fn rank(&self) -> usize {
        self.rank
    }

    fn size(&self) -> usize {
        self.size
    }

    fn allgather(&self, mine: &[u8]) -> Result<Vec<Vec<u8>>> {
        let deadline = Instant::now() + self.timeout;
        let mut r = self.shared.round.lock().unwrap();
        if let Some((rank, why)) = &r.left {
            return Err(left_error(*rank, why));
        }
        let gen = r.generation;
        r.arrived[self.rank] = Some(mine.to_vec());
        if r.arrived.iter().all(Option::is_some) {
            let all: Vec<Vec<u8>> = r.arrived.iter_mut().map(|a| a.take().unwrap()).collect();
            r.last = Arc::new(all);
            r.generation += 1;
            self.shared.cv.notify_all();
            return Ok(r.last.as_ref().clone());
        }
        while r.generation == gen {
            if let Some((rank, why)) = &r.left {
                return Err(left_error(*rank, why));
            }
            let now = Instant::now();
            if now >= deadline {
                // Our contribution stays: the exchange is broken anyway, and
                // this way every rank that times out names only the ranks
                // that never came.
                let missing = missing_ranks(r.arrived.iter().map(Option::is_some));
                return Err(Error::Bootstrap(format!(
                    "rank {} waited {:?} for ranks {missing} to join the exchange",
                    self.rank, self.timeout
                )));
            }
            r = self.shared.cv.wait_timeout(r, deadline - now).unwrap().0;
        }
        Ok(r.last.as_ref().clone())
    }

    fn leave(&self, why: &str) {
        // Also while unwinding from a panic that poisoned the lock.
        let mut r = self
            .shared
            .round
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        r.left.get_or_insert_with(|| (self.rank, why.to_string()));
        self.shared.cv.notify_all();
    }
}

/// Ranks as separate processes that share a directory: each writes its part
/// of an exchange to a file and waits for the others' files.
#[derive(Debug)]
pub struct FileBootstrap {
    dir: PathBuf,
    rank: usize,
    size: usize,
    timeout: Duration,
    round: std::cell::Cell<u64>,
}

impl FileBootstrap {
    /// Rank `rank` of `size`, exchanging through `dir` (which must exist and
    /// be shared by all ranks, and be empty at the start of the job); waits
    /// time out after `timeout` times [`crate::env::timeout_scale`].
    pub fn new(
        dir: impl Into<PathBuf>,
        rank: usize,
        size: usize,
        timeout: Duration,
    ) -> Result<Self> {
        if rank >= size {
            return Err(Error::InvalidArgument(format!(
                "rank {rank} is not below the job size {size}"
            )));
        }
        Ok(FileBootstrap {
            dir: dir.into(),
            rank,
            size,
            timeout: crate::env::scaled(timeout),
            round: std::cell::Cell::new(0),
        })
    }

    fn path(&self, round: u64, rank: usize) -> PathBuf {
        self.dir.join(format!("round{round}.rank{rank}"))
    }

    /// Where rank `rank` says it left the job ([`Bootstrap::leave`]).
    fn left_path(&self, rank: usize) -> PathBuf {
        self.dir.join(format!("left.rank{rank}"))
    }
}

impl Bootstrap for FileBootstrap {
    fn rank(&self) -> usize {
        self.rank
    }

    fn size(&self) -> usize {
        self.size
    }

    fn allgather(&self, mine: &[u8]) -> Result<Vec<Vec<u8>>> {
        let round = self.round.get();
        self.round.set(round + 1);
        let io = |what: String| move |source| Error::Io { what, source };
        let tmp = self.dir.join(format!("round{round}.rank{}.tmp", self.rank));
        std::fs::write(&tmp, mine).map_err(io(format!("writing {}", tmp.display())))?;
        // rename is atomic: a reader sees the whole file or none.
        std::fs::rename(&tmp, self.path(round, self.rank))
            .map_err(io(format!("publishing {}", tmp.display())))?;
        let deadline = Instant::now() + self.timeout;
        let mut out: Vec<Option<Vec<u8>>> = vec![None; self.size];
        loop {
            for (r, slot) in out.iter_mut().enumerate() {
                if slot.is_none() {
                    *slot = std::fs::read(self.path(round, r)).ok();
                }
            }
            if out.iter().all(Option::is_some) {
                return Ok(out.into_iter().map(Option::unwrap).collect());
            }
            // A rank that is missing may have left the job.
            for (r, _) in out.iter().enumerate().filter(|(_, o)| o.is_none()) {
                if let Ok(why) = std::fs::read_to_string(self.left_path(r)) {
                    return Err(left_error(r, &why));
                }
            }
            if Instant::now() >= deadline {
                return Err(Error::Bootstrap(format!(
                    "rank {} waited {:?} in {} for ranks {} to join exchange {round}",
                    self.rank,
                    self.timeout,
                    self.dir.display(),
                    missing_ranks(out.iter().map(Option::is_some))
                )));
            }
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    fn leave(&self, why: &str) {
        // Written whole before it is named (rename is atomic), so a reader
        // never sees half a reason; a failure leaves the others their
        // timeout, as before.
        let tmp = self.dir.join(format!("left.rank{}.tmp", self.rank));
        if std::fs::write(&tmp, why).is_ok() {
            let _ = std::fs::rename(&tmp, self.left_path(self.rank));
        }
    }
}

#[cfg(feature = "mpi")]
pub use self::mpi_boot::{MpiBootstrap, DEFAULT_MAX_NAP, DEFAULT_TIMEOUT, SPIN_TESTS};

#[cfg(feature = "mpi")]
mod mpi_boot {
    use std::cell::Cell;
    use std::time::{Duration, Instant};

    use mpi::ffi;
    use mpi::topology::{Communicator, SimpleCommunicator};
    use mpi::traits::AsRaw;

    use super::Bootstrap;
    use crate::error::{Error, Result};
    use crate::mpi_rma::check;

    /// How long a collective waits for the other ranks unless told otherwise
    /// ([`MpiBootstrap::set_timeout`]): the same as `fabkit launch`'s file
    /// bootstrap, times [`crate::env::timeout_scale`].
    pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(60);

    /// Ranks launched by `mpirun`/`srun`, exchanging through MPI collectives.
    /// Owns the MPI environment: MPI is finalized when this is dropped, and
    /// an [`mpi_rma::Window`](crate::mpi_rma::Window) borrows it, so no
    /// window outlives MPI.
    ///
    /// Every collective has a deadline: it is started non-blocking
    /// (`MPI_Iallgather`, `MPI_Ibarrier`) and tested with naps in between,
    /// so a rank that died under a launcher that keeps the survivors alive
    /// (`mpirun --enable-recovery`, fault-tolerant launchers) ends the
    /// survivors' collective in [`Error::CollectiveTimeout`] instead of a
    /// hang. After a collective times out or fails the job cannot run
    /// another (the ranks no longer agree which one they are in): later
    /// ones are refused with [`Error::BootstrapBroken`], and window frees
    /// and `MPI_Finalize` (which would wait for the missing ranks) are
    /// skipped, so the launcher sees a rank that did not finalize.
    ///
    /// `MPI_Finalize` also waits for every rank without a deadline, so it
    /// runs only after a bounded barrier on a communicator of its own; it is
    /// skipped when that barrier fails, when this is dropped during a panic,
    /// and while a window is still counted live (one dropped without
    /// [`Window::free`](crate::mpi_rma::Window::free), or leaked with
    /// `mem::forget`, which ends the borrow but not the window).
    pub struct MpiBootstrap {
        world: SimpleCommunicator,
        /// A duplicate of the world communicator that returns errors instead
        /// of aborting, for the bootstrap's collectives and the windows, so
        /// they never match a collective of the caller's on the world.
        comm: ffi::MPI_Comm,
        /// Another duplicate, for the barrier before `MPI_Finalize` only: a
        /// rank tearing down never matches a peer's collective on `comm`.
        fin_comm: ffi::MPI_Comm,
        rank: usize,
        size: usize,
        /// As set, before [`crate::env::scaled`].
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
        /// included, wait `timeout` (times [`crate::env::timeout_scale`]) for
        /// the other ranks.
        pub fn init_with_timeout(timeout: Duration) -> Result<Self> {
            let universe = mpi::initialize().ok_or_else(|| {
                Error::Bootstrap("MPI is already initialized in this process".into())
            })?;
            let world = universe.world();
            // SAFETY: reading an MPI handle constant exported by rsmpi.
            let null = unsafe { ffi::RSMPI_COMM_NULL };
            let mut boot = MpiBootstrap {
                rank: world.rank() as usize,
                size: world.size() as usize,
                world,
                comm: null,
                fin_comm: null,
                timeout: Cell::new(timeout),
                max_nap: Cell::new(DEFAULT_MAX_NAP),
                broken: Cell::new(None),
                live_windows: Cell::new(0),
                universe: Some(universe),
            };
            boot.comm = boot.dup_world("duplicating the world communicator")?;
            boot.fin_comm = boot.dup_world("duplicating the world communicator for teardown")?;
            Ok(boot)
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
            let rc = unsafe { ffi::MPI_Comm_idup(self.world.as_raw(), &mut *dup, &mut *req) };
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
        /// (times [`crate::env::timeout_scale`], applied at each wait).
        pub fn set_timeout(&self, timeout: Duration) {
            self.timeout.set(timeout);
        }

        /// The timeout as set, before [`crate::env::timeout_scale`]:
        /// `set_timeout(timeout())` changes nothing. See
        /// [`MpiBootstrap::wait_limit`] for what a collective waits.
        pub fn timeout(&self) -> Duration {
            self.timeout.get()
        }

        /// How long a collective waits for the other ranks: the timeout
        /// times [`crate::env::timeout_scale`].
        pub fn wait_limit(&self) -> Duration {
            crate::env::scaled(self.timeout.get())
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

        /// The world communicator, for code that also speaks MPI.
        pub fn world(&self) -> &SimpleCommunicator {
            &self.world
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

        pub(crate) fn usable(&self) -> Result<()> {
            match self.broken.get() {
                None => Ok(()),
                Some(what) => Err(Error::BootstrapBroken {
                    rank: self.rank,
                    what,
                }),
            }
        }

        /// The result of starting collective `what` with `call`: on an error
        /// the bootstrap is broken, since the peers started theirs and this
        /// rank's next collective would be matched against it.
        fn started(&self, what: &'static str, call: &'static str, rc: i32) -> Result<()> {
            check(call, rc).map_err(|e| {
                self.mark_broken(what);
                self.failed(what, e)
            })
        }

        fn failed(&self, what: &'static str, e: Error) -> Error {
            match e {
                Error::Mpi { call, code, msg } => Error::CollectiveFailed {
                    what,
                    rank: self.rank,
                    call,
                    code,
                    msg,
                },
                e => e,
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
        ) -> Result<K> {
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
                    return Err(Error::CollectiveTimeout {
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
        fn teardown_barrier(&self) -> Result<()> {
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
            let Some(universe) = self.universe.take() else {
                return;
            };
            // MPI_Comm_free and MPI_Finalize wait for every rank without a
            // deadline: only when every rank is known to be here. Otherwise
            // end without them (the launcher reports a rank that did not
            // finalize).
            let skip = self.is_broken()
                || self.live_windows.get() > 0
                || std::thread::panicking()
                || self.teardown_barrier().is_err();
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
            drop(universe); // MPI_Finalize
        }
    }

    impl Bootstrap for MpiBootstrap {
        fn rank(&self) -> usize {
            self.rank
        }

        fn size(&self) -> usize {
            self.size
        }

        fn allgather(&self, mine: &[u8]) -> Result<Vec<Vec<u8>>> {
            self.usable()?;
            let deadline = self.deadline();
            let n = self.size;
            let len = i32::try_from(mine.len()).map_err(|_| {
                // The peers start theirs: this rank's next one would match it.
                self.mark_broken("allgather of message lengths");
                Error::InvalidArgument(format!(
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
                    Error::InvalidArgument(format!(
                        "bootstrap messages up to rank {r} exceed 2 GiB together"
                    ))
                })?;
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

        fn barrier(&self) -> Result<()> {
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
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Rank 1 waits in a barrier with a minute to go; rank 0 fails and
    /// leaves: rank 1's wait ends at once, naming rank 0 and its reason,
    /// and so does every later exchange.
    fn a_leaving_rank_ends_the_others_wait(boots: Vec<Box<dyn Bootstrap + Send>>) {
        let mut boots = boots.into_iter();
        let (zero, one) = (boots.next().unwrap(), boots.next().unwrap());
        let started = Instant::now();
        // Rank 1 waits in a thread of its own and is handed back.
        let waiter = std::thread::spawn(move || (one.barrier(), one));
        // Leave once rank 1 waits or is about to: either way its barrier
        // must end with the reason, not at the minute.
        std::thread::sleep(Duration::from_millis(50));
        zero.leave("setting up `net`: no progress");
        let (r, one) = waiter.join().unwrap();
        let e = r.unwrap_err().to_string();
        assert!(
            e.contains("rank 0 failed and left the job: setting up `net`: no progress"),
            "{e}"
        );
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "waited for the timeout"
        );
        let e = one.barrier().unwrap_err().to_string();
        assert!(e.contains("rank 0 failed and left"), "{e}");
    }

    #[test]
    fn a_thread_rank_that_leaves_ends_the_others_wait() {
        let boots = ThreadGroup::members(2, Duration::from_secs(60))
            .into_iter()
            .map(|b| Box::new(b) as Box<dyn Bootstrap + Send>)
            .collect();
        a_leaving_rank_ends_the_others_wait(boots);
    }

    #[test]
    fn a_file_rank_that_leaves_ends_the_others_wait() {
        let dir = tempfile::tempdir().unwrap();
        let boots = (0..2)
            .map(|r| {
                let b = FileBootstrap::new(dir.path(), r, 2, Duration::from_secs(60)).unwrap();
                Box::new(b) as Box<dyn Bootstrap + Send>
            })
            .collect();
        a_leaving_rank_ends_the_others_wait(boots);
    }
}
