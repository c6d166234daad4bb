//! Each variant against a HashMap model, on the local transport, with
//! several ranks (keys spread over all of them).

mod common;

use std::collections::HashMap;

use common::{key, local_tables, small, value, VARIANTS};
use fabkit_dht::{Read, Write};
use proptest::prelude::*;

#[derive(Clone, Debug)]
enum Step {
    Write(u64, u64),
    Read(u64),
    WriteMany(Vec<(u64, u64)>),
    ReadMany(Vec<u64>),
}

fn step() -> impl Strategy<Value = Step> {
    prop_oneof![
        (0..60u64, 0..1000u64).prop_map(|(k, s)| Step::Write(k, s)),
        (0..80u64).prop_map(Step::Read),
        prop::collection::vec((0..60u64, 0..1000u64), 1..12).prop_map(Step::WriteMany),
        prop::collection::vec(0..80u64, 1..12).prop_map(Step::ReadMany),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 24, ..ProptestConfig::default() })]

    #[test]
    fn every_variant_behaves_like_a_hash_map(steps in prop::collection::vec(step(), 1..60)) {
        for variant in VARIANTS {
            // 3 ranks, 512 buckets each, at most 60 keys: far from full, so
            // nothing is evicted and the table must agree with the model.
            let tables = local_tables(3, small(variant, 512));
            let d = &tables[1];
            let mut model: HashMap<u64, Vec<u8>> = HashMap::new();
            let put = |model: &mut HashMap<u64, Vec<u8>>, k: u64, s: u64, w: Write| {
                let v = value(&key(k), 9, s, 24);
                let expect = if model.contains_key(&k) { Write::Updated } else { Write::Inserted };
                prop_assert_eq!(w, expect, "{:?} key {}", variant, k);
                model.insert(k, v);
                Ok(())
            };
            let get = |model: &HashMap<u64, Vec<u8>>, k: u64, r: &Read| {
                let expect = model.get(&k).map_or(Read::Miss, |v| Read::Hit(v.clone()));
                prop_assert_eq!(r, &expect, "{:?} key {}", variant, k);
                Ok(())
            };
            for s in &steps {
                match s {
                    Step::Write(k, sq) => {
                        let w = d.write(&key(*k), &value(&key(*k), 9, *sq, 24)).unwrap();
                        put(&mut model, *k, *sq, w)?;
                    }
                    Step::Read(k) => get(&model, *k, &d.read(&key(*k)).unwrap())?,
                    Step::WriteMany(items) => {
                        // The model applies a batch in order; a key twice in
                        // one batch ends with one of its values, so keep the
                        // batch's keys distinct.
                        let mut seen = std::collections::HashSet::new();
                        let items: Vec<(u64, u64)> = items.iter().copied().filter(|(k, _)| seen.insert(*k)).collect();
                        let keys: Vec<Vec<u8>> = items.iter().map(|(k, _)| key(*k)).collect();
                        let vals: Vec<Vec<u8>> = items.iter().map(|(k, s)| value(&key(*k), 9, *s, 24)).collect();
                        let refs: Vec<(&[u8], &[u8])> = keys.iter().zip(&vals).map(|(k, v)| (&k[..], &v[..])).collect();
                        let ws = d.write_many(&refs).unwrap();
                        for ((k, s), w) in items.iter().zip(ws) {
                            put(&mut model, *k, *s, w)?;
                        }
                    }
                    Step::ReadMany(ks) => {
                        let keys: Vec<Vec<u8>> = ks.iter().map(|k| key(*k)).collect();
                        let refs: Vec<&[u8]> = keys.iter().map(|k| &k[..]).collect();
                        for (k, r) in ks.iter().zip(d.read_many(&refs).unwrap()) {
                            get(&model, *k, &r)?;
                        }
                    }
                }
            }
            let st = d.stats();
            prop_assert_eq!(st.evictions, 0);
            prop_assert_eq!(st.corrupt, 0);
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
