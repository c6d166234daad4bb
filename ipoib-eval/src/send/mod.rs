//! Send paths, one file each behind one trait. A [`Sender`] makes one system
//! call per [`Sender::send`] and says how many whole messages and bytes it
//! put into the kernel; the stream loop above it owns time and counting.

mod gso;
mod mmsg;
mod plain;
mod sg;
mod zerocopy;

use std::io;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use socket2::Socket;

use crate::spec::{Proto, SendPath};

/// What one send call did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Sent {
    /// Messages completed (a TCP message may take several calls).
    pub msgs: u64,
    /// Bytes the kernel took.
    pub bytes: u64,
}

/// `MSG_ZEROCOPY` bookkeeping of one stream.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ZcStats {
    /// Zerocopy sends made.
    pub sends: u64,
    /// Sends the kernel reported done.
    pub completed: u64,
    /// Of those, sends the kernel copied after all (a local receiver does that).
    pub copied: u64,
}

/// One send path on one socket.
pub trait Sender {
    /// One system call: sends up to `max` (≥ 1) messages, the first with
    /// sequence number `seq`.
    fn send(&mut self, seq: u64, max: u64) -> io::Result<Sent>;
    /// Waits until the kernel is done with every buffer (zerocopy), at most
    /// `timeout`.
    fn finish(&mut self, _timeout: Duration) -> io::Result<Option<ZcStats>> {
        Ok(None)
    }
}

/// The sender for `path` on `sock` (a connected TCP or UDP socket, or an
/// unconnected UDP socket sending to `dest` with path `send`) for
/// messages of `len` bytes on stream `stream`; `timeout` bounds waits for
/// the kernel (zerocopy completions). The spec was validated, so the
/// combination is one that exists.
pub fn sender<'s>(
    path: SendPath,
    proto: Proto,
    sock: &'s Socket,
    dest: Option<std::net::SocketAddr>,
    len: usize,
    stream: u16,
    timeout: Duration,
) -> io::Result<Box<dyn Sender + 's>> {
    if dest.is_some() && (path, proto) != (SendPath::Send, Proto::Udp) {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "only UDP with send path `send` sends on an unconnected socket",
        ));
    }
    Ok(match (path, proto) {
        (SendPath::Send, Proto::Tcp) => Box::new(plain::Tcp::new(sock, len)),
        (SendPath::Send, Proto::Udp) => Box::new(plain::Udp::new(sock, len, stream, dest)),
        (SendPath::Sg { iovecs }, _) => {
            Box::new(sg::Sg::new(sock, proto, len, iovecs.into(), stream))
        }
        (SendPath::Mmsg { batch }, _) => Box::new(mmsg::Mmsg::new(sock, len, batch.into(), stream)),
        (SendPath::Gso { per_send, batch }, _) => Box::new(gso::Gso::new(
            sock,
            len,
            per_send.into(),
            batch.into(),
            stream,
        )),
        (SendPath::Zerocopy, _) => {
            Box::new(zerocopy::Zerocopy::new(sock, proto, len, stream, timeout)?)
        }
    })
}

/// Writes the UDP headers of messages `seq..` into consecutive `len`-byte
/// slots of `buf`.
fn stamp(buf: &mut [u8], len: usize, stream: u16, seq: u64) {
    for (i, m) in buf.chunks_exact_mut(len).enumerate() {
        crate::wire::put(m, stream, seq + i as u64);
    }
}

/// What a one-message send path took: TCP may take part of a message, UDP
/// takes a whole datagram.
fn accounted(proto: Proto, progress: &mut TcpProgress, n: usize, len: usize) -> Sent {
    match proto {
        Proto::Tcp => progress.advance(n, len),
        Proto::Udp => Sent {
            msgs: 1,
            bytes: n as u64,
        },
    }
}

/// A partly sent TCP message: how far into it the stream is.
#[derive(Debug, Default)]
struct TcpProgress {
    off: usize,
}

impl TcpProgress {
    /// Accounts `n` bytes the kernel took of messages of `len` bytes.
    fn advance(&mut self, n: usize, len: usize) -> Sent {
        let total = self.off + n;
        self.off = total % len;
        Sent {
            msgs: (total / len) as u64,
            bytes: n as u64,
        }
    }
}
