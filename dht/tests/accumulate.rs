//! Accumulating writes (`Dht::update_many`): each key's new value is
//! computed from the one it replaces while the variant holds the bucket,
//! so ranks counting into the same keys at once lose no increment, also
//! when a batch names one key twice and when the transport reorders and
//! delays; a function that declines leaves the bucket as it was; the
//! lock-free variant refuses.

mod common;

use std::sync::Barrier;

use common::{key, local_tables, racing_faults, small};
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
        let tables = racing_faults(4, cfg, 0xacc);
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
