//! Chunked linear probing (seed 002, Oortwijn): a key's buckets are linear
//! runs of C buckets (chunks), the i-th chunk placed by quadratic probing
//! from the key's first candidate, so runs do not cluster. A chunk is one
//! remote read; each round fetches two chunks (the next one with the
//! current), halving round trips for long probes. A bucket is claimed by one
//! compare-and-swap on its state word (empty -> claimed), filled, then
//! published (state full) in a later batch; reads verify the CRC.

use super::{backoff, collect, data_at, encoded, probes, store, word_at, Probe};
use crate::layout::{STATE_CLAIMED, STATE_EMPTY, STATE_FULL};
use crate::table::{Dht, FindOrPut, Read, Result, Write};
use crate::transport::{Op, Remote, Transport};

/// How long a reader or writer waits on a claimed (half-written) bucket
/// before it treats it as another key's.
const CLAIM_WAITS: u32 = 64;

struct Geometry {
    chunk: u64,
    starts: u64,
    chunks: u32,
}

fn geometry<T: Transport>(d: &Dht<T>) -> Geometry {
    let chunk = u64::from(d.cfg.chunk).min(d.cfg.buckets);
    Geometry {
        chunk,
        starts: d.cfg.buckets - chunk + 1,
        chunks: d.place.candidates(),
    }
}

impl Geometry {
    /// First bucket of chunk `i` of a key whose first candidate is `c0`.
    fn start(&self, c0: u64, i: u32) -> u64 {
        let tri = u64::from(i) * (u64::from(i) + 1) / 2;
        (c0 % self.starts + tri.wrapping_mul(self.chunk) % self.starts) % self.starts
    }
}

/// Fetched chunks of one key: (first bucket, bytes).
type Chunks = Vec<(u64, Vec<u8>)>;

/// A scanned bucket.
enum Seen {
    Empty(u64),
    Claimed,
    Mine {
        bucket: u64,
        value: Vec<u8>,
        ok: bool,
    },
    Other,
}

/// Reads chunks `i` and `i + 1` (when there is one) of every probe.
fn fetch_chunks<T: Transport>(
    d: &Dht<T>,
    g: &Geometry,
    probes: &[Probe<'_>],
) -> Result<Vec<Chunks>> {
    let bl = d.layout.bucket_len;
    let mut plan: Vec<Chunks> = probes
        .iter()
        .map(|p| {
            let c0 = p.home.candidates[0];
            (p.k as u32..(p.k as u32 + 2).min(g.chunks))
                .map(|i| (g.start(c0, i), vec![0u8; g.chunk as usize * bl]))
                .collect()
        })
        .collect();
    let mut ops: Vec<Op> = probes
        .iter()
        .zip(plan.iter_mut())
        .flat_map(|(p, chunks)| {
            chunks.iter_mut().map(move |(start, buf)| Op::Read {
                from: Remote::new(p.home.rank, d.layout.offset(*start)),
                into: buf,
            })
        })
        .collect();
    d.exec(&mut ops)?;
    drop(ops);
    Ok(plan)
}

/// Scans fetched chunks for `key`, in probe order, up to the first decisive
/// bucket.
fn scan<T: Transport>(d: &Dht<T>, chunks: &[(u64, Vec<u8>)], key: &[u8]) -> (Seen, usize) {
    let bl = d.layout.bucket_len;
    let mut scanned = 0;
    for (start, buf) in chunks {
        scanned += 1;
        for j in 0..buf.len() / bl {
            let b = &buf[j * bl..(j + 1) * bl];
            let state = u64::from_le_bytes(b[..8].try_into().unwrap());
            let bucket = start + j as u64;
            match state {
                STATE_EMPTY => return (Seen::Empty(bucket), scanned),
                STATE_CLAIMED => return (Seen::Claimed, scanned),
                STATE_FULL => {
                    let bk = d.layout.decode(&b[8..], state);
                    if bk.key == key {
                        let ok = bk.checksum_ok();
                        return (
                            Seen::Mine {
                                bucket,
                                value: bk.value.to_vec(),
                                ok,
                            },
                            scanned,
                        );
                    }
                }
                _ => {}
            }
        }
    }
    (Seen::Other, scanned)
}

pub(crate) fn read_many<T: Transport>(d: &Dht<T>, keys: &[&[u8]]) -> Result<Vec<Read>> {
    let g = geometry(d);
    let mut out = vec![None; keys.len()];
    let mut pending: Vec<Probe> = probes(d, keys.iter().copied());
    let mut round = 0;
    while !pending.is_empty() {
        let fetched = fetch_chunks(d, &g, &pending)?;
        let mut next = Vec::new();
        let mut waiting = false;
        for (mut p, chunks) in pending.into_iter().zip(fetched) {
            let (seen, scanned) = scan(d, &chunks, p.key);
            match seen {
                Seen::Empty(_) => out[p.idx] = Some(Read::Miss),
                Seen::Mine {
                    value, ok: true, ..
                } => out[p.idx] = Some(Read::Hit(value)),
                Seen::Mine { ok: false, .. } if p.retries < d.cfg.checksum_retries => {
                    p.retries += 1;
                    d.count(|s| s.checksum_retries += 1);
                    next.push(p);
                }
                Seen::Mine { .. } => out[p.idx] = Some(Read::Corrupt),
                Seen::Claimed if p.retries < CLAIM_WAITS => {
                    // Being written: perhaps our key; look again.
                    p.retries += 1;
                    waiting = true;
                    next.push(p);
                }
                Seen::Claimed | Seen::Other => {
                    p.k += scanned.max(1);
                    p.retries = 0;
                    if p.k >= g.chunks as usize {
                        out[p.idx] = Some(Read::Miss);
                    } else {
                        next.push(p);
                    }
                }
            }
        }
        if waiting {
            backoff(round);
            round += 1;
        }
        pending = next;
    }
    Ok(collect(out))
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Mode {
    /// Insert or update; evict the last probed bucket when all are full.
    Put,
    /// Return the value if present; insert if absent; report full.
    FindOrPut,
}

/// The common engine of `write_many` and `find_or_put_many`.
fn put_many<T: Transport>(
    d: &Dht<T>,
    items: &[(&[u8], &[u8])],
    mode: Mode,
) -> Result<Vec<FindOrPutOrWrite>> {
    let g = geometry(d);
    let mut out: Vec<Option<FindOrPutOrWrite>> = vec![None; items.len()];
    let mut pending: Vec<Probe> = probes(d, items.iter().map(|(k, _)| *k));
    let mut round = 0;
    while !pending.is_empty() {
        let fetched = fetch_chunks(d, &g, &pending)?;
        let mut next = Vec::new();
        let mut claims: Vec<(Probe, u64)> = Vec::new();
        let mut updates: Vec<(usize, u64, usize)> = Vec::new();
        let mut waiting = false;
        for (mut p, chunks) in pending.into_iter().zip(fetched) {
            let last_bucket = chunks.last().map(|(s, _)| s + g.chunk - 1);
            let (seen, scanned) = scan(d, &chunks, p.key);
            match seen {
                Seen::Mine { bucket, value, .. } => match mode {
                    Mode::FindOrPut => {
                        out[p.idx] = Some(FindOrPutOrWrite::F(FindOrPut::Found(value)))
                    }
                    Mode::Put => {
                        updates.push((p.home.rank, bucket, p.idx));
                        out[p.idx] = Some(FindOrPutOrWrite::W(Write::Updated));
                    }
                },
                Seen::Empty(bucket) => claims.push((p, bucket)),
                Seen::Claimed if p.retries < CLAIM_WAITS => {
                    p.retries += 1;
                    waiting = true;
                    next.push(p);
                }
                Seen::Claimed | Seen::Other => {
                    p.k += scanned.max(1);
                    p.retries = 0;
                    if p.k < g.chunks as usize {
                        next.push(p);
                    } else if mode == Mode::FindOrPut {
                        out[p.idx] = Some(FindOrPutOrWrite::F(FindOrPut::Full));
                    } else {
                        // Every chunk full: overwrite the last bucket probed.
                        let b = last_bucket.expect("at least one chunk");
                        updates.push((p.home.rank, b, p.idx));
                        out[p.idx] = Some(FindOrPutOrWrite::W(Write::Evicted));
                    }
                }
            }
        }
        // Claim empty buckets: one compare-and-swap each.
        let mut olds = vec![0u64; claims.len()];
        let mut ops: Vec<Op> = claims
            .iter()
            .zip(olds.iter_mut())
            .map(|((p, b), old)| Op::CompareAndSwap {
                at: word_at(d, p.home.rank, *b),
                expected: STATE_EMPTY,
                new: STATE_CLAIMED,
                old,
            })
            .collect();
        d.exec(&mut ops)?;
        drop(ops);
        let mut won: Vec<(usize, u64, usize)> = Vec::new();
        for ((p, b), old) in claims.into_iter().zip(olds) {
            if old == STATE_EMPTY {
                won.push((p.home.rank, b, p.idx));
                out[p.idx] = Some(match mode {
                    Mode::Put => FindOrPutOrWrite::W(Write::Inserted),
                    Mode::FindOrPut => FindOrPutOrWrite::F(FindOrPut::Inserted),
                });
            } else {
                // Someone else claimed it first: look at this chunk again.
                next.push(p);
            }
        }
        // Fill claimed and updated buckets, then publish the claims: the
        // state turns full only after the data is complete (two batches).
        let encs: Vec<(Remote, Vec<u8>)> = won
            .iter()
            .chain(updates.iter())
            .map(|&(r, b, i)| (data_at(d, r, b), encoded(d, items[i].0, items[i].1)))
            .collect();
        store(d, &encs)?;
        let mut olds = vec![0u64; won.len()];
        let mut ops: Vec<Op> = won
            .iter()
            .zip(olds.iter_mut())
            .map(|(&(r, b, _), old)| Op::Swap {
                at: word_at(d, r, b),
                new: STATE_FULL,
                old,
            })
            .collect();
        d.exec(&mut ops)?;
        if waiting {
            backoff(round);
            round += 1;
        }
        pending = next;
    }
    Ok(collect(out))
}

#[derive(Clone, Debug)]
enum FindOrPutOrWrite {
    F(FindOrPut),
    W(Write),
}

pub(crate) fn write_many<T: Transport>(d: &Dht<T>, items: &[(&[u8], &[u8])]) -> Result<Vec<Write>> {
    Ok(put_many(d, items, Mode::Put)?
        .into_iter()
        .map(|o| match o {
            FindOrPutOrWrite::W(w) => w,
            FindOrPutOrWrite::F(_) => unreachable!("put mode"),
        })
        .collect())
}

pub(crate) fn find_or_put_many<T: Transport>(
    d: &Dht<T>,
    items: &[(&[u8], &[u8])],
) -> Result<Vec<FindOrPut>> {
    Ok(put_many(d, items, Mode::FindOrPut)?
        .into_iter()
        .map(|o| match o {
            FindOrPutOrWrite::F(f) => f,
            FindOrPutOrWrite::W(_) => unreachable!("find-or-put mode"),
        })
        .collect())
}
