//! A sweep on a real interface sets the peer's side too: the server's
//! `--sweep-iface`, recorded at the first change and put back on
//! `Restore` or when the server ends.

use std::net::TcpStream;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use super::server::{refuse, unmap, Held, ServerOpts};
use super::socket::{connect, resolve};
use super::{failed, RunError};
use crate::proto::{self, Msg};
use crate::report::Report;

/// Sets the server's `--sweep-iface` as a sweep point asks, recording it
/// first; answers `Configured` or `Refused`.
pub(super) fn configure(
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

/// Asks the server at `host:port` to set its `--sweep-iface` as `wanted`
/// (waiting up to `timeout`: a driver may reset its link); returns the
/// interface's name.
pub fn configure_peer(
    host: &str,
    port: u16,
    wanted: &crate::iface::Wanted,
    timeout: Duration,
) -> Result<String, RunError> {
    ask_peer(
        host,
        port,
        &Msg::Configure {
            wanted: wanted.clone(),
        },
        timeout,
    )
}

/// Asks the server at `host:port` to put its `--sweep-iface` back as it
/// recorded it; returns the interface's name.
pub fn restore_peer(host: &str, port: u16, timeout: Duration) -> Result<String, RunError> {
    ask_peer(host, port, &Msg::Restore, timeout)
}

/// Sends `msg` (`Configure` or `Restore`) on a connection of its own and
/// waits for `Configured`.
fn ask_peer(host: &str, port: u16, msg: &Msg, timeout: Duration) -> Result<String, RunError> {
    let addr = resolve(host, port, None)?;
    let ctl: TcpStream = connect(addr, None, None, timeout)
        .map_err(|e| {
            failed(format!(
                "cannot reach the server at {addr}: {e} (is `ipoib-eval server -p {port} \
                 --sweep-iface IFACE` running there?)"
            ))
        })?
        .into();
    ctl.set_write_timeout(Some(timeout))
        .map_err(|e| failed(e.to_string()))?;
    let mut w = &ctl;
    proto::write_msg(&mut w, msg)
        .map_err(|e| failed(format!("sending {} to server {addr}: {e}", msg.name())))?;
    match proto::read_msg_within(&ctl, timeout) {
        Ok(Msg::Configured { iface }) => Ok(iface),
        Ok(Msg::Refused { reason }) => Err(failed(format!(
            "server {addr} did not set its interface: {reason}"
        ))),
        Ok(other) => Err(failed(format!(
            "server {addr} answered {} instead of Configured",
            other.name()
        ))),
        Err(e) => Err(failed(format!(
            "waiting for server {addr} to set its interface: {e}"
        ))),
    }
}
