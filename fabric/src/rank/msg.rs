//! Single messages: [`Rank::send`] and [`Rank::recv`], each staged through
//! the rank's staging buffer and waited for on its own.

use std::time::{Duration, Instant};

use fabric_sys as ffi;

use super::Rank;
use crate::cq::{Outcome, Ticket};
use crate::error::{Error, Result};
use crate::mr::MemoryRegion;
use fabkit_core::Error as CoreError;
use fabkit_core::OpKind;

impl Rank {
    /// Waits for one posted message operation and turns its outcome into a
    /// result (the received length). On timeout the operation is cancelled
    /// and the staging buffer retired.
    fn settle(
        &self,
        t: Ticket,
        deadline: Instant,
        timeout: Duration,
        op: OpKind,
        peer: usize,
        staging: &mut Option<MemoryRegion>,
    ) -> Result<usize> {
        match self.cq.inner.wait(t, deadline) {
            Outcome::Done { len } => Ok(len),
            Outcome::Failed { code, prov_errno } => {
                Err(Error::completion(op, peer, code, prov_errno))
            }
            Outcome::TimedOut => {
                self.ep.cancel(t);
                self.retire(staging);
                Err(Error::from(CoreError::Timeout { op, peer, timeout }))
            }
            Outcome::CqFailed { call, code } => {
                self.ep.cancel(t);
                self.retire(staging);
                Err(Error::completion_queue(op, peer, call, code))
            }
        }
    }

    pub(super) fn check_msg_len(&self, len: usize, staging_len: usize) -> Result<()> {
        let max = self.info.max_msg_size().min(staging_len);
        if len > max {
            return Err(Error::from(CoreError::InvalidArgument(format!(
                "message of {len} B exceeds the limit of {max} B (provider max_msg_size {}, \
                 staging {} B)",
                self.info.max_msg_size(),
                staging_len
            ))));
        }
        Ok(())
    }

    /// Sends `data` to rank `to` and waits for local completion.
    pub fn send(&self, to: usize, data: &[u8]) -> Result<()> {
        self.alive()?;
        let peer = *self.peer(to)?;
        let mut slot = self.staging.lock().unwrap_or_else(|e| e.into_inner());
        let staging = self.staging_of(&slot)?;
        self.check_msg_len(data.len(), staging.len())?;
        staging.fill(0, data)?;
        let deadline = Instant::now() + self.cfg.timeout;
        let (ep, buf, desc) = (self.ep.raw(), staging.ptr_at(0).cast(), staging.desc());
        let t = self
            .ep
            .post(OpKind::Send, to, deadline, self.cfg.timeout, |ctx| {
                // SAFETY: buf holds data.len() staged bytes that stay untouched
                // until completion (or retirement); ctx is a reserved slot.
                unsafe { ffi::fi_send(ep, buf, data.len(), desc, peer.addr, ctx) }
            })?;
        self.settle(t, deadline, self.cfg.timeout, OpKind::Send, to, &mut slot)
            .map(drop)
    }

    /// Receives one message into `buf` and returns its length. `from` is the
    /// rank expected to send (named in a timeout error; messages are matched
    /// in arrival order from any rank).
    pub fn recv(&self, from: usize, buf: &mut [u8]) -> Result<usize> {
        self.recv_within(from, buf, self.cfg.timeout)
    }

    /// As [`Rank::recv`], waiting at most `timeout` instead of the configured
    /// one (for a rank that idles until a peer tells it to go on).
    ///
    /// A message longer than `buf` is an error naming both sizes
    /// ([`Error::TooLong`]); it is consumed, and never handed back cut to
    /// `buf.len()`.
    pub fn recv_within(&self, from: usize, buf: &mut [u8], timeout: Duration) -> Result<usize> {
        self.alive()?;
        self.peer(from)?;
        let mut slot = self.staging.lock().unwrap_or_else(|e| e.into_inner());
        let staging = self.staging_of(&slot)?;
        self.check_msg_len(buf.len(), staging.len())?;
        // The receive is posted with all the room there is, not `buf.len()`:
        // a message longer than `buf` but no longer than what any rank may
        // send then arrives whole and is refused with its size. Letting the
        // provider cut it is no way to find out: `udp;ofi_rxd` (1.17) cuts
        // silently, and `shm` never completes such a receive.
        let posted = self.info.max_msg_size().min(staging.len());
        let deadline = Instant::now() + timeout;
        let (ep, sbuf, desc) = (self.ep.raw(), staging.ptr_at(0).cast(), staging.desc());
        let t = self.ep.post(OpKind::Recv, from, deadline, timeout, |ctx| {
            // SAFETY: sbuf has room for `posted` bytes and stays alive until
            // the receive completes or the buffer is retired.
            unsafe { ffi::fi_recv(ep, sbuf, posted, desc, ffi::FI_ADDR_UNSPEC, ctx) }
        })?;
        let too_long = |len: Option<usize>, limit: usize, room: &str| Error::TooLong {
            what: format!("{} to rank {from}", OpKind::Recv),
            len,
            limit,
            room: room.into(),
        };
        let got = match self.settle(t, deadline, timeout, OpKind::Recv, from, &mut slot) {
            Ok(got) => got,
            // Longer than anything a rank may send: cut by the provider.
            Err(Error::Completion { code, .. }) if code == ffi::FI_ETRUNC as i32 => {
                return Err(too_long(None, posted, "staging buffer"));
            }
            Err(e) => return Err(e),
        };
        if got > buf.len() {
            // All of the posted room taken: it may have been cut.
            let len = (got < posted).then_some(got);
            return Err(too_long(len, buf.len(), "buffer given to recv"));
        }
        self.staging_of(&slot)?.snapshot(0, &mut buf[..got])?;
        Ok(got)
    }
}
