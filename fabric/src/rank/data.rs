//! The data path. A batch of [`Op`]s is validated as a whole, split into
//! pieces no larger than a transfer, and planned into rounds that fit the
//! window and the staging buffer; each round is staged, posted, waited for
//! and delivered. A round that times out retires its staging buffer.

use std::time::Instant;

use fabric_sys as ffi;

use super::{Op, Rank};
use crate::cq::{Outcome, Ticket};
use crate::error::{Error, OpKind, Result};
use crate::mr::MemoryRegion;

/// Staging layout of an atomic: operand, compare value, result.
pub(super) const ATOMIC_STAGE: usize = 24;

/// One piece of an op as posted: RMA ops larger than a transfer are split.
#[derive(Clone, Copy, Debug)]
struct Piece {
    op: usize,
    kind: OpKind,
    peer: usize,
    offset: u64,
    len: usize,
    /// Offset of this piece within the op's user buffer.
    user_off: usize,
    /// Offset in the staging buffer.
    stage_off: usize,
}

impl Rank {
    fn validate(&self, op: &Op<'_>, staging_len: usize) -> Result<()> {
        let at = op.target();
        let kind = op.kind();
        let region_len = self.peer(at.rank)?.region.len as usize;
        let len = op.len();
        if matches!(kind, OpKind::Send | OpKind::Recv) {
            return self.check_msg_len(len, staging_len);
        }
        let fits = usize::try_from(at.offset)
            .ok()
            .and_then(|o| o.checked_add(len))
            .is_some_and(|end| end <= region_len);
        if !fits {
            return Err(Error::OutOfBounds {
                op: kind,
                peer: at.rank,
                offset: at.offset,
                len,
                region_len,
            });
        }
        if kind.is_atomic() {
            if !self.cfg.atomics {
                return Err(Error::Unsupported {
                    provider: self.info.provider(),
                    what: format!("{kind}: this rank was set up without atomics"),
                    hint: "set atomics in the RankConfig (a provider that offers them is needed)"
                        .into(),
                });
            }
            if !at.offset.is_multiple_of(8) {
                return Err(Error::InvalidArgument(format!(
                    "{kind} at offset {} of rank {}: atomics need an 8-byte aligned offset",
                    at.offset, at.rank
                )));
            }
        }
        Ok(())
    }

    /// Executes a batch of operations with at most `window` in flight and
    /// returns when all have completed. Operations in one batch are
    /// unordered: to order two, put them in two batches. Every operation is
    /// checked (rank, bounds, alignment, atomics) before anything is posted.
    pub fn execute(&self, ops: &mut [Op<'_>]) -> Result<()> {
        let mut staging = self.staging.lock().unwrap();
        self.execute_with(&mut staging, ops)
    }

    /// A handle with its own staging buffer, so that several threads can
    /// issue operations on this rank's endpoint at the same time.
    pub fn initiator(&self) -> Result<Initiator<'_>> {
        Ok(Initiator {
            rank: self,
            staging: self.ep.register(self.cfg.staging_len)?,
        })
    }

    fn execute_with(&self, staging: &mut MemoryRegion, ops: &mut [Op<'_>]) -> Result<()> {
        for op in ops.iter() {
            self.validate(op, staging.len())?;
        }
        // Split ops into pieces no larger than a transfer or the staging buffer.
        let chunk = self
            .info
            .max_msg_size()
            .max(1)
            .min(staging.len())
            .min(1 << 30);
        let mut pieces = Vec::with_capacity(ops.len());
        for (i, op) in ops.iter().enumerate() {
            let at = op.target();
            let (kind, len) = (op.kind(), op.len());
            if kind.is_atomic() || matches!(kind, OpKind::Send | OpKind::Recv) {
                // Atomics are one word; a message is never split (validated
                // to fit a transfer and the staging buffer).
                pieces.push(Piece {
                    op: i,
                    kind,
                    peer: at.rank,
                    offset: at.offset,
                    len,
                    user_off: 0,
                    stage_off: 0,
                });
                continue;
            }
            let mut off = 0;
            while off < len {
                let n = chunk.min(len - off);
                pieces.push(Piece {
                    op: i,
                    kind,
                    peer: at.rank,
                    offset: at.offset + off as u64,
                    len: n,
                    user_off: off,
                    stage_off: 0,
                });
                off += n;
            }
        }
        let mut next = 0;
        while next < pieces.len() {
            // Plan one round: as many pieces as the window and staging allow.
            let start = next;
            let mut used = 0usize;
            while next < pieces.len() && next - start < self.cfg.window {
                let need = if pieces[next].kind.is_atomic() {
                    ATOMIC_STAGE
                } else {
                    pieces[next].len.next_multiple_of(8)
                };
                if used + need > staging.len() && next > start {
                    break;
                }
                pieces[next].stage_off = used;
                used += need;
                next += 1;
            }
            self.run_round(staging, ops, &pieces[start..next])?;
        }
        Ok(())
    }

    fn run_round(
        &self,
        staging: &mut MemoryRegion,
        ops: &mut [Op<'_>],
        round: &[Piece],
    ) -> Result<()> {
        // Stage inputs.
        for p in round {
            let dst = staging.ptr_at(p.stage_off);
            let words: [u64; 2] = match &ops[p.op] {
                Op::Write { from, .. } | Op::Send { data: from, .. } => {
                    let src = &from[p.user_off..p.user_off + p.len];
                    // SAFETY: dst has room for len bytes (planned above), and
                    // no operation using this part of staging is in flight.
                    unsafe { std::ptr::copy_nonoverlapping(src.as_ptr(), dst, p.len) };
                    continue;
                }
                Op::Read { .. } | Op::Recv { .. } => continue,
                Op::CompareAndSwap { expected, new, .. } => [*new, *expected],
                Op::FetchAdd { delta, .. } => [*delta, 0],
                Op::Fetch { .. } => [0, 0],
                Op::Swap { new, .. } => [*new, 0],
            };
            // SAFETY: atomics reserve ATOMIC_STAGE 8-aligned bytes at dst.
            unsafe {
                dst.cast::<u64>().write(words[0]);
                dst.cast::<u64>().add(1).write(words[1]);
            }
        }

        let timeout = self.cfg.timeout;
        let deadline = Instant::now() + timeout;
        let mut tickets: Vec<(Ticket, &Piece)> = Vec::with_capacity(round.len());
        let mut first_err = None;
        for p in round {
            match self.post_piece(staging, p, deadline) {
                Ok(t) => tickets.push((t, p)),
                Err(e) => {
                    first_err = Some(e);
                    break;
                }
            }
        }
        let mut timed_out = false;
        let mut received = vec![0usize; round.len()];
        for (i, (t, p)) in tickets.iter().enumerate() {
            match self.cq.inner.wait(*t, deadline) {
                Outcome::Done { len } => received[i] = len,
                Outcome::Failed { code, prov_errno } => {
                    first_err.get_or_insert(Error::completion(p.kind, p.peer, code, prov_errno));
                }
                Outcome::TimedOut => {
                    timed_out = true;
                    if p.kind == OpKind::Recv {
                        // A receive would otherwise stay posted.
                        self.ep.cancel(*t);
                    }
                    first_err.get_or_insert(Error::Timeout {
                        op: p.kind,
                        peer: p.peer,
                        timeout,
                    });
                }
            }
        }
        if timed_out {
            self.retire(staging)?;
        }
        if let Some(e) = first_err {
            return Err(e);
        }
        // Deliver outputs.
        for (i, p) in round.iter().enumerate() {
            let src = staging.ptr_at(p.stage_off);
            match &mut ops[p.op] {
                Op::Recv { into, len, .. } => {
                    let got = received[i].min(into.len());
                    // SAFETY: the receive completed into this part of
                    // staging, which holds at least `got` bytes.
                    unsafe { std::ptr::copy_nonoverlapping(src, into.as_mut_ptr(), got) };
                    **len = got;
                }
                Op::Send { .. } => {}
                Op::Read { into, .. } => {
                    let dst = &mut into[p.user_off..p.user_off + p.len];
                    // SAFETY: the read completed, so the provider no longer
                    // writes this part of staging; it holds p.len bytes.
                    unsafe { std::ptr::copy_nonoverlapping(src, dst.as_mut_ptr(), p.len) };
                }
                Op::Write { .. } => {}
                Op::CompareAndSwap { old, .. }
                | Op::FetchAdd { old, .. }
                | Op::Swap { old, .. } => {
                    // SAFETY: the atomic completed; its result is the third word.
                    **old = unsafe { src.cast::<u64>().add(2).read() };
                }
                Op::Fetch { value, .. } => {
                    // SAFETY: as above.
                    **value = unsafe { src.cast::<u64>().add(2).read() };
                }
            }
        }
        Ok(())
    }

    /// Replaces a staging buffer that may still be written by operations that
    /// timed out; the old one lives until the endpoint closes.
    pub(super) fn retire(&self, staging: &mut MemoryRegion) -> Result<()> {
        let fresh = self.ep.register(staging.len())?;
        self.ep.bury(std::mem::replace(staging, fresh));
        Ok(())
    }

    fn post_piece(&self, staging: &MemoryRegion, p: &Piece, deadline: Instant) -> Result<Ticket> {
        let peer = self.peer(p.peer)?;
        let raddr = peer.region.base + p.offset;
        let key = peer.region.key;
        let ep = self.ep.raw();
        let buf = staging.ptr_at(p.stage_off).cast::<libc::c_void>();
        let desc = staging.desc();
        // SAFETY: (every post below) the endpoint is open; buf points into the
        // registered staging buffer with room for the piece (planned), which
        // stays alive and untouched until the op completes or the buffer is
        // retired; ctx is a slot reserved for this op.
        let post = |ctx: *mut libc::c_void| unsafe {
            match p.kind {
                OpKind::Read => ffi::fi_read(ep, buf, p.len, desc, peer.addr, raddr, key, ctx),
                OpKind::Write => ffi::fi_write(ep, buf, p.len, desc, peer.addr, raddr, key, ctx),
                OpKind::Send => ffi::fi_send(ep, buf, p.len, desc, peer.addr, ctx),
                OpKind::Recv => ffi::fi_recv(ep, buf, p.len, desc, ffi::FI_ADDR_UNSPEC, ctx),
                OpKind::CompareAndSwap => ffi::fi_compare_atomic(
                    ep,
                    buf,
                    1,
                    desc,
                    buf.cast::<u8>().add(8).cast(),
                    desc,
                    buf.cast::<u8>().add(16).cast(),
                    desc,
                    peer.addr,
                    raddr,
                    key,
                    ffi::FI_UINT64,
                    ffi::FI_CSWAP,
                    ctx,
                ),
                kind => {
                    let op = match kind {
                        OpKind::FetchAdd => ffi::FI_SUM,
                        OpKind::Fetch => ffi::FI_ATOMIC_READ,
                        _ => ffi::FI_ATOMIC_WRITE,
                    };
                    ffi::fi_fetch_atomic(
                        ep,
                        buf,
                        1,
                        desc,
                        buf.cast::<u8>().add(16).cast(),
                        desc,
                        peer.addr,
                        raddr,
                        key,
                        ffi::FI_UINT64,
                        op,
                        ctx,
                    )
                }
            }
        };
        self.ep
            .post(p.kind, p.peer, deadline, self.cfg.timeout, post)
    }
}

/// A thread's own way into a [`Rank`]: a private staging buffer, so threads
/// sharing the endpoint do not serialise on one.
#[derive(Debug)]
pub struct Initiator<'r> {
    rank: &'r Rank,
    staging: MemoryRegion,
}

impl Initiator<'_> {
    /// As [`Rank::execute`].
    pub fn execute(&mut self, ops: &mut [Op<'_>]) -> Result<()> {
        self.rank.execute_with(&mut self.staging, ops)
    }
}
