//! The client: one test against a server, its report assembled from both
//! ends' measurements.

use std::io::Write;
use std::net::{IpAddr, SocketAddr, TcpStream};
use std::sync::Arc;

use super::phase::{data_phase, Phase};
use super::socket::{
    connect, port_of, resolve, stream, udp_bound, udp_connected, with_port, TCP_HELLO,
};
use super::stream::role_of;
use super::{failed, host_info, RunError};
use crate::proto::{self, Msg};
use crate::report::{Report, Role};
use crate::spec::{Proto, TestSpec};

/// Where and how the client connects.
#[derive(Clone, Debug, Default)]
pub struct ClientOpts {
    /// Server host name or address (IPv6 link-local with `%iface`).
    pub host: String,
    /// Control port.
    pub port: u16,
    /// Local address to bind (`-B`).
    pub bind: Option<IpAddr>,
    /// Interface to bind (`--dev`).
    pub dev: Option<String>,
    /// `Some(true)` IPv4 only, `Some(false)` IPv6 only.
    pub v4: Option<bool>,
    /// CPUs for the client's stream threads.
    pub cpus: Vec<usize>,
    /// UDP streams with send path `send` use unconnected sockets and
    /// sendto(2): no route and no TX queue is cached per socket, so a tc
    /// program's queue choice holds packet by packet (the round-robin
    /// policy). Other paths stay connected.
    pub unconnected_udp: bool,
    /// Print interval lines live.
    pub print_intervals: bool,
}

/// Runs one test against a server; returns the assembled report.
pub fn run_client(spec: &TestSpec, opts: &ClientOpts) -> Result<Report, RunError> {
    spec.validate()?;
    let addr = resolve(&opts.host, opts.port, opts.v4)?;
    let to = spec.timeout();
    let bind = opts.bind.map(|ip| SocketAddr::new(ip, 0));
    let ctl_sock = connect(addr, bind, opts.dev.as_deref(), to).map_err(|e| {
        failed(format!(
            "cannot reach the server at {addr}: {e} (is `ipoib-eval server -p {}` running there?)",
            opts.port
        ))
    })?;
    let ctl: TcpStream = ctl_sock.into();
    ctl.set_write_timeout(Some(to))
        .map_err(|e| failed(e.to_string()))?;
    ctl.set_nodelay(true).map_err(|e| failed(e.to_string()))?;
    let local = ctl.local_addr().map_err(|e| failed(e.to_string()))?;
    let peer = format!("server {addr}");
    let mut w = &ctl;
    proto::write_msg(
        &mut w,
        &Msg::Hello {
            spec: spec.clone(),
            client: host_info(),
        },
    )
    .map_err(|e| failed(format!("sending the test to {peer}: {e}")))?;
    let read = |what: &str| {
        proto::read_msg_within(&ctl, to)
            .map_err(|e| failed(format!("waiting for {what} from {peer}: {e}")))
    };
    let (ports, cookie) = match read("Ready")? {
        Msg::Ready { ports, cookie, .. } => (ports, cookie),
        Msg::Refused { reason } => {
            return Err(failed(format!("{peer} refused the test: {reason}")))
        }
        Msg::Error { message } => return Err(failed(format!("{peer} failed: {message}"))),
        other => {
            return Err(failed(format!(
                "{peer} answered {} instead of Ready",
                other.name()
            )))
        }
    };
    let plan = spec.plan();
    let mut warnings = Vec::new();
    let mut streams = Vec::new();
    let mut udp_ports = Vec::new();
    for p in &plan {
        let role = role_of(p, true);
        let mut dest = None;
        let unconnected = opts.unconnected_udp
            && spec.send == crate::spec::SendPath::Send
            && role == Role::Sender;
        let sock = match spec.proto {
            Proto::Tcp => {
                let port = *ports
                    .first()
                    .ok_or_else(|| failed(format!("{peer} gave no data port")))?;
                let s = connect(with_port(addr, port), Some(local), opts.dev.as_deref(), to)
                    .map_err(|e| {
                        failed(format!(
                            "stream {}: connecting to {peer} data port {port}: {e}",
                            p.id
                        ))
                    })?;
                let mut hello = [0u8; TCP_HELLO];
                hello[..4].copy_from_slice(&proto::MAGIC);
                hello[4..12].copy_from_slice(&cookie.to_le_bytes());
                hello[12..14].copy_from_slice(&p.id.to_le_bytes());
                s.set_write_timeout(Some(to))
                    .map_err(|e| failed(e.to_string()))?;
                (&s).write_all(&hello)
                    .map_err(|e| failed(format!("stream {}: greeting {peer}: {e}", p.id)))?;
                s
            }
            Proto::Udp => {
                let port = *ports.get(usize::from(p.id)).ok_or_else(|| {
                    failed(format!(
                        "{peer} gave {} data ports for {} streams",
                        ports.len(),
                        plan.len()
                    ))
                })?;
                let to = with_port(addr, port);
                let s = if unconnected {
                    dest = Some(to);
                    udp_bound(local)
                } else {
                    udp_bound(local).and_then(|s| udp_connected(s, to))
                }
                .map_err(|e| failed(format!("stream {}: a UDP socket to {peer}: {e}", p.id)))?;
                udp_ports.push(port_of(&s));
                s
            }
        };
        streams.push(stream(
            *p,
            role,
            sock,
            dest,
            spec,
            opts.dev.as_deref(),
            &mut warnings,
        )?);
    }
    let ph = Phase {
        spec: Arc::new(spec.clone()),
        ctl: &ctl,
        peer: peer.clone(),
        cpus: &opts.cpus,
        print: opts.print_intervals,
        local_addr: local.ip(),
        running: None,
    };
    let handshake = || {
        let mut w = &ctl;
        proto::write_msg(
            &mut w,
            &Msg::Start {
                ports: udp_ports.clone(),
            },
        )
        .map_err(|e| failed(format!("sending Start to {peer}: {e}")))?;
        match read("Go")? {
            Msg::Go => Ok(()),
            Msg::Error { message } => Err(failed(format!("{peer} failed: {message}"))),
            other => Err(failed(format!(
                "{peer} answered {} instead of Go",
                other.name()
            ))),
        }
    };
    let (mut mine, theirs) = data_phase(ph, streams, handshake)?;
    mine.warnings.extend(warnings);
    let mut r = Report::assemble(spec, addr.to_string(), mine, theirs);
    r.command = std::env::args().collect::<Vec<_>>().join(" ");
    r.commit = crate::COMMIT.into();
    r.started_unix = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    Ok(r)
}
