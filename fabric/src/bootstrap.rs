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
    use mpi::datatype::PartitionMut;
    use mpi::topology::{Communicator, SimpleCommunicator};
    use mpi::traits::CommunicatorCollectives;

    use super::Bootstrap;
    use crate::error::{Error, Result};

    /// Ranks launched by `mpirun`/`srun`, exchanging through MPI collectives.
    /// Owns the MPI environment: MPI is finalized when this is dropped.
    pub struct MpiBootstrap {
        world: SimpleCommunicator,
        _universe: mpi::environment::Universe,
    }

    impl std::fmt::Debug for MpiBootstrap {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            write!(
                f,
                "MpiBootstrap({}/{})",
                self.world.rank(),
                self.world.size()
            )
        }
    }

    impl MpiBootstrap {
        /// Initializes MPI (once per process).
        pub fn init() -> Result<Self> {
            let universe = mpi::initialize().ok_or_else(|| {
                Error::Bootstrap("MPI is already initialized in this process".into())
            })?;
            Ok(MpiBootstrap {
                world: universe.world(),
                _universe: universe,
            })
        }

        /// The world communicator, for code that also speaks MPI.
        pub fn world(&self) -> &SimpleCommunicator {
            &self.world
        }
    }

    impl Bootstrap for MpiBootstrap {
        fn rank(&self) -> usize {
            self.world.rank() as usize
        }

        fn size(&self) -> usize {
            self.world.size() as usize
        }

        fn allgather(&self, mine: &[u8]) -> Result<Vec<Vec<u8>>> {
            let n = self.size();
            let len = i32::try_from(mine.len())
                .map_err(|_| Error::InvalidArgument("bootstrap message over 2 GiB".into()))?;
            let mut counts = vec![0i32; n];
            self.world.all_gather_into(&len, &mut counts[..]);
            let displs: Vec<i32> = counts
                .iter()
                .scan(0, |acc, &c| {
                    let d = *acc;
                    *acc += c;
                    Some(d)
                })
                .collect();
            let total: usize = counts.iter().map(|&c| c as usize).sum();
            let mut buf = vec![0u8; total];
            {
                let mut part = PartitionMut::new(&mut buf[..], &counts[..], &displs[..]);
                self.world.all_gather_varcount_into(mine, &mut part);
            }
            Ok(counts
                .iter()
                .zip(&displs)
                .map(|(&c, &d)| buf[d as usize..(d + c) as usize].to_vec())
                .collect())
        }

        fn barrier(&self) -> Result<()> {
            self.world.barrier();
            Ok(())
        }
    }
}
