//! What fabkit adds in C (`examples/fabkit_api.c`), under mpirun: ranks
//! counting into shared keys with DHT_write_accumulate lose no increment
//! on every variant that holds a bucket (lock-free says it cannot), over
//! MPI, libfabric and the same-node path; batches, counters and failures
//! behave as the header says; ranks that ask for different variants, or
//! one that does not exist, fail DHT_create on every rank.

mod common;

use common::{build, every_rank_says, run};

#[test]
fn accumulations_batches_and_counters_on_every_variant_and_transport() {
    let dir = tempfile::tempdir().unwrap();
    let exe = dir.path().join("fabkit_api");
    build("fabkit_api", &exe, true);
    for (variant, transport, ranks) in [
        ("fine", "mpi", 3),
        ("coarse", "mpi", 2),
        ("chunked", "mpi", 2),
        ("lockfree", "mpi", 2),
        ("fine", "fabric", 2),
        ("chunked", "shm", 3),
    ] {
        let out = run(&exe, ranks, &[variant, transport], &[]);
        every_rank_says(&format!("{variant} over {transport}"), ranks, out, ": ok ");
    }
}

#[test]
fn ranks_that_disagree_or_ask_for_nothing_known_fail_create_on_every_rank() {
    let dir = tempfile::tempdir().unwrap();
    let exe = dir.path().join("fabkit_api");
    build("fabkit_api", &exe, false);
    for mode in ["disagree", "bogus", "osc-rdma"] {
        let out = run(&exe, 3, &["fine", "mpi", mode], &[]);
        every_rank_says(mode, 3, out, ": ok refused");
    }
}

/// The C API's soak: tables created, written, read back and freed again
/// and again for 10 s on 2 ranks; after warm-up no rank's descriptors,
/// threads or /dev/shm segments grow (the program fails if one does). Over
/// MPI (the memory path on one node) and over libfabric RMA.
#[test]
fn a_create_write_read_free_loop_leaves_every_count_where_warm_up_left_it() {
    let dir = tempfile::tempdir().unwrap();
    let exe = dir.path().join("soak");
    build("soak", &exe, false);
    for env in [
        &[][..],
        &[
            ("FABKIT_DHT_TRANSPORT", "fabric"),
            ("FABKIT_DHT_PATH", "rma"),
        ][..],
    ] {
        let out = run(&exe, 2, &["10"], env);
        every_rank_says(&format!("soak {env:?}"), 2, out, ": ok soak");
    }
}
