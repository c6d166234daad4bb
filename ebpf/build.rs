// Builds the eBPF programs in bpf/ with clang (`-target bpf`, with BTF for
// CO-RE relocation) into OUT_DIR, where the library embeds them.

use std::path::PathBuf;
use std::process::Command;

fn main() {
    let out = PathBuf::from(std::env::var_os("OUT_DIR").expect("cargo sets OUT_DIR"));
    // <asm/types.h> comes from the multiarch include directory.
    let multiarch = match std::env::var("CARGO_CFG_TARGET_ARCH").as_deref() {
        Ok("aarch64") => "aarch64-linux-gnu",
        _ => "x86_64-linux-gnu",
    };
    let clang = std::env::var("CLANG").unwrap_or_else(|_| "clang".into());
    println!("cargo:rerun-if-changed=bpf/common.h");
    for prog in ["queues", "rr"] {
        let src = format!("bpf/{prog}.c");
        println!("cargo:rerun-if-changed={src}");
        let obj = out.join(format!("{prog}.o"));
        let status = Command::new(&clang)
            .args(["-O2", "-g", "-target", "bpf", "-Wall", "-Werror"])
            .arg(format!("-I/usr/include/{multiarch}"))
            .args(["-c", &src, "-o"])
            .arg(&obj)
            .status()
            .unwrap_or_else(|e| panic!("running {clang} for {src}: {e} (install clang)"));
        assert!(status.success(), "{clang} failed on {src}");
    }
    println!("cargo:rerun-if-env-changed=CLANG");
}
