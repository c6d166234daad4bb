//! One `redis-server` process of the benchmark's own: started on a free
//! port with a password and no persistence, asked for PING until ready,
//! its CPU time read, and stopped (SIGTERM, then SIGKILL) when dropped.

use std::ffi::OsStr;
use std::fmt;
use std::fs;
use std::io::{self, Write as _};
use std::net::{Ipv4Addr, SocketAddrV4, TcpListener};
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use anyhow::{anyhow, ensure, Context, Result};

use super::client::connection;
use super::dir::PrivateDir;
use super::who;

/// What the caller prints, as its one line, when `redis-server` is missing.
pub const INSTALL_HINT: &str = "redis-server not found: install it (apt-get install redis-server) to benchmark Redis beside the DHT";

/// The program [`available`] looks for on `PATH`.
pub(super) const PROGRAM: &str = "redis-server";

/// Ports [`Server::start`] tries when the one it chose is taken before the
/// server binds it (another process raced us to it). Each try costs a few
/// milliseconds; five taken in a row means something else is wrong.
const PORT_TRIES: usize = 5;

/// How long a starting server is left before it is asked again, and how
/// often a stopping one is checked: short against a start of ~10 ms, long
/// enough not to spin.
pub(super) const NAP: Duration = Duration::from_millis(10);

/// How long one readiness PING may take.
const PING_WAIT: Duration = Duration::from_millis(100);

/// How long a server gets to end on SIGTERM before it is killed.
const STOP_GRACE: Duration = Duration::from_secs(2);

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
pub(super) fn find_program(path: &OsStr, name: &str) -> Option<PathBuf> {
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
    pub(super) dir: PrivateDir,
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
    pub(super) fn cpu_ticks_time(&self) -> Result<Duration> {
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
pub(super) fn start_with(
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
pub(super) fn free_port(ip: Ipv4Addr) -> Result<u16> {
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

/// Asks the server on `addr` for PING over a connection of its own,
/// authenticated with `password`; `Ok` on `PONG`. A server still loading
/// answers `-LOADING ...`, an error: not ready, ask again. Every step is
/// bounded by `wait`.
pub(super) fn ping(addr: SocketAddrV4, password: &str, wait: Duration) -> redis::RedisResult<()> {
    let mut con = connection(addr, password, wait.max(Duration::from_millis(1)))?;
    let reply: String = redis::cmd("PING").query(&mut con)?;
    if reply == "PONG" {
        Ok(())
    } else {
        Err(redis::RedisError::from((
            redis::ErrorKind::UnexpectedReturnType,
            "PING answered",
            reply,
        )))
    }
}

/// utime + stime, in clock ticks, from the text of `/proc/PID/stat` (tests
/// cross-check the CPU-time clock with it). The command name (field 2) may
/// hold spaces and parentheses, so fields are counted from the last `)`.
#[cfg(test)]
pub(super) fn stat_cpu_ticks(stat: &str) -> Result<u64> {
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
