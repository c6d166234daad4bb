//! Redis as the store a user would pick instead of the DHT, run beside it
//! by `fabkit dht` so both are measured on the same machine in the same run.
//!
//! Each rank starts one [`Server`]: a `redis-server` of its own on a free
//! port of loopback (ranks on one host) or of its address in the ranks'
//! network (ranks on several hosts or namespaces), persistence off, a
//! password every client of the run shares, and every file it writes in a
//! private directory that is removed when the server is dropped. The benchmark
//! shards its keys over the servers with the DHT's own placement (client-side
//! sharding, as a client-sharded Redis cluster does), and each rank drives
//! every server through one [`Client`]: one connection per server, a batch
//! of `--batch` operations becoming one `MGET` or `MSET` per server, all sent
//! before any reply is read so the servers work in parallel.
//!
//! Errors name the server (`redis-server on ADDRESS:PORT (pid N)`) and the
//! operation; a server that dies, resets the connection or stays silent
//! past the timeout is an error, never a panic or a hang. When
//! `redis-server` is not installed, [`Server::start`] fails with
//! [`NotInstalled`], which the caller reports in one line
//! ([`INSTALL_HINT`]) before benchmarking the DHT alone.
//!
//! The module's parts: [`server`] supervises one `redis-server` process,
//! `dir` is the private directory it writes in, [`client`] drives a batch
//! over every server, and `resp` sizes the replies the way a server sends
//! them, so bytes on the wire can be reported beside the DHT's.

pub mod client;
mod dir;
mod resp;
pub mod server;

pub use client::Client;

/// Removes (or with `dry_run` lists) the private directories of Redis
/// servers whose fabkit was killed (`fabkit clean`).
pub fn reap_stale_dirs(dry_run: bool) -> Vec<std::path::PathBuf> {
    dir::reap_stale(&std::env::temp_dir(), dry_run)
}
pub use server::{available, password, NotInstalled, Server, INSTALL_HINT};

use std::net::SocketAddrV4;

/// The name every error about a server starts with.
fn who(addr: SocketAddrV4, pid: Option<u32>) -> String {
    match pid {
        Some(pid) => format!("redis-server on {addr} (pid {pid})"),
        None => format!("redis-server on {addr} (pid unknown)"),
    }
}

/// `text` cut to at most `max` characters, `...` marking a cut.
fn shorten(text: &str, max: usize) -> String {
    match text.char_indices().nth(max) {
        None => text.to_owned(),
        Some((end, _)) => format!("{}...", &text[..end]),
    }
}

#[cfg(test)]
mod tests;
