//! iperf3 as the sweep's baseline: a point whose send path is `iperf3`
//! runs `iperf3 -s` in the server's namespace and `iperf3 -c ... -J` in the
//! client's, on the same testbed, queue policy and eBPF views as the other
//! points, so each send path's gain over iperf3 is a ratio within one run.
//!
//! iperf3 reports throughput, UDP loss and reordering and TCP retransmits;
//! the machine's busy time over the client's run gives cycles per message
//! as for our own runs. Its messages are its blocks (`-l`): UDP datagrams,
//! or TCP bytes divided by the block size. Columns iperf3 has no figure for
//! stay empty.

use std::io::{BufRead, BufReader, Read};
use std::process::{Command, Stdio};
use std::time::Duration;

use crate::report::CsvRow;
use crate::run::RunError;
use crate::spec::{Amount, Direction, Proto, TestSpec};
use crate::stats::cpu::{Clock, ProcStat};

/// The block size iperf3 accepts at most (its `MAX_BLOCKSIZE`).
pub const MAX_LEN: usize = 1 << 20;

/// The port iperf3's server listens on in a point's own namespace.
const PORT: u16 = 5201;

/// What one iperf3 run measured, at the receiver unless named otherwise.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Measured {
    /// Seconds the receiver measured.
    pub seconds: f64,
    /// Blocks sent.
    pub sent_msgs: u64,
    /// Blocks received (UDP: datagrams not lost).
    pub received_msgs: u64,
    /// Bytes received.
    pub received_bytes: u64,
    /// Received Gbit/s as iperf3 computed it.
    pub gbit_s: f64,
    /// UDP: datagrams out of order.
    pub reordered: Option<u64>,
    /// TCP: the sender's retransmitted segments.
    pub retransmits: Option<u64>,
}

/// Reads iperf3's `-J` output (3.x: `end.sum_sent`, `end.sum_received`).
/// Pure.
pub fn parse(json: &str, proto: Proto, len: usize) -> Result<Measured, String> {
    let v: serde_json::Value =
        serde_json::from_str(json).map_err(|e| format!("iperf3 printed no JSON ({e})"))?;
    if let Some(e) = v["error"].as_str() {
        return Err(format!("iperf3: {e}"));
    }
    let end = &v["end"];
    let num = |x: &serde_json::Value, what: &str| {
        x.as_f64()
            .filter(|f| f.is_finite() && *f >= 0.0)
            .ok_or_else(|| format!("iperf3's JSON has no {what}"))
    };
    let (sent, recv) = (&end["sum_sent"], &end["sum_received"]);
    let seconds = num(&recv["seconds"], "end.sum_received.seconds")?;
    let received_bytes = num(&recv["bytes"], "end.sum_received.bytes")? as u64;
    let gbit_s = num(&recv["bits_per_second"], "end.sum_received.bits_per_second")? / 1e9;
    let len = len.max(1) as u64;
    Ok(match proto {
        Proto::Tcp => Measured {
            seconds,
            sent_msgs: (num(&sent["bytes"], "end.sum_sent.bytes")? as u64).div_ceil(len),
            received_msgs: received_bytes / len,
            received_bytes,
            gbit_s,
            reordered: None,
            retransmits: sent["retransmits"].as_u64(),
        },
        Proto::Udp => {
            let packets = num(&recv["packets"], "end.sum_received.packets")? as u64;
            let lost = num(&recv["lost_packets"], "end.sum_received.lost_packets")? as u64;
            let reordered = end["streams"].as_array().map(|s| {
                s.iter()
                    .filter_map(|x| x["udp"]["out_of_order"].as_u64())
                    .sum()
            });
            Measured {
                seconds,
                sent_msgs: num(&sent["packets"], "end.sum_sent.packets")? as u64,
                received_msgs: packets.saturating_sub(lost),
                received_bytes,
                gbit_s,
                reordered,
                retransmits: None,
            }
        }
    })
}

/// What a point tells iperf3 besides the test: where each end runs.
#[derive(Debug)]
pub struct Ends<'a> {
    /// Server's namespace.
    pub server_ns: &'a str,
    /// Client's namespace.
    pub client_ns: &'a str,
    /// Server's address as the client reaches it.
    pub server_addr: String,
    /// The one CPU the client is pinned to, if any.
    pub client_cpu: Option<usize>,
}

/// How long `test` runs: iperf3 points are timed (the sweep's are).
fn seconds(test: &TestSpec) -> f64 {
    match test.amount {
        Amount::Seconds(s) => s,
        // The sweep makes timed tests only; iperf3 counts blocks over all
        // streams, ours per stream, so a count is not carried over.
        Amount::Messages(_) => 10.0,
    }
}

/// The client's command line for `test` (without `ip netns exec`).
pub fn client_args(test: &TestSpec, e: &Ends<'_>) -> Vec<String> {
    let secs = seconds(test);
    let mut a: Vec<String> = [
        "iperf3",
        "-c",
        &e.server_addr,
        "-p",
        &PORT.to_string(),
        "-J",
        "--connect-timeout",
        "5000",
        "-t",
        // iperf3 takes whole seconds (the sweep refuses fractions for it).
        &format!("{:.0}", secs.max(1.0)),
        "-l",
        &test.len.to_string(),
        "-P",
        &test.streams.to_string(),
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    if test.proto == Proto::Udp {
        a.push("-u".into());
    }
    if test.proto == Proto::Udp || test.rate_bps > 0.0 {
        // Per stream, as ours; 0 is unlimited (iperf3's UDP default is 1M).
        a.extend(["-b".into(), format!("{}", test.rate_bps)]);
    }
    match test.direction {
        Direction::Forward => {}
        Direction::Reverse => a.push("-R".into()),
        Direction::Bidir => a.push("--bidir".into()),
    }
    if let Some(w) = test.window {
        a.extend(["-w".into(), w.to_string()]);
    }
    if test.nodelay {
        a.push("-N".into());
    }
    match (e.client_cpu, test.server_cpus.first()) {
        (Some(c), Some(s)) => a.extend(["-A".into(), format!("{c},{s}")]),
        (Some(c), None) => a.extend(["-A".into(), c.to_string()]),
        (None, Some(s)) => a.extend(["-A".into(), format!(",{s}")]),
        (None, None) => {}
    }
    a
}

fn failed(msg: impl Into<String>) -> RunError {
    RunError::Failed(msg.into())
}

/// Kills a child on drop (a failed or timed-out run leaves no iperf3).
struct Reaped(std::process::Child);

impl Drop for Reaped {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Runs one iperf3 test between the ends and returns its figures and the
/// machine's busy CPU seconds over the client's run.
pub fn run(test: &TestSpec, e: &Ends<'_>) -> Result<(Measured, f64), RunError> {
    let mut server = Command::new("ip");
    server
        .args(["netns", "exec", e.server_ns, "iperf3", "-s", "-1"])
        .args(["-p", &PORT.to_string(), "--forceflush"])
        .stdout(Stdio::piped())
        .stderr(Stdio::null());
    // Killed with us: an interrupted sweep leaves no iperf3 behind.
    fabkit_netns::cleanup::child_dies_with_us(&mut server);
    let server = server
        .spawn()
        .map_err(|x| failed(format!("starting iperf3 -s: {x} (apt-get install iperf3)")))?;
    let mut server = Reaped(server);
    // Its own word that it listens, read on a thread so the wait has a bound.
    let out = server.0.stdout.take();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let Some(out) = out else { return };
        for l in BufReader::new(out).lines() {
            let Ok(l) = l else { break };
            if l.contains("Server listening") {
                let _ = tx.send(());
                break;
            }
        }
    });
    rx.recv_timeout(Duration::from_secs(10)).map_err(|_| {
        failed(format!(
            "iperf3 -s in {} did not say it listens on port {PORT} within 10 s",
            e.server_ns
        ))
    })?;
    let proc0 = ProcStat::now();
    let mut client = Command::new("ip");
    client
        .args(["netns", "exec", e.client_ns])
        .args(client_args(test, e))
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    fabkit_netns::cleanup::child_dies_with_us(&mut client);
    let mut client = client
        .spawn()
        .map_err(|x| failed(format!("starting iperf3 -c: {x} (apt-get install iperf3)")))?;
    // Both pipes drained on threads; stdout's end (the client exited or
    // was killed) is the wait, bounded by the test's time and a margin.
    let drain = |r: Option<Box<dyn std::io::Read + Send>>| {
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let mut text = String::new();
            if let Some(mut r) = r {
                let _ = r.read_to_string(&mut text);
            }
            let _ = tx.send(text);
        });
        rx
    };
    let out = drain(client.stdout.take().map(|o| Box::new(o) as _));
    let err = drain(client.stderr.take().map(|o| Box::new(o) as _));
    let limit = Duration::from_secs_f64(seconds(test) + 20.0);
    let Ok(out) = out.recv_timeout(limit) else {
        let _ = client.kill();
        let _ = client.wait();
        return Err(failed(format!(
            "iperf3 -c {} from {} gave no result within {:.0} s",
            e.server_addr,
            e.client_ns,
            limit.as_secs_f64()
        )));
    };
    let _ = client.wait();
    let err = err.recv_timeout(Duration::from_secs(5)).unwrap_or_default();
    let busy = ProcStat::now().since(&proc0).busy_s;
    let m = parse(&out, test.proto, test.len).map_err(|x| {
        let err = err.lines().next().unwrap_or_default();
        failed(format!(
            "{x}{}{err}",
            if err.is_empty() { "" } else { "; " }
        ))
    })?;
    Ok((m, busy))
}

/// The report columns of an iperf3 run of `test` (send and recv `iperf3`);
/// the columns iperf3 has no figure for stay empty.
pub fn row(test: &TestSpec, m: &Measured, busy_s: f64, kernel: &str) -> CsvRow {
    let hz = Clock::detect().hz;
    let c = crate::stats::cycles(busy_s, hz, m.received_msgs, m.received_bytes);
    // The words of our own rows' direction column.
    let dir = match test.direction {
        Direction::Forward => "client->server",
        Direction::Reverse => "server->client",
        Direction::Bidir => "both",
    };
    CsvRow {
        commit: crate::COMMIT.into(),
        proto: format!("{:?}", test.proto).to_lowercase(),
        len: test.len,
        streams: test.streams,
        direction: dir.into(),
        send: "iperf3".into(),
        recv: "iperf3".into(),
        rate_bps: format!("{}", test.rate_bps),
        nodelay: test.nodelay,
        rr: false,
        seconds: format!("{:.4}", m.seconds),
        sent_msgs: m.sent_msgs,
        received_msgs: m.received_msgs,
        received_bytes: m.received_bytes,
        gbit_s: format!("{:.4}", m.gbit_s),
        msgs_per_s: format!(
            "{:.1}",
            crate::stats::per_second(m.received_msgs as f64, m.seconds)
        ),
        loss: format!("{:.6}", crate::stats::loss(m.sent_msgs, m.received_msgs)),
        reordered: m.reordered,
        retransmits: m.retransmits,
        busy_s: format!("{busy_s:.3}"),
        clock_hz: format!("{hz:.0}"),
        cycles_per_msg: format!("{:.1}", c.per_msg),
        cycles_per_byte: format!("{:.4}", c.per_byte),
        same_host: true,
        kernel: kernel.into(),
        ..CsvRow::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const UDP: &str = r#"{"end":{"streams":[{"udp":{"out_of_order":3}},{"udp":{"out_of_order":4}}],
        "sum_sent":{"seconds":2.0,"bytes":3000,"bits_per_second":12000,"packets":1000},
        "sum_received":{"seconds":2.5,"bytes":2940,"bits_per_second":9408,"packets":1000,"lost_packets":20}}}"#;

    #[test]
    fn udp_figures_are_the_receivers() {
        let m = parse(UDP, Proto::Udp, 3).unwrap();
        assert_eq!(
            (m.sent_msgs, m.received_msgs, m.received_bytes),
            (1000, 980, 2940)
        );
        assert_eq!(
            (m.seconds, m.reordered, m.retransmits),
            (2.5, Some(7), None)
        );
        assert!((m.gbit_s - 9.408e-6).abs() < 1e-15);
    }

    #[test]
    fn tcp_messages_are_blocks_of_the_length() {
        let j = r#"{"end":{"sum_sent":{"seconds":1,"bytes":1001,"bits_per_second":8008,"retransmits":5},
            "sum_received":{"seconds":1,"bytes":1000,"bits_per_second":8000}}}"#;
        let m = parse(j, Proto::Tcp, 100).unwrap();
        assert_eq!(
            (m.sent_msgs, m.received_msgs, m.retransmits),
            (11, 10, Some(5))
        );
        assert_eq!(m.reordered, None);
    }

    #[test]
    fn errors_and_missing_figures_are_named() {
        let e = parse(r#"{"error":"unable to connect to server"}"#, Proto::Tcp, 1).unwrap_err();
        assert_eq!(e, "iperf3: unable to connect to server");
        let e = parse(r#"{"end":{}}"#, Proto::Udp, 1).unwrap_err();
        assert!(e.contains("end.sum_received.seconds"), "{e}");
        assert!(parse("iperf3: error", Proto::Udp, 1)
            .unwrap_err()
            .contains("no JSON"));
    }

    #[test]
    fn rows_have_every_column_and_name_iperf3() {
        let t = TestSpec {
            proto: Proto::Udp,
            len: 3,
            ..TestSpec::default()
        };
        let r = row(&t, &parse(UDP, Proto::Udp, 3).unwrap(), 0.5, "6.18");
        // As a sweep writes it, read back by column name.
        let text = crate::report::row::to_text(&[r], true);
        let mut rd = csv::Reader::from_reader(text.as_bytes());
        let head = rd.headers().unwrap().clone();
        let cols = rd.records().next().unwrap().unwrap();
        assert_eq!(cols.len(), head.len());
        let get = |n: &str| cols[head.iter().position(|h| h == n).unwrap()].to_string();
        assert_eq!(
            (get("send"), get("recv")),
            ("iperf3".into(), "iperf3".into())
        );
        assert_eq!(get("received_msgs"), "980");
        assert_eq!(get("msgs_per_s"), "392.0");
        assert_eq!(get("loss"), "0.020000");
        assert_eq!(get("client_iface"), "");
        assert_eq!(get("direction"), "client->server");
    }

    #[test]
    fn the_command_line_carries_the_test() {
        let t = TestSpec {
            proto: Proto::Udp,
            len: 64,
            streams: 4,
            rate_bps: 0.0,
            direction: Direction::Reverse,
            amount: Amount::Seconds(2.0),
            server_cpus: vec![1],
            ..TestSpec::default()
        };
        let e = Ends {
            server_ns: "b",
            client_ns: "a",
            server_addr: "10.0.0.2".into(),
            client_cpu: Some(0),
        };
        let a = client_args(&t, &e).join(" ");
        for want in [
            "-c 10.0.0.2",
            "-t 2 ",
            "-l 64",
            "-P 4",
            "-u",
            "-b 0",
            "-R",
            "-A 0,1",
        ] {
            assert!(a.contains(want), "{want} missing in {a}");
        }
    }
}
