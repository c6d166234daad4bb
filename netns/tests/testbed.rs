//! The testbed itself, for real (as root, as CI runs): it leaves nothing
//! behind, also when the test body panics. ipoib-eval's tests measure
//! across it, the eBPF tests count packets on its veths and fabkit's run
//! ranks in its namespaces.

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::process::Command;
use std::sync::{Mutex, MutexGuard};

use fabkit_netns::testbed::{self, Testbed, TestbedSpec};

fn serial() -> MutexGuard<'static, ()> {
    static LOCK: Mutex<()> = Mutex::new(());
    LOCK.lock().unwrap_or_else(|p| p.into_inner())
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
