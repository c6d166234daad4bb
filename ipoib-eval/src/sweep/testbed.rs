//! Points on a testbed of their own: namespaces and a veth pair built with
//! the point's settings, the queue policy set, eBPF views on both ends,
//! our server and client (or iperf3's) run in the two hosts.

use std::net::IpAddr;
use std::time::Duration;

use super::queues::{ip_proto, QueueColumns};
use super::rows::{Settings, SweepRow};
use super::{Point, Policy};
use crate::report::CsvRow;
use crate::run::{run_client, ClientOpts, RunError, Server, ServerOpts};
use crate::spec;
use fabkit_netns::testbed::{self, Testbed, TestbedSpec};

/// Sets the TX queue policy on `iface` in `netns`: XPS cleared (the
/// kernel's flow hash, and under round-robin) or CPU `c` mapped to queue
/// `c mod queues`. Round-robin also attaches its selector, returned: it
/// stays attached while the value lives.
fn apply_policy(
    netns: &str,
    iface: &str,
    queues: u16,
    policy: Policy,
    cpus: usize,
) -> Result<Option<fabkit_ebpf::RoundRobin>, RunError> {
    if queues == 1 {
        // One queue: every policy is the same, and the kernel refuses XPS
        // maps on a single-queue device (EIO).
        return Ok(None);
    }
    for q in 0..usize::from(queues) {
        let mask = match policy {
            Policy::Hash | Policy::Rr => "0".to_string(),
            Policy::Xps => crate::iface::xps_mask(cpus, usize::from(queues), q),
        };
        testbed::write_sys(
            netns,
            &format!("class/net/{iface}/queues/tx-{q}/xps_cpus"),
            &mask,
        )
        .map_err(|e| RunError::Failed(e.to_string()))?;
    }
    if policy != Policy::Rr {
        return Ok(None);
    }
    fabkit_ebpf::RoundRobin::attach(Some(netns), iface, usize::from(queues))
        .map(Some)
        .map_err(|e| RunError::Failed(e.to_string()))
}

/// Runs one point on a testbed of its own: the server in the `b` host, the
/// client in the `a` host, eBPF views on both ends' data interfaces.
/// Returns its CSV rows (one per direction).
pub fn run_point(p: &Point) -> Result<Vec<SweepRow>, RunError> {
    let failed = |e: &dyn std::fmt::Display| RunError::Failed(e.to_string());
    let tb = Testbed::up(TestbedSpec {
        gateway: p.gateway.is_some(),
        mtu_b: p.gateway.unwrap_or(p.mtu),
        queues: p.queues,
        mtu: p.mtu,
        offloads: p.offloads.clone(),
        qdisc: p.qdisc.clone(),
        txqueuelen: Some(p.txqueuelen),
        ..TestbedSpec::default()
    })
    .map_err(|e| failed(&e))?;
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
    let _rr_a = apply_policy(&tb.a.netns, &tb.a.iface, p.queues, p.policy, cpus)?;
    let _rr_b = apply_policy(&tb.b.netns, &tb.b.iface, p.queues, p.policy, cpus)?;
    let proto = ip_proto(p.test.proto);
    let (IpAddr::V4(a4), IpAddr::V4(b4)) = (tb.a.addr, tb.b.addr) else {
        return Err(failed(&"the testbed's addresses are IPv4"));
    };
    let rule = fabkit_ebpf::Rule {
        proto,
        addr_a: Some(a4),
        addr_b: Some(b4),
        ..fabkit_ebpf::Rule::default()
    };
    let view = |netns: &str, iface: &str| {
        fabkit_ebpf::Iface::lookup(Some(netns), iface)
            .and_then(|i| fabkit_ebpf::QueueView::attach(i, &[rule], usize::from(p.queues)))
            .map_err(|e| failed(&e))
    };
    let tx_view = view(&tb.a.netns, &tb.a.iface)?;
    let rx_view = view(&tb.b.netns, &tb.b.iface)?;
    let rows = if p.iperf3 {
        let ends = crate::iperf3::Ends {
            server_ns: &tb.b.netns,
            client_ns: &tb.a.netns,
            server_addr: tb.b.addr.to_string(),
            client_cpu: p.client_cpus.first().copied(),
        };
        let (m, busy) = crate::iperf3::run(&p.test, &ends)?;
        vec![crate::iperf3::row(
            &p.test,
            &m,
            busy,
            &crate::run::host_info().kernel,
        )]
    } else {
        measure(p, &tb)?
    };
    let (mut tx, mut rx) = (
        tx_view.read().map_err(|e| failed(&e))?,
        rx_view.read().map_err(|e| failed(&e))?,
    );
    if p.test.direction == spec::Direction::Reverse {
        // Host b sent: its view has the TX queues, a's the RX queues.
        std::mem::swap(&mut tx, &mut rx);
    }
    let queues = QueueColumns::of(p, Some(&tx), Some(&rx), cpus);
    Ok(rows
        .into_iter()
        .map(|r| SweepRow(Settings::of(p), r, queues.clone()))
        .collect())
}

/// Runs our server in host b and our client in host a: the report's CSV
/// rows (one per direction).
fn measure(p: &Point, tb: &Testbed) -> Result<Vec<CsvRow>, RunError> {
    let failed = |e: &dyn std::fmt::Display| RunError::Failed(e.to_string());
    let (port_tx, port_rx) = std::sync::mpsc::channel();
    let server_ns = tb.b.netns.clone();
    let server = std::thread::spawn(move || -> Result<(), RunError> {
        testbed::enter(&server_ns).map_err(|e| RunError::Failed(e.to_string()))?;
        let s = Server::bind(ServerOpts {
            port: 0,
            verbose: false,
            ..ServerOpts::default()
        });
        let s = match s {
            Ok(s) => s,
            Err(e) => {
                let _ = port_tx.send(None);
                return Err(e);
            }
        };
        let _ = port_tx.send(Some(s.port()));
        s.serve(true)
    });
    let port = port_rx
        .recv_timeout(Duration::from_secs(10))
        .ok()
        .flatten()
        .ok_or_else(|| failed(&"the sweep's server did not start"))?;
    let client_ns = tb.a.netns.clone();
    let test = p.test.clone();
    let host = tb.b.addr.to_string();
    let (client_cpus, unconnected_udp) = (p.client_cpus.clone(), p.unconnected());
    let report = std::thread::spawn(move || {
        testbed::enter(&client_ns).map_err(|e| RunError::Failed(e.to_string()))?;
        let r = run_client(
            &test,
            &ClientOpts {
                host: host.clone(),
                port,
                cpus: client_cpus,
                unconnected_udp,
                ..ClientOpts::default()
            },
        );
        if r.is_err() {
            // The server may still wait in accept: one empty connection
            // ends its session.
            let _ = std::net::TcpStream::connect_timeout(
                &std::net::SocketAddr::new(
                    host.parse().unwrap_or(IpAddr::from([127, 0, 0, 1])),
                    port,
                ),
                Duration::from_secs(2),
            );
        }
        r
    })
    .join()
    .map_err(|_| failed(&"the sweep's client panicked"))?;
    let served = server
        .join()
        .map_err(|_| failed(&"the sweep's server panicked"))?;
    let report = report?;
    served?;
    Ok(report.rows())
}
