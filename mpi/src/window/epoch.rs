//! The synchronisation of a window's epochs: lock-all, per-target locks,
//! fence, and post-start-complete-wait.

use std::time::{Duration, Instant};

use mpi::ffi;

use fabkit_core::Error as CoreError;

use crate::error::{check, Error, Result};

use super::{check_on, lock_kind, Sync, Window};

impl Window<'_> {
    /// Starts a passive-target epoch on all ranks (`MPI_Win_lock_all`).
    pub fn lock_all(&mut self) -> Result<()> {
        if !self.locked_all {
            if !self.locked.is_empty() {
                return Err(Error::from(CoreError::InvalidArgument(format!(
                    "MPI_Win_lock_all while ranks {:?} are locked is erroneous; unlock them first",
                    self.locked
                ))));
            }
            // SAFETY: the window is live.
            check("MPI_Win_lock_all", unsafe {
                ffi::MPI_Win_lock_all(0, self.win)
            })?;
            self.locked_all = true;
        }
        Ok(())
    }

    /// Ends the `lock_all` epoch. If `MPI_Win_unlock_all` fails the epoch
    /// counts as still open.
    pub fn unlock_all(&mut self) -> Result<()> {
        if self.locked_all {
            // SAFETY: the window is live and locked by us.
            check("MPI_Win_unlock_all", unsafe {
                ffi::MPI_Win_unlock_all(self.win)
            })?;
            self.locked_all = false;
        }
        Ok(())
    }

    /// Starts a passive-target epoch on `rank` alone (`MPI_Win_lock`), shared
    /// or exclusive. Not while [`Window::lock_all`] is held.
    pub fn lock(&mut self, rank: usize, exclusive: bool) -> Result<()> {
        if self.locked_all {
            return Err(Error::from(CoreError::InvalidArgument(
                "MPI_Win_lock inside a lock_all epoch is erroneous; unlock_all first".into(),
            )));
        }
        if rank >= self.size {
            return Err(Error::from(CoreError::NoSuchRank {
                peer: rank,
                ranks: self.size,
            }));
        }
        if self.locked.contains(&rank) {
            return Err(Error::from(CoreError::InvalidArgument(format!(
                "rank {rank}'s window is already locked by this rank; unlock it first"
            ))));
        }
        // SAFETY: the window is live and rank is valid.
        check_on("MPI_Win_lock", rank, unsafe {
            ffi::MPI_Win_lock(lock_kind(exclusive), rank as i32, 0, self.win)
        })?;
        self.locked.insert(rank);
        Ok(())
    }

    /// Ends the epoch [`Window::lock`] started on `rank`.
    ///
    /// # Aborts
    ///
    /// When `MPI_Win_unlock` fails (see [`Window::execute`]).
    pub fn unlock(&mut self, rank: usize) -> Result<()> {
        if !self.locked.remove(&rank) {
            return Err(Error::from(CoreError::InvalidArgument(format!(
                "rank {rank}'s window is not locked by this rank"
            ))));
        }
        // SAFETY: the window is live and locked on `rank` by us.
        let rc = unsafe { ffi::MPI_Win_unlock(rank as i32, self.win) };
        self.closed("MPI_Win_unlock", Some(rank), rc);
        Ok(())
    }

    /// `MPI_Win_fence`: collective; ends one active-target epoch and opens the
    /// next. Targets of [`Sync::Fence`] call this once per origin batch. Not
    /// bounded (see the module docs).
    pub fn fence(&self) -> Result<()> {
        // SAFETY: the window is live.
        check("MPI_Win_fence", unsafe { ffi::MPI_Win_fence(0, self.win) })
    }

    /// The group of `ranks` (distinct, in rank order) in the window's
    /// communicator.
    fn group_of(&self, ranks: &[usize]) -> Result<ffi::MPI_Group> {
        // SAFETY: reading MPI handle constants exported by rsmpi.
        let (mut world, mut g) = unsafe { (ffi::RSMPI_GROUP_NULL, ffi::RSMPI_GROUP_NULL) };
        let list: Vec<i32> = ranks.iter().map(|&r| r as i32).collect();
        // SAFETY: the window is live; list holds valid ranks (validated).
        unsafe {
            check(
                "MPI_Win_get_group",
                ffi::MPI_Win_get_group(self.win, &mut world),
            )?;
            let rc = ffi::MPI_Group_incl(world, list.len() as i32, list.as_ptr(), &mut g);
            ffi::MPI_Group_free(&mut world);
            check("MPI_Group_incl", rc)?;
        }
        Ok(g)
    }

    /// PSCW target side: exposes the window to `origins` for one epoch
    /// (`MPI_Win_post`); end it with [`Window::wait`].
    pub fn post(&self, origins: &[usize]) -> Result<()> {
        if let Some(&r) = origins.iter().find(|&&r| r >= self.size) {
            return Err(Error::from(CoreError::NoSuchRank {
                peer: r,
                ranks: self.size,
            }));
        }
        let mut distinct = origins.to_vec();
        distinct.sort_unstable();
        distinct.dedup();
        let mut g = self.group_of(&distinct)?;
        // SAFETY: window and group are live; the group is freed after use.
        unsafe {
            let rc = ffi::MPI_Win_post(g, 0, self.win);
            ffi::MPI_Group_free(&mut g);
            check("MPI_Win_post", rc)?;
        }
        *self.posted.borrow_mut() = origins.to_vec();
        Ok(())
    }

    /// PSCW target side: waits until the origins completed their access
    /// epoch, through `MPI_Win_test` with naps (50 us doubling up to the
    /// bootstrap's nap ceiling), for at most the bootstrap's timeout. On a
    /// timeout the exposure epoch stays open and the error names the origins
    /// waited for; the window cannot take part in another epoch then.
    pub fn wait(&self) -> Result<()> {
        let limit = self.boot.wait_limit();
        let start = Instant::now();
        let mut nap = Duration::from_micros(50);
        loop {
            let mut done = 0;
            // SAFETY: the window is live and posted.
            check("MPI_Win_test", unsafe {
                ffi::MPI_Win_test(self.win, &mut done)
            })?;
            if done != 0 {
                self.posted.borrow_mut().clear();
                return Ok(());
            }
            let waited = start.elapsed();
            if waited >= limit {
                let origins: Vec<String> =
                    self.posted.borrow().iter().map(|r| r.to_string()).collect();
                return Err(Error::WindowTimeout {
                    call: "MPI_Win_wait",
                    rank: self.rank,
                    origins: origins.join(", "),
                    timeout: limit,
                });
            }
            std::thread::sleep(nap.min(limit - waited));
            nap = (nap * 2).min(Duration::from_millis(5));
        }
    }

    /// An active-target epoch inside a lock epoch is erroneous MPI: refused.
    pub(super) fn refuse_active_in_lock(&self, sync: Sync) -> Result<()> {
        if sync != Sync::LockAll && (self.locked_all || !self.locked.is_empty()) {
            return Err(Error::from(CoreError::InvalidArgument(format!(
                "a {sync:?} execute inside an open lock epoch is erroneous; unlock first"
            ))));
        }
        Ok(())
    }

    /// `MPI_Win_start` on `targets` (PSCW origin side).
    pub(super) fn start(&self, targets: &[usize]) -> Result<()> {
        let mut g = self.group_of(targets)?;
        // SAFETY: window and group live; the group is freed below.
        let rc = unsafe { ffi::MPI_Win_start(g, 0, self.win) };
        // SAFETY: as above.
        unsafe { ffi::MPI_Group_free(&mut g) };
        check("MPI_Win_start", rc).map_err(|e| match (e, targets.first()) {
            (Error::Mpi { call, code, msg }, Some(&peer)) if targets.len() == 1 => Error::MpiPeer {
                call,
                peer,
                code,
                msg,
            },
            (e, _) => e,
        })
    }
}
