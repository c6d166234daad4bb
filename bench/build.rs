// Records the git commit fabkit is built from, so every result file can say
// which code produced it.

fn main() {
    let commit = std::process::Command::new("git")
        .args(["describe", "--always", "--dirty", "--abbrev=12"])
        .output()
        .ok()
        .filter(|o| o.status.success())
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
        .unwrap_or_else(|| "unknown".into());
    println!("cargo:rustc-env=FABKIT_COMMIT={commit}");
    println!("cargo:rerun-if-changed=../.git/HEAD");
    println!("cargo:rerun-if-changed=../.git/index");
    // A commit on a branch changes the ref HEAD names, not HEAD itself; a
    // packed ref lives in packed-refs.
    println!("cargo:rerun-if-changed=../.git/packed-refs");
    if let Some(head) = std::fs::read_to_string("../.git/HEAD")
        .ok()
        .and_then(|h| h.strip_prefix("ref: ").map(|r| r.trim().to_string()))
    {
        println!("cargo:rerun-if-changed=../.git/{head}");
    }
}
