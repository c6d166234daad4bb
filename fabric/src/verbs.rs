//! RDMA device facts through libibverbs (rdma-sys): what `ibv_devinfo`
//! shows, in the few fields that matter for choosing a provider and sizing
//! its queues.

use serde::Serialize;

/// One port of an RDMA device.
#[derive(Debug, Serialize)]
pub struct Port {
    /// Port number (from 1).
    pub port: u8,
    /// ACTIVE, DOWN, INIT, ...
    pub state: String,
    /// InfiniBand, or Ethernet (RoCE).
    pub link_layer: String,
    /// Active MTU in bytes.
    pub active_mtu: u32,
    /// Lane width times per-lane speed, e.g. "4x 25 Gb/s".
    pub speed: String,
    /// Non-zero GIDs, as IPv6-style text.
    pub gids: Vec<String>,
}

/// One RDMA device.
#[derive(Debug, Serialize)]
pub struct Device {
    /// Device name, e.g. mlx5_0.
    pub name: String,
    /// Most entries one completion queue may hold (`max_cqe`); 0 when the
    /// device could not be queried.
    pub max_cqe: u32,
    /// Its ports.
    pub ports: Vec<Port>,
}

/// The RDMA devices of this machine, or why there are none.
#[derive(Debug, Serialize)]
pub struct Devices {
    /// Devices found.
    pub devices: Vec<Device>,
    /// Set when none were found: the reason, in plain words.
    pub none_because: Option<String>,
}

#[cfg_attr(not(feature = "verbs"), allow(dead_code))] // decoders of libibverbs' codes
fn mtu_bytes(code: u32) -> u32 {
    match code {
        1..=5 => 128 << code,
        _ => 0,
    }
}

#[cfg_attr(not(feature = "verbs"), allow(dead_code))] // decoders of libibverbs' codes
fn state_name(code: u32) -> &'static str {
    match code {
        1 => "DOWN",
        2 => "INIT",
        3 => "ARMED",
        4 => "ACTIVE",
        5 => "ACTIVE_DEFER",
        _ => "NOP",
    }
}

#[cfg_attr(not(feature = "verbs"), allow(dead_code))] // decoders of libibverbs' codes
fn speed(width: u8, speed: u8) -> String {
    let lanes = match width {
        1 => 1,
        2 => 4,
        4 => 8,
        8 => 12,
        16 => 2,
        _ => 0,
    };
    let gbps = match speed {
        1 => 2.5,
        2 => 5.0,
        4 | 8 => 10.0,
        16 => 14.0,
        32 => 25.0,
        64 => 50.0,
        128 => 100.0,
        _ => 0.0,
    };
    format!("{lanes}x {gbps} Gb/s")
}

/// Lists devices and their ports. Never fails: no device is an answer.
pub fn devices() -> Devices {
    scan(true)
}

/// Lists devices with their `max_cqe` only, without querying ports and
/// GIDs: what every fabkit process asks at start (see [`crate::env`]).
pub fn queue_limits() -> Devices {
    scan(false)
}

#[cfg(feature = "verbs")]
fn scan(with_ports: bool) -> Devices {
    use rdma_sys as v;
    use std::ffi::CStr;

    let mut n = 0;
    // SAFETY: n is a valid out-parameter; the list is freed below.
    let list = unsafe { v::ibv_get_device_list(&mut n) };
    if list.is_null() {
        let err = std::io::Error::last_os_error();
        return Devices {
            devices: Vec::new(),
            none_because: Some(format!(
                "libibverbs found no RDMA devices ({err}); this kernel or machine has no \
                 InfiniBand/RoCE support, so use shm, tcp;ofi_rxm or sockets"
            )),
        };
    }
    let mut devices = Vec::new();
    for i in 0..n.max(0) as usize {
        // SAFETY: the list holds n valid device pointers.
        let dev = unsafe { *list.add(i) };
        // SAFETY: dev is valid; the name is a NUL-terminated string it owns.
        let name = unsafe { CStr::from_ptr(v::ibv_get_device_name(dev)) }
            .to_string_lossy()
            .into_owned();
        let mut ports = Vec::new();
        let mut max_cqe = 0;
        // SAFETY: dev is valid; a null context means the open failed.
        let ctx = unsafe { v::ibv_open_device(dev) };
        if !ctx.is_null() {
            // SAFETY: all-zero is a valid ibv_device_attr (plain integers).
            let mut dattr: v::ibv_device_attr = unsafe { std::mem::zeroed() };
            // SAFETY: ctx is open; dattr is a valid out-parameter.
            let nports = if unsafe { v::ibv_query_device(ctx, &mut dattr) } == 0 {
                max_cqe = u32::try_from(dattr.max_cqe).unwrap_or(0);
                if with_ports {
                    dattr.phys_port_cnt
                } else {
                    0
                }
            } else {
                0
            };
            for port in 1..=nports {
                // SAFETY: all-zero is a valid ibv_port_attr.
                let mut pa: v::ibv_port_attr = unsafe { std::mem::zeroed() };
                // SAFETY: ctx open, port in range, pa a valid out-parameter.
                if unsafe { v::___ibv_query_port(ctx, port, &mut pa) } != 0 {
                    continue;
                }
                let mut gids = Vec::new();
                for idx in 0..pa.gid_tbl_len.min(8) {
                    // SAFETY: all-zero is a valid ibv_gid.
                    let mut gid: v::ibv_gid = unsafe { std::mem::zeroed() };
                    // SAFETY: ctx open, index within the table, gid valid.
                    if unsafe { v::ibv_query_gid(ctx, port, idx, &mut gid) } == 0 {
                        // SAFETY: the union's raw view is always initialised.
                        let raw = unsafe { gid.raw };
                        if raw.iter().any(|&b| b != 0) {
                            gids.push(std::net::Ipv6Addr::from(raw).to_string());
                        }
                    }
                }
                ports.push(Port {
                    port,
                    state: state_name(pa.state).into(),
                    link_layer: match pa.link_layer {
                        1 => "InfiniBand".into(),
                        2 => "Ethernet (RoCE)".into(),
                        x => format!("unspecified ({x})"),
                    },
                    active_mtu: mtu_bytes(pa.active_mtu),
                    speed: speed(pa.active_width, pa.active_speed),
                    gids,
                });
            }
            // SAFETY: ctx was opened above and is closed once.
            unsafe { v::ibv_close_device(ctx) };
        }
        devices.push(Device {
            name,
            max_cqe,
            ports,
        });
    }
    // SAFETY: list came from ibv_get_device_list.
    unsafe { v::ibv_free_device_list(list) };
    let none_because = devices
        .is_empty()
        .then(|| "libibverbs lists no RDMA devices on this machine".to_string());
    Devices {
        devices,
        none_because,
    }
}

/// Without the `verbs` feature there is nothing to ask.
#[cfg(not(feature = "verbs"))]
fn scan(_with_ports: bool) -> Devices {
    Devices {
        devices: Vec::new(),
        none_because: Some("fabkit was built without the `verbs` feature".into()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decodes_port_attributes_like_ibv_devinfo() {
        assert_eq!(mtu_bytes(5), 4096);
        assert_eq!(mtu_bytes(3), 1024);
        assert_eq!(mtu_bytes(0), 0);
        assert_eq!(speed(2, 32), "4x 25 Gb/s"); // EDR
        assert_eq!(speed(2, 64), "4x 50 Gb/s"); // HDR
        assert_eq!(state_name(4), "ACTIVE");
    }

    #[test]
    fn no_device_is_an_answer_not_a_crash() {
        let d = devices();
        // Either devices, or a reason; never both empty.
        assert!(!d.devices.is_empty() || d.none_because.is_some());
    }
}
