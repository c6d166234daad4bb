//! Word-wise copies of memory other processes, or a NIC, change under us.
//!
//! Such memory is only ever accessed as [`AtomicU64`] words: never also as
//! bytes, as mixed-size atomic accesses to the same bytes are not defined by
//! the Rust memory model. A copy is a word at a time, so a concurrent writer
//! may be seen half done (a torn read, as over RDMA), which is what the DHT's
//! checksums are for, and what its tests can provoke without undefined
//! behaviour.
//!
//! ```
//! use std::sync::atomic::AtomicU64;
//! use fabkit_core::words::{read_words, write_words};
//!
//! let words: Vec<AtomicU64> = (0..4).map(|_| AtomicU64::new(0)).collect();
//! write_words(&words, 3, b"hello");
//! let mut out = [0u8; 5];
//! read_words(&words, 3, &mut out);
//! assert_eq!(&out, b"hello");
//! ```

use std::sync::atomic::{AtomicU64, Ordering};

/// Copies `out.len()` bytes at byte `offset` out of `words`, a word at a
/// time, in memory order (native byte order: byte `i` is the byte at
/// address `i`, as the NIC and peers mapping it see it): a concurrent
/// writer may be seen half done (a torn read, as over RDMA), which callers
/// detect with checksums. Panics if the range is outside `words` (callers
/// check bounds first).
///
/// Every word is a load-acquire, so a word read after another is no older
/// than what the other's writer had released (a chunked bucket's state word
/// and the record behind it are read in one copy); on x86 that is a plain
/// load. An aligned `offset` (the DHT's buckets all are) takes a straight
/// loop of whole words.
pub fn read_words(words: &[AtomicU64], offset: usize, out: &mut [u8]) {
    if offset.is_multiple_of(8) {
        let src = &words[offset / 8..][..out.len().div_ceil(8)];
        let mut chunks = out.chunks_exact_mut(8);
        for (o, w) in (&mut chunks).zip(src) {
            o.copy_from_slice(&w.load(Ordering::Acquire).to_ne_bytes());
        }
        let rest = chunks.into_remainder();
        if let (false, Some(w)) = (rest.is_empty(), src.last()) {
            rest.copy_from_slice(&w.load(Ordering::Acquire).to_ne_bytes()[..rest.len()]);
        }
    } else {
        let mut done = 0;
        while done < out.len() {
            let pos = offset + done;
            let (w, b) = (pos / 8, pos % 8);
            let n = (8 - b).min(out.len() - done);
            let bytes = words[w].load(Ordering::Acquire).to_ne_bytes();
            out[done..done + n].copy_from_slice(&bytes[b..b + n]);
            done += n;
        }
    }
}

/// Copies `data` into `words` at byte `offset`: whole words are stored,
/// partial words at the edges merged atomically (compare-and-swap), so the
/// bytes beside the range are never clobbered. Panics if the range is
/// outside `words` (callers check bounds first).
///
/// Every word is a store-release: a peer that sees one of them (and
/// acquires) sees what this thread did before it, the words stored earlier
/// in this copy included; on x86 that is a plain store. An aligned `offset`
/// takes a straight loop of whole words.
pub fn write_words(words: &[AtomicU64], offset: usize, data: &[u8]) {
    let mut done = 0;
    if offset.is_multiple_of(8) {
        let dst = &words[offset / 8..][..data.len().div_ceil(8)];
        let mut chunks = data.chunks_exact(8);
        for (d, w) in (&mut chunks).zip(dst) {
            w.store(
                u64::from_ne_bytes(d.try_into().expect("8 bytes")),
                Ordering::Release,
            );
        }
        done = data.len() - chunks.remainder().len();
    }
    while done < data.len() {
        let pos = offset + done;
        let (w, b) = (pos / 8, pos % 8);
        let n = (8 - b).min(data.len() - done);
        if n == 8 {
            let mut v = [0u8; 8];
            v.copy_from_slice(&data[done..done + 8]);
            words[w].store(u64::from_ne_bytes(v), Ordering::Release);
        } else {
            let part = &data[done..done + n];
            let _ = words[w].fetch_update(Ordering::AcqRel, Ordering::Acquire, |old| {
                let mut bytes = old.to_ne_bytes();
                bytes[b..b + n].copy_from_slice(part);
                Some(u64::from_ne_bytes(bytes))
            });
        }
        done += n;
    }
}

/// Asks the CPU to start fetching the cache lines of `len` bytes at byte
/// `offset` of `words`, so that a batch's copies wait for memory together
/// rather than one after another. A hint: it changes no memory and is
/// skipped where the range is outside `words` or the CPU has no such
/// instruction.
#[allow(unsafe_code)]
pub fn prefetch_words(words: &[AtomicU64], offset: usize, len: usize) {
    #[cfg(target_arch = "x86_64")]
    {
        use std::arch::x86_64::{_mm_prefetch, _MM_HINT_T0};
        let Some(end) = offset.checked_add(len) else {
            return;
        };
        if len == 0 || end.div_ceil(8) > words.len() {
            return;
        }
        let base = words.as_ptr() as usize;
        // Lines by address: the slice need not start on one.
        let mut line = (base + offset) & !63;
        while line < base + end {
            // SAFETY: a prefetch neither reads nor writes memory as far as
            // the program sees, and faults on no address; the pointer is
            // made from an integer only to name the line.
            unsafe { _mm_prefetch::<_MM_HINT_T0>(line as *const i8) };
            line += 64;
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = (words, offset, len);
}

/// Ops of a batch whose lines are fetched ahead of the one being copied:
/// a copy's misses overlap those of the next ones, as a NIC keeps several
/// reads in flight, instead of one op's lines at a time.
pub const PREFETCH_AHEAD: usize = 8;

/// Runs `each` over `ops` in order, calling `fetch` for op `i +`
/// [`PREFETCH_AHEAD`] before `each` for op `i` (and for the first ones
/// before any): the loop of a transport that copies a batch out of mapped
/// memory. Stops at the first error.
pub fn with_prefetch<T, E>(
    ops: &mut [T],
    fetch: impl Fn(&T),
    mut each: impl FnMut(&mut T) -> std::result::Result<(), E>,
) -> std::result::Result<(), E> {
    for op in ops.iter().take(PREFETCH_AHEAD) {
        fetch(op);
    }
    for i in 0..ops.len() {
        if let Some(ahead) = ops.get(i + PREFETCH_AHEAD) {
            fetch(ahead);
        }
        each(&mut ops[i])?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn byte_copies_through_words_keep_the_bytes_beside_them() {
        let words: Vec<AtomicU64> = (0..4).map(|_| AtomicU64::new(u64::MAX)).collect();
        write_words(&words, 3, &[1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11]);
        let mut all = [0u8; 32];
        read_words(&words, 0, &mut all);
        let mut want = [0xffu8; 32];
        want[3..14].copy_from_slice(&[1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11]);
        assert_eq!(all, want);
        let mut mid = [0u8; 5];
        read_words(&words, 9, &mut mid);
        assert_eq!(mid, [7, 8, 9, 10, 11]);
    }

    #[test]
    fn aligned_copies_with_a_partial_last_word_keep_the_bytes_after_them() {
        // The whole-word loop of an aligned offset, then a tail of 1 to 7
        // bytes merged into its word: every length from 1 to 24 at offset 8.
        for len in 1..=24usize {
            let words: Vec<AtomicU64> = (0..5).map(|_| AtomicU64::new(u64::MAX)).collect();
            let data: Vec<u8> = (1..=len as u8).collect();
            write_words(&words, 8, &data);
            let mut all = [0u8; 40];
            read_words(&words, 0, &mut all);
            let mut want = [0xffu8; 40];
            want[8..8 + len].copy_from_slice(&data);
            assert_eq!(all, want, "length {len}");
            let mut back = vec![0u8; len];
            read_words(&words, 8, &mut back);
            assert_eq!(back, data, "length {len}");
        }
    }

    #[test]
    fn a_prefetch_outside_the_words_is_skipped() {
        // A hint: any range, in bounds or not, returns and changes nothing.
        let words: Vec<AtomicU64> = (0..4).map(|_| AtomicU64::new(7)).collect();
        for (off, len) in [
            (0, 32),
            (0, 0),
            (31, 1),
            (32, 1),
            (usize::MAX, 1),
            (8, usize::MAX),
        ] {
            prefetch_words(&words, off, len);
        }
        assert!(words.iter().all(|w| w.load(Ordering::Relaxed) == 7));
        let mut seen = Vec::new();
        let mut ops = [0usize, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10];
        let r: std::result::Result<(), ()> = with_prefetch(
            &mut ops,
            |_| {},
            |op| {
                seen.push(*op);
                *op += 100;
                Ok(())
            },
        );
        assert!(r.is_ok());
        assert_eq!(seen, (0..11).collect::<Vec<_>>());
        assert!(ops.iter().all(|&o| o >= 100));
    }
}
