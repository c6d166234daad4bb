//! What the DHT variants run on. A variant plans batches of [`Op`]s; a
//! transport executes them. The variants never know which transport runs
//! them, so native libfabric, MPI windows and the test doubles execute
//! identical algorithms.
//!
//! - [`local::LocalTransport`]: ranks as threads sharing regions of
//!   `AtomicU64`, copied word by word, so torn reads happen (and are tested)
//!   without undefined behaviour. A test double for what a NIC does.
//! - [`recording::RecordingTransport`]: wraps any transport and logs every
//!   batch, so tests can assert the exact remote operations a variant issues.
//! - [`hooked::HookedTransport`]: wraps any transport and runs a test's
//!   hooks before and after each batch (a rank stalled between batches, a
//!   look at memory the moment a release lands).
//! - [`faulty::FaultyTransport`]: wraps any transport and injects seeded
//!   faults (reordered batches, split and torn reads, delayed write
//!   visibility, the Nth op failing), so tests can check a variant survives
//!   what a real NIC may do.
//! - [`wrap::Wrapper`]: how those three (and `&T`) wrap a transport: each
//!   overrides only what it changes, and everything else reaches the inner
//!   transport through one impl, so none can miss a method.
//! - `fabkit_fabric::Rank` (feature `fabric`): native libfabric, any
//!   provider.
//! - `shm::ShmTransport` (feature `fabric`): direct access to the regions
//!   of ranks on the same node, plus libfabric for the others.
//! - `mpi::MpiTransport` (feature `mpi`): MPI one-sided RMA on a window,
//!   `lock_all` for fine, lockfree and chunked, `MPI_Win_lock` per operation
//!   for coarse, as in seed 000.

pub mod faulty;
pub mod hooked;
pub mod local;
#[cfg(feature = "mpi")]
pub mod mpi;
pub mod recording;
#[cfg(feature = "fabric")]
pub mod shm;
pub mod wrap;

pub use fabkit_core::{Completion, Op, OpKind, Remote};

/// What a transport can do, as one value ([`Transport::caps`]). It does
/// not change while the transport lives: the table reads it when it is
/// created. A wrapper passes it on whole or changes a field, saying why.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Caps {
    /// Whether remote atomics (compare-and-swap, fetch-add, fetch, swap)
    /// are available. The table refuses a variant that needs them
    /// without ([`crate::Error::NoAtomics`]), and the faulty transport
    /// tears reads only with them.
    pub atomics: bool,
    /// Whether a write that asks for [`Completion::Delivery`] gets it: the
    /// DHT's locks and claims rely on their data landing before their
    /// release, so the table refuses a transport without
    /// ([`crate::Error::Unordered`]). True unless the transport knows it
    /// cannot (a provider that offers neither delivery completion, a fence
    /// nor read-after-write order).
    pub delivers: bool,
    /// Whether every rank's region is memory this process maps, so that a
    /// round of operations costs about what its memory accesses do, not a
    /// network round trip. Machines then fetch no further ahead than their
    /// next step needs (chunked reads one chunk per round, not two). False
    /// unless the transport knows.
    pub near: bool,
    /// Whether the ops of one batch take effect one after another, in the
    /// batch's order, with each op's reads and writes ordered after the
    /// previous op's as acquire loads and release stores order them; and
    /// an error stops the batch at the failing op. Machines then put steps
    /// that do not depend on an earlier op's result into one batch (a fine
    /// reader's snapshot of the lock word, the data and the check). False
    /// unless the transport knows: a NIC's ops in one batch are unordered.
    pub in_order: bool,
    /// How many batches the transport keeps in flight at once, each on a
    /// lane of its own (see [`Transport::post`]), while the driver plans
    /// the next of another: 1 unless it posts and polls. The table keeps
    /// no more in flight ([`crate::Dht::set_depth`]).
    pub depth: usize,
}

/// Executes batches of one-sided operations on the ranks' regions.
pub trait Transport {
    /// What a failed batch or region lock says. Wrappers (the test
    /// transports) add errors of their own, the shared kinds of
    /// [`fabkit_core::Error`] (a timeout, a bound), so every transport's
    /// error can hold those.
    type Error: std::error::Error + From<fabkit_core::Error> + Send + Sync + 'static;

    /// This rank.
    fn rank(&self) -> usize;
    /// Number of ranks.
    fn ranks(&self) -> usize;
    /// Bytes of `rank`'s region.
    fn region_len(&self, rank: usize) -> usize;
    /// What the transport can do, which the table and the machines plan
    /// by (see [`Caps`]).
    fn caps(&self) -> Caps;
    /// Posts every op and returns when all have completed. Ops in one batch
    /// are unordered; to order two, use two batches.
    fn execute(&self, ops: &mut [Op<'_>]) -> Result<(), Self::Error>;
    /// A short name for reports ("local", "fabric shm", "mpi").
    fn name(&self) -> String;

    /// Where one batch in flight is kept (see [`Transport::post`]). Its
    /// `Default` is a lane that needs nothing made ahead: on a transport
    /// of [`Caps::depth`] 1 it runs each batch to its end in `post`
    /// (the table gives callers other than its own such a lane).
    type Lane: Default + Send;

    /// A lane for batches in flight; what it holds (a registered staging
    /// buffer) is made now, once, and kept for every batch posted on it.
    fn lane(&self) -> Result<Self::Lane, Self::Error> {
        Ok(Self::Lane::default())
    }

    /// Starts `ops` on `lane`: `Ok(false)` when they have completed
    /// already (as [`Transport::execute`] would leave them), `Ok(true)`
    /// when they are in flight, to be finished by
    /// [`Transport::complete`] with the same ops: as many, of the same
    /// kinds, targets and lengths, their buffers holding the same bytes
    /// (the table builds both from one batch). Ops in one batch are
    /// unordered, and batches on different lanes are unordered with each
    /// other until completed.
    fn post(&self, lane: &mut Self::Lane, ops: &mut [Op<'_>]) -> Result<bool, Self::Error> {
        let _ = lane;
        self.execute(ops).map(|()| false)
    }

    /// Whether `lane`'s batch has completed, so that
    /// [`Transport::complete`] would not wait. Never waits.
    fn ready(&self, lane: &Self::Lane) -> bool {
        let _ = lane;
        true
    }

    /// Waits for the batch in flight on `lane` and delivers its results
    /// into `ops`, the ops it was posted with.
    fn complete(&self, lane: &mut Self::Lane, ops: &mut [Op<'_>]) -> Result<(), Self::Error> {
        let _ = (lane, ops);
        Ok(())
    }

    /// Whether `rank`'s region is memory this process maps, reached by
    /// loads, stores and CPU atomics: on the message path, the ranks the
    /// table reaches this way keep doing so, and the others' keys go to
    /// them as requests. A rank's own region must be so reached there.
    /// False unless the transport knows.
    fn by_memory(&self, rank: usize) -> bool {
        let _ = rank;
        false
    }

    /// Locks `rank`'s whole region with the transport's own mechanism, if it
    /// has one (MPI: `MPI_Win_lock`), for the coarse variant. `Ok(false)`:
    /// no such mechanism, and the variant drives a lock word with atomics.
    fn lock_region(&self, rank: usize, exclusive: bool) -> Result<bool, Self::Error> {
        let _ = (rank, exclusive);
        Ok(false)
    }

    /// Releases what [`Transport::lock_region`] took.
    fn unlock_region(&self, rank: usize) -> Result<(), Self::Error> {
        let _ = rank;
        Ok(())
    }
}

#[cfg(feature = "fabric")]
impl Transport for fabkit_fabric::Rank {
    type Error = fabkit_fabric::Error;
    fn rank(&self) -> usize {
        fabkit_fabric::Rank::rank(self)
    }
    fn ranks(&self) -> usize {
        fabkit_fabric::Rank::ranks(self)
    }
    fn region_len(&self, rank: usize) -> usize {
        fabkit_fabric::Rank::region_len(self, rank).unwrap_or(0)
    }
    fn caps(&self) -> Caps {
        Caps {
            atomics: self.config().atomics && self.atomic_support().all(),
            delivers: self.ordering() != fabkit_fabric::Ordering::None,
            near: false,
            in_order: false,
            depth: self.lanes(),
        }
    }
    fn execute(&self, ops: &mut [Op<'_>]) -> Result<(), Self::Error> {
        fabkit_fabric::Rank::execute(self, ops)
    }
    fn name(&self) -> String {
        format!("fabric {}", self.info().provider())
    }
    type Lane = Option<fabkit_fabric::Lane>;
    fn lane(&self) -> Result<Self::Lane, Self::Error> {
        fabkit_fabric::Rank::lane(self).map(Some)
    }
    fn post(&self, lane: &mut Self::Lane, ops: &mut [Op<'_>]) -> Result<bool, Self::Error> {
        match lane {
            Some(l) => fabkit_fabric::Rank::post(self, l, ops).map(|()| true),
            None => fabkit_fabric::Rank::execute(self, ops).map(|()| false),
        }
    }
    fn ready(&self, lane: &Self::Lane) -> bool {
        lane.as_ref()
            .is_none_or(|l| fabkit_fabric::Rank::ready(self, l))
    }
    fn complete(&self, lane: &mut Self::Lane, ops: &mut [Op<'_>]) -> Result<(), Self::Error> {
        match lane {
            Some(l) => fabkit_fabric::Rank::complete(self, l, ops),
            None => Ok(()),
        }
    }
}

/// The lane of a test double that keeps no batch in flight by itself:
/// `post` only notes the batch and `complete` runs it, so a driver's
/// batches on several lanes run in the order it completes them, not the
/// order it posted them (see [`local::LocalTransport::with_depth`]).
#[derive(Debug, Default)]
pub struct Deferred {
    posted: bool,
}

impl Deferred {
    /// Notes a batch posted: true (in flight) when `depth` allows lanes.
    pub(crate) fn post(&mut self, depth: usize) -> bool {
        self.posted = depth > 1;
        self.posted
    }

    /// Whether a batch was posted and not yet run; forgets it.
    pub(crate) fn take(&mut self) -> bool {
        std::mem::take(&mut self.posted)
    }
}
