//! Data and control sockets: their options (`-w`, `--dev`, `TCP_NODELAY`),
//! addresses, and the connected UDP sockets both ends use.

use std::io;
use std::net::{IpAddr, SocketAddr, ToSocketAddrs};
use std::os::fd::AsFd;
use std::time::Duration;

use socket2::{Domain, Protocol, SockAddr, Socket, Type};

use super::stream::Stream;
use super::{failed, RunError};
use crate::report::{BufSize, Role};
use crate::spec::{Proto, StreamPlan, TestSpec};
use crate::sys;

/// Data connection header: magic, cookie, stream id.
pub(super) const TCP_HELLO: usize = 16;

pub(super) fn family_of(ip: IpAddr) -> Domain {
    if ip.is_ipv4() {
        Domain::IPV4
    } else {
        Domain::IPV6
    }
}

/// Sets `-w` on a data socket, past `[rw]mem_max` with `SO_*BUFFORCE` when
/// privileged, and says what the kernel granted.
fn set_buffer(sock: &Socket, want: usize, role: Role) -> io::Result<BufSize> {
    let (opt, force) = match role {
        Role::Sender => (libc::SO_SNDBUF, libc::SO_SNDBUFFORCE),
        Role::Receiver => (libc::SO_RCVBUF, libc::SO_RCVBUFFORCE),
    };
    let want_c = libc::c_int::try_from(want).unwrap_or(libc::c_int::MAX);
    sys::set_int(sock.as_fd(), libc::SOL_SOCKET, opt, want_c)?;
    let mut got = sys::get_int(sock.as_fd(), libc::SOL_SOCKET, opt)? as usize;
    let mut forced = false;
    // The kernel doubles what it grants; half of it is the usable size.
    if got / 2 < want && sys::set_int(sock.as_fd(), libc::SOL_SOCKET, force, want_c).is_ok() {
        got = sys::get_int(sock.as_fd(), libc::SOL_SOCKET, opt)? as usize;
        forced = true;
    }
    Ok(BufSize {
        asked: want,
        got,
        forced,
    })
}

fn buffer_warning(b: &BufSize, role: Role) -> Option<String> {
    (b.got / 2 < b.asked).then(|| {
        let sysctl = if role == Role::Sender {
            "wmem_max"
        } else {
            "rmem_max"
        };
        format!(
            "-w {} B was capped at {} B by net.core.{sysctl} (raise it, or run as root to force)",
            b.asked,
            b.got / 2
        )
    })
}

/// A data stream of this end, its socket prepared (`dest`: where an
/// unconnected UDP socket sends to).
pub(super) fn stream(
    plan: StreamPlan,
    role: Role,
    sock: Socket,
    dest: Option<SocketAddr>,
    spec: &TestSpec,
    dev: Option<&str>,
    warnings: &mut Vec<String>,
) -> Result<Stream, RunError> {
    let buffer = prepare(&sock, spec, role, dev, warnings)?;
    Ok(Stream {
        plan,
        role,
        sock,
        dest,
        buffer,
    })
}

/// Options every data socket gets.
fn prepare(
    sock: &Socket,
    spec: &TestSpec,
    role: Role,
    dev: Option<&str>,
    warnings: &mut Vec<String>,
) -> Result<Option<BufSize>, RunError> {
    if let Some(d) = dev {
        sock.bind_device(Some(d.as_bytes()))
            .map_err(|e| failed(format!("binding to interface {d}: {e} (SO_BINDTODEVICE needs root and an existing interface)")))?;
    }
    if spec.proto == Proto::Tcp && (spec.nodelay || spec.rr) {
        sock.set_tcp_nodelay(true)
            .map_err(|e| failed(format!("TCP_NODELAY: {e}")))?;
    }
    let Some(w) = spec.window else {
        return Ok(None);
    };
    let b = set_buffer(sock, w, role).map_err(|e| failed(format!("setting -w {w}: {e}")))?;
    if let Some(x) = buffer_warning(&b, role) {
        if !warnings.contains(&x) {
            warnings.push(x);
        }
    }
    Ok(Some(b))
}

pub(super) fn resolve(
    host: &str,
    port: u16,
    want_v4: Option<bool>,
) -> Result<SocketAddr, RunError> {
    let addrs: Vec<SocketAddr> = (host, port)
        .to_socket_addrs()
        .map_err(|e| failed(format!("cannot resolve `{host}`: {e}")))?
        .collect();
    addrs
        .iter()
        .find(|a| want_v4.is_none_or(|v4| a.is_ipv4() == v4))
        .copied()
        .ok_or_else(|| {
            failed(format!(
                "`{host}` has no {} address",
                if want_v4 == Some(true) {
                    "IPv4"
                } else {
                    "IPv6"
                }
            ))
        })
}

/// `a` with another port; an IPv6 scope (link-local interface) is kept.
pub(super) fn with_port(a: SocketAddr, port: u16) -> SocketAddr {
    let mut a = a;
    a.set_port(port);
    a
}

/// A UDP socket bound to `local` (port 0) and connected to `peer`; anything
/// that reached it between bind and connect is thrown away, so a stranger's
/// early datagram is never counted.
pub(super) fn udp_connected(sock: Socket, peer: SocketAddr) -> io::Result<Socket> {
    sock.connect(&SockAddr::from(peer))?;
    sock.set_nonblocking(true)?;
    let mut junk = [0u8; 64];
    while crate::recv::recv_into(&sock, &mut junk).is_ok() {}
    sock.set_nonblocking(false)?;
    Ok(sock)
}

pub(super) fn udp_bound(local: SocketAddr) -> io::Result<Socket> {
    let s = Socket::new(family_of(local.ip()), Type::DGRAM, Some(Protocol::UDP))?;
    s.bind(&SockAddr::from(with_port(local, 0)))?;
    Ok(s)
}

pub(super) fn port_of(s: &Socket) -> u16 {
    s.local_addr()
        .ok()
        .and_then(|a| a.as_socket())
        .map_or(0, |a| a.port())
}

pub(super) fn connect(
    addr: SocketAddr,
    bind: Option<SocketAddr>,
    dev: Option<&str>,
    timeout: Duration,
) -> io::Result<Socket> {
    let s = Socket::new(family_of(addr.ip()), Type::STREAM, Some(Protocol::TCP))?;
    if let Some(d) = dev {
        s.bind_device(Some(d.as_bytes()))?;
    }
    if let Some(b) = bind {
        s.bind(&SockAddr::from(with_port(b, 0)))?;
    }
    s.connect_timeout(&SockAddr::from(addr), timeout)?;
    Ok(s)
}
