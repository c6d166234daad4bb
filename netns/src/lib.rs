//! Several hosts on one machine, for the tools that measure between hosts:
//! network namespaces joined by veth pairs, each end with its own address,
//! queues, MTU, offloads and qdisc, a gateway between two MTU domains, and
//! management links to the root namespace (as cluster nodes have an
//! Ethernet beside their fabric). `ipoib-eval` sweeps on it, `fabkit
//! launch` starts ranks in its namespaces, and the eBPF tests count
//! packets on its veths; none of them has to take the others along.
//!
//! - [`testbed`]: what to build ([`testbed::TestbedSpec`]), the
//!   [`testbed::Testbed`] that removes it when dropped, and the namespaces
//!   that exist ([`testbed::namespaces`]);
//! - [`cleanup`]: what an interrupted run must undo, run on SIGINT, SIGTERM
//!   or SIGHUP;
//! - [`ethtool`]: an interface's offload features as `ethtool -k` prints
//!   them, parsed once for the testbed and ipoib-eval;
//! - `sys`: the system calls `std` lacks (`setns`, `flock`, the signal
//!   mask); the only `unsafe` in the crate.
//!
//! Everything here needs root, as the tests that use it do.
//!
//! ```no_run
//! use fabkit_netns::testbed::{self, Testbed, TestbedSpec};
//!
//! let tb = Testbed::up(TestbedSpec { queues: 2, ..TestbedSpec::default() })?;
//! let (b_ns, b_addr) = (tb.b.netns.clone(), tb.b.addr);
//! std::thread::spawn(move || {
//!     testbed::enter(&b_ns)?; // this thread is host b now
//!     let _server = std::net::TcpListener::bind((b_addr, 5001));
//!     Ok::<(), testbed::TestbedError>(())
//! });
//! // ... host a is `tb.a.netns`; dropping `tb` removes both namespaces.
//! # Ok::<(), testbed::TestbedError>(())
//! ```
#![deny(unsafe_code)]
#![deny(missing_docs)]

pub mod cleanup;
pub mod ethtool;
mod sys;
pub mod testbed;

/// An exclusive `flock` on `path` (created if missing), held until the
/// returned file is dropped; gives up after `wait` with `TimedOut`. One
/// holder per machine: the testbed's allocation of management links takes
/// one, and so can any record that one process at a time may own.
pub fn lock_file(path: &str, wait: std::time::Duration) -> std::io::Result<std::fs::File> {
    sys::lock_file(path, wait)
}

/// One at a time: the guard of a process-wide lock, for tests that bring
/// up testbeds or blast packets. On two cores, two such tests at once
/// starve each other's deadlines. Hold it for the length of the test.
/// A test that panicked leaves the lock usable.
pub fn serial() -> std::sync::MutexGuard<'static, ()> {
    static LOCK: std::sync::Mutex<()> = std::sync::Mutex::new(());
    LOCK.lock().unwrap_or_else(|p| p.into_inner())
}
