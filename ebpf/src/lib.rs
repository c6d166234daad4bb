//! Per-queue views of an interface, in eBPF: packets and bytes per TX queue
//! and per RX queue, wire segments per TX queue, and histograms of packet
//! sizes and of GSO segment counts, for the flows being measured only.
//!
//! The programs are C (`bpf/queues.c`), built by clang in `build.rs` and
//! loaded with aya. Where they count, and what that means:
//!
//! - **TX** at the `net:net_dev_start_xmit` tracepoint: after the TX queue
//!   is chosen, so the queue is the one the packet really took. A GSO
//!   super-packet is one packet there with its segment count (its
//!   `segments`); the size histogram shows the super-packets.
//! - **RX** at `net:netif_receive_skb`: every received packet, whatever path
//!   it took, with its queue. A NIC driver records the RX queue in the skb
//!   (as queue + 1); packets it recorded none for are counted under
//!   [`QueueCounts::rx_unrecorded`]. veth records nothing: the skb keeps
//!   the sender's TX queue N, which is the receiver's RX queue N (and the
//!   NAPI instance that takes it when GRO is on), so on veth that is the
//!   RX queue reported. A GRO super-packet counts once.
//!
//! Tracepoints hold no state on the interface: nothing stays attached
//! when the [`QueueView`] is dropped or the process dies (the kernel drops
//! the links with the file descriptors). tracefs is mounted at
//! `/sys/kernel/tracing` if it is not (and left mounted: it is where the
//! kernel expects it).

use std::net::Ipv4Addr;
use std::path::Path;

use aya::maps::{Array, MapData, PerCpuArray};
use aya::programs::{SchedClassifier, TcAttachType, TracePoint};
use aya::Ebpf;
use serde::{Deserialize, Serialize};

/// Queues counted one by one (as in `bpf/queues.c`); higher ones share the
/// last slot.
pub const QUEUES: usize = 64;
const SIZE_BUCKETS: u32 = 18;
const SEGS_BUCKETS: u32 = 17;
/// Flow rules at most.
pub const RULES: usize = 8;

/// Why a view could not be made or read.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The interface or namespace does not exist.
    #[error("{0}")]
    NotFound(String),
    /// Loading or attaching failed (not root, no BPF, no tracefs, ...).
    #[error("{what}: {msg}")]
    Kernel {
        /// What was being done.
        what: String,
        /// The kernel's or loader's words, with the likely fix.
        msg: String,
    },
    /// A setting is out of bounds.
    #[error("{0}")]
    Invalid(String),
}

type Result<T> = std::result::Result<T, Error>;

/// An interface in a network namespace.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct Iface {
    /// Interface index (within its namespace).
    pub ifindex: u32,
    /// Inode number of its network namespace.
    pub netns: u32,
    /// A veth: received packets carry the peer's TX queue, not a recorded
    /// RX queue.
    pub veth: bool,
}

impl Iface {
    /// Interface `name` in namespace `netns` (`ip netns` name), or in this
    /// thread's namespace when `None`.
    pub fn lookup(netns: Option<&str>, name: &str) -> Result<Iface> {
        let ns_path = match netns {
            Some(n) => format!("/run/netns/{n}"),
            None => "/proc/thread-self/ns/net".into(),
        };
        let meta = std::fs::metadata(&ns_path).map_err(|e| {
            Error::NotFound(format!(
                "network namespace {ns_path}: {e} (see `ip netns list`)"
            ))
        })?;
        let mut cmd = std::process::Command::new("ip");
        if let Some(n) = netns {
            cmd.args(["-n", n]);
        }
        let out = cmd
            .args(["-d", "-j", "link", "show", "dev", name])
            .output()
            .map_err(|e| Error::NotFound(format!("running ip: {e} (install iproute2)")))?;
        let (ifindex, veth) = parse_link(&String::from_utf8_lossy(&out.stdout))
            .filter(|_| out.status.success())
            .ok_or_else(|| {
                Error::NotFound(format!(
                    "no interface {name} in {}: {}",
                    netns.unwrap_or("this namespace"),
                    String::from_utf8_lossy(&out.stderr).trim()
                ))
            })?;
        let netns = u32::try_from(std::os::unix::fs::MetadataExt::ino(&meta))
            .map_err(|_| Error::Invalid(format!("{ns_path}: inode does not fit 32 bits")))?;
        Ok(Iface {
            ifindex,
            netns,
            veth,
        })
    }
}

/// An interface as `ip -d -j link show` lists it (the fields read here).
#[derive(Debug, Deserialize)]
struct IpLink {
    ifindex: u32,
    #[serde(default)]
    linkinfo: Option<LinkInfo>,
}

/// `linkinfo` of `ip -d -j link show`.
#[derive(Debug, Deserialize)]
struct LinkInfo {
    #[serde(default)]
    info_kind: Option<String>,
}

/// Parses `ip -d -j link show dev NAME`: the interface's index, and
/// whether it is a veth. Pure.
fn parse_link(json: &str) -> Option<(u32, bool)> {
    let listed: Vec<IpLink> = serde_json::from_str(json).ok()?;
    let link = listed.into_iter().next()?;
    let kind = link.linkinfo.and_then(|i| i.info_kind);
    Some((link.ifindex, kind.as_deref() == Some("veth")))
}

/// Which packets count: IPv4 flows matching in either direction; `None`
/// or 0 fields match anything.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct Rule {
    /// IP protocol number (6 TCP, 17 UDP); 0: any.
    pub proto: u8,
    /// One end's address.
    pub addr_a: Option<Ipv4Addr>,
    /// The other end's address.
    pub addr_b: Option<Ipv4Addr>,
    /// One end's port; 0: any.
    pub port_a: u16,
    /// The other end's port; 0: any.
    pub port_b: u16,
}

/// `struct rule` of bpf/queues.c.
#[repr(C)]
#[derive(Clone, Copy, Default)]
struct RawRule {
    proto: u8,
    pad: [u8; 3],
    addr_a: u32,
    addr_b: u32,
    port_a: u16,
    port_b: u16,
}

/// `struct config` of bpf/queues.c.
#[repr(C)]
#[derive(Clone, Copy, Default)]
struct RawConfig {
    ifindex: u32,
    netns: u32,
    nrules: u32,
    pad: u32,
    rules: [RawRule; RULES],
}

/// `struct counter` of bpf/queues.c.
#[repr(C)]
#[derive(Clone, Copy, Default, Debug)]
struct RawCounter {
    packets: u64,
    bytes: u64,
    segments: u64,
}

// SAFETY: plain C structs of integers, no padding bytes left uninitialised
// (explicit pad fields), valid for any bit pattern.
unsafe impl aya::Pod for RawConfig {}
// SAFETY: as above.
unsafe impl aya::Pod for RawCounter {}

/// Packets through one queue.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct QueueCount {
    /// Packets (a GSO or GRO super-packet is one).
    pub packets: u64,
    /// Bytes, as the stack saw them (L2 on TX, L3 on RX).
    pub bytes: u64,
    /// Wire packets: GSO segments on TX; packets on RX.
    pub segments: u64,
}

/// A reading of the counters since the view was attached.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct QueueCounts {
    /// Per TX queue (index = queue; the last slot also holds higher ones).
    pub tx: Vec<QueueCount>,
    /// Per RX queue as recorded by the driver.
    pub rx: Vec<QueueCount>,
    /// Received packets with no queue recorded.
    pub rx_unrecorded: QueueCount,
    /// TX packets by size: bucket `i` holds sizes in `[2^i, 2^(i+1))`
    /// (bucket 0 also 0..1; the last holds everything above).
    pub tx_size_log2: Vec<u64>,
    /// TX packets by GSO segment count, log2 buckets as above.
    pub tx_segs_log2: Vec<u64>,
    /// RX packets by size, log2 buckets.
    pub rx_size_log2: Vec<u64>,
}

impl std::ops::AddAssign for QueueCount {
    fn add_assign(&mut self, o: QueueCount) {
        self.packets += o.packets;
        self.bytes += o.bytes;
        self.segments += o.segments;
    }
}

impl QueueCounts {
    /// Sum over the TX queues.
    pub fn tx_total(&self) -> QueueCount {
        sum(&self.tx)
    }

    /// Sum over the RX queues and the unrecorded.
    pub fn rx_total(&self) -> QueueCount {
        let mut t = sum(&self.rx);
        t += self.rx_unrecorded;
        t
    }
}

fn sum(q: &[QueueCount]) -> QueueCount {
    q.iter().fold(QueueCount::default(), |mut a, c| {
        a += *c;
        a
    })
}

/// The programs (their names as the kernel lists them) and their tracepoints.
pub const PROGRAMS: [(&str, &str); 2] = [
    ("fabkit_q_tx", "net_dev_start_xmit"),
    ("fabkit_q_rx", "netif_receive_skb"),
];

static OBJECT: &[u8] = aya::include_bytes_aligned!(concat!(env!("OUT_DIR"), "/queues.o"));
static RR_OBJECT: &[u8] = aya::include_bytes_aligned!(concat!(env!("OUT_DIR"), "/rr.o"));

/// The programs, attached to one interface; detached on drop.
#[derive(Debug)]
pub struct QueueView {
    bpf: Ebpf,
    iface: Iface,
    queues: usize,
}

fn kernel(what: &str) -> impl Fn(String) -> Error + '_ {
    move |msg| Error::Kernel {
        what: what.to_string(),
        msg,
    }
}

/// Mounts tracefs at /sys/kernel/tracing when nothing is mounted there
/// (a fresh machine): aya finds tracepoints' ids through it.
fn ensure_tracefs() -> Result<()> {
    let dir = Path::new("/sys/kernel/tracing");
    if dir.join("events").exists() || Path::new("/sys/kernel/debug/tracing/events").exists() {
        return Ok(());
    }
    // SAFETY: NUL-terminated literals; no data argument.
    let rc = unsafe {
        libc::mount(
            c"nodev".as_ptr(),
            c"/sys/kernel/tracing".as_ptr(),
            c"tracefs".as_ptr(),
            0,
            std::ptr::null(),
        )
    };
    if rc != 0 {
        return Err(Error::Kernel {
            what: "mounting tracefs at /sys/kernel/tracing".into(),
            msg: format!(
                "{} (run as root, or mount it: mount -t tracefs nodev /sys/kernel/tracing)",
                std::io::Error::last_os_error()
            ),
        });
    }
    Ok(())
}

impl QueueView {
    /// Loads the programs, counts packets on `iface` matching `rules`
    /// (none: every packet on it), reporting `queues` queues, and attaches.
    pub fn attach(iface: Iface, rules: &[Rule], queues: usize) -> Result<QueueView> {
        if rules.len() > RULES {
            return Err(Error::Invalid(format!(
                "at most {RULES} flow rules, got {}",
                rules.len()
            )));
        }
        if queues == 0 || queues > QUEUES {
            return Err(Error::Invalid(format!(
                "queues must be 1 to {QUEUES}, got {queues}"
            )));
        }
        ensure_tracefs()?;
        let mut bpf = Ebpf::load(OBJECT).map_err(|e| {
            kernel("loading the eBPF object")(format!(
                "{e} (needs root, BPF and BTF at /sys/kernel/btf/vmlinux)"
            ))
        })?;
        let mut cfg = RawConfig {
            ifindex: iface.ifindex,
            netns: iface.netns,
            nrules: rules.len() as u32,
            ..RawConfig::default()
        };
        for (raw, r) in cfg.rules.iter_mut().zip(rules) {
            *raw = RawRule {
                proto: r.proto,
                pad: [0; 3],
                addr_a: r.addr_a.map_or(0, |a| u32::from_ne_bytes(a.octets())),
                addr_b: r.addr_b.map_or(0, |a| u32::from_ne_bytes(a.octets())),
                port_a: r.port_a.to_be(),
                port_b: r.port_b.to_be(),
            };
        }
        {
            let map = bpf
                .map_mut("config")
                .ok_or_else(|| kernel("finding map config")("not in the object".into()))?;
            let mut arr: Array<&mut MapData, RawConfig> =
                Array::try_from(map).map_err(|e| kernel("opening map config")(e.to_string()))?;
            arr.set(0, cfg, 0)
                .map_err(|e| kernel("writing map config")(e.to_string()))?;
        }
        for (prog, event) in PROGRAMS {
            let what = format!("attaching to tracepoint net:{event}");
            let p: &mut TracePoint = bpf
                .program_mut(prog)
                .ok_or_else(|| kernel(&what)("program not in the object".into()))?
                .try_into()
                .map_err(|e: aya::programs::ProgramError| kernel(&what)(e.to_string()))?;
            p.load().map_err(|e| kernel(&what)(verifier(e)))?;
            p.attach("net", event)
                .map_err(|e| kernel(&what)(e.to_string()))?;
        }
        Ok(QueueView { bpf, iface, queues })
    }

    /// The interface watched.
    pub fn iface(&self) -> Iface {
        self.iface
    }

    /// Reads the counters (summed over CPUs).
    pub fn read(&self) -> Result<QueueCounts> {
        let counters = |name: &str, n: usize| -> Result<Vec<QueueCount>> {
            let map = self
                .bpf
                .map(name)
                .ok_or_else(|| kernel("reading")(format!("map {name} not in the object")))?;
            let arr: PerCpuArray<&MapData, RawCounter> = PerCpuArray::try_from(map)
                .map_err(|e| kernel("reading")(format!("map {name}: {e}")))?;
            (0..n as u32)
                .map(|i| {
                    let v = arr
                        .get(&i, 0)
                        .map_err(|e| kernel("reading")(format!("map {name}[{i}]: {e}")))?;
                    Ok(v.iter().fold(QueueCount::default(), |mut a, c| {
                        a += QueueCount {
                            packets: c.packets,
                            bytes: c.bytes,
                            segments: c.segments,
                        };
                        a
                    }))
                })
                .collect()
        };
        let hist = |name: &str, n: u32| -> Result<Vec<u64>> {
            let map = self
                .bpf
                .map(name)
                .ok_or_else(|| kernel("reading")(format!("map {name} not in the object")))?;
            let arr: PerCpuArray<&MapData, u64> = PerCpuArray::try_from(map)
                .map_err(|e| kernel("reading")(format!("map {name}: {e}")))?;
            (0..n)
                .map(|i| {
                    arr.get(&i, 0)
                        .map(|v| v.iter().sum())
                        .map_err(|e| kernel("reading")(format!("map {name}[{i}]: {e}")))
                })
                .collect()
        };
        let mut tx = counters("tx_queues", QUEUES)?;
        let rx_all = counters("rx_queues", QUEUES + 1)?;
        let (rx_unrecorded, mut rx) = if self.iface.veth {
            (QueueCount::default(), rx_all.clone())
        } else {
            (rx_all[0], rx_all[1..].to_vec())
        };
        // Fold what lies beyond the reported queues into the last one, so
        // nothing counted is dropped from the totals.
        for q in [&mut tx, &mut rx] {
            let extra = sum(&q[self.queues..]);
            q.truncate(self.queues);
            *q.last_mut().expect("queues >= 1") += extra;
        }
        Ok(QueueCounts {
            tx,
            rx,
            rx_unrecorded,
            tx_size_log2: hist("tx_sizes", SIZE_BUCKETS)?,
            tx_segs_log2: hist("tx_segs", SEGS_BUCKETS)?,
            rx_size_log2: hist("rx_sizes", SIZE_BUCKETS)?,
        })
    }
}

/// A load error with the verifier's log, which says why.
fn verifier(e: aya::programs::ProgramError) -> String {
    match e {
        aya::programs::ProgramError::LoadError {
            io_error,
            verifier_log,
        } => {
            format!("{io_error}; verifier: {verifier_log}")
        }
        other => other.to_string(),
    }
}

/// The round-robin selector's program name (as the kernel lists it).
pub const RR_PROGRAM: &str = "fabkit_rr";

/// Round-robin TX queue selection on one interface (`bpf/rr.c`): a tc
/// egress program (TCX) deals packets out over the queues in turn, per
/// CPU. It reaches only packets whose queue the kernel still chooses: XPS
/// must be cleared (the caller's job), and a socket that cached a queue
/// keeps it unless the packet may move (TCP: none of its data held by the
/// host, which on veth is nearly always). Per packet it works for
/// unconnected UDP; connected UDP stays on one queue. Check with a
/// [`QueueView`]. Detached on drop (the TCX link is a file descriptor; the
/// kernel drops it with the process too).
#[derive(Debug)]
pub struct RoundRobin {
    _bpf: Ebpf,
}

/// Runs `f` on a thread of its own inside network namespace `netns`
/// (`None`: this one); the caller's namespace is untouched.
fn in_netns<T: Send>(netns: Option<&str>, f: impl FnOnce() -> Result<T> + Send) -> Result<T> {
    let Some(ns) = netns else { return f() };
    std::thread::scope(|s| {
        s.spawn(|| {
            let file = std::fs::File::open(format!("/run/netns/{ns}"))
                .map_err(|e| Error::NotFound(format!("network namespace {ns}: {e}")))?;
            use std::os::fd::AsRawFd;
            // SAFETY: file is an open namespace file for the duration of the call.
            if unsafe { libc::setns(file.as_raw_fd(), libc::CLONE_NEWNET) } != 0 {
                return Err(kernel(&format!("entering network namespace {ns}"))(
                    std::io::Error::last_os_error().to_string(),
                ));
            }
            f()
        })
        .join()
        .unwrap_or_else(|_| Err(Error::Invalid("the attaching thread panicked".into())))
    })
}

impl RoundRobin {
    /// Loads the selector and attaches it to the egress of interface `name`
    /// in namespace `netns` (`ip netns` name; `None`: this one), dealing
    /// packets over `queues` queues.
    pub fn attach(netns: Option<&str>, name: &str, queues: usize) -> Result<Self> {
        if queues == 0 || queues > QUEUES {
            return Err(Error::Invalid(format!(
                "queues must be 1 to {QUEUES}, got {queues}"
            )));
        }
        let what = format!("attaching the round-robin selector to {name} (tc egress)");
        let mut bpf = Ebpf::load(RR_OBJECT)
            .map_err(|e| kernel("loading the round-robin object")(e.to_string()))?;
        {
            let map = bpf
                .map_mut("rr_state")
                .ok_or_else(|| kernel(&what)("map rr_state not in the object".into()))?;
            let mut arr: PerCpuArray<&mut MapData, [u32; 2]> =
                PerCpuArray::try_from(map).map_err(|e| kernel(&what)(e.to_string()))?;
            let cpus = aya::util::nr_cpus().map_err(|(_, e)| kernel(&what)(e.to_string()))?;
            let per_cpu = aya::maps::PerCpuValues::try_from(vec![[queues as u32, 0]; cpus])
                .map_err(|e| kernel(&what)(e.to_string()))?;
            arr.set(0, per_cpu, 0)
                .map_err(|e| kernel(&what)(e.to_string()))?;
        }
        let p: &mut SchedClassifier = bpf
            .program_mut(RR_PROGRAM)
            .ok_or_else(|| kernel(&what)("program not in the object".into()))?
            .try_into()
            .map_err(|e: aya::programs::ProgramError| kernel(&what)(e.to_string()))?;
        p.load().map_err(|e| kernel(&what)(verifier(e)))?;
        // TCX (Linux 6.6+) only: its link is a file descriptor, gone with
        // this value or the process. The netlink filters of older kernels
        // would outlive both, and be detached from the wrong namespace.
        in_netns(netns, || {
            p.attach_with_options(
                name,
                TcAttachType::Egress,
                aya::programs::tc::TcAttachOptions::TcxOrder(aya::programs::LinkOrder::default()),
            )
            .map(|_| ())
            .map_err(|e| {
                kernel(&what)(format!(
                    "{e} (round-robin needs TCX links, Linux 6.6 or later, and root)"
                ))
            })
        })?;
        Ok(RoundRobin { _bpf: bpf })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ip_link_gives_the_index_and_the_kind() {
        let veth = r#"[{"ifindex":7,"link_index":6,"ifname":"va","flags":["UP"],"mtu":1500,
            "linkinfo":{"info_kind":"veth"},"num_tx_queues":4}]"#;
        assert_eq!(parse_link(veth), Some((7, true)));
        let lo = r#"[{"ifindex":1,"ifname":"lo","mtu":65536}]"#;
        assert_eq!(parse_link(lo), Some((1, false)));
        let slave = r#"[{"ifindex":3,"linkinfo":{"info_slave_kind":"bridge"}}]"#;
        assert_eq!(parse_link(slave), Some((3, false)));
        assert_eq!(parse_link("[]"), None);
        assert_eq!(parse_link("Device \"x\" does not exist."), None);
    }
}
