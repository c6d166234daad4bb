//! CPU counters: the machine's `/proc/stat`, the clock rate from
//! `/proc/cpuinfo`, and a thread's own `getrusage(RUSAGE_THREAD)`.

use std::time::Duration;

/// Machine-wide CPU time from the `cpu` line of `/proc/stat`, in seconds.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct ProcStat {
    /// user + nice + system + irq + softirq.
    pub busy_s: f64,
    /// softirq alone.
    pub softirq_s: f64,
}

impl ProcStat {
    /// Parses `/proc/stat` text; `ticks` is `sysconf(_SC_CLK_TCK)`. Pure.
    pub fn parse(text: &str, ticks: f64) -> Option<ProcStat> {
        let line = text.lines().find(|l| l.starts_with("cpu "))?;
        let f: Vec<f64> = line
            .split_whitespace()
            .skip(1)
            .map(|x| x.parse::<f64>().ok())
            .collect::<Option<_>>()?;
        // user nice system idle iowait irq softirq steal ...
        if f.len() < 7 || ticks <= 0.0 {
            return None;
        }
        Some(ProcStat {
            busy_s: (f[0] + f[1] + f[2] + f[5] + f[6]) / ticks,
            softirq_s: f[6] / ticks,
        })
    }

    /// Reads the machine's counters now (zero if `/proc/stat` is unreadable).
    pub fn now() -> ProcStat {
        std::fs::read_to_string("/proc/stat")
            .ok()
            .and_then(|t| ProcStat::parse(&t, crate::sys::clock_ticks()))
            .unwrap_or_default()
    }

    /// Counters accumulated since `earlier`.
    pub fn since(&self, earlier: &ProcStat) -> ProcStat {
        ProcStat {
            busy_s: (self.busy_s - earlier.busy_s).max(0.0),
            softirq_s: (self.softirq_s - earlier.softirq_s).max(0.0),
        }
    }
}

pub use fabkit_core::time::Clock;

/// User and system time of the calling thread.
pub fn thread_times() -> (Duration, Duration) {
    crate::sys::thread_rusage()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn proc_stat_busy_excludes_idle_iowait_and_steal() {
        let t = "cpu  100 10 50 1000 7 3 20 99 0 0\ncpu0 1 2 3 4 5 6 7 8 0 0\n";
        let s = ProcStat::parse(t, 100.0).unwrap();
        assert!((s.busy_s - 1.83).abs() < 1e-9);
        assert!((s.softirq_s - 0.2).abs() < 1e-9);
        assert!(ProcStat::parse("cpu 1 2\n", 100.0).is_none());
        assert!(ProcStat::parse("intr 5\n", 100.0).is_none());
        assert!(ProcStat::parse(t, 0.0).is_none());
        let later = ProcStat {
            busy_s: 3.0,
            softirq_s: 1.0,
        };
        assert_eq!(later.since(&s).busy_s, 3.0 - 1.83);
    }
}
