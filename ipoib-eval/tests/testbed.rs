//! ipoib-eval across the namespace testbed (`fabkit-netns`), for real (as
//! root, as CI runs): two testbeds at once do not collide; ipoib-eval
//! measures across one with `--netns`, with the wire counters of each end's
//! own veth; the gateway forwards between two MTU domains; management links
//! reach the root namespace; and `ipoib-eval testbed` brings one up and down.

use std::process::{Child, Command, Stdio};

use fabkit_netns::serial;
use fabkit_netns::testbed::{self, Testbed, TestbedSpec};

fn bin() -> Command {
    Command::new(env!("CARGO_BIN_EXE_ipoib-eval"))
}

struct Killed(Child);
impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// A server inside `netns`, ready when it says it listens.
fn server_in(netns: &str) -> Killed {
    let mut c = bin()
        .args(["server", "-q", "--netns", netns])
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap();
    let mut line = String::new();
    std::io::BufRead::read_line(
        &mut std::io::BufReader::new(c.stdout.take().unwrap()),
        &mut line,
    )
    .unwrap();
    assert!(line.contains("listening"), "{line:?}");
    Killed(c)
}

fn client_json(netns: &str, args: &[&str]) -> serde_json::Value {
    let o = bin()
        .args(["client", "--netns", netns, "-J"])
        .args(args)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    serde_json::from_slice(&o.stdout).unwrap()
}

fn queues(netns: &str, iface: &str) -> u64 {
    let o = Command::new("ip")
        .args(["-n", netns, "-d", "-j", "link", "show", "dev", iface])
        .output()
        .unwrap();
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    v[0]["num_tx_queues"].as_u64().unwrap()
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
    let _s = server_in(&one.b.netns);
    let v = client_json(
        &one.a.netns,
        &[&one.b.addr.to_string(), "-k", "100", "-l", "1000"],
    );
    assert_eq!(v["totals"][0]["received_msgs"], 100);
    // The second testbed's hosts cannot reach the first's server.
    let o = bin()
        .args([
            "client",
            "--netns",
            &two.a.netns,
            &one.b.addr.to_string(),
            "-k",
            "1",
            "--timeout",
            "0.5",
        ])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(1));
    let names = [one.a.netns.clone(), two.a.netns.clone()];
    drop((one, two));
    let left = testbed::namespaces();
    assert!(names.iter().all(|n| !left.contains(n)), "{left:?}");
}

#[test]
fn ipoib_eval_measures_across_the_testbed_with_each_ends_own_counters() {
    let _g = serial();
    let tb = Testbed::up(TestbedSpec::default()).unwrap();
    let _s = server_in(&tb.b.netns);
    let n = 4000u64;
    let v = client_json(
        &tb.a.netns,
        &[
            &tb.b.addr.to_string(),
            "-u",
            "-b",
            "0",
            "-l",
            "1000",
            "-k",
            &n.to_string(),
            "-w",
            "16M",
            "-i",
            "0",
        ],
    );
    assert_eq!(v["totals"][0]["received_msgs"], n);
    assert_eq!(v["client"]["iface"]["name"], "va");
    assert_eq!(v["server"]["iface"]["name"], "vb");
    assert_eq!(v["client"]["iface"]["tx_queues"], 4);
    assert_eq!(v["same_host"], true);
    assert_ne!(v["client"]["host"]["netns"], v["server"]["host"]["netns"]);
    // One datagram per packet on veth; the rest is the control connection
    // and ARP (IPv6 is off, so no ND/MLD).
    let rx = v["server"]["wire"]["rx_packets"].as_u64().unwrap();
    assert!(rx >= n && rx < n + 200, "{rx}");
    let tx = v["client"]["wire"]["tx_packets"].as_u64().unwrap();
    assert!(tx >= n && tx < n + 200, "{tx}");

    // GSO trains cross the veth whole: fewer packets than messages.
    let v = client_json(
        &tb.a.netns,
        &[
            &tb.b.addr.to_string(),
            "-u",
            "-b",
            "0",
            "-l",
            "1000",
            "-k",
            "6400",
            "-w",
            "16M",
            "--send",
            "gso:32",
            "--recv",
            "gro",
            "-i",
            "0",
        ],
    );
    assert_eq!(v["totals"][0]["received_msgs"], 6400);
    assert!(
        v["msgs_per_wire_packet"].as_f64().unwrap() > 4.0,
        "{}",
        v["msgs_per_wire_packet"]
    );
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
    let _s = server_in(&tb.b.netns);
    let v = client_json(
        &tb.a.netns,
        &[
            &tb.b.addr.to_string(),
            "-k",
            "200",
            "-l",
            "65536",
            "-i",
            "0",
        ],
    );
    assert_eq!(v["totals"][0]["received_bytes"], 200 * 65536);
    assert_eq!(v["client"]["iface"]["mtu"], 1500);
    assert_eq!(v["server"]["iface"]["mtu"], 9000);
    // And back (the server sends through the gateway to the client).
    let v = client_json(
        &tb.a.netns,
        &[
            &tb.b.addr.to_string(),
            "-R",
            "-u",
            "-l",
            "1400",
            "-k",
            "500",
            "-b",
            "50M",
            "-i",
            "0",
        ],
    );
    assert_eq!(v["totals"][0]["direction"], "server->client");
    assert_eq!(v["totals"][0]["received_msgs"], 500);
}

#[test]
fn the_command_line_testbed_comes_up_reports_and_goes_down() {
    let _g = serial();
    let name = testbed::auto_name();
    let o = bin()
        .args([
            "testbed",
            "up",
            "--name",
            &name,
            "--queues",
            "2",
            "--qdisc",
            "pfifo",
            "--offload",
            "gro=off",
        ])
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let o = bin()
        .args(["testbed", "status", "--name", &name])
        .output()
        .unwrap();
    assert_eq!(String::from_utf8_lossy(&o.stdout).lines().count(), 2);
    let q = Command::new("ip")
        .args([
            "netns",
            "exec",
            &format!("{name}-a"),
            "tc",
            "qdisc",
            "show",
            "dev",
            "va",
        ])
        .output()
        .unwrap();
    assert!(
        String::from_utf8_lossy(&q.stdout).contains("qdisc pfifo"),
        "{q:?}"
    );
    // up again replaces it (a stale testbed of a dead run).
    assert!(bin()
        .args(["testbed", "up", "--name", &name])
        .status()
        .unwrap()
        .success());
    assert!(bin()
        .args(["testbed", "down", "--name", &name])
        .status()
        .unwrap()
        .success());
    let o = bin()
        .args(["testbed", "status", "--name", &name])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(1));
    let o = bin()
        .args(["testbed", "up", "--name", "bad name"])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2));
    let o = bin()
        .args(["testbed", "up", "--queues", "0"])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&o.stderr).contains("--queues"));
    let o = bin()
        .args(["testbed", "up", "--name", &name, "--offload", "gro"])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2));
    let o = bin()
        .args(["client", "10.0.0.1", "--netns", "no-such-ns"])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&o.stderr).contains("no-such-ns"));
    assert!(testbed::status(&name).is_empty());
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
    let addrs: Vec<std::net::Ipv4Addr> = hosts.iter().map(|h| h.mgmt.unwrap()).collect();
    for (i, x) in addrs.iter().enumerate() {
        assert!(addrs[i + 1..].iter().all(|y| y != x), "{addrs:?}");
    }
    // A server in the root namespace, reached from a host over its
    // management link (its default route), not over the data link.
    let mut c = bin()
        .args(["server", "-q", "-p", "0"])
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    std::io::BufRead::read_line(
        &mut std::io::BufReader::new(c.stdout.take().unwrap()),
        &mut line,
    )
    .unwrap();
    let _root = Killed(c);
    let port = line.trim().rsplit(' ').next().unwrap().to_string();
    let root_side = std::net::Ipv4Addr::from(u32::from(one.a.mgmt.unwrap()) - 1);
    let v = client_json(
        &two.b.netns,
        &[&root_side.to_string(), "-p", &port, "-k", "10", "-l", "100"],
    );
    assert_eq!(v["totals"][0]["received_msgs"], 10);
    assert_eq!(v["client"]["iface"]["name"], testbed::MGMT_IFACE, "{v}");
    drop((one, two));
    // The root ends are gone when down returns.
    let o = Command::new("ip")
        .args(["-4", "-j", "addr"])
        .output()
        .unwrap();
    let left = String::from_utf8_lossy(&o.stdout);
    for a in addrs {
        let root = std::net::Ipv4Addr::from(u32::from(a) - 1).to_string();
        assert!(
            !left.contains(&format!("\"{root}\"")),
            "{root} left: {left}"
        );
    }
}
