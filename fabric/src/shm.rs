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
//! [`write_words`] of [`fabkit_core::words`]): never also as bytes, as mixed-size atomic accesses to
//! the same bytes are not defined by the Rust memory model.
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

use std::collections::HashMap;
use std::ffi::CString;
use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::ptr::NonNull;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};

use crate::error::{Error, Result};
#[cfg(doc)]
use fabkit_core::words::{read_words, write_words};
use fabkit_core::Error as CoreError;

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
    Error::from(CoreError::Io {
        what,
        source: std::io::Error::last_os_error(),
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
                    source: std::io::Error::from_raw_os_error(err),
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

/// The process that created a fabkit segment, as the segment's name
/// records it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Creator {
    /// The launcher's job id (`ompi<id>`, `slurm<id>`) or `p<pid>`.
    pub job: String,
    /// Inode of the creator's PID namespace (`/proc/self/ns/pid`); 0 when
    /// it could not be read, and then the creator is never judged dead.
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
    /// It no longer exists in this PID namespace (its pid is free, names a
    /// zombie, or names a process started at another time).
    Dead,
    /// It was made in another PID namespace (or one that could not be read),
    /// where its pid means nothing here: it is never reaped from here.
    Foreign,
}

impl Creator {
    /// This process. Its PID namespace and start time are read from
    /// `/proc/self`; when that `/proc` is not this process's own (mounted
    /// for another PID namespace) or cannot be read, both are recorded as
    /// 0, so the segment counts as [`Liveness::Foreign`] everywhere and is
    /// never reaped (`fabkit clean` lists it as kept).
    pub fn current() -> Creator {
        let pid = std::process::id();
        let ns = pid_namespace();
        Creator {
            job: job_id(),
            pid_ns: ns.unwrap_or(0),
            pid,
            start: ns
                .and_then(|_| proc_stat("/proc/self/stat"))
                .map_or(0, |s| s.start),
        }
    }

    /// Whether the creator still runs, judged in this PID namespace.
    pub fn liveness(&self) -> Liveness {
        match pid_namespace() {
            Some(ns) if ns == self.pid_ns && ns != 0 => {}
            // Another or an unknown namespace: nothing can be judged.
            _ => return Liveness::Foreign,
        }
        match pid_state(self.pid) {
            PidState::Gone => Liveness::Dead,
            // The pid is taken; by the creator only if it started at the
            // recorded time.
            PidState::Running { start: Some(s) } if s != self.start => Liveness::Dead,
            PidState::Running { .. } => Liveness::Alive,
        }
    }
}

/// What a pid of this PID namespace names now.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum PidState {
    /// No process, or a zombie (it has exited; its mappings are gone).
    Gone,
    /// A process, started at `start` if its `/proc` entry could be read.
    Running { start: Option<u64> },
}

fn pid_state(pid: u32) -> PidState {
    let Ok(p) = libc::pid_t::try_from(pid) else {
        return PidState::Gone;
    };
    if p <= 0 {
        // kill(0) and kill(-1) address groups; no process has such a pid.
        return PidState::Gone;
    }
    // SAFETY: signal 0 only checks that the pid exists; nothing is sent.
    if unsafe { libc::kill(p, 0) } != 0
        && std::io::Error::last_os_error().raw_os_error() == Some(libc::ESRCH)
    {
        return PidState::Gone;
    }
    // kill(pid, 0) succeeds on a zombie: it has exited all the same.
    match proc_stat(&format!("/proc/{pid}/stat")) {
        Some(s) if s.state == b'Z' || s.state == b'X' => PidState::Gone,
        Some(s) => PidState::Running {
            start: Some(s.start),
        },
        // It exists (kill said so; EPERM: another user's) but its stat
        // could not be read: keep what it may own.
        None => PidState::Running { start: None },
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

/// A number written the one way `{}` writes it: ASCII digits, no sign, no
/// leading zero (so one value has one name).
fn canonical(s: &str) -> Option<u64> {
    let ok =
        !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit()) && (s == "0" || !s.starts_with('0'));
    ok.then(|| s.parse().ok()).flatten()
}

/// Whether `/proc` is this process's own: `/proc/self` names our pid. It
/// does not when `/proc` was mounted for another PID namespace, and then
/// nothing read there says anything about our pids.
fn own_proc() -> bool {
    std::fs::read_link("/proc/self")
        .ok()
        .and_then(|l| l.to_str().and_then(canonical))
        == Some(u64::from(std::process::id()))
}

/// Inode of this process's PID namespace, from `/proc/self/ns/pid`
/// (`pid:[4026531836]`); `None` if `/proc` is not this process's own.
pub fn pid_namespace() -> Option<u64> {
    if !own_proc() {
        return None;
    }
    let link = std::fs::read_link("/proc/self/ns/pid").ok()?;
    let s = link.to_str()?;
    canonical(s.strip_prefix("pid:[")?.strip_suffix(']')?).filter(|&n| n != 0)
}

/// Inode of the initial PID namespace: a kernel constant (`PROC_PID_INIT_INO`).
/// Only from there does `/proc` show every process on the machine.
const INIT_PID_NS: u64 = 0xEFFF_FFFC;

struct ProcStat {
    state: u8,
    start: u64,
}

/// Fields 3 (state) and 22 (start time) of a `/proc/<pid>/stat`.
fn proc_stat(path: &str) -> Option<ProcStat> {
    let stat = std::fs::read_to_string(path).ok()?;
    // The command (field 2) is in parentheses and may hold spaces or ')':
    // fields are counted after the last ')'. Field 3 is the first there.
    let mut rest = stat[stat.rfind(')')? + 1..].split_whitespace();
    let state = *rest.next()?.as_bytes().first()?;
    let start = canonical(rest.nth(22 - 4)?)?;
    Some(ProcStat { state, start })
}

/// Start time of process `pid` in clock ticks after boot (field 22 of
/// `/proc/<pid>/stat`), if it exists and can be read.
pub fn process_start(pid: u32) -> Option<u64> {
    proc_stat(&format!("/proc/{pid}/stat")).map(|s| s.start)
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
        return Err(Error::from(CoreError::InvalidArgument(format!(
            "segment purpose `{what}`: use 1 to 64 of A-Z a-z 0-9 - _"
        ))));
    }
    let me = Creator::current();
    let n = NEXT_SEGMENT.fetch_add(1, Ordering::Relaxed);
    Ok(format!(
        "/{PREFIX}{}.{}.{}.{}.{what}-{n}",
        me.job, me.pid_ns, me.pid, me.start
    ))
}

/// The creator and purpose recorded in a fabkit segment name (with or
/// without the leading `/`); `None` for any other name. Numbers must be
/// written as [`segment_name`] writes them (no sign, no leading zero) and
/// the pid is never 0.
pub fn parse_name(name: &str) -> Option<(Creator, &str)> {
    let rest = name
        .strip_prefix('/')
        .unwrap_or(name)
        .strip_prefix(PREFIX)?;
    let mut f = rest.splitn(5, '.');
    let job = f.next()?;
    let pid_ns = canonical(f.next()?)?;
    let pid = u32::try_from(canonical(f.next()?)?).ok()?;
    let start = canonical(f.next()?)?;
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

/// The pid, uid and index in a name the libfabric shm provider gives an
/// endpoint's region: `<pid>:<uid>:<index>` (libfabric 1.17 `prov/shm`, the
/// default name when no source address is given). Canonical numbers only,
/// pid never 0.
pub fn parse_provider_name(name: &str) -> Option<(u32, u32, u32)> {
    let mut f = name.split(':');
    let mut num = || u32::try_from(canonical(f.next()?)?).ok();
    let (pid, uid, index) = (num()?, num()?, num()?);
    (f.next().is_none() && pid != 0).then_some((pid, uid, index))
}

/// What made a segment [`survey`] found.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Maker {
    /// fabkit, as recorded in the name ([`segment_name`]).
    Fabkit {
        /// The creating process.
        creator: Creator,
        /// What it was for.
        what: String,
    },
    /// The libfabric shm provider, for an endpoint of process `pid`.
    Provider {
        /// The pid in the name (the provider's creator).
        pid: u32,
    },
}

/// A file in [`SHM_DIR`] that a killed process may have left: one of this
/// user's whose maker no longer runs (or cannot be judged).
#[derive(Clone, Debug)]
pub struct Segment {
    /// File name in [`SHM_DIR`].
    pub file: String,
    /// Who made it.
    pub maker: Maker,
    dev: u64,
    ino: u64,
}

/// What is to be done with a [`Segment`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// Nothing runs that made or holds it: it may be removed ([`remove`]).
    Stale(String),
    /// It stays, for the reason given.
    Keep(String),
}

/// The processes that have a file of [`SHM_DIR`] open or mapped, by
/// (device, inode), and those whose open files and mappings could not be
/// read (`blind`).
struct Holders {
    held: HashMap<(u64, u64), u32>,
    blind: Vec<u32>,
}

/// Scans `/proc/<pid>/fd` and `/proc/<pid>/maps` of every process for files
/// on the device `dev` (that of [`SHM_DIR`]). Files are matched by device
/// and inode, not name, so a segment removed and made again under the same
/// name is not confused with the old one.
fn holders(dev: u64) -> Holders {
    let mut h = Holders {
        held: HashMap::new(),
        blind: Vec::new(),
    };
    let Ok(procs) = std::fs::read_dir("/proc") else {
        return h;
    };
    let me = std::process::id();
    // maps writes the device as major:minor in hex.
    let dev_text = format!("{:02x}:{:02x}", libc::major(dev), libc::minor(dev));
    for p in procs.flatten() {
        let Some(pid) = p
            .file_name()
            .to_str()
            .and_then(canonical)
            .and_then(|n| u32::try_from(n).ok())
        else {
            continue;
        };
        if pid == me {
            continue;
        }
        let gone = |e: &std::io::Error| {
            e.kind() == std::io::ErrorKind::NotFound || e.raw_os_error() == Some(libc::ESRCH)
        };
        let mut blind = false;
        // Open files first, then mappings: a process between shm_open and
        // mmap is seen in one or the other (it maps before it closes).
        match std::fs::read_dir(p.path().join("fd")) {
            Ok(fds) => {
                for fd in fds.flatten() {
                    // stat follows the link to the open file itself.
                    if let Ok(m) = std::fs::metadata(fd.path()) {
                        if m.dev() == dev {
                            h.held.entry((m.dev(), m.ino())).or_insert(pid);
                        }
                    }
                }
            }
            Err(e) if gone(&e) => continue,
            Err(_) => blind = true,
        }
        match std::fs::read_to_string(p.path().join("maps")) {
            Ok(maps) => {
                for line in maps.lines() {
                    // address perms offset dev inode [path]
                    let mut f = line.split_whitespace().skip(3);
                    if f.next() == Some(dev_text.as_str()) {
                        if let Some(ino) = f.next().and_then(canonical) {
                            h.held.entry((dev, ino)).or_insert(pid);
                        }
                    }
                }
            }
            Err(e) if gone(&e) => continue,
            Err(_) => blind = true,
        }
        if blind {
            h.blind.push(pid);
        }
    }
    h
}

/// Whether a process of this PID namespace we could not look into might
/// hold a file owned by `owner`: it runs as `owner` or may override file
/// permissions (CAP_DAC_OVERRIDE, root). If its status cannot be read
/// either, it might.
fn could_hold(pid: u32, owner: u32) -> bool {
    let Ok(status) = std::fs::read_to_string(format!("/proc/{pid}/status")) else {
        return true;
    };
    let field = |name: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(name))
            .map(str::trim)
    };
    let same_user = field("Uid:").is_none_or(|u| {
        u.split_whitespace()
            .any(|id| canonical(id) == Some(u64::from(owner)))
    });
    const CAP_DAC_OVERRIDE: u64 = 1 << 1;
    let overrides = field("CapEff:")
        .is_none_or(|c| u64::from_str_radix(c, 16).map_or(true, |c| c & CAP_DAC_OVERRIDE != 0));
    same_user || overrides
}

/// This user's files in [`SHM_DIR`] a killed process may have left: fabkit
/// segments whose creator does not run (or that cannot be judged from
/// here), and, if `provider`, libfabric shm provider segments whose pid does
/// not run. Segments of live makers are not listed; other users' files and
/// other names never are.
fn candidates(provider: bool) -> Result<Vec<Segment>> {
    let dir = Path::new(SHM_DIR);
    let entries = match std::fs::read_dir(dir) {
        Ok(e) => e,
        // No /dev/shm: no segments either.
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(source) => {
            return Err(Error::from(CoreError::Io {
                what: format!("listing {SHM_DIR}"),
                source,
            }))
        }
    };
    // SAFETY: geteuid and getuid have no preconditions.
    let (euid, uid) = unsafe { (libc::geteuid(), libc::getuid()) };
    let mut found = Vec::new();
    for e in entries.flatten() {
        // fabkit's and the provider's names are ASCII: any other is neither.
        let Ok(file) = e.file_name().into_string() else {
            continue;
        };
        let maker = if let Some((creator, what)) = parse_name(&file) {
            if creator.liveness() == Liveness::Alive {
                continue;
            }
            Maker::Fabkit {
                what: what.to_string(),
                creator,
            }
        } else if let Some((pid, owner, _)) = parse_provider_name(&file) {
            if !provider || (owner != uid && owner != euid) {
                continue;
            }
            // A live job's: not a leftover. (Outside the initial PID
            // namespace the pid says nothing: listed, and kept by `judge`.)
            if pid_namespace() == Some(INIT_PID_NS) && pid_state(pid) != PidState::Gone {
                continue;
            }
            Maker::Provider { pid }
        } else {
            continue;
        };
        // Not followed: a symlink is never a segment of ours.
        let Ok(meta) = e.path().symlink_metadata() else {
            continue;
        };
        if !meta.file_type().is_file() || meta.uid() != euid {
            continue;
        }
        found.push(Segment {
            file,
            maker,
            dev: meta.dev(),
            ino: meta.ino(),
        });
    }
    found.sort_by(|a, b| a.file.cmp(&b.file));
    Ok(found)
}

/// Judges one candidate. `holders` is scanned on first need.
fn judge(seg: &Segment, holders_of: &mut Option<Holders>) -> Verdict {
    let maker = match &seg.maker {
        Maker::Fabkit { creator, what } => {
            match creator.liveness() {
                Liveness::Alive => {
                    return Verdict::Keep(format!("its creator pid {} runs", creator.pid))
                }
                Liveness::Foreign => {
                    return Verdict::Keep(format!(
                        "made in PID namespace {} (this is {}), whose pids cannot be \
                         checked from here: run fabkit clean there, or remove it by hand \
                         if that namespace is gone",
                        creator.pid_ns,
                        pid_namespace().map_or("unknown".into(), |n| n.to_string())
                    ))
                }
                Liveness::Dead => {}
            }
            format!(
                "fabkit segment ({what}, job {}) of pid {}, which has exited",
                creator.job, creator.pid
            )
        }
        Maker::Provider { pid } => {
            // Its name records a pid of some namespace and nothing else: only
            // where every process is visible can "nobody holds it" be known.
            if pid_namespace() != Some(INIT_PID_NS) {
                return Verdict::Keep(
                    "a libfabric shm segment can only be judged from the initial PID \
                     namespace (its holders may run where this process cannot see)"
                        .into(),
                );
            }
            if pid_state(*pid) != PidState::Gone {
                return Verdict::Keep(format!("its creator pid {pid} runs"));
            }
            format!("libfabric shm segment of pid {pid}, which has exited")
        }
    };
    let h = holders_of.get_or_insert_with(|| holders(seg.dev));
    if let Some(pid) = h.held.get(&(seg.dev, seg.ino)) {
        return Verdict::Keep(format!(
            "{maker}, but pid {pid} still has it open or mapped"
        ));
    }
    // SAFETY: geteuid has no preconditions.
    let owner = unsafe { libc::geteuid() };
    let blind: Vec<String> = h
        .blind
        .iter()
        .filter(|&&p| could_hold(p, owner))
        .map(u32::to_string)
        .collect();
    if blind.is_empty() {
        return Verdict::Stale(maker);
    }
    // A process that could hold it cannot be looked into (a supervisor with
    // more privilege than this one, a non-dumpable process, another user's
    // while not root). Removing the name cannot harm it if it does: a
    // mapping or an open file outlives the name, and the only process that
    // would still open it by name is a late peer of a maker already proven
    // gone (pid free in this namespace; for fabkit also by start time). So
    // it is removed, and the line says who could not be seen.
    let more = if blind.len() > 3 { ", ..." } else { "" };
    Verdict::Stale(format!(
        "{maker}; the open files of pid {}{more} could not be read (a mapping there \
         would outlive the name)",
        blind[..blind.len().min(3)].join(", ")
    ))
}

/// Lists this user's segments in [`SHM_DIR`] that killed processes may have
/// left, each with its verdict: [`Verdict::Stale`] only when its maker no
/// longer runs in this PID namespace (its pid free or a zombie; for fabkit
/// segments also not recycled: the start time differs) and no process this
/// one can look into has it open or mapped. Processes that cannot be
/// looked into are named in the reason, not waited for: a mapping outlives
/// the name, so removing it harms only a late peer of a dead maker.
/// With `provider`, libfabric shm provider segments are judged too (only
/// from the initial PID namespace, which sees every process). fabkit
/// segments of live creators and provider segments of live pids are not
/// listed; other users' files and other names never are.
pub fn survey(provider: bool) -> Result<Vec<(Segment, Verdict)>> {
    let mut h = None;
    Ok(candidates(provider)?
        .into_iter()
        .map(|s| {
            let v = judge(&s, &mut h);
            (s, v)
        })
        .collect())
}

/// What [`remove`] did.
#[derive(Debug)]
pub enum Removal {
    /// Unlinked.
    Removed,
    /// Already gone (another start reaped it, or its job removed it).
    Gone,
    /// Kept after all: it changed or came back to life since the survey.
    Kept(String),
}

/// Removes a segment [`survey`] judged stale, after judging it again just
/// before: the name must still be the same file (device and inode), its
/// maker still gone and nobody holding it. (A process opening it between
/// that check and the unlink still could: no call unlinks a name only if
/// it is a given inode. Its maker is gone, so only a late peer of a dead
/// job could.)
pub fn remove(seg: &Segment) -> std::io::Result<Removal> {
    let path = Path::new(SHM_DIR).join(&seg.file);
    let meta = match path.symlink_metadata() {
        Ok(m) => m,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Removal::Gone),
        Err(e) => return Err(e),
    };
    if (meta.dev(), meta.ino()) != (seg.dev, seg.ino) || !meta.file_type().is_file() {
        return Ok(Removal::Kept(
            "it was replaced by another file since it was looked at".into(),
        ));
    }
    if let Verdict::Keep(why) = judge(seg, &mut None) {
        return Ok(Removal::Kept(why));
    }
    match std::fs::remove_file(&path) {
        Ok(()) => Ok(Removal::Removed),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(Removal::Gone),
        Err(e) => Err(e),
    }
}

/// What [`reap_stale`] did.
#[derive(Debug, Default)]
pub struct Reaped {
    /// Names removed, each with why.
    pub removed: Vec<(String, String)>,
    /// Names that could not be removed, or the listing that failed.
    pub failed: Vec<(String, String)>,
}

/// Removes this user's fabkit segments from [`SHM_DIR`] whose creating
/// process no longer exists in this PID namespace and that no process
/// holds (a rank killed before it could unlink), judged as [`survey`]
/// judges. Segments of live processes, other users and other PID
/// namespaces are left alone. A failure is noted and the rest still done:
/// called at the start of every same-node transport, which must start
/// whatever was left. `fabkit clean` does the same and more.
pub fn reap_stale() -> Reaped {
    let mut out = Reaped::default();
    let found = match survey(false) {
        Ok(f) => f,
        Err(e) => {
            out.failed.push((SHM_DIR.into(), e.to_string()));
            return out;
        }
    };
    for (seg, verdict) in found {
        let Verdict::Stale(why) = verdict else {
            continue;
        };
        match remove(&seg) {
            Ok(Removal::Removed) => out.removed.push((seg.file, why)),
            Ok(Removal::Gone | Removal::Kept(_)) => {}
            Err(e) => out.failed.push((seg.file, e.to_string())),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use fabkit_core::words::read_words;

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
        let reaped = reap_stale();
        assert!(reaped.failed.is_empty(), "{reaped:?}");
        // Removed by this call, or by a rank starting elsewhere on this
        // machine just before: gone either way, and never the live one.
        assert!(!Path::new(SHM_DIR).join(&dead).exists());
        assert!(Path::new(SHM_DIR).join(&live[1..]).exists());
        assert!(
            reaped.removed.iter().all(|(r, _)| *r != live[1..]),
            "{reaped:?}"
        );
        drop(seg);
    }

    #[test]
    fn a_dead_creators_segment_still_mapped_is_kept_and_a_replaced_one_is_not_removed() {
        let mut child = std::process::Command::new("true").spawn().unwrap();
        let pid = child.id();
        child.wait().unwrap();
        let me = Creator::current();
        let dead = format!("{PREFIX}{}.{}.{pid}.1.test-held-0", me.job, me.pid_ns);
        let _g = Unlink(dead.clone());
        let path = Path::new(SHM_DIR).join(&dead);
        std::fs::write(&path, [0u8; 8]).unwrap();
        let found = survey(false).unwrap();
        let (seg, verdict) = found.iter().find(|(s, _)| s.file == dead).unwrap();
        assert!(matches!(verdict, Verdict::Stale(_)), "{verdict:?}");
        // The name now holds another file: the old judgement does not
        // remove it.
        std::fs::remove_file(&path).unwrap();
        std::fs::write(&path, [0u8; 8]).unwrap();
        // (A tmpfs may hand the freed inode number straight back.)
        if std::fs::metadata(&path).unwrap().ino() != seg.ino {
            assert!(matches!(remove(seg), Ok(Removal::Kept(_))));
            assert!(path.exists());
        }
        // Open in a live process (a child holding it as its stdin, as a
        // peer of the dead creator would hold it): kept, naming the holder.
        struct Reap(std::process::Child);
        impl Drop for Reap {
            fn drop(&mut self) {
                let _ = self.0.kill();
                let _ = self.0.wait();
            }
        }
        let mut holder = Reap(
            std::process::Command::new("sleep")
                .arg("600")
                .stdin(std::fs::File::open(&path).unwrap())
                .spawn()
                .unwrap(),
        );
        let verdict = |file: &str| {
            survey(false)
                .unwrap()
                .into_iter()
                .find(|(s, _)| s.file == file)
                .unwrap()
        };
        let (seg, v) = verdict(&dead);
        match &v {
            Verdict::Keep(why) => assert!(
                why.contains(&format!("pid {} still has it open", holder.0.id())),
                "{why}"
            ),
            v => panic!("{v:?}"),
        }
        assert!(matches!(remove(&seg), Ok(Removal::Kept(_))));
        assert!(path.exists());
        holder.0.kill().unwrap();
        holder.0.wait().unwrap();
        let (seg, v) = verdict(&dead);
        assert!(matches!(v, Verdict::Stale(_)), "{v:?}");
        assert!(matches!(remove(&seg), Ok(Removal::Removed | Removal::Gone)));
        assert!(!path.exists());
    }

    #[test]
    fn numbers_in_names_are_canonical() {
        assert_eq!(parse_provider_name("19403:0:0"), Some((19403, 0, 0)));
        assert_eq!(
            parse_provider_name("19403:1000:12"),
            Some((19403, 1000, 12))
        );
        for bad in [
            "0:0:0",
            "+1:0:0",
            "01:0:0",
            "1:00:0",
            "1:0:-0",
            "1:0",
            "1:0:0:1",
            "x:0:0",
            "4294967296:0:0",
            "1: 0:0",
        ] {
            assert_eq!(parse_provider_name(bad), None, "{bad}");
        }
        for bad in [
            "fabkit.j.1.+2.3.w",
            "fabkit.j.1.02.3.w",
            "fabkit.j.01.2.3.w",
            "fabkit.j.1.2.03.w",
            "fabkit.j.1.0.3.w",
            "fabkit.j.1.4294967296.3.w",
        ] {
            assert!(parse_name(bad).is_none(), "{bad}");
        }
        assert!(parse_name("fabkit.j.1.2.0.w").is_some());
    }

    #[test]
    fn a_zombie_creator_is_dead() {
        // Exited but not waited for: kill(pid, 0) still succeeds.
        let mut child = std::process::Command::new("true").spawn().unwrap();
        let pid = child.id();
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
        // Waiting on the child's state, not sleeping for it: /proc says Z
        // once it has exited.
        while proc_stat(&format!("/proc/{pid}/stat")).map(|s| s.state) != Some(b'Z') {
            assert!(std::time::Instant::now() < deadline, "`true` did not exit");
            std::thread::yield_now();
        }
        let me = Creator::current();
        let zombie = Creator {
            pid,
            start: process_start(pid).unwrap(),
            ..me
        };
        assert_eq!(zombie.liveness(), Liveness::Dead);
        assert_eq!(pid_state(pid), PidState::Gone);
        child.wait().unwrap();
    }

    #[test]
    fn this_process_is_judged_through_its_own_proc() {
        let me = Creator::current();
        assert_ne!(me.pid_ns, 0);
        assert_eq!(Some(me.start), process_start(me.pid));
        // A name recording no namespace (an unreadable /proc at its start)
        // is never judged.
        let unknown = Creator { pid_ns: 0, ..me };
        assert_eq!(unknown.liveness(), Liveness::Foreign);
    }
}
