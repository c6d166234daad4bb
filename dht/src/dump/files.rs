//! The files a dump writes (shard, part, previous shard) and the bounded
//! rounds in which ranks agree on each step.

use std::path::{Path, PathBuf};

use fabkit_core::Bootstrap;

use crate::collective::agree;
use crate::outcome::{Error, Result};

fn with_suffix(prefix: &Path, suffix: &str) -> PathBuf {
    let mut p = prefix.as_os_str().to_owned();
    p.push(suffix);
    PathBuf::from(p)
}

pub(super) fn shard(prefix: &Path, rank: usize) -> PathBuf {
    with_suffix(prefix, &format!(".rank{rank}"))
}

pub(super) fn part(prefix: &Path, rank: usize) -> PathBuf {
    with_suffix(prefix, &format!(".rank{rank}.part"))
}

pub(super) fn prev(prefix: &Path, rank: usize) -> PathBuf {
    with_suffix(prefix, &format!(".rank{rank}.prev"))
}

pub(super) fn io<'p>(
    what: &'static str,
    path: &'p Path,
) -> impl FnOnce(std::io::Error) -> Error + 'p {
    move |cause| Error::Io {
        what,
        path: path.to_path_buf(),
        cause,
    }
}

/// Removes `path`; a file that is not there is no error.
pub(super) fn remove(path: &Path) -> Result<()> {
    match std::fs::remove_file(path) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(io("removing", path)(e)),
        _ => Ok(()),
    }
}

/// One bounded round of a collective step: every rank contributes whether
/// it has more to do and a payload, or its error. Returns each rank's flag
/// and payload, in rank order.
pub(super) fn round(
    boot: &dyn Bootstrap,
    op: &'static str,
    local: Result<(bool, Vec<u8>)>,
) -> Result<Vec<(bool, Vec<u8>)>> {
    let local = local.map(|(more, p)| [&[u8::from(more)][..], &p].concat());
    agree(boot, op, local)?
        .into_iter()
        .enumerate()
        .map(|(r, p)| match p.split_first() {
            Some((&f, rest)) if f <= 1 => Ok((f == 1, rest.to_vec())),
            _ => Err(Error::Mismatch(format!(
                "rank {r} sent a {op} round of {} B without a more-to-do flag",
                p.len()
            ))),
        })
        .collect()
}
