//! The sweep file: its settings, its axes and their defaults, and its
//! experiments (each `[axes]` with its own entries over them).

use std::collections::HashSet;

use serde::Deserialize;

use crate::spec::SpecError;

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

/// Experiment names become file names (the summary's charts): letters,
/// digits, `-`, `_`, `.`, not starting with a dot.
pub fn valid_experiment(n: &str) -> bool {
    !n.is_empty()
        && n.len() <= 64
        && !n.starts_with('.')
        && n.chars()
            .all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c))
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
                Some(toml::Value::String(n)) if valid_experiment(&n) => n,
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

    /// Seconds the runs will take, `overhead_s` each for the testbed and
    /// the handshake on top of the measured time.
    pub fn estimate_s(&self, runs: usize, overhead_s: f64) -> f64 {
        runs as f64 * (self.seconds + overhead_s)
    }
}
