//! The system calls the testbed and cleanup make that `std` does not:
//! `setns`, `flock`, the signal mask and `sigwait`, and a child's death
//! signal. The only module of the crate with `unsafe`; each call's
//! arguments are borrowed for exactly the call.
#![allow(unsafe_code)]

use std::io;
use std::mem::zeroed;
use std::os::fd::AsRawFd;

fn check(rc: libc::c_int) -> io::Result<libc::c_int> {
    if rc < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(rc)
    }
}

/// An exclusive `flock` on `path` (created if missing), held until the
/// returned file is dropped; gives up after `wait` with `TimedOut`.
pub fn lock_file(path: &str, wait: std::time::Duration) -> io::Result<std::fs::File> {
    let f = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(path)?;
    let deadline = std::time::Instant::now() + wait;
    loop {
        // SAFETY: f is an open file for the duration of the call; the lock is
        // released when it is closed.
        if unsafe { libc::flock(f.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } == 0 {
            return Ok(f);
        }
        let e = io::Error::last_os_error();
        if e.raw_os_error() != Some(libc::EWOULDBLOCK) {
            return Err(e);
        }
        if std::time::Instant::now() >= deadline {
            return Err(io::Error::new(
                io::ErrorKind::TimedOut,
                format!("another process holds it for more than {wait:?} (see `fuser {path}`)"),
            ));
        }
        // flock has no timed wait: poll, holders keep it for milliseconds.
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
}

/// The signals that end a run early and should leave nothing behind.
const TERMINATING: [libc::c_int; 3] = [libc::SIGINT, libc::SIGTERM, libc::SIGHUP];

/// SIGHUP was ignored when the signals were blocked (`nohup`): it stays
/// out of the set, so a logout does not end a server.
static HUP_IGNORED: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

fn terminating_set() -> libc::sigset_t {
    let skip_hup = HUP_IGNORED.load(std::sync::atomic::Ordering::Relaxed);
    // SAFETY: sigemptyset/sigaddset initialise and fill a local set.
    unsafe {
        let mut set: libc::sigset_t = zeroed();
        libc::sigemptyset(&mut set);
        for s in TERMINATING {
            if !(s == libc::SIGHUP && skip_hup) {
                libc::sigaddset(&mut set, s);
            }
        }
        set
    }
}

/// Whether signal `sig` is ignored now.
fn ignored(sig: libc::c_int) -> bool {
    // SAFETY: a null new action only reads the current one into `old`.
    unsafe {
        let mut old: libc::sigaction = zeroed();
        libc::sigaction(sig, std::ptr::null(), &mut old) == 0 && old.sa_sigaction == libc::SIG_IGN
    }
}

/// Blocks SIGINT, SIGTERM and SIGHUP in the calling thread; threads it
/// starts later inherit the mask, so only [`wait_terminating`] takes them.
pub fn block_terminating() -> io::Result<()> {
    HUP_IGNORED.store(ignored(libc::SIGHUP), std::sync::atomic::Ordering::Relaxed);
    let set = terminating_set();
    // SAFETY: set is initialised; the old mask is not asked for.
    let rc = unsafe { libc::pthread_sigmask(libc::SIG_BLOCK, &set, std::ptr::null_mut()) };
    if rc != 0 {
        return Err(io::Error::from_raw_os_error(rc));
    }
    Ok(())
}

/// Waits for one of the blocked terminating signals; returns its number.
pub fn wait_terminating() -> libc::c_int {
    let set = terminating_set();
    loop {
        let mut sig: libc::c_int = 0;
        // SAFETY: set is initialised and sig is a valid out pointer.
        if unsafe { libc::sigwait(&set, &mut sig) } == 0 {
            return sig;
        }
    }
}

/// The terminating signals held back in the calling thread, for it to take
/// them one by one ([`HeldTerminating::wait`]) where a thread of their own
/// ([`on_signals`](crate::cleanup::on_signals)) would not do: a launcher
/// that passes them on to its children. Dropping it takes any still
/// pending (the holder is ending anyway, and their default action would
/// end it before it had cleaned up), then restores the mask. The process
/// must have no other thread that leaves them unblocked, or they may go
/// there instead.
pub struct HeldTerminating {
    set: libc::sigset_t,
    old: libc::sigset_t,
}

impl std::fmt::Debug for HeldTerminating {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("HeldTerminating")
    }
}

impl HeldTerminating {
    /// Blocks SIGINT, SIGTERM and SIGHUP (not SIGHUP where it is ignored:
    /// `nohup`) in the calling thread.
    pub fn hold() -> io::Result<HeldTerminating> {
        HUP_IGNORED.store(ignored(libc::SIGHUP), std::sync::atomic::Ordering::Relaxed);
        let set = terminating_set();
        // SAFETY: an all-zero sigset_t is a valid out parameter.
        let mut old: libc::sigset_t = unsafe { zeroed() };
        // SAFETY: set is initialised; old is a valid out pointer.
        let rc = unsafe { libc::pthread_sigmask(libc::SIG_BLOCK, &set, &mut old) };
        if rc != 0 {
            return Err(io::Error::from_raw_os_error(rc));
        }
        Ok(HeldTerminating { set, old })
    }

    /// Waits up to `d` for one of the held signals; its number, if one came.
    pub fn wait(&self, d: std::time::Duration) -> Option<libc::c_int> {
        let ts = libc::timespec {
            tv_sec: d.as_secs() as libc::time_t,
            tv_nsec: d.subsec_nanos() as libc::c_long,
        };
        // SAFETY: set is initialised; a null info pointer is allowed.
        let sig = unsafe { libc::sigtimedwait(&self.set, std::ptr::null_mut(), &ts) };
        (sig > 0).then_some(sig)
    }
}

impl Drop for HeldTerminating {
    fn drop(&mut self) {
        while self.wait(std::time::Duration::ZERO).is_some() {}
        // SAFETY: old is the mask saved by `hold`.
        unsafe { libc::pthread_sigmask(libc::SIG_SETMASK, &self.old, std::ptr::null_mut()) };
    }
}

/// Makes the child `cmd` starts take the terminating signals normally,
/// whatever the mask of the thread that forks.
pub fn child_takes_terminating(cmd: &mut std::process::Command) {
    // SAFETY: sigprocmask is async-signal-safe; the closure runs in the
    // child between fork and exec and touches only a local set.
    unsafe {
        std::os::unix::process::CommandExt::pre_exec(cmd, || {
            let set = terminating_set();
            libc::sigprocmask(libc::SIG_UNBLOCK, &set, std::ptr::null_mut());
            Ok(())
        });
    }
}

/// Makes a child started by `cmd` be killed when the thread that started
/// it ends, so an interrupted run leaves no such process behind (and takes
/// signals normally, whatever the mask of the thread that forks).
pub fn child_dies_with_us(cmd: &mut std::process::Command) {
    child_takes_terminating(cmd);
    // SAFETY: prctl and getppid are async-signal-safe; the closure runs in
    // the child between fork and exec and touches no memory of the parent.
    unsafe {
        let parent = libc::getpid();
        std::os::unix::process::CommandExt::pre_exec(cmd, move || {
            if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) != 0 {
                return Err(io::Error::last_os_error());
            }
            // The parent may have gone before the prctl: then go too (its
            // pid, not 1: a parent may be a container's init).
            if libc::getppid() != parent {
                libc::_exit(1);
            }
            Ok(())
        });
    }
}

/// Moves the calling thread into the network namespace `/run/netns/NAME`
/// (threads it starts afterwards inherit it).
pub fn enter_netns(name: &str) -> io::Result<()> {
    let f = std::fs::File::open(format!("/run/netns/{name}"))?;
    // SAFETY: f is an open namespace file for the duration of the call.
    check(unsafe { libc::setns(f.as_raw_fd(), libc::CLONE_NEWNET) })?;
    Ok(())
}
