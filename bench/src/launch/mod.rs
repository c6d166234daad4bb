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
use serde::de::DeserializeOwned;
use serde::Serialize;

mod processes;
pub use processes::{launch_processes, reap_meeting_places};

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
