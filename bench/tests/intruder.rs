//! No one outside the job reads or writes the table. An outsider on the
//! testbed's network (a third namespace behind the gateway, on a link of
//! its own: it reaches both hosts but cannot capture their traffic) runs
//! `fabkit intrude` while a two-host job runs: it finds the ranks by
//! scanning their hosts' ports, opens its own endpoint on the job's
//! provider, and tries RMA reads, writes and fetch-adds with guessed keys
//! and forged messages. Needs root (namespaces), as CI has.
//!
//! The job holds its written table (`fabkit dht --hold`) while the
//! intruder runs, its services and progress threads answering; then it
//! reads every key back. Each case asserts what the attack came to on
//! both sides: the intruder found the ranks and none of its tries was
//! carried out or answered, the job read every key back as written, and
//! on the message path the services counted the forged messages as
//! refused from strangers. (The job's throughput under a running attack
//! is measured in results/intruder/, not here.) The provider's own refusals of RMA happen
//! inside it, where the job cannot count them; the intruder's tally says
//! how each try was refused.
//!
//! Keys tried: where the provider keeps the connection after a refusal
//! (sockets, on the RMA path), all of 0..65535 and 1024 random ones;
//! over `tcp;ofi_rxm` the target closes the connection on each bad key,
//! so every try costs the intruder a new endpoint, and CI tries 0..63 and
//! 16 random ones (results/intruder/ has the whole range).

use std::process::{Command, Stdio};

mod common;
use common::fabkit;

use fabkit_netns::testbed::{Testbed, TestbedSpec};
use serde_json::Value;

/// A two-rank job (`launch` how) of the chunked table over `how`: 200
/// keys written, held until `go` exists, then read back; its report in
/// `json`.
fn held_job(
    launch: &[&str],
    how: &[&str],
    json: &std::path::Path,
    go: &std::path::Path,
) -> std::process::Child {
    fabkit()
        .arg("launch")
        .args(launch)
        .args(["--timeout", "600", "--"])
        .arg(env!("CARGO_BIN_EXE_fabkit"))
        .args(["dht", "-v", "chunked"])
        .args(how)
        .args([
            "-k",
            "200",
            "-w",
            "paper",
            "--read-pct",
            "100",
            "--ops",
            "20000",
        ])
        .args([
            "--no-redis",
            "--hot-rounds",
            "0",
            "--latency-ops",
            "0",
            "--json",
        ])
        .arg(json)
        .arg("--hold")
        .arg(go)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

/// One attack on one running job: the job's report and the intruder's.
fn attacked(
    tb: &Testbed,
    provider: &str,
    path: &str,
    (keys, random): (&str, &str),
) -> (Value, Value, String) {
    let x = tb.outsider.as_ref().expect("the testbed has an outsider");
    let dir = tempfile::tempdir().unwrap();
    let (job_json, attack_json) = (dir.path().join("job.json"), dir.path().join("attack.json"));
    let go = dir.path().join("go");
    let case = format!("{provider} --path {path}");
    let mut job = held_job(
        &["--netns", &format!("{},{}", tb.a.netns, tb.b.netns)],
        &["-p", provider, "-d", "10.77.0.0/16", "--path", path],
        &job_json,
        &go,
    );
    // Every rank has one endpoint on the RMA path, and a service and a
    // client endpoint on the message path.
    let want = if path == "rma" { "2" } else { "4" };
    let a = Command::new("ip")
        .args([
            "netns",
            "exec",
            &x.netns,
            env!("CARGO_BIN_EXE_fabkit"),
            "intrude",
        ])
        .args(["-p", provider, "-d", "10.77.3.0/24"])
        .arg("--scan")
        .arg(format!("{},{}", tb.a.addr, tb.b.addr))
        .args(["--ports", "32768-60999", "--want", want, "--wait", "120"])
        .args(["--keys", keys, "--random-keys", random, "--json"])
        .arg(&attack_json)
        .output()
        .unwrap();
    let running = job.try_wait().unwrap().is_none();
    std::fs::write(&go, b"").unwrap();
    let j = job.wait_with_output().unwrap();
    let said = String::from_utf8_lossy(&a.stdout).into_owned();
    assert!(
        a.status.success(),
        "{case}: the intruder: {said}{}",
        String::from_utf8_lossy(&a.stderr)
    );
    assert!(
        j.status.success(),
        "{case}: the job: {}{}",
        String::from_utf8_lossy(&j.stdout),
        String::from_utf8_lossy(&j.stderr)
    );
    assert!(running, "{case}: the job ended during the attack: {said}");
    let read = |p: &std::path::Path| -> Value {
        serde_json::from_str(&std::fs::read_to_string(p).unwrap()).unwrap()
    };
    (read(&job_json), read(&attack_json), said)
}

/// The intruder found `n` endpoints, tried every kind at each that
/// answered (and at least one at each that did not), and none of it was
/// carried out or answered; `answering` of them answered.
fn assert_nothing_got_through(attack: &Value, n: usize, answering: usize, case: &str) {
    assert_eq!(attack["breaches"], 0, "{case}: {attack:#}");
    let targets = attack["targets"].as_array().unwrap();
    assert_eq!(targets.len(), n, "{case}: {attack:#}");
    let mut answered = 0;
    for t in targets {
        assert_eq!(t["replies"], 0, "{case}: {t:#}");
        assert!(t["unreachable"].is_null(), "{case}: {t:#}");
        let kinds: &[&str] = if t["silent"] == true {
            &["read"]
        } else {
            answered += 1;
            &["read", "write", "fetch_add"]
        };
        for what in kinds {
            let r = &t["rma"][what];
            assert_eq!(r["done"], 0, "{case} {what}: {t:#}");
            assert!(r["tried"].as_u64().unwrap() > 0, "{case} {what}: {t:#}");
        }
    }
    assert!(answered >= answering, "{case}: {attack:#}");
}

/// Every read of the job after the attack found its key with the value
/// written; none corrupt, none lost.
fn assert_read_back(job: &Value, case: &str) {
    for r in job["runs"].as_array().unwrap() {
        let c = &r["counters"];
        for k in ["corrupt", "wrong", "lost", "false_hits"] {
            assert_eq!(c[k], 0, "{case} {}: {k}: {r:#}", r["phase"]);
        }
    }
    let mixed = job["runs"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["phase"] == "mixed")
        .unwrap();
    let ops = mixed["counters"]["hits"].as_u64().unwrap();
    assert!(ops > 0, "{case}: {mixed:#}");
}

/// The forged messages reached the services and were refused, each
/// counted as a stranger's.
fn refused_strangers(job: &Value) -> u64 {
    job["runs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["counters"]["strangers"].as_u64().unwrap_or(0))
        .sum()
}

#[test]
fn an_outsider_on_the_network_reads_and_writes_nothing() {
    let tb = Testbed::up(TestbedSpec {
        gateway: true,
        outsider: true,
        ..TestbedSpec::default()
    })
    .unwrap();
    // (provider, path, keys 0..N and random keys tried)
    let cases = [
        ("sockets", "rma", ("65536", "1024")),
        ("sockets", "message", ("1024", "64")),
        ("tcp;ofi_rxm", "rma", ("64", "16")),
        // The services accept a new connection only as often as they
        // wake while idle: each refused try here takes a wake-up.
        ("tcp;ofi_rxm", "message", ("8", "4")),
    ];
    for (provider, path, keys) in cases {
        let case = format!("{provider} --path {path}");
        let began = std::time::Instant::now();
        let (job, attack, said) = attacked(&tb, provider, path, keys);
        eprintln!("{case} ({:.0?}):\n{said}", began.elapsed());
        if path == "rma" {
            assert_nothing_got_through(&attack, 2, 2, &case);
        } else {
            // A rank's client endpoint is progressed only while it calls:
            // idle (the job holds), it may take no connection at all, but
            // both services answer, and refuse each forged request.
            assert_nothing_got_through(&attack, 4, 2, &case);
            assert!(refused_strangers(&job) >= 8, "{case}: {job:#}");
        }
        assert_read_back(&job, &case);
    }
}

/// On one node, `shm` ranks are reached through their segments in
/// /dev/shm (0600, the job's user) and by the kernel's cross-memory
/// attach (ptrace's rules): another user finds the ranks by listing
/// /dev/shm but cannot even address them. (A process of the job's own
/// user can read and write any of its memory whatever the keys: on one
/// node the protection is the user, as for every process.)
#[test]
fn another_user_on_the_node_cannot_reach_shm_ranks() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    // Where `nobody` can run the binary and write its report.
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o777)).unwrap();
    let bin = dir.path().join("fabkit");
    std::fs::copy(env!("CARGO_BIN_EXE_fabkit"), &bin).unwrap();
    std::fs::set_permissions(&bin, std::fs::Permissions::from_mode(0o755)).unwrap();
    let (job_json, attack_json, go) = (
        dir.path().join("job.json"),
        dir.path().join("attack.json"),
        dir.path().join("go"),
    );
    let job = held_job(
        &["-n", "2"],
        &["-p", "shm", "--path", "rma"],
        &job_json,
        &go,
    );
    let a = Command::new("setpriv")
        .args(["--reuid=nobody", "--regid=nogroup", "--clear-groups"])
        .arg(&bin)
        .args(["intrude", "-p", "shm", "--scan", "shm", "--want", "2"])
        .args([
            "--wait",
            "120",
            "--keys",
            "64",
            "--random-keys",
            "16",
            "--json",
        ])
        .arg(&attack_json)
        .output()
        .unwrap();
    std::fs::write(&go, b"").unwrap();
    let j = job.wait_with_output().unwrap();
    let said = String::from_utf8_lossy(&a.stdout);
    eprintln!("{said}");
    assert!(
        a.status.success(),
        "{said}{}",
        String::from_utf8_lossy(&a.stderr)
    );
    assert!(j.status.success(), "{}", String::from_utf8_lossy(&j.stderr));
    let attack: Value =
        serde_json::from_str(&std::fs::read_to_string(&attack_json).unwrap()).unwrap();
    assert_eq!(attack["breaches"], 0, "{attack:#}");
    let targets = attack["targets"].as_array().unwrap();
    assert!(targets.len() >= 2, "{attack:#}");
    for t in targets {
        assert!(t["unreachable"].is_string(), "{t:#}");
    }
    let job: Value = serde_json::from_str(&std::fs::read_to_string(&job_json).unwrap()).unwrap();
    assert_read_back(&job, "shm");
}
