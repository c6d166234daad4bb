//! POSIX shared-memory segments, for ranks on one node that access each
//! other's regions directly (seed 002's "hybrid PGAS"; what Open MPI's
//! `osc sm` does). A rank creates its segment, registers it with the fabric
//! as its exposed region (so remote nodes reach the same bytes), and
//! same-node peers map it by name.
//!
//! # Names, and what a killed rank leaves behind
//!
//! A segment's name lives in `/dev/shm` until it is unlinked, and a rank
//! killed before unlinking cannot do it. So every segment fabkit makes is
//! named after its creator ([`segment_name`]):
//! `/fabkit.<job>.<pid namespace>.<pid>.<start>.<what>-<n>`, where `start` is
//! the creating process's start time (so a recycled pid is not mistaken for
//! it). [`reap_stale`] removes the segments whose creator no longer exists;
//! the same-node DHT transport calls it at every start and `fabkit clean`
//! calls it on demand. A pid only means something in its own PID namespace,
//! so segments made in another one are never reaped here.
//!
//! # Memory model
//!
//! Memory other processes change under us is only ever accessed as
//! [`AtomicU64`] words ([`SharedSegment::words`], [`read_words`],
//! [`write_words`] of [`fabkit_core::words`]): never also as bytes, as
//! mixed-size atomic accesses to the same bytes are not defined by the Rust
//! memory model.
//!
//! The module by job: here the segment itself ([`SharedSegment`]); `name`,
//! how a name records its creator and whether that creator still lives;
//! `reap`, what is in `/dev/shm` and what may be removed.
//!
//! ```no_run
//! use fabkit_fabric::shm::{segment_name, SharedSegment};
//!
//! let name = segment_name("example").unwrap();
//! let seg = SharedSegment::create(&name, 4096).unwrap();
//! let peer = SharedSegment::open(&name, 4096).unwrap(); // another process, usually
//! seg.unlink(); // once every peer has it mapped
//! fabkit_core::words::write_words(seg.words(), 3, b"hello");
//! let mut out = [0u8; 5];
//! fabkit_core::words::read_words(peer.words(), 3, &mut out);
//! assert_eq!(&out, b"hello");
//! ```

use std::ffi::CString;
use std::ptr::NonNull;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use crate::error::{Error, Result};

mod name;
mod reap;

#[cfg(doc)]
use fabkit_core::words::{read_words, write_words};
use fabkit_core::Error as CoreError;
pub use name::{
    job_id, parse_name, parse_provider_name, pid_namespace, process_start, segment_name, Creator,
    Liveness,
};
pub use reap::{reap_stale, remove, survey, Maker, Reaped, Removal, Segment, Verdict};

/// Where `shm_open` names live on Linux.
pub const SHM_DIR: &str = "/dev/shm";

/// How many segments in [`SHM_DIR`] this process made: fabkit's (by the
/// creator in their names) and the libfabric shm provider's (by the pid in
/// theirs). Flat over a long run, or something leaks.
pub fn own_segments() -> usize {
    let Ok(entries) = std::fs::read_dir(SHM_DIR) else {
        return 0;
    };
    let me = Creator::current();
    entries
        .flatten()
        .filter(|e| {
            let name = e.file_name();
            let name = name.to_string_lossy();
            parse_name(&name).is_some_and(|(c, _)| c == me)
                || parse_provider_name(&name).is_some_and(|(pid, _, _)| pid == me.pid)
        })
        .count()
}

/// The start of every segment name fabkit makes (without the leading `/`
/// that `shm_open` wants).
pub const PREFIX: &str = "fabkit.";

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
    Error::from(CoreError::Io {
        what,
        cause: std::io::Error::last_os_error(),
    })
}

/// Closes an fd on every path out of [`SharedSegment::map`].
struct Fd(libc::c_int);

impl Drop for Fd {
    fn drop(&mut self) {
        // SAFETY: we opened this fd and close it once; a mapping made from it
        // keeps the segment without it.
        unsafe { libc::close(self.0) };
    }
}

impl SharedSegment {
    fn map(name: &str, len: usize, create: bool) -> Result<SharedSegment> {
        if len == 0 {
            return Err(Error::from(CoreError::InvalidArgument(
                "a shared segment needs at least 1 byte".into(),
            )));
        }
        let cname = CString::new(name).map_err(|_| {
            Error::from(CoreError::InvalidArgument(format!(
                "segment name `{name}` has a NUL"
            )))
        })?;
        let len = len.checked_next_multiple_of(8).ok_or_else(|| {
            Error::from(CoreError::InvalidArgument(format!(
                "a shared segment of {len} B is too large"
            )))
        })?;
        let size = libc::off_t::try_from(len).map_err(|_| {
            Error::from(CoreError::InvalidArgument(format!(
                "a shared segment of {len} B is too large"
            )))
        })?;
        let flags = if create {
            libc::O_CREAT | libc::O_EXCL | libc::O_RDWR
        } else {
            libc::O_RDWR
        };
        // SAFETY: cname is a valid C string; the fd is closed by `Fd`.
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
        let fd = Fd(fd);
        if create {
            // SAFETY: fd is open; a new segment is sized before mapping (and
            // reads as zeros).
            if unsafe { libc::ftruncate(fd.0, size) } != 0 {
                let e = os_err(format!(
                    "sizing shared segment {name} to {len} B (is /dev/shm full?)"
                ));
                // SAFETY: the name is a valid C string and the segment ours.
                unsafe { libc::shm_unlink(cname.as_ptr()) };
                return Err(e);
            }
            // Its pages are taken now, not at a first touch in the middle of
            // a timed run (or with SIGBUS there, when /dev/shm has filled
            // up since): a full /dev/shm is this error instead.
            // The whole region is reserved, so /dev/shm must hold it (a
            // container's default 64 MiB may not). A signal (mpirun's
            // SIGCHLD) interrupts a large reservation: it is retried.
            let err = loop {
                // SAFETY: fd is open and sized to `size`.
                let err = unsafe { libc::posix_fallocate(fd.0, 0, size) };
                if err != libc::EINTR {
                    break err;
                }
            };
            if err != 0 {
                let e = Error::from(CoreError::Io {
                    what: format!(
                        "reserving {len} B of /dev/shm for shared segment {name} (is /dev/shm \
                         full? `df /dev/shm`)"
                    ),
                    cause: std::io::Error::from_raw_os_error(err),
                });
                // SAFETY: the name is a valid C string and the segment ours.
                unsafe { libc::shm_unlink(cname.as_ptr()) };
                return Err(e);
            }
        } else {
            // Pages of a mapping beyond the end of the file raise SIGBUS when
            // touched: refuse a segment shorter than the mapping up front.
            // (One truncated later by someone else still can; nothing in
            // fabkit truncates a segment.)
            // SAFETY: an all-zero stat is a valid out-buffer for fstat.
            let mut st: libc::stat = unsafe { std::mem::zeroed() };
            // SAFETY: fd is open and st writable.
            if unsafe { libc::fstat(fd.0, &mut st) } != 0 {
                return Err(os_err(format!("fstat of shared segment {name}")));
            }
            if st.st_size < size {
                return Err(Error::SegmentTooShort {
                    name: name.to_string(),
                    size: u64::try_from(st.st_size).unwrap_or(0),
                    wanted: len as u64,
                });
            }
        }
        // SAFETY: mapping len bytes of the open segment, shared; a created
        // segment has just been sized to len, an opened one checked to hold
        // at least len.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                // Page tables filled now, so no copy in a timed phase
                // takes a page fault.
                libc::MAP_SHARED | libc::MAP_POPULATE,
                fd.0,
                0,
            )
        };
        if p == libc::MAP_FAILED {
            let e = os_err(format!("mapping shared segment {name} ({len} B)"));
            if create {
                // SAFETY: the name is a valid C string and the segment ours.
                unsafe { libc::shm_unlink(cname.as_ptr()) };
            }
            return Err(e);
        }
        let Some(ptr) = NonNull::new(p.cast()) else {
            // mmap never maps page 0 without MAP_FIXED; refuse rather than trust.
            return Err(Error::from(CoreError::InvalidArgument(format!(
                "mapping shared segment {name} returned a null address"
            ))));
        };
        Ok(SharedSegment {
            ptr,
            len,
            name: cname,
            linked: AtomicBool::new(create),
        })
    }

    /// Creates and maps a zeroed segment called `name` (a name from
    /// [`segment_name`], so that a killed creator's segment can be reaped).
    pub fn create(name: &str, len: usize) -> Result<SharedSegment> {
        Self::map(name, len, true)
    }

    /// Maps the existing segment `name` of `len` bytes (rounded up to a
    /// multiple of 8). A segment shorter than that is refused with
    /// [`Error::SegmentTooShort`] before anything is mapped.
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

    /// The name it was created or opened with.
    pub fn name(&self) -> &str {
        // Built from a &str in `map`.
        self.name.to_str().unwrap_or_default()
    }

    /// Length in bytes (a multiple of 8).
    pub fn len(&self) -> usize {
        self.len
    }

    /// Never empty.
    pub fn is_empty(&self) -> bool {
        false
    }

    /// The segment as u64 words that other processes change under us: the
    /// only way Rust code touches it ([`read_words`] and [`write_words`]
    /// copy bytes through them).
    pub fn words(&self) -> &[AtomicU64] {
        // SAFETY: the mapping is page-aligned, len is a multiple of 8, it
        // lives as long as self, and is only accessed atomically from Rust,
        // always as AtomicU64.
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
    use fabkit_core::words::read_words;
    use std::path::Path;

    /// Unlinks a name made by hand, also when the test fails.
    pub(super) struct Unlink(pub(super) String);
    impl Drop for Unlink {
        fn drop(&mut self) {
            let _ = std::fs::remove_file(Path::new(SHM_DIR).join(self.0.trim_start_matches('/')));
        }
    }

    #[test]
    fn two_mappings_see_the_same_words() {
        let name = segment_name("test-two").unwrap();
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

    #[test]
    fn a_short_segment_is_refused_before_mapping_naming_its_size() {
        let name = segment_name("test-short").unwrap();
        let _guard = Unlink(name.clone());
        // Made by hand, as another job or a damaged run would leave it.
        let path = Path::new(SHM_DIR).join(&name[1..]);
        std::fs::write(&path, [7u8; 100]).unwrap();
        let err = SharedSegment::open(&name, 8192).unwrap_err();
        match &err {
            Error::SegmentTooShort {
                name: n,
                size,
                wanted,
            } => {
                assert_eq!((n.as_str(), *size, *wanted), (name.as_str(), 100, 8192));
            }
            e => panic!("{e:?}"),
        }
        let text = err.to_string();
        assert!(text.contains(&name) && text.contains("100 B"), "{text}");
        // The length asked for is rounded up to whole words, and those must
        // all be there: 97 B wants 104.
        assert!(matches!(
            SharedSegment::open(&name, 97),
            Err(Error::SegmentTooShort { wanted: 104, .. })
        ));
        // Long enough maps, and reads what was written.
        let seg = SharedSegment::open(&name, 96).unwrap();
        let mut out = [0u8; 96];
        read_words(seg.words(), 0, &mut out);
        assert_eq!(out, [7u8; 96]);
    }
}
