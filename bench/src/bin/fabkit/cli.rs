//! The command line's tree: every subcommand and its arguments, which are
//! clap-derived in the library beside the engine each drives. The man pages
//! and completions are made from this tree.

use std::time::Duration;

use clap::{Parser, Subcommand};
#[cfg(feature = "mpi")]
use fabkit_bench::mpiperf;
use fabkit_bench::{check, clean, dhtbench, flags, intrude, model, perf, plot, surrogate};

/// Kernel-bypass fabric toolkit for HPC: fabric facts, RMA checks and
/// benchmarks over any libfabric provider, in-process or under mpirun.
#[derive(Parser, Debug)]
#[command(name = "fabkit", version, about, long_about = None)]
#[command(after_help = "\
Examples:
  fabkit info                         what libfabric and RDMA devices offer here
  fabkit check -p shm -n 4            RMA + atomics between 4 in-process ranks
  mpirun -n 4 fabkit check -p 'tcp;ofi_rxm'
                                      the same across processes (or nodes)
  fabkit demo                         info, then check on every RMA provider

Providers: shm (same node), tcp;ofi_rxm (any IP network), sockets, verbs;ofi_rxm
(InfiniBand/RoCE), cxi (Slingshot), efa, psm3 - whatever `fabkit info` lists.
Environment: FI_LOG_LEVEL=warn shows libfabric's own complaints.
Exit status: 0 done, 1 a failed run (or a check that failed), 2 a usage error
(launch: the ranks' own); one line on stderr says why.")]
pub struct Cli {
    #[command(subcommand)]
    /// The subcommand.
    pub cmd: Cmd,
}

#[derive(Subcommand, Debug)]
pub enum Cmd {
    /// Show the libfabric version, every provider with what it supports, and
    /// RDMA devices (like fi_info + ibv_devinfo, but readable).
    Info {
        /// Only this provider.
        #[arg(short, long)]
        provider: Option<String>,
        /// Print JSON instead of a table.
        #[arg(long)]
        json: bool,
    },
    /// Check RMA read/write and every u64 atomic between ranks, byte for byte
    /// and value for value, then race all ranks on shared words.
    ///
    /// Without a launcher, -n ranks run as threads of this process, each with
    /// its own endpoint, talking through the provider for real. Under mpirun
    /// or srun each process is one rank (MPI only bootstraps; data moves
    /// through libfabric).
    Check(check::CheckArgs),
    /// Measure latency, bandwidth and message rate of RMA writes, reads and
    /// u64 atomics between two ranks, by size (like fi_rma_bw,
    /// fi_rma_pingpong, ib_write_bw, osu_put_latency).
    ///
    /// Rank 0 initiates against rank 1 (with -b both do, and rates are
    /// summed). In-process by default; under mpirun use -n 2 processes.
    Perf(perf::PerfArgs),
    /// The same measurements through MPI one-sided RMA (MPI_Put, MPI_Get,
    /// MPI_Compare_and_swap, MPI_Fetch_and_op), with a chosen synchronisation
    /// (lock-all + flush, lock/unlock, fence, PSCW) and window kind
    /// (MPI_Win_allocate or MPI_Win_create). Run under mpirun with 2+ ranks;
    /// the output matches `fabkit perf`, so the two can be compared.
    #[cfg(feature = "mpi")]
    MpiPerf(mpiperf::MpiPerfArgs),
    /// Draw JSON results as SVG charts and/or a markdown table: perf and
    /// mpi-perf against size (rate, bandwidth or latency; MPI dashed), dht
    /// against ranks or a soak over time, a surrogate's speed-up.
    Plot(plot::PlotArgs),
    /// Benchmark the distributed hash table as an application's cache: the
    /// MPI-DHT paper's write, read and mixed phases (`-w paper`) and YCSB's
    /// workloads (`-w load-a,a,b,c,d,f`), per variant (coarse, fine,
    /// lockfree, chunked), with Redis beside it in the same run when
    /// redis-server is installed: throughput (median and spread of --reps),
    /// latency percentiles, CPU time and bytes moved per operation, the
    /// DHT's counters, and the hot-key check.
    Dht(dhtbench::DhtArgs),
    /// Predict the DHT's throughput on a fabric from what the fabric does
    /// (`fabkit perf -b --json` files, or a NIC's packet rate) and what
    /// the DHT costs the host (a `fabkit dht --json` run on one node), per
    /// variant, workload and phase: the fabric's limit, the cores' limit,
    /// and which binds; beside a measured run if one is given.
    Model(model::ModelArgs),
    /// The DHT as the surrogate-model cache of a POET-like reactive-transport
    /// simulation (a grid carried by a flow, an iterative chemistry solver
    /// per cell and time step, inputs rounded to significant digits as the
    /// key): runtime and speed-up against the run without the cache, hit
    /// rate, checksum mismatches, the break-even solver cost and the error
    /// the rounding introduces, per variant, rounding and solver cost.
    Surrogate(surrogate::SurrogateArgs),
    /// The embedded default job: `info`, `check` with 4 in-process ranks on
    /// every provider here that offers RMA and atomics, then a short DHT
    /// benchmark (every variant, the paper's workload and YCSB A, Redis
    /// beside it when installed) on the fastest same-node path: 2 in-process
    /// ranks sharing their regions through the same-node shortcut.
    Demo {
        /// Ranks per check.
        #[arg(short = 'n', long, default_value = "4", value_parser = flags::ranks)]
        ranks: usize,
    },
    /// Start a fabkit command as ranks in processes on this machine, one per
    /// network namespace (each a host of its own) or -n plain processes,
    /// meeting through a shared directory (or, with --mpi, under mpirun):
    /// `fabkit launch --netns ipoib-a,ipoib-b -- fabkit check -p 'tcp;ofi_rxm'`.
    Launch {
        /// Network namespaces, one rank each, in rank order.
        #[arg(long, value_delimiter = ',')]
        netns: Vec<String>,
        /// Ranks: without --netns, plain processes; with --mpi, spread evenly
        /// over the namespaces.
        #[arg(short = 'n', long, value_parser = flags::processes)]
        ranks: Option<usize>,
        /// Seconds a rank waits for the others at each bootstrap exchange
        /// (the file bootstrap; under --mpi, each rank's command's own
        /// --timeout applies to its MPI bootstrap).
        #[arg(long, value_name = "SECS", default_value = "60", value_parser = flags::secs)]
        timeout: Duration,
        /// Launch with Open MPI's mpirun instead (MPI bootstrap), -n ranks
        /// spread evenly over the namespaces; needs a testbed with
        /// management links (`ipoib-eval testbed up --mgmt`).
        #[arg(long, requires = "netns")]
        mpi: bool,
        /// The command each rank runs.
        #[arg(last = true, required = true)]
        cmd: Vec<String>,
    },
    /// Remove the shared-memory segments killed ranks left in /dev/shm:
    /// fabkit's whose process has exited and the libfabric shm provider's
    /// that no process has mapped, this user's only. Says what it removed.
    Clean(clean::CleanArgs),
    /// Try to read and write a running job's ranks from outside it, as an
    /// attacker on the same network would: find them by scanning, then
    /// guess keys for RMA and forge messages. Exit 1 if anything worked.
    Intrude(intrude::IntrudeArgs),
    /// Write fabkit's man pages and shell completions (the repository's
    /// man/) into DIR/man1 and DIR/completions.
    #[command(hide = true, name = "generate-docs")]
    GenerateDocs {
        /// The folder to write into (made if missing).
        #[arg(long, value_name = "DIR")]
        out: std::path::PathBuf,
    },
    /// The rsh agent `fabkit launch --mpi` gives mpirun: runs a command line
    /// in the network namespace named as the host.
    #[command(hide = true)]
    Rsh {
        /// The namespace.
        host: String,
        /// The command line (joined by spaces, run by /bin/sh).
        #[arg(trailing_var_arg = true, allow_hyphen_values = true, required = true)]
        words: Vec<String>,
    },
}
