//! Redis as the store a user would pick instead of the DHT, run beside it
//! by `fabkit dht` so both are measured on the same machine in the same run.
//!
//! Each rank starts one [`Server`]: a `redis-server` of its own on a free
//! port of loopback (ranks on one host) or of its address in the ranks'
//! network (ranks on several hosts or namespaces), persistence off, a
//! password every client of the run shares, and every file it writes in a
//! private directory that is removed when the server is dropped. The benchmark
//! shards its keys over the servers with the DHT's own placement (client-side
//! sharding, as a client-sharded Redis cluster does), and each rank drives
//! every server through one [`Client`]: one connection per server, a batch
//! of the DHT's depth becoming one `MGET` or `MSET` per server, all sent
//! before any reply is read so the servers work in parallel.
//!
//! Errors name the server (`redis-server on ADDRESS:PORT (pid N)`) and the
//! operation; a server that dies, resets the connection or stays silent
//! past the timeout is an error, never a panic or a hang. When
//! `redis-server` is not installed, [`Server::start`] fails with
//! [`NotInstalled`], which the caller reports in one line
//! ([`INSTALL_HINT`]) before benchmarking the DHT alone.

use std::ffi::OsStr;
use std::fmt;
use std::fs;
use std::io::{self, Read as _, Write as _};
use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4, TcpListener, TcpStream};
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt, PermissionsExt};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, ensure, Context, Result};
use redis::{ConnectionLike, IntoConnectionInfo, RedisWrite, Value};

/// What the caller prints, as its one line, when `redis-server` is missing.
pub const INSTALL_HINT: &str = "redis-server not found: install it (apt-get install redis-server) to benchmark Redis beside the DHT";

/// The program [`available`] looks for on `PATH`.
const PROGRAM: &str = "redis-server";

/// Ports [`Server::start`] tries when the one it chose is taken before the
/// server binds it (another process raced us to it). Each try costs a few
/// milliseconds; five taken in a row means something else is wrong.
const PORT_TRIES: usize = 5;

/// How long a starting server is left before it is asked again, and how
/// often a stopping one is checked: short against a start of ~10 ms, long
/// enough not to spin.
const NAP: Duration = Duration::from_millis(10);

/// How long one readiness PING may take.
const PING_WAIT: Duration = Duration::from_millis(100);

/// How long a server gets to end on SIGTERM before it is killed.
const STOP_GRACE: Duration = Duration::from_secs(2);

/// Log lines quoted in an error about a server that exited, and the
/// characters kept of each (redis's warnings run to 300 and more).
const LOG_LINES: usize = 3;
const LOG_LINE_CHARS: usize = 160;

/// The error [`Server::start`] returns, unwrapped, when `redis-server` is
/// not on `PATH`: `err.is::<NotInstalled>()` tells the caller to print
/// [`INSTALL_HINT`] once and run the rest of the benchmark without Redis.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct NotInstalled;

impl fmt::Display for NotInstalled {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(INSTALL_HINT)
    }
}

impl std::error::Error for NotInstalled {}

/// Where `redis-server` is on `PATH`, if it is there and executable.
pub fn available() -> Option<PathBuf> {
    find_program(&std::env::var_os("PATH")?, PROGRAM)
}

/// The first executable file `name` in the directories of `path` (a
/// `PATH`-style list).
fn find_program(path: &OsStr, name: &str) -> Option<PathBuf> {
    std::env::split_paths(path)
        .map(|dir| dir.join(name))
        .find(|p| fs::metadata(p).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0))
}

/// A `redis-server` this process started and owns: the child process and a
/// private directory for its log and anything else it writes. Dropping it
/// stops the server (SIGTERM, then SIGKILL after ~2 s), reaps it and
/// removes the directory.
#[derive(Debug)]
pub struct Server {
    child: Child,
    addr: SocketAddrV4,
    /// What clients (and the readiness PING) authenticate with.
    password: String,
    // Removed when the fields drop, which is after `Drop for Server` has
    // stopped the process that writes into it.
    dir: PrivateDir,
}

impl Server {
    /// Starts redis-server on `ip` at a free port, with no persistence
    /// and every file in a private directory, and waits (at most `timeout`
    /// in all, with short naps) until it answers PING.
    ///
    /// A port taken between choosing and binding it is replaced by another,
    /// a few times. Errors: [`NotInstalled`] when redis-server is not on
    /// `PATH`; otherwise one naming the port, the exit status and the last
    /// lines of the server's log.
    /// Clients must authenticate with `password` (see [`password`]): a
    /// server on a network address is reached by other hosts, and no one
    /// else there should read, flush or stop it, nor reconfigure it to
    /// write files.
    pub fn start(ip: Ipv4Addr, timeout: Duration, password: &str) -> Result<Server> {
        let program = available().ok_or(NotInstalled)?;
        start_with(&program, ip, password, timeout, || free_port(ip))
    }

    /// The port the server listens on.
    pub fn port(&self) -> u16 {
        self.addr.port()
    }

    /// The address and port the server listens on.
    pub fn addr(&self) -> SocketAddrV4 {
        self.addr
    }

    /// The server's process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// The server's busy CPU time so far (user + system, from
    /// `/proc/PID/stat`): what it cost to serve the benchmark, beside the
    /// ranks' own time.
    pub fn cpu_time(&self) -> Result<Duration> {
        // The process's CPU-time clock counts every thread in ns; /proc's
        // stat counts clock ticks (10 ms here), which a short phase never
        // reaches, so the servers' time went missing from CPU per op.
        let mut clock: libc::clockid_t = 0;
        // SAFETY: clock_getcpuclockid writes one clockid_t we own.
        let rc = unsafe { libc::clock_getcpuclockid(self.pid() as libc::pid_t, &mut clock) };
        ensure!(
            rc == 0,
            "{}: clock_getcpuclockid failed: {}",
            self.who(),
            std::io::Error::from_raw_os_error(rc)
        );
        let mut ts = libc::timespec {
            tv_sec: 0,
            tv_nsec: 0,
        };
        // SAFETY: clock_gettime writes one timespec we own.
        if unsafe { libc::clock_gettime(clock, &mut ts) } != 0 {
            let e = std::io::Error::last_os_error();
            anyhow::bail!("{}: reading its CPU-time clock: {e}", self.who());
        }
        Ok(Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32))
    }

    /// The server's busy CPU time from /proc/PID/stat (clock ticks): the
    /// cross-check of [`Server::cpu_time`] in tests.
    #[cfg(test)]
    fn cpu_ticks_time(&self) -> Result<Duration> {
        let path = format!("/proc/{}/stat", self.pid());
        let stat = fs::read_to_string(&path)
            .with_context(|| format!("{}: reading {path} for its CPU time", self.who()))?;
        let ticks =
            stat_cpu_ticks(&stat).with_context(|| format!("{}: parsing {path}", self.who()))?;
        // SAFETY: sysconf only reads a system constant; no memory is passed.
        let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
        ensure!(hz > 0, "sysconf(_SC_CLK_TCK) gave {hz}");
        let hz = hz as u64;
        Ok(Duration::from_secs(ticks / hz)
            + Duration::from_nanos((ticks % hz) * 1_000_000_000 / hz))
    }

    /// Whether the server is still running. If it has exited, the error
    /// gives its exit status and the last lines of its log.
    pub fn check_alive(&mut self) -> Result<()> {
        let status = self
            .child
            .try_wait()
            .with_context(|| format!("{}: checking whether it runs", self.who()))?;
        match status {
            None => Ok(()),
            Some(status) => Err(self.exited(status)),
        }
    }

    /// "redis-server on ADDRESS:PORT (pid N)", the prefix of every error
    /// about this server.
    fn who(&self) -> String {
        who(self.addr, Some(self.pid()))
    }

    /// The error for a server that exited with `status`.
    fn exited(&self, status: ExitStatus) -> anyhow::Error {
        anyhow!(
            "{} exited ({status}); its log ends: {}",
            self.who(),
            self.dir.log_tail()
        )
    }

    /// Waits until the server answers PING, it exits, or `deadline` passes.
    fn wait_ready(&mut self, deadline: Instant, timeout: Duration) -> Result<(), StartFailure> {
        let mut last = String::from("not asked yet");
        loop {
            match self.child.try_wait() {
                Ok(None) => {}
                Ok(Some(status)) => {
                    let err = self.exited(status);
                    let log = self.dir.log_tail();
                    return Err(if log.contains("Address already in use") {
                        StartFailure::PortTaken(err)
                    } else {
                        StartFailure::Other(err)
                    });
                }
                Err(e) => {
                    return Err(StartFailure::Other(anyhow!(
                        "{}: checking whether it runs: {e}",
                        self.who()
                    )))
                }
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err(StartFailure::Other(anyhow!(
                    "{}: no answer to PING within {timeout:?} (last try: {last}); its log ends: {}",
                    self.who(),
                    self.dir.log_tail()
                )));
            }
            // A ready server answers in microseconds; a try is cut short
            // so that a listener of another process, which takes the
            // connection but never answers, costs little before our server
            // is seen to have exited.
            match ping(self.addr, &self.password, left.min(PING_WAIT)) {
                // The server that answered is ours unless ours has exited
                // (another redis took the port in the moment between our
                // choosing it and our server binding it).
                Ok(()) if matches!(self.child.try_wait(), Ok(None)) => return Ok(()),
                Ok(()) => last = "answered, but not by our server".to_owned(),
                Err(e) => last = e.to_string(),
            }
            std::thread::sleep(NAP.min(deadline.saturating_duration_since(Instant::now())));
        }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        // SIGTERM only to a child not yet reaped: once reaped (it exited and
        // check_alive saw it), its pid may name another process.
        if let Ok(None) = self.child.try_wait() {
            // SIGTERM first: the server exits cleanly (with `save ''` it
            // writes nothing on the way out).
            // SAFETY: kill(2) touches no memory of ours. The child has not
            // been reaped (try_wait just said so), so its pid still names it.
            unsafe { libc::kill(self.child.id() as libc::pid_t, libc::SIGTERM) };
            let deadline = Instant::now() + STOP_GRACE;
            while Instant::now() < deadline {
                match self.child.try_wait() {
                    Ok(None) => std::thread::sleep(NAP),
                    _ => break,
                }
            }
        }
        // Still running after the grace time (or its state unknown):
        // SIGKILL cannot be refused, so the wait that reaps it ends as soon
        // as the kernel has torn it down. For a child already reaped, std
        // sends nothing and returns the saved status. Drop cannot report
        // errors; the directory is removed either way.
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Why one attempt to start a server failed.
#[derive(Debug)]
enum StartFailure {
    /// Another process bound the port first: worth another port.
    PortTaken(anyhow::Error),
    /// Anything else: another port would fail the same way.
    Other(anyhow::Error),
}

/// [`Server::start`] with the program and the source of ports given, so a
/// test can hand it a port that is taken.
fn start_with(
    program: &Path,
    ip: Ipv4Addr,
    password: &str,
    timeout: Duration,
    mut next_port: impl FnMut() -> Result<u16>,
) -> Result<Server> {
    ensure!(
        !timeout.is_zero(),
        "starting redis-server: the timeout must be more than zero"
    );
    let deadline = Instant::now() + timeout;
    let mut taken: Vec<u16> = Vec::new();
    let mut last = None;
    for _ in 0..PORT_TRIES {
        let port =
            next_port().with_context(|| format!("finding a free port of {ip} for redis-server"))?;
        let mut server = spawn(program, SocketAddrV4::new(ip, port), password)?;
        match server.wait_ready(deadline, timeout) {
            Ok(()) => return Ok(server),
            // The failed server has exited; dropping it removes its directory.
            Err(StartFailure::PortTaken(e)) => {
                if !taken.contains(&port) {
                    taken.push(port);
                }
                last = Some(e);
            }
            Err(StartFailure::Other(e)) => return Err(e),
        }
    }
    let ports: Vec<String> = taken.iter().map(|p| p.to_string()).collect();
    let last = last.map_or_else(String::new, |e| format!("; the last {e:#}"));
    Err(anyhow!(
        "starting redis-server: {PORT_TRIES} tries, and another process bound the port first each time ({ip} port {}){last}",
        ports.join(", ")
    ))
}

/// A password for the servers of one run: 128 random bits in hex. Every
/// rank's servers and clients must use the same one (the benchmark takes
/// rank 0's).
pub fn password(bits: [u64; 2]) -> String {
    format!("{:016x}{:016x}", bits[0], bits[1])
}

/// A port of `ip` that was free a moment ago: the kernel picks it for a
/// listener that is closed again at once. Another process may take it
/// before the server binds it; [`start_with`] retries then.
fn free_port(ip: Ipv4Addr) -> Result<u16> {
    let listener = TcpListener::bind((ip, 0))?;
    Ok(listener.local_addr()?.port())
}

/// Starts redis-server on `addr` in a new private directory, without
/// waiting for it. The password goes in a configuration file there (mode
/// 0600, in a directory only we can enter), not on the command line that
/// every user's `ps` shows.
fn spawn(program: &Path, addr: SocketAddrV4, password: &str) -> Result<Server> {
    let dir = PrivateDir::create()?;
    let stdio = fs::File::create(dir.path.join("stdio.log"))
        .with_context(|| format!("creating {}/stdio.log", dir.path.display()))?;
    let conf = dir.path.join("redis.conf");
    fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(&conf)
        .and_then(|mut f| writeln!(f, "requirepass {password}"))
        .with_context(|| format!("writing {}", conf.display()))?;
    let mut cmd = Command::new(program);
    cmd.arg(&conf)
        .arg("--port")
        .arg(addr.port().to_string())
        .arg("--bind")
        .arg(addr.ip().to_string())
        // No persistence: nothing is saved, on shutdown either.
        .args(["--save", ""])
        .args(["--appendonly", "no"])
        .arg("--dir")
        .arg(&dir.path)
        // Relative names, so a CONFIG SET of persistence would still write
        // only inside `--dir`.
        .args(["--dbfilename", "dump.rdb"])
        .args(["--appenddirname", "appendonly"])
        .args(["--daemonize", "no"])
        .args(["--pidfile", ""])
        .args(["--syslog-enabled", "no"])
        .args(["--supervised", "no"])
        .arg("--logfile")
        .arg(dir.path.join("redis.log"))
        .current_dir(&dir.path)
        .stdin(Stdio::null())
        // Anything printed before the log file opens (a bad argument).
        .stdout(Stdio::from(
            stdio.try_clone().context("duplicating stdio.log")?,
        ))
        .stderr(Stdio::from(stdio));
    // The server must not outlive fabkit, not even a SIGKILLed one:
    // PR_SET_PDEATHSIG has the kernel SIGKILL it when its parent goes.
    // "Parent" is the *thread* that spawned it: the benchmark runs ranks as
    // threads, and each rank thread starts its own server and keeps it for
    // its whole life, so the server ends with its rank, which is what we
    // want (a server started on a short-lived thread would die with it).
    let parent = std::process::id() as libc::pid_t;
    // SAFETY: the closure runs in the forked child before exec and calls
    // only prctl and getppid, both async-signal-safe; it allocates nothing
    // (the error is a raw errno) and touches no memory of the parent.
    unsafe {
        cmd.pre_exec(move || {
            // The argument is read as an unsigned long: pass one, not an int.
            if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL as libc::c_ulong) != 0 {
                return Err(io::Error::last_os_error());
            }
            // If fabkit died before prctl, the death signal will never come:
            // the child has already been handed to another parent.
            if libc::getppid() != parent {
                return Err(io::Error::from_raw_os_error(libc::ESRCH));
            }
            Ok(())
        });
    }
    let child = cmd.spawn().with_context(|| {
        format!(
            "starting {} on {addr} (in {})",
            program.display(),
            dir.path.display()
        )
    })?;
    Ok(Server {
        child,
        addr,
        password: password.to_owned(),
        dir,
    })
}

/// Authenticates with `password` and asks the server on `addr` for PING
/// over a connection of its own; `Ok` on `+OK` and `+PONG`. Every step is
/// bounded by `wait`.
fn ping(addr: SocketAddrV4, password: &str, wait: Duration) -> io::Result<()> {
    let wait = wait.max(Duration::from_millis(1));
    let addr = SocketAddr::V4(addr);
    let mut s = TcpStream::connect_timeout(&addr, wait)?;
    s.set_read_timeout(Some(wait))?;
    s.set_write_timeout(Some(wait))?;
    let auth = format!("*2\r\n$4\r\nAUTH\r\n${}\r\n{password}\r\n", password.len());
    s.write_all(auth.as_bytes())?;
    s.write_all(b"*1\r\n$4\r\nPING\r\n")?;
    // A server still loading answers `-LOADING ...`: not ready, ask again.
    let mut reply = [0u8; 12];
    s.read_exact(&mut reply)?;
    if &reply == b"+OK\r\n+PONG\r\n" {
        Ok(())
    } else {
        Err(io::Error::other(format!(
            "PING answered {:?}",
            String::from_utf8_lossy(&reply)
        )))
    }
}

/// A directory only this server uses, removed (with all in it) on drop.
#[derive(Debug)]
struct PrivateDir {
    path: PathBuf,
    /// `LOCK` inside, held (flock) while this fabkit lives: the kernel
    /// drops it when the process ends however it ends, so a later start
    /// can tell a dead run's directory from a live one's in any PID
    /// namespace or container that shares $TMPDIR.
    _lock: fs::File,
}

/// The lock file of a server directory.
const LOCK: &str = "LOCK";

/// Takes `file`'s flock exclusively, without waiting; whether it was free.
fn try_lock(file: &fs::File) -> bool {
    use std::os::fd::AsRawFd;
    // SAFETY: flock on a descriptor `file` owns; no memory is passed.
    unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) == 0 }
}

/// Removes the directories of servers whose fabkit was killed before it
/// could (the death signal ends the servers, but a SIGKILLed process
/// removes nothing): `fabkit-redis-PID-N` of this user whose `LOCK` is no
/// longer held. One without a lock file, or whose lock is held, is kept; a
/// failure to remove one is no reason not to start.
fn reap_stale(base: &Path) {
    use std::os::unix::fs::MetadataExt;
    let Ok(entries) = fs::read_dir(base) else {
        return;
    };
    // SAFETY: getuid has no preconditions.
    let me = unsafe { libc::getuid() };
    for e in entries.flatten() {
        let name = e.file_name();
        let Some(pid) = stale_pid(&name.to_string_lossy()) else {
            continue;
        };
        let Ok(meta) = fs::symlink_metadata(e.path()) else {
            continue;
        };
        if !meta.is_dir() || meta.uid() != me || pid == std::process::id() {
            continue;
        }
        // The lock is taken through a file that must not be a link.
        let lock = fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_NOFOLLOW)
            .open(e.path().join(LOCK));
        if lock.is_ok_and(|f| try_lock(&f)) {
            let _ = fs::remove_dir_all(e.path());
        }
    }
}

/// The PID in a server directory's name `fabkit-redis-PID-N`.
fn stale_pid(name: &str) -> Option<u32> {
    let (pid, n) = name.strip_prefix("fabkit-redis-")?.split_once('-')?;
    n.parse::<u64>().ok()?;
    pid.parse::<u32>().ok().filter(|p| *p > 0)
}

impl PrivateDir {
    /// Creates `$TMPDIR/fabkit-redis-PID-N`, readable by us alone. A name
    /// left by an earlier fabkit with the same pid (killed before it could
    /// clean up) is skipped, not reused.
    fn create() -> Result<PrivateDir> {
        static SEQ: AtomicU64 = AtomicU64::new(0);
        let base = std::env::temp_dir();
        reap_stale(&base);
        let mut last = None;
        for _ in 0..100 {
            let n = SEQ.fetch_add(1, Ordering::Relaxed);
            let path = base.join(format!("fabkit-redis-{}-{n}", std::process::id()));
            match fs::DirBuilder::new().mode(0o700).create(&path) {
                Ok(()) => {
                    let lock = fs::File::create(path.join(LOCK))
                        .with_context(|| format!("creating {}/{LOCK}", path.display()))?;
                    anyhow::ensure!(
                        try_lock(&lock),
                        "{}/{LOCK} is locked by another process",
                        path.display()
                    );
                    return Ok(PrivateDir { path, _lock: lock });
                }
                Err(e) if e.kind() == io::ErrorKind::AlreadyExists => last = Some(path),
                Err(e) => {
                    return Err(e).with_context(|| {
                        format!("creating a directory for redis-server: {}", path.display())
                    })
                }
            }
        }
        Err(anyhow!(
            "creating a directory for redis-server: 100 names in {} were taken (last {:?})",
            base.display(),
            last
        ))
    }

    /// The last lines of the server's log (and of what it printed before
    /// the log opened), on one line, without redis's pid and time stamps.
    fn log_tail(&self) -> String {
        let mut lines = Vec::new();
        for name in ["stdio.log", "redis.log"] {
            if let Ok(text) = fs::read_to_string(self.path.join(name)) {
                let all: Vec<&str> = text.lines().filter(|l| !l.trim().is_empty()).collect();
                let from = all.len().saturating_sub(LOG_LINES);
                lines.extend(
                    all[from..]
                        .iter()
                        .map(|l| shorten(log_message(l), LOG_LINE_CHARS)),
                );
            }
        }
        if lines.is_empty() {
            "(empty)".to_owned()
        } else {
            lines.join(" | ")
        }
    }
}

impl Drop for PrivateDir {
    fn drop(&mut self) {
        // Nothing to report to from a drop; a failure leaves a directory in
        // $TMPDIR, which `ls` shows by its name.
        let _ = fs::remove_dir_all(&self.path);
    }
}

/// The message of a redis log line: `8115:M 26 Nov 2026 11:36:59.050 # msg`
/// becomes `msg`; a line of another shape is kept whole.
fn log_message(line: &str) -> &str {
    let parts: Vec<&str> = line.splitn(7, ' ').collect();
    match parts.as_slice() {
        [role, _day, _month, _year, _time, level, msg]
            if role.contains(':') && level.len() == 1 =>
        {
            msg
        }
        _ => line,
    }
}

/// `text` cut to at most `max` characters, `...` marking a cut.
fn shorten(text: &str, max: usize) -> String {
    match text.char_indices().nth(max) {
        None => text.to_owned(),
        Some((end, _)) => format!("{}...", &text[..end]),
    }
}

/// utime + stime, in clock ticks, from the text of `/proc/PID/stat` (tests
/// cross-check the CPU-time clock with it). The command name (field 2) may
/// hold spaces and parentheses, so fields are counted from the last `)`.
#[cfg(test)]
fn stat_cpu_ticks(stat: &str) -> Result<u64> {
    let rest = &stat[stat.rfind(')').context("no `)` after the command name")? + 1..];
    // rest: " state ppid ... utime(14) stime(15) ...": state is field 3.
    let mut fields = rest.split_ascii_whitespace().skip(14 - 3);
    let mut next = |name: &str| -> Result<u64> {
        fields
            .next()
            .with_context(|| format!("no {name} field"))?
            .parse::<u64>()
            .with_context(|| format!("{name} is not a number"))
    };
    Ok(next("utime")? + next("stime")?)
}

/// The name every error about a server starts with.
fn who(addr: SocketAddrV4, pid: Option<u32>) -> String {
    match pid {
        Some(pid) => format!("redis-server on {addr} (pid {pid})"),
        None => format!("redis-server on {addr} (pid unknown)"),
    }
}

/// One rank's connections to every server, for the benchmark's batches.
///
/// Per batch the client reuses its command and index buffers; what it
/// still allocates is the redis crate's: the command's copy of the
/// arguments grows only the first time, but every reply is parsed into
/// fresh `Value`s (an array plus one `Vec<u8>` per value read), which the
/// sync API gives no way to parse in place.
pub struct Client {
    conns: Vec<Conn>,
    timeout: Duration,
    sent: u64,
    received: u64,
}

/// One server's connection and the buffers of the batch in flight.
struct Conn {
    addr: SocketAddrV4,
    /// From `INFO server` at connect, to name the server in errors.
    pid: Option<u32>,
    con: redis::Connection,
    /// The command being built, cleared (capacity kept) per batch.
    cmd: redis::Cmd,
    /// `cmd` packed as RESP, exactly the bytes sent.
    packed: Vec<u8>,
    /// Indices into the batch of the keys this server holds, in the order
    /// they appear in `cmd` (and so in its reply).
    idx: Vec<usize>,
    /// A request was sent whose reply has not been read yet.
    pending: bool,
    /// Why the connection can no longer be trusted, after a transport
    /// error: a send cut short leaves part of a command on the wire (what
    /// follows would be read as its rest), and a server that missed the
    /// timeout once is not timed again as if nothing had happened.
    broken: Option<String>,
}

impl fmt::Debug for Client {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // redis::Connection has no Debug; the servers are what matters.
        f.debug_struct("Client")
            .field(
                "servers",
                &self
                    .conns
                    .iter()
                    .map(|c| (c.addr, c.pid))
                    .collect::<Vec<_>>(),
            )
            .field("timeout", &self.timeout)
            .field("sent", &self.sent)
            .field("received", &self.received)
            .finish()
    }
}

impl Conn {
    fn who(&self) -> String {
        who(self.addr, self.pid)
    }

    /// The error for a failed request `op` to this server. A transport
    /// failure also marks the connection broken.
    fn failed(&mut self, op: &str, e: redis::RedisError, timeout: Duration) -> anyhow::Error {
        let err = self.describe(op, &e, timeout);
        if e.is_io_error() {
            self.broken = Some(format!("{op}: {e}"));
        }
        err
    }

    fn describe(&self, op: &str, e: &redis::RedisError, timeout: Duration) -> anyhow::Error {
        if e.is_timeout() {
            anyhow!("{}: {op}: no reply within {timeout:?}", self.who())
        } else if e.is_connection_dropped() || e.is_connection_refusal() {
            anyhow!(
                "{}: {op}: connection lost (did the server die?): {e}",
                self.who()
            )
        } else {
            anyhow!("{}: {op}: {e}", self.who())
        }
    }

    /// Starts a command `name`, keeping the buffers' capacity.
    fn begin(&mut self, name: &str) {
        self.cmd.clear();
        self.cmd.arg(name);
    }

    /// Packs the command built so far into `packed`.
    fn pack(&mut self) {
        self.packed.clear();
        self.cmd.write_packed_command(&mut self.packed);
    }
}

impl Client {
    /// Connects to the servers at `addrs`, in that order: a batch's server
    /// `s` is `addrs[s]`. `timeout` bounds the connect and, as read and
    /// write timeout, every later request on every connection.
    pub fn connect(addrs: &[SocketAddrV4], timeout: Duration, password: &str) -> Result<Client> {
        ensure!(!addrs.is_empty(), "connecting to redis: no servers given");
        // A zero timeout would mean "none" to the socket: refuse it.
        ensure!(
            !timeout.is_zero(),
            "connecting to redis: the timeout must be more than zero"
        );
        let mut conns = Vec::with_capacity(addrs.len());
        for &addr in addrs {
            conns.push(
                connect_one(addr, timeout, password)
                    .with_context(|| format!("{}: connecting", who(addr, None)))?,
            );
        }
        Ok(Client {
            conns,
            timeout,
            sent: 0,
            received: 0,
        })
    }

    /// Reads a batch: `keys[i]` lives on server `servers[i]` (an index into
    /// the ports given to [`Client::connect`]). One MGET goes to every
    /// server involved before any reply is read, so the servers work in
    /// parallel. A value found is copied into `out[i*vlen..(i+1)*vlen]` and
    /// `found[i]` set; for a key absent, `found[i]` is cleared.
    ///
    /// `out` must be `keys.len() * vlen` bytes and `found` `keys.len()`
    /// long. A value of another length than `vlen` is an error naming the
    /// key's index and its server. After an error `out` and `found` are
    /// partly written, but every reply has been read, so the client stays
    /// usable if its servers are.
    pub fn read_batch(
        &mut self,
        servers: &[u32],
        keys: &[&[u8]],
        vlen: usize,
        out: &mut [u8],
        found: &mut [bool],
    ) -> Result<()> {
        let n = keys.len();
        ensure!(
            servers.len() == n && found.len() == n && Some(out.len()) == n.checked_mul(vlen),
            "redis read_batch: {n} keys need {n} servers, {n} found flags and {n} x {vlen} B out, got {}, {} and {} B",
            servers.len(),
            found.len(),
            out.len()
        );
        self.group(servers)?;
        for c in &mut self.conns {
            if c.idx.is_empty() {
                continue;
            }
            c.begin("MGET");
            for &i in &c.idx {
                c.cmd.write_arg(keys[i]);
            }
            c.pack();
        }
        self.exchange("MGET", |c, reply| {
            let Value::Array(items) = reply else {
                return Err(unexpected(c, "MGET", &reply));
            };
            ensure!(
                items.len() == c.idx.len(),
                "{}: MGET of {} keys answered {} values",
                c.who(),
                c.idx.len(),
                items.len()
            );
            for (item, &i) in items.iter().zip(&c.idx) {
                match item {
                    Value::Nil => found[i] = false,
                    Value::BulkString(v) if v.len() == vlen => {
                        out[i * vlen..(i + 1) * vlen].copy_from_slice(v);
                        found[i] = true;
                    }
                    Value::BulkString(v) => bail!(
                        "{}: MGET: key {i} of the batch has a value of {} B, expected {vlen} B",
                        c.who(),
                        v.len()
                    ),
                    other => return Err(unexpected(c, "MGET (a value)", other)),
                }
            }
            Ok(())
        })
    }

    /// Writes a batch: `keys[i]` gets `values[i]` on server `servers[i]`.
    /// One MSET goes to every server involved before any reply is read;
    /// every reply is read even after an error.
    pub fn write_batch(&mut self, servers: &[u32], keys: &[&[u8]], values: &[&[u8]]) -> Result<()> {
        let n = keys.len();
        ensure!(
            servers.len() == n && values.len() == n,
            "redis write_batch: {n} keys need {n} servers and {n} values, got {} and {}",
            servers.len(),
            values.len()
        );
        self.group(servers)?;
        for c in &mut self.conns {
            if c.idx.is_empty() {
                continue;
            }
            c.begin("MSET");
            for &i in &c.idx {
                c.cmd.write_arg(keys[i]);
                c.cmd.write_arg(values[i]);
            }
            c.pack();
        }
        self.exchange("MSET", |c, reply| match reply {
            Value::Okay => Ok(()),
            other => Err(unexpected(c, "MSET", &other)),
        })
    }

    /// RESP bytes this client has sent and received since it connected
    /// (the connection handshake aside): requests exactly as packed,
    /// replies as the RESP2 encoding of what came back (exact for the
    /// replies its commands get), so the benchmark can report bytes on the
    /// wire per application byte. FLUSHALL and DBSIZE count too; take the
    /// difference around a phase.
    pub fn bytes(&self) -> (u64, u64) {
        (self.sent, self.received)
    }

    /// Empties every server (FLUSHALL), between benchmark repetitions.
    pub fn flush_all(&mut self) -> Result<()> {
        for c in &mut self.conns {
            c.begin("FLUSHALL");
            c.pack();
        }
        self.exchange("FLUSHALL", |c, reply| match reply {
            Value::Okay => Ok(()),
            other => Err(unexpected(c, "FLUSHALL", &other)),
        })
    }

    /// The number of keys on all servers together (DBSIZE summed), for
    /// tests and checks.
    #[cfg(test)]
    pub fn dbsize(&mut self) -> Result<u64> {
        for c in &mut self.conns {
            c.begin("DBSIZE");
            c.pack();
        }
        let mut sum = 0u64;
        self.exchange("DBSIZE", |c, reply| match reply {
            Value::Int(k) if k >= 0 => {
                sum += k as u64;
                Ok(())
            }
            other => Err(unexpected(c, "DBSIZE", &other)),
        })?;
        Ok(sum)
    }

    /// Fills each connection's `idx` with the batch positions of its keys;
    /// `packed` is emptied, so only servers given keys take part in the
    /// next [`Client::exchange`].
    fn group(&mut self, servers: &[u32]) -> Result<()> {
        for c in &mut self.conns {
            c.idx.clear();
            c.packed.clear();
        }
        let count = self.conns.len();
        for (i, &s) in servers.iter().enumerate() {
            let c = self.conns.get_mut(s as usize).with_context(|| {
                format!("redis batch: key {i} is placed on server {s}, but there are {count}")
            })?;
            c.idx.push(i);
        }
        Ok(())
    }

    /// Sends every connection's `packed` request (the empty ones are not
    /// involved), then reads one reply from each server sent to, handing
    /// it to `take`. Every reply is read even after an error, so no reply
    /// is left behind to be mistaken for the next request's; the first
    /// error is returned.
    fn exchange(
        &mut self,
        op: &str,
        mut take: impl FnMut(&Conn, Value) -> Result<()>,
    ) -> Result<()> {
        // Refused before anything is sent, so no server is left with a
        // request whose reply nobody reads.
        if let Some(c) = self
            .conns
            .iter()
            .find(|c| !c.packed.is_empty() && c.broken.is_some())
        {
            bail!(
                "{}: {op}: not sent, the connection failed earlier ({})",
                c.who(),
                c.broken.as_deref().unwrap_or_default()
            );
        }
        let mut first: Option<anyhow::Error> = None;
        for c in &mut self.conns {
            if c.packed.is_empty() {
                continue;
            }
            match c.con.send_packed_command(&c.packed) {
                Ok(()) => {
                    self.sent += c.packed.len() as u64;
                    c.pending = true;
                }
                Err(e) => {
                    // The servers already sent to still answer: read them
                    // below, but send no more.
                    first = Some(c.failed(&format!("sending {op}"), e, self.timeout));
                    break;
                }
            }
        }
        for c in &mut self.conns {
            if !c.pending {
                continue;
            }
            c.pending = false;
            let reply = match c.con.recv_response() {
                Ok(reply) => reply,
                Err(e) => {
                    // `failed` marks the connection broken; the other
                    // servers' replies are still read.
                    let e = c.failed(&format!("reading the reply to {op}"), e, self.timeout);
                    first.get_or_insert(e);
                    continue;
                }
            };
            self.received += resp_len(&reply);
            if first.is_some() {
                continue;
            }
            if let Value::ServerError(e) = &reply {
                first = Some(anyhow!("{}: {op}: the server answered {e}", c.who()));
                continue;
            }
            if let Err(e) = take(c, reply) {
                first = Some(e);
            }
        }
        first.map_or(Ok(()), Err)
    }
}

/// Opens one connection: Nagle off (a batch is one write, which must not
/// wait for the previous one's ACK), no CLIENT SETINFO (redis 7.0 does not
/// know it), read and write timeouts set (the crate clears them after
/// connecting), and the server's pid asked for, to name it in errors.
fn connect_one(addr: SocketAddrV4, timeout: Duration, password: &str) -> Result<Conn> {
    let info = redis::ConnectionAddr::Tcp(addr.ip().to_string(), addr.port())
        .into_connection_info()?
        .set_tcp_settings(redis::io::tcp::TcpSettings::default().set_nodelay(true))
        .set_redis_settings(
            redis::RedisConnectionInfo::default()
                .set_skip_set_lib_name()
                .set_password(password),
        );
    let mut con = redis::Client::open(info)?.get_connection_with_timeout(timeout)?;
    con.set_read_timeout(Some(timeout))?;
    con.set_write_timeout(Some(timeout))?;
    let info = con.req_command(redis::cmd("INFO").arg("server"))?;
    let pid = match &info {
        Value::BulkString(text) => info_pid(text),
        _ => None,
    };
    Ok(Conn {
        addr,
        pid,
        con,
        cmd: redis::Cmd::new(),
        packed: Vec::new(),
        idx: Vec::new(),
        pending: false,
        broken: None,
    })
}

/// `process_id` from the text of `INFO server`.
fn info_pid(text: &[u8]) -> Option<u32> {
    String::from_utf8_lossy(text)
        .lines()
        .find_map(|l| l.strip_prefix("process_id:"))
        .and_then(|v| v.trim().parse().ok())
}

/// The error for a reply of the wrong shape.
fn unexpected(c: &Conn, op: &str, reply: &Value) -> anyhow::Error {
    let shown = shorten(&format!("{reply:?}"), 120);
    anyhow!("{}: {op}: unexpected reply {shown}", c.who())
}

/// Decimal digits of `n`.
fn digits(mut n: u64) -> u64 {
    let mut d = 1;
    while n >= 10 {
        n /= 10;
        d += 1;
    }
    d
}

/// The length of `v` in RESP2, as a server sends it: `*N\r\n` then the
/// items, `$L\r\n` + L bytes + `\r\n`, `$-1\r\n` for nil, `:N\r\n`,
/// `+S\r\n`, `-ERR ...\r\n`. The RESP3-only kinds this client never asks
/// for are counted by their text.
fn resp_len(v: &Value) -> u64 {
    let int = |k: i64| 1 + u64::from(k < 0) + digits(k.unsigned_abs()) + 2;
    let bulk = |len: usize| 1 + digits(len as u64) + 2 + len as u64 + 2;
    let array = |n: usize| 1 + digits(n as u64) + 2;
    match v {
        Value::Nil => 5,
        Value::Int(k) => int(*k),
        Value::BulkString(b) => bulk(b.len()),
        Value::Array(items) | Value::Set(items) => {
            array(items.len()) + items.iter().map(resp_len).sum::<u64>()
        }
        Value::Push { data, .. } => array(data.len()) + data.iter().map(resp_len).sum::<u64>(),
        Value::Map(pairs) => {
            array(pairs.len())
                + pairs
                    .iter()
                    .map(|(k, v)| resp_len(k) + resp_len(v))
                    .sum::<u64>()
        }
        Value::Attribute { data, .. } => resp_len(data),
        Value::SimpleString(s) => 1 + s.len() as u64 + 2,
        Value::Okay => 5,
        Value::ServerError(e) => {
            let detail = e.details().map_or(0, |d| 1 + d.len() as u64);
            1 + e.code().len() as u64 + detail + 2
        }
        Value::Double(x) => 1 + x.to_string().len() as u64 + 2,
        Value::Boolean(_) => 4,
        Value::VerbatimString { text, .. } => bulk(text.len() + 4),
        Value::BigNumber(n) => 1 + format!("{n:?}").len() as u64 + 2,
        // Value is non-exhaustive: a kind added later counts as its text.
        #[allow(unreachable_patterns)]
        other => 1 + format!("{other:?}").len() as u64 + 2,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_start_reaps_the_directories_killed_runs_left_and_keeps_live_ones() {
        use std::io::BufRead;
        let base = tempfile::tempdir().unwrap();
        let dir = |name: &str, lock: bool| {
            let d = base.path().join(name);
            fs::create_dir(&d).unwrap();
            fs::write(d.join("redis.log"), "x").unwrap();
            if lock {
                fs::File::create(d.join(LOCK)).unwrap();
            }
            d
        };
        // A dead run's: its lock file is there and nobody holds it.
        let stale = dir("fabkit-redis-999999-0", true);
        // A live run's, held by another process (one in another PID
        // namespace alike): flock(1) says so once it holds the lock.
        let live = dir("fabkit-redis-999998-0", true);
        let mut holder = std::process::Command::new("flock")
            .arg(live.join(LOCK))
            .args(["-c", "echo held; cat"])
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let mut line = String::new();
        io::BufReader::new(holder.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        assert_eq!(line, "held\n");
        // Without a lock file, or a name not ours: kept.
        let unlocked = dir("fabkit-redis-999997-0", false);
        let other = dir("fabkit-redis-999999-x", true);
        reap_stale(base.path());
        assert!(!stale.exists(), "a dead run's directory is removed");
        assert!(live.exists(), "a live run's directory is kept");
        assert!(unlocked.exists(), "a directory without a lock is kept");
        assert!(other.exists(), "a name not ours to judge is kept");
        drop(holder.stdin.take());
        holder.wait().unwrap();
        assert_eq!(stale_pid("fabkit-redis-12-3"), Some(12));
        assert_eq!(stale_pid("fabkit-redis-0-3"), None);
        assert_eq!(stale_pid("fabkit-redis-12"), None);
    }

    const TIMEOUT: Duration = Duration::from_secs(5);
    const PW: &str = "0123456789abcdef0123456789abcdef";

    /// The installed redis-server, or None after printing why the test
    /// is skipped.
    fn installed() -> Option<PathBuf> {
        let p = available();
        if p.is_none() {
            println!("SKIPPED: redis-server not installed");
        }
        p
    }

    fn key(i: usize) -> Vec<u8> {
        format!("key-{i:04}").into_bytes()
    }

    fn value(i: usize, len: usize) -> Vec<u8> {
        (0..len).map(|j| (i * 31 + j) as u8).collect()
    }

    #[test]
    fn redis_write_then_read_over_two_servers() {
        if installed().is_none() {
            return;
        }
        let a = Server::start(Ipv4Addr::LOCALHOST, TIMEOUT, PW).unwrap();
        let b = Server::start(Ipv4Addr::LOCALHOST, TIMEOUT, PW).unwrap();
        assert_ne!(a.port(), b.port());
        // Only a client that knows the run's password gets in, nor does a
        // readiness check without it.
        let wrong = Client::connect(&[a.addr()], TIMEOUT, "not-the-password").unwrap_err();
        let msg = format!("{wrong:#}");
        assert!(msg.contains(&a.addr().to_string()), "{msg}");
        assert!(ping(a.addr(), "not-the-password", TIMEOUT).is_err());
        let mut client = Client::connect(&[a.addr(), b.addr()], TIMEOUT, PW).unwrap();

        let (n, vlen) = (10, 104);
        let keys: Vec<Vec<u8>> = (0..n).map(key).collect();
        let values: Vec<Vec<u8>> = (0..n).map(|i| value(i, vlen)).collect();
        let servers: Vec<u32> = (0..n as u32).map(|i| i % 2).collect();
        let key_refs: Vec<&[u8]> = keys.iter().map(|k| k.as_slice()).collect();
        let value_refs: Vec<&[u8]> = values.iter().map(|v| v.as_slice()).collect();
        client
            .write_batch(&servers, &key_refs, &value_refs)
            .unwrap();
        assert_eq!(client.dbsize().unwrap(), n as u64);
        let (sent, _) = client.bytes();
        let payload: usize = keys.iter().chain(&values).map(|b| b.len()).sum();
        assert!(sent >= payload as u64, "sent {sent} < {payload}");

        // All written keys plus as many absent ones, interleaved, each
        // asked of the server it was written to.
        let absent: Vec<Vec<u8>> = (n..2 * n).map(key).collect();
        let mut ask: Vec<&[u8]> = Vec::new();
        let mut on: Vec<u32> = Vec::new();
        for i in 0..n {
            ask.push(&keys[i]);
            on.push(servers[i]);
            ask.push(&absent[i]);
            on.push((i % 2) as u32);
        }
        let before = client.bytes();
        let mut out = vec![0u8; ask.len() * vlen];
        let mut found = vec![true; ask.len()];
        client
            .read_batch(&on, &ask, vlen, &mut out, &mut found)
            .unwrap();
        for i in 0..n {
            assert!(found[2 * i], "key {i} not found");
            assert_eq!(&out[2 * i * vlen..(2 * i + 1) * vlen], &values[i][..]);
            assert!(!found[2 * i + 1], "absent key {i} found");
        }
        let after = client.bytes();
        let read_payload: u64 = ask.iter().map(|k| k.len() as u64).sum();
        assert!(after.0 - before.0 >= read_payload);
        assert!(after.1 - before.1 >= (n * vlen) as u64);

        // Each key went to its own server only.
        let mut only_a = Client::connect(&[a.addr()], TIMEOUT, PW).unwrap();
        assert_eq!(only_a.dbsize().unwrap(), n as u64 / 2);

        // A batch of one takes the same path.
        let mut one = vec![0u8; vlen];
        let mut hit = [false];
        client
            .read_batch(&[1], &[&keys[1]], vlen, &mut one, &mut hit)
            .unwrap();
        assert!(hit[0]);
        assert_eq!(one, values[1]);

        client.flush_all().unwrap();
        assert_eq!(client.dbsize().unwrap(), 0);
        // The ns clock agrees with /proc's ticks to a tick (10 ms at 100 Hz)
        // and has seen the server work at all.
        let (ns, ticks) = (a.cpu_time().unwrap(), a.cpu_ticks_time().unwrap());
        assert!(ns > Duration::ZERO, "{ns:?}");
        assert!(
            ns + Duration::from_millis(20) >= ticks,
            "{ns:?} vs {ticks:?}"
        );
        assert!(
            ticks + Duration::from_millis(20) >= ns,
            "{ns:?} vs {ticks:?}"
        );
    }

    #[test]
    fn redis_server_killed_mid_run_is_an_error_naming_it() {
        if installed().is_none() {
            return;
        }
        let timeout = Duration::from_secs(2);
        let a = Server::start(Ipv4Addr::LOCALHOST, timeout, PW).unwrap();
        let mut b = Server::start(Ipv4Addr::LOCALHOST, timeout, PW).unwrap();
        let mut client = Client::connect(&[a.addr(), b.addr()], timeout, PW).unwrap();
        let keys: [&[u8]; 2] = [b"k0", b"k1"];
        client.write_batch(&[0, 1], &keys, &[b"v0", b"v1"]).unwrap();

        // SAFETY: kill(2) touches no memory; b's child is not reaped yet,
        // so the pid still names it.
        let rc = unsafe { libc::kill(b.pid() as libc::pid_t, libc::SIGKILL) };
        assert_eq!(rc, 0);
        let start = Instant::now();
        let mut out = [0u8; 4];
        let mut found = [false; 2];
        let err = client
            .read_batch(&[0, 1], &keys, 2, &mut out, &mut found)
            .unwrap_err();
        let msg = format!("{err:#}");
        assert!(start.elapsed() < timeout + Duration::from_secs(1));
        assert!(
            msg.contains(&format!("127.0.0.1:{} (pid {})", b.port(), b.pid())),
            "{msg}"
        );
        assert!(msg.contains("MGET"), "{msg}");

        // The owner sees it exited, by SIGKILL.
        let deadline = Instant::now() + timeout;
        let exited = loop {
            match b.check_alive() {
                Err(e) => break format!("{e:#}"),
                Ok(()) if Instant::now() < deadline => std::thread::sleep(NAP),
                Ok(()) => panic!("server killed but still running"),
            }
        };
        assert!(
            exited.contains("exited") && exited.contains("SIGKILL"),
            "{exited}"
        );
    }

    #[test]
    fn redis_silent_server_is_an_error_within_the_timeout() {
        if installed().is_none() {
            return;
        }
        let timeout = Duration::from_millis(300);
        let mut s = Server::start(Ipv4Addr::LOCALHOST, TIMEOUT, PW).unwrap();
        let mut client = Client::connect(&[s.addr()], timeout, PW).unwrap();
        let pid = s.pid() as libc::pid_t;
        // SAFETY: kill(2) touches no memory; the child is not reaped, so
        // the pid still names it.
        assert_eq!(unsafe { libc::kill(pid, libc::SIGSTOP) }, 0);
        let start = Instant::now();
        let mut out = [0u8; 1];
        let mut found = [false];
        let err = client
            .read_batch(&[0], &[b"k"], 1, &mut out, &mut found)
            .unwrap_err();
        let elapsed = start.elapsed();
        // SAFETY: as above; a stopped child is not reaped either.
        assert_eq!(unsafe { libc::kill(pid, libc::SIGCONT) }, 0);
        let msg = format!("{err:#}");
        assert!(elapsed >= timeout && elapsed < timeout * 3, "{elapsed:?}");
        assert!(msg.contains(&format!("127.0.0.1:{}", s.port())), "{msg}");
        assert!(msg.contains("no reply within 300ms"), "{msg}");
        s.check_alive().unwrap();

        // The connection is not trusted again: the next batch is refused
        // before anything is sent, naming the earlier failure.
        let err = client
            .read_batch(&[0], &[b"k"], 1, &mut out, &mut found)
            .unwrap_err();
        let msg = format!("{err:#}");
        assert!(
            msg.contains("failed earlier (reading the reply to MGET"),
            "{msg}"
        );
    }

    #[test]
    fn redis_drop_leaves_no_process_and_no_directory() {
        if installed().is_none() {
            return;
        }
        let mut s = Server::start(Ipv4Addr::LOCALHOST, TIMEOUT, PW).unwrap();
        s.check_alive().unwrap();
        let (pid, dir) = (s.pid(), s.dir.path.clone());
        assert!(dir.join("redis.log").exists());
        drop(s);
        assert!(!Path::new(&format!("/proc/{pid}")).exists());
        assert!(!dir.exists());
    }

    #[test]
    fn redis_server_dies_with_the_thread_that_started_it() {
        if installed().is_none() {
            return;
        }
        // The server is leaked by its thread (no Drop runs), as if fabkit
        // had been killed: the kernel's death signal must end it.
        let (pid, dir) = std::thread::spawn(|| {
            let s = Server::start(Ipv4Addr::LOCALHOST, TIMEOUT, PW).unwrap();
            let got = (s.pid(), s.dir.path.clone());
            std::mem::forget(s);
            got
        })
        .join()
        .unwrap();
        let deadline = Instant::now() + TIMEOUT;
        let mut status = 0;
        loop {
            // SAFETY: waitpid writes only `status`, a live local; the pid
            // is our own unreaped child (the leaked Child never waits).
            let r = unsafe { libc::waitpid(pid as libc::pid_t, &mut status, libc::WNOHANG) };
            if r == pid as libc::pid_t {
                break;
            }
            assert_eq!(r, 0, "waitpid: {}", io::Error::last_os_error());
            assert!(Instant::now() < deadline, "server outlived its thread");
            std::thread::sleep(NAP);
        }
        fs::remove_dir_all(&dir).unwrap();
        assert!(libc::WIFSIGNALED(status) && libc::WTERMSIG(status) == libc::SIGKILL);
    }

    #[test]
    fn redis_port_in_use_is_skipped() {
        let Some(program) = installed() else {
            return;
        };
        let held = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).unwrap();
        let taken = held.local_addr().unwrap().port();
        let mut tries = 0;
        let lo = Ipv4Addr::LOCALHOST;
        let s = start_with(&program, lo, PW, TIMEOUT, || {
            tries += 1;
            if tries == 1 {
                Ok(taken)
            } else {
                free_port(lo)
            }
        })
        .unwrap();
        assert_eq!(tries, 2);
        assert_ne!(s.port(), taken);
        ping(s.addr(), PW, TIMEOUT).unwrap();

        // Only taken ports: one error naming them, after a few tries.
        let err = start_with(&program, lo, PW, TIMEOUT, || Ok(taken)).unwrap_err();
        let msg = format!("{err:#}");
        assert!(msg.contains(&format!("127.0.0.1 port {taken})")), "{msg}");
        assert!(msg.contains(&format!("127.0.0.1:{taken}")), "{msg}");
        assert!(msg.contains("exited (exit status: 1)"), "{msg}");
        assert!(msg.contains("Address already in use"), "{msg}");
    }

    #[test]
    fn redis_value_of_wrong_length_is_an_error() {
        if installed().is_none() {
            return;
        }
        let a = Server::start(Ipv4Addr::LOCALHOST, TIMEOUT, PW).unwrap();
        let b = Server::start(Ipv4Addr::LOCALHOST, TIMEOUT, PW).unwrap();
        let mut client = Client::connect(&[a.addr(), b.addr()], TIMEOUT, PW).unwrap();
        let keys: [&[u8]; 2] = [b"short", b"right"];
        client
            .write_batch(&[0, 1], &keys, &[b"123", b"12345678"])
            .unwrap();
        let mut out = [0u8; 16];
        let mut found = [false; 2];
        let err = client
            .read_batch(&[0, 1], &keys, 8, &mut out, &mut found)
            .unwrap_err();
        let msg = format!("{err:#}");
        assert!(msg.contains("key 0"), "{msg}");
        assert!(msg.contains(&format!("127.0.0.1:{}", a.port())), "{msg}");
        assert!(msg.contains("3 B"), "{msg}");

        // Both replies were read: the next batch gets its own answers.
        let mut one = [0u8; 8];
        let mut hit = [false];
        client
            .read_batch(&[1], &keys[1..], 8, &mut one, &mut hit)
            .unwrap();
        assert!(hit[0]);
        assert_eq!(&one, b"12345678");
    }

    #[test]
    fn redis_bad_batches_are_errors() {
        if installed().is_none() {
            return;
        }
        let a = Server::start(Ipv4Addr::LOCALHOST, TIMEOUT, PW).unwrap();
        let mut client = Client::connect(&[a.addr()], TIMEOUT, PW).unwrap();
        let mut out = [0u8; 4];
        let mut found = [false];
        // A server index past the end, and buffers of the wrong size.
        assert!(client
            .read_batch(&[1], &[b"k"], 4, &mut out, &mut found)
            .is_err());
        assert!(client
            .read_batch(&[0], &[b"k"], 3, &mut out, &mut found)
            .is_err());
        assert!(client.write_batch(&[0], &[b"k"], &[]).is_err());
        // Nothing was left half-sent.
        assert_eq!(client.dbsize().unwrap(), 0);
    }

    #[test]
    fn redis_lookup_and_log_parsing() {
        assert_eq!(
            find_program(OsStr::new("/nonexistent:/also/not"), PROGRAM),
            None
        );
        let e = anyhow::Error::from(NotInstalled);
        assert!(e.is::<NotInstalled>());
        assert_eq!(e.to_string(), INSTALL_HINT);

        assert_eq!(
            log_message(
                "8115:M 26 Nov 2026 11:36:59.050 # Failed listening on port 1 (TCP), aborting."
            ),
            "Failed listening on port 1 (TCP), aborting."
        );
        assert_eq!(
            log_message("*** FATAL CONFIG FILE ERROR ***"),
            "*** FATAL CONFIG FILE ERROR ***"
        );
        assert_eq!(shorten("abcdef", 3), "abc...");
        assert_eq!(shorten("abc", 3), "abc");
        assert_eq!(shorten("äöüß", 2), "äö...");

        let stat = "42 (redis (x) y) S 1 2 3 4 5 6 7 8 9 10 17 25 0 0";
        assert_eq!(stat_cpu_ticks(stat).unwrap(), 42);
        assert!(stat_cpu_ticks("42 (x) S 1").is_err());
    }

    #[test]
    fn redis_reply_sizes_and_info() {
        assert_eq!(
            info_pid(b"# Server\r\nredis_version:7.0.15\r\nprocess_id:812\r\n"),
            Some(812)
        );

        // Sizes against the RESP the server really sends.
        let cases: &[(&[u8], Value)] = &[
            (b"+OK\r\n", Value::Okay),
            (b"$-1\r\n", Value::Nil),
            (b":-12\r\n", Value::Int(-12)),
            (b"$3\r\nabc\r\n", Value::BulkString(b"abc".to_vec())),
            (
                b"*2\r\n$10\r\n0123456789\r\n$-1\r\n",
                Value::Array(vec![Value::BulkString(b"0123456789".to_vec()), Value::Nil]),
            ),
        ];
        for (wire, v) in cases {
            assert_eq!(resp_len(v), wire.len() as u64, "{v:?}");
            assert_eq!(&redis::parse_redis_value(wire).unwrap(), v);
        }
        let err = redis::parse_redis_value(b"-ERR unknown command\r\n").unwrap();
        assert_eq!(resp_len(&err), "-ERR unknown command\r\n".len() as u64);
    }
}
