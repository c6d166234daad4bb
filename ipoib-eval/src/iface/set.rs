//! Setting an interface as a point wants it, and putting every recorded
//! setting back.

use std::time::{Duration, Instant};

use super::get::parse_root_qdisc;
use super::{cmd, read_sys, tx_queues, write_sys, Channels, IfaceError, Saved, Wanted};

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
    ])?)?;
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn xps_masks_are_32_bit_words() {
        assert_eq!(xps_mask(2, 2, 1), "00000002");
        assert_eq!(xps_mask(4, 2, 0), "00000005");
        // CPU 32 and 34 on queue 0 of 2, over 36 CPUs: a second word.
        assert_eq!(xps_mask(36, 2, 0), "00000005,55555555");
        assert_eq!(xps_mask(1, 4, 3), "00000000");
    }
}
