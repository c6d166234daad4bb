//! Helpers for the DHT tests.
#![allow(dead_code)]

use std::time::Duration;

pub mod model;

use fabkit_core::bootstrap::{Bootstrap, ThreadGroup};
use fabkit_dht::transport::faulty::{Delay, Faults, FaultyTransport};
use fabkit_dht::transport::local::LocalTransport;
use fabkit_dht::{Config, Dht, Transport, Variant};

pub const VARIANTS: [Variant; 4] = [
    Variant::Coarse,
    Variant::Fine,
    Variant::Lockfree,
    Variant::Chunked,
];

/// A small configuration: 16 B keys, 24 B values.
pub fn small(variant: Variant, buckets: u64) -> Config {
    let mut c = Config::new(variant);
    c.key_len = 16;
    c.value_len = 24;
    c.buckets = buckets;
    c
}

/// `n` tables over one shared set of local regions (created collectively on
/// threads, then handed back).
pub fn local_tables(n: usize, cfg: Config) -> Vec<Dht<LocalTransport>> {
    tables_with(n, cfg, |_, t| t)
}

/// `n` tables over one shared set of local regions, rank r's transport
/// made from its local one by `wrap(r, local)`.
pub fn tables_with<T: Transport + Send>(
    n: usize,
    cfg: Config,
    wrap: impl Fn(usize, LocalTransport) -> T,
) -> Vec<Dht<T>> {
    let ts: Vec<T> = LocalTransport::group(n, cfg.region_len())
        .into_iter()
        .enumerate()
        .map(|(r, t)| wrap(r, t))
        .collect();
    let boots = ThreadGroup::members(n, Duration::from_secs(10));
    std::thread::scope(|s| {
        let hs: Vec<_> = ts
            .into_iter()
            .zip(&boots)
            .map(|(t, b)| s.spawn(move || Dht::create(t, cfg, b as &dyn Bootstrap).unwrap()))
            .collect();
        hs.into_iter().map(|h| h.join().unwrap()).collect()
    })
}

/// `n` tables whose transports reorder batches, split half the reads,
/// delay half the writes until the writer's next batch and keep batches
/// of three lanes (of 4 keys at least) in flight, run out of order (rank
/// r's faults seeded with `seed ^ r`): the faults racing writers must
/// survive.
pub fn racing_faults(
    n: usize,
    cfg: Config,
    seed: u64,
) -> Vec<Dht<FaultyTransport<LocalTransport>>> {
    let mut tables = tables_with(n, cfg, |r, t| {
        FaultyTransport::new(
            t,
            Faults::seeded(seed ^ r as u64)
                .reorder()
                .split_reads(0.5)
                .delay_writes(Delay::UntilNextBatch, 0.5)
                .lanes(3),
        )
    });
    for d in &mut tables {
        d.set_lane_keys(4);
    }
    tables
}

pub fn key(i: u64) -> Vec<u8> {
    let mut k = format!("key-{i:012}").into_bytes();
    k.resize(16, b'.');
    k
}

/// A value that says who wrote it and when, and whose every byte is derived
/// from (key, writer, seq): half of one write and half of another cannot
/// pass [`value_ok`].
pub fn value(key: &[u8], writer: u64, seq: u64, len: usize) -> Vec<u8> {
    let mut v = Vec::with_capacity(len);
    v.extend_from_slice(&writer.to_le_bytes());
    v.extend_from_slice(&seq.to_le_bytes());
    let mut x =
        fabkit_dht::placement::hash_key(key) ^ writer.wrapping_mul(0x9e37) ^ seq.rotate_left(17);
    while v.len() < len {
        x = fabkit_dht::placement::mix(x);
        v.push(x as u8);
    }
    v.truncate(len);
    v
}

/// Whether `v` is a whole value written for `key` by some writer.
pub fn value_ok(key: &[u8], v: &[u8]) -> bool {
    let writer = u64::from_le_bytes(v[..8].try_into().unwrap());
    let seq = u64::from_le_bytes(v[8..16].try_into().unwrap());
    value(key, writer, seq, v.len()) == v
}
