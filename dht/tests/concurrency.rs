//! Ranks (threads on the local transport, whose word-by-word copies tear
//! like RDMA) writing and reading the same hot keys at once.

mod common;

use common::{key, local_tables, small, value, value_ok, VARIANTS};
use fabkit_dht::{Read, Variant};

/// Zipf-like pick of one of `n` keys: key i with weight 1/(i+1).
fn zipf(n: u64, x: u64) -> u64 {
    let h: f64 = (1..=n).map(|i| 1.0 / i as f64).sum();
    let mut u = (fabkit_dht::placement::mix(x) >> 11) as f64 / (1u64 << 53) as f64 * h;
    for i in 0..n {
        u -= 1.0 / (i + 1) as f64;
        if u <= 0.0 {
            return i;
        }
    }
    n - 1
}

#[test]
fn reads_of_hot_keys_return_whole_values_only() {
    const RANKS: usize = 4;
    const OPS: u64 = 3000;
    for variant in VARIANTS {
        let tables = local_tables(RANKS, small(variant, 64));
        let results: Vec<(u64, u64, u64)> = std::thread::scope(|s| {
            let hs: Vec<_> = tables
                .iter()
                .enumerate()
                .map(|(r, d)| {
                    s.spawn(move || {
                        let (mut hits, mut corrupt, mut bad) = (0, 0, 0);
                        for i in 0..OPS {
                            let k = key(zipf(16, (r as u64) << 32 | i));
                            if r % 2 == 0 {
                                // Writers: batches of 4 updates of hot keys.
                                let keys: Vec<Vec<u8>> = (0..4)
                                    .map(|j| key(zipf(16, (r as u64) << 40 | i << 3 | j)))
                                    .collect();
                                let vals: Vec<Vec<u8>> =
                                    keys.iter().map(|k| value(k, r as u64, i, 24)).collect();
                                let mut seen = std::collections::HashSet::new();
                                let items: Vec<(&[u8], &[u8])> = keys
                                    .iter()
                                    .zip(&vals)
                                    .filter(|(k, _)| seen.insert(k.to_vec()))
                                    .map(|(k, v)| (&k[..], &v[..]))
                                    .collect();
                                d.write_many(&items).unwrap();
                            }
                            match d.read(&k).unwrap() {
                                Read::Hit(v) => {
                                    hits += 1;
                                    if !value_ok(&k, &v) {
                                        bad += 1;
                                    }
                                }
                                Read::Corrupt => corrupt += 1,
                                Read::Miss => {}
                            }
                        }
                        (hits, corrupt, bad)
                    })
                })
                .collect();
            hs.into_iter().map(|h| h.join().unwrap()).collect()
        });
        let hits: u64 = results.iter().map(|r| r.0).sum();
        let bad: u64 = results.iter().map(|r| r.2).sum();
        let corrupt: u64 = results.iter().map(|r| r.1).sum();
        assert!(hits > OPS, "{variant:?}: only {hits} hits");
        assert_eq!(
            bad, 0,
            "{variant:?}: {bad} torn or foreign values returned as hits"
        );
        if matches!(variant, Variant::Fine | Variant::Coarse) {
            assert_eq!(corrupt, 0, "{variant:?}: locks exclude torn reads");
        }
        let mut st = fabkit_dht::Stats::default();
        for d in &tables {
            st.add(&d.stats());
        }
        eprintln!(
            "{variant:?}: {hits} hits, {corrupt} corrupt, {} checksum retries, {} invalidations, \
             {} lock retries, {:.2} remote ops per op",
            st.checksum_retries,
            st.invalidations,
            st.lock_retries,
            st.ops_per_op()
        );
    }
}

#[test]
fn locking_variants_lose_no_update_from_concurrent_writers() {
    const RANKS: usize = 4;
    const KEYS: u64 = 150;
    for variant in [Variant::Fine, Variant::Coarse, Variant::Chunked] {
        // Disjoint keys per rank, but the same buckets, every rank racing for
        // empty ones: 600 keys in 4 x 2048 buckets (7 % full, so that a key
        // finding all 7 candidates taken, an eviction, is a ~1e-5 event).
        let tables = local_tables(RANKS, small(variant, 2048));
        std::thread::scope(|s| {
            for (r, d) in tables.iter().enumerate() {
                s.spawn(move || {
                    for round in 0..3u64 {
                        for i in 0..KEYS {
                            let k = key(r as u64 * 1000 + i);
                            d.write(&k, &value(&k, r as u64, round, 24)).unwrap();
                        }
                    }
                });
            }
        });
        let mut st = fabkit_dht::Stats::default();
        for d in &tables {
            st.add(&d.stats());
        }
        assert_eq!(st.evictions, 0, "{variant:?}: table too full for this test");
        for r in 0..RANKS as u64 {
            for i in 0..KEYS {
                let k = key(r * 1000 + i);
                assert_eq!(
                    tables[0].read(&k).unwrap(),
                    Read::Hit(value(&k, r, 2, 24)),
                    "{variant:?}: key {i} of rank {r} lost its last write"
                );
            }
        }
    }
}
