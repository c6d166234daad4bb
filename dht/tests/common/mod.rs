//! Helpers for the DHT tests.
#![allow(dead_code)]

use std::time::Duration;

pub mod model;
#[cfg(feature = "mpi")]
pub mod mpirun;

use std::sync::Barrier;

use fabkit_core::bootstrap::{Bootstrap, ThreadGroup};
use fabkit_dht::layout::is_full;
use fabkit_dht::message::local::{Faults as NetFaults, LocalMessenger, LocalNet};
use fabkit_dht::message::Messenger;
use fabkit_dht::transport::faulty::{Delay, Faults, FaultyTransport};
use fabkit_dht::transport::local::LocalTransport;
use fabkit_dht::transport::{Op, Remote};
use fabkit_dht::{Config, Dht, KeyHash, Read, Transport, Variant};

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

/// `n` tables on the message path over one shared set of local regions,
/// the ranks in "nodes" of `per_node` (a rank reaches its node's regions
/// by memory, and sends the keys of ranks elsewhere to them as requests;
/// 1: every other rank by messages), over an in-process network doing
/// `faults`. Rank r's transport is made by `wrap(r, local)`, and its
/// service's executor by `exec(r, local)` from a handle reaching only its
/// own region. Returns the tables, the network (for crafted requests and
/// the faults it injected) and a transport that reaches every region (to
/// inspect them).
pub fn message_tables<T, E>(
    n: usize,
    per_node: usize,
    cfg: Config,
    faults: NetFaults,
    wrap: impl Fn(usize, LocalTransport) -> T,
    exec: impl Fn(usize, LocalTransport) -> E,
) -> (Vec<Dht<T, LocalMessenger>>, LocalNet, LocalTransport)
where
    T: Transport + Send,
    E: Transport + Send + Sync + 'static,
{
    let group = LocalTransport::group(n, cfg.region_len());
    let inspect = group[0].clone();
    let net = LocalNet::new(n, 64 << 10, faults);
    let parts: Vec<(T, E, LocalMessenger)> = group
        .into_iter()
        .zip(net.members())
        .enumerate()
        .map(|(r, (t, m))| {
            let node: Vec<bool> = (0..n).map(|q| q / per_node == r / per_node).collect();
            let own: Vec<bool> = (0..n).map(|q| q == r).collect();
            (
                wrap(r, t.clone().reaching(&node)),
                exec(r, t.reaching(&own)),
                m,
            )
        })
        .collect();
    let boots = ThreadGroup::members(n, Duration::from_secs(10));
    let tables = std::thread::scope(|s| {
        let hs: Vec<_> = parts
            .into_iter()
            .zip(&boots)
            .map(|((t, e, m), b)| {
                s.spawn(move || {
                    Dht::create_with_messages(t, e, m, cfg, b as &dyn Bootstrap, KeyHash::default())
                        .unwrap()
                })
            })
            .collect();
        hs.into_iter().map(|h| h.join().unwrap()).collect()
    });
    (tables, net, inspect)
}

/// `n` tables whose transports reorder batches, split half the reads,
/// delay half the writes until the writer's next batch and keep batches
/// of three lanes (of 4 keys at least) in flight, run out of order (rank
/// r's faults seeded with `seed ^ r`): the faults racing writers must
/// survive. The seed fixes the faults; the threads' interleaving it
/// cannot.
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

/// The seed of a seeded test: `FABKIT_TEST_SEED` (decimal, or hex with
/// `0x`) or `default`. It is printed, and a failing test's output is
/// shown, so a failure says how to replay it. A seed fixes what is drawn
/// from it (faults, keys, cases); with threads, not their interleaving.
pub fn test_seed(default: u64) -> u64 {
    let seed = match std::env::var("FABKIT_TEST_SEED") {
        Ok(v) => {
            let v = v.trim();
            let parsed = match v.strip_prefix("0x") {
                Some(hex) => u64::from_str_radix(hex, 16),
                None => v.parse(),
            };
            parsed.unwrap_or_else(|_| panic!("FABKIT_TEST_SEED={v}: give a number such as 0x5eed"))
        }
        Err(_) => default,
    };
    eprintln!("seed {seed:#x} (FABKIT_TEST_SEED={seed:#x} replays what it draws)");
    seed
}

/// How many cases a property test runs: `FABKIT_TEST_CASES`, or `default`.
pub fn test_cases(default: u32) -> u32 {
    std::env::var("FABKIT_TEST_CASES")
        .ok()
        .and_then(|v| v.trim().parse().ok())
        .filter(|&n| n > 0)
        .unwrap_or(default)
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

/// Every whole record of `k` in every rank's region: a key stored twice
/// shows up here.
pub fn copies(t: &impl Transport, cfg: &Config, k: &[u8]) -> usize {
    let l = cfg.layout();
    let mut n = 0;
    for rank in 0..t.ranks() {
        let mut region = vec![0u8; cfg.region_len()];
        t.execute(&mut [Op::Read {
            from: Remote::new(rank, 0),
            into: &mut region,
        }])
        .unwrap();
        for b in 0..cfg.buckets {
            let at = l.offset(b) as usize;
            let state = u64::from_le_bytes(region[at..at + 8].try_into().unwrap());
            let data = &region[at + l.data_start()..at + l.data_start() + l.data_len()];
            let bk = l.decode(data, state);
            let published = cfg.variant != Variant::Chunked || is_full(state);
            if published && bk.occupied() && bk.checksum_ok() && bk.key == k {
                n += 1;
            }
        }
    }
    n
}

/// Every rank updates one key at once, round after round, and reads it
/// back: the key always holds one whole value some rank wrote, never a
/// mix (the checksummed and locking variants never report it corrupt at
/// the end of a round), and is stored once.
pub fn one_hot_key<T: Transport + Send + Sync>(
    tables: &[Dht<T>],
    cfg: &Config,
    rounds: u64,
    ctx: &str,
) {
    one_hot_key_with(tables, tables[0].transport(), cfg, rounds, ctx)
}

/// [`one_hot_key`] on tables of any path, counting the key's copies
/// through `inspect` (a transport that reaches every region).
pub fn one_hot_key_with<T: Transport + Send + Sync, M: Messenger>(
    tables: &[Dht<T, M>],
    inspect: &impl Transport,
    cfg: &Config,
    rounds: u64,
    ctx: &str,
) {
    let variant = cfg.variant;
    let k = key(0xbeef);
    let go = Barrier::new(tables.len());
    // A thread that failed must still meet the others at every barrier, or
    // they would wait for ever: failures are collected, and judged after.
    let failures = std::sync::Mutex::new(Vec::new());
    std::thread::scope(|s| {
        for (r, d) in tables.iter().enumerate() {
            let (k, go, failures) = (&k, &go, &failures);
            s.spawn(move || {
                let fail = |m: String| failures.lock().unwrap().push(m);
                for round in 0..rounds {
                    go.wait();
                    if let Err(e) = d.write(k, &value(k, r as u64, round, 24)) {
                        fail(format!("{ctx} {variant:?} round {round}: write: {e}"));
                    }
                    go.wait();
                    match d.read(k) {
                        Ok(Read::Hit(v)) => {
                            let seq = u64::from_le_bytes(v[8..16].try_into().unwrap());
                            if !value_ok(k, &v) || seq != round {
                                fail(format!(
                                    "{ctx} {variant:?} round {round}: a foreign, torn or old value {v:?}"
                                ));
                            }
                        }
                        // Lockfree promises no more: racing writes of one
                        // bucket may tear it for good (readers then report
                        // it corrupt) or lose the key.
                        Ok(_) if variant == Variant::Lockfree => {}
                        other => fail(format!("{ctx} {variant:?} round {round}: {other:?}")),
                    }
                }
            });
        }
    });
    let failures = failures.into_inner().unwrap();
    assert!(
        failures.is_empty(),
        "{} failures: {failures:#?}",
        failures.len()
    );
    let n = copies(inspect, cfg, &k);
    if variant == Variant::Lockfree {
        assert!(n <= 1, "{ctx} {variant:?}: {n} copies");
    } else {
        assert_eq!(n, 1, "{ctx} {variant:?}");
    }
}
