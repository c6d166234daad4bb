//! Lock-free (seed 000, 4.2): plain reads and writes; the writer stores a
//! CRC32 of key and value, the reader recomputes it, re-reads on mismatch,
//! and after repeated mismatches marks the bucket invalid so that a later
//! write can reuse it. No atomics: a lock-free read hit on the first
//! candidate is one remote read.

use super::{collect, probe_read, probe_write, probes};
use crate::table::{Dht, Read, Result, Write};
use crate::transport::Transport;

pub(crate) fn read_many<T: Transport>(d: &Dht<T>, keys: &[&[u8]]) -> Result<Vec<Read>> {
    let mut out = vec![None; keys.len()];
    let probes = probes(d, keys.iter().copied());
    probe_read(d, probes, &mut out)?;
    Ok(collect(out))
}

pub(crate) fn write_many<T: Transport>(d: &Dht<T>, items: &[(&[u8], &[u8])]) -> Result<Vec<Write>> {
    let mut out = vec![None; items.len()];
    let values: Vec<&[u8]> = items.iter().map(|(_, v)| *v).collect();
    let probes = probes(d, items.iter().map(|(k, _)| *k));
    probe_write(d, probes, &values, &mut out)?;
    Ok(collect(out))
}
