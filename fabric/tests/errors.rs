//! Bad input and broken peers give errors that name the problem, never a
//! crash, corruption or hang.

mod common;

use std::process::Command;
use std::time::{Duration, Instant};

use common::{init_env, providers, with_ranks};
use fabkit_core::bootstrap::{Bootstrap, FileBootstrap, ThreadGroup};
use fabkit_core::Error as CoreError;
use fabkit_fabric::{
    AddressVector, Caps, CompletionQueue, Domain, Endpoint, Error, Fabric, Hints, Op, OpKind,
    Ordering, Rank, RankConfig, Remote,
};

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
            matches!(err, Error::Core(CoreError::OutOfBounds { peer: p, offset: 4090, len: 16, region_len: 4096, op: OpKind::Read }) if p == peer),
            "{err:?}"
        );
        assert!(err.to_string().contains("outside rank"), "{err}");
        let err = r.write(Remote::new(peer, u64::MAX - 2), &buf).unwrap_err();
        assert!(
            matches!(err, Error::Core(CoreError::OutOfBounds { .. })),
            "{err:?}"
        );
        let err = r.fetch_add(Remote::new(peer, 4092), 1).unwrap_err();
        assert!(
            matches!(err, Error::Core(CoreError::OutOfBounds { .. })),
            "{err:?}"
        );
        let err = r.fetch_add(Remote::new(peer, 4), 1).unwrap_err();
        assert!(err.to_string().contains("8-byte aligned"), "{err}");
        let err = r.read(Remote::new(7, 0), &mut buf).unwrap_err();
        assert!(
            matches!(
                err,
                Error::Core(CoreError::NoSuchRank { peer: 7, ranks: 2 })
            ),
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
    // Serve (the progress thread does) until killed, or until the parent
    // closes our stdin: it does when it is done, and when it dies or panics,
    // so this child never outlives its test.
    let _ = std::io::copy(&mut std::io::stdin().lock(), &mut std::io::sink());
    drop(rank);
}

/// The peer process; killed, reaped, and its shm regions removed when
/// dropped, also when the test fails half-way.
struct ChildPeer(std::process::Child);

impl Drop for ChildPeer {
    fn drop(&mut self) {
        let pid = self.0.id();
        let _ = self.0.kill();
        let _ = self.0.wait();
        // libfabric's shm provider names a process's region `<pid>:...` in
        // /dev/shm; a killed process cannot unlink its own, so we do.
        remove_shm_of(pid);
    }
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
        let mut child = ChildPeer(
            Command::new(std::env::current_exe().unwrap())
                .args([
                    "--exact",
                    "child_peer",
                    "--ignored",
                    "--nocapture",
                    "--test-threads=1",
                ])
                .env(CHILD_ENV, dir.path())
                .env("FABKIT_TEST_CHILD_PROVIDER", prov)
                .stdin(std::process::Stdio::piped())
                .spawn()
                .unwrap(),
        );
        let boot = FileBootstrap::new(dir.path(), 0, 2, Duration::from_secs(20)).unwrap();
        let mut cfg = RankConfig::new(prov);
        cfg.timeout = Duration::from_secs(2);
        let rank = Rank::establish(cfg, &boot).unwrap();
        // The peer is alive: operations work.
        rank.write(Remote::new(1, 0), b"hello").unwrap();
        assert_eq!(rank.fetch_add(Remote::new(1, 8), 1).unwrap(), 0);
        child.0.kill().unwrap();
        child.0.wait().unwrap();
        remove_shm_of(child.0.id());
        let start = Instant::now();
        let mut buf = [0u8; 5];
        let err = rank.read(Remote::new(1, 0), &mut buf).unwrap_err();
        let err2 = rank.fetch_add(Remote::new(1, 8), 1).unwrap_err();
        assert!(
            start.elapsed() < fabkit_core::time::scaled(Duration::from_secs(10)),
            "{prov}: gave up too late"
        );
        // The read names the dead peer: it timed out, failed, or (shm) the
        // provider reported an error entry of no operation, which breaks
        // the CQ. A broken CQ fails the rank for every later call.
        let names_peer = |e: &Error| {
            matches!(
                e,
                Error::Core(CoreError::Timeout { peer: 1, .. })
                    | Error::Completion { peer: 1, .. }
                    | Error::CompletionQueue { peer: 1, .. }
            ) && e.to_string().contains("rank 1")
        };
        assert!(names_peer(&err), "{prov}: {err:?}");
        if matches!(err, Error::CompletionQueue { .. }) {
            assert!(
                matches!(err2, Error::RankFailed { rank: 0, .. }),
                "{prov}: {err2:?}"
            );
        } else {
            assert!(names_peer(&err2), "{prov}: {err2:?}");
        }
        eprintln!("{prov}: killed peer -> {err}");
        // A read that was posted and never completed retired the staging
        // buffer (shm: the CQ broke under it); one the provider never took
        // (tcp;ofi_rxm answers posts to a dead peer with -FI_EAGAIN until
        // the deadline) left nothing to retire. Either way dropping the
        // rank closes every fid.
        if matches!(err, Error::CompletionQueue { .. }) {
            assert!(rank.retired_buffers() >= 1, "{prov}: nothing retired");
        }
        let watch = rank.fid_watch();
        drop(rank);
        assert!(
            watch.open().is_empty(),
            "{prov}: still open: {:?}",
            watch.open()
        );
    }
}

/// Opens `provider`'s fabric, domain, CQ and AV, as a rank would.
fn open_av(provider: &str) -> (Endpoint, AddressVector) {
    init_env();
    let info = fabkit_fabric::info::find(&Hints::new(provider, Caps::RMA), true).unwrap();
    let fabric = Fabric::open(&info).unwrap();
    let domain = Domain::open(&fabric, &info).unwrap();
    let cq = CompletionQueue::open(&domain, 64).unwrap();
    let av = AddressVector::open(&domain).unwrap();
    (Endpoint::open(&domain, &cq, &av).unwrap(), av)
}

#[test]
fn a_short_or_long_address_is_refused_naming_both_lengths() {
    // tcp;ofi_rxm addresses are a sockaddr_in (16 B) or, on a host with
    // IPv6 only, a sockaddr_in6 (28 B).
    let (ep, av) = open_av("tcp;ofi_rxm");
    let n = ep.name().len();
    let format = match n {
        16 => "FI_SOCKADDR_IN",
        28 => "FI_SOCKADDR_IN6",
        other => panic!("a tcp;ofi_rxm name of {other} B is no socket address"),
    };
    for len in [0, 5, n - 1, n + 1, 64] {
        let name = vec![0u8; len];
        let err = av.insert(&name).unwrap_err();
        assert!(
            matches!(&err, Error::AddressLength { peer: None, len: l, .. } if *l == len),
            "{len} B: {err:?}"
        );
        let msg = err.to_string();
        assert!(
            msg.contains(&format!("is {len} B")) && msg.contains(&format!("{n} B ({format})")),
            "{msg}"
        );
    }
    // A whole address is taken.
    av.insert(ep.name()).unwrap();

    // shm addresses are strings: one cut before its NUL would be read on
    // past its end.
    let (ep, av) = open_av("shm");
    let name = ep.name();
    let nul = name
        .iter()
        .position(|&b| b == 0)
        .expect("shm names end in NUL");
    let err = av.insert(&name[..nul]).unwrap_err();
    assert!(matches!(err, Error::AddressLength { .. }), "{err:?}");
    assert!(err.to_string().contains("NUL-terminated"), "{err}");
    av.insert(name).unwrap();
}

/// A bootstrap whose allgather hands every rank a damaged copy of one
/// rank's contribution: a peer that sends a truncated card cannot be made
/// here any other way (every real rank encodes whole cards).
struct DamagedCard<'a> {
    inner: &'a dyn Bootstrap,
    victim: usize,
    damage: Damage,
}

/// What a damaged card is made of, from the whole one.
type Damage = fn(&[u8]) -> Vec<u8>;

impl Bootstrap for DamagedCard<'_> {
    fn rank(&self) -> usize {
        self.inner.rank()
    }
    fn size(&self) -> usize {
        self.inner.size()
    }
    fn allgather(&self, mine: &[u8]) -> Result<Vec<Vec<u8>>, CoreError> {
        let mut all = self.inner.allgather(mine)?;
        all[self.victim] = (self.damage)(&all[self.victim]);
        Ok(all)
    }
    fn barrier(&self) -> Result<(), CoreError> {
        self.inner.barrier()
    }
    fn same_host(&self) -> Result<bool, CoreError> {
        self.inner.same_host()
    }
}

/// A card whose endpoint name is 4 bytes short, framed consistently (the
/// card is `u32 len, provider, u32 len, name, base, len, key`).
fn shorten_name(card: &[u8]) -> Vec<u8> {
    let u32_at = |at: usize| u32::from_le_bytes(card[at..at + 4].try_into().unwrap()) as usize;
    let plen = u32_at(0);
    let name_at = 4 + plen + 4;
    let nlen = u32_at(4 + plen);
    let mut out = card[..4 + plen].to_vec();
    out.extend_from_slice(&((nlen - 4) as u32).to_le_bytes());
    out.extend_from_slice(&card[name_at..name_at + nlen - 4]);
    out.extend_from_slice(&card[name_at + nlen..]);
    out
}

#[test]
fn a_truncated_peer_card_is_an_error_naming_the_peer() {
    init_env();
    let cases: [(Damage, &str); 2] = [
        (|c| c[..c.len() - 3].to_vec(), "malformed address card"),
        (shorten_name, "rank 1's address is"),
    ];
    for prov in ["shm", "tcp;ofi_rxm"] {
        for (damage, says) in cases {
            let boots = ThreadGroup::members(2, Duration::from_secs(10));
            let errs: Vec<Error> = std::thread::scope(|s| {
                let hs: Vec<_> = boots
                    .iter()
                    .map(|b| {
                        s.spawn(move || {
                            let boot = DamagedCard {
                                inner: b,
                                victim: 1,
                                damage,
                            };
                            Rank::establish(RankConfig::new(prov), &boot).unwrap_err()
                        })
                    })
                    .collect();
                hs.into_iter().map(|h| h.join().unwrap()).collect()
            });
            // Every rank sees the damaged card and fails, none waits.
            for e in errs {
                let msg = e.to_string();
                assert!(
                    msg.contains(says) && msg.contains("rank 1"),
                    "{prov}: {msg}"
                );
            }
        }
    }
}

/// Two in-process ranks of `provider`: rank 1 sets up with no progress
/// thread, connects to rank 0 (one atomic on it), and then does nothing on
/// the fabric until rank 0's `body` is done, so rank 0's operations on it
/// are posted but never complete (`tcp;ofi_rxm` needs the target to
/// progress). Rank 1 waits on a channel, not a sleep: it goes as soon as
/// rank 0 is done, also if rank 0 panics (the sender drops).
fn with_a_stalled_peer<T: Send>(
    provider: &str,
    cfg0: RankConfig,
    body: impl FnOnce(Rank) -> T + Send,
) -> T {
    init_env();
    let boots = ThreadGroup::members(2, Duration::from_secs(30));
    let (done, wait_done) = std::sync::mpsc::channel::<()>();
    let (connected, wait_connected) = std::sync::mpsc::channel::<()>();
    std::thread::scope(|s| {
        let (b0, b1) = (&boots[0], &boots[1]);
        let stalled = s.spawn(move || {
            let mut cfg = RankConfig::new(provider);
            cfg.progress = fabkit_fabric::ProgressMode::Off;
            let r = Rank::establish(cfg, b1).unwrap();
            r.fetch(Remote::new(0, 0)).unwrap();
            drop(connected);
            let _ = wait_done.recv();
            drop(r);
        });
        let r = Rank::establish(cfg0, b0).unwrap();
        // Disconnected when rank 1 has connected (or died trying).
        let _ = wait_connected.recv();
        let out = body(r);
        drop(done);
        stalled.join().unwrap();
        out
    })
}

/// Times out a read on a stalled peer (which retires the staging buffer
/// with the read still posted), drops the rank and returns every close of
/// its fids, in order, with `fi_close`'s result, after checking that every
/// fid it opened was closed successfully.
fn closes_after_a_timeout(regions_first: bool) -> Vec<(&'static str, i32)> {
    let mut cfg = RankConfig::new("tcp;ofi_rxm");
    cfg.timeout = Duration::from_millis(300);
    let watch = with_a_stalled_peer("tcp;ofi_rxm", cfg, |mut r| {
        if regions_first {
            r.close_regions_first();
        }
        let mut buf = vec![0u8; 64 << 10];
        let err = r.read(Remote::new(1, 0), &mut buf).unwrap_err();
        assert!(
            matches!(err, Error::Core(CoreError::Timeout { peer: 1, .. })),
            "{err:?}"
        );
        assert_eq!(r.retired_buffers(), 1, "the staging buffer was not retired");
        assert!(r.lost_ops() >= 1, "the timed-out read is not counted");
        let watch = r.fid_watch();
        let mut open = watch.open();
        open.sort_unstable();
        // The region, the retired staging buffer and its replacement.
        let want = ["av", "cq", "domain", "endpoint", "fabric", "mr", "mr", "mr"];
        assert_eq!(open, want);
        drop(r);
        watch
    });
    assert!(watch.open().is_empty(), "still open: {:?}", watch.open());
    let closes = watch.closes();
    assert!(closes.iter().all(|&(_, rc)| rc == 0), "{closes:?}");
    closes
}

/// How many memory regions closed after the endpoint, and the kinds that
/// closed after the last region, in order.
fn after_endpoint(closes: &[(&'static str, i32)]) -> (usize, Vec<&'static str>) {
    let ep = closes.iter().position(|c| c.0 == "endpoint").unwrap();
    let rest: Vec<&str> = closes[ep + 1..].iter().map(|c| c.0).collect();
    let mrs = rest.iter().filter(|&&w| w == "mr").count();
    (mrs, rest.into_iter().filter(|&w| w != "mr").collect())
}

#[test]
fn after_a_timeout_the_endpoint_closes_before_the_retired_registration() {
    // A region keeps the endpoint it was registered through alive, as it
    // must under FI_MR_ENDPOINT, on every provider: a staging buffer retired
    // after a timeout used to be kept inside the endpoint, a cycle that
    // leaked the endpoint, CQ, AV, domain and fabric. tcp;ofi_rxm has no
    // FI_MR_ENDPOINT: fi_endpoint(3) wants the retired buffer's registration
    // closed only after the endpoint (which ends the read still posted).
    let closes = closes_after_a_timeout(false);
    assert_eq!(
        after_endpoint(&closes),
        (1, vec!["cq", "av", "domain", "fabric"]),
        "{closes:?}"
    );
}

#[test]
fn under_fi_mr_endpoint_the_retired_registration_closes_before_the_endpoint() {
    // No provider here has FI_MR_ENDPOINT (verbs, cxi and efa do); the
    // rank is told to close as under it: a bound region first (cxi refuses
    // to close an endpoint with one open), then the endpoint, then the
    // buffer is freed.
    let closes = closes_after_a_timeout(true);
    assert_eq!(
        after_endpoint(&closes),
        (0, vec!["cq", "av", "domain", "fabric"]),
        "{closes:?}"
    );
}

#[test]
fn operations_that_never_complete_fail_the_rank_instead_of_shrinking_its_window() {
    let mut cfg = RankConfig::new("tcp;ofi_rxm");
    cfg.timeout = Duration::from_millis(200);
    cfg.window = 64;
    with_a_stalled_peer("tcp;ofi_rxm", cfg, |r| {
        let mut words = vec![0u64; 64];
        let mut last = None;
        // Each batch of 64 atomics times out and leaves its ops abandoned;
        // the rank fails once fewer than 64 completion slots are left.
        for round in 0..200 {
            let mut ops: Vec<Op> = words
                .iter_mut()
                .enumerate()
                .map(|(i, w)| Op::Fetch {
                    at: Remote::new(1, 8 * i as u64),
                    value: w,
                })
                .collect();
            match r.execute(&mut ops) {
                Err(e @ Error::RankFailed { .. }) => {
                    eprintln!("round {round}, {} lost: {e}", r.lost_ops());
                    last = Some(e);
                    break;
                }
                Err(Error::Core(CoreError::Timeout { peer: 1, .. })) => {}
                other => panic!("round {round}: {other:?}"),
            }
        }
        let err = last.expect("the rank never reported itself failed");
        let msg = err.to_string();
        assert!(
            msg.contains("rank 0 has failed")
                && msg.contains(&format!("{} operations timed out", r.lost_ops()))
                && msg.contains("window of 64"),
            "{msg}"
        );
        // Every later call fails at once, with the same reason, even to a
        // live target (its own region).
        let start = Instant::now();
        let err = r.fetch(Remote::new(0, 0)).unwrap_err();
        assert!(matches!(err, Error::RankFailed { rank: 0, .. }), "{err:?}");
        assert_eq!(err.to_string(), msg);
        let err = r.send(1, b"x").unwrap_err();
        assert!(matches!(err, Error::RankFailed { .. }), "{err:?}");
        assert!(start.elapsed() < fabkit_core::time::scaled(Duration::from_millis(100)));
    });
}

#[test]
fn a_message_longer_than_the_receive_buffer_is_an_error_naming_both_sizes() {
    // A receive used to hand back the first `buf.len()` bytes of a longer
    // message as if that were all of it.
    for prov in common::providers() {
        with_ranks(2, RankConfig::new(prov.as_str()), |r| {
            if r.rank() == 0 {
                r.send(1, &[7u8; 100]).unwrap();
                return;
            }
            let mut buf = [0u8; 40];
            let err = r.recv(0, &mut buf).unwrap_err();
            let msg = err.to_string();
            assert!(
                msg.contains("rank 0") && msg.contains("100 B") && msg.contains("40 B"),
                "{prov}: {msg}"
            );
            eprintln!("{prov}: {msg}");
        });
    }
}

#[test]
fn a_batched_receive_of_a_longer_message_is_an_error_never_a_cut_message() {
    // A receive among a batch's operations used to hand back the first
    // `into.len()` bytes of a longer message as its whole. `shm` (1.17)
    // never completes a receive it would have to cut: there the error is
    // the receive's timeout, and the sender's send never completes either.
    for prov in common::providers() {
        let shm = prov == "shm";
        let mut cfg = RankConfig::new(prov.as_str());
        cfg.timeout = Duration::from_secs(2);
        with_ranks(2, cfg, |r| {
            if r.rank() == 0 {
                let sent = r.send(1, &[7u8; 100]);
                if !shm {
                    sent.unwrap();
                }
                return;
            }
            let (mut into, mut len) = ([0u8; 40], usize::MAX);
            let err = r
                .execute(&mut [Op::Recv {
                    from: 0,
                    into: &mut into,
                    len: &mut len,
                }])
                .unwrap_err();
            let msg = err.to_string();
            eprintln!("{prov}: {msg}");
            if shm {
                assert!(
                    msg.contains("rank 0") && msg.contains("did not complete"),
                    "{prov}: {msg}"
                );
                return;
            }
            assert!(
                msg.contains("rank 0") && msg.contains("40 B"),
                "{prov}: {msg}"
            );
            assert_eq!(len, 0, "{prov}: no length handed back for a message cut");
        });
    }
}

/// A process outside the job that can reach a rank's endpoint must guess a
/// region's key: where the provider takes the caller's key, every region
/// gets 64 random bits, not the next number of a counter.
#[test]
fn requested_keys_are_random_64_bit_and_distinct() {
    for prov in providers() {
        let (ep, _av) = open_av(&prov);
        let info = fabkit_fabric::info::find(&Hints::new(prov.as_str(), Caps::RMA), true).unwrap();
        if info.mr_keys() == fabkit_fabric::KeyPick::Provider {
            continue;
        }
        assert_eq!(
            info.mr_keys(),
            fabkit_fabric::KeyPick::Requested { bits: 64 },
            "{prov}"
        );
        let keys: Vec<u64> = (0..8)
            .map(|_| ep.register(64).unwrap().remote().key)
            .collect();
        let mut distinct = keys.clone();
        distinct.sort_unstable();
        distinct.dedup();
        assert_eq!(
            distinct.len(),
            keys.len(),
            "{prov}: a key repeats: {keys:x?}"
        );
        // A counter from 1 would give keys below 2^16; eight random keys
        // all below 2^32 happen with probability 2^-256.
        assert!(
            keys.iter().any(|&k| k >= 1 << 32),
            "{prov}: every key is small: {keys:x?}"
        );
    }
}
