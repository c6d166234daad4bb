//! Man pages and shell completions made from a clap command tree, so that
//! they say what `--help` says: one page per command and subcommand
//! (`man1/fabkit.1`, `man1/fabkit-dht.1`, `man1/ipoib-eval-testbed-up.1`),
//! and completions for bash, zsh and fish. fabkit and ipoib-eval write them
//! with a hidden subcommand (`generate-docs --out DIR`); the repository
//! keeps them under `man/`, and a test of each binary regenerates them and
//! fails on any difference ([`differences`]): they never drift from
//! `--help`.

#![deny(unsafe_code)]
#![deny(missing_docs)]

use std::io;
use std::path::{Path, PathBuf};

use clap::Command;
use clap_complete::Shell;

/// The shells completions are written for.
const SHELLS: [Shell; 3] = [Shell::Bash, Shell::Zsh, Shell::Fish];

/// The file a shell loads completions of the binary `name` from.
fn completion_file(shell: Shell, name: &str) -> String {
    match shell {
        Shell::Zsh => format!("_{name}"),
        Shell::Fish => format!("{name}.fish"),
        _ => format!("{name}.bash"),
    }
}

/// Writes `cmd`'s man pages into `dir/man1` and its completions into
/// `dir/completions`, making both folders, and removes this binary's files
/// there that no command makes any more; the files written, in order.
/// Hidden subcommands and clap's `help` subcommand get no page and are not
/// completed.
pub fn generate(cmd: Command, dir: &Path) -> io::Result<Vec<PathBuf>> {
    let name = cmd.get_name().to_string();
    let (man, completions) = (dir.join("man1"), dir.join("completions"));
    for d in [&man, &completions] {
        std::fs::create_dir_all(d).map_err(|e| named(d, e))?;
    }
    let mut written = Vec::new();
    let mut visible = visible(&cmd);
    // No page for clap's `help` subcommand, nor a mention of one.
    let mut built = cmd
        .disable_help_subcommand(true)
        .mut_subcommands(|c| c.disable_help_subcommand(true));
    built.build();
    pages(&built, &man, &mut written)?;
    for shell in SHELLS {
        let path = completions.join(completion_file(shell, &name));
        let mut out = Vec::new();
        clap_complete::generate(shell, &mut visible, &name, &mut out);
        std::fs::write(&path, out).map_err(|e| named(&path, e))?;
        written.push(path);
    }
    for d in [&man, &completions] {
        for e in std::fs::read_dir(d).map_err(|e| named(d, e))? {
            let path = e?.path();
            let file = path.file_name().map(|f| f.to_string_lossy().into_owned());
            if file.is_some_and(|f| belongs(&f, &name)) && !written.contains(&path) {
                std::fs::remove_file(&path).map_err(|e| named(&path, e))?;
            }
        }
    }
    Ok(written)
}

/// `e`, saying which file or folder it was about.
fn named(path: &Path, e: io::Error) -> io::Error {
    io::Error::new(e.kind(), format!("{}: {e}", path.display()))
}

/// `cmd` without its hidden subcommands and arguments, for completions:
/// clap_complete offers them all, and clap cannot take a subcommand out,
/// so the root is made again from what is shown.
fn visible(cmd: &Command) -> Command {
    let mut root = Command::new(cmd.get_name().to_string())
        .args(cmd.get_arguments().filter(|a| !a.is_hide_set()).cloned())
        .subcommands(cmd.get_subcommands().filter(|s| !s.is_hide_set()).cloned());
    if let Some(v) = cmd.get_version() {
        root = root.version(v.to_string());
    }
    if let Some(a) = cmd.get_about() {
        root = root.about(a.clone());
    }
    root
}

/// `cmd`'s page and its subcommands', depth first.
fn pages(cmd: &Command, dir: &Path, written: &mut Vec<PathBuf>) -> io::Result<()> {
    // After `build`, a subcommand's display name joins its parents'
    // (`fabkit-dht`), as man pages of subcommands are named.
    let title = cmd.get_display_name().unwrap_or(cmd.get_name()).to_string();
    let path = dir.join(format!("{title}.1"));
    let mut out = Vec::new();
    clap_mangen::Man::new(cmd.clone()).render(&mut out)?;
    std::fs::write(&path, out).map_err(|e| named(&path, e))?;
    written.push(path);
    for sub in cmd.get_subcommands() {
        if !sub.is_hide_set() && sub.get_name() != "help" {
            pages(sub, dir, written)?;
        }
    }
    Ok(())
}

/// Whether `file` (a name in `man1` or `completions`) belongs to the
/// binary `name`.
fn belongs(file: &str, name: &str) -> bool {
    // zsh's is `_name`; the others `name.bash`, `name-sub.1` and so on.
    if let Some(stem) = file.strip_prefix('_') {
        return stem == name;
    }
    file.strip_prefix(name)
        .is_some_and(|rest| rest.starts_with('.') || rest.starts_with('-'))
}

/// How the files of the binary `name` in `fresh` (just generated) differ
/// from those kept in `kept` (each with `man1/` and `completions/`): each
/// file missing, left over or different, one line each; empty when they
/// agree. Other binaries' files in the same folders are not looked at.
pub fn differences(fresh: &Path, kept: &Path, name: &str) -> io::Result<Vec<String>> {
    let mut said = Vec::new();
    for sub in ["man1", "completions"] {
        let list = |d: &Path| -> io::Result<Vec<String>> {
            let mut v = Vec::new();
            if d.exists() {
                for e in std::fs::read_dir(d)? {
                    let f = e?.file_name().to_string_lossy().into_owned();
                    if belongs(&f, name) {
                        v.push(f);
                    }
                }
            }
            v.sort();
            Ok(v)
        };
        let (new, old) = (list(&fresh.join(sub))?, list(&kept.join(sub))?);
        for f in &new {
            let made = std::fs::read(fresh.join(sub).join(f))?;
            match std::fs::read(kept.join(sub).join(f)) {
                Err(_) => said.push(format!("{sub}/{f}: missing")),
                Ok(k) if k != made => said.push(format!("{sub}/{f}: differs")),
                Ok(_) => {}
            }
        }
        for f in old.iter().filter(|f| !new.contains(f)) {
            said.push(format!("{sub}/{f}: left over (no such command now)"));
        }
    }
    Ok(said)
}

/// Runs the binary `exe` (named `name`) with `generate-docs --out` into a
/// temporary folder and compares what it wrote with `kept`: `Err` with a
/// message listing every difference and the command that fixes them. What
/// each binary's drift test calls.
pub fn check_binary(exe: &Path, name: &str, kept: &Path) -> Result<(), String> {
    let fresh = tempfile::tempdir().map_err(|e| format!("a temporary folder: {e}"))?;
    let o = std::process::Command::new(exe)
        .args(["generate-docs", "--out"])
        .arg(fresh.path())
        .output()
        .map_err(|e| format!("running {}: {e}", exe.display()))?;
    if !o.status.success() {
        return Err(format!(
            "{name} generate-docs failed: {}",
            String::from_utf8_lossy(&o.stderr)
        ));
    }
    let said =
        differences(fresh.path(), kept, name).map_err(|e| format!("comparing with man/: {e}"))?;
    if said.is_empty() {
        return Ok(());
    }
    Err(format!(
        "{} is not what {name}'s flags make now:\n  {}\nregenerate it: cargo run --bin {name} -- \
         generate-docs --out man",
        kept.display(),
        said.join("\n  ")
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::{Arg, Command};

    fn tool() -> Command {
        Command::new("tool")
            .version("1.0")
            .about("A tool")
            .subcommand(
                Command::new("run")
                    .about("Runs")
                    .arg(Arg::new("fast").long("fast").help("Quickly"))
                    .subcommand(Command::new("deep").about("Deeper")),
            )
            .subcommand(Command::new("secret").hide(true))
    }

    #[test]
    fn every_visible_command_gets_a_page_and_every_shell_a_completion() {
        let d = tempfile::tempdir().unwrap();
        let files = generate(tool(), d.path()).unwrap();
        let names: Vec<String> = files
            .iter()
            .map(|p| p.strip_prefix(d.path()).unwrap().display().to_string())
            .collect();
        assert_eq!(
            names,
            [
                "man1/tool.1",
                "man1/tool-run.1",
                "man1/tool-run-deep.1",
                "completions/tool.bash",
                "completions/_tool",
                "completions/tool.fish"
            ]
        );
        let page = std::fs::read_to_string(d.path().join("man1/tool-run.1")).unwrap();
        assert!(page.contains("\\-\\-fast"), "{page}");
        assert!(page.contains("Quickly"), "{page}");
        for f in ["tool.bash", "_tool", "tool.fish"] {
            let c = std::fs::read_to_string(d.path().join("completions").join(f)).unwrap();
            assert!(c.contains("run") && !c.contains("secret"), "{f}: {c}");
        }
        // A page of a command gone is removed; another binary's stays.
        std::fs::write(d.path().join("man1/tool-gone.1"), "old").unwrap();
        std::fs::write(d.path().join("man1/toolbox.1"), "x").unwrap();
        generate(tool(), d.path()).unwrap();
        assert!(!d.path().join("man1/tool-gone.1").exists());
        assert!(d.path().join("man1/toolbox.1").exists());
    }

    #[test]
    fn a_changed_flag_a_stale_page_and_a_missing_one_are_each_reported() {
        let (d, fresh) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
        generate(tool(), d.path()).unwrap();
        generate(tool(), fresh.path()).unwrap();
        assert!(differences(fresh.path(), d.path(), "tool")
            .unwrap()
            .is_empty());
        std::fs::write(d.path().join("man1/tool-gone.1"), "old").unwrap();
        std::fs::remove_file(d.path().join("completions/tool.fish")).unwrap();
        // Another binary's files in the same folders are not this one's.
        std::fs::write(d.path().join("man1/toolbox.1"), "x").unwrap();
        let changed = tool().arg(Arg::new("slow").long("slow").help("Slowly"));
        let fresh = tempfile::tempdir().unwrap();
        generate(changed, fresh.path()).unwrap();
        let said = differences(fresh.path(), d.path(), "tool").unwrap();
        assert_eq!(
            said,
            [
                "man1/tool.1: differs",
                "man1/tool-gone.1: left over (no such command now)",
                "completions/_tool: differs",
                "completions/tool.bash: differs",
                "completions/tool.fish: missing"
            ]
        );
    }
}
