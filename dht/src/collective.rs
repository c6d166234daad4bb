//! Agreement in the DHT's errors: [`fabkit_core::agree`] (a collective step
//! in which a failure on one rank fails the step on every rank, with that
//! rank's message), returning [`Error::Collective`] and keeping a failing
//! rank's own typed error as the source.
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

use fabkit_core::agree::Disagreed;
use fabkit_core::Bootstrap;

use crate::outcome::{Error, Result};

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
    let msg = local.as_ref().err().map(ToString::to_string);
    let mine = match &local {
        Ok(payload) => Ok(&payload[..]),
        Err(_) => Err(msg.as_deref().unwrap_or_default()),
    };
    match fabkit_core::agree::agree(boot, mine) {
        Ok(payloads) => Ok(payloads),
        // The exchange itself failed (a peer gone): this rank's own error,
        // if it has one, says more than the bootstrap's timeout.
        Err(Disagreed::Exchange(e)) => Err(local.err().unwrap_or(Error::Bootstrap(e))),
        Err(Disagreed::Failed(failed)) => Err(Error::Collective {
            op,
            failed,
            local: local.err().map(Box::new),
        }),
    }
}
