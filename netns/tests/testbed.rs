//! The testbed itself, for real (as root, as CI runs), with plain sockets:
//! it leaves nothing behind, also when the test body panics; two at once
//! are separate hosts; the gateway forwards between two MTU domains;
//! management links reach the root namespace and go with the testbed; and
//! what it is asked for is checked before anything is made. ipoib-eval's
//! tests measure across it, the eBPF tests count packets on its veths and
//! fabkit's run ranks in its namespaces.

use std::io::{Read, Write};
use std::net::{IpAddr, Ipv4Addr, SocketAddr, TcpListener, TcpStream};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::process::Command;
use std::time::Duration;

use fabkit_netns::serial;
use fabkit_netns::testbed::{self, Testbed, TestbedSpec};

fn link(netns: &str, iface: &str) -> serde_json::Value {
    let o = Command::new("ip")
        .args(["-n", netns, "-d", "-j", "link", "show", "dev", iface])
        .output()
        .unwrap();
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    v[0].clone()
}

fn queues(netns: &str, iface: &str) -> u64 {
    link(netns, iface)["num_tx_queues"].as_u64().unwrap()
}

fn mtu(netns: &str, iface: &str) -> u64 {
    link(netns, iface)["mtu"].as_u64().unwrap()
}

/// Runs `f` on a thread inside namespace `netns` (sockets it makes stay
/// in that namespace wherever they are used afterwards).
fn inside<T: Send + 'static>(netns: &str, f: impl FnOnce() -> T + Send + 'static) -> T {
    let netns = netns.to_string();
    std::thread::spawn(move || {
        testbed::enter(&netns).unwrap();
        f()
    })
    .join()
    .unwrap()
}

/// A listener inside `netns` on `addr`; it takes one connection and
/// returns how many bytes came before it closed.
fn sink(netns: &str, addr: IpAddr) -> (SocketAddr, std::thread::JoinHandle<usize>) {
    let l = inside(netns, move || TcpListener::bind((addr, 0)).unwrap());
    let at = l.local_addr().unwrap();
    let h = std::thread::spawn(move || {
        let (mut s, _) = l.accept().unwrap();
        s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
        let mut n = 0;
        let mut buf = [0u8; 65536];
        loop {
            match s.read(&mut buf).unwrap() {
                0 => return n,
                k => n += k,
            }
        }
    });
    (at, h)
}

/// A TCP connection from inside `netns` to `to` (refused or timed out: Err).
fn connect_from(netns: &str, to: SocketAddr) -> std::io::Result<TcpStream> {
    inside(netns, move || {
        TcpStream::connect_timeout(&to, Duration::from_millis(500))
    })
}

/// Sends `bytes` from host namespace `from` to a listener in `to` at `addr`;
/// returns what arrived.
fn transfer(from: &str, to: &str, addr: IpAddr, bytes: usize) -> usize {
    let (at, got) = sink(to, addr);
    let mut s = connect_from(from, at).unwrap();
    s.write_all(&vec![7u8; bytes]).unwrap();
    drop(s);
    got.join().unwrap()
}

#[test]
fn up_and_down_leave_nothing_behind_even_when_the_body_panics() {
    let _g = serial();
    let spec = TestbedSpec {
        queues: 2,
        ..TestbedSpec::default()
    };
    let name = spec.name.clone();
    let r = catch_unwind(AssertUnwindSafe(|| {
        let tb = Testbed::up(spec).unwrap();
        assert_eq!(testbed::status(&name).len(), 2);
        assert_eq!(queues(&tb.a.netns, "va"), 2);
        panic!("the test body fails");
    }));
    assert!(r.is_err());
    assert!(
        testbed::status(&name).is_empty(),
        "{:?}",
        testbed::namespaces()
    );
    // down is idempotent.
    testbed::down(&name).unwrap();
    testbed::down(&name).unwrap();
}

#[test]
fn the_namespaces_listed_are_those_ip_netns_list_shows() {
    let _g = serial();
    let tb = Testbed::up(TestbedSpec::default()).unwrap();
    let shown = || {
        let o = Command::new("ip").args(["netns", "list"]).output().unwrap();
        // `name (id: N)`: the name is the first word.
        let mut v: Vec<String> = String::from_utf8_lossy(&o.stdout)
            .lines()
            .filter_map(|l| l.split_whitespace().next().map(str::to_string))
            .collect();
        v.sort();
        v
    };
    // Other processes (tests of other crates) may add or remove namespaces
    // meanwhile: compare a listing taken between two that agree.
    let (mut before, mut listed, mut after) = (Vec::new(), Vec::new(), Vec::new());
    for _ in 0..20 {
        before = shown();
        listed = testbed::namespaces();
        after = shown();
        if before == after {
            break;
        }
    }
    assert_eq!(before, after, "namespaces kept changing");
    assert_eq!(listed, before);
    assert!(listed.contains(&tb.a.netns) && listed.contains(&tb.b.netns));
}

#[test]
fn an_offload_ethtool_does_not_know_is_refused_before_anything_is_made_or_removed() {
    let _g = serial();
    // A testbed of the same name is up (a killed run's): a refused `up`
    // leaves it as it is, where an accepted one would replace it.
    let stale = Testbed::up(TestbedSpec::default()).unwrap();
    let name = stale.spec().name.clone();
    stale.keep();
    let spec = |offloads: &[(&str, bool)]| TestbedSpec {
        name: name.clone(),
        offloads: offloads
            .iter()
            .map(|&(f, on)| (f.to_string(), on))
            .collect(),
        ..TestbedSpec::default()
    };
    for bad in [
        &[("bogus", true)][..],
        &[("gro", false), ("ufo", true)],
        &[("", true)],
    ] {
        let e = Testbed::up(spec(bad)).unwrap_err();
        assert!(matches!(e, testbed::TestbedError::Invalid(_)), "{e:?}");
        let e = e.to_string();
        assert!(e.contains("no such feature") && !e.contains('\n'), "{e}");
        assert_eq!(testbed::status(&name).len(), 2, "{bad:?}");
    }
    // Long and short names pass the check, and are applied.
    let tb = Testbed::up(spec(&[
        ("gro", true),
        ("tx-udp-segmentation", false),
        ("rx-udp-gro-forwarding", true),
    ]))
    .unwrap();
    let k = Command::new("ip")
        .args(["netns", "exec", &tb.a.netns, "ethtool", "-k", "va"])
        .output()
        .unwrap();
    let k = String::from_utf8_lossy(&k.stdout);
    // veth's defaults are the other way round.
    assert!(k.contains("generic-receive-offload: on"), "{k}");
    assert!(k.contains("tx-udp-segmentation: off"), "{k}");
    assert!(k.contains("rx-udp-gro-forwarding: on"), "{k}");
    drop(tb);
    assert!(testbed::status(&name).is_empty());
}

#[test]
fn two_testbeds_at_once_are_separate_hosts() {
    let _g = serial();
    let one = Testbed::up(TestbedSpec::default()).unwrap();
    let two = Testbed::up(TestbedSpec {
        queues: 1,
        ..TestbedSpec::default()
    })
    .unwrap();
    assert_ne!(one.a.netns, two.a.netns);
    assert_eq!(queues(&one.a.netns, "va"), 4);
    assert_eq!(queues(&two.a.netns, "va"), 1);
    assert_eq!(
        transfer(&one.a.netns, &one.b.netns, one.b.addr, 100_000),
        100_000
    );
    // The second testbed's hosts have the same addresses, and reach their
    // own peer under the first's server address: nothing listens there.
    let addr = one.b.addr;
    let l = inside(&one.b.netns, move || TcpListener::bind((addr, 0)).unwrap());
    assert!(connect_from(&two.a.netns, l.local_addr().unwrap()).is_err());
    let names = [one.a.netns.clone(), two.a.netns.clone()];
    drop((l, one, two));
    let left = testbed::namespaces();
    assert!(names.iter().all(|n| !left.contains(n)), "{left:?}");
}

#[test]
fn the_gateway_forwards_between_two_mtu_domains() {
    let _g = serial();
    let tb = Testbed::up(TestbedSpec {
        gateway: true,
        mtu: 1500,
        mtu_b: 9000,
        ..TestbedSpec::default()
    })
    .unwrap();
    assert_eq!(testbed::status(&tb.spec().name).len(), 3);
    let g = tb.gateway.clone().unwrap();
    assert_eq!((mtu(&tb.a.netns, "va"), mtu(&g, "ga")), (1500, 1500));
    assert_eq!((mtu(&g, "gb"), mtu(&tb.b.netns, "vb")), (9000, 9000));
    assert_ne!(tb.a.addr, tb.b.addr);
    let n = 200 * 65536;
    assert_eq!(transfer(&tb.a.netns, &tb.b.netns, tb.b.addr, n), n);
    // And back.
    assert_eq!(transfer(&tb.b.netns, &tb.a.netns, tb.a.addr, n), n);
}

#[test]
fn an_outsider_reaches_both_hosts_through_the_gateway_and_goes_with_the_testbed() {
    let _g = serial();
    assert!(Testbed::up(TestbedSpec {
        outsider: true,
        ..TestbedSpec::default()
    })
    .is_err_and(|e| e.to_string().contains("gateway")));
    let tb = Testbed::up(TestbedSpec {
        gateway: true,
        outsider: true,
        ..TestbedSpec::default()
    })
    .unwrap();
    let name = tb.spec().name.clone();
    assert_eq!(testbed::status(&name).len(), 4);
    let x = tb.outsider.clone().unwrap();
    for h in [&tb.a, &tb.b] {
        let addr = h.addr;
        let l = inside(&h.netns, move || TcpListener::bind((addr, 0)).unwrap());
        let s = connect_from(&x.netns, l.local_addr().unwrap()).unwrap();
        assert_eq!(s.local_addr().unwrap().ip(), x.addr);
    }
    drop(tb);
    assert!(
        testbed::status(&name).is_empty(),
        "{:?}",
        testbed::namespaces()
    );
}

#[test]
fn management_links_reach_the_root_namespace_and_go_with_the_testbed() {
    let _g = serial();
    let mgmt = || TestbedSpec {
        mgmt: true,
        ..TestbedSpec::default()
    };
    let (one, two) = (Testbed::up(mgmt()).unwrap(), Testbed::up(mgmt()).unwrap());
    let hosts = [&one.a, &one.b, &two.a, &two.b];
    let addrs: Vec<Ipv4Addr> = hosts.iter().map(|h| h.mgmt.unwrap()).collect();
    for (i, x) in addrs.iter().enumerate() {
        assert!(addrs[i + 1..].iter().all(|y| y != x), "{addrs:?}");
    }
    // A listener in the root namespace (this thread's), reached from a host
    // of the other testbed over its management link (its default route),
    // not over the data link.
    let root = TcpListener::bind("0.0.0.0:0").unwrap();
    let root_side = Ipv4Addr::from(u32::from(one.a.mgmt.unwrap()) - 1);
    let to = SocketAddr::new(root_side.into(), root.local_addr().unwrap().port());
    let s = connect_from(&two.b.netns, to).unwrap();
    assert_eq!(
        s.local_addr().unwrap().ip(),
        IpAddr::from(two.b.mgmt.unwrap())
    );
    let o = Command::new("ip")
        .args(["-n", &two.b.netns, "-4", "-o", "addr", "show", "dev"])
        .arg(testbed::MGMT_IFACE)
        .output()
        .unwrap();
    let on_mg = String::from_utf8_lossy(&o.stdout);
    assert!(
        on_mg.contains(&format!("{}/30", two.b.mgmt.unwrap())),
        "{on_mg}"
    );
    drop((s, root));
    drop((one, two));
    // The root ends are gone when down returns.
    let o = Command::new("ip")
        .args(["-4", "-j", "addr"])
        .output()
        .unwrap();
    let left = String::from_utf8_lossy(&o.stdout);
    for a in addrs {
        let root = Ipv4Addr::from(u32::from(a) - 1).to_string();
        assert!(
            !left.contains(&format!("\"{root}\"")),
            "{root} left: {left}"
        );
    }
}
