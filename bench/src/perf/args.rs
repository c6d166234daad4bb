//! What `fabkit perf` and `fabkit mpi-perf` are asked to measure: the
//! operation, the pattern, the sizes and counts, each checked before any
//! rank starts.

use std::time::Duration;

use anyhow::Result;
use clap::{Args, ValueEnum};
use fabkit_fabric::Completion;
use serde::{Deserialize, Serialize};

use crate::{exit, flags};

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
    /// Two-sided messages (fi_send/fi_recv): pingpong for lat, a window of
    /// sends and one acknowledgement for bw. `perf` only: MPI two-sided is
    /// what osu_latency and osu_bw measure.
    Send,
}

impl PerfOp {
    /// True for the u64 atomics.
    pub fn is_atomic(self) -> bool {
        matches!(self, PerfOp::Cas | PerfOp::Fadd)
    }
}

/// What is measured (`bw` by default, on the command line and in a
/// file's point that does not say).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, ValueEnum, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Pattern {
    /// One operation in flight: usec/xfer is the mean, min/p50/p99/max
    /// time operations one by one. For send: pingpong, half the round trip.
    Lat,
    /// A window of operations in flight: bandwidth and message rate.
    #[default]
    Bw,
}

/// What to sweep: shared by `fabkit perf` and `fabkit mpi-perf`, so the two
/// take the same flags and print the same table.
#[derive(Args, Debug, Clone)]
pub struct SweepArgs {
    /// Operation.
    #[arg(short, long, value_enum, default_value = "write")]
    pub op: PerfOp,
    /// Latency (one in flight) or bandwidth/message rate (a window in flight).
    #[arg(long, value_enum, default_value = "bw")]
    pub pattern: Pattern,
    /// One transfer size in bytes (atomics are always 8 B), at most 1 GiB.
    #[arg(short, long, conflicts_with_all = ["all", "sizes"], value_parser = flags::size)]
    pub size: Option<usize>,
    /// Sweep powers of two from 8 B to 4 MiB.
    #[arg(short, long)]
    pub all: bool,
    /// Comma-separated sizes, e.g. 184,189 (the DHT's records).
    #[arg(long, value_delimiter = ',', value_parser = flags::size)]
    pub sizes: Vec<usize>,
    /// Iterations per size (timed transfers per thread), at most 10^9
    /// [default: 10000].
    #[arg(short = 'n', long, value_parser = flags::iters)]
    pub iters: Option<u64>,
    /// Run each size for about this many seconds instead of -n iterations
    /// (calibrated on short runs first), at most a day.
    #[arg(short = 't', long, value_name = "SECS", conflicts_with = "iters", value_parser = flags::secs)]
    pub duration: Option<Duration>,
    /// Untimed transfers before each size.
    #[arg(long, default_value = "100", value_parser = flags::warmup)]
    pub warmup: u64,
    /// Operations in flight for --pattern bw.
    #[arg(short, long, default_value = "64", value_parser = flags::window)]
    pub window: usize,
    /// Bidirectional: both ranks initiate at once; results are summed.
    #[arg(short, long)]
    pub bidir: bool,
    /// Seconds to wait for any one operation before giving up.
    #[arg(long, value_name = "SECS", default_value = "10", value_parser = flags::secs)]
    pub timeout: Duration,
    /// Write results as JSON to FILE (`-` for stdout).
    #[arg(long, value_name = "FILE")]
    pub json: Option<std::path::PathBuf>,
    /// Write results as CSV to FILE (`-` for stdout).
    #[arg(long, value_name = "FILE")]
    pub csv: Option<std::path::PathBuf>,
}

/// `fabkit perf` options.
#[derive(Args, Debug, Clone)]
pub struct PerfArgs {
    /// libfabric provider (see `fabkit info`).
    #[arg(short, long, default_value = "shm")]
    pub provider: String,
    /// Domain: interface or device, or a network the ranks share
    /// (10.77.1.0/24). Default: chosen, `lo` on one host.
    #[arg(short, long)]
    pub domain: Option<String>,
    /// What to measure.
    #[command(flatten)]
    pub sweep: SweepArgs,
    /// Initiating threads per rank (the multithreaded RMA question).
    #[arg(short = 'T', long, default_value = "1", value_parser = flags::threads)]
    pub threads: usize,
    /// With -T: give each thread its own endpoint (and peer endpoint)
    /// instead of sharing one.
    #[arg(long)]
    pub ep_per_thread: bool,
    /// Busy-poll completion queues, as fabtests and perftest do, instead of
    /// spinning briefly and then blocking. Faster on idle cores; it starves
    /// the peer when ranks share cores.
    #[arg(long)]
    pub busy_poll: bool,
    /// The completion writes wait for: `transmit` (fi_rma_bw's, the
    /// provider's default) or `delivery` (FI_DELIVERY_COMPLETE, or the
    /// rank's other mechanism for it: what the DHT's stores ask for, so
    /// the bound they are compared with).
    #[arg(long, value_enum, default_value = "transmit")]
    pub completion: WriteCompletion,
}

/// The completion a write of `fabkit perf` waits for.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum WriteCompletion {
    /// Transmit-complete: the write no longer needs the local buffer.
    Transmit,
    /// Delivery-complete: the bytes are visible at the target.
    Delivery,
}

impl From<WriteCompletion> for Completion {
    fn from(c: WriteCompletion) -> Completion {
        match c {
            WriteCompletion::Transmit => Completion::Transmit,
            WriteCompletion::Delivery => Completion::Delivery,
        }
    }
}

impl std::ops::Deref for PerfArgs {
    type Target = SweepArgs;
    fn deref(&self) -> &SweepArgs {
        &self.sweep
    }
}

/// Iterations per size when neither -n nor -t is given (`fabkit perf`;
/// `mpi-perf` calibrates to a duration instead).
pub const DEFAULT_ITERS: u64 = 10_000;

/// Cap on the staging buffer: large sizes get a smaller effective window.
pub(super) const MAX_STAGING: usize = 64 << 20;

impl SweepArgs {
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
        if let Some(&z) = sizes.iter().find(|&&s| s == 0 || s > flags::MAX_SIZE) {
            return Err(exit::usage(format!(
                "size {z} B: transfers must be at least 1 byte and at most {} B",
                flags::MAX_SIZE
            )));
        }
        Ok(sizes)
    }

    /// Checks the numbers a user can get wrong (the parsers bound each
    /// flag; this guards values built in code).
    pub fn validate(&self) -> Result<()> {
        exit::ensure_usage!(
            (1..=flags::MAX_ITERS).contains(&self.iters.unwrap_or(DEFAULT_ITERS)),
            "-n/--iters must be at least 1 and at most {}",
            flags::MAX_ITERS
        );
        exit::ensure_usage!(
            self.warmup <= flags::MAX_ITERS,
            "--warmup must be at most {}",
            flags::MAX_ITERS
        );
        exit::ensure_usage!(
            (1..=flags::MAX_WINDOW).contains(&self.window),
            "-w/--window must be at least 1 and at most {}",
            flags::MAX_WINDOW
        );
        Ok(())
    }

    /// Operations in flight for `bytes` (1 for latency; capped by staging).
    pub fn window_for(&self, bytes: usize) -> usize {
        match self.pattern {
            Pattern::Lat => 1,
            Pattern::Bw => self
                .window
                .min((MAX_STAGING / 2 / bytes.next_multiple_of(8)).max(1)),
        }
    }
}

impl PerfArgs {
    pub(super) fn validate_all(&self) -> Result<()> {
        self.sweep.validate()?;
        exit::ensure_usage!(
            (1..=flags::MAX_RANKS).contains(&self.threads),
            "-T/--threads must be at least 1 and at most {}",
            flags::MAX_RANKS
        );
        exit::ensure_usage!(
            self.completion == WriteCompletion::Transmit || self.op == PerfOp::Write,
            "--completion delivery is for writes (-o write): reads and atomics return \
             data, so they complete at the target already"
        );
        Ok(())
    }
}
