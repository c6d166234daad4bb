//! Every variant for real over libfabric (the providers of
//! `fabkit_fabric::env::test_providers`: shm, tcp;ofi_rxm, sockets), ranks as
//! threads each with its own endpoint, plus the errors a user can hit.

mod common;

use std::time::Duration;

use common::{key, one_hot_key, small, value, value_ok, VARIANTS};
use fabkit_core::bootstrap::{Bootstrap, ThreadGroup};
use fabkit_dht::{Config, Dht, Error, Read, Variant};
use fabkit_fabric::env::test_providers as providers;
use fabkit_fabric::{Rank, RankConfig};

fn rank_for(provider: &str, cfg: &Config, boot: &dyn Bootstrap) -> Rank {
    let mut rc = RankConfig::new(provider);
    rc.region_len = cfg.region_len();
    rc.atomics = cfg.variant.needs_atomics();
    Rank::establish(rc, boot).unwrap()
}

/// Runs `body` on `n` ranks, each with a table over its own fabric rank.
fn with_tables<R: Send>(
    n: usize,
    provider: &str,
    cfg: Config,
    body: impl Fn(&Dht<&Rank>, &dyn Bootstrap) -> R + Sync,
) -> Vec<R> {
    let boots = ThreadGroup::members(n, Duration::from_secs(30));
    std::thread::scope(|s| {
        let hs: Vec<_> = boots
            .iter()
            .map(|b| {
                let body = &body;
                s.spawn(move || {
                    let rank = rank_for(provider, &cfg, b);
                    let d = Dht::create(&rank, cfg, b).unwrap();
                    let out = body(&d, b);
                    d.free(b).unwrap();
                    rank.finish(b).unwrap();
                    out
                })
            })
            .collect();
        hs.into_iter().map(|h| h.join().unwrap()).collect()
    })
}

#[test]
fn every_variant_over_real_providers() {
    for prov in providers() {
        for variant in VARIANTS {
            let cfg = small(variant, 256);
            let stats = with_tables(3, &prov, cfg, |d, b| {
                let me = d.transport().rank() as u64;
                // Each rank writes its own keys, batched, in turn (lock-free
                // writers racing for one empty bucket may lose an insert by
                // design; the races are exercised below); all read everything.
                let keys: Vec<Vec<u8>> = (0..40).map(|i| key(me * 100 + i)).collect();
                let vals: Vec<Vec<u8>> = keys.iter().map(|k| value(k, me, 1, 24)).collect();
                let items: Vec<(&[u8], &[u8])> = keys
                    .iter()
                    .zip(&vals)
                    .map(|(k, v)| (&k[..], &v[..]))
                    .collect();
                for turn in 0..3 {
                    if turn == me {
                        d.write_many(&items).unwrap();
                    }
                    b.barrier().unwrap();
                }
                for r in 0..3u64 {
                    let keys: Vec<Vec<u8>> = (0..40).map(|i| key(r * 100 + i)).collect();
                    let refs: Vec<&[u8]> = keys.iter().map(|k| &k[..]).collect();
                    for (k, got) in keys.iter().zip(d.read_many(&refs).unwrap()) {
                        assert_eq!(got, Read::Hit(value(k, r, 1, 24)), "{prov} {variant:?}");
                    }
                    assert_eq!(d.read(&key(r * 100 + 99)).unwrap(), Read::Miss);
                }
                // Hot keys from every rank at once.
                for i in 0..30u64 {
                    let k = key(7000 + i % 3);
                    d.write(&k, &value(&k, me, i, 24)).unwrap();
                    if let Read::Hit(v) = d.read(&k).unwrap() {
                        assert!(value_ok(&k, &v), "{prov} {variant:?}: torn value");
                    }
                }
                b.barrier().unwrap();
                d.stats_all(b).unwrap()
            });
            let st = stats[0];
            assert_eq!(st.writes, 3 * (40 + 30), "{prov} {variant:?}: {st:?}");
            assert!(st.inserts >= 3 * 40 + 3, "{prov} {variant:?}: {st:?}");
            assert!(st.hits >= 9 * 40, "{prov} {variant:?}: {st:?}");
            eprintln!(
                "{prov} {variant:?}: {:.2} remote ops per DHT op",
                st.ops_per_op()
            );
        }
    }
}

/// Every rank updates one key at once, round after round, then reads it:
/// a whole value of that round, never a mix, never corrupt (lockfree may
/// tear or lose a racing write, never return a foreign value).
#[test]
fn one_key_updated_by_every_rank_at_once_over_real_providers() {
    for prov in providers() {
        for variant in VARIANTS {
            let cfg = small(variant, 64);
            // The ranks, each with its table, made together, then raced
            // by the same check as on the local transport, copy count
            // included.
            let boots = ThreadGroup::members(3, Duration::from_secs(30));
            let tables: Vec<Dht<Rank>> = std::thread::scope(|s| {
                let hs: Vec<_> = boots
                    .iter()
                    .map(|b| {
                        let prov = &prov;
                        s.spawn(move || Dht::create(rank_for(prov, &cfg, b), cfg, b).unwrap())
                    })
                    .collect();
                hs.into_iter().map(|h| h.join().unwrap()).collect()
            });
            one_hot_key(&tables, &cfg, 40, &prov);
            // Given back together, as a job ends.
            std::thread::scope(|s| {
                for (d, b) in tables.into_iter().zip(&boots) {
                    s.spawn(move || d.free(b).unwrap().finish(b).unwrap());
                }
            });
        }
    }
}

#[test]
fn bad_input_is_refused_before_anything_is_sent() {
    let boot = ThreadGroup::members(1, Duration::from_secs(5))
        .pop()
        .unwrap();
    // A region too small for the table.
    let cfg = small(Variant::Lockfree, 1000);
    let mut rc = RankConfig::new("shm");
    rc.region_len = 4096;
    rc.atomics = false;
    let rank = Rank::establish(rc, &boot).unwrap();
    let err = Dht::create(&rank, cfg, &boot).unwrap_err();
    assert!(
        matches!(err, Error::RegionTooSmall { have: 4096, .. }),
        "{err}"
    );
    assert!(err.to_string().contains("larger region"), "{err}");
    // A variant that needs atomics on a rank without them.
    let cfg = small(Variant::Fine, 10);
    let err = Dht::create(&rank, cfg, &boot).unwrap_err();
    assert!(
        matches!(
            err,
            Error::NoAtomics {
                variant: Variant::Fine,
                ..
            }
        ),
        "{err}"
    );
    assert!(err.to_string().contains("lockfree"), "{err}");
    // Lock-free needs none.
    let d = Dht::create(&rank, small(Variant::Lockfree, 10), &boot).unwrap();
    let err = d.write(b"short", &[0; 24]).unwrap_err();
    assert_eq!(
        err.to_string(),
        "key is 5 B, but this table was created for 16 B keys"
    );
    let err = d.write(&key(1), &[0; 3]).unwrap_err();
    assert!(matches!(
        err,
        Error::Length {
            what: "value",
            got: 3,
            expected: 24
        }
    ));
    assert_eq!(d.stats().remote_ops, 0, "nothing was sent");
    // Sizes that cannot work.
    let mut c = small(Variant::Lockfree, 0);
    assert!(Dht::create(&rank, c, &boot)
        .unwrap_err()
        .to_string()
        .contains("at least one bucket"));
    c.buckets = 1 << 50;
    assert!(c.validate().unwrap_err().to_string().contains("memory"));
    c = small(Variant::Lockfree, 10);
    c.key_len = 0;
    assert!(c.validate().is_err());
    d.free(&boot).unwrap();
    let _ = rank.finish(&boot);
}

#[test]
fn ranks_that_disagree_on_the_table_all_get_an_error() {
    let boots = ThreadGroup::members(2, Duration::from_secs(10));
    let errs: Vec<String> = std::thread::scope(|s| {
        let hs: Vec<_> = boots
            .iter()
            .map(|b| {
                s.spawn(move || {
                    let mut cfg = small(Variant::Lockfree, 64);
                    if b.rank() == 1 {
                        cfg.value_len = 32; // rank 1 was built with other records
                    }
                    let t = fabkit_dht::transport::local::LocalTransport::group(1, 1 << 16)
                        .pop()
                        .unwrap();
                    Dht::create(t, cfg, b).unwrap_err().to_string()
                })
            })
            .collect();
        hs.into_iter().map(|h| h.join().unwrap()).collect()
    });
    for e in errs {
        assert!(e.contains("ranks disagree"), "{e}");
    }
}

#[test]
fn a_rank_without_ordered_delivery_is_refused_by_name() {
    // No provider here lacks every mechanism; a rank told to use none is
    // what one would give.
    let boot = ThreadGroup::members(1, Duration::from_secs(10))
        .pop()
        .unwrap();
    let cfg = small(Variant::Fine, 64);
    let mut rc = RankConfig::new("shm");
    rc.region_len = cfg.region_len();
    rc.atomics = true;
    rc.ordering = Some(fabkit_fabric::Ordering::None);
    let rank = Rank::establish(rc, &boot).unwrap();
    let e = Dht::create(&rank, cfg, &boot).unwrap_err();
    assert!(matches!(e, Error::Unordered { .. }), "{e}");
    let msg = e.to_string();
    assert!(
        msg.contains("fabric shm") && msg.contains("fabkit info"),
        "{msg}"
    );
    rank.finish(&boot).unwrap();
}
