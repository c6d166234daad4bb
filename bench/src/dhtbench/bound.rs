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
//! `1 / (r/R + w/W + a/A)` operations per second: the fabric's time for
//! each kind, added, as if they shared one resource (on a NIC that runs
//! them side by side the true bound is higher). Reads and writes are
//! priced at the perf point nearest the size the variant moves (a bucket;
//! a whole chunk for chunked reads). The anchor measures one pair of
//! ranks, so a bound is given for two ranks, one per host, on the
//! provider perf used, and not for MPI runs. A fraction above 1 means the
//! bound is wrong.

use std::path::{Path, PathBuf};

use anyhow::Result;
use fabkit_dht::{Config, Variant};
use serde::{Deserialize, Serialize};

use crate::exit;
use crate::flags::from_file::{self, BYTES, CPU_NS, LATENCY_US, RATE};
use crate::flags::Record;
use crate::perf::report::Report;
use crate::perf::{Pattern, PerfOp, Point, WriteCompletion};

/// A fabric rate the bound may use, and where it came from.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Rate {
    /// Operations per second, both directions summed.
    pub per_sec: f64,
    /// Transfer size of the point it was measured at.
    pub bytes: u64,
    /// Busy CPU of the job per transfer at that point, ns (none in files
    /// of older fabkit).
    #[serde(default)]
    pub cpu_ns: Option<f64>,
}

/// The fabric's measured rates, every usable point of each kind.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct Rates {
    /// RMA reads, by size.
    pub reads: Vec<Rate>,
    /// Delivery-complete RMA writes, by size.
    pub writes: Vec<Rate>,
    /// u64 atomics (compare-and-swap, or fetch-and-add if no CAS point).
    pub atomic: Option<Rate>,
    /// Messages (`-o send`), by size: what the message path's requests
    /// and replies cost (none in files of older fabkit).
    #[serde(default)]
    pub sends: Vec<Rate>,
    /// Messages one at a time (`-o send --pattern lat`, a ping-pong), by
    /// size: `per_sec` is one over the half round trip's median, so a
    /// request and its reply take `1/S(req) + 1/S(rep)`.
    #[serde(default)]
    pub send_latency: Vec<Rate>,
    /// Who executes the provider's operations at the target, from the
    /// perf files (none in files of older fabkit, and for MPI).
    #[serde(default)]
    pub executes: Option<fabkit_fabric::Executes>,
}

/// A run's bound, and how near it came.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Bound {
    /// Operations per second the fabric allows the job.
    pub ops_per_sec: f64,
    /// The run's median over the bound.
    pub fraction: f64,
    /// Per DHT operation: reads sent to the other rank.
    pub cross_reads_per_op: f64,
    /// Per DHT operation: writes sent to the other rank.
    pub cross_writes_per_op: f64,
    /// Per DHT operation: atomics sent to the other rank.
    pub cross_atomics_per_op: f64,
    /// Per DHT operation: operations aimed at the rank itself (not in the
    /// bound).
    pub self_ops_per_op: f64,
    /// The rates used (ops/s, both directions), null where none crossed.
    pub read_rate: Option<f64>,
    /// See `read_rate`.
    pub write_rate: Option<f64>,
    /// See `read_rate`.
    pub atomic_rate: Option<f64>,
}

/// Says how to make a file the bound can use.
const MAKE: &str = "make one with fabkit perf -b --pattern bw [-o write --completion delivery \
                    | -o read | -o cas] --json FILE";

/// Refuses, before a run, a --bound that cannot say what it claims: with
/// MPI (the anchor is libfabric's), or with other than two ranks (it
/// measures one pair).
pub fn check(files: &[PathBuf], ranks: usize, mpi: bool) -> Result<()> {
    if files.is_empty() {
        return Ok(());
    }
    if mpi {
        return Err(exit::usage(
            "--bound takes libfabric's rates (fabkit perf); an MPI run has no bound here: drop \
             --bound or --mpi",
        ));
    }
    if ranks != 2 {
        return Err(exit::usage(format!(
            "--bound is for 2 ranks, one per host (its anchor measures one pair), not {ranks}: \
             run -n 2 (fabkit launch --netns A,B)"
        )));
    }
    Ok(())
}

/// Reads a report a fabkit command wrote (`writer`, such as `fabkit perf
/// --json`) into its type, given as `flag`: a file that cannot be read, is
/// not JSON, has no array `list` (a perf report's `points`, a dht
/// report's `runs`: another command's file) or does not read as the
/// report is a usage error naming the flag, the file and the writer.
pub fn read_report<T: serde::de::DeserializeOwned>(
    path: &Path,
    flag: &str,
    writer: &str,
    list: &str,
) -> Result<T> {
    let named = |what: String| exit::usage(format!("{flag} {}: {what}", path.display()));
    let bad = |why: String| named(format!("{why}; give a file `{writer}` wrote"));
    let text = std::fs::read_to_string(path).map_err(|e| bad(e.to_string()))?;
    let doc: serde_json::Value =
        serde_json::from_str(&text).map_err(|e| bad(format!("not JSON ({e})")))?;
    if !doc[list].is_array() {
        return Err(named(format!(
            "no \"{list}\": give a file `{writer}` wrote"
        )));
    }
    serde_json::from_value(doc).map_err(|e| bad(format!("not its report ({e})")))
}

/// Reads the rates from `fabkit perf --json` files given as `flag`, all
/// measured on `provider` (`None`: the first file's), refusing a file of
/// another provider, one measured with several threads per rank, one
/// without a usable point, and a rate that is not a finite positive
/// number; and, when a variant of `variants` sends atomics, a set with no
/// atomic rate.
pub fn load(
    files: &[PathBuf],
    flag: &str,
    provider: Option<&str>,
    variants: &[Variant],
) -> Result<Rates> {
    let mut rates = Rates::default();
    let mut atomic_cas = false;
    // The provider every file must share, and what it is: the run's, or
    // the first file's.
    let mut want: Option<(String, &str)> = provider.map(|p| (p.to_string(), "this run is on"));
    for f in files {
        let name = f.display();
        let bad = |what: String| exit::usage(format!("{flag} {name}: {what}"));
        let doc: Report = read_report(f, flag, "fabkit perf --json", "points")?;
        rates.executes = rates.executes.or(doc.meta.executes);
        let theirs = Some(doc.meta.provider.as_str()).filter(|p| !p.is_empty());
        let (p, on) = want.get_or_insert_with(|| {
            (
                theirs.unwrap_or_default().to_string(),
                "the first file was measured on",
            )
        });
        match theirs {
            Some(t) if t == p.as_str() => {}
            other => {
                return Err(bad(format!(
                    "measured on provider {}, {on} `{p}`: give files of the run's provider",
                    other.map_or("(none)".into(), |p| format!("`{p}`"))
                )))
            }
        }
        let mut used = 0;
        for (n, p) in doc.points.iter().enumerate() {
            let Some(kind) = kind_of(p) else { continue };
            if kind == Kind::SendLatency {
                // A ping-pong: its median half round trip.
                let half = p.latency.as_ref().map(|l| l.p50).unwrap_or(0.0);
                let half = from_file::check(&format!("point {n}'s latency"), half, LATENCY_US)
                    .map_err(bad)?;
                if p.threads != 1 {
                    return Err(bad(format!(
                        "point {n} is a send ping-pong without a positive latency from one \
                         thread: give a file fabkit perf -o send --pattern lat wrote"
                    )));
                }
                used += 1;
                rates.send_latency.push(Rate {
                    per_sec: 1e6 / half,
                    bytes: p.bytes as u64,
                    cpu_ns: None,
                });
                continue;
            }
            if p.threads != 1 {
                return Err(bad(format!(
                    "point {n} was measured with {} threads per rank; a DHT rank posts from \
                     one: measure with -T 1",
                    p.threads
                )));
            }
            let per_sec = p.rates.mxfers_per_sec * 1e6;
            from_file::check(&format!("point {n}'s rate per second"), per_sec, RATE)
                .map_err(bad)?;
            from_file::check(&format!("point {n}'s bytes"), p.bytes as f64, BYTES).map_err(bad)?;
            used += 1;
            let cpu_ns = p
                .cpu_ns_per_xfer
                .map(|c| {
                    from_file::check_or_zero(&format!("point {n}'s CPU ns per transfer"), c, CPU_NS)
                })
                .transpose()
                .map_err(bad)?;
            let rate = Rate {
                per_sec,
                bytes: p.bytes as u64,
                cpu_ns,
            };
            match kind {
                Kind::Read => rates.reads.push(rate),
                Kind::Write => rates.writes.push(rate),
                Kind::Send => rates.sends.push(rate),
                Kind::SendLatency => unreachable!("taken above"),
                // A CAS point wins over a fetch-and-add one.
                Kind::Atomic { cas } if rates.atomic.is_none() || (cas && !atomic_cas) => {
                    rates.atomic = Some(rate);
                    atomic_cas = cas;
                }
                Kind::Atomic { .. } => {}
            }
        }
        if used == 0 {
            return Err(bad(format!(
                "no point measured both directions at once with a window in flight (and \
                 writes delivery-complete); {MAKE}"
            )));
        }
    }
    if let Some(v) = variants.iter().find(|v| v.needs_atomics()) {
        if rates.atomic.is_none() {
            return Err(exit::usage(format!(
                "{flag}: the {} variant sends atomics across and no file gives an atomic rate: \
                 add {flag} FILE from fabkit perf -b -o cas --json FILE",
                v.name()
            )));
        }
    }
    Ok(rates)
}

/// A perf point's kind as the bound counts it.
#[derive(Clone, Copy, PartialEq)]
enum Kind {
    Read,
    Write,
    Send,
    SendLatency,
    Atomic { cas: bool },
}

/// A point's kind, if the bound or the model can use it: a bidirectional
/// window run (writes only delivery-complete), or a send ping-pong.
fn kind_of(p: &Point) -> Option<Kind> {
    if p.pattern == Pattern::Lat && p.op == PerfOp::Send {
        return Some(Kind::SendLatency);
    }
    if p.pattern != Pattern::Bw || !p.bidir {
        return None;
    }
    match p.op {
        PerfOp::Read => Some(Kind::Read),
        PerfOp::Write if p.completion == Some(WriteCompletion::Delivery) => Some(Kind::Write),
        PerfOp::Cas => Some(Kind::Atomic { cas: true }),
        PerfOp::Fadd => Some(Kind::Atomic { cas: false }),
        PerfOp::Send => Some(Kind::Send),
        PerfOp::Write => None,
    }
}

/// The sizes a variant reads and writes across: a bucket's data, and for
/// chunked reads a whole chunk of buckets.
pub fn sizes(variant: Variant, record: Record) -> (usize, usize) {
    let mut cfg = Config::new(variant);
    (cfg.key_len, cfg.value_len) = (record.key, record.value);
    let l = cfg.layout();
    let read = match variant {
        Variant::Chunked => l.bucket_len * cfg.chunk as usize,
        _ => l.data_len(),
    };
    (read, l.data_len())
}

/// The rate of the point nearest `bytes`.
fn nearest(points: &[Rate], bytes: usize) -> Option<f64> {
    nearest_point(points, bytes).map(|r| r.per_sec)
}

/// The point nearest `bytes`.
pub fn nearest_point(points: &[Rate], bytes: usize) -> Option<&Rate> {
    points.iter().min_by_key(|r| r.bytes.abs_diff(bytes as u64))
}

/// The bound of a run at `ops_per_sec` whose `ops` operations sent the
/// counted operations (`[reads, writes, atomics across, to itself]`),
/// reads and writes of `sizes`; None when none crosses, or one crosses of
/// a kind no rate was given for.
pub fn of(
    rates: &Rates,
    sizes: (usize, usize),
    ops_per_sec: f64,
    ops: u64,
    counted: [u64; 4],
) -> Option<Bound> {
    if ops == 0 {
        return None;
    }
    let per = |n: u64| n as f64 / ops as f64;
    let [reads, writes, atomics, itself] = counted.map(per);
    let used = |n: f64, rate: Option<f64>| if n > 0.0 { rate.map(Some) } else { Some(None) };
    let read_rate = used(reads, nearest(&rates.reads, sizes.0))?;
    let write_rate = used(writes, nearest(&rates.writes, sizes.1))?;
    let atomic_rate = used(atomics, rates.atomic.as_ref().map(|r| r.per_sec))?;
    let secs: f64 = [
        (reads, read_rate),
        (writes, write_rate),
        (atomics, atomic_rate),
    ]
    .iter()
    .filter_map(|(n, r)| r.map(|r| n / r))
    .sum();
    if secs <= 0.0 {
        return None;
    }
    let bound = 1.0 / secs;
    Some(Bound {
        ops_per_sec: bound,
        fraction: ops_per_sec / bound,
        cross_reads_per_op: reads,
        cross_writes_per_op: writes,
        cross_atomics_per_op: atomics,
        self_ops_per_op: itself,
        read_rate,
        write_rate,
        atomic_rate,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rate(per_sec: f64, bytes: u64) -> Rate {
        Rate {
            per_sec,
            bytes,
            cpu_ns: None,
        }
    }

    #[test]
    fn the_bound_adds_each_kinds_time_at_the_nearest_size_and_leaves_self_ops_out() {
        let rates = Rates {
            reads: vec![rate(200_000.0, 192), rate(100_000.0, 1600)],
            writes: vec![rate(500_000.0, 192)],
            ..Rates::default()
        };
        // Per op: 1 read and 1 write across, 2 to itself; buckets of 184 B.
        let b = of(&rates, (184, 184), 100_000.0, 1000, [1000, 1000, 0, 2000]).unwrap();
        let want = 1.0 / (1.0 / 200_000.0 + 1.0 / 500_000.0);
        assert!((b.ops_per_sec - want).abs() < 1e-6, "{b:?}");
        assert!((b.fraction - 100_000.0 / want).abs() < 1e-9);
        assert_eq!((b.self_ops_per_op, b.atomic_rate), (2.0, None));
        // Whole chunks read: the 1600 B point.
        let c = of(&rates, (1600, 184), 1.0, 1000, [1000, 0, 0, 0]).unwrap();
        assert_eq!(c.read_rate, Some(100_000.0));
        // An atomic crosses, and no rate says how fast: no bound.
        assert_eq!(of(&rates, (184, 184), 1.0, 10, [10, 0, 1, 0]), None);
        // Nothing crosses: no bound either.
        assert_eq!(of(&rates, (184, 184), 1.0, 10, [0, 0, 0, 10]), None);
    }

    #[test]
    fn only_usable_points_count_and_a_file_that_cannot_bound_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("perf.json");
        let pt = |op: &str, bytes: u64, bidir: bool, completion: &str, m: f64| {
            serde_json::json!({"op": op, "pattern": "bw", "bytes": bytes, "bidir": bidir,
                "threads": 1, "completion": completion, "rates": {"mxfers_per_sec": m}})
        };
        let file = |points: Vec<serde_json::Value>, provider: &str| {
            let doc = serde_json::json!({"meta": {"provider": provider}, "points": points});
            std::fs::write(&f, doc.to_string()).unwrap();
        };
        file(
            vec![
                pt("write", 192, true, "transmit", 9.0),
                pt("write", 192, true, "delivery", 0.5),
                pt("read", 64, true, "transmit", 0.3),
                pt("read", 192, false, "transmit", 7.0),
                pt("fadd", 8, true, "transmit", 0.2),
                pt("cas", 8, true, "transmit", 0.1),
            ],
            "tcp",
        );
        let one = std::slice::from_ref(&f);
        let r = load(one, "--bound", Some("tcp"), &[Variant::Fine]).unwrap();
        assert_eq!(r.writes.len(), 1, "transmit-complete writes do not count");
        assert_eq!(r.reads.len(), 1, "one-way reads do not count");
        assert!(r.sends.is_empty(), "no send points were given");
        assert_eq!(
            r.atomic.unwrap().per_sec,
            100_000.0,
            "CAS over fetch-and-add"
        );
        let refused = |provider: &str, variants: &[Variant], needle: &str| {
            let e = load(one, "--bound", Some(provider), variants)
                .unwrap_err()
                .to_string();
            assert!(e.contains(needle) && e.contains("perf.json"), "{e}");
        };
        refused("shm", &[], "measured on provider `tcp`");
        file(vec![pt("read", 192, true, "transmit", 0.3)], "tcp");
        // Without a run's provider, the first file's is the one all share.
        let g = dir.path().join("shm.json");
        let shm = serde_json::json!({"meta": {"provider": "shm"}, "points": [pt("read", 192, true, "transmit", 0.3)]});
        std::fs::write(&g, shm.to_string()).unwrap();
        assert!(load(std::slice::from_ref(&g), "--perf", None, &[]).is_ok());
        let e = load(&[g, f.clone()], "--perf", None, &[])
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("--perf") && e.contains("the first file was measured on `shm`"),
            "{e}"
        );
        let e = load(one, "--bound", Some("tcp"), &[Variant::Chunked])
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("chunked variant sends atomics") && e.contains("-o cas"),
            "{e}"
        );
        file(vec![pt("read", 192, true, "transmit", -1.0)], "tcp");
        refused("tcp", &[], "point 0's rate per second is -1e6");
        file(vec![], "tcp");
        refused("tcp", &[], "fabkit perf -b");
        let e = load(&[dir.path().join("none.json")], "--bound", Some("tcp"), &[]).unwrap_err();
        assert!(e.to_string().contains("none.json"), "{e}");
        let e = check(one, 3, false).unwrap_err().to_string();
        assert!(e.contains("for 2 ranks"), "{e}");
        assert!(check(one, 2, true).is_err());
        assert!(check(one, 2, false).is_ok());
    }
}
