//! A shard file: its header, its records' checksums, and reading it back
//! record batch by record batch, each checked before it is handed out.

use std::fs::File;
use std::io::{BufReader, Read as _};
use std::os::unix::fs::MetadataExt as _;
use std::path::{Path, PathBuf};

use super::files::{io, shard};
use super::{at, FORMAT_VERSION, HEADER_LEN, MAGIC, OLDEST_READ, RECORD_CRC};
use crate::layout::Variant;
use crate::outcome::{Error, Result};

/// A shard's header.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Header {
    pub(super) variant: Variant,
    pub(super) key_len: u64,
    pub(super) value_len: u64,
    pub(super) records: u64,
    pub(super) ranks: u64,
    pub(super) shard: u64,
    pub(super) buckets: u64,
    pub(super) dump_id: u64,
}

pub(super) fn le64(b: &[u8], at: u64) -> u64 {
    let at = at as usize;
    let mut w = [0u8; 8];
    w.copy_from_slice(&b[at..at + 8]);
    u64::from_le_bytes(w)
}

fn le32(b: &[u8], at: u64) -> u32 {
    let at = at as usize;
    u32::from_le_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
}

/// Words as little-endian bytes, for agreement payloads.
pub(super) fn words(xs: &[u64]) -> Vec<u8> {
    xs.iter().flat_map(|x| x.to_le_bytes()).collect()
}

impl Header {
    pub(super) fn encode(&self) -> [u8; HEADER_LEN] {
        let mut h = [0u8; HEADER_LEN];
        h[..8].copy_from_slice(MAGIC);
        h[8..12].copy_from_slice(&FORMAT_VERSION.to_le_bytes());
        h[at::VARIANT as usize] = self.variant.code();
        for (at, x) in [
            (at::KEY_LEN, self.key_len),
            (at::VALUE_LEN, self.value_len),
            (at::RECORDS, self.records),
            (at::RANKS, self.ranks),
            (at::SHARD, self.shard),
            (at::BUCKETS, self.buckets),
            (at::DUMP_ID, self.dump_id),
        ] {
            h[at as usize..at as usize + 8].copy_from_slice(&x.to_le_bytes());
        }
        let c = at::CRC as usize;
        let crc = crc32fast::hash(&h[..c]);
        h[c..c + 4].copy_from_slice(&crc.to_le_bytes());
        h
    }

    /// Decodes and checks a header read from `path`: its magic, checksum,
    /// version, zero bytes and variant, in that order (a damaged byte is
    /// reported as damage, whichever field it is in).
    pub(super) fn decode(path: &Path, h: &[u8; HEADER_LEN]) -> Result<Header> {
        let bad = |offset: u64, what: String| Error::Shard {
            path: path.to_path_buf(),
            offset,
            what,
        };
        if &h[..8] != MAGIC {
            return Err(bad(
                0,
                "not a fabkit DHT dump shard (its magic is not FKDHTDMP), or its first bytes \
                 are damaged"
                    .into(),
            ));
        }
        let version = le32(h, at::VERSION);
        let c = at::CRC as usize;
        let stored = le32(h, at::CRC);
        let crc = crc32fast::hash(&h[..c]);
        if stored != crc {
            return Err(bad(
                at::CRC,
                format!(
                    "the header fails its checksum (stored {stored:#010x}, computed {crc:#010x}): \
                     bytes 0..{c} are damaged, or the shard was never finished"
                ),
            ));
        }
        if !(OLDEST_READ..=FORMAT_VERSION).contains(&version) {
            return Err(bad(
                at::VERSION,
                format!(
                    "format version {version}; this build reads versions {OLDEST_READ} to \
                     {FORMAT_VERSION}: restore it with the fabkit that wrote it"
                ),
            ));
        }
        for range in [at::PAD..at::KEY_LEN, at::RESERVED..at::CRC] {
            if let Some(i) = range.clone().find(|&i| h[i as usize] != 0) {
                return Err(bad(
                    i,
                    format!(
                        "bytes {}..{} must be zero in version {FORMAT_VERSION}; byte {i} is {:#04x}",
                        range.start, range.end, h[i as usize]
                    ),
                ));
            }
        }
        let code = h[at::VARIANT as usize];
        let variant = Variant::from_code(code).ok_or_else(|| {
            bad(
                at::VARIANT,
                format!("variant code {code} is none this build knows"),
            )
        })?;
        Ok(Header {
            variant,
            key_len: le64(h, at::KEY_LEN),
            value_len: le64(h, at::VALUE_LEN),
            records: le64(h, at::RECORDS),
            ranks: le64(h, at::RANKS),
            shard: le64(h, at::SHARD),
            buckets: le64(h, at::BUCKETS),
            dump_id: le64(h, at::DUMP_ID),
        })
    }
}

/// The checksum of record `index` of shard `shard` of dump `dump_id`.
pub(super) fn record_crc(dump_id: u64, shard: u64, index: u64, key: &[u8], value: &[u8]) -> u32 {
    let mut h = crc32fast::Hasher::new();
    h.update(&dump_id.to_le_bytes());
    h.update(&shard.to_le_bytes());
    h.update(&index.to_le_bytes());
    h.update(key);
    h.update(value);
    h.finalize()
}

/// What identifies a file's contents as checked: if any of these changed,
/// so may have the bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Stamp {
    dev: u64,
    ino: u64,
    pub(super) len: u64,
    mtime: (i64, i64),
}

impl std::fmt::Display for Stamp {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} B, inode {}, modified {}.{:09}",
            self.len, self.ino, self.mtime.0, self.mtime.1
        )
    }
}

impl Stamp {
    pub(super) fn of(m: &std::fs::Metadata) -> Self {
        Stamp {
            dev: m.dev(),
            ino: m.ino(),
            len: m.len(),
            mtime: (m.mtime(), m.mtime_nsec()),
        }
    }
}

/// What a file that is not a regular one is, in words.
fn kind_of(t: std::fs::FileType) -> &'static str {
    use std::os::unix::fs::FileTypeExt;
    if t.is_dir() {
        "a directory"
    } else if t.is_symlink() {
        "a symbolic link"
    } else if t.is_fifo() {
        "a FIFO"
    } else if t.is_socket() {
        "a socket"
    } else if t.is_block_device() || t.is_char_device() {
        "a device"
    } else {
        "not a file"
    }
}

/// Takes a batch of checked records (key, value) of a shard.
type Sink<'a> = dyn FnMut(&[(&[u8], &[u8])]) -> Result<()> + 'a;

/// A shard being read: its header checked, its records handed out in
/// batches as each batch passes its checksums.
pub(super) struct ShardReader {
    path: PathBuf,
    r: BufReader<File>,
    pub(super) h: Header,
    pub(super) stamp: Stamp,
    /// The next record's index.
    pub(super) next: u64,
    pub(super) key_len: usize,
    pub(super) value_len: usize,
    buf: Vec<u8>,
}

impl ShardReader {
    /// Opens shard `s` of `shards` and checks its header and length
    /// against a table of `key_len` and `value_len` (and, if known, against
    /// dump `dump_id` and the `stamp` it had when it was checked).
    pub(super) fn open(
        prefix: &Path,
        s: usize,
        shards: usize,
        (key_len, value_len): (usize, usize),
        checked: Option<(u64, Stamp)>,
    ) -> Result<Self> {
        let path = shard(prefix, s);
        let bad = |offset: u64, what: String| Error::Shard {
            path: path.clone(),
            offset,
            what,
        };
        // Asked before opening: opening a FIFO or a device could block.
        match std::fs::metadata(&path) {
            Ok(m) if !m.is_file() => {
                return Err(bad(
                    0,
                    format!(
                        "is not a regular file ({}): a shard is a file a dump wrote",
                        kind_of(m.file_type())
                    ),
                ))
            }
            Ok(_) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                return Err(bad(
                    0,
                    format!(
                        "missing: shard {s} of {shards} (is the prefix right, and were all \
                         shards copied?)"
                    ),
                ))
            }
            Err(e) => return Err(io("reading", &path)(e)),
        }
        let file = File::open(&path).map_err(io("opening", &path))?;
        let meta = file.metadata().map_err(io("reading", &path))?;
        let stamp = Stamp::of(&meta);
        if !meta.is_file() {
            return Err(bad(0, "was replaced by something not a file".into()));
        }
        if let Some((_, was)) = checked.filter(|(_, was)| *was != stamp) {
            return Err(bad(
                0,
                format!(
                    "changed since it was checked (was {was}, now {stamp}): restore from a \
                     dump nothing writes to"
                ),
            ));
        }
        let len = stamp.len;
        if len < HEADER_LEN as u64 {
            return Err(bad(
                len,
                format!("ends after {len} B, inside its {HEADER_LEN} B header: truncated"),
            ));
        }
        let mut r = BufReader::new(file);
        let mut head = [0u8; HEADER_LEN];
        r.read_exact(&mut head).map_err(io("reading", &path))?;
        let h = Header::decode(&path, &head)?;
        let (kl, vl) = (key_len as u64, value_len as u64);
        if h.key_len != kl || h.value_len != vl {
            let at = if h.key_len != kl {
                at::KEY_LEN
            } else {
                at::VALUE_LEN
            };
            return Err(bad(
                at,
                format!(
                    "holds {} B keys and {} B values; this table takes {kl} B and {vl} B: \
                     restore into a table created with the dump's lengths",
                    h.key_len, h.value_len
                ),
            ));
        }
        if h.ranks != shards as u64 {
            return Err(bad(
                at::RANKS,
                format!(
                    "is of a dump by {} ranks, so of {} shards, but {shards} were asked for: \
                     give shards = {}",
                    h.ranks, h.ranks, h.ranks
                ),
            ));
        }
        if h.shard != s as u64 {
            return Err(bad(
                at::SHARD,
                format!(
                    "is shard {} of its dump, but its name says shard {s}: renamed, or copied \
                     over another shard",
                    h.shard
                ),
            ));
        }
        if let Some((id, _)) = checked.filter(|(id, _)| *id != h.dump_id) {
            return Err(bad(
                at::DUMP_ID,
                format!(
                    "is of dump {:#x}, not {id:#x}: replaced since it was checked",
                    h.dump_id
                ),
            ));
        }
        let rec = kl + vl + RECORD_CRC;
        let Some(end) = h
            .records
            .checked_mul(rec)
            .and_then(|b| b.checked_add(HEADER_LEN as u64))
        else {
            return Err(bad(
                at::RECORDS,
                format!(
                    "claims {} records of {rec} B, more than any file holds",
                    h.records
                ),
            ));
        };
        if len < end {
            return Err(bad(
                len,
                format!(
                    "ends after {len} B, but its header promises {} records of {rec} B ({end} B): \
                     truncated, or its record count raised",
                    h.records
                ),
            ));
        }
        if len > end {
            return Err(bad(
                end,
                format!(
                    "{} B follow the last of its {} records: its record count was lowered, or \
                     data appended",
                    len - end,
                    h.records
                ),
            ));
        }
        Ok(ShardReader {
            path,
            r,
            h,
            stamp,
            next: 0,
            key_len,
            value_len,
            buf: Vec::new(),
        })
    }

    pub(super) fn done(&self) -> bool {
        self.next >= self.h.records
    }

    /// Reads and checks up to `max` more records; hands them to `sink`.
    /// Returns how many.
    pub(super) fn read(&mut self, max: usize, sink: &mut Sink<'_>) -> Result<u64> {
        let (kl, vl) = (self.key_len, self.value_len);
        let rec = kl + vl + RECORD_CRC as usize;
        // At most 16 MiB of records in memory, whatever `max` says.
        let per = max.min((16 << 20) / rec).max(1);
        let n = (self.h.records - self.next).min(per as u64) as usize;
        let offset = HEADER_LEN as u64 + self.next * rec as u64;
        self.buf.resize(n * rec, 0);
        let path = &self.path;
        self.r.read_exact(&mut self.buf).map_err(|e| {
            if e.kind() == std::io::ErrorKind::UnexpectedEof {
                Error::Shard {
                    path: path.clone(),
                    offset,
                    what: "ends early: the file shrank while it was read".into(),
                }
            } else {
                io("reading", path)(e)
            }
        })?;
        let mut items = Vec::with_capacity(n);
        for (i, e) in self.buf.chunks_exact(rec).enumerate() {
            let (key, rest) = e.split_at(kl);
            let (value, crc) = rest.split_at(vl);
            let k = self.next + i as u64;
            if le32(crc, 0) != record_crc(self.h.dump_id, self.h.shard, k, key, value) {
                let from = HEADER_LEN as u64 + k * rec as u64;
                return Err(Error::Shard {
                    path: path.clone(),
                    offset: from,
                    what: format!(
                        "record {k} (bytes {from}..{}) fails its checksum: damaged",
                        from + rec as u64
                    ),
                });
            }
            items.push((key, value));
        }
        sink(&items)?;
        self.next += n as u64;
        Ok(n as u64)
    }
}
