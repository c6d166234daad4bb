//! fabkit's man pages and shell completions, kept in the repository's
//! `man/`, are what its argument definitions make: the test regenerates
//! them with the binary (`fabkit generate-docs`) and fails on any page or
//! completion missing, left over or different, so they never drift from
//! `--help`.

use std::path::Path;

#[test]
fn the_man_pages_and_completions_in_man_are_what_the_flags_make() {
    let kept = Path::new(env!("CARGO_MANIFEST_DIR")).join("../man");
    let exe = Path::new(env!("CARGO_BIN_EXE_fabkit"));
    if let Err(e) = fabkit_clidocs::check_binary(exe, "fabkit", &kept) {
        panic!("{e}");
    }
    for sub in ["dht", "perf", "intrude", "launch"] {
        assert!(kept.join(format!("man1/fabkit-{sub}.1")).exists(), "{sub}");
    }
}
