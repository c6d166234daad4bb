//! A C program written only against the public MPI-DHT's API
//! (`examples/mpidht_api.c`: its own hash, 4-byte keys and values, 50
//! buckets per rank), built with `mpicc` against fabkit's header and
//! library, shared and static, and run under mpirun on 2 and 4 ranks;
//! then, relinked as it is, on another variant and transport chosen by
//! the environment alone.

mod common;

use common::{build, every_rank_says, run};

#[test]
fn a_program_written_for_the_mpi_dht_relinks_and_runs_on_2_and_4_ranks() {
    let dir = tempfile::tempdir().unwrap();
    let dump = dir.path().to_str().unwrap();
    for shared in [true, false] {
        let how = if shared { "shared" } else { "static" };
        let exe = dir.path().join(how);
        build("mpidht_api", &exe, shared);
        for ranks in [2, 4] {
            let out = run(&exe, ranks, &[dump], &[]);
            // Every rank on this node: the auto path maps their regions.
            let is = "(lockfree over mpi, path memory (auto: every rank on this node))";
            every_rank_says(&format!("{how} on {ranks} ranks"), ranks, out, is);
        }
    }
}

#[test]
fn the_environment_gives_a_relinked_program_another_variant_and_transport() {
    let dir = tempfile::tempdir().unwrap();
    let dump = dir.path().to_str().unwrap();
    let exe = dir.path().join("shared");
    build("mpidht_api", &exe, true);
    for (env, is) in [
        (
            [("FABKIT_DHT_VARIANT", "coarse"), ("FABKIT_DHT_PATH", "rma")],
            "(coarse over mpi (MPI_Win_allocate), path rma (rma: asked for))",
        ),
        (
            [
                ("FABKIT_DHT_VARIANT", "chunked"),
                ("FABKIT_DHT_TRANSPORT", "shm"),
            ],
            "(chunked over shm (provider tcp;ofi_rxm), path memory (memory: asked for))",
        ),
    ] {
        let out = run(&exe, 2, &[dump], &env);
        every_rank_says(&format!("{env:?}"), 2, out, is);
    }
    // A choice that does not exist fails DHT_create, with the program's
    // own failure line and exit code.
    let (ok, out) = run(&exe, 2, &[dump], &[("FABKIT_DHT_VARIANT", "bogus")]);
    assert!(!ok && out.contains("FAIL DHT_create"), "{out}");
    assert!(
        out.contains("FABKIT_DHT_VARIANT is \"bogus\": give one of"),
        "{out}"
    );
}
