//! The table: collective creation (from a [`Config`]), statistics, and the one
//! driver of the variants' state machines ([`crate::variant`]): it posts
//! the batches a machine plans on the transport, feeds the completions back
//! with the time, and waits through the [`Clock`] when a machine asks.

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use fabkit_core::Bootstrap;

use crate::clock::{Clock, SystemClock};
use crate::config::{Config, MAX_DEADLINE};
use crate::layout::Variant;
use crate::outcome::{Error, FindOrPut, Found, Read, Result, Stats, Write};
use crate::placement::KeyHash;
use crate::placement::Placement;
use crate::transport::{Op, OpKind, Transport};
use crate::variant::{
    chunked::Chunked, coarse::Coarse, fine::Fine, lockfree::Lockfree, recycle, Batch, Machine,
    Mode, Outcome, Probe, Run, Shape, Step, MAX_RUN,
};
use crate::variant::{Update, Updating};

/// A distributed hash table over a transport.
pub struct Dht<T: Transport> {
    /// Buffers the machines plan into, and the transport's lanes, reused by
    /// every operation. First, so it drops before the transport: a lane's
    /// staging buffer is closed while its rank still is.
    work: Mutex<Work<T::Lane>>,
    pub(crate) t: T,
    pub(crate) cfg: Config,
    pub(crate) stats: Mutex<Stats>,
    /// Layout and placement (the dump asks which copy a read returns).
    pub(crate) shape: Shape,
    clock: Arc<dyn Clock>,
    /// Most lanes (batches in flight) one operation keeps.
    depth: usize,
    /// Fewest keys a lane serves.
    lane_keys: usize,
    /// Hands out the tag bases of runs (see `variant::word::tag`).
    seq: AtomicU32,
    /// How keys are placed (fabkit's hash or the caller's).
    pub(crate) key_hash: KeyHash,
}

/// Most lanes one operation drives at once.
pub const MAX_DEPTH: usize = 8;

/// Fewest keys of a run one lane serves: a batch has a fixed cost (a
/// round of posts, a completion read), and lanes of a few keys each pay
/// it for little. Across two hosts over `tcp;ofi_rxm`, batches of 64 in
/// lanes of 8 keys wrote 0.76-0.92x as fast as one lane; lanes of 32 were
/// level with it or faster (see `results/dht-bench/cross-host`).
pub const LANE_KEYS: usize = 32;

/// What an operation's machines work in: kept from one operation to the
/// next, so that a warm table plans without allocating.
struct Work<L> {
    /// One per machine in flight; the table's own are the transport's
    /// lanes, made once.
    lanes: Vec<LaneWork<L>>,
    probes: Vec<Probe>,
    out: Vec<Outcome>,
    found: Vec<u8>,
    /// Accumulations: each key's bucket as it was (see `Updating`).
    before: Vec<u8>,
    /// The table's own buffers; fresh ones, for a caller while another
    /// holds the table's, drive one machine on a default lane (no
    /// registration per call).
    own: bool,
}

impl<L> Work<L> {
    fn new(own: bool) -> Self {
        Work {
            lanes: Vec::new(),
            probes: Vec::new(),
            out: Vec::new(),
            found: Vec::new(),
            before: Vec::new(),
            own,
        }
    }
}

/// A machine's batch, the ops built from it, and the lane it runs on.
struct LaneWork<L> {
    lane: L,
    batch: Batch,
    ops: Vec<Op<'static>>,
}

/// Where a machine of the driver is.
#[derive(Clone, Copy, Debug)]
enum At {
    /// A step to take now.
    Plan(Step),
    /// Its batch is in flight, posted as the driver's `n`th.
    Flying(u64),
    /// Its batch is planned, to be posted at this time.
    Paused(Instant),
    Done,
}

/// What a driver's machines sent, for the counters.
#[derive(Default)]
struct Tally {
    remote_ops: u64,
    batches: u64,
    remote_bytes: u64,
    aimed: Aimed,
}

impl<T: Transport> std::fmt::Debug for Dht<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Dht")
            .field("transport", &self.t.name())
            .field("config", &self.cfg)
            .finish()
    }
}

/// A random start for a table's tag sequence.
fn random_base() -> u32 {
    fabkit_core::random_u64() as u32
}

impl<T: Transport> Dht<T> {
    /// Creates the table on every rank. Collective: each rank calls it with
    /// its own transport; all must agree on the configuration, and a
    /// mismatch is a clear error on every rank. Nothing is sent before the
    /// configuration, region size and atomics have been checked.
    pub fn create(t: T, cfg: Config, boot: &dyn Bootstrap) -> Result<Dht<T>> {
        Dht::create_with_hash(t, cfg, boot, KeyHash::default())
    }

    /// [`Dht::create`] with the caller's key hash (the MPI-DHT's
    /// `hash_func`): every key is placed by it, restores included. Every
    /// rank must pass the same function; only whether one was given is
    /// checked across ranks.
    pub fn create_with_hash(
        t: T,
        cfg: Config,
        boot: &dyn Bootstrap,
        key_hash: KeyHash,
    ) -> Result<Dht<T>> {
        cfg.validate()?;
        let need = cfg.region_len();
        let have = t.region_len(t.rank());
        let caps = t.caps();
        let local = if have < need {
            Err(Error::RegionTooSmall {
                rank: t.rank(),
                have,
                need,
                buckets: cfg.buckets,
                variant: cfg.variant,
            })
        } else if cfg.variant.needs_atomics() && !caps.atomics {
            Err(Error::NoAtomics {
                variant: cfg.variant,
                transport: t.name(),
            })
        } else if !caps.delivers {
            Err(Error::Unordered {
                transport: t.name(),
            })
        } else {
            Ok(())
        };
        // Every rank reaches the exchange, so a local problem on one rank
        // cannot leave the others waiting; each then reports what it saw.
        let mut mine = cfg.encode();
        mine.push(u8::from(key_hash.is_custom()));
        let all = boot.allgather(&mine).map_err(Error::Bootstrap)?;
        local?;
        if let Some(r) = all.iter().position(|c| *c != mine) {
            return Err(Error::Mismatch(format!(
                "rank {} has {:?}, rank {r} has a different variant, key/value length, \
                 bucket count or candidate count, or a key hash of its own where this \
                 rank has none (or the reverse)",
                boot.rank(),
                cfg
            )));
        }
        let place = Placement::new(t.ranks() as u32, cfg.buckets, cfg.candidates());
        let shape = Shape {
            layout: cfg.layout(),
            place,
            buckets: cfg.buckets,
            chunk: cfg.chunk,
            checksum_retries: cfg.checksum_retries,
            rank: t.rank(),
            deadline: crate::config::default_deadline(),
            near: caps.near,
            in_order: caps.in_order,
        };
        let depth = caps.depth.clamp(1, MAX_DEPTH);
        Ok(Dht {
            work: Mutex::new(Work::new(true)),
            t,
            cfg,
            stats: Mutex::new(Stats::default()),
            shape,
            clock: Arc::new(SystemClock),
            depth,
            lane_keys: LANE_KEYS,
            seq: AtomicU32::new(random_base()),
            key_hash,
        })
    }

    /// The configuration.
    pub fn config(&self) -> &Config {
        &self.cfg
    }

    /// The transport.
    pub fn transport(&self) -> &T {
        &self.t
    }

    /// Where `key` is placed: its rank and its first candidate bucket
    /// there (what the MPI-DHT's `DHT_write` reports as `proc` and `index`).
    pub fn place_of(&self, key: &[u8]) -> (usize, u64) {
        let h = self.key_hash.hash(key);
        (
            self.shape.place.rank_of(h) as usize,
            self.shape.place.candidate(h, 0),
        )
    }

    /// This rank's statistics so far.
    pub fn stats(&self) -> Stats {
        *self.stats.lock().unwrap()
    }

    /// All ranks' statistics, summed. Collective.
    pub fn stats_all(&self, boot: &dyn Bootstrap) -> Result<Stats> {
        let mine = stats_to_bytes(&self.stats());
        let all = boot.allgather(&mine).map_err(Error::Bootstrap)?;
        let mut sum = Stats::default();
        for b in all {
            sum.add(&stats_from_bytes(&b));
        }
        Ok(sum)
    }

    /// Frees the table. Collective: returns when every rank is done with
    /// the others' regions. (Dropping is safe too, but peers may then see
    /// errors.)
    pub fn free(self, boot: &dyn Bootstrap) -> Result<T> {
        boot.barrier().map_err(Error::Bootstrap)?;
        Ok(self.t)
    }

    /// How long one operation (a batch of up to 1024 keys) may run while
    /// it waits for locks, claims and consistent re-reads; past it, it gives
    /// back what it holds and fails with [`Error::Deadline`] (default 30 s,
    /// times `FABKIT_TIMEOUT_SCALE`). Giving back after an error is retried
    /// for one more deadline.
    /// At least 1 µs, at most [`MAX_DEADLINE`]; the table's clock
    /// ([`SystemClock`]) ticks at the kernel's coarse resolution (1 to 10
    /// ms), so a deadline shorter than a tick ends up to a tick late.
    pub fn set_deadline(&mut self, d: Duration) -> Result<()> {
        if d < Duration::from_micros(1) || d > MAX_DEADLINE {
            return Err(Error::Config(format!(
                "a deadline of {d:?} is out of range: give 1 us to {} s",
                MAX_DEADLINE.as_secs()
            )));
        }
        self.shape.deadline = d;
        Ok(())
    }

    /// How many batches one operation keeps in flight at most, each
    /// serving a part of its keys (one part per [`LANE_KEYS`] keys), so the
    /// fabric carries one part's batch while the table plans another's
    /// next one. From 1 (one batch at a time, all keys of a run in it) to
    /// [`MAX_DEPTH`], and never more than the transport keeps
    /// ([`Caps::depth`](crate::transport::Caps::depth): on libfabric, as
    /// many windows as its completion queue holds with one to spare; 1 on
    /// MPI and on the same-node path without a fabric), which is also the
    /// default. On a
    /// transport of depth 1 more parts would only run one after another.
    /// Accumulating writes and coarse use one: coarse's parts would
    /// contend for the one region lock.
    pub fn set_depth(&mut self, depth: usize) -> Result<()> {
        if !(1..=MAX_DEPTH).contains(&depth) {
            return Err(Error::Config(format!(
                "a depth of {depth} batches in flight is out of range: give 1 to {MAX_DEPTH}"
            )));
        }
        self.depth = depth.min(self.t.caps().depth.max(1));
        Ok(())
    }

    /// Most batches one operation keeps in flight (see [`Dht::set_depth`]).
    pub fn depth(&self) -> usize {
        self.depth
    }

    /// How many batches in flight an operation on `keys` keys uses: one
    /// per [`LANE_KEYS`] keys of a run, at most [`Dht::depth`]; one for
    /// coarse.
    pub fn lanes_for(&self, keys: usize) -> usize {
        if self.cfg.variant == Variant::Coarse {
            return 1;
        }
        let parts = keys.min(MAX_RUN) / self.lane_keys;
        self.depth.min(parts).max(1)
    }

    /// Test hook: the fewest keys a lane serves (default [`LANE_KEYS`],
    /// at least 1), so that tests of small batches run several lanes.
    #[doc(hidden)]
    pub fn set_lane_keys(&mut self, n: usize) {
        self.lane_keys = n.max(1);
    }

    /// The deadline of each operation.
    pub fn deadline(&self) -> Duration {
        self.shape.deadline
    }

    /// Takes the time, and waits between retries, from `clock` (a
    /// [`crate::clock::TestClock`] drives deadlines in tests).
    pub fn set_clock(&mut self, clock: Arc<dyn Clock>) {
        self.clock = clock;
    }

    pub(crate) fn check_key(&self, key: &[u8]) -> Result<()> {
        if key.len() != self.cfg.key_len {
            return Err(Error::Length {
                what: "key",
                got: key.len(),
                expected: self.cfg.key_len,
            });
        }
        Ok(())
    }

    pub(crate) fn check_value(&self, value: &[u8]) -> Result<()> {
        if value.len() != self.cfg.value_len {
            return Err(Error::Length {
                what: "value",
                got: value.len(),
                expected: self.cfg.value_len,
            });
        }
        Ok(())
    }

    /// Executes one batch, counting it.
    pub(crate) fn exec(&self, ops: &mut [Op<'_>]) -> Result<()> {
        if ops.is_empty() {
            return Ok(());
        }
        let mut aimed = Aimed::default();
        aimed.count(ops, self.shape.rank);
        {
            let mut s = self.stats.lock().unwrap();
            s.remote_ops += ops.len() as u64;
            s.batches += 1;
            aimed.add_to(&mut s);
        }
        self.t.execute(ops).map_err(Error::transport)
    }

    pub(crate) fn count(&self, f: impl FnOnce(&mut Stats)) {
        f(&mut self.stats.lock().unwrap());
    }

    /// Reads one key.
    pub fn read(&self, key: &[u8]) -> Result<Read> {
        Ok(self.read_many(&[key])?.pop().expect("one outcome per key"))
    }

    /// Writes one key.
    pub fn write(&self, key: &[u8], value: &[u8]) -> Result<Write> {
        Ok(self
            .write_many(&[(key, value)])?
            .pop()
            .expect("one outcome per key"))
    }

    /// Reads many keys with their remote operations overlapped: each round
    /// advances every unresolved key by one step in one batch.
    pub fn read_many(&self, keys: &[&[u8]]) -> Result<Vec<Read>> {
        let mut out = Vec::with_capacity(keys.len());
        self.read_with(keys, |f, v| {
            out.push(match f {
                Found::Hit => Read::Hit(v.to_vec()),
                Found::Miss => Read::Miss,
                Found::Corrupt => Read::Corrupt,
            })
        })?;
        Ok(out)
    }

    /// [`Dht::read_many`] into the caller's buffers, allocating nothing once
    /// the table is warm: key `i`'s value lands in
    /// `values[i * value_len..(i + 1) * value_len]` when `found[i]` is a
    /// hit (the bytes of a miss are left as they were). `values` and `found`
    /// must be exactly as long as `keys` needs.
    pub fn read_into(&self, keys: &[&[u8]], values: &mut [u8], found: &mut [Found]) -> Result<()> {
        let vl = self.cfg.value_len;
        self.check_buffers(keys.len(), values.len(), found.len())?;
        let mut i = 0;
        self.read_with(keys, |f, v| {
            found[i] = f;
            if f == Found::Hit {
                values[i * vl..(i + 1) * vl].copy_from_slice(v);
            }
            i += 1;
        })
    }

    /// Reads `keys` and hands each outcome, in key order, to `each` with
    /// the value found (empty unless a hit); counts them.
    fn read_with(&self, keys: &[&[u8]], mut each: impl FnMut(Found, &[u8])) -> Result<()> {
        for k in keys {
            self.check_key(k)?;
        }
        let vl = self.cfg.value_len;
        let (mut hits, mut misses, mut corrupt) = (0u64, 0u64, 0u64);
        self.with_work(|w| {
            self.run(Mode::Read, keys, &[], w)?;
            for (i, o) in w.out.iter().enumerate() {
                match o {
                    Outcome::Hit => {
                        hits += 1;
                        each(Found::Hit, &w.found[i * vl..(i + 1) * vl]);
                    }
                    Outcome::Corrupt => {
                        corrupt += 1;
                        each(Found::Corrupt, &[]);
                    }
                    _ => {
                        misses += 1;
                        each(Found::Miss, &[]);
                    }
                }
            }
            Ok(())
        })?;
        self.count(|s| {
            s.reads += keys.len() as u64;
            s.hits += hits;
            s.misses += misses;
            s.corrupt += corrupt;
        });
        Ok(())
    }

    /// Refuses caller buffers of other lengths than `keys` keys need.
    fn check_buffers(&self, keys: usize, values: usize, out: usize) -> Result<()> {
        let need = keys.checked_mul(self.cfg.value_len);
        if need != Some(values) || out != keys {
            return Err(Error::Config(format!(
                "buffers for {keys} keys: values of {values} B (need {} B) and {out} outcomes \
                 (need {keys})",
                need.map_or_else(|| "more than usize".into(), |n| n.to_string())
            )));
        }
        Ok(())
    }

    /// Chunked only: returns the key's value if present, else inserts it;
    /// `Full` when every probed chunk is full (nothing is evicted).
    pub fn find_or_put_many(&self, items: &[(&[u8], &[u8])]) -> Result<Vec<FindOrPut>> {
        if self.cfg.variant != Variant::Chunked {
            return Err(Error::Config(format!(
                "find_or_put is the chunked variant's operation; this table is {:?}",
                self.cfg.variant
            )));
        }
        for (k, v) in items {
            self.check_key(k)?;
            self.check_value(v)?;
        }
        let keys: Vec<&[u8]> = items.iter().map(|(k, _)| *k).collect();
        let values: Vec<&[u8]> = items.iter().map(|(_, v)| *v).collect();
        let vl = self.cfg.value_len;
        let out = self.with_work(|w| {
            self.run(Mode::FindOrPut, &keys, &values, w)?;
            Ok(w.out
                .iter()
                .enumerate()
                .map(|(i, o)| match o {
                    Outcome::Found => FindOrPut::Found(w.found[i * vl..(i + 1) * vl].to_vec()),
                    Outcome::Inserted => FindOrPut::Inserted,
                    _ => FindOrPut::Full,
                })
                .collect::<Vec<FindOrPut>>())
        })?;
        self.count(|s| {
            for r in &out {
                match r {
                    FindOrPut::Found(_) => {
                        s.reads += 1;
                        s.hits += 1
                    }
                    FindOrPut::Inserted => {
                        s.writes += 1;
                        s.inserts += 1
                    }
                    FindOrPut::Full => s.writes += 1,
                }
            }
        });
        Ok(out)
    }

    /// Writes many keys with their remote operations overlapped.
    pub fn write_many(&self, items: &[(&[u8], &[u8])]) -> Result<Vec<Write>> {
        let keys: Vec<&[u8]> = items.iter().map(|(k, _)| *k).collect();
        let values: Vec<&[u8]> = items.iter().map(|(_, v)| *v).collect();
        let mut out = vec![Write::Inserted; items.len()];
        self.write_into(&keys, &values, &mut out)?;
        Ok(out)
    }

    /// [`Dht::write_many`] with keys and values in two slices of the same
    /// length and the outcomes into the caller's `out` (as long as `keys`),
    /// allocating nothing once the table is warm.
    pub fn write_into(&self, keys: &[&[u8]], values: &[&[u8]], out: &mut [Write]) -> Result<()> {
        if values.len() != keys.len() || out.len() != keys.len() {
            return Err(Error::Config(format!(
                "{} keys need as many values and outcomes, not {} and {}",
                keys.len(),
                values.len(),
                out.len()
            )));
        }
        for (k, v) in keys.iter().zip(values) {
            self.check_key(k)?;
            self.check_value(v)?;
        }
        self.with_work(|w| {
            self.run(Mode::Write, keys, values, w)?;
            for (o, r) in out.iter_mut().zip(&w.out) {
                *o = r.written();
            }
            Ok(())
        })?;
        self.count_writes(out.iter().copied());
        Ok(())
    }

    /// Counts `stored`, the outcomes of writes that stored.
    fn count_writes(&self, stored: impl Iterator<Item = Write>) {
        self.count(|s| {
            for w in stored {
                s.writes += 1;
                match w {
                    Write::Inserted => s.inserts += 1,
                    Write::Updated => s.updates += 1,
                    Write::Evicted => s.evictions += 1,
                }
            }
        });
    }

    /// Accumulates into `key`'s value: see [`Dht::update_many`].
    pub fn update(&self, key: &[u8], f: impl FnOnce(&mut [u8]) -> bool) -> Result<Write> {
        let mut f = Some(f);
        // Called once (see update_into); a second call would decline.
        let mut once = |_: usize, v: &mut [u8]| f.take().is_some_and(|f| f(v));
        let mut out = [Write::Inserted];
        self.update_into(&[key], &mut once, &mut out)?;
        Ok(out[0])
    }

    /// Writes each key with a value computed from the one it replaces,
    /// while the variant holds the bucket, so no other writer comes in
    /// between (an accumulation: counts, sums, merged records). `f` gets
    /// the key's index in `keys` and its value to update in place: the old
    /// value, or zeros when the key was absent (inserted, or pushing out
    /// another key); it returns false to leave the bucket as it was (the
    /// outcome still says what the write would have been; the counters
    /// count it as no write). It is called once per key, while holds are
    /// taken: keep it short, and do not call the table from it.
    ///
    /// An error before a key's bucket is given back leaves it as it was
    /// (the bucket is put back as read under the hold), so a retry counts
    /// once; an error in giving it back (the release of its lock or claim,
    /// whose retry then releases it) leaves the value stored, and so may a
    /// chunked claim another writer took over ([`Error::Lost`]).
    ///
    /// The variants that hold a bucket while they write offer it (fine,
    /// coarse, chunked); lock-free writers hold nothing, so its tables
    /// refuse it ([`Error::Config`]). A chunked accumulation never takes
    /// a stalled claim over: it fails at its deadline instead.
    pub fn update_many(
        &self,
        keys: &[&[u8]],
        f: &mut dyn FnMut(usize, &mut [u8]) -> bool,
    ) -> Result<Vec<Write>> {
        let mut out = vec![Write::Inserted; keys.len()];
        self.update_into(keys, f, &mut out)?;
        Ok(out)
    }

    /// [`Dht::update_many`] with the outcomes into the caller's `out` (as
    /// long as `keys`), allocating nothing once the table is warm.
    pub fn update_into(
        &self,
        keys: &[&[u8]],
        f: &mut dyn FnMut(usize, &mut [u8]) -> bool,
        out: &mut [Write],
    ) -> Result<()> {
        if self.cfg.variant == Variant::Lockfree {
            return Err(Error::Config(
                "accumulating writes need a variant that holds the bucket while it writes \
                 (fine, coarse or chunked); this table is lock-free"
                    .into(),
            ));
        }
        if out.len() != keys.len() {
            return Err(Error::Config(format!(
                "{} keys need as many outcomes, not {}",
                keys.len(),
                out.len()
            )));
        }
        for k in keys {
            self.check_key(k)?;
        }
        // Counted as they store: a declined key is no write.
        let (mut inserts, mut updates, mut evictions) = (0u64, 0u64, 0u64);
        let mut counting = |i: usize, w: Write, v: &mut [u8]| {
            let keep = f(i, v);
            if keep {
                match w {
                    Write::Inserted => inserts += 1,
                    Write::Updated => updates += 1,
                    Write::Evicted => evictions += 1,
                }
            }
            keep
        };
        self.with_work(|w| {
            self.run_updating(Mode::Write, keys, &[], w, Some(&mut counting))?;
            for (o, r) in out.iter_mut().zip(&w.out) {
                *o = r.written();
            }
            Ok(())
        })?;
        self.count(|s| {
            s.writes += inserts + updates + evictions;
            s.inserts += inserts;
            s.updates += updates;
            s.evictions += evictions;
        });
        Ok(())
    }

    /// Runs `f` on the table's reusable buffers, or on fresh ones while
    /// another thread uses them.
    fn with_work<R>(&self, f: impl FnOnce(&mut Work<T::Lane>) -> Result<R>) -> Result<R> {
        match self.work.try_lock() {
            Ok(mut w) => f(&mut w),
            Err(_) => f(&mut Work::new(false)),
        }
    }

    /// Makes room for `want` machines in `w` and says how many it has (at
    /// least 1): the table's own buffers get the transport's lanes, made
    /// once (a lane that cannot be made leaves fewer; with none, a default
    /// lane runs each batch in `post`), fresh buffers one default lane.
    fn lanes(&self, w: &mut Work<T::Lane>, want: usize) -> usize {
        let want = if w.own { want.max(1) } else { 1 };
        while w.lanes.len() < want {
            let lane = if w.own {
                match self.t.lane() {
                    Ok(l) => l,
                    Err(_) if w.lanes.is_empty() => T::Lane::default(),
                    Err(_) => break,
                }
            } else {
                T::Lane::default()
            };
            w.lanes.push(LaneWork {
                lane,
                batch: Batch::default(),
                ops: Vec::new(),
            });
        }
        want.min(w.lanes.len())
    }

    /// Runs `mode` over `keys` (and `values`), in runs of at most
    /// `MAX_RUN` keys; outcomes and found values land in `w.out` and
    /// `w.found`, one per key.
    fn run(
        &self,
        mode: Mode,
        keys: &[&[u8]],
        values: &[&[u8]],
        w: &mut Work<T::Lane>,
    ) -> Result<()> {
        self.run_updating(mode, keys, values, w, None)
    }

    /// [`Dht::run`], for writes whose values `update` computes from the
    /// ones they replace (then `values` is empty).
    fn run_updating(
        &self,
        mode: Mode,
        keys: &[&[u8]],
        values: &[&[u8]],
        w: &mut Work<T::Lane>,
        mut update: Option<&mut Update<'_>>,
    ) -> Result<()> {
        let vl = self.cfg.value_len;
        w.out.clear();
        w.out.resize(keys.len(), Outcome::Pending);
        // Values found land here; a key's bytes are read only when it hits,
        // so the buffer only grows and is never cleared.
        let need = keys.len() * vl;
        if w.found.len() < need {
            w.found.resize(need, 0);
        }
        let dl = self.cfg.layout().data_len();
        if update.is_some() && w.before.len() < keys.len() * dl {
            w.before.resize(keys.len() * dl, 0);
        }
        let want = if update.is_some() {
            1
        } else {
            self.lanes_for(keys.len())
        };
        let k = self.lanes(w, want);
        let Work {
            lanes,
            probes,
            out,
            found,
            before,
            ..
        } = w;
        let lanes = &mut lanes[..k];
        for (n, ks) in keys.chunks(MAX_RUN).enumerate() {
            let first = n * MAX_RUN;
            let vs = if values.is_empty() {
                values
            } else {
                &values[first..first + ks.len()]
            };
            probes.clear();
            probes.extend(
                ks.iter()
                    .map(|k| Probe::new(&self.shape, self.key_hash.hash(k))),
            );
            // Runs of one table take tag bases MAX_RUN apart, so the tags of
            // 64 runs in flight at once are all distinct; tables start at a
            // random base, so two tables of one rank rarely meet. The parts
            // of a run on several lanes take tags of their keys' places in
            // it, so theirs are distinct too.
            let seq = self.seq.fetch_add(MAX_RUN as u32, Ordering::Relaxed) as u16;
            let now = self.clock.now();
            // The run's keys in `k` parts (fewer when it is short), one
            // machine each.
            let per = ks.len().div_ceil(k).max(1);
            let mut parts: [Option<Run<'_>>; MAX_DEPTH] = std::array::from_fn(|_| None);
            let outs = out[first..first + ks.len()].chunks_mut(per);
            let founds = found[first * vl..(first + ks.len()) * vl].chunks_mut(per * vl);
            let mut befores = (update.is_some())
                .then(|| before[first * dl..(first + ks.len()) * dl].chunks_mut(per * dl));
            for (j, (((kp, op), fp), pp)) in ks
                .chunks(per)
                .zip(outs)
                .zip(founds)
                .zip(probes.chunks_mut(per))
                .enumerate()
            {
                let at = j * per;
                let vp = if vs.is_empty() {
                    vs
                } else {
                    &vs[at..at + kp.len()]
                };
                parts[j] = Some(Run::new(
                    &self.shape,
                    mode,
                    kp,
                    vp,
                    op,
                    fp,
                    pp,
                    seq.wrapping_add(at as u16),
                    now,
                ));
            }
            let used = ks.len().div_ceil(per);
            // The caller numbers keys across runs (an accumulation has one
            // part).
            let mut shifted;
            if let (Some(f), Some(bs)) = (update.as_mut(), befores.as_mut()) {
                shifted = move |i: usize, w: Write, v: &mut [u8]| f(first + i, w, v);
                let run = parts[0].as_mut().expect("a run has a part");
                run.update = Some(Updating {
                    f: &mut shifted,
                    before: bs.next().expect("a run has a part"),
                });
            }
            let lanes = &mut lanes[..used];
            let parts = &mut parts[..used];
            match self.cfg.variant {
                Variant::Lockfree => self.drive_parts(parts, Lockfree::new, lanes)?,
                Variant::Fine => self.drive_parts(parts, Fine::new, lanes)?,
                Variant::Coarse => self.drive_parts(parts, Coarse::new, lanes)?,
                Variant::Chunked => self.drive_parts(parts, Chunked::new, lanes)?,
            }
        }
        if let Some(i) = out.iter().position(|o| *o == Outcome::Pending) {
            return Err(Error::Internal(format!(
                "the {:?} variant's {mode:?} ended with key {} undecided",
                self.cfg.variant,
                crate::outcome::key_hex(keys[i])
            )));
        }
        Ok(())
    }

    /// Makes a machine of each part (`make`) and drives them, one per
    /// lane. One part, the common case, is driven where it is made: the
    /// machines are moved nowhere (a run's machine is hundreds of bytes,
    /// and moving several per operation showed in the profile).
    fn drive_parts<'r, M: Machine>(
        &self,
        parts: &mut [Option<Run<'r>>],
        make: fn(Run<'r>) -> M,
        lanes: &mut [LaneWork<T::Lane>],
    ) -> Result<()> {
        let take = |p: &mut Option<Run<'r>>| make(p.take().expect("a run per lane"));
        if let [one] = parts {
            return self.drive(std::slice::from_mut(&mut take(one)), lanes);
        }
        let mut ms: Vec<M> = parts.iter_mut().map(take).collect();
        self.drive(&mut ms, lanes)
    }

    /// The driver: posts what each machine plans on its lane, feeds back
    /// completions or the error with the time, until every machine is done.
    /// While some batches are in flight it completes one that is ready, or
    /// else waits for the oldest; a machine that asks to wait before its
    /// next batch waits alone, while the others go on. Machine `i` of
    /// `ms` runs on `lanes[i]` (one per machine).
    fn drive<M: Machine>(&self, ms: &mut [M], lanes: &mut [LaneWork<T::Lane>]) -> Result<()> {
        let k = ms.len();
        debug_assert_eq!(k, lanes.len());
        let mut c = Tally::default();
        let mut at = [At::Done; MAX_DEPTH];
        let now = self.clock.now();
        for i in 0..k {
            at[i] = At::Plan(ms[i].start(&mut lanes[i].batch, now));
        }
        let mut posted = 0u64;
        loop {
            for i in 0..k {
                let m = &mut ms[i];
                while let At::Plan(step) = at[i] {
                    at[i] = self.step(m, &mut lanes[i], step, &mut c, &mut posted);
                }
            }
            // A paused machine whose time has come posts now.
            if at[..k].iter().any(|a| matches!(a, At::Paused(_))) {
                let now = self.clock.now();
                for i in 0..k {
                    if matches!(at[i], At::Paused(t) if t <= now) {
                        at[i] = self.post(&mut ms[i], &mut lanes[i], &mut c, &mut posted);
                    }
                }
                if at[..k].iter().any(|a| matches!(a, At::Plan(_))) {
                    continue;
                }
            }
            // Complete a batch in flight: a ready one, else the oldest.
            let mut flying = 0;
            let mut oldest: Option<(usize, u64)> = None;
            for (i, a) in at[..k].iter().enumerate() {
                if let At::Flying(n) = *a {
                    flying += 1;
                    if oldest.is_none_or(|(_, o)| n < o) {
                        oldest = Some((i, n));
                    }
                }
            }
            let ready = if flying > 1 {
                (0..k).find(|&i| matches!(at[i], At::Flying(_)) && self.t.ready(&lanes[i].lane))
            } else {
                None
            };
            if let Some(i) = ready.or(oldest.map(|(i, _)| i)) {
                at[i] = At::Plan(self.complete(&mut ms[i], &mut lanes[i]));
                continue;
            }
            // Nothing in flight: wait for the first paused machine, if any.
            let first = (0..k)
                .filter_map(|i| match at[i] {
                    At::Paused(t) => Some((i, t)),
                    _ => None,
                })
                .min_by_key(|&(_, t)| t);
            let Some((i, until)) = first else {
                break;
            };
            let now = self.clock.now();
            if until > now {
                self.clock.pause(until - now);
            }
            at[i] = self.post(&mut ms[i], &mut lanes[i], &mut c, &mut posted);
        }
        let mut st = Stats {
            remote_ops: c.remote_ops,
            batches: c.batches,
            remote_bytes: c.remote_bytes,
            ..Stats::default()
        };
        c.aimed.add_to(&mut st);
        let mut first = Ok(());
        for m in ms.iter_mut() {
            let r = m.finish(&mut st);
            if first.is_ok() {
                first = r;
            }
        }
        self.count(|s| s.add(&st));
        first
    }

    /// Takes one step of a machine: where it is after.
    fn step<M: Machine>(
        &self,
        m: &mut M,
        l: &mut LaneWork<T::Lane>,
        step: Step,
        c: &mut Tally,
        posted: &mut u64,
    ) -> At {
        let b = &mut l.batch;
        match step {
            Step::Done => At::Done,
            Step::Issue => {
                if let Some(d) = b.wait.take() {
                    let now = self.clock.now();
                    return At::Paused(now.checked_add(d).unwrap_or(now));
                }
                self.post(m, l, c, posted)
            }
            Step::LockRegion { rank, exclusive } => {
                b.clear();
                let r = self.t.lock_region(rank, exclusive);
                let now = self.clock.now();
                At::Plan(match r {
                    Ok(native) => {
                        b.native = native;
                        c.remote_ops += u64::from(native);
                        c.remote_bytes += 8 * u64::from(native);
                        c.aimed.lock(rank, self.shape.rank, u64::from(native));
                        m.on_complete(b, now)
                    }
                    Err(e) => m.on_error(Error::transport(e), b, now),
                })
            }
            Step::UnlockRegion { rank } => {
                b.clear();
                c.remote_ops += 1;
                c.remote_bytes += 8;
                c.aimed.lock(rank, self.shape.rank, 1);
                let r = self.t.unlock_region(rank);
                let now = self.clock.now();
                At::Plan(match r {
                    Ok(()) => m.on_complete(b, now),
                    Err(e) => m.on_error(Error::transport(e), b, now),
                })
            }
        }
    }

    /// Posts a machine's planned batch on its lane, counting it: in
    /// flight, or (done at once, or failed) fed back.
    fn post<M: Machine>(
        &self,
        m: &mut M,
        l: &mut LaneWork<T::Lane>,
        c: &mut Tally,
        posted: &mut u64,
    ) -> At {
        if l.batch.is_empty() {
            // Nothing to send (a pause before a re-plan): not a batch.
            return At::Plan(m.on_complete(&mut l.batch, self.clock.now()));
        }
        c.remote_ops += l.batch.len() as u64;
        c.remote_bytes += l.batch.payload();
        c.batches += 1;
        let mut v = recycle(std::mem::take(&mut l.ops));
        l.batch.as_ops(&mut v);
        c.aimed.count(&v, self.shape.rank);
        let r = self.t.post(&mut l.lane, &mut v);
        l.ops = recycle(v);
        match r {
            Ok(true) => {
                *posted += 1;
                At::Flying(*posted)
            }
            Ok(false) => At::Plan(m.on_complete(&mut l.batch, self.clock.now())),
            Err(e) => At::Plan(m.on_error(Error::transport(e), &mut l.batch, self.clock.now())),
        }
    }

    /// Completes a machine's batch in flight (waiting for it) and feeds
    /// the outcome back.
    fn complete<M: Machine>(&self, m: &mut M, l: &mut LaneWork<T::Lane>) -> Step {
        let mut v = recycle(std::mem::take(&mut l.ops));
        l.batch.as_ops(&mut v);
        let r = self.t.complete(&mut l.lane, &mut v);
        l.ops = recycle(v);
        let now = self.clock.now();
        match r {
            Ok(()) => m.on_complete(&mut l.batch, now),
            Err(e) => m.on_error(Error::transport(e), &mut l.batch, now),
        }
    }
}

/// The operations of a run by where they go: to this rank itself, or
/// across to another (by kind), which is what a fabric's rates bound.
#[derive(Default)]
struct Aimed {
    itself: u64,
    reads: u64,
    writes: u64,
    atomics: u64,
}

impl Aimed {
    fn count(&mut self, ops: &[Op<'_>], me: usize) {
        for op in ops {
            if op.target().rank == me {
                self.itself += 1;
                continue;
            }
            match op.kind() {
                OpKind::Read | OpKind::Recv => self.reads += 1,
                OpKind::Write | OpKind::Send => self.writes += 1,
                OpKind::CompareAndSwap | OpKind::FetchAdd | OpKind::Fetch | OpKind::Swap => {
                    self.atomics += 1
                }
            }
        }
    }

    fn add_to(&self, s: &mut Stats) {
        s.self_ops += self.itself;
        s.cross_reads += self.reads;
        s.cross_writes += self.writes;
        s.cross_atomics += self.atomics;
    }

    /// `n` region-lock operations on `rank`'s window.
    fn lock(&mut self, rank: usize, me: usize, n: u64) {
        if rank == me {
            self.itself += n;
        } else {
            self.atomics += n;
        }
    }
}

fn stats_to_bytes(s: &Stats) -> Vec<u8> {
    // A fixed binary form: no serde format crate needed for a few counters.
    s.to_array().iter().flat_map(|x| x.to_le_bytes()).collect()
}

fn stats_from_bytes(b: &[u8]) -> Stats {
    // A counter a peer did not send (a shorter, older form) is 0.
    let mut a = [0u64; crate::outcome::COUNTERS];
    for (i, x) in a.iter_mut().enumerate() {
        *x = b
            .get(i * 8..i * 8 + 8)
            .map_or(0, |w| u64::from_le_bytes(w.try_into().expect("8 bytes")));
    }
    Stats::from_array(a)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_counter_survives_the_wire_form_and_a_shorter_one_reads_as_zeros() {
        // Every counter distinct, so two swapped in the wire form show.
        let mut a = [0u64; crate::outcome::COUNTERS];
        for (i, x) in a.iter_mut().enumerate() {
            *x = 1000 + i as u64;
        }
        let s = Stats::from_array(a);
        assert_eq!(
            (s.reads, s.remote_bytes, s.cross_atomics),
            (1000, 1013, 1017)
        );
        let n = a.len();
        let bytes = stats_to_bytes(&s);
        assert_eq!(bytes.len(), n * 8);
        assert_eq!(stats_from_bytes(&bytes), s);
        // An older peer's 14 counters: the new ones are 0.
        let old = stats_from_bytes(&bytes[..14 * 8]);
        assert_eq!(
            (old.remote_bytes, old.self_ops, old.cross_atomics),
            (1013, 0, 0)
        );
    }
}
