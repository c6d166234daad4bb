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
}

#[cfg(feature = "mpi")]
pub use self::mpi_boot::MpiBootstrap;

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
    /// hang. After a timeout the job cannot run another collective (the
    /// ranks no longer agree which one they are in): later ones, window
    /// frees and `MPI_Finalize` (which would wait for the missing ranks)
    /// are skipped, and the launcher sees a rank that did not finalize.
    pub struct MpiBootstrap {
        world: SimpleCommunicator,
        /// A duplicate of the world communicator that returns errors instead
        /// of aborting, for the bootstrap's collectives and the windows, so
        /// they never match a collective of the caller's on the world.
        comm: ffi::MPI_Comm,
        rank: usize,
        size: usize,
        timeout: Cell<Duration>,
        /// The collective that timed out, if one did.
        broken: Cell<Option<&'static str>>,
        universe: Option<mpi::environment::Universe>,
    }

    impl std::fmt::Debug for MpiBootstrap {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            write!(f, "MpiBootstrap({}/{})", self.rank, self.size)
        }
    }

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
            let mut boot = MpiBootstrap {
                rank: world.rank() as usize,
                size: world.size() as usize,
                world,
                // SAFETY: reading an MPI handle constant exported by rsmpi.
                comm: unsafe { ffi::RSMPI_COMM_NULL },
                timeout: Cell::new(crate::env::scaled(timeout)),
                broken: Cell::new(None),
                universe: Some(universe),
            };
            let deadline = boot.deadline();
            // The new handle is written when the duplication completes, so it
            // lives on the heap: after a timeout MPI may still write it.
            let mut dup = Box::new(boot.comm);
            // SAFETY: reading an MPI handle constant exported by rsmpi.
            let mut req = Box::new(unsafe { ffi::RSMPI_REQUEST_NULL });
            // SAFETY: the world communicator is live; `dup` and `req` stay
            // valid until the request completes (or are leaked by complete).
            check("MPI_Comm_idup", unsafe {
                ffi::MPI_Comm_idup(boot.world.as_raw(), &mut *dup, &mut *req)
            })?;
            let dup = boot.complete("duplicating the world communicator", req, deadline, dup)?;
            boot.comm = *dup;
            // SAFETY: the communicator was just created; the handler constant
            // comes from rsmpi.
            check("MPI_Comm_set_errhandler", unsafe {
                ffi::MPI_Comm_set_errhandler(boot.comm, ffi::RSMPI_ERRORS_RETURN)
            })?;
            Ok(boot)
        }

        /// How long each collective waits for the other ranks from now on
        /// (times [`crate::env::timeout_scale`]).
        pub fn set_timeout(&self, timeout: Duration) {
            self.timeout.set(crate::env::scaled(timeout));
        }

        /// How long each collective waits for the other ranks.
        pub fn timeout(&self) -> Duration {
            self.timeout.get()
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

        /// Whether a collective timed out, so that MPI calls every rank must
        /// make together would wait for ever.
        pub fn is_broken(&self) -> bool {
            self.broken.get().is_some()
        }

        fn deadline(&self) -> Instant {
            Instant::now()
                .checked_add(self.timeout.get())
                .unwrap_or_else(|| Instant::now() + Duration::from_secs(86400 * 365))
        }

        fn usable(&self) -> Result<()> {
            match self.broken.get() {
                None => Ok(()),
                Some(what) => Err(Error::Bootstrap(format!(
                    "rank {}: an earlier {what} timed out, so the ranks no longer agree \
                     which collective they are in; end the job",
                    self.rank
                ))),
            }
        }

        /// Waits for `req` until `deadline`, testing it with naps that grow
        /// from 50 us to 5 ms: MPI_Test drives MPI's progress, and the naps
        /// leave the core to the peer ranks (on 2 cores a busy test loop
        /// starves them). `keep` holds the buffers the request reads and
        /// writes; it is handed back on completion. On a timeout or an error
        /// the request may still be active and write `keep` later, so it is
        /// leaked, on purpose, and the bootstrap is marked broken.
        pub(crate) fn complete<K>(
            &self,
            what: &'static str,
            mut req: Box<ffi::MPI_Request>,
            deadline: Instant,
            keep: K,
        ) -> Result<K> {
            let mut nap = Duration::from_micros(50);
            loop {
                let mut done = 0;
                // SAFETY: `req` is an active request on buffers owned by
                // `keep`; the status is ignored.
                let rc = unsafe { ffi::MPI_Test(&mut *req, &mut done, ffi::RSMPI_STATUS_IGNORE) };
                if let Err(e) = check("MPI_Test", rc) {
                    self.broken.set(Some(what));
                    std::mem::forget((req, keep));
                    return Err(e);
                }
                if done != 0 {
                    return Ok(keep);
                }
                let now = Instant::now();
                if now >= deadline {
                    self.broken.set(Some(what));
                    std::mem::forget((req, keep));
                    return Err(Error::CollectiveTimeout {
                        what,
                        rank: self.rank,
                        others: self.size.saturating_sub(1),
                        timeout: self.timeout.get(),
                    });
                }
                std::thread::sleep(nap.min(deadline - now));
                nap = (nap * 2).min(Duration::from_millis(5));
            }
        }
    }

    impl Drop for MpiBootstrap {
        fn drop(&mut self) {
            let Some(universe) = self.universe.take() else {
                return;
            };
            if self.is_broken() {
                // MPI_Comm_free and MPI_Finalize would wait for ranks that
                // never came: end without them (the launcher reports it).
                std::mem::forget(universe);
                return;
            }
            // SAFETY: reading an MPI handle constant exported by rsmpi.
            if self.comm != unsafe { ffi::RSMPI_COMM_NULL } {
                // SAFETY: we own the duplicate; every window borrowed self,
                // so none is left on it.
                unsafe { ffi::MPI_Comm_free(&mut self.comm) };
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
            // SAFETY: one i32 out of `send`, one i32 per rank into `counts`;
            // both live until the request completes or are leaked with it.
            check("MPI_Iallgather", unsafe {
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
            let (_, counts) = self.complete(
                "allgather of message lengths",
                req,
                deadline,
                (send, counts),
            )?;
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
            check("MPI_Iallgatherv", unsafe {
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
            let (_, buf, counts, displs) =
                self.complete("allgather", req, deadline, (send, buf, counts, displs))?;
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
            check("MPI_Ibarrier", unsafe {
                ffi::MPI_Ibarrier(self.comm, &mut *req)
            })?;
            self.complete("barrier", req, deadline, ())
        }
    }
}
