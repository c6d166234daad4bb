//! The message path's wire format: a request carries one batch of one
//! operation's keys (and values) to their owner; the reply carries each
//! key's outcome and the values found. Binary, little-endian, versioned;
//! pure (no I/O), and decoding trusts nothing: every length, count, kind
//! and rank is checked against the table's own sizes, with checked
//! arithmetic, before a byte of the body is looked at.
//!
//! ```text
//! request  = header(kind 1..=3) keys[count * key_len] values[count * value_len if kind carries them]
//! reply    = header(kind | 0x80) outcomes[count] values[value_len per outcome that carries one]
//! failure  = header(kind | 0x80, count 0, flags FAILED) message[utf-8, the rest]
//! header   = magic "FK" (2) version (1) kind (1) from (4) table (8) id (8)
//!            count (4) key_len (4) value_len (4) flags (4)          = 40 bytes
//! ```
//! `from` is the sender's rank, `table` the table's id (64 random bits
//! every rank agreed at create), `id` the request's (a reply repeats it).

use crate::variant::{Mode, Outcome};

/// Bytes of every message's header.
pub const HEADER: usize = 40;
/// The format's version; a message of another is refused.
pub const VERSION: u8 = 1;
const MAGIC: [u8; 2] = *b"FK";
/// Reply kinds are the request's with this bit set.
const REPLY: u8 = 0x80;
/// A reply that carries an error message instead of outcomes.
const FAILED: u32 = 1;

/// What a request asks its owner to do with its keys.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// Read each key.
    Read = 1,
    /// Write each key with its value.
    Write = 2,
    /// Chunked: the key's value if present, else insert it.
    FindOrPut = 3,
}

impl Kind {
    fn from_u8(b: u8) -> Option<Kind> {
        match b {
            1 => Some(Kind::Read),
            2 => Some(Kind::Write),
            3 => Some(Kind::FindOrPut),
            _ => None,
        }
    }

    /// The operation's name in errors.
    pub fn name(self) -> &'static str {
        match self {
            Kind::Read => "read",
            Kind::Write => "write",
            Kind::FindOrPut => "find-or-put",
        }
    }

    /// Whether the request carries a value per key.
    pub fn carries_values(self) -> bool {
        !matches!(self, Kind::Read)
    }

    /// The table's mode that runs it.
    pub(crate) fn mode(self) -> Mode {
        match self {
            Kind::Read => Mode::Read,
            Kind::Write => Mode::Write,
            Kind::FindOrPut => Mode::FindOrPut,
        }
    }

    /// The kind that carries `mode`.
    pub(crate) fn of(mode: Mode) -> Kind {
        match mode {
            Mode::Read => Kind::Read,
            Mode::Write => Kind::Write,
            Mode::FindOrPut => Kind::FindOrPut,
        }
    }

    /// Whether running it twice may leave the table otherwise than once:
    /// a lost reply then leaves the caller not knowing.
    pub fn changes_table(self) -> bool {
        !matches!(self, Kind::Read)
    }
}

/// The sizes a table's messages must have: what decoding checks against.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Sizes {
    /// The table's id.
    pub table: u64,
    /// Ranks in the job.
    pub ranks: usize,
    /// Key bytes.
    pub key_len: usize,
    /// Value bytes.
    pub value_len: usize,
    /// Most keys one message carries.
    pub max_keys: usize,
}

impl Sizes {
    /// Bytes of a request of `kind` with `count` keys, if it fits a usize.
    pub fn request_len(&self, kind: Kind, count: usize) -> Option<usize> {
        let per = if kind.carries_values() {
            self.key_len.checked_add(self.value_len)?
        } else {
            self.key_len
        };
        per.checked_mul(count)?.checked_add(HEADER)
    }

    /// The most bytes a reply to `count` keys takes (every key carrying a
    /// value).
    pub fn reply_len(&self, count: usize) -> Option<usize> {
        self.value_len
            .checked_add(1)?
            .checked_mul(count)?
            .checked_add(HEADER)
    }

    /// The most keys of `kind` a message of at most `max_len` bytes
    /// carries, both ways, capped at `cap`; 0 when not even one fits.
    pub fn keys_per_message(&self, kind: Kind, max_len: usize, cap: usize) -> usize {
        let room = max_len.saturating_sub(HEADER);
        let req = if kind.carries_values() {
            self.key_len.saturating_add(self.value_len)
        } else {
            self.key_len
        };
        let per = req.max(self.value_len.saturating_add(1)).max(1);
        (room / per).min(cap)
    }
}

pub use crate::outcome::Refusal;

/// A header as read off the wire.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Header {
    kind: u8,
    from: u32,
    table: u64,
    id: u64,
    count: u32,
    key_len: u32,
    value_len: u32,
    flags: u32,
}

fn u32_at(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes(b[at..at + 4].try_into().expect("4 bytes"))
}

fn u64_at(b: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(b[at..at + 8].try_into().expect("8 bytes"))
}

impl Header {
    fn write(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(&MAGIC);
        out.push(VERSION);
        out.push(self.kind);
        out.extend_from_slice(&self.from.to_le_bytes());
        out.extend_from_slice(&self.table.to_le_bytes());
        out.extend_from_slice(&self.id.to_le_bytes());
        out.extend_from_slice(&self.count.to_le_bytes());
        out.extend_from_slice(&self.key_len.to_le_bytes());
        out.extend_from_slice(&self.value_len.to_le_bytes());
        out.extend_from_slice(&self.flags.to_le_bytes());
    }

    fn read(b: &[u8]) -> Result<Header, Refusal> {
        if b.len() < HEADER {
            return Err(Refusal::Malformed);
        }
        if b[..2] != MAGIC || b[2] != VERSION {
            return Err(Refusal::Version);
        }
        Ok(Header {
            kind: b[3],
            from: u32_at(b, 4),
            table: u64_at(b, 8),
            id: u64_at(b, 16),
            count: u32_at(b, 24),
            key_len: u32_at(b, 28),
            value_len: u32_at(b, 32),
            flags: u32_at(b, 36),
        })
    }

    /// The checks every message of this table passes: its table, sender
    /// and sizes.
    fn check(&self, s: &Sizes, source: Option<usize>) -> Result<(), Refusal> {
        // Who sent it first: a stranger's message is a stranger's, whatever
        // table it names.
        let from = self.from as usize;
        match source {
            Some(r) if r == from && from < s.ranks => {}
            _ => return Err(Refusal::Stranger),
        }
        if self.table != s.table {
            return Err(Refusal::Table);
        }
        if self.key_len as usize != s.key_len || self.value_len as usize != s.value_len {
            return Err(Refusal::Sizes);
        }
        Ok(())
    }
}

/// Narrows a length the table already bounds (keys and values of at most
/// 1 MiB, counts of at most a run) to the header's u32.
fn narrow(n: usize) -> u32 {
    u32::try_from(n).expect("table sizes fit a u32")
}

/// Writes a request into `out` (cleared first): `kind` on `keys` (and
/// `values`, one per key, where the kind carries them), from rank `from`.
/// The caller keeps `keys.len()` within [`Sizes::max_keys`].
pub fn request(
    out: &mut Vec<u8>,
    s: &Sizes,
    kind: Kind,
    from: usize,
    id: u64,
    keys: &[&[u8]],
    values: &[&[u8]],
) {
    out.clear();
    Header {
        kind: kind as u8,
        from: narrow(from),
        table: s.table,
        id,
        count: narrow(keys.len()),
        key_len: narrow(s.key_len),
        value_len: narrow(s.value_len),
        flags: 0,
    }
    .write(out);
    for k in keys {
        debug_assert_eq!(k.len(), s.key_len);
        out.extend_from_slice(k);
    }
    if kind.carries_values() {
        debug_assert_eq!(values.len(), keys.len());
        for v in values {
            debug_assert_eq!(v.len(), s.value_len);
            out.extend_from_slice(v);
        }
    }
}

/// A request that passed every check; its keys and values borrow the
/// message.
#[derive(Debug, PartialEq, Eq)]
pub struct Request<'m> {
    /// What to do.
    pub kind: Kind,
    /// The sender's rank (the one it came from).
    pub from: usize,
    /// The request's id, which the reply repeats.
    pub id: u64,
    /// `count * key_len` bytes of keys.
    pub keys: &'m [u8],
    /// `count * value_len` bytes of values (empty for reads).
    pub values: &'m [u8],
    /// Keys carried.
    pub count: usize,
}

impl<'m> Request<'m> {
    /// Key `i`.
    pub fn key(&self, i: usize, key_len: usize) -> &'m [u8] {
        &self.keys[i * key_len..(i + 1) * key_len]
    }

    /// Value `i`.
    pub fn value(&self, i: usize, value_len: usize) -> &'m [u8] {
        &self.values[i * value_len..(i + 1) * value_len]
    }
}

/// Reads a request that came from `source` (the rank the messenger says
/// sent it; `None` for an address not in the job), or says why it is
/// refused.
pub fn read_request<'m>(
    b: &'m [u8],
    s: &Sizes,
    source: Option<usize>,
) -> Result<Request<'m>, Refusal> {
    let h = Header::read(b)?;
    h.check(s, source)?;
    let kind = Kind::from_u8(h.kind).ok_or(Refusal::Sizes)?;
    let count = h.count as usize;
    if count == 0 || count > s.max_keys || h.flags != 0 {
        return Err(Refusal::Sizes);
    }
    if s.request_len(kind, count) != Some(b.len()) {
        return Err(Refusal::Malformed);
    }
    let keys_end = HEADER + count * s.key_len;
    Ok(Request {
        kind,
        from: h.from as usize,
        id: h.id,
        keys: &b[HEADER..keys_end],
        values: &b[keys_end..],
        count,
    })
}

/// The code of an outcome on the wire.
fn outcome_code(o: Outcome) -> u8 {
    match o {
        Outcome::Pending => 0,
        Outcome::Hit => 1,
        Outcome::Miss => 2,
        Outcome::Corrupt => 3,
        Outcome::Inserted => 4,
        Outcome::Updated => 5,
        Outcome::Evicted => 6,
        Outcome::Found => 7,
        Outcome::Full => 8,
    }
}

/// The outcomes a reply to `kind` may carry, by code.
fn outcome_of(kind: Kind, code: u8) -> Option<Outcome> {
    let o = match code {
        1 => Outcome::Hit,
        2 => Outcome::Miss,
        3 => Outcome::Corrupt,
        4 => Outcome::Inserted,
        5 => Outcome::Updated,
        6 => Outcome::Evicted,
        7 => Outcome::Found,
        8 => Outcome::Full,
        _ => return None,
    };
    let fits = match kind {
        Kind::Read => matches!(o, Outcome::Hit | Outcome::Miss | Outcome::Corrupt),
        Kind::Write => matches!(o, Outcome::Inserted | Outcome::Updated | Outcome::Evicted),
        Kind::FindOrPut => matches!(o, Outcome::Found | Outcome::Inserted | Outcome::Full),
    };
    fits.then_some(o)
}

/// Whether an outcome carries the value found.
fn carries_value(o: Outcome) -> bool {
    matches!(o, Outcome::Hit | Outcome::Found)
}

/// Writes the reply to `req` into `out` (cleared first): its outcomes,
/// and the value of each that found one, from `found` (`value_len` bytes
/// per key, in key order).
pub(crate) fn reply(
    out: &mut Vec<u8>,
    s: &Sizes,
    owner: usize,
    req: &Request<'_>,
    outcomes: &[Outcome],
    found: &[u8],
) {
    out.clear();
    Header {
        kind: req.kind as u8 | REPLY,
        from: narrow(owner),
        table: s.table,
        id: req.id,
        count: narrow(outcomes.len()),
        key_len: narrow(s.key_len),
        value_len: narrow(s.value_len),
        flags: 0,
    }
    .write(out);
    out.extend(outcomes.iter().map(|&o| outcome_code(o)));
    let vl = s.value_len;
    for (i, &o) in outcomes.iter().enumerate() {
        if carries_value(o) {
            out.extend_from_slice(&found[i * vl..(i + 1) * vl]);
        }
    }
}

/// Writes a reply to `req` that says its owner could not run it, and why.
pub(crate) fn failure(out: &mut Vec<u8>, s: &Sizes, owner: usize, req: &Request<'_>, why: &str) {
    out.clear();
    Header {
        kind: req.kind as u8 | REPLY,
        from: narrow(owner),
        table: s.table,
        id: req.id,
        count: 0,
        key_len: narrow(s.key_len),
        value_len: narrow(s.value_len),
        flags: FAILED,
    }
    .write(out);
    // Cut (at a character) to fit any message: a reply too long to send
    // would leave the caller waiting out its timeout instead.
    let mut end = why.len().min(MAX_WHY);
    while !why.is_char_boundary(end) {
        end -= 1;
    }
    out.extend_from_slice(&why.as_bytes()[..end]);
}

/// The longest reason a failure reply carries, bytes.
const MAX_WHY: usize = 1024;

/// What a reply says.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Reply {
    /// The owner ran the request: the outcomes were written into the
    /// caller's slice and the values found into its buffer.
    Done,
    /// The owner could not run it; its message.
    Failed(String),
}

/// Reads the reply to the request `id` of `kind` with `count` keys, sent
/// to rank `owner`, into `outcomes` (`count` long) and `found` (`count *
/// value_len` bytes; only the keys that found a value are written). A
/// reply that is not this one's, or does not add up, is refused.
#[allow(clippy::too_many_arguments)]
pub(crate) fn read_reply(
    b: &[u8],
    s: &Sizes,
    kind: Kind,
    owner: usize,
    id: u64,
    outcomes: &mut [Outcome],
    found: &mut [u8],
) -> Result<Reply, Refusal> {
    let h = Header::read(b)?;
    h.check(s, Some(owner))?;
    if h.kind != kind as u8 | REPLY || h.id != id {
        return Err(Refusal::Malformed);
    }
    if h.flags == FAILED {
        if h.count != 0 {
            return Err(Refusal::Malformed);
        }
        let why = String::from_utf8_lossy(&b[HEADER..]).into_owned();
        return Ok(Reply::Failed(why));
    }
    let count = h.count as usize;
    if h.flags != 0 || count != outcomes.len() {
        return Err(Refusal::Malformed);
    }
    let codes = b.get(HEADER..HEADER + count).ok_or(Refusal::Malformed)?;
    let vl = s.value_len;
    // Checked whole before anything is written: a refused reply leaves the
    // caller's outcomes and values as they were.
    let mut with_value = 0usize;
    for &c in codes {
        let o = outcome_of(kind, c).ok_or(Refusal::Malformed)?;
        with_value += usize::from(carries_value(o));
    }
    let len = with_value
        .checked_mul(vl)
        .and_then(|v| v.checked_add(HEADER + count));
    if len != Some(b.len()) || found.len() < count.saturating_mul(vl) {
        return Err(Refusal::Malformed);
    }
    let mut at = HEADER + count;
    for (i, &c) in codes.iter().enumerate() {
        let o = outcome_of(kind, c).ok_or(Refusal::Malformed)?;
        if carries_value(o) {
            found[i * vl..(i + 1) * vl].copy_from_slice(&b[at..at + vl]);
            at += vl;
        }
        outcomes[i] = o;
    }
    Ok(Reply::Done)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn sizes() -> Sizes {
        Sizes {
            table: 0xfeed_f00d_1234_5678,
            ranks: 4,
            key_len: 8,
            value_len: 16,
            max_keys: 64,
        }
    }

    fn keys(n: usize) -> Vec<[u8; 8]> {
        (0..n as u64).map(|i| (i * 7).to_le_bytes()).collect()
    }

    #[test]
    fn a_write_request_round_trips_with_its_keys_values_id_and_sender() {
        let s = sizes();
        let ks = keys(3);
        let vs: Vec<[u8; 16]> = (0..3u8).map(|i| [i; 16]).collect();
        let kr: Vec<&[u8]> = ks.iter().map(|k| &k[..]).collect();
        let vr: Vec<&[u8]> = vs.iter().map(|v| &v[..]).collect();
        let mut m = Vec::new();
        request(&mut m, &s, Kind::Write, 2, 99, &kr, &vr);
        assert_eq!(m.len(), HEADER + 3 * (8 + 16));
        let r = read_request(&m, &s, Some(2)).unwrap();
        assert_eq!((r.kind, r.from, r.id, r.count), (Kind::Write, 2, 99, 3));
        assert_eq!(r.key(1, 8), &ks[1]);
        assert_eq!(r.value(2, 16), &[2u8; 16]);
    }

    #[test]
    fn each_kind_of_bad_request_is_refused_for_its_reason() {
        let s = sizes();
        let ks = keys(2);
        let kr: Vec<&[u8]> = ks.iter().map(|k| &k[..]).collect();
        let mut good = Vec::new();
        request(&mut good, &s, Kind::Read, 1, 5, &kr, &[]);
        assert!(read_request(&good, &s, Some(1)).is_ok());
        let with = |f: &dyn Fn(&mut Vec<u8>)| {
            let mut m = good.clone();
            f(&mut m);
            read_request(&m, &s, Some(1)).unwrap_err()
        };
        assert_eq!(with(&|m| m.truncate(HEADER - 1)), Refusal::Malformed);
        assert_eq!(with(&|m| m.truncate(m.len() - 1)), Refusal::Malformed);
        assert_eq!(with(&|m| m.push(0)), Refusal::Malformed);
        assert_eq!(with(&|m| m[0] = b'X'), Refusal::Version);
        assert_eq!(with(&|m| m[2] = VERSION + 1), Refusal::Version);
        assert_eq!(with(&|m| m[8] ^= 1), Refusal::Table);
        assert_eq!(with(&|m| m[3] = 9), Refusal::Sizes);
        assert_eq!(with(&|m| m[28] = 9), Refusal::Sizes);
        assert_eq!(with(&|m| m[32] = 9), Refusal::Sizes);
        assert_eq!(
            with(&|m| m[24..28].copy_from_slice(&0u32.to_le_bytes())),
            Refusal::Sizes
        );
        assert_eq!(
            with(&|m| m[24..28].copy_from_slice(&65u32.to_le_bytes())),
            Refusal::Sizes
        );
        assert_eq!(
            with(&|m| m[24..28].copy_from_slice(&u32::MAX.to_le_bytes())),
            Refusal::Sizes
        );
        assert_eq!(with(&|m| m[36] = 1), Refusal::Sizes);
        // A sender that claims another rank than the one it came from, one
        // out of the job, and an address not in the job.
        assert_eq!(
            read_request(&good, &s, Some(2)).unwrap_err(),
            Refusal::Stranger
        );
        assert_eq!(
            read_request(&good, &s, None).unwrap_err(),
            Refusal::Stranger
        );
        let mut far = good.clone();
        far[4..8].copy_from_slice(&7u32.to_le_bytes());
        assert_eq!(
            read_request(&far, &s, Some(7)).unwrap_err(),
            Refusal::Stranger
        );
    }

    #[test]
    fn a_reply_carries_values_only_for_hits_and_is_matched_to_its_request() {
        let s = sizes();
        let ks = keys(3);
        let kr: Vec<&[u8]> = ks.iter().map(|k| &k[..]).collect();
        let mut m = Vec::new();
        request(&mut m, &s, Kind::Read, 0, 41, &kr, &[]);
        let req = read_request(&m, &s, Some(0)).unwrap();
        let outs = [Outcome::Hit, Outcome::Miss, Outcome::Hit];
        let mut found = vec![0u8; 48];
        found[..16].fill(0xaa);
        found[32..].fill(0xcc);
        let mut rep = Vec::new();
        reply(&mut rep, &s, 3, &req, &outs, &found);
        assert_eq!(rep.len(), HEADER + 3 + 2 * 16);
        let mut got = [Outcome::Pending; 3];
        let mut vals = vec![0u8; 48];
        let r = read_reply(&rep, &s, Kind::Read, 3, 41, &mut got, &mut vals).unwrap();
        assert_eq!(r, Reply::Done);
        assert_eq!(got, outs);
        assert_eq!(&vals[..16], &[0xaa; 16]);
        assert_eq!(&vals[16..32], &[0; 16]);
        assert_eq!(&vals[32..], &[0xcc; 16]);
        // Another request's id, another owner, another kind: refused.
        assert!(read_reply(&rep, &s, Kind::Read, 3, 42, &mut got, &mut vals).is_err());
        assert!(read_reply(&rep, &s, Kind::Read, 2, 41, &mut got, &mut vals).is_err());
        assert!(read_reply(&rep, &s, Kind::Write, 3, 41, &mut got, &mut vals).is_err());
        // A write's outcome in a read's reply, and a missing value.
        let mut bad = rep.clone();
        bad[HEADER] = 4;
        assert!(read_reply(&bad, &s, Kind::Read, 3, 41, &mut got, &mut vals).is_err());
        let mut short = rep.clone();
        short.pop();
        // A refused reply writes nothing: the first value would fit, the
        // last is cut.
        let (mut got2, mut vals2) = ([Outcome::Pending; 3], vec![7u8; 48]);
        assert!(read_reply(&short, &s, Kind::Read, 3, 41, &mut got2, &mut vals2).is_err());
        assert_eq!(got2, [Outcome::Pending; 3]);
        assert_eq!(vals2, vec![7u8; 48]);
    }

    #[test]
    fn a_failure_reply_carries_the_owners_message() {
        let s = sizes();
        let ks = keys(1);
        let mut m = Vec::new();
        request(
            &mut m,
            &s,
            Kind::Write,
            1,
            7,
            &[&ks[0][..]],
            &[&[0u8; 16][..]],
        );
        let req = read_request(&m, &s, Some(1)).unwrap();
        let mut rep = Vec::new();
        failure(&mut rep, &s, 0, &req, "deadline");
        let mut got = [Outcome::Pending; 1];
        let r = read_reply(&rep, &s, Kind::Write, 0, 7, &mut got, &mut [0u8; 16]).unwrap();
        assert_eq!(r, Reply::Failed("deadline".into()));
        // A reason of any length fits a message, cut at a character.
        let long = "é".repeat(10_000);
        failure(&mut rep, &s, 0, &req, &long);
        assert!(rep.len() <= HEADER + MAX_WHY, "{}", rep.len());
        let r = read_reply(&rep, &s, Kind::Write, 0, 7, &mut got, &mut [0u8; 16]).unwrap();
        assert_eq!(r, Reply::Failed("é".repeat(MAX_WHY / 2)));
    }

    #[test]
    fn keys_per_message_keeps_both_ways_within_the_limit() {
        let s = Sizes {
            key_len: 80,
            value_len: 104,
            max_keys: 1024,
            ..sizes()
        };
        let n = s.keys_per_message(Kind::Write, 16 << 10, 1024);
        assert!(s.request_len(Kind::Write, n).unwrap() <= 16 << 10);
        assert!(s.request_len(Kind::Write, n + 1).unwrap() > 16 << 10);
        assert!(s.reply_len(n).unwrap() <= 16 << 10);
        assert_eq!(s.keys_per_message(Kind::Read, 100, 1024), 0);
        assert_eq!(s.keys_per_message(Kind::Read, 1 << 30, 64), 64);
    }

    proptest! {
        #[test]
        fn decoding_any_bytes_never_panics(b in proptest::collection::vec(any::<u8>(), 0..400), src in proptest::option::of(0usize..8)) {
            let s = sizes();
            let _ = read_request(&b, &s, src);
            let mut outs = [Outcome::Pending; 4];
            let mut found = [0u8; 64];
            let _ = read_reply(&b, &s, Kind::Read, 1, 3, &mut outs, &mut found);
        }

        #[test]
        fn a_valid_header_with_any_counts_is_refused_or_exact(count in any::<u32>(), extra in 0usize..64) {
            let s = sizes();
            let mut m = Vec::new();
            Header { kind: 1, from: 1, table: s.table, id: 1, count, key_len: 8, value_len: 16, flags: 0 }.write(&mut m);
            m.resize(HEADER + extra, 0);
            if let Ok(r) = read_request(&m, &s, Some(1)) {
                prop_assert_eq!(r.count * 8, extra);
            }
        }
    }
}
