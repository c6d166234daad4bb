//! What `fabkit dht` runs, as data built before any clock starts: the key
//! space, the value scheme, the key distributions and each rank's operation
//! sequences, phase by phase. Pure: no I/O, no clock, and no allocation
//! beyond the returned vectors; the same [`Spec`] (seed included) gives the
//! same operations on every run and every machine.
//!
//! Two families of workloads:
//!
//! - `paper`, the MPI-DHT paper's benchmark: every rank writes its share of
//!   the keys, reads every rank's keys back plus as many absent ones, then
//!   runs a read/update mix. With `zipf`, each rank writes and reads a
//!   zipfian sequence over one key range all ranks share (the paper's "skew
//!   .99, range 1 to 712,500").
//! - `load-a`, `a`, `b`, `c`, `d`, `f`: the YCSB core workloads (Cooper et
//!   al., "Benchmarking cloud serving systems with YCSB", SoCC 2010): a load
//!   phase of inserts, then a run phase of the workload's mix, with YCSB's
//!   scrambled zipfian, uniform or latest key choice.
//!
//! Keys and values are ids and tags here; [`key_bytes`] and [`fill_value`]
//! turn them into the bytes the table stores, and [`value_ok`] checks a hit
//! with one compare per word, no dearer than copying the value.
//!
//! Zipfian draws follow Gray et al., "Quickly generating billion-record
//! synthetic databases" (SIGMOD 1994), as YCSB uses them; zeta(n, theta)
//! for large n comes from the Euler–Maclaurin formula, so a range of 10^10
//! items costs microseconds, not a pass over every item.

mod draw;
mod values;

use clap::ValueEnum;
use draw::{stream, Chooser, Rng, Zipf};
use serde::Serialize;
pub use values::{fill_value, key_bytes, keys_fit, tag, value_ok};

/// Which benchmark the ranks run.
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, Hash, ValueEnum, Serialize, serde::Deserialize,
)]
#[serde(rename_all = "kebab-case")]
pub enum Workload {
    /// The MPI-DHT paper's: write, read back (hits and misses), mixed.
    #[default]
    Paper,
    /// YCSB's load phase alone, timed.
    LoadA,
    /// YCSB A, update heavy: 50 % reads, 50 % updates.
    A,
    /// YCSB B, read mostly: 95 % reads, 5 % updates.
    B,
    /// YCSB C, read only.
    C,
    /// YCSB D, read latest: 95 % reads, 5 % inserts.
    D,
    /// YCSB F, read-modify-write: 50 % reads, 50 % read-modify-writes.
    F,
}

impl Workload {
    /// The key distribution this workload uses unless told otherwise: the
    /// paper's benchmark draws uniformly, YCSB D reads the latest inserts,
    /// and the other YCSB workloads are zipfian.
    pub fn default_dist(self) -> Dist {
        match self {
            Workload::Paper => Dist::Uniform,
            Workload::D => Dist::Latest,
            Workload::LoadA | Workload::A | Workload::B | Workload::C | Workload::F => Dist::Zipf,
        }
    }

    /// The run phase's mix: percent of reads, and the kind of the rest.
    /// `None` for the workloads without a YCSB run phase.
    fn ycsb_mix(self) -> Option<(u64, Kind)> {
        match self {
            Workload::A => Some((50, Kind::Update)),
            Workload::B => Some((95, Kind::Update)),
            Workload::C => Some((100, Kind::Update)),
            Workload::D => Some((95, Kind::Insert)),
            Workload::F => Some((50, Kind::Rmw)),
            Workload::Paper | Workload::LoadA => None,
        }
    }
}

/// How the keys of reads, updates and read-modify-writes are chosen.
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, Hash, ValueEnum, Serialize, serde::Deserialize,
)]
#[serde(rename_all = "kebab-case")]
pub enum Dist {
    /// Every key equally likely.
    #[default]
    Uniform,
    /// Zipfian (`--zipf-theta`): plain over `--zipf-range` for the paper's
    /// benchmark, YCSB's scrambled zipfian over the loaded keys otherwise.
    Zipf,
    /// YCSB's latest: zipfian over recency, the newest key most likely.
    Latest,
}

/// What one operation does.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "kebab-case")]
#[repr(u8)]
pub enum Kind {
    /// Read the key's value.
    Read = 0,
    /// Overwrite an existing key's value.
    Update = 1,
    /// Write a key (new, or in the paper's zipfian write phase, maybe not).
    Insert = 2,
    /// Read the value, then write a new one (YCSB F).
    Rmw = 3,
}

/// One operation on one key.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize)]
pub struct Op {
    /// What to do.
    pub kind: Kind,
    /// The key id; [`key_bytes`] makes the key.
    pub key: u64,
}

/// Which phase of a workload: the paper's `write`, `read` and `mixed`,
/// YCSB's `load` and `run`, spelled in reports as here.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PhaseName {
    /// The paper's: every rank writes its keys.
    #[default]
    Write,
    /// The paper's: every rank reads every rank's keys (and absent ones).
    Read,
    /// The paper's: a mix of reads and updates.
    Mixed,
    /// YCSB's: the records inserted (timed in `load-a` only).
    Load,
    /// YCSB's: the workload's mix.
    Run,
}

impl PhaseName {
    /// The name reports and `fabkit plot --phase` know it by.
    pub fn as_str(self) -> &'static str {
        match self {
            PhaseName::Write => "write",
            PhaseName::Read => "read",
            PhaseName::Mixed => "mixed",
            PhaseName::Load => "load",
            PhaseName::Run => "run",
        }
    }
}

impl std::fmt::Display for PhaseName {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.pad(self.as_str())
    }
}

/// A run of operations measured (or not) as one.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Phase {
    /// Which one.
    pub name: PhaseName,
    /// Whether its time is measured (YCSB's load is setup, except `load-a`).
    pub timed: bool,
    /// This rank's operations, in order.
    pub ops: Vec<Op>,
}

/// Everything that decides the operations of one rank.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Spec {
    /// Which benchmark.
    pub workload: Workload,
    /// Key distribution; `None` for the workload's [`Workload::default_dist`].
    pub dist: Option<Dist>,
    /// Ranks in the job.
    pub ranks: u64,
    /// This rank, below `ranks`.
    pub rank: u64,
    /// The paper's: pairs each rank writes; YCSB: records each rank loads.
    pub keys: u64,
    /// Operations per rank in the paper's mixed phase and YCSB run phases.
    pub ops: u64,
    /// Percent of reads in the paper's mixed phase (the rest update), 0..=100.
    pub read_pct: u32,
    /// Zipfian skew, strictly between 0 and 1 (0.99 in the paper and YCSB).
    pub zipf_theta: f64,
    /// The paper's zipfian key range (712 500 in the paper).
    pub zipf_range: u64,
    /// Seed of every draw; mixed with the rank, so ranks differ.
    pub seed: u64,
}

impl Spec {
    /// The distribution actually used.
    fn dist(&self) -> Dist {
        self.dist.unwrap_or(self.workload.default_dist())
    }
}

/// The item count YCSB's scrambled zipfian draws over before hashing into
/// the records: large, so the popular items' hashes land anywhere in the
/// key space whatever the record count.
const SCRAMBLE_ITEMS: u64 = 10_000_000_000;

/// The phases rank `spec.rank` runs, in order, or one sentence naming the
/// parameter that makes them impossible and how to fix it.
pub fn phases(spec: &Spec) -> Result<Vec<Phase>, String> {
    check(spec)?;
    match (spec.workload, spec.dist()) {
        (Workload::Paper, Dist::Uniform) => paper_uniform(spec),
        (Workload::Paper, Dist::Zipf) => paper_zipf(spec),
        (Workload::Paper, Dist::Latest) => Err(
            "--distribution latest is YCSB workload D's (it follows inserts, which the paper's \
             benchmark does not make); pass --distribution uniform or zipf with --workload paper"
                .into(),
        ),
        (_, dist) => ycsb(spec, dist),
    }
}

/// The parameter checks every workload shares.
fn check(spec: &Spec) -> Result<(), String> {
    if spec.rank >= spec.ranks {
        return Err(format!(
            "rank {} is not one of the job's {} ranks; launch the benchmark with at least one rank",
            spec.rank, spec.ranks
        ));
    }
    if spec.keys == 0 {
        return Err("--keys 0 gives the ranks nothing to write; pass --keys 1 or more".into());
    }
    if spec.read_pct > 100 {
        return Err(format!(
            "--read-pct {} is over 100; pass a percentage from 0 to 100",
            spec.read_pct
        ));
    }
    // Written so that NaN, for which every comparison is false, is refused.
    if !(spec.zipf_theta > 0.0 && spec.zipf_theta < 1.0) {
        return Err(format!(
            "--zipf-theta {} is not strictly between 0 and 1; pass a skew such as 0.99",
            spec.zipf_theta
        ));
    }
    if spec.zipf_range == 0 {
        return Err("--zipf-range 0 leaves no keys to draw; pass --zipf-range 1 or more".into());
    }
    let needs_ops = spec.workload == Workload::Paper || spec.workload.ycsb_mix().is_some();
    if needs_ops && spec.ops == 0 {
        return Err(format!(
            "--ops 0 leaves workload {}'s timed mix empty; pass --ops 1 or more",
            workload_name(spec.workload)
        ));
    }
    if key_space(spec).is_none() {
        return Err(format!(
            "--keys {} (with --ops {} and {} ranks) needs more key ids than 64 bits hold; \
             lower --keys or --ops",
            spec.keys, spec.ops, spec.ranks
        ));
    }
    Ok(())
}

/// The name the command line knows a workload by.
fn workload_name(w: Workload) -> String {
    w.to_possible_value()
        .map_or_else(|| format!("{w:?}"), |v| v.get_name().to_owned())
}

/// The number of distinct key ids any phase of any rank may use, plus one
/// for [`hot_key`]: every id the spec produces is below it. `None` when it
/// does not fit in a u64 (then [`phases`] refuses the spec).
pub fn key_space(spec: &Spec) -> Option<u64> {
    let used = match (spec.workload, spec.dist()) {
        (Workload::Paper, Dist::Zipf) => spec.zipf_range,
        // Written ids, then as many absent ones.
        (Workload::Paper, _) => spec.ranks.checked_mul(spec.keys)?.checked_mul(2)?,
        // Loaded ids, then each rank's own block of inserts.
        (Workload::D, _) => spec
            .ranks
            .checked_mul(spec.keys)?
            .checked_add(spec.ranks.checked_mul(spec.ops)?)?,
        _ => spec.ranks.checked_mul(spec.keys)?,
    };
    used.checked_add(1)
}

/// A key id no phase of any rank uses: the benchmark's hot-key check writes
/// it from every rank at once. It is `key_space(spec) - 1`; for a spec whose
/// key space overflows (which [`phases`] refuses) it is `u64::MAX`.
pub fn hot_key(spec: &Spec) -> u64 {
    key_space(spec).map_or(u64::MAX, |n| n - 1)
}

/// An empty vector with room for `len` ops, or the sentence saying that
/// `flag` (at `value`) asks for more than this machine can hold.
fn op_vec(len: u64, flag: &str, value: u64) -> Result<Vec<Op>, String> {
    let mut v = Vec::new();
    usize::try_from(len)
        .ok()
        .and_then(|n| v.try_reserve_exact(n).ok())
        .ok_or_else(|| {
            format!(
                "{flag} {value} makes a phase of {len} operations per rank, more than this \
                 machine can hold; lower {flag}"
            )
        })?;
    Ok(v)
}

/// The overflow sentence for sizes [`check`] did not cover.
fn too_many(spec: &Spec) -> String {
    format!(
        "--keys {} with {} ranks is more operations than 64 bits count; lower --keys",
        spec.keys, spec.ranks
    )
}

/// A mixed phase: `ops` reads (`read_pct` percent) and updates, keys from
/// `key`.
fn mixed(
    spec: &Spec,
    rng: &mut Rng,
    mut key: impl FnMut(&mut Rng) -> u64,
) -> Result<Phase, String> {
    let mut ops = op_vec(spec.ops, "--ops", spec.ops)?;
    for _ in 0..spec.ops {
        let kind = if rng.below(100) < u64::from(spec.read_pct) {
            Kind::Read
        } else {
            Kind::Update
        };
        ops.push(Op {
            kind,
            key: key(rng),
        });
    }
    Ok(Phase {
        name: PhaseName::Mixed,
        timed: true,
        ops,
    })
}

fn paper_uniform(spec: &Spec) -> Result<Vec<Phase>, String> {
    let n = spec.keys;
    let written = spec.ranks.checked_mul(n).ok_or_else(|| too_many(spec))?;
    // key_space (checked) is 2 x written + 1, so every id below is in range.
    let base = spec.rank * n;

    let mut write = op_vec(n, "--keys", n)?;
    write.extend((base..base + n).map(|key| Op {
        kind: Kind::Insert,
        key,
    }));

    let reads = written.checked_add(n).ok_or_else(|| too_many(spec))?;
    let mut read = op_vec(reads, "--keys", n)?;
    // This rank's keys first, then the next rank's, wrapping round.
    for r in (spec.rank..spec.ranks).chain(0..spec.rank) {
        read.extend((r * n..r * n + n).map(|key| Op {
            kind: Kind::Read,
            key,
        }));
    }
    let absent = written + base;
    read.extend((absent..absent + n).map(|key| Op {
        kind: Kind::Read,
        key,
    }));

    let mut rng = stream(spec.seed, spec.rank, 2);
    let mix = mixed(spec, &mut rng, |rng| rng.below(written))?;
    Ok(paper_phases(write, read, mix))
}

/// The paper's three phases, each timed.
fn paper_phases(write: Vec<Op>, read: Vec<Op>, mixed: Phase) -> Vec<Phase> {
    vec![
        Phase {
            name: PhaseName::Write,
            timed: true,
            ops: write,
        },
        Phase {
            name: PhaseName::Read,
            timed: true,
            ops: read,
        },
        mixed,
    ]
}

fn paper_zipf(spec: &Spec) -> Result<Vec<Phase>, String> {
    let zipf = Zipf::new(spec.zipf_range, spec.zipf_theta);
    let mut rng = stream(spec.seed, spec.rank, 0);
    let mut write = op_vec(spec.keys, "--keys", spec.keys)?;
    for _ in 0..spec.keys {
        write.push(Op {
            kind: Kind::Insert,
            key: zipf.draw(rng.unit()),
        });
    }
    // Read back exactly what this rank wrote, in order: no misses.
    let mut read = op_vec(spec.keys, "--keys", spec.keys)?;
    read.extend(write.iter().map(|o| Op {
        kind: Kind::Read,
        key: o.key,
    }));
    let mut rng = stream(spec.seed, spec.rank, 2);
    let mix = mixed(spec, &mut rng, |rng| zipf.draw(rng.unit()))?;
    Ok(paper_phases(write, read, mix))
}

fn ycsb(spec: &Spec, dist: Dist) -> Result<Vec<Phase>, String> {
    let n = spec.keys;
    let records = spec.ranks.checked_mul(n).ok_or_else(|| too_many(spec))?;
    // Below records, which key_space (checked) exceeds.
    let base = spec.rank * n;
    let mut load = op_vec(n, "--keys", n)?;
    load.extend((base..base + n).map(|key| Op {
        kind: Kind::Insert,
        key,
    }));
    let mut out = vec![Phase {
        name: PhaseName::Load,
        timed: spec.workload == Workload::LoadA,
        ops: load,
    }];
    let Some((read_pct, other)) = spec.workload.ycsb_mix() else {
        return Ok(out);
    };

    // D's inserts: this rank's own block after the loaded ids.
    let insert_base = spec
        .rank
        .checked_mul(spec.ops)
        .and_then(|o| o.checked_add(records))
        .ok_or_else(|| too_many(spec))?;
    let mut chooser = Chooser::new(dist, records, insert_base, spec.zipf_theta);
    let mut rng = stream(spec.seed, spec.rank, 1);
    let mut ops = op_vec(spec.ops, "--ops", spec.ops)?;
    let mut inserted = 0u64;
    for _ in 0..spec.ops {
        let kind = if rng.below(100) < read_pct {
            Kind::Read
        } else {
            other
        };
        let key = if kind == Kind::Insert {
            // inserted < ops, so within the block key_space counted.
            let id = insert_base + inserted;
            inserted += 1;
            chooser.inserted();
            id
        } else {
            chooser.next(&mut rng)
        };
        ops.push(Op { kind, key });
    }
    out.push(Phase {
        name: PhaseName::Run,
        timed: true,
        ops,
    });
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::{HashMap, HashSet};

    fn spec(workload: Workload, ranks: u64, rank: u64) -> Spec {
        Spec {
            workload,
            dist: None,
            ranks,
            rank,
            keys: 1000,
            ops: 10_000,
            read_pct: 95,
            zipf_theta: 0.99,
            zipf_range: 712_500,
            seed: 42,
        }
    }

    fn fraction(ops: &[Op], kind: Kind) -> f64 {
        ops.iter().filter(|o| o.kind == kind).count() as f64 / ops.len() as f64
    }

    /// The id drawn most often, with its count.
    fn most_drawn(ops: &[Op]) -> (u64, usize) {
        let mut count: HashMap<u64, usize> = HashMap::new();
        for o in ops {
            *count.entry(o.key).or_default() += 1;
        }
        count
            .into_iter()
            .max_by_key(|&(k, c)| (c, std::cmp::Reverse(k)))
            .expect("some ops")
    }

    #[test]
    fn paper_uniform_writes_own_block_reads_all_plus_absent_and_mixes_at_read_pct() {
        let ranks = 3;
        let n = 1000;
        let mut all_written = HashSet::new();
        for rank in 0..ranks {
            let mut s = spec(Workload::Paper, ranks, rank);
            s.ops = 100_000;
            let ps = phases(&s).unwrap();
            assert_eq!(
                ps.iter()
                    .map(|p| (p.name.as_str(), p.timed))
                    .collect::<Vec<_>>(),
                [("write", true), ("read", true), ("mixed", true)]
            );
            let write = &ps[0].ops;
            let ids: Vec<u64> = write.iter().map(|o| o.key).collect();
            assert_eq!(ids, (rank * n..rank * n + n).collect::<Vec<_>>());
            assert!(write.iter().all(|o| o.kind == Kind::Insert));
            for &id in &ids {
                assert!(all_written.insert(id), "id {id} written by two ranks");
            }

            let read = &ps[1].ops;
            assert!(read.iter().all(|o| o.kind == Kind::Read));
            assert_eq!(read.len() as u64, (ranks + 1) * n);
            // Own keys first, then the next rank's.
            assert_eq!(read[0].key, rank * n);
            assert_eq!(read[n as usize].key, ((rank + 1) % ranks) * n);
            let present: HashSet<u64> =
                read[..(ranks * n) as usize].iter().map(|o| o.key).collect();
            assert_eq!(present, (0..ranks * n).collect::<HashSet<_>>());
            let absent: Vec<u64> = read[(ranks * n) as usize..].iter().map(|o| o.key).collect();
            let first = (ranks + rank) * n;
            assert_eq!(absent, (first..first + n).collect::<Vec<_>>());

            let mix = &ps[2].ops;
            assert_eq!(mix.len(), 100_000);
            let r = fraction(mix, Kind::Read);
            assert!((r - 0.95).abs() < 0.01, "read fraction {r}");
            assert!((fraction(mix, Kind::Update) - (1.0 - r)).abs() < 1e-12);
            assert!(mix.iter().all(|o| o.key < ranks * n));
        }
        // No rank's absent keys are anyone's written ones.
        for rank in 0..ranks {
            let ps = phases(&spec(Workload::Paper, ranks, rank)).unwrap();
            let read = &ps[1].ops;
            for o in &read[(ranks * n) as usize..] {
                assert!(!all_written.contains(&o.key));
            }
        }
    }

    #[test]
    fn paper_read_pct_extremes_are_exact() {
        let mut s = spec(Workload::Paper, 2, 0);
        s.read_pct = 0;
        assert_eq!(fraction(&phases(&s).unwrap()[2].ops, Kind::Update), 1.0);
        s.read_pct = 100;
        assert_eq!(fraction(&phases(&s).unwrap()[2].ops, Kind::Read), 1.0);
    }

    #[test]
    fn paper_zipf_reads_back_what_it_wrote_and_item_0_is_the_most_popular() {
        let mut s = spec(Workload::Paper, 2, 1);
        s.dist = Some(Dist::Zipf);
        s.keys = 20_000;
        s.zipf_range = 1000;
        let ps = phases(&s).unwrap();
        let (write, read, mix) = (&ps[0].ops, &ps[1].ops, &ps[2].ops);
        assert!(write.iter().all(|o| o.kind == Kind::Insert && o.key < 1000));
        assert_eq!(
            read.iter().map(|o| o.key).collect::<Vec<_>>(),
            write.iter().map(|o| o.key).collect::<Vec<_>>()
        );
        assert!(read.iter().all(|o| o.kind == Kind::Read));
        assert_eq!(most_drawn(write).0, 0);
        assert_eq!(most_drawn(mix).0, 0);
        assert!(mix.iter().all(|o| o.key < 1000));
        let r = fraction(mix, Kind::Read);
        assert!((r - 0.95).abs() < 0.02, "read fraction {r}");
        // Ranks draw their own streams over the same range.
        let mut s0 = s.clone();
        s0.rank = 0;
        assert_ne!(phases(&s0).unwrap()[0], ps[0]);
    }

    #[test]
    fn ycsb_mixes_are_within_tolerance() {
        let cases = [
            (Workload::A, Kind::Update, 0.50),
            (Workload::B, Kind::Update, 0.95),
            (Workload::C, Kind::Update, 1.00),
            (Workload::D, Kind::Insert, 0.95),
            (Workload::F, Kind::Rmw, 0.50),
        ];
        for (w, other, reads) in cases {
            let mut s = spec(w, 2, 1);
            s.ops = 20_000;
            let ps = phases(&s).unwrap();
            assert_eq!(
                ps.iter()
                    .map(|p| (p.name.as_str(), p.timed))
                    .collect::<Vec<_>>(),
                [("load", false), ("run", true)],
                "{w:?}"
            );
            assert_eq!(
                ps[0].ops.iter().map(|o| o.key).collect::<Vec<_>>(),
                (1000..2000).collect::<Vec<_>>()
            );
            assert!(ps[0].ops.iter().all(|o| o.kind == Kind::Insert));
            let run = &ps[1].ops;
            assert_eq!(run.len(), 20_000);
            let r = fraction(run, Kind::Read);
            assert!((r - reads).abs() < 0.015, "{w:?}: reads {r}");
            assert!(
                (r + fraction(run, other) - 1.0).abs() < 1e-12,
                "{w:?}: only reads and {other:?}"
            );
        }
        let ps = phases(&spec(Workload::LoadA, 2, 0)).unwrap();
        assert_eq!(ps.len(), 1);
        assert!(ps[0].timed && ps[0].name.as_str() == "load");
    }

    #[test]
    fn load_a_needs_no_ops() {
        let mut s = spec(Workload::LoadA, 2, 0);
        s.ops = 0;
        assert!(phases(&s).is_ok());
    }

    #[test]
    fn d_inserts_are_distinct_across_ranks_and_beyond_the_loaded_ids() {
        let ranks = 3;
        let mut seen = HashSet::new();
        for rank in 0..ranks {
            let ps = phases(&spec(Workload::D, ranks, rank)).unwrap();
            let inserts: Vec<u64> = ps[1]
                .ops
                .iter()
                .filter(|o| o.kind == Kind::Insert)
                .map(|o| o.key)
                .collect();
            assert!(!inserts.is_empty());
            for id in inserts {
                assert!(id >= ranks * 1000, "insert {id} among the loaded ids");
                assert!(seen.insert(id), "insert {id} made twice");
            }
        }
    }

    #[test]
    fn key_space_bounds_every_id_and_the_hot_key_is_unused() {
        let ws = [
            Workload::Paper,
            Workload::LoadA,
            Workload::A,
            Workload::B,
            Workload::C,
            Workload::D,
            Workload::F,
        ];
        for w in ws {
            for d in [Dist::Uniform, Dist::Zipf, Dist::Latest] {
                if w == Workload::Paper && d == Dist::Latest {
                    continue;
                }
                for rank in 0..3 {
                    let mut s = spec(w, 3, rank);
                    s.dist = Some(d);
                    s.keys = 200;
                    s.ops = 2000;
                    s.zipf_range = 5000;
                    let space = key_space(&s).unwrap();
                    let hot = hot_key(&s);
                    assert_eq!(hot + 1, space);
                    for p in phases(&s).unwrap() {
                        for o in p.ops {
                            assert!(o.key < space, "{w:?}/{d:?} id {} >= {space}", o.key);
                            assert_ne!(o.key, hot, "{w:?}/{d:?} uses the hot key");
                        }
                    }
                }
            }
        }
    }

    #[test]
    fn scrambled_zipf_spreads_the_popular_ids_and_stays_in_range() {
        let mut s = spec(Workload::C, 2, 0);
        s.keys = 500;
        s.ops = 100_000;
        let run = &phases(&s).unwrap()[1].ops;
        assert!(run.iter().all(|o| o.key < 1000));
        let mut count = vec![0u32; 1000];
        for o in run {
            count[o.key as usize] += 1;
        }
        let mut ids: Vec<u64> = (0..1000).collect();
        ids.sort_by_key(|&i| std::cmp::Reverse(count[i as usize]));
        let top: HashSet<u64> = ids[..10].iter().copied().collect();
        assert_ne!(top, (0..10).collect::<HashSet<_>>());
        // Spread: the top ten are not bunched at the low end.
        assert!(top.iter().any(|&i| i >= 500), "top ids {top:?}");
        // Still skewed: the most drawn id far above the uniform share (100).
        assert!(count[ids[0] as usize] > 1000);
    }

    #[test]
    fn latest_favours_the_newest_id() {
        // No inserts: the last loaded id.
        let mut s = spec(Workload::C, 2, 1);
        s.dist = Some(Dist::Latest);
        s.keys = 500;
        s.ops = 20_000;
        let run = &phases(&s).unwrap()[1].ops;
        assert_eq!(most_drawn(run).0, 999);
        assert!(run.iter().all(|o| o.key < 1000));

        // D: measured by recency, the newest known id at each read wins.
        let (ranks, rank, n) = (2u64, 1u64, 500u64);
        let mut s = spec(Workload::D, ranks, rank);
        s.keys = n;
        s.ops = 20_000;
        let records = ranks * n;
        let base = records + rank * s.ops;
        let run = &phases(&s).unwrap()[1].ops;
        let pos = |id: u64| {
            if id < records {
                id
            } else {
                records + id - base
            }
        };
        let mut newest = records - 1;
        let mut age: HashMap<u64, usize> = HashMap::new();
        for o in run {
            match o.kind {
                Kind::Insert => {
                    assert_eq!(pos(o.key), newest + 1);
                    newest += 1;
                }
                _ => {
                    assert!(pos(o.key) <= newest, "read of an id not yet inserted");
                    *age.entry(newest - pos(o.key)).or_default() += 1;
                }
            }
        }
        let (top, _) = age.iter().max_by_key(|&(_, c)| *c).unwrap();
        assert_eq!(*top, 0);
    }

    #[test]
    fn same_seed_same_ops_other_rank_or_seed_other_ops() {
        for w in [Workload::Paper, Workload::A, Workload::D] {
            let s = spec(w, 2, 0);
            let a = phases(&s).unwrap();
            assert_eq!(a, phases(&s).unwrap());
            let last = a.len() - 1;
            let mut other = s.clone();
            other.rank = 1;
            assert_ne!(a[last].ops, phases(&other).unwrap()[last].ops, "{w:?}");
            let mut other = s.clone();
            other.seed = 43;
            assert_ne!(a[last].ops, phases(&other).unwrap()[last].ops, "{w:?}");
        }
    }

    #[test]
    fn value_ok_accepts_every_written_value() {
        for len in [0usize, 1, 7, 8, 9, 15, 16, 17, 23, 24, 80, 104, 4096] {
            let mut v = vec![0u8; len];
            for id in [0u64, 1, 12345, u64::MAX] {
                for t in [0u64, 1, tag(3, 9), u64::MAX] {
                    fill_value(id, t, &mut v);
                    assert!(value_ok(id, &v), "len {len} id {id} tag {t}");
                }
            }
        }
    }

    #[test]
    fn value_ok_refuses_foreign_torn_flipped_and_zero_values() {
        for len in [16usize, 17, 23, 24, 31, 104] {
            let (mut a, mut b) = (vec![0u8; len], vec![0u8; len]);
            let (ta, tb) = (tag(0, 5), tag(1, 5));
            fill_value(7, ta, &mut a);
            fill_value(7, tb, &mut b);
            // Another key's value.
            assert!(!value_ok(8, &a), "len {len}");
            // Torn between two writers, at every cut.
            for cut in 1..len {
                if a[cut..] == b[cut..] {
                    // The second writer's bytes equal the first's from
                    // here: nothing torn to see.
                    continue;
                }
                let mut torn = a[..cut].to_vec();
                torn.extend_from_slice(&b[cut..]);
                assert!(!value_ok(7, &torn), "len {len} cut {cut}");
            }
            // Any byte changed.
            for i in 0..len {
                for flip in [0x01u8, 0x80, 0xff] {
                    let mut c = a.clone();
                    c[i] ^= flip;
                    assert!(!value_ok(7, &c), "len {len} byte {i} ^ {flip:#x}");
                }
            }
            // All zeros, for any id.
            for id in 0..1000 {
                assert!(!value_ok(id, &vec![0u8; len]));
            }
        }
        for len in 1..16usize {
            let mut a = vec![0u8; len];
            fill_value(7, 1, &mut a);
            for id in 0..1000 {
                assert!(!value_ok(id, &vec![0u8; len]), "len {len} id {id}");
            }
            for i in 0..len {
                let mut c = a.clone();
                c[i] ^= 0x10;
                assert!(!value_ok(7, &c), "len {len} byte {i}");
            }
            if len >= 8 {
                assert!(!value_ok(8, &a), "len {len}");
            }
        }
    }

    #[test]
    fn keys_are_distinct_within_keys_fit() {
        assert!(keys_fit(1, 256) && !keys_fit(1, 257));
        assert!(keys_fit(2, 65_536) && !keys_fit(2, 65_537));
        assert!(keys_fit(0, 1) && !keys_fit(0, 2));
        assert!(keys_fit(7, 1 << 56) && !keys_fit(7, (1 << 56) + 1));
        assert!(keys_fit(8, u64::MAX) && keys_fit(80, u64::MAX));
        for (len, ids) in [(1usize, 256u64), (2, 65_536), (3, 3000), (80, 3000)] {
            assert!(keys_fit(len, ids));
            let mut k = vec![0u8; len];
            let mut seen = HashSet::new();
            for id in 0..ids {
                key_bytes(id, &mut k);
                assert!(seen.insert(k.clone()), "len {len} id {id}");
            }
        }
        let mut k = [0u8; 12];
        key_bytes(0x0102_0304_0506_0708, &mut k);
        assert_eq!(&k, b"\x01\x02\x03\x04\x05\x06\x07\x08####");
        let mut k = [0u8; 2];
        key_bytes(0x0102_0304, &mut k);
        assert_eq!(k, [0x03, 0x04]);
    }

    #[test]
    fn tags_differ_per_rank_and_version() {
        let mut seen = HashSet::new();
        for rank in [0u64, 1, 2, (1 << 24) - 1] {
            for version in [0u64, 1, 2, (1 << 40) - 1] {
                assert!(seen.insert(tag(rank, version)));
            }
        }
    }

    #[test]
    fn every_refusal_is_an_error_naming_its_flag() {
        let base = spec(Workload::A, 2, 0);
        let cases: Vec<(&str, Spec)> = vec![
            (
                "--keys",
                Spec {
                    keys: 0,
                    ..base.clone()
                },
            ),
            (
                "--ops",
                Spec {
                    ops: 0,
                    ..base.clone()
                },
            ),
            (
                "--ops",
                Spec {
                    ops: 0,
                    ..spec(Workload::Paper, 2, 0)
                },
            ),
            (
                "--read-pct",
                Spec {
                    read_pct: 101,
                    ..base.clone()
                },
            ),
            (
                "--zipf-range",
                Spec {
                    zipf_range: 0,
                    ..base.clone()
                },
            ),
            (
                "--zipf-theta",
                Spec {
                    zipf_theta: 1.0,
                    ..base.clone()
                },
            ),
            (
                "--zipf-theta",
                Spec {
                    zipf_theta: 0.0,
                    ..base.clone()
                },
            ),
            (
                "--zipf-theta",
                Spec {
                    zipf_theta: -0.5,
                    ..base.clone()
                },
            ),
            (
                "--zipf-theta",
                Spec {
                    zipf_theta: f64::NAN,
                    ..base.clone()
                },
            ),
            (
                "--distribution",
                Spec {
                    dist: Some(Dist::Latest),
                    ..spec(Workload::Paper, 2, 0)
                },
            ),
            // ranks x keys overflows.
            (
                "--keys",
                Spec {
                    ranks: 4,
                    keys: u64::MAX / 3,
                    ..base.clone()
                },
            ),
            // The paper's 2 x ranks x keys overflows.
            (
                "--keys",
                Spec {
                    ranks: 2,
                    keys: u64::MAX / 3,
                    ..spec(Workload::Paper, 2, 0)
                },
            ),
            // D's ranks x ops overflows.
            (
                "--ops",
                Spec {
                    ops: u64::MAX / 2,
                    ..spec(Workload::D, 3, 0)
                },
            ),
            // Fits 64 bits, not memory: refused, not aborted.
            (
                "--keys",
                Spec {
                    ranks: 1,
                    keys: 1 << 62,
                    ..spec(Workload::LoadA, 1, 0)
                },
            ),
            (
                "--ops",
                Spec {
                    ops: 1 << 62,
                    ..spec(Workload::Paper, 1, 0)
                },
            ),
        ];
        for (flag, s) in cases {
            let e = phases(&s).expect_err(flag);
            assert!(e.contains(flag), "{flag}: {e}");
            assert!(!e.contains('\n'), "one line: {e}");
        }
        assert!(phases(&Spec {
            rank: 2,
            ..base.clone()
        })
        .is_err());
        assert!(phases(&Spec {
            ranks: 0,
            ..base.clone()
        })
        .is_err());
        assert_eq!(
            key_space(&Spec {
                keys: u64::MAX,
                ..base.clone()
            }),
            None
        );
        assert_eq!(
            hot_key(&Spec {
                keys: u64::MAX,
                ..base
            }),
            u64::MAX
        );
    }

    #[test]
    fn value_names_are_the_documented_ones() {
        let names = |v: &[Workload]| v.iter().map(|w| workload_name(*w)).collect::<Vec<_>>();
        assert_eq!(
            names(Workload::value_variants()),
            ["paper", "load-a", "a", "b", "c", "d", "f"]
        );
        let dists: Vec<String> = Dist::value_variants()
            .iter()
            .filter_map(|d| d.to_possible_value().map(|v| v.get_name().to_owned()))
            .collect();
        assert_eq!(dists, ["uniform", "zipf", "latest"]);
        assert_eq!(Workload::from_str("load-a", false), Ok(Workload::LoadA));
    }
}
