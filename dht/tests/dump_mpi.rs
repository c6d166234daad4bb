//! A restore in which one rank's shard is damaged, under `mpirun -n 2` on
//! the MPI one-sided transport: both ranks end with the agreed error naming
//! rank 1, nothing is restored, and the job ends (non-zero) instead of one
//! rank waiting in a collective its failed peer never reaches. Open MPI is
//! installed by .ci/run: this fails, not skips, without it.
#![cfg(feature = "mpi")]

mod common;

use common::{key, small, value};
use fabkit_core::Bootstrap;
use fabkit_dht::transport::mpi::MpiTransport;
use fabkit_dht::{Config, Dht, Read, Variant};
use fabkit_mpi::MpiBootstrap;
use fabkit_mpi::WindowKind;

const CHILD_ENV: &str = "FABKIT_TEST_DUMP_DIR";
const KEYS: u64 = 50;
/// What each rank prints before its error, for the parent to find.
const MARK: &str = "RESTORE-RESULT";

/// A fresh table over a new window (collective).
fn table(boot: &MpiBootstrap, cfg: Config) -> Dht<MpiTransport<'_>> {
    let t = MpiTransport::new(boot, cfg.region_len(), WindowKind::Allocate, false).unwrap();
    Dht::create(t, cfg, boot).unwrap()
}

/// Not a test on its own: each rank of
/// `a_damaged_shard_fails_the_restore_on_every_rank_under_mpirun`.
#[test]
#[ignore = "run under mpirun by a_damaged_shard_fails_the_restore_on_every_rank_under_mpirun"]
fn mpi_restore_rank() {
    // Run with --ignored on its own, outside mpirun, it would prove
    // nothing: fail instead of passing.
    assert!(
        std::env::var_os("OMPI_COMM_WORLD_SIZE").is_some(),
        "mpi_restore_rank is one rank of an mpirun job: run \
         a_damaged_shard_fails_the_restore_on_every_rank_under_mpirun instead"
    );
    let dir = std::env::var(CHILD_ENV).unwrap_or_else(|_| {
        panic!("{CHILD_ENV} is not set: the parent test sets it for mpirun's ranks")
    });
    let prefix = std::path::Path::new(&dir).join("d");
    let boot = MpiBootstrap::init().unwrap();
    let me = boot.rank();
    let cfg = small(Variant::Lockfree, 128);
    let failed = {
        let a = table(&boot, cfg);
        for i in (0..KEYS).filter(|i| i % 2 == me as u64) {
            a.write(&key(i), &value(&key(i), 0, i, 24)).unwrap();
        }
        assert!(a.dump(&prefix, &boot).unwrap().records > 0);
        if me == 1 {
            // A value byte of record 0 of this rank's own shard.
            let s1 = format!("{}.rank1", prefix.display());
            let mut b = std::fs::read(&s1).unwrap();
            b[80 + 16 + 3] ^= 1;
            std::fs::write(&s1, b).unwrap();
        }
        boot.barrier().unwrap();
        let fresh = table(&boot, cfg);
        let r = fresh.restore(&prefix, 2, &boot, 16);
        println!("{MARK} rank {me}: {r:?}");
        if let Err(e) = &r {
            println!("{MARK} rank {me} message: {e}");
        }
        let untouched = (0..KEYS).all(|i| fresh.read(&key(i)).unwrap() == Read::Miss);
        println!("{MARK} rank {me} untouched: {untouched}");
        // Both windows are freed here, collectively, before MPI finalizes.
        fresh.free(&boot).unwrap().free().unwrap();
        a.free(&boot).unwrap().free().unwrap();
        r.is_err()
    };
    drop(boot);
    // A failed restore is a failed rank: mpirun must say so.
    std::process::exit(if failed { 3 } else { 0 });
}

/// Runs test `child` of this binary as two ranks under mpirun, with `dir`
/// in the children's environment.
fn mpirun(child: &str, dir: &std::path::Path) -> (std::process::ExitStatus, String) {
    common::mpirun::run(child, 2, CHILD_ENV, dir)
}

#[test]
fn a_damaged_shard_fails_the_restore_on_every_rank_under_mpirun() {
    let dir = tempfile::tempdir().unwrap();
    let (status, out) = mpirun("mpi_restore_rank", dir.path());
    assert!(!status.success(), "mpirun exited {status}");
    let s1 = format!("{}, byte 80:", dir.path().join("d.rank1").display());
    for r in 0..2 {
        let msg = out
            .lines()
            .find_map(|l| l.strip_prefix(&format!("{MARK} rank {r} message: ")))
            .unwrap_or_else(|| panic!("rank {r} printed no error:\n{out}"));
        assert!(msg.starts_with("restore failed on rank 1: "), "{msg}");
        assert!(
            msg.contains(&s1) && msg.contains("fails its checksum"),
            "{msg}"
        );
        assert!(
            out.contains(&format!("{MARK} rank {r} untouched: true")),
            "rank {r} restored something:\n{out}"
        );
    }
}

/// A table that owns its MPI (what a C handle keeps): the transport shares
/// the bootstrap, so the table and the bootstrap live in one value with no
/// borrow between them.
struct Owned {
    dht: Dht<MpiTransport<'static>>,
    boot: std::rc::Rc<MpiBootstrap>,
}

#[test]
#[ignore = "run under mpirun by an_owned_mpi_table_is_a_value_of_its_own"]
fn owned_table_rank() {
    assert!(
        std::env::var_os("OMPI_COMM_WORLD_SIZE").is_some(),
        "owned_table_rank is one rank of an mpirun job"
    );
    let boot = std::rc::Rc::new(MpiBootstrap::init().unwrap());
    let cfg = small(Variant::Lockfree, 128);
    let make = || -> Owned {
        let t =
            MpiTransport::new_shared(boot.clone(), cfg.region_len(), WindowKind::Allocate, false)
                .unwrap();
        Owned {
            dht: Dht::create(t, cfg, &*boot).unwrap(),
            boot: boot.clone(),
        }
    };
    let owned = Box::new(make());
    drop(boot);
    let me = owned.boot.rank() as u64;
    for i in (0..KEYS).filter(|i| i % 2 == me) {
        owned.dht.write(&key(i), &value(&key(i), 0, i, 24)).unwrap();
    }
    owned.boot.barrier().unwrap();
    let hits = (0..KEYS)
        .filter(|i| matches!(owned.dht.read(&key(*i)).unwrap(), Read::Hit(_)))
        .count();
    println!("{MARK} rank {me} owned hits: {hits}");
    let Owned { dht, boot } = *owned;
    dht.free(&*boot).unwrap().free().unwrap();
    drop(boot);
}

#[test]
fn an_owned_mpi_table_is_a_value_of_its_own() {
    let dir = tempfile::tempdir().unwrap();
    let (status, out) = mpirun("owned_table_rank", dir.path());
    assert!(status.success(), "mpirun exited {status}");
    for r in 0..2 {
        assert!(
            out.contains(&format!("{MARK} rank {r} owned hits: {KEYS}")),
            "rank {r} did not read every key back:\n{out}"
        );
    }
}
