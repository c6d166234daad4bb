//! Facts about this host that every layer sizes against.

/// This machine's memory in bytes (MemTotal), if /proc says; the one
/// figure the DHT's tables and fabkit's tools check sizes against.
pub fn physical_memory() -> Option<u64> {
    let text = std::fs::read_to_string("/proc/meminfo").ok()?;
    let kb: u64 = text
        .lines()
        .find(|l| l.starts_with("MemTotal:"))?
        .split_whitespace()
        .nth(1)?
        .parse()
        .ok()?;
    kb.checked_mul(1024)
}

/// The CPUs online on this machine, whatever this process is bound to
/// (mpirun binds each rank to one core; the machine still has all of them).
#[allow(unsafe_code)]
pub fn online_cpus() -> usize {
    // SAFETY: sysconf has no preconditions.
    let n = unsafe { libc::sysconf(libc::_SC_NPROCESSORS_ONLN) };
    usize::try_from(n).unwrap_or(0)
}

/// This machine in one line: CPU model, cores, memory, kernel.
pub fn machine() -> String {
    let cpu = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("model name"))
                .map(|l| l.trim_start_matches([' ', '\t', ':']).to_string())
        })
        .unwrap_or_else(|| "unknown CPU".into());
    let cores = online_cpus();
    let mem = physical_memory().map_or("?".into(), |m| format!("{} GiB", m >> 30));
    let kernel = std::fs::read_to_string("/proc/sys/kernel/osrelease")
        .map_or("?".into(), |k| k.trim().to_string());
    format!("{cpu}, {cores} cores, {mem}, Linux {kernel}")
}
