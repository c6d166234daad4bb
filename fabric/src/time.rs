//! A clock cheap enough to read at every step of an operation.

use std::time::Duration;

/// `CLOCK_MONOTONIC_COARSE`: the kernel's monotonic clock at tick
/// resolution (1 to 4 ms), as a duration since its origin. A few
/// nanoseconds to read, where the fine clock takes tens in a guest; for
/// deadlines and timeouts, not for measuring.
pub fn coarse_monotonic() -> Duration {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid out-buffer; the clock id is a constant the
    // kernel has had since 2.6.32, with which the call cannot fail.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC_COARSE, &mut ts) };
    Duration::new(
        u64::try_from(ts.tv_sec).unwrap_or(0),
        u32::try_from(ts.tv_nsec).unwrap_or(0),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_coarse_clock_keeps_up_with_the_fine_one_to_a_tick() {
        // Coarse readings bracket the fine ones, so the coarse interval
        // covers the fine one but for the tick it may lag (at most 4 ms at
        // HZ=250), however long this thread is kept off the core.
        let c0 = coarse_monotonic();
        let fine = std::time::Instant::now();
        std::thread::sleep(Duration::from_millis(30));
        let real = fine.elapsed();
        let moved = coarse_monotonic().saturating_sub(c0);
        assert!(
            moved + Duration::from_millis(4) >= real,
            "{moved:?} vs {real:?}"
        );
        assert!(
            moved < real + Duration::from_secs(1),
            "{moved:?} vs {real:?}"
        );
    }
}
