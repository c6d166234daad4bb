//! Safe, provider-portable owners over libfabric, and the ranks built on them.
//!
//! Layers, bottom up:
//! - [`fabric_sys`]: raw bindgen bindings to the system libfabric (>= 1.17),
//!   with C wrappers for its `static inline` calls.
//! - [`info`]: `fi_getinfo` with hints, and readable provider summaries.
//! - One owner per fid: [`Fabric`], [`Domain`], [`AddressVector`],
//!   [`CompletionQueue`], [`Endpoint`], [`MemoryRegion`]. A child holds an
//!   `Arc` to its parent, so parents close last and everything closes once.
//! - [`bootstrap`] (from `fabkit-core`): how ranks exchange addresses
//!   (threads, files; MPI's in `fabkit-mpi`).
//! - [`Rank`]: an endpoint, an exposed region and every peer's address and
//!   key; [`Op`] batches of RMA reads and writes and u64 atomics with a
//!   bounded number in flight, plus small messages. A write says which
//!   [`Completion`] it needs; a write that must be visible at its target
//!   before a later operation (a lock release) asks for
//!   [`Completion::Delivery`], which the rank meets with the [`Ordering`]
//!   mechanism its provider offers.
//!
//! Every wait has a timeout, and errors name the peer and the operation;
//! `FABKIT_TIMEOUT_SCALE` stretches them all (`fabkit_core::time::timeout_scale`). The
//! environment libfabric reads once is prepared before `main` ([`env`](mod@env)).
//! Waits block on the completion queue (or spin briefly, then block); a rank
//! whose provider needs manual progress gets a background progress thread, so
//! peers' one-sided operations on it complete while it computes.
//!
//! ```no_run
//! use std::time::Duration;
//! use fabkit_core::{ThreadGroup, Remote};
//! use fabkit_fabric::{Rank, RankConfig};
//!
//! let boots = ThreadGroup::members(2, Duration::from_secs(10));
//! std::thread::scope(|s| {
//!     for b in &boots {
//!         s.spawn(move || {
//!             let rank = Rank::establish(RankConfig::new("shm"), b).unwrap();
//!             let peer = 1 - rank.rank();
//!             rank.fetch_add(Remote::new(peer, 0), 1).unwrap();
//!             rank.finish(b).unwrap();
//!         });
//!     }
//! });
//! ```
#![deny(missing_docs)]

pub mod av;
pub mod cq;
pub mod domain;
pub mod env;
pub mod ep;
pub mod error;
mod iface;
pub mod info;
pub mod mailbox;
pub mod mr;
pub mod rank;
pub mod shm;
pub mod stranger;
pub mod verbs;

pub use av::{AddressVector, FiAddr};
pub use cq::CompletionQueue;
pub use domain::{AtomicSupport, AtomicsBy, Domain, Fabric};
pub use ep::Endpoint;
pub use error::{strerror, Error, Result};
pub use fabkit_core::{bootstrap, Completion, Op, OpKind, Remote};
pub use fabric_sys;
pub use info::{Caps, Executes, Executor, Hints, Info, KeyPick, Ordering, Progress, ProviderInfo};
pub use mailbox::{Call, Mailbox, MailboxConfig, MailboxCounts};
pub use mr::{live_regions, MemoryRegion, RemoteRegion};
pub use rank::{Initiator, Lane, OrderingStats, ProgressMode, Rank, RankConfig};
pub use stranger::{Stopped, Stranger, Tally, Try};
