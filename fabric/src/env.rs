//! The process environment libfabric reads once, prepared before `main`.
//!
//! `ofi_rxm` over verbs opens one internal completion queue per endpoint of
//! `FI_UNIVERSE_SIZE x (FI_OFI_RXM_MSG_TX_SIZE + FI_OFI_RXM_MSG_RX_SIZE)`
//! entries (`FI_OFI_RXM_MSG_TX_SIZE + FI_OFI_RXM_MSG_RX_SIZE` is 256 by
//! default; with `FI_OFI_RXM_USE_SRX` the receive side is counted once), and
//! no API call reaches that size. Where it exceeds the device's `max_cqe`
//! (32767 on soft-RoCE), `fi_enable` fails with EINVAL. libfabric reads these
//! variables once per process, and `setenv` is unsafe once threads run, so
//! fabkit sets them from an `.init_array` constructor, before `main` and
//! before any thread, when the user has not: `FI_UNIVERSE_SIZE` becomes the
//! most the smallest device allows (at most libfabric's default of 1024),
//! and when a launcher's rank count (mpirun, srun, fabkit's own) needs more,
//! the per-peer queue sizes shrink to fit (never below 16 each). What was
//! decided is in [`prepared`]; [`check_ranks`] turns a job that still cannot
//! fit into one error naming the variable to set.
//!
//! Also here: [`timeout_scale`], the factor (`FABKIT_TIMEOUT_SCALE`) by which
//! fabkit stretches every timeout, for runs under emulation.

use std::sync::OnceLock;
use std::time::Duration;

use crate::error::{Error, Result};

/// ofi_rxm's default per-peer queue sizes and universe (libfabric 1.17).
const RXM_TX_DEFAULT: u64 = 128;
const RXM_RX_DEFAULT: u64 = 128;
const RXM_SRX_DEFAULT: u64 = 4096;
const UNIVERSE_DEFAULT: u64 = 1024;
/// The smallest per-peer queue fabkit will shrink ofi_rxm's to.
const RXM_MIN_QUEUE: u64 = 16;

/// What the constructor found and set.
#[derive(Clone, Debug, Default, serde::Serialize)]
pub struct Prepared {
    /// Variables fabkit set, with their values.
    pub set: Vec<(String, String)>,
    /// The completion-queue limit of ofi_rxm over verbs, when an RDMA device
    /// is present.
    pub rxm_verbs: Option<RxmLimit>,
}

/// ofi_rxm-over-verbs sizing against the smallest device's `max_cqe`.
#[derive(Clone, Debug, serde::Serialize)]
pub struct RxmLimit {
    /// The device with the smallest `max_cqe`.
    pub device: String,
    /// Its `max_cqe`.
    pub max_cqe: u64,
    /// Entries each peer takes in the queue (TX, plus RX without SRX).
    pub per_peer: u64,
    /// Entries that do not grow with peers (the shared RX queue, with SRX).
    pub fixed: u64,
    /// The universe size in effect (the user's, or the one fabkit set).
    pub universe: u64,
    /// Whether the user set FI_UNIVERSE_SIZE.
    pub user_universe: bool,
}

impl RxmLimit {
    /// Most processes whose queues fit the device.
    pub fn max_universe(&self) -> u64 {
        self.max_cqe.saturating_sub(self.fixed) / self.per_peer.max(1)
    }

    /// The queue the effective universe asks for.
    pub fn queue(&self) -> u64 {
        self.fixed
            .saturating_add(self.per_peer.saturating_mul(self.universe))
    }
}

static PREPARED: OnceLock<Prepared> = OnceLock::new();

/// Runs before `main` (and before a test harness starts its threads).
#[used]
#[link_section = ".init_array"]
static PREPARE_AT_START: extern "C" fn() = {
    extern "C" fn prepare_at_start() {
        // A panic must not cross into the C runtime: swallow it, leaving the
        // environment as the user gave it.
        let _ = std::panic::catch_unwind(|| PREPARED.get_or_init(prepare));
    }
    prepare_at_start
};

/// What fabkit set in this process's environment before `main`.
pub fn prepared() -> &'static Prepared {
    PREPARED.get_or_init(Prepared::default)
}

fn var_u64(name: &str) -> Option<u64> {
    std::env::var(name).ok()?.trim().parse().ok()
}

fn var_bool(name: &str) -> Option<bool> {
    let v = std::env::var(name).ok()?.to_ascii_lowercase();
    Some(matches!(v.trim(), "1" | "y" | "yes" | "on" | "true"))
}

/// The job's rank count as launchers publish it.
fn launcher_ranks() -> Option<u64> {
    [
        "FABKIT_SIZE",
        "OMPI_COMM_WORLD_SIZE",
        "PMI_SIZE",
        "PMIX_SIZE",
        "SLURM_NTASKS",
    ]
    .iter()
    .find_map(|v| var_u64(v))
}

fn has_rdma_devices() -> bool {
    std::fs::read_dir("/sys/class/infiniband").is_ok_and(|mut d| d.next().is_some())
}

#[cfg(feature = "verbs")]
fn smallest_cq() -> Option<(String, u64)> {
    crate::verbs::devices()
        .devices
        .into_iter()
        .filter(|d| d.max_cqe > 0)
        .map(|d| (d.name, u64::from(d.max_cqe)))
        .min_by_key(|(_, m)| *m)
}

#[cfg(not(feature = "verbs"))]
fn smallest_cq() -> Option<(String, u64)> {
    None
}

fn prepare() -> Prepared {
    if !has_rdma_devices() {
        return Prepared::default();
    }
    let Some((device, max_cqe)) = smallest_cq() else {
        return Prepared::default();
    };
    let plan = plan(
        max_cqe,
        &Sizes {
            universe: var_u64("FI_UNIVERSE_SIZE"),
            tx: var_u64("FI_OFI_RXM_MSG_TX_SIZE"),
            rx: var_u64("FI_OFI_RXM_MSG_RX_SIZE"),
            srx: var_bool("FI_OFI_RXM_USE_SRX").unwrap_or(false),
            ranks: launcher_ranks(),
        },
    );
    for (k, v) in &plan.set {
        // Before main: no other thread can read or write the environment.
        std::env::set_var(k, v);
    }
    Prepared {
        set: plan.set,
        rxm_verbs: Some(RxmLimit {
            device,
            ..plan.limit
        }),
    }
}

/// The variables as the user left them, plus the launcher's rank count.
#[derive(Debug, Default)]
struct Sizes {
    universe: Option<u64>,
    tx: Option<u64>,
    rx: Option<u64>,
    srx: bool,
    ranks: Option<u64>,
}

#[derive(Debug)]
struct Plan {
    set: Vec<(String, String)>,
    limit: RxmLimit,
}

/// Decides what to set for a device of `max_cqe` entries (pure, tested).
fn plan(max_cqe: u64, s: &Sizes) -> Plan {
    let mut tx = s.tx.unwrap_or(RXM_TX_DEFAULT);
    let mut rx = s.rx.unwrap_or(if s.srx {
        RXM_SRX_DEFAULT
    } else {
        RXM_RX_DEFAULT
    });
    let mut set = Vec::new();
    let limit = |tx: u64, rx: u64, universe: u64| RxmLimit {
        device: String::new(),
        max_cqe,
        per_peer: if s.srx { tx } else { tx.saturating_add(rx) },
        fixed: if s.srx { rx } else { 0 },
        universe,
        user_universe: s.universe.is_some(),
    };
    if let Some(u) = s.universe {
        return Plan {
            set,
            limit: limit(tx, rx, u),
        };
    }
    let mut universe = limit(tx, rx, 0).max_universe().min(UNIVERSE_DEFAULT);
    if let Some(n) = s.ranks.filter(|&n| n > universe) {
        // Shrink the per-peer queues (powers of two, both alike) until the
        // job fits, if the user left them alone.
        if s.tx.is_none() && s.rx.is_none() && !s.srx {
            let mut q = RXM_TX_DEFAULT;
            while q > RXM_MIN_QUEUE && n.saturating_mul(2 * q) > max_cqe {
                q /= 2;
            }
            if n.saturating_mul(2 * q) <= max_cqe {
                (tx, rx) = (q, q);
                set.push(("FI_OFI_RXM_MSG_TX_SIZE".to_string(), q.to_string()));
                set.push(("FI_OFI_RXM_MSG_RX_SIZE".to_string(), q.to_string()));
                universe = n;
            }
        }
    }
    if universe > 0 {
        set.push(("FI_UNIVERSE_SIZE".to_string(), universe.to_string()));
    }
    Plan {
        set,
        limit: limit(tx, rx, universe),
    }
}

/// Refuses, before anything is opened, a job of `ranks` that ofi_rxm over
/// verbs cannot size its queues for, naming what to set.
pub fn check_ranks(provider: &str, ranks: usize) -> Result<()> {
    let Some(l) = &prepared().rxm_verbs else {
        return Ok(());
    };
    if !(provider.contains("verbs") && provider.contains("ofi_rxm")) {
        return Ok(());
    }
    let n = ranks as u64;
    let fix = if l.max_universe() >= n {
        format!("set FI_UNIVERSE_SIZE to {n} (or unset it)")
    } else {
        let q = l.max_cqe / n.max(1) / 2;
        format!("set FI_OFI_RXM_MSG_TX_SIZE and FI_OFI_RXM_MSG_RX_SIZE to at most {q} each")
    };
    if l.universe < n || l.queue() > l.max_cqe {
        return Err(Error::Unsupported {
            provider: provider.to_string(),
            what: format!(
                "{n} ranks: ofi_rxm sizes each endpoint's completion queue for FI_UNIVERSE_SIZE={} \
                 peers ({} entries), and {} holds at most {} (max_cqe)",
                l.universe,
                l.queue(),
                l.device,
                l.max_cqe
            ),
            hint: fix,
        });
    }
    Ok(())
}

/// The factor by which fabkit stretches its timeouts: `FABKIT_TIMEOUT_SCALE`
/// (a whole number from 1 to 1000), 1 when unset. For slow runs such as
/// a guest under emulation; results are never scaled.
pub fn timeout_scale() -> u32 {
    static SCALE: OnceLock<u32> = OnceLock::new();
    *SCALE.get_or_init(|| match std::env::var("FABKIT_TIMEOUT_SCALE") {
        Err(_) => 1,
        Ok(v) => match v.trim().parse::<u32>() {
            Ok(s @ 1..=1000) => s,
            _ => {
                eprintln!(
                    "fabkit: ignoring FABKIT_TIMEOUT_SCALE={v:?}: give a whole number from 1 to 1000"
                );
                1
            }
        },
    })
}

/// `d` stretched by [`timeout_scale`].
pub fn scaled(d: Duration) -> Duration {
    d.saturating_mul(timeout_scale())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn set_of(p: &Plan) -> Vec<(&str, &str)> {
        p.set
            .iter()
            .map(|(k, v)| (k.as_str(), v.as_str()))
            .collect()
    }

    #[test]
    fn soft_roce_gets_the_largest_universe_its_queue_holds() {
        // rxe: max_cqe 32767; 127 x 256 = 32512 fits, 128 x 256 does not.
        let p = plan(32767, &Sizes::default());
        assert_eq!(set_of(&p), [("FI_UNIVERSE_SIZE", "127")]);
        assert_eq!(p.limit.queue(), 32512);
    }

    #[test]
    fn a_large_device_keeps_libfabrics_default_universe() {
        let p = plan(4_194_303, &Sizes::default()); // mlx5
        assert_eq!(set_of(&p), [("FI_UNIVERSE_SIZE", "1024")]);
    }

    #[test]
    fn a_job_larger_than_the_universe_shrinks_the_queues() {
        let s = Sizes {
            ranks: Some(500),
            ..Sizes::default()
        };
        let p = plan(32767, &s);
        // 500 x 2 x 32 = 32000 <= 32767; 64 would need 64000.
        assert_eq!(
            set_of(&p),
            [
                ("FI_OFI_RXM_MSG_TX_SIZE", "32"),
                ("FI_OFI_RXM_MSG_RX_SIZE", "32"),
                ("FI_UNIVERSE_SIZE", "500")
            ]
        );
        assert!(p.limit.queue() <= 32767);
    }

    #[test]
    fn a_job_too_large_even_for_the_smallest_queues_is_left_alone() {
        let s = Sizes {
            ranks: Some(5000),
            ..Sizes::default()
        };
        let p = plan(32767, &s);
        // 5000 x 32 > 32767: the universe stays what fits; check_ranks names it.
        assert_eq!(set_of(&p), [("FI_UNIVERSE_SIZE", "127")]);
        assert!(p.limit.universe < 5000);
    }

    #[test]
    fn the_users_variables_win() {
        let s = Sizes {
            universe: Some(300),
            ..Sizes::default()
        };
        let p = plan(32767, &s);
        assert!(p.set.is_empty());
        assert_eq!(p.limit.universe, 300);
        assert!(p.limit.queue() > p.limit.max_cqe);
        let s = Sizes {
            tx: Some(64),
            rx: Some(64),
            ..Sizes::default()
        };
        assert_eq!(set_of(&plan(32767, &s)), [("FI_UNIVERSE_SIZE", "255")]);
        let s = Sizes {
            srx: true,
            ..Sizes::default()
        };
        // SRX: 4096 once plus 128 per peer.
        assert_eq!(set_of(&plan(32767, &s)), [("FI_UNIVERSE_SIZE", "223")]);
    }
}
