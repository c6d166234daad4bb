//! The table on the message path: creation with a messenger and an
//! executor, the split of an operation's keys between the transport (this
//! rank's own region and those it reaches by memory) and requests to their
//! owners, and the owner's side that runs peers' requests.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Instant;

use fabkit_core::Bootstrap;

use super::drive::Work;
use super::Dht;
use crate::config::Config;
use crate::message::serve::{Owner, Service};
use crate::message::wire::{self, Kind, Reply, Request, Sizes};
use crate::message::{Messenger, NoMessages};
use crate::outcome::{Error, Result, Stats};
use crate::placement::KeyHash;
use crate::transport::Transport;
use crate::variant::{Mode, Outcome, Update, MAX_RUN};

/// Whether one key of `cfg`'s records, with its value, fits a request and
/// its answer on the message path ([`MAX_MESSAGE`] bytes at most); the
/// error says what to do. The message path needs it; `auto` takes the rma
/// path where it fails.
pub fn fits_a_message(cfg: &Config) -> std::result::Result<(), String> {
    let sizes = Sizes {
        table: 0,
        ranks: 1,
        key_len: cfg.key_len,
        value_len: cfg.value_len,
        max_keys: MAX_RUN,
    };
    let fits = [Kind::Read, Kind::Write, Kind::FindOrPut]
        .into_iter()
        .all(|k| sizes.keys_per_message(k, MAX_MESSAGE, MAX_RUN) > 0);
    if fits {
        Ok(())
    } else {
        Err(too_big(cfg, MAX_MESSAGE))
    }
}

/// The message of a record too big for a message of `max_len` bytes.
fn too_big(cfg: &Config, max_len: usize) -> String {
    format!(
        "a record of {} B keys and {} B values does not fit a message of {max_len} B (the \
         message path sends a key and its value in one): use smaller records, or the rma path",
        cfg.key_len, cfg.value_len
    )
}

/// What a table on the message path holds beyond the transport.
pub(crate) struct Links<M: Messenger> {
    /// The service running peers' requests on this rank's region; first,
    /// so it stops (and its thread is joined) before anything else goes.
    /// None once [`Links::stop_service`] stopped it.
    service: Option<Service>,
    pub(crate) m: Arc<M>,
    /// Per rank: whether its keys go to it as requests.
    by_message: Vec<bool>,
    sizes: Sizes,
    /// Ids of this rank's requests (one sequence per table and rank, from
    /// a random start: a late reply of another table never matches).
    next_id: AtomicU64,
    /// The executor's counters: what the service ran for peers.
    served: Arc<dyn Counted>,
}

/// The counters of what a service ran.
trait Counted: Send + Sync {
    fn stats(&self) -> Stats;
    fn reset(&self);
}

impl<M: Messenger> Links<M> {
    /// Stops the service and joins its thread, which first settles the
    /// answers it has in flight (their sends complete).
    pub(crate) fn stop_service(&mut self) {
        drop(self.service.take());
    }

    /// Whether any rank is reached by messages.
    pub(crate) fn any(&self) -> bool {
        self.by_message.iter().any(|&b| b)
    }

    /// What the service ran for peers (their keys are not this rank's own
    /// operations: `own_keys` stays the caller's).
    pub(crate) fn served(&self) -> Stats {
        Stats {
            own_keys: 0,
            ..self.served.stats()
        }
    }
}

/// The most bytes one request or reply carries: at most what the
/// messenger takes, and no more than a provider sends eagerly (tcp;ofi_rxm
/// sends up to 16 KiB without a rendezvous, which needs another round trip
/// with the target's progress).
pub const MAX_MESSAGE: usize = 16 << 10;

impl<T: Transport, M: Messenger> Dht<T, M> {
    /// Creates the table on every rank, on the message path: the keys of
    /// ranks that `t` does not reach by memory ([`Transport::by_memory`])
    /// go to them as requests through `m`, and this rank's service runs
    /// theirs on its own region through `exec`, a second handle on the
    /// same memory (its own region reached by memory, CPU atomics), while
    /// this rank goes on with its own operations. Collective: every rank
    /// calls it, with the same configuration.
    ///
    /// Accumulating writes ([`Dht::update_many`]) run a closure of the
    /// caller's while the bucket is held; a closure cannot travel, so on
    /// this path they are refused for keys whose owner is reached by
    /// messages.
    pub fn create_with_messages<E>(
        t: T,
        exec: E,
        m: M,
        cfg: Config,
        boot: &dyn Bootstrap,
        key_hash: KeyHash,
    ) -> Result<Dht<T, M>>
    where
        E: Transport + Send + Sync + 'static,
    {
        let local = if m.ranks() != t.ranks() || m.rank() != t.rank() {
            Err(Error::Config(format!(
                "the messenger is rank {} of {} and the transport rank {} of {}: give both \
                 the same job",
                m.rank(),
                m.ranks(),
                t.rank(),
                t.ranks()
            )))
        } else if exec.rank() != t.rank() || !exec.by_memory(exec.rank()) {
            Err(Error::Config(
                "the executor must be this rank's own region, reached by memory".into(),
            ))
        } else {
            Ok(())
        };
        let agreed = Dht::<T, M>::check_and_agree(&t, &cfg, boot, &key_hash, true);
        local?;
        agreed?;
        // The table's id: rank 0's draw, agreed by all (a request for
        // another table, or a late one for a table freed and made again,
        // is refused by it).
        // This rank's draws (the id, and its requests' first id); one that
        // fails on one rank fails the create on every rank.
        let draws = fabkit_core::random_u64().and_then(|a| Ok((a, fabkit_core::random_u64()?)));
        let mine = match &draws {
            Ok((id, _)) => Ok(id.to_le_bytes().to_vec()),
            Err(e) => Err(Error::Config(e.to_string())),
        };
        let ids = crate::collective::agree(boot, "drawing the table's id", mine)?;
        let first_id = draws.map_or(0, |(_, f)| f >> 1);
        let table = ids
            .first()
            .and_then(|b| b.get(..8))
            .map(|b| u64::from_le_bytes(b.try_into().expect("8 bytes")))
            .ok_or_else(|| Error::Mismatch("rank 0 sent no table id".into()))?;
        let max_len = m.max_len().min(MAX_MESSAGE);
        let mut sizes = Sizes {
            table,
            ranks: t.ranks(),
            key_len: cfg.key_len,
            value_len: cfg.value_len,
            max_keys: MAX_RUN,
        };
        sizes.max_keys = [Kind::Read, Kind::Write, Kind::FindOrPut]
            .into_iter()
            .map(|k| sizes.keys_per_message(k, max_len, MAX_RUN))
            .min()
            .unwrap_or(0);
        if sizes.max_keys == 0 {
            return Err(Error::Config(too_big(&cfg, max_len)));
        }
        let me = t.rank();
        let by_message = (0..t.ranks()).map(|r| r != me && !t.by_memory(r)).collect();
        let executor = Arc::new(Executor {
            dht: Dht::<E>::assemble(exec, cfg, key_hash.clone(), None),
        });
        let m = Arc::new(m);
        let service = Service::start(executor.clone(), m.clone(), sizes)?;
        let links = Links {
            service: Some(service),
            m,
            by_message,
            sizes,
            next_id: AtomicU64::new(first_id),
            served: executor,
        };
        Ok(Dht::assemble(t, cfg, key_hash, Some(links)))
    }

    /// Sends every rank reached by messages one request (a read of a key
    /// it owns) and waits for the answers, so that the fabric's connections
    /// (made on first use by `ofi_rxm` and MPI alike) are made now, and not
    /// in a caller's first timed operations; then, once every rank has, the
    /// table's counters start from zero. Collective; [`crate::open`] does
    /// it for every table it makes on the message path. Nothing to do on
    /// other tables.
    pub fn warm_up(&self, boot: &dyn Bootstrap) -> Result<()> {
        let Some(l) = &self.links else {
            return Ok(());
        };
        let mut keys: Vec<Vec<u8>> = Vec::new();
        let mut key = vec![0u8; self.cfg.key_len];
        for owner in (0..self.t.ranks()).filter(|&r| l.by_message[r]) {
            // A key of `owner`'s, found by trying: a rank owns about 1/ranks
            // of them, so a few thousand draws find one for any job size
            // fabkit runs; one not found leaves that connection to its first
            // use.
            for i in 0..1u64 << 16 {
                let x = warm_key_word(owner as u64, i);
                for (j, b) in key.iter_mut().enumerate() {
                    *b = (x >> (8 * (j % 8))) as u8 ^ j as u8;
                }
                if self.shape.place.rank_of(self.key_hash.hash(&key)) as usize == owner {
                    keys.push(key.clone());
                    break;
                }
            }
        }
        let refs: Vec<&[u8]> = keys.iter().map(|k| &k[..]).collect();
        let warmed = self.with_work(|w| self.run(Mode::Read, &refs, &[], w));
        // Every rank waits for every other's warm-up before the counters
        // are reset, so none of a peer's warm-up requests is counted after.
        crate::collective::agree(boot, "warming up", warmed.map(|()| Vec::new()))?;
        *self.stats.lock().unwrap() = Stats::default();
        l.served.reset();
        // And no rank's first request reaches a service that has yet to
        // reset its counters.
        boot.barrier().map_err(Error::Bootstrap)
    }

    /// The messenger of a table on the message path.
    pub fn messenger(&self) -> Option<&M> {
        self.links.as_ref().map(|l| &*l.m)
    }

    /// Whether rank `r`'s keys go to it as requests.
    pub fn by_message(&self, r: usize) -> bool {
        self.links
            .as_ref()
            .is_some_and(|l| l.by_message.get(r).copied().unwrap_or(false))
    }

    /// Runs `mode` over `keys`: those whose owner is reached by messages as
    /// one request per owner (more where they outgrow a message), all in
    /// flight while the others run here through the transport; then the
    /// replies. Outcomes and values land in `w.out` and `w.found` in key
    /// order, as [`Dht::run_direct`] leaves them.
    pub(super) fn run_routed(
        &self,
        l: &Links<M>,
        mode: Mode,
        keys: &[&[u8]],
        values: &[&[u8]],
        w: &mut Work<T::Lane>,
        update: Option<&mut Update<'_>>,
    ) -> Result<()> {
        let n = keys.len();
        let vl = self.cfg.value_len;
        // Each key's owner; the keys of each owner reached by messages, in
        // key order.
        let mut owners: Vec<usize> = Vec::with_capacity(n);
        let mut local: Vec<usize> = Vec::with_capacity(n);
        let mut remote = 0usize;
        for (i, k) in keys.iter().enumerate() {
            let r = self.shape.place.rank_of(self.key_hash.hash(k)) as usize;
            owners.push(r);
            if l.by_message[r] {
                remote += 1;
            } else {
                local.push(i);
            }
        }
        if remote == 0 {
            return self.run_direct(mode, keys, values, w, update);
        }
        if update.is_some() {
            return Err(Error::Config(
                "an accumulating write runs the caller's closure while the bucket is held, and a \
                 closure cannot travel to an owner reached by messages: accumulate on the memory \
                 or rma path, or read and write"
                    .into(),
            ));
        }
        let kind = Kind::of(mode);
        let mut calls = Vec::new();
        let mut sent = Stats::default();
        let mut buf = Vec::with_capacity(MAX_MESSAGE);
        let mut first_err = None;
        for owner in 0..self.t.ranks() {
            if !l.by_message[owner] {
                continue;
            }
            let mine: Vec<usize> = (0..n).filter(|&i| owners[i] == owner).collect();
            for part in mine.chunks(l.sizes.max_keys) {
                let ks: Vec<&[u8]> = part.iter().map(|&i| keys[i]).collect();
                let vs: Vec<&[u8]> = if kind.carries_values() {
                    part.iter().map(|&i| values[i]).collect()
                } else {
                    Vec::new()
                };
                let id = l.next_id.fetch_add(1, Ordering::Relaxed);
                wire::request(&mut buf, &l.sizes, kind, self.shape.rank, id, &ks, &vs);
                sent.requests += 1;
                sent.request_keys += part.len() as u64;
                sent.message_bytes += buf.len() as u64;
                match l.m.call(owner, id, &buf) {
                    Ok(c) => calls.push((owner, id, part.to_vec(), c)),
                    Err(e) => {
                        first_err.get_or_insert(Error::transport(e));
                    }
                }
            }
        }
        let started = Instant::now();
        // This rank's own keys, and those of ranks it reaches by memory,
        // while the requests are out.
        let ran = if local.is_empty() {
            w.out.clear();
            Ok(())
        } else {
            let ks: Vec<&[u8]> = local.iter().map(|&i| keys[i]).collect();
            let vs: Vec<&[u8]> = if values.is_empty() {
                Vec::new()
            } else {
                local.iter().map(|&i| values[i]).collect()
            };
            self.run_direct(mode, &ks, &vs, w, None)
        };
        // The local outcomes, compact at the front, move to their keys'
        // places: from the back, a key's place is never before its compact
        // one, so nothing unmoved is overwritten.
        if ran.is_ok() {
            w.out.resize(n, Outcome::Pending);
            if w.found.len() < n * vl {
                w.found.resize(n * vl, 0);
            }
            for (j, &i) in local.iter().enumerate().rev() {
                w.out[i] = w.out[j];
                if i != j {
                    w.found.copy_within(j * vl..(j + 1) * vl, i * vl);
                }
            }
        }
        // Every reply is waited for (each within the deadline), also after
        // an error: no receive is left posted into a buffer of this call.
        let deadline = started + self.shape.deadline;
        let mut outs: Vec<Outcome> = Vec::new();
        let mut vals: Vec<u8> = Vec::new();
        for (owner, id, part, call) in calls {
            outs.clear();
            outs.resize(part.len(), Outcome::Pending);
            vals.clear();
            vals.resize(part.len() * vl, 0);
            let mut read = None;
            let waited = l.m.wait_reply(call, deadline, &mut |b| {
                sent.message_bytes += b.len() as u64;
                read = Some(wire::read_reply(
                    b, &l.sizes, kind, owner, id, &mut outs, &mut vals,
                ));
            });
            let got = match (waited, read) {
                (Err(e), _) => Err(Error::NoReply {
                    rank: owner,
                    op: kind.name(),
                    keys: part.len(),
                    id,
                    waited: started.elapsed(),
                    changes: kind.changes_table(),
                    cause: Box::new(e),
                }),
                (Ok(()), Some(Ok(Reply::Done))) => Ok(()),
                (Ok(()), Some(Ok(Reply::Failed(message)))) => Err(Error::Remote {
                    rank: owner,
                    op: kind.name(),
                    keys: part.len(),
                    message,
                }),
                (Ok(()), Some(Err(why))) => Err(Error::BadReply {
                    rank: owner,
                    op: kind.name(),
                    id,
                    why,
                }),
                (Ok(()), None) => Err(Error::Internal(
                    "a messenger's wait ended with no reply and no error".into(),
                )),
            };
            match got {
                Ok(()) if ran.is_ok() => {
                    for (j, &i) in part.iter().enumerate() {
                        w.out[i] = outs[j];
                        w.found[i * vl..(i + 1) * vl].copy_from_slice(&vals[j * vl..(j + 1) * vl]);
                    }
                }
                Ok(()) => {}
                Err(e) => {
                    first_err.get_or_insert(e);
                }
            }
        }
        self.count(|s| s.add(&sent));
        ran?;
        match first_err {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }
}

/// The owner's side: this rank's region, reached by memory through a
/// table of its own (the same configuration and placement, no messages),
/// which the service runs peers' requests on.
struct Executor<E: Transport> {
    dht: Dht<E, NoMessages>,
}

impl<E: Transport + Send + Sync + 'static> Counted for Executor<E> {
    fn stats(&self) -> Stats {
        self.dht.stats()
    }
    fn reset(&self) {
        *self.dht.stats.lock().unwrap() = Stats::default();
    }
}

/// A word of keys drawn for `owner`: distinct per try.
fn warm_key_word(owner: u64, i: u64) -> u64 {
    crate::placement::mix(owner.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ i)
}

impl<E: Transport + Send + Sync + 'static> Owner for Executor<E> {
    type Work = Work<E::Lane>;

    fn work(&self) -> Work<E::Lane> {
        Work::new(true)
    }

    fn run(
        &self,
        w: &mut Work<E::Lane>,
        req: &Request<'_>,
        out: &mut Vec<Outcome>,
        found: &mut Vec<u8>,
    ) -> Result<()> {
        let (kl, vl) = (self.dht.cfg.key_len, self.dht.cfg.value_len);
        let me = self.dht.shape.rank;
        let keys: Vec<&[u8]> = (0..req.count).map(|i| req.key(i, kl)).collect();
        if let Some(k) = keys
            .iter()
            .find(|k| self.dht.shape.place.rank_of(self.dht.key_hash.hash(k)) as usize != me)
        {
            return Err(Error::Config(format!(
                "key {} is not rank {me}'s: its sender places keys otherwise (another key hash?)",
                crate::outcome::key_hex(k)
            )));
        }
        let values: Vec<&[u8]> = if req.kind.carries_values() {
            (0..req.count).map(|i| req.value(i, vl)).collect()
        } else {
            Vec::new()
        };
        self.dht
            .run_direct(req.kind.mode(), &keys, &values, w, None)?;
        out.clear();
        out.extend_from_slice(&w.out[..req.count]);
        found.clear();
        found.extend_from_slice(&w.found[..req.count * vl]);
        Ok(())
    }

    fn count(&self, f: &mut dyn FnMut(&mut Stats)) {
        f(&mut self.dht.stats.lock().unwrap());
    }
}
