//! A table as C holds it: the DHT over the transport its options chose,
//! the bootstrap it owns, and what a call needs between calls (the
//! accumulate callback, whether an internal error left it unusable).

use std::cell::Cell;
use std::ffi::c_int;
use std::rc::Rc;
use std::time::Duration;

use fabkit_core::Bootstrap;
use fabkit_dht::transport::mpi::MpiTransport;
use fabkit_dht::transport::shm::ShmTransport;
use fabkit_dht::{Config, Dht, KeyHash};
use fabkit_fabric::{Rank, RankConfig};
use fabkit_mpi::{MpiBootstrap, WindowKind};

use crate::boundary::{fail, guarded, mpi_finalized, panic_text};
use crate::codes::{AccumulateFunc, DHT_init_t, DHT_UCX_ERROR};
use crate::options::{Options, Path};

/// The DHT over one of the transports.
pub(crate) enum Tab {
    Mpi(Dht<MpiTransport<'static>>),
    Fabric(Dht<Rank>),
    Shm(Dht<ShmTransport>),
}

/// Runs `$e` with `$d` bound to the table's `Dht`, whatever its transport.
macro_rules! each {
    ($tab:expr, $d:ident => $e:expr) => {
        match $tab {
            $crate::table::Tab::Mpi($d) => $e,
            $crate::table::Tab::Fabric($d) => $e,
            $crate::table::Tab::Shm($d) => $e,
        }
    };
}
pub(crate) use each;

/// A table, opaque to C.
pub struct DHT {
    // Field order is drop order: the table (and its window or fabric rank)
    // before MPI's duplicates in the bootstrap.
    pub(crate) tab: Tab,
    pub(crate) boot: Rc<MpiBootstrap>,
    pub(crate) options: Options,
    /// `options.describe()`, as C reads it.
    pub(crate) described: std::ffi::CString,
    pub(crate) accumulate: Cell<Option<AccumulateFunc>>,
    /// What an internal error (a panic) said; the table is refused after.
    poisoned: std::cell::RefCell<Option<String>>,
}

impl std::fmt::Debug for DHT {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "DHT({})", self.options.describe())
    }
}

impl DHT {
    pub(crate) fn config(&self) -> &Config {
        each!(&self.tab, d => d.config())
    }
}

/// The key and value sizes and bucket count `init` asks for, checked.
fn sizes(init: &DHT_init_t) -> Result<(usize, usize, u64), String> {
    let key = usize::try_from(init.key_size).ok().filter(|&k| k > 0);
    let value = usize::try_from(init.data_size).ok().filter(|&v| v > 0);
    let (Some(key_len), Some(value_len)) = (key, value) else {
        return Err(format!(
            "key_size {} and data_size {} must both be positive",
            init.key_size, init.data_size
        ));
    };
    if init.bucket_count == 0 {
        return Err("bucket_count is 0: give the buckets each rank holds".into());
    }
    Ok((key_len, value_len, u64::from(init.bucket_count)))
}

/// Makes the table `init` and `opts` describe; collective over
/// `init.comm`.
pub(crate) fn make(init: &DHT_init_t, opts: Result<Options, String>) -> Result<DHT, String> {
    let timeout = fabkit_core::time::scaled(Duration::from_secs(60));
    // SAFETY: the caller gives a live communicator of its initialised MPI,
    // as the MPI-DHT's DHT_create requires, on every rank of it; the
    // bootstrap is dropped in DHT_free, before the caller finalises MPI.
    let boot =
        unsafe { MpiBootstrap::on_communicator(init.comm, timeout) }.map_err(|e| e.to_string())?;
    // Every rank checks its arguments, then all agree, on them and on the
    // options: a rank whose arguments are wrong fails DHT_create on every
    // rank, not only on its own while the others wait in the next
    // collective.
    let local = sizes(init).and_then(|s| opts.map(|o| (s, o)));
    let mine = match &local {
        Ok((s, o)) => format!("ok {s:?} {}", o.describe()),
        Err(_) => "wrong".to_string(),
    };
    let all = boot.allgather(mine.as_bytes()).map_err(|e| e.to_string())?;
    let ((key_len, value_len, buckets), options) = local?;
    if let Some(r) = all.iter().position(|v| v == b"wrong") {
        return Err(format!("rank {r}'s arguments are wrong (it says why)"));
    }
    if let Some(r) = all.iter().position(|v| v != mine.as_bytes()) {
        return Err(format!(
            "the ranks disagree: this rank asks for {mine:?}, rank {r} for {:?}",
            String::from_utf8_lossy(&all[r])
        ));
    }
    let boot = Rc::new(boot);
    let mut cfg = Config::new(options.variant);
    (cfg.key_len, cfg.value_len, cfg.buckets) = (key_len, value_len, buckets);
    cfg.validate().map_err(|e| e.to_string())?;
    let hash = match init.hash_func {
        None => KeyHash::default(),
        Some(f) => KeyHash::custom(move |k: &[u8]| {
            let len = c_int::try_from(k.len()).unwrap_or(c_int::MAX);
            // SAFETY: the caller's function, given the key's bytes and
            // length as the MPI-DHT gives them.
            unsafe { f(len, k.as_ptr().cast()) }
        }),
    };
    let rc = || {
        let mut rc = RankConfig::new(options.provider.clone());
        rc.domain = options.domain.clone();
        rc.region_len = cfg.region_len();
        rc.atomics = cfg.variant.needs_atomics();
        rc.timeout = timeout;
        // Before the first libfabric call: what fabkit's constructor sets
        // before main, should a static link have dropped it.
        fabkit_fabric::env::prepare_late();
        rc
    };
    let err = |e: &dyn std::fmt::Display| e.to_string();
    // Every rank reaches the transport's collective setup, which agrees on
    // the region's size first.
    let tab = match options.path {
        Path::Mpi => {
            // Coarse locks each target's window per operation.
            let coarse = options.variant == fabkit_dht::Variant::Coarse;
            let t = MpiTransport::new_shared(
                boot.clone(),
                cfg.region_len(),
                WindowKind::Allocate,
                coarse,
            )
            .map_err(|e| err(&e))?;
            Tab::Mpi(Dht::create_with_hash(t, cfg, &*boot, hash).map_err(|e| err(&e))?)
        }
        Path::Fabric => {
            let t = Rank::establish(rc(), &*boot).map_err(|e| err(&e))?;
            Tab::Fabric(Dht::create_with_hash(t, cfg, &*boot, hash).map_err(|e| err(&e))?)
        }
        Path::Shm => {
            let t = ShmTransport::establish(rc(), &*boot).map_err(|e| err(&e))?;
            Tab::Shm(Dht::create_with_hash(t, cfg, &*boot, hash).map_err(|e| err(&e))?)
        }
    };
    let described = std::ffi::CString::new(options.describe()).unwrap_or_default();
    Ok(DHT {
        tab,
        boot,
        options,
        described,
        accumulate: Cell::new(None),
        poisoned: std::cell::RefCell::new(None),
    })
}

/// Frees the table: the DHT, then its transport, then the bootstrap;
/// collective.
pub(crate) fn free(t: DHT) -> Result<(), String> {
    let DHT { tab, boot, .. } = t;
    let b = &*boot;
    let freed = match tab {
        Tab::Mpi(d) => d
            .free(b)
            .map_err(|e| e.to_string())
            .and_then(|t| t.free().map_err(|e| e.to_string())),
        Tab::Fabric(d) => d
            .free(b)
            .map_err(|e| e.to_string())
            .and_then(|t| t.finish(b).map_err(|e| e.to_string())),
        Tab::Shm(d) => d
            .free(b)
            .map_err(|e| e.to_string())
            .and_then(|t| t.finish(b).map_err(|e| e.to_string())),
    };
    drop(boot);
    freed
}

/// Runs `f` on the table behind `table`, guarded: a null table, one used
/// after `MPI_Finalize`, or one an earlier internal error left unusable is
/// refused, and a panic in `f` leaves it unusable.
pub(crate) fn on_table(table: *mut DHT, call: &str, f: impl FnOnce(&DHT) -> c_int) -> c_int {
    guarded(|| {
        if mpi_finalized() {
            return fail(DHT_UCX_ERROR, format!("{call}: MPI is already finalised"));
        }
        // SAFETY: null or a table from DHT_create not yet freed (the
        // caller's contract of every DHT_* call).
        let Some(t) = (unsafe { table.as_ref() }) else {
            return fail(DHT_UCX_ERROR, format!("{call}: table is null"));
        };
        if let Some(why) = &*t.poisoned.borrow() {
            return fail(
                DHT_UCX_ERROR,
                format!(
                    "{call}: the table is unusable after an internal error ({why}); free it \
                     with DHT_free"
                ),
            );
        }
        match std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| f(t))) {
            Ok(c) => c,
            Err(p) => {
                let why = panic_text(&*p);
                *t.poisoned.borrow_mut() = Some(why.clone());
                fail(DHT_UCX_ERROR, format!("{call}: internal error: {why}"))
            }
        }
    })
}
