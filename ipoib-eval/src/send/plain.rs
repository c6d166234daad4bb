//! `send(2)` from one linear buffer, one message per call.

use std::io;

use std::net::SocketAddr;

use socket2::{SockAddr, Socket};

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

/// UDP: one datagram with its sequence header; with `dest`, sendto(2) on
/// an unconnected socket.
#[derive(Debug)]
pub struct Udp<'s> {
    sock: &'s Socket,
    buf: Vec<u8>,
    stream: u16,
    dest: Option<SockAddr>,
}

impl<'s> Udp<'s> {
    pub fn new(sock: &'s Socket, len: usize, stream: u16, dest: Option<SocketAddr>) -> Self {
        Udp {
            sock,
            buf: vec![0x5a; len],
            stream,
            dest: dest.map(SockAddr::from),
        }
    }
}

impl Sender for Udp<'_> {
    fn send(&mut self, seq: u64, _max: u64) -> io::Result<Sent> {
        crate::wire::put(&mut self.buf, self.stream, seq);
        let n = match &self.dest {
            Some(d) => self.sock.send_to(&self.buf, d)?,
            None => self.sock.send(&self.buf)?,
        };
        Ok(Sent {
            msgs: 1,
            bytes: n as u64,
        })
    }
}
