//! `fabkit check`: does RMA and every u64 atomic work between these ranks on
//! this provider? Each rank checks every peer byte for byte and value for
//! value, then all ranks race on shared words.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::{bail, ensure, Context, Result};
use fabkit_core::{Bootstrap, Completion, Op, Remote};
use fabkit_fabric::{Rank, RankConfig};
use serde::{Deserialize, Serialize};

use crate::launch::Launch;
pub use crate::Over;

/// What the checks run against: anything that executes batches of one-sided
/// operations on a job's ranks (a fabric [`Rank`], or an MPI window).
pub trait Rma {
    /// This rank.
    fn me(&self) -> usize;
    /// Number of ranks.
    fn ranks(&self) -> usize;
    /// Executes a batch; returns when all completed.
    fn run(&self, ops: &mut [Op<'_>]) -> Result<()>;

    /// One write.
    fn write(&self, to: Remote, data: &[u8]) -> Result<()> {
        self.run(&mut [Op::Write {
            to,
            from: data,
            completion: Completion::Transmit,
        }])
    }
    /// One read.
    fn read(&self, from: Remote, into: &mut [u8]) -> Result<()> {
        self.run(&mut [Op::Read { from, into }])
    }
    /// One atomic; returns the u64 it reports.
    fn atomic(&self, make: &dyn Fn(&mut u64) -> Op<'_>) -> Result<u64> {
        let mut out = 0;
        self.run(&mut [make(&mut out)])?;
        Ok(out)
    }
}

impl Rma for Rank {
    fn me(&self) -> usize {
        self.rank()
    }
    fn ranks(&self) -> usize {
        Rank::ranks(self)
    }
    fn run(&self, ops: &mut [Op<'_>]) -> Result<()> {
        Ok(self.execute(ops)?)
    }
}

fn fetch(r: &dyn Rma, at: Remote) -> Result<u64> {
    r.atomic(&|value| Op::Fetch { at, value })
}
fn swap(r: &dyn Rma, at: Remote, new: u64) -> Result<u64> {
    r.atomic(&|old| Op::Swap { at, new, old })
}
fn fetch_add(r: &dyn Rma, at: Remote, delta: u64) -> Result<u64> {
    r.atomic(&|old| Op::FetchAdd { at, delta, old })
}
fn cas(r: &dyn Rma, at: Remote, expected: u64, new: u64) -> Result<u64> {
    r.atomic(&|old| Op::CompareAndSwap {
        at,
        expected,
        new,
        old,
    })
}

/// Transfer sizes checked: single bytes, the DHT's 184 B records, a page,
/// and one larger than a typical staging chunk.
pub const SIZES: &[usize] = &[1, 8, 184, 4096, 65_536, 1 << 20];
/// Fetch-adds each rank makes on the shared counter.
const ADDS_PER_RANK: u64 = 500;

/// One rank's view of the check.
#[derive(Debug, Serialize, Deserialize)]
pub struct RankReport {
    /// Rank number.
    pub rank: usize,
    /// What carried the operations: libfabric or an MPI window.
    #[serde(default)]
    pub over: Over,
    /// Provider in use.
    pub provider: String,
    /// Domain in use.
    pub domain: String,
    /// Whether a progress thread runs.
    pub progress_thread: bool,
    /// Whether waits block on a CQ wait object (else: poll with naps).
    pub waits_block: bool,
    /// Checks with their outcome.
    pub checks: Vec<CheckOutcome>,
}

/// What `fabkit check --json` writes per provider (an array of them):
/// its fields in the order the file has always had them.
#[derive(Debug, Serialize, Deserialize)]
pub struct Checked {
    /// Whether every check of every rank passed.
    pub ok: bool,
    /// The provider asked for (`mpi` for MPI windows).
    pub provider: String,
    /// Ranks that checked.
    pub ranks: usize,
    /// Every rank's view.
    pub reports: Vec<RankReport>,
}

impl Checked {
    /// The checks of `provider` by every rank.
    pub fn new(provider: &str, reports: Vec<RankReport>) -> Checked {
        Checked {
            ok: reports.iter().all(|r| r.checks.iter().all(|c| c.ok)),
            provider: provider.to_string(),
            ranks: reports.len(),
            reports,
        }
    }
}

/// One named check.
#[derive(Debug, Serialize, Deserialize)]
pub struct CheckOutcome {
    /// What was checked.
    pub name: String,
    /// Passed?
    pub ok: bool,
    /// Detail (counts, or what went wrong).
    pub detail: String,
    /// Wall time of the check on this rank, in milliseconds.
    pub millis: f64,
}

/// Byte `i` of the block rank `from` writes to rank `to`.
fn pattern(from: usize, to: usize, i: usize) -> u8 {
    (i.wrapping_mul(131) ^ (from * 17 + to * 5 + 1)) as u8
}

/// Region layout: a block per writer rank for data, then a words area.
fn block_len() -> usize {
    SIZES.iter().map(|s| s.next_multiple_of(64)).sum()
}

/// Region size needed for `ranks` ranks.
pub fn region_len(ranks: usize) -> usize {
    block_len() * ranks + 4096
}

fn words_base(ranks: usize) -> u64 {
    (block_len() * ranks) as u64
}

fn timed(name: &str, f: impl FnOnce() -> Result<String>) -> CheckOutcome {
    let t = Instant::now();
    let (ok, detail) = match f() {
        Ok(d) => (true, d),
        Err(e) => (false, format!("{e:#}")),
    };
    CheckOutcome {
        name: name.into(),
        ok,
        detail,
        millis: t.elapsed().as_secs_f64() * 1e3,
    }
}

fn rma_every_peer(r: &dyn Rma) -> Result<String> {
    let n = r.ranks();
    let mut transfers = 0;
    for peer in 0..n {
        let mut off = (block_len() * r.me()) as u64;
        for &len in SIZES {
            let data: Vec<u8> = (0..len).map(|i| pattern(r.me(), peer, i)).collect();
            r.write(Remote::new(peer, off), &data)
                .with_context(|| format!("write {len} B to rank {peer}"))?;
            let mut back = vec![0u8; len];
            r.read(Remote::new(peer, off), &mut back)
                .with_context(|| format!("read {len} B from rank {peer}"))?;
            if let Some(i) = (0..len).find(|&i| back[i] != data[i]) {
                bail!(
                    "{len} B read back from rank {peer} differs at byte {i}: {:#04x} != {:#04x}",
                    back[i],
                    data[i]
                );
            }
            off += len.next_multiple_of(64) as u64;
            transfers += 2;
        }
    }
    Ok(format!("{transfers} transfers of 1 B..1 MiB, every peer"))
}

fn atomics_every_peer(r: &dyn Rma) -> Result<String> {
    let n = r.ranks();
    for peer in 0..n {
        // Word private to this (writer, target) pair.
        let w = Remote::new(peer, words_base(n) + 64 + 8 * r.me() as u64);
        let expect = |what: &str, got: u64, want: u64| -> Result<()> {
            ensure!(
                got == want,
                "{what} on rank {peer}: got {got}, expected {want}"
            );
            Ok(())
        };
        expect("fetch of a fresh word", fetch(r, w)?, 0)?;
        expect("swap", swap(r, w, 40)?, 0)?;
        expect("fetch-add", fetch_add(r, w, 2)?, 40)?;
        expect("failing compare-and-swap", cas(r, w, 1, 99)?, 42)?;
        expect("fetch after failing CAS", fetch(r, w)?, 42)?;
        expect("succeeding compare-and-swap", cas(r, w, 42, 7)?, 42)?;
        expect("fetch after CAS", fetch(r, w)?, 7)?;
    }
    Ok(format!("fetch, swap, fetch-add, CAS on {n} ranks"))
}

fn counter_race(r: &dyn Rma, boot: &dyn Bootstrap) -> Result<String> {
    let n = r.ranks();
    let counter = Remote::new(n - 1, words_base(n));
    let mut olds = vec![0u64; ADDS_PER_RANK as usize];
    let mut ops: Vec<Op> = olds
        .iter_mut()
        .map(|o| Op::FetchAdd {
            at: counter,
            delta: 1,
            old: o,
        })
        .collect();
    r.run(&mut ops)?;
    drop(ops);
    olds.sort_unstable();
    olds.dedup();
    ensure!(
        olds.len() == ADDS_PER_RANK as usize,
        "two fetch-adds returned the same old value: adds are not atomic"
    );
    boot.barrier()?;
    let total = fetch(r, counter)?;
    let want = n as u64 * ADDS_PER_RANK;
    ensure!(total == want, "counter is {total} after {want} fetch-adds");
    Ok(format!("{want} concurrent fetch-adds, exact sum"))
}

fn cas_race(r: &dyn Rma, boot: &dyn Bootstrap) -> Result<String> {
    let n = r.ranks();
    let word = Remote::new(0, words_base(n) + 8);
    let mine = r.me() as u64 + 1;
    let old = cas(r, word, 0, mine)?;
    let all = boot.allgather(&old.to_le_bytes())?;
    // A rank whose earlier check failed may be at another exchange: its
    // contribution is then not 8 bytes, which is an error, not a panic.
    let olds: Vec<u64> = all
        .iter()
        .enumerate()
        .map(|(i, b)| {
            b.as_slice()
                .try_into()
                .map(u64::from_le_bytes)
                .map_err(|_| {
                    anyhow::anyhow!("rank {i} is out of step (an earlier check failed there)")
                })
        })
        .collect::<Result<_>>()?;
    let winners: Vec<usize> = (0..n).filter(|&i| olds[i] == 0).collect();
    ensure!(
        winners.len() == 1,
        "{} ranks won the same CAS: {winners:?}",
        winners.len()
    );
    let w = winners[0] as u64 + 1;
    ensure!(
        olds.iter().all(|&o| o == 0 || o == w),
        "losers saw values other than the winner's: {olds:?}"
    );
    Ok(format!("one winner (rank {}) of {n}", winners[0]))
}

/// Runs every check on this rank, against `r`.
fn run_checks(r: &dyn Rma, boot: &dyn Bootstrap) -> Result<Vec<CheckOutcome>> {
    let mut checks = vec![
        timed("write + read back", || rma_every_peer(r)),
        timed("u64 atomics", || atomics_every_peer(r)),
    ];
    // The races are collective: every rank must reach them.
    boot.barrier()?;
    checks.push(timed("fetch-add race", || counter_race(r, boot)));
    checks.push(timed("compare-and-swap race", || cas_race(r, boot)));
    Ok(checks)
}

/// Runs every check on this rank over libfabric.
pub fn run_rank(cfg: RankConfig, boot: &dyn Bootstrap) -> Result<RankReport> {
    let provider = cfg.provider.clone();
    let r = Rank::establish(cfg, boot).with_context(|| format!("setting up `{provider}`"))?;
    let checks = run_checks(&r, boot)?;
    let report = RankReport {
        rank: r.rank(),
        over: Over::Fabric,
        provider: r.info().provider(),
        domain: r.info().domain_name(),
        progress_thread: r.has_progress_thread(),
        waits_block: r.waits_block(),
        checks,
    };
    r.finish(boot)?;
    Ok(report)
}

#[cfg(feature = "mpi")]
mod over_mpi {
    use std::cell::RefCell;

    use super::*;
    use fabkit_mpi::window::{Sync, Window, WindowKind};
    use fabkit_mpi::MpiBootstrap;

    struct MpiRma<'env> {
        win: RefCell<Window<'env>>,
        me: usize,
        ranks: usize,
    }

    impl Rma for MpiRma<'_> {
        fn me(&self) -> usize {
            self.me
        }
        fn ranks(&self) -> usize {
            self.ranks
        }
        fn run(&self, ops: &mut [Op<'_>]) -> Result<()> {
            Ok(self.win.borrow_mut().execute(Sync::LockAll, ops)?)
        }
    }

    /// Runs every check on this rank over an MPI window (lock_all + flush).
    pub fn run_rank_mpi(kind: WindowKind, boot: &MpiBootstrap) -> Result<RankReport> {
        let n = boot.size();
        let win = Window::new(boot, region_len(n), kind)?;
        let r = MpiRma {
            win: RefCell::new(win),
            me: boot.rank(),
            ranks: n,
        };
        let checks = run_checks(&r, boot)?;
        let rank = r.me;
        // Collective: ends the epoch, meets the other ranks (bounded), frees.
        r.win.into_inner().free()?;
        Ok(RankReport {
            rank,
            over: Over::Mpi,
            provider: format!("mpi osc={}", crate::mpiperf::osc_in_force()),
            domain: format!("{kind:?} window").to_lowercase(),
            progress_thread: false,
            waits_block: false,
            checks,
        })
    }
}

#[cfg(feature = "mpi")]
pub use over_mpi::run_rank_mpi;

/// The configuration `check` uses for `provider` and `ranks`.
pub fn config(
    provider: &str,
    domain: Option<String>,
    ranks: usize,
    timeout: Duration,
) -> RankConfig {
    let mut cfg = RankConfig::new(provider);
    cfg.domain = domain;
    cfg.region_len = region_len(ranks);
    cfg.timeout = timeout;
    cfg
}

/// Prints the human summary; returns whether everything passed.
pub fn print_summary(reports: &[RankReport], launch: &str) -> bool {
    let first = &reports[0];
    let how = if first.over == Over::Mpi {
        String::new()
    } else {
        format!(
            "; progress thread: {}; waits: {}",
            if first.progress_thread { "yes" } else { "no" },
            if first.waits_block {
                "block on CQ"
            } else {
                "poll with naps"
            }
        )
    };
    println!(
        "fabkit check: {} on {}, {launch}{how}",
        first.provider, first.domain
    );
    let mut all_ok = true;
    for (i, c) in first.checks.iter().enumerate() {
        let failed: Vec<(usize, &CheckOutcome)> = reports
            .iter()
            .map(|r| (r.rank, &r.checks[i]))
            .filter(|(_, c)| !c.ok)
            .collect();
        let slowest = reports
            .iter()
            .map(|r| r.checks[i].millis)
            .fold(0.0, f64::max);
        if failed.is_empty() {
            println!("  {:<24} ok    {:>9.2} ms  {}", c.name, slowest, c.detail);
        } else {
            all_ok = false;
            println!("  {:<24} FAIL  {:>9.2} ms", c.name, slowest);
            for (rank, c) in failed {
                println!("      rank {rank}: {}", c.detail);
            }
        }
    }
    println!("{}", if all_ok { "PASS" } else { "FAIL" });
    all_ok
}

/// `fabkit check`'s arguments.
#[derive(clap::Args, Debug)]
pub struct CheckArgs {
    /// libfabric provider; repeat to check several. See `fabkit info`.
    #[arg(short, long = "provider", default_value = "shm")]
    pub providers: Vec<String>,
    /// Domain: interface (lo, eth0) for socket providers, device (mlx5_0)
    /// for verbs, or a network the ranks share (10.77.1.0/24: the interface
    /// with an address in it). Default: chosen, `lo` when all ranks share a host.
    #[arg(short, long)]
    pub domain: Option<String>,
    /// In-process ranks (ignored under mpirun/srun, where each process is one).
    #[arg(short = 'n', long, default_value = "2", value_parser = crate::flags::ranks)]
    pub ranks: usize,
    /// Seconds to wait for any one operation or peer before giving up.
    #[arg(long, value_name = "SECS", default_value = "10", value_parser = crate::flags::secs)]
    pub timeout: Duration,
    /// Also write the full per-rank report as JSON to FILE (`-` for stdout).
    #[arg(long, value_name = "FILE")]
    pub json: Option<PathBuf>,
    /// Check MPI one-sided RMA (MPI_Put/Get/Compare_and_swap/Fetch_and_op on
    /// a window of this kind, lock_all + flush) instead of libfabric. Under
    /// mpirun only.
    #[cfg(feature = "mpi")]
    #[arg(long, value_name = "KIND", value_enum)]
    pub mpi: Option<crate::mpiperf::WinArg>,
}

/// `fabkit check`: every check on every provider asked for (or over MPI
/// windows); whether every check passed.
pub fn command(args: &CheckArgs) -> Result<bool> {
    let launch = Launch::detect(args.ranks)?;
    let to = args.timeout;
    let mut all_ok = true;
    let mut json = Vec::new();
    #[cfg(feature = "mpi")]
    let mpi_kind = args.mpi.map(fabkit_mpi::window::WindowKind::from);
    #[cfg(not(feature = "mpi"))]
    let mpi_kind: Option<()> = None;
    let providers = if mpi_kind.is_some() {
        vec!["mpi".to_string()]
    } else {
        args.providers.clone()
    };
    // Every provider and domain is checked before any runs, so a bad one
    // does not end the command after others' results were measured.
    if mpi_kind.is_none() {
        for prov in &providers {
            let caps = fabkit_fabric::Caps::RMA;
            crate::flags::check_domain(prov, args.domain.as_deref(), caps)?;
        }
    }
    for prov in &providers {
        let provider = prov.clone();
        let domain = args.domain.clone();
        let reports = match (&launch, mpi_kind) {
            #[cfg(feature = "mpi")]
            (Launch::Mpi(boot), Some(kind)) => {
                boot.set_timeout(to);
                crate::launch::run_mpi(boot, |b| run_rank_mpi(kind, b))?
            }
            (_, Some(_)) => {
                return Err(crate::exit::usage(
                    "--mpi checks MPI one-sided RMA and runs under an MPI launcher: \
                     mpirun -n 2 fabkit check --mpi allocate",
                ))
            }
            (_, None) => launch.run(to, |boot| {
                let cfg = config(&provider, domain.clone(), boot.size(), to);
                run_rank(cfg, boot)
            })?,
        };
        let Some(reports) = reports else { continue };
        all_ok &= print_summary(&reports, &launch.describe(reports.len()));
        json.push(Checked::new(prov, reports));
    }
    if let (Some(path), false) = (&args.json, json.is_empty()) {
        crate::output::write_out(path, &(serde_json::to_string_pretty(&json)? + "\n"))?;
    }
    Ok(all_ok)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every key `fabkit check --json` writes, as it is spelled: a field
    /// renamed or dropped fails here (new ones are added to the list).
    const JSON_KEYS: &[&str] = &[
        "[].ok",
        "[].provider",
        "[].ranks",
        "[].reports",
        "[].reports[].checks",
        "[].reports[].checks[].detail",
        "[].reports[].checks[].millis",
        "[].reports[].checks[].name",
        "[].reports[].checks[].ok",
        "[].reports[].domain",
        "[].reports[].over",
        "[].reports[].progress_thread",
        "[].reports[].provider",
        "[].reports[].rank",
        "[].reports[].waits_block",
    ];

    #[test]
    fn golden_the_json_keys_are_todays() {
        let rank = RankReport {
            rank: 0,
            over: Over::Fabric,
            provider: "shm".into(),
            domain: "shm".into(),
            progress_thread: false,
            waits_block: false,
            checks: vec![timed("c", || Ok("d".into()))],
        };
        let doc = vec![Checked::new("shm", vec![rank])];
        assert!(doc[0].ok && doc[0].ranks == 1);
        let json = serde_json::to_value(&doc).unwrap();
        fabkit_core::schema::same_keys(&json, JSON_KEYS).unwrap_or_else(|e| panic!("{e}"));
    }
}
