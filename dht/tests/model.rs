//! Each variant against a HashMap model, on the local transport, with
//! several ranks (keys spread over all of them).

mod common;

use common::model::{agree, step};
use common::{key, local_tables, small, tables_with, value, VARIANTS};
use fabkit_dht::{Read, Write};
use proptest::prelude::*;

proptest! {
    #![proptest_config(ProptestConfig { cases: 24, ..ProptestConfig::default() })]

    #[test]
    fn every_variant_behaves_like_a_hash_map(steps in prop::collection::vec(step(60, 12), 1..60)) {
        for variant in VARIANTS {
            // 3 ranks, 512 buckets each, at most 60 keys: far from full, so
            // nothing is evicted and the table must agree with the model.
            let tables = local_tables(3, small(variant, 512));
            agree(&tables[1], variant, &steps)?;
            // Again with batches of several lanes in flight, run when
            // completed (lanes of 3 keys: batches of 4 keys or more use two).
            let mut tables = tables_with(3, small(variant, 512), |_, t| t.with_depth(4));
            tables[1].set_lane_keys(3);
            agree(&tables[1], variant, &steps)?;
        }
    }
}

#[test]
fn a_full_table_evicts_and_never_returns_a_wrong_value() {
    for variant in VARIANTS {
        let mut cfg = small(variant, 8);
        cfg.candidates = 2;
        cfg.chunk = 2;
        let tables = local_tables(1, cfg);
        let d = &tables[0];
        let mut evicted = 0;
        for i in 0..100 {
            if d.write(&key(i), &value(&key(i), 0, i, 24)).unwrap() == Write::Evicted {
                evicted += 1;
            }
        }
        assert!(
            evicted > 50,
            "{variant:?}: only {evicted} evictions in a table of 8"
        );
        assert_eq!(d.stats().evictions, evicted);
        let mut hits = 0;
        for i in 0..100 {
            match d.read(&key(i)).unwrap() {
                Read::Hit(v) => {
                    hits += 1;
                    assert_eq!(v, value(&key(i), 0, i, 24), "{variant:?}: a wrong value");
                }
                Read::Miss => {}
                Read::Corrupt => panic!("{variant:?}: corrupt without concurrency"),
            }
        }
        assert!(
            hits > 0 && hits <= 8,
            "{variant:?}: {hits} hits in 8 buckets"
        );
    }
}
