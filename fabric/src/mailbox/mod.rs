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

mod doorbell;

use std::collections::HashMap;
use std::mem::ManuallyDrop;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use fabkit_core::agree::Disagreed;
use fabkit_core::bootstrap::Bootstrap;
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
    /// When the service last took a request (ns since `born`), for its naps.
    active: AtomicU64,
    born: Instant,
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

/// What a rank tells its peers: its two endpoints' names and its
/// doorbell's (empty: none).
fn card(service: &[u8], client: &[u8], bell: &str) -> Vec<u8> {
    let mut v = Vec::new();
    for part in [service, client] {
        v.extend_from_slice(&(part.len() as u32).to_le_bytes());
        v.extend_from_slice(part);
    }
    v.extend_from_slice(bell.as_bytes());
    v
}

/// A card's service and client names and doorbell name.
fn read_card(b: &[u8], rank: usize) -> Result<(&[u8], &[u8], &str)> {
    let bad = || {
        Error::from(CoreError::Bootstrap(format!(
            "rank {rank} sent a malformed mailbox card"
        )))
    };
    let mut rest = b;
    let mut part = || -> Result<&[u8]> {
        let n = rest
            .get(..4)
            .map(|w| u32::from_le_bytes(w.try_into().expect("4 bytes")) as usize)
            .ok_or_else(bad)?;
        let (name, after) = rest
            .get(4..)
            .filter(|r| r.len() >= n)
            .map(|r| r.split_at(n))
            .ok_or_else(bad)?;
        rest = after;
        Ok(name)
    };
    let (service, client) = (part()?, part()?);
    let bell = std::str::from_utf8(rest).map_err(|_| bad())?;
    Ok((service, client, bell))
}

impl Mailbox {
    /// Opens the provider for tagged messages with their sources, two
    /// endpoints, and exchanges their names with every rank through `boot`;
    /// posts the service's request receives. Collective.
    pub fn establish(mut cfg: MailboxConfig, boot: &dyn Bootstrap) -> Result<Mailbox> {
        cfg.timeout = crate::env::scaled(cfg.timeout);
        if cfg.slots == 0 || cfg.max_msg == 0 {
            return Err(Error::from(CoreError::InvalidArgument(
                "a mailbox needs at least one request slot and messages of at least 1 B".into(),
            )));
        }
        let mut hints = Hints::new(cfg.provider.clone(), Caps::MESSAGES);
        hints.domain = cfg.domain.clone();
        let same_host = boot.same_host()?;
        let info = info::find(&hints, same_host)?;
        crate::env::check_ranks(&info.provider(), boot.size())?;
        let fabric = Fabric::open(&info)?;
        let domain = Domain::open(&fabric, &info)?;
        let depth = (cfg.slots * 2).max(256);
        let av = AddressVector::open(&domain)?;
        let scq = CompletionQueue::open_with_sources(&domain, depth)?;
        let ccq = CompletionQueue::open(&domain, depth)?;
        let sep = Endpoint::open(&domain, &scq, &av)?;
        let cep = Endpoint::open(&domain, &ccq, &av)?;
        // No wait object: an idle service sleeps on a doorbell its callers
        // ring, which reaches ranks of this host (as shm does).
        let bell = (!scq.can_block() && same_host)
            .then(Doorbell::create)
            .transpose()?;
        let bell_name = bell.as_ref().map_or("", |b| b.name());
        let cards = boot.allgather(&card(sep.name(), cep.name(), bell_name))?;
        let mut named = Vec::with_capacity(cards.len());
        for (r, c) in cards.iter().enumerate() {
            let (s, c, b) = read_card(c, r)?;
            av.check_name(s, Some(r))?;
            av.check_name(c, Some(r))?;
            named.push((s, c, b));
        }
        let mut own = bell;
        let bells = named
            .iter()
            .enumerate()
            .map(|(r, &(_, _, b))| match r == boot.rank() {
                true => Ok(own.take()),
                false if b.is_empty() => Ok(None),
                false => Doorbell::open(b).map(Some),
            })
            .collect::<Result<Vec<_>>>()?;
        let mut peers = Vec::with_capacity(named.len());
        let mut members = HashMap::new();
        for (r, (s, c, _)) in named.into_iter().enumerate() {
            let p = Peer {
                service: av.insert_from(s, Some(r))?,
                client: av.insert_from(c, Some(r))?,
            };
            members.insert(p.client, r);
            peers.push(p);
        }
        let max = cfg.max_msg.min(info.max_msg_size());
        let inner = Arc::new(Inner {
            posted: Mutex::new(Vec::new()),
            spare: Mutex::new(Vec::new()),
            retired: Mutex::new(Vec::new()),
            service: Side {
                ep: ManuallyDrop::new(sep),
                cq: scq,
            },
            client: Side {
                ep: ManuallyDrop::new(cep),
                cq: ccq,
            },
            peers,
            members,
            _av: av,
            regions_first: info.mr_mode() & ffi::FI_MR_ENDPOINT != 0,
            domain,
            _fabric: fabric,
            info,
            rank: boot.rank(),
            max,
            woken: AtomicBool::new(false),
            active: AtomicU64::new(0),
            born: Instant::now(),
            counts: Mutex::new(MailboxCounts::default()),
            cfg,
            bells,
        });
        {
            let mut posted = inner.posted.lock().unwrap();
            for _ in 0..inner.cfg.slots {
                let buf = inner.service.ep.register_local(inner.max)?;
                posted.push(Some(inner.post_request_recv(buf)?));
            }
        }
        let mb = Mailbox { inner };
        // Before anyone may send (the agreement below is the barrier every
        // rank waits in): the service's only request is this rank's own.
        let probed = mb.check_sources();
        let local = probed.as_ref().map(|()| &[][..]).map_err(|e| e.to_string());
        match fabkit_core::agree::agree(boot, local.as_ref().map_err(|e| e.as_str()).copied()) {
            Ok(_) => {}
            // Every rank fails alike: its own error if it had one, else
            // the first rank's that did.
            Err(Disagreed::Failed(why)) => {
                probed?;
                let (rank, msg) = &why[0];
                return Err(Error::from(CoreError::Bootstrap(format!(
                    "rank {rank} could not set up its mailbox: {msg}"
                ))));
            }
            Err(e) => return Err(Error::from(CoreError::Bootstrap(e.to_string()))),
        }
        // Every rank has mapped this one's doorbell: its name can go.
        if let Some(b) = &mb.inner.bells[mb.inner.rank] {
            b.unlink();
        }
        Ok(mb)
    }

    /// Sends this rank's service one request from its own client endpoint
    /// and checks that the service sees where it came from (`FI_SOURCE`):
    /// the only way the service tells members from strangers. `udp;ofi_rxd`
    /// (1.17) reports another address, so every request would be refused
    /// as a stranger's and every call would time out.
    fn check_sources(&self) -> Result<()> {
        const PROBE: &[u8] = b"fabkit mailbox: who sent this?";
        let i = &self.inner;
        let me = i.peer(i.rank)?;
        let seen = std::cell::Cell::new(None);
        let mut take = |from: Option<usize>, bytes: &[u8]| {
            if bytes == PROBE {
                seen.set(Some(from));
            }
        };
        let sent =
            i.send_progressing(&i.client, me.service, REQUEST, PROBE, i.rank, &mut || {
                self.serve(Duration::ZERO, &mut take).map(drop)
            })?;
        let deadline = Instant::now() + i.cfg.timeout;
        // Both sides progressed until the request is in and its send
        // complete: a provider that carries messages in software (`ofi_rxd`)
        // moves the send only when the client's side is progressed, and
        // one that completes a send only once its receiver has progressed
        // (`ofi_rxm`) needs the service's side.
        let client = &i.client.cq.inner;
        while (seen.get().is_none() || !client.settled(sent.t)) && Instant::now() < deadline {
            client.drive(Duration::ZERO);
            let left = deadline.saturating_duration_since(Instant::now());
            self.serve(left.min(Duration::from_millis(1)), &mut take)?;
        }
        let settled = i.settle(&i.client, sent, Instant::now(), OpKind::Send, i.rank);
        *i.counts.lock().unwrap() = MailboxCounts::default();
        let settled = match (seen.get(), settled) {
            (Some(_), Err(e)) => return Err(e),
            (_, s) => s,
        };
        match seen.get() {
            Some(Some(r)) if r == i.rank => Ok(()),
            Some(_) => Err(Error::Unsupported {
                provider: i.info.provider(),
                what: "messages whose sender the receiver can tell (FI_SOURCE gave another \
                       address for this rank's own request)"
                    .into(),
                hint: "the message path needs it: use shm, tcp;ofi_rxm or sockets, or the \
                       rma path"
                    .into(),
            }),
            None => Err(Error::from(CoreError::Bootstrap(format!(
                "rank {}: a request to its own mailbox did not arrive within {:?} (its send: {})",
                i.rank,
                i.cfg.timeout,
                settled.map_or_else(|e| e.to_string(), |()| "completed".into())
            )))),
        }
    }

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
                i.active
                    .store(i.born.elapsed().as_nanos() as u64, Ordering::Relaxed);
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
            let idle = i
                .born
                .elapsed()
                .saturating_sub(Duration::from_nanos(i.active.load(Ordering::Relaxed)));
            if idle < HOT {
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

impl Inner {
    /// Wakes rank `to`'s service if it sleeps on its doorbell.
    fn ring(&self, to: usize) {
        if let Some(Some(bell)) = self.bells.get(to) {
            bell.ring();
        }
    }

    /// Whether a request receive has completed and waits to be taken.
    fn requests_waiting(&self) -> bool {
        let posted = self.posted.lock().unwrap();
        posted
            .iter()
            .flatten()
            .any(|p| self.service.cq.inner.settled(p.t))
    }

    /// Whether a wake-up was asked (left for `serve` to take).
    fn woken_now(&self) -> bool {
        self.woken.load(Ordering::Acquire)
    }

    fn peer(&self, rank: usize) -> Result<Peer> {
        self.peers.get(rank).copied().ok_or_else(|| {
            Error::from(CoreError::NoSuchRank {
                peer: rank,
                ranks: self.peers.len(),
            })
        })
    }

    fn check_len(&self, len: usize, peer: usize) -> Result<()> {
        if len > self.max {
            return Err(Error::from(CoreError::InvalidArgument(format!(
                "a message of {len} B to rank {peer}: more than the {} B a message carries",
                self.max
            ))));
        }
        Ok(())
    }

    /// A buffer of the largest message, spare or newly registered.
    fn buffer(&self, side: &Side) -> Result<MemoryRegion> {
        if let Some(b) = self.spare.lock().unwrap().pop() {
            return Ok(b);
        }
        side.ep.register_local(self.max)
    }

    /// Posts a receive of a request into `buf` on the service endpoint.
    fn post_request_recv(&self, buf: MemoryRegion) -> Result<Posted> {
        let deadline = Instant::now() + self.cfg.timeout;
        let (ep, b, desc, len) = (self.service.ep.raw(), buf.ptr_at(0), buf.desc(), self.max);
        let t = self
            .service
            .ep
            .post(OpKind::Recv, self.rank, deadline, self.cfg.timeout, |ctx| {
                // SAFETY: b has room for len bytes and stays alive in
                // `posted` (or retired) until the receive completes or the
                // endpoint closes; ctx is a reserved slot.
                unsafe {
                    ffi::fi_trecv(
                        ep,
                        b.cast(),
                        len,
                        desc,
                        ffi::FI_ADDR_UNSPEC,
                        REQUEST,
                        0,
                        ctx,
                    )
                }
            });
        match t {
            Ok(t) => Ok(Posted { t, buf }),
            Err(e) => {
                self.spare.lock().unwrap().push(buf);
                Err(e)
            }
        }
    }

    /// Copies `data` into a buffer and posts its send with `tag` to `addr`
    /// (`peer` names it in errors).
    fn send(
        &self,
        side: &Side,
        addr: FiAddr,
        tag: u64,
        data: &[u8],
        peer: usize,
    ) -> Result<Posted> {
        self.send_progressing(side, addr, tag, data, peer, &mut || Ok(()))
    }

    /// [`Inner::send`], calling `between` whenever the provider refuses the
    /// post for now (-FI_EAGAIN): what else must progress before it takes
    /// it (`shm` refuses a first send to an endpoint until that endpoint
    /// has taken the connection request).
    fn send_progressing(
        &self,
        side: &Side,
        addr: FiAddr,
        tag: u64,
        data: &[u8],
        peer: usize,
        between: &mut dyn FnMut() -> Result<()>,
    ) -> Result<Posted> {
        let buf = self.buffer(side)?;
        if let Err(e) = buf.fill(0, data) {
            self.spare.lock().unwrap().push(buf);
            return Err(e);
        }
        let deadline = Instant::now() + self.cfg.timeout;
        let (ep, b, desc, len) = (side.ep.raw(), buf.ptr_at(0), buf.desc(), data.len());
        let mut room = Room::default();
        let posted = loop {
            let attempt = side
                .ep
                .try_post(OpKind::Send, peer, deadline, self.cfg.timeout, |ctx| {
                    // SAFETY: b holds len staged bytes that stay untouched
                    // until the send completes (or the buffer is
                    // retired); ctx is a reserved slot.
                    unsafe { ffi::fi_tsend(ep, b.cast(), len, desc, addr, tag, ctx) }
                });
            match attempt {
                Ok(Attempt::Posted(t)) => break Ok(t),
                Ok(Attempt::Refused) => {
                    if let Err(e) = between().and_then(|()| {
                        side.ep
                            .make_room(&mut room, OpKind::Send, peer, deadline, self.cfg.timeout)
                    }) {
                        break Err(e);
                    }
                }
                Err(e) => break Err(e),
            }
        };
        match posted {
            Ok(t) => Ok(Posted { t, buf }),
            Err(e) => {
                self.spare.lock().unwrap().push(buf);
                Err(e)
            }
        }
    }

    /// Waits for a send until `deadline`; its buffer goes back to the spares,
    /// or is retired if the send did not complete.
    fn settle(
        &self,
        side: &Side,
        p: Posted,
        deadline: Instant,
        op: OpKind,
        peer: usize,
    ) -> Result<()> {
        let start = Instant::now();
        match side.cq.inner.wait(p.t, deadline) {
            Outcome::Done { .. } => {
                self.spare.lock().unwrap().push(p.buf);
                Ok(())
            }
            Outcome::Failed { code, prov_errno } => {
                self.spare.lock().unwrap().push(p.buf);
                Err(Error::completion(op, peer, code, prov_errno))
            }
            Outcome::TimedOut => {
                side.ep.cancel(p.t);
                self.retire(p.buf);
                Err(Error::from(CoreError::Timeout {
                    op,
                    peer,
                    timeout: deadline.saturating_duration_since(start),
                }))
            }
            Outcome::CqFailed { call, code } => {
                side.ep.cancel(p.t);
                self.retire(p.buf);
                Err(Error::completion_queue(op, peer, call, code))
            }
        }
    }

    /// Hands every request that has arrived to `f` and reposts its receive.
    fn take_requests(
        &self,
        f: &mut dyn FnMut(Option<usize>, &[u8]),
        bytes: &mut Vec<u8>,
    ) -> Result<usize> {
        let mut handed = 0;
        let mut posted = self.posted.lock().unwrap();
        for slot in posted.iter_mut() {
            let Some(p) = slot.as_ref() else { continue };
            let Some((out, src)) = self.service.cq.inner.take(p.t) else {
                continue;
            };
            let p = slot.take().expect("checked above");
            match out {
                Outcome::Done { len } => {
                    bytes.resize(len.min(self.max), 0);
                    p.buf.snapshot(0, bytes)?;
                    let from = self.members.get(&src).copied();
                    {
                        let mut c = self.counts.lock().unwrap();
                        c.requests += 1;
                        c.strangers += u64::from(from.is_none());
                    }
                    f(from, bytes);
                    handed += 1;
                }
                Outcome::Failed { code, .. } => {
                    let mut c = self.counts.lock().unwrap();
                    if code == ffi::FI_ETRUNC as i32 {
                        c.oversized += 1;
                    } else {
                        c.failed += 1;
                    }
                }
                Outcome::TimedOut | Outcome::CqFailed { .. } => {
                    unreachable!("take reports completions only")
                }
            }
            *slot = Some(self.post_request_recv(p.buf)?);
        }
        Ok(handed)
    }

    /// An operation on `p` will not be waited for: cancel it, and keep its
    /// buffer until the endpoint closes unless it has already ended.
    fn give_up(&self, side: &Side, p: Posted) {
        side.ep.cancel(p.t);
        if side.cq.inner.forget(p.t) {
            self.retire(p.buf);
        } else {
            self.spare.lock().unwrap().push(p.buf);
        }
    }

    fn retire(&self, buf: MemoryRegion) {
        self.retired.lock().unwrap().push(buf.retire());
    }
}

impl Drop for Inner {
    fn drop(&mut self) {
        // The request receives are in flight: their buffers are retired, and
        // freed only once the endpoints have closed.
        let posted: Vec<Posted> = std::mem::take(&mut *self.posted.lock().unwrap())
            .into_iter()
            .flatten()
            .collect();
        let mut retired = std::mem::take(&mut *self.retired.lock().unwrap());
        retired.extend(posted.into_iter().map(|p| p.buf.retire()));
        // Spare buffers have nothing in flight.
        drop(std::mem::take(&mut *self.spare.lock().unwrap()));
        let mut closed = true;
        if self.regions_first {
            for r in &mut retired {
                closed &= r.close_registration().is_ok();
            }
        }
        // SAFETY: each endpoint is taken exactly once, here, and not used
        // after; no region of ours holds it any more (spares dropped,
        // in-flight ones retired).
        let eps = unsafe {
            [
                ManuallyDrop::take(&mut self.service.ep),
                ManuallyDrop::take(&mut self.client.ep),
            ]
        };
        for ep in eps {
            closed = closed
                && match Arc::try_unwrap(ep.inner) {
                    Ok(ep) => ep.close().is_ok(),
                    Err(shared) => {
                        drop(shared);
                        false
                    }
                };
        }
        if !self.regions_first && closed {
            for r in &mut retired {
                closed &= r.close_registration().is_ok();
            }
        }
        if closed {
            for r in retired {
                // SAFETY: the endpoints every operation on these buffers was
                // posted on have closed (fi_close returned 0).
                unsafe { r.free() };
            }
        } else if !retired.is_empty() {
            fabkit_core::notice::notice(format_args!(
                "mailbox of rank {}: a close failed, so {} buffer(s) the provider may still \
                 write are leaked, not freed",
                self.rank,
                retired.len()
            ));
        }
        let _ = &self.domain;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_card_carries_both_names_and_the_bell_and_a_torn_one_is_refused() {
        let c = card(b"service-name", b"client", "fabkit.bell");
        let (s, k, b) = read_card(&c, 3).unwrap();
        assert_eq!(
            (s, k, b),
            (&b"service-name"[..], &b"client"[..], "fabkit.bell")
        );
        let none = card(b"s", b"c", "");
        assert_eq!(read_card(&none, 3).unwrap().2, "");
        assert!(read_card(&c[..2], 3).is_err());
        assert!(read_card(&c[..20], 3).is_err());
        let mut long = c.clone();
        long[..4].copy_from_slice(&1000u32.to_le_bytes());
        let e = read_card(&long, 3).unwrap_err();
        assert!(e.to_string().contains("rank 3"), "{e}");
    }

    #[test]
    fn reply_tags_never_match_the_request_tag() {
        for id in [0, 1, u64::MAX, REQUEST, REQUEST | 5] {
            assert_ne!(reply_tag(id), REQUEST);
            assert_eq!(reply_tag(id) & REQUEST, 0);
        }
    }
}
