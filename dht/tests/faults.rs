//! The variants under the fault-injecting transport: against the HashMap
//! model, with every op of an operation failing in turn (whatever it held
//! must be given back), and with holds that never go away (deadlines from
//! the test's clock, no sleeping).

mod common;

use std::sync::Arc;
use std::time::Duration;

use common::model::{agree, step};
use common::{key, small, tables_with, value, VARIANTS};
use fabkit_dht::clock::TestClock;
use fabkit_dht::placement::{default_candidates, hash_key, Placement};
use fabkit_dht::transport::faulty::{Delay, Faults, FaultyTransport};
use fabkit_dht::transport::local::LocalTransport;
use fabkit_dht::transport::{Op, Remote, Transport};
use fabkit_dht::{Config, Dht, Error, Read, Variant, Write};
use proptest::prelude::*;
use proptest::test_runner::RngSeed;

type Table = Dht<FaultyTransport<LocalTransport>>;

/// `n` tables over shared local regions, rank r's transport injecting
/// `faults(r)`; every table takes its time from its own test clock.
fn tables(n: usize, cfg: Config, faults: impl Fn(usize) -> Faults) -> Vec<(Table, Arc<TestClock>)> {
    let made = tables_with(n, cfg, |r, t| FaultyTransport::new(t, faults(r)));
    made.into_iter()
        .map(|mut d| {
            let c = Arc::new(TestClock::new());
            d.set_clock(c.clone());
            d.set_deadline(Duration::from_secs(5)).unwrap();
            (d, c)
        })
        .collect()
}

proptest! {
    // A fixed seed by default: CI runs the same cases every time, and a
    // failure names its case and the seed (FABKIT_TEST_SEED) that replays
    // it. FABKIT_TEST_SEED and FABKIT_TEST_CASES explore further.
    #![proptest_config(ProptestConfig {
        cases: common::test_cases(24),
        rng_seed: RngSeed::Fixed(common::test_seed(0x00fa_b417)),
        failure_persistence: None,
        ..ProptestConfig::default()
    })]

    #[test]
    fn every_variant_under_faults_behaves_like_a_hash_map(
        steps in prop::collection::vec(step(40, 10), 1..40),
        seed in any::<u64>(),
    ) {
        for variant in VARIANTS {
            // Torn reads come from a writer that ignores locks: only the
            // checksummed variants claim to survive it.
            let tear = if matches!(variant, Variant::Lockfree | Variant::Chunked) { 0.5 } else { 0.0 };
            let mut cfg = small(variant, 512);
            // A tear costs a re-read; enough re-reads that a key is not
            // given up as corrupt by chance (0.25^21).
            cfg.checksum_retries = 20;
            // Half the cases keep batches in flight on four lanes (of 3
            // keys at least).
            let lanes = if seed & 1 == 0 { 1 } else { 4 };
            let mut ts = tables(3, cfg, |r| {
                Faults::seeded(seed ^ r as u64)
                    .lanes(lanes)
                    .reorder()
                    .split_reads(0.5)
                    .tear_reads(tear)
                    .delay_writes(Delay::UntilNextBatch, 0.5)
            });
            ts[1].0.set_lane_keys(3);
            let d = &ts[1].0;
            agree(d, variant, &steps)?;
            let inj = d.transport().injected();
            prop_assert!(inj.reordered_batches + inj.split_reads + inj.delayed_writes > 0,
                "{:?}: no fault was injected: {:?}", variant, inj);
        }
    }
}

/// A key whose home is rank 1 of 2.
fn remote_key(cfg: &Config) -> Vec<u8> {
    let cands = default_candidates(cfg.buckets);
    let p = Placement::new(2, cfg.buckets, cands);
    (0..)
        .map(key)
        .find(|k| p.rank_of(hash_key(k)) == 1)
        .unwrap()
}

/// Every word of `rank`'s region that holds a lock or a claim: lock words
/// (fine: each bucket's first word; coarse: the region's first) with a
/// non-zero tag (their low 36 bits), chunked state words that are odd.
fn holds(t: &impl Transport, cfg: &Config, rank: usize) -> Vec<u64> {
    let l = cfg.layout();
    let mut region = vec![0u8; cfg.region_len()];
    t.execute(&mut [Op::Read {
        from: Remote::new(rank, 0),
        into: &mut region,
    }])
    .unwrap();
    let word =
        |off: u64| u64::from_le_bytes(region[off as usize..off as usize + 8].try_into().unwrap());
    match cfg.variant {
        Variant::Coarse => [0u64]
            .into_iter()
            .filter(|&o| word(o) & ((1 << 36) - 1) != 0)
            .collect(),
        Variant::Fine => (0..cfg.buckets)
            .filter(|&b| word(l.offset(b)) & ((1 << 36) - 1) != 0)
            .collect(),
        Variant::Chunked => (0..cfg.buckets)
            .filter(|&b| word(l.offset(b)) & 1 == 1)
            .collect(),
        Variant::Lockfree => vec![],
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    Insert,
    Update,
    Read,
    FindOrPut,
}

/// Runs one operation of `kind` on `d` with key `k`.
fn operate(d: &Table, kind: Kind, k: &[u8], seq: u64) -> Result<(), Error> {
    let v = value(k, 0, seq, 24);
    match kind {
        Kind::Insert | Kind::Update => d.write(k, &v).map(|_| ()),
        Kind::Read => d.read(k).map(|_| ()),
        Kind::FindOrPut => d.find_or_put_many(&[(k, &v)]).map(|_| ()),
    }
}

#[test]
fn every_error_path_gives_back_what_it_holds() {
    let mut cases = 0;
    for variant in VARIANTS {
        let cfg = small(variant, 64);
        let k = remote_key(&cfg);
        let kinds: &[Kind] = if variant == Variant::Chunked {
            &[Kind::Insert, Kind::Update, Kind::Read, Kind::FindOrPut]
        } else {
            &[Kind::Insert, Kind::Update, Kind::Read]
        };
        for &kind in kinds {
            // How many ops the operation issues when nothing fails.
            let count = {
                let ts = tables(2, cfg, |_| Faults::default());
                if kind != Kind::Insert {
                    ts[0].0.write(&k, &value(&k, 0, 0, 24)).unwrap();
                }
                ts[0].0.transport().reset_count();
                operate(&ts[0].0, kind, &k, 1).unwrap();
                ts[0].0.transport().ops_seen()
            };
            assert!(count >= 1);
            // Each op fails once having taken effect and once not (a real
            // error completion does not say which).
            for (n, landed) in (1..=count).flat_map(|n| [(n, 0), (n, 1)]) {
                let seed = (0..64)
                    .map(|s| n * 1000 + s)
                    .find(|&s| {
                        let t = FaultyTransport::new(
                            LocalTransport::group(1, 64).pop().unwrap(),
                            Faults::seeded(s).fail_op(1),
                        );
                        let _ = t.execute(&mut [Op::Write {
                            to: Remote::new(0, 0),
                            from: &[1],
                            completion: fabkit_dht::transport::Completion::Transmit,
                        }]);
                        t.injected().failed_applied == landed
                    })
                    .expect("a seed for each outcome");
                let ts = tables(2, cfg, |_| Faults::seeded(seed));
                let (d0, d1) = (&ts[0].0, &ts[1].0);
                if kind != Kind::Insert {
                    d0.write(&k, &value(&k, 0, 0, 24)).unwrap();
                }
                d0.transport().reset_count();
                d0.transport().set_fail_op(Some(n));
                let r = operate(d0, kind, &k, 1);
                let ctx = format!(
                    "{variant:?} {kind:?}, op {n} of {count} failed ({})",
                    if landed == 1 {
                        "but landed"
                    } else {
                        "and did not land"
                    }
                );
                assert!(
                    matches!(r, Err(Error::Transport(_))),
                    "{ctx}: the operation must report the failure, got {r:?}"
                );
                assert_eq!(d0.transport().injected().failed_ops, 1, "{ctx}");
                assert_eq!(d0.transport().injected().failed_applied, landed, "{ctx}");
                // Nothing is left held, and another rank's operations on the
                // same bucket go through within their deadline.
                for rank in 0..2 {
                    assert_eq!(
                        holds(d1.transport(), &cfg, rank),
                        Vec::<u64>::new(),
                        "{ctx}: rank {rank}"
                    );
                }
                let v = value(&k, 1, 7, 24);
                d1.write(&k, &v)
                    .unwrap_or_else(|e| panic!("{ctx}: the next write failed: {e}"));
                assert_eq!(d1.read(&k).unwrap(), Read::Hit(v), "{ctx}");
                assert!(
                    ts[1].1.elapsed() < Duration::from_secs(5),
                    "{ctx}: waited to the deadline"
                );
                cases += 1;
            }
        }
    }
    // Every variant's write fails at least at its lock/claim, data and
    // release steps: far more than 4 x 3 cases.
    assert!(cases > 80, "only {cases} failure points");
}

/// Puts a hold of rank 7 (a rank that died holding it) where `k`'s first
/// write would need it; returns the word's remote and its value.
fn plant_hold(t: &impl Transport, cfg: &Config, k: &[u8]) -> (Remote, u64) {
    let l = cfg.layout();
    let p = Placement::new(2, cfg.buckets, default_candidates(cfg.buckets));
    let h = hash_key(k);
    let c0 = p.candidate(h, 0);
    // The tag of rank 7: (rank + 1) << 16, sequence 0.
    let tag = 8u64 << 16;
    let (at, w) = match cfg.variant {
        Variant::Coarse => (Remote::new(1, 0), tag),
        Variant::Fine => (Remote::new(1, l.offset(c0)), tag),
        _ => unreachable!("chunked claims are taken over (tests/races.rs), lockfree holds nothing"),
    };
    let mut old = 0;
    t.execute(&mut [Op::Swap {
        at,
        new: w,
        old: &mut old,
    }])
    .unwrap();
    (at, w)
}

#[test]
fn a_lock_that_never_goes_away_ends_at_the_deadline_of_the_test_clock() {
    for variant in [Variant::Fine, Variant::Coarse] {
        let cfg = small(variant, 64);
        let k = remote_key(&cfg);
        let ts = tables(2, cfg, |_| Faults::default());
        let (d, clock) = (&ts[0].0, &ts[0].1);
        let (at, _) = plant_hold(d.transport(), &cfg, &k);
        // What each waits for: a writer for the lock, a reader for a
        // consistent snapshot (fine) or the region lock (coarse).
        let (write_waits, read_waits) = match variant {
            Variant::Fine => ("the lock", "a consistent read"),
            _ => ("the region lock", "the region lock"),
        };
        for (op, what) in [("write", write_waits), ("read", read_waits)] {
            let before = clock.elapsed();
            let r = if op == "write" {
                d.write(&k, &value(&k, 0, 0, 24)).map(|_| ())
            } else {
                d.read(&k).map(|_| ())
            };
            let waited = clock.elapsed() - before;
            let e = r.expect_err(&format!(
                "{variant:?} {op}: a hold held for ever must end in an error"
            ));
            let msg = e.to_string();
            assert!(
                matches!(e, Error::Deadline { .. }),
                "{variant:?} {op}: {msg}"
            );
            assert!(
                msg.contains(what) && msg.contains("rank 1") && msg.contains("held by rank 7"),
                "{variant:?} {op}: {msg}"
            );
            assert!(
                msg.contains(&fabkit_dht_key_hex(&k)),
                "{variant:?} {op}: {msg} names the key"
            );
            assert!(
                waited >= Duration::from_secs(5) && waited < Duration::from_secs(6),
                "{variant:?} {op}: gave up after {waited:?} of test time, not at the 5 s deadline"
            );
        }
        // The hold goes; the same operations go through.
        let mut old = 0;
        d.transport()
            .execute(&mut [Op::Swap {
                at,
                new: 0,
                old: &mut old,
            }])
            .unwrap();
        assert_eq!(
            d.write(&k, &value(&k, 0, 1, 24)).unwrap(),
            Write::Inserted,
            "{variant:?}"
        );
        assert_eq!(
            d.read(&k).unwrap(),
            Read::Hit(value(&k, 0, 1, 24)),
            "{variant:?}"
        );
    }
}

fn fabkit_dht_key_hex(k: &[u8]) -> String {
    k.iter().take(16).map(|b| format!("{b:02x}")).collect()
}

/// One batch of distinct keys into a small table, its ops reordered: each
/// key reported inserted must be there afterwards (an eviction replaces one
/// key by another), so no two keys of a batch may take one bucket. A
/// key's re-read of a bucket must not be unordered with another key's store
/// to it in the same batch.
#[test]
fn a_batch_never_stores_two_keys_in_one_bucket() {
    for variant in VARIANTS {
        let mut lost = 0;
        let base = common::test_seed(0);
        for seed in (0..150).map(|i| base.wrapping_add(i)) {
            let mut cfg = small(variant, 16);
            cfg.candidates = 4;
            cfg.chunk = 2;
            let ts = tables(1, cfg, |_| {
                Faults::seeded(seed)
                    .reorder()
                    .delay_writes(Delay::UntilNextBatch, 0.5)
            });
            let d = &ts[0].0;
            let keys: Vec<Vec<u8>> = (0..12).map(|i| key(seed * 100 + i)).collect();
            let vals: Vec<Vec<u8>> = keys.iter().map(|k| value(k, 0, seed, 24)).collect();
            let items: Vec<(&[u8], &[u8])> = keys
                .iter()
                .zip(&vals)
                .map(|(k, v)| (&k[..], &v[..]))
                .collect();
            let ws = d.write_many(&items).unwrap();
            let inserted = ws.iter().filter(|w| **w == Write::Inserted).count();
            let mut hits = 0;
            for (k, v) in keys.iter().zip(&vals) {
                match d.read(k).unwrap() {
                    Read::Hit(got) => {
                        assert_eq!(&got, v, "{variant:?} seed {seed}: a wrong value");
                        hits += 1;
                    }
                    Read::Miss => {}
                    Read::Corrupt => panic!("{variant:?} seed {seed}: corrupt"),
                }
            }
            if !ws.contains(&Write::Evicted) {
                // No eviction: every key must be there.
                assert_eq!(hits, keys.len(), "{variant:?} seed {seed}: {ws:?}");
            }
            // An eviction replaces one key by another: as many keys are
            // there as were reported inserted.
            lost += inserted.abs_diff(hits);
        }
        assert_eq!(
            lost, 0,
            "{variant:?}: {lost} keys reported inserted were lost"
        );
    }
}

/// Keys 0..n and their values (writer 1, sequence `seq`).
fn items(n: u64, seq: u64) -> (Vec<Vec<u8>>, Vec<Vec<u8>>) {
    let keys: Vec<Vec<u8>> = (0..n).map(key).collect();
    let vals = keys.iter().map(|k| value(k, 1, seq, 24)).collect();
    (keys, vals)
}

fn pairs<'a>(keys: &'a [Vec<u8>], vals: &'a [Vec<u8>]) -> Vec<(&'a [u8], &'a [u8])> {
    keys.iter()
        .zip(vals)
        .map(|(k, v)| (&k[..], &v[..]))
        .collect()
}

#[test]
fn batches_on_several_lanes_overtake_each_other_and_every_variant_still_agrees() {
    for variant in VARIANTS {
        let mut cfg = small(variant, 2048);
        cfg.checksum_retries = 20;
        let mut ts = tables(3, cfg, |r| {
            Faults::seeded(common::test_seed(7) ^ r as u64)
                .lanes(4)
                .reorder()
                .split_reads(0.5)
                .delay_writes(Delay::UntilNextBatch, 0.5)
        });
        ts[1].0.set_lane_keys(8);
        let d = &ts[1].0;
        assert_eq!(d.depth(), 4, "{variant:?}");
        let (keys, first) = items(200, 1);
        let w = d.write_many(&pairs(&keys, &first)).unwrap();
        assert!(
            w.iter().all(|w| *w == Write::Inserted),
            "{variant:?}: {w:?}"
        );
        // Every other key again, with another value.
        let (_, second) = items(200, 2);
        let now: Vec<Vec<u8>> = (0..200)
            .map(|i| [&first[i], &second[i]][i % 2].clone())
            .collect();
        let odd: Vec<(&[u8], &[u8])> = pairs(&keys, &second)
            .into_iter()
            .skip(1)
            .step_by(2)
            .collect();
        let w = d.write_many(&odd).unwrap();
        assert!(w.iter().all(|w| *w == Write::Updated), "{variant:?}: {w:?}");
        let refs: Vec<&[u8]> = keys.iter().map(|k| &k[..]).collect();
        let got = d.read_many(&refs).unwrap();
        for (i, r) in got.iter().enumerate() {
            assert_eq!(r, &Read::Hit(now[i].clone()), "{variant:?} key {i}");
        }
        let inj = d.transport().injected();
        if variant == Variant::Coarse {
            // One lane: its parts would contend for the one region lock.
            assert_eq!(inj.overtaking_batches, 0, "{variant:?}: {inj:?}");
        } else {
            assert!(
                inj.overtaking_batches > 0,
                "{variant:?}: no batch overtook another: {inj:?}"
            );
        }
    }
}

#[test]
fn a_failed_op_on_one_lane_fails_the_call_and_every_lane_gives_back_what_it_holds() {
    for variant in VARIANTS {
        let cfg = small(variant, 256);
        let (keys, vals) = items(40, 1);
        // How many ops a write of the 40 keys issues when nothing fails.
        let count = {
            let mut ts = tables(2, cfg, |_| Faults::seeded(3).lanes(4));
            ts[0].0.set_lane_keys(8);
            ts[0].0.transport().reset_count();
            ts[0].0.write_many(&pairs(&keys, &vals)).unwrap();
            ts[0].0.transport().ops_seen()
        };
        for n in [1, count / 3, count / 2, count] {
            // The same seed as the count: the same run up to op n.
            let mut ts = tables(2, cfg, |_| Faults::seeded(3).lanes(4));
            ts[0].0.set_lane_keys(8);
            let (d0, d1) = (&ts[0].0, &ts[1].0);
            d0.transport().reset_count();
            d0.transport().set_fail_op(Some(n));
            let r = d0.write_many(&pairs(&keys, &vals));
            let ctx = format!("{variant:?}: op {n} of {count} failed");
            assert!(matches!(r, Err(Error::Transport(_))), "{ctx}: got {r:?}");
            for rank in 0..2 {
                assert_eq!(
                    holds(d1.transport(), &cfg, rank),
                    Vec::<u64>::new(),
                    "{ctx}"
                );
            }
            // The retry stores every key.
            d0.write_many(&pairs(&keys, &vals)).unwrap();
            let refs: Vec<&[u8]> = keys.iter().map(|k| &k[..]).collect();
            let got = d1.read_many(&refs).unwrap();
            for (i, r) in got.iter().enumerate() {
                assert_eq!(r, &Read::Hit(vals[i].clone()), "{ctx}: key {i}");
            }
        }
    }
}

#[test]
fn depth_is_capped_by_the_transport_and_coarse_and_small_batches_use_one_lane() {
    let cfg = small(Variant::Lockfree, 64);
    // A transport of depth 1: more parts would only run one after another.
    let mut one = tables_with(1, cfg, |_, t| t).pop().unwrap();
    one.set_depth(4).unwrap();
    assert_eq!(one.depth(), 1);
    assert!(one.set_depth(0).is_err() && one.set_depth(9).is_err());
    let four = tables_with(1, cfg, |_, t| t.with_depth(4)).pop().unwrap();
    assert_eq!(four.depth(), 4);
    // One lane per 32 keys (fabkit_dht::LANE_KEYS), at most the depth.
    let used: Vec<usize> = [0, 31, 32, 64, 100, 10_000]
        .iter()
        .map(|&n| four.lanes_for(n))
        .collect();
    assert_eq!(used, [1, 1, 1, 2, 3, 4]);
    let coarse = tables_with(1, small(Variant::Coarse, 64), |_, t| t.with_depth(4))
        .pop()
        .unwrap();
    assert_eq!(
        coarse.lanes_for(10_000),
        1,
        "parts would contend for one lock"
    );
}
