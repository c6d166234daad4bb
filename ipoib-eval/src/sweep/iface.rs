//! Points over a real interface and its peer: this end set from its
//! record, the peer's through its server's `--sweep-iface`, this end's
//! queues watched.

use std::net::IpAddr;
use std::time::Duration;

use super::queues::{ip_proto, QueueColumns};
use super::rows::{Settings, SweepRow};
use super::{Point, Policy};
use crate::run::{run_client, ClientOpts, RunError};
use crate::spec::{self, SpecError};

/// The peer's interface, as a sweep changes it: told to restore when this
/// value goes, or when the process is interrupted.
pub(super) struct PeerHeld {
    peer: String,
    port: u16,
    _undo: fabkit_netns::cleanup::Registered,
}

impl PeerHeld {
    pub(super) fn new(peer: &str, port: u16) -> PeerHeld {
        let (p, q) = (peer.to_string(), port);
        PeerHeld {
            peer: peer.to_string(),
            port,
            _undo: fabkit_netns::cleanup::register(move || restore_peer_or_say(&p, q)),
        }
    }
}

impl Drop for PeerHeld {
    fn drop(&mut self) {
        restore_peer_or_say(&self.peer, self.port);
    }
}

fn restore_peer_or_say(peer: &str, port: u16) {
    if let Err(e) = crate::run::restore_peer(peer, port, Duration::from_secs(60)) {
        eprintln!("ipoib-eval: {e} (the peer restores its interface when its server ends)");
    }
}

/// Refuses points a real interface cannot run.
pub(super) fn check_for_iface(points: &[Point]) -> Result<(), SpecError> {
    for p in points {
        if p.policy == Policy::Rr && p.test.direction != spec::Direction::Forward {
            return Err(SpecError(format!(
                "experiment {}: policy rr on a real interface needs direction forward (the \
                 selector runs on this end's interface only)",
                p.experiment
            )));
        }
        if p.gateway.is_some() {
            return Err(SpecError(format!(
                "experiment {}: gateway points need the testbed (the sweep builds the gateway); \
                 drop the gateway axis to run on a real interface",
                p.experiment
            )));
        }
        if p.iperf3 {
            return Err(SpecError(format!(
                "experiment {}: send iperf3 runs on the testbed only; run `iperf3 -c` by hand \
                 on a real interface",
                p.experiment
            )));
        }
    }
    Ok(())
}

/// What a point asks of each end's interface.
fn wanted(p: &Point) -> crate::iface::Wanted {
    crate::iface::Wanted {
        queues: p.queues,
        mtu: p.mtu,
        offloads: p.offloads.clone(),
        qdisc: p.qdisc.clone(),
        txqueuelen: p.txqueuelen,
        xps: p.policy == Policy::Xps,
    }
}

/// Runs one point over a real interface: sets this end (from its record
/// `saved`) and the peer's, watches this end's queues, runs our client
/// against the peer's server. The peer's queues are not watched: forward
/// points have TX columns, reverse points RX columns.
pub(super) fn run_point_iface(
    p: &Point,
    saved: &crate::iface::Saved,
    peer: &str,
    port: u16,
) -> Result<Vec<SweepRow>, RunError> {
    let failed = |e: &dyn std::fmt::Display| RunError::Failed(e.to_string());
    let iface = &saved.iface;
    let w = wanted(p);
    crate::iface::apply(saved, &w).map_err(|e| failed(&e))?;
    crate::run::configure_peer(peer, port, &w, Duration::from_secs(60))?;
    let _rr = match p.policy {
        Policy::Rr => Some(
            fabkit_ebpf::RoundRobin::attach(None, iface, usize::from(p.queues))
                .map_err(|e| failed(&e))?,
        ),
        Policy::Hash | Policy::Xps => None,
    };
    // The flow's two addresses: ours is the one the kernel picks toward the peer.
    let peer_ip: IpAddr = peer.parse().map_err(|_| {
        failed(&format!(
            "--peer {peer}: give the peer's address, not a name"
        ))
    })?;
    let local = std::net::UdpSocket::bind((
        if peer_ip.is_ipv4() {
            IpAddr::from([0, 0, 0, 0])
        } else {
            IpAddr::from([0u16; 8])
        },
        0,
    ))
    .and_then(|s| s.connect((peer_ip, port)).and_then(|()| s.local_addr()))
    .map_err(|e| failed(&format!("finding the local address toward {peer}: {e}")))?
    .ip();
    // The flows must leave through the interface being set.
    let via = crate::stats::iface::iface_of(local);
    if via.as_deref() != Some(iface.as_str()) {
        return Err(RunError::Usage(SpecError(format!(
            "the route to {peer} leaves through {} ({local}), not {iface}: give --peer the \
             peer's address on {iface}",
            via.as_deref().unwrap_or("no interface")
        ))));
    }
    let (addr_a, addr_b) = match (local, peer_ip) {
        (IpAddr::V4(a), IpAddr::V4(b)) => (Some(a), Some(b)),
        // IPv6 flows count by protocol alone on this interface.
        _ => (None, None),
    };
    let rule = fabkit_ebpf::Rule {
        proto: ip_proto(p.test.proto),
        addr_a,
        addr_b,
        ..fabkit_ebpf::Rule::default()
    };
    let view = fabkit_ebpf::Iface::lookup(None, iface)
        .and_then(|i| fabkit_ebpf::QueueView::attach(i, &[rule], usize::from(p.queues)))
        .map_err(|e| failed(&e))?;
    let report = run_client(
        &p.test,
        &ClientOpts {
            host: peer.to_string(),
            port,
            cpus: p.client_cpus.clone(),
            unconnected_udp: p.unconnected(),
            ..ClientOpts::default()
        },
    )?;
    let counts = view.read().map_err(|e| failed(&e))?;
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
    let queues = match p.test.direction {
        spec::Direction::Reverse => QueueColumns::of(p, None, Some(&counts), cpus),
        _ => QueueColumns::of(p, Some(&counts), None, cpus),
    };
    Ok(report
        .rows()
        .into_iter()
        .map(|r| SweepRow(Settings::of(p), r, queues.clone()))
        .collect())
}
