//! `sendmmsg(2)`: a batch of datagrams per system call.

use std::io;
use std::os::fd::AsFd;

use socket2::Socket;

use super::{stamp, Sender, Sent};
use crate::sys::MmsgTx;

#[derive(Debug)]
pub struct Mmsg<'s> {
    sock: &'s Socket,
    buf: Vec<u8>,
    len: usize,
    batch: usize,
    stream: u16,
    tx: MmsgTx,
}

impl<'s> Mmsg<'s> {
    pub fn new(sock: &'s Socket, len: usize, batch: usize, stream: u16) -> Self {
        Mmsg {
            sock,
            buf: vec![0x5a; len * batch],
            len,
            batch,
            stream,
            tx: MmsgTx::new(batch),
        }
    }
}

impl Sender for Mmsg<'_> {
    fn send(&mut self, seq: u64, max: u64) -> io::Result<Sent> {
        let k = (self.batch as u64).min(max) as usize;
        let buf = &mut self.buf[..k * self.len];
        stamp(buf, self.len, self.stream, seq);
        let n = self.tx.send(self.sock.as_fd(), buf, self.len, None)?;
        Ok(Sent {
            msgs: n as u64,
            bytes: (n * self.len) as u64,
        })
    }
}
