//! The header C programs include (`include/LUCX/MPI/DHT.h`) against the
//! library: a C file generated from the Rust definitions asserts, at
//! compile time, every return code's value and every struct's size and
//! field offsets, and assigns every function to a pointer of the type the
//! MPI-DHT's API (and fabkit's additions) give it; built as C and as C++
//! and linked against the library, so a function the header declares and
//! the library lacks fails too. The Rust side pins the same types. The two
//! cannot drift apart unseen.

mod common;

use std::fmt::Write;
use std::mem::{offset_of, size_of};
use std::process::Command;

use common::{compile, here, lib_dir};
use fabkit_mpi_dht::{fabkit_dht_options_t, fabkit_dht_stats_t, DHT_init_t, CODES};

/// Every function, as a pointer declaration of the type it must have.
const FUNCTIONS: [&str; 16] = [
    "DHT *(*f_create)(const DHT_init_t *) = DHT_create",
    "int (*f_write)(DHT *, void *, void *, uint32_t *, uint32_t *) = DHT_write",
    "int (*f_read)(DHT *, const void *, void *) = DHT_read",
    "int (*f_to_file)(DHT *, const char *) = DHT_to_file",
    "int (*f_from_file)(DHT *, const char *) = DHT_from_file",
    "int (*f_free)(DHT *, uint32_t *) = DHT_free",
    "int (*f_print)(DHT *) = DHT_print_statistics",
    "void (*f_set_cb)(DHT *, int (*)(int, void *, int, void *)) = DHT_set_accumulate_callback",
    "int (*f_acc)(DHT *, const void *, int, void *, uint32_t *, uint32_t *, int *) = \
     DHT_write_accumulate",
    "DHT *(*f_fcreate)(const DHT_init_t *, const fabkit_dht_options_t *) = fabkit_dht_create",
    "int (*f_rmany)(DHT *, size_t, const void *, void *, int *) = fabkit_dht_read_many",
    "int (*f_wmany)(DHT *, size_t, const void *, const void *, int *) = fabkit_dht_write_many",
    "int (*f_stats)(DHT *, fabkit_dht_stats_t *, int) = fabkit_dht_stats",
    "const char *(*f_describe)(DHT *) = fabkit_dht_describe",
    "const char *(*f_last)(void) = fabkit_dht_last_error",
    "int filler = DHT_FILEHEADER_SIZE",
];

fn program() -> String {
    let mut c = String::from(
        "#include <LUCX/MPI/DHT.h>\n#include <stddef.h>\n#include <stdio.h>\n\
         #ifdef __cplusplus\n#define SA static_assert\n#else\n#define SA _Static_assert\n#endif\n",
    );
    for (name, value) in CODES {
        writeln!(c, "SA({name} == {value}, \"{name}\");").unwrap();
    }
    let mut layout = |ty: &str, size: usize, fields: &[(&str, usize)]| {
        writeln!(c, "SA(sizeof({ty}) == {size}, \"sizeof {ty}\");").unwrap();
        for (f, at) in fields {
            writeln!(c, "SA(offsetof({ty}, {f}) == {at}, \"{ty}.{f}\");").unwrap();
        }
    };
    layout(
        "DHT_init_t",
        size_of::<DHT_init_t>(),
        &[
            ("key_size", offset_of!(DHT_init_t, key_size)),
            ("data_size", offset_of!(DHT_init_t, data_size)),
            ("bucket_count", offset_of!(DHT_init_t, bucket_count)),
            ("hash_func", offset_of!(DHT_init_t, hash_func)),
            ("comm", offset_of!(DHT_init_t, comm)),
        ],
    );
    layout(
        "fabkit_dht_options_t",
        size_of::<fabkit_dht_options_t>(),
        &[
            ("variant", offset_of!(fabkit_dht_options_t, variant)),
            ("transport", offset_of!(fabkit_dht_options_t, transport)),
            ("provider", offset_of!(fabkit_dht_options_t, provider)),
            ("domain", offset_of!(fabkit_dht_options_t, domain)),
        ],
    );
    macro_rules! offsets {
        ($ty:ty: $($f:ident),*) => { &[$((stringify!($f), offset_of!($ty, $f))),*] };
    }
    layout(
        "fabkit_dht_stats_t",
        size_of::<fabkit_dht_stats_t>(),
        offsets!(fabkit_dht_stats_t: reads, writes, hits, misses, corrupt, inserts, updates,
            evictions, checksum_retries, invalidations, lock_retries, remote_ops, batches,
            remote_bytes, self_ops, cross_reads, cross_writes, cross_atomics),
    );
    c.push_str("int main(void) {\n");
    for f in FUNCTIONS {
        writeln!(c, "  {f};").unwrap();
    }
    c.push_str(
        "  printf(\"%p %p %d\\n\", (void *)f_create, (void *)f_last, filler);\n  return 0;\n}\n",
    );
    c
}

/// The library's functions have the types the header gives them (the C
/// side checks the header against the same list): a change on either side
/// fails to build.
#[test]
fn the_librarys_functions_have_the_types_the_header_declares() {
    use fabkit_mpi_dht::{fabkit, mpidht, AccumulateFunc, DHT};
    use std::ffi::{c_char, c_int, c_void};
    let _: unsafe extern "C" fn(*const DHT_init_t) -> *mut DHT = mpidht::DHT_create;
    let _: unsafe extern "C" fn(*mut DHT, *mut c_void, *mut c_void, *mut u32, *mut u32) -> c_int =
        mpidht::DHT_write;
    let _: unsafe extern "C" fn(*mut DHT, *const c_void, *mut c_void) -> c_int = mpidht::DHT_read;
    let _: unsafe extern "C" fn(*mut DHT, *const c_char) -> c_int = mpidht::DHT_to_file;
    let _: unsafe extern "C" fn(*mut DHT, *const c_char) -> c_int = mpidht::DHT_from_file;
    let _: unsafe extern "C" fn(*mut DHT, *mut u32) -> c_int = mpidht::DHT_free;
    let _: unsafe extern "C" fn(*mut DHT) -> c_int = mpidht::DHT_print_statistics;
    let _: unsafe extern "C" fn(*mut DHT, Option<AccumulateFunc>) =
        mpidht::DHT_set_accumulate_callback;
    let _: unsafe extern "C" fn(
        *mut DHT,
        *const c_void,
        c_int,
        *mut c_void,
        *mut u32,
        *mut u32,
        *mut c_int,
    ) -> c_int = mpidht::DHT_write_accumulate;
    let _: unsafe extern "C" fn(*const DHT_init_t, *const fabkit_dht_options_t) -> *mut DHT =
        fabkit::fabkit_dht_create;
    let _: unsafe extern "C" fn(*mut DHT, usize, *const c_void, *mut c_void, *mut c_int) -> c_int =
        fabkit::fabkit_dht_read_many;
    let _: unsafe extern "C" fn(
        *mut DHT,
        usize,
        *const c_void,
        *const c_void,
        *mut c_int,
    ) -> c_int = fabkit::fabkit_dht_write_many;
    let _: unsafe extern "C" fn(*mut DHT, *mut fabkit_dht_stats_t, c_int) -> c_int =
        fabkit::fabkit_dht_stats;
    let _: unsafe extern "C" fn(*mut DHT) -> *const c_char = fabkit::fabkit_dht_describe;
    let _: extern "C" fn() -> *const c_char = fabkit::fabkit_dht_last_error;
    // usize is C's size_t here.
    assert_eq!(size_of::<usize>(), size_of::<libc::size_t>());
}

#[test]
fn the_header_agrees_with_the_library_as_c_and_as_cxx() {
    let dir = tempfile::tempdir().unwrap();
    let src = program();
    for (compiler, file) in [("mpicc", "check.c"), ("mpicxx", "check.cpp")] {
        let path = dir.path().join(file);
        std::fs::write(&path, &src).unwrap();
        let mut c = Command::new(compiler);
        c.arg(&path)
            .args(["-Wall", "-Werror", "-Wno-unused-variable", "-I"])
            .arg(here().join("include"))
            .arg("-o")
            .arg(dir.path().join(file).with_extension("out"))
            .arg("-L")
            .arg(lib_dir())
            .arg("-lfabkit_mpi_dht");
        compile(c);
    }
}

/// Compiles `src` as C with `defines`; returns whether it built and what
/// the compiler said.
fn compiles(src: &str, defines: &[&str]) -> (bool, String) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("t.c");
    std::fs::write(&path, src).unwrap();
    let o = Command::new("mpicc")
        .arg(&path)
        .args(defines)
        .args(["-c", "-I"])
        .arg(here().join("include"))
        .arg("-o")
        .arg(dir.path().join("t.o"))
        .output()
        .unwrap();
    (
        o.status.success(),
        String::from_utf8_lossy(&o.stderr).into(),
    )
}

#[test]
fn the_other_include_path_gives_the_same_api_under_lucx_mpi_impl_and_says_so_without() {
    // The MPI-DHT's programs include either header; <LUCX/DHT.h> is its
    // MPI API only with LUCX_MPI_IMPL defined (else its UCX one).
    let src = "#include <LUCX/DHT.h>\nint f(DHT *t, const void *k, void *d) { return DHT_read(t, k, d); }\n";
    let (ok, err) = compiles(src, &["-DLUCX_MPI_IMPL"]);
    assert!(ok, "{err}");
    let (ok, err) = compiles(src, &[]);
    assert!(!ok && err.contains("define LUCX_MPI_IMPL"), "{err}");
}

#[test]
fn a_wrong_value_in_the_generated_checks_fails_the_build() {
    // The check above can fail: the same program with one code off by one
    // does not compile.
    let bad = program().replace("SA(DHT_READ_MISS == -2", "SA(DHT_READ_MISS == -3");
    assert_ne!(bad, program());
    let (ok, err) = compiles(&bad, &[]);
    assert!(!ok && err.contains("DHT_READ_MISS"), "{err}");
}
