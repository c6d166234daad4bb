//! The control connection: a TCP stream of framed messages between client
//! and server, like iperf3's, but with a version and a length bound in every
//! frame so that a stranger on the port cannot make the server allocate or
//! wait without limit.
//!
//! A frame is a 12-byte header and a JSON body:
//!
//! ```text
//! 0      4        6      7      8             12
//! | IPEV | version | kind | zero | body length | body (JSON) ...
//! ```
//! All integers little-endian. The decoder is pure and never panics on any
//! input (property-tested); the readers put a deadline on every read.
//!
//! A test runs: client `Hello` → server `Ready` (or `Refused`) → client
//! connects its data sockets and sends `Start` → server `Go` → data flows →
//! each end sends `Sent` when its senders stop → client `Report` → server
//! `Report`. A sweep on a real interface first opens a connection of its
//! own: `Configure` → `Configured` (or `Refused`), and at its end
//! `Restore` → `Configured`.

use std::io::{self, Read, Write};

use serde::{Deserialize, Serialize};

use crate::report::{HostInfo, SideReport};
use crate::spec::TestSpec;

/// First four bytes of every frame.
pub const MAGIC: [u8; 4] = *b"IPEV";
/// Protocol version; both ends must speak the same one.
pub const VERSION: u16 = 2;
/// Bytes of a frame header.
pub const HEADER_LEN: usize = 12;
/// Largest body accepted (a report with many interval samples fits).
pub const MAX_BODY: u32 = 16 << 20;
/// Largest body of any message but a report: a stranger's `Hello` is
/// refused before the server reads much of it.
pub const MAX_SMALL_BODY: u32 = 64 << 10;

/// Every control message.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Msg {
    /// Client → server: the test to run.
    Hello {
        /// The test.
        spec: TestSpec,
        /// The client.
        client: HostInfo,
    },
    /// Server → client: data sockets are open.
    Ready {
        /// UDP: one server port per stream. TCP: the one listening port.
        ports: Vec<u16>,
        /// Sent first on every TCP data connection, so the server can tell
        /// its streams from a stranger's connection.
        cookie: u64,
        /// The server.
        server: HostInfo,
    },
    /// Server → client: the test cannot run; why, and the fix.
    Refused {
        /// One line.
        reason: String,
    },
    /// Client → server: data sockets are connected.
    Start {
        /// UDP: the client's port for each stream (empty for TCP).
        ports: Vec<u16>,
    },
    /// Server → client: start now.
    Go,
    /// Either way: this end's senders stopped after sending these many
    /// messages (by stream id; only streams this end sends on).
    Sent {
        /// (stream id, messages).
        streams: Vec<(u16, u64)>,
    },
    /// Either way: everything this end measured.
    Report(Box<SideReport>),
    /// Either way: this end failed; the test is over.
    Error {
        /// One line.
        message: String,
    },
    /// Client → server, instead of `Hello` (a sweep on a real interface):
    /// set your interface so. Only a server started with `--sweep-iface`
    /// does; it records the settings first and restores them when it ends.
    Configure {
        /// The point's settings.
        wanted: crate::iface::Wanted,
    },
    /// Server → client: the interface is set and up (or restored).
    Configured {
        /// Its name.
        iface: String,
    },
    /// Client → server, at the end of a sweep on a real interface: put
    /// your interface back as recorded.
    Restore,
}

/// Kind byte of [`Msg::Report`], the one large message.
const REPORT_KIND: u8 = 7;

impl Msg {
    fn kind(&self) -> u8 {
        match self {
            Msg::Hello { .. } => 1,
            Msg::Ready { .. } => 2,
            Msg::Refused { .. } => 3,
            Msg::Start { .. } => 4,
            Msg::Go => 5,
            Msg::Sent { .. } => 6,
            Msg::Report(_) => REPORT_KIND,
            Msg::Error { .. } => 8,
            Msg::Configure { .. } => 9,
            Msg::Configured { .. } => 10,
            Msg::Restore => 11,
        }
    }

    /// The message's name, for errors.
    pub fn name(&self) -> &'static str {
        match self {
            Msg::Hello { .. } => "Hello",
            Msg::Ready { .. } => "Ready",
            Msg::Refused { .. } => "Refused",
            Msg::Start { .. } => "Start",
            Msg::Go => "Go",
            Msg::Sent { .. } => "Sent",
            Msg::Report(_) => "Report",
            Msg::Error { .. } => "Error",
            Msg::Configure { .. } => "Configure",
            Msg::Configured { .. } => "Configured",
            Msg::Restore => "Restore",
        }
    }
}

/// Why bytes are not a message.
#[derive(Debug, thiserror::Error)]
pub enum ProtoError {
    /// Not ipoib-eval's protocol.
    #[error("not an ipoib-eval control connection (bad magic {0:02x?})")]
    Magic([u8; 4]),
    /// Another version.
    #[error("protocol version {0}, this end speaks {VERSION}: run the same ipoib-eval version on both ends")]
    Version(u16),
    /// Too long.
    #[error("control message of {0} B declared, over the limit for its kind")]
    TooLong(u32),
    /// Body is not the message its kind says.
    #[error("malformed control message (kind {kind}): {why}")]
    Body {
        /// Kind byte.
        kind: u8,
        /// What the JSON decoder said.
        why: String,
    },
    /// The socket failed or timed out.
    #[error("{0}")]
    Io(#[from] io::Error),
}

/// A decoded frame header.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Header {
    /// Message kind.
    pub kind: u8,
    /// Body length.
    pub len: u32,
}

/// Checks a frame header. Pure.
pub fn decode_header(h: &[u8; HEADER_LEN]) -> Result<Header, ProtoError> {
    let magic = [h[0], h[1], h[2], h[3]];
    if magic != MAGIC {
        return Err(ProtoError::Magic(magic));
    }
    let version = u16::from_le_bytes([h[4], h[5]]);
    if version != VERSION {
        return Err(ProtoError::Version(version));
    }
    let len = u32::from_le_bytes([h[8], h[9], h[10], h[11]]);
    let kind = h[6];
    let max = if kind == REPORT_KIND {
        MAX_BODY
    } else {
        MAX_SMALL_BODY
    };
    if len > max {
        return Err(ProtoError::TooLong(len));
    }
    Ok(Header { kind, len })
}

/// Decodes a body of the kind its header named. Pure.
pub fn decode_body(kind: u8, body: &[u8]) -> Result<Msg, ProtoError> {
    let msg: Msg = serde_json::from_slice(body).map_err(|e| ProtoError::Body {
        kind,
        why: e.to_string(),
    })?;
    if msg.kind() != kind {
        return Err(ProtoError::Body {
            kind,
            why: format!("body is a {} message", msg.name()),
        });
    }
    Ok(msg)
}

/// Decodes one whole frame from the front of `buf`: the message and the
/// bytes it took, or `None` if more bytes are needed. Pure.
pub fn decode(buf: &[u8]) -> Result<Option<(Msg, usize)>, ProtoError> {
    let Some(h) = buf.first_chunk::<HEADER_LEN>() else {
        return Ok(None);
    };
    let header = decode_header(h)?;
    let end = HEADER_LEN + header.len as usize;
    match buf.get(HEADER_LEN..end) {
        Some(body) => Ok(Some((decode_body(header.kind, body)?, end))),
        None => Ok(None),
    }
}

/// Encodes one frame.
pub fn encode(msg: &Msg) -> Vec<u8> {
    // Serialising our own types to JSON cannot fail (no maps with non-string
    // keys, no failing Serialize impls).
    let body = serde_json::to_vec(msg).expect("control messages serialise");
    let mut out = Vec::with_capacity(HEADER_LEN + body.len());
    out.extend_from_slice(&MAGIC);
    out.extend_from_slice(&VERSION.to_le_bytes());
    out.push(msg.kind());
    out.push(0);
    out.extend_from_slice(&(body.len() as u32).to_le_bytes());
    out.extend_from_slice(&body);
    out
}

/// Reads from a TCP stream with one deadline for a whole message, however
/// the peer trickles its bytes (a read timeout alone restarts per read).
#[derive(Debug)]
pub struct Deadline<'a> {
    stream: &'a std::net::TcpStream,
    until: std::time::Instant,
    after: std::time::Duration,
}

impl<'a> Deadline<'a> {
    /// Reads on `stream` must all be done within `after` from now.
    pub fn new(stream: &'a std::net::TcpStream, after: std::time::Duration) -> Self {
        Deadline {
            stream,
            until: std::time::Instant::now() + after,
            after,
        }
    }
}

impl Read for Deadline<'_> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let timed_out = || {
            io::Error::new(
                io::ErrorKind::TimedOut,
                format!("timed out after {:?}", self.after),
            )
        };
        let left = self
            .until
            .saturating_duration_since(std::time::Instant::now());
        if left.is_zero() {
            return Err(timed_out());
        }
        self.stream.set_read_timeout(Some(left))?;
        let mut s = self.stream;
        match s.read(buf) {
            Err(e)
                if matches!(
                    e.kind(),
                    io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
                ) =>
            {
                Err(timed_out())
            }
            r => r,
        }
    }
}

/// Reads one message from `stream` within `after`.
pub fn read_msg_within(
    stream: &std::net::TcpStream,
    after: std::time::Duration,
) -> Result<Msg, ProtoError> {
    read_msg(&mut Deadline::new(stream, after))
}

/// Writes one message.
pub fn write_msg(w: &mut impl Write, msg: &Msg) -> io::Result<()> {
    w.write_all(&encode(msg))?;
    w.flush()
}

/// Reads one message; the caller sets the socket's read timeout. The body
/// is read in pieces so that a declared length costs memory only as its
/// bytes arrive.
pub fn read_msg(r: &mut impl Read) -> Result<Msg, ProtoError> {
    let mut h = [0u8; HEADER_LEN];
    r.read_exact(&mut h)?;
    let header = decode_header(&h)?;
    let mut body = Vec::new();
    let got = r.take(u64::from(header.len)).read_to_end(&mut body)?;
    if got < header.len as usize {
        return Err(ProtoError::Io(io::Error::new(
            io::ErrorKind::UnexpectedEof,
            format!(
                "control connection closed {got} B into a {} B message",
                header.len
            ),
        )));
    }
    decode_body(header.kind, &body)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn samples() -> Vec<Msg> {
        vec![
            Msg::Hello {
                spec: TestSpec::default(),
                client: HostInfo::default(),
            },
            Msg::Ready {
                ports: vec![1, 65535],
                cookie: u64::MAX,
                server: HostInfo::default(),
            },
            Msg::Refused { reason: "x".into() },
            Msg::Start { ports: vec![] },
            Msg::Go,
            Msg::Sent {
                streams: vec![(0, 5), (3, u64::MAX)],
            },
            Msg::Report(Box::default()),
            Msg::Error {
                message: "é\n".into(),
            },
        ]
    }

    #[test]
    fn every_message_round_trips() {
        for m in samples() {
            let bytes = encode(&m);
            let (back, used) = decode(&bytes).unwrap().unwrap();
            assert_eq!(back, m);
            assert_eq!(used, bytes.len());
            // Every strict prefix asks for more bytes, never errs or panics.
            for cut in 0..bytes.len() {
                assert!(decode(&bytes[..cut]).unwrap().is_none(), "{cut}");
            }
            assert!(read_msg(&mut &bytes[..]).is_ok());
        }
    }

    #[test]
    fn strangers_are_refused_by_name() {
        let mut b = encode(&Msg::Go);
        b[0] = b'G';
        assert!(matches!(decode(&b), Err(ProtoError::Magic(_))));
        let mut b = encode(&Msg::Go);
        b[4] = 9;
        let e = decode(&b).unwrap_err();
        assert!(e.to_string().contains("same ipoib-eval version"), "{e}");
        let mut b = encode(&Msg::Go);
        b[8..12].copy_from_slice(&u32::MAX.to_le_bytes());
        assert!(matches!(decode(&b), Err(ProtoError::TooLong(u32::MAX))));
        // Only a report may be large.
        let mut b = encode(&Msg::Go);
        b[6] = 1;
        b[8..12].copy_from_slice(&(MAX_SMALL_BODY + 1).to_le_bytes());
        assert!(matches!(decode(&b), Err(ProtoError::TooLong(_))));
        let mut b = encode(&Msg::Go);
        b[6] = 1; // says Hello, carries Go
        assert!(matches!(decode(&b), Err(ProtoError::Body { kind: 1, .. })));
    }

    #[test]
    fn a_declared_length_with_no_bytes_behind_it_is_an_error_not_an_allocation() {
        let mut b = encode(&Msg::Report(Box::default()));
        b.truncate(HEADER_LEN);
        b[8..12].copy_from_slice(&MAX_BODY.to_le_bytes());
        let e = read_msg(&mut &b[..]).unwrap_err();
        assert!(e.to_string().contains("closed 0 B into"), "{e}");
    }

    proptest! {
        #[test]
        fn decode_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..256)) {
            let _ = decode(&bytes);
            let _ = read_msg(&mut &bytes[..]);
        }

        #[test]
        fn decode_never_panics_behind_a_valid_header(
            kind in any::<u8>(),
            body in proptest::collection::vec(any::<u8>(), 0..256),
        ) {
            let mut b = MAGIC.to_vec();
            b.extend_from_slice(&VERSION.to_le_bytes());
            b.push(kind);
            b.push(0);
            b.extend_from_slice(&(body.len() as u32).to_le_bytes());
            b.extend_from_slice(&body);
            let _ = decode(&b);
        }
    }
}
