//! What every fabkit layer shares, and nothing that needs C: the DHT builds
//! and tests on this crate alone, and the libfabric and MPI crates build on
//! it.
//!
//! - [`time`]: a clock cheap enough for every step of an operation, and the
//!   CPU clock rate that turns CPU seconds into cycles.
#![deny(missing_docs)]

pub mod time;
