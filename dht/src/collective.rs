//! Agreement: a collective step in which a failure on one rank fails the
//! step on every rank, with that rank's message.
//!
//! A rank that fails on its own (a damaged file, a full disk) and returns
//! early would leave its peers waiting at the next barrier until the
//! bootstrap's timeout, and they would then report a timeout instead of the
//! cause. So before any barrier each rank contributes either its payload or
//! its error to one [`Bootstrap::allgather`]: every rank reaches it, every
//! rank sees every outcome, and every rank returns the same result.
//!
//! ```
//! use fabkit_dht::collective::agree;
//! use fabkit_dht::Error;
//! use fabkit_core::{Bootstrap, ThreadGroup};
//! use std::time::Duration;
//!
//! let boots = ThreadGroup::members(2, Duration::from_secs(5));
//! let errs: Vec<String> = std::thread::scope(|s| {
//!     let hs: Vec<_> = boots
//!         .iter()
//!         .map(|b| {
//!             s.spawn(move || {
//!                 let mine = if b.rank() == 1 {
//!                     Err(Error::Io {
//!                         what: "writing",
//!                         path: "/scratch/shard.rank1".into(),
//!                         cause: std::io::Error::from(std::io::ErrorKind::StorageFull),
//!                     })
//!                 } else {
//!                     Ok(vec![])
//!                 };
//!                 agree(b, "save", mine).unwrap_err().to_string()
//!             })
//!         })
//!         .collect();
//!     hs.into_iter().map(|h| h.join().unwrap()).collect()
//! });
//! assert_eq!(errs[0], errs[1]);
//! assert!(errs[0].contains("save failed on rank 1"), "{}", errs[0]);
//! ```

use fabkit_core::Bootstrap;

use crate::outcome::{Error, Result};

const OK: u8 = 0;
const FAILED: u8 = 1;

/// Every rank contributes `local`: its payload, or its error. If all
/// succeeded, returns every rank's payload in rank order; if any failed,
/// every rank returns the same [`Error::Collective`] naming each failing
/// rank and its message (a failing rank's own typed error is kept as the
/// source). Collective; bounded by the bootstrap's own timeout.
pub fn agree(
    boot: &dyn Bootstrap,
    op: &'static str,
    local: Result<Vec<u8>>,
) -> Result<Vec<Vec<u8>>> {
    let mine = match &local {
        Ok(payload) => [&[OK][..], payload].concat(),
        Err(e) => [&[FAILED][..], e.to_string().as_bytes()].concat(),
    };
    let all = match boot.allgather(&mine) {
        Ok(all) => all,
        // The exchange itself failed (a peer gone): this rank's own error,
        // if it has one, says more than the bootstrap's timeout.
        Err(e) => return Err(local.err().unwrap_or(Error::Bootstrap(e))),
    };
    let mut failed = Vec::new();
    let mut payloads = Vec::with_capacity(all.len());
    for (rank, m) in all.into_iter().enumerate() {
        match m.split_first() {
            Some((&OK, payload)) => payloads.push(payload.to_vec()),
            Some((&FAILED, msg)) => failed.push((rank, String::from_utf8_lossy(msg).into_owned())),
            _ => failed.push((
                rank,
                format!("sent {} B that are not an agreement message", m.len()),
            )),
        }
    }
    if failed.is_empty() {
        return Ok(payloads);
    }
    Err(Error::Collective {
        op,
        failed,
        local: local.err().map(Box::new),
    })
}
