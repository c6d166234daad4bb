//! `fabkit dht` as a command: checks what is asked before any rank
//! starts, runs every rank's share (in-process, as processes or under
//! mpirun), and has the reporting rank print and write the report.

use std::io::Write as _;

use anyhow::Result;

use super::{bound, report, DhtArgs, RedisOn, System};
use crate::launch::Launch;

/// `fabkit dht`: the benchmark on this rank (and the job's others), with
/// Redis beside it; printed and written by the reporting rank. Whether
/// every run was sound.
pub fn command(args: &DhtArgs) -> Result<bool> {
    // MPI_THREAD_MULTIPLE unless the path is RMA: Open MPI's pt2pt
    // windows refuse it, and only the message path needs it.
    let path = super::transports::path_of(args.path, args.shm)?;
    let launch = Launch::detect_threads(args.ranks, path != fabkit_dht::Path::Rma)?;
    let (ranks, in_process) = launch.ranks();
    #[cfg(feature = "mpi")]
    let mpi = args.mpi.is_some();
    #[cfg(not(feature = "mpi"))]
    let mpi = false;
    super::validate(args, ranks, in_process, mpi)?;
    if let Some(f) = &args.hold {
        check_hold(f)?;
    }
    // The reporting rank reads the --bound files (before the run: a file it
    // cannot use fails now, not after minutes); the others never need them.
    let rates = (launch.reports() && !args.bound.is_empty())
        .then(|| {
            bound::load(
                &args.bound,
                "--bound",
                Some(&args.provider),
                &super::variants(args),
            )
        })
        .transpose()?;
    // Output files are checked before a run of minutes, not after it, by
    // the rank that writes them.
    if launch.reports() {
        for (flag, path) in [("--json", &args.json), ("--csv", &args.csv)] {
            if let Some(p) = path {
                crate::output::check_output_file(flag, p)?;
            }
        }
    }
    // The bootstrap's waits are phase barriers: bounded by a phase, not by
    // one operation's --timeout.
    let to = super::phase_bound(args, ranks);
    #[cfg(feature = "mpi")]
    if let Some(win) = args.mpi {
        let Launch::Mpi(boot) = &launch else {
            return Err(crate::exit::usage(format!(
                "--mpi runs under an MPI launcher: mpirun -n 2 fabkit dht --mpi {}",
                crate::dhtbench::report::name(win)
            )));
        };
        let kind = fabkit_mpi::window::WindowKind::from(win);
        boot.set_timeout(to);
        let ran = super::run_rank_mpi(args, kind, boot)?;
        if fabkit_core::bootstrap::Bootstrap::rank(boot) != 0 {
            return Ok(true);
        }
        let size = fabkit_core::bootstrap::Bootstrap::size(boot);
        // The path says whether MPI windows carried the operations at all
        // (on one node `auto` takes memory).
        let taken = ran
            .samples
            .iter()
            .find_map(|x| x.path)
            .map_or("?", |p| p.name());
        let provider = format!(
            "mpi osc={}, window {win:?} (--path {}: {taken})",
            crate::mpiperf::osc_in_force(),
            path.name()
        )
        .to_lowercase();
        return report(args, ran, launch.provenance(size), &provider, None);
    }
    let runs = launch.run(to, |boot| super::run_rank(args, boot))?;
    let Some(mut runs) = runs else {
        return Ok(true);
    };
    // Every rank holds the same combined samples; rank 0's are reported.
    let n = runs.len();
    // The fabkit rows say what carried them and the path they took; the
    // memory path on one node has no fabric in it at all.
    let first = runs
        .first()
        .and_then(|r| r.samples.iter().find(|x| x.system == System::Fabkit));
    let flag = if args.shm {
        "--shm".to_string()
    } else {
        format!("--path {}", args.path.unwrap_or_default().name())
    };
    let provider = match first {
        Some(x) if x.path == Some(super::transports::Taken::Memory) => {
            format!("{} ({flag})", x.transport)
        }
        Some(x) => format!(
            "libfabric {} ({flag}: {})",
            args.provider,
            x.path.map_or("?", |p| p.name())
        ),
        None => format!("libfabric {} ({flag})", args.provider),
    };
    report(
        args,
        runs.swap_remove(0),
        launch.provenance(n),
        &provider,
        rates.as_ref(),
    )
}

/// Prints `fabkit dht`'s table and writes its JSON and CSV, each fabkit
/// row with its bound where `rates` (read before the run) give one;
/// whether every run was sound.
fn report(
    args: &DhtArgs,
    ran: super::Ran,
    provenance: fabkit_core::provenance::Provenance,
    provider: &str,
    rates: Option<&bound::Rates>,
) -> Result<bool> {
    let samples = &ran.samples;
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
    if let Some(on) = samples.iter().find_map(|s| s.redis) {
        let on = match on {
            RedisOn::Loopback => "on loopback",
            RedisOn::Network => "on its host's address in the ranks' network (-d)",
        };
        notes.push(format!(
            "redis: one redis-server per rank {on}, the keys sharded by the DHT's placement, \
             one MGET/MSET per server per batch (one message where the DHT sends one per \
             remote operation); the servers share this machine's {} cores with the ranks",
            fabkit_core::host::online_cpus()
        ));
    }
    let rep = report::Report {
        meta: report::Meta {
            provenance,
            provider: provider.into(),
            notes,
        },
        runs,
        soak: ran.soak,
    };
    print!("{}", report::table(&rep));
    if let Some(s) = &rep.soak {
        print!("{}", super::soak::describe(s));
    }
    if let Some(p) = &args.json {
        crate::output::write_out(p, &(serde_json::to_string_pretty(&rep)? + "\n"))?;
    }
    if let Some(p) = &args.csv {
        crate::output::write_out(p, &report::csv(&rep)?)?;
    }
    let flat = rep.soak.as_ref().is_none_or(|s| {
        if !s.flat() {
            eprintln!("fabkit: error: the soak found a count that grew after warm-up (GREW above)");
        }
        s.flat()
    });
    Ok(report::sound(&rep.runs) && flat)
}

/// The demo's DHT benchmark on the fastest path measured here
/// (results/dht-speed): two in-process ranks sharing their regions through
/// the same-node shortcut, with no fabric and no launcher, Redis beside
/// them when it is installed.
pub fn demo() -> Result<bool> {
    use clap::Parser;
    #[derive(Parser)]
    struct DhtCmd {
        #[command(flatten)]
        a: DhtArgs,
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
    command(&a)
}

/// `--hold FILE` must be a file to come: one that exists already would
/// hold nothing, and one in a folder that does not exist would never come.
fn check_hold(f: &std::path::Path) -> Result<()> {
    let usage = |why: &str| Err(crate::exit::usage(format!("--hold {}: {why}", f.display())));
    if f.as_os_str().is_empty() {
        return usage("give the file whose creation lets the run go on, such as /tmp/go");
    }
    if f.symlink_metadata().is_ok() {
        return usage("exists already, so nothing would be held; remove it or name another");
    }
    let dir = match f.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => std::path::Path::new("."),
    };
    if !dir.is_dir() {
        return usage(
            "its folder does not exist, so it could never appear; name a file in one that does",
        );
    }
    Ok(())
}
