//! Address vector (`fid_av`): endpoint names to `fi_addr_t`.

use std::ptr::NonNull;
use std::sync::{Arc, OnceLock};

use fabric_sys as ffi;

use crate::domain::{close_fid, Domain, DomainInner};
use crate::error::{check, Error, Result};
use fabkit_core::Error as CoreError;

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
    /// The domain's address format (`fi_info::addr_format`).
    format: u32,
    /// The domain's source address length (`fi_info::src_addrlen`; 0 when
    /// the provider did not say).
    src_addrlen: usize,
    /// The length of the name of the first endpoint bound to this AV: the
    /// provider's own address length, which peers of the same provider
    /// share (`fi_getname`).
    name_len: OnceLock<usize>,
    provider: String,
    _domain: Arc<DomainInner>,
}

/// How many bytes `fi_av_insert` reads from one address of the domain's
/// format: a NUL-terminated string, or a fixed length.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum AddrLen {
    /// `FI_ADDR_STR`: up to and including the first NUL.
    String,
    /// Exactly this many bytes.
    Fixed(usize),
    /// The provider gave no length and no endpoint has been opened yet.
    Unknown,
}

/// The fixed size of the socket-address formats, as libfabric reads them.
fn sockaddr_len(format: u32) -> Option<usize> {
    match format {
        ffi::FI_SOCKADDR_IN => Some(std::mem::size_of::<libc::sockaddr_in>()),
        ffi::FI_SOCKADDR_IN6 => Some(std::mem::size_of::<libc::sockaddr_in6>()),
        _ => None,
    }
}

/// For the format that takes any socket address (`FI_SOCKADDR`; 1.17 has
/// no `FI_SOCKADDR_IP`), the size of the family `name` says it is, so a peer of
/// the other IP family is not refused; `None` for other formats and
/// families.
fn family_len(format: u32, name: &[u8]) -> Option<usize> {
    if format != ffi::FI_SOCKADDR {
        return None;
    }
    let family = libc::sa_family_t::from_ne_bytes(name.get(..2)?.try_into().ok()?);
    match i32::from(family) {
        libc::AF_INET => Some(std::mem::size_of::<libc::sockaddr_in>()),
        libc::AF_INET6 => Some(std::mem::size_of::<libc::sockaddr_in6>()),
        _ => None,
    }
}

/// The libfabric name of an address format, for messages.
fn format_name(format: u32) -> String {
    match format {
        ffi::FI_FORMAT_UNSPEC => "FI_FORMAT_UNSPEC".into(),
        ffi::FI_SOCKADDR => "FI_SOCKADDR".into(),
        ffi::FI_SOCKADDR_IN => "FI_SOCKADDR_IN".into(),
        ffi::FI_SOCKADDR_IN6 => "FI_SOCKADDR_IN6".into(),
        ffi::FI_SOCKADDR_IB => "FI_SOCKADDR_IB".into(),
        ffi::FI_ADDR_STR => "FI_ADDR_STR".into(),
        other => format!("address format {other}"),
    }
}

// SAFETY: the domain is FI_THREAD_SAFE.
unsafe impl Send for AvInner {}
// SAFETY: the domain is FI_THREAD_SAFE.
unsafe impl Sync for AvInner {}

impl Drop for AvInner {
    fn drop(&mut self) {
        // SAFETY: we own the fid; endpoints bound to it hold an Arc to us.
        // Nothing of ours is left to leak on failure.
        let _ = unsafe { close_fid(&mut (*self.fid.as_ptr()).fid, "av", &self._domain.log) };
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
        // SAFETY: the domain's info is a valid fi_info for its lifetime.
        let (format, src_addrlen) = unsafe {
            let i = &*domain.inner.info.as_ptr();
            (i.addr_format, i.src_addrlen)
        };
        domain.inner.log.opened("av");
        Ok(AddressVector {
            inner: Arc::new(AvInner {
                fid: NonNull::new(fid).expect("fi_av_open returned success and null"),
                format,
                src_addrlen,
                name_len: OnceLock::new(),
                provider: domain.inner.info.provider(),
                _domain: domain.inner.clone(),
            }),
        })
    }

    /// Checks that `name` is a whole address of this domain's format, so
    /// that `fi_av_insert` (which takes no length) reads only its bytes.
    /// `peer` names whose address it is in the error.
    pub(crate) fn check_name(&self, name: &[u8], peer: Option<usize>) -> Result<()> {
        let inner = &self.inner;
        let err = |expected: String| Error::AddressLength {
            peer,
            len: name.len(),
            expected,
            provider: inner.provider.clone(),
        };
        match inner.addr_len_of(name) {
            AddrLen::String => {
                // The provider reads up to the NUL: it must be inside `name`.
                let max = ffi::FI_NAME_MAX as usize;
                match name.iter().position(|&b| b == 0) {
                    Some(_) => Ok(()),
                    None => Err(err(format!(
                        "a NUL-terminated string (FI_ADDR_STR, usually at most {max} B)"
                    ))),
                }
            }
            AddrLen::Fixed(n) if name.len() == n => Ok(()),
            AddrLen::Fixed(n) => Err(err(format!("{n} B ({})", format_name(inner.format)))),
            AddrLen::Unknown => Err(err(format!(
                "an unknown length ({} with no address length given; open an endpoint \
                 on this address vector first)",
                format_name(inner.format)
            ))),
        }
    }

    /// Inserts one endpoint name (as returned by `fi_getname`). A name whose
    /// length does not match the provider's addresses (a truncated or
    /// foreign one) is refused with [`Error::AddressLength`] before libfabric
    /// reads it.
    pub fn insert(&self, name: &[u8]) -> Result<FiAddr> {
        self.insert_from(name, None)
    }

    /// As [`AddressVector::insert`], naming `peer` in errors.
    pub(crate) fn insert_from(&self, name: &[u8], peer: Option<usize>) -> Result<FiAddr> {
        self.check_name(name, peer)?;
        let mut addr: FiAddr = ffi::FI_ADDR_NOTAVAIL;
        // SAFETY: name holds one whole address of the domain's format
        // (checked above: its fixed length, or a NUL inside it), so the
        // provider reads only its bytes; addr is a valid out-slot for one
        // entry. Synchronous insert (no EQ bound).
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
            return Err(Error::from(CoreError::Bootstrap(format!(
                "fi_av_insert did not accept a peer address of {} bytes",
                name.len()
            ))));
        }
        Ok(addr)
    }
}

impl AddressVector {
    /// Removes `addr` (`fi_av_remove`): a connection the provider keeps to
    /// it closes, and inserting its name again makes a new one.
    pub fn remove(&self, addr: FiAddr) -> Result<()> {
        let mut a = addr;
        // SAFETY: the AV is open; `a` is one fi_addr_t the call reads.
        check("fi_av_remove", unsafe {
            ffi::fi_av_remove(self.inner.fid.as_ptr(), &mut a, 1, 0)
        })?;
        Ok(())
    }
}

impl AvInner {
    fn addr_len(&self) -> AddrLen {
        if self.format == ffi::FI_ADDR_STR {
            return AddrLen::String;
        }
        // The socket formats have one size; otherwise the provider's own
        // name length, else what fi_getinfo said.
        if let Some(n) = sockaddr_len(self.format) {
            return AddrLen::Fixed(n);
        }
        match (self.name_len.get(), self.src_addrlen) {
            (Some(&n), _) => AddrLen::Fixed(n),
            (None, n) if n > 0 => AddrLen::Fixed(n),
            _ => AddrLen::Unknown,
        }
    }

    /// The length `fi_av_insert` reads from `name`: see
    /// [`family_len`], else the domain's one length.
    fn addr_len_of(&self, name: &[u8]) -> AddrLen {
        family_len(self.format, name).map_or_else(|| self.addr_len(), AddrLen::Fixed)
    }

    /// Records the length of an endpoint's own name (the first endpoint
    /// bound to this AV): peers of the same provider have names this long.
    pub(crate) fn learn_name_len(&self, len: usize) {
        let _ = self.name_len.set(len);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn named(family: i32, len: usize) -> Vec<u8> {
        let mut v = vec![0u8; len];
        let f = libc::sa_family_t::try_from(family).unwrap();
        v[..2].copy_from_slice(&f.to_ne_bytes());
        v
    }

    #[test]
    fn a_socket_address_format_takes_either_ip_family_at_its_own_size() {
        let format = ffi::FI_SOCKADDR;
        assert_eq!(family_len(format, &named(libc::AF_INET, 16)), Some(16));
        assert_eq!(family_len(format, &named(libc::AF_INET6, 8)), Some(28));
        assert_eq!(family_len(format, &named(libc::AF_UNIX, 16)), None);
        assert_eq!(family_len(format, &[2]), None, "too short to hold a family");
        // Fixed formats keep their one size, whatever the bytes say.
        assert_eq!(
            family_len(ffi::FI_SOCKADDR_IN, &named(libc::AF_INET6, 28)),
            None
        );
    }
}
