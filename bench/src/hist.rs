//! Latency histograms: nanoseconds from 1 to an hour at three significant
//! digits (hdrhistogram), so a run of any length costs the same memory
//! (about 264 KiB of counters), and threads' and ranks' histograms merge
//! into one. Between ranks a histogram travels as its (value, count) pairs,
//! a few hundred of them at most.

use hdrhistogram::Histogram;
use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// The slowest latency recorded as itself: an hour; slower ones count as
/// an hour.
const MAX_NS: u64 = 3_600_000_000_000;

/// A latency histogram in nanoseconds.
#[derive(Clone, Debug, PartialEq)]
pub struct Hist(Histogram<u64>);

impl Default for Hist {
    fn default() -> Self {
        Hist(Histogram::new_with_bounds(1, MAX_NS, 3).expect("constant bounds are valid"))
    }
}

impl Hist {
    /// An empty histogram.
    pub fn new() -> Hist {
        Hist::default()
    }

    /// Records one latency of `ns` (0 counts as 1, above an hour as an
    /// hour).
    pub fn record(&mut self, ns: u64) {
        self.record_n(ns, 1);
    }

    /// Records `n` latencies of `ns`.
    pub fn record_n(&mut self, ns: u64, n: u64) {
        // Within the bounds after the clamp, so it cannot fail.
        let _ = self.0.record_n(ns.clamp(1, MAX_NS), n);
    }

    /// Adds every count of `other`.
    pub fn merge(&mut self, other: &Hist) {
        // Same bounds and precision on both sides, so nothing can fail.
        let _ = self.0.add(&other.0);
    }

    /// Whether nothing was recorded.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// The histogram itself, for its quantiles, minimum, maximum and mean.
    pub fn get(&self) -> &Histogram<u64> {
        &self.0
    }

    /// Each recorded value (the highest of its bucket) with its count.
    pub fn pairs(&self) -> impl Iterator<Item = (u64, u64)> + '_ {
        self.0
            .iter_recorded()
            .map(|v| (v.value_iterated_to(), v.count_at_value()))
    }
}

impl Serialize for Hist {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_seq(self.pairs())
    }
}

impl<'de> Deserialize<'de> for Hist {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Hist, D::Error> {
        let pairs = Vec::<(u64, u64)>::deserialize(d)?;
        let mut h = Hist::new();
        for (v, n) in pairs {
            h.record_n(v, n);
        }
        Ok(h)
    }
}

#[cfg(test)]
mod tests {
    use super::Hist;

    #[test]
    fn histograms_merge_and_travel_as_pairs() {
        let (mut a, mut b) = (Hist::new(), Hist::new());
        for ns in [0, 1, 2_000, 2_000, 50_000] {
            a.record(ns);
        }
        b.record(2_000);
        b.record(u64::MAX);
        a.merge(&b);
        assert_eq!(a.get().len(), 7);
        // 0 counts as 1 ns; beyond an hour as an hour (to its bucket).
        assert_eq!(a.get().min(), 1);
        assert!(a.get().max() >= 3_600_000_000_000);
        assert_eq!(a.get().count_at(2_000), 3);
        let json = serde_json::to_string(&a).unwrap();
        assert!(json.starts_with("[[1,2],[2000,3],"), "{json}");
        let back: Hist = serde_json::from_str(&json).unwrap();
        assert_eq!(back, a);
        assert!(serde_json::from_str::<Hist>("[[1,2,3]]").is_err());
        assert!(Hist::new().is_empty());
    }
}
