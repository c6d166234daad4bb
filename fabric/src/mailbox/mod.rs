//! Request and reply messages between the ranks of a job, with no memory
//! exposed to peers: the DHT's message path, where one request carries a
//! batch of keys to their owner and one reply brings back every outcome.
//!
//! Each rank has two endpoints on one domain and address vector: a service
//! endpoint, whose receives of requests (tag [`REQUEST`], any source) are
//! posted ahead and read by one serving thread, and a client endpoint, from
//! which callers send requests and receive replies (tagged with the
//! request's id, from the owner's service endpoint alone:
//! `FI_DIRECTED_RECV`). Each has its own completion queue, so the serving
//! thread, which blocks in the kernel on its queue's wait object where the
//! provider has one, never hands completions to callers or back.
//!
//! Requests come with their sender's address (`FI_SOURCE`): one that is not
//! a client endpoint of this job reaches the serving thread as a stranger
//! (`None`), whatever it claims to be. Buffers are registered for sending
//! and receiving only; no peer can read or write them. A message longer
//! than the buffer posted for it is an error (`FI_ETRUNC`), never cut.
//!
//! An idle service sleeps in the kernel: in `fi_cq_sread` where its queue
//! has a wait object (`tcp;ofi_rxm`, `sockets`), and otherwise (`shm`) on
//! a doorbell, a futex word in shared memory that callers on the host ring
//! after posting a request (see `doorbell`). Without either (no wait
//! object and ranks on several hosts) it naps, 20 µs doubling to
//! [`SERVE_NAP_MAX`].
//!
//! Files: this one has the types and what callers and the service do;
//! `setup` the collective set-up and the sender check; `inner` what both
//! sides share underneath (buffers, posting, sending, settling, closing);
//! `doorbell` the futex word.

mod doorbell;
mod inner;
mod setup;

use std::collections::HashMap;
use std::mem::ManuallyDrop;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use fabkit_core::agree::Disagreed;
use fabkit_core::bootstrap::Bootstrap;
use fabkit_core::time::Moment;
use fabkit_core::Error as CoreError;
use fabkit_core::OpKind;
use fabric_sys as ffi;

use crate::av::{AddressVector, FiAddr};
use crate::cq::{CompletionQueue, Outcome, Ticket, HOT};
use crate::domain::{Domain, Fabric};
use crate::ep::{Attempt, Endpoint, Room};
use crate::error::{Error, Result};
use crate::info::{self, Caps, Hints, Info};
use crate::mr::{MemoryRegion, Retired};
use doorbell::Doorbell;

/// The tag of every request; replies are tagged with their request's id,
/// which never has this bit.
pub const REQUEST: u64 = 1 << 63;

/// The tag of the reply to request `id`.
fn reply_tag(id: u64) -> u64 {
    id & !REQUEST
}

/// How to set up a mailbox.
#[derive(Clone, Debug)]
pub struct MailboxConfig {
    /// libfabric provider.
    pub provider: String,
    /// Domain: an interface, a device or a network (`-d`).
    pub domain: Option<String>,
    /// The longest wait for a message's send (and a reply, unless the
    /// caller gives a deadline).
    pub timeout: Duration,
    /// The longest message either way.
    pub max_msg: usize,
    /// Requests the service endpoint has receives posted for at once.
    pub slots: usize,
}

impl MailboxConfig {
    /// `provider` with the defaults: 64 KiB messages, 64 request slots, a
    /// 10 s timeout.
    pub fn new(provider: impl Into<String>) -> Self {
        MailboxConfig {
            provider: provider.into(),
            domain: None,
            timeout: Duration::from_secs(10),
            max_msg: 64 << 10,
            slots: 64,
        }
    }
}

/// What the service saw, counted.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct MailboxCounts {
    /// Requests handed to the server.
    pub requests: u64,
    /// Of those, from an address not in the job.
    pub strangers: u64,
    /// Requests longer than a receive buffer: dropped.
    pub oversized: u64,
    /// Request receives that failed otherwise: dropped.
    pub failed: u64,
}

/// A peer's two endpoints, as this rank addresses them.
#[derive(Clone, Copy, Debug)]
struct Peer {
    service: FiAddr,
    client: FiAddr,
}

/// One side of the rank: an endpoint and its completion queue.
struct Side {
    ep: ManuallyDrop<Endpoint>,
    cq: CompletionQueue,
}

/// A request receive posted on the service endpoint.
struct Posted {
    t: Ticket,
    buf: MemoryRegion,
}

struct Inner {
    /// Request receives in flight on the service endpoint.
    posted: Mutex<Vec<Option<Posted>>>,
    /// Buffers no operation is using, for sends and replies.
    spare: Mutex<Vec<MemoryRegion>>,
    /// Buffers an operation that did not complete may still write: kept
    /// until the endpoints close.
    retired: Mutex<Vec<Retired>>,
    service: Side,
    client: Side,
    peers: Vec<Peer>,
    /// Client endpoint addresses of the job, to their ranks.
    members: HashMap<FiAddr, usize>,
    _av: AddressVector,
    domain: Domain,
    _fabric: Fabric,
    info: Info,
    rank: usize,
    max: usize,
    cfg: MailboxConfig,
    /// A wake-up asked of a waiting `serve`.
    woken: AtomicBool,
    /// When the service last took a request, for its naps.
    active: Moment,
    counts: Mutex<MailboxCounts>,
    /// Close registrations before endpoints (`FI_MR_ENDPOINT`).
    regions_first: bool,
    /// Each rank's service doorbell, where its queue has no wait object
    /// and every rank is on this host; this rank's own included.
    bells: Vec<Option<Doorbell>>,
}

/// Request and reply messages between the ranks of a job (see the module).
#[derive(Clone)]
#[doc(alias = "fi_tsend")]
pub struct Mailbox {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for Mailbox {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Mailbox")
            .field("rank", &self.inner.rank)
            .field("ranks", &self.inner.peers.len())
            .field("provider", &self.inner.info.provider())
            .finish()
    }
}

/// A call in flight: the reply's receive, posted before the request went
/// out, and the request's send. Dropped unwaited, its buffers are retired
/// (a late reply may still land in them).
pub struct Call {
    inner: Arc<Inner>,
    to: usize,
    id: u64,
    recv: Option<Posted>,
    send: Option<Posted>,
}

impl std::fmt::Debug for Call {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Call(to rank {}, request {})", self.to, self.id)
    }
}

impl Drop for Call {
    fn drop(&mut self) {
        for p in [self.recv.take(), self.send.take()].into_iter().flatten() {
            self.inner.give_up(&self.inner.client, p);
        }
    }
}

impl Mailbox {
    /// This rank.
    pub fn rank(&self) -> usize {
        self.inner.rank
    }

    /// Ranks in the job.
    pub fn ranks(&self) -> usize {
        self.inner.peers.len()
    }

    /// The longest message either way.
    pub fn max_len(&self) -> usize {
        self.inner.max
    }

    /// The provider in use.
    pub fn provider(&self) -> String {
        self.inner.info.provider()
    }

    /// The domain in use.
    pub fn domain_name(&self) -> String {
        self.inner.info.domain_name()
    }

    /// Whether an idle service waits in the kernel, on its completion
    /// queue's wait object or (`shm`) on its doorbell, rather than polling
    /// with naps.
    pub fn waits_block(&self) -> bool {
        self.inner.service.cq.can_block() || self.inner.bells[self.inner.rank].is_some()
    }

    /// Test hook: whether rank `to`'s service sleeps on its doorbell now
    /// (`None`: it has none).
    #[doc(hidden)]
    pub fn service_sleeps(&self, to: usize) -> Option<bool> {
        self.inner.bells.get(to)?.as_ref().map(Doorbell::is_asleep)
    }

    /// What the service has seen so far.
    pub fn counts(&self) -> MailboxCounts {
        *self.inner.counts.lock().unwrap()
    }

    /// The service endpoint's name: what a peer sends requests to. For
    /// tests that play a stranger who learnt it.
    #[doc(hidden)]
    pub fn service_name(&self) -> Vec<u8> {
        self.inner.service.ep.name().to_vec()
    }

    /// Sends `request` to a peer whose service endpoint has `name` (not a
    /// rank of this job), without waiting for an answer: a stranger's
    /// request, for tests of the service's refusals.
    #[doc(hidden)]
    pub fn send_to_name(&self, name: &[u8], request: &[u8]) -> Result<()> {
        let i = &self.inner;
        let addr = i._av.insert(name)?;
        let p = i.send(&i.client, addr, REQUEST, request, 0)?;
        i.settle(
            &i.client,
            p,
            Instant::now() + i.cfg.timeout,
            OpKind::Send,
            0,
        )
    }

    /// Sends `request` to rank `to`'s service, after posting a receive for
    /// its reply (tagged `id`, from `to`'s service endpoint alone).
    pub fn call(&self, to: usize, id: u64, request: &[u8]) -> Result<Call> {
        let i = &self.inner;
        let peer = i.peer(to)?;
        i.check_len(request.len(), to)?;
        let buf = i.buffer(&i.client)?;
        let deadline = Instant::now() + i.cfg.timeout;
        let (ep, b, desc, len) = (i.client.ep.raw(), buf.ptr_at(0), buf.desc(), i.max);
        let t = i
            .client
            .ep
            .post(OpKind::Recv, to, deadline, i.cfg.timeout, |ctx| {
                // SAFETY: b has room for len bytes and stays alive (owned by the
                // Call, or retired) until the receive completes or the endpoint
                // closes; ctx is a reserved slot.
                unsafe {
                    ffi::fi_trecv(ep, b.cast(), len, desc, peer.service, reply_tag(id), 0, ctx)
                }
            });
        let recv = match t {
            Ok(t) => Posted { t, buf },
            Err(e) => {
                i.spare.lock().unwrap().push(buf);
                return Err(e);
            }
        };
        let mut call = Call {
            inner: i.clone(),
            to,
            id,
            recv: Some(recv),
            send: None,
        };
        // The owner's doorbell rings once the request is in its queue, and
        // whenever the post is refused until then (shm refuses a first
        // send until the owner has taken the connection request, which a
        // sleeping owner never does).
        call.send =
            Some(
                i.send_progressing(&i.client, peer.service, REQUEST, request, to, &mut || {
                    i.ring(to);
                    Ok(())
                })?,
            );
        i.ring(to);
        Ok(call)
    }

    /// Whether `call`'s reply has come (reading the client's completions
    /// once, never waiting).
    pub fn ready(&self, call: &Call) -> bool {
        let cq = &self.inner.client.cq.inner;
        cq.drive(Duration::ZERO);
        call.recv.as_ref().is_some_and(|p| cq.settled(p.t))
    }

    /// Waits until `deadline` for `call`'s reply and hands its bytes to
    /// `f`. A reply that does not come is an error naming the peer and the
    /// request (its buffer is retired: a late reply may still land there);
    /// one longer than the buffer is an error naming the sizes.
    pub fn wait_reply<R>(
        &self,
        mut call: Call,
        deadline: Instant,
        f: impl FnOnce(&[u8]) -> R,
    ) -> Result<R> {
        let i = &self.inner;
        let to = call.to;
        if let Some(p) = call.send.take() {
            i.settle(&i.client, p, deadline, OpKind::Send, to)?;
        }
        let p = call
            .recv
            .take()
            .expect("a call has its receive until waited");
        let start = Instant::now();
        match i.client.cq.inner.wait(p.t, deadline) {
            Outcome::Done { len } => {
                let mut bytes = vec![0u8; len.min(i.max)];
                let copied = p.buf.snapshot(0, &mut bytes);
                i.spare.lock().unwrap().push(p.buf);
                copied?;
                Ok(f(&bytes))
            }
            Outcome::Failed { code, prov_errno } => {
                i.spare.lock().unwrap().push(p.buf);
                Err(if code == ffi::FI_ETRUNC as i32 {
                    Error::TooLong {
                        what: format!("reply from rank {to} to request {}", call.id),
                        len: None,
                        limit: i.max,
                        room: "buffer posted for it".into(),
                    }
                } else {
                    Error::completion(OpKind::Recv, to, code, prov_errno)
                })
            }
            Outcome::TimedOut => {
                i.client.ep.cancel(p.t);
                i.retire(p.buf);
                Err(Error::from(CoreError::Timeout {
                    op: OpKind::Recv,
                    peer: to,
                    timeout: deadline.saturating_duration_since(start),
                }))
            }
            Outcome::CqFailed { call, code } => {
                i.client.ep.cancel(p.t);
                i.retire(p.buf);
                Err(Error::completion_queue(OpKind::Recv, to, call, code))
            }
        }
    }

    /// Waits up to `wait` for requests and hands each to `f` with the rank
    /// it came from (`None`: an address not in the job); how many it
    /// handed. Blocks in the kernel where the service's completion queue
    /// has a wait object; without one (`shm`), it polls, yielding the core
    /// for a millisecond after the last request, then sleeps on its
    /// doorbell until a caller rings (ranks on one host), or naps growing
    /// to [`SERVE_NAP_MAX`] (a request then waits at most a nap). One
    /// thread serves.
    pub fn serve(&self, wait: Duration, f: &mut dyn FnMut(Option<usize>, &[u8])) -> Result<usize> {
        let i = &self.inner;
        let deadline = Instant::now() + wait;
        let mut nap = Duration::from_micros(20);
        let mut bytes = Vec::with_capacity(i.max);
        loop {
            let handed = i.take_requests(f, &mut bytes)?;
            if handed > 0 {
                i.active.mark();
                return Ok(handed);
            }
            if i.woken.swap(false, Ordering::AcqRel) {
                return Ok(0);
            }
            let now = Instant::now();
            if now >= deadline {
                // A zero wait still progresses the queue once.
                if wait.is_zero() && i.service.cq.inner.drive(Duration::ZERO) > 0 {
                    return i.take_requests(f, &mut bytes);
                }
                return Ok(0);
            }
            let left = deadline - now;
            let cq = &i.service.cq.inner;
            if cq.can_block() {
                cq.drive(left.min(Duration::from_millis(100)));
                continue;
            }
            cq.drive(Duration::ZERO);
            if i.active.since() < HOT {
                std::thread::yield_now();
            } else if let Some(bell) = &i.bells[i.rank] {
                // Quiet: sleep until a caller rings, unless a request came
                // in since the read above (see `doorbell`).
                bell.sleep(left, || {
                    cq.drive(Duration::ZERO) == 0 && !i.requests_waiting() && !i.woken_now()
                });
            } else {
                std::thread::sleep(nap.min(left));
                nap = (nap * 2).min(SERVE_NAP_MAX);
            }
        }
    }

    /// Sends `reply` to rank `to`'s client endpoint, where its call `id`
    /// waits, and waits for the send to complete.
    pub fn answer(&self, to: usize, id: u64, reply: &[u8]) -> Result<()> {
        let i = &self.inner;
        let peer = i.peer(to)?;
        i.check_len(reply.len(), to)?;
        let p = i.send(&i.service, peer.client, reply_tag(id), reply, to)?;
        i.settle(
            &i.service,
            p,
            Instant::now() + i.cfg.timeout,
            OpKind::Send,
            to,
        )
    }

    /// Ends a `serve` that is waiting, at once.
    pub fn wake(&self) {
        self.inner.woken.store(true, Ordering::Release);
        self.inner.service.cq.inner.signal();
        self.inner.ring(self.inner.rank);
    }
}

/// The longest nap of a service polling a completion queue without a wait
/// object: a request waits at most this long for an idle service.
pub const SERVE_NAP_MAX: Duration = Duration::from_micros(250);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reply_tags_never_match_the_request_tag() {
        for id in [0, 1, u64::MAX, REQUEST, REQUEST | 5] {
            assert_ne!(reply_tag(id), REQUEST);
            assert_eq!(reply_tag(id) & REQUEST, 0);
        }
    }
}
