//! `fabkit dht`: the benchmark a user chooses a cache by. The DHT runs as an
//! application uses it, in the workloads of the MPI-DHT paper (`paper`:
//! write-only, read-only and mixed phases, each timed between barriers) and
//! of YCSB's core set (`load-a`, `a`, `b`, `c`, `d`, `f`: the records loaded
//! first, untimed, then the run phase), with Redis beside it in the same
//! run: one server per rank on loopback, the same keys sharded over the
//! servers by the DHT's own placement, given the same batches (`--batch`
//! operations each).
//!
//! Per phase: throughput summed over ranks (median and spread of the
//! repetitions), latency percentiles from HDR histograms merged over ranks
//! (per batch, and per single operation from a closed-loop pass), busy CPU
//! time per operation, bytes moved per application byte and the DHT's
//! counters (checksum mismatches, lock retries, evictions). Then the hot-key
//! check: every rank updates one key at once, round after round, and reads
//! it back; a round whose key reads torn, foreign or corrupt is counted (and
//! fails the run, except the lock-free variant's corrupt and lost rounds,
//! which it allows).
//!
//! Files: [`workload`] makes the operations (pure), [`phase`] lays them out
//! and times them on a store, [`redis`] runs the servers and the client,
//! [`report`] merges the ranks and repetitions and writes the table, CSV,
//! JSON and chart, [`progress`] draws the bar.

mod args;
pub mod bound;
mod command;
pub mod phase;
pub mod progress;
pub mod redis;
pub mod report;
pub mod soak;
pub mod transports;
pub mod workload;

use std::net::{Ipv4Addr, SocketAddrV4};
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use fabkit_core::bootstrap::Bootstrap;
use fabkit_dht::message::Messenger;
use fabkit_dht::{Dht, Read, Stats, Transport, Variant};
use serde::{Deserialize, Serialize};

use crate::exit;
use crate::hist::Hist;
use args::{config, dist_of, spec};
pub use args::{validate, variants, DhtArgs, VariantArg};
pub use command::{command, demo};
use phase::{Checks, DhtStore, Prepared, RedisStore, Shape, Store};
use progress::Progress;
use workload::{Dist, PhaseName, Workload};

/// The hot-key check's counts, summed over ranks.
#[derive(Debug, Clone, Copy, Default, Serialize, Deserialize, PartialEq, Eq)]
pub struct HotKey {
    /// Reads of the hot key (ranks x rounds).
    pub reads: u64,
    /// Hits that were not a whole value written in that round.
    pub foreign: u64,
    /// Reads reported corrupt.
    pub corrupt: u64,
    /// Reads that missed.
    pub missing: u64,
}

/// Every rank writes the hot key at once, then every rank reads it; the
/// value a rank writes in a round is tagged with both, so a read that is
/// not a whole value of that round is foreign.
fn hot_key<T: Transport, M: Messenger>(
    d: &Dht<T, M>,
    a: &DhtArgs,
    id: u64,
    boot: &dyn Bootstrap,
) -> Result<HotKey> {
    let (me, n) = (boot.rank() as u64, boot.size() as u64);
    let (klen, vlen) = (a.record.key, a.record.value);
    let mut k = vec![0; klen];
    workload::key_bytes(id, &mut k);
    let value = |writer: u64, round: u64| {
        let mut v = vec![0; vlen];
        workload::fill_value(id, workload::tag(writer, HOT_VERSION + round), &mut v);
        v
    };
    let mut hot = HotKey::default();
    for round in 0..a.hot_rounds {
        boot.barrier()?;
        d.write(&k, &value(me, round))?;
        boot.barrier()?;
        hot.reads += 1;
        match d.read(&k)? {
            Read::Hit(v) => {
                hot.foreign += u64::from(!(0..n).any(|w| v == value(w, round)));
            }
            Read::Corrupt => hot.corrupt += 1,
            Read::Miss => hot.missing += 1,
        }
    }
    let all = gather(boot, &[hot.reads, hot.foreign, hot.corrupt, hot.missing])?;
    let sum = |i: usize| all.iter().map(|c| c[i]).sum();
    Ok(HotKey {
        reads: sum(0),
        foreign: sum(1),
        corrupt: sum(2),
        missing: sum(3),
    })
}

/// Versions of the hot key's values start here, above every phase's.
const HOT_VERSION: u64 = 1 << 32;

/// Every rank's words.
pub fn gather(boot: &dyn Bootstrap, mine: &[u64]) -> Result<Vec<Vec<u64>>> {
    let bytes: Vec<u8> = mine.iter().flat_map(|w| w.to_le_bytes()).collect();
    Ok(boot
        .allgather(&bytes)?
        .iter()
        .map(|b| {
            b.chunks_exact(8)
                .map(|w| u64::from_le_bytes(w.try_into().expect("8 bytes")))
                .collect()
        })
        .collect())
}

/// What a row measured: the DHT, or Redis beside it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum System {
    /// fabkit's DHT.
    #[default]
    Fabkit,
    /// Redis servers, one per rank.
    Redis,
}

impl System {
    /// The name reports give it.
    pub fn as_str(self) -> &'static str {
        match self {
            System::Fabkit => "fabkit",
            System::Redis => "redis",
        }
    }
}

impl std::fmt::Display for System {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.pad(self.as_str())
    }
}

/// Where the ranks' Redis servers listened.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RedisOn {
    /// Every rank on one host: loopback.
    Loopback,
    /// Ranks on several hosts: each server on its host's address in the
    /// ranks' network (`-d`).
    Network,
}

impl RedisOn {
    /// The transport its rows name.
    pub fn transport(self) -> &'static str {
        match self {
            RedisOn::Loopback => "redis loopback",
            RedisOn::Network => "redis tcp",
        }
    }
}

/// One timed phase of one repetition, measured on every rank and combined:
/// every rank holds the same copy.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Sample {
    /// The DHT or Redis.
    pub system: System,
    /// The DHT variant (none for Redis).
    pub variant: Option<Variant>,
    /// What carried the operations ("fabric shm", "mpi", "redis loopback").
    pub transport: String,
    /// The path the DHT's operations took (none for Redis).
    pub path: Option<transports::Taken>,
    /// Where Redis's servers listened (none for the DHT).
    pub redis: Option<RedisOn>,
    /// The workload.
    pub workload: Workload,
    /// Its key distribution.
    pub distribution: Dist,
    /// Which phase of the workload.
    pub phase: PhaseName,
    /// Repetition, from 0.
    pub rep: u32,
    /// Ranks.
    pub ranks: usize,
    /// Operations per batch.
    pub batch: usize,
    /// Batches in flight an operation of a batch used (lanes; 1 for
    /// Redis: its pipeline is the batch).
    pub depth: usize,
    /// The slowest rank's time for its share, seconds.
    pub secs: f64,
    /// Operations, reads and writes of all ranks.
    pub ops: u64,
    /// See `ops`.
    pub reads: u64,
    /// See `ops`.
    pub writes: u64,
    /// Busy CPU time of every process of the job (and of the Redis
    /// servers, for Redis) over the phase, ns.
    pub cpu_ns: u64,
    /// Key and value bytes the operations asked for.
    pub app_bytes: u64,
    /// Bytes the remote operations (the DHT) or the RESP messages (Redis)
    /// carried.
    pub wire_bytes: u64,
    /// What the reads returned, summed.
    pub checks: Checks,
    /// The DHT's counters over the phase, summed (zero for Redis).
    pub stats: Stats,
    /// Latency histogram (ns, as value/count pairs) of the timed pass.
    pub latency: Hist,
    /// Of the closed-loop pass of single operations, when one ran.
    pub single: Hist,
    /// The hot-key check, on the variant's first sample.
    pub hot: Option<HotKey>,
}

/// What one rank measured of a phase, before it is combined.
#[derive(Debug, Serialize, Deserialize)]
struct Local {
    secs: f64,
    /// Host and process: in-process ranks share one process's CPU time.
    host: String,
    pid: u32,
    cpu_ns: u64,
    server_cpu_ns: u64,
    wire_bytes: u64,
    checks: Checks,
    stats: Stats,
    latency: Hist,
    single: Hist,
}

/// Combines every rank's `mine` into the phase's sample (collective).
fn combine(boot: &dyn Bootstrap, mine: &Local, mut s: Sample) -> Result<Sample> {
    let all = boot.allgather(&serde_json::to_vec(mine)?)?;
    let all: Vec<Local> = all
        .iter()
        .map(|b| serde_json::from_slice(b))
        .collect::<std::result::Result<_, _>>()
        .context("decoding the ranks' phase reports")?;
    s.secs = all.iter().map(|l| l.secs).fold(0.0, f64::max);
    // In-process ranks share a process: its CPU time once (the longest
    // view of it), then every process's and every server's.
    let mut by_pid = std::collections::BTreeMap::<(&str, u32), u64>::new();
    for l in &all {
        let e = by_pid.entry((&l.host, l.pid)).or_default();
        *e = (*e).max(l.cpu_ns);
    }
    let servers = all
        .iter()
        .fold(0u64, |t, l| t.saturating_add(l.server_cpu_ns));
    s.cpu_ns = by_pid.values().fold(servers, |t, c| t.saturating_add(*c));
    s.wire_bytes = all.iter().map(|l| l.wire_bytes).sum();
    for l in &all {
        s.latency.merge(&l.latency);
        s.single.merge(&l.single);
    }
    for l in &all {
        s.stats.add(&l.stats);
        let c = &mut s.checks;
        c.wrong += l.checks.wrong;
        c.lost += l.checks.lost;
        c.false_hits += l.checks.false_hits;
        c.hits += l.checks.hits;
        c.misses += l.checks.misses;
        c.corrupt += l.checks.corrupt;
    }
    if s.system == System::Fabkit {
        s.wire_bytes = s.stats.remote_bytes;
    }
    Ok(s)
}

/// The keys every rank's write phase draws in the paper's zipfian workload
/// (each rank's draws follow from the seed), whose misses in the mixed
/// phase are losses; empty for other workloads.
fn drawn(
    a: &DhtArgs,
    w: Workload,
    ranks: usize,
    rep: u32,
) -> Result<std::collections::HashSet<u64>> {
    let mut out = std::collections::HashSet::new();
    if w != Workload::Paper || dist_of(a, w) != Dist::Zipf {
        return Ok(out);
    }
    for r in 0..ranks {
        let phases = workload::phases(&spec(a, w, ranks, r, rep)).map_err(exit::usage)?;
        if let Some(write) = phases.iter().find(|p| p.name == PhaseName::Write) {
            out.extend(write.ops.iter().map(|o| o.key));
        }
    }
    Ok(out)
}

/// The shape of `w`'s phase number `i` on this rank.
fn shape<'w>(
    a: &DhtArgs,
    s: &workload::Spec,
    (i, rep): (usize, u32),
    ph: &workload::Phase,
    written: &'w std::collections::HashSet<u64>,
) -> Shape<'w> {
    let total = s.ranks.saturating_mul(s.keys);
    let paper_uniform = s.workload == Workload::Paper && dist_of(a, s.workload) == Dist::Uniform;
    Shape {
        klen: a.record.key,
        vlen: a.record.value,
        batch: a.batch,
        rank: s.rank,
        ranks: s.ranks as u32,
        version: u64::from(rep) * 64 + i as u64,
        // The paper's read phase looks up as many keys nobody writes.
        absent_from: if paper_uniform { total } else { u64::MAX },
        absent_end: if paper_uniform {
            total.saturating_mul(2)
        } else {
            u64::MAX
        },
        // The paper's zipfian mixed phase reads keys of the whole range, of
        // which the write phase drew only some: a miss there is no loss.
        may_miss: s.workload == Workload::Paper
            && dist_of(a, s.workload) == Dist::Zipf
            && ph.name == PhaseName::Mixed,
        written: Some(written),
        // YCSB's untimed loads are reported (their evictions explain the
        // run's misses) but get no latency pass.
        singles: if a.batch > 1 && ph.timed {
            a.latency_ops
        } else {
            0
        },
    }
}

/// A timed phase measured on this rank, waiting for its latency pass and
/// for the ranks' measurements to be combined.
struct Pending {
    mine: Local,
    sample: Sample,
    /// Which phase of the workload.
    index: usize,
}

/// Runs one phase on `store` between barriers. `counters` reads the store's
/// counters (the DHT's stats, or Redis's bytes and server CPU time) before
/// and after. An untimed phase (YCSB's load) only loads.
fn run_phase<S: Store>(
    a: &DhtArgs,
    boot: &dyn Bootstrap,
    store: &mut S,
    (ph, index): (&workload::Phase, usize),
    shape: &Shape<'_>,
    counters: &mut dyn FnMut(&S) -> (Stats, u64, u64),
    sample: Sample,
) -> Result<Option<Pending>> {
    let p = Prepared::new(ph, shape)?;
    let label = format!(
        "{} {} {}",
        sample.system,
        report::name(sample.workload),
        ph.name
    );
    let mut progress = Progress::new(boot.rank() == 0, label, p.windows());
    let (st0, wire0, srv0) = counters(store);
    boot.barrier()?;
    let what = || {
        format!(
            "{} {} {} {} on rank {}",
            sample.system,
            sample
                .variant
                .map_or_else(|| "-".into(), report::variant_name),
            report::name(sample.workload),
            ph.name,
            boot.rank()
        )
    };
    let t = phase::timed(store, &p, a.batch, &mut progress).with_context(what)?;
    drop(progress);
    if let (0, Some(file), System::Fabkit) = (index, &a.hold, sample.system) {
        // Not timed, but counted: what the services refused meanwhile.
        hold(boot, file, a.timeout)?;
        boot.set_wait(phase_bound(a, boot.size()));
    }
    boot.barrier()?;
    let (st1, wire1, srv1) = counters(store);
    let (reads, writes) = p.reads_writes();
    let mine = Local {
        secs: t.secs,
        host: fabkit_core::bootstrap::host_id(),
        pid: std::process::id(),
        cpu_ns: t.cpu.as_nanos() as u64,
        server_cpu_ns: srv1.saturating_sub(srv0),
        wire_bytes: wire1.saturating_sub(wire0),
        checks: t.checks,
        stats: st1.since(&st0),
        latency: t.hist,
        single: Hist::new(),
    };
    let sample = Sample {
        ops: p.ops(),
        reads,
        writes,
        // A read-modify-write asks for a record twice.
        app_bytes: reads
            .saturating_add(writes)
            .saturating_mul((a.record.key + a.record.value) as u64),
        ..sample
    };
    Ok(Some(Pending {
        mine,
        sample,
        index,
    }))
}

/// After every timed phase of a workload ran on `store`: each one's
/// closed-loop latency pass (its first operations again, one at a time:
/// run only now, so that its writes cannot restore what a timed phase
/// evicted before the next phase looked), then the ranks' measurements
/// combined (collective).
fn finish_phases<'w, S: Store>(
    boot: &dyn Bootstrap,
    store: &mut S,
    phases: &[workload::Phase],
    shapes: &dyn Fn(usize) -> Shape<'w>,
    pending: Vec<Pending>,
) -> Result<Vec<Sample>> {
    let mut out = Vec::with_capacity(pending.len());
    for Pending {
        mut mine,
        sample,
        index,
    } in pending
    {
        let sh = shapes(index);
        if sh.singles > 0 {
            let p = Prepared::new(&phases[index], &sh)?;
            boot.barrier()?;
            let single = phase::singles(store, &p).with_context(|| {
                format!(
                    "the latency pass of {} on rank {}",
                    sample.phase,
                    boot.rank()
                )
            })?;
            mine.single = single;
        }
        let mut s = sample;
        // Counts of operations add up over ranks.
        let all = gather(boot, &[s.ops, s.reads, s.writes, s.app_bytes])?;
        let sum = |i: usize| all.iter().map(|c| c[i]).sum::<u64>();
        (s.ops, s.reads, s.writes, s.app_bytes) = (sum(0), sum(1), sum(2), sum(3));
        let s = combine(boot, &mine, s)?;
        out.push(s);
    }
    Ok(out)
}

/// What one rank ran: the samples, and with `--duration` the soak.
#[derive(Debug, Serialize, Deserialize)]
pub struct Ran {
    /// The samples of the whole run (of the last cycle, in a soak).
    pub samples: Vec<Sample>,
    /// The soak's points and summary, gathered on every rank.
    pub soak: Option<soak::Soak>,
}

/// Runs every variant and workload on this rank over the tables `tables`
/// makes (with `--duration`, again and again until the time is up, on
/// fresh tables each time), then Redis: the samples of the whole run.
fn bench_rank(a: &DhtArgs, boot: &dyn Bootstrap, tables: &transports::Tables<'_>) -> Result<Ran> {
    let mut told = boot.rank() != 0;
    let mut soaking = a.duration.map(soak::Soaking::start);
    let mut out = loop {
        let out = bench_cycle(a, boot, tables, &mut told)?;
        let Some(s) = soaking.as_mut() else {
            break out;
        };
        // Operations summed over ranks: this rank's share.
        let ops = out.iter().map(|x| x.ops).sum::<u64>() / boot.size().max(1) as u64;
        if !s.after_cycle(ops, boot)? {
            break out;
        }
    };
    let soak = soaking.map(|s| s.finish(boot)).transpose()?;
    if !a.no_redis {
        out.extend(redis_rank(a, boot)?);
    }
    Ok(Ran { samples: out, soak })
}

/// Every variant and workload once on this rank, each repetition on a
/// fresh table; the note on the path taken, once (`told`).
fn bench_cycle(
    a: &DhtArgs,
    boot: &dyn Bootstrap,
    tables: &transports::Tables<'_>,
    told: &mut bool,
) -> Result<Vec<Sample>> {
    let mut out = Vec::new();
    for v in variants(a) {
        let cfg = config(a, v)?;
        for (wi, &w) in a.workload.iter().enumerate() {
            for rep in 0..a.reps {
                // A rank that never arrives is named within --timeout (10 s
                // at least) in the set-up, and waited for a phase's length
                // at a phase barrier.
                boot.set_wait(a.timeout.max(SETUP_WAIT));
                let mut t = tables.open(&cfg)?;
                boot.set_wait(phase_bound(a, boot.size()));
                let path = t.path;
                if !std::mem::replace(told, true) {
                    // Once, from rank 0: the path and the fact it was
                    // chosen by (`auto` may also fall back).
                    eprintln!(
                        "fabkit: note: the DHT's path is {} ({}: {})",
                        path.name(),
                        tables.asked().name(),
                        t.plan.why
                    );
                }
                let hot = wi == 0 && rep == 0;
                let samples = fabkit_dht::with_table!(&mut t.table, d => {
                    bench_table(a, boot, d, (v, w, rep), path, hot)
                })?;
                out.extend(samples);
                tables.close(t)?;
            }
        }
    }
    Ok(out)
}

/// The phases of workload `w`, repetition `rep`, on the table `d` of
/// variant `v`; with the hot-key check where `hot`.
fn bench_table<T: Transport, M: Messenger>(
    a: &DhtArgs,
    boot: &dyn Bootstrap,
    d: &mut Dht<T, M>,
    (v, w, rep): (Variant, Workload, u32),
    path: transports::Taken,
    hot: bool,
) -> Result<Vec<Sample>> {
    let (me, n) = (boot.rank(), boot.size());
    let s = spec(a, w, n, me, rep);
    let phases = workload::phases(&s).map_err(exit::usage)?;
    let written = drawn(a, w, n, rep)?;
    let transport = transports::carried_by(d);
    if let Some(n) = a.depth {
        d.set_depth(n)?;
    }
    let d = &*d;
    let mut store = DhtStore {
        dht: d,
        out: vec![fabkit_dht::Write::Inserted; a.batch],
    };
    let mut pending = Vec::new();
    for (i, ph) in phases.iter().enumerate() {
        let base = Sample {
            variant: Some(v),
            path: Some(path),
            depth: d.lanes_for(a.batch),
            ..Sample::of(a, System::Fabkit, &transport, w, ph, rep, n)
        };
        let mut counters = |st: &DhtStore<'_, T, M>| (st.dht.stats(), 0, 0);
        let sh = shape(a, &s, (i, rep), ph, &written);
        let p = run_phase(a, boot, &mut store, (ph, i), &sh, &mut counters, base)?;
        pending.extend(p);
    }
    let shapes = |i: usize| shape(a, &s, (i, rep), &phases[i], &written);
    let mut out = finish_phases(boot, &mut store, &phases, &shapes, pending)?;
    // The hot-key check once per variant, on a loaded table. Values under
    // 16 B carry no writer's tag (workload::fill_value), so a mix of two
    // writers' could not be told.
    if hot && a.hot_rounds > 0 && a.record.value >= 16 {
        let hot = hot_key(d, a, workload::hot_key(&s), boot)?;
        if let Some(last) = out.last_mut() {
            last.hot = Some(hot);
        }
    }
    Ok(out)
}

/// The longest `--hold`.
const HOLD_MAX: Duration = Duration::from_secs(3600);

/// Holds every rank until `file` exists: rank 0 looks for it every 20 ms
/// (a file has nothing to wait on), the others wait at a barrier; at most
/// [`HOLD_MAX`]. The ranks' services and progress threads answer peers
/// (and strangers) meanwhile.
fn hold(boot: &dyn Bootstrap, file: &std::path::Path, timeout: Duration) -> Result<()> {
    boot.set_wait(HOLD_MAX + timeout.max(SETUP_WAIT));
    if boot.rank() == 0 {
        eprintln!(
            "fabkit: note: the table is written; holding until {} exists",
            file.display()
        );
        let until = Instant::now() + HOLD_MAX;
        while !file.exists() {
            if Instant::now() >= until {
                anyhow::bail!(
                    "--hold: {} did not appear within {} s, so the run stopped; create it \
                     sooner next time",
                    file.display(),
                    HOLD_MAX.as_secs()
                );
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
    boot.barrier()?;
    Ok(())
}

/// `e`, or what ended this rank's server if it is no longer running.
fn died(server: &mut redis::Server, e: anyhow::Error) -> anyhow::Error {
    match server.check_alive() {
        Err(dead) => dead.context(e.to_string()),
        Ok(()) => e,
    }
}

/// The IPv4 address of this host a Redis server listens on when the ranks
/// run on several hosts: the one in the network `domain` names
/// (`10.77.1.0/24`), or the address of the interface it names (`eth0`).
fn listen_ip(domain: Option<&str>) -> std::result::Result<Ipv4Addr, String> {
    let domain = domain.ok_or("give the ranks' network with -d, such as -d 10.77.1.0/24")?;
    let all = fabkit_core::net::interface_addresses().map_err(|e| format!("getifaddrs: {e}"))?;
    let v4 = |a: &fabkit_core::net::IfAddr| match a.addr {
        std::net::IpAddr::V4(ip) if a.up => Some(ip),
        _ => None,
    };
    let found: Vec<Ipv4Addr> = match domain.split_once('/') {
        Some((net, bits)) => {
            let (Ok(net), Ok(bits)) = (net.parse::<std::net::IpAddr>(), bits.parse::<u32>()) else {
                return Err(format!("-d {domain} is not a network such as 10.77.1.0/24"));
            };
            if net.is_ipv6() {
                return Err(format!(
                    "-d {domain} is an IPv6 network and the Redis servers listen on IPv4: give \
                     the ranks' IPv4 network"
                ));
            }
            all.iter()
                .filter(|a| fabkit_core::net::in_network(a.addr, net, bits))
                .filter_map(v4)
                .collect()
        }
        None => all
            .iter()
            .filter(|a| a.name == domain)
            .filter_map(v4)
            .collect(),
    };
    match found.as_slice() {
        [ip] => Ok(*ip),
        [] => Err(format!(
            "no IPv4 address of this host is in -d {domain} (an RDMA device such as mlx5_0 has \
             none: give the network of its IP interface, such as -d 10.0.0.0/24)"
        )),
        many => {
            Err(format!(
            "several IPv4 addresses of this host are in -d {domain} ({}): give one, such as -d \
             {}/32",
            many.iter().map(|a| a.to_string()).collect::<Vec<_>>().join(", "),
            many[0]
        ))
        }
    }
}

/// The same workloads on Redis: one server per rank, every rank a client of
/// all of them. Without redis-server, one line says how to install it (on
/// the reporting rank) and nothing runs.
fn redis_rank(a: &DhtArgs, boot: &dyn Bootstrap) -> Result<Vec<Sample>> {
    let (me, n) = (boot.rank(), boot.size());
    // Every rank must agree to run: one without the binary stops all.
    let have = redis::available().is_some();
    let all = gather(boot, &[u64::from(have)])?;
    if all.iter().any(|h| h[0] == 0) {
        if me == 0 {
            eprintln!("fabkit: note: {}", redis::INSTALL_HINT);
        }
        return Ok(Vec::new());
    }
    // Ranks on one host: servers on loopback. On several hosts (or
    // network namespaces): each on its address in the ranks' network,
    // which -d names; without it the rows are left out, on every rank.
    let across = !boot.same_host()?;
    let ip = if across {
        listen_ip(a.domain.as_deref())
    } else {
        Ok(Ipv4Addr::LOCALHOST)
    };
    let all = gather(boot, &[u64::from(ip.is_ok())])?;
    if let Some(r) = all.iter().position(|h| h[0] == 0) {
        if me == 0 {
            let why = ip
                .as_ref()
                .err()
                .cloned()
                .unwrap_or_else(|| format!("rank {r} has none"));
            eprintln!(
                "fabkit: note: the ranks run on several hosts and a Redis server needs an \
                 address the others reach ({why}), so the Redis rows are left out"
            );
        }
        return Ok(Vec::new());
    }
    let ip = ip.expect("checked on every rank");
    // One password for the run, rank 0's: the servers may listen on a
    // network other hosts reach.
    let mine = [fabkit_core::random_u64()?, fabkit_core::random_u64()?];
    let all = gather(boot, &mine)?;
    let word = |i: usize| all[0].get(i).copied().unwrap_or(0);
    let password = redis::password([word(0), word(1)]);
    let started = redis::Server::start(ip, a.timeout, &password);
    let card = started.as_ref().map_or(0, |s| {
        u64::from(u32::from(*s.addr().ip())) << 16 | u64::from(s.port())
    });
    let cards = gather(boot, &[card])?;
    let mut server = started.context("starting this rank's redis-server")?;
    if let Some(r) = cards.iter().position(|c| c[0] == 0) {
        anyhow::bail!("rank {r} could not start its redis-server");
    }
    let addrs: Vec<SocketAddrV4> = cards
        .iter()
        .map(|c| SocketAddrV4::new(Ipv4Addr::from((c[0] >> 16) as u32), c[0] as u16))
        .collect();
    let mut client = redis::Client::connect(&addrs, a.timeout, &password)?;
    let on = if across {
        RedisOn::Network
    } else {
        RedisOn::Loopback
    };
    let mut out = Vec::new();
    for &w in &a.workload {
        for rep in 0..a.reps {
            if me == 0 {
                client.flush_all()?;
            }
            boot.barrier()?;
            let s = spec(a, w, n, me, rep);
            let phases = workload::phases(&s).map_err(exit::usage)?;
            let written = drawn(a, w, n, rep)?;
            let mut store = RedisStore {
                client: &mut client,
                vlen: a.record.value,
                hit: vec![false; a.batch],
            };
            let mut pending = Vec::new();
            for (i, ph) in phases.iter().enumerate() {
                let base = Sample {
                    redis: Some(on),
                    ..Sample::of(a, System::Redis, on.transport(), w, ph, rep, n)
                };
                let srv = &mut server;
                let mut counters = |st: &RedisStore<'_>| {
                    let (tx, rx) = st.client.bytes();
                    let cpu = srv.cpu_time().map_or(0, |c| c.as_nanos() as u64);
                    (Stats::default(), tx + rx, cpu)
                };
                let sh = shape(a, &s, (i, rep), ph, &written);
                let r = run_phase(a, boot, &mut store, (ph, i), &sh, &mut counters, base);
                pending.extend(r.map_err(|e| died(&mut server, e))?);
            }
            let shapes = |i: usize| shape(a, &s, (i, rep), &phases[i], &written);
            let r = finish_phases(boot, &mut store, &phases, &shapes, pending);
            out.extend(r.map_err(|e| died(&mut server, e))?);
        }
    }
    drop(client);
    boot.barrier()?;
    Ok(out)
}

impl Sample {
    /// The sample of `system` over `transport` for phase `ph` of workload
    /// `w`, repetition `rep`, `ranks` ranks: what is known before it runs.
    #[allow(clippy::too_many_arguments)]
    fn of(
        a: &DhtArgs,
        system: System,
        transport: &str,
        w: Workload,
        ph: &workload::Phase,
        rep: u32,
        ranks: usize,
    ) -> Sample {
        Sample {
            system,
            transport: transport.into(),
            workload: w,
            distribution: dist_of(a, w),
            phase: ph.name,
            rep,
            ranks,
            batch: a.batch,
            depth: 1,
            ..Sample::default()
        }
    }
}

/// What `a` asks of the tables' transport.
pub fn fabric_of(a: &DhtArgs) -> Result<transports::Fabric<'_>> {
    Ok(transports::Fabric {
        provider: &a.provider,
        domain: a.domain.as_deref(),
        timeout: a.timeout,
        batch: a.batch,
        path: transports::path_of(a.path, a.shm)?,
    })
}

/// Runs the benchmark on this rank over libfabric.
pub fn run_rank(a: &DhtArgs, boot: &dyn Bootstrap) -> Result<Ran> {
    bench_rank(a, boot, &transports::Tables::fabric(&fabric_of(a)?, boot))
}

/// Runs the benchmark on this rank over MPI.
#[cfg(feature = "mpi")]
pub fn run_rank_mpi(
    a: &DhtArgs,
    kind: fabkit_mpi::window::WindowKind,
    boot: &fabkit_mpi::MpiBootstrap,
) -> Result<Ran> {
    bench_rank(
        a,
        boot,
        &transports::Tables::mpi(&fabric_of(a)?, kind, boot),
    )
}

/// How long a rank waits for the others at a phase barrier: a rank may be
/// a whole phase behind, each batch of a phase may take up to --timeout, and
/// the longest phase (reading every rank's keys, then as many absent ones)
/// has (ranks + 1) x ceil(keys / batch) batches; plus one --timeout for the
/// exchange itself. Saturates rather than overflows, and is capped at
/// [`MAX_PHASE_WAIT`] (or --timeout, if longer): the product grew to
/// thousands of seconds for a rank that was merely stopped (`-k 2000 -b 1`)
/// and to centuries for a million keys.
pub fn phase_bound(a: &DhtArgs, ranks: usize) -> Duration {
    let batches = a
        .keys
        .max(a.ops())
        .div_ceil(a.batch.max(1) as u64)
        .saturating_mul(ranks as u64 + 1)
        .saturating_add(1);
    a.timeout
        .saturating_mul(u32::try_from(batches).unwrap_or(u32::MAX))
        .min(a.timeout.max(MAX_PHASE_WAIT))
}

/// The shortest wait for the other ranks in a table's set-up: a --timeout
/// of a millisecond is for operations, not for ranks setting up endpoints.
pub const SETUP_WAIT: Duration = Duration::from_secs(10);

/// The longest a rank waits for the others at a phase barrier unless
/// --timeout is longer: an hour, as `perf`'s idle ranks wait for a size.
pub const MAX_PHASE_WAIT: Duration = Duration::from_secs(3600);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_phase_barrier_waits_at_most_an_hour_unless_the_timeout_is_longer() {
        let s = Duration::from_secs;
        let args = |extra: &[&str]| {
            use clap::Parser;
            #[derive(Parser)]
            struct Cmd {
                #[command(flatten)]
                a: DhtArgs,
            }
            Cmd::parse_from(["dht"].iter().chain(extra)).a
        };
        // 2000 batches x 3 ranks' worth: 6001 s before, an hour now.
        let a = args(&["--timeout", "1", "-k", "2000", "-b", "1"]);
        assert_eq!(phase_bound(&a, 2), MAX_PHASE_WAIT);
        // Saturated to centuries before.
        let a = args(&["--timeout", "1", "-k", "1000000", "-b", "1"]);
        assert_eq!(phase_bound(&a, 2), MAX_PHASE_WAIT);
        // Short phases keep their own bound: (2 + 1) x 1 batch + 1.
        let a = args(&["--timeout", "2", "-k", "10", "-b", "10"]);
        assert_eq!(phase_bound(&a, 2), s(8));
        // A timeout longer than the cap is kept.
        let a = args(&["--timeout", "7200", "-k", "10", "-b", "1"]);
        assert_eq!(phase_bound(&a, 2), s(7200));
    }

    #[test]
    fn a_redis_server_across_hosts_listens_on_the_address_the_network_names() {
        let lo = Ipv4Addr::LOCALHOST;
        assert_eq!(listen_ip(Some("127.0.0.0/8")), Ok(lo));
        assert_eq!(listen_ip(Some("lo")), Ok(lo));
        for (d, says) in [
            (None, "give the ranks' network with -d"),
            (
                Some("198.51.100.0/24"),
                "no IPv4 address of this host is in",
            ),
            (Some("10.0.0.0/x"), "is not a network"),
            (Some("fd00::/64"), "IPv6"),
            (Some("no-such-if0"), "no IPv4 address of this host is in"),
        ] {
            let e = listen_ip(d).unwrap_err();
            assert!(e.contains(says), "{d:?}: {e}");
        }
    }
}
