//! `fabkit clean`: removes what killed runs left: shared-memory segments
//! in /dev/shm, and in the temporary directory the private directories of
//! Redis servers and the ranks' meeting places of `fabkit launch`, and
//! nothing else.
//!
//! A directory is removed only when it is this user's (not a link) and no
//! process holds its lock (see [`crate::held`]): the process that made it
//! ended, however it ended.
//!
//! Two kinds are removed, both only when they belong to this user
//! (owner is this user; never followed through a symlink):
//! - fabkit's own (`fabkit.<job>.<pid namespace>.<pid>.<start>.<what>-<n>`,
//!   see `fabkit_fabric::shm`), when the process that made them no longer
//!   exists in this PID namespace;
//! - the libfabric shm provider's, which it names `<pid>:<uid>:<endpoint>`
//!   (libfabric 1.17, `prov/shm`: the default endpoint name when no source
//!   address is given), when that pid no longer runs, and only from the
//!   initial PID namespace, the one that sees every process.
//!
//! Either kind is kept while any process still has it open or mapped, as
//! seen (by device and inode) in `/proc/<pid>/fd` and `/proc/<pid>/maps`,
//! and while a process that could hold it cannot be looked into (another
//! user's with permission to override, a non-dumpable one): then the line
//! says why and that root can judge it. The judgement is
//! `fabkit_fabric::shm::survey`'s, the one the DHT transport's start uses,
//! and it is made again just before each removal.

use std::path::Path;

use anyhow::Result;
use clap::Args;
use fabkit_fabric::shm::{remove, survey, Removal, Verdict, SHM_DIR};

/// Arguments of `fabkit clean`.
#[derive(Args, Debug)]
#[command(
    after_help = "Exit status: 0 when every stale segment was removed (or none was \
                        found), 1 when a removal failed, 2 for a usage error."
)]
pub struct CleanArgs {
    /// Say what would be removed, and remove nothing.
    #[arg(long)]
    pub dry_run: bool,
}

/// Runs `fabkit clean`: one line per segment removed (or, with
/// `--dry-run`, that would be) or kept with the reason, then how many;
/// "nothing to remove" when there was nothing. False when a removal failed
/// (each failure said on stderr as main says errors).
pub fn command(args: &CleanArgs) -> Result<bool> {
    let dir = Path::new(SHM_DIR);
    let found = survey(true)?;
    let (mut ok, mut removed, mut kept) = (true, 0usize, 0usize);
    for (seg, verdict) in &found {
        let path = dir.join(&seg.file);
        let why = match verdict {
            Verdict::Keep(why) => {
                println!("kept {}: {why}", path.display());
                kept += 1;
                continue;
            }
            Verdict::Stale(why) => why,
        };
        if args.dry_run {
            println!("would remove {}: {why}", path.display());
            removed += 1;
            continue;
        }
        match remove(seg) {
            Ok(Removal::Removed) => {
                println!("removed {}: {why}", path.display());
                removed += 1;
            }
            // Gone meanwhile (its job ended, or a starting rank reaped it).
            Ok(Removal::Gone) => println!("already gone {}", path.display()),
            Ok(Removal::Kept(now)) => {
                println!("kept {}: {now}", path.display());
                kept += 1;
            }
            Err(e) => {
                eprintln!("fabkit: error: could not remove {}: {e}", path.display());
                ok = false;
            }
        }
    }
    let verb = if args.dry_run {
        "would remove"
    } else {
        "removed"
    };
    if found.is_empty() {
        println!("nothing to remove in {SHM_DIR}");
    } else {
        println!("{verb} {removed}, kept {kept} in {SHM_DIR}");
    }
    let dirs: Vec<_> = crate::dhtbench::redis::reap_stale_dirs(args.dry_run)
        .into_iter()
        .map(|d| (d, "a Redis server's directory; its fabkit ended"))
        .chain(
            crate::launch::reap_meeting_places(args.dry_run)
                .into_iter()
                .map(|d| (d, "a launch's meeting place; its launcher ended")),
        )
        .collect();
    for (d, why) in &dirs {
        println!("{verb} {}: {why}", d.display());
    }
    let tmp = std::env::temp_dir();
    if dirs.is_empty() {
        println!("nothing to remove in {}", tmp.display());
    } else {
        println!("{verb} {} in {}", dirs.len(), tmp.display());
    }
    Ok(ok)
}
