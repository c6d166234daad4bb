//! What both sides of a mailbox share underneath: doorbells, buffers,
//! posting request receives, sending and settling, taking requests,
//! retiring buffers, and closing in the order the provider needs.

use super::*;

impl Inner {
    /// Wakes rank `to`'s service if it sleeps on its doorbell.
    pub(super) fn ring(&self, to: usize) {
        if let Some(Some(bell)) = self.bells.get(to) {
            bell.ring();
        }
    }

    /// Whether a request receive has completed and waits to be taken.
    pub(super) fn requests_waiting(&self) -> bool {
        let posted = self.posted.lock().unwrap();
        posted
            .iter()
            .flatten()
            .any(|p| self.service.cq.inner.settled(p.t))
    }

    /// Whether a wake-up was asked (left for `serve` to take).
    pub(super) fn woken_now(&self) -> bool {
        self.woken.load(Ordering::Acquire)
    }

    pub(super) fn peer(&self, rank: usize) -> Result<Peer> {
        self.peers.get(rank).copied().ok_or_else(|| {
            Error::from(CoreError::NoSuchRank {
                peer: rank,
                ranks: self.peers.len(),
            })
        })
    }

    pub(super) fn check_len(&self, len: usize, peer: usize) -> Result<()> {
        if len > self.max {
            return Err(Error::from(CoreError::InvalidArgument(format!(
                "a message of {len} B to rank {peer}: more than the {} B a message carries",
                self.max
            ))));
        }
        Ok(())
    }

    /// A buffer of the largest message, spare or newly registered.
    pub(super) fn buffer(&self, side: &Side) -> Result<MemoryRegion> {
        if let Some(b) = self.spare.lock().unwrap().pop() {
            return Ok(b);
        }
        side.ep.register_local(self.max)
    }

    /// Posts a receive of a request into `buf` on the service endpoint.
    pub(super) fn post_request_recv(&self, buf: MemoryRegion) -> Result<Posted> {
        let deadline = Instant::now() + self.cfg.timeout;
        let (ep, b, desc, len) = (self.service.ep.raw(), buf.ptr_at(0), buf.desc(), self.max);
        let t = self
            .service
            .ep
            .post(OpKind::Recv, self.rank, deadline, self.cfg.timeout, |ctx| {
                // SAFETY: b has room for len bytes and stays alive in
                // `posted` (or retired) until the receive completes or the
                // endpoint closes; ctx is a reserved slot.
                unsafe {
                    ffi::fi_trecv(
                        ep,
                        b.cast(),
                        len,
                        desc,
                        ffi::FI_ADDR_UNSPEC,
                        REQUEST,
                        0,
                        ctx,
                    )
                }
            });
        self.posted_or_spare(t, buf)
    }

    /// The posted operation on `buf`, or where posting failed, `buf` back
    /// among the spares (nothing can touch it) and the error.
    fn posted_or_spare(&self, t: Result<Ticket>, buf: MemoryRegion) -> Result<Posted> {
        match t {
            Ok(t) => Ok(Posted { t, buf }),
            Err(e) => {
                self.spare.lock().unwrap().push(buf);
                Err(e)
            }
        }
    }

    /// Copies `data` into a buffer and posts its send with `tag` to `addr`
    /// (`peer` names it in errors).
    pub(super) fn send(
        &self,
        side: &Side,
        addr: FiAddr,
        tag: u64,
        data: &[u8],
        peer: usize,
    ) -> Result<Posted> {
        self.send_progressing(side, addr, tag, data, peer, &mut || Ok(()))
    }

    /// [`Inner::send`], calling `between` whenever the provider refuses the
    /// post for now (-FI_EAGAIN): what else must progress before it takes
    /// it (`shm` refuses a first send to an endpoint until that endpoint
    /// has taken the connection request).
    pub(super) fn send_progressing(
        &self,
        side: &Side,
        addr: FiAddr,
        tag: u64,
        data: &[u8],
        peer: usize,
        between: &mut dyn FnMut() -> Result<()>,
    ) -> Result<Posted> {
        let buf = self.buffer(side)?;
        if let Err(e) = buf.fill(0, data) {
            self.spare.lock().unwrap().push(buf);
            return Err(e);
        }
        let deadline = Instant::now() + self.cfg.timeout;
        let (ep, b, desc, len) = (side.ep.raw(), buf.ptr_at(0), buf.desc(), data.len());
        let mut room = Room::default();
        let posted = loop {
            let attempt = side
                .ep
                .try_post(OpKind::Send, peer, deadline, self.cfg.timeout, |ctx| {
                    // SAFETY: b holds len staged bytes that stay untouched
                    // until the send completes (or the buffer is
                    // retired); ctx is a reserved slot.
                    unsafe { ffi::fi_tsend(ep, b.cast(), len, desc, addr, tag, ctx) }
                });
            match attempt {
                Ok(Attempt::Posted(t)) => break Ok(t),
                Ok(Attempt::Refused) => {
                    if let Err(e) = between().and_then(|()| {
                        side.ep
                            .make_room(&mut room, OpKind::Send, peer, deadline, self.cfg.timeout)
                    }) {
                        break Err(e);
                    }
                }
                Err(e) => break Err(e),
            }
        };
        self.posted_or_spare(posted, buf)
    }

    /// Waits for a send until `deadline`; its buffer goes back to the spares,
    /// or is retired if the send did not complete.
    pub(super) fn settle(
        &self,
        side: &Side,
        p: Posted,
        deadline: Instant,
        op: OpKind,
        peer: usize,
    ) -> Result<()> {
        let start = Instant::now();
        match side.cq.inner.wait(p.t, deadline) {
            Outcome::Done { .. } => {
                self.spare.lock().unwrap().push(p.buf);
                Ok(())
            }
            Outcome::Failed { code, prov_errno } => {
                self.spare.lock().unwrap().push(p.buf);
                Err(Error::completion(op, peer, code, prov_errno))
            }
            Outcome::TimedOut => {
                side.ep.cancel(p.t);
                self.retire(p.buf);
                Err(Error::from(CoreError::Timeout {
                    op,
                    peer,
                    timeout: deadline.saturating_duration_since(start),
                }))
            }
            Outcome::CqFailed { call, code } => {
                side.ep.cancel(p.t);
                self.retire(p.buf);
                Err(Error::completion_queue(op, peer, call, code))
            }
        }
    }

    /// Hands every request that has arrived to `f` and reposts its receive.
    pub(super) fn take_requests(
        &self,
        f: &mut dyn FnMut(Option<usize>, &[u8]),
        bytes: &mut Vec<u8>,
    ) -> Result<usize> {
        let mut handed = 0;
        let mut posted = self.posted.lock().unwrap();
        for slot in posted.iter_mut() {
            let Some(p) = slot.as_ref() else { continue };
            let Some((out, src)) = self.service.cq.inner.take(p.t) else {
                continue;
            };
            let p = slot.take().expect("checked above");
            match out {
                Outcome::Done { len } => {
                    bytes.resize(len.min(self.max), 0);
                    p.buf.snapshot(0, bytes)?;
                    let from = self.members.get(&src).copied();
                    {
                        let mut c = self.counts.lock().unwrap();
                        c.requests += 1;
                        c.strangers += u64::from(from.is_none());
                    }
                    f(from, bytes);
                    handed += 1;
                }
                Outcome::Failed { code, .. } => {
                    let mut c = self.counts.lock().unwrap();
                    if code == ffi::FI_ETRUNC as i32 {
                        c.oversized += 1;
                    } else {
                        c.failed += 1;
                    }
                }
                Outcome::TimedOut | Outcome::CqFailed { .. } => {
                    unreachable!("take reports completions only")
                }
            }
            *slot = Some(self.post_request_recv(p.buf)?);
        }
        Ok(handed)
    }

    /// An operation on `p` will not be waited for: cancel it, and keep its
    /// buffer until the endpoint closes unless it has already ended.
    pub(super) fn give_up(&self, side: &Side, p: Posted) {
        side.ep.cancel(p.t);
        if side.cq.inner.forget(p.t) {
            self.retire(p.buf);
        } else {
            self.spare.lock().unwrap().push(p.buf);
        }
    }

    pub(super) fn retire(&self, buf: MemoryRegion) {
        self.retired.lock().unwrap().push(buf.retire());
    }
}

impl Drop for Inner {
    fn drop(&mut self) {
        // The request receives are in flight: their buffers are retired, and
        // freed only once the endpoints have closed.
        let posted: Vec<Posted> = std::mem::take(&mut *self.posted.lock().unwrap())
            .into_iter()
            .flatten()
            .collect();
        let mut retired = std::mem::take(&mut *self.retired.lock().unwrap());
        retired.extend(posted.into_iter().map(|p| p.buf.retire()));
        // Spare buffers have nothing in flight.
        drop(std::mem::take(&mut *self.spare.lock().unwrap()));
        // SAFETY: each endpoint is taken exactly once, here, and not used
        // after; no region of ours holds it any more (spares dropped,
        // in-flight ones retired).
        let eps = unsafe {
            [
                ManuallyDrop::take(&mut self.service.ep),
                ManuallyDrop::take(&mut self.client.ep),
            ]
        };
        crate::mr::close_then_free(
            eps,
            retired,
            self.regions_first,
            &format!("mailbox of rank {}", self.rank),
        );
        let _ = &self.domain;
    }
}
