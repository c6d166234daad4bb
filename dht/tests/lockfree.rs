//! The lock-free variant's marks and reuse, on bytes the test places: an
//! invalidation never hides a whole record, a writer that reuses a
//! damaged bucket leaves no older copy of its key further on, and a torn
//! bucket's pause holds back only its own key.

mod common;

use common::{key, local_tables, small, value};
use fabkit_dht::layout::{INVALID, OCCUPIED};
use fabkit_dht::placement::{default_candidates, hash_key, Placement};
use fabkit_dht::transport::{Completion, Op, Remote, Transport};
use fabkit_dht::{Read, Variant, Write};

fn put(t: &impl Transport, at: Remote, bytes: &[u8]) {
    t.execute(&mut [Op::Write {
        to: at,
        from: bytes,
        completion: Completion::Delivery,
    }])
    .unwrap();
}

fn get(t: &impl Transport, at: Remote, len: usize) -> Vec<u8> {
    let mut b = vec![0u8; len];
    t.execute(&mut [Op::Read {
        from: at,
        into: &mut b,
    }])
    .unwrap();
    b
}

#[test]
fn a_mark_keeps_the_occupied_bit_and_a_whole_record_is_read_whatever_the_mark() {
    let cfg = small(Variant::Lockfree, 64);
    let tables = local_tables(1, cfg);
    let (d, t) = (&tables[0], tables[0].transport());
    let l = cfg.layout();
    let k = key(3);
    let c0 =
        Placement::new(1, cfg.buckets, default_candidates(cfg.buckets)).candidate(hash_key(&k), 0);
    let at = Remote::new(0, l.offset(c0));
    d.write(&k, &value(&k, 0, 1, 24)).unwrap();
    // Damage it for good: its checksum's first byte flipped.
    let crc = Remote::new(0, at.offset + l.crc.unwrap() as u64);
    let b = get(t, crc, 1);
    put(t, crc, &[b[0] ^ 0xff]);
    assert_eq!(d.read(&k).unwrap(), Read::Corrupt);
    let meta = get(t, at, 1)[0];
    assert_eq!(meta, OCCUPIED | INVALID, "the mark keeps the occupied bit");
    // A whole record lands, and a mark that was in flight lands after it:
    // the record is still read.
    let mut rec = vec![0u8; l.data_len()];
    l.encode(&k, &value(&k, 0, 2, 24), &mut rec);
    put(t, at, &rec);
    put(t, at, &[OCCUPIED | INVALID]);
    assert_eq!(d.read(&k).unwrap(), Read::Hit(value(&k, 0, 2, 24)));
    // And a writer updates it in place, not elsewhere.
    assert_eq!(d.write(&k, &value(&k, 0, 3, 24)).unwrap(), Write::Updated);
    assert_eq!(d.read(&k).unwrap(), Read::Hit(value(&k, 0, 3, 24)));
}

#[test]
fn a_writer_reusing_a_damaged_bucket_leaves_no_older_copy_further_on() {
    let cfg = small(Variant::Lockfree, 64);
    let tables = local_tables(1, cfg);
    let (d, t) = (&tables[0], tables[0].transport());
    let l = cfg.layout();
    let k = key(5);
    let p = Placement::new(1, cfg.buckets, default_candidates(cfg.buckets));
    let (c0, c1) = (p.candidate(hash_key(&k), 0), p.candidate(hash_key(&k), 1));
    // k's older record sits at its second candidate (it was written while
    // the first held another key), and the first is now damaged.
    let mut rec = vec![0u8; l.data_len()];
    l.encode(&k, &value(&k, 0, 1, 24), &mut rec);
    put(t, Remote::new(0, l.offset(c1)), &rec);
    let other = key(6);
    l.encode(&other, &value(&other, 0, 1, 24), &mut rec);
    // Its checksum's last byte (what follows is padding, which no checksum
    // covers).
    let last = l.crc.unwrap() + 3 - l.data_start();
    rec[last] ^= 0xff;
    put(t, Remote::new(0, l.offset(c0)), &rec);
    // The write finds the older copy and updates it, rather than reusing
    // the damaged first candidate and leaving the copy to come back.
    assert_eq!(d.write(&k, &value(&k, 0, 2, 24)).unwrap(), Write::Updated);
    let at1 = get(t, Remote::new(0, l.offset(c1)), l.data_len());
    assert_eq!(l.decode(&at1, 0).value, &value(&k, 0, 2, 24)[..]);
    assert_eq!(d.read(&k).unwrap(), Read::Hit(value(&k, 0, 2, 24)));
    // With no copy further on, the damaged bucket is reused.
    let j = (7..)
        .map(key)
        .find(|j| ![c0, c1].contains(&p.candidate(hash_key(j), 0)))
        .unwrap();
    let cj = p.candidate(hash_key(&j), 0);
    l.encode(&other, &value(&other, 0, 1, 24), &mut rec);
    rec[last] ^= 0xff;
    put(t, Remote::new(0, l.offset(cj)), &rec);
    assert_eq!(d.write(&j, &value(&j, 0, 1, 24)).unwrap(), Write::Inserted);
    let atj = get(t, Remote::new(0, l.offset(cj)), l.data_len());
    assert_eq!(
        l.decode(&atj, 0).key,
        &j[..],
        "reused at its first candidate"
    );
}

#[test]
fn a_torn_buckets_pause_holds_back_only_its_own_key() {
    use fabkit_dht::clock::TestClock;
    use fabkit_dht::transport::hooked::HookedTransport;
    use std::sync::{Arc, Mutex};
    use std::time::Duration;

    let mut cfg = small(Variant::Lockfree, 64);
    cfg.checksum_retries = 0;
    let mut tables = common::tables_with(1, cfg, |_, t| HookedTransport::new(t));
    let mut d = tables.pop().unwrap();
    let clock = Arc::new(TestClock::new());
    d.set_clock(clock.clone());
    let t = d.transport();
    let l = cfg.layout();
    let place = Placement::new(1, cfg.buckets, default_candidates(cfg.buckets));
    let cand = |k: &[u8], n: u32| place.candidate(hash_key(k), n);
    // k: written, then damaged for good, so its read pauses before a last
    // look at it.
    let k = key(3);
    d.write(&k, &value(&k, 0, 1, 24)).unwrap();
    let crc = Remote::new(0, l.offset(cand(&k, 0)) + l.crc.unwrap() as u64);
    let b = get(t, crc, 1);
    put(t, crc, &[b[0] ^ 0xff]);
    // x: found on its third candidate, behind two other keys' records, so
    // its read takes three rounds.
    let x = (100..)
        .map(key)
        .find(|x| (0..3).all(|n| cand(x, n) != cand(&k, 0)))
        .unwrap();
    let mut rec = vec![0u8; l.data_len()];
    for n in 0..3 {
        let owner = if n == 2 {
            x.clone()
        } else {
            key(9000 + n as u64)
        };
        l.encode(&owner, &value(&owner, 0, 1, 24), &mut rec);
        let bucket = Remote::new(0, l.offset(cand(&x, n)) + l.data_start() as u64);
        put(t, bucket, &rec);
    }
    // Each batch: when (on the test clock) and which offsets it read.
    type Batches = Vec<(Duration, Vec<u64>)>;
    let log: Arc<Mutex<Batches>> = Arc::default();
    let (l2, c2) = (log.clone(), clock.clone());
    t.before(Some(Box::new(move |ops| {
        let at = ops.iter().map(|o| o.target().offset).collect();
        l2.lock().unwrap().push((c2.elapsed(), at));
    })));
    let got = d.read_many(&[&k, &x]).unwrap();
    t.before(None);
    assert_eq!(got, vec![Read::Corrupt, Read::Hit(value(&x, 0, 1, 24))]);
    let log = log.lock().unwrap();
    let x_last = l.offset(cand(&x, 2)) + l.data_start() as u64;
    let (when, _) = log
        .iter()
        .find(|(_, at)| at.contains(&x_last))
        .expect("x's third read");
    assert_eq!(*when, Duration::ZERO, "x waited on k's pause: {log:?}");
    assert!(
        clock.elapsed() >= Duration::from_millis(1),
        "k's last look came without its pause: {log:?}"
    );
}
