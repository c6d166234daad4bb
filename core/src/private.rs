//! Files only this user reads: what ranks publish to each other
//! (addresses, memory keys, passwords) and a table's dumps.

use std::fs::File;
use std::path::Path;

/// Creates a fresh file at `path` readable and writable by this user only
/// (0600). Whatever is under the name is removed first (a link itself,
/// never what it points to), so the file is always a new one of that mode,
/// never another user's written through.
pub fn create(path: &Path) -> std::io::Result<File> {
    use std::os::unix::fs::OpenOptionsExt;
    match std::fs::remove_file(path) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => return Err(e),
        _ => {}
    }
    std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::PermissionsExt;

    #[test]
    fn a_private_file_is_0600_and_replaces_a_link_not_its_target() {
        let dir = tempfile::tempdir().unwrap();
        let target = dir.path().join("target");
        std::fs::write(&target, "theirs").unwrap();
        let link = dir.path().join("link");
        std::os::unix::fs::symlink(&target, &link).unwrap();
        let f = super::create(&link).unwrap();
        assert_eq!(f.metadata().unwrap().permissions().mode() & 0o777, 0o600);
        assert_eq!(std::fs::read_to_string(&target).unwrap(), "theirs");
        assert!(!std::fs::symlink_metadata(&link).unwrap().is_symlink());
    }
}
