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
//! `/fabkit.<job>.<pid namespace>.<pid>.<start>.<what>`, where `start` is
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
//! [`write_words`]): never also as bytes, as mixed-size atomic accesses to
//! the same bytes are not defined by the Rust memory model.
//!
//! ```no_run
//! use fabkit_fabric::shm::{segment_name, SharedSegment};
//!
//! let name = segment_name("example").unwrap();
//! let seg = SharedSegment::create(&name, 4096).unwrap();
//! let peer = SharedSegment::open(&name, 4096).unwrap(); // another process, usually
//! seg.unlink(); // once every peer has it mapped
//! fabkit_fabric::shm::write_words(seg.words(), 3, b"hello");
//! let mut out = [0u8; 5];
//! fabkit_fabric::shm::read_words(peer.words(), 3, &mut out);
//! assert_eq!(&out, b"hello");
//! ```

use std::ffi::CString;
use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::ptr::NonNull;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};

use crate::error::{Error, Result};

/// Where `shm_open` names live on Linux.
pub const SHM_DIR: &str = "/dev/shm";

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
    Error::Io {
        what,
        source: std::io::Error::last_os_error(),
    }
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
            return Err(Error::InvalidArgument(
                "a shared segment needs at least 1 byte".into(),
            ));
        }
        let cname = CString::new(name)
            .map_err(|_| Error::InvalidArgument(format!("segment name `{name}` has a NUL")))?;
        let len = len.checked_next_multiple_of(8).ok_or_else(|| {
            Error::InvalidArgument(format!("a shared segment of {len} B is too large"))
        })?;
        let size = libc::off_t::try_from(len).map_err(|_| {
            Error::InvalidArgument(format!("a shared segment of {len} B is too large"))
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
                libc::MAP_SHARED,
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
            return Err(Error::InvalidArgument(format!(
                "mapping shared segment {name} returned a null address"
            )));
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

/// Copies `out.len()` bytes at byte `offset` out of `words`, a word at a
/// time: a concurrent writer may be seen half done (a torn read, as over
/// RDMA), which callers detect with checksums. Panics if the range is
/// outside `words` (callers check bounds first).
pub fn read_words(words: &[AtomicU64], offset: usize, out: &mut [u8]) {
    let mut done = 0;
    while done < out.len() {
        let pos = offset + done;
        let (w, b) = (pos / 8, pos % 8);
        let n = (8 - b).min(out.len() - done);
        let bytes = words[w].load(Ordering::Acquire).to_le_bytes();
        out[done..done + n].copy_from_slice(&bytes[b..b + n]);
        done += n;
    }
}

/// Copies `data` into `words` at byte `offset`: whole words are stored,
/// partial words at the edges merged atomically (compare-and-swap), so the
/// bytes beside the range are never clobbered. Panics if the range is
/// outside `words` (callers check bounds first).
pub fn write_words(words: &[AtomicU64], offset: usize, data: &[u8]) {
    let mut done = 0;
    while done < data.len() {
        let pos = offset + done;
        let (w, b) = (pos / 8, pos % 8);
        let n = (8 - b).min(data.len() - done);
        if n == 8 {
            let mut v = [0u8; 8];
            v.copy_from_slice(&data[done..done + 8]);
            words[w].store(u64::from_le_bytes(v), Ordering::Release);
        } else {
            let part = &data[done..done + n];
            let _ = words[w].fetch_update(Ordering::AcqRel, Ordering::Acquire, |old| {
                let mut bytes = old.to_le_bytes();
                bytes[b..b + n].copy_from_slice(part);
                Some(u64::from_le_bytes(bytes))
            });
        }
        done += n;
    }
}

/// The process that created a fabkit segment, as the segment's name
/// records it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Creator {
    /// The launcher's job id (`ompi<id>`, `slurm<id>`) or `p<pid>`.
    pub job: String,
    /// Inode of the creator's PID namespace (`/proc/self/ns/pid`).
    pub pid_ns: u64,
    /// The creator's pid, in that namespace.
    pub pid: u32,
    /// The creator's start time (clock ticks after boot, `/proc/<pid>/stat`
    /// field 22): tells the creator from a later process given its pid.
    pub start: u64,
}

/// Whether a segment's creator still runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Liveness {
    /// It runs (or could not be ruled out: then it is kept).
    Alive,
    /// It no longer exists in this PID namespace (its pid is free or names
    /// a process started at another time).
    Dead,
    /// It was made in another PID namespace, where its pid means nothing
    /// here: it is never reaped from here.
    Foreign,
}

impl Creator {
    /// This process.
    pub fn current() -> Creator {
        let pid = std::process::id();
        Creator {
            job: job_id(),
            pid_ns: pid_namespace().unwrap_or(0),
            pid,
            start: process_start(pid).unwrap_or(0),
        }
    }

    /// Whether the creator still runs, judged in this PID namespace.
    pub fn liveness(&self) -> Liveness {
        match pid_namespace() {
            Some(ns) if ns == self.pid_ns => {}
            // Unknown namespace (no /proc): nothing can be judged.
            _ => return Liveness::Foreign,
        }
        let Ok(pid) = libc::pid_t::try_from(self.pid) else {
            return Liveness::Dead;
        };
        if pid <= 0 {
            // kill(0) and kill(-1) address groups; no process has such a pid.
            return Liveness::Dead;
        }
        // SAFETY: signal 0 only checks that the pid exists; nothing is sent.
        if unsafe { libc::kill(pid, 0) } != 0
            && std::io::Error::last_os_error().raw_os_error() == Some(libc::ESRCH)
        {
            return Liveness::Dead;
        }
        // The pid is taken (EPERM: by another user's process); by the
        // creator only if it started at the recorded time.
        match process_start(self.pid) {
            Some(s) if s != self.start => Liveness::Dead,
            _ => Liveness::Alive,
        }
    }
}

/// The launcher's job id, if a launcher started us (Open MPI, Slurm), else
/// `p<pid>`; only `[A-Za-z0-9_-]`, at most 40 characters.
pub fn job_id() -> String {
    let from = |var: &str, tag: &str| {
        let v = std::env::var(var).ok()?;
        let clean: String = v
            .chars()
            .filter(|c| c.is_ascii_alphanumeric() || *c == '-' || *c == '_')
            .take(32)
            .collect();
        (!clean.is_empty()).then(|| format!("{tag}{clean}"))
    };
    from("OMPI_MCA_ess_base_jobid", "ompi")
        .or_else(|| from("SLURM_JOB_ID", "slurm"))
        .unwrap_or_else(|| format!("p{}", std::process::id()))
}

/// Inode of this process's PID namespace, from `/proc/self/ns/pid`
/// (`pid:[4026531836]`).
pub fn pid_namespace() -> Option<u64> {
    let link = std::fs::read_link("/proc/self/ns/pid").ok()?;
    let s = link.to_str()?;
    s.strip_prefix("pid:[")?.strip_suffix(']')?.parse().ok()
}

/// Start time of process `pid` in clock ticks after boot (field 22 of
/// `/proc/<pid>/stat`), if it exists and can be read.
pub fn process_start(pid: u32) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command (field 2) is in parentheses and may hold spaces or ')':
    // fields are counted after the last ')'. Field 3 is the first there.
    let rest = &stat[stat.rfind(')')? + 1..];
    rest.split_whitespace().nth(22 - 3)?.parse().ok()
}

static NEXT_SEGMENT: AtomicU32 = AtomicU32::new(0);

/// A fresh `shm_open` name for a segment made by this process:
/// `/fabkit.<job>.<pid namespace>.<pid>.<start>.<what>-<n>`, `n` counting
/// this process's segments (in-process ranks share a pid). `what` says
/// what it is for, in `[A-Za-z0-9_-]`.
pub fn segment_name(what: &str) -> Result<String> {
    if what.is_empty()
        || what.len() > 64
        || !what
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
    {
        return Err(Error::InvalidArgument(format!(
            "segment purpose `{what}`: use 1 to 64 of A-Z a-z 0-9 - _"
        )));
    }
    let me = Creator::current();
    let n = NEXT_SEGMENT.fetch_add(1, Ordering::Relaxed);
    Ok(format!(
        "/{PREFIX}{}.{}.{}.{}.{what}-{n}",
        me.job, me.pid_ns, me.pid, me.start
    ))
}

/// The creator and purpose recorded in a fabkit segment name (with or
/// without the leading `/`); `None` for any other name.
pub fn parse_name(name: &str) -> Option<(Creator, &str)> {
    let rest = name
        .strip_prefix('/')
        .unwrap_or(name)
        .strip_prefix(PREFIX)?;
    let mut f = rest.splitn(5, '.');
    let job = f.next()?;
    let pid_ns = f.next()?.parse().ok()?;
    let pid: u32 = f.next()?.parse().ok()?;
    let start = f.next()?.parse().ok()?;
    let what = f.next()?;
    if job.is_empty() || what.is_empty() || pid == 0 {
        return None;
    }
    Some((
        Creator {
            job: job.to_string(),
            pid_ns,
            pid,
            start,
        },
        what,
    ))
}

/// A fabkit segment in [`SHM_DIR`] that [`reap_stale`] may remove: this
/// user's, made in this PID namespace by a process that no longer exists.
pub fn is_stale(dir: &Path, file: &str) -> bool {
    let Some((creator, _)) = parse_name(file) else {
        return false;
    };
    let Ok(meta) = std::fs::symlink_metadata(dir.join(file)) else {
        return false;
    };
    // SAFETY: geteuid has no preconditions.
    let me = unsafe { libc::geteuid() };
    meta.file_type().is_file() && meta.uid() == me && creator.liveness() == Liveness::Dead
}

/// Removes this user's fabkit segments from [`SHM_DIR`] whose creating
/// process no longer exists in this PID namespace (a rank killed before
/// it could unlink); returns their names. Segments of live processes,
/// other users and other PID namespaces are left alone. Called at the start
/// of every same-node transport, and by `fabkit clean`.
pub fn reap_stale() -> Result<Vec<String>> {
    let dir = Path::new(SHM_DIR);
    let entries = match std::fs::read_dir(dir) {
        Ok(e) => e,
        // No /dev/shm: no segments either.
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(source) => {
            return Err(Error::Io {
                what: format!("listing {SHM_DIR}"),
                source,
            })
        }
    };
    let mut removed = Vec::new();
    for e in entries.flatten() {
        let file = e.file_name();
        let Some(file) = file.to_str() else { continue };
        if !is_stale(dir, file) {
            continue;
        }
        match std::fs::remove_file(dir.join(file)) {
            Ok(()) => removed.push(file.to_string()),
            // Another rank reaped it first.
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(source) => {
                return Err(Error::Io {
                    what: format!("removing stale segment {SHM_DIR}/{file}"),
                    source,
                })
            }
        }
    }
    Ok(removed)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Unlinks a name made by hand, also when the test fails.
    struct Unlink(String);
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

    #[test]
    fn byte_copies_through_words_keep_the_bytes_beside_them() {
        let words: Vec<AtomicU64> = (0..4).map(|_| AtomicU64::new(u64::MAX)).collect();
        write_words(&words, 3, &[1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11]);
        let mut all = [0u8; 32];
        read_words(&words, 0, &mut all);
        let mut want = [0xffu8; 32];
        want[3..14].copy_from_slice(&[1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11]);
        assert_eq!(all, want);
        let mut mid = [0u8; 5];
        read_words(&words, 9, &mut mid);
        assert_eq!(mid, [7, 8, 9, 10, 11]);
    }

    #[test]
    fn names_record_the_creator_and_parse_back() {
        let name = segment_name("dht-r3").unwrap();
        let (c, what) = parse_name(&name).unwrap();
        assert_eq!(c, Creator::current());
        assert!(what.starts_with("dht-r3-"), "{what}");
        assert_eq!(c.liveness(), Liveness::Alive);
        assert_ne!(segment_name("dht-r3").unwrap(), name, "names are fresh");
        for bad in ["", "a.b", "a/b", &"x".repeat(65)] {
            assert!(segment_name(bad).is_err(), "{bad:?}");
        }
        for other in [
            "12:0:0",
            "fabkit.j.1.x.2.w",
            "fabkit.j.1.0.2.w",
            "fabkit.j.1.2.3",
        ] {
            assert!(parse_name(other).is_none(), "{other}");
        }
        // Another PID namespace: its pids mean nothing here.
        let foreign = Creator {
            pid_ns: c.pid_ns.wrapping_add(1),
            ..c.clone()
        };
        assert_eq!(foreign.liveness(), Liveness::Foreign);
        // Our pid with another start time: a recycled pid, so dead.
        let recycled = Creator {
            start: c.start.wrapping_add(1),
            ..c.clone()
        };
        assert_eq!(recycled.liveness(), Liveness::Dead);
    }

    #[test]
    fn reaping_removes_a_dead_creators_segment_only() {
        // A child that exits at once: its pid is free after wait().
        let mut child = std::process::Command::new("true").spawn().unwrap();
        let pid = child.id();
        child.wait().unwrap();
        let me = Creator::current();
        let dead = format!("{PREFIX}{}.{}.{pid}.1.test-dead-0", me.job, me.pid_ns);
        let live = segment_name("test-live").unwrap();
        let _g = (Unlink(dead.clone()), Unlink(live.clone()));
        std::fs::write(Path::new(SHM_DIR).join(&dead), [0u8; 8]).unwrap();
        let seg = SharedSegment::create(&live, 8).unwrap();
        let removed = reap_stale().unwrap();
        // (A rank starting elsewhere on this machine may have reaped it first.)
        assert!(removed.iter().all(|r| r.starts_with(PREFIX)), "{removed:?}");
        assert!(!Path::new(SHM_DIR).join(&dead).exists());
        assert!(Path::new(SHM_DIR).join(&live[1..]).exists());
        drop(seg);
    }
}
