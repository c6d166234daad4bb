//! Time as an input. The variants' state machines never read a clock: the
//! table passes them `now`, and waits between retries through a [`Clock`],
//! so a test can drive a deadline to its end without sleeping.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

/// Where the table gets the time, and how it waits before a retry.
pub trait Clock: Send + Sync {
    /// The current time.
    fn now(&self) -> Instant;
    /// Waits `d` before retrying a lock or a claim another rank holds
    /// (zero: give the core away once).
    fn pause(&self, d: Duration);
}

/// The real clock, and a sleep (or a yield) between retries, so that a
/// waiting rank does not spin a core its peer needs.
///
/// The time is the kernel's tick-resolution monotonic clock
/// (`CLOCK_MONOTONIC_COARSE`, 1/HZ: 1 to 10 ms), as an [`Instant`]: a few
/// nanoseconds to read where `Instant::now` takes tens in a guest, and an
/// operation on one key reads it at every step. Deadlines are seconds; one
/// below a tick ends up to a tick late. Where the kernel lacks that clock,
/// `Instant::now`.
#[derive(Clone, Copy, Debug, Default)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now(&self) -> Instant {
        use fabkit_core::time::coarse_monotonic;
        // `Instant` has no constructor from a timespec: the coarse clock's
        // progress since a first reading is added to the `Instant` taken
        // with it (the same clock, CLOCK_MONOTONIC, at a finer grain).
        static BASE: OnceLock<Option<(Instant, Duration)>> = OnceLock::new();
        let base = BASE.get_or_init(|| coarse_monotonic().map(|c| (Instant::now(), c)));
        match (base, coarse_monotonic()) {
            (Some((at, c0)), Some(c)) => *at + c.saturating_sub(*c0),
            _ => Instant::now(),
        }
    }
    fn pause(&self, d: Duration) {
        if d.is_zero() {
            std::thread::yield_now();
        } else {
            std::thread::sleep(d);
        }
    }
}

/// A clock for tests: time moves only when someone waits on it or calls
/// [`TestClock::advance`]. A pause advances it by the pause and yields the
/// core, so a table waiting on a lock reaches its deadline at once in real
/// time, and a test asserts deadlines without sleeping.
#[derive(Debug)]
pub struct TestClock {
    base: Instant,
    nanos: AtomicU64,
}

impl Default for TestClock {
    fn default() -> Self {
        TestClock::new()
    }
}

impl TestClock {
    /// A clock standing at an arbitrary instant.
    pub fn new() -> TestClock {
        TestClock {
            base: Instant::now(),
            nanos: AtomicU64::new(0),
        }
    }

    /// Moves time forward by `d`.
    pub fn advance(&self, d: Duration) {
        let n = u64::try_from(d.as_nanos()).unwrap_or(u64::MAX);
        // Saturates (at 584 years) rather than wrapping back in time.
        let _ = self
            .nanos
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |t| {
                Some(t.saturating_add(n))
            });
    }

    /// Time elapsed on this clock since it was made.
    pub fn elapsed(&self) -> Duration {
        Duration::from_nanos(self.nanos.load(Ordering::Relaxed))
    }
}

impl Clock for TestClock {
    fn now(&self) -> Instant {
        self.base + self.elapsed()
    }
    fn pause(&self, d: Duration) {
        // Even a zero pause moves time, so a retry loop always progresses.
        self.advance(d.max(Duration::from_micros(1)));
        std::thread::yield_now();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_test_clock_moves_only_when_told() {
        let c = TestClock::new();
        let t0 = c.now();
        assert_eq!(c.now(), t0);
        c.pause(Duration::from_secs(3));
        assert_eq!(c.now() - t0, Duration::from_secs(3));
        c.pause(Duration::ZERO);
        assert!(c.now() - t0 > Duration::from_secs(3));
        c.advance(Duration::MAX);
        assert_eq!(
            c.elapsed(),
            Duration::from_nanos(u64::MAX),
            "saturates, never wraps"
        );
    }
}
