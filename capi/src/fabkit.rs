//! What fabkit adds in C: the variant and transport chosen by a call, batch
//! calls, the counters as a struct, what a table is, and the last error.
#![allow(unsafe_code)]

use std::ffi::{c_char, c_int, c_void};

use fabkit_dht::{Found, Write};

use crate::boundary::{bytes, bytes_mut, fail, last_error};
use crate::codes::{
    fabkit_dht_options_t, fabkit_dht_stats_t, write_code, DHT_init_t, DHT_SUCCESS, DHT_UCX_ERROR,
};
use crate::mpidht::read_code;
use crate::table::{create, each, on_table, Call, DHT};

/// Keys a batch call hands the table at a time: what one run of a
/// variant's machine takes, so the caller's buffers are walked in place
/// and nothing is allocated per key, however large `n` is.
const CHUNK: usize = 1024;

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

/// Bytes of `n` items of `size` bytes, checked.
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

/// A batch call's buffers: its keys, its values, its results (if given).
type Buffers<'a> = (&'a [u8], &'a mut [u8], Option<&'a mut [c_int]>);

/// The caller's `n` keys and `n` values of a batch call, and its `n`
/// results, checked.
///
/// # Safety
///
/// As the batch calls' contracts say.
unsafe fn buffers<'a>(
    t: &DHT,
    call: &str,
    n: usize,
    keys: *const c_void,
    values: *mut c_void,
    results: *mut c_int,
) -> Result<Buffers<'a>, c_int> {
    let cfg = t.config();
    let kb = span(n, cfg.key_len, call)?;
    let vb = span(n, cfg.value_len, call)?;
    span(n, std::mem::size_of::<c_int>(), call)?;
    // SAFETY: sized as the contract says.
    let k = unsafe { bytes(keys, kb, &format!("{call}: keys")) }?;
    // SAFETY: as above.
    let v = unsafe { bytes_mut(values, vb, &format!("{call}: values")) }?;
    // SAFETY: null or `n` ints (the contract).
    let r = (!results.is_null()).then(|| unsafe { std::slice::from_raw_parts_mut(results, n) });
    Ok((k, v, r))
}

/// Reads `n` keys (`keys`: `n` keys back to back) with their operations
/// overlapped; each hit's value lands in `values` (`n` values back to
/// back, a miss's left as it was) and each key's `DHT_SUCCESS`,
/// `DHT_READ_MISS` or `DHT_READ_CORRUPT` in `results`. Returns
/// `DHT_SUCCESS` when the batch ran; nothing happens for `n` 0.
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
    on_table(table, CALL, Call::Local, |t| {
        if n == 0 {
            return DHT_SUCCESS;
        }
        // SAFETY: the contract, passed on.
        let (k, v, r) = match unsafe { buffers(t, CALL, n, keys, values, results) } {
            Ok((k, v, Some(r))) => (k, v, r),
            Ok((_, _, None)) => return fail(DHT_UCX_ERROR, format!("{CALL}: results is null")),
            Err(c) => return c,
        };
        let cfg = t.config();
        let (kl, vl) = (cfg.key_len, cfg.value_len);
        let mut ks: [&[u8]; CHUNK] = [&[]; CHUNK];
        let mut found = [Found::Miss; CHUNK];
        for ((kc, vc), rc) in k
            .chunks(CHUNK * kl)
            .zip(v.chunks_mut(CHUNK * vl))
            .zip(r.chunks_mut(CHUNK))
        {
            let m = rc.len();
            for (slot, key) in ks.iter_mut().zip(kc.chunks_exact(kl)) {
                *slot = key;
            }
            if let Err(e) = each!(&t.over, d => d.read_into(&ks[..m], vc, &mut found[..m])) {
                return fail(DHT_UCX_ERROR, format!("{CALL}: {e}"));
            }
            for (out, f) in rc.iter_mut().zip(&found[..m]) {
                *out = read_code(*f);
            }
        }
        DHT_SUCCESS
    })
}

/// Writes `n` keys and values (back to back) with their operations
/// overlapped; each key's `DHT_SUCCESS` or
/// `DHT_WRITE_SUCCESS_WITH_EVICTION` lands in `results` (may be null).
/// Returns `DHT_SUCCESS` when the batch ran; nothing happens for `n` 0.
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
    on_table(table, CALL, Call::Local, |t| {
        if n == 0 {
            return DHT_SUCCESS;
        }
        // SAFETY: the contract, passed on; the values are only read.
        let (k, v, mut r) = match unsafe { buffers(t, CALL, n, keys, values.cast_mut(), results) } {
            Ok(b) => b,
            Err(c) => return c,
        };
        let cfg = t.config();
        let (kl, vl) = (cfg.key_len, cfg.value_len);
        let mut ks: [&[u8]; CHUNK] = [&[]; CHUNK];
        let mut vs: [&[u8]; CHUNK] = [&[]; CHUNK];
        let mut out = [Write::Inserted; CHUNK];
        for (c, (kc, vc)) in k.chunks(CHUNK * kl).zip(v.chunks(CHUNK * vl)).enumerate() {
            let m = kc.len() / kl;
            for (slot, key) in ks.iter_mut().zip(kc.chunks_exact(kl)) {
                *slot = key;
            }
            for (slot, value) in vs.iter_mut().zip(vc.chunks_exact(vl)) {
                *slot = value;
            }
            if let Err(e) = each!(&t.over, d => d.write_into(&ks[..m], &vs[..m], &mut out[..m])) {
                return fail(DHT_UCX_ERROR, format!("{CALL}: {e}"));
            }
            if let Some(r) = r.as_deref_mut() {
                for (dst, w) in r[c * CHUNK..c * CHUNK + m].iter_mut().zip(&out[..m]) {
                    *dst = write_code(*w);
                }
            }
        }
        DHT_SUCCESS
    })
}

/// The table's counters into `out`: this rank's, or with `all_ranks`
/// nonzero the sum over every rank (then collective, and every rank
/// passes nonzero).
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
    const CALL: &str = "fabkit_dht_stats";
    let call = if all_ranks != 0 {
        Call::Collective
    } else {
        Call::Local
    };
    on_table(table, CALL, call, |t| {
        let given = if out.is_null() {
            Err(fail(DHT_UCX_ERROR, format!("{CALL}: out is null")))
        } else {
            Ok(())
        };
        let s = if all_ranks != 0 {
            if let Err(c) = t.agree(CALL, DHT_UCX_ERROR, given) {
                return c;
            }
            match each!(&t.over, d => d.stats_all(&*t.boot)) {
                Ok(s) => s,
                Err(e) => return fail(DHT_UCX_ERROR, format!("{CALL}: {e}")),
            }
        } else if let Err(c) = given {
            return c;
        } else {
            each!(&t.over, d => d.stats())
        };
        // SAFETY: writable (the contract; checked not null).
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
