//! What fabkit adds in C: the variant and transport chosen by a call, batch
//! calls, the counters as a struct, what a table is, and the last error.

use std::ffi::{c_char, c_int, c_void};

use fabkit_dht::{Found, Write};

use crate::boundary::{bytes, bytes_mut, fail, last_error};
use crate::codes::{
    fabkit_dht_options_t, fabkit_dht_stats_t, DHT_init_t, DHT_READ_CORRUPT, DHT_READ_MISS,
    DHT_SUCCESS, DHT_UCX_ERROR,
};
use crate::mpidht::{create, write_code};
use crate::table::{each, on_table, DHT};

/// `DHT_create` with fabkit's options; a null `options`, or a null field,
/// takes the environment's choice, else the default. Collective; the ranks
/// must agree.
///
/// # Safety
///
/// `init_params` is null or valid; `options` is null or points to options
/// whose fields are null or NUL-terminated strings.
#[no_mangle]
pub unsafe extern "C" fn fabkit_dht_create(
    init_params: *const DHT_init_t,
    options: *const fabkit_dht_options_t,
) -> *mut DHT {
    // SAFETY: the caller's contract, passed on.
    unsafe { create(init_params, options, "fabkit_dht_create") }
}

/// `n` key-sized or value-sized items of `size` bytes, checked.
fn span(n: usize, size: usize, call: &str) -> Result<usize, c_int> {
    n.checked_mul(size)
        .filter(|&b| b <= isize::MAX as usize)
        .ok_or_else(|| {
            fail(
                DHT_UCX_ERROR,
                format!("{call}: {n} items of {size} B do not fit in memory"),
            )
        })
}

/// Reads `n` keys (`keys`: `n` keys back to back) with their operations
/// overlapped; each hit's value lands in `values` (`n` values back to
/// back, a miss's left as it was) and each key's `DHT_SUCCESS`,
/// `DHT_READ_MISS` or `DHT_READ_CORRUPT` in `results`. Returns
/// `DHT_SUCCESS` when the batch ran.
///
/// # Safety
///
/// `table` is from `DHT_create`; `keys`, `values` and `results` hold `n`
/// keys, values and ints.
#[no_mangle]
pub unsafe extern "C" fn fabkit_dht_read_many(
    table: *mut DHT,
    n: usize,
    keys: *const c_void,
    values: *mut c_void,
    results: *mut c_int,
) -> c_int {
    const CALL: &str = "fabkit_dht_read_many";
    on_table(table, CALL, |t| {
        let cfg = t.config();
        let spans = (span(n, cfg.key_len, CALL), span(n, cfg.value_len, CALL));
        let (Ok(kb), Ok(vb)) = spans else {
            return spans.0.and(spans.1).unwrap_err();
        };
        let ib = n * std::mem::size_of::<c_int>();
        // SAFETY: sized as the contract says.
        let bufs = unsafe {
            (
                bytes(keys, kb, "fabkit_dht_read_many: keys"),
                bytes_mut(values, vb, "fabkit_dht_read_many: values"),
                bytes_mut(results.cast(), ib, "fabkit_dht_read_many: results"),
            )
        };
        let (k, v) = match bufs {
            (Ok(k), Ok(v), Ok(_)) => (k, v),
            (Err(c), ..) | (_, Err(c), _) | (.., Err(c)) => return c,
        };
        let ks: Vec<&[u8]> = k.chunks_exact(cfg.key_len).collect();
        let mut found = vec![Found::Miss; n];
        match each!(&t.tab, d => d.read_into(&ks, v, &mut found)) {
            Ok(()) => {
                for (i, f) in found.iter().enumerate() {
                    let code = match f {
                        Found::Hit => DHT_SUCCESS,
                        Found::Miss => DHT_READ_MISS,
                        Found::Corrupt => DHT_READ_CORRUPT,
                    };
                    // SAFETY: `results` holds `n` ints (the contract).
                    unsafe { results.add(i).write(code) };
                }
                DHT_SUCCESS
            }
            Err(e) => fail(DHT_UCX_ERROR, format!("{CALL}: {e}")),
        }
    })
}

/// Writes `n` keys and values (back to back) with their operations
/// overlapped; each key's `DHT_SUCCESS` or
/// `DHT_WRITE_SUCCESS_WITH_EVICTION` lands in `results` (may be null).
/// Returns `DHT_SUCCESS` when the batch ran.
///
/// # Safety
///
/// `table` is from `DHT_create`; `keys` and `values` hold `n` keys and
/// values; `results` is null or holds `n` ints.
#[no_mangle]
pub unsafe extern "C" fn fabkit_dht_write_many(
    table: *mut DHT,
    n: usize,
    keys: *const c_void,
    values: *const c_void,
    results: *mut c_int,
) -> c_int {
    const CALL: &str = "fabkit_dht_write_many";
    on_table(table, CALL, |t| {
        let cfg = t.config();
        let spans = (span(n, cfg.key_len, CALL), span(n, cfg.value_len, CALL));
        let (Ok(kb), Ok(vb)) = spans else {
            return spans.0.and(spans.1).unwrap_err();
        };
        // SAFETY: sized as the contract says.
        let bufs = unsafe {
            (
                bytes(keys, kb, "fabkit_dht_write_many: keys"),
                bytes(values, vb, "fabkit_dht_write_many: values"),
            )
        };
        let (k, v) = match bufs {
            (Ok(k), Ok(v)) => (k, v),
            (Err(c), _) | (_, Err(c)) => return c,
        };
        let ks: Vec<&[u8]> = k.chunks_exact(cfg.key_len).collect();
        let vs: Vec<&[u8]> = v.chunks_exact(cfg.value_len).collect();
        let mut out = vec![Write::Inserted; n];
        match each!(&t.tab, d => d.write_into(&ks, &vs, &mut out)) {
            Ok(()) => {
                if !results.is_null() {
                    for (i, w) in out.iter().enumerate() {
                        // SAFETY: `results` holds `n` ints (the contract).
                        unsafe { results.add(i).write(write_code(*w)) };
                    }
                }
                DHT_SUCCESS
            }
            Err(e) => fail(DHT_UCX_ERROR, format!("{CALL}: {e}")),
        }
    })
}

/// The table's counters into `out`: this rank's, or with `all_ranks`
/// nonzero the sum over every rank (then collective).
///
/// # Safety
///
/// `table` is from `DHT_create`; `out` is null or writable.
#[no_mangle]
pub unsafe extern "C" fn fabkit_dht_stats(
    table: *mut DHT,
    out: *mut fabkit_dht_stats_t,
    all_ranks: c_int,
) -> c_int {
    on_table(table, "fabkit_dht_stats", |t| {
        if out.is_null() {
            return fail(DHT_UCX_ERROR, "fabkit_dht_stats: out is null");
        }
        let s = if all_ranks != 0 {
            match each!(&t.tab, d => d.stats_all(&*t.boot)) {
                Ok(s) => s,
                Err(e) => return fail(DHT_UCX_ERROR, format!("fabkit_dht_stats: {e}")),
            }
        } else {
            each!(&t.tab, d => d.stats())
        };
        // SAFETY: writable (the contract).
        unsafe { out.write(s.into()) };
        DHT_SUCCESS
    })
}

/// What the table is: its variant and transport, in one line (valid until
/// `DHT_free`); "" for a null table.
///
/// # Safety
///
/// `table` is null or from `DHT_create` and not yet freed.
#[no_mangle]
pub unsafe extern "C" fn fabkit_dht_describe(table: *mut DHT) -> *const c_char {
    // SAFETY: null or live (the contract).
    match unsafe { table.as_ref() } {
        Some(t) => t.described.as_ptr(),
        None => c"".as_ptr(),
    }
}

/// The message of this thread's last failure, or notice ("" if none);
/// valid until the next fabkit call on this thread.
#[no_mangle]
pub extern "C" fn fabkit_dht_last_error() -> *const c_char {
    last_error()
}
