//! Charts a person reads at a glance: drawn by an independent renderer
//! (`rsvg-convert`, from Debian's librsvg2-bin, which .ci/install-deps
//! installs), no text of a chart leaves its canvas or overlaps another
//! text. Each `<text>` is drawn alone, with the chart's font, on a canvas
//! with a wide margin all round, and its ink's box is read from the
//! pixels: what the renderer really drew, not the chart's own estimate of
//! its text's width.

use std::path::Path;
use std::process::Command;

use fabkit_chart::{bars_with, lines_with, log_lines, Extras, Line, LogLine, Scale};

/// The margin around the canvas, px: text that leaves the canvas still
/// lands on the drawing.
const M: f64 = 400.0;

/// A box: left, top, right, bottom, in the chart's pixels.
type Ink = (f64, f64, f64, f64);

/// `name="value"` of the first tag of `svg` that has it.
fn attr<'a>(tag: &'a str, name: &str) -> Option<&'a str> {
    let at = tag.find(&format!(" {name}=\""))? + name.len() + 3;
    tag[at..].split('"').next()
}

/// The box of what `rsvg-convert` inks for `element` (one `<text>`) under
/// the chart's `root` attributes, or `None` if it inks nothing.
fn ink(dir: &Path, root: &str, element: &str, w: f64, h: f64) -> Option<Ink> {
    let font = attr(root, "font-family").unwrap_or("sans-serif");
    let size = attr(root, "font-size").unwrap_or("12");
    let (cw, ch) = (w + 2.0 * M, h + 2.0 * M);
    let svg = format!(
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{cw}\" height=\"{ch}\" \
         font-family=\"{font}\" font-size=\"{size}\"><g transform=\"translate({M} {M})\">\
         {element}</g></svg>\n"
    );
    let (src, png) = (dir.join("one.svg"), dir.join("one.png"));
    std::fs::write(&src, svg).unwrap();
    let o = Command::new("rsvg-convert")
        .arg("-o")
        .arg(&png)
        .arg(&src)
        .output()
        .expect("running rsvg-convert (librsvg2-bin, installed by .ci/install-deps)");
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let decoder = png::Decoder::new(std::fs::File::open(&png).unwrap());
    let mut reader = decoder.read_info().unwrap();
    let mut buf = vec![0; reader.output_buffer_size()];
    let info = reader.next_frame(&mut buf).unwrap();
    assert_eq!(info.color_type, png::ColorType::Rgba, "rsvg-convert's PNG");
    let (pw, ph) = (info.width as usize, info.height as usize);
    let mut b: Option<(usize, usize, usize, usize)> = None;
    for y in 0..ph {
        for x in 0..pw {
            // Faint anti-aliasing at a glyph's edge is not ink.
            if buf[(y * pw + x) * 4 + 3] > 48 {
                b = Some(match b {
                    None => (x, y, x, y),
                    Some((a, c, d, e)) => (a.min(x), c.min(y), d.max(x), e.max(y)),
                });
            }
        }
    }
    b.map(|(x0, y0, x1, y1)| {
        (
            x0 as f64 - M,
            y0 as f64 - M,
            x1 as f64 + 1.0 - M,
            y1 as f64 + 1.0 - M,
        )
    })
}

/// Every way the texts of `svg` fail to be read: text out of the canvas,
/// texts overlapping; one line each, naming the texts.
fn problems(svg: &str) -> Vec<String> {
    let dir = tempfile::tempdir().unwrap();
    let root = svg.lines().next().unwrap();
    let w: f64 = attr(root, "width").unwrap().parse().unwrap();
    let h: f64 = attr(root, "height").unwrap().parse().unwrap();
    let texts: Vec<&str> = svg.lines().filter(|l| l.starts_with("<text")).collect();
    let inks: Vec<(String, Ink)> = texts
        .iter()
        .filter_map(|t| {
            let words = t
                .split('>')
                .nth(1)
                .unwrap_or("")
                .split('<')
                .next()
                .unwrap_or("");
            let shown = if words.is_empty() {
                t.to_string()
            } else {
                words.to_string()
            };
            ink(dir.path(), root, t, w, h).map(|b| (shown, b))
        })
        .collect();
    let mut said = Vec::new();
    for (t, (x0, y0, x1, y1)) in &inks {
        if *x0 < 0.0 || *y0 < 0.0 || *x1 > w || *y1 > h {
            said.push(format!(
                "`{t}` leaves the {w}x{h} canvas: drawn at {x0},{y0} to {x1},{y1}"
            ));
        }
    }
    for (i, (a, ba)) in inks.iter().enumerate() {
        for (b, bb) in &inks[i + 1..] {
            let dx = ba.2.min(bb.2) - ba.0.max(bb.0);
            let dy = ba.3.min(bb.3) - ba.1.max(bb.1);
            if dx > 1.0 && dy > 1.0 {
                said.push(format!("`{a}` and `{b}` overlap by {dx}x{dy} px"));
            }
        }
    }
    said
}

fn assert_readable(name: &str, svg: &str) {
    let said = problems(svg);
    assert!(said.is_empty(), "{name}:\n  {}\n{svg}", said.join("\n  "));
}

/// Labels as sweeps write them: the same words on every one, and one
/// that differs.
fn labels(n: usize, shared: &str) -> Vec<String> {
    (0..n)
        .map(|i| format!("len={} send=send{i} recv=recv {shared}", 1 << (6 + i % 12)))
        .collect()
}

#[test]
fn the_checker_finds_text_off_the_canvas_and_text_on_text() {
    let svg = "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"300\" height=\"100\" \
               font-family=\"DejaVu Sans, sans-serif\" font-size=\"12\">\n\
               <text x=\"10\" y=\"40\">first words here</text>\n\
               <text x=\"20\" y=\"44\">second words</text>\n\
               <text x=\"250\" y=\"80\">runs past the right edge</text>\n\
               <text x=\"10\" y=\"90\">fine</text>\n\
               </svg>\n";
    let said = problems(svg);
    assert_eq!(said.len(), 2, "{said:?}");
    assert!(
        said[0].starts_with("`runs past the right edge` leaves"),
        "{said:?}"
    );
    assert!(
        said[1].starts_with("`first words here` and `second words` overlap"),
        "{said:?}"
    );
}

#[test]
fn lines_with_long_labels_many_series_a_log_axis_and_a_reference_stay_readable() {
    let cats: Vec<String> = labels(6, "streams=4 direction=client->server");
    let series: Vec<Line> = labels(12, "proto=udp udp_socket=connected qdisc=mq")
        .into_iter()
        .enumerate()
        .map(|(k, label)| Line {
            label,
            points: (0..6)
                .map(|i| {
                    let v = 10f64.powi(k as i32 % 4 + 2) * (1.0 + i as f64 / 3.0);
                    Some((v, v * 0.8, v * 1.3))
                })
                .collect(),
        })
        .collect();
    let svg = lines_with(
        "mtu-offloads: messages/s (datagrams for UDP), median and range of the repetitions \
         over every point of the sweep",
        "point",
        "messages/s (datagrams for UDP)",
        &cats,
        &series,
        &Extras {
            subtitle: Some("2 hosts (namespaces, veth), 2 cores, Linux 6.1".into()),
            reference: Some((1e4, "10k: the line rate of a 1 Gbit/s link at 12 kB".into())),
            scale: Scale::Auto,
        },
    );
    assert!(svg.contains(">every series: recv=recv proto=udp udp_socket=connected qdisc=mq<"));
    assert_readable("lines", &svg);
}

#[test]
fn bars_with_sixteen_long_points_stay_readable() {
    let policy = ["hash", "rr", "xps", "cpu"];
    let cats: Vec<String> = (0..16)
        .map(|i| {
            format!(
                "q={} policy={} udp_socket={} proto=udp",
                1 << (i / 4),
                policy[i % 4],
                if i % 2 == 0 {
                    "connected"
                } else {
                    "unconnected"
                }
            )
        })
        .collect();
    let series: Vec<(String, Vec<f64>)> = (0..4)
        .map(|q| {
            (
                format!("TX queue {q}"),
                (0..16).map(|i| ((i * 7 + q * 13) % 50) as f64).collect(),
            )
        })
        .collect();
    let svg = bars_with(
        "policy: share of TX packets per queue (eBPF)",
        "point",
        "% of TX packets",
        &cats,
        &series,
        &Extras::default(),
    );
    assert_readable("bars", &svg);
}

#[test]
fn log_lines_with_many_dashed_and_solid_series_stay_readable() {
    let series: Vec<LogLine> = (0..10)
        .map(|k| LogLine {
            label: format!(
                "{} write, {} ranks, provider tcp;ofi_rxm, window 64",
                if k % 2 == 0 {
                    "fabkit"
                } else {
                    "mpi (osc pt2pt)"
                },
                k + 1
            ),
            points: (0..=20)
                .map(|e| (2f64.powi(e), 1e6 / (1.0 + f64::from(e) * (k as f64 + 1.0))))
                .collect(),
            dashed: k % 2 == 1,
        })
        .collect();
    let svg = log_lines(
        "RMA write: million transfers per second against the size",
        "transfer size (bytes)",
        "million transfers/s",
        &series,
        &|v| {
            if v >= 1024.0 {
                format!("{}K", v as u64 >> 10)
            } else {
                format!("{v}")
            }
        },
    );
    assert_readable("log_lines", &svg);
}

#[test]
fn many_minutes_and_long_legend_entries_stay_readable() {
    let cats: Vec<String> = (0..61).map(|m| m.to_string()).collect();
    let series: Vec<Line> = (0..3)
        .map(|r| Line {
            label: format!(
                "rank {r}: +{r} MiB/h; fds 5->5, threads 1->1, regions 0->0, shm_segments 0->0, \
                 meeting files 0->0"
            ),
            points: (0..61)
                .map(|m| Some((200.0 + m as f64, 199.0, 201.0 + m as f64)))
                .collect(),
        })
        .collect();
    let svg = lines_with(
        "soak: lock-free, 2 hosts (namespaces), tcp;ofi_rxm, message path, 3600 s",
        "minutes since the start",
        "resident memory, MiB (median, min-max of the minute)",
        &cats,
        &series,
        &Extras {
            scale: Scale::Linear,
            ..Extras::default()
        },
    );
    assert_readable("soak", &svg);
}
