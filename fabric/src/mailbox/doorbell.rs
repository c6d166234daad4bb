//! A service's doorbell: how a service whose completion queue has no wait
//! object (`shm`) sleeps in the kernel while idle, and how a caller on the
//! same host wakes it.
//!
//! Napping is no substitute here: on the machines fabkit runs on (a VM), a
//! `nanosleep` wake-up alone costs 15-25 µs of CPU, so a service napping
//! 250 µs at a time burns 4-6 % of a core doing nothing, and one napping
//! long enough to be cheap takes a millisecond to notice a request.
//!
//! The bell is one 32-bit word in a one-page shared segment the service
//! creates (named as [`crate::shm::segment_name`] names every segment, so a
//! killed creator's is reaped) and every rank on the host maps. The
//! service, idle, swaps in [`ASLEEP`], reads its CQ once more, and only if
//! that found nothing waits on the word (`FUTEX_WAIT`, shared, with a
//! timeout). A caller, after its request is in the service's queue (shm
//! writes it during `fi_tsend`), swaps in [`AWAKE`] and wakes the service
//! if it found it asleep. Both sides swap (a full barrier), so either the
//! caller sees the service asleep and wakes it, or the service's last CQ
//! read sees the request. The word is only ever accessed as an
//! [`AtomicU32`], by Rust and by the kernel's futex.

use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use crate::error::Result;
use crate::shm::{segment_name, SharedSegment};

/// The service is reading its CQ (or about to).
const AWAKE: u32 = 0;
/// The service is asleep on the word, or about to be.
const ASLEEP: u32 = 1;
/// The segment's size: one word, rounded up to a page by the mapping.
const LEN: usize = 8;

/// One service's doorbell (see the module docs).
#[derive(Debug)]
pub(super) struct Doorbell {
    seg: SharedSegment,
}

impl Doorbell {
    /// A new bell for this rank's service.
    pub(super) fn create() -> Result<Doorbell> {
        let name = segment_name("mailbox-bell")?;
        Ok(Doorbell {
            seg: SharedSegment::create(&name, LEN)?,
        })
    }

    /// Maps the bell of a service on this host.
    pub(super) fn open(name: &str) -> Result<Doorbell> {
        Ok(Doorbell {
            seg: SharedSegment::open(name, LEN)?,
        })
    }

    pub(super) fn name(&self) -> &str {
        self.seg.name()
    }

    /// Removes the name once every rank has mapped the bell.
    pub(super) fn unlink(&self) {
        self.seg.unlink();
    }

    /// Whether the service sleeps on the bell (or is about to).
    pub(super) fn is_asleep(&self) -> bool {
        self.word().load(Ordering::SeqCst) == ASLEEP
    }

    fn word(&self) -> &AtomicU32 {
        // SAFETY: the mapping is page-aligned and at least 8 bytes long, it
        // lives as long as self, and its first 4 bytes are only ever
        // accessed as this AtomicU32 (and by the kernel's futex).
        unsafe { &*self.seg.as_ptr().cast::<AtomicU32>() }
    }

    /// The service's side: sleeps until rung, or for at most `timeout`,
    /// unless `idle()`, called once the sleep has been announced, finds
    /// work (returns false). Returns whether it slept.
    pub(super) fn sleep(&self, timeout: Duration, idle: impl FnOnce() -> bool) -> bool {
        let word = self.word();
        // A swap, not a store: it reads the last ringer's swap, so every
        // request posted before that ring is seen by `idle`'s CQ read.
        word.swap(ASLEEP, Ordering::SeqCst);
        let slept = idle();
        if slept {
            futex_wait(word, ASLEEP, timeout);
        }
        word.swap(AWAKE, Ordering::SeqCst);
        slept
    }

    /// A caller's side: wakes the service if it sleeps, once a request to
    /// it is in its queue (or a send to it was refused until it progresses).
    pub(super) fn ring(&self) {
        let word = self.word();
        if word.swap(AWAKE, Ordering::SeqCst) == ASLEEP {
            futex_wake(word);
        }
    }
}

/// Waits while `word` holds `asleep`, for at most `timeout`: returns when
/// woken, at once if the word changed first, on a signal, or at the
/// timeout. Not a private futex: the word is shared between processes.
fn futex_wait(word: &AtomicU32, asleep: u32, timeout: Duration) {
    let ts = libc::timespec {
        tv_sec: libc::time_t::try_from(timeout.as_secs()).unwrap_or(libc::time_t::MAX),
        // Below 10^9: fits a c_long anywhere.
        tv_nsec: timeout.subsec_nanos() as libc::c_long,
    };
    // SAFETY: word is a live, aligned u32 in shared memory; ts is a valid
    // relative timeout. The outcome (woken, changed, interrupted, timed
    // out) is not needed: the caller reads its CQ in every case.
    unsafe {
        libc::syscall(
            libc::SYS_futex,
            word.as_ptr(),
            libc::FUTEX_WAIT,
            asleep,
            &ts as *const libc::timespec,
            std::ptr::null::<u32>(),
            0u32,
        );
    }
}

/// Wakes the one thread waiting on `word`, if any.
fn futex_wake(word: &AtomicU32) {
    // SAFETY: word is a live, aligned u32; waking has no memory effects.
    unsafe {
        libc::syscall(
            libc::SYS_futex,
            word.as_ptr(),
            libc::FUTEX_WAKE,
            1u32,
            std::ptr::null::<libc::timespec>(),
            std::ptr::null::<u32>(),
            0u32,
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Instant;

    #[test]
    fn a_ring_wakes_a_sleeper_and_a_ring_before_the_sleep_is_not_lost() {
        let bell = Doorbell::create().unwrap();
        let other = Doorbell::open(bell.name()).unwrap();
        bell.unlink();
        // Work found after the announcement: no sleep.
        assert!(!bell.sleep(Duration::from_secs(10), || false));
        // A ring through another mapping wakes a sleeper long before its
        // timeout; the ringer waits for the sleep to be announced first.
        std::thread::scope(|s| {
            let start = Instant::now();
            let sleeper = s.spawn(|| bell.sleep(Duration::from_secs(10), || true));
            while bell.word().load(Ordering::SeqCst) != ASLEEP {
                std::thread::yield_now();
            }
            other.ring();
            assert!(sleeper.join().unwrap());
            assert!(
                start.elapsed() < Duration::from_secs(5),
                "{:?}",
                start.elapsed()
            );
        });
        // Rung between the announcement and the wait: the wait returns at once.
        let start = Instant::now();
        assert!(bell.sleep(Duration::from_secs(10), || {
            other.ring();
            true
        }));
        assert!(start.elapsed() < Duration::from_secs(5));
        // Nobody rings: it wakes at its timeout.
        let start = Instant::now();
        bell.sleep(Duration::from_millis(20), || true);
        assert!(start.elapsed() >= Duration::from_millis(20));
    }
}
