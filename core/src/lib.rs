//! What every fabkit layer shares, and nothing that needs C: the DHT builds
//! and tests on this crate alone, and the libfabric and MPI crates build on
//! it.
//!
//! - [`op`]: one-sided operations as data: where ([`Remote`]), what
//!   ([`Op`]) and, for writes, which [`Completion`] they need. A planner
//!   (the DHT's machines) writes them; a transport executes them.
//! - [`agree`]: a collective step that fails on every rank when it fails on
//!   one, with that rank's message.
//! - [`bootstrap`]: the [`Bootstrap`] by which ranks exchange small byte
//!   strings and meet at barriers, with the in-process ([`ThreadGroup`])
//!   and shared-directory ([`FileBootstrap`]) ones; MPI's is in
//!   `fabkit-mpi`.
//! - [`words`]: copies to and from memory other processes or a NIC change
//!   under us, a word at a time.
//! - [`time`]: a clock cheap enough for every step of an operation, the
//!   timeout scale every wait honours, and the CPU clock rate that turns
//!   CPU seconds into cycles.
//! - [`host`]: this host's memory, which sizes are checked against, its
//!   cores and a one-line description of the machine.
//! - [`provenance`]: where a report was made, by what and how, as every
//!   report's `meta` carries it; [`schema`]: the key paths of a report's
//!   JSON, which its golden test pins.
//! - [`notice`]: what a layer says that is no error of the call at hand;
//!   printed by the tools, taken by a library that embeds fabkit.
//! - [`net`]: the addresses of this host's interfaces (one `getifaddrs`
//!   walk), and whether an address lies in a network.
//! - [`error`]: what any layer can meet (a timeout, a bound, a bad
//!   argument, ranks that disagree or left); the libfabric and MPI crates
//!   wrap it in errors of their own.
//!
//! ```
//! use std::time::Duration;
//! use fabkit_core::{Bootstrap, ThreadGroup};
//!
//! let boots = ThreadGroup::members(2, Duration::from_secs(10));
//! let all = std::thread::scope(|s| {
//!     let h: Vec<_> = boots
//!         .iter()
//!         .map(|b| s.spawn(move || b.allgather(&[b.rank() as u8]).unwrap()))
//!         .collect();
//!     h.into_iter().map(|h| h.join().unwrap()).collect::<Vec<_>>()
//! });
//! assert_eq!(all[1], vec![vec![0u8], vec![1u8]]);
//! ```
#![deny(missing_docs)]
// The only unsafe code: five system calls and a CPU hint, each allowed
// where it is (hostname, the coarse clock, getifaddrs, sysconf, prefetch).
#![deny(unsafe_code)]

pub mod agree;
pub mod bootstrap;
pub mod error;
pub mod host;
pub mod net;
pub mod notice;
pub mod op;
pub mod private;
pub mod provenance;
pub mod rng;
pub mod schema;
pub mod time;
pub mod words;

pub use bootstrap::{Bootstrap, FileBootstrap, ThreadBootstrap, ThreadGroup};
pub use error::{Error, Result};
pub use op::{Completion, Executor, Op, OpKind, Remote};

/// A random 64-bit number from the operating system (`getrandom`), for ids
/// and keys no other run or process may guess: memory-region keys, table
/// ids, dumps, control cookies, passwords. It fails closed: where the
/// system's source fails, the caller gets the error, never a guessable
/// value made of the time and the process id.
pub fn random_u64() -> Result<u64> {
    getrandom::u64().map_err(|e| Error::Io {
        what: "drawing 64 random bits from the system (getrandom)".into(),
        cause: std::io::Error::other(e.to_string()),
    })
}
