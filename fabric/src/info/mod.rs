//! Provider discovery: `fi_getinfo` with hints, and the accessors of what it
//! returns. By job: here the query; `ordering`, how a configuration makes
//! writes visible ([`Ordering`]); `summary`, what `fabkit info` prints
//! ([`ProviderInfo`]).

use std::ffi::{CStr, CString};
use std::ptr::NonNull;

use fabric_sys as ffi;
use serde::Serialize;

use crate::error::{call_error, Error, Result};
use fabkit_core::Error as CoreError;

mod executes;
mod ordering;
mod summary;

pub use executes::Executes;
pub use fabkit_core::Executor;
pub use ordering::{find_ordered, ordering_offered, orderings_offered, Ordering};
pub use summary::{mr_mode_names, ProviderInfo};

/// The libfabric API version fabkit asks for. 1.17 is Debian bookworm's; newer
/// libraries accept it.
pub const API_VERSION: u32 = ffi::make_version(1, 17);

/// The version of the libfabric library loaded at run time, as "major.minor".
pub fn library_version() -> String {
    // SAFETY: fi_version takes no arguments and has no preconditions.
    let v = unsafe { ffi::fi_version() };
    format!("{}.{}", v >> 16, v & 0xffff)
}

/// Capabilities an endpoint is asked for.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct Caps {
    /// Two-sided messages (`FI_MSG`).
    pub msg: bool,
    /// One-sided reads and writes (`FI_RMA`).
    pub rma: bool,
    /// u64 atomics (`FI_ATOMIC`).
    pub atomic: bool,
    /// Tagged messages received by tag and source (`FI_TAGGED`,
    /// `FI_DIRECTED_RECV`), with each receive's source address
    /// (`FI_SOURCE`): the DHT's message path.
    pub tagged: bool,
}

impl Caps {
    /// Messages, RMA and atomics: what the DHT and the benchmarks need.
    pub const ALL: Caps = Caps {
        msg: true,
        rma: true,
        atomic: true,
        tagged: false,
    };
    /// Messages and RMA, no atomics (enough for plain `tcp`).
    pub const RMA: Caps = Caps {
        msg: true,
        rma: true,
        atomic: false,
        tagged: false,
    };
    /// Tagged messages with their sources, and no one-sided access at all:
    /// a [`crate::Mailbox`] exposes no memory to peers.
    pub const MESSAGES: Caps = Caps {
        msg: true,
        rma: false,
        atomic: false,
        tagged: true,
    };

    fn bits(self) -> u64 {
        let mut c = 0u64;
        if self.msg {
            c |= (ffi::FI_MSG | ffi::FI_SEND | ffi::FI_RECV) as u64;
        }
        if self.rma {
            c |= (ffi::FI_RMA
                | ffi::FI_READ
                | ffi::FI_WRITE
                | ffi::FI_REMOTE_READ
                | ffi::FI_REMOTE_WRITE) as u64;
        }
        if self.tagged {
            c |= (ffi::FI_TAGGED | ffi::FI_SEND | ffi::FI_RECV) as u64
                | ffi::FI_SOURCE
                | ffi::FI_DIRECTED_RECV;
        }
        if self.atomic {
            c |= (ffi::FI_ATOMIC
                | ffi::FI_READ
                | ffi::FI_WRITE
                | ffi::FI_REMOTE_READ
                | ffi::FI_REMOTE_WRITE) as u64;
        }
        c
    }

    fn describe(self) -> String {
        let mut parts = Vec::new();
        if self.msg {
            parts.push("messages");
        }
        if self.rma {
            parts.push("RMA");
        }
        if self.atomic {
            parts.push("atomics");
        }
        if self.tagged {
            parts.push("tagged messages with their sources");
        }
        if parts.is_empty() {
            "no capabilities".into()
        } else {
            parts.join(", ")
        }
    }
}

/// The memory-registration modes fabkit knows how to honour. A provider may
/// require any subset; fabkit adapts (see [`crate::MemoryRegion`]).
pub const SUPPORTED_MR_MODE: u32 = ffi::FI_MR_LOCAL
    | ffi::FI_MR_VIRT_ADDR
    | ffi::FI_MR_ALLOCATED
    | ffi::FI_MR_PROV_KEY
    | ffi::FI_MR_ENDPOINT;

/// What to ask `fi_getinfo` for.
#[derive(Clone, Debug)]
pub struct Hints {
    /// Provider name as libfabric spells it, e.g. `shm`, `tcp;ofi_rxm`,
    /// `verbs;ofi_rxm`, `cxi`. `None` lets libfabric choose.
    pub provider: Option<String>,
    /// Domain name (for socket providers: the interface, such as `lo` or
    /// `eth0`; for verbs: the device, such as `mlx5_0`).
    pub domain: Option<String>,
    /// Capabilities required.
    pub caps: Caps,
    /// The ordering mechanism to ask for ([`Ordering::None`]: none). Only
    /// entries that offer it are returned.
    pub ordering: Ordering,
}

impl Hints {
    /// Reliable datagram endpoints with `caps` on `provider`.
    pub fn new(provider: impl Into<String>, caps: Caps) -> Self {
        Hints {
            provider: Some(provider.into()),
            domain: None,
            caps,
            ordering: Ordering::None,
        }
    }

    /// The same hints, asking for `ordering`.
    pub fn with_ordering(&self, ordering: Ordering) -> Hints {
        Hints {
            ordering,
            ..self.clone()
        }
    }

    /// Builds the C hints. The returned info is freed by `fi_freeinfo`, which
    /// also frees the strdup'ed names inside it.
    fn to_raw(&self) -> Result<RawInfo> {
        // SAFETY: fi_allocinfo allocates a zeroed fi_info with its attribute
        // structs; null means out of memory: a failed call, not a bad
        // argument (callers take those for the user's to fix).
        let raw = NonNull::new(unsafe { ffi::fi_allocinfo() })
            .ok_or_else(|| call_error("fi_allocinfo", ffi::FI_ENOMEM as i32))?;
        let info = RawInfo(raw);
        // SAFETY: `raw` is a valid fi_info from fi_allocinfo; its attr
        // pointers are valid allocations owned by it.
        unsafe {
            let i = raw.as_ptr();
            (*i).caps = self.caps.bits();
            // What makes a write visible before a later op (see Ordering).
            match self.ordering {
                Ordering::DeliveryComplete => {
                    // The endpoint's default completion level for ops posted
                    // without flags; fabkit posts writes with explicit flags,
                    // so transmit-complete writes stay cheap.
                    (*(*i).tx_attr).op_flags |= ffi::FI_DELIVERY_COMPLETE as u64;
                }
                Ordering::Fence => (*i).caps |= ffi::FI_FENCE as u64,
                Ordering::ReadBack => {
                    // Ordering "requires matching ordering semantics on the
                    // receiving side" (fi_endpoint(3), msg_order).
                    (*(*i).tx_attr).msg_order |= ffi::FI_ORDER_RMA_RAW;
                    (*(*i).rx_attr).msg_order |= ffi::FI_ORDER_RMA_RAW;
                }
                Ordering::None => {}
            }
            // We pass an fi_context2 with every operation, so both context
            // modes are satisfied.
            (*i).mode = ffi::FI_CONTEXT | ffi::FI_CONTEXT2;
            (*(*i).ep_attr).type_ = ffi::FI_EP_RDM;
            let d = (*i).domain_attr;
            (*d).mr_mode = SUPPORTED_MR_MODE as i32;
            // Completion queues are read by a progress thread and by waiting
            // callers alike; see cq.rs.
            (*d).threading = ffi::FI_THREAD_SAFE;
            if let Some(p) = &self.provider {
                (*(*i).fabric_attr).prov_name = strdup(p)?;
            }
            if let Some(n) = &self.domain {
                (*d).name = strdup(n)?;
            }
        }
        Ok(info)
    }
}

fn strdup(s: &str) -> Result<*mut libc::c_char> {
    let c = CString::new(s).map_err(|_| {
        Error::from(CoreError::InvalidArgument(format!(
            "name `{s}` contains a NUL byte"
        )))
    })?;
    // SAFETY: c is a valid NUL-terminated string; libfabric frees the copy
    // with free() in fi_freeinfo, so it must come from malloc (strdup does).
    Ok(unsafe { libc::strdup(c.as_ptr()) })
}

struct RawInfo(NonNull<ffi::fi_info>);

impl Drop for RawInfo {
    fn drop(&mut self) {
        // SAFETY: we own this list (from fi_allocinfo or fi_getinfo).
        unsafe { ffi::fi_freeinfo(self.0.as_ptr()) }
    }
}

/// One provider configuration returned by `fi_getinfo`, owned (a private copy
/// made with `fi_dupinfo`).
#[doc(alias = "fi_info")]
pub struct Info {
    raw: NonNull<ffi::fi_info>,
}

// SAFETY: an fi_info is plain data owned by this value; libfabric does not
// retain pointers to it.
unsafe impl Send for Info {}
// SAFETY: all accessors only read.
unsafe impl Sync for Info {}

impl Drop for Info {
    fn drop(&mut self) {
        // SAFETY: `raw` came from fi_dupinfo and is owned by us.
        unsafe { ffi::fi_freeinfo(self.raw.as_ptr()) }
    }
}

impl Clone for Info {
    fn clone(&self) -> Self {
        // SAFETY: self.raw is a valid fi_info; fi_dupinfo deep-copies it.
        let raw = unsafe { ffi::fi_dupinfo(self.raw.as_ptr()) };
        Info {
            raw: NonNull::new(raw).expect("fi_dupinfo: out of memory"),
        }
    }
}

impl std::fmt::Debug for Info {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Info")
            .field("provider", &self.provider())
            .field("fabric", &self.fabric_name())
            .field("domain", &self.domain_name())
            .finish()
    }
}

fn cstr(p: *const libc::c_char) -> String {
    if p.is_null() {
        String::new()
    } else {
        // SAFETY: libfabric strings are NUL-terminated and live as long as
        // the fi_info that holds them, which outlives this call.
        unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned()
    }
}

/// Queries `fi_getinfo`. Each returned entry is an independent copy.
pub fn getinfo(hints: Option<&Hints>) -> Result<Vec<Info>> {
    let raw_hints = hints.map(Hints::to_raw).transpose()?;
    let mut list: *mut ffi::fi_info = std::ptr::null_mut();
    let hp = raw_hints
        .as_ref()
        .map_or(std::ptr::null(), |h| h.0.as_ptr() as *const _);
    // SAFETY: hp is null or a valid hints structure; list receives a new
    // list that we free below.
    let rc = unsafe {
        ffi::fi_getinfo(
            API_VERSION,
            std::ptr::null(),
            std::ptr::null(),
            0,
            hp,
            &mut list,
        )
    };
    if rc == -(ffi::FI_ENODATA as i32) {
        return Ok(Vec::new());
    }
    if rc < 0 {
        return Err(call_error("fi_getinfo", -rc));
    }
    let mut out = Vec::new();
    let mut cur = list;
    while !cur.is_null() {
        // SAFETY: cur is an entry of the list returned by fi_getinfo.
        let dup = unsafe { ffi::fi_dupinfo(cur) };
        if let Some(raw) = NonNull::new(dup) {
            out.push(Info { raw });
        }
        // SAFETY: as above; `next` links the list.
        cur = unsafe { (*cur).next };
    }
    // SAFETY: list came from fi_getinfo and is freed exactly once.
    unsafe { ffi::fi_freeinfo(list) };
    Ok(out)
}

/// Finds the provider configurations matching `hints`, preferring `lo` for the
/// socket-based providers when `prefer_loopback` is set (all ranks on one host)
/// and avoiding it otherwise (other hosts cannot reach it), when no domain
/// was named. An unknown provider is an error naming those that
/// would have worked.
///
/// A domain given as a network (`10.77.1.0/24`, `fd00::/64`) names the
/// interface of this host with an address in it, as Open MPI's
/// `btl_tcp_if_include` does: hosts whose data interfaces have different
/// names share one setting.
pub fn find(hints: &Hints, prefer_loopback: bool) -> Result<Info> {
    if let Some(net) = hints.domain.as_deref().and_then(|d| d.split_once('/')) {
        let mut named = hints.clone();
        named.domain = Some(crate::iface::interface_in(net.0, net.1)?);
        return find(&named, prefer_loopback);
    }
    let exact = |mut v: Vec<Info>| {
        // libfabric matches `tcp` against the layered `tcp;ofi_rxm` too;
        // the user named one provider, so give exactly that one.
        if let Some(p) = &hints.provider {
            v.retain(|i| i.provider() == *p);
        }
        // A provider may accept an ordering hint and still not give it
        // (tcp;ofi_rxm takes FI_ORDER_RMA_RAW with max_order_raw_size 0).
        v.retain(|i| i.offers(hints.ordering));
        v
    };
    let getinfo = |h: &Hints| getinfo(Some(h)).map(exact);
    let mut found = getinfo(hints)?;
    if found.is_empty() && hints.caps.atomic && hints.provider.is_some() {
        // Does it exist without atomics? Then say exactly that.
        let mut without = hints.clone();
        without.caps.atomic = false;
        if !getinfo(&without)?.is_empty() {
            let provider = hints.provider.clone().unwrap_or_default();
            return Err(Error::Unsupported {
                hint: format!(
                    "atomics are needed here; pick a provider that offers them \
                     (shm, sockets, tcp;ofi_rxm, verbs;ofi_rxm{}) - see `fabkit info`",
                    if provider == "tcp" {
                        "; for plain tcp use tcp;ofi_rxm"
                    } else {
                        ""
                    }
                ),
                provider,
                what: "atomics".into(),
            });
        }
    }
    if found.is_empty() {
        if let Some(p) = &hints.provider {
            // It may exist with other endpoint types only (plain `tcp` and
            // `verbs` offer connected FI_EP_MSG endpoints; their RDM form is
            // layered under ofi_rxm).
            let mut types: Vec<&str> = self::getinfo(None)?
                .iter()
                .filter(|i| i.provider() == *p)
                .map(Info::ep_type)
                .collect();
            types.sort_unstable();
            types.dedup();
            if !types.is_empty() {
                return Err(Error::Unsupported {
                    provider: p.clone(),
                    what: format!(
                        "reliable-datagram endpoints (FI_EP_RDM) with {}: it offers only {}",
                        hints.caps.describe(),
                        types.join(", ")
                    ),
                    hint: format!("use the RDM layering `{p};ofi_rxm` (see `fabkit info`)"),
                });
            }
        }
        let mut any = hints.clone();
        any.provider = None;
        any.domain = None;
        let mut available: Vec<String> = self::getinfo(Some(&any))?
            .iter()
            .map(Info::provider)
            .filter(|p| !p.starts_with("ofi_") && !p.contains("ofi_hook"))
            .collect();
        available.sort();
        available.dedup();
        let requested = match (&hints.provider, &hints.domain) {
            (Some(p), Some(d)) => format!("{p}` on domain `{d}"),
            (Some(p), None) => p.clone(),
            (None, Some(d)) => format!("(any)` on domain `{d}"),
            (None, None) => "(any)".into(),
        };
        return Err(Error::UnknownProvider {
            requested,
            needs: hints.caps.describe(),
            available,
        });
    }
    if let Some(d) = &hints.domain {
        // Some providers (tcp in 1.17) ignore the domain hint and list every
        // interface: keep the one that was named.
        let mut names: Vec<String> = Vec::new();
        for n in found.iter().map(Info::domain_name) {
            if !names.contains(&n) {
                names.push(n);
            }
        }
        found.retain(|i| i.domain_name() == *d);
        if found.is_empty() {
            return Err(Error::from(CoreError::InvalidArgument(format!(
                "provider `{}` has no domain `{d}` here; its domains: {} (see `fabkit info`)",
                hints.provider.as_deref().unwrap_or("(any)"),
                names.join(", ")
            ))));
        }
    }
    if hints.domain.is_none() {
        // All ranks on one host: loopback. Ranks on several: never loopback,
        // which the other hosts cannot reach (socket providers list `lo`
        // first when it is up).
        let lo = found.iter().position(|i| i.domain_name() == "lo");
        let elsewhere = found.iter().any(|i| i.domain_name() != "lo");
        match (prefer_loopback, lo) {
            (true, Some(i)) => return Ok(found.swap_remove(i)),
            // Every `lo` entry (one per address and endpoint type) goes.
            (false, Some(_)) if elsewhere => found.retain(|i| i.domain_name() != "lo"),
            _ => {}
        }
    }
    Ok(found.swap_remove(0))
}

/// Progress model of a provider (`fi_progress`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Progress {
    /// The provider progresses operations by itself.
    Auto,
    /// Operations progress only while the application calls into libfabric
    /// (reads a CQ): a passive target needs a progress thread.
    Manual,
    /// Not specified or unknown.
    Unspec,
}

/// Who picks a memory region's key on a provider, and how many bits a
/// key has: what a process outside the job would have to guess to reach a
/// region it can connect to.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case", tag = "picked_by")]
pub enum KeyPick {
    /// The provider picks it (`FI_MR_PROV_KEY`), as verbs does.
    Provider,
    /// The provider takes the key fabkit requests: `bits` random bits
    /// from the system's source ([`fabkit_core::random_u64`]).
    Requested {
        /// Bits in a key (`mr_key_size` bytes, at most 64).
        bits: u32,
    },
}

impl KeyPick {
    /// A short label for tables: `provider`, or `random 64b`.
    pub fn label(self) -> String {
        match self {
            KeyPick::Provider => "provider".into(),
            KeyPick::Requested { bits } => format!("random {bits}b"),
        }
    }
}

impl Info {
    /// Who picks a region's key here, and its size in bits.
    pub fn mr_keys(&self) -> KeyPick {
        if self.mr_mode() & ffi::FI_MR_PROV_KEY != 0 {
            return KeyPick::Provider;
        }
        let bytes = self.mr_key_size().min(8);
        KeyPick::Requested {
            // A provider that leaves the size unset keeps the whole u64.
            bits: if bytes == 0 { 64 } else { bytes as u32 * 8 },
        }
    }

    pub(crate) fn as_ptr(&self) -> *mut ffi::fi_info {
        self.raw.as_ptr()
    }

    fn r(&self) -> &ffi::fi_info {
        // SAFETY: raw is valid for our lifetime and we never mutate it while
        // shared.
        unsafe { self.raw.as_ref() }
    }

    fn fabric_attr(&self) -> &ffi::fi_fabric_attr {
        // SAFETY: fi_getinfo fills fabric_attr for every entry.
        unsafe { &*self.r().fabric_attr }
    }

    fn domain_attr(&self) -> &ffi::fi_domain_attr {
        // SAFETY: fi_getinfo fills domain_attr for every entry.
        unsafe { &*self.r().domain_attr }
    }

    fn tx_attr(&self) -> Option<&ffi::fi_tx_attr> {
        // SAFETY: tx_attr is null or valid for the fi_info's lifetime.
        unsafe { self.r().tx_attr.as_ref() }
    }

    fn rx_attr(&self) -> Option<&ffi::fi_rx_attr> {
        // SAFETY: rx_attr is null or valid for the fi_info's lifetime.
        unsafe { self.r().rx_attr.as_ref() }
    }

    fn ep_attr(&self) -> Option<&ffi::fi_ep_attr> {
        // SAFETY: ep_attr is null or valid for the fi_info's lifetime.
        unsafe { self.r().ep_attr.as_ref() }
    }

    /// Provider name, e.g. `tcp;ofi_rxm`.
    pub fn provider(&self) -> String {
        cstr(self.fabric_attr().prov_name)
    }

    /// Fabric name (for socket providers: the subnet).
    pub fn fabric_name(&self) -> String {
        cstr(self.fabric_attr().name)
    }

    /// Domain name (for socket providers: the interface).
    pub fn domain_name(&self) -> String {
        cstr(self.domain_attr().name)
    }

    /// Provider version as "major.minor".
    pub fn provider_version(&self) -> String {
        let v = self.fabric_attr().prov_version;
        format!("{}.{}", v >> 16, v & 0xffff)
    }

    /// Capability bits.
    pub fn caps_bits(&self) -> u64 {
        self.r().caps
    }

    /// Whether RMA is offered.
    pub fn has_rma(&self) -> bool {
        self.r().caps & ffi::FI_RMA as u64 != 0
    }

    /// Whether atomics are offered.
    pub fn has_atomics(&self) -> bool {
        self.r().caps & ffi::FI_ATOMIC as u64 != 0
    }

    /// Whether messages are offered.
    pub fn has_msg(&self) -> bool {
        self.r().caps & ffi::FI_MSG as u64 != 0
    }

    /// Mode bits the provider requires of the application.
    pub fn mode(&self) -> u64 {
        self.r().mode
    }

    /// Memory-registration mode bits the provider requires.
    pub fn mr_mode(&self) -> u32 {
        self.domain_attr().mr_mode as u32
    }

    /// Data progress model.
    pub fn data_progress(&self) -> Progress {
        match self.domain_attr().data_progress {
            ffi::FI_PROGRESS_AUTO => Progress::Auto,
            ffi::FI_PROGRESS_MANUAL => Progress::Manual,
            _ => Progress::Unspec,
        }
    }

    /// Endpoint type name (`FI_EP_RDM`, `FI_EP_MSG`, `FI_EP_DGRAM`).
    pub fn ep_type(&self) -> &'static str {
        match self.ep_attr().map(|e| e.type_) {
            Some(ffi::FI_EP_RDM) => "FI_EP_RDM",
            Some(ffi::FI_EP_MSG) => "FI_EP_MSG",
            Some(ffi::FI_EP_DGRAM) => "FI_EP_DGRAM",
            _ => "FI_EP_UNSPEC",
        }
    }

    /// Largest single message or RMA transfer.
    pub fn max_msg_size(&self) -> usize {
        self.ep_attr().map_or(0, |e| e.max_msg_size)
    }

    /// Largest inject (buffered) send.
    pub fn inject_size(&self) -> usize {
        self.tx_attr().map_or(0, |t| t.inject_size)
    }

    /// Most local buffers (iovecs) one transmit may gather
    /// (`tx_attr->iov_limit`).
    pub fn iov_limit(&self) -> usize {
        self.tx_attr().map_or(0, |t| t.iov_limit)
    }

    /// Most remote segments one RMA operation may scatter to or gather
    /// from (`tx_attr->rma_iov_limit`).
    pub fn rma_iov_limit(&self) -> usize {
        self.tx_attr().map_or(0, |t| t.rma_iov_limit)
    }

    /// Transmit queue depth.
    pub fn tx_size(&self) -> usize {
        self.tx_attr().map_or(0, |t| t.size)
    }

    /// Receive queue depth.
    pub fn rx_size(&self) -> usize {
        self.rx_attr().map_or(0, |t| t.size)
    }

    /// Size of the key of a memory region.
    pub fn mr_key_size(&self) -> usize {
        self.domain_attr().mr_key_size
    }

    /// Default transmit operation flags (`tx_attr->op_flags`).
    pub fn tx_op_flags(&self) -> u64 {
        self.tx_attr().map_or(0, |t| t.op_flags)
    }

    /// Transmit message ordering bits (`tx_attr->msg_order`).
    pub fn tx_msg_order(&self) -> u64 {
        self.tx_attr().map_or(0, |t| t.msg_order)
    }

    /// Largest RMA read after RMA write whose data order is kept
    /// (`ep_attr->max_order_raw_size`; 0: none).
    pub fn max_order_raw_size(&self) -> usize {
        self.ep_attr().map_or(0, |e| e.max_order_raw_size)
    }
}
