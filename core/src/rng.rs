//! The one small random generator of the project: splitmix64 (Steele, Lea
//! and Flood, "Fast splittable pseudorandom number generators", 2014).
//! Every seed gives a full-period stream, the state is one word, and the
//! same seed gives the same numbers on every machine, which is what fault
//! injection, workload key draws and a sweep's shuffled order need. It is
//! not for secrets: ids that must not collide with another run's come from
//! [`crate::random_u64`].

/// The golden-ratio increment of splitmix64's state.
const GOLDEN: u64 = 0x9e37_79b9_7f4a_7c15;

/// The splitmix64 finaliser: a bijection that spreads every input bit over
/// every output bit.
pub fn mix(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// A splitmix64 stream.
#[derive(Clone, Debug)]
pub struct Rng(u64);

impl Rng {
    /// The stream whose state starts at `seed`.
    pub const fn new(seed: u64) -> Rng {
        Rng(seed)
    }

    /// The `n`th number (from 0) of the stream seeded with `seed`, without
    /// stepping through the ones before: for draws shared by threads that
    /// take their index from a counter.
    pub fn nth(seed: u64, n: u64) -> u64 {
        Rng(seed.wrapping_add(n.wrapping_mul(GOLDEN))).next_u64()
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(GOLDEN);
        mix(self.0)
    }

    /// Uniform in `0..n` without bias (Lemire, "Fast random integer
    /// generation in an interval", 2019): multiply-shift, redrawing the few
    /// values whose low half falls in the short first interval. `n` > 0;
    /// `below(0)` is 0.
    pub fn below(&mut self, n: u64) -> u64 {
        let mut m = u128::from(self.next_u64()) * u128::from(n);
        if (m as u64) < n {
            // 2^64 mod n: the values below it would map one too many times.
            let threshold = n.wrapping_neg().checked_rem(n).unwrap_or(0);
            while (m as u64) < threshold {
                m = u128::from(self.next_u64()) * u128::from(n);
            }
        }
        (m >> 64) as u64
    }

    /// Uniform in [0, 1), from the top 53 bits.
    pub fn unit(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 * (1.0 / (1u64 << 53) as f64)
    }

    /// True with probability `p`; draws nothing when `p` is at most 0 (or
    /// NaN) or at least 1.
    pub fn chance(&mut self, p: f64) -> bool {
        if p <= 0.0 || p.is_nan() {
            false
        } else if p >= 1.0 {
            true
        } else {
            self.unit() < p
        }
    }

    /// Puts `v` in a random order (Fisher-Yates): every order equally
    /// likely, the same one for the same seed.
    pub fn shuffle<T>(&mut self, v: &mut [T]) {
        for i in (1..v.len()).rev() {
            let j = self.below(i as u64 + 1) as usize;
            v.swap(i, j);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_stream_is_splitmix64() {
        // The first outputs of splitmix64 seeded with 0 (Vigna's
        // reference implementation, splitmix64.c).
        let mut r = Rng::new(0);
        assert_eq!(r.next_u64(), 0xe220_a839_7b1d_cdaf);
        assert_eq!(r.next_u64(), 0x6e78_9e6a_a1b9_65f4);
        assert_eq!(Rng::nth(0, 1), 0x6e78_9e6a_a1b9_65f4);
        assert_eq!(Rng::nth(7, 0), Rng::new(7).next_u64());
    }

    #[test]
    fn below_stays_in_range_and_reaches_every_value() {
        let mut r = Rng::new(42);
        let mut seen = [0u32; 7];
        for _ in 0..7000 {
            seen[r.below(7) as usize] += 1;
        }
        assert!(seen.iter().all(|&c| c > 800), "{seen:?}");
        assert_eq!(r.below(1), 0);
        assert_eq!(r.below(0), 0);
        let big = u64::MAX - 1;
        assert!((0..100).all(|_| r.below(big) < big));
    }

    #[test]
    fn chance_and_unit_bounds() {
        let mut r = Rng::new(1);
        assert!(!r.chance(0.0) && !r.chance(f64::NAN) && !r.chance(-1.0));
        assert!(r.chance(1.0) && r.chance(1e300));
        let hits = (0..10_000).filter(|_| r.chance(0.25)).count();
        assert!((2_200..2_800).contains(&hits), "{hits}");
        assert!((0..1000).all(|_| (0.0..1.0).contains(&r.unit())));
    }

    #[test]
    fn shuffle_is_a_seeded_permutation() {
        let plain: Vec<u32> = (0..50).collect();
        let (mut a, mut b, mut c) = (plain.clone(), plain.clone(), plain.clone());
        Rng::new(9).shuffle(&mut a);
        Rng::new(9).shuffle(&mut b);
        Rng::new(10).shuffle(&mut c);
        assert_eq!(a, b);
        assert_ne!(a, plain);
        assert_ne!(a, c);
        let mut sorted = a.clone();
        sorted.sort_unstable();
        assert_eq!(sorted, plain);
        let mut none: [u8; 0] = [];
        Rng::new(1).shuffle(&mut none);
    }
}
