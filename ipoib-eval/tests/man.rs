//! ipoib-eval's man pages and shell completions, kept in the repository's
//! `man/`, are what its argument definitions make (see fabkit's
//! `bench/tests/man.rs`).

use std::path::Path;

#[test]
fn the_man_pages_and_completions_in_man_are_what_the_flags_make() {
    let kept = Path::new(env!("CARGO_MANIFEST_DIR")).join("../man");
    let exe = Path::new(env!("CARGO_BIN_EXE_ipoib-eval"));
    if let Err(e) = fabkit_clidocs::check_binary(exe, "ipoib-eval", &kept) {
        panic!("{e}");
    }
    for sub in ["client", "server", "sweep", "testbed-up"] {
        assert!(
            kept.join(format!("man1/ipoib-eval-{sub}.1")).exists(),
            "{sub}"
        );
    }
}
