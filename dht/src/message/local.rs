//! Ranks as threads of one process exchanging messages through queues:
//! the message path's test double, as [`LocalTransport`] is the one-sided
//! path's. From a seed it injects what a network may do to messages
//! ([`Faults`]): delay them, reorder them, deliver them twice, lose them;
//! and a test can hand a rank's service any bytes from any sender
//! ([`LocalNet::inject`]), a stranger included.
//!
//! [`LocalTransport`]: crate::transport::local::LocalTransport

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use fabkit_core::{Error, OpKind};

use super::Messenger;

/// What the network does to messages, drawn per message from `seed`.
/// Probabilities are per mille.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Faults {
    /// Seeds the draws: the same seed gives the same faults for the same
    /// sequence of messages.
    pub seed: u64,
    /// Messages held back by up to this long before they can be taken.
    pub delay: Duration,
    /// Requests put ahead of others already waiting, per mille.
    pub reorder: u32,
    /// Messages delivered twice, per mille.
    pub duplicate: u32,
    /// Requests lost, per mille.
    pub drop_request: u32,
    /// Replies lost, per mille.
    pub drop_reply: u32,
}

/// How many of each fault were injected so far.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Injected {
    /// Messages delayed.
    pub delayed: u64,
    /// Requests put ahead of others.
    pub reordered: u64,
    /// Messages delivered twice.
    pub duplicated: u64,
    /// Requests lost.
    pub dropped_requests: u64,
    /// Replies lost.
    pub dropped_replies: u64,
}

/// One rank's queues.
#[derive(Default)]
struct Queues {
    /// Requests waiting for the service: sender (None: a stranger),
    /// bytes, and when they may be taken.
    requests: VecDeque<(Option<usize>, Vec<u8>, Instant)>,
    /// Replies by call id, with when they may be taken.
    replies: HashMap<u64, (Vec<u8>, Instant)>,
    /// A wake-up asked for the service.
    woken: bool,
}

struct Rank {
    queues: Mutex<Queues>,
    arrived: Condvar,
}

struct Net {
    ranks: Vec<Rank>,
    max_len: usize,
    faults: Faults,
    draws: AtomicU64,
    injected: Mutex<Injected>,
}

impl Net {
    /// The next draw in 0..1000, from the seed (splitmix64).
    fn draw(&self) -> u64 {
        let n = self.draws.fetch_add(1, Ordering::Relaxed);
        fabkit_core::rng::Rng::nth(self.faults.seed, n) % 1000
    }

    fn hit(&self, per_mille: u32) -> bool {
        per_mille > 0 && self.draw() < u64::from(per_mille)
    }

    /// When a message sent now may be taken.
    fn due(&self) -> Instant {
        let now = Instant::now();
        if self.faults.delay.is_zero() {
            return now;
        }
        let d = self.faults.delay.mul_f64(self.draw() as f64 / 1000.0);
        if !d.is_zero() {
            self.injected.lock().unwrap().delayed += 1;
        }
        now + d
    }

    fn count(&self, f: impl FnOnce(&mut Injected)) {
        f(&mut self.injected.lock().unwrap());
    }
}

/// An in-process network of ranks; [`LocalNet::members`] gives each rank
/// its messenger.
#[derive(Clone)]
pub struct LocalNet(Arc<Net>);

impl std::fmt::Debug for LocalNet {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "LocalNet({} ranks, {:?})",
            self.0.ranks.len(),
            self.0.faults
        )
    }
}

impl LocalNet {
    /// A network of `ranks` ranks carrying messages of up to `max_len`
    /// bytes, doing to them what `faults` says.
    pub fn new(ranks: usize, max_len: usize, faults: Faults) -> LocalNet {
        LocalNet(Arc::new(Net {
            ranks: (0..ranks)
                .map(|_| Rank {
                    queues: Mutex::new(Queues::default()),
                    arrived: Condvar::new(),
                })
                .collect(),
            max_len,
            faults,
            draws: AtomicU64::new(0),
            injected: Mutex::new(Injected::default()),
        }))
    }

    /// Every rank's messenger, in rank order.
    pub fn members(&self) -> Vec<LocalMessenger> {
        (0..self.0.ranks.len())
            .map(|rank| LocalMessenger {
                rank,
                net: self.0.clone(),
            })
            .collect()
    }

    /// Hands rank `to`'s service `bytes` as if sent by `from` (`None`: an
    /// address not in the job), with no fault applied: a test's crafted
    /// request.
    pub fn inject(&self, to: usize, from: Option<usize>, bytes: &[u8]) {
        let r = &self.0.ranks[to];
        r.queues
            .lock()
            .unwrap()
            .requests
            .push_back((from, bytes.to_vec(), Instant::now()));
        r.arrived.notify_all();
    }

    /// Whether a reply to `id` is waiting at rank `at` (a crafted request
    /// must get none).
    pub fn has_reply(&self, at: usize, id: u64) -> bool {
        self.0.ranks[at]
            .queues
            .lock()
            .unwrap()
            .replies
            .contains_key(&id)
    }

    /// The faults injected so far.
    pub fn injected(&self) -> Injected {
        *self.0.injected.lock().unwrap()
    }
}

/// One rank's end of a [`LocalNet`].
#[derive(Clone)]
pub struct LocalMessenger {
    rank: usize,
    net: Arc<Net>,
}

impl std::fmt::Debug for LocalMessenger {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "LocalMessenger({}/{})", self.rank, self.net.ranks.len())
    }
}

/// A call of a [`LocalMessenger`] in flight.
#[derive(Debug)]
pub struct LocalCall {
    to: usize,
    id: u64,
}

impl LocalMessenger {
    fn check(&self, to: usize, len: usize, op: OpKind) -> Result<(), Error> {
        if to >= self.net.ranks.len() {
            return Err(Error::NoSuchRank {
                peer: to,
                ranks: self.net.ranks.len(),
            });
        }
        if len > self.net.max_len {
            return Err(Error::InvalidArgument(format!(
                "{op} of {len} B to rank {to}: more than the {} B a message carries",
                self.net.max_len
            )));
        }
        Ok(())
    }

    /// Waits on this rank's queues until `ready` finds something or
    /// `deadline` passes; what `ready` took.
    fn wait_for<R>(
        &self,
        deadline: Instant,
        mut ready: impl FnMut(&mut Queues, Instant) -> Option<R>,
    ) -> Option<R> {
        let me = &self.net.ranks[self.rank];
        let mut q = me.queues.lock().unwrap();
        loop {
            let now = Instant::now();
            if let Some(r) = ready(&mut q, now) {
                return Some(r);
            }
            if now >= deadline {
                return None;
            }
            // A delayed message wakes nobody when it falls due: look again
            // after a millisecond at most.
            let nap = (deadline - now).min(Duration::from_millis(1));
            q = me.arrived.wait_timeout(q, nap).unwrap().0;
        }
    }
}

impl Messenger for LocalMessenger {
    type Error = Error;
    type Call = LocalCall;

    fn rank(&self) -> usize {
        self.rank
    }
    fn ranks(&self) -> usize {
        self.net.ranks.len()
    }
    fn max_len(&self) -> usize {
        self.net.max_len
    }
    fn name(&self) -> String {
        "local messages".into()
    }

    fn call(&self, to: usize, id: u64, request: &[u8]) -> Result<LocalCall, Error> {
        self.check(to, request.len(), OpKind::Send)?;
        let net = &self.net;
        if net.hit(net.faults.drop_request) {
            net.count(|i| i.dropped_requests += 1);
            return Ok(LocalCall { to, id });
        }
        let copies = if net.hit(net.faults.duplicate) {
            net.count(|i| i.duplicated += 1);
            2
        } else {
            1
        };
        let r = &net.ranks[to];
        {
            let mut q = r.queues.lock().unwrap();
            for _ in 0..copies {
                let m = (Some(self.rank), request.to_vec(), net.due());
                if !q.requests.is_empty() && net.hit(net.faults.reorder) {
                    net.count(|i| i.reordered += 1);
                    q.requests.push_front(m);
                } else {
                    q.requests.push_back(m);
                }
            }
        }
        r.arrived.notify_all();
        Ok(LocalCall { to, id })
    }

    fn ready(&self, call: &LocalCall) -> bool {
        let q = self.net.ranks[self.rank].queues.lock().unwrap();
        q.replies
            .get(&call.id)
            .is_some_and(|(_, due)| *due <= Instant::now())
    }

    fn wait_reply(
        &self,
        call: LocalCall,
        deadline: Instant,
        f: &mut dyn FnMut(&[u8]),
    ) -> Result<(), Error> {
        let start = Instant::now();
        let got = self.wait_for(deadline, |q, now| match q.replies.get(&call.id) {
            Some((_, due)) if *due <= now => q.replies.remove(&call.id).map(|(b, _)| b),
            _ => None,
        });
        match got {
            Some(b) => {
                f(&b);
                Ok(())
            }
            None => Err(Error::Timeout {
                op: OpKind::Recv,
                peer: call.to,
                timeout: deadline.saturating_duration_since(start),
            }),
        }
    }

    fn serve(
        &self,
        wait: Duration,
        f: &mut dyn FnMut(Option<usize>, &[u8]),
    ) -> Result<usize, Error> {
        let deadline = Instant::now() + wait;
        let taken = self.wait_for(deadline, |q, now| {
            if std::mem::take(&mut q.woken) {
                return Some(Vec::new());
            }
            let i = q.requests.iter().position(|(_, _, due)| *due <= now)?;
            q.requests.remove(i).map(|(from, b, _)| vec![(from, b)])
        });
        let taken = taken.unwrap_or_default();
        for (from, b) in &taken {
            f(*from, b);
        }
        Ok(taken.len())
    }

    fn answer(&self, to: usize, id: u64, reply: &[u8]) -> Result<(), Error> {
        self.check(to, reply.len(), OpKind::Send)?;
        let net = &self.net;
        if net.hit(net.faults.drop_reply) {
            net.count(|i| i.dropped_replies += 1);
            return Ok(());
        }
        if net.hit(net.faults.duplicate) {
            // The second copy finds its call answered and is never taken:
            // what a late duplicate is to a caller.
            net.count(|i| i.duplicated += 1);
        }
        let r = &net.ranks[to];
        r.queues
            .lock()
            .unwrap()
            .replies
            .insert(id, (reply.to_vec(), net.due()));
        r.arrived.notify_all();
        Ok(())
    }

    fn wake(&self) {
        let r = &self.net.ranks[self.rank];
        r.queues.lock().unwrap().woken = true;
        r.arrived.notify_all();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_call_is_served_and_its_reply_matched_by_id() {
        let net = LocalNet::new(2, 1024, Faults::default());
        let [a, b]: [LocalMessenger; 2] = net.members().try_into().unwrap();
        let c1 = a.call(1, 7, b"one").unwrap();
        let c2 = a.call(1, 8, b"two").unwrap();
        let mut seen = Vec::new();
        while seen.len() < 2 {
            b.serve(Duration::from_secs(1), &mut |from, bytes| {
                seen.push((from, bytes.to_vec()))
            })
            .unwrap();
        }
        assert_eq!(seen[0], (Some(0), b"one".to_vec()));
        // Answered out of order, taken by id.
        b.answer(0, 8, b"re-two").unwrap();
        b.answer(0, 7, b"re-one").unwrap();
        assert!(a.ready(&c1) && a.ready(&c2));
        let deadline = Instant::now() + Duration::from_secs(1);
        let mut got = Vec::new();
        a.wait_reply(c1, deadline, &mut |b| got.push(b.to_vec()))
            .unwrap();
        a.wait_reply(c2, deadline, &mut |b| got.push(b.to_vec()))
            .unwrap();
        assert_eq!(got, [b"re-one".to_vec(), b"re-two".to_vec()]);
    }

    #[test]
    fn a_lost_reply_times_out_naming_the_peer_and_oversized_is_refused() {
        let net = LocalNet::new(2, 16, Faults::default());
        let [a, _b]: [LocalMessenger; 2] = net.members().try_into().unwrap();
        let c = a.call(1, 1, b"x").unwrap();
        let err = a
            .wait_reply(c, Instant::now() + Duration::from_millis(20), &mut |_| {})
            .unwrap_err();
        assert!(matches!(err, Error::Timeout { peer: 1, .. }), "{err}");
        assert!(a.call(1, 2, &[0; 17]).is_err());
        assert!(a.call(2, 2, b"x").is_err());
    }

    #[test]
    fn faults_are_drawn_from_the_seed_and_counted() {
        let faults = Faults {
            seed: 3,
            duplicate: 300,
            drop_request: 300,
            reorder: 300,
            ..Faults::default()
        };
        let count = |seed| {
            let net = LocalNet::new(2, 64, Faults { seed, ..faults });
            let [a, b]: [LocalMessenger; 2] = net.members().try_into().unwrap();
            for id in 0..200 {
                a.call(1, id, &id.to_le_bytes()).unwrap();
            }
            let mut order = Vec::new();
            while b
                .serve(Duration::ZERO, &mut |_, m| order.push(m.to_vec()))
                .unwrap()
                > 0
            {}
            (net.injected(), order)
        };
        let (i, order) = count(3);
        assert!(
            i.duplicated > 0 && i.dropped_requests > 0 && i.reordered > 0,
            "{i:?}"
        );
        assert_eq!(order.len() as u64, 200 + i.duplicated - i.dropped_requests);
        assert_eq!(count(3), (i, order), "same seed, same faults");
    }
}
