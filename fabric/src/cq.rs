//! Completion queue (`fid_cq`) with completion slots and blocking waits.
//!
//! Every posted operation carries a pointer to a completion slot as its context.
//! Whoever reads the CQ (a waiting caller or the progress thread) dispatches
//! each completion to its slot; a caller then only looks at its own slot.
//!
//! Waiting is leader/follower: one thread at a time reads the CQ (the leader),
//! spinning a few times and then blocking in `fi_cq_sread`, which both drives
//! the provider's progress and sleeps in the kernel (a CQ without a wait
//! object, as on `shm`, is polled instead: yielding the core while it is
//! live, for a millisecond (`HOT`), then with short naps). Others (followers) sleep
//! on a condition variable that the leader signals after each dispatch. On a
//! 2-core machine a busy-polling rank would starve the peer it waits for, so
//! nobody spins for long.
//!
//! A rank's background progress thread (for providers with manual progress)
//! steps aside while any of the rank's own threads waits: the waiter drives
//! progress itself, and a progress thread competing for the CQ only adds
//! hand-offs (measured: it halved `shm` and `tcp;ofi_rxm` message rates). A
//! waiter that finds the progress thread blocked in `fi_cq_sread` kicks it
//! out with `fi_cq_signal`.

use std::cell::UnsafeCell;
use std::ptr::NonNull;
use std::sync::atomic::{
    self, AtomicBool, AtomicI32, AtomicIsize, AtomicU32, AtomicU64, AtomicUsize, Ordering,
};
use std::sync::{Arc, Condvar, Mutex, OnceLock};
use std::time::{Duration, Instant};

use fabric_sys as ffi;

use crate::domain::{close_fid, Domain, DomainInner};
use crate::error::{call_error, Result};

const FREE: u32 = 0;
const POSTED: u32 = 1;
const DONE: u32 = 2;
const FAILED: u32 = 3;
/// The waiter gave up (timeout). The operation may still complete later, and
/// the slot must not be reused until it does.
const ABANDONED: u32 = 4;

/// How many empty non-blocking reads a leader makes before it blocks. Short on
/// purpose: completions on software providers take microseconds, and a longer
/// spin steals the CPU the peer needs to produce them.
const SPIN_READS: u32 = 16;
/// Longest single block in `fi_cq_sread`, so the leader regularly re-checks
/// deadlines and hands over leadership.
const MAX_BLOCK: Duration = Duration::from_millis(10);
/// How long a follower sleeps before it checks whether leadership is free.
const FOLLOWER_NAP: Duration = Duration::from_millis(2);
/// The progress thread's nap between polls of a CQ without a wait object.
/// Shorter naps measured no faster on 2 cores: the sleep call costs more.
const POLL_NAP: Duration = Duration::from_micros(50);
/// A progress thread leaves the CQ to the rank's own threads while they have
/// waited this recently.
pub(crate) const ACTIVE_GRACE: Duration = Duration::from_millis(5);
/// Longest nap of a waiter polling a CQ without a wait object.
const POLL_NAP_MAX: Duration = Duration::from_micros(50);
/// How long a poller of a CQ without a wait object (`shm`) keeps polling,
/// yielding the core between reads, after the last sign of life (its wait
/// began, its post was refused, or a read dispatched a completion), before
/// it naps. Such a rank is also its peers' target, and with manual progress
/// their delivery-complete writes and atomics advance only while it polls:
/// a nap of tens of microseconds in one rank's wait paced every operation
/// of its peer (a batch of 64 writes took 64 naps). Yielding lets a peer
/// sharing the core run; the bound keeps a rank that waits for a quiet peer
/// from taking a core, and it naps as before once the bound has passed.
pub(crate) const HOT: Duration = Duration::from_millis(1);

/// The per-operation context handed to libfabric. `ctx` must come first: the
/// provider may use the `fi_context2` as scratch space (FI_CONTEXT mode), and
/// the completion's `op_context` is this slot's address.
#[repr(C)]
pub(crate) struct Slot {
    ctx: UnsafeCell<ffi::fi_context2>,
    state: AtomicU32,
    err: AtomicI32,
    prov_err: AtomicI32,
    len: AtomicUsize,
}

/// What became of one operation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Outcome {
    /// Completed; for receives the received length.
    Done { len: usize },
    /// Completed with an error.
    Failed { code: i32, prov_errno: i32 },
    /// Still pending at the deadline; the slot is abandoned.
    TimedOut,
    /// The CQ itself failed (`fi_cq_read` or `fi_cq_readerr` returned an
    /// error other than "nothing yet", such as `-FI_EOVERRUN`): completions
    /// may have been lost, so this operation's fate is unknown and its slot
    /// is abandoned.
    CqFailed {
        /// The call that failed.
        call: &'static str,
        /// Positive libfabric error number.
        code: i32,
    },
}

/// A reserved slot; its address is the operation's context.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Ticket(u32);

/// An open completion queue.
#[doc(alias = "fi_cq")]
#[derive(Clone, Debug)]
pub struct CompletionQueue {
    pub(crate) inner: Arc<CqInner>,
}

pub(crate) struct CqInner {
    pub(crate) fid: NonNull<ffi::fid_cq>,
    /// True when the CQ has a wait object, so `fi_cq_sread` can block.
    /// Cleared if `fi_cq_sread` turns out not to be implemented
    /// (`-FI_ENOSYS`): waits then poll.
    can_block: AtomicBool,
    /// Busy-poll: never block or nap (as fabtests and perftest do). Fastest
    /// on an idle machine, but a spinning rank starves its peer's core.
    busy_poll: AtomicBool,
    slots: Box<[Slot]>,
    free: Mutex<Vec<u32>>,
    /// Held by the leader while it reads the CQ.
    leader: Mutex<()>,
    /// Bumped after each dispatch; followers wait for it to change.
    epoch: Mutex<u64>,
    dispatched: Condvar,
    /// Threads currently in `wait`; the progress thread idles while > 0.
    waiters: AtomicUsize,
    /// Threads asleep on `dispatched` (followers): a dispatch wakes them
    /// only if there are any, so a lone reader makes no futex call per
    /// completion.
    followers: AtomicUsize,
    /// When the last wait ended, in nanoseconds since `born`.
    last_wait_end: AtomicU64,
    born: Instant,
    /// Operations whose waiter gave up (timeout, broken CQ) and that have not
    /// completed since: each holds a slot nobody can use. Signed: a late
    /// completion may be counted off just before its abandonment is counted
    /// on (see `abandon`).
    lost: AtomicIsize,
    /// The first error of the CQ itself; once set, no completion is trusted.
    broken: OnceLock<(&'static str, i32)>,
    /// Per slot, the source address of its last completion (FI_SOURCE:
    /// read with `fi_cq_readfrom`), on CQs opened with sources.
    sources: Option<Box<[AtomicU64]>>,
    _domain: Arc<DomainInner>,
}

impl std::fmt::Debug for CqInner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CqInner")
            .field("can_block", &self.can_block.load(Ordering::Relaxed))
            .field("slots", &self.slots.len())
            .finish()
    }
}

// SAFETY: the domain is FI_THREAD_SAFE; the slots are only touched through
// atomics, except `ctx`, which the provider owns while an op is posted.
unsafe impl Send for CqInner {}
// SAFETY: as above.
unsafe impl Sync for CqInner {}

impl Drop for CqInner {
    fn drop(&mut self) {
        // SAFETY: we own the fid; endpoints bound to it hold an Arc to us and
        // are closed already. The slots are leaked on failure: the provider
        // may still write completions naming them.
        let rc = unsafe { close_fid(&mut (*self.fid.as_ptr()).fid, "cq", &self._domain.log) };
        if rc != 0 {
            std::mem::forget(std::mem::take(&mut self.slots));
        }
    }
}

impl CompletionQueue {
    /// Opens a CQ with room for `depth` outstanding operations. It asks for a
    /// file-descriptor wait object, so that waits block in the kernel; a
    /// provider without one (or whose only wait is a `sched_yield` loop, as
    /// `FI_WAIT_UNSPEC` gives on `shm`) gets a CQ that is polled with short,
    /// growing sleeps instead.
    pub fn open(domain: &Domain, depth: usize) -> Result<CompletionQueue> {
        CompletionQueue::open_as(domain, depth, false)
    }

    /// [`CompletionQueue::open`], reading each completion's source address
    /// too (`fi_cq_readfrom`), for an endpoint asked for `FI_SOURCE`: a
    /// receive's sender, or `FI_ADDR_NOTAVAIL` for an address not in the
    /// address vector.
    pub(crate) fn open_with_sources(domain: &Domain, depth: usize) -> Result<CompletionQueue> {
        CompletionQueue::open_as(domain, depth, true)
    }

    fn open_as(domain: &Domain, depth: usize, sources: bool) -> Result<CompletionQueue> {
        let depth = depth.clamp(64, 1 << 16);
        let open = |wait_obj| {
            let mut attr = ffi::fi_cq_attr {
                size: depth,
                format: ffi::FI_CQ_FORMAT_MSG,
                wait_obj,
                wait_cond: ffi::FI_CQ_COND_NONE,
                ..Default::default()
            };
            let mut fid = std::ptr::null_mut();
            // SAFETY: domain open, attr valid; fid receives a CQ we own.
            let rc = unsafe {
                ffi::fi_cq_open(
                    domain.inner.fid.as_ptr(),
                    &mut attr,
                    &mut fid,
                    std::ptr::null_mut(),
                )
            };
            (rc, fid)
        };
        let (mut rc, mut fid) = open(ffi::FI_WAIT_FD);
        let mut can_block = rc == 0;
        if rc != 0 {
            (rc, fid) = open(ffi::FI_WAIT_NONE);
            can_block = false;
        }
        if rc != 0 {
            return Err(call_error("fi_cq_open", -rc));
        }
        let slots: Box<[Slot]> = (0..depth)
            .map(|_| Slot {
                ctx: UnsafeCell::new(ffi::fi_context2::default()),
                state: AtomicU32::new(FREE),
                err: AtomicI32::new(0),
                prov_err: AtomicI32::new(0),
                len: AtomicUsize::new(0),
            })
            .collect();
        domain.inner.log.opened("cq");
        Ok(CompletionQueue {
            inner: Arc::new(CqInner {
                fid: NonNull::new(fid).expect("fi_cq_open returned success and null"),
                can_block: AtomicBool::new(can_block),
                busy_poll: AtomicBool::new(false),
                slots,
                free: Mutex::new((0..depth as u32).rev().collect()),
                leader: Mutex::new(()),
                epoch: Mutex::new(0),
                dispatched: Condvar::new(),
                waiters: AtomicUsize::new(0),
                followers: AtomicUsize::new(0),
                last_wait_end: AtomicU64::new(0),
                born: Instant::now(),
                lost: AtomicIsize::new(0),
                broken: OnceLock::new(),
                sources: sources.then(|| (0..depth).map(|_| AtomicU64::new(0)).collect()),
                _domain: domain.inner.clone(),
            }),
        })
    }

    /// Whether waits on this CQ block in the kernel (the provider supports a
    /// wait object) rather than poll with short sleeps.
    pub fn can_block(&self) -> bool {
        self.inner.can_block()
    }

    /// Switches waits to busy-polling (true) or back to spin-then-block.
    pub fn set_busy_poll(&self, on: bool) {
        self.inner.busy_poll.store(on, Ordering::Relaxed);
    }
}

/// What a negative return of a CQ read means (see [`classify`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum ReadRc {
    /// Nothing to read yet.
    Empty,
    /// An error entry is waiting: read it with `fi_cq_readerr`.
    ErrorEntry,
    /// The CQ itself failed with this (positive) code.
    Fatal(i32),
    /// `fi_cq_sread` is not implemented: poll from now on.
    NoBlocking,
    /// `fi_cq_sread` returned early for a reason providers spell
    /// differently; a non-blocking read says whether the CQ is in trouble.
    Recheck,
}

/// Classifies a negative return of `fi_cq_read` (`blocking` false) or
/// `fi_cq_sread` (true).
///
/// A non-blocking read has one "nothing yet" code, `-FI_EAGAIN`, and one for
/// an error entry, `-FI_EAVAIL` (fi_cq(3)); anything else is the CQ's own
/// failure. A blocking read also returns early when woken, and providers say
/// so differently: `-FI_EAGAIN` or `-FI_ETIMEDOUT` at the timeout,
/// `-FI_EINTR`, `-FI_ECANCELED` after `fi_cq_signal` (psm3, efa), or the raw
/// `epoll_wait` result -1 (cxi, which reads as `-FI_EPERM`). Listing those as
/// benign would miss the next provider's spelling, and each would be taken
/// for a broken CQ (the progress thread signals the CQ whenever a waiter
/// arrives), so only an overrun is fatal at once, and every other code is
/// checked with a non-blocking read.
fn classify(blocking: bool, rc: isize) -> ReadRc {
    debug_assert!(rc < 0);
    let code = rc.unsigned_abs().min(i32::MAX as usize) as i32;
    match code as u32 {
        ffi::FI_EAGAIN => ReadRc::Empty,
        ffi::FI_EAVAIL => ReadRc::ErrorEntry,
        ffi::FI_EOVERRUN => ReadRc::Fatal(code),
        ffi::FI_ENOSYS if blocking => ReadRc::NoBlocking,
        _ if blocking => ReadRc::Recheck,
        _ => ReadRc::Fatal(code),
    }
}

impl CqInner {
    /// Whether `fi_cq_sread` blocks on this CQ's wait object.
    pub(crate) fn can_block(&self) -> bool {
        self.can_block.load(Ordering::Relaxed)
    }

    /// Reserves a slot for a new operation, progressing the CQ until one is
    /// free, `deadline` passes or the CQ breaks.
    pub(crate) fn acquire(&self, deadline: Instant) -> Option<Ticket> {
        loop {
            if self.broken().is_some() {
                // Nothing posted now would be heard of.
                return None;
            }
            if let Some(i) = self.free.lock().unwrap().pop() {
                let s = &self.slots[i as usize];
                s.state.store(POSTED, Ordering::Relaxed);
                return Some(Ticket(i));
            }
            if Instant::now() >= deadline {
                return None;
            }
            // Every slot is in flight: completing some frees them.
            self.drive(Duration::from_millis(1));
        }
    }

    /// Gives back a slot whose post failed (the provider never saw it).
    pub(crate) fn cancel_unposted(&self, t: Ticket) {
        self.release(t.0);
    }

    fn release(&self, i: u32) {
        self.slots[i as usize].state.store(FREE, Ordering::Relaxed);
        self.free.lock().unwrap().push(i);
    }

    /// The context pointer to post with `t`.
    pub(crate) fn context(&self, t: Ticket) -> *mut libc::c_void {
        self.slots[t.0 as usize].ctx.get().cast()
    }

    fn slot_of(&self, ctx: *mut libc::c_void) -> Option<usize> {
        let base = self.slots.as_ptr() as usize;
        let size = std::mem::size_of::<Slot>();
        let p = ctx as usize;
        if p < base || !(p - base).is_multiple_of(size) {
            return None;
        }
        let i = (p - base) / size;
        (i < self.slots.len()).then_some(i)
    }

    fn complete(&self, ctx: *mut libc::c_void, len: usize, err: Option<(i32, i32)>) {
        let Some(i) = self.slot_of(ctx) else {
            // Not one of ours (should not happen: every op carries a slot).
            return;
        };
        let s = &self.slots[i];
        s.len.store(len, Ordering::Relaxed);
        if let Some((code, prov)) = err {
            s.err.store(code, Ordering::Relaxed);
            s.prov_err.store(prov, Ordering::Relaxed);
        }
        let new = if err.is_some() { FAILED } else { DONE };
        // Release: the waiter that sees DONE also sees the data the provider
        // wrote into its buffer before generating the completion.
        if s.state
            .compare_exchange(POSTED, new, Ordering::Release, Ordering::Relaxed)
            .is_err()
        {
            // The waiter timed out and left: the operation is finally over,
            // so the slot can be used again.
            if s.state.load(Ordering::Relaxed) == ABANDONED {
                self.lost.fetch_sub(1, Ordering::AcqRel);
                self.release(i as u32);
            }
        }
    }

    /// Reads and dispatches completions once. Blocks for up to `block` when
    /// nothing is ready and the CQ has a wait object. Returns how many
    /// completions were dispatched.
    fn read_once(&self, block: Duration) -> usize {
        const BATCH: usize = 32;
        let mut entries = [ffi::fi_cq_msg_entry::default(); BATCH];
        let mut from = [ffi::FI_ADDR_NOTAVAIL; BATCH];
        let blocking = !block.is_zero() && self.can_block();
        let buf = entries.as_mut_ptr().cast();
        let fid = self.fid.as_ptr();
        let n = match (blocking, self.sources.is_some()) {
            (true, sources) => {
                let ms = block.as_millis().clamp(1, i32::MAX as u128) as i32;
                // SAFETY: the CQ is open; entries (and from) have room for
                // BATCH entries of the format the CQ was opened with; a null
                // cond is allowed with FI_CQ_COND_NONE.
                unsafe {
                    if sources {
                        let f = from.as_mut_ptr();
                        ffi::fi_cq_sreadfrom(fid, buf, BATCH, f, std::ptr::null(), ms)
                    } else {
                        ffi::fi_cq_sread(fid, buf, BATCH, std::ptr::null(), ms)
                    }
                }
            }
            // SAFETY: as above.
            (false, true) => unsafe { ffi::fi_cq_readfrom(fid, buf, BATCH, from.as_mut_ptr()) },
            // SAFETY: as above.
            (false, false) => unsafe { ffi::fi_cq_read(fid, buf, BATCH) },
        };
        if n >= 0 {
            for (e, src) in entries[..n as usize].iter().zip(from) {
                if let (Some(sources), Some(i)) = (&self.sources, self.slot_of(e.op_context)) {
                    sources[i].store(src, Ordering::Relaxed);
                }
                self.complete(e.op_context, e.len, None);
            }
            return n as usize;
        }
        match classify(blocking, n) {
            ReadRc::Empty => 0,
            ReadRc::ErrorEntry => self.read_error_entry(),
            ReadRc::Fatal(code) => {
                let call = if blocking {
                    "fi_cq_sread"
                } else {
                    "fi_cq_read"
                };
                self.fail(call, code);
                0
            }
            ReadRc::NoBlocking => {
                self.can_block.store(false, Ordering::Relaxed);
                0
            }
            ReadRc::Recheck => self.read_once(Duration::ZERO),
        }
    }

    /// Reads one error entry (after `-FI_EAVAIL`) and dispatches it.
    fn read_error_entry(&self) -> usize {
        let mut e = ffi::fi_cq_err_entry::default();
        // SAFETY: the CQ is open and reported an error entry; e is a valid
        // out-parameter (err_data left null: the provider keeps it).
        let rc = unsafe { ffi::fi_cq_readerr(self.fid.as_ptr(), &mut e, 0) };
        if rc > 0 {
            return self.on_error_entry(&e);
        }
        if rc < 0 && rc != -(ffi::FI_EAGAIN as isize) {
            let code = rc.unsigned_abs().min(i32::MAX as usize) as i32;
            self.fail("fi_cq_readerr", code);
        }
        0
    }

    /// Dispatches one error entry. fi_cq(3) reports an overrun as an error
    /// entry whose `err` is `FI_EOVERRUN` (its `op_context` is no
    /// operation's): completions were dropped, so the CQ is broken. So is it
    /// when an entry names no slot of ours: its operation's waiter would
    /// never hear of it (`shm` in 1.17 reports a peer that died with an
    /// entry of null context and a negative `err`, -FI_EIO).
    fn on_error_entry(&self, e: &ffi::fi_cq_err_entry) -> usize {
        let code = if e.err == 0 {
            ffi::FI_EOTHER as i32
        } else {
            e.err.saturating_abs()
        };
        if code == ffi::FI_EOVERRUN as i32 || self.slot_of(e.op_context).is_none() {
            self.fail("fi_cq_readerr", code);
            return 0;
        }
        self.complete(e.op_context, e.len, Some((code, e.prov_errno)));
        1
    }

    /// Breaks the CQ for good: `call` failed with `code` (positive), so
    /// completions may have been lost and none is trusted any more. Every
    /// waiter returns [`Outcome::CqFailed`] with the first such failure.
    pub(crate) fn fail(&self, call: &'static str, code: i32) {
        if self.broken.set((call, code)).is_ok() {
            // Wake every follower so that each sees the failure now.
            self.notify_all();
        }
    }

    /// The CQ's own failure, if it has had one.
    pub(crate) fn broken(&self) -> Option<(&'static str, i32)> {
        self.broken.get().copied()
    }

    /// Operations abandoned by their waiters that have not completed since.
    pub(crate) fn lost(&self) -> usize {
        self.lost.load(Ordering::Acquire).max(0) as usize
    }

    /// Dispatches every completion already queued, without blocking on the
    /// provider (it may wait for the thread reading the CQ now, for at most
    /// one of its blocks). So that abandoned operations that have in fact
    /// completed are not counted as lost.
    pub(crate) fn drain(&self) {
        let leader = self.leader.lock().unwrap_or_else(|e| e.into_inner());
        let mut any = false;
        // Bounded: each pass takes up to 32 of at most `slots` completions.
        for _ in 0..=self.slots.len() / 32 {
            match self.read_once(Duration::ZERO) {
                0 => break,
                _ => any = true,
            }
        }
        drop(leader);
        if any {
            self.notify();
        }
    }

    /// How many operations the CQ can track at once (its slots).
    pub(crate) fn capacity(&self) -> usize {
        self.slots.len()
    }

    /// Progresses the provider and dispatches what completes, for up to
    /// `block` (zero: one non-blocking pass). Used by the progress thread and
    /// by posting loops on -FI_EAGAIN. Returns how many completions this
    /// call dispatched (none when another thread was reading the CQ).
    pub(crate) fn drive(&self, block: Duration) -> usize {
        let Ok(leader) = self.leader.try_lock() else {
            // Someone else is reading the CQ right now, which drives progress
            // for us; nap until they dispatch something.
            if !block.is_zero() {
                let e = self.epoch.lock().unwrap();
                let _follower = Follower::enter(self);
                let _ = self.dispatched.wait_timeout(e, block.min(FOLLOWER_NAP));
            }
            return 0;
        };
        let busy = self.busy_poll.load(Ordering::Relaxed);
        let n = self.read_once(if self.can_block() && !busy {
            block
        } else {
            Duration::ZERO
        });
        // Never nap while holding leadership: a waiter arriving meanwhile
        // would have to sleep as a follower until we wake.
        drop(leader);
        if n > 0 {
            self.notify();
        } else if !self.can_block() && !block.is_zero() && !busy {
            std::thread::sleep(block.min(POLL_NAP));
        }
        n
    }

    /// One step of a background progress thread: drive the CQ for up to
    /// `block`, unless the rank's own threads are waiting or waited within
    /// the last [`ACTIVE_GRACE`]: they drive progress then, and competing
    /// for the CQ only adds hand-offs. A rank that goes quiet (a passive
    /// target, or one that computes) gets the thread back within the grace.
    pub(crate) fn progress_step(&self, block: Duration) {
        if !self.can_block() {
            fabkit_core::time::tighten_timer_slack();
        }
        let since_wait = self.born.elapsed().saturating_sub(Duration::from_nanos(
            self.last_wait_end.load(Ordering::Relaxed),
        ));
        if self.waiters.load(Ordering::Acquire) > 0 || since_wait < ACTIVE_GRACE {
            std::thread::sleep(ACTIVE_GRACE.min(block));
            return;
        }
        self.drive(block);
    }

    /// Wakes the followers after a dispatch, if any sleep. A follower
    /// counts itself (under the epoch lock) before it checks its slot and
    /// sleeps, and the dispatcher set the slots before it reads the count,
    /// both behind a SeqCst fence: either the follower sees its slot done or
    /// the dispatcher sees the follower, and the epoch lock it then takes
    /// orders its wake-up after the follower's sleep began.
    fn notify(&self) {
        atomic::fence(Ordering::SeqCst);
        if self.followers.load(Ordering::Relaxed) > 0 {
            self.notify_all();
        }
    }

    /// Wakes every follower whatever the count says (a broken CQ).
    fn notify_all(&self) {
        *self.epoch.lock().unwrap() += 1;
        self.dispatched.notify_all();
    }

    /// Gives up on `t`'s operation, unless it has just completed: its slot
    /// stays taken, and counted as lost, until the operation really ends.
    fn abandon(&self, t: Ticket) -> bool {
        let s = &self.slots[t.0 as usize];
        let gone = s
            .state
            .compare_exchange(POSTED, ABANDONED, Ordering::AcqRel, Ordering::Acquire)
            .is_ok();
        if gone {
            // Counted after the exchange, so that the count never holds an
            // operation that was not abandoned; a completion racing in
            // between counts it off first, which `lost` reads as zero.
            self.lost.fetch_add(1, Ordering::AcqRel);
        }
        gone
    }

    /// `t`'s outcome if its operation has completed or failed, with the
    /// source address of its completion (CQs opened with sources; else
    /// `FI_ADDR_NOTAVAIL`), freeing the slot; `None` (the ticket still
    /// posted) if not yet. Never reads the CQ: [`CqInner::drive`] does.
    pub(crate) fn take(&self, t: Ticket) -> Option<(Outcome, u64)> {
        let s = &self.slots[t.0 as usize];
        let out = match s.state.load(Ordering::Acquire) {
            DONE => Outcome::Done {
                len: s.len.load(Ordering::Relaxed),
            },
            FAILED => Outcome::Failed {
                code: s.err.load(Ordering::Relaxed),
                prov_errno: s.prov_err.load(Ordering::Relaxed),
            },
            _ => return None,
        };
        let src = self.sources.as_ref().map_or(ffi::FI_ADDR_NOTAVAIL, |v| {
            v[t.0 as usize].load(Ordering::Relaxed)
        });
        self.release(t.0);
        Some((out, src))
    }

    /// Wakes a thread blocked reading the CQ (`fi_cq_signal`). A CQ
    /// without a wait object has nobody blocked in it (and `shm`'s has no
    /// signal operation to call).
    pub(crate) fn signal(&self) {
        if self.can_block() {
            // SAFETY: the CQ is open for as long as `self` lives.
            unsafe { ffi::fi_cq_signal(self.fid.as_ptr()) };
        }
    }

    /// Whether `t`'s operation has completed or failed (its outcome is
    /// waiting to be taken by [`CqInner::wait`]).
    pub(crate) fn settled(&self, t: Ticket) -> bool {
        self.slots[t.0 as usize].state.load(Ordering::Acquire) != POSTED
    }

    /// Lets go of `t` without waiting (its owner is gone): its slot is
    /// free again if its operation has ended, else abandoned until it
    /// does. True if abandoned: the operation may still access its buffer.
    pub(crate) fn forget(&self, t: Ticket) -> bool {
        if self.abandon(t) {
            return true;
        }
        // Ended (DONE or FAILED): nobody will take its outcome.
        self.release(t.0);
        false
    }

    /// Waits until `t`'s operation completes or `deadline` passes. The ticket
    /// is consumed: on Done/Failed the slot is free again, on TimedOut it is
    /// abandoned until the operation really ends.
    pub(crate) fn wait(&self, t: Ticket, deadline: Instant) -> Outcome {
        let _waiting = WaiterGuard::enter(self);
        let s = &self.slots[t.0 as usize];
        let mut empty_reads = 0u32;
        let mut nap = Duration::from_micros(5);
        // The last sign of life: the wait began (its op was just posted),
        // or a read dispatched something. Polls yield until HOT after it.
        let mut active = Instant::now();
        loop {
            match s.state.load(Ordering::Acquire) {
                DONE => {
                    let len = s.len.load(Ordering::Relaxed);
                    self.release(t.0);
                    return Outcome::Done { len };
                }
                FAILED => {
                    let out = Outcome::Failed {
                        code: s.err.load(Ordering::Relaxed),
                        prov_errno: s.prov_err.load(Ordering::Relaxed),
                    };
                    self.release(t.0);
                    return out;
                }
                _ => {}
            }
            let now = Instant::now();
            let broken = self.broken();
            if now >= deadline || broken.is_some() {
                if self.abandon(t) {
                    return match broken {
                        Some((call, code)) => Outcome::CqFailed { call, code },
                        None => Outcome::TimedOut,
                    };
                }
                continue; // completed just now
            }
            let remaining = deadline - now;
            if let Ok(leader) = self.leader.try_lock() {
                let spinning = empty_reads < SPIN_READS || self.busy_poll.load(Ordering::Relaxed);
                let block = if spinning || !self.can_block() {
                    Duration::ZERO
                } else {
                    remaining.min(MAX_BLOCK)
                };
                let n = self.read_once(block);
                drop(leader); // before any nap: see `drive`
                if n > 0 {
                    empty_reads = 0;
                    nap = Duration::from_micros(5);
                    active = now;
                    self.notify();
                } else {
                    empty_reads += 1;
                    if !spinning && !self.can_block() {
                        // No wait object: poll, yielding while the CQ is
                        // live (see HOT), then with growing naps.
                        if now.duration_since(active) < HOT {
                            std::thread::yield_now();
                        } else {
                            std::thread::sleep(nap.min(remaining));
                            nap = (nap * 2).min(POLL_NAP_MAX);
                        }
                    }
                }
            } else {
                // Follower: sleep until the leader dispatches something.
                let e = self.epoch.lock().unwrap();
                let seen = *e;
                let _follower = Follower::enter(self);
                if s.state.load(Ordering::Acquire) != POSTED {
                    continue;
                }
                let _ = self
                    .dispatched
                    .wait_timeout_while(e, remaining.min(FOLLOWER_NAP), |e| *e == seen);
            }
        }
    }
}

/// Counts a follower for as long as it may sleep on `dispatched` (see
/// [`CqInner::notify`]); entered with the epoch lock held.
struct Follower<'a>(&'a CqInner);

impl<'a> Follower<'a> {
    fn enter(cq: &'a CqInner) -> Self {
        cq.followers.fetch_add(1, Ordering::Relaxed);
        atomic::fence(Ordering::SeqCst);
        Follower(cq)
    }
}

impl Drop for Follower<'_> {
    fn drop(&mut self) {
        self.0.followers.fetch_sub(1, Ordering::Relaxed);
    }
}

/// Counts a thread in `wait` for the duration of the wait.
struct WaiterGuard<'a>(&'a CqInner);

impl<'a> WaiterGuard<'a> {
    fn enter(cq: &'a CqInner) -> Self {
        if !cq.can_block() {
            fabkit_core::time::tighten_timer_slack();
        }
        cq.waiters.fetch_add(1, Ordering::AcqRel);
        if cq.can_block() && cq.leader.try_lock().is_err() {
            // Probably the progress thread, blocked in fi_cq_sread: wake it so
            // it sees us and steps aside. Harmless if it was another waiter.
            // SAFETY: the CQ is open for as long as `cq` lives.
            unsafe { ffi::fi_cq_signal(cq.fid.as_ptr()) };
        }
        WaiterGuard(cq)
    }
}

impl Drop for WaiterGuard<'_> {
    fn drop(&mut self) {
        let now = self.0.born.elapsed().as_nanos() as u64;
        self.0.last_wait_end.store(now, Ordering::Relaxed);
        self.0.waiters.fetch_sub(1, Ordering::AcqRel);
    }
}

#[cfg(test)]
mod tests {
    //! The slot and loss accounting on a real CQ (shm). What cannot be made
    //! to happen here is doubled by calling the dispatcher directly: a late
    //! completion (`complete`) and error entries as `fi_cq_readerr` returns
    //! them (`on_error_entry`: an overrun, which no provider here makes on
    //! demand, and an entry of no operation).
    use super::*;
    use crate::info::{find, Caps, Hints};
    use crate::Fabric;

    fn cq() -> CompletionQueue {
        let info = find(&Hints::new("shm", Caps::RMA), true).unwrap();
        let fabric = Fabric::open(&info).unwrap();
        let domain = Domain::open(&fabric, &info).unwrap();
        CompletionQueue::open(&domain, 64).unwrap()
    }

    #[test]
    fn an_abandoned_op_holds_its_slot_until_it_completes() {
        let cq = cq();
        let q = &cq.inner;
        assert_eq!((q.capacity(), q.lost()), (64, 0));
        let past = Instant::now();
        let t = q.acquire(past + Duration::from_secs(1)).unwrap();
        assert_eq!(q.wait(t, past), Outcome::TimedOut);
        assert_eq!(q.lost(), 1);
        // The other 63 slots are usable, the abandoned one is not.
        let held: Vec<Ticket> = (0..63).map(|_| q.acquire(past).unwrap()).collect();
        assert!(q.acquire(past).is_none(), "an abandoned slot was reused");
        for h in held {
            q.cancel_unposted(h);
        }
        // Its late completion frees it and is no longer counted as lost.
        q.complete(q.context(t), 0, None);
        assert_eq!(q.lost(), 0);
        let all: Vec<Ticket> = (0..64).map(|_| q.acquire(past).unwrap()).collect();
        assert_eq!(all.len(), 64);
    }

    #[test]
    fn a_completed_op_is_not_counted_lost_at_its_deadline() {
        let cq = cq();
        let q = &cq.inner;
        let past = Instant::now();
        let t = q.acquire(past + Duration::from_secs(1)).unwrap();
        q.complete(q.context(t), 7, None);
        assert_eq!(q.wait(t, past), Outcome::Done { len: 7 });
        assert_eq!(q.lost(), 0);
    }

    #[test]
    fn only_an_overrun_or_a_failed_non_blocking_read_breaks_the_cq() {
        let neg = |c: u32| -(c as isize);
        let fatal = |c: u32| ReadRc::Fatal(c as i32);
        for (blocking, rc, want) in [
            (false, neg(ffi::FI_EAGAIN), ReadRc::Empty),
            (true, neg(ffi::FI_EAGAIN), ReadRc::Empty),
            (false, neg(ffi::FI_EAVAIL), ReadRc::ErrorEntry),
            (true, neg(ffi::FI_EAVAIL), ReadRc::ErrorEntry),
            (false, neg(ffi::FI_EOVERRUN), fatal(ffi::FI_EOVERRUN)),
            (true, neg(ffi::FI_EOVERRUN), fatal(ffi::FI_EOVERRUN)),
            // How providers say a blocking read was woken: checked, not fatal.
            (true, neg(ffi::FI_ECANCELED), ReadRc::Recheck), // psm3, efa
            (true, -1, ReadRc::Recheck),                     // cxi
            (true, neg(ffi::FI_EINTR), ReadRc::Recheck),
            (true, neg(ffi::FI_ETIMEDOUT), ReadRc::Recheck),
            (true, neg(ffi::FI_ENOSYS), ReadRc::NoBlocking),
            // A non-blocking read has no such excuse.
            (false, neg(ffi::FI_ECANCELED), fatal(ffi::FI_ECANCELED)),
            (false, neg(ffi::FI_EIO), fatal(ffi::FI_EIO)),
        ] {
            assert_eq!(classify(blocking, rc), want, "blocking {blocking}, rc {rc}");
        }
    }

    /// An error entry as `fi_cq_readerr` hands it over.
    fn err_entry(ctx: *mut libc::c_void, err: u32) -> ffi::fi_cq_err_entry {
        ffi::fi_cq_err_entry {
            op_context: ctx,
            err: err as i32,
            ..Default::default()
        }
    }

    #[test]
    fn an_overrun_entry_is_reported_as_what_it_is_to_every_waiter() {
        let cq = cq();
        let q = &cq.inner;
        let later = Instant::now() + Duration::from_secs(30);
        let (a, b) = (q.acquire(later).unwrap(), q.acquire(later).unwrap());
        // fi_cq(3): an overrun is an error entry with err FI_EOVERRUN.
        let overrun = err_entry(std::ptr::null_mut(), ffi::FI_EOVERRUN);
        assert_eq!(q.on_error_entry(&overrun), 0);
        // The first failure is kept.
        q.on_error_entry(&err_entry(std::ptr::null_mut(), ffi::FI_EIO));
        let want = Outcome::CqFailed {
            call: "fi_cq_readerr",
            code: ffi::FI_EOVERRUN as i32,
        };
        let start = Instant::now();
        assert_eq!(q.wait(a, later), want);
        assert_eq!(q.wait(b, later), want);
        assert!(
            start.elapsed() < Duration::from_secs(1),
            "waited for the deadline"
        );
        assert_eq!(q.lost(), 2);
        // Nothing more is posted on it: no slot, at once.
        assert!(q.acquire(later).is_none());
        assert!(start.elapsed() < Duration::from_secs(1));
        let code = ffi::FI_EOVERRUN as i32;
        let e = crate::Error::completion_queue(crate::OpKind::Read, 3, "fi_cq_readerr", code);
        let msg = e.to_string();
        assert!(
            msg.contains("RMA read to rank 3")
                && msg.contains("fi_cq_readerr")
                && msg.contains(&format!("fi_errno {code}")),
            "{msg}"
        );
    }

    #[test]
    fn an_error_entry_fails_its_op_and_one_of_no_op_breaks_the_cq() {
        let cq = cq();
        let q = &cq.inner;
        let later = Instant::now() + Duration::from_secs(30);
        let (a, b) = (q.acquire(later).unwrap(), q.acquire(later).unwrap());
        assert_eq!(q.on_error_entry(&err_entry(q.context(a), ffi::FI_EIO)), 1);
        assert_eq!(q.broken(), None);
        assert_eq!(
            q.wait(a, later),
            Outcome::Failed {
                code: ffi::FI_EIO as i32,
                prov_errno: 0
            }
        );
        // An entry whose context is no slot: its waiter would never hear.
        let stray = q.context(b).cast::<u8>().wrapping_add(1).cast();
        q.on_error_entry(&err_entry(stray, ffi::FI_EIO));
        assert_eq!(q.broken(), Some(("fi_cq_readerr", ffi::FI_EIO as i32)));
        assert!(matches!(q.wait(b, later), Outcome::CqFailed { .. }));
    }
}
