//! Ranks (threads on the local transport, whose word-by-word copies tear
//! like RDMA) writing and reading the same hot keys at once. Each case
//! asserts that the ranks did meet (a wait, a re-read, a lost bucket):
//! one whose threads ran one after another would test nothing. A seed
//! does not fix the interleaving of threads: a failure names its counters,
//! not a seed to replay.

mod common;

use common::{key, small, tables_with, value, value_ok, VARIANTS};
use fabkit_dht::transport::hooked::HookedTransport;
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

/// Tables of `variant` for `RANKS` ranks; where `interleave`, every batch
/// yields the core first, so ranks take turns batch by batch instead of
/// running their loops one after another (lock waits then happen by the
/// thousand). Lock-free's contention, a read that tears under a write,
/// needs two copies overlapping on two cores, which the yields prevent.
fn racing(
    ranks: usize,
    variant: Variant,
    buckets: u64,
    interleave: bool,
) -> Vec<fabkit_dht::Dht<HookedTransport<fabkit_dht::transport::local::LocalTransport>>> {
    tables_with(ranks, small(variant, buckets), |_, t| {
        let h = HookedTransport::new(t);
        if interleave {
            h.before(Some(Box::new(|_| std::thread::yield_now())));
        }
        h
    })
}

/// Whether the ranks of a run met: lock or claim waits, checksum
/// re-reads, invalidated or corrupt buckets.
fn contended(st: &fabkit_dht::Stats, corrupt: u64) -> bool {
    st.lock_retries + st.checksum_retries + st.invalidations + corrupt > 0
}

#[test]
fn reads_of_hot_keys_return_whole_values_only() {
    const RANKS: usize = 4;
    const OPS: u64 = 3000;
    // A run whose ranks never met proves nothing: it is repeated, at most
    // this many times, until they did.
    const TRIES: usize = 8;
    for variant in VARIANTS {
        let mut met = false;
        for attempt in 1..=TRIES {
            let tables = racing(RANKS, variant, 64, variant != Variant::Lockfree);
            let (st, corrupt) = hot_key_run(&tables, variant, OPS);
            eprintln!(
                "{variant:?} (try {attempt}): {corrupt} corrupt, {} checksum retries, {} \
                 invalidations, {} lock retries, {:.2} remote ops per op",
                st.checksum_retries,
                st.invalidations,
                st.lock_retries,
                st.ops_per_op()
            );
            if contended(&st, corrupt) {
                met = true;
                break;
            }
        }
        assert!(
            met,
            "{variant:?}: in {TRIES} runs no rank ever waited for, re-read or lost a bucket \
             to another: nothing was tested"
        );
    }
}

/// One run of the hot-key workload: even ranks write batches of 4 hot
/// keys, every rank reads one; every hit must be a whole value. Returns
/// the ranks' summed counters and the corrupt reads.
fn hot_key_run<T: fabkit_dht::Transport + Sync>(
    tables: &[fabkit_dht::Dht<T>],
    variant: Variant,
    ops: u64,
) -> (fabkit_dht::Stats, u64) {
    let results: Vec<(u64, u64, u64)> = std::thread::scope(|s| {
        let hs: Vec<_> = tables
            .iter()
            .enumerate()
            .map(|(r, d)| {
                s.spawn(move || {
                    let (mut hits, mut corrupt, mut bad) = (0, 0, 0);
                    for i in 0..ops {
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
    assert!(hits > ops, "{variant:?}: only {hits} hits");
    assert_eq!(
        bad, 0,
        "{variant:?}: {bad} torn or foreign values returned as hits"
    );
    if matches!(variant, Variant::Fine | Variant::Coarse) {
        assert_eq!(corrupt, 0, "{variant:?}: locks exclude torn reads");
    }
    let mut st = fabkit_dht::Stats::default();
    for d in tables {
        st.add(&d.stats());
    }
    (st, corrupt)
}

/// `keys` keys for each of `ranks` writers, disjoint, such that the i-th
/// key of every writer has the same first candidate (rank and bucket) in a
/// table of `cfg`: each i-th write races the others' for one bucket.
fn colliding(cfg: &fabkit_dht::Config, ranks: usize, keys: usize) -> Vec<Vec<Vec<u8>>> {
    use fabkit_dht::placement::{default_candidates, hash_key, Placement};
    use std::collections::HashMap;
    // The table's own placement (a small config leaves candidates to the
    // default).
    assert_eq!(cfg.candidates, 0);
    let p = Placement::new(ranks as u32, cfg.buckets, default_candidates(cfg.buckets));
    let home = |k: &[u8]| {
        let h = hash_key(k);
        (p.rank_of(h), p.candidate(h, 0))
    };
    // Writer 0's keys name the buckets; the others search their own keys.
    let mut out: Vec<Vec<Option<Vec<u8>>>> = vec![vec![None; keys]; ranks];
    let mut want: HashMap<(u32, u64), Vec<usize>> = HashMap::new();
    for (i, slot) in out[0].iter_mut().enumerate() {
        let k = key(i as u64);
        want.entry(home(&k)).or_default().push(i);
        *slot = Some(k);
    }
    for (w, row) in out.iter_mut().enumerate().skip(1) {
        let mut open = want.clone();
        let mut left = keys;
        // Writers' keys stay apart: writer w draws from [w, w + 1) x 10^8.
        for j in 0..100_000_000u64 {
            if left == 0 {
                break;
            }
            let k = key(w as u64 * 100_000_000 + j);
            if let Some(slots) = open.get_mut(&home(&k)) {
                if let Some(i) = slots.pop() {
                    row[i] = Some(k);
                    left -= 1;
                }
            }
        }
    }
    out.into_iter()
        .enumerate()
        .map(|(w, row)| {
            row.into_iter()
                .enumerate()
                .map(|(i, k)| {
                    k.unwrap_or_else(|| {
                        panic!("writer {w} found no key for slot {i} in 10^8 draws")
                    })
                })
                .collect()
        })
        .collect()
}

#[test]
fn locking_variants_lose_no_update_from_concurrent_writers() {
    const RANKS: usize = 4;
    const KEYS: usize = 150;
    for variant in [Variant::Fine, Variant::Coarse, Variant::Chunked] {
        // Disjoint keys per rank whose i-th keys share a first bucket, every
        // rank racing for it: 600 keys in 4 x 2048 buckets (7 % full, so
        // that a key finding all its candidates taken, an eviction, is a
        // rare event). Interleaved batch by batch, so the races happen.
        let cfg = small(variant, 2048);
        let keys = colliding(&cfg, RANKS, KEYS);
        let tables = racing(RANKS, variant, 2048, true);
        // Every round starts together, so the i-th writes meet.
        let go = std::sync::Barrier::new(RANKS);
        std::thread::scope(|s| {
            for (r, d) in tables.iter().enumerate() {
                let (mine, go) = (&keys[r], &go);
                s.spawn(move || {
                    for round in 0..3u64 {
                        go.wait();
                        for k in mine {
                            d.write(k, &value(k, r as u64, round, 24)).unwrap();
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
        // The ranks met at the buckets they share: a lock or claim taken
        // by another made one wait (not a test of lost updates otherwise).
        assert!(
            st.lock_retries > 0,
            "{variant:?}: no rank ever waited for another's lock or claim: {st:?}"
        );
        for (r, mine) in keys.iter().enumerate() {
            for (i, k) in mine.iter().enumerate() {
                assert_eq!(
                    tables[0].read(k).unwrap(),
                    Read::Hit(value(k, r as u64, 2, 24)),
                    "{variant:?}: key {i} of rank {r} lost its last write"
                );
            }
        }
    }
}
