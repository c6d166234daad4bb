//! Generates bindings against the system libfabric found by pkg-config, and
//! compiles C wrappers for the `static inline` fi_* functions, which have no
//! symbol in libfabric.so and so cannot be called through plain bindings.

use std::env;
use std::path::PathBuf;

const MIN_VERSION: &str = "1.17";

fn main() {
    println!("cargo:rerun-if-changed=wrapper.h");
    let lib = match pkg_config::Config::new()
        .atleast_version(MIN_VERSION)
        .probe("libfabric")
    {
        Ok(lib) => lib,
        Err(e) => panic!(
            "libfabric >= {MIN_VERSION} not found by pkg-config ({e}).\n\
             On Debian/Ubuntu: apt-get install libfabric-dev; elsewhere set \
             PKG_CONFIG_PATH to the directory holding libfabric.pc."
        ),
    };

    let out = PathBuf::from(env::var("OUT_DIR").unwrap());
    let wrappers = out.join("static_wrappers");
    let mut builder = bindgen::Builder::default()
        .header("wrapper.h")
        .allowlist_function("fi_.*")
        .allowlist_type("fi_.*|fid.*")
        .allowlist_var("FI_.*|fabkit_.*")
        .wrap_static_fns(true)
        .wrap_static_fns_path(&wrappers)
        .derive_default(true)
        .derive_debug(true)
        .prepend_enum_name(false)
        .layout_tests(false)
        .parse_callbacks(Box::new(bindgen::CargoCallbacks::new()));
    for inc in &lib.include_paths {
        builder = builder.clang_arg(format!("-I{}", inc.display()));
    }
    let bindings = builder
        .generate()
        .expect("bindgen could not parse the libfabric headers (is libclang-dev installed?)");
    bindings
        .write_to_file(out.join("bindings.rs"))
        .expect("write bindings.rs");

    let mut cc = cc::Build::new();
    cc.file(wrappers.with_extension("c"))
        .include(env::current_dir().unwrap())
        .warnings(false);
    for inc in &lib.include_paths {
        cc.include(inc);
    }
    cc.compile("fabric_static_wrappers");
}
