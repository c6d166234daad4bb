//! The MPI-DHT's functions, with its signatures, codes and meanings.
#![allow(unsafe_code)]

use std::ffi::{c_char, c_int, c_void, CString};
use std::path::Path;

use fabkit_core::Bootstrap;
use fabkit_dht::{Error, Found};

use crate::boundary::{bytes, bytes_mut, fail, guarded, mpi_finalized, path_of};
use crate::codes::{
    write_code, AccumulateFunc, DHT_init_t, DHT_FILE_IO_ERROR, DHT_NOT_IMPLEMENTED,
    DHT_READ_CORRUPT, DHT_READ_MISS, DHT_SUCCESS, DHT_UCX_ERROR, DHT_WRONG_FILE,
};
use crate::table::{create, each, free, on_table, Call, DHT};

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
    on_table(table, "DHT_write", Call::Local, |t| {
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
        let mut out = [fabkit_dht::Write::Inserted];
        match each!(&t.over, d => d.write_into(&[k], &[v], &mut out)) {
            Ok(()) => {
                // SAFETY: null or writable (the contract).
                unsafe { t.place(k, proc_, index) };
                write_code(out[0])
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
    on_table(table, "DHT_read", Call::Local, |t| {
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
        let mut found = [Found::Miss];
        match each!(&t.over, d => d.read_into(&[k], dest, &mut found)) {
            Ok(()) => read_code(found[0]),
            Err(e) => fail(DHT_UCX_ERROR, format!("DHT_read: {e}")),
        }
    })
}

/// A read's outcome as the MPI-DHT's code.
pub(crate) fn read_code(f: Found) -> c_int {
    match f {
        Found::Hit => DHT_SUCCESS,
        Found::Miss => DHT_READ_MISS,
        Found::Corrupt => DHT_READ_CORRUPT,
    }
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
                "DHT_free: MPI is already finalised; free tables before MPI_Finalize",
            );
        }
        let retries = each!(&t.over, d => d.stats().checksum_retries);
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
    const CALL: &str = "DHT_to_file";
    on_table(table, CALL, Call::Collective, |t| {
        // SAFETY: NUL-terminated (the contract).
        let p = match t.agree(CALL, DHT_FILE_IO_ERROR, unsafe { path_of(filename, CALL) }) {
            Ok(p) => p,
            Err(c) => return c,
        };
        match each!(&t.over, d => d.dump(p, &*t.boot)) {
            Ok(_) => DHT_SUCCESS,
            Err(e) => fail(DHT_FILE_IO_ERROR, format!("{CALL}: {e}")),
        }
    })
}

/// What a failed restore is in the MPI-DHT's codes: the files are not a
/// dump of a table like this one (`DHT_WRONG_FILE`), or reading them, or
/// the machinery, failed (`DHT_FILE_IO_ERROR`).
fn restore_code(e: &Error) -> c_int {
    let wrong = |e: &Error| {
        matches!(
            e,
            Error::Shard { .. } | Error::Mismatch(_) | Error::Config(_)
        )
    };
    match e {
        Error::Collective { local: Some(l), .. } if wrong(l) => DHT_WRONG_FILE,
        Error::Collective { failed, .. } if !failed.is_empty() => DHT_FILE_IO_ERROR,
        e if wrong(e) => DHT_WRONG_FILE,
        _ => DHT_FILE_IO_ERROR,
    }
}

/// Reads a dump's shards into the table, whatever its size or rank count
/// (the shard count is rank 0's count of the files); collective.
///
/// # Safety
///
/// `table` is from `DHT_create`; `filename` is a NUL-terminated string.
#[no_mangle]
pub unsafe extern "C" fn DHT_from_file(table: *mut DHT, filename: *const c_char) -> c_int {
    const CALL: &str = "DHT_from_file";
    on_table(table, CALL, Call::Collective, |t| {
        // SAFETY: NUL-terminated (the contract).
        let p = match t.agree(CALL, DHT_FILE_IO_ERROR, unsafe { path_of(filename, CALL) }) {
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
            Err(e) => return fail(DHT_UCX_ERROR, format!("{CALL}: {e}")),
        };
        if shards == 0 {
            return fail(
                DHT_WRONG_FILE,
                format!(
                    "{CALL}: no {}.rank0: give the name DHT_to_file was given",
                    p.display()
                ),
            );
        }
        match each!(&t.over, d => d.restore(p, shards, &*t.boot, 256)) {
            Ok(_) => DHT_SUCCESS,
            Err(e) => fail(restore_code(&e), format!("{CALL}: {e}")),
        }
    })
}

/// Prints the table's counters, summed over ranks, on rank 0 (through C's
/// stdout, so it keeps its place among the program's own lines); the
/// counters are not reset. Collective.
///
/// # Safety
///
/// `table` is from `DHT_create`.
#[no_mangle]
pub unsafe extern "C" fn DHT_print_statistics(table: *mut DHT) -> c_int {
    on_table(table, "DHT_print_statistics", Call::Collective, |t| {
        match each!(&t.over, d => d.stats_all(&*t.boot)) {
            Ok(s) => {
                if t.boot.rank() == 0 {
                    let text = format!(
                        "DHT statistics, {} on {} ranks:\n  reads {} (hits {}, misses {}, \
                         corrupt {}), writes {} (inserts {}, updates {}, evictions {})\n  \
                         checksum retries {}, lock retries {}, remote operations {} in {} \
                         batches\n",
                        t.described.to_string_lossy(),
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
                    let c = CString::new(text).unwrap_or_default();
                    // SAFETY: a NUL-terminated string printed with "%s".
                    unsafe { libc::printf(c"%s".as_ptr(), c.as_ptr()) };
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
    let _ = on_table(table, "DHT_set_accumulate_callback", Call::Local, |t| {
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
    const CALL: &str = "DHT_write_accumulate";
    on_table(table, CALL, Call::Local, |t| {
        let cfg = t.config();
        if cfg.variant == fabkit_dht::Variant::Lockfree {
            return fail(
                DHT_NOT_IMPLEMENTED,
                format!(
                    "{CALL}: a lock-free table holds no bucket to update in place; choose fine, \
                     coarse or chunked (FABKIT_DHT_VARIANT)"
                ),
            );
        }
        let Some(cb) = t.accumulate.get() else {
            return fail(
                DHT_UCX_ERROR,
                format!("{CALL}: no callback: call DHT_set_accumulate_callback first"),
            );
        };
        if send_size < 0 || (data.is_null() && send_size != 0) {
            return fail(
                DHT_UCX_ERROR,
                format!(
                    "{CALL}: send_size {send_size} with data {data:?}: give the size in bytes \
                     of the data sent (0 with NULL data)"
                ),
            );
        }
        // SAFETY: sized as the table's keys (the contract).
        let k = match unsafe { bytes(key, cfg.key_len, "DHT_write_accumulate: key") } {
            Ok(k) => k,
            Err(c) => return c,
        };
        let vlen = c_int::try_from(cfg.value_len).unwrap_or(c_int::MAX);
        let mut ret = 0;
        let mut call = |_: usize, v: &mut [u8]| {
            // SAFETY: the caller's callback, given its data and the value
            // as the MPI-DHT gives them.
            ret = unsafe { cb(send_size, data, vlen, v.as_mut_ptr().cast()) };
            ret == 0
        };
        let mut out = [fabkit_dht::Write::Inserted];
        match each!(&t.over, d => d.update_into(&[k], &mut call, &mut out)) {
            Ok(()) => {
                // SAFETY: null or writable (the contract).
                unsafe {
                    if let Some(r) = callback_ret.as_mut() {
                        *r = ret;
                    }
                    t.place(k, proc_, index);
                }
                write_code(out[0])
            }
            Err(e) => fail(DHT_UCX_ERROR, format!("{CALL}: {e}")),
        }
    })
}
