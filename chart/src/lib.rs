//! The charts fabkit's tools draw from their measurements: `ipoib-eval`'s
//! sweep summaries and the DHT benchmark's rank-count chart. A crate of its
//! own so that a tool can draw without taking a measuring crate (and its
//! eBPF loader or libfabric bindings) along.
//!
//! SVG charts with a categorical x axis (the values a sweep tried, evenly
//! spaced whatever their magnitude) and a linear y axis from zero:
//! [`lines`] with min-max whiskers, and grouped [`bars`]; and log-log
//! [`log_lines`] (sizes against rates, as `fabkit plot` draws). No dependency;
//! the output is plain SVG any browser shows.
//!
//! ```
//! use fabkit_chart::{lines, Line};
//!
//! let cats = ["1", "2", "4"].map(String::from).to_vec();
//! let gbit = Line {
//!     label: "udp gso".into(),
//!     points: vec![Some((9.1, 8.7, 9.4)), None, Some((21.0, 20.2, 21.9))],
//! };
//! let svg = lines("UDP over veth", "queues", "Gbit/s", &cats, &[gbit]);
//! assert!(svg.starts_with("<svg") && svg.contains("udp gso"));
//! ```
#![deny(unsafe_code)]
#![deny(missing_docs)]

use std::fmt::Write as _;

/// Colours of the series, in turn.
pub const COLORS: &[&str] = &[
    "#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#17becf",
];

/// Escapes text for SVG.
pub fn xml(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

/// One line: per category, the median and the lowest and highest value
/// (`None`: not measured there).
#[derive(Clone, Debug, PartialEq)]
pub struct Line {
    /// Legend text.
    pub label: String,
    /// One entry per category.
    pub points: Vec<Option<(f64, f64, f64)>>,
}

/// The frame shared by both kinds of chart.
struct Frame {
    w: f64,
    h: f64,
    l: f64,
    r: f64,
    t: f64,
    b: f64,
    ymax: f64,
    n: usize,
    /// Category labels too long for their slot are written slanted.
    slant: bool,
}

impl Frame {
    /// `legend` is the longest legend label, in characters: the legend
    /// column widens to hold it, the plot keeps its width.
    fn new(cats: &[String], ymax: f64, legend: usize) -> Frame {
        let n = cats.len().max(1);
        let r = (40.0 + legend as f64 * 7.0).clamp(300.0, 900.0);
        let (w, l) = (660.0 + r, 80.0);
        let longest = cats.iter().map(|c| c.chars().count()).max().unwrap_or(0);
        let slant = longest as f64 * 7.0 > (w - l - r) / n as f64;
        Frame {
            w,
            h: if slant { 640.0 } else { 540.0 },
            l,
            r,
            t: 50.0,
            b: if slant { 170.0 } else { 70.0 },
            ymax: nice_ceiling(ymax),
            n,
            slant,
        }
    }

    fn plot_w(&self) -> f64 {
        self.w - self.l - self.r
    }

    /// The centre of category `i`.
    fn x(&self, i: usize) -> f64 {
        self.l + (i as f64 + 0.5) / self.n as f64 * self.plot_w()
    }

    fn y(&self, v: f64) -> f64 {
        let v = v.clamp(0.0, self.ymax);
        self.h - self.b - v / self.ymax * (self.h - self.t - self.b)
    }

    /// Background, title, grid, ticks, axis labels.
    fn open(&self, s: &mut String, title: &str, xlabel: &str, ylabel: &str, cats: &[String]) {
        let (w, h, l, t, b) = (self.w, self.h, self.l, self.t, self.b);
        let _ = writeln!(
            s,
            r#"<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" font-family="sans-serif" font-size="12">"#
        );
        let _ = writeln!(s, r#"<rect width="{w}" height="{h}" fill="white"/>"#);
        let mid = l + self.plot_w() / 2.0;
        let _ = writeln!(
            s,
            r#"<text x="{mid}" y="28" font-size="15" text-anchor="middle">{}</text>"#,
            xml(title)
        );
        for k in 0..=5 {
            let v = self.ymax * f64::from(k) / 5.0;
            let y = self.y(v);
            let _ = writeln!(
                s,
                r##"<line x1="{l}" y1="{y:.1}" x2="{:.1}" y2="{y:.1}" stroke="#ddd"/><text x="{:.1}" y="{:.1}" text-anchor="end">{}</text>"##,
                l + self.plot_w(),
                l - 6.0,
                y + 4.0,
                tick(v)
            );
        }
        for (i, c) in cats.iter().enumerate() {
            let (x, y) = (self.x(i), h - b + 18.0);
            if self.slant {
                let _ = writeln!(
                    s,
                    r#"<text x="{x:.1}" y="{y:.1}" text-anchor="end" transform="rotate(-35 {x:.1} {y:.1})">{}</text>"#,
                    xml(c)
                );
            } else {
                let _ = writeln!(
                    s,
                    r#"<text x="{x:.1}" y="{y:.1}" text-anchor="middle">{}</text>"#,
                    xml(c)
                );
            }
        }
        let _ = writeln!(
            s,
            r#"<rect x="{l}" y="{t}" width="{:.1}" height="{:.1}" fill="none" stroke="black"/>"#,
            self.plot_w(),
            h - t - b
        );
        let _ = writeln!(
            s,
            r#"<text x="{mid}" y="{:.1}" text-anchor="middle">{}</text>"#,
            h - 20.0,
            xml(xlabel)
        );
        let ym = (t + h - b) / 2.0;
        let _ = writeln!(
            s,
            r#"<text x="20" y="{ym}" text-anchor="middle" transform="rotate(-90 20 {ym})">{}</text>"#,
            xml(ylabel)
        );
    }

    fn legend(&self, s: &mut String, i: usize, label: &str, color: &str) {
        let (lx, ly) = (self.w - self.r + 15.0, self.t + 10.0 + i as f64 * 18.0);
        let _ = writeln!(
            s,
            r#"<rect x="{lx}" y="{:.1}" width="14" height="8" fill="{color}"/><text x="{:.1}" y="{:.1}">{}</text>"#,
            ly - 4.0,
            lx + 20.0,
            ly + 4.0,
            xml(label)
        );
    }
}

/// 1, 2 or 5 times a power of ten, at least `v` (and above zero).
fn nice_ceiling(v: f64) -> f64 {
    if !v.is_finite() || v <= 0.0 {
        return 1.0;
    }
    let p = 10f64.powf(v.log10().floor());
    [1.0, 2.0, 5.0, 10.0]
        .iter()
        .map(|m| m * p)
        .find(|&c| c >= v)
        .unwrap_or(10.0 * p)
}

fn tick(v: f64) -> String {
    if v == 0.0 || (v.abs() >= 0.01 && v.abs() < 1e6) {
        let s = format!("{v:.2}");
        s.trim_end_matches('0').trim_end_matches('.').to_string()
    } else {
        format!("{v:.1e}")
    }
}

/// A line chart: one line per series over the categories, a marker at the
/// median and a whisker from the lowest to the highest value.
pub fn lines(title: &str, xlabel: &str, ylabel: &str, cats: &[String], series: &[Line]) -> String {
    let ymax = series
        .iter()
        .flat_map(|l| l.points.iter().flatten())
        .map(|p| p.2)
        .fold(0.0, f64::max);
    let legend = series.iter().map(|l| l.label.chars().count()).max();
    let f = Frame::new(cats, ymax, legend.unwrap_or(0));
    let mut s = String::new();
    f.open(&mut s, title, xlabel, ylabel, cats);
    for (k, line) in series.iter().enumerate() {
        let c = COLORS[k % COLORS.len()];
        // Past the colours, lines repeat them dashed.
        let dash = if k >= COLORS.len() {
            r#" stroke-dasharray="6 3""#
        } else {
            ""
        };
        // A run of measured categories is one polyline; a gap breaks it.
        let mut run: Vec<String> = Vec::new();
        let flush = |run: &mut Vec<String>, s: &mut String| {
            if run.len() > 1 {
                let _ = writeln!(
                    s,
                    r#"<polyline points="{}" fill="none" stroke="{c}" stroke-width="2"{dash}/>"#,
                    run.join(" ")
                );
            }
            run.clear();
        };
        for (i, p) in line.points.iter().enumerate() {
            let Some((med, lo, hi)) = *p else {
                flush(&mut run, &mut s);
                continue;
            };
            let x = f.x(i);
            run.push(format!("{x:.1},{:.1}", f.y(med)));
            let _ = writeln!(
                s,
                r#"<line x1="{x:.1}" y1="{:.1}" x2="{x:.1}" y2="{:.1}" stroke="{c}"/><circle cx="{x:.1}" cy="{:.1}" r="3.5" fill="{c}"/>"#,
                f.y(lo),
                f.y(hi),
                f.y(med)
            );
        }
        flush(&mut run, &mut s);
        f.legend(&mut s, k, &line.label, c);
    }
    s.push_str("</svg>\n");
    s
}

/// A grouped bar chart: per category, one bar per series.
pub fn bars(
    title: &str,
    xlabel: &str,
    ylabel: &str,
    cats: &[String],
    series: &[(String, Vec<f64>)],
) -> String {
    let ymax = series
        .iter()
        .flat_map(|(_, v)| v.iter().copied())
        .fold(0.0, f64::max);
    let legend = series.iter().map(|(l, _)| l.chars().count()).max();
    let f = Frame::new(cats, ymax, legend.unwrap_or(0));
    let mut s = String::new();
    f.open(&mut s, title, xlabel, ylabel, cats);
    let slot = f.plot_w() / f.n as f64 * 0.8;
    let bw = slot / series.len().max(1) as f64;
    for (k, (label, vals)) in series.iter().enumerate() {
        let c = COLORS[k % COLORS.len()];
        for (i, &v) in vals.iter().enumerate().take(cats.len()) {
            let x = f.x(i) - slot / 2.0 + k as f64 * bw;
            let y = f.y(v);
            let _ = writeln!(
                s,
                r#"<rect x="{x:.1}" y="{y:.1}" width="{:.1}" height="{:.1}" fill="{c}"/>"#,
                bw.max(1.0),
                (f.y(0.0) - y).max(0.0)
            );
        }
        f.legend(&mut s, k, label, c);
    }
    s.push_str("</svg>\n");
    s
}

/// A line of a [`log_lines`] chart.
#[derive(Clone, Debug, PartialEq)]
pub struct LogLine {
    /// Legend text.
    pub label: String,
    /// (x, y) points; those a log-log chart cannot place (x below 1, y at
    /// or below 0, not finite) are skipped for the axes.
    pub points: Vec<(f64, f64)>,
    /// Drawn dashed (a second family of lines: MPI beside native fabric).
    pub dashed: bool,
}

/// An SVG line chart with a log2 x axis (ticks named by `xtick`, e.g. sizes
/// as "4K") and a log10 y axis from the decades around the data, each line
/// with its markers and a legend to the right.
pub fn log_lines(
    title: &str,
    xlabel: &str,
    ylabel: &str,
    series: &[LogLine],
    xtick: &dyn Fn(f64) -> String,
) -> String {
    let (w, h) = (900.0, 560.0);
    let (l, r, t, b) = (80.0, 270.0, 50.0, 60.0);
    // Only points a log-log chart can place set the axes: one at 0 or
    // below (log -inf) would make the grid loops below endless.
    let mut all: Vec<(f64, f64)> = series
        .iter()
        .flat_map(|s| s.points.iter().copied())
        .filter(|&(x, y)| x.is_finite() && x >= 1.0 && y.is_finite() && y > 0.0)
        .collect();
    if all.is_empty() {
        all.push((1.0, 1.0));
    }
    let xmin = all
        .iter()
        .map(|p| p.0.log2())
        .fold(f64::INFINITY, f64::min)
        .floor();
    let xmax = all
        .iter()
        .map(|p| p.0.log2())
        .fold(f64::NEG_INFINITY, f64::max)
        .ceil()
        .max(xmin + 1.0);
    let ymin = all
        .iter()
        .map(|p| p.1.log10())
        .fold(f64::INFINITY, f64::min)
        .floor();
    let ymax = all
        .iter()
        .map(|p| p.1.log10())
        .fold(f64::NEG_INFINITY, f64::max)
        .ceil()
        .max(ymin + 1.0);
    let px = |x: f64| l + (x.log2() - xmin) / (xmax - xmin) * (w - l - r);
    let py = |y: f64| h - b - (y.log10() - ymin) / (ymax - ymin) * (h - t - b);
    let mut s = String::new();
    let _ = writeln!(
        s,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" font-family="sans-serif" font-size="12">"#
    );
    let _ = writeln!(s, r#"<rect width="{w}" height="{h}" fill="white"/>"#);
    let _ = writeln!(
        s,
        r#"<text x="{}" y="28" font-size="16" text-anchor="middle">{}</text>"#,
        (l + w - r) / 2.0,
        xml(title)
    );
    // Grid and ticks.
    let mut e = xmin as i32;
    while e as f64 <= xmax {
        let x = px(2f64.powi(e));
        let _ = writeln!(
            s,
            r##"<line x1="{x}" y1="{t}" x2="{x}" y2="{}" stroke="#ddd"/>"##,
            h - b
        );
        if e % 2 == 0 || xmax - xmin <= 10.0 {
            let _ = writeln!(
                s,
                r#"<text x="{x}" y="{}" text-anchor="middle">{}</text>"#,
                h - b + 18.0,
                xtick(2f64.powi(e))
            );
        }
        e += 1;
    }
    let mut d = ymin as i32;
    while d as f64 <= ymax {
        let v = 10f64.powi(d);
        let y = py(v);
        let _ = writeln!(
            s,
            r##"<line x1="{l}" y1="{y}" x2="{}" y2="{y}" stroke="#ddd"/>"##,
            w - r
        );
        let _ = writeln!(
            s,
            r#"<text x="{}" y="{}" text-anchor="end">{}</text>"#,
            l - 6.0,
            y + 4.0,
            v
        );
        d += 1;
    }
    let _ = writeln!(
        s,
        r#"<rect x="{l}" y="{t}" width="{}" height="{}" fill="none" stroke="black"/>"#,
        w - l - r,
        h - t - b
    );
    let _ = writeln!(
        s,
        r#"<text x="{}" y="{}" text-anchor="middle">{}</text>"#,
        (l + w - r) / 2.0,
        h - 15.0,
        xml(xlabel)
    );
    let _ = writeln!(
        s,
        r#"<text x="20" y="{}" text-anchor="middle" transform="rotate(-90 20 {})">{}</text>"#,
        (t + h - b) / 2.0,
        (t + h - b) / 2.0,
        xml(ylabel)
    );
    // Lines, markers, legend.
    for (i, se) in series.iter().enumerate() {
        let c = COLORS[i % COLORS.len()];
        let dash = if se.dashed {
            r#" stroke-dasharray="6 3""#
        } else {
            ""
        };
        let pts: Vec<String> = se
            .points
            .iter()
            .map(|&(x, y)| format!("{:.1},{:.1}", px(x), py(y)))
            .collect();
        let _ = writeln!(
            s,
            r#"<polyline points="{}" fill="none" stroke="{c}" stroke-width="2"{dash}/>"#,
            pts.join(" ")
        );
        for &(x, y) in &se.points {
            let _ = writeln!(
                s,
                r#"<circle cx="{:.1}" cy="{:.1}" r="3" fill="{c}"/>"#,
                px(x),
                py(y)
            );
        }
        let ly = t + 10.0 + i as f64 * 20.0;
        let lx = w - r + 15.0;
        let _ = writeln!(
            s,
            r#"<line x1="{lx}" y1="{ly}" x2="{}" y2="{ly}" stroke="{c}" stroke-width="2"{dash}/><text x="{}" y="{}">{}</text>"#,
            lx + 24.0,
            lx + 30.0,
            ly + 4.0,
            xml(&se.label)
        );
    }
    s.push_str("</svg>\n");
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    fn num(svg: &str, tag: &str, attr: &str) -> Vec<f64> {
        svg.split(tag)
            .skip(1)
            .map(|c| {
                let i = c.find(attr).unwrap() + attr.len();
                c[i..].split('"').next().unwrap().parse().unwrap()
            })
            .collect()
    }

    #[test]
    fn lines_put_medians_inside_the_frame_and_break_at_gaps() {
        let cats: Vec<String> = ["1", "2", "4", "8"].map(String::from).to_vec();
        let s = lines(
            "a < b",
            "queues",
            "Gbit/s",
            &cats,
            &[
                Line {
                    label: "hash".into(),
                    points: vec![
                        Some((10.0, 9.0, 11.0)),
                        Some((20.0, 19.0, 23.0)),
                        None,
                        Some((30.0, 30.0, 30.0)),
                    ],
                },
                Line {
                    label: "rr".into(),
                    points: vec![Some((5.0, 5.0, 5.0)); 4],
                },
            ],
        );
        assert!(s.contains("a &lt; b"));
        // hash: the gap leaves one two-point run (a lone point draws no
        // line); rr: one line.
        assert_eq!(s.matches("<polyline").count(), 2);
        assert_eq!(s.matches("<circle").count(), 7);
        for y in num(&s, "<circle ", "cy=\"") {
            assert!((50.0..=470.0).contains(&y), "{y}");
        }
        // y runs from 0 to 50 (the whisker top, 23... no: 30, rounded up).
        assert!(s.contains(">50<"), "{s}");
        let xs = num(&s, "<circle ", "cx=\"");
        assert!(xs.windows(2).take(2).all(|w| w[0] < w[1]));
    }

    #[test]
    fn long_legends_widen_the_chart_not_shrink_the_plot() {
        let cats = vec!["1".to_string(), "4".to_string()];
        let label = "len=131072 send=iperf3 recv=iperf3 proto=tcp streams=4".to_string();
        let width = |l: &str| {
            let s = bars("t", "x", "y", &cats, &[(l.to_string(), vec![1.0, 2.0])]);
            let w = num(&s, "<svg ", "width=\"");
            let frame = num(&s, "<rect x=\"80\"", "width=\"");
            (w[0], frame[0])
        };
        let (short, plot_short) = width("hash");
        let (long, plot_long) = width(&label);
        assert_eq!(plot_short, plot_long);
        // 7 px per character past the swatch: the text ends inside.
        assert!(long >= 660.0 + 40.0 + 7.0 * label.len() as f64, "{long}");
        assert!(short < long);
    }

    #[test]
    fn bars_are_as_tall_as_their_values() {
        let cats = vec!["q=2".to_string()];
        let s = bars(
            "t",
            "x",
            "%",
            &cats,
            &[("q0".into(), vec![75.0]), ("q1".into(), vec![25.0])],
        );
        let h = num(&s, "<rect x=", "height=\"");
        // The frame, then two bars (legend swatches are 8 high).
        let bars: Vec<f64> = h.into_iter().filter(|&v| v != 8.0).skip(1).collect();
        assert_eq!(bars.len(), 2, "{s}");
        assert!((bars[0] / bars[1] - 3.0).abs() < 0.01, "{bars:?}");
        assert_eq!(nice_ceiling(0.0), 1.0);
        assert_eq!(nice_ceiling(23.0), 50.0);
        assert_eq!(nice_ceiling(f64::NAN), 1.0);
        assert_eq!(tick(0.5), "0.5");
    }
}
