//! How `perf` and `mpi-perf` run one size: a count of operations issued
//! in windows, and, with `-t`, the count calibrated to fill a duration.

use anyhow::Result;
use fabkit_core::Bootstrap;

use crate::flags;

/// Runs `n` operations as windows of at most `window`: `each(count)` issues
/// and completes one window of `count`. The loop itself reads no clock and
/// allocates nothing.
pub fn in_windows(n: u64, window: usize, mut each: impl FnMut(usize) -> Result<()>) -> Result<()> {
    let w = window.max(1) as u64;
    let mut k = 0;
    while k < n {
        let count = (n - k).min(w);
        each(count as usize)?;
        k += count;
    }
    Ok(())
}

/// `-t`: runs probes of `first` operations, growing fourfold, until one
/// lasts a tenth of `secs`, then returns on every rank how many operations
/// fill `secs` (at least `floor`, at most `-n`'s maximum). `probe(n)` runs
/// `n` operations on this rank and returns the seconds that count; every
/// rank calls it for every probe (targets of fence and PSCW epochs, and
/// receivers of messages, take part), and rank 0's view decides.
pub fn calibrate(
    boot: &dyn Bootstrap,
    secs: f64,
    first: u64,
    floor: u64,
    mut probe: impl FnMut(u64) -> Result<f64>,
) -> Result<u64> {
    let mut n = first.max(1);
    loop {
        boot.barrier()?;
        let took = probe(n)?;
        // Rank 0's verdict: 0 = probe more, else the count.
        let verdict = if took >= secs / 10.0 || n >= flags::MAX_ITERS {
            let wanted = (secs / took.max(1e-9)) * n as f64;
            if boot.rank() == 0 {
                flags::note_iters_cut(secs, wanted, took / n as f64);
            }
            wanted.clamp(floor.max(1) as f64, flags::MAX_ITERS as f64) as u64
        } else {
            0
        };
        let all = boot.allgather(&verdict.to_le_bytes())?;
        match all.first().and_then(|v| v.get(..8)) {
            Some(b) => match u64::from_le_bytes(b.try_into().expect("8 bytes")) {
                0 => n = n.saturating_mul(4),
                n => return Ok(n),
            },
            None => anyhow::bail!("rank 0 sent no calibration verdict"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use fabkit_core::ThreadGroup;
    use std::time::Duration;

    #[test]
    fn windows_cover_the_count_with_a_short_last_one() {
        let mut seen = Vec::new();
        in_windows(10, 4, |c| {
            seen.push(c);
            Ok(())
        })
        .unwrap();
        assert_eq!(seen, [4, 4, 2]);
        seen.clear();
        in_windows(0, 4, |c| {
            seen.push(c);
            Ok(())
        })
        .unwrap();
        assert!(seen.is_empty());
    }

    #[test]
    fn calibration_grows_probes_and_every_rank_gets_rank_0s_count() {
        // A probe of n operations "takes" n microseconds on rank 0 and
        // nothing elsewhere: a tenth of 1 s is first reached at the probe
        // of 4^9 = 262144, and 1 s is then 10^6 operations.
        let boots = ThreadGroup::members(2, Duration::from_secs(10));
        let counts: Vec<(u64, Vec<u64>)> = std::thread::scope(|s| {
            let hs: Vec<_> = boots
                .iter()
                .map(|b| {
                    s.spawn(move || {
                        let mut probes = Vec::new();
                        let n = calibrate(b, 1.0, 1, 8, |n| {
                            probes.push(n);
                            Ok(if b.rank() == 0 { n as f64 * 1e-6 } else { 0.0 })
                        })
                        .unwrap();
                        (n, probes)
                    })
                })
                .collect();
            hs.into_iter().map(|h| h.join().unwrap()).collect()
        });
        assert_eq!(counts[0].0, 1_000_000);
        assert_eq!(counts[0], counts[1]);
        assert_eq!(counts[0].1.len(), 10);
        assert_eq!(counts[0].1.last(), Some(&262_144));
    }
}
