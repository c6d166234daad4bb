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

use clap::ValueEnum;
use fabkit_dht::placement::mix;
use serde::Serialize;

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

/// A run of operations measured (or not) as one.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Phase {
    /// Its name in reports: `write`, `read`, `mixed`, `load` or `run`.
    pub name: &'static str,
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

/// Writes key `id` into `out`: the id big-endian in the first
/// `min(len, 8)` bytes (its low bytes when shorter than 8), the rest `#`.
/// Distinct ids give distinct keys while `id < 256^min(len, 8)`; see
/// [`keys_fit`].
pub fn key_bytes(id: u64, out: &mut [u8]) {
    let be = id.to_be_bytes();
    let n = out.len().min(8);
    let (head, tail) = out.split_at_mut(n);
    head.copy_from_slice(&be[8 - n..]);
    tail.fill(b'#');
}

/// Whether `ids` distinct ids (0..ids) get distinct `len`-byte keys from
/// [`key_bytes`].
pub fn keys_fit(len: usize, ids: u64) -> bool {
    if len >= 8 {
        return true;
    }
    // 256^len ids fit; len < 8 so the shift stays below 64.
    ids <= 1u64 << (8 * len)
}

/// Odd, so the words of a value are pairwise distinct (j * C is a bijection
/// modulo 2^64): a copy that repeats or shifts a word is caught.
const WORD_STEP: u64 = 0x9e37_79b9_7f4a_7c15;
/// Separate the id's hash for long values from the one for short values.
const LONG_STREAM: u64 = 0xa076_1d64_78bd_642f;
const SHORT_STREAM: u64 = 0xe703_7ed1_a0b4_28db;

/// Values shorter than this do not store the tag.
const TAGGED_MIN: usize = 16;

/// The first word after the tag in key `id`'s value by writer `tag`.
///
/// `mix` is a bijection with `mix(0) == 0` and the id's hash is odd, so
/// the seed is never 0 for tag 0 (an all-zero value is always refused) and,
/// for one id, different tags always give different seeds (a value whose
/// tag and words come from different writers is always refused).
fn long_seed(id: u64, tag: u64) -> u64 {
    mix(tag ^ (mix(id ^ LONG_STREAM) | 1))
}

/// The first word of a short value; odd, so its first byte is never 0.
fn short_seed(id: u64) -> u64 {
    mix(id ^ SHORT_STREAM) | 1
}

/// Word `j` of a value seeded `s`; wrapping, as in a hash.
fn word(s: u64, j: usize) -> u64 {
    s.wrapping_add((j as u64).wrapping_mul(WORD_STEP))
}

fn fill_words(s: u64, out: &mut [u8]) {
    for (j, chunk) in out.chunks_mut(8).enumerate() {
        let w = word(s, j).to_le_bytes();
        chunk.copy_from_slice(&w[..chunk.len()]);
    }
}

fn words_ok(s: u64, v: &[u8]) -> bool {
    let mut whole = v.chunks_exact(8);
    let mut j = 0;
    for c in whole.by_ref() {
        let Ok(b) = <[u8; 8]>::try_from(c) else {
            return false;
        };
        if u64::from_le_bytes(b) != word(s, j) {
            return false;
        }
        j += 1;
    }
    let rest = whole.remainder();
    rest == &word(s, j).to_le_bytes()[..rest.len()]
}

/// Writes the value writer `tag` (see [`tag`]) stores for key `id`, as
/// long as `out`.
///
/// From 16 bytes on: the tag (little-endian) in bytes 0..8, then 8-byte
/// words `s + j * C` (little-endian, the last one cut short) with `s` a
/// hash of (id, tag) and `C` odd, so [`value_ok`] hashes once and compares
/// words. Shorter values hold only the low bytes of words seeded by a hash
/// of the id: they tell keys apart (weakly, below 8 bytes) but cannot tell
/// writers apart.
pub fn fill_value(id: u64, tag: u64, out: &mut [u8]) {
    if out.len() >= TAGGED_MIN {
        let (head, body) = out.split_at_mut(8);
        head.copy_from_slice(&tag.to_le_bytes());
        fill_words(long_seed(id, tag), body);
    } else {
        fill_words(short_seed(id), out);
    }
}

/// Whether `v` is exactly what [`fill_value`] writes for key `id` with some
/// tag. From 16 bytes on this refuses, always: a changed byte, all-zero
/// bytes, and words of two writers (a torn read); and another key's value
/// unless two 64-bit hashes collide. Short values refuse all-zero bytes and
/// changed bytes, but another key's value only with 1 - 2^-(8 len - 1)
/// odds, and cannot tell writers apart. The empty value is the only one of
/// its length, so it is accepted.
pub fn value_ok(id: u64, v: &[u8]) -> bool {
    if v.len() >= TAGGED_MIN {
        let (head, body) = v.split_at(8);
        let Ok(t) = <[u8; 8]>::try_from(head) else {
            return false;
        };
        words_ok(long_seed(id, u64::from_le_bytes(t)), body)
    } else {
        words_ok(short_seed(id), v)
    }
}

/// The tag of a value rank `rank` writes in its round `version`: distinct
/// for distinct pairs while `rank < 2^24` and `version < 2^40` (higher
/// bits are dropped, as in a sequence number that wraps).
pub fn tag(rank: u64, version: u64) -> u64 {
    (version << 24) | (rank & 0x00ff_ffff)
}

/// splitmix64: small, fast, and every seed gives a full-period stream.
#[derive(Clone, Debug)]
struct Rng(u64);

impl Rng {
    /// The stream of phase `phase` of rank `rank`: each input goes through
    /// the bijective `mix`, so ranks and phases start far apart.
    fn new(seed: u64, rank: u64, phase: u64) -> Rng {
        Rng(mix(mix(mix(seed ^ 0x243f_6a88_85a3_08d3) ^ rank) ^ phase))
    }

    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        mix(self.0)
    }

    /// Uniform in `0..n` without bias (Lemire, "Fast random integer
    /// generation in an interval", 2019): multiply-shift, redrawing the few
    /// values whose low half falls in the short first interval. `n` > 0.
    fn below(&mut self, n: u64) -> u64 {
        let mut m = u128::from(self.next()) * u128::from(n);
        if (m as u64) < n {
            // 2^64 mod n: the values below it would map one too many times.
            let threshold = n.wrapping_neg().checked_rem(n).unwrap_or(0);
            while (m as u64) < threshold {
                m = u128::from(self.next()) * u128::from(n);
            }
        }
        (m >> 64) as u64
    }

    /// Uniform in [0, 1), from the top 53 bits.
    fn unit(&mut self) -> f64 {
        (self.next() >> 11) as f64 * (1.0 / (1u64 << 53) as f64)
    }
}

/// zeta(n, theta) = sum of 1 / i^theta for i in 1..=n.
///
/// Summed term by term up to a few thousand items; beyond, the first terms
/// are summed and the tail comes from the Euler–Maclaurin formula with
/// terms to the third derivative, whose remainder at a start of 1024 is
/// far below f64 precision.
fn zeta(n: u64, theta: f64) -> f64 {
    const DIRECT: u64 = 4096;
    const START: u64 = 1024;
    if n <= DIRECT {
        return zeta_add(0.0, 0, n, theta);
    }
    let head = zeta_add(0.0, 0, START - 1, theta);
    let (a, b) = (START as f64, n as f64);
    let f = |x: f64| x.powf(-theta);
    let d1 = |x: f64| -theta * x.powf(-theta - 1.0);
    let d3 = |x: f64| -theta * (theta + 1.0) * (theta + 2.0) * x.powf(-theta - 3.0);
    // The integral of x^-theta over [a, b], as a^(1-theta) * expm1(...) /
    // (1-theta): no cancellation when theta is close to 1.
    let s = 1.0 - theta;
    let integral = a.powf(s) * (s * (b / a).ln()).exp_m1() / s;
    let tail = integral + (f(a) + f(b)) / 2.0 + (d1(b) - d1(a)) / 12.0 - (d3(b) - d3(a)) / 720.0;
    head + tail
}

/// `sum` (zeta over `from` items) extended to `to` items; smallest terms
/// first, for accuracy.
fn zeta_add(sum: f64, from: u64, to: u64, theta: f64) -> f64 {
    let mut part = 0.0;
    for i in (from + 1..=to).rev() {
        part += (i as f64).powf(-theta);
    }
    sum + part
}

/// Zipfian over `0..n`, item 0 the most likely (Gray et al. 1994, as in
/// YCSB's ZipfianGenerator).
#[derive(Clone, Debug)]
struct Zipf {
    n: u64,
    theta: f64,
    alpha: f64,
    zetan: f64,
    eta: f64,
    /// zeta(2, theta) = 1 + 0.5^theta.
    zeta2: f64,
}

impl Zipf {
    /// Over `n` >= 1 items with skew `theta` in (0, 1).
    fn new(n: u64, theta: f64) -> Zipf {
        let mut z = Zipf {
            n,
            theta,
            alpha: 1.0 / (1.0 - theta),
            zetan: zeta(n, theta),
            eta: 0.0,
            zeta2: 1.0 + 0.5f64.powf(theta),
        };
        z.set_eta();
        z
    }

    fn set_eta(&mut self) {
        // Below 3 items the draw never reaches eta (and the formula divides
        // by zero at 2).
        self.eta = if self.n > 2 {
            (1.0 - (2.0 / self.n as f64).powf(1.0 - self.theta)) / (1.0 - self.zeta2 / self.zetan)
        } else {
            0.0
        };
    }

    /// Extends the range to `n` items, adding only the new terms to zeta,
    /// as YCSB does when its item count grows.
    fn grow(&mut self, n: u64) {
        if n > self.n {
            self.zetan = zeta_add(self.zetan, self.n, n, self.theta);
            self.n = n;
            self.set_eta();
        }
    }

    /// The item for a uniform draw `u` in [0, 1).
    fn draw(&self, u: f64) -> u64 {
        let uz = u * self.zetan;
        if uz < 1.0 {
            return 0;
        }
        let last = self.n.saturating_sub(1);
        if uz < self.zeta2 {
            return last.min(1);
        }
        let x = self.n as f64 * (self.eta * u - self.eta + 1.0).powf(self.alpha);
        // A float-to-int cast saturates; rounding may reach n itself.
        (x as u64).min(last)
    }
}

/// FNV-1a 64 over the 8 little-endian bytes of `x`, as YCSB hashes its
/// zipfian items.
fn fnv1a(x: u64) -> u64 {
    fabkit_dht::placement::fnv1a(&x.to_le_bytes())
}

/// Picks the keys of a YCSB run phase's reads, updates and read-modify-writes.
#[derive(Clone, Debug)]
enum Chooser {
    Uniform {
        records: u64,
    },
    /// Zipfian over [`SCRAMBLE_ITEMS`], hashed into the records.
    Scrambled {
        zipf: Zipf,
        records: u64,
    },
    /// Zipfian over recency: position `count - 1 - z` of the loaded ids,
    /// then this rank's inserts so far (ids from `insert_base`).
    Latest {
        zipf: Zipf,
        records: u64,
        insert_base: u64,
    },
}

impl Chooser {
    fn new(dist: Dist, records: u64, insert_base: u64, theta: f64) -> Chooser {
        match dist {
            Dist::Uniform => Chooser::Uniform { records },
            Dist::Zipf => Chooser::Scrambled {
                zipf: Zipf::new(SCRAMBLE_ITEMS, theta),
                records,
            },
            Dist::Latest => Chooser::Latest {
                zipf: Zipf::new(records, theta),
                records,
                insert_base,
            },
        }
    }

    fn next(&self, rng: &mut Rng) -> u64 {
        match self {
            Chooser::Uniform { records } => rng.below(*records),
            Chooser::Scrambled { zipf, records } => {
                // records >= 1: check refused --keys 0 and 0 ranks.
                fnv1a(zipf.draw(rng.unit())) % (*records).max(1)
            }
            Chooser::Latest {
                zipf,
                records,
                insert_base,
            } => {
                let pos = zipf.n - 1 - zipf.draw(rng.unit());
                match pos.checked_sub(*records) {
                    None => pos,
                    // Below the rank's block end, which key_space checked.
                    Some(own) => insert_base + own,
                }
            }
        }
    }

    /// This rank inserted its next id: latest's recency list grows by one.
    fn inserted(&mut self) {
        if let Chooser::Latest { zipf, .. } = self {
            let n = zipf.n.saturating_add(1);
            zipf.grow(n);
        }
    }
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
        name: "mixed",
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

    let mut rng = Rng::new(spec.seed, spec.rank, 2);
    let mix = mixed(spec, &mut rng, |rng| rng.below(written))?;
    Ok(paper_phases(write, read, mix))
}

/// The paper's three phases, each timed.
fn paper_phases(write: Vec<Op>, read: Vec<Op>, mixed: Phase) -> Vec<Phase> {
    vec![
        Phase {
            name: "write",
            timed: true,
            ops: write,
        },
        Phase {
            name: "read",
            timed: true,
            ops: read,
        },
        mixed,
    ]
}

fn paper_zipf(spec: &Spec) -> Result<Vec<Phase>, String> {
    let zipf = Zipf::new(spec.zipf_range, spec.zipf_theta);
    let mut rng = Rng::new(spec.seed, spec.rank, 0);
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
    let mut rng = Rng::new(spec.seed, spec.rank, 2);
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
        name: "load",
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
    let mut rng = Rng::new(spec.seed, spec.rank, 1);
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
        name: "run",
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
                ps.iter().map(|p| (p.name, p.timed)).collect::<Vec<_>>(),
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
                ps.iter().map(|p| (p.name, p.timed)).collect::<Vec<_>>(),
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
        assert!(ps[0].timed && ps[0].name == "load");
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
    fn zipf_item_0_and_1_have_their_exact_probabilities() {
        let (n, theta) = (1000, 0.99);
        let z = Zipf::new(n, theta);
        let zn = zeta(n, theta);
        let mut rng = Rng::new(7, 0, 0);
        let draws = 1_000_000;
        let mut count = vec![0u32; n as usize];
        for _ in 0..draws {
            let x = z.draw(rng.unit());
            count[x as usize] += 1;
        }
        let p0 = f64::from(count[0]) / draws as f64;
        let p1 = f64::from(count[1]) / draws as f64;
        assert!((p0 * zn - 1.0).abs() < 0.02, "p0 {p0} vs {}", 1.0 / zn);
        assert!(
            (p1 * zn / 0.5f64.powf(theta) - 1.0).abs() < 0.03,
            "p1 {p1} vs {}",
            0.5f64.powf(theta) / zn
        );
        assert!(count.iter().all(|&c| c <= count[0]));
        // The tail is reached.
        assert!(count[500..].iter().any(|&c| c > 0));
    }

    #[test]
    fn zeta_tail_formula_matches_direct_sums_and_ycsbs_constant() {
        for theta in [0.01, 0.5, 0.99, 0.9999] {
            for n in [5000u64, 100_000] {
                let direct = zeta_add(0.0, 0, n, theta);
                let fast = zeta(n, theta);
                assert!(
                    ((fast - direct) / direct).abs() < 1e-11,
                    "n {n} theta {theta}: {fast} vs {direct}"
                );
            }
        }
        // YCSB's ScrambledZipfianGenerator precomputes zeta(10^10, 0.99).
        let z = zeta(SCRAMBLE_ITEMS, 0.99);
        assert!((z - 26.469_028_201_783_02).abs() < 1e-9, "{z}");
        // Growing one item at a time agrees with computing anew.
        let mut g = Zipf::new(5000, 0.99);
        for n in 5001..=6000 {
            g.grow(n);
        }
        assert!((g.zetan - zeta(6000, 0.99)).abs() < 1e-10);
        assert_eq!(g.n, 6000);
    }

    #[test]
    fn tiny_zipf_ranges_stay_in_range() {
        for n in 1..=3 {
            let z = Zipf::new(n, 0.5);
            let mut rng = Rng::new(1, 0, 0);
            let mut seen = HashSet::new();
            for _ in 0..1000 {
                let x = z.draw(rng.unit());
                assert!(x < n);
                seen.insert(x);
            }
            assert_eq!(seen.len() as u64, n);
            // u just below 1 still lands inside.
            assert!(z.draw(1.0 - f64::EPSILON) < n);
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
    fn uniform_draws_are_in_range_and_even() {
        let mut rng = Rng::new(3, 0, 0);
        for n in [1u64, 2, 3, 7, 1 << 63, u64::MAX] {
            for _ in 0..100 {
                assert!(rng.below(n) < n);
            }
        }
        let mut count = [0u32; 3];
        for _ in 0..30_000 {
            count[rng.below(3) as usize] += 1;
        }
        assert!(count.iter().all(|&c| c.abs_diff(10_000) < 400), "{count:?}");
        for _ in 0..1000 {
            let u = rng.unit();
            assert!((0.0..1.0).contains(&u));
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
