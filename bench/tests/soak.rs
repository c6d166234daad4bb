//! The one-minute soak: a minute of cycles (tables created, loaded, read
//! and freed) on two ranks as processes, over the message path on
//! libfabric shm (service threads, mailboxes, registered regions, the
//! provider's segments); fails when a count grows after warm-up.

mod common;
use common::fabkit;

use serde_json::Value;

/// `o`'s standard output, once it is known to have succeeded.
fn succeeded(o: &std::process::Output) -> String {
    let out = String::from_utf8_lossy(&o.stdout).into_owned();
    assert!(
        o.status.success(),
        "{out}\n{}",
        String::from_utf8_lossy(&o.stderr)
    );
    out
}

#[test]
fn a_minute_of_cycles_leaves_every_count_where_warm_up_left_it() {
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("soak.json");
    let o = fabkit()
        .args(["launch", "-n", "2", "--"])
        .arg(env!("CARGO_BIN_EXE_fabkit"))
        .args(["dht", "-p", "shm", "--path", "message", "-v", "lockfree"])
        .args([
            "-k",
            "5000",
            "-w",
            "paper",
            "--no-redis",
            "--hot-rounds",
            "0",
        ])
        .args(["--latency-ops", "0", "--duration", "60", "--json"])
        .arg(&json)
        .output()
        .unwrap();
    let out = succeeded(&o);
    let v: Value = serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    let soak = &v["soak"];
    let ranks = soak["ranks"].as_array().unwrap();
    assert_eq!(ranks.len(), 2, "{soak}");
    for r in ranks {
        assert!(r["cycles"].as_u64().unwrap() >= 10, "{r}");
        assert_eq!(r["grew"], Value::Array(vec![]), "{r}");
    }
    // The samples are real readings: a process has descriptors and a
    // thread, and memory.
    for p in soak["points"].as_array().unwrap() {
        assert!(p["fds"].as_u64().unwrap() >= 3, "{p}");
        assert!(p["threads"].as_u64().unwrap() >= 1, "{p}");
        assert!(p["rss_kib"].as_u64().unwrap() > 1000, "{p}");
    }
    assert!(out.contains("soak: 60 s asked"), "{out}");
}

/// Ranks as threads of one process read the same process's counts: they
/// read them one at a time, and none starts its next cycle meanwhile (a
/// sibling's open directory or endpoints counted as a leak before).
#[test]
fn a_soak_of_ranks_as_threads_is_flat_too() {
    let o = fabkit()
        .args([
            "dht",
            "-n",
            "4",
            "-k",
            "2000",
            "-v",
            "lockfree",
            "--no-redis",
        ])
        .args(["--latency-ops", "0", "--hot-rounds", "0", "--duration", "5"])
        .output()
        .unwrap();
    let out = succeeded(&o);
    assert_eq!(out.matches("; flat").count(), 4, "{out}");
}
