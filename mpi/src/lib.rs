//! MPI for fabkit: how ranks launched by `mpirun` or `srun` find each other,
//! and MPI one-sided RMA windows that execute the same [`Op`] batches as a
//! libfabric rank, so one algorithm (the DHT's) runs over both and the two
//! compare directly.
//!
//! - [`bootstrap`]: [`MpiBootstrap`], the [`Bootstrap`] whose collectives
//!   have deadlines; it owns the MPI environment.
//! - [`window`]: [`Window`], an RMA window on every rank, with the
//!   synchronisation chosen per window ([`Sync`]); it borrows the bootstrap,
//!   so no window outlives `MPI_Finalize`.
//! - [`error`]: MPI calls that failed, by name; everything else is
//!   [`fabkit_core::Error`].
//!
//! MPI's constants that rsmpi lacks come from a small C file compiled
//! against the `mpi.h` in use (found through `pkg-config ompi-c` or the
//! `mpicc` wrapper).
//!
//! ```no_run
//! use fabkit_core::{Bootstrap, Completion, Op, Remote};
//! use fabkit_mpi::{MpiBootstrap, Sync, Window, WindowKind};
//!
//! let boot = MpiBootstrap::init()?;
//! let mut win = Window::new(&boot, 4096, WindowKind::Allocate)?;
//! let peer = (boot.rank() + 1) % boot.size();
//! let to = Remote::new(peer, 0);
//! let mut ops = [Op::Write { to, from: b"hello", completion: Completion::Delivery }];
//! win.execute(Sync::LockAll, &mut ops)?;
//! boot.barrier()?;
//! win.free()?;
//! # Ok::<(), fabkit_mpi::Error>(())
//! ```
#![deny(missing_docs)]

pub mod bootstrap;
pub mod error;
pub mod mailbox;
mod shim;
pub mod window;

pub use bootstrap::{MpiBootstrap, DEFAULT_MAX_NAP, DEFAULT_TIMEOUT, SPIN_TESTS};
pub use error::{Error, Result};
pub use fabkit_core::{Bootstrap, Op, Remote};
pub use mailbox::{threads_multiple, Call, Mailbox};
pub use window::{Sync, Window, WindowKind};
