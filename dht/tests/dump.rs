//! Dump a table and restore it into one of another size, rank count and
//! variant; read everything back.

mod common;

use std::time::Duration;

use common::{key, small, value, VARIANTS};
use fabkit_dht::transport::local::LocalTransport;
use fabkit_dht::{Config, Dht, Read, Variant};
use fabkit_fabric::bootstrap::{Bootstrap, ThreadGroup};

/// Runs `body` on `n` ranks of a fresh local table.
fn on_ranks<R: Send>(
    n: usize,
    cfg: Config,
    body: impl Fn(&Dht<LocalTransport>, &dyn Bootstrap) -> R + Sync,
) -> Vec<R> {
    let ts = LocalTransport::group(n, cfg.region_len());
    let boots = ThreadGroup::members(n, Duration::from_secs(10));
    std::thread::scope(|s| {
        let hs: Vec<_> = ts
            .into_iter()
            .zip(&boots)
            .map(|(t, b)| {
                let body = &body;
                s.spawn(move || {
                    let d = Dht::create(t, cfg, b).unwrap();
                    body(&d, b)
                })
            })
            .collect();
        hs.into_iter().map(|h| h.join().unwrap()).collect()
    })
}

#[test]
fn dump_and_restore_into_another_size_rank_count_and_variant() {
    const KEYS: u64 = 300;
    let dir = tempfile::tempdir().unwrap();
    let prefix = dir.path().join("poet-cache");
    for from in VARIANTS {
        // 2 ranks of 256 buckets -> 3 ranks of 400 buckets, another variant.
        let to = match from {
            Variant::Lockfree => Variant::Chunked,
            _ => Variant::Lockfree,
        };
        let dumps: Vec<(u64, u64)> = on_ranks(2, small(from, 256), |d, b| {
            if b.rank() == 0 {
                for i in 0..KEYS {
                    d.write(&key(i), &value(&key(i), 0, i, 24)).unwrap();
                }
            }
            (d.dump(&prefix, b).unwrap(), d.stats().evictions)
        });
        // Each key not evicted on the way in is dumped exactly once.
        let dumped: u64 = dumps.iter().map(|d| d.0).sum();
        let evicted: u64 = dumps.iter().map(|d| d.1).sum();
        assert_eq!(dumped, KEYS - evicted, "{from:?}");
        // Into 3 ranks of 1000 buckets (10 % full: nothing evicted).
        let restored: Vec<(u64, u64, u64)> = on_ranks(3, small(to, 1000), |d, b| {
            let n = d.restore(&prefix, 2, b, 32).unwrap();
            b.barrier().unwrap();
            let mut hits = 0;
            for i in 0..KEYS {
                match d.read(&key(i)).unwrap() {
                    Read::Hit(v) => {
                        assert_eq!(v, value(&key(i), 0, i, 24), "{from:?} -> {to:?}");
                        hits += 1;
                    }
                    Read::Miss => {}
                    Read::Corrupt => panic!("{from:?} -> {to:?}: key {i} corrupt"),
                }
            }
            (n, hits, d.stats().evictions)
        });
        assert_eq!(restored.iter().map(|r| r.0).sum::<u64>(), dumped);
        assert!(
            restored.iter().all(|r| r.1 == dumped && r.2 == 0),
            "{from:?}: {restored:?}"
        );
    }
}

#[test]
fn restoring_records_of_another_length_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let prefix = dir.path().join("d");
    on_ranks(1, small(Variant::Fine, 64), |d, b| {
        d.write(&key(1), &value(&key(1), 0, 0, 24)).unwrap();
        d.dump(&prefix, b).unwrap()
    });
    let mut other = small(Variant::Fine, 64);
    other.value_len = 32;
    let err = on_ranks(1, other, |d, b| {
        d.restore(&prefix, 1, b, 8).unwrap_err().to_string()
    });
    assert!(
        err[0].contains("24 B values; this table takes 16 B and 32 B"),
        "{}",
        err[0]
    );
    let err = on_ranks(1, small(Variant::Fine, 64), |d, b| {
        d.restore(&prefix, 2, b, 8)
            .map(|_| ())
            .unwrap_err()
            .to_string()
    });
    assert!(err[0].contains("shard 1 of 2"), "{}", err[0]);
}
