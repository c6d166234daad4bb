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

use crate::error::{Error, Result};

/// ofi_rxm's default per-peer queue sizes and universe (libfabric 1.17).
const RXM_TX_DEFAULT: u64 = 128;
const RXM_RX_DEFAULT: u64 = 128;
const RXM_SRX_DEFAULT: u64 = 4096;
const UNIVERSE_DEFAULT: u64 = 1024;
/// The smallest per-peer queue fabkit will shrink ofi_rxm's to.
const RXM_MIN_QUEUE: u64 = 16;

/// The variables a fabkit process set, with their values, for its children:
/// a child started with that environment (fabkit launch, mpirun from
/// fabkit) recomputes a variable that still has fabkit's value for its own
/// job; one given another value was set by the user.
const MARK: &str = "FABKIT_SET_ENV";

/// What the constructor found and set.
#[derive(Clone, Debug, Default, serde::Serialize)]
pub struct Prepared {
    /// Whether the constructor ran (false only if the linker dropped it).
    pub ran: bool,
    /// Variables fabkit set, with their values.
    pub set: Vec<(String, String)>,
    /// The completion-queue limit of ofi_rxm over verbs, when an RDMA device
    /// is present.
    pub rxm_verbs: Option<RxmLimit>,
    /// Why nothing was set although a device is present, in plain words.
    pub note: Option<String>,
}

/// ofi_rxm-over-verbs sizing against the smallest device's `max_cqe`.
#[derive(Clone, Debug, serde::Serialize)]
pub struct RxmLimit {
    /// The device with the smallest `max_cqe`.
    pub device: String,
    /// Its `max_cqe`.
    pub max_cqe: u64,
    /// Per-peer transmit queue (FI_OFI_RXM_MSG_TX_SIZE).
    pub tx: u64,
    /// Receive queue (FI_OFI_RXM_MSG_RX_SIZE): per peer, or shared with SRX.
    pub rx: u64,
    /// Whether the receive queue is shared (FI_OFI_RXM_USE_SRX).
    pub srx: bool,
    /// The universe size in effect (the user's, fabkit's, or libfabric's
    /// default when nothing fits).
    pub universe: u64,
    /// Whether the user set FI_UNIVERSE_SIZE.
    pub user_universe: bool,
}

impl RxmLimit {
    /// Entries each peer takes in the queue (TX, plus RX without SRX).
    pub fn per_peer(&self) -> u64 {
        if self.srx {
            self.tx
        } else {
            self.tx.saturating_add(self.rx)
        }
    }

    /// Entries that do not grow with peers (the shared RX queue, with SRX).
    pub fn fixed(&self) -> u64 {
        if self.srx {
            self.rx
        } else {
            0
        }
    }

    /// Most processes whose queues fit the device.
    pub fn max_universe(&self) -> u64 {
        self.max_cqe.saturating_sub(self.fixed()) / self.per_peer().max(1)
    }

    /// The queue a universe of `u` asks for.
    pub fn queue_for(&self, u: u64) -> u64 {
        self.fixed()
            .saturating_add(self.per_peer().saturating_mul(u))
    }

    /// The queue the effective universe asks for.
    pub fn queue(&self) -> u64 {
        self.queue_for(self.universe)
    }
}

static PREPARED: OnceLock<Prepared> = OnceLock::new();

/// Runs before `main`, and before a test harness starts its threads. The
/// static is `#[used]` so rustc keeps it, and it sits in this module, which
/// every rank's setup calls into, so the linker keeps its object. glibc
/// passes (argc, argv, envp) to `.init_array` entries; a function taking
/// no arguments ignores them, as the C ABI allows.
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

/// [`prepared`], preparing now if the constructor did not run (a library
/// linked statically whose constructor the linker dropped): then, with
/// other threads running (an MPI's), nothing is set and `note` says why,
/// and [`check_ranks`] still refuses a job the queues cannot hold. A
/// library calls it before its first libfabric call.
pub fn prepare_late() -> &'static Prepared {
    PREPARED.get_or_init(prepare)
}

/// A variable as the user left it.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Var {
    Unset,
    Num(u64),
    Invalid(String),
}

impl Var {
    fn num(&self) -> Option<u64> {
        match self {
            Var::Num(n) => Some(*n),
            _ => None,
        }
    }
}

/// `name`, unless it holds the value a fabkit parent set (then it is ours
/// to recompute). `inherited` is the parent's `NAME=value,...`.
fn user_var(name: &str, inherited: &str) -> Var {
    match std::env::var(name) {
        Err(_) => Var::Unset,
        Ok(v) if inherited.split(',').any(|kv| kv == format!("{name}={v}")) => Var::Unset,
        Ok(v) => match v.trim().parse::<u64>() {
            Ok(n) if n > 0 => Var::Num(n),
            _ => Var::Invalid(v),
        },
    }
}

fn var_bool(name: &str) -> bool {
    std::env::var(name).is_ok_and(|v| {
        matches!(
            v.trim().to_ascii_lowercase().as_str(),
            "1" | "y" | "yes" | "on" | "true"
        )
    })
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
    .find_map(|v| user_var(v, "").num())
}

/// Whether the kernel lists any RDMA device (InfiniBand, RoCE, iWARP).
pub fn has_rdma_devices() -> bool {
    std::fs::read_dir("/sys/class/infiniband").is_ok_and(|mut d| d.next().is_some())
}

fn smallest_cq() -> Option<(String, u64)> {
    crate::verbs::queue_limits()
        .devices
        .into_iter()
        .filter(|d| d.max_cqe > 0)
        .map(|d| (d.name, u64::from(d.max_cqe)))
        .min_by_key(|(_, m)| *m)
}

fn threads_running() -> usize {
    std::fs::read_dir("/proc/self/task").map_or(1, |d| d.count())
}

fn prepare() -> Prepared {
    let mut out = Prepared {
        ran: true,
        ..Prepared::default()
    };
    if !has_rdma_devices() {
        return out;
    }
    let Some((device, max_cqe)) = smallest_cq() else {
        return out;
    };
    let inherited = std::env::var(MARK).unwrap_or_default();
    let vars = [
        ("FI_UNIVERSE_SIZE", user_var("FI_UNIVERSE_SIZE", &inherited)),
        (
            "FI_OFI_RXM_MSG_TX_SIZE",
            user_var("FI_OFI_RXM_MSG_TX_SIZE", &inherited),
        ),
        (
            "FI_OFI_RXM_MSG_RX_SIZE",
            user_var("FI_OFI_RXM_MSG_RX_SIZE", &inherited),
        ),
    ];
    let sizes = Sizes {
        universe: vars[0].1.num(),
        tx: vars[1].1.num(),
        rx: vars[2].1.num(),
        srx: var_bool("FI_OFI_RXM_USE_SRX"),
        ranks: launcher_ranks(),
    };
    let mut plan = plan(max_cqe, &sizes);
    plan.limit.device = device;
    if let Some((name, Var::Invalid(v))) = vars.iter().find(|(_, v)| matches!(v, Var::Invalid(_))) {
        out.note = Some(format!(
            "{name}={v:?} is not a whole number above 0: fabkit set nothing; fix or unset it"
        ));
        plan.set.clear();
    } else if threads_running() > 1 {
        // setenv beside running threads is undefined behaviour.
        out.note = Some(
            "threads were already running before main (a preloaded library?): fabkit set \
             nothing; set FI_UNIVERSE_SIZE yourself"
                .into(),
        );
        plan.set.clear();
    }
    if !plan.set.is_empty() {
        let marks: Vec<String> = plan.set.iter().map(|(k, v)| format!("{k}={v}")).collect();
        // Before main, on the only thread: nothing else reads the environment.
        for (k, v) in &plan.set {
            std::env::set_var(k, v);
        }
        std::env::set_var(MARK, marks.join(","));
    }
    out.set = plan.set;
    out.rxm_verbs = Some(plan.limit);
    out
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
    let mut l = RxmLimit {
        device: String::new(),
        max_cqe,
        tx: s.tx.unwrap_or(RXM_TX_DEFAULT),
        rx: s.rx.unwrap_or(if s.srx {
            RXM_SRX_DEFAULT
        } else {
            RXM_RX_DEFAULT
        }),
        srx: s.srx,
        universe: UNIVERSE_DEFAULT,
        user_universe: s.universe.is_some(),
    };
    let mut set = Vec::new();
    if let Some(u) = s.universe {
        l.universe = u;
        return Plan { set, limit: l };
    }
    let fits = l.max_universe();
    let mut universe = fits.min(UNIVERSE_DEFAULT);
    match s.ranks {
        Some(n) if n > universe && n <= fits => universe = n,
        Some(n) if n > fits && s.tx.is_none() && s.rx.is_none() && !s.srx => {
            // Shrink the per-peer queues (powers of two, both alike) until
            // the job fits, down to RXM_MIN_QUEUE.
            let mut shrunk = l.clone();
            while shrunk.tx > RXM_MIN_QUEUE && shrunk.queue_for(n) > max_cqe {
                shrunk.tx /= 2;
                shrunk.rx = shrunk.tx;
            }
            if shrunk.queue_for(n) <= max_cqe {
                let q = shrunk.tx;
                l = shrunk;
                set.push(("FI_OFI_RXM_MSG_TX_SIZE".to_string(), q.to_string()));
                set.push(("FI_OFI_RXM_MSG_RX_SIZE".to_string(), q.to_string()));
                universe = n;
            }
        }
        _ => {}
    }
    if universe > 0 {
        l.universe = universe;
        set.push(("FI_UNIVERSE_SIZE".to_string(), universe.to_string()));
    }
    // Else not even one peer fits: libfabric's default stays, and
    // check_ranks names the queue sizes.
    Plan { set, limit: l }
}

/// Refuses, before anything is opened, a job of `ranks` that ofi_rxm over
/// verbs cannot size its queues for, naming what to set.
pub fn check_ranks(provider: &str, ranks: usize) -> Result<()> {
    match &prepared().rxm_verbs {
        Some(l) if provider.contains("verbs") && provider.contains("ofi_rxm") => {
            refuse(l, ranks as u64).map_or(Ok(()), |(what, hint)| {
                Err(Error::Unsupported {
                    provider: provider.to_string(),
                    what,
                    hint,
                })
            })
        }
        _ => Ok(()),
    }
}

/// What is wrong with `n` ranks under `l`, and what to set (pure, tested).
fn refuse(l: &RxmLimit, n: u64) -> Option<(String, String)> {
    if l.universe >= n && l.queue() <= l.max_cqe {
        return None;
    }
    let what =
        format!(
        "a job of {n} ranks with completion queues of {} entries (FI_UNIVERSE_SIZE={} x {} per \
         peer{}), more than {}'s max_cqe of {}",
        l.queue(),
        l.universe,
        l.per_peer(),
        if l.srx { format!(" + {} shared", l.fixed()) } else { String::new() },
        l.device,
        l.max_cqe
    );
    let hint = if l.queue_for(n) <= l.max_cqe {
        format!("set FI_UNIVERSE_SIZE={n}")
    } else {
        // Per-peer room for n peers, split evenly over TX and RX.
        let room = l.max_cqe.saturating_sub(l.fixed()) / n.max(1);
        let q = if l.srx { room } else { room / 2 };
        if q >= RXM_MIN_QUEUE {
            if l.srx {
                format!("set FI_UNIVERSE_SIZE={n} and FI_OFI_RXM_MSG_TX_SIZE={q}")
            } else {
                format!(
                    "set FI_UNIVERSE_SIZE={n}, FI_OFI_RXM_MSG_TX_SIZE={q} and \
                     FI_OFI_RXM_MSG_RX_SIZE={q}"
                )
            }
        } else {
            format!(
                "{} cannot hold queues of at least {RXM_MIN_QUEUE} entries for {n} peers: run \
                 fewer ranks, or on a device with a larger max_cqe",
                l.device
            )
        }
    };
    Some((what, hint))
}

pub use fabkit_core::time::{scaled, timeout_scale};

/// The providers the tests of fabkit's crates run on: the comma-separated
/// list in `FABKIT_TEST_PROVIDERS`, or the ones that offer RMA and u64
/// atomics on these machines (`shm`, `tcp;ofi_rxm`, `sockets`). One list
/// for every crate's tests, so a provider left out is left out everywhere.
pub fn test_providers() -> Vec<String> {
    match std::env::var("FABKIT_TEST_PROVIDERS") {
        Ok(list) => list.split(',').map(str::to_string).collect(),
        Err(_) => ["shm", "tcp;ofi_rxm", "sockets"].map(String::from).to_vec(),
    }
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
    fn a_job_that_fits_raises_the_universe_whatever_the_user_set() {
        // mlx5, 2000 ranks, the user's own TX size: 2000 x (64 + 128) fits.
        let s = Sizes {
            tx: Some(64),
            ranks: Some(2000),
            ..Sizes::default()
        };
        let p = plan(4_194_303, &s);
        assert_eq!(set_of(&p), [("FI_UNIVERSE_SIZE", "2000")]);
        assert!(refuse(&p.limit, 2000).is_none());
    }

    #[test]
    fn queues_too_large_for_one_peer_keep_libfabrics_default_and_say_so() {
        let s = Sizes {
            tx: Some(20000),
            rx: Some(20000),
            ..Sizes::default()
        };
        let p = plan(32767, &s);
        assert!(p.set.is_empty());
        assert_eq!(p.limit.universe, UNIVERSE_DEFAULT);
        let (what, hint) = refuse(&p.limit, 2).unwrap();
        assert!(
            what.contains("FI_UNIVERSE_SIZE=1024 x 40000 per peer"),
            "{what}"
        );
        assert_eq!(
            hint,
            "set FI_UNIVERSE_SIZE=2, FI_OFI_RXM_MSG_TX_SIZE=8191 and FI_OFI_RXM_MSG_RX_SIZE=8191"
        );
    }

    #[test]
    fn refusals_name_values_that_fit() {
        let mut l = plan(32767, &Sizes::default()).limit;
        assert!(refuse(&l, 127).is_none());
        // 200 in-process ranks: 127 is too small, and 200 x 256 does not fit.
        let (_, hint) = refuse(&l, 200).unwrap();
        assert_eq!(
            hint,
            "set FI_UNIVERSE_SIZE=200, FI_OFI_RXM_MSG_TX_SIZE=81 and FI_OFI_RXM_MSG_RX_SIZE=81"
        );
        l.tx = 81;
        l.rx = 81;
        l.universe = 200;
        assert!(refuse(&l, 200).is_none(), "the advice fits");
        (l.tx, l.rx) = (128, 128);
        // A universe the user set too large, for a job that fits anyway.
        l.universe = 300;
        l.user_universe = true;
        let (what, hint) = refuse(&l, 2).unwrap();
        assert!(what.contains("76800 entries"), "{what}");
        assert_eq!(hint, "set FI_UNIVERSE_SIZE=2");
        // Beyond any queue of 16.
        l.device = "rxe0".into();
        let (_, hint) = refuse(&l, 5000).unwrap();
        assert!(
            hint.starts_with("rxe0 cannot hold queues of at least 16"),
            "{hint}"
        );
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
