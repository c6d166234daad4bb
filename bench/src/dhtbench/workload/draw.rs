//! Key draws: a seeded generator, Gray et al.'s zipfian (zeta by the
//! Euler-Maclaurin formula for large ranges), YCSB's scrambled zipfian,
//! uniform and latest choosers.

use super::{Dist, SCRAMBLE_ITEMS};
use fabkit_dht::placement::mix;

pub(super) use fabkit_core::rng::Rng;

/// The stream of phase `phase` of rank `rank`: each input goes through
/// the bijective `mix`, so ranks and phases start far apart.
pub(super) fn stream(seed: u64, rank: u64, phase: u64) -> Rng {
    Rng::new(mix(mix(mix(seed ^ 0x243f_6a88_85a3_08d3) ^ rank) ^ phase))
}

/// zeta(n, theta) = sum of 1 / i^theta for i in 1..=n.
///
/// Summed term by term up to a few thousand items; beyond, the first terms
/// are summed and the tail comes from the Euler–Maclaurin formula with
/// terms to the third derivative, whose remainder at a start of 1024 is
/// far below f64 precision.
pub(super) fn zeta(n: u64, theta: f64) -> f64 {
    const DIRECT: u64 = 4096;
    const START: u64 = 1024;
    if n <= DIRECT {
        return zeta_add(0.0, 0, n, theta);
    }
    let head = zeta_add(0.0, 0, START - 1, theta);
    let (a, b) = (START as f64, n as f64);
    let f = |x: f64| x.powf(-theta);
    let d1 = |x: f64| -theta * x.powf(-theta - 1.0);
    let d3 = |x: f64| -theta * (theta + 1.0) * (theta + 2.0) * x.powf(-theta - 3.0);
    // The integral of x^-theta over [a, b], as a^(1-theta) * expm1(...) /
    // (1-theta): no cancellation when theta is close to 1.
    let s = 1.0 - theta;
    let integral = a.powf(s) * (s * (b / a).ln()).exp_m1() / s;
    let tail = integral + (f(a) + f(b)) / 2.0 + (d1(b) - d1(a)) / 12.0 - (d3(b) - d3(a)) / 720.0;
    head + tail
}

/// `sum` (zeta over `from` items) extended to `to` items; smallest terms
/// first, for accuracy.
pub(super) fn zeta_add(sum: f64, from: u64, to: u64, theta: f64) -> f64 {
    let mut part = 0.0;
    for i in (from + 1..=to).rev() {
        part += (i as f64).powf(-theta);
    }
    sum + part
}

/// Zipfian over `0..n`, item 0 the most likely (Gray et al. 1994, as in
/// YCSB's ZipfianGenerator).
#[derive(Clone, Debug)]
pub(super) struct Zipf {
    n: u64,
    theta: f64,
    alpha: f64,
    zetan: f64,
    eta: f64,
    /// zeta(2, theta) = 1 + 0.5^theta.
    zeta2: f64,
}

impl Zipf {
    /// Over `n` >= 1 items with skew `theta` in (0, 1).
    pub(super) fn new(n: u64, theta: f64) -> Zipf {
        let mut z = Zipf {
            n,
            theta,
            alpha: 1.0 / (1.0 - theta),
            zetan: zeta(n, theta),
            eta: 0.0,
            zeta2: 1.0 + 0.5f64.powf(theta),
        };
        z.set_eta();
        z
    }

    pub(super) fn set_eta(&mut self) {
        // Below 3 items the draw never reaches eta (and the formula divides
        // by zero at 2).
        self.eta = if self.n > 2 {
            (1.0 - (2.0 / self.n as f64).powf(1.0 - self.theta)) / (1.0 - self.zeta2 / self.zetan)
        } else {
            0.0
        };
    }

    /// Extends the range to `n` items, adding only the new terms to zeta,
    /// as YCSB does when its item count grows.
    pub(super) fn grow(&mut self, n: u64) {
        if n > self.n {
            self.zetan = zeta_add(self.zetan, self.n, n, self.theta);
            self.n = n;
            self.set_eta();
        }
    }

    /// The item for a uniform draw `u` in [0, 1).
    pub(super) fn draw(&self, u: f64) -> u64 {
        let uz = u * self.zetan;
        if uz < 1.0 {
            return 0;
        }
        let last = self.n.saturating_sub(1);
        if uz < self.zeta2 {
            return last.min(1);
        }
        let x = self.n as f64 * (self.eta * u - self.eta + 1.0).powf(self.alpha);
        // A float-to-int cast saturates; rounding may reach n itself.
        (x as u64).min(last)
    }
}

/// FNV-1a 64 over the 8 little-endian bytes of `x`, as YCSB hashes its
/// zipfian items.
pub(super) fn fnv1a(x: u64) -> u64 {
    fabkit_dht::placement::fnv1a(&x.to_le_bytes())
}

/// Picks the keys of a YCSB run phase's reads, updates and read-modify-writes.
#[derive(Clone, Debug)]
pub(super) enum Chooser {
    Uniform {
        records: u64,
    },
    /// Zipfian over [`SCRAMBLE_ITEMS`], hashed into the records.
    Scrambled {
        zipf: Zipf,
        records: u64,
    },
    /// Zipfian over recency: position `count - 1 - z` of the loaded ids,
    /// then this rank's inserts so far (ids from `insert_base`).
    Latest {
        zipf: Zipf,
        records: u64,
        insert_base: u64,
    },
}

impl Chooser {
    pub(super) fn new(dist: Dist, records: u64, insert_base: u64, theta: f64) -> Chooser {
        match dist {
            Dist::Uniform => Chooser::Uniform { records },
            Dist::Zipf => Chooser::Scrambled {
                zipf: Zipf::new(SCRAMBLE_ITEMS, theta),
                records,
            },
            Dist::Latest => Chooser::Latest {
                zipf: Zipf::new(records, theta),
                records,
                insert_base,
            },
        }
    }

    pub(super) fn next(&self, rng: &mut Rng) -> u64 {
        match self {
            Chooser::Uniform { records } => rng.below(*records),
            Chooser::Scrambled { zipf, records } => {
                // records >= 1: check refused --keys 0 and 0 ranks.
                fnv1a(zipf.draw(rng.unit())) % (*records).max(1)
            }
            Chooser::Latest {
                zipf,
                records,
                insert_base,
            } => {
                let pos = zipf.n - 1 - zipf.draw(rng.unit());
                match pos.checked_sub(*records) {
                    None => pos,
                    // Below the rank's block end, which key_space checked.
                    Some(own) => insert_base + own,
                }
            }
        }
    }

    /// This rank inserted its next id: latest's recency list grows by one.
    pub(super) fn inserted(&mut self) {
        if let Chooser::Latest { zipf, .. } = self {
            let n = zipf.n.saturating_add(1);
            zipf.grow(n);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashSet;

    #[test]
    fn zipf_item_0_and_1_have_their_exact_probabilities() {
        let (n, theta) = (1000, 0.99);
        let z = Zipf::new(n, theta);
        let zn = zeta(n, theta);
        let mut rng = stream(7, 0, 0);
        let draws = 1_000_000;
        let mut count = vec![0u32; n as usize];
        for _ in 0..draws {
            let x = z.draw(rng.unit());
            count[x as usize] += 1;
        }
        let p0 = f64::from(count[0]) / draws as f64;
        let p1 = f64::from(count[1]) / draws as f64;
        assert!((p0 * zn - 1.0).abs() < 0.02, "p0 {p0} vs {}", 1.0 / zn);
        assert!(
            (p1 * zn / 0.5f64.powf(theta) - 1.0).abs() < 0.03,
            "p1 {p1} vs {}",
            0.5f64.powf(theta) / zn
        );
        assert!(count.iter().all(|&c| c <= count[0]));
        // The tail is reached.
        assert!(count[500..].iter().any(|&c| c > 0));
    }

    #[test]
    fn zeta_tail_formula_matches_direct_sums_and_ycsbs_constant() {
        for theta in [0.01, 0.5, 0.99, 0.9999] {
            for n in [5000u64, 100_000] {
                let direct = zeta_add(0.0, 0, n, theta);
                let fast = zeta(n, theta);
                assert!(
                    ((fast - direct) / direct).abs() < 1e-11,
                    "n {n} theta {theta}: {fast} vs {direct}"
                );
            }
        }
        // YCSB's ScrambledZipfianGenerator precomputes zeta(10^10, 0.99).
        let z = zeta(SCRAMBLE_ITEMS, 0.99);
        assert!((z - 26.469_028_201_783_02).abs() < 1e-9, "{z}");
        // Growing one item at a time agrees with computing anew.
        let mut g = Zipf::new(5000, 0.99);
        for n in 5001..=6000 {
            g.grow(n);
        }
        assert!((g.zetan - zeta(6000, 0.99)).abs() < 1e-10);
        assert_eq!(g.n, 6000);
    }

    #[test]
    fn tiny_zipf_ranges_stay_in_range() {
        for n in 1..=3 {
            let z = Zipf::new(n, 0.5);
            let mut rng = stream(1, 0, 0);
            let mut seen = HashSet::new();
            for _ in 0..1000 {
                let x = z.draw(rng.unit());
                assert!(x < n);
                seen.insert(x);
            }
            assert_eq!(seen.len() as u64, n);
            // u just below 1 still lands inside.
            assert!(z.draw(1.0 - f64::EPSILON) < n);
        }
    }

    #[test]
    fn uniform_draws_are_in_range_and_even() {
        let mut rng = stream(3, 0, 0);
        for n in [1u64, 2, 3, 7, 1 << 63, u64::MAX] {
            for _ in 0..100 {
                assert!(rng.below(n) < n);
            }
        }
        let mut count = [0u32; 3];
        for _ in 0..30_000 {
            count[rng.below(3) as usize] += 1;
        }
        assert!(count.iter().all(|&c| c.abs_diff(10_000) < 400), "{count:?}");
        for _ in 0..1000 {
            let u = rng.unit();
            assert!((0.0..1.0).contains(&u));
        }
    }
}
