//! The boundary with C: failures become a code and a message the caller
//! fetches (`fabkit_dht_last_error`), panics stop here without a word on
//! standard error, and pointers are checked before they are read.
#![allow(unsafe_code)]

use std::cell::{Cell, RefCell};
use std::ffi::{c_char, c_int, c_void, CStr, CString};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::Path;
use std::sync::Once;

use crate::codes::{DHT_FILE_IO_ERROR, DHT_UCX_ERROR};

thread_local! {
    static LAST_ERROR: RefCell<CString> = RefCell::new(CString::default());
    /// Whether this thread is inside a fabkit call (a panic then stays
    /// quiet: it becomes the call's error).
    static IN_CALL: Cell<bool> = const { Cell::new(false) };
    /// What the last quiet panic said, and where.
    static PANIC: RefCell<String> = const { RefCell::new(String::new()) };
}

/// Keeps `msg` for `fabkit_dht_last_error`.
fn keep(msg: impl std::fmt::Display) {
    let text = CString::new(msg.to_string().replace('\0', " ")).unwrap_or_default();
    let _ = LAST_ERROR.try_with(|e| *e.borrow_mut() = text);
}

/// Keeps `msg` for `fabkit_dht_last_error` and gives `code` back.
pub(crate) fn fail(code: c_int, msg: impl std::fmt::Display) -> c_int {
    keep(msg);
    code
}

/// The message kept last on this thread, as C reads it.
pub(crate) fn last_error() -> *const c_char {
    LAST_ERROR
        .try_with(|e| e.borrow().as_ptr())
        .unwrap_or(c"".as_ptr())
}

/// Once per process, before the first table: fabkit's notices (a stale
/// segment removed, a resource that could not be closed) go to the
/// last-error message instead of standard error, and a panic inside a
/// fabkit call prints nothing (the call returns it as its error); panics
/// elsewhere in the program reach the hook that was there before.
pub(crate) fn quiet() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        fabkit_core::notice::set_sink(|t| keep(format_args!("notice: {t}")));
        let before = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            if IN_CALL.try_with(Cell::get).unwrap_or(false) {
                let at = info
                    .location()
                    .map_or(String::new(), |l| format!(" at {}:{}", l.file(), l.line()));
                let what = panic_text(info.payload());
                let _ = PANIC.try_with(|p| *p.borrow_mut() = format!("{what}{at}"));
            } else {
                before(info);
            }
        }));
    });
}

/// What a panic said.
fn panic_text(p: &(dyn std::any::Any + Send)) -> String {
    p.downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| p.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "a panic".into())
}

/// Runs `f` as a fabkit call: a panic in it is quiet and comes back as
/// `Err` with what it said and where.
pub(crate) fn caught<R>(f: impl FnOnce() -> R) -> Result<R, String> {
    let was = IN_CALL.with(|c| c.replace(true));
    let r = catch_unwind(AssertUnwindSafe(f));
    IN_CALL.with(|c| c.set(was));
    r.map_err(|p| {
        let said = PANIC.with(|s| std::mem::take(&mut *s.borrow_mut()));
        if said.is_empty() {
            panic_text(&*p)
        } else {
            said
        }
    })
}

/// Runs `f`, turning a panic into `DHT_UCX_ERROR` with its message.
pub(crate) fn guarded(f: impl FnOnce() -> c_int) -> c_int {
    caught(f).unwrap_or_else(|why| fail(DHT_UCX_ERROR, format!("internal error: {why}")))
}

/// Whether the caller has finalised MPI: no MPI call may follow.
pub(crate) fn mpi_finalized() -> bool {
    let mut fin = 0;
    // SAFETY: may be called at any time, after MPI_Finalize too.
    unsafe { mpi::ffi::MPI_Finalized(&mut fin) };
    fin != 0
}

/// `len` bytes at `p`, or an error naming `what` for a null pointer.
///
/// # Safety
///
/// `p` is null or valid for `len` bytes.
pub(crate) unsafe fn bytes<'a>(
    p: *const c_void,
    len: usize,
    what: &str,
) -> Result<&'a [u8], c_int> {
    if p.is_null() {
        return Err(fail(DHT_UCX_ERROR, format!("{what} is null")));
    }
    // SAFETY: valid for `len` bytes (the caller's contract).
    Ok(unsafe { std::slice::from_raw_parts(p.cast(), len) })
}

/// `len` writable bytes at `p`, or an error naming `what` for a null
/// pointer.
///
/// # Safety
///
/// `p` is null or valid for writes of `len` bytes, and nothing else
/// refers to them during the borrow.
pub(crate) unsafe fn bytes_mut<'a>(
    p: *mut c_void,
    len: usize,
    what: &str,
) -> Result<&'a mut [u8], c_int> {
    if p.is_null() {
        return Err(fail(DHT_UCX_ERROR, format!("{what} is null")));
    }
    // SAFETY: valid and not aliased for `len` bytes (the caller's contract).
    Ok(unsafe { std::slice::from_raw_parts_mut(p.cast(), len) })
}

/// A C string as UTF-8: `None` for null.
///
/// # Safety
///
/// `s` is null or a NUL-terminated string.
pub(crate) unsafe fn text<'a>(s: *const c_char, what: &str) -> Result<Option<&'a str>, String> {
    if s.is_null() {
        return Ok(None);
    }
    // SAFETY: NUL-terminated (the contract).
    let c = unsafe { CStr::from_ptr(s) };
    c.to_str()
        .map(Some)
        .map_err(|_| format!("{what} is not UTF-8"))
}

/// The path a C string names, or the error code.
///
/// # Safety
///
/// `s` is null or a NUL-terminated string.
pub(crate) unsafe fn path_of<'a>(s: *const c_char, call: &str) -> Result<&'a Path, c_int> {
    // SAFETY: null or NUL-terminated (the contract).
    match unsafe { text(s, "filename") } {
        Ok(Some(t)) if !t.is_empty() => Ok(Path::new(t)),
        Ok(_) => Err(fail(
            DHT_FILE_IO_ERROR,
            format!("{call}: filename is null or empty: give the path the shards go under"),
        )),
        Err(e) => Err(fail(DHT_FILE_IO_ERROR, format!("{call}: {e}"))),
    }
}
