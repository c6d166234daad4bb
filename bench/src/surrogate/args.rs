//! What `fabkit surrogate` is asked to run, checked before any rank
//! starts, and the table configuration it makes.

use std::time::Duration;

use anyhow::Result;
use clap::Args;
use fabkit_dht::{Config, Variant};

use super::chem::{self, Digits};
use crate::dhtbench::VariantArg;
use crate::{exit, flags};

/// `fabkit surrogate` options.
#[derive(Args, Debug, Clone)]
#[command(after_help = "\
Example:
  fabkit surrogate -n 2 --shm --digits exact,6,4,3 --substeps 100,400
      every variant, the cache against no cache at two solver costs

Exit status: 0 when every run finished; 2 for a bad command line; 1 when \
a run failed or an uncached run did not repeat itself bit for bit.")]
pub struct SurrogateArgs {
    /// libfabric provider (see `fabkit info`).
    #[arg(short, long, default_value = "shm")]
    pub provider: String,
    /// Domain: interface (eth0) or device (mlx5_0), or a network the ranks
    /// share (10.77.1.0/24). Default: chosen, `lo` when all ranks share a host.
    #[arg(short, long)]
    pub domain: Option<String>,
    /// In-process ranks (ignored under mpirun or fabkit launch, where each
    /// process is one).
    #[arg(short = 'n', long, default_value = "2", value_parser = flags::ranks)]
    pub ranks: usize,
    /// Which variant(s) cache the chemistry.
    #[arg(short, long, value_enum, default_value = "all")]
    pub variant: VariantArg,
    /// Give ranks on the same node direct access to each other's regions
    /// (shared memory), with libfabric for the rest. The spelling of
    /// --path memory.
    #[arg(long)]
    pub shm: bool,
    /// How the cache's operations travel to a key's owner: memory, rma,
    /// message (one request per owner and batch, answered by the owner's
    /// service thread while it computes) or auto (see `fabkit dht --help`).
    #[arg(long, value_name = "PATH", value_parser = flags::path)]
    pub path: Option<fabkit_dht::Path>,
    /// The grid, columns x rows.
    #[arg(long, value_name = "NXxNY", default_value = "48x24", value_parser = flags::grid)]
    pub grid: (usize, usize),
    /// Time steps (each: the flow, then the chemistry of every cell).
    #[arg(long, default_value = "60", value_parser = flags::steps)]
    pub steps: u64,
    /// Significant digits the chemistry's inputs are rounded to in the
    /// cache's key, comma-separated: 1 to 15, or `exact` (the inputs'
    /// bits: a hit is the result of the very same inputs).
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "exact,8,5,3",
        value_parser = flags::digits
    )]
    pub digits: Vec<Digits>,
    /// The chemistry's cost: implicit Euler sub-steps per cell and time
    /// step, each solved by Newton's method; comma-separated for several
    /// (rows report the microseconds a solve took).
    #[arg(long, value_delimiter = ',', default_value = "400", value_parser = flags::substeps)]
    pub substeps: Vec<u32>,
    /// Rounds: in each, per cost, the run without the cache, then every
    /// variant and rounding with it (odd rounds: the cached runs in reverse,
    /// then the uncached one); speed-ups are per round.
    #[arg(long, default_value = "3", value_parser = flags::surrogate_rounds)]
    pub rounds: u32,
    /// Cells per cache lookup (read_into, then write_into for the misses).
    /// Cells of one batch that share a key all miss (they are looked up
    /// before any is written), so the hit rate falls as batches grow
    /// toward a rank's whole share.
    #[arg(short, long, default_value = "64", value_parser = flags::batch)]
    pub batch: usize,
    /// Buckets per rank (default: two per distinct input a rank could
    /// write, cells x steps / ranks, at most 2^20; more inputs evict).
    #[arg(long, value_parser = flags::buckets)]
    pub buckets: Option<u64>,
    /// Relative errors are taken against max(|uncached|, FLOOR x the
    /// species' largest uncached concentration): ahead of the front Mg, Cl
    /// and dolomite are zero, and a difference there counts against the
    /// species' own scale.
    #[arg(long, default_value = "1e-6", value_parser = flags::floor)]
    pub floor: f64,
    /// Seconds to wait for any one operation before giving up.
    #[arg(long, value_name = "SECS", default_value = "10", value_parser = flags::secs)]
    pub timeout: Duration,
    /// Also write the results as JSON to FILE (`-` for stdout): `{meta:
    /// {command, commit, host, machine, launch, provider, grid, steps, dt,
    /// batch, floor, notes}, runs: [{variant, transport, digits, substeps,
    /// ranks, rounds: [{secs, uncached_secs, speedup}], speedup, hit_rate,
    /// checksum_mismatches, evictions, solve_us, cache_us_per_cell,
    /// break_even_us, break_even_measured_us, break_even_outside, error:
    /// {max, mean, species}, ...}]}`.
    #[arg(long, value_name = "FILE")]
    pub json: Option<std::path::PathBuf>,
    /// Write speed-up and error against rounding as SVG charts into DIR
    /// (speedup-*.svg, error-*.svg), one per solver cost.
    #[arg(long, value_name = "DIR")]
    pub charts: Option<std::path::PathBuf>,
    /// Write the last round's final grids as CSV into DIR (one row per
    /// cell: x, y, then the nine species, exact to the bit): uncached-S.csv
    /// and VARIANT-dD-S.csv, S the sub-steps, D the digits.
    #[arg(long, value_name = "DIR")]
    pub grids: Option<std::path::PathBuf>,
    /// Run over MPI one-sided RMA on a window of this kind instead of
    /// libfabric (under mpirun).
    #[cfg(feature = "mpi")]
    #[arg(long, value_name = "KIND", value_enum)]
    pub mpi: Option<crate::mpiperf::WinArg>,
}

/// The time step the chemistry runs with, seconds.
pub const DT: f64 = 100.0;

impl SurrogateArgs {
    /// Cells in the grid (checked by the parser).
    pub fn cells(&self) -> usize {
        self.grid.0 * self.grid.1
    }

    /// The variants that run.
    pub fn variants(&self) -> Vec<Variant> {
        self.variant.variants()
    }
}

/// The table of `variant` for a job of `ranks` ranks.
pub fn config(a: &SurrogateArgs, variant: Variant, ranks: usize) -> Result<Config> {
    let mut cfg = Config::new(variant);
    cfg.key_len = chem::KEY_LEN;
    cfg.value_len = chem::VALUE_LEN;
    cfg.buckets = match a.buckets {
        Some(b) => b,
        None => {
            let inputs = (a.cells() as u64).saturating_mul(a.steps) / ranks.max(1) as u64;
            inputs.saturating_mul(2).min(1 << 20)
        }
    }
    .max(flags::MIN_BUCKETS);
    cfg.validate()
        .map_err(|e| exit::usage(format!("--buckets {}: {e}", cfg.buckets)))?;
    Ok(cfg)
}

/// Checks the command line for a job of `ranks` ranks before anything is
/// set up.
pub fn validate(a: &SurrogateArgs, ranks: usize, mpi: bool) -> Result<()> {
    for (flag, dup) in [
        ("--digits", first_twice(&a.digits).map(|d| d.to_string())),
        (
            "--substeps",
            first_twice(&a.substeps).map(|s| s.to_string()),
        ),
    ] {
        if let Some(d) = dup {
            return Err(exit::usage(format!(
                "{flag} names {d} twice: give each value once (--rounds repeats them)"
            )));
        }
    }
    if !mpi {
        flags::check_domain(&a.provider, a.domain.as_deref(), fabkit_fabric::Caps::RMA)?;
        if let Some(v) = a.variants().into_iter().find(|v| v.needs_atomics()) {
            flags::check_domain(&a.provider, a.domain.as_deref(), fabkit_fabric::Caps::ALL)
                .map_err(|_| {
                    exit::usage(format!(
                        "the {} variant needs remote atomics, which provider `{}` does not offer \
                         here; use -v lockfree (no atomics) or a provider with atomics (fabkit info)",
                        super::variant_name(v),
                        a.provider
                    ))
                })?;
        }
    }
    for v in a.variants() {
        config(a, v, ranks)?;
    }
    Ok(())
}

/// The first value given twice.
fn first_twice<T: PartialEq + Copy>(v: &[T]) -> Option<T> {
    v.iter()
        .enumerate()
        .find(|(i, x)| v[..*i].contains(x))
        .map(|(_, x)| *x)
}
