//! One rank's client of every server: one connection each, a batch
//! becoming one `MGET` or `MSET` per server, all sent before any reply is
//! read.

use std::fmt;
use std::net::SocketAddrV4;
use std::time::Duration;

use anyhow::{anyhow, bail, ensure, Context, Result};
use redis::{ConnectionLike, IntoConnectionInfo, RedisWrite, Value};

use super::resp::resp_len;
use super::{shorten, who};

/// One rank's connections to every server, for the benchmark's batches.
///
/// Per batch the client reuses its command and index buffers; what it
/// still allocates is the redis crate's: the command's copy of the
/// arguments grows only the first time, but every reply is parsed into
/// fresh `Value`s (an array plus one `Vec<u8>` per value read), which the
/// sync API gives no way to parse in place.
pub struct Client {
    conns: Vec<Conn>,
    timeout: Duration,
    sent: u64,
    received: u64,
}

/// One server's connection and the buffers of the batch in flight.
struct Conn {
    addr: SocketAddrV4,
    /// From `INFO server` at connect, to name the server in errors.
    pid: Option<u32>,
    con: redis::Connection,
    /// The command being built, cleared (capacity kept) per batch.
    cmd: redis::Cmd,
    /// `cmd` packed as RESP, exactly the bytes sent.
    packed: Vec<u8>,
    /// Indices into the batch of the keys this server holds, in the order
    /// they appear in `cmd` (and so in its reply).
    idx: Vec<usize>,
    /// A request was sent whose reply has not been read yet.
    pending: bool,
    /// Why the connection can no longer be trusted, after a transport
    /// error: a send cut short leaves part of a command on the wire (what
    /// follows would be read as its rest), and a server that missed the
    /// timeout once is not timed again as if nothing had happened.
    broken: Option<String>,
}

impl fmt::Debug for Client {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // redis::Connection has no Debug; the servers are what matters.
        f.debug_struct("Client")
            .field(
                "servers",
                &self
                    .conns
                    .iter()
                    .map(|c| (c.addr, c.pid))
                    .collect::<Vec<_>>(),
            )
            .field("timeout", &self.timeout)
            .field("sent", &self.sent)
            .field("received", &self.received)
            .finish()
    }
}

impl Conn {
    fn who(&self) -> String {
        who(self.addr, self.pid)
    }

    /// The error for a failed request `op` to this server. A transport
    /// failure also marks the connection broken.
    fn failed(&mut self, op: &str, e: redis::RedisError, timeout: Duration) -> anyhow::Error {
        let err = self.describe(op, &e, timeout);
        if e.is_io_error() {
            self.broken = Some(format!("{op}: {e}"));
        }
        err
    }

    fn describe(&self, op: &str, e: &redis::RedisError, timeout: Duration) -> anyhow::Error {
        if e.is_timeout() {
            anyhow!("{}: {op}: no reply within {timeout:?}", self.who())
        } else if e.is_connection_dropped() || e.is_connection_refusal() {
            anyhow!(
                "{}: {op}: connection lost (did the server die?): {e}",
                self.who()
            )
        } else {
            anyhow!("{}: {op}: {e}", self.who())
        }
    }

    /// Starts a command `name`, keeping the buffers' capacity.
    fn begin(&mut self, name: &str) {
        self.cmd.clear();
        self.cmd.arg(name);
    }

    /// Packs the command built so far into `packed`.
    fn pack(&mut self) {
        self.packed.clear();
        self.cmd.write_packed_command(&mut self.packed);
    }
}

impl Client {
    /// Connects to the servers at `addrs`, in that order: a batch's server
    /// `s` is `addrs[s]`. `timeout` bounds the connect and, as read and
    /// write timeout, every later request on every connection.
    pub fn connect(addrs: &[SocketAddrV4], timeout: Duration, password: &str) -> Result<Client> {
        ensure!(!addrs.is_empty(), "connecting to redis: no servers given");
        // A zero timeout would mean "none" to the socket: refuse it.
        ensure!(
            !timeout.is_zero(),
            "connecting to redis: the timeout must be more than zero"
        );
        let mut conns = Vec::with_capacity(addrs.len());
        for &addr in addrs {
            conns.push(
                connect_one(addr, timeout, password)
                    .with_context(|| format!("{}: connecting", who(addr, None)))?,
            );
        }
        Ok(Client {
            conns,
            timeout,
            sent: 0,
            received: 0,
        })
    }

    /// Reads a batch: `keys[i]` lives on server `servers[i]` (an index into
    /// the ports given to [`Client::connect`]). One MGET goes to every
    /// server involved before any reply is read, so the servers work in
    /// parallel. A value found is copied into `out[i*vlen..(i+1)*vlen]` and
    /// `found[i]` set; for a key absent, `found[i]` is cleared.
    ///
    /// `out` must be `keys.len() * vlen` bytes and `found` `keys.len()`
    /// long. A value of another length than `vlen` is an error naming the
    /// key's index and its server. After an error `out` and `found` are
    /// partly written, but every reply has been read, so the client stays
    /// usable if its servers are.
    pub fn read_batch(
        &mut self,
        servers: &[u32],
        keys: &[&[u8]],
        vlen: usize,
        out: &mut [u8],
        found: &mut [bool],
    ) -> Result<()> {
        let n = keys.len();
        ensure!(
            servers.len() == n && found.len() == n && Some(out.len()) == n.checked_mul(vlen),
            "redis read_batch: {n} keys need {n} servers, {n} found flags and {n} x {vlen} B out, got {}, {} and {} B",
            servers.len(),
            found.len(),
            out.len()
        );
        self.group(servers)?;
        for c in &mut self.conns {
            if c.idx.is_empty() {
                continue;
            }
            c.begin("MGET");
            for &i in &c.idx {
                c.cmd.write_arg(keys[i]);
            }
            c.pack();
        }
        self.exchange("MGET", |c, reply| {
            let Value::Array(items) = reply else {
                return Err(unexpected(c, "MGET", &reply));
            };
            ensure!(
                items.len() == c.idx.len(),
                "{}: MGET of {} keys answered {} values",
                c.who(),
                c.idx.len(),
                items.len()
            );
            for (item, &i) in items.iter().zip(&c.idx) {
                match item {
                    Value::Nil => found[i] = false,
                    Value::BulkString(v) if v.len() == vlen => {
                        out[i * vlen..(i + 1) * vlen].copy_from_slice(v);
                        found[i] = true;
                    }
                    Value::BulkString(v) => bail!(
                        "{}: MGET: key {i} of the batch has a value of {} B, expected {vlen} B",
                        c.who(),
                        v.len()
                    ),
                    other => return Err(unexpected(c, "MGET (a value)", other)),
                }
            }
            Ok(())
        })
    }

    /// Writes a batch: `keys[i]` gets `values[i]` on server `servers[i]`.
    /// One MSET goes to every server involved before any reply is read;
    /// every reply is read even after an error.
    pub fn write_batch(&mut self, servers: &[u32], keys: &[&[u8]], values: &[&[u8]]) -> Result<()> {
        let n = keys.len();
        ensure!(
            servers.len() == n && values.len() == n,
            "redis write_batch: {n} keys need {n} servers and {n} values, got {} and {}",
            servers.len(),
            values.len()
        );
        self.group(servers)?;
        for c in &mut self.conns {
            if c.idx.is_empty() {
                continue;
            }
            c.begin("MSET");
            for &i in &c.idx {
                c.cmd.write_arg(keys[i]);
                c.cmd.write_arg(values[i]);
            }
            c.pack();
        }
        self.exchange("MSET", |c, reply| match reply {
            Value::Okay => Ok(()),
            other => Err(unexpected(c, "MSET", &other)),
        })
    }

    /// RESP bytes this client has sent and received since it connected
    /// (the connection handshake aside): requests exactly as packed,
    /// replies as the RESP2 encoding of what came back (exact for the
    /// replies its commands get), so the benchmark can report bytes on the
    /// wire per application byte. FLUSHALL and DBSIZE count too; take the
    /// difference around a phase.
    pub fn bytes(&self) -> (u64, u64) {
        (self.sent, self.received)
    }

    /// Empties every server (FLUSHALL), between benchmark repetitions.
    pub fn flush_all(&mut self) -> Result<()> {
        for c in &mut self.conns {
            c.begin("FLUSHALL");
            c.pack();
        }
        self.exchange("FLUSHALL", |c, reply| match reply {
            Value::Okay => Ok(()),
            other => Err(unexpected(c, "FLUSHALL", &other)),
        })
    }

    /// The number of keys on all servers together (DBSIZE summed), for
    /// tests and checks.
    #[cfg(test)]
    pub fn dbsize(&mut self) -> Result<u64> {
        for c in &mut self.conns {
            c.begin("DBSIZE");
            c.pack();
        }
        let mut sum = 0u64;
        self.exchange("DBSIZE", |c, reply| match reply {
            Value::Int(k) if k >= 0 => {
                sum += k as u64;
                Ok(())
            }
            other => Err(unexpected(c, "DBSIZE", &other)),
        })?;
        Ok(sum)
    }

    /// Fills each connection's `idx` with the batch positions of its keys;
    /// `packed` is emptied, so only servers given keys take part in the
    /// next [`Client::exchange`].
    fn group(&mut self, servers: &[u32]) -> Result<()> {
        for c in &mut self.conns {
            c.idx.clear();
            c.packed.clear();
        }
        let count = self.conns.len();
        for (i, &s) in servers.iter().enumerate() {
            let c = self.conns.get_mut(s as usize).with_context(|| {
                format!("redis batch: key {i} is placed on server {s}, but there are {count}")
            })?;
            c.idx.push(i);
        }
        Ok(())
    }

    /// Sends every connection's `packed` request (the empty ones are not
    /// involved), then reads one reply from each server sent to, handing
    /// it to `take`. Every reply is read even after an error, so no reply
    /// is left behind to be mistaken for the next request's; the first
    /// error is returned.
    fn exchange(
        &mut self,
        op: &str,
        mut take: impl FnMut(&Conn, Value) -> Result<()>,
    ) -> Result<()> {
        // Refused before anything is sent, so no server is left with a
        // request whose reply nobody reads.
        if let Some(c) = self
            .conns
            .iter()
            .find(|c| !c.packed.is_empty() && c.broken.is_some())
        {
            bail!(
                "{}: {op}: not sent, the connection failed earlier ({})",
                c.who(),
                c.broken.as_deref().unwrap_or_default()
            );
        }
        let mut first: Option<anyhow::Error> = None;
        for c in &mut self.conns {
            if c.packed.is_empty() {
                continue;
            }
            match c.con.send_packed_command(&c.packed) {
                Ok(()) => {
                    self.sent += c.packed.len() as u64;
                    c.pending = true;
                }
                Err(e) => {
                    // The servers already sent to still answer: read them
                    // below, but send no more.
                    first = Some(c.failed(&format!("sending {op}"), e, self.timeout));
                    break;
                }
            }
        }
        for c in &mut self.conns {
            if !c.pending {
                continue;
            }
            c.pending = false;
            let reply = match c.con.recv_response() {
                Ok(reply) => reply,
                Err(e) => {
                    // `failed` marks the connection broken; the other
                    // servers' replies are still read.
                    let e = c.failed(&format!("reading the reply to {op}"), e, self.timeout);
                    first.get_or_insert(e);
                    continue;
                }
            };
            self.received += resp_len(&reply);
            if first.is_some() {
                continue;
            }
            if let Value::ServerError(e) = &reply {
                first = Some(anyhow!("{}: {op}: the server answered {e}", c.who()));
                continue;
            }
            if let Err(e) = take(c, reply) {
                first = Some(e);
            }
        }
        first.map_or(Ok(()), Err)
    }
}

/// An authenticated connection to `addr`: Nagle off (a batch is one
/// write, which must not wait for the previous one's ACK), no CLIENT
/// SETINFO (redis 7.0 does not know it), and the read and write timeouts
/// set to `timeout` (the crate clears them after connecting).
pub(super) fn connection(
    addr: SocketAddrV4,
    password: &str,
    timeout: Duration,
) -> redis::RedisResult<redis::Connection> {
    let info = redis::ConnectionAddr::Tcp(addr.ip().to_string(), addr.port())
        .into_connection_info()?
        .set_tcp_settings(redis::io::tcp::TcpSettings::default().set_nodelay(true))
        .set_redis_settings(
            redis::RedisConnectionInfo::default()
                .set_skip_set_lib_name()
                .set_password(password),
        );
    let con = redis::Client::open(info)?.get_connection_with_timeout(timeout)?;
    con.set_read_timeout(Some(timeout))?;
    con.set_write_timeout(Some(timeout))?;
    Ok(con)
}

/// Opens one connection for the benchmark's batches (see [`connection`])
/// and asks the server's pid, to name it in errors.
fn connect_one(addr: SocketAddrV4, timeout: Duration, password: &str) -> Result<Conn> {
    let mut con = connection(addr, password, timeout)?;
    let info = con.req_command(redis::cmd("INFO").arg("server"))?;
    let pid = match &info {
        Value::BulkString(text) => info_pid(text),
        _ => None,
    };
    Ok(Conn {
        addr,
        pid,
        con,
        cmd: redis::Cmd::new(),
        packed: Vec::new(),
        idx: Vec::new(),
        pending: false,
        broken: None,
    })
}

/// `process_id` from the text of `INFO server`.
pub(super) fn info_pid(text: &[u8]) -> Option<u32> {
    String::from_utf8_lossy(text)
        .lines()
        .find_map(|l| l.strip_prefix("process_id:"))
        .and_then(|v| v.trim().parse().ok())
}

/// The error for a reply of the wrong shape.
fn unexpected(c: &Conn, op: &str, reply: &Value) -> anyhow::Error {
    let shown = shorten(&format!("{reply:?}"), 120);
    anyhow!("{}: {op}: unexpected reply {shown}", c.who())
}
