//! The I/O edge: client and server sessions. Both ends run the same data
//! phase (`data_phase`): one thread per stream, started together at a
//! gate, a control reader that learns the peer's send counts and report,
//! and an interval sampler. Every wait has a deadline and an error names
//! the peer, the stream and the operation.

use std::io::{self, Read, Write};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, TcpListener, TcpStream, ToSocketAddrs};
use std::os::fd::AsFd;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::mpsc;
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use socket2::{Domain, Protocol, SockAddr, Socket, Type};

use crate::proto::{self, Msg};
use crate::recv::Receiver;
use crate::report::{BufSize, HostInfo, Interval, Latency, Report, Role, SideReport, StreamSide};
use crate::send;
use crate::spec::{Proto, SpecError, StreamPlan, TestSpec};
use crate::stats::cpu::{thread_times, Clock, ProcStat};
use crate::stats::iface::{self, Counters, IfaceInfo};
use crate::stats::{CpuTime, SeqTracker};
use crate::sys;

/// Why a test did not run or did not finish.
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    /// A setting is wrong: the user's to fix (exit 2).
    #[error("{0}")]
    Usage(#[from] SpecError),
    /// The run failed: network, peer or kernel (exit 1).
    #[error("{0}")]
    Failed(String),
}

fn failed(msg: impl Into<String>) -> RunError {
    RunError::Failed(msg.into())
}

/// How long a UDP receiver keeps reading after the peer's senders stopped,
/// for datagrams still in flight (it stops at once when all have arrived).
const UDP_DRAIN: Duration = Duration::from_millis(300);
/// How often a blocked UDP receiver wakes to check its stop conditions.
const UDP_POLL: Duration = Duration::from_millis(100);
/// How long a blocked send waits before the stream loop checks its
/// deadline, abort flag and stall time (a stall ends at the spec's timeout).
const SEND_POLL: Duration = Duration::from_millis(200);
/// Data connection header: magic, cookie, stream id.
const TCP_HELLO: usize = 16;
/// Most interval samples kept per test (spread over its streams).
const MAX_INTERVALS: usize = 50_000;

/// Facts about this end.
pub fn host_info() -> HostInfo {
    let read = |p: &str| {
        std::fs::read_to_string(p)
            .map(|s| s.trim().to_string())
            .unwrap_or_default()
    };
    HostInfo {
        hostname: read("/proc/sys/kernel/hostname"),
        kernel: read("/proc/sys/kernel/osrelease"),
        boot_id: read("/proc/sys/kernel/random/boot_id"),
        netns: std::fs::read_link("/proc/thread-self/ns/net")
            .map(|p| p.to_string_lossy().into_owned())
            .unwrap_or_default(),
        version: env!("CARGO_PKG_VERSION").into(),
    }
}

// ---------------------------------------------------------------------------
// Shared state of one data phase.

/// The start line: every stream thread arms itself, then waits here.
#[derive(Debug, Default)]
struct Gate {
    state: Mutex<GateState>,
    cv: Condvar,
    aborted: AtomicBool,
}

#[derive(Debug, Default)]
struct GateState {
    armed: usize,
    start: Option<Instant>,
    abort: Option<String>,
}

impl Gate {
    fn arm(&self) {
        self.state.lock().unwrap().armed += 1;
        self.cv.notify_all();
    }

    fn wait_armed(&self, n: usize, timeout: Duration) -> Result<(), RunError> {
        let g = self.state.lock().unwrap();
        let (g, _) = self
            .cv
            .wait_timeout_while(g, timeout, |s| s.armed < n && s.abort.is_none())
            .unwrap();
        if let Some(a) = &g.abort {
            return Err(failed(a.clone()));
        }
        if g.armed < n {
            return Err(failed(format!(
                "only {} of {n} stream threads got ready within {timeout:?}",
                g.armed
            )));
        }
        Ok(())
    }

    fn open(&self) -> Instant {
        let now = Instant::now();
        self.state.lock().unwrap().start = Some(now);
        self.cv.notify_all();
        now
    }

    fn wait(&self, timeout: Duration) -> Result<Instant, String> {
        let g = self.state.lock().unwrap();
        let (g, _) = self
            .cv
            .wait_timeout_while(g, timeout, |s| s.start.is_none() && s.abort.is_none())
            .unwrap();
        match (&g.abort, g.start) {
            (Some(a), _) => Err(a.clone()),
            (None, Some(t)) => Ok(t),
            (None, None) => Err(format!("the test did not start within {timeout:?}")),
        }
    }

    fn abort(&self, why: String) {
        let mut g = self.state.lock().unwrap();
        if g.abort.is_none() {
            g.abort = Some(why);
        }
        self.aborted.store(true, Ordering::Relaxed);
        self.cv.notify_all();
    }

    fn aborted(&self) -> bool {
        self.aborted.load(Ordering::Relaxed)
    }

    fn abort_reason(&self) -> Option<String> {
        self.state.lock().unwrap().abort.clone()
    }
}

/// Counters a stream thread publishes for the interval sampler, and the
/// stop conditions the control reader sets for a receiver.
#[derive(Debug)]
struct Live {
    msgs: AtomicU64,
    bytes: AtomicU64,
    gaps: AtomicU64,
    retransmits: AtomicU64,
    /// Receiver: messages the peer says it sent (u64::MAX: not known yet).
    expected: AtomicU64,
    /// Receiver: stop reading at this many ns after the start (u64::MAX: no).
    stop_at_ns: AtomicU64,
}

impl Default for Live {
    fn default() -> Self {
        Live {
            msgs: AtomicU64::new(0),
            bytes: AtomicU64::new(0),
            gaps: AtomicU64::new(0),
            retransmits: AtomicU64::new(0),
            expected: AtomicU64::new(u64::MAX),
            stop_at_ns: AtomicU64::new(u64::MAX),
        }
    }
}

/// One stream as this end runs it.
struct Stream {
    plan: StreamPlan,
    role: Role,
    sock: Socket,
    /// Where an unconnected UDP socket sends to (`None`: connected).
    dest: Option<SocketAddr>,
    buffer: Option<BufSize>,
}

struct Ctx {
    spec: Arc<TestSpec>,
    stream: Stream,
    live: Arc<Live>,
    gate: Arc<Gate>,
    cpu: Option<usize>,
    peer: String,
    warnings: Arc<Mutex<Vec<String>>>,
    /// Request/response: every client stream's latencies, merged.
    rr_hist: Arc<Mutex<Histogram>>,
}

/// Latency histogram: 1 ns to 1 hour, 3 significant digits; fixed memory,
/// no allocation per sample.
type Histogram = hdrhistogram::Histogram<u64>;

fn new_histogram() -> Histogram {
    // Valid bounds (low >= 1, high >= 2 * low, 3 digits): cannot fail.
    Histogram::new_with_bounds(1, 3_600_000_000_000, 3).expect("valid histogram bounds")
}

/// Latency figures of a histogram of nanoseconds.
fn latency_of(h: &Histogram) -> Option<Latency> {
    let us = |ns: u64| ns as f64 / 1e3;
    (!h.is_empty()).then(|| Latency {
        count: h.len(),
        min_us: us(h.min()),
        mean_us: h.mean() / 1e3,
        p50_us: us(h.value_at_quantile(0.5)),
        p90_us: us(h.value_at_quantile(0.9)),
        p99_us: us(h.value_at_quantile(0.99)),
        p999_us: us(h.value_at_quantile(0.999)),
        max_us: us(h.max()),
    })
}

impl Ctx {
    fn id(&self) -> u16 {
        self.stream.plan.id
    }

    fn what(&self, op: &str) -> String {
        format!("stream {}: {op} {}", self.id(), self.peer)
    }

    /// Request/response: every read and write waits at most the timeout.
    fn rr_timeouts(&self) -> Result<(), String> {
        let (sock, to) = (&self.stream.sock, Some(self.spec.timeout()));
        sock.set_read_timeout(to)
            .and_then(|()| sock.set_write_timeout(to))
            .map_err(|e| self.what(&format!("{e}; setting timeouts with")))
    }

    /// Arms this stream and waits for the start.
    fn start(&self) -> Result<Instant, String> {
        self.gate.arm();
        self.gate.wait(self.spec.timeout() * 3).map_err(|e| {
            if self.gate.aborted() {
                e
            } else {
                self.what(&format!("{e}; waiting for the start with"))
            }
        })
    }
}

fn is_timeout(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
    )
}

/// Seconds between messages at the paced rate (0 unpaced).
fn pacing_gap(spec: &TestSpec) -> Duration {
    if spec.rate_bps > 0.0 {
        Duration::from_secs_f64((spec.len as f64 * 8.0 / spec.rate_bps).min(3600.0))
    } else {
        Duration::ZERO
    }
}

fn finish_side(
    cx: &Ctx,
    role: Role,
    start: Instant,
    last: Instant,
    msgs: u64,
    bytes: u64,
    t0: (Duration, Duration),
) -> StreamSide {
    let (u1, s1) = thread_times();
    StreamSide {
        id: cx.id(),
        role,
        msgs,
        bytes,
        seconds: last.saturating_duration_since(start).as_secs_f64(),
        user_s: u1.saturating_sub(t0.0).as_secs_f64(),
        sys_s: s1.saturating_sub(t0.1).as_secs_f64(),
        cpu: cx.cpu,
        buffer: cx.stream.buffer.clone(),
        ..StreamSide::default()
    }
}

fn run_sender(cx: &Ctx) -> Result<StreamSide, String> {
    let spec = &*cx.spec;
    let sock = &cx.stream.sock;
    let mut s = send::sender(
        spec.send,
        spec.proto,
        sock,
        cx.stream.dest,
        spec.len,
        cx.id(),
        spec.timeout(),
    )
    .map_err(|e| cx.what(&format!("{e}; sending to")))?;
    // Blocked sends come back regularly, so a peer that stops reading is
    // noticed (stall timeout) and an abort is seen.
    sock.set_write_timeout(Some(SEND_POLL))
        .map_err(|e| cx.what(&format!("{e}; sending to")))?;
    let start = cx.start()?;
    let t0 = thread_times();
    let (deadline, limit) = spec.bounds(start);
    let byte_rate = spec.rate_bps / 8.0;
    let (mut seq, mut bytes) = (0u64, 0u64);
    let mut last_info = start;
    let mut stalled_since: Option<Instant> = None;
    loop {
        if cx.gate.aborted() {
            break;
        }
        let now = Instant::now();
        if deadline.is_some_and(|d| now >= d) || seq >= limit {
            break;
        }
        if byte_rate > 0.0 {
            let allowed = byte_rate * now.duration_since(start).as_secs_f64();
            if bytes as f64 >= allowed {
                let ahead = (bytes as f64 - allowed) / byte_rate;
                std::thread::sleep(Duration::from_secs_f64(ahead.clamp(1e-5, 0.01)));
                continue;
            }
        }
        match s.send(seq, limit - seq) {
            Ok(sent) => {
                seq += sent.msgs;
                bytes += sent.bytes;
                stalled_since = None;
                cx.live.msgs.store(seq, Ordering::Relaxed);
                cx.live.bytes.store(bytes, Ordering::Relaxed);
            }
            // A full queue with no receiver error queue: give the CPU away, retry.
            Err(e) if e.raw_os_error() == Some(libc::ENOBUFS) => std::thread::yield_now(),
            Err(e) if is_timeout(&e) => {
                let since = *stalled_since.get_or_insert(now);
                if now.duration_since(since) >= spec.timeout() {
                    return Err(cx.what(&format!("no send progress for {:?} to", spec.timeout())));
                }
            }
            Err(e) if e.raw_os_error() == Some(libc::ECONNREFUSED) => {
                return Err(cx.what("datagrams refused (ICMP port unreachable): the receiver is gone; sending to"))
            }
            Err(e) if e.raw_os_error() == Some(libc::EINVAL) && matches!(spec.send, crate::spec::SendPath::Gso { .. }) => {
                return Err(cx.what(&format!(
                    "the kernel refused a UDP GSO send ({e}): a -l {} B segment must fit the path MTU; sending to",
                    spec.len
                )))
            }
            Err(e) => return Err(cx.what(&format!("send failed: {e}; sending to"))),
        }
        if spec.proto == Proto::Tcp && now.duration_since(last_info) >= Duration::from_millis(100) {
            last_info = now;
            if let Some(r) = sys::tcp_retransmits(sock.as_fd()) {
                cx.live.retransmits.store(r, Ordering::Relaxed);
            }
        }
    }
    let end = Instant::now();
    let zc = s
        .finish(spec.timeout())
        .map_err(|e| cx.what(&format!("{e}; sending to")))?;
    drop(s);
    let mut side = finish_side(cx, Role::Sender, start, end, seq, bytes, t0);
    side.zerocopy = zc;
    if let Some(z) = zc {
        if z.copied > 0 {
            cx.warnings.lock().unwrap().push(format!(
                "stream {}: the kernel copied {} of {} zerocopy sends after all (a receiver on the same host makes it copy)",
                cx.id(),
                z.copied,
                z.completed
            ));
        }
    }
    if spec.proto == Proto::Tcp {
        side.retransmits = sys::tcp_retransmits(sock.as_fd());
        // End of stream for the receiver; it reads until EOF.
        let _ = sock.shutdown(std::net::Shutdown::Write);
    }
    Ok(side)
}

fn run_receiver(cx: &Ctx) -> Result<StreamSide, String> {
    let spec = &*cx.spec;
    let sock = &cx.stream.sock;
    let idle = spec.timeout() + pacing_gap(spec);
    let poll = if spec.proto == Proto::Udp {
        UDP_POLL
    } else {
        idle
    };
    sock.set_read_timeout(Some(poll))
        .map_err(|e| cx.what(&format!("{e}")))?;
    let mut r = Receiver::new(sock, spec.proto, spec.recv, spec.len, cx.id())
        .map_err(|e| cx.what(&format!("{e}; receiving from")))?;
    let start = cx.start()?;
    let t0 = thread_times();
    let mut seq = SeqTracker::default();
    let mut bytes = 0u64;
    let mut last = start;
    loop {
        let got = r.recv(&mut seq);
        let now = Instant::now();
        match got {
            Ok(g) if g.eof => break,
            Ok(g) => {
                bytes += g.bytes;
                last = now;
                cx.live.bytes.store(bytes, Ordering::Relaxed);
                cx.live
                    .msgs
                    .store(spec.msgs_of(seq.received, bytes), Ordering::Relaxed);
                cx.live.gaps.store(seq.gaps(), Ordering::Relaxed);
                if seq.received >= cx.live.expected.load(Ordering::Relaxed) {
                    break;
                }
            }
            Err(e) if is_timeout(&e) => {
                if spec.proto == Proto::Tcp {
                    return Err(cx.what(&format!("no data for {idle:?} from")));
                }
            }
            Err(e) => return Err(cx.what(&format!("receive failed: {e}; receiving from"))),
        }
        if cx.gate.aborted() {
            break;
        }
        let elapsed = now.duration_since(start).as_nanos() as u64;
        if spec.proto == Proto::Udp {
            if elapsed >= cx.live.stop_at_ns.load(Ordering::Relaxed) {
                break;
            }
            if cx.live.stop_at_ns.load(Ordering::Relaxed) == u64::MAX
                && now.duration_since(last) > idle
            {
                return Err(cx.what(&format!("no datagram for {idle:?} from")));
            }
        }
    }
    let msgs = spec.msgs_of(seq.received, bytes);
    let mut side = finish_side(cx, Role::Receiver, start, last, msgs, bytes, t0);
    side.reordered = seq.reordered;
    side.foreign = r.foreign;
    Ok(side)
}

/// TCP request/response, client end: `-l` bytes out, `-l` bytes back, timed.
fn run_rr_client(cx: &Ctx) -> Result<StreamSide, String> {
    let spec = &*cx.spec;
    let mut sock: &Socket = &cx.stream.sock;
    cx.rr_timeouts()?;
    let req = vec![0x5au8; spec.len];
    let mut resp = vec![0u8; spec.len];
    let mut h = new_histogram();
    let start = cx.start()?;
    let t0 = thread_times();
    let (deadline, limit) = spec.bounds(start);
    let mut n = 0u64;
    let mut end = start;
    while !cx.gate.aborted() && n < limit && deadline.is_none_or(|d| end < d) {
        let t = Instant::now();
        sock.write_all(&req)
            .map_err(|e| cx.what(&format!("request failed: {e}; to")))?;
        sock.read_exact(&mut resp).map_err(|e| {
            if is_timeout(&e) {
                cx.what(&format!("no response within {:?} from", spec.timeout()))
            } else {
                cx.what(&format!("response failed: {e}; from"))
            }
        })?;
        end = Instant::now();
        let _ = h.record((end - t).as_nanos().max(1) as u64);
        n += 1;
        cx.live.msgs.store(n, Ordering::Relaxed);
        cx.live.bytes.store(n * spec.len as u64, Ordering::Relaxed);
    }
    let _ = sock.shutdown(std::net::Shutdown::Write);
    let mut side = finish_side(cx, Role::Sender, start, end, n, n * spec.len as u64, t0);
    side.latency = latency_of(&h);
    // Same bounds on both: adding cannot fail.
    let _ = cx.rr_hist.lock().unwrap().add(&h);
    Ok(side)
}

/// TCP request/response, server end: answers each request until EOF.
fn run_rr_server(cx: &Ctx) -> Result<StreamSide, String> {
    let spec = &*cx.spec;
    let mut sock: &Socket = &cx.stream.sock;
    cx.rr_timeouts()?;
    let mut buf = vec![0u8; spec.len];
    let start = cx.start()?;
    let t0 = thread_times();
    let mut n = 0u64;
    let mut last = start;
    while !cx.gate.aborted() {
        match sock.read_exact(&mut buf) {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => break,
            Err(e) if is_timeout(&e) => {
                return Err(cx.what(&format!("no request for {:?} from", spec.timeout())))
            }
            Err(e) => return Err(cx.what(&format!("request failed: {e}; from"))),
        }
        sock.write_all(&buf)
            .map_err(|e| cx.what(&format!("response failed: {e}; to")))?;
        n += 1;
        last = Instant::now();
        cx.live.msgs.store(n, Ordering::Relaxed);
    }
    Ok(finish_side(
        cx,
        Role::Receiver,
        start,
        last,
        n,
        n * spec.len as u64,
        t0,
    ))
}

fn run_stream(cx: Ctx) -> Result<StreamSide, String> {
    if let Some(cpu) = cx.cpu {
        sys::pin_thread(cpu).map_err(|e| {
            format!(
                "stream {}: cannot pin to CPU {cpu}: {e}; check --cpus against nproc",
                cx.id()
            )
        })?;
    }
    let r = match (cx.spec.rr, cx.stream.role) {
        (true, Role::Sender) => run_rr_client(&cx),
        (true, Role::Receiver) => run_rr_server(&cx),
        (false, Role::Sender) => run_sender(&cx),
        (false, Role::Receiver) => run_receiver(&cx),
    };
    if let Err(e) = &r {
        cx.gate.abort(e.clone());
    }
    r
}

// ---------------------------------------------------------------------------
// The data phase, the same on both ends.

/// A stream thread: its side of the stream, or why it failed.
type Worker = JoinHandle<Result<StreamSide, String>>;

struct Phase<'a> {
    spec: Arc<TestSpec>,
    ctl: &'a TcpStream,
    peer: String,
    cpus: &'a [usize],
    /// Print interval lines as they happen (the client in text mode).
    print: bool,
    local_addr: IpAddr,
    /// Server: tests running now, including this one (machine-wide
    /// counters then include the others' traffic).
    running: Option<&'a AtomicUsize>,
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
fn data_phase(
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

// ---------------------------------------------------------------------------
// Sockets.

fn family_of(ip: IpAddr) -> Domain {
    if ip.is_ipv4() {
        Domain::IPV4
    } else {
        Domain::IPV6
    }
}

/// Sets `-w` on a data socket, past `[rw]mem_max` with `SO_*BUFFORCE` when
/// privileged, and says what the kernel granted.
fn set_buffer(sock: &Socket, want: usize, role: Role) -> io::Result<BufSize> {
    let (opt, force) = match role {
        Role::Sender => (libc::SO_SNDBUF, libc::SO_SNDBUFFORCE),
        Role::Receiver => (libc::SO_RCVBUF, libc::SO_RCVBUFFORCE),
    };
    let want_c = libc::c_int::try_from(want).unwrap_or(libc::c_int::MAX);
    sys::set_int(sock.as_fd(), libc::SOL_SOCKET, opt, want_c)?;
    let mut got = sys::get_int(sock.as_fd(), libc::SOL_SOCKET, opt)? as usize;
    let mut forced = false;
    // The kernel doubles what it grants; half of it is the usable size.
    if got / 2 < want && sys::set_int(sock.as_fd(), libc::SOL_SOCKET, force, want_c).is_ok() {
        got = sys::get_int(sock.as_fd(), libc::SOL_SOCKET, opt)? as usize;
        forced = true;
    }
    Ok(BufSize {
        asked: want,
        got,
        forced,
    })
}

fn buffer_warning(b: &BufSize, role: Role) -> Option<String> {
    (b.got / 2 < b.asked).then(|| {
        let sysctl = if role == Role::Sender {
            "wmem_max"
        } else {
            "rmem_max"
        };
        format!(
            "-w {} B was capped at {} B by net.core.{sysctl} (raise it, or run as root to force)",
            b.asked,
            b.got / 2
        )
    })
}

/// A data stream of this end, its socket prepared (`dest`: where an
/// unconnected UDP socket sends to).
fn stream(
    plan: StreamPlan,
    role: Role,
    sock: Socket,
    dest: Option<SocketAddr>,
    spec: &TestSpec,
    dev: Option<&str>,
    warnings: &mut Vec<String>,
) -> Result<Stream, RunError> {
    let buffer = prepare(&sock, spec, role, dev, warnings)?;
    Ok(Stream {
        plan,
        role,
        sock,
        dest,
        buffer,
    })
}

/// Options every data socket gets.
fn prepare(
    sock: &Socket,
    spec: &TestSpec,
    role: Role,
    dev: Option<&str>,
    warnings: &mut Vec<String>,
) -> Result<Option<BufSize>, RunError> {
    if let Some(d) = dev {
        sock.bind_device(Some(d.as_bytes()))
            .map_err(|e| failed(format!("binding to interface {d}: {e} (SO_BINDTODEVICE needs root and an existing interface)")))?;
    }
    if spec.proto == Proto::Tcp && (spec.nodelay || spec.rr) {
        sock.set_tcp_nodelay(true)
            .map_err(|e| failed(format!("TCP_NODELAY: {e}")))?;
    }
    let Some(w) = spec.window else {
        return Ok(None);
    };
    let b = set_buffer(sock, w, role).map_err(|e| failed(format!("setting -w {w}: {e}")))?;
    if let Some(x) = buffer_warning(&b, role) {
        if !warnings.contains(&x) {
            warnings.push(x);
        }
    }
    Ok(Some(b))
}

fn resolve(host: &str, port: u16, want_v4: Option<bool>) -> Result<SocketAddr, RunError> {
    let addrs: Vec<SocketAddr> = (host, port)
        .to_socket_addrs()
        .map_err(|e| failed(format!("cannot resolve `{host}`: {e}")))?
        .collect();
    addrs
        .iter()
        .find(|a| want_v4.is_none_or(|v4| a.is_ipv4() == v4))
        .copied()
        .ok_or_else(|| {
            failed(format!(
                "`{host}` has no {} address",
                if want_v4 == Some(true) {
                    "IPv4"
                } else {
                    "IPv6"
                }
            ))
        })
}

// ---------------------------------------------------------------------------
// Client.

/// Where and how the client connects.
#[derive(Clone, Debug, Default)]
pub struct ClientOpts {
    /// Server host name or address (IPv6 link-local with `%iface`).
    pub host: String,
    /// Control port.
    pub port: u16,
    /// Local address to bind (`-B`).
    pub bind: Option<IpAddr>,
    /// Interface to bind (`--dev`).
    pub dev: Option<String>,
    /// `Some(true)` IPv4 only, `Some(false)` IPv6 only.
    pub v4: Option<bool>,
    /// CPUs for the client's stream threads.
    pub cpus: Vec<usize>,
    /// UDP streams with send path `send` use unconnected sockets and
    /// sendto(2): no route and no TX queue is cached per socket, so a tc
    /// program's queue choice holds packet by packet (the round-robin
    /// policy). Other paths stay connected.
    pub unconnected_udp: bool,
    /// Print interval lines live.
    pub print_intervals: bool,
}

/// `a` with another port; an IPv6 scope (link-local interface) is kept.
fn with_port(a: SocketAddr, port: u16) -> SocketAddr {
    let mut a = a;
    a.set_port(port);
    a
}

/// The role this end has on a stream.
fn role_of(p: &StreamPlan, client: bool) -> Role {
    if p.sends_here(client) {
        Role::Sender
    } else {
        Role::Receiver
    }
}

/// A UDP socket bound to `local` (port 0) and connected to `peer`; anything
/// that reached it between bind and connect is thrown away, so a stranger's
/// early datagram is never counted.
fn udp_connected(sock: Socket, peer: SocketAddr) -> io::Result<Socket> {
    sock.connect(&SockAddr::from(peer))?;
    sock.set_nonblocking(true)?;
    let mut junk = [0u8; 64];
    while crate::recv::recv_into(&sock, &mut junk).is_ok() {}
    sock.set_nonblocking(false)?;
    Ok(sock)
}

fn udp_bound(local: SocketAddr) -> io::Result<Socket> {
    let s = Socket::new(family_of(local.ip()), Type::DGRAM, Some(Protocol::UDP))?;
    s.bind(&SockAddr::from(with_port(local, 0)))?;
    Ok(s)
}

fn port_of(s: &Socket) -> u16 {
    s.local_addr()
        .ok()
        .and_then(|a| a.as_socket())
        .map_or(0, |a| a.port())
}

fn connect(
    addr: SocketAddr,
    bind: Option<SocketAddr>,
    dev: Option<&str>,
    timeout: Duration,
) -> io::Result<Socket> {
    let s = Socket::new(family_of(addr.ip()), Type::STREAM, Some(Protocol::TCP))?;
    if let Some(d) = dev {
        s.bind_device(Some(d.as_bytes()))?;
    }
    if let Some(b) = bind {
        s.bind(&SockAddr::from(with_port(b, 0)))?;
    }
    s.connect_timeout(&SockAddr::from(addr), timeout)?;
    Ok(s)
}

/// Runs one test against a server; returns the assembled report.
pub fn run_client(spec: &TestSpec, opts: &ClientOpts) -> Result<Report, RunError> {
    spec.validate()?;
    let addr = resolve(&opts.host, opts.port, opts.v4)?;
    let to = spec.timeout();
    let bind = opts.bind.map(|ip| SocketAddr::new(ip, 0));
    let ctl_sock = connect(addr, bind, opts.dev.as_deref(), to).map_err(|e| {
        failed(format!(
            "cannot reach the server at {addr}: {e} (is `ipoib-eval server -p {}` running there?)",
            opts.port
        ))
    })?;
    let ctl: TcpStream = ctl_sock.into();
    ctl.set_write_timeout(Some(to))
        .map_err(|e| failed(e.to_string()))?;
    ctl.set_nodelay(true).map_err(|e| failed(e.to_string()))?;
    let local = ctl.local_addr().map_err(|e| failed(e.to_string()))?;
    let peer = format!("server {addr}");
    let mut w = &ctl;
    proto::write_msg(
        &mut w,
        &Msg::Hello {
            spec: spec.clone(),
            client: host_info(),
        },
    )
    .map_err(|e| failed(format!("sending the test to {peer}: {e}")))?;
    let read = |what: &str| {
        proto::read_msg_within(&ctl, to)
            .map_err(|e| failed(format!("waiting for {what} from {peer}: {e}")))
    };
    let (ports, cookie) = match read("Ready")? {
        Msg::Ready { ports, cookie, .. } => (ports, cookie),
        Msg::Refused { reason } => {
            return Err(failed(format!("{peer} refused the test: {reason}")))
        }
        Msg::Error { message } => return Err(failed(format!("{peer} failed: {message}"))),
        other => {
            return Err(failed(format!(
                "{peer} answered {} instead of Ready",
                other.name()
            )))
        }
    };
    let plan = spec.plan();
    let mut warnings = Vec::new();
    let mut streams = Vec::new();
    let mut udp_ports = Vec::new();
    for p in &plan {
        let role = role_of(p, true);
        let mut dest = None;
        let unconnected = opts.unconnected_udp
            && spec.send == crate::spec::SendPath::Send
            && role == Role::Sender;
        let sock = match spec.proto {
            Proto::Tcp => {
                let port = *ports
                    .first()
                    .ok_or_else(|| failed(format!("{peer} gave no data port")))?;
                let s = connect(with_port(addr, port), Some(local), opts.dev.as_deref(), to)
                    .map_err(|e| {
                        failed(format!(
                            "stream {}: connecting to {peer} data port {port}: {e}",
                            p.id
                        ))
                    })?;
                let mut hello = [0u8; TCP_HELLO];
                hello[..4].copy_from_slice(&proto::MAGIC);
                hello[4..12].copy_from_slice(&cookie.to_le_bytes());
                hello[12..14].copy_from_slice(&p.id.to_le_bytes());
                s.set_write_timeout(Some(to))
                    .map_err(|e| failed(e.to_string()))?;
                (&s).write_all(&hello)
                    .map_err(|e| failed(format!("stream {}: greeting {peer}: {e}", p.id)))?;
                s
            }
            Proto::Udp => {
                let port = *ports.get(usize::from(p.id)).ok_or_else(|| {
                    failed(format!(
                        "{peer} gave {} data ports for {} streams",
                        ports.len(),
                        plan.len()
                    ))
                })?;
                let to = with_port(addr, port);
                let s = if unconnected {
                    dest = Some(to);
                    udp_bound(local)
                } else {
                    udp_bound(local).and_then(|s| udp_connected(s, to))
                }
                .map_err(|e| failed(format!("stream {}: a UDP socket to {peer}: {e}", p.id)))?;
                udp_ports.push(port_of(&s));
                s
            }
        };
        streams.push(stream(
            *p,
            role,
            sock,
            dest,
            spec,
            opts.dev.as_deref(),
            &mut warnings,
        )?);
    }
    let ph = Phase {
        spec: Arc::new(spec.clone()),
        ctl: &ctl,
        peer: peer.clone(),
        cpus: &opts.cpus,
        print: opts.print_intervals,
        local_addr: local.ip(),
        running: None,
    };
    let handshake = || {
        let mut w = &ctl;
        proto::write_msg(
            &mut w,
            &Msg::Start {
                ports: udp_ports.clone(),
            },
        )
        .map_err(|e| failed(format!("sending Start to {peer}: {e}")))?;
        match read("Go")? {
            Msg::Go => Ok(()),
            Msg::Error { message } => Err(failed(format!("{peer} failed: {message}"))),
            other => Err(failed(format!(
                "{peer} answered {} instead of Go",
                other.name()
            ))),
        }
    };
    let (mut mine, theirs) = data_phase(ph, streams, handshake)?;
    mine.warnings.extend(warnings);
    let mut r = Report::assemble(spec, addr.to_string(), mine, theirs);
    r.command = std::env::args().collect::<Vec<_>>().join(" ");
    r.commit = option_env!("FABKIT_COMMIT").unwrap_or("unknown").into();
    r.started_unix = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    Ok(r)
}

// ---------------------------------------------------------------------------
// Server.

/// How the server listens.
#[derive(Clone, Debug)]
pub struct ServerOpts {
    /// Control port (0: any; see [`Server::port`]).
    pub port: u16,
    /// Address to listen on (default: every IPv6 and IPv4 address).
    pub bind: Option<IpAddr>,
    /// Interface to bind (`--dev`).
    pub dev: Option<String>,
    /// Tests run at once at most; more are refused.
    pub max_sessions: usize,
    /// How long a new connection may take to say what it wants (a deadline
    /// for the whole message, however slowly its bytes come).
    pub handshake_timeout: Duration,
    /// Print a summary line per test.
    pub verbose: bool,
    /// Let sweeps set this interface (`Configure`): recorded before the
    /// first change, restored when the server ends.
    pub sweep_iface: Option<String>,
}

impl Default for ServerOpts {
    fn default() -> Self {
        ServerOpts {
            port: crate::DEFAULT_PORT,
            bind: None,
            dev: None,
            max_sessions: 16,
            handshake_timeout: Duration::from_secs(10),
            verbose: true,
            sweep_iface: None,
        }
    }
}

/// A listening server.
#[derive(Debug)]
pub struct Server {
    listener: TcpListener,
    opts: Arc<ServerOpts>,
    active: Arc<AtomicUsize>,
    /// `--sweep-iface`'s record, taken at the first `Configure`; dropped
    /// (restored) with the server.
    held: Held,
}

/// The interface a server lets sweeps set, once recorded.
type Held = Arc<Mutex<Option<crate::iface::Held>>>;

/// One running test's place in the server's count, given back on drop (also
/// when the session fails or panics).
struct Slot(Arc<AtomicUsize>);

impl Drop for Slot {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}

fn unmap(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(ip, IpAddr::V4),
        v4 => v4,
    }
}

/// A dual-stack listener sees IPv4 peers as mapped IPv6 addresses: use the
/// plain IPv4 address, so data sockets and interfaces match. IPv6 addresses
/// keep their scope (link-local).
fn unmap_addr(a: SocketAddr) -> SocketAddr {
    match unmap(a.ip()) {
        IpAddr::V4(v4) => SocketAddr::new(IpAddr::V4(v4), a.port()),
        IpAddr::V6(_) => a,
    }
}

fn cookie() -> u64 {
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u128(Instant::now().elapsed().as_nanos());
    h.finish()
}

/// Accept errors that say nothing about the listener itself (a client that
/// went away, or a momentary lack of file descriptors or memory).
fn transient(e: &io::Error) -> bool {
    matches!(
        e.raw_os_error(),
        Some(
            libc::ECONNABORTED
                | libc::EMFILE
                | libc::ENFILE
                | libc::ENOBUFS
                | libc::ENOMEM
                | libc::EPROTO
                | libc::EINTR
        )
    )
}

impl Server {
    /// Binds the control port.
    pub fn bind(opts: ServerOpts) -> Result<Server, RunError> {
        let ip = opts.bind.unwrap_or(IpAddr::V6(Ipv6Addr::UNSPECIFIED));
        let addr = SocketAddr::new(ip, opts.port);
        let mk = |addr: SocketAddr| -> io::Result<Socket> {
            let s = Socket::new(family_of(addr.ip()), Type::STREAM, Some(Protocol::TCP))?;
            s.set_reuse_address(true)?;
            if addr.is_ipv6() {
                // Dual stack: IPv4 clients arrive as mapped addresses.
                s.set_only_v6(false)?;
            }
            if let Some(d) = &opts.dev {
                s.bind_device(Some(d.as_bytes()))?;
            }
            s.bind(&SockAddr::from(addr))?;
            s.listen(128)?;
            Ok(s)
        };
        // No IPv6 on this host: fall back to IPv4 when no address was named.
        let sock = mk(addr).or_else(|e| match opts.bind {
            None => mk(SocketAddr::new(
                IpAddr::V4(Ipv4Addr::UNSPECIFIED),
                opts.port,
            )),
            Some(_) => Err(e),
        });
        let sock = sock.map_err(|e| {
            if e.kind() == io::ErrorKind::AddrInUse {
                failed(format!(
                    "port {} is in use: stop the other server or pick another with -p",
                    opts.port
                ))
            } else {
                failed(format!("cannot listen on {addr}: {e}"))
            }
        })?;
        Ok(Server {
            listener: sock.into(),
            opts: Arc::new(opts),
            active: Arc::new(AtomicUsize::new(0)),
            held: Arc::default(),
        })
    }

    /// The control port listened on.
    pub fn port(&self) -> u16 {
        self.listener.local_addr().map_or(0, |a| a.port())
    }

    /// Serves tests; with `one_off`, returns after the first connection
    /// (its test's result), else never returns except on a listener error.
    pub fn serve(&self, one_off: bool) -> Result<(), RunError> {
        loop {
            let (conn, from) = match self.listener.accept() {
                Ok(c) => c,
                Err(e) if transient(&e) => {
                    if self.opts.verbose {
                        eprintln!("ipoib-eval server: accept: {e}; going on");
                    }
                    // Out of descriptors: let running tests finish some.
                    std::thread::sleep(Duration::from_millis(100));
                    continue;
                }
                Err(e) => return Err(failed(format!("accepting connections: {e}"))),
            };
            let from = unmap_addr(from);
            if one_off {
                self.active.fetch_add(1, Ordering::Relaxed);
                let _slot = Slot(self.active.clone());
                return session(&self.opts, &self.active, &self.held, conn, from).map(|_| ());
            }
            if self.active.load(Ordering::Relaxed) >= self.opts.max_sessions {
                let mut c = conn;
                let _ = c.set_write_timeout(Some(self.opts.handshake_timeout));
                let reason = format!(
                    "server busy: {} tests running; try again later",
                    self.opts.max_sessions
                );
                let _ = proto::write_msg(&mut c, &Msg::Refused { reason });
                continue;
            }
            self.active.fetch_add(1, Ordering::Relaxed);
            let slot = Slot(self.active.clone());
            let (opts, active, held) = (self.opts.clone(), self.active.clone(), self.held.clone());
            let started = std::thread::Builder::new()
                .name(format!("session-{from}"))
                .spawn(move || {
                    let _slot = slot;
                    if let Err(e) = session(&opts, &active, &held, conn, from) {
                        if opts.verbose {
                            eprintln!("ipoib-eval server: {from}: {e}");
                        }
                    }
                });
            if let Err(e) = started {
                // The closure (and its slot and connection) were dropped.
                if self.opts.verbose {
                    eprintln!("ipoib-eval server: no thread for {from}: {e}");
                }
            }
        }
    }
}

/// Refuses a test with a reason the client prints, and returns the error.
fn refuse(ctl: &TcpStream, peer: &str, reason: String) -> RunError {
    let mut w = ctl;
    let _ = proto::write_msg(
        &mut w,
        &Msg::Refused {
            reason: reason.clone(),
        },
    );
    failed(format!("{peer}: {reason}"))
}

/// Sets the server's `--sweep-iface` as a sweep point asks, recording it
/// first; answers `Configured` or `Refused`.
fn configure(
    opts: &ServerOpts,
    running: &AtomicUsize,
    held: &Held,
    ctl: &TcpStream,
    peer: &str,
    wanted: Option<&crate::iface::Wanted>,
) -> Result<Option<Report>, RunError> {
    let Some(iface) = &opts.sweep_iface else {
        return Err(refuse(
            ctl,
            peer,
            "this server does not change its interface: start it with --sweep-iface IFACE".into(),
        ));
    };
    // Only over the interface itself, and never under a running test.
    let local = ctl.local_addr().map_err(|e| failed(e.to_string()))?.ip();
    let came_on = crate::stats::iface::iface_of(unmap(local));
    if came_on.as_deref() != Some(iface.as_str()) {
        return Err(refuse(
            ctl,
            peer,
            format!(
                "settings are taken only over {iface} (this came to {local} on {}): give --peer \
                 this server's address on {iface}",
                came_on.as_deref().unwrap_or("no interface")
            ),
        ));
    }
    if running.load(Ordering::Relaxed) > 1 {
        return Err(refuse(
            ctl,
            peer,
            "tests are running on this server: change its interface when they end".into(),
        ));
    }
    let done = match wanted {
        // Restore: put the interface back and forget the record.
        None => {
            let taken = held.lock().unwrap_or_else(|p| p.into_inner()).take();
            taken.map_or(Ok(()), |mut h| h.restore())
        }
        Some(wanted) => set_sweep_iface(opts, held, iface, wanted),
    };
    if let Err(e) = done {
        return Err(refuse(ctl, peer, e.0));
    }
    let mut w = ctl;
    proto::write_msg(
        &mut w,
        &Msg::Configured {
            iface: iface.clone(),
        },
    )
    .map_err(|e| failed(format!("{peer}: {e}")))?;
    Ok(None)
}

/// Checks `wanted`, records `iface` at the first change, and sets it.
fn set_sweep_iface(
    opts: &ServerOpts,
    held: &Held,
    iface: &str,
    wanted: &crate::iface::Wanted,
) -> Result<(), crate::iface::IfaceError> {
    wanted.validate()?;
    let mut h = held.lock().unwrap_or_else(|p| p.into_inner());
    let h = match &mut *h {
        Some(h) => h,
        empty => {
            let (x, earlier) = crate::iface::hold(iface)?;
            if earlier && opts.verbose {
                eprintln!(
                    "ipoib-eval server: {iface}: restoring to the record an earlier run left"
                );
            }
            empty.insert(x)
        }
    };
    crate::iface::apply(h.saved(), wanted)
}

/// Asks the server at `host:port` to set its `--sweep-iface` as `wanted`
/// (waiting up to `timeout`: a driver may reset its link); returns the
/// interface's name.
pub fn configure_peer(
    host: &str,
    port: u16,
    wanted: &crate::iface::Wanted,
    timeout: Duration,
) -> Result<String, RunError> {
    ask_peer(
        host,
        port,
        &Msg::Configure {
            wanted: wanted.clone(),
        },
        timeout,
    )
}

/// Asks the server at `host:port` to put its `--sweep-iface` back as it
/// recorded it; returns the interface's name.
pub fn restore_peer(host: &str, port: u16, timeout: Duration) -> Result<String, RunError> {
    ask_peer(host, port, &Msg::Restore, timeout)
}

/// Sends `msg` (`Configure` or `Restore`) on a connection of its own and
/// waits for `Configured`.
fn ask_peer(host: &str, port: u16, msg: &Msg, timeout: Duration) -> Result<String, RunError> {
    let addr = resolve(host, port, None)?;
    let ctl: TcpStream = connect(addr, None, None, timeout)
        .map_err(|e| {
            failed(format!(
                "cannot reach the server at {addr}: {e} (is `ipoib-eval server -p {port} \
                 --sweep-iface IFACE` running there?)"
            ))
        })?
        .into();
    ctl.set_write_timeout(Some(timeout))
        .map_err(|e| failed(e.to_string()))?;
    let mut w = &ctl;
    proto::write_msg(&mut w, msg)
        .map_err(|e| failed(format!("sending {} to server {addr}: {e}", msg.name())))?;
    match proto::read_msg_within(&ctl, timeout) {
        Ok(Msg::Configured { iface }) => Ok(iface),
        Ok(Msg::Refused { reason }) => Err(failed(format!(
            "server {addr} did not set its interface: {reason}"
        ))),
        Ok(other) => Err(failed(format!(
            "server {addr} answered {} instead of Configured",
            other.name()
        ))),
        Err(e) => Err(failed(format!(
            "waiting for server {addr} to set its interface: {e}"
        ))),
    }
}

/// One test with one client (or a sweep's `Configure`).
fn session(
    opts: &ServerOpts,
    running: &AtomicUsize,
    held: &Held,
    ctl: TcpStream,
    from: SocketAddr,
) -> Result<Option<Report>, RunError> {
    let peer = format!("client {from}");
    ctl.set_write_timeout(Some(opts.handshake_timeout))
        .map_err(|e| failed(e.to_string()))?;
    ctl.set_nodelay(true).map_err(|e| failed(e.to_string()))?;
    let spec = match proto::read_msg_within(&ctl, opts.handshake_timeout) {
        Ok(Msg::Hello { spec, .. }) => spec,
        Ok(Msg::Configure { wanted }) => {
            return configure(opts, running, held, &ctl, &peer, Some(&wanted))
        }
        Ok(Msg::Restore) => return configure(opts, running, held, &ctl, &peer, None),
        Ok(other) => {
            return Err(failed(format!(
                "{peer} opened with {} instead of Hello",
                other.name()
            )))
        }
        Err(e) => return Err(failed(format!("{peer}: {e}"))),
    };
    if let Err(e) = spec.validate() {
        return Err(refuse(&ctl, &peer, e.0));
    }
    let local = unmap_addr(ctl.local_addr().map_err(|e| failed(e.to_string()))?);
    let to = spec.timeout();
    ctl.set_write_timeout(Some(to))
        .map_err(|e| failed(e.to_string()))?;
    let plan = spec.plan();
    let cookie = cookie();
    let dev = opts.dev.as_deref();
    // Open the data sockets before saying Ready.
    let mut udp = Vec::new();
    let mut listener = None;
    let mut ports = Vec::new();
    let setup = (|| -> io::Result<()> {
        match spec.proto {
            Proto::Tcp => {
                let l = Socket::new(family_of(local.ip()), Type::STREAM, Some(Protocol::TCP))?;
                if let Some(d) = dev {
                    l.bind_device(Some(d.as_bytes()))?;
                }
                l.bind(&SockAddr::from(with_port(local, 0)))?;
                l.listen(plan.len() as i32 + 8)?;
                ports.push(port_of(&l));
                listener = Some(l);
            }
            Proto::Udp => {
                for _ in &plan {
                    let s = udp_bound(local)?;
                    ports.push(port_of(&s));
                    udp.push(s);
                }
            }
        }
        Ok(())
    })();
    if let Err(e) = setup {
        return Err(refuse(&ctl, &peer, format!("opening data sockets: {e}")));
    }
    let mut w = &ctl;
    proto::write_msg(
        &mut w,
        &Msg::Ready {
            ports,
            cookie,
            server: host_info(),
        },
    )
    .map_err(|e| failed(format!("{peer}: {e}")))?;
    let client_ports = match proto::read_msg_within(&ctl, to) {
        Ok(Msg::Start { ports }) => ports,
        Ok(other) => {
            return Err(failed(format!(
                "{peer} sent {} instead of Start",
                other.name()
            )))
        }
        Err(e) => return Err(failed(format!("{peer}: waiting for Start: {e}"))),
    };
    let mut warnings = Vec::new();
    let mut socks: Vec<Option<Socket>> = (0..plan.len()).map(|_| None).collect();
    match spec.proto {
        Proto::Tcp => {
            let l = listener.take().ok_or_else(|| failed("no listener"))?;
            let deadline = Instant::now() + to;
            while socks.iter().any(Option::is_none) {
                let left = deadline.saturating_duration_since(Instant::now());
                if left.is_zero() {
                    return Err(failed(format!(
                        "{peer} did not open all {} data connections within {to:?}",
                        plan.len()
                    )));
                }
                l.set_read_timeout(Some(left))
                    .map_err(|e| failed(e.to_string()))?;
                let (s, _) = match l.accept() {
                    Ok(x) => x,
                    Err(e) if is_timeout(&e) || transient(&e) => continue,
                    Err(e) => {
                        return Err(failed(format!(
                            "accepting data connections from {peer}: {e}"
                        )))
                    }
                };
                // The greeting gets what is left of the deadline, no more.
                let left = deadline
                    .saturating_duration_since(Instant::now())
                    .max(Duration::from_millis(1));
                s.set_read_timeout(Some(left))
                    .map_err(|e| failed(e.to_string()))?;
                let mut hello = [0u8; TCP_HELLO];
                // A stranger or a wrong cookie is dropped; the deadline still runs.
                if (&s).read_exact(&mut hello).is_err()
                    || hello[..4] != proto::MAGIC
                    || hello[4..12] != cookie.to_le_bytes()
                {
                    continue;
                }
                let id = usize::from(u16::from_le_bytes([hello[12], hello[13]]));
                if let Some(slot @ None) = socks.get_mut(id) {
                    *slot = Some(s);
                }
            }
        }
        Proto::Udp => {
            if client_ports.len() != plan.len() {
                return Err(failed(format!(
                    "{peer} sent {} UDP ports for {} streams",
                    client_ports.len(),
                    plan.len()
                )));
            }
            for ((slot, s), port) in socks.iter_mut().zip(udp.drain(..)).zip(&client_ports) {
                let s = udp_connected(s, with_port(from, *port))
                    .map_err(|e| failed(format!("connecting UDP to {peer}: {e}")))?;
                *slot = Some(s);
            }
        }
    }
    let mut streams = Vec::new();
    for (p, s) in plan.iter().zip(socks) {
        let sock = s.ok_or_else(|| failed("missing data socket"))?;
        let role = role_of(p, false);
        streams.push(stream(*p, role, sock, None, &spec, dev, &mut warnings)?);
    }
    let ph = Phase {
        spec: Arc::new(spec.clone()),
        ctl: &ctl,
        peer: peer.clone(),
        cpus: &spec.server_cpus,
        print: false,
        local_addr: local.ip(),
        running: Some(running),
    };
    let handshake = || {
        let mut w = &ctl;
        proto::write_msg(&mut w, &Msg::Go).map_err(|e| failed(format!("sending Go to {peer}: {e}")))
    };
    let (mut mine, theirs) = data_phase(ph, streams, handshake)?;
    mine.warnings.extend(warnings);
    let report = Report::assemble(&spec, local.to_string(), theirs, mine);
    if opts.verbose {
        for t in &report.totals {
            // A closed stdout (a pipe whose reader left) must not end the server.
            let _ = writeln!(
                std::io::stdout().lock(),
                "{peer}: {} {}: {} received, {:.3} Gbit/s, {:.0} msgs/s, loss {:.3} %",
                spec.describe(),
                t.direction,
                t.received_msgs,
                t.gbit_s,
                t.msgs_per_s,
                t.loss * 100.0
            );
        }
    }
    Ok(Some(report))
}
