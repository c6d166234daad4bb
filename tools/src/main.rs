//! `fabkit`: kernel-bypass fabric toolkit for HPC.
//!
//! Subcommands share one setup path (provider, ranks, launcher); see
//! `fabkit --help`.

mod bounds;
mod check;
mod clean;
mod dhtbench;
mod hist;
mod info;
mod launch;
mod model;
#[cfg(feature = "mpi")]
mod mpiperf;
mod perf;
mod plot;
mod surrogate;

use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::{Context, Result};
use clap::{Args, Parser, Subcommand};

use launch::Launch;

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
Environment: FI_LOG_LEVEL=warn shows libfabric's own complaints.")]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand, Debug)]
enum Cmd {
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
    Check(CheckArgs),
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
    /// Draw perf/mpi-perf JSON results as an SVG chart (rate, bandwidth or
    /// latency against size; MPI dashed) and/or a markdown table.
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
        #[arg(short = 'n', long, default_value = "4", value_parser = bounds::ranks)]
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
        #[arg(short = 'n', long, value_parser = bounds::processes)]
        ranks: Option<usize>,
        /// Seconds a rank waits for the others at each bootstrap exchange
        /// (the file bootstrap; under --mpi, each rank's command's own
        /// --timeout applies to its MPI bootstrap).
        #[arg(long, value_name = "SECS", default_value = "60", value_parser = bounds::secs)]
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

#[derive(Args, Debug)]
struct CheckArgs {
    /// libfabric provider; repeat to check several. See `fabkit info`.
    #[arg(short, long = "provider", default_value = "shm")]
    providers: Vec<String>,
    /// Domain: interface (lo, eth0) for socket providers, device (mlx5_0)
    /// for verbs, or a network the ranks share (10.77.1.0/24: the interface
    /// with an address in it). Default: chosen, `lo` when all ranks share a host.
    #[arg(short, long)]
    domain: Option<String>,
    /// In-process ranks (ignored under mpirun/srun, where each process is one).
    #[arg(short = 'n', long, default_value = "2", value_parser = bounds::ranks)]
    ranks: usize,
    /// Seconds to wait for any one operation or peer before giving up.
    #[arg(long, value_name = "SECS", default_value = "10", value_parser = bounds::secs)]
    timeout: Duration,
    /// Also write the full per-rank report as JSON to FILE (`-` for stdout).
    #[arg(long, value_name = "FILE")]
    json: Option<PathBuf>,
    /// Check MPI one-sided RMA (MPI_Put/Get/Compare_and_swap/Fetch_and_op on
    /// a window of this kind, lock_all + flush) instead of libfabric. Under
    /// mpirun only.
    #[cfg(feature = "mpi")]
    #[arg(long, value_name = "KIND", value_enum)]
    mpi: Option<mpiperf::WinArg>,
}

fn run_check(args: &CheckArgs) -> Result<bool> {
    let launch = Launch::detect(args.ranks)?;
    let to = args.timeout;
    let mut all_ok = true;
    let mut json = Vec::new();
    #[cfg(feature = "mpi")]
    let mpi_kind = args.mpi.map(|w| match w {
        mpiperf::WinArg::Allocate => fabkit_mpi::window::WindowKind::Allocate,
        mpiperf::WinArg::Create => fabkit_mpi::window::WindowKind::Create,
    });
    #[cfg(not(feature = "mpi"))]
    let mpi_kind: Option<()> = None;
    let providers = if mpi_kind.is_some() {
        vec!["mpi".to_string()]
    } else {
        args.providers.clone()
    };
    // Every provider and domain is checked before any runs, so a bad one
    // does not end the command after others' results were measured.
    if mpi_kind.is_none() {
        for prov in &providers {
            let caps = fabkit_fabric::Caps::RMA;
            bounds::check_domain(prov, args.domain.as_deref(), caps)?;
        }
    }
    for prov in &providers {
        let provider = prov.clone();
        let domain = args.domain.clone();
        let reports = match (&launch, mpi_kind) {
            #[cfg(feature = "mpi")]
            (Launch::Mpi(boot), Some(kind)) => {
                boot.set_timeout(to);
                launch::run_mpi(boot, |b| check::run_rank_mpi(kind, b))?
            }
            (_, Some(_)) => {
                return Err(bounds::usage(
                    "--mpi checks MPI one-sided RMA and runs under an MPI launcher: \
                     mpirun -n 2 fabkit check --mpi allocate",
                ))
            }
            (_, None) => launch.run(to, |boot| {
                let cfg = check::config(&provider, domain.clone(), boot.size(), to);
                check::run_rank(cfg, boot)
            })?,
        };
        let Some(reports) = reports else { continue };
        all_ok &= check::print_summary(&reports, &launch.describe(reports.len()));
        json.push(serde_json::json!({
            "provider": prov,
            "ranks": reports.len(),
            "ok": reports.iter().all(|r| r.checks.iter().all(|c| c.ok)),
            "reports": reports,
        }));
    }
    if let (Some(path), false) = (&args.json, json.is_empty()) {
        write_out(path, &(serde_json::to_string_pretty(&json)? + "\n"))?;
    }
    Ok(all_ok)
}

/// Writes `text` to `path`, or with `-` to the real standard output, which
/// [`keep_stdout_for_data`] reserved for it.
fn write_out(path: &std::path::Path, text: &str) -> Result<()> {
    if path.as_os_str() == "-" {
        let mut out = match DATA_OUT.get() {
            Some(f) => f.try_clone().context("duplicating standard output")?,
            None => {
                print!("{text}");
                return Ok(());
            }
        };
        out.write_all(text.as_bytes())
            .and_then(|()| out.flush())
            .context("writing to standard output")
    } else {
        std::fs::write(path, text).with_context(|| format!("writing {}", path.display()))
    }
}

/// The real standard output, when `-` asked for data on it.
static DATA_OUT: std::sync::OnceLock<std::fs::File> = std::sync::OnceLock::new();

/// With `--json -` or `--csv -`, standard output carries that data and
/// nothing else: the real stdout is kept for [`write_out`] and file
/// descriptor 1 becomes a copy of stderr, so tables, progress and anything
/// libfabric or MPI print go there.
fn keep_stdout_for_data(cmd: &Cmd) -> Result<()> {
    let is_dash = |p: &Option<PathBuf>| p.as_ref().is_some_and(|p| p.as_os_str() == "-");
    let (json, csv) = match cmd {
        Cmd::Check(a) => (is_dash(&a.json), false),
        Cmd::Perf(a) => (is_dash(&a.sweep.json), is_dash(&a.sweep.csv)),
        #[cfg(feature = "mpi")]
        Cmd::MpiPerf(a) => (is_dash(&a.sweep.json), is_dash(&a.sweep.csv)),
        Cmd::Dht(a) => (is_dash(&a.json), is_dash(&a.csv)),
        Cmd::Model(a) => (is_dash(&a.json), false),
        Cmd::Surrogate(a) => (is_dash(&a.json), false),
        _ => (false, false),
    };
    bounds::ensure_usage!(
        !(json && csv),
        "--json - and --csv - cannot both have standard output: give one of them a file"
    );
    if !(json || csv) {
        return Ok(());
    }
    use std::os::fd::AsFd;
    let _ = std::io::stdout().flush();
    let data = std::io::stdout()
        .as_fd()
        .try_clone_to_owned()
        .context("duplicating standard output")?;
    // SAFETY: dup2 on two descriptors this process holds open (1 and 2);
    // Rust's Stdout keeps using fd 1, which now refers to stderr's file.
    if unsafe { libc::dup2(2, 1) } < 0 {
        anyhow::bail!(
            "redirecting the report to stderr: {}",
            std::io::Error::last_os_error()
        );
    }
    let _ = DATA_OUT.set(std::fs::File::from(data));
    Ok(())
}

fn run_model(args: &model::ModelArgs) -> Result<bool> {
    let rows = model::run(args)?;
    model::print(&rows);
    if let Some(path) = &args.json {
        let doc = serde_json::json!({
            "meta": {
                "command": std::env::args().collect::<Vec<_>>().join(" "),
                "commit": option_env!("FABKIT_COMMIT").unwrap_or("unknown"),
                "host": fabkit_core::bootstrap::hostname(),
                "machine": machine(),
                "ops": args.ops,
                "perf": args.perf,
                "pps": args.pps,
                "measured": args.measured,
            },
            "rows": rows,
        });
        write_out(path, &(serde_json::to_string_pretty(&doc)? + "\n"))?;
    }
    Ok(true)
}

fn run_perf(args: &perf::PerfArgs) -> Result<bool> {
    let launch = Launch::detect(2)?;
    let to = args.timeout;
    // Passive ranks wait at a barrier for a whole size: allow for slow sweeps.
    let barrier_timeout = to.max(std::time::Duration::from_secs(3600));
    let per_rank = launch.run(barrier_timeout, |boot| perf::run_rank(args, boot))?;
    let Some(per_rank) = per_rank else {
        return Ok(true);
    };
    let mut points = perf::combine(args, args.threads, &per_rank);
    for p in &mut points {
        p.completion = Some(args.completion);
    }
    // The interface really used (a network given with -d names one).
    let mut hints = fabkit_fabric::Hints::new(args.provider.clone(), fabkit_fabric::Caps::RMA);
    hints.domain = args.domain.clone();
    let domain = fabkit_fabric::info::find(&hints, true)
        .map(|i| i.domain_name())
        .unwrap_or_else(|_| args.domain.clone().unwrap_or_default());
    let method = format!(
        "libfabric {} on {domain}, threads {}{}{}{}",
        args.provider,
        args.threads,
        if args.ep_per_thread {
            " (endpoint per thread)"
        } else {
            ""
        },
        if args.busy_poll { ", busy-poll" } else { "" },
        match args.completion {
            perf::WriteCompletion::Delivery => ", delivery-complete writes",
            perf::WriteCompletion::Transmit => "",
        }
    );
    let mut label = args.provider.clone();
    if let Some(d) = &args.domain {
        label += &format!(" on {d}");
    }
    if args.completion == perf::WriteCompletion::Delivery {
        label += " delivery-complete";
    }
    if args.threads > 1 {
        label += &format!(" x{}", args.threads);
    }
    if args.ep_per_thread {
        label += " (endpoint per thread)";
    }
    if args.busy_poll {
        label += " (busy-poll)";
    }
    emit(
        &args.sweep,
        &launch.describe(per_rank.len()),
        &args.provider,
        (&method, &label),
        points,
    )
}

#[cfg(feature = "mpi")]
fn run_mpi_perf(args: &mpiperf::MpiPerfArgs) -> Result<bool> {
    mpiperf::refuse_send(args)?;
    let launch = Launch::detect(2)?;
    let Launch::Mpi(boot) = &launch else {
        return Err(bounds::usage(
            "mpi-perf runs under an MPI launcher: mpirun -n 2 fabkit mpi-perf ... \
             (as root add --allow-run-as-root; on few cores --oversubscribe)",
        ));
    };
    let Some(per_rank) = launch::run_mpi(boot, |b| mpiperf::run_rank(args, b))? else {
        return Ok(true);
    };
    let points = perf::combine(args, 1, &per_rank);
    let osc = mpiperf::osc_in_force();
    // How idle ranks wait is part of the method: under osc pt2pt the
    // origin's latencies include the target's progress (mpiperf::run_rank).
    let method = format!(
        "MPI one-sided, osc {osc}, window {:?}, sync {:?}",
        args.win, args.sync
    )
    .to_lowercase()
        + &format!(
            "; idle ranks poll MPI_Test back to back, yielding every {} polls",
            fabkit_mpi::SPIN_TESTS
        )
        + &if args.pattern == perf::Pattern::Lat {
            format!(
                "; usec/xfer times the whole loop (as OSU does), min/p50/p99/max up to {} \
                 more operations timed one by one after it",
                mpiperf::LAT_SAMPLES
            )
        } else {
            String::new()
        };
    // The names the command line takes (--win, --sync).
    let name = |v: Option<clap::builder::PossibleValue>| {
        v.map_or_else(|| "?".to_string(), |v| v.get_name().to_string())
    };
    let label = format!(
        "MPI {osc} {} {}",
        name(clap::ValueEnum::to_possible_value(&args.win)),
        name(clap::ValueEnum::to_possible_value(&args.sync))
    );
    emit(
        &args.sweep,
        &launch.describe(per_rank.len()),
        &format!("mpi osc={osc}"),
        (&method, &label),
        points,
    )
}

/// Prints the table and writes JSON/CSV for a perf or mpi-perf run.
fn emit(
    sweep: &perf::SweepArgs,
    launch: &str,
    provider: &str,
    (method, label): (&str, &str),
    points: Vec<perf::Point>,
) -> Result<bool> {
    let meta = perf::report::Meta {
        provider: provider.to_string(),
        method: method.to_string(),
        label: label.to_string(),
        machine: machine(),
        launch: launch.to_string(),
        host: fabkit_core::bootstrap::hostname(),
        command: std::env::args().collect::<Vec<_>>().join(" "),
        commit: option_env!("FABKIT_COMMIT").unwrap_or("unknown").into(),
        fabkit: env!("CARGO_PKG_VERSION").into(),
    };
    let report = perf::report::Report::new(meta, points);
    println!(
        "# fabkit: {:?} {:?}{} | {} | {launch}",
        sweep.op,
        sweep.pattern,
        if sweep.bidir { " bidirectional" } else { "" },
        method
    );
    print!("{}", report.table());
    if let Some(p) = &sweep.json {
        write_out(p, &(serde_json::to_string_pretty(&report)? + "\n"))?;
    }
    if let Some(p) = &sweep.csv {
        write_out(p, &report.csv())?;
    }
    Ok(true)
}

fn run_dht(args: &dhtbench::DhtArgs) -> Result<bool> {
    let launch = Launch::detect(args.ranks)?;
    let (ranks, in_process) = launch.ranks();
    #[cfg(feature = "mpi")]
    let mpi = args.mpi.is_some();
    #[cfg(not(feature = "mpi"))]
    let mpi = false;
    dhtbench::validate(args, ranks, in_process, mpi)?;
    // The reporting rank reads the --bound files (before the run: a file it
    // cannot use fails now, not after minutes); the others never need them.
    let rates = (launch.reports() && !args.bound.is_empty())
        .then(|| {
            dhtbench::bound::load(
                &args.bound,
                "--bound",
                Some(&args.provider),
                &dhtbench::variants(args),
            )
        })
        .transpose()?;
    // Output files are checked before a run of minutes, not after it, by
    // the rank that writes them.
    if launch.reports() {
        for (flag, path) in [("--json", &args.json), ("--csv", &args.csv)] {
            if let Some(p) = path {
                bounds::check_output_file(flag, p)?;
            }
        }
    }
    // The bootstrap's waits are phase barriers: bounded by a phase, not by
    // one operation's --timeout.
    let to = dhtbench::phase_bound(args, ranks);
    #[cfg(feature = "mpi")]
    if let Some(win) = args.mpi {
        let Launch::Mpi(boot) = &launch else {
            return Err(bounds::usage(
                "--mpi runs under an MPI launcher: mpirun -n 2 fabkit dht --mpi allocate",
            ));
        };
        let kind = match win {
            mpiperf::WinArg::Allocate => fabkit_mpi::window::WindowKind::Allocate,
            mpiperf::WinArg::Create => fabkit_mpi::window::WindowKind::Create,
        };
        boot.set_timeout(to);
        let samples = dhtbench::run_rank_mpi(args, kind, boot)?;
        if fabkit_core::bootstrap::Bootstrap::rank(boot) != 0 {
            return Ok(true);
        }
        let size = fabkit_core::bootstrap::Bootstrap::size(boot);
        let provider =
            format!("mpi osc={}, window {win:?}", mpiperf::osc_in_force()).to_lowercase();
        return report_dht(args, &samples, &launch.describe(size), &provider, None);
    }
    let runs = launch.run(to, |boot| dhtbench::run_rank(args, boot))?;
    let Some(mut runs) = runs else {
        return Ok(true);
    };
    // Every rank holds the same combined samples; rank 0's are reported.
    let n = runs.len();
    let provider = if args.shm {
        // The transport's own name says whether a fabric is in it: none
        // when every rank is on this node.
        let named = runs
            .first()
            .and_then(|s| s.iter().find(|x| x.system == "fabkit"))
            .map(|x| format!("{} (--shm)", x.transport));
        named.unwrap_or_else(|| {
            format!(
                "libfabric {} with the same-node shortcut (--shm)",
                args.provider
            )
        })
    } else {
        format!("libfabric {}", args.provider)
    };
    report_dht(
        args,
        &runs.swap_remove(0),
        &launch.describe(n),
        &provider,
        rates.as_ref(),
    )
}

/// Prints `fabkit dht`'s table and writes its JSON and CSV, each fabkit
/// row with its bound where `rates` (read before the run) give one;
/// whether every run was sound.
fn report_dht(
    args: &dhtbench::DhtArgs,
    samples: &[dhtbench::Sample],
    launch: &str,
    provider: &str,
    rates: Option<&dhtbench::bound::Rates>,
) -> Result<bool> {
    use dhtbench::report;
    let runs = report::runs(samples, args.record, rates);
    let clock = fabkit_core::time::Clock::detect();
    let mut notes = vec![format!(
        "cycles are busy CPU time at the nominal clock ({}, {}), not counted: this machine \
         has no hardware counters",
        if clock.hz > 0.0 {
            format!("{:.2} GHz", clock.hz / 1e9)
        } else {
            "unknown".into()
        },
        clock.source
    )];
    if args.hot_rounds > 0 && args.record.value < 16 {
        notes.push(
            "the hot-key check did not run: values under 16 B carry no writer's tag, so a mix \
             of two writers' values could not be told from either"
                .into(),
        );
    }
    if let Some(r) = runs.iter().find(|r| r.system == "redis") {
        let on = if r.transport == "redis loopback" {
            "on loopback"
        } else {
            "on its host's address in the ranks' network (-d)"
        };
        notes.push(format!(
            "redis: one redis-server per rank {on}, the keys sharded by the DHT's placement, \
             one MGET/MSET per server per batch (one message where the DHT sends one per \
             remote operation); the servers share this machine's {} cores with the ranks",
            bounds::online_cpus()
        ));
    }
    let rep = report::Report {
        meta: report::Meta {
            command: std::env::args().collect::<Vec<_>>().join(" "),
            commit: option_env!("FABKIT_COMMIT").unwrap_or("unknown").into(),
            host: fabkit_core::bootstrap::hostname(),
            machine: machine(),
            launch: launch.into(),
            provider: provider.into(),
            notes,
        },
        runs,
    };
    print!("{}", report::table(&rep));
    if let Some(p) = &args.json {
        write_out(p, &(serde_json::to_string_pretty(&rep)? + "\n"))?;
    }
    if let Some(p) = &args.csv {
        write_out(p, &report::csv(&rep)?)?;
    }
    Ok(report::sound(&rep.runs))
}

/// This machine in one line: CPU model, cores, memory, kernel.
fn machine() -> String {
    let cpu = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("model name"))
                .map(|l| l.trim_start_matches([' ', '\t', ':']).to_string())
        })
        .unwrap_or_else(|| "unknown CPU".into());
    let cores = bounds::online_cpus();
    let mem = bounds::physical_memory().map_or("?".into(), |m| format!("{} GiB", m >> 30));
    let kernel = std::fs::read_to_string("/proc/sys/kernel/osrelease")
        .map_or("?".into(), |k| k.trim().to_string());
    format!("{cpu}, {cores} cores, {mem}, Linux {kernel}")
}

/// The demo's DHT benchmark on the fastest path measured here
/// (results/dht-speed): two in-process ranks sharing their regions through
/// the same-node shortcut, with no fabric and no launcher, Redis beside
/// them when it is installed.
fn demo_dht() -> Result<bool> {
    use clap::Parser;
    #[derive(Parser)]
    struct DhtCmd {
        #[command(flatten)]
        a: dhtbench::DhtArgs,
    }
    let args = [
        "dht",
        "-n",
        "2",
        "--shm",
        "-w",
        "paper,a",
        "-k",
        "20000",
        "--latency-ops",
        "5000",
    ];
    let a = DhtCmd::try_parse_from(args)?.a;
    let _ = std::io::stdout().flush();
    run_dht(&a)
}

fn set_default_env() {
    // The sockets provider spins 10 ms per progress wait by default; on a
    // small machine that makes it ~100x slower. Must be set before libfabric
    // initialises, i.e. before any fi_getinfo; we are still single-threaded.
    if std::env::var_os("FI_SOCKETS_PE_WAITTIME").is_none() {
        std::env::set_var("FI_SOCKETS_PE_WAITTIME", "0");
    }
}

fn main() -> ExitCode {
    // Rust ignores SIGPIPE, so a reader that closes early (`fabkit info |
    // head -1`) made println! panic; like other command-line tools, fabkit
    // ends quietly by the signal instead.
    // SAFETY: still single-threaded, before anything writes; SIG_DFL is a
    // valid disposition for SIGPIPE and no handler of ours is replaced.
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_DFL);
    }
    set_default_env();
    // A negative number is a value, so `-n -1` meets its bound's message
    // rather than "unexpected argument '-1'".
    let command = <Cli as clap::CommandFactory>::command()
        .mut_subcommands(|c| c.allow_negative_numbers(true));
    let subs: Vec<String> = command
        .get_subcommands()
        .map(|c| c.get_name().to_string())
        .collect();
    let parsed = command
        .try_get_matches()
        .and_then(|m| <Cli as clap::FromArgMatches>::from_arg_matches(&m));
    let cli = match parsed {
        Ok(cli) => cli,
        Err(e) => return bounds::clap_exit(e, &subs),
    };
    // MCA parameters are read at MPI_Init: set the one-sided components
    // before it, unless the user or mpirun --mca chose already.
    #[cfg(feature = "mpi")]
    if std::env::var_os("OMPI_MCA_osc").is_none() {
        let osc = match &cli.cmd {
            Cmd::MpiPerf(args) => Some(args.osc.as_str()),
            Cmd::Check(args) if args.mpi.is_some() => Some("sm,pt2pt"),
            Cmd::Dht(args) if args.mpi.is_some() => Some("sm,pt2pt"),
            Cmd::Surrogate(args) if args.mpi.is_some() => Some("sm,pt2pt"),
            _ => None,
        };
        if let Some(osc) = osc {
            std::env::set_var("OMPI_MCA_osc", osc);
        }
    }
    if let Err(e) = keep_stdout_for_data(&cli.cmd) {
        eprintln!("fabkit: error: {}", bounds::one_line(&e));
        return ExitCode::from(bounds::exit_code(&e));
    }
    let result = match &cli.cmd {
        Cmd::Info { provider, json } => info::gather(provider.as_deref()).and_then(|r| {
            // Refused before anything is printed: an empty table on stdout
            // read as "this provider has nothing".
            if let (Some(p), true) = (provider, r.providers.is_empty()) {
                return Err(bounds::usage(format!(
                    "provider `{p}` is not available here (run `fabkit info` for the list)"
                )));
            }
            if *json {
                println!("{}", serde_json::to_string_pretty(&r)?);
            } else {
                info::print(&r);
            }
            Ok(true)
        }),
        Cmd::Check(args) => run_check(args),
        Cmd::Perf(args) => run_perf(args),
        Cmd::Plot(args) => plot::run(args).map(|()| true),
        Cmd::Dht(args) => run_dht(args),
        Cmd::Model(args) => run_model(args),
        Cmd::Surrogate(args) => surrogate::run(args),
        Cmd::Launch {
            netns,
            ranks,
            timeout: t,
            mpi,
            cmd,
        } => match if *mpi {
            launch::launch_mpi(netns, *ranks, cmd)
        } else {
            launch::launch_processes(netns, *ranks, *t, cmd)
        } {
            // The ranks' own exit status is the job's.
            Ok(code) => return ExitCode::from(u8::try_from(code).unwrap_or(1)),
            Err(e) => Err(e),
        },
        Cmd::Rsh { host, words } => launch::rsh(host, words).map(|()| true),
        Cmd::Clean(args) => clean::run(args),
        #[cfg(feature = "mpi")]
        Cmd::MpiPerf(args) => run_mpi_perf(args),
        Cmd::Demo { ranks } => info::gather(None).and_then(|r| {
            info::print(&r);
            println!();
            let providers: Vec<String> = r
                .providers
                .iter()
                .filter(|p| p.fabkit_rma && p.atomics.is_some_and(|a| a.all()))
                .map(|p| p.provider.clone())
                .filter(|p| ["shm", "tcp;ofi_rxm", "sockets"].contains(&p.as_str()))
                .collect();
            let checked = run_check(&CheckArgs {
                providers,
                domain: None,
                ranks: *ranks,
                timeout: Duration::from_secs(10),
                json: None,
                #[cfg(feature = "mpi")]
                mpi: None,
            })?;
            println!();
            Ok(checked & demo_dht()?)
        }),
    };
    let _ = std::io::stdout().flush();
    match result {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::from(1),
        Err(e) => {
            eprintln!("fabkit: error: {}", bounds::one_line(&e));
            ExitCode::from(bounds::exit_code(&e))
        }
    }
}
