//! The data phase, the same on both ends: the stream threads, started
//! together; the control reader, which learns the peer's send counts and
//! report; the interval sampler; and this end's report.

use std::io::Write;
use std::net::{IpAddr, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use super::gate::{Gate, Live};
use super::stream::{latency_of, new_histogram, run_stream, Ctx, Stream};
use super::{failed, host_info, RunError};
use crate::proto::{self, Msg};
use crate::report::{Interval, Role, SideReport, StreamSide};
use crate::spec::TestSpec;
use crate::stats::cpu::{Clock, ProcStat};
use crate::stats::iface::{self, Counters, IfaceInfo};
use crate::stats::CpuTime;

/// How long a UDP receiver keeps reading after the peer's senders stopped,
/// for datagrams still in flight (it stops at once when all have arrived).
const UDP_DRAIN: Duration = Duration::from_millis(300);
/// Most interval samples kept per test (spread over its streams).
const MAX_INTERVALS: usize = 50_000;

/// A stream thread: its side of the stream, or why it failed.
type Worker = JoinHandle<Result<StreamSide, String>>;

pub(super) struct Phase<'a> {
    pub(super) spec: Arc<TestSpec>,
    pub(super) ctl: &'a TcpStream,
    pub(super) peer: String,
    pub(super) cpus: &'a [usize],
    /// Print interval lines as they happen (the client in text mode).
    pub(super) print: bool,
    pub(super) local_addr: IpAddr,
    /// Server: tests running now, including this one (machine-wide
    /// counters then include the others' traffic).
    pub(super) running: Option<&'a AtomicUsize>,
}

/// Joins the control reader on every way out of the data phase: shutting
/// the connection down wakes it if it is still blocked.
struct ReaderGuard {
    ctl: TcpStream,
    handle: Option<JoinHandle<()>>,
}

impl Drop for ReaderGuard {
    fn drop(&mut self) {
        let _ = self.ctl.shutdown(std::net::Shutdown::Both);
        if let Some(h) = self.handle.take() {
            let _ = h.join();
        }
    }
}

fn spawn<T: Send + 'static>(
    name: &str,
    f: impl FnOnce() -> T + Send + 'static,
) -> Result<JoinHandle<T>, RunError> {
    std::thread::Builder::new()
        .name(name.into())
        .spawn(f)
        .map_err(|e| failed(format!("cannot start a thread ({name}): {e}")))
}

/// The control reader: the peer's send counts, its report, or its failure.
fn read_control(
    mut ctl: TcpStream,
    gate: &Gate,
    lives: &[(u16, Role, Arc<Live>)],
    start: Instant,
    peer: &str,
    report: mpsc::Sender<SideReport>,
) {
    loop {
        match proto::read_msg(&mut ctl) {
            Ok(Msg::Sent { streams }) => {
                let stop = (start.elapsed() + UDP_DRAIN).as_nanos() as u64;
                for (id, msgs) in streams {
                    if let Some((_, _, l)) = lives
                        .iter()
                        .find(|(i, r, _)| *i == id && *r == Role::Receiver)
                    {
                        l.expected.store(msgs, Ordering::Relaxed);
                        l.stop_at_ns.store(stop, Ordering::Relaxed);
                    }
                }
            }
            Ok(Msg::Report(r)) => {
                let _ = report.send(*r);
                return;
            }
            Ok(Msg::Error { message }) => return gate.abort(format!("{peer} failed: {message}")),
            Ok(other) => {
                return gate.abort(format!(
                    "{peer} sent an unexpected {} message during the test",
                    other.name()
                ))
            }
            Err(e) => {
                return gate.abort(format!(
                    "control connection to {peer} lost during the test: {e}"
                ))
            }
        }
    }
}

/// Runs the streams, exchanges counts and reports with the peer; returns
/// (this end's report, the peer's report). `handshake` runs after every
/// stream thread is armed and before the start (client: Start/Go; server:
/// Go).
pub(super) fn data_phase(
    ph: Phase<'_>,
    streams: Vec<Stream>,
    handshake: impl FnOnce() -> Result<(), RunError>,
) -> Result<(SideReport, SideReport), RunError> {
    let spec = ph.spec.clone();
    let gate = Arc::new(Gate::default());
    let warnings = Arc::new(Mutex::new(Vec::new()));
    let rr_hist = Arc::new(Mutex::new(new_histogram()));
    let mut lives = Vec::new();
    let mut handles: Vec<(u16, Role, Worker)> = Vec::new();
    let n = streams.len();
    let mut spawned = Ok(());
    for (i, stream) in streams.into_iter().enumerate() {
        let live = Arc::new(Live::default());
        lives.push((stream.plan.id, stream.role, live.clone()));
        let (id, role) = (stream.plan.id, stream.role);
        let cx = Ctx {
            spec: spec.clone(),
            stream,
            live,
            gate: gate.clone(),
            cpu: (!ph.cpus.is_empty()).then(|| ph.cpus[i % ph.cpus.len()]),
            peer: ph.peer.clone(),
            warnings: warnings.clone(),
            rr_hist: rr_hist.clone(),
        };
        match spawn(&format!("stream-{id}"), move || run_stream(cx)) {
            Ok(h) => handles.push((id, role, h)),
            Err(e) => {
                spawned = Err(e);
                break;
            }
        }
    }
    // Everything is read before the handshake: once Go is sent or received
    // the peer may be sending, and `ip`/`ethtool` take milliseconds.
    let iface_name = iface::iface_of(ph.local_addr).unwrap_or_default();
    let iface_info = IfaceInfo::read(&iface_name);
    let clock = Clock::detect();
    let running0 = ph.running.map_or(1, |r| r.load(Ordering::Relaxed));
    let wire0 = Counters::read(&iface_name).unwrap_or_default();
    let proc0 = ProcStat::now();
    let ready = spawned.and_then(|()| {
        gate.wait_armed(n, spec.timeout())?;
        handshake()
    });
    if let Err(e) = ready {
        gate.abort(e.to_string());
        for (_, _, h) in handles {
            let _ = h.join();
        }
        return Err(e);
    }
    let start = gate.open();

    let (report_tx, report_rx) = mpsc::channel::<SideReport>();
    let clone = || {
        ph.ctl
            .try_clone()
            .map_err(|e| failed(format!("control connection to {}: {e}", ph.peer)))
    };
    let mut reader = ReaderGuard {
        ctl: clone()?,
        handle: None,
    };
    {
        let ctl = clone()?;
        ctl.set_read_timeout(Some(spec.control_deadline()))
            .map_err(|e| failed(format!("control connection: {e}")))?;
        let (g, lives, peer) = (gate.clone(), lives.clone(), ph.peer.clone());
        let r = spawn("control", move || {
            read_control(ctl, &g, &lives, start, &peer, report_tx)
        });
        match r {
            Ok(h) => reader.handle = Some(h),
            Err(e) => gate.abort(e.to_string()),
        }
    }
    let sampler_stop = Arc::new(AtomicBool::new(false));
    let sampler = {
        let stop = sampler_stop.clone();
        let lives = lives.clone();
        let (every, print) = (spec.interval, ph.print);
        let per_stream_cap = MAX_INTERVALS / lives.len().max(1);
        spawn("intervals", move || {
            sample_intervals(start, every, &lives, &stop, print, per_stream_cap)
        })
    };

    // Senders first: when they stop, tell the peer how much they sent.
    let mut sides = Vec::new();
    let mut first_err: Option<String> = None;
    let (senders, receivers): (Vec<_>, Vec<_>) = handles
        .into_iter()
        .partition(|(_, r, _)| *r == Role::Sender);
    let mut collect = |id: u16, h: Worker, sides: &mut Vec<StreamSide>| match h.join() {
        Ok(Ok(s)) => sides.push(s),
        Ok(Err(e)) => {
            first_err.get_or_insert(e);
        }
        Err(_) => {
            first_err.get_or_insert(format!("stream {id} panicked"));
        }
    };
    for (id, _, h) in senders {
        collect(id, h, &mut sides);
    }
    // Only senders have joined so far.
    let sent: Vec<(u16, u64)> = sides.iter().map(|s| (s.id, s.msgs)).collect();
    let mut ctl = ph.ctl;
    let told = if sent.is_empty() {
        Ok(())
    } else {
        proto::write_msg(&mut ctl, &Msg::Sent { streams: sent })
    };
    if let Err(e) = told {
        gate.abort(format!("telling {} the send counts: {e}", ph.peer));
    }
    for (id, _, h) in receivers {
        collect(id, h, &mut sides);
    }
    let wall = start.elapsed();
    let proc1 = ProcStat::now().since(&proc0);
    let wire = Counters::read(&iface_name)
        .unwrap_or_default()
        .since(&wire0);
    let running1 = ph.running.map_or(1, |r| r.load(Ordering::Relaxed));
    sampler_stop.store(true, Ordering::Relaxed);
    let intervals = match sampler {
        Ok(h) => h.join().unwrap_or_default(),
        Err(_) => Vec::new(),
    };
    if let Some(e) = first_err.or_else(|| gate.abort_reason()) {
        let _ = proto::write_msg(&mut ctl, &Msg::Error { message: e.clone() });
        return Err(failed(e));
    }
    for s in &mut sides {
        if let Some((_, _, v)) = intervals
            .iter()
            .find(|(i, r, _)| *i == s.id && *r == s.role)
        {
            s.intervals = v.clone();
        }
    }
    sides.sort_by_key(|s| (s.id, s.role == Role::Receiver));
    let mut w = warnings.lock().unwrap().clone();
    if clock.hz == 0.0 {
        w.push(clock.source.clone());
    }
    let others = running0.max(running1).saturating_sub(1);
    if others > 0 {
        w.push(format!(
            "{others} other test(s) ran on the server at the same time: its machine CPU and \
             interface counters include their traffic"
        ));
    }
    let latency = latency_of(&rr_hist.lock().unwrap());
    let local = SideReport {
        host: host_info(),
        addr: ph.local_addr.to_string(),
        iface: iface_info,
        wire,
        wall_s: wall.as_secs_f64(),
        cpu: CpuTime {
            user_s: sides.iter().map(|s| s.user_s).sum(),
            sys_s: sides.iter().map(|s| s.sys_s).sum(),
            softirq_s: proc1.softirq_s,
            busy_s: proc1.busy_s,
            wall_s: wall.as_secs_f64(),
        },
        clock_hz: clock.hz,
        clock_source: clock.source,
        latency,
        streams: sides,
        warnings: w,
    };
    proto::write_msg(&mut ctl, &Msg::Report(Box::new(local.clone())))
        .map_err(|e| failed(format!("sending the report to {}: {e}", ph.peer)))?;
    let peer = report_rx
        .recv_timeout(spec.control_deadline())
        .map_err(|_| {
            failed(gate.abort_reason().unwrap_or_else(|| {
                format!(
                    "{} sent no report within {:?}",
                    ph.peer,
                    spec.control_deadline()
                )
            }))
        })?;
    drop(reader);
    Ok((local, peer))
}

type Samples = Vec<(u16, Role, Vec<Interval>)>;

fn sample_intervals(
    start: Instant,
    every: f64,
    lives: &[(u16, Role, Arc<Live>)],
    stop: &AtomicBool,
    print: bool,
    cap: usize,
) -> Samples {
    let mut out: Samples = lives.iter().map(|(i, r, _)| (*i, *r, Vec::new())).collect();
    if every <= 0.0 {
        return out;
    }
    let mut prev: Vec<(u64, u64, u64, u64)> = vec![(0, 0, 0, 0); lives.len()];
    let mut t0 = 0.0;
    let mut k = 1u64;
    let mut stdout = std::io::stdout();
    if print {
        let _ = writeln!(
            stdout,
            "{:>5} {:>15} {:>11} {:>11} {:>12} {:>7} {:>6}",
            "[ ID]", "interval s", "MBytes", "Gbit/s", "msgs/s", "gaps", "retr"
        );
    }
    loop {
        let due = start + Duration::from_secs_f64(every * k as f64);
        // Sleep in short steps so the end of the test is noticed promptly.
        while Instant::now() < due && !stop.load(Ordering::Relaxed) {
            std::thread::sleep(
                due.saturating_duration_since(Instant::now())
                    .min(Duration::from_millis(50)),
            );
        }
        let last = stop.load(Ordering::Relaxed);
        let t1 = start.elapsed().as_secs_f64();
        // The tail after the last full interval: kept only if it carried data.
        let moved = lives
            .iter()
            .zip(&prev)
            .any(|((_, _, l), p)| l.bytes.load(Ordering::Relaxed) != p.1);
        if last && (t1 - t0 < every * 0.05 || !moved) {
            break;
        }
        for (j, (id, _, l)) in lives.iter().enumerate() {
            let now = (
                l.msgs.load(Ordering::Relaxed),
                l.bytes.load(Ordering::Relaxed),
                l.gaps.load(Ordering::Relaxed),
                l.retransmits.load(Ordering::Relaxed),
            );
            let iv = Interval {
                start_s: t0,
                end_s: t1,
                msgs: now.0.saturating_sub(prev[j].0),
                bytes: now.1.saturating_sub(prev[j].1),
                gaps: now.2.saturating_sub(prev[j].2),
                retransmits: now.3.saturating_sub(prev[j].3),
            };
            prev[j] = now;
            if print {
                let secs = (t1 - t0).max(1e-9);
                let _ = writeln!(
                    stdout,
                    "[{:>3}] {:>6.2}-{:<8.2} {:>11.1} {:>11.3} {:>12.0} {:>7} {:>6}",
                    id,
                    t0,
                    t1,
                    iv.bytes as f64 / 1e6,
                    iv.bytes as f64 * 8.0 / secs / 1e9,
                    iv.msgs as f64 / secs,
                    iv.gaps,
                    iv.retransmits
                );
            }
            if out[j].2.len() < cap {
                out[j].2.push(iv);
            }
        }
        t0 = t1;
        k += 1;
        if last {
            break;
        }
    }
    out
}
