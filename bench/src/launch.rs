//! Running one closure per rank, in-process or under an MPI launcher, and
//! gathering every rank's result on the reporting rank.

use std::time::Duration;

/// A command-line mistake (exit status 2), formatted like `anyhow!`.
macro_rules! usage {
    ($($t:tt)*) => {
        crate::exit::usage(format!($($t)*))
    };
}

use anyhow::{anyhow, Context, Result};
use fabkit_core::bootstrap::{launched_by_mpi, Bootstrap, FileBootstrap, ThreadGroup};
use fabkit_core::provenance::{Launcher, Provenance};
use fabkit_netns::cleanup::{child_takes_terminating, HeldTerminating};
use serde::de::DeserializeOwned;
use serde::Serialize;

/// How ranks are started. Create one per process: under MPI it owns the
/// MPI environment (initialised once, finalised on drop).
#[derive(Debug)]
pub enum Launch {
    /// `n` ranks as threads of this process (the default without a launcher).
    Threads(usize),
    /// This process is one rank of a job started by mpirun/srun.
    #[cfg(feature = "mpi")]
    Mpi(fabkit_mpi::MpiBootstrap),
    /// This process is one rank started by `fabkit launch` (a shared
    /// directory, no MPI): see [`ENV_DIR`].
    Files(FileBootstrap),
}

/// Set by `fabkit launch` for each rank it starts: the shared directory,
/// the rank, the job size and the bootstrap timeout in seconds.
pub const ENV_DIR: &str = "FABKIT_BOOT_DIR";
/// See [`ENV_DIR`].
pub const ENV_RANK: &str = "FABKIT_RANK";
/// See [`ENV_DIR`].
pub const ENV_SIZE: &str = "FABKIT_SIZE";
/// See [`ENV_DIR`].
pub const ENV_TIMEOUT: &str = "FABKIT_BOOT_TIMEOUT";
/// The network namespaces `fabkit launch` started the ranks in, one per
/// rank in rank order, comma-separated: what reports say of the hosts.
pub const ENV_NETNS: &str = "FABKIT_LAUNCH_NETNS";

/// " in network namespaces a,a,b,b" when `fabkit launch` said where the
/// ranks run, else nothing.
fn where_launched() -> String {
    std::env::var(ENV_NETNS)
        .ok()
        .filter(|v| !v.is_empty() && v.len() <= 4096)
        .map_or_else(String::new, |v| format!(" in network namespaces {v}"))
}

fn env_num<T: std::str::FromStr>(name: &str) -> Result<T> {
    let v = std::env::var(name).with_context(|| format!("{ENV_DIR} is set but {name} is not"))?;
    v.parse().map_err(|_| anyhow!("{name}={v} is not a number"))
}

impl Launch {
    /// MPI when started by a launcher, else `n` threads.
    pub fn detect(n: usize) -> Result<Launch> {
        Launch::detect_threads(n, false)
    }

    /// [`Launch::detect`], asking MPI (if it is the launcher) for
    /// `MPI_THREAD_MULTIPLE` where `multiple`: tables that may take the
    /// message path serve requests from a thread of their own.
    pub fn detect_threads(n: usize, multiple: bool) -> Result<Launch> {
        if let Some(dir) = std::env::var_os(ENV_DIR) {
            let secs: String = env_num(ENV_TIMEOUT)?;
            let timeout =
                crate::flags::secs(&secs).map_err(|e| anyhow!("{ENV_TIMEOUT}={secs}: {e}"))?;
            let boot = FileBootstrap::new(dir, env_num(ENV_RANK)?, env_num(ENV_SIZE)?, timeout)?;
            return Ok(Launch::Files(boot));
        }
        if !launched_by_mpi() {
            return Ok(Launch::Threads(n));
        }
        #[cfg(feature = "mpi")]
        {
            let boot =
                fabkit_mpi::MpiBootstrap::init_threads(fabkit_mpi::DEFAULT_TIMEOUT, multiple)
                    .context("initialising MPI")?;
            Ok(Launch::Mpi(boot))
        }
        #[cfg(not(feature = "mpi"))]
        let _ = multiple;
        #[cfg(not(feature = "mpi"))]
        Err(anyhow!(
            "started by an MPI launcher, but this fabkit was built without the `mpi` feature"
        ))
    }

    /// Ranks in the job, and how many of them run in this process.
    pub fn ranks(&self) -> (usize, usize) {
        match self {
            Launch::Threads(n) => (*n, *n),
            #[cfg(feature = "mpi")]
            Launch::Mpi(boot) => (boot.size(), 1),
            Launch::Files(boot) => (boot.size(), 1),
        }
    }

    /// Whether this process reports the job's results (rank 0, or every
    /// rank in-process).
    pub fn reports(&self) -> bool {
        match self {
            Launch::Threads(_) => true,
            #[cfg(feature = "mpi")]
            Launch::Mpi(boot) => boot.rank() == 0,
            Launch::Files(boot) => boot.rank() == 0,
        }
    }

    /// A short description for reports.
    pub fn describe(&self, ranks: usize) -> String {
        match self {
            Launch::Threads(_) => format!("{ranks} ranks in-process (threads)"),
            #[cfg(feature = "mpi")]
            Launch::Mpi(_) => format!("{ranks} ranks under an MPI launcher{}", where_launched()),
            Launch::Files(_) => {
                format!(
                    "{ranks} ranks as processes (fabkit launch){}",
                    where_launched()
                )
            }
        }
    }

    /// How the ranks were started, as a value.
    pub fn launcher(&self) -> Launcher {
        match self {
            Launch::Threads(_) => Launcher::Threads,
            #[cfg(feature = "mpi")]
            Launch::Mpi(_) => Launcher::Mpi,
            Launch::Files(_) => Launcher::Processes,
        }
    }

    /// The provenance of a report of this job's `ranks` ranks: this
    /// process's, with how the ranks were started in words ([`describe`])
    /// and as a value ([`launcher`]).
    ///
    /// [`describe`]: Launch::describe
    /// [`launcher`]: Launch::launcher
    pub fn provenance(&self, ranks: usize) -> Provenance {
        Provenance {
            launcher: Some(self.launcher()),
            ..crate::provenance(Some(self.describe(ranks)))
        }
    }

    /// Runs `f` on every rank. Returns `Some(results)` in rank order on the
    /// reporting rank (the only one in-process; rank 0 under MPI) and `None`
    /// on the others. Under MPI an error on any rank aborts the job, since
    /// the other ranks would otherwise wait in a collective forever.
    pub fn run<T, F>(&self, timeout: Duration, f: F) -> Result<Option<Vec<T>>>
    where
        T: Serialize + DeserializeOwned + Send,
        F: Fn(&dyn Bootstrap) -> Result<T> + Sync,
    {
        match self {
            Launch::Threads(n) => run_threads(*n, timeout, f),
            #[cfg(feature = "mpi")]
            Launch::Mpi(boot) => {
                // The bootstrap's collectives wait as long as the caller's
                // (it was made with MpiBootstrap's default).
                boot.set_timeout(timeout);
                run_mpi(boot, |b| f(b))
            }
            Launch::Files(boot) => run_files(boot, |b| f(b)),
        }
    }
}

/// Runs `f` on this rank of a `fabkit launch` job and gathers every rank's
/// result on rank 0 (`None` elsewhere). A rank that fails reports its own
/// error and leaves the job ([`Bootstrap::leave`]): the others' exchanges
/// end at once with an error naming it and its reason; a rank that dies
/// is named by the bootstrap's timeout.
pub fn run_files<T, F>(boot: &FileBootstrap, f: F) -> Result<Option<Vec<T>>>
where
    T: Serialize + DeserializeOwned,
    F: Fn(&FileBootstrap) -> Result<T>,
{
    // A failing rank leaves at once, so the others end their exchange with
    // its reason instead of waiting for it until their timeout.
    let guard = Leave(boot, "it panicked");
    let mine = f(boot);
    std::mem::forget(guard);
    let mine = mine.inspect_err(|e| {
        if !is_echo(e) {
            boot.leave(&crate::exit::one_line(e))
        }
    });
    let mine = mine.with_context(|| format!("rank {}", boot.rank()))?;
    let all = boot.allgather(&serde_json::to_vec(&Ok::<&T, String>(&mine))?)?;
    if boot.rank() != 0 {
        return Ok(None);
    }
    all.iter()
        .enumerate()
        .map(|(r, b)| {
            let res: std::result::Result<T, String> =
                serde_json::from_slice(b).context("decoding a rank's result")?;
            res.map_err(|e| anyhow!("rank {r}: {e}"))
        })
        .collect::<Result<Vec<T>>>()
        .map(Some)
}

/// Makes a rank leave its group when dropped: on a panic's unwinding.
struct Leave<'a>(&'a dyn Bootstrap, &'static str);

impl Drop for Leave<'_> {
    fn drop(&mut self) {
        self.0.leave(self.1);
    }
}

fn run_threads<T, F>(n: usize, timeout: Duration, f: F) -> Result<Option<Vec<T>>>
where
    T: Send,
    F: Fn(&dyn Bootstrap) -> Result<T> + Sync,
{
    if n == 0 {
        return Err(usage!("--ranks must be at least 1"));
    }
    let boots = ThreadGroup::members(n, timeout);
    let results: Vec<Result<T>> = std::thread::scope(|s| {
        let handles: Vec<_> = boots
            .iter()
            .map(|b| {
                let f = &f;
                std::thread::Builder::new()
                    .name(format!("rank-{}", b.rank()))
                    .spawn_scoped(s, move || {
                        // A rank that fails (or panics) leaves the group,
                        // so the others do not wait for it until their
                        // timeout (a barrier of the DHT benchmark's phases
                        // waits up to an hour).
                        let guard = Leave(b, "its thread panicked");
                        let r = f(b);
                        std::mem::forget(guard);
                        if let Err(e) = &r {
                            if !is_echo(e) {
                                b.leave(&crate::exit::one_line(e));
                            }
                        }
                        r
                    })
                    .expect("spawning a rank thread")
            })
            .collect();
        handles
            .into_iter()
            .map(|h| {
                h.join()
                    .unwrap_or_else(|_| Err(anyhow!("rank thread panicked")))
            })
            .collect()
    });
    // The error of a rank that failed on its own, not the echo of the
    // others that ended because it left (it may be a usage error, exit 2).
    let first_own = results
        .iter()
        .position(|r| r.as_ref().is_err_and(|e| !is_echo(e)));
    let mut results: Vec<Result<T>> = results;
    if let Some(i) = first_own {
        let e = results.swap_remove(i).err().expect("an error");
        return Err(e.context(format!("rank {i}")));
    }
    results
        .into_iter()
        .enumerate()
        .map(|(r, res)| res.with_context(|| format!("rank {r}")))
        .collect::<Result<Vec<T>>>()
        .map(Some)
}

/// Whether `e` only says that another rank left the job: a
/// [`fabkit_core::Error::PeerLeft`], as it is or inside the fabric's or the
/// DHT's error (both wrap it transparently, so it is not in the chain).
fn is_echo(e: &anyhow::Error) -> bool {
    use fabkit_core::Error as Core;
    let left = |c: Option<&Core>| matches!(c, Some(Core::PeerLeft { .. }));
    let in_fabric = |f: Option<&fabkit_fabric::Error>| match f {
        Some(fabkit_fabric::Error::Core(c)) => left(Some(c)),
        _ => false,
    };
    e.chain().any(|c| {
        left(c.downcast_ref())
            || in_fabric(c.downcast_ref())
            || match c.downcast_ref::<fabkit_dht::Error>() {
                Some(fabkit_dht::Error::Bootstrap(c)) => left(Some(c)),
                Some(d) => left(d.transport_error()) || in_fabric(d.transport_error()),
                None => false,
            }
    })
}

/// Runs `f` on this MPI rank and gathers every rank's result on rank 0
/// (`None` elsewhere). An error on any rank is printed and ends the job with
/// MPI_Abort, since the other ranks would otherwise wait in the gather.
#[cfg(feature = "mpi")]
pub fn run_mpi<T, F>(boot: &fabkit_mpi::MpiBootstrap, f: F) -> Result<Option<Vec<T>>>
where
    T: Serialize + DeserializeOwned,
    F: Fn(&fabkit_mpi::MpiBootstrap) -> Result<T>,
{
    let mine = match f(boot) {
        Ok(v) => serde_json::to_vec(&v)?,
        Err(e) => {
            eprintln!(
                "fabkit: rank {}: error: {}",
                boot.rank(),
                crate::exit::one_line(&e)
            );
            // MPI_Abort: the launcher ends every rank.
            boot.abort(crate::exit::exit_code(&e).into());
        }
    };
    let all = boot.allgather(&mine)?;
    if boot.rank() != 0 {
        return Ok(None);
    }
    all.iter()
        .map(|b| serde_json::from_slice(b).context("decoding a rank's result"))
        .collect::<Result<Vec<T>>>()
        .map(Some)
}

/// Refuses, as a usage error naming the fix, an empty namespace name (as
/// in `--netns a,,b`) or one that does not exist: said before any rank
/// starts, instead of as `ip netns exec`'s error and a failed rank.
/// `cmd` is the command line so far, for the message.
fn check_namespaces(cmd: &str, netns: &[String]) -> Result<()> {
    if netns.iter().any(String::is_empty) {
        return Err(usage!(
            "{cmd}: --netns `{}` has an empty name; separate the namespaces with single \
             commas, e.g. --netns fk-a,fk-b",
            netns.join(",")
        ));
    }
    let existing = fabkit_netns::testbed::namespaces();
    match netns.iter().find(|ns| !existing.contains(ns)) {
        Some(ns) => Err(usage!(
            "{cmd}: there is no network namespace {ns}; give one `ip netns list` shows, or \
             make two with `ipoib-eval testbed up`"
        )),
        None => Ok(()),
    }
}

/// Makes the process `c` starts get SIGTERM when this one (the thread
/// that starts it: every launch starts its children from one) ends, also
/// by SIGKILL. It survives `ip netns exec`, which execs the command.
fn ends_with_this_process(c: &mut std::process::Command) {
    // SAFETY: prctl, getppid and _exit are async-signal-safe; they run in
    // the child before exec and touch no memory of the parent.
    unsafe {
        let launcher = libc::getpid();
        std::os::unix::process::CommandExt::pre_exec(c, move || {
            if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGTERM) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            // The launcher may have gone before the prctl: then go too.
            if libc::getppid() != launcher {
                libc::_exit(1);
            }
            Ok(())
        });
    }
}

/// Makes the process `c` starts the leader of a process group of its own,
/// so that the launcher can end it with everything it started (a shell's
/// `sleep`, a rank's helpers), and [`ends_with_this_process`]. The signals
/// the launcher holds to pass on ([`HeldTerminating`]) are unblocked in it.
fn own_group_ending_with_this_process(c: &mut std::process::Command) {
    // SAFETY: setpgid is async-signal-safe; it runs in the child before
    // exec and touches no memory of the parent.
    unsafe {
        std::os::unix::process::CommandExt::pre_exec(c, || {
            if libc::setpgid(0, 0) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    child_takes_terminating(c);
    ends_with_this_process(c);
}

/// Sends `sig` to the process group a rank leads (the rank and whatever
/// it started). A group that has ended is no error.
fn signal_group(pid: u32, sig: libc::c_int) {
    // SAFETY: kill(2) touches no memory; a negative pid names the group.
    unsafe { libc::kill(-(pid as libc::pid_t), sig) };
}

/// The directory a launch's ranks meet in, removed however
/// `launch_processes` ends.
struct TempDir(crate::held::Held);

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0.path);
    }
}

/// The prefix of a launch's meeting place in the temporary directory.
const MEETING: &str = "fabkit-launch-";

/// Makes the directory a launch's ranks meet in: under the temporary
/// directory, with a name no other user can predict (the pid and 64 random
/// bits), only this user's (0700), and held while this launcher lives
/// ([`crate::held`]), since the ranks leave their addresses, memory keys
/// and a benchmark's Redis password there. A name that exists, a link
/// included, is refused: one another user made first is never used.
fn meeting_place() -> Result<TempDir> {
    let path = std::env::temp_dir().join(format!(
        "{MEETING}{}-{:016x}",
        std::process::id(),
        fabkit_core::random_u64()?
    ));
    let held = crate::held::make(&path)
        .with_context(|| format!("creating the ranks' meeting place {}", path.display()))?;
    Ok(TempDir(held))
}

/// Removes (or with `dry_run` lists) the meeting places of launchers that
/// were killed (`fabkit clean`).
pub fn reap_meeting_places(dry_run: bool) -> Vec<std::path::PathBuf> {
    crate::held::reap(
        &std::env::temp_dir(),
        |name| name.starts_with(MEETING),
        dry_run,
    )
}

/// `fabkit launch`: starts `cmd` once per rank on this machine, each inside
/// one of `netns` (one rank per namespace, as one host each) or `n` plain
/// processes, meeting through a fresh shared directory (the file bootstrap,
/// no MPI). When a rank fails the others are stopped. Returns the first
/// failing rank's exit code, or 0.
pub fn launch_processes(
    netns: &[String],
    n: Option<usize>,
    timeout: Duration,
    cmd: &[String],
) -> Result<i32> {
    let size = match (netns.len(), n) {
        (0, Some(n)) if n > 0 => n,
        (k, None) if k > 0 => k,
        (k, Some(n)) if k == n && n > 0 => n,
        _ => {
            return Err(usage!(
                "launch takes --netns a,b,... (one rank each) or -n RANKS, or both agreeing"
            ))
        }
    };
    let Some((prog, args)) = cmd.split_first() else {
        return Err(usage!(
            "launch needs a command after --, e.g. fabkit launch -n 2 -- fabkit check"
        ));
    };
    check_namespaces("launch", netns)?;
    // Held from before the first rank starts, so none is missed, until
    // after the meeting place is removed (dropped after it).
    let signals = HeldTerminating::hold().context("holding SIGINT, SIGTERM and SIGHUP")?;
    let dir = meeting_place()?;
    let mut children = Vec::new();
    for rank in 0..size {
        let mut c = match netns.get(rank) {
            // `ip netns exec` also gives the child a /sys of its namespace.
            Some(ns) => {
                let mut c = std::process::Command::new("ip");
                c.args(["netns", "exec", ns, prog]).args(args);
                c
            }
            None => {
                let mut c = std::process::Command::new(prog);
                c.args(args);
                c
            }
        };
        // A launcher killed or signalled alone (a scheduler, `timeout`,
        // Ctrl-C at its terminal) takes each rank's group with it.
        own_group_ending_with_this_process(&mut c);
        // A rank in a group of its own that reads the terminal would be
        // stopped (SIGTTIN) and wait for ever: ranks read no terminal.
        // SAFETY: isatty has no preconditions.
        if unsafe { libc::isatty(0) } == 1 {
            c.stdin(std::process::Stdio::null());
        }
        if !netns.is_empty() {
            c.env(ENV_NETNS, netns.join(","));
        }
        c.env(ENV_DIR, &dir.0.path)
            .env(ENV_RANK, rank.to_string())
            .env(ENV_SIZE, size.to_string())
            .env(ENV_TIMEOUT, timeout.as_secs_f64().to_string());
        match c.spawn() {
            Ok(child) => children.push((rank, child)),
            Err(e) => {
                for (_, mut ch) in children {
                    signal_group(ch.id(), libc::SIGKILL);
                    let _ = ch.wait();
                }
                return Err(anyhow!("starting rank {rank} ({prog}): {e}"));
            }
        }
    }
    let groups: Vec<u32> = children.iter().map(|(_, ch)| ch.id()).collect();
    let code = watch(&children, &dir.0.path, size, &signals);
    // Whatever a rank started ends with the job, however the job ended;
    // then the ranks are reaped (their pids named their groups till now).
    for &g in &groups {
        signal_group(g, libc::SIGKILL);
    }
    for (_, mut ch) in children {
        let _ = ch.wait();
    }
    if !matches!(code, Ok(0)) {
        remove_segments_of(&groups);
    }
    code
}

/// Removes the /dev/shm segments the ranks `pids` made (fabkit's, and the
/// libfabric shm provider's) that nothing holds any more: a rank that was
/// killed, or stopped after another failed, could not unlink them.
/// Judged as `fabkit clean` judges; said on stderr, a failure included.
fn remove_segments_of(pids: &[u32]) {
    use fabkit_fabric::shm::{remove, survey, Maker, Removal, Verdict};
    let Ok(found) = survey(true) else {
        return;
    };
    for (seg, verdict) in found {
        let pid = match &seg.maker {
            Maker::Fabkit { creator, .. } => creator.pid,
            Maker::Provider { pid } => *pid,
        };
        if !pids.contains(&pid) || !matches!(verdict, Verdict::Stale(_)) {
            continue;
        }
        match remove(&seg) {
            Ok(Removal::Removed) => {
                eprintln!(
                    "fabkit launch: removed /dev/shm/{} (rank pid {pid})",
                    seg.file
                )
            }
            Ok(_) => {}
            Err(e) => eprintln!("fabkit launch: could not remove /dev/shm/{}: {e}", seg.file),
        }
    }
}

/// Watches every rank: the first failure stops the rest (they would wait
/// in the bootstrap until its timeout otherwise), and a signal the
/// launcher gets is passed on to every rank's group. Returns the job's
/// exit code. Ranks are not reaped here ([`exited`]): a leader's pid stays
/// its group's until the launcher has ended the group.
fn watch(
    children: &[(usize, std::process::Child)],
    dir: &std::path::Path,
    size: usize,
    signals: &HeldTerminating,
) -> Result<i32> {
    let mut done: Vec<Option<std::process::ExitStatus>> = vec![None; children.len()];
    loop {
        for ((rank, ch), d) in children.iter().zip(done.iter_mut()) {
            if d.is_none() {
                *d = exited(ch).map_err(|e| anyhow!("waiting for rank {rank}: {e}"))?;
            }
        }
        let failed: Vec<(usize, std::process::ExitStatus)> = children
            .iter()
            .zip(&done)
            .filter_map(|((r, _), d)| d.filter(|st| !st.success()).map(|st| (*r, st)))
            .collect();
        if let Some(&(first, st)) = failed.first() {
            // The others end at once when one leaves (Bootstrap::leave), so
            // the first exit seen may be an echo: the rank that left first
            // says so in the shared directory, and its status is the job's.
            let (rank, st) = match origin(dir, size) {
                Some(k) if k != first => match failed.iter().find(|(r, _)| *r == k) {
                    Some(&(k, st)) => (k, st),
                    None => match children.iter().find(|(r, _)| *r == k) {
                        Some((_, ch)) => (k, wait_briefly(ch).unwrap_or(st)),
                        None => (first, st),
                    },
                },
                _ => (first, st),
            };
            eprintln!("fabkit launch: rank {rank} failed ({st}); stopping the others");
            return Ok(st.code().unwrap_or(1));
        }
        let running: Vec<&std::process::Child> = children
            .iter()
            .zip(&done)
            .filter(|(_, d)| d.is_none())
            .map(|((_, ch), _)| ch)
            .collect();
        if running.is_empty() {
            return Ok(0);
        }
        // Polling child exits, and taking a signal meanwhile; no busy loop.
        if let Some(sig) = signals.wait(Duration::from_millis(20)) {
            let name = match sig {
                libc::SIGINT => "SIGINT",
                libc::SIGTERM => "SIGTERM",
                _ => "SIGHUP",
            };
            eprintln!("fabkit launch: {name} received; passing it on to the ranks");
            for ch in &running {
                signal_group(ch.id(), sig);
            }
            // They get a moment to end cleanly (remove their segments);
            // the caller then ends what is left.
            for ch in &running {
                wait_briefly(ch);
            }
            return Ok(128 + sig);
        }
    }
}

/// The rank that left a `fabkit launch` job first, by its `left.rankN`
/// file in the shared directory (only a rank's own failure writes one).
fn origin(dir: &std::path::Path, size: usize) -> Option<usize> {
    (0..size).find(|r| dir.join(format!("left.rank{r}")).exists())
}

/// The exit status of `ch` if it ends within a second: a rank that left
/// the job is on its way out.
fn wait_briefly(ch: &std::process::Child) -> Option<std::process::ExitStatus> {
    for _ in 0..50 {
        if let Ok(Some(st)) = exited(ch) {
            return Some(st);
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    None
}

/// `ch`'s exit status if it has ended, without reaping it (`waitid` with
/// `WNOWAIT`): until it is reaped its pid, which names its process group,
/// cannot be given to another process, so signalling the group later can
/// only reach what the rank started.
fn exited(ch: &std::process::Child) -> std::io::Result<Option<std::process::ExitStatus>> {
    use std::os::unix::process::ExitStatusExt;
    // SAFETY: an all-zero siginfo_t is a valid out parameter.
    let mut info: libc::siginfo_t = unsafe { std::mem::zeroed() };
    // SAFETY: waitid writes only `info`; the pid is our child's, not yet
    // reaped (only `launch_processes` reaps, after the job).
    let rc = unsafe {
        libc::waitid(
            libc::P_PID,
            ch.id() as libc::id_t,
            &mut info,
            libc::WEXITED | libc::WNOHANG | libc::WNOWAIT,
        )
    };
    if rc != 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: after a successful waitid the pid field is set (0: no change).
    if unsafe { info.si_pid() } == 0 {
        return Ok(None);
    }
    // SAFETY: as above, for a child that changed state.
    let status = unsafe { info.si_status() };
    let raw = match info.si_code {
        libc::CLD_EXITED => (status & 0xff) << 8,
        libc::CLD_DUMPED => status | 0x80,
        _ => status,
    };
    Ok(Some(std::process::ExitStatus::from_raw(raw)))
}

/// Runs `cmd` under Open MPI's `mpirun` with its ranks spread over the
/// network namespaces `netns` (in order, `n / netns.len()` each), every
/// namespace a host: mpirun starts its daemon in each through `fabkit rsh`
/// (the rsh agent below), and the daemons reach mpirun over the testbed's
/// management links (`ipoib-eval testbed up --mgmt`). MPI's own TCP
/// traffic is kept off `lo` and the management link. Returns mpirun's exit
/// status.
pub fn launch_mpi(netns: &[String], n: Option<usize>, cmd: &[String]) -> Result<i32> {
    let hosts = netns.len();
    if hosts == 0 {
        return Err(usage!(
            "launch --mpi needs --netns a,b,... (the namespaces are the hosts)"
        ));
    }
    let size = n.unwrap_or(hosts);
    if size > MAX_MPI_RANKS {
        return Err(usage!(
            "launch --mpi: -n {size} is more than {MAX_MPI_RANKS} ranks on one machine"
        ));
    }
    if size == 0 || !size.is_multiple_of(hosts) {
        return Err(usage!(
            "launch --mpi: -n {size} does not split evenly over {hosts} namespaces; \
             give a multiple of {hosts}"
        ));
    }
    if cmd.is_empty() {
        return Err(usage!(
            "launch needs a command after --, e.g. fabkit launch --mpi --netns a,b -- fabkit check"
        ));
    }
    check_namespaces("launch --mpi", netns)?;
    let mgmt = fabkit_netns::testbed::MGMT_IFACE;
    for (i, ns) in netns.iter().enumerate() {
        // Open MPI takes the namespaces for host names (and `h:n` for slots).
        let hostname_like = !ns.is_empty()
            && ns.len() <= 48
            && !ns.starts_with(['-', '.'])
            && ns
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '.');
        if !hostname_like {
            return Err(usage!(
                "launch --mpi: namespace `{ns}` cannot be a host name for mpirun: use 1-48 \
                 letters, digits, - or ."
            ));
        }
        if netns[..i].contains(ns) {
            return Err(usage!(
                "launch --mpi: namespace {ns} is named twice; use -n for more ranks per namespace"
            ));
        }
        let addr = std::process::Command::new("ip")
            .args(["-n", ns, "-4", "-o", "addr", "show", "dev", mgmt])
            .output()
            .map(|o| String::from_utf8_lossy(&o.stdout).contains("inet "))
            .unwrap_or(false);
        if !addr {
            return Err(usage!(
                "namespace {ns} has no management link `{mgmt}` with an IPv4 address, so \
                 mpirun cannot reach its daemon there: bring the testbed up with \
                 `ipoib-eval testbed up --mgmt`"
            ));
        }
    }
    let me = std::env::current_exe().context("finding this fabkit's path for the rsh agent")?;
    let me_str = me.display().to_string();
    if me_str.contains([' ', ':', '\t']) {
        return Err(anyhow!(
            "launch --mpi: mpirun splits its rsh agent at spaces and colons, and this fabkit's \
             path `{me_str}` has one; run fabkit from a path without them"
        ));
    }
    let slots = size / hosts;
    let host_list: Vec<String> = netns.iter().map(|h| format!("{h}:{slots}")).collect();
    let mut c = std::process::Command::new("mpirun");
    c.args(["--mca", "plm_rsh_agent", &format!("{me_str} rsh")]);
    // Open MPI refuses both include and exclude lists: the user's wins.
    if std::env::var_os("OMPI_MCA_btl_tcp_if_include").is_none() {
        c.args(["--mca", "btl_tcp_if_exclude", &format!("lo,{mgmt}")]);
    }
    // If fabkit is killed, mpirun is told to end the job (it would run on
    // under init otherwise). Ctrl-C reaches mpirun through the process group.
    ends_with_this_process(&mut c);
    // Each rank's namespace, in rank order (mpirun fills a host's slots
    // before the next host's), for the reports to say.
    let per_rank: Vec<&str> = netns
        .iter()
        .flat_map(|ns| std::iter::repeat_n(ns.as_str(), slots))
        .collect();
    c.env(ENV_NETNS, per_rank.join(","))
        .args(["-x", ENV_NETNS])
        .args(["--host", &host_list.join(",")])
        .args(["-n", &size.to_string()])
        .args(cmd);
    let status = c
        .status()
        .map_err(|e| anyhow!("starting mpirun: {e} (install Open MPI: openmpi-bin)"))?;
    Ok(status.code().unwrap_or(1))
}

/// Ranks `launch --mpi` starts at most (all on this machine).
const MAX_MPI_RANKS: usize = 1024;

/// The rsh agent for [`launch_mpi`]: runs the shell command line `words`
/// (as a remote shell would: joined by spaces) in network namespace
/// `host`, with `host` as its hostname in a UTS namespace of its own.
/// Replaces this process.
///
/// The hostname matters: Open MPI names its session directories and
/// shared-memory segments after it, so two "hosts" sharing one would map
/// each other's segments (vader crashes in the first collective).
pub fn rsh(host: &str, words: &[String]) -> Result<()> {
    use std::os::unix::process::CommandExt;
    if words.is_empty() {
        return Err(anyhow!("rsh needs a command after the host"));
    }
    if host.is_empty() || host.len() > 64 {
        return Err(anyhow!(
            "rsh: host `{host}` must be a namespace name of 1-64 bytes"
        ));
    }
    // SAFETY: plain system calls on this process; `host` outlives the call
    // and its length is passed with it.
    let set = unsafe {
        libc::unshare(libc::CLONE_NEWUTS) == 0
            && libc::sethostname(host.as_ptr().cast(), host.len()) == 0
    };
    if !set {
        return Err(anyhow!(
            "rsh: giving {host} a hostname of its own: {} (run as root)",
            std::io::Error::last_os_error()
        ));
    }
    // `ip netns exec` also gives the command a /sys of its namespace.
    let e = std::process::Command::new("ip")
        .args(["netns", "exec", host, "/bin/sh", "-c", &words.join(" ")])
        .exec();
    Err(anyhow!("running ip netns exec {host}: {e}"))
}
