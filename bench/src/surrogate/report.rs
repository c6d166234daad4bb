//! `fabkit surrogate`'s rows: the rounds of each variant, rounding and
//! solver cost put beside the uncached run of the same round, as a table,
//! JSON (the benchmark's `{meta, runs}` style) and charts of speed-up and
//! error against rounding.

use std::fmt::Write as _;

use fabkit_dht::Variant;
use serde::{Deserialize, Serialize};

use super::chem::SPECIES;
use super::{variant_name, Run};

/// Where, what and how a report was measured.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Meta {
    /// Command, commit, host, machine, cores, launch and fabkit version.
    #[serde(flatten)]
    pub provenance: fabkit_core::provenance::Provenance,
    /// What carried the cache's operations.
    pub provider: String,
    /// Columns x rows.
    pub grid: String,
    /// Time steps.
    pub steps: u64,
    /// The chemistry's time step, seconds.
    pub dt: f64,
    /// Cells per cache lookup.
    pub batch: usize,
    /// The floor of relative errors, as a fraction of each species'
    /// largest uncached value.
    pub floor: f64,
    /// What the reader needs to know about the figures.
    pub notes: Vec<String>,
}

/// One round of a row: the cached run and the uncached run it is
/// compared with.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Round {
    /// Seconds with the cache.
    pub secs: f64,
    /// Seconds without it, in the same round at the same cost.
    pub uncached_secs: f64,
    /// `uncached_secs / secs`.
    pub speedup: f64,
}

/// The error of a row's final grids, over its rounds.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct Error {
    /// Per species (in `species` order): the largest relative difference
    /// of any cell in any round.
    pub max: Vec<f64>,
    /// Per species: the mean relative difference over cells, averaged over
    /// the rounds.
    pub mean: Vec<f64>,
    /// The species' names.
    pub species: Vec<String>,
}

/// Where a break-even that the costs tried do not cross lies.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Outside {
    /// Below the cheapest cost tried: the cache paid at every cost.
    Below,
    /// Above the dearest: it paid at none.
    Above,
}

/// A variant, rounding and cost over every round.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Row {
    /// `coarse`, `fine`, `lockfree` or `chunked`.
    pub variant: Variant,
    /// What carried the cache's operations.
    pub transport: String,
    /// The path they took (absent in reports written before it was
    /// recorded).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub path: Option<crate::dhtbench::transports::Taken>,
    /// The keys' rounding: `exact` or significant digits.
    pub digits: String,
    /// The solver's sub-steps.
    pub substeps: u32,
    /// Ranks.
    pub ranks: usize,
    /// Every round.
    pub rounds: Vec<Round>,
    /// Median over rounds, and its spread.
    pub speedup: f64,
    /// See `speedup`.
    pub speedup_min: f64,
    /// See `speedup`.
    pub speedup_max: f64,
    /// Median seconds with and without the cache.
    pub secs: f64,
    /// See `secs`.
    pub uncached_secs: f64,
    /// Hits over lookups, all rounds.
    pub hit_rate: f64,
    /// Lookups whose bucket kept failing its checksum, all rounds (solved
    /// again, as misses).
    pub checksum_mismatches: u64,
    /// Checksum re-reads, all rounds.
    pub checksum_retries: u64,
    /// Writes that evicted another input, all rounds.
    pub evictions: u64,
    /// Microseconds a solve took, in the uncached runs of this cost.
    pub solve_us: f64,
    /// Microseconds of cache reads and writes per cell, over the cached
    /// runs.
    pub cache_us_per_cell: f64,
    /// The solver cost at which the cache's time equals the solves it
    /// saves: `cache_us_per_cell / hit_rate`. Below it the cache does not
    /// pay (none when nothing hit).
    pub break_even_us: Option<f64>,
    /// The same, measured: the solve time at which the median speed-up of
    /// this variant and rounding crosses 1, interpolated between the two
    /// solver costs tried on either side (none with one cost, or when it
    /// does not cross).
    pub break_even_measured_us: Option<f64>,
    /// Where it does not cross: `below` the cheapest cost tried (the
    /// cache paid at every cost) or `above` the dearest (it paid at none).
    pub break_even_outside: Option<Outside>,
    /// Error against the uncached run.
    pub error: Error,
}

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(f64::total_cmp);
    match v.len() {
        0 => f64::NAN,
        n if n % 2 == 1 => v[n / 2],
        n => (v[n / 2 - 1] + v[n / 2]) / 2.0,
    }
}

fn ratio(num: u64, den: u64) -> f64 {
    if den == 0 {
        0.0
    } else {
        num as f64 / den as f64
    }
}

/// One row per variant, rounding and cost of `runs`, in the order the
/// cached runs first ran.
fn by_configuration(runs: &[Run]) -> Vec<Row> {
    let mut keys: Vec<(Variant, String, u32)> = Vec::new();
    for r in runs {
        if let Some(v) = r.variant {
            let k = (v, r.digits.clone(), r.substeps);
            if !keys.contains(&k) {
                keys.push(k);
            }
        }
    }
    keys.into_iter()
        .filter_map(|(variant, digits, substeps)| {
            let mine: Vec<&Run> = runs
                .iter()
                .filter(|r| {
                    r.variant == Some(variant) && r.digits == digits && r.substeps == substeps
                })
                .collect();
            let plain = |round: u32| {
                runs.iter()
                    .find(|u| u.variant.is_none() && u.substeps == substeps && u.round == round)
            };
            let uncached: Vec<&Run> = runs
                .iter()
                .filter(|u| u.variant.is_none() && u.substeps == substeps)
                .collect();
            let first = mine.first()?;
            let rounds: Vec<Round> = mine
                .iter()
                .filter_map(|r| {
                    let u = plain(r.round)?;
                    Some(Round {
                        secs: r.secs,
                        uncached_secs: u.secs,
                        speedup: u.secs / r.secs,
                    })
                })
                .collect();
            let mut sp: Vec<f64> = rounds.iter().map(|r| r.speedup).collect();
            let mut secs: Vec<f64> = rounds.iter().map(|r| r.secs).collect();
            let mut usecs: Vec<f64> = rounds.iter().map(|r| r.uncached_secs).collect();
            let sum = |f: &dyn Fn(&Run) -> u64| mine.iter().map(|r| f(r)).sum::<u64>();
            let hits = sum(&|r| r.hits);
            let lookups = sum(&|r| r.hits + r.misses + r.corrupt);
            let hit_rate = ratio(hits, lookups);
            let solve_ns: u64 = uncached.iter().map(|u| u.solve_ns).sum();
            let solves: u64 = uncached.iter().map(|u| u.solves).sum();
            let cache_us = ratio(sum(&|r| r.cache_ns), sum(&|r| r.cells)) / 1e3;
            let mut error = Error {
                max: vec![0.0; SPECIES.len()],
                mean: vec![0.0; SPECIES.len()],
                species: SPECIES.iter().map(|s| s.to_string()).collect(),
            };
            for e in mine.iter().filter_map(|r| r.error.as_ref()) {
                for s in 0..SPECIES.len() {
                    error.max[s] = error.max[s].max(e.max[s]);
                    error.mean[s] += e.mean[s] / mine.len() as f64;
                }
            }
            Some(Row {
                variant,
                transport: first.transport.clone(),
                path: first.path,
                digits,
                substeps,
                ranks: first.ranks,
                speedup: median(&mut sp),
                speedup_min: sp.first().copied().unwrap_or(f64::NAN),
                speedup_max: sp.last().copied().unwrap_or(f64::NAN),
                secs: median(&mut secs),
                uncached_secs: median(&mut usecs),
                rounds,
                hit_rate,
                checksum_mismatches: sum(&|r| r.corrupt),
                checksum_retries: sum(&|r| r.stats.checksum_retries),
                evictions: sum(&|r| r.stats.evictions),
                solve_us: ratio(solve_ns, solves) / 1e3,
                cache_us_per_cell: cache_us,
                break_even_us: (hit_rate > 0.0).then(|| cache_us / hit_rate),
                break_even_measured_us: None,
                break_even_outside: None,
                error,
            })
        })
        .collect()
}

/// The rows of `runs`, in the order the cached runs first ran, each with
/// the measured break-even of its variant and rounding.
pub fn rows(runs: &[Run]) -> Vec<Row> {
    let mut rows = by_configuration(runs);
    let crossings: Vec<(Option<f64>, Option<Outside>)> = rows
        .iter()
        .map(|r| {
            let mut same: Vec<&Row> = rows
                .iter()
                .filter(|o| o.variant == r.variant && o.digits == r.digits)
                .collect();
            same.sort_by(|x, y| x.solve_us.total_cmp(&y.solve_us));
            let at = crossing(&same);
            let outside = match at {
                Some(_) => None,
                None if same.iter().all(|o| o.speedup > 1.0) => Some(Outside::Below),
                None if same.iter().all(|o| o.speedup < 1.0) => Some(Outside::Above),
                None => None,
            };
            (at, outside)
        })
        .collect();
    for (r, (at, outside)) in rows.iter_mut().zip(crossings) {
        r.break_even_measured_us = at;
        r.break_even_outside = outside;
    }
    rows
}

/// Where the speed-up crosses 1 along `rows` (by solve time), linearly
/// between the first pair on either side.
fn crossing(rows: &[&Row]) -> Option<f64> {
    rows.windows(2).find_map(|w| {
        let (a, b) = (w[0], w[1]);
        let (sa, sb) = (a.speedup - 1.0, b.speedup - 1.0);
        if sa == 0.0 {
            return Some(a.solve_us);
        }
        (sa < 0.0 && sb >= 0.0 || sa > 0.0 && sb <= 0.0)
            .then(|| a.solve_us + (b.solve_us - a.solve_us) * sa / (sa - sb))
    })
}

/// A report: how it was measured, and its rows.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Report {
    /// See [`Meta`].
    pub meta: Meta,
    /// See [`Row`].
    pub runs: Vec<Row>,
}

/// The largest of a row's per-species figures, and whose it is.
fn worst(v: &[f64]) -> (f64, &'static str) {
    v.iter().zip(SPECIES).fold(
        (0.0, "-"),
        |(m, s), (&x, name)| {
            if x > m {
                (x, name)
            } else {
                (m, s)
            }
        },
    )
}

/// The table printed after a run.
pub fn table(rep: &Report) -> String {
    let mut t = String::new();
    let m = &rep.meta;
    let Some(first) = rep.runs.first() else {
        return "fabkit surrogate: no runs\n".into();
    };
    let _ = writeln!(
        t,
        "fabkit surrogate: {} | {} | grid {}, {} steps of {} s | batch {} | {} round(s), \
         speed-up median (min-max)",
        m.provider,
        m.provenance.launch.as_deref().unwrap_or("-"),
        m.grid,
        m.steps,
        m.dt,
        m.batch,
        first.rounds.len()
    );
    let _ = writeln!(
        t,
        "{:<8} {:>6} {:>8} {:>8} {:>8} {:>8} {:>16} {:>6} {:>8} {:>8} {:>18} {:>18} {:>18}",
        "variant",
        "digits",
        "substeps",
        "solve us",
        "cached s",
        "plain s",
        "speed-up",
        "hit %",
        "mismatch",
        "cache us",
        "break-even us",
        "max err",
        "mean err"
    );
    let us = |v: Option<f64>| v.map_or_else(|| "-".to_string(), |b| format!("{b:.2}"));
    // Outside the costs tried: below the cheapest, or above the dearest.
    let cost = |pick: fn(f64, f64) -> f64, r: &Row| {
        rep.runs
            .iter()
            .filter(|o| o.variant == r.variant && o.digits == r.digits)
            .map(|o| o.solve_us)
            .fold(r.solve_us, pick)
    };
    let measured = |r: &Row| match (r.break_even_measured_us, r.break_even_outside) {
        (Some(b), _) => format!("{b:.2}"),
        (None, Some(Outside::Below)) => format!("<{:.2}", cost(f64::min, r)),
        (None, Some(Outside::Above)) => format!(">{:.2}", cost(f64::max, r)),
        (None, None) => "-".into(),
    };
    let err = |(v, who): (f64, &str)| {
        if v == 0.0 {
            "0".to_string()
        } else {
            format!("{v:.1e} {who}")
        }
    };
    for r in &rep.runs {
        let _ = writeln!(
            t,
            "{:<8} {:>6} {:>8} {:>8.2} {:>8.3} {:>8.3} {:>16} {:>6.1} {:>8} {:>8.2} {:>18} {:>18} {:>18}",
            variant_name(r.variant),
            r.digits,
            r.substeps,
            r.solve_us,
            r.secs,
            r.uncached_secs,
            format!(
                "{:.2} ({:.2}-{:.2})",
                r.speedup, r.speedup_min, r.speedup_max
            ),
            r.hit_rate * 100.0,
            r.checksum_mismatches,
            r.cache_us_per_cell,
            format!("{} / {}", us(r.break_even_us), measured(r)),
            err(worst(&r.error.max)),
            err(worst(&r.error.mean))
        );
    }
    let _ = writeln!(
        t,
        "break-even us: model / measured (<: paid at every cost tried, >: at none); errors: the \
         worst species, relative (see the notes)"
    );
    for n in &m.notes {
        let _ = writeln!(t, "note: {n}");
    }
    t
}

/// Decimal digits a grid agrees to: -log10 of the largest relative error,
/// 16 where there is none (beyond a double's precision).
pub fn agreement(err: f64) -> f64 {
    if err <= 0.0 {
        16.0
    } else {
        (-err.log10()).clamp(0.0, 16.0)
    }
}

/// The charts of `rep`, one pair per solver cost: speed-up against the
/// keys' rounding, and the digits the final grid agrees to, per variant;
/// as (file name, SVG).
pub fn charts(rep: &Report) -> Vec<(String, String)> {
    let mut costs: Vec<u32> = rep.runs.iter().map(|r| r.substeps).collect();
    costs.sort_unstable();
    costs.dedup();
    let mut out = Vec::new();
    for s in costs {
        let rows: Vec<&Row> = rep.runs.iter().filter(|r| r.substeps == s).collect();
        let mut cats: Vec<String> = Vec::new();
        let mut variants: Vec<Variant> = Vec::new();
        for r in &rows {
            if !cats.contains(&r.digits) {
                cats.push(r.digits.clone());
            }
            if !variants.contains(&r.variant) {
                variants.push(r.variant);
            }
        }
        let solve = rows.first().map_or(0.0, |r| r.solve_us);
        let line = |v: &Variant, f: &dyn Fn(&Row) -> (f64, f64, f64)| fabkit_chart::Line {
            label: variant_name(*v),
            points: cats
                .iter()
                .map(|c| {
                    rows.iter()
                        .find(|r| &r.variant == v && &r.digits == c)
                        .map(|r| f(r))
                })
                .collect(),
        };
        let speed: Vec<fabkit_chart::Line> = variants
            .iter()
            .map(|v| line(v, &|r| (r.speedup, r.speedup_min, r.speedup_max)))
            .collect();
        let agree: Vec<fabkit_chart::Line> = variants
            .iter()
            .map(|v| {
                line(v, &|r| {
                    let a = agreement(worst(&r.error.max).0);
                    (a, a, a)
                })
            })
            .collect();
        let ranks = rows.first().map_or(0, |r| r.ranks);
        let title = format!("{ranks} ranks, grid {}, solve {solve:.1} us", rep.meta.grid);
        out.push((
            format!("speedup-{s}.svg"),
            fabkit_chart::lines_with(
                &format!("Speed-up by the cache: {title}"),
                "significant digits of the key",
                "runtime without / with the cache",
                &cats,
                &speed,
                &fabkit_chart::Extras {
                    reference: Some((1.0, "1: below it the cache slows the run".into())),
                    scale: fabkit_chart::Scale::Linear,
                    ..fabkit_chart::Extras::default()
                },
            ),
        ));
        out.push((
            format!("error-{s}.svg"),
            fabkit_chart::lines_with(
                &format!("Accuracy with the cache: {title}"),
                "significant digits of the key",
                "-log10 of the largest relative error (16: none)",
                &cats,
                &agree,
                &fabkit_chart::Extras {
                    // Already a logarithm.
                    scale: fabkit_chart::Scale::Linear,
                    ..fabkit_chart::Extras::default()
                },
            ),
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(round: u32, variant: Option<Variant>, secs: f64, hits: u64) -> Run {
        Run {
            round,
            variant,
            transport: "t".into(),
            path: None,
            digits: if variant.is_some() {
                "4".into()
            } else {
                String::new()
            },
            substeps: 10,
            ranks: 2,
            secs,
            cells: 100,
            solves: 100 - hits,
            solve_ns: (100 - hits) * 20_000,
            cache_ns: 100 * 2_000,
            hits,
            misses: 100 - hits,
            corrupt: 0,
            stats: fabkit_dht::Stats::default(),
            error: variant.map(|_| super::super::grid::Error {
                max: vec![1e-3; 9],
                mean: vec![1e-4; 9],
            }),
        }
    }

    #[test]
    fn rows_pair_each_round_with_its_uncached_run() {
        let runs = [
            run(0, None, 2.0, 0),
            run(0, Some(Variant::Lockfree), 1.0, 50),
            run(1, None, 3.0, 0),
            run(1, Some(Variant::Lockfree), 1.0, 50),
        ];
        let rows = rows(&runs);
        assert_eq!(rows.len(), 1);
        let r = &rows[0];
        assert_eq!(r.rounds.len(), 2);
        assert_eq!((r.speedup_min, r.speedup_max, r.speedup), (2.0, 3.0, 2.5));
        assert_eq!(r.hit_rate, 0.5);
        assert_eq!(r.solve_us, 20.0);
        assert_eq!(r.cache_us_per_cell, 2.0);
        // 2 us of cache per cell pays where half the cells skip a solve
        // of more than 4 us.
        assert_eq!(r.break_even_us, Some(4.0));
        assert_eq!(r.error.max[0], 1e-3);
        assert!((r.error.mean[0] - 1e-4).abs() < 1e-18);
    }

    /// Every key `fabkit surrogate --json` writes, as it is spelled: a
    /// field renamed or dropped fails here (new ones are added to the list).
    const JSON_KEYS: &[&str] = &[
        "meta",
        "meta.batch",
        "meta.command",
        "meta.commit",
        "meta.cores",
        "meta.dt",
        "meta.fabkit",
        "meta.floor",
        "meta.grid",
        "meta.host",
        "meta.launch",
        "meta.launcher",
        "meta.machine",
        "meta.notes",
        "meta.provider",
        "meta.steps",
        "runs",
        "runs[].break_even_measured_us",
        "runs[].break_even_outside",
        "runs[].break_even_us",
        "runs[].cache_us_per_cell",
        "runs[].checksum_mismatches",
        "runs[].checksum_retries",
        "runs[].digits",
        "runs[].error",
        "runs[].error.max",
        "runs[].error.mean",
        "runs[].error.species",
        "runs[].evictions",
        "runs[].hit_rate",
        "runs[].ranks",
        "runs[].rounds",
        "runs[].rounds[].secs",
        "runs[].rounds[].speedup",
        "runs[].rounds[].uncached_secs",
        "runs[].secs",
        "runs[].solve_us",
        "runs[].speedup",
        "runs[].speedup_max",
        "runs[].speedup_min",
        "runs[].substeps",
        "runs[].transport",
        "runs[].uncached_secs",
        "runs[].variant",
    ];

    #[test]
    fn golden_the_json_keys_are_todays() {
        let runs = [
            run(0, None, 2.0, 0),
            run(0, Some(Variant::Lockfree), 1.0, 50),
        ];
        let rep = Report {
            meta: Meta {
                provenance: fabkit_core::provenance::Provenance {
                    launcher: Some(fabkit_core::provenance::Launcher::Threads),
                    ..crate::provenance(Some("l".into()))
                },
                provider: "p".into(),
                grid: "16x8".into(),
                steps: 1,
                dt: 1.0,
                batch: 1,
                floor: 1e-6,
                notes: vec!["n".into()],
            },
            runs: rows(&runs),
        };
        assert_eq!(rep.runs[0].rounds.len(), 1);
        let json = serde_json::to_value(&rep).unwrap();
        fabkit_core::schema::same_keys(&json, JSON_KEYS).unwrap_or_else(|e| panic!("{e}"));
    }

    #[test]
    fn agreement_is_the_digits_a_grid_keeps() {
        assert_eq!(agreement(0.0), 16.0);
        assert!((agreement(1e-3) - 3.0).abs() < 1e-12);
        assert_eq!(agreement(10.0), 0.0);
    }
}
