//! The loops a stream thread runs: a sender, a receiver, and the two ends
//! of TCP request/response. Each arms itself at the gate, runs until its
//! deadline, count, EOF or an abort, and returns its side of the stream.

use std::io::{self, Read, Write};
use std::net::SocketAddr;
use std::os::fd::AsFd;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use socket2::Socket;

use super::gate::{Gate, Live};
use crate::recv::Receiver;
use crate::report::{BufSize, Latency, Role, StreamSide};
use crate::send;
use crate::spec::{Proto, StreamPlan, TestSpec};
use crate::stats::cpu::thread_times;
use crate::stats::SeqTracker;
use crate::sys;

/// How often a blocked UDP receiver wakes to check its stop conditions.
const UDP_POLL: Duration = Duration::from_millis(100);
/// How long a blocked send waits before the stream loop checks its
/// deadline, abort flag and stall time (a stall ends at the spec's timeout).
const SEND_POLL: Duration = Duration::from_millis(200);

/// One stream as this end runs it.
pub(super) struct Stream {
    pub(super) plan: StreamPlan,
    pub(super) role: Role,
    pub(super) sock: Socket,
    /// Where an unconnected UDP socket sends to (`None`: connected).
    pub(super) dest: Option<SocketAddr>,
    pub(super) buffer: Option<BufSize>,
}

pub(super) struct Ctx {
    pub(super) spec: Arc<TestSpec>,
    pub(super) stream: Stream,
    pub(super) live: Arc<Live>,
    pub(super) gate: Arc<Gate>,
    pub(super) cpu: Option<usize>,
    pub(super) peer: String,
    pub(super) warnings: Arc<Mutex<Vec<String>>>,
    /// Request/response: every client stream's latencies, merged.
    pub(super) rr_hist: Arc<Mutex<Histogram>>,
}

/// Latency histogram: 1 ns to 1 hour, 3 significant digits; fixed memory,
/// no allocation per sample.
type Histogram = hdrhistogram::Histogram<u64>;

pub(super) fn new_histogram() -> Histogram {
    // Valid bounds (low >= 1, high >= 2 * low, 3 digits): cannot fail.
    Histogram::new_with_bounds(1, 3_600_000_000_000, 3).expect("valid histogram bounds")
}

/// Latency figures of a histogram of nanoseconds.
pub(super) fn latency_of(h: &Histogram) -> Option<Latency> {
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

pub(super) fn is_timeout(e: &io::Error) -> bool {
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

pub(super) fn run_stream(cx: Ctx) -> Result<StreamSide, String> {
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

/// The role this end has on a stream.
pub(super) fn role_of(p: &StreamPlan, client: bool) -> Role {
    if p.sends_here(client) {
        Role::Sender
    } else {
        Role::Receiver
    }
}
