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
