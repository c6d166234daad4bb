//! ofi_rxm over a real verbs device: the completion-queue sizing fabkit does
//! before `main`. Needs an RDMA device (CI's verbs job runs these in a guest
//! with soft-RoCE, .ci/verbs-tests). On a machine without one, what can be
//! checked is checked (asking for verbs is refused by name) and the rest
//! prints a `SKIPPED:` line saying why: the harness has no runtime skip, so
//! a pass here without that line is a real pass.

mod common;

use std::process::Command;

use fabkit_fabric::env;
use fabkit_fabric::RankConfig;

const PROVIDER: &str = "verbs;ofi_rxm";
const CHILD: &str = "FABKIT_TEST_VERBS_CHILD";

#[test]
fn the_universe_is_set_before_main_and_ranks_come_up() {
    let p = env::prepared();
    // The constructor ran before main (the linker kept it), device or not.
    assert!(p.ran, "fabkit's .init_array constructor did not run");
    if !env::has_rdma_devices() {
        // Without a device verbs is not offered, and asking for it is an
        // error naming the providers that are, not a crash or a hang in
        // fi_enable.
        let boots =
            fabkit_core::bootstrap::ThreadGroup::members(1, std::time::Duration::from_secs(10));
        let err = fabkit_fabric::Rank::establish(RankConfig::new(PROVIDER), &boots[0])
            .expect_err("verbs;ofi_rxm set up without an RDMA device");
        assert!(
            matches!(&err, fabkit_fabric::Error::UnknownProvider { requested, available, .. }
                if requested == PROVIDER && available.iter().any(|a| a == "shm")),
            "{err:?}"
        );
        eprintln!("SKIPPED: the sizing part (no RDMA device here; CI's verbs job runs it on rxe0)");
        return;
    }
    let l = p.rxm_verbs.as_ref().expect("an RDMA device was found");
    if l.user_universe {
        eprintln!("FI_UNIVERSE_SIZE was set by the user: not checking what fabkit sets");
        return;
    }
    // What the constructor recorded is what libfabric will read.
    let (k, v) = p.set.last().expect("fabkit set FI_UNIVERSE_SIZE");
    assert_eq!(k, "FI_UNIVERSE_SIZE");
    assert_eq!(std::env::var(k).as_deref(), Ok(v.as_str()));
    assert!(l.queue() <= l.max_cqe, "{l:?}");
    // And the endpoint opens (fi_enable failed with EINVAL before).
    let mut olds = common::with_ranks(2, RankConfig::new(PROVIDER), |r| {
        r.fetch_add(fabkit_fabric::Remote::new(0, 0), 1).unwrap()
    });
    olds.sort_unstable();
    assert_eq!(olds, [0, 1]);
}

/// Not a test on its own: run by the test below with FI_UNIVERSE_SIZE=300.
#[test]
#[ignore = "run as a child process by a_universe_the_device_cannot_hold_is_refused_by_name"]
fn child_with_a_large_universe() {
    if std::env::var_os(CHILD).is_none() {
        return;
    }
    let boots = fabkit_core::bootstrap::ThreadGroup::members(1, std::time::Duration::from_secs(10));
    match fabkit_fabric::Rank::establish(RankConfig::new(PROVIDER), &boots[0]) {
        Ok(_) => println!("child: established"),
        Err(e) => println!("child: {e}"),
    }
}

#[test]
fn a_universe_the_device_cannot_hold_is_refused_by_name() {
    if !env::has_rdma_devices() {
        eprintln!("SKIPPED: no RDMA device here (CI's verbs job runs this on rxe0)");
        return;
    }
    let out = Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "child_with_a_large_universe",
            "--ignored",
            "--nocapture",
        ])
        .env(CHILD, "1")
        .env("FI_UNIVERSE_SIZE", "300")
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    let line = text
        .lines()
        .find(|l| l.starts_with("child: "))
        .unwrap_or_else(|| panic!("the child said nothing: {text}"));
    // 300 x 256 entries do not fit max_cqe: one error naming what to set,
    // raised before fi_enable (which would only say EINVAL).
    assert!(
        line.contains("FI_UNIVERSE_SIZE=300 x 256 per peer"),
        "{line}"
    );
    assert!(line.contains("max_cqe"), "{line}");
    assert!(line.ends_with("; set FI_UNIVERSE_SIZE=1"), "{line}");
}
