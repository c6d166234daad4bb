//! Accumulating writes (`Dht::update_many`): each key's new value is
//! computed from the one it replaces while the variant holds the bucket,
//! so ranks counting into the same keys at once lose no increment, also
//! when a batch names one key twice and when the transport reorders and
//! delays; a function that declines leaves the bucket as it was; a call
//! that fails before giving the bucket back leaves it as it was too, so a
//! retry counts once; a chunked
//! accumulation never takes a stalled claim over, and says so when its own
//! was; the lock-free variant refuses.

mod common;

use std::sync::{mpsc, Arc, Barrier};
use std::time::Duration;

use common::{key, local_tables, racing_faults, small, tables_with};
use fabkit_dht::clock::TestClock;
use fabkit_dht::transport::faulty::{Faults, FaultyTransport};
use fabkit_dht::transport::hooked::HookedTransport;
use fabkit_dht::{Dht, Error, Read, Transport, Variant, Write};

const HOLDING: [Variant; 3] = [Variant::Fine, Variant::Coarse, Variant::Chunked];

fn count_of(v: &[u8]) -> u64 {
    u64::from_le_bytes(v[..8].try_into().unwrap())
}

/// Adds one to the counter in the first 8 bytes.
fn bump(v: &mut [u8]) -> bool {
    let n = count_of(v) + 1;
    v[..8].copy_from_slice(&n.to_le_bytes());
    true
}

/// Every rank adds one to `hot` twice and to `warm` once per round, in one
/// batch, all ranks at once; the counters end at the exact sums.
fn count_together<T: Transport + Send + Sync>(tables: &[Dht<T>], variant: Variant, rounds: u64) {
    let (hot, warm) = (key(1), key(2));
    let go = Barrier::new(tables.len());
    std::thread::scope(|s| {
        for d in tables {
            let (hot, warm, go) = (&hot, &warm, &go);
            s.spawn(move || {
                go.wait();
                for round in 0..rounds {
                    let keys: [&[u8]; 3] = [hot, warm, hot];
                    d.update_many(&keys, &mut |_, v| bump(v))
                        .unwrap_or_else(|e| panic!("{variant:?} round {round}: {e}"));
                }
            });
        }
    });
    let n = tables.len() as u64;
    for (k, per_round) in [(&hot, 2), (&warm, 1)] {
        match tables[0].read(k).unwrap() {
            Read::Hit(v) => assert_eq!(
                count_of(&v),
                n * rounds * per_round,
                "{variant:?}: increments lost"
            ),
            other => panic!("{variant:?}: {other:?}"),
        }
    }
}

#[test]
fn ranks_counting_into_one_key_lose_no_increment() {
    for variant in HOLDING {
        let cfg = small(variant, 64);
        count_together(&local_tables(4, cfg), variant, 300);
    }
}

#[test]
fn ranks_counting_into_one_key_lose_no_increment_under_faults() {
    for variant in HOLDING {
        let mut cfg = small(variant, 64);
        cfg.checksum_retries = 20;
        let tables = racing_faults(4, cfg, common::test_seed(0xacc));
        count_together(&tables, variant, 60);
    }
}

#[test]
fn an_update_starts_from_zeros_and_then_from_the_stored_value() {
    for variant in HOLDING {
        let d = &local_tables(1, small(variant, 64))[0];
        let k = key(7);
        let mut seen = Vec::new();
        let w = d
            .update(&k, |v| {
                seen = v.to_vec();
                v.fill(0xab);
                true
            })
            .unwrap();
        assert_eq!(w, Write::Inserted, "{variant:?}");
        assert_eq!(
            seen,
            vec![0; 24],
            "{variant:?}: an absent key starts at zeros"
        );
        let w = d
            .update(&k, |v| {
                seen = v.to_vec();
                true
            })
            .unwrap();
        assert_eq!(w, Write::Updated, "{variant:?}");
        assert_eq!(seen, vec![0xab; 24], "{variant:?}: the stored value");
    }
}

#[test]
fn an_update_that_declines_leaves_the_bucket_as_it_was() {
    for variant in HOLDING {
        let d = &local_tables(2, small(variant, 64));
        let (absent, present) = (key(3), key(4));
        d[0].write(&present, &[5; 24]).unwrap();
        let keys: [&[u8]; 2] = [&absent, &present];
        let mut calls = 0;
        d[0].update_many(&keys, &mut |_, v| {
            calls += 1;
            v.fill(9);
            false
        })
        .unwrap();
        assert_eq!(calls, 2, "{variant:?}: once per key");
        assert_eq!(d[1].read(&absent).unwrap(), Read::Miss, "{variant:?}");
        assert_eq!(
            d[1].read(&present).unwrap(),
            Read::Hit(vec![5; 24]),
            "{variant:?}"
        );
        // Nothing is left held: a plain write and a read go through.
        d[1].write(&absent, &[6; 24]).unwrap();
        assert_eq!(d[0].read(&absent).unwrap(), Read::Hit(vec![6; 24]));
    }
}

#[test]
fn a_lock_free_table_refuses_updates_and_says_which_variants_offer_them() {
    let d = &local_tables(1, small(Variant::Lockfree, 64))[0];
    match d.update(&key(1), bump) {
        Err(Error::Config(m)) => assert!(m.contains("fine, coarse or chunked"), "{m}"),
        other => panic!("{other:?}"),
    }
}

/// The counter `k` holds in `d`'s table (0 if absent).
fn counter<T: Transport>(d: &Dht<T>, k: &[u8]) -> u64 {
    match d.read(k).unwrap() {
        Read::Hit(v) => count_of(&v),
        Read::Miss => 0,
        other => panic!("{other:?}"),
    }
}

#[test]
fn a_failed_accumulation_leaves_the_value_as_it_was_unless_only_the_give_back_failed() {
    for variant in HOLDING {
        let cfg = small(variant, 64);
        let d = &tables_with(1, cfg, |_, t| FaultyTransport::new(t, Faults::default()))[0];
        let k = key(9);
        let mut v = vec![0u8; 24];
        v[..8].copy_from_slice(&5u64.to_le_bytes());
        d.write(&k, &v).unwrap();
        // A clean call's ops: the last one gives the bucket back.
        d.transport().reset_count();
        d.update(&k, bump).unwrap();
        let ops = d.transport().ops_seen();
        d.write(&k, &v).unwrap();
        // Fail each op of the call in turn: an error before the give-back
        // leaves 5 (the bucket is put back as it was read), one in the
        // give-back leaves the store that landed (6), and success makes 6.
        for n in 1..=ops {
            d.transport().reset_count();
            d.transport().set_fail_op(Some(n));
            let r = d.update(&k, bump);
            d.transport().set_fail_op(None);
            let now = counter(d, &k);
            match r {
                Err(e) if n < ops => {
                    assert_eq!(now, 5, "{variant:?}, op {n} of {ops} failed ({e}): changed")
                }
                Err(_) => assert_eq!(now, 6, "{variant:?}: the give-back failed"),
                Ok(_) => panic!("{variant:?}: op {n} of {ops} failed unnoticed"),
            }
            d.write(&k, &v).unwrap();
        }
    }
}

/// Two tables on 2 ranks over hooked transports, the second on a test
/// clock with a 5 s deadline; rank 0's transport stalls before its
/// `stall_at`th batch until the returned sender is used.
struct Stalled {
    a: Dht<HookedTransport<fabkit_dht::transport::local::LocalTransport>>,
    b: Dht<HookedTransport<fabkit_dht::transport::local::LocalTransport>>,
    clock: Arc<TestClock>,
}

fn stalled(variant: Variant) -> Stalled {
    let cfg = small(variant, 64);
    let mut tables = tables_with(2, cfg, |_, t| HookedTransport::new(t)).into_iter();
    let (a, mut b) = (tables.next().unwrap(), tables.next().unwrap());
    let clock = Arc::new(TestClock::new());
    b.set_clock(clock.clone());
    b.set_deadline(Duration::from_secs(5)).unwrap();
    Stalled { a, b, clock }
}

/// Stalls `t` before its `n`th batch from now: returns the receiver that
/// says it stalled and the sender that resumes it.
fn stall_before(
    t: &HookedTransport<fabkit_dht::transport::local::LocalTransport>,
    n: u32,
) -> (mpsc::Receiver<()>, mpsc::Sender<()>) {
    let (stalled_tx, stalled_rx) = mpsc::sync_channel(1);
    let (resume_tx, resume_rx) = mpsc::channel::<()>();
    let mut batches = 0;
    t.before(Some(Box::new(move |_| {
        batches += 1;
        if batches == n {
            stalled_tx.send(()).unwrap();
            resume_rx
                .recv_timeout(Duration::from_secs(60))
                .expect("the test resumes a stalled transport");
        }
    })));
    (stalled_rx, resume_tx)
}

#[test]
fn a_chunked_accumulation_waits_out_a_stalled_claim_instead_of_taking_it_over() {
    let s = stalled(Variant::Chunked);
    let k = key(11);
    s.a.update(&k, bump).unwrap(); // 1
    std::thread::scope(|sc| {
        // Rank 0 stalls holding the claim: after its scan and claim, before
        // it reads the bucket again under the claim.
        let (stalled_rx, resume) = stall_before(s.a.transport(), 3);
        let late = sc.spawn(|| s.a.update(&k, bump));
        stalled_rx.recv_timeout(Duration::from_secs(60)).unwrap();
        match s.b.update(&k, bump) {
            Err(Error::Deadline { what, .. }) => assert_eq!(what, "the claim"),
            other => panic!("took the claim over, or waited for ever: {other:?}"),
        }
        assert!(s.clock.elapsed() >= Duration::from_secs(5));
        resume.send(()).unwrap();
        late.join().unwrap().unwrap();
    });
    s.a.transport().before(None);
    assert_eq!(counter(&s.b, &k), 2, "the stalled accumulation counts once");
    s.b.update(&k, bump).unwrap();
    assert_eq!(counter(&s.a, &k), 3);
}

#[test]
fn a_chunked_accumulation_whose_claim_was_taken_over_says_so() {
    let s = stalled(Variant::Chunked);
    let k = key(12);
    s.a.update(&k, bump).unwrap();
    let plain = vec![7u8; 24];
    std::thread::scope(|sc| {
        // Stalled after its read under the claim, before its store: a
        // plain writer takes the claim over after a deadline and writes.
        let (stalled_rx, resume) = stall_before(s.a.transport(), 4);
        let late = sc.spawn(|| s.a.update(&k, bump));
        stalled_rx.recv_timeout(Duration::from_secs(60)).unwrap();
        s.b.write(&k, &plain).unwrap();
        resume.send(()).unwrap();
        match late.join().unwrap() {
            Err(Error::Lost { what, .. }) => assert_eq!(what, "the claim"),
            other => panic!("a taken-over accumulation must say so: {other:?}"),
        }
    });
    s.a.transport().before(None);
    match s.b.read(&k).unwrap() {
        Read::Hit(v) => assert!(v == plain || count_of(&v) == 2, "{v:?}"),
        other => panic!("{other:?}"),
    }
}
