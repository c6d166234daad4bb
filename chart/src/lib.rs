//! The charts fabkit's tools draw from their measurements: `ipoib-eval`'s
//! sweep summaries, the DHT benchmark's rank-count and soak charts, the
//! surrogate's speed-up, and `fabkit plot`'s size sweeps. A crate of its
//! own so that a tool can draw without taking a measuring crate (and its
//! eBPF loader or libfabric bindings) along.
//!
//! SVG charts with a categorical x axis (the values a sweep tried, evenly
//! spaced whatever their magnitude): [`lines`] with min-max whiskers, and
//! grouped [`bars`]; and log-log [`log_lines`] (sizes against rates). Each
//! is laid out from the width of its text, so that at any size nothing is
//! cut or overlaps:
//! - what every series' label shares (words such as `proto=udp`) is said
//!   once, under the title, and each legend entry keeps what differs; the
//!   same for the categories;
//! - the legend draws each entry as its series is drawn (a line with its
//!   marker, dashed where the line is; a block for bars);
//! - category labels that do not fit their slot wrap, or stand upright
//!   below the axis, which grows to hold them;
//! - [`lines_with`] puts the y axis on a log scale where the medians span
//!   10x or more (or as asked), and draws a reference line where a value
//!   means something (a speed-up of 1, a bound).
//!
//! Text widths are those of DejaVu Sans, the sans-serif of Debian's
//! renderers, with a margin; a test renders charts with `rsvg-convert` and
//! checks every text's drawn extent. No dependency; the output is plain SVG
//! any browser shows. (A plotting crate such as plotters would bring font
//! loading for its text extents and still leave the rules above, which are
//! most of this crate, to be written: three kinds of chart do not need it.)
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

/// The y axis of a [`lines_with`] chart.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Scale {
    /// Logarithmic where every value is above zero and the medians span
    /// 10x or more, else linear from zero.
    #[default]
    Auto,
    /// Linear from zero.
    Linear,
    /// Logarithmic, over the decades of the data.
    Log,
}

/// What a chart may say besides its series.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Extras {
    /// A line under the title (before what every series shares).
    pub subtitle: Option<String>,
    /// A dashed horizontal line at a value that means something (a
    /// speed-up of 1: where the cache stops paying; a bound), and its label.
    pub reference: Option<(f64, String)>,
    /// The y axis.
    pub scale: Scale,
}

// ------------------------------------------------------------------ text

/// Body text size, px.
const FONT: f64 = 12.0;
/// Title size, px.
const TITLE: f64 = 15.0;
/// A line of body text, px.
const LINE_H: f64 = 15.0;
/// The widest a legend entry's line may be, px: longer ones wrap.
const LEGEND_W: f64 = 320.0;

/// The height of a legend entry of `lines` lines.
fn legend_entry_h(lines: usize) -> f64 {
    (lines.max(1) - 1) as f64 * LINE_H + 18.0
}

/// The drawn width of `s` at `size` px in DejaVu Sans (advance widths in
/// 1/2048 em, by character class), with 6 % to spare for renderers that
/// space differently.
pub fn text_width(s: &str, size: f64) -> f64 {
    let units: u32 = s
        .chars()
        .map(|c| match c {
            'i' | 'j' | 'l' | '\'' | '|' | '!' => 569,
            ' ' | '.' | ',' | ':' | ';' | '/' | '\\' => 690,
            'f' | 't' | 'I' | '-' | '(' | ')' | '[' | ']' | '{' | '}' => 803,
            'r' => 842,
            '_' | '"' | '`' => 1024,
            's' | 'z' | 'c' | 'J' => 1126,
            'k' | 'v' | 'x' | 'y' => 1212,
            'a' | 'e' | 'o' | '?' => 1260,
            '0'..='9' | 'b' | 'd' | 'g' | 'h' | 'n' | 'p' | 'q' | 'u' | '$' | '*' => 1303,
            'L' | 'F' | 'E' | 'T' | 'P' | 'S' | 'Z' | 'K' | 'X' | 'Y' | 'B' => 1400,
            'C' | 'R' | 'V' | 'A' => 1430,
            'm' | 'M' | 'W' | 'w' | '@' => 2025,
            '=' | '+' | '<' | '>' | '~' | '#' | '%' | '&' => 1716,
            'D' | 'G' | 'H' | 'N' | 'O' | 'Q' | 'U' => 1580,
            _ if c.is_ascii() => 1303,
            // Greek letters, dashes and the rest: wide enough for most.
            _ => 1500,
        })
        .sum();
    f64::from(units) / 2048.0 * size * 1.06
}

/// `s` broken at spaces into lines no wider than `width` (a word wider
/// than that stands alone).
fn wrap(s: &str, width: f64, size: f64) -> Vec<String> {
    let mut lines: Vec<String> = Vec::new();
    for word in s.split_whitespace() {
        match lines.last_mut() {
            Some(l) if text_width(&format!("{l} {word}"), size) <= width => {
                l.push(' ');
                l.push_str(word);
            }
            _ => lines.push(word.to_string()),
        }
    }
    if lines.is_empty() {
        lines.push(String::new());
    }
    lines
}

/// The settings (`key=value` words) every label has, and each label
/// without them: what is said once, and what tells the labels apart.
/// Other words stay (in "TX queue 0", "TX queue" is not a setting).
pub fn split_common(labels: &[String]) -> (Vec<String>, Vec<String>) {
    let parts: Vec<Vec<String>> = labels
        .iter()
        .map(|l| l.split_whitespace().map(str::to_string).collect())
        .collect();
    split_common_parts(&parts, " ", &|w| w.contains('='))
}

/// The parts every label has (those `movable` allows), and each label's
/// other parts joined by `sep`. Nothing is taken out of fewer than two
/// labels, nor where it would leave a label empty. What a caller whose
/// labels are lists (variant, transport, phase, ...) says once.
pub fn split_common_parts(
    labels: &[Vec<String>],
    sep: &str,
    movable: &dyn Fn(&str) -> bool,
) -> (Vec<String>, Vec<String>) {
    let whole = || labels.iter().map(|l| l.join(sep)).collect::<Vec<_>>();
    let Some(first) = labels.first() else {
        return (Vec::new(), Vec::new());
    };
    let common: Vec<String> = first
        .iter()
        .filter(|w| movable(w) && labels.iter().all(|ws| ws.contains(w)))
        .cloned()
        .collect();
    let rest: Vec<String> = labels
        .iter()
        .map(|ws| {
            ws.iter()
                .filter(|w| !common.contains(w))
                .cloned()
                .collect::<Vec<_>>()
                .join(sep)
        })
        .collect();
    if labels.len() < 2 || common.is_empty() || rest.iter().any(String::is_empty) {
        return (Vec::new(), whole());
    }
    (common, rest)
}

/// One `<text>` element, on a line of its own; several lines become
/// `<tspan>`s `LINE_H` apart.
#[allow(clippy::too_many_arguments)]
fn text(
    s: &mut String,
    x: f64,
    y: f64,
    anchor: &str,
    size: f64,
    rotate: Option<f64>,
    fill: &str,
    lines: &[String],
) {
    let size_attr = if size == FONT {
        String::new()
    } else {
        format!(r#" font-size="{size}""#)
    };
    let fill_attr = if fill.is_empty() {
        String::new()
    } else {
        format!(r#" fill="{fill}""#)
    };
    let rot = rotate.map_or(String::new(), |a| {
        format!(r#" transform="rotate({a} {x:.1} {y:.1})""#)
    });
    let _ = write!(
        s,
        r#"<text x="{x:.1}" y="{y:.1}" text-anchor="{anchor}"{size_attr}{fill_attr}{rot}>"#
    );
    if let [one] = lines {
        s.push_str(&xml(one));
    } else {
        for (i, l) in lines.iter().enumerate() {
            let dy = if i == 0 { 0.0 } else { LINE_H };
            let _ = write!(s, r#"<tspan x="{x:.1}" dy="{dy}">{}</tspan>"#, xml(l));
        }
    }
    s.push_str("</text>\n");
}

// ------------------------------------------------------------- numbers

/// A tick's label: plain up to 9999, then with k, M, G; small values plain
/// down to 0.001, then in e-notation.
fn tick(v: f64) -> String {
    let plain = |v: f64| {
        let s = format!("{v:.3}");
        s.trim_end_matches('0').trim_end_matches('.').to_string()
    };
    let a = v.abs();
    if v == 0.0 || (0.001..10_000.0).contains(&a) {
        return plain(v);
    }
    for (unit, name) in [(1e9, "G"), (1e6, "M"), (1e3, "k")] {
        if (unit * 1.0..unit * 10_000.0).contains(&a) {
            return format!("{}{name}", plain(v / unit));
        }
    }
    format!("{v:.0e}")
}

/// Where a y value lands, and the axis's ticks.
#[derive(Clone, Debug)]
struct YAxis {
    log: bool,
    lo: f64,
    hi: f64,
    ticks: Vec<f64>,
}

impl YAxis {
    /// From zero to the first tick at or above `max`: the smallest step of
    /// 1, 2, 2.5 or 5 times a power of ten that needs at most six of them.
    fn linear(max: f64) -> YAxis {
        let max = if max.is_finite() && max > 0.0 {
            max
        } else {
            1.0
        };
        let e = (max / 6.0).log10().floor() as i32;
        let step = (e..=e + 1)
            .flat_map(|e| [1.0, 2.0, 2.5, 5.0].map(|m| m * 10f64.powi(e)))
            .find(|&s| (max / s - 1e-9).ceil() <= 6.0)
            .unwrap_or(10f64.powi(e + 2));
        let n = (max / step - 1e-9).ceil().max(1.0) as usize;
        YAxis {
            log: false,
            lo: 0.0,
            hi: step * n as f64,
            ticks: (0..=n).map(|k| step * k as f64).collect(),
        }
    }

    /// Decades around `lo..hi` (both above zero); 2 and 5 in between when
    /// there are few.
    fn log(lo: f64, hi: f64) -> YAxis {
        let (a, b) = (
            lo.log10().floor(),
            hi.log10().ceil().max(lo.log10().floor() + 1.0),
        );
        let mut ticks = Vec::new();
        let mut d = a as i32;
        while f64::from(d) <= b {
            let p = 10f64.powi(d);
            ticks.push(p);
            if b - a <= 2.0 && f64::from(d) < b {
                ticks.extend([2.0 * p, 5.0 * p]);
            }
            d += 1;
        }
        YAxis {
            log: true,
            lo: 10f64.powf(a),
            hi: 10f64.powf(b),
            ticks,
        }
    }

    /// The fraction of the axis's height at which `v` stands (0 bottom).
    fn frac(&self, v: f64) -> f64 {
        if self.log {
            let v = v.clamp(self.lo, self.hi);
            (v.log10() - self.lo.log10()) / (self.hi.log10() - self.lo.log10())
        } else {
            v.clamp(self.lo, self.hi) / self.hi
        }
    }
}

/// The y axis for `values` (medians, lows and highs), whose medians are
/// `levels`, and a reference value.
fn y_axis(scale: Scale, values: &[f64], levels: &[f64], reference: Option<f64>) -> YAxis {
    let all: Vec<f64> = values
        .iter()
        .copied()
        .chain(reference)
        .filter(|v| v.is_finite())
        .collect();
    let max = all.iter().copied().fold(0.0, f64::max);
    let positive: Vec<f64> = all.iter().copied().filter(|&v| v > 0.0).collect();
    let min_pos = positive.iter().copied().fold(f64::INFINITY, f64::min);
    let spread = {
        let (a, b) = (
            levels.iter().copied().fold(f64::INFINITY, f64::min),
            levels.iter().copied().fold(0.0, f64::max),
        );
        if a.is_finite() && a > 0.0 {
            b / a
        } else {
            1.0
        }
    };
    let all_positive = !positive.is_empty() && positive.len() == all.len();
    let log = match scale {
        Scale::Linear => false,
        Scale::Log => !positive.is_empty(),
        Scale::Auto => all_positive && spread >= 10.0,
    };
    if log {
        YAxis::log(min_pos, max)
    } else {
        // A reference at or above the data stays off the frame's top.
        let top = match reference {
            Some(r) if r.is_finite() && r >= max => r * 1.1,
            _ => max,
        };
        YAxis::linear(top)
    }
}

// -------------------------------------------------------------- layout

/// How a legend entry is drawn.
#[derive(Clone, Copy, PartialEq)]
enum Swatch {
    Line { dashed: bool },
    Block,
}

/// A categorical chart's frame, sized from its text.
struct Frame {
    w: f64,
    h: f64,
    /// Plot area.
    l: f64,
    t: f64,
    pw: f64,
    ph: f64,
    n: usize,
    title: Vec<String>,
    subtitle: Vec<String>,
    /// Category labels: lines each, and whether upright.
    cats: Vec<Vec<String>>,
    upright: bool,
    /// Each entry's lines.
    legend: Vec<Vec<String>>,
    legend_x: f64,
    y: YAxis,
    ylabel: String,
    xlabel: String,
}

/// What [`Frame::new`] lays out.
struct Texts<'a> {
    title: &'a str,
    subtitle: Option<&'a str>,
    xlabel: &'a str,
    ylabel: &'a str,
    cats: &'a [String],
    legend: &'a [String],
}

impl Frame {
    fn new(t: &Texts, y: YAxis) -> Frame {
        let n = t.cats.len().max(1);
        // What all series share, and what all categories share, is said
        // once under the title.
        let (legend_common, legend) = split_common(t.legend);
        let (cat_common, cats) = split_common(t.cats);
        let mut sub: Vec<String> = t.subtitle.map(str::to_string).into_iter().collect();
        if !legend_common.is_empty() {
            sub.push(format!("every series: {}", legend_common.join(" ")));
        }
        if !cat_common.is_empty() {
            sub.push(format!("every {}: {}", t.xlabel, cat_common.join(" ")));
        }
        // Left: the y title, the tick labels.
        let tick_w = y
            .ticks
            .iter()
            .map(|&v| text_width(&tick(v), FONT))
            .fold(0.0, f64::max);
        let l = 12.0 + LINE_H + 8.0 + tick_w + 8.0;
        // Categories: wrapped under their slot when every word fits it,
        // else upright, each in a slot at least two lines wide.
        let mut pw = 600.0f64;
        let slot = pw / n as f64;
        let wrapped: Vec<Vec<String>> = cats.iter().map(|c| wrap(c, slot - 8.0, FONT)).collect();
        let fits = wrapped
            .iter()
            .all(|ls| ls.len() <= 4 && ls.iter().all(|l| text_width(l, FONT) <= slot - 8.0));
        // Many short categories, a scale rather than names (minutes,
        // sizes): every k-th named.
        let scale_like = cats
            .iter()
            .all(|c| c.chars().count() <= 6 && !c.contains(' '));
        let stride = (2..=10).filter(|_| scale_like).find(|&k| {
            cats.iter()
                .step_by(k)
                .all(|c| text_width(c, FONT) <= k as f64 * slot - 8.0)
        });
        let (cat_lines, upright, cat_h) = if fits {
            let most = wrapped.iter().map(Vec::len).max().unwrap_or(1);
            (wrapped, false, most as f64 * LINE_H)
        } else if let Some(k) = stride {
            let named = cats
                .iter()
                .enumerate()
                .map(|(i, c)| {
                    if i % k == 0 {
                        vec![c.clone()]
                    } else {
                        Vec::new()
                    }
                })
                .collect();
            (named, false, LINE_H)
        } else {
            pw = pw.max(n as f64 * (LINE_H + 5.0));
            let longest = cats.iter().map(|c| text_width(c, FONT)).fold(0.0, f64::max);
            (
                cats.iter().map(|c| vec![c.clone()]).collect(),
                true,
                longest,
            )
        };
        // Right: the legend, each entry wrapped to at most LEGEND_W.
        let legend: Vec<Vec<String>> = legend.iter().map(|e| wrap(e, LEGEND_W, FONT)).collect();
        let legend_w = legend
            .iter()
            .flatten()
            .map(|s| text_width(s, FONT))
            .fold(0.0, f64::max);
        let legend_h: f64 = legend.iter().map(|e| legend_entry_h(e.len())).sum();
        let legend_x = l + pw + 16.0;
        let w0 = if legend.is_empty() {
            l + pw + 20.0
        } else {
            legend_x + 32.0 + legend_w + 12.0
        };
        // Top: the title and subtitle, wrapped to the width.
        let title = wrap(t.title, w0 - 20.0, TITLE);
        let subtitle: Vec<String> = sub.iter().flat_map(|s| wrap(s, w0 - 20.0, FONT)).collect();
        let top = 10.0 + title.len() as f64 * (TITLE + 4.0) + subtitle.len() as f64 * LINE_H + 12.0;
        let ph = 380f64
            .max(legend_h + 10.0)
            .max(text_width(t.ylabel, FONT) + 20.0);
        let h = top + ph + 10.0 + cat_h + 12.0 + LINE_H + 10.0;
        let w = w0.max(l + text_width(t.xlabel, FONT) + 20.0);
        Frame {
            w,
            h,
            l,
            t: top,
            pw,
            ph,
            n,
            title,
            subtitle,
            cats: cat_lines,
            upright,
            legend,
            legend_x,
            y,
            ylabel: t.ylabel.to_string(),
            xlabel: t.xlabel.to_string(),
        }
    }

    /// The centre of category `i`.
    fn x(&self, i: usize) -> f64 {
        self.l + (i as f64 + 0.5) / self.n as f64 * self.pw
    }

    fn y(&self, v: f64) -> f64 {
        self.t + self.ph - self.y.frac(v) * self.ph
    }

    /// Background, titles, grid, ticks, category labels, axis titles.
    fn open(&self, s: &mut String) {
        let (w, h, l, t, pw, ph) = (self.w, self.h, self.l, self.t, self.pw, self.ph);
        let _ = writeln!(
            s,
            r#"<svg xmlns="http://www.w3.org/2000/svg" width="{w:.0}" height="{h:.0}" viewBox="0 0 {w:.0} {h:.0}" font-family="DejaVu Sans, sans-serif" font-size="{FONT}">"#
        );
        let _ = writeln!(s, r#"<rect width="{w:.0}" height="{h:.0}" fill="white"/>"#);
        let mut y = 10.0 + TITLE;
        for line in &self.title {
            text(
                s,
                10.0,
                y,
                "start",
                TITLE,
                None,
                "",
                std::slice::from_ref(line),
            );
            y += TITLE + 4.0;
        }
        for line in &self.subtitle {
            text(
                s,
                10.0,
                y,
                "start",
                FONT,
                None,
                "#444",
                std::slice::from_ref(line),
            );
            y += LINE_H;
        }
        for &v in &self.y.ticks {
            let y = self.y(v);
            let _ = writeln!(
                s,
                r##"<line x1="{l:.1}" y1="{y:.1}" x2="{:.1}" y2="{y:.1}" stroke="#ddd"/>"##,
                l + pw
            );
            text(s, l - 6.0, y + 4.0, "end", FONT, None, "", &[tick(v)]);
        }
        for (i, c) in self.cats.iter().enumerate().filter(|(_, c)| !c.is_empty()) {
            let x = self.x(i);
            if self.upright {
                // Reading upwards, ending just below the axis.
                text(s, x + 4.0, t + ph + 8.0, "end", FONT, Some(-90.0), "", c);
            } else {
                text(s, x, t + ph + 4.0 + FONT, "middle", FONT, None, "", c);
            }
        }
        let _ = writeln!(
            s,
            r#"<rect x="{l:.1}" y="{t:.1}" width="{pw:.1}" height="{ph:.1}" fill="none" stroke="black"/>"#
        );
        text(
            s,
            l + pw / 2.0,
            h - 12.0,
            "middle",
            FONT,
            None,
            "",
            std::slice::from_ref(&self.xlabel),
        );
        let ym = t + ph / 2.0;
        text(
            s,
            12.0 + FONT,
            ym,
            "middle",
            FONT,
            Some(-90.0),
            "",
            std::slice::from_ref(&self.ylabel),
        );
    }

    /// A dashed line across the plot at `v`, its label above its right end.
    fn reference(&self, s: &mut String, v: f64, label: &str) {
        let y = self.y(v);
        let _ = writeln!(
            s,
            r##"<line x1="{:.1}" y1="{y:.1}" x2="{:.1}" y2="{y:.1}" stroke="#333" stroke-width="1.5" stroke-dasharray="8 4"/>"##,
            self.l,
            self.l + self.pw
        );
        let above = if y - self.t > 2.0 * LINE_H {
            y - 5.0
        } else {
            y + FONT + 3.0
        };
        text(
            s,
            self.l + self.pw - 6.0,
            above,
            "end",
            FONT,
            None,
            "#333",
            &[label.to_string()],
        );
    }

    fn legend(&self, s: &mut String, i: usize, color: &str, swatch: Swatch) {
        let above: f64 = self.legend[..i]
            .iter()
            .map(|e| legend_entry_h(e.len()))
            .sum();
        let (lx, ly) = (self.legend_x, self.t + 10.0 + above);
        match swatch {
            Swatch::Line { dashed } => {
                let dash = if dashed {
                    r#" stroke-dasharray="6 3""#
                } else {
                    ""
                };
                let _ = writeln!(
                    s,
                    r#"<line x1="{lx:.1}" y1="{ly:.1}" x2="{:.1}" y2="{ly:.1}" stroke="{color}" stroke-width="2"{dash}/><circle cx="{:.1}" cy="{ly:.1}" r="3.5" fill="{color}"/>"#,
                    lx + 24.0,
                    lx + 12.0
                );
            }
            Swatch::Block => {
                let _ = writeln!(
                    s,
                    r#"<rect x="{lx:.1}" y="{:.1}" width="14" height="12" fill="{color}"/>"#,
                    ly - 6.0
                );
            }
        }
        text(
            s,
            lx + 32.0,
            ly + 4.0,
            "start",
            FONT,
            None,
            "",
            &self.legend[i],
        );
    }
}

// --------------------------------------------------------------- charts

/// A categorical chart's frame for its `[title, xlabel, ylabel]`,
/// categories, legend and `y`, and its SVG so far.
fn opened(
    [title, xlabel, ylabel]: [&str; 3],
    cats: &[String],
    legend: &[String],
    extras: &Extras,
    y: YAxis,
) -> (Frame, String) {
    let texts = Texts {
        title,
        subtitle: extras.subtitle.as_deref(),
        xlabel,
        ylabel,
        cats,
        legend,
    };
    let f = Frame::new(&texts, y);
    let mut s = String::new();
    f.open(&mut s);
    (f, s)
}

/// A line chart: one line per series over the categories, a marker at the
/// median and a whisker from the lowest to the highest value (see
/// [`lines_with`]: a log axis where the medians span 10x or more).
pub fn lines(title: &str, xlabel: &str, ylabel: &str, cats: &[String], series: &[Line]) -> String {
    lines_with(title, xlabel, ylabel, cats, series, &Extras::default())
}

/// [`lines`] with a subtitle, a reference line and a chosen y scale.
pub fn lines_with(
    title: &str,
    xlabel: &str,
    ylabel: &str,
    cats: &[String],
    series: &[Line],
    extras: &Extras,
) -> String {
    let values: Vec<f64> = series
        .iter()
        .flat_map(|l| l.points.iter().flatten())
        .flat_map(|p| [p.0, p.1, p.2])
        .collect();
    // How far apart the medians lie decides the scale.
    let levels: Vec<f64> = series
        .iter()
        .flat_map(|l| l.points.iter().flatten().map(|p| p.0))
        .collect();
    let y = y_axis(
        extras.scale,
        &values,
        &levels,
        extras.reference.as_ref().map(|r| r.0),
    );
    let labels: Vec<String> = series.iter().map(|l| l.label.clone()).collect();
    let (f, mut s) = opened([title, xlabel, ylabel], cats, &labels, extras, y);
    if let Some((v, label)) = &extras.reference {
        f.reference(&mut s, *v, label);
    }
    for (k, line) in series.iter().enumerate() {
        let c = COLORS[k % COLORS.len()];
        // Past the colours, lines repeat them dashed.
        let dashed = k >= COLORS.len();
        let dash = if dashed {
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
        for (i, p) in line.points.iter().enumerate().take(f.n) {
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
        f.legend(&mut s, k, c, Swatch::Line { dashed });
    }
    s.push_str("</svg>\n");
    s
}

/// A grouped bar chart: per category, one bar per series; a linear axis
/// from zero.
pub fn bars(
    title: &str,
    xlabel: &str,
    ylabel: &str,
    cats: &[String],
    series: &[(String, Vec<f64>)],
) -> String {
    bars_with(title, xlabel, ylabel, cats, series, &Extras::default())
}

/// [`bars`] with a subtitle and a reference line (the scale is linear).
pub fn bars_with(
    title: &str,
    xlabel: &str,
    ylabel: &str,
    cats: &[String],
    series: &[(String, Vec<f64>)],
    extras: &Extras,
) -> String {
    let values: Vec<f64> = series.iter().flat_map(|(_, v)| v.iter().copied()).collect();
    let y = y_axis(
        Scale::Linear,
        &values,
        &[],
        extras.reference.as_ref().map(|r| r.0),
    );
    let labels: Vec<String> = series.iter().map(|(l, _)| l.clone()).collect();
    let (f, mut s) = opened([title, xlabel, ylabel], cats, &labels, extras, y);
    let slot = f.pw / f.n as f64 * 0.8;
    let bw = slot / series.len().max(1) as f64;
    for (k, (_, vals)) in series.iter().enumerate() {
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
        f.legend(&mut s, k, c, Swatch::Block);
    }
    if let Some((v, label)) = &extras.reference {
        f.reference(&mut s, *v, label);
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
/// with its markers and a legend to the right that draws it as it is
/// drawn; what every line's label shares is said once under the title.
pub fn log_lines(
    title: &str,
    xlabel: &str,
    ylabel: &str,
    series: &[LogLine],
    xtick: &dyn Fn(f64) -> String,
) -> String {
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
    let ys: Vec<f64> = all.iter().map(|p| p.1).collect();
    let y = YAxis::log(
        ys.iter().copied().fold(f64::INFINITY, f64::min),
        ys.iter().copied().fold(0.0, f64::max),
    );
    // The x ticks: every power of two, or every other one when many.
    let every = if xmax - xmin > 10.0 { 2 } else { 1 };
    let xt: Vec<(f64, String)> = (xmin as i32..=xmax as i32)
        .filter(|e| e % every == 0)
        .map(|e| (2f64.powi(e), xtick(2f64.powi(e))))
        .collect();
    let cats: Vec<String> = Vec::new();
    // Words every line's label has ("write" in "shm write", "MPI sm
    // allocate lockall write") are said once.
    let words: Vec<Vec<String>> = series
        .iter()
        .map(|s| s.label.split_whitespace().map(str::to_string).collect())
        .collect();
    let (common, labels) = split_common_parts(&words, " ", &|_| true);
    let subtitle = (!common.is_empty()).then(|| format!("every line: {}", common.join(" ")));
    let mut f = Frame::new(
        &Texts {
            title,
            subtitle: subtitle.as_deref(),
            xlabel,
            ylabel,
            cats: &cats,
            legend: &labels,
        },
        y,
    );
    // No categories: the x ticks take their place, one line high.
    f.cats.clear();
    let widest = xt
        .iter()
        .map(|(_, t)| text_width(t, FONT))
        .fold(0.0, f64::max);
    f.pw = f.pw.max(xt.len() as f64 * (widest + 8.0));
    let grow = (f.l + f.pw + 16.0) - f.legend_x;
    f.legend_x += grow;
    f.w += grow;
    f.h = f.t + f.ph + 10.0 + LINE_H + 12.0 + LINE_H + 10.0;
    let px = |x: f64| f.l + (x.log2() - xmin) / (xmax - xmin) * f.pw;
    let mut s = String::new();
    f.open(&mut s);
    for (v, t) in &xt {
        let x = px(*v);
        let _ = writeln!(
            s,
            r##"<line x1="{x:.1}" y1="{:.1}" x2="{x:.1}" y2="{:.1}" stroke="#ddd"/>"##,
            f.t,
            f.t + f.ph
        );
        text(
            &mut s,
            x,
            f.t + f.ph + 4.0 + FONT,
            "middle",
            FONT,
            None,
            "",
            std::slice::from_ref(t),
        );
    }
    for (i, se) in series.iter().enumerate() {
        let c = COLORS[i % COLORS.len()];
        let dash = if se.dashed {
            r#" stroke-dasharray="6 3""#
        } else {
            ""
        };
        let placed: Vec<(f64, f64)> = se
            .points
            .iter()
            .copied()
            .filter(|&(x, y)| x.is_finite() && x >= 1.0 && y.is_finite() && y > 0.0)
            .collect();
        let pts: Vec<String> = placed
            .iter()
            .map(|&(x, y)| format!("{:.1},{:.1}", px(x), f.y(y)))
            .collect();
        let _ = writeln!(
            s,
            r#"<polyline points="{}" fill="none" stroke="{c}" stroke-width="2"{dash}/>"#,
            pts.join(" ")
        );
        for &(x, y) in &placed {
            let _ = writeln!(
                s,
                r#"<circle cx="{:.1}" cy="{:.1}" r="3" fill="{c}"/>"#,
                px(x),
                f.y(y)
            );
        }
        f.legend(&mut s, i, c, Swatch::Line { dashed: se.dashed });
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

    fn line(label: &str, points: Vec<Option<(f64, f64, f64)>>) -> Line {
        Line {
            label: label.into(),
            points,
        }
    }

    #[test]
    fn lines_put_medians_inside_the_plot_and_break_at_gaps() {
        let cats: Vec<String> = ["1", "2", "4", "8"].map(String::from).to_vec();
        let s = lines(
            "a < b",
            "queues",
            "Gbit/s",
            &cats,
            &[
                line(
                    "hash",
                    vec![
                        Some((10.0, 9.0, 11.0)),
                        Some((20.0, 19.0, 23.0)),
                        None,
                        Some((30.0, 30.0, 30.0)),
                    ],
                ),
                line("rr", vec![Some((5.0, 5.0, 5.0)); 4]),
            ],
        );
        assert!(s.contains("a &lt; b"));
        // hash: the gap leaves one two-point run (a lone point draws no
        // line); rr: one line.
        assert_eq!(s.matches("<polyline").count(), 2);
        // 7 markers, and one in each legend entry.
        assert_eq!(s.matches("<circle").count(), 9);
        let frame_y = num(&s, "<rect x=", "y=\"")[0];
        let frame_h = num(&s, "<rect x=", "height=\"")[0];
        for y in num(&s, "<circle ", "cy=\"").into_iter().take(7) {
            assert!((frame_y..=frame_y + frame_h).contains(&y), "{y}");
        }
        // Linear from 0 to 30 (the highest whisker), 5 apart.
        assert!(
            s.contains(">30<") && s.contains(">5<") && !s.contains(">35<"),
            "{s}"
        );
    }

    #[test]
    fn medians_ten_times_apart_get_a_log_axis_and_shares_can_refuse_it() {
        let cats = vec!["1".to_string(), "4".to_string()];
        let series = [
            line("tcp", vec![Some((3e4, 2e4, 4e4)); 2]),
            line("udp", vec![Some((3e5, 2e5, 4e5)); 2]),
        ];
        let log = lines("t", "streams", "messages/s", &cats, &series);
        assert!(log.contains(">10k<") && log.contains(">100k<") && log.contains(">1M<"));
        let linear = lines_with(
            "t",
            "streams",
            "%",
            &cats,
            &series,
            &Extras {
                scale: Scale::Linear,
                ..Extras::default()
            },
        );
        assert!(linear.contains(">400k<") && !linear.contains(">10k<"));
        // Close together: linear.
        let near = lines("t", "x", "y", &cats, &series[..1]);
        assert!(near.contains(">0<"));
    }

    #[test]
    fn what_every_label_shares_is_said_once() {
        let labels: Vec<String> = [
            "len=1472 send=send proto=udp",
            "len=1472 send=gso proto=udp",
        ]
        .map(String::from)
        .to_vec();
        let (common, rest) = split_common(&labels);
        assert_eq!(common, ["len=1472", "proto=udp"]);
        assert_eq!(rest, ["send=send", "send=gso"]);
        // One label, or one that would be left empty: nothing taken out.
        assert_eq!(split_common(&labels[..1]).1, labels[..1]);
        let same = vec!["a b".to_string(), "a b".to_string()];
        assert_eq!(split_common(&same), (Vec::new(), same.clone()));
        let cats = vec!["1".to_string()];
        let s = lines(
            "t",
            "x",
            "y",
            &cats,
            &[
                line(&labels[0], vec![Some((1.0, 1.0, 1.0))]),
                line(&labels[1], vec![Some((2.0, 2.0, 2.0))]),
            ],
        );
        assert_eq!(s.matches("len=1472").count(), 1, "{s}");
        assert!(s.contains(">every series: len=1472 proto=udp<"), "{s}");
        assert!(s.contains(">send=gso<"));
    }

    #[test]
    fn a_reference_line_is_drawn_at_its_value_and_the_axis_reaches_it() {
        let cats = vec!["1".to_string(), "2".to_string()];
        let s = lines_with(
            "Speed-up",
            "digits",
            "speed-up",
            &cats,
            &[line("lockfree", vec![Some((0.6, 0.5, 0.7)); 2])],
            &Extras {
                reference: Some((1.0, "1: no gain".into())),
                ..Extras::default()
            },
        );
        assert!(s.contains("stroke-dasharray=\"8 4\""));
        assert!(s.contains(">1: no gain<"));
        // The axis goes to 1 though the data stay below it.
        assert!(s.contains(">1<"), "{s}");
    }

    #[test]
    fn long_categories_stand_upright_below_a_taller_chart() {
        let short: Vec<String> = (0..4).map(|i| format!("q={i}")).collect();
        let policy = ["hash", "rr", "xps", "cpu"];
        let long: Vec<String> = (0..16)
            .map(|i| format!("q={i} policy={} udp_socket=connected", policy[i % 4]))
            .collect();
        let v = |n: usize| vec![("q0".to_string(), vec![1.0; n])];
        let a = bars("t", "point", "%", &short, &v(4));
        let b = bars("t", "point", "%", &long, &v(16));
        assert!(!a.contains("rotate(-90") || a.matches("rotate(-90").count() == 1);
        assert_eq!(b.matches("rotate(-90").count(), 17, "{b}");
        let h = |s: &str| num(s, "<svg ", "height=\"")[0];
        assert!(h(&b) > h(&a) + 60.0);
        // The words all share are said once, above.
        assert!(b.contains(">every point: udp_socket=connected<"), "{b}");
        assert!(b.contains(">q=3 policy=cpu<"), "{b}");
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
        // The frame, then two bars (legend blocks are 12 high).
        let bars: Vec<f64> = h.into_iter().filter(|&v| v != 12.0).skip(1).collect();
        assert_eq!(bars.len(), 2, "{s}");
        assert!((bars[0] / bars[1] - 3.0).abs() < 0.01, "{bars:?}");
        let axis = |m: f64| {
            YAxis::linear(m)
                .ticks
                .into_iter()
                .map(tick)
                .collect::<Vec<_>>()
        };
        assert_eq!(axis(23.0), ["0", "5", "10", "15", "20", "25"]);
        assert_eq!(axis(100.0), ["0", "20", "40", "60", "80", "100"]);
        assert_eq!(axis(1.1), ["0", "0.2", "0.4", "0.6", "0.8", "1", "1.2"]);
        // Nothing to show: 0 to 1.
        assert_eq!(axis(f64::NAN).last().map(String::as_str), Some("1"));
        assert_eq!(tick(0.5), "0.5");
        assert_eq!(tick(300_000.0), "300k");
        assert_eq!(tick(2.5e6), "2.5M");
        assert_eq!(tick(1e-5), "1e-5");
    }

    #[test]
    fn log_lines_skip_what_a_log_axis_cannot_place() {
        let s = log_lines(
            "t",
            "size",
            "rate",
            &[LogLine {
                label: "write".into(),
                points: vec![(0.0, 1.0), (8.0, 0.0), (64.0, 5.0), (4096.0, 50.0)],
                dashed: false,
            }],
            &|v| format!("{v}"),
        );
        assert_eq!(s.matches("<circle").count(), 3, "{s}");
    }
}
