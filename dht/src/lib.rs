//! A distributed hash table that lives in the memory of the application's
//! own ranks and is read and written with one-sided operations: no server,
//! no target CPU involvement beyond progress. It is the MPI-DHT of seeds
//! 000/001 (coarse-grained lock, fine-grained lock, lock-free with
//! checksums; used as a surrogate-model cache in the POET simulator) plus
//! Oortwijn's chunked linear probing (seed 002).
//!
//! Layers, bottom up (smoltcp-style: pure logic above a transport seam):
//! - [`layout`]: bucket bytes <-> [`layout::Bucket`], CRC32C; pure.
//! - [`placement`]: key -> rank and candidate buckets, unbiased; pure.
//! - [`transport`]: the [`Transport`] trait the variants run on: native
//!   libfabric (`fabkit_fabric::Rank`, feature `fabric`), MPI windows
//!   (feature `mpi`), and test doubles (local, recording, faulty).
//! - `variant` (private): each algorithm as a state machine that plans
//!   batches of remote operations into buffers the table owns, is fed their
//!   completions and the time, and gives back every lock and claim on error.
//! - [`Dht`]: create (collective, all ranks must agree), read, write, their
//!   batched forms, statistics, dump and restore (also into another size,
//!   rank count or variant), free; the only driver of the machines.
//! - [`clock`]: the time the driver passes in, real or a test's.
//! - Outcomes, errors and statistics sit in a leaf module both use.
//!
//! ```
//! use fabkit_dht::{transport::local::LocalTransport, Config, Dht, Read, Variant};
//! use fabkit_core::bootstrap::ThreadGroup;
//! use std::time::Duration;
//!
//! let mut cfg = Config::new(Variant::Lockfree);
//! (cfg.key_len, cfg.value_len, cfg.buckets) = (8, 16, 64);
//! let t = LocalTransport::group(1, cfg.region_len()).pop().unwrap();
//! let boot = ThreadGroup::members(1, Duration::from_secs(5)).pop().unwrap();
//! let dht = Dht::create(t, cfg, &boot).unwrap();
//! dht.write(b"key-0001", b"value-0000000001").unwrap();
//! assert_eq!(dht.read(b"key-0001").unwrap(), Read::Hit(b"value-0000000001".to_vec()));
//! assert_eq!(dht.read(b"key-0002").unwrap(), Read::Miss);
//! ```
#![deny(unsafe_code)]
#![deny(missing_docs)]

pub mod clock;
pub mod collective;
mod config;
mod dump;
pub mod layout;
mod outcome;
pub mod placement;
mod table;
pub mod transport;
mod variant;

pub use config::{Config, MAX_DEADLINE, MAX_FIELD};
pub use dump::{Dumped, Restored, FORMAT_VERSION, MAX_SHARDS};
pub use layout::Variant;
pub use outcome::{Error, FindOrPut, Found, Read, Result, Stats, Write, COUNTERS};
pub use placement::KeyHash;
pub use table::{Dht, LANE_KEYS, MAX_DEPTH};
pub use transport::Transport;
