//! Same-node shortcut (seed 002's "hybrid PGAS"; what Open MPI's `osc sm`
//! does): every rank's region is a shared-memory segment, registered with
//! the fabric for other nodes and mapped directly by peers on this node,
//! whose reads and writes then are plain memory copies instead of RMA.
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

use fabkit_fabric::bootstrap::{host_id, Bootstrap};
use fabkit_fabric::shm::{prefetch_words, read_words, write_words, SharedSegment, SHM_DIR};
use fabkit_fabric::{Error, Op, OpKind, Rank, RankConfig, Remote, Result};

use super::Transport;

/// A fabric rank whose same-node peers' regions are mapped.
pub struct ShmTransport {
    fabric: Rank,
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
    /// of the ranks on this host. Collective.
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
        mut rc: RankConfig,
        boot: &dyn Bootstrap,
        same_node: &[bool],
    ) -> Result<Self> {
        let me = boot.rank();
        if same_node.len() != boot.size() {
            return Err(Error::InvalidArgument(format!(
                "same-node set of {} ranks for a job of {}",
                same_node.len(),
                boot.size()
            )));
        }
        // Segments of ranks killed before they could unlink theirs (their
        // process gone from this PID namespace) go first; see
        // `fabkit_fabric::shm`. Live jobs' and other users' stay. What
        // cannot be removed is said and left: it must not stop this start.
        let reaped = fabkit_fabric::shm::reap_stale();
        for (file, why) in &reaped.removed {
            eprintln!("fabkit: removed stale segment {SHM_DIR}/{file}: {why}");
        }
        for (file, err) in &reaped.failed {
            eprintln!(
                "fabkit: warning: could not remove stale segment {SHM_DIR}/{file}: {err} \
                 (`fabkit clean` retries)"
            );
        }
        // Named after this process (and a per-process count, for in-process
        // ranks), so a later start can tell whether its creator still runs.
        let mine = fabkit_fabric::shm::segment_name(&format!("dht-r{me}"))?;
        let seg = Arc::new(SharedSegment::create(&mine, rc.region_len)?);
        let names = boot.allgather(mine.as_bytes())?;
        rc.shared_region = Some(seg.clone());
        let fabric = Rank::establish(rc, boot)?;
        let mut mapped = Vec::with_capacity(same_node.len());
        for (r, &same) in same_node.iter().enumerate() {
            mapped.push(match (r == me, same) {
                (true, _) => Some(seg.clone()),
                (false, true) => {
                    let name = names
                        .get(r)
                        .and_then(|n| std::str::from_utf8(n).ok())
                        .filter(|n| fabkit_fabric::shm::parse_name(n).is_some())
                        .ok_or_else(|| {
                            Error::Bootstrap(format!(
                                "rank {r} sent no fabkit segment name (a rank of another \
                                 fabkit version?)"
                            ))
                        })?;
                    Some(Arc::new(SharedSegment::open(name, fabric.region_len(r)?)?))
                }
                (false, false) => None,
            });
        }
        // Everyone has mapped what it needs: the names can go.
        boot.barrier()?;
        seg.unlink();
        Ok(ShmTransport {
            cpu_atomics: same_node.iter().all(|&s| s),
            fabric,
            mapped,
        })
    }

    /// Ends the job cleanly (as [`Rank::finish`]). Collective.
    pub fn finish(self, boot: &dyn Bootstrap) -> Result<()> {
        self.fabric.finish(boot)
    }

    /// The fabric rank underneath.
    pub fn fabric(&self) -> &Rank {
        &self.fabric
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

/// Ops of a batch whose lines are being fetched ahead of the one being
/// copied: a bucket's misses overlap those of the next ones, as a NIC
/// keeps several reads in flight, instead of one bucket's lines at a time.
pub(crate) const PREFETCH_AHEAD: usize = 8;

fn bounds(seg: &SharedSegment, op: OpKind, at: Remote, len: usize) -> Result<usize> {
    let off = usize::try_from(at.offset).ok();
    match off.and_then(|o| o.checked_add(len)) {
        Some(end) if end <= seg.len() => Ok(off.unwrap()),
        _ => Err(Error::OutOfBounds {
            op,
            peer: at.rank,
            offset: at.offset,
            len,
            region_len: seg.len(),
        }),
    }
}

fn direct(seg: &SharedSegment, op: &mut Op<'_>) -> Result<()> {
    let kind = op.kind();
    let at = op.target();
    let words = seg.words();
    if kind.is_atomic() {
        let off = bounds(seg, kind, at, 8)?;
        if off % 8 != 0 {
            return Err(Error::InvalidArgument(format!(
                "{kind} at offset {off}: atomics need an 8-byte aligned offset"
            )));
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
    fn rank(&self) -> usize {
        self.fabric.rank()
    }
    fn ranks(&self) -> usize {
        self.fabric.ranks()
    }
    fn region_len(&self, rank: usize) -> usize {
        self.fabric.region_len(rank).unwrap_or(0)
    }
    fn has_atomics(&self) -> bool {
        self.cpu_atomics || Transport::has_atomics(&self.fabric)
    }
    fn delivers(&self) -> bool {
        Transport::delivers(&self.fabric)
    }
    fn name(&self) -> String {
        format!("shm shortcut + fabric {}", self.fabric.info().provider())
    }
    fn execute(&self, ops: &mut [Op<'_>]) -> Result<()> {
        // Same-node operations are done at once, in place; the rest form
        // one fabric batch. Ops in a batch are unordered, so either order
        // is allowed.
        for op in ops.iter().take(PREFETCH_AHEAD) {
            self.prefetch(op);
        }
        let mut remote = false;
        for i in 0..ops.len() {
            if let Some(ahead) = ops.get(i + PREFETCH_AHEAD) {
                self.prefetch(ahead);
            }
            match self.shortcut(&ops[i]) {
                Some(seg) => direct(seg, &mut ops[i])?,
                None => remote = true,
            }
        }
        if !remote {
            return Ok(());
        }
        // A contiguous batch of the remaining ops for the fabric.
        let mut batch: Vec<Op<'_>> = ops
            .iter_mut()
            .filter(|op| self.shortcut(op).is_none())
            .map(reborrow)
            .collect();
        self.fabric.execute(&mut batch)
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
