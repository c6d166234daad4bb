//! A point: one combination of settings, named by its key; and the
//! settings' words as the sweep file and the CSV write them.

use std::fmt::Write as _;

use super::Policy;
use crate::spec::{self, Proto, SpecError};

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

pub(super) fn gateway_str(g: Option<u32>) -> String {
    g.map_or("none".into(), |m| m.to_string())
}

pub(super) fn direction_str(d: spec::Direction) -> &'static str {
    match d {
        spec::Direction::Forward => "forward",
        spec::Direction::Reverse => "reverse",
        spec::Direction::Bidir => "bidir",
    }
}

pub(super) fn offload_str(o: &[(String, bool)]) -> String {
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
