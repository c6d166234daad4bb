//! Numbers read from files get the checks their flags get: a report whose
//! rates, latencies, CPU times or sizes no run could have measured (1e300,
//! 1e-300, a 2^63-byte key) is refused in one line with exit 2 by `model`,
//! `dht --bound` (the same reader as `model --perf`) and `plot`, where it
//! printed 300-digit numbers, wrapped a size sum, or drew `inf`.

mod common;
use common::fabkit;

use serde_json::Value;

const RAW: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../results/dht-bench/cross-host/message/raw/"
);

/// Every float in `v` set to `x`.
fn damage(v: &mut Value, x: f64) {
    match v {
        Value::Object(m) => m.values_mut().for_each(|w| damage(w, x)),
        Value::Array(a) => a.iter_mut().for_each(|w| damage(w, x)),
        Value::Number(n) if n.is_f64() => *v = serde_json::json!(x),
        _ => {}
    }
}

fn read(name: &str) -> Value {
    serde_json::from_str(&std::fs::read_to_string(format!("{RAW}{name}")).unwrap()).unwrap()
}

#[test]
fn damaged_numbers_in_reports_are_refused_by_every_reader() {
    let dir = tempfile::tempdir().unwrap();
    let put = |name: &str, v: &Value| {
        let p = dir.path().join(name);
        std::fs::write(&p, v.to_string()).unwrap();
        p
    };
    let perf: Vec<String> = ["send", "sendlat", "write", "cas", "read"]
        .iter()
        .map(|k| format!("{RAW}model-perf-{k}.json"))
        .collect();
    let model = |ops: &std::path::Path, perf: &[String]| {
        let mut c = fabkit();
        c.arg("model").arg("--ops").arg(ops);
        for p in perf {
            c.args(["--perf", p]);
        }
        c.output().unwrap()
    };
    // The kept files themselves are read.
    let ops = format!("{RAW}model-ops-lockfree.json");
    let o = model(std::path::Path::new(&ops), &perf);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    for x in [1e300, 1e-300] {
        let mut v = read("model-ops-lockfree.json");
        damage(&mut v, x);
        let o = model(&put("ops.json", &v), &perf);
        let e = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(2), "{x}: {e}");
        assert!(
            e.contains("not a measurement") && e.lines().count() == 1,
            "{e}"
        );
        let o = fabkit()
            .arg("plot")
            .arg(put("ops.json", &v))
            .args(["-o", "-"])
            .output()
            .unwrap();
        assert_eq!(o.status.code(), Some(2), "plot {x}");
        let mut v = read("model-perf-read.json");
        damage(&mut v, x);
        let bad = put("read.json", &v).display().to_string();
        let mut damaged = perf.clone();
        damaged[4] = bad.clone();
        let o = model(std::path::Path::new(&ops), &damaged);
        assert_eq!(o.status.code(), Some(2), "--perf {x}");
        let o = fabkit().args(["plot", &bad, "-o", "-"]).output().unwrap();
        let e = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(2), "plot {x}: {e}");
    }
    // Whole numbers and shares the model multiplies by.
    for (field, v) in [
        ("ranks", serde_json::json!(u64::MAX)),
        ("depth", serde_json::json!(1u64 << 40)),
        ("own_share", serde_json::json!(-1e300)),
    ] {
        let mut v2 = read("model-ops-lockfree.json");
        for r in v2["runs"].as_array_mut().unwrap() {
            r[field] = v.clone();
        }
        let o = model(&put("whole.json", &v2), &perf);
        let e = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(2), "{field}: {e}");
        assert!(e.contains(field), "{e}");
    }
    // Sizes are bounded before they are summed.
    let mut v = read("model-ops-lockfree.json");
    for r in v["runs"].as_array_mut().unwrap() {
        r["record"] = serde_json::json!({"key": 1u64 << 63, "value": 1u64 << 63});
    }
    let o = model(&put("wrap.json", &v), &perf);
    let e = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{e}");
    assert!(e.contains("key length"), "{e}");
}
