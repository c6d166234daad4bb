//! The data path. A batch of [`Op`]s is validated as a whole, split into
//! pieces no larger than a transfer, and planned into rounds that fit the
//! window and the staging buffer; each round is staged, posted, waited for
//! and delivered. A round that times out retires its staging buffer.
//!
//! A write that asks for [`Completion::Delivery`] is met with the rank's
//! [`Ordering`]: posted with `FI_DELIVERY_COMPLETE`; or followed, in the same
//! batch, by a read of its bytes (read-after-write data order); or, with
//! `FI_FENCE`, by marking its peer in the [`FenceBook`](super::ordering::FenceBook) when the batch ends,
//! so that the next operation posted to that peer carries the fence.
//!
//! Delivery-complete writes to one peer in one round go out together, as
//! one `fi_writemsg` with a remote segment each (a scatter write), up to
//! the provider's `rma_iov_limit` ([`plan_posts`]). Its completion means
//! every segment was delivered (fi_cq(3)), so each write is as visible as
//! if posted alone, and a round costs one acknowledgement per group
//! instead of one per write: on `shm`, which keeps one delivery-complete
//! write per peer in flight and completes it only once the target has
//! progressed, that is what a round of them waits for.

use std::sync::atomic::{self, AtomicU64};
use std::time::{Duration, Instant};

use fabric_sys as ffi;

use super::plan::{plan_posts, posting_pass, Piece, Post, MAX_SCATTER};
use super::Rank;
use crate::cq::{Outcome, Ticket};
use crate::ep::{Attempt, Room};
use crate::error::{Error, Result};
use crate::info::Ordering;
use crate::mr::MemoryRegion;
use fabkit_core::Error as CoreError;
use fabkit_core::OpKind;
use fabkit_core::{Completion, Op};

/// Staging layout of an atomic: operand, compare value, result.
pub(super) const ATOMIC_STAGE: usize = 24;

/// A rank whose provider progresses only when its CQ is read reads it
/// (without waiting) after every this many posts of a round: it is its
/// peers' target too, and their delivery-complete writes and atomics
/// advance only then. Without it a rank posting a round of 64 reads (each
/// a copy by the kernel on `shm`, a few microseconds) left its peer's
/// writes waiting for the whole round (write rounds of the DHT took 83-98
/// us, 50-54 with it). Every post would serve sooner and cost a CQ read
/// each; four measured as fast.
const SERVE_EVERY: usize = 4;

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
            return Err(Error::from(CoreError::OutOfBounds {
                op: kind,
                peer: at.rank,
                offset: at.offset,
                len,
                region_len,
            }));
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
                return Err(Error::from(CoreError::InvalidArgument(format!(
                    "{kind} at offset {} of rank {}: atomics need an 8-byte aligned offset",
                    at.offset, at.rank
                ))));
            }
        }
        Ok(())
    }

    /// Executes a batch of operations with at most `window` in flight and
    /// returns when all have completed. Operations in one batch are
    /// unordered: to order two, put them in two batches. Every operation is
    /// checked (rank, bounds, alignment, atomics) before anything is posted.
    ///
    /// A write with [`Completion::Delivery`] is visible at its target to any
    /// later operation, from any rank, once this returns, by the mechanism
    /// of [`Rank::ordering`] (with [`Ordering::Fence`]: visible to every
    /// operation this rank posts to that peer afterwards, the fence being on
    /// the first of them). With [`Ordering::None`] it is posted like a
    /// transmit-complete write.
    pub fn execute(&self, ops: &mut [Op<'_>]) -> Result<()> {
        let mut staging = self.staging.lock().unwrap_or_else(|e| e.into_inner());
        self.execute_with(&mut staging, ops)
    }

    /// A handle with its own staging buffer, so that several threads can
    /// issue operations on this rank's endpoint at the same time.
    pub fn initiator(&self) -> Result<Initiator<'_>> {
        Ok(Initiator {
            rank: self,
            staging: Some(self.ep.register_staging(self.cfg.staging_len)?),
        })
    }

    fn execute_with(&self, slot: &mut Option<MemoryRegion>, ops: &mut [Op<'_>]) -> Result<()> {
        self.alive()?;
        let staging_len = self.staging_of(slot)?.len();
        let mut pieces = Vec::with_capacity(ops.len());
        self.plan_pieces(ops, staging_len, &mut pieces)?;
        let to_fence = self.fenced_peers(&pieces);
        let result = self.run_rounds(slot, ops, &mut pieces);
        for &peer in &to_fence {
            self.fences.mark(peer);
        }
        result
    }

    /// Checks every op (rank, bounds, alignment, atomics) and splits them
    /// into `pieces` no larger than a transfer or the staging buffer, each
    /// read-back after its write.
    pub(super) fn plan_pieces(
        &self,
        ops: &[Op<'_>],
        staging_len: usize,
        pieces: &mut Vec<Piece>,
    ) -> Result<()> {
        for op in ops.iter() {
            self.validate(op, staging_len)?;
        }
        pieces.clear();
        // Split ops into pieces no larger than a transfer or the staging buffer.
        let chunk = self
            .info
            .max_msg_size()
            .max(1)
            .min(staging_len)
            .min(1 << 30);
        // Read-after-write data order holds only up to this size.
        let raw_chunk = chunk.min(self.info.max_order_raw_size().max(1));
        for (i, op) in ops.iter().enumerate() {
            let at = op.target();
            let (kind, len) = (op.kind(), op.len());
            let piece = Piece {
                op: i,
                kind,
                peer: at.rank,
                offset: at.offset,
                len,
                user_off: 0,
                stage_off: 0,
                delivery: op.completion() == Some(Completion::Delivery),
                read_back: false,
            };
            if kind == OpKind::Recv {
                // A message is never split. A receive is posted with a byte
                // more than its buffer where the room allows, so a longer
                // message is seen as one, never handed back cut: a provider
                // that would cut it reports a length past the buffer, or
                // fails it (FI_ETRUNC), where `udp;ofi_rxd` (1.17) would
                // cut it silently at the exact length.
                let room = len.checked_add(1).filter(|&n| n <= chunk).unwrap_or(len);
                pieces.push(Piece { len: room, ..piece });
                continue;
            }
            if kind.is_atomic() || kind == OpKind::Send {
                // Atomics are one word; a message is never split (validated
                // to fit a transfer and the staging buffer).
                pieces.push(piece);
                continue;
            }
            let read_back = piece.delivery && self.ordering == Ordering::ReadBack;
            let max = if read_back { raw_chunk } else { chunk };
            let mut off = 0;
            while off < len {
                let n = max.min(len - off);
                let part = Piece {
                    offset: at.offset + off as u64,
                    len: n,
                    user_off: off,
                    ..piece
                };
                pieces.push(part);
                if read_back {
                    // Posted after the write (same round or a later one), so
                    // ordered after it; it reads every byte written, since
                    // data order is per byte (fi_endpoint(3)).
                    pieces.push(Piece {
                        kind: OpKind::Read,
                        delivery: false,
                        read_back: true,
                        ..part
                    });
                }
                off += n;
            }
        }
        Ok(())
    }

    /// With fences, the peers whose next operation must carry one once a
    /// batch of `pieces` ends, however it ends (a failed batch may still
    /// have written); none otherwise.
    pub(super) fn fenced_peers(&self, pieces: &[Piece]) -> Vec<usize> {
        if self.ordering != Ordering::Fence {
            return Vec::new();
        }
        let mut to_fence: Vec<usize> = pieces
            .iter()
            .filter(|p| p.delivery)
            .map(|p| p.peer)
            .collect();
        to_fence.sort_unstable();
        to_fence.dedup();
        to_fence
    }

    /// Most delivery-complete writes one scatter write may carry here: 1
    /// unless the rank posts them with `FI_DELIVERY_COMPLETE` and the
    /// provider takes several local and remote segments per write.
    fn scatter(&self) -> usize {
        if self.ordering != Ordering::DeliveryComplete {
            return 1;
        }
        self.info
            .rma_iov_limit()
            .min(self.info.iov_limit())
            .clamp(1, MAX_SCATTER)
    }

    /// Plans the pieces into rounds and runs them, stopping at the first
    /// failed round.
    pub(super) fn run_rounds(
        &self,
        slot: &mut Option<MemoryRegion>,
        ops: &mut [Op<'_>],
        pieces: &mut [Piece],
    ) -> Result<()> {
        let staging_len = self.staging_of(slot)?.len();
        let mut next = 0;
        while next < pieces.len() {
            let start = next;
            next = self.plan_round(pieces, start, staging_len);
            self.run_round(slot, ops, &pieces[start..next])?;
        }
        Ok(())
    }

    /// Plans one round from `pieces[start..]`: as many pieces as the window
    /// and the staging buffer allow (at least one), each given its place in
    /// staging. Returns where the round ends.
    pub(super) fn plan_round(
        &self,
        pieces: &mut [Piece],
        start: usize,
        staging_len: usize,
    ) -> usize {
        let mut next = start;
        let mut used = 0usize;
        while next < pieces.len() && next - start < self.cfg.window {
            let need = if pieces[next].kind.is_atomic() {
                ATOMIC_STAGE
            } else {
                pieces[next].len.next_multiple_of(8)
            };
            if used + need > staging_len && next > start {
                break;
            }
            pieces[next].stage_off = used;
            used += need;
            next += 1;
        }
        next
    }

    fn run_round(
        &self,
        slot: &mut Option<MemoryRegion>,
        ops: &mut [Op<'_>],
        round: &[Piece],
    ) -> Result<()> {
        let staging = self.staging_of(slot)?;
        let mut flight = Flight::default();
        self.start_round(staging, ops, round, &mut flight);
        let mut received = vec![0usize; round.len()];
        self.collect(slot, round, &mut flight, &mut received)?;
        let staging = self.staging_of(slot)?;
        deliver(staging, ops, round, &received)
    }

    /// Stages a round's inputs and posts it; what was posted, and the first
    /// error, are in `flight`.
    pub(super) fn start_round(
        &self,
        staging: &MemoryRegion,
        ops: &[Op<'_>],
        round: &[Piece],
        flight: &mut Flight,
    ) {
        stage(staging, ops, round);
        flight.deadline = Instant::now() + self.cfg.timeout;
        flight.tickets.clear();
        let delivery_complete = self.ordering == Ordering::DeliveryComplete;
        let posts = plan_posts(round, self.scatter(), self.info.max_msg_size(), |p| {
            delivery_complete && p.kind == OpKind::Write && p.delivery
        });
        flight.first_err = self
            .post_round(staging, round, &posts, flight.deadline, &mut flight.tickets)
            .err();
    }

    /// Waits for every op `flight` posted (until its deadline), keeps each
    /// one's received length in `received` (one per piece of `round`), and
    /// returns the first error; retires the staging buffer in `slot` if an
    /// op's fate is unknown (it may still access the buffer).
    pub(super) fn collect(
        &self,
        slot: &mut Option<MemoryRegion>,
        round: &[Piece],
        flight: &mut Flight,
        received: &mut [usize],
    ) -> Result<()> {
        let timeout = self.cfg.timeout;
        let mut first_err = flight.first_err.take();
        // Set when an operation's fate is unknown (it may still access the
        // staging buffer), so the buffer must be retired.
        let mut retire = false;
        for &(t, i, fenced) in &flight.tickets {
            let p = &round[i];
            let outcome = self.cq.inner.wait(t, flight.deadline);
            if fenced && !matches!(outcome, Outcome::Done { .. }) {
                // What a failed fence guarantees is not defined: fence the
                // next operation to that peer again.
                self.fences.mark(p.peer);
            }
            match outcome {
                Outcome::Done { len } => received[i] = len,
                // Longer than the room posted: `deliver` names it with its
                // buffer's length.
                Outcome::Failed { code, .. }
                    if p.kind == OpKind::Recv && code == ffi::FI_ETRUNC as i32 =>
                {
                    received[i] = usize::MAX;
                }
                Outcome::Failed { code, prov_errno } => {
                    first_err.get_or_insert(Error::completion(p.kind, p.peer, code, prov_errno));
                }
                Outcome::CqFailed { call, code } => {
                    // Its fate is unknown: the staging buffer is retired.
                    retire = true;
                    if p.kind == OpKind::Recv {
                        // A receive would otherwise stay posted.
                        self.ep.cancel(t);
                    }
                    first_err.get_or_insert(Error::completion_queue(p.kind, p.peer, call, code));
                }
                Outcome::TimedOut => {
                    retire = true;
                    if p.kind == OpKind::Recv {
                        // A receive would otherwise stay posted.
                        self.ep.cancel(t);
                    }
                    first_err.get_or_insert(Error::from(CoreError::Timeout {
                        op: p.kind,
                        peer: p.peer,
                        timeout,
                    }));
                }
            }
        }
        flight.tickets.clear();
        match first_err {
            Some(e) => {
                if retire {
                    self.retire(slot);
                }
                Err(e)
            }
            None => Ok(()),
        }
    }

    /// Whether every op `flight` posted on `cq` has completed (or failed),
    /// after reading what `cq` holds without waiting.
    pub(super) fn settled(&self, cq: &crate::cq::CqInner, flight: &Flight) -> bool {
        let all = || flight.tickets.iter().all(|&(t, _, _)| cq.settled(t));
        if all() {
            return true;
        }
        cq.drive(Duration::ZERO);
        all()
    }

    /// Retires a staging buffer that operations which did not complete may
    /// still access: it goes to the rank, which frees it only after its
    /// endpoint has closed (see [`Rank`]'s drop), and a fresh one takes its
    /// place. It is retired first, so it is never used again whatever
    /// follows; if no fresh one can be registered the slot stays empty and
    /// the rank fails (every later call says why).
    pub(super) fn retire(&self, slot: &mut Option<MemoryRegion>) {
        let Some(old) = slot.take() else {
            return;
        };
        let len = old.len();
        self.retired
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(old.retire());
        match self.ep.register_staging(len) {
            Ok(fresh) => *slot = Some(fresh),
            Err(e) => self.fail(format!(
                "an operation did not complete, so its staging buffer was retired, and no \
                 new one could be registered ({e})"
            )),
        }
    }

    /// The staging buffer in `slot`; none is there only after [`Rank::retire`]
    /// failed, which failed the rank.
    pub(super) fn staging_of<'s>(
        &self,
        slot: &'s Option<MemoryRegion>,
    ) -> Result<&'s MemoryRegion> {
        match slot {
            Some(s) => Ok(s),
            None => {
                self.fail("its staging buffer was retired and not replaced".into());
                Err(self.alive().expect_err("a failed rank is not alive"))
            }
        }
    }

    /// Posts every post of a round, pushing each one's ticket (with its
    /// lead piece and whether it carries a fence) as it goes out, and stops
    /// at the first error. A post refused with -FI_EAGAIN holds back the
    /// posts after it to the same peer (every receive counts as one peer:
    /// they match in posting order), so each peer's posts keep their order
    /// (a read-back after its write, a fence on the first), while posts to
    /// other peers go on: `shm` refuses a second delivery-complete write to
    /// a peer until the target has answered the first, and a round's writes
    /// to its own rank need not wait behind those to another. Once every
    /// post left is refused, the CQ is progressed until there is room.
    fn post_round(
        &self,
        staging: &MemoryRegion,
        round: &[Piece],
        posts: &[Post],
        deadline: Instant,
        tickets: &mut Vec<(Ticket, usize, bool)>,
    ) -> Result<()> {
        let key = |post: &Post| {
            let p = &round[post.lead()];
            if p.kind == OpKind::Recv {
                usize::MAX
            } else {
                p.peer
            }
        };
        let mut queue: Vec<usize> = (0..posts.len()).collect();
        let mut held: Vec<usize> = Vec::new();
        let mut room = Room::default();
        let mut tries = 0usize;
        loop {
            posting_pass(
                &mut queue,
                &mut held,
                |i| key(&posts[i]),
                |i| {
                    tries += 1;
                    if self.serve_while_posting && tries.is_multiple_of(SERVE_EVERY) {
                        self.cq.inner.drive(Duration::ZERO);
                    }
                    Ok(
                        match self.post_pieces(staging, round, &posts[i], deadline)? {
                            Some((t, fenced)) => {
                                tickets.push((t, posts[i].lead(), fenced));
                                true
                            }
                            None => false,
                        },
                    )
                },
            )?;
            let Some(&first) = queue.first() else {
                return Ok(());
            };
            let p = &round[posts[first].lead()];
            self.ep
                .make_room(&mut room, p.kind, p.peer, deadline, self.cfg.timeout)?;
        }
    }

    /// Posts one post of the round (one piece, or a scatter write of
    /// several) once; returns its ticket and whether it carries a fence,
    /// or None if the provider refused it for now (-FI_EAGAIN).
    fn post_pieces(
        &self,
        staging: &MemoryRegion,
        round: &[Piece],
        post: &Post,
        deadline: Instant,
    ) -> Result<Option<(Ticket, bool)>> {
        let p = &round[post.lead()];
        let peer = self.peer(p.peer)?;
        let raddr = peer.region.base + p.offset;
        let key = peer.region.key;
        let ep = self.ep.raw();
        let buf = staging.ptr_at(p.stage_off).cast::<libc::c_void>();
        let desc = staging.desc();
        // A scatter write's segments: the lead's first, each piece's bytes
        // in staging to its remote address (all of one peer; planned).
        let mut iovs = [ffi::iovec {
            iov_base: std::ptr::null_mut(),
            iov_len: 0,
        }; MAX_SCATTER];
        let mut rma_iovs = [ffi::fi_rma_iov::default(); MAX_SCATTER];
        for (k, &m) in post.members().iter().enumerate() {
            let q = &round[m as usize];
            debug_assert!(k == 0 || (q.kind == OpKind::Write && q.peer == p.peer));
            iovs[k] = ffi::iovec {
                iov_base: staging.ptr_at(q.stage_off).cast(),
                iov_len: q.len,
            };
            rma_iovs[k] = ffi::fi_rma_iov {
                addr: peer.region.base + q.offset,
                len: q.len,
                key,
            };
        }
        let segments = post.members().len();
        let mut descs = [desc; MAX_SCATTER];
        // A receive is not a transmit: a fence does not apply to it.
        let fence = match (self.ordering, p.kind) {
            (_, OpKind::Recv) => None,
            (Ordering::Fence, _) => self.fences.due(p.peer),
            _ => None,
        };
        let delivery_complete = p.delivery && self.ordering == Ordering::DeliveryComplete;
        // Every transmit is posted with explicit flags, which override the
        // endpoint's default op_flags (fi_endpoint(3)): those hold
        // FI_DELIVERY_COMPLETE when the rank asked for it, and only Delivery
        // writes should pay for it (shm 1.17 never completes a zero-length
        // send with it). No completion level: the provider's default,
        // transmit-complete. FI_COMPLETION is ignored without selective
        // completion (the CQ is bound without it) but says what we want.
        let mut flags = u64::from(ffi::FI_COMPLETION);
        if fence.is_some() {
            flags |= u64::from(ffi::FI_FENCE);
        }
        if delivery_complete {
            flags |= u64::from(ffi::FI_DELIVERY_COMPLETE);
        }
        let atomic_op = match p.kind {
            OpKind::CompareAndSwap => ffi::FI_CSWAP,
            OpKind::FetchAdd => ffi::FI_SUM,
            OpKind::Fetch => ffi::FI_ATOMIC_READ,
            _ => ffi::FI_ATOMIC_WRITE,
        };
        // SAFETY: (every post below) the endpoint is open; buf (and every
        // segment of a scatter write) points into the registered staging
        // buffer with room for its piece (planned), which stays alive and
        // untouched until the op completes or the buffer is retired; ctx is
        // a slot reserved for this op. The *msg variants' descriptors
        // (iovecs, keys, the msg itself) live on this stack frame for the
        // call: libfabric copies them (we do not set FI_ASYNC_IOV).
        let post = |ctx: *mut libc::c_void| unsafe {
            // One pointer to the descriptor, shared by whichever msg is used.
            let mut d = desc;
            let dp: *mut *mut libc::c_void = &mut d;
            let iov = ffi::iovec {
                iov_base: buf,
                iov_len: p.len,
            };
            let rma_iov = ffi::fi_rma_iov {
                addr: raddr,
                len: p.len,
                key,
            };
            let rma = ffi::fi_msg_rma {
                msg_iov: &iov,
                desc: dp,
                iov_count: 1,
                addr: peer.addr,
                rma_iov: &rma_iov,
                rma_iov_count: 1,
                context: ctx,
                data: 0,
            };
            // Atomic staging: operand at 0, compare value at 8, result at 16
            // (wrapping: for other pieces these point nowhere and are unused).
            let word = |at: usize| ffi::fi_ioc {
                addr: buf.cast::<u8>().wrapping_add(at).cast(),
                count: 1,
            };
            let (operand, compare, mut result) = (word(0), word(8), word(16));
            let (mut compare_desc, mut result_desc) = (desc, desc);
            let rma_ioc = ffi::fi_rma_ioc {
                addr: raddr,
                count: 1,
                key,
            };
            let atomic = ffi::fi_msg_atomic {
                msg_iov: &operand,
                desc: dp,
                iov_count: 1,
                addr: peer.addr,
                rma_iov: &rma_ioc,
                rma_iov_count: 1,
                datatype: ffi::FI_UINT64,
                op: atomic_op,
                context: ctx,
                data: 0,
            };
            match p.kind {
                OpKind::Recv => ffi::fi_recv(ep, buf, p.len, desc, ffi::FI_ADDR_UNSPEC, ctx),
                OpKind::Write => {
                    let scatter = ffi::fi_msg_rma {
                        msg_iov: iovs.as_ptr(),
                        desc: descs.as_mut_ptr(),
                        iov_count: segments,
                        rma_iov: rma_iovs.as_ptr(),
                        rma_iov_count: segments,
                        ..rma
                    };
                    ffi::fi_writemsg(ep, &scatter, flags)
                }
                OpKind::Read => ffi::fi_readmsg(ep, &rma, flags),
                OpKind::Send => {
                    let msg = ffi::fi_msg {
                        msg_iov: &iov,
                        desc: dp,
                        iov_count: 1,
                        addr: peer.addr,
                        context: ctx,
                        data: 0,
                    };
                    ffi::fi_sendmsg(ep, &msg, flags)
                }
                OpKind::CompareAndSwap => ffi::fi_compare_atomicmsg(
                    ep,
                    &atomic,
                    &compare,
                    &mut compare_desc,
                    1,
                    &mut result,
                    &mut result_desc,
                    1,
                    flags,
                ),
                _ => ffi::fi_fetch_atomicmsg(ep, &atomic, &mut result, &mut result_desc, 1, flags),
            }
        };
        let t = match self
            .ep
            .try_post(p.kind, p.peer, deadline, self.cfg.timeout, post)?
        {
            Attempt::Posted(t) => t,
            Attempt::Refused => return Ok(None),
        };
        let count = |c: &AtomicU64| {
            c.fetch_add(1, atomic::Ordering::Relaxed);
        };
        if let Some(mark) = fence {
            self.fences.cover(p.peer, mark);
        }
        if delivery_complete {
            let n = segments as u64;
            self.fences
                .delivery_complete
                .fetch_add(n, atomic::Ordering::Relaxed);
            self.fences
                .scattered
                .fetch_add(n - 1, atomic::Ordering::Relaxed);
        }
        if p.read_back {
            count(&self.fences.read_backs);
        }
        if p.delivery && self.ordering == Ordering::None {
            count(&self.fences.unordered);
        }
        Ok(Some((t, fence.is_some())))
    }
}

/// A round posted and not yet collected: its tickets (each with its lead
/// piece and whether it carries a fence), its deadline, and the first error
/// met while posting.
#[derive(Debug)]
pub(super) struct Flight {
    pub(super) tickets: Vec<(Ticket, usize, bool)>,
    pub(super) deadline: Instant,
    pub(super) first_err: Option<Error>,
}

impl Default for Flight {
    fn default() -> Self {
        Flight {
            tickets: Vec::new(),
            deadline: Instant::now(),
            first_err: None,
        }
    }
}

/// Copies a round's inputs (write data, atomic operands) into staging.
fn stage(staging: &MemoryRegion, ops: &[Op<'_>], round: &[Piece]) {
    for p in round {
        if p.read_back {
            continue;
        }
        let dst = staging.ptr_at(p.stage_off);
        let words: [u64; 2] = match &ops[p.op] {
            Op::Write { from, .. } | Op::Send { data: from, .. } => {
                let src = &from[p.user_off..p.user_off + p.len];
                // SAFETY: dst has room for len bytes (planned), and no
                // operation using this part of staging is in flight.
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
}

/// Copies a completed round's outputs (read data, received messages,
/// atomics' old values) from staging into the ops' buffers. A message
/// longer than its receive's buffer is an error naming both (the other
/// ops' outputs are still delivered).
pub(super) fn deliver(
    staging: &MemoryRegion,
    ops: &mut [Op<'_>],
    round: &[Piece],
    received: &[usize],
) -> Result<()> {
    let mut first_err = None;
    for (i, p) in round.iter().enumerate() {
        if p.read_back {
            continue;
        }
        let src = staging.ptr_at(p.stage_off);
        match &mut ops[p.op] {
            Op::Recv { into, len, .. } => {
                let got = received[i];
                if got > into.len() {
                    // Longer than the buffer: all of the posted room taken
                    // means it may have been longer still.
                    first_err.get_or_insert(Error::TooLong {
                        what: format!("{} to rank {}", OpKind::Recv, p.peer),
                        len: (got < p.len).then_some(got),
                        limit: into.len(),
                        room: "buffer given to the receive".into(),
                    });
                    **len = 0;
                    continue;
                }
                // SAFETY: the receive completed into this part of staging,
                // which holds at least `got` bytes.
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
            Op::CompareAndSwap { old, .. } | Op::FetchAdd { old, .. } | Op::Swap { old, .. } => {
                // SAFETY: the atomic completed; its result is the third word.
                **old = unsafe { src.cast::<u64>().add(2).read() };
            }
            Op::Fetch { value, .. } => {
                // SAFETY: as above.
                **value = unsafe { src.cast::<u64>().add(2).read() };
            }
        }
    }
    first_err.map_or(Ok(()), Err)
}

/// A thread's own way into a [`Rank`]: a private staging buffer, so threads
/// sharing the endpoint do not serialise on one.
#[derive(Debug)]
pub struct Initiator<'r> {
    rank: &'r Rank,
    /// Empty only once the rank has failed (see [`Rank::retire`]).
    staging: Option<MemoryRegion>,
}

impl Initiator<'_> {
    /// As [`Rank::execute`].
    pub fn execute(&mut self, ops: &mut [Op<'_>]) -> Result<()> {
        self.rank.execute_with(&mut self.staging, ops)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A piece of `kind` to `peer`, `len` bytes, delivery-complete if a write.
    fn piece(kind: OpKind, peer: usize, len: usize) -> Piece {
        Piece {
            op: 0,
            kind,
            peer,
            offset: 0,
            len,
            user_off: 0,
            stage_off: 0,
            delivery: kind == OpKind::Write,
            read_back: false,
        }
    }

    fn groups(posts: &[Post]) -> Vec<Vec<u32>> {
        posts.iter().map(|p| p.members().to_vec()).collect()
    }

    #[test]
    fn delivery_writes_to_one_peer_share_scatter_writes_up_to_the_limit() {
        use OpKind::{CompareAndSwap as Cas, Read as R, Write as W};
        let joins = |p: &Piece| p.kind == W && p.delivery;
        // (pieces as (kind, peer, len), scatter limit, max bytes) -> posts
        type Case = (
            &'static [(OpKind, usize, usize)],
            usize,
            usize,
            &'static [&'static [u32]],
        );
        let cases: &[Case] = &[
            // Six writes to one peer, limit 4: two posts, each where its
            // first write stood.
            (&[(W, 1, 8); 6], 4, 1 << 20, &[&[0, 1, 2, 3], &[4, 5]]),
            // Interleaved peers: one group each, at its first write.
            (
                &[(W, 1, 8), (W, 0, 8), (W, 1, 8), (W, 0, 8), (W, 1, 8)],
                4,
                1 << 20,
                &[&[0, 2, 4], &[1, 3]],
            ),
            // Reads and atomics never join, nor break a group.
            (
                &[(W, 1, 8), (R, 1, 8), (Cas, 1, 8), (W, 1, 8)],
                4,
                1 << 20,
                &[&[0, 3], &[1], &[2]],
            ),
            // A provider that takes one remote segment: every write alone.
            (&[(W, 1, 8); 3], 1, 1 << 20, &[&[0], &[1], &[2]]),
            // A limit above MAX_SCATTER is held to it.
            (&[(W, 1, 8); 5], 64, 1 << 20, &[&[0, 1, 2, 3], &[4]]),
            // No group grows past the largest transfer: a new one starts.
            (&[(W, 1, 100); 3], 4, 250, &[&[0, 1], &[2]]),
        ];
        for &(spec, scatter, max_len, want) in cases {
            let round: Vec<Piece> = spec.iter().map(|&(k, p, l)| piece(k, p, l)).collect();
            let got = groups(&plan_posts(&round, scatter, max_len, joins));
            let want: Vec<Vec<u32>> = want.iter().map(|g| g.to_vec()).collect();
            assert_eq!(got, want, "{spec:?}, scatter {scatter}, max {max_len}");
            // Every piece is posted exactly once.
            let mut all: Vec<u32> = got.concat();
            all.sort_unstable();
            assert_eq!(all, (0..round.len() as u32).collect::<Vec<_>>());
        }
        // Writes that do not ask for delivery completion are never joined.
        let round = vec![piece(W, 1, 8); 3];
        assert_eq!(plan_posts(&round, 4, 1 << 20, |_| false).len(), 3);
    }

    #[test]
    fn a_refused_post_holds_back_its_peers_later_posts_but_not_other_peers() {
        // Posts 0..6 to peers 1, 0, 1, 0, 2, 1; peer 1 refuses once.
        let peers = [1, 0, 1, 0, 2, 1];
        let mut queue: Vec<usize> = (0..peers.len()).collect();
        let mut held = Vec::new();
        let mut tried = Vec::new();
        let mut refuse = 1;
        posting_pass(
            &mut queue,
            &mut held,
            |i| peers[i],
            |i| {
                tried.push(i);
                let refused = peers[i] == 1 && refuse > 0;
                refuse -= refused as i32;
                Ok(!refused)
            },
        )
        .unwrap();
        // Post 0 was refused: 2 and 5 (peer 1) were not tried; the others went.
        assert_eq!(tried, [0, 1, 3, 4]);
        assert_eq!(queue, [0, 2, 5]);
        // The next pass posts peer 1's in their order.
        tried.clear();
        posting_pass(
            &mut queue,
            &mut held,
            |i| peers[i],
            |i| {
                tried.push(i);
                Ok(true)
            },
        )
        .unwrap();
        assert_eq!((tried, queue), (vec![0, 2, 5], vec![]));
        // An error ends the pass.
        let mut queue = vec![0, 1];
        let err = posting_pass(
            &mut queue,
            &mut held,
            |i| i,
            |_| {
                Err(Error::from(CoreError::InvalidArgument(
                    "refused for good".into(),
                )))
            },
        );
        assert!(err.is_err());
    }
}
