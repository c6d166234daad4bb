//! Writers racing on one key: concurrent updates end in one whole written
//! value, racing inserters insert once (also past a claimer stalled for
//! longer than the deadline), and a stale claim is taken over. And the
//! ordering of data before its release, under writes whose visibility the
//! fault-injecting transport delays past their completion. The faults are
//! seeded (`FABKIT_TEST_SEED`); the threads' interleaving is not, and no
//! seed replays it: a failure names what it saw.

mod common;

use std::sync::mpsc;
use std::sync::{Arc, Barrier};
use std::time::Duration;

use common::{
    copies, key, local_tables, one_hot_key, racing_faults, small, tables_with, value, VARIANTS,
};
use fabkit_dht::clock::TestClock;
use fabkit_dht::layout::is_full;
use fabkit_dht::placement::{default_candidates, hash_key, Placement};
use fabkit_dht::transport::faulty::{Delay, Faults, FaultyTransport};
use fabkit_dht::transport::hooked::HookedTransport;
use fabkit_dht::transport::{Op, Remote, Transport};
use fabkit_dht::{Config, FindOrPut, Read, Variant, Write};

#[test]
fn concurrent_updates_of_one_key_end_in_one_whole_value_on_the_local_transport() {
    for variant in VARIANTS {
        let cfg = small(variant, 64);
        one_hot_key(&local_tables(4, cfg), &cfg, 1000, "local");
    }
}

#[test]
fn concurrent_updates_of_one_key_end_in_one_whole_value_under_faults() {
    for variant in VARIANTS {
        let mut cfg = small(variant, 64);
        cfg.checksum_retries = 20;
        let tables = racing_faults(4, cfg, common::test_seed(0x5eed));
        one_hot_key(&tables, &cfg, 150, "racing faults");
    }
}

/// A key whose home is rank 1 of 2.
fn remote_key(cfg: &Config) -> Vec<u8> {
    let p = Placement::new(2, cfg.buckets, default_candidates(cfg.buckets));
    (0..)
        .map(key)
        .find(|k| p.rank_of(hash_key(k)) == 1)
        .unwrap()
}

#[test]
fn a_key_is_inserted_once_even_past_a_claimer_stalled_beyond_the_deadline() {
    let cfg = small(Variant::Chunked, 64);
    let k = remote_key(&cfg);
    let tables = tables_with(2, cfg, |_, t| HookedTransport::new(t));
    let (a, mut b) = {
        let mut it = tables.into_iter();
        (it.next().unwrap(), it.next().unwrap())
    };
    let clock = Arc::new(TestClock::new());
    b.set_clock(clock.clone());
    b.set_deadline(Duration::from_secs(5)).unwrap();
    let (va, vb) = (value(&k, 0, 1, 24), value(&k, 1, 1, 24));
    std::thread::scope(|s| {
        let (stalled_tx, stalled_rx) = mpsc::sync_channel(1);
        let (resume_tx, resume_rx) = mpsc::channel::<()>();
        // Rank 0's claimer stops before its third batch: after reading the
        // chunks and claiming the empty bucket, before its write.
        let mut batches = 0;
        a.transport().before(Some(Box::new(move |_| {
            batches += 1;
            if batches == 3 {
                stalled_tx.send(()).unwrap();
                resume_rx
                    .recv_timeout(Duration::from_secs(60))
                    .expect("the test resumes a stalled transport");
            }
        })));
        let claimer = s.spawn(|| a.find_or_put_many(&[(&k, &va)]).unwrap()[0].clone());
        stalled_rx
            .recv_timeout(Duration::from_secs(60))
            .expect("the claimer reaches its stall");
        // The other inserter waits on the claim a whole deadline of its
        // test clock, takes it over and inserts.
        let got = b.find_or_put_many(&[(&k, &vb)]).unwrap()[0].clone();
        assert_eq!(got, FindOrPut::Inserted);
        assert!(
            clock.elapsed() >= Duration::from_secs(5),
            "took over before a deadline"
        );
        assert!(
            clock.elapsed() < Duration::from_secs(6),
            "{:?}",
            clock.elapsed()
        );
        // The stalled claimer wakes: its write lands, its publish finds the
        // claim taken over, and it starts again and finds the key.
        resume_tx.send(()).unwrap();
        let late = claimer.join().unwrap();
        assert!(
            matches!(&late, FindOrPut::Found(v) if v == &va || v == &vb),
            "the late claimer must find the key, not insert it again: {late:?}"
        );
    });
    assert_eq!(copies(b.transport(), &cfg, &k), 1, "inserted once");
    match b.read(&k).unwrap() {
        Read::Hit(v) => assert!(v == va || v == vb),
        other => panic!("{other:?}"),
    }
}

#[test]
fn racing_inserters_of_one_key_insert_it_exactly_once() {
    let cfg = small(Variant::Chunked, 64);
    let tables = local_tables(4, cfg);
    let go = Barrier::new(tables.len());
    for round in 0..200u64 {
        let k = key(1_000_000 + round);
        let got: Vec<FindOrPut> = std::thread::scope(|s| {
            let hs: Vec<_> = tables
                .iter()
                .enumerate()
                .map(|(r, d)| {
                    let (k, go) = (&k, &go);
                    s.spawn(move || {
                        go.wait();
                        let v = value(k, r as u64, round, 24);
                        d.find_or_put_many(&[(k, &v)]).unwrap()[0].clone()
                    })
                })
                .collect();
            hs.into_iter().map(|h| h.join().unwrap()).collect()
        });
        let inserted = got.iter().filter(|g| **g == FindOrPut::Inserted).count();
        assert_eq!(inserted, 1, "round {round}: {got:?}");
        let Read::Hit(v) = tables[0].read(&k).unwrap() else {
            panic!("round {round}: the key is not there");
        };
        for g in &got {
            if let FindOrPut::Found(f) = g {
                assert_eq!(
                    f, &v,
                    "round {round}: found a value other than the one inserted"
                );
            }
        }
        assert_eq!(copies(tables[0].transport(), &cfg, &k), 1, "round {round}");
    }
}

#[test]
fn find_or_put_finds_inserts_and_reports_full() {
    let mut cfg = small(Variant::Chunked, 4);
    cfg.chunk = 2;
    cfg.candidates = 2;
    let tables = local_tables(1, cfg);
    let d = &tables[0];
    let (k, v) = (key(1), value(&key(1), 0, 1, 24));
    assert_eq!(
        d.find_or_put_many(&[(&k, &v)]).unwrap()[0],
        FindOrPut::Inserted
    );
    let other = value(&k, 0, 2, 24);
    assert_eq!(
        d.find_or_put_many(&[(&k, &other)]).unwrap()[0],
        FindOrPut::Found(v.clone()),
        "found keeps the first value"
    );
    assert_eq!(d.read(&k).unwrap(), Read::Hit(v));
    // Fill the region: a key whose both chunks are full is refused.
    let mut full = None;
    for i in 2..200u64 {
        let k = key(i);
        let got = d.find_or_put_many(&[(&k, &value(&k, 0, i, 24))]).unwrap()[0].clone();
        if got == FindOrPut::Full {
            full = Some(k);
            break;
        }
    }
    let k = full.expect("4 buckets fill up");
    assert_eq!(
        d.read(&k).unwrap(),
        Read::Miss,
        "a full answer stores nothing"
    );
}

#[test]
fn find_or_put_does_not_return_a_torn_record_as_found() {
    let cfg = small(Variant::Chunked, 64);
    let tables = local_tables(1, cfg);
    let d = &tables[0];
    let (k, v) = (key(7), value(&key(7), 0, 1, 24));
    d.write(&k, &v).unwrap();
    // Damage the value's last byte: the key reads whole, the checksum fails.
    let l = cfg.layout();
    let p = Placement::new(1, cfg.buckets, default_candidates(cfg.buckets));
    let at = Remote::new(
        0,
        l.offset(p.candidate(hash_key(&k), 0)) + l.bucket_len as u64 - 8,
    );
    let mut word = [0u8; 8];
    d.transport()
        .execute(&mut [Op::Read {
            from: at,
            into: &mut word,
        }])
        .unwrap();
    word[0] ^= 0xff;
    // The CRC sits after the value: flip a byte of it or of the value's end.
    d.transport()
        .execute(&mut [Op::Write {
            to: at,
            from: &word,
            completion: fabkit_core::Completion::Delivery,
        }])
        .unwrap();
    assert_eq!(d.read(&k).unwrap(), Read::Corrupt);
    let v2 = value(&k, 0, 2, 24);
    let got = d.find_or_put_many(&[(&k, &v2)]).unwrap()[0].clone();
    assert_eq!(
        got,
        FindOrPut::Inserted,
        "a damaged record is replaced, not found"
    );
    assert_eq!(d.read(&k).unwrap(), Read::Hit(v2));
    assert_eq!(copies(d.transport(), &cfg, &k), 1);
}

#[test]
fn a_claim_a_deadline_old_is_taken_over_and_readers_never_wait_on_it() {
    let cfg = small(Variant::Chunked, 64);
    let k = remote_key(&cfg);
    let tables = local_tables(2, cfg);
    let mut d = tables.into_iter().next().unwrap();
    let clock = Arc::new(TestClock::new());
    d.set_clock(clock.clone());
    d.set_deadline(Duration::from_secs(5)).unwrap();
    let l = cfg.layout();
    let p = Placement::new(2, cfg.buckets, default_candidates(cfg.buckets));
    let first = Remote::new(1, l.offset(p.candidate(hash_key(&k), 0)));
    // A claim of rank 7 (tag (7 + 1) << 16) over the empty first bucket:
    // a first fill whose writer died.
    let dead = (8u64 << 16) << 8 | 1;
    let swap = |at: Remote, new: u64| {
        let mut old = 0;
        d.transport()
            .execute(&mut [Op::Swap {
                at,
                new,
                old: &mut old,
            }])
            .unwrap();
        old
    };
    swap(first, dead);
    assert_eq!(
        d.read(&k).unwrap(),
        Read::Miss,
        "a first fill is not there yet"
    );
    assert_eq!(
        clock.elapsed(),
        Duration::ZERO,
        "readers do not wait on claims"
    );
    let v = value(&k, 0, 1, 24);
    assert_eq!(d.write(&k, &v).unwrap(), Write::Inserted);
    let waited = clock.elapsed();
    assert!(
        waited >= Duration::from_secs(5) && waited < Duration::from_secs(6),
        "taken over after {waited:?} of test time, not after the 5 s deadline"
    );
    assert_eq!(d.read(&k).unwrap(), Read::Hit(v.clone()));
    // The same writer dies again, now updating the key (a claim over full,
    // version 1): readers still read the whole record under it, and a
    // writer takes it over a deadline later and updates in place.
    let full_word = swap(first, 0);
    assert!(is_full(full_word), "{full_word:#x}");
    swap(first, (full_word >> 8) << 48 | (8u64 << 16) << 8 | 2 | 1);
    let before = clock.elapsed();
    assert_eq!(d.read(&k).unwrap(), Read::Hit(v));
    assert_eq!(clock.elapsed(), before);
    let v2 = value(&k, 0, 2, 24);
    assert_eq!(d.write(&k, &v2).unwrap(), Write::Updated);
    assert!(clock.elapsed() - before >= Duration::from_secs(5));
    assert_eq!(d.read(&k).unwrap(), Read::Hit(v2));
    assert_eq!(copies(d.transport(), &cfg, &k), 1);
    let word = swap(first, 0);
    assert!(
        is_full(word) && word != full_word,
        "published anew: {word:#x}"
    );
}

/// A reader of another rank sees a write's value as soon as the write is
/// released (its lock given back, its claim published) and, lock-free, as
/// soon as the write returns. The writer's transport makes writes visible
/// only after its next batch, as a transmit-complete write may be; a write
/// that asks for delivery completion is exempt, unless the transport is
/// told to ignore that (a provider without delivery completion or fence).
#[test]
fn a_released_write_is_visible_to_the_next_reader() {
    for variant in VARIANTS {
        for honoured in [true, false] {
            let cfg = small(variant, 64);
            let k = remote_key(&cfg);
            let tables = tables_with(2, cfg, |r, t| {
                let f = if r == 0 {
                    let f = Faults::seeded(1).delay_writes(Delay::PastNextBatch, 1.0);
                    if honoured {
                        f
                    } else {
                        f.ignore_delivery()
                    }
                } else {
                    Faults::default()
                };
                FaultyTransport::new(HookedTransport::new(t), f)
            });
            let (w, r) = (&tables[0], &tables[1]);
            // What rank 1 reads after each release of rank 0's.
            let seen = Arc::new(std::sync::Mutex::new(Vec::new()));
            std::thread::scope(|s| {
                // The reader runs on its own thread, woken by the hook.
                let (ask, asked) = mpsc::channel::<()>();
                let (tell, told) = mpsc::channel::<Read>();
                let k = &k;
                let reader = s.spawn(move || {
                    // Ends when the hook goes, or if the writer failed and
                    // never asks again (no hang on a failing test).
                    while asked.recv_timeout(Duration::from_secs(60)).is_ok() {
                        tell.send(r.read(k).unwrap()).unwrap();
                    }
                });
                // A lock word given back has no tag (its low 36 bits); a
                // published chunked state is full. The hook runs after the
                // writer's batch lands, before writes delayed past it do.
                let releases: fn(u64) -> bool = if variant == Variant::Chunked {
                    is_full
                } else {
                    |w| w & ((1 << 36) - 1) == 0
                };
                let seen2 = seen.clone();
                w.transport().inner().after(Some(Box::new(move |ops| {
                    let release = ops
                        .iter()
                        .any(|o| matches!(o, Op::CompareAndSwap { new, .. } if releases(*new)));
                    if release {
                        ask.send(()).unwrap();
                        let got = told
                            .recv_timeout(Duration::from_secs(30))
                            .expect("the reader answers");
                        seen2.lock().unwrap().push(got);
                    }
                })));
                let mut stale = 0;
                for seq in 0..20u64 {
                    let v = value(k, 0, seq, 24);
                    seen.lock().unwrap().clear();
                    w.write(k, &v).unwrap();
                    let at_release = seen.lock().unwrap().last().cloned();
                    if at_release
                        .as_ref()
                        .is_some_and(|g| *g != Read::Hit(v.clone()))
                    {
                        stale += 1;
                    }
                    // Lockfree releases nothing: the write's return is
                    // what must make it visible.
                    if variant == Variant::Lockfree {
                        if r.read(k).unwrap() != Read::Hit(v) {
                            stale += 1;
                        }
                    } else {
                        assert!(at_release.is_some(), "{variant:?}: no release seen");
                    }
                }
                w.transport().inner().after(None);
                drop(reader);
                let delayed = w.transport().injected().delayed_writes;
                if honoured {
                    assert_eq!(stale, 0, "{variant:?}: a released write was not visible");
                    assert_eq!(delayed, 0, "{variant:?}: a delivery write was delayed");
                } else {
                    // The guard: without ordering the same reader sees
                    // stale data, so the check above can fail.
                    assert!(delayed > 0, "{variant:?}");
                    assert!(stale > 0, "{variant:?}: ignoring delivery went unnoticed");
                }
            });
        }
    }
}
