//! `fabkit info`: what this machine's libfabric and RDMA devices offer.

use std::collections::BTreeMap;

use anyhow::Result;
use fabkit_dht::Variant;
use fabkit_fabric::info::{self, getinfo, Caps, Hints, KeyPick};
use fabkit_fabric::{
    env, AtomicSupport, AtomicsBy, Domain, Executes, Executor, Fabric, Ordering, Progress,
};
use serde::Serialize;

use fabkit_fabric::verbs;

/// One provider, merged over its fabric/domain entries.
#[derive(Debug, Serialize)]
pub struct ProviderRow {
    /// Provider name (what `-p` takes).
    pub provider: String,
    /// Endpoint types offered.
    pub ep_types: Vec<String>,
    /// Domains (interfaces or devices).
    pub domains: Vec<String>,
    /// Messages.
    pub msg: bool,
    /// RMA.
    pub rma: bool,
    /// u64 atomics when asked for (FI_EP_RDM).
    pub atomics: Option<AtomicSupport>,
    /// Who carries them out at the target.
    pub atomics_by: AtomicsBy,
    /// Data progress.
    pub progress: Progress,
    /// Required memory-registration modes (FI_EP_RDM entry).
    pub mr_mode: Vec<String>,
    /// Who picks a region's key, and its bits (FI_EP_RDM entry).
    pub mr_keys: KeyPick,
    /// Largest transfer.
    pub max_msg_size: usize,
    /// Largest inject.
    pub inject_size: usize,
    /// Whether fabkit can run RMA on it (RDM endpoints with RMA).
    pub fabkit_rma: bool,
    /// How a rank on it makes a Delivery write visible before a later
    /// operation (what `fi_getinfo` grants when asked; `None` where fabkit
    /// cannot run).
    pub ordering: Option<Ordering>,
    /// Every mechanism it grants, best first (a rank may be told to use
    /// any of them).
    pub orderings: Vec<Ordering>,
    /// Who carries out its reads and writes, and its atomics, at the target.
    pub executes: Executes,
    /// What the DHT's `auto` path takes to ranks on other nodes, per
    /// variant (on one node it takes memory), and why.
    pub auto: Vec<AutoPath>,
}

/// What the DHT's `auto` path takes across nodes for some variants.
#[derive(Debug, Serialize)]
pub struct AutoPath {
    /// The variants (lower case).
    pub variants: Vec<String>,
    /// `rma` or `message`; or why none (a provider of one node only).
    pub takes: String,
    /// The fact the rule read.
    pub why: String,
}

/// The auto path of `variants` across nodes on a provider that executes
/// as `e` (`one_node`: a provider of one node only, such as shm).
/// Why `provider` cannot carry the message path (as a table's set-up
/// finds, and `auto` then takes rma), or None where it can.
fn message_refused(provider: &str) -> Option<String> {
    let boot = fabkit_core::ThreadGroup::members(1, std::time::Duration::from_secs(5)).pop()?;
    let mut cfg = fabkit_fabric::MailboxConfig::new(provider);
    cfg.timeout = std::time::Duration::from_secs(2);
    match fabkit_fabric::Mailbox::establish(cfg, &boot) {
        Err(fabkit_fabric::Error::Unsupported { what, .. }) => Some(format!("it lacks {what}")),
        _ => None,
    }
}

fn auto_paths(e: Executes, one_node: bool) -> Vec<AutoPath> {
    use fabkit_dht::path::{plan, Carrier, Path, Way};
    let groups: [&[Variant]; 2] = [
        &[Variant::Lockfree],
        &[Variant::Fine, Variant::Coarse, Variant::Chunked],
    ];
    groups
        .iter()
        .map(|vs| {
            let variants = vs.iter().map(|v| format!("{v:?}").to_lowercase()).collect();
            if one_node {
                return AutoPath {
                    variants,
                    takes: "-".into(),
                    why: "a provider within one node: auto takes memory there".into(),
                };
            }
            let carrier = Carrier::Fabric {
                rma: e.rma,
                atomics: e.atomics,
            };
            match plan(Path::Auto, vs[0], carrier, false) {
                Ok(p) => AutoPath {
                    variants,
                    takes: match p.far {
                        Way::Rma => "rma",
                        Way::Message => "message",
                        Way::Memory => "memory",
                    }
                    .into(),
                    why: p.why,
                },
                Err(why) => AutoPath {
                    variants,
                    takes: "-".into(),
                    why,
                },
            }
        })
        .collect()
}

/// Everything `fabkit info` reports.
#[derive(Debug, Serialize)]
pub struct Report {
    /// libfabric library version.
    pub libfabric: String,
    /// API version fabkit asks for.
    pub api: String,
    /// Providers.
    pub providers: Vec<ProviderRow>,
    /// RDMA devices.
    pub rdma: verbs::Devices,
    /// What fabkit set in libfabric's environment before `main`.
    pub env: env::Prepared,
}

fn is_utility(p: &str) -> bool {
    p.starts_with("ofi_") || p.contains("hook")
}

/// Gathers the report, optionally for one provider.
pub fn gather(only: Option<&str>) -> Result<Report> {
    let mut rows: BTreeMap<String, ProviderRow> = BTreeMap::new();
    for i in getinfo(None)? {
        let p = i.provider();
        if is_utility(&p) || only.is_some_and(|o| o != p) {
            continue;
        }
        let row = rows.entry(p.clone()).or_insert_with(|| ProviderRow {
            provider: p.clone(),
            ep_types: Vec::new(),
            domains: Vec::new(),
            msg: false,
            rma: false,
            atomics: None,
            atomics_by: AtomicsBy::of(&p),
            progress: i.data_progress(),
            mr_mode: info::mr_mode_names(i.mr_mode()),
            mr_keys: i.mr_keys(),
            max_msg_size: i.max_msg_size(),
            inject_size: i.inject_size(),
            fabkit_rma: false,
            ordering: None,
            orderings: Vec::new(),
            executes: Executes {
                rma: Executor::Unknown,
                atomics: Executor::Unknown,
            },
            auto: Vec::new(),
        });
        let t = i.ep_type().to_string();
        if !row.ep_types.contains(&t) {
            row.ep_types.push(t);
        }
        let d = i.domain_name();
        if !row.domains.contains(&d) {
            row.domains.push(d);
        }
        row.msg |= i.has_msg();
        row.rma |= i.has_rma();
        if i.ep_type() == "FI_EP_RDM" && i.has_rma() {
            row.executes = i.executes();
            row.fabkit_rma = true;
            row.mr_mode = info::mr_mode_names(i.mr_mode());
            row.mr_keys = i.mr_keys();
            row.progress = i.data_progress();
            row.max_msg_size = i.max_msg_size();
            row.inject_size = i.inject_size();
        }
    }
    // Atomics are only offered when asked for (tcp;ofi_rxm emulates them), so
    // ask each provider, and query which u64 operations its domain does.
    for row in rows.values_mut() {
        let hints = Hints::new(row.provider.clone(), Caps::ALL);
        let found = getinfo(Some(&hints))?;
        if let Some(i) = found.iter().find(|i| i.provider() == row.provider) {
            row.atomics = Fabric::open(i)
                .and_then(|f| Domain::open(&f, i))
                .map(|d| d.atomic_support())
                .ok();
        }
        // What a rank would pick: asked with the capabilities it asks for
        // (atomics where offered, as a rank asks by default).
        if row.fabkit_rma {
            let caps = if found.is_empty() {
                Caps::RMA
            } else {
                Caps::ALL
            };
            let hints = Hints::new(row.provider.clone(), caps);
            if let Ok(offered) = info::orderings_offered(&hints) {
                row.ordering = Some(offered.first().copied().unwrap_or(Ordering::None));
                row.orderings = offered;
            }
        }
    }
    for row in rows.values_mut() {
        // shm (and its successor sm2) reach only this node's processes.
        let one_node = matches!(row.provider.as_str(), "shm" | "sm2");
        if row.fabkit_rma {
            row.auto = auto_paths(row.executes, one_node);
            // The message path needs messages that name their sender: a
            // mailbox of one rank asks its own service, as a table's does.
            if row.auto.iter().any(|a| a.takes == "message") {
                if let Some(why) = message_refused(&row.provider) {
                    for a in row.auto.iter_mut().filter(|a| a.takes == "message") {
                        a.takes = "rma".into();
                        a.why = format!("{}; but the message path is refused here ({why})", a.why);
                    }
                }
            }
        }
    }
    Ok(Report {
        libfabric: info::library_version(),
        api: "1.17".into(),
        providers: rows.into_values().collect(),
        rdma: verbs::devices(),
        env: env::prepared().clone(),
    })
}

fn size(n: usize) -> String {
    match n {
        0 => "-".into(),
        n if n >= 1 << 62 => "unlimited".into(),
        n if n >= 1 << 30 && n % (1 << 30) == 0 => format!("{}G", n >> 30),
        n if n >= 1 << 20 && n % (1 << 20) == 0 => format!("{}M", n >> 20),
        n if n >= 1 << 10 && n % (1 << 10) == 0 => format!("{}K", n >> 10),
        n => n.to_string(),
    }
}

/// Prints the report as a table.
pub fn print(r: &Report) {
    println!("libfabric {} (fabkit asks for API {})", r.libfabric, r.api);
    println!();
    let mr_of = |p: &ProviderRow| {
        if p.mr_mode.is_empty() {
            "-".to_string()
        } else {
            let short: Vec<&str> = p
                .mr_mode
                .iter()
                .map(|m| m.trim_start_matches("FI_MR_"))
                .collect();
            short.join(",")
        }
    };
    // The mr_mode column widens to its longest entry (verbs has four bits).
    let mr_w = r
        .providers
        .iter()
        .map(|p| mr_of(p).len())
        .max()
        .unwrap_or(0)
        .max(7);
    println!(
        "{:<14} {:<3} {:<3} {:<11} {:<8} {:<8} {:<8} {:>9} {:>6}  {:<mr_w$} {:<10} domains",
        "provider",
        "rma",
        "fk",
        "u64 atomics",
        "by",
        "progress",
        "order",
        "maxmsg",
        "inject",
        "mr_mode",
        "mr key"
    );
    for p in &r.providers {
        let supported = p.atomics.map(|a| a.supported()).unwrap_or_default();
        let atomics = match supported.len() {
            4 => "all four".to_string(),
            0 => "none".into(),
            _ => supported.join(","),
        };
        let by = if supported.is_empty() {
            "-"
        } else {
            p.atomics_by.label()
        };
        println!(
            "{:<14} {:<3} {:<3} {:<11} {:<8} {:<8} {:<8} {:>9} {:>6}  {:<mr_w$} {:<10} {}",
            p.provider,
            if p.rma { "yes" } else { "no" },
            if p.fabkit_rma { "yes" } else { "no" },
            atomics,
            by,
            format!("{:?}", p.progress).to_lowercase(),
            p.ordering.map_or("-", Ordering::label),
            size(p.max_msg_size),
            size(p.inject_size),
            mr_of(p),
            p.mr_keys.label(),
            p.domains.join(",")
        );
    }
    println!();
    println!("fk: fabkit can run on it (reliable-datagram endpoints with RMA).");
    println!("u64 atomics: of compare-and-swap, fetch-add, fetch, swap (fi_query_atomic);");
    println!("by: who applies them at the target: the NIC, or emulated (a message the");
    println!("target's libfabric applies with its CPU, as ofi_rxm does over verbs).");
    println!("progress manual: peers' one-sided operations need the target to progress;");
    println!("fabkit runs a progress thread for those ranks.");
    println!("order: how a write that must be visible before a later operation (a lock");
    println!("release) is made so: delivery (FI_DELIVERY_COMPLETE on the write), fence");
    println!("(FI_FENCE on the next operation to that peer), raw (a read of the written");
    println!("bytes after it: FI_ORDER_RMA_RAW data order), none (no guarantee).");
    println!("mr key: who picks a memory region's key, the provider or fabkit (random");
    println!("bits from the system's source, so a process outside the job cannot guess");
    println!("one), and how many bits it has.");
    println!();
    println!("Who carries out one-sided operations at the target, and the DHT's auto path");
    println!("to ranks on other nodes (on one node it takes memory: loads and stores):");
    println!(
        "  {:<14} {:<12} {:<12} {:<9} {:<9} why",
        "provider", "read/write", "atomics", "lockfree", "others"
    );
    for p in r.providers.iter().filter(|p| p.fabkit_rma) {
        let take = |i: usize| p.auto.get(i).map_or("-", |a| a.takes.as_str());
        let why: Vec<&str> = p.auto.iter().map(|a| a.why.as_str()).collect();
        let mut why = why;
        why.dedup();
        println!(
            "  {:<14} {:<12} {:<12} {:<9} {:<9} {}",
            p.provider,
            p.executes.rma.label(),
            p.executes.atomics.label(),
            take(0),
            take(1),
            why.join("; ")
        );
    }
    println!("message: a batch's keys go to their owner as one request, which it runs and");
    println!("answers; rma: one-sided operations, executed without the target's CPU.");
    println!();
    println!("RDMA devices (libibverbs):");
    match &r.rdma.none_because {
        Some(why) => println!("  none: {why}"),
        None => {
            for d in &r.rdma.devices {
                println!("  {} (max_cqe {})", d.name, d.max_cqe);
                for p in &d.ports {
                    println!(
                        "    port {}: {} {} mtu {} {}",
                        p.port, p.state, p.link_layer, p.active_mtu, p.speed
                    );
                    for g in &p.gids {
                        println!("      gid {g}");
                    }
                }
            }
        }
    }
    if let Some(l) = &r.env.rxm_verbs {
        println!();
        println!(
            "verbs;ofi_rxm: completion queues of {} entries (FI_UNIVERSE_SIZE={} x {} per peer + {}) \
             against {}'s max_cqe {};",
            l.queue(),
            l.universe,
            l.per_peer(),
            l.fixed(),
            l.device,
            l.max_cqe
        );
        let set: Vec<String> = r.env.set.iter().map(|(k, v)| format!("{k}={v}")).collect();
        match &r.env.note {
            Some(note) => println!("  {note}"),
            None if set.is_empty() => {
                println!("  FI_UNIVERSE_SIZE as you set it; fabkit set nothing")
            }
            None => println!(
                "  set by fabkit before main, for every libfabric provider in this process: {}",
                set.join(" ")
            ),
        }
    }
}

/// `fabkit info`: every provider (or only `provider`) and RDMA device,
/// as a table or JSON. A provider not available here is a usage error,
/// refused before anything is printed: an empty table on stdout read as
/// "this provider has nothing".
pub fn command(provider: Option<&str>, json: bool) -> Result<bool> {
    let r = gather(provider)?;
    if let (Some(p), true) = (provider, r.providers.is_empty()) {
        return Err(crate::exit::usage(format!(
            "provider `{p}` is not available here (run `fabkit info` for the list)"
        )));
    }
    if json {
        println!("{}", serde_json::to_string_pretty(&r)?);
    } else {
        print(&r);
    }
    Ok(true)
}
