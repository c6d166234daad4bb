//! Output of `fabkit perf`: the fixed-column table fabtests and OSU users read
//! at a glance, CSV and JSON for scripts, and the packet-rate wall.

use std::fmt::Write as _;

use anyhow::Result;
use fabkit_core::provenance::Provenance;
use serde::{Deserialize, Serialize};

use super::stats::{knee, Knee};
use super::Point;

/// Where the run came from, stored with the numbers. What `fabkit plot`,
/// `dht --bound` and `model --perf` read back: a field a file lacks (one
/// of an older fabkit, or one a script wrote with only what its reader
/// needs) reads as empty or absent.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Meta {
    /// Provider (for MPI runs: `mpi osc=...`).
    #[serde(default)]
    pub provider: String,
    /// How the data moved: provider and domain, or MPI component, window
    /// and synchronisation.
    #[serde(default)]
    pub method: String,
    /// A chart's legend for this run, made from its settings (provider
    /// or MPI component, window and synchronisation, busy-poll, threads),
    /// not parsed from `method`; absent in files of an older fabkit.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub label: Option<String>,
    /// What carried the operations (libfabric or MPI windows); absent in
    /// files of an older fabkit.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub over: Option<crate::Over>,
    /// Who executes the provider's reads, writes and atomics at the
    /// target (`fabkit info`'s columns; what the DHT's `auto` path reads),
    /// for `fabkit model` to say which path the rule takes; absent for MPI
    /// and in files of an older fabkit.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub executes: Option<fabkit_fabric::Executes>,
    /// Command, commit, host, machine, launch and fabkit version.
    #[serde(flatten)]
    pub provenance: Provenance,
}

/// A whole run, as `--json` writes it and its readers take it.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Report {
    /// Provenance.
    pub meta: Meta,
    /// One point per size.
    pub points: Vec<Point>,
    /// Packet-rate wall of a bandwidth sweep over 2+ sizes.
    #[serde(default)]
    pub knee: Option<Knee>,
}

impl Report {
    /// Builds the report and finds the knee of bandwidth sweeps.
    pub fn new(meta: Meta, points: Vec<Point>) -> Report {
        let is_bw = points.iter().all(|p| p.pattern == super::Pattern::Bw);
        let pts: Vec<(usize, f64, f64)> = points
            .iter()
            .map(|p| (p.bytes, p.rates.mxfers_per_sec, p.rates.mb_per_sec))
            .collect();
        let knee = if is_bw { knee(&pts, 0.2) } else { None };
        Report { meta, points, knee }
    }

    /// The fixed-column table.
    pub fn table(&self) -> String {
        let mut s = String::new();
        let lat = self.points.iter().any(|p| p.latency.is_some());
        let _ = write!(
            s,
            "{:>9} {:>9} {:>9} {:>11} {:>10} {:>11}",
            "bytes", "iters", "total", "MB/sec", "usec/xfer", "Mxfers/sec"
        );
        if lat {
            let _ = write!(s, " {:>9} {:>9} {:>9} {:>9}", "min", "p50", "p99", "max");
        }
        s.push('\n');
        for p in &self.points {
            let _ = write!(
                s,
                "{:>9} {:>9} {:>8.3}s {:>11.2} {:>10.2} {:>11.3}",
                human(p.bytes),
                p.iters,
                p.secs,
                p.rates.mb_per_sec,
                p.rates.usec_per_xfer,
                p.rates.mxfers_per_sec
            );
            if let Some(l) = &p.latency {
                let _ = write!(
                    s,
                    " {:>9.2} {:>9.2} {:>9.2} {:>9.2}",
                    l.min, l.p50, l.p99, l.max
                );
            }
            s.push('\n');
        }
        if let Some(k) = &self.knee {
            let _ = match k.first_bound_bytes {
                Some(b) => writeln!(
                    s,
                    "message-rate plateau {:.3} Mxfers/s up to {}; bandwidth bound from {} \
                     (peak {:.1} MB/s)",
                    k.plateau_mxfers_per_sec,
                    human(k.last_flat_bytes),
                    human(b),
                    k.peak_mb_per_sec
                ),
                None => writeln!(
                    s,
                    "message rate flat at {:.3} Mxfers/s over the whole sweep (peak {:.1} MB/s)",
                    k.plateau_mxfers_per_sec, k.peak_mb_per_sec
                ),
            };
        }
        s
    }

    /// CSV, one row per point, with provenance columns.
    pub fn csv(&self) -> String {
        let mut w = csv::Writer::from_writer(Vec::new());
        for p in &self.points {
            let l = p.latency;
            let f = |v: Option<f64>| v.map_or(String::new(), |v| format!("{v:.3}"));
            let row = CsvRow {
                provider: self.meta.provider.to_lowercase(),
                op: format!("{:?}", p.op).to_lowercase(),
                pattern: format!("{:?}", p.pattern).to_lowercase(),
                bidir: p.bidir,
                bytes: p.bytes,
                iters: p.iters,
                secs: format!("{:.6}", p.secs),
                window: p.window,
                mb_per_sec: format!("{:.3}", p.rates.mb_per_sec),
                usec_per_xfer: format!("{:.4}", p.rates.usec_per_xfer),
                mxfers_per_sec: format!("{:.5}", p.rates.mxfers_per_sec),
                lat_min_us: f(l.map(|l| l.min)),
                lat_p50_us: f(l.map(|l| l.p50)),
                lat_p99_us: f(l.map(|l| l.p99)),
                lat_max_us: f(l.map(|l| l.max)),
            };
            // Into a Vec: the only error would be a failed write to it.
            w.serialize(row).expect("writing CSV to memory");
        }
        let bytes = w.into_inner().expect("flushing CSV to memory");
        String::from_utf8(bytes).expect("CSV of UTF-8 fields is UTF-8")
    }
}

/// One CSV row of `fabkit perf` (its field names are the header). Rates
/// and latencies are written to a fixed number of decimals.
#[derive(Serialize)]
struct CsvRow {
    provider: String,
    op: String,
    pattern: String,
    bidir: bool,
    bytes: usize,
    iters: u64,
    secs: String,
    window: usize,
    mb_per_sec: String,
    usec_per_xfer: String,
    mxfers_per_sec: String,
    lat_min_us: String,
    lat_p50_us: String,
    lat_p99_us: String,
    lat_max_us: String,
}

/// 4096 -> "4K", 184 -> "184".
pub fn human(b: usize) -> String {
    match b {
        b if b >= 1 << 20 && b % (1 << 20) == 0 => format!("{}M", b >> 20),
        b if b >= 1 << 10 && b % (1 << 10) == 0 => format!("{}K", b >> 10),
        b => b.to_string(),
    }
}

/// Prints the table and writes JSON/CSV for a perf or mpi-perf run on
/// `provider`, `over` libfabric or MPI, whose ranks' `provenance` says
/// how they were started.
pub fn emit(
    sweep: &super::SweepArgs,
    provenance: Provenance,
    (provider, over, executes): (&str, crate::Over, Option<fabkit_fabric::Executes>),
    (method, label): (&str, &str),
    points: Vec<Point>,
) -> Result<bool> {
    let launch = provenance.launch.clone().unwrap_or_default();
    let meta = Meta {
        provider: provider.to_string(),
        method: method.to_string(),
        label: Some(label.to_string()),
        over: Some(over),
        executes,
        provenance,
    };
    let report = Report::new(meta, points);
    println!(
        "# fabkit: {:?} {:?}{} | {} | {launch}",
        sweep.op,
        sweep.pattern,
        if sweep.bidir { " bidirectional" } else { "" },
        method
    );
    print!("{}", report.table());
    if let Some(p) = &sweep.json {
        crate::output::write_out(p, &(serde_json::to_string_pretty(&report)? + "\n"))?;
    }
    if let Some(p) = &sweep.csv {
        crate::output::write_out(p, &report.csv())?;
    }
    Ok(true)
}

#[cfg(test)]
mod tests {
    use super::super::stats::{Latency, Rates};
    use super::super::{Pattern, PerfOp, Point};
    use super::*;

    fn meta() -> Meta {
        Meta {
            provider: "tcp;ofi_rxm".into(),
            method: "libfabric tcp;ofi_rxm on lo".into(),
            label: Some("tcp;ofi_rxm".into()),
            over: Some(crate::Over::Fabric),
            executes: Some(fabkit_fabric::Executes::of("tcp;ofi_rxm", "lo", false)),
            provenance: Provenance {
                command: "fabkit perf".into(),
                commit: "abc".into(),
                host: "h".into(),
                machine: Some("test".into()),
                cores: Some(2),
                launch: Some("threads".into()),
                launcher: Some(fabkit_core::provenance::Launcher::Threads),
                fabkit: Some("0.1.0".into()),
            },
        }
    }

    fn point(bytes: usize, mx: f64, pattern: Pattern) -> Point {
        let iters = 1000;
        let secs = iters as f64 / (mx * 1e6);
        Point {
            op: PerfOp::Write,
            pattern,
            bytes,
            iters,
            secs,
            window: 64,
            threads: 1,
            bidir: false,
            rates: Rates::new(bytes, iters, secs),
            latency: (pattern == Pattern::Lat).then(|| {
                let mut h = crate::hist::Hist::new();
                [1000, 2000, 3000].into_iter().for_each(|ns| h.record(ns));
                Latency::from_hist(&h).unwrap()
            }),
            completion: None,
            ordering: None,
            cpu_ns_per_xfer: None,
        }
    }

    /// Every key `fabkit perf --json` (and `mpi-perf --json`) writes, as
    /// it is spelled: a field renamed or dropped fails here (new ones are
    /// added to the list).
    const JSON_KEYS: &[&str] = &[
        "knee",
        "knee.first_bound_bytes",
        "knee.last_flat_bytes",
        "knee.peak_mb_per_sec",
        "knee.plateau_mxfers_per_sec",
        "meta",
        "meta.command",
        "meta.commit",
        "meta.cores",
        "meta.fabkit",
        "meta.host",
        "meta.executes",
        "meta.executes.atomics",
        "meta.executes.rma",
        "meta.label",
        "meta.launch",
        "meta.launcher",
        "meta.machine",
        "meta.method",
        "meta.over",
        "meta.provider",
        "points",
        "points[].bidir",
        "points[].bytes",
        "points[].completion",
        "points[].cpu_ns_per_xfer",
        "points[].iters",
        "points[].latency",
        "points[].latency.max",
        "points[].latency.mean",
        "points[].latency.min",
        "points[].latency.p50",
        "points[].latency.p99",
        "points[].op",
        "points[].ordering",
        "points[].ordering.delivery_complete",
        "points[].ordering.fenced",
        "points[].ordering.read_backs",
        "points[].ordering.scattered",
        "points[].ordering.unordered",
        "points[].pattern",
        "points[].rates",
        "points[].rates.mb_per_sec",
        "points[].rates.mxfers_per_sec",
        "points[].rates.usec_per_xfer",
        "points[].secs",
        "points[].threads",
        "points[].window",
    ];

    /// `fabkit perf --csv`'s header, column by column.
    const CSV_HEADER: &str = "provider,op,pattern,bidir,bytes,iters,secs,window,mb_per_sec,\
        usec_per_xfer,mxfers_per_sec,lat_min_us,lat_p50_us,lat_p99_us,lat_max_us";

    #[test]
    fn golden_the_json_keys_and_the_csv_header_are_todays() {
        // Every optional part filled, so that its keys show.
        let mut p = point(8, 1.0, Pattern::Lat);
        p.completion = Some(super::super::WriteCompletion::Delivery);
        p.ordering = Some(fabkit_fabric::OrderingStats::default());
        p.cpu_ns_per_xfer = Some(1.0);
        let mut r = Report::new(meta(), vec![p]);
        r.knee = Some(Knee {
            plateau_mxfers_per_sec: 1.0,
            last_flat_bytes: 8,
            first_bound_bytes: Some(64),
            peak_mb_per_sec: 1.0,
        });
        let json = serde_json::to_value(&r).unwrap();
        fabkit_core::schema::same_keys(&json, JSON_KEYS).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(r.csv().lines().next(), Some(CSV_HEADER));
    }

    #[test]
    fn table_has_fixed_columns_and_the_knee() {
        let pts = vec![
            point(8, 1.0, Pattern::Bw),
            point(64, 1.0, Pattern::Bw),
            point(4096, 0.5, Pattern::Bw),
        ];
        let r = Report::new(meta(), pts);
        let t = r.table();
        let lines: Vec<&str> = t.lines().collect();
        assert!(lines[0].contains("bytes") && lines[0].contains("Mxfers/sec"));
        assert_eq!(lines.len(), 5, "{t}");
        // Columns line up: every row as wide as the header.
        assert!(lines[1..4].iter().all(|l| l.len() == lines[0].len()), "{t}");
        assert!(lines[3].trim_start().starts_with("4K"));
        assert!(lines[4].contains("plateau 1.000 Mxfers/s up to 64; bandwidth bound from 4K"));
    }

    #[test]
    fn latency_table_and_csv_carry_percentiles() {
        let r = Report::new(meta(), vec![point(184, 0.1, Pattern::Lat)]);
        assert!(r.knee.is_none());
        let t = r.table();
        assert!(t.lines().next().unwrap().contains("p99"));
        let csv = r.csv();
        let mut rd = csv::Reader::from_reader(csv.as_bytes());
        let header = rd.headers().unwrap().clone();
        let rows: Vec<csv::StringRecord> = rd.records().map(|r| r.unwrap()).collect();
        assert_eq!(rows.len(), 1);
        let cells = &rows[0];
        assert_eq!(cells.len(), header.len());
        assert_eq!(&header[0], "provider");
        assert_eq!(&cells[0], "tcp;ofi_rxm");
        assert_eq!(&cells[1], "write");
        assert_eq!(&cells[4], "184");
        assert_eq!(&cells[12], "2.000", "p50 of 1,2,3 us");
    }
}
