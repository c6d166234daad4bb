//! Running one closure per rank, in-process or under an MPI launcher, and
//! gathering every rank's result on the reporting rank.

use std::time::Duration;

use anyhow::{anyhow, Context, Result};
use fabkit_fabric::bootstrap::{launched_by_mpi, Bootstrap, ThreadGroup};
use serde::de::DeserializeOwned;
use serde::Serialize;

/// How ranks are started. Create one per process: under MPI it owns the
/// MPI environment (initialised once, finalised on drop).
#[derive(Debug)]
pub enum Launch {
    /// `n` ranks as threads of this process (the default without a launcher).
    Threads(usize),
    /// This process is one rank of a job started by mpirun/srun.
    #[cfg(feature = "mpi")]
    Mpi(fabkit_fabric::bootstrap::MpiBootstrap),
}

impl Launch {
    /// MPI when started by a launcher, else `n` threads.
    pub fn detect(n: usize) -> Result<Launch> {
        if !launched_by_mpi() {
            return Ok(Launch::Threads(n));
        }
        #[cfg(feature = "mpi")]
        {
            let boot =
                fabkit_fabric::bootstrap::MpiBootstrap::init().context("initialising MPI")?;
            Ok(Launch::Mpi(boot))
        }
        #[cfg(not(feature = "mpi"))]
        Err(anyhow!(
            "started by an MPI launcher, but this fabkit was built without the `mpi` feature"
        ))
    }

    /// A short description for reports.
    pub fn describe(&self, ranks: usize) -> String {
        match self {
            Launch::Threads(_) => format!("{ranks} ranks in-process (threads)"),
            #[cfg(feature = "mpi")]
            Launch::Mpi(_) => format!("{ranks} ranks under an MPI launcher"),
        }
    }

    /// Runs `f` on every rank. Returns `Some(results)` in rank order on the
    /// reporting rank (the only one in-process; rank 0 under MPI) and `None`
    /// on the others. Under MPI an error on any rank aborts the job, since
    /// the other ranks would otherwise wait in a collective forever.
    pub fn run<T, F>(&self, timeout: Duration, f: F) -> Result<Option<Vec<T>>>
    where
        T: Serialize + DeserializeOwned + Send,
        F: Fn(&dyn Bootstrap) -> Result<T> + Sync,
    {
        match self {
            Launch::Threads(n) => run_threads(*n, timeout, f),
            #[cfg(feature = "mpi")]
            Launch::Mpi(boot) => run_mpi(boot, |b| f(b)),
        }
    }
}

fn run_threads<T, F>(n: usize, timeout: Duration, f: F) -> Result<Option<Vec<T>>>
where
    T: Send,
    F: Fn(&dyn Bootstrap) -> Result<T> + Sync,
{
    if n == 0 {
        return Err(anyhow!("--ranks must be at least 1"));
    }
    let boots = ThreadGroup::members(n, timeout);
    let results: Vec<Result<T>> = std::thread::scope(|s| {
        let handles: Vec<_> = boots
            .iter()
            .map(|b| {
                let f = &f;
                std::thread::Builder::new()
                    .name(format!("rank-{}", b.rank()))
                    .spawn_scoped(s, move || f(b))
                    .expect("spawning a rank thread")
            })
            .collect();
        handles
            .into_iter()
            .map(|h| {
                h.join()
                    .unwrap_or_else(|_| Err(anyhow!("rank thread panicked")))
            })
            .collect()
    });
    results
        .into_iter()
        .enumerate()
        .map(|(r, res)| res.with_context(|| format!("rank {r}")))
        .collect::<Result<Vec<T>>>()
        .map(Some)
}

/// Runs `f` on this MPI rank and gathers every rank's result on rank 0
/// (`None` elsewhere). An error on any rank is printed and ends the job with
/// MPI_Abort, since the other ranks would otherwise wait in the gather.
#[cfg(feature = "mpi")]
pub fn run_mpi<T, F>(boot: &fabkit_fabric::bootstrap::MpiBootstrap, f: F) -> Result<Option<Vec<T>>>
where
    T: Serialize + DeserializeOwned,
    F: Fn(&fabkit_fabric::bootstrap::MpiBootstrap) -> Result<T>,
{
    use mpi::topology::Communicator;

    let mine = match f(boot) {
        Ok(v) => serde_json::to_vec(&v)?,
        Err(e) => {
            eprintln!("fabkit: rank {}: error: {e:#}", boot.rank());
            // MPI_Abort: the launcher ends every rank.
            boot.world().abort(2);
        }
    };
    let all = boot.allgather(&mine)?;
    if boot.rank() != 0 {
        return Ok(None);
    }
    all.iter()
        .map(|b| serde_json::from_slice(b).context("decoding a rank's result"))
        .collect::<Result<Vec<T>>>()
        .map(Some)
}
