//! Clocks: one cheap enough to read at every step of an operation, the
//! scale every timeout is stretched by, and the CPU's clock rate that turns
//! CPU seconds into cycles.

use std::sync::OnceLock;
use std::time::Duration;

/// `CLOCK_MONOTONIC_COARSE`: the kernel's monotonic clock at tick
/// resolution ([`coarse_resolution`]: 1/HZ, 1 to 10 ms), as a duration
/// since its origin; `None` where the kernel has no such clock. A few
/// nanoseconds to read, where the fine clock takes tens in a guest; for
/// deadlines and timeouts, not for measuring.
pub fn coarse_monotonic() -> Option<Duration> {
    read(libc::CLOCK_MONOTONIC_COARSE, false)
}

/// The calling thread's busy CPU time (user and system,
/// `CLOCK_THREAD_CPUTIME_ID`, in ns); `None` where the kernel has no such
/// clock.
pub fn thread_cpu() -> Option<Duration> {
    read(libc::CLOCK_THREAD_CPUTIME_ID, false)
}

/// Lowers this thread's timer slack to 1 µs, once per thread. Naps of a
/// few tens of microseconds are how waits without a wait object (a CQ of
/// `shm`, an MPI request) stay cheap; Linux adds 50 µs of timer slack to
/// every sleep by default, which tripled them.
#[allow(unsafe_code)]
pub fn tighten_timer_slack() {
    thread_local!(static DONE: std::cell::Cell<bool> = const { std::cell::Cell::new(false) });
    DONE.with(|d| {
        if !d.replace(true) {
            // SAFETY: PR_SET_TIMERSLACK only changes this thread's timer
            // slack (in nanoseconds); it has no memory effects.
            unsafe { libc::prctl(libc::PR_SET_TIMERSLACK, 1000 as libc::c_ulong) };
        }
    });
}

/// The tick of [`coarse_monotonic`].
pub fn coarse_resolution() -> Option<Duration> {
    read(libc::CLOCK_MONOTONIC_COARSE, true)
}

/// The factor by which fabkit stretches its timeouts: `FABKIT_TIMEOUT_SCALE`
/// (a whole number from 1 to 1000), 1 when unset. For slow runs such as
/// a guest under emulation; results are never scaled.
pub fn timeout_scale() -> u32 {
    static SCALE: OnceLock<u32> = OnceLock::new();
    *SCALE.get_or_init(|| match std::env::var("FABKIT_TIMEOUT_SCALE") {
        Err(_) => 1,
        Ok(v) => match v.trim().parse::<u32>() {
            Ok(s @ 1..=1000) => s,
            _ => {
                crate::notice::notice(format_args!(
                    "ignoring FABKIT_TIMEOUT_SCALE={v:?}: give a whole number from 1 to 1000"
                ));
                1
            }
        },
    })
}

/// `d` stretched by [`timeout_scale`].
pub fn scaled(d: Duration) -> Duration {
    d.saturating_mul(timeout_scale())
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

#[allow(unsafe_code)]
fn read(clock: libc::clockid_t, resolution: bool) -> Option<Duration> {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid out-buffer for either call.
    let rc = unsafe {
        if resolution {
            libc::clock_getres(clock, &mut ts)
        } else {
            libc::clock_gettime(clock, &mut ts)
        }
    };
    (rc == 0).then(|| {
        Duration::new(
            u64::try_from(ts.tv_sec).unwrap_or(0),
            u32::try_from(ts.tv_nsec).unwrap_or(0),
        )
    })
}

/// A moment several threads mark and read, such as when a service last
/// took a request: the time since it was made (its first mark) or last
/// marked, as nanoseconds in an atomic.
#[derive(Debug)]
pub struct Moment {
    base: std::time::Instant,
    ns: std::sync::atomic::AtomicU64,
}

impl Default for Moment {
    fn default() -> Self {
        Moment {
            base: std::time::Instant::now(),
            ns: std::sync::atomic::AtomicU64::new(0),
        }
    }
}

impl Moment {
    /// Marks now.
    pub fn mark(&self) {
        let now = self.base.elapsed().as_nanos() as u64;
        self.ns.store(now, std::sync::atomic::Ordering::Relaxed);
    }

    /// The time since the last mark (or since it was made).
    pub fn since(&self) -> Duration {
        let at = Duration::from_nanos(self.ns.load(std::sync::atomic::Ordering::Relaxed));
        self.base.elapsed().saturating_sub(at)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_coarse_clock_keeps_up_with_the_fine_one_to_a_tick() {
        // Coarse readings bracket the fine ones, so the coarse interval
        // covers the fine one but for the tick it may lag, however long
        // this thread is kept off the core.
        let tick = coarse_resolution().expect("Linux has the coarse clock");
        assert!(tick > Duration::ZERO && tick <= Duration::from_millis(100));
        let c0 = coarse_monotonic().unwrap();
        let fine = std::time::Instant::now();
        std::thread::sleep(Duration::from_millis(30));
        let real = fine.elapsed();
        let moved = coarse_monotonic().unwrap().saturating_sub(c0);
        assert!(
            moved + tick >= real,
            "{moved:?} vs {real:?} (tick {tick:?})"
        );
        assert!(
            moved < real + Duration::from_secs(1),
            "{moved:?} vs {real:?}"
        );
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

    #[test]
    fn a_moment_counts_from_its_last_mark() {
        let m = Moment::default();
        std::thread::sleep(Duration::from_millis(20));
        let before = m.since();
        assert!(before >= Duration::from_millis(20), "{before:?}");
        m.mark();
        assert!(
            m.since() < before,
            "{:?} after a mark, {before:?} before",
            m.since()
        );
    }
}
