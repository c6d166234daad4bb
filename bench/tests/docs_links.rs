//! The documentation's links, checked offline. The README is a map: its
//! guides live in `docs/`, and the guides, `results/` and the README point
//! at each other and at files in the tree by relative links and `#anchor`s.
//! A section renamed or moved, or a file deleted, breaks those links
//! silently (GitHub renders a dead link as a live one), so this test walks
//! every Markdown file under the workspace root (skipping `target/` and
//! hidden directories such as `.git/`), finds every inline link
//! `[text](dest)`, image `![alt](src)` and reference definition
//! `[name]: dest` outside code, and checks each relative destination:
//! the file or folder exists inside the repository, and an `#anchor` names
//! a heading of the Markdown file it points into, by GitHub's rule for
//! heading ids. Absolute URLs (`https:`, `mailto:`, any `scheme:`) are not
//! fetched: the check needs no network. It also keeps the README short
//! enough to stay a map (issue 41).

use std::collections::{HashMap, HashSet};
use std::fs;
use std::path::{Component, Path, PathBuf};

/// The README must end before this line, so it stays a map.
const README_LINE_LIMIT: usize = 300;

fn workspace_root() -> PathBuf {
    let bench = Path::new(env!("CARGO_MANIFEST_DIR"));
    bench.parent().expect("bench/ has a parent").to_path_buf()
}

/// Every `*.md` file under `dir`, sorted, leaving out build output and
/// hidden directories (`.git`, `.cargo`, editors' folders).
fn markdown_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let entries = fs::read_dir(dir).unwrap_or_else(|e| panic!("reading {}: {e}", dir.display()));
    let mut paths: Vec<PathBuf> = entries
        .map(|e| e.expect("directory entry").path())
        .collect();
    paths.sort();
    for path in paths {
        let name = path.file_name().unwrap_or_default().to_string_lossy();
        if path.is_dir() {
            if name != "target" && !name.starts_with('.') {
                markdown_files(&path, out);
            }
        } else if name.ends_with(".md") {
            out.push(path);
        }
    }
}

/// A link found in a Markdown file: its 1-based line and its destination.
#[derive(Debug)]
struct Link {
    line: usize,
    dest: String,
}

/// Whether `line` opens or closes a fenced code block; returns the fence's
/// character and length. Fences inside list items are indented, so any
/// indentation is accepted.
fn fence(line: &str) -> Option<(char, usize)> {
    let t = line.trim_start();
    let c = t.chars().next()?;
    if c != '`' && c != '~' {
        return None;
    }
    let n = t.chars().take_while(|&x| x == c).count();
    (n >= 3).then_some((c, n))
}

/// Whether `line` closes the fenced block `open` began: the same character,
/// at least as many, and nothing after them.
fn closes(line: &str, open: (char, usize)) -> bool {
    let t = line.trim();
    matches!(fence(line), Some((c, n)) if c == open.0 && n >= open.1)
        && t.chars().all(|x| x == open.0)
}

/// The file split into blocks of consecutive lines outside fenced code,
/// each with the 1-based number of its first line. Blank lines end a
/// block, as they end a paragraph: an inline code span cannot cross one.
fn text_blocks(text: &str) -> Vec<(usize, String)> {
    let mut blocks = Vec::new();
    let mut current: Option<(usize, String)> = None;
    let mut open: Option<(char, usize)> = None;
    for (i, line) in text.lines().enumerate() {
        if let Some(f) = open {
            if closes(line, f) {
                open = None;
            }
            continue;
        }
        if let Some(f) = fence(line) {
            blocks.extend(current.take());
            open = Some(f);
            continue;
        }
        if line.trim().is_empty() {
            blocks.extend(current.take());
            continue;
        }
        match &mut current {
            Some((_, block)) => {
                block.push('\n');
                block.push_str(line);
            }
            None => current = Some((i + 1, line.to_string())),
        }
    }
    blocks.extend(current);
    blocks
}

/// `block` with every inline code span blanked out (same length, newlines
/// kept), so links inside code are not seen and offsets still give lines.
/// A span opens with a run of backticks and closes with a run of the same
/// length; an unmatched run is literal text.
fn blank_code_spans(block: &str) -> String {
    let chars: Vec<char> = block.chars().collect();
    let mut out = chars.clone();
    let mut i = 0;
    while i < chars.len() {
        if chars[i] == '\\' {
            i += 2;
            continue;
        }
        if chars[i] != '`' {
            i += 1;
            continue;
        }
        let run = chars[i..].iter().take_while(|&&c| c == '`').count();
        let mut j = i + run;
        let mut close = None;
        while j < chars.len() {
            if chars[j] == '`' {
                let r = chars[j..].iter().take_while(|&&c| c == '`').count();
                if r == run {
                    close = Some(j);
                    break;
                }
                j += r;
            } else {
                j += 1;
            }
        }
        match close {
            Some(j) => {
                for c in &mut out[i..j + run] {
                    if *c != '\n' {
                        *c = ' ';
                    }
                }
                i = j + run;
            }
            None => i += run,
        }
    }
    out.into_iter().collect()
}

/// The destination of an inline link whose `(` is at `chars[open]`: up to
/// the first space outside `<...>`, or the `)` that balances the `(`.
fn inline_destination(chars: &[char], open: usize) -> Option<String> {
    let mut i = open + 1;
    while i < chars.len() && chars[i].is_whitespace() {
        i += 1;
    }
    if chars.get(i) == Some(&'<') {
        let end = chars[i + 1..].iter().position(|&c| c == '>' || c == '\n')?;
        return Some(chars[i + 1..i + 1 + end].iter().collect());
    }
    let start = i;
    let mut depth = 0usize;
    while i < chars.len() {
        match chars[i] {
            '\\' => i += 1,
            '(' => depth += 1,
            ')' if depth == 0 => break,
            ')' => depth -= 1,
            c if c.is_whitespace() => break,
            _ => {}
        }
        i += 1;
    }
    (i > start).then(|| chars[start..i.min(chars.len())].iter().collect())
}

/// Every inline link, image and reference definition of a Markdown text,
/// outside fenced code and inline code.
fn links(text: &str) -> Vec<Link> {
    let mut found = Vec::new();
    for (first_line, block) in text_blocks(text) {
        let plain = blank_code_spans(&block);
        let chars: Vec<char> = plain.chars().collect();
        let line_at = |at: usize| first_line + chars[..at].iter().filter(|&&c| c == '\n').count();
        // Reference definitions: `[name]: dest` at the start of a line.
        let mut offset = 0;
        for line in plain.split('\n') {
            let t = line.trim_start();
            if line.len() - t.len() <= 3 && t.starts_with('[') && !t.starts_with("[^") {
                if let Some(close) = t.find("]:") {
                    if !t[1..close].contains(']') {
                        if let Some(dest) = t[close + 2..].split_whitespace().next() {
                            let dest = dest.trim_start_matches('<').trim_end_matches('>');
                            found.push(Link {
                                line: line_at(offset),
                                dest: dest.to_string(),
                            });
                        }
                    }
                }
            }
            offset += line.chars().count() + 1;
        }
        // Inline links and images: `](` after a bracketed text.
        for i in 0..chars.len().saturating_sub(1) {
            if chars[i] == ']' && chars[i + 1] == '(' && (i == 0 || chars[i - 1] != '\\') {
                if let Some(dest) = inline_destination(&chars, i + 1) {
                    found.push(Link {
                        line: line_at(i),
                        dest,
                    });
                }
            }
        }
    }
    found
}

/// A heading's text as GitHub renders it: code spans and emphasis markers
/// dropped, a link replaced by its text, trailing `#`s removed.
fn rendered(heading: &str) -> String {
    let h = heading.trim().trim_end_matches('#').trim_end();
    let mut out = String::new();
    let chars: Vec<char> = h.chars().collect();
    let mut i = 0;
    while i < chars.len() {
        match chars[i] {
            '`' | '*' => {}
            '\\' if i + 1 < chars.len() => {
                i += 1;
                out.push(chars[i]);
            }
            '!' if chars.get(i + 1) == Some(&'[') => {}
            '[' => {}
            ']' if chars.get(i + 1) == Some(&'(') => {
                // Skip the destination: the text stays, the URL does not.
                let mut depth = 0;
                i += 1;
                while i < chars.len() {
                    match chars[i] {
                        '(' => depth += 1,
                        ')' => {
                            depth -= 1;
                            if depth == 0 {
                                break;
                            }
                        }
                        _ => {}
                    }
                    i += 1;
                }
            }
            c => out.push(c),
        }
        i += 1;
    }
    out
}

/// GitHub's id for a heading's rendered text: lowercase; every character
/// that is not a letter, digit, space, hyphen or underscore removed; each
/// space a hyphen.
fn slug(text: &str) -> String {
    text.to_lowercase()
        .chars()
        .filter(|&c| c.is_alphanumeric() || c == ' ' || c == '-' || c == '_')
        .map(|c| if c == ' ' { '-' } else { c })
        .collect()
}

/// The ids of every heading of a Markdown text, ATX (`## x`) and setext
/// (`x` over `===` or `---`), in order. A repeated id gets `-1`, `-2`, ...
/// as GitHub gives it, skipping any id already taken.
fn heading_ids(text: &str) -> HashSet<String> {
    let mut headings = Vec::new();
    let mut open: Option<(char, usize)> = None;
    let mut previous: Option<&str> = None;
    for line in text.lines() {
        if let Some(f) = open {
            if closes(line, f) {
                open = None;
            }
            previous = None;
            continue;
        }
        if let Some(f) = fence(line) {
            open = Some(f);
            previous = None;
            continue;
        }
        let t = line.trim_start();
        let hashes = t.chars().take_while(|&c| c == '#').count();
        let indent = line.len() - t.len();
        if indent <= 3 && (1..=6).contains(&hashes) {
            let rest = &t[hashes..];
            if rest.is_empty() || rest.starts_with(' ') || rest.starts_with('\t') {
                headings.push(rendered(rest));
                previous = None;
                continue;
            }
        }
        let underline = line.trim();
        let is_underline = !underline.is_empty()
            && indent <= 3
            && (underline.chars().all(|c| c == '=') || underline.chars().all(|c| c == '-'));
        if let (true, Some(p)) = (is_underline, previous) {
            headings.push(rendered(p));
            previous = None;
            continue;
        }
        // Only a plain paragraph line can become a setext heading.
        let p = line.trim_start();
        let paragraph = !p.is_empty()
            && line.len() - p.len() <= 3
            && !p.starts_with(['|', '>', '-', '*', '+', '#', '<'])
            && !p.chars().next().is_some_and(|c| c.is_ascii_digit());
        previous = paragraph.then_some(line);
    }
    let mut ids = HashSet::new();
    let mut counts: HashMap<String, usize> = HashMap::new();
    for heading in headings {
        let base = slug(&heading);
        let mut id = base.clone();
        let count = counts.entry(base.clone()).or_insert(0);
        while ids.contains(&id) {
            *count += 1;
            id = format!("{base}-{count}");
        }
        ids.insert(id);
    }
    ids
}

/// `%XX` escapes decoded, as a browser does before it looks a path up.
fn percent_decode(s: &str) -> String {
    let hex = |b: u8| char::from(b).to_digit(16);
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' && i + 2 < bytes.len() {
            if let (Some(hi), Some(lo)) = (hex(bytes[i + 1]), hex(bytes[i + 2])) {
                out.push((hi * 16 + lo) as u8);
                i += 3;
                continue;
            }
        }
        out.push(bytes[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// `path` with `.` and `..` resolved by name, without touching the file
/// system, so a link that climbs out of the repository is seen as such.
fn normalise(path: &Path) -> PathBuf {
    let mut out = PathBuf::new();
    for part in path.components() {
        match part {
            Component::CurDir => {}
            Component::ParentDir => {
                out.pop();
            }
            other => out.push(other),
        }
    }
    out
}

/// Whether a destination is absolute (`https://...`, `mailto:...`,
/// `//host/...`): such links are not checked offline.
fn is_absolute_url(dest: &str) -> bool {
    if dest.starts_with("//") {
        return true;
    }
    match dest.find(':') {
        Some(colon) => {
            let scheme = &dest[..colon];
            scheme
                .chars()
                .next()
                .is_some_and(|c| c.is_ascii_alphabetic())
                && scheme
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || matches!(c, '+' | '-' | '.'))
        }
        None => false,
    }
}

/// Why a relative destination does not resolve, or `None` if it does.
fn broken(
    root: &Path,
    file: &Path,
    dest: &str,
    ids: &mut HashMap<PathBuf, HashSet<String>>,
) -> Option<String> {
    let (path, anchor) = match dest.split_once('#') {
        Some((p, a)) => (p, Some(percent_decode(a))),
        None => (dest, None),
    };
    let path = percent_decode(path.split('?').next().unwrap_or(""));
    let target = if path.is_empty() {
        file.to_path_buf()
    } else if let Some(from_root) = path.strip_prefix('/') {
        normalise(&root.join(from_root))
    } else {
        normalise(&file.parent().expect("a file has a folder").join(&path))
    };
    if !target.starts_with(root) {
        return Some("points outside the repository".to_string());
    }
    if !target.exists() {
        return Some(format!(
            "no such file or folder: {}",
            target.strip_prefix(root).unwrap_or(&target).display()
        ));
    }
    let anchor = anchor.filter(|a| !a.is_empty())?;
    let markdown = if target.is_dir() {
        target.join("README.md")
    } else {
        target.clone()
    };
    let shown = target.strip_prefix(root).unwrap_or(&target).display();
    if target.is_dir() && !markdown.is_file() {
        return Some(format!("{shown}/ has no README.md to hold #{anchor}"));
    }
    if markdown.extension().and_then(|e| e.to_str()) != Some("md") {
        return Some(format!(
            "{shown} is not Markdown, so #{anchor} cannot be checked"
        ));
    }
    let known = ids.entry(markdown.clone()).or_insert_with(|| {
        let text = fs::read_to_string(&markdown)
            .unwrap_or_else(|e| panic!("reading {}: {e}", markdown.display()));
        heading_ids(&text)
    });
    if known.contains(&anchor) {
        None
    } else {
        Some(format!(
            "no heading with id #{anchor} in {}",
            markdown.strip_prefix(root).unwrap_or(&markdown).display()
        ))
    }
}

#[test]
fn every_relative_link_and_anchor_in_the_markdown_resolves() {
    let root = workspace_root();
    let mut files = Vec::new();
    markdown_files(&root, &mut files);
    let readme = root.join("README.md");
    assert!(
        files.contains(&readme),
        "README.md not found under {}",
        root.display()
    );
    assert!(
        files.iter().any(|f| f.starts_with(root.join("docs"))),
        "no guide found in docs/"
    );

    let mut ids = HashMap::new();
    let mut checked = 0;
    let mut failures = Vec::new();
    for file in &files {
        let text =
            fs::read_to_string(file).unwrap_or_else(|e| panic!("reading {}: {e}", file.display()));
        for link in links(&text) {
            let dest = link.dest.trim();
            if dest.is_empty() || is_absolute_url(dest) {
                continue;
            }
            checked += 1;
            if let Some(why) = broken(&root, file, dest, &mut ids) {
                let name = file.strip_prefix(&root).unwrap_or(file).display();
                failures.push(format!("{name}:{}: {dest}: {why}", link.line));
            }
        }
    }
    assert!(
        checked > 0,
        "no relative link found: the link finder is broken"
    );
    assert!(
        failures.is_empty(),
        "{} of {checked} relative links do not resolve:\n{}",
        failures.len(),
        failures.join("\n")
    );
}

#[test]
fn the_readme_stays_under_300_lines() {
    let readme = workspace_root().join("README.md");
    let lines = fs::read_to_string(&readme)
        .expect("reading README.md")
        .lines()
        .count();
    assert!(
        lines < README_LINE_LIMIT,
        "README.md has {lines} lines; it is a map and ends under {README_LINE_LIMIT}: move a section into a guide in docs/"
    );
}

#[test]
fn heading_ids_follow_githubs_rule_on_the_rendered_text() {
    let text = "# fabkit\n\
                ## Three ways to a key's owner: `--path`\n\
                ### What a killed rank leaves in /dev/shm\n\
                ## Über `ipoib-eval` (`-J`, schema `ipoib-eval/1`)\n\
                ## Notes\n## Notes\n## Notes-1\n\
                ```sh\n# not a heading\n```\n\
                Setext heading\n==============\n";
    let ids = heading_ids(text);
    for id in [
        "fabkit",
        "three-ways-to-a-keys-owner---path",
        "what-a-killed-rank-leaves-in-devshm",
        "über-ipoib-eval--j-schema-ipoib-eval1",
        "notes",
        "notes-1",
        "notes-1-1",
        "setext-heading",
    ] {
        assert!(ids.contains(id), "{id} missing from {ids:?}");
    }
    assert!(
        !ids.contains("not-a-heading"),
        "a comment in a code block became a heading"
    );
}

#[test]
fn links_in_code_are_not_links() {
    let text = "See [the DHT](docs/dht.md#the-dht) and ![a chart](r/a.svg).\n\
                `[not](a-link)` and ``[nor](this) ` one``\n\
                \n\
                ```md\n[inside](a-fence)\n```\n\
                [ref]: results/README.md \"title\"\n\
                a [link split\n\
                over lines](docs/x.md) and [parens](a_(b).md)\n";
    let found = links(text);
    let found: Vec<(usize, &str)> = found.iter().map(|l| (l.line, l.dest.as_str())).collect();
    assert_eq!(
        found,
        [
            (1, "docs/dht.md#the-dht"),
            (1, "r/a.svg"),
            (7, "results/README.md"),
            (9, "docs/x.md"),
            (9, "a_(b).md"),
        ]
    );
}
