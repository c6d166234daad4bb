//! `fabkit mpi-perf`: the same measurements as `fabkit perf`, through MPI
//! one-sided RMA (`MPI_Put`, `MPI_Get`, `MPI_Compare_and_swap`,
//! `MPI_Fetch_and_op`) with a chosen synchronisation and window kind, so
//! MPI and native fabric can be laid side by side.

use std::time::Instant;

use anyhow::{ensure, Context, Result};
use clap::{Args, ValueEnum};
use fabkit_fabric::bootstrap::{Bootstrap, MpiBootstrap};
use fabkit_fabric::mpi_rma::{Sync, Window, WindowKind};
use fabkit_fabric::{Op, Remote};

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
            return Err(clap::Error::raw(
                clap::error::ErrorKind::InvalidValue,
                "mpi-perf measures MPI one-sided RMA (-o write, read, cas or fadd); for \
                 two-sided messages use `fabkit perf -o send` (libfabric) or OSU's \
                 osu_latency/osu_bw (MPI)",
            )
            .with_cmd(cmd));
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

/// `fabkit mpi-perf` options.
#[derive(Args, Debug, Clone)]
#[command(mut_arg("op", |a| a.value_parser(MpiOpParser)))]
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

/// One window of `count` operations, with this rank's part of the
/// synchronisation.
fn epoch(
    win: &mut Window,
    c: &Ctx<'_>,
    count: usize,
    bufs: &mut [Vec<u8>],
    olds: &mut [u64],
) -> Result<()> {
    let bidir_pscw = c.sync == Sync::Pscw && c.a.bidir;
    match c.role {
        Role::Origin => {
            if bidir_pscw {
                // Both ways: each origin is also the other's target.
                win.post(&[c.peer])?;
            }
            let at = Remote::new(c.peer, 0);
            let mut ops: Vec<Op> = bufs
                .iter_mut()
                .zip(olds.iter_mut())
                .take(count)
                .map(|(b, o)| crate::perf::rma_op(c.a.op, at, b, o))
                .collect();
            win.execute(c.sync, &mut ops)
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

/// Runs `iters` timed operations after `warmup`, in windows.
fn run(win: &mut Window, c: &Ctx<'_>, bytes: usize, iters: u64, warmup: u64) -> Result<Raw> {
    let w = c.a.window_for(bytes);
    let mut bufs: Vec<Vec<u8>> = (0..w).map(|i| vec![i as u8; bytes]).collect();
    let mut olds = vec![0u64; w];
    let mut samples_ns = Vec::new();
    if c.sync == Sync::LockAll && c.role == Role::Origin {
        win.lock_all()?;
    }
    if c.sync == Sync::Fence {
        win.fence()?; // opens the first epoch on every rank
    }
    let mut go = |n: u64, timed: bool, samples: &mut Vec<u64>| -> Result<()> {
        let mut k = 0;
        while k < n {
            let count = (n - k).min(w as u64) as usize;
            let t = Instant::now();
            epoch(win, c, count, &mut bufs, &mut olds)?;
            if timed && c.a.pattern == Pattern::Lat && c.role == Role::Origin {
                samples.push(t.elapsed().as_nanos() as u64);
            }
            k += count as u64;
        }
        Ok(())
    };
    go(warmup, false, &mut samples_ns)?;
    let start = Instant::now();
    go(iters, true, &mut samples_ns)?;
    let secs = start.elapsed().as_secs_f64();
    win.unlock_all()?;
    Ok(Raw {
        bytes,
        iters: if c.role == Role::Origin { iters } else { 0 },
        secs,
        window: w,
        samples_ns,
        ordering: None,
    })
}

/// -t: grows a probe until it lasts a tenth of `secs`; rank 0 decides and
/// every rank (targets take part in fence and PSCW epochs) runs each probe.
fn calibrate(
    win: &mut Window,
    c: &Ctx<'_>,
    bytes: usize,
    secs: f64,
    boot: &dyn Bootstrap,
) -> Result<u64> {
    let mut probe = c.a.window_for(bytes) as u64;
    loop {
        boot.barrier()?;
        let took = run(win, c, bytes, probe, 0)?.secs;
        let verdict = if took >= secs / 10.0 || probe >= crate::bounds::MAX_ITERS {
            let wanted = (secs / took.max(1e-9)) * probe as f64;
            if boot.rank() == 0 {
                crate::bounds::note_iters_cut(secs, wanted, took / probe as f64);
            }
            wanted.clamp(1.0, crate::bounds::MAX_ITERS as f64) as u64
        } else {
            0
        };
        let all = boot.allgather(&verdict.to_le_bytes())?;
        match u64::from_le_bytes(all[0][..8].try_into().unwrap()) {
            0 => probe *= 4,
            n => return Ok(n),
        }
    }
}

/// `-o send` is two-sided: refused, before MPI starts, naming what
/// measures it.
pub fn refuse_send(a: &MpiPerfArgs) -> Result<()> {
    crate::bounds::ensure_usage!(
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
    let max = *sizes.iter().max().unwrap();
    let kind = match a.win {
        WinArg::Allocate => WindowKind::Allocate,
        WinArg::Create => WindowKind::Create,
    };
    // Creation waits --timeout for the other ranks (a rank dead at setup is
    // reported then, not after the sweep's bound below).
    boot.set_timeout(a.timeout);
    let mut win = Window::new(boot, max.next_multiple_of(64), kind)?;
    // The target waits in a barrier while the origin runs a whole size:
    // with -t, calibration (up to 0.4 t) and the run (t) plus --timeout;
    // with -n the length of a size is not known, so up to an hour, or
    // --timeout if longer. While it waits it yields between MPI_Test calls
    // instead of napping: under osc pt2pt the origin's lock, flush and
    // atomics need the target's progress, and a nap would be measured.
    boot.set_timeout(match a.duration {
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
        let iters = match a.duration {
            None => a.iters,
            Some(d) => calibrate(&mut win, &c, bytes, d.as_secs_f64(), boot)?,
        };
        boot.barrier()?;
        out.push(run(&mut win, &c, bytes, iters, a.warmup)?);
        boot.barrier()?;
    }
    boot.set_max_nap(fabkit_fabric::bootstrap::DEFAULT_MAX_NAP);
    boot.set_timeout(a.timeout);
    win.free()?; // collective: every rank is here
    Ok(out.into_iter().filter(|r| r.iters > 0).collect())
}
