//! The MPI-DHT's functions, with its signatures, codes and meanings.

use std::ffi::{c_char, c_int, c_void};
use std::path::Path;

use fabkit_core::Bootstrap;
use fabkit_dht::{Read, Write};

use crate::boundary::{bytes, bytes_mut, fail, guarded, keep_notices, mpi_finalized, path_of};
use crate::codes::{
    fabkit_dht_options_t, AccumulateFunc, DHT_init_t, DHT_FILE_IO_ERROR, DHT_NOT_IMPLEMENTED,
    DHT_READ_CORRUPT, DHT_READ_MISS, DHT_SUCCESS, DHT_UCX_ERROR, DHT_WRITE_SUCCESS_WITH_EVICTION,
    DHT_WRONG_FILE,
};
use crate::options::Options;
use crate::table::{each, free, make, on_table, DHT};

/// `DHT_create` and `fabkit_dht_create`: null on failure.
///
/// # Safety
///
/// `init_params` is null or valid; `options` is null or valid options.
pub(crate) unsafe fn create(
    init_params: *const DHT_init_t,
    options: *const fabkit_dht_options_t,
    call: &str,
) -> *mut DHT {
    keep_notices();
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
                DHT_SUCCESS
            }
            Err(e) => fail(DHT_UCX_ERROR, format!("{call}: {e}")),
        }
    });
    out
}

/// Creates a table over `init_params->comm`, with the variant and
/// transport of the environment (see the header); collective. Null on
/// failure (the reason: `fabkit_dht_last_error`).
///
/// # Safety
///
/// `init_params` is null or points to a valid `DHT_init_t`.
#[no_mangle]
pub unsafe extern "C" fn DHT_create(init_params: *const DHT_init_t) -> *mut DHT {
    // SAFETY: the caller's contract, passed on.
    unsafe { create(init_params, std::ptr::null(), "DHT_create") }
}

/// Writes `proc` and `index`, where given, for `key`.
///
/// # Safety
///
/// `proc_` and `index` are null or writable.
pub(crate) unsafe fn place(t: &DHT, key: &[u8], proc_: *mut u32, index: *mut u32) {
    let (rank, bucket) = each!(&t.tab, d => d.place_of(key));
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

/// A write's outcome as the MPI-DHT's code.
pub(crate) fn write_code(w: Write) -> c_int {
    match w {
        Write::Evicted => DHT_WRITE_SUCCESS_WITH_EVICTION,
        Write::Inserted | Write::Updated => DHT_SUCCESS,
    }
}

/// Writes `data` under `key`. `DHT_SUCCESS`, or
/// `DHT_WRITE_SUCCESS_WITH_EVICTION` when another key was pushed out.
/// `proc` and `index` (may be null) receive the key's rank and first
/// candidate bucket.
///
/// # Safety
///
/// `table` is from `DHT_create`; `key` and `data` hold the table's key and
/// value sizes; `proc` and `index` are null or writable.
#[no_mangle]
pub unsafe extern "C" fn DHT_write(
    table: *mut DHT,
    key: *mut c_void,
    data: *mut c_void,
    proc_: *mut u32,
    index: *mut u32,
) -> c_int {
    on_table(table, "DHT_write", |t| {
        let cfg = t.config();
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
        match each!(&t.tab, d => d.write(k, v)) {
            Ok(w) => {
                // SAFETY: null or writable (the contract).
                unsafe { place(t, k, proc_, index) };
                write_code(w)
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
    table: *mut DHT,
    key: *const c_void,
    destination: *mut c_void,
) -> c_int {
    on_table(table, "DHT_read", |t| {
        let cfg = t.config();
        // SAFETY: sized as the table's keys and values (the contract).
        let (k, dest) = match unsafe {
            (
                bytes(key, cfg.key_len, "DHT_read: key"),
                bytes_mut(destination, cfg.value_len, "DHT_read: destination"),
            )
        } {
            (Ok(k), Ok(d)) => (k, d),
            (Err(c), _) | (_, Err(c)) => return c,
        };
        match each!(&t.tab, d => d.read(k)) {
            Ok(Read::Hit(v)) => {
                dest.copy_from_slice(&v);
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
pub unsafe extern "C" fn DHT_free(table: *mut DHT, chksum_retries: *mut u32) -> c_int {
    guarded(|| {
        if table.is_null() {
            return fail(DHT_UCX_ERROR, "DHT_free: table is null");
        }
        // SAFETY: from DHT_create's Box, freed once (the contract).
        let t = unsafe { Box::from_raw(table) };
        if mpi_finalized() {
            // Tearing down would call MPI after MPI_Finalize: leak instead.
            std::mem::forget(t);
            return fail(
                DHT_UCX_ERROR,
                "DHT_free: MPI is already finalised; free tables first",
            );
        }
        let retries = each!(&t.tab, d => d.stats().checksum_retries);
        // SAFETY: null or writable (the contract).
        if let Some(r) = unsafe { chksum_retries.as_mut() } {
            *r = u32::try_from(retries).unwrap_or(u32::MAX);
        }
        match free(*t) {
            Ok(()) => DHT_SUCCESS,
            Err(e) => fail(DHT_UCX_ERROR, format!("DHT_free: {e}")),
        }
    })
}

/// Dumps the table to checksummed shards `filename.rank<N>`; collective.
///
/// # Safety
///
/// `table` is from `DHT_create`; `filename` is a NUL-terminated string.
#[no_mangle]
pub unsafe extern "C" fn DHT_to_file(table: *mut DHT, filename: *const c_char) -> c_int {
    on_table(table, "DHT_to_file", |t| {
        // SAFETY: NUL-terminated (the contract).
        let p = match unsafe { path_of(filename, "DHT_to_file") } {
            Ok(p) => p,
            Err(c) => return c,
        };
        match each!(&t.tab, d => d.dump(p, &*t.boot)) {
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
pub unsafe extern "C" fn DHT_from_file(table: *mut DHT, filename: *const c_char) -> c_int {
    on_table(table, "DHT_from_file", |t| {
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
        match each!(&t.tab, d => d.restore(p, shards, &*t.boot, 256)) {
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
pub unsafe extern "C" fn DHT_print_statistics(table: *mut DHT) -> c_int {
    on_table(table, "DHT_print_statistics", |t| {
        match each!(&t.tab, d => d.stats_all(&*t.boot)) {
            Ok(s) => {
                if t.boot.rank() == 0 {
                    println!(
                        "DHT statistics, {} on {} ranks:\n  reads {} (hits {}, misses {}, \
                         corrupt {}), writes {} (inserts {}, updates {}, evictions {})\n  \
                         checksum retries {}, lock retries {}, remote operations {} in {} \
                         batches",
                        t.options.describe(),
                        t.boot.size(),
                        s.reads,
                        s.hits,
                        s.misses,
                        s.corrupt,
                        s.writes,
                        s.inserts,
                        s.updates,
                        s.evictions,
                        s.checksum_retries,
                        s.lock_retries,
                        s.remote_ops,
                        s.batches
                    );
                }
                DHT_SUCCESS
            }
            Err(e) => fail(DHT_UCX_ERROR, format!("DHT_print_statistics: {e}")),
        }
    })
}

/// Sets the function `DHT_write_accumulate` calls (null: none).
///
/// # Safety
///
/// `table` is from `DHT_create`; `callback` is null or a function that
/// neither throws nor calls the table.
#[no_mangle]
pub unsafe extern "C" fn DHT_set_accumulate_callback(
    table: *mut DHT,
    callback: Option<AccumulateFunc>,
) {
    let _ = on_table(table, "DHT_set_accumulate_callback", |t| {
        t.accumulate.set(callback);
        DHT_SUCCESS
    });
}

/// Updates `key`'s value in place with the accumulate callback, while the
/// variant holds the bucket: the callback gets `send_size` and `data`, the
/// value size and the value (the stored one, or zeros for a key not
/// there); it returns 0 to store the value as it left it (its return:
/// `callback_ret`). `DHT_SUCCESS` or `DHT_WRITE_SUCCESS_WITH_EVICTION`;
/// `DHT_NOT_IMPLEMENTED` on a lock-free table.
///
/// # Safety
///
/// `table` is from `DHT_create`; `key` holds the key size; `data` is valid
/// for `send_size` bytes (or null with 0); `proc`, `index` and
/// `callback_ret` are null or writable.
#[no_mangle]
pub unsafe extern "C" fn DHT_write_accumulate(
    table: *mut DHT,
    key: *const c_void,
    send_size: c_int,
    data: *mut c_void,
    proc_: *mut u32,
    index: *mut u32,
    callback_ret: *mut c_int,
) -> c_int {
    on_table(table, "DHT_write_accumulate", |t| {
        let cfg = t.config();
        if cfg.variant == fabkit_dht::Variant::Lockfree {
            return fail(
                DHT_NOT_IMPLEMENTED,
                "DHT_write_accumulate: a lock-free table holds no bucket to update in place; \
                 choose fine, coarse or chunked (FABKIT_DHT_VARIANT)",
            );
        }
        let Some(cb) = t.accumulate.get() else {
            return fail(
                DHT_UCX_ERROR,
                "DHT_write_accumulate: no callback; call DHT_set_accumulate_callback first",
            );
        };
        if send_size < 0 || (data.is_null() && send_size != 0) {
            return fail(
                DHT_UCX_ERROR,
                format!("DHT_write_accumulate: send_size {send_size} with data {data:?}"),
            );
        }
        // SAFETY: sized as the table's keys (the contract).
        let k = match unsafe { bytes(key, cfg.key_len, "DHT_write_accumulate: key") } {
            Ok(k) => k,
            Err(c) => return c,
        };
        let vlen = c_int::try_from(cfg.value_len).unwrap_or(c_int::MAX);
        let mut ret = 0;
        let call = |v: &mut [u8]| {
            // SAFETY: the caller's callback, given its data and the value
            // as the MPI-DHT gives them.
            ret = unsafe { cb(send_size, data, vlen, v.as_mut_ptr().cast()) };
            ret == 0
        };
        match each!(&t.tab, d => d.update(k, call)) {
            Ok(w) => {
                // SAFETY: null or writable (the contract).
                unsafe {
                    if let Some(r) = callback_ret.as_mut() {
                        *r = ret;
                    }
                    place(t, k, proc_, index);
                }
                write_code(w)
            }
            Err(e) => fail(DHT_UCX_ERROR, format!("DHT_write_accumulate: {e}")),
        }
    })
}
