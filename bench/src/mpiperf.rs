//! `fabkit mpi-perf`: the same measurements as `fabkit perf`, through MPI
//! one-sided RMA (`MPI_Put`, `MPI_Get`, `MPI_Compare_and_swap`,
//! `MPI_Fetch_and_op`) with a chosen synchronisation and window kind, so
//! MPI and native fabric can be laid side by side.

use std::time::{Duration, Instant};

use anyhow::{ensure, Context, Result};
use clap::{Args, ValueEnum};
use fabkit_core::{Bootstrap, Op, Remote};
use fabkit_mpi::window::{Prepared, Sync, Window, WindowKind};
use fabkit_mpi::MpiBootstrap;

use crate::hist::Hist;
use crate::perf::{Pattern, PerfOp, Raw, SweepArgs};

/// Synchronisation methods (seed 003 compares them).
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum SyncArg {
    /// MPI_Win_lock_all once, MPI_Win_flush per window of operations.
    LockAll,
    /// MPI_Win_lock(SHARED)/unlock around each window of operations.
    Lock,
    /// MPI_Win_lock(EXCLUSIVE)/unlock around each window of operations.
    LockExclusive,
    /// MPI_Win_fence after each window (every rank takes part).
    Fence,
    /// Post-start-complete-wait per window (the target takes part).
    Pscw,
}

impl From<SyncArg> for Sync {
    fn from(s: SyncArg) -> Sync {
        match s {
            SyncArg::LockAll => Sync::LockAll,
            SyncArg::Lock => Sync::LockShared,
            SyncArg::LockExclusive => Sync::LockExclusive,
            SyncArg::Fence => Sync::Fence,
            SyncArg::Pscw => Sync::Pscw,
        }
    }
}

/// Where the window's memory comes from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum WinArg {
    /// MPI_Win_allocate (on one node Open MPI's osc sm maps shared memory).
    Allocate,
    /// MPI_Win_create over MPI_Alloc_mem (goes through the BTL in Open MPI).
    Create,
}

impl From<WinArg> for WindowKind {
    fn from(w: WinArg) -> WindowKind {
        match w {
            WinArg::Allocate => WindowKind::Allocate,
            WinArg::Create => WindowKind::Create,
        }
    }
}

/// The operations mpi-perf measures: MPI one-sided, so no two-sided send.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum MpiOp {
    /// MPI_Put.
    Write,
    /// MPI_Get.
    Read,
    /// u64 MPI_Compare_and_swap.
    Cas,
    /// u64 MPI_Fetch_and_op with MPI_SUM.
    Fadd,
}

impl From<MpiOp> for PerfOp {
    fn from(o: MpiOp) -> PerfOp {
        match o {
            MpiOp::Write => PerfOp::Write,
            MpiOp::Read => PerfOp::Read,
            MpiOp::Cas => PerfOp::Cas,
            MpiOp::Fadd => PerfOp::Fadd,
        }
    }
}

/// `-o` of mpi-perf: [`MpiOp`]'s values and help, into the shared
/// [`PerfOp`]; `send` is refused naming what measures two-sided messages.
#[derive(Clone)]
struct MpiOpParser;

impl clap::builder::TypedValueParser for MpiOpParser {
    type Value = PerfOp;

    fn parse_ref(
        &self,
        cmd: &clap::Command,
        arg: Option<&clap::Arg>,
        value: &std::ffi::OsStr,
    ) -> std::result::Result<PerfOp, clap::Error> {
        if value == "send" {
            use clap::error::{ContextKind, ContextValue, ErrorKind};
            let mut e = clap::Error::new(ErrorKind::InvalidValue).with_cmd(cmd);
            if let Some(a) = arg {
                e.insert(ContextKind::InvalidArg, ContextValue::String(a.to_string()));
            }
            e.insert(
                ContextKind::InvalidValue,
                ContextValue::String("send".into()),
            );
            // The advice itself, which `exit::clap_line` puts on its line.
            e.insert(
                ContextKind::Custom,
                ContextValue::String(
                    "mpi-perf measures MPI one-sided RMA (-o write, read, cas or fadd); for \
                     two-sided messages use `fabkit perf -o send` (libfabric) or OSU's \
                     osu_latency/osu_bw (MPI)"
                        .into(),
                ),
            );
            return Err(e);
        }
        clap::builder::EnumValueParser::<MpiOp>::new()
            .parse_ref(cmd, arg, value)
            .map(PerfOp::from)
    }

    fn possible_values(
        &self,
    ) -> Option<Box<dyn Iterator<Item = clap::builder::PossibleValue> + '_>> {
        Some(Box::new(
            MpiOp::value_variants()
                .iter()
                .filter_map(|v| v.to_possible_value()),
        ))
    }
}

/// How long mpi-perf runs each size when neither -n nor -t is given: OSU's
/// fixed counts (and `perf`'s 10000) last a fraction of a millisecond at
/// small sizes here, too short to time.
pub const DEFAULT_DURATION: Duration = Duration::from_secs(1);

/// `fabkit mpi-perf` options.
#[derive(Args, Debug, Clone)]
#[command(
    mut_arg("op", |a| a.value_parser(MpiOpParser)),
    mut_arg("iters", |a| a.help(
        "Timed transfers per size, at most 10^9 [default: as many as fill -t 1, calibrated]"
    )),
    mut_arg("duration", |a| a.help(
        "Run each size for about this many seconds (calibrated on short runs first), at \
         most a day [default: 1 unless -n is given]"
    )),
)]
pub struct MpiPerfArgs {
    /// What to measure (same flags as `fabkit perf`).
    #[command(flatten)]
    pub sweep: SweepArgs,
    /// Synchronisation of each window of operations.
    #[arg(long, value_enum, default_value = "lock-all")]
    pub sync: SyncArg,
    /// Window memory: MPI_Win_allocate or MPI_Win_create.
    #[arg(long, value_enum, default_value = "allocate")]
    pub win: WinArg,
    /// Open MPI one-sided components to allow (sets OMPI_MCA_osc unless it is
    /// set already). Debian's default, osc rdma, crashes in
    /// MPI_Compare_and_swap, and its config disables pt2pt.
    #[arg(long, default_value = "sm,pt2pt")]
    pub osc: String,
}

impl std::ops::Deref for MpiPerfArgs {
    type Target = SweepArgs;
    fn deref(&self) -> &SweepArgs {
        &self.sweep
    }
}

impl MpiPerfArgs {
    /// How long each size runs: -t, else [`DEFAULT_DURATION`] unless -n
    /// fixed the count.
    pub fn duration(&self) -> Option<Duration> {
        match (self.sweep.duration, self.sweep.iters) {
            (Some(d), _) => Some(d),
            (None, Some(_)) => None,
            (None, None) => Some(DEFAULT_DURATION),
        }
    }
}

/// The one-sided components in force for this process (what mpirun or the
/// environment asked for).
pub fn osc_in_force() -> String {
    std::env::var("OMPI_MCA_osc").unwrap_or_else(|_| "default".into())
}

/// What each rank does in one window of operations.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Role {
    Origin,
    Target,
    Bystander,
}

struct Ctx<'a> {
    a: &'a MpiPerfArgs,
    sync: Sync,
    role: Role,
    me: usize,
    peer: usize,
    origins: Vec<usize>,
}

/// One window of operations, the first `count` of `batch`, with this
/// rank's part of the synchronisation (targets and bystanders only take
/// part in it).
fn epoch(win: &mut Window, c: &Ctx<'_>, batch: &mut Prepared<'_>, count: usize) -> Result<()> {
    let bidir_pscw = c.sync == Sync::Pscw && c.a.bidir;
    match c.role {
        Role::Origin => {
            if bidir_pscw {
                // Both ways: each origin is also the other's target.
                win.post(&[c.peer])?;
            }
            win.execute_prepared(c.sync, batch, count)
                .with_context(|| format!("{:?} to rank {} ({:?})", c.a.op, c.peer, c.sync))?;
            if bidir_pscw {
                win.wait()?;
            }
            Ok(())
        }
        Role::Target => match c.sync {
            Sync::Fence => win.fence().map_err(Into::into),
            Sync::Pscw => {
                win.post(&c.origins)?;
                win.wait().map_err(Into::into)
            }
            _ => Ok(()),
        },
        Role::Bystander => match c.sync {
            Sync::Fence => win.fence().map_err(Into::into),
            _ => Ok(()),
        },
    }
}

/// `n` operations in epochs of a window each.
fn epochs(win: &mut Window, c: &Ctx<'_>, batch: &mut Prepared<'_>, n: u64) -> Result<()> {
    let w = batch.len();
    crate::perf::timing::in_windows(n, w, |count| epoch(win, c, batch, count))
}

/// Alignment of the operations' buffer.
const PAGE: usize = 4096;

/// Operations timed one by one after a latency run, for its percentiles.
pub const LAT_SAMPLES: u64 = 10_000;

/// Bytes of the RMA window one size needs: a window of operations at
/// distinct offsets (see [`run`]).
fn window_bytes(a: &MpiPerfArgs, bytes: usize) -> usize {
    a.window_for(bytes) * bytes
}

/// Runs `iters` operations after `warmup`, in windows, and times the loop
/// as a whole, as OSU does: no clock is read per operation. Then, for
/// --pattern lat, `samples` more operations are timed one by one for the
/// percentiles (the mean comes from the loop).
///
/// The operations are OSU's: one buffer, whose bytes `j * size..` the
/// window's operation `j` moves to or from the same offset of the target's
/// window, so a window touches as many distinct bytes at both ends as
/// OSU's does. They are built and checked once per size
/// ([`Window::prepare`]) and executed again for every window, so the loop
/// allocates nothing and checks nothing: it costs the MPI calls, as OSU's.
fn run(
    win: &mut Window,
    c: &Ctx<'_>,
    bytes: usize,
    (iters, warmup, samples): (u64, u64, u64),
) -> Result<Raw> {
    let w = c.a.window_for(bytes);
    // Page-aligned, as OSU's buffer (posix_memalign): where a copy starts
    // in a page changes what a large one costs.
    let mut backing = vec![b'a'; w * bytes + PAGE];
    let skip = backing.as_ptr().align_offset(PAGE);
    let buf = &mut backing[skip..skip + w * bytes];
    let mut olds = vec![0u64; w];
    let ops: Vec<Op> = buf
        .chunks_exact_mut(bytes)
        .zip(olds.iter_mut())
        .enumerate()
        .map(|(j, (b, o))| {
            let at = Remote::new(c.peer, (j * bytes) as u64);
            crate::perf::rma_op(c.a.op, at, b, o)
        })
        .collect();
    let mut batch = win
        .prepare(ops)
        .with_context(|| format!("{:?} of {bytes} B to rank {}", c.a.op, c.peer))?;
    if c.sync == Sync::LockAll && c.role == Role::Origin {
        win.lock_all()?;
    }
    if c.sync == Sync::Fence {
        win.fence()?; // opens the first epoch on every rank
    }
    epochs(win, c, &mut batch, warmup)?;
    let start = Instant::now();
    epochs(win, c, &mut batch, iters)?;
    let secs = start.elapsed().as_secs_f64();
    let mut latency = Hist::new();
    if c.a.pattern == Pattern::Lat {
        for _ in 0..samples {
            let t = Instant::now();
            epoch(win, c, &mut batch, 1)?;
            latency.record(t.elapsed().as_nanos() as u64);
        }
    }
    win.unlock_all()?;
    let origin = c.role == Role::Origin;
    Ok(Raw {
        bytes,
        iters: if origin { iters } else { 0 },
        secs,
        window: w,
        latency: if origin { latency } else { Hist::new() },
        ordering: None,
        cpu: None,
    })
}

/// -t: the count of operations that fills `secs` (see
/// [`crate::perf::timing::calibrate`]); targets take part in every probe.
fn calibrate(
    win: &mut Window,
    c: &Ctx<'_>,
    bytes: usize,
    secs: f64,
    boot: &dyn Bootstrap,
) -> Result<u64> {
    let first = c.a.window_for(bytes) as u64;
    crate::perf::timing::calibrate(boot, secs, first, 1, |n| {
        Ok(run(win, c, bytes, (n, 0, 0))?.secs)
    })
}

/// `-o send` is two-sided: refused, before MPI starts, naming what
/// measures it.
pub fn refuse_send(a: &MpiPerfArgs) -> Result<()> {
    crate::exit::ensure_usage!(
        a.op != PerfOp::Send,
        "mpi-perf measures MPI one-sided RMA (-o write, read, cas or fadd); for two-sided \
         messages use `fabkit perf -o send` (libfabric) or OSU's osu_latency/osu_bw (MPI)"
    );
    Ok(())
}

/// Runs the sweep on this rank; rank 0 (and 1 with --bidir) are origins.
pub fn run_rank(a: &MpiPerfArgs, boot: &MpiBootstrap) -> Result<Vec<Raw>> {
    a.sweep.validate()?;
    refuse_send(a)?;
    ensure!(
        boot.size() >= 2,
        "mpi-perf needs 2 ranks: run it as `mpirun -n 2 fabkit mpi-perf ...`"
    );
    let sizes = a.size_list()?;
    let len = sizes.iter().map(|&b| window_bytes(a, b)).max().unwrap();
    let kind = WindowKind::from(a.win);
    // Creation waits --timeout for the other ranks (a rank dead at setup is
    // reported then, not after the sweep's bound below).
    boot.set_timeout(a.timeout);
    let mut win = Window::new(boot, len.next_multiple_of(64), kind)?;
    // The target waits in a barrier while the origin runs a whole size:
    // with -t, calibration (up to 0.4 t) and the run (t) plus --timeout;
    // with -n the length of a size is not known, so up to an hour, or
    // --timeout if longer. While it waits it spins on MPI_Test, as OSU's
    // target does in MPI_Barrier, yielding only every few hundred tests
    // (MpiBootstrap::set_max_nap): under osc pt2pt the origin's lock, flush
    // and atomics need the target's progress, and a nap or a yield per test
    // would be measured.
    let duration = a.duration();
    boot.set_timeout(match duration {
        Some(t) => a.timeout.saturating_add(t.saturating_mul(2)),
        None => a.timeout.max(std::time::Duration::from_secs(3600)),
    });
    boot.set_max_nap(std::time::Duration::ZERO);
    let me = boot.rank();
    let origins: Vec<usize> = if a.bidir { vec![0, 1] } else { vec![0] };
    let role = if origins.contains(&me) {
        Role::Origin
    } else if me == 1 {
        Role::Target
    } else {
        Role::Bystander
    };
    let c = Ctx {
        a,
        sync: a.sync.into(),
        role,
        me,
        peer: if me == 0 { 1 } else { 0 },
        origins,
    };
    debug_assert!(c.me < boot.size());
    let mut out = Vec::new();
    for &bytes in &sizes {
        let iters = match duration {
            None => a.iters.unwrap_or(crate::perf::DEFAULT_ITERS),
            Some(d) => calibrate(&mut win, &c, bytes, d.as_secs_f64(), boot)?,
        };
        boot.barrier()?;
        let samples = if a.pattern == Pattern::Lat {
            iters.min(LAT_SAMPLES)
        } else {
            0
        };
        out.push(run(&mut win, &c, bytes, (iters, a.warmup, samples))?);
        boot.barrier()?;
    }
    boot.set_max_nap(fabkit_mpi::DEFAULT_MAX_NAP);
    boot.set_timeout(a.timeout);
    win.free()?; // collective: every rank is here
    Ok(out.into_iter().filter(|r| r.iters > 0).collect())
}

/// `fabkit mpi-perf`: the sweep through MPI one-sided RMA, under an MPI
/// launcher.
pub fn command(args: &MpiPerfArgs) -> Result<bool> {
    refuse_send(args)?;
    let launch = crate::launch::Launch::detect(2)?;
    let crate::launch::Launch::Mpi(boot) = &launch else {
        return Err(crate::exit::usage(
            "mpi-perf runs under an MPI launcher: mpirun -n 2 fabkit mpi-perf ... \
             (as root add --allow-run-as-root; on few cores --oversubscribe)",
        ));
    };
    let Some(per_rank) = crate::launch::run_mpi(boot, |b| run_rank(args, b))? else {
        return Ok(true);
    };
    let points = crate::perf::combine(args, 1, &per_rank);
    let osc = osc_in_force();
    // How idle ranks wait is part of the method: under osc pt2pt the
    // origin's latencies include the target's progress (run_rank).
    let method = format!(
        "MPI one-sided, osc {osc}, window {:?}, sync {:?}",
        args.win, args.sync
    )
    .to_lowercase()
        + &format!(
            "; idle ranks poll MPI_Test back to back, yielding every {} polls",
            fabkit_mpi::SPIN_TESTS
        )
        + &if args.pattern == Pattern::Lat {
            format!(
                "; usec/xfer times the whole loop (as OSU does), min/p50/p99/max up to {} \
                 more operations timed one by one after it",
                LAT_SAMPLES
            )
        } else {
            String::new()
        };
    // The names the command line takes (--win, --sync).
    let name = |v: Option<clap::builder::PossibleValue>| {
        v.map_or_else(|| "?".to_string(), |v| v.get_name().to_string())
    };
    let label = format!(
        "MPI {osc} {} {}",
        name(clap::ValueEnum::to_possible_value(&args.win)),
        name(clap::ValueEnum::to_possible_value(&args.sync))
    );
    crate::perf::report::emit(
        &args.sweep,
        launch.provenance(per_rank.len()),
        (&format!("mpi osc={osc}"), crate::Over::Mpi, None),
        (&method, &label),
        points,
    )
}
