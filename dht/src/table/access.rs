//! The table's operations: reads, writes, find-or-put and accumulating
//! writes. Each checks the caller's arguments, runs its keys through the
//! driver (`super::drive`), and turns the machines' outcomes into results
//! and counters.

use crate::layout::Variant;
use crate::message::Messenger;
use crate::outcome::{Error, FindOrPut, Found, Read, Result, Write};
use crate::transport::Transport;
use crate::variant::{Mode, Outcome};

use super::Dht;

impl<T: Transport, M: Messenger> Dht<T, M> {
    /// Reads one key.
    pub fn read(&self, key: &[u8]) -> Result<Read> {
        Ok(self.read_many(&[key])?.pop().expect("one outcome per key"))
    }

    /// Writes one key.
    pub fn write(&self, key: &[u8], value: &[u8]) -> Result<Write> {
        Ok(self
            .write_many(&[(key, value)])?
            .pop()
            .expect("one outcome per key"))
    }

    /// Reads many keys with their remote operations overlapped: each round
    /// advances every unresolved key by one step in one batch.
    pub fn read_many(&self, keys: &[&[u8]]) -> Result<Vec<Read>> {
        let mut out = Vec::with_capacity(keys.len());
        self.read_with(keys, |f, v| {
            out.push(match f {
                Found::Hit => Read::Hit(v.to_vec()),
                Found::Miss => Read::Miss,
                Found::Corrupt => Read::Corrupt,
            })
        })?;
        Ok(out)
    }

    /// [`Dht::read_many`] into the caller's buffers, allocating nothing once
    /// the table is warm: key `i`'s value lands in
    /// `values[i * value_len..(i + 1) * value_len]` when `found[i]` is a
    /// hit (the bytes of a miss are left as they were). `values` and `found`
    /// must be exactly as long as `keys` needs.
    pub fn read_into(&self, keys: &[&[u8]], values: &mut [u8], found: &mut [Found]) -> Result<()> {
        let vl = self.cfg.value_len;
        self.check_buffers(keys.len(), values.len(), found.len())?;
        let mut i = 0;
        self.read_with(keys, |f, v| {
            found[i] = f;
            if f == Found::Hit {
                values[i * vl..(i + 1) * vl].copy_from_slice(v);
            }
            i += 1;
        })
    }

    /// Reads `keys` and hands each outcome, in key order, to `each` with
    /// the value found (empty unless a hit); counts them.
    fn read_with(&self, keys: &[&[u8]], mut each: impl FnMut(Found, &[u8])) -> Result<()> {
        for k in keys {
            self.check_key(k)?;
        }
        let vl = self.cfg.value_len;
        let (mut hits, mut misses, mut corrupt) = (0u64, 0u64, 0u64);
        self.with_work(|w| {
            self.run(Mode::Read, keys, &[], w)?;
            for (i, o) in w.out.iter().enumerate() {
                match o {
                    Outcome::Hit => {
                        hits += 1;
                        each(Found::Hit, &w.found[i * vl..(i + 1) * vl]);
                    }
                    Outcome::Corrupt => {
                        corrupt += 1;
                        each(Found::Corrupt, &[]);
                    }
                    _ => {
                        misses += 1;
                        each(Found::Miss, &[]);
                    }
                }
            }
            Ok(())
        })?;
        self.count(|s| {
            s.reads += keys.len() as u64;
            s.hits += hits;
            s.misses += misses;
            s.corrupt += corrupt;
        });
        Ok(())
    }

    /// Refuses caller buffers of other lengths than `keys` keys need.
    fn check_buffers(&self, keys: usize, values: usize, out: usize) -> Result<()> {
        let need = keys.checked_mul(self.cfg.value_len);
        if need != Some(values) || out != keys {
            return Err(Error::Config(format!(
                "buffers for {keys} keys: values of {values} B (need {} B) and {out} outcomes \
                 (need {keys})",
                need.map_or_else(|| "more than usize".into(), |n| n.to_string())
            )));
        }
        Ok(())
    }

    /// Chunked only: returns the key's value if present, else inserts it;
    /// `Full` when every probed chunk is full (nothing is evicted).
    pub fn find_or_put_many(&self, items: &[(&[u8], &[u8])]) -> Result<Vec<FindOrPut>> {
        if self.cfg.variant != Variant::Chunked {
            return Err(Error::Config(format!(
                "find_or_put is the chunked variant's operation; this table is {:?}",
                self.cfg.variant
            )));
        }
        for (k, v) in items {
            self.check_key(k)?;
            self.check_value(v)?;
        }
        let keys: Vec<&[u8]> = items.iter().map(|(k, _)| *k).collect();
        let values: Vec<&[u8]> = items.iter().map(|(_, v)| *v).collect();
        let vl = self.cfg.value_len;
        let out = self.with_work(|w| {
            self.run(Mode::FindOrPut, &keys, &values, w)?;
            Ok(w.out
                .iter()
                .enumerate()
                .map(|(i, o)| match o {
                    Outcome::Found => FindOrPut::Found(w.found[i * vl..(i + 1) * vl].to_vec()),
                    Outcome::Inserted => FindOrPut::Inserted,
                    _ => FindOrPut::Full,
                })
                .collect::<Vec<FindOrPut>>())
        })?;
        self.count(|s| {
            for r in &out {
                match r {
                    FindOrPut::Found(_) => {
                        s.reads += 1;
                        s.hits += 1
                    }
                    FindOrPut::Inserted => {
                        s.writes += 1;
                        s.inserts += 1
                    }
                    FindOrPut::Full => s.writes += 1,
                }
            }
        });
        Ok(out)
    }

    /// Writes many keys with their remote operations overlapped.
    pub fn write_many(&self, items: &[(&[u8], &[u8])]) -> Result<Vec<Write>> {
        let keys: Vec<&[u8]> = items.iter().map(|(k, _)| *k).collect();
        let values: Vec<&[u8]> = items.iter().map(|(_, v)| *v).collect();
        let mut out = vec![Write::Inserted; items.len()];
        self.write_into(&keys, &values, &mut out)?;
        Ok(out)
    }

    /// [`Dht::write_many`] with keys and values in two slices of the same
    /// length and the outcomes into the caller's `out` (as long as `keys`),
    /// allocating nothing once the table is warm.
    pub fn write_into(&self, keys: &[&[u8]], values: &[&[u8]], out: &mut [Write]) -> Result<()> {
        if values.len() != keys.len() || out.len() != keys.len() {
            return Err(Error::Config(format!(
                "{} keys need as many values and outcomes, not {} and {}",
                keys.len(),
                values.len(),
                out.len()
            )));
        }
        for (k, v) in keys.iter().zip(values) {
            self.check_key(k)?;
            self.check_value(v)?;
        }
        self.with_work(|w| {
            self.run(Mode::Write, keys, values, w)?;
            for (o, r) in out.iter_mut().zip(&w.out) {
                *o = r.written();
            }
            Ok(())
        })?;
        self.count_writes(out.iter().copied());
        Ok(())
    }

    /// Counts `stored`, the outcomes of writes that stored.
    fn count_writes(&self, stored: impl Iterator<Item = Write>) {
        self.count(|s| {
            for w in stored {
                s.writes += 1;
                match w {
                    Write::Inserted => s.inserts += 1,
                    Write::Updated => s.updates += 1,
                    Write::Evicted => s.evictions += 1,
                }
            }
        });
    }

    /// Accumulates into `key`'s value: see [`Dht::update_many`].
    pub fn update(&self, key: &[u8], f: impl FnOnce(&mut [u8]) -> bool) -> Result<Write> {
        let mut f = Some(f);
        // Called once (see update_into); a second call would decline.
        let mut once = |_: usize, v: &mut [u8]| f.take().is_some_and(|f| f(v));
        let mut out = [Write::Inserted];
        self.update_into(&[key], &mut once, &mut out)?;
        Ok(out[0])
    }

    /// Writes each key with a value computed from the one it replaces,
    /// while the variant holds the bucket, so no other writer comes in
    /// between (an accumulation: counts, sums, merged records). `f` gets
    /// the key's index in `keys` and its value to update in place: the old
    /// value, or zeros when the key was absent (inserted, or pushing out
    /// another key); it returns false to leave the bucket as it was (the
    /// outcome still says what the write would have been; the counters
    /// count it as no write). It is called once per key, while holds are
    /// taken: keep it short, and do not call the table from it.
    ///
    /// An error before a key's bucket is given back leaves it as it was
    /// (the bucket is put back as read under the hold), so a retry counts
    /// once; an error in giving it back (the release of its lock or claim,
    /// whose retry then releases it) leaves the value stored, and so may a
    /// chunked claim another writer took over ([`Error::Lost`]).
    ///
    /// The variants that hold a bucket while they write offer it (fine,
    /// coarse, chunked); lock-free writers hold nothing, so its tables
    /// refuse it ([`Error::Config`]). A chunked accumulation never takes
    /// a stalled claim over: it fails at its deadline instead.
    pub fn update_many(
        &self,
        keys: &[&[u8]],
        f: &mut dyn FnMut(usize, &mut [u8]) -> bool,
    ) -> Result<Vec<Write>> {
        let mut out = vec![Write::Inserted; keys.len()];
        self.update_into(keys, f, &mut out)?;
        Ok(out)
    }

    /// [`Dht::update_many`] with the outcomes into the caller's `out` (as
    /// long as `keys`), allocating nothing once the table is warm.
    pub fn update_into(
        &self,
        keys: &[&[u8]],
        f: &mut dyn FnMut(usize, &mut [u8]) -> bool,
        out: &mut [Write],
    ) -> Result<()> {
        if self.cfg.variant == Variant::Lockfree {
            return Err(Error::Config(
                "accumulating writes need a variant that holds the bucket while it writes \
                 (fine, coarse or chunked); this table is lock-free"
                    .into(),
            ));
        }
        if out.len() != keys.len() {
            return Err(Error::Config(format!(
                "{} keys need as many outcomes, not {}",
                keys.len(),
                out.len()
            )));
        }
        for k in keys {
            self.check_key(k)?;
        }
        // Counted as they store: a declined key is no write.
        let (mut inserts, mut updates, mut evictions) = (0u64, 0u64, 0u64);
        let mut counting = |i: usize, w: Write, v: &mut [u8]| {
            let keep = f(i, v);
            if keep {
                match w {
                    Write::Inserted => inserts += 1,
                    Write::Updated => updates += 1,
                    Write::Evicted => evictions += 1,
                }
            }
            keep
        };
        self.with_work(|w| {
            self.run_updating(Mode::Write, keys, &[], w, Some(&mut counting))?;
            for (o, r) in out.iter_mut().zip(&w.out) {
                *o = r.written();
            }
            Ok(())
        })?;
        self.count(|s| {
            s.writes += inserts + updates + evictions;
            s.inserts += inserts;
            s.updates += updates;
            s.evictions += evictions;
        });
        Ok(())
    }
}
