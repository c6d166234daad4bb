//! The size of a reply as a server sends it (RESP2), for the bytes the
//! benchmark reports on the wire.

use redis::Value;

/// Decimal digits of `n`.
fn digits(mut n: u64) -> u64 {
    let mut d = 1;
    while n >= 10 {
        n /= 10;
        d += 1;
    }
    d
}

/// The length of `v` in RESP2, as a server sends it: `*N\r\n` then the
/// items, `$L\r\n` + L bytes + `\r\n`, `$-1\r\n` for nil, `:N\r\n`,
/// `+S\r\n`, `-ERR ...\r\n`. The RESP3-only kinds this client never asks
/// for are counted by their text.
pub(super) fn resp_len(v: &Value) -> u64 {
    let int = |k: i64| 1 + u64::from(k < 0) + digits(k.unsigned_abs()) + 2;
    let bulk = |len: usize| 1 + digits(len as u64) + 2 + len as u64 + 2;
    let array = |n: usize| 1 + digits(n as u64) + 2;
    match v {
        Value::Nil => 5,
        Value::Int(k) => int(*k),
        Value::BulkString(b) => bulk(b.len()),
        Value::Array(items) | Value::Set(items) => {
            array(items.len()) + items.iter().map(resp_len).sum::<u64>()
        }
        Value::Push { data, .. } => array(data.len()) + data.iter().map(resp_len).sum::<u64>(),
        Value::Map(pairs) => {
            array(pairs.len())
                + pairs
                    .iter()
                    .map(|(k, v)| resp_len(k) + resp_len(v))
                    .sum::<u64>()
        }
        Value::Attribute { data, .. } => resp_len(data),
        Value::SimpleString(s) => 1 + s.len() as u64 + 2,
        Value::Okay => 5,
        Value::ServerError(e) => {
            let detail = e.details().map_or(0, |d| 1 + d.len() as u64);
            1 + e.code().len() as u64 + detail + 2
        }
        Value::Double(x) => 1 + x.to_string().len() as u64 + 2,
        Value::Boolean(_) => 4,
        Value::VerbatimString { text, .. } => bulk(text.len() + 4),
        Value::BigNumber(n) => 1 + format!("{n:?}").len() as u64 + 2,
        // Value is non-exhaustive: a kind added later counts as its text.
        #[allow(unreachable_patterns)]
        other => 1 + format!("{other:?}").len() as u64 + 2,
    }
}
