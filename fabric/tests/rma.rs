//! RMA and atomics between in-process ranks, for real, on every provider
//! that offers them here.

mod common;

use common::{providers, with_ranks};
use fabkit_fabric::{Op, RankConfig, Remote};

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
