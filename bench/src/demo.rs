//! `fabkit demo`, the embedded default job: `info`, `check` with in-process
//! ranks on every provider here that offers RMA and atomics, then a short
//! DHT benchmark on the fastest same-node path with Redis beside it.

use std::time::Duration;

use anyhow::Result;

use crate::check::{self, CheckArgs};

/// The providers the demo checks, of those `fabkit info` found: the ones
/// fabkit runs RMA and every u64 atomic on, among those that need no
/// hardware.
const CHECKED: [&str; 3] = ["shm", "tcp;ofi_rxm", "sockets"];

/// Runs the demo with `ranks` ranks per check; whether everything passed.
pub fn command(ranks: usize) -> Result<bool> {
    let r = crate::info::gather(None)?;
    crate::info::print(&r);
    println!();
    let providers: Vec<String> = r
        .providers
        .iter()
        .filter(|p| p.fabkit_rma && p.atomics.is_some_and(|a| a.all()))
        .map(|p| p.provider.clone())
        .filter(|p| CHECKED.contains(&p.as_str()))
        .collect();
    let checked = check::command(&CheckArgs {
        providers,
        domain: None,
        ranks,
        timeout: Duration::from_secs(10),
        json: None,
        #[cfg(feature = "mpi")]
        mpi: None,
    })?;
    println!();
    Ok(checked & crate::dhtbench::demo()?)
}
