//! Batches in flight on lanes ([`Rank::post`], [`Rank::ready`],
//! [`Rank::complete`]), for real, on every provider that offers RMA and
//! atomics here: results land in the batch they belong to whatever order
//! lanes complete in, a batch larger than a round still runs, misuse is
//! refused, and a lane dropped in flight leaves the rank usable.

mod common;

use std::time::{Duration, Instant};

use common::{providers, with_ranks_boot};
use fabkit_fabric::{Completion, Op, Rank, RankConfig, Remote};

/// `len` bytes that say which rank and which record they are.
fn record(rank: usize, i: usize, len: usize) -> Vec<u8> {
    (0..len)
        .map(|j| (j * 13 + i * 7 + rank * 101 + 1) as u8)
        .collect()
}

/// Waits, yielding, until `lane`'s batch is ready; fails the test after
/// `limit` (the batch is then lost, not the CPU).
fn until_ready(r: &Rank, lane: &fabkit_fabric::Lane, limit: Duration) {
    let end = Instant::now() + limit;
    while !r.ready(lane) {
        assert!(Instant::now() < end, "a posted batch never became ready");
        std::thread::yield_now();
    }
}

#[test]
fn lanes_complete_in_any_order_and_each_batch_gets_its_own_results() {
    for prov in providers() {
        let prov = prov.as_str();
        let mut cfg = RankConfig::new(prov);
        cfg.window = 16;
        with_ranks_boot(2, cfg, |r, boot| {
            let (me, peer) = (r.rank(), 1 - r.rank());
            assert!(r.lanes() >= 1, "{prov}");
            let mut lanes: Vec<_> = (0..3).map(|_| r.lane().unwrap()).collect();
            // Each rank writes 3 x 8 records of 192 B into its half of the
            // peer's region, one lane a group, and completes them last
            // lane first.
            let recs: Vec<Vec<u8>> = (0..24).map(|i| record(me, i, 192)).collect();
            let at = |i: usize| Remote::new(peer, (me * 65536 + i * 192) as u64);
            let writes = |l: usize| -> Vec<Op<'_>> {
                (l * 8..l * 8 + 8)
                    .map(|i| Op::Write {
                        to: at(i),
                        from: &recs[i],
                        completion: Completion::Delivery,
                    })
                    .collect()
            };
            let mut batches: Vec<Vec<Op>> = (0..3).map(writes).collect();
            for (lane, ops) in lanes.iter_mut().zip(&mut batches) {
                r.post(lane, ops).unwrap();
            }
            for (lane, ops) in lanes.iter_mut().zip(&mut batches).rev() {
                r.complete(lane, ops).unwrap();
            }
            // Reads of each group on its own lane, plus a fetch-add each,
            // completed in another order: every buffer holds its own group.
            let mut back = vec![vec![0u8; 192]; 24];
            let mut olds = [0u64; 3];
            let counter = Remote::new(peer, (131072 + me * 8) as u64);
            {
                let mut parts: Vec<&mut [Vec<u8>]> = back.chunks_mut(8).collect();
                let mut reads: Vec<Vec<Op>> = Vec::new();
                for (l, (part, old)) in parts.iter_mut().zip(olds.iter_mut()).enumerate() {
                    let mut ops: Vec<Op> = part
                        .iter_mut()
                        .enumerate()
                        .map(|(j, into)| Op::Read {
                            from: at(l * 8 + j),
                            into,
                        })
                        .collect();
                    ops.push(Op::FetchAdd {
                        at: counter,
                        delta: 1,
                        old,
                    });
                    reads.push(ops);
                }
                for (lane, ops) in lanes.iter_mut().zip(&mut reads) {
                    r.post(lane, ops).unwrap();
                }
                for l in [1, 0, 2] {
                    until_ready(r, &lanes[l], Duration::from_secs(30));
                    r.complete(&mut lanes[l], &mut reads[l]).unwrap();
                }
            }
            assert_eq!(back, recs, "{prov}: a read's data landed in another batch");
            let mut seen = olds.to_vec();
            seen.sort_unstable();
            assert_eq!(seen, [0, 1, 2], "{prov}: fetch-add results {olds:?}");
            boot.barrier().unwrap();
        });
    }
}

#[test]
fn a_batch_larger_than_a_round_runs_at_post_and_completes_with_its_outcome() {
    for prov in providers() {
        let prov = prov.as_str();
        let mut cfg = RankConfig::new(prov);
        cfg.window = 4;
        cfg.staging_len = 4096;
        with_ranks_boot(2, cfg, |r, boot| {
            let (me, peer) = (r.rank(), 1 - r.rank());
            let mut lane = r.lane().unwrap();
            let recs: Vec<Vec<u8>> = (0..40).map(|i| record(me, i, 300)).collect();
            let at = |i: usize| Remote::new(peer, (me * 65536 + i * 300) as u64);
            let mut ops: Vec<Op> = recs
                .iter()
                .enumerate()
                .map(|(i, rec)| Op::Write {
                    to: at(i),
                    from: rec,
                    completion: Completion::Delivery,
                })
                .collect();
            r.post(&mut lane, &mut ops).unwrap();
            assert!(r.ready(&lane), "{prov}: ran at post, so ready");
            r.complete(&mut lane, &mut ops).unwrap();
            let mut back = vec![vec![0u8; 300]; 40];
            let mut reads: Vec<Op> = back
                .iter_mut()
                .enumerate()
                .map(|(i, into)| Op::Read { from: at(i), into })
                .collect();
            r.post(&mut lane, &mut reads).unwrap();
            r.complete(&mut lane, &mut reads).unwrap();
            assert_eq!(back, recs, "{prov}");
            // Out of bounds: refused at post, nothing in flight after.
            let mut bad = [Op::Read {
                from: Remote::new(peer, u64::MAX - 4),
                into: &mut [0u8; 8],
            }];
            assert!(r.post(&mut lane, &mut bad).is_err(), "{prov}");
            assert!(r.complete(&mut lane, &mut bad).is_err(), "{prov}");
            boot.barrier().unwrap();
        });
    }
}

#[test]
fn misuse_of_a_lane_is_refused_with_what_to_do() {
    let cfg = RankConfig::new("shm");
    // Both ranks make a lane; rank 0 tries rank 1's on itself.
    let lanes = std::sync::Mutex::new(Vec::new());
    with_ranks_boot(2, cfg, |r, boot| {
        let peer = 1 - r.rank();
        let mut lane = r.lane().unwrap();
        let mut word = 0u64;
        let mut idle = [Op::Fetch {
            at: Remote::new(peer, 0),
            value: &mut word,
        }];
        let e = r.complete(&mut lane, &mut idle).unwrap_err().to_string();
        assert!(e.contains("nothing posted"), "{e}");
        r.post(&mut lane, &mut idle).unwrap();
        let mut v2 = 0u64;
        let mut again = [Op::Fetch {
            at: Remote::new(peer, 0),
            value: &mut v2,
        }];
        let e = r.post(&mut lane, &mut again).unwrap_err().to_string();
        assert!(e.contains("complete it first"), "{e}");
        // Completed with other ops than posted: said, not delivered.
        let e = r.complete(&mut lane, &mut []).unwrap_err().to_string();
        assert!(e.contains("not the 1 posted"), "{e}");
        // A read completed into a shorter buffer than it was posted with:
        // said, not a panic, nothing written past it.
        let mut long = [0u8; 16];
        let mut read = [Op::Read {
            from: Remote::new(peer, 64),
            into: &mut long,
        }];
        r.post(&mut lane, &mut read).unwrap();
        let mut short = [0u8; 8];
        let mut shorter = [Op::Read {
            from: Remote::new(peer, 64),
            into: &mut short,
        }];
        let e = r.complete(&mut lane, &mut shorter).unwrap_err().to_string();
        assert!(e.contains("other kinds or lengths"), "{e}");
        lanes.lock().unwrap().push((r.rank(), lane));
        boot.barrier().unwrap();
        if r.rank() == 0 {
            let mut all = lanes.lock().unwrap();
            let theirs = &mut all.iter_mut().find(|(k, _)| *k == 1).unwrap().1;
            let e = r.post(theirs, &mut again).unwrap_err().to_string();
            assert!(e.contains("another rank"), "{e}");
        }
        boot.barrier().unwrap();
        // Lanes go before their ranks.
        lanes.lock().unwrap().clear();
        boot.barrier().unwrap();
    });
}

#[test]
fn a_lane_dropped_in_flight_leaves_the_rank_whole() {
    for prov in providers() {
        let prov = prov.as_str();
        with_ranks_boot(2, RankConfig::new(prov), |r, boot| {
            let peer = 1 - r.rank();
            let mut back = vec![vec![0u8; 192]; 32];
            {
                let mut lane = r.lane().unwrap();
                let mut reads: Vec<Op> = back
                    .iter_mut()
                    .enumerate()
                    .map(|(i, into)| Op::Read {
                        from: Remote::new(peer, (i * 192) as u64),
                        into,
                    })
                    .collect();
                r.post(&mut lane, &mut reads).unwrap();
                // Dropped here, its reads perhaps still in flight.
            }
            // Whatever had not completed is counted lost until it does;
            // the rank goes on, and its slots come back.
            let w = Remote::new(peer, 8192 + 8 * r.rank() as u64);
            assert_eq!(r.fetch_add(w, 5).unwrap(), 0, "{prov}");
            let end = Instant::now() + Duration::from_secs(30);
            while r.lost_ops() > 0 {
                assert!(Instant::now() < end, "{prov}: lost ops never came back");
                r.fetch(w).unwrap();
            }
            assert!(r.retired_buffers() <= 1, "{prov}");
            boot.barrier().unwrap();
        });
    }
}
