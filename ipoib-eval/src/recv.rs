//! Receive paths: `recv(2)` one message at a time, `recvmmsg(2)` batches, and
//! UDP GRO (`UDP_GRO`: one read returns a train of equal segments and a
//! `gso_size` control message). Every UDP segment's header is read, so loss
//! and reordering are counted per message whatever the path.

use std::io;
use std::os::fd::AsFd;

use socket2::Socket;

use crate::spec::{Proto, RecvPath};
use crate::stats::SeqTracker;
use crate::sys::{self, MmsgRx};

/// What one receive call took.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Got {
    /// Bytes.
    pub bytes: u64,
    /// The peer closed the stream (TCP).
    pub eof: bool,
}

/// One receive path on one socket.
#[derive(Debug)]
pub struct Receiver<'s> {
    sock: &'s Socket,
    proto: Proto,
    stream: u16,
    buf: Vec<u8>,
    mmsg: Option<MmsgRx>,
    gro: bool,
    /// Datagrams that were not this stream's (wrong magic or stream).
    pub foreign: u64,
}

impl<'s> Receiver<'s> {
    /// Sets the socket up for `path` (UDP GRO) and sizes the buffers for
    /// messages of `len` bytes.
    pub fn new(
        sock: &'s Socket,
        proto: Proto,
        path: RecvPath,
        len: usize,
        stream: u16,
    ) -> io::Result<Self> {
        if path.gro {
            sys::set_int(sock.as_fd(), libc::SOL_UDP, sys::UDP_GRO, 1).map_err(|e| {
                io::Error::new(
                    e.kind(),
                    format!("the kernel refused UDP_GRO ({e}): it needs Linux 5.0; use --recv recv or mmsg:N"),
                )
            })?;
        }
        // A GRO read can return a whole 64 KB train.
        let slot = path.slot(len);
        let mmsg = (proto == Proto::Udp && (path.batch > 1 || path.gro))
            .then(|| MmsgRx::new(path.batch.into(), slot));
        Ok(Receiver {
            sock,
            proto,
            stream,
            // TCP reads -l bytes at a time (iperf3 does the same), UDP a whole datagram.
            buf: vec![
                0;
                if proto == Proto::Tcp {
                    len.min(4 << 20)
                } else {
                    65_536
                }
            ],
            mmsg,
            gro: path.gro,
            foreign: 0,
        })
    }

    fn count(&mut self, data: &[u8], gro: Option<usize>, seq: &mut SeqTracker) {
        for seg in crate::wire::segments(data, gro) {
            match crate::wire::get(seg) {
                Some((s, n)) if s == self.stream => seq.observe(n),
                _ => self.foreign += 1,
            }
        }
    }

    /// One receive call (blocking, up to the socket's read timeout).
    pub fn recv(&mut self, seq: &mut SeqTracker) -> io::Result<Got> {
        if let Some(mut m) = self.mmsg.take() {
            let r = m.recv(self.sock.as_fd());
            let mut bytes = 0;
            if let Ok(n) = r {
                for i in 0..n {
                    let (data, gro) = m.get(i);
                    bytes += data.len() as u64;
                    let gro = gro.filter(|_| self.gro);
                    self.count(data, gro, seq);
                }
            }
            self.mmsg = Some(m);
            return r.map(|_| Got { bytes, eof: false });
        }
        let n = recv_into(self.sock, &mut self.buf)?;
        if self.proto == Proto::Tcp {
            return Ok(Got {
                bytes: n as u64,
                eof: n == 0,
            });
        }
        let data = std::mem::take(&mut self.buf);
        self.count(&data[..n], None, seq);
        self.buf = data;
        Ok(Got {
            bytes: n as u64,
            eof: false,
        })
    }
}

/// `recv(2)` into an initialised buffer.
pub fn recv_into(sock: &Socket, buf: &mut [u8]) -> io::Result<usize> {
    use std::io::Read;
    let mut s: &Socket = sock;
    s.read(buf)
}
