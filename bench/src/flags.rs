//! The limits of every number the command line takes, as clap value
//! parsers shared by the subcommands.
//!
//! Each limit is named in its error, so a user learns it from the one line
//! that refuses the value; no size a flag sets reaches arithmetic that
//! could overflow or an allocation that could not be served.

use std::time::Duration;

use crate::exit::usage;

/// The longest wait or run a duration flag takes: a day.
pub const MAX_SECS: f64 = 86_400.0;

/// Ranks (and threads per rank) at most. An in-process rank of `check`
/// costs about 100 MB here (mostly the shm provider's region: `check -n
/// 300` peaked at 14 GB), so 1024 needed about 100 GB; 128 fit in 13 GB.
pub const MAX_RANKS: usize = 128;

/// Timed (and warm-up) transfers per size and thread at most. This bounds
/// the count, not the time: 10^9 small transfers take minutes at the rates
/// measured here, but 10^9 of 1 GiB would take years, so a large -n with a
/// large size is the user's to choose (use -t to run for a duration).
pub const MAX_ITERS: u64 = 1_000_000_000;

/// Says on stderr that `-t secs` would take `wanted` iterations (at `per`
/// seconds each), more than [`MAX_ITERS`], so the run is shorter than asked.
pub fn note_iters_cut(secs: f64, wanted: f64, per: f64) {
    if wanted > MAX_ITERS as f64 {
        eprintln!(
            "fabkit: note: -t {secs} s would take about {wanted:.0} iterations at this size; \
             {MAX_ITERS} are run (the most -n takes), about {:.1} s",
            per * MAX_ITERS as f64
        );
    }
}

/// The largest transfer `perf` and `mpi-perf` measure: 1 GiB.
pub const MAX_SIZE: usize = 1 << 30;

/// Operations in flight at most (providers' queues are far shorter; the
/// provider's own depth is checked once it is open).
pub const MAX_WINDOW: usize = 1 << 20;

/// Rounds of the DHT's hot-key check at most (each round is a collective,
/// so 10^6 rounds can take hours).
pub const MAX_ROUNDS: u64 = 1_000_000;

fn number<T: std::str::FromStr>(s: &str, what: &str) -> Result<T, String> {
    s.trim().parse().map_err(|_| format!("`{s}` is not {what}"))
}

/// The shortest wait or run a duration flag takes: a millisecond (shorter
/// ones round to nothing in the waits and in FABKIT_BOOT_TIMEOUT).
pub const MIN_SECS: f64 = 0.001;

/// Seconds, at least a millisecond and at most a day (`--timeout`, `-t`).
pub fn secs(s: &str) -> Result<Duration, String> {
    let v: f64 = number(s, "a number of seconds")?;
    if !(v.is_finite() && v > 0.0) {
        return Err("must be a positive number of seconds".into());
    }
    if v < MIN_SECS {
        return Err(format!("at least {MIN_SECS} seconds (a millisecond)"));
    }
    if v > MAX_SECS {
        return Err(format!("at most {MAX_SECS} seconds (a day)"));
    }
    Ok(Duration::from_secs_f64(v))
}

/// An integer in `lo..=hi`, named by `what` in the error; `more` follows
/// the upper bound (where to go for more). A number that overflows the type
/// is too large, and a negative one too small, like any other out of range.
fn within<T>(s: &str, lo: T, hi: T, what: &str, more: &str) -> Result<T, String>
where
    T: std::str::FromStr + PartialOrd + std::fmt::Display + Copy,
{
    let t = s.trim();
    let digits = |d: &str| !d.is_empty() && d.bytes().all(|b| b.is_ascii_digit());
    let v: T = match t.parse() {
        Ok(v) => v,
        Err(_) if t.strip_prefix('-').is_some_and(digits) => {
            return Err(format!("{what} must be at least {lo}"));
        }
        Err(_) if digits(t.strip_prefix('+').unwrap_or(t)) => {
            return Err(format!("{what} {t} is too large (at most {hi}){more}"));
        }
        Err(_) => return Err(format!("`{s}` is not a whole number")),
    };
    if v < lo {
        return Err(format!("{what} must be at least {lo}"));
    }
    if v > hi {
        return Err(format!("{what} must be at most {hi}{more}"));
    }
    Ok(v)
}

/// In-process ranks (`-n` of check, dht, demo).
pub fn ranks(s: &str) -> Result<usize, String> {
    within(
        s,
        1,
        MAX_RANKS,
        "--ranks",
        " (in-process ranks are threads of one process); run more under mpirun",
    )
}

/// Rank processes `fabkit launch` starts on this machine (`launch -n`).
pub fn processes(s: &str) -> Result<usize, String> {
    within(
        s,
        1,
        MAX_RANKS,
        "--ranks",
        " (processes on this machine); run more over several hosts under mpirun",
    )
}

/// Timed iterations (`perf -n`).
pub fn iters(s: &str) -> Result<u64, String> {
    within(s, 1, MAX_ITERS, "--iters", "")
}

/// Warm-up iterations (`--warmup`; 0 allowed).
pub fn warmup(s: &str) -> Result<u64, String> {
    within(s, 0, MAX_ITERS, "--warmup", "")
}

/// A transfer size in bytes.
pub fn size(s: &str) -> Result<usize, String> {
    within(s, 1, MAX_SIZE, "a transfer size in bytes", " (1 GiB)")
}

/// Operations in flight (`-w`).
pub fn window(s: &str) -> Result<usize, String> {
    within(s, 1, MAX_WINDOW, "--window", "")
}

/// Initiating threads per rank (`-T`); the provider's own limits are
/// checked once it is open.
pub fn threads(s: &str) -> Result<usize, String> {
    within(s, 1, MAX_RANKS, "--threads", "")
}

/// Keys per batch (`dht --batch`).
pub fn batch(s: &str) -> Result<usize, String> {
    within(s, 1, 1 << 20, "--batch", "")
}

/// Batches in flight (`dht --depth`).
pub fn depth(s: &str) -> Result<usize, String> {
    within(s, 1, fabkit_dht::MAX_DEPTH, "--depth", "")
}

/// Hot-key rounds (`dht --hot-rounds`; 0 skips the check).
pub fn rounds(s: &str) -> Result<u64, String> {
    within(s, 0, MAX_ROUNDS, "--hot-rounds", "")
}

/// Keys written per rank (`dht --keys`): the table and the generated keys
/// must fit in memory, which `dht` checks against the machine.
pub fn keys(s: &str) -> Result<u64, String> {
    within(s, 1, u64::MAX / 4, "--keys", "")
}

/// The fewest buckets per rank a table is given: smaller tables were
/// silently grown to this, so a smaller `--buckets` is refused instead.
pub const MIN_BUCKETS: u64 = 64;

/// Buckets per rank (`dht --buckets`).
pub fn buckets(s: &str) -> Result<u64, String> {
    within(s, MIN_BUCKETS, u64::MAX / 4, "--buckets", "")
}

/// Key and value lengths of a DHT record.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Record {
    /// Key bytes.
    pub key: usize,
    /// Value bytes.
    pub value: usize,
}

/// The longest key or value `dht` takes: the table's own bound (1 MiB).
pub use fabkit_dht::MAX_FIELD;

/// The record classes of the RED-SEA key-value evaluation (YCSB with
/// Facebook's sizes): small, medium and large pairs of 33, 123 and 1023
/// bytes. The split into key and value is ours: YCSB-like 24-byte keys.
pub const RECORD_CLASSES: [(&str, Record); 3] = [
    ("S", Record { key: 24, value: 9 }),
    ("M", Record { key: 24, value: 99 }),
    (
        "L",
        Record {
            key: 24,
            value: 999,
        },
    ),
];

/// `KEY,VALUE` in bytes, e.g. `80,104`, or a class of
/// [`RECORD_CLASSES`] (`S`, `M`, `L`) (`dht --record`).
pub fn record(s: &str) -> Result<Record, String> {
    if let Some((_, r)) = RECORD_CLASSES
        .iter()
        .find(|(n, _)| n.eq_ignore_ascii_case(s.trim()))
    {
        return Ok(*r);
    }
    let Some((k, v)) = s.split_once(',') else {
        return Err(format!(
            "`{s}` is not KEY,VALUE nor a class: give both lengths in bytes, e.g. --record \
             80,104, or S, M or L (33, 123 or 1023 B pairs)"
        ));
    };
    Ok(Record {
        key: within(k, 1, MAX_FIELD, "the key length", " bytes")?,
        value: within(v, 1, MAX_FIELD, "the value length", " bytes")?,
    })
}

/// Operations per rank of a timed mixed or YCSB run phase (`dht --ops`).
pub fn ops(s: &str) -> Result<u64, String> {
    within(s, 1, MAX_ITERS, "--ops", "")
}

/// Repetitions of each measurement (`dht --reps`).
pub fn reps(s: &str) -> Result<u32, String> {
    within(s, 1, 1000, "--reps", "")
}

/// Percent of reads in the paper's mixed phase (`dht --read-pct`).
pub fn percent(s: &str) -> Result<u32, String> {
    within(s, 0, 100, "--read-pct", "")
}

/// Single operations of the closed-loop latency pass (`dht --latency-ops`;
/// 0 skips it).
pub fn latency_ops(s: &str) -> Result<u64, String> {
    within(s, 0, MAX_ITERS, "--latency-ops", "")
}

/// The zipfian skew (`dht --zipf-theta`), strictly between 0 and 1 as the
/// generator (Gray et al.) needs.
pub fn theta(s: &str) -> Result<f64, String> {
    let v: f64 = s
        .trim()
        .parse()
        .map_err(|_| format!("`{s}` is not a number: give a skew such as 0.99"))?;
    if !(v > 0.0 && v < 1.0) {
        return Err(format!(
            "--zipf-theta {s} is out of range: give a skew strictly between 0 and 1 (YCSB's is 0.99)"
        ));
    }
    Ok(v)
}

/// A rate, count or core count of `model`: a finite number above 0, at
/// most 10^15 (a packet rate of a thousand NICs is far below).
pub fn positive_rate(s: &str) -> Result<f64, String> {
    let v: f64 = s
        .trim()
        .parse()
        .map_err(|_| format!("`{s}` is not a number: give one such as 15e6"))?;
    if !(v.is_finite() && v > 0.0 && v <= 1e15) {
        return Err(format!(
            "`{s}` is out of range: give a number above 0, at most 1e15"
        ));
    }
    Ok(v)
}

/// CPU time per transfer of `model --xfer-ns`: 0 to 10^9 ns.
pub fn cpu_ns(s: &str) -> Result<f64, String> {
    let v: f64 = s
        .trim()
        .parse()
        .map_err(|_| format!("`{s}` is not a number: give nanoseconds such as 200"))?;
    if !(v.is_finite() && (0.0..=1e9).contains(&v)) {
        return Err(format!("`{s}` is out of range: give 0 to 1e9 ns"));
    }
    Ok(v)
}

/// The most cells `surrogate --grid` takes: 2^20 (72 MiB of state per
/// grid, and every rank holds the whole grid).
pub const MAX_CELLS: usize = 1 << 20;

/// The grid of `surrogate --grid`: NXxNY cells, each side at least 1 and
/// the product at most [`MAX_CELLS`].
pub fn grid(s: &str) -> Result<(usize, usize), String> {
    let t = s.trim();
    let (x, y) = t
        .split_once(['x', 'X'])
        .ok_or_else(|| format!("`{s}` is not a grid: give columns x rows, such as 48x24"))?;
    let x = within(x, 1, MAX_CELLS, "--grid's columns", "")?;
    let y = within(y, 1, MAX_CELLS, "--grid's rows", "")?;
    match x.checked_mul(y) {
        Some(n) if n <= MAX_CELLS => Ok((x, y)),
        _ => Err(format!(
            "--grid {x}x{y} has more than {MAX_CELLS} cells; give a smaller grid"
        )),
    }
}

/// Time steps of `surrogate --steps`.
pub fn steps(s: &str) -> Result<u64, String> {
    within(s, 1, 1_000_000, "--steps", "")
}

/// Solver sub-steps per cell and time step (`surrogate --substeps`): the
/// chemistry's cost.
pub fn substeps(s: &str) -> Result<u32, String> {
    within(s, 1, 1_000_000, "--substeps", "")
}

/// Rounds of `surrogate --rounds`.
pub fn surrogate_rounds(s: &str) -> Result<u32, String> {
    within(s, 1, 1000, "--rounds", "")
}

/// Significant digits of a key (`surrogate --digits`): 1 to 15, or
/// `exact` (the inputs' bits).
pub fn digits(s: &str) -> Result<crate::surrogate::chem::Digits, String> {
    use crate::surrogate::chem::{Digits, MAX_DIGITS};
    if s.trim().eq_ignore_ascii_case("exact") {
        return Ok(Digits::Exact);
    }
    within(s, 1, MAX_DIGITS, "--digits", " (or `exact`: no rounding)").map(Digits::Sig)
}

/// The floor of `surrogate --floor`: a fraction of a species' largest
/// concentration, above 0 and at most 1.
pub fn floor(s: &str) -> Result<f64, String> {
    let v: f64 = s
        .trim()
        .parse()
        .map_err(|_| format!("`{s}` is not a number: give a fraction such as 1e-6"))?;
    if !(v.is_finite() && v > 0.0 && v <= 1.0) {
        return Err(format!(
            "`{s}` is out of range: give a number above 0, at most 1"
        ));
    }
    Ok(v)
}

/// The zipfian key range of the paper's workload (`dht --zipf-range`).
pub fn zipf_range(s: &str) -> Result<u64, String> {
    within(s, 1, 1 << 40, "--zipf-range", " keys")
}

/// The CPUs online on this machine, whatever this process is bound to
/// (mpirun binds each rank to one core; the machine still has all of them).
pub fn online_cpus() -> usize {
    // SAFETY: sysconf has no preconditions.
    let n = unsafe { libc::sysconf(libc::_SC_NPROCESSORS_ONLN) };
    usize::try_from(n).unwrap_or(0)
}

/// This machine's memory in bytes, as the DHT's table checks it.
pub use fabkit_core::host::physical_memory;

/// Checks, before any rank is set up, that `provider` exists here with
/// `caps` and offers `domain` (an interface, device or network the user
/// named): a domain it does not have is a usage error listing the ones it
/// has. Run failures (libfabric out of memory) stay run failures.
pub fn check_domain(
    provider: &str,
    domain: Option<&str>,
    caps: fabkit_fabric::Caps,
) -> anyhow::Result<()> {
    let mut hints = fabkit_fabric::Hints::new(provider.to_string(), caps);
    hints.domain = domain.map(str::to_string);
    match fabkit_fabric::info::find(&hints, true) {
        Ok(_) => Ok(()),
        // A domain, interface or network this host does not have, or a
        // name libfabric cannot take: the command line's to fix. (A
        // failed libfabric call, out of memory among them, is a Call.)
        Err(fabkit_fabric::Error::Core(fabkit_core::Error::InvalidArgument(m))) => Err(usage(m)),
        Err(e) => Err(e.into()),
    }
}

/// A path of `--path`: memory, rma, message or auto.
pub fn path(s: &str) -> Result<fabkit_dht::Path, String> {
    fabkit_dht::Path::named(s)
        .ok_or_else(|| format!("`{s}` is not a path: give memory, rma, message or auto"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_parser_refuses_its_bounds_by_name() {
        assert_eq!(secs("2.5"), Ok(Duration::from_millis(2500)));
        for bad in ["0", "-1", "1e300", "inf", "NaN", "x", ""] {
            assert!(secs(bad).is_err(), "{bad}");
        }
        assert!(secs("86401").unwrap_err().contains("at most 86400"));
        assert!(secs("1e-300").unwrap_err().contains("at least 0.001"));
        assert_eq!(secs("0.001"), Ok(Duration::from_millis(1)));
        assert!(ranks("18446744073709551615")
            .unwrap_err()
            .contains("mpirun"));
        assert!(ranks("0")
            .unwrap_err()
            .contains("--ranks must be at least 1"));
        assert_eq!(ranks("128"), Ok(128));
        assert!(ranks("129").is_err());
        assert!(iters("18446744073709551615")
            .unwrap_err()
            .contains("at most"));
        assert_eq!(warmup("0"), Ok(0));
        assert!(size("0")
            .unwrap_err()
            .contains("in bytes must be at least 1"));
        // Overflow and negative numbers are out of range, not "not a number".
        let big = iters("18446744073709551616").unwrap_err();
        assert!(big.contains("too large (at most 1000000000)"), "{big}");
        assert!(ranks("-1").unwrap_err().contains("at least 1"));
        assert!(!processes("129").unwrap_err().contains("threads"));
        assert!(buckets("1").unwrap_err().contains("at least 64"));
        assert_eq!(record("16,32"), Ok(Record { key: 16, value: 32 }));
        for bad in ["16", "16,", ",32", "0,8", "8,0", "16,32,48", "2000000,8"] {
            assert!(record(bad).is_err(), "{bad}");
        }
    }
}

/// Bounds on numbers read from files (`--bound`, `--ops`, `--perf`,
/// `plot`'s inputs), as flags bound theirs: a file fabkit wrote never
/// holds a rate of 1e300 or a CPU time of 1e-300, and an edited or damaged
/// one must not reach a table as a 300-digit number or a chart as `inf`.
pub mod from_file {
    /// Transfers or operations per second.
    pub const RATE: (f64, f64) = (1e-3, 1e12);
    /// A latency, microseconds.
    pub const LATENCY_US: (f64, f64) = (1e-3, 1e9);
    /// Busy CPU time per operation or transfer, nanoseconds.
    pub const CPU_NS: (f64, f64) = (1e-3, 1e12);
    /// Remote operations per DHT operation.
    pub const PER_OP: (f64, f64) = (1e-9, 1e6);
    /// A transfer's size, bytes.
    pub const BYTES: (f64, f64) = (1.0, 1099511627776.0);
    /// A ratio of two times (a speed-up).
    pub const RATIO: (f64, f64) = (1e-6, 1e6);
    /// A relative error (0 allowed: none).
    pub const RELATIVE_ERROR: (f64, f64) = (1e-300, 1e300);

    /// `v`, when it is a finite number within `(lo, hi)` (both included);
    /// else why not, naming `what`.
    pub fn check(what: &str, v: f64, (lo, hi): (f64, f64)) -> Result<f64, String> {
        if v.is_finite() && (lo..=hi).contains(&v) {
            Ok(v)
        } else {
            Err(format!(
                "{what} is {v:e}, outside {lo:e} to {hi:e}: not a measurement; give a file \
                 fabkit wrote, unedited"
            ))
        }
    }

    /// [`check`], with 0 allowed too: a count or time that did not happen
    /// (a phase that sent nothing, a run that failed).
    pub fn check_or_zero(what: &str, v: f64, range: (f64, f64)) -> Result<f64, String> {
        if v == 0.0 {
            Ok(v)
        } else {
            check(what, v, range)
        }
    }
}
