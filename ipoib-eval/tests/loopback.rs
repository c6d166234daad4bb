//! Client against server on loopback, for real: every send and receive path,
//! TCP and UDP, IPv4 and IPv6, both directions, request/response, several
//! clients at once, and a server fed garbage. Counts are exact (`-k`), so a
//! lost, duplicated or misparsed message fails the test.
//!
//! These tests blast packets, so they run one at a time (a lock): on two
//! cores they would starve each other's deadlines.

use std::io::Write;
use std::net::TcpStream;
use std::sync::OnceLock;
use std::time::Duration;

use fabkit_core::time::scaled;
use fabkit_netns::serial;
use ipoib_eval::report::{Report, Role};
use ipoib_eval::run::{run_client, ClientOpts, Server, ServerOpts};
use ipoib_eval::spec::{Amount, Direction, Proto, TestSpec};

/// One server for the whole file, on an ephemeral port.
fn server_port() -> u16 {
    static PORT: OnceLock<u16> = OnceLock::new();
    *PORT.get_or_init(|| {
        let s = Server::bind(ServerOpts {
            port: 0,
            handshake_timeout: Duration::from_millis(500),
            verbose: false,
            ..ServerOpts::default()
        })
        .unwrap();
        let port = s.port();
        std::thread::spawn(move || s.serve(false));
        port
    })
}

fn client(host: &str) -> ClientOpts {
    ClientOpts {
        host: host.into(),
        port: server_port(),
        ..ClientOpts::default()
    }
}

fn udp(len: usize, n: u64, send: &str, recv: &str) -> TestSpec {
    TestSpec {
        proto: Proto::Udp,
        len,
        amount: Amount::Messages(n),
        send: send.parse().unwrap(),
        recv: recv.parse().unwrap(),
        // Room for every datagram, so loopback loses none (forced as root).
        window: Some(32 << 20),
        interval: 0.0,
        ..TestSpec::default()
    }
}

fn tcp(len: usize, n: u64, send: &str) -> TestSpec {
    TestSpec {
        len,
        amount: Amount::Messages(n),
        send: send.parse().unwrap(),
        interval: 0.0,
        ..TestSpec::default()
    }
}

/// Every direction delivered exactly `n` messages per stream, in order.
fn assert_exact(r: &Report, n: u64) {
    assert!(!r.totals.is_empty());
    for s in &r.streams {
        assert_eq!(
            s.sent_msgs, n,
            "stream {} {}: {:#?}",
            s.id, s.direction, r.streams
        );
        assert_eq!(s.received_msgs, n, "stream {} {}", s.id, s.direction);
        assert_eq!(s.received_bytes, n * r.spec.len as u64, "stream {}", s.id);
        assert_eq!(s.loss, 0.0);
        assert_eq!(s.reordered, 0);
        assert!(s.msgs_per_s > 0.0 && s.gbit_s > 0.0);
    }
    for side in [&r.client, &r.server] {
        assert!(side.streams.iter().all(|s| s.foreign == 0));
        assert_eq!(side.iface.name, "lo");
    }
    assert!(r.cycles.hz > 0.0, "{:?}", r.cycles);
    assert!(r.totals.iter().all(|t| t.lossless));
}

#[test]
fn udp_every_send_and_receive_path_delivers_every_message() {
    let _g = serial();
    let cases = [
        ("send", "recv"),
        ("sg:4", "recv"),
        ("mmsg:32", "mmsg:16"),
        ("gso:16", "gro"),
        ("gso:16:4", "gro:8"),
        ("gso:8:2", "mmsg:32"),
        ("mmsg:7", "gro"),
        ("zerocopy", "recv"),
    ];
    for (send, recv) in cases {
        let r = run_client(&udp(1472, 3000, send, recv), &client("127.0.0.1"))
            .unwrap_or_else(|e| panic!("{send}/{recv}: {e}"));
        assert_exact(&r, 3000);
        assert_eq!(r.spec.send.to_string(), send);
    }
}

#[test]
fn udp_gso_trains_cross_loopback_as_fewer_packets_than_messages() {
    let _g = serial();
    let r = run_client(&udp(1000, 6400, "gso:32", "gro:4"), &client("127.0.0.1")).unwrap();
    assert_exact(&r, 6400);
    // lo carries a GSO train as one packet; GRO hands it up whole.
    assert!(r.msgs_per_wire_packet > 4.0, "{}", r.msgs_per_wire_packet);
    let plain = run_client(&udp(1000, 2000, "send", "recv"), &client("127.0.0.1")).unwrap();
    assert!(
        plain.msgs_per_wire_packet <= 1.0,
        "{}",
        plain.msgs_per_wire_packet
    );
}

#[test]
fn udp_zerocopy_reports_every_completion_and_the_local_copy() {
    let _g = serial();
    let r = run_client(&udp(1472, 1000, "zerocopy", "recv"), &client("127.0.0.1")).unwrap();
    assert_exact(&r, 1000);
    let zc = r.client.streams[0].zerocopy.expect("zerocopy stats");
    assert_eq!(zc.sends, 1000);
    assert_eq!(zc.completed, 1000);
    // The receiver is on this host, so the kernel copied.
    assert_eq!(zc.copied, 1000, "{zc:?}");
    assert!(r.warnings.iter().any(|w| w.contains("copied")));
}

#[test]
fn tcp_every_send_path_delivers_every_byte() {
    let _g = serial();
    for (send, len) in [
        ("send", 128 << 10),
        ("sg:16", 100_000),
        ("zerocopy", 65536),
        ("send", 1),
    ] {
        let r = run_client(&tcp(len, 500, send), &client("127.0.0.1"))
            .unwrap_or_else(|e| panic!("{send}: {e}"));
        assert_exact(&r, 500);
        let s = &r.client.streams[0];
        assert_eq!((s.role, s.msgs), (Role::Sender, 500));
        assert!(s.retransmits.is_some());
    }
    let mut spec = tcp(64, 1000, "send");
    spec.nodelay = true;
    assert_exact(&run_client(&spec, &client("127.0.0.1")).unwrap(), 1000);
}

#[test]
fn ipv6_tcp_and_udp() {
    let _g = serial();
    let r = run_client(&tcp(4096, 300, "send"), &client("::1")).unwrap();
    assert_exact(&r, 300);
    assert_eq!(r.client.addr, "::1");
    let r = run_client(&udp(1200, 1000, "gso:10", "gro"), &client("::1")).unwrap();
    assert_exact(&r, 1000);
}

#[test]
fn reverse_bidir_and_parallel_streams_count_per_direction() {
    let _g = serial();
    let mut spec = udp(512, 1500, "mmsg:16", "mmsg:16");
    spec.direction = Direction::Reverse;
    spec.streams = 2;
    let r = run_client(&spec, &client("127.0.0.1")).unwrap();
    assert_exact(&r, 1500);
    assert_eq!(r.totals.len(), 1);
    assert_eq!(r.totals[0].direction, "server->client");
    assert_eq!(r.totals[0].received_msgs, 3000);

    let mut spec = tcp(8192, 400, "send");
    spec.direction = Direction::Bidir;
    spec.streams = 3;
    let r = run_client(&spec, &client("127.0.0.1")).unwrap();
    assert_exact(&r, 400);
    assert_eq!(r.streams.len(), 6);
    assert_eq!(r.totals.len(), 2);
    assert_eq!(r.rows().len(), 2);
}

#[test]
fn request_response_times_every_transaction() {
    let _g = serial();
    let spec = TestSpec {
        rr: true,
        len: 64,
        amount: Amount::Messages(300),
        interval: 0.0,
        ..TestSpec::default()
    };
    let r = run_client(&spec, &client("127.0.0.1")).unwrap();
    let l = r.latency.expect("latency");
    assert_eq!(l.count, 300);
    assert!(
        l.min_us > 0.0 && l.min_us <= l.p50_us && l.p50_us <= l.p99_us && l.p99_us <= l.max_us,
        "{l:?}"
    );
    assert_eq!(r.totals[0].received_msgs, 300);
    // The server answered every request.
    assert_eq!(r.server.streams[0].msgs, 300);
}

#[test]
fn timed_runs_report_intervals_and_honour_the_rate() {
    let _g = serial();
    let spec = TestSpec {
        proto: Proto::Udp,
        len: 1000,
        amount: Amount::Seconds(0.6),
        rate_bps: 8e6, // 1000 messages/s
        interval: 0.2,
        ..TestSpec::default()
    };
    let r = run_client(&spec, &client("127.0.0.1")).unwrap();
    let sent = r.streams[0].sent_msgs;
    // Pacing: 600 messages in 0.6 s, never more than the budget allows.
    assert!((300..=601).contains(&sent), "{sent}");
    let iv = &r.client.streams[0].intervals;
    assert!((3..=4).contains(&iv.len()), "{iv:?}");
    assert_eq!(iv.iter().map(|i| i.msgs).sum::<u64>(), sent);
    assert!(!r.server.streams[0].intervals.is_empty());
    // A paced run may stay under one /proc/stat tick of machine time, so
    // only the arithmetic is checked here: cycles per message are the busy
    // seconds at the clock rate over the messages received.
    let c = r.cycles;
    let received = r.totals.iter().map(|t| t.received_msgs).sum::<u64>() as f64;
    assert!(c.busy_s >= 0.0 && c.hz > 0.0, "{c:?}");
    assert!(
        (c.per_msg * received - c.busy_s * c.hz).abs() <= 1e-6 * c.hz,
        "{c:?}"
    );
}

#[test]
fn several_clients_at_once_each_get_their_own_counts() {
    let _g = serial();
    let runs: Vec<_> = (0..3)
        .map(|i| {
            std::thread::spawn(move || {
                let spec = if i % 2 == 0 {
                    udp(1000, 2000, "mmsg:8", "mmsg:8")
                } else {
                    tcp(16384, 500, "send")
                };
                run_client(&spec, &client("127.0.0.1"))
                    .map(|r| (r, if i % 2 == 0 { 2000 } else { 500 }))
            })
        })
        .collect();
    for h in runs {
        let (r, n) = h.join().unwrap().unwrap();
        assert_exact(&r, n);
    }
}

#[test]
fn the_server_survives_garbage_early_closes_huge_lengths_and_silence() {
    let _g = serial();
    let port = server_port();
    let addr = ("127.0.0.1", port);
    // Garbage.
    let mut c = TcpStream::connect(addr).unwrap();
    c.write_all(b"GET / HTTP/1.0\r\n\r\nxxxxxxxxxxxxxxxxxxxxxxxxxx")
        .unwrap();
    // A valid header declaring the largest body, then nothing.
    let mut big = TcpStream::connect(addr).unwrap();
    let mut h = ipoib_eval::proto::MAGIC.to_vec();
    h.extend_from_slice(&ipoib_eval::proto::VERSION.to_le_bytes());
    h.extend_from_slice(&[1, 0]);
    h.extend_from_slice(&ipoib_eval::proto::MAX_BODY.to_le_bytes());
    big.write_all(&h).unwrap();
    // Connects and closes at once; connects and says nothing.
    drop(TcpStream::connect(addr).unwrap());
    let _silent = TcpStream::connect(addr).unwrap();
    // A client that gives up after Hello.
    let mut early = TcpStream::connect(addr).unwrap();
    ipoib_eval::proto::write_msg(
        &mut early,
        &ipoib_eval::proto::Msg::Hello {
            spec: tcp(1000, 10, "send"),
            client: Default::default(),
        },
    )
    .unwrap();
    drop(early);
    // A client whose test is invalid is refused with the reason.
    let mut bad = TcpStream::connect(addr).unwrap();
    let mut spec = tcp(1000, 10, "send");
    spec.len = 0;
    ipoib_eval::proto::write_msg(
        &mut bad,
        &ipoib_eval::proto::Msg::Hello {
            spec,
            client: Default::default(),
        },
    )
    .unwrap();
    bad.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    match ipoib_eval::proto::read_msg(&mut bad).unwrap() {
        ipoib_eval::proto::Msg::Refused { reason } => assert!(reason.contains("-l"), "{reason}"),
        other => panic!("{other:?}"),
    }
    // Real tests still run, while the silent ones are still open.
    let r = run_client(&tcp(1000, 100, "send"), &client("127.0.0.1")).unwrap();
    assert_exact(&r, 100);
    let r = run_client(&udp(100, 100, "send", "recv"), &client("127.0.0.1")).unwrap();
    assert_exact(&r, 100);
}

#[test]
fn a_client_with_no_server_fails_naming_the_address() {
    let _g = serial();
    let port = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    let opts = ClientOpts {
        host: "127.0.0.1".into(),
        port,
        ..ClientOpts::default()
    };
    let e = run_client(&tcp(100, 1, "send"), &opts)
        .unwrap_err()
        .to_string();
    assert!(
        e.contains(&format!("127.0.0.1:{port}")) && e.contains("server"),
        "{e}"
    );
}

/// The control and data handshake of a client that then misbehaves.
fn raw_session(spec: &TestSpec) -> (TcpStream, TcpStream) {
    use ipoib_eval::proto::{read_msg_within, write_msg, Msg, MAGIC};
    let mut ctl = TcpStream::connect(("127.0.0.1", server_port())).unwrap();
    write_msg(
        &mut ctl,
        &Msg::Hello {
            spec: spec.clone(),
            client: Default::default(),
        },
    )
    .unwrap();
    let (port, cookie) = match read_msg_within(&ctl, Duration::from_secs(5)).unwrap() {
        Msg::Ready { ports, cookie, .. } => (ports[0], cookie),
        other => panic!("{other:?}"),
    };
    let mut data = TcpStream::connect(("127.0.0.1", port)).unwrap();
    let mut hello = MAGIC.to_vec();
    hello.extend_from_slice(&cookie.to_le_bytes());
    hello.extend_from_slice(&[0, 0, 0, 0]);
    data.write_all(&hello).unwrap();
    write_msg(&mut ctl, &Msg::Start { ports: vec![] }).unwrap();
    assert_eq!(
        read_msg_within(&ctl, Duration::from_secs(5)).unwrap(),
        Msg::Go
    );
    (ctl, data)
}

#[test]
fn a_reverse_client_that_never_reads_is_cut_off_at_the_timeout() {
    let _g = serial();
    let spec = TestSpec {
        direction: Direction::Reverse,
        amount: Amount::Seconds(60.0),
        timeout: 1.0,
        interval: 0.0,
        ..TestSpec::default()
    };
    let t = std::time::Instant::now();
    let (ctl, _data) = raw_session(&spec);
    // The server's sender stalls once the buffers fill; after the timeout it
    // gives up and says so on the control connection.
    let msg = ipoib_eval::proto::read_msg_within(&ctl, scaled(Duration::from_secs(20))).unwrap();
    match msg {
        ipoib_eval::proto::Msg::Error { message } => {
            assert!(message.contains("no send progress"), "{message}")
        }
        other => panic!("{other:?}"),
    }
    assert!(
        t.elapsed() < scaled(Duration::from_secs(15)),
        "{:?}",
        t.elapsed()
    );
    // And it still serves.
    assert_exact(
        &run_client(&tcp(1000, 50, "send"), &client("127.0.0.1")).unwrap(),
        50,
    );
}

#[test]
fn a_hello_trickled_a_byte_at_a_time_is_cut_off_at_the_handshake_deadline() {
    let _g = serial();
    use std::io::Read;
    let ctl = TcpStream::connect(("127.0.0.1", server_port())).unwrap();
    let mut w = ctl.try_clone().unwrap();
    let bytes = ipoib_eval::proto::encode(&ipoib_eval::proto::Msg::Hello {
        spec: tcp(1000, 1, "send"),
        client: Default::default(),
    });
    // One byte every 100 ms: each read is quick, the whole message is not.
    let trickle = std::thread::spawn(move || {
        for b in bytes.iter().take(60) {
            if w.write_all(&[*b]).is_err() {
                return;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    });
    let t = std::time::Instant::now();
    let mut r = &ctl;
    r.set_read_timeout(Some(scaled(Duration::from_secs(10))))
        .unwrap();
    let mut buf = [0u8; 64];
    // The server (handshake deadline 0.5 s) closes the connection.
    let closed = matches!(r.read(&mut buf), Ok(0) | Err(_));
    assert!(closed);
    assert!(
        t.elapsed() < scaled(Duration::from_secs(4)),
        "{:?}",
        t.elapsed()
    );
    trickle.join().unwrap();
}
