//! Coarse-grained locking (seed 000, 3.1): a readers/writer lock on a rank's
//! whole region for each operation. Natively the lock is a word at the start
//! of the region, driven with atomics the way Open MPI's passive target
//! does: a writer compare-and-swaps 0 to 0x10000000; a reader fetch-adds 1
//! and backs off if the old value was at least 0x10000000.

use std::collections::BTreeMap;

use super::{backoff, collect, probe_read, probe_write, Probe, EXCLUSIVE};
use crate::table::{Dht, Read, Result, Write};
use crate::transport::{Op, Remote, Transport};

/// Takes the region lock; returns whether the transport's own mechanism
/// (MPI_Win_lock) took it, which `unlock` must then release.
fn lock<T: Transport>(d: &Dht<T>, rank: usize, exclusive: bool) -> Result<bool> {
    // MPI: MPI_Win_lock on the target's window, as the MPI-DHT does.
    if d.t.lock_region(rank, exclusive)? {
        d.count(|s| s.remote_ops += 1);
        return Ok(true);
    }
    let word = Remote::new(rank, 0);
    let mut attempt = 0;
    loop {
        let mut old = 0;
        if exclusive {
            d.exec(&mut [Op::CompareAndSwap {
                at: word,
                expected: 0,
                new: EXCLUSIVE,
                old: &mut old,
            }])?;
            if old == 0 {
                return Ok(false);
            }
        } else {
            d.exec(&mut [Op::FetchAdd {
                at: word,
                delta: 1,
                old: &mut old,
            }])?;
            if old < EXCLUSIVE {
                return Ok(false);
            }
            // A writer holds it: take our interest back.
            d.exec(&mut [Op::FetchAdd {
                at: word,
                delta: 1u64.wrapping_neg(),
                old: &mut old,
            }])?;
        }
        d.count(|s| s.lock_retries += 1);
        backoff(attempt);
        attempt += 1;
    }
}

fn unlock<T: Transport>(d: &Dht<T>, rank: usize, exclusive: bool, native: bool) -> Result<()> {
    if native {
        d.count(|s| s.remote_ops += 1);
        return d.t.unlock_region(rank).map_err(Into::into);
    }
    let mut old = 0;
    let delta = if exclusive { EXCLUSIVE } else { 1 };
    d.exec(&mut [Op::FetchAdd {
        at: Remote::new(rank, 0),
        delta: delta.wrapping_neg(),
        old: &mut old,
    }])
}

/// Keys grouped by the rank that holds them, so each region is locked once
/// per batch rather than once per key.
fn by_rank<'k, T: Transport>(
    d: &Dht<T>,
    keys: impl Iterator<Item = (usize, &'k [u8])>,
) -> BTreeMap<usize, Vec<Probe<'k>>> {
    let mut m: BTreeMap<usize, Vec<Probe<'k>>> = BTreeMap::new();
    for (i, k) in keys {
        let p = Probe::new(d, i, k);
        m.entry(p.home.rank).or_default().push(p);
    }
    m
}

pub(crate) fn read_many<T: Transport>(d: &Dht<T>, keys: &[&[u8]]) -> Result<Vec<Read>> {
    let mut out = vec![None; keys.len()];
    for (rank, probes) in by_rank(d, keys.iter().copied().enumerate()) {
        let native = lock(d, rank, false)?;
        let r = probe_read(d, probes, &mut out);
        unlock(d, rank, false, native)?;
        r?;
    }
    Ok(collect(out))
}

pub(crate) fn write_many<T: Transport>(d: &Dht<T>, items: &[(&[u8], &[u8])]) -> Result<Vec<Write>> {
    let mut out = vec![None; items.len()];
    let values: Vec<&[u8]> = items.iter().map(|(_, v)| *v).collect();
    for (rank, probes) in by_rank(d, items.iter().map(|(k, _)| *k).enumerate()) {
        let native = lock(d, rank, true)?;
        let r = probe_write(d, probes, &values, &mut out);
        unlock(d, rank, true, native)?;
        r?;
    }
    Ok(collect(out))
}
