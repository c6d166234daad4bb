//! The addresses of this host's network interfaces: one `getifaddrs` walk,
//! for whoever needs to turn a network or an address into an interface
//! (a libfabric domain given as `10.77.1.0/24`, the interface a socket is
//! bound on).

use std::net::IpAddr;

/// One address of one interface.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct IfAddr {
    /// The interface's name (`eth0`).
    pub name: String,
    /// The address.
    pub addr: IpAddr,
    /// Whether the interface is up (`IFF_UP`).
    pub up: bool,
}

/// Every IPv4 and IPv6 address of every interface of this thread's network
/// namespace (`getifaddrs(3)`).
#[allow(unsafe_code)]
pub fn interface_addresses() -> std::io::Result<Vec<IfAddr>> {
    let mut head: *mut libc::ifaddrs = std::ptr::null_mut();
    // SAFETY: getifaddrs writes a list it allocated to `head`.
    if unsafe { libc::getifaddrs(&mut head) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    let mut out = Vec::new();
    let mut cur = head;
    while !cur.is_null() {
        // SAFETY: `cur` is a node of the list getifaddrs returned, alive
        // until freeifaddrs below.
        let ifa = unsafe { &*cur };
        cur = ifa.ifa_next;
        let sa = ifa.ifa_addr;
        if sa.is_null() {
            continue;
        }
        // SAFETY: a non-null ifa_addr points at a sockaddr of the family it
        // names, so the cast to that family's sockaddr reads inside it.
        let addr = unsafe {
            match i32::from((*sa).sa_family) {
                libc::AF_INET => {
                    let sin = &*sa.cast::<libc::sockaddr_in>();
                    Some(IpAddr::from(
                        u32::from_be(sin.sin_addr.s_addr).to_be_bytes(),
                    ))
                }
                libc::AF_INET6 => {
                    let sin6 = &*sa.cast::<libc::sockaddr_in6>();
                    Some(IpAddr::from(sin6.sin6_addr.s6_addr))
                }
                _ => None,
            }
        };
        if let Some(addr) = addr {
            // SAFETY: ifa_name is a NUL-terminated string owned by the list.
            let name = unsafe { std::ffi::CStr::from_ptr(ifa.ifa_name) };
            out.push(IfAddr {
                name: name.to_string_lossy().into_owned(),
                addr,
                up: ifa.ifa_flags & libc::IFF_UP as u32 != 0,
            });
        }
    }
    // SAFETY: `head` came from getifaddrs and is freed once; nothing
    // borrowed from it outlives this line.
    unsafe { libc::freeifaddrs(head) };
    Ok(out)
}

/// Whether `a` lies in `net/bits` (`bits` at most the address width; an
/// IPv4 address is never in an IPv6 network, nor the reverse).
pub fn in_network(a: IpAddr, net: IpAddr, bits: u32) -> bool {
    use IpAddr::{V4, V6};
    let (a, n, width) = match (a, net) {
        (V4(a), V4(n)) => (u128::from(u32::from(a)), u128::from(u32::from(n)), 32),
        (V6(a), V6(n)) => (u128::from(a), u128::from(n), 128),
        _ => return false,
    };
    if bits > width {
        return false;
    }
    // Prefix 0 matches everything; checked_shl keeps a full-width shift defined.
    let mask = u128::MAX.checked_shl(width - bits).unwrap_or(0) & (u128::MAX >> (128 - width));
    a & mask == n & mask
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn loopback_is_listed_with_its_address() {
        let all = interface_addresses().unwrap();
        let lo = all.iter().find(|a| a.addr == IpAddr::from([127, 0, 0, 1]));
        let lo = lo.expect("127.0.0.1 on some interface");
        assert_eq!(lo.name, "lo");
        assert!(lo.up);
    }

    #[test]
    fn networks_match_by_prefix() {
        let ip = |s: &str| s.parse::<IpAddr>().unwrap();
        assert!(in_network(ip("10.77.1.2"), ip("10.77.1.0"), 24));
        assert!(!in_network(ip("10.77.2.2"), ip("10.77.1.0"), 24));
        assert!(in_network(ip("192.0.2.9"), ip("0.0.0.0"), 0));
        assert!(in_network(ip("10.0.0.1"), ip("10.0.0.1"), 32));
        assert!(!in_network(ip("10.0.0.2"), ip("10.0.0.1"), 32));
        assert!(in_network(ip("fd00::5"), ip("fd00::"), 64));
        assert!(!in_network(ip("fd01::5"), ip("fd00::"), 64));
        assert!(in_network(ip("::1"), ip("::1"), 128));
        assert!(
            !in_network(ip("10.0.0.1"), ip("::"), 0),
            "families never mix"
        );
        assert!(
            !in_network(ip("10.0.0.1"), ip("10.0.0.1"), 33),
            "longer than the width"
        );
    }
}
