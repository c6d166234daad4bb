//! A process outside a job, as an attacker is: an endpoint of its own on
//! the job's provider, which reaches a rank by an address it found itself
//! (a scan, not the job's bootstrap) and tries what a peer could do, with
//! keys and offsets it guesses: RMA reads and writes, atomics, and tagged
//! messages. What it is for is the test that none of it works: every
//! operation the target accepted is counted as a breach.
//!
//! Tries go out a window at a time and each is waited for up to the
//! stranger's timeout; a target that answers nothing for a whole window,
//! or takes no connection within a timeout twice (on two endpoints), is
//! given up on (the rest of the run's tries counted as skipped), so a
//! provider that drops bad requests silently costs one window's timeout,
//! not one per key.

use std::collections::{BTreeMap, VecDeque};
use std::mem::ManuallyDrop;
use std::time::{Duration, Instant};

use fabric_sys as ffi;

use crate::av::{AddressVector, FiAddr};
use crate::cq::{CompletionQueue, Outcome, Ticket};
use crate::domain::{Domain, Fabric};
use crate::ep::{Attempt, Endpoint};
use crate::error::{strerror, Result};
use crate::info::{self, Caps, Hints, Info};
use crate::mr::{close_then_free, MemoryRegion};
use fabkit_core::OpKind;

/// Bytes each try reads or writes (one u64, the atomics' width).
const WORD: usize = 8;
/// The byte every write try stores, so a breach is visible in the data.
pub const SCRIBBLE: u8 = 0x5a;

/// What a try does at the target.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Try {
    /// `fi_read` of one word.
    Read,
    /// `fi_writemsg` of one word of [`SCRIBBLE`], delivery complete.
    Write,
    /// `fi_fetch_atomic(FI_SUM)` of 1 on one word.
    FetchAdd,
}

impl Try {
    /// Its name in reports.
    pub fn name(self) -> &'static str {
        match self {
            Try::Read => "read",
            Try::Write => "write",
            Try::FetchAdd => "fetch_add",
        }
    }

    fn kind(self) -> OpKind {
        match self {
            Try::Read => OpKind::Read,
            Try::Write => OpKind::Write,
            Try::FetchAdd => OpKind::FetchAdd,
        }
    }
}

/// What a run of tries came to (as reports write it).
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct Tally {
    /// Tries posted.
    pub tried: u64,
    /// Tries the target carried out: each one a breach.
    pub done: u64,
    /// Tries that failed with an error completion, by its name.
    pub refused: BTreeMap<String, u64>,
    /// Tries the provider would not post (an error at once), by its name.
    pub not_posted: BTreeMap<String, u64>,
    /// Tries with no completion within the timeout.
    pub unanswered: u64,
    /// Tries never sent: the target had stopped answering, or `stopped`.
    pub skipped: u64,
    /// Why the rest was not tried, when the stranger stopped on its own
    /// account (too many endpoints left open).
    pub stopped: Option<String>,
}

/// Why [`Stranger::rma`] ended before its tries were done.
#[derive(Debug)]
pub enum Stopped {
    /// The provider would not take the target's address (shm maps the
    /// target's segment on insert, which another user may not).
    Unreachable(crate::Error),
    /// The stranger's own side failed (a new endpoint, its queue): the
    /// tries settled until then are in `so_far`.
    Failed {
        /// What failed.
        error: crate::Error,
        /// The tries settled before it.
        so_far: Box<Tally>,
    },
}

/// The most endpoints a stranger leaves open (see `Line::leak_broken`):
/// past them, the atomics that would leave more are skipped.
pub const MAX_LEFT_OPEN: u64 = 128;

/// Errors that say the connection went, not what the target made of the
/// try itself.
const CONNECTION_LOST: [i32; 5] = [
    libc::ENOTCONN,
    libc::ECONNRESET,
    libc::ECONNABORTED,
    libc::ECANCELED,
    libc::EPIPE,
];

/// A try posted and not yet settled.
struct InFlight {
    ticket: Ticket,
    /// Its two words of the buffer.
    slot: usize,
    /// (remote address or offset, key).
    target: (u64, u64),
    deadline: Instant,
}

/// The state of one [`Stranger::rma`] run.
struct Pass {
    t: Tally,
    what: Try,
    /// Tries in flight at once (1 once a connection was lost).
    window: usize,
    flight: VecDeque<InFlight>,
    /// Tries to send again: their connection was lost under them.
    again: VecDeque<(u64, u64)>,
    /// The line's connection was lost (or its queue failed): a new one
    /// is opened once nothing is in flight.
    lost: bool,
    /// Tries in a row with no answer: at a window's worth, the target is
    /// silent and the rest is skipped.
    silent: usize,
    /// Whether a try already waited a whole timeout for a connection (the
    /// next such wait, on a new endpoint, makes the target silent).
    unconnected: bool,
}

/// An endpoint outside any job (see the module).
pub struct Stranger {
    line: Line,
    domain: Domain,
    _fabric: Fabric,
    info: Info,
    timeout: Duration,
    /// Endpoints opened in all.
    lines: u64,
    /// Endpoints left open (see `Line::leak_broken`).
    left_open: u64,
}

/// One endpoint of the stranger's, its queues and buffer, and the target
/// it reaches. A target that refuses by closing the connection is
/// reached again through a new line: a provider may keep a closed
/// connection to an address for as long as the endpoint lives.
struct Line {
    ep: ManuallyDrop<Endpoint>,
    cq: CompletionQueue,
    av: AddressVector,
    /// Where reads land and writes leave from; no peer can reach it.
    buf: ManuallyDrop<MemoryRegion>,
    /// The target's name and address in `av`.
    at: Option<(Vec<u8>, FiAddr)>,
    /// Whether a try timed out: its buffer may still be written until the
    /// endpoint closes.
    abandoned: bool,
    /// Slots of tries that timed out: never used again on this line.
    retired: Vec<usize>,
    /// A connection of it was lost, or a refusal ended it: the next run of
    /// tries starts on a new line.
    spent: bool,
    /// Leave the endpoint open, to the process's exit, once its queue
    /// failed: `ofi_rxm` 1.17 over verbs, after an atomic's refusal it
    /// cannot place in the queue, crashes in `fi_close` of the endpoint.
    leak_broken: bool,
    regions_first: bool,
}

impl Line {
    fn open(domain: &Domain) -> Result<Line> {
        let cq = CompletionQueue::open(domain, 1024)?;
        let av = AddressVector::open(domain)?;
        let ep = Endpoint::open(domain, &cq, &av)?;
        let buf = ep.register_staging(MESSAGE_ROOM)?;
        Ok(Line {
            ep: ManuallyDrop::new(ep),
            cq,
            av,
            buf: ManuallyDrop::new(buf),
            at: None,
            abandoned: false,
            retired: Vec::new(),
            spent: false,
            leak_broken: domain.info().provider().starts_with("verbs"),
            regions_first: domain.info().mr_mode() & ffi::FI_MR_ENDPOINT != 0,
        })
    }

    /// Whether dropping it leaves it open (see `leak_broken`).
    fn leaves_open(&self) -> bool {
        self.leak_broken && self.cq.inner.broken().is_some()
    }

    /// `name`'s address, inserted the first time.
    fn reach(&mut self, name: &[u8]) -> Result<FiAddr> {
        match &self.at {
            Some((n, a)) if n == name => Ok(*a),
            _ => {
                if let Some((_, old)) = self.at.take() {
                    self.av.remove(old)?;
                }
                let a = self.av.insert(name)?;
                self.at = Some((name.to_vec(), a));
                Ok(a)
            }
        }
    }
}

impl Drop for Line {
    fn drop(&mut self) {
        if self.leaves_open() {
            // Leaked on purpose (see `leak_broken`): with it its queue,
            // address vector and domain, which it holds.
            return;
        }
        // SAFETY: neither is used again. A buffer a timed-out try may still
        // write is retired, freed only once its endpoint has closed.
        let (ep, buf) = unsafe {
            (
                ManuallyDrop::take(&mut self.ep),
                ManuallyDrop::take(&mut self.buf),
            )
        };
        if !self.abandoned {
            drop(buf);
            drop(ep);
            return;
        }
        close_then_free([ep], vec![buf.retire()], self.regions_first, "stranger");
    }
}

impl std::fmt::Debug for Stranger {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Stranger")
            .field("provider", &self.info.provider())
            .field("timeout", &self.timeout)
            .field("lines", &self.lines)
            .finish()
    }
}

/// Receive buffer of [`Stranger::replies`], and the longest message sent.
const MESSAGE_ROOM: usize = 1 << 16;
/// The most tries in flight at once.
pub const MAX_WINDOW: usize = 512;
/// Slots of two words (operand, result) the buffer holds for tries.
const SLOTS: usize = MESSAGE_ROOM / (2 * WORD);

impl Stranger {
    /// Opens an endpoint on `provider` (and `domain`: an interface or a
    /// network such as 10.77.0.0/16) with RMA, atomics and tagged
    /// messages; every wait on a try ends after `timeout`.
    pub fn open(provider: &str, domain: Option<&str>, timeout: Duration) -> Result<Stranger> {
        let caps = Caps {
            tagged: true,
            ..Caps::ALL
        };
        let hints = Hints {
            provider: Some(provider.to_string()),
            domain: domain.map(str::to_string),
            caps,
            ordering: info::Ordering::None,
        };
        let info = info::find(&hints, false)?;
        let fabric = Fabric::open(&info)?;
        let domain = Domain::open(&fabric, &info)?;
        let line = Line::open(&domain)?;
        Ok(Stranger {
            line,
            domain,
            _fabric: fabric,
            info,
            timeout,
            lines: 1,
            left_open: 0,
        })
    }

    /// The provider it runs on.
    pub fn provider(&self) -> String {
        self.info.provider()
    }

    /// Whether the provider addresses a region by its virtual address
    /// (`FI_MR_VIRT_ADDR`) rather than by offset.
    pub fn virt_addr(&self) -> bool {
        self.info.mr_mode() & ffi::FI_MR_VIRT_ADDR != 0
    }

    /// This endpoint's own address (it changes when a lost connection
    /// makes a new one).
    pub fn name(&self) -> &[u8] {
        self.line.ep.name()
    }

    /// Endpoints left open so far (`ofi_rxm` over verbs; see
    /// [`MAX_LEFT_OPEN`]).
    pub fn left_open(&self) -> u64 {
        self.left_open
    }

    /// A new line if the current one's completion queue failed or a lost
    /// connection spent it.
    fn mend(&mut self) -> Result<()> {
        if self.line.spent || self.line.cq.inner.broken().is_some() {
            self.renew()?;
        }
        Ok(())
    }

    /// A new endpoint in place of the current one.
    fn renew(&mut self) -> Result<()> {
        let line = Line::open(&self.domain)?;
        let old = std::mem::replace(&mut self.line, line);
        self.left_open += u64::from(old.leaves_open());
        drop(old);
        self.lines += 1;
        Ok(())
    }

    /// Tries `what` at the endpoint `name` for every (remote address or
    /// offset, key) of `targets`, `window` at a time. `on_done` sees each
    /// try the target carried out, with the bytes a read or an atomic
    /// brought back.
    ///
    /// A target may refuse by closing the connection (the `tcp` provider
    /// does on a bad key): the tries in flight with it then fail as well.
    /// The first such loss makes the rest go one at a time, each lost
    /// connection replaced by a new endpoint, so each refusal is the try's
    /// own.
    pub fn rma(
        &mut self,
        name: &[u8],
        what: Try,
        targets: &[(u64, u64)],
        window: usize,
        on_done: &mut dyn FnMut(u64, u64, [u8; WORD]),
    ) -> std::result::Result<Tally, Stopped> {
        let failed = |error, so_far: &Tally| Stopped::Failed {
            error,
            so_far: Box::new(so_far.clone()),
        };
        self.mend().map_err(|e| failed(e, &Tally::default()))?;
        let mut at = self.line.reach(name).map_err(Stopped::Unreachable)?;
        let mut p = Pass {
            t: Tally::default(),
            what,
            window: window.clamp(1, MAX_WINDOW),
            flight: VecDeque::new(),
            again: VecDeque::new(),
            lost: false,
            silent: 0,
            unconnected: false,
        };
        let mut next = 0usize;
        let mut refused_since: Option<Instant> = None;
        loop {
            // Only a refused atomic leaves an endpoint open.
            let leaving =
                what == Try::FetchAdd && self.left_open >= MAX_LEFT_OPEN && p.flight.is_empty();
            if p.silent >= p.window || leaving {
                let rest = (targets.len() - next + p.again.len()) as u64;
                if leaving && rest > 0 {
                    p.t.stopped = Some(format!(
                        "{MAX_LEFT_OPEN} endpoints left open (ofi_rxm over verbs crashes closing \
                         one after a refused atomic): the rest not tried"
                    ));
                }
                p.t.skipped += rest;
                next = targets.len();
                p.again.clear();
            }
            let pending = !p.again.is_empty() || next < targets.len();
            if !pending && p.flight.is_empty() {
                break;
            }
            if (p.lost || self.line.cq.inner.broken().is_some()) && p.flight.is_empty() {
                // A new connection for what is left, one try at a time.
                self.renew().map_err(|e| failed(e, &p.t))?;
                at = self.line.reach(name).map_err(|e| failed(e, &p.t))?;
                p.lost = false;
                p.window = 1;
                // The renewal may have left the last endpoint allowed open.
                continue;
            }
            if !pending || p.lost || p.flight.len() >= p.window {
                self.settle(&mut p, on_done);
                continue;
            }
            let target = p.again.front().copied().unwrap_or_else(|| targets[next]);
            // A slot neither in flight nor held by a try that timed out
            // (whose completion may still write it).
            let free = (0..SLOTS)
                .find(|s| p.flight.iter().all(|f| f.slot != *s) && !self.line.retired.contains(s));
            let Some(slot) = free else {
                if p.flight.is_empty() {
                    self.renew().map_err(|e| failed(e, &p.t))?;
                    at = self.line.reach(name).map_err(|e| failed(e, &p.t))?;
                } else {
                    self.settle(&mut p, on_done);
                }
                continue;
            };
            match self.post(at, what, slot, target) {
                Ok(Some(ticket)) => {
                    refused_since = None;
                    // Two connection timeouts in a row make a target silent.
                    p.unconnected = false;
                    p.t.tried += 1;
                    p.flight.push_back(InFlight {
                        ticket,
                        slot,
                        target,
                        deadline: Instant::now() + self.timeout,
                    });
                }
                Ok(None) if !p.flight.is_empty() => {
                    // The queue is full: settle something first.
                    self.settle(&mut p, on_done);
                    continue;
                }
                Ok(None) => {
                    // The provider holds the try back (connecting):
                    // progress until the timeout.
                    let since = *refused_since.get_or_insert_with(Instant::now);
                    if since.elapsed() < self.timeout {
                        self.line.cq.inner.drive(Duration::from_millis(1));
                        continue;
                    }
                    // No connection within a whole timeout: once more on
                    // a new endpoint; twice, and the target takes none (an
                    // endpoint not progressed while idle), and each next
                    // try would wait as long again.
                    refused_since = None;
                    if !p.unconnected {
                        p.unconnected = true;
                        self.renew().map_err(|e| failed(e, &p.t))?;
                        at = self.line.reach(name).map_err(|e| failed(e, &p.t))?;
                        continue;
                    }
                    p.silent = p.window;
                    p.t.tried += 1;
                    p.t.unanswered += 1;
                }
                Err(code) => {
                    p.t.tried += 1;
                    *p.t.not_posted.entry(strerror(code)).or_default() += 1;
                }
            }
            if p.again.pop_front().is_none() {
                next += 1;
            }
        }
        // Not a spent line for the next run: rxm would hold its tries back
        // for ever.
        self.line.spent |= p.lost;
        Ok(p.t)
    }

    /// Settles the oldest try of `p`. When its connection was lost (or the
    /// queue failed), the line is spent (`p.lost`): with a `window` above
    /// 1 others were in flight on it, so the loss need not be this try's
    /// doing and it goes again; alone, the loss is its refusal.
    fn settle(&mut self, p: &mut Pass, on_done: &mut dyn FnMut(u64, u64, [u8; WORD])) {
        // An earlier try spent the line: what fails on it now may never
        // have reached the target.
        let spent = p.lost;
        let Some(InFlight {
            ticket,
            slot,
            target,
            deadline,
        }) = p.flight.pop_front()
        else {
            return;
        };
        // Each try's own deadline: a silent target costs one timeout for
        // the whole window, not one per try.
        let lost = match self.line.cq.inner.wait(ticket, deadline) {
            Outcome::Done { .. } => {
                p.silent = 0;
                p.t.done += 1;
                let mut word = [0u8; WORD];
                let at = 2 * slot * WORD + if p.what == Try::FetchAdd { WORD } else { 0 };
                let _ = self.line.buf.snapshot(at, &mut word);
                on_done(target.0, target.1, word);
                return;
            }
            Outcome::Failed { code, .. } if !CONNECTION_LOST.contains(&code) && !spent => {
                p.silent = 0;
                *p.t.refused.entry(strerror(code)).or_default() += 1;
                // A remote access error moves a verbs queue pair to the
                // error state (the IBTA's rule for RC): what else is in
                // flight on it is flushed, and nothing later goes out.
                // This refusal is the try's own; the line is spent.
                p.lost |= code == libc::EIO;
                return;
            }
            Outcome::Failed { code, .. } => {
                p.silent = 0;
                strerror(code)
            }
            Outcome::CqFailed { call, code } => {
                // The provider wrote an error the queue cannot place (rxm
                // does after refusing an atomic).
                self.line.abandoned = true;
                format!("{} ({call} failed on the intruder's side)", strerror(code))
            }
            Outcome::TimedOut => {
                self.line.abandoned = true;
                self.line.retired.push(slot);
                p.silent += 1;
                p.t.unanswered += 1;
                return;
            }
        };
        p.lost = true;
        if p.window > 1 {
            p.t.tried -= 1;
            p.again.push_back(target);
        } else {
            *p.t.refused.entry(lost).or_default() += 1;
        }
    }

    /// Posts one try from `slot`'s two words: `Ok(None)` if the provider
    /// said -FI_EAGAIN, `Err` with the (positive) code it refused with.
    fn post(
        &self,
        at: FiAddr,
        what: Try,
        slot: usize,
        (raddr, key): (u64, u64),
    ) -> std::result::Result<Option<Ticket>, i32> {
        let off = 2 * slot * WORD;
        let operand: [u8; WORD] = match what {
            Try::Write => [SCRIBBLE; WORD],
            Try::FetchAdd => 1u64.to_le_bytes(),
            Try::Read => [0; WORD],
        };
        self.line
            .buf
            .fill(off, &operand)
            .map_err(|_| ffi::FI_EINVAL as i32)?;
        let buf = self.line.buf.ptr_at(off).cast::<libc::c_void>();
        let result = self.line.buf.ptr_at(off + WORD).cast::<libc::c_void>();
        let desc = self.line.buf.desc();
        let ep = self.line.ep.raw();
        // SAFETY: the endpoint is open; `buf` and `result` are words of the
        // registered buffer that this try alone uses until it settles (or,
        // abandoned, until the endpoint closes: the buffer is freed only
        // after, in Drop); ctx is a slot reserved for this try.
        let post = |ctx: *mut libc::c_void| unsafe {
            match what {
                Try::Read => ffi::fi_read(ep, buf, WORD, desc, at, raddr, key, ctx),
                Try::Write => {
                    // Delivery complete: the completion says the target
                    // took the write, not only that it left.
                    let mut d = desc;
                    let iov = ffi::iovec {
                        iov_base: buf,
                        iov_len: WORD,
                    };
                    let rma_iov = ffi::fi_rma_iov {
                        addr: raddr,
                        len: WORD,
                        key,
                    };
                    let msg = ffi::fi_msg_rma {
                        msg_iov: &iov,
                        desc: &mut d,
                        iov_count: 1,
                        addr: at,
                        rma_iov: &rma_iov,
                        rma_iov_count: 1,
                        context: ctx,
                        data: 0,
                    };
                    ffi::fi_writemsg(
                        ep,
                        &msg,
                        u64::from(ffi::FI_DELIVERY_COMPLETE) | u64::from(ffi::FI_COMPLETION),
                    )
                }
                Try::FetchAdd => ffi::fi_fetch_atomic(
                    ep,
                    buf,
                    1,
                    desc,
                    result,
                    desc,
                    at,
                    raddr,
                    key,
                    ffi::FI_UINT64,
                    ffi::FI_SUM,
                    ctx,
                ),
            }
        };
        let deadline = Instant::now() + self.timeout;
        match self
            .line
            .ep
            .try_post(what.kind(), 0, deadline, self.timeout, post)
        {
            Ok(Attempt::Posted(t)) => Ok(Some(t)),
            Ok(Attempt::Refused) => Ok(None),
            Err(crate::Error::Completion { code, .. } | crate::Error::Call { code, .. }) => {
                Err(code)
            }
            Err(_) => Err(ffi::FI_EOTHER as i32),
        }
    }

    /// Sends `msg` tagged `tag` to the endpoint `name`: what the provider
    /// said of it (`Ok` once it left, or the error's name). A connection
    /// the target closed is replaced after.
    pub fn send(&mut self, name: &[u8], tag: u64, msg: &[u8]) -> std::result::Result<(), String> {
        self.mend().map_err(|e| e.to_string())?;
        let at = self.line.reach(name).map_err(|e| e.to_string())?;
        let len = msg.len().min(MESSAGE_ROOM);
        self.line
            .buf
            .fill(0, &msg[..len])
            .map_err(|e| e.to_string())?;
        let buf = self.line.buf.ptr_at(0).cast::<libc::c_void>();
        let desc = self.line.buf.desc();
        let ep = self.line.ep.raw();
        // SAFETY: as in `post`: the buffer's first `len` bytes are this
        // send's until it settles or the endpoint closes.
        let post =
            |ctx: *mut libc::c_void| unsafe { ffi::fi_tsend(ep, buf, len, desc, at, tag, ctx) };
        let deadline = Instant::now() + self.timeout;
        let ticket = loop {
            match self
                .line
                .ep
                .try_post(OpKind::Send, 0, deadline, self.timeout, post)
            {
                Ok(Attempt::Posted(t)) => break t,
                Ok(Attempt::Refused) if Instant::now() < deadline => {
                    self.line.cq.inner.drive(Duration::from_millis(1));
                }
                Ok(Attempt::Refused) => {
                    self.renew().map_err(|e| e.to_string())?;
                    return Err("no room to send within the timeout".into());
                }
                Err(e) => return Err(e.to_string()),
            }
        };
        match self.line.cq.inner.wait(ticket, deadline) {
            Outcome::Done { .. } => Ok(()),
            Outcome::Failed { code, .. } => {
                if CONNECTION_LOST.contains(&code) {
                    self.renew().map_err(|e| e.to_string())?;
                }
                Err(strerror(code))
            }
            Outcome::TimedOut => {
                self.line.abandoned = true;
                self.renew().map_err(|e| e.to_string())?;
                Err("no completion within the timeout".into())
            }
            Outcome::CqFailed { call, code } => {
                self.line.abandoned = true;
                self.renew().map_err(|e| e.to_string())?;
                Err(format!(
                    "{} ({call} failed on the intruder's side)",
                    strerror(code)
                ))
            }
        }
    }

    /// Waits `wait` for any tagged message to this endpoint: how many came
    /// (an answer to a stranger is a breach).
    pub fn replies(&mut self, wait: Duration) -> u64 {
        if self.mend().is_err() {
            return 0;
        }
        let mut got = 0;
        let until = Instant::now() + wait;
        let buf = self.line.buf.ptr_at(0).cast::<libc::c_void>();
        let desc = self.line.buf.desc();
        let ep = self.line.ep.raw();
        loop {
            // SAFETY: as in `post`; the receive may land in the whole buffer,
            // which no try uses while it is posted (tries are settled).
            let post = |ctx: *mut libc::c_void| unsafe {
                ffi::fi_trecv(
                    ep,
                    buf,
                    MESSAGE_ROOM,
                    desc,
                    ffi::FI_ADDR_UNSPEC,
                    0,
                    !0u64,
                    ctx,
                )
            };
            let ticket = match self
                .line
                .ep
                .try_post(OpKind::Recv, 0, until, self.timeout, post)
            {
                Ok(Attempt::Posted(t)) => t,
                _ => return got,
            };
            match self.line.cq.inner.wait(ticket, until) {
                Outcome::Done { .. } => got += 1,
                // A receive that failed brought nothing.
                Outcome::Failed { .. } => {}
                Outcome::TimedOut | Outcome::CqFailed { .. } => {
                    self.line.ep.cancel(ticket);
                    self.line.abandoned = true;
                    // The receive may still land in the buffer: the next
                    // target gets a fresh line.
                    let _ = self.renew();
                    return got;
                }
            }
        }
    }
}
