//! Dump a table and restore it into one of another size, rank count and
//! variant; read everything back. Damaged, truncated, missing, foreign and
//! misnamed shards are refused on every rank with the file and byte named,
//! and nothing is restored; a failing rank fails the collective everywhere
//! without anyone waiting for the bootstrap's timeout.

mod common;

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use common::{key, small, value, VARIANTS};
use fabkit_core::bootstrap::{Bootstrap, ThreadGroup};
use fabkit_dht::layout::STATE_FULL;
use fabkit_dht::placement::{default_candidates, hash_key, Placement};
use fabkit_dht::transport::local::LocalTransport;
use fabkit_dht::transport::{Completion, Op, Remote};
use fabkit_dht::{Config, Dht, Error, Read, Transport, Variant};

/// How long a bootstrap collective waits for a missing rank (ThreadGroup
/// stretches it by the CI's timeout scale): a test that ends well inside
/// it waited on no one.
const BOOT_TIMEOUT: Duration = Duration::from_secs(20);

/// Half the bootstrap's timeout as ThreadGroup applies it: a collective
/// step that ends within this waited on no one.
fn no_wait() -> Duration {
    fabkit_core::time::scaled(BOOT_TIMEOUT) / 2
}

/// Runs `body` on `n` ranks of a fresh local table.
fn on_ranks<R: Send>(
    n: usize,
    cfg: Config,
    body: impl Fn(&Dht<LocalTransport>, &dyn Bootstrap) -> R + Sync,
) -> Vec<R> {
    let ts = LocalTransport::group(n, cfg.region_len());
    let boots = ThreadGroup::members(n, BOOT_TIMEOUT);
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

fn shard(prefix: &Path, r: usize) -> PathBuf {
    PathBuf::from(format!("{}.rank{r}", prefix.display()))
}

const HEADER: u64 = 80;
/// Bytes per record of `small` tables: 16 B key, 24 B value, CRC32.
const REC: u64 = 16 + 24 + 4;

/// Dumps `keys` keys from 2 ranks of a lock-free table; returns the count.
fn dump_two_ranks(prefix: &Path, keys: u64) -> u64 {
    let counts = on_ranks(2, small(Variant::Lockfree, 256), |d, b| {
        if b.rank() == 0 {
            for i in 0..keys {
                d.write(&key(i), &value(&key(i), 0, i, 24)).unwrap();
            }
        }
        d.dump(prefix, b).unwrap().records
    });
    assert!(
        counts.iter().all(|c| *c > 0),
        "each shard holds records: {counts:?}"
    );
    counts.iter().sum()
}

/// Restores `prefix` (`shards` shards) into 2 fresh ranks of `cfg`; asserts
/// every rank failed with the same message and that no key of the dump is
/// in the table on any rank afterwards. Returns the message.
fn refused(prefix: &Path, shards: usize, cfg: Config, keys: u64) -> String {
    let start = Instant::now();
    let out = on_ranks(2, cfg, |d, b| {
        let err = d.restore(prefix, shards, b, 16).unwrap_err();
        // Every rank returns before anyone checks the table.
        b.barrier().unwrap();
        let untouched = (0..keys).all(|i| d.read(&key(i)).unwrap() == Read::Miss);
        (err.to_string(), untouched, d.stats().writes)
    });
    assert!(
        start.elapsed() < no_wait(),
        "a rank waited for the bootstrap's timeout: {:?}",
        start.elapsed()
    );
    for (r, (msg, untouched, writes)) in out.iter().enumerate() {
        assert!(!msg.contains("panicked"), "{msg}");
        assert_eq!(msg, &out[0].0, "rank {r} returned another error");
        assert!(*untouched && *writes == 0, "rank {r} restored something");
    }
    out[0].0.clone()
}

/// Asserts `msg` names `path` and byte `offset` and contains `what`.
fn names(msg: &str, path: &Path, offset: u64, what: &str) {
    let at = format!("{}, byte {offset}:", path.display());
    assert!(msg.contains(&at), "expected {at:?} in: {msg}");
    assert!(msg.contains(what), "expected {what:?} in: {msg}");
}

fn flip(path: &Path, at: u64) {
    let mut b = std::fs::read(path).unwrap();
    b[at as usize] ^= 0x40;
    std::fs::write(path, b).unwrap();
}

/// Sets the header's record count to `f(count)` and, with `fix_crc`,
/// writes the header checksum that goes with it (a deliberate edit, which
/// only the file's length can give away).
fn set_count(path: &Path, f: impl Fn(u64) -> u64, fix_crc: bool) {
    let mut b = std::fs::read(path).unwrap();
    let n = u64::from_le_bytes(b[32..40].try_into().unwrap());
    b[32..40].copy_from_slice(&f(n).to_le_bytes());
    if fix_crc {
        let crc = crc32fast::hash(&b[..76]);
        b[76..80].copy_from_slice(&crc.to_le_bytes());
    }
    std::fs::write(path, b).unwrap();
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
            (d.dump(&prefix, b).unwrap().records, d.stats().evictions)
        });
        // Each key not evicted on the way in is dumped exactly once.
        let dumped: u64 = dumps.iter().map(|d| d.0).sum();
        let evicted: u64 = dumps.iter().map(|d| d.1).sum();
        assert_eq!(dumped, KEYS - evicted, "{from:?}");
        // Into 3 ranks of 1000 buckets (10 % full: nothing evicted).
        let restored: Vec<(u64, u64, u64)> = on_ranks(3, small(to, 1000), |d, b| {
            // 4 records a batch: 64 a round, so several rounds (and
            // lock-free turns) per shard.
            let n = d.restore(&prefix, 2, b, 4).unwrap();
            assert_eq!((n.dropped, n.total_dropped), (0, 0));
            assert_eq!(n.total_restored, dumped);
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
            (n.restored, hits, d.stats().evictions)
        });
        assert_eq!(restored.iter().map(|r| r.0).sum::<u64>(), dumped);
        assert!(
            restored.iter().all(|r| r.1 == dumped && r.2 == 0),
            "{from:?}: {restored:?}"
        );
    }
    // A finished dump leaves its shards and nothing else.
    let mut left: Vec<String> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    left.sort();
    assert_eq!(left, ["poet-cache.rank0", "poet-cache.rank1"]);
}

#[test]
fn a_version_3_dump_restores_its_records_placed_by_this_builds_hash() {
    // Version 3 differs only in the hash that placed the records, and a
    // restore places each afresh: a shard whose header says 3 (its header
    // checksum made to match) restores every record.
    let dir = tempfile::tempdir().unwrap();
    let prefix = dir.path().join("v3");
    let dumped = dump_two_ranks(&prefix, 40);
    for r in 0..2 {
        let path = shard(&prefix, r);
        let mut b = std::fs::read(&path).unwrap();
        assert_eq!(u32::from_le_bytes(b[8..12].try_into().unwrap()), 4);
        b[8..12].copy_from_slice(&3u32.to_le_bytes());
        let crc = crc32fast::hash(&b[..76]);
        b[76..80].copy_from_slice(&crc.to_le_bytes());
        std::fs::write(&path, b).unwrap();
    }
    let hits = on_ranks(2, small(Variant::Lockfree, 256), |d, b| {
        let n = d.restore(&prefix, 2, b, 16).unwrap();
        assert_eq!(n.total_restored, dumped);
        b.barrier().unwrap();
        (0..40u64)
            .filter(|&i| d.read(&key(i)).unwrap() == Read::Hit(value(&key(i), 0, i, 24)))
            .count() as u64
    });
    assert!(hits.iter().all(|&h| h == dumped), "{hits:?} of {dumped}");
    // Version 2 is refused, naming the byte and the versions read.
    let path = shard(&prefix, 0);
    let mut b = std::fs::read(&path).unwrap();
    b[8..12].copy_from_slice(&2u32.to_le_bytes());
    let crc = crc32fast::hash(&b[..76]);
    b[76..80].copy_from_slice(&crc.to_le_bytes());
    std::fs::write(&path, b).unwrap();
    let msg = refused(&prefix, 2, small(Variant::Lockfree, 256), 40);
    names(&msg, &path, 8, "reads versions 3 to 4");
}

#[test]
fn a_shard_of_other_key_or_value_lengths_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let prefix = dir.path().join("d");
    dump_two_ranks(&prefix, 40);
    let mut other = small(Variant::Fine, 64);
    other.value_len = 32;
    let msg = refused(&prefix, 2, other, 0);
    names(
        &msg,
        &shard(&prefix, 0),
        24,
        "24 B values; this table takes 16 B and 32 B",
    );
}

#[test]
fn a_flipped_byte_in_a_key_a_value_or_the_header_restores_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let prefix = dir.path().join("d");
    dump_two_ranks(&prefix, 40);
    let clean = [
        std::fs::read(shard(&prefix, 0)).unwrap(),
        std::fs::read(shard(&prefix, 1)).unwrap(),
    ];
    let restore_clean = || {
        for (r, b) in clean.iter().enumerate() {
            std::fs::write(shard(&prefix, r), b).unwrap();
        }
    };
    let s1 = shard(&prefix, 1);
    // A key byte of record 0.
    flip(&s1, HEADER + 3);
    let msg = refused(&prefix, 2, small(Variant::Fine, 256), 40);
    names(
        &msg,
        &s1,
        HEADER,
        "record 0 (bytes 80..124) fails its checksum",
    );
    assert!(msg.starts_with("restore failed on rank 1: "), "{msg}");
    restore_clean();
    // A value byte of record 1: the error names record 1's first byte.
    flip(&s1, HEADER + REC + 16 + 5);
    let msg = refused(&prefix, 2, small(Variant::Fine, 256), 40);
    names(&msg, &s1, HEADER + REC, "record 1 ");
    restore_clean();
    // The stored key length, in the header.
    let s0 = shard(&prefix, 0);
    flip(&s0, 17);
    let msg = refused(&prefix, 2, small(Variant::Fine, 256), 40);
    names(&msg, &s0, 76, "the header fails its checksum");
    assert!(msg.starts_with("restore failed on rank 0: "), "{msg}");
    restore_clean();
    // Untouched, it restores.
    let r = on_ranks(2, small(Variant::Fine, 256), |d, b| {
        d.restore(&prefix, 2, b, 16).unwrap()
    });
    assert_eq!(r[0].total_restored, 40);
}

#[test]
fn a_truncated_shard_or_a_changed_record_count_restores_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let prefix = dir.path().join("d");
    dump_two_ranks(&prefix, 40);
    let s1 = shard(&prefix, 1);
    let clean = std::fs::read(&s1).unwrap();
    let len = clean.len() as u64;
    let cfg = small(Variant::Chunked, 256);
    // Cut in the middle of the last record.
    std::fs::OpenOptions::new()
        .write(true)
        .open(&s1)
        .unwrap()
        .set_len(len - 10)
        .unwrap();
    let msg = refused(&prefix, 2, cfg, 40);
    names(&msg, &s1, len - 10, "truncated");
    // Cut inside the header.
    std::fs::write(&s1, &clean[..50]).unwrap();
    names(
        &refused(&prefix, 2, cfg, 40),
        &s1,
        50,
        "inside its 80 B header",
    );
    // A lowered count with its header checksum left: the checksum.
    std::fs::write(&s1, &clean).unwrap();
    set_count(&s1, |n| n - 1, false);
    names(&refused(&prefix, 2, cfg, 40), &s1, 76, "fails its checksum");
    // Lowered with the checksum made to match: the bytes after the last
    // record the header counts.
    std::fs::write(&s1, &clean).unwrap();
    set_count(&s1, |n| n - 1, true);
    names(
        &refused(&prefix, 2, cfg, 40),
        &s1,
        len - REC,
        "its record count was lowered",
    );
    // Raised, likewise.
    std::fs::write(&s1, &clean).unwrap();
    set_count(&s1, |n| n + 1, true);
    names(
        &refused(&prefix, 2, cfg, 40),
        &s1,
        len,
        "record count raised",
    );
    // Raised past any file: no overflow, a clear error.
    set_count(&s1, |_| u64::MAX, true);
    names(
        &refused(&prefix, 2, cfg, 40),
        &s1,
        32,
        "more than any file holds",
    );
}

#[test]
fn a_missing_foreign_or_misnamed_shard_restores_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let prefix = dir.path().join("d");
    let other = dir.path().join("other");
    dump_two_ranks(&prefix, 40);
    dump_two_ranks(&other, 40);
    let cfg = small(Variant::Coarse, 256);
    let (s0, s1) = (shard(&prefix, 0), shard(&prefix, 1));
    let clean = std::fs::read(&s1).unwrap();
    // Missing.
    std::fs::remove_file(&s1).unwrap();
    let msg = refused(&prefix, 2, cfg, 40);
    names(&msg, &s1, 0, "missing: shard 1 of 2");
    // Shard 1 of another dump of the same shape.
    std::fs::copy(shard(&other, 1), &s1).unwrap();
    let msg = refused(&prefix, 2, cfg, 40);
    names(&msg, &s1, 64, "is of another dump than");
    // Shard 0 copied over shard 1.
    std::fs::copy(&s0, &s1).unwrap();
    let msg = refused(&prefix, 2, cfg, 40);
    names(
        &msg,
        &s1,
        48,
        "is shard 0 of its dump, but its name says shard 1",
    );
    // A dump of 2 ranks restored as one of 3 shards.
    std::fs::write(&s1, &clean).unwrap();
    std::fs::copy(shard(&other, 0), shard(&prefix, 2)).unwrap();
    let msg = refused(&prefix, 3, cfg, 40);
    names(&msg, &s0, 40, "give shards = 2");
    // Not a dump at all.
    std::fs::write(&s1, vec![7u8; 500]).unwrap();
    names(
        &refused(&prefix, 2, cfg, 40),
        &s1,
        0,
        "not a fabkit DHT dump",
    );
}

#[test]
fn a_failing_rank_fails_the_restore_on_every_rank_without_waiting() {
    // 3 ranks dump, rank 2's shard is damaged; 3 ranks restore. Rank 2
    // fails its check; ranks 0 and 1, whose shards are whole, return the
    // same error naming rank 2 as soon as it does, not at the timeout.
    let dir = tempfile::tempdir().unwrap();
    let prefix = dir.path().join("d");
    on_ranks(3, small(Variant::Fine, 128), |d, b| {
        for i in 0..60 {
            if i % 3 == b.rank() as u64 {
                d.write(&key(i), &value(&key(i), 0, i, 24)).unwrap();
            }
        }
        d.dump(&prefix, b).unwrap()
    });
    let s2 = shard(&prefix, 2);
    flip(&s2, HEADER + 2 * REC + 20);
    for to in [Variant::Fine, Variant::Lockfree] {
        let start = Instant::now();
        let out = on_ranks(3, small(to, 128), |d, b| {
            let e = d.restore(&prefix, 3, b, 8).unwrap_err();
            // Every rank has returned before anyone looks: nothing landed.
            b.barrier().unwrap();
            assert_eq!(d.stats().writes, 0, "rank {} wrote", b.rank());
            assert!(
                (0..60).all(|i| d.read(&key(i)).unwrap() == Read::Miss),
                "rank {} sees a restored key",
                b.rank()
            );
            let own = match &e {
                Error::Collective { failed, local, .. } => {
                    assert_eq!(failed.len(), 1, "{e}");
                    assert_eq!(failed[0].0, 2, "{e}");
                    local.as_ref().map(|l| matches!(**l, Error::Shard { .. }))
                }
                _ => panic!("not a collective error: {e:?}"),
            };
            (e.to_string(), own)
        });
        assert!(start.elapsed() < no_wait(), "{:?}", start.elapsed());
        for (r, (msg, own)) in out.iter().enumerate() {
            assert!(msg.starts_with("restore failed on rank 2: "), "{msg}");
            names(msg, &s2, HEADER + 2 * REC, "record 2 ");
            // Only the failing rank carries its own typed error.
            assert_eq!(*own, (r == 2).then_some(true), "rank {r}");
        }
    }
}

#[test]
fn a_rank_that_cannot_write_its_shard_fails_the_dump_everywhere_and_leaves_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let prefix = dir.path().join("d");
    // Rank 1's shard cannot be created: a directory stands in its way.
    let blocker = PathBuf::from(format!("{}.rank1.part", prefix.display()));
    std::fs::create_dir(&blocker).unwrap();
    let start = Instant::now();
    let out = on_ranks(3, small(Variant::Chunked, 64), |d, b| {
        d.write(&key(b.rank() as u64), &value(&key(0), 0, 0, 24))
            .unwrap();
        let e = d.dump(&prefix, b).unwrap_err();
        let io = matches!(&e, Error::Collective { local: Some(l), .. } if matches!(**l, Error::Io { .. }));
        (e.to_string(), io)
    });
    assert!(start.elapsed() < no_wait(), "{:?}", start.elapsed());
    for (r, (msg, io)) in out.iter().enumerate() {
        assert!(
            msg.starts_with(&format!(
                "dump failed on rank 1: creating {}",
                blocker.display()
            )),
            "{msg}"
        );
        assert_eq!(
            *io,
            r == 1,
            "rank {r}: the cause is an I/O error, typed as one"
        );
    }
    std::fs::remove_dir(&blocker).unwrap();
    let left: Vec<_> = std::fs::read_dir(dir.path()).unwrap().collect();
    assert!(left.is_empty(), "a failed dump left {left:?}");
}

#[test]
fn a_stale_copy_further_along_the_candidates_is_not_dumped() {
    let dir = tempfile::tempdir().unwrap();
    // 64 buckets: one block of the dump's scan. 8192: several, and a key
    // whose two candidates lie in different blocks, so the dump fetches
    // the first to judge the second.
    for (buckets, far) in [(64u64, 0u64), (8192, 2000)] {
        let place = Placement::new(1, buckets, default_candidates(buckets));
        let cand = |k: &[u8], n| place.candidate(hash_key(k), n);
        let k = (0..)
            .map(key)
            .find(|k| cand(k, 0).abs_diff(cand(k, 1)) >= far)
            .unwrap();
        for v in VARIANTS {
            let prefix = dir.path().join(format!("{v:?}-{buckets}"));
            let cfg = small(v, buckets);
            let (new, old) = (value(&k, 0, 2, 24), value(&k, 0, 1, 24));
            let dumped = on_ranks(1, cfg, |d, b| {
                // Into an empty table the key lands at its first candidate;
                // an older copy sits at its second (for chunked, another
                // chunk's start: also after the first bucket in the read's
                // order).
                d.write(&k, &new).unwrap();
                // As a writer that was cut off (a broken lock, a reused
                // bucket) can leave it.
                set_bucket(d, cand(&k, 1), &record_bucket(d, &k, &old));
                assert_eq!(d.read(&k).unwrap(), Read::Hit(new.clone()), "{v:?}");
                d.dump(&prefix, b).unwrap()
            });
            assert_eq!(dumped[0].records, 1, "{v:?} {buckets}: the key once");
            assert_eq!(dumped[0].skipped, 1, "{v:?} {buckets}: the stale copy");
            let bytes = std::fs::read(shard(&prefix, 0)).unwrap();
            assert_eq!(bytes.len() as u64, HEADER + REC, "{v:?}");
            assert_eq!(&bytes[80..96], &k[..], "{v:?}");
            assert_eq!(&bytes[96..120], &new[..], "{v:?}: the copy a read returns");
            let got = on_ranks(1, small(Variant::Lockfree, 64), |d, b| {
                d.restore(&prefix, 1, b, 8).unwrap();
                d.read(&k).unwrap()
            });
            assert_eq!(got[0], Read::Hit(new.clone()), "{v:?}");
        }
    }
}

#[test]
fn restoring_into_a_smaller_table_reports_what_it_could_not_keep() {
    const KEYS: u64 = 200;
    let dir = tempfile::tempdir().unwrap();
    for v in VARIANTS {
        let prefix = dir.path().join(format!("{v:?}"));
        let dumped: u64 = on_ranks(2, small(v, 256), |d, b| {
            if b.rank() == 1 {
                for i in 0..KEYS {
                    d.write(&key(i), &value(&key(i), 1, i, 24)).unwrap();
                }
            }
            d.dump(&prefix, b).unwrap().total_records
        })[0];
        // One rank of 64 buckets cannot hold them all.
        let out = on_ranks(1, small(v, 64), |d, b| {
            let r = d.restore(&prefix, 2, b, 32).unwrap();
            let hits = (0..KEYS)
                .filter(|i| matches!(d.read(&key(*i)).unwrap(), Read::Hit(_)))
                .count() as u64;
            (r, hits)
        });
        let (r, hits) = out[0];
        assert!(r.dropped > 0, "{v:?}: {r:?}");
        assert_eq!(r.restored + r.dropped, dumped, "{v:?}: {r:?}");
        assert_eq!(
            (r.total_restored, r.total_dropped),
            (r.restored, r.dropped),
            "{v:?}"
        );
        // What it says it kept is what the table holds.
        assert_eq!(hits, r.restored, "{v:?}: {r:?}");
    }
}

#[test]
fn every_header_byte_flipped_is_refused() {
    // Any one byte of the header changed: refused, and reported as what
    // it is (not a dump at all for the magic, damage for the rest: the
    // checksum is checked before any field it covers).
    let dir = tempfile::tempdir().unwrap();
    let prefix = dir.path().join("d");
    dump_two_ranks(&prefix, 40);
    let s0 = shard(&prefix, 0);
    let clean = std::fs::read(&s0).unwrap();
    for at in 0..HEADER {
        flip(&s0, at);
        let msg = refused(&prefix, 2, small(Variant::Fine, 256), 40);
        if at < 8 {
            names(&msg, &s0, 0, "not a fabkit DHT dump shard");
        } else {
            names(&msg, &s0, 76, "the header fails its checksum");
        }
        std::fs::write(&s0, &clean).unwrap();
    }
}

/// A single-rank table of `cfg`, and its bootstrap, for tests that need
/// the table mutably.
fn one_rank(cfg: Config) -> (Dht<LocalTransport>, fabkit_core::bootstrap::ThreadBootstrap) {
    let boot = ThreadGroup::members(1, BOOT_TIMEOUT).pop().unwrap();
    let t = LocalTransport::group(1, cfg.region_len()).pop().unwrap();
    (Dht::create(t, cfg, &boot).unwrap(), boot)
}

/// The whole bytes of bucket `bucket` of rank 0.
fn bucket_bytes(d: &Dht<LocalTransport>, bucket: u64) -> Vec<u8> {
    let l = d.config().layout();
    let mut b = vec![0u8; l.bucket_len];
    d.transport()
        .execute(&mut [Op::Read {
            from: Remote::new(0, l.offset(bucket)),
            into: &mut b,
        }])
        .unwrap();
    b
}

/// Overwrites the whole of bucket `bucket` of rank 0 (lock or state word
/// included), as damage or a dead writer can leave it.
fn set_bucket(d: &Dht<LocalTransport>, bucket: u64, bytes: &[u8]) {
    let at = d.config().layout().offset(bucket);
    d.transport()
        .execute(&mut [Op::Write {
            to: Remote::new(0, at),
            from: bytes,
            completion: Completion::Delivery,
        }])
        .unwrap();
}

/// The records of a shard, checked by nothing but their layout.
fn records(path: &Path) -> Vec<(Vec<u8>, Vec<u8>)> {
    let b = std::fs::read(path).unwrap();
    b[HEADER as usize..]
        .chunks_exact(REC as usize)
        .map(|r| (r[..16].to_vec(), r[16..40].to_vec()))
        .collect()
}

/// Dumps `d` and asserts the dump is what reads return: each key found in
/// any bucket is in the dump, once, with its value, if and only if a read
/// of it is a hit. Reads come after the dump (a lock-free read marks
/// damage invalid). Returns the dumped records.
fn dump_is_what_reads_return(
    d: &Dht<LocalTransport>,
    boot: &dyn Bootstrap,
    prefix: &Path,
    what: &str,
) -> Vec<(Vec<u8>, Vec<u8>)> {
    let l = d.config().layout();
    let dumped = d.dump(prefix, boot).unwrap();
    let recs = records(&shard(prefix, 0));
    assert_eq!(recs.len() as u64, dumped.records, "{what}");
    let mut keys: Vec<Vec<u8>> = (0..d.config().buckets)
        .map(|x| {
            let b = bucket_bytes(d, x);
            b[l.key..l.key + 16].to_vec()
        })
        .collect();
    keys.sort();
    keys.dedup();
    for k in keys {
        let dumped: Vec<_> = recs.iter().filter(|r| r.0 == k).collect();
        match d.read(&k) {
            Ok(Read::Hit(v)) => {
                assert_eq!(dumped.len(), 1, "{what}: key {k:?} once");
                assert_eq!(dumped[0].1, v, "{what}: the value a read returns");
            }
            other => assert!(
                dumped.is_empty(),
                "{what}: key {k:?} dumped though a read gives {other:?}"
            ),
        }
    }
    recs
}

/// Bucket bytes holding `key` and `value` as a whole record.
fn record_bucket(d: &Dht<LocalTransport>, key: &[u8], value: &[u8]) -> Vec<u8> {
    let l = d.config().layout();
    let mut b = vec![0u8; l.bucket_len];
    let s = l.data_start();
    l.encode(key, value, &mut b[s..s + l.data_len()]);
    if d.config().variant == Variant::Chunked {
        b[..8].copy_from_slice(&STATE_FULL.to_le_bytes());
    }
    b
}

#[test]
fn the_dump_holds_what_reads_return_whatever_lies_ahead_of_a_record() {
    let dir = tempfile::tempdir().unwrap();
    const B: u64 = 64;
    let place = Placement::new(1, B, default_candidates(B));
    let cand = |k: &[u8], n| place.candidate(hash_key(k), n);
    // Two candidates apart by more than a chunk, so that for chunked the
    // second candidate's bucket is not in the first chunk.
    let chunk = u64::from(small(Variant::Chunked, B).chunk);
    let k = (0..)
        .map(key)
        .find(|k| {
            let (a, b) = (cand(k, 0), cand(k, 1));
            (b + B - a) % B >= chunk
        })
        .unwrap();
    let other = key(999_999);
    let (v1, v2) = (value(&k, 0, 1, 24), value(&k, 0, 2, 24));
    let mut case = 0;
    for v in VARIANTS {
        // Each layout: what to put at k's first and second candidates.
        type Setup = fn(&Dht<LocalTransport>, &mut Vec<u8>);
        let damaged: Setup = |_, b| {
            let n = b.len();
            b[n - 6] ^= 0x10;
        };
        let invalid_empty: Setup = |d, b| {
            let l = d.config().layout();
            b.fill(0);
            if let Some(m) = l.meta {
                b[m] = fabkit_dht::layout::INVALID;
            }
        };
        let held: Setup = |_, b| {
            // A tagged lock word: held by rank 0 (fine's bucket lock).
            b[..8].copy_from_slice(&((1u64 << 16) | 1).to_le_bytes());
        };
        /// A name; what is at k's first candidate (a key, made into
        /// what by a setup); the setup of k's own record at its second.
        type Layout<'a> = (&'a str, Option<(&'a [u8], Option<Setup>)>, Option<Setup>);
        let layouts: Vec<Layout> = vec![
            ("empty ahead", None, None),
            ("another key ahead", Some((&other, None)), None),
            (
                "another key damaged ahead",
                Some((&other, Some(damaged))),
                None,
            ),
            ("the key damaged ahead", Some((&k, Some(damaged))), None),
            (
                "an invalid empty bucket ahead",
                Some((&other, Some(invalid_empty))),
                None,
            ),
            (
                "another key under a held lock ahead",
                Some((&other, Some(held))),
                None,
            ),
            (
                "the record under a held lock",
                Some((&other, None)),
                Some(held),
            ),
        ];
        for (what, ahead, own) in layouts {
            if (what.contains("held") && v != Variant::Fine)
                || (what.contains("invalid") && v != Variant::Lockfree)
            {
                continue;
            }
            let what = format!("{v:?}: {what}");
            let (mut d, boot) = one_rank(small(v, B));
            d.set_deadline(Duration::from_millis(20)).unwrap();
            if let Some((ka, f)) = ahead {
                let mut b = record_bucket(&d, ka, &v1);
                if let Some(f) = f {
                    f(&d, &mut b);
                }
                set_bucket(&d, cand(&k, 0), &b);
            }
            let mut b = record_bucket(&d, &k, &v2);
            if let Some(f) = own {
                f(&d, &mut b);
            }
            set_bucket(&d, cand(&k, 1), &b);
            let prefix = dir.path().join(format!("case{case}"));
            case += 1;
            dump_is_what_reads_return(&d, &boot, &prefix, &what);
        }
    }
    assert_eq!(case, 19, "layouts tried");
}

#[test]
fn a_chunk_that_wraps_is_walked_across_the_region_end() {
    // A key whose first chunk starts at the last bucket: its chunk goes on
    // at bucket 0, where its record is, behind another key's.
    const B: u64 = 64;
    let dir = tempfile::tempdir().unwrap();
    let place = Placement::new(1, B, default_candidates(B));
    let k = (0..)
        .map(key)
        .find(|k| place.candidate(hash_key(k), 0) == B - 1)
        .unwrap();
    let (d, boot) = one_rank(small(Variant::Chunked, B));
    let v = value(&k, 0, 7, 24);
    set_bucket(&d, B - 1, &record_bucket(&d, &key(424_242), &v));
    set_bucket(&d, 0, &record_bucket(&d, &k, &v));
    assert_eq!(d.read(&k).unwrap(), Read::Hit(v.clone()));
    let recs = dump_is_what_reads_return(&d, &boot, &dir.path().join("w"), "wrapped");
    assert!(recs.contains(&(k, v)), "the wrapped key is dumped");
}

#[test]
fn a_held_coarse_region_lock_refuses_the_dump_and_names_its_holder() {
    let dir = tempfile::tempdir().unwrap();
    let prefix = dir.path().join("d");
    let out = on_ranks(2, small(Variant::Coarse, 64), |d, b| {
        d.write(&key(b.rank() as u64), &value(&key(0), 0, 0, 24))
            .unwrap();
        b.barrier().unwrap();
        if b.rank() == 1 {
            // As a writer on rank 0 that died holding rank 1's region.
            let w = ((1u64 << 16) | 3).to_le_bytes();
            d.transport()
                .execute(&mut [Op::Write {
                    to: Remote::new(1, 0),
                    from: &w,
                    completion: Completion::Delivery,
                }])
                .unwrap();
        }
        b.barrier().unwrap();
        d.dump(&prefix, b).unwrap_err().to_string()
    });
    for msg in &out {
        assert!(
            msg.starts_with("dump failed on rank 1: rank 1: its region lock is held by rank 0"),
            "{msg}"
        );
    }
    let left: Vec<_> = std::fs::read_dir(dir.path()).unwrap().collect();
    assert!(left.is_empty(), "a refused dump left {left:?}");
}

#[test]
fn a_rank_failing_while_it_writes_fails_the_restore_on_every_rank() {
    use fabkit_dht::transport::faulty::{Faults, FaultyTransport};
    let dir = tempfile::tempdir().unwrap();
    let prefix = dir.path().join("d");
    dump_two_ranks(&prefix, 60);
    for to in [Variant::Lockfree, Variant::Fine] {
        let cfg = small(to, 256);
        let ts = LocalTransport::group(2, cfg.region_len());
        let boots = ThreadGroup::members(2, BOOT_TIMEOUT);
        let start = Instant::now();
        let out: Vec<(String, bool)> = std::thread::scope(|s| {
            let hs: Vec<_> = ts
                .into_iter()
                .zip(&boots)
                .map(|(t, b)| {
                    let prefix = &prefix;
                    s.spawn(move || {
                        let t = FaultyTransport::new(t, Faults::seeded(1));
                        let d = Dht::create(t, cfg, b).unwrap();
                        if b.rank() == 1 {
                            // Rank 1's third op from here fails: inside its
                            // first write batch (checking issues no op).
                            d.transport().reset_count();
                            d.transport().set_fail_op(Some(3));
                        }
                        let e = d.restore(prefix, 2, b, 4).unwrap_err();
                        let typed = matches!(&e, Error::Collective { failed, .. }
                            if failed.len() == 1 && failed[0].0 == 1);
                        (e.to_string(), typed)
                    })
                })
                .collect();
            hs.into_iter().map(|h| h.join().unwrap()).collect()
        });
        assert!(start.elapsed() < no_wait(), "{:?}", start.elapsed());
        for (r, (msg, typed)) in out.iter().enumerate() {
            assert!(
                msg.starts_with("restore failed on rank 1: "),
                "{to:?} rank {r}: {msg}"
            );
            assert_eq!(msg, &out[0].0, "{to:?}: one message on every rank");
            assert!(typed, "{to:?} rank {r}: {msg}");
        }
    }
}

#[test]
fn a_failed_publish_keeps_the_previous_dump() {
    let dir = tempfile::tempdir().unwrap();
    let prefix = dir.path().join("d");
    dump_two_ranks(&prefix, 40);
    let before: Vec<Vec<u8>> = (0..2)
        .map(|r| std::fs::read(shard(&prefix, r)).unwrap())
        .collect();
    // Rank 1 cannot keep its previous shard: a directory is where the
    // link would go. Rank 0 could; it must put its own back.
    let blocker = PathBuf::from(format!("{}.rank1.prev", prefix.display()));
    std::fs::create_dir(&blocker).unwrap();
    let out = on_ranks(2, small(Variant::Lockfree, 256), |d, b| {
        d.write(&key(500 + b.rank() as u64), &value(&key(0), 0, 0, 24))
            .unwrap();
        d.dump(&prefix, b).unwrap_err().to_string()
    });
    for msg in &out {
        assert!(msg.starts_with("dump failed on rank 1: removing "), "{msg}");
    }
    std::fs::remove_dir(&blocker).unwrap();
    for (r, was) in before.iter().enumerate() {
        assert_eq!(
            &std::fs::read(shard(&prefix, r)).unwrap(),
            was,
            "rank {r}'s previous shard"
        );
    }
    let mut left: Vec<String> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    left.sort();
    assert_eq!(left, ["d.rank0", "d.rank1"]);
}

#[test]
fn a_dump_by_fewer_ranks_removes_the_shards_it_does_not_replace() {
    let dir = tempfile::tempdir().unwrap();
    let prefix = dir.path().join("d");
    on_ranks(3, small(Variant::Fine, 64), |d, b| {
        d.dump(&prefix, b).unwrap()
    });
    dump_two_ranks(&prefix, 40);
    assert!(
        !shard(&prefix, 2).exists(),
        "shard 2 of the older dump is left"
    );
}

#[test]
fn a_fifo_a_huge_or_a_disagreeing_shard_count_fails_every_rank_without_waiting() {
    let dir = tempfile::tempdir().unwrap();
    let prefix = dir.path().join("d");
    dump_two_ranks(&prefix, 40);
    let cfg = small(Variant::Fine, 256);
    // More shards than any dump has: refused before anything is allocated.
    let msg = refused(&prefix, usize::MAX, cfg, 40);
    assert!(msg.contains("a dump has at most 65536"), "{msg}");
    // Ranks asked for different counts: every rank fails, none waits.
    let start = Instant::now();
    let out = on_ranks(2, cfg, |d, b| {
        let shards = 2 + b.rank();
        d.restore(&prefix, shards, b, 16).unwrap_err().to_string()
    });
    assert!(start.elapsed() < no_wait(), "{:?}", start.elapsed());
    assert_eq!(out[0], out[1], "one error on every rank");
    // A FIFO where a shard should be: opening it would block for ever.
    let s1 = shard(&prefix, 1);
    std::fs::remove_file(&s1).unwrap();
    let made = std::process::Command::new("mkfifo")
        .arg(&s1)
        .status()
        .unwrap();
    assert!(made.success(), "mkfifo {}", s1.display());
    let msg = refused(&prefix, 2, cfg, 40);
    names(&msg, &s1, 0, "is not a regular file");
}

#[test]
fn a_prefix_naming_a_directory_is_refused_everywhere_and_shards_are_private() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    let slash = PathBuf::from(format!("{}/", dir.path().display()));
    for prefix in [dir.path().to_path_buf(), slash] {
        let out = on_ranks(2, small(Variant::Lockfree, 64), |d, b| {
            d.dump(&prefix, b).unwrap_err().to_string()
        });
        for msg in out {
            assert!(msg.contains("names a directory"), "{msg}");
        }
    }
    let left: Vec<_> = std::fs::read_dir(dir.path()).unwrap().collect();
    assert!(left.is_empty(), "a refused dump wrote {left:?}");
    // The shards hold the table's data: this user's alone, whatever the umask.
    let prefix = dir.path().join("d");
    dump_two_ranks(&prefix, 50);
    for r in 0..2 {
        let mode = std::fs::metadata(shard(&prefix, r))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o600, "rank {r}'s shard");
    }
}
