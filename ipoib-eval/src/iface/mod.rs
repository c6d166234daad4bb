//! A real interface's settings, changed by a sweep and put back: MTU,
//! `txqueuelen`, channels (`ethtool -L`), offload features (`ethtool -K`),
//! the root qdisc and XPS maps.
//!
//! Before the first change, [`hold`] reads the interface and writes the
//! record to `/run/ipoib-eval/<netns inode>-<iface>.json`; dropping the
//! [`Held`] value (also on SIGINT or SIGTERM, through
//! [`fabkit_netns::cleanup`]) puts every setting back and removes the
//! record. After a crash the record stays, and `ipoib-eval restore`
//! replays it ([`restore_recorded`]); a sweep that finds a record keeps
//! it, since it holds the settings from before the crashed run.
//!
//! A root qdisc the kernel made (handle `0:`) is put back by deleting ours;
//! one an administrator configured is replaced with its kind and the
//! options `tc` printed, or its kind alone if `tc` refuses them.
//!
//! One file per job: `get` reads the settings (`ethtool`, `tc`, sysfs),
//! `set` sets them and puts them back, `record` keeps the record; the
//! settings' types are here.

use std::path::PathBuf;
use std::process::Command;

use serde::{Deserialize, Serialize};

mod get;
mod record;
mod set;

pub use get::{parse_channels, parse_features, parse_qdisc_options, parse_root_qdisc, read};
pub use record::{hold, record_path, restore_recorded, Held};
pub use set::{apply, restore, xps_mask};

/// Where records live (tmpfs: a reboot resets the interfaces too).
pub const RECORD_DIR: &str = "/run/ipoib-eval";

/// What a point wants of an interface.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Wanted {
    /// TX (and RX) queues.
    pub queues: u16,
    /// MTU.
    pub mtu: u32,
    /// `ethtool -K` settings over the recorded features.
    pub offloads: Vec<(String, bool)>,
    /// Root qdisc (`None`: the recorded one).
    pub qdisc: Option<String>,
    /// `txqueuelen`.
    pub txqueuelen: u32,
    /// XPS: CPU c sends on queue c mod queues; `false` clears the maps
    /// (the kernel's flow hash).
    pub xps: bool,
}

impl Wanted {
    /// Checks every value before anything runs a command with it (a
    /// server takes them from the network).
    pub fn validate(&self) -> Result<(), IfaceError> {
        let word = |w: &str, extra: char| {
            !w.is_empty()
                && w.len() <= 64
                && w.chars()
                    .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == extra)
        };
        if self.queues == 0 || self.queues > 1024 {
            return Err(IfaceError(format!(
                "queues must be 1 to 1024, got {}",
                self.queues
            )));
        }
        if !(68..=65535).contains(&self.mtu) {
            return Err(IfaceError(format!(
                "mtu must be 68 to 65535, got {}",
                self.mtu
            )));
        }
        if self.txqueuelen > 1 << 20 {
            return Err(IfaceError(format!(
                "txqueuelen must be at most {}, got {}",
                1 << 20,
                self.txqueuelen
            )));
        }
        if let Some((f, _)) = self.offloads.iter().find(|(f, _)| !word(f, '-')) {
            return Err(IfaceError(format!(
                "offload `{}`: give an ethtool -k feature name",
                f.escape_default()
            )));
        }
        if let Some(q) = self.qdisc.as_deref().filter(|q| !word(q, '_')) {
            return Err(IfaceError(format!(
                "qdisc `{}`: give a qdisc name such as pfifo_fast",
                q.escape_default()
            )));
        }
        Ok(())
    }
}

/// Channel counts (`ethtool -l`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Channels {
    /// RX-only channels.
    pub rx: u32,
    /// TX-only channels.
    pub tx: u32,
    /// Combined channels.
    pub combined: u32,
}

/// An interface's settings as they were before a sweep changed them.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Saved {
    /// Interface name.
    pub iface: String,
    /// Inode of its network namespace.
    pub netns: u64,
    /// Its hardware address: a record names one device, not whatever
    /// later takes the same name in a namespace with a reused inode.
    pub address: String,
    /// MTU.
    pub mtu: u32,
    /// `txqueuelen`.
    pub txqueuelen: u32,
    /// Current channels, and the driver's maximums (`None`: the driver
    /// cannot change them).
    pub channels: Option<(Channels, Channels)>,
    /// Every feature `ethtool -k` lists as changeable, by the name it
    /// printed (groups such as `scatter-gather` left out: their members are
    /// listed).
    pub features: Vec<(String, bool)>,
    /// Root qdisc an administrator configured (`kind options...`); `None`:
    /// the kernel's own.
    pub qdisc: Option<String>,
    /// `xps_cpus` of each TX queue, as read (empty: unreadable).
    pub xps_cpus: Vec<String>,
}

/// Why settings could not be read, changed or put back: one line with the
/// command and what it said.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct IfaceError(pub String);

fn cmd(args: &[&str]) -> Result<String, IfaceError> {
    let line = args.join(" ");
    let out = Command::new(args[0])
        .args(&args[1..])
        .output()
        .map_err(|e| IfaceError(format!("{line}: {e} (install iproute2 and ethtool)")))?;
    if out.status.success() {
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    } else {
        Err(IfaceError(format!(
            "{line}: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        )))
    }
}

fn sys_path(iface: &str, rest: &str) -> PathBuf {
    PathBuf::from(format!("/sys/class/net/{iface}/{rest}"))
}

fn read_sys(iface: &str, rest: &str) -> Result<String, IfaceError> {
    std::fs::read_to_string(sys_path(iface, rest))
        .map(|s| s.trim().to_string())
        .map_err(|e| IfaceError(format!("reading /sys/class/net/{iface}/{rest}: {e}")))
}

fn write_sys(iface: &str, rest: &str, value: &str) -> Result<(), IfaceError> {
    std::fs::write(sys_path(iface, rest), value).map_err(|e| {
        IfaceError(format!(
            "writing {value} to /sys/class/net/{iface}/{rest}: {e}"
        ))
    })
}

/// TX queues in use now.
fn tx_queues(iface: &str) -> Result<usize, IfaceError> {
    let dir = sys_path(iface, "queues");
    let rd = std::fs::read_dir(&dir)
        .map_err(|e| IfaceError(format!("reading {}: {e}", dir.display())))?;
    Ok(rd
        .filter_map(Result::ok)
        .filter(|e| e.file_name().to_string_lossy().starts_with("tx-"))
        .count())
}

/// A name `ip`, `ethtool` and `tc` take, and that cannot leave `/sys`.
pub fn valid_name(iface: &str) -> Result<(), IfaceError> {
    let ok = !iface.is_empty()
        && iface.len() < 16
        && iface != "."
        && iface != ".."
        && iface
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "-_.@".contains(c));
    if ok {
        Ok(())
    } else {
        Err(IfaceError(format!(
            "interface name `{}`: give one that `ip link` lists (up to 15 letters, digits, - _ .)",
            iface.escape_default()
        )))
    }
}

/// The inode of the calling thread's network namespace.
fn this_netns() -> Result<u64, IfaceError> {
    crate::sys::netns_inode()
        .map_err(|e| IfaceError(format!("reading /proc/thread-self/ns/net: {e}")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wanted_values_from_the_network_are_checked() {
        let ok = Wanted {
            queues: 2,
            mtu: 9000,
            offloads: vec![("rx-udp-gro-forwarding".into(), true)],
            qdisc: Some("pfifo_fast".into()),
            txqueuelen: 100,
            xps: true,
        };
        assert!(ok.validate().is_ok());
        let bad = [
            Wanted {
                queues: 0,
                ..ok.clone()
            },
            Wanted {
                mtu: 67,
                ..ok.clone()
            },
            Wanted {
                txqueuelen: u32::MAX,
                ..ok.clone()
            },
            Wanted {
                offloads: vec![("tso; reboot".into(), true)],
                ..ok.clone()
            },
            Wanted {
                qdisc: Some("fq limit 1".into()),
                ..ok.clone()
            },
        ];
        for w in bad {
            assert!(w.validate().is_err(), "{w:?}");
        }
    }

    #[test]
    fn names_that_could_leave_sys_are_refused() {
        for bad in ["", "..", "a/b", "x y", "0123456789abcdef", "a\n"] {
            assert!(valid_name(bad).is_err(), "{bad:?}");
        }
        for good in ["ib0", "hsn0", "va", "eth0.100", "ptl0"] {
            assert!(valid_name(good).is_ok(), "{good}");
        }
    }
}
