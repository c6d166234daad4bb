//! The I/O edge: client and server sessions. Both ends run the same data
//! phase (`data_phase`): one thread per stream, started together at a
//! gate, a control reader that learns the peer's send counts and report,
//! and an interval sampler. Every wait has a deadline and an error names
//! the peer, the stream and the operation.
//!
//! One file per job:
//! - `gate`: what the stream threads of one data phase share (the start
//!   line, the counters each publishes);
//! - `stream`: the loops a stream thread runs (sender, receiver,
//!   request/response);
//! - `phase`: the data phase itself, its control reader and interval
//!   sampler;
//! - `socket`: data and control sockets, their options and addresses;
//! - `client`: [`run_client`];
//! - `server`: [`Server`] and its sessions;
//! - `remote`: a sweep setting a server's `--sweep-iface`
//!   ([`configure_peer`], [`restore_peer`]).

use crate::report::HostInfo;
use crate::spec::SpecError;

mod client;
mod gate;
mod phase;
mod remote;
mod server;
mod socket;
mod stream;

pub use client::{run_client, ClientOpts};
pub use remote::{configure_peer, restore_peer};
pub use server::{Server, ServerOpts};

/// Why a test did not run or did not finish.
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    /// A setting is wrong: the user's to fix (exit 2).
    #[error("{0}")]
    Usage(#[from] SpecError),
    /// The run failed: network, peer or kernel (exit 1).
    #[error("{0}")]
    Failed(String),
}

fn failed(msg: impl Into<String>) -> RunError {
    RunError::Failed(msg.into())
}

/// Facts about this end.
pub fn host_info() -> HostInfo {
    let read = |p: &str| {
        std::fs::read_to_string(p)
            .map(|s| s.trim().to_string())
            .unwrap_or_default()
    };
    HostInfo {
        hostname: read("/proc/sys/kernel/hostname"),
        kernel: read("/proc/sys/kernel/osrelease"),
        boot_id: read("/proc/sys/kernel/random/boot_id"),
        netns: std::fs::read_link("/proc/thread-self/ns/net")
            .map(|p| p.to_string_lossy().into_owned())
            .unwrap_or_default(),
        version: env!("CARGO_PKG_VERSION").into(),
    }
}
