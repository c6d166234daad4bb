//! `fabkit intrude`: a process that does not belong to a job tries to read
//! and write its ranks. It learns their addresses by scanning (TCP ports of
//! the hosts it is given, `/dev/shm` for the `shm` provider, or this node's
//! RDMA connection-manager listeners for verbs), never from the job's
//! bootstrap, opens its own endpoint on the same provider, and
//! at every endpoint it found tries:
//! - RMA reads, writes and fetch-adds with the keys 0..`--keys` and
//!   `--random-keys` random ones, at the region's first word and at random
//!   offsets;
//! - messages to the DHT's message path: a request of well-formed shape for
//!   a table it made up, the same claiming to be rank 0 and rank 1, a
//!   malformed header, noise, one longer than any request may be, and
//!   forged replies to the first request ids.
//!
//! Any try the target carried out, and any message answered, is a breach:
//! it says so and exits 1. Refusals it can count are those the provider
//! reports to it; refusals inside the target are the job's to count (the
//! DHT's `refused`, `strangers` and `dropped` counters).

use std::collections::BTreeMap;
use std::net::{Ipv4Addr, SocketAddrV4, TcpStream};
use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use clap::Args;
use fabkit_fabric::mailbox::REQUEST;
use fabkit_fabric::{Stopped, Stranger, Tally, Try};
use serde::Serialize;

use crate::exit::{self, usage};
use crate::Provenance;

/// Arguments of `fabkit intrude`.
#[derive(Args, Debug)]
#[command(
    after_help = "Exit status: 0 when nothing the intruder tried was carried out or \
                  answered, 1 on a breach or a failed run, 2 for a usage error.\n\n\
                  Example, from a namespace beside a job's two hosts:\n  \
                  fabkit intrude -p 'tcp;ofi_rxm' --scan 10.77.1.1,10.77.2.2 --want 2"
)]
pub struct IntrudeArgs {
    /// The job's provider; the intruder opens its own endpoint on it.
    #[arg(short, long, default_value = "tcp;ofi_rxm")]
    pub provider: String,
    /// The intruder's own domain: an interface, or a network such as
    /// 10.77.0.0/16.
    #[arg(short, long)]
    pub domain: Option<String>,
    /// Hosts to scan, comma-separated IPv4 addresses; `shm` lists this
    /// node's shm endpoints in /dev/shm instead, and `cm` this node's RDMA
    /// connection-manager listeners (where verbs;ofi_rxm listens: its port
    /// space is not TCP's) as the kernel's `rdma resource show cm_id` does.
    #[arg(long, value_name = "HOSTS")]
    pub scan: String,
    /// Ports scanned on each host (with `cm`: the listeners' ports taken),
    /// FIRST-LAST.
    #[arg(long, default_value = "1-65535", value_parser = ports)]
    pub ports: (u16, u16),
    /// Scan again until at least this many endpoints answer (the job may
    /// still be starting), up to --wait.
    #[arg(long, default_value_t = 1)]
    pub want: usize,
    /// The longest time to scan for --want endpoints.
    #[arg(long, default_value = "60", value_parser = crate::flags::secs)]
    pub wait: Duration,
    /// Keys 0..N are tried in order at each endpoint.
    #[arg(long, default_value_t = 65536, value_parser = try_count)]
    pub keys: u64,
    /// Random 64-bit keys tried as well, at random offsets.
    #[arg(long, default_value_t = 4096, value_parser = try_count)]
    pub random_keys: u64,
    /// Tries in flight at once.
    #[arg(long, default_value_t = 64, value_parser = crate::flags::window)]
    pub window: usize,
    /// The longest wait for one try's completion.
    #[arg(long, default_value = "1", value_parser = crate::flags::secs)]
    pub timeout: Duration,
    /// Repeat scan and attack until this much time has passed (without
    /// it: once).
    #[arg(long, value_parser = crate::flags::secs)]
    pub duration: Option<Duration>,
    /// Write the report as JSON to this file (`-` for standard output).
    #[arg(long)]
    pub json: Option<PathBuf>,
}

fn ports(s: &str) -> std::result::Result<(u16, u16), String> {
    let bad =
        || format!("`{s}` is not a port range; give FIRST-LAST within 1-65535, such as 1024-65535");
    let (a, b) = s.split_once('-').ok_or_else(bad)?;
    let (a, b): (u16, u16) = (a.parse().map_err(|_| bad())?, b.parse().map_err(|_| bad())?);
    if a == 0 || a > b {
        return Err(bad());
    }
    Ok((a, b))
}

/// Most tries of one kind at one endpoint.
const MAX_TRIES: u64 = 1 << 24;

fn try_count(s: &str) -> std::result::Result<u64, String> {
    let n: u64 = s
        .parse()
        .map_err(|_| format!("`{s}` is not a count; give a whole number such as 65536"))?;
    if n > MAX_TRIES {
        return Err(format!("{n} is more than {MAX_TRIES} tries; give fewer"));
    }
    Ok(n)
}

/// What one endpoint withstood.
#[derive(Debug, Default, Serialize)]
pub struct Target {
    /// How it was found: `10.77.1.1:40123`, or the shm name.
    pub address: String,
    /// RMA tries by kind.
    pub rma: BTreeMap<&'static str, Tally>,
    /// Messages sent (each kind once), by what the provider said.
    pub messages: BTreeMap<String, String>,
    /// Messages that came back to the intruder.
    pub replies: u64,
    /// Why nothing could be tried, when the provider refused the address.
    pub unreachable: Option<String>,
    /// It answered no try of a kind, and the rest was not tried.
    pub silent: bool,
    /// The intruder's own side failed here (an endpoint it could not
    /// open): what it had tried is above, the rest was not tried.
    pub failed: Option<String>,
}

/// The report of `fabkit intrude`.
#[derive(Debug, Serialize)]
pub struct Report {
    /// Where and how it ran.
    pub meta: Provenance,
    /// The provider.
    pub provider: String,
    /// Scan and attack rounds run.
    pub rounds: u64,
    /// Every endpoint attacked, per round.
    pub targets: Vec<Target>,
    /// Tries carried out and messages answered, in all.
    pub breaches: u64,
    /// What a breach read or wrote, up to 20 lines.
    pub seen: Vec<String>,
}

/// Runs `fabkit intrude`; false on a breach.
pub fn command(args: &IntrudeArgs) -> Result<bool> {
    let hosts = hosts(&args.scan)?;
    if let Some(p) = &args.json {
        crate::output::check_output_file("--json", p)?;
    }
    if args.want == 0 {
        return Err(usage("--want 0 attacks nothing; give at least 1"));
    }
    if args.window > fabkit_fabric::stranger::MAX_WINDOW {
        return Err(usage(format!(
            "--window {} is more than the {} tries the intruder keeps in flight; give fewer",
            args.window,
            fabkit_fabric::stranger::MAX_WINDOW
        )));
    }
    if args.keys == 0 && args.random_keys == 0 {
        return Err(usage(
            "--keys 0 --random-keys 0 tries no key; give at least one of them",
        ));
    }
    let mut stranger = Stranger::open(&args.provider, args.domain.as_deref(), args.timeout)
        .with_context(|| format!("opening the intruder's endpoint on `{}`", args.provider))?;
    if stranger.virt_addr() {
        println!(
            "note: {} addresses a region by its virtual address (FI_MR_VIRT_ADDR): a key is \
             tried at address 0 and at random ones below 64 MiB, where a right key is refused \
             too, so a key alone is not found",
            stranger.provider()
        );
    }
    let start = Instant::now();
    let mut report = Report {
        meta: crate::provenance(None),
        provider: stranger.provider(),
        rounds: 0,
        targets: Vec::new(),
        breaches: 0,
        seen: Vec::new(),
    };
    loop {
        let found = scan_until(&hosts, args, Instant::now(), stranger.name())?;
        report.rounds += 1;
        for (address, name) in found {
            let t = attack(&mut stranger, args, &address, &name, &mut report.seen)?;
            report.breaches += t.replies + t.rma.values().map(|r| r.done).sum::<u64>();
            print_target(&t);
            report.targets.push(t);
        }
        if start.elapsed() >= args.duration.unwrap_or_default() {
            break;
        }
    }
    let left_open = stranger.left_open();
    drop(stranger);
    report.seen.truncate(20);
    let answered = report
        .targets
        .iter()
        .filter(|t| {
            !t.silent
                && (t.unreachable.is_some()
                    || t.rma.values().any(|r| r.tried > r.unanswered + r.skipped))
        })
        .count();
    if let Some(p) = &args.json {
        crate::output::write_out(p, &(serde_json::to_string_pretty(&report)? + "\n"))?;
    }
    if report.breaches > 0 {
        for s in &report.seen {
            println!("seen: {s}");
        }
        eprintln!(
            "fabkit: error: breach: {} of the intruder's tries were carried out or answered \
             (see above); the job's memory is reachable from outside it",
            report.breaches
        );
        return Ok(false);
    }
    if let Some(t) = report.targets.iter().find(|t| t.failed.is_some()) {
        anyhow::bail!(
            "the intruder's own side failed at {}: {} (what it tried before is in the report)",
            t.address,
            t.failed.as_deref().unwrap_or_default()
        );
    }
    if answered == 0 {
        anyhow::bail!(
            "none of the {} endpoint(s) found answered a try, so nothing was tested: is -p the \
             job's provider, and --scan its hosts?",
            report.targets.len()
        );
    }
    let silent = report.targets.iter().filter(|t| t.silent).count();
    let stopped: u64 = report
        .targets
        .iter()
        .flat_map(|t| t.rma.values())
        .filter(|r| r.stopped.is_some())
        .map(|r| r.skipped)
        .sum();
    if left_open > 0 {
        println!(
            "note: {left_open} of the intruder's endpoints were left open to its exit (ofi_rxm \
             over verbs crashes closing one after a refused atomic){}",
            if stopped > 0 {
                format!("; {stopped} tries were not made past that many")
            } else {
                String::new()
            }
        );
    }
    println!(
        "breaches: none in {} round(s): no try was carried out and no message answered \
         ({answered} endpoint(s) answered, by refusing; {silent} silent: answered nothing)",
        report.rounds
    );
    Ok(true)
}

/// Where to look.
enum Scan {
    /// TCP ports of these hosts.
    Tcp(Vec<Ipv4Addr>),
    /// This node's shm segments.
    Shm,
    /// This node's RDMA CM listeners.
    Cm,
}

/// What `--scan` names: `shm`, `cm`, or comma-separated IPv4 hosts.
fn hosts(scan: &str) -> Result<Scan> {
    match scan {
        "shm" => return Ok(Scan::Shm),
        "cm" => return Ok(Scan::Cm),
        _ => {}
    }
    let mut v = Vec::new();
    for h in scan.split(',') {
        let ip: Ipv4Addr = h.trim().parse().map_err(|_| {
            usage(format!(
                "--scan: `{h}` is not an IPv4 address; give hosts such as 10.77.1.1,10.77.2.2, \
                 or `shm`, or `cm`"
            ))
        })?;
        if !v.contains(&ip) {
            v.push(ip);
        }
    }
    Ok(Scan::Tcp(v))
}

/// Scans until `--want` endpoints answer or `--wait` has passed since
/// `start` (the round's start; a scan stops at it too): each one's
/// printable address and its provider name.
fn scan_until(
    hosts: &Scan,
    args: &IntrudeArgs,
    start: Instant,
    own: &[u8],
) -> Result<Vec<(String, Vec<u8>)>> {
    let mut tries = 0u32;
    loop {
        let found = match hosts {
            Scan::Tcp(h) => scan_tcp(h, args.ports, start + args.wait)
                .into_iter()
                .map(|a| (a.to_string(), sockaddr_in(a)))
                .collect::<Vec<_>>(),
            Scan::Shm => scan_shm()?,
            Scan::Cm => scan_cm(args.ports)?
                .into_iter()
                .map(|a| (a.to_string(), sockaddr_in(a)))
                .collect(),
        };
        // Not the intruder's own endpoint.
        let found: Vec<_> = found
            .into_iter()
            // (shm's names carry a NUL the endpoint's own name may not.)
            .filter(|(_, name)| !own.starts_with(name.strip_suffix(&[0]).unwrap_or(name)))
            .collect();
        tries += 1;
        if found.len() >= args.want {
            println!(
                "scan {tries}: {} endpoint(s): {}",
                found.len(),
                found
                    .iter()
                    .map(|f| f.0.as_str())
                    .collect::<Vec<_>>()
                    .join(" ")
            );
            return Ok(found);
        }
        if start.elapsed() >= args.wait {
            anyhow::bail!(
                "the scan found {} endpoint(s) of --want {} within --wait {:?} ({}): is the \
                 job running, and are the hosts reachable from here?",
                found.len(),
                args.want,
                args.wait,
                args.scan
            );
        }
        // A job starting: its endpoints appear as its ranks open them.
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// Open TCP ports of `hosts` in `ports`, by connecting (a refused or
/// unanswered port is closed); four threads, each port tried once, none
/// after `until`.
fn scan_tcp(hosts: &[Ipv4Addr], ports: (u16, u16), until: Instant) -> Vec<SocketAddrV4> {
    let all: Vec<SocketAddrV4> = hosts
        .iter()
        .flat_map(|h| (ports.0..=ports.1).map(move |p| SocketAddrV4::new(*h, p)))
        .collect();
    let threads = 4;
    let per = all.len().div_ceil(threads).max(1);
    let mut open: Vec<SocketAddrV4> = std::thread::scope(|s| {
        let handles: Vec<_> = all
            .chunks(per)
            .map(|c| {
                s.spawn(move || {
                    c.iter()
                        .take_while(|_| Instant::now() < until)
                        .filter(|a| {
                            // A connect to a local port that happens to be
                            // its own source port meets itself: not open.
                            TcpStream::connect_timeout(&(**a).into(), Duration::from_millis(200))
                                .is_ok_and(|s| s.local_addr().ok() != s.peer_addr().ok())
                        })
                        .copied()
                        .collect::<Vec<_>>()
                })
            })
            .collect();
        handles
            .into_iter()
            .flat_map(|h| h.join().unwrap_or_default())
            .collect()
    });
    open.sort();
    open
}

/// This node's RDMA CM listeners of other processes on IPv4 addresses with
/// a port in `ports`, as the kernel lists them (`rdma -j resource show
/// cm_id`, from iproute2): the CM's port space is its own, so a TCP scan
/// does not see them. A listener on the wildcard address is skipped (the
/// listing does not say which address reaches it).
fn scan_cm(ports: (u16, u16)) -> Result<Vec<SocketAddrV4>> {
    let out = std::process::Command::new("rdma")
        .args(["-j", "resource", "show", "cm_id"])
        .output()
        .context("running `rdma resource show cm_id` (iproute2's rdma tool) to list listeners")?;
    if !out.status.success() {
        anyhow::bail!(
            "`rdma resource show cm_id` failed: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    let ids: Vec<serde_json::Value> = serde_json::from_slice(&out.stdout)
        .context("reading `rdma -j resource show cm_id`'s JSON")?;
    let me = u64::from(std::process::id());
    let mut v: Vec<SocketAddrV4> = ids
        .iter()
        // A process's listener in the TCP port space (those without a pid
        // are the kernel's own services: NFS over RDMA, NVMe-oF, iSER).
        .filter(|id| {
            id["state"] == "LISTEN"
                && id["ps"] == "TCP"
                && id["pid"].as_u64().is_some_and(|p| p != me)
        })
        .filter_map(|id| id["src-addr"].as_str()?.parse::<SocketAddrV4>().ok())
        .filter(|a| !a.ip().is_unspecified() && (ports.0..=ports.1).contains(&a.port()))
        .collect();
    v.sort();
    v.dedup();
    Ok(v)
}

/// A `struct sockaddr_in` as socket providers name an endpoint.
fn sockaddr_in(a: SocketAddrV4) -> Vec<u8> {
    let mut v = Vec::with_capacity(16);
    v.extend_from_slice(&(libc::AF_INET as u16).to_ne_bytes());
    v.extend_from_slice(&a.port().to_be_bytes());
    v.extend_from_slice(&a.ip().octets());
    v.extend_from_slice(&[0u8; 8]);
    v
}

/// The shm provider's endpoints on this node of other users' live
/// processes: its segments in /dev/shm (`<pid>:<uid>:<endpoint>`), each
/// named as the provider names it.
fn scan_shm() -> Result<Vec<(String, Vec<u8>)>> {
    let dir = std::fs::read_dir(fabkit_fabric::shm::SHM_DIR)
        .with_context(|| format!("listing {}", fabkit_fabric::shm::SHM_DIR))?;
    let me = std::process::id().to_string();
    // SAFETY: geteuid has no preconditions.
    let uid = unsafe { libc::geteuid() }.to_string();
    let mut v: Vec<(String, Vec<u8>)> = dir
        .filter_map(|e| e.ok()?.file_name().into_string().ok())
        .filter(|n| {
            let parts: Vec<&str> = n.split(':').collect();
            parts.len() == 3
                && parts
                    .iter()
                    .all(|p| !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit()))
                && parts[0] != me
                // Not this user's own jobs: their memory is this user's
                // anyway (the kernel lets it read and write them), and
                // the tries would scribble on them.
                && parts[1] != uid
                // A live process's: one that exited left it behind.
                && std::path::Path::new("/proc").join(parts[0]).exists()
        })
        .map(|n| {
            let mut name = n.clone().into_bytes();
            name.push(0);
            (n, name)
        })
        .collect();
    v.sort();
    Ok(v)
}

/// Everything tried at one endpoint.
fn attack(
    s: &mut Stranger,
    args: &IntrudeArgs,
    address: &str,
    name: &[u8],
    seen: &mut Vec<String>,
) -> Result<Target> {
    let mut t = Target {
        address: address.to_string(),
        ..Target::default()
    };
    let mut targets: Vec<(u64, u64)> = (0..args.keys).map(|k| (0, k)).collect();
    for _ in 0..args.random_keys {
        let key = fabkit_core::random_u64()?;
        // Offsets within a region of a table this machine holds (a
        // table's region is tens of MiB); 8-byte aligned, as atomics must be.
        let offset = (fabkit_core::random_u64()? % (64 << 20)) & !7;
        targets.push((offset, key));
    }
    for what in [Try::Read, Try::Write, Try::FetchAdd] {
        let mut note = |addr: u64, key: u64, word: [u8; 8]| {
            let data = if what == Try::Write {
                "wrote"
            } else {
                "brought back"
            };
            seen.push(format!(
                "{address}: {} at {addr:#x} with key {key:#x} was carried out; it {data} {:02x?}",
                what.name(),
                word
            ));
        };
        match s.rma(name, what, &targets, args.window, &mut note) {
            Ok(tally) => {
                let silent = tally.tried > 0 && tally.unanswered == tally.tried;
                t.rma.insert(what.name(), tally);
                if silent {
                    // It takes no connection from the intruder (an
                    // endpoint that is not progressed while idle): nothing
                    // else would get through either.
                    t.silent = true;
                    return Ok(t);
                }
            }
            Err(Stopped::Unreachable(e)) => {
                // The provider would not take the address (shm maps the
                // target's segment on insert, which another user may not).
                t.unreachable = Some(format!(
                    "the provider would not take its address: {}",
                    exit::one_line(&anyhow::Error::new(e))
                ));
                return Ok(t);
            }
            Err(Stopped::Failed { error, so_far }) => {
                // The intruder's own side: what was settled counts (a
                // breach among it too), and the run fails.
                t.rma.insert(what.name(), *so_far);
                t.failed = Some(format!(
                    "{}: {}",
                    what.name(),
                    exit::one_line(&anyhow::Error::new(error))
                ));
                return Ok(t);
            }
        }
    }
    for (what, tag, msg) in messages()? {
        let said = match s.send(name, tag, &msg) {
            Ok(()) => "sent".to_string(),
            Err(e) => e,
        };
        t.messages.insert(what.to_string(), said);
    }
    t.replies = s.replies(Duration::from_secs(1));
    if t.replies > 0 {
        seen.push(format!(
            "{address}: {} message(s) answered the intruder",
            t.replies
        ));
    }
    Ok(t)
}

/// The crafted messages: (what, tag, bytes).
fn messages() -> Result<Vec<(&'static str, u64, Vec<u8>)>> {
    // The message path's header (dht::message::wire): magic, version,
    // kind, from, table, id, count, key_len, value_len, flags.
    let header = |from: u32, table: u64, count: u32, key: u32, value: u32| {
        let mut m = b"FK".to_vec();
        m.extend_from_slice(&[1, 1]);
        m.extend_from_slice(&from.to_le_bytes());
        m.extend_from_slice(&table.to_le_bytes());
        m.extend_from_slice(&1u64.to_le_bytes());
        for x in [count, key, value, 0] {
            m.extend_from_slice(&x.to_le_bytes());
        }
        m
    };
    let table = fabkit_core::random_u64()?;
    let read = |from| {
        let mut m = header(from, table, 1, 80, 104);
        m.extend_from_slice(&[7u8; 80]);
        m
    };
    let mut noise = vec![0u8; 64];
    for c in noise.chunks_mut(8) {
        c.copy_from_slice(&fabkit_core::random_u64()?.to_le_bytes());
    }
    let mut v = vec![
        (
            "request for a made-up table, claiming rank 0",
            REQUEST,
            read(0),
        ),
        ("request claiming rank 1", REQUEST, read(1)),
        (
            "request claiming rank 4000000000",
            REQUEST,
            read(4_000_000_000),
        ),
        (
            "malformed header (count 2^32-1)",
            REQUEST,
            header(0, table, u32::MAX, 80, 104),
        ),
        ("noise", REQUEST, noise),
        (
            "longer than any request (40 KiB)",
            REQUEST,
            vec![0xa5; 40 << 10],
        ),
    ];
    for (what, id) in [
        ("forged reply to request 0", 0),
        ("forged reply to request 1", 1),
        ("forged reply to request 2", 2),
        ("forged reply to request 3", 3),
    ] {
        v.push((what, id, header(0, table, 0, 80, 104)));
    }
    Ok(v)
}

fn print_target(t: &Target) {
    println!("{}:", t.address);
    if let Some(why) = &t.unreachable {
        println!("  unreachable: {why}");
        return;
    }
    for (what, r) in &t.rma {
        let why: Vec<String> = r
            .refused
            .iter()
            .chain(&r.not_posted)
            .map(|(k, v)| format!("{v} {k}"))
            .collect();
        println!(
            "  {what:<10} tried {:>7}  carried out {:>3}  unanswered {:>5}  skipped {:>7}  refused: {}",
            r.tried,
            r.done,
            r.unanswered,
            r.skipped,
            if why.is_empty() { "-".into() } else { why.join(", ") }
        );
    }
    for (what, r) in &t.rma {
        if let Some(why) = &r.stopped {
            println!("  {what}: {why}");
        }
    }
    if let Some(why) = &t.failed {
        println!("  failed on the intruder's side: {why}; the rest was not tried");
        return;
    }
    if t.silent {
        println!("  silent: no try was answered within the timeout; the rest was not tried");
        return;
    }
    let sent = t.messages.values().filter(|m| *m == "sent").count();
    println!(
        "  messages   {} kinds, {sent} left the intruder, {} answered",
        t.messages.len(),
        t.replies
    );
    for (what, said) in t.messages.iter().filter(|m| m.1 != "sent") {
        println!("    {what}: {said}");
    }
}
