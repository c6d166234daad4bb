//! The owner's side of the message path: a service thread that takes each
//! request off the [`Messenger`], checks it ([`wire::read_request`]),
//! drops a duplicate by its id, runs it on this rank's own region with
//! the table's own variant machine ([`Owner::run`]), and answers. A
//! request that is refused (malformed, from a stranger, for another
//! table, of other sizes) or a duplicate is counted and gets no reply.
//!
//! The thread waits in the messenger (blocked in the kernel where the
//! fabric or MPI can: see each messenger's `serve`), so while the
//! application computes and makes no DHT call, a peer's requests are
//! still answered; it stops when the table is freed or dropped.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use super::wire::{self, Refusal, Request, Sizes};
use super::Messenger;
use crate::outcome::{Result, Stats};
use crate::variant::Outcome;

/// How long the service waits in the messenger before it looks at its
/// stop flag (a stop also wakes it at once, where the messenger can).
const SERVE_WAIT: Duration = Duration::from_millis(100);

/// What the service runs requests with: the table, on keys this rank owns.
pub(crate) trait Owner: Send + Sync + 'static {
    /// Buffers kept from one request to the next.
    type Work: Send;
    /// Fresh buffers.
    fn work(&self) -> Self::Work;
    /// Runs `req` on this rank's region: one outcome per key into `out`
    /// and the values found into `found` (`value_len` bytes per key).
    fn run(
        &self,
        w: &mut Self::Work,
        req: &Request<'_>,
        out: &mut Vec<Outcome>,
        found: &mut Vec<u8>,
    ) -> Result<()>;
    /// Adds to this rank's counters.
    fn count(&self, f: &mut dyn FnMut(&mut Stats));
}

/// The running service; dropping it stops the thread and waits for it.
pub(crate) struct Service {
    stop: Arc<AtomicBool>,
    wake: Box<dyn Fn() + Send + Sync>,
    handle: Option<JoinHandle<()>>,
}

impl std::fmt::Debug for Service {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Service")
    }
}

impl Service {
    /// Starts serving `owner`'s requests from `m`, checked against `sizes`.
    pub(crate) fn start<O: Owner, M: Messenger>(
        owner: Arc<O>,
        m: Arc<M>,
        sizes: Sizes,
    ) -> Result<Service> {
        let stop = Arc::new(AtomicBool::new(false));
        let s = stop.clone();
        let mm = m.clone();
        let rank = m.rank();
        let handle = std::thread::Builder::new()
            .name(format!("fabkit-dht-serve-{rank}"))
            .spawn(move || serve(&*owner, &*mm, &sizes, &s))
            .map_err(|cause| crate::outcome::Error::Io {
                what: "starting the message path's service thread",
                path: std::path::PathBuf::new(),
                cause,
            })?;
        Ok(Service {
            stop,
            wake: Box::new(move || m.wake()),
            handle: Some(handle),
        })
    }
}

impl Drop for Service {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Release);
        (self.wake)();
        if let Some(h) = self.handle.take() {
            let _ = h.join();
        }
    }
}

/// Request ids seen lately from one sender: a duplicate is dropped. Ids
/// of one sender grow (one counter per table and rank), though calls of
/// several threads arrive interleaved; the last [`SEEN`] ids below the
/// highest are remembered, and an id older than them is taken for a
/// duplicate too (its caller has long given up waiting).
#[derive(Clone)]
struct Seen {
    top: Option<u64>,
    bits: [u64; SEEN / 64],
}

impl Default for Seen {
    fn default() -> Self {
        Seen {
            top: None,
            bits: [0; SEEN / 64],
        }
    }
}

/// Ids remembered per sender.
const SEEN: usize = 4096;

impl Seen {
    /// Whether `id` was seen; notes it.
    fn check(&mut self, id: u64) -> bool {
        let Some(top) = self.top else {
            self.top = Some(id);
            self.set(0);
            return false;
        };
        if id > top {
            let shift = id - top;
            self.shift(shift);
            self.top = Some(id);
            self.set(0);
            return false;
        }
        let back = top - id;
        if back >= SEEN as u64 {
            return true;
        }
        let seen = self.get(back as usize);
        self.set(back as usize);
        seen
    }

    fn get(&self, i: usize) -> bool {
        self.bits[i / 64] & (1 << (i % 64)) != 0
    }

    fn set(&mut self, i: usize) {
        self.bits[i / 64] |= 1 << (i % 64);
    }

    /// Moves every remembered id `n` places back (bit i: id top - i).
    fn shift(&mut self, n: u64) {
        if n >= SEEN as u64 {
            self.bits = [0; SEEN / 64];
            return;
        }
        let n = n as usize;
        let (words, bits) = (n / 64, n % 64);
        for i in (0..self.bits.len()).rev() {
            let lo = i.checked_sub(words).map_or(0, |j| self.bits[j]);
            let lower = i.checked_sub(words + 1).map_or(0, |j| self.bits[j]);
            self.bits[i] = if bits == 0 {
                lo
            } else {
                (lo << bits) | (lower >> (64 - bits))
            };
        }
    }
}

/// The service loop: until `stop`, takes requests and answers them.
fn serve<O: Owner, M: Messenger>(owner: &O, m: &M, sizes: &Sizes, stop: &AtomicBool) {
    let mut work = owner.work();
    let mut seen = vec![Seen::default(); sizes.ranks];
    // Requests are copied out of the messenger's buffers and answered
    // after `serve` returns, so an answer never runs inside the
    // messenger's own receive.
    let mut inbox: Vec<(Option<usize>, Vec<u8>)> = Vec::new();
    let mut spare: Vec<Vec<u8>> = Vec::new();
    let mut out = Vec::new();
    let mut found = Vec::new();
    let mut reply = Vec::with_capacity(m.max_len());
    let mut cpu = fabkit_core::time::thread_cpu();
    let mut dropped = m.dropped();
    while !stop.load(Ordering::Acquire) {
        let got = m.serve(SERVE_WAIT, &mut |from, bytes| {
            let mut b = spare.pop().unwrap_or_default();
            b.clear();
            b.extend_from_slice(bytes);
            inbox.push((from, b));
        });
        if got.is_err() {
            // The messenger failed (its fabric broke): callers will see
            // their own errors; the service has nothing left to serve.
            owner.count(&mut |s| s.refused += 1);
            break;
        }
        let now_dropped = m.dropped();
        if now_dropped > dropped {
            let n = now_dropped - dropped;
            owner.count(&mut |s| s.refused += n);
            dropped = now_dropped;
        }
        for (from, bytes) in inbox.drain(..) {
            handle(
                owner, m, sizes, &mut seen, &mut work, from, &bytes, &mut out, &mut found,
                &mut reply,
            );
            spare.push(bytes);
        }
        // What this turn cost the thread, waiting included.
        let now = fabkit_core::time::thread_cpu();
        if let (Some(was), Some(now)) = (cpu, now) {
            let spent = now.saturating_sub(was).as_nanos() as u64;
            owner.count(&mut |s| s.service_cpu_ns += spent);
        }
        cpu = now;
    }
}

/// One request: checked, deduplicated, run and answered, or refused.
#[allow(clippy::too_many_arguments)]
fn handle<O: Owner, M: Messenger>(
    owner: &O,
    m: &M,
    sizes: &Sizes,
    seen: &mut [Seen],
    work: &mut O::Work,
    from: Option<usize>,
    bytes: &[u8],
    out: &mut Vec<Outcome>,
    found: &mut Vec<u8>,
    reply: &mut Vec<u8>,
) {
    // A stranger's message is refused whatever it holds: not even its
    // header is read.
    if from.is_none() {
        owner.count(&mut |s| refuse(s, Refusal::Stranger));
        return;
    }
    let req = match wire::read_request(bytes, sizes, from) {
        Ok(r) => r,
        Err(why) => {
            owner.count(&mut |s| refuse(s, why));
            return;
        }
    };
    if seen[req.from].check(req.id) {
        owner.count(&mut |s| s.duplicates += 1);
        return;
    }
    match owner.run(work, &req, out, found) {
        Ok(()) => wire::reply(reply, sizes, m.rank(), &req, out, found),
        Err(e) => wire::failure(reply, sizes, m.rank(), &req, &e.to_string()),
    }
    let count = req.count as u64;
    owner.count(&mut |s| {
        s.served_requests += 1;
        s.served_keys += count;
    });
    // A reply that cannot be sent is its caller's timeout: the service
    // goes on with the next request.
    let _ = m.answer(req.from, req.id, reply);
}

fn refuse(s: &mut Stats, why: Refusal) {
    s.refused += 1;
    if why == Refusal::Stranger {
        s.strangers += 1;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_repeated_id_is_a_duplicate_within_the_window_and_an_old_one_always() {
        let mut s = Seen::default();
        assert!(!s.check(1000));
        assert!(s.check(1000));
        // Interleaved callers: lower ids arrive late, once each.
        assert!(!s.check(1003));
        assert!(!s.check(1001));
        assert!(!s.check(1002));
        assert!(s.check(1001) && s.check(1002) && s.check(1003));
        // Far ahead: what was seen moves back, and stays remembered.
        assert!(!s.check(1000 + 200));
        assert!(s.check(1003));
        assert!(!s.check(1150));
        assert!(!s.check(1000 + 200 + SEEN as u64 - 1));
        assert!(s.check(1150), "still within the window");
        assert!(s.check(1003), "past the window: taken for a duplicate");
    }

    #[test]
    fn shifting_by_whole_and_partial_words_keeps_each_bit() {
        for n in [1u64, 63, 64, 65, 127, 128, 1000, 4095] {
            let mut s = Seen::default();
            for id in [0u64, 5, 64, 70, 130] {
                s.check(id);
            }
            s.check(130 + n);
            for id in [0u64, 5, 64, 70, 130] {
                let back = 130 + n - id;
                if back < SEEN as u64 {
                    assert!(s.get(back as usize), "shift {n}, id {id}");
                }
            }
            // Id 129 was never seen: its place stays clear.
            if n + 1 < SEEN as u64 {
                assert!(!s.get(n as usize + 1), "shift {n}: id 129 unseen");
            }
        }
    }
}
