//! Address vector (`fid_av`): endpoint names to `fi_addr_t`.

use std::ptr::NonNull;
use std::sync::Arc;

use fabric_sys as ffi;

use crate::domain::{close_fid, Domain, DomainInner};
use crate::error::{check, Error, Result};

/// A peer's address as the provider knows it after insertion.
pub type FiAddr = ffi::fi_addr_t;

/// An address vector.
#[doc(alias = "fi_av")]
#[derive(Clone, Debug)]
pub struct AddressVector {
    pub(crate) inner: Arc<AvInner>,
}

#[derive(Debug)]
pub(crate) struct AvInner {
    pub(crate) fid: NonNull<ffi::fid_av>,
    _domain: Arc<DomainInner>,
}

// SAFETY: the domain is FI_THREAD_SAFE.
unsafe impl Send for AvInner {}
// SAFETY: the domain is FI_THREAD_SAFE.
unsafe impl Sync for AvInner {}

impl Drop for AvInner {
    fn drop(&mut self) {
        // SAFETY: we own the fid; endpoints bound to it hold an Arc to us.
        unsafe { close_fid(&mut (*self.fid.as_ptr()).fid, "av") }
    }
}

impl AddressVector {
    /// Opens a table-type address vector.
    pub fn open(domain: &Domain) -> Result<AddressVector> {
        let mut attr = ffi::fi_av_attr {
            type_: ffi::FI_AV_TABLE,
            ..Default::default()
        };
        let mut fid = std::ptr::null_mut();
        // SAFETY: domain is open, attr valid; fid receives an AV we own.
        let rc = unsafe {
            ffi::fi_av_open(
                domain.inner.fid.as_ptr(),
                &mut attr,
                &mut fid,
                std::ptr::null_mut(),
            )
        };
        if rc != 0 {
            // Some providers only do FI_AV_MAP; let them choose.
            attr.type_ = ffi::FI_AV_UNSPEC;
            // SAFETY: as above.
            check("fi_av_open", unsafe {
                ffi::fi_av_open(
                    domain.inner.fid.as_ptr(),
                    &mut attr,
                    &mut fid,
                    std::ptr::null_mut(),
                )
            })?;
        }
        Ok(AddressVector {
            inner: Arc::new(AvInner {
                fid: NonNull::new(fid).expect("fi_av_open returned success and null"),
                _domain: domain.inner.clone(),
            }),
        })
    }

    /// Inserts one endpoint name (as returned by `fi_getname`).
    pub fn insert(&self, name: &[u8]) -> Result<FiAddr> {
        let mut addr: FiAddr = ffi::FI_ADDR_NOTAVAIL;
        // SAFETY: name is a readable buffer holding one address; addr is a
        // valid out-slot for one entry. Synchronous insert (no EQ bound).
        let n = unsafe {
            ffi::fi_av_insert(
                self.inner.fid.as_ptr(),
                name.as_ptr().cast(),
                1,
                &mut addr,
                0,
                std::ptr::null_mut(),
            )
        };
        check("fi_av_insert", n)?;
        if n != 1 || addr == ffi::FI_ADDR_NOTAVAIL {
            return Err(Error::Bootstrap(format!(
                "fi_av_insert did not accept a peer address of {} bytes",
                name.len()
            )));
        }
        Ok(addr)
    }
}
