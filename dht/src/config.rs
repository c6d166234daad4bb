//! What a table is made with ([`Config`]): variant, key and value lengths,
//! buckets, candidates, chunk and retries, checked before any rank
//! allocates, and encoded for the ranks to agree on.

use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::layout::{Layout, Variant};
use crate::outcome::{Error, Result};
use crate::path::Path;
use crate::placement::{default_candidates, MAX_CANDIDATES};

/// The longest key or value a table takes: 1 MiB.
pub const MAX_FIELD: usize = 1 << 20;

/// The longest deadline [`Dht::set_deadline`](crate::Dht::set_deadline) takes: a week.
pub const MAX_DEADLINE: Duration = Duration::from_secs(7 * 24 * 3600);

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
    /// How operations travel to a key's owner: read by whoever builds the
    /// table's transport ([`crate::open`]), agreed by every rank.
    #[serde(default)]
    pub path: Path,
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
            path: Path::Auto,
        }
    }

    /// The bucket layout.
    pub fn layout(&self) -> Layout {
        Layout::new(self.variant, self.key_len, self.value_len)
    }

    /// Bytes of region each rank must expose, for a configuration that
    /// [`Config::validate`] passed; one whose size overflows (which validate
    /// refuses) gives `usize::MAX`, which no allocation serves, rather than
    /// a wrapped, too small region.
    pub fn region_len(&self) -> usize {
        self.layout().region_len(self.buckets).unwrap_or(usize::MAX)
    }

    pub(crate) fn candidates(&self) -> u32 {
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
        if self.candidates > MAX_CANDIDATES {
            return Err(Error::Config(format!(
                "{} candidates per key: at most {MAX_CANDIDATES} (0 takes the published default)",
                self.candidates
            )));
        }
        // Bounded lengths keep the bucket layout's own sums small; the
        // region's size is computed checked, since `buckets` is anyone's.
        if self.key_len > MAX_FIELD || self.value_len > MAX_FIELD {
            return Err(Error::Config(format!(
                "keys of {} B and values of {} B: each must be at most {MAX_FIELD} B",
                self.key_len, self.value_len
            )));
        }
        let layout = self.layout();
        let Some(region) = layout.region_len(self.buckets) else {
            return Err(Error::Config(format!(
                "{} buckets of {} B per rank overflow a region's size; use fewer buckets",
                self.buckets, layout.bucket_len
            )));
        };
        if let Some(mem) = fabkit_core::host::physical_memory() {
            let need = region as u128;
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

    pub(crate) fn encode(&self) -> Vec<u8> {
        let mut v = vec![self.variant.code(), self.path.code()];
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

/// The deadline of each operation when none is set: 30 s, times
/// `FABKIT_TIMEOUT_SCALE` (emulated and oversubscribed machines).
pub(crate) fn default_deadline() -> Duration {
    fabkit_core::time::scaled(Duration::from_secs(30))
}
