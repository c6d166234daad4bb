//! The table: collective creation (from a [`Config`]), its settings and
//! statistics. Its reads and writes are in `access`; the one driver of the
//! variants' state machines ([`crate::variant`]), which every operation
//! goes through, is in `drive`.

mod access;
mod drive;
mod route;

use std::sync::atomic::AtomicU32;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use fabkit_core::Bootstrap;

use crate::clock::{Clock, SystemClock};
use crate::config::{Config, MAX_DEADLINE};
use crate::layout::Variant;
use crate::message::{Messenger, NoMessages};
use crate::outcome::{Error, Result, Stats};
use crate::placement::{KeyHash, Placement};
use crate::transport::Transport;
use crate::variant::{Shape, MAX_RUN};

use drive::Work;
pub(crate) use route::Links;
pub use route::{fits_a_message, MAX_MESSAGE};

/// A distributed hash table over a transport, and (on the message path)
/// a messenger to the ranks the transport does not reach by memory.
pub struct Dht<T: Transport, M: Messenger = NoMessages> {
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
    /// The message path: to which ranks keys go as requests, and the
    /// service answering this rank's share; none on tables that reach
    /// every rank through the transport.
    pub(crate) links: Option<Links<M>>,
}

/// Most lanes one operation drives at once.
pub const MAX_DEPTH: usize = 8;

/// Fewest keys of a run one lane serves: a batch has a fixed cost (a
/// round of posts, a completion read), and lanes of a few keys each pay
/// it for little. Across two hosts over `tcp;ofi_rxm`, batches of 64 in
/// lanes of 8 keys wrote 0.76-0.92x as fast as one lane; lanes of 32 were
/// level with it or faster (see `results/dht-bench/cross-host`).
pub const LANE_KEYS: usize = 32;

impl<T: Transport, M: Messenger> std::fmt::Debug for Dht<T, M> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Dht")
            .field("transport", &self.t.name())
            .field("messages", &self.links.as_ref().map(|l| l.m.name()))
            .field("config", &self.cfg)
            .finish()
    }
}

/// A start for a table's tag sequence that differs between tables made one
/// after another (a late completion of a freed table's tag is not taken for
/// a new one's). Nothing secret: the time and a process-wide count, mixed.
fn random_base() -> u32 {
    static MADE: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let t = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64);
    fabkit_core::rng::mix(t ^ MADE.fetch_add(1, std::sync::atomic::Ordering::Relaxed)) as u32
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
        Dht::<T>::check_and_agree(&t, &cfg, boot, &key_hash, false)?;
        Ok(Dht::assemble(t, cfg, key_hash, None))
    }
}

impl<T: Transport, M: Messenger> Dht<T, M> {
    /// Checks what this rank can before anything is sent (the
    /// configuration, the region, atomics, ordering; on the message path
    /// `messages`, its own region reached by memory), then agrees the
    /// configuration with every rank: a problem on one rank is an error on
    /// every rank. Collective.
    pub(crate) fn check_and_agree(
        t: &T,
        cfg: &Config,
        boot: &dyn Bootstrap,
        key_hash: &KeyHash,
        messages: bool,
    ) -> Result<()> {
        let local = cfg
            .validate()
            .and_then(|()| Dht::<T, M>::check_local(t, cfg, messages));
        // Every rank reaches the exchange, so a local problem on one rank
        // cannot leave the others waiting; each then reports what it saw.
        let mut mine = cfg.encode();
        mine.push(u8::from(key_hash.is_custom()));
        mine.push(u8::from(messages));
        let all = boot.allgather(&mine).map_err(Error::Bootstrap)?;
        local?;
        if let Some(r) = all.iter().position(|c| *c != mine) {
            return Err(Error::Mismatch(format!(
                "rank {} has {:?}, rank {r} has a different variant, key/value length, \
                 bucket count, candidate count or path, a key hash of its own where this \
                 rank has none, or the message path where this rank has not (or the reverse)",
                boot.rank(),
                cfg
            )));
        }
        Ok(())
    }

    /// What one rank checks alone.
    fn check_local(t: &T, cfg: &Config, messages: bool) -> Result<()> {
        let need = cfg.region_len();
        let have = t.region_len(t.rank());
        let caps = t.caps();
        if have < need {
            return Err(Error::RegionTooSmall {
                rank: t.rank(),
                have,
                need,
                buckets: cfg.buckets,
                variant: cfg.variant,
            });
        }
        if cfg.variant.needs_atomics() && !caps.atomics {
            return Err(Error::NoAtomics {
                variant: cfg.variant,
                transport: t.name(),
            });
        }
        if !caps.delivers {
            return Err(Error::Unordered {
                transport: t.name(),
            });
        }
        if messages && !t.by_memory(t.rank()) {
            return Err(Error::Config(format!(
                "the message path runs peers' requests on this rank's own region, which {} \
                 does not reach by memory",
                t.name()
            )));
        }
        Ok(())
    }

    /// The table over `t`, for a configuration every rank agreed.
    pub(crate) fn assemble(
        t: T,
        cfg: Config,
        key_hash: KeyHash,
        links: Option<Links<M>>,
    ) -> Dht<T, M> {
        let caps = t.caps();
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
        Dht {
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
            links,
        }
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

    /// This rank's statistics so far (on the message path, with what its
    /// service ran for peers).
    pub fn stats(&self) -> Stats {
        let mut s = *self.stats.lock().unwrap();
        if let Some(l) = &self.links {
            s.add(&l.served());
        }
        s
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
        // After the barrier no rank sends another request: the service can
        // stop. It settles its last answers first, and those may still be
        // on their way to a peer: every rank's service stops before any
        // rank closes the endpoints they travel to (a provider may touch
        // the receiver's endpoint until the send completes).
        boot.barrier().map_err(Error::Bootstrap)?;
        let Dht { t, mut links, .. } = self;
        if let Some(l) = links.as_mut() {
            l.stop_service();
            boot.barrier().map_err(Error::Bootstrap)?;
        }
        drop(links);
        Ok(t)
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

    pub(crate) fn count(&self, f: impl FnOnce(&mut Stats)) {
        f(&mut self.stats.lock().unwrap());
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
