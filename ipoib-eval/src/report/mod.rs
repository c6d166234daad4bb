//! What a test measured, as each end saw it ([`SideReport`]) and as the
//! client puts both together ([`Report`], the JSON schema `ipoib-eval/1`
//! documented field by field in docs/ipoib-eval.md), plus its text form
//! ([`Report::text`]) and its CSV rows ([`row`]). Pure: assembling and
//! formatting do no I/O.

use serde::{Deserialize, Serialize};

use crate::send::ZcStats;
use crate::spec::{Proto, TestSpec};
use crate::stats::iface::{Counters, IfaceInfo};
use crate::stats::{self, CpuTime, Cycles};

pub mod row;
mod text;

pub use row::CsvRow;

/// Name and version of the JSON schema.
pub const SCHEMA: &str = "ipoib-eval/1";

/// Facts about one end, so a report can say where each figure came from.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct HostInfo {
    /// Host name.
    pub hostname: String,
    /// `uname -r`.
    pub kernel: String,
    /// `/proc/sys/kernel/random/boot_id`: two ends with the same one share a
    /// machine (and so its CPU counters).
    pub boot_id: String,
    /// The network namespace (`net:[inode]`).
    pub netns: String,
    /// ipoib-eval version.
    pub version: String,
}

/// One interval sample of one stream on one end.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Interval {
    /// Seconds since the start.
    pub start_s: f64,
    /// Seconds since the start.
    pub end_s: f64,
    /// Bytes in the interval.
    pub bytes: u64,
    /// Messages in the interval.
    pub msgs: u64,
    /// UDP receiver: sequence numbers skipped in the interval (loss as seen
    /// so far; late arrivals make it smaller later).
    pub gaps: u64,
    /// TCP sender: segments retransmitted in the interval.
    pub retransmits: u64,
}

/// Request/response latency of one stream, microseconds.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Latency {
    /// Transactions measured.
    pub count: u64,
    /// Smallest.
    pub min_us: f64,
    /// Mean.
    pub mean_us: f64,
    /// Median.
    pub p50_us: f64,
    /// 90th percentile.
    pub p90_us: f64,
    /// 99th percentile.
    pub p99_us: f64,
    /// 99.9th percentile.
    pub p999_us: f64,
    /// Largest.
    pub max_us: f64,
}

/// A socket buffer size: asked, granted, and how.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct BufSize {
    /// Bytes asked for with `-w`.
    pub asked: usize,
    /// Bytes the kernel reports (it doubles the request for bookkeeping).
    pub got: usize,
    /// `SO_*BUFFORCE` was needed past `net.core.[rw]mem_max` (root only).
    pub forced: bool,
}

/// Whether an end sent or received on a stream.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    /// This end sent.
    #[default]
    Sender,
    /// This end received.
    Receiver,
}

/// One stream as one end measured it.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct StreamSide {
    /// Stream id (shared by both ends).
    pub id: u16,
    /// Sender or receiver.
    pub role: Role,
    /// Messages sent or received (TCP: bytes / `-l`).
    pub msgs: u64,
    /// Bytes sent or received.
    pub bytes: u64,
    /// From the start until the last message was sent or received.
    pub seconds: f64,
    /// UDP receiver: messages that came after a later one.
    pub reordered: u64,
    /// UDP receiver: datagrams that were not this stream's.
    pub foreign: u64,
    /// TCP sender: retransmitted segments (`TCP_INFO`).
    pub retransmits: Option<u64>,
    /// User CPU seconds of this stream's thread.
    pub user_s: f64,
    /// System CPU seconds of this stream's thread.
    pub sys_s: f64,
    /// CPU the thread was pinned to.
    pub cpu: Option<usize>,
    /// Socket buffer, if `-w` asked for one.
    pub buffer: Option<BufSize>,
    /// Zerocopy sender: sends, completions, copies.
    pub zerocopy: Option<ZcStats>,
    /// Request/response client: latency.
    pub latency: Option<Latency>,
    /// Interval samples.
    pub intervals: Vec<Interval>,
}

/// Everything one end measured.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct SideReport {
    /// The host.
    pub host: HostInfo,
    /// Local address of the data sockets.
    pub addr: String,
    /// The interface holding that address, and its settings at the start.
    pub iface: IfaceInfo,
    /// That interface's counters over the run.
    pub wire: Counters,
    /// Wall seconds the counters cover.
    pub wall_s: f64,
    /// CPU over the run: the stream threads' rusage, the machine's /proc/stat.
    pub cpu: CpuTime,
    /// Clock rate used for cycles, Hz.
    pub clock_hz: f64,
    /// Where the clock rate came from.
    pub clock_source: String,
    /// Request/response (client): latency over all streams, from their
    /// merged histograms.
    pub latency: Option<Latency>,
    /// Each stream this end took part in.
    pub streams: Vec<StreamSide>,
    /// Anything the figures should be read with.
    pub warnings: Vec<String>,
}

/// One stream with both ends' figures.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct StreamSummary {
    /// Stream id.
    pub id: u16,
    /// `client->server` or `server->client`.
    pub direction: String,
    /// Messages the sender sent.
    pub sent_msgs: u64,
    /// Messages the receiver received (UDP: each datagram or GRO segment once).
    pub received_msgs: u64,
    /// Bytes received.
    pub received_bytes: u64,
    /// Receiver's seconds.
    pub seconds: f64,
    /// Received Gbit/s (payload).
    pub gbit_s: f64,
    /// Received messages per second.
    pub msgs_per_s: f64,
    /// 1 - received/sent.
    pub loss: f64,
    /// Received after a later message.
    pub reordered: u64,
    /// TCP retransmits at the sender.
    pub retransmits: Option<u64>,
}

/// One direction's totals.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Totals {
    /// `client->server` or `server->client`.
    pub direction: String,
    /// Streams.
    pub streams: usize,
    /// Messages sent.
    pub sent_msgs: u64,
    /// Messages received.
    pub received_msgs: u64,
    /// Bytes received.
    pub received_bytes: u64,
    /// Longest receiver's seconds.
    pub seconds: f64,
    /// Received Gbit/s.
    pub gbit_s: f64,
    /// Received messages per second.
    pub msgs_per_s: f64,
    /// 1 - received/sent.
    pub loss: f64,
    /// At least 99.9 % received.
    pub lossless: bool,
    /// Reordered messages.
    pub reordered: u64,
    /// TCP retransmits.
    pub retransmits: Option<u64>,
}

/// One end's interface counters as rates.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Wire {
    /// `client` or `server`.
    pub side: String,
    /// Interface.
    pub iface: String,
    /// Packets sent per second.
    pub tx_pps: f64,
    /// Packets received per second.
    pub rx_pps: f64,
    /// The raw counters over the run.
    pub counters: Counters,
}

/// A whole test: settings, both ends, and what follows from them.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Report {
    /// [`SCHEMA`].
    pub schema: String,
    /// The command line.
    pub command: String,
    /// The ipoib-eval commit.
    pub commit: String,
    /// Unix time of the start.
    pub started_unix: u64,
    /// The test as run.
    pub spec: TestSpec,
    /// Server address as the client reached it.
    pub server_addr: String,
    /// Both ends ran on one machine (same boot id): CPU is counted once.
    pub same_host: bool,
    /// The client's measurements.
    pub client: SideReport,
    /// The server's measurements.
    pub server: SideReport,
    /// Per stream, both ends.
    pub streams: Vec<StreamSummary>,
    /// Per direction.
    pub totals: Vec<Totals>,
    /// Interface packets per second, per end (every packet on the
    /// interface, the control connection and other traffic included).
    pub wire: Vec<Wire>,
    /// Messages received per packet on the wire (above 1: GSO or GRO at work).
    pub msgs_per_wire_packet: f64,
    /// CPU cost per message received, all directions.
    pub cycles: Cycles,
    /// How `cycles` was computed.
    pub cycles_basis: String,
    /// Request/response latency over all streams (`--rr`).
    pub latency: Option<Latency>,
    /// Things to read the figures with.
    pub warnings: Vec<String>,
}

fn side_stream(side: &SideReport, id: u16, role: Role) -> Option<&StreamSide> {
    side.streams.iter().find(|s| s.id == id && s.role == role)
}

impl Report {
    /// Puts both ends' measurements together.
    pub fn assemble(
        spec: &TestSpec,
        server_addr: String,
        client: SideReport,
        server: SideReport,
    ) -> Report {
        let same_host =
            !client.host.boot_id.is_empty() && client.host.boot_id == server.host.boot_id;
        let mut streams = Vec::new();
        for plan in spec.plan() {
            let (tx, rx, dir) = if plan.client_sends {
                (&client, &server, "client->server")
            } else {
                (&server, &client, "server->client")
            };
            let s = side_stream(tx, plan.id, Role::Sender)
                .cloned()
                .unwrap_or_default();
            let r = side_stream(rx, plan.id, Role::Receiver)
                .cloned()
                .unwrap_or_default();
            // TCP request/response: the client's stream counts transactions.
            let (sent, got, bytes, secs) = if spec.rr {
                (s.msgs, s.msgs, r.bytes, s.seconds)
            } else {
                (s.msgs, r.msgs, r.bytes, r.seconds)
            };
            streams.push(StreamSummary {
                id: plan.id,
                direction: dir.into(),
                sent_msgs: sent,
                received_msgs: got,
                received_bytes: bytes,
                seconds: secs,
                gbit_s: stats::per_second(bytes as f64 * 8.0, secs) / 1e9,
                msgs_per_s: stats::per_second(got as f64, secs),
                loss: if spec.proto == Proto::Udp {
                    stats::loss(sent, got)
                } else {
                    0.0
                },
                reordered: r.reordered,
                retransmits: s.retransmits,
            });
        }
        let mut totals = Vec::new();
        for dir in ["client->server", "server->client"] {
            let v: Vec<&StreamSummary> = streams.iter().filter(|s| s.direction == dir).collect();
            if v.is_empty() {
                continue;
            }
            let seconds = v.iter().map(|s| s.seconds).fold(0.0, f64::max);
            let sent: u64 = v.iter().map(|s| s.sent_msgs).sum();
            let got: u64 = v.iter().map(|s| s.received_msgs).sum();
            let bytes: u64 = v.iter().map(|s| s.received_bytes).sum();
            let loss = if spec.proto == Proto::Udp {
                stats::loss(sent, got)
            } else {
                0.0
            };
            let retr: Vec<u64> = v.iter().filter_map(|s| s.retransmits).collect();
            totals.push(Totals {
                direction: dir.into(),
                streams: v.len(),
                sent_msgs: sent,
                received_msgs: got,
                received_bytes: bytes,
                seconds,
                gbit_s: stats::per_second(bytes as f64 * 8.0, seconds) / 1e9,
                msgs_per_s: stats::per_second(got as f64, seconds),
                loss,
                lossless: spec.proto == Proto::Tcp || stats::lossless(sent, got),
                reordered: v.iter().map(|s| s.reordered).sum(),
                retransmits: (!retr.is_empty()).then(|| retr.iter().sum()),
            });
        }
        let wire: Vec<Wire> = [("client", &client), ("server", &server)]
            .into_iter()
            .map(|(name, s)| Wire {
                side: name.into(),
                iface: s.iface.name.clone(),
                tx_pps: stats::per_second(s.wire.tx_packets as f64, s.wall_s),
                rx_pps: stats::per_second(s.wire.rx_packets as f64, s.wall_s),
                counters: s.wire,
            })
            .collect();
        let received: u64 = totals.iter().map(|t| t.received_msgs).sum();
        let received_bytes: u64 = totals.iter().map(|t| t.received_bytes).sum();
        // Packets that carried the received messages: what the receiving
        // ends' interfaces took in (once, when both ends share one interface).
        let shared_iface = same_host
            && client.host.netns == server.host.netns
            && client.iface.name == server.iface.name;
        let rx_packets = if shared_iface {
            client.wire.rx_packets
        } else {
            let mut p = 0;
            if totals.iter().any(|t| t.direction == "client->server") {
                p += server.wire.rx_packets;
            }
            if totals.iter().any(|t| t.direction == "server->client") {
                p += client.wire.rx_packets;
            }
            p
        };
        // Each machine's busy seconds at its own clock; one shared machine once.
        let (busy, busy_cycles) = if same_host {
            let b = client.cpu.busy_s.max(server.cpu.busy_s);
            (b, b * client.clock_hz)
        } else {
            (
                client.cpu.busy_s + server.cpu.busy_s,
                client.cpu.busy_s * client.clock_hz + server.cpu.busy_s * server.clock_hz,
            )
        };
        let hz = if busy > 0.0 {
            busy_cycles / busy
        } else {
            client.clock_hz
        };
        let cycles_basis = format!(
            "machine busy CPU time from /proc/stat (user+nice+system+irq+softirq, all CPUs) {} \
             x clock {:.3} GHz ({}), divided by messages received; no hardware cycle counter is read",
            if same_host { "of the one machine both ends share, counted once," } else { "of both machines" },
            hz / 1e9,
            client.clock_source
        );
        let mut warnings: Vec<String> = client
            .warnings
            .iter()
            .chain(&server.warnings)
            .cloned()
            .collect();
        if same_host {
            warnings.push(
                "both ends share one machine: receive softirq runs on the sender's CPU, so CPU \
                 is reported in total, not per side"
                    .into(),
            );
        }
        // /proc/stat counts in 1/USER_HZ ticks (10 ms): below ~10 ticks the
        // cost figure is mostly rounding.
        if busy < 0.1 {
            warnings.push(format!(
                "only {busy:.2} s of busy CPU was counted (/proc/stat ticks are 10 ms): cycles per \
                 message are not meaningful for so short a run; use -t 1 or more"
            ));
        }
        let latency = client.latency;
        Report {
            schema: SCHEMA.into(),
            command: String::new(),
            commit: String::new(),
            started_unix: 0,
            spec: spec.clone(),
            server_addr,
            same_host,
            streams,
            totals,
            wire,
            msgs_per_wire_packet: if rx_packets > 0 {
                received as f64 / rx_packets as f64
            } else {
                0.0
            },
            cycles: stats::cycles(busy, hz, received, received_bytes),
            cycles_basis,
            latency,
            warnings,
            client,
            server,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::spec::{Direction, Proto};

    fn side(boot: &str, streams: Vec<StreamSide>, busy: f64, rx: u64) -> SideReport {
        SideReport {
            host: HostInfo {
                boot_id: boot.into(),
                netns: "net:[1]".into(),
                ..HostInfo::default()
            },
            iface: IfaceInfo {
                name: format!("if-{boot}"),
                ..IfaceInfo::default()
            },
            wire: Counters {
                rx_packets: rx,
                tx_packets: rx,
                ..Counters::default()
            },
            wall_s: 2.0,
            cpu: CpuTime {
                busy_s: busy,
                ..CpuTime::default()
            },
            clock_hz: 2e9,
            streams,
            ..SideReport::default()
        }
    }

    fn st(id: u16, role: Role, msgs: u64, bytes: u64, secs: f64) -> StreamSide {
        StreamSide {
            id,
            role,
            msgs,
            bytes,
            seconds: secs,
            ..StreamSide::default()
        }
    }

    /// Every key of the client's report (`ipoib-eval client --json`, the
    /// schema `ipoib-eval/1`), as it is spelled: a field renamed or dropped
    /// fails here (new ones are added to the list). A GSO send path's
    /// fields; an interface's `offloads` are keyed by `ethtool -k`'s
    /// feature names, data rather than fields, and left empty here.
    const JSON_KEYS: &[&str] = &[
        "client",
        "client.addr",
        "client.clock_hz",
        "client.clock_source",
        "client.cpu",
        "client.cpu.busy_s",
        "client.cpu.softirq_s",
        "client.cpu.sys_s",
        "client.cpu.user_s",
        "client.cpu.wall_s",
        "client.host",
        "client.host.boot_id",
        "client.host.hostname",
        "client.host.kernel",
        "client.host.netns",
        "client.host.version",
        "client.iface",
        "client.iface.gso_max_size",
        "client.iface.mtu",
        "client.iface.name",
        "client.iface.offloads",
        "client.iface.qdisc",
        "client.iface.rx_queues",
        "client.iface.tx_queues",
        "client.iface.txqueuelen",
        "client.latency",
        "client.latency.count",
        "client.latency.max_us",
        "client.latency.mean_us",
        "client.latency.min_us",
        "client.latency.p50_us",
        "client.latency.p90_us",
        "client.latency.p999_us",
        "client.latency.p99_us",
        "client.streams",
        "client.streams[].buffer",
        "client.streams[].buffer.asked",
        "client.streams[].buffer.forced",
        "client.streams[].buffer.got",
        "client.streams[].bytes",
        "client.streams[].cpu",
        "client.streams[].foreign",
        "client.streams[].id",
        "client.streams[].intervals",
        "client.streams[].intervals[].bytes",
        "client.streams[].intervals[].end_s",
        "client.streams[].intervals[].gaps",
        "client.streams[].intervals[].msgs",
        "client.streams[].intervals[].retransmits",
        "client.streams[].intervals[].start_s",
        "client.streams[].latency",
        "client.streams[].latency.count",
        "client.streams[].latency.max_us",
        "client.streams[].latency.mean_us",
        "client.streams[].latency.min_us",
        "client.streams[].latency.p50_us",
        "client.streams[].latency.p90_us",
        "client.streams[].latency.p999_us",
        "client.streams[].latency.p99_us",
        "client.streams[].msgs",
        "client.streams[].reordered",
        "client.streams[].retransmits",
        "client.streams[].role",
        "client.streams[].seconds",
        "client.streams[].sys_s",
        "client.streams[].user_s",
        "client.streams[].zerocopy",
        "client.streams[].zerocopy.completed",
        "client.streams[].zerocopy.copied",
        "client.streams[].zerocopy.sends",
        "client.wall_s",
        "client.warnings",
        "client.wire",
        "client.wire.rx_bytes",
        "client.wire.rx_dropped",
        "client.wire.rx_packets",
        "client.wire.tx_bytes",
        "client.wire.tx_dropped",
        "client.wire.tx_packets",
        "command",
        "commit",
        "cycles",
        "cycles.busy_s",
        "cycles.hz",
        "cycles.per_byte",
        "cycles.per_msg",
        "cycles_basis",
        "latency",
        "latency.count",
        "latency.max_us",
        "latency.mean_us",
        "latency.min_us",
        "latency.p50_us",
        "latency.p90_us",
        "latency.p999_us",
        "latency.p99_us",
        "msgs_per_wire_packet",
        "same_host",
        "schema",
        "server",
        "server.addr",
        "server.clock_hz",
        "server.clock_source",
        "server.cpu",
        "server.cpu.busy_s",
        "server.cpu.softirq_s",
        "server.cpu.sys_s",
        "server.cpu.user_s",
        "server.cpu.wall_s",
        "server.host",
        "server.host.boot_id",
        "server.host.hostname",
        "server.host.kernel",
        "server.host.netns",
        "server.host.version",
        "server.iface",
        "server.iface.gso_max_size",
        "server.iface.mtu",
        "server.iface.name",
        "server.iface.offloads",
        "server.iface.qdisc",
        "server.iface.rx_queues",
        "server.iface.tx_queues",
        "server.iface.txqueuelen",
        "server.latency",
        "server.latency.count",
        "server.latency.max_us",
        "server.latency.mean_us",
        "server.latency.min_us",
        "server.latency.p50_us",
        "server.latency.p90_us",
        "server.latency.p999_us",
        "server.latency.p99_us",
        "server.streams",
        "server.streams[].buffer",
        "server.streams[].buffer.asked",
        "server.streams[].buffer.forced",
        "server.streams[].buffer.got",
        "server.streams[].bytes",
        "server.streams[].cpu",
        "server.streams[].foreign",
        "server.streams[].id",
        "server.streams[].intervals",
        "server.streams[].intervals[].bytes",
        "server.streams[].intervals[].end_s",
        "server.streams[].intervals[].gaps",
        "server.streams[].intervals[].msgs",
        "server.streams[].intervals[].retransmits",
        "server.streams[].intervals[].start_s",
        "server.streams[].latency",
        "server.streams[].latency.count",
        "server.streams[].latency.max_us",
        "server.streams[].latency.mean_us",
        "server.streams[].latency.min_us",
        "server.streams[].latency.p50_us",
        "server.streams[].latency.p90_us",
        "server.streams[].latency.p999_us",
        "server.streams[].latency.p99_us",
        "server.streams[].msgs",
        "server.streams[].reordered",
        "server.streams[].retransmits",
        "server.streams[].role",
        "server.streams[].seconds",
        "server.streams[].sys_s",
        "server.streams[].user_s",
        "server.streams[].zerocopy",
        "server.streams[].zerocopy.completed",
        "server.streams[].zerocopy.copied",
        "server.streams[].zerocopy.sends",
        "server.wall_s",
        "server.warnings",
        "server.wire",
        "server.wire.rx_bytes",
        "server.wire.rx_dropped",
        "server.wire.rx_packets",
        "server.wire.tx_bytes",
        "server.wire.tx_dropped",
        "server.wire.tx_packets",
        "server_addr",
        "spec",
        "spec.amount",
        "spec.amount.seconds",
        "spec.direction",
        "spec.interval",
        "spec.len",
        "spec.nodelay",
        "spec.proto",
        "spec.rate_bps",
        "spec.recv",
        "spec.recv.batch",
        "spec.recv.gro",
        "spec.rr",
        "spec.send",
        "spec.send.batch",
        "spec.send.path",
        "spec.send.per_send",
        "spec.server_cpus",
        "spec.streams",
        "spec.timeout",
        "spec.window",
        "started_unix",
        "streams",
        "streams[].direction",
        "streams[].gbit_s",
        "streams[].id",
        "streams[].loss",
        "streams[].msgs_per_s",
        "streams[].received_bytes",
        "streams[].received_msgs",
        "streams[].reordered",
        "streams[].retransmits",
        "streams[].seconds",
        "streams[].sent_msgs",
        "totals",
        "totals[].direction",
        "totals[].gbit_s",
        "totals[].loss",
        "totals[].lossless",
        "totals[].msgs_per_s",
        "totals[].received_bytes",
        "totals[].received_msgs",
        "totals[].reordered",
        "totals[].retransmits",
        "totals[].seconds",
        "totals[].sent_msgs",
        "totals[].streams",
        "warnings",
        "wire",
        "wire[].counters",
        "wire[].counters.rx_bytes",
        "wire[].counters.rx_dropped",
        "wire[].counters.rx_packets",
        "wire[].counters.tx_bytes",
        "wire[].counters.tx_dropped",
        "wire[].counters.tx_packets",
        "wire[].iface",
        "wire[].rx_pps",
        "wire[].side",
        "wire[].tx_pps",
    ];

    /// The client report's CSV header (`ipoib-eval client --csv`, and the
    /// first columns of a sweep's rows), column by column.
    const CSV_HEADER: &str = "commit,proto,len,streams,direction,send,recv,rate_bps,window,\
        nodelay,rr,seconds,sent_msgs,received_msgs,received_bytes,gbit_s,msgs_per_s,loss,\
        reordered,retransmits,client_iface,client_mtu,client_txq,client_rxq,client_qdisc,\
        server_iface,server_mtu,client_tx_pps,client_rx_pps,server_tx_pps,server_rx_pps,\
        msgs_per_wire_packet,busy_s,clock_hz,cycles_per_msg,cycles_per_byte,same_host,p50_us,\
        p99_us,kernel";

    #[test]
    fn golden_the_json_keys_and_the_csv_header_are_todays() {
        let spec = TestSpec {
            proto: Proto::Udp,
            len: 1000,
            send: crate::spec::SendPath::Gso {
                per_send: 8,
                batch: 1,
            },
            window: Some(1 << 20),
            ..TestSpec::default()
        };
        // Every optional part filled, so that its keys show.
        let full = |mut s: StreamSide| {
            s.retransmits = Some(0);
            s.cpu = Some(0);
            s.buffer = Some(BufSize::default());
            s.zerocopy = Some(ZcStats::default());
            s.latency = Some(Latency::default());
            s.intervals = vec![Interval::default()];
            s
        };
        let end = |boot: &str, role: Role| {
            let mut e = side(boot, vec![full(st(0, role, 10, 10_000, 1.0))], 1.0, 10);
            e.latency = Some(Latency::default());
            e.warnings = vec!["w".into()];
            e
        };
        let mut r = Report::assemble(
            &spec,
            "x".into(),
            end("a", Role::Sender),
            end("b", Role::Receiver),
        );
        r.latency = Some(Latency::default());
        r.warnings.push("w".into());
        let json = serde_json::to_value(&r).unwrap();
        fabkit_core::schema::same_keys(&json, JSON_KEYS).unwrap_or_else(|e| panic!("{e}"));
        let header = row::header::<CsvRow>();
        assert_eq!(header.iter().collect::<Vec<_>>().join(","), CSV_HEADER);
    }

    #[test]
    fn udp_forward_on_two_machines_adds_both_busy_times() {
        let spec = TestSpec {
            proto: Proto::Udp,
            len: 1000,
            streams: 2,
            ..TestSpec::default()
        };
        let c = side(
            "a",
            vec![
                st(0, Role::Sender, 1000, 1_000_000, 1.0),
                st(1, Role::Sender, 1000, 1_000_000, 1.0),
            ],
            1.0,
            10,
        );
        let s = side(
            "b",
            vec![
                st(0, Role::Receiver, 990, 990_000, 2.0),
                st(1, Role::Receiver, 1000, 1_000_000, 1.0),
            ],
            3.0,
            500,
        );
        let r = Report::assemble(&spec, "x".into(), c, s);
        assert!(!r.same_host);
        assert_eq!(r.totals.len(), 1);
        let t = &r.totals[0];
        assert_eq!((t.sent_msgs, t.received_msgs), (2000, 1990));
        assert!((t.loss - 0.005).abs() < 1e-12);
        assert!(!t.lossless);
        assert_eq!(t.seconds, 2.0);
        assert_eq!(t.msgs_per_s, 995.0);
        assert!((t.gbit_s - 1_990_000.0 * 8.0 / 2.0 / 1e9).abs() < 1e-12);
        // 4 busy seconds at 2 GHz over 1990 messages.
        assert!((r.cycles.per_msg - 8e9 / 1990.0).abs() < 1e-6);
        // Each machine at its own clock: 1 s at 2 GHz + 3 s at 3 GHz.
        let mut fast = r.server.clone();
        fast.clock_hz = 3e9;
        let r2 = Report::assemble(&spec, "x".into(), r.client.clone(), fast);
        assert!((r2.cycles.per_msg - 11e9 / 1990.0).abs() < 1e-6);
        // The server's interface took 500 packets for 1990 messages.
        assert!((r.msgs_per_wire_packet - 3.98).abs() < 1e-12);
        assert!((r.streams[0].loss - 0.01).abs() < 1e-12);
        assert_eq!(r.rows().len(), 1);
        // Read back: as many fields as the header has columns.
        let text = row::to_text(&r.rows(), false);
        let fields = csv::ReaderBuilder::new()
            .has_headers(false)
            .from_reader(text.as_bytes())
            .records()
            .next()
            .unwrap()
            .unwrap()
            .len();
        assert_eq!(fields, row::header::<CsvRow>().len());
    }

    #[test]
    fn one_machine_counts_busy_time_once_and_bidir_has_two_totals() {
        let spec = TestSpec {
            direction: Direction::Bidir,
            ..TestSpec::default()
        };
        let c = side(
            "a",
            vec![
                st(0, Role::Sender, 10, 10 << 17, 1.0),
                st(1, Role::Receiver, 5, 5 << 17, 1.0),
            ],
            2.0,
            7,
        );
        let s = side(
            "a",
            vec![
                st(0, Role::Receiver, 10, 10 << 17, 1.0),
                st(1, Role::Sender, 5, 5 << 17, 1.0),
            ],
            2.5,
            7,
        );
        let r = Report::assemble(&spec, "x".into(), c, s);
        assert!(r.same_host);
        assert_eq!(r.totals.len(), 2);
        assert_eq!(r.totals[1].direction, "server->client");
        assert_eq!(r.cycles.busy_s, 2.5);
        assert_eq!(r.totals[0].loss, 0.0);
        assert!(r.warnings.iter().any(|w| w.contains("one machine")));
        assert!(r.text().contains("[SUM]"));
    }
}
