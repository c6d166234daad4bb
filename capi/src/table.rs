//! A table as C holds it: the DHT over the transport its options chose,
//! the bootstrap it owns, and what a call needs between calls (the
//! accumulate callback, whether an internal error left it unusable); how
//! one is made, entered, agreed on by every rank, and freed.
#![allow(unsafe_code)]

use std::cell::{Cell, RefCell};
use std::ffi::{c_int, CString};
use std::rc::Rc;

use fabkit_core::agree::Disagreed;
use fabkit_dht::open::{open, MpiBoot, Recipe, Table};
use fabkit_dht::{Config, KeyHash};
use fabkit_mpi::{MpiBootstrap, WindowKind, DEFAULT_TIMEOUT};

use crate::boundary::{caught, fail, guarded, mpi_finalized, quiet};
use crate::codes::{fabkit_dht_options_t, AccumulateFunc, DHT_init_t, DHT_UCX_ERROR};
use crate::options::{Options, Route};

/// The DHT over whichever transport its options and path chose.
pub(crate) type Over = Table<'static>;

/// Runs `$e` with `$d` bound to the table's `Dht`, whatever its transport.
macro_rules! each {
    ($over:expr, $d:ident => $e:expr) => {
        fabkit_dht::with_table!($over, $d => $e)
    };
}
pub(crate) use each;

/// A table, opaque to C.
pub struct DHT {
    // Field order is drop order: the table (and its window or fabric rank)
    // before MPI's duplicates in the bootstrap.
    pub(crate) over: Over,
    pub(crate) boot: Rc<MpiBootstrap>,
    /// What the table is: the options and the path it took, as C reads it.
    pub(crate) described: CString,
    pub(crate) accumulate: Cell<Option<AccumulateFunc>>,
    /// What an internal error (a panic) said; the table is refused after.
    poisoned: RefCell<Option<String>>,
}

impl std::fmt::Debug for DHT {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "DHT({})", self.described.to_string_lossy())
    }
}

impl DHT {
    pub(crate) fn config(&self) -> &Config {
        each!(&self.over, d => d.config())
    }

    /// Writes `proc` and `index`, where given, for `key`: its rank and
    /// first candidate bucket.
    ///
    /// # Safety
    ///
    /// `proc_` and `index` are null or writable.
    pub(crate) unsafe fn place(&self, key: &[u8], proc_: *mut u32, index: *mut u32) {
        let (rank, bucket) = each!(&self.over, d => d.place_of(key));
        // SAFETY: null or writable (the contract).
        unsafe {
            if let Some(p) = proc_.as_mut() {
                *p = u32::try_from(rank).unwrap_or(u32::MAX);
            }
            if let Some(i) = index.as_mut() {
                *i = u32::try_from(bucket).unwrap_or(u32::MAX);
            }
        }
    }

    /// Every rank's `local` outcome of a collective call's own checks,
    /// agreed before the collective starts: a rank whose arguments are
    /// wrong fails the call on every rank (with `code`), instead of
    /// leaving the others in the collective until its timeout.
    pub(crate) fn agree<T>(
        &self,
        call: &str,
        code: c_int,
        local: Result<T, c_int>,
    ) -> Result<T, c_int> {
        let mine = match &local {
            Ok(_) => Ok(&[][..]),
            Err(_) => Err(REFUSED),
        };
        let all = fabkit_core::agree::agree(&*self.boot, mine);
        let v = local?;
        match all {
            Ok(_) => Ok(v),
            Err(Disagreed::Exchange(e)) => Err(fail(DHT_UCX_ERROR, format!("{call}: {e}"))),
            Err(Disagreed::Failed(failed)) => Err(fail(
                code,
                format!(
                    "{call}: rank {} refused the call (fabkit_dht_last_error() there says why)",
                    failed[0].0
                ),
            )),
        }
    }
}

/// What a rank that refuses a collective call (or whose arguments are
/// wrong) contributes to the agreement; its reason stays in its own
/// `fabkit_dht_last_error()`.
const REFUSED: &str = "refused";

/// The key and value sizes and bucket count `init` asks for, as a
/// configuration of `variant`, checked against this host.
fn config_of(init: &DHT_init_t, variant: fabkit_dht::Variant) -> Result<Config, String> {
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
    let mut cfg = Config::new(variant);
    (cfg.key_len, cfg.value_len, cfg.buckets) = (key_len, value_len, u64::from(init.bucket_count));
    cfg.validate().map_err(|e| e.to_string())?;
    Ok(cfg)
}

/// Makes the table `init` and `opts` describe; collective over
/// `init.comm`.
fn make(init: &DHT_init_t, opts: Result<Options, String>) -> Result<DHT, String> {
    // SAFETY: the caller gives a live communicator of its initialised MPI,
    // as the MPI-DHT's DHT_create requires, on every rank of it; the
    // bootstrap is dropped in DHT_free, before the caller finalises MPI.
    let boot = unsafe { MpiBootstrap::on_communicator(init.comm, DEFAULT_TIMEOUT) }
        .map_err(|e| e.to_string())?;
    // Every rank checks its arguments, then all agree, on them and on the
    // options: a rank whose arguments are wrong fails DHT_create on every
    // rank, not only on its own while the others wait in the next
    // collective.
    let local = opts.and_then(|o| config_of(init, o.variant).map(|c| (c, o)));
    let mine = match &local {
        Ok((c, o)) => Ok(format!(
            "{} B keys, {} B values, {} buckets; {}",
            c.key_len,
            c.value_len,
            c.buckets,
            o.shared()
        )),
        Err(_) => Err(REFUSED),
    };
    let all = fabkit_core::agree::agree(&boot, mine.as_deref().map(str::as_bytes).map_err(|e| *e));
    let (cfg, options) = local?;
    let mine = mine.unwrap_or_default();
    let all = match all {
        Ok(all) => all,
        Err(Disagreed::Exchange(e)) => return Err(e.to_string()),
        Err(Disagreed::Failed(failed)) => {
            return Err(format!(
                "rank {}'s arguments or options are wrong (fabkit_dht_last_error() there says why)",
                failed[0].0
            ))
        }
    };
    if let Some(r) = all.iter().position(|v| v != mine.as_bytes()) {
        return Err(format!(
            "the ranks disagree: this rank asks for {mine:?}, rank {r} for {:?}; give every \
             rank the same sizes, FABKIT_DHT_VARIANT, FABKIT_DHT_TRANSPORT and provider",
            String::from_utf8_lossy(&all[r])
        ));
    }
    let boot = Rc::new(boot);
    let hash = match init.hash_func {
        None => KeyHash::default(),
        Some(f) => KeyHash::custom(move |k: &[u8]| {
            let len = c_int::try_from(k.len()).unwrap_or(c_int::MAX);
            // SAFETY: the caller's function, given the key's bytes and
            // length as the MPI-DHT gives them.
            unsafe { f(len, k.as_ptr().cast()) }
        }),
    };
    // Before the first libfabric call: what fabkit's constructor sets
    // before main, should a static link have dropped it.
    fabkit_fabric::env::prepare_late();
    let mut recipe = Recipe::fabric(options.provider.clone());
    recipe.domain = options.domain.clone();
    recipe.timeout = DEFAULT_TIMEOUT;
    recipe.key_hash = hash;
    if options.route == Route::Mpi {
        recipe.mpi = Some((MpiBoot::Shared(boot.clone()), WindowKind::Allocate));
    }
    let mut cfg = cfg;
    cfg.path = options.path;
    // Every rank reaches the transport's collective setup, which agrees on
    // the path and the region's size first.
    let opened = open(&cfg, &recipe, &*boot).map_err(|e| e.to_string())?;
    // Open MPI 4.1's osc rdma crashes in the atomics of a locking or
    // claiming variant over MPI windows; where the job names it, refuse
    // (every rank sees the same MCA environment, so all refuse alike).
    if let Some(why) = options.osc_refused(opened.path) {
        let _ = opened.table.close(&*boot);
        return Err(why);
    }
    let over = opened.table;
    let described = options.describe(opened.path, &opened.plan.why);
    let described = CString::new(described).unwrap_or_default();
    Ok(DHT {
        over,
        boot,
        described,
        accumulate: Cell::new(None),
        poisoned: RefCell::new(None),
    })
}

/// `DHT_create` and `fabkit_dht_create`: a table, or null on failure.
///
/// # Safety
///
/// `init_params` is null or valid; `options` is null or valid options.
pub(crate) unsafe fn create(
    init_params: *const DHT_init_t,
    options: *const fabkit_dht_options_t,
    call: &str,
) -> *mut DHT {
    quiet();
    // SAFETY: null or valid (the caller's contract).
    let Some(init) = (unsafe { init_params.as_ref() }) else {
        fail(DHT_UCX_ERROR, format!("{call}: init_params is null"));
        return std::ptr::null_mut();
    };
    if mpi_finalized() {
        fail(DHT_UCX_ERROR, format!("{call}: MPI is already finalised"));
        return std::ptr::null_mut();
    }
    let mut out = std::ptr::null_mut();
    let _ = guarded(|| {
        // SAFETY: null or valid options (the caller's contract).
        let opts = unsafe { Options::resolve(options) };
        match make(init, opts) {
            Ok(t) => {
                out = Box::into_raw(Box::new(t));
                0
            }
            Err(e) => fail(DHT_UCX_ERROR, format!("{call}: {e}")),
        }
    });
    out
}

/// Frees the table: the DHT, then its transport, then the bootstrap;
/// collective.
pub(crate) fn free(t: DHT) -> Result<(), String> {
    let DHT { over, boot, .. } = t;
    let freed = over.close(&*boot).map_err(|e| e.to_string());
    drop(boot);
    freed
}

/// Whether a call is made by one rank alone or by every rank together.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Call {
    Local,
    /// Refused on one rank (an unusable table), it is refused on all.
    Collective,
}

/// Runs `f` on the table behind `table`, guarded: a null table, one used
/// after `MPI_Finalize`, or one an earlier internal error left unusable is
/// refused (a collective call then refuses on every rank), and a panic in
/// `f` leaves the table unusable.
pub(crate) fn on_table(
    table: *mut DHT,
    name: &str,
    call: Call,
    f: impl FnOnce(&DHT) -> c_int,
) -> c_int {
    guarded(|| {
        if mpi_finalized() {
            return fail(DHT_UCX_ERROR, format!("{name}: MPI is already finalised"));
        }
        // SAFETY: null or a table from DHT_create not yet freed (the
        // caller's contract of every DHT_* call).
        let Some(t) = (unsafe { table.as_ref() }) else {
            return fail(DHT_UCX_ERROR, format!("{name}: table is null"));
        };
        let poisoned = t.poisoned.borrow().clone();
        if let Some(why) = poisoned {
            let code = fail(
                DHT_UCX_ERROR,
                format!(
                    "{name}: the table is unusable after an internal error ({why}); free it \
                     with DHT_free"
                ),
            );
            if call == Call::Collective {
                let _ = t.agree::<()>(name, DHT_UCX_ERROR, Err(code));
            }
            return code;
        }
        match caught(|| f(t)) {
            Ok(c) => c,
            Err(why) => {
                *t.poisoned.borrow_mut() = Some(why.clone());
                fail(DHT_UCX_ERROR, format!("{name}: internal error: {why}"))
            }
        }
    })
}
