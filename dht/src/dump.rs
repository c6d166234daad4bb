//! Dump a table to files and restore it, also into a table of another size,
//! rank count or variant: the resize-at-checkpoint that seed 000 names as
//! future work.
//!
//! Each rank writes the valid entries of its own region to its own shard,
//! `<prefix>.rank<r>`: a header (magic, key and value lengths, entry count)
//! and then key and value bytes. Restoring, shard i is read by rank
//! i mod ranks and its entries are written through the table, so they land
//! wherever the new placement puts them. Both are collective, and the table
//! must be quiescent (no concurrent writes) while dumping. Restoring into a
//! lock-free table, ranks take turns, so that no insert is lost to a race.

use std::io::{BufReader, BufWriter, Read as _, Write as _};
use std::path::{Path, PathBuf};

use fabkit_fabric::bootstrap::Bootstrap;

use crate::layout::{holds_record, Variant};
use crate::outcome::{Error, Result};
use crate::table::Dht;
use crate::transport::{Op, Remote, Transport};

const MAGIC: &[u8; 8] = b"FKDHT\0\0\x01";
/// Bytes of own region read per remote operation while dumping.
const SCAN: usize = 1 << 16;

fn shard(prefix: &Path, rank: usize) -> PathBuf {
    let mut p = prefix.as_os_str().to_owned();
    p.push(format!(".rank{rank}"));
    PathBuf::from(p)
}

fn io(what: String) -> impl FnOnce(std::io::Error) -> Error {
    move |e| Error::Config(format!("{what}: {e}"))
}

impl<T: Transport> Dht<T> {
    /// Writes this rank's valid entries to `<prefix>.rank<r>`; returns how
    /// many. Collective (every rank dumps its own region).
    pub fn dump(&self, prefix: &Path, boot: &dyn Bootstrap) -> Result<u64> {
        boot.barrier().map_err(Error::Transport)?;
        let me = self.t.rank();
        let path = shard(prefix, me);
        let file =
            std::fs::File::create(&path).map_err(io(format!("creating {}", path.display())))?;
        let mut out = BufWriter::new(file);
        let l = self.cfg.layout();
        let mut entries: Vec<u8> = Vec::new();
        let mut count = 0u64;
        let per = (SCAN / l.bucket_len).max(1) as u64;
        let mut first = 0u64;
        while first < self.cfg.buckets {
            let n = per.min(self.cfg.buckets - first);
            let mut buf = vec![0u8; n as usize * l.bucket_len];
            self.exec(&mut [Op::Read {
                from: Remote::new(me, l.offset(first)),
                into: &mut buf,
            }])?;
            for b in buf.chunks(l.bucket_len) {
                let (state, data) = match l.variant {
                    Variant::Chunked => (u64::from_le_bytes(b[..8].try_into().unwrap()), &b[8..]),
                    Variant::Fine => (0, &b[8..8 + l.data_len()]),
                    _ => (0, b),
                };
                let bk = l.decode(data, state);
                // A lock-free bucket marked invalid whose checksum passes
                // was rewritten whole since (or after) it was marked: kept.
                let valid = bk.occupied()
                    && bk.checksum_ok()
                    && (l.variant != Variant::Chunked || holds_record(state));
                if valid {
                    entries.extend_from_slice(bk.key);
                    entries.extend_from_slice(bk.value);
                    count += 1;
                }
            }
            first += n;
        }
        let w = |out: &mut BufWriter<std::fs::File>, b: &[u8]| {
            out.write_all(b)
                .map_err(io(format!("writing {}", path.display())))
        };
        w(&mut out, MAGIC)?;
        for x in [self.cfg.key_len as u64, self.cfg.value_len as u64, count] {
            w(&mut out, &x.to_le_bytes())?;
        }
        w(&mut out, &entries)?;
        out.flush()
            .map_err(io(format!("writing {}", path.display())))?;
        boot.barrier().map_err(Error::Transport)?;
        Ok(count)
    }

    /// Reads the shards of a dump (`<prefix>.rank0` .. `.rank<shards-1>`)
    /// into this table, whatever its size, rank count or variant; returns how
    /// many entries this rank wrote. Collective. Keys and values must have
    /// this table's lengths.
    pub fn restore(
        &self,
        prefix: &Path,
        shards: usize,
        boot: &dyn Bootstrap,
        batch: usize,
    ) -> Result<u64> {
        boot.barrier().map_err(Error::Transport)?;
        let (me, ranks) = (self.t.rank(), self.t.ranks());
        // Lock-free writers racing for one empty bucket can lose an insert;
        // a restore must not, so into a lock-free table ranks take turns.
        // The other variants claim or lock buckets and restore in parallel.
        let turns = if self.cfg.variant == Variant::Lockfree {
            ranks
        } else {
            1
        };
        let mut written = 0;
        for turn in 0..turns {
            if turns > 1 && turn != me {
                boot.barrier().map_err(Error::Transport)?;
                continue;
            }
            written += self.restore_shards(prefix, shards, batch)?;
            if turns > 1 {
                boot.barrier().map_err(Error::Transport)?;
            }
        }
        boot.barrier().map_err(Error::Transport)?;
        Ok(written)
    }

    fn restore_shards(&self, prefix: &Path, shards: usize, batch: usize) -> Result<u64> {
        let (me, ranks) = (self.t.rank(), self.t.ranks());
        let mut written = 0;
        for s in (me..shards).step_by(ranks) {
            let path = shard(prefix, s);
            let file = std::fs::File::open(&path).map_err(io(format!(
                "opening {} (shard {s} of {shards}; is the prefix right?)",
                path.display()
            )))?;
            let mut r = BufReader::new(file);
            let mut head = [0u8; 32];
            r.read_exact(&mut head)
                .map_err(io(format!("reading {}", path.display())))?;
            if &head[..8] != MAGIC {
                return Err(Error::Config(format!(
                    "{} is not a fabkit DHT dump",
                    path.display()
                )));
            }
            let word =
                |i: usize| u64::from_le_bytes(head[8 + 8 * i..16 + 8 * i].try_into().unwrap());
            let (klen, vlen, count) = (word(0) as usize, word(1) as usize, word(2));
            if klen != self.cfg.key_len || vlen != self.cfg.value_len {
                return Err(Error::Config(format!(
                    "{} holds {klen} B keys and {vlen} B values; this table takes {} B and {} B",
                    path.display(),
                    self.cfg.key_len,
                    self.cfg.value_len
                )));
            }
            let rec = klen + vlen;
            let mut left = count;
            let mut buf = vec![0u8; rec * batch.max(1)];
            while left > 0 {
                let n = left.min(batch.max(1) as u64) as usize;
                r.read_exact(&mut buf[..n * rec])
                    .map_err(io(format!("{} ends early", path.display())))?;
                let items: Vec<(&[u8], &[u8])> = buf[..n * rec]
                    .chunks(rec)
                    .map(|e| (&e[..klen], &e[klen..]))
                    .collect();
                self.write_many(&items)?;
                written += n as u64;
                left -= n as u64;
            }
        }
        Ok(written)
    }
}
