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

/// The clock rate used to turn CPU seconds into cycles, and where it came
/// from (this VM has no hardware cycle counter for `perf stat`).
#[derive(Clone, Debug, PartialEq)]
pub struct Clock {
    /// Hz.
    pub hz: f64,
    /// "cpu MHz in /proc/cpuinfo", ...
    pub source: String,
}

impl Clock {
    /// Parses the first `cpu MHz` of `/proc/cpuinfo` text. Pure.
    pub fn parse_cpuinfo(text: &str) -> Option<f64> {
        text.lines()
            .find(|l| l.starts_with("cpu MHz"))
            .and_then(|l| l.split(':').nth(1))
            .and_then(|v| v.trim().parse::<f64>().ok())
            .filter(|mhz| mhz.is_finite() && *mhz > 0.0)
            .map(|mhz| mhz * 1e6)
    }

    /// This machine's clock: cpufreq's maximum if present, else `cpu MHz`.
    pub fn detect() -> Clock {
        let max = std::fs::read_to_string("/sys/devices/system/cpu/cpu0/cpufreq/cpuinfo_max_freq")
            .ok()
            .and_then(|s| s.trim().parse::<f64>().ok())
            .filter(|khz| *khz > 0.0);
        if let Some(khz) = max {
            return Clock {
                hz: khz * 1e3,
                source: "cpufreq cpuinfo_max_freq".into(),
            };
        }
        match std::fs::read_to_string("/proc/cpuinfo")
            .ok()
            .and_then(|t| Clock::parse_cpuinfo(&t))
        {
            Some(hz) => Clock {
                hz,
                source: "cpu MHz in /proc/cpuinfo".into(),
            },
            None => Clock {
                hz: 0.0,
                source: "unknown (no cpufreq, no cpu MHz): cycles not computed".into(),
            },
        }
    }
}

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

    #[test]
    fn cpuinfo_clock() {
        assert_eq!(
            Clock::parse_cpuinfo("model name\t: X\ncpu MHz\t\t: 2596.144\n"),
            Some(2596.144e6)
        );
        assert_eq!(Clock::parse_cpuinfo("cpu MHz : nan\n"), None);
        assert_eq!(Clock::parse_cpuinfo(""), None);
    }
}
