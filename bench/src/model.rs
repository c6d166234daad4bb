//! `fabkit model`: what the DHT would do on a fabric, predicted from what
//! the fabric does (`fabkit perf` runs, or a NIC's packet rate) and what
//! the DHT itself costs the host (a run on one node, where no fabric is
//! involved), never from a DHT run on the fabric predicted: that run is
//! only compared with (`--measured`).
//!
//! For each phase of the one-node run (variant, workload, phase), its
//! counters give the remote operations one DHT operation sends across (`r`
//! reads, `w` writes, `a` atomics) and aims at its own rank (`s`), and its
//! busy CPU per operation the host's own work `h` (planning, checksums,
//! copies). Two limits, each in operations per second of the job:
//!
//! - the fabric: `1 / (kR r/R + kW w/W + kA a/A)`, with `R`, `W`, `A` the
//!   fabric's rates for the kind at the size the variant moves (both
//!   directions at once; the bound of `fabkit dht --bound`). Each kind's
//!   `k` counts a rank's operations on itself, taken to mix the kinds as
//!   its operations across do: `1 + s/(r+w+a)` when they go through the
//!   fabric too (the plain path: loop-back), and on the same-node path
//!   (`--itself memory`) 1 for reads and writes, which are memory accesses
//!   there, while atomics keep `1 + s/(r+w+a)` (a rank elsewhere applies
//!   its atomics through the fabric, and CPU atomics on the same words
//!   would not be atomic with them);
//! - the hosts' CPU: `cores / (h + kR r cR + kW w cW + kA a cA)`, with `cR`,
//!   `cW`, `cA` the busy CPU of the job per transfer that perf measured at
//!   the same points (for a NIC's packet rate, `--xfer-ns`: what posting
//!   and completing one costs the host).
//!
//! The prediction is the lower of the two, and the table says which binds.
//! The sum of each kind's time assumes they share one resource; a NIC
//! that runs them side by side does better.
//!
//! The message path (owner-executed batches) is predicted beside it, from
//! the perf files' `-o send` points: a rank's batch of `B` operations sends
//! one request to each other owner it touches and gets one reply, so with
//! `R` ranks and a share `o` of the keys a rank's own, each other owner is
//! touched with probability `1 - (1 - q)^B`, `q = (1 - o)/(R - 1)`, and a
//! DHT operation costs `2 (R - 1) (1 - (1 - q)^B) / B` messages (more where
//! a batch's keys for one owner exceed the largest message), each priced
//! at the send point nearest its size (the wire format's header and keys,
//! values and outcomes). The owner runs the keys on its own region as the
//! one-node run did, so the host's work per operation is the same `h`:
//!
//! - the fabric: `1 / (sum over messages of 1/S(size))`;
//! - the hosts' CPU: `cores / (h + sum over messages of cS(size))`.
//!
//! Which of the two paths predicts more is the path `auto` should take
//! across nodes; the table puts it beside what the rule takes from the
//! provider's facts (who executes its operations, in the perf files), so
//! a disagreement shows. Both limits are throughput limits: a job that
//! keeps too few batches in flight to cover a round trip is slower than
//! either (latency-bound), which a measured row shows as a ratio above 1.

use std::path::{Path, PathBuf};

use anyhow::Result;
use clap::{Args, ValueEnum};
use fabkit_dht::Variant;
use serde::Serialize;

use crate::dhtbench::bound::{self, Rate, Rates};
use crate::dhtbench::report::{self as dht, name, variant_name, Run};
use crate::dhtbench::transports;
use crate::dhtbench::workload::{PhaseName, Workload};
use crate::dhtbench::System;
use crate::exit;
use crate::flags::{self, from_file, Record};
use fabkit_dht::message::wire::{Kind, Sizes};
use fabkit_dht::path::{self, Carrier, Way};

/// `fabkit model`'s arguments.
#[derive(Args, Debug, Clone)]
pub struct ModelArgs {
    /// A `fabkit dht --json` file measured on one node without a fabric
    /// (`fabkit dht -p shm --shm -n 2`): each fabkit row's counters give
    /// its operations per DHT operation, and its busy CPU per operation
    /// the host's own cost.
    #[arg(long, value_name = "FILE")]
    pub ops: PathBuf,
    /// A `fabkit perf -b --json` file of the fabric modelled (repeat:
    /// delivery-complete writes, reads at the bucket's and the chunk's
    /// sizes, compare-and-swap): its rates and its CPU per transfer.
    #[arg(long, value_name = "FILE")]
    pub perf: Vec<PathBuf>,
    /// Instead of perf files, a NIC: the operations per second a pair of
    /// them carries, both directions together, in packets per second
    /// (the RoCE NIC of RED-SEA's D2.3 report: 15e6).
    #[arg(long, value_name = "PPS", value_parser = flags::positive_rate)]
    pub pps: Option<f64>,
    /// With --pps: packets per RMA operation (request and response, or
    /// write and acknowledgement).
    #[arg(long, value_name = "N", default_value = "2", requires = "pps", value_parser = flags::positive_rate)]
    pub packets: f64,
    /// With --pps: the host's busy CPU per transfer, ns (posting it and
    /// reading its completion; the NIC does the rest).
    #[arg(long, value_name = "NS", default_value = "0", requires = "pps", value_parser = flags::cpu_ns)]
    pub xfer_ns: f64,
    /// Where a rank's operations on its own region go: through the
    /// fabric (the plain path) or, reads and writes, to memory (`fabkit
    /// dht --shm`; its atomics stay on the fabric).
    #[arg(long, value_enum, default_value = "fabric")]
    pub itself: Itself,
    /// Cores of all the job's hosts together, which perf's CPU per
    /// transfer is spent on (default: this machine's, which the testbed's
    /// namespaces share; on two real hosts, both hosts' cores).
    #[arg(long, value_parser = flags::positive_rate)]
    pub cores: Option<f64>,
    /// A `fabkit dht --json` file measured on the fabric modelled: each
    /// prediction is put beside the row of the same variant, workload and
    /// phase. Compared with only, never used to predict.
    #[arg(long, value_name = "FILE")]
    pub measured: Option<PathBuf>,
    /// Also write the predictions as JSON to FILE (`-` for stdout).
    #[arg(long, value_name = "FILE")]
    pub json: Option<PathBuf>,
}

/// Where a rank's operations on its own region go.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Itself {
    /// Through the fabric, like the others (loop-back).
    Fabric,
    /// Memory accesses (the same-node path).
    Memory,
}

/// One phase of the one-node run, as the model reads it.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Phase {
    pub variant: Variant,
    pub workload: Workload,
    pub phase: PhaseName,
    /// Per DHT operation: reads, writes and atomics across, and
    /// operations on the rank itself.
    pub cross: [f64; 3],
    pub itself: f64,
    /// The host's own busy CPU per DHT operation, ns.
    pub host_ns: f64,
    /// The sizes the variant reads and writes across.
    pub sizes: (usize, usize),
    /// The record and the batch of the run, which a measured row must
    /// share to be compared.
    #[serde(skip)]
    pub record: Record,
    #[serde(skip)]
    pub batch: usize,
    /// Ranks of the one-node run: the job the message path is priced for.
    pub ranks: usize,
    /// Batches in flight the run's operations used (lanes): the message
    /// path sends one request per owner per lane.
    pub lanes: usize,
    /// The share of operations whose key the rank owns (the row's
    /// `own_share`; 1/ranks where an older file has none).
    pub own: f64,
    /// The share of operations that are reads (the rest are writes).
    pub read_share: f64,
    /// Reads added because the one-node run planned for memory: chunked
    /// fetches the next chunk with each one where a round costs a round
    /// trip ([`fabkit_dht::transport::Caps::near`] false), one read more per
    /// operation, aimed like its others.
    pub ahead: f64,
}

/// The fabric as the model prices it.
#[derive(Clone, Debug, PartialEq)]
pub enum Fabric {
    /// Rates and CPU per transfer from perf.
    Perf(Rates),
    /// One rate for every kind, and one CPU per transfer.
    Nic { per_sec: f64, cpu_ns: f64 },
}

/// A prediction for one phase.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Prediction {
    #[serde(flatten)]
    pub phase: Phase,
    /// Operations per second the fabric allows the job.
    pub fabric_limit: f64,
    /// Operations per second the hosts' cores allow the job.
    pub cpu_limit: f64,
    /// The lower of the two.
    pub ops_per_sec: f64,
    /// "fabric" or "cpu".
    pub binds: &'static str,
    /// The measured run's row, if one was given and matched.
    pub measured: Option<f64>,
    /// Prediction over measurement.
    pub ratio: Option<f64>,
    /// The message path's prediction: None when the perf files give no
    /// send point (or its CPU).
    pub message: Option<MessagePrediction>,
    /// The path with the higher prediction across nodes (`rma` or
    /// `message`), when both were predicted.
    pub better: Option<Way>,
    /// What the `auto` rule takes across nodes on the perf files'
    /// provider, and why; None when the files do not say who executes
    /// the provider's operations.
    pub auto: Option<AutoRule>,
    /// Whether the rule takes the path predicted better.
    pub agree: Option<bool>,
}

/// The message path's prediction for one phase.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct MessagePrediction {
    /// Requests and replies per DHT operation.
    pub messages_per_op: f64,
    /// Mean bytes of a request and of a reply.
    pub request_bytes: f64,
    /// See `request_bytes`.
    pub reply_bytes: f64,
    /// Operations per second the fabric's message rate allows the job.
    pub fabric_limit: f64,
    /// Operations per second the hosts' cores allow the job.
    pub cpu_limit: f64,
    /// Operations per second the round trips allow the job, each rank
    /// waiting for its batch's replies before the next (from send
    /// ping-pongs; none without them).
    pub latency_limit: Option<f64>,
    /// The lowest of them.
    pub ops_per_sec: f64,
    /// "fabric", "cpu" or "latency".
    pub binds: &'static str,
    /// The measured message-path row, if one was given and matched.
    pub measured: Option<f64>,
    /// Prediction over measurement.
    pub ratio: Option<f64>,
}

/// The path the `auto` rule takes to other nodes.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct AutoRule {
    /// `rma` or `message`.
    pub takes: Way,
    /// The fact the rule read.
    pub why: String,
}

/// A kind's rate and CPU per transfer at `bytes`: None if the fabric has
/// no rate for it, or (perf) no CPU was measured at that point.
fn price(f: &Fabric, kind: usize, bytes: usize) -> Option<(f64, f64)> {
    match f {
        Fabric::Nic { per_sec, cpu_ns } => Some((*per_sec, *cpu_ns)),
        Fabric::Perf(r) => {
            let p: &Rate = match kind {
                0 => bound::nearest_point(&r.reads, bytes)?,
                1 => bound::nearest_point(&r.writes, bytes)?,
                _ => r.atomic.as_ref()?,
            };
            Some((p.per_sec, p.cpu_ns?))
        }
    }
}

/// Predicts `ph` on `fabric` with `cores`: None when the phase sends a
/// kind the fabric has no price for.
pub fn predict(ph: &Phase, fabric: &Fabric, itself: Itself, cores: f64) -> Option<Prediction> {
    let across: f64 = ph.cross.iter().sum();
    // A rank's own operations, taken to mix the kinds as its operations
    // across do, go through the fabric too, each kind scaled by `k`; on
    // the same-node path only reads and writes become memory accesses,
    // and atomics stay on the fabric (CPU and NIC atomics on one word are
    // not atomic together, so with a rank elsewhere every atomic goes
    // through it).
    let k_all = if across > 0.0 {
        1.0 + ph.itself / across
    } else {
        1.0
    };
    let (mut secs, mut cpu) = (0.0, 0.0);
    for (kind, &n) in ph.cross.iter().enumerate() {
        if n <= 0.0 {
            continue;
        }
        let k = match (itself, kind) {
            (Itself::Memory, 0 | 1) => 1.0,
            _ => k_all,
        };
        let bytes = if kind == 1 { ph.sizes.1 } else { ph.sizes.0 };
        let (rate, cpu_ns) = price(fabric, kind, bytes)?;
        secs += k * n / rate;
        cpu += k * n * cpu_ns;
    }
    let fabric_limit = if secs > 0.0 {
        1.0 / secs
    } else {
        f64::INFINITY
    };
    let host = ph.host_ns + cpu;
    let cpu_limit = if host > 0.0 {
        cores * 1e9 / host
    } else {
        f64::INFINITY
    };
    let (ops_per_sec, binds) = if fabric_limit <= cpu_limit {
        (fabric_limit, "fabric")
    } else {
        (cpu_limit, "cpu")
    };
    Some(Prediction {
        phase: ph.clone(),
        fabric_limit,
        cpu_limit,
        ops_per_sec,
        binds,
        measured: None,
        ratio: None,
        message: None,
        better: None,
        auto: None,
        agree: None,
    })
}

/// A send's rate and CPU at `bytes`: None if the fabric has no send
/// point, or (perf) no CPU was measured at it.
fn send_price(f: &Fabric, bytes: usize) -> Option<(f64, f64)> {
    match f {
        Fabric::Nic { per_sec, cpu_ns } => Some((*per_sec, *cpu_ns)),
        Fabric::Perf(r) => {
            let p = bound::nearest_point(&r.sends, bytes)?;
            Some((p.per_sec, p.cpu_ns?))
        }
    }
}

/// The wire format's sizes for `ph`'s records (the table id and the cap
/// on keys do not change a message's length).
fn wire_sizes(ph: &Phase) -> Sizes {
    Sizes {
        table: 0,
        ranks: ph.ranks,
        key_len: ph.record.key,
        value_len: ph.record.value,
        max_keys: usize::MAX,
    }
}

/// Bytes of a request of `kind` carrying `keys` keys of `ph`'s records,
/// and of its reply (reads: an outcome and a value per key, every key
/// found; writes: an outcome per key), as the wire format lays them out.
fn message_bytes(ph: &Phase, kind: Kind, keys: usize) -> Option<(usize, usize)> {
    let sizes = wire_sizes(ph);
    let request = sizes.request_len(kind, keys)?;
    let reply = match kind {
        Kind::Read => sizes.reply_len(keys)?,
        Kind::Write | Kind::FindOrPut => keys.checked_add(fabkit_dht::message::wire::HEADER)?,
    };
    Some((request, reply))
}

/// Predicts `ph`'s message path on `fabric` with `cores`: None when the
/// fabric has no price for a message (no send point, or no CPU at it).
pub fn predict_message(ph: &Phase, fabric: &Fabric, cores: f64) -> Option<MessagePrediction> {
    let others = ph.ranks.saturating_sub(1) as f64;
    // Keys per lane: each lane sends its own request to each owner.
    let b = (ph.batch / ph.lanes.max(1)).max(1);
    let q = if others > 0.0 {
        ((1.0 - ph.own) / others).clamp(0.0, 1.0)
    } else {
        0.0
    };
    let touched_per_owner = 1.0 - (1.0 - q).powi(b.min(i32::MAX as usize) as i32);
    // Whether a lane's batch sends anything: some other owner touched.
    let pairs_per_batch = 1.0 - (1.0 - touched_per_owner).powi(others as i32);
    let (mut secs, mut cpu, mut messages) = (0.0, 0.0, 0.0);
    let (mut req_sum, mut rep_sum, mut pairs) = (0.0, 0.0, 0.0);
    for (kind, share) in [
        (Kind::Read, ph.read_share),
        (Kind::Write, 1.0 - ph.read_share),
    ] {
        if share <= 0.0 || touched_per_owner <= 0.0 {
            continue;
        }
        // A touched owner's mean keys, and the messages they take.
        let keys = b as f64 * q / touched_per_owner;
        let per_message = wire_sizes(ph)
            .keys_per_message(kind, fabkit_dht::MAX_MESSAGE, usize::MAX)
            .max(1) as f64;
        let parts = (keys / per_message).ceil().max(1.0);
        let keys_each = (keys / parts).round().max(1.0) as usize;
        let (req, rep) = message_bytes(ph, kind, keys_each)?;
        let (req_rate, req_cpu) = send_price(fabric, req)?;
        let (rep_rate, rep_cpu) = send_price(fabric, rep)?;
        // Request-reply pairs per DHT operation of this kind.
        let per_op = share * others * touched_per_owner * parts / b as f64;
        secs += per_op * (1.0 / req_rate + 1.0 / rep_rate);
        cpu += per_op * (req_cpu + rep_cpu);
        messages += 2.0 * per_op;
        req_sum += per_op * req as f64;
        rep_sum += per_op * rep as f64;
        pairs += per_op;
    }
    let fabric_limit = if secs > 0.0 {
        1.0 / secs
    } else {
        f64::INFINITY
    };
    let host = ph.host_ns + cpu;
    let cpu_limit = if host > 0.0 {
        cores * 1e9 / host
    } else {
        f64::INFINITY
    };
    let latency_limit = latency_limit(ph, fabric, pairs_per_batch, (req_sum, rep_sum, pairs));
    let mut limits = vec![(fabric_limit, "fabric"), (cpu_limit, "cpu")];
    limits.extend(latency_limit.map(|l| (l, "latency")));
    let (ops_per_sec, binds) = limits
        .into_iter()
        .min_by(|a, b| a.0.total_cmp(&b.0))
        .expect("two limits at least");
    let mean = |sum: f64| if pairs > 0.0 { sum / pairs } else { 0.0 };
    Some(MessagePrediction {
        messages_per_op: messages,
        request_bytes: mean(req_sum),
        reply_bytes: mean(rep_sum),
        fabric_limit,
        cpu_limit,
        latency_limit,
        ops_per_sec,
        binds,
        measured: None,
        ratio: None,
    })
}

/// The round trips' limit: each rank keeps one batch per lane in flight,
/// whose requests go out together and whose replies it waits for, so a
/// batch takes a request's and a reply's one-way time at their mean sizes
/// (when any owner is touched) plus the DHT's own work on its keys; the
/// job does `ranks x lanes x batch` operations per such time. None
/// without send ping-pong points.
fn latency_limit(
    ph: &Phase,
    fabric: &Fabric,
    pairs_per_batch: f64,
    (req_sum, rep_sum, pairs): (f64, f64, f64),
) -> Option<f64> {
    let Fabric::Perf(r) = fabric else { return None };
    if r.send_latency.is_empty() {
        return None;
    }
    let b = (ph.batch / ph.lanes.max(1)).max(1) as f64;
    let work = b * ph.host_ns * 1e-9;
    let wire = if pairs > 0.0 && pairs_per_batch > 0.0 {
        let one = |bytes: f64| {
            bound::nearest_point(&r.send_latency, bytes.round() as usize).map(|p| 1.0 / p.per_sec)
        };
        // Some batch touches an owner with probability up to 1: weighted.
        pairs_per_batch.min(1.0) * (one(req_sum / pairs)? + one(rep_sum / pairs)?)
    } else {
        0.0
    };
    let t = wire + work;
    (t > 0.0).then(|| ph.ranks as f64 * ph.lanes.max(1) as f64 * b / t)
}

/// What the `auto` rule takes to other nodes for `variant` on a provider
/// whose operations `executes` says who runs.
pub fn auto_rule(variant: Variant, executes: fabkit_fabric::Executes) -> Option<AutoRule> {
    let carrier = Carrier::Fabric {
        rma: executes.rma,
        atomics: executes.atomics,
    };
    let plan = path::plan(fabkit_dht::Path::Auto, variant, carrier, false).ok()?;
    Some(AutoRule {
        takes: plan.far,
        why: plan.why,
    })
}

/// Fills in `p`'s message path, which path predicts more, and whether
/// the rule takes it.
fn compare(p: &mut Prediction, fabric: &Fabric, cores: f64) {
    p.message = predict_message(&p.phase, fabric, cores);
    p.better = p.message.as_ref().map(|m| {
        if m.ops_per_sec > p.ops_per_sec {
            Way::Message
        } else {
            Way::Rma
        }
    });
    if let Fabric::Perf(r) = fabric {
        p.auto = r.executes.and_then(|e| auto_rule(p.phase.variant, e));
    }
    p.agree = match (&p.auto, p.better) {
        (Some(a), Some(b)) => Some(a.takes == b),
        _ => None,
    };
}

/// Reads a `fabkit dht --json` file's fabkit rows.
fn dht_rows(path: &Path, flag: &str) -> Result<Vec<Run>> {
    let bad = |why: String| exit::usage(format!("{flag} {}: {why}", path.display()));
    let doc: dht::Report = bound::read_report(path, flag, "fabkit dht --json", "runs")?;
    let rows: Vec<Run> = doc
        .runs
        .into_iter()
        .filter(|r| r.system == System::Fabkit)
        .collect();
    if rows.is_empty() {
        return Err(bad("no fabkit rows".into()));
    }
    Ok(rows)
}

/// The phases of the one-node run in `path`: refused if it ran over a
/// fabric or MPI (then its CPU per operation holds the fabric's cost, and
/// the model would be fitted to a DHT run), or lacks the counters.
pub fn phases(path: &Path) -> Result<Vec<Phase>> {
    let rows = dht_rows(path, "--ops")?;
    let bad = |why: String| exit::usage(format!("--ops {}: {why}", path.display()));
    let mut out = Vec::new();
    for r in rows {
        let t = r.transport.as_str();
        // Only a run whose every operation was a memory access: the
        // same-node shortcut with every rank on the node.
        match r.path {
            Some(transports::Taken::Memory) => {}
            Some(_) => {
                return Err(bad(format!(
                    "its DHT ran over `{t}`; give a run on one node without a fabric (fabkit \
                     dht -p shm --shm -n 2 --json FILE), whose CPU is the DHT's own"
                )))
            }
            None => {
                return Err(bad(
                    "its rows do not say whether the DHT crossed a fabric (no \"path\": an older \
                     fabkit's file): rerun it with this fabkit (fabkit dht -p shm --shm -n 2 \
                     --json FILE)"
                        .into(),
                ))
            }
        }
        let c = &r.counters;
        let per_op = c.remote_ops_per_op;
        let row = format!("the {} row's", r.phase);
        from_file::check(
            &format!("{row} remote_ops_per_op"),
            per_op,
            from_file::PER_OP,
        )
        .map_err(&bad)?;
        if per_op == 0.0 || c.remote_ops == 0 {
            continue; // a phase that sent nothing
        }
        for (what, len) in [("key", r.record.key), ("value", r.record.value)] {
            if !(1..=flags::MAX_FIELD).contains(&len) {
                return Err(bad(format!(
                    "{row} {what} length is {len} B, outside 1 to {} B: give a file fabkit \
                     wrote, unedited",
                    crate::flags::MAX_FIELD
                )));
            }
        }
        let ops = c.remote_ops as f64 / per_op;
        let counted = [c.cross_reads, c.cross_writes, c.cross_atomics, c.self_ops];
        // Every remote operation is counted as sent across or aimed at the
        // rank itself; a row whose operations are neither comes from a
        // fabkit that did not count them (the counters read as 0).
        if counted.iter().sum::<u64>() == 0 {
            return Err(bad(
                "a row without cross_reads, cross_writes, cross_atomics and self_ops: rerun it \
                 with this fabkit"
                    .into(),
            ));
        }
        let counted = counted.map(|n| n as f64);
        let host_ns = r.cpu_ns_per_op;
        from_file::check_or_zero(&format!("{row} cpu_ns_per_op"), host_ns, from_file::CPU_NS)
            .map_err(&bad)?;
        if host_ns <= 0.0 {
            return Err(bad(format!(
                "the {variant} {phase} row has no busy CPU per operation above 0: give a run long \
                 enough to measure it (more -k)",
                variant = r.variant.map_or_else(|| "?".into(), variant_name),
                phase = r.phase,
            )));
        }
        // Every rank mapped (the only path let through above): the
        // shortcut's rounds are memory accesses (near), a fabric's are not.
        let near = r.path == Some(transports::Taken::Memory);
        let Some(v) = r.variant else {
            return Err(bad("a fabkit row without its variant".into()));
        };
        let rec = r.record;
        let mut cross = [counted[0] / ops, counted[1] / ops, counted[2] / ops];
        let mut itself = counted[3] / ops;
        let ahead = if near && v == Variant::Chunked {
            1.0
        } else {
            0.0
        };
        let all = cross.iter().sum::<f64>() + itself;
        if ahead > 0.0 && all > 0.0 {
            let share = cross.iter().sum::<f64>() / all;
            cross[0] += ahead * share;
            itself += ahead * (1.0 - share);
        }
        // The whole numbers and shares the model multiplies by, bounded
        // as their flags are.
        let whole = [
            ("ranks", r.ranks as u64, 1, 1 << 20),
            ("batch", r.batch as u64, 1, 1 << 20),
            ("depth", r.depth as u64, 1, fabkit_dht::MAX_DEPTH as u64),
            ("counters.remote_ops", c.remote_ops, 0, 1 << 53),
        ];
        for (what, v, lo, hi) in whole {
            if !(lo..=hi).contains(&v) {
                return Err(bad(format!(
                    "{row} {what} is {v}, outside {lo} to {hi}: give a file fabkit wrote, unedited"
                )));
            }
        }
        if let Some(own) = r.own_share {
            from_file::check_or_zero(&format!("{row} own_share"), own, (0.0, 1.0)).map_err(&bad)?;
        }
        for (what, v) in [
            ("reads_per_sec", r.reads_per_sec),
            ("writes_per_sec", r.writes_per_sec),
        ] {
            from_file::check_or_zero(&format!("{row} {what}"), v, from_file::RATE).map_err(&bad)?;
        }
        out.push(Phase {
            variant: v,
            workload: r.workload,
            phase: r.phase,
            cross,
            itself,
            host_ns,
            sizes: bound::sizes(v, rec),
            record: rec,
            batch: r.batch,
            ranks: r.ranks,
            lanes: r.depth,
            own: r.own_share.unwrap_or(1.0 / r.ranks.max(1) as f64),
            read_share: {
                let all = r.reads_per_sec + r.writes_per_sec;
                if all > 0.0 {
                    r.reads_per_sec / all
                } else {
                    0.0
                }
            },
            ahead,
        });
    }
    if out.is_empty() {
        return Err(bad("no fabkit row sent a remote operation".into()));
    }
    Ok(out)
}

/// Runs `fabkit model`: the predictions, printed, and written as JSON.
pub fn run(a: &ModelArgs) -> Result<Vec<Prediction>> {
    let fabric =
        match (&a.pps, a.perf.is_empty()) {
            (Some(_), false) => {
                return Err(exit::usage(
                    "--perf and --pps each give the fabric: give one of them",
                ))
            }
            (None, true) => return Err(exit::usage(
                "give the fabric: --perf FILE from fabkit perf -b --json, or --pps RATE of a NIC",
            )),
            (Some(pps), true) => Fabric::Nic {
                per_sec: pps / a.packets,
                cpu_ns: a.xfer_ns,
            },
            (None, false) => Fabric::Perf(bound::load(&a.perf, "--perf", None, &[])?),
        };
    let cores = a.cores.unwrap_or(fabkit_core::host::online_cpus() as f64);
    let measured = match &a.measured {
        Some(p) => Some(dht_rows(p, "--measured")?),
        None => None,
    };
    let mut out = Vec::new();
    for ph in phases(&a.ops)? {
        let Some(mut p) = predict(&ph, &fabric, a.itself, cores) else {
            return Err(exit::usage(format!(
                "{} {} {}: it sends a kind of operation the perf files give no rate or CPU for \
                 (CPU per transfer is in files of this fabkit); add --perf FILE of it",
                variant_name(ph.variant),
                name(ph.workload),
                ph.phase
            )));
        };
        compare(&mut p, &fabric, cores);
        if let Some(rows) = &measured {
            // The same phase of the same variant and workload, on records
            // of the same sizes in batches of the same size, on the path
            // predicted: message rows beside the message path, the others
            // beside RMA.
            let row = |message: bool| {
                rows.iter()
                    .find(|r| {
                        r.variant == Some(ph.variant)
                            && r.workload == ph.workload
                            && r.phase == ph.phase
                            && r.record == ph.record
                            && r.batch == ph.batch
                            && r.path.is_some_and(|t| t.messages()) == message
                    })
                    .map(|r| r.ops_per_sec)
            };
            p.measured = row(false);
            p.ratio = p.measured.map(|m| p.ops_per_sec / m);
            if let Some(msg) = &mut p.message {
                msg.measured = row(true);
                msg.ratio = msg.measured.map(|m| msg.ops_per_sec / m);
            }
        }
        out.push(p);
    }
    Ok(out)
}

/// Prints the predictions as a table.
pub fn print(rows: &[Prediction]) {
    let m = |x: f64| {
        if x.is_finite() {
            format!("{:.3}", x / 1e6)
        } else {
            "-".into()
        }
    };
    println!(
        "{:<9} {:<6} {:<6} {:>6} {:>6} {:>6} {:>6} {:>8} {:>9} {:>9} {:>9} {:<6} {:>9} {:>6}",
        "variant",
        "wkld",
        "phase",
        "rd/op",
        "wr/op",
        "at/op",
        "own/op",
        "host ns",
        "fabric M",
        "cpu M",
        "model M",
        "binds",
        "meas. M",
        "ratio"
    );
    for p in rows {
        let ph = &p.phase;
        println!(
            "{:<9} {:<6} {:<6} {:>6.2} {:>6.2} {:>6.2} {:>6.2} {:>8.0} {:>9} {:>9} {:>9} {:<6} {:>9} {:>6}",
            variant_name(ph.variant),
            name(ph.workload),
            ph.phase,
            ph.cross[0],
            ph.cross[1],
            ph.cross[2],
            ph.itself,
            ph.host_ns,
            m(p.fabric_limit),
            m(p.cpu_limit),
            m(p.ops_per_sec),
            p.binds,
            p.measured.map_or("-".into(), m),
            p.ratio.map_or("-".into(), |r| format!("{r:.2}")),
        );
    }
    println!(
        "M: million DHT operations per second of the job; rd/wr/at: operations across per DHT \
         operation, own: on the rank itself; host ns: the DHT's own busy CPU per operation (the \
         one-node run); fabric and cpu: the two limits; ratio: model over measured"
    );
    if rows.iter().any(|p| p.message.is_some()) {
        print_message(rows, m);
    }
    if rows.iter().any(|p| p.phase.ahead > 0.0) {
        println!(
            "note: chunked rows add one read per operation to the one-node run's: on a fabric \
             chunked fetches the next chunk with each (a round costs a round trip there)"
        );
    }
}

/// The message path's table: its limits beside the RMA path's
/// prediction, the path that predicts more, and the rule's.
fn print_message(rows: &[Prediction], m: impl Fn(f64) -> String) {
    println!();
    println!(
        "{:<9} {:<6} {:<6} {:>6} {:>6} {:>6} {:>9} {:>9} {:>9} {:>9} {:<7} {:>9} {:>6} {:<7} {:<7} {:<5}",
        "variant",
        "wkld",
        "phase",
        "msg/op",
        "req B",
        "rep B",
        "fabric M",
        "cpu M",
        "lat M",
        "message M",
        "binds",
        "meas. M",
        "ratio",
        "better",
        "auto",
        "agree"
    );
    let way = |w: Way| match w {
        Way::Memory => "memory",
        Way::Rma => "rma",
        Way::Message => "message",
    };
    for p in rows {
        let Some(msg) = &p.message else { continue };
        let ph = &p.phase;
        println!(
            "{:<9} {:<6} {:<6} {:>6.3} {:>6.0} {:>6.0} {:>9} {:>9} {:>9} {:>9} {:<7} {:>9} {:>6} {:<7} {:<7} {:<5}",
            variant_name(ph.variant),
            name(ph.workload),
            ph.phase,
            msg.messages_per_op,
            msg.request_bytes,
            msg.reply_bytes,
            m(msg.fabric_limit),
            m(msg.cpu_limit),
            msg.latency_limit.map_or("-".into(), &m),
            m(msg.ops_per_sec),
            msg.binds,
            msg.measured.map_or("-".into(), &m),
            msg.ratio.map_or("-".into(), |r| format!("{r:.2}")),
            p.better.map_or("-", way),
            p.auto.as_ref().map_or("-", |a| way(a.takes)),
            p.agree.map_or("-", |a| if a { "yes" } else { "NO" }),
        );
    }
    println!(
        "message path: msg/op: requests and replies per DHT operation, req/rep B: their mean \
         bytes; fabric, cpu and lat: its limits (perf's -o send rates and CPU per message, the \
         one-node run's host ns, and a batch in flight per rank and lane waiting a request's and \
         a reply's one-way time from -o send --pattern lat); better: the path predicted faster across nodes; auto: \
         what the rule takes there from the perf files' provider facts"
    );
    let mut whys: Vec<&str> = rows
        .iter()
        .filter_map(|p| p.auto.as_ref().map(|a| a.why.as_str()))
        .collect();
    whys.dedup();
    for why in whys {
        println!("auto: {why}");
    }
}

/// What `fabkit model --json` writes: the inputs' paths beside the
/// provenance, and the predictions.
#[derive(Debug, Serialize)]
pub struct Report {
    /// Where and from what the predictions were made.
    pub meta: Meta,
    /// One prediction per phase.
    pub rows: Vec<Prediction>,
}

/// The provenance of a model report, and the files it read.
#[derive(Debug, Serialize)]
pub struct Meta {
    /// Command, commit, host, machine, cores and fabkit version.
    #[serde(flatten)]
    pub provenance: fabkit_core::provenance::Provenance,
    /// The one-node run (`--ops`).
    pub ops: PathBuf,
    /// The fabric's perf files (`--perf`).
    pub perf: Vec<PathBuf>,
    /// The NIC's packet rate (`--pps`).
    pub pps: Option<f64>,
    /// The measured run (`--measured`).
    pub measured: Option<PathBuf>,
}

/// `fabkit model`: the predictions printed, and written as JSON if asked.
pub fn command(args: &ModelArgs) -> Result<bool> {
    let rows = run(args)?;
    print(&rows);
    if let Some(path) = &args.json {
        let doc = Report {
            meta: Meta {
                provenance: crate::provenance(None),
                ops: args.ops.clone(),
                perf: args.perf.clone(),
                pps: args.pps,
                measured: args.measured.clone(),
            },
            rows,
        };
        crate::output::write_out(path, &(serde_json::to_string_pretty(&doc)? + "\n"))?;
    }
    Ok(true)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn phase(cross: [f64; 3], itself: f64, host_ns: f64) -> Phase {
        Phase {
            variant: Variant::Lockfree,
            workload: Workload::Paper,
            phase: PhaseName::Read,
            cross,
            itself,
            host_ns,
            sizes: (192, 192),
            record: Record { key: 8, value: 8 },
            batch: 1,
            ranks: 2,
            lanes: 1,
            own: 0.5,
            read_share: 1.0,
            ahead: 0.0,
        }
    }

    fn rates(read: (f64, f64), write: (f64, f64), atomic: Option<(f64, f64)>) -> Fabric {
        let r = |(per_sec, cpu): (f64, f64)| Rate {
            per_sec,
            bytes: 192,
            cpu_ns: Some(cpu),
        };
        Fabric::Perf(Rates {
            reads: vec![r(read)],
            writes: vec![r(write)],
            atomic: atomic.map(r),
            sends: Vec::new(),
            send_latency: Vec::new(),
            executes: None,
        })
    }

    /// Every key `fabkit model --json` writes, as it is spelled: a field
    /// renamed or dropped fails here (new ones are added to the list).
    const JSON_KEYS: &[&str] = &[
        "meta",
        "meta.command",
        "meta.commit",
        "meta.cores",
        "meta.fabkit",
        "meta.host",
        "meta.machine",
        "meta.measured",
        "meta.ops",
        "meta.perf",
        "meta.pps",
        "rows",
        "rows[].agree",
        "rows[].ahead",
        "rows[].auto",
        "rows[].auto.takes",
        "rows[].auto.why",
        "rows[].better",
        "rows[].binds",
        "rows[].cpu_limit",
        "rows[].cross",
        "rows[].fabric_limit",
        "rows[].host_ns",
        "rows[].itself",
        "rows[].lanes",
        "rows[].measured",
        "rows[].message",
        "rows[].message.binds",
        "rows[].message.cpu_limit",
        "rows[].message.fabric_limit",
        "rows[].message.latency_limit",
        "rows[].message.measured",
        "rows[].message.messages_per_op",
        "rows[].message.ops_per_sec",
        "rows[].message.ratio",
        "rows[].message.reply_bytes",
        "rows[].message.request_bytes",
        "rows[].own",
        "rows[].ops_per_sec",
        "rows[].phase",
        "rows[].ranks",
        "rows[].ratio",
        "rows[].read_share",
        "rows[].sizes",
        "rows[].variant",
        "rows[].workload",
    ];

    #[test]
    fn golden_the_json_keys_are_todays() {
        let f = rates((200e3, 1.0), (500e3, 1.0), None);
        let mut p = predict(
            &phase([1.0, 0.0, 0.0], 1.0, 1000.0),
            &f,
            Itself::Fabric,
            2.0,
        )
        .unwrap();
        (p.measured, p.ratio) = (Some(1.0), Some(1.0));
        let mut with_sends = sends(&[(100e3, 200, 1.0)]);
        if let Fabric::Perf(r) = &mut with_sends {
            r.executes = Some(fabkit_fabric::Executes::of("tcp;ofi_rxm", "lo", false));
        }
        compare(&mut p, &with_sends, 2.0);
        assert!(p.message.is_some() && p.auto.is_some() && p.agree.is_some());
        let doc = Report {
            meta: Meta {
                provenance: crate::provenance(None),
                ops: "ops.json".into(),
                perf: vec!["perf.json".into()],
                pps: Some(1.0),
                measured: Some("dht.json".into()),
            },
            rows: vec![p],
        };
        let json = serde_json::to_value(&doc).unwrap();
        fabkit_core::schema::same_keys(&json, JSON_KEYS).unwrap_or_else(|e| panic!("{e}"));
    }

    #[test]
    fn the_lower_limit_binds_and_own_operations_cost_what_cross_ones_do_on_the_fabric() {
        // One read across and one on itself per op; reads 200k/s at 10 us
        // of CPU each; the host's own 1 us; 2 cores.
        let ph = phase([1.0, 0.0, 0.0], 1.0, 1000.0);
        let f = rates((200e3, 10_000.0), (500e3, 1.0), None);
        let p = predict(&ph, &f, Itself::Fabric, 2.0).unwrap();
        // Fabric: 2 reads per op at 200k/s: 100k/s. CPU: 2e9 / (1000 +
        // 2 x 10000) = 95.2k/s: the CPU binds.
        assert!((p.fabric_limit - 100e3).abs() < 1e-6, "{p:?}");
        assert!((p.cpu_limit - 2e9 / 21_000.0).abs() < 1e-6, "{p:?}");
        assert_eq!((p.binds, p.ops_per_sec), ("cpu", p.cpu_limit));
        // On memory, the own read costs nothing of the fabric.
        let p = predict(&ph, &f, Itself::Memory, 2.0).unwrap();
        assert!((p.fabric_limit - 200e3).abs() < 1e-6, "{p:?}");
        assert!((p.cpu_limit - 2e9 / 11_000.0).abs() < 1e-6, "{p:?}");
        assert_eq!(p.binds, "cpu");
        let p = predict(&ph, &f, Itself::Memory, 8.0).unwrap();
        assert_eq!(p.binds, "fabric");
    }

    #[test]
    fn each_kind_is_priced_at_its_own_rate_and_a_missing_one_gives_no_prediction() {
        // Per op: 1 read, 1 write, 2 atomics across.
        let ph = phase([1.0, 1.0, 2.0], 0.0, 0.0);
        let f = rates((100e3, 0.0), (400e3, 0.0), Some((50e3, 0.0)));
        let p = predict(&ph, &f, Itself::Fabric, 2.0).unwrap();
        let secs = 1.0 / 100e3 + 1.0 / 400e3 + 2.0 / 50e3;
        assert!((p.fabric_limit - 1.0 / secs).abs() < 1e-6, "{p:?}");
        assert!(p.cpu_limit.is_infinite());
        assert!(predict(
            &ph,
            &rates((1.0, 0.0), (1.0, 0.0), None),
            Itself::Fabric,
            2.0
        )
        .is_none());
        // A NIC: 15 Mpps, 2 packets per operation, 200 ns of CPU each.
        let nic = Fabric::Nic {
            per_sec: 7.5e6,
            cpu_ns: 200.0,
        };
        let p = predict(&ph, &nic, Itself::Fabric, 2.0).unwrap();
        assert!((p.fabric_limit - 7.5e6 / 4.0).abs() < 1e-3, "{p:?}");
        assert!((p.cpu_limit - 2e9 / 800.0).abs() < 1e-3, "{p:?}");
        assert_eq!(p.binds, "fabric");
    }

    #[test]
    fn on_the_same_node_path_own_atomics_stay_on_the_fabric() {
        // Per op: 1 read and 1 atomic across, 2 on the rank itself (1 and
        // 1, as across). Reads 100k/s, atomics 50k/s, no CPU.
        let ph = phase([1.0, 0.0, 1.0], 2.0, 1.0);
        let f = rates((100e3, 0.0), (1.0, 0.0), Some((50e3, 0.0)));
        let plain = predict(&ph, &f, Itself::Fabric, 2.0).unwrap();
        let memory = predict(&ph, &f, Itself::Memory, 2.0).unwrap();
        let secs = |reads: f64, atomics: f64| reads / 100e3 + atomics / 50e3;
        assert!((plain.fabric_limit - 1.0 / secs(2.0, 2.0)).abs() < 1e-6);
        assert!((memory.fabric_limit - 1.0 / secs(1.0, 2.0)).abs() < 1e-6);
    }

    /// A fabric of send points only: (rate, bytes, CPU ns).
    fn sends(points: &[(f64, u64, f64)]) -> Fabric {
        Fabric::Perf(Rates {
            sends: points
                .iter()
                .map(|&(per_sec, bytes, cpu)| Rate {
                    per_sec,
                    bytes,
                    cpu_ns: Some(cpu),
                })
                .collect(),
            ..Rates::default()
        })
    }

    #[test]
    fn the_message_path_costs_a_request_and_a_reply_per_owner_touched_per_lane() {
        // 2 ranks, half the keys the rank's own, batches of 64 writes of
        // 8 + 8 B: each batch touches the other owner (1 - 2^-64) with
        // 32 keys, one request of 40 + 32 x 16 B and a reply of 40 + 32 B.
        let mut ph = phase([1.0, 0.0, 0.0], 1.0, 1000.0);
        (ph.batch, ph.read_share) = (64, 0.0);
        let mut f = sends(&[(100e3, 72, 500.0), (50e3, 552, 1500.0)]);
        let m = predict_message(&ph, &f, 2.0).unwrap();
        assert_eq!(m.latency_limit, None, "no ping-pong, no latency limit");
        let pairs = 1.0 / 64.0;
        assert!((m.messages_per_op - 2.0 * pairs).abs() < 1e-9, "{m:?}");
        assert!((m.request_bytes - 552.0).abs() < 1e-9, "{m:?}");
        assert!((m.reply_bytes - 72.0).abs() < 1e-9, "{m:?}");
        let secs = pairs * (1.0 / 50e3 + 1.0 / 100e3);
        assert!((m.fabric_limit - 1.0 / secs).abs() < 1e-3, "{m:?}");
        let cpu = 1000.0 + pairs * 2000.0;
        assert!((m.cpu_limit - 2e9 / cpu).abs() < 1e-3, "{m:?}");
        // 2e9 / 1031 ns = 1.94 M/s of CPU against 2.13 M/s of messages.
        assert_eq!(m.binds, "cpu");
        assert_eq!(predict_message(&ph, &f, 8.0).unwrap().binds, "fabric");
        // Ping-pongs: a 552 B request and a 72 B reply one-way in 40 and
        // 20 us; a batch of 64 with 1 us of own work per key: each of the
        // 2 ranks does 64 operations per 124 us.
        if let Fabric::Perf(r) = &mut f {
            r.send_latency = vec![
                Rate {
                    per_sec: 1e6 / 20.0,
                    bytes: 72,
                    cpu_ns: None,
                },
                Rate {
                    per_sec: 1e6 / 40.0,
                    bytes: 552,
                    cpu_ns: None,
                },
            ];
        }
        let lat = predict_message(&ph, &f, 8.0).unwrap();
        let want = 2.0 * 64.0 / (60e-6 + 64.0 * 1000e-9);
        assert!((lat.latency_limit.unwrap() - want).abs() < 1e-3, "{lat:?}");
        assert_eq!(
            (lat.binds, lat.ops_per_sec),
            ("latency", lat.latency_limit.unwrap())
        );
        // No send point: no message prediction.
        assert!(predict_message(&ph, &rates((1.0, 0.0), (1.0, 0.0), None), 2.0).is_none());
        // Reads: a request of keys, a reply of outcomes and values.
        ph.read_share = 1.0;
        let m = predict_message(&ph, &f, 2.0).unwrap();
        assert!(
            (m.request_bytes - (40.0 + 32.0 * 8.0)).abs() < 1e-9,
            "{m:?}"
        );
        assert!((m.reply_bytes - (40.0 + 32.0 * 9.0)).abs() < 1e-9, "{m:?}");
        // Two lanes: two requests per batch, 16 keys each.
        ph.lanes = 2;
        let two = predict_message(&ph, &f, 2.0).unwrap();
        assert!((two.messages_per_op - 4.0 / 64.0).abs() < 1e-9, "{two:?}");
        // Batch 1 on 4 ranks, a quarter own: 3/4 of the operations send a
        // pair, of one key each.
        (ph.batch, ph.lanes, ph.ranks, ph.own) = (1, 1, 4, 0.25);
        let one = predict_message(&ph, &f, 2.0).unwrap();
        assert!((one.messages_per_op - 1.5).abs() < 1e-9, "{one:?}");
        // Every key the rank's own: nothing to send.
        (ph.ranks, ph.own) = (1, 1.0);
        let alone = predict_message(&ph, &f, 2.0).unwrap();
        // One rank, one key at a time, 1 us each: its own pace binds.
        assert_eq!((alone.messages_per_op, alone.binds), (0.0, "latency"));
        assert!((alone.ops_per_sec - 1e6).abs() < 1e-3, "{alone:?}");
        // Nothing sent: no price needed.
        assert!(predict_message(&ph, &rates((1.0, 0.0), (1.0, 0.0), None), 2.0).is_some());
    }

    #[test]
    fn the_rule_and_the_model_are_put_side_by_side() {
        use fabkit_fabric::Executes;
        let rule = |p: &str, d: &str, v: Variant| auto_rule(v, Executes::of(p, d, false)).unwrap();
        assert_eq!(
            rule("tcp;ofi_rxm", "lo", Variant::Lockfree).takes,
            Way::Message
        );
        assert_eq!(rule("cxi", "cxi0", Variant::Fine).takes, Way::Rma);
        assert_eq!(
            rule("verbs;ofi_rxm", "mlx5_0", Variant::Lockfree).takes,
            Way::Rma
        );
        // rxm emulates atomics on the target's CPU: a variant that locks
        // by atomics goes by message even over a NIC.
        assert_eq!(
            rule("verbs;ofi_rxm", "mlx5_0", Variant::Fine).takes,
            Way::Message
        );
        // A fabric whose messages are dear: RMA predicted better, and a
        // rule that takes messages disagrees.
        let mut ph = phase([1.0, 0.0, 0.0], 1.0, 100.0);
        ph.batch = 64;
        let mut f = sends(&[(1.0, 100, 0.0)]);
        if let Fabric::Perf(r) = &mut f {
            r.reads = vec![Rate {
                per_sec: 1e6,
                bytes: 192,
                cpu_ns: Some(0.0),
            }];
            r.executes = Some(Executes::of("tcp;ofi_rxm", "lo", false));
        }
        let mut p = predict(&ph, &f, Itself::Fabric, 2.0).unwrap();
        compare(&mut p, &f, 2.0);
        assert_eq!(p.better, Some(Way::Rma));
        assert_eq!(p.auto.as_ref().map(|a| a.takes), Some(Way::Message));
        assert_eq!(p.agree, Some(false));
    }
}
