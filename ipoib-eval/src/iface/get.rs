//! Reading an interface's settings: `ethtool -l` and `-k`, `tc`, and
//! sysfs.

use serde::Deserialize;

use super::{
    cmd, read_sys, sys_path, this_netns, tx_queues, valid_name, Channels, IfaceError, Saved,
};

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
/// on if it is on or was asked to be (`off [requested on]` is a feature
/// waiting for one it depends on, and is put back on). Pure.
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
/// none listed). Output that is not tc's JSON is an error, not taken for
/// the kernel's qdisc (a restore would then skip putting one back). Pure.
pub fn parse_root_qdisc(json: &str) -> Result<Option<String>, IfaceError> {
    if json.trim().is_empty() {
        return Ok(None);
    }
    let listed: Vec<TcQdisc> = serde_json::from_str(json).map_err(|e| {
        IfaceError(format!(
            "tc -j qdisc show printed what is not its JSON ({e}): {json:.80}"
        ))
    })?;
    Ok(listed
        .into_iter()
        .next()
        .filter(|root| root.handle != "0:")
        .map(|root| root.kind))
}

/// The root qdisc to record from both of tc's views of it: the kind from
/// `tc -j` (`json`), the options in the words `tc qdisc replace` takes
/// from the text form (`text`), which must name the same kind. Pure.
pub fn root_qdisc_of(json: &str, text: &str) -> Result<Option<String>, IfaceError> {
    let Some(kind) = parse_root_qdisc(json)? else {
        return Ok(None);
    };
    let shown = text.split_whitespace().nth(1).unwrap_or_default();
    if shown != kind {
        return Err(IfaceError(format!(
            "tc shows the root qdisc as {kind} in JSON and as `{shown}` in text: it changed \
             while it was read; read the interface again"
        )));
    }
    let words = std::iter::once(kind).chain(parse_qdisc_options(text));
    Ok(Some(words.collect::<Vec<_>>().join(" ")))
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
    if parse_root_qdisc(&json)?.is_none() {
        return Ok(None);
    }
    let text = cmd(&["tc", "qdisc", "show", "dev", iface, "root"])?;
    root_qdisc_of(&json, &text)
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
        let parse = |j: &str| parse_root_qdisc(j).unwrap();
        assert_eq!(parse(""), None);
        assert_eq!(parse("[]"), None);
        assert_eq!(
            parse(r#"[{"kind":"noqueue","handle":"0:","root":true,"refcnt":2,"options":{}}]"#),
            None
        );
        assert_eq!(
            parse(r#"[{"kind":"mq","handle":"0:","root":true,"options":{}}]"#),
            None
        );
        let fq = r#"[{"kind":"fq","handle":"8001:","root":true,"refcnt":5,
            "options":{"limit":10000,"flow_limit":100}}]"#;
        assert_eq!(parse(fq).as_deref(), Some("fq"));
        let text = "qdisc fq 8001: root refcnt 5 limit 10000p flow_limit 100p\n";
        assert_eq!(
            root_qdisc_of(fq, text).unwrap().as_deref(),
            Some("fq limit 10000p flow_limit 100p")
        );
        // The two views disagree (it changed between the reads): refused.
        assert!(root_qdisc_of(fq, "qdisc tbf 8002: root rate 1Mbit\n").is_err());
        // Not tc's JSON: an error, never "the kernel's own".
        assert!(parse_root_qdisc("Error: Cannot find device").is_err());
        assert_eq!(root_qdisc_of("[]", "").unwrap(), None);
        assert_eq!(
            parse_qdisc_options("qdisc fq 8001: root refcnt 5 limit 10000p flow_limit 100p\n")
                .join(" "),
            "limit 10000p flow_limit 100p"
        );
        assert!(parse_qdisc_options("qdisc mq 0: root\n").is_empty());
        assert!(parse_qdisc_options("").is_empty());
    }
}
