//! A sweep's CSV summarised: the repetitions of each point folded into a
//! median with the lowest and highest value (JSON), and per experiment the
//! charts: throughput and message rate against the swept axis, one line
//! per other setting; how each point spread its packets over the TX
//! queues; the sizes of the packets handed to the driver.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::Serialize;

use crate::spec::SpecError;
use crate::sweep::valid_experiment;
use fabkit_chart::{self as chart, Line};

/// The settings that make a point, in the order a chart prefers them on
/// its x axis.
pub const AXIS_COLUMNS: &[&str] = &[
    "queues",
    "mtu",
    "streams",
    "len",
    "send",
    "txqueuelen",
    "qdisc",
    "offloads",
    "policy",
    "cpus",
    "gateway",
    "udp_socket",
    "recv",
    "rate_bps",
    "proto",
];

/// The figures summarised, with their chart labels.
pub const METRICS: &[(&str, &str)] = &[
    ("gbit_s", "Gbit/s"),
    ("msgs_per_s", "messages/s"),
    ("client_tx_pps", "client TX packets/s"),
    ("server_rx_pps", "server RX packets/s"),
    ("loss", "lost messages"),
    ("reordered", "reordered messages"),
    ("retransmits", "TCP retransmits"),
    ("cycles_per_msg", "cycles per message"),
];

/// The median, lowest and highest of a figure over the repetitions.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct Spread {
    /// Values (repetitions that reported the figure).
    pub n: usize,
    /// Median (the mean of the middle two for an even count).
    pub median: f64,
    /// Lowest.
    pub min: f64,
    /// Highest.
    pub max: f64,
}

impl Spread {
    /// The spread of `v`; `None` when empty.
    pub fn of(v: &[f64]) -> Option<Spread> {
        let mut v: Vec<f64> = v.iter().copied().filter(|x| x.is_finite()).collect();
        if v.is_empty() {
            return None;
        }
        v.sort_by(f64::total_cmp);
        let n = v.len();
        let median = if n % 2 == 1 {
            v[n / 2]
        } else {
            (v[n / 2 - 1] + v[n / 2]) / 2.0
        };
        Some(Spread {
            n,
            median,
            min: v[0],
            max: v[n - 1],
        })
    }
}

/// One point (all its repetitions) in one direction.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Group {
    /// Experiment name.
    pub experiment: String,
    /// Direction of the rows (`client->server`).
    pub direction: String,
    /// The point's settings ([`AXIS_COLUMNS`]).
    pub settings: BTreeMap<String, String>,
    /// Repetitions found.
    pub repetitions: usize,
    /// Figures by name ([`METRICS`]).
    pub figures: BTreeMap<String, Spread>,
    /// Share of the TX packets each queue carried, percent, over all
    /// repetitions.
    pub tx_queue_share: Vec<f64>,
    /// Packets handed to the driver per log2 size bucket, summed.
    pub tx_size_log2: Vec<u64>,
    /// What the counters said of the policy, each distinct verdict once.
    pub policy_effect: Vec<String>,
}

fn numbers(s: &str) -> Vec<u64> {
    s.split(' ').filter_map(|x| x.parse().ok()).collect()
}

/// Folds a sweep CSV into groups, in the order the points first appear.
pub fn summarize(csv: &str) -> Result<Vec<Group>, SpecError> {
    // Columns are found by name, so files of earlier layouts still read.
    // Rows of another length are read, then refused with their line.
    let mut rd = csv::ReaderBuilder::new()
        .flexible(true)
        .from_reader(csv.as_bytes());
    let not_sweep = || {
        SpecError(
            "not a sweep CSV (no key, experiment and direction columns): give the file \
             `ipoib-eval sweep -o` wrote"
                .into(),
        )
    };
    let header = rd.headers().map_err(|_| not_sweep())?.clone();
    let col = |name: &str| header.iter().position(|h| h == name);
    let (Some(key), Some(exp), Some(dir)) = (col("key"), col("experiment"), col("direction"))
    else {
        return Err(not_sweep());
    };
    // Rows of one point differ only in their `rep=` word.
    let mut order: Vec<(String, String)> = Vec::new();
    let mut rows: BTreeMap<(String, String), Vec<csv::StringRecord>> = BTreeMap::new();
    for f in rd.records() {
        let f = f.map_err(|e| SpecError(format!("sweep CSV: {e}")))?;
        let line = f.position().map_or(0, csv::Position::line);
        if f.len() != header.len() {
            return Err(SpecError(format!(
                "sweep CSV line {line}: {} fields, the header has {}: the file is damaged",
                f.len(),
                header.len()
            )));
        }
        if !valid_experiment(&f[exp]) {
            return Err(SpecError(format!(
                "sweep CSV line {line}: experiment `{}` is not a name of letters, digits, - _ or .",
                f[exp].escape_default()
            )));
        }
        let point = f[key]
            .split(' ')
            .filter(|w| !w.starts_with("rep="))
            .collect::<Vec<_>>()
            .join(" ");
        let id = (point, f[dir].to_string());
        if !rows.contains_key(&id) {
            order.push(id.clone());
        }
        rows.entry(id).or_default().push(f);
    }
    let mut out = Vec::new();
    for id in order {
        let rs = &rows[&id];
        let first = &rs[0];
        let settings = AXIS_COLUMNS
            .iter()
            .filter_map(|c| col(c).map(|i| (c.to_string(), first[i].to_string())))
            .collect();
        let mut figures = BTreeMap::new();
        for (m, _) in METRICS {
            if let Some(i) = col(m) {
                let v: Vec<f64> = rs.iter().filter_map(|r| r[i].parse().ok()).collect();
                if let Some(s) = Spread::of(&v) {
                    figures.insert(m.to_string(), s);
                }
            }
        }
        let sum_lists = |name: &str| -> Vec<u64> {
            let Some(i) = col(name) else {
                return Vec::new();
            };
            rs.iter().fold(Vec::new(), |mut acc: Vec<u64>, r| {
                let v = numbers(&r[i]);
                if acc.len() < v.len() {
                    acc.resize(v.len(), 0);
                }
                for (a, x) in acc.iter_mut().zip(v) {
                    *a = a.saturating_add(x);
                }
                acc
            })
        };
        let per_q = sum_lists("tx_queue_packets");
        let total: u128 = per_q.iter().map(|&x| u128::from(x)).sum();
        let mut effects: Vec<String> = Vec::new();
        if let Some(i) = col("policy_effect") {
            for r in rs {
                if !effects.iter().any(|e| *e == r[i]) {
                    effects.push(r[i].to_string());
                }
            }
        }
        out.push(Group {
            experiment: first[exp].to_string(),
            direction: id.1.clone(),
            settings,
            repetitions: rs.len(),
            figures,
            tx_queue_share: per_q
                .iter()
                .map(|&p| {
                    if total == 0 {
                        0.0
                    } else {
                        p as f64 * 100.0 / total as f64
                    }
                })
                .collect(),
            tx_size_log2: sum_lists("tx_size_log2"),
            policy_effect: effects,
        });
    }
    Ok(out)
}

/// Orders category values: numerically when they all are numbers.
fn sort_values(v: &mut [String]) {
    if v.iter().all(|x| x.parse::<f64>().is_ok()) {
        v.sort_by(|a, b| {
            a.parse::<f64>()
                .unwrap_or(0.0)
                .total_cmp(&b.parse::<f64>().unwrap_or(0.0))
        });
    } else {
        v.sort();
    }
}

/// The charts of one experiment's groups: `(file name, SVG)`.
pub fn charts(experiment: &str, groups: &[&Group]) -> Vec<(String, String)> {
    let varying: Vec<&str> = AXIS_COLUMNS
        .iter()
        .copied()
        .filter(|c| {
            let mut v: Vec<&String> = groups.iter().filter_map(|g| g.settings.get(*c)).collect();
            v.sort();
            v.dedup();
            v.len() > 1
        })
        .collect();
    let x_axis = varying.first().copied();
    let mut cats: Vec<String> = match x_axis {
        Some(x) => groups
            .iter()
            .filter_map(|g| g.settings.get(x).cloned())
            .collect(),
        None => vec![experiment.to_string()],
    };
    sort_values(&mut cats);
    cats.dedup();
    let cat_of = |g: &Group| match x_axis {
        Some(x) => g.settings.get(x).cloned().unwrap_or_default(),
        None => experiment.to_string(),
    };
    // Every other varying setting (and the direction) tells lines apart.
    let line_of = |g: &Group| {
        let mut parts: Vec<String> = varying
            .iter()
            .skip(1)
            .map(|c| format!("{c}={}", g.settings.get(*c).map_or("", |s| s.as_str())))
            .collect();
        if g.direction != "client->server" {
            parts.push(g.direction.clone());
        }
        if parts.is_empty() {
            experiment.to_string()
        } else {
            parts.join(" ")
        }
    };
    let mut line_names: Vec<String> = groups.iter().map(|g| line_of(g)).collect();
    line_names.sort();
    line_names.dedup();
    let xlabel = x_axis.unwrap_or("experiment");
    let mut out = Vec::new();
    for (metric, label, file) in [
        ("gbit_s", "Gbit/s", "gbit"),
        ("msgs_per_s", "messages/s (datagrams for UDP)", "rate"),
    ] {
        let series: Vec<Line> = line_names
            .iter()
            .map(|name| Line {
                label: name.clone(),
                points: cats
                    .iter()
                    .map(|c| {
                        groups
                            .iter()
                            .find(|g| line_of(g) == *name && cat_of(g) == *c)
                            .and_then(|g| g.figures.get(metric))
                            .map(|s| (s.median, s.min, s.max))
                    })
                    .collect(),
            })
            .collect();
        out.push((
            format!("{experiment}-{file}.svg"),
            chart::lines(
                &format!("{experiment}: {label}, median and range of the repetitions"),
                xlabel,
                label,
                &cats,
                &series,
            ),
        ));
    }
    // Queue balance: per point, the share of each TX queue.
    let names: Vec<String> = groups
        .iter()
        .map(|g| {
            // A setting, as the legend's: what every point shares is then
            // said once.
            let mut n = match x_axis {
                Some(x) => format!("{x}={}", cat_of(g)),
                None => cat_of(g),
            };
            let l = line_of(g);
            if l != experiment {
                n = format!("{n} {l}");
            }
            n
        })
        .collect();
    let queues = groups
        .iter()
        .map(|g| g.tx_queue_share.len())
        .max()
        .unwrap_or(0)
        .min(chart::COLORS.len());
    if queues > 0 {
        let series: Vec<(String, Vec<f64>)> = (0..queues)
            .map(|q| {
                (
                    format!("TX queue {q}"),
                    groups
                        .iter()
                        .map(|g| g.tx_queue_share.get(q).copied().unwrap_or(0.0))
                        .collect(),
                )
            })
            .collect();
        out.push((
            format!("{experiment}-queues.svg"),
            chart::bars(
                &format!("{experiment}: share of TX packets per queue (eBPF)"),
                "point",
                "% of TX packets",
                &names,
                &series,
            ),
        ));
    }
    // Sizes handed to the driver: GSO super-packets show above the MTU.
    let buckets = groups
        .iter()
        .map(|g| g.tx_size_log2.len())
        .max()
        .unwrap_or(0);
    if buckets > 6 {
        let cats: Vec<String> = (6..buckets)
            .map(|b| {
                let v = 1u64 << b;
                if v >= 1024 {
                    format!("{}K", v >> 10)
                } else {
                    v.to_string()
                }
            })
            .collect();
        // At most one colour per line: eight points to a chart.
        let chunks: Vec<Vec<(&&Group, &String)>> = groups
            .iter()
            .zip(&names)
            .collect::<Vec<_>>()
            .chunks(chart::COLORS.len())
            .map(<[_]>::to_vec)
            .collect();
        for (k, chunk) in chunks.iter().enumerate() {
            let series: Vec<Line> = chunk
                .iter()
                .map(|(g, n)| {
                    let total: u128 = g.tx_size_log2.iter().map(|&x| u128::from(x)).sum();
                    Line {
                        label: (*n).clone(),
                        points: (6..buckets)
                            .map(|b| {
                                let share = g.tx_size_log2.get(b).map_or(0.0, |&c| {
                                    if total == 0 {
                                        0.0
                                    } else {
                                        c as f64 * 100.0 / total as f64
                                    }
                                });
                                Some((share, share, share))
                            })
                            .collect(),
                    }
                })
                .collect();
            let (file, part) = if chunks.len() == 1 {
                (format!("{experiment}-sizes.svg"), String::new())
            } else {
                (
                    format!("{experiment}-sizes-{}.svg", k + 1),
                    format!(" ({} of {})", k + 1, chunks.len()),
                )
            };
            out.push((
                file,
                chart::lines_with(
                    &format!(
                        "{experiment}: sizes of the TX packets handed to the driver (eBPF){part}"
                    ),
                    "packet size from (bytes, log2 buckets; above the MTU: GSO super-packets)",
                    "% of TX packets",
                    &cats,
                    &series,
                    &chart::Extras {
                        scale: chart::Scale::Linear,
                        ..chart::Extras::default()
                    },
                ),
            ));
        }
    }
    out
}

/// The commits that measured a sweep CSV's rows (its `commit` column),
/// each once, in the order the rows first name them; none for a CSV
/// without the column.
pub fn measured_commits(csv: &str) -> Vec<String> {
    let mut rd = csv::ReaderBuilder::new()
        .flexible(true)
        .from_reader(csv.as_bytes());
    let Some(col) = rd
        .headers()
        .ok()
        .and_then(|h| h.iter().position(|c| c == "commit"))
    else {
        return Vec::new();
    };
    let mut out: Vec<String> = Vec::new();
    for r in rd.records().flatten() {
        if let Some(c) = r.get(col).filter(|c| !out.iter().any(|o| o == c)) {
            out.push(c.to_string());
        }
    }
    out
}

/// What `summary.json` holds: a sweep's points, the CSV they were read
/// from, the commits that measured them, and apart from those the
/// provenance of the summary itself, which may be made again later from
/// the kept CSV by another build (its own command and commit).
#[derive(Clone, Debug, Serialize)]
pub struct Summary {
    /// Each point's repetitions folded ([`summarize`]).
    pub points: Vec<Group>,
    /// The sweep CSV, as its path was given.
    pub source: String,
    /// The commits that measured the points ([`measured_commits`]).
    pub measured_commits: Vec<String>,
    /// Where, from what command and by what build this summary was made.
    pub summarized: fabkit_core::provenance::Provenance,
}

impl Summary {
    /// The summary of the sweep CSV `csv`, read from `csv_path`, made by
    /// the build `summarized` describes.
    pub fn of(
        csv_path: &Path,
        csv: &str,
        summarized: fabkit_core::provenance::Provenance,
    ) -> Result<Summary, SpecError> {
        Ok(Summary {
            points: summarize(csv)?,
            source: csv_path.display().to_string(),
            measured_commits: measured_commits(csv),
            summarized,
        })
    }
}

/// Writes `summary.json` and every experiment's charts of `summary`'s
/// points into `dir`; returns the files written.
pub fn write(summary: &Summary, dir: &Path) -> Result<Vec<PathBuf>, String> {
    let io = |what: &Path, e: std::io::Error| format!("{}: {e}", what.display());
    std::fs::create_dir_all(dir).map_err(|e| io(dir, e))?;
    let mut written = Vec::new();
    // Through a JSON value, whose keys are sorted: the layout every kept
    // summary.json has (it was built with json!).
    let json = serde_json::to_value(summary)
        .and_then(|v| serde_json::to_string_pretty(&v))
        .map_err(|e| format!("summary: {e}"))?;
    let p = dir.join("summary.json");
    std::fs::write(&p, json + "\n").map_err(|e| io(&p, e))?;
    written.push(p);
    let groups = &summary.points;
    let mut experiments: Vec<&str> = Vec::new();
    for g in groups {
        if !experiments.contains(&g.experiment.as_str()) {
            experiments.push(&g.experiment);
        }
    }
    for e in experiments {
        let of: Vec<&Group> = groups.iter().filter(|g| g.experiment == e).collect();
        for (name, svg) in charts(e, &of) {
            let p = dir.join(name);
            std::fs::write(&p, svg).map_err(|err| io(&p, err))?;
            written.push(p);
        }
    }
    Ok(written)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fields_unquote_as_written() {
        // Commas, quotes and empty fields, as the csv crate writes them,
        // read back as they were.
        let text = csv(&[&[
            ("key", "exp=e rep=0"),
            ("experiment", "e"),
            ("direction", "client->server"),
            ("cpus", "b,c"),
            ("qdisc", "d\"e"),
            ("policy_effect", "x,\"y\""),
        ]]);
        assert!(text.contains(",\"b,c\","), "{text}");
        let g = summarize(&text).unwrap();
        assert_eq!(g[0].settings["cpus"], "b,c");
        assert_eq!(g[0].settings["qdisc"], "d\"e");
        assert_eq!(g[0].settings["proto"], "");
        assert_eq!(g[0].policy_effect, ["x,\"y\""]);
    }

    /// Every key of a sweep's `summary.json`, as it is spelled: a field
    /// renamed or dropped fails here (new ones are added to the list).
    /// `settings` and `figures` are keyed by [`AXIS_COLUMNS`] and
    /// [`METRICS`], which a point of a sweep CSV fills.
    const JSON_KEYS: &[&str] = &[
        "points",
        "points[].direction",
        "points[].experiment",
        "points[].figures",
        "points[].figures.client_tx_pps",
        "points[].figures.client_tx_pps.max",
        "points[].figures.client_tx_pps.median",
        "points[].figures.client_tx_pps.min",
        "points[].figures.client_tx_pps.n",
        "points[].figures.cycles_per_msg",
        "points[].figures.cycles_per_msg.max",
        "points[].figures.cycles_per_msg.median",
        "points[].figures.cycles_per_msg.min",
        "points[].figures.cycles_per_msg.n",
        "points[].figures.gbit_s",
        "points[].figures.gbit_s.max",
        "points[].figures.gbit_s.median",
        "points[].figures.gbit_s.min",
        "points[].figures.gbit_s.n",
        "points[].figures.loss",
        "points[].figures.loss.max",
        "points[].figures.loss.median",
        "points[].figures.loss.min",
        "points[].figures.loss.n",
        "points[].figures.msgs_per_s",
        "points[].figures.msgs_per_s.max",
        "points[].figures.msgs_per_s.median",
        "points[].figures.msgs_per_s.min",
        "points[].figures.msgs_per_s.n",
        "points[].figures.reordered",
        "points[].figures.reordered.max",
        "points[].figures.reordered.median",
        "points[].figures.reordered.min",
        "points[].figures.reordered.n",
        "points[].figures.retransmits",
        "points[].figures.retransmits.max",
        "points[].figures.retransmits.median",
        "points[].figures.retransmits.min",
        "points[].figures.retransmits.n",
        "points[].figures.server_rx_pps",
        "points[].figures.server_rx_pps.max",
        "points[].figures.server_rx_pps.median",
        "points[].figures.server_rx_pps.min",
        "points[].figures.server_rx_pps.n",
        "points[].policy_effect",
        "points[].repetitions",
        "points[].settings",
        "points[].settings.cpus",
        "points[].settings.gateway",
        "points[].settings.len",
        "points[].settings.mtu",
        "points[].settings.offloads",
        "points[].settings.policy",
        "points[].settings.proto",
        "points[].settings.qdisc",
        "points[].settings.queues",
        "points[].settings.rate_bps",
        "points[].settings.recv",
        "points[].settings.send",
        "points[].settings.streams",
        "points[].settings.txqueuelen",
        "points[].settings.udp_socket",
        "points[].tx_queue_share",
        "points[].tx_size_log2",
        "source",
        "measured_commits",
        "summarized",
        "summarized.command",
        "summarized.commit",
        "summarized.cores",
        "summarized.fabkit",
        "summarized.host",
        "summarized.machine",
    ];

    #[test]
    fn golden_the_json_keys_are_todays() {
        let mut row: Vec<(&str, &str)> = vec![
            ("key", "exp=e rep=0"),
            ("experiment", "e"),
            ("direction", "client->server"),
        ];
        row.extend(METRICS.iter().map(|(m, _)| (*m, "1")));
        row.push(("commit", "a06b33d"));
        let text = csv(&[&row]);
        let summary = Summary::of(Path::new("sweep.csv"), &text, crate::provenance()).unwrap();
        let dir = tempfile::tempdir().unwrap();
        write(&summary, dir.path()).unwrap();
        let text = std::fs::read_to_string(dir.path().join("summary.json")).unwrap();
        let json: serde_json::Value = serde_json::from_str(&text).unwrap();
        fabkit_core::schema::same_keys(&json, JSON_KEYS).unwrap_or_else(|e| panic!("{e}"));
    }

    #[test]
    fn a_summary_says_which_commits_measured_it_apart_from_the_one_that_made_it() {
        let row = |c: &'static str| {
            vec![
                ("key", "exp=e rep=0"),
                ("experiment", "e"),
                ("direction", "client->server"),
                ("commit", c),
            ]
        };
        let (a, b) = (row("a06b33d"), row("c0ffee-dirty"));
        let text = csv(&[&a, &b, &a]);
        assert_eq!(measured_commits(&text), ["a06b33d", "c0ffee-dirty"]);
        assert!(measured_commits("key,experiment\nx,e\n").is_empty());
        let made = fabkit_core::provenance::Provenance {
            commit: "f00d".into(),
            ..fabkit_core::provenance::Provenance::default()
        };
        let s = Summary::of(Path::new("s.csv"), &text, made).unwrap();
        let json = serde_json::to_value(&s).unwrap();
        assert_eq!(
            json["measured_commits"],
            serde_json::json!(["a06b33d", "c0ffee-dirty"])
        );
        assert_eq!(json["summarized"]["commit"], "f00d");
        assert_eq!(json["source"], "s.csv");
    }

    #[test]
    fn spreads() {
        assert_eq!(Spread::of(&[]), None);
        let s = Spread::of(&[3.0, 1.0, 2.0, f64::NAN]).unwrap();
        assert_eq!((s.n, s.median, s.min, s.max), (3, 2.0, 1.0, 3.0));
        assert_eq!(Spread::of(&[1.0, 4.0]).unwrap().median, 2.5);
    }

    /// A synthetic sweep CSV: the real header, rows filled in by name.
    fn csv(rows: &[&[(&str, &str)]]) -> String {
        let header = crate::sweep::header();
        let mut w = ::csv::Writer::from_writer(Vec::new());
        w.write_record(&header).unwrap();
        for r in rows {
            w.write_record(
                header
                    .iter()
                    .map(|h| r.iter().find(|(k, _)| *k == h).map_or("", |(_, v)| *v)),
            )
            .unwrap();
        }
        String::from_utf8(w.into_inner().unwrap()).unwrap()
    }

    #[test]
    fn repetitions_fold_into_one_point_with_its_spread() {
        let row = |q: &'static str, rep: &'static str, gbit: &'static str, per_q: &'static str| {
            vec![
                (
                    "key",
                    if q == "1" {
                        "exp=e q=1 rep=X"
                    } else {
                        "exp=e q=2 rep=X"
                    },
                ),
                ("experiment", "e"),
                ("rep", rep),
                ("queues", q),
                ("policy", "rr"),
                ("direction", "client->server"),
                ("gbit_s", gbit),
                ("tx_queue_packets", per_q),
                ("tx_size_log2", "0 0 0 0 0 0 0 0 0 0 4"),
                ("policy_effect", "took effect"),
            ]
        };
        let mk = |v: Vec<(&'static str, &'static str)>| v;
        let rows = [
            mk(row("1", "0", "10", "100")),
            mk(row("2", "0", "18", "50 50")),
            mk(row("1", "1", "12", "100")),
            mk(row("2", "1", "20", "70 30")),
            mk(row("1", "2", "11", "100")),
        ];
        // The key's rep word differs per row in a real file.
        let text =
            csv(&rows.iter().map(|r| r.as_slice()).collect::<Vec<_>>()).replace("rep=X", "rep=0");
        let g = summarize(&text).unwrap();
        assert_eq!(g.len(), 2);
        assert_eq!(g[0].settings["queues"], "1");
        assert_eq!(g[0].repetitions, 3);
        let s = g[0].figures["gbit_s"];
        assert_eq!((s.median, s.min, s.max), (11.0, 10.0, 12.0));
        assert_eq!(g[1].tx_queue_share, [60.0, 40.0]);
        assert_eq!(g[1].tx_size_log2[10], 8);
        assert_eq!(g[0].policy_effect, ["took effect"]);
        let ch = charts("e", &g.iter().collect::<Vec<_>>());
        let names: Vec<&str> = ch.iter().map(|(n, _)| n.as_str()).collect();
        assert_eq!(
            names,
            ["e-gbit.svg", "e-rate.svg", "e-queues.svg", "e-sizes.svg"]
        );
        // Queues on x: categories 1 and 2, one line, two medians (and the
        // legend's marker).
        assert!(ch[0].1.contains(">queues<"));
        assert_eq!(ch[0].1.matches("<circle").count(), 3);
        assert!(summarize("a,b\n1,2\n")
            .unwrap_err()
            .to_string()
            .contains("not a sweep CSV"));
        assert!(summarize("")
            .unwrap_err()
            .to_string()
            .contains("not a sweep CSV"));
        let escaping = text.replacen(",e,", ",../x,", 1);
        assert!(summarize(&escaping)
            .unwrap_err()
            .to_string()
            .contains("experiment `../x`"));
        let damaged = crate::report::row::to_text::<crate::sweep::SweepRow>(&[], true) + "1,2\n";
        assert!(summarize(&damaged)
            .unwrap_err()
            .to_string()
            .contains("line 2"));
    }
}
