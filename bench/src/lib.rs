//! fabkit's measurement engines and their reports, under the thin `fabkit`
//! command (`src/bin/fabkit`), which holds the command line's tree and the
//! dispatch only.
//!
//! Each subcommand is a module with its clap-derived arguments and a
//! `command` function that does what the subcommand does:
//! - [`info`]: providers and RDMA devices, readable or as JSON;
//! - [`check`]: RMA and atomics between ranks, byte for byte and raced;
//! - [`perf`] and [`mpiperf`]: latency, bandwidth and message rate by size,
//!   over libfabric and over MPI one-sided RMA, in one report type;
//! - [`dhtbench`]: the DHT benchmark (the MPI-DHT paper's phases and
//!   YCSB's workloads) with Redis beside it;
//! - [`model`]: the DHT's throughput on a fabric, predicted from `perf`
//!   files and a one-node `dht` run;
//! - [`surrogate`]: the DHT as a POET-like simulation's cache;
//! - [`plot`]: charts and tables from the reports' JSON;
//! - [`demo`]: the embedded default job;
//! - [`launch`]: ranks as threads, as processes across network namespaces
//!   (file bootstrap) or under mpirun; and [`clean`]: what killed ranks
//!   left in /dev/shm;
//! - [`intrude`]: a process outside a job that tries to reach its ranks.
//!
//! What they share: [`flags`] (every number's parser and limit),
//! [`exit`] (usage errors and exit status), [`output`] (output files and
//! standard output kept for data), [`hist`] (latency histograms), and the
//! [`Provenance`] every report's `meta` carries ([`provenance`]).

pub mod check;
pub mod clean;
pub mod demo;
pub mod dhtbench;
pub mod exit;
pub mod flags;
pub mod held;
pub mod hist;
pub mod info;
pub mod intrude;
pub mod launch;
pub mod model;
#[cfg(feature = "mpi")]
pub mod mpiperf;
pub mod output;
pub mod perf;
pub mod plot;
pub mod surrogate;

pub use fabkit_core::provenance::Provenance;

/// What carried a job's one-sided operations: a libfabric provider or MPI
/// windows (`check`'s ranks, `perf` and `mpi-perf`'s runs).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Over {
    /// A libfabric provider (what a check file written before this field
    /// was recorded reads as).
    #[default]
    Fabric,
    /// An MPI one-sided window.
    Mpi,
}

/// The git commit fabkit was built from (`git describe --dirty`), or
/// `unknown` outside a checkout.
pub const COMMIT: &str = match option_env!("FABKIT_COMMIT") {
    Some(c) => c,
    None => "unknown",
};

/// This run's provenance: its command line, commit, host, machine and
/// fabkit version, and how its ranks were started (`launch`), if they were.
pub fn provenance(launch: Option<String>) -> Provenance {
    Provenance::here(COMMIT, env!("CARGO_PKG_VERSION"), launch)
}
