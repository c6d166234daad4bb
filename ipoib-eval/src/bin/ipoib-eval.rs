//! `ipoib-eval`: flags only; the work is in the library (quinn's perf
//! layout). Exit 0 on success, 1 for a failed run, 2 for bad usage; every
//! error is one line.

use std::io::Write;
use std::net::IpAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::{Args, Parser, Subcommand};
use fabkit_netns::cleanup::{self, Signalled};
use fabkit_netns::testbed;

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
use ipoib_eval::report::row;
use ipoib_eval::run::{run_client, ClientOpts, RunError, Server, ServerOpts};
use ipoib_eval::spec::{self, Amount, Direction, Proto, RecvPath, SendPath, SpecError, TestSpec};

/// Measure what bounds IP over a fabric: Gbit/s, messages/s, wire packets/s
/// and CPU cycles per message, for every send path (send, scatter-gather,
/// sendmmsg, UDP GSO/GRO, MSG_ZEROCOPY) and TCP request/response.
#[derive(Parser, Debug)]
#[command(name = "ipoib-eval", version, about, long_about = None)]
#[command(after_help = "\
Examples:
  ipoib-eval server                                  on the receiving host
  ipoib-eval client 10.0.0.2 -P 4 -t 10              TCP, 4 streams
  ipoib-eval client 10.0.0.2 -u -b 0 -l 1472 --send gso:16:8 --recv gro
  ipoib-eval client 10.0.0.2 -u -b 0 -l 64 --send mmsg:64 --recv mmsg:64
  ipoib-eval client 10.0.0.2 --rr -l 64 -t 5         TCP_RR-style latency
  ipoib-eval client fe80::1%ib0 --dev ib0 -J > run.json

Units: a message is one -l payload (a UDP datagram as the receiving
application sees it, each GSO or GRO segment once; for TCP, bytes / -l).
Wire packets come from the interface counters of both ends.")]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand, Debug)]
enum Cmd {
    /// Serve tests (several clients at once) until killed.
    Server(ServerArgs),
    /// Run one test against a server and report.
    Client(Box<ClientArgs>),
    /// Several hosts on one machine: network namespaces joined by veth pairs
    /// (optionally through a gateway between two MTU domains).
    Testbed {
        #[command(subcommand)]
        cmd: TestbedCmd,
    },
    /// Run every combination of a sweep file's axes on testbeds of their
    /// own, appending a CSV row per run (resumes: runs already in the file
    /// are skipped).
    Sweep {
        /// The sweep file (TOML; see the README).
        file: PathBuf,
        /// The CSV to append to.
        #[arg(short, long)]
        output: PathBuf,
        /// List the runs and the time estimate, run nothing.
        #[arg(long)]
        dry_run: bool,
        /// Where the summary and charts go (default: beside the CSV, in a
        /// directory named after it).
        #[arg(long, value_name = "DIR")]
        plots: Option<PathBuf>,
        /// Run over this interface instead of testbeds: its settings are
        /// recorded, set per point and restored at the end (needs --peer).
        #[arg(long, value_name = "IFACE", requires = "peer")]
        iface: Option<String>,
        /// The peer's address on --iface; it runs
        /// `ipoib-eval server --sweep-iface IFACE`.
        #[arg(long, value_name = "ADDR", requires = "iface")]
        peer: Option<String>,
        /// The peer server's control port.
        #[arg(short, long, default_value_t = ipoib_eval::DEFAULT_PORT)]
        port: u16,
    },
    /// Put back interface settings a sweep or server recorded and could not
    /// restore (it crashed or was killed): every record of this network
    /// namespace, or IFACE's.
    /// (In a named namespace: `ip netns exec NS ipoib-eval restore`, which
    /// also shows that namespace's /sys.)
    Restore {
        /// Only this interface.
        iface: Option<String>,
    },
    /// Summarise a sweep CSV: medians and ranges per point (summary.json)
    /// and SVG charts per experiment.
    Summary {
        /// The sweep's CSV.
        csv: PathBuf,
        /// Output directory (default: beside the CSV, named after it).
        #[arg(short, long, value_name = "DIR")]
        output: Option<PathBuf>,
    },
}

#[derive(Subcommand, Debug)]
enum TestbedCmd {
    /// Build a testbed (replacing a stale one of the same name) and leave it up.
    Up(TestbedArgs),
    /// Remove a testbed; nothing to remove is not an error.
    Down {
        /// Testbed name.
        #[arg(long, default_value = "ipoib")]
        name: String,
    },
    /// List the namespaces of a testbed that exist (exit 1 if none).
    Status {
        /// Testbed name.
        #[arg(long, default_value = "ipoib")]
        name: String,
    },
}

#[derive(Args, Debug)]
struct TestbedArgs {
    /// Name: namespaces are NAME-a and NAME-b (and NAME-g with --gateway).
    #[arg(long, default_value = "ipoib")]
    name: String,
    /// TX and RX queues per veth.
    #[arg(long, default_value_t = 4)]
    queues: u16,
    /// MTU (of the a-side link with --gateway).
    #[arg(long, default_value_t = 1500)]
    mtu: u32,
    /// Route through a third namespace between two MTU domains.
    #[arg(long)]
    gateway: bool,
    /// MTU of the b-side link behind the gateway.
    #[arg(long, default_value_t = 1500)]
    mtu_b: u32,
    /// Offload setting for every veth, FEATURE=on|off (ethtool -K); repeat.
    #[arg(long, value_name = "FEATURE=on|off")]
    offload: Vec<String>,
    /// Root qdisc of every veth (noqueue, pfifo_fast, fq, ...).
    #[arg(long)]
    qdisc: Option<String>,
    /// txqueuelen of every veth.
    #[arg(long)]
    txqueuelen: Option<u32>,
    /// Keep IPv6 on (off by default: ND/MLD chatter spoils packet counts).
    #[arg(long)]
    ipv6: bool,
    /// Give each host a management link to the root namespace (`mg`,
    /// 10.78.0.0/16, default route), for launchers such as mpirun.
    #[arg(long)]
    mgmt: bool,
}

#[derive(Args, Debug)]
struct ServerArgs {
    /// Control port.
    #[arg(short, long, default_value_t = ipoib_eval::DEFAULT_PORT)]
    port: u16,
    /// Listen on this address only.
    #[arg(short = 'B', long)]
    bind: Option<IpAddr>,
    /// Bind to this interface (SO_BINDTODEVICE), e.g. ib0.
    #[arg(long)]
    dev: Option<String>,
    /// Serve one test, then exit with its result.
    #[arg(short = '1', long)]
    one_off: bool,
    /// Tests served at once at most.
    #[arg(long, default_value_t = 16)]
    max_sessions: usize,
    /// Seconds a new connection may take to say what it wants.
    #[arg(long, default_value_t = 10.0)]
    idle_timeout: f64,
    /// Run inside this network namespace (e.g. a testbed's NAME-b).
    #[arg(long)]
    netns: Option<String>,
    /// No line per test (the "listening" line is still printed).
    #[arg(short, long)]
    quiet: bool,
    /// Let sweeps set this interface (queues, MTU, offloads, qdisc, XPS,
    /// txqueuelen): recorded before the first change, restored when the
    /// server ends (also on Ctrl-C; after a crash: `ipoib-eval restore`).
    #[arg(long, value_name = "IFACE")]
    sweep_iface: Option<String>,
}

#[derive(Args, Debug)]
struct ClientArgs {
    /// Server host name or address.
    host: String,
    /// Server control port.
    #[arg(short, long, default_value_t = ipoib_eval::DEFAULT_PORT)]
    port: u16,
    /// UDP instead of TCP.
    #[arg(short, long)]
    udp: bool,
    /// Seconds to send for (default 10).
    #[arg(short = 't', long, conflicts_with = "count")]
    time: Option<f64>,
    /// Messages to send per stream, instead of a time.
    #[arg(short = 'k', long = "count")]
    count: Option<u64>,
    /// Parallel streams (per direction).
    #[arg(short = 'P', long, default_value_t = 1)]
    parallel: u16,
    /// Message length in bytes, with K/M suffixes (default TCP 128K, UDP 1472).
    #[arg(short, long)]
    len: Option<String>,
    /// Target rate per stream, bits/s with k/M/G/T (0: unlimited; UDP default 1M, as iperf3).
    #[arg(short, long)]
    bitrate: Option<String>,
    /// The server sends.
    #[arg(short = 'R', long, conflicts_with = "bidir")]
    reverse: bool,
    /// Both send, on streams of their own.
    #[arg(long)]
    bidir: bool,
    /// Send path: send, sg:IOVECS, mmsg:BATCH, gso:SEGMENTS[:BATCH], zerocopy.
    #[arg(long, default_value = "send")]
    send: String,
    /// Receive path: recv, mmsg:BATCH, gro, gro:BATCH.
    #[arg(long, default_value = "recv")]
    recv: String,
    /// Socket buffer size on both ends, bytes with K/M suffixes.
    #[arg(short = 'w', long)]
    window: Option<String>,
    /// TCP_NODELAY.
    #[arg(short = 'N', long)]
    nodelay: bool,
    /// TCP request/response: -l bytes each way, one in flight per stream.
    #[arg(long)]
    rr: bool,
    /// Seconds between interval reports (0: none).
    #[arg(short, long, default_value_t = 1.0)]
    interval: f64,
    /// Print the JSON report to stdout instead of text.
    #[arg(short = 'J', long)]
    json: bool,
    /// Also write the JSON report to FILE.
    #[arg(long, value_name = "FILE")]
    json_file: Option<PathBuf>,
    /// Append one CSV row per direction to FILE (header if new).
    #[arg(long, value_name = "FILE")]
    csv: Option<PathBuf>,
    /// Local address to bind.
    #[arg(short = 'B', long)]
    bind: Option<IpAddr>,
    /// Bind to this interface (SO_BINDTODEVICE), e.g. ib0.
    #[arg(long)]
    dev: Option<String>,
    /// IPv4 only.
    #[arg(short = '4', long = "ipv4", conflicts_with = "v6")]
    v4: bool,
    /// IPv6 only.
    #[arg(short = '6', long = "ipv6")]
    v6: bool,
    /// Pin the client's stream threads to these CPUs, round-robin (0,2-3).
    #[arg(long)]
    cpus: Option<String>,
    /// Pin the server's stream threads likewise.
    #[arg(long)]
    server_cpus: Option<String>,
    /// UDP with the `send` path: unconnected sockets and sendto(2), so no
    /// TX queue is cached per socket (a tc program's queue choice holds per
    /// packet).
    #[arg(long)]
    unconnected: bool,
    /// Seconds any one wait on the peer may take.
    #[arg(long, default_value_t = 10.0)]
    timeout: f64,
    /// Run inside this network namespace (e.g. a testbed's NAME-a).
    #[arg(long)]
    netns: Option<String>,
}

impl ClientArgs {
    fn spec(&self) -> Result<TestSpec, SpecError> {
        let proto = if self.udp { Proto::Udp } else { Proto::Tcp };
        let len = match &self.len {
            Some(l) => spec::parse_bytes("-l", l)?,
            None if self.udp => 1472,
            None if self.rr => 1,
            None => 128 * 1024,
        };
        let rate_bps = match &self.bitrate {
            Some(b) => spec::parse_rate(b)?,
            None if self.udp => 1e6,
            None => 0.0,
        };
        let amount = match (self.time, self.count) {
            (_, Some(k)) => Amount::Messages(k),
            (Some(t), None) => Amount::Seconds(t),
            (None, None) => Amount::Seconds(10.0),
        };
        let cpus = |s: &Option<String>| {
            s.as_deref()
                .map(|c| spec::parse_cpus("--server-cpus", c))
                .transpose()
                .map(Option::unwrap_or_default)
        };
        let s = TestSpec {
            proto,
            len,
            streams: self.parallel,
            direction: if self.reverse {
                Direction::Reverse
            } else if self.bidir {
                Direction::Bidir
            } else {
                Direction::Forward
            },
            amount,
            rate_bps,
            send: self.send.parse::<SendPath>()?,
            recv: self.recv.parse::<RecvPath>()?,
            window: self
                .window
                .as_deref()
                .map(|w| spec::parse_bytes("-w", w))
                .transpose()?,
            nodelay: self.nodelay,
            rr: self.rr,
            interval: self.interval,
            server_cpus: cpus(&self.server_cpus)?,
            timeout: self.timeout,
        };
        s.validate()?;
        if self.unconnected
            && (s.proto != Proto::Udp
                || s.send != SendPath::Send
                || s.direction != Direction::Forward)
        {
            return Err(SpecError(
                "--unconnected is for the client's UDP sends with the path `send`: add -u, \
                 drop --send, -R and --bidir"
                    .into(),
            ));
        }
        Ok(s)
    }
}

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

fn client(a: &ClientArgs) -> Result<(), RunError> {
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
        host: a.host.clone(),
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
            a.host,
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

fn server(a: &ServerArgs) -> Result<(), RunError> {
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

fn testbed_cmd(cmd: &TestbedCmd) -> Result<(), RunError> {
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

fn summary(csv: &std::path::Path, dir: Option<&std::path::Path>) -> Result<(), RunError> {
    let dir = dir.map_or_else(|| plots_dir(csv), PathBuf::from);
    let text = std::fs::read_to_string(csv)
        .map_err(|e| RunError::Usage(SpecError(format!("cannot read {}: {e}", csv.display()))))?;
    let groups = ipoib_eval::summary::summarize(&text)?;
    let files = ipoib_eval::summary::write(csv, &groups, &dir).map_err(RunError::Failed)?;
    out!("{} files in {}", files.len(), dir.display());
    Ok(())
}

fn sweep(
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

fn restore(iface: Option<&str>) -> Result<(), RunError> {
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
