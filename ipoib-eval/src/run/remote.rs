//! A sweep on a real interface sets the peer's side too: the client's
//! requests that the server set its `--sweep-iface` (the server's side,
//! recording it at the first change and putting it back on `Restore` or
//! when it ends, is `server::configure`).

use std::net::TcpStream;
use std::time::Duration;

use super::socket::{connect, resolve};
use super::{failed, RunError};
use crate::proto::{self, Msg};

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
