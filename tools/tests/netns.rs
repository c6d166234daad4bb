//! Hosts as they are: ranks in two network namespaces of this machine are
//! two hosts (no loopback between them, no same-node shortcut), and
//! `fabkit launch` starts ranks across namespaces without MPI. Uses
//! ipoib-eval's testbed (real namespaces and veths, removed on drop); needs
//! root, as CI has.

use std::process::Command;

use fabkit_fabric::bootstrap::host_id;
use ipoib_eval::testbed::{self, Testbed, TestbedSpec};
use serde_json::Value;

fn fabkit() -> Command {
    Command::new(env!("CARGO_BIN_EXE_fabkit"))
}

fn check_json(path: &std::path::Path) -> Value {
    let v: Value = serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    assert_eq!(v[0]["ok"], true, "{v:#}");
    assert_eq!(v[0]["ranks"], 2);
    v
}

#[test]
fn a_thread_in_another_namespace_is_another_host() {
    let tb = Testbed::up(TestbedSpec::default()).unwrap();
    let me = host_id();
    let ns = tb.a.netns.clone();
    let there = std::thread::spawn(move || {
        testbed::enter(&ns).unwrap();
        host_id()
    })
    .join()
    .unwrap();
    assert_ne!(me, there);
    // Same machine name, another namespace.
    assert_eq!(me.split('/').next(), there.split('/').next());
    assert_eq!(host_id(), me);
}

#[test]
fn check_across_two_namespaces_goes_over_the_veths_not_loopback() {
    let tb = Testbed::up(TestbedSpec::default()).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("check.json");
    let o = fabkit()
        .args([
            "launch",
            "--netns",
            &format!("{},{}", tb.a.netns, tb.b.netns),
            "--timeout",
            "30",
            "--",
        ])
        .arg(env!("CARGO_BIN_EXE_fabkit"))
        .args(["check", "-p", "tcp;ofi_rxm", "--json"])
        .arg(&json)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let v = check_json(&json);
    let domains: Vec<&str> = v[0]["reports"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["domain"].as_str().unwrap())
        .collect();
    assert_eq!(
        domains,
        ["va", "vb"],
        "each rank uses the interface that reaches the other"
    );
}

#[test]
fn launch_without_namespaces_runs_processes_on_one_host() {
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("check.json");
    let o = fabkit()
        .args(["launch", "-n", "2", "--"])
        .arg(env!("CARGO_BIN_EXE_fabkit"))
        .args(["check", "-p", "tcp;ofi_rxm", "--json"])
        .arg(&json)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let v = check_json(&json);
    // One host: loopback.
    assert_eq!(v[0]["reports"][1]["domain"], "lo");
    assert!(String::from_utf8_lossy(&o.stdout).contains("as processes (fabkit launch)"));
}

#[test]
fn launch_reports_a_failing_rank_and_its_bad_input() {
    let t = std::time::Instant::now();
    let o = fabkit()
        .args(["launch", "-n", "2", "--"])
        .arg(env!("CARGO_BIN_EXE_fabkit"))
        .args(["check", "-p", "no-such-provider"])
        .output()
        .unwrap();
    assert!(!o.status.success());
    assert!(String::from_utf8_lossy(&o.stderr).contains("no-such-provider"));
    assert!(t.elapsed() < std::time::Duration::from_secs(30));
    for bad in [
        &["launch", "--"][..],
        &["launch", "-n", "0", "--", "true"],
        &["launch", "--netns", "a,b", "-n", "3", "--", "true"],
    ] {
        let o = fabkit().args(bad).output().unwrap();
        assert_eq!(o.status.code(), Some(2), "{bad:?}");
    }
    let o = fabkit()
        .args(["launch", "--netns", "no-such-ns", "--", "true"])
        .output()
        .unwrap();
    assert!(!o.status.success());
    assert!(testbed::namespaces()
        .iter()
        .all(|n| !n.starts_with("no-such")));
}
