//! `ipoib-eval`: an iperf-like tool that measures what bounds IP over a
//! fabric (IPoIB `ib0`, IP over BXI, RoCE or Ethernet ports): Gbit/s next to
//! messages per second, wire packets per second and CPU cycles per message,
//! for every way of handing packets to the kernel.
//!
//! Layers, pure cores first and I/O at the edges (as `fabkit-dht` and
//! smoltcp do it):
//! - [`spec`]: what a test is (protocol, length, streams, send and receive
//!   paths), validated before any socket exists;
//! - [`proto`]: the control connection's framed, versioned, bounded messages;
//!   decoding never panics;
//! - [`wire`]: the sequence header in every UDP message;
//! - [`stats`]: rates, loss, reordering and cycles per message (pure), and
//!   the readers of `/proc/stat`, `/proc/net/dev` and interface settings;
//! - [`report`]: each end's measurements, the assembled [`report::Report`]
//!   (JSON schema `ipoib-eval/1`), text and CSV;
//! - [`send`] and [`recv`]: one file per send path behind one trait, and the
//!   receive paths;
//! - [`run`]: client and server sessions (threads, gate, control reader);
//! - [`sweep`]: sweep files, their points, and the runner that sets each
//!   point up on a testbed (`fabkit-netns`, several hosts on one machine)
//!   or on a real interface and its peer ([`iface`]: its settings recorded
//!   and put back);
//! - `sys`: the system calls `socket2` lacks; the only `unsafe` in the crate.
//!
//! ```no_run
//! use ipoib_eval::run::{run_client, ClientOpts, Server, ServerOpts};
//! use ipoib_eval::spec::{Amount, Proto, SendPath, TestSpec};
//!
//! let server = Server::bind(ServerOpts { port: 0, ..ServerOpts::default() })?;
//! let port = server.port();
//! std::thread::spawn(move || server.serve(false));
//! let spec = TestSpec {
//!     proto: Proto::Udp,
//!     len: 1472,
//!     send: SendPath::Gso { per_send: 16, batch: 1 },
//!     recv: "gro".parse()?,
//!     amount: Amount::Seconds(1.0),
//!     ..TestSpec::default()
//! };
//! let opts = ClientOpts { host: "127.0.0.1".into(), port, ..ClientOpts::default() };
//! let report = run_client(&spec, &opts)?;
//! println!("{:.0} messages/s", report.totals[0].msgs_per_s);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
#![deny(unsafe_code)]
#![deny(missing_docs)]

pub mod iface;
pub mod iperf3;
pub mod proto;
pub mod recv;
pub mod report;
pub mod run;
pub mod send;
pub mod spec;
pub mod stats;
pub mod summary;
pub mod sweep;
mod sys;
pub mod wire;

/// The control port a server listens on unless told otherwise (iperf3's
/// 5201 plus 100, so both can run side by side).
pub const DEFAULT_PORT: u16 = 5301;

/// The git commit ipoib-eval was built from (`git describe --dirty`, the
/// stamp the fabkit command has too), or `unknown` outside a checkout:
/// what a report and each CSV row say measured them.
pub const COMMIT: &str = match option_env!("FABKIT_COMMIT") {
    Some(c) => c,
    None => "unknown",
};

/// This process's provenance (command, commit, host, machine, version),
/// for files made from kept data, such as a sweep's summary.
pub fn provenance() -> fabkit_core::provenance::Provenance {
    fabkit_core::provenance::Provenance::here(COMMIT, env!("CARGO_PKG_VERSION"), None)
}
