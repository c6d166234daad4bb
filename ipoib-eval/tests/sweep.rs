//! A short sweep across real testbeds (root, as CI has): two experiments of
//! one point each, one row each with the eBPF per-queue counters, the XPS
//! and round-robin policies shown to take effect, and a resumed run that
//! adds nothing.

use std::process::Command;

/// `ipoib-eval sweep FILE -o OUT`, run to the end.
fn sweep(file: &std::path::Path, out: &std::path::Path) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_ipoib-eval"))
        .arg("sweep")
        .arg(file)
        .arg("-o")
        .arg(out)
        .output()
        .unwrap()
}

fn rows(csv: &str) -> Vec<std::collections::HashMap<String, String>> {
    // Flexible, so a short row fails the assertion below, not the reader.
    let mut rd = csv::ReaderBuilder::new()
        .flexible(true)
        .from_reader(csv.as_bytes());
    let header = rd.headers().unwrap().clone();
    rd.records()
        .map(|f| {
            let f = f.unwrap();
            assert_eq!(f.len(), header.len(), "{f:?}");
            header
                .iter()
                .zip(&f)
                .map(|(h, v)| (h.to_string(), v.to_string()))
                .collect()
        })
        .collect()
}

#[test]
fn a_two_point_sweep_writes_rows_with_queue_counters_and_resumes() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("s.toml");
    let out = dir.path().join("s.csv");
    std::fs::write(
        &file,
        "seconds = 0.5\n[axes]\nqueues = [2]\nproto = [\"udp\"]\nrate = [\"200M\"]\n\
         [[experiment]]\nname = \"xps\"\npolicy = [\"xps\"]\nsend = [\"gso:8\"]\n\
         [[experiment]]\nname = \"rr\"\npolicy = [\"rr\"]\n",
    )
    .unwrap();
    let o = sweep(&file, &out);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("sweep: 2 runs (0 already"), "{err}");
    let r = rows(&std::fs::read_to_string(&out).unwrap());
    assert_eq!(r.len(), 2);
    for row in &r {
        let per_q: Vec<u64> = row["tx_queue_packets"]
            .split(' ')
            .map(|x| x.parse().unwrap())
            .collect();
        assert_eq!(per_q.len(), 2);
        let segs: u64 = row["tx_queue_segments"]
            .split(' ')
            .map(|x| x.parse::<u64>().unwrap())
            .sum();
        let pkts: u64 = per_q.iter().sum();
        assert!(pkts > 0, "{row:?}");
        // gso:8 sends trains of 8 datagrams: one super-packet each.
        let per_packet = if row["send"] == "gso:8" { 8 } else { 1 };
        assert_eq!(segs, per_packet * pkts, "{row:?}");
        // Every datagram the client sent passed the TX hook (veth has no
        // qdisc to drop in); the receiver may still drop some under load.
        let sent: u64 = row["sent_msgs"].parse().unwrap();
        let received: u64 = row["received_msgs"].parse().unwrap();
        assert_eq!(sent, segs, "{row:?}");
        assert!(received <= sent && received > 0, "{row:?}");
        assert_eq!(row["policy"], row["experiment"]);
        assert_eq!(row["policy_effect"], "took effect", "{row:?}");
        if row["policy"] == "rr" {
            // Dealt out in turn: the two queues differ by a few packets.
            assert!(per_q[0].abs_diff(per_q[1]) <= pkts / 10 + 8, "{row:?}");
        }
    }
    // The summary and charts went beside the CSV.
    let sum: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.path().join("s/summary.json")).unwrap())
            .unwrap();
    let points = sum["points"].as_array().unwrap();
    assert_eq!(points.len(), 2);
    for p in points {
        assert_eq!(p["repetitions"], 1);
        assert!(
            p["figures"]["gbit_s"]["median"].as_f64().unwrap() > 0.0,
            "{p}"
        );
    }
    for chart in ["xps-gbit.svg", "rr-queues.svg", "rr-sizes.svg"] {
        let svg = std::fs::read_to_string(dir.path().join("s").join(chart)).unwrap();
        assert!(
            svg.starts_with("<svg") && svg.ends_with("</svg>\n"),
            "{chart}"
        );
    }
    let o = sweep(&file, &out);
    assert!(o.status.success());
    assert!(String::from_utf8_lossy(&o.stderr).contains("sweep: 0 runs (2 already"));
    assert_eq!(rows(&std::fs::read_to_string(&out).unwrap()).len(), 2);
    // Bad input: one line, exit 2, nothing written.
    std::fs::write(&file, "[axes]\npolicy = [\"fastest\"]\n").unwrap();
    let bad = dir.path().join("bad.csv");
    let o = sweep(&file, &bad);
    assert_eq!(o.status.code(), Some(2));
    assert_eq!(String::from_utf8_lossy(&o.stderr).lines().count(), 1);
    assert!(!bad.exists());
}

#[test]
fn an_iperf3_point_runs_on_the_testbed_under_the_same_views() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("i.toml");
    let out = dir.path().join("i.csv");
    std::fs::write(
        &file,
        "seconds = 1\n[axes]\nqueues = [2]\npolicy = [\"xps\"]\nproto = [\"udp\"]\n\
         rate = [\"100M\"]\nsend = [\"iperf3\"]\ncpus = [\"0:1\"]\n",
    )
    .unwrap();
    let o = sweep(&file, &out);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let r = rows(&std::fs::read_to_string(&out).unwrap());
    assert_eq!(r.len(), 1);
    let row = &r[0];
    assert_eq!(
        (row["send"].as_str(), row["recv"].as_str()),
        ("iperf3", "iperf3")
    );
    let sent: u64 = row["sent_msgs"].parse().unwrap();
    let received: u64 = row["received_msgs"].parse().unwrap();
    assert!(received > 0 && received <= sent, "{row:?}");
    // 100 Mbit/s of 1472 B datagrams for 1 s is about 8500 of them.
    assert!((4000..=17000).contains(&sent), "{row:?}");
    let segs: u64 = row["tx_queue_segments"]
        .split(' ')
        .map(|x| x.parse::<u64>().unwrap())
        .sum();
    // The TX hook saw iperf3's datagrams, plus the few of its UDP handshake.
    assert!(segs >= sent && segs <= sent + 8, "{row:?}");
    assert_eq!(row["policy_effect"], "took effect", "{row:?}");
    assert!(
        row["cycles_per_msg"].parse::<f64>().unwrap() > 0.0,
        "{row:?}"
    );
}
