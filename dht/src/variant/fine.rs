//! Fine-grained locking (seed 000, 4.1): an 8-byte lock word per bucket.
//! A writer compare-and-swaps 0 to 0x10000000; a reader fetch-adds 1 and,
//! if the old value was at least 0x10000000 (a writer holds it), subtracts
//! it again and retries. Release subtracts what was added. A round is: lock
//! every key's current bucket (one batch), read the locked ones (and give
//! back failed read locks), write where a writer takes the bucket, unlock.

use super::{
    add_to_all, backoff, collect, data_at, encoded, probes, store, take, word_at, Probe, EXCLUSIVE,
};
use crate::table::{Dht, Read, Result, Write};
use crate::transport::{Op, Remote, Transport};

fn word<T: Transport>(d: &Dht<T>, p: &Probe<'_>) -> Remote {
    let (r, b) = p.bucket();
    word_at(d, r, b)
}

pub(crate) fn read_many<T: Transport>(d: &Dht<T>, keys: &[&[u8]]) -> Result<Vec<Read>> {
    let mut out = vec![None; keys.len()];
    let mut pending: Vec<Probe> = probes(d, keys.iter().copied());
    let mut round = 0;
    while !pending.is_empty() {
        let mut olds = vec![0u64; pending.len()];
        let mut ops: Vec<Op> = pending
            .iter()
            .zip(olds.iter_mut())
            .map(|(p, old)| Op::FetchAdd {
                at: word(d, p),
                delta: 1,
                old,
            })
            .collect();
        d.exec(&mut ops)?;
        drop(ops);
        let got: Vec<bool> = olds.iter().map(|&o| o < EXCLUSIVE).collect();
        // Read what we hold; give back what a writer held.
        let mut bufs = vec![vec![0u8; d.layout.data_len()]; pending.len()];
        let mut junk = vec![0u64; pending.len()];
        let mut ops = Vec::new();
        for ((p, buf), (&g, j)) in pending
            .iter()
            .zip(bufs.iter_mut())
            .zip(got.iter().zip(junk.iter_mut()))
        {
            let (r, b) = p.bucket();
            if g {
                ops.push(Op::Read {
                    from: data_at(d, r, b),
                    into: buf,
                });
            } else {
                ops.push(Op::FetchAdd {
                    at: word(d, p),
                    delta: 1u64.wrapping_neg(),
                    old: j,
                });
            }
        }
        d.exec(&mut ops)?;
        drop(ops);
        let held: Vec<Remote> = pending
            .iter()
            .zip(&got)
            .filter(|(_, g)| **g)
            .map(|(p, _)| word(d, p))
            .collect();
        add_to_all(d, &held, 1u64.wrapping_neg())?;
        let mut next = Vec::new();
        let mut progress = false;
        for ((mut p, buf), g) in pending.into_iter().zip(bufs).zip(got) {
            if !g {
                d.count(|s| s.lock_retries += 1);
                next.push(p);
                continue;
            }
            progress = true;
            let b = d.layout.decode(&buf, 0);
            if !b.occupied() {
                out[p.idx] = Some(Read::Miss);
            } else if b.key == p.key {
                out[p.idx] = Some(Read::Hit(b.value.to_vec()));
            } else if p.last() {
                out[p.idx] = Some(Read::Miss);
            } else {
                p.k += 1;
                next.push(p);
            }
        }
        if !progress {
            backoff(round);
            round += 1;
        }
        pending = next;
    }
    Ok(collect(out))
}

pub(crate) fn write_many<T: Transport>(d: &Dht<T>, items: &[(&[u8], &[u8])]) -> Result<Vec<Write>> {
    let mut out = vec![None; items.len()];
    let mut pending: Vec<Probe> = probes(d, items.iter().map(|(k, _)| *k));
    let mut round = 0;
    while !pending.is_empty() {
        let mut olds = vec![0u64; pending.len()];
        let mut ops: Vec<Op> = pending
            .iter()
            .zip(olds.iter_mut())
            .map(|(p, old)| Op::CompareAndSwap {
                at: word(d, p),
                expected: 0,
                new: EXCLUSIVE,
                old,
            })
            .collect();
        d.exec(&mut ops)?;
        drop(ops);
        let got: Vec<bool> = olds.iter().map(|&o| o == 0).collect();
        let mut bufs = vec![vec![0u8; d.layout.data_len()]; pending.len()];
        let mut ops: Vec<Op> = pending
            .iter()
            .zip(bufs.iter_mut())
            .zip(&got)
            .filter(|(_, g)| **g)
            .map(|((p, into), _)| {
                let (r, b) = p.bucket();
                Op::Read {
                    from: data_at(d, r, b),
                    into,
                }
            })
            .collect();
        d.exec(&mut ops)?;
        drop(ops);
        // Decide, write, unlock.
        let mut writes: Vec<(Remote, Vec<u8>)> = Vec::new();
        let mut next = Vec::new();
        let mut locked = Vec::new();
        for ((mut p, buf), g) in pending.into_iter().zip(bufs).zip(got) {
            if !g {
                d.count(|s| s.lock_retries += 1);
                next.push(p);
                continue;
            }
            locked.push(word(d, &p));
            let b = d.layout.decode(&buf, 0);
            match take(b.occupied(), false, b.key == p.key, p.last()) {
                Some(w) => {
                    let (r, bk) = p.bucket();
                    writes.push((data_at(d, r, bk), encoded(d, p.key, items[p.idx].1)));
                    out[p.idx] = Some(w);
                }
                None => {
                    p.k += 1;
                    next.push(p);
                }
            }
        }
        store(d, &writes)?;
        // Unlock only after the writes completed (a separate batch).
        add_to_all(d, &locked, EXCLUSIVE.wrapping_neg())?;
        if locked.is_empty() {
            backoff(round);
            round += 1;
        }
        pending = next;
    }
    Ok(collect(out))
}
