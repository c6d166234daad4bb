//! The one driver of the variants' state machines ([`crate::variant`]):
//! it posts the batches a machine plans on the transport, feeds the
//! completions back with the time, and waits through the table's
//! [`Clock`](crate::clock::Clock) when a machine asks. Also what an
//! operation's machines work in, kept from one operation to the next, and
//! the count of where each batch's operations go.

use std::sync::atomic::Ordering;
use std::time::Instant;

use crate::layout::Variant;
use crate::message::Messenger;
use crate::outcome::{Error, Result, Stats, Write};
use crate::transport::{Op, OpKind, Transport};
use crate::variant::{
    chunked::Chunked, coarse::Coarse, fine::Fine, lockfree::Lockfree, recycle, Batch, Machine,
    Mode, Outcome, Probe, Run, Step, MAX_RUN,
};
use crate::variant::{Update, Updating};

use super::{Dht, MAX_DEPTH};

/// What an operation's machines work in: kept from one operation to the
/// next, so that a warm table plans without allocating.
pub(super) struct Work<L> {
    /// One per machine in flight; the table's own are the transport's
    /// lanes, made once.
    lanes: Vec<LaneWork<L>>,
    probes: Vec<Probe>,
    pub(super) out: Vec<Outcome>,
    pub(super) found: Vec<u8>,
    /// Accumulations: each key's bucket as it was (see `Updating`).
    before: Vec<u8>,
    /// The table's own buffers; fresh ones, for a caller while another
    /// holds the table's, drive one machine on a default lane (no
    /// registration per call).
    own: bool,
}

impl<L> Work<L> {
    pub(super) fn new(own: bool) -> Self {
        Work {
            lanes: Vec::new(),
            probes: Vec::new(),
            out: Vec::new(),
            found: Vec::new(),
            before: Vec::new(),
            own,
        }
    }
}

/// A machine's batch, the ops built from it, and the lane it runs on.
struct LaneWork<L> {
    lane: L,
    batch: Batch,
    ops: Vec<Op<'static>>,
}

/// Where a machine of the driver is.
#[derive(Clone, Copy, Debug)]
enum At {
    /// A step to take now.
    Plan(Step),
    /// Its batch is in flight, posted as the driver's `n`th.
    Flying(u64),
    /// Its batch is planned, to be posted at this time.
    Paused(Instant),
    Done,
}

/// What a driver's machines sent, for the counters.
#[derive(Default)]
struct Tally {
    remote_ops: u64,
    batches: u64,
    remote_bytes: u64,
    aimed: Aimed,
}

impl<T: Transport, M: Messenger> Dht<T, M> {
    /// Executes one batch, counting it.
    pub(crate) fn exec(&self, ops: &mut [Op<'_>]) -> Result<()> {
        if ops.is_empty() {
            return Ok(());
        }
        let mut aimed = Aimed::default();
        aimed.count(ops, self.shape.rank);
        {
            let mut s = self.stats.lock().unwrap();
            s.remote_ops += ops.len() as u64;
            s.batches += 1;
            aimed.add_to(&mut s);
        }
        self.t.execute(ops).map_err(Error::transport)
    }

    /// Runs `f` on the table's reusable buffers, or on fresh ones while
    /// another thread uses them.
    pub(super) fn with_work<R>(
        &self,
        f: impl FnOnce(&mut Work<T::Lane>) -> Result<R>,
    ) -> Result<R> {
        match self.work.try_lock() {
            Ok(mut w) => f(&mut w),
            Err(_) => f(&mut Work::new(false)),
        }
    }

    /// Makes room for `want` machines in `w` and says how many it has (at
    /// least 1): the table's own buffers get the transport's lanes, made
    /// once (a lane that cannot be made leaves fewer; with none, a default
    /// lane runs each batch in `post`), fresh buffers one default lane.
    fn lanes(&self, w: &mut Work<T::Lane>, want: usize) -> usize {
        let want = if w.own { want.max(1) } else { 1 };
        while w.lanes.len() < want {
            let lane = if w.own {
                match self.t.lane() {
                    Ok(l) => l,
                    Err(_) if w.lanes.is_empty() => T::Lane::default(),
                    Err(_) => break,
                }
            } else {
                T::Lane::default()
            };
            w.lanes.push(LaneWork {
                lane,
                batch: Batch::default(),
                ops: Vec::new(),
            });
        }
        want.min(w.lanes.len())
    }

    /// Runs `mode` over `keys` (and `values`), in runs of at most
    /// `MAX_RUN` keys; outcomes and found values land in `w.out` and
    /// `w.found`, one per key.
    pub(super) fn run(
        &self,
        mode: Mode,
        keys: &[&[u8]],
        values: &[&[u8]],
        w: &mut Work<T::Lane>,
    ) -> Result<()> {
        self.run_updating(mode, keys, values, w, None)
    }

    /// [`Dht::run`], for writes whose values `update` computes from the
    /// ones they replace (then `values` is empty). On the message path the
    /// keys of owners reached by messages go to them as requests, and the
    /// others run here.
    pub(super) fn run_updating(
        &self,
        mode: Mode,
        keys: &[&[u8]],
        values: &[&[u8]],
        w: &mut Work<T::Lane>,
        update: Option<&mut Update<'_>>,
    ) -> Result<()> {
        match &self.links {
            Some(l) if l.any() => self.run_routed(l, mode, keys, values, w, update),
            _ => self.run_direct(mode, keys, values, w, update),
        }
    }

    /// Runs every key of `keys` through the transport.
    pub(super) fn run_direct(
        &self,
        mode: Mode,
        keys: &[&[u8]],
        values: &[&[u8]],
        w: &mut Work<T::Lane>,
        mut update: Option<&mut Update<'_>>,
    ) -> Result<()> {
        let vl = self.cfg.value_len;
        w.out.clear();
        w.out.resize(keys.len(), Outcome::Pending);
        // Values found land here; a key's bytes are read only when it hits,
        // so the buffer only grows and is never cleared.
        let need = keys.len() * vl;
        if w.found.len() < need {
            w.found.resize(need, 0);
        }
        let dl = self.cfg.layout().data_len();
        if update.is_some() && w.before.len() < keys.len() * dl {
            w.before.resize(keys.len() * dl, 0);
        }
        let want = if update.is_some() {
            1
        } else {
            self.lanes_for(keys.len())
        };
        let k = self.lanes(w, want);
        let Work {
            lanes,
            probes,
            out,
            found,
            before,
            ..
        } = w;
        let lanes = &mut lanes[..k];
        for (n, ks) in keys.chunks(MAX_RUN).enumerate() {
            let first = n * MAX_RUN;
            let vs = if values.is_empty() {
                values
            } else {
                &values[first..first + ks.len()]
            };
            probes.clear();
            probes.extend(
                ks.iter()
                    .map(|k| Probe::new(&self.shape, self.key_hash.hash(k))),
            );
            let own = probes.iter().filter(|p| p.rank == self.shape.rank).count();
            self.count(|s| s.own_keys += own as u64);
            // Runs of one table take tag bases MAX_RUN apart, so the tags of
            // 64 runs in flight at once are all distinct; tables start at a
            // random base, so two tables of one rank rarely meet. The parts
            // of a run on several lanes take tags of their keys' places in
            // it, so theirs are distinct too.
            let seq = self.seq.fetch_add(MAX_RUN as u32, Ordering::Relaxed) as u16;
            let now = self.clock.now();
            // The run's keys in `k` parts (fewer when it is short), one
            // machine each.
            let per = ks.len().div_ceil(k).max(1);
            let mut parts: [Option<Run<'_>>; MAX_DEPTH] = std::array::from_fn(|_| None);
            let outs = out[first..first + ks.len()].chunks_mut(per);
            let founds = found[first * vl..(first + ks.len()) * vl].chunks_mut(per * vl);
            let mut befores = (update.is_some())
                .then(|| before[first * dl..(first + ks.len()) * dl].chunks_mut(per * dl));
            for (j, (((kp, op), fp), pp)) in ks
                .chunks(per)
                .zip(outs)
                .zip(founds)
                .zip(probes.chunks_mut(per))
                .enumerate()
            {
                let at = j * per;
                let vp = if vs.is_empty() {
                    vs
                } else {
                    &vs[at..at + kp.len()]
                };
                parts[j] = Some(Run::new(
                    &self.shape,
                    mode,
                    kp,
                    vp,
                    op,
                    fp,
                    pp,
                    seq.wrapping_add(at as u16),
                    now,
                ));
            }
            let used = ks.len().div_ceil(per);
            // The caller numbers keys across runs (an accumulation has one
            // part).
            let mut shifted;
            if let (Some(f), Some(bs)) = (update.as_mut(), befores.as_mut()) {
                shifted = move |i: usize, w: Write, v: &mut [u8]| f(first + i, w, v);
                let run = parts[0].as_mut().expect("a run has a part");
                run.update = Some(Updating {
                    f: &mut shifted,
                    before: bs.next().expect("a run has a part"),
                });
            }
            let lanes = &mut lanes[..used];
            let parts = &mut parts[..used];
            match self.cfg.variant {
                Variant::Lockfree => self.drive_parts(parts, Lockfree::new, lanes)?,
                Variant::Fine => self.drive_parts(parts, Fine::new, lanes)?,
                Variant::Coarse => self.drive_parts(parts, Coarse::new, lanes)?,
                Variant::Chunked => self.drive_parts(parts, Chunked::new, lanes)?,
            }
        }
        if let Some(i) = out.iter().position(|o| *o == Outcome::Pending) {
            return Err(Error::Internal(format!(
                "the {:?} variant's {mode:?} ended with key {} undecided",
                self.cfg.variant,
                crate::outcome::key_hex(keys[i])
            )));
        }
        Ok(())
    }

    /// Makes a machine of each part (`make`) and drives them, one per
    /// lane. One part, the common case, is driven where it is made: the
    /// machines are moved nowhere (a run's machine is hundreds of bytes,
    /// and moving several per operation showed in the profile).
    fn drive_parts<'r, V: Machine>(
        &self,
        parts: &mut [Option<Run<'r>>],
        make: fn(Run<'r>) -> V,
        lanes: &mut [LaneWork<T::Lane>],
    ) -> Result<()> {
        let take = |p: &mut Option<Run<'r>>| make(p.take().expect("a run per lane"));
        if let [one] = parts {
            return self.drive(std::slice::from_mut(&mut take(one)), lanes);
        }
        let mut ms: Vec<V> = parts.iter_mut().map(take).collect();
        self.drive(&mut ms, lanes)
    }

    /// The driver: posts what each machine plans on its lane, feeds back
    /// completions or the error with the time, until every machine is done.
    /// While some batches are in flight it completes one that is ready, or
    /// else waits for the oldest; a machine that asks to wait before its
    /// next batch waits alone, while the others go on. Machine `i` of
    /// `ms` runs on `lanes[i]` (one per machine).
    fn drive<V: Machine>(&self, ms: &mut [V], lanes: &mut [LaneWork<T::Lane>]) -> Result<()> {
        let k = ms.len();
        debug_assert_eq!(k, lanes.len());
        let mut c = Tally::default();
        let mut at = [At::Done; MAX_DEPTH];
        let now = self.clock.now();
        for i in 0..k {
            at[i] = At::Plan(ms[i].start(&mut lanes[i].batch, now));
        }
        let mut posted = 0u64;
        loop {
            for i in 0..k {
                let m = &mut ms[i];
                while let At::Plan(step) = at[i] {
                    at[i] = self.step(m, &mut lanes[i], step, &mut c, &mut posted);
                }
            }
            // A paused machine whose time has come posts now.
            if at[..k].iter().any(|a| matches!(a, At::Paused(_))) {
                let now = self.clock.now();
                for i in 0..k {
                    if matches!(at[i], At::Paused(t) if t <= now) {
                        at[i] = self.post(&mut ms[i], &mut lanes[i], &mut c, &mut posted);
                    }
                }
                if at[..k].iter().any(|a| matches!(a, At::Plan(_))) {
                    continue;
                }
            }
            // Complete a batch in flight: a ready one, else the oldest.
            let mut flying = 0;
            let mut oldest: Option<(usize, u64)> = None;
            for (i, a) in at[..k].iter().enumerate() {
                if let At::Flying(n) = *a {
                    flying += 1;
                    if oldest.is_none_or(|(_, o)| n < o) {
                        oldest = Some((i, n));
                    }
                }
            }
            let ready = if flying > 1 {
                (0..k).find(|&i| matches!(at[i], At::Flying(_)) && self.t.ready(&lanes[i].lane))
            } else {
                None
            };
            if let Some(i) = ready.or(oldest.map(|(i, _)| i)) {
                at[i] = At::Plan(self.complete(&mut ms[i], &mut lanes[i]));
                continue;
            }
            // Nothing in flight: wait for the first paused machine, if any.
            let first = (0..k)
                .filter_map(|i| match at[i] {
                    At::Paused(t) => Some((i, t)),
                    _ => None,
                })
                .min_by_key(|&(_, t)| t);
            let Some((i, until)) = first else {
                break;
            };
            let now = self.clock.now();
            if until > now {
                self.clock.pause(until - now);
            }
            at[i] = self.post(&mut ms[i], &mut lanes[i], &mut c, &mut posted);
        }
        let mut st = Stats {
            remote_ops: c.remote_ops,
            batches: c.batches,
            remote_bytes: c.remote_bytes,
            ..Stats::default()
        };
        c.aimed.add_to(&mut st);
        let mut first = Ok(());
        for m in ms.iter_mut() {
            let r = m.finish(&mut st);
            if first.is_ok() {
                first = r;
            }
        }
        self.count(|s| s.add(&st));
        first
    }

    /// Takes one step of a machine: where it is after.
    fn step<V: Machine>(
        &self,
        m: &mut V,
        l: &mut LaneWork<T::Lane>,
        step: Step,
        c: &mut Tally,
        posted: &mut u64,
    ) -> At {
        let b = &mut l.batch;
        match step {
            Step::Done => At::Done,
            Step::Issue => {
                if let Some(d) = b.wait.take() {
                    let now = self.clock.now();
                    return At::Paused(now.checked_add(d).unwrap_or(now));
                }
                self.post(m, l, c, posted)
            }
            Step::LockRegion { rank, exclusive } => {
                b.clear();
                let r = self.t.lock_region(rank, exclusive);
                let now = self.clock.now();
                At::Plan(match r {
                    Ok(native) => {
                        b.native = native;
                        c.remote_ops += u64::from(native);
                        c.remote_bytes += 8 * u64::from(native);
                        c.aimed.lock(rank, self.shape.rank, u64::from(native));
                        m.on_complete(b, now)
                    }
                    Err(e) => m.on_error(Error::transport(e), b, now),
                })
            }
            Step::UnlockRegion { rank } => {
                b.clear();
                c.remote_ops += 1;
                c.remote_bytes += 8;
                c.aimed.lock(rank, self.shape.rank, 1);
                let r = self.t.unlock_region(rank);
                let now = self.clock.now();
                At::Plan(match r {
                    Ok(()) => m.on_complete(b, now),
                    Err(e) => m.on_error(Error::transport(e), b, now),
                })
            }
        }
    }

    /// Posts a machine's planned batch on its lane, counting it: in
    /// flight, or (done at once, or failed) fed back.
    fn post<V: Machine>(
        &self,
        m: &mut V,
        l: &mut LaneWork<T::Lane>,
        c: &mut Tally,
        posted: &mut u64,
    ) -> At {
        if l.batch.is_empty() {
            // Nothing to send (a pause before a re-plan): not a batch.
            return At::Plan(m.on_complete(&mut l.batch, self.clock.now()));
        }
        c.remote_ops += l.batch.len() as u64;
        c.remote_bytes += l.batch.payload();
        c.batches += 1;
        let mut v = recycle(std::mem::take(&mut l.ops));
        l.batch.as_ops(&mut v);
        c.aimed.count(&v, self.shape.rank);
        let r = self.t.post(&mut l.lane, &mut v);
        l.ops = recycle(v);
        match r {
            Ok(true) => {
                *posted += 1;
                At::Flying(*posted)
            }
            Ok(false) => At::Plan(m.on_complete(&mut l.batch, self.clock.now())),
            Err(e) => At::Plan(m.on_error(Error::transport(e), &mut l.batch, self.clock.now())),
        }
    }

    /// Completes a machine's batch in flight (waiting for it) and feeds
    /// the outcome back.
    fn complete<V: Machine>(&self, m: &mut V, l: &mut LaneWork<T::Lane>) -> Step {
        let mut v = recycle(std::mem::take(&mut l.ops));
        l.batch.as_ops(&mut v);
        let r = self.t.complete(&mut l.lane, &mut v);
        l.ops = recycle(v);
        let now = self.clock.now();
        match r {
            Ok(()) => m.on_complete(&mut l.batch, now),
            Err(e) => m.on_error(Error::transport(e), &mut l.batch, now),
        }
    }
}

/// The operations of a run by where they go: to this rank itself, or
/// across to another (by kind), which is what a fabric's rates bound.
#[derive(Default)]
struct Aimed {
    itself: u64,
    reads: u64,
    writes: u64,
    atomics: u64,
}

impl Aimed {
    fn count(&mut self, ops: &[Op<'_>], me: usize) {
        for op in ops {
            if op.target().rank == me {
                self.itself += 1;
                continue;
            }
            match op.kind() {
                OpKind::Read | OpKind::Recv => self.reads += 1,
                OpKind::Write | OpKind::Send => self.writes += 1,
                OpKind::CompareAndSwap | OpKind::FetchAdd | OpKind::Fetch | OpKind::Swap => {
                    self.atomics += 1
                }
            }
        }
    }

    fn add_to(&self, s: &mut Stats) {
        s.self_ops += self.itself;
        s.cross_reads += self.reads;
        s.cross_writes += self.writes;
        s.cross_atomics += self.atomics;
    }

    /// `n` region-lock operations on `rank`'s window.
    fn lock(&mut self, rank: usize, me: usize, n: u64) {
        if rank == me {
            self.itself += n;
        } else {
            self.atomics += n;
        }
    }
}
