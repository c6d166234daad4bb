//! `fabkit perf`: latency, bandwidth and message rate of RMA and atomics
//! between two ranks, by size, on any provider (fabtests' `fi_rma_bw` and
//! `fi_rma_pingpong`, perftest's `ib_write_bw`/`ib_read_lat`, OSU's one-sided
//! tests, in one tool).

mod args;
pub mod report;
pub mod stats;
pub mod timing;

use args::MAX_STAGING;
pub use args::{Pattern, PerfArgs, PerfOp, SweepArgs, WriteCompletion, DEFAULT_ITERS};

use std::sync::atomic::{AtomicBool, Ordering as AtomicOrdering};
use std::time::{Duration, Instant};

use anyhow::{bail, ensure, Context, Result};

use crate::hist::Hist;
use crate::{exit, flags};
use fabkit_core::bootstrap::Bootstrap;
use fabkit_fabric::{Completion, Initiator, Op, OrderingStats, Rank, RankConfig, Remote};
use serde::{Deserialize, Serialize};

use self::stats::{Latency, Rates};

/// One measured point. Read back from a file, what it leaves out (a file
/// perf wrote has every field; one a script wrote may have only what its
/// reader needs) reads as perf's default pattern, 0, false or absent.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Point {
    /// Operation.
    pub op: PerfOp,
    /// Pattern.
    #[serde(default)]
    pub pattern: Pattern,
    /// Bytes per transfer.
    pub bytes: usize,
    /// Timed transfers (summed over initiators and threads).
    #[serde(default)]
    pub iters: u64,
    /// Wall time of the timed part, seconds (slowest initiator).
    #[serde(default)]
    pub secs: f64,
    /// Operations in flight per thread (effective, after the staging cap).
    #[serde(default)]
    pub window: usize,
    /// Initiating threads per rank.
    #[serde(default)]
    pub threads: usize,
    /// Both ranks initiated.
    #[serde(default)]
    pub bidir: bool,
    /// Rates (summed over initiators).
    #[serde(default)]
    pub rates: Rates,
    /// Latency percentiles (pattern lat; every initiating thread and rank).
    pub latency: Option<Latency>,
    /// The completion `fabkit perf`'s writes waited for (None from
    /// `mpi-perf`, whose writes complete at its synchronisation).
    #[serde(default)]
    pub completion: Option<WriteCompletion>,
    /// What the initiators' ordering mechanism did for this size (warm-up
    /// included): with `--completion delivery`, how each write was made
    /// visible (see `fabkit info`, column order). None from `mpi-perf`.
    #[serde(default)]
    pub ordering: Option<OrderingStats>,
    /// Busy CPU time (user and system) per transfer, ns: the processes of
    /// the initiating ranks over the size's pass, its warm-up included,
    /// over the transfers the pass made. With `-b` every rank initiates,
    /// so it is what a transfer costs the hosts, the target's side
    /// included; one way, a target in another process is left out (in
    /// one process it is counted, sharing the process). None from
    /// `mpi-perf` and from older files.
    #[serde(default)]
    pub cpu_ns_per_xfer: Option<f64>,
}

/// A rank process's busy CPU over one size's pass.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Cpu {
    /// Busy CPU time of the whole process over the pass, ns.
    pub ns: u64,
    /// Transfers the rank made in it, warm-up included.
    pub xfers: u64,
    /// Host and process id: ranks that are threads of one process share
    /// its CPU time, counted once.
    pub process: String,
}

/// One rank's measurement of one size, summed over its threads.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Raw {
    /// Bytes per transfer.
    pub bytes: usize,
    /// Timed transfers.
    pub iters: u64,
    /// Seconds they took (slowest thread).
    pub secs: f64,
    /// Operations in flight per thread.
    pub window: usize,
    /// Per-operation latencies (pattern lat), nanoseconds, of every thread.
    pub latency: Hist,
    /// What this rank's ordering mechanism did for this size, summed over
    /// its endpoints (None from `mpi-perf`).
    #[serde(default)]
    pub ordering: Option<OrderingStats>,
    /// This rank's process CPU over the pass (None from `mpi-perf`).
    #[serde(default)]
    pub cpu: Option<Cpu>,
}

/// Message the initiator sends idle ranks while it measures, and when done.
const TICK: &[u8] = b"tick";
const DONE: &[u8] = b"done";
/// How often the initiator tells idle ranks it is alive.
const TICK_EVERY: Duration = Duration::from_secs(1);

/// What one thread of a rank does for one size.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Role {
    /// Issues the measured operations (RMA, atomics, or sends).
    Initiate,
    /// The other side of two-sided messages: receives and acknowledges.
    Respond,
    /// Both sends and receives (bidirectional messages).
    Exchange,
}

struct Job<'a> {
    a: &'a PerfArgs,
    peer: usize,
    bytes: usize,
    window: usize,
    /// Ranks that get this thread's liveness ticks.
    tick: &'a [usize],
}

/// The one-sided operation `op` on `at` with the given buffers; a write
/// transmit-complete.
#[cfg_attr(not(feature = "mpi"), allow(dead_code))]
pub(crate) fn rma_op<'b>(op: PerfOp, at: Remote, buf: &'b mut [u8], old: &'b mut u64) -> Op<'b> {
    rma_op_with(op, at, buf, old, Completion::Transmit)
}

/// As [`rma_op`], a write waiting for `completion`.
pub(crate) fn rma_op_with<'b>(
    op: PerfOp,
    at: Remote,
    buf: &'b mut [u8],
    old: &'b mut u64,
    completion: Completion,
) -> Op<'b> {
    match op {
        // Transmit-complete is what fi_rma_bw measures.
        PerfOp::Write => Op::Write {
            to: at,
            from: buf,
            completion,
        },
        PerfOp::Read => Op::Read {
            from: at,
            into: buf,
        },
        PerfOp::Cas => Op::CompareAndSwap {
            at,
            expected: 0,
            new: 0,
            old,
        },
        PerfOp::Fadd | PerfOp::Send => Op::FetchAdd { at, delta: 1, old },
    }
}

/// One step of `count` operations in `role`: the unit both warm-up and the
/// timed loop repeat.
fn step(
    init: &mut Initiator<'_>,
    job: &Job<'_>,
    role: Role,
    count: usize,
    bufs: &mut [Vec<u8>],
) -> Result<()> {
    let (a, peer) = (job.a, job.peer);
    let mut lens = vec![0usize; count + 1];
    let mut olds = vec![0u64; count];
    let mut ack = [0u8; 1];
    let what = || format!("{:?} of {} B with rank {peer}", a.op, job.bytes);
    if a.op != PerfOp::Send {
        let at = Remote::new(peer, 0);
        let mut ops: Vec<Op> = bufs
            .iter_mut()
            .zip(olds.iter_mut())
            .take(count)
            .map(|(b, o)| rma_op_with(a.op, at, b, o, a.completion.into()))
            .collect();
        return init.execute(&mut ops).with_context(what);
    }
    let (head, tail) = lens.split_at_mut(count);
    match (role, a.pattern) {
        // Pingpong: send, then wait for the echo.
        (Role::Initiate, Pattern::Lat) => {
            let (out, back) = bufs.split_at_mut(1);
            init.execute(&mut [Op::Send {
                to: peer,
                data: &out[0],
            }])
            .with_context(what)?;
            init.execute(&mut [Op::Recv {
                from: peer,
                into: &mut back[0],
                len: &mut tail[0],
            }])
            .with_context(what)
        }
        (Role::Respond, Pattern::Lat) => {
            let (inb, _) = bufs.split_at_mut(1);
            init.execute(&mut [Op::Recv {
                from: peer,
                into: &mut inb[0],
                len: &mut tail[0],
            }])
            .with_context(what)?;
            init.execute(&mut [Op::Send {
                to: peer,
                data: &inb[0],
            }])
            .with_context(what)
        }
        // A window of sends and the receiver's one-byte acknowledgement.
        (Role::Initiate, Pattern::Bw) => {
            let mut ops: Vec<Op> = bufs[..count]
                .iter()
                .map(|b| Op::Send { to: peer, data: b })
                .collect();
            ops.push(Op::Recv {
                from: peer,
                into: &mut ack,
                len: &mut tail[0],
            });
            init.execute(&mut ops).with_context(what)
        }
        (Role::Respond, Pattern::Bw) => {
            let mut ops: Vec<Op> = bufs[..count]
                .iter_mut()
                .zip(head.iter_mut())
                .map(|(into, len)| Op::Recv {
                    from: peer,
                    into,
                    len,
                })
                .collect();
            init.execute(&mut ops).with_context(what)?;
            init.execute(&mut [Op::Send {
                to: peer,
                data: &ack,
            }])
            .with_context(what)
        }
        // Both ways at once: a window of sends and as many receives.
        (Role::Exchange, _) => {
            let (out, inb) = bufs.split_at_mut(count);
            let mut ops: Vec<Op> = out.iter().map(|b| Op::Send { to: peer, data: b }).collect();
            ops.extend(
                inb.iter_mut()
                    .zip(head.iter_mut())
                    .map(|(into, len)| Op::Recv {
                        from: peer,
                        into,
                        len,
                    }),
            );
            init.execute(&mut ops).with_context(what)
        }
    }
}

/// Runs `iters` timed operations (after warm-up) in `role` on one thread.
///
/// It stops between steps once `stop` is set (another thread failed), so
/// that no thread keeps posting to an endpoint about to be closed.
fn run_thread(
    rank: &Rank,
    job: &Job<'_>,
    role: Role,
    (iters, warmup): (u64, u64),
    stop: &AtomicBool,
) -> Result<Raw> {
    let mut init = rank.initiator()?;
    let w = job.window;
    // Sends need a receive buffer per window slot too (exchange, pingpong).
    let mut bufs: Vec<Vec<u8>> = (0..2 * w).map(|i| vec![i as u8; job.bytes]).collect();
    let mut done = 0u64;
    let mut go = |n: u64, timed: bool, samples: &mut Hist| -> Result<()> {
        timing::in_windows(n, w, |count| {
            if stop.load(AtomicOrdering::Relaxed) {
                return Err(Stopped.into());
            }
            let t = Instant::now();
            step(&mut init, job, role, count, &mut bufs)?;
            if timed && job.a.pattern == Pattern::Lat && role == Role::Initiate {
                let ns = t.elapsed().as_nanos() as u64;
                // Pingpong reports half the round trip, as OSU does.
                samples.record(if job.a.op == PerfOp::Send { ns / 2 } else { ns });
            }
            Ok(())
        })
    };
    let mut latency = Hist::new();
    go(warmup, false, &mut latency)?;
    let start = Instant::now();
    go(iters, true, &mut latency)?;
    done += iters;
    Ok(Raw {
        bytes: job.bytes,
        iters: done,
        secs: start.elapsed().as_secs_f64(),
        window: w,
        latency,
        ordering: None,
        cpu: None,
    })
}

/// A thread that ended because another failed: never the error reported.
#[derive(Debug)]
struct Stopped;

impl std::fmt::Display for Stopped {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("stopped: another thread of this rank failed")
    }
}

impl std::error::Error for Stopped {}

/// Runs every thread of this rank for one size; sums their results.
///
/// The first error (a worker's, or a tick that could not be sent) stops
/// every worker before anything is closed, and is the one reported.
///
/// This thread tells the idle ranks it is alive while the workers run, and
/// not a worker: a worker that finishes first would fall silent while the
/// others still run (with hundreds of threads on few cores, for longer than
/// the idle ranks wait), and an idle rank that gives up closes its endpoint
/// under the writers.
fn run_threads(eps: &[Rank], job: &Job<'_>, role: Role, iters: u64, warmup: u64) -> Result<Raw> {
    use std::sync::mpsc::RecvTimeoutError;
    let threads = job.a.threads;
    let (done_tx, done_rx) = std::sync::mpsc::channel::<()>();
    let mut tick_error = None;
    let stop = AtomicBool::new(false);
    let raws: Vec<Result<Raw>> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..threads)
            .map(|t| {
                let rank = &eps[t % eps.len()];
                let job = Job { tick: &[], ..*job };
                let done = done_tx.clone();
                let stop = &stop;
                s.spawn(move || {
                    let r = run_thread(rank, &job, role, (iters, warmup), stop);
                    if r.is_err() {
                        stop.store(true, AtomicOrdering::Relaxed);
                    }
                    let _ = done.send(());
                    r
                })
            })
            .collect();
        drop(done_tx);
        let mut finished = 0;
        let mut last_tick = Instant::now();
        while finished < threads {
            let left = TICK_EVERY.saturating_sub(last_tick.elapsed());
            match done_rx.recv_timeout(left) {
                Ok(()) => finished += 1,
                Err(RecvTimeoutError::Timeout) => {}
                // Every worker has ended (a panicking one without a word).
                Err(RecvTimeoutError::Disconnected) => break,
            }
            if last_tick.elapsed() >= TICK_EVERY {
                for &p in job.tick {
                    if tick_error.is_some() {
                        break;
                    }
                    if let Err(e) = eps[0].send(p, TICK) {
                        stop.store(true, AtomicOrdering::Relaxed);
                        tick_error = Some(e);
                    }
                }
                last_tick = Instant::now();
            }
        }
        handles
            .into_iter()
            .map(|h| {
                h.join()
                    .unwrap_or_else(|_| Err(anyhow::anyhow!("perf thread panicked")))
            })
            .collect()
    });
    if let Some(e) = tick_error {
        return Err(e).context("telling the idle ranks rank 0 is alive");
    }
    // The first real error, not a thread that stopped because of it.
    let mut raws = raws;
    if let Some(i) = raws
        .iter()
        .position(|r| r.as_ref().is_err_and(|e| !e.is::<Stopped>()))
    {
        return raws.swap_remove(i);
    }
    let raws = raws.into_iter().collect::<Result<Vec<Raw>>>()?;
    let mut sum = raws[0].clone();
    for r in &raws[1..] {
        sum.iters += r.iters;
        sum.secs = sum.secs.max(r.secs);
        sum.latency.merge(&r.latency);
    }
    Ok(sum)
}

/// Runs the sweep on one rank. Rank 0 initiates against rank 1 (with
/// --bidir both do; for send, rank 1 receives and acknowledges). Other
/// ranks idle until rank 0 tells them a size is done.
pub fn run_rank(a: &PerfArgs, boot: &dyn Bootstrap) -> Result<Vec<Raw>> {
    a.validate_all()?;
    let sizes = a.size_list()?;
    ensure!(
        boot.size() >= 2,
        "perf needs 2 ranks (run in-process, or mpirun -n 2); this job has {}",
        boot.size()
    );
    let max = *sizes.iter().max().unwrap();
    let mut cfg = RankConfig::new(a.provider.clone());
    cfg.domain = a.domain.clone();
    cfg.atomics = a.op.is_atomic();
    cfg.region_len = max.next_multiple_of(4096);
    cfg.window = a.window;
    cfg.staging_len = max
        .next_multiple_of(8)
        .saturating_mul(2)
        .saturating_mul(a.window)
        .clamp(1 << 16, MAX_STAGING);
    cfg.timeout = a.timeout;
    cfg.busy_poll = a.busy_poll;
    let caps = if cfg.atomics {
        fabkit_fabric::Caps::ALL
    } else {
        fabkit_fabric::Caps::RMA
    };
    flags::check_domain(&a.provider, a.domain.as_deref(), caps)?;
    check_memory(a, &sizes, cfg.staging_len, boot)?;
    // Every endpoint is established collectively, in the same order on all
    // ranks, so thread t's endpoint pairs with the peer's endpoint t.
    let n_eps = if a.ep_per_thread { a.threads } else { 1 };
    let eps = (0..n_eps)
        .map(|_| Rank::establish(cfg.clone(), boot))
        .collect::<fabkit_fabric::Result<Vec<Rank>>>()
        .with_context(|| format!("setting up `{}`", a.provider))?;
    let tx = eps[0].info().tx_size();
    if a.pattern == Pattern::Bw && tx > 0 && a.window > tx {
        return Err(exit::usage(format!(
            "window {} exceeds provider `{}`'s transmit queue depth (tx_size {tx}); \
             use -w {tx} or less",
            a.window, a.provider
        )));
    }
    // Threads sharing one endpoint share its transmit queue: more operations
    // in flight than it holds make libfabric fail (or, with shm, crash).
    let per_thread = sizes.iter().map(|&b| a.window_for(b)).max().unwrap_or(1);
    let shared = a.threads.saturating_mul(per_thread);
    if !a.ep_per_thread && a.threads > 1 && tx > 0 && shared > tx {
        return Err(exit::usage(format!(
            "-T {} threads x window {per_thread} = {shared} operations in flight on one shared \
             endpoint exceed provider `{}`'s transmit queue depth (tx_size {tx}); use \
             --ep-per-thread, -T {} or fewer, or -w {} or less",
            a.threads,
            a.provider,
            (tx / per_thread).max(1),
            (tx / a.threads).max(1)
        )));
    }
    let max_msg = eps[0].info().max_msg_size();
    if let Some(&s) = sizes.iter().find(|&&s| s > max_msg) {
        return Err(exit::usage(format!(
            "size {s} B exceeds provider `{}`'s max_msg_size of {max_msg} B; use smaller sizes",
            a.provider
        )));
    }
    let me = boot.rank();
    let role = match (me, a.bidir, a.op) {
        (0, false, _) => Some(Role::Initiate),
        (0 | 1, true, PerfOp::Send) => Some(Role::Exchange),
        (0 | 1, true, _) => Some(Role::Initiate),
        (1, false, PerfOp::Send) => Some(Role::Respond),
        _ => None,
    };
    let peer = if me == 0 { 1 } else { 0 };
    // Ranks without a role wait for rank 0's word through the fabric, not in
    // a barrier: MPI barriers poll, and on a small node that steals the core
    // the measurement needs.
    let idle: Vec<usize> = (0..boot.size())
        .filter(|&x| !(x == 0 || (x == 1 && (a.bidir || a.op == PerfOp::Send))))
        .collect();
    let mut out = Vec::new();
    for &bytes in &sizes {
        let window = a.window_for(bytes);
        let job = Job {
            a,
            peer,
            bytes,
            window,
            tick: if me == 0 { &idle } else { &[] },
        };
        let iters = match a.duration {
            None => a.iters.unwrap_or(DEFAULT_ITERS),
            Some(d) => calibrate(&eps, &job, role, d.as_secs_f64(), boot)?,
        };
        boot.barrier()?;
        let before = ordering_of(&eps);
        let measured = match role {
            Some(role) => {
                let cpu0 = crate::dhtbench::phase::process_cpu();
                let raw = run_threads(&eps, &job, role, iters, a.warmup).map(|mut r| {
                    r.ordering = Some(ordering_of(&eps).since(before));
                    let warm = a.warmup.saturating_mul(a.threads as u64);
                    r.cpu = Some(Cpu {
                        ns: (crate::dhtbench::phase::process_cpu().saturating_sub(cpu0)).as_nanos()
                            as u64,
                        xfers: r.iters.saturating_add(warm),
                        process: format!(
                            "{}/{}",
                            fabkit_core::bootstrap::host_id(),
                            std::process::id()
                        ),
                    });
                    r
                });
                // The idle ranks are told even after a failure, so that they
                // reach the agreement below at once.
                let told: Result<()> = if me == 0 {
                    idle.iter()
                        .try_for_each(|&p| eps[0].send(p, DONE))
                        .context("telling the idle ranks a size is done")
                } else {
                    Ok(())
                };
                raw.and_then(|raw| told.map(|()| Some(raw)))
            }
            None => wait_for_done(&eps[0], a.timeout).map(|()| None),
        };
        // Every rank's threads have stopped posting; only now may a rank
        // that failed drop (close) its endpoints, and every rank learns of it.
        out.extend(agree(boot, measured)?);
    }
    for r in eps {
        r.finish(boot)?;
    }
    Ok(out.into_iter().filter(|r| r.iters > 0).collect())
}

/// What the ordering mechanism of every endpoint in `eps` has done so far.
fn ordering_of(eps: &[Rank]) -> OrderingStats {
    eps.iter()
        .map(Rank::ordering_stats)
        .fold(OrderingStats::default(), OrderingStats::plus)
}

/// Every rank's outcome, agreed before any rank goes on or closes: `mine`
/// if every rank succeeded, else this rank's error or the first failed
/// rank's message. No rank waits for a peer that has given up.
fn agree<T>(boot: &dyn Bootstrap, mine: Result<T>) -> Result<T> {
    use fabkit_core::agree::Disagreed;
    let msg = mine.as_ref().err().map(exit::one_line);
    let all = fabkit_core::agree::agree(
        boot,
        match &mine {
            Ok(_) => Ok(&[]),
            Err(_) => Err(msg.as_deref().unwrap_or_default()),
        },
    );
    let v = mine?;
    match all {
        Ok(_) => Ok(v),
        Err(Disagreed::Exchange(e)) => Err(anyhow::Error::from(e)
            .context("agreeing with the other ranks that a size was measured")),
        Err(Disagreed::Failed(failed)) => {
            let (r, text) = &failed[0];
            bail!("rank {r} failed: {text}")
        }
    }
}

/// Refuses a sweep whose buffers this machine cannot hold, before any is
/// allocated (an allocation that fails aborts the process): each thread
/// holds 2 x window buffers of the size and its own staging buffer, each
/// endpoint a region and a staging buffer, for every rank on this host.
fn check_memory(a: &PerfArgs, sizes: &[usize], staging: usize, boot: &dyn Bootstrap) -> Result<()> {
    let me = fabkit_core::bootstrap::host_id();
    let here = boot.allgather(me.as_bytes())?;
    let local = here.iter().filter(|h| **h == me.as_bytes()).count() as u128;
    let Some(mem) = flags::physical_memory() else {
        return Ok(());
    };
    let bufs = sizes
        .iter()
        .map(|&b| 2 * a.window_for(b) as u128 * b as u128)
        .max()
        .unwrap_or(0);
    let max = sizes.iter().copied().max().unwrap_or(0) as u128;
    let eps = if a.ep_per_thread { a.threads } else { 1 } as u128;
    let per_rank = a.threads as u128 * (bufs + staging as u128)
        + eps * (max.next_multiple_of(4096) + staging as u128);
    let need = per_rank * local;
    if need > u128::from(mem) {
        return Err(exit::usage(format!(
            "-T {} with sizes up to {max} B needs about {need} B for {local} rank(s) on this \
             host, more than its {mem} B of memory; use fewer threads, smaller sizes or a \
             smaller -w",
            a.threads
        )));
    }
    Ok(())
}

/// -t: the count of operations that fills `secs` (see
/// [`timing::calibrate`]); ranks without a role idle through the probes,
/// every rank learns whether any probe failed, and rank 0's time decides.
fn calibrate(
    eps: &[Rank],
    job: &Job<'_>,
    role: Option<Role>,
    secs: f64,
    boot: &dyn Bootstrap,
) -> Result<u64> {
    let quiet = Job { tick: &[], ..*job };
    let w = job.window as u64;
    timing::calibrate(boot, secs, w, w, |n| {
        let took = match role {
            Some(role) => run_threads(eps, &quiet, role, n, 0).map(|r| r.secs),
            None => Ok(0.0),
        };
        agree(boot, took)
    })
}

/// Idles until rank 0 says a size is done; its ticks prove it alive, so
/// silence for `timeout` is an error naming it.
fn wait_for_done(r: &Rank, timeout: Duration) -> Result<()> {
    let mut buf = [0u8; 8];
    loop {
        let n = r
            .recv_within(0, &mut buf, timeout.max(TICK_EVERY * 3))
            .context("waiting for rank 0 to finish a size")?;
        match &buf[..n] {
            b if b == DONE => return Ok(()),
            b if b == TICK => continue,
            other => bail!("unexpected message from rank 0: {other:?}"),
        }
    }
}

/// Busy CPU per transfer over the initiators' passes: each process's CPU
/// once (the most any of its ranks saw: in-process ranks share it), over
/// every transfer. None unless every initiator measured it.
fn cpu_per_xfer(raws: &[&Raw]) -> Option<f64> {
    let mut by_process: std::collections::BTreeMap<&str, u64> = Default::default();
    let mut xfers = 0u64;
    for r in raws {
        let c = r.cpu.as_ref()?;
        let e = by_process.entry(&c.process).or_default();
        *e = (*e).max(c.ns);
        xfers = xfers.saturating_add(c.xfers);
    }
    let ns: u64 = by_process.values().sum();
    (xfers > 0).then(|| ns as f64 / xfers as f64)
}

/// Combines the initiators' raw results into points.
pub fn combine(a: &SweepArgs, threads: usize, per_rank: &[Vec<Raw>]) -> Vec<Point> {
    // With send, rank 1 responds: only rank 0 (and rank 1 when both ways)
    // counts as an initiator.
    let initiators: Vec<&Vec<Raw>> = per_rank
        .iter()
        .enumerate()
        .filter(|(r, v)| !v.is_empty() && (*r == 0 || a.bidir))
        .map(|(_, v)| v)
        .collect();
    let Some(first) = initiators.first() else {
        return Vec::new();
    };
    (0..first.len())
        .map(|i| {
            let raws: Vec<&Raw> = initiators.iter().map(|v| &v[i]).collect();
            let rates = raws
                .iter()
                .map(|x| Rates::new(x.bytes, x.iters, x.secs))
                .reduce(Rates::sum)
                .unwrap();
            Point {
                op: a.op,
                pattern: a.pattern,
                bytes: raws[0].bytes,
                iters: raws.iter().map(|x| x.iters).sum(),
                secs: raws.iter().map(|x| x.secs).fold(0.0, f64::max),
                window: raws[0].window,
                threads,
                bidir: a.bidir,
                rates,
                latency: Latency::from_hist(&raws.iter().fold(Hist::new(), |mut h, x| {
                    h.merge(&x.latency);
                    h
                })),
                completion: None,
                ordering: raws
                    .iter()
                    .filter_map(|x| x.ordering)
                    .reduce(OrderingStats::plus),
                cpu_ns_per_xfer: cpu_per_xfer(&raws),
            }
        })
        .collect()
}

/// `fabkit perf`: the sweep between two ranks (in-process, or the job's
/// processes), printed and written as asked.
pub fn command(args: &PerfArgs) -> Result<bool> {
    let launch = crate::launch::Launch::detect(2)?;
    let to = args.timeout;
    // Passive ranks wait at a barrier for a whole size: allow for slow sweeps.
    let barrier_timeout = to.max(std::time::Duration::from_secs(3600));
    let per_rank = launch.run(barrier_timeout, |boot| run_rank(args, boot))?;
    let Some(per_rank) = per_rank else {
        return Ok(true);
    };
    let mut points = combine(args, args.threads, &per_rank);
    for p in &mut points {
        p.completion = Some(args.completion);
    }
    // The interface really used (a network given with -d names one).
    let mut hints = fabkit_fabric::Hints::new(args.provider.clone(), fabkit_fabric::Caps::RMA);
    hints.domain = args.domain.clone();
    let found = fabkit_fabric::info::find(&hints, true).ok();
    let domain = found
        .as_ref()
        .map(|i| i.domain_name())
        .unwrap_or_else(|| args.domain.clone().unwrap_or_default());
    let method = format!(
        "libfabric {} on {domain}, threads {}{}{}{}",
        args.provider,
        args.threads,
        if args.ep_per_thread {
            " (endpoint per thread)"
        } else {
            ""
        },
        if args.busy_poll { ", busy-poll" } else { "" },
        match args.completion {
            WriteCompletion::Delivery => ", delivery-complete writes",
            WriteCompletion::Transmit => "",
        }
    );
    let mut label = args.provider.clone();
    if let Some(d) = &args.domain {
        label += &format!(" on {d}");
    }
    if args.completion == WriteCompletion::Delivery {
        label += " delivery-complete";
    }
    if args.threads > 1 {
        label += &format!(" x{}", args.threads);
    }
    if args.ep_per_thread {
        label += " (endpoint per thread)";
    }
    if args.busy_poll {
        label += " (busy-poll)";
    }
    report::emit(
        &args.sweep,
        launch.provenance(per_rank.len()),
        (
            &args.provider,
            crate::Over::Fabric,
            found.as_ref().map(|i| i.executes()),
        ),
        (&method, &label),
        points,
    )
}
