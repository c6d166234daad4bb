//! The same-node shortcut: every variant over ShmTransport, with all ranks
//! on one node (CPU atomics on mapped regions) and with one rank treated as
//! remote (this machine has no second node, so establish_sharing stands in
//! for it): then reads and writes mix the shortcut and the fabric, and all
//! atomics go through the provider.

mod common;

use std::time::Duration;

use common::{key, small, value, value_ok, VARIANTS};
use fabkit_core::bootstrap::{Bootstrap, ThreadGroup};
use fabkit_dht::transport::shm::ShmTransport;
use fabkit_dht::{Dht, Read};
use fabkit_fabric::RankConfig;

fn run(provider: &str, sharing: Option<&[&[bool]]>) {
    for variant in VARIANTS {
        let cfg = small(variant, 256);
        let boots = ThreadGroup::members(3, Duration::from_secs(30));
        std::thread::scope(|s| {
            for b in &boots {
                s.spawn(move || {
                    let mut rc = RankConfig::new(provider);
                    rc.region_len = cfg.region_len();
                    rc.atomics = variant.needs_atomics();
                    let t = match sharing {
                        None => ShmTransport::establish(rc, b).unwrap(),
                        Some(m) => ShmTransport::establish_sharing(rc, b, m[b.rank()]).unwrap(),
                    };
                    assert_eq!(t.cpu_atomics(), sharing.is_none());
                    let d = Dht::create(&t, cfg, b).unwrap();
                    let me = b.rank() as u64;
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
                        for i in 0..40 {
                            let k = key(r * 100 + i);
                            assert_eq!(
                                d.read(&k).unwrap(),
                                Read::Hit(value(&k, r, 1, 24)),
                                "{provider} {variant:?}"
                            );
                        }
                    }
                    for i in 0..40u64 {
                        let k = key(9000 + i % 2);
                        d.write(&k, &value(&k, me, i, 24)).unwrap();
                        if let Read::Hit(v) = d.read(&k).unwrap() {
                            assert!(value_ok(&k, &v), "{provider} {variant:?}: torn value");
                        }
                    }
                    d.free(b).unwrap();
                    t.finish(b).unwrap();
                });
            }
        });
    }
}

#[test]
fn every_variant_with_all_ranks_on_one_node() {
    run("shm", None);
}

#[test]
fn every_variant_with_a_remote_rank_mixing_shortcut_and_fabric() {
    // Ranks 0 and 1 share a node; rank 2 is "elsewhere".
    let m: [&[bool]; 3] = [
        &[true, true, false],
        &[true, true, false],
        &[false, false, true],
    ];
    run("tcp;ofi_rxm", Some(&m));
}

/// Removes a file made by hand in /dev/shm, also when the test fails.
struct Unlink(std::path::PathBuf);

impl Drop for Unlink {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

#[test]
fn a_start_reaps_the_segment_a_killed_rank_left_and_keeps_live_ones() {
    use fabkit_fabric::shm::{parse_name, segment_name, Creator, SharedSegment, SHM_DIR};
    // A process that has exited (waited for, so its pid is free): what a
    // rank killed between creating its segment and unlinking it leaves is
    // a segment named after it. The file is made by hand; its name is the
    // one such a rank would have made.
    let mut child = std::process::Command::new("true").spawn().unwrap();
    let dead_pid = child.id();
    child.wait().unwrap();
    let me = Creator::current();
    let dead = format!(
        "fabkit.{}.{}.{dead_pid}.{}.dht-r1-0",
        me.job, me.pid_ns, me.start
    );
    assert_eq!(parse_name(&dead).unwrap().0.pid, dead_pid);
    let dead_path = std::path::Path::new(SHM_DIR).join(&dead);
    let _g = Unlink(dead_path.clone());
    std::fs::write(&dead_path, [0u8; 64]).unwrap();
    // A live process's (ours): kept.
    let live = SharedSegment::create(&segment_name("test-live").unwrap(), 64).unwrap();
    let live_path = std::path::Path::new(SHM_DIR).join(&live.name()[1..]);

    let boots = ThreadGroup::members(2, Duration::from_secs(30));
    std::thread::scope(|s| {
        for b in &boots {
            s.spawn(move || {
                let mut rc = RankConfig::new("shm");
                rc.region_len = 4096;
                let t = ShmTransport::establish(rc, b).unwrap();
                t.finish(b).unwrap();
            });
        }
    });
    assert!(!dead_path.exists(), "the dead rank's segment was reaped");
    assert!(live_path.exists(), "a live process's segment is kept");
    drop(live);
    assert!(!live_path.exists());
}

#[test]
fn with_every_region_mapped_there_is_no_fabric_and_chunked_reads_one_chunk_a_round() {
    use fabkit_dht::transport::recording::RecordingTransport;
    use fabkit_dht::transport::{OpKind, Transport};
    use fabkit_dht::Variant;
    let cfg = small(Variant::Chunked, 256);
    let boots = ThreadGroup::members(2, Duration::from_secs(30));
    std::thread::scope(|s| {
        for b in &boots {
            s.spawn(move || {
                let mut rc = RankConfig::new("shm");
                rc.region_len = cfg.region_len();
                rc.atomics = true;
                let t = ShmTransport::establish(rc, b).unwrap();
                assert!(t.fabric().is_none(), "every rank is on this node");
                assert!(t.caps().near && t.cpu_atomics());
                let rec = RecordingTransport::new(&t);
                let d = Dht::create(&rec, cfg, b).unwrap();
                let k = key(b.rank() as u64);
                d.write(&k, &value(&k, 0, 1, 24)).unwrap();
                // Chunk, claim, fill, publish: one read in the first round,
                // where a transport with round trips reads two chunks.
                let kinds = rec.kinds();
                assert_eq!(kinds[0], vec![OpKind::Read], "{kinds:?}");
                assert_eq!(kinds.len(), 4, "{kinds:?}");
                rec.clear();
                assert_eq!(d.read(&k).unwrap(), Read::Hit(value(&k, 0, 1, 24)));
                assert_eq!(rec.kinds(), vec![vec![OpKind::Read]]);
                d.free(b).unwrap();
                t.finish(b).unwrap();
            });
        }
    });
}
