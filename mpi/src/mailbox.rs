//! Request and reply messages between the ranks of an MPI job, over
//! point-to-point operations on a communicator of their own: the DHT's
//! message path under MPI, so that MPI and native libfabric compare
//! directly.
//!
//! A serving thread answers while the application computes, or waits in
//! its own `MPI_Barrier`: MPI must give `MPI_THREAD_MULTIPLE`, and
//! [`Mailbox::create`] refuses otherwise, saying so. Requests come on tag
//! [`REQUEST_TAG`] from any rank into receives posted ahead; a reply comes
//! on the tag its request's id maps to, from the owner alone. Every wait
//! tests with `MPI_Test` (MPI's own progress) and naps, never a blocking
//! `MPI_Wait` that could hang on a dead peer: each has a deadline. Buffers
//! are owned by the mailbox and never moved while MPI may use them; after a
//! timeout, a buffer a late message may still land in is leaked, not
//! reused.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use mpi::ffi;

use fabkit_core::time::Moment;
use fabkit_core::Bootstrap;
use fabkit_core::Error as CoreError;
use fabkit_core::OpKind;

use crate::bootstrap::MpiBootstrap;
use crate::error::{check, Error, Result};

/// The tag of every request.
pub const REQUEST_TAG: i32 = 0;

/// After its last request, how long the service polls, yielding the core,
/// before it naps: a request waiting behind a busy peer is taken at once.
const HOT: Duration = Duration::from_millis(1);

/// The longest nap of a service a request came to lately (and of a
/// caller whose reply is late): MPI progresses only in MPI calls, so a
/// request waits at most this long for such a service.
pub const NAP_MAX: Duration = Duration::from_micros(250);

/// How long a service goes without a request before it naps longer.
const QUIET: Duration = Duration::from_millis(20);

/// The longest nap of a quiet service: a wake-up from a nap and an
/// `MPI_Test` cost about 40 µs of CPU in these VMs, so naps of [`NAP_MAX`]
/// cost an idle service 6-7 % of a core, of 2 ms 2.0-2.4 %, and of 5 ms
/// under 1 %; the first request after a quiet spell waits up to this long.
pub const NAP_QUIET: Duration = Duration::from_millis(5);

/// How a service between requests waits: `None` while requests came
/// within [`HOT`] and this rank's application is making calls too (both
/// threads wait on the network, and a yield lets the other progress MPI);
/// a [`SERVE_NAP_MIN`] nap while requests come and the application makes
/// no call (it computes, and keeps the core for its whole time slice, 4 ms
/// here, before a yielding thread runs again; a timer's wake-up preempts
/// it); then naps doubling to [`NAP_MAX`], and after [`QUIET`] to
/// [`NAP_QUIET`].
fn serve_nap(idle: Duration, app_calling: bool, nap: &mut Duration) -> Option<Duration> {
    if idle < HOT {
        return (!app_calling).then_some(SERVE_NAP_MIN);
    }
    let cap = if idle < QUIET { NAP_MAX } else { NAP_QUIET };
    *nap = (*nap * 2).clamp(SERVE_NAP_MIN, cap);
    Some(*nap)
}

/// A service's shortest nap.
const SERVE_NAP_MIN: Duration = Duration::from_micros(10);

/// One posted receive, with its buffer (heap storage, never moved while
/// the receive is active).
struct Posted {
    req: Box<ffi::MPI_Request>,
    buf: Box<[u8]>,
}

/// Request and reply messages between the ranks of an MPI job (see the
/// module).
pub struct Mailbox {
    comm: ffi::MPI_Comm,
    rank: usize,
    ranks: usize,
    max: usize,
    tag_ub: i32,
    timeout: Duration,
    /// Request receives posted on `comm` (the serving thread's).
    posted: Mutex<Vec<Posted>>,
    woken: AtomicBool,
    /// When the service last took a request.
    active: Moment,
    /// When this rank last made a call, for the service's pauses.
    called: Moment,
    /// Requests too long for a receive, dropped.
    oversized: AtomicU64,
    freed: bool,
}

// SAFETY: the communicator is a handle MPI_THREAD_MULTIPLE lets every
// thread use at once (create refuses without it); the posted receives are
// behind a mutex, and every buffer is owned by the mailbox or a Call.
unsafe impl Send for Mailbox {}
// SAFETY: as above.
unsafe impl Sync for Mailbox {}

impl std::fmt::Debug for Mailbox {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "mpi::Mailbox({}/{})", self.rank, self.ranks)
    }
}

/// A call in flight: the reply's receive, posted before the request went
/// out, and the request's send, each on buffers of its own.
pub struct Call {
    to: usize,
    id: u64,
    recv: Option<Posted>,
    send: Option<Posted>,
}

// SAFETY: a call's requests are MPI handles that MPI_THREAD_MULTIPLE lets
// any thread test (a mailbox exists only under it), on buffers the call
// owns.
unsafe impl Send for Call {}

impl std::fmt::Debug for Call {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Call(to rank {}, request {})", self.to, self.id)
    }
}

impl Drop for Call {
    fn drop(&mut self) {
        // Not waited for: MPI may still use the buffers. Cancel the
        // receive and leak both (never reused, never freed under MPI).
        if let Some(mut p) = self.recv.take() {
            // SAFETY: an active receive request of this call.
            unsafe { ffi::MPI_Cancel(&mut *p.req) };
            std::mem::forget(p);
        }
        if let Some(p) = self.send.take() {
            std::mem::forget(p);
        }
    }
}

/// Whether MPI gives `MPI_THREAD_MULTIPLE` in this process.
pub fn threads_multiple() -> bool {
    let mut provided = 0;
    // SAFETY: MPI_Query_thread may be called once MPI is initialised; on
    // failure `provided` stays 0.
    let rc = unsafe { ffi::MPI_Query_thread(&mut provided) };
    // SAFETY: reading a constant exported by rsmpi.
    rc == 0 && provided == unsafe { ffi::RSMPI_THREAD_MULTIPLE }
}

impl Mailbox {
    /// A mailbox on a communicator of its own, duplicated from `boot`'s
    /// under its deadline; its receives for requests posted. Collective.
    /// Refused unless MPI gives `MPI_THREAD_MULTIPLE`.
    pub fn create(boot: &MpiBootstrap, timeout: Duration, max_msg: usize) -> Result<Mailbox> {
        if !threads_multiple() {
            return Err(Error::Core(CoreError::InvalidArgument(
                "the message path needs MPI_THREAD_MULTIPLE (a service thread answers while \
                 the application is in MPI), and this MPI was initialised with less: call \
                 MPI_Init_thread(MPI_THREAD_MULTIPLE), or choose the rma path"
                    .into(),
            )));
        }
        if max_msg == 0 || i32::try_from(max_msg).is_err() {
            return Err(Error::Core(CoreError::InvalidArgument(format!(
                "messages of {max_msg} B: give 1 B to 2 GiB"
            ))));
        }
        let comm = boot.duplicate("duplicating the communicator for the message path")?;
        let mut tag_ub = 32767;
        let mut p: *mut i32 = std::ptr::null_mut();
        let mut flag = 0;
        // SAFETY: comm is live; MPI_TAG_UB's value is a pointer to an int
        // that MPI owns for the communicator's life.
        unsafe {
            if ffi::MPI_Comm_get_attr(
                comm,
                ffi::MPI_TAG_UB as i32,
                (&mut p as *mut *mut i32).cast(),
                &mut flag,
            ) == 0
                && flag != 0
                && !p.is_null()
            {
                tag_ub = *p;
            }
        }
        let mb = Mailbox {
            comm,
            rank: boot.rank(),
            ranks: boot.size(),
            max: max_msg,
            tag_ub: tag_ub.max(32767),
            timeout: fabkit_core::time::scaled(timeout),
            posted: Mutex::new(Vec::new()),
            woken: AtomicBool::new(false),
            active: Moment::default(),
            called: Moment::default(),
            oversized: AtomicU64::new(0),
            freed: false,
        };
        {
            let mut posted = mb.posted.lock().unwrap();
            for _ in 0..SLOTS {
                posted.push(mb.post_recv(
                    vec![0u8; mb.max].into_boxed_slice(),
                    // SAFETY: reading a constant exported by rsmpi.
                    unsafe { ffi::RSMPI_ANY_SOURCE },
                    REQUEST_TAG,
                )?);
            }
        }
        // Nobody sends before every rank has posted its receives.
        boot.barrier()?;
        Ok(mb)
    }

    /// This rank.
    pub fn rank(&self) -> usize {
        self.rank
    }

    /// Ranks in the job.
    pub fn ranks(&self) -> usize {
        self.ranks
    }

    /// The longest message either way.
    pub fn max_len(&self) -> usize {
        self.max
    }

    /// Requests dropped as longer than a receive buffer.
    pub fn oversized(&self) -> u64 {
        self.oversized.load(Ordering::Relaxed)
    }

    /// The tag of the reply to request `id`: one of the tags above the
    /// request tag, by the id's value modulo their number, so the calls of
    /// one rank in flight to one owner (consecutive ids) never share one.
    fn reply_tag(&self, id: u64) -> i32 {
        let span = (self.tag_ub as u64).max(2) - 1;
        1 + (id % span) as i32
    }

    fn peer(&self, to: usize) -> Result<i32> {
        if to >= self.ranks {
            return Err(Error::Core(CoreError::NoSuchRank {
                peer: to,
                ranks: self.ranks,
            }));
        }
        Ok(to as i32)
    }

    fn check_len(&self, len: usize, to: usize) -> Result<()> {
        if len > self.max {
            return Err(Error::Core(CoreError::InvalidArgument(format!(
                "a message of {len} B to rank {to}: more than the {} B a message carries",
                self.max
            ))));
        }
        Ok(())
    }

    fn post_recv(&self, mut buf: Box<[u8]>, source: i32, tag: i32) -> Result<Posted> {
        // SAFETY: reading a constant exported by rsmpi.
        let mut req = Box::new(unsafe { ffi::RSMPI_REQUEST_NULL });
        // SAFETY: buf and req are heap storage that stays in place until
        // the receive completes (or is leaked); comm is live.
        let rc = unsafe {
            ffi::MPI_Irecv(
                buf.as_mut_ptr().cast(),
                self.max as i32,
                ffi::RSMPI_UINT8_T,
                source,
                tag,
                self.comm,
                &mut *req,
            )
        };
        check("MPI_Irecv", rc)?;
        Ok(Posted { req, buf })
    }

    fn post_send(&self, data: &[u8], to: i32, tag: i32) -> Result<Posted> {
        let buf: Box<[u8]> = data.into();
        // SAFETY: reading a constant exported by rsmpi.
        let mut req = Box::new(unsafe { ffi::RSMPI_REQUEST_NULL });
        // SAFETY: buf and req are heap storage that stays in place until
        // the send completes (or is leaked); comm is live.
        let rc = unsafe {
            ffi::MPI_Isend(
                buf.as_ptr().cast(),
                buf.len() as i32,
                ffi::RSMPI_UINT8_T,
                to,
                tag,
                self.comm,
                &mut *req,
            )
        };
        check("MPI_Isend", rc)?;
        Ok(Posted { req, buf })
    }

    /// Tests `p` once: its status if it completed.
    fn test(p: &mut Posted) -> Result<Option<ffi::MPI_Status>> {
        let mut done = 0;
        // SAFETY: an all-zero status is a valid out-buffer.
        let mut st: ffi::MPI_Status = unsafe { std::mem::zeroed() };
        // SAFETY: an active request on buffers `p` owns.
        let rc = unsafe { ffi::MPI_Test(&mut *p.req, &mut done, &mut st) };
        // A receive of a message longer than its buffer completes with
        // MPI_ERR_TRUNCATE (returned, and in the status): the caller says
        // what it was.
        // SAFETY: a plain constant exported by the shim.
        let truncated = rc == unsafe { crate::shim::fabkit_mpi_err_truncate };
        if truncated {
            st.MPI_ERROR = rc;
            return Ok(Some(st));
        }
        check("MPI_Test", rc)?;
        Ok((done != 0).then_some(st))
    }

    /// Waits for `p` until `deadline`, testing it, yielding the core for a
    /// while and then napping: the status, or `None` at the deadline (the
    /// request still active).
    fn wait(p: &mut Posted, deadline: Instant) -> Result<Option<ffi::MPI_Status>> {
        let start = Instant::now();
        let mut nap = Duration::from_micros(10);
        loop {
            if let Some(st) = Mailbox::test(p)? {
                return Ok(Some(st));
            }
            let now = Instant::now();
            if now >= deadline {
                return Ok(None);
            }
            if now.duration_since(start) < HOT {
                std::thread::yield_now();
            } else {
                std::thread::sleep(nap.min(deadline - now));
                nap = (nap * 2).min(NAP_MAX);
            }
        }
    }

    /// The received length of a completed receive, or an error for a
    /// message longer than its buffer (`MPI_ERR_TRUNCATE`).
    fn received(&self, st: &ffi::MPI_Status, what: &'static str) -> Result<usize> {
        // SAFETY: a plain constant exported by the shim.
        if st.MPI_ERROR == unsafe { crate::shim::fabkit_mpi_err_truncate } {
            return Err(Error::Core(CoreError::InvalidArgument(format!(
                "a {what} from rank {} was longer than the {} B posted for it (the peer sends \
                 messages larger than this rank takes)",
                st.MPI_SOURCE, self.max
            ))));
        }
        let mut n = 0;
        // SAFETY: a status of a completed receive of bytes.
        check("MPI_Get_count", unsafe {
            ffi::MPI_Get_count(st, ffi::RSMPI_UINT8_T, &mut n)
        })?;
        Ok(usize::try_from(n).unwrap_or(0).min(self.max))
    }

    /// Sends `request` to rank `to` with the request tag, after posting a
    /// receive for its reply (the tag of `id`, from `to` alone).
    pub fn call(&self, to: usize, id: u64, request: &[u8]) -> Result<Call> {
        self.called.mark();
        let peer = self.peer(to)?;
        self.check_len(request.len(), to)?;
        let recv = self.post_recv(
            vec![0u8; self.max].into_boxed_slice(),
            peer,
            self.reply_tag(id),
        )?;
        let mut call = Call {
            to,
            id,
            recv: Some(recv),
            send: None,
        };
        call.send = Some(self.post_send(request, peer, REQUEST_TAG)?);
        Ok(call)
    }

    /// Whether `call`'s reply has come (testing it once, never waiting).
    pub fn ready(&self, call: &Call) -> bool {
        match call.recv.as_ref() {
            Some(p) => {
                let mut flag = 0;
                // SAFETY: an all-zero status is a valid out-buffer.
                let mut st: ffi::MPI_Status = unsafe { std::mem::zeroed() };
                // SAFETY: an active request; MPI_Request_get_status does not
                // free it.
                unsafe { ffi::MPI_Request_get_status(*p.req, &mut flag, &mut st) };
                flag != 0
            }
            None => false,
        }
    }

    /// Waits until `deadline` for `call`'s reply and hands its bytes to
    /// `f`. Past the deadline: an error naming the peer and the request
    /// (the receive is cancelled and its buffer leaked).
    pub fn wait_reply<R>(
        &self,
        mut call: Call,
        deadline: Instant,
        f: impl FnOnce(&[u8]) -> R,
    ) -> Result<R> {
        let to = call.to;
        let start = Instant::now();
        let timeout = |op| {
            Error::Core(CoreError::Timeout {
                op,
                peer: to,
                timeout: deadline.saturating_duration_since(start),
            })
        };
        if let Some(mut p) = call.send.take() {
            if Mailbox::wait(&mut p, deadline)?.is_none() {
                // Still active: leaked with the call (see its Drop).
                call.send = Some(p);
                return Err(timeout(OpKind::Send));
            }
        }
        let mut p = call
            .recv
            .take()
            .expect("a call has its receive until waited");
        match Mailbox::wait(&mut p, deadline)? {
            Some(st) => {
                let n = self.received(&st, "reply")?;
                Ok(f(&p.buf[..n]))
            }
            None => {
                call.recv = Some(p);
                Err(timeout(OpKind::Recv))
            }
        }
    }

    /// Waits up to `wait` for requests and hands each to `f` with the rank
    /// it came from; how many it handed. It tests the posted receives
    /// between pauses (see `serve_nap`: for a millisecond after the last
    /// request, yields while this rank's application makes calls, else 10
    /// µs naps; then naps growing to [`NAP_MAX`], and to [`NAP_QUIET`] once
    /// quiet for 20 ms): MPI progresses only in MPI calls, so an idle
    /// service costs a test per nap, and a request waits at most a nap.
    /// One thread serves.
    pub fn serve(&self, wait: Duration, f: &mut dyn FnMut(usize, &[u8])) -> Result<usize> {
        let deadline = Instant::now() + wait;
        let mut nap = SERVE_NAP_MIN;
        fabkit_core::time::tighten_timer_slack();
        loop {
            let mut handed = 0;
            {
                let mut posted = self.posted.lock().unwrap();
                for slot in posted.iter_mut() {
                    let Some(st) = Mailbox::test(slot)? else {
                        continue;
                    };
                    match self.received(&st, "request") {
                        Ok(n) => {
                            f(st.MPI_SOURCE as usize, &slot.buf[..n]);
                            handed += 1;
                        }
                        Err(_) => {
                            self.oversized.fetch_add(1, Ordering::Relaxed);
                        }
                    }
                    let buf = std::mem::take(&mut slot.buf);
                    // SAFETY: reading a constant exported by rsmpi.
                    let any = unsafe { ffi::RSMPI_ANY_SOURCE };
                    *slot = self.post_recv(buf, any, REQUEST_TAG)?;
                }
            }
            if handed > 0 {
                self.active.mark();
                return Ok(handed);
            }
            if self.woken.swap(false, Ordering::AcqRel) {
                return Ok(0);
            }
            let now = Instant::now();
            if now >= deadline {
                return Ok(0);
            }
            match serve_nap(self.active.since(), self.called.since() < HOT, &mut nap) {
                Some(n) => std::thread::sleep(n.min(deadline - now)),
                None => std::thread::yield_now(),
            }
        }
    }

    /// Sends `reply` to rank `to` with the tag of `id`, and waits for the
    /// send to complete.
    pub fn answer(&self, to: usize, id: u64, reply: &[u8]) -> Result<()> {
        let peer = self.peer(to)?;
        self.check_len(reply.len(), to)?;
        let mut p = self.post_send(reply, peer, self.reply_tag(id))?;
        let deadline = Instant::now() + self.timeout;
        match Mailbox::wait(&mut p, deadline)? {
            Some(_) => Ok(()),
            None => {
                std::mem::forget(p);
                Err(Error::Core(CoreError::Timeout {
                    op: OpKind::Send,
                    peer: to,
                    timeout: self.timeout,
                }))
            }
        }
    }

    /// Ends a `serve` that is waiting, at once.
    pub fn wake(&self) {
        self.woken.store(true, Ordering::Release);
    }
}

/// Request receives a mailbox keeps posted.
const SLOTS: usize = 16;

impl Drop for Mailbox {
    fn drop(&mut self) {
        if self.freed {
            return;
        }
        self.freed = true;
        let mut finalized = 0;
        // SAFETY: may be called at any time.
        unsafe { ffi::MPI_Finalized(&mut finalized) };
        let posted = std::mem::take(&mut *self.posted.lock().unwrap());
        if finalized != 0 {
            std::mem::forget(posted);
            return;
        }
        for mut p in posted {
            // SAFETY: an active receive of this mailbox. A cancelled receive
            // completes locally; its buffer is freed only once a test says
            // so, else leaked.
            unsafe { ffi::MPI_Cancel(&mut *p.req) };
            let deadline = Instant::now() + Duration::from_millis(100);
            match Mailbox::wait(&mut p, deadline) {
                Ok(Some(_)) => drop(p),
                _ => std::mem::forget(p),
            }
        }
        // SAFETY: the communicator is ours, with nothing of ours active on
        // it any more (or leaked).
        unsafe { ffi::MPI_Comm_free(&mut self.comm) };
    }
}
