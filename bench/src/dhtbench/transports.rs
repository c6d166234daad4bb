//! How a rank makes the transports its tables run on, for every command
//! that runs the DHT on ranks (`fabkit dht`, `fabkit surrogate`): libfabric
//! to every rank, libfabric with the same-node shortcut (`--shm`), or MPI
//! windows. A command hands its work as a [`Job`], which receives a maker
//! and a finisher of one transport type and runs any number of tables on
//! them; each transport says the [`Path`] its operations take.

use std::time::Duration;

use anyhow::{Context, Result};
use fabkit_core::bootstrap::Bootstrap;
use fabkit_dht::transport::shm::ShmTransport;
use fabkit_dht::{Config, Transport};
use fabkit_fabric::{Rank, RankConfig};
use serde::{Deserialize, Serialize};

/// How a run's DHT operations reached the ranks' regions: whether, and
/// how, they crossed a fabric. Written into each DHT row of a report
/// (`path`), so a reader decides on it and not on the transport's name.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Path {
    /// Every operation a memory access: the same-node shortcut with every
    /// rank on this node, no fabric at all.
    #[serde(rename = "memory")]
    Memory,
    /// One-sided operations through a fabric to every rank, its own too:
    /// libfabric RMA, or MPI windows.
    #[serde(rename = "rma")]
    Rma,
    /// The same-node shortcut for the ranks on this node, libfabric RMA
    /// for the others (and every atomic, once one rank is elsewhere).
    #[serde(rename = "memory+rma")]
    MemoryRma,
    /// Messages that the key's owner executes (the message path, being
    /// built: nothing produces it yet).
    #[serde(rename = "message")]
    Message,
    /// The same-node shortcut for the ranks on this node, messages to
    /// their owners for the others (being built: nothing produces it yet).
    #[serde(rename = "memory+message")]
    MemoryMessage,
}

/// A transport a [`Job`] runs tables on, which knows the path its
/// operations take.
pub trait Carrier: Transport {
    /// The path of every operation on this transport.
    fn path(&self) -> Path;
}

impl Carrier for Rank {
    fn path(&self) -> Path {
        Path::Rma
    }
}

impl Carrier for ShmTransport {
    fn path(&self) -> Path {
        // No fabric rank when every rank is on this node.
        match self.fabric() {
            Some(_) => Path::MemoryRma,
            None => Path::Memory,
        }
    }
}

#[cfg(feature = "mpi")]
impl Carrier for fabkit_dht::transport::mpi::MpiTransport<'_> {
    fn path(&self) -> Path {
        Path::Rma
    }
}

/// The work a rank does with tables on one kind of transport.
pub trait Job {
    /// What the work gives back.
    type Out;
    /// Runs the work: `make` sets up a transport for a table of `Config`
    /// (collective), `finish` ends one (collective).
    fn run<T: Carrier>(
        self,
        make: &dyn Fn(&Config) -> Result<T>,
        finish: &dyn Fn(T) -> Result<()>,
    ) -> Result<Self::Out>;
}

/// The libfabric path a rank takes.
#[derive(Clone, Debug)]
pub struct Fabric<'a> {
    /// libfabric provider.
    pub provider: &'a str,
    /// Domain, interface or network (`-d`).
    pub domain: Option<&'a str>,
    /// The longest wait for one operation.
    pub timeout: Duration,
    /// Operations per batch: the window of the rank's endpoints.
    pub batch: usize,
    /// Ranks on this node share their regions (`--shm`).
    pub shm: bool,
}

impl Fabric<'_> {
    /// The rank configuration of a table of `cfg`.
    pub fn rank_config(&self, cfg: &Config) -> RankConfig {
        let mut rc = RankConfig::new(self.provider.to_string());
        rc.domain = self.domain.map(str::to_string);
        rc.region_len = cfg.region_len();
        rc.atomics = cfg.variant.needs_atomics();
        rc.timeout = self.timeout;
        rc.window = self.batch.clamp(1, 256);
        rc
    }
}

/// Runs `job` on this rank over libfabric (or the same-node shortcut with
/// `--shm`).
pub fn on_fabric<J: Job>(f: &Fabric<'_>, boot: &dyn Bootstrap, job: J) -> Result<J::Out> {
    if f.shm {
        let make = |cfg: &Config| {
            ShmTransport::establish(f.rank_config(cfg), boot).with_context(|| {
                format!(
                    "setting up `{}` with the shared-memory shortcut",
                    f.provider
                )
            })
        };
        let finish = |t: ShmTransport| Ok(t.finish(boot)?);
        return job.run(&make, &finish);
    }
    let make = |cfg: &Config| {
        Rank::establish(f.rank_config(cfg), boot)
            .with_context(|| format!("setting up `{}`", f.provider))
    };
    let finish = |t: Rank| Ok(t.finish(boot)?);
    job.run(&make, &finish)
}

/// Runs `job` on this rank over MPI windows of `kind`.
#[cfg(feature = "mpi")]
pub fn on_mpi<J: Job>(
    kind: fabkit_mpi::window::WindowKind,
    boot: &fabkit_mpi::MpiBootstrap,
    job: J,
) -> Result<J::Out> {
    use fabkit_dht::transport::mpi::MpiTransport;
    use fabkit_dht::Variant;
    // Coarse locks each target's window per operation (MPI_Win_lock); the
    // others share one lock_all epoch.
    let make = |cfg: &Config| {
        Ok(MpiTransport::new(
            boot,
            cfg.region_len(),
            kind,
            cfg.variant == Variant::Coarse,
        )?)
    };
    // MPI_Win_free: collective, every rank here.
    let finish = |t: MpiTransport<'_>| Ok(t.free()?);
    // A rank done with a phase waits for the others in the bootstrap's
    // collectives, and under osc pt2pt their operations progress only when
    // it calls into MPI: with naps of up to 5 ms between its tests, a
    // straggler's operations took a nap each (1 000 ops/s). It polls
    // instead (a nap ceiling of zero: MPI_Test, a yield every 256), as
    // MPI's own waits do, where each rank has a core; with more ranks than
    // cores it naps at most 50 us, so as not to take a straggler's core.
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let nap = if boot.size() <= cores {
        Duration::ZERO
    } else {
        Duration::from_micros(50)
    };
    let _restore = NapRestore(boot, boot.max_nap());
    boot.set_max_nap(nap);
    job.run(&make, &finish)
}

/// Puts the bootstrap's nap ceiling back when the job ends, by error or
/// panic too.
#[cfg(feature = "mpi")]
struct NapRestore<'b>(&'b fabkit_mpi::MpiBootstrap, Duration);

#[cfg(feature = "mpi")]
impl Drop for NapRestore<'_> {
    fn drop(&mut self) {
        self.0.set_max_nap(self.1);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_path_is_written_as_its_word() {
        for (p, word) in [
            (Path::Memory, "memory"),
            (Path::Rma, "rma"),
            (Path::MemoryRma, "memory+rma"),
            (Path::Message, "message"),
            (Path::MemoryMessage, "memory+message"),
        ] {
            assert_eq!(serde_json::to_value(p).unwrap(), word);
            assert_eq!(serde_json::from_value::<Path>(word.into()).unwrap(), p);
        }
    }

    #[test]
    fn each_transport_says_whether_its_operations_cross_a_fabric() {
        use fabkit_core::bootstrap::ThreadGroup;
        // Ranks 0 and 1 share a node, rank 2 is "elsewhere" (this machine
        // has no second node: establish_sharing stands in for one).
        let elsewhere: [&[bool]; 3] = [
            &[true, true, false],
            &[true, true, false],
            &[false, false, true],
        ];
        let boots = ThreadGroup::members(3, Duration::from_secs(30));
        let paths: Vec<[Path; 3]> = std::thread::scope(|s| {
            let all: Vec<_> = boots
                .iter()
                .map(|b| {
                    s.spawn(move || {
                        let rc = || {
                            let mut rc = RankConfig::new("tcp;ofi_rxm");
                            rc.region_len = 4096;
                            rc
                        };
                        let one = ShmTransport::establish(rc(), b).unwrap();
                        let node = one.path();
                        one.finish(b).unwrap();
                        let mixed =
                            ShmTransport::establish_sharing(rc(), b, elsewhere[b.rank()]).unwrap();
                        let across = mixed.path();
                        mixed.finish(b).unwrap();
                        let rank = Rank::establish(rc(), b).unwrap();
                        let fabric = rank.path();
                        rank.finish(b).unwrap();
                        [node, across, fabric]
                    })
                })
                .collect();
            all.into_iter().map(|h| h.join().unwrap()).collect()
        });
        for p in paths {
            assert_eq!(p, [Path::Memory, Path::MemoryRma, Path::Rma]);
        }
    }
}
