//! Bucket bytes <-> [`Bucket`], per variant, and the checksum. Pure: no I/O.
//!
//! | variant | bucket |
//! |---|---|
//! | coarse | meta (1) + key + value, padded to 8; the region starts with an 8-byte lock word |
//! | fine | lock (8) + meta (1) + key + value, padded to 8 |
//! | lockfree | meta (1) + key + value + CRC32C of key and value (4), padded to 8 |
//! | chunked | state (8) + key + value + CRC32C (4), padded to 8 |
//!
//! Every bucket is a whole number of 8-byte words and starts on a word, and
//! so does the part a reader fetches and a writer stores
//! ([`Layout::data_start`], [`Layout::data_len`]): a same-node peer copies
//! it a whole word at a time, with no edge word to merge, and a NIC moves
//! aligned lines. With POET's 80 B keys and 104 B values, a lock-free
//! bucket is 192 B (189 B of content): the size `fabkit perf --sizes 184,192`
//! measures.

use serde::{Deserialize, Serialize};

/// Meta bit: the bucket holds a key.
pub const OCCUPIED: u8 = 1;
/// Meta bit: a reader saw its checksum fail repeatedly; writers may reuse it.
pub const INVALID: u8 = 2;

/// Chunked state word: free.
pub const STATE_EMPTY: u64 = 0;
/// Chunked state word: data complete, version 0. A full word is any even
/// non-zero value whose low byte is 2; its bits 8 to 23 count the
/// bucket's publications, so that a compare-and-swap from a full value
/// seen earlier fails if the bucket was rewritten since (see [`full`]).
pub const STATE_FULL: u64 = 2;

/// Chunked state word bit: a claim (any odd value). A writer, named by the
/// tag in the word's upper bits, is filling the bucket.
pub const CLAIMED: u64 = 1;
/// Chunked state word bit, in a claim: the bucket was full when it was
/// claimed, so its record stays readable while the writer updates it.
pub const CLAIMED_OVER_FULL: u64 = 2;

/// Whether a chunked state word is a claim ([`CLAIMED`]).
pub fn is_claimed(state: u64) -> bool {
    state & CLAIMED != 0
}

/// Whether claim `state` was taken of a full bucket ([`CLAIMED_OVER_FULL`]).
pub fn claimed_over_full(state: u64) -> bool {
    is_claimed(state) && state & CLAIMED_OVER_FULL != 0
}

/// Whether a chunked state word says the data is complete.
pub fn is_full(state: u64) -> bool {
    state & 0xff == STATE_FULL
}

/// The full state word of publication `version` of a bucket.
pub fn full(version: u16) -> u64 {
    u64::from(version) << 8 | STATE_FULL
}

/// A 64-bit fingerprint of bucket bytes: two reads that show the same
/// bytes have the same one.
pub fn fingerprint(bytes: &[u8]) -> u64 {
    crate::placement::hash_key(bytes)
}

/// The publication count of a full state word.
pub fn full_version(state: u64) -> u16 {
    (state >> 8) as u16
}

/// The DHT variants.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Variant {
    /// Readers/writer lock on a rank's whole region per operation.
    Coarse,
    /// A readers/writer lock word per bucket, driven with atomics.
    Fine,
    /// No locks: writers store a CRC, readers verify and retry.
    Lockfree,
    /// Linear probing in chunks, claims by compare-and-swap (Oortwijn).
    Chunked,
}

impl Variant {
    /// The variant's name as the command line, the reports and the C API
    /// write it (its serde name).
    pub fn name(self) -> &'static str {
        match self {
            Variant::Coarse => "coarse",
            Variant::Fine => "fine",
            Variant::Lockfree => "lockfree",
            Variant::Chunked => "chunked",
        }
    }

    /// Whether the variant needs remote atomics.
    pub fn needs_atomics(self) -> bool {
        !matches!(self, Variant::Lockfree)
    }

    /// Stable numeric code (stored in dumps and compared at creation).
    pub fn code(self) -> u8 {
        match self {
            Variant::Coarse => 1,
            Variant::Fine => 2,
            Variant::Lockfree => 3,
            Variant::Chunked => 4,
        }
    }

    /// The variant of a code.
    pub fn from_code(c: u8) -> Option<Variant> {
        [
            Variant::Coarse,
            Variant::Fine,
            Variant::Lockfree,
            Variant::Chunked,
        ]
        .into_iter()
        .find(|v| v.code() == c)
    }
}

/// CRC32C (Castagnoli, the polynomial SSE 4.2 and ARMv8 compute in
/// hardware) of key then value.
pub fn checksum(key: &[u8], value: &[u8]) -> u32 {
    crc32c::crc32c_append(record_checksum(key), value)
}

/// [`checksum`] of a key and value adjacent in memory (as in a bucket):
/// one pass.
pub fn record_checksum(record: &[u8]) -> u32 {
    crc32c::crc32c(record)
}

/// A bucket as read.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Bucket<'a> {
    /// Meta bits (coarse, fine, lockfree); for chunked, derived from the state.
    pub meta: u8,
    /// Chunked state word (0 for other variants).
    pub state: u64,
    /// Key bytes.
    pub key: &'a [u8],
    /// Value bytes.
    pub value: &'a [u8],
    /// Stored checksum (lockfree, chunked).
    pub crc: Option<u32>,
    /// Key and value, adjacent as stored: what the checksum covers.
    pub record: &'a [u8],
}

impl Bucket<'_> {
    /// Holds a key.
    pub fn occupied(&self) -> bool {
        self.meta & OCCUPIED != 0
    }

    /// Marked invalid by a reader.
    pub fn invalid(&self) -> bool {
        self.meta & INVALID != 0
    }

    /// The stored checksum matches key and value (true where there is none).
    pub fn checksum_ok(&self) -> bool {
        self.crc.is_none_or(|c| c == record_checksum(self.record))
    }
}

/// Byte layout of one variant's buckets and region.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Layout {
    /// The variant.
    pub variant: Variant,
    /// Key length.
    pub key_len: usize,
    /// Value length.
    pub value_len: usize,
    /// Bytes per bucket.
    pub bucket_len: usize,
    /// Bytes before the first bucket (coarse: the region lock word).
    pub header_len: usize,
    /// Offset of the lock word (fine) or state word (chunked) in a bucket.
    pub word: Option<usize>,
    /// Offset of the meta byte.
    pub meta: Option<usize>,
    /// Offset of the key.
    pub key: usize,
    /// Offset of the checksum.
    pub crc: Option<usize>,
}

impl Layout {
    /// The layout for `variant` with fixed key and value lengths.
    pub fn new(variant: Variant, key_len: usize, value_len: usize) -> Layout {
        let kv = key_len + value_len;
        let (bucket_len, header_len, word, meta, key, crc) = match variant {
            Variant::Coarse => ((1 + kv).next_multiple_of(8), 8, None, Some(0), 1, None),
            Variant::Fine => ((9 + kv).next_multiple_of(8), 0, Some(0), Some(8), 9, None),
            Variant::Lockfree => (
                (5 + kv).next_multiple_of(8),
                0,
                None,
                Some(0),
                1,
                Some(1 + kv),
            ),
            Variant::Chunked => (
                (12 + kv).next_multiple_of(8),
                0,
                Some(0),
                None,
                8,
                Some(8 + kv),
            ),
        };
        Layout {
            variant,
            key_len,
            value_len,
            bucket_len,
            header_len,
            word,
            meta,
            key,
            crc,
        }
    }

    /// Buckets that fit in a region of `region_len` bytes.
    pub fn buckets_in(&self, region_len: usize) -> u64 {
        (region_len.saturating_sub(self.header_len) / self.bucket_len) as u64
    }

    /// Region bytes for `buckets` buckets, or `None` when that size does
    /// not fit a `usize` (`buckets` comes from anyone's configuration).
    pub fn region_len(&self, buckets: u64) -> Option<usize> {
        usize::try_from(buckets)
            .ok()?
            .checked_mul(self.bucket_len)?
            .checked_add(self.header_len)
    }

    /// Byte offset of bucket `index` in its region.
    pub fn offset(&self, index: u64) -> u64 {
        self.header_len as u64 + index * self.bucket_len as u64
    }

    /// Offset of the part a reader fetches and a writer stores: the lock
    /// (fine) and state (chunked) words are left out, as only atomics touch
    /// them.
    pub fn data_start(&self) -> usize {
        match self.variant {
            Variant::Fine | Variant::Chunked => 8,
            _ => 0,
        }
    }

    /// Length of that part: the rest of the bucket, padding included, so
    /// that it is whole words.
    pub fn data_len(&self) -> usize {
        self.bucket_len - self.data_start()
    }

    /// Encodes an occupied bucket's data part (see [`Layout::data_start`])
    /// into `out` (length [`Layout::data_len`]). For chunked, the part after
    /// the state word: key, value, checksum.
    pub fn encode(&self, key: &[u8], value: &[u8], out: &mut [u8]) {
        debug_assert_eq!(key.len(), self.key_len);
        debug_assert_eq!(value.len(), self.value_len);
        debug_assert_eq!(out.len(), self.data_len());
        let base = self.data_start();
        out.fill(0);
        if let Some(m) = self.meta {
            out[m - base] = OCCUPIED;
        }
        let k = self.key - base;
        let record = &mut out[k..k + self.key_len + self.value_len];
        record[..self.key_len].copy_from_slice(key);
        record[self.key_len..].copy_from_slice(value);
        // One pass over key and value, adjacent in the bucket.
        let crc = record_checksum(record);
        if let Some(c) = self.crc {
            out[c - base..c - base + 4].copy_from_slice(&crc.to_le_bytes());
        }
    }

    /// Decodes a data part as read (length [`Layout::data_len`]). `state` is
    /// the chunked state word, read separately (0 otherwise).
    pub fn decode<'a>(&self, data: &'a [u8], state: u64) -> Bucket<'a> {
        debug_assert_eq!(data.len(), self.data_len());
        let base = self.data_start();
        let meta = match self.meta {
            Some(m) => data[m - base],
            None if is_full(state) => OCCUPIED,
            None => 0,
        };
        let k = self.key - base;
        let record = &data[k..k + self.key_len + self.value_len];
        let (key, value) = record.split_at(self.key_len);
        Bucket {
            meta,
            state,
            key,
            value,
            record,
            crc: self
                .crc
                .map(|c| u32::from_le_bytes(data[c - base..c - base + 4].try_into().unwrap())),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bucket_sizes_match_the_papers() {
        // POET: 80 B key, 104 B value: 185 B and 189 B of content, padded
        // to whole words.
        assert_eq!(Layout::new(Variant::Coarse, 80, 104).bucket_len, 192);
        assert_eq!(Layout::new(Variant::Lockfree, 80, 104).bucket_len, 192);
        // Lock word + meta + 184 B, padded to 8: at most 15 B over coarse.
        let fine = Layout::new(Variant::Fine, 80, 104);
        assert_eq!(fine.bucket_len, 200);
        assert!(fine.bucket_len - 185 <= 15);
        assert_eq!(Layout::new(Variant::Chunked, 80, 104).bucket_len, 200);
        // Every part a peer copies starts on a word and is whole words, at
        // any key and value length (the coarse region's header is a word).
        for v in [
            Variant::Coarse,
            Variant::Fine,
            Variant::Lockfree,
            Variant::Chunked,
        ] {
            for (k, val) in [(4, 4), (1, 1), (80, 104), (24, 9), (7, 13)] {
                let l = Layout::new(v, k, val);
                assert_eq!(l.bucket_len % 8, 0, "{v:?} {k},{val}");
                assert_eq!(l.header_len % 8, 0, "{v:?}");
                assert_eq!((l.offset(3) as usize + l.data_start()) % 8, 0, "{v:?}");
                assert_eq!(l.data_len() % 8, 0, "{v:?} {k},{val}");
            }
        }
    }

    #[test]
    fn encode_decode_round_trips_every_variant() {
        for v in [
            Variant::Coarse,
            Variant::Fine,
            Variant::Lockfree,
            Variant::Chunked,
        ] {
            let l = Layout::new(v, 5, 11);
            let key = b"hello";
            let val = b"world,again";
            let mut buf = vec![0xeeu8; l.data_len()];
            l.encode(key, val, &mut buf);
            let state = if v == Variant::Chunked { STATE_FULL } else { 0 };
            let b = l.decode(&buf, state);
            assert!(b.occupied() && !b.invalid(), "{v:?}");
            assert_eq!(b.key, key);
            assert_eq!(b.value, val);
            assert!(b.checksum_ok());
            // An empty bucket decodes as unoccupied.
            let zero = vec![0u8; l.data_len()];
            assert!(!l.decode(&zero, 0).occupied(), "{v:?}");
        }
    }

    #[test]
    fn the_checksum_is_crc32c_in_one_pass_or_two() {
        // The check value of CRC32C (RFC 3720, B.4): "123456789".
        assert_eq!(record_checksum(b"123456789"), 0xe306_9283);
        assert_eq!(checksum(b"1234", b"56789"), 0xe306_9283);
    }

    #[test]
    fn a_torn_value_fails_the_checksum() {
        let l = Layout::new(Variant::Lockfree, 8, 16);
        let mut buf = vec![0u8; l.data_len()];
        l.encode(&[1; 8], &[2; 16], &mut buf);
        // Half of another write's value landed.
        let mut other = vec![0u8; l.data_len()];
        l.encode(&[1; 8], &[3; 16], &mut other);
        buf[9..17].copy_from_slice(&other[9..17]);
        assert!(!l.decode(&buf, 0).checksum_ok());
    }

    #[test]
    fn offsets_and_capacity_agree() {
        let l = Layout::new(Variant::Coarse, 80, 104);
        assert_eq!(l.offset(0), 8);
        assert_eq!(l.offset(3), 8 + 3 * 192);
        assert_eq!(l.buckets_in(l.region_len(1000).unwrap()), 1000);
        assert_eq!(l.buckets_in(100), 0);
        // A bucket count past what a region can hold is None, not a
        // wrapped, small region.
        assert_eq!(l.region_len(u64::MAX), None);
        assert_eq!(l.region_len(u64::MAX / 192 + 1), None);
        for v in [
            Variant::Coarse,
            Variant::Fine,
            Variant::Lockfree,
            Variant::Chunked,
        ] {
            assert_eq!(Variant::from_code(v.code()), Some(v));
        }
    }
}
