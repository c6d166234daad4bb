//! The message path: a batch's keys owned by a rank this one cannot reach
//! by memory go to that owner as one request message per owner; the
//! owner's service thread runs them on its own region, with the same
//! variant machine the caller would have run, and answers with one reply
//! carrying every key's outcome and the values found.
//!
//! Where a NIC executes one-sided operations, a DHT operation costs its
//! round trips and no CPU at the target. Where the target's CPU executes
//! them (libfabric's `tcp`, `sockets`, `shm` and `ofi_rxd` stacks; every
//! atomic under `ofi_rxm`, over verbs too), each one is a message the
//! target handles anyway, and a lock-free read is 1.2-1.6 of them, a
//! locked write five: one message per owner per batch costs less. The
//! table decides per owner ([`crate::Dht`] with a [`Messenger`]); the
//! variants do not know.
//!
//! - [`wire`]: the requests and replies, versioned and checked on receipt
//!   (table id, sender, sizes); pure.
//! - [`Messenger`]: the seam under the message path, as [`Transport`] is
//!   under the one-sided one: `fabkit_fabric::Mailbox` (feature `fabric`,
//!   libfabric tagged messages), `fabkit_mpi::Mailbox` (feature `mpi`, MPI
//!   point-to-point), and [`local::LocalNet`], in-process, for tests, with
//!   seeded faults (delays, reordering, duplicates, losses).
//!
//! [`Transport`]: crate::Transport

use std::time::{Duration, Instant};

#[cfg(feature = "fabric")]
mod fabric;
pub mod local;
#[cfg(feature = "mpi")]
mod mpi;
pub(crate) mod serve;
pub mod wire;

/// Request/reply messages between the ranks of a job: what the message
/// path needs from a fabric or from MPI.
///
/// A rank's requests go to another rank's service, which hands each to
/// [`Messenger::serve`]'s caller with the rank it came from; the answer
/// goes back to the caller waiting in [`Messenger::wait_reply`], matched
/// by the request's id. Several calls may be in flight from several
/// threads; one thread serves.
pub trait Messenger: Send + Sync + 'static {
    /// What a failed send, receive or wait says. It names the peer and
    /// the operation.
    type Error: std::error::Error + Send + Sync + 'static;
    /// A call in flight: the reply's receive, posted before the request
    /// went out.
    type Call: Send;

    /// This rank.
    fn rank(&self) -> usize;
    /// Ranks in the job.
    fn ranks(&self) -> usize;
    /// The longest message either way.
    fn max_len(&self) -> usize;
    /// What carries the messages, for reports ("libfabric tcp;ofi_rxm
    /// messages", "MPI point-to-point").
    fn name(&self) -> String;

    /// Sends `request` to rank `to`'s service, with a receive for its
    /// reply (`id`) posted first.
    fn call(&self, to: usize, id: u64, request: &[u8]) -> Result<Self::Call, Self::Error>;
    /// Whether `call`'s reply has come. Never waits.
    fn ready(&self, call: &Self::Call) -> bool;
    /// Waits until `deadline` for `call`'s reply and hands its bytes to
    /// `f`; past it, an error naming the peer and the request.
    fn wait_reply(
        &self,
        call: Self::Call,
        deadline: Instant,
        f: &mut dyn FnMut(&[u8]),
    ) -> Result<(), Self::Error>;

    /// Waits up to `wait` for requests and hands each to `f` with the
    /// rank it came from, or `None` when its sender is not of this job;
    /// how many it handed.
    fn serve(
        &self,
        wait: Duration,
        f: &mut dyn FnMut(Option<usize>, &[u8]),
    ) -> Result<usize, Self::Error>;
    /// Sends `reply` to the call `id` that rank `to` is waiting in.
    fn answer(&self, to: usize, id: u64, reply: &[u8]) -> Result<(), Self::Error>;
    /// Ends a [`Messenger::serve`] that is waiting, so a service stops at
    /// once rather than after its wait.
    fn wake(&self) {}
    /// Requests dropped before [`Messenger::serve`] could hand them over
    /// (longer than a receive buffer, or a receive that failed), since
    /// the start: the service counts them as refused.
    fn dropped(&self) -> u64 {
        0
    }
}

/// The messenger of a table with no message path: every rank is reached
/// through the transport. It has no value.
#[derive(Debug)]
pub enum NoMessages {}

impl Messenger for NoMessages {
    type Error = fabkit_core::Error;
    type Call = NoMessages;
    fn rank(&self) -> usize {
        match *self {}
    }
    fn ranks(&self) -> usize {
        match *self {}
    }
    fn max_len(&self) -> usize {
        match *self {}
    }
    fn name(&self) -> String {
        match *self {}
    }
    fn call(&self, _: usize, _: u64, _: &[u8]) -> Result<NoMessages, Self::Error> {
        match *self {}
    }
    fn ready(&self, call: &NoMessages) -> bool {
        match *call {}
    }
    fn wait_reply(
        &self,
        call: NoMessages,
        _: Instant,
        _: &mut dyn FnMut(&[u8]),
    ) -> Result<(), Self::Error> {
        match call {}
    }
    fn serve(
        &self,
        _: Duration,
        _: &mut dyn FnMut(Option<usize>, &[u8]),
    ) -> Result<usize, Self::Error> {
        match *self {}
    }
    fn answer(&self, _: usize, _: u64, _: &[u8]) -> Result<(), Self::Error> {
        match *self {}
    }
}
