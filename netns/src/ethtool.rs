//! `ethtool -k` read once, for everyone who asks an interface's offload
//! features: the testbed (which names exist), and ipoib-eval (what a test
//! ran with, and the record a sweep puts back).
//!
//! The text form is read: `ethtool --json -k` exists only since ethtool
//! 6.x, and older ones print the same text for it.

/// One feature as `ethtool -k` prints it: `name: on|off`, then `[fixed]`
/// if the device cannot change it, or `[requested on|off]` if what was
/// asked for is not what is in effect (a feature waiting for another it
/// depends on).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Feature {
    /// The name as printed (`generic-receive-offload`).
    pub name: String,
    /// In effect now.
    pub active: bool,
    /// Asked for: `[requested ...]` where printed, else `active`.
    pub requested: bool,
    /// `[fixed]`: the device cannot change it.
    pub fixed: bool,
    /// A group whose members follow it, indented (`tx-checksumming`):
    /// setting it sets them.
    pub group: bool,
}

/// Parses `ethtool -k` output; lines that are not features (the
/// `Features for IFACE:` header) are left out. Pure.
pub fn parse_features(text: &str) -> Vec<Feature> {
    let lines: Vec<&str> = text
        .lines()
        .filter(|l| !l.starts_with("Features for "))
        .collect();
    let indented = |l: &str| l.starts_with(['\t', ' ']);
    let mut out = Vec::new();
    for (i, l) in lines.iter().enumerate() {
        let Some((name, value)) = l.split_once(':') else {
            continue;
        };
        let name = name.trim();
        let mut words = value.split_whitespace();
        let active = match words.next() {
            Some("on") => true,
            Some("off") => false,
            _ => continue,
        };
        if name.is_empty() {
            continue;
        }
        let rest = words.collect::<Vec<_>>().join(" ");
        let requested = if rest.contains("[requested on]") {
            true
        } else if rest.contains("[requested off]") {
            false
        } else {
            active
        };
        out.push(Feature {
            name: name.to_string(),
            active,
            requested,
            fixed: rest.contains("[fixed]"),
            group: !indented(l) && lines.get(i + 1).is_some_and(|n| indented(n)),
        });
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requested_on_is_off_and_fixed_is_unchangeable() {
        let t = "Features for va:\nrx-checksumming: on [fixed]\ntx-checksumming: on\n\
                 \ttx-checksum-ipv4: off [fixed]\n\ttx-checksum-ip-generic: on\n\
                 generic-receive-offload: off\nrx-udp-gro-forwarding: off [requested on]\n\
                 rx-gro-list: on [requested off]\n";
        let f = parse_features(t);
        let get = |n: &str| f.iter().find(|x| x.name == n).unwrap().clone();
        let names: Vec<&str> = f.iter().map(|x| x.name.as_str()).collect();
        assert_eq!(
            names,
            [
                "rx-checksumming",
                "tx-checksumming",
                "tx-checksum-ipv4",
                "tx-checksum-ip-generic",
                "generic-receive-offload",
                "rx-udp-gro-forwarding",
                "rx-gro-list",
            ]
        );
        // `off [requested on]`: off, and asked to be on.
        let w = get("rx-udp-gro-forwarding");
        assert!(!w.active && w.requested && !w.fixed);
        // `on [fixed]`: on, and the device cannot change it.
        let x = get("rx-checksumming");
        assert!(x.active && x.requested && x.fixed && !x.group);
        let r = get("rx-gro-list");
        assert!(r.active && !r.requested);
        assert!(get("tx-checksumming").group);
        assert!(!get("tx-checksum-ip-generic").group);
        let off = get("generic-receive-offload");
        assert!(!off.active && !off.requested && !off.fixed && !off.group);
        assert!(parse_features("netlink error: no device\n").is_empty());
    }
}
