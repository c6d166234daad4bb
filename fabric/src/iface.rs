//! A libfabric domain named by a network (`10.77.1.0/24`): the interface of
//! this host that has an address in it.

use fabkit_core::net::{in_network, interface_addresses};
use fabkit_core::Error as CoreError;

use crate::error::{Error, Result};

/// The interface of this host with an address inside `addr/prefix`.
pub(crate) fn interface_in(addr: &str, prefix: &str) -> Result<String> {
    let bad = |why: &str| {
        Error::from(CoreError::InvalidArgument(format!(
            "domain `{addr}/{prefix}`: {why}; give an interface name (eth0) or a network \
             such as 10.77.1.0/24"
        )))
    };
    let net: std::net::IpAddr = addr.parse().map_err(|_| bad("not an IP address"))?;
    let bits: u32 = prefix
        .parse()
        .map_err(|_| bad("the prefix is not a number"))?;
    let width = if net.is_ipv4() { 32 } else { 128 };
    if bits > width {
        return Err(bad(&format!("the prefix is longer than {width} bits")));
    }
    let mut found: Vec<String> = Vec::new();
    let all = interface_addresses().map_err(|e| Error::Call {
        call: "getifaddrs",
        code: e.raw_os_error().unwrap_or(0),
        msg: e.to_string(),
    })?;
    for a in all {
        if a.up && in_network(a.addr, net, bits) && !found.contains(&a.name) {
            found.push(a.name);
        }
    }
    match found.len() {
        1 => Ok(found.remove(0)),
        0 => Err(Error::from(CoreError::InvalidArgument(format!(
            "no interface of this host that is up has an address in {addr}/{prefix} \
             (see `ip -br addr`); give the network the ranks share"
        )))),
        _ => Err(Error::from(CoreError::InvalidArgument(format!(
            "{addr}/{prefix} matches several interfaces here ({}); give a narrower network",
            found.join(", ")
        )))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_network_names_the_interface_that_has_an_address_in_it() {
        assert_eq!(interface_in("127.0.0.0", "8").unwrap(), "lo");
        let none = interface_in("198.51.100.0", "24").unwrap_err().to_string();
        assert!(none.contains("no interface of this host"), "{none}");
        for (a, p) in [
            ("10.0.0.0", "33"),
            ("10.0.0.0", "x"),
            ("ten", "8"),
            ("::", "129"),
        ] {
            let e = interface_in(a, p).unwrap_err().to_string();
            assert!(e.contains(&format!("`{a}/{p}`")), "{e}");
        }
    }
}
