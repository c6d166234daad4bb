//! Batches in flight while others complete: a [`Lane`] holds one posted
//! batch, with the staging buffer its data goes through, so a caller with
//! several lanes keeps the fabric busy while it plans the next batch of one
//! lane and another lane's batch is still on the wire.
//!
//! [`Rank::post`] stages and posts a batch on a lane and returns at once;
//! [`Rank::ready`] says, without waiting, whether every op of it has
//! completed; [`Rank::complete`] waits for what has not (until the rank's
//! timeout), and delivers the results into the ops' buffers. A batch larger
//! than one round (more ops than the window, or more bytes than the staging
//! buffer) runs to its end inside `post`, as [`Rank::execute`] would run
//! it, and `complete` reports how it went.
//!
//! A lane's staging buffer is registered once, when the lane is made, and
//! belongs to the lane. A lane dropped with a batch in flight gives up its
//! ops' completion slots, and hands its staging buffer to the rank's
//! retired ones if any op had not ended: freed only once the endpoint has
//! closed, never while the NIC may still write it. Drop lanes before their
//! rank: a lane's registration holds the endpoint open, so a rank dropped
//! first cannot close it (it says so, and leaks what it retired rather
//! than free it).

use std::sync::{Arc, Mutex};

use super::data::{deliver, Flight};
use super::plan::Piece;
use super::Rank;
use crate::cq::CqInner;
use crate::error::{Error, Result};
use crate::mr::{MemoryRegion, Retired};
use fabkit_core::Error as CoreError;
use fabkit_core::Op;

/// Most lanes [`Rank::lanes`] suggests: each holds a registered staging
/// buffer, and past a few the fabric is kept busy already.
pub const MAX_LANES: usize = 8;

/// One batch in flight on a [`Rank`] (see the module docs); made by
/// [`Rank::lane`], used only with the rank that made it.
#[derive(Debug)]
pub struct Lane {
    /// Empty only after a failed retirement, which failed the rank.
    staging: Option<MemoryRegion>,
    cq: Arc<CqInner>,
    retired: Arc<Mutex<Vec<Retired>>>,
    pieces: Vec<Piece>,
    received: Vec<usize>,
    flight: Flight,
    to_fence: Vec<usize>,
    state: State,
    /// How many ops the batch in flight has (checked by `complete`).
    ops: usize,
}

#[derive(Debug)]
enum State {
    Idle,
    /// Posted as one round; its tickets are in `flight`.
    Posted,
    /// Ran to its end in `post` (larger than one round): its outcome.
    Settled(Option<Error>),
}

impl Drop for Lane {
    fn drop(&mut self) {
        if !matches!(self.state, State::Posted) {
            return;
        }
        let mut open = false;
        for &(t, _, _) in &self.flight.tickets {
            open |= self.cq.forget(t);
        }
        if open {
            if let Some(mr) = self.staging.take() {
                self.retired
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .push(mr.retire());
            }
        }
    }
}

impl Rank {
    /// How many lanes keep this rank's fabric busy without overrunning its
    /// completion queue: as many full windows as its slots hold, less one
    /// window to spare (a lane's completed ops hold their slots until it
    /// is completed, so lanes filling every slot could leave another
    /// caller of the rank, or an op lost to a timeout, waiting for one), 1
    /// to [`MAX_LANES`].
    pub fn lanes(&self) -> usize {
        let cq = &self.cq.inner;
        let free = cq.capacity().saturating_sub(cq.lost());
        (free / self.cfg.window.max(1))
            .saturating_sub(1)
            .clamp(1, MAX_LANES)
    }

    /// A lane of its own for batches in flight, with a staging buffer of
    /// the rank's `staging_len` registered now.
    pub fn lane(&self) -> Result<Lane> {
        self.alive()?;
        Ok(Lane {
            staging: Some(self.ep.register_staging(self.cfg.staging_len)?),
            cq: self.cq.inner.clone(),
            retired: self.retired.clone(),
            pieces: Vec::new(),
            received: Vec::new(),
            flight: Flight::default(),
            to_fence: Vec::new(),
            state: State::Idle,
            ops: 0,
        })
    }

    /// Checks that `lane` is this rank's.
    fn owns(&self, lane: &Lane) -> Result<()> {
        if Arc::ptr_eq(&lane.cq, &self.cq.inner) {
            return Ok(());
        }
        Err(Error::from(CoreError::InvalidArgument(format!(
            "rank {}: a lane made by another rank",
            self.rank
        ))))
    }

    /// Stages and posts `ops` on `lane` and returns without waiting for
    /// them (see the module docs); [`Rank::complete`] then delivers their
    /// results. Every op is checked before anything is posted, as by
    /// [`Rank::execute`], and the same ordering rules hold: ops in one
    /// batch are unordered, and a Delivery write is visible to later
    /// operations once its batch has completed. Fails at once on a check, a
    /// lane that already has a batch in flight, or a failed rank; what goes
    /// wrong once posted, `complete` reports.
    pub fn post(&self, lane: &mut Lane, ops: &mut [Op<'_>]) -> Result<()> {
        self.owns(lane)?;
        if !matches!(lane.state, State::Idle) {
            return Err(Error::from(CoreError::InvalidArgument(format!(
                "rank {}: a lane with a batch in flight; complete it first",
                self.rank
            ))));
        }
        self.alive()?;
        let staging_len = self.staging_of(&lane.staging)?.len();
        self.plan_pieces(ops, staging_len, &mut lane.pieces)?;
        lane.to_fence = self.fenced_peers(&lane.pieces);
        let end = self.plan_round(&mut lane.pieces, 0, staging_len);
        if end < lane.pieces.len() {
            // More than a round: run it all now, through the lane's buffer.
            let r = self.run_rounds(&mut lane.staging, ops, &mut lane.pieces);
            self.mark_fences(lane);
            lane.state = State::Settled(r.err());
            return Ok(());
        }
        let staging = self.staging_of(&lane.staging)?;
        self.start_round(staging, ops, &lane.pieces, &mut lane.flight);
        lane.ops = ops.len();
        lane.state = State::Posted;
        Ok(())
    }

    /// Whether `lane`'s batch has completed (or failed), so that
    /// [`Rank::complete`] will not wait; reads what the completion queue
    /// holds, without waiting. True for a lane with nothing in flight.
    pub fn ready(&self, lane: &Lane) -> bool {
        match lane.state {
            // The lane's own queue: a lane of another rank (refused by
            // `complete`) is asked about its own tickets, never this one's.
            State::Posted => self.settled(&lane.cq, &lane.flight),
            State::Idle | State::Settled(_) => true,
        }
    }

    /// Waits for `lane`'s batch (until the rank's timeout) and delivers its
    /// results into `ops`, which must be the ops it was posted with (their
    /// buffers may have moved, not their number or kinds). The lane is
    /// free for another batch after, whatever the outcome.
    pub fn complete(&self, lane: &mut Lane, ops: &mut [Op<'_>]) -> Result<()> {
        self.owns(lane)?;
        match std::mem::replace(&mut lane.state, State::Idle) {
            State::Idle => Err(Error::from(CoreError::InvalidArgument(format!(
                "rank {}: complete on a lane with nothing posted",
                self.rank
            )))),
            State::Settled(e) => e.map_or(Ok(()), Err),
            State::Posted => {
                lane.received.clear();
                lane.received.resize(lane.pieces.len(), 0);
                let r = self.collect(
                    &mut lane.staging,
                    &lane.pieces,
                    &mut lane.flight,
                    &mut lane.received,
                );
                self.mark_fences(lane);
                r?;
                // Every piece must land where its op has room: the same
                // number of ops, each of its kind and length.
                let same = ops.len() == lane.ops
                    && lane.pieces.iter().all(|p| {
                        let op = &ops[p.op];
                        // A receive's piece has a byte of room past its
                        // buffer (see `deliver`).
                        let room = usize::from(p.kind == fabkit_core::OpKind::Recv);
                        (op.kind() == p.kind || p.read_back)
                            && op.len() + room >= p.user_off + p.len
                    });
                if !same {
                    return Err(Error::from(CoreError::InvalidArgument(format!(
                        "rank {}: complete with {} ops, not the {} posted on the lane (or of \
                         other kinds or lengths); their results are lost",
                        self.rank,
                        ops.len(),
                        lane.ops
                    ))));
                }
                let staging = self.staging_of(&lane.staging)?;
                deliver(staging, ops, &lane.pieces, &lane.received)
            }
        }
    }

    /// Marks the peers a completed batch of `lane` fenced (see
    /// [`Rank::execute`]).
    fn mark_fences(&self, lane: &mut Lane) {
        for &peer in &lane.to_fence {
            self.fences.mark(peer);
        }
        lane.to_fence.clear();
    }
}
