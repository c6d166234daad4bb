//! `fabkit surrogate` run for real (in-process ranks over libfabric shm,
//! with and without the same-node shortcut, and processes under mpirun on
//! MPI windows): exact keys give the uncached grid bit for bit, rounded
//! keys report the error this test computes again from the grids, and bad
//! arguments are one line and exit status 2.

use std::collections::HashMap;
use std::path::Path;
use std::process::{Command, Output};

mod common;
use common::{fabkit, mpirun, output};

use serde_json::Value;

fn run(args: &[&str]) -> Output {
    output(fabkit().args(args))
}

/// A small model: 16x8 cells, 24 steps, a cheap solver, and batches
/// small enough that a rank's later batches of a step find what its
/// earlier ones wrote.
const SMALL: [&str; 9] = [
    "surrogate",
    "--batch",
    "8",
    "--grid",
    "16x8",
    "--steps",
    "24",
    "--substeps",
    "20",
];

/// A `--grids` CSV: per cell, the nine species.
fn grid(path: &Path) -> Vec<[f64; 9]> {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let mut lines = text.lines();
    assert!(lines.next().unwrap().starts_with("x,y,H,O,"));
    lines
        .map(|l| {
            let v: Vec<f64> = l.split(',').skip(2).map(|x| x.parse().unwrap()).collect();
            v.try_into().unwrap()
        })
        .collect()
}

/// Runs `launcher` (fabkit itself, or mpirun) with SMALL, `extra`, and
/// JSON and grids into `dir`; the report.
fn report_with(launcher: Command, dir: &Path, extra: &[&str]) -> Value {
    let json = dir.join("r.json");
    let grids = dir.join("grids");
    let mut args: Vec<&str> = SMALL.to_vec();
    let (j, g) = (json.to_str().unwrap(), grids.to_str().unwrap());
    args.extend(["--json", j, "--grids", g]);
    args.extend(extra);
    let mut cmd = launcher;
    let out = output(cmd.args(&args));
    assert!(out.status.success(), "{cmd:?}");
    serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap()
}

fn report(dir: &Path, extra: &[&str]) -> Value {
    report_with(fabkit(), dir, extra)
}

/// Every row of `v` kept the uncached grid of `dir` bit for bit, after
/// hits that made a difference.
fn assert_exact(v: &Value, dir: &Path, rows: usize) {
    let runs = v["runs"].as_array().unwrap();
    assert_eq!(runs.len(), rows, "{v:#}");
    let plain = std::fs::read(dir.join("grids/uncached-20.csv")).unwrap();
    for r in runs {
        let name = r["variant"].as_str().unwrap();
        // The cache was used: cells ahead of the front share their inputs.
        assert!(r["hit_rate"].as_f64().unwrap() > 0.1, "{name}: {r:#}");
        let cached = std::fs::read(dir.join(format!("grids/{name}-dexact-20.csv")));
        assert!(cached.unwrap() == plain, "{name}: the grids differ");
        for e in r["error"]["max"].as_array().unwrap() {
            assert_eq!(e.as_f64(), Some(0.0), "{name}: {r:#}");
        }
    }
}

#[test]
fn exact_keys_give_the_uncached_grid_bit_for_bit_in_every_variant() {
    for path in [&["-n", "2"][..], &["-n", "2", "--shm"], &["-n", "3"]] {
        let dir = tempfile::tempdir().unwrap();
        let extra = [&["--digits", "exact", "--rounds", "1"][..], path].concat();
        let v = report(dir.path(), &extra);
        assert_exact(&v, dir.path(), 4);
    }
}

#[test]
fn exact_keys_give_the_uncached_grid_over_mpi_windows() {
    let dir = tempfile::tempdir().unwrap();
    let extra = [
        "--digits", "exact", "--mpi", "allocate", "-v", "lockfree", "--rounds", "1",
    ];
    let v = report_with(mpirun(2), dir.path(), &extra);
    assert_exact(&v, dir.path(), 1);
    assert_eq!(v["runs"][0]["ranks"], 2);
}

#[test]
fn rounded_keys_report_the_error_the_grids_show() {
    let dir = tempfile::tempdir().unwrap();
    let floor = 1e-6;
    let v = report(
        dir.path(),
        &[
            "--digits", "2", "-v", "lockfree", "-n", "1", "--floor", "1e-6", "--rounds", "2",
        ],
    );
    let r = &v["runs"][0];
    let want = grid(&dir.path().join("grids/uncached-20.csv"));
    let got = grid(&dir.path().join("grids/lockfree-d2-20.csv"));
    assert_eq!(got.len(), 16 * 8);
    // One rank: both rounds give the same grid, so their largest and
    // mean error are this one's.
    let mut max = [0.0f64; 9];
    let mut mean = [0.0f64; 9];
    let scale: Vec<f64> = (0..9)
        .map(|s| want.iter().map(|w| w[s].abs()).fold(0.0, f64::max))
        .collect();
    for (g, w) in got.iter().zip(&want) {
        for s in 0..9 {
            let below = (floor * scale[s]).max(f64::MIN_POSITIVE);
            let e = (g[s] - w[s]).abs() / w[s].abs().max(below);
            max[s] = max[s].max(e);
            mean[s] += e / want.len() as f64;
        }
    }
    // Two digits change the grid: the check below is not of zeros.
    assert!(max.iter().any(|&e| e > 1e-6), "{max:?}");
    let close = |a: f64, b: f64| (a - b).abs() <= 1e-12 * a.abs().max(b.abs()).max(1e-300);
    let species: Vec<&str> = r["error"]["species"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s.as_str().unwrap())
        .collect();
    let reported = |k: &str| -> HashMap<&str, f64> {
        species
            .iter()
            .zip(r["error"][k].as_array().unwrap())
            .map(|(s, e)| (*s, e.as_f64().unwrap()))
            .collect()
    };
    let (rmax, rmean) = (reported("max"), reported("mean"));
    for (s, name) in species.iter().enumerate() {
        assert!(
            close(rmax[name], max[s]),
            "{name}: {} vs {}",
            rmax[name],
            max[s]
        );
        assert!(
            close(rmean[name], mean[s]),
            "{name}: {} vs {}",
            rmean[name],
            mean[s]
        );
    }
}

#[test]
fn charts_are_drawn_per_solver_cost() {
    let dir = tempfile::tempdir().unwrap();
    let charts = dir.path().join("charts");
    // SMALL but for its one solver cost.
    let mut args: Vec<&str> = SMALL
        .iter()
        .filter(|a| **a != "--substeps" && **a != "20")
        .copied()
        .collect();
    args.extend(["-v", "fine", "--digits", "exact,4", "--substeps", "10,20"]);
    args.extend(["--rounds", "1"]);
    args.extend(["--charts", charts.to_str().unwrap()]);
    let out = run(&args);
    assert!(out.status.success());
    let table = String::from_utf8_lossy(&out.stdout);
    assert_eq!(table.lines().filter(|l| l.starts_with("fine ")).count(), 4);
    for f in ["speedup-10", "speedup-20", "error-10", "error-20"] {
        let svg = std::fs::read_to_string(charts.join(format!("{f}.svg"))).unwrap();
        assert!(svg.starts_with("<svg") && svg.contains("fine"), "{f}");
    }
}

#[test]
fn bad_arguments_are_one_line_and_exit_2() {
    let max = u64::MAX.to_string();
    for bad in [
        &["--grid", "0x5"][..],
        &["--grid", "2000x2000"],
        &["--grid", "48"],
        &["--grid", "axb"],
        &["--steps", "0"],
        &["--steps", &max],
        &["--substeps", "0"],
        &["--substeps", "1e300"],
        &["--digits", "0"],
        &["--digits", "16"],
        &["--digits", "exact,exact"],
        &["--digits", "two"],
        &["--substeps", "5,5"],
        &["--floor", "0"],
        &["--floor", "1e300"],
        &["--floor", "nan"],
        &["--rounds", "0"],
        &["--batch", "0"],
        &["--buckets", "1"],
        &["-p", "udp", "-v", "fine"],
        &["--charts", "/proc/no/such"],
        &["--grids", "/proc"],
        &["--json", "/proc/no.json"],
    ] {
        let out = run(&[&["surrogate"][..], bad].concat());
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{bad:?}: {err}");
        assert_eq!(err.trim().lines().count(), 1, "{bad:?}: {err}");
    }
}

#[test]
fn a_refused_run_leaves_no_output_files_behind() {
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("r.json");
    // --mpi without an MPI launcher is refused after the output paths are
    // named; the JSON file must not be left empty behind it.
    let out = run(&[
        "surrogate",
        "--mpi",
        "allocate",
        "--json",
        json.to_str().unwrap(),
    ]);
    assert_eq!(out.status.code(), Some(2));
    assert!(!json.exists());
    // A writable one is probed and removed again before the next output
    // path is refused.
    let out = run(&[
        "surrogate",
        "--json",
        json.to_str().unwrap(),
        "--grids",
        "/proc",
    ]);
    assert_eq!(out.status.code(), Some(2));
    assert!(!json.exists());
}

/// `fabkit plot` redraws a surrogate report's charts from the report alone
/// (the kept one in results/), with the line where the cache stops paying;
/// and refuses, in one line with status 2, a report with no folder to draw
/// into, a folder that is a file, and a speed-up no run could measure.
#[test]
fn plot_redraws_a_surrogate_reports_charts_from_the_report_alone() {
    let kept = Path::new(env!("CARGO_MANIFEST_DIR")).join("../results/surrogate/shm/report.json");
    let dir = tempfile::tempdir().unwrap();
    let charts = dir.path().join("charts");
    let (k, c) = (kept.to_str().unwrap(), charts.to_str().unwrap());
    let out = run(&["plot", k, "-o", c]);
    assert!(out.status.success(), "{out:?}");
    let mut names: Vec<String> = std::fs::read_dir(&charts)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    assert_eq!(
        names,
        [
            "error-100.svg",
            "error-25.svg",
            "error-400.svg",
            "speedup-100.svg",
            "speedup-25.svg",
            "speedup-400.svg"
        ]
    );
    let speedup = std::fs::read_to_string(charts.join("speedup-100.svg")).unwrap();
    assert!(speedup.contains(">1: below it the cache slows the run<"));
    let refused = |args: &[&str], want: &str| {
        let out = run(args);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
        assert_eq!(err.lines().count(), 1, "{args:?}: {err}");
        assert!(err.contains(want), "{args:?}: {err}");
    };
    refused(&["plot", k], "with -o DIR");
    let file = dir.path().join("a-file");
    std::fs::write(&file, "").unwrap();
    refused(&["plot", k, "-o", file.to_str().unwrap()], "not a folder");
    refused(&["plot", k, "-o", "-"], "not a folder");
    let mut v: Value = serde_json::from_str(&std::fs::read_to_string(&kept).unwrap()).unwrap();
    v["runs"][0]["speedup"] = serde_json::json!(1e300);
    let edited = dir.path().join("edited.json");
    std::fs::write(&edited, v.to_string()).unwrap();
    refused(
        &["plot", edited.to_str().unwrap(), "-o", c],
        "run 0's speedup is 1e300",
    );
}
