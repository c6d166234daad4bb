//! What each subcommand does with its flags: the library's work, then
//! what is printed and written.

use std::io::Write;
use std::net::IpAddr;
use std::path::PathBuf;
use std::time::Duration;

use fabkit_netns::testbed;
use ipoib_eval::report::row;
use ipoib_eval::run::{run_client, ClientOpts, RunError, Server, ServerOpts};
use ipoib_eval::spec::{self, Proto, SpecError};

use crate::args::{ClientArgs, ServerArgs, TestbedCmd};

fn write_file(path: &PathBuf, text: &str, append: bool) -> Result<(), RunError> {
    let mut f = std::fs::OpenOptions::new()
        .create(true)
        .append(append)
        .write(true)
        .truncate(!append)
        .open(path)
        .map_err(|e| RunError::Failed(format!("cannot write {}: {e}", path.display())))?;
    f.write_all(text.as_bytes())
        .map_err(|e| RunError::Failed(format!("cannot write {}: {e}", path.display())))
}

pub(crate) fn client(a: &ClientArgs) -> Result<(), RunError> {
    let spec = a.spec()?;
    let cpus = a
        .cpus
        .as_deref()
        .map(|c| spec::parse_cpus("--cpus", c))
        .transpose()?
        .unwrap_or_default();
    // CPUs that exist, not just those this process may use now (taskset, cgroups).
    let ncpu = std::fs::read_to_string("/sys/devices/system/cpu/possible")
        .ok()
        .and_then(|t| spec::parse_cpus("cpu list", t.trim()).ok())
        .and_then(|v| v.iter().max().map(|m| m + 1))
        .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()));
    if let Some(c) = cpus.iter().find(|c| **c >= ncpu) {
        return Err(SpecError(format!(
            "--cpus names CPU {c}, but this machine has {ncpu} (0-{})",
            ncpu - 1
        ))
        .into());
    }
    // Check output paths before spending the test's time.
    if let Some(p) = &a.json_file {
        write_file(p, "", false)?;
    }
    if let Some(p) = &a.csv {
        write_file(p, "", true)?;
    }
    enter(a.netns.as_deref())?;
    let opts = ClientOpts {
        host: a.host().to_string(),
        port: a.port,
        bind: a.bind,
        dev: a.dev.clone(),
        v4: if a.v4 {
            Some(true)
        } else if a.v6 {
            Some(false)
        } else {
            None
        },
        cpus,
        unconnected_udp: a.unconnected,
        print_intervals: !a.json,
    };
    if !a.json {
        out!(
            "ipoib-eval {}: {} to {}:{}",
            env!("CARGO_PKG_VERSION"),
            spec.describe(),
            a.host(),
            a.port
        );
        if spec.proto == Proto::Udp && a.bitrate.is_none() {
            out!("(UDP at 1 Mbit/s per stream, iperf3's default: -b 0 for unlimited)");
        }
    }
    let report = run_client(&spec, &opts)?;
    let json = serde_json::to_string_pretty(&report).unwrap_or_default() + "\n";
    if a.json {
        outp!("{json}");
    } else {
        outp!("{}", report.text());
    }
    if let Some(p) = &a.json_file {
        write_file(p, &json, false)?;
    }
    if let Some(p) = &a.csv {
        let new = std::fs::metadata(p).map(|m| m.len() == 0).unwrap_or(true);
        write_file(p, &row::to_text(&report.rows(), new), true)?;
    }
    Ok(())
}

pub(crate) fn server(a: &ServerArgs) -> Result<(), RunError> {
    if !(a.idle_timeout.is_finite() && a.idle_timeout >= 0.1 && a.idle_timeout <= 3600.0) {
        return Err(SpecError(format!(
            "--idle-timeout must be 0.1 to 3600 seconds, got {}",
            a.idle_timeout
        ))
        .into());
    }
    if a.max_sessions == 0 || a.max_sessions > 1024 {
        return Err(SpecError(format!(
            "--max-sessions must be 1 to 1024, got {}",
            a.max_sessions
        ))
        .into());
    }
    if let (Some(_), Some(ns)) = (&a.sweep_iface, &a.netns) {
        return Err(SpecError(format!(
            "--sweep-iface with --netns: /sys would still show the first namespace; run \
             `ip netns exec {ns} ipoib-eval server --sweep-iface ...` instead"
        ))
        .into());
    }
    enter(a.netns.as_deref())?;
    if let Some(i) = &a.sweep_iface {
        // Said now, not at a sweep's first point.
        ipoib_eval::iface::read(i).map_err(|e| SpecError(format!("--sweep-iface: {e}")))?;
    }
    let s = Server::bind(ServerOpts {
        port: a.port,
        bind: a.bind,
        dev: a.dev.clone(),
        max_sessions: a.max_sessions,
        handshake_timeout: Duration::from_secs_f64(a.idle_timeout),
        verbose: !a.quiet,
        sweep_iface: a.sweep_iface.clone(),
    })?;
    // Always said, even with -q: scripts wait for this line, not a sleep.
    out!(
        "ipoib-eval {} server listening on port {}",
        env!("CARGO_PKG_VERSION"),
        s.port()
    );
    let _ = std::io::stdout().flush();
    s.serve(a.one_off)
}

/// Enters a namespace before any thread or socket exists.
fn enter(netns: Option<&str>) -> Result<(), RunError> {
    match netns {
        Some(n) => testbed::enter(n).map_err(|e| RunError::Failed(e.to_string())),
        None => Ok(()),
    }
}

pub(crate) fn testbed_cmd(cmd: &TestbedCmd) -> Result<(), RunError> {
    let fail = |e: testbed::TestbedError| match e {
        testbed::TestbedError::Invalid(m) => RunError::Usage(SpecError(m)),
        other => RunError::Failed(other.to_string()),
    };
    match cmd {
        TestbedCmd::Up(a) => {
            let mut offloads = Vec::new();
            for o in &a.offload {
                let parsed = o.split_once('=').and_then(|(f, v)| match v {
                    "on" => Some((f.to_string(), true)),
                    "off" => Some((f.to_string(), false)),
                    _ => None,
                });
                offloads.push(parsed.ok_or_else(|| {
                    SpecError(format!(
                        "--offload takes FEATURE=on|off such as gro=off; got `{o}`"
                    ))
                })?);
            }
            let tb = testbed::Testbed::up(testbed::TestbedSpec {
                name: a.name.clone(),
                gateway: a.gateway,
                queues: a.queues,
                mtu: a.mtu,
                mtu_b: a.mtu_b,
                offloads,
                qdisc: a.qdisc.clone(),
                txqueuelen: a.txqueuelen,
                ipv6: a.ipv6,
                mgmt: a.mgmt,
                outsider: a.outsider,
            })
            .map_err(fail)?;
            out!("testbed {} up:", a.name);
            for (h, role) in [(&tb.a, "client side"), (&tb.b, "server side")] {
                out!("  {:<12} {} {} ({role})", h.netns, h.iface, h.addr);
                if let Some(m) = h.mgmt {
                    out!(
                        "  {:<12} {} {m} (management link to the root namespace)",
                        "",
                        testbed::MGMT_IFACE
                    );
                }
            }
            if let Some(g) = &tb.gateway {
                out!(
                    "  {g:<12} routes between the two (MTU {} | {})",
                    a.mtu,
                    a.mtu_b
                );
            }
            if let Some(x) = &tb.outsider {
                out!(
                    "  {:<12} {} {} (outsider: reaches both through the gateway)",
                    x.netns,
                    x.iface,
                    x.addr
                );
            }
            out!(
                "  e.g. ipoib-eval server --netns {} &  ipoib-eval client {} --netns {}",
                tb.b.netns,
                tb.b.addr,
                tb.a.netns
            );
            tb.keep();
            Ok(())
        }
        TestbedCmd::Down { name } => testbed::down(name).map_err(fail),
        TestbedCmd::Status { name } => {
            let up = testbed::status(name);
            if up.is_empty() {
                return Err(RunError::Failed(format!("testbed {name} is not up")));
            }
            for n in up {
                out!("{n}");
            }
            Ok(())
        }
    }
}

/// `results/x.csv` -> `results/x/`; a name without an extension gets
/// `.plots` added (the directory must not be the CSV itself).
fn plots_dir(csv: &std::path::Path) -> PathBuf {
    if csv.extension().is_some() {
        csv.with_extension("")
    } else {
        let mut s = csv.as_os_str().to_owned();
        s.push(".plots");
        PathBuf::from(s)
    }
}

pub(crate) fn summary(
    csv: &std::path::Path,
    dir: Option<&std::path::Path>,
) -> Result<(), RunError> {
    let dir = dir.map_or_else(|| plots_dir(csv), PathBuf::from);
    let text = std::fs::read_to_string(csv)
        .map_err(|e| RunError::Usage(SpecError(format!("cannot read {}: {e}", csv.display()))))?;
    let summary = ipoib_eval::summary::Summary::of(csv, &text, ipoib_eval::provenance())?;
    let files = ipoib_eval::summary::write(&summary, &dir).map_err(RunError::Failed)?;
    out!("{} files in {}", files.len(), dir.display());
    Ok(())
}

pub(crate) fn sweep(
    file: &std::path::Path,
    output: &std::path::Path,
    dry_run: bool,
    plots: Option<&std::path::Path>,
    target: &ipoib_eval::sweep::Target,
) -> Result<(), RunError> {
    let text = std::fs::read_to_string(file)
        .map_err(|e| RunError::Usage(SpecError(format!("cannot read {}: {e}", file.display()))))?;
    let f = ipoib_eval::sweep::SweepFile::parse(&text)?;
    if dry_run {
        let points = f.expand()?;
        for p in &points {
            out!("{}", p.key());
        }
        out!(
            "{} runs, about {:.0} s",
            points.len(),
            f.estimate_s(points.len(), ipoib_eval::sweep::RUN_OVERHEAD_S)
        );
        return Ok(());
    }
    if let ipoib_eval::sweep::Target::Iface { iface, peer, .. } = target {
        ipoib_eval::iface::valid_name(iface).map_err(|e| SpecError(format!("--iface: {e}")))?;
        peer.parse::<IpAddr>().map_err(|_| {
            SpecError(format!(
                "--peer `{}`: give the peer's address on {iface} (such as 10.0.0.2)",
                peer.escape_default()
            ))
        })?;
    }
    // A closed stderr (a reader that left) does not stop the sweep.
    ipoib_eval::sweep::run(&f, output, target, |line| {
        let _ = writeln!(std::io::stderr().lock(), "{line}");
    })?;
    summary(output, plots)
}

pub(crate) fn restore(iface: Option<&str>) -> Result<(), RunError> {
    if let Some(i) = iface {
        ipoib_eval::iface::valid_name(i).map_err(|e| SpecError(e.0))?;
    }
    let done = ipoib_eval::iface::restore_recorded(iface).map_err(|e| RunError::Failed(e.0))?;
    if done.is_empty() {
        out!(
            "nothing to restore: no record in {}",
            ipoib_eval::iface::RECORD_DIR
        );
    }
    for i in done {
        out!("{i}: settings restored");
    }
    Ok(())
}
