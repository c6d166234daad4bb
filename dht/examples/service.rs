//! How an owner on the message path answers while its application makes no
//! DHT call: two ranks, a lock-free table on the message path over
//! libfabric `PROVIDER` (default `shm`) with the ranks as threads of this
//! process, or, as `mpirun -n 2 service mpi` (feature `mpi`), over MPI
//! point-to-point.
//!
//! 1. Rank 0 computes for `SECS` seconds and a tenth (a spinning loop, no
//!    DHT call); rank 1 reads keys rank 0 owns, one at a time, for `SECS`,
//!    and times each.
//! 2. Both ranks idle for `SECS`: what rank 0's service thread costs then.
//! 3. Rank 1 reads batches of 64 of those keys for `SECS` while rank 0
//!    idles: its service's busy CPU per key served.
//!
//! Prints one JSON object. Run with
//! `cargo run --release -p fabkit-dht --features fabric --example service -- [PROVIDER [SECS]]`
//! (built with `--features fabric,mpi`: `mpirun -n 2 target/release/examples/service mpi [SECS]`).

use std::hint::black_box;
use std::time::{Duration, Instant};

use fabkit_core::bootstrap::{Bootstrap, ThreadGroup};
use fabkit_dht::open::{open, Recipe};
use fabkit_dht::{Config, Path, Variant};

fn key(i: u64) -> Vec<u8> {
    let mut k = format!("key-{i:012}").into_bytes();
    k.resize(16, b'.');
    k
}

/// The `q` quantile of sorted `v`, in µs.
fn quantile_us(v: &[u64], q: f64) -> f64 {
    let i = ((v.len() as f64 * q).ceil() as usize).clamp(1, v.len()) - 1;
    v[i] as f64 / 1e3
}

/// One rank's part, as a JSON fragment: rank 1's latencies, rank 0's
/// service figures.
fn rank(r: &Recipe<'_>, b: &dyn Bootstrap, span: Duration) -> Result<String, String> {
    let e = |e: &dyn std::fmt::Display| format!("rank {}: {e}", b.rank());
    let mut cfg = Config::new(Variant::Lockfree);
    cfg.key_len = 16;
    cfg.value_len = 64;
    cfg.path = Path::Message;
    let t = open(&cfg, r, b).map_err(|x| e(&x))?;
    let got = fabkit_dht::with_table!(&t.table, d => {
        let owned: Vec<Vec<u8>> = (0..)
            .map(key)
            .filter(|k| d.place_of(k).0 == 0)
            .take(1024)
            .collect();
        if b.rank() == 0 {
            for k in &owned {
                d.write(k, &[7u8; 64]).map_err(|x| e(&x))?;
            }
        }
        b.barrier().map_err(|x| e(&x))?;
        // 1: the owner computes; its peer reads one key at a time.
        let mut lat = Vec::new();
        let start = Instant::now();
        if b.rank() == 0 {
            let mut x = 1u64;
            while start.elapsed() < span + span / 10 {
                for _ in 0..10_000 {
                    x = black_box(x.wrapping_mul(6364136223846793005).wrapping_add(1));
                }
            }
        } else {
            let mut i = 0;
            while start.elapsed() < span {
                let t0 = Instant::now();
                d.read(&owned[i % owned.len()]).map_err(|x| e(&x))?;
                lat.push(t0.elapsed().as_nanos() as u64);
                i += 1;
            }
        }
        b.barrier().map_err(|x| e(&x))?;
        // 2: nobody calls; what the owner's service costs.
        let before = d.stats();
        let t0 = Instant::now();
        std::thread::sleep(span);
        let idle = d.stats().since(&before).service_cpu_ns as f64 / t0.elapsed().as_nanos() as f64;
        b.barrier().map_err(|x| e(&x))?;
        // 3: batches served while the owner idles.
        let before = d.stats();
        if b.rank() == 1 {
            let refs: Vec<&[u8]> = owned.iter().map(|k| k.as_slice()).collect();
            let start = Instant::now();
            let mut i = 0;
            while start.elapsed() < span {
                let at = (i * 64) % (refs.len() - 64);
                d.read_many(&refs[at..at + 64]).map_err(|x| e(&x))?;
                i += 1;
            }
        }
        b.barrier().map_err(|x| e(&x))?;
        let served = d.stats().since(&before);
        Ok::<_, String>((lat, idle, served.service_cpu_ns, served.served_keys))
    })?;
    t.table.close(b).map_err(|x| e(&x))?;
    let (mut lat, idle, cpu, keys) = got;
    lat.sort_unstable();
    Ok(if b.rank() == 1 {
        match lat.last() {
            None => "\"reads\": 0".to_string(),
            Some(&max) => format!(
                "\"reads\": {}, \"p50_us\": {:.1}, \"p99_us\": {:.1}, \"max_us\": {:.1}",
                lat.len(),
                quantile_us(&lat, 0.5),
                quantile_us(&lat, 0.99),
                max as f64 / 1e3
            ),
        }
    } else {
        let per_key = if keys > 0 {
            cpu as f64 / keys as f64
        } else {
            0.0
        };
        format!(
            "\"idle_service_core_percent\": {:.3}, \"served_keys\": {keys}, \"service_ns_per_key\": {per_key:.0}",
            idle * 100.0
        )
    })
}

fn print(provider: &str, secs: f64, parts: &[String]) {
    println!(
        "{{\"provider\": \"{provider}\", \"secs\": {secs}, \"owner_computing\": {{{}}}, \"owner\": {{{}}}}}",
        parts[1], parts[0]
    );
}

/// Over MPI: this process is one of the two ranks; rank 1 sends its part
/// to rank 0, which prints.
#[cfg(feature = "mpi")]
fn mpi(span: Duration, secs: f64) -> Result<(), String> {
    let boot = fabkit_mpi::MpiBootstrap::init_threads(Duration::from_secs(60), true)
        .map_err(|e| e.to_string())?;
    let mut r = Recipe::fabric("");
    r.mpi = Some((
        fabkit_dht::open::MpiBoot::Borrowed(&boot),
        fabkit_mpi::window::WindowKind::Allocate,
    ));
    let mine = rank(&r, &boot, span)?;
    let all = boot.allgather(mine.as_bytes()).map_err(|e| e.to_string())?;
    if boot.rank() == 0 {
        let parts: Vec<String> = all
            .iter()
            .map(|p| String::from_utf8_lossy(p).into_owned())
            .collect();
        print("mpi", secs, &parts);
    }
    Ok(())
}

#[cfg(not(feature = "mpi"))]
fn mpi(_: Duration, _: f64) -> Result<(), String> {
    Err("built without MPI: build the example with --features fabric,mpi".into())
}

fn main() {
    let mut args = std::env::args().skip(1);
    let provider = args.next().unwrap_or_else(|| "shm".into());
    let secs: f64 = match args.next().map(|s| s.parse::<f64>()) {
        None => 1.0,
        Some(Ok(s)) if (0.1..=600.0).contains(&s) => s,
        Some(_) => {
            eprintln!("service: SECS must be a number from 0.1 to 600");
            std::process::exit(2);
        }
    };
    let span = Duration::from_secs_f64(secs);
    let done = if provider == "mpi" {
        mpi(span, secs)
    } else {
        let boots = ThreadGroup::members(2, Duration::from_secs(60));
        std::thread::scope(|s| {
            let ranks: Vec<_> = boots
                .iter()
                .map(|b| s.spawn(|| rank(&Recipe::fabric(provider.clone()), b, span)))
                .collect();
            ranks
                .into_iter()
                .map(|h| h.join().unwrap_or_else(|_| Err("a rank panicked".into())))
                .collect::<Result<Vec<_>, _>>()
        })
        .map(|parts| print(&provider, secs, &parts))
    };
    if let Err(e) = done {
        eprintln!("service: {e}");
        std::process::exit(1);
    }
}
