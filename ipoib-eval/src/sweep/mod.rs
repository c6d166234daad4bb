//! Sweeps: a file names the axes (flent-style), every combination is a
//! point, each point runs `repetitions` times on a testbed built with its
//! settings, and each run appends one CSV row per direction with every
//! setting and every measured figure, the per-queue counters included.
//! Experiments are products of their own over the common axes, so one file
//! holds several studies.
//!
//! ```toml
//! seconds = 3          # per run
//! repetitions = 3
//! shuffle = true       # run the points in a seeded random order
//! seed = 1
//! [axes]               # common to every experiment; each has a default
//! queues = [4]
//! policy = ["hash"]    # hash, xps, rr
//! mtu = [1500]
//! gateway = ["none"]   # or the MTU of a link behind a gateway
//! offloads = ["default"]
//! qdisc = ["default"]
//! txqueuelen = [1000]
//! proto = ["tcp"]
//! len = ["default"]    # 128K for TCP, 1472 for UDP
//! send = ["send"]
//! recv = ["recv"]
//! streams = [1]
//! rate = ["0"]         # bit/s; 0 unlimited
//! cpus = ["any"]       # or CLIENT:SERVER CPU lists
//! direction = ["forward"]
//!
//! [[experiment]]
//! name = "queues"
//! queues = [1, 2, 4, 8]
//! streams = [1, 4, 16]
//! ```
//!
//! Points are named by their settings ([`Point::key`]), so a sweep resumed
//! over an existing CSV skips the runs already there.
//!
//! One file per job: `file` (the sweep file, its axes and experiments),
//! `point` (a point and its key), `expand` (axes to points; pure),
//! `rows` (the CSV's rows, and resume), `queues` (the per-queue
//! columns from the eBPF views), `testbed` and `iface` (a point run on a
//! testbed or over a real interface); [`run`], the loop, is here.

use std::io::Write as _;
use std::time::Instant;

use crate::report::row::to_text;
use crate::run::RunError;
use iface::{check_for_iface, run_point_iface, PeerHeld};

mod expand;
mod file;
mod iface;
mod point;
mod queues;
mod rows;
mod testbed;

pub use file::{valid_experiment, Axes, Policy, SweepFile};
pub use point::{parse_offloads, Point, IPERF3};
pub use queues::QueueColumns;
pub use rows::{done_keys, header, Settings, SweepRow};
pub use testbed::run_point;

/// At most this many runs in one sweep (a typo in an axis should not
/// schedule a year of measurements).
pub const MAX_RUNS: usize = 100_000;

/// Seconds a run takes beyond its measured time (testbed, views,
/// handshake), for estimates.
pub const RUN_OVERHEAD_S: f64 = 1.5;

/// Where a sweep's points run.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Target {
    /// On a testbed of their own each (namespaces and veth pairs).
    Testbed,
    /// Over this host's interface to a peer that runs
    /// `ipoib-eval server --sweep-iface IFACE`, which sets its own side.
    Iface {
        /// The interface here.
        iface: String,
        /// The peer's address on it.
        peer: String,
        /// The peer server's control port.
        port: u16,
    },
}

/// Runs every point of `file` not yet in `out` (a CSV it appends to),
/// saying before it starts how many runs and how long, and after each run
/// how far it is. Returns the runs done now.
pub fn run(
    file: &SweepFile,
    out: &std::path::Path,
    target: &Target,
    mut say: impl FnMut(&str),
) -> Result<usize, RunError> {
    let points = file.expand()?;
    // On a real interface: its settings recorded before anything changes,
    // restored when this value goes (also on SIGINT or SIGTERM).
    let mut points = points;
    let held = match target {
        Target::Testbed => None,
        Target::Iface { iface, peer, .. } => {
            check_for_iface(&points)?;
            let (h, earlier) = crate::iface::hold(iface).map_err(|e| RunError::Failed(e.0))?;
            // An axis the file leaves out is the interface as it was, not
            // the testbed's default.
            let saved = h.saved();
            for p in &mut points {
                let given = file.given_axes(&p.experiment);
                if !given.contains("queues") {
                    p.queues = u16::try_from(saved.xps_cpus.len()).unwrap_or(u16::MAX);
                }
                if !given.contains("mtu") {
                    p.mtu = saved.mtu;
                }
                if !given.contains("txqueuelen") {
                    p.txqueuelen = saved.txqueuelen;
                }
                p.on = Some(format!("{iface}>{peer}"));
            }
            say(&format!(
                "{iface}: settings recorded; they go back when the sweep ends (after a crash: \
                 ipoib-eval restore)"
            ));
            if earlier {
                say(&format!(
                    "{iface}: a record from an earlier run that did not finish is kept; \
                     the settings go back to it at the end"
                ));
            }
            Some(h)
        }
    };
    // The peer's end goes back when the sweep ends, fails or is interrupted.
    let _peer = match target {
        Target::Iface { peer, port, .. } => Some(PeerHeld::new(peer, *port)),
        Target::Testbed => None,
    };
    let existing = match std::fs::read_to_string(out) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => String::new(),
        Err(e) => return Err(RunError::Failed(format!("reading {}: {e}", out.display()))),
    };
    // A sweep killed mid-write leaves a partial last line: cut it off, so
    // the next row starts a line of its own (that run is done again).
    let existing = match existing.rfind('\n') {
        Some(i) if i + 1 < existing.len() => {
            let keep = &existing[..=i];
            std::fs::write(out, keep)
                .map_err(|e| RunError::Failed(format!("repairing {}: {e}", out.display())))?;
            keep.to_string()
        }
        None if !existing.is_empty() => String::new(),
        _ => existing,
    };
    let done = done_keys(&existing)?;
    let todo: Vec<&Point> = points.iter().filter(|p| !done.contains(&p.key())).collect();
    say(&format!(
        "sweep: {} runs ({} already in {}), about {:.0} s",
        todo.len(),
        points.len() - todo.len(),
        out.display(),
        file.estimate_s(todo.len(), RUN_OVERHEAD_S)
    ));
    let mut f = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(out)
        .map_err(|e| RunError::Failed(format!("opening {}: {e}", out.display())))?;
    if existing.is_empty() {
        f.set_len(0)
            .and_then(|()| f.write_all(to_text::<SweepRow>(&[], true).as_bytes()))
            .map_err(|e| RunError::Failed(format!("writing {}: {e}", out.display())))?;
    }
    let start = Instant::now();
    let mut failed: Vec<String> = Vec::new();
    for (i, p) in todo.iter().enumerate() {
        let r = match (target, &held) {
            (Target::Iface { peer, port, .. }, Some(h)) => {
                run_point_iface(p, h.saved(), peer, *port)
            }
            _ => run_point(p),
        };
        match r {
            Ok(rows) => {
                // One write per run: a kill leaves at most one partial line.
                f.write_all(to_text(&rows, false).as_bytes())
                    .map_err(|e| RunError::Failed(format!("writing {}: {e}", out.display())))?;
            }
            Err(e) => {
                // The other points still run; this one is missing from
                // the file, so a resume tries it again.
                let e = format!("run `{}` failed: {e}", p.key());
                say(&e);
                failed.push(e);
            }
        }
        let per = start.elapsed().as_secs_f64() / (i + 1) as f64;
        say(&format!(
            "[{}/{}] {} ({:.0} s left)",
            i + 1,
            todo.len(),
            p.key(),
            per * (todo.len() - i - 1) as f64
        ));
    }
    if let Some(mut h) = held {
        h.restore().map_err(|e| {
            RunError::Failed(format!(
                "{e} (the record stays: `ipoib-eval restore` tries again)"
            ))
        })?;
    }
    if let Some(first) = failed.first() {
        return Err(RunError::Failed(format!(
            "{} of {} runs failed and are not in {} (run the sweep again to retry them); \
             the first: {first}",
            failed.len(),
            todo.len(),
            out.display()
        )));
    }
    Ok(todo.len())
}
