//! `fabkit dht`: the DHT as an application uses it, as a cache of
//! fixed-size records (POET's 80 B keys and 104 B values by default): every
//! rank writes its share of the keys in batches, then reads all keys back
//! (hits) plus as many absent ones (misses), and the throughput and the
//! DHT's own counters are reported per variant. Then every rank updates
//! one hot key at once, round after round, and reads it back: a round whose
//! key reads torn, foreign or corrupt is counted (and fails the run, except
//! the lock-free variant's corrupt and lost rounds, which it allows).

use std::time::{Duration, Instant};

use anyhow::{ensure, Context, Result};
use clap::{Args, ValueEnum};
use fabkit_dht::{Config, Dht, Read, Stats, Transport, Variant};
use fabkit_fabric::bootstrap::Bootstrap;
use fabkit_fabric::{Rank, RankConfig};
use serde::{Deserialize, Serialize};

use crate::bounds::{self, Record};

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
    /// In-process ranks (ignored under mpirun, where each process is one).
    #[arg(short = 'n', long, default_value = "4", value_parser = bounds::ranks)]
    pub ranks: usize,
    /// Which variant(s).
    #[arg(short, long, value_enum, default_value = "all")]
    pub variant: VariantArg,
    /// Keys written per rank (as many as fit in memory and, distinct, in
    /// the key length).
    #[arg(short, long, default_value = "2000", value_parser = bounds::keys)]
    pub keys: u64,
    /// Buckets per rank (default: keys per rank x 2, a load of 50 %).
    #[arg(long, value_parser = bounds::buckets)]
    pub buckets: Option<u64>,
    /// Keys per batch (read_many / write_many); 1 = one blocking op at a
    /// time, like the MPI-DHT.
    #[arg(short, long, default_value = "64", value_parser = bounds::batch)]
    pub batch: usize,
    /// Key and value lengths in bytes, as KEY,VALUE (each 1 B to 1 MiB).
    #[arg(long, value_name = "KEY,VALUE", default_value = "80,104", value_parser = bounds::record)]
    pub record: Record,
    /// Rounds of the hot-key check: every rank updates one key at once,
    /// then reads it back (0: skip; at most 10^6).
    #[arg(long, default_value = "20", value_parser = bounds::rounds)]
    pub hot_rounds: u64,
    /// Seconds to wait for any one operation before giving up.
    #[arg(long, value_name = "SECS", default_value = "10", value_parser = bounds::secs)]
    pub timeout: Duration,
    /// Give ranks on the same node direct access to each other's regions
    /// (shared memory), with libfabric for the rest; atomics are CPU atomics
    /// only when every rank is on this node.
    #[arg(long)]
    pub shm: bool,
    /// Also write the per-variant results as JSON to FILE (`-` for stdout).
    #[arg(long, value_name = "FILE")]
    pub json: Option<std::path::PathBuf>,
    /// Run over MPI one-sided RMA on a window of this kind instead of
    /// libfabric (under mpirun): the MPI-DHT's own setting, same algorithms.
    #[cfg(feature = "mpi")]
    #[arg(long, value_name = "KIND", value_enum)]
    pub mpi: Option<crate::mpiperf::WinArg>,
}

/// One variant's run, summed over ranks.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct DhtRun {
    /// Variant.
    pub variant: Variant,
    /// Provider.
    pub provider: String,
    /// Ranks.
    pub ranks: usize,
    /// Keys per batch.
    pub batch: usize,
    /// Writes per second (all ranks).
    pub writes_per_sec: f64,
    /// Reads per second (all ranks).
    pub reads_per_sec: f64,
    /// Counters, summed.
    pub stats: Stats,
    /// Written keys that no read found (evicted, or lost to a racing
    /// lock-free writer).
    pub lost: u64,
    /// Reads of absent keys that hit (must be 0).
    pub false_hits: u64,
    /// Hot-key check: rank-rounds run, and those whose read-back was not a
    /// whole value of that round (`hot_foreign`, must be 0), corrupt, or a
    /// miss (both must be 0 but for lockfree, which may lose or tear a
    /// racing write).
    #[serde(default)]
    pub hot: HotKey,
}

/// The hot-key check's counts, summed over ranks.
#[derive(Debug, Clone, Copy, Default, Serialize, Deserialize, PartialEq, Eq)]
pub struct HotKey {
    /// Reads of the hot key (ranks x rounds).
    pub reads: u64,
    /// Hits that were not a whole value written in that round.
    pub foreign: u64,
    /// Reads reported corrupt.
    pub corrupt: u64,
    /// Reads that missed.
    pub missing: u64,
}

impl HotKey {
    /// Whether `variant` kept its promise under the hot key.
    pub fn sound(&self, variant: Variant) -> bool {
        self.foreign == 0 && (variant == Variant::Lockfree || self.corrupt + self.missing == 0)
    }
}

/// The value rank `writer` writes to the hot key `k` in `round`: every byte
/// depends on all three, so a mix of two writes is not any of them.
fn hot_value(k: &[u8], writer: u64, round: u64, len: usize) -> Vec<u8> {
    stream(
        fabkit_dht::placement::hash_key(k) ^ writer.rotate_left(32) ^ round,
        len,
    )
}

/// Every rank writes the hot key at once, then every rank reads it.
fn hot_key<T: Transport>(
    d: &Dht<T>,
    a: &DhtArgs,
    klen: usize,
    vlen: usize,
    boot: &dyn Bootstrap,
) -> Result<HotKey> {
    let (me, n) = (boot.rank() as u64, boot.size() as u64);
    let k = Keys::new(a, n, klen)?.hot();
    let mut hot = HotKey::default();
    for round in 0..a.hot_rounds {
        boot.barrier()?;
        d.write(&k, &hot_value(&k, me, round, vlen))?;
        boot.barrier()?;
        hot.reads += 1;
        match d.read(&k)? {
            Read::Hit(v) => {
                hot.foreign += u64::from(!(0..n).any(|w| v == hot_value(&k, w, round, vlen)));
            }
            Read::Corrupt => hot.corrupt += 1,
            Read::Miss => hot.missing += 1,
        }
    }
    Ok(hot)
}

/// The keys a run writes and looks up: each rank's written keys, as many
/// absent ones, and the hot key, all distinct. A key is its number in
/// big-endian in the first min(key length, 8) bytes, then `#`s, so a key of
/// any length down to 1 byte holds as many distinct keys as it can.
#[derive(Clone, Copy, Debug)]
struct Keys {
    len: usize,
    per_rank: u64,
    ranks: u64,
}

impl Keys {
    /// The keys of a job of `ranks` ranks; refuses a key length that cannot
    /// hold them all distinct.
    fn new(a: &DhtArgs, ranks: u64, len: usize) -> Result<Keys> {
        let k = Keys {
            len,
            per_rank: a.keys,
            ranks,
        };
        // Written and absent keys of every rank, and the hot key.
        let needed = ranks
            .checked_mul(a.keys)
            .and_then(|x| x.checked_mul(2))
            .and_then(|x| x.checked_add(1));
        let room = |len: usize| 1u128 << (8 * len.min(8));
        let fits = |len: usize| needed.is_some_and(|n| u128::from(n) <= room(len));
        if !fits(len) {
            // Every key count a u64 holds fits in 8 bytes; past that, only
            // fewer keys help.
            let need = needed.map_or("more than 2^64".to_string(), |n| n.to_string());
            let longer = (len + 1..=8).find(|&l| fits(l)).map_or(String::new(), |l| {
                format!(
                    "keys of at least {l} bytes (--record {l},{}) or ",
                    a.record.value
                )
            });
            return Err(bounds::usage(format!(
                "{len}-byte keys hold {} distinct keys, but {ranks} ranks with --keys {} need \
                 {need} (written and absent per rank, and the hot key); use {longer}fewer --keys",
                room(len),
                a.keys
            )));
        }
        Ok(k)
    }

    fn make(&self, id: u64) -> Vec<u8> {
        let w = self.len.min(8);
        let mut k = id.to_be_bytes()[8 - w..].to_vec();
        k.resize(self.len, b'#');
        k
    }

    /// Key `i` that rank `rank` writes.
    fn written(&self, rank: u64, i: u64) -> Vec<u8> {
        self.make(rank * self.per_rank + i)
    }

    /// Key `i` of rank `rank`'s absent keys, which nobody writes.
    fn absent(&self, rank: u64, i: u64) -> Vec<u8> {
        self.make((self.ranks + rank) * self.per_rank + i)
    }

    /// The key every rank updates at once.
    fn hot(&self) -> Vec<u8> {
        self.make(2 * self.ranks * self.per_rank)
    }
}

fn value(k: &[u8], len: usize) -> Vec<u8> {
    stream(fabkit_dht::placement::hash_key(k), len)
}

/// `len` bytes drawn from `seed`: the same seed, the same bytes.
fn stream(mut x: u64, len: usize) -> Vec<u8> {
    (0..len)
        .map(|_| {
            x = fabkit_dht::placement::mix(x);
            x as u8
        })
        .collect()
}

/// Every rank's pair of u64s.
fn gather(boot: &dyn Bootstrap, mine: [u64; 2]) -> Result<Vec<[u64; 2]>> {
    let all = boot.allgather(&[mine[0].to_le_bytes(), mine[1].to_le_bytes()].concat())?;
    Ok(all
        .iter()
        .map(|b| {
            let w = |i: usize| u64::from_le_bytes(b[i * 8..i * 8 + 8].try_into().unwrap());
            [w(0), w(1)]
        })
        .collect())
}

fn config(a: &DhtArgs, variant: Variant) -> Result<Config> {
    let mut cfg = Config::new(variant);
    cfg.key_len = a.record.key;
    cfg.value_len = a.record.value;
    cfg.buckets = match a.buckets {
        Some(b) => b,
        None => a.keys.checked_mul(2).ok_or_else(|| {
            bounds::usage(format!("--keys {} is too many to size a table for", a.keys))
        })?,
    }
    .max(bounds::MIN_BUCKETS);
    // The table's sizes come from the command line: a bad one is usage.
    cfg.validate().map_err(|e| match a.buckets {
        Some(_) => bounds::usage(format!("{e}")),
        // The user gave --keys, not the buckets it sized.
        None => bounds::usage(format!(
            "--keys {} sizes the table at 2 buckets per key: {e}; lower --keys",
            a.keys
        )),
    })?;
    Ok(cfg)
}

/// Checks what the command line asks of a job of `ranks` ranks, `in_process`
/// of them in this process, before anything is set up: every variant's
/// table, the memory it needs and keys distinct in the key length.
pub fn validate(a: &DhtArgs, ranks: usize, in_process: usize) -> Result<()> {
    let caps = fabkit_fabric::Caps::ALL;
    bounds::check_domain(&a.provider, a.domain.as_deref(), caps)?;
    for v in variants(a) {
        let cfg = config(a, v)?;
        check_memory(a, &cfg, in_process as u64)?;
    }
    Keys::new(a, ranks as u64, a.record.key).map(|_| ())
}

/// Refuses a run whose generated keys and values, with every in-process
/// rank's region, would not fit in this machine's memory: allocation
/// failure aborts, so it is checked before anything is allocated.
fn check_memory(a: &DhtArgs, cfg: &Config, in_process: u64) -> Result<()> {
    let Some(mem) = bounds::physical_memory() else {
        return Ok(());
    };
    // Each rank holds its written keys and values, one batch of others',
    // and its region; in-process ranks share this machine.
    let per_key = (cfg.key_len as u128) + (cfg.value_len as u128) + 64;
    let need =
        (u128::from(a.keys) * per_key + cfg.region_len() as u128) * u128::from(in_process.max(1));
    if need > u128::from(mem) {
        return Err(bounds::usage(format!(
            "--keys {} with --record {},{} and {} buckets per rank need about {need} B \
             ({in_process} in-process ranks), more than this machine's {mem} B of memory; \
             lower --keys or --buckets",
            a.keys, cfg.key_len, cfg.value_len, cfg.buckets
        )));
    }
    Ok(())
}

fn rank_config(a: &DhtArgs, cfg: &Config) -> RankConfig {
    let mut rc = RankConfig::new(a.provider.clone());
    rc.domain = a.domain.clone();
    rc.region_len = cfg.region_len();
    rc.atomics = cfg.variant.needs_atomics();
    rc.timeout = a.timeout;
    rc.window = a.batch.clamp(1, 256);
    rc
}

fn fabric_transport(a: &DhtArgs, cfg: &Config, boot: &dyn Bootstrap) -> Result<Rank> {
    Rank::establish(rank_config(a, cfg), boot)
        .with_context(|| format!("setting up `{}`", a.provider))
}

fn run_variant<T: Transport>(
    a: &DhtArgs,
    cfg: Config,
    t: T,
    boot: &dyn Bootstrap,
) -> Result<(DhtRun, T)> {
    let (klen, vlen) = (cfg.key_len, cfg.value_len);
    let variant = cfg.variant;
    let n = boot.size() as u64;
    let keys = Keys::new(a, n, klen)?;
    let provider = t.name();
    let d = Dht::create(t, cfg, boot)?;
    let me = boot.rank() as u64;

    let mine: Vec<Vec<u8>> = (0..a.keys).map(|i| keys.written(me, i)).collect();
    let vals: Vec<Vec<u8>> = mine.iter().map(|k| value(k, vlen)).collect();
    boot.barrier()?;
    let t = Instant::now();
    for (ks, vs) in mine.chunks(a.batch).zip(vals.chunks(a.batch)) {
        let items: Vec<(&[u8], &[u8])> = ks.iter().zip(vs).map(|(k, v)| (&k[..], &v[..])).collect();
        d.write_many(&items)?;
    }
    let wsecs = t.elapsed().as_secs_f64();
    boot.barrier()?;
    // Read everyone's keys (hits expected) and as many absent ones.
    let (mut lost, mut false_hits) = (0u64, 0u64);
    let t = Instant::now();
    for r in 0..n {
        let present: Vec<Vec<u8>> = (0..a.keys).map(|i| keys.written((me + r) % n, i)).collect();
        for ks in present.chunks(a.batch) {
            let refs: Vec<&[u8]> = ks.iter().map(|k| &k[..]).collect();
            for (k, got) in ks.iter().zip(d.read_many(&refs)?) {
                match got {
                    Read::Hit(v) => ensure!(v == value(k, vlen), "a wrong value for a key"),
                    _ => lost += 1,
                }
            }
        }
    }
    let absent: Vec<Vec<u8>> = (0..a.keys).map(|i| keys.absent(me, i)).collect();
    for ks in absent.chunks(a.batch) {
        let refs: Vec<&[u8]> = ks.iter().map(|k| &k[..]).collect();
        false_hits += d
            .read_many(&refs)?
            .iter()
            .filter(|r| matches!(r, Read::Hit(_)))
            .count() as u64;
    }
    let rsecs = t.elapsed().as_secs_f64();
    boot.barrier()?;
    let stats = d.stats_all(boot)?;
    // Slowest rank's times decide the job's rate; counts add up.
    let times = gather(boot, [wsecs.to_bits(), rsecs.to_bits()])?;
    let slow = |i: usize| {
        times
            .iter()
            .map(|t| f64::from_bits(t[i]))
            .fold(0.0, f64::max)
    };
    let counts = gather(boot, [lost, false_hits])?;
    let sum = |i: usize| -> u64 { counts.iter().map(|c| c[i]).sum() };
    let mine = hot_key(&d, a, klen, vlen, boot)?;
    let (reads, bad) = (
        gather(boot, [mine.reads, mine.foreign])?,
        gather(boot, [mine.corrupt, mine.missing])?,
    );
    let hot = HotKey {
        reads: reads.iter().map(|c| c[0]).sum(),
        foreign: reads.iter().map(|c| c[1]).sum(),
        corrupt: bad.iter().map(|c| c[0]).sum(),
        missing: bad.iter().map(|c| c[1]).sum(),
    };
    let t = d.free(boot)?;
    let run = DhtRun {
        variant,
        provider,
        ranks: n as usize,
        batch: a.batch,
        // As floats: the counts only feed rates (n x keys fits u64, n x keys
        // x (n + 1) need not).
        writes_per_sec: n as f64 * a.keys as f64 / slow(0),
        reads_per_sec: n as f64 * a.keys as f64 * (n + 1) as f64 / slow(1),
        stats,
        // Every rank reads every key: count each missing key once.
        lost: sum(0) / n,
        false_hits: sum(1),
        hot,
    };
    Ok((run, t))
}

fn variants(a: &DhtArgs) -> Vec<Variant> {
    match a.variant {
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

/// Runs the chosen variants on this rank over libfabric.
pub fn run_rank(a: &DhtArgs, boot: &dyn Bootstrap) -> Result<Vec<DhtRun>> {
    ensure!(
        a.keys > 0 && a.batch > 0,
        "--keys and --batch must be at least 1"
    );
    variants(a)
        .into_iter()
        .map(|v| {
            let cfg = config(a, v)?;
            if a.shm {
                let t =
                    fabkit_dht::transport::shm::ShmTransport::establish(rank_config(a, &cfg), boot)
                        .with_context(|| {
                            format!(
                                "setting up `{}` with the shared-memory shortcut",
                                a.provider
                            )
                        })?;
                let (run, t) = run_variant(a, cfg, t, boot)?;
                t.finish(boot)?;
                return Ok(run);
            }
            let rank = fabric_transport(a, &cfg, boot)?;
            let (run, rank) = run_variant(a, cfg, rank, boot)?;
            rank.finish(boot)?;
            Ok(run)
        })
        .collect()
}

/// How long a rank waits for the others at a phase barrier: a rank may be
/// a whole phase behind, each batch of a phase may take up to --timeout, and
/// the longest phase (reading every rank's keys, then as many absent ones)
/// has (ranks + 1) x ceil(keys / batch) batches; plus one --timeout for the
/// exchange itself. Saturates rather than overflows, and is capped at
/// [`MAX_PHASE_WAIT`] (or --timeout, if longer): the product grew to
/// thousands of seconds for a rank that was merely stopped (`-k 2000 -b 1`)
/// and to centuries for a million keys.
pub fn phase_bound(a: &DhtArgs, ranks: usize) -> Duration {
    let batches = a
        .keys
        .div_ceil(a.batch.max(1) as u64)
        .saturating_mul(ranks as u64 + 1)
        .saturating_add(1);
    a.timeout
        .saturating_mul(u32::try_from(batches).unwrap_or(u32::MAX))
        .min(a.timeout.max(MAX_PHASE_WAIT))
}

/// The longest a rank waits for the others at a phase barrier unless
/// --timeout is longer: an hour, as `perf`'s idle ranks wait for a size.
pub const MAX_PHASE_WAIT: Duration = Duration::from_secs(3600);

/// Runs the chosen variants on this rank over MPI windows.
#[cfg(feature = "mpi")]
pub fn run_rank_mpi(
    a: &DhtArgs,
    kind: fabkit_fabric::mpi_rma::WindowKind,
    boot: &fabkit_fabric::bootstrap::MpiBootstrap,
) -> Result<Vec<DhtRun>> {
    use fabkit_dht::transport::mpi::MpiTransport;
    ensure!(
        a.keys > 0 && a.batch > 0,
        "--keys and --batch must be at least 1"
    );
    variants(a)
        .into_iter()
        .map(|v| {
            let cfg = config(a, v)?;
            // Coarse locks each target's window per operation (MPI_Win_lock);
            // the others share one lock_all epoch.
            let t = MpiTransport::new(boot, cfg.region_len(), kind, v == Variant::Coarse)?;
            let (run, t) = run_variant(a, cfg, t, boot)?;
            t.free()?; // MPI_Win_free: collective, every rank here
            Ok(run)
        })
        .collect()
}

/// The hot-key column: `good/reads`, and the bad kinds if any.
fn hot_cell(h: &HotKey) -> String {
    if h.reads == 0 {
        return "-".into();
    }
    let good = h.reads - h.foreign - h.corrupt - h.missing;
    let mut c = format!("{good}/{}", h.reads);
    for (n, tag) in [(h.foreign, 'f'), (h.corrupt, 'c'), (h.missing, 'm')] {
        if n > 0 {
            c.push_str(&format!(" {n}{tag}"));
        }
    }
    c
}

/// Prints the results as a table; returns whether the runs were sound (no
/// wrong value, no false hit, the hot key kept within its variant's promise).
pub fn print(runs: &[DhtRun], launch: &str) -> bool {
    let Some(first) = runs.first() else {
        return true;
    };
    println!(
        "fabkit dht: provider {}, {launch}, batch {}",
        first.provider, first.batch
    );
    println!(
        "{:<9} {:>12} {:>12} {:>8} {:>7} {:>9} {:>8} {:>9} {:>8} {:>10} {:>12}",
        "variant",
        "writes/s",
        "reads/s",
        "hits",
        "lost",
        "evicted",
        "retries",
        "lockwait",
        "corrupt",
        "ops/op",
        "hot-key"
    );
    let mut ok = true;
    for r in runs {
        let s = &r.stats;
        println!(
            "{:<9} {:>12.0} {:>12.0} {:>8} {:>7} {:>9} {:>8} {:>9} {:>8} {:>10.2} {:>12}",
            format!("{:?}", r.variant).to_lowercase(),
            r.writes_per_sec,
            r.reads_per_sec,
            s.hits,
            r.lost,
            s.evictions,
            s.checksum_retries,
            s.lock_retries,
            s.corrupt,
            s.ops_per_op(),
            hot_cell(&r.hot)
        );
        ok &= r.false_hits == 0 && r.hot.sound(r.variant);
    }
    println!(
        "lost: written keys not found (evicted, or a lock-free insert lost to a racing writer)"
    );
    println!(
        "hot-key: reads of one key every rank updates at once that were whole values of their \
         round, of all (then f: foreign, c: corrupt, m: missing)"
    );
    ok
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct Cmd {
        #[command(flatten)]
        a: DhtArgs,
    }

    fn args(extra: &[&str]) -> DhtArgs {
        Cmd::parse_from(["dht"].iter().chain(extra)).a
    }

    #[test]
    fn the_phase_barrier_waits_at_most_an_hour_unless_the_timeout_is_longer() {
        let s = Duration::from_secs;
        // 2000 batches x 3 ranks' worth: 6001 s before, an hour now.
        let a = args(&["--timeout", "1", "-k", "2000", "-b", "1"]);
        assert_eq!(phase_bound(&a, 2), MAX_PHASE_WAIT);
        // Saturated to centuries before.
        let a = args(&["--timeout", "1", "-k", "1000000", "-b", "1"]);
        assert_eq!(phase_bound(&a, 2), MAX_PHASE_WAIT);
        // Short phases keep their own bound: (2 + 1) x 1 batch + 1.
        let a = args(&["--timeout", "2", "-k", "10", "-b", "10"]);
        assert_eq!(phase_bound(&a, 2), s(8));
        // A timeout longer than the cap is kept.
        let a = args(&["--timeout", "7200", "-k", "10", "-b", "1"]);
        assert_eq!(phase_bound(&a, 2), s(7200));
    }
}
