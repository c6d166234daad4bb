//! `ipoib-eval`: flags only; the work is in the library (quinn's perf
//! layout). Exit 0 on success, 1 for a failed run, 2 for bad usage; every
//! error is one line.
//!
//! `args` holds the flags (clap), `commands` what each subcommand does
//! with them (calls into the library, prints, writes files).

use std::io::Write;
use std::process::ExitCode;

use clap::Parser;
use fabkit_netns::cleanup::{self, Signalled};
use ipoib_eval::run::RunError;

/// Prints a line; a closed stdout (a reader that left) is not a reason to
/// panic or to fail the run.
macro_rules! out {
    ($($t:tt)*) => {{
        let _ = writeln!(std::io::stdout().lock(), $($t)*);
    }};
}

/// Prints without a newline, likewise.
macro_rules! outp {
    ($($t:tt)*) => {{
        let _ = write!(std::io::stdout().lock(), $($t)*);
    }};
}

mod args;
mod commands;

use args::{Cli, Cmd};
use commands::{client, restore, server, summary, sweep, testbed_cmd};

fn main() -> ExitCode {
    // Before any thread starts: an interrupted sweep or server removes its
    // testbeds and restores the interfaces it changed.
    if let Err(e) = cleanup::on_signals(|s| {
        let l = match s {
            Signalled::Undoing { signal } => format!(
                "interrupted (signal {signal}): removing testbeds and restoring interfaces \
                 (again to stop at once)"
            ),
            Signalled::Abandoned { .. } => "stopped before everything was undone: \
                `ipoib-eval restore` puts interfaces back; the next sweep removes the testbed"
                .to_string(),
        };
        let _ = writeln!(std::io::stderr().lock(), "ipoib-eval: {l}");
    }) {
        eprintln!("ipoib-eval: error: cannot take signals: {e}");
        return ExitCode::from(1);
    }
    let cli = match Cli::try_parse() {
        Ok(c) => c,
        Err(e) if e.use_stderr() => {
            // One line: clap's first, without the usage block.
            let text = e.render().to_string();
            let mut lines = text.lines().map(str::trim).filter(|l| !l.is_empty());
            let mut first = lines.next().unwrap_or("bad arguments").to_string();
            // "...were not provided:" names the argument on the next line.
            if first.ends_with(':') {
                if let Some(next) = lines.next() {
                    first = format!("{first} {next}");
                }
            }
            eprintln!(
                "ipoib-eval: {} (see ipoib-eval --help)",
                first.trim_start_matches("error: ")
            );
            return ExitCode::from(2);
        }
        Err(e) => {
            let _ = e.print();
            return ExitCode::SUCCESS;
        }
    };
    let r = match &cli.cmd {
        Cmd::Server(a) => server(a),
        Cmd::Client(a) => client(a),
        Cmd::Testbed { cmd } => testbed_cmd(cmd),
        Cmd::Sweep {
            file,
            output,
            dry_run,
            plots,
            iface,
            peer,
            port,
        } => {
            let target = match (iface, peer) {
                (Some(iface), Some(peer)) => ipoib_eval::sweep::Target::Iface {
                    iface: iface.clone(),
                    peer: peer.clone(),
                    port: *port,
                },
                _ => ipoib_eval::sweep::Target::Testbed,
            };
            sweep(file, output, *dry_run, plots.as_deref(), &target)
        }
        Cmd::Restore { iface } => restore(iface.as_deref()),
        Cmd::Summary { csv, output } => summary(csv, output.as_deref()),
        Cmd::GenerateDocs { out } => {
            fabkit_clidocs::generate(<Cli as clap::CommandFactory>::command(), out)
                .map(|files| println!("wrote {} files under {}", files.len(), out.display()))
                .map_err(|e| {
                    RunError::Failed(format!("writing man pages under {}: {e}", out.display()))
                })
        }
    };
    let _ = std::io::stdout().flush();
    match r {
        Ok(()) => ExitCode::SUCCESS,
        Err(RunError::Usage(e)) => {
            eprintln!("ipoib-eval: {e}");
            ExitCode::from(2)
        }
        Err(RunError::Failed(e)) => {
            eprintln!("ipoib-eval: error: {e}");
            ExitCode::from(1)
        }
    }
}
