//! How a table's operations travel to the rank that owns each key
//! ([`Path`], chosen in [`Config::path`](crate::Config::path)), and the
//! rule `auto` follows ([`plan`]); pure.
//!
//! - `memory`: ranks on one node reach each other's regions by loads,
//!   stores and CPU atomics (shared-memory segments); ranks elsewhere by
//!   libfabric RMA.
//! - `rma`: one-sided operations to every rank, its own region included
//!   (libfabric RMA, or MPI windows).
//! - `message`: a batch's keys owned by another rank go to that owner as
//!   one request message; its service runs them on its own region and
//!   answers (see [`crate::message`]). A rank's own keys never leave it.
//! - `auto` (the default): memory within a node; across nodes RMA where a
//!   NIC or the kernel executes every operation the variant sends, and
//!   messages where the target's CPU executes any of them (every atomic
//!   under `ofi_rxm`, over verbs too). Under MPI: messages only where MPI
//!   gives `MPI_THREAD_MULTIPLE` (a rank waiting in the application's own
//!   `MPI_Barrier` must still answer), else MPI windows.
//!
//! CPU atomics and a NIC's atomics on one word are not atomic together,
//! so no plan lets both reach a region: with RMA to other nodes every
//! atomic goes through the fabric, same-node ones included; with messages
//! every atomic is a CPU atomic, by the owner or a same-node peer.

use fabkit_core::Executor;
use serde::{Deserialize, Serialize};

use crate::layout::Variant;

/// How a table's operations travel to their owners (the choice).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Path {
    /// Loads and stores within a node, RMA to other nodes.
    Memory,
    /// One-sided operations to every rank.
    Rma,
    /// Owner-executed requests to every other rank.
    Message,
    /// Memory within a node; across nodes RMA or messages, by who executes
    /// one-sided operations on the provider (see the module).
    #[default]
    Auto,
}

impl Path {
    /// The name the command line and the C API's `FABKIT_DHT_PATH` take.
    pub fn name(self) -> &'static str {
        match self {
            Path::Memory => "memory",
            Path::Rma => "rma",
            Path::Message => "message",
            Path::Auto => "auto",
        }
    }

    /// The path named `s`, if one is.
    pub fn named(s: &str) -> Option<Path> {
        [Path::Memory, Path::Rma, Path::Message, Path::Auto]
            .into_iter()
            .find(|p| p.name() == s)
    }

    pub(crate) fn code(self) -> u8 {
        self as u8
    }
}

/// How one owner's keys travel.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Way {
    /// Loads, stores and CPU atomics on a mapped region.
    Memory,
    /// One-sided operations through the fabric or MPI.
    Rma,
    /// A request to the owner, who runs the keys and answers.
    Message,
}

/// What carries a job's operations between nodes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Carrier {
    /// A libfabric provider: who executes its reads and writes, and its
    /// atomics, at the target.
    Fabric {
        /// Reads and writes.
        rma: Executor,
        /// Atomics.
        atomics: Executor,
    },
    /// MPI: one-sided windows or point-to-point messages.
    Mpi {
        /// Whether MPI gives `MPI_THREAD_MULTIPLE` (a service thread can
        /// answer while the application is in MPI).
        threads: bool,
    },
}

/// What a table of a path does: how it reaches ranks on its node and
/// ranks elsewhere, and why.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Plan {
    /// Ranks on this node other than this one.
    pub near: Way,
    /// Ranks on other nodes.
    pub far: Way,
    /// Why (for `auto`: the fact the rule read).
    pub why: String,
}

/// The path a table took, as reports write it: how its operations reached
/// the ranks of its node and those elsewhere.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Taken {
    /// Every operation a memory access (every rank on this node).
    #[serde(rename = "memory")]
    Memory,
    /// One-sided operations to every rank, its own too.
    #[serde(rename = "rma")]
    Rma,
    /// Memory within the node, one-sided operations to other nodes.
    #[serde(rename = "memory+rma")]
    MemoryRma,
    /// Requests to every other rank's owner; its own keys by memory.
    #[serde(rename = "message")]
    Message,
    /// Memory within the node, requests to the owners elsewhere.
    #[serde(rename = "memory+message")]
    MemoryMessage,
}

impl Taken {
    /// The word reports write.
    pub fn name(self) -> &'static str {
        match self {
            Taken::Memory => "memory",
            Taken::Rma => "rma",
            Taken::MemoryRma => "memory+rma",
            Taken::Message => "message",
            Taken::MemoryMessage => "memory+message",
        }
    }

    /// Whether some operation crossed a fabric or MPI (anything but
    /// memory alone).
    pub fn crosses(self) -> bool {
        self != Taken::Memory
    }

    /// Whether keys went to their owners as requests.
    pub fn messages(self) -> bool {
        matches!(self, Taken::Message | Taken::MemoryMessage)
    }
}

impl Plan {
    /// The path the table takes: `far_ranks` says whether any rank is on
    /// another node.
    pub fn taken(&self, far_ranks: bool) -> Taken {
        match (self.near, far_ranks.then_some(self.far)) {
            (Way::Memory, None | Some(Way::Memory)) => Taken::Memory,
            (Way::Memory, Some(Way::Rma)) => Taken::MemoryRma,
            (Way::Memory, Some(Way::Message)) => Taken::MemoryMessage,
            (Way::Rma, _) => Taken::Rma,
            (Way::Message, _) => Taken::Message,
        }
    }

    /// [`Plan::taken`]'s word.
    pub fn label(&self, far_ranks: bool) -> &'static str {
        self.taken(far_ranks).name()
    }
}

/// The plan of `path` for `variant` over `carrier`. `one_node`: every rank
/// is on this node. An impossible combination is an error naming it and
/// the fix.
pub fn plan(
    path: Path,
    variant: Variant,
    carrier: Carrier,
    one_node: bool,
) -> Result<Plan, String> {
    let mpi = matches!(carrier, Carrier::Mpi { .. });
    let fixed = |near, far, why: &str| Plan {
        near,
        far,
        why: why.to_string(),
    };
    Ok(match path {
        Path::Memory if mpi && !one_node => {
            return Err(
                "the memory path reaches ranks on other nodes with libfabric RMA, which \
                        an MPI job does not set up: choose the message or rma path with MPI"
                    .into(),
            )
        }
        // An MPI job sets up no libfabric RMA: on one node memory is all.
        Path::Memory if mpi => fixed(Way::Memory, Way::Memory, "asked for"),
        Path::Memory => fixed(Way::Memory, Way::Rma, "asked for"),
        Path::Rma => fixed(Way::Rma, Way::Rma, "asked for"),
        Path::Message => match carrier {
            Carrier::Mpi { threads: false } => {
                return Err(
                    "the message path needs MPI_THREAD_MULTIPLE, which this MPI does \
                            not give: initialise MPI with MPI_Init_thread(MPI_THREAD_MULTIPLE), \
                            or choose the rma path"
                        .into(),
                )
            }
            _ => fixed(Way::Message, Way::Message, "asked for"),
        },
        Path::Auto if one_node => fixed(Way::Memory, Way::Memory, "every rank on this node"),
        Path::Auto => match carrier {
            Carrier::Mpi { threads: true } => fixed(
                Way::Memory,
                Way::Message,
                "MPI one-sided operations are executed by the target's CPU (osc pt2pt, rdma \
                 over TCP), and MPI gives MPI_THREAD_MULTIPLE",
            ),
            Carrier::Mpi { threads: false } => fixed(
                Way::Rma,
                Way::Rma,
                "MPI does not give MPI_THREAD_MULTIPLE, so no service thread could answer while \
                 a rank is in MPI: MPI windows",
            ),
            Carrier::Fabric { rma, atomics } => {
                let needs = |e: Executor| e.offloaded();
                if needs(rma) && (!variant.needs_atomics() || needs(atomics)) {
                    fixed(
                        Way::Memory,
                        Way::Rma,
                        &format!(
                            "reads and writes{} are executed by {}",
                            if variant.needs_atomics() {
                                " and atomics"
                            } else {
                                ""
                            },
                            rma.who()
                        ),
                    )
                } else {
                    let (what, by) = if !needs(rma) {
                        ("reads and writes", rma)
                    } else {
                        ("atomics", atomics)
                    };
                    fixed(
                        Way::Memory,
                        Way::Message,
                        &format!(
                            "{what} are executed by {}, so the owner runs each batch",
                            by.who()
                        ),
                    )
                }
            }
        },
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fabric(rma: Executor, atomics: Executor) -> Carrier {
        Carrier::Fabric { rma, atomics }
    }

    #[test]
    fn auto_takes_memory_on_one_node_and_across_nodes_follows_who_executes() {
        let (nic, cpu, kernel) = (Executor::Nic, Executor::TargetCpu, Executor::Kernel);
        let far = |v, c| plan(Path::Auto, v, c, false).unwrap().far;
        let on_one = plan(Path::Auto, Variant::Fine, fabric(cpu, cpu), true).unwrap();
        assert_eq!((on_one.near, on_one.label(false)), (Way::Memory, "memory"));
        // tcp;ofi_rxm, sockets: the target's CPU.
        assert_eq!(far(Variant::Lockfree, fabric(cpu, cpu)), Way::Message);
        // verbs;ofi_rxm: RMA in the NIC, atomics emulated by rxm.
        assert_eq!(far(Variant::Lockfree, fabric(nic, cpu)), Way::Rma);
        assert_eq!(far(Variant::Fine, fabric(nic, cpu)), Way::Message);
        assert_eq!(far(Variant::Chunked, fabric(kernel, cpu)), Way::Message);
        // cxi: everything in the NIC.
        assert_eq!(far(Variant::Coarse, fabric(nic, nic)), Way::Rma);
        // efa: writes emulated.
        assert_eq!(far(Variant::Lockfree, fabric(cpu, cpu)), Way::Message);
        let p = plan(Path::Auto, Variant::Fine, fabric(nic, cpu), false).unwrap();
        assert!(
            p.why.contains("atomics are executed by the target's CPU"),
            "{}",
            p.why
        );
        assert_eq!(p.label(true), "memory+message");
    }

    #[test]
    fn under_mpi_auto_sends_messages_only_with_thread_multiple() {
        let p = plan(
            Path::Auto,
            Variant::Lockfree,
            Carrier::Mpi { threads: true },
            false,
        )
        .unwrap();
        assert_eq!((p.near, p.far), (Way::Memory, Way::Message));
        let p = plan(
            Path::Auto,
            Variant::Lockfree,
            Carrier::Mpi { threads: false },
            false,
        )
        .unwrap();
        assert_eq!((p.near, p.far), (Way::Rma, Way::Rma));
        assert!(p.why.contains("MPI_THREAD_MULTIPLE"), "{}", p.why);
        let e = plan(
            Path::Message,
            Variant::Fine,
            Carrier::Mpi { threads: false },
            false,
        );
        assert!(e.unwrap_err().contains("MPI_Init_thread"));
        let e = plan(
            Path::Memory,
            Variant::Fine,
            Carrier::Mpi { threads: true },
            false,
        );
        assert!(e.unwrap_err().contains("choose the message or rma path"));
        // On one node an MPI job's memory path is memory to every rank
        // (there is no libfabric RMA to fall back on).
        let p = plan(
            Path::Memory,
            Variant::Fine,
            Carrier::Mpi { threads: true },
            true,
        )
        .unwrap();
        assert_eq!((p.near, p.far), (Way::Memory, Way::Memory));
    }

    #[test]
    fn names_round_trip() {
        for p in [Path::Memory, Path::Rma, Path::Message, Path::Auto] {
            assert_eq!(Path::named(p.name()), Some(p));
        }
        assert_eq!(Path::named("shm"), None);
    }
}
