//! Measurement maths, with no I/O: latency summaries of histograms, rates,
//! and where a size sweep stops being message-rate bound.

use serde::{Deserialize, Serialize};

use crate::hist::Hist;

/// Latency summary of one run, in microseconds.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct Latency {
    /// Fastest sample.
    pub min: f64,
    /// Median (p50).
    pub p50: f64,
    /// 99th percentile.
    pub p99: f64,
    /// Slowest sample.
    pub max: f64,
    /// Arithmetic mean.
    pub mean: f64,
}

impl Latency {
    /// Summarises a histogram of nanoseconds (to its resolution: three
    /// significant digits). `None` when it is empty.
    pub fn from_hist(h: &Hist) -> Option<Latency> {
        if h.is_empty() {
            return None;
        }
        let (h, us) = (h.get(), |ns: u64| ns as f64 / 1e3);
        Some(Latency {
            min: us(h.min()),
            p50: us(h.value_at_quantile(0.5)),
            p99: us(h.value_at_quantile(0.99)),
            max: us(h.max()),
            mean: h.mean() / 1e3,
        })
    }
}

/// Rates of a run of `iters` transfers of `bytes` each in `secs` (0
/// where a file read back does not say).
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct Rates {
    /// Megabytes (10^6) per second, as perftest and fabtests count.
    pub mb_per_sec: f64,
    /// Microseconds per transfer.
    pub usec_per_xfer: f64,
    /// Millions of transfers per second.
    pub mxfers_per_sec: f64,
}

impl Rates {
    /// Rates of `iters` transfers of `bytes` in `secs` seconds.
    pub fn new(bytes: usize, iters: u64, secs: f64) -> Rates {
        if iters == 0 || secs <= 0.0 {
            return Rates {
                mb_per_sec: 0.0,
                usec_per_xfer: 0.0,
                mxfers_per_sec: 0.0,
            };
        }
        Rates {
            mb_per_sec: bytes as f64 * iters as f64 / secs / 1e6,
            usec_per_xfer: secs * 1e6 / iters as f64,
            mxfers_per_sec: iters as f64 / secs / 1e6,
        }
    }

    /// The sum of two concurrent runs (bidirectional: both sides' traffic).
    pub fn sum(self, other: Rates) -> Rates {
        let mxfers = self.mxfers_per_sec + other.mxfers_per_sec;
        Rates {
            mb_per_sec: self.mb_per_sec + other.mb_per_sec,
            usec_per_xfer: if mxfers > 0.0 { 1.0 / mxfers } else { 0.0 },
            mxfers_per_sec: mxfers,
        }
    }
}

/// Where a size sweep's message rate stops being flat.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct Knee {
    /// Mean rate over the flat (message-rate bound) sizes, Mxfers/s.
    pub plateau_mxfers_per_sec: f64,
    /// Largest size still on the plateau.
    pub last_flat_bytes: usize,
    /// First size whose rate fell below the plateau (bandwidth bound), if
    /// the sweep reached it.
    pub first_bound_bytes: Option<usize>,
    /// Highest bandwidth seen in the sweep, MB/s.
    pub peak_mb_per_sec: f64,
}

/// Finds the packet-rate wall in a sweep of `(bytes, Mxfers/s, MB/s)`
/// points sorted by size. The plateau is set by the smallest sizes; a size
/// belongs to it while its rate stays within `tolerance` (e.g. 0.2 = 20 %)
/// of the plateau's running mean. Needs a sweep: at least three sizes
/// spanning a factor of four (184 and 189 B differ only by noise).
pub fn knee(points: &[(usize, f64, f64)], tolerance: f64) -> Option<Knee> {
    let (first, last) = (points.first()?.0, points.last()?.0);
    if points.len() < 3 || last < first.saturating_mul(4) {
        return None;
    }
    let mut sum = points[0].1;
    let mut n = 1;
    let mut last_flat = points[0].0;
    let mut first_bound = None;
    for &(bytes, rate, _) in &points[1..] {
        let mean = sum / n as f64;
        if (rate - mean).abs() <= tolerance * mean {
            sum += rate;
            n += 1;
            last_flat = bytes;
        } else {
            first_bound = Some(bytes);
            break;
        }
    }
    Some(Knee {
        plateau_mxfers_per_sec: sum / n as f64,
        last_flat_bytes: last_flat,
        first_bound_bytes: first_bound,
        peak_mb_per_sec: points.iter().map(|p| p.2).fold(0.0, f64::max),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn latency_summary_of_a_histogram() {
        // 98 fast samples, two slow outliers, over two threads' histograms.
        let (mut a, mut b) = (Hist::new(), Hist::new());
        for _ in 0..98 {
            a.record(2_000);
        }
        b.record(50_000);
        b.record(90_000);
        a.merge(&b);
        let l = Latency::from_hist(&a).unwrap();
        // Three significant digits: each value within 0.1 % of the sample.
        let near = |got: f64, want: f64| (got - want).abs() <= want * 1e-3;
        assert!(near(l.min, 2.0), "{l:?}");
        assert!(near(l.p50, 2.0), "{l:?}");
        assert!(near(l.p99, 50.0), "{l:?}");
        assert!(near(l.max, 90.0), "{l:?}");
        assert!(near(l.mean, (98.0 * 2.0 + 140.0) / 100.0), "{l:?}");
        assert!(Latency::from_hist(&Hist::new()).is_none());
        // One sample: every percentile is it, to the histogram's resolution
        // (the top of its bucket, as hdrhistogram reports quantiles).
        let mut one = Hist::new();
        one.record(7_000);
        let l = Latency::from_hist(&one).unwrap();
        let top = one.get().highest_equivalent(7_000) as f64 / 1e3;
        assert_eq!((l.p50, l.p99, l.max), (top, top, top));
        assert_eq!(l.min, 7.0);
        assert!(near(top, 7.0));
    }

    #[test]
    fn rates_count_like_fabtests() {
        // 1,000,000 transfers of 184 B in 2 s.
        let r = Rates::new(184, 1_000_000, 2.0);
        assert!((r.mxfers_per_sec - 0.5).abs() < 1e-12);
        assert!((r.usec_per_xfer - 2.0).abs() < 1e-12);
        assert!((r.mb_per_sec - 92.0).abs() < 1e-9);
        let both = r.sum(r);
        assert!((both.mxfers_per_sec - 1.0).abs() < 1e-12);
        assert!((both.mb_per_sec - 184.0).abs() < 1e-9);
        assert!((both.usec_per_xfer - 1.0).abs() < 1e-12);
        assert_eq!(Rates::new(8, 0, 1.0).mxfers_per_sec, 0.0);
    }

    #[test]
    fn knee_finds_the_packet_rate_wall() {
        // Flat ~15 Mpps, then a 56 Gbit/s (7000 MB/s) link bounds it: 512 B
        // at 13.4 M/s is still within 20 % of the plateau, 1 KiB is not.
        let link = 7000.0;
        let pts: Vec<(usize, f64, f64)> = (3..=16)
            .map(|p| {
                let b = 1usize << p;
                let rate = (15.0f64).min(link / b as f64) * if p % 2 == 0 { 1.02 } else { 0.98 };
                (b, rate, rate * b as f64)
            })
            .collect();
        let k = knee(&pts, 0.2).unwrap();
        assert_eq!(k.last_flat_bytes, 512);
        assert_eq!(k.first_bound_bytes, Some(1024));
        assert!((k.plateau_mxfers_per_sec - 15.0).abs() < 0.3, "{k:?}");
        assert!(k.peak_mb_per_sec > 6800.0);
    }

    #[test]
    fn knee_of_a_flat_sweep_has_no_bound_size() {
        let pts = [(8, 1.0, 8.0), (16, 1.05, 16.8), (32, 0.97, 31.0)];
        let k = knee(&pts, 0.2).unwrap();
        assert_eq!(k.first_bound_bytes, None);
        assert_eq!(k.last_flat_bytes, 32);
        assert!(knee(&pts[..1], 0.2).is_none());
        assert!(knee(&pts[..2], 0.2).is_none());
        let records = [(184, 0.69, 127.0), (189, 0.42, 80.0), (190, 0.5, 95.0)];
        assert!(
            knee(&records, 0.2).is_none(),
            "noise between near sizes is no knee"
        );
    }
}
