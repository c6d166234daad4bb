//! MPI one-sided RMA as a DHT transport: the MPI-DHT's own setting, running
//! the same variant code as native libfabric. Fine, lockfree and chunked
//! run in one `MPI_Win_lock_all` epoch with a flush per batch; coarse locks
//! the target's whole window per operation with `MPI_Win_lock` (shared for
//! reads, exclusive for writes), as the published MPI-DHT does.
//!
//! Completion: every batch ends with `MPI_Win_flush` on each of its targets
//! ([`Window::execute_in_epoch`]), which completes the operations "both at
//! the origin and at the target"; a coarse batch outside a region lock
//! ends with `MPI_Win_unlock`, which does the same. So a write is visible at
//! its target when its batch returns, whatever its
//! [`Completion`](fabkit_core::Completion): Delivery costs nothing extra
//! here, and a release in a later batch never overtakes the data before it.
//!
//! The transport borrows the [`MpiBootstrap`] through its window, so it
//! cannot outlive `MPI_Finalize`. Free it with [`MpiTransport::free`]
//! (collective, e.g. on what [`Dht::free`](crate::Dht::free) gives back);
//! dropping it instead leaves the window to the process's end and MPI
//! unfinalized (see `fabkit_mpi::window`), which is what an error path
//! on one rank needs. A failed batch never leaves an epoch open: the window
//! completes what was issued before returning the error, and the
//! per-operation locks taken here are released whatever fails.

use std::cell::{Cell, RefCell};
use std::collections::BTreeSet;

use fabkit_core::Bootstrap;
use fabkit_mpi::{MpiBootstrap, Op, Result, Window, WindowKind};

use super::{Caps, Transport};

/// A DHT transport over an MPI window.
pub struct MpiTransport<'env> {
    win: RefCell<Window<'env>>,
    rank: usize,
    ranks: usize,
    len: usize,
    /// Coarse: lock per operation with MPI_Win_lock instead of lock_all.
    per_op_locks: bool,
    /// The rank whose region lock_region holds, if any.
    held: Cell<Option<usize>>,
}

impl std::fmt::Debug for MpiTransport<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "MpiTransport({}/{}, {} B)",
            self.rank, self.ranks, self.len
        )
    }
}

impl<'env> MpiTransport<'env> {
    /// A window of `region_len` bytes on every rank of `boot` (collective,
    /// bounded by the bootstrap's timeout). `per_op_locks` selects
    /// `MPI_Win_lock` per operation (the coarse variant) instead of one
    /// `lock_all` epoch.
    pub fn new(
        boot: &'env MpiBootstrap,
        region_len: usize,
        kind: WindowKind,
        per_op_locks: bool,
    ) -> Result<Self> {
        let mut win = Window::new(boot, region_len, kind)?;
        if !per_op_locks {
            win.lock_all()?;
        }
        Ok(MpiTransport {
            win: RefCell::new(win),
            rank: boot.rank(),
            ranks: boot.size(),
            len: region_len,
            per_op_locks,
            held: Cell::new(None),
        })
    }

    /// [`MpiTransport::new`] on a bootstrap it shares: the transport keeps
    /// `boot` (and MPI) alive for as long as it lives, so a table over it is
    /// a value of its own, with no borrow (what a C handle needs), of any
    /// lifetime.
    pub fn new_shared(
        boot: std::rc::Rc<MpiBootstrap>,
        region_len: usize,
        kind: WindowKind,
        per_op_locks: bool,
    ) -> Result<MpiTransport<'env>> {
        let (rank, ranks) = (boot.rank(), boot.size());
        let mut win = Window::new_shared(boot, region_len, kind)?;
        if !per_op_locks {
            win.lock_all()?;
        }
        Ok(MpiTransport {
            win: RefCell::new(win),
            rank,
            ranks,
            len: region_len,
            per_op_locks,
            held: Cell::new(None),
        })
    }

    /// Frees the window: collective, every rank calls it at the same point
    /// (bounded by the bootstrap's timeout up to `MPI_Win_free`).
    pub fn free(self) -> Result<()> {
        self.win.into_inner().free()
    }
}

impl Transport for MpiTransport<'_> {
    type Error = fabkit_mpi::Error;
    type Lane = ();

    fn rank(&self) -> usize {
        self.rank
    }
    fn ranks(&self) -> usize {
        self.ranks
    }
    fn region_len(&self, _rank: usize) -> usize {
        self.len
    }
    fn caps(&self) -> Caps {
        Caps {
            atomics: true,
            // Every batch ends with MPI_Win_flush (or MPI_Win_unlock) on
            // its targets: see the module's docs.
            delivers: true,
            near: false,
            in_order: false,
            depth: 1,
        }
    }
    fn name(&self) -> String {
        format!(
            "mpi (osc {})",
            std::env::var("OMPI_MCA_osc").unwrap_or_else(|_| "default".into())
        )
    }
    fn execute(&self, ops: &mut [Op<'_>]) -> Result<()> {
        let mut w = self.win.borrow_mut();
        if !self.per_op_locks || self.held.get().is_some() {
            return w.execute_in_epoch(ops);
        }
        // Per-operation locking, outside a region lock: a shared epoch on
        // each target around this batch.
        let targets: BTreeSet<usize> = ops.iter().map(|o| o.target().rank).collect();
        let mut locked = Vec::with_capacity(targets.len());
        let mut r = Ok(());
        for &t in &targets {
            r = w.lock(t, false);
            if r.is_err() {
                break;
            }
            locked.push(t);
        }
        if r.is_ok() {
            r = w.execute_in_epoch(ops);
        }
        // Every lock taken is released, whatever failed: a target left
        // locked would refuse this rank's next lock for ever.
        for t in locked {
            let u = w.unlock(t);
            r = r.and(u);
        }
        r
    }
    fn lock_region(&self, rank: usize, exclusive: bool) -> Result<bool> {
        if !self.per_op_locks {
            return Ok(false);
        }
        self.win.borrow_mut().lock(rank, exclusive)?;
        self.held.set(Some(rank));
        Ok(true)
    }
    fn unlock_region(&self, rank: usize) -> Result<()> {
        if self.per_op_locks {
            self.held.set(None);
            self.win.borrow_mut().unlock(rank)?;
        }
        Ok(())
    }
}
