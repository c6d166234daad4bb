//! Scatter-gather: one `sendmsg(2)` per message with the payload spread over
//! N separate buffers, the experiment of seed 004 (section 3.7) against one
//! linear buffer.

use std::io;
use std::os::fd::AsFd;

use socket2::Socket;

use super::{accounted, Sender, Sent, TcpProgress};
use crate::spec::{Proto, UDP_HEADER};
use crate::sys::IovTx;

/// Sizes of `n` pieces of a `len`-byte message, the first at least
/// `first_min` bytes (it holds the UDP header), the rest as equal as possible.
pub fn split(len: usize, n: usize, first_min: usize) -> Vec<usize> {
    let n = n.clamp(1, len.max(1));
    let base = len / n;
    let first = base.max(first_min).min(len);
    let rest = len - first;
    let others = n - 1;
    let mut out = vec![first];
    for i in 0..others {
        out.push(rest / others + usize::from(i < rest % others));
    }
    out
}

#[derive(Debug)]
pub struct Sg<'s> {
    sock: &'s Socket,
    proto: Proto,
    pieces: Vec<Vec<u8>>,
    len: usize,
    stream: u16,
    progress: TcpProgress,
    tx: IovTx,
}

impl<'s> Sg<'s> {
    pub fn new(sock: &'s Socket, proto: Proto, len: usize, iovecs: usize, stream: u16) -> Self {
        let first_min = if proto == Proto::Udp { UDP_HEADER } else { 1 };
        let sizes = split(len, iovecs, first_min);
        Sg {
            tx: IovTx::new(sizes.len()),
            sock,
            proto,
            // Separate allocations, so the kernel really gathers from N places.
            pieces: sizes.into_iter().map(|l| vec![0x5a; l]).collect(),
            len,
            stream,
            progress: TcpProgress::default(),
        }
    }
}

impl Sender for Sg<'_> {
    fn send(&mut self, seq: u64, _max: u64) -> io::Result<Sent> {
        if self.proto == Proto::Udp {
            crate::wire::put(&mut self.pieces[0], self.stream, seq);
        }
        // The rest of the current message: skip what a partial TCP send took.
        let n = self
            .tx
            .send(self.sock.as_fd(), &self.pieces, self.progress.off)?;
        Ok(accounted(self.proto, &mut self.progress, n, self.len))
    }
}

#[cfg(test)]
mod tests {
    use super::split;

    #[test]
    fn pieces_add_up_and_the_first_holds_the_header() {
        for (len, n, min) in [
            (1472, 4, 16),
            (64, 32, 16),
            (17, 2, 16),
            (10, 3, 1),
            (5, 9, 1),
        ] {
            let p = split(len, n, min);
            assert_eq!(p.iter().sum::<usize>(), len, "{len} {n}");
            assert!(p[0] >= min.min(len));
            assert!(p.len() <= n);
        }
        assert_eq!(split(1472, 4, 16), vec![368, 368, 368, 368]);
    }
}
