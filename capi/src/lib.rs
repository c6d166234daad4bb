//! The DHT for C and C++ MPI programs: the public MPI-DHT's API
//! (`<LUCX/MPI/DHT.h>`, in `include/` beside this crate), so that a program
//! written against it relinks against fabkit with no source change, and
//! what fabkit adds (`fabkit_dht_*`).
//!
//! A table is made on the caller's communicator (duplicated first, under a
//! timeout; MPI is the caller's to initialise and finalise). By default it
//! is the lock-free variant on an `MPI_Win_allocate` window, the MPI-DHT's
//! default build; `FABKIT_DHT_VARIANT` and `FABKIT_DHT_TRANSPORT` (or
//! `fabkit_dht_create`'s options) choose another variant, libfabric, or
//! the same-node path. Keys are placed by the caller's `hash_func` when it
//! gives one.
//!
//! - [`codes`]: the return codes and the structs C sees.
//! - [`mod@options`]: the variant and transport, from the call or the
//!   environment.
//! - [`table`]: the table C holds, over any of the transports.
//! - [`mpidht`]: the MPI-DHT's functions.
//! - [`fabkit`]: fabkit's own (batches, counters, options, the last error).
//! - [`boundary`]: errors as codes and messages, panics stopped, pointers
//!   checked.
//!
//! At the boundary: a null pointer or a size that does not fit is an error
//! code, never a crash; a panic never crosses into C (it becomes
//! `DHT_UCX_ERROR`, and the table is refused after, but for `DHT_free`);
//! failures are return codes with the message kept for
//! `fabkit_dht_last_error`; fabkit's notices go there too, and nothing is
//! printed but by `DHT_print_statistics` and on the one fatal path (an MPI
//! epoch that cannot be closed aborts the job, saying why). Ranks check
//! their arguments and options and agree before any window exists, so a
//! wrong size or option on one rank fails `DHT_create` on every rank.
#![deny(missing_docs)]

pub mod boundary;
pub mod codes;
pub mod fabkit;
pub mod mpidht;
pub mod options;
pub mod table;

pub use codes::*;
pub use table::DHT;
