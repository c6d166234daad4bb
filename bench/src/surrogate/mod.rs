//! `fabkit surrogate`: the DHT as the surrogate-model cache of a POET-like
//! reactive-transport simulation, so a user sees what rounding the cache's
//! keys costs in accuracy and buys in time before trying it in their code.
//!
//! A grid of cells ([`grid`]) is carried by a constant flow with a
//! magnesium chloride inflow; after each time step's flow every cell's
//! chemistry ([`chem`]) runs: an iterative solver whose cost is a
//! parameter. The ranks share the cells, and exchange them after each
//! step. With the cache, a rank first looks its cells' inputs up in the DHT
//! (rounded to a number of significant digits: the key), takes a hit's
//! result as it is and solves only the misses, which it then writes: POET's
//! scheme, with its 80 B keys and 104 B values. Every rank's hits can come
//! from any rank's solves.
//!
//! Per round and solver cost: the run without the cache, then each
//! variant and rounding with it, each on a fresh table (odd rounds reverse
//! the order). Reported: runtime
//! and speed-up (per round, so that the machine's drift cancels), hit rate,
//! checksum mismatches, the solver's and the cache's time per cell and the
//! break-even solver cost below which the cache does not pay, and the error
//! of the final grid against the uncached run's, per species ([`report`]).

mod args;
pub mod chem;
pub mod grid;
pub mod report;

use std::time::Instant;

use anyhow::{Context, Result};
use fabkit_core::bootstrap::Bootstrap;
use fabkit_dht::message::{Messenger, NoMessages};
use fabkit_dht::transport::local::LocalTransport;
use fabkit_dht::{Dht, Found, Stats, Transport, Variant, Write};
use serde::{Deserialize, Serialize};

pub use args::{validate, SurrogateArgs, DT};
use chem::{Digits, KEY_LEN, VALUE_LEN};
use grid::Grid;

use crate::dhtbench::{gather, transports};

/// One run (cached or not) of one round, combined over the ranks: every
/// rank holds the same copy.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Run {
    /// Round, from 0.
    pub round: u32,
    /// The variant caching the chemistry; none for the uncached run.
    pub variant: Option<Variant>,
    /// What carried the cache's operations ("fabric shm", "mpi"); empty
    /// for the uncached run.
    pub transport: String,
    /// The path the cache's operations took; none for the uncached run.
    pub path: Option<transports::Taken>,
    /// The keys' rounding (`exact` or digits); empty for the uncached run.
    pub digits: String,
    /// The solver's sub-steps.
    pub substeps: u32,
    /// Ranks.
    pub ranks: usize,
    /// The slowest rank's time for the time steps, seconds.
    pub secs: f64,
    /// Cells reacted (cells x steps).
    pub cells: u64,
    /// Solver calls, and the time they took, summed over ranks.
    pub solves: u64,
    /// See `solves`, ns.
    pub solve_ns: u64,
    /// Time in the cache's reads and writes, summed over ranks, ns.
    pub cache_ns: u64,
    /// Lookups that hit, missed, or read a bucket whose checksum kept
    /// failing (solved again, as a miss).
    pub hits: u64,
    /// See `hits`.
    pub misses: u64,
    /// See `hits`.
    pub corrupt: u64,
    /// The table's counters, summed over ranks.
    pub stats: Stats,
    /// The final grid's error against the uncached run's of the same cost;
    /// none for the uncached run.
    pub error: Option<grid::Error>,
}

/// What one rank counted in one run.
#[derive(Default)]
struct Counts {
    secs: f64,
    solves: u64,
    solve_ns: u64,
    cache_ns: u64,
    cells: u64,
    hits: u64,
    misses: u64,
    corrupt: u64,
}

/// The cache a run uses: a table and the keys' rounding.
struct Cache<'d, T: Transport, M: Messenger> {
    dht: &'d Dht<T, M>,
    digits: Digits,
}

/// Reusable buffers of one batch of cells.
struct Batch {
    keys: Vec<[u8; KEY_LEN]>,
    values: Vec<u8>,
    found: Vec<Found>,
    /// The misses' positions in the batch, their values and outcomes.
    missed: Vec<usize>,
    solved: Vec<u8>,
    written: Vec<Write>,
}

impl Batch {
    fn new(n: usize) -> Batch {
        Batch {
            keys: vec![[0; KEY_LEN]; n],
            values: vec![0; n * VALUE_LEN],
            found: vec![Found::Miss; n],
            missed: Vec::with_capacity(n),
            solved: vec![0; n * VALUE_LEN],
            written: vec![Write::Inserted; n],
        }
    }
}

/// Reacts `cells[..]` (the batch's cells) with the solver, or through the
/// cache, counting into `n`. The cache's cost is the batch's time less its
/// solves': making keys, the lookups, taking hits and writing the misses.
fn react<T: Transport, M: Messenger>(
    cells: &mut [chem::State],
    substeps: u32,
    cache: Option<&Cache<'_, T, M>>,
    b: &mut Batch,
    n: &mut Counts,
) -> Result<()> {
    let start = Instant::now();
    n.cells += cells.len() as u64;
    let Some(c) = cache else {
        for s in cells.iter_mut() {
            *s = chem::solve(s, DT, substeps).state;
        }
        n.solves += cells.len() as u64;
        n.solve_ns += start.elapsed().as_nanos() as u64;
        return Ok(());
    };
    let k = cells.len();
    for (s, key) in cells.iter().zip(&mut b.keys) {
        chem::key(s, DT, c.digits, key);
    }
    let keys: Vec<&[u8]> = b.keys[..k].iter().map(|k| &k[..]).collect();
    c.dht
        .read_into(&keys, &mut b.values[..k * VALUE_LEN], &mut b.found[..k])?;
    b.missed.clear();
    let mut solving = std::time::Duration::ZERO;
    for (i, s) in cells.iter_mut().enumerate() {
        match b.found[i] {
            Found::Hit => {
                n.hits += 1;
                *s = chem::state_of(&b.values[i * VALUE_LEN..(i + 1) * VALUE_LEN]);
            }
            miss => {
                if miss == Found::Corrupt {
                    n.corrupt += 1;
                } else {
                    n.misses += 1;
                }
                let t = Instant::now();
                let r = chem::solve(s, DT, substeps);
                solving += t.elapsed();
                n.solves += 1;
                let m = b.missed.len();
                chem::value(&r, DT, &mut b.solved[m * VALUE_LEN..(m + 1) * VALUE_LEN]);
                b.missed.push(i);
                *s = r.state;
            }
        }
    }
    let m = b.missed.len();
    if m > 0 {
        let keys: Vec<&[u8]> = b.missed.iter().map(|&i| &b.keys[i][..]).collect();
        let values: Vec<&[u8]> = b.solved[..m * VALUE_LEN].chunks(VALUE_LEN).collect();
        c.dht.write_into(&keys, &values, &mut b.written[..m])?;
    }
    n.solve_ns += solving.as_nanos() as u64;
    n.cache_ns += start.elapsed().saturating_sub(solving).as_nanos() as u64;
    Ok(())
}

/// Runs the simulation on this rank: the final grid (the same on every
/// rank) and what this rank counted.
fn simulate<T: Transport, M: Messenger>(
    a: &SurrogateArgs,
    boot: &dyn Bootstrap,
    substeps: u32,
    cache: Option<&Cache<'_, T, M>>,
) -> Result<(Grid, Counts)> {
    let (nx, ny) = a.grid;
    let mut g = Grid::new(nx, ny);
    let (me, size) = (boot.rank(), boot.size());
    let shares: Vec<Vec<usize>> = (0..size).map(|r| grid::share(&g, r, size)).collect();
    let mine = &shares[me];
    let per = a.batch.min(mine.len()).max(1);
    let mut b = Batch::new(per);
    let mut n = Counts::default();
    let mut cells: Vec<chem::State> = Vec::with_capacity(per);
    let mut bytes = Vec::with_capacity(mine.len() * chem::STATE_BYTES);
    boot.barrier()?;
    let t0 = Instant::now();
    for step in 0..a.steps {
        g.advect();
        for (k, part) in mine.chunks(per).enumerate() {
            cells.clear();
            cells.extend(part.iter().map(|&i| g.cells[i]));
            react(&mut cells, substeps, cache, &mut b, &mut n)
                .with_context(|| format!("time step {step}, batch {k} on rank {me}"))?;
            for (&i, s) in part.iter().zip(&cells) {
                g.cells[i] = *s;
            }
        }
        // Every rank gets every rank's cells for the next step's flow.
        bytes.clear();
        for &i in mine {
            bytes.extend(g.cells[i].iter().flat_map(|x| x.to_le_bytes()));
        }
        let all = boot.allgather(&bytes)?;
        for (r, got) in all.iter().enumerate() {
            let theirs = &shares[r];
            anyhow::ensure!(
                got.len() == theirs.len() * chem::STATE_BYTES,
                "rank {r} sent {} B of cells at time step {step}, not {}",
                got.len(),
                theirs.len() * chem::STATE_BYTES
            );
            for (&i, w) in theirs.iter().zip(got.chunks_exact(chem::STATE_BYTES)) {
                g.cells[i] = chem::state_of(w);
            }
        }
    }
    n.secs = t0.elapsed().as_secs_f64();
    boot.barrier()?;
    Ok((g, n))
}

/// Combines every rank's counts into `run` (collective).
fn combine(boot: &dyn Bootstrap, n: &Counts, mut run: Run) -> Result<Run> {
    let all = gather(
        boot,
        &[
            n.secs.to_bits(),
            n.solves,
            n.solve_ns,
            n.cache_ns,
            n.cells,
            n.hits,
            n.misses,
            n.corrupt,
        ],
    )?;
    let sum = |i: usize| all.iter().fold(0u64, |t, w| t.saturating_add(w[i]));
    run.secs = all.iter().map(|w| f64::from_bits(w[0])).fold(0.0, f64::max);
    (run.solves, run.solve_ns, run.cache_ns, run.cells) = (sum(1), sum(2), sum(3), sum(4));
    (run.hits, run.misses, run.corrupt) = (sum(5), sum(6), sum(7));
    Ok(run)
}

/// A run of round `round` at `substeps` before it ran: the uncached run's
/// fields, which a cached run's overwrite.
fn blank(round: u32, substeps: u32, ranks: usize) -> Run {
    Run {
        round,
        variant: None,
        transport: String::new(),
        path: None,
        digits: String::new(),
        substeps,
        ranks,
        secs: 0.0,
        cells: 0,
        solves: 0,
        solve_ns: 0,
        cache_ns: 0,
        hits: 0,
        misses: 0,
        corrupt: 0,
        stats: Stats::default(),
        error: None,
    }
}

/// The uncached run of `round` at `sub`: checked against the first round's
/// grid, which it must repeat bit for bit (it is the reference every error
/// is measured against), or kept as that reference.
fn uncached(
    a: &SurrogateArgs,
    boot: &dyn Bootstrap,
    (round, sub): (u32, u32),
    refs: &mut Vec<(u32, Grid)>,
) -> Result<Run> {
    // No table: any table type will do for the absent cache.
    let (g, n) = simulate::<LocalTransport, NoMessages>(a, boot, sub, None)?;
    let run = combine(boot, &n, blank(round, sub, boot.size()))?;
    match refs.iter().find(|(s, _)| *s == sub) {
        Some((_, r)) if *r != g => anyhow::bail!(
            "the uncached run at --substeps {sub} gave another grid in round {} than in round \
             1: the simulation is not deterministic on this machine, so no error can be \
             measured against it",
            round + 1
        ),
        Some(_) => {}
        None => refs.push((sub, g.clone())),
    }
    if round + 1 == a.rounds {
        write_grid(a, boot, &g, &format!("uncached-{sub}"))?;
    }
    Ok(run)
}

/// The rounds of runs on this rank over the tables `tables` makes. Per
/// round and cost, the uncached run comes first in even rounds and last in
/// odd ones, with the cached runs in reverse order, so that no
/// configuration always runs at the same distance from its baseline.
fn rounds(
    a: &SurrogateArgs,
    boot: &dyn Bootstrap,
    tables: &transports::Tables<'_>,
) -> Result<Vec<Run>> {
    let size = boot.size();
    let mut refs: Vec<(u32, Grid)> = Vec::new();
    let mut out = Vec::new();
    let mut plan: Vec<(Variant, Digits)> = a
        .variants()
        .into_iter()
        .flat_map(|v| a.digits.iter().map(move |&d| (v, d)))
        .collect();
    for round in 0..a.rounds {
        let (odd, last) = (round % 2 == 1, round + 1 == a.rounds);
        if round > 0 {
            plan.reverse();
        }
        for &sub in &a.substeps {
            if !odd {
                out.push(uncached(a, boot, (round, sub), &mut refs)?);
            }
            for &(v, digits) in &plan {
                let cfg = args::config(a, v, size)?;
                let t = tables.open(&cfg)?;
                let path = t.path;
                let ran = fabkit_dht::with_table!(&t.table, d => {
                    cached(a, boot, d, sub, digits, v)
                });
                tables.close(t)?;
                let (transport, got, n, stats) = ran?;
                // Even rounds made the reference before the cached runs;
                // odd ones have the first round's.
                let reference = match refs.iter().find(|(s, _)| *s == sub) {
                    Some((_, g)) => g,
                    None => anyhow::bail!("no uncached grid at --substeps {sub} to compare with"),
                };
                let run = Run {
                    variant: Some(v),
                    transport,
                    path: Some(path),
                    digits: digits.to_string(),
                    stats,
                    error: Some(grid::error(&got, reference, a.floor)),
                    ..blank(round, sub, size)
                };
                out.push(combine(boot, &n, run)?);
                if last {
                    let name = format!("{}-d{digits}-{sub}", variant_name(v));
                    write_grid(a, boot, &got, &name)?;
                }
            }
            if odd {
                out.push(uncached(a, boot, (round, sub), &mut refs)?);
            }
        }
    }
    Ok(out)
}

pub use crate::dhtbench::report::variant_name;

/// Writes `g` as NAME.csv into --grids (rank 0 only): x, y and the nine
/// species, each printed so that it reads back to the same bits.
fn write_grid(a: &SurrogateArgs, boot: &dyn Bootstrap, g: &Grid, name: &str) -> Result<()> {
    let Some(dir) = a.grids.as_ref().filter(|_| boot.rank() == 0) else {
        return Ok(());
    };
    let mut text = format!("x,y,{}\n", chem::SPECIES.join(","));
    for (i, s) in g.cells.iter().enumerate() {
        let row: Vec<String> = s.iter().map(|x| format!("{x:e}")).collect();
        text += &format!("{},{},{}\n", i % g.nx, i / g.nx, row.join(","));
    }
    let path = dir.join(format!("{name}.csv"));
    std::fs::write(&path, text).with_context(|| format!("writing {}", path.display()))
}

/// The simulation with the cache `d` (the table of variant `v`, keys at
/// `digits`): what carried it, the final grid, the per-rank counts and the
/// table's counters summed over ranks.
fn cached<T: Transport, M: Messenger>(
    a: &SurrogateArgs,
    boot: &dyn Bootstrap,
    d: &Dht<T, M>,
    sub: u32,
    digits: Digits,
    v: Variant,
) -> Result<(String, Grid, Counts, fabkit_dht::Stats)> {
    let cache = Cache { dht: d, digits };
    let (got, n) = simulate(a, boot, sub, Some(&cache))
        .with_context(|| format!("the {} cache, --digits {digits}", variant_name(v)))?;
    let stats = d.stats_all(boot)?;
    Ok((transports::carried_by(d), got, n, stats))
}

/// What `a` asks of the tables' transport.
fn fabric_of(a: &SurrogateArgs) -> Result<transports::Fabric<'_>> {
    Ok(transports::Fabric {
        provider: &a.provider,
        domain: a.domain.as_deref(),
        timeout: a.timeout,
        batch: a.batch,
        path: transports::path_of(a.path, a.shm)?,
    })
}

/// Runs every round on this rank over libfabric.
pub fn run_rank(a: &SurrogateArgs, boot: &dyn Bootstrap) -> Result<Vec<Run>> {
    rounds(a, boot, &transports::Tables::fabric(&fabric_of(a)?, boot))
}

/// Runs every round on this rank over MPI.
#[cfg(feature = "mpi")]
pub fn run_rank_mpi(
    a: &SurrogateArgs,
    kind: fabkit_mpi::window::WindowKind,
    boot: &fabkit_mpi::MpiBootstrap,
) -> Result<Vec<Run>> {
    rounds(
        a,
        boot,
        &transports::Tables::mpi(&fabric_of(a)?, kind, boot),
    )
}

/// `fabkit surrogate`: checks the command line, runs every rank, and on the
/// reporting rank prints the table and writes the JSON, charts and grids;
/// whether every run finished.
pub fn command(a: &SurrogateArgs) -> Result<bool> {
    use crate::launch::Launch;
    // MPI_THREAD_MULTIPLE unless the path is RMA (see `fabkit dht`).
    let path = crate::dhtbench::transports::path_of(a.path, a.shm)?;
    let launch = Launch::detect_threads(a.ranks, path != fabkit_dht::Path::Rma)?;
    let (ranks, _) = launch.ranks();
    #[cfg(feature = "mpi")]
    let mpi = a.mpi.is_some();
    #[cfg(not(feature = "mpi"))]
    let mpi = false;
    validate(a, ranks, mpi)?;
    #[cfg(feature = "mpi")]
    if let (Some(win), false) = (a.mpi, matches!(launch, Launch::Mpi(_))) {
        return Err(crate::exit::usage(format!(
            "--mpi runs under an MPI launcher: mpirun -n 2 fabkit surrogate --mpi {}",
            crate::dhtbench::report::name(win)
        )));
    }
    // Where the results go is checked before a run of minutes, and leaves
    // nothing behind that was not there.
    if launch.reports() {
        if let Some(p) = &a.json {
            crate::output::check_output_file("--json", p)?;
        }
        for (flag, dir) in [("--charts", &a.charts), ("--grids", &a.grids)] {
            if let Some(d) = dir {
                crate::output::check_output_dir(flag, d)?;
            }
        }
    }
    // Ranks wait for each other at every time step, and a slow one may be
    // a whole run behind at the round's barriers.
    let to = crate::dhtbench::MAX_PHASE_WAIT.max(a.timeout);
    #[cfg(feature = "mpi")]
    if let (Some(win), Launch::Mpi(boot)) = (a.mpi, &launch) {
        let kind = fabkit_mpi::window::WindowKind::from(win);
        boot.set_timeout(to);
        let runs = run_rank_mpi(a, kind, boot)?;
        if boot.rank() != 0 {
            return Ok(true);
        }
        let provider =
            format!("mpi osc={}, window {win:?}", crate::mpiperf::osc_in_force()).to_lowercase();
        return publish(a, &runs, launch.provenance(boot.size()), &provider);
    }
    let Some(mut all) = launch.run(to, |boot| run_rank(a, boot))? else {
        return Ok(true);
    };
    let n = all.len();
    let runs = all.swap_remove(0);
    let provider = match runs.iter().find(|r| r.variant.is_some()) {
        Some(r) if a.shm => format!("{} (--shm)", r.transport),
        Some(r) => r.transport.clone(),
        None => format!("libfabric {}", a.provider),
    };
    publish(a, &runs, launch.provenance(n), &provider)
}

/// Prints the table and writes what was asked for.
fn publish(
    a: &SurrogateArgs,
    runs: &[Run],
    provenance: fabkit_core::provenance::Provenance,
    provider: &str,
) -> Result<bool> {
    let rep = report::Report {
        meta: report::Meta {
            provenance,
            provider: provider.into(),
            grid: format!("{}x{}", a.grid.0, a.grid.1),
            steps: a.steps,
            dt: DT,
            batch: a.batch,
            floor: a.floor,
            notes: vec![
                "speed-up: the uncached run's time over the cached run's, in the same round at \
                 the same solver cost; the cached run's table is made before and freed after \
                 its time steps"
                    .into(),
                format!(
                    "error: |cached - uncached| / max(|uncached|, {:e} x the species' largest \
                     uncached value) per cell and species of the final grid; the largest and \
                     the mean over the cells (of the rounds: the largest, and the mean)",
                    a.floor
                ),
                "break-even: the solver cost below which the cache does not pay; model: the \
                 cache's time per cell (keys, lookups, hits taken, misses written) over the \
                 hit rate; measured: where the speed-up crosses 1 between the --substeps \
                 tried"
                    .into(),
            ],
        },
        runs: report::rows(runs),
    };
    print!("{}", report::table(&rep));
    if let Some(p) = &a.json {
        crate::output::write_out(p, &(serde_json::to_string_pretty(&rep)? + "\n"))?;
    }
    if let Some(dir) = &a.charts {
        for (name, svg) in report::charts(&rep) {
            let path = dir.join(name);
            std::fs::write(&path, svg).with_context(|| format!("writing {}", path.display()))?;
        }
    }
    Ok(true)
}
