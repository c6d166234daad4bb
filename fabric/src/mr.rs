//! Registered memory (`fid_mr`).

use std::alloc::Layout;
use std::ptr::NonNull;
use std::sync::atomic::AtomicU64;
use std::sync::Arc;

use fabric_sys as ffi;
use serde::{Deserialize, Serialize};

use crate::domain::{close_fid, DomainInner};
use crate::ep::{Endpoint, EpInner};
use crate::error::{call_error, check, Error, Result};
use fabkit_core::Error as CoreError;

/// Page alignment for registered buffers: some providers (FI_MR_ALLOCATED
/// hardware) want page-backed memory, and it keeps u64 words aligned.
const ALIGN: usize = 4096;

/// Where a region's memory comes from.
enum Backing {
    /// Allocated (zeroed, page-aligned) by the region; freed after close.
    Heap(Layout),
    /// A shared segment other processes may map too; kept alive by the
    /// region until it is closed.
    Shared {
        _segment: std::sync::Arc<crate::shm::SharedSegment>,
    },
}

/// What a peer needs to reach a region: the address to add offsets to (a
/// virtual address under `FI_MR_VIRT_ADDR`, else 0), its length and its key.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct RemoteRegion {
    /// Base of remote addresses for this region.
    pub base: u64,
    /// Length in bytes.
    pub len: u64,
    /// Remote protection key.
    pub key: u64,
}

/// Registered memory. Owns its buffer, so the buffer cannot be freed while
/// the provider may still touch it. Memory that peers may write is never
/// handed out as `&mut [u8]`: read it through RMA, [`MemoryRegion::words`] or
/// [`MemoryRegion::snapshot`].
#[doc(alias = "fi_mr")]
pub struct MemoryRegion {
    buf: NonNull<u8>,
    len: usize,
    backing: Backing,
    fid: NonNull<ffi::fid_mr>,
    /// Whether the registration is still open, or how closing it went.
    reg: Reg,
    key: u64,
    desc: *mut libc::c_void,
    remote_base: u64,
    // Field order is drop order: the MR closes (in Drop) before these go.
    /// The endpoint the region was registered through, until the
    /// registration closes. Held whether or not the provider binds regions
    /// to endpoints (FI_MR_ENDPOINT), so that ownership, and its tests, are
    /// the same on every provider: an endpoint closes only after its live
    /// regions. A [`Retired`] region lets go of it where nothing binds it.
    _ep: Option<Arc<EpInner>>,
    _domain: Arc<DomainInner>,
}

/// Regions registered through an endpoint hold it open (a child keeps its
/// parent), so a provider that binds regions to endpoints (`FI_MR_ENDPOINT`)
/// never sees the endpoint close first.
impl Endpoint {
    /// Allocates and registers `len` bytes for local and remote access.
    pub fn register(&self, len: usize) -> Result<MemoryRegion> {
        MemoryRegion::register(&self.inner.domain, Some(&self.inner), len)
    }

    /// Allocates and registers `len` bytes as the local side of this
    /// process's own RMA reads and writes (and messages): no peer can read
    /// or write them.
    pub(crate) fn register_staging(&self, len: usize) -> Result<MemoryRegion> {
        MemoryRegion::allocate(&self.inner.domain, Some(&self.inner), len, STAGING)
    }

    /// Allocates and registers `len` bytes for sending and receiving
    /// messages only: no peer can read or write them.
    pub(crate) fn register_local(&self, len: usize) -> Result<MemoryRegion> {
        MemoryRegion::allocate(&self.inner.domain, Some(&self.inner), len, LOCAL)
    }

    /// Registers a shared segment as a region (peers on this node may map
    /// it too).
    pub fn register_shared(
        &self,
        seg: std::sync::Arc<crate::shm::SharedSegment>,
    ) -> Result<MemoryRegion> {
        MemoryRegion::register_shared(&self.inner.domain, Some(&self.inner), seg)
    }
}

/// Access for a region peers read and write.
const REMOTE: u64 = (ffi::FI_SEND
    | ffi::FI_RECV
    | ffi::FI_READ
    | ffi::FI_WRITE
    | ffi::FI_REMOTE_READ
    | ffi::FI_REMOTE_WRITE) as u64;

/// Access for a buffer only this process sends from and receives into.
const LOCAL: u64 = (ffi::FI_SEND | ffi::FI_RECV) as u64;

/// Access for a buffer this process's own RMA reads land in and writes
/// leave from (a lane's staging): no peer reads or writes it.
const STAGING: u64 = (ffi::FI_SEND | ffi::FI_RECV | ffi::FI_READ | ffi::FI_WRITE) as u64;

/// Registrations this process holds open, in every domain.
static LIVE: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

/// How many memory regions this process has registered and not closed,
/// in every domain (a region whose close failed stays counted: the
/// provider may still use it). Flat over a long run, or something leaks.
pub fn live_regions() -> usize {
    LIVE.load(std::sync::atomic::Ordering::Relaxed)
}

/// How often a requested key is drawn again when the domain says another
/// region holds it.
const KEY_DRAWS: usize = 4;

/// The state of a region's registration.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Reg {
    Open,
    Closed,
    /// `fi_close` failed with this (positive) code: the provider may still
    /// use the buffer, which is therefore never freed.
    CloseFailed(i32),
}

impl std::fmt::Debug for MemoryRegion {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MemoryRegion")
            .field("len", &self.len)
            .field("key", &self.key)
            .field("remote_base", &self.remote_base)
            .finish()
    }
}

// SAFETY: the buffer is only accessed through atomics or by the provider,
// and the domain is FI_THREAD_SAFE.
unsafe impl Send for MemoryRegion {}
// SAFETY: as above; all &self methods are race-free (atomics).
unsafe impl Sync for MemoryRegion {}

impl Drop for MemoryRegion {
    fn drop(&mut self) {
        if self.close_registration().is_err() {
            // The provider may still access the buffer, and its parents
            // would refuse to close: leak all of it rather than free it.
            std::mem::forget(self._ep.take());
            std::mem::forget(self._domain.clone());
            if let Backing::Shared { _segment } =
                std::mem::replace(&mut self.backing, Backing::Heap(Layout::new::<u8>()))
            {
                std::mem::forget(_segment);
            }
            return;
        }
        // SAFETY: the MR closed successfully, so the provider no longer
        // accesses the buffer through it; a buffer an operation that timed
        // out may still write is a `Retired` one, which frees it only after
        // its endpoint closed. We free it once, here.
        unsafe {
            if let Backing::Heap(layout) = self.backing {
                std::alloc::dealloc(self.buf.as_ptr(), layout);
            }
        }
    }
}

impl MemoryRegion {
    /// Closes the registration (once) but keeps the buffer; on success lets
    /// go of the endpoint. Safe on its own: the buffer stays allocated
    /// whatever the provider still does with it.
    fn close_registration(&mut self) -> Result<()> {
        match self.reg {
            Reg::Closed => Ok(()),
            Reg::CloseFailed(code) => Err(call_error("fi_close(mr)", code)),
            Reg::Open => {
                // SAFETY: we own the MR fid and it is open; it is never used
                // again (`reg` is no longer Open).
                let rc =
                    unsafe { close_fid(&mut (*self.fid.as_ptr()).fid, "mr", &self._domain.log) };
                if rc != 0 {
                    self.reg = Reg::CloseFailed(-rc);
                    return Err(call_error("fi_close(mr)", -rc));
                }
                self.reg = Reg::Closed;
                LIVE.fetch_sub(1, std::sync::atomic::Ordering::Relaxed);
                self._ep = None;
                Ok(())
            }
        }
    }

    /// Retires a region an operation that did not complete (it timed out,
    /// or its CQ failed) may still access: see [`Retired`].
    pub(crate) fn retire(mut self) -> Retired {
        let bound = self._domain.info.mr_mode() & ffi::FI_MR_ENDPOINT != 0;
        if !bound {
            // Nothing binds it to the endpoint, which must close before it
            // (fi_endpoint(3)), so it must not hold the endpoint open.
            self._ep = None;
        }
        Retired(Some(self))
    }

    /// Allocates `len` zeroed bytes and registers them for local and remote
    /// read and write. Honours the domain's `mr_mode`: provider keys, virtual
    /// addressing, and binding to `ep` under `FI_MR_ENDPOINT`.
    pub(crate) fn register(
        domain: &Arc<DomainInner>,
        ep: Option<&Arc<EpInner>>,
        len: usize,
    ) -> Result<MemoryRegion> {
        MemoryRegion::allocate(domain, ep, len, REMOTE)
    }

    /// Allocates `len` zeroed bytes and registers them for `access`.
    fn allocate(
        domain: &Arc<DomainInner>,
        ep: Option<&Arc<EpInner>>,
        len: usize,
        access: u64,
    ) -> Result<MemoryRegion> {
        if len == 0 {
            return Err(Error::from(CoreError::InvalidArgument(
                "cannot register an empty memory region (length 0)".into(),
            )));
        }
        let layout = Layout::from_size_align(len.next_multiple_of(ALIGN), ALIGN).map_err(|e| {
            Error::from(CoreError::InvalidArgument(format!(
                "region of {len} B: {e}"
            )))
        })?;
        // SAFETY: layout has non-zero size.
        let buf = NonNull::new(unsafe { std::alloc::alloc_zeroed(layout) }).ok_or_else(|| {
            Error::from(CoreError::Io {
                what: format!("allocating a region of {len} B"),
                cause: std::io::Error::from(std::io::ErrorKind::OutOfMemory),
            })
        })?;
        Self::register_backed(domain, ep, buf, len, Backing::Heap(layout), access)
    }

    /// Registers a shared segment (all of it) as a region.
    pub(crate) fn register_shared(
        domain: &Arc<DomainInner>,
        ep: Option<&Arc<EpInner>>,
        seg: std::sync::Arc<crate::shm::SharedSegment>,
    ) -> Result<MemoryRegion> {
        let buf = NonNull::new(seg.as_ptr()).expect("a mapping is never null");
        let len = seg.len();
        Self::register_backed(
            domain,
            ep,
            buf,
            len,
            Backing::Shared { _segment: seg },
            REMOTE,
        )
    }

    fn register_backed(
        domain: &Arc<DomainInner>,
        ep: Option<&Arc<EpInner>>,
        buf: NonNull<u8>,
        len: usize,
        backing: Backing,
        access: u64,
    ) -> Result<MemoryRegion> {
        let mr_mode = domain.info.mr_mode();
        let mut fid = std::ptr::null_mut();
        let mut rc = 0;
        // A requested key another region of this domain holds is refused
        // (-FI_ENOKEY): draw again; with 64 random bits this is a formality.
        for _ in 0..KEY_DRAWS {
            let key = match domain.requested_key() {
                Ok(k) => k,
                Err(e) => {
                    if let Backing::Heap(layout) = backing {
                        // SAFETY: allocated by `allocate` with this layout,
                        // never registered.
                        unsafe { std::alloc::dealloc(buf.as_ptr(), layout) };
                    }
                    return Err(e);
                }
            };
            // SAFETY: buf is a live allocation of at least len bytes that
            // this MemoryRegion owns and frees only after closing the MR.
            rc = unsafe {
                ffi::fi_mr_reg(
                    domain.fid.as_ptr(),
                    buf.as_ptr() as *const _,
                    len,
                    access,
                    0,
                    key,
                    0,
                    &mut fid,
                    std::ptr::null_mut(),
                )
            };
            if rc != -(ffi::FI_ENOKEY as i32) {
                break;
            }
        }
        if rc != 0 {
            if let Backing::Heap(layout) = backing {
                // SAFETY: allocated by `register` with this layout, never
                // registered.
                unsafe { std::alloc::dealloc(buf.as_ptr(), layout) };
            }
            check("fi_mr_reg", rc)?;
        }
        let fid = NonNull::new(fid).expect("fi_mr_reg returned success and null");
        domain.log.opened("mr");
        LIVE.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let mut mr = MemoryRegion {
            buf,
            len,
            backing,
            fid,
            reg: Reg::Open,
            key: 0,
            desc: std::ptr::null_mut(),
            remote_base: 0,
            _ep: None,
            _domain: domain.clone(),
        };
        mr._ep = ep.cloned();
        if mr_mode & ffi::FI_MR_ENDPOINT != 0 {
            let ep = ep.ok_or_else(|| {
                Error::from(CoreError::InvalidArgument(
                    "provider requires FI_MR_ENDPOINT: register memory through an endpoint".into(),
                ))
            })?;
            // SAFETY: both fids are open; the MR keeps the endpoint alive.
            check("fi_mr_bind", unsafe {
                ffi::fi_mr_bind(fid.as_ptr(), &mut (*ep.fid.as_ptr()).fid, 0)
            })?;
            // SAFETY: the MR is open and bound.
            check("fi_mr_enable", unsafe { ffi::fi_mr_enable(fid.as_ptr()) })?;
        }
        // SAFETY: the MR is open (and enabled where required).
        mr.key = unsafe { ffi::fi_mr_key(fid.as_ptr()) };
        // SAFETY: as above.
        mr.desc = unsafe { ffi::fi_mr_desc(fid.as_ptr()) };
        if mr.key == ffi::FI_KEY_NOTAVAIL {
            return Err(Error::Unsupported {
                provider: domain.info.provider(),
                what: "64-bit memory keys (it needs FI_MR_RAW keys)".into(),
                hint: "use another provider".into(),
            });
        }
        if mr_mode & ffi::FI_MR_VIRT_ADDR != 0 {
            mr.remote_base = buf.as_ptr() as u64;
        }
        Ok(mr)
    }

    /// Length in bytes.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the region is empty (never: registration refuses that).
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// What a peer needs to access this region.
    pub fn remote(&self) -> RemoteRegion {
        RemoteRegion {
            base: self.remote_base,
            len: self.len as u64,
            key: self.key,
        }
    }

    /// The local descriptor to pass with operations on this buffer.
    pub(crate) fn desc(&self) -> *mut libc::c_void {
        self.desc
    }

    /// Raw pointer to byte `offset`; the caller keeps within `len`.
    pub(crate) fn ptr_at(&self, offset: usize) -> *mut u8 {
        debug_assert!(offset <= self.len);
        // SAFETY: offset is within the allocation (checked by callers).
        unsafe { self.buf.as_ptr().add(offset) }
    }

    /// The region as u64 words that may change under us (peers write them).
    /// For inspection and initialisation only: CPU atomics on these words are
    /// *not* atomic with respect to the provider's atomics, so a region's
    /// atomics must all go through the provider.
    pub fn words(&self) -> &[AtomicU64] {
        // SAFETY: the buffer is 4096-aligned, lives as long as self, and is
        // only ever accessed atomically from Rust.
        unsafe { std::slice::from_raw_parts(self.buf.as_ptr().cast(), self.len / 8) }
    }

    /// Every word the region's bytes fall in (the last may be partial:
    /// its tail lies in the page-rounded allocation, or the segment, whose
    /// length is a multiple of 8). The region is only ever accessed as
    /// these `AtomicU64` words from Rust, never also as bytes: mixed-size
    /// atomic access to the same memory is not defined.
    fn all_words(&self) -> &[AtomicU64] {
        // SAFETY: the buffer is 4096-aligned and at least len rounded up to
        // 8 bytes long (heap: rounded to 4096; shared: a multiple of 8), it
        // lives as long as self, and Rust only accesses it as AtomicU64.
        unsafe { std::slice::from_raw_parts(self.buf.as_ptr().cast(), self.len.div_ceil(8)) }
    }

    /// Copies `out.len()` bytes at `offset` out of the region. A concurrent
    /// remote write may be seen half-done: a snapshot is not atomic.
    pub fn snapshot(&self, offset: usize, out: &mut [u8]) -> Result<()> {
        self.range(offset, out.len())?;
        fabkit_core::words::read_words(self.all_words(), offset, out);
        Ok(())
    }

    /// Fills bytes at `offset` from `data` (for initialisation before peers
    /// are told about the region). The bytes beside the range are kept.
    pub fn fill(&self, offset: usize, data: &[u8]) -> Result<()> {
        self.range(offset, data.len())?;
        fabkit_core::words::write_words(self.all_words(), offset, data);
        Ok(())
    }

    fn range(&self, offset: usize, len: usize) -> Result<()> {
        offset
            .checked_add(len)
            .filter(|&e| e <= self.len)
            .ok_or_else(|| {
                Error::from(CoreError::InvalidArgument(format!(
                    "{len} B at offset {offset} is outside the local region of {} B",
                    self.len
                )))
            })?;
        Ok(())
    }
}

/// A region that an operation which did not complete may still access (it
/// timed out, or its CQ failed): only closing the endpoint the operation
/// was posted on ends it (fi_endpoint(3), `fi_close`: buffers must not be
/// released, deregistered or reused until a completion is generated or the
/// endpoint's close returns).
///
/// The owner (the Rank) closes things in the order libfabric needs: under
/// `FI_MR_ENDPOINT` the registration, bound to the endpoint, closes first
/// (cxi refuses to close an endpoint with a bound region open), then the
/// endpoint, then the buffer is freed; otherwise the endpoint closes, then
/// the registration, then the buffer. Dropping a `Retired` leaks it: it is
/// freed only by [`Retired::free`], whose caller vouches that the endpoint
/// has closed.
#[derive(Debug)]
pub(crate) struct Retired(Option<MemoryRegion>);

impl Retired {
    /// Closes the registration, keeping the buffer.
    pub(crate) fn close_registration(&mut self) -> Result<()> {
        match &mut self.0 {
            Some(mr) => mr.close_registration(),
            None => Ok(()),
        }
    }

    /// Closes the registration if still open and frees the buffer, or leaks
    /// it if that close fails.
    ///
    /// # Safety
    /// No operation may still access the buffer: the endpoint every
    /// operation on it was posted on has been closed with `fi_close`
    /// returning 0 (or every such operation has completed).
    pub(crate) unsafe fn free(mut self) {
        drop(self.0.take());
    }
}

/// Closes `eps` (each holding its endpoint's last reference) and lets go
/// of the `retired` buffers operations on them may have used, in the order
/// the provider needs: registrations before the endpoints where it binds
/// them (`regions_first`), else after; each buffer freed only if every
/// close succeeded, else leaked and said once (`whose`: "rank 3",
/// "mailbox of rank 3"). Whether every close succeeded.
pub(crate) fn close_then_free(
    eps: impl IntoIterator<Item = crate::ep::Endpoint>,
    mut retired: Vec<Retired>,
    regions_first: bool,
    whose: &str,
) -> bool {
    let mut closed = true;
    if regions_first {
        for r in &mut retired {
            closed &= r.close_registration().is_ok();
        }
    }
    for ep in eps {
        closed = closed
            && match Arc::try_unwrap(ep.inner) {
                Ok(ep) => ep.close().is_ok(),
                Err(shared) => {
                    fabkit_core::notice::notice(format_args!(
                        "{whose}: an endpoint is still referenced elsewhere, so it cannot be \
                         closed now"
                    ));
                    drop(shared);
                    false
                }
            };
    }
    if !regions_first && closed {
        for r in &mut retired {
            closed &= r.close_registration().is_ok();
        }
    }
    if closed {
        for r in retired {
            // SAFETY: the endpoints every operation on these buffers was
            // posted on have closed (fi_close returned 0).
            unsafe { r.free() };
        }
    } else if !retired.is_empty() {
        fabkit_core::notice::notice(format_args!(
            "{whose}: a close failed, so {} retired buffer(s) the provider may still write \
             are leaked, not freed",
            retired.len()
        ));
    }
    closed
}

impl Drop for Retired {
    fn drop(&mut self) {
        // Not freed through `free`: the provider may still write the
        // buffer, so it (and the registration, and what it holds open) is
        // leaked.
        if let Some(mr) = self.0.take() {
            std::mem::forget(mr);
        }
    }
}
