//! How ranks find each other: an allgather of small byte strings (endpoint
//! names, region keys) and a barrier.
//!
//! - [`ThreadGroup`]: N ranks as threads of one process, the embedded default.
//! - [`FileBootstrap`]: N processes sharing a directory, no launcher needed
//!   (tests that kill a peer use it).
//! - `fabkit_mpi::MpiBootstrap`: ranks launched by `mpirun` or `srun`.

use std::path::{Path, PathBuf};
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
    /// From now on each exchange waits up to `wait` for the other ranks,
    /// where this bootstrap lets its caller say (MPI's does: a benchmark
    /// waits a short while in its set-up and a phase's length at a phase
    /// barrier); returns whether it took it. The others keep the wait they
    /// were made with (`fabkit launch`'s `--timeout`, a thread group's).
    fn set_wait(&self, wait: Duration) -> bool {
        let _ = wait;
        false
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
#[allow(unsafe_code)]
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
    /// `timeout` (times [`crate::time::timeout_scale`]) naming the ranks that
    /// did not arrive.
    pub fn members(n: usize, timeout: Duration) -> Vec<ThreadBootstrap> {
        let timeout = crate::time::scaled(timeout);
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
    /// time out after `timeout` times [`crate::time::timeout_scale`].
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
            timeout: crate::time::scaled(timeout),
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
        let io = |what: String| move |cause| Error::Io { what, cause };
        let tmp = self.dir.join(format!("round{round}.rank{}.tmp", self.rank));
        write_private(&tmp, mine).map_err(io(format!("writing {}", tmp.display())))?;
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
                // Every rank published this round, so every rank has read
                // the one before: this rank's file of it can go (a soak
                // makes hundreds of rounds a minute).
                if let Some(before) = round.checked_sub(1) {
                    let _ = std::fs::remove_file(self.path(before, self.rank));
                }
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
        if write_private(&tmp, why.as_bytes()).is_ok() {
            let _ = std::fs::rename(&tmp, self.left_path(self.rank));
        }
    }
}

/// Writes `bytes` to a fresh file at `path` only this user reads
/// ([`crate::private::create`]).
fn write_private(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    use std::io::Write;
    crate::private::create(path)?.write_all(bytes)
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
    fn file_ranks_keep_only_the_last_rounds_files() {
        let dir = tempfile::tempdir().unwrap();
        std::thread::scope(|s| {
            for r in 0..2 {
                let d = dir.path();
                s.spawn(move || {
                    let b = FileBootstrap::new(d, r, 2, Duration::from_secs(30)).unwrap();
                    for i in 0..50u32 {
                        let all = b.allgather(&i.to_le_bytes()).unwrap();
                        assert_eq!(all, vec![i.to_le_bytes().to_vec(); 2]);
                    }
                });
            }
        });
        // A soak's thousands of exchanges left a file each: now at most the
        // last two rounds' per rank.
        let n = std::fs::read_dir(dir.path()).unwrap().count();
        assert!(n <= 4, "{n} files left after 50 rounds");
    }

    #[test]
    fn what_file_ranks_publish_only_this_user_reads() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let b = FileBootstrap::new(dir.path(), 0, 1, Duration::from_secs(5)).unwrap();
        assert_eq!(b.allgather(b"key").unwrap(), vec![b"key".to_vec()]);
        b.leave("done");
        let files: Vec<_> = std::fs::read_dir(dir.path()).unwrap().flatten().collect();
        assert!(files.len() >= 2, "{files:?}");
        for f in files {
            let mode = f.metadata().unwrap().permissions().mode();
            assert_eq!(mode & 0o777, 0o600, "{:?}", f.path());
        }
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
