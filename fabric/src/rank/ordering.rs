//! How writes were made visible: the counts a rank keeps per mechanism
//! ([`OrderingStats`]), and the peers whose next operation must carry a
//! fence ([`FenceBook`]).

use std::sync::atomic::{self, AtomicU64};

use serde::{Deserialize, Serialize};

/// What the ordering mechanism has done on a rank (see [`Rank::ordering`](crate::Rank::ordering)).
/// Counts posted pieces (a write larger than a transfer is several).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct OrderingStats {
    /// Writes posted with `FI_DELIVERY_COMPLETE`, alone or in a scatter
    /// write.
    pub delivery_complete: u64,
    /// Of those, the writes that rode in a scatter write posted for an
    /// earlier one of their round (see the module doc): each saved a post
    /// and an acknowledgement.
    #[serde(default)]
    pub scattered: u64,
    /// Operations posted with `FI_FENCE`.
    pub fenced: u64,
    /// Reads posted after Delivery writes to make them visible.
    pub read_backs: u64,
    /// Delivery writes posted with no mechanism ([`Ordering::None`](crate::Ordering::None)).
    pub unordered: u64,
}

impl OrderingStats {
    /// What was done between `earlier` (a snapshot of the same rank's
    /// counters) and `self`.
    pub fn since(self, earlier: OrderingStats) -> OrderingStats {
        OrderingStats {
            delivery_complete: self.delivery_complete - earlier.delivery_complete,
            scattered: self.scattered - earlier.scattered,
            fenced: self.fenced - earlier.fenced,
            read_backs: self.read_backs - earlier.read_backs,
            unordered: self.unordered - earlier.unordered,
        }
    }

    /// The counts of two ranks (or endpoints) together.
    pub fn plus(self, other: OrderingStats) -> OrderingStats {
        OrderingStats {
            delivery_complete: self.delivery_complete + other.delivery_complete,
            scattered: self.scattered + other.scattered,
            fenced: self.fenced + other.fenced,
            read_backs: self.read_backs + other.read_backs,
            unordered: self.unordered + other.unordered,
        }
    }
}

/// Which peers an operation must be fenced to ([`Ordering::Fence`](crate::Ordering::Fence)), shared
/// by every thread posting on the rank's endpoint.
///
/// `marks[p]` counts batches that ended with a Delivery write to `p` (each
/// posted, and waited for to transmit completion or an error); `covered[p]`
/// is the highest mark a posted fenced operation covers. An operation to `p`
/// is fenced while `marks[p] > covered[p]`. A mark is taken after its write
/// was posted, and a fenced operation covers only the marks it loaded before
/// it was posted, so every marked write was posted before the fence that
/// covers it, and a mark taken meanwhile fences the next operation again.
#[derive(Debug)]
pub(super) struct FenceBook {
    pub(super) marks: Box<[AtomicU64]>,
    pub(super) covered: Box<[AtomicU64]>,
    pub(super) delivery_complete: AtomicU64,
    pub(super) scattered: AtomicU64,
    pub(super) fenced: AtomicU64,
    pub(super) read_backs: AtomicU64,
    pub(super) unordered: AtomicU64,
}

impl FenceBook {
    pub(super) fn new(peers: usize) -> Self {
        let zeros = || (0..peers).map(|_| AtomicU64::new(0)).collect();
        FenceBook {
            marks: zeros(),
            covered: zeros(),
            delivery_complete: AtomicU64::new(0),
            scattered: AtomicU64::new(0),
            fenced: AtomicU64::new(0),
            read_backs: AtomicU64::new(0),
            unordered: AtomicU64::new(0),
        }
    }

    /// A Delivery write to `peer` has been posted and waited for: the next
    /// operation to `peer` must carry the fence.
    pub(super) fn mark(&self, peer: usize) {
        // Release: a poster that sees the mark also sees the write posted.
        self.marks[peer].fetch_add(1, atomic::Ordering::Release);
    }

    /// The mark a fenced operation to `peer` posted now would cover, if the
    /// operation must be fenced.
    pub(super) fn due(&self, peer: usize) -> Option<u64> {
        let m = self.marks[peer].load(atomic::Ordering::Acquire);
        (m > self.covered[peer].load(atomic::Ordering::Acquire)).then_some(m)
    }

    /// A fenced operation to `peer` covering `mark` has been posted.
    pub(super) fn cover(&self, peer: usize, mark: u64) {
        self.covered[peer].fetch_max(mark, atomic::Ordering::AcqRel);
        self.fenced.fetch_add(1, atomic::Ordering::Relaxed);
    }

    pub(super) fn stats(&self) -> OrderingStats {
        let get = |c: &AtomicU64| c.load(atomic::Ordering::Relaxed);
        OrderingStats {
            delivery_complete: get(&self.delivery_complete),
            scattered: get(&self.scattered),
            fenced: get(&self.fenced),
            read_backs: get(&self.read_backs),
            unordered: get(&self.unordered),
        }
    }
}
