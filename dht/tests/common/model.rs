//! The HashMap model the table is checked against, and the steps a
//! property test draws (keys `0..keys`, reads also of absent keys).

use std::collections::{HashMap, HashSet};

use fabkit_dht::{Dht, Read, Transport, Variant, Write};
use proptest::prelude::*;
use proptest::test_runner::TestCaseError;

use super::{key, value};

#[derive(Clone, Debug)]
pub enum Step {
    Write(u64, u64),
    Read(u64),
    WriteMany(Vec<(u64, u64)>),
    ReadMany(Vec<u64>),
}

/// Steps over `keys` keys written and a third more read.
pub fn step(keys: u64, batch: usize) -> impl Strategy<Value = Step> {
    let read = keys + keys / 3;
    prop_oneof![
        (0..keys, 0..1000u64).prop_map(|(k, s)| Step::Write(k, s)),
        (0..read).prop_map(Step::Read),
        prop::collection::vec((0..keys, 0..1000u64), 1..batch).prop_map(Step::WriteMany),
        prop::collection::vec(0..read, 1..batch).prop_map(Step::ReadMany),
    ]
}

/// Applies `steps` to `d` and to a HashMap, and requires every outcome to
/// be the model's (the table must be far from full: no eviction).
pub fn agree<T: Transport>(
    d: &Dht<T>,
    variant: Variant,
    steps: &[Step],
) -> Result<(), TestCaseError> {
    let mut model: HashMap<u64, Vec<u8>> = HashMap::new();
    let put = |model: &mut HashMap<u64, Vec<u8>>, k: u64, s: u64, w: Write| {
        let expect = if model.contains_key(&k) {
            Write::Updated
        } else {
            Write::Inserted
        };
        prop_assert_eq!(w, expect, "{:?} key {}", variant, k);
        model.insert(k, value(&key(k), 9, s, 24));
        Ok(())
    };
    let get = |model: &HashMap<u64, Vec<u8>>, k: u64, r: &Read| {
        let expect = model.get(&k).map_or(Read::Miss, |v| Read::Hit(v.clone()));
        prop_assert_eq!(r, &expect, "{:?} key {}", variant, k);
        Ok(())
    };
    for s in steps {
        match s {
            Step::Write(k, sq) => {
                let w = d.write(&key(*k), &value(&key(*k), 9, *sq, 24)).unwrap();
                put(&mut model, *k, *sq, w)?;
            }
            Step::Read(k) => get(&model, *k, &d.read(&key(*k)).unwrap())?,
            Step::WriteMany(items) => {
                // The model applies a batch in order; a key twice in one
                // batch ends with one of its values, so keep its keys
                // distinct.
                let mut seen = HashSet::new();
                let items: Vec<(u64, u64)> = items
                    .iter()
                    .copied()
                    .filter(|(k, _)| seen.insert(*k))
                    .collect();
                let keys: Vec<Vec<u8>> = items.iter().map(|(k, _)| key(*k)).collect();
                let vals: Vec<Vec<u8>> = items
                    .iter()
                    .map(|(k, s)| value(&key(*k), 9, *s, 24))
                    .collect();
                let refs: Vec<(&[u8], &[u8])> = keys
                    .iter()
                    .zip(&vals)
                    .map(|(k, v)| (&k[..], &v[..]))
                    .collect();
                for ((k, s), w) in items.iter().zip(d.write_many(&refs).unwrap()) {
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
    Ok(())
}
