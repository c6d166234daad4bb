//! Interface facts and counters. Counters come from
//! `/proc/thread-self/net/dev`, which follows the calling thread's network
//! namespace (sysfs shows the namespace it was mounted in, and
//! `/proc/self` the main thread's); settings from `ip -d -j link` and
//! `ethtool -k`, run as children that inherit the thread's namespace.

use std::collections::BTreeMap;
use std::net::IpAddr;
use std::process::Command;

use serde::{Deserialize, Serialize};

/// Packet and byte counters of one interface.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Counters {
    /// Packets received.
    pub rx_packets: u64,
    /// Bytes received.
    pub rx_bytes: u64,
    /// Packets sent.
    pub tx_packets: u64,
    /// Bytes sent.
    pub tx_bytes: u64,
    /// Receive drops.
    pub rx_dropped: u64,
    /// Transmit drops.
    pub tx_dropped: u64,
}

impl Counters {
    /// Parses `/proc/net/dev` text for interface `name`. Pure.
    pub fn parse(text: &str, name: &str) -> Option<Counters> {
        let line = text.lines().find_map(|l| {
            let (n, rest) = l.split_once(':')?;
            (n.trim() == name).then_some(rest)
        })?;
        let f: Vec<u64> = line
            .split_whitespace()
            .map(|x| x.parse().ok())
            .collect::<Option<_>>()?;
        // rx: bytes packets errs drop fifo frame compressed multicast
        // tx: bytes packets errs drop fifo colls carrier compressed
        if f.len() < 16 {
            return None;
        }
        Some(Counters {
            rx_bytes: f[0],
            rx_packets: f[1],
            rx_dropped: f[3],
            tx_bytes: f[8],
            tx_packets: f[9],
            tx_dropped: f[11],
        })
    }

    /// Reads interface `name`'s counters in this thread's namespace.
    pub fn read(name: &str) -> Option<Counters> {
        let text = std::fs::read_to_string("/proc/thread-self/net/dev").ok()?;
        Counters::parse(&text, name)
    }

    /// Counts since `earlier` (counters never go back; a reset reads as 0).
    pub fn since(&self, earlier: &Counters) -> Counters {
        Counters {
            rx_packets: self.rx_packets.saturating_sub(earlier.rx_packets),
            rx_bytes: self.rx_bytes.saturating_sub(earlier.rx_bytes),
            tx_packets: self.tx_packets.saturating_sub(earlier.tx_packets),
            tx_bytes: self.tx_bytes.saturating_sub(earlier.tx_bytes),
            rx_dropped: self.rx_dropped.saturating_sub(earlier.rx_dropped),
            tx_dropped: self.tx_dropped.saturating_sub(earlier.tx_dropped),
        }
    }
}

/// The settings of the interface a test ran over, recorded with its figures.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct IfaceInfo {
    /// Interface name.
    pub name: String,
    /// MTU.
    pub mtu: Option<u32>,
    /// Transmit queues.
    pub tx_queues: Option<u32>,
    /// Receive queues.
    pub rx_queues: Option<u32>,
    /// Root qdisc kind.
    pub qdisc: Option<String>,
    /// Transmit queue length.
    pub txqueuelen: Option<u32>,
    /// Largest GSO packet the device takes.
    pub gso_max_size: Option<u32>,
    /// Offload features that matter here (`ethtool -k`), on or off.
    pub offloads: BTreeMap<String, bool>,
}

/// The `ethtool -k` features recorded.
const FEATURES: &[&str] = &[
    "scatter-gather",
    "tcp-segmentation-offload",
    "generic-segmentation-offload",
    "generic-receive-offload",
    "tx-udp-segmentation",
    "rx-gro-list",
    "rx-udp-gro-forwarding",
    "large-receive-offload",
];

impl IfaceInfo {
    /// Parses `ip -d -j link show dev NAME` output. Pure.
    pub fn parse_ip_link(name: &str, json: &str) -> IfaceInfo {
        let v: serde_json::Value = serde_json::from_str(json).unwrap_or_default();
        let l = &v[0];
        let num = |k: &str| l[k].as_u64().and_then(|n| u32::try_from(n).ok());
        IfaceInfo {
            name: name.to_string(),
            mtu: num("mtu"),
            tx_queues: num("num_tx_queues"),
            rx_queues: num("num_rx_queues"),
            qdisc: l["qdisc"].as_str().map(str::to_string),
            txqueuelen: num("txqlen"),
            gso_max_size: num("gso_max_size"),
            offloads: BTreeMap::new(),
        }
    }

    /// The features in `FEATURES` of `ethtool -k NAME` output, on if in
    /// effect (`off [requested on]` is off). Pure.
    pub fn parse_ethtool_k(text: &str) -> BTreeMap<String, bool> {
        fabkit_netns::ethtool::parse_features(text)
            .into_iter()
            .filter(|f| FEATURES.contains(&f.name.as_str()))
            .map(|f| (f.name, f.active))
            .collect()
    }

    /// Reads interface `name`'s settings with `ip` and `ethtool` (fields stay
    /// empty where a tool is missing).
    pub fn read(name: &str) -> IfaceInfo {
        let out = |cmd: &str, args: &[&str]| {
            Command::new(cmd)
                .args(args)
                .output()
                .ok()
                .filter(|o| o.status.success())
                .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
        };
        let mut info = out("ip", &["-d", "-j", "link", "show", "dev", name])
            .map(|j| IfaceInfo::parse_ip_link(name, &j))
            .unwrap_or_else(|| IfaceInfo {
                name: name.to_string(),
                ..IfaceInfo::default()
            });
        if let Some(k) = out("ethtool", &["-k", name]) {
            info.offloads = IfaceInfo::parse_ethtool_k(&k);
        }
        info
    }
}

/// The interface that holds local address `addr` in this namespace.
pub fn iface_of(addr: IpAddr) -> Option<String> {
    let all = fabkit_core::net::interface_addresses().ok()?;
    all.into_iter().find(|a| a.addr == addr).map(|a| a.name)
}

#[cfg(test)]
mod tests {
    use super::*;

    const DEV: &str = "Inter-|   Receive                                                |  Transmit
 face |bytes    packets errs drop fifo frame compressed multicast|bytes    packets errs drop fifo colls carrier compressed
    lo: 1000      10    0    1    0     0          0         0     2000      20    0    2    0     0       0          0
  veth0-x: 5 6 0 0 0 0 0 0 7 8 0 0 0 0 0 0
";

    #[test]
    fn proc_net_dev_parses_by_name() {
        let lo = Counters::parse(DEV, "lo").unwrap();
        assert_eq!((lo.rx_bytes, lo.rx_packets, lo.rx_dropped), (1000, 10, 1));
        assert_eq!((lo.tx_bytes, lo.tx_packets, lo.tx_dropped), (2000, 20, 2));
        let v = Counters::parse(DEV, "veth0-x").unwrap();
        assert_eq!((v.rx_packets, v.tx_packets), (6, 8));
        assert!(Counters::parse(DEV, "eth0").is_none());
        assert!(Counters::parse("lo: 1 2 3\n", "lo").is_none());
        let later = Counters {
            rx_packets: 15,
            ..lo
        };
        assert_eq!(later.since(&lo).rx_packets, 5);
        assert_eq!(lo.since(&later).rx_packets, 0);
    }

    #[test]
    fn the_loopback_address_is_on_lo() {
        assert_eq!(
            iface_of("127.0.0.1".parse().unwrap()).as_deref(),
            Some("lo")
        );
        assert_eq!(iface_of("192.0.2.77".parse().unwrap()), None);
    }

    #[test]
    fn ip_link_and_ethtool_parse() {
        let j = r#"[{"ifname":"va","mtu":1500,"qdisc":"noqueue","txqlen":1000,
            "num_tx_queues":4,"num_rx_queues":4,"gso_max_size":65536}]"#;
        let i = IfaceInfo::parse_ip_link("va", j);
        assert_eq!(i.mtu, Some(1500));
        assert_eq!((i.tx_queues, i.rx_queues), (Some(4), Some(4)));
        assert_eq!(i.qdisc.as_deref(), Some("noqueue"));
        assert_eq!(IfaceInfo::parse_ip_link("x", "garbage").mtu, None);
        let k = "Features for va:\nscatter-gather: on\n\ttx-scatter-gather: on\n\
                 tcp-segmentation-offload: off [fixed]\ngeneric-receive-offload: on\n\
                 rx-udp-gro-forwarding: off [requested on]\n";
        let f = IfaceInfo::parse_ethtool_k(k);
        assert_eq!(f.get("scatter-gather"), Some(&true));
        assert_eq!(f.get("tcp-segmentation-offload"), Some(&false));
        assert_eq!(f.get("generic-receive-offload"), Some(&true));
        assert_eq!(f.get("rx-udp-gro-forwarding"), Some(&false));
        assert!(!f.contains_key("tx-scatter-gather"));
    }
}
