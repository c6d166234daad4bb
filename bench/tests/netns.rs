//! Hosts as they are: ranks in two network namespaces of this machine are
//! two hosts (no loopback between them, no same-node shortcut), and
//! `fabkit launch` starts ranks across namespaces, without MPI and under
//! Open MPI's mpirun (installed by .ci/run: these tests fail, not skip,
//! without it). Uses the testbed of `fabkit-netns` (real namespaces and
//! veths, removed on drop); needs root, as CI has.

use std::process::Command;

mod common;
use common::fabkit;

use fabkit_core::bootstrap::host_id;
use fabkit_netns::testbed::{self, Testbed, TestbedSpec};
use serde_json::Value;

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
fn ranks_end_with_a_launcher_that_is_killed_alone() {
    // Each rank says its pid, then waits; the launcher alone is signalled
    // (as a scheduler or `timeout` does: not the process group).
    let dir = tempfile::tempdir().unwrap();
    let pids = dir.path().join("pids");
    let mut launch = fabkit()
        .args(["launch", "-n", "2", "--", "sh", "-c"])
        .arg(format!("echo $$ >> {}; exec sleep 600", pids.display()))
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let deadline =
        std::time::Instant::now() + fabkit_core::time::scaled(std::time::Duration::from_secs(30));
    let ranks: Vec<i32> = loop {
        let text = std::fs::read_to_string(&pids).unwrap_or_default();
        let got: Vec<i32> = text.lines().filter_map(|l| l.trim().parse().ok()).collect();
        if got.len() == 2 {
            break got;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the ranks never started: {text:?}"
        );
        std::thread::yield_now();
    };
    // SAFETY: kill(2) touches no memory; the pid is our child's.
    unsafe { libc::kill(launch.id() as i32, libc::SIGTERM) };
    launch.wait().unwrap();
    while ranks.iter().any(|&p| alive(p)) && std::time::Instant::now() < deadline {
        std::thread::yield_now();
    }
    let left: Vec<i32> = ranks.iter().copied().filter(|&p| alive(p)).collect();
    for &p in &left {
        // SAFETY: as above; a survivor is stopped before the test fails.
        unsafe { libc::kill(p, libc::SIGKILL) };
    }
    assert!(left.is_empty(), "ranks {left:?} outlived their launcher");
}

/// Whether `pid` runs: listed and not a zombie waiting to be reaped.
fn alive(pid: i32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|st| {
        st.rsplit(')')
            .next()
            .is_some_and(|t| !t.trim_start().starts_with('Z'))
    })
}

#[test]
fn a_failing_rank_ends_what_every_rank_started_and_the_meeting_place_is_private() {
    let dir = tempfile::tempdir().unwrap();
    let (pids, modes) = (dir.path().join("pids"), dir.path().join("modes"));
    // Each rank starts a child of its own (a shell's background `sleep`),
    // and says its pid; rank 0 fails once both have.
    let script = format!(
        "stat -c '%a %U' \"$FABKIT_BOOT_DIR\" >> {m}; \
         stat -c '%n %a' \"$FABKIT_BOOT_DIR\"/* >> {m}; \
         sleep 600 & echo $! >> {p}; \
         if [ \"$FABKIT_RANK\" = 0 ]; then \
           while [ \"$(wc -l < {p})\" -lt 2 ]; do sleep 0.05; done; exit 3; \
         fi; wait",
        m = modes.display(),
        p = pids.display()
    );
    let o = fabkit()
        .args(["launch", "-n", "2", "--", "sh", "-c", &script])
        .output()
        .unwrap();
    assert_eq!(
        o.status.code(),
        Some(3),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    let started: Vec<i32> = std::fs::read_to_string(&pids)
        .unwrap()
        .lines()
        .filter_map(|l| l.trim().parse().ok())
        .collect();
    assert_eq!(started.len(), 2, "{started:?}");
    let deadline =
        std::time::Instant::now() + fabkit_core::time::scaled(std::time::Duration::from_secs(10));
    while started.iter().any(|&p| alive(p)) && std::time::Instant::now() < deadline {
        std::thread::yield_now();
    }
    let left: Vec<i32> = started.iter().copied().filter(|&p| alive(p)).collect();
    for &p in &left {
        // SAFETY: kill(2) touches no memory; a survivor is stopped before
        // the test fails.
        unsafe { libc::kill(p, libc::SIGKILL) };
    }
    assert!(
        left.is_empty(),
        "what ranks started, {left:?}, outlived the job"
    );
    // The meeting place is the user's alone, and so is what is in it.
    let modes = std::fs::read_to_string(&modes).unwrap();
    assert_eq!(modes.matches("700 root").count(), 2, "{modes}");
    for line in modes.lines().filter(|l| l.starts_with('/')) {
        assert!(line.ends_with(" 600"), "{line}");
    }
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
    assert!(t.elapsed() < fabkit_core::time::scaled(std::time::Duration::from_secs(30)));
    for bad in [
        &["launch", "--"][..],
        &["launch", "-n", "0", "--", "true"],
        &["launch", "--netns", "a,b", "-n", "3", "--", "true"],
        &["launch", "--mpi", "-n", "2", "--", "true"],
        &["launch", "--mpi", "--netns", "a,b", "-n", "3", "--", "true"],
        &["launch", "--mpi", "--netns", "a_b", "--", "true"],
        &["launch", "--mpi", "--netns", "a:1", "--", "true"],
        &["launch", "--mpi", "--netns", "a,a", "--", "true"],
        &["launch", "--mpi", "--netns", "no-such-ns", "--", "true"],
        &[
            "launch",
            "--mpi",
            "--netns",
            "a",
            "-n",
            "4294967300",
            "--",
            "true",
        ],
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

#[test]
fn launch_refuses_a_missing_or_empty_namespace_in_one_line_before_any_rank_starts() {
    let dir = tempfile::tempdir().unwrap();
    let ran = dir.path().join("ran");
    let touch = format!("touch {}", ran.display());
    for (netns, says, mpi) in [
        (
            "no-such-ns",
            "there is no network namespace no-such-ns; give one",
        ),
        ("a,,b", "--netns `a,,b` has an empty name"),
        (",", "has an empty name"),
        ("", "--netns `` has an empty name"),
    ]
    .into_iter()
    .flat_map(|case| [(case, false), (case, true)])
    .map(|((netns, says), mpi)| (netns, says, mpi))
    {
        // With --mpi the same check runs first, the same words after it.
        let mut args = vec!["launch"];
        if mpi {
            args.push("--mpi");
        }
        let o = fabkit()
            .args(args)
            .args(["--netns", netns, "--", "/bin/sh", "-c", &touch])
            .output()
            .unwrap();
        let e = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(2), "{netns} (mpi {mpi}): {e}");
        assert_eq!(e.lines().count(), 1, "{netns} (mpi {mpi}): {e}");
        assert!(e.contains(says), "{netns} (mpi {mpi}): {e}");
        assert!(o.stdout.is_empty(), "{netns} (mpi {mpi})");
        assert!(!ran.exists(), "{netns} (mpi {mpi}): a rank started");
    }
    let left = testbed::namespaces();
    assert!(
        left.iter()
            .all(|n| !n.starts_with("no-such") && n != "a" && n != "b"),
        "{left:?}"
    );
}

/// Runs `fabkit launch LAUNCH -- fabkit ARGS --json FILE` and returns the JSON.
fn launched(launch: &[&str], args: &[&str]) -> Value {
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("out.json");
    let o = fabkit()
        .arg("launch")
        .args(launch)
        .arg("--")
        .arg(env!("CARGO_BIN_EXE_fabkit"))
        .args(args)
        .arg("--json")
        .arg(&json)
        .env("OMPI_ALLOW_RUN_AS_ROOT", "1")
        .env("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1")
        // Debian's default one-sided component (osc rdma) crashes in
        // MPI_Compare_and_swap.
        .env("OMPI_MCA_osc", "sm,pt2pt")
        .output()
        .unwrap();
    assert!(
        o.status.success(),
        "{launch:?} {args:?}: {}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
    serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap()
}

/// Every rank of a chunked DHT run found every key written (none lost, none
/// corrupt, no false hits).
fn assert_dht_exact(v: &Value, ranks: u64) {
    let row = |phase: &str| {
        v["runs"]
            .as_array()
            .unwrap()
            .iter()
            .find(|r| r["variant"] == "chunked" && r["phase"] == phase)
            .unwrap_or_else(|| panic!("no chunked {phase} run: {v:#}"))
            .clone()
    };
    let (w, r) = (row("write"), row("read"));
    assert_eq!(r["ranks"], ranks, "{r:#}");
    let (wc, rc) = (&w["counters"], &r["counters"]);
    assert_eq!(rc["corrupt"], 0, "{r:#}");
    assert_eq!(rc["false_hits"], 0, "{r:#}");
    assert_eq!(rc["wrong"], 0, "{r:#}");
    assert_eq!(rc["lost"], 0, "{r:#}");
    assert_eq!(wc["inserts"], ranks * 200, "{w:#}");
}

#[test]
fn ranks_run_across_namespaces_with_and_without_mpirun() {
    let tb = Testbed::up(TestbedSpec {
        mgmt: true,
        ..TestbedSpec::default()
    })
    .unwrap();
    let hosts = format!("{},{}", tb.a.netns, tb.b.netns);
    let dht = [
        "dht",
        "-p",
        "tcp;ofi_rxm",
        "-v",
        "chunked",
        "-k",
        "200",
        "--no-redis",
    ];
    // Without MPI, over the file bootstrap: one rank per namespace.
    assert_dht_exact(&launched(&["--netns", &hosts], &dht), 2);
    // Under mpirun, two ranks per namespace: the daemons are started by
    // `fabkit rsh` and reach mpirun over the management links, and the data
    // stays on the testbed's link (the management link is not chosen).
    let mpi = ["--mpi", "-n", "4", "--netns", &hosts];
    let v = launched(&mpi, &["check", "-p", "tcp;ofi_rxm"]);
    assert_eq!(v[0]["ok"], true, "{v:#}");
    let domains: Vec<&str> = v[0]["reports"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["domain"].as_str().unwrap())
        .collect();
    assert_eq!(domains, ["va", "va", "vb", "vb"]);
    assert_dht_exact(&launched(&mpi, &dht), 4);
    // A network that holds both the data and the management address is
    // ambiguous, and said so.
    let o = Command::new("ip")
        .args(["netns", "exec", &tb.a.netns, env!("CARGO_BIN_EXE_fabkit")])
        .args(["check", "-p", "tcp;ofi_rxm", "-d", "10.0.0.0/8"])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2));
    let e = String::from_utf8_lossy(&o.stderr);
    assert!(
        e.contains("matches several interfaces here (") && e.contains("va"),
        "{e}"
    );
    // MPI one-sided RMA across the namespaces (osc pt2pt over the TCP BTL).
    let mpi_dht = [
        "dht",
        "--mpi",
        "create",
        "-v",
        "chunked",
        "-k",
        "200",
        "--no-redis",
    ];
    assert_dht_exact(&launched(&mpi, &mpi_dht), 4);
}

#[test]
fn redis_runs_beside_the_dht_across_namespaces_on_each_hosts_address() {
    let have = std::process::Command::new("redis-server")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    if !have {
        // .ci/install-deps installs it: in CI this test is never skipped.
        assert!(
            std::env::var_os("CI").is_none(),
            "redis-server is not installed"
        );
        return;
    }
    let tb = Testbed::up(TestbedSpec::default()).unwrap();
    let hosts = format!("{},{}", tb.a.netns, tb.b.netns);
    let net = format!("{}/24", tb.a.addr);
    let dht = [
        "dht",
        "-p",
        "tcp;ofi_rxm",
        "-v",
        "lockfree",
        "-k",
        "200",
        "--hot-rounds",
        "0",
        "--latency-ops",
        "0",
    ];
    let with_d: Vec<&str> = dht.iter().copied().chain(["-d", &net]).collect();
    let v = launched(&["--netns", &hosts], &with_d);
    let redis: Vec<&Value> = v["runs"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|r| r["system"] == "redis")
        .collect();
    assert!(!redis.is_empty(), "no Redis rows: {v:#}");
    for r in &redis {
        assert_eq!(r["transport"], "redis tcp", "{r:#}");
    }
    let read = redis.iter().find(|r| r["phase"] == "read").unwrap();
    // The same keys as the DHT's read phase: every one written is found
    // (the DHT's hits plus the ones it lost), none wrong.
    let c = &read["counters"];
    assert_eq!(
        (&c["lost"], &c["wrong"], &c["false_hits"]),
        (&0.into(), &0.into(), &0.into()),
        "{read:#}"
    );
    let mine = v["runs"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["system"] == "fabkit" && r["phase"] == "read")
        .unwrap();
    let written =
        mine["counters"]["hits"].as_u64().unwrap() + mine["counters"]["lost"].as_u64().unwrap();
    assert_eq!(c["hits"].as_u64().unwrap(), written, "{read:#}");
    assert!(written >= 400, "{mine:#}");
    let notes = v["meta"]["notes"].to_string();
    assert!(notes.contains("on its host's address"), "{notes}");
    // Without -d no address is known: the DHT runs, the Redis rows do not.
    let v = launched(&["--netns", &hosts], &dht);
    let rows = v["runs"].as_array().unwrap();
    assert!(rows.iter().any(|r| r["system"] == "fabkit"), "{v:#}");
    assert!(!rows.iter().any(|r| r["system"] == "redis"), "{v:#}");
}

#[test]
fn mpi_launch_without_a_management_link_says_how_to_get_one() {
    let tb = Testbed::up(TestbedSpec::default()).unwrap();
    let o = fabkit()
        .args(["launch", "--mpi", "--netns", &tb.a.netns, "--", "true"])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2));
    let e = String::from_utf8_lossy(&o.stderr);
    assert!(e.contains("--mgmt") && e.lines().count() == 1, "{e}");
}
