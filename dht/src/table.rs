//! The table: configuration, collective creation, operations and
//! statistics. The variants' probing logic lives in [`crate::variant`].

use std::sync::Mutex;

use fabkit_fabric::bootstrap::Bootstrap;
use serde::{Deserialize, Serialize};

use crate::layout::{Layout, Variant};
use crate::placement::{default_candidates, hash_key, Placement};
use crate::transport::{Op, Transport};

/// Errors of the DHT.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A key or value of the wrong length.
    #[error("{what} is {got} B, but this table was created for {expected} B {what}s")]
    Length {
        /// "key" or "value".
        what: &'static str,
        /// Its length.
        got: usize,
        /// The table's.
        expected: usize,
    },
    /// The configuration cannot work.
    #[error("invalid DHT configuration: {0}")]
    Config(String),
    /// The transport's region cannot hold the table.
    #[error(
        "rank {rank}'s region is {have} B but {buckets} {variant:?} buckets need {need} B: \
         give the transport a larger region (Config::region_len) or fewer buckets"
    )]
    RegionTooSmall {
        /// Rank.
        rank: usize,
        /// Bytes available.
        have: usize,
        /// Bytes needed.
        need: usize,
        /// Buckets asked for.
        buckets: u64,
        /// Variant.
        variant: Variant,
    },
    /// The variant needs atomics the transport does not have.
    #[error(
        "the {variant:?} variant needs remote atomics, which {transport} does not offer: \
         use the lockfree variant, or a provider with atomics (see `fabkit info`)"
    )]
    NoAtomics {
        /// Variant.
        variant: Variant,
        /// Transport name.
        transport: String,
    },
    /// Ranks created the table differently.
    #[error("ranks disagree on the table: {0}")]
    Mismatch(String),
    /// The transport failed.
    #[error(transparent)]
    Transport(#[from] fabkit_fabric::Error),
}

/// Result with the DHT [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// How a table is laid out; identical on every rank.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Config {
    /// Algorithm.
    pub variant: Variant,
    /// Fixed key length in bytes.
    pub key_len: usize,
    /// Fixed value length in bytes.
    pub value_len: usize,
    /// Buckets per rank.
    pub buckets: u64,
    /// Candidate buckets per key (0: the published default for `buckets`).
    pub candidates: u32,
    /// Re-reads of a bucket whose checksum fails before it is marked invalid.
    pub checksum_retries: u32,
    /// Chunked: buckets per chunk (C); `candidates` counts chunks.
    pub chunk: u32,
}

impl Config {
    /// POET's records (80 B keys, 104 B values), 4096 buckets per rank.
    pub fn new(variant: Variant) -> Config {
        Config {
            variant,
            key_len: 80,
            value_len: 104,
            buckets: 4096,
            candidates: 0,
            checksum_retries: 3,
            chunk: 8,
        }
    }

    /// The bucket layout.
    pub fn layout(&self) -> Layout {
        Layout::new(self.variant, self.key_len, self.value_len)
    }

    /// Bytes of region each rank must expose.
    pub fn region_len(&self) -> usize {
        self.layout().region_len(self.buckets)
    }

    fn candidates(&self) -> u32 {
        if self.candidates == 0 {
            default_candidates(self.buckets)
        } else {
            self.candidates
        }
    }

    /// Checks what can be checked before anything is allocated or sent.
    pub fn validate(&self) -> Result<()> {
        if self.key_len == 0 || self.value_len == 0 {
            return Err(Error::Config(
                "keys and values must be at least 1 byte".into(),
            ));
        }
        if self.variant == Variant::Chunked && self.chunk == 0 {
            return Err(Error::Config(
                "chunked needs at least 1 bucket per chunk".into(),
            ));
        }
        if self.buckets == 0 {
            return Err(Error::Config(
                "a region must hold at least one bucket (buckets = 0)".into(),
            ));
        }
        if let Some(mem) = physical_memory() {
            let need = self.region_len() as u128;
            if need > mem as u128 {
                return Err(Error::Config(format!(
                    "{} buckets of {} B need {need} B per rank, more than this machine's {mem} B \
                     of memory",
                    self.buckets,
                    self.layout().bucket_len
                )));
            }
        }
        Ok(())
    }

    fn encode(&self) -> Vec<u8> {
        let mut v = vec![self.variant.code()];
        for x in [
            self.key_len as u64,
            self.value_len as u64,
            self.buckets,
            u64::from(self.candidates()),
            u64::from(self.chunk),
        ] {
            v.extend_from_slice(&x.to_le_bytes());
        }
        v
    }
}

fn physical_memory() -> Option<u64> {
    let text = std::fs::read_to_string("/proc/meminfo").ok()?;
    let kb: u64 = text
        .lines()
        .find(|l| l.starts_with("MemTotal:"))?
        .split_whitespace()
        .nth(1)?
        .parse()
        .ok()?;
    Some(kb * 1024)
}

/// What a read found.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Read {
    /// The key's value.
    Hit(Vec<u8>),
    /// Not in the table.
    Miss,
    /// The key's bucket kept failing its checksum (lockfree, chunked): a
    /// concurrent write, or damage. The bucket is now marked invalid.
    Corrupt,
}

/// What a write did.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Write {
    /// Stored in an empty (or invalid) bucket.
    Inserted,
    /// The key was there; its value was replaced.
    Updated,
    /// Every candidate held another key; the last one was overwritten.
    Evicted,
}

/// What `find_or_put` did (chunked).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum FindOrPut {
    /// The key was there, with this value (left unchanged).
    Found(Vec<u8>),
    /// The key was absent and is now stored.
    Inserted,
    /// Absent, and every probed chunk is full.
    Full,
}

/// Per-rank statistics; add them up with [`Stats::add`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Stats {
    /// Keys read.
    pub reads: u64,
    /// Keys written.
    pub writes: u64,
    /// Reads that found the key.
    pub hits: u64,
    /// Reads that did not.
    pub misses: u64,
    /// Reads returned as corrupt.
    pub corrupt: u64,
    /// Writes into empty or invalid buckets.
    pub inserts: u64,
    /// Writes that replaced a value.
    pub updates: u64,
    /// Writes that overwrote another key.
    pub evictions: u64,
    /// Re-reads after a checksum mismatch.
    pub checksum_retries: u64,
    /// Buckets marked invalid.
    pub invalidations: u64,
    /// Failed lock attempts (fine, coarse).
    pub lock_retries: u64,
    /// Remote operations issued.
    pub remote_ops: u64,
    /// Batches (post/complete cycles) issued.
    pub batches: u64,
}

impl Stats {
    /// Field-wise sum.
    pub fn add(&mut self, o: &Stats) {
        self.reads += o.reads;
        self.writes += o.writes;
        self.hits += o.hits;
        self.misses += o.misses;
        self.corrupt += o.corrupt;
        self.inserts += o.inserts;
        self.updates += o.updates;
        self.evictions += o.evictions;
        self.checksum_retries += o.checksum_retries;
        self.invalidations += o.invalidations;
        self.lock_retries += o.lock_retries;
        self.remote_ops += o.remote_ops;
        self.batches += o.batches;
    }

    /// Remote operations per DHT operation.
    pub fn ops_per_op(&self) -> f64 {
        let n = self.reads + self.writes;
        if n == 0 {
            0.0
        } else {
            self.remote_ops as f64 / n as f64
        }
    }
}

/// A distributed hash table over a transport.
pub struct Dht<T: Transport> {
    pub(crate) t: T,
    pub(crate) cfg: Config,
    pub(crate) layout: Layout,
    pub(crate) place: Placement,
    pub(crate) stats: Mutex<Stats>,
}

impl<T: Transport> std::fmt::Debug for Dht<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Dht")
            .field("transport", &self.t.name())
            .field("config", &self.cfg)
            .finish()
    }
}

/// Where one key lives.
#[derive(Clone, Debug)]
pub(crate) struct Home {
    pub(crate) rank: usize,
    pub(crate) candidates: Vec<u64>,
}

impl<T: Transport> Dht<T> {
    /// Creates the table on every rank. Collective: each rank calls it with
    /// its own transport; all must agree on the configuration, and a
    /// mismatch is a clear error on every rank. Nothing is sent before the
    /// configuration, region size and atomics have been checked.
    pub fn create(t: T, cfg: Config, boot: &dyn Bootstrap) -> Result<Dht<T>> {
        cfg.validate()?;
        let need = cfg.region_len();
        let have = t.region_len(t.rank());
        let local = if have < need {
            Err(Error::RegionTooSmall {
                rank: t.rank(),
                have,
                need,
                buckets: cfg.buckets,
                variant: cfg.variant,
            })
        } else if cfg.variant.needs_atomics() && !t.has_atomics() {
            Err(Error::NoAtomics {
                variant: cfg.variant,
                transport: t.name(),
            })
        } else {
            Ok(())
        };
        // Every rank reaches the exchange, so a local problem on one rank
        // cannot leave the others waiting; each then reports what it saw.
        let mine = cfg.encode();
        let all = boot.allgather(&mine).map_err(Error::Transport)?;
        local?;
        if let Some(r) = all.iter().position(|c| *c != mine) {
            return Err(Error::Mismatch(format!(
                "rank {} has {:?}, rank {r} has a different variant, key/value length, \
                 bucket count or candidate count",
                boot.rank(),
                cfg
            )));
        }
        let place = Placement::new(t.ranks() as u32, cfg.buckets, cfg.candidates());
        Ok(Dht {
            t,
            layout: cfg.layout(),
            cfg,
            place,
            stats: Mutex::new(Stats::default()),
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

    /// This rank's statistics so far.
    pub fn stats(&self) -> Stats {
        *self.stats.lock().unwrap()
    }

    /// All ranks' statistics, summed. Collective.
    pub fn stats_all(&self, boot: &dyn Bootstrap) -> Result<Stats> {
        let mine = stats_to_bytes(&self.stats());
        let all = boot.allgather(&mine).map_err(Error::Transport)?;
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
        boot.barrier().map_err(Error::Transport)?;
        Ok(self.t)
    }

    pub(crate) fn home(&self, key: &[u8]) -> Home {
        let h = hash_key(key);
        Home {
            rank: self.place.rank_of(h) as usize,
            candidates: self.place.candidates_of(h).collect(),
        }
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
        {
            let mut s = self.stats.lock().unwrap();
            s.remote_ops += ops.len() as u64;
            s.batches += 1;
        }
        self.t.execute(ops).map_err(Error::Transport)
    }

    pub(crate) fn count(&self, f: impl FnOnce(&mut Stats)) {
        f(&mut self.stats.lock().unwrap());
    }

    /// Reads one key.
    pub fn read(&self, key: &[u8]) -> Result<Read> {
        Ok(self.read_many(&[key])?.pop().unwrap())
    }

    /// Writes one key.
    pub fn write(&self, key: &[u8], value: &[u8]) -> Result<Write> {
        Ok(self.write_many(&[(key, value)])?.pop().unwrap())
    }

    /// Reads many keys with their remote operations overlapped: each round
    /// advances every unresolved key by one candidate in one batch.
    pub fn read_many(&self, keys: &[&[u8]]) -> Result<Vec<Read>> {
        for k in keys {
            self.check_key(k)?;
        }
        let out = match self.cfg.variant {
            Variant::Lockfree => crate::variant::lockfree::read_many(self, keys)?,
            Variant::Fine => crate::variant::fine::read_many(self, keys)?,
            Variant::Coarse => crate::variant::coarse::read_many(self, keys)?,
            Variant::Chunked => crate::variant::chunked::read_many(self, keys)?,
        };
        self.count(|s| {
            s.reads += keys.len() as u64;
            for r in &out {
                match r {
                    Read::Hit(_) => s.hits += 1,
                    Read::Miss => s.misses += 1,
                    Read::Corrupt => s.corrupt += 1,
                }
            }
        });
        Ok(out)
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
        let out = crate::variant::chunked::find_or_put_many(self, items)?;
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
        for (k, v) in items {
            self.check_key(k)?;
            self.check_value(v)?;
        }
        let out = match self.cfg.variant {
            Variant::Lockfree => crate::variant::lockfree::write_many(self, items)?,
            Variant::Fine => crate::variant::fine::write_many(self, items)?,
            Variant::Coarse => crate::variant::coarse::write_many(self, items)?,
            Variant::Chunked => crate::variant::chunked::write_many(self, items)?,
        };
        self.count(|s| {
            s.writes += items.len() as u64;
            for w in &out {
                match w {
                    Write::Inserted => s.inserts += 1,
                    Write::Updated => s.updates += 1,
                    Write::Evicted => s.evictions += 1,
                }
            }
        });
        Ok(out)
    }
}

fn stats_to_bytes(s: &Stats) -> Vec<u8> {
    // A fixed binary form: no serde format crate needed for 13 counters.
    [
        s.reads,
        s.writes,
        s.hits,
        s.misses,
        s.corrupt,
        s.inserts,
        s.updates,
        s.evictions,
        s.checksum_retries,
        s.invalidations,
        s.lock_retries,
        s.remote_ops,
        s.batches,
    ]
    .iter()
    .flat_map(|x| x.to_le_bytes())
    .collect()
}

fn stats_from_bytes(b: &[u8]) -> Stats {
    let w = |i: usize| u64::from_le_bytes(b[i * 8..i * 8 + 8].try_into().unwrap());
    Stats {
        reads: w(0),
        writes: w(1),
        hits: w(2),
        misses: w(3),
        corrupt: w(4),
        inserts: w(5),
        updates: w(6),
        evictions: w(7),
        checksum_retries: w(8),
        invalidations: w(9),
        lock_retries: w(10),
        remote_ops: w(11),
        batches: w(12),
    }
}
