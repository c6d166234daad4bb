//! The server: a listener that runs each client's test (or a sweep's
//! `Configure`) in a session of its own, a bounded number at once.

use std::io::{self, Read, Write};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use socket2::{Protocol, SockAddr, Socket, Type};

use super::phase::{data_phase, Phase};
use super::socket::{family_of, port_of, stream, udp_bound, udp_connected, with_port, TCP_HELLO};
use super::stream::{is_timeout, role_of};
use super::{failed, host_info, RunError};
use crate::proto::{self, Msg};
use crate::report::Report;
use crate::spec::Proto;

/// How the server listens.
#[derive(Clone, Debug)]
pub struct ServerOpts {
    /// Control port (0: any; see [`Server::port`]).
    pub port: u16,
    /// Address to listen on (default: every IPv6 and IPv4 address).
    pub bind: Option<IpAddr>,
    /// Interface to bind (`--dev`).
    pub dev: Option<String>,
    /// Tests run at once at most; more are refused.
    pub max_sessions: usize,
    /// How long a new connection may take to say what it wants (a deadline
    /// for the whole message, however slowly its bytes come).
    pub handshake_timeout: Duration,
    /// Print a summary line per test.
    pub verbose: bool,
    /// Let sweeps set this interface (`Configure`): recorded before the
    /// first change, restored when the server ends.
    pub sweep_iface: Option<String>,
}

impl Default for ServerOpts {
    fn default() -> Self {
        ServerOpts {
            port: crate::DEFAULT_PORT,
            bind: None,
            dev: None,
            max_sessions: 16,
            handshake_timeout: Duration::from_secs(10),
            verbose: true,
            sweep_iface: None,
        }
    }
}

/// A listening server.
#[derive(Debug)]
pub struct Server {
    listener: TcpListener,
    opts: Arc<ServerOpts>,
    active: Arc<AtomicUsize>,
    /// `--sweep-iface`'s record, taken at the first `Configure`; dropped
    /// (restored) with the server.
    held: Held,
}

/// The interface a server lets sweeps set, once recorded.
type Held = Arc<Mutex<Option<crate::iface::Held>>>;

/// One running test's place in the server's count, given back on drop (also
/// when the session fails or panics).
struct Slot(Arc<AtomicUsize>);

impl Drop for Slot {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}

fn unmap(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(ip, IpAddr::V4),
        v4 => v4,
    }
}

/// A dual-stack listener sees IPv4 peers as mapped IPv6 addresses: use the
/// plain IPv4 address, so data sockets and interfaces match. IPv6 addresses
/// keep their scope (link-local).
fn unmap_addr(a: SocketAddr) -> SocketAddr {
    match unmap(a.ip()) {
        IpAddr::V4(v4) => SocketAddr::new(IpAddr::V4(v4), a.port()),
        IpAddr::V6(_) => a,
    }
}

/// Accept errors that say nothing about the listener itself (a client that
/// went away, or a momentary lack of file descriptors or memory).
fn transient(e: &io::Error) -> bool {
    matches!(
        e.raw_os_error(),
        Some(
            libc::ECONNABORTED
                | libc::EMFILE
                | libc::ENFILE
                | libc::ENOBUFS
                | libc::ENOMEM
                | libc::EPROTO
                | libc::EINTR
        )
    )
}

impl Server {
    /// Binds the control port.
    pub fn bind(opts: ServerOpts) -> Result<Server, RunError> {
        let ip = opts.bind.unwrap_or(IpAddr::V6(Ipv6Addr::UNSPECIFIED));
        let addr = SocketAddr::new(ip, opts.port);
        let mk = |addr: SocketAddr| -> io::Result<Socket> {
            let s = Socket::new(family_of(addr.ip()), Type::STREAM, Some(Protocol::TCP))?;
            s.set_reuse_address(true)?;
            if addr.is_ipv6() {
                // Dual stack: IPv4 clients arrive as mapped addresses.
                s.set_only_v6(false)?;
            }
            if let Some(d) = &opts.dev {
                s.bind_device(Some(d.as_bytes()))?;
            }
            s.bind(&SockAddr::from(addr))?;
            s.listen(128)?;
            Ok(s)
        };
        // No IPv6 on this host: fall back to IPv4 when no address was named.
        let sock = mk(addr).or_else(|e| match opts.bind {
            None => mk(SocketAddr::new(
                IpAddr::V4(Ipv4Addr::UNSPECIFIED),
                opts.port,
            )),
            Some(_) => Err(e),
        });
        let sock = sock.map_err(|e| {
            if e.kind() == io::ErrorKind::AddrInUse {
                failed(format!(
                    "port {} is in use: stop the other server or pick another with -p",
                    opts.port
                ))
            } else {
                failed(format!("cannot listen on {addr}: {e}"))
            }
        })?;
        Ok(Server {
            listener: sock.into(),
            opts: Arc::new(opts),
            active: Arc::new(AtomicUsize::new(0)),
            held: Arc::default(),
        })
    }

    /// The control port listened on.
    pub fn port(&self) -> u16 {
        self.listener.local_addr().map_or(0, |a| a.port())
    }

    /// Serves tests; with `one_off`, returns after the first connection
    /// (its test's result), else never returns except on a listener error.
    pub fn serve(&self, one_off: bool) -> Result<(), RunError> {
        loop {
            let (conn, from) = match self.listener.accept() {
                Ok(c) => c,
                Err(e) if transient(&e) => {
                    if self.opts.verbose {
                        eprintln!("ipoib-eval server: accept: {e}; going on");
                    }
                    // Out of descriptors: let running tests finish some.
                    std::thread::sleep(Duration::from_millis(100));
                    continue;
                }
                Err(e) => return Err(failed(format!("accepting connections: {e}"))),
            };
            let from = unmap_addr(from);
            if one_off {
                self.active.fetch_add(1, Ordering::Relaxed);
                let _slot = Slot(self.active.clone());
                return session(&self.opts, &self.active, &self.held, conn, from).map(|_| ());
            }
            if self.active.load(Ordering::Relaxed) >= self.opts.max_sessions {
                let mut c = conn;
                let _ = c.set_write_timeout(Some(self.opts.handshake_timeout));
                let reason = format!(
                    "server busy: {} tests running; try again later",
                    self.opts.max_sessions
                );
                let _ = proto::write_msg(&mut c, &Msg::Refused { reason });
                continue;
            }
            self.active.fetch_add(1, Ordering::Relaxed);
            let slot = Slot(self.active.clone());
            let (opts, active, held) = (self.opts.clone(), self.active.clone(), self.held.clone());
            let started = std::thread::Builder::new()
                .name(format!("session-{from}"))
                .spawn(move || {
                    let _slot = slot;
                    if let Err(e) = session(&opts, &active, &held, conn, from) {
                        if opts.verbose {
                            eprintln!("ipoib-eval server: {from}: {e}");
                        }
                    }
                });
            if let Err(e) = started {
                // The closure (and its slot and connection) were dropped.
                if self.opts.verbose {
                    eprintln!("ipoib-eval server: no thread for {from}: {e}");
                }
            }
        }
    }
}

/// Refuses a test with a reason the client prints, and returns the error.
fn refuse(ctl: &TcpStream, peer: &str, reason: String) -> RunError {
    let mut w = ctl;
    let _ = proto::write_msg(
        &mut w,
        &Msg::Refused {
            reason: reason.clone(),
        },
    );
    failed(format!("{peer}: {reason}"))
}

/// One test with one client (or a sweep's `Configure`).
fn session(
    opts: &ServerOpts,
    running: &AtomicUsize,
    held: &Held,
    ctl: TcpStream,
    from: SocketAddr,
) -> Result<Option<Report>, RunError> {
    let peer = format!("client {from}");
    ctl.set_write_timeout(Some(opts.handshake_timeout))
        .map_err(|e| failed(e.to_string()))?;
    ctl.set_nodelay(true).map_err(|e| failed(e.to_string()))?;
    let spec = match proto::read_msg_within(&ctl, opts.handshake_timeout) {
        Ok(Msg::Hello { spec, .. }) => spec,
        Ok(Msg::Configure { wanted }) => {
            return configure(opts, running, held, &ctl, &peer, Some(&wanted))
        }
        Ok(Msg::Restore) => return configure(opts, running, held, &ctl, &peer, None),
        Ok(other) => {
            return Err(failed(format!(
                "{peer} opened with {} instead of Hello",
                other.name()
            )))
        }
        Err(e) => return Err(failed(format!("{peer}: {e}"))),
    };
    if let Err(e) = spec.validate() {
        return Err(refuse(&ctl, &peer, e.0));
    }
    let local = unmap_addr(ctl.local_addr().map_err(|e| failed(e.to_string()))?);
    let to = spec.timeout();
    ctl.set_write_timeout(Some(to))
        .map_err(|e| failed(e.to_string()))?;
    let plan = spec.plan();
    // Data connections must greet with it: a stranger cannot guess it.
    let cookie = fabkit_core::random_u64().map_err(|e| failed(e.to_string()))?;
    let dev = opts.dev.as_deref();
    // Open the data sockets before saying Ready.
    let mut udp = Vec::new();
    let mut listener = None;
    let mut ports = Vec::new();
    let setup = (|| -> io::Result<()> {
        match spec.proto {
            Proto::Tcp => {
                let l = Socket::new(family_of(local.ip()), Type::STREAM, Some(Protocol::TCP))?;
                if let Some(d) = dev {
                    l.bind_device(Some(d.as_bytes()))?;
                }
                l.bind(&SockAddr::from(with_port(local, 0)))?;
                l.listen(plan.len() as i32 + 8)?;
                ports.push(port_of(&l));
                listener = Some(l);
            }
            Proto::Udp => {
                for _ in &plan {
                    let s = udp_bound(local)?;
                    ports.push(port_of(&s));
                    udp.push(s);
                }
            }
        }
        Ok(())
    })();
    if let Err(e) = setup {
        return Err(refuse(&ctl, &peer, format!("opening data sockets: {e}")));
    }
    let mut w = &ctl;
    proto::write_msg(
        &mut w,
        &Msg::Ready {
            ports,
            cookie,
            server: host_info(),
        },
    )
    .map_err(|e| failed(format!("{peer}: {e}")))?;
    let client_ports = match proto::read_msg_within(&ctl, to) {
        Ok(Msg::Start { ports }) => ports,
        Ok(other) => {
            return Err(failed(format!(
                "{peer} sent {} instead of Start",
                other.name()
            )))
        }
        Err(e) => return Err(failed(format!("{peer}: waiting for Start: {e}"))),
    };
    let mut warnings = Vec::new();
    let mut socks: Vec<Option<Socket>> = (0..plan.len()).map(|_| None).collect();
    match spec.proto {
        Proto::Tcp => {
            let l = listener.take().ok_or_else(|| failed("no listener"))?;
            let deadline = Instant::now() + to;
            while socks.iter().any(Option::is_none) {
                let left = deadline.saturating_duration_since(Instant::now());
                if left.is_zero() {
                    return Err(failed(format!(
                        "{peer} did not open all {} data connections within {to:?}",
                        plan.len()
                    )));
                }
                l.set_read_timeout(Some(left))
                    .map_err(|e| failed(e.to_string()))?;
                let (s, _) = match l.accept() {
                    Ok(x) => x,
                    Err(e) if is_timeout(&e) || transient(&e) => continue,
                    Err(e) => {
                        return Err(failed(format!(
                            "accepting data connections from {peer}: {e}"
                        )))
                    }
                };
                // The greeting gets what is left of the deadline, no more.
                let left = deadline
                    .saturating_duration_since(Instant::now())
                    .max(Duration::from_millis(1));
                s.set_read_timeout(Some(left))
                    .map_err(|e| failed(e.to_string()))?;
                let mut hello = [0u8; TCP_HELLO];
                // A stranger or a wrong cookie is dropped; the deadline still runs.
                if (&s).read_exact(&mut hello).is_err()
                    || hello[..4] != proto::MAGIC
                    || hello[4..12] != cookie.to_le_bytes()
                {
                    continue;
                }
                let id = usize::from(u16::from_le_bytes([hello[12], hello[13]]));
                if let Some(slot @ None) = socks.get_mut(id) {
                    *slot = Some(s);
                }
            }
        }
        Proto::Udp => {
            if client_ports.len() != plan.len() {
                return Err(failed(format!(
                    "{peer} sent {} UDP ports for {} streams",
                    client_ports.len(),
                    plan.len()
                )));
            }
            for ((slot, s), port) in socks.iter_mut().zip(udp.drain(..)).zip(&client_ports) {
                let s = udp_connected(s, with_port(from, *port))
                    .map_err(|e| failed(format!("connecting UDP to {peer}: {e}")))?;
                *slot = Some(s);
            }
        }
    }
    let mut streams = Vec::new();
    for (p, s) in plan.iter().zip(socks) {
        let sock = s.ok_or_else(|| failed("missing data socket"))?;
        let role = role_of(p, false);
        streams.push(stream(*p, role, sock, None, &spec, dev, &mut warnings)?);
    }
    let ph = Phase {
        spec: Arc::new(spec.clone()),
        ctl: &ctl,
        peer: peer.clone(),
        cpus: &spec.server_cpus,
        print: false,
        local_addr: local.ip(),
        running: Some(running),
    };
    let handshake = || {
        let mut w = &ctl;
        proto::write_msg(&mut w, &Msg::Go).map_err(|e| failed(format!("sending Go to {peer}: {e}")))
    };
    let (mut mine, theirs) = data_phase(ph, streams, handshake)?;
    mine.warnings.extend(warnings);
    let report = Report::assemble(&spec, local.to_string(), theirs, mine);
    if opts.verbose {
        for t in &report.totals {
            // A closed stdout (a pipe whose reader left) must not end the server.
            let _ = writeln!(
                std::io::stdout().lock(),
                "{peer}: {} {}: {} received, {:.3} Gbit/s, {:.0} msgs/s, loss {:.3} %",
                spec.describe(),
                t.direction,
                t.received_msgs,
                t.gbit_s,
                t.msgs_per_s,
                t.loss * 100.0
            );
        }
    }
    Ok(Some(report))
}

/// Sets the server's `--sweep-iface` as a sweep point asks, recording it
/// first; answers `Configured` or `Refused`.
fn configure(
    opts: &ServerOpts,
    running: &AtomicUsize,
    held: &Held,
    ctl: &TcpStream,
    peer: &str,
    wanted: Option<&crate::iface::Wanted>,
) -> Result<Option<Report>, RunError> {
    let Some(iface) = &opts.sweep_iface else {
        return Err(refuse(
            ctl,
            peer,
            "this server does not change its interface: start it with --sweep-iface IFACE".into(),
        ));
    };
    // Only over the interface itself, and never under a running test.
    let local = ctl.local_addr().map_err(|e| failed(e.to_string()))?.ip();
    let came_on = crate::stats::iface::iface_of(unmap(local));
    if came_on.as_deref() != Some(iface.as_str()) {
        return Err(refuse(
            ctl,
            peer,
            format!(
                "settings are taken only over {iface} (this came to {local} on {}): give --peer \
                 this server's address on {iface}",
                came_on.as_deref().unwrap_or("no interface")
            ),
        ));
    }
    if running.load(Ordering::Relaxed) > 1 {
        return Err(refuse(
            ctl,
            peer,
            "tests are running on this server: change its interface when they end".into(),
        ));
    }
    let done = match wanted {
        // Restore: put the interface back and forget the record.
        None => {
            let taken = held.lock().unwrap_or_else(|p| p.into_inner()).take();
            taken.map_or(Ok(()), |mut h| h.restore())
        }
        Some(wanted) => set_sweep_iface(opts, held, iface, wanted),
    };
    if let Err(e) = done {
        return Err(refuse(ctl, peer, e.0));
    }
    let mut w = ctl;
    proto::write_msg(
        &mut w,
        &Msg::Configured {
            iface: iface.clone(),
        },
    )
    .map_err(|e| failed(format!("{peer}: {e}")))?;
    Ok(None)
}

/// Checks `wanted`, records `iface` at the first change, and sets it.
fn set_sweep_iface(
    opts: &ServerOpts,
    held: &Held,
    iface: &str,
    wanted: &crate::iface::Wanted,
) -> Result<(), crate::iface::IfaceError> {
    wanted.validate()?;
    let mut h = held.lock().unwrap_or_else(|p| p.into_inner());
    let h = match &mut *h {
        Some(h) => h,
        empty => {
            let (x, earlier) = crate::iface::hold(iface)?;
            if earlier && opts.verbose {
                eprintln!(
                    "ipoib-eval server: {iface}: restoring to the record an earlier run left"
                );
            }
            empty.insert(x)
        }
    };
    crate::iface::apply(h.saved(), wanted)
}
