//! RMA and atomics between in-process ranks, for real, on every provider
//! that offers them here.

mod common;

use common::{providers, with_ranks};
use fabkit_fabric::info::{self, Caps, Hints};
use fabkit_fabric::{Completion, Op, Ordering, OrderingStats, RankConfig, Remote};

fn pattern(rank: usize, len: usize) -> Vec<u8> {
    (0..len).map(|i| (i * 31 + rank * 7 + 1) as u8).collect()
}

#[test]
fn write_then_read_back_every_provider() {
    for prov in providers() {
        let prov = prov.as_str();
        let sizes = [1usize, 8, 184, 4096, 65536, 300_000];
        with_ranks(2, RankConfig::new(prov), |r| {
            let peer = 1 - r.rank();
            let mut off = 0u64;
            for &len in &sizes {
                let data = pattern(r.rank(), len);
                // Each rank writes into its own half of the peer's region.
                let base = (r.rank() as u64) * (1 << 19);
                r.write(Remote::new(peer, base + off), &data).unwrap();
                let mut back = vec![0u8; len];
                r.read(Remote::new(peer, base + off), &mut back).unwrap();
                assert_eq!(back, data, "{prov}: {len} B round trip");
                off += len as u64;
            }
        });
    }
}

#[test]
fn every_atomic_every_provider() {
    for prov in providers() {
        let prov = prov.as_str();
        with_ranks(2, RankConfig::new(prov), |r| {
            let peer = 1 - r.rank();
            let w = Remote::new(peer, 8 * r.rank() as u64);
            assert_eq!(r.fetch(w).unwrap(), 0, "{prov}: fresh region is zero");
            assert_eq!(r.swap(w, 40).unwrap(), 0);
            assert_eq!(r.fetch_add(w, 2).unwrap(), 40);
            assert_eq!(
                r.compare_and_swap(w, 1, 99).unwrap(),
                42,
                "{prov}: failed CAS"
            );
            assert_eq!(r.fetch(w).unwrap(), 42, "{prov}: failed CAS must not store");
            assert_eq!(r.compare_and_swap(w, 42, 7).unwrap(), 42);
            assert_eq!(r.fetch(w).unwrap(), 7, "{prov}: successful CAS stores");
            assert_eq!(r.fetch_add(w, u64::MAX).unwrap(), 7, "wrapping add");
            assert_eq!(r.fetch(w).unwrap(), 6);
        });
    }
}

#[test]
fn batches_with_a_small_window_keep_every_result() {
    for prov in providers() {
        let prov = prov.as_str();
        let mut cfg = RankConfig::new(prov);
        cfg.window = 4;
        cfg.staging_len = 4096; // forces many rounds and split transfers
        with_ranks(2, cfg, |r| {
            let peer = 1 - r.rank();
            let base = r.rank() as u64 * 65536;
            let records: Vec<Vec<u8>> = (0..100).map(|i| pattern(i, 184)).collect();
            let mut ops: Vec<Op> = records
                .iter()
                .enumerate()
                .map(|(i, rec)| Op::Write {
                    to: Remote::new(peer, base + (i * 184) as u64),
                    from: rec,
                    completion: Completion::Transmit,
                })
                .collect();
            r.execute(&mut ops).unwrap();
            let mut back = vec![vec![0u8; 184]; 100];
            let mut olds = [0u64; 10];
            let mut ops: Vec<Op> = back
                .iter_mut()
                .enumerate()
                .map(|(i, b)| Op::Read {
                    from: Remote::new(peer, base + (i * 184) as u64),
                    into: b,
                })
                .collect();
            // Atomics ride in the same batch, on words after the records.
            let counter = Remote::new(peer, base + 60_000);
            ops.extend(olds.iter_mut().map(|o| Op::FetchAdd {
                at: counter,
                delta: 1,
                old: o,
            }));
            r.execute(&mut ops).unwrap();
            drop(ops);
            assert_eq!(back, records, "{prov}");
            let mut seen = olds.to_vec();
            seen.sort_unstable();
            assert_eq!(
                seen,
                (0..10).collect::<Vec<u64>>(),
                "{prov}: each old value once"
            );
            // A transfer larger than the staging buffer is split and reassembled.
            let big = pattern(3, 20_000);
            r.write(Remote::new(peer, base + 30_000), &big).unwrap();
            let mut bigback = vec![0u8; 20_000];
            r.read(Remote::new(peer, base + 30_000), &mut bigback)
                .unwrap();
            assert_eq!(bigback, big);
        });
    }
}

#[test]
fn atomics_on_own_region_go_through_the_provider() {
    for prov in providers() {
        let prov = prov.as_str();
        let results = with_ranks(2, RankConfig::new(prov), |r| {
            let me = Remote::new(r.rank(), 0);
            r.fetch_add(me, 5).unwrap();
            r.fetch(me).unwrap()
        });
        assert_eq!(results, vec![5, 5], "{prov}");
    }
}

#[test]
fn batched_messages_arrive_whole_on_every_provider() {
    for prov in providers() {
        let prov = prov.as_str();
        with_ranks(2, RankConfig::new(prov), |r| {
            let sizes = [0usize, 1, 184, 4096, 30_000];
            if r.rank() == 0 {
                let msgs: Vec<Vec<u8>> = sizes.iter().map(|&n| pattern(n, n)).collect();
                let mut ops: Vec<Op> = msgs.iter().map(|m| Op::Send { to: 1, data: m }).collect();
                r.execute(&mut ops).unwrap();
            } else {
                let mut bufs = vec![vec![0u8; 32_768]; sizes.len()];
                let mut lens = vec![0usize; sizes.len()];
                let mut ops: Vec<Op> = bufs
                    .iter_mut()
                    .zip(lens.iter_mut())
                    .map(|(into, len)| Op::Recv { from: 0, into, len })
                    .collect();
                r.execute(&mut ops).unwrap();
                drop(ops);
                // Messages in one batch are unordered: compare as a set.
                let mut got: Vec<Vec<u8>> = bufs
                    .iter()
                    .zip(&lens)
                    .map(|(b, &n)| b[..n].to_vec())
                    .collect();
                let mut want: Vec<Vec<u8>> = sizes.iter().map(|&n| pattern(n, n)).collect();
                got.sort();
                want.sort();
                assert_eq!(got, want, "{prov}");
            }
        });
    }
}

/// What `fi_getinfo` grants each provider here, best first (its answer to
/// hints asking for FI_DELIVERY_COMPLETE, FI_FENCE, FI_ORDER_RMA_RAW).
fn documented(prov: &str) -> Option<&'static [Ordering]> {
    use Ordering::{DeliveryComplete as Dc, Fence, ReadBack};
    Some(match prov {
        "shm" => &[Dc, ReadBack],
        "sockets" => &[Dc, Fence, ReadBack],
        "tcp;ofi_rxm" => &[Dc],
        "udp;ofi_rxd" => &[Dc, ReadBack],
        // Granted by ofi_rxm, which passes the flag to verbs (soft-RoCE).
        "verbs;ofi_rxm" => &[Dc],
        _ => return None,
    })
}

#[test]
fn ordering_is_what_the_provider_grants() {
    for prov in ["shm", "sockets", "tcp;ofi_rxm", "udp;ofi_rxd"] {
        let offered = info::orderings_offered(&Hints::new(prov, Caps::ALL)).unwrap();
        assert_eq!(offered, documented(prov).unwrap(), "{prov}");
    }
    for prov in providers() {
        let prov = prov.as_str();
        let Some(offered) = documented(prov) else {
            continue;
        };
        let got = with_ranks(2, RankConfig::new(prov), |r| r.ordering());
        assert_eq!(got, vec![offered[0]; 2], "{prov}: the best it grants");
        assert_ne!(got[0], Ordering::None, "{prov}");
    }
}

/// Writer (rank 0) and reader (rank 1, on its own region through the
/// provider): each round the writer writes a record with Delivery and, in
/// the next batch, publishes its number with a compare-and-swap; the reader
/// polls the number and reads the record it names. Returns the writer's
/// ordering counters.
fn publish_rounds(prov: &str, ordering: Ordering, rounds: u64) -> OrderingStats {
    const SEQ: u64 = 0;
    const REC: usize = 184;
    let record = |i: u64| pattern(i as usize, REC);
    let mut cfg = RankConfig::new(prov);
    cfg.ordering = Some(ordering);
    let stats = with_ranks(2, cfg, |r| {
        assert_eq!(r.ordering(), ordering, "{prov}");
        let target = Remote::new(1, SEQ);
        let slot = |i: u64| Remote::new(1, 64 + (i % 4) * REC as u64);
        if r.rank() == 0 {
            let before = r.ordering_stats();
            for i in 0..rounds {
                let data = record(i);
                r.execute(&mut [Op::Write {
                    to: slot(i),
                    from: &data,
                    completion: Completion::Delivery,
                }])
                .unwrap();
                // The release: a later batch, never the same one.
                assert_eq!(r.compare_and_swap(target, i, i + 1).unwrap(), i, "{prov}");
                // The reader has read record i before slot i is reused.
                while r.fetch(Remote::new(1, 8)).unwrap() + 3 < i + 1 {
                    std::thread::yield_now();
                }
            }
            Some(r.ordering_stats().since(before))
        } else {
            let mut seen = 0;
            while seen < rounds {
                let published = r.fetch(target).unwrap();
                if published == seen {
                    std::thread::yield_now();
                    continue;
                }
                let i = published - 1;
                let mut back = vec![0u8; REC];
                r.read(slot(i), &mut back).unwrap();
                assert_eq!(
                    back,
                    record(i),
                    "{prov} {ordering:?}: record {i} after its release"
                );
                seen = published;
                r.swap(Remote::new(1, 8), seen).unwrap();
            }
            None
        }
    });
    stats.into_iter().flatten().next().unwrap()
}

#[test]
fn delivery_writes_then_a_release_with_every_mechanism_every_provider() {
    const ROUNDS: u64 = 40;
    for prov in providers() {
        let prov = prov.as_str();
        let Some(offered) = documented(prov) else {
            continue;
        };
        for &m in offered.iter().chain([&Ordering::None]) {
            let s = publish_rounds(prov, m, ROUNDS);
            // One piece per write (184 B): exactly one use per round.
            let want = match m {
                Ordering::DeliveryComplete => (ROUNDS, 0, 0, 0),
                Ordering::Fence => (0, ROUNDS, 0, 0),
                Ordering::ReadBack => (0, 0, ROUNDS, 0),
                Ordering::None => (0, 0, 0, ROUNDS),
            };
            let got = (s.delivery_complete, s.fenced, s.read_backs, s.unordered);
            assert_eq!(got, want, "{prov} {m:?}: {s:?}");
        }
    }
}

#[test]
fn a_fence_rides_on_the_first_op_of_every_kind_after_a_delivery_write() {
    if !providers().iter().any(|p| p == "sockets") {
        return;
    }
    let mut cfg = RankConfig::new("sockets");
    cfg.ordering = Some(Ordering::Fence);
    with_ranks(2, cfg, |r| {
        if r.rank() == 1 {
            // Rank 0's fenced send.
            let (mut into, mut len) = ([0u8; 8], 0);
            r.execute(&mut [Op::Recv {
                from: 0,
                into: &mut into,
                len: &mut len,
            }])
            .unwrap();
            assert_eq!(&into[..len], b"fenced");
            return;
        }
        let data = pattern(5, 100);
        let at = Remote::new(1, 256);
        let word = Remote::new(1, 0);
        let deliver = || {
            r.write_with(at, &data, Completion::Delivery).unwrap();
        };
        let fenced = || r.ordering_stats().fenced;
        // A transmit-complete write asks for nothing.
        r.write(at, &data).unwrap();
        r.fetch(word).unwrap();
        assert_eq!(fenced(), 0);
        let expect = std::cell::Cell::new(0);
        let check = |what: &str| {
            expect.set(expect.get() + 1);
            assert_eq!(fenced(), expect.get(), "{what} carried the fence");
        };
        deliver();
        assert_eq!(r.compare_and_swap(word, 0, 1).unwrap(), 0);
        check("compare-and-swap");
        // Only the first op after the write is fenced.
        assert_eq!(r.fetch(word).unwrap(), 1);
        assert_eq!(fenced(), expect.get());
        deliver();
        assert_eq!(r.fetch_add(word, 1).unwrap(), 1);
        check("fetch-add");
        deliver();
        assert_eq!(r.swap(word, 7).unwrap(), 2);
        check("swap");
        deliver();
        assert_eq!(r.fetch(word).unwrap(), 7);
        check("fetch");
        deliver();
        let mut back = vec![0u8; 100];
        r.read(at, &mut back).unwrap();
        assert_eq!(back, data);
        check("read");
        deliver();
        r.write(Remote::new(1, 512), &[9; 16]).unwrap();
        check("write");
        deliver();
        r.execute(&mut [Op::Send {
            to: 1,
            data: b"fenced",
        }])
        .unwrap();
        check("send");
        // A batch of writes to one peer, then one op: one fence covers all.
        let many: Vec<Vec<u8>> = (0..5).map(|i| pattern(i, 64)).collect();
        let mut ops: Vec<Op> = many
            .iter()
            .enumerate()
            .map(|(i, d)| Op::Write {
                to: Remote::new(1, 1024 + 64 * i as u64),
                from: d,
                completion: Completion::Delivery,
            })
            .collect();
        r.execute(&mut ops).unwrap();
        drop(ops);
        r.fetch(word).unwrap();
        check("the op after a batch of writes");
        r.fetch(word).unwrap();
        assert_eq!(fenced(), expect.get());
    });
}

#[test]
fn read_back_splits_a_large_delivery_write_and_reads_every_piece() {
    for prov in providers() {
        let prov = prov.as_str();
        if !documented(prov).is_some_and(|o| o.contains(&Ordering::ReadBack)) {
            continue;
        }
        let mut cfg = RankConfig::new(prov);
        cfg.ordering = Some(Ordering::ReadBack);
        cfg.staging_len = 4096; // a write of 20 000 B is five pieces
        with_ranks(2, cfg, |r| {
            let peer = 1 - r.rank();
            let base = r.rank() as u64 * 65536;
            let big = pattern(r.rank() + 1, 20_000);
            r.write_with(Remote::new(peer, base), &big, Completion::Delivery)
                .unwrap();
            assert_eq!(r.ordering_stats().read_backs, 5, "{prov}");
            let mut back = vec![0u8; big.len()];
            r.read(Remote::new(peer, base), &mut back).unwrap();
            assert_eq!(back, big, "{prov}");
        });
    }
}

/// A batch of Delivery writes to one peer (and some to the writer itself),
/// then a release in the next batch: every record is visible to the
/// reader once it sees the release. Writes posted with
/// FI_DELIVERY_COMPLETE share scatter writes, up to what the provider
/// takes per write (rma_iov_limit and iov_limit, at most 4); with another
/// mechanism none is shared.
#[test]
fn a_batch_of_delivery_writes_is_visible_at_its_release_in_scatter_writes() {
    const ROUNDS: u64 = 20;
    const TO_PEER: usize = 10;
    const TO_SELF: usize = 3;
    const REC: usize = 184;
    const SEQ: u64 = 0;
    const ACK: u64 = 8;
    let slot = |k: usize| 64 + (k * REC) as u64;
    let record = |round: u64, k: usize| pattern(round as usize * 64 + k, REC);
    for prov in providers() {
        let prov = prov.as_str();
        let Some(offered) = documented(prov) else {
            continue;
        };
        for &m in offered {
            let mut cfg = RankConfig::new(prov);
            cfg.ordering = Some(m);
            let stats = with_ranks(2, cfg, |r| {
                if r.rank() == 1 {
                    let mut seen = 0;
                    while seen < ROUNDS {
                        let published = r.fetch(Remote::new(1, SEQ)).unwrap();
                        if published == seen {
                            std::thread::yield_now();
                            continue;
                        }
                        let i = published - 1;
                        let mut back = vec![0u8; TO_PEER * REC];
                        r.read(Remote::new(1, slot(0)), &mut back).unwrap();
                        for (k, got) in back.chunks(REC).enumerate() {
                            assert_eq!(got, record(i, k), "{prov} {m:?}: round {i} record {k}");
                        }
                        seen = published;
                        r.swap(Remote::new(1, ACK), seen).unwrap();
                    }
                    return None;
                }
                let limit = r
                    .info()
                    .rma_iov_limit()
                    .min(r.info().iov_limit())
                    .clamp(1, 4);
                let before = r.ordering_stats();
                for i in 0..ROUNDS {
                    let to_peer: Vec<Vec<u8>> = (0..TO_PEER).map(|k| record(i, k)).collect();
                    let to_self: Vec<Vec<u8>> = (0..TO_SELF).map(|k| record(i, k)).collect();
                    // Interleaved, as a DHT batch mixes its targets.
                    let mut ops: Vec<Op> = Vec::new();
                    for (k, d) in to_peer.iter().enumerate() {
                        ops.push(Op::Write {
                            to: Remote::new(1, slot(k)),
                            from: d,
                            completion: Completion::Delivery,
                        });
                        if let Some(d) = to_self.get(k) {
                            ops.push(Op::Write {
                                to: Remote::new(0, slot(k)),
                                from: d,
                                completion: Completion::Delivery,
                            });
                        }
                    }
                    r.execute(&mut ops).unwrap();
                    drop(ops);
                    // The release: a later batch.
                    assert_eq!(
                        r.compare_and_swap(Remote::new(1, SEQ), i, i + 1).unwrap(),
                        i
                    );
                    // Its own writes are visible to itself too.
                    let mut back = vec![0u8; TO_SELF * REC];
                    r.read(Remote::new(0, slot(0)), &mut back).unwrap();
                    assert_eq!(
                        back,
                        to_self.concat(),
                        "{prov} {m:?}: round {i}, own records"
                    );
                    // The reader is done with round i before its slots are reused.
                    while r.fetch(Remote::new(1, ACK)).unwrap() < i + 1 {
                        std::thread::yield_now();
                    }
                }
                Some((r.ordering_stats().since(before), limit))
            });
            let (s, limit) = stats.into_iter().flatten().next().unwrap();
            let posts = |n: usize| n.div_ceil(limit) as u64;
            let (writes, shared) = match m {
                Ordering::DeliveryComplete => (
                    ROUNDS * (TO_PEER + TO_SELF) as u64,
                    ROUNDS * ((TO_PEER + TO_SELF) as u64 - posts(TO_PEER) - posts(TO_SELF)),
                ),
                _ => (0, 0),
            };
            assert_eq!(
                (s.delivery_complete, s.scattered),
                (writes, shared),
                "{prov} {m:?} (limit {limit}): {s:?}"
            );
        }
    }
}
