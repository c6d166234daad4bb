//! Same-node shortcut (seed 002's "hybrid PGAS"; what Open MPI's `osc sm`
//! does): every rank's region is a shared-memory segment, registered with
//! the fabric for other nodes and mapped directly by peers on this node,
//! whose reads and writes then are plain memory copies instead of RMA.
//! When every rank is on this node there is no fabric rank at all: no
//! endpoint, no progress thread, no provider lock, only the mappings.
//!
//! Atomics: CPU atomics and the provider's (or NIC's) atomics on the same
//! words are not atomic together, so a region's atomics all go one way. When
//! every rank is on this node, all atomics are CPU atomics on the mappings;
//! as soon as one rank is elsewhere, all atomics go through the fabric, for
//! every region, and only reads and writes take the shortcut. Lock-free
//! uses no atomics and always takes it.
//!
//! Completion: a same-node write is a copy into the mapping, its stores
//! (`Release`) done when `execute` returns, so any later operation that
//! reaches the bytes, a CPU's or a NIC's (host memory is coherent with DMA),
//! sees them: it meets
//! [`Completion::Delivery`](fabkit_fabric::Completion::Delivery) trivially.
//! Ops to other nodes go to the [`Rank`] with their completion unchanged,
//! which meets Delivery with its provider's mechanism ([`Rank::ordering`]).

use std::sync::atomic::Ordering;
use std::sync::Arc;

use fabkit_core::bootstrap::{host_id, Bootstrap};
use fabkit_core::notice::notice;
use fabkit_core::words::{prefetch_words, read_words, with_prefetch, write_words};
use fabkit_core::Error as CoreError;
use fabkit_fabric::shm::{SharedSegment, SHM_DIR};
use fabkit_fabric::{Error, Op, OpKind, Rank, RankConfig, Remote, Result};

use super::{Caps, Transport};

/// A fabric rank whose same-node peers' regions are mapped; no fabric at
/// all when every rank is on this node.
pub struct ShmTransport {
    /// The fabric for ranks elsewhere: `None` when every rank is on this
    /// node, which then needs no endpoint, no progress thread and no
    /// provider lock.
    fabric: Option<Rank>,
    rank: usize,
    /// Bytes of every rank's region.
    lens: Vec<usize>,
    /// Mapped regions of same-node ranks (this rank's own included).
    mapped: Vec<Option<Arc<SharedSegment>>>,
    cpu_atomics: bool,
}

impl std::fmt::Debug for ShmTransport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let local = self.mapped.iter().filter(|m| m.is_some()).count();
        write!(
            f,
            "ShmTransport({} of {} ranks mapped, cpu atomics: {})",
            local,
            self.mapped.len(),
            self.cpu_atomics
        )
    }
}

impl ShmTransport {
    /// Sets up the fabric rank over a shared segment and maps the segments
    /// of the ranks on this host; when every rank is on this host, only
    /// maps them, with no fabric rank (`rc` then gives only the region's
    /// size). Collective.
    pub fn establish(rc: RankConfig, boot: &dyn Bootstrap) -> Result<Self> {
        // Same machine and same network namespace: see `host_id`.
        let host = host_id();
        let hosts = boot.allgather(host.as_bytes())?;
        let same: Vec<bool> = hosts.iter().map(|h| h == host.as_bytes()).collect();
        Self::establish_sharing(rc, boot, &same)
    }

    /// As [`ShmTransport::establish`], with the set of same-node ranks
    /// given. Tests use it to treat some ranks of this machine as remote,
    /// standing in for the second node this machine does not have.
    pub fn establish_sharing(
        rc: RankConfig,
        boot: &dyn Bootstrap,
        same_node: &[bool],
    ) -> Result<Self> {
        Self::establish_with(rc, boot, same_node, true)
    }

    /// Maps this rank's segment and those of the `same_node` ranks, with
    /// no fabric at all: for the message path, which carries the keys of
    /// ranks elsewhere (and, where `same_node` holds only this rank, of
    /// every other rank) as requests to their owners. Every atomic is a
    /// CPU atomic: no NIC or provider atomic ever reaches these regions.
    /// Operations on a rank not mapped are refused. `region_len` is this
    /// rank's region. Collective.
    pub fn establish_memory(
        region_len: usize,
        boot: &dyn Bootstrap,
        same_node: &[bool],
    ) -> Result<Self> {
        let mut rc = RankConfig::new("none");
        rc.region_len = region_len;
        Self::establish_with(rc, boot, same_node, false)
    }

    /// A second handle on this rank's own mapped region alone, with no
    /// fabric and CPU atomics: the message path's executor, which runs
    /// peers' requests on this rank's region while this handle goes on.
    /// Refused where the atomics of this handle go through a fabric (a
    /// provider's atomics and CPU atomics on one word are not atomic
    /// together).
    pub fn own_view(&self) -> Result<ShmTransport> {
        if !self.cpu_atomics {
            return Err(Error::from(CoreError::InvalidArgument(
                "this transport's atomics go through a fabric, so no second handle may change \
                 its region with CPU atomics"
                    .into(),
            )));
        }
        let own = self.mapped.get(self.rank).cloned().flatten();
        Ok(ShmTransport {
            fabric: None,
            rank: self.rank,
            lens: self.lens.clone(),
            mapped: (0..self.lens.len())
                .map(|r| if r == self.rank { own.clone() } else { None })
                .collect(),
            cpu_atomics: true,
        })
    }

    /// Whether `rank`'s region is mapped here, so its operations are loads,
    /// stores and CPU atomics.
    pub fn maps(&self, rank: usize) -> bool {
        self.mapped.get(rank).is_some_and(Option::is_some)
    }

    /// The set-up of both: with a fabric for ranks elsewhere (`fabric`) or
    /// none.
    fn establish_with(
        mut rc: RankConfig,
        boot: &dyn Bootstrap,
        same_node: &[bool],
        fabric: bool,
    ) -> Result<Self> {
        let me = boot.rank();
        if same_node.len() != boot.size() {
            return Err(Error::from(CoreError::InvalidArgument(format!(
                "same-node set of {} ranks for a job of {}",
                same_node.len(),
                boot.size()
            ))));
        }
        // Segments of ranks killed before they could unlink theirs (their
        // process gone from this PID namespace) go first; see
        // `fabkit_fabric::shm`. Live jobs' and other users' stay. What
        // cannot be removed is said and left: it must not stop this start.
        let reaped = fabkit_fabric::shm::reap_stale();
        for (file, why) in &reaped.removed {
            notice(format_args!(
                "removed stale segment {SHM_DIR}/{file}: {why}"
            ));
        }
        for (file, err) in &reaped.failed {
            notice(format_args!(
                "warning: could not remove stale segment {SHM_DIR}/{file}: {err} \
                 (`fabkit clean` retries)"
            ));
        }
        // Named after this process (and a per-process count, for in-process
        // ranks), so a later start can tell whether its creator still runs.
        let mine = fabkit_fabric::shm::segment_name(&format!("dht-r{me}"))?;
        let seg = Arc::new(SharedSegment::create(&mine, rc.region_len)?);
        // Each rank's region size, whether it sees every rank on its node
        // (then no rank starts a fabric), then its segment's name.
        let everyone_here = same_node.iter().all(|&s| s);
        let mut card = (rc.region_len as u64).to_le_bytes().to_vec();
        card.push(u8::from(everyone_here));
        card.extend_from_slice(mine.as_bytes());
        let cards = boot.allgather(&card)?;
        // Starting a fabric is collective: ranks that disagree would wait
        // for each other in it. Said instead.
        if let Some(r) = cards
            .iter()
            .position(|c| c.get(8).copied() != Some(u8::from(everyone_here)))
        {
            return Err(Error::from(CoreError::Bootstrap(format!(
                "rank {me} {} every rank on its node and rank {r} does not agree: the \
                 same-node sets given to establish_sharing differ",
                if everyone_here {
                    "has"
                } else {
                    "does not have"
                }
            ))));
        }
        let rank = if everyone_here || !fabric {
            None
        } else {
            rc.shared_region = Some(seg.clone());
            Some(Rank::establish(rc, boot)?)
        };
        let mut lens = Vec::with_capacity(same_node.len());
        let mut mapped = Vec::with_capacity(same_node.len());
        for (r, &same) in same_node.iter().enumerate() {
            let card = cards.get(r).filter(|c| c.len() > 9);
            let (len, name) = match card {
                Some(c) => {
                    let len = u64::from_le_bytes(c[..8].try_into().expect("8 bytes"));
                    let name = std::str::from_utf8(&c[9..])
                        .ok()
                        .filter(|n| fabkit_fabric::shm::parse_name(n).is_some());
                    (usize::try_from(len).ok(), name)
                }
                None => (None, None),
            };
            let unknown = || {
                Error::from(CoreError::Bootstrap(format!(
                    "rank {r} sent no fabkit segment name and size (a rank of another \
                     fabkit version?)"
                )))
            };
            let len = len.ok_or_else(unknown)?;
            lens.push(len);
            mapped.push(match (r == me, same) {
                (true, _) => Some(seg.clone()),
                (false, true) => Some(Arc::new(SharedSegment::open(
                    name.ok_or_else(unknown)?,
                    len,
                )?)),
                (false, false) => None,
            });
        }
        // Everyone has mapped what it needs: the names can go.
        boot.barrier()?;
        seg.unlink();
        Ok(ShmTransport {
            // Without a fabric no provider atomic can reach a region.
            cpu_atomics: rank.is_none(),
            fabric: rank,
            rank: me,
            lens,
            mapped,
        })
    }

    /// Ends the job cleanly (as [`Rank::finish`]; a barrier without a
    /// fabric). Collective.
    pub fn finish(self, boot: &dyn Bootstrap) -> Result<()> {
        match self.fabric {
            Some(f) => f.finish(boot),
            None => Ok(boot.barrier()?),
        }
    }

    /// The fabric rank underneath, if some rank is on another node.
    pub fn fabric(&self) -> Option<&Rank> {
        self.fabric.as_ref()
    }

    /// Whether atomics are CPU atomics (every rank on this node).
    pub fn cpu_atomics(&self) -> bool {
        self.cpu_atomics
    }

    fn shortcut(&self, op: &Op<'_>) -> Option<&SharedSegment> {
        let at = op.target();
        let seg = self.mapped.get(at.rank)?.as_deref()?;
        let direct = match op.kind() {
            OpKind::Read | OpKind::Write => true,
            k if k.is_atomic() => self.cpu_atomics,
            _ => false,
        };
        direct.then_some(seg)
    }

    /// Starts fetching the lines a same-node read or write will copy.
    fn prefetch(&self, op: &Op<'_>) {
        if matches!(op.kind(), OpKind::Read | OpKind::Write) {
            if let Some(seg) = self.shortcut(op) {
                let at = usize::try_from(op.target().offset).unwrap_or(usize::MAX);
                prefetch_words(seg.words(), at, op.len());
            }
        }
    }
}

fn bounds(seg: &SharedSegment, op: OpKind, at: Remote, len: usize) -> Result<usize> {
    let off = usize::try_from(at.offset).ok();
    match off.and_then(|o| o.checked_add(len)) {
        Some(end) if end <= seg.len() => Ok(off.unwrap()),
        _ => Err(Error::from(CoreError::OutOfBounds {
            op,
            peer: at.rank,
            offset: at.offset,
            len,
            region_len: seg.len(),
        })),
    }
}

fn direct(seg: &SharedSegment, op: &mut Op<'_>) -> Result<()> {
    let kind = op.kind();
    let at = op.target();
    let words = seg.words();
    if kind.is_atomic() {
        let off = bounds(seg, kind, at, 8)?;
        if off % 8 != 0 {
            return Err(Error::from(CoreError::InvalidArgument(format!(
                "{kind} at offset {off}: atomics need an 8-byte aligned offset"
            ))));
        }
        let w = &words[off / 8];
        match op {
            Op::CompareAndSwap {
                expected, new, old, ..
            } => {
                **old =
                    match w.compare_exchange(*expected, *new, Ordering::AcqRel, Ordering::Acquire) {
                        Ok(v) | Err(v) => v,
                    }
            }
            Op::FetchAdd { delta, old, .. } => **old = w.fetch_add(*delta, Ordering::AcqRel),
            Op::Fetch { value, .. } => **value = w.load(Ordering::Acquire),
            Op::Swap { new, old, .. } => **old = w.swap(*new, Ordering::AcqRel),
            _ => unreachable!("atomic kinds only"),
        }
        return Ok(());
    }
    match op {
        Op::Read { into, .. } => read_words(words, bounds(seg, kind, at, into.len())?, into),
        Op::Write { from, .. } => write_words(words, bounds(seg, kind, at, from.len())?, from),
        _ => unreachable!("reads and writes only"),
    }
    Ok(())
}

impl Transport for ShmTransport {
    type Error = Error;

    fn rank(&self) -> usize {
        self.rank
    }
    fn ranks(&self) -> usize {
        self.lens.len()
    }
    fn region_len(&self, rank: usize) -> usize {
        self.lens.get(rank).copied().unwrap_or(0)
    }
    fn caps(&self) -> Caps {
        let fabric = self.fabric.as_ref().map(Transport::caps);
        Caps {
            atomics: self.cpu_atomics || fabric.is_some_and(|c| c.atomics),
            // Same-node writes are done when `execute` returns.
            delivers: fabric.is_none_or(|c| c.delivers),
            near: fabric.is_none(),
            // With every rank on this node, ops are copies and CPU atomics
            // run one after another (see `direct`), stopping at the first
            // error; with a fabric, same-node ops are done before the
            // others go out.
            in_order: fabric.is_none(),
            depth: fabric.map_or(1, |c| c.depth),
        }
    }
    fn by_memory(&self, rank: usize) -> bool {
        self.maps(rank)
    }
    fn name(&self) -> String {
        match &self.fabric {
            Some(f) => format!("shm shortcut + fabric {}", f.info().provider()),
            None if self.mapped.iter().all(Option::is_some) => {
                "shared memory (every rank on this node, no fabric)".into()
            }
            None => "shared memory (this node's mapped ranks, no fabric)".into(),
        }
    }
    fn execute(&self, ops: &mut [Op<'_>]) -> Result<()> {
        // Same-node operations are done at once, in place; the rest form
        // one fabric batch. Ops in a batch are unordered, so either order
        // is allowed.
        if self.fabric.is_none() {
            // Every rank is mapped: what the shortcut cannot do (a rank out
            // of range, a message) is refused before anything is done.
            if let Some(op) = ops.iter().find(|op| self.shortcut(op).is_none()) {
                let peer = op.target().rank;
                return Err(if peer >= self.lens.len() {
                    Error::from(CoreError::NoSuchRank {
                        peer,
                        ranks: self.lens.len(),
                    })
                } else if self.maps(peer) {
                    Error::from(CoreError::InvalidArgument(format!(
                        "{} to rank {peer}: messages need a fabric, and this transport has \
                         none (the shortcut moves one-sided operations only)",
                        op.kind()
                    )))
                } else {
                    Error::from(CoreError::InvalidArgument(format!(
                        "{} to rank {peer}: its region is not mapped here and this transport \
                         has no fabric (the message path carries its keys to it)",
                        op.kind()
                    )))
                });
            }
        }
        if !self.same_node_ops(ops)? {
            return Ok(());
        }
        let mut batch = self.remote_ops(ops);
        match &self.fabric {
            Some(f) => f.execute(&mut batch),
            None => unreachable!("refused above: every op is a shortcut's without a fabric"),
        }
    }

    type Lane = ShmLane;
    fn lane(&self) -> Result<ShmLane> {
        Ok(ShmLane {
            fabric: self.fabric.as_ref().map(Rank::lane).transpose()?,
            posted: false,
        })
    }
    /// Same-node ops are done now, in place; the others are posted on the
    /// lane's fabric lane (none: run now), so they are in flight while the
    /// driver goes on.
    fn post(&self, lane: &mut ShmLane, ops: &mut [Op<'_>]) -> Result<bool> {
        let (Some(f), Some(fl)) = (&self.fabric, &mut lane.fabric) else {
            return self.execute(ops).map(|()| false);
        };
        if !self.same_node_ops(ops)? {
            return Ok(false);
        }
        f.post(fl, &mut self.remote_ops(ops))?;
        lane.posted = true;
        Ok(true)
    }
    fn ready(&self, lane: &ShmLane) -> bool {
        match (&self.fabric, &lane.fabric) {
            (Some(f), Some(fl)) if lane.posted => f.ready(fl),
            _ => true,
        }
    }
    fn complete(&self, lane: &mut ShmLane, ops: &mut [Op<'_>]) -> Result<()> {
        match (&self.fabric, &mut lane.fabric) {
            (Some(f), Some(fl)) if std::mem::take(&mut lane.posted) => {
                f.complete(fl, &mut self.remote_ops(ops))
            }
            _ => Ok(()),
        }
    }
}

/// A lane of a [`ShmTransport`]: the fabric's lane for the ops to other
/// nodes (none when every rank is on this node).
#[derive(Debug, Default)]
pub struct ShmLane {
    fabric: Option<fabkit_fabric::Lane>,
    /// Ops of the batch posted went to the fabric lane.
    posted: bool,
}

impl ShmTransport {
    /// Does a batch's same-node ops now, in place (prefetching ahead);
    /// says whether any are left for the fabric.
    fn same_node_ops(&self, ops: &mut [Op<'_>]) -> Result<bool> {
        let mut remote = false;
        with_prefetch(
            ops,
            |op| self.prefetch(op),
            |op| {
                match self.shortcut(op) {
                    Some(seg) => direct(seg, op)?,
                    None => remote = true,
                }
                Ok::<(), Error>(())
            },
        )?;
        Ok(remote)
    }

    /// The ops of a batch that go to the fabric (not to a mapped region),
    /// in their order: the same list for the same batch.
    fn remote_ops<'s>(&self, ops: &'s mut [Op<'_>]) -> Vec<Op<'s>> {
        ops.iter_mut()
            .filter(|op| self.shortcut(op).is_none())
            .map(reborrow)
            .collect()
    }
}

/// A shorter-lived copy of an op borrowing the same buffers.
fn reborrow<'s>(op: &'s mut Op<'_>) -> Op<'s> {
    match op {
        Op::Read { from, into } => Op::Read { from: *from, into },
        // The completion goes to the Rank unchanged: it meets Delivery with
        // its provider's mechanism.
        Op::Write {
            to,
            from,
            completion,
        } => Op::Write {
            to: *to,
            from,
            completion: *completion,
        },
        Op::CompareAndSwap {
            at,
            expected,
            new,
            old,
        } => Op::CompareAndSwap {
            at: *at,
            expected: *expected,
            new: *new,
            old,
        },
        Op::FetchAdd { at, delta, old } => Op::FetchAdd {
            at: *at,
            delta: *delta,
            old,
        },
        Op::Fetch { at, value } => Op::Fetch { at: *at, value },
        Op::Swap { at, new, old } => Op::Swap {
            at: *at,
            new: *new,
            old,
        },
        Op::Send { to, data } => Op::Send { to: *to, data },
        Op::Recv { from, into, len } => Op::Recv {
            from: *from,
            into,
            len,
        },
    }
}
