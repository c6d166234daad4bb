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

use std::collections::HashSet;
use std::fmt::Write as _;
use std::io::Write as _;
use std::net::IpAddr;
use std::time::{Duration, Instant};

use serde::Deserialize;

use crate::report::csv_field;
use crate::run::{run_client, ClientOpts, RunError, Server, ServerOpts};
use crate::spec::{self, Proto, RecvPath, SendPath, SpecError};
use fabkit_netns::testbed::{self, Testbed, TestbedSpec};

/// At most this many runs in one sweep (a typo in an axis should not
/// schedule a year of measurements).
pub const MAX_RUNS: usize = 100_000;

/// How packets are spread over the TX queues.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Policy {
    /// The kernel's flow hash (XPS cleared).
    Hash,
    /// Per CPU (XPS: CPU `c` sends on queue `c mod queues`).
    Xps,
    /// Round-robin, packet by packet (XPS cleared, a tc egress program
    /// chooses; the client's UDP `send` path unconnected, see
    /// [`fabkit_ebpf::RoundRobin`]).
    Rr,
}

impl std::str::FromStr for Policy {
    type Err = SpecError;
    fn from_str(s: &str) -> Result<Self, SpecError> {
        match s {
            "hash" => Ok(Policy::Hash),
            "xps" => Ok(Policy::Xps),
            "rr" => Ok(Policy::Rr),
            other => Err(SpecError(format!(
                "policy `{other}`: use hash (the kernel's flow hash), xps (per CPU) or rr \
                 (round-robin)"
            ))),
        }
    }
}

impl std::fmt::Display for Policy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Policy::Hash => "hash",
            Policy::Xps => "xps",
            Policy::Rr => "rr",
        })
    }
}

fn one<T: Clone>(v: T) -> Vec<T> {
    vec![v]
}

/// The axes as written in the file; every entry is one value to try.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Axes {
    /// TX and RX queues per veth.
    #[serde(default = "Axes::queues")]
    pub queues: Vec<u16>,
    /// Queue-selection policies.
    #[serde(default = "Axes::policy")]
    pub policy: Vec<String>,
    /// MTUs.
    #[serde(default = "Axes::mtu")]
    pub mtu: Vec<u32>,
    /// Offload sets: `default` or `FEATURE=on|off,...` (ethtool -K).
    #[serde(default = "Axes::default_str")]
    pub offloads: Vec<String>,
    /// Root qdiscs: `default` (the kernel's) or a name.
    #[serde(default = "Axes::default_str")]
    pub qdisc: Vec<String>,
    /// `txqueuelen` values.
    #[serde(default = "Axes::txqueuelen")]
    pub txqueuelen: Vec<u32>,
    /// `tcp`, `udp`.
    #[serde(default = "Axes::proto")]
    pub proto: Vec<String>,
    /// Message sizes (`default`: 128K for TCP, 1472 for UDP).
    #[serde(default = "Axes::default_str")]
    pub len: Vec<String>,
    /// Send paths (`send`, `sg:N`, `mmsg:B`, `gso:S[:B]`, `zerocopy`).
    #[serde(default = "Axes::send")]
    pub send: Vec<String>,
    /// Receive paths (`recv`, `recvmmsg`, `gro`, ...).
    #[serde(default = "Axes::recv")]
    pub recv: Vec<String>,
    /// Parallel streams.
    #[serde(default = "Axes::streams")]
    pub streams: Vec<u16>,
    /// Target rates in bit/s (`0`: unlimited).
    #[serde(default = "Axes::rate")]
    pub rate: Vec<String>,
    /// CPU placement: `any`, or `CLIENT:SERVER` CPU lists (`0:1`, `0-1:0`)
    /// the stream threads are pinned to.
    #[serde(default = "Axes::cpus")]
    pub cpus: Vec<String>,
    /// `none` (one link), or the MTU of a second link behind a gateway
    /// namespace (the first link has `mtu`): traffic routed between two
    /// MTU domains.
    #[serde(default = "Axes::gateway")]
    pub gateway: Vec<String>,
    /// `forward` (the client, host a, sends) or `reverse` (host b sends).
    #[serde(default = "Axes::direction")]
    pub direction: Vec<String>,
}

impl Axes {
    fn queues() -> Vec<u16> {
        one(4)
    }
    fn policy() -> Vec<String> {
        one("hash".into())
    }
    fn mtu() -> Vec<u32> {
        one(1500)
    }
    fn default_str() -> Vec<String> {
        one("default".into())
    }
    fn txqueuelen() -> Vec<u32> {
        one(1000)
    }
    fn proto() -> Vec<String> {
        one("tcp".into())
    }
    fn send() -> Vec<String> {
        one("send".into())
    }
    fn recv() -> Vec<String> {
        one("recv".into())
    }
    fn streams() -> Vec<u16> {
        one(1)
    }
    fn rate() -> Vec<String> {
        one("0".into())
    }
    fn cpus() -> Vec<String> {
        one("any".into())
    }
    fn gateway() -> Vec<String> {
        one("none".into())
    }
    fn direction() -> Vec<String> {
        one("forward".into())
    }
}

impl Default for Axes {
    fn default() -> Self {
        Axes {
            queues: Axes::queues(),
            policy: Axes::policy(),
            mtu: Axes::mtu(),
            offloads: Axes::default_str(),
            qdisc: Axes::default_str(),
            txqueuelen: Axes::txqueuelen(),
            proto: Axes::proto(),
            len: Axes::default_str(),
            send: Axes::send(),
            recv: Axes::recv(),
            streams: Axes::streams(),
            rate: Axes::rate(),
            cpus: Axes::cpus(),
            gateway: Axes::gateway(),
            direction: Axes::direction(),
        }
    }
}

/// A sweep file.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SweepFile {
    /// Seconds per run.
    #[serde(default = "SweepFile::seconds")]
    pub seconds: f64,
    /// Runs per point.
    #[serde(default = "SweepFile::repetitions")]
    pub repetitions: u32,
    /// Run the points in a seeded random order (drifts of the machine
    /// spread over every axis instead of following one).
    #[serde(default)]
    pub shuffle: bool,
    /// Seed of the order.
    #[serde(default)]
    pub seed: u64,
    /// The axes every experiment starts from (see [`Axes`]).
    #[serde(default)]
    pub axes: toml::Table,
    /// Experiments: each a `name` and the axes it sets over `[axes]`. A
    /// file without any is one experiment, `main`, of `[axes]`.
    #[serde(default)]
    pub experiment: Vec<toml::Table>,
}

impl SweepFile {
    fn seconds() -> f64 {
        3.0
    }
    fn repetitions() -> u32 {
        1
    }

    /// Reads a sweep file; the error names the file and what is wrong.
    pub fn parse(text: &str) -> Result<SweepFile, SpecError> {
        toml::from_str(text).map_err(|e| {
            SpecError(format!(
                "sweep file: {}",
                e.to_string().lines().collect::<Vec<_>>().join(" ")
            ))
        })
    }
}

/// One combination of settings, run `repetitions` times.
#[derive(Clone, Debug, PartialEq)]
pub struct Point {
    /// The experiment it belongs to.
    pub experiment: String,
    /// CPU placement as written (`any`, `0:1`).
    pub cpus: String,
    /// CPUs the client's stream threads are pinned to (the server's are in
    /// `test.server_cpus`).
    pub client_cpus: Vec<usize>,
    /// MTU of the far link behind a gateway (`None`: one direct link).
    pub gateway: Option<u32>,
    /// Queues per veth.
    pub queues: u16,
    /// Queue-selection policy.
    pub policy: Policy,
    /// MTU.
    pub mtu: u32,
    /// Offload settings (empty: the kernel's).
    pub offloads: Vec<(String, bool)>,
    /// Root qdisc (`None`: the kernel's).
    pub qdisc: Option<String>,
    /// txqueuelen.
    pub txqueuelen: u32,
    /// The test: protocol, size, paths, streams, rate, duration.
    pub test: spec::TestSpec,
    /// Which repetition (0-based).
    pub rep: u32,
    /// iperf3 measures this point, not our client and server (send path
    /// `iperf3`; `test.send` and `test.recv` are then unused).
    pub iperf3: bool,
    /// The real interface and peer it runs over (`IFACE>PEER`); `None`: a
    /// testbed. Part of the key, so a resume never mixes the two.
    pub on: Option<String>,
}

impl Point {
    /// Whether the client sends UDP on unconnected sockets (round-robin's
    /// need: such sockets cache no TX queue; each datagram also looks its
    /// route up).
    pub fn unconnected(&self) -> bool {
        self.policy == Policy::Rr && self.test.proto == Proto::Udp
    }

    /// The send path as the sweep file names it.
    pub fn send_str(&self) -> String {
        if self.iperf3 {
            IPERF3.into()
        } else {
            self.test.send.to_string()
        }
    }

    /// The receive path as the sweep file names it.
    pub fn recv_str(&self) -> String {
        if self.iperf3 {
            IPERF3.into()
        } else {
            self.test.recv.to_string()
        }
    }

    /// The point's name: every setting, in a fixed order (the resume key).
    pub fn key(&self) -> String {
        let t = &self.test;
        let mut k = format!(
            "exp={} q={} policy={} mtu={} gw={} offloads={} qdisc={} txqlen={} proto={} len={} \
             send={} recv={} streams={} rate={} cpus={} dir={} rep={}",
            self.experiment,
            self.queues,
            self.policy,
            self.mtu,
            gateway_str(self.gateway),
            offload_str(&self.offloads),
            self.qdisc.as_deref().unwrap_or("default"),
            self.txqueuelen,
            format!("{:?}", t.proto).to_lowercase(),
            t.len,
            self.send_str(),
            self.recv_str(),
            t.streams,
            t.rate_bps,
            self.cpus,
            direction_str(t.direction),
            self.rep
        );
        if let spec::Amount::Seconds(s) = t.amount {
            let _ = write!(k, " seconds={s}");
        }
        if let Some(on) = &self.on {
            let _ = write!(k, " on={on}");
        }
        k
    }
}

/// The send path that runs iperf3 instead of our client and server.
pub const IPERF3: &str = "iperf3";

fn gateway_str(g: Option<u32>) -> String {
    g.map_or("none".into(), |m| m.to_string())
}

fn direction_str(d: spec::Direction) -> &'static str {
    match d {
        spec::Direction::Forward => "forward",
        spec::Direction::Reverse => "reverse",
        spec::Direction::Bidir => "bidir",
    }
}

fn offload_str(o: &[(String, bool)]) -> String {
    if o.is_empty() {
        return "default".into();
    }
    o.iter()
        .map(|(f, on)| format!("{f}={}", if *on { "on" } else { "off" }))
        .collect::<Vec<_>>()
        .join(";")
}

/// An ethtool feature name: lower-case letters, digits and `-`.
fn feature_name(f: &str) -> bool {
    !f.is_empty()
        && f.chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
}

/// Parses `default` or `FEATURE=on|off,...`.
pub fn parse_offloads(s: &str) -> Result<Vec<(String, bool)>, SpecError> {
    if s == "default" {
        return Ok(Vec::new());
    }
    s.split(',')
        .map(|kv| match kv.trim().split_once('=') {
            Some((f, "on")) if feature_name(f) => Ok((f.to_string(), true)),
            Some((f, "off")) if feature_name(f) => Ok((f.to_string(), false)),
            _ => Err(SpecError(format!(
                "offloads `{s}`: give `default` or FEATURE=on|off,... such as tso=off,gro=on"
            ))),
        })
        .collect()
}

fn nonempty(name: &str, len: usize) -> Result<(), SpecError> {
    if len == 0 {
        Err(SpecError(format!(
            "axis {name} is empty: give at least one value, or leave it out for its default"
        )))
    } else {
        Ok(())
    }
}

/// A deterministic shuffle (xorshift64*; no dependency, same order for the
/// same seed on every machine).
fn shuffle<T>(v: &mut [T], seed: u64) {
    let mut x = seed ^ 0x9E37_79B9_7F4A_7C15;
    let mut next = || {
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        x.wrapping_mul(0x2545_F491_4F6C_DD1D)
    };
    for i in (1..v.len()).rev() {
        let j = (next() % (i as u64 + 1)) as usize;
        v.swap(i, j);
    }
}

/// Parses a `CLIENT:SERVER` CPU placement (`any`: not pinned).
fn parse_placement(s: &str) -> Result<(Vec<usize>, Vec<usize>), SpecError> {
    if s == "any" {
        return Ok((Vec::new(), Vec::new()));
    }
    let Some((c, sv)) = s.split_once(':') else {
        return Err(SpecError(format!(
            "cpus `{s}`: give `any` or CLIENT:SERVER CPU lists such as 0:1 or 0-1:0"
        )));
    };
    let (c, sv) = (
        spec::parse_cpus("cpus (client)", c)?,
        spec::parse_cpus("cpus (server)", sv)?,
    );
    let n = std::thread::available_parallelism().map_or(1, |n| n.get());
    if let Some(bad) = c.iter().chain(&sv).find(|&&x| x >= n) {
        return Err(SpecError(format!(
            "cpus `{s}` names CPU {bad}, but this machine has {n} (0-{})",
            n - 1
        )));
    }
    Ok((c, sv))
}

impl SweepFile {
    /// The experiments: each name with its axes (`[axes]` with the
    /// experiment's own entries over them).
    pub fn experiments(&self) -> Result<Vec<(String, Axes)>, SpecError> {
        let axes = |name: &str, t: toml::Table| {
            toml::Value::Table(t).try_into::<Axes>().map_err(|e| {
                SpecError(format!(
                    "experiment {name}: {}",
                    e.to_string().lines().collect::<Vec<_>>().join(" ")
                ))
            })
        };
        if self.experiment.is_empty() {
            let a = axes("main", self.axes.clone())
                .map_err(|e| SpecError(e.0.replacen("experiment main", "[axes]", 1)))?;
            return Ok(vec![("main".into(), a)]);
        }
        let mut out: Vec<(String, Axes)> = Vec::new();
        for (i, e) in self.experiment.iter().enumerate() {
            let mut t = e.clone();
            let name = match t.remove("name") {
                Some(toml::Value::String(n)) if crate::summary::valid_experiment(&n) => n,
                _ => {
                    return Err(SpecError(format!(
                        "experiment {}: give it a name of letters, digits, - _ or . \
                         (name = \"queues\")",
                        i + 1
                    )))
                }
            };
            if out.iter().any(|(n, _)| *n == name) {
                return Err(SpecError(format!(
                    "experiment {name} is named twice: names must differ"
                )));
            }
            let mut merged = self.axes.clone();
            merged.extend(t);
            let a = axes(&name, merged)?;
            out.push((name, a));
        }
        Ok(out)
    }

    /// The axes experiment `name` names itself or takes from `[axes]` (the
    /// others are at their defaults).
    pub fn given_axes(&self, name: &str) -> HashSet<String> {
        let mut keys: HashSet<String> = self.axes.keys().cloned().collect();
        for e in &self.experiment {
            if e.get("name").and_then(|n| n.as_str()) == Some(name) {
                keys.extend(e.keys().cloned());
            }
        }
        keys
    }

    /// Every run of the sweep, in the order it will run; each value is
    /// checked (the error names the axis and the value).
    pub fn expand(&self) -> Result<Vec<Point>, SpecError> {
        if !(self.seconds > 0.0 && self.seconds <= 3600.0) {
            let got = if self.seconds.abs() < 1e9 {
                self.seconds.to_string()
            } else {
                format!("{:e}", self.seconds)
            };
            return Err(SpecError(format!(
                "seconds must be more than 0 and at most 3600, got {got}"
            )));
        }
        if self.repetitions == 0 || self.repetitions > 1000 {
            return Err(SpecError(format!(
                "repetitions must be 1 to 1000, got {}",
                self.repetitions
            )));
        }
        let mut out = Vec::new();
        for (name, axes) in self.experiments()? {
            let points = self
                .expand_axes(&name, &axes, MAX_RUNS.saturating_sub(out.len()))
                .map_err(|e| {
                    if self.experiment.is_empty() {
                        e
                    } else {
                        SpecError(format!("experiment {name}: {}", e.0))
                    }
                })?;
            out.extend(points);
        }
        if self.shuffle {
            shuffle(&mut out, self.seed);
        }
        Ok(out)
    }

    /// The runs of one experiment, at most `room` of them.
    fn expand_axes(&self, name: &str, a: &Axes, room: usize) -> Result<Vec<Point>, SpecError> {
        // Every axis with its length, checked and multiplied once.
        let lens = [
            ("queues", a.queues.len()),
            ("policy", a.policy.len()),
            ("mtu", a.mtu.len()),
            ("offloads", a.offloads.len()),
            ("qdisc", a.qdisc.len()),
            ("txqueuelen", a.txqueuelen.len()),
            ("proto", a.proto.len()),
            ("len", a.len.len()),
            ("send", a.send.len()),
            ("recv", a.recv.len()),
            ("streams", a.streams.len()),
            ("rate", a.rate.len()),
            ("cpus", a.cpus.len()),
            ("gateway", a.gateway.len()),
            ("direction", a.direction.len()),
        ];
        for (name, n) in lens {
            nonempty(name, n)?;
        }
        let runs = lens
            .iter()
            .map(|(_, n)| *n)
            .chain([self.repetitions as usize])
            .try_fold(1usize, |n, k| n.checked_mul(k).filter(|&n| n <= room));
        let Some(_) = runs else {
            return Err(SpecError(format!(
                "the sweep has more than {MAX_RUNS} runs: trim an axis"
            )));
        };
        for q in &a.qdisc {
            if q.is_empty() || !q.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') {
                return Err(SpecError(format!(
                    "qdisc `{}`: give default or a qdisc name such as pfifo_fast",
                    q.escape_default()
                )));
            }
        }
        for c in &a.cpus {
            if c.chars().any(|ch| ch.is_whitespace() || ch.is_control()) {
                return Err(SpecError(format!(
                    "cpus `{}`: write CPU lists without spaces, such as 0:1",
                    c.escape_default()
                )));
            }
        }
        for &q in &a.queues {
            if q == 0 || q > 64 {
                return Err(SpecError(format!("queues must be 1 to 64, got {q}")));
            }
        }
        for &m in &a.mtu {
            if !(68..=65535).contains(&m) {
                return Err(SpecError(format!("mtu must be 68 to 65535, got {m}")));
            }
        }
        let policies = a
            .policy
            .iter()
            .map(|p| p.parse::<Policy>())
            .collect::<Result<Vec<_>, _>>()?;
        let offloads = a
            .offloads
            .iter()
            .map(|o| parse_offloads(o))
            .collect::<Result<Vec<_>, _>>()?;
        let protos = a
            .proto
            .iter()
            .map(|p| match p.as_str() {
                "tcp" => Ok(Proto::Tcp),
                "udp" => Ok(Proto::Udp),
                other => Err(SpecError(format!("proto `{other}`: use tcp or udp"))),
            })
            .collect::<Result<Vec<_>, _>>()?;
        // `None`: iperf3's own.
        let sends = a
            .send
            .iter()
            .map(|s| match s.as_str() {
                IPERF3 => Ok(None),
                s => s.parse::<SendPath>().map(Some),
            })
            .collect::<Result<Vec<_>, _>>()?;
        if sends.contains(&None) && self.seconds.fract() != 0.0 {
            return Err(SpecError(format!(
                "send iperf3 runs whole seconds: give seconds = {:.0} or so",
                self.seconds.ceil()
            )));
        }
        let recvs = a
            .recv
            .iter()
            .map(|s| s.parse::<RecvPath>())
            .collect::<Result<Vec<_>, _>>()?;
        let rates = a
            .rate
            .iter()
            .map(|r| spec::parse_rate(r))
            .collect::<Result<Vec<_>, _>>()?;
        let gateways = a
            .gateway
            .iter()
            .map(|g| match g.as_str() {
                "none" => Ok(None),
                m => m
                    .parse::<u32>()
                    .ok()
                    .filter(|m| (68..=65535).contains(m))
                    .map(Some)
                    .ok_or_else(|| {
                        SpecError(format!(
                            "gateway `{g}`: give none, or the far link's MTU (68 to 65535)"
                        ))
                    }),
            })
            .collect::<Result<Vec<_>, _>>()?;
        let directions = a
            .direction
            .iter()
            .map(|d| match d.as_str() {
                "forward" => Ok(spec::Direction::Forward),
                "reverse" => Ok(spec::Direction::Reverse),
                other => Err(SpecError(format!(
                    "direction `{other}`: use forward (host a sends) or reverse (host b sends)"
                ))),
            })
            .collect::<Result<Vec<_>, _>>()?;
        let placements = a
            .cpus
            .iter()
            .map(|c| parse_placement(c).map(|p| (c.clone(), p)))
            .collect::<Result<Vec<_>, _>>()?;
        // Every combination, the first axis varying slowest: combination n
        // is n written in the mixed radix of the axes' lengths.
        let dims: Vec<usize> = lens.iter().map(|(_, n)| *n).collect();
        let combos: usize = dims.iter().product();
        let mut out = Vec::new();
        for n in 0..combos {
            let mut ix = vec![0usize; dims.len()];
            let mut rest = n;
            for (slot, d) in ix.iter_mut().zip(&dims).rev() {
                *slot = rest % d;
                rest /= d;
            }
            let [queues, policy, mtu, off, qd, txq, proto, len, send, recv, streams, rate, cpus, gw, dir] =
                ix[..]
            else {
                unreachable!("one index per axis of `lens`")
            };
            let proto = protos[proto];
            let len = match (a.len[len].as_str(), proto) {
                ("default", Proto::Udp) => 1472,
                ("default", Proto::Tcp) => 128 * 1024,
                (l, _) => spec::parse_bytes("len", l)?,
            };
            let (cpus, (client_cpus, server_cpus)) = &placements[cpus];
            let iperf3 = sends[send].is_none();
            if iperf3 && recv > 0 {
                // iperf3 has one receive path: the first recv value stands
                // for all.
                continue;
            }
            let test = spec::TestSpec {
                proto,
                len,
                streams: a.streams[streams],
                amount: spec::Amount::Seconds(self.seconds),
                rate_bps: rates[rate],
                send: sends[send].unwrap_or(SendPath::Send),
                recv: if iperf3 { RecvPath::PLAIN } else { recvs[recv] },
                server_cpus: server_cpus.clone(),
                direction: directions[dir],
                ..spec::TestSpec::default()
            };
            test.validate()?;
            let policy = policies[policy];
            let gateway = gateways[gw];
            if policy != Policy::Hash && gateway.is_some() {
                return Err(SpecError(format!(
                    "policy {policy} with a gateway: the policy is set on the hosts' links, and \
                     the gateway picks the forwarded link's queue itself; use policy hash"
                )));
            }
            if policy == Policy::Rr
                && proto == Proto::Udp
                && (test.send != SendPath::Send || test.direction != spec::Direction::Forward)
            {
                return Err(SpecError(format!(
                    "policy rr with UDP needs send = \"send\" and direction = \"forward\" (only \
                     the client's unconnected sockets take a queue per datagram), got send \
                     {} and direction {}",
                    test.send,
                    direction_str(test.direction)
                )));
            }
            if iperf3 {
                iperf3_fits(&test, client_cpus, policy)?;
            }
            let qd = &a.qdisc[qd];
            for rep in 0..self.repetitions {
                out.push(Point {
                    experiment: name.to_string(),
                    cpus: cpus.clone(),
                    client_cpus: client_cpus.clone(),
                    gateway,
                    queues: a.queues[queues],
                    policy,
                    mtu: a.mtu[mtu],
                    offloads: offloads[off].clone(),
                    qdisc: (qd != "default").then(|| qd.clone()),
                    txqueuelen: a.txqueuelen[txq],
                    test: test.clone(),
                    rep,
                    iperf3,
                    on: None,
                });
            }
        }
        Ok(out)
    }

    /// Seconds the runs will take, `overhead_s` each for the testbed and
    /// the handshake on top of the measured time.
    pub fn estimate_s(&self, runs: usize, overhead_s: f64) -> f64 {
        runs as f64 * (self.seconds + overhead_s)
    }
}

/// Refuses iperf3 points whose settings iperf3 cannot carry out.
fn iperf3_fits(
    test: &spec::TestSpec,
    client_cpus: &[usize],
    policy: Policy,
) -> Result<(), SpecError> {
    if client_cpus.len() > 1 || test.server_cpus.len() > 1 {
        return Err(SpecError(
            "send iperf3 pins each end to one CPU at most: give cpus such as 0:1".into(),
        ));
    }
    if test.len > crate::iperf3::MAX_LEN {
        return Err(SpecError(format!(
            "send iperf3 takes len up to {} bytes, got {}",
            crate::iperf3::MAX_LEN,
            test.len
        )));
    }
    if policy == Policy::Rr && test.proto == Proto::Udp {
        return Err(SpecError(
            "policy rr with send iperf3 and UDP: iperf3's UDP sockets are connected and keep \
             one queue; measure rr with send = \"send\""
                .into(),
        ));
    }
    Ok(())
}

/// The settings columns that precede [`crate::report::Report::CSV_HEADER`]'s.
pub const CSV_SETTINGS: &str =
    "key,experiment,rep,queues,policy,mtu,gateway,offloads,qdisc,txqueuelen,cpus,udp_socket";

/// The per-queue columns that follow the report's (space-separated lists,
/// one number per queue or bucket).
pub const CSV_QUEUES: &str = "tx_queue_packets,tx_queue_segments,rx_queue_packets,\
rx_unrecorded,tx_size_log2,tx_segs_log2,rx_size_log2,tx_queues_used,policy_effect";

/// The sweep's CSV header.
pub fn csv_header() -> String {
    format!(
        "{CSV_SETTINGS},{},{CSV_QUEUES}",
        crate::report::Report::CSV_HEADER
    )
}

/// The settings fields of a row.
pub fn csv_settings(p: &Point) -> String {
    [
        p.key(),
        p.experiment.clone(),
        p.rep.to_string(),
        p.queues.to_string(),
        p.policy.to_string(),
        p.mtu.to_string(),
        gateway_str(p.gateway),
        offload_str(&p.offloads),
        p.qdisc.clone().unwrap_or_else(|| "default".into()),
        p.txqueuelen.to_string(),
        p.cpus.clone(),
        if p.unconnected() {
            "unconnected"
        } else {
            "connected"
        }
        .to_string(),
    ]
    .iter()
    .map(|f| csv_field(f))
    .collect::<Vec<_>>()
    .join(",")
}

/// The keys of the runs already in a sweep CSV (its first column), to skip
/// them on resume. A file with another header is refused: appending would
/// mix two layouts.
pub fn done_keys(csv: &str) -> Result<HashSet<String>, SpecError> {
    let mut lines = csv.lines();
    match lines.next() {
        None => return Ok(HashSet::new()),
        Some(h) if h == csv_header() => {}
        Some(_) => {
            return Err(SpecError(
                "the output file has another header (another tool or version wrote it): \
                 give a new file"
                    .into(),
            ))
        }
    }
    let mut done = HashSet::new();
    for l in lines.filter(|l| !l.is_empty()) {
        // Keys are quoted when a CPU list puts a comma in them.
        done.insert(crate::summary::csv_fields(l).swap_remove(0));
    }
    Ok(done)
}

/// How packets of one run spread over the queues, as the eBPF views saw
/// them, in CSV fields (see [`CSV_QUEUES`]). A side with no view (the
/// peer's, on a real interface) has empty fields.
fn queue_fields(
    p: &Point,
    tx: Option<&fabkit_ebpf::QueueCounts>,
    rx: Option<&fabkit_ebpf::QueueCounts>,
    cpus: usize,
) -> Vec<String> {
    let list =
        |v: &mut dyn Iterator<Item = u64>| v.map(|x| x.to_string()).collect::<Vec<_>>().join(" ");
    let (tx_fields, effect) = match tx {
        None => (
            vec![String::new(); 5],
            "not seen (the peer sent: its queues are not watched)".to_string(),
        ),
        Some(tx) => {
            let total = tx.tx_total().packets;
            let used = tx
                .tx
                .iter()
                .filter(|q| total > 0 && q.packets * 100 >= total)
                .count();
            let effect = match p.policy {
                Policy::Hash => "kernel flow hash".to_string(),
                Policy::Xps => {
                    let mapped: Vec<usize> = (0..cpus).map(|c| c % usize::from(p.queues)).collect();
                    let outside: u64 = tx
                        .tx
                        .iter()
                        .enumerate()
                        .filter(|(i, _)| !mapped.contains(i))
                        .map(|(_, q)| q.packets)
                        .sum();
                    if total == 0 {
                        "no packets seen".into()
                    } else if outside == 0 {
                        "took effect".into()
                    } else {
                        format!(
                            "NOT in effect: {:.1}% of packets on queues outside the XPS map",
                            outside as f64 * 100.0 / total as f64
                        )
                    }
                }
                Policy::Rr => rr_effect(&tx.tx.iter().map(|q| q.packets).collect::<Vec<_>>()),
            };
            (
                vec![
                    list(&mut tx.tx.iter().map(|q| q.packets)),
                    list(&mut tx.tx.iter().map(|q| q.segments)),
                    list(&mut tx.tx_size_log2.iter().copied()),
                    list(&mut tx.tx_segs_log2.iter().copied()),
                    used.to_string(),
                ],
                effect,
            )
        }
    };
    let rx_fields = match rx {
        None => vec![String::new(); 3],
        Some(rx) => vec![
            list(&mut rx.rx.iter().map(|q| q.packets)),
            rx.rx_unrecorded.packets.to_string(),
            list(&mut rx.rx_size_log2.iter().copied()),
        ],
    };
    // In CSV_QUEUES's order.
    vec![
        tx_fields[0].clone(),
        tx_fields[1].clone(),
        rx_fields[0].clone(),
        rx_fields[1].clone(),
        tx_fields[2].clone(),
        tx_fields[3].clone(),
        rx_fields[2].clone(),
        tx_fields[4].clone(),
        effect,
    ]
}

/// The IP protocol number of a test's flows, for the eBPF flow rules.
fn ip_proto(p: Proto) -> u8 {
    match p {
        Proto::Tcp => 6,
        Proto::Udp => 17,
    }
}

/// Whether round-robin dealt the packets out evenly: every queue within
/// 10 % (and 8 packets) of an equal share.
fn rr_effect(per_queue: &[u64]) -> String {
    let total: u64 = per_queue.iter().sum();
    if total == 0 {
        return "no packets seen".into();
    }
    let share = total as f64 / per_queue.len() as f64;
    let worst = per_queue
        .iter()
        .map(|&p| (p as f64 - share).abs())
        .fold(0.0, f64::max);
    if worst <= share * 0.1 + 8.0 {
        "took effect".into()
    } else {
        let pct = |p: u64| p as f64 * 100.0 / total as f64;
        format!(
            "NOT in effect: queue shares {:.1}% to {:.1}%, not {:.1}% each",
            pct(*per_queue.iter().min().unwrap_or(&0)),
            pct(*per_queue.iter().max().unwrap_or(&0)),
            100.0 / per_queue.len() as f64
        )
    }
}

/// Sets the TX queue policy on `iface` in `netns`: XPS cleared (the
/// kernel's flow hash, and under round-robin) or CPU `c` mapped to queue
/// `c mod queues`. Round-robin also attaches its selector, returned: it
/// stays attached while the value lives.
fn apply_policy(
    netns: &str,
    iface: &str,
    queues: u16,
    policy: Policy,
    cpus: usize,
) -> Result<Option<fabkit_ebpf::RoundRobin>, RunError> {
    if queues == 1 {
        // One queue: every policy is the same, and the kernel refuses XPS
        // maps on a single-queue device (EIO).
        return Ok(None);
    }
    for q in 0..usize::from(queues) {
        let mask = match policy {
            Policy::Hash | Policy::Rr => "0".to_string(),
            Policy::Xps => crate::iface::xps_mask(cpus, usize::from(queues), q),
        };
        testbed::write_sys(
            netns,
            &format!("class/net/{iface}/queues/tx-{q}/xps_cpus"),
            &mask,
        )
        .map_err(|e| RunError::Failed(e.to_string()))?;
    }
    if policy != Policy::Rr {
        return Ok(None);
    }
    fabkit_ebpf::RoundRobin::attach(Some(netns), iface, usize::from(queues))
        .map(Some)
        .map_err(|e| RunError::Failed(e.to_string()))
}

/// Runs one point on a testbed of its own: the server in the `b` host, the
/// client in the `a` host, eBPF views on both ends' data interfaces.
/// Returns the CSV rows (one per direction).
pub fn run_point(p: &Point) -> Result<Vec<String>, RunError> {
    let failed = |e: &dyn std::fmt::Display| RunError::Failed(e.to_string());
    let tb = Testbed::up(TestbedSpec {
        gateway: p.gateway.is_some(),
        mtu_b: p.gateway.unwrap_or(p.mtu),
        queues: p.queues,
        mtu: p.mtu,
        offloads: p.offloads.clone(),
        qdisc: p.qdisc.clone(),
        txqueuelen: Some(p.txqueuelen),
        ..TestbedSpec::default()
    })
    .map_err(|e| failed(&e))?;
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
    let _rr_a = apply_policy(&tb.a.netns, &tb.a.iface, p.queues, p.policy, cpus)?;
    let _rr_b = apply_policy(&tb.b.netns, &tb.b.iface, p.queues, p.policy, cpus)?;
    let proto = ip_proto(p.test.proto);
    let (IpAddr::V4(a4), IpAddr::V4(b4)) = (tb.a.addr, tb.b.addr) else {
        return Err(failed(&"the testbed's addresses are IPv4"));
    };
    let rule = fabkit_ebpf::Rule {
        proto,
        addr_a: Some(a4),
        addr_b: Some(b4),
        ..fabkit_ebpf::Rule::default()
    };
    let view = |netns: &str, iface: &str| {
        fabkit_ebpf::Iface::lookup(Some(netns), iface)
            .and_then(|i| fabkit_ebpf::QueueView::attach(i, &[rule], usize::from(p.queues)))
            .map_err(|e| failed(&e))
    };
    let tx_view = view(&tb.a.netns, &tb.a.iface)?;
    let rx_view = view(&tb.b.netns, &tb.b.iface)?;
    let rows = if p.iperf3 {
        let ends = crate::iperf3::Ends {
            server_ns: &tb.b.netns,
            client_ns: &tb.a.netns,
            server_addr: tb.b.addr.to_string(),
            client_cpu: p.client_cpus.first().copied(),
        };
        let (m, busy) = crate::iperf3::run(&p.test, &ends)?;
        vec![crate::iperf3::row(
            &p.test,
            &m,
            busy,
            &crate::run::host_info().kernel,
        )]
    } else {
        measure(p, &tb)?
    };
    let (mut tx, mut rx) = (
        tx_view.read().map_err(|e| failed(&e))?,
        rx_view.read().map_err(|e| failed(&e))?,
    );
    if p.test.direction == spec::Direction::Reverse {
        // Host b sent: its view has the TX queues, a's the RX queues.
        std::mem::swap(&mut tx, &mut rx);
    }
    let queues = queue_fields(p, Some(&tx), Some(&rx), cpus)
        .iter()
        .map(|f| csv_field(f))
        .collect::<Vec<_>>()
        .join(",");
    Ok(rows
        .into_iter()
        .map(|r| format!("{},{r},{queues}", csv_settings(p)))
        .collect())
}

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

/// The peer's interface, as a sweep changes it: told to restore when this
/// value goes, or when the process is interrupted.
struct PeerHeld {
    peer: String,
    port: u16,
    _undo: fabkit_netns::cleanup::Registered,
}

impl PeerHeld {
    fn new(peer: &str, port: u16) -> PeerHeld {
        let (p, q) = (peer.to_string(), port);
        PeerHeld {
            peer: peer.to_string(),
            port,
            _undo: fabkit_netns::cleanup::register(move || restore_peer_or_say(&p, q)),
        }
    }
}

impl Drop for PeerHeld {
    fn drop(&mut self) {
        restore_peer_or_say(&self.peer, self.port);
    }
}

fn restore_peer_or_say(peer: &str, port: u16) {
    if let Err(e) = crate::run::restore_peer(peer, port, Duration::from_secs(60)) {
        eprintln!("ipoib-eval: {e} (the peer restores its interface when its server ends)");
    }
}

/// Refuses points a real interface cannot run.
fn check_for_iface(points: &[Point]) -> Result<(), SpecError> {
    for p in points {
        if p.policy == Policy::Rr && p.test.direction != spec::Direction::Forward {
            return Err(SpecError(format!(
                "experiment {}: policy rr on a real interface needs direction forward (the \
                 selector runs on this end's interface only)",
                p.experiment
            )));
        }
        if p.gateway.is_some() {
            return Err(SpecError(format!(
                "experiment {}: gateway points need the testbed (the sweep builds the gateway); \
                 drop the gateway axis to run on a real interface",
                p.experiment
            )));
        }
        if p.iperf3 {
            return Err(SpecError(format!(
                "experiment {}: send iperf3 runs on the testbed only; run `iperf3 -c` by hand \
                 on a real interface",
                p.experiment
            )));
        }
    }
    Ok(())
}

/// What a point asks of each end's interface.
fn wanted(p: &Point) -> crate::iface::Wanted {
    crate::iface::Wanted {
        queues: p.queues,
        mtu: p.mtu,
        offloads: p.offloads.clone(),
        qdisc: p.qdisc.clone(),
        txqueuelen: p.txqueuelen,
        xps: p.policy == Policy::Xps,
    }
}

/// Runs one point over a real interface: sets this end (from its record
/// `saved`) and the peer's, watches this end's queues, runs our client
/// against the peer's server. The peer's queues are not watched: forward
/// points have TX columns, reverse points RX columns.
fn run_point_iface(
    p: &Point,
    saved: &crate::iface::Saved,
    peer: &str,
    port: u16,
) -> Result<Vec<String>, RunError> {
    let failed = |e: &dyn std::fmt::Display| RunError::Failed(e.to_string());
    let iface = &saved.iface;
    let w = wanted(p);
    crate::iface::apply(saved, &w).map_err(|e| failed(&e))?;
    crate::run::configure_peer(peer, port, &w, Duration::from_secs(60))?;
    let _rr = match p.policy {
        Policy::Rr => Some(
            fabkit_ebpf::RoundRobin::attach(None, iface, usize::from(p.queues))
                .map_err(|e| failed(&e))?,
        ),
        Policy::Hash | Policy::Xps => None,
    };
    // The flow's two addresses: ours is the one the kernel picks toward the peer.
    let peer_ip: IpAddr = peer.parse().map_err(|_| {
        failed(&format!(
            "--peer {peer}: give the peer's address, not a name"
        ))
    })?;
    let local = std::net::UdpSocket::bind((
        if peer_ip.is_ipv4() {
            IpAddr::from([0, 0, 0, 0])
        } else {
            IpAddr::from([0u16; 8])
        },
        0,
    ))
    .and_then(|s| s.connect((peer_ip, port)).and_then(|()| s.local_addr()))
    .map_err(|e| failed(&format!("finding the local address toward {peer}: {e}")))?
    .ip();
    // The flows must leave through the interface being set.
    let via = crate::stats::iface::iface_of(local);
    if via.as_deref() != Some(iface.as_str()) {
        return Err(RunError::Usage(SpecError(format!(
            "the route to {peer} leaves through {} ({local}), not {iface}: give --peer the \
             peer's address on {iface}",
            via.as_deref().unwrap_or("no interface")
        ))));
    }
    let (addr_a, addr_b) = match (local, peer_ip) {
        (IpAddr::V4(a), IpAddr::V4(b)) => (Some(a), Some(b)),
        // IPv6 flows count by protocol alone on this interface.
        _ => (None, None),
    };
    let rule = fabkit_ebpf::Rule {
        proto: ip_proto(p.test.proto),
        addr_a,
        addr_b,
        ..fabkit_ebpf::Rule::default()
    };
    let view = fabkit_ebpf::Iface::lookup(None, iface)
        .and_then(|i| fabkit_ebpf::QueueView::attach(i, &[rule], usize::from(p.queues)))
        .map_err(|e| failed(&e))?;
    let report = run_client(
        &p.test,
        &ClientOpts {
            host: peer.to_string(),
            port,
            cpus: p.client_cpus.clone(),
            unconnected_udp: p.unconnected(),
            ..ClientOpts::default()
        },
    )?;
    let counts = view.read().map_err(|e| failed(&e))?;
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
    let queues = match p.test.direction {
        spec::Direction::Reverse => queue_fields(p, None, Some(&counts), cpus),
        _ => queue_fields(p, Some(&counts), None, cpus),
    }
    .iter()
    .map(|f| csv_field(f))
    .collect::<Vec<_>>()
    .join(",");
    Ok(report
        .csv_rows()
        .into_iter()
        .map(|r| format!("{},{r},{queues}", csv_settings(p)))
        .collect())
}

/// Runs our server in host b and our client in host a: the report's CSV
/// rows (one per direction).
fn measure(p: &Point, tb: &Testbed) -> Result<Vec<String>, RunError> {
    let failed = |e: &dyn std::fmt::Display| RunError::Failed(e.to_string());
    let (port_tx, port_rx) = std::sync::mpsc::channel();
    let server_ns = tb.b.netns.clone();
    let server = std::thread::spawn(move || -> Result<(), RunError> {
        testbed::enter(&server_ns).map_err(|e| RunError::Failed(e.to_string()))?;
        let s = Server::bind(ServerOpts {
            port: 0,
            verbose: false,
            ..ServerOpts::default()
        });
        let s = match s {
            Ok(s) => s,
            Err(e) => {
                let _ = port_tx.send(None);
                return Err(e);
            }
        };
        let _ = port_tx.send(Some(s.port()));
        s.serve(true)
    });
    let port = port_rx
        .recv_timeout(Duration::from_secs(10))
        .ok()
        .flatten()
        .ok_or_else(|| failed(&"the sweep's server did not start"))?;
    let client_ns = tb.a.netns.clone();
    let test = p.test.clone();
    let host = tb.b.addr.to_string();
    let (client_cpus, unconnected_udp) = (p.client_cpus.clone(), p.unconnected());
    let report = std::thread::spawn(move || {
        testbed::enter(&client_ns).map_err(|e| RunError::Failed(e.to_string()))?;
        let r = run_client(
            &test,
            &ClientOpts {
                host: host.clone(),
                port,
                cpus: client_cpus,
                unconnected_udp,
                ..ClientOpts::default()
            },
        );
        if r.is_err() {
            // The server may still wait in accept: one empty connection
            // ends its session.
            let _ = std::net::TcpStream::connect_timeout(
                &std::net::SocketAddr::new(
                    host.parse().unwrap_or(IpAddr::from([127, 0, 0, 1])),
                    port,
                ),
                Duration::from_secs(2),
            );
        }
        r
    })
    .join()
    .map_err(|_| failed(&"the sweep's client panicked"))?;
    let served = server
        .join()
        .map_err(|_| failed(&"the sweep's server panicked"))?;
    let report = report?;
    served?;
    Ok(report.csv_rows())
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
            .and_then(|()| f.write_all(format!("{}\n", csv_header()).as_bytes()))
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
                let text: String = rows.iter().map(|r| format!("{r}\n")).collect();
                f.write_all(text.as_bytes())
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

/// Seconds a run takes beyond its measured time (testbed, views,
/// handshake), for estimates.
pub const RUN_OVERHEAD_S: f64 = 1.5;

#[cfg(test)]
mod tests {
    use super::*;

    fn file(axes: &str) -> SweepFile {
        SweepFile::parse(&format!("seconds = 1\n[axes]\n{axes}")).unwrap()
    }

    #[test]
    fn every_combination_times_the_repetitions() {
        let f = SweepFile::parse(
            "seconds = 2\nrepetitions = 3\n[axes]\nqueues = [1, 2, 4]\nproto = [\"tcp\", \"udp\"]\n",
        )
        .unwrap();
        let p = f.expand().unwrap();
        assert_eq!(p.len(), 3 * 2 * 3);
        let keys: HashSet<String> = p.iter().map(Point::key).collect();
        assert_eq!(keys.len(), p.len(), "keys name runs uniquely");
        assert!(p
            .iter()
            .any(|x| x.queues == 4 && x.test.proto == Proto::Udp && x.rep == 2));
        // Defaults: UDP messages of 1472 B, TCP of 128 KiB.
        assert!(p
            .iter()
            .filter(|x| x.test.proto == Proto::Udp)
            .all(|x| x.test.len == 1472));
        assert!(p
            .iter()
            .filter(|x| x.test.proto == Proto::Tcp)
            .all(|x| x.test.len == 128 * 1024));
        assert_eq!(f.estimate_s(p.len(), 1.0), 18.0 * 3.0);
    }

    #[test]
    fn experiments_take_the_common_axes_and_override_them() {
        let f = SweepFile::parse(
            "seconds = 1\n[axes]\nqueues = [4]\nproto = [\"udp\"]\n\
             [[experiment]]\nname = \"queues\"\nqueues = [1, 2, 4, 8]\n\
             [[experiment]]\nname = \"policy\"\npolicy = [\"hash\", \"xps\", \"rr\"]\n\
             cpus = [\"any\", \"0:1\"]\n",
        )
        .unwrap();
        let p = f.expand().unwrap();
        assert_eq!(p.len(), 4 + 3 * 2);
        let q: Vec<&Point> = p.iter().filter(|x| x.experiment == "queues").collect();
        assert_eq!(q.iter().map(|x| x.queues).collect::<Vec<_>>(), [1, 2, 4, 8]);
        assert!(p.iter().all(|x| x.test.proto == Proto::Udp), "common axis");
        let pol: Vec<&Point> = p.iter().filter(|x| x.experiment == "policy").collect();
        assert!(pol.iter().all(|x| x.queues == 4), "common axis kept");
        assert!(pol
            .iter()
            .any(|x| x.policy == Policy::Rr && x.client_cpus == [0] && x.test.server_cpus == [1]));
        assert!(pol
            .iter()
            .any(|x| x.cpus == "any" && x.client_cpus.is_empty()));
        // Experiments name their points: the same settings in two
        // experiments are two runs.
        let keys: HashSet<String> = p.iter().map(Point::key).collect();
        assert_eq!(keys.len(), p.len());
    }

    #[test]
    fn iperf3_points_are_one_per_receive_axis_and_checked() {
        let f = file(
            "proto = [\"udp\"]\nsend = [\"send\", \"iperf3\"]\nrecv = [\"recv\", \"mmsg:8\"]\n",
        );
        let p = f.expand().unwrap();
        // Two of ours (one per recv), one iperf3 for both recv values.
        assert_eq!(p.len(), 3);
        let i: Vec<&Point> = p.iter().filter(|x| x.iperf3).collect();
        assert_eq!(i.len(), 1);
        assert!(
            i[0].key().contains("send=iperf3 recv=iperf3"),
            "{}",
            i[0].key()
        );
        let bad = |t: &str, want: &str| {
            let e = SweepFile::parse(t).unwrap().expand().unwrap_err().0;
            assert!(e.contains(want), "{t}: {e}");
        };
        bad(
            "seconds = 1.5\n[axes]\nsend = [\"iperf3\"]\n",
            "whole seconds",
        );
        bad(
            "seconds = 1\n[axes]\nsend = [\"iperf3\"]\ncpus = [\"0,1:1\"]\n",
            "one CPU",
        );
        bad(
            "seconds = 1\n[axes]\nsend = [\"iperf3\"]\nproto = [\"udp\"]\npolicy = [\"rr\"]\n",
            "connected",
        );
        bad(
            "seconds = 1\n[axes]\nsend = [\"iperf3\"]\nlen = [\"2M\"]\n",
            "len up to",
        );
    }

    #[test]
    fn round_robin_is_judged_by_the_counts() {
        assert_eq!(rr_effect(&[250, 251, 249, 250]), "took effect");
        assert_eq!(rr_effect(&[0, 0, 0, 0]), "no packets seen");
        let e = rr_effect(&[1000, 0, 0, 0]);
        assert!(
            e.starts_with("NOT in effect: queue shares 0.0% to 100.0%"),
            "{e}"
        );
        assert_eq!(rr_effect(&[7]), "took effect");
    }

    #[test]
    fn the_shuffle_is_a_seeded_permutation() {
        let base = file("queues = [1, 2, 3, 4, 5, 6, 7, 8]\nmtu = [1500, 9000]");
        let plain: Vec<String> = base.expand().unwrap().iter().map(Point::key).collect();
        let mut f = base.clone();
        f.shuffle = true;
        f.seed = 7;
        let a: Vec<String> = f.expand().unwrap().iter().map(Point::key).collect();
        let b: Vec<String> = f.expand().unwrap().iter().map(Point::key).collect();
        assert_eq!(a, b, "same seed, same order");
        assert_ne!(a, plain, "shuffled");
        let (mut x, mut y) = (a.clone(), plain.clone());
        x.sort();
        y.sort();
        assert_eq!(x, y, "a permutation: nothing lost or doubled");
        f.seed = 8;
        let c: Vec<String> = f.expand().unwrap().iter().map(Point::key).collect();
        assert_ne!(a, c);
    }

    #[test]
    fn bad_files_and_values_are_named() {
        for (text, needle) in [
            ("[axes]\nqueues = []", "axis queues is empty"),
            ("[axes]\nqueues = [0]", "queues must be 1 to 64"),
            ("[axes]\nmtu = [70000]", "mtu must be"),
            ("[axes]\ncpus = [\"0\"]", "cpus `0`"),
            ("[axes]\ngateway = [\"9\"]", "gateway `9`"),
            ("[axes]\ngateway = [\"1500\"]\npolicy = [\"xps\"]", "with a gateway"),
            (
                "[axes]\nproto = [\"udp\"]\npolicy = [\"rr\"]\nsend = [\"gso:8\"]",
                "policy rr with UDP needs",
            ),
            (
                "[axes]\nproto = [\"udp\"]\npolicy = [\"rr\"]\ndirection = [\"reverse\"]",
                "policy rr with UDP needs",
            ),
            ("[axes]\nqdisc = [\"pfifo\\nx\"]", "qdisc `pfifo\\nx`"),
            ("[axes]\noffloads = [\"Bogus Name=off\"]", "offloads"),
            ("[axes]\ncpus = [\"0:99\"]", "names CPU 99"),
            ("[axes]\ncpus = [\" 0:1\"]", "without spaces"),
            ("[axes]\nbogus = [1]", "[axes]: unknown field"),
            ("[axes]\ndirection = [\"bidir\"]", "direction `bidir`"),
            ("[axes]\ncpus = [\"0:x\"]", "cpus (server)"),
            ("[[experiment]]\nqueues = [1]", "experiment 1: give it a name"),
            (
                "[[experiment]]\nname = \"a\"\n[[experiment]]\nname = \"a\"",
                "experiment a is named twice",
            ),
            ("[[experiment]]\nname = \"x\"\nmtu = [1]", "experiment x: mtu must be"),
            ("[[experiment]]\nname = \"x y\"", "give it a name"),
            ("[axes]\npolicy = [\"fastest\"]", "policy `fastest`"),
            ("[axes]\nproto = [\"sctp\"]", "proto `sctp`"),
            ("[axes]\noffloads = [\"tso\"]", "offloads `tso`"),
            ("[axes]\nsend = [\"gso:0\"]", "gso"),
            ("[axes]\nlen = [\"1e300\"]", "len"),
            ("[axes]\nrate = [\"-1\"]", "rate"),
            ("[axes]\nbogus = [1]", "unknown field"),
            ("seconds = 0", "seconds must be"),
            ("seconds = 1e300", "seconds must be"),
            ("repetitions = 0", "repetitions must be"),
            ("seconds = \"x\"", "sweep file"),
            (
                "[axes]\nqueues = [1,2,3,4,5,6,7,8,9,10,11]\nmtu = [1500,1501,1502,1503,1504,1505,1506,1507,1508,1509]\nstreams = [1,2,3,4,5,6,7,8,9,10]\ntxqueuelen = [1,2,3,4,5,6,7,8,9,10]\nrate = [\"1\",\"2\",\"3\",\"4\",\"5\",\"6\",\"7\",\"8\",\"9\",\"10\"]",
                "more than 100000 runs",
            ),
        ] {
            let e = SweepFile::parse(text)
                .and_then(|f| f.expand())
                .map(|_| ())
                .expect_err(text)
                .to_string();
            assert!(e.contains(needle), "{text:?}: {e}");
            assert_eq!(e.lines().count(), 1, "{e}");
        }
    }

    #[test]
    fn resume_skips_the_runs_in_the_file_and_refuses_another_layout() {
        let f = file("queues = [1, 2]");
        let p = f.expand().unwrap();
        let row = format!("{},{}", csv_settings(&p[0]), "rest");
        let csv = format!("{}\n{row}\n", csv_header());
        let done = done_keys(&csv).unwrap();
        assert!(done.contains(&p[0].key()));
        assert!(!done.contains(&p[1].key()));
        assert!(done_keys("").unwrap().is_empty());
        assert!(done_keys("a,b,c\n1,2,3\n")
            .unwrap_err()
            .to_string()
            .contains("another header"));
        // A key with a comma (a CPU list) is quoted, and still found.
        let pinned = file("cpus = [\"0,1:0\"]").expand().unwrap();
        let csv = format!("{}\n{},rest\n", csv_header(), csv_settings(&pinned[0]));
        assert!(done_keys(&csv).unwrap().contains(&pinned[0].key()));
        // The settings columns match their header.
        assert_eq!(
            csv_settings(&p[0]).split(',').count(),
            CSV_SETTINGS.split(',').count()
        );
    }
}
