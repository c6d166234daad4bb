//! The 16-byte header at the front of every UDP message: how the receiver
//! counts loss and reordering per stream, also inside GSO trains and GRO
//! merges (each segment carries its own). Pure.
//!
//! ```text
//! 0        4         8                16
//! | magic  | stream  | sequence number |   little-endian
//! ```

use crate::spec::UDP_HEADER;

/// Marks a datagram as ours ("IPEU").
pub const DATA_MAGIC: u32 = u32::from_le_bytes(*b"IPEU");

/// Writes the header for message `seq` of `stream` at the front of `msg`.
/// `msg` is at least [`UDP_HEADER`] bytes (the spec guarantees it).
pub fn put(msg: &mut [u8], stream: u16, seq: u64) {
    msg[0..4].copy_from_slice(&DATA_MAGIC.to_le_bytes());
    msg[4..8].copy_from_slice(&u32::from(stream).to_le_bytes());
    msg[8..16].copy_from_slice(&seq.to_le_bytes());
}

/// Reads a header: `(stream, seq)`, or `None` for a datagram that is not ours
/// or too short.
pub fn get(msg: &[u8]) -> Option<(u16, u64)> {
    let h = msg.first_chunk::<UDP_HEADER>()?;
    if u32::from_le_bytes([h[0], h[1], h[2], h[3]]) != DATA_MAGIC {
        return None;
    }
    let stream = u32::from_le_bytes([h[4], h[5], h[6], h[7]]);
    let seq = u64::from_le_bytes([h[8], h[9], h[10], h[11], h[12], h[13], h[14], h[15]]);
    Some((u16::try_from(stream).ok()?, seq))
}

/// Splits a received buffer into its segments: one, or with UDP GRO a train
/// of `segment`-byte pieces (the last may be shorter).
pub fn segments(buf: &[u8], gro_segment: Option<usize>) -> impl Iterator<Item = &[u8]> {
    let step = match gro_segment {
        Some(s) if s > 0 => s,
        _ => buf.len().max(1),
    };
    buf.chunks(step)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn header_round_trips_and_strangers_are_not_counted() {
        let mut m = [0u8; 20];
        put(&mut m, 7, u64::MAX);
        assert_eq!(get(&m), Some((7, u64::MAX)));
        assert_eq!(get(&m[..15]), None);
        m[0] = 0;
        assert_eq!(get(&m), None);
    }

    #[test]
    fn gro_trains_split_into_segments() {
        let buf = [0u8; 250];
        let lens: Vec<usize> = segments(&buf, Some(100)).map(<[u8]>::len).collect();
        assert_eq!(lens, vec![100, 100, 50]);
        assert_eq!(segments(&buf, None).count(), 1);
        assert_eq!(segments(&[], None).count(), 0);
    }
}
