//! `fabkit perf`: latency, bandwidth and message rate of RMA and atomics
//! between two ranks, by size, on any provider (fabtests' `fi_rma_bw` and
//! `fi_rma_pingpong`, perftest's `ib_write_bw`/`ib_read_lat`, OSU's one-sided
//! tests, in one tool).

pub mod report;
pub mod stats;

use std::time::{Duration, Instant};

use anyhow::{bail, ensure, Context, Result};
use clap::{Args, ValueEnum};
use fabkit_fabric::bootstrap::Bootstrap;
use fabkit_fabric::{Op, Rank, RankConfig, Remote};
use serde::{Deserialize, Serialize};

use self::stats::{Latency, Rates};

/// Operation measured.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PerfOp {
    /// RMA write (fi_write).
    Write,
    /// RMA read (fi_read).
    Read,
    /// u64 compare-and-swap (fi_compare_atomic FI_CSWAP).
    Cas,
    /// u64 fetch-and-add (fi_fetch_atomic FI_SUM).
    Fadd,
}

impl PerfOp {
    fn is_atomic(self) -> bool {
        matches!(self, PerfOp::Cas | PerfOp::Fadd)
    }
}

/// What is measured.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Pattern {
    /// One operation in flight; every operation timed (min/p50/p99/max).
    Lat,
    /// A window of operations in flight: bandwidth and message rate.
    Bw,
}

/// `fabkit perf` options.
#[derive(Args, Debug, Clone)]
pub struct PerfArgs {
    /// libfabric provider (see `fabkit info`).
    #[arg(short, long, default_value = "shm")]
    pub provider: String,
    /// Domain: interface or device (default: chosen, `lo` on one host).
    #[arg(short, long)]
    pub domain: Option<String>,
    /// Operation.
    #[arg(short, long, value_enum, default_value = "write")]
    pub op: PerfOp,
    /// Latency (one in flight) or bandwidth/message rate (a window in flight).
    #[arg(long, value_enum, default_value = "bw")]
    pub pattern: Pattern,
    /// One transfer size in bytes (atomics are always 8 B).
    #[arg(short, long, conflicts_with_all = ["all", "sizes"])]
    pub size: Option<usize>,
    /// Sweep powers of two from 8 B to 4 MiB.
    #[arg(short, long)]
    pub all: bool,
    /// Comma-separated sizes, e.g. 184,189 (the DHT's records).
    #[arg(long, value_delimiter = ',')]
    pub sizes: Vec<usize>,
    /// Iterations per size (timed transfers).
    #[arg(short = 'n', long, default_value_t = 10_000)]
    pub iters: u64,
    /// Untimed transfers before each size.
    #[arg(long, default_value_t = 100)]
    pub warmup: u64,
    /// Operations in flight for --pattern bw.
    #[arg(short, long, default_value_t = 64)]
    pub window: usize,
    /// Bidirectional: both ranks initiate at once; results are summed.
    #[arg(short, long)]
    pub bidir: bool,
    /// Busy-poll completion queues, as fabtests and perftest do, instead of
    /// spinning briefly and then blocking. Faster on idle cores; it starves
    /// the peer when ranks share cores.
    #[arg(long)]
    pub busy_poll: bool,
    /// Seconds to wait for any one operation before giving up.
    #[arg(long, default_value_t = 10.0)]
    pub timeout: f64,
    /// Write results as JSON to FILE (`-` for stdout).
    #[arg(long, value_name = "FILE")]
    pub json: Option<std::path::PathBuf>,
    /// Write results as CSV to FILE (`-` for stdout).
    #[arg(long, value_name = "FILE")]
    pub csv: Option<std::path::PathBuf>,
}

/// Cap on the staging buffer: large sizes get a smaller effective window.
const MAX_STAGING: usize = 64 << 20;

impl PerfArgs {
    /// The sizes to measure, validated.
    pub fn size_list(&self) -> Result<Vec<usize>> {
        if self.op.is_atomic() {
            return Ok(vec![8]);
        }
        let sizes = if self.all {
            (3..=22).map(|p| 1usize << p).collect()
        } else if !self.sizes.is_empty() {
            self.sizes.clone()
        } else {
            vec![self.size.unwrap_or(184)]
        };
        if let Some(&z) = sizes.iter().find(|&&s| s == 0) {
            bail!("size {z} B: transfers must be at least 1 byte");
        }
        Ok(sizes)
    }

    fn validate(&self) -> Result<()> {
        ensure!(self.iters > 0, "-n/--iters must be at least 1");
        ensure!(self.window > 0, "-w/--window must be at least 1");
        ensure!(
            self.timeout.is_finite() && self.timeout > 0.0,
            "--timeout must be a positive number of seconds"
        );
        Ok(())
    }
}

/// One measured point.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Point {
    /// Operation.
    pub op: PerfOp,
    /// Pattern.
    pub pattern: Pattern,
    /// Bytes per transfer.
    pub bytes: usize,
    /// Timed transfers (summed over initiators).
    pub iters: u64,
    /// Wall time of the timed part, seconds (slowest initiator).
    pub secs: f64,
    /// Operations in flight (effective, after the staging cap).
    pub window: usize,
    /// Both ranks initiated.
    pub bidir: bool,
    /// Rates (summed over initiators).
    pub rates: Rates,
    /// Latency percentiles (pattern lat; initiator rank 0).
    pub latency: Option<Latency>,
}

/// One initiator's raw measurement of one size.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Raw {
    /// Bytes per transfer.
    pub bytes: usize,
    /// Timed transfers.
    pub iters: u64,
    /// Seconds they took.
    pub secs: f64,
    /// Operations in flight.
    pub window: usize,
    /// Per-operation latencies (pattern lat), nanoseconds.
    pub samples_ns: Vec<u64>,
}

fn op_for<'b>(op: PerfOp, at: Remote, buf: &'b mut [u8], old: &'b mut u64) -> Op<'b> {
    match op {
        PerfOp::Write => Op::Write { to: at, from: buf },
        PerfOp::Read => Op::Read {
            from: at,
            into: buf,
        },
        PerfOp::Cas => Op::CompareAndSwap {
            at,
            expected: 0,
            new: 0,
            old,
        },
        PerfOp::Fadd => Op::FetchAdd { at, delta: 1, old },
    }
}

/// Message the initiator sends idle ranks while it measures, and when done.
const TICK: &[u8] = b"tick";
const DONE: &[u8] = b"done";
/// How often the initiator tells idle ranks it is alive.
const TICK_EVERY: Duration = Duration::from_secs(1);

fn measure(r: &Rank, a: &PerfArgs, peer: usize, bytes: usize, idle: &[usize]) -> Result<Raw> {
    let window = match a.pattern {
        Pattern::Lat => 1,
        Pattern::Bw => a
            .window
            .min((MAX_STAGING / bytes.next_multiple_of(8)).max(1)),
    };
    let at = Remote::new(peer, 0);
    let mut bufs: Vec<Vec<u8>> = (0..window).map(|i| vec![i as u8; bytes]).collect();
    let mut olds = vec![0u64; window];
    let mut run = |count: usize| -> Result<()> {
        let mut ops: Vec<Op> = bufs
            .iter_mut()
            .zip(olds.iter_mut())
            .take(count)
            .map(|(b, o)| op_for(a.op, at, b, o))
            .collect();
        r.execute(&mut ops)
            .with_context(|| format!("{:?} of {bytes} B to rank {peer}", a.op))
    };
    for _ in 0..a.warmup.div_ceil(window as u64) {
        run(window)?;
    }
    let mut samples_ns = Vec::new();
    let start = Instant::now();
    let mut done = 0u64;
    let mut last_tick = Instant::now();
    while done < a.iters {
        if !idle.is_empty() && last_tick.elapsed() >= TICK_EVERY {
            for &p in idle {
                r.send(p, TICK)?;
            }
            last_tick = Instant::now();
        }
        let count = (a.iters - done).min(window as u64) as usize;
        if a.pattern == Pattern::Lat {
            let t = Instant::now();
            run(1)?;
            samples_ns.push(t.elapsed().as_nanos() as u64);
        } else {
            run(count)?;
        }
        done += count as u64;
    }
    Ok(Raw {
        bytes,
        iters: done,
        secs: start.elapsed().as_secs_f64(),
        window,
        samples_ns,
    })
}

/// Runs the sweep on one rank. Ranks 0 (and 1 with --bidir) initiate against
/// each other; the others wait at the barriers that frame each size.
pub fn run_rank(a: &PerfArgs, boot: &dyn Bootstrap) -> Result<Vec<Raw>> {
    a.validate()?;
    let sizes = a.size_list()?;
    ensure!(
        boot.size() >= 2,
        "perf needs 2 ranks (run in-process, or mpirun -n 2); this job has {}",
        boot.size()
    );
    let max = *sizes.iter().max().unwrap();
    let mut cfg = RankConfig::new(a.provider.clone());
    cfg.domain = a.domain.clone();
    cfg.atomics = a.op.is_atomic();
    cfg.region_len = max.next_multiple_of(4096);
    cfg.window = a.window;
    cfg.staging_len = (max.next_multiple_of(8) * a.window).clamp(1 << 16, MAX_STAGING);
    cfg.timeout = Duration::from_secs_f64(a.timeout);
    cfg.busy_poll = a.busy_poll;
    let r = Rank::establish(cfg, boot).with_context(|| format!("setting up `{}`", a.provider))?;
    let max_msg = r.info().max_msg_size();
    if let Some(&s) = sizes.iter().find(|&&s| s > max_msg) {
        bail!(
            "size {s} B exceeds provider `{}`'s max_msg_size of {max_msg} B; use smaller sizes",
            a.provider
        );
    }
    let me = r.rank();
    let initiates = me == 0 || (a.bidir && me == 1);
    let peer = if me == 0 { 1 } else { 0 };
    // Ranks that do not initiate wait for rank 0's word through the fabric,
    // not in a barrier: MPI barriers poll, and on a small node that steals
    // the core the measurement needs.
    let idle: Vec<usize> = (0..r.ranks())
        .filter(|&x| !(x == 0 || (a.bidir && x == 1)))
        .collect();
    let mut out = Vec::new();
    for &bytes in &sizes {
        boot.barrier()?;
        if initiates {
            let tell = if me == 0 { &idle[..] } else { &[] };
            out.push(measure(&r, a, peer, bytes, tell)?);
            for &p in tell {
                r.send(p, DONE)?;
            }
        } else {
            wait_for_done(&r, Duration::from_secs_f64(a.timeout))?;
        }
        boot.barrier()?;
    }
    r.finish(boot)?;
    Ok(out)
}

/// Idles until rank 0 says a size is done; its ticks prove it alive, so
/// silence for `timeout` is an error naming it.
fn wait_for_done(r: &Rank, timeout: Duration) -> Result<()> {
    let mut buf = [0u8; 8];
    loop {
        let n = r
            .recv_within(0, &mut buf, timeout.max(TICK_EVERY * 3))
            .context("waiting for rank 0 to finish a size")?;
        match &buf[..n] {
            b if b == DONE => return Ok(()),
            b if b == TICK => continue,
            other => bail!("unexpected message from rank 0: {other:?}"),
        }
    }
}

/// Combines the initiators' raw results into points.
pub fn combine(a: &PerfArgs, per_rank: &[Vec<Raw>]) -> Vec<Point> {
    let initiators: Vec<&Vec<Raw>> = per_rank.iter().filter(|v| !v.is_empty()).collect();
    let Some(first) = initiators.first() else {
        return Vec::new();
    };
    (0..first.len())
        .map(|i| {
            let raws: Vec<&Raw> = initiators.iter().map(|v| &v[i]).collect();
            let rates = raws
                .iter()
                .map(|x| Rates::new(x.bytes, x.iters, x.secs))
                .reduce(Rates::sum)
                .unwrap();
            Point {
                op: a.op,
                pattern: a.pattern,
                bytes: raws[0].bytes,
                iters: raws.iter().map(|x| x.iters).sum(),
                secs: raws.iter().map(|x| x.secs).fold(0.0, f64::max),
                window: raws[0].window,
                bidir: a.bidir,
                rates,
                latency: Latency::from_nanos(&raws[0].samples_ns),
            }
        })
        .collect()
}
