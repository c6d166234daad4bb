//! A rank of a job: one endpoint, one exposed region, and the addresses and
//! keys of every peer's region, established through a
//! [`Bootstrap`](crate::bootstrap::Bootstrap).
//!
//! Operations are data ([`Op`]) executed in batches with a bounded number in
//! flight. Buffers are borrowed only for the call: data is staged through a
//! registered buffer the rank owns, so a late completion after a timeout can
//! never write into memory the caller has reused (the staging buffer is then
//! retired until the endpoint closes).
//!
//! The module is split by job, so that the data path reads on its own:
//! - here: [`Rank`] itself, how to set one up ([`RankConfig`],
//!   [`ProgressMode`]) and its accessors;
//! - `op`: the one-operation shorthands ([`Rank::read`], [`Rank::write`],
//!   [`Rank::fetch_add`], ...) over the vocabulary of `fabkit-core`
//!   ([`Remote`], [`Op`], [`Completion`]);
//! - `setup`: establishing a rank ([`Rank::establish`]): the bootstrap
//!   exchange of peer cards and their wire format, the address-vector
//!   inserts and the progress thread; and [`Rank::finish`];
//! - `data`: the data path ([`Rank::execute`], [`Initiator`]): validating a
//!   batch, planning it into pieces and rounds that fit the window and the
//!   staging buffer, posting, waiting, delivering, and retiring a staging
//!   buffer after a timeout;
//! - `lane`: batches in flight while others complete ([`Lane`],
//!   [`Rank::post`], [`Rank::ready`], [`Rank::complete`]);
//! - `msg`: single messages ([`Rank::send`], [`Rank::recv`]).
//!
//! # Ordering
//!
//! A write completes at transmit completion unless it asks for
//! [`Completion::Delivery`]; then it is visible at its target to any later
//! operation once its batch has returned. At setup the rank picks how,
//! from what the provider grants in `fi_getinfo` ([`Ordering`], best
//! first): `FI_DELIVERY_COMPLETE` on the write itself; `FI_FENCE` on the
//! next operation posted to that peer, in a later batch; or a read of the
//! written bytes in the same batch where the provider keeps read-after-write
//! data order. [`Rank::ordering`] says which; [`Rank::ordering_stats`]
//! counts what was done. No write is ever posted as an inject.

use std::mem::ManuallyDrop;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use serde::Serialize;

use crate::av::{AddressVector, FiAddr};
use crate::cq::CompletionQueue;
use crate::domain::{AtomicSupport, Domain, Fabric};
use crate::ep::Endpoint;
use crate::error::{Error, Result};
use crate::info::{Info, Ordering};
use crate::mr::{MemoryRegion, RemoteRegion, Retired};
use fabkit_core::Error as CoreError;
#[cfg(doc)]
use fabkit_core::{Completion, Op, Remote};

mod data;
mod lane;
mod msg;
mod op;
mod ordering;
mod plan;
mod setup;

pub use data::Initiator;
pub use lane::{Lane, MAX_LANES};
pub use ordering::OrderingStats;

use ordering::FenceBook;
use setup::ProgressThread;

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
    /// How to meet [`Completion::Delivery`]: `None` picks the best the
    /// provider offers ([`Ordering::PREFERENCE`]); `Some(m)` insists on `m`
    /// (setup fails if the provider does not offer it), e.g. to test or
    /// measure one mechanism. `Some(Ordering::None)` asks for nothing.
    pub ordering: Option<Ordering>,
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
            ordering: None,
        }
    }
}

/// A peer as this rank reaches it: its address and its exposed region.
#[derive(Clone, Copy, Debug)]
struct Peer {
    addr: FiAddr,
    region: RemoteRegion,
}

/// A rank: endpoint, exposed region and every peer's address and region.
///
/// Dropping it stops the progress thread, closes the staging buffer and the
/// region, then closes the endpoint (which ends any operation that did not
/// complete) and the registrations of retired staging buffers in the order
/// the provider needs (under `FI_MR_ENDPOINT` the registrations first, as
/// they are bound to the endpoint; otherwise the endpoint first, as
/// fi_endpoint(3) asks), checking each close, and frees the retired buffers
/// only if every close succeeded (else they are leaked, never freed under a
/// NIC that may still write them). The CQ, AV, domain and fabric close
/// after.
pub struct Rank {
    // `Drop::drop` stops progress and closes `staging`, `region`, `ep` and
    // the retired buffers in order (see there); the other fields drop after
    // it in field order: the CQ and AV, then the domain and the fabric.
    progress: Option<ProgressThread>,
    /// Empty only once the rank has failed (see [`Rank::retire`]).
    staging: ManuallyDrop<Mutex<Option<MemoryRegion>>>,
    region: ManuallyDrop<MemoryRegion>,
    peers: Vec<Peer>,
    ep: ManuallyDrop<Endpoint>,
    cq: CompletionQueue,
    _av: AddressVector,
    domain: Domain,
    _fabric: Fabric,
    info: Info,
    atomics: AtomicSupport,
    ordering: Ordering,
    fences: FenceBook,
    rank: usize,
    cfg: RankConfig,
    /// Why the rank refuses every operation, once it has failed.
    failed: OnceLock<String>,
    /// Staging buffers retired after an operation on them did not complete:
    /// it may still write them, so they are freed only after the endpoint
    /// has closed. Held here, not in the endpoint: a region keeps its
    /// endpoint alive, so an endpoint holding its own retired regions would
    /// never close.
    ///
    /// Shared with the rank's [`Lane`]s, which retire theirs here when
    /// dropped with operations in flight.
    retired: Arc<Mutex<Vec<Retired>>>,
    /// Close retired registrations before the endpoint (`FI_MR_ENDPOINT`).
    regions_first: bool,
    /// The provider's data progress is not automatic: peers' operations on
    /// this rank advance only while its CQ is read, so a round being posted
    /// reads it now and then too (see `data`).
    serve_while_posting: bool,
}

impl Drop for Rank {
    fn drop(&mut self) {
        // The progress thread reads the CQ: stop it before anything closes.
        self.progress.take();
        let retired = std::mem::take(&mut *self.retired.lock().unwrap_or_else(|e| e.into_inner()));
        // SAFETY: each of the three fields is dropped or taken exactly once,
        // here, and the rank is not used afterwards. The live staging buffer
        // and the region have no operation of ours in flight (one that did
        // not complete retired its staging buffer), so they close and free
        // now; under FI_MR_ENDPOINT they must close before the endpoint.
        let ep = unsafe {
            ManuallyDrop::drop(&mut self.staging);
            ManuallyDrop::drop(&mut self.region);
            ManuallyDrop::take(&mut self.ep)
        };
        // Initiators borrow the rank and its live regions are closed, so
        // the rank holds the endpoint's last reference.
        crate::mr::close_then_free(
            [ep],
            retired,
            self.regions_first,
            &format!("rank {}", self.rank),
        );
    }
}

/// The opens and closes of a rank's fids (fabric, domain, CQ, AV, endpoint,
/// memory regions) with each `fi_close`'s result, readable after the rank
/// is dropped. For leak and close-order tests.
#[doc(hidden)]
#[derive(Debug)]
pub struct FidWatch(Arc<crate::domain::FidLog>);

impl FidWatch {
    /// The fids not closed successfully, one kind name per fid (empty once
    /// every fid was closed with `fi_close` returning 0).
    pub fn open(&self) -> Vec<&'static str> {
        self.0.open()
    }

    /// The kinds closed so far, in order, with `fi_close`'s return codes.
    pub fn closes(&self) -> Vec<(&'static str, i32)> {
        self.0
            .events()
            .into_iter()
            .filter_map(|e| match e {
                crate::domain::FidEvent::Closed(w, rc) => Some((w, rc)),
                crate::domain::FidEvent::Opened(_) => None,
            })
            .collect()
    }
}

/// Whether a full window of `window` operations still fits in a CQ of
/// `slots` slots of which `lost` are held by operations that never
/// completed; if not, why, in words.
fn window_left(slots: usize, lost: usize, window: usize) -> std::result::Result<(), String> {
    let free = slots.saturating_sub(lost);
    if free >= window {
        return Ok(());
    }
    Err(format!(
        "{lost} operations timed out and never completed; they hold {lost} of its {slots} \
         completion slots, leaving {free}, fewer than its window of {window} (the peers \
         they went to are dead or stopped making progress; restart the job)"
    ))
}

impl std::fmt::Debug for Rank {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Rank")
            .field("rank", &self.rank)
            .field("ranks", &self.peers.len())
            .field("provider", &self.info.provider())
            .field("domain", &self.info.domain_name())
            .field("ordering", &self.ordering)
            .finish()
    }
}

impl Rank {
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

    /// How this rank meets [`Completion::Delivery`], chosen at setup from
    /// what the provider grants (see [`Ordering`]). [`Ordering::None`]: a
    /// Delivery write is posted as a transmit-complete one and nothing
    /// orders it before later operations.
    pub fn ordering(&self) -> Ordering {
        self.ordering
    }

    /// What the ordering mechanism has done so far.
    pub fn ordering_stats(&self) -> OrderingStats {
        self.fences.stats()
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

    /// Watches this rank's fids; see [`FidWatch`].
    #[doc(hidden)]
    pub fn fid_watch(&self) -> FidWatch {
        FidWatch(self.domain.inner.log.clone())
    }

    /// Test hook: close as under `FI_MR_ENDPOINT` (retired registrations
    /// before the endpoint), which no provider here asks for.
    #[doc(hidden)]
    pub fn close_regions_first(&mut self) {
        self.regions_first = true;
    }

    /// Operations that timed out (or whose CQ failed) and have not
    /// completed since: each holds one of the rank's completion slots.
    pub fn lost_ops(&self) -> usize {
        self.cq.inner.lost()
    }

    /// Staging buffers retired after timeouts, kept until the rank is
    /// dropped.
    pub fn retired_buffers(&self) -> usize {
        self.retired.lock().unwrap_or_else(|e| e.into_inner()).len()
    }

    /// Refuses every operation once the rank has failed: its completion
    /// queue broke, or operations that never complete hold so many
    /// completion slots that a full window no longer fits (it would
    /// otherwise shrink, op by op, until the rank hangs).
    /// Fails the rank for good with `reason`, unless it has failed already.
    pub(super) fn fail(&self, reason: String) {
        let _ = self.failed.set(reason);
    }

    pub(super) fn alive(&self) -> Result<()> {
        let failed = |reason: &String| Error::RankFailed {
            rank: self.rank,
            reason: reason.clone(),
        };
        if let Some(reason) = self.failed.get() {
            return Err(failed(reason));
        }
        let cq = &self.cq.inner;
        let reason = if let Some((call, code)) = cq.broken() {
            format!(
                "its completion queue failed ({call}: {}, fi_errno {code}) and completions \
                 may have been lost; {} operations never completed",
                crate::error::strerror(code),
                cq.lost()
            )
        } else {
            if window_left(cq.capacity(), cq.lost(), self.cfg.window).is_ok() {
                return Ok(());
            }
            // Abandoned operations may have completed since, their
            // completions queued but unread (no progress thread, or it steps
            // aside while we wait): read them before judging.
            cq.drain();
            if let Some((call, code)) = cq.broken() {
                return Err(failed(self.failed.get_or_init(|| {
                    format!(
                        "its completion queue failed ({call}: {}, fi_errno {code})",
                        crate::error::strerror(code)
                    )
                })));
            }
            match window_left(cq.capacity(), cq.lost(), self.cfg.window) {
                Ok(()) => return Ok(()),
                Err(why) => why,
            }
        };
        Err(failed(self.failed.get_or_init(|| reason)))
    }

    fn peer(&self, rank: usize) -> Result<&Peer> {
        self.peers
            .get(rank)
            .ok_or(Error::from(CoreError::NoSuchRank {
                peer: rank,
                ranks: self.peers.len(),
            }))
    }
}

#[cfg(test)]
mod tests {
    use super::window_left;

    #[test]
    fn the_window_is_exhausted_when_lost_ops_leave_less_than_a_window() {
        // slots, lost, window: fits?
        for (slots, lost, window, fits) in [
            (256, 0, 64, true),
            (256, 192, 64, true),
            (256, 193, 64, false),
            (256, 256, 1, false),
            (256, 255, 1, true),
            (128, 0, 200, false),
            (4, 9, 1, false),
        ] {
            let got = window_left(slots, lost, window);
            assert_eq!(
                got.is_ok(),
                fits,
                "{slots} slots, {lost} lost, window {window}"
            );
            if let Err(why) = got {
                assert!(
                    why.contains(&format!("{lost} operations"))
                        && why.contains(&format!("window of {window}")),
                    "{why}"
                );
            }
        }
    }
}
