//! `fid_fabric` and `fid_domain` owners.

use std::ptr::NonNull;

use std::sync::{Arc, Mutex};

use fabric_sys as ffi;
use serde::Serialize;

use crate::error::{check, Result};
use crate::info::Info;

/// What happened to one fid under a fabric, for leak and close-order tests
/// (see [`FidLog`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FidEvent {
    /// A fid of this kind was opened.
    Opened(&'static str),
    /// A fid of this kind was closed; `fi_close` returned this (0: closed).
    Closed(&'static str, i32),
}

/// Every open and close of the fids under one fabric, in order, with the
/// return code of each `fi_close`. Shared by the fabric and all its
/// children, so it outlives them: a test reads it after dropping them all.
#[derive(Debug, Default)]
pub struct FidLog {
    events: Mutex<Vec<FidEvent>>,
}

impl FidLog {
    pub(crate) fn opened(&self, what: &'static str) {
        self.push(FidEvent::Opened(what));
    }

    fn push(&self, e: FidEvent) {
        self.events
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(e);
    }

    /// Every event so far, in order.
    pub fn events(&self) -> Vec<FidEvent> {
        self.events
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// The fids not closed successfully, one kind name per fid (empty once
    /// every fid opened was closed with `fi_close` returning 0).
    pub fn open(&self) -> Vec<&'static str> {
        let mut open: Vec<&'static str> = Vec::new();
        for e in self.events() {
            match e {
                FidEvent::Opened(w) => open.push(w),
                FidEvent::Closed(w, 0) => {
                    if let Some(i) = open.iter().position(|&o| o == w) {
                        open.remove(i);
                    }
                }
                FidEvent::Closed(..) => {}
            }
        }
        open
    }
}

/// Closes a fid and returns `fi_close`'s code (0, or a negative fi_errno).
/// A failure is also reported on stderr, never a panic: dropping must not
/// abort the process. A caller whose memory the provider may still use
/// after a failed close must leak it rather than free it.
///
/// # Safety
/// `fid` must be an open fid owned by the caller; it is not to be used
/// afterwards (whatever the result).
#[must_use = "a failed close must be handled: leak what the fid may still use"]
pub(crate) unsafe fn close_fid(fid: *mut ffi::fid, what: &'static str, log: &FidLog) -> i32 {
    // SAFETY: guaranteed by the caller.
    let rc = unsafe { ffi::fi_close(fid) };
    log.push(FidEvent::Closed(what, rc));
    if rc != 0 {
        fabkit_core::notice::notice(format_args!(
            "fi_close({what}) failed: {}",
            crate::strerror(-rc)
        ));
    }
    rc
}

/// An open fabric (`fi_fabric`).
#[doc(alias = "fi_fabric")]
#[derive(Clone, Debug)]
pub struct Fabric {
    pub(crate) inner: Arc<FabricInner>,
}

#[derive(Debug)]
pub(crate) struct FabricInner {
    pub(crate) fid: NonNull<ffi::fid_fabric>,
    /// Opens and closes of this fabric's fids.
    pub(crate) log: Arc<FidLog>,
}

// SAFETY: domains are opened with FI_THREAD_SAFE, and the fabric object
// itself is only used to open domains and to close it.
unsafe impl Send for FabricInner {}
// SAFETY: as above.
unsafe impl Sync for FabricInner {}

impl Drop for FabricInner {
    fn drop(&mut self) {
        // SAFETY: we own the fid and every domain holds an Arc to us, so no
        // child is open any more. Nothing of ours is left to leak on failure.
        let _ = unsafe { close_fid(&mut (*self.fid.as_ptr()).fid, "fabric", &self.log) };
    }
}

impl Fabric {
    /// Opens the fabric described by `info`.
    pub fn open(info: &Info) -> Result<Fabric> {
        let mut fid = std::ptr::null_mut();
        // SAFETY: fabric_attr comes from a valid fi_info; fid receives a new
        // fabric that we own.
        check("fi_fabric", unsafe {
            ffi::fi_fabric((*info.as_ptr()).fabric_attr, &mut fid, std::ptr::null_mut())
        })?;
        let log = Arc::new(FidLog::default());
        log.opened("fabric");
        Ok(Fabric {
            inner: Arc::new(FabricInner {
                fid: NonNull::new(fid).expect("fi_fabric returned success and null"),
                log,
            }),
        })
    }
}

/// An open access domain (`fi_domain`): the NIC or provider instance.
#[doc(alias = "fi_domain")]
#[derive(Clone, Debug)]
pub struct Domain {
    pub(crate) inner: Arc<DomainInner>,
}

#[derive(Debug)]
pub(crate) struct DomainInner {
    pub(crate) fid: NonNull<ffi::fid_domain>,
    pub(crate) info: Info,
    /// The fabric's log of opens and closes, shared by every child.
    pub(crate) log: Arc<FidLog>,
    _fabric: Arc<FabricInner>,
}

// SAFETY: opened with FI_THREAD_SAFE.
unsafe impl Send for DomainInner {}
// SAFETY: opened with FI_THREAD_SAFE.
unsafe impl Sync for DomainInner {}

impl Drop for DomainInner {
    fn drop(&mut self) {
        // SAFETY: we own the fid; every child holds an Arc to us. Nothing of
        // ours is left to leak on failure.
        let _ = unsafe { close_fid(&mut (*self.fid.as_ptr()).fid, "domain", &self.log) };
    }
}

/// Who carries out a provider's atomics at the target. libfabric does not
/// say; this is what each provider's implementation does (libfabric 1.17).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum AtomicsBy {
    /// The NIC, without the target's CPU (cxi).
    Nic,
    /// Emulated: a message the target's libfabric applies with its CPU
    /// during progress (ofi_rxm and ofi_rxd over any core provider, including
    /// verbs; shm, sockets, tcp, efa, psm2/psm3, opx).
    TargetSoftware,
    /// A provider fabkit has no knowledge of.
    Unknown,
}

impl AtomicsBy {
    /// For a provider name as `fi_info` gives it (`verbs;ofi_rxm`, `cxi`).
    pub fn of(provider: &str) -> AtomicsBy {
        match crate::info::Executes::of(provider, "", false).atomics {
            crate::info::Executor::Nic => AtomicsBy::Nic,
            crate::info::Executor::TargetCpu => AtomicsBy::TargetSoftware,
            _ => AtomicsBy::Unknown,
        }
    }

    /// A short label for tables.
    pub fn label(self) -> &'static str {
        match self {
            AtomicsBy::Nic => "NIC",
            AtomicsBy::TargetSoftware => "emulated",
            AtomicsBy::Unknown => "?",
        }
    }
}

/// Which u64 atomics a domain supports (`fi_query_atomic`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct AtomicSupport {
    /// `FI_CSWAP` via `fi_compare_atomic`.
    pub compare_swap: bool,
    /// `FI_SUM` via `fi_fetch_atomic`.
    pub fetch_add: bool,
    /// `FI_ATOMIC_READ` via `fi_fetch_atomic`.
    pub fetch: bool,
    /// `FI_ATOMIC_WRITE` via `fi_fetch_atomic`.
    pub swap: bool,
}

impl AtomicSupport {
    /// All four.
    pub fn all(&self) -> bool {
        self.missing().is_empty()
    }

    fn named(&self) -> [(bool, &'static str); 4] {
        [
            (self.compare_swap, "compare-and-swap"),
            (self.fetch_add, "fetch-add"),
            (self.fetch, "fetch"),
            (self.swap, "swap"),
        ]
    }

    /// Names of the operations not supported.
    pub fn missing(&self) -> Vec<&'static str> {
        self.named()
            .into_iter()
            .filter(|(ok, _)| !ok)
            .map(|(_, n)| n)
            .collect()
    }

    /// Names of the operations supported.
    pub fn supported(&self) -> Vec<&'static str> {
        self.named()
            .into_iter()
            .filter(|(ok, _)| *ok)
            .map(|(_, n)| n)
            .collect()
    }
}

impl Domain {
    /// Opens the domain of `info` on `fabric`.
    pub fn open(fabric: &Fabric, info: &Info) -> Result<Domain> {
        let info = info.clone();
        let mut fid = std::ptr::null_mut();
        // SAFETY: the fabric is open and info valid; fid receives a domain we own.
        check("fi_domain", unsafe {
            ffi::fi_domain(
                fabric.inner.fid.as_ptr(),
                info.as_ptr(),
                &mut fid,
                std::ptr::null_mut(),
            )
        })?;
        let log = fabric.inner.log.clone();
        log.opened("domain");
        Ok(Domain {
            inner: Arc::new(DomainInner {
                fid: NonNull::new(fid).expect("fi_domain returned success and null"),
                info,
                log,
                _fabric: fabric.inner.clone(),
            }),
        })
    }

    /// The configuration this domain was opened with.
    pub fn info(&self) -> &Info {
        &self.inner.info
    }

    /// Asks the provider which u64 atomics it can do.
    pub fn atomic_support(&self) -> AtomicSupport {
        if !self.inner.info.has_atomics() {
            return AtomicSupport::default();
        }
        let q = |op: ffi::fi_op, flags: u64| {
            let mut attr = ffi::fi_atomic_attr::default();
            // SAFETY: the domain is open; attr is a valid out-parameter.
            let rc = unsafe {
                ffi::fi_query_atomic(
                    self.inner.fid.as_ptr(),
                    ffi::FI_UINT64,
                    op,
                    &mut attr,
                    flags,
                )
            };
            rc == 0 && attr.count >= 1
        };
        AtomicSupport {
            compare_swap: q(ffi::FI_CSWAP, ffi::FI_COMPARE_ATOMIC),
            fetch_add: q(ffi::FI_SUM, ffi::FI_FETCH_ATOMIC),
            fetch: q(ffi::FI_ATOMIC_READ, ffi::FI_FETCH_ATOMIC),
            swap: q(ffi::FI_ATOMIC_WRITE, ffi::FI_FETCH_ATOMIC),
        }
    }
}

impl DomainInner {
    /// The key to request of `fi_mr_reg`. Where the provider takes the
    /// caller's key (no `FI_MR_PROV_KEY`), a key is every bit the provider
    /// keeps (`mr_key_size`, 8 bytes on every provider here) drawn from the
    /// system's random source, so a process outside the job cannot reach a
    /// region by trying keys 1, 2, 3; it fails closed when the source
    /// fails. Under `FI_MR_PROV_KEY` the provider ignores it.
    pub(crate) fn requested_key(&self) -> Result<u64> {
        match self.info.mr_keys() {
            crate::info::KeyPick::Provider => Ok(0),
            crate::info::KeyPick::Requested { bits } => {
                let mask = if bits >= 64 {
                    u64::MAX
                } else {
                    (1u64 << bits) - 1
                };
                loop {
                    let k = fabkit_core::random_u64()? & mask;
                    // All ones is FI_KEY_NOTAVAIL's spelling: draw again.
                    if k != ffi::FI_KEY_NOTAVAIL {
                        return Ok(k);
                    }
                }
            }
        }
    }
}
