//! What `fabkit dht` reports: the samples of every repetition merged into
//! one run per system, variant, workload and phase (median and spread),
//! with latency percentiles, CPU time and bytes per operation; printed as a
//! table, written as CSV and as JSON in one schema, and drawn against the
//! rank count.
//!
//! The JSON schema (`meta` once, a `runs` entry per row of the table):
//! ```text
//! {"meta": {"command", "commit", "host", "machine", "launch", "provider", "notes": [..]},
//!  "runs": [{"system": "fabkit" | "redis", "variant", "transport",
//!            "path": "memory" | "rma" | "memory+rma" (none for Redis), "workload",
//!            "distribution", "record": {"key", "value"}, "ranks", "batch", "phase",
//!            "reps", "ops_per_sec", "ops_per_sec_min", "ops_per_sec_max",
//!            "ops_per_sec_reps": [..], "writes_per_sec", "reads_per_sec",
//!            "latency_us": {"kind", "samples", "p50", "p90", "p99", "p99_9", "p99_99"},
//!            "latency_single_us": {..} | null, "cpu_ns_per_op",
//!            "nominal_cycles_per_op", "nominal_ghz", "bytes_per_byte",
//!            "vs_redis", "counters": {..}, "hot_key": {..} | null,
//!            "bound": {"ops_per_sec", "fraction", "cross_reads_per_op",
//!                      "cross_writes_per_op", "cross_atomics_per_op", "self_ops_per_op",
//!                      "read_rate", "write_rate", "atomic_rate"} | null}]}
//! ```
//! `p99_99` is null below 10^6 samples; `latency_us.kind` says what one
//! sample is ("per batch of 64 operations" or "per operation").

use std::collections::{BTreeMap, HashMap};
use std::fmt::Write as _;

use anyhow::Result;
use serde::{Deserialize, Serialize};

use super::workload::{Dist, PhaseName, Workload};
use super::{HotKey, Sample, System};
use crate::flags::Record;
use crate::hist::Hist;
use fabkit_core::provenance::Provenance;
use fabkit_dht::Variant;

/// Where and how the run was made.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Meta {
    /// Command, commit, host, machine, cores, launch and fabkit version.
    #[serde(flatten)]
    pub provenance: Provenance,
    /// The libfabric provider (or MPI).
    pub provider: String,
    /// What a reader must know to read the figures.
    pub notes: Vec<String>,
}

/// Latency percentiles in microseconds.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Latency {
    /// What one sample is.
    pub kind: String,
    /// Samples merged over ranks and repetitions.
    pub samples: u64,
    /// The median.
    pub p50: f64,
    /// Tail percentiles, each only from as many samples as it takes to
    /// have one beyond it (10, 100, 1000); none below that, since the
    /// largest sample is all a smaller run can say.
    pub p90: Option<f64>,
    /// See `p90`.
    pub p99: Option<f64>,
    /// See `p90`.
    pub p99_9: Option<f64>,
    /// Only from 10^6 samples or more.
    pub p99_99: Option<f64>,
}

/// The DHT's counters and the reads' checks, summed over ranks and
/// repetitions.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct Counters {
    /// Reads that found their key.
    pub hits: u64,
    /// Reads that did not.
    pub misses: u64,
    /// Reads given up as corrupt (lock-free, chunked).
    pub corrupt: u64,
    /// Hits whose value no writer wrote for the key (must be 0).
    pub wrong: u64,
    /// Reads of written keys that missed.
    pub lost: u64,
    /// Hits of keys nobody writes (must be 0).
    pub false_hits: u64,
    /// Writes into empty buckets, of present keys, over other keys.
    pub inserts: u64,
    /// See `inserts`.
    pub updates: u64,
    /// See `inserts`.
    pub evictions: u64,
    /// Checksum mismatches: re-reads after a bucket failed its checksum
    /// (the MPI-DHT paper's Table 2).
    pub checksum_mismatches: u64,
    /// Mismatches per read.
    pub mismatch_rate: f64,
    /// Buckets marked invalid.
    pub invalidations: u64,
    /// Failed lock attempts (fine, coarse).
    pub lock_retries: u64,
    /// Remote operations, and per DHT operation.
    pub remote_ops: u64,
    /// See `remote_ops`.
    pub remote_ops_per_op: f64,
    /// Post/complete cycles.
    pub batches: u64,
    /// Of `remote_ops`: the ones a rank aimed at itself (0 in reports
    /// written before fabkit counted them; `fabkit model` refuses those).
    #[serde(default)]
    pub self_ops: u64,
    /// Of `remote_ops`: reads, writes and atomics aimed at another rank,
    /// what the fabric's own rates bound.
    #[serde(default)]
    pub cross_reads: u64,
    /// See `cross_reads`.
    #[serde(default)]
    pub cross_writes: u64,
    /// See `cross_reads`.
    #[serde(default)]
    pub cross_atomics: u64,
    /// Keys of the DHT's operations that the rank making them owned (read
    /// or written in its own region, never leaving it).
    #[serde(default)]
    pub own_keys: u64,
    /// Request messages of the message path (one per owner and batch), and
    /// the keys they carried.
    #[serde(default)]
    pub requests: u64,
    /// See `requests`.
    #[serde(default)]
    pub request_keys: u64,
    /// Bytes of the requests and their replies.
    #[serde(default)]
    pub message_bytes: u64,
    /// Keys of peers' requests the ranks' services ran.
    #[serde(default)]
    pub served_keys: u64,
    /// Busy CPU time of the ranks' service threads, ns.
    #[serde(default)]
    pub service_cpu_ns: u64,
    /// Messages the ranks' services refused: never run, never answered
    /// (malformed, of another table, from outside the job, too long).
    #[serde(default)]
    pub refused: u64,
    /// Of `refused`: from an address not in the job.
    #[serde(default)]
    pub strangers: u64,
}

/// The depth of a report from before lanes.
fn one() -> usize {
    1
}

/// One row: a system, variant, workload and phase over its repetitions.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Run {
    /// The DHT or Redis.
    pub system: System,
    /// DHT variant (none for Redis).
    pub variant: Option<Variant>,
    /// What carried the operations, in words.
    pub transport: String,
    /// The path the DHT's operations took: `memory`, `rma`, `memory+rma`,
    /// or the message path, `message` and `memory+message`. Absent for
    /// Redis rows, and in reports written before it was recorded.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub path: Option<super::transports::Taken>,
    /// Workload.
    pub workload: Workload,
    /// Key distribution.
    pub distribution: Dist,
    /// Key and value bytes.
    pub record: Record,
    /// Ranks.
    pub ranks: usize,
    /// Operations per batch.
    pub batch: usize,
    /// Batches in flight an operation of a batch used (lanes), each
    /// serving a part of its keys; 1 for Redis, and in reports written
    /// before lanes existed (one batch was all a rank had in flight).
    #[serde(default = "one")]
    pub depth: usize,
    /// Phase.
    pub phase: PhaseName,
    /// Repetitions.
    pub reps: u32,
    /// Operations per second over all ranks: median of the repetitions.
    pub ops_per_sec: f64,
    /// Lowest repetition.
    pub ops_per_sec_min: f64,
    /// Highest repetition.
    pub ops_per_sec_max: f64,
    /// Every repetition's.
    pub ops_per_sec_reps: Vec<f64>,
    /// The writes and reads among them, per second (median repetition).
    pub writes_per_sec: f64,
    /// See `writes_per_sec`.
    pub reads_per_sec: f64,
    /// Of the timed pass.
    pub latency_us: Latency,
    /// Of the closed-loop pass of single operations, if one ran.
    pub latency_single_us: Option<Latency>,
    /// Busy CPU time of the job per operation (Redis: clients and servers).
    pub cpu_ns_per_op: f64,
    /// The same in cycles at the nominal clock (no hardware counters here).
    pub nominal_cycles_per_op: Option<f64>,
    /// The nominal clock, GHz.
    pub nominal_ghz: Option<f64>,
    /// Bytes the remote operations (Redis: RESP messages) carried per key
    /// and value byte asked for.
    pub bytes_per_byte: f64,
    /// This row's median ops/s over Redis's in the same workload and phase.
    pub vs_redis: Option<f64>,
    /// Counters.
    pub counters: Counters,
    /// The hot-key check (the variant's first workload).
    pub hot_key: Option<HotKey>,
    /// What the fabric's own rates allow (`--bound`), and how near.
    #[serde(default)]
    pub bound: Option<super::bound::Bound>,
    /// The share of the row's DHT operations whose key the rank making
    /// them owned (its own region; 1/ranks of uniform keys); none for
    /// Redis, and in reports written before it was counted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub own_share: Option<f64>,
    /// Busy CPU of the service threads per key they served, ns (the
    /// message path's owners; included in `cpu_ns_per_op`, which is the
    /// whole job's); none where no request was served, and in reports
    /// written before it was counted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub service_ns_per_key: Option<f64>,
}

/// The whole report.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Report {
    /// Where and how.
    pub meta: Meta,
    /// Rows.
    pub runs: Vec<Run>,
    /// With `--duration`: every rank's resources over the soak.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub soak: Option<super::soak::Soak>,
}

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(f64::total_cmp);
    match v.len() {
        0 => 0.0,
        n if n % 2 == 1 => v[n / 2],
        n => (v[n / 2 - 1] + v[n / 2]) / 2.0,
    }
}

fn latency(h: &Hist, kind: String) -> Latency {
    let h = h.get();
    let q = |p: f64| h.value_at_quantile(p) as f64 / 1000.0;
    let tail = |p: f64, need: u64| (h.len() >= need).then(|| q(p));
    Latency {
        kind,
        samples: h.len(),
        p50: q(0.5),
        p90: tail(0.9, 10),
        p99: tail(0.99, 100),
        p99_9: tail(0.999, 1000),
        p99_99: tail(0.9999, 1_000_000),
    }
}

/// The clock that turns busy CPU time into cycles, in GHz, as ipoib-eval
/// turns its CPU seconds into cycles per packet (`Clock::detect`: cpufreq's
/// maximum, else `cpu MHz`; this VM has no cycle counter). None when
/// neither is known.
pub fn nominal_ghz() -> Option<f64> {
    let c = fabkit_core::time::Clock::detect();
    (c.hz > 0.0).then(|| c.hz / 1e9)
}

/// A workload's (distribution's, perf operation's) name as the command
/// line takes it.
pub fn name<T: clap::ValueEnum>(v: T) -> String {
    v.to_possible_value()
        .map_or_else(|| "?".into(), |p| p.get_name().to_string())
}

/// A variant's name in reports, lower case, as its serde name.
pub fn variant_name(v: Variant) -> String {
    v.name().to_string()
}

/// Merges the samples of every repetition into runs, in the order their
/// first repetition came.
pub fn runs(samples: &[Sample], record: Record, rates: Option<&super::bound::Rates>) -> Vec<Run> {
    type Key = (System, Option<Variant>, String, Workload, PhaseName);
    let key = |s: &Sample| -> Key {
        (
            s.system,
            s.variant,
            s.transport.clone(),
            s.workload,
            s.phase,
        )
    };
    let mut order: Vec<Key> = Vec::new();
    let mut groups: HashMap<Key, Vec<&Sample>> = HashMap::new();
    for s in samples {
        let k = key(s);
        if !groups.contains_key(&k) {
            order.push(k.clone());
        }
        groups.entry(k).or_default().push(s);
    }
    let ghz = nominal_ghz();
    let mut out: Vec<Run> = order
        .iter()
        .map(|k| {
            let g = &groups[k];
            let mut r = merge(g, record, ghz);
            if let (Some(rates), Some(v), System::Fabkit) = (rates, r.variant, r.system) {
                let c = &r.counters;
                let ops = g.iter().map(|s| s.ops).sum();
                let counted = [c.cross_reads, c.cross_writes, c.cross_atomics, c.self_ops];
                let sizes = super::bound::sizes(v, record);
                r.bound = super::bound::of(rates, sizes, r.ops_per_sec, ops, counted);
            }
            r
        })
        .collect();
    // Each DHT row against Redis's in the same workload and phase.
    let redis: HashMap<(Workload, PhaseName), f64> = out
        .iter()
        .filter(|r| r.system == System::Redis)
        .map(|r| ((r.workload, r.phase), r.ops_per_sec))
        .collect();
    for r in out.iter_mut().filter(|r| r.system != System::Redis) {
        r.vs_redis = redis
            .get(&(r.workload, r.phase))
            .filter(|x| **x > 0.0)
            .map(|x| r.ops_per_sec / x);
    }
    out
}

fn merge(g: &[&Sample], record: Record, ghz: Option<f64>) -> Run {
    let first = g[0];
    let rate = |s: &Sample, n: u64| {
        if s.secs > 0.0 {
            n as f64 / s.secs
        } else {
            0.0
        }
    };
    let mut rates: Vec<f64> = g.iter().map(|s| rate(s, s.ops)).collect();
    let reps = rates.clone();
    let med = median(&mut rates);
    // The repetition nearest the median gives the component rates.
    let mid = g
        .iter()
        .min_by(|a, b| {
            (rate(a, a.ops) - med)
                .abs()
                .total_cmp(&(rate(b, b.ops) - med).abs())
        })
        .expect("a group has a sample");
    let (mut timed, mut single) = (Hist::new(), Hist::new());
    let mut c = Counters::default();
    let (mut ops, mut cpu, mut app, mut wire) = (0u64, 0u64, 0u64, 0u64);
    for s in g {
        timed.merge(&s.latency);
        single.merge(&s.single);
        ops += s.ops;
        cpu += s.cpu_ns;
        app += s.app_bytes;
        wire += s.wire_bytes;
        let (k, st) = (&s.checks, &s.stats);
        c.hits += k.hits;
        c.misses += k.misses;
        c.corrupt += k.corrupt;
        c.wrong += k.wrong;
        c.lost += k.lost;
        c.false_hits += k.false_hits;
        c.inserts += st.inserts;
        c.updates += st.updates;
        c.evictions += st.evictions;
        c.checksum_mismatches += st.checksum_retries;
        c.invalidations += st.invalidations;
        c.lock_retries += st.lock_retries;
        c.remote_ops += st.remote_ops;
        c.batches += st.batches;
        c.self_ops += st.self_ops;
        c.cross_reads += st.cross_reads;
        c.cross_writes += st.cross_writes;
        c.cross_atomics += st.cross_atomics;
        c.own_keys += st.own_keys;
        c.requests += st.requests;
        c.request_keys += st.request_keys;
        c.message_bytes += st.message_bytes;
        c.served_keys += st.served_keys;
        c.service_cpu_ns += st.service_cpu_ns;
        c.refused += st.refused;
        c.strangers += st.strangers;
    }
    let per = |x: u64, n: u64| if n == 0 { 0.0 } else { x as f64 / n as f64 };
    let reads: u64 = g.iter().map(|s| s.reads).sum();
    c.mismatch_rate = per(c.checksum_mismatches, reads);
    c.remote_ops_per_op = per(c.remote_ops, ops);
    let kind = if first.batch > 1 {
        format!("per batch of {} operations", first.batch)
    } else {
        "per operation (closed loop)".into()
    };
    let cpu_per = per(cpu, ops);
    let own_share = (first.system == System::Fabkit).then(|| per(c.own_keys, ops));
    let service_ns_per_key = (c.served_keys > 0).then(|| per(c.service_cpu_ns, c.served_keys));
    Run {
        system: first.system,
        variant: first.variant,
        transport: first.transport.clone(),
        path: first.path,
        workload: first.workload,
        distribution: first.distribution,
        record,
        ranks: first.ranks,
        batch: first.batch,
        depth: first.depth,
        phase: first.phase,
        reps: g.len() as u32,
        ops_per_sec: med,
        ops_per_sec_min: reps.iter().copied().fold(f64::INFINITY, f64::min),
        ops_per_sec_max: reps.iter().copied().fold(0.0, f64::max),
        ops_per_sec_reps: reps,
        writes_per_sec: rate(mid, mid.writes),
        reads_per_sec: rate(mid, mid.reads),
        latency_us: latency(&timed, kind),
        latency_single_us: (!single.is_empty())
            .then(|| latency(&single, "per operation (closed loop)".into())),
        cpu_ns_per_op: cpu_per,
        nominal_cycles_per_op: ghz.map(|g| cpu_per * g),
        nominal_ghz: ghz,
        bytes_per_byte: per(wire, app),
        vs_redis: None,
        counters: c,
        hot_key: g.iter().find_map(|s| s.hot),
        bound: None,
        own_share,
        service_ns_per_key,
    }
}

/// Whether every run kept its promises: no wrong value, no false hit, the
/// hot key within its variant's.
pub fn sound(runs: &[Run]) -> bool {
    runs.iter().all(|r| {
        let hot = match (&r.variant, &r.hot_key) {
            (Some(v), Some(h)) => {
                h.foreign == 0 && (*v == Variant::Lockfree || h.corrupt + h.missing == 0)
            }
            _ => true,
        };
        r.counters.wrong == 0 && r.counters.false_hits == 0 && hot
    })
}

/// A tail percentile for a table: "-" where too few samples say it.
pub fn us(p: Option<f64>) -> String {
    p.map_or("-".into(), |x| format!("{x:.2}"))
}

/// The table printed on screen.
pub fn table(rep: &Report) -> String {
    let mut t = String::new();
    let Some(first) = rep.runs.first() else {
        return "fabkit dht: no runs\n".into();
    };
    let _ = writeln!(
        t,
        "fabkit dht: {} | {} | record {},{} | batch {} | {} repetition(s), median (min-max)",
        rep.meta.provider,
        rep.meta.provenance.launch.as_deref().unwrap_or("-"),
        first.record.key,
        first.record.value,
        first.batch,
        first.reps
    );
    let _ = writeln!(
        t,
        "{:<7} {:<8} {:<6} {:<7} {:<6} {:>9} {:>15} {:>8} {:>8} {:>8} {:>8} {:>6} {:>7} {:>6} {:>7} {:>8} {:>6} {:>7}  {:<14} {:>4} {:>6}",
        "system", "variant", "wkld", "dist", "phase", "Mops/s", "(min-max)", "p50 us", "p99 us",
        "p99.9us", "cpu ns", "B/B", "hits", "lost", "corrupt", "mismatch", "locks", "xredis",
        "path", "own%", "srv ns"
    );
    for r in &rep.runs {
        let c = &r.counters;
        let _ = writeln!(
            t,
            "{:<7} {:<8} {:<6} {:<7} {:<6} {:>9.3} {:>15} {:>8.2} {:>8} {:>8} {:>8.0} {:>6.2} {:>7} {:>6} {:>7} {:>8} {:>6} {:>7}  {:<14} {:>4} {:>6}",
            r.system,
            r.variant.map_or_else(|| "-".into(), variant_name),
            name(r.workload),
            name(r.distribution),
            r.phase,
            r.ops_per_sec / 1e6,
            format!("{:.3}-{:.3}", r.ops_per_sec_min / 1e6, r.ops_per_sec_max / 1e6),
            r.latency_us.p50,
            us(r.latency_us.p99),
            us(r.latency_us.p99_9),
            r.cpu_ns_per_op,
            r.bytes_per_byte,
            c.hits,
            c.lost,
            c.corrupt,
            c.checksum_mismatches,
            c.lock_retries,
            r.vs_redis.map_or("-".into(), |x| format!("{x:.2}x")),
            r.path.map_or("-", |p| p.name()),
            r.own_share.map_or("-".into(), |x| format!("{:.0}", x * 100.0)),
            r.service_ns_per_key.map_or("-".into(), |x| format!("{x:.0}")),
        );
    }
    let hot: Vec<String> = rep
        .runs
        .iter()
        .filter_map(|r| Some((r.variant?, r.hot_key?)))
        .map(|(v, h)| {
            let good = h.reads - h.foreign - h.corrupt - h.missing;
            let mut s = format!("{} {good}/{}", variant_name(v), h.reads);
            for (n, tag) in [
                (h.foreign, "foreign"),
                (h.corrupt, "corrupt"),
                (h.missing, "missing"),
            ] {
                if n > 0 {
                    let _ = write!(s, " {n} {tag}");
                }
            }
            s
        })
        .collect();
    if !hot.is_empty() {
        let _ = writeln!(
            t,
            "hot key (every rank updates one key at once, then reads it; whole values of the \
             round of all reads): {}",
            hot.join(", ")
        );
    }
    for r in &rep.runs {
        let Some(b) = &r.bound else { continue };
        let _ = writeln!(
            t,
            "  bound {} {} {}: {:.3} Mops/s from the fabric's rates ({:.2} reads, {:.2} writes, \
             {:.2} atomics across per op; {:.2} aimed at itself, not counted): {:.2} of it{}",
            r.variant.map_or_else(|| "-".into(), variant_name),
            name(r.workload),
            r.phase,
            b.ops_per_sec / 1e6,
            b.cross_reads_per_op,
            b.cross_writes_per_op,
            b.cross_atomics_per_op,
            b.self_ops_per_op,
            b.fraction,
            if b.fraction > 1.0 {
                " (above 1: the bound is wrong, or its anchor under-read)"
            } else {
                ""
            }
        );
    }
    let single: Vec<String> = rep
        .runs
        .iter()
        .filter_map(|r| {
            let l = r.latency_single_us.as_ref()?;
            Some(format!(
                "{} {} {} {}: p50 {:.2} p99 {} p99.9 {} ({} samples)",
                r.system,
                r.variant.map_or_else(|| "-".into(), variant_name),
                name(r.workload),
                r.phase,
                l.p50,
                us(l.p99),
                us(l.p99_9),
                l.samples
            ))
        })
        .collect();
    if !single.is_empty() {
        let _ = writeln!(t, "single-operation latency (closed loop, us):");
        for s in single {
            let _ = writeln!(t, "  {s}");
        }
    }
    let _ = writeln!(
        t,
        "latency is {}; lost: written keys a read missed (evicted, or a lock-free insert lost \
         to a racing writer); mismatch: checksum re-reads; locks: failed lock attempts; cpu ns: \
         busy CPU time of the job per operation; B/B: bytes moved per key and value byte; \
         a tail percentile is - below 10, 100, 1000 samples (p90, p99, p99.9), p99.99 below 10^6",
        first.latency_us.kind
    );
    for n in &rep.meta.notes {
        let _ = writeln!(t, "note: {n}");
    }
    t
}

/// One CSV row: the run flattened.
#[derive(Debug, Serialize)]
struct CsvRow<'a> {
    system: &'a str,
    variant: String,
    transport: &'a str,
    workload: String,
    distribution: String,
    key_bytes: usize,
    value_bytes: usize,
    ranks: usize,
    batch: usize,
    phase: &'a str,
    reps: u32,
    ops_per_sec: f64,
    ops_per_sec_min: f64,
    ops_per_sec_max: f64,
    writes_per_sec: f64,
    reads_per_sec: f64,
    latency_kind: &'a str,
    p50_us: f64,
    p90_us: Option<f64>,
    p99_us: Option<f64>,
    p99_9_us: Option<f64>,
    p99_99_us: Option<f64>,
    single_p50_us: Option<f64>,
    single_p99_us: Option<f64>,
    cpu_ns_per_op: f64,
    nominal_cycles_per_op: Option<f64>,
    bytes_per_byte: f64,
    vs_redis: Option<f64>,
    hits: u64,
    misses: u64,
    lost: u64,
    false_hits: u64,
    corrupt: u64,
    checksum_mismatches: u64,
    lock_retries: u64,
    evictions: u64,
    remote_ops_per_op: f64,
    commit: &'a str,
    host: &'a str,
    path: &'a str,
    own_share: Option<f64>,
    service_ns_per_key: Option<f64>,
}

/// The report as CSV, a header and a row per run.
pub fn csv(rep: &Report) -> Result<String> {
    let mut w = csv::Writer::from_writer(Vec::new());
    for r in &rep.runs {
        let l = &r.latency_us;
        w.serialize(CsvRow {
            system: r.system.as_str(),
            variant: r.variant.map(variant_name).unwrap_or_default(),
            transport: &r.transport,
            workload: name(r.workload),
            distribution: name(r.distribution),
            key_bytes: r.record.key,
            value_bytes: r.record.value,
            ranks: r.ranks,
            batch: r.batch,
            phase: r.phase.as_str(),
            reps: r.reps,
            ops_per_sec: r.ops_per_sec,
            ops_per_sec_min: r.ops_per_sec_min,
            ops_per_sec_max: r.ops_per_sec_max,
            writes_per_sec: r.writes_per_sec,
            reads_per_sec: r.reads_per_sec,
            latency_kind: &l.kind,
            p50_us: l.p50,
            p90_us: l.p90,
            p99_us: l.p99,
            p99_9_us: l.p99_9,
            p99_99_us: l.p99_99,
            single_p50_us: r.latency_single_us.as_ref().map(|s| s.p50),
            single_p99_us: r.latency_single_us.as_ref().and_then(|s| s.p99),
            cpu_ns_per_op: r.cpu_ns_per_op,
            nominal_cycles_per_op: r.nominal_cycles_per_op,
            bytes_per_byte: r.bytes_per_byte,
            vs_redis: r.vs_redis,
            hits: r.counters.hits,
            misses: r.counters.misses,
            lost: r.counters.lost,
            false_hits: r.counters.false_hits,
            corrupt: r.counters.corrupt,
            checksum_mismatches: r.counters.checksum_mismatches,
            lock_retries: r.counters.lock_retries,
            evictions: r.counters.evictions,
            remote_ops_per_op: r.counters.remote_ops_per_op,
            commit: &rep.meta.provenance.commit,
            host: &rep.meta.provenance.host,
            path: r.path.map_or("", |p| p.name()),
            own_share: r.own_share,
            service_ns_per_key: r.service_ns_per_key,
        })?;
    }
    Ok(String::from_utf8(
        w.into_inner().map_err(|e| anyhow::anyhow!("{e}"))?,
    )?)
}

/// Lowest, median and highest of a point's repetitions.
type Whisker = (f64, f64, f64);

/// A chart of throughput against the rank count from several reports (one
/// per rank count): a line per system, variant, transport, workload,
/// distribution, phase, batch and record, with the repetitions' spread as
/// whiskers. Rank counts past the measuring machine's cores ran
/// oversubscribed, and the x labels say so. Two runs of one line at one
/// rank count are refused: one would hide the other.
pub fn ranks_chart(reports: &[Report], title: &str) -> Result<String> {
    let mut ranks: Vec<usize> = reports
        .iter()
        .flat_map(|r| r.runs.iter().map(|x| x.ranks))
        .collect();
    ranks.sort_unstable();
    ranks.dedup();
    let mut over = std::collections::BTreeSet::new();
    let mut lines: BTreeMap<[String; 7], Vec<Option<Whisker>>> = BTreeMap::new();
    for rep in reports {
        let cores = rep.meta.provenance.cores;
        for r in &rep.runs {
            if cores.is_some_and(|c| r.ranks > c) {
                over.insert(r.ranks);
            }
            let label = [
                r.variant.map_or_else(|| r.system.to_string(), variant_name),
                r.transport.clone(),
                name(r.workload).to_string(),
                name(r.distribution).to_string(),
                r.phase.to_string(),
                format!("batch {}", r.batch),
                format!("{},{} B", r.record.key, r.record.value),
            ];
            let pts = lines
                .entry(label.clone())
                .or_insert_with(|| vec![None; ranks.len()]);
            let i = ranks.iter().position(|&n| n == r.ranks).expect("collected");
            if pts[i].is_some() {
                return Err(crate::exit::usage(format!(
                    "two runs of `{}` at {} ranks: give one report per rank count",
                    label.join(" "),
                    r.ranks
                )));
            }
            pts[i] = Some((
                r.ops_per_sec_min / 1e6,
                r.ops_per_sec / 1e6,
                r.ops_per_sec_max / 1e6,
            ));
        }
    }
    let cats: Vec<String> = ranks
        .iter()
        .map(|n| {
            if over.contains(n) {
                format!("{n} (oversubscribed)")
            } else {
                n.to_string()
            }
        })
        .collect();
    // What every line shares (the workload, the batch, ...) is said once.
    let parts: Vec<Vec<String>> = lines.keys().map(|k| k.to_vec()).collect();
    let (common, labels) = fabkit_chart::split_common_parts(&parts, " ", &|_| true);
    let series: Vec<fabkit_chart::Line> = labels
        .into_iter()
        .zip(lines.into_values())
        .map(|(label, points)| fabkit_chart::Line { label, points })
        .collect();
    Ok(fabkit_chart::lines_with(
        title,
        "ranks",
        "M operations/s",
        &cats,
        &series,
        &fabkit_chart::Extras {
            subtitle: (!common.is_empty()).then(|| format!("every line: {}", common.join(", "))),
            ..fabkit_chart::Extras::default()
        },
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use fabkit_dht::Stats;

    fn sample(system: System, rep: u32, secs: f64, lat: &[(u64, u64)]) -> Sample {
        Sample {
            system,
            variant: (system == System::Fabkit).then_some(Variant::Lockfree),
            transport: "t".into(),
            phase: PhaseName::Read,
            rep,
            ranks: 2,
            batch: 64,
            depth: 1,
            secs,
            ops: 1000,
            reads: 1000,
            cpu_ns: 2_000_000,
            app_bytes: 184_000,
            wire_bytes: 368_000,
            stats: Stats {
                checksum_retries: 5,
                remote_ops: 3000,
                ..Stats::default()
            },
            latency: lat.iter().fold(Hist::new(), |mut h, &(v, n)| {
                h.record_n(v, n);
                h
            }),
            ..Sample::default()
        }
    }

    #[test]
    fn repetitions_merge_into_median_spread_and_ratios_against_redis() {
        let lat = [(1000, 90), (5000, 9), (100_000, 1)];
        let s = vec![
            sample(System::Fabkit, 0, 0.001, &lat), // 1 M/s
            sample(System::Fabkit, 1, 0.004, &lat), // 0.25 M/s
            sample(System::Fabkit, 2, 0.002, &lat), // 0.5 M/s
            sample(System::Redis, 0, 0.01, &lat),   // 0.1 M/s
        ];
        let rec = Record {
            key: 80,
            value: 104,
        };
        let r = runs(&s, rec, None);
        assert_eq!(r.len(), 2);
        let f = &r[0];
        assert_eq!((f.reps, f.ops_per_sec), (3, 500_000.0));
        assert_eq!(
            (f.ops_per_sec_min, f.ops_per_sec_max),
            (250_000.0, 1_000_000.0)
        );
        assert_eq!(f.reads_per_sec, 500_000.0, "the median repetition's reads");
        assert_eq!(f.vs_redis, Some(5.0));
        assert_eq!(r[1].vs_redis, None);
        // 300 samples: 90 % at 1 us, p99 at 5 us, p99.9 at the 100 us one.
        let l = &f.latency_us;
        assert_eq!(l.samples, 300);
        assert!(
            (l.p50 - 1.0).abs() < 0.01 && (l.p99.unwrap() - 5.0).abs() < 0.01,
            "{l:?}"
        );
        assert_eq!(l.p99_9, None, "300 samples say nothing of p99.9");
        assert_eq!(l.p99_99, None, "fewer than 10^6 samples");
        assert_eq!(f.cpu_ns_per_op, 2000.0);
        assert_eq!(f.bytes_per_byte, 2.0);
        assert_eq!(f.counters.checksum_mismatches, 15);
        assert_eq!(f.counters.remote_ops_per_op, 3.0);
        assert!((f.counters.mismatch_rate - 0.005).abs() < 1e-12);
    }

    #[test]
    fn csv_has_a_header_and_a_row_per_run_and_quotes_what_needs_it() {
        let s = vec![sample(System::Fabkit, 0, 0.001, &[(1000, 1)])];
        let mut r = runs(
            &s,
            Record {
                key: 80,
                value: 104,
            },
            None,
        );
        r[0].transport = "tcp;ofi_rxm, \"x\"".into();
        let rep = Report {
            meta: Meta {
                provenance: Provenance {
                    command: "fabkit dht".into(),
                    commit: "abc".into(),
                    host: "h".into(),
                    machine: Some("m".into()),
                    cores: Some(2),
                    launch: Some("l".into()),
                    launcher: None,
                    fabkit: Some("0.1.0".into()),
                },
                provider: "p".into(),
                notes: vec![],
            },
            runs: r,
            soak: None,
        };
        let text = csv(&rep).unwrap();
        let mut rd = csv::Reader::from_reader(text.as_bytes());
        let head = rd.headers().unwrap().clone();
        let rows: Vec<csv::StringRecord> = rd.records().map(|r| r.unwrap()).collect();
        assert_eq!(rows.len(), 1);
        assert_eq!(rows[0].len(), head.len());
        let col = |n: &str| &rows[0][head.iter().position(|h| h == n).unwrap()];
        assert_eq!(col("transport"), "tcp;ofi_rxm, \"x\"");
        assert_eq!(col("ops_per_sec"), "1000000.0");
        assert!(table(&rep).contains("lockfree"));
        assert!(sound(&rep.runs));
    }

    #[test]
    fn a_rows_enums_are_written_as_the_words_reports_always_had() {
        let word = |v: serde_json::Value| v.as_str().unwrap().to_string();
        for s in [System::Fabkit, System::Redis] {
            assert_eq!(word(serde_json::to_value(s).unwrap()), s.as_str());
        }
        use PhaseName::*;
        for p in [Write, Read, Mixed, Load, Run] {
            assert_eq!(word(serde_json::to_value(p).unwrap()), p.as_str());
        }
        use Variant::*;
        for v in [Coarse, Fine, Lockfree, Chunked] {
            assert_eq!(word(serde_json::to_value(v).unwrap()), variant_name(v));
        }
        for w in [Workload::Paper, Workload::LoadA, Workload::F] {
            assert_eq!(word(serde_json::to_value(w).unwrap()), name(w));
        }
        for d in [Dist::Uniform, Dist::Zipf, Dist::Latest] {
            assert_eq!(word(serde_json::to_value(d).unwrap()), name(d));
        }
    }

    /// Every key `fabkit dht --json` writes, as it is spelled: a field
    /// renamed or dropped fails here (new ones are added to the list).
    const JSON_KEYS: &[&str] = &[
        "meta",
        "meta.command",
        "meta.commit",
        "meta.cores",
        "meta.fabkit",
        "meta.host",
        "meta.launch",
        "meta.launcher",
        "meta.machine",
        "meta.notes",
        "meta.provider",
        "runs",
        "runs[].batch",
        "runs[].bound",
        "runs[].bound.atomic_rate",
        "runs[].bound.cross_atomics_per_op",
        "runs[].bound.cross_reads_per_op",
        "runs[].bound.cross_writes_per_op",
        "runs[].bound.fraction",
        "runs[].bound.ops_per_sec",
        "runs[].bound.read_rate",
        "runs[].bound.self_ops_per_op",
        "runs[].bound.write_rate",
        "runs[].bytes_per_byte",
        "runs[].counters",
        "runs[].counters.batches",
        "runs[].counters.checksum_mismatches",
        "runs[].counters.corrupt",
        "runs[].counters.cross_atomics",
        "runs[].counters.message_bytes",
        "runs[].counters.own_keys",
        "runs[].counters.served_keys",
        "runs[].counters.service_cpu_ns",
        "runs[].counters.refused",
        "runs[].counters.strangers",
        "runs[].counters.request_keys",
        "runs[].counters.requests",
        "runs[].counters.cross_reads",
        "runs[].counters.cross_writes",
        "runs[].counters.evictions",
        "runs[].counters.false_hits",
        "runs[].counters.hits",
        "runs[].counters.inserts",
        "runs[].counters.invalidations",
        "runs[].counters.lock_retries",
        "runs[].counters.lost",
        "runs[].counters.mismatch_rate",
        "runs[].counters.misses",
        "runs[].counters.remote_ops",
        "runs[].counters.remote_ops_per_op",
        "runs[].counters.self_ops",
        "runs[].counters.updates",
        "runs[].counters.wrong",
        "runs[].cpu_ns_per_op",
        "runs[].depth",
        "runs[].distribution",
        "runs[].hot_key",
        "runs[].hot_key.corrupt",
        "runs[].hot_key.foreign",
        "runs[].hot_key.missing",
        "runs[].hot_key.reads",
        "runs[].latency_single_us",
        "runs[].latency_single_us.kind",
        "runs[].latency_single_us.p50",
        "runs[].latency_single_us.p90",
        "runs[].latency_single_us.p99",
        "runs[].latency_single_us.p99_9",
        "runs[].latency_single_us.p99_99",
        "runs[].latency_single_us.samples",
        "runs[].latency_us",
        "runs[].latency_us.kind",
        "runs[].latency_us.p50",
        "runs[].latency_us.p90",
        "runs[].latency_us.p99",
        "runs[].latency_us.p99_9",
        "runs[].latency_us.p99_99",
        "runs[].latency_us.samples",
        "runs[].nominal_cycles_per_op",
        "runs[].nominal_ghz",
        "runs[].ops_per_sec",
        "runs[].ops_per_sec_max",
        "runs[].ops_per_sec_min",
        "runs[].ops_per_sec_reps",
        "runs[].own_share",
        "runs[].service_ns_per_key",
        "runs[].path",
        "runs[].phase",
        "runs[].ranks",
        "runs[].reads_per_sec",
        "runs[].record",
        "runs[].record.key",
        "runs[].record.value",
        "runs[].reps",
        "runs[].system",
        "runs[].transport",
        "runs[].variant",
        "runs[].vs_redis",
        "runs[].workload",
        "runs[].writes_per_sec",
    ];

    /// `fabkit dht --csv`'s header, column by column.
    const CSV_HEADER: &str = "system,variant,transport,workload,distribution,key_bytes,\
        value_bytes,ranks,batch,phase,reps,ops_per_sec,ops_per_sec_min,ops_per_sec_max,\
        writes_per_sec,reads_per_sec,latency_kind,p50_us,p90_us,p99_us,p99_9_us,p99_99_us,\
        single_p50_us,single_p99_us,cpu_ns_per_op,nominal_cycles_per_op,bytes_per_byte,\
        vs_redis,hits,misses,lost,false_hits,corrupt,checksum_mismatches,lock_retries,\
        evictions,remote_ops_per_op,commit,host,path,own_share,service_ns_per_key";

    #[test]
    fn golden_the_json_keys_and_the_csv_header_are_todays() {
        // Every optional part filled, so that its keys show.
        let mut s = sample(System::Fabkit, 0, 0.001, &[(1000, 1)]);
        s.path = Some(super::super::transports::Taken::Rma);
        s.single.record(2000);
        s.hot = Some(HotKey::default());
        let mut r = runs(&[s], Record { key: 8, value: 8 }, None);
        r[0].bound = Some(super::super::bound::Bound {
            ops_per_sec: 1.0,
            fraction: 1.0,
            cross_reads_per_op: 1.0,
            cross_writes_per_op: 1.0,
            cross_atomics_per_op: 1.0,
            self_ops_per_op: 1.0,
            read_rate: Some(1.0),
            write_rate: Some(1.0),
            atomic_rate: Some(1.0),
        });
        r[0].service_ns_per_key = Some(1.0);
        let rep = Report {
            meta: Meta {
                provenance: Provenance {
                    launcher: Some(fabkit_core::provenance::Launcher::Threads),
                    ..Provenance::here("c", "v", Some("l".into()))
                },
                provider: "p".into(),
                notes: vec!["n".into()],
            },
            runs: r,
            soak: None,
        };
        let json = serde_json::to_value(&rep).unwrap();
        fabkit_core::schema::same_keys(&json, JSON_KEYS).unwrap_or_else(|e| panic!("{e}"));
        let text = csv(&rep).unwrap();
        assert_eq!(text.lines().next(), Some(CSV_HEADER));
    }

    #[test]
    fn the_ranks_chart_marks_oversubscription_of_the_measuring_machine() {
        let mk = |ranks: usize| {
            let mut s = sample(System::Fabkit, 0, 0.001, &[(1000, 1)]);
            s.ranks = ranks;
            Report {
                meta: Meta {
                    provenance: Provenance {
                        machine: Some("some CPU, 2 cores, 8 GiB, Linux 6".into()),
                        cores: Some(2),
                        ..Provenance::default()
                    },
                    provider: String::new(),
                    notes: vec![],
                },
                runs: runs(&[s], Record { key: 8, value: 8 }, None),
                soak: None,
            }
        };
        let svg = ranks_chart(&[mk(1), mk(2), mk(4)], "t").unwrap();
        assert!(svg.contains("4 (oversubscribed)") && !svg.contains("2 (oversubscribed)"));
        // Two runs of one line at one rank count: one would hide the other.
        let e = ranks_chart(&[mk(2), mk(2)], "t").unwrap_err().to_string();
        assert!(e.contains("two runs of") && e.contains("at 2 ranks"), "{e}");
    }
}
