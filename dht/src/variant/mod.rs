//! The variants: each plans batches of remote operations and interprets
//! what comes back. All share the placement and the round structure: every
//! unresolved key advances one candidate per round, and a round is a few
//! batches (one post/complete cycle each) for all keys at once.

pub mod chunked;
pub mod coarse;
pub mod fine;
pub mod lockfree;

use crate::layout::INVALID;
use crate::table::{Dht, Home, Read, Result, Write};
use crate::transport::{Op, Remote, Transport};

/// Exclusive (writer) lock value of the MPI-DHT's lock words.
pub(crate) const EXCLUSIVE: u64 = 0x1000_0000;

/// A key on its way through its candidates.
#[derive(Clone, Debug)]
pub(crate) struct Probe<'k> {
    pub(crate) idx: usize,
    pub(crate) key: &'k [u8],
    pub(crate) home: Home,
    pub(crate) k: usize,
    pub(crate) retries: u32,
}

impl<'k> Probe<'k> {
    pub(crate) fn new<T: Transport>(d: &Dht<T>, idx: usize, key: &'k [u8]) -> Self {
        Probe {
            idx,
            key,
            home: d.home(key),
            k: 0,
            retries: 0,
        }
    }

    pub(crate) fn bucket(&self) -> (usize, u64) {
        (self.home.rank, self.home.candidates[self.k])
    }

    pub(crate) fn last(&self) -> bool {
        self.k + 1 == self.home.candidates.len()
    }
}

/// A probe for every key, in order.
pub(crate) fn probes<'k, T: Transport>(
    d: &Dht<T>,
    keys: impl IntoIterator<Item = &'k [u8]>,
) -> Vec<Probe<'k>> {
    keys.into_iter()
        .enumerate()
        .map(|(i, k)| Probe::new(d, i, k))
        .collect()
}

/// Where a bucket's 8-byte word is: the lock (fine) or the state (chunked).
pub(crate) fn word_at<T: Transport>(d: &Dht<T>, rank: usize, bucket: u64) -> Remote {
    Remote::new(rank, d.layout.offset(bucket))
}

/// A bucket's data part holding `key` and `value`.
pub(crate) fn encoded<T: Transport>(d: &Dht<T>, key: &[u8], value: &[u8]) -> Vec<u8> {
    let mut enc = vec![0u8; d.layout.data_len()];
    d.layout.encode(key, value, &mut enc);
    enc
}

/// Writes each `(where, bytes)` in one batch.
pub(crate) fn store<T: Transport>(d: &Dht<T>, writes: &[(Remote, Vec<u8>)]) -> Result<()> {
    let mut ops: Vec<Op> = writes
        .iter()
        .map(|(to, from)| Op::Write { to: *to, from })
        .collect();
    d.exec(&mut ops)
}

/// Adds `delta` (wrapping) to every word in one batch: lock releases.
pub(crate) fn add_to_all<T: Transport>(d: &Dht<T>, words: &[Remote], delta: u64) -> Result<()> {
    let mut junk = vec![0u64; words.len()];
    let mut ops: Vec<Op> = words
        .iter()
        .zip(junk.iter_mut())
        .map(|(&at, old)| Op::FetchAdd { at, delta, old })
        .collect();
    d.exec(&mut ops)
}

/// Where a bucket's data part starts.
pub(crate) fn data_at<T: Transport>(d: &Dht<T>, rank: usize, bucket: u64) -> Remote {
    Remote::new(rank, d.layout.offset(bucket) + d.layout.data_start() as u64)
}

/// Reads the current candidate of every probe in one batch.
pub(crate) fn fetch<T: Transport>(d: &Dht<T>, probes: &[Probe<'_>]) -> Result<Vec<Vec<u8>>> {
    let mut bufs = vec![vec![0u8; d.layout.data_len()]; probes.len()];
    let mut ops: Vec<Op> = probes
        .iter()
        .zip(bufs.iter_mut())
        .map(|(p, into)| {
            let (r, b) = p.bucket();
            Op::Read {
                from: data_at(d, r, b),
                into,
            }
        })
        .collect();
    d.exec(&mut ops)?;
    Ok(bufs)
}

/// The MPI-DHT read: walk the candidates until the key is found or an
/// empty bucket ends the search (buckets never become empty again, so the
/// key cannot lie further on). Checksums are verified where the layout has
/// them: a mismatch is re-read up to `checksum_retries` times, then the
/// bucket is marked invalid and the read returned as corrupt.
pub(crate) fn probe_read<T: Transport>(
    d: &Dht<T>,
    mut pending: Vec<Probe<'_>>,
    out: &mut [Option<Read>],
) -> Result<()> {
    while !pending.is_empty() {
        let bufs = fetch(d, &pending)?;
        let mut next = Vec::new();
        let mut invalidate = Vec::new();
        for (mut p, buf) in pending.into_iter().zip(bufs) {
            let b = d.layout.decode(&buf, 0);
            if !b.occupied() && !b.invalid() {
                out[p.idx] = Some(Read::Miss);
                continue;
            }
            if b.occupied() && b.key == p.key {
                if b.checksum_ok() {
                    out[p.idx] = Some(Read::Hit(b.value.to_vec()));
                    continue;
                }
                if p.retries < d.cfg.checksum_retries {
                    // Probably a write in flight: read the same bucket again.
                    p.retries += 1;
                    d.count(|s| s.checksum_retries += 1);
                    next.push(p);
                    continue;
                }
                invalidate.push(p.bucket());
                out[p.idx] = Some(Read::Corrupt);
                continue;
            }
            // Another key, or an invalid bucket: the next candidate.
            if p.last() {
                out[p.idx] = Some(Read::Miss);
            } else {
                p.k += 1;
                p.retries = 0;
                next.push(p);
            }
        }
        if !invalidate.is_empty() {
            let meta = [INVALID];
            let at = d.layout.meta.expect("checksummed layouts have a meta byte") as u64;
            let mut ops: Vec<Op> = invalidate
                .iter()
                .map(|&(r, b)| Op::Write {
                    to: Remote::new(r, d.layout.offset(b) + at),
                    from: &meta,
                })
                .collect();
            d.exec(&mut ops)?;
            d.count(|s| s.invalidations += invalidate.len() as u64);
        }
        pending = next;
    }
    Ok(())
}

/// Whether a writer may take this bucket, and with what outcome.
pub(crate) fn take(
    buf_occupied: bool,
    buf_invalid: bool,
    same_key: bool,
    last: bool,
) -> Option<Write> {
    if !buf_occupied || buf_invalid {
        Some(Write::Inserted)
    } else if same_key {
        Some(Write::Updated)
    } else if last {
        Some(Write::Evicted)
    } else {
        None
    }
}

/// The MPI-DHT write: the first candidate that is empty, invalid or holds
/// the same key; else the last one is overwritten. Two keys of one batch
/// that choose the same bucket in a round do not both write it: the later
/// one re-reads it in the next round.
pub(crate) fn probe_write<T: Transport>(
    d: &Dht<T>,
    mut pending: Vec<Probe<'_>>,
    values: &[&[u8]],
    out: &mut [Option<Write>],
) -> Result<()> {
    while !pending.is_empty() {
        let bufs = fetch(d, &pending)?;
        let mut next = Vec::new();
        let mut chosen: Vec<(usize, u64)> = Vec::new();
        let mut writes: Vec<(Remote, Vec<u8>)> = Vec::new();
        for (mut p, buf) in pending.into_iter().zip(bufs) {
            let b = d.layout.decode(&buf, 0);
            match take(b.occupied(), b.invalid(), b.key == p.key, p.last()) {
                Some(w) if !chosen.contains(&p.bucket()) => {
                    chosen.push(p.bucket());
                    let (r, bk) = p.bucket();
                    writes.push((data_at(d, r, bk), encoded(d, p.key, values[p.idx])));
                    out[p.idx] = Some(w);
                }
                Some(_) => next.push(p), // taken by another key this round
                None => {
                    p.k += 1;
                    next.push(p);
                }
            }
        }
        store(d, &writes)?;
        pending = next;
    }
    Ok(())
}

/// Waits a little before retrying a lock, so retries do not spin a core.
pub(crate) fn backoff(attempt: u32) {
    if attempt < 4 {
        std::thread::yield_now();
    } else {
        std::thread::sleep(std::time::Duration::from_micros(1 << attempt.min(10)));
    }
}

pub(crate) fn collect<R>(out: Vec<Option<R>>) -> Vec<R> {
    out.into_iter()
        .map(|o| o.expect("every key resolved"))
        .collect()
}
