//! The bound a fabric puts on the DHT: the fabric's own rates for the
//! operations a DHT operation sends to other ranks, from `fabkit perf`
//! runs saved with `--json` (bidirectional, a window in flight, writes
//! delivery-complete, the way the DHT's stores use the fabric), combined
//! with how many of each kind one DHT operation sends across (the
//! table's counters). Operations a rank aims at itself are left out of
//! the bound and reported apart: they loop back through the provider, or
//! cost a memory access on the same-node path.
//!
//! For a phase whose operations send `r` reads, `w` writes and `a`
//! atomics across per operation, and fabric rates `R`, `W`, `A` (both
//! directions at once, summed over the pair of ranks), the bound is
//! `1 / (r/R + w/W + a/A)` operations per second for the pair, scaled by
//! ranks/2 for larger jobs (each pair of ranks as fast as the measured
//! one: an upper bound). A fraction above 1 means the bound is wrong.

use std::path::{Path, PathBuf};

use anyhow::Result;
use serde::{Deserialize, Serialize};

use crate::bounds;

/// One fabric rate the bound uses, and where it came from.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Rate {
    /// Operations per second, both directions summed.
    pub per_sec: f64,
    /// Transfer size of the point it was measured at.
    pub bytes: u64,
    /// The `fabkit perf` file.
    pub file: String,
}

/// The fabric's rates for each kind the DHT sends.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct Rates {
    /// RMA reads.
    pub read: Option<Rate>,
    /// Delivery-complete RMA writes.
    pub write: Option<Rate>,
    /// u64 atomics (compare-and-swap, or fetch-and-add if no CAS point).
    pub atomic: Option<Rate>,
}

/// A run's bound, and how near it came.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Bound {
    /// Operations per second the fabric allows the job.
    pub ops_per_sec: f64,
    /// The run's median over the bound.
    pub fraction: f64,
    /// Per DHT operation: reads, writes and atomics sent to other ranks,
    /// and operations aimed at the rank itself (not in the bound).
    pub cross_reads: f64,
    /// See `cross_reads`.
    pub cross_writes: f64,
    /// See `cross_reads`.
    pub cross_atomics: f64,
    /// See `cross_reads`.
    pub self_ops: f64,
}

/// A perf point's kind as the bound counts it.
#[derive(Clone, Copy, PartialEq)]
enum Kind {
    Read,
    Write,
    Atomic { cas: bool },
}

/// Reads the rates from `fabkit perf --json` files: for reads and writes
/// the point nearest `bytes` (the bucket's record), for atomics a CAS
/// point (else fetch-and-add). Usage errors name the file and the fix.
pub fn load(files: &[PathBuf], bytes: usize) -> Result<Rates> {
    let mut rates = Rates::default();
    let mut atomic_cas = false;
    for f in files {
        let text = std::fs::read_to_string(f).map_err(|e| {
            bounds::usage(format!(
                "--bound {}: {e}; give a file `fabkit perf --json` wrote",
                f.display()
            ))
        })?;
        let doc: serde_json::Value = serde_json::from_str(&text).map_err(|e| {
            bounds::usage(format!(
                "--bound {}: not JSON ({e}); give a file `fabkit perf --json` wrote",
                f.display()
            ))
        })?;
        let points = doc["points"].as_array().ok_or_else(|| {
            bounds::usage(format!(
                "--bound {}: no \"points\": give a file `fabkit perf --json` wrote",
                f.display()
            ))
        })?;
        let mut used = 0;
        for p in points {
            let Some((kind, rate)) = point(p, f) else {
                continue;
            };
            used += 1;
            let near =
                |old: &Rate| rate.bytes.abs_diff(bytes as u64) < old.bytes.abs_diff(bytes as u64);
            match kind {
                Kind::Read if rates.read.as_ref().is_none_or(near) => rates.read = Some(rate),
                Kind::Write if rates.write.as_ref().is_none_or(near) => rates.write = Some(rate),
                // A CAS point wins over a fetch-and-add one.
                Kind::Atomic { cas } if rates.atomic.is_none() || (cas && !atomic_cas) => {
                    rates.atomic = Some(rate);
                    atomic_cas = cas;
                }
                _ => {}
            }
        }
        if used == 0 {
            return Err(bounds::usage(format!(
                "--bound {}: no point measured both directions at once with a window in \
                 flight (and writes delivery-complete); make one with fabkit perf -b \
                 --pattern bw [-o write --completion delivery | -o read | -o cas] --json FILE",
                f.display()
            )));
        }
    }
    Ok(rates)
}

/// A point's kind and rate, if the bound can use it.
fn point(p: &serde_json::Value, file: &Path) -> Option<(Kind, Rate)> {
    if p["pattern"] != "bw" || p["bidir"] != true {
        return None;
    }
    let kind = match p["op"].as_str()? {
        "read" => Kind::Read,
        "write" if p["completion"] == "delivery" => Kind::Write,
        "cas" => Kind::Atomic { cas: true },
        "fadd" => Kind::Atomic { cas: false },
        _ => return None,
    };
    let per_sec = p["rates"]["mxfers_per_sec"].as_f64()? * 1e6;
    (per_sec > 0.0).then(|| {
        (
            kind,
            Rate {
                per_sec,
                bytes: p["bytes"].as_u64().unwrap_or(0),
                file: file.display().to_string(),
            },
        )
    })
}

/// The bound of a run of `ranks` ranks at `ops_per_sec` whose `ops`
/// operations sent the counted operations; None when an operation crosses
/// of a kind no rate was given for, or none crosses at all.
pub fn of(
    rates: &Rates,
    ranks: usize,
    ops_per_sec: f64,
    ops: u64,
    counted: [u64; 4],
) -> Option<Bound> {
    if ops == 0 {
        return None;
    }
    let per = |n: u64| n as f64 / ops as f64;
    let [reads, writes, atomics, itself] = counted.map(per);
    let mut secs = 0.0;
    for (n, rate) in [
        (reads, &rates.read),
        (writes, &rates.write),
        (atomics, &rates.atomic),
    ] {
        if n > 0.0 {
            secs += n / rate.as_ref()?.per_sec;
        }
    }
    if secs <= 0.0 {
        return None;
    }
    let bound = 1.0 / secs * (ranks.max(2) as f64 / 2.0);
    Some(Bound {
        ops_per_sec: bound,
        fraction: ops_per_sec / bound,
        cross_reads: reads,
        cross_writes: writes,
        cross_atomics: atomics,
        self_ops: itself,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rate(per_sec: f64) -> Option<Rate> {
        Some(Rate {
            per_sec,
            bytes: 192,
            file: "f".into(),
        })
    }

    #[test]
    fn the_bound_adds_each_kinds_time_and_leaves_self_ops_out() {
        let rates = Rates {
            read: rate(200_000.0),
            write: rate(500_000.0),
            atomic: None,
        };
        // Per op: 1 read and 1 write across, 2 to itself.
        let b = of(&rates, 2, 100_000.0, 1000, [1000, 1000, 0, 2000]).unwrap();
        let want = 1.0 / (1.0 / 200_000.0 + 1.0 / 500_000.0);
        assert!((b.ops_per_sec - want).abs() < 1e-6, "{b:?}");
        assert!((b.fraction - 100_000.0 / want).abs() < 1e-9);
        assert_eq!(b.self_ops, 2.0);
        // An atomic crosses, and no rate says how fast: no bound.
        assert_eq!(of(&rates, 2, 1.0, 10, [10, 0, 1, 0]), None);
        // Nothing crosses (one rank): no bound either.
        assert_eq!(of(&rates, 1, 1.0, 10, [0, 0, 0, 10]), None);
        // Four ranks: two pairs.
        let four = of(&rates, 4, 1.0, 1000, [1000, 1000, 0, 0]).unwrap();
        assert!((four.ops_per_sec - 2.0 * want).abs() < 1e-6);
    }

    #[test]
    fn only_bidirectional_window_points_count_and_writes_must_be_delivery_complete() {
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("perf.json");
        let pt = |op: &str, bytes: u64, bidir: bool, completion: &str, m: f64| {
            serde_json::json!({"op": op, "pattern": "bw", "bytes": bytes, "bidir": bidir,
                "completion": completion, "rates": {"mxfers_per_sec": m}})
        };
        let doc = serde_json::json!({"points": [
            pt("write", 192, true, "transmit", 9.0),
            pt("write", 192, true, "delivery", 0.5),
            pt("read", 64, true, "transmit", 0.3),
            pt("read", 256, true, "transmit", 0.2),
            pt("read", 192, false, "transmit", 7.0),
            pt("fadd", 8, true, "transmit", 0.2),
            pt("cas", 8, true, "transmit", 0.1),
        ]});
        std::fs::write(&f, doc.to_string()).unwrap();
        let r = load(std::slice::from_ref(&f), 184).unwrap();
        assert_eq!(r.write.unwrap().per_sec, 500_000.0);
        // 256 is nearer 184 than 64 is.
        assert_eq!(r.read.unwrap().per_sec, 200_000.0);
        assert_eq!(
            r.atomic.unwrap().per_sec,
            100_000.0,
            "CAS over fetch-and-add"
        );
        std::fs::write(&f, r#"{"points": []}"#).unwrap();
        let e = load(std::slice::from_ref(&f), 184).unwrap_err().to_string();
        assert!(e.contains("fabkit perf -b"), "{e}");
        let e = load(&[dir.path().join("none.json")], 184)
            .unwrap_err()
            .to_string();
        assert!(e.contains("--bound") && e.contains("none.json"), "{e}");
    }
}
