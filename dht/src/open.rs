//! One way to make a table from its configuration, for every program that
//! runs tables (the benchmark, the surrogate, the C API): the path the
//! configuration asks for ([`Config::path`]) is resolved against where the
//! ranks are and what carries their operations ([`path::plan`]), and the
//! transport (and messenger) that plan needs is set up.
//!
//! The tables differ in type by what carries them, so [`open`] gives a
//! [`Table`], one variant per kind, and [`with_table!`](crate::with_table)
//! runs the same code on whichever it holds.
//!
//! | plan (near, far) | libfabric | MPI |
//! |---|---|---|
//! | memory (one node) | shared memory, no fabric | shared memory, no MPI window |
//! | memory + rma | same-node mapping, RMA to other nodes | refused |
//! | rma | RMA to every rank | MPI windows |
//! | memory + message, message | memory for own (and node), libfabric messages | MPI point-to-point |

use std::time::Duration;

use fabkit_core::bootstrap::{host_id, Bootstrap};
use fabkit_fabric::{Hints, Mailbox, MailboxConfig, Rank, RankConfig};

use crate::config::Config;
use crate::outcome::{Error, Result};
use crate::path::{self, Carrier, Plan, Taken, Way};
use crate::placement::KeyHash;
use crate::transport::shm::ShmTransport;
use crate::Dht;

#[cfg(feature = "mpi")]
use crate::transport::mpi::MpiTransport;
#[cfg(feature = "mpi")]
use fabkit_mpi::{MpiBootstrap, WindowKind};

/// Where a job's MPI bootstrap lives: borrowed for the job's length, or
/// shared (the C API keeps it beside the table).
#[cfg(feature = "mpi")]
#[derive(Debug, Clone)]
pub enum MpiBoot<'b> {
    /// Borrowed.
    Borrowed(&'b MpiBootstrap),
    /// Shared.
    Shared(std::rc::Rc<MpiBootstrap>),
}

#[cfg(feature = "mpi")]
impl MpiBoot<'_> {
    fn get(&self) -> &MpiBootstrap {
        match self {
            MpiBoot::Borrowed(b) => b,
            MpiBoot::Shared(b) => b,
        }
    }
}

/// What carries a job's operations, and how.
#[derive(Debug, Clone)]
pub struct Recipe<'b> {
    /// The libfabric provider (for the fabric, its messages, and the
    /// same-node mapping's fabric to other nodes).
    pub provider: String,
    /// Its domain: an interface, a device or a network.
    pub domain: Option<String>,
    /// The longest wait for one operation or message.
    pub timeout: Duration,
    /// Operations in flight per batch (the fabric's window).
    pub window: usize,
    /// How keys are placed.
    pub key_hash: KeyHash,
    /// MPI instead of libfabric: windows of this kind for RMA, and
    /// point-to-point for messages.
    #[cfg(feature = "mpi")]
    pub mpi: Option<(MpiBoot<'b>, WindowKind)>,
    #[cfg(not(feature = "mpi"))]
    #[doc(hidden)]
    pub _boot: std::marker::PhantomData<&'b ()>,
}

impl Recipe<'_> {
    /// libfabric `provider`, with the defaults: no domain named, a 10 s
    /// timeout, a window of 64, fabkit's key hash.
    pub fn fabric(provider: impl Into<String>) -> Recipe<'static> {
        Recipe {
            provider: provider.into(),
            domain: None,
            timeout: Duration::from_secs(10),
            window: 64,
            key_hash: KeyHash::default(),
            #[cfg(feature = "mpi")]
            mpi: None,
            #[cfg(not(feature = "mpi"))]
            _boot: std::marker::PhantomData,
        }
    }

    /// The rank configuration of a table of `cfg`.
    pub fn rank_config(&self, cfg: &Config) -> RankConfig {
        let mut rc = RankConfig::new(self.provider.clone());
        rc.domain = self.domain.clone();
        rc.region_len = cfg.region_len();
        rc.atomics = cfg.variant.needs_atomics();
        rc.timeout = self.timeout;
        rc.window = self.window.clamp(1, 256);
        rc
    }
}

/// A table as [`open`] made it: one variant per kind of transport.
pub enum Table<'b> {
    /// RMA to every rank over libfabric.
    Rma(Dht<Rank>),
    /// Loads and stores within the node (and RMA to other nodes).
    Memory(Dht<ShmTransport>),
    /// This rank's region (and its node's) by memory, the others' keys as
    /// requests over libfabric messages.
    Message(Dht<ShmTransport, Mailbox>),
    /// MPI windows.
    #[cfg(feature = "mpi")]
    MpiRma(Dht<MpiTransport<'b>>),
    /// This rank's region (and its node's) by memory, the others' keys as
    /// requests over MPI point-to-point.
    #[cfg(feature = "mpi")]
    MpiMessage(Dht<ShmTransport, fabkit_mpi::Mailbox>),
    #[cfg(not(feature = "mpi"))]
    #[doc(hidden)]
    _Never(std::convert::Infallible, std::marker::PhantomData<&'b ()>),
}

impl std::fmt::Debug for Table<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        crate::with_table!(self, d => d.fmt(f))
    }
}

/// Runs `$e` with `$d` bound to the [`Table`]'s `Dht`, whatever its kind
/// (`$t` is a `Table`, a `&Table` or a `&mut Table`).
#[cfg(feature = "mpi")]
#[macro_export]
macro_rules! with_table {
    ($t:expr, $d:ident => $e:expr) => {
        match $t {
            $crate::open::Table::Rma($d) => $e,
            $crate::open::Table::Memory($d) => $e,
            $crate::open::Table::Message($d) => $e,
            $crate::open::Table::MpiRma($d) => $e,
            $crate::open::Table::MpiMessage($d) => $e,
        }
    };
}

/// Runs `$e` with `$d` bound to the [`Table`]'s `Dht`, whatever its kind
/// (`$t` is a `Table`, a `&Table` or a `&mut Table`).
#[cfg(not(feature = "mpi"))]
#[macro_export]
macro_rules! with_table {
    ($t:expr, $d:ident => $e:expr) => {
        match $t {
            $crate::open::Table::Rma($d) => $e,
            $crate::open::Table::Memory($d) => $e,
            $crate::open::Table::Message($d) => $e,
            $crate::open::Table::_Never(..) => unreachable!("a table of no kind"),
        }
    };
}

/// A table, with the plan it follows and its path in one word.
#[derive(Debug)]
pub struct Opened<'b> {
    /// The table.
    pub table: Table<'b>,
    /// How it reaches ranks on its node and elsewhere, and why.
    pub plan: Plan,
    /// The path it took, as reports write it.
    pub path: Taken,
}

/// Which ranks share this rank's node (a machine and a network
/// namespace: see [`host_id`]). Collective.
fn same_node(boot: &dyn Bootstrap) -> Result<Vec<bool>> {
    let me = host_id();
    let all = boot.allgather(me.as_bytes()).map_err(Error::Bootstrap)?;
    Ok(all.iter().map(|h| h == me.as_bytes()).collect())
}

/// What carries the recipe's operations between nodes, from the provider
/// found here.
fn carrier(r: &Recipe<'_>, one_node: bool) -> Result<Carrier> {
    #[cfg(feature = "mpi")]
    if r.mpi.is_some() {
        return Ok(Carrier::Mpi {
            threads: fabkit_mpi::threads_multiple(),
        });
    }
    let mut hints = Hints::new(r.provider.clone(), fabkit_fabric::Caps::RMA);
    hints.domain = r.domain.clone();
    let info = fabkit_fabric::info::find(&hints, one_node).map_err(Error::transport)?;
    let e = info.executes();
    Ok(Carrier::Fabric {
        rma: e.rma,
        atomics: e.atomics,
    })
}

/// Makes the table of `cfg` on every rank, on the path `cfg.path` asks
/// for, carried as `r` says. Collective: every rank calls it alike.
pub fn open<'b>(cfg: &Config, r: &Recipe<'b>, boot: &dyn Bootstrap) -> Result<Opened<'b>> {
    let near = same_node(boot)?;
    let one_node = near.iter().all(|&s| s);
    // Every rank resolves the same path, or says why not, before any sets
    // up a transport (which is collective).
    let planned = carrier(r, one_node).and_then(|c| {
        let p = path::plan(cfg.path, cfg.variant, c, one_node).map_err(Error::Config)?;
        records_fit(cfg, p, c)
    });
    let agreed = crate::collective::agree(
        boot,
        "choosing the path",
        planned
            .as_ref()
            .map(|_| Vec::new())
            .map_err(|e| Error::Config(e.to_string())),
    );
    let plan = planned?;
    agreed?;
    let (table, plan) = build(cfg, r, boot, plan, &near)?;
    let path = plan.taken(!one_node);
    Ok(Opened { table, plan, path })
}

/// The message path sends a key and its value in one message: where a
/// record does not fit, `auto` takes the rma path (and says why), and a
/// message path asked for is refused, naming the fix.
fn records_fit(cfg: &Config, plan: Plan, carrier: Carrier) -> Result<Plan> {
    if plan.near != Way::Message && plan.far != Way::Message {
        return Ok(plan);
    }
    match crate::table::fits_a_message(cfg) {
        Ok(()) => Ok(plan),
        Err(why) if cfg.path == crate::Path::Auto => Ok(Plan {
            // MPI's memory path goes no further than a node: its RMA is
            // windows to every rank.
            near: match carrier {
                Carrier::Mpi { .. } => Way::Rma,
                Carrier::Fabric { .. } if plan.near == Way::Message => Way::Rma,
                Carrier::Fabric { .. } => plan.near,
            },
            far: Way::Rma,
            why: format!("{}; but {why}", plan.why),
        }),
        Err(why) => Err(Error::Config(why)),
    }
}

/// The table of `plan`, and the plan it took: `auto`'s, with the message
/// path to other nodes, falls back to RMA where the provider cannot carry
/// the mailbox (it cannot tell a request's sender), and says so.
fn build<'b>(
    cfg: &Config,
    r: &Recipe<'b>,
    boot: &dyn Bootstrap,
    plan: Plan,
    near: &[bool],
) -> Result<(Table<'b>, Plan)> {
    let table = |t: Result<Table<'b>>, plan: Plan| t.map(|t| (t, plan));
    let hash = r.key_hash.clone();
    #[cfg(feature = "mpi")]
    if let Some((mb, kind)) = &r.mpi {
        let built = match (plan.near, plan.far) {
            (Way::Rma, _) => {
                // Coarse locks each target's window per operation
                // (MPI_Win_lock); the others share one lock_all epoch.
                let coarse = cfg.variant == crate::Variant::Coarse;
                let t = match mb {
                    MpiBoot::Borrowed(b) => MpiTransport::new(b, cfg.region_len(), *kind, coarse),
                    MpiBoot::Shared(b) => {
                        MpiTransport::new_shared(b.clone(), cfg.region_len(), *kind, coarse)
                    }
                }
                .map_err(Error::transport)?;
                Ok(Table::MpiRma(Dht::create_with_hash(
                    t,
                    *cfg,
                    mb.get(),
                    hash,
                )?))
            }
            (Way::Memory, Way::Memory) => {
                let t = ShmTransport::establish_memory(cfg.region_len(), mb.get(), near)
                    .map_err(Error::transport)?;
                Ok(Table::Memory(Dht::create_with_hash(
                    t,
                    *cfg,
                    mb.get(),
                    hash,
                )?))
            }
            (near_way, Way::Message) => {
                let (t, exec) = memory_for_messages(cfg, mb.get(), near, near_way)?;
                let m = fabkit_mpi::Mailbox::create(mb.get(), r.timeout, crate::MAX_MESSAGE)
                    .map_err(Error::transport)?;
                let mut d = Dht::create_with_messages(t, exec, m, *cfg, mb.get(), hash)?;
                // A reply is one message: waited for as long as one.
                d.set_deadline(r.timeout)?;
                d.warm_up(mb.get())?;
                Ok(Table::MpiMessage(d))
            }
            _ => Err(Error::Config(format!(
                "the {} path over MPI is not built in this fabkit",
                plan.label(true)
            ))),
        };
        return table(built, plan);
    }
    let built = match (plan.near, plan.far) {
        (Way::Rma, _) => {
            let t = Rank::establish(r.rank_config(cfg), boot).map_err(Error::transport)?;
            Ok(Table::Rma(Dht::create_with_hash(t, *cfg, boot, hash)?))
        }
        (Way::Memory, Way::Memory | Way::Rma) => {
            let t = ShmTransport::establish_sharing(r.rank_config(cfg), boot, near)
                .map_err(Error::transport)?;
            Ok(Table::Memory(Dht::create_with_hash(t, *cfg, boot, hash)?))
        }
        (near_way, Way::Message) => {
            let mut mc = MailboxConfig::new(r.provider.clone());
            mc.domain = r.domain.clone();
            mc.timeout = r.timeout;
            let m = match Mailbox::establish(mc, boot) {
                Ok(m) => m,
                // Every rank found the same (establish agrees on it).
                Err(e @ fabkit_fabric::Error::Unsupported { .. })
                    if cfg.path == crate::Path::Auto =>
                {
                    let rma = Plan {
                        near: near_way,
                        far: Way::Rma,
                        why: format!("{}; but {e}", plan.why),
                    };
                    return build(cfg, r, boot, rma, near);
                }
                Err(e) => return Err(Error::transport(e)),
            };
            let (t, exec) = memory_for_messages(cfg, boot, near, near_way)?;
            let mut d = Dht::create_with_messages(t, exec, m, *cfg, boot, hash)?;
            // A reply is one message: waited for as long as one.
            d.set_deadline(r.timeout)?;
            d.warm_up(boot)?;
            Ok(Table::Message(d))
        }
        (near_way, far_way) => Err(Error::Internal(format!(
            "no table reaches its node by {near_way:?} and other nodes by {far_way:?}"
        ))),
    };
    table(built, plan)
}

/// The memory a table on the message path reaches: its node's regions
/// (`near` is memory) or its own alone (`near` is messages too), and the
/// executor's handle on its own. Collective.
fn memory_for_messages(
    cfg: &Config,
    boot: &dyn Bootstrap,
    near: &[bool],
    near_way: Way,
) -> Result<(ShmTransport, ShmTransport)> {
    let me = boot.rank();
    let mapped: Vec<bool> = match near_way {
        Way::Memory => near.to_vec(),
        _ => (0..near.len()).map(|r| r == me).collect(),
    };
    let t = ShmTransport::establish_memory(cfg.region_len(), boot, &mapped)
        .map_err(Error::transport)?;
    let exec = t.own_view().map_err(Error::transport)?;
    Ok((t, exec))
}

impl Table<'_> {
    /// Frees the table and ends its transport (collective: every rank).
    pub fn close(self, boot: &dyn Bootstrap) -> Result<()> {
        match self {
            Table::Rma(d) => d.free(boot)?.finish(boot).map_err(Error::transport),
            Table::Memory(d) => d.free(boot)?.finish(boot).map_err(Error::transport),
            Table::Message(d) => d.free(boot)?.finish(boot).map_err(Error::transport),
            #[cfg(feature = "mpi")]
            Table::MpiRma(d) => d.free(boot)?.free().map_err(Error::transport),
            #[cfg(feature = "mpi")]
            Table::MpiMessage(d) => d.free(boot)?.finish(boot).map_err(Error::transport),
            #[cfg(not(feature = "mpi"))]
            Table::_Never(n, _) => match n {},
        }
    }
}
