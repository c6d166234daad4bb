//! The message path over MPI point-to-point, under `mpirun -n 3`: tables
//! made by `fabkit_dht::open` on the message path (every other rank's keys
//! as requests, served by each rank's service thread under
//! MPI_THREAD_MULTIPLE) read back every rank's writes, and their counters
//! say every request was served; `auto` takes memory on one node; a call
//! whose owner never answers ends at its deadline naming the owner; a
//! reply longer than the caller takes is an error. Open MPI is installed
//! by .ci/run: this fails, not skips, without it.
#![cfg(all(feature = "mpi", feature = "fabric"))]

mod common;

use std::time::{Duration, Instant};

use common::{key, small, value};
use fabkit_core::Bootstrap;
use fabkit_dht::open::{open, MpiBoot, Recipe};
use fabkit_dht::path::Taken;
use fabkit_dht::{Path, Read, Variant};
use fabkit_mpi::{Mailbox, MpiBootstrap, WindowKind};

const CHILD_ENV: &str = "FABKIT_TEST_MESSAGE_DIR";
/// What each rank prints when all its checks passed.
const MARK: &str = "MESSAGE-PATH-OK";

/// Not a test on its own: each rank of
/// `the_message_path_over_mpi_point_to_point_under_mpirun`.
#[test]
#[ignore = "run under mpirun by the_message_path_over_mpi_point_to_point_under_mpirun"]
fn message_rank() {
    assert!(
        std::env::var_os("OMPI_COMM_WORLD_SIZE").is_some(),
        "message_rank is one rank of an mpirun job: run \
         the_message_path_over_mpi_point_to_point_under_mpirun instead"
    );
    let boot = MpiBootstrap::init_threads(Duration::from_secs(60), true).unwrap();
    assert!(
        fabkit_mpi::threads_multiple(),
        "Open MPI gave less than MPI_THREAD_MULTIPLE"
    );
    let (me, n) = (boot.rank() as u64, boot.size() as u64);
    for variant in [Variant::Lockfree, Variant::Fine, Variant::Chunked] {
        for (path, taken) in [(Path::Message, Taken::Message), (Path::Auto, Taken::Memory)] {
            let mut cfg = small(variant, 256);
            cfg.path = path;
            let mut r = Recipe::fabric("tcp;ofi_rxm");
            r.mpi = Some((MpiBoot::Borrowed(&boot), WindowKind::Allocate));
            let t = open(&cfg, &r, &boot).unwrap();
            assert_eq!(t.path, taken, "{variant:?} {path:?}: {}", t.plan.why);
            fabkit_dht::with_table!(&t.table, d => {
                for turn in 0..n {
                    if turn == me {
                        let keys: Vec<Vec<u8>> = (0..30).map(|i| key(me * 100 + i)).collect();
                        let vals: Vec<Vec<u8>> = keys.iter().map(|k| value(k, me, 1, 24)).collect();
                        let items: Vec<(&[u8], &[u8])> =
                            keys.iter().zip(&vals).map(|(k, v)| (&k[..], &v[..])).collect();
                        d.write_many(&items).unwrap();
                    }
                    boot.barrier().unwrap();
                }
                for w in 0..n {
                    let keys: Vec<Vec<u8>> = (0..30).map(|i| key(w * 100 + i)).collect();
                    let refs: Vec<&[u8]> = keys.iter().map(|k| &k[..]).collect();
                    for (k, got) in keys.iter().zip(d.read_many(&refs).unwrap()) {
                        assert_eq!(got, Read::Hit(value(k, w, 1, 24)), "{variant:?} {path:?}");
                    }
                }
                // Every rank done reading, so every request is served,
                // before any takes its counters.
                boot.barrier().unwrap();
                let all = d.stats_all(&boot).unwrap();
                if taken == Taken::Message {
                    assert!(all.requests > 0, "{variant:?}: no request sent");
                    assert_eq!(all.served_requests, all.requests, "{variant:?}: {all:?}");
                } else {
                    assert_eq!(all.requests, 0, "{variant:?}: {all:?}");
                }
            });
            t.table.close(&boot).unwrap();
        }
    }
    // A mailbox alone: rank 1 serves nothing, so rank 0's call to it ends
    // at its deadline, naming rank 1; rank 2, whose messages may be longer
    // (sizes are each rank's own), answers rank 0 with a reply longer than
    // rank 0 takes.
    let max = if me == 2 { 128 } else { 64 };
    let m = Mailbox::create(&boot, Duration::from_secs(10), max).unwrap();
    match me {
        0 => {
            let c = m.call(1, 7, b"anyone?").unwrap();
            let start = Instant::now();
            let e = m
                .wait_reply(c, Instant::now() + Duration::from_millis(300), |_| ())
                .unwrap_err();
            assert!(
                start.elapsed() < Duration::from_secs(5),
                "{:?}",
                start.elapsed()
            );
            assert!(e.to_string().contains("rank 1"), "{e}");
            let c = m.call(2, 8, b"long one").unwrap();
            let e = m
                .wait_reply(c, Instant::now() + Duration::from_secs(20), |_| ())
                .unwrap_err();
            assert!(e.to_string().contains("longer than the 64 B"), "{e}");
        }
        2 => {
            let mut from = None;
            while from.is_none() {
                m.serve(Duration::from_secs(1), &mut |r, _| from = Some(r))
                    .unwrap();
            }
            assert_eq!(from, Some(0));
            m.answer(0, 8, &[0u8; 100]).unwrap();
        }
        _ => {}
    }
    boot.barrier().unwrap();
    println!("{MARK} rank {me}");
    drop(m);
    drop(boot);
}

#[test]
fn the_message_path_over_mpi_point_to_point_under_mpirun() {
    let dir = tempfile::tempdir().unwrap();
    let (status, out) = common::mpirun::run("message_rank", 3, CHILD_ENV, dir.path());
    assert!(status.success(), "mpirun exited {status}\n{out}");
    for r in 0..3 {
        assert!(
            out.contains(&format!("{MARK} rank {r}")),
            "rank {r}:\n{out}"
        );
    }
}
