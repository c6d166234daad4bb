//! POSIX shared-memory segments, for ranks on one node that access each
//! other's regions directly (seed 002's "hybrid PGAS"; what Open MPI's
//! `osc sm` does). A rank creates its segment, registers it with the fabric
//! as its exposed region (so remote nodes reach the same bytes), and
//! same-node peers map it by name.

use std::ffi::CString;
use std::ptr::NonNull;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use crate::error::{Error, Result};

/// A mapped shared-memory segment.
pub struct SharedSegment {
    ptr: NonNull<u8>,
    len: usize,
    name: CString,
    /// Whether this mapping's creator still has to unlink the name.
    linked: AtomicBool,
}

impl std::fmt::Debug for SharedSegment {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SharedSegment")
            .field("name", &self.name)
            .field("len", &self.len)
            .finish()
    }
}

// SAFETY: the mapping is plain shared memory, accessed only through atomics
// (`words`) or by the provider.
unsafe impl Send for SharedSegment {}
// SAFETY: as above.
unsafe impl Sync for SharedSegment {}

fn os_err(what: String) -> Error {
    Error::Io {
        what,
        source: std::io::Error::last_os_error(),
    }
}

impl SharedSegment {
    fn map(name: &str, len: usize, create: bool) -> Result<SharedSegment> {
        if len == 0 {
            return Err(Error::InvalidArgument(
                "a shared segment needs at least 1 byte".into(),
            ));
        }
        let cname = CString::new(name)
            .map_err(|_| Error::InvalidArgument(format!("segment name `{name}` has a NUL")))?;
        let len = len.next_multiple_of(8);
        let flags = if create {
            libc::O_CREAT | libc::O_EXCL | libc::O_RDWR
        } else {
            libc::O_RDWR
        };
        // SAFETY: cname is a valid C string; the fd is closed below.
        let fd = unsafe { libc::shm_open(cname.as_ptr(), flags, 0o600) };
        if fd < 0 {
            return Err(os_err(format!(
                "shm_open({name}){}",
                if create {
                    ""
                } else {
                    ": is the peer on this node and alive?"
                }
            )));
        }
        // SAFETY: fd is open; a new segment is sized before mapping (and
        // reads as zeros).
        if create && unsafe { libc::ftruncate(fd, len as libc::off_t) } != 0 {
            let e = os_err(format!(
                "sizing shared segment {name} to {len} B (is /dev/shm full?)"
            ));
            // SAFETY: fd is open and the name ours.
            unsafe {
                libc::close(fd);
                libc::shm_unlink(cname.as_ptr());
            }
            return Err(e);
        }
        // SAFETY: mapping len bytes of the open segment, shared.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                fd,
                0,
            )
        };
        // SAFETY: the mapping keeps the segment; the fd is no longer needed.
        unsafe { libc::close(fd) };
        if p == libc::MAP_FAILED {
            return Err(os_err(format!("mapping shared segment {name} ({len} B)")));
        }
        Ok(SharedSegment {
            ptr: NonNull::new(p.cast()).expect("mmap returned null without failing"),
            len,
            name: cname,
            linked: AtomicBool::new(create),
        })
    }

    /// Creates and maps a zeroed segment called `name` (e.g. `/fabkit-...`).
    pub fn create(name: &str, len: usize) -> Result<SharedSegment> {
        Self::map(name, len, true)
    }

    /// Maps the existing segment `name` of `len` bytes.
    pub fn open(name: &str, len: usize) -> Result<SharedSegment> {
        Self::map(name, len, false)
    }

    /// Removes the name once every peer has mapped the segment; the
    /// mappings stay valid. Also done on drop.
    pub fn unlink(&self) {
        if self.linked.swap(false, Ordering::AcqRel) {
            // SAFETY: the name is a valid C string we created.
            unsafe { libc::shm_unlink(self.name.as_ptr()) };
        }
    }

    /// Length in bytes (a multiple of 8).
    pub fn len(&self) -> usize {
        self.len
    }

    /// Never empty.
    pub fn is_empty(&self) -> bool {
        false
    }

    /// The segment as u64 words that other processes change under us.
    pub fn words(&self) -> &[AtomicU64] {
        // SAFETY: the mapping is page-aligned, len is a multiple of 8, it
        // lives as long as self, and is only accessed atomically from Rust.
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr().cast(), self.len / 8) }
    }

    pub(crate) fn as_ptr(&self) -> *mut u8 {
        self.ptr.as_ptr()
    }
}

impl Drop for SharedSegment {
    fn drop(&mut self) {
        self.unlink();
        // SAFETY: we mapped exactly this range.
        unsafe { libc::munmap(self.ptr.as_ptr().cast(), self.len) };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn two_mappings_see_the_same_words() {
        let name = format!("/fabkit-test-{}", std::process::id());
        let a = SharedSegment::create(&name, 100).unwrap();
        let b = SharedSegment::open(&name, 100).unwrap();
        a.unlink();
        assert_eq!(a.len(), 104);
        a.words()[3].store(0xfeed, Ordering::Release);
        assert_eq!(b.words()[3].load(Ordering::Acquire), 0xfeed);
        assert!(b
            .words()
            .iter()
            .enumerate()
            .all(|(i, w)| i == 3 || w.load(Ordering::Relaxed) == 0));
        let err = SharedSegment::open(&name, 100).unwrap_err();
        assert!(
            err.to_string().contains("is the peer on this node"),
            "{err}"
        );
    }
}
