//! The vocabulary of one-sided operations: where ([`Remote`]), what
//! ([`Op`], of an [`OpKind`]) and, for writes, which completion they need
//! ([`Completion`]). Operations are data: whoever plans them (the DHT's
//! machines) never knows which transport executes them.

/// An address inside another rank's exposed region.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Remote {
    /// Target rank.
    pub rank: usize,
    /// Byte offset in its region.
    pub offset: u64,
}

impl Remote {
    /// Byte `offset` of `rank`'s region.
    pub fn new(rank: usize, offset: u64) -> Self {
        Remote { rank, offset }
    }
}

/// The completion a write needs before its batch may return: what its
/// completion says about the bytes at the target (fi_cq(3), "Completion
/// semantics" and "Target completion semantics").
///
/// Reads and fetching atomics need no choice: data comes back to the
/// initiator, so their completion is delivery-complete by definition
/// (fi_cq(3): "for operations that return data to the initiator ... this is
/// the default completion mode").
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Completion {
    /// `FI_TRANSMIT_COMPLETE` (the provider's default): the write no longer
    /// depends on local resources or the fabric, but "the state of the
    /// operation at the peer endpoint is not defined"; "if an RMA operation
    /// completes at the initiator as FI_INJECT_COMPLETE or
    /// FI_TRANSMIT_COMPLETE, the data visibility at the target is not
    /// guaranteed". Another rank may read the old bytes after the batch
    /// returned, and an atomic issued in a later batch (a lock release) may
    /// take effect before them. Enough for data nothing else points to yet.
    Transmit,
    /// `FI_DELIVERY_COMPLETE`: the write "has been processed by the
    /// destination endpoint" and its result is available there. When the
    /// batch returns, any later operation, from any rank, that reaches the
    /// bytes sees them; so a write that precedes a release (an unlock, a
    /// publish) must ask for this. A transport meets it with the mechanism
    /// its provider offers (fabkit-fabric's `Ordering`): natively,
    /// with a fence on the next operation to that peer, or with a read-back.
    /// With a fence, the guarantee is narrower: the write takes effect
    /// before this rank's next operation to that peer (the release that
    /// follows it), not before other ranks' reads that come first.
    Delivery,
}

/// One remote operation. Atomics act on an 8-byte-aligned u64.
#[derive(Debug)]
pub enum Op<'b> {
    /// Copy remote bytes into `into`.
    Read {
        /// Source.
        from: Remote,
        /// Destination.
        into: &'b mut [u8],
    },
    /// Copy `from` to remote memory. Never posted as an inject (a buffered
    /// send with no completion level): its completion is what `completion`
    /// asks for.
    Write {
        /// Destination.
        to: Remote,
        /// Source.
        from: &'b [u8],
        /// What the write's completion must mean at the target.
        completion: Completion,
    },
    /// If the word equals `expected`, replace it by `new`; `old` receives the
    /// previous value either way.
    CompareAndSwap {
        /// Target word.
        at: Remote,
        /// Compared value.
        expected: u64,
        /// Stored on match.
        new: u64,
        /// Previous value.
        old: &'b mut u64,
    },
    /// Add `delta` (wrapping); `old` receives the previous value.
    FetchAdd {
        /// Target word.
        at: Remote,
        /// Added value.
        delta: u64,
        /// Previous value.
        old: &'b mut u64,
    },
    /// Atomically read the word.
    Fetch {
        /// Target word.
        at: Remote,
        /// The value read.
        value: &'b mut u64,
    },
    /// Store `new`; `old` receives the previous value.
    Swap {
        /// Target word.
        at: Remote,
        /// Stored value.
        new: u64,
        /// Previous value.
        old: &'b mut u64,
    },
    /// Send `data` as one message to rank `to`.
    Send {
        /// Destination rank.
        to: usize,
        /// Message.
        data: &'b [u8],
    },
    /// Receive one message (from any rank; `from` is the rank expected, named
    /// in errors) into `into`; `len` receives its length.
    Recv {
        /// Rank expected to send.
        from: usize,
        /// Buffer: messages longer than it are truncated.
        into: &'b mut [u8],
        /// Received length.
        len: &'b mut usize,
    },
}

impl Op<'_> {
    /// The kind of operation.
    pub fn kind(&self) -> OpKind {
        match self {
            Op::Read { .. } => OpKind::Read,
            Op::Write { .. } => OpKind::Write,
            Op::CompareAndSwap { .. } => OpKind::CompareAndSwap,
            Op::FetchAdd { .. } => OpKind::FetchAdd,
            Op::Fetch { .. } => OpKind::Fetch,
            Op::Swap { .. } => OpKind::Swap,
            Op::Send { .. } => OpKind::Send,
            Op::Recv { .. } => OpKind::Recv,
        }
    }

    /// Where the operation goes (for messages: the peer, offset 0).
    pub fn target(&self) -> Remote {
        match self {
            Op::Read { from, .. } => *from,
            Op::Write { to, .. } => *to,
            Op::CompareAndSwap { at, .. }
            | Op::FetchAdd { at, .. }
            | Op::Fetch { at, .. }
            | Op::Swap { at, .. } => *at,
            Op::Send { to, .. } => Remote::new(*to, 0),
            Op::Recv { from, .. } => Remote::new(*from, 0),
        }
    }

    /// The completion a write asks for; `None` for every other kind.
    pub fn completion(&self) -> Option<Completion> {
        match self {
            Op::Write { completion, .. } => Some(*completion),
            _ => None,
        }
    }

    /// Bytes moved (8 for the atomics).
    #[allow(clippy::len_without_is_empty)]
    pub fn len(&self) -> usize {
        match self {
            Op::Read { into, .. } | Op::Recv { into, .. } => into.len(),
            Op::Write { from, .. } | Op::Send { data: from, .. } => from.len(),
            _ => 8,
        }
    }
}

/// The kind of a data-transfer operation, used in error messages and stats.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum OpKind {
    /// RMA read (`fi_read`).
    Read,
    /// RMA write (`fi_write`).
    Write,
    /// Atomic compare-and-swap on a u64 (`fi_compare_atomic`, `FI_CSWAP`).
    CompareAndSwap,
    /// Atomic fetch-and-add on a u64 (`fi_fetch_atomic`, `FI_SUM`).
    FetchAdd,
    /// Atomic read of a u64 (`fi_fetch_atomic`, `FI_ATOMIC_READ`).
    Fetch,
    /// Atomic swap of a u64 (`fi_fetch_atomic`, `FI_ATOMIC_WRITE`).
    Swap,
    /// Message send (`fi_send`).
    Send,
    /// Message receive (`fi_recv`).
    Recv,
}

impl std::fmt::Display for OpKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            OpKind::Read => "RMA read",
            OpKind::Write => "RMA write",
            OpKind::CompareAndSwap => "atomic compare-and-swap",
            OpKind::FetchAdd => "atomic fetch-add",
            OpKind::Fetch => "atomic fetch",
            OpKind::Swap => "atomic swap",
            OpKind::Send => "send",
            OpKind::Recv => "receive",
        })
    }
}

impl OpKind {
    /// True for the u64 atomics.
    pub fn is_atomic(self) -> bool {
        matches!(
            self,
            OpKind::CompareAndSwap | OpKind::FetchAdd | OpKind::Fetch | OpKind::Swap
        )
    }
}

/// Who carries out an operation at its target.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Executor {
    /// The initiating process copies the target's memory itself (`shm`'s
    /// CMA): no target CPU, but one node only.
    Initiator,
    /// The target's libfabric on the target's CPU, while it makes progress.
    TargetCpu,
    /// The target's kernel (soft-RoCE), without the target process.
    Kernel,
    /// The target's NIC.
    Nic,
    /// A provider fabkit has no facts on.
    Unknown,
}

impl Executor {
    /// Whether the target's process does the work: then an operation costs
    /// the target a message's handling, whoever sent it.
    pub fn needs_target_cpu(self) -> bool {
        matches!(self, Executor::TargetCpu)
    }

    /// Whether it is carried out without the target's CPU (a NIC, the
    /// kernel, the initiator's own copy).
    pub fn offloaded(self) -> bool {
        matches!(self, Executor::Initiator | Executor::Kernel | Executor::Nic)
    }

    /// Who it is, in a sentence ("executed by the target's NIC").
    pub fn who(self) -> &'static str {
        match self {
            Executor::Initiator => "the initiator itself (CMA)",
            Executor::TargetCpu => "the target's CPU",
            Executor::Kernel => "the target's kernel",
            Executor::Nic => "the target's NIC",
            Executor::Unknown => "an agent fabkit has no facts on",
        }
    }

    /// A short label for tables.
    pub fn label(self) -> &'static str {
        match self {
            Executor::Initiator => "initiator",
            Executor::TargetCpu => "target CPU",
            Executor::Kernel => "kernel",
            Executor::Nic => "NIC",
            Executor::Unknown => "?",
        }
    }
}
