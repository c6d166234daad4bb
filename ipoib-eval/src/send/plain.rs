//! `send(2)` from one linear buffer, one message per call.

use std::io;

use socket2::Socket;

use super::{Sender, Sent, TcpProgress};

/// TCP: writes the rest of the current message.
#[derive(Debug)]
pub struct Tcp<'s> {
    sock: &'s Socket,
    buf: Vec<u8>,
    progress: TcpProgress,
}

impl<'s> Tcp<'s> {
    pub fn new(sock: &'s Socket, len: usize) -> Self {
        Tcp {
            sock,
            buf: vec![0x5a; len],
            progress: TcpProgress::default(),
        }
    }
}

impl Sender for Tcp<'_> {
    fn send(&mut self, _seq: u64, _max: u64) -> io::Result<Sent> {
        let n = self.sock.send(&self.buf[self.progress.off..])?;
        Ok(self.progress.advance(n, self.buf.len()))
    }
}

/// UDP: one datagram with its sequence header.
#[derive(Debug)]
pub struct Udp<'s> {
    sock: &'s Socket,
    buf: Vec<u8>,
    stream: u16,
}

impl<'s> Udp<'s> {
    pub fn new(sock: &'s Socket, len: usize, stream: u16) -> Self {
        Udp {
            sock,
            buf: vec![0x5a; len],
            stream,
        }
    }
}

impl Sender for Udp<'_> {
    fn send(&mut self, seq: u64, _max: u64) -> io::Result<Sent> {
        crate::wire::put(&mut self.buf, self.stream, seq);
        let n = self.sock.send(&self.buf)?;
        Ok(Sent {
            msgs: 1,
            bytes: n as u64,
        })
    }
}
