//! Several hosts on one machine: network namespaces joined by veth pairs,
//! each end with an address of its own, a chosen number of queues, MTU,
//! offloads and qdisc; or three namespaces where the middle one routes
//! between two MTU domains (seed 004 section 3.9's IP gateway).
//!
//! A [`Testbed`] owns what it made: dropping it (also in a panic) removes
//! every namespace, and with them their links, addresses and qdiscs.
//! [`down`] is idempotent, and [`Testbed::up`] first removes a stale
//! testbed of the same name (a killed run's). Automatic names carry the
//! owner's pid, so tests in parallel never collide, and `up` also sweeps
//! auto-named testbeds whose owner process is gone.
//!
//! The work is done with `ip`, `ethtool` and `tc` (iproute2 covers netns,
//! veth with queue counts, MTU and addresses; `ethtool -K/-L` offloads and
//! channels; `tc` qdiscs), each failure reported with the command and its
//! own message.

use std::net::{IpAddr, Ipv4Addr};
use std::process::Command;
use std::sync::atomic::{AtomicU32, Ordering};

use serde::{Deserialize, Serialize};

/// Prefix of automatic names: `ipe<pid>x<n>`.
const AUTO: &str = "ipe";

/// What to build.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct TestbedSpec {
    /// Name; namespaces are `<name>-a`, `<name>-b` (and `<name>-g`).
    pub name: String,
    /// Put a routing namespace between the two hosts.
    pub gateway: bool,
    /// TX and RX queues of every veth.
    pub queues: u16,
    /// MTU of the a-side link (the only link without a gateway).
    pub mtu: u32,
    /// MTU of the b-side link behind the gateway.
    pub mtu_b: u32,
    /// `ethtool -K` settings applied to every veth (`gro`, `tso`, ...); names
    /// `ethtool -k` does not list are refused before anything is made.
    pub offloads: Vec<(String, bool)>,
    /// Root qdisc of every veth (`noqueue`, `pfifo_fast`, `fq`, ...); none: the kernel's.
    pub qdisc: Option<String>,
    /// `txqueuelen` of every veth.
    pub txqueuelen: Option<u32>,
    /// Keep IPv6 (off by default: fresh links chatter ND/MLD, which spoils
    /// exact packet counts).
    pub ipv6: bool,
    /// Give each host a management link to the root namespace (interface
    /// [`MGMT_IFACE`], a /30 from 10.78.0.0/16, default route through it),
    /// as cluster nodes have an Ethernet beside their fabric: launchers such
    /// as mpirun reach their daemons over it. Data stays on the testbed's
    /// own links.
    #[serde(default)]
    pub mgmt: bool,
    /// A third host, `<name>-x`, on a link of its own behind the gateway
    /// (10.77.3.0/24): it reaches both hosts through the gateway's routing
    /// but sees none of their traffic (an outsider on the network, for
    /// `fabkit intrude`). Needs `gateway`.
    #[serde(default)]
    pub outsider: bool,
}

/// The management interface's name inside each host's namespace (to
/// exclude it from data traffic, e.g. Open MPI's `btl_tcp_if_exclude`).
pub const MGMT_IFACE: &str = "mg";

/// Management links take /30 blocks of this /16 (root side .1, host .2).
const MGMT_NET: [u8; 2] = [10, 78];

impl Default for TestbedSpec {
    fn default() -> Self {
        TestbedSpec {
            name: auto_name(),
            gateway: false,
            queues: 4,
            mtu: 1500,
            mtu_b: 1500,
            offloads: Vec::new(),
            qdisc: None,
            txqueuelen: None,
            ipv6: false,
            mgmt: false,
            outsider: false,
        }
    }
}

/// A name no other testbed of this or another live process uses.
pub fn auto_name() -> String {
    static N: AtomicU32 = AtomicU32::new(0);
    format!(
        "{AUTO}{}x{}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    )
}

/// Why a testbed could not be made or removed.
#[derive(Debug, thiserror::Error)]
pub enum TestbedError {
    /// A setting is out of bounds: the user's to fix.
    #[error("{0}")]
    Invalid(String),
    /// A command failed, with its own words.
    #[error("{cmd}: {msg}")]
    Command {
        /// The command line.
        cmd: String,
        /// What it said (or why it could not run).
        msg: String,
    },
}

fn run(args: &[&str]) -> Result<String, TestbedError> {
    let cmd = args.join(" ");
    let out = Command::new(args[0])
        .args(&args[1..])
        .output()
        .map_err(|e| TestbedError::Command {
            cmd: cmd.clone(),
            msg: format!("{e} (install iproute2, ethtool; run as root)"),
        })?;
    if out.status.success() {
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    } else {
        Err(TestbedError::Command {
            cmd,
            msg: String::from_utf8_lossy(&out.stderr).trim().to_string(),
        })
    }
}

/// Sets a sysctl (`key=value`) inside namespace `netns` (net.* sysctls are
/// per namespace).
fn sysctl_in(netns: &str, setting: &str) -> Result<(), TestbedError> {
    run(&["ip", "netns", "exec", netns, "sysctl", "-qw", setting]).map(drop)
}

/// Writes `value` to `/sys/PATH` as seen inside namespace `netns` (its
/// interfaces' sysfs), e.g. `class/net/va/queues/tx-0/xps_cpus`.
pub fn write_sys(netns: &str, path: &str, value: &str) -> Result<(), TestbedError> {
    if path.contains("..") || path.contains(['\n', '\'']) || value.contains(['\n', '\'']) {
        return Err(TestbedError::Invalid(format!(
            "sysfs write {path}={value}: odd path or value"
        )));
    }
    run(&[
        "ip",
        "netns",
        "exec",
        netns,
        "sh",
        "-c",
        &format!("echo '{value}' > '/sys/{path}'"),
    ])
    .map(drop)
}

/// Waits (up to 5 s) until `iface` in `netns` is operationally up.
fn wait_running(netns: &str, iface: &str) -> Result<(), TestbedError> {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    loop {
        let j = run(&["ip", "-n", netns, "-j", "link", "show", "dev", iface])?;
        let v: serde_json::Value = serde_json::from_str(&j).unwrap_or_default();
        if v[0]["operstate"] == "UP" {
            return Ok(());
        }
        if std::time::Instant::now() >= deadline {
            return Err(TestbedError::Command {
                cmd: format!("ip -n {netns} link show dev {iface}"),
                msg: format!(
                    "{iface} is not running 5 s after `link set up` (operstate {})",
                    v[0]["operstate"]
                ),
            });
        }
        // Polling the kernel's link state: there is no event to wait on here.
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
}

/// Links namespace `netns` to the root namespace: a veth whose root end
/// `ipm<k>` has 10.78.x.y+1/30 and whose [`MGMT_IFACE`] end has y+2, the
/// default route. Blocks are taken under a lock, so testbeds built in
/// parallel get different ones; removing the namespace removes the pair.
fn mgmt_link(netns: &str) -> Result<Ipv4Addr, TestbedError> {
    let lock = "/run/ipoib-eval-mgmt.lock";
    let _held = crate::sys::lock_file(lock, std::time::Duration::from_secs(30)).map_err(|e| {
        TestbedError::Command {
            cmd: format!("locking {lock}"),
            msg: e.to_string(),
        }
    })?;
    // What `ip -j` prints, or an error: read as empty, every block would
    // look free and the next link would take one in use.
    let json = |args: &[&str]| -> Result<serde_json::Value, TestbedError> {
        let out = run(args)?;
        serde_json::from_str(&out).map_err(|e| TestbedError::Command {
            cmd: args.join(" "),
            msg: format!("its output is not JSON ({e})"),
        })
    };
    let used = json(&["ip", "-4", "-j", "addr", "show"])?;
    let taken = |ip: Ipv4Addr| {
        used.as_array().into_iter().flatten().any(|l| {
            l["addr_info"]
                .as_array()
                .into_iter()
                .flatten()
                .any(|a| a["local"].as_str() == Some(&ip.to_string()))
        })
    };
    let block = |k: u16| {
        let [hi, lo] = (k * 4).to_be_bytes();
        Ipv4Addr::new(MGMT_NET[0], MGMT_NET[1], hi, lo)
    };
    let links = json(&["ip", "-j", "link", "show"])?;
    let link_exists = |k: u16| {
        let name = format!("ipm{k}");
        links
            .as_array()
            .into_iter()
            .flatten()
            .any(|l| l["ifname"].as_str() == Some(name.as_str()))
    };
    let k = (0..16384u16)
        .find(|&k| !taken(Ipv4Addr::from(u32::from(block(k)) + 1)) && !link_exists(k))
        .ok_or_else(|| TestbedError::Command {
            cmd: "allocating a management link".into(),
            msg: "all of 10.78.0.0/16 is in use in the root namespace".into(),
        })?;
    let base = u32::from(block(k));
    let (root, host) = (Ipv4Addr::from(base + 1), Ipv4Addr::from(base + 2));
    let root_if = format!("ipm{k}");
    run(&[
        "ip", "link", "add", &root_if, "type", "veth", "peer", "name", MGMT_IFACE, "netns", netns,
    ])?;
    run(&["ip", "addr", "add", &format!("{root}/30"), "dev", &root_if])?;
    run(&["ip", "link", "set", &root_if, "up"])?;
    run(&[
        "ip",
        "-n",
        netns,
        "addr",
        "add",
        &format!("{host}/30"),
        "dev",
        MGMT_IFACE,
    ])?;
    run(&["ip", "-n", netns, "link", "set", MGMT_IFACE, "up"])?;
    wait_running(netns, MGMT_IFACE)?;
    run(&[
        "ip",
        "-n",
        netns,
        "route",
        "add",
        "default",
        "via",
        &root.to_string(),
    ])?;
    Ok(host)
}

/// One end of a veth pair: namespace, interface, address with prefix.
type End<'a> = (String, &'a str, String);

/// One host of a testbed.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Host {
    /// Namespace name.
    pub netns: String,
    /// Interface facing the other host (or the gateway).
    pub iface: String,
    /// Its address.
    pub addr: IpAddr,
    /// Its address on the management link, when there is one.
    #[serde(default)]
    pub mgmt: Option<Ipv4Addr>,
}

/// A testbed that is up; removed on drop.
#[derive(Debug)]
pub struct Testbed {
    spec: TestbedSpec,
    /// The sending-side host (`-a`).
    pub a: Host,
    /// The receiving-side host (`-b`).
    pub b: Host,
    /// The gateway's namespace, when there is one.
    pub gateway: Option<String>,
    /// The outsider (`-x`), when asked for.
    pub outsider: Option<Host>,
    up: bool,
    /// Removes the testbed if the process is interrupted (SIGINT, SIGTERM).
    undo: Option<crate::cleanup::Registered>,
}

fn ns(name: &str, side: &str) -> String {
    format!("{name}-{side}")
}

fn valid_name(name: &str) -> Result<(), TestbedError> {
    let ok = !name.is_empty()
        && name.len() <= 48
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-');
    if ok {
        Ok(())
    } else {
        Err(TestbedError::Invalid(format!(
            "testbed name `{name}` must be 1-48 letters, digits, - or _"
        )))
    }
}

/// Where `ip netns` keeps its named namespaces (one file each).
const NETNS_DIR: &str = "/run/netns";

/// Namespaces that exist now, by name, sorted: what `ip netns list` shows,
/// read from `/run/netns` without starting `ip`.
pub fn namespaces() -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(NETNS_DIR)
        .map(|rd| {
            rd.filter_map(Result::ok)
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default();
    names.sort();
    names
}

/// Moves the calling thread into namespace `name` (threads it starts later
/// inherit it); the error names the namespace and the fix.
pub fn enter(name: &str) -> Result<(), TestbedError> {
    crate::sys::enter_netns(name).map_err(|e| TestbedError::Command {
        cmd: format!("entering network namespace {name}"),
        msg: format!(
            "{e} (list them with `ip netns list`; bring a testbed up with `ipoib-eval testbed up`)"
        ),
    })
}

/// The namespaces of testbed `name` that exist now.
pub fn status(name: &str) -> Vec<String> {
    let prefix = format!("{name}-");
    namespaces()
        .into_iter()
        .filter(|n| {
            n.strip_prefix(&prefix)
                .is_some_and(|s| ["a", "b", "g", "x"].contains(&s))
        })
        .collect()
}

/// Removes testbed `name`: every namespace of it that exists. Idempotent.
pub fn down(name: &str) -> Result<(), TestbedError> {
    valid_name(name)?;
    for n in status(name) {
        remove_ns(&n)?;
    }
    Ok(())
}

/// Removes namespace `n`: its management veth first (the kernel tears a
/// namespace down in the background, and not at all while a process is
/// still inside, so the root end would linger), then the namespace, which
/// takes its veths (and so their peers), addresses, routes and qdiscs.
fn remove_ns(n: &str) -> Result<(), TestbedError> {
    if run(&["ip", "-n", n, "link", "show", "dev", MGMT_IFACE]).is_ok() {
        run(&["ip", "-n", n, "link", "del", MGMT_IFACE])?;
    }
    run(&["ip", "netns", "del", n]).map(drop)
}

/// Removes auto-named testbeds whose owning process is gone.
pub fn sweep_stale() {
    for n in namespaces() {
        let Some(rest) = n.strip_prefix(AUTO) else {
            continue;
        };
        let Some((pid, _)) = rest.split_once('x') else {
            continue;
        };
        let Ok(pid) = pid.parse::<u32>() else {
            continue;
        };
        if !std::path::Path::new(&format!("/proc/{pid}")).exists() {
            let _ = remove_ns(&n);
        }
    }
}

/// `ethtool -K`'s short names for the features `ethtool -k` prints by their
/// long ones (ethtool's `off_flag_def`).
const SHORT_NAMES: [(&str, &str); 12] = [
    ("rx", "rx-checksumming"),
    ("tx", "tx-checksumming"),
    ("sg", "scatter-gather"),
    ("tso", "tcp-segmentation-offload"),
    ("ufo", "udp-fragmentation-offload"),
    ("gso", "generic-segmentation-offload"),
    ("gro", "generic-receive-offload"),
    ("lro", "large-receive-offload"),
    ("rxvlan", "rx-vlan-offload"),
    ("txvlan", "tx-vlan-offload"),
    ("ntuple", "ntuple-filters"),
    ("rxhash", "receive-hashing"),
];

/// The feature names `ethtool -K` takes, from what `ethtool -k` printed:
/// every name listed (groups, their members and fixed ones alike), and
/// the short name of each group listed. Pure.
fn feature_names(text: &str) -> Vec<String> {
    let listed: Vec<String> = crate::ethtool::parse_features(text)
        .into_iter()
        .map(|f| f.name)
        .collect();
    let short = SHORT_NAMES
        .iter()
        .filter(|(_, long)| listed.iter().any(|l| l == long))
        .map(|(s, _)| s.to_string());
    listed.iter().cloned().chain(short).collect()
}

/// Refuses an offload that `ethtool -K` would not know, before anything
/// is made or removed. The kernel has one set of feature names for every
/// device (`ethtool -k` marks the ones a device cannot change `[fixed]`),
/// so `lo` of this namespace answers for veths not made yet.
fn check_offloads(offloads: &[(String, bool)]) -> Result<(), TestbedError> {
    if offloads.is_empty() {
        return Ok(());
    }
    let known = feature_names(&run(&["ethtool", "-k", "lo"])?);
    match offloads.iter().find(|(f, _)| !known.contains(f)) {
        Some((f, _)) => Err(TestbedError::Invalid(format!(
            "offload `{}`: no such feature; give one that `ethtool -k` lists, such as \
             rx-udp-gro-forwarding, or a short name: gro, gso, tso, sg, rx, tx",
            f.escape_default()
        ))),
        None => Ok(()),
    }
}

impl Testbed {
    /// Builds the testbed; on any failure, removes what it made and says
    /// which command failed.
    pub fn up(spec: TestbedSpec) -> Result<Testbed, TestbedError> {
        valid_name(&spec.name)?;
        let bad = TestbedError::Invalid;
        if spec.queues == 0 || spec.queues > 256 {
            return Err(bad(format!(
                "--queues must be 1 to 256, got {}",
                spec.queues
            )));
        }
        for m in [spec.mtu, spec.mtu_b] {
            if !(68..=65535).contains(&m) {
                return Err(bad(format!("--mtu must be 68 to 65535, got {m}")));
            }
        }
        if spec.outsider && !spec.gateway {
            return Err(bad(
                "an outsider sits behind the gateway: ask for the gateway too".into(),
            ));
        }
        check_offloads(&spec.offloads)?;
        sweep_stale();
        down(&spec.name)?;
        let name = spec.name.clone();
        let (a, b, g) = (ns(&name, "a"), ns(&name, "b"), ns(&name, "g"));
        let mut tb = Testbed {
            a: Host {
                netns: a.clone(),
                iface: "va".into(),
                addr: IpAddr::V4(Ipv4Addr::new(10, 77, 1, 1)),
                mgmt: None,
            },
            b: Host {
                netns: b.clone(),
                iface: "vb".into(),
                addr: IpAddr::V4(if spec.gateway {
                    Ipv4Addr::new(10, 77, 2, 2)
                } else {
                    Ipv4Addr::new(10, 77, 1, 2)
                }),
                mgmt: None,
            },
            gateway: spec.gateway.then(|| g.clone()),
            outsider: spec.outsider.then(|| Host {
                netns: ns(&name, "x"),
                iface: "vx".into(),
                addr: IpAddr::V4(Ipv4Addr::new(10, 77, 3, 2)),
                mgmt: None,
            }),
            spec,
            up: true,
            undo: Some(crate::cleanup::register(move || {
                let _ = down(&name);
            })),
        };
        // From here on, a failure drops `tb`, which removes what exists.
        tb.build()?;
        Ok(tb)
    }

    fn build(&mut self) -> Result<(), TestbedError> {
        let s = self.spec.clone();
        let mut all = vec![self.a.netns.clone(), self.b.netns.clone()];
        all.extend(self.gateway.clone());
        all.extend(self.outsider.as_ref().map(|x| x.netns.clone()));
        for n in &all {
            // Under the gate: an interrupt's undo (removing the testbed's
            // namespaces) sees every namespace made, and none is made after.
            let gate = crate::cleanup::gate().map_err(|e| TestbedError::Command {
                cmd: format!("ip netns add {n}"),
                msg: e.to_string(),
            })?;
            run(&["ip", "netns", "add", n])?;
            drop(gate);
            if !s.ipv6 {
                // Before any link exists, so no link-local address appears.
                for k in ["all", "default"] {
                    sysctl_in(n, &format!("net.ipv6.conf.{k}.disable_ipv6=1"))?;
                }
            }
            run(&["ip", "-n", n, "link", "set", "lo", "up"])?;
        }
        if s.mgmt {
            // Before the data links: libfabric's socket providers list the
            // newest interface first, so an unnamed domain stays on the data link.
            self.a.mgmt = Some(mgmt_link(&self.a.netns)?);
            self.b.mgmt = Some(mgmt_link(&self.b.netns)?);
        }
        let q = s.queues.to_string();
        // (namespace, iface, address) for both ends of each link, and the MTU.
        let links: Vec<(End, End, u32)> = match &self.gateway {
            None => vec![(
                (self.a.netns.clone(), "va", "10.77.1.1/24".into()),
                (self.b.netns.clone(), "vb", "10.77.1.2/24".into()),
                s.mtu,
            )],
            Some(g) => {
                let mut v = vec![
                    (
                        (self.a.netns.clone(), "va", "10.77.1.1/24".into()),
                        (g.clone(), "ga", "10.77.1.2/24".into()),
                        s.mtu,
                    ),
                    (
                        (g.clone(), "gb", "10.77.2.1/24".into()),
                        (self.b.netns.clone(), "vb", "10.77.2.2/24".into()),
                        s.mtu_b,
                    ),
                ];
                if let Some(x) = &self.outsider {
                    v.push((
                        (g.clone(), "gx", "10.77.3.1/24".into()),
                        (x.netns.clone(), "vx", "10.77.3.2/24".into()),
                        1500,
                    ));
                }
                v
            }
        };
        for ((n1, i1, a1), (n2, i2, a2), mtu) in &links {
            run(&[
                "ip",
                "-n",
                n1,
                "link",
                "add",
                i1,
                "numtxqueues",
                &q,
                "numrxqueues",
                &q,
                "type",
                "veth",
                "peer",
                "name",
                i2,
                "numtxqueues",
                &q,
                "numrxqueues",
                &q,
                "netns",
                n2,
            ])?;
            for (n, i, a) in [(n1, i1, a1), (n2, i2, a2)] {
                run(&["ip", "-n", n, "addr", "add", a, "dev", i])?;
                run(&["ip", "-n", n, "link", "set", i, "mtu", &mtu.to_string()])?;
                if let Some(l) = s.txqueuelen {
                    run(&[
                        "ip",
                        "-n",
                        n,
                        "link",
                        "set",
                        i,
                        "txqueuelen",
                        &l.to_string(),
                    ])?;
                }
                for (f, on) in &s.offloads {
                    run(&[
                        "ip",
                        "netns",
                        "exec",
                        n,
                        "ethtool",
                        "-K",
                        i,
                        f,
                        if *on { "on" } else { "off" },
                    ])?;
                }
                if let Some(qd) = &s.qdisc {
                    run(&[
                        "ip", "netns", "exec", n, "tc", "qdisc", "replace", "dev", i, "root", qd,
                    ])?;
                }
                run(&["ip", "-n", n, "link", "set", i, "up"])?;
            }
        }
        // `link set up` returns before the kernel marks a veth running (its
        // linkwatch runs later); programs that list interfaces, such as
        // libfabric's socket providers, skip it until then.
        for ((n1, i1, _), (n2, i2, _), _) in &links {
            wait_running(n1, i1)?;
            wait_running(n2, i2)?;
        }
        if let Some(g) = &self.gateway {
            sysctl_in(g, "net.ipv4.ip_forward=1")?;
            run(&[
                "ip",
                "-n",
                &self.a.netns,
                "route",
                "add",
                "10.77.2.0/24",
                "via",
                "10.77.1.2",
            ])?;
            run(&[
                "ip",
                "-n",
                &self.b.netns,
                "route",
                "add",
                "10.77.1.0/24",
                "via",
                "10.77.2.1",
            ])?;
            if let Some(x) = &self.outsider {
                for (n, via) in [(&self.a.netns, "10.77.1.2"), (&self.b.netns, "10.77.2.1")] {
                    run(&["ip", "-n", n, "route", "add", "10.77.3.0/24", "via", via])?;
                }
                run(&[
                    "ip",
                    "-n",
                    &x.netns,
                    "route",
                    "add",
                    "default",
                    "via",
                    "10.77.3.1",
                ])?;
            }
        }
        Ok(())
    }

    /// The settings it was built with.
    pub fn spec(&self) -> &TestbedSpec {
        &self.spec
    }

    /// Removes everything now (also done on drop).
    pub fn down(&mut self) -> Result<(), TestbedError> {
        if !self.up {
            return Ok(());
        }
        self.up = false;
        down(&self.spec.name)
    }

    /// Leaves the testbed up after this value is gone (for `testbed up`).
    pub fn keep(mut self) {
        self.up = false;
        self.undo = None;
    }
}

impl Drop for Testbed {
    fn drop(&mut self) {
        if let Err(e) = self.down() {
            eprintln!("ipoib-eval: removing testbed {}: {e}", self.spec.name);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_checked_and_unique() {
        assert!(valid_name("fk").is_ok());
        for bad in ["", "a b", "x/y", &"n".repeat(49)] {
            assert!(valid_name(bad).is_err(), "{bad}");
        }
        let (x, y) = (auto_name(), auto_name());
        assert_ne!(x, y);
        assert!(x.starts_with(&format!("{AUTO}{}x", std::process::id())));
    }

    #[test]
    fn feature_names_are_every_listed_one_and_the_short_names_of_groups() {
        let t = "Features for lo:\nrx-checksumming: on [fixed]\ntx-checksumming: on\n\
                 \ttx-checksum-ipv4: off [fixed]\ngeneric-receive-offload: on\n\
                 rx-udp-gro-forwarding: off\nloopback: on [fixed]\n";
        let names = feature_names(t);
        for known in [
            "rx-checksumming",
            "tx-checksum-ipv4",
            "generic-receive-offload",
            "rx-udp-gro-forwarding",
            "loopback",
            "rx",
            "tx",
            "gro",
        ] {
            assert!(names.iter().any(|n| n == known), "{known}: {names:?}");
        }
        // Short names of groups not listed (UFO left the kernel), the
        // header's words and made-up names are not features.
        for unknown in ["ufo", "tso", "Features for lo", "bogus", ""] {
            assert!(!names.iter().any(|n| n == unknown), "{unknown}: {names:?}");
        }
    }

    #[test]
    fn bounds_are_refused_before_anything_is_made() {
        let s = TestbedSpec {
            queues: 0,
            ..TestbedSpec::default()
        };
        assert!(Testbed::up(s).unwrap_err().to_string().contains("queues"));
        let s = TestbedSpec {
            mtu: 70000,
            ..TestbedSpec::default()
        };
        assert!(Testbed::up(s).unwrap_err().to_string().contains("--mtu"));
    }
}
