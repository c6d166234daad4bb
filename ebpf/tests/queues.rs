//! The per-queue counters against a known number of packets of known size
//! sent across a real testbed (namespaces and veths; root, as CI has): exact
//! counts on the queue a policy pins them to, other flows and other
//! testbeds' interfaces not counted, and nothing left loaded afterwards.

use std::net::{Ipv4Addr, UdpSocket};

use fabkit_ebpf::{Iface, QueueView, RoundRobin, Rule, PROGRAMS, RR_PROGRAM};
use fabkit_netns::serial;
use fabkit_netns::testbed::{self, Testbed, TestbedSpec};

fn sh_in(netns: &str, script: &str) {
    let o = std::process::Command::new("ip")
        .args(["netns", "exec", netns, "sh", "-c", script])
        .output()
        .unwrap();
    assert!(
        o.status.success(),
        "{script}: {}",
        String::from_utf8_lossy(&o.stderr)
    );
}

/// XPS: every CPU sends on TX queue `q` of `iface` (inside `netns`).
fn pin_tx_queue(netns: &str, iface: &str, queues: u16, q: u16) {
    // Every online CPU (the kernel refuses CPUs that do not exist).
    let cpus = std::thread::available_parallelism().unwrap().get().min(63);
    let every = format!("{:x}", (1u64 << cpus) - 1);
    for i in 0..queues {
        let mask = if i == q { every.as_str() } else { "0" };
        sh_in(
            netns,
            &format!("echo {mask} > /sys/class/net/{iface}/queues/tx-{i}/xps_cpus"),
        );
    }
}

/// Sends `n` UDP datagrams of `len` bytes from a thread in `tb.a` (pinned
/// to CPU 0; `unconnected`: sendto(2) without connect) to a socket in
/// `tb.b`, in batches the receiver acknowledges (so no receive
/// buffer overflows), and checks that every one arrived: the counts below
/// are exact because nothing was lost.
fn udp_across(tb: &Testbed, n: usize, len: usize, port: u16) {
    udp_across_with(tb, n, len, port, false)
}

fn udp_across_with(tb: &Testbed, n: usize, len: usize, port: u16, unconnected: bool) {
    const BATCH: usize = 50;
    let (a, b) = (tb.a.clone(), tb.b.clone());
    let (ack, acked) = std::sync::mpsc::channel();
    let rx = std::thread::spawn(move || {
        testbed::enter(&b.netns).unwrap();
        let s = UdpSocket::bind((b.addr, port)).unwrap();
        s.set_read_timeout(Some(std::time::Duration::from_secs(5)))
            .unwrap();
        ack.send(()).unwrap();
        let mut buf = vec![0u8; 65536];
        for i in 0..n {
            let got = s
                .recv(&mut buf)
                .unwrap_or_else(|e| panic!("datagram {i} of {n}: {e}"));
            assert_eq!(got, len);
            if (i + 1) % BATCH == 0 {
                // The sender may be gone after its last batch.
                let _ = ack.send(());
            }
        }
    });
    acked.recv().unwrap();
    let dest = (tb.b.addr, port);
    std::thread::spawn(move || {
        testbed::enter(&a.netns).unwrap();
        // SAFETY: a zeroed cpu_set_t with CPU 0 set, for this thread (0).
        unsafe {
            let mut set: libc::cpu_set_t = std::mem::zeroed();
            libc::CPU_SET(0, &mut set);
            assert_eq!(
                libc::sched_setaffinity(0, std::mem::size_of_val(&set), &set),
                0
            );
        }
        let s = UdpSocket::bind((a.addr, 0)).unwrap();
        if !unconnected {
            s.connect(dest).unwrap();
        }
        let buf = vec![7u8; len];
        for i in 0..n {
            if unconnected {
                s.send_to(&buf, dest).unwrap();
            } else {
                s.send(&buf).unwrap();
            }
            if (i + 1) % BATCH == 0 && i + 1 < n {
                acked
                    .recv_timeout(std::time::Duration::from_secs(5))
                    .expect("the receiver acknowledges each batch");
            }
        }
    })
    .join()
    .unwrap();
    rx.join().unwrap();
}

fn loaded_ours() -> usize {
    aya::programs::loaded_programs()
        .filter_map(Result::ok)
        .filter(|p| {
            p.name_as_str()
                .is_some_and(|n| n == RR_PROGRAM || PROGRAMS.iter().any(|(ours, _)| *ours == n))
        })
        .count()
}

#[test]
fn a_pinned_queue_counts_exactly_the_packets_sent() {
    let _g = serial();
    let tb = Testbed::up(TestbedSpec {
        queues: 4,
        // GRO at the receiver puts veth on its NAPI path, which records the
        // RX queue (TX queue N of one end is RX queue N of the other).
        offloads: vec![("gro".into(), true)],
        ..TestbedSpec::default()
    })
    .unwrap();
    // Another testbed with the same addresses and interface names: its
    // packets must not be counted.
    let other = Testbed::up(TestbedSpec::default()).unwrap();
    pin_tx_queue(&tb.a.netns, "va", 4, 2);
    let udp = Rule {
        proto: 17,
        addr_a: Some(Ipv4Addr::new(10, 77, 1, 1)),
        addr_b: Some(Ipv4Addr::new(10, 77, 1, 2)),
        port_a: 0,
        port_b: 9999,
    };
    let tx = QueueView::attach(Iface::lookup(Some(&tb.a.netns), "va").unwrap(), &[udp], 4).unwrap();
    let rx = QueueView::attach(Iface::lookup(Some(&tb.b.netns), "vb").unwrap(), &[udp], 4).unwrap();
    let (n, len) = (500, 1000);
    udp_across(&tb, n, len, 9999);
    udp_across(&other, 300, len, 9999);
    // Another port on the same interfaces is another flow.
    udp_across(&tb, 50, len, 9998);
    let t = tx.read().unwrap();
    let r = rx.read().unwrap();
    let pkts = |c: &[fabkit_ebpf::QueueCount]| c.iter().map(|q| q.packets).collect::<Vec<_>>();
    assert_eq!(pkts(&t.tx), [0, 0, n as u64, 0], "{t:?}");
    // 1000 B of payload + UDP 8 + IPv4 20 + Ethernet 14.
    assert_eq!(t.tx[2].bytes, (n * (len + 42)) as u64);
    assert_eq!(t.tx[2].segments, n as u64);
    assert_eq!(t.tx_size_log2[10], n as u64, "1042 B is in [1024, 2048)");
    assert_eq!(t.tx_segs_log2[0], n as u64, "one segment each");
    assert_eq!(t.rx_total().packets, 0, "va received none of them");
    assert_eq!(pkts(&r.rx), [0, 0, n as u64, 0], "{r:?}");
    assert_eq!(r.rx_unrecorded.packets, 0);
    assert_eq!(r.rx[2].bytes, (n * (len + 28)) as u64, "L3 bytes on RX");
    drop((tx, rx));
    assert_eq!(
        loaded_ours(),
        0,
        "programs left loaded after the views dropped"
    );
}

#[test]
fn without_rules_every_packet_on_the_interface_counts_and_bad_input_is_refused() {
    let _g = serial();
    let tb = Testbed::up(TestbedSpec {
        queues: 2,
        ..TestbedSpec::default()
    })
    .unwrap();
    pin_tx_queue(&tb.a.netns, "va", 2, 0);
    let iface = Iface::lookup(Some(&tb.a.netns), "va").unwrap();
    let all = QueueView::attach(iface, &[], 2).unwrap();
    udp_across(&tb, 100, 64, 9999);
    let t = all.read().unwrap();
    // Everything on va counts, ARP included; the 100 datagrams of 106 B
    // (64 + UDP 8 + IPv4 20 + Ethernet 14) are the only ones in [64, 128).
    assert_eq!(t.tx_size_log2[6], 100, "{t:?}");
    assert!(t.tx[0].packets >= 100, "{t:?}");
    assert_eq!(t.tx[1].packets, 0, "{t:?}");
    let e = QueueView::attach(iface, &[Rule::default(); 9], 2).unwrap_err();
    assert!(e.to_string().contains("at most 8"), "{e}");
    let e = QueueView::attach(iface, &[], 0).unwrap_err();
    assert!(e.to_string().contains("queues must be"), "{e}");
    let e = Iface::lookup(Some(&tb.a.netns), "nosuch0").unwrap_err();
    assert!(e.to_string().contains("no interface nosuch0"), "{e}");
    let e = Iface::lookup(Some("no-such-netns"), "va").unwrap_err();
    assert!(e.to_string().contains("ip netns list"), "{e}");
}

#[test]
fn round_robin_deals_unconnected_datagrams_out_evenly_and_detaches() {
    let _g = serial();
    let tb = Testbed::up(TestbedSpec {
        queues: 4,
        ..TestbedSpec::default()
    })
    .unwrap();
    // XPS cleared: the kernel hashes, and the selector's choice stands.
    pin_tx_queue(&tb.a.netns, "va", 4, 0);
    for q in 0..4 {
        sh_in(
            &tb.a.netns,
            &format!("echo 0 > /sys/class/net/va/queues/tx-{q}/xps_cpus"),
        );
    }
    // One datagram first, so ARP is resolved before anything is dealt.
    udp_across(&tb, 1, 100, 9997);
    let udp = Rule {
        proto: 17,
        port_b: 9999,
        ..Rule::default()
    };
    let rr = RoundRobin::attach(Some(&tb.a.netns), "va", 4).unwrap();
    let tx = QueueView::attach(Iface::lookup(Some(&tb.a.netns), "va").unwrap(), &[udp], 4).unwrap();
    udp_across_with(&tb, 400, 500, 9999, true);
    let pkts = |c: &[fabkit_ebpf::QueueCount]| c.iter().map(|q| q.packets).collect::<Vec<_>>();
    let t = tx.read().unwrap();
    assert_eq!(pkts(&t.tx), [100, 100, 100, 100], "{t:?}");
    // A connected socket caches the queue of its first datagram.
    let one = Rule {
        proto: 17,
        port_b: 9996,
        ..Rule::default()
    };
    let tx1 =
        QueueView::attach(Iface::lookup(Some(&tb.a.netns), "va").unwrap(), &[one], 4).unwrap();
    udp_across_with(&tb, 100, 500, 9996, false);
    let mut c = pkts(&tx1.read().unwrap().tx);
    c.sort_unstable();
    assert_eq!(c, [0, 0, 0, 100], "connected UDP stays on one queue");
    drop((rr, tx, tx1));
    assert_eq!(loaded_ours(), 0, "the selector stayed attached after drop");
    let e = RoundRobin::attach(Some(&tb.a.netns), "va", 0).unwrap_err();
    assert!(e.to_string().contains("queues must be"), "{e}");
    let e = RoundRobin::attach(Some(&tb.a.netns), "nosuch0", 4).unwrap_err();
    assert!(e.to_string().contains("nosuch0"), "{e}");
}
