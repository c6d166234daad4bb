//! Sweeps on a "real" interface, as on a cluster: the client's end and the
//! server's end each set and restore their own interface. The interfaces
//! are a testbed's veth pair, each process runs inside its host's namespace
//! (`ip netns exec`, as a node's own root namespace would be), and nothing
//! here knows they are veths. Root, as CI has.
//!
//! What is checked: both ends changed (MTU in the rows of both sides), every
//! setting back afterwards (the same `ip`, `ethtool`, `tc` and sysfs output
//! as before), after a normal end, after SIGTERM/SIGINT, and after SIGKILL
//! through `ipoib-eval restore`; and an interrupted testbed sweep leaves no
//! namespace.

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};

use fabkit_netns::testbed::{Testbed, TestbedSpec};

const BIN: &str = env!("CARGO_BIN_EXE_ipoib-eval");

/// Everything the sweep may change on `iface`, as the system tools print it.
fn snapshot(ns: &str, iface: &str) -> String {
    let sh = format!(
        "ip link show dev {iface} | head -1; ethtool -k {iface}; ethtool -l {iface}; \
         tc qdisc show dev {iface}; cat /sys/class/net/{iface}/queues/tx-*/xps_cpus"
    );
    let o = Command::new("ip")
        .args(["netns", "exec", ns, "sh", "-c", &sh])
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    String::from_utf8(o.stdout).unwrap()
}

/// `ipoib-eval ARGS` inside namespace `ns`.
fn in_ns(ns: &str, args: &[&str]) -> Command {
    let mut c = Command::new("ip");
    c.args(["netns", "exec", ns, BIN]).args(args);
    c
}

/// A child killed on drop: a failing test leaves no process behind.
struct Reaped(Child);

impl Drop for Reaped {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// A server in `ns` that may set `iface`, once it says it listens.
fn server(ns: &str, iface: &str, port: u16) -> Reaped {
    let mut s = in_ns(
        ns,
        &[
            "server",
            "-q",
            "-p",
            &port.to_string(),
            "--sweep-iface",
            iface,
        ],
    )
    .stdout(Stdio::piped())
    .stderr(Stdio::null())
    .spawn()
    .unwrap();
    let mut line = String::new();
    BufReader::new(s.stdout.as_mut().unwrap())
        .read_line(&mut line)
        .unwrap();
    assert!(line.contains("listening"), "{line}");
    Reaped(s)
}

fn signal(child: &Child, sig: &str) {
    let ok = Command::new("kill")
        .args([sig, &child.id().to_string()])
        .status()
        .unwrap()
        .success();
    assert!(ok);
}

/// Reads `child`'s stderr until a line starts with `prefix`, then keeps
/// draining it on a thread (the child goes on writing).
fn stderr_until(child: &mut Child, prefix: &str) {
    let mut seen = String::new();
    let mut r = BufReader::new(child.stderr.take().unwrap());
    loop {
        let mut l = String::new();
        assert!(
            r.read_line(&mut l).unwrap() > 0,
            "ended before `{prefix}`: {seen}"
        );
        seen.push_str(&l);
        if l.starts_with(prefix) {
            std::thread::spawn(move || std::io::copy(&mut r, &mut std::io::sink()));
            return;
        }
    }
}

fn rows(csv: &str) -> Vec<std::collections::HashMap<String, String>> {
    let mut rd = csv::Reader::from_reader(csv.as_bytes());
    let header = rd.headers().unwrap().clone();
    rd.records()
        .map(|f| {
            header
                .iter()
                .zip(&f.unwrap())
                .map(|(h, v)| (h.to_string(), v.to_string()))
                .collect()
        })
        .collect()
}

/// `ipoib-eval sweep FILE -o OUT` in host a over its `va`, against the
/// server in host b on `port`.
fn sweep_on_va(tb: &Testbed, file: &Path, out: &Path, port: u16) -> Command {
    let mut c = in_ns(&tb.a.netns, &["sweep"]);
    c.arg(file).arg("-o").arg(out).args([
        "--iface",
        "va",
        "--peer",
        &tb.b.addr.to_string(),
        "-p",
        &port.to_string(),
    ]);
    c
}

const FILE: &str = "seconds = 0.5\n[axes]\nqueues = [2]\nmtu = [9000]\n\
    offloads = [\"tso=off,gro=on\"]\nqdisc = [\"pfifo_fast\"]\ntxqueuelen = [100]\n\
    policy = [\"xps\"]\nproto = [\"udp\"]\nrate = [\"100M\"]\n\
    direction = [\"forward\", \"reverse\"]\n";

#[test]
fn a_sweep_sets_both_ends_and_each_end_restores_its_own() {
    let tb = Testbed::up(TestbedSpec::default()).unwrap();
    let (a, b) = (tb.a.netns.clone(), tb.b.netns.clone());
    let (before_a, before_b) = (snapshot(&a, "va"), snapshot(&b, "vb"));
    let mut srv = server(&b, "vb", 5321);
    let dir = tempfile::tempdir().unwrap();
    let (file, out) = (dir.path().join("s.toml"), dir.path().join("s.csv"));
    std::fs::write(&file, FILE).unwrap();
    let o = sweep_on_va(&tb, &file, &out, 5321).output().unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let r = rows(&std::fs::read_to_string(&out).unwrap());
    assert_eq!(r.len(), 2);
    for row in &r {
        // Both ends ran at the point's MTU: the server set its own side.
        assert_eq!(
            (row["client_mtu"].as_str(), row["server_mtu"].as_str()),
            ("9000", "9000")
        );
        if row["direction"] == "client->server" {
            assert_eq!(row["policy_effect"], "took effect", "{row:?}");
            assert_eq!(row["tx_queue_packets"].split(' ').count(), 2, "{row:?}");
            assert_eq!(row["rx_queue_packets"], "", "{row:?}");
        } else {
            // The peer sent: only our RX queues are seen.
            assert_eq!(row["tx_queue_packets"], "", "{row:?}");
            assert!(row["policy_effect"].starts_with("not seen"), "{row:?}");
            let rx: u64 = row["rx_queue_packets"]
                .split(' ')
                .map(|x| x.parse::<u64>().unwrap())
                .sum();
            assert!(rx > 0, "{row:?}");
        }
    }
    assert_eq!(snapshot(&a, "va"), before_a, "the sweep's end is restored");
    // The sweep told the server to put its end back; it still runs.
    assert_eq!(snapshot(&b, "vb"), before_b, "the server's end is restored");
    assert!(srv.0.try_wait().unwrap().is_none());
    signal(&srv.0, "-TERM");
    assert_eq!(srv.0.wait().unwrap().code(), Some(128 + 15));
    assert_eq!(snapshot(&b, "vb"), before_b, "the server's end is restored");
    let o = in_ns(&b, &["restore"]).output().unwrap();
    assert!(String::from_utf8_lossy(&o.stdout).contains("nothing to restore"));
}

#[test]
fn a_killed_sweep_and_server_are_undone_by_restore() {
    let tb = Testbed::up(TestbedSpec::default()).unwrap();
    let (a, b) = (tb.a.netns.clone(), tb.b.netns.clone());
    let (before_a, before_b) = (snapshot(&a, "va"), snapshot(&b, "vb"));
    let mut srv = server(&b, "vb", 5322);
    let dir = tempfile::tempdir().unwrap();
    let (file, out) = (dir.path().join("s.toml"), dir.path().join("s.csv"));
    std::fs::write(&file, FILE).unwrap();
    let mut sw = Reaped(
        sweep_on_va(&tb, &file, &out, 5322)
            .stderr(Stdio::piped())
            .spawn()
            .unwrap(),
    );
    // One point done, the second under way: the settings are changed.
    stderr_until(&mut sw.0, "[1/2]");
    signal(&sw.0, "-KILL");
    sw.0.wait().unwrap();
    // Killed: nothing ran to undo, both ends are still at the point's settings.
    assert_ne!(snapshot(&a, "va"), before_a);
    assert!(snapshot(&b, "vb").contains("mtu 9000"));
    // The server ends on SIGINT and restores its end itself.
    signal(&srv.0, "-INT");
    assert_eq!(srv.0.wait().unwrap().code(), Some(128 + 2));
    assert_eq!(snapshot(&b, "vb"), before_b, "vb");
    // The sweep's record stays for `restore`.
    let o = in_ns(&a, &["restore"]).output().unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let said = String::from_utf8_lossy(&o.stdout);
    assert!(said.contains("va: settings restored"), "{said}");
    assert_eq!(snapshot(&a, "va"), before_a, "va");
}

#[test]
fn an_interrupted_testbed_sweep_leaves_no_namespace() {
    let dir = tempfile::tempdir().unwrap();
    let (file, out) = (dir.path().join("s.toml"), dir.path().join("s.csv"));
    std::fs::write(
        &file,
        "seconds = 0.5\nrepetitions = 3\n[axes]\nproto = [\"udp\"]\nrate = [\"10M\"]\n",
    )
    .unwrap();
    let mut sw = Reaped(
        Command::new(BIN)
            .arg("sweep")
            .arg(&file)
            .arg("-o")
            .arg(&out)
            .stderr(Stdio::piped())
            .spawn()
            .unwrap(),
    );
    let prefix = format!("ipe{}x", sw.0.id());
    stderr_until(&mut sw.0, "[1/3]");
    // Interrupt while a point's testbed exists (the next one is being
    // built or measured), not in the gap between two.
    let mine = || {
        fabkit_netns::testbed::namespaces()
            .into_iter()
            .filter(|n| n.starts_with(&prefix))
            .collect::<Vec<String>>()
    };
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    while mine().is_empty() {
        assert!(std::time::Instant::now() < deadline, "no second testbed");
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
    signal(&sw.0, "-INT");
    assert_eq!(sw.0.wait().unwrap().code(), Some(128 + 2));
    assert_eq!(mine(), Vec::<String>::new());
}
