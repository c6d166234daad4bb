//! UDP GSO: each send carries a train of `-l`-byte segments (`UDP_SEGMENT`
//! control message) that the stack or the NIC cuts into datagrams as late as
//! possible; several trains per `sendmmsg(2)`.

use std::io;
use std::os::fd::AsFd;

use socket2::Socket;

use super::{stamp, Sender, Sent};
use crate::sys::MmsgTx;

#[derive(Debug)]
pub struct Gso<'s> {
    sock: &'s Socket,
    buf: Vec<u8>,
    len: usize,
    per_send: usize,
    batch: usize,
    stream: u16,
    tx: MmsgTx,
}

impl<'s> Gso<'s> {
    pub fn new(sock: &'s Socket, len: usize, per_send: usize, batch: usize, stream: u16) -> Self {
        Gso {
            sock,
            buf: vec![0x5a; len * per_send * batch],
            len,
            per_send,
            batch,
            stream,
            tx: MmsgTx::new(batch),
        }
    }
}

impl Sender for Gso<'_> {
    fn send(&mut self, seq: u64, max: u64) -> io::Result<Sent> {
        let segs = ((self.per_send * self.batch) as u64).min(max) as usize;
        let buf = &mut self.buf[..segs * self.len];
        stamp(buf, self.len, self.stream, seq);
        let train = self.per_send * self.len;
        // The segment size is -l, which validation keeps within u16.
        let seg = u16::try_from(self.len).unwrap_or(u16::MAX);
        let n = self.tx.send(self.sock.as_fd(), buf, train, Some(seg))?;
        // Every train but the last is whole.
        let bytes = (n * train).min(buf.len());
        Ok(Sent {
            msgs: (bytes / self.len) as u64,
            bytes: bytes as u64,
        })
    }
}
