//! Where reports go: output files checked before a run of minutes, and
//! standard output kept for data when `--json -` or `--csv -` asks for it.

use std::io::Write;
use std::path::Path;

use anyhow::{Context, Result};

use crate::exit::usage;

/// Refuses, before a run of minutes, an output file `flag` names that
/// cannot be written (`-`, standard output, always can). The probe opens
/// it for appending and removes it again if it was not there, so a run
/// refused or failed later leaves no empty file behind.
pub fn check_output_file(flag: &str, path: &Path) -> Result<()> {
    if path.as_os_str() == "-" {
        return Ok(());
    }
    let probe = || -> std::io::Result<()> {
        // A pipe, a socket or a device is checked without opening it: a
        // FIFO's reader would see end of file at the probe's close, and
        // the real write would then wait for a reader for ever.
        if let Ok(m) = std::fs::metadata(path) {
            if !m.is_file() && !m.is_dir() {
                return writable(path);
            }
        }
        let existed = path.exists();
        std::fs::OpenOptions::new()
            .append(true)
            .create(true)
            .open(path)?;
        if !existed {
            // Processes probing the same path at once: another's removal
            // of the file this one created is no failure.
            match std::fs::remove_file(path) {
                Err(e) if e.kind() != std::io::ErrorKind::NotFound => return Err(e),
                _ => {}
            }
        }
        Ok(())
    };
    probe().map_err(|e| {
        usage(format!(
            "{flag} {}: {e}; give a file in a directory that exists and is writable",
            path.display()
        ))
    })
}

/// Whether this process may write `path` (access(2) with W_OK), without
/// opening it.
fn writable(path: &Path) -> std::io::Result<()> {
    use std::os::unix::ffi::OsStrExt;
    let c = std::ffi::CString::new(path.as_os_str().as_bytes())
        .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidInput, e))?;
    // SAFETY: c is a valid NUL-terminated path; access reads it only.
    if unsafe { libc::access(c.as_ptr(), libc::W_OK) } == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}

/// Makes the output directory `flag` names if it is not there, and
/// refuses it unless a file can be written and removed in it.
pub fn check_output_dir(flag: &str, dir: &Path) -> Result<()> {
    let probe = || -> std::io::Result<()> {
        std::fs::create_dir_all(dir)?;
        let file = dir.join(format!(".fabkit-probe-{}", std::process::id()));
        std::fs::write(&file, b"")?;
        std::fs::remove_file(file)
    };
    probe().map_err(|e| {
        usage(format!(
            "{flag} {}: {e}; give a directory that can be made and written",
            dir.display()
        ))
    })
}

/// Writes `text` to `path`, or with `-` to the real standard output, which
/// [`reserve_stdout`] kept for it.
pub fn write_out(path: &Path, text: &str) -> Result<()> {
    if path.as_os_str() == "-" {
        let mut out = match DATA_OUT.get() {
            Some(f) => f.try_clone().context("duplicating standard output")?,
            None => {
                print!("{text}");
                return Ok(());
            }
        };
        out.write_all(text.as_bytes())
            .and_then(|()| out.flush())
            .context("writing to standard output")
    } else if is_fifo(path) {
        // A named pipe: opened without waiting, so one nobody reads fails
        // at once (ENXIO) instead of blocking the finished run for ever;
        // then written as any file.
        use std::os::unix::fs::OpenOptionsExt;
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .custom_flags(libc::O_NONBLOCK)
            .open(path)
            .with_context(|| {
                format!(
                    "writing {}: a named pipe nobody is reading; start its reader first",
                    path.display()
                )
            })?;
        set_blocking(&f).with_context(|| format!("writing {}", path.display()))?;
        f.write_all(text.as_bytes())
            .with_context(|| format!("writing {}", path.display()))
    } else {
        std::fs::write(path, text).with_context(|| format!("writing {}", path.display()))
    }
}

/// Whether `path` is a named pipe (not following a link is not needed:
/// writing follows it too).
fn is_fifo(path: &Path) -> bool {
    use std::os::unix::fs::FileTypeExt;
    std::fs::metadata(path).is_ok_and(|m| m.file_type().is_fifo())
}

/// Clears `O_NONBLOCK` on `f`, so a full pipe is waited on, not an error.
fn set_blocking(f: &std::fs::File) -> std::io::Result<()> {
    use std::os::fd::AsRawFd;
    let fd = f.as_raw_fd();
    // SAFETY: `fd` is open for as long as `f` lives; F_GETFL/F_SETFL take
    // and return plain flag words.
    let flags = unsafe { libc::fcntl(fd, libc::F_GETFL) };
    if flags < 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: as above.
    if unsafe { libc::fcntl(fd, libc::F_SETFL, flags & !libc::O_NONBLOCK) } < 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

/// The real standard output, when `-` asked for data on it.
static DATA_OUT: std::sync::OnceLock<std::fs::File> = std::sync::OnceLock::new();

/// With `--json -` (`json`) or `--csv -` (`csv`), standard output carries
/// that data and nothing else: the real stdout is kept for [`write_out`]
/// and file descriptor 1 becomes a copy of stderr, so tables, progress and
/// anything libfabric or MPI print go there.
pub fn reserve_stdout(json: bool, csv: bool) -> Result<()> {
    crate::exit::ensure_usage!(
        !(json && csv),
        "--json - and --csv - cannot both have standard output: give one of them a file"
    );
    if !(json || csv) {
        return Ok(());
    }
    use std::os::fd::AsFd;
    let _ = std::io::stdout().flush();
    let data = std::io::stdout()
        .as_fd()
        .try_clone_to_owned()
        .context("duplicating standard output")?;
    // SAFETY: dup2 on two descriptors this process holds open (1 and 2);
    // Rust's Stdout keeps using fd 1, which now refers to stderr's file.
    if unsafe { libc::dup2(2, 1) } < 0 {
        anyhow::bail!(
            "redirecting the report to stderr: {}",
            std::io::Error::last_os_error()
        );
    }
    let _ = DATA_OUT.set(std::fs::File::from(data));
    Ok(())
}
