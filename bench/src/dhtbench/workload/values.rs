//! Keys and values as bytes: a key id written into the key's bytes, and a
//! value filled from its id and tag so that a hit is checked with one
//! compare per word, no dearer than copying the value.

use fabkit_dht::placement::mix;

/// Writes key `id` into `out`: the id big-endian in the first
/// `min(len, 8)` bytes (its low bytes when shorter than 8), the rest `#`.
/// Distinct ids give distinct keys while `id < 256^min(len, 8)`; see
/// [`keys_fit`].
pub fn key_bytes(id: u64, out: &mut [u8]) {
    let be = id.to_be_bytes();
    let n = out.len().min(8);
    let (head, tail) = out.split_at_mut(n);
    head.copy_from_slice(&be[8 - n..]);
    tail.fill(b'#');
}

/// Whether `ids` distinct ids (0..ids) get distinct `len`-byte keys from
/// [`key_bytes`].
pub fn keys_fit(len: usize, ids: u64) -> bool {
    if len >= 8 {
        return true;
    }
    // 256^len ids fit; len < 8 so the shift stays below 64.
    ids <= 1u64 << (8 * len)
}

/// Odd, so the words of a value are pairwise distinct (j * C is a bijection
/// modulo 2^64): a copy that repeats or shifts a word is caught.
pub(super) const WORD_STEP: u64 = 0x9e37_79b9_7f4a_7c15;

/// Separate the id's hash for long values from the one for short values.
pub(super) const LONG_STREAM: u64 = 0xa076_1d64_78bd_642f;

pub(super) const SHORT_STREAM: u64 = 0xe703_7ed1_a0b4_28db;

/// Values shorter than this do not store the tag.
pub(super) const TAGGED_MIN: usize = 16;

/// The first word after the tag in key `id`'s value by writer `tag`.
///
/// `mix` is a bijection with `mix(0) == 0` and the id's hash is odd, so
/// the seed is never 0 for tag 0 (an all-zero value is always refused) and,
/// for one id, different tags always give different seeds (a value whose
/// tag and words come from different writers is always refused).
pub(super) fn long_seed(id: u64, tag: u64) -> u64 {
    mix(tag ^ (mix(id ^ LONG_STREAM) | 1))
}

/// The first word of a short value; odd, so its first byte is never 0.
pub(super) fn short_seed(id: u64) -> u64 {
    mix(id ^ SHORT_STREAM) | 1
}

/// Word `j` of a value seeded `s`; wrapping, as in a hash.
pub(super) fn word(s: u64, j: usize) -> u64 {
    s.wrapping_add((j as u64).wrapping_mul(WORD_STEP))
}

pub(super) fn fill_words(s: u64, out: &mut [u8]) {
    for (j, chunk) in out.chunks_mut(8).enumerate() {
        let w = word(s, j).to_le_bytes();
        chunk.copy_from_slice(&w[..chunk.len()]);
    }
}

pub(super) fn words_ok(s: u64, v: &[u8]) -> bool {
    let mut whole = v.chunks_exact(8);
    let mut j = 0;
    for c in whole.by_ref() {
        let Ok(b) = <[u8; 8]>::try_from(c) else {
            return false;
        };
        if u64::from_le_bytes(b) != word(s, j) {
            return false;
        }
        j += 1;
    }
    let rest = whole.remainder();
    rest == &word(s, j).to_le_bytes()[..rest.len()]
}

/// Writes the value writer `tag` (see [`tag`]) stores for key `id`, as
/// long as `out`.
///
/// From 16 bytes on: the tag (little-endian) in bytes 0..8, then 8-byte
/// words `s + j * C` (little-endian, the last one cut short) with `s` a
/// hash of (id, tag) and `C` odd, so [`value_ok`] hashes once and compares
/// words. Shorter values hold only the low bytes of words seeded by a hash
/// of the id: they tell keys apart (weakly, below 8 bytes) but cannot tell
/// writers apart.
pub fn fill_value(id: u64, tag: u64, out: &mut [u8]) {
    if out.len() >= TAGGED_MIN {
        let (head, body) = out.split_at_mut(8);
        head.copy_from_slice(&tag.to_le_bytes());
        fill_words(long_seed(id, tag), body);
    } else {
        fill_words(short_seed(id), out);
    }
}

/// Whether `v` is exactly what [`fill_value`] writes for key `id` with some
/// tag. From 16 bytes on this refuses, always: a changed byte, all-zero
/// bytes, and words of two writers (a torn read); and another key's value
/// unless two 64-bit hashes collide. Short values refuse all-zero bytes and
/// changed bytes, but another key's value only with 1 - 2^-(8 len - 1)
/// odds, and cannot tell writers apart. The empty value is the only one of
/// its length, so it is accepted.
pub fn value_ok(id: u64, v: &[u8]) -> bool {
    if v.len() >= TAGGED_MIN {
        let (head, body) = v.split_at(8);
        let Ok(t) = <[u8; 8]>::try_from(head) else {
            return false;
        };
        words_ok(long_seed(id, u64::from_le_bytes(t)), body)
    } else {
        words_ok(short_seed(id), v)
    }
}

/// The tag of a value rank `rank` writes in its round `version`: distinct
/// for distinct pairs while `rank < 2^24` and `version < 2^40` (higher
/// bits are dropped, as in a sequence number that wraps).
pub fn tag(rank: u64, version: u64) -> u64 {
    (version << 24) | (rank & 0x00ff_ffff)
}
