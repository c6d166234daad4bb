//! `fabkit`: kernel-bypass fabric toolkit for HPC. The command line's tree
//! is in `cli`; what each subcommand does is in the `fabkit_bench` library.

mod cli;

use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;

use fabkit_bench::surrogate;
use fabkit_bench::{
    check, clean, demo, dhtbench, exit, info, intrude, launch, model, output, perf, plot,
};

use cli::{Cli, Cmd};

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
        Err(e) => return exit::clap_exit(e, &subs),
    };
    set_osc(&cli.cmd);
    let (json, csv) = data_on_stdout(&cli.cmd);
    if let Err(e) = output::reserve_stdout(json, csv) {
        return fail(&e);
    }
    let result = match &cli.cmd {
        Cmd::Info { provider, json } => info::command(provider.as_deref(), *json),
        Cmd::Check(args) => check::command(args),
        Cmd::Perf(args) => perf::command(args),
        #[cfg(feature = "mpi")]
        Cmd::MpiPerf(args) => fabkit_bench::mpiperf::command(args),
        Cmd::Plot(args) => plot::command(args),
        Cmd::Dht(args) => dhtbench::command(args),
        Cmd::Model(args) => model::command(args),
        Cmd::Surrogate(args) => surrogate::command(args),
        Cmd::Demo { ranks } => demo::command(*ranks),
        Cmd::Launch {
            netns,
            ranks,
            timeout,
            mpi,
            cmd,
        } => {
            let ran = if *mpi {
                launch::launch_mpi(netns, *ranks, cmd)
            } else {
                launch::launch_processes(netns, *ranks, *timeout, cmd)
            };
            match ran {
                // The ranks' own exit status is the job's.
                Ok(code) => return ExitCode::from(u8::try_from(code).unwrap_or(1)),
                Err(e) => Err(e),
            }
        }
        Cmd::Rsh { host, words } => launch::rsh(host, words).map(|()| true),
        Cmd::Clean(args) => clean::command(args),
        Cmd::Intrude(args) => intrude::command(args),
        Cmd::GenerateDocs { out } => {
            fabkit_clidocs::generate(<Cli as clap::CommandFactory>::command(), out)
                .map(|files| println!("wrote {} files under {}", files.len(), out.display()))
                .map(|()| true)
                .map_err(|e| anyhow::anyhow!("writing man pages under {}: {e}", out.display()))
        }
    };
    let _ = std::io::stdout().flush();
    match result {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::from(1),
        Err(e) => fail(&e),
    }
}

/// Says why the command failed, on one line, and gives its exit status.
fn fail(e: &anyhow::Error) -> ExitCode {
    eprintln!("fabkit: error: {}", exit::one_line(e));
    ExitCode::from(exit::exit_code(e))
}

/// Whether `--json -` and `--csv -` ask for standard output.
fn data_on_stdout(cmd: &Cmd) -> (bool, bool) {
    let is_dash = |p: &Option<PathBuf>| p.as_ref().is_some_and(|p| p.as_os_str() == "-");
    match cmd {
        Cmd::Check(a) => (is_dash(&a.json), false),
        Cmd::Perf(a) => (is_dash(&a.sweep.json), is_dash(&a.sweep.csv)),
        #[cfg(feature = "mpi")]
        Cmd::MpiPerf(a) => (is_dash(&a.sweep.json), is_dash(&a.sweep.csv)),
        Cmd::Dht(a) => (is_dash(&a.json), is_dash(&a.csv)),
        Cmd::Model(a) => (is_dash(&a.json), false),
        Cmd::Surrogate(a) => (is_dash(&a.json), false),
        Cmd::Intrude(a) => (is_dash(&a.json), false),
        _ => (false, false),
    }
}

/// MCA parameters are read at MPI_Init: the one-sided components are set
/// before it, unless the user or mpirun --mca chose already (Open MPI
/// 4.1's default, osc rdma, crashes in MPI_Compare_and_swap).
fn set_osc(cmd: &Cmd) {
    #[cfg(feature = "mpi")]
    if std::env::var_os("OMPI_MCA_osc").is_none() {
        let osc = match cmd {
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
    #[cfg(not(feature = "mpi"))]
    let _ = cmd;
}

fn set_default_env() {
    // The sockets provider spins 10 ms per progress wait by default; on a
    // small machine that makes it ~100x slower. Must be set before libfabric
    // initialises, i.e. before any fi_getinfo; we are still single-threaded.
    if std::env::var_os("FI_SOCKETS_PE_WAITTIME").is_none() {
        std::env::set_var("FI_SOCKETS_PE_WAITTIME", "0");
    }
}
