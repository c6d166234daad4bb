//! One phase of the benchmark on one rank: its operations laid out in
//! memory before the clock starts, the timed loop over a store (the DHT or
//! Redis), and what the loop measured.
//!
//! Nothing of the harness runs inside the clock but what the issue of an
//! operation needs: keys, values and the whole sequence (distribution draws
//! included) are built first, the loop reads the clock once per batch, and
//! a hit is checked by one compare of its words against the value scheme
//! ([`workload::value_ok`]), no dearer than the copy that brought it.

use crate::hist::Hist;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use fabkit_dht::message::{Messenger, NoMessages};
use fabkit_dht::{Dht, Found, Transport, Write};

use super::progress::Progress;
use super::redis::Client;
use super::workload::{self, Kind, Phase};

/// A phase's operations in the form the timed loop reads: each window of up
/// to `batch` operations is one batch of reads (reads, and the read half of
/// read-modify-writes) followed by one batch of writes.
#[derive(Debug, Default)]
pub struct Prepared {
    klen: usize,
    vlen: usize,
    /// Keys of the reads, back to back.
    rkeys: Vec<u8>,
    /// The id of each read's key, to check what it returns.
    rids: Vec<u64>,
    /// What each read should find.
    rexpect: Vec<Expect>,
    /// The store (Redis server) of each read's key.
    rsrv: Vec<u32>,
    /// Keys and values of the writes, back to back.
    wkeys: Vec<u8>,
    wvals: Vec<u8>,
    wsrv: Vec<u32>,
    /// Where each window ends in the reads and in the writes.
    windows: Vec<(u32, u32)>,
    /// Operations in the phase (a read-modify-write is one).
    ops: u64,
    reads: u64,
    writes: u64,
    /// The first operations, one at a time, for the closed-loop latency
    /// pass: (is a read, index into the reads or writes).
    singles: Vec<(bool, u32)>,
}

/// What a read should find.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Expect {
    /// A written key: a miss is a lost key.
    #[default]
    Present,
    /// A key nobody writes: a hit is false.
    Absent,
    /// Either: a key drawn from a range of which only some keys were
    /// written (the paper's zipfian mixed phase).
    Either,
}

/// What a phase needs besides its operations.
#[derive(Clone, Copy, Debug)]
pub struct Shape<'w> {
    /// Key and value bytes.
    pub klen: usize,
    /// See `klen`.
    pub vlen: usize,
    /// Operations per window (batch).
    pub batch: usize,
    /// This rank (its writes' tags).
    pub rank: u64,
    /// Ranks, i.e. Redis servers.
    pub ranks: u32,
    /// A version for this phase's values, so each phase writes new ones.
    pub version: u64,
    /// Ids at or past this (and below `absent_end`) are never written.
    pub absent_from: u64,
    /// See `absent_from`.
    pub absent_end: u64,
    /// Single operations for the latency pass.
    pub singles: u64,
    /// Whether reads may find or miss a key ([`Expect::Either`]) unless
    /// it is in `written`.
    pub may_miss: bool,
    /// With `may_miss`: the keys some rank wrote, whose misses are losses.
    pub written: Option<&'w std::collections::HashSet<u64>>,
}

/// A zeroed vector of `n` items, or an error naming `what` where the
/// allocation would fail (a `ulimit -v` or a full machine), instead of the
/// abort an infallible allocation ends in.
pub fn try_vec<T: Clone + Default>(n: usize, what: &str) -> Result<Vec<T>> {
    let mut v = Vec::new();
    v.try_reserve_exact(n).map_err(|_| {
        anyhow::anyhow!(
            "cannot allocate {n} x {} B for {what}: this process may not have that much memory \
             (see ulimit -v); lower --keys or --ops",
            std::mem::size_of::<T>()
        )
    })?;
    v.resize(n, T::default());
    Ok(v)
}

impl Prepared {
    /// Lays out `phase`'s operations for this rank.
    pub fn new(phase: &Phase, s: &Shape<'_>) -> Result<Prepared> {
        let is_read = |k: Kind| matches!(k, Kind::Read | Kind::Rmw);
        let is_write = |k: Kind| !matches!(k, Kind::Read);
        let nr = phase.ops.iter().filter(|o| is_read(o.kind)).count();
        let nw = phase.ops.iter().filter(|o| is_write(o.kind)).count();
        let bytes = |n: usize, l: usize| {
            n.checked_mul(l)
                .context("the phase's keys and values exceed the address space; lower --ops")
        };
        let mut p = Prepared {
            klen: s.klen,
            vlen: s.vlen,
            rkeys: try_vec(bytes(nr, s.klen)?, "the keys read")?,
            rids: try_vec(nr, "the keys read")?,
            rexpect: try_vec(nr, "the keys read")?,
            rsrv: try_vec(nr, "the keys read")?,
            wkeys: try_vec(bytes(nw, s.klen)?, "the keys written")?,
            wvals: try_vec(bytes(nw, s.vlen)?, "the values written")?,
            wsrv: try_vec(nw, "the keys written")?,
            ops: phase.ops.len() as u64,
            reads: nr as u64,
            writes: nw as u64,
            ..Prepared::default()
        };
        let place = fabkit_dht::placement::Placement::new(s.ranks, bounds_buckets(), 1);
        // Windows hold indices as u32, the reads and writes of one phase.
        anyhow::ensure!(
            u32::try_from(nr.max(nw)).is_ok(),
            "a phase of {} operations has more than 2^32 reads or writes; lower --keys or --ops",
            phase.ops.len()
        );
        let (mut r, mut w) = (0usize, 0usize);
        // Ids inserted in the open window: a read of one of them starts a
        // new window, since a window's reads go before its writes.
        let mut inserted: Vec<u64> = Vec::with_capacity(s.batch);
        let mut in_window = 0usize;
        let tag = workload::tag(s.rank, s.version);
        for op in &phase.ops {
            let reads_new = is_read(op.kind) && inserted.contains(&op.key);
            if in_window == s.batch || reads_new {
                p.windows.push((r as u32, w as u32));
                inserted.clear();
                in_window = 0;
            }
            in_window += 1;
            let srv = |key: &[u8]| place.rank_of(fabkit_dht::placement::hash_key(key));
            if is_read(op.kind) {
                let k = &mut p.rkeys[r * s.klen..(r + 1) * s.klen];
                workload::key_bytes(op.key, k);
                p.rsrv[r] = srv(k);
                p.rids[r] = op.key;
                let drawn = s.written.is_some_and(|w| w.contains(&op.key));
                p.rexpect[r] = if s.may_miss {
                    if drawn {
                        Expect::Present
                    } else {
                        Expect::Either
                    }
                } else if (s.absent_from..s.absent_end).contains(&op.key) {
                    Expect::Absent
                } else {
                    Expect::Present
                };
                if (p.singles.len() as u64) < s.singles {
                    p.singles.push((true, r as u32));
                }
                r += 1;
            }
            if is_write(op.kind) {
                let k = &mut p.wkeys[w * s.klen..(w + 1) * s.klen];
                workload::key_bytes(op.key, k);
                p.wsrv[w] = srv(k);
                workload::fill_value(op.key, tag, &mut p.wvals[w * s.vlen..(w + 1) * s.vlen]);
                if op.kind == Kind::Insert {
                    inserted.push(op.key);
                }
                // A read-modify-write's single is its read.
                if op.kind != Kind::Rmw && (p.singles.len() as u64) < s.singles {
                    p.singles.push((false, w as u32));
                }
                w += 1;
            }
        }
        if in_window > 0 {
            p.windows.push((r as u32, w as u32));
        }
        Ok(p)
    }

    /// Operations in the phase.
    pub fn ops(&self) -> u64 {
        self.ops
    }
}

/// Any bucket count: the rank of a key does not depend on it.
fn bounds_buckets() -> u64 {
    crate::flags::MIN_BUCKETS
}

/// What a store does for the loop: a batch of reads into the caller's
/// buffers, a batch of writes.
pub trait Store {
    /// Reads `keys` (on servers `srv`); values into `values`, outcomes into
    /// `found`.
    fn read(
        &mut self,
        keys: &[&[u8]],
        srv: &[u32],
        values: &mut [u8],
        found: &mut [Found],
    ) -> Result<()>;
    /// Writes `keys` with `values` (on servers `srv`).
    fn write(&mut self, keys: &[&[u8]], values: &[&[u8]], srv: &[u32]) -> Result<()>;
}

/// The DHT as a store, with its outcome buffer.
#[derive(Debug)]
pub struct DhtStore<'a, T: Transport, M: Messenger = NoMessages> {
    /// The table.
    pub dht: &'a Dht<T, M>,
    /// Write outcomes, one batch long.
    pub out: Vec<Write>,
}

impl<T: Transport, M: Messenger> Store for DhtStore<'_, T, M> {
    fn read(
        &mut self,
        keys: &[&[u8]],
        _: &[u32],
        values: &mut [u8],
        found: &mut [Found],
    ) -> Result<()> {
        Ok(self.dht.read_into(keys, values, found)?)
    }

    fn write(&mut self, keys: &[&[u8]], values: &[&[u8]], _: &[u32]) -> Result<()> {
        let out = &mut self.out[..keys.len()];
        Ok(self.dht.write_into(keys, values, out)?)
    }
}

/// Redis as a store: one connection to each rank's server.
#[derive(Debug)]
pub struct RedisStore<'a> {
    /// The client.
    pub client: &'a mut Client,
    /// Value bytes.
    pub vlen: usize,
    /// Hit flags, one batch long.
    pub hit: Vec<bool>,
}

impl Store for RedisStore<'_> {
    fn read(
        &mut self,
        keys: &[&[u8]],
        srv: &[u32],
        values: &mut [u8],
        found: &mut [Found],
    ) -> Result<()> {
        let hit = &mut self.hit[..keys.len()];
        self.client.read_batch(srv, keys, self.vlen, values, hit)?;
        for (f, h) in found.iter_mut().zip(hit.iter()) {
            *f = if *h { Found::Hit } else { Found::Miss };
        }
        Ok(())
    }

    fn write(&mut self, keys: &[&[u8]], values: &[&[u8]], srv: &[u32]) -> Result<()> {
        self.client.write_batch(srv, keys, values)
    }
}

/// Reads whose value was checked, on one rank.
#[derive(Clone, Copy, Debug, Default, serde::Serialize, serde::Deserialize)]
pub struct Checks {
    /// Hits whose value is no whole value any writer wrote for the key.
    pub wrong: u64,
    /// Reads of written keys that missed (evicted, or lost to a racing
    /// lock-free writer).
    pub lost: u64,
    /// Hits of keys nobody writes.
    pub false_hits: u64,
    /// Hits, misses and corrupt reads as the loop saw them.
    pub hits: u64,
    /// See `hits`.
    pub misses: u64,
    /// See `hits`.
    pub corrupt: u64,
}

/// What one rank's pass over a phase measured.
#[derive(Debug)]
pub struct Timed {
    /// Seconds from the start barrier to the rank's last completion.
    pub secs: f64,
    /// This process's busy CPU time over the pass (all its threads).
    pub cpu: Duration,
    /// Latency of each batch (or of each operation at batch 1), ns.
    pub hist: Hist,
    /// What the reads returned.
    pub checks: Checks,
}

/// This process's busy CPU time (user and system, every thread).
pub fn process_cpu() -> Duration {
    // SAFETY: getrusage writes one rusage into the zeroed struct we own.
    let ru = unsafe {
        let mut ru: libc::rusage = std::mem::zeroed();
        libc::getrusage(libc::RUSAGE_SELF, &mut ru);
        ru
    };
    let tv = |t: libc::timeval| Duration::new(t.tv_sec as u64, t.tv_usec as u32 * 1000);
    tv(ru.ru_utime) + tv(ru.ru_stime)
}

/// Buffers the loop reads into, sized once for a batch.
struct Bufs<'p> {
    rrefs: Vec<&'p [u8]>,
    wrefs: Vec<&'p [u8]>,
    vrefs: Vec<&'p [u8]>,
    values: Vec<u8>,
    found: Vec<Found>,
}

impl<'p> Bufs<'p> {
    fn new(p: &'p Prepared, batch: usize) -> Result<Bufs<'p>> {
        let kl = p.klen.max(1);
        Ok(Bufs {
            rrefs: p.rkeys.chunks_exact(kl).collect(),
            wrefs: p.wkeys.chunks_exact(kl).collect(),
            vrefs: p.wvals.chunks_exact(p.vlen.max(1)).collect(),
            values: try_vec(batch.saturating_mul(p.vlen), "a batch of values")?,
            found: try_vec(batch, "a batch of outcomes")?,
        })
    }
}

/// Checks reads `r0..r0 + n` of `p` as they came back.
fn check(p: &Prepared, r0: usize, values: &[u8], found: &[Found], c: &mut Checks) {
    let vl = p.vlen;
    for (i, f) in found.iter().enumerate() {
        let r = r0 + i;
        match f {
            Found::Hit => {
                c.hits += 1;
                c.false_hits += u64::from(p.rexpect[r] == Expect::Absent);
                c.wrong += u64::from(!workload::value_ok(
                    p.rids[r],
                    &values[i * vl..(i + 1) * vl],
                ));
            }
            Found::Miss => {
                c.misses += 1;
                c.lost += u64::from(p.rexpect[r] == Expect::Present);
            }
            Found::Corrupt => c.corrupt += 1,
        }
    }
}

/// Runs `p` on `store` in its windows, timed from the call (the caller
/// calls it right after the phase's start barrier).
pub fn timed<S: Store>(
    store: &mut S,
    p: &Prepared,
    batch: usize,
    progress: &mut Progress,
) -> Result<Timed> {
    let b = &mut Bufs::new(p, batch)?;
    let mut hist = Hist::new();
    let mut checks = Checks::default();
    let (mut r0, mut w0) = (0usize, 0usize);
    let cpu0 = process_cpu();
    let start = Instant::now();
    let mut last = start;
    for (i, &(r1, w1)) in p.windows.iter().enumerate() {
        let (r1, w1) = (r1 as usize, w1 as usize);
        if r1 > r0 {
            let n = r1 - r0;
            let (values, found) = (&mut b.values[..n * p.vlen], &mut b.found[..n]);
            store.read(&b.rrefs[r0..r1], &p.rsrv[r0..r1], values, found)?;
            check(p, r0, values, found, &mut checks);
        }
        if w1 > w0 {
            store.write(&b.wrefs[w0..w1], &b.vrefs[w0..w1], &p.wsrv[w0..w1])?;
        }
        let now = Instant::now();
        hist.record(now.duration_since(last).as_nanos() as u64);
        last = now;
        progress.at(i + 1, now);
        (r0, w0) = (r1, w1);
    }
    let secs = last.duration_since(start).as_secs_f64();
    let cpu = process_cpu().saturating_sub(cpu0);
    Ok(Timed {
        secs,
        cpu,
        hist,
        checks,
    })
}

/// The closed-loop pass: the phase's first operations one at a time, each
/// timed (as YCSB measures latency). Writes repeat the timed pass's, so
/// inserts are updates by now.
pub fn singles<S: Store>(store: &mut S, p: &Prepared) -> Result<Hist> {
    let mut b = Bufs::new(p, 1)?;
    let mut hist = Hist::new();
    let mut checks = Checks::default();
    for &(is_read, i) in &p.singles {
        let i = i as usize;
        let t0 = Instant::now();
        if is_read {
            let (values, found) = (&mut b.values[..p.vlen], &mut b.found[..1]);
            store.read(&b.rrefs[i..i + 1], &p.rsrv[i..i + 1], values, found)?;
            let t1 = Instant::now();
            check(p, i, values, found, &mut checks);
            hist.record(t1.duration_since(t0).as_nanos() as u64);
        } else {
            store.write(&b.wrefs[i..i + 1], &b.vrefs[i..i + 1], &p.wsrv[i..i + 1])?;
            hist.record(t0.elapsed().as_nanos() as u64);
        }
    }
    anyhow::ensure!(
        checks.wrong == 0,
        "the latency pass read {} values that no writer wrote for their keys",
        checks.wrong
    );
    Ok(hist)
}

/// Windows of the phase (batches of the timed loop).
impl Prepared {
    /// Batches the timed loop issues.
    pub fn windows(&self) -> usize {
        self.windows.len()
    }

    /// Reads and writes in the phase.
    pub fn reads_writes(&self) -> (u64, u64) {
        (self.reads, self.writes)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use workload::Op;

    fn shape(batch: usize) -> Shape<'static> {
        Shape {
            klen: 16,
            vlen: 24,
            batch,
            rank: 0,
            ranks: 2,
            version: 1,
            absent_from: 100,
            absent_end: 200,
            singles: 3,
            may_miss: false,
            written: None,
        }
    }

    fn phase(ops: Vec<Op>) -> Phase {
        Phase {
            name: workload::PhaseName::Run,
            timed: true,
            ops,
        }
    }

    #[test]
    fn windows_hold_a_batch_and_split_before_a_read_of_a_key_inserted_in_them() {
        let op = |kind, key| Op { kind, key };
        let ops = vec![
            op(Kind::Read, 1),
            op(Kind::Insert, 7),
            op(Kind::Update, 2),
            op(Kind::Read, 7), // reads the insert above: a new window
            op(Kind::Rmw, 3),
            op(Kind::Read, 150),
        ];
        let p = Prepared::new(&phase(ops), &shape(3)).unwrap();
        // Reads: 1 | 7, 3, 150 (rmw reads); writes: 7, 2 | 3.
        assert_eq!(p.windows, vec![(1, 2), (4, 3)]);
        assert_eq!(p.rids, vec![1, 7, 3, 150]);
        use Expect::{Absent, Present};
        assert_eq!(p.rexpect, vec![Present, Present, Present, Absent]);
        // Where only some keys of the range were written: those present,
        // the others either.
        let written = [150].into_iter().collect();
        let q = Prepared::new(
            &phase(vec![op(Kind::Read, 1), op(Kind::Read, 150)]),
            &Shape {
                may_miss: true,
                written: Some(&written),
                ..shape(3)
            },
        )
        .unwrap();
        assert_eq!(q.rexpect, vec![Expect::Either, Present]);
        assert_eq!((p.ops(), p.reads_writes()), (6, (4, 3)));
        // The first three operations, the rmw counted by its read.
        assert_eq!(p.singles, vec![(true, 0), (false, 0), (false, 1)]);
        // Keys and values as the scheme makes them.
        let mut k = [0u8; 16];
        workload::key_bytes(2, &mut k);
        assert_eq!(&p.wkeys[16..32], &k);
        assert!(workload::value_ok(2, &p.wvals[24..48]));
    }

    #[test]
    fn a_full_window_closes_at_the_batch() {
        let ops: Vec<Op> = (0..7)
            .map(|key| Op {
                kind: Kind::Read,
                key,
            })
            .collect();
        let p = Prepared::new(&phase(ops), &shape(3)).unwrap();
        assert_eq!(p.windows, vec![(3, 0), (6, 0), (7, 0)]);
    }
}
