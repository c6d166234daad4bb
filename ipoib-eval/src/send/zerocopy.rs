//! `MSG_ZEROCOPY`: the kernel pins our pages instead of copying them and
//! says on the socket's error queue when it is done with each send (or that
//! it copied after all, as it does for a receiver on the same host). A
//! buffer is written again only after its send completed, so a ring of
//! buffers bounds how many sends are in flight (and the kernel's optmem).

use std::io;
use std::os::fd::AsFd;
use std::time::{Duration, Instant};

use socket2::Socket;

use super::{accounted, Sender, Sent, TcpProgress, ZcStats};
use crate::spec::Proto;
use crate::sys;

/// Sends in flight at most; each holds one ring slot.
const RING: u64 = crate::spec::ZEROCOPY_RING as u64;

#[derive(Debug)]
pub struct Zerocopy<'s> {
    sock: &'s Socket,
    proto: Proto,
    ring: Vec<Vec<u8>>,
    len: usize,
    stream: u16,
    progress: TcpProgress,
    stats: ZcStats,
    timeout: Duration,
}

impl<'s> Zerocopy<'s> {
    pub fn new(
        sock: &'s Socket,
        proto: Proto,
        len: usize,
        stream: u16,
        timeout: Duration,
    ) -> io::Result<Self> {
        sys::set_int(sock.as_fd(), libc::SOL_SOCKET, libc::SO_ZEROCOPY, 1).map_err(|e| {
            io::Error::new(
                e.kind(),
                format!("the kernel refused SO_ZEROCOPY ({e}): it needs Linux 4.14 (TCP) or 5.0 (UDP); use another --send path"),
            )
        })?;
        // TCP data carries no header, so one buffer serves every send; UDP
        // headers differ per datagram, so each in-flight send has its own.
        let slots = if proto == Proto::Tcp {
            1
        } else {
            RING as usize
        };
        Ok(Zerocopy {
            sock,
            proto,
            ring: vec![vec![0x5a; len]; slots],
            len,
            stream,
            progress: TcpProgress::default(),
            stats: ZcStats::default(),
            timeout,
        })
    }

    /// Takes every notification queued now.
    fn reap(&mut self) -> io::Result<()> {
        while let Some(done) = sys::zerocopy_reap(self.sock.as_fd())? {
            let n = u64::from(done.hi.wrapping_sub(done.lo)) + 1;
            self.stats.completed += n;
            if done.copied {
                self.stats.copied += n;
            }
        }
        Ok(())
    }

    /// Waits until at most `limit` sends are in flight.
    fn wait_until_in_flight(&mut self, limit: u64, timeout: Duration) -> io::Result<()> {
        let deadline = Instant::now() + timeout;
        self.reap()?;
        while self.stats.sends - self.stats.completed > limit {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err(io::Error::new(
                    io::ErrorKind::TimedOut,
                    format!(
                        "the kernel did not complete {} zerocopy sends within {timeout:?}",
                        self.stats.sends - self.stats.completed
                    ),
                ));
            }
            sys::wait_errqueue(self.sock.as_fd(), left.min(Duration::from_millis(100)))?;
            self.reap()?;
        }
        Ok(())
    }
}

impl Sender for Zerocopy<'_> {
    fn send(&mut self, seq: u64, _max: u64) -> io::Result<Sent> {
        // Completions arrive in send order, so `sends - RING` done means the
        // slot about to be reused is free.
        self.wait_until_in_flight(RING - 1, self.timeout)?;
        let slot = (self.stats.sends % self.ring.len() as u64) as usize;
        let buf = &mut self.ring[slot];
        if self.proto == Proto::Udp {
            crate::wire::put(buf, self.stream, seq);
        }
        let from = if self.proto == Proto::Tcp {
            self.progress.off
        } else {
            0
        };
        let r = self.sock.send_with_flags(&buf[from..], libc::MSG_ZEROCOPY);
        let n = match r {
            Ok(n) => n,
            // Out of optmem for notifications: reap and let the loop retry.
            Err(e) if e.raw_os_error() == Some(libc::ENOBUFS) => {
                self.wait_until_in_flight(0, self.timeout)?;
                return Ok(Sent::default());
            }
            Err(e) => return Err(e),
        };
        self.stats.sends += 1;
        Ok(accounted(self.proto, &mut self.progress, n, self.len))
    }

    fn finish(&mut self, timeout: Duration) -> io::Result<Option<ZcStats>> {
        self.wait_until_in_flight(0, timeout)?;
        Ok(Some(self.stats))
    }
}
