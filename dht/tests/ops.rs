//! The exact remote operations each variant issues, through the recording
//! transport.

mod common;

use std::time::Duration;

use common::{key, small, value};
use fabkit_core::bootstrap::ThreadGroup;
use fabkit_core::Bootstrap;
use fabkit_dht::transport::faulty::{Faults, FaultyTransport};
use fabkit_dht::transport::local::LocalTransport;
use fabkit_dht::transport::recording::{Event, RecordingTransport};
use fabkit_dht::transport::OpKind::*;
use fabkit_dht::{Dht, Read, Variant, Write};

fn table(variant: Variant) -> Dht<RecordingTransport<LocalTransport>> {
    let cfg = small(variant, 256);
    let t = RecordingTransport::new(LocalTransport::group(1, cfg.region_len()).pop().unwrap());
    let boot = ThreadGroup::members(1, Duration::from_secs(5))
        .pop()
        .unwrap();
    Dht::create(t, cfg, &boot).unwrap()
}

#[test]
fn lockfree_read_hit_on_the_first_candidate_is_one_read() {
    let d = table(Variant::Lockfree);
    assert_eq!(
        d.write(&key(1), &value(&key(1), 0, 0, 24)).unwrap(),
        Write::Inserted
    );
    // Into an empty table: read the first candidate, then write it.
    assert_eq!(d.transport().kinds(), vec![vec![Read], vec![Write]]);
    d.transport().clear();
    assert!(matches!(d.read(&key(1)).unwrap(), fabkit_dht::Read::Hit(_)));
    assert_eq!(d.transport().kinds(), vec![vec![Read]]);
    let b = &d.transport().batches()[0][0];
    assert_eq!(
        b.len,
        (1 + 16 + 24 + 4_usize).next_multiple_of(8),
        "the whole bucket: meta, key, value, crc, padded to a whole word"
    );
    d.transport().clear();
    // A miss in an almost empty table stops at the first empty candidate.
    assert_eq!(d.read(&key(2)).unwrap(), fabkit_dht::Read::Miss);
    assert_eq!(d.transport().kinds(), vec![vec![Read]]);
    assert_eq!(d.stats().remote_ops, 4);
    assert!((d.stats().ops_per_op() - 4.0 / 3.0).abs() < 1e-9);
}

#[test]
fn fine_locks_each_bucket_around_the_access() {
    let d = table(Variant::Fine);
    d.write(&key(1), &value(&key(1), 0, 0, 24)).unwrap();
    assert_eq!(
        d.transport().kinds(),
        vec![
            vec![CompareAndSwap],
            vec![Read],
            vec![Write],
            vec![CompareAndSwap]
        ],
        "lock, read, write, unlock (a compare-and-swap from the writer's tagged value)"
    );
    d.transport().clear();
    assert!(matches!(d.read(&key(1)).unwrap(), Read::Hit(_)));
    assert_eq!(
        d.transport().kinds(),
        vec![vec![Fetch, Read, Fetch]],
        "a reader takes nothing: the word before and after the data, in one batch on a \
         transport that keeps its order"
    );
    // Lock and data are the same bucket; the lock word is its first 8 bytes.
    let b = d.transport().batches();
    assert_eq!(b[0][0].at.offset + 8, b[0][1].at.offset);
    assert_eq!(b[0][0].at, b[0][2].at);
    // Where a batch's ops are unordered (the faulty transport, even with
    // no fault), each step waits for the one before.
    let cfg = small(Variant::Fine, 256);
    let t = FaultyTransport::new(
        LocalTransport::group(1, cfg.region_len()).pop().unwrap(),
        Faults::default(),
    );
    let boot = ThreadGroup::members(1, Duration::from_secs(5))
        .pop()
        .unwrap();
    let d = Dht::create(RecordingTransport::new(t), cfg, &boot).unwrap();
    d.write(&key(1), &value(&key(1), 0, 0, 24)).unwrap();
    d.transport().clear();
    assert!(matches!(d.read(&key(1)).unwrap(), Read::Hit(_)));
    assert_eq!(
        d.transport().kinds(),
        vec![vec![Fetch], vec![Read], vec![Fetch]]
    );
}

#[test]
fn coarse_locks_the_region_once_per_batch() {
    let d = table(Variant::Coarse);
    d.write(&key(1), &value(&key(1), 0, 0, 24)).unwrap();
    let k = d.transport().kinds();
    assert_eq!(
        k,
        vec![
            vec![CompareAndSwap],
            vec![Read],
            vec![Write],
            vec![CompareAndSwap]
        ]
    );
    assert_eq!(
        d.transport().batches()[0][0].at.offset,
        0,
        "the region's lock word"
    );
    d.transport().clear();
    let keys: Vec<Vec<u8>> = (10..20).map(key).collect();
    let vals: Vec<Vec<u8>> = keys.iter().map(|k| value(k, 0, 1, 24)).collect();
    let items: Vec<(&[u8], &[u8])> = keys
        .iter()
        .zip(&vals)
        .map(|(k, v)| (&k[..], &v[..]))
        .collect();
    d.write_many(&items).unwrap();
    let k = d.transport().kinds();
    // One rank: one lock, ten reads in one batch, ten writes, one unlock.
    // The lock's first guess of its free value (version 0) is stale after
    // the write above, so the failed compare-and-swap returns the real one
    // and the second takes the lock.
    assert_eq!(
        k,
        vec![
            vec![CompareAndSwap],
            vec![CompareAndSwap],
            vec![Read; 10],
            vec![Write; 10],
            vec![CompareAndSwap]
        ]
    );
}

#[test]
fn coarse_on_a_transport_with_its_own_region_lock_takes_it_through_the_recorder() {
    // The local transport's region lock stands in for MPI_Win_lock. The
    // recorder must pass it through: else coarse falls back to the lock
    // word, with atomics the real transport would never see.
    let cfg = small(Variant::Coarse, 256);
    let t = LocalTransport::group(1, cfg.region_len())
        .pop()
        .unwrap()
        .with_region_lock();
    let boot = ThreadGroup::members(1, Duration::from_secs(5))
        .pop()
        .unwrap();
    let d = Dht::create(RecordingTransport::new(t), cfg, &boot).unwrap();
    d.write(&key(1), &value(&key(1), 0, 0, 24)).unwrap();
    assert_eq!(
        d.transport().kinds(),
        vec![vec![Read], vec![Write]],
        "under the region lock: no lock word"
    );
    let b = d.transport().batches();
    let lock = |exclusive| Event::LockRegion {
        rank: 0,
        exclusive,
        taken: true,
    };
    assert_eq!(
        d.transport().events(),
        vec![
            lock(true),
            Event::Batch(b[0].clone()),
            Event::Batch(b[1].clone()),
            Event::UnlockRegion { rank: 0 }
        ],
        "a writer locks the region exclusively around its batches"
    );
    d.transport().clear();
    assert!(matches!(d.read(&key(1)).unwrap(), Read::Hit(_)));
    assert_eq!(d.transport().kinds(), vec![vec![Read]]);
    let b = d.transport().batches();
    assert_eq!(
        d.transport().events(),
        vec![
            lock(false),
            Event::Batch(b[0].clone()),
            Event::UnlockRegion { rank: 0 }
        ],
        "a reader shares it"
    );
}

#[test]
fn chunked_fetches_two_chunks_per_round_and_claims_with_one_cas() {
    let d = table(Variant::Chunked);
    d.write(&key(1), &value(&key(1), 0, 0, 24)).unwrap();
    assert_eq!(
        d.transport().kinds(),
        vec![
            vec![Read, Read],
            vec![CompareAndSwap],
            vec![Write],
            vec![CompareAndSwap]
        ],
        "current and next chunk, claim, fill, publish (from the claim, by compare-and-swap)"
    );
    let b = d.transport().batches();
    assert_eq!(
        b[0][0].len,
        8 * d.config().layout().bucket_len,
        "a whole chunk"
    );
    d.transport().clear();
    assert!(matches!(d.read(&key(1)).unwrap(), Read::Hit(_)));
    assert_eq!(d.transport().kinds(), vec![vec![Read, Read]]);
    // An update claims the full bucket before it writes: no plain write
    // ever lands on a published record.
    d.transport().clear();
    assert_eq!(
        d.write(&key(1), &value(&key(1), 0, 1, 24)).unwrap(),
        Write::Updated
    );
    assert_eq!(
        d.transport().kinds(),
        vec![
            vec![Read, Read],
            vec![CompareAndSwap],
            vec![Write],
            vec![CompareAndSwap]
        ],
        "chunks, claim of the full bucket, write, publish"
    );
}

#[test]
fn a_chunk_past_the_last_bucket_wraps_to_the_first() {
    let d = table(Variant::Chunked);
    let cfg = *d.config();
    let bl = cfg.layout().bucket_len as u64;
    let p = fabkit_dht::placement::Placement::new(1, cfg.buckets, 8);
    // A key whose first chunk starts 3 buckets before the end.
    let k = (0..)
        .map(key)
        .find(|k| p.candidate(fabkit_dht::placement::hash_key(k), 0) == cfg.buckets - 3)
        .unwrap();
    d.write(&k, &value(&k, 0, 0, 24)).unwrap();
    let first = &d.transport().batches()[0];
    let at = |i: usize| (first[i].at.offset / bl, first[i].len as u64 / bl);
    assert_eq!(at(0), (cfg.buckets - 3, 3), "the chunk's first 3 buckets");
    assert_eq!(at(1), (0, 5), "and its other 5, from bucket 0");
    // The next chunk, from the key's second candidate (wrapping too if it
    // starts in the last 7 buckets).
    let s1 = p.candidate(fabkit_dht::placement::hash_key(&k), 1);
    assert_eq!(at(2).0, s1, "{first:?}");
    let rest: u64 = (2..first.len()).map(|i| at(i).1).sum();
    assert_eq!(rest, 8, "{first:?}");
    assert_eq!(first.len(), if s1 + 8 <= cfg.buckets { 3 } else { 4 });
    // It was inserted at the chunk's first (empty) bucket and reads back.
    assert_eq!(d.read(&k).unwrap(), Read::Hit(value(&k, 0, 0, 24)));
}

#[test]
fn chunk_starts_are_uniform_over_every_bucket() {
    // The published start, c0 mod (B - C + 1), gives the first start twice
    // the weight of the others and never starts a chunk in the last C - 1
    // buckets; a start drawn over all B buckets, the chunk wrapping, is
    // uniform. Counted from the first read of each key's first round.
    let d = table(Variant::Chunked);
    let cfg = *d.config();
    let bl = cfg.layout().bucket_len as u64;
    let mut counts = vec![0u64; cfg.buckets as usize];
    let n = 25_600u64;
    for i in 0..n {
        d.transport().clear();
        let _ = d.read(&key(i)).unwrap();
        counts[(d.transport().batches()[0][0].at.offset / bl) as usize] += 1;
    }
    let e = n as f64 / cfg.buckets as f64;
    let chi2: f64 = counts.iter().map(|&c| (c as f64 - e).powi(2) / e).sum();
    let df = (cfg.buckets - 1) as f64;
    assert!(
        chi2 < df + 7.0 * (2.0 * df).sqrt(),
        "chi2 {chi2:.0}, df {df}"
    );
    assert!(counts.iter().all(|&c| c > 0), "a bucket no chunk starts at");
}

#[test]
fn batches_overlap_many_keys_in_one_round() {
    let d = table(Variant::Lockfree);
    let keys: Vec<Vec<u8>> = (0..32).map(key).collect();
    let vals: Vec<Vec<u8>> = keys.iter().map(|k| value(k, 0, 0, 24)).collect();
    let items: Vec<(&[u8], &[u8])> = keys
        .iter()
        .zip(&vals)
        .map(|(k, v)| (&k[..], &v[..]))
        .collect();
    d.write_many(&items).unwrap();
    let refs: Vec<&[u8]> = keys.iter().map(|k| &k[..]).collect();
    d.transport().clear();
    let got = d.read_many(&refs).unwrap();
    assert!(got.iter().all(|r| matches!(r, Read::Hit(_))));
    // 32 keys in a 256-bucket table: nearly all resolve in the first round.
    let batches = d.transport().batches();
    assert!(batches.len() <= 3, "{} batches for 32 keys", batches.len());
    assert_eq!(batches[0].len(), 32);
}

/// Over ofi_rxm (verbs included) atomics are emulated by the target's CPU
/// while RMA writes go through the NIC, and the two are not atomic with
/// respect to each other: no variant may write a word it also updates
/// atomically. Every write of a mixed workload (inserts past full, updates,
/// reads, find-or-put for chunked) is checked against every word an atomic touched.
#[test]
fn no_variant_writes_a_word_it_updates_atomically() {
    use std::collections::BTreeSet;
    for variant in common::VARIANTS {
        let d = table(variant);
        let keys: Vec<Vec<u8>> = (0..400).map(key).collect();
        for round in 0..2 {
            for k in &keys {
                d.write(k, &value(k, 0, round, 24)).unwrap();
            }
        }
        for k in &keys {
            d.read(k).unwrap();
        }
        let items: Vec<(Vec<u8>, Vec<u8>)> = (400..500)
            .map(|i| (key(i), value(&key(i), 1, 0, 24)))
            .collect();
        let refs: Vec<(&[u8], &[u8])> = items.iter().map(|(k, v)| (&k[..], &v[..])).collect();
        if variant == Variant::Chunked {
            d.find_or_put_many(&refs).unwrap();
        } else {
            d.write_many(&refs).unwrap();
        }
        let ops: Vec<_> = d.transport().batches().into_iter().flatten().collect();
        let atomic_words: BTreeSet<(usize, u64)> = ops
            .iter()
            .filter(|o| o.kind.is_atomic())
            .map(|o| {
                assert_eq!(o.at.offset % 8, 0, "{variant:?}: unaligned atomic {o:?}");
                (o.at.rank, o.at.offset)
            })
            .collect();
        if variant != Variant::Lockfree {
            assert!(!atomic_words.is_empty(), "{variant:?} issued no atomics");
        }
        for w in ops.iter().filter(|o| o.kind == Write) {
            let end = w.at.offset + w.len as u64;
            let hit = atomic_words
                .range((w.at.rank, w.at.offset.saturating_sub(7))..(w.at.rank, end))
                .next();
            assert!(
                hit.is_none(),
                "{variant:?}: write {w:?} overlaps the atomic word {hit:?}"
            );
        }
    }
}

/// Readers of the locking variants take nothing: they fetch the lock word
/// before and after the data and modify no word, so no stream of readers
/// can hold a writer off, and a reader that fails leaves nothing held.
#[test]
fn locking_readers_modify_nothing() {
    for variant in [Variant::Fine, Variant::Coarse] {
        let d = table(variant);
        let keys: Vec<Vec<u8>> = (0..50).map(key).collect();
        for k in &keys {
            d.write(k, &value(k, 0, 0, 24)).unwrap();
        }
        d.transport().clear();
        for k in keys.iter().chain(&[key(999)]) {
            d.read(k).unwrap();
        }
        let kinds: Vec<_> = d.transport().kinds().into_iter().flatten().collect();
        assert!(
            kinds.contains(&Fetch) && kinds.contains(&Read),
            "{variant:?}: {kinds:?}"
        );
        assert!(
            kinds.iter().all(|k| matches!(k, Fetch | Read)),
            "{variant:?}: a reader modified something: {kinds:?}"
        );
    }
}

#[test]
fn a_deadline_out_of_range_is_refused_by_name() {
    use std::time::Duration;
    let mut d = table(Variant::Fine);
    for bad in [
        Duration::ZERO,
        Duration::from_nanos(999),
        fabkit_dht::MAX_DEADLINE + Duration::from_nanos(1),
        Duration::MAX,
    ] {
        let e = d.set_deadline(bad).unwrap_err().to_string();
        assert!(
            e.contains("out of range") && e.contains("1 us"),
            "{bad:?}: {e}"
        );
    }
    for good in [Duration::from_micros(1), fabkit_dht::MAX_DEADLINE] {
        d.set_deadline(good).unwrap();
        assert_eq!(d.deadline(), good);
    }
    // The shortest deadline still lets an uncontended operation finish:
    // only a failed attempt (a lock held, a wrong guess) meets it.
    d.set_deadline(Duration::from_micros(1)).unwrap();
    d.write(&key(1), &value(&key(1), 0, 0, 24)).unwrap();
}

/// The caller's key hash places every key (the MPI-DHT's `hash_func`): with
/// one that sends every key to the same candidates, 100 distinct keys do
/// not fit (8 candidates, and chunked's 8 chunks of 8) and evict, where
/// fabkit's hash spreads them over 256 buckets; and a dump restored into a table with that hash finds what
/// it kept where the hash says.
#[test]
fn a_callers_key_hash_places_every_key_restores_included() {
    for variant in [
        Variant::Lockfree,
        Variant::Fine,
        Variant::Coarse,
        Variant::Chunked,
    ] {
        let cfg = small(variant, 256);
        let boot = || {
            ThreadGroup::members(1, Duration::from_secs(5))
                .pop()
                .unwrap()
        };
        let one = || LocalTransport::group(1, cfg.region_len()).pop().unwrap();
        let same = || fabkit_dht::KeyHash::custom(|_: &[u8]| 7);
        let d = Dht::create_with_hash(one(), cfg, &boot(), same()).unwrap();
        let plain = Dht::create(one(), cfg, &boot()).unwrap();
        let (mut evicted, mut plain_evicted) = (0, 0);
        for i in 0..100u64 {
            let v = value(&key(i), 0, 0, 24);
            evicted += u32::from(d.write(&key(i), &v).unwrap() == Write::Evicted);
            plain_evicted += u32::from(plain.write(&key(i), &v).unwrap() == Write::Evicted);
        }
        assert!(
            evicted > 0,
            "{variant:?}: one place for 100 keys, yet no eviction"
        );
        assert_eq!(plain_evicted, 0, "{variant:?}");
        // The last key written is where the hash sends it.
        let last = d.read(&key(99)).unwrap();
        assert!(matches!(last, Read::Hit(_)), "{variant:?}: {last:?}");
        let dir = tempfile::tempdir().unwrap();
        let prefix = dir.path().join("hashed");
        let kept = d.dump(&prefix, &boot()).unwrap().records;
        let back = Dht::create_with_hash(one(), cfg, &boot(), same()).unwrap();
        let r = back.restore(&prefix, 1, &boot(), 16).unwrap();
        assert_eq!(r.restored + r.dropped, kept, "{variant:?}");
        assert!(
            matches!(back.read(&key(99)).unwrap(), Read::Hit(_)),
            "{variant:?}"
        );
        // Ranks must agree on having a hash of their own.
        let boots = ThreadGroup::members(2, Duration::from_secs(5));
        let group = LocalTransport::group(2, cfg.region_len());
        let errs: Vec<String> = std::thread::scope(|s| {
            let hs: Vec<_> = group
                .into_iter()
                .zip(&boots)
                .map(|(t, b)| {
                    s.spawn(move || {
                        let h = if b.rank() == 0 {
                            same()
                        } else {
                            Default::default()
                        };
                        Dht::create_with_hash(t, cfg, b, h).unwrap_err().to_string()
                    })
                })
                .collect();
            hs.into_iter().map(|h| h.join().unwrap()).collect()
        });
        assert!(errs.iter().all(|e| e.contains("key hash")), "{errs:?}");
    }
}

#[test]
fn the_counters_split_operations_into_ones_aimed_at_this_rank_and_across_by_kind() {
    for variant in common::VARIANTS {
        let tables = common::tables_with(2, small(variant, 64), |_, t| RecordingTransport::new(t));
        let d = &tables[0];
        // Keys at home on each rank, written and read from rank 0; the
        // counters must say exactly what the recording saw, kind by kind.
        let homed = |r: usize| -> Vec<u8> {
            (0..)
                .map(key)
                .find(|k| d.place_of(k).0 == r)
                .expect("a key at home on each rank")
        };
        for home in [0, 1] {
            let k = homed(home);
            d.transport().clear();
            let before = d.stats();
            d.write(&k, &value(&k, 0, 1, 24)).unwrap();
            assert!(matches!(d.read(&k).unwrap(), Read::Hit(_)), "{variant:?}");
            let s = d.stats().since(&before);
            let seen: Vec<_> = d.transport().batches().into_iter().flatten().collect();
            let count = |f: &dyn Fn(&fabkit_dht::transport::recording::Logged) -> bool| {
                seen.iter().filter(|o| f(o)).count() as u64
            };
            let away = |o: &fabkit_dht::transport::recording::Logged| o.at.rank != 0;
            let want = (
                count(&|o| !away(o)),
                count(&|o| away(o) && o.kind == Read),
                count(&|o| away(o) && o.kind == Write),
                count(&|o| away(o) && o.kind.is_atomic()),
            );
            let got = (s.self_ops, s.cross_reads, s.cross_writes, s.cross_atomics);
            assert_eq!(got, want, "{variant:?}, key at home on rank {home}: {s:?}");
            assert_eq!(s.remote_ops, seen.len() as u64, "{variant:?}");
            assert!(
                s.cross_reads + s.cross_writes > 0 || home == 0,
                "{variant:?}"
            );
        }
    }
}
