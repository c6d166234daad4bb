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

use std::path::PathBuf;
use std::process::Command;
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

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

/// Parses `ethtool -l`: (maximums, current). Pure.
pub fn parse_channels(text: &str) -> Option<(Channels, Channels)> {
    let mut sets = [Channels::default(), Channels::default()];
    let mut which = None;
    for l in text.lines() {
        if l.starts_with("Pre-set maximums") {
            which = Some(0);
        } else if l.starts_with("Current hardware settings") {
            which = Some(1);
        } else if let (Some(w), Some((k, v))) = (which, l.split_once(':')) {
            // "n/a" is zero: that kind of channel does not exist.
            let n = v.trim().parse::<u32>().unwrap_or(0);
            match k.trim() {
                "RX" => sets[w].rx = n,
                "TX" => sets[w].tx = n,
                "Combined" => sets[w].combined = n,
                _ => {}
            }
        }
    }
    which.map(|_| (sets[0], sets[1]))
}

/// The changeable features (not `[fixed]`) of `ethtool -k` output,
/// members rather than the groups above them, as they are to go back:
/// on if on or asked to be (`off [requested on]` is a feature waiting for
/// one it depends on; what was asked for is what comes back). Pure.
pub fn parse_features(text: &str) -> Vec<(String, bool)> {
    fabkit_netns::ethtool::parse_features(text)
        .into_iter()
        .filter(|f| !f.group && !f.fixed)
        .map(|f| (f.name, f.active || f.requested))
        .collect()
}

/// A qdisc as `tc -j qdisc show` lists it (the fields read here).
#[derive(Debug, Deserialize)]
struct TcQdisc {
    kind: String,
    handle: String,
}

/// Parses `tc -j qdisc show dev X root`: the kind of a root qdisc an
/// administrator configured; `None` for the kernel's own (handle `0:`, or
/// none listed). Pure.
pub fn parse_root_qdisc(json: &str) -> Option<String> {
    let listed: Vec<TcQdisc> = serde_json::from_str(json).ok()?;
    let root = listed.into_iter().next()?;
    (root.handle != "0:").then_some(root.kind)
}

/// The options of `tc qdisc show dev X root` (text), in the words `tc
/// qdisc replace` takes back: the words after `qdisc KIND HANDLE`, without
/// `root` and `refcnt N`. `tc -j` gives the options as numbers in the
/// kernel's units, which tc would read in its own (a tbf rate of 1Mbit
/// shows as 125000, bytes per second; given back, 125000 bit/s). Pure.
pub fn parse_qdisc_options(text: &str) -> Vec<String> {
    let Some(l) = text.lines().next() else {
        return Vec::new();
    };
    let mut out = Vec::new();
    let mut skip = false;
    for x in l.split_whitespace().skip(3) {
        match x {
            _ if skip => skip = false,
            "root" => {}
            "refcnt" => skip = true,
            _ => out.push(x.to_string()),
        }
    }
    out
}

/// The root qdisc an administrator configured on `iface` (`kind
/// options...`); `None`: the kernel's own.
fn root_qdisc(iface: &str) -> Result<Option<String>, IfaceError> {
    let json = cmd(&["tc", "-j", "qdisc", "show", "dev", iface, "root"])?;
    let Some(kind) = parse_root_qdisc(&json) else {
        return Ok(None);
    };
    let text = cmd(&["tc", "qdisc", "show", "dev", iface, "root"])?;
    let words = std::iter::once(kind).chain(parse_qdisc_options(&text));
    Ok(Some(words.collect::<Vec<_>>().join(" ")))
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

/// Reads `iface`'s settings in this network namespace.
pub fn read(iface: &str) -> Result<Saved, IfaceError> {
    valid_name(iface)?;
    if !sys_path(iface, "").exists() {
        return Err(IfaceError(format!(
            "no interface {iface} in this network namespace (see `ip link`)"
        )));
    }
    let num = |rest: &str| -> Result<u32, IfaceError> {
        read_sys(iface, rest)?
            .parse()
            .map_err(|_| IfaceError(format!("/sys/class/net/{iface}/{rest} is not a number")))
    };
    let queues = tx_queues(iface)?;
    Ok(Saved {
        iface: iface.to_string(),
        netns: this_netns()?,
        address: read_sys(iface, "address")?,
        mtu: num("mtu")?,
        txqueuelen: num("tx_queue_len")?,
        channels: cmd(&["ethtool", "-l", iface])
            .ok()
            .and_then(|t| parse_channels(&t)),
        features: parse_features(&cmd(&["ethtool", "-k", iface])?),
        qdisc: root_qdisc(iface)?,
        xps_cpus: (0..queues)
            .map(|q| read_sys(iface, &format!("queues/tx-{q}/xps_cpus")).unwrap_or_default())
            .collect(),
    })
}

/// The `xps_cpus` value mapping CPU c to queue c mod `queues` for queue
/// `q`, over `cpus` CPUs: hex in comma-separated 32-bit words, highest
/// first, as the kernel's bitmap parser takes it (one long word overflows
/// past 32 CPUs).
pub fn xps_mask(cpus: usize, queues: usize, q: usize) -> String {
    let mut words = vec![0u32; cpus.div_ceil(32).max(1)];
    for c in (0..cpus).filter(|c| c % queues.max(1) == q) {
        words[c / 32] |= 1 << (c % 32);
    }
    words
        .iter()
        .rev()
        .map(|w| format!("{w:08x}"))
        .collect::<Vec<_>>()
        .join(",")
}

/// `ethtool -L` arguments that set every kind of channel the driver has.
fn channel_args(max: Channels, want: Channels) -> Vec<String> {
    let mut a = Vec::new();
    for (name, m, v) in [
        ("rx", max.rx, want.rx),
        ("tx", max.tx, want.tx),
        ("combined", max.combined, want.combined),
    ] {
        if m > 0 {
            a.push(name.to_string());
            a.push(v.to_string());
        }
    }
    a
}

fn set_channels(iface: &str, max: Channels, want: Channels) -> Result<(), IfaceError> {
    let mut args = vec!["ethtool".to_string(), "-L".into(), iface.to_string()];
    args.extend(channel_args(max, want));
    cmd(&args.iter().map(String::as_str).collect::<Vec<_>>()).map(drop)
}

/// Sets the channels so that `queues` TX queues are in use.
fn set_queues(s: &Saved, queues: u16) -> Result<(), IfaceError> {
    let now = tx_queues(&s.iface)?;
    let Some((max, _)) = s.channels else {
        if now == usize::from(queues) {
            return Ok(());
        }
        return Err(IfaceError(format!(
            "{} cannot change its queues (ethtool -l): it has {now}; give queues = [{now}]",
            s.iface
        )));
    };
    let n = u32::from(queues);
    // Combined channels where the driver has them, else as many RX as TX.
    let want = if max.combined > 0 {
        if n > max.combined {
            return Err(IfaceError(format!(
                "{} has at most {} combined channels, asked for {queues}",
                s.iface, max.combined
            )));
        }
        Channels {
            rx: 0,
            tx: 0,
            combined: n,
        }
    } else {
        if n > max.tx.min(max.rx) {
            return Err(IfaceError(format!(
                "{} has at most {} TX and {} RX channels, asked for {queues}",
                s.iface, max.tx, max.rx
            )));
        }
        Channels {
            rx: n,
            tx: n,
            combined: 0,
        }
    };
    set_channels(&s.iface, max, want)
}

fn set_features(iface: &str, f: &[(String, bool)]) -> Result<(), IfaceError> {
    if f.is_empty() {
        return Ok(());
    }
    let mut args = vec!["ethtool".to_string(), "-K".into(), iface.to_string()];
    for (k, on) in f {
        args.push(k.clone());
        args.push(if *on { "on" } else { "off" }.into());
    }
    cmd(&args.iter().map(String::as_str).collect::<Vec<_>>()).map(drop)
}

/// Puts the recorded root qdisc back.
fn restore_qdisc(s: &Saved) -> Result<(), IfaceError> {
    let now = parse_root_qdisc(&cmd(&[
        "tc", "-j", "qdisc", "show", "dev", &s.iface, "root",
    ])?);
    match &s.qdisc {
        None if now.is_none() => Ok(()),
        None => cmd(&["tc", "qdisc", "del", "dev", &s.iface, "root"]).map(drop),
        Some(q) => {
            let mut args = vec!["tc", "qdisc", "replace", "dev", s.iface.as_str(), "root"];
            args.extend(q.split_whitespace());
            cmd(&args).map(drop).or_else(|e| {
                // Options as shown are not always options tc takes.
                let kind = q.split_whitespace().next().unwrap_or_default();
                cmd(&["tc", "qdisc", "replace", "dev", &s.iface, "root", kind])
                    .map(|_| {
                        eprintln!(
                            "ipoib-eval: {}: root qdisc {kind} restored without its options \
                             (tc refused them: {e}); they were: {q}",
                            s.iface
                        );
                    })
                    .map_err(|_| IfaceError(format!("{e} (was: qdisc {q})")))
            })
        }
    }
}

/// Waits (up to 30 s: a driver may reset the link on a channel change)
/// until `iface` is up again.
fn wait_up(iface: &str) -> Result<(), IfaceError> {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let state = read_sys(iface, "operstate")?;
        // "unknown": drivers without carrier reporting (also tun, lo).
        if state == "up" || state == "unknown" {
            return Ok(());
        }
        if Instant::now() >= deadline {
            return Err(IfaceError(format!(
                "{iface} is {state} 30 s after its settings changed"
            )));
        }
        // Polling the kernel's link state: no event to wait on here.
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Sets `iface` as `w` asks, starting from the recorded settings `s` (a
/// setting the point leaves at default is the recorded one).
pub fn apply(s: &Saved, w: &Wanted) -> Result<(), IfaceError> {
    {
        // Under the gate: an interrupt restores after these, not among them.
        let _gate =
            fabkit_netns::cleanup::gate().map_err(|e| IfaceError(format!("{}: {e}", s.iface)))?;
        set(s, w)?;
    }
    wait_up(&s.iface)
}

/// `ip link set dev IFACE WHAT VALUE` (`mtu`, `txqueuelen`).
fn link_set(iface: &str, what: &str, value: u32) -> Result<(), IfaceError> {
    cmd(&["ip", "link", "set", "dev", iface, what, &value.to_string()]).map(drop)
}

fn set(s: &Saved, w: &Wanted) -> Result<(), IfaceError> {
    set_queues(s, w.queues)?;
    link_set(&s.iface, "mtu", w.mtu)?;
    link_set(&s.iface, "txqueuelen", w.txqueuelen)?;
    set_features(&s.iface, &s.features)?;
    set_features(&s.iface, &w.offloads)?;
    match &w.qdisc {
        Some(q) => cmd(&["tc", "qdisc", "replace", "dev", &s.iface, "root", q]).map(drop)?,
        None => restore_qdisc(s)?,
    }
    let queues = tx_queues(&s.iface)?;
    if queues > 1 {
        // The kernel refuses XPS maps on one queue (EIO).
        let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
        for q in 0..queues {
            let mask = if w.xps {
                xps_mask(cpus, queues, q)
            } else {
                "0".into()
            };
            write_sys(&s.iface, &format!("queues/tx-{q}/xps_cpus"), &mask)?;
        }
    }
    Ok(())
}

/// Puts every recorded setting back; tries them all, and reports the ones
/// that failed.
pub fn restore(s: &Saved) -> Result<(), IfaceError> {
    let mut errs: Vec<String> = Vec::new();
    let mut note = |r: Result<(), IfaceError>| {
        if let Err(e) = r {
            errs.push(e.0);
        }
    };
    if let Some((max, now)) = s.channels {
        note(set_channels(&s.iface, max, now));
    }
    note(link_set(&s.iface, "mtu", s.mtu));
    note(link_set(&s.iface, "txqueuelen", s.txqueuelen));
    note(set_features(&s.iface, &s.features));
    note(restore_qdisc(s));
    match tx_queues(&s.iface) {
        Ok(n) if n == s.xps_cpus.len() && n > 1 => {
            for (q, mask) in s.xps_cpus.iter().enumerate() {
                if !mask.is_empty() {
                    note(write_sys(
                        &s.iface,
                        &format!("queues/tx-{q}/xps_cpus"),
                        mask,
                    ));
                }
            }
        }
        Ok(n) if n != s.xps_cpus.len() => note(Err(IfaceError(format!(
            "XPS maps not restored: {} has {n} TX queues, the record {}",
            s.iface,
            s.xps_cpus.len()
        )))),
        Ok(_) => {}
        Err(e) => note(Err(e)),
    }
    note(wait_up(&s.iface));
    if errs.is_empty() {
        Ok(())
    } else {
        Err(IfaceError(format!(
            "{}: {} setting(s) not restored: {}",
            s.iface,
            errs.len(),
            errs.join("; ")
        )))
    }
}

/// The record's path for `iface` in the namespace with inode `netns`.
pub fn record_path(netns: u64, iface: &str) -> PathBuf {
    PathBuf::from(format!("{RECORD_DIR}/{netns}-{iface}.json"))
}

fn load(path: &std::path::Path) -> Result<Saved, IfaceError> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| IfaceError(format!("reading {}: {e}", path.display())))?;
    serde_json::from_str(&text).map_err(|e| {
        IfaceError(format!(
            "{} is not an ipoib-eval record ({e}): remove it after checking the interface",
            path.display()
        ))
    })
}

/// The record and its path, taken by whichever restores first (the owner
/// or the signal thread), held while it restores.
type Pending = std::sync::Arc<std::sync::Mutex<Option<(Saved, PathBuf)>>>;

/// Restores a pending record once, removing it if everything went back.
fn restore_pending(p: &Pending) -> Result<(), IfaceError> {
    let mut g = p.lock().unwrap_or_else(|e| e.into_inner());
    let Some((saved, path)) = g.take() else {
        return Ok(());
    };
    restore(&saved)?;
    std::fs::remove_file(&path).map_err(|e| IfaceError(format!("removing {}: {e}", path.display())))
}

/// An interface whose settings are recorded; dropping it restores them.
#[derive(Debug)]
pub struct Held {
    saved: Saved,
    pending: Pending,
    _undo: fabkit_netns::cleanup::Registered,
    /// The record's lock: one sweep or server per interface.
    lock: (std::fs::File, PathBuf),
}

impl Held {
    /// The settings from before.
    pub fn saved(&self) -> &Saved {
        &self.saved
    }

    /// Restores now, removing the record if everything went back.
    pub fn restore(&mut self) -> Result<(), IfaceError> {
        restore_pending(&self.pending)
    }
}

impl Drop for Held {
    fn drop(&mut self) {
        if let Err(e) = self.restore() {
            eprintln!("ipoib-eval: {e} (the record stays: `ipoib-eval restore` tries again)");
        }
        // Still locked: nobody waits on it (holders take it or give up).
        let _ = std::fs::remove_file(&self.lock.1);
    }
}

/// Records `iface`'s settings (or takes the record a crashed run left)
/// before anything changes them. The second value says the record was
/// left by an earlier run. One process at a time holds an interface.
pub fn hold(iface: &str) -> Result<(Held, bool), IfaceError> {
    let now = read(iface)?;
    let path = record_path(now.netns, iface);
    std::fs::create_dir_all(RECORD_DIR)
        .map_err(|e| IfaceError(format!("creating {RECORD_DIR}: {e}")))?;
    let lock_path = path.with_extension("lock");
    let lock =
        fabkit_netns::lock_file(&lock_path.to_string_lossy(), Duration::ZERO).map_err(|_| {
            IfaceError(format!(
                "{iface} is held by another ipoib-eval sweep or server (see `fuser {}`)",
                lock_path.display()
            ))
        })?;
    let (saved, earlier) = if path.exists() {
        let old = load(&path)?;
        if old.address != now.address {
            return Err(IfaceError(format!(
                "{}: its record is for another device (address {}, {iface} has {}); remove \
                 the record if that device is gone",
                path.display(),
                old.address,
                now.address
            )));
        }
        (old, true)
    } else {
        let tmp = path.with_extension("tmp");
        let text = serde_json::to_string_pretty(&now).unwrap_or_default();
        std::fs::write(&tmp, text)
            .and_then(|()| std::fs::File::open(&tmp)?.sync_all())
            .and_then(|()| std::fs::rename(&tmp, &path))
            .map_err(|e| IfaceError(format!("writing {}: {e}", path.display())))?;
        (now, false)
    };
    let pending: Pending = std::sync::Arc::new(std::sync::Mutex::new(Some((saved.clone(), path))));
    let (p, l) = (pending.clone(), lock_path.clone());
    let undo = fabkit_netns::cleanup::register(move || match restore_pending(&p) {
        // The process ends next: its lock goes with it.
        Ok(()) => {
            let _ = std::fs::remove_file(&l);
        }
        Err(e) => eprintln!("ipoib-eval: {e} (`ipoib-eval restore` tries again)"),
    });
    Ok((
        Held {
            saved,
            pending,
            _undo: undo,
            lock: (lock, lock_path),
        },
        earlier,
    ))
}

/// Replays the records of this network namespace (all, or `iface`'s),
/// removing each that went back; returns the interfaces restored.
pub fn restore_recorded(iface: Option<&str>) -> Result<Vec<String>, IfaceError> {
    if let Some(i) = iface {
        valid_name(i)?;
    }
    let netns = this_netns()?;
    let prefix = format!("{netns}-");
    let entries = match std::fs::read_dir(RECORD_DIR) {
        Ok(rd) => rd.filter_map(Result::ok).collect::<Vec<_>>(),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Vec::new(),
        Err(e) => return Err(IfaceError(format!("reading {RECORD_DIR}: {e}"))),
    };
    let mut done = Vec::new();
    for e in entries {
        let name = e.file_name().to_string_lossy().into_owned();
        let Some(rest) = name
            .strip_prefix(&prefix)
            .and_then(|r| r.strip_suffix(".json"))
        else {
            continue;
        };
        if iface.is_some_and(|i| i != rest) {
            continue;
        }
        // A record whose owner still runs is not a crash's: leave it.
        let lock_path = e.path().with_extension("lock");
        let Ok(_lock) = fabkit_netns::lock_file(&lock_path.to_string_lossy(), Duration::ZERO)
        else {
            return Err(IfaceError(format!(
                "{rest} is held by a running ipoib-eval sweep or server: stop it instead \
                 (it restores on exit)"
            )));
        };
        let s = load(&e.path())?;
        restore(&s)?;
        std::fs::remove_file(e.path())
            .map_err(|x| IfaceError(format!("removing {}: {x}", e.path().display())))?;
        let _ = std::fs::remove_file(&lock_path);
        done.push(s.iface);
    }
    Ok(done)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn channels_parse_with_missing_kinds_as_zero() {
        let t = "Channel parameters for va:\nPre-set maximums:\nRX:\t\t4\nTX:\t\t4\n\
                 Other:\t\tn/a\nCombined:\tn/a\nCurrent hardware settings:\nRX:\t\t2\n\
                 TX:\t\t3\nOther:\t\tn/a\nCombined:\tn/a\n";
        let (max, now) = parse_channels(t).unwrap();
        assert_eq!((max.rx, max.tx, max.combined), (4, 4, 0));
        assert_eq!((now.rx, now.tx, now.combined), (2, 3, 0));
        assert_eq!(
            parse_channels("netlink error: Operation not supported"),
            None
        );
    }

    #[test]
    fn features_are_the_changeable_members() {
        let t = "Features for va:\nrx-checksumming: on\ntx-checksumming: on\n\
                 \ttx-checksum-ipv4: off [fixed]\n\ttx-checksum-ip-generic: on\n\
                 generic-receive-offload: off\nhighdma: on\nloopback: off [fixed]\n\
                 rx-udp-gro-forwarding: off [requested on]\n";
        assert_eq!(
            parse_features(t),
            [
                ("rx-checksumming".to_string(), true),
                ("tx-checksum-ip-generic".to_string(), true),
                ("generic-receive-offload".to_string(), false),
                ("highdma".to_string(), true),
                ("rx-udp-gro-forwarding".to_string(), true),
            ]
        );
    }

    #[test]
    fn root_qdiscs_of_the_kernel_are_none() {
        assert_eq!(parse_root_qdisc(""), None);
        assert_eq!(parse_root_qdisc("[]"), None);
        assert_eq!(
            parse_root_qdisc(
                r#"[{"kind":"noqueue","handle":"0:","root":true,"refcnt":2,"options":{}}]"#
            ),
            None
        );
        assert_eq!(
            parse_root_qdisc(r#"[{"kind":"mq","handle":"0:","root":true,"options":{}}]"#),
            None
        );
        let fq = r#"[{"kind":"fq","handle":"8001:","root":true,"refcnt":5,
            "options":{"limit":10000,"flow_limit":100}}]"#;
        assert_eq!(parse_root_qdisc(fq).as_deref(), Some("fq"));
        assert_eq!(
            parse_qdisc_options("qdisc fq 8001: root refcnt 5 limit 10000p flow_limit 100p\n")
                .join(" "),
            "limit 10000p flow_limit 100p"
        );
        assert!(parse_qdisc_options("qdisc mq 0: root\n").is_empty());
        assert!(parse_qdisc_options("").is_empty());
    }

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
    fn xps_masks_are_32_bit_words() {
        assert_eq!(xps_mask(2, 2, 1), "00000002");
        assert_eq!(xps_mask(4, 2, 0), "00000005");
        // CPU 32 and 34 on queue 0 of 2, over 36 CPUs: a second word.
        assert_eq!(xps_mask(36, 2, 0), "00000005,55555555");
        assert_eq!(xps_mask(1, 4, 3), "00000000");
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
