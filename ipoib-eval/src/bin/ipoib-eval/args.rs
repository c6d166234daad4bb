//! The flags, as clap reads them, and the test they describe.

use std::net::IpAddr;
use std::path::PathBuf;

use clap::{Args, Parser, Subcommand};
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
Wire packets come from the interface counters of both ends.
Exit status: 0 done, 1 a failed run, 2 a usage error; one line on stderr says why.")]
pub(crate) struct Cli {
    #[command(subcommand)]
    pub(crate) cmd: Cmd,
}

#[derive(Subcommand, Debug)]
pub(crate) enum Cmd {
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
        /// The sweep file (TOML; see docs/ipoib-eval.md).
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
    /// Write ipoib-eval's man pages and shell completions (the
    /// repository's man/) into DIR/man1 and DIR/completions.
    #[command(hide = true, name = "generate-docs")]
    GenerateDocs {
        /// The folder to write into (made if missing).
        #[arg(long, value_name = "DIR")]
        out: PathBuf,
    },
}

#[derive(Subcommand, Debug)]
pub(crate) enum TestbedCmd {
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
pub(crate) struct TestbedArgs {
    /// Name: namespaces are NAME-a and NAME-b (and NAME-g with --gateway).
    #[arg(long, default_value = "ipoib")]
    pub(crate) name: String,
    /// TX and RX queues per veth.
    #[arg(long, default_value_t = 4)]
    pub(crate) queues: u16,
    /// MTU (of the a-side link with --gateway).
    #[arg(long, default_value_t = 1500)]
    pub(crate) mtu: u32,
    /// Route through a third namespace between two MTU domains.
    #[arg(long)]
    pub(crate) gateway: bool,
    /// MTU of the b-side link behind the gateway.
    #[arg(long, default_value_t = 1500)]
    pub(crate) mtu_b: u32,
    /// Offload setting for every veth, FEATURE=on|off (ethtool -K); repeat.
    #[arg(long, value_name = "FEATURE=on|off")]
    pub(crate) offload: Vec<String>,
    /// Root qdisc of every veth (noqueue, pfifo_fast, fq, ...).
    #[arg(long)]
    pub(crate) qdisc: Option<String>,
    /// txqueuelen of every veth.
    #[arg(long)]
    pub(crate) txqueuelen: Option<u32>,
    /// Keep IPv6 on (off by default: ND/MLD chatter spoils packet counts).
    #[arg(long)]
    pub(crate) ipv6: bool,
    /// Give each host a management link to the root namespace (`mg`,
    /// 10.78.0.0/16, default route), for launchers such as mpirun.
    #[arg(long)]
    pub(crate) mgmt: bool,
    /// A third host (`NAME-x`, 10.77.3.2) behind the gateway on a link of
    /// its own: it reaches both hosts but sees none of their traffic
    /// (`fabkit intrude` runs there). Needs --gateway.
    #[arg(long, requires = "gateway")]
    pub(crate) outsider: bool,
}

impl ClientArgs {
    /// The server's host, however it was given.
    pub(crate) fn host(&self) -> &str {
        self.host
            .as_deref()
            .or(self.client.as_deref())
            .expect("clap requires one")
    }
}

#[derive(Args, Debug)]
pub(crate) struct ServerArgs {
    /// Control port.
    #[arg(short, long, default_value_t = ipoib_eval::DEFAULT_PORT)]
    pub(crate) port: u16,
    /// Listen on this address only.
    #[arg(short = 'B', long)]
    pub(crate) bind: Option<IpAddr>,
    /// Bind to this interface (SO_BINDTODEVICE), e.g. ib0.
    #[arg(long)]
    pub(crate) dev: Option<String>,
    /// Serve one test, then exit with its result.
    #[arg(short = '1', long)]
    pub(crate) one_off: bool,
    /// Tests served at once at most.
    #[arg(long, default_value_t = 16)]
    pub(crate) max_sessions: usize,
    /// Seconds a new connection may take to say what it wants.
    #[arg(long, default_value_t = 10.0)]
    pub(crate) idle_timeout: f64,
    /// Run inside this network namespace (e.g. a testbed's NAME-b).
    #[arg(long)]
    pub(crate) netns: Option<String>,
    /// No line per test (the "listening" line is still printed).
    #[arg(short, long)]
    pub(crate) quiet: bool,
    /// Let sweeps set this interface (queues, MTU, offloads, qdisc, XPS,
    /// txqueuelen): recorded before the first change, restored when the
    /// server ends (also on Ctrl-C; after a crash: `ipoib-eval restore`).
    #[arg(long, value_name = "IFACE")]
    pub(crate) sweep_iface: Option<String>,
}

#[derive(Args, Debug)]
pub(crate) struct ClientArgs {
    /// Server host name or address.
    #[arg(required_unless_present = "client", conflicts_with = "client")]
    host: Option<String>,
    /// Server host, as iperf3 spells it: `-c HOST` is `HOST`.
    #[arg(short = 'c', long = "client", value_name = "HOST")]
    client: Option<String>,
    /// Server control port.
    #[arg(short, long, default_value_t = ipoib_eval::DEFAULT_PORT)]
    pub(crate) port: u16,
    /// UDP instead of TCP.
    #[arg(short, long)]
    pub(crate) udp: bool,
    /// Seconds to send for (default 10).
    #[arg(short = 't', long, conflicts_with = "count")]
    pub(crate) time: Option<f64>,
    /// Messages to send per stream, instead of a time.
    #[arg(short = 'k', long = "count")]
    pub(crate) count: Option<u64>,
    /// Parallel streams (per direction).
    #[arg(short = 'P', long, default_value_t = 1)]
    pub(crate) parallel: u16,
    /// Message length in bytes, with K/M suffixes (default TCP 128K, UDP 1472).
    #[arg(short, long)]
    pub(crate) len: Option<String>,
    /// Target rate per stream, bits/s with k/M/G/T (0: unlimited; UDP default 1M, as iperf3).
    #[arg(short, long)]
    pub(crate) bitrate: Option<String>,
    /// The server sends.
    #[arg(short = 'R', long, conflicts_with = "bidir")]
    pub(crate) reverse: bool,
    /// Both send, on streams of their own.
    #[arg(long)]
    pub(crate) bidir: bool,
    /// Send path: send, sg:IOVECS, mmsg:BATCH, gso:SEGMENTS[:BATCH], zerocopy.
    #[arg(long, default_value = "send")]
    pub(crate) send: String,
    /// Receive path: recv, mmsg:BATCH, gro, gro:BATCH.
    #[arg(long, default_value = "recv")]
    pub(crate) recv: String,
    /// Socket buffer size on both ends, bytes with K/M suffixes.
    #[arg(short = 'w', long)]
    pub(crate) window: Option<String>,
    /// TCP_NODELAY.
    #[arg(short = 'N', long)]
    pub(crate) nodelay: bool,
    /// TCP request/response: -l bytes each way, one in flight per stream.
    #[arg(long)]
    pub(crate) rr: bool,
    /// Seconds between interval reports (0: none).
    #[arg(short, long, default_value_t = 1.0)]
    pub(crate) interval: f64,
    /// Print the JSON report to stdout instead of text.
    #[arg(short = 'J', long)]
    pub(crate) json: bool,
    /// Also write the JSON report to FILE.
    #[arg(long, value_name = "FILE")]
    pub(crate) json_file: Option<PathBuf>,
    /// Append one CSV row per direction to FILE (header if new).
    #[arg(long, value_name = "FILE")]
    pub(crate) csv: Option<PathBuf>,
    /// Local address to bind.
    #[arg(short = 'B', long)]
    pub(crate) bind: Option<IpAddr>,
    /// Bind to this interface (SO_BINDTODEVICE), e.g. ib0.
    #[arg(long)]
    pub(crate) dev: Option<String>,
    /// IPv4 only.
    #[arg(short = '4', long = "ipv4", conflicts_with = "v6")]
    pub(crate) v4: bool,
    /// IPv6 only.
    #[arg(short = '6', long = "ipv6")]
    pub(crate) v6: bool,
    /// Pin the client's stream threads to these CPUs, round-robin (0,2-3).
    #[arg(long)]
    pub(crate) cpus: Option<String>,
    /// Pin the server's stream threads likewise.
    #[arg(long)]
    pub(crate) server_cpus: Option<String>,
    /// UDP with the `send` path: unconnected sockets and sendto(2), so no
    /// TX queue is cached per socket (a tc program's queue choice holds per
    /// packet).
    #[arg(long)]
    pub(crate) unconnected: bool,
    /// Seconds any one wait on the peer may take.
    #[arg(long, default_value_t = 10.0)]
    pub(crate) timeout: f64,
    /// Run inside this network namespace (e.g. a testbed's NAME-a).
    #[arg(long)]
    pub(crate) netns: Option<String>,
}

impl ClientArgs {
    pub(crate) fn spec(&self) -> Result<TestSpec, SpecError> {
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
