//! `fabkit plot`: line charts (SVG) and a markdown table from the JSON that
//! `fabkit perf` and `fabkit mpi-perf` write, so native fabric and MPI can be
//! seen on one chart.

use std::fmt::Write as _;
use std::path::PathBuf;

use anyhow::{Context, Result};

use crate::dhtbench::report::{name, variant_name};
use crate::exit::usage;
use crate::flags::from_file;
use crate::perf::report::Report;
use crate::perf::Point;
use crate::Over;
use clap::{Args, ValueEnum};
use fabkit_core::provenance::Launcher;
use serde_json::Value;

/// What the y axis shows.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum Metric {
    /// Millions of transfers per second.
    Rate,
    /// Megabytes per second.
    Bandwidth,
    /// Median latency, microseconds (latency runs).
    Latency,
}

impl Metric {
    fn label(self) -> &'static str {
        match self {
            Metric::Rate => "Mtransfers/s",
            Metric::Bandwidth => "MB/s",
            Metric::Latency => "median latency (us)",
        }
    }

    fn value(self, p: &Point) -> Option<f64> {
        match self {
            Metric::Rate => Some(p.rates.mxfers_per_sec),
            Metric::Bandwidth => Some(p.rates.mb_per_sec),
            Metric::Latency => p.latency.map(|l| l.p50),
        }
    }
}

/// `fabkit plot` options.
#[derive(Args, Debug, Clone)]
#[command(after_help = "\
Exit status: 0 when drawn; 2 when an input file is missing, unreadable or \
not perf/mpi-perf JSON (plot measures nothing: its inputs are part of the \
command line, so both are usage errors to fix there); 1 when the chart or \
table cannot be written.")]
pub struct PlotArgs {
    /// Result files written with --json by perf or mpi-perf (drawn against
    /// the transfer size), by dht (drawn against the rank count, or a soak
    /// over time), or one by surrogate (its speed-up and accuracy charts).
    #[arg(required = true)]
    pub inputs: Vec<PathBuf>,
    /// What to plot.
    #[arg(short, long, value_enum, default_value = "rate")]
    pub metric: Metric,
    /// Chart title.
    #[arg(long, default_value = "fabkit")]
    pub title: String,
    /// Output SVG file (`-`: standard output); for a surrogate report, the
    /// folder its charts go to (made if missing).
    #[arg(short, long)]
    pub output: Option<PathBuf>,
    /// Also write a markdown table of every point to FILE (`-`: standard
    /// output).
    #[arg(long, value_name = "FILE")]
    pub markdown: Option<PathBuf>,
    /// dht reports: only the runs of this workload (paper, load-a, a, ...).
    #[arg(long)]
    pub workload: Option<String>,
    /// dht reports: only the runs of this phase (write, read, mixed, load,
    /// run).
    #[arg(long)]
    pub phase: Option<String>,
}

/// One line of the chart.
#[derive(Debug, Clone)]
pub struct Series {
    /// Legend text.
    pub label: String,
    /// (bytes, value) points.
    pub points: Vec<(f64, f64)>,
    /// Measured over MPI windows (drawn dashed).
    pub mpi: bool,
}

/// A run's legend: its label, the first point's operation, and whether
/// its ranks were threads of one process.
fn label_of(r: &Report) -> String {
    let m = &r.meta;
    let op = r.points.first().map_or_else(|| "?".into(), |p| name(p.op));
    let threads = match m.provenance.launcher {
        Some(l) => l == Launcher::Threads,
        None => older::in_process(m.provenance.launch.as_deref()),
    };
    let threads = if threads { " (in-process)" } else { "" };
    let label = match &m.label {
        Some(l) => l.clone(),
        None => older::label(&m.method),
    };
    format!("{label} {op}{threads}")
}

/// Whether a run was measured over MPI windows.
fn over_mpi(r: &Report) -> bool {
    r.meta.over.unwrap_or_else(|| older::over(&r.meta.method)) == Over::Mpi
}

/// Reading a file of an older fabkit, which did not record as values what
/// a chart needs: its label (`label`), whether it ran over MPI (`over`)
/// and whether its ranks were threads (`launcher`) are taken from the
/// words it did record, as `fabkit plot` always took them. A file of this
/// fabkit has all three, and none of this is read for it.
mod older {
    use crate::Over;

    /// The label of a run from its `method`: "libfabric shm on shm,
    /// threads 1" -> "shm"; "mpi one-sided, osc pt2pt, window allocate,
    /// sync lockall" -> "MPI pt2pt allocate lockall".
    pub fn label(method: &str) -> String {
        method
            .strip_prefix("libfabric ")
            .and_then(|s| s.split(" on ").next())
            .map(str::to_string)
            .unwrap_or_else(|| {
                let words: Vec<&str> = method
                    .split(", ")
                    .skip(1)
                    .filter_map(|part| part.split_once(' ').map(|(_, v)| v))
                    .collect();
                format!("MPI {}", words.join(" "))
            })
    }

    /// What carried a run, from its `method`: every libfabric run's
    /// starts "libfabric ", every other was MPI's.
    pub fn over(method: &str) -> Over {
        if method.starts_with("libfabric ") {
            Over::Fabric
        } else {
            Over::Mpi
        }
    }

    /// Whether the ranks were threads, from `launch` ("2 ranks in-process
    /// (threads)").
    pub fn in_process(launch: Option<&str>) -> bool {
        launch.is_some_and(|l| l.contains("threads"))
    }
}

/// Loads result files into series for `metric`.
pub fn load(inputs: &[PathBuf], metric: Metric) -> Result<(Vec<Series>, Vec<Report>)> {
    let mut series = Vec::new();
    let mut docs = Vec::new();
    for path in inputs {
        // An input the command line names that cannot be read is a usage
        // error, like one that is not perf JSON (see the help's exit status).
        let text = std::fs::read_to_string(path)
            .map_err(|e| usage(format!("reading {}: {e}", path.display())))?;
        let not_perf = |e: serde_json::Error| {
            usage(format!(
                "{} is not a fabkit perf JSON file: {e}",
                path.display()
            ))
        };
        let v: Value = serde_json::from_str(&text).map_err(not_perf)?;
        if !v["points"].is_array() {
            return Err(usage(format!(
                "{} has no `points`: write it with perf --json",
                path.display()
            )));
        }
        let r: Report = serde_json::from_value(v).map_err(not_perf)?;
        // Both axes are logarithmic: a size below 1 B (log2 of 0 is -inf)
        // would stretch the grid without end, so it is refused; values that
        // are 0 or missing are left out, as before.
        if let Some((i, p)) = r.points.iter().enumerate().find(|(_, p)| p.bytes < 1) {
            return Err(usage(format!(
                "{}: point {i} has {} bytes; a chart of sizes needs at least 1 B per point \
                 (was the file written by perf --json?)",
                path.display(),
                p.bytes
            )));
        }
        for (i, p) in r.points.iter().enumerate() {
            let bytes = format!("{}: point {i}'s bytes", path.display());
            from_file::check(&bytes, p.bytes as f64, from_file::BYTES).map_err(usage)?;
            if let Some(y) = metric.value(p).filter(|y| *y != 0.0) {
                let what = format!("{}: point {i}'s value", path.display());
                from_file::check(&what, y, (1e-12, 1e15)).map_err(usage)?;
            }
        }
        let pts: Vec<(f64, f64)> = r
            .points
            .iter()
            .filter_map(|p| Some((p.bytes as f64, metric.value(p)?)))
            .filter(|&(_, y)| y.is_finite() && y > 0.0)
            .collect();
        if pts.is_empty() {
            return Err(usage(format!(
                "{} has no {} values (latency needs a --pattern lat run)",
                path.display(),
                metric.label()
            )));
        }
        series.push(Series {
            label: label_of(&r),
            points: pts,
            mpi: over_mpi(&r),
        });
        docs.push(r);
    }
    Ok((series, docs))
}

/// Renders series as an SVG line chart: log2 size on x, log10 value on y;
/// MPI's lines are dashed, so native fabric and MPI tell apart in print.
pub fn svg(series: &[Series], title: &str, ylabel: &str) -> String {
    let lines: Vec<fabkit_chart::LogLine> = series
        .iter()
        .map(|se| fabkit_chart::LogLine {
            label: se.label.clone(),
            points: se.points.clone(),
            dashed: se.mpi,
        })
        .collect();
    fabkit_chart::log_lines(title, "transfer size (bytes)", ylabel, &lines, &size_label)
}

/// 4096 -> "4K": a size on the chart's x axis.
fn size_label(b: f64) -> String {
    let b = b as u64;
    match b {
        b if b >= 1 << 20 => format!("{}M", b >> 20),
        b if b >= 1 << 10 => format!("{}K", b >> 10),
        b => b.to_string(),
    }
}

/// A markdown table of every point of every run.
pub fn markdown(docs: &[Report]) -> String {
    let mut s = String::from(
        "| run | op | pattern | bytes | Mxfers/s | MB/s | p50 us | p99 us | commit |\n\
         |---|---|---|---:|---:|---:|---:|---:|---|\n",
    );
    for r in docs {
        let label = label_of(r);
        let commit = Some(r.meta.provenance.commit.as_str()).filter(|c| !c.is_empty());
        for p in &r.points {
            let f = |x: Option<f64>, prec: usize| x.map_or("-".into(), |x| format!("{x:.prec$}"));
            let _ = writeln!(
                s,
                "| {} | {} | {} | {} | {} | {} | {} | {} | {} |",
                label,
                name(p.op),
                name(p.pattern),
                p.bytes,
                f(Some(p.rates.mxfers_per_sec), 3),
                f(Some(p.rates.mb_per_sec), 1),
                f(p.latency.map(|l| l.p50), 2),
                f(p.latency.map(|l| l.p99), 2),
                commit.unwrap_or("?"),
            );
        }
    }
    s
}

/// Writes `text` to `path`, or to standard output when it is `-`.
fn write(path: &std::path::Path, text: &str) -> Result<()> {
    if path.as_os_str() == "-" {
        use std::io::Write as _;
        let mut out = std::io::stdout().lock();
        out.write_all(text.as_bytes())
            .and_then(|()| out.flush())
            .context("writing to standard output")
    } else {
        std::fs::write(path, text).with_context(|| format!("writing {}", path.display()))
    }
}

/// Refuses a dht report whose figures no run could have measured (see
/// [`from_file`]), before they reach a chart's axis or a table.
fn check_dht_numbers(r: &crate::dhtbench::report::Report) -> std::result::Result<(), String> {
    for (i, run) in r.runs.iter().enumerate() {
        let rate = from_file::RATE;
        for (what, v) in [
            ("ops_per_sec", run.ops_per_sec),
            ("ops_per_sec_min", run.ops_per_sec_min),
            ("ops_per_sec_max", run.ops_per_sec_max),
        ] {
            from_file::check_or_zero(&format!("run {i}'s {what}"), v, rate)?;
        }
        let l = &run.latency_us;
        for (what, v) in [("p50", Some(l.p50)), ("p99", l.p99)] {
            if let Some(v) = v {
                from_file::check(
                    &format!("run {i}'s latency {what}"),
                    v,
                    from_file::LATENCY_US,
                )?;
            }
        }
        if run.ranks == 0 || run.ranks > 1 << 20 {
            return Err(format!(
                "run {i} has {} ranks, outside 1 to 2^20: give a file fabkit wrote, unedited",
                run.ranks
            ));
        }
    }
    Ok(())
}

/// Reads `fabkit dht` reports (JSON with `meta` and `runs`), or `None`
/// when the first input is not one (then they are perf results).
fn load_dht(inputs: &[PathBuf]) -> Result<Option<Vec<crate::dhtbench::report::Report>>> {
    let mut out = Vec::new();
    for (i, path) in inputs.iter().enumerate() {
        let text = std::fs::read_to_string(path)
            .map_err(|e| usage(format!("reading {}: {e}", path.display())))?;
        let v: Value = serde_json::from_str(&text).map_err(|e| {
            usage(format!(
                "{} is not a fabkit perf JSON file nor a dht report: {e}",
                path.display()
            ))
        })?;
        if !v["runs"].is_array() {
            if i == 0 {
                return Ok(None);
            }
            return Err(usage(format!(
                "{} is not a fabkit dht report, unlike {}: plot one kind at a time",
                path.display(),
                inputs[0].display()
            )));
        }
        let r: crate::dhtbench::report::Report = serde_json::from_value(v).map_err(|e| {
            usage(format!(
                "{} is not a fabkit dht report: {e}",
                path.display()
            ))
        })?;
        check_dht_numbers(&r).map_err(|e| usage(format!("{}: {e}", path.display())))?;
        out.push(r);
    }
    Ok(Some(out))
}

/// A markdown table of `fabkit dht` runs: one row each, with what tells
/// two alike apart (record, depth, how the ranks were launched) and its
/// source, the input file `files` names in the same order as `reports`.
fn dht_markdown(reports: &[crate::dhtbench::report::Report], files: &[PathBuf]) -> String {
    let mut t = String::from(
        "| system | variant | transport | workload | dist | phase | record | ranks | launch | batch | depth | Mops/s | min-max | p50 us | p99 us | commit | file |\n|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n",
    );
    for (rep, file) in reports.iter().zip(files) {
        let file_name = file.file_name().map_or_else(
            || file.display().to_string(),
            |n| n.to_string_lossy().into_owned(),
        );
        for r in &rep.runs {
            let _ = writeln!(
                t,
                "| {} | {} | {} | {} | {} | {} | {},{} | {} | {} | {} | {} | {:.3} | {:.3}-{:.3} | {:.2} | {} | {} | {} |",
                r.system,
                r.variant.map_or_else(|| "-".into(), variant_name),
                r.transport,
                name(r.workload),
                name(r.distribution),
                r.phase,
                r.record.key,
                r.record.value,
                r.ranks,
                rep.meta.provenance.launch.as_deref().unwrap_or("-"),
                r.batch,
                r.depth,
                r.ops_per_sec / 1e6,
                r.ops_per_sec_min / 1e6,
                r.ops_per_sec_max / 1e6,
                r.latency_us.p50,
                crate::dhtbench::report::us(r.latency_us.p99),
                rep.meta.provenance.commit,
                file_name
            );
        }
    }
    t
}

/// A `fabkit surrogate` report (its meta names the grid), or `None` when
/// `path` holds something else.
fn load_surrogate(path: &std::path::Path) -> Result<Option<crate::surrogate::report::Report>> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| usage(format!("reading {}: {e}", path.display())))?;
    let Ok(v) = serde_json::from_str::<Value>(&text) else {
        return Ok(None);
    };
    if !v["meta"]["grid"].is_string() {
        return Ok(None);
    }
    let r: crate::surrogate::report::Report = serde_json::from_value(v).map_err(|e| {
        usage(format!(
            "{} is not a fabkit surrogate report: {e}",
            path.display()
        ))
    })?;
    let bad = |e: String| usage(format!("{}: {e}", path.display()));
    if r.runs.is_empty() {
        return Err(bad("the report has no runs".into()));
    }
    for (i, row) in r.runs.iter().enumerate() {
        for (what, v) in [
            ("speedup", row.speedup),
            ("speedup_min", row.speedup_min),
            ("speedup_max", row.speedup_max),
        ] {
            from_file::check(&format!("run {i}'s {what}"), v, from_file::RATIO).map_err(bad)?;
        }
        for &e in &row.error.max {
            from_file::check_or_zero(
                &format!("run {i}'s largest error"),
                e,
                from_file::RELATIVE_ERROR,
            )
            .map_err(bad)?;
        }
    }
    Ok(Some(r))
}

/// Runs `fabkit plot`: perf and mpi-perf results against the transfer
/// size (`--metric` chooses the y axis), dht reports as M operations/s
/// against the rank count, a soak's memory over time, or a surrogate
/// report's speed-up and accuracy charts.
pub fn command(a: &PlotArgs) -> Result<bool> {
    if let Some(rep) = load_surrogate(&a.inputs[0])? {
        let (Some(dir), [_]) = (&a.output, &a.inputs[..]) else {
            return Err(usage(
                "a surrogate report is plotted alone, with -o DIR: the folder its charts go to",
            ));
        };
        if dir.is_file() || dir.as_os_str() == "-" {
            return Err(usage(format!(
                "-o {}: not a folder; a surrogate report's charts go to one (made if missing)",
                dir.display()
            )));
        }
        std::fs::create_dir_all(dir).with_context(|| format!("making {}", dir.display()))?;
        let charts = crate::surrogate::report::charts(&rep);
        for (name, svg) in &charts {
            write(&dir.join(name), svg)?;
        }
        println!("wrote {} charts to {}", charts.len(), dir.display());
        return Ok(true);
    }
    if let Some(mut reports) = load_dht(&a.inputs)? {
        // A soak (fabkit dht --duration): its memory over time.
        if let [r] = &reports[..] {
            if let (Some(s), Some(out)) = (&r.soak, &a.output) {
                let title = if a.title.is_empty() {
                    format!("soak: {}", r.meta.provider)
                } else {
                    a.title.clone()
                };
                write(out, &crate::dhtbench::soak::chart(s, &title))?;
                return Ok(true);
            }
        }
        // fabkit dht reports: throughput against the rank count.
        for r in &mut reports {
            r.runs.retain(|x| {
                a.workload.as_ref().is_none_or(|w| *w == name(x.workload))
                    && a.phase.as_ref().is_none_or(|p| p == x.phase.as_str())
            });
        }
        if reports.iter().all(|r| r.runs.is_empty()) {
            return Err(usage("no run of the inputs matches --workload and --phase"));
        }
        if let Some(out) = &a.output {
            let svg = crate::dhtbench::report::ranks_chart(&reports, &a.title)?;
            write(out, &svg)?;
        }
        let md = dht_markdown(&reports, &a.inputs);
        if let Some(p) = &a.markdown {
            write(p, &md)?;
        } else if a.output.is_none() {
            print!("{md}");
        }
        return Ok(true);
    }
    let (series, docs) = load(&a.inputs, a.metric)?;
    if let Some(out) = &a.output {
        write(out, &svg(&series, &a.title, a.metric.label()))?;
    }
    if let Some(md) = &a.markdown {
        write(md, &markdown(&docs))?;
    }
    if a.output.is_none() && a.markdown.is_none() {
        print!("{}", markdown(&docs));
    }
    Ok(true)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A file as an older fabkit wrote it: no label, over or launcher.
    fn file(method: &str, pts: &[(u64, f64)]) -> Value {
        serde_json::json!({
            "meta": {"method": method, "commit": "abc123"},
            "points": pts.iter().map(|&(b, r)| serde_json::json!({
                "op": "write", "pattern": "bw", "bytes": b,
                "rates": {"mxfers_per_sec": r, "mb_per_sec": r * b as f64},
                "latency": null
            })).collect::<Vec<_>>()
        })
    }

    /// The same, as plot reads it.
    fn doc(method: &str, pts: &[(u64, f64)]) -> Report {
        serde_json::from_value(file(method, pts)).unwrap()
    }

    fn launched(mut r: Report, launch: &str) -> Report {
        r.meta.provenance.launch = Some(launch.into());
        r
    }

    #[test]
    fn a_label_comes_from_its_field_and_older_files_from_the_method() {
        // The field keeps what the prose method's parsing dropped.
        let mut v = doc("libfabric shm on shm, threads 1, busy-poll", &[(8, 1.0)]);
        assert_eq!(label_of(&v), "shm write");
        v.meta.label = Some("shm (busy-poll)".into());
        assert_eq!(label_of(&v), "shm (busy-poll) write");
        let v = launched(v, "2 ranks in-process (threads)");
        assert_eq!(label_of(&v), "shm (busy-poll) write (in-process)");
    }

    #[test]
    fn a_file_of_this_fabkit_is_read_by_its_values_not_its_words() {
        let mut v = file("libfabric shm on shm, threads 1", &[(8, 1.0)]);
        v["meta"]["label"] = "mine".into();
        v["meta"]["over"] = "mpi".into();
        v["meta"]["launch"] = "2 ranks in-process (threads)".into();
        v["meta"]["launcher"] = "processes".into();
        let r: Report = serde_json::from_value(v).unwrap();
        assert_eq!(label_of(&r), "mine write");
        assert!(over_mpi(&r));
        // An older file's words say the opposite of each.
        let old = doc("libfabric shm on shm, threads 1", &[(8, 1.0)]);
        assert!(!over_mpi(&old));
        assert!(over_mpi(&doc("mpi one-sided, osc sm", &[(8, 1.0)])));
    }

    #[test]
    fn svg_has_one_line_per_series_inside_the_frame() {
        let series = vec![
            Series {
                label: "shm write".into(),
                points: vec![(8.0, 0.7), (4096.0, 0.5), (1048576.0, 0.01)],
                mpi: false,
            },
            Series {
                label: "MPI osc sm write".into(),
                points: vec![(8.0, 50.0), (4096.0, 20.0)],
                mpi: true,
            },
        ];
        let s = svg(&series, "a < b", "Mtransfers/s");
        assert_eq!(s.matches("<polyline").count(), 2);
        // Five points, and a marker in each legend entry.
        assert_eq!(s.matches("<circle").count(), 7);
        assert!(s.contains("a &lt; b"), "titles are escaped");
        assert!(s.contains("stroke-dasharray"), "MPI lines are dashed");
        assert!(s.contains(">1M<") || s.contains(">4K<"));
        let num = |c: &str, k: &str| -> f64 {
            let i = c.find(k).unwrap() + k.len();
            c[i..].split('"').next().unwrap().parse().unwrap()
        };
        // Every point lies inside the plot frame.
        let frame = s
            .lines()
            .find(|l| l.contains(r#"fill="none" stroke="black""#))
            .unwrap();
        let (fx, fy) = (num(frame, "x=\""), num(frame, "y=\""));
        let (fw, fh) = (num(frame, "width=\""), num(frame, "height=\""));
        // (The legend's markers are the larger ones.)
        let points = s
            .split("<circle ")
            .skip(1)
            .filter(|c| c.contains(r#"r="3""#));
        assert_eq!(points.clone().count(), 5);
        for c in points {
            let (x, y) = (num(c, "cx=\""), num(c, "cy=\""));
            assert!(
                (fx..=fx + fw).contains(&x) && (fy..=fy + fh).contains(&y),
                "{x},{y}"
            );
        }
    }

    #[test]
    fn labels_and_markdown_say_where_numbers_came_from() {
        let d = doc(
            "libfabric tcp;ofi_rxm on lo, threads 1",
            &[(8, 0.2), (184, 0.19)],
        );
        assert_eq!(label_of(&d), "tcp;ofi_rxm write");
        let t = launched(d.clone(), "2 ranks in-process (threads)");
        assert_eq!(label_of(&t), "tcp;ofi_rxm write (in-process)");
        let m = doc(
            "mpi one-sided, osc sm, window allocate, sync lockall",
            &[(8, 40.0)],
        );
        assert_eq!(label_of(&m), "MPI sm allocate lockall write");
        let md = markdown(&[d, m]);
        assert_eq!(md.lines().count(), 2 + 3);
        assert!(
            md.contains("| tcp;ofi_rxm write | write | bw | 184 | 0.190 | 35.0 | - | - | abc123 |"),
            "{md}"
        );
    }
}
