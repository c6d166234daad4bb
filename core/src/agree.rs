//! Agreement: a collective step in which a failure on one rank fails the
//! step on every rank, with that rank's message.
//!
//! A rank that fails on its own (a damaged file, a full disk, a bad
//! argument) and returns early would leave its peers waiting at the next
//! exchange until the bootstrap's timeout, and they would then report a
//! timeout instead of the cause. So each rank contributes either its
//! payload or its error to one [`Bootstrap::allgather`]: every rank
//! reaches it, every rank sees every outcome, and every rank returns the
//! same result. Layers wrap [`Disagreed`] in errors of their own.
//!
//! ```
//! use fabkit_core::agree::{agree, Disagreed};
//! use fabkit_core::{Bootstrap, ThreadGroup};
//! use std::time::Duration;
//!
//! let boots = ThreadGroup::members(2, Duration::from_secs(5));
//! let outs: Vec<_> = std::thread::scope(|s| {
//!     let hs: Vec<_> = boots
//!         .iter()
//!         .map(|b| {
//!             s.spawn(move || {
//!                 let mine = if b.rank() == 1 { Err("disk full".to_string()) } else { Ok(vec![7]) };
//!                 agree(b, mine.as_deref().map_err(String::as_str))
//!             })
//!         })
//!         .collect();
//!     hs.into_iter().map(|h| h.join().unwrap()).collect()
//! });
//! for o in outs {
//!     match o {
//!         Err(Disagreed::Failed(f)) => assert_eq!(f, vec![(1, "disk full".to_string())]),
//!         other => panic!("{other:?}"),
//!     }
//! }
//! ```

use crate::bootstrap::Bootstrap;
use crate::error::Error;

const OK: u8 = 0;
const FAILED: u8 = 1;

/// Why a step was not agreed.
#[derive(Debug)]
pub enum Disagreed {
    /// The exchange itself failed (a peer gone, a timeout).
    Exchange(Error),
    /// These ranks failed the step, each with its message, in rank order.
    Failed(Vec<(usize, String)>),
}

impl std::fmt::Display for Disagreed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Disagreed::Exchange(e) => write!(f, "{e}"),
            Disagreed::Failed(failed) => {
                for (i, (rank, msg)) in failed.iter().enumerate() {
                    if i > 0 {
                        f.write_str("; ")?;
                    }
                    write!(f, "rank {rank}: {msg}")?;
                }
                Ok(())
            }
        }
    }
}

impl std::error::Error for Disagreed {}

/// Every rank contributes `local`: its payload, or its error's message.
/// If every rank succeeded, every rank's payload in rank order; else the
/// same [`Disagreed::Failed`] on every rank. Collective; bounded by the
/// bootstrap's own timeout. Never an empty contribution (an MPI allgather
/// of nothing is refused).
pub fn agree(
    boot: &dyn Bootstrap,
    local: std::result::Result<&[u8], &str>,
) -> std::result::Result<Vec<Vec<u8>>, Disagreed> {
    let mine = match local {
        Ok(payload) => [&[OK][..], payload].concat(),
        Err(msg) => [&[FAILED][..], msg.as_bytes()].concat(),
    };
    let all = boot.allgather(&mine).map_err(Disagreed::Exchange)?;
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
        Ok(payloads)
    } else {
        Err(Disagreed::Failed(failed))
    }
}
