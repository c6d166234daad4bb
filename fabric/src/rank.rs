//! A rank of a job: one endpoint, one exposed region, and the addresses and
//! keys of every peer's region, established through a [`Bootstrap`].
//!
//! Operations are data ([`Op`]) executed in batches with a bounded number in
//! flight. Buffers are borrowed only for the call: data is staged through a
//! registered buffer the rank owns, so a late completion after a timeout can
//! never write into memory the caller has reused (the staging buffer is then
//! retired until the endpoint closes).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use fabric_sys as ffi;
use serde::Serialize;

use crate::av::{AddressVector, FiAddr};
use crate::bootstrap::Bootstrap;
use crate::cq::{CompletionQueue, CqInner, Outcome, Ticket};
use crate::domain::{AtomicSupport, Domain, Fabric};
use crate::ep::Endpoint;
use crate::error::{Error, OpKind, Result};
use crate::info::{self, Caps, Hints, Info, Progress};
use crate::mr::{MemoryRegion, RemoteRegion};

/// Whether a rank runs a background thread that progresses its endpoint.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ProgressMode {
    /// A thread when the provider's data progress is manual (`shm`,
    /// `tcp;ofi_rxm`): otherwise peers' one-sided operations on this rank only
    /// advance while it happens to wait on its own.
    #[default]
    Auto,
    /// Always run the thread.
    Thread,
    /// Never: the application progresses by issuing operations.
    Off,
}

/// How to set up a rank.
#[derive(Clone, Debug)]
pub struct RankConfig {
    /// libfabric provider, e.g. `shm`, `tcp;ofi_rxm`, `sockets`, `verbs;ofi_rxm`.
    pub provider: String,
    /// Domain (interface or device); `None` picks one, preferring `lo` for
    /// socket providers when all ranks share a host.
    pub domain: Option<String>,
    /// Ask for atomics. Providers that emulate them (`tcp;ofi_rxm`) only
    /// offer them when asked.
    pub atomics: bool,
    /// Bytes this rank exposes to peers.
    pub region_len: usize,
    /// Bytes of the staging buffer operations are copied through; larger
    /// transfers are split.
    pub staging_len: usize,
    /// Most operations in flight at once in a batch.
    pub window: usize,
    /// Longest wait for any one batch or message.
    pub timeout: Duration,
    /// Background progress.
    pub progress: ProgressMode,
    /// Expose this shared segment as the region instead of allocating one
    /// (same-node peers map it directly; see [`crate::shm`]). Its length
    /// overrides `region_len`.
    pub shared_region: Option<std::sync::Arc<crate::shm::SharedSegment>>,
    /// Busy-poll completion queues instead of spinning briefly and then
    /// blocking. Only for benchmarks on otherwise idle cores (what fabtests
    /// and perftest do); on a busy node it starves peers.
    pub busy_poll: bool,
}

impl RankConfig {
    /// Defaults for `provider`: atomics on, 1 MiB region, 4 MiB staging,
    /// window 64, 10 s timeout, automatic progress thread.
    pub fn new(provider: impl Into<String>) -> Self {
        RankConfig {
            provider: provider.into(),
            domain: None,
            atomics: true,
            region_len: 1 << 20,
            staging_len: 4 << 20,
            window: 64,
            timeout: Duration::from_secs(10),
            progress: ProgressMode::Auto,
            shared_region: None,
            busy_poll: false,
        }
    }
}

/// An address inside another rank's exposed region.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Remote {
    /// Target rank.
    pub rank: usize,
    /// Byte offset in its region.
    pub offset: u64,
}

impl Remote {
    /// Byte `offset` of `rank`'s region.
    pub fn new(rank: usize, offset: u64) -> Self {
        Remote { rank, offset }
    }
}

/// One remote operation. Atomics act on an 8-byte-aligned u64.
#[derive(Debug)]
pub enum Op<'b> {
    /// Copy remote bytes into `into`.
    Read {
        /// Source.
        from: Remote,
        /// Destination.
        into: &'b mut [u8],
    },
    /// Copy `from` to remote memory.
    Write {
        /// Destination.
        to: Remote,
        /// Source.
        from: &'b [u8],
    },
    /// If the word equals `expected`, replace it by `new`; `old` receives the
    /// previous value either way.
    CompareAndSwap {
        /// Target word.
        at: Remote,
        /// Compared value.
        expected: u64,
        /// Stored on match.
        new: u64,
        /// Previous value.
        old: &'b mut u64,
    },
    /// Add `delta` (wrapping); `old` receives the previous value.
    FetchAdd {
        /// Target word.
        at: Remote,
        /// Added value.
        delta: u64,
        /// Previous value.
        old: &'b mut u64,
    },
    /// Atomically read the word.
    Fetch {
        /// Target word.
        at: Remote,
        /// The value read.
        value: &'b mut u64,
    },
    /// Store `new`; `old` receives the previous value.
    Swap {
        /// Target word.
        at: Remote,
        /// Stored value.
        new: u64,
        /// Previous value.
        old: &'b mut u64,
    },
    /// Send `data` as one message to rank `to`.
    Send {
        /// Destination rank.
        to: usize,
        /// Message.
        data: &'b [u8],
    },
    /// Receive one message (from any rank; `from` is the rank expected, named
    /// in errors) into `into`; `len` receives its length.
    Recv {
        /// Rank expected to send.
        from: usize,
        /// Buffer: messages longer than it are truncated.
        into: &'b mut [u8],
        /// Received length.
        len: &'b mut usize,
    },
}

impl Op<'_> {
    /// The kind of operation.
    pub fn kind(&self) -> OpKind {
        match self {
            Op::Read { .. } => OpKind::Read,
            Op::Write { .. } => OpKind::Write,
            Op::CompareAndSwap { .. } => OpKind::CompareAndSwap,
            Op::FetchAdd { .. } => OpKind::FetchAdd,
            Op::Fetch { .. } => OpKind::Fetch,
            Op::Swap { .. } => OpKind::Swap,
            Op::Send { .. } => OpKind::Send,
            Op::Recv { .. } => OpKind::Recv,
        }
    }

    /// Where the operation goes (for messages: the peer, offset 0).
    pub fn target(&self) -> Remote {
        match self {
            Op::Read { from, .. } => *from,
            Op::Write { to, .. } => *to,
            Op::CompareAndSwap { at, .. }
            | Op::FetchAdd { at, .. }
            | Op::Fetch { at, .. }
            | Op::Swap { at, .. } => *at,
            Op::Send { to, .. } => Remote::new(*to, 0),
            Op::Recv { from, .. } => Remote::new(*from, 0),
        }
    }

    /// Bytes moved (8 for the atomics).
    #[allow(clippy::len_without_is_empty)]
    pub fn len(&self) -> usize {
        match self {
            Op::Read { into, .. } | Op::Recv { into, .. } => into.len(),
            Op::Write { from, .. } | Op::Send { data: from, .. } => from.len(),
            _ => 8,
        }
    }
}

#[derive(Clone, Copy, Debug)]
struct Peer {
    addr: FiAddr,
    region: RemoteRegion,
}

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

/// Staging layout of an atomic: operand, compare value, result.
const ATOMIC_STAGE: usize = 24;

struct ProgressThread {
    stop: Arc<AtomicBool>,
    handle: Option<JoinHandle<()>>,
}

impl ProgressThread {
    fn start(cq: Arc<CqInner>, rank: usize) -> Result<Self> {
        let stop = Arc::new(AtomicBool::new(false));
        let s = stop.clone();
        let handle = std::thread::Builder::new()
            .name(format!("fabkit-progress-{rank}"))
            .spawn(move || {
                while !s.load(Ordering::Relaxed) {
                    // Blocks in the kernel (fi_cq_sread) where the provider
                    // has a wait object: progress without burning a core.
                    cq.progress_step(Duration::from_millis(20));
                }
            })
            .map_err(|source| Error::Io {
                what: "starting the progress thread".into(),
                source,
            })?;
        Ok(ProgressThread {
            stop,
            handle: Some(handle),
        })
    }
}

impl Drop for ProgressThread {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(h) = self.handle.take() {
            let _ = h.join();
        }
    }
}

/// A rank: endpoint, exposed region and every peer's address and region.
pub struct Rank {
    // Field order is drop order: stop progress, then free buffers, then close
    // the endpoint and its parents.
    progress: Option<ProgressThread>,
    staging: Mutex<MemoryRegion>,
    region: MemoryRegion,
    peers: Vec<Peer>,
    ep: Endpoint,
    cq: CompletionQueue,
    _av: AddressVector,
    domain: Domain,
    _fabric: Fabric,
    info: Info,
    atomics: AtomicSupport,
    rank: usize,
    cfg: RankConfig,
}

impl std::fmt::Debug for Rank {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Rank")
            .field("rank", &self.rank)
            .field("ranks", &self.peers.len())
            .field("provider", &self.info.provider())
            .field("domain", &self.info.domain_name())
            .finish()
    }
}

/// What a rank tells its peers at start-up.
struct Card {
    provider: String,
    name: Vec<u8>,
    region: RemoteRegion,
}

impl Card {
    fn encode(&self) -> Vec<u8> {
        let mut v = Vec::new();
        for part in [self.provider.as_bytes(), &self.name] {
            v.extend_from_slice(&(part.len() as u32).to_le_bytes());
            v.extend_from_slice(part);
        }
        for x in [self.region.base, self.region.len, self.region.key] {
            v.extend_from_slice(&x.to_le_bytes());
        }
        v
    }

    fn decode(b: &[u8], rank: usize) -> Result<Card> {
        let bad = || Error::Bootstrap(format!("rank {rank} sent a malformed address card"));
        let mut at = 0usize;
        let mut take = |n: usize| -> Result<&[u8]> {
            let s = b.get(at..at + n).ok_or_else(bad)?;
            at += n;
            Ok(s)
        };
        let mut part = || -> Result<Vec<u8>> {
            let n = u32::from_le_bytes(take(4)?.try_into().unwrap()) as usize;
            Ok(take(n)?.to_vec())
        };
        let provider = String::from_utf8(part()?).map_err(|_| bad())?;
        let name = part()?;
        let mut word = || -> Result<u64> { Ok(u64::from_le_bytes(take(8)?.try_into().unwrap())) };
        let region = RemoteRegion {
            base: word()?,
            len: word()?,
            key: word()?,
        };
        Ok(Card {
            provider,
            name,
            region,
        })
    }
}

impl Rank {
    /// Opens the provider, exposes a region and exchanges addresses with all
    /// ranks. Collective: every rank of `boot` must call it.
    pub fn establish(mut cfg: RankConfig, boot: &dyn Bootstrap) -> Result<Rank> {
        cfg.timeout = crate::env::scaled(cfg.timeout);
        if cfg.window == 0 {
            return Err(Error::InvalidArgument(
                "window must be at least 1 operation in flight".into(),
            ));
        }
        if cfg.staging_len < ATOMIC_STAGE {
            return Err(Error::InvalidArgument(format!(
                "staging buffer of {} B is too small; use at least 4096",
                cfg.staging_len
            )));
        }
        let caps = if cfg.atomics { Caps::ALL } else { Caps::RMA };
        let hints = Hints {
            provider: Some(cfg.provider.clone()),
            domain: cfg.domain.clone(),
            caps,
        };
        let same_host = boot.same_host()?;
        let info = info::find(&hints, same_host)?;
        crate::env::check_ranks(&info.provider(), boot.size())?;
        let fabric = Fabric::open(&info)?;
        let domain = Domain::open(&fabric, &info)?;
        let atomics = domain.atomic_support();
        if cfg.atomics && !atomics.all() {
            return Err(Error::Unsupported {
                provider: info.provider(),
                what: format!(
                    "u64 atomics: fi_query_atomic lacks {}",
                    atomics.missing().join(", ")
                ),
                hint: "pick a provider with atomics (shm, sockets, tcp;ofi_rxm, verbs;ofi_rxm; \
                       see `fabkit info`), or run without atomics"
                    .into(),
            });
        }
        let depth = (cfg.window * 2).max(info.tx_size().min(4096)).max(256);
        let cq = CompletionQueue::open(&domain, depth)?;
        cq.set_busy_poll(cfg.busy_poll);
        let av = AddressVector::open(&domain)?;
        let ep = Endpoint::open(&domain, &cq, &av)?;
        let region = match &cfg.shared_region {
            Some(seg) => ep.register_shared(seg.clone())?,
            None => ep.register(cfg.region_len)?,
        };
        let staging = ep.register(cfg.staging_len)?;

        let me = Card {
            provider: info.provider(),
            name: ep.name().to_vec(),
            region: region.remote(),
        };
        let cards = boot.allgather(&me.encode())?;
        let cards: Vec<Card> = cards
            .iter()
            .enumerate()
            .map(|(r, c)| Card::decode(c, r))
            .collect::<Result<_>>()?;
        if let Some((r, c)) = cards
            .iter()
            .enumerate()
            .find(|(_, c)| c.provider != me.provider)
        {
            return Err(Error::Mismatch {
                what: "the provider".into(),
                detail: format!(
                    "rank {} uses `{}`, rank {r} uses `{}`",
                    boot.rank(),
                    me.provider,
                    c.provider
                ),
            });
        }
        let peers = cards
            .iter()
            .map(|c| {
                Ok(Peer {
                    addr: av.insert(&c.name)?,
                    region: c.region,
                })
            })
            .collect::<Result<Vec<_>>>()?;
        let progress = match cfg.progress {
            ProgressMode::Thread => true,
            ProgressMode::Auto => info.data_progress() != Progress::Auto,
            ProgressMode::Off => false,
        }
        .then(|| ProgressThread::start(cq.inner.clone(), boot.rank()))
        .transpose()?;
        // Nobody may access a peer before it has inserted everyone.
        boot.barrier()?;
        Ok(Rank {
            progress,
            staging: Mutex::new(staging),
            region,
            peers,
            ep,
            cq,
            _av: av,
            domain,
            _fabric: fabric,
            info,
            atomics,
            rank: boot.rank(),
            cfg,
        })
    }

    /// This rank's number.
    pub fn rank(&self) -> usize {
        self.rank
    }

    /// Number of ranks.
    pub fn ranks(&self) -> usize {
        self.peers.len()
    }

    /// The provider configuration in use.
    pub fn info(&self) -> &Info {
        &self.info
    }

    /// The configuration this rank was set up with.
    pub fn config(&self) -> &RankConfig {
        &self.cfg
    }

    /// The u64 atomics the provider offers.
    pub fn atomic_support(&self) -> AtomicSupport {
        self.atomics
    }

    /// The memory this rank exposes. Peers may write it at any time.
    pub fn region(&self) -> &MemoryRegion {
        &self.region
    }

    /// Size of `rank`'s exposed region.
    pub fn region_len(&self, rank: usize) -> Result<usize> {
        Ok(self.peer(rank)?.region.len as usize)
    }

    /// Whether a background thread progresses this rank's endpoint.
    pub fn has_progress_thread(&self) -> bool {
        self.progress.is_some()
    }

    /// Whether waits block in the kernel (the provider's CQ has a wait
    /// object) rather than poll with short sleeps.
    pub fn waits_block(&self) -> bool {
        self.cq.can_block()
    }

    /// The access domain.
    pub fn domain(&self) -> &Domain {
        &self.domain
    }

    fn peer(&self, rank: usize) -> Result<&Peer> {
        self.peers.get(rank).ok_or(Error::NoSuchRank {
            peer: rank,
            ranks: self.peers.len(),
        })
    }

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
    fn retire(&self, staging: &mut MemoryRegion) -> Result<()> {
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

    /// Reads `into.len()` bytes at `from`.
    pub fn read(&self, from: Remote, into: &mut [u8]) -> Result<()> {
        self.execute(&mut [Op::Read { from, into }])
    }

    /// Writes `data` at `to`.
    pub fn write(&self, to: Remote, data: &[u8]) -> Result<()> {
        self.execute(&mut [Op::Write { to, from: data }])
    }

    /// Executes one atomic whose result lands in the u64 it is given.
    fn one_atomic(&self, op: impl for<'a> FnOnce(&'a mut u64) -> Op<'a>) -> Result<u64> {
        let mut out = 0;
        self.execute(&mut [op(&mut out)])?;
        Ok(out)
    }

    /// Atomic compare-and-swap; returns the previous value (the swap
    /// happened if it equals `expected`).
    pub fn compare_and_swap(&self, at: Remote, expected: u64, new: u64) -> Result<u64> {
        self.one_atomic(|old| Op::CompareAndSwap {
            at,
            expected,
            new,
            old,
        })
    }

    /// Atomic fetch-and-add; returns the previous value.
    pub fn fetch_add(&self, at: Remote, delta: u64) -> Result<u64> {
        self.one_atomic(|old| Op::FetchAdd { at, delta, old })
    }

    /// Atomic read.
    pub fn fetch(&self, at: Remote) -> Result<u64> {
        self.one_atomic(|value| Op::Fetch { at, value })
    }

    /// Atomic swap; returns the previous value.
    pub fn swap(&self, at: Remote, new: u64) -> Result<u64> {
        self.one_atomic(|old| Op::Swap { at, new, old })
    }

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
        staging: &mut MemoryRegion,
    ) -> Result<usize> {
        match self.cq.inner.wait(t, deadline) {
            Outcome::Done { len } => Ok(len),
            Outcome::Failed { code, prov_errno } => {
                Err(Error::completion(op, peer, code, prov_errno))
            }
            Outcome::TimedOut => {
                self.ep.cancel(t);
                self.retire(staging)?;
                Err(Error::Timeout { op, peer, timeout })
            }
        }
    }

    fn check_msg_len(&self, len: usize, staging_len: usize) -> Result<()> {
        let max = self.info.max_msg_size().min(staging_len);
        if len > max {
            return Err(Error::InvalidArgument(format!(
                "message of {len} B exceeds the limit of {max} B (provider max_msg_size {}, \
                 staging {} B)",
                self.info.max_msg_size(),
                staging_len
            )));
        }
        Ok(())
    }

    /// Sends `data` to rank `to` and waits for local completion.
    pub fn send(&self, to: usize, data: &[u8]) -> Result<()> {
        let peer = *self.peer(to)?;
        let mut staging = self.staging.lock().unwrap();
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
        self.settle(
            t,
            deadline,
            self.cfg.timeout,
            OpKind::Send,
            to,
            &mut staging,
        )
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
    pub fn recv_within(&self, from: usize, buf: &mut [u8], timeout: Duration) -> Result<usize> {
        self.peer(from)?;
        let mut staging = self.staging.lock().unwrap();
        self.check_msg_len(buf.len(), staging.len())?;
        let deadline = Instant::now() + timeout;
        let (ep, sbuf, desc) = (self.ep.raw(), staging.ptr_at(0).cast(), staging.desc());
        let len = buf.len();
        let t = self.ep.post(OpKind::Recv, from, deadline, timeout, |ctx| {
            // SAFETY: sbuf has room for len bytes and stays alive until the
            // receive completes or the buffer is retired.
            unsafe { ffi::fi_recv(ep, sbuf, len, desc, ffi::FI_ADDR_UNSPEC, ctx) }
        })?;
        let got = self
            .settle(t, deadline, timeout, OpKind::Recv, from, &mut staging)?
            .min(len);
        staging.snapshot(0, &mut buf[..got])?;
        Ok(got)
    }

    /// Ends the job cleanly: waits until every rank is done with the others'
    /// regions, then closes. (Dropping without it is safe, but a peer still
    /// accessing this rank's region would then see errors.)
    pub fn finish(self, boot: &dyn Bootstrap) -> Result<()> {
        boot.barrier()
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
