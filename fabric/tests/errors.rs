//! Bad input and broken peers give errors that name the problem, never a
//! crash, corruption or hang.

mod common;

use std::process::Command;
use std::time::{Duration, Instant};

use common::{init_env, with_ranks};
use fabkit_fabric::bootstrap::{FileBootstrap, ThreadGroup};
use fabkit_fabric::{Error, OpKind, Ordering, Rank, RankConfig, Remote};

fn establish_alone(cfg: RankConfig) -> Result<Rank, Error> {
    init_env();
    let boot = ThreadGroup::members(1, Duration::from_secs(5))
        .pop()
        .unwrap();
    Rank::establish(cfg, &boot)
}

#[test]
fn unknown_provider_names_the_available_ones() {
    let err = establish_alone(RankConfig::new("nosuchfabric")).unwrap_err();
    match &err {
        Error::UnknownProvider {
            requested,
            available,
            ..
        } => {
            assert_eq!(requested, "nosuchfabric");
            for p in ["shm", "sockets", "tcp;ofi_rxm"] {
                assert!(
                    available.iter().any(|a| a == p),
                    "{p} missing from {available:?}"
                );
            }
        }
        other => panic!("expected UnknownProvider, got {other:?}"),
    }
    let msg = err.to_string();
    assert!(msg.contains("nosuchfabric") && msg.contains("shm"), "{msg}");
}

#[test]
fn an_ordering_the_provider_does_not_grant_is_refused_by_name() {
    // tcp;ofi_rxm grants FI_DELIVERY_COMPLETE only: no FI_FENCE, and
    // FI_ORDER_RMA_RAW without data order (max_order_raw_size 0).
    for (m, names) in [
        (Ordering::Fence, "FI_FENCE"),
        (Ordering::ReadBack, "FI_ORDER_RMA_RAW"),
    ] {
        let mut cfg = RankConfig::new("tcp;ofi_rxm");
        cfg.ordering = Some(m);
        let err = establish_alone(cfg).unwrap_err();
        let msg = err.to_string();
        assert!(
            matches!(&err, Error::Unsupported { provider, .. } if provider == "tcp;ofi_rxm"),
            "{err:?}"
        );
        assert!(
            msg.contains(m.label()) && msg.contains(names) && msg.contains("delivery"),
            "{msg}"
        );
    }
    // Asking for nothing is always possible.
    let mut cfg = RankConfig::new("tcp;ofi_rxm");
    cfg.ordering = Some(Ordering::None);
    assert_eq!(establish_alone(cfg).unwrap().ordering(), Ordering::None);
}

#[test]
fn a_provider_without_rdm_endpoints_names_its_rdm_layering() {
    // Plain tcp (1.17) has connected endpoints only; fabkit needs RDM.
    let err = establish_alone(RankConfig::new("tcp")).unwrap_err();
    let msg = err.to_string();
    assert!(
        matches!(&err, Error::Unsupported { provider, .. } if provider == "tcp"),
        "{err:?}"
    );
    assert!(
        msg.contains("FI_EP_RDM") && msg.contains("`tcp;ofi_rxm`"),
        "{msg}"
    );
}

#[test]
fn a_provider_without_atomics_is_refused_when_atomics_are_needed() {
    // `net` offers RDM endpoints with RMA, but no u64 atomics.
    let err = establish_alone(RankConfig::new("net")).unwrap_err();
    let msg = err.to_string();
    assert!(
        matches!(&err, Error::Unsupported { provider, .. } if provider == "net"),
        "{err:?}"
    );
    assert!(
        msg.contains("compare-and-swap") && msg.contains("tcp;ofi_rxm"),
        "{msg}"
    );
}

#[test]
fn atomics_are_refused_before_posting_when_the_rank_has_none() {
    // Set up without atomics, plain RMA works and an atomic is refused.
    let mut cfg = RankConfig::new("tcp;ofi_rxm");
    cfg.atomics = false;
    with_ranks(2, cfg, |r| {
        let peer = 1 - r.rank();
        r.write(Remote::new(peer, 16 * r.rank() as u64), b"no atomics here")
            .unwrap();
        let err = r.fetch_add(Remote::new(peer, 0), 1).unwrap_err();
        assert!(matches!(err, Error::Unsupported { .. }), "{err:?}");
        assert!(err.to_string().contains("without atomics"), "{err}");
    });
}

#[test]
fn out_of_bounds_and_bad_ranks_are_errors_not_corruption() {
    let mut cfg = RankConfig::new("shm");
    cfg.region_len = 4096;
    with_ranks(2, cfg, |r| {
        let peer = 1 - r.rank();
        let mut buf = [0u8; 16];
        let err = r.read(Remote::new(peer, 4090), &mut buf).unwrap_err();
        assert!(
            matches!(err, Error::OutOfBounds { peer: p, offset: 4090, len: 16, region_len: 4096, op: OpKind::Read } if p == peer),
            "{err:?}"
        );
        assert!(err.to_string().contains("outside rank"), "{err}");
        let err = r.write(Remote::new(peer, u64::MAX - 2), &buf).unwrap_err();
        assert!(matches!(err, Error::OutOfBounds { .. }), "{err:?}");
        let err = r.fetch_add(Remote::new(peer, 4092), 1).unwrap_err();
        assert!(matches!(err, Error::OutOfBounds { .. }), "{err:?}");
        let err = r.fetch_add(Remote::new(peer, 4), 1).unwrap_err();
        assert!(err.to_string().contains("8-byte aligned"), "{err}");
        let err = r.read(Remote::new(7, 0), &mut buf).unwrap_err();
        assert!(
            matches!(err, Error::NoSuchRank { peer: 7, ranks: 2 }),
            "{err:?}"
        );
        // The last valid bytes still work, and nothing past them was touched.
        r.write(Remote::new(peer, 4080), &[0xab; 16]).unwrap();
        r.read(Remote::new(peer, 4080), &mut buf).unwrap();
        assert_eq!(buf, [0xab; 16]);
    });
}

#[test]
fn a_bootstrap_peer_that_never_comes_names_the_missing_rank() {
    use fabkit_fabric::bootstrap::Bootstrap;
    let boots = ThreadGroup::members(3, Duration::from_secs(2));
    let err = std::thread::scope(|s| {
        // Ranks 0 and 1 show up; rank 2 never does.
        let h = s.spawn(|| boots[1].barrier());
        let e = boots[0].barrier().unwrap_err();
        let _ = h.join();
        e
    });
    let msg = err.to_string();
    assert!(msg.contains("for ranks 2 to join"), "{msg}");
}

const CHILD_ENV: &str = "FABKIT_TEST_CHILD_DIR";

/// Not a test on its own: the peer process of `a_killed_peer_gives_a_timeout_naming_it`.
#[test]
#[ignore = "run as a child process by a_killed_peer_gives_a_timeout_naming_it"]
fn child_peer() {
    let Ok(dir) = std::env::var(CHILD_ENV) else {
        return;
    };
    let prov = std::env::var("FABKIT_TEST_CHILD_PROVIDER").unwrap();
    let boot = FileBootstrap::new(dir, 1, 2, Duration::from_secs(20)).unwrap();
    let rank = Rank::establish(RankConfig::new(prov), &boot).unwrap();
    // Serve until killed.
    std::thread::sleep(Duration::from_secs(60));
    drop(rank);
}

fn remove_shm_of(pid: u32) {
    let prefix = format!("{pid}:");
    for e in std::fs::read_dir("/dev/shm")
        .into_iter()
        .flatten()
        .flatten()
    {
        if e.file_name().to_string_lossy().starts_with(&prefix) {
            let _ = std::fs::remove_file(e.path());
        }
    }
}

#[test]
fn a_killed_peer_gives_a_timeout_naming_it() {
    init_env();
    for prov in ["shm", "tcp;ofi_rxm"] {
        let dir = tempfile::tempdir().unwrap();
        let mut child = Command::new(std::env::current_exe().unwrap())
            .args([
                "--exact",
                "child_peer",
                "--ignored",
                "--nocapture",
                "--test-threads=1",
            ])
            .env(CHILD_ENV, dir.path())
            .env("FABKIT_TEST_CHILD_PROVIDER", prov)
            .spawn()
            .unwrap();
        let boot = FileBootstrap::new(dir.path(), 0, 2, Duration::from_secs(20)).unwrap();
        let mut cfg = RankConfig::new(prov);
        cfg.timeout = Duration::from_secs(2);
        let rank = Rank::establish(cfg, &boot).unwrap();
        // The peer is alive: operations work.
        rank.write(Remote::new(1, 0), b"hello").unwrap();
        assert_eq!(rank.fetch_add(Remote::new(1, 8), 1).unwrap(), 0);
        let child_pid = child.id();
        child.kill().unwrap();
        child.wait().unwrap();
        // libfabric's shm provider names a process's region `<pid>:...` in
        // /dev/shm; a killed process cannot unlink its own, so the test does.
        remove_shm_of(child_pid);
        let start = Instant::now();
        let mut buf = [0u8; 5];
        let err = rank.read(Remote::new(1, 0), &mut buf).unwrap_err();
        let err2 = rank.fetch_add(Remote::new(1, 8), 1).unwrap_err();
        assert!(
            start.elapsed() < fabkit_fabric::env::scaled(Duration::from_secs(10)),
            "{prov}: gave up too late"
        );
        for e in [&err, &err2] {
            assert!(
                matches!(
                    e,
                    Error::Timeout { peer: 1, .. } | Error::Completion { peer: 1, .. }
                ),
                "{prov}: {e:?}"
            );
            assert!(e.to_string().contains("rank 1"), "{prov}: {e}");
        }
        eprintln!("{prov}: killed peer -> {err}");
    }
}
