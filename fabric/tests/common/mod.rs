//! Helpers shared by the fabric integration tests.
#![allow(dead_code)]

use std::time::Duration;

use fabkit_core::bootstrap::{Bootstrap, ThreadGroup};
use fabkit_fabric::{Rank, RankConfig};

/// The providers to test: `fabkit_fabric::env::test_providers`, the one
/// list every crate's tests share.
pub fn providers() -> Vec<String> {
    fabkit_fabric::env::test_providers()
}

/// Sets env that must be in place before libfabric initialises.
pub fn init_env() {
    // The sockets provider spins 10 ms per progress wait by default, which
    // makes it ~100x slower on 2 cores; .cargo/config.toml also sets this.
    assert_eq!(
        std::env::var("FI_SOCKETS_PE_WAITTIME").as_deref(),
        Ok("0"),
        "run the tests through cargo so .cargo/config.toml sets FI_SOCKETS_PE_WAITTIME=0"
    );
}

/// Runs `body` on `n` in-process ranks of `provider`; returns each rank's result.
pub fn with_ranks<T: Send>(n: usize, cfg: RankConfig, body: impl Fn(&Rank) -> T + Sync) -> Vec<T> {
    with_ranks_boot(n, cfg, |r, _| body(r))
}

/// As [`with_ranks`], with the bootstrap handle for barriers.
pub fn with_ranks_boot<T: Send>(
    n: usize,
    cfg: RankConfig,
    body: impl Fn(&Rank, &dyn Bootstrap) -> T + Sync,
) -> Vec<T> {
    init_env();
    let boots = ThreadGroup::members(n, Duration::from_secs(30));
    std::thread::scope(|s| {
        let handles: Vec<_> = boots
            .iter()
            .map(|b| {
                let cfg = cfg.clone();
                let body = &body;
                s.spawn(move || {
                    let rank = Rank::establish(cfg, b)
                        .unwrap_or_else(|e| panic!("rank {} establish: {e}", b.rank()));
                    let out = body(&rank, b);
                    rank.finish(b).expect("finish");
                    out
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    })
}
