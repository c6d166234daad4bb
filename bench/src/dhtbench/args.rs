//! What `fabkit dht` is asked to run, checked before any rank starts: the
//! variants, workloads and sizes, whether they fit the table and this
//! host's memory, and the table and rank configuration they make.

use std::time::Duration;

use anyhow::Result;
use clap::{Args, ValueEnum};
use fabkit_dht::{Config, Variant};

use super::report;
use super::workload::{self, Dist, Workload};
use crate::exit;
use crate::flags::{self, Record};

/// Variant choice on the command line.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum VariantArg {
    /// All four, one after the other.
    All,
    /// Coarse-grained region lock.
    Coarse,
    /// Per-bucket lock words.
    Fine,
    /// Checksums, no locks.
    Lockfree,
    /// Chunked linear probing.
    Chunked,
}

/// `fabkit dht` options.
#[derive(Args, Debug, Clone)]
pub struct DhtArgs {
    /// libfabric provider (see `fabkit info`).
    #[arg(short, long, default_value = "shm")]
    pub provider: String,
    /// Domain: interface (eth0) or device (mlx5_0), or a network the ranks
    /// share (10.77.1.0/24). Default: chosen, `lo` when all ranks share a host.
    #[arg(short, long)]
    pub domain: Option<String>,
    /// In-process ranks (ignored under mpirun or fabkit launch, where each
    /// process is one).
    #[arg(short = 'n', long, default_value = "4", value_parser = flags::ranks)]
    pub ranks: usize,
    /// Which variant(s).
    #[arg(short, long, value_enum, default_value = "all")]
    pub variant: VariantArg,
    /// Workloads, comma-separated: paper (the MPI-DHT paper's write, read
    /// and mixed phases), load-a (YCSB: 100 % inserts), a (50 % reads, 50 %
    /// updates), b (95/5), c (100 % reads), d (95 % reads, 5 % inserts,
    /// latest), f (50 % reads, 50 % read-modify-writes).
    #[arg(
        short,
        long,
        value_enum,
        value_delimiter = ',',
        default_value = "paper"
    )]
    pub workload: Vec<Workload>,
    /// Key distribution: uniform, zipf (paper: plain zipfian over
    /// --zipf-range; YCSB: scrambled zipfian over the records) or latest.
    /// Default: uniform for paper, zipf for YCSB, latest for d.
    #[arg(long, value_enum)]
    pub distribution: Option<Dist>,
    /// The zipfian skew.
    #[arg(long, value_name = "THETA", default_value = "0.99", value_parser = flags::theta)]
    pub zipf_theta: f64,
    /// Keys the paper's zipfian draws from (shared by all ranks).
    #[arg(long, value_name = "KEYS", default_value = "712500", value_parser = flags::zipf_range)]
    pub zipf_range: u64,
    /// Keys written per rank (paper), records loaded per rank (YCSB).
    #[arg(short, long, default_value = "2000", value_parser = flags::keys)]
    pub keys: u64,
    /// Operations per rank of the paper's mixed phase and of YCSB's run
    /// phases (default: --keys).
    #[arg(long, value_parser = flags::ops)]
    pub ops: Option<u64>,
    /// Reads in the paper's mixed phase, percent (the rest are updates).
    #[arg(long, value_name = "PCT", default_value = "95", value_parser = flags::percent)]
    pub read_pct: u32,
    /// Buckets per rank (default: keys per rank x 2, a load of 50 %).
    #[arg(long, value_parser = flags::buckets)]
    pub buckets: Option<u64>,
    /// Allow more records than the table has buckets (they evict others);
    /// without it such a run is refused.
    #[arg(long)]
    pub evict: bool,
    /// Keys per batch (read_into / write_into); 1 = one blocking op at a
    /// time, like the MPI-DHT.
    #[arg(short, long, default_value = "64", value_parser = flags::batch)]
    pub batch: usize,
    /// Most batches in flight per rank, each serving a part of a batch's
    /// keys, one part per 32 keys (1 to 8; default and most: what the
    /// transport keeps, on libfabric as many windows as its completion
    /// queue holds with one to spare). MPI and --shm without a fabric keep
    /// 1; so does coarse. Rows say how many an operation used.
    #[arg(long, value_parser = flags::depth)]
    pub depth: Option<usize>,
    /// Key and value lengths in bytes, as KEY,VALUE (each 1 B to 1 MiB), or
    /// a class of the RED-SEA evaluation: S (24,9: 33 B pairs), M (24,99),
    /// L (24,999).
    #[arg(long, value_name = "KEY,VALUE", default_value = "80,104", value_parser = flags::record)]
    pub record: Record,
    /// Repetitions of every measurement (median and spread reported).
    #[arg(long, default_value = "1", value_parser = flags::reps)]
    pub reps: u32,
    /// Single operations of the closed-loop latency pass that follows each
    /// batched phase (0: skip it). At batch 1 the phase itself is that pass.
    #[arg(long, value_name = "OPS", default_value = "10000", value_parser = flags::latency_ops)]
    pub latency_ops: u64,
    /// Seed of the key draws (the same seed, the same operations).
    #[arg(long, default_value = "1")]
    pub seed: u64,
    /// Skip the Redis rows (they run when redis-server is installed).
    #[arg(long)]
    pub no_redis: bool,
    /// A `fabkit perf --json` file whose rates bound the DHT (repeat it:
    /// one for delivery-complete writes, one for reads, one for atomics,
    /// each measured with -b): each fabkit row then says its bound and how
    /// near it came.
    #[arg(long, value_name = "FILE")]
    pub bound: Vec<std::path::PathBuf>,
    /// Rounds of the hot-key check: every rank updates one key at once,
    /// then reads it back (0: skip; at most 10^6).
    #[arg(long, default_value = "20", value_parser = flags::rounds)]
    pub hot_rounds: u64,
    /// Soak: repeat the phases, each time on fresh tables, until SECS have
    /// passed (at most a day), sampling every rank's resident memory, file
    /// descriptors, threads, registered regions, /dev/shm segments and
    /// busy CPU per operation after each cycle; a count that grows after
    /// warm-up fails the run. The table shows the last cycle.
    #[arg(long, value_name = "SECS", value_parser = flags::secs)]
    pub duration: Option<Duration>,
    /// Seconds to wait for any one operation before giving up.
    #[arg(long, value_name = "SECS", default_value = "10", value_parser = flags::secs)]
    pub timeout: Duration,
    /// After each table's first phase (the paper's write, YCSB's load),
    /// hold the written table until FILE exists (at most an hour), then go
    /// on: a window to attack or inspect it from outside (`fabkit
    /// intrude`) before the read-back. Rank 0 watches for the file; it
    /// must not exist yet, and once made it lets every later table go on
    /// at once (Redis rows do not hold). What the services refuse
    /// meanwhile is counted in that phase; its time is not.
    #[arg(long, value_name = "FILE")]
    pub hold: Option<std::path::PathBuf>,
    /// Give ranks on the same node direct access to each other's regions
    /// (shared memory), with libfabric for the rest; atomics are CPU atomics
    /// only when every rank is on this node. The spelling of --path memory.
    #[arg(long)]
    pub shm: bool,
    /// How operations travel to a key's owner: memory (loads and stores
    /// within a node, RMA to other nodes), rma (one-sided operations to
    /// every rank), message (one request per owner and batch, run by the
    /// owner's service thread), or auto: memory within a node; across
    /// nodes RMA where a NIC or the kernel executes every operation the
    /// variant sends, messages where the target's CPU would (`fabkit info`
    /// says which per provider; under MPI, messages need
    /// MPI_THREAD_MULTIPLE).
    #[arg(long, value_name = "PATH", value_parser = flags::path)]
    pub path: Option<fabkit_dht::Path>,
    /// Also write the results as JSON to FILE (`-` for stdout): `{meta:
    /// {command, commit, host, machine, launch, provider, notes}, runs:
    /// [{system, variant, transport, workload, distribution, record, ranks,
    /// batch, depth, phase, ops_per_sec, writes_per_sec, reads_per_sec, latency_us,
    /// cpu_ns_per_op, nominal_cycles_per_op, bytes_per_byte, vs_redis,
    /// counters, hot_key, ...}]}`.
    #[arg(long, value_name = "FILE")]
    pub json: Option<std::path::PathBuf>,
    /// Also write one CSV row per run to FILE (`-` for stdout).
    #[arg(long, value_name = "FILE")]
    pub csv: Option<std::path::PathBuf>,
    /// Run over MPI instead of libfabric (under mpirun): one-sided RMA on a
    /// window of this kind on the rma path (the MPI-DHT's own setting, same
    /// algorithms), point-to-point messages on the message path. `auto`
    /// takes memory on one node and messages across nodes where MPI gives
    /// MPI_THREAD_MULTIPLE: give --path rma to measure MPI windows.
    #[cfg(feature = "mpi")]
    #[arg(long, value_name = "KIND", value_enum)]
    pub mpi: Option<crate::mpiperf::WinArg>,
}

impl DhtArgs {
    /// Operations per rank of a run phase.
    pub fn ops(&self) -> u64 {
        self.ops.unwrap_or(self.keys)
    }
}

pub(super) fn config(a: &DhtArgs, variant: Variant) -> Result<Config> {
    let mut cfg = Config::new(variant);
    cfg.key_len = a.record.key;
    cfg.value_len = a.record.value;
    cfg.buckets = match a.buckets {
        Some(b) => b,
        None => a.keys.checked_mul(2).ok_or_else(|| {
            exit::usage(format!("--keys {} is too many to size a table for", a.keys))
        })?,
    }
    .max(flags::MIN_BUCKETS);
    // The table's sizes come from the command line: a bad one is usage.
    cfg.validate().map_err(|e| match a.buckets {
        Some(_) => exit::usage(format!("{e}")),
        // The user gave --keys, not the buckets it sized.
        None => exit::usage(format!(
            "--keys {} sizes the table at 2 buckets per key: {e}; lower --keys",
            a.keys
        )),
    })?;
    Ok(cfg)
}

/// The workload of `w` for rank `rank` of `ranks`, repetition `rep`.
pub(super) fn spec(
    a: &DhtArgs,
    w: Workload,
    ranks: usize,
    rank: usize,
    rep: u32,
) -> workload::Spec {
    workload::Spec {
        workload: w,
        dist: a.distribution,
        ranks: ranks as u64,
        rank: rank as u64,
        keys: a.keys,
        ops: a.ops(),
        read_pct: a.read_pct,
        zipf_theta: a.zipf_theta,
        zipf_range: a.zipf_range,
        seed: fabkit_dht::placement::mix(a.seed ^ u64::from(rep).rotate_left(40)),
    }
}

/// The distribution `w` runs with.
pub(super) fn dist_of(a: &DhtArgs, w: Workload) -> Dist {
    a.distribution.unwrap_or(w.default_dist())
}

/// Checks what the command line asks of a job of `ranks` ranks, `in_process`
/// of them in this process, before anything is set up: the provider has
/// what the variants need, every variant's table and workload is valid, the
/// records fit the table (or --evict), the keys are distinct in the key
/// length and everything fits in the memory this process may use.
pub fn validate(a: &DhtArgs, ranks: usize, in_process: usize, mpi: bool) -> Result<()> {
    // A --bound that cannot say what it claims fails before the run.
    super::bound::check(&a.bound, ranks, mpi)?;
    if !mpi {
        flags::check_domain(&a.provider, a.domain.as_deref(), fabkit_fabric::Caps::RMA)?;
        if let Some(v) = variants(a).into_iter().find(|v| v.needs_atomics()) {
            flags::check_domain(&a.provider, a.domain.as_deref(), fabkit_fabric::Caps::ALL)
                .map_err(|_| {
                    exit::usage(format!(
                        "the {} variant needs remote atomics, which provider `{}` does not offer \
                         here; use -v lockfree (no atomics) or a provider with atomics (fabkit info)",
                        format!("{v:?}").to_lowercase(),
                        a.provider
                    ))
                })?;
        }
    }
    for v in variants(a) {
        let cfg = config(a, v)?;
        check_memory(a, &cfg, ranks as u64, in_process as u64)?;
        if a.path == Some(fabkit_dht::Path::Message) {
            fabkit_dht::fits_a_message(&cfg).map_err(exit::usage)?;
        }
    }
    for (i, w) in a.workload.iter().enumerate() {
        exit::ensure_usage!(
            !a.workload[..i].contains(w),
            "--workload names {} twice: give each workload once (--reps repeats them)",
            report::name(*w)
        );
    }
    for &w in &a.workload {
        let s = spec(a, w, ranks, 0, 0);
        workload::phases(&s).map_err(exit::usage)?;
        let ids = workload::key_space(&s).ok_or_else(|| {
            exit::usage(format!(
                "{ranks} ranks with --keys {} and --ops {} need more than 2^64 keys; lower them",
                a.keys,
                a.ops()
            ))
        })?;
        check_fit(a, w, ranks as u64)?;
        let len = a.record.key;
        if !workload::keys_fit(len, ids) {
            let longer =
                (len + 1..=8)
                    .find(|&l| workload::keys_fit(l, ids))
                    .map_or(String::new(), |l| {
                        format!(
                            "keys of at least {l} bytes (--record {l},{}) or ",
                            a.record.value
                        )
                    });
            return Err(exit::usage(format!(
                "{len}-byte keys hold {} distinct keys, but {ranks} ranks with --keys {} need \
                 {ids} (the workload's and the hot key); use {longer}fewer --keys",
                1u128 << (8 * len.min(8)),
                a.keys
            )));
        }
    }
    Ok(())
}

/// Refuses a workload that writes more records than the table has
/// buckets, unless --evict allows them to evict each other.
fn check_fit(a: &DhtArgs, w: Workload, ranks: u64) -> Result<()> {
    if a.evict {
        return Ok(());
    }
    let buckets = config(a, Variant::Lockfree)?.buckets;
    let per_rank = match (w, dist_of(a, w)) {
        (Workload::Paper, Dist::Zipf) => a.zipf_range.div_ceil(ranks).min(a.keys),
        // YCSB d inserts about 5 % of its operations.
        (Workload::D, _) => a.keys.saturating_add(a.ops().div_ceil(20)),
        _ => a.keys,
    };
    exit::ensure_usage!(
        per_rank <= buckets,
        "the {} workload writes about {per_rank} records per rank into {buckets} buckets per \
         rank: raise --buckets to at least {per_rank}, lower --keys, or give --evict to let \
         records evict each other",
        report::name(w)
    );
    Ok(())
}

/// Refuses a run whose laid-out operations, with every in-process rank's
/// region, would not fit in this machine's memory or in what this process
/// may map (`ulimit -v`): an allocation that fails aborts, so it is checked
/// before anything is allocated (and the large ones are fallible too).
fn check_memory(a: &DhtArgs, cfg: &Config, ranks: u64, in_process: u64) -> Result<()> {
    let rec = (cfg.key_len as u128) + (cfg.value_len as u128);
    // The largest phase: reading every rank's keys and as many absent ones,
    // or a run phase; each operation lays out a key, a value and two
    // references.
    let ops = (u128::from(a.keys) * (u128::from(ranks) + 1)).max(u128::from(a.ops()));
    let per_rank = ops * (rec + 64) + cfg.region_len() as u128;
    let need = per_rank * u128::from(in_process.max(1));
    if let Some(mem) = flags::physical_memory() {
        ensure_fits(
            a,
            cfg,
            need,
            u128::from(mem),
            "this machine's memory",
            in_process,
        )?;
    }
    if let Some(room) = address_space_left() {
        // Every in-process rank also maps its provider's segments, a thread
        // stack and a malloc arena: about 128 MiB of address space.
        let need = need + u128::from(in_process.max(1)) * (128 << 20);
        ensure_fits(
            a,
            cfg,
            need,
            room,
            "what this process may map (ulimit -v)",
            in_process,
        )?;
    }
    Ok(())
}

fn ensure_fits(
    a: &DhtArgs,
    cfg: &Config,
    need: u128,
    have: u128,
    what: &str,
    n: u64,
) -> Result<()> {
    exit::ensure_usage!(
        need <= have,
        "--keys {} (--ops {}) with --record {},{} and {} buckets per rank need about {need} B \
         ({n} ranks in this process), more than {what}, {have} B; lower --keys, --ops or --buckets",
        a.keys,
        a.ops(),
        cfg.key_len,
        cfg.value_len,
        cfg.buckets
    );
    Ok(())
}

/// Bytes of address space this process may still map under RLIMIT_AS, if
/// it is limited.
fn address_space_left() -> Option<u128> {
    // SAFETY: getrlimit writes one rlimit into the struct we own.
    let lim = unsafe {
        let mut r: libc::rlimit = std::mem::zeroed();
        (libc::getrlimit(libc::RLIMIT_AS, &mut r) == 0).then_some(r)
    }?;
    if lim.rlim_cur == libc::RLIM_INFINITY {
        return None;
    }
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let used_kb: u128 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmSize:"))?
        .trim()
        .trim_end_matches("kB")
        .trim()
        .parse()
        .ok()?;
    Some(u128::from(lim.rlim_cur).saturating_sub(used_kb * 1024))
}

pub fn variants(a: &DhtArgs) -> Vec<Variant> {
    a.variant.variants()
}

impl VariantArg {
    /// The variants this choice names, in the order they run.
    pub fn variants(self) -> Vec<Variant> {
        match self {
            VariantArg::All => vec![
                Variant::Coarse,
                Variant::Fine,
                Variant::Lockfree,
                Variant::Chunked,
            ],
            VariantArg::Coarse => vec![Variant::Coarse],
            VariantArg::Fine => vec![Variant::Fine],
            VariantArg::Lockfree => vec![Variant::Lockfree],
            VariantArg::Chunked => vec![Variant::Chunked],
        }
    }
}
