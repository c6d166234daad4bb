//! Where a key lives: its rank and the candidate buckets in that rank's
//! region. Pure: no I/O.
//!
//! The MPI-DHT takes the rank as `hash mod ranks` and the candidates as
//! n-byte windows of the same hash, moved forward a byte at a time. Two flaws
//! follow: with `ranks = 4`, the rank uses the low two bits that the first
//! window also starts with, so a quarter of each region is unreachable from
//! the first candidate; and a window of 8n bits reduced modulo B favours low
//! buckets unless B divides 2^(8n). Here the rank and every candidate come
//! from independent 64-bit remixes of the key hash (the splitmix64
//! finaliser), each reduced to its range by a multiply-shift, so every
//! candidate reaches every bucket with equal probability (bias below
//! B / 2^64) whatever the rank count. The number of candidates defaults to
//! the published one: `9 - n`, for the smallest n with log2(B) <= 8n.

/// The 64-bit hash of a key, the same in every process and every build (a
/// dump restores anywhere): eight bytes at a time, not one (an 80-byte key
/// is ten steps). The length seeds it; each little-endian word (the last
/// one zero-padded) is folded in by a 64x64->128-bit multiply whose halves
/// are xored, and the splitmix64 finaliser spreads the result.
pub fn hash_key(key: &[u8]) -> u64 {
    let mut h = SEED ^ (key.len() as u64).wrapping_mul(FOLD);
    let mut words = key.chunks_exact(8);
    for w in &mut words {
        h = fold(h ^ u64::from_le_bytes(w.try_into().expect("8 bytes")), FOLD);
    }
    let rest = words.remainder();
    if !rest.is_empty() {
        let mut last = [0u8; 8];
        last[..rest.len()].copy_from_slice(rest);
        h = fold(h ^ u64::from_le_bytes(last), FOLD);
    }
    mix(h)
}

/// The hash's start and its multiplier (the fractional digits of pi and of
/// e, odd).
const SEED: u64 = 0x243f_6a88_85a3_08d3;
const FOLD: u64 = 0xb7e1_5162_8aed_2a6b;

/// The 128-bit product of `a` and `b`, its halves xored.
fn fold(a: u64, b: u64) -> u64 {
    let p = u128::from(a) * u128::from(b);
    (p as u64) ^ ((p >> 64) as u64)
}

/// FNV-1a 64 over `bytes`, with no finaliser (YCSB scrambles its zipfian
/// items with it).
pub fn fnv1a(bytes: &[u8]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for &b in bytes {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    h
}

/// The splitmix64 finaliser (the core crate's, which every placement
/// depends on staying as it is).
pub use fabkit_core::rng::mix;

/// `x` scaled into `0..n` by multiply-shift (Lemire): no modulo bias beyond
/// n / 2^64.
pub fn reduce(x: u64, n: u64) -> u64 {
    ((u128::from(x) * u128::from(n)) >> 64) as u64
}

/// Distinct streams derived from one key hash.
const RANK_STREAM: u64 = 0x9e37_79b9_7f4a_7c15;
const CANDIDATE_STREAM: u64 = 0xd1b5_4a32_d192_ed03;
const REDRAW_STREAM: u64 = 0x8cb9_2ba7_2f3d_8dd7;

/// The most candidates a key may have.
pub const MAX_CANDIDATES: u32 = 64;

/// Draws before a candidate that keeps colliding with earlier ones is
/// taken as the lowest bucket not yet chosen instead.
const REDRAWS: u64 = 64;

/// Placement of keys over `ranks` regions of `buckets` buckets each.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Placement {
    ranks: u32,
    buckets: u64,
    candidates: u32,
}

/// The published candidate count for `buckets`: `9 - n`, n the smallest
/// index width in bytes with log2(buckets) <= 8n.
pub fn default_candidates(buckets: u64) -> u32 {
    let bits = 64 - buckets.saturating_sub(1).leading_zeros(); // ceil(log2)
    let n = bits.div_ceil(8).max(1);
    9 - n
}

impl Placement {
    /// Placement over `ranks` regions of `buckets` buckets, trying
    /// `candidates` distinct buckets per key (at most `buckets`, and at
    /// most [`MAX_CANDIDATES`]).
    pub fn new(ranks: u32, buckets: u64, candidates: u32) -> Placement {
        assert!(
            ranks > 0 && buckets > 0 && candidates > 0,
            "empty placement"
        );
        let candidates = u64::from(candidates.min(MAX_CANDIDATES)).min(buckets) as u32;
        Placement {
            ranks,
            buckets,
            candidates,
        }
    }

    /// Ranks.
    pub fn ranks(&self) -> u32 {
        self.ranks
    }

    /// Buckets per rank.
    pub fn buckets(&self) -> u64 {
        self.buckets
    }

    /// Candidates per key.
    pub fn candidates(&self) -> u32 {
        self.candidates
    }

    /// The rank that holds `hash`.
    pub fn rank_of(&self, hash: u64) -> u32 {
        reduce(mix(hash ^ RANK_STREAM), u64::from(self.ranks)) as u32
    }

    /// Candidate `k` (0-based) of `hash` in its rank's region. The
    /// candidates of a key are distinct: each is drawn uniformly from the
    /// buckets the earlier ones left (a draw that repeats one is redrawn
    /// from an independent stream), so no key probes a bucket twice.
    pub fn candidate(&self, hash: u64, k: u32) -> u64 {
        let mut chosen = [0u64; MAX_CANDIDATES as usize];
        let k = k.min(self.candidates - 1) as usize;
        for n in 0..=k {
            chosen[n] = self.draw(hash, n as u32, &chosen[..n]);
        }
        chosen[k]
    }

    /// Candidate `k`, given the `earlier` ones.
    fn draw(&self, hash: u64, k: u32, earlier: &[u64]) -> u64 {
        let first = mix(hash ^ CANDIDATE_STREAM.wrapping_mul(u64::from(k) + 1));
        for redraw in 0..REDRAWS {
            let z = if redraw == 0 {
                first
            } else {
                mix(first ^ REDRAW_STREAM.wrapping_mul(redraw))
            };
            let b = reduce(z, self.buckets);
            if !earlier.contains(&b) {
                return b;
            }
        }
        // Only when nearly every bucket is already a candidate (a region
        // of a few buckets): the lowest one left. Candidates never exceed
        // the buckets, so one is left.
        (0..self.buckets)
            .find(|b| !earlier.contains(b))
            .expect("fewer candidates than buckets")
    }

    /// All candidates of `hash`, in probing order.
    pub fn candidates_of(&self, hash: u64) -> impl Iterator<Item = u64> + '_ {
        let mut chosen = [0u64; MAX_CANDIDATES as usize];
        (0..self.candidates as usize).map(move |n| {
            chosen[n] = self.draw(hash, n as u32, &chosen[..n]);
            chosen[n]
        })
    }
}

/// How a table hashes a key to its places: fabkit's [`hash_key`], or the
/// caller's function (the MPI-DHT's `hash_func`, given as a closure). Every
/// rank of a table must use the same one; a table placed with one is read
/// with it, and a restore re-places every record with the target table's.
#[derive(Clone, Default)]
pub struct KeyHash(Option<std::sync::Arc<HashFn>>);

/// A key hash function of the caller's.
type HashFn = dyn Fn(&[u8]) -> u64 + Send + Sync;

impl KeyHash {
    /// The caller's hash function.
    pub fn custom(f: impl Fn(&[u8]) -> u64 + Send + Sync + 'static) -> KeyHash {
        KeyHash(Some(std::sync::Arc::new(f)))
    }

    /// The hash of `key`.
    pub fn hash(&self, key: &[u8]) -> u64 {
        match &self.0 {
            None => hash_key(key),
            Some(f) => f(key),
        }
    }

    /// Whether this is the caller's function rather than fabkit's.
    pub fn is_custom(&self) -> bool {
        self.0.is_some()
    }
}

impl std::fmt::Debug for KeyHash {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(if self.is_custom() {
            "KeyHash(custom)"
        } else {
            "KeyHash(fabkit)"
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fnv1a_gives_the_published_test_vectors() {
        // FNV-1a 64 of "" is its offset basis; of "a" and "foobar", the
        // values in the FNV authors' test suite.
        assert_eq!(fnv1a(b""), 0xcbf2_9ce4_8422_2325);
        assert_eq!(fnv1a(b"a"), 0xaf63_dc4c_8601_ec8c);
        assert_eq!(fnv1a(b"foobar"), 0x8594_4171_f739_67e8);
    }

    #[test]
    fn candidate_count_follows_the_paper() {
        assert_eq!(default_candidates(200), 8); // 1-byte index
        assert_eq!(default_candidates(256), 8);
        assert_eq!(default_candidates(257), 7); // needs 2 bytes
        assert_eq!(default_candidates(1 << 24), 6); // the paper's 3-byte example
        assert_eq!(default_candidates((1 << 24) + 1), 5);
        assert_eq!(default_candidates(1), 8);
    }

    #[test]
    fn reduce_stays_in_range() {
        for n in [1u64, 2, 3, 7, 1000, u64::MAX] {
            for x in [0u64, 1, u64::MAX / 2, u64::MAX] {
                assert!(reduce(x, n) < n);
            }
        }
    }

    /// Chi-square statistic of `counts` against a uniform expectation.
    fn chi2(counts: &[u64]) -> f64 {
        let total: u64 = counts.iter().sum();
        let e = total as f64 / counts.len() as f64;
        counts.iter().map(|&c| (c as f64 - e).powi(2) / e).sum()
    }

    /// Upper bound for a chi-square with `df` degrees of freedom that a
    /// uniform sample exceeds with probability far below 1e-6 (mean df,
    /// sd sqrt(2 df); 7 sd is generous and still catches real bias).
    fn chi2_bound(df: f64) -> f64 {
        df + 7.0 * (2.0 * df).sqrt()
    }

    #[test]
    fn every_candidate_is_uniform_and_independent_of_the_rank() {
        // Including 4 ranks (where hash mod 4 and the low index bits collide
        // in the published scheme) and bucket counts that are not powers of 2.
        for &(ranks, buckets) in &[
            (1u32, 1000u64),
            (2, 997),
            (3, 1024),
            (4, 1000),
            (7, 300),
            (8, 256),
        ] {
            let p = Placement::new(ranks, buckets, 4);
            let keys = 400_000u64;
            for k in 0..p.candidates() {
                // Per rank, the occupancy of candidate k must be uniform:
                // a rank choice that biased the indices shows up here.
                let mut counts = vec![vec![0u64; buckets as usize]; ranks as usize];
                let mut per_rank = vec![0u64; ranks as usize];
                for i in 0..keys {
                    let h = hash_key(&i.to_le_bytes());
                    let r = p.rank_of(h) as usize;
                    per_rank[r] += 1;
                    counts[r][p.candidate(h, k) as usize] += 1;
                }
                let df = (buckets - 1) as f64;
                for (r, c) in counts.iter().enumerate() {
                    let x = chi2(c);
                    assert!(
                        x < chi2_bound(df),
                        "ranks {ranks}, buckets {buckets}, candidate {k}, rank {r}: chi2 {x:.0} (df {df})"
                    );
                    assert!(c.iter().all(|&n| n > 0), "an unreachable bucket");
                }
                let x = chi2(&per_rank);
                assert!(
                    x < chi2_bound((ranks.max(2) - 1) as f64),
                    "rank choice biased: {per_rank:?}"
                );
            }
        }
    }

    #[test]
    fn the_candidates_of_a_key_are_distinct() {
        // Drawn with replacement, 8 candidates in 256 buckets repeat one
        // for about 10 % of keys; in 8 buckets, nearly all.
        for &(buckets, cands) in &[(256u64, 8u32), (8, 8), (9, 8), (3, 8), (1, 8), (1 << 40, 8)] {
            let p = Placement::new(1, buckets, cands);
            assert_eq!(u64::from(p.candidates()), u64::from(cands).min(buckets));
            for i in 0..20_000u64 {
                let h = hash_key(&i.to_le_bytes());
                let all: Vec<u64> = p.candidates_of(h).collect();
                let one_by_one: Vec<u64> = (0..p.candidates()).map(|k| p.candidate(h, k)).collect();
                assert_eq!(all, one_by_one);
                let mut sorted = all.clone();
                sorted.sort_unstable();
                sorted.dedup();
                assert_eq!(
                    sorted.len(),
                    all.len(),
                    "{buckets} buckets, key {i}: {all:?}"
                );
                assert!(all.iter().all(|&b| b < buckets));
            }
        }
    }

    #[test]
    fn later_candidates_stay_uniform_in_a_small_region() {
        // Redraws must not favour low buckets: in 10 buckets with 8
        // candidates, the last is drawn from the 3 the first 7 left.
        let p = Placement::new(1, 10, 8);
        for k in 0..8 {
            let mut counts = vec![0u64; 10];
            for i in 0..200_000u64 {
                counts[p.candidate(hash_key(&i.to_le_bytes()), k) as usize] += 1;
            }
            let x = chi2(&counts);
            assert!(
                x < chi2_bound(9.0),
                "candidate {k}: chi2 {x:.1}, {counts:?}"
            );
        }
    }

    #[test]
    fn the_published_scheme_fails_the_same_test() {
        // Guard that the test above can fail: rank = h mod 4 and the first
        // index = low byte of h mod B leaves 3/4 of the buckets of rank 0
        // unreachable from the first candidate.
        let (ranks, buckets) = (4u64, 256u64);
        let mut counts = vec![0u64; buckets as usize];
        for i in 0..100_000u64 {
            let h = hash_key(&i.to_le_bytes());
            if h.is_multiple_of(ranks) {
                counts[(h & 0xff) as usize % buckets as usize] += 1;
            }
        }
        let unreachable = counts.iter().filter(|&&n| n == 0).count();
        assert_eq!(unreachable, 192);
        assert!(chi2(&counts) > chi2_bound((buckets - 1) as f64));
    }

    #[test]
    fn hash_and_placement_match_their_published_values() {
        // Dumps restore by rehashing, and every rank of a job must place a
        // key alike: neither may change silently. The values were computed
        // apart from this code (the word fold of `hash_key`'s doc, then the
        // splitmix64 finaliser; multiply-shift reduction), by hand in Python.
        assert_eq!(hash_key(b""), 0xe9e0_033e_3bad_af36);
        assert_eq!(hash_key(b"poet"), 0xa4d0_8df1_7168_6d03);
        assert_eq!(hash_key(b"key-000000000001"), 0xbefd_dce1_3b10_c035);
        let p = Placement::new(4, 1000, 3);
        let h = hash_key(b"poet");
        assert_eq!(p.rank_of(h), 0);
        assert_eq!(p.candidates_of(h).collect::<Vec<_>>(), vec![661, 952, 598]);
    }
}
