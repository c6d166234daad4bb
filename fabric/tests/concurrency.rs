//! Several ranks hammering one word: atomics must be atomic across ranks.

mod common;

use common::{providers, with_ranks, with_ranks_boot};
use fabkit_fabric::{Op, RankConfig, Remote};

#[test]
fn fetch_add_from_every_rank_ends_with_the_exact_sum() {
    const PER_RANK: u64 = 200;
    for prov in providers() {
        for n in [2usize, 4] {
            let per_rank = with_ranks_boot(n, RankConfig::new(prov.as_str()), |r, boot| {
                let counter = Remote::new(0, 64);
                // Half one at a time, half as one batch, so both paths race.
                let mut olds: Vec<u64> = (0..PER_RANK / 2)
                    .map(|_| r.fetch_add(counter, 1).unwrap())
                    .collect();
                let mut batch = vec![0u64; (PER_RANK / 2) as usize];
                let mut ops: Vec<Op> = batch
                    .iter_mut()
                    .map(|o| Op::FetchAdd {
                        at: counter,
                        delta: 1,
                        old: o,
                    })
                    .collect();
                r.execute(&mut ops).unwrap();
                drop(ops);
                olds.extend(batch);
                boot.barrier().unwrap();
                (olds, r.fetch(counter).unwrap())
            });
            let total = n as u64 * PER_RANK;
            for (olds, last) in &per_rank {
                assert_eq!(*last, total, "{prov}, {n} ranks: lost or extra adds");
                assert_eq!(olds.len() as u64, PER_RANK);
            }
            // Every add saw a distinct old value: together exactly 0..total.
            let mut all: Vec<u64> = per_rank.into_iter().flat_map(|(o, _)| o).collect();
            all.sort_unstable();
            assert_eq!(all, (0..total).collect::<Vec<_>>(), "{prov}, {n} ranks");
        }
    }
}

#[test]
fn exactly_one_compare_and_swap_wins() {
    for prov in providers() {
        for round in 0..3 {
            let n = 4;
            let olds = with_ranks(n, RankConfig::new(prov.as_str()), |r| {
                let word = Remote::new(n - 1, 8);
                r.compare_and_swap(word, 0, r.rank() as u64 + 1).unwrap()
            });
            let winners: Vec<usize> = (0..n).filter(|&i| olds[i] == 0).collect();
            assert_eq!(
                winners.len(),
                1,
                "{prov} round {round}: winners {winners:?}"
            );
            let w = winners[0] as u64 + 1;
            assert!(
                olds.iter().all(|&o| o == 0 || o == w),
                "{prov}: the losers must all see the winner's value, saw {olds:?}"
            );
        }
    }
}
