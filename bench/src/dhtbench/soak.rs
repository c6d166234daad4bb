//! `fabkit dht --duration SECS`: the run's phases repeated until the time
//! is up, each cycle on fresh tables (created, loaded, read, freed), and
//! after every cycle each rank's resources sampled: resident memory, open
//! file descriptors, threads, registered memory regions, `/dev/shm`
//! segments it made, and busy CPU per operation. What a long job must keep
//! flat: a count that grows after warm-up is a leak, and the report says
//! which one and on which rank.

use std::time::{Duration, Instant};

use anyhow::Result;
use fabkit_core::bootstrap::Bootstrap;
use serde::{Deserialize, Serialize};

/// One rank's resources after a cycle.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct Point {
    /// The rank.
    pub rank: usize,
    /// Cycles done (1 after the first).
    pub cycle: u64,
    /// Seconds since the run started.
    pub secs: f64,
    /// Resident memory, KiB (`/proc/self/statm`).
    pub rss_kib: u64,
    /// Open file descriptors (`/proc/self/fd`).
    pub fds: u64,
    /// Threads (`/proc/self/status`).
    pub threads: u64,
    /// Memory regions registered with libfabric and not closed.
    pub regions: u64,
    /// Segments in `/dev/shm` this process made (fabkit's and libfabric
    /// shm's).
    pub shm_segments: u64,
    /// Operations this rank issued since the last point.
    pub ops: u64,
    /// This process's busy CPU time since the last point (every thread's:
    /// the service and progress threads included) per operation it
    /// issued, ns.
    pub cpu_ns_per_op: f64,
}

/// The counts that must come back to where they were after warm-up.
pub const COUNTS: [&str; 4] = ["fds", "threads", "regions", "shm_segments"];

impl Point {
    /// The named count (one of [`COUNTS`]).
    fn count(&self, name: &str) -> u64 {
        match name {
            "fds" => self.fds,
            "threads" => self.threads,
            "regions" => self.regions,
            _ => self.shm_segments,
        }
    }

    fn words(&self) -> [u64; 9] {
        [
            self.cycle,
            self.secs.to_bits(),
            self.rss_kib,
            self.fds,
            self.threads,
            self.regions,
            self.shm_segments,
            self.ops,
            self.cpu_ns_per_op.to_bits(),
        ]
    }

    fn from_words(rank: usize, w: &[u64]) -> Option<Point> {
        let [cycle, secs, rss_kib, fds, threads, regions, shm_segments, ops, cpu] = *w else {
            return None;
        };
        Some(Point {
            rank,
            cycle,
            secs: f64::from_bits(secs),
            rss_kib,
            fds,
            threads,
            regions,
            shm_segments,
            ops,
            cpu_ns_per_op: f64::from_bits(cpu),
        })
    }
}

/// One rank's summary over the soak.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RankSummary {
    /// The rank.
    pub rank: usize,
    /// Cycles run (the last point's cycle).
    pub cycles: u64,
    /// Each count's value at the end of warm-up and its largest after it,
    /// as `[name, at warm-up, largest after]`.
    pub counts: Vec<(String, u64, u64)>,
    /// The counts that grew after warm-up (empty: none leaked).
    pub grew: Vec<String>,
    /// Resident memory's least-squares slope after warm-up, KiB per hour;
    /// none from less than [`SLOPE_SPAN`] of samples (seconds of data
    /// extrapolated to an hour say nothing).
    pub rss_kib_per_hour: Option<f64>,
    /// Resident memory's largest excursion after warm-up above its value
    /// at the end of warm-up, KiB.
    pub rss_excursion_kib: u64,
    /// Busy CPU per operation, ns: median over the cycles after warm-up.
    pub cpu_ns_per_op: f64,
}

/// The soak's part of the report.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Soak {
    /// The duration asked for, seconds.
    pub duration_secs: f64,
    /// Cycles counted as warm-up (pools, caches and lazily made threads
    /// settle): the first tenth of the cycles, at least one.
    pub warmup_cycles: u64,
    /// Every rank's points, in rank and cycle order.
    pub points: Vec<Point>,
    /// Per rank.
    pub ranks: Vec<RankSummary>,
}

impl Soak {
    /// Whether no count grew after warm-up on any rank.
    pub fn flat(&self) -> bool {
        self.ranks.iter().all(|r| r.grew.is_empty())
    }
}

/// Reads this process's resources now. Ranks that are threads of one
/// process read it one at a time: a sibling's reading of `/proc/self/fd`
/// holds a descriptor of its own, which would count as a leak.
fn resources() -> Point {
    static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let page_kib = {
        // SAFETY: sysconf has no preconditions.
        let p = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
        u64::try_from(p).unwrap_or(4096) / 1024
    };
    let rss_kib = std::fs::read_to_string("/proc/self/statm")
        .ok()
        .and_then(|s| s.split_whitespace().nth(1)?.parse::<u64>().ok())
        .map_or(0, |pages| pages.saturating_mul(page_kib));
    let fds = std::fs::read_dir("/proc/self/fd").map_or(0, |d| d.count() as u64);
    let threads = std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("Threads:"))
                .and_then(|v| v.trim().parse().ok())
        })
        .unwrap_or(0);
    Point {
        rss_kib,
        // The count includes the descriptor read_dir held open.
        fds: fds.saturating_sub(1),
        threads,
        regions: fabkit_fabric::live_regions() as u64,
        shm_segments: fabkit_fabric::shm::own_segments() as u64,
        ..Point::default()
    }
}

/// This process's busy CPU time (every thread's).
fn process_cpu() -> Duration {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: ts is a valid out pointer; the clock id is a constant.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_PROCESS_CPUTIME_ID, &mut ts) };
    if rc != 0 {
        return Duration::ZERO;
    }
    Duration::new(
        ts.tv_sec.max(0) as u64,
        ts.tv_nsec.clamp(0, 999_999_999) as u32,
    )
}

/// A soak in progress on one rank.
#[derive(Debug)]
pub struct Soaking {
    duration: Duration,
    start: Instant,
    /// Busy CPU time at the last point, and operations since.
    cpu: Duration,
    ops: u64,
    cycles: u64,
    points: Vec<Point>,
}

/// Points a rank keeps at most, about: cycles of a few milliseconds would
/// otherwise make an hour's report hundreds of megabytes (and the soak's
/// own memory would grow with it). A point is taken after a cycle once
/// `duration / POINTS` has passed since the last, and after the first.
const POINTS: u32 = 1000;

impl Soaking {
    /// Starts the clock.
    pub fn start(duration: Duration) -> Soaking {
        Soaking {
            duration,
            start: Instant::now(),
            cpu: process_cpu(),
            ops: 0,
            cycles: 0,
            points: Vec::with_capacity(POINTS as usize + 2),
        }
    }

    /// Records this rank's resources after a cycle in which it issued
    /// `ops` operations, then whether to run another: rank 0's clock
    /// decides for all (collective).
    pub fn after_cycle(&mut self, ops: u64, boot: &dyn Bootstrap) -> Result<bool> {
        self.cycles += 1;
        self.ops = self.ops.saturating_add(ops);
        let secs = self.start.elapsed().as_secs_f64();
        let gap = self.duration.as_secs_f64() / f64::from(POINTS);
        let due = self.points.last().is_none_or(|p| secs - p.secs >= gap);
        let more = self.start.elapsed() < self.duration;
        // Every rank takes a point after the same cycles: rank 0's clock
        // decides whether one is due, and whether to go on.
        let all = super::gather(boot, &[u64::from(more) | u64::from(due) << 1])?;
        let said = all.first().and_then(|w| w.first()).copied().unwrap_or(0);
        // The last cycle always gets a point.
        if said & 2 != 0 || said & 1 == 0 {
            let cpu = process_cpu();
            let busy = cpu.saturating_sub(self.cpu);
            let ops = std::mem::take(&mut self.ops);
            self.cpu = cpu;
            self.points.push(Point {
                rank: boot.rank(),
                cycle: self.cycles,
                secs,
                ops,
                cpu_ns_per_op: if ops == 0 {
                    0.0
                } else {
                    busy.as_nanos() as f64 / ops as f64
                },
                ..resources()
            });
            // No rank starts the next cycle (and opens its endpoints) while
            // another still reads: ranks may be threads of one process.
            boot.barrier()?;
        }
        Ok(said & 1 == 1)
    }

    /// Every rank's points, gathered (collective), and the summary.
    pub fn finish(self, boot: &dyn Bootstrap) -> Result<Soak> {
        let mine: Vec<u64> = self.points.iter().flat_map(|p| p.words()).collect();
        let all = super::gather(boot, &mine)?;
        let mut points = Vec::new();
        for (rank, words) in all.iter().enumerate() {
            for w in words.chunks(9) {
                points.extend(Point::from_words(rank, w));
            }
        }
        let warmup_cycles = (self.cycles / 10).max(1);
        let ranks = (0..all.len())
            .map(|r| {
                let of: Vec<&Point> = points.iter().filter(|p| p.rank == r).collect();
                summarize(r, &of, warmup_cycles)
            })
            .collect();
        Ok(Soak {
            duration_secs: self.duration.as_secs_f64(),
            warmup_cycles,
            points,
            ranks,
        })
    }
}

/// The least time after warm-up that memory's slope is given for.
pub const SLOPE_SPAN: Duration = Duration::from_secs(60);

/// One rank's summary: each count at the end of warm-up against its
/// largest after it, and resident memory's slope and excursion.
pub fn summarize(rank: usize, points: &[&Point], warmup: u64) -> RankSummary {
    let base = points
        .iter()
        .rev()
        .find(|p| p.cycle <= warmup)
        .or(points.first());
    let after: Vec<&&Point> = points.iter().filter(|p| p.cycle > warmup).collect();
    let mut counts = Vec::new();
    let mut grew = Vec::new();
    for name in COUNTS {
        let at = base.map_or(0, |p| p.count(name));
        let most = after.iter().map(|p| p.count(name)).max().unwrap_or(at);
        if most > at {
            grew.push(name.to_string());
        }
        counts.push((name.to_string(), at, most));
    }
    let rss0 = base.map_or(0, |p| p.rss_kib);
    let rss_excursion_kib = after
        .iter()
        .map(|p| p.rss_kib.saturating_sub(rss0))
        .max()
        .unwrap_or(0);
    let xy: Vec<(f64, f64)> = after
        .iter()
        .map(|p| (p.secs / 3600.0, p.rss_kib as f64))
        .collect();
    let mut cpu: Vec<f64> = after.iter().map(|p| p.cpu_ns_per_op).collect();
    cpu.sort_by(f64::total_cmp);
    RankSummary {
        rank,
        cycles: points.last().map_or(0, |p| p.cycle),
        counts,
        grew,
        rss_kib_per_hour: {
            let span = xy.last().zip(xy.first()).map_or(0.0, |(l, f)| l.0 - f.0);
            (span * 3600.0 >= SLOPE_SPAN.as_secs_f64()).then(|| slope(&xy))
        },
        rss_excursion_kib,
        cpu_ns_per_op: cpu.get(cpu.len() / 2).copied().unwrap_or(0.0),
    }
}

/// The least-squares slope of `xy`; 0 for fewer than two distinct x.
fn slope(xy: &[(f64, f64)]) -> f64 {
    let n = xy.len() as f64;
    if xy.len() < 2 {
        return 0.0;
    }
    let mx = xy.iter().map(|p| p.0).sum::<f64>() / n;
    let my = xy.iter().map(|p| p.1).sum::<f64>() / n;
    let sxx: f64 = xy.iter().map(|p| (p.0 - mx).powi(2)).sum();
    let sxy: f64 = xy.iter().map(|p| (p.0 - mx) * (p.1 - my)).sum();
    if sxx > 0.0 {
        sxy / sxx
    } else {
        0.0
    }
}

/// The soak's chart: each rank's resident memory (MiB) per minute, the
/// median with the lowest and highest of the minute; the counts, flat or
/// not, in the legend.
pub fn chart(s: &Soak, title: &str) -> String {
    let minutes = s
        .points
        .iter()
        .map(|p| (p.secs / 60.0) as usize)
        .max()
        .unwrap_or(0)
        + 1;
    let cats: Vec<String> = (0..minutes).map(|m| m.to_string()).collect();
    let lines: Vec<fabkit_chart::Line> = s
        .ranks
        .iter()
        .map(|r| {
            let points = (0..minutes)
                .map(|m| {
                    let mut v: Vec<f64> = s
                        .points
                        .iter()
                        .filter(|p| p.rank == r.rank && (p.secs / 60.0) as usize == m)
                        .map(|p| p.rss_kib as f64 / 1024.0)
                        .collect();
                    v.sort_by(f64::total_cmp);
                    Some((*v.get(v.len() / 2)?, *v.first()?, *v.last()?))
                })
                .collect();
            let counts: Vec<String> = r
                .counts
                .iter()
                .map(|(n, at, most)| format!("{n} {at}->{most}"))
                .collect();
            fabkit_chart::Line {
                label: format!(
                    "rank {}: {}; {}",
                    r.rank,
                    r.rss_kib_per_hour
                        .map_or("slope -".into(), |k| format!("{:+.0} MiB/h", k / 1024.0)),
                    counts.join(", ")
                ),
                points,
            }
        })
        .collect();
    // From zero: a slope is read against the whole of the memory.
    fabkit_chart::lines_with(
        title,
        "minutes since the start",
        "resident memory, MiB (median, min-max of the minute)",
        &cats,
        &lines,
        &fabkit_chart::Extras {
            scale: fabkit_chart::Scale::Linear,
            ..fabkit_chart::Extras::default()
        },
    )
}

/// The soak's lines for the printed table.
pub fn describe(s: &Soak) -> String {
    let mut out = format!(
        "soak: {:.0} s asked, {} warm-up cycles\n",
        s.duration_secs, s.warmup_cycles
    );
    for r in &s.ranks {
        let counts: Vec<String> = r
            .counts
            .iter()
            .map(|(n, at, most)| format!("{n} {at}->{most}"))
            .collect();
        out += &format!(
            "  rank {}: {} cycles; after warm-up {}; rss {} (largest +{} KiB); \
             {:.0} ns CPU/op; {}\n",
            r.rank,
            r.cycles,
            counts.join(", "),
            r.rss_kib_per_hour.map_or_else(
                || format!("slope - (under {} s)", SLOPE_SPAN.as_secs()),
                |k| format!("{k:+.0} KiB/h")
            ),
            r.rss_excursion_kib,
            r.cpu_ns_per_op,
            if r.grew.is_empty() {
                "flat".to_string()
            } else {
                format!("GREW: {}", r.grew.join(", "))
            }
        );
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(cycle: u64, fds: u64, rss: u64) -> Point {
        Point {
            cycle,
            secs: cycle as f64 * 36.0,
            fds,
            rss_kib: rss,
            ..Point::default()
        }
    }

    #[test]
    fn a_count_that_grows_after_warm_up_is_named_and_memory_gets_its_slope() {
        // fds settle during warm-up (cycle 1), then stay: flat.
        let flat = [p(1, 10, 1000), p(2, 12, 1000), p(3, 12, 1000)];
        let refs: Vec<&Point> = flat.iter().collect();
        let s = summarize(0, &refs, 1);
        assert_eq!(s.grew, vec!["fds".to_string()], "10 at warm-up, 12 after");
        let s = summarize(0, &refs, 2);
        assert!(s.grew.is_empty(), "{s:?}");
        // 100 KiB per cycle of 36 s: 10^4 KiB per hour.
        let leak = [p(1, 5, 1000), p(2, 5, 1100), p(3, 5, 1200), p(4, 5, 1300)];
        let refs: Vec<&Point> = leak.iter().collect();
        let s = summarize(0, &refs, 1);
        assert!(
            (s.rss_kib_per_hour.unwrap() - 10_000.0).abs() < 1e-6,
            "{s:?}"
        );
        assert_eq!(s.rss_excursion_kib, 300);
        // Seconds of samples give no slope an hour long.
        let quick: Vec<Point> = leak
            .iter()
            .map(|p| Point {
                secs: p.secs / 100.0,
                ..*p
            })
            .collect();
        let refs: Vec<&Point> = quick.iter().collect();
        assert_eq!(summarize(0, &refs, 1).rss_kib_per_hour, None);
    }

    #[test]
    fn points_travel_as_words_and_back() {
        let a = Point {
            rank: 3,
            cycle: 7,
            secs: 1.5,
            rss_kib: 1,
            fds: 2,
            threads: 3,
            regions: 4,
            shm_segments: 5,
            ops: 6,
            cpu_ns_per_op: 0.25,
        };
        assert_eq!(Point::from_words(3, &a.words()), Some(a));
        assert_eq!(Point::from_words(3, &a.words()[..8]), None);
    }
}
