//! What one test is: protocol, message length, streams, direction, duration
//! and the send and receive paths. Pure data, validated before any socket is
//! opened; the client sends it to the server in the `Hello` message, so both
//! ends measure the same thing and the report can carry it verbatim.

use std::fmt;
use std::time::Duration;

use serde::{Deserialize, Serialize};

/// Bytes of the header at the start of every UDP message: magic, stream,
/// sequence number (see [`crate::wire`]).
pub const UDP_HEADER: usize = 16;
/// The largest UDP payload over IPv4 (65535 - 20 - 8); also used for IPv6.
pub const UDP_MAX_PAYLOAD: usize = 65_507;
/// The most segments one UDP GSO send may carry on every kernel with
/// `UDP_SEGMENT` (5.0+; 6.x raised it to 128, older ones refuse more than 64).
pub const GSO_MAX_SEGMENTS: u16 = 64;
/// Most streams in one test (each is a thread and a socket on both ends).
pub const MAX_STREAMS: u16 = 128;
/// Largest TCP message (`-l`): one application write.
pub const TCP_MAX_LEN: usize = 16 << 20;
/// Largest batch for `sendmmsg`/`recvmmsg` (the kernel's UIO_MAXIOV).
pub const MAX_BATCH: u16 = 1024;
/// Largest iovec count for scatter-gather sends.
pub const MAX_IOVECS: u16 = 1024;
/// Longest test, in seconds (a day).
pub const MAX_SECONDS: f64 = 86_400.0;
/// Most buffer memory one end may need for one test (send buffers, receive
/// slots and socket buffers of every stream): a server takes tests from
/// strangers, so a test is refused past this, not attempted.
pub const MAX_TEST_MEMORY: u64 = 1 << 30;
/// Highest CPU number a stream may be pinned to (the kernel's CPU_SETSIZE).
pub const MAX_CPU: usize = 1023;
/// Ring of zerocopy UDP buffers per stream (sends in flight at most).
pub const ZEROCOPY_RING: usize = 256;

/// Transport protocol of the data streams.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Proto {
    /// TCP byte streams; a message is one application write of `-l` bytes.
    Tcp,
    /// UDP datagrams; a message is one datagram as the receiving application sees it.
    Udp,
}

/// Who sends the data.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Direction {
    /// The client sends, the server receives (iperf3's default).
    Forward,
    /// The server sends (`-R`).
    Reverse,
    /// Both send, each on streams of their own (`--bidir`).
    Bidir,
}

/// How the sender hands messages to the kernel. A sweep point carries one by
/// value, and its `Display` form is what the CSV rows say.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "path", rename_all = "lowercase")]
pub enum SendPath {
    /// One `send(2)` per message from one linear buffer.
    Send,
    /// One `sendmsg(2)` per message with the payload in `iovecs` separate
    /// buffers (scatter-gather), against `Send`'s one linear buffer.
    Sg {
        /// Buffers per message.
        iovecs: u16,
    },
    /// `sendmmsg(2)`, `batch` datagrams per call (UDP).
    Mmsg {
        /// Datagrams per call.
        batch: u16,
    },
    /// UDP generic segmentation offload: one send carries `per_send`
    /// segments of `-l` bytes (`UDP_SEGMENT`), `batch` such sends per
    /// `sendmmsg(2)` call.
    Gso {
        /// Segments (messages) per send.
        per_send: u16,
        /// Sends per `sendmmsg` call (1: plain `sendmsg`).
        batch: u16,
    },
    /// `MSG_ZEROCOPY`: the kernel sends from our pages and reports when it
    /// is done with them on the error queue (or that it copied anyway).
    Zerocopy,
}

/// How the receiver takes messages from the kernel.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct RecvPath {
    /// Datagrams per `recvmmsg(2)` call (1: `recvmsg`). UDP only.
    pub batch: u16,
    /// `UDP_GRO` on the receiving socket: one read returns a train of
    /// segments of one size (each still counts as one message).
    pub gro: bool,
}

impl RecvPath {
    /// One `recv` per message, no GRO.
    pub const PLAIN: RecvPath = RecvPath {
        batch: 1,
        gro: false,
    };

    /// Bytes per receive slot for `len`-byte datagrams: a whole 64 KB train
    /// with GRO, else the datagram (at least 2 KB).
    pub fn slot(&self, len: usize) -> usize {
        if self.gro {
            65_536
        } else {
            len.clamp(2048, 65_536)
        }
    }
}

impl fmt::Display for SendPath {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            SendPath::Send => write!(f, "send"),
            SendPath::Sg { iovecs } => write!(f, "sg:{iovecs}"),
            SendPath::Mmsg { batch } => write!(f, "mmsg:{batch}"),
            SendPath::Gso { per_send, batch: 1 } => write!(f, "gso:{per_send}"),
            SendPath::Gso { per_send, batch } => write!(f, "gso:{per_send}:{batch}"),
            SendPath::Zerocopy => write!(f, "zerocopy"),
        }
    }
}

impl fmt::Display for RecvPath {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match (self.batch, self.gro) {
            (1, false) => write!(f, "recv"),
            (1, true) => write!(f, "gro"),
            (b, false) => write!(f, "mmsg:{b}"),
            (b, true) => write!(f, "gro:{b}"),
        }
    }
}

fn parse_count(what: &str, s: &str, max: u16) -> Result<u16, SpecError> {
    match s.parse::<u64>() {
        Ok(n) if n >= 1 && n <= u64::from(max) => Ok(n as u16),
        _ => Err(SpecError(format!(
            "{what} must be a whole number from 1 to {max}, got `{s}`"
        ))),
    }
}

impl std::str::FromStr for SendPath {
    type Err = SpecError;
    /// `send`, `sg:N`, `mmsg:B`, `gso:S` or `gso:S:B`, `zerocopy`.
    fn from_str(s: &str) -> Result<Self, SpecError> {
        let mut parts = s.split(':');
        let head = parts.next().unwrap_or("");
        let args: Vec<&str> = parts.collect();
        let path = match (head, args.as_slice()) {
            ("send", []) => SendPath::Send,
            ("sg", [n]) => SendPath::Sg {
                iovecs: parse_count("sg iovecs", n, MAX_IOVECS)?,
            },
            ("mmsg", [b]) => SendPath::Mmsg {
                batch: parse_count("mmsg batch", b, MAX_BATCH)?,
            },
            ("gso", [n]) => SendPath::Gso {
                per_send: parse_count("gso segments per send", n, GSO_MAX_SEGMENTS)?,
                batch: 1,
            },
            ("gso", [n, b]) => SendPath::Gso {
                per_send: parse_count("gso segments per send", n, GSO_MAX_SEGMENTS)?,
                batch: parse_count("gso sends per sendmmsg", b, MAX_BATCH)?,
            },
            ("zerocopy", []) => SendPath::Zerocopy,
            _ => {
                return Err(SpecError(format!(
                    "unknown send path `{s}`: use send, sg:IOVECS, mmsg:BATCH, \
                     gso:SEGMENTS[:BATCH] or zerocopy"
                )))
            }
        };
        Ok(path)
    }
}

impl std::str::FromStr for RecvPath {
    type Err = SpecError;
    /// `recv`, `mmsg:B`, `gro` or `gro:B`.
    fn from_str(s: &str) -> Result<Self, SpecError> {
        let mut parts = s.split(':');
        let head = parts.next().unwrap_or("");
        let args: Vec<&str> = parts.collect();
        let batch = |b: &str| parse_count("receive batch", b, MAX_BATCH);
        Ok(match (head, args.as_slice()) {
            ("recv", []) => RecvPath::PLAIN,
            ("mmsg", [b]) => RecvPath {
                batch: batch(b)?,
                gro: false,
            },
            ("gro", []) => RecvPath {
                batch: 1,
                gro: true,
            },
            ("gro", [b]) => RecvPath {
                batch: batch(b)?,
                gro: true,
            },
            _ => {
                return Err(SpecError(format!(
                    "unknown receive path `{s}`: use recv, mmsg:BATCH, gro or gro:BATCH"
                )))
            }
        })
    }
}

/// A setting that cannot work, said in one line with the fix.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct SpecError(pub String);

/// How long the data flows.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Amount {
    /// For this many seconds (`-t`).
    Seconds(f64),
    /// Until each stream sent this many messages (`-k`).
    Messages(u64),
}

/// One test, as both ends run it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct TestSpec {
    /// TCP or UDP.
    pub proto: Proto,
    /// Message length in bytes (`-l`).
    pub len: usize,
    /// Parallel streams per direction (`-P`).
    pub streams: u16,
    /// Who sends.
    pub direction: Direction,
    /// How long.
    pub amount: Amount,
    /// Target rate per stream in bits per second; 0 means as fast as possible (`-b`).
    pub rate_bps: f64,
    /// Send path of the sending end.
    pub send: SendPath,
    /// Receive path of the receiving end.
    pub recv: RecvPath,
    /// Socket buffer size to ask for on both ends (`-w`), bytes.
    pub window: Option<usize>,
    /// `TCP_NODELAY` on TCP streams.
    pub nodelay: bool,
    /// TCP request/response (`--rr`): `-l` bytes each way, one in flight.
    pub rr: bool,
    /// Interval between reports in seconds; 0 for none (`-i`).
    pub interval: f64,
    /// CPUs the server's stream threads are pinned to, round-robin.
    pub server_cpus: Vec<usize>,
    /// Seconds any one wait on the peer may take.
    pub timeout: f64,
}

impl Default for TestSpec {
    fn default() -> Self {
        TestSpec {
            proto: Proto::Tcp,
            len: 128 * 1024,
            streams: 1,
            direction: Direction::Forward,
            amount: Amount::Seconds(10.0),
            rate_bps: 0.0,
            send: SendPath::Send,
            recv: RecvPath::PLAIN,
            window: None,
            nodelay: false,
            rr: false,
            interval: 1.0,
            server_cpus: Vec::new(),
            timeout: 10.0,
        }
    }
}

fn err<T>(msg: impl Into<String>) -> Result<T, SpecError> {
    Err(SpecError(msg.into()))
}

impl TestSpec {
    /// Checks every setting and every combination; the message names the
    /// flag and the fix. Called on both ends (the server does not trust the
    /// client's checks).
    pub fn validate(&self) -> Result<(), SpecError> {
        if self.streams == 0 || self.streams > MAX_STREAMS {
            return err(format!(
                "-P must be 1 to {MAX_STREAMS} streams, got {}",
                self.streams
            ));
        }
        match self.amount {
            Amount::Seconds(s) if !(s.is_finite() && s > 0.0 && s <= MAX_SECONDS) => {
                return err(format!(
                    "-t must be more than 0 and at most {MAX_SECONDS} seconds, got {s}"
                ))
            }
            Amount::Messages(0) => return err("-k must be at least 1 message"),
            _ => {}
        }
        if !(self.rate_bps.is_finite() && self.rate_bps >= 0.0 && self.rate_bps <= 1e15) {
            return err(format!(
                "-b must be 0 (unlimited) or a rate up to 1P bit/s, got {}",
                self.rate_bps
            ));
        }
        if !(self.interval.is_finite() && self.interval >= 0.0 && self.interval <= MAX_SECONDS)
            || (self.interval > 0.0 && self.interval < 0.01)
        {
            return err(format!(
                "-i must be 0 (no interval reports) or 0.01 to {MAX_SECONDS} seconds, got {}",
                self.interval
            ));
        }
        if !(self.timeout.is_finite() && self.timeout >= 0.1 && self.timeout <= 3600.0) {
            return err(format!(
                "--timeout must be 0.1 to 3600 seconds, got {}",
                self.timeout
            ));
        }
        if let Some(w) = self.window {
            if w == 0 || w > (1 << 30) {
                return err(format!("-w must be 1 B to 1 GiB, got {w} B"));
            }
        }
        if self.server_cpus.len() > MAX_CPU + 1 || self.server_cpus.iter().any(|c| *c > MAX_CPU) {
            return err(format!(
                "--server-cpus takes up to {} CPUs numbered 0 to {MAX_CPU}",
                MAX_CPU + 1
            ));
        }
        match self.proto {
            Proto::Tcp => self.validate_tcp()?,
            Proto::Udp => self.validate_udp()?,
        }
        let need = self.buffer_bytes();
        if need > MAX_TEST_MEMORY {
            return err(format!(
                "this test needs {} MiB of buffers on one end ({} streams), over the {} MiB \
                 limit per test: use fewer streams (-P), smaller batches, a shorter -l or a smaller -w",
                need >> 20,
                self.plan().len(),
                MAX_TEST_MEMORY >> 20
            ));
        }
        Ok(())
    }

    /// Bytes of buffers one end may need at most: each stream's send buffers
    /// or receive slots (an end both sends and receives with `--bidir`) and
    /// its socket buffer (`-w`, which the kernel doubles). Saturates rather
    /// than overflows.
    pub fn buffer_bytes(&self) -> u64 {
        let len = self.len as u64;
        let send = match (self.send, self.proto) {
            (SendPath::Mmsg { batch }, _) => len.saturating_mul(batch.into()),
            (SendPath::Gso { per_send, batch }, _) => {
                len.saturating_mul(u64::from(per_send) * u64::from(batch))
            }
            (SendPath::Zerocopy, Proto::Udp) => len.saturating_mul(ZEROCOPY_RING as u64),
            _ => len,
        };
        let recv = match self.proto {
            Proto::Tcp => len.min(4 << 20),
            Proto::Udp => {
                u64::from(self.recv.batch).saturating_mul(self.recv.slot(self.len) as u64)
            }
        };
        let sock = self.window.map_or(0, |w| 2 * w as u64);
        let per_stream = send.max(recv).saturating_add(sock);
        per_stream.saturating_mul(self.plan().len() as u64)
    }

    /// Time bound and message bound of a stream from the amount: the
    /// deadline (if timed) and the message count (`u64::MAX` if timed).
    pub fn bounds(&self, start: std::time::Instant) -> (Option<std::time::Instant>, u64) {
        match self.amount {
            Amount::Seconds(t) => (Some(start + Duration::from_secs_f64(t)), u64::MAX),
            Amount::Messages(n) => (None, n),
        }
    }

    /// Messages a receiver counted: UDP datagrams (segments), or TCP bytes / `-l`.
    pub fn msgs_of(&self, udp_received: u64, bytes: u64) -> u64 {
        match self.proto {
            Proto::Udp => udp_received,
            Proto::Tcp => bytes / self.len as u64,
        }
    }

    fn validate_tcp(&self) -> Result<(), SpecError> {
        if self.len == 0 || self.len > TCP_MAX_LEN {
            return err(format!(
                "-l must be 1 B to {TCP_MAX_LEN} B for TCP, got {}",
                self.len
            ));
        }
        match self.send {
            SendPath::Send | SendPath::Zerocopy => {}
            SendPath::Sg { iovecs } if usize::from(iovecs) <= self.len => {}
            SendPath::Sg { iovecs } => {
                return err(format!(
                    "sg:{iovecs} splits a {} B message into more buffers than bytes: \
                     use at most sg:{}",
                    self.len,
                    self.len.min(usize::from(MAX_IOVECS))
                ))
            }
            SendPath::Mmsg { .. } | SendPath::Gso { .. } => {
                return err(format!(
                    "send path {} is for UDP: add -u, or use send, sg:N or zerocopy with TCP",
                    self.send
                ))
            }
        }
        if self.recv != RecvPath::PLAIN {
            return err(format!(
                "receive path {} is for UDP: TCP streams are read with recv",
                self.recv
            ));
        }
        if self.rr && self.direction != Direction::Forward {
            return err("--rr measures request/response from the client: drop -R/--bidir");
        }
        if self.rr && self.send != SendPath::Send {
            return err("--rr sends with send(2): drop --send");
        }
        Ok(())
    }

    fn validate_udp(&self) -> Result<(), SpecError> {
        if self.rr {
            return err("--rr is TCP request/response: drop -u");
        }
        if self.len < UDP_HEADER || self.len > UDP_MAX_PAYLOAD {
            return err(format!(
                "-l must be {UDP_HEADER} to {UDP_MAX_PAYLOAD} B for UDP (each datagram \
                 carries a {UDP_HEADER} B sequence header), got {}",
                self.len
            ));
        }
        match self.send {
            // The first buffer holds the whole header; every other at least a byte.
            SendPath::Sg { iovecs } if usize::from(iovecs) > self.len - UDP_HEADER + 1 => {
                return err(format!(
                    "sg:{iovecs} is too many buffers for a {} B datagram (the first holds the \
                     {UDP_HEADER} B header): use at most sg:{}",
                    self.len,
                    (self.len - UDP_HEADER + 1).min(usize::from(MAX_IOVECS))
                ))
            }
            SendPath::Gso { per_send, .. } => {
                let total = self.len.checked_mul(usize::from(per_send));
                if total.is_none_or(|t| t > UDP_MAX_PAYLOAD) {
                    return err(format!(
                        "gso:{per_send} with -l {} makes {} B per send, over the \
                         {UDP_MAX_PAYLOAD} B a UDP send may carry: use at most gso:{}",
                        self.len,
                        total.map_or("too many".into(), |t| t.to_string()),
                        (UDP_MAX_PAYLOAD / self.len).min(usize::from(GSO_MAX_SEGMENTS))
                    ));
                }
            }
            _ => {}
        }
        Ok(())
    }

    /// Streams that carry data, with who sends on each: `P` forward, `P`
    /// reverse or `2P` for both (forward first).
    pub fn plan(&self) -> Vec<StreamPlan> {
        let p = self.streams;
        let (fwd, rev) = match self.direction {
            Direction::Forward => (p, 0),
            Direction::Reverse => (0, p),
            Direction::Bidir => (p, p),
        };
        (0..fwd)
            .map(|i| StreamPlan {
                id: i,
                client_sends: true,
            })
            .chain((0..rev).map(|i| StreamPlan {
                id: fwd + i,
                client_sends: false,
            }))
            .collect()
    }

    /// Seconds of the test, if it is bounded by time.
    pub fn seconds(&self) -> Option<f64> {
        match self.amount {
            Amount::Seconds(s) => Some(s),
            Amount::Messages(_) => None,
        }
    }

    /// The per-wait timeout.
    pub fn timeout(&self) -> Duration {
        Duration::from_secs_f64(self.timeout)
    }

    /// How long, at most, a test may take before the control connection
    /// gives up on the peer: its duration plus the timeout (and, for a
    /// count, the time the count takes at 1 kB/s... bounded by a day).
    pub fn control_deadline(&self) -> Duration {
        let run = self.seconds().unwrap_or(MAX_SECONDS);
        Duration::from_secs_f64(run + 2.0 * self.timeout + 5.0)
    }

    /// A short description: `udp 1472 B, send gso:16, recv gro, 4 streams`.
    pub fn describe(&self) -> String {
        let dir = match self.direction {
            Direction::Forward => "",
            Direction::Reverse => ", reverse",
            Direction::Bidir => ", bidirectional",
        };
        let amount = match self.amount {
            Amount::Seconds(s) => format!("{s} s"),
            Amount::Messages(n) => format!("{n} messages per stream"),
        };
        let rate = if self.rate_bps > 0.0 {
            format!(", {} per stream", crate::stats::fmt_bits(self.rate_bps))
        } else {
            String::new()
        };
        let proto = match self.proto {
            Proto::Tcp if self.rr => "tcp request/response",
            Proto::Tcp => "tcp",
            Proto::Udp => "udp",
        };
        format!(
            "{proto} {} B, send {}, recv {}, {} stream{}{dir}, {amount}{rate}{}",
            self.len,
            self.send,
            self.recv,
            self.streams,
            if self.streams == 1 { "" } else { "s" },
            if self.nodelay { ", nodelay" } else { "" },
        )
    }
}

/// One data stream of a test.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct StreamPlan {
    /// Index, shared by both ends.
    pub id: u16,
    /// Whether the client is the sender.
    pub client_sends: bool,
}

impl StreamPlan {
    /// Whether the client end (`client`) or the server end sends here.
    pub fn sends_here(&self, client: bool) -> bool {
        self.client_sends == client
    }
}

/// Parses a rate as iperf3 does: bits per second with an optional k, M, G or
/// T suffix (powers of 1000); `0` is unlimited.
pub fn parse_rate(s: &str) -> Result<f64, SpecError> {
    let t = s.trim();
    let (num, mult) = match t.char_indices().last() {
        Some((i, c)) if c.is_ascii_alphabetic() => {
            let m = match c.to_ascii_lowercase() {
                'k' => 1e3,
                'm' => 1e6,
                'g' => 1e9,
                't' => 1e12,
                _ => {
                    return err(format!(
                        "-b `{s}`: unknown suffix `{c}`; use k, M, G or T (bits per second)"
                    ))
                }
            };
            (&t[..i], m)
        }
        _ => (t, 1.0),
    };
    match num.parse::<f64>() {
        Ok(v) if v.is_finite() && v >= 0.0 && v * mult <= 1e15 => Ok(v * mult),
        _ => err(format!(
            "-b must be 0 (unlimited) or a rate such as 500M or 10G, at most 1000T; got `{s}`"
        )),
    }
}

/// Parses a byte size with an optional K, M or G suffix (powers of 1024),
/// for flag `flag`.
pub fn parse_bytes(flag: &str, s: &str) -> Result<usize, SpecError> {
    let t = s.trim();
    let (num, mult) = match t.chars().last().map(|c| c.to_ascii_lowercase()) {
        Some('k') => (&t[..t.len() - 1], 1usize << 10),
        Some('m') => (&t[..t.len() - 1], 1 << 20),
        Some('g') => (&t[..t.len() - 1], 1 << 30),
        _ => (t, 1),
    };
    num.parse::<usize>()
        .ok()
        .and_then(|n| n.checked_mul(mult))
        .ok_or_else(|| {
            SpecError(format!(
                "{flag} takes a byte count such as 1472, 128K or 4M; got `{s}`"
            ))
        })
}

/// Parses a CPU list such as `0,2,4-7` given to flag `flag`.
pub fn parse_cpus(flag: &str, s: &str) -> Result<Vec<usize>, SpecError> {
    let bad = || {
        SpecError(format!(
            "{flag} takes CPU numbers 0 to {MAX_CPU} and ranges such as 0,2-3; got `{s}`"
        ))
    };
    let mut out = Vec::new();
    for part in s.split(',') {
        let (a, b) = match part.split_once('-') {
            Some((a, b)) => (a, b),
            None => (part, part),
        };
        let a: usize = a.trim().parse().map_err(|_| bad())?;
        let b: usize = b.trim().parse().map_err(|_| bad())?;
        if a > b || b > MAX_CPU {
            return Err(bad());
        }
        out.extend(a..=b);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_parse_and_print_the_same() {
        for s in ["send", "sg:4", "mmsg:32", "gso:40", "gso:40:8", "zerocopy"] {
            let p: SendPath = s.parse().unwrap();
            assert_eq!(p.to_string(), s);
        }
        for s in ["recv", "mmsg:64", "gro", "gro:16"] {
            let p: RecvPath = s.parse().unwrap();
            assert_eq!(p.to_string(), s);
        }
        for bad in [
            "",
            "gso",
            "gso:0",
            "gso:65",
            "sg:x",
            "mmsg:1025",
            "send:1",
            "x",
        ] {
            assert!(bad.parse::<SendPath>().is_err(), "{bad}");
        }
        assert!("gro:0".parse::<RecvPath>().is_err());
    }

    #[test]
    fn rates_parse_like_iperf3() {
        assert_eq!(parse_rate("0").unwrap(), 0.0);
        assert_eq!(parse_rate("10G").unwrap(), 10e9);
        assert_eq!(parse_rate("500m").unwrap(), 500e6);
        assert_eq!(parse_rate("1.5k").unwrap(), 1500.0);
        for bad in [
            "",
            "-1",
            "1e300",
            "NaN",
            "inf",
            "10X",
            "G",
            "18446744073709551615T",
        ] {
            assert!(parse_rate(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn cpus_parse() {
        assert_eq!(parse_cpus("--cpus", "0,2-4").unwrap(), vec![0, 2, 3, 4]);
        for bad in ["", "a", "3-1", "1-", "99999", "1024"] {
            assert!(
                parse_cpus("--x", bad).unwrap_err().0.contains("--x"),
                "{bad}"
            );
        }
        assert_eq!(parse_bytes("-w", "4M").unwrap(), 4 << 20);
        for bad in ["", "K", "-1", "18446744073709551615K", "1.5M"] {
            assert!(parse_bytes("-w", bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn bounds_are_refused_with_the_flag_named() {
        let base = TestSpec::default();
        let cases: Vec<(TestSpec, &str)> = vec![
            (
                TestSpec {
                    streams: 0,
                    ..base.clone()
                },
                "-P",
            ),
            (
                TestSpec {
                    len: 0,
                    ..base.clone()
                },
                "-l",
            ),
            (
                TestSpec {
                    amount: Amount::Seconds(1e300),
                    ..base.clone()
                },
                "-t",
            ),
            (
                TestSpec {
                    amount: Amount::Seconds(0.0),
                    ..base.clone()
                },
                "-t",
            ),
            (
                TestSpec {
                    amount: Amount::Messages(0),
                    ..base.clone()
                },
                "-k",
            ),
            (
                TestSpec {
                    rate_bps: f64::NAN,
                    ..base.clone()
                },
                "-b",
            ),
            (
                TestSpec {
                    interval: 0.001,
                    ..base.clone()
                },
                "-i",
            ),
            (
                TestSpec {
                    window: Some(0),
                    ..base.clone()
                },
                "-w",
            ),
            (
                TestSpec {
                    send: SendPath::Mmsg { batch: 8 },
                    ..base.clone()
                },
                "UDP",
            ),
            (
                TestSpec {
                    proto: Proto::Udp,
                    len: 8,
                    ..base.clone()
                },
                "-l",
            ),
            (
                TestSpec {
                    proto: Proto::Udp,
                    len: 1472,
                    send: SendPath::Gso {
                        per_send: 64,
                        batch: 1,
                    },
                    ..base.clone()
                },
                "gso:44",
            ),
            (
                TestSpec {
                    rr: true,
                    direction: Direction::Reverse,
                    ..base.clone()
                },
                "--rr",
            ),
        ];
        for (spec, needle) in cases {
            let e = spec.validate().unwrap_err().0;
            assert!(e.contains(needle), "{e:?} should name {needle}");
        }
        assert!(base.validate().is_ok());
    }

    #[test]
    fn plan_puts_forward_streams_first() {
        let s = TestSpec {
            streams: 2,
            direction: Direction::Bidir,
            ..TestSpec::default()
        };
        let p = s.plan();
        assert_eq!(p.len(), 4);
        assert!(p[0].client_sends && p[1].client_sends);
        assert!(!p[2].client_sends && !p[3].client_sends);
        assert_eq!(p[3].id, 3);
    }
}
