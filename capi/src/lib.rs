//! The DHT for C and C++ MPI programs: the public MPI-DHT's API
//! (`<LUCX/MPI/DHT.h>`, in `include/` beside this crate), so that a program
//! written against it relinks against fabkit with no source change.
//!
//! A table is made on the caller's communicator (duplicated first; MPI is
//! the caller's to initialise and finalise) with an `MPI_Win_allocate`
//! window and the lock-free variant, the MPI-DHT's default build. Keys are
//! placed by the caller's `hash_func` when it gives one.
//!
//! At the boundary: a null pointer or a size that does not fit is an error
//! code, never a crash; a panic never crosses into C (it becomes
//! `DHT_UCX_ERROR`, after Rust's hook prints it); failures are return codes
//! with the message kept for `fabkit_dht_last_error`, and nothing else is
//! printed but by `DHT_print_statistics`, except on the one fatal path (an
//! MPI epoch that cannot be closed aborts the job, saying why). Ranks check
//! their arguments and agree before any window exists, so wrong sizes fail
//! `DHT_create` on every rank (a null `init_params` cannot reach the
//! others). Calls after the caller's `MPI_Finalize` are refused, and
//! `DHT_free` then leaks instead of calling MPI.
//!
//! Not yet: `DHT_write_accumulate` and `DHT_set_accumulate_callback` answer
//! `DHT_NOT_IMPLEMENTED`; the variant and transport are not yet chosen by
//! the environment; `proc` and `index` of `DHT_write` are set to the key's
//! rank and first candidate bucket.
#![allow(unsafe_code)]

use std::cell::RefCell;
use std::ffi::{c_char, c_int, c_void, CStr, CString};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::Path;
use std::rc::Rc;
use std::time::Duration;

use fabkit_core::Bootstrap;
use fabkit_dht::transport::mpi::MpiTransport;
use fabkit_dht::{Config, Dht, KeyHash, Read, Variant, Write};
use fabkit_mpi::{MpiBootstrap, WindowKind};
use mpi::ffi::MPI_Comm;

/// Success.
pub const DHT_SUCCESS: c_int = 0;
/// Any failure of the machinery (the MPI-DHT's UCX error code).
pub const DHT_UCX_ERROR: c_int = -1;
/// No bucket holds the key.
pub const DHT_READ_MISS: c_int = -2;
/// The key's bucket kept failing its checksum.
pub const DHT_READ_CORRUPT: c_int = -3;
/// The write evicted another key.
pub const DHT_WRITE_SUCCESS_WITH_EVICTION: c_int = -5;
/// The files are not a dump of a table like this one.
pub const DHT_WRONG_FILE: c_int = -11;
/// Reading or writing the dump's files failed.
pub const DHT_FILE_IO_ERROR: c_int = -12;
/// Not (yet) offered.
pub const DHT_NOT_IMPLEMENTED: c_int = -32;

/// The caller's hash function: key size in bytes, key.
pub type HashFunc = unsafe extern "C" fn(c_int, *const c_void) -> u64;

/// What `DHT_create` takes, field for field as the MPI-DHT's header.
#[repr(C)]
#[derive(Debug)]
pub struct DHT_init_t {
    /// Bytes of a key.
    pub key_size: c_int,
    /// Bytes of a value.
    pub data_size: c_int,
    /// Buckets on each rank.
    pub bucket_count: std::ffi::c_uint,
    /// The caller's hash, or null for fabkit's.
    pub hash_func: Option<HashFunc>,
    /// The ranks that share the table.
    pub comm: MPI_Comm,
}

/// A table, opaque to C: it owns its bootstrap and window.
pub struct DHT {
    // Field order is drop order: the table (and its window) before MPI's
    // duplicates in the bootstrap.
    dht: Dht<MpiTransport<'static>>,
    boot: Rc<MpiBootstrap>,
}

impl std::fmt::Debug for DHT {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "DHT({:?})", self.dht)
    }
}

thread_local! {
    static LAST_ERROR: RefCell<CString> = RefCell::new(CString::default());
}

/// Keeps `msg` for `fabkit_dht_last_error` and gives `code` back.
fn fail(code: c_int, msg: impl std::fmt::Display) -> c_int {
    let text = CString::new(msg.to_string().replace('\0', " ")).unwrap_or_default();
    let _ = LAST_ERROR.try_with(|e| *e.borrow_mut() = text);
    code
}

/// Runs `f`, turning a panic into `DHT_UCX_ERROR` with its message.
fn guarded(f: impl FnOnce() -> c_int) -> c_int {
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(c) => c,
        Err(p) => {
            let why = p
                .downcast_ref::<&str>()
                .map(|s| s.to_string())
                .or_else(|| p.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "a panic".into());
            fail(DHT_UCX_ERROR, format!("internal error: {why}"))
        }
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

fn make(init: &DHT_init_t) -> Result<DHT, String> {
    let timeout = fabkit_core::time::scaled(Duration::from_secs(60));
    // SAFETY: the caller gives a live communicator of its initialised MPI,
    // as the MPI-DHT's DHT_create requires, on every rank of it; the
    // bootstrap is dropped in DHT_free, before the caller finalises MPI.
    let boot =
        unsafe { MpiBootstrap::on_communicator(init.comm, timeout) }.map_err(|e| e.to_string())?;
    // Every rank checks its arguments, then all agree: a rank whose
    // arguments are wrong fails DHT_create on every rank, not only on its
    // own while the others wait in the next collective.
    let local = sizes(init);
    let all = boot
        .allgather(&[u8::from(local.is_ok())])
        .map_err(|e| e.to_string())?;
    let (key_len, value_len, buckets) = match (local, all.iter().position(|v| v != &[1])) {
        (Err(e), _) => return Err(e),
        (Ok(_), Some(r)) => return Err(format!("rank {r}'s arguments are wrong (it says why)")),
        (Ok(s), None) => s,
    };
    let boot = Rc::new(boot);
    let mut cfg = Config::new(Variant::Lockfree);
    (cfg.key_len, cfg.value_len, cfg.buckets) = (key_len, value_len, buckets);
    let hash = match init.hash_func {
        None => KeyHash::default(),
        Some(f) => KeyHash::custom(move |k: &[u8]| {
            let len = c_int::try_from(k.len()).unwrap_or(c_int::MAX);
            // SAFETY: the caller's function, given the key's bytes and
            // length as the MPI-DHT gives them.
            unsafe { f(len, k.as_ptr().cast()) }
        }),
    };
    // Every rank reaches the window's collective creation, which agrees on
    // the size first: a rank whose configuration is wrong fails it on all.
    let t = MpiTransport::new_shared(boot.clone(), cfg.region_len(), WindowKind::Allocate, false)
        .map_err(|e| e.to_string())?;
    let dht = Dht::create_with_hash(t, cfg, &*boot, hash).map_err(|e| e.to_string())?;
    Ok(DHT { dht, boot })
}

/// Creates a table over `init_params->comm`; collective. Null on failure
/// (the reason: `fabkit_dht_last_error`).
///
/// # Safety
///
/// `init_params` is null or points to a valid `DHT_init_t`.
#[no_mangle]
pub unsafe extern "C" fn DHT_create(init_params: *const DHT_init_t) -> *mut DHT {
    // SAFETY: null or valid (the caller's contract).
    let Some(init) = (unsafe { init_params.as_ref() }) else {
        fail(DHT_UCX_ERROR, "DHT_create: init_params is null");
        return std::ptr::null_mut();
    };
    let mut out = std::ptr::null_mut();
    let _ = guarded(|| match make(init) {
        Ok(t) => {
            out = Box::into_raw(Box::new(t));
            DHT_SUCCESS
        }
        Err(e) => fail(DHT_UCX_ERROR, format!("DHT_create: {e}")),
    });
    out
}

/// Whether the caller has finalised MPI: no MPI call may follow.
fn mpi_finalized() -> bool {
    let mut fin = 0;
    // SAFETY: may be called at any time, after MPI_Finalize too.
    unsafe { mpi::ffi::MPI_Finalized(&mut fin) };
    fin != 0
}

/// The table behind `table`, or the error code for a null one or one used
/// after MPI_Finalize.
fn table<'a>(table: *mut DHT, call: &str) -> Result<&'a DHT, c_int> {
    if mpi_finalized() {
        return Err(fail(
            DHT_UCX_ERROR,
            format!("{call}: MPI is already finalised"),
        ));
    }
    // SAFETY: null or a table from DHT_create not yet freed (the caller's
    // contract of every DHT_* call).
    unsafe { table.as_ref() }.ok_or_else(|| fail(DHT_UCX_ERROR, format!("{call}: table is null")))
}

/// Runs `f` on the table behind `table_` (see [`table`]), guarded.
fn on_table(table_: *mut DHT, call: &str, f: impl FnOnce(&DHT) -> c_int) -> c_int {
    guarded(|| match table(table_, call) {
        Ok(t) => f(t),
        Err(c) => c,
    })
}

/// `len` bytes at `p`, or an error for a null pointer.
///
/// # Safety
///
/// `p` is null or valid for `len` bytes.
unsafe fn bytes<'a>(p: *const c_void, len: usize, what: &str) -> Result<&'a [u8], c_int> {
    if p.is_null() {
        return Err(fail(DHT_UCX_ERROR, format!("{what} is null")));
    }
    // SAFETY: valid for `len` bytes (the caller's contract).
    Ok(unsafe { std::slice::from_raw_parts(p.cast(), len) })
}

/// Writes `data` under `key`. `DHT_SUCCESS`, or
/// `DHT_WRITE_SUCCESS_WITH_EVICTION` when another key was pushed out.
///
/// # Safety
///
/// `table` is from `DHT_create`; `key` and `data` hold the table's key and
/// value sizes; `proc` and `index` are null or writable.
#[no_mangle]
pub unsafe extern "C" fn DHT_write(
    table_: *mut DHT,
    key: *mut c_void,
    data: *mut c_void,
    proc_: *mut u32,
    index: *mut u32,
) -> c_int {
    on_table(table_, "DHT_write", |t| {
        let cfg = t.dht.config();
        // SAFETY: sized as the table's keys and values (the contract).
        let (k, v) = match unsafe {
            (
                bytes(key, cfg.key_len, "DHT_write: key"),
                bytes(data, cfg.value_len, "DHT_write: data"),
            )
        } {
            (Ok(k), Ok(v)) => (k, v),
            (Err(c), _) | (_, Err(c)) => return c,
        };
        match t.dht.write(k, v) {
            Ok(w) => {
                let (rank, bucket) = t.dht.place_of(k);
                // SAFETY: null or writable (the contract).
                unsafe {
                    if let Some(p) = proc_.as_mut() {
                        *p = u32::try_from(rank).unwrap_or(u32::MAX);
                    }
                    if let Some(i) = index.as_mut() {
                        *i = u32::try_from(bucket).unwrap_or(u32::MAX);
                    }
                }
                match w {
                    Write::Evicted => DHT_WRITE_SUCCESS_WITH_EVICTION,
                    Write::Inserted | Write::Updated => DHT_SUCCESS,
                }
            }
            Err(e) => fail(DHT_UCX_ERROR, format!("DHT_write: {e}")),
        }
    })
}

/// Reads `key`'s value into `destination`: `DHT_SUCCESS`,
/// `DHT_READ_MISS` or `DHT_READ_CORRUPT`.
///
/// # Safety
///
/// `table` is from `DHT_create`; `key` holds the key size and
/// `destination` has room for the value size.
#[no_mangle]
pub unsafe extern "C" fn DHT_read(
    table_: *mut DHT,
    key: *const c_void,
    destination: *mut c_void,
) -> c_int {
    on_table(table_, "DHT_read", |t| {
        let cfg = t.dht.config();
        // SAFETY: sized as the table's keys (the contract).
        let k = match unsafe { bytes(key, cfg.key_len, "DHT_read: key") } {
            Ok(k) => k,
            Err(c) => return c,
        };
        if destination.is_null() {
            return fail(DHT_UCX_ERROR, "DHT_read: destination is null");
        }
        match t.dht.read(k) {
            Ok(Read::Hit(v)) => {
                // SAFETY: room for the value size (the contract).
                unsafe { std::ptr::copy_nonoverlapping(v.as_ptr(), destination.cast(), v.len()) };
                DHT_SUCCESS
            }
            Ok(Read::Miss) => DHT_READ_MISS,
            Ok(Read::Corrupt) => DHT_READ_CORRUPT,
            Err(e) => fail(DHT_UCX_ERROR, format!("DHT_read: {e}")),
        }
    })
}

/// Frees the table; collective. `chksum_retries`, if not null, receives
/// this rank's checksum re-reads.
///
/// # Safety
///
/// `table` is from `DHT_create` and not used after; `chksum_retries` is
/// null or writable.
#[no_mangle]
pub unsafe extern "C" fn DHT_free(table_: *mut DHT, chksum_retries: *mut u32) -> c_int {
    guarded(|| {
        if table_.is_null() {
            return fail(DHT_UCX_ERROR, "DHT_free: table is null");
        }
        // SAFETY: from DHT_create's Box, freed once (the contract).
        let t = unsafe { Box::from_raw(table_) };
        if mpi_finalized() {
            // Tearing down would call MPI after MPI_Finalize: leak instead.
            std::mem::forget(t);
            return fail(
                DHT_UCX_ERROR,
                "DHT_free: MPI is already finalised; free tables first",
            );
        }
        let retries = t.dht.stats().checksum_retries;
        // SAFETY: null or writable (the contract).
        if let Some(r) = unsafe { chksum_retries.as_mut() } {
            *r = u32::try_from(retries).unwrap_or(u32::MAX);
        }
        let DHT { dht, boot } = *t;
        let freed = dht
            .free(&*boot)
            .map_err(|e| e.to_string())
            .and_then(|tr| tr.free().map_err(|e| e.to_string()));
        drop(boot);
        match freed {
            Ok(()) => DHT_SUCCESS,
            Err(e) => fail(DHT_UCX_ERROR, format!("DHT_free: {e}")),
        }
    })
}

/// The path a C string names, or the error code.
///
/// # Safety
///
/// `s` is null or a NUL-terminated string.
unsafe fn path_of<'a>(s: *const c_char, call: &str) -> Result<&'a Path, c_int> {
    if s.is_null() {
        return Err(fail(DHT_FILE_IO_ERROR, format!("{call}: filename is null")));
    }
    // SAFETY: NUL-terminated (the contract).
    let c = unsafe { CStr::from_ptr(s) };
    c.to_str()
        .map(Path::new)
        .map_err(|_| fail(DHT_FILE_IO_ERROR, format!("{call}: filename is not UTF-8")))
}

/// Dumps the table to checksummed shards `filename.rank<N>`; collective.
///
/// # Safety
///
/// `table` is from `DHT_create`; `filename` is a NUL-terminated string.
#[no_mangle]
pub unsafe extern "C" fn DHT_to_file(table_: *mut DHT, filename: *const c_char) -> c_int {
    on_table(table_, "DHT_to_file", |t| {
        // SAFETY: NUL-terminated (the contract).
        let p = match unsafe { path_of(filename, "DHT_to_file") } {
            Ok(p) => p,
            Err(c) => return c,
        };
        match t.dht.dump(p, &*t.boot) {
            Ok(_) => DHT_SUCCESS,
            Err(e) => fail(DHT_FILE_IO_ERROR, format!("DHT_to_file: {e}")),
        }
    })
}

/// Reads a dump's shards into the table, whatever its size or rank count
/// (the shard count is found from the files); collective.
///
/// # Safety
///
/// `table` is from `DHT_create`; `filename` is a NUL-terminated string.
#[no_mangle]
pub unsafe extern "C" fn DHT_from_file(table_: *mut DHT, filename: *const c_char) -> c_int {
    on_table(table_, "DHT_from_file", |t| {
        // SAFETY: NUL-terminated (the contract).
        let p = match unsafe { path_of(filename, "DHT_from_file") } {
            Ok(p) => p,
            Err(c) => return c,
        };
        let seen = (0..fabkit_dht::MAX_SHARDS)
            .take_while(|r| Path::new(&format!("{}.rank{r}", p.display())).exists())
            .count() as u64;
        // Rank 0's count for all: a rank that sees fewer files (another
        // node's /tmp) must still enter the restore, which then says so.
        let shards = match t.boot.allgather(&seen.to_le_bytes()) {
            Ok(all) => all.first().and_then(|b| b.get(..8)).map_or(0, |b| {
                u64::from_le_bytes(b.try_into().expect("8 bytes")) as usize
            }),
            Err(e) => return fail(DHT_UCX_ERROR, format!("DHT_from_file: {e}")),
        };
        if shards == 0 {
            return fail(
                DHT_WRONG_FILE,
                format!("DHT_from_file: no {}.rank0", p.display()),
            );
        }
        match t.dht.restore(p, shards, &*t.boot, 256) {
            Ok(_) => DHT_SUCCESS,
            Err(e @ fabkit_dht::Error::Collective { .. }) => {
                fail(DHT_WRONG_FILE, format!("DHT_from_file: {e}"))
            }
            Err(e) => fail(DHT_FILE_IO_ERROR, format!("DHT_from_file: {e}")),
        }
    })
}

/// Prints the table's statistics, summed over ranks, on rank 0;
/// collective.
///
/// # Safety
///
/// `table` is from `DHT_create`.
#[no_mangle]
pub unsafe extern "C" fn DHT_print_statistics(table_: *mut DHT) -> c_int {
    on_table(table_, "DHT_print_statistics", |t| {
        match t.dht.stats_all(&*t.boot) {
            Ok(s) => {
                if t.boot.rank() == 0 {
                    println!("{s:?}");
                }
                DHT_SUCCESS
            }
            Err(e) => fail(DHT_UCX_ERROR, format!("DHT_print_statistics: {e}")),
        }
    })
}

/// Not yet offered: see the crate docs.
///
/// # Safety
///
/// Any arguments: none is read.
#[no_mangle]
pub unsafe extern "C" fn DHT_write_accumulate(
    _table: *mut DHT,
    _key: *const c_void,
    _send_size: c_int,
    _data: *mut c_void,
    _proc: *mut u32,
    _index: *mut u32,
    _callback_ret: *mut c_int,
) -> c_int {
    fail(
        DHT_NOT_IMPLEMENTED,
        "DHT_write_accumulate is not offered by fabkit yet",
    )
}

/// Not yet offered: see the crate docs.
///
/// # Safety
///
/// Any arguments: none is read.
#[no_mangle]
pub unsafe extern "C" fn DHT_set_accumulate_callback(
    _table: *mut DHT,
    _callback: Option<unsafe extern "C" fn(c_int, *mut c_void, c_int, *mut c_void) -> c_int>,
) {
    fail(
        DHT_NOT_IMPLEMENTED,
        "DHT_set_accumulate_callback is not offered by fabkit yet",
    );
}

/// The message of this thread's last failure (empty if none); valid until
/// the next DHT_* call on this thread.
#[no_mangle]
pub extern "C" fn fabkit_dht_last_error() -> *const c_char {
    LAST_ERROR
        .try_with(|e| e.borrow().as_ptr())
        .unwrap_or(c"".as_ptr())
}
