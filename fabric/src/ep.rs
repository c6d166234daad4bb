//! Reliable-datagram endpoint (`fid_ep`) and the posting of operations.

use std::ptr::NonNull;
use std::sync::Arc;
use std::time::{Duration, Instant};

use fabric_sys as ffi;

use crate::av::{AddressVector, AvInner};
use crate::cq::{CompletionQueue, CqInner, Ticket, HOT};
use crate::domain::{close_fid, Domain, DomainInner};
use crate::error::{call_error, check, Error, Result};
use fabkit_core::Error as CoreError;
use fabkit_core::OpKind;

/// An enabled RDM endpoint bound to one CQ (transmit and receive) and one AV.
#[doc(alias = "fi_endpoint")]
#[derive(Clone, Debug)]
pub struct Endpoint {
    pub(crate) inner: Arc<EpInner>,
}

#[derive(Debug)]
pub(crate) struct EpInner {
    pub(crate) fid: NonNull<ffi::fid_ep>,
    name: Vec<u8>,
    pub(crate) cq: Arc<CqInner>,
    _av: Arc<AvInner>,
    pub(crate) domain: Arc<DomainInner>,
    /// Set by [`EpInner::close`] once `fi_close` succeeded.
    closed: bool,
}

// SAFETY: the domain is FI_THREAD_SAFE, so the endpoint may be used from any
// thread concurrently.
unsafe impl Send for EpInner {}
// SAFETY: as above.
unsafe impl Sync for EpInner {}

impl Drop for EpInner {
    fn drop(&mut self) {
        if self.closed {
            return;
        }
        // SAFETY: we own the fid, and every region registered through this
        // endpoint holds an Arc to it, so all of them are closed already.
        // Buffers of operations that timed out are not ours: their owner
        // (the Rank) closes us with `close`, which checks the result.
        let _ = unsafe { close_fid(&mut (*self.fid.as_ptr()).fid, "endpoint", &self.domain.log) };
    }
}

impl EpInner {
    /// Closes the endpoint and says whether it closed. fi_endpoint(3): once
    /// `fi_close` on the endpoint has returned, no operation posted on it
    /// touches its buffers any more; until then they must not be released.
    /// On failure the endpoint and its parents (CQ, AV, domain, fabric) are
    /// leaked: the provider may still complete operations into the CQ, and
    /// closing the parents would fail with -FI_EBUSY anyway.
    pub(crate) fn close(mut self) -> Result<()> {
        // SAFETY: we own the fid and, owning `self`, no region holds an Arc
        // to us any more; it is not used again.
        let rc = unsafe { close_fid(&mut (*self.fid.as_ptr()).fid, "endpoint", &self.domain.log) };
        if rc != 0 {
            std::mem::forget(self);
            return Err(call_error("fi_close(endpoint)", -rc));
        }
        self.closed = true;
        Ok(())
    }
}

impl Endpoint {
    /// Opens an endpoint for the domain's configuration, binds `cq` for
    /// transmit and receive completions and `av` for addressing, and enables
    /// it.
    pub fn open(domain: &Domain, cq: &CompletionQueue, av: &AddressVector) -> Result<Endpoint> {
        let mut fid = std::ptr::null_mut();
        // SAFETY: domain open, info valid; fid receives an endpoint we own.
        check("fi_endpoint", unsafe {
            ffi::fi_endpoint(
                domain.inner.fid.as_ptr(),
                domain.inner.info.as_ptr(),
                &mut fid,
                std::ptr::null_mut(),
            )
        })?;
        let fid: NonNull<ffi::fid_ep> = NonNull::new(fid).expect("fi_endpoint: null");
        let mut ep = EpInner {
            fid,
            name: Vec::new(),
            cq: cq.inner.clone(),
            _av: av.inner.clone(),
            domain: domain.inner.clone(),
            closed: false,
        };
        domain.inner.log.opened("endpoint");
        // SAFETY: all fids are open; the endpoint holds Arcs to the CQ and
        // AV, so they outlive the binding (likewise for the two calls below).
        check("fi_ep_bind(av)", unsafe {
            ffi::fi_ep_bind(fid.as_ptr(), &mut (*av.inner.fid.as_ptr()).fid, 0)
        })?;
        // SAFETY: see above.
        check("fi_ep_bind(cq)", unsafe {
            ffi::fi_ep_bind(
                fid.as_ptr(),
                &mut (*cq.inner.fid.as_ptr()).fid,
                (ffi::FI_TRANSMIT | ffi::FI_RECV) as u64,
            )
        })?;
        // SAFETY: see above.
        check("fi_enable", unsafe { ffi::fi_enable(fid.as_ptr()) })?;
        ep.name = getname(fid)?;
        av.inner.learn_name_len(ep.name.len());
        Ok(Endpoint {
            inner: Arc::new(ep),
        })
    }

    /// This endpoint's address, to be inserted into peers' address vectors.
    pub fn name(&self) -> &[u8] {
        &self.inner.name
    }

    /// Posts one operation with `post(context)`, retrying on -FI_EAGAIN while
    /// progressing the CQ, until `deadline`.
    pub(crate) fn post(
        &self,
        op: OpKind,
        peer: usize,
        deadline: Instant,
        timeout: Duration,
        mut post: impl FnMut(*mut libc::c_void) -> isize,
    ) -> Result<Ticket> {
        let mut room = Room::default();
        loop {
            match self.try_post(op, peer, deadline, timeout, &mut post)? {
                Attempt::Posted(t) => return Ok(t),
                Attempt::Refused => self.make_room(&mut room, op, peer, deadline, timeout)?,
            }
        }
    }

    /// Posts one operation with `post(context)` once: [`Attempt::Refused`]
    /// if the provider said -FI_EAGAIN (its slot is given back; progress
    /// with [`Endpoint::make_room`] and try again).
    pub(crate) fn try_post(
        &self,
        op: OpKind,
        peer: usize,
        deadline: Instant,
        timeout: Duration,
        post: impl FnOnce(*mut libc::c_void) -> isize,
    ) -> Result<Attempt> {
        let cq = &self.inner.cq;
        let t = cq
            .acquire(deadline)
            .ok_or_else(|| stuck(cq, op, peer, timeout))?;
        let rc = post(cq.context(t));
        if rc == 0 {
            return Ok(Attempt::Posted(t));
        }
        cq.cancel_unposted(t);
        if rc == -(ffi::FI_EAGAIN as isize) {
            return Ok(Attempt::Refused);
        }
        Err(match rc {
            rc if rc < 0 => Error::completion(op, peer, -rc as i32, 0),
            _ => call_error("post", ffi::FI_EOTHER as i32),
        })
    }

    /// One step of waiting for room after posts were refused with
    /// -FI_EAGAIN: the transmit queue is full, or the peer has not yet
    /// taken what we sent (shm 1.17 keeps one delivery-complete write per
    /// peer in flight, and it completes only once the target has
    /// progressed), so complete something first. While completions come
    /// (see [`HOT`]), only poll and yield the core, so a peer on it can
    /// progress and a batch is not paced by naps of tens of microseconds;
    /// after that, nap as before. Fails at `deadline`, or at once if the
    /// CQ broke, naming `op` and `peer` (the refused post waited for).
    pub(crate) fn make_room(
        &self,
        room: &mut Room,
        op: OpKind,
        peer: usize,
        deadline: Instant,
        timeout: Duration,
    ) -> Result<()> {
        let cq = &self.inner.cq;
        let now = Instant::now();
        if now >= deadline || cq.broken().is_some() {
            return Err(stuck(cq, op, peer, timeout));
        }
        let since = *room.active.get_or_insert(now);
        let n = if now.duration_since(since) < HOT {
            let n = cq.drive(Duration::ZERO);
            std::thread::yield_now();
            n
        } else {
            cq.drive(Duration::from_micros(100))
        };
        if n > 0 {
            room.active = Some(now);
        }
        Ok(())
    }

    pub(crate) fn raw(&self) -> *mut ffi::fid_ep {
        self.inner.fid.as_ptr()
    }

    /// Cancels a posted receive (after its wait timed out).
    pub(crate) fn cancel(&self, t: Ticket) {
        // SAFETY: the endpoint is open; cancelling an unknown or completed
        // context is harmless (returns -FI_ENOENT).
        unsafe {
            ffi::fi_cancel(&mut (*self.raw()).fid, self.inner.cq.context(t));
        }
    }
}

/// What one attempt at posting came to.
#[derive(Debug)]
pub(crate) enum Attempt {
    /// Posted; the ticket's slot is the operation's context.
    Posted(Ticket),
    /// -FI_EAGAIN: nothing was posted.
    Refused,
}

/// The state of waiting for room after refused posts (see
/// [`Endpoint::make_room`]).
#[derive(Debug, Default)]
pub(crate) struct Room {
    /// The first refusal, or the last completion dispatched since.
    active: Option<Instant>,
}

/// Why a post could not be made: the CQ broke (at once), else the deadline
/// passed.
fn stuck(cq: &CqInner, op: OpKind, peer: usize, timeout: Duration) -> Error {
    match cq.broken() {
        Some((call, code)) => Error::completion_queue(op, peer, call, code),
        None => Error::from(CoreError::Timeout { op, peer, timeout }),
    }
}

fn getname(fid: NonNull<ffi::fid_ep>) -> Result<Vec<u8>> {
    let mut len: usize = 0;
    // SAFETY: a zero-length query returns the needed size (-FI_ETOOSMALL).
    unsafe {
        ffi::fi_getname(&mut (*fid.as_ptr()).fid, std::ptr::null_mut(), &mut len);
    }
    let mut name = vec![0u8; len.max(16)];
    let mut len = name.len();
    // SAFETY: name has room for len bytes.
    check("fi_getname", unsafe {
        ffi::fi_getname(&mut (*fid.as_ptr()).fid, name.as_mut_ptr().cast(), &mut len)
    })?;
    name.truncate(len);
    Ok(name)
}
