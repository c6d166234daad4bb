//! The system calls that `socket2` and `std` do not cover: `sendmmsg` and
//! `recvmmsg` with UDP GSO/GRO control messages, the `MSG_ZEROCOPY` error
//! queue, `TCP_INFO`, per-thread `getrusage` and CPU affinity
//! (`getifaddrs` is `fabkit_core::net`'s). The only module of the crate
//! with `unsafe`; each call's buffers are borrowed for exactly the call.
#![allow(unsafe_code)]

use std::io;
use std::mem::{size_of, zeroed};
use std::os::fd::{AsRawFd, BorrowedFd};
use std::time::Duration;

/// `setsockopt(SOL_UDP, UDP_SEGMENT)` / cmsg type: GSO segment size.
pub const UDP_SEGMENT: libc::c_int = 103;
/// `setsockopt(SOL_UDP, UDP_GRO)` / cmsg type: GRO segment size.
pub const UDP_GRO: libc::c_int = 104;
/// `SO_EE_ORIGIN_ZEROCOPY` (missing from libc).
const SO_EE_ORIGIN_ZEROCOPY: u8 = 5;
/// `SO_EE_CODE_ZEROCOPY_COPIED`: the kernel copied instead.
const SO_EE_CODE_ZEROCOPY_COPIED: u8 = 1;
/// Control-message space per message, in u64 words (enough for one int cmsg).
const CMSG_WORDS: usize = 4;

fn check(rc: libc::c_int) -> io::Result<libc::c_int> {
    if rc < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(rc)
    }
}

/// `sysconf(_SC_CLK_TCK)`: the unit of `/proc/stat`.
pub fn clock_ticks() -> f64 {
    // SAFETY: sysconf has no memory effects.
    let t = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    if t > 0 {
        t as f64
    } else {
        100.0
    }
}

/// User and system CPU time of the calling thread.
pub fn thread_rusage() -> (Duration, Duration) {
    // SAFETY: an all-zero rusage is a valid value of the plain-data struct.
    let mut ru: libc::rusage = unsafe { zeroed() };
    // SAFETY: ru is a valid, writable rusage for the call.
    let rc = unsafe { libc::getrusage(libc::RUSAGE_THREAD, &mut ru) };
    if rc != 0 {
        return (Duration::ZERO, Duration::ZERO);
    }
    let d = |t: libc::timeval| {
        Duration::from_secs(t.tv_sec.max(0) as u64) + Duration::from_micros(t.tv_usec.max(0) as u64)
    };
    (d(ru.ru_utime), d(ru.ru_stime))
}

/// Pins the calling thread to `cpu`.
pub fn pin_thread(cpu: usize) -> io::Result<()> {
    if cpu >= libc::CPU_SETSIZE as usize {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("CPU {cpu} is beyond CPU_SETSIZE"),
        ));
    }
    // SAFETY: an all-zero cpu_set_t is the empty set.
    let mut set: libc::cpu_set_t = unsafe { zeroed() };
    // SAFETY: cpu < CPU_SETSIZE, checked above, so CPU_SET stays inside `set`.
    unsafe { libc::CPU_SET(cpu, &mut set) };
    // SAFETY: `set` is a valid cpu_set_t of the size passed; 0 is this thread.
    check(unsafe { libc::sched_setaffinity(0, size_of::<libc::cpu_set_t>(), &set) })?;
    Ok(())
}

/// Sets an integer socket option.
pub fn set_int(
    fd: BorrowedFd<'_>,
    level: libc::c_int,
    opt: libc::c_int,
    v: libc::c_int,
) -> io::Result<()> {
    // SAFETY: the option value is a valid c_int of the length passed.
    check(unsafe {
        libc::setsockopt(
            fd.as_raw_fd(),
            level,
            opt,
            (&v as *const libc::c_int).cast(),
            size_of::<libc::c_int>() as libc::socklen_t,
        )
    })?;
    Ok(())
}

/// Reads an integer socket option.
pub fn get_int(
    fd: BorrowedFd<'_>,
    level: libc::c_int,
    opt: libc::c_int,
) -> io::Result<libc::c_int> {
    let mut v: libc::c_int = 0;
    let mut len = size_of::<libc::c_int>() as libc::socklen_t;
    // SAFETY: v and len are valid and writable; the kernel writes at most len bytes.
    check(unsafe {
        libc::getsockopt(
            fd.as_raw_fd(),
            level,
            opt,
            (&mut v as *mut libc::c_int).cast(),
            &mut len,
        )
    })?;
    Ok(v)
}

/// Total retransmitted segments of a TCP socket (`tcpi_total_retrans`).
pub fn tcp_retransmits(fd: BorrowedFd<'_>) -> Option<u64> {
    // SAFETY: an all-zero tcp_info is a valid value of the plain-data struct.
    let mut ti: libc::tcp_info = unsafe { zeroed() };
    let mut len = size_of::<libc::tcp_info>() as libc::socklen_t;
    // SAFETY: ti and len are valid and writable; the kernel writes at most len bytes.
    let rc = unsafe {
        libc::getsockopt(
            fd.as_raw_fd(),
            libc::IPPROTO_TCP,
            libc::TCP_INFO,
            (&mut ti as *mut libc::tcp_info).cast(),
            &mut len,
        )
    };
    (rc == 0).then_some(u64::from(ti.tcpi_total_retrans))
}

/// Reusable headers for `sendmmsg(2)`: one datagram (or one GSO train) per
/// header, all pointing into the caller's buffer for the call only.
#[derive(Debug)]
pub struct MmsgTx {
    hdrs: Vec<libc::mmsghdr>,
    iovs: Vec<libc::iovec>,
    cmsgs: Vec<[u64; CMSG_WORDS]>,
}

impl MmsgTx {
    /// Room for `max` messages per call.
    pub fn new(max: usize) -> MmsgTx {
        MmsgTx {
            // SAFETY: all-zero mmsghdr/iovec are valid plain-data values (null pointers, zero lengths).
            hdrs: vec![unsafe { zeroed() }; max],
            // SAFETY: as above.
            iovs: vec![unsafe { zeroed() }; max],
            cmsgs: vec![[0; CMSG_WORDS]; max],
        }
    }

    /// Sends `buf` cut into `chunk`-byte messages (the last may be shorter),
    /// each as one datagram or, with `gso`, as one train of `gso`-byte
    /// segments, in one `sendmmsg` call on a connected socket. Returns how
    /// many messages the kernel took; blocks like `send`.
    pub fn send(
        &mut self,
        fd: BorrowedFd<'_>,
        buf: &[u8],
        chunk: usize,
        gso: Option<u16>,
    ) -> io::Result<usize> {
        let mut n = 0;
        let iov_base = self.iovs.as_mut_ptr();
        for (i, c) in buf.chunks(chunk.max(1)).take(self.hdrs.len()).enumerate() {
            n = i + 1;
            self.iovs[i] = libc::iovec {
                iov_base: c.as_ptr() as *mut libc::c_void,
                iov_len: c.len(),
            };
            // SAFETY: all-zero msghdr is valid; fields are filled below.
            let mut h: libc::msghdr = unsafe { zeroed() };
            // SAFETY: i < hdrs.len() == iovs.len(); one base pointer, offset per
            // header, so no reference into iovs is held across iterations.
            h.msg_iov = unsafe { iov_base.add(i) };
            h.msg_iovlen = 1;
            if let Some(seg) = gso {
                let space = std::mem::size_of_val(&self.cmsgs[i]);
                h.msg_control = self.cmsgs[i].as_mut_ptr().cast();
                // SAFETY: CMSG_SPACE is a pure size computation.
                let need = unsafe { libc::CMSG_SPACE(size_of::<u16>() as u32) } as usize;
                debug_assert!(need <= space);
                h.msg_controllen = need;
                // SAFETY: msg_control points at `need` writable, u64-aligned bytes, so the
                // first header and its u16 payload are inside the buffer.
                unsafe {
                    let cm = libc::CMSG_FIRSTHDR(&h);
                    (*cm).cmsg_level = libc::SOL_UDP;
                    (*cm).cmsg_type = UDP_SEGMENT;
                    (*cm).cmsg_len = libc::CMSG_LEN(size_of::<u16>() as u32) as usize;
                    std::ptr::write_unaligned(libc::CMSG_DATA(cm).cast::<u16>(), seg);
                }
            }
            self.hdrs[i] = libc::mmsghdr {
                msg_hdr: h,
                msg_len: 0,
            };
        }
        // SAFETY: hdrs[..n] point at iovecs and control buffers owned by self and at
        // the caller's buffer, all alive and unaliased for the duration of the call.
        let rc =
            unsafe { libc::sendmmsg(fd.as_raw_fd(), self.hdrs.as_mut_ptr(), n as libc::c_uint, 0) };
        check(rc).map(|r| r as usize)
    }
}

/// A reusable iovec array for scatter-gather `sendmsg(2)`.
#[derive(Debug)]
pub struct IovTx {
    iovs: Vec<libc::iovec>,
}

impl IovTx {
    /// Room for `max` pieces.
    pub fn new(max: usize) -> IovTx {
        IovTx {
            // SAFETY: an all-zero iovec is a valid plain-data value.
            iovs: vec![unsafe { zeroed() }; max],
        }
    }

    /// One `sendmsg` of `pieces` in order, less the first `skip` bytes (what
    /// a partial TCP send already took), on a connected socket.
    pub fn send(
        &mut self,
        fd: BorrowedFd<'_>,
        pieces: &[Vec<u8>],
        mut skip: usize,
    ) -> io::Result<usize> {
        let mut n = 0;
        for p in pieces.iter().take(self.iovs.len()) {
            if skip >= p.len() {
                skip -= p.len();
                continue;
            }
            self.iovs[n] = libc::iovec {
                iov_base: p[skip..].as_ptr() as *mut libc::c_void,
                iov_len: p.len() - skip,
            };
            skip = 0;
            n += 1;
        }
        // SAFETY: all-zero msghdr is valid; only the iovec fields are set.
        let mut h: libc::msghdr = unsafe { zeroed() };
        h.msg_iov = self.iovs.as_mut_ptr();
        h.msg_iovlen = n;
        // SAFETY: iovs[..n] point into the caller's pieces, alive for the call.
        let rc = unsafe { libc::sendmsg(fd.as_raw_fd(), &h, libc::MSG_NOSIGNAL) };
        if rc < 0 {
            Err(io::Error::last_os_error())
        } else {
            Ok(rc as usize)
        }
    }
}

/// Reusable buffers and headers for `recvmmsg(2)`, with room for a UDP GRO
/// control message per slot.
#[derive(Debug)]
pub struct MmsgRx {
    hdrs: Vec<libc::mmsghdr>,
    iovs: Vec<libc::iovec>,
    cmsgs: Vec<[u64; CMSG_WORDS]>,
    bufs: Vec<u8>,
    slot: usize,
}

impl MmsgRx {
    /// `batch` slots of `slot` bytes each.
    pub fn new(batch: usize, slot: usize) -> MmsgRx {
        MmsgRx {
            // SAFETY: all-zero mmsghdr/iovec are valid plain-data values.
            hdrs: vec![unsafe { zeroed() }; batch],
            // SAFETY: as above.
            iovs: vec![unsafe { zeroed() }; batch],
            cmsgs: vec![[0; CMSG_WORDS]; batch],
            bufs: vec![0; batch * slot],
            slot,
        }
    }

    /// Waits for at least one datagram (the socket's receive timeout
    /// applies) and takes as many as are queued, up to the batch. Returns
    /// how many slots hold a datagram.
    pub fn recv(&mut self, fd: BorrowedFd<'_>) -> io::Result<usize> {
        let n = self.hdrs.len();
        let space = std::mem::size_of_val(&self.cmsgs[0]);
        let iov_base = self.iovs.as_mut_ptr();
        for i in 0..n {
            self.iovs[i] = libc::iovec {
                iov_base: self.bufs[i * self.slot..].as_mut_ptr().cast(),
                iov_len: self.slot,
            };
            // SAFETY: all-zero msghdr is valid; fields are filled below.
            let mut h: libc::msghdr = unsafe { zeroed() };
            // SAFETY: i < n == iovs.len(); offsets from one base pointer.
            h.msg_iov = unsafe { iov_base.add(i) };
            h.msg_iovlen = 1;
            h.msg_control = self.cmsgs[i].as_mut_ptr().cast();
            h.msg_controllen = space;
            self.hdrs[i] = libc::mmsghdr {
                msg_hdr: h,
                msg_len: 0,
            };
        }
        // SAFETY: every header points at a slot of self.bufs and a control buffer of
        // self, each of the length given, alive and unaliased for the call.
        let rc = unsafe {
            libc::recvmmsg(
                fd.as_raw_fd(),
                self.hdrs.as_mut_ptr(),
                n as libc::c_uint,
                libc::MSG_WAITFORONE,
                std::ptr::null_mut(),
            )
        };
        check(rc).map(|r| r as usize)
    }

    /// Datagram `i` of the last `recv`, and its GRO segment size if the
    /// kernel merged several.
    pub fn get(&self, i: usize) -> (&[u8], Option<usize>) {
        let h = &self.hdrs[i];
        let len = (h.msg_len as usize).min(self.slot);
        let data = &self.bufs[i * self.slot..i * self.slot + len];
        let mut gro = None;
        // SAFETY: the kernel filled msg_control/msg_controllen within the slot's
        // control buffer; CMSG_FIRSTHDR/NXTHDR stay inside msg_controllen.
        unsafe {
            let mut cm = libc::CMSG_FIRSTHDR(&h.msg_hdr);
            while !cm.is_null() {
                if (*cm).cmsg_level == libc::SOL_UDP && (*cm).cmsg_type == UDP_GRO {
                    let v = std::ptr::read_unaligned(libc::CMSG_DATA(cm).cast::<libc::c_int>());
                    gro = usize::try_from(v).ok();
                }
                cm = libc::CMSG_NXTHDR(&h.msg_hdr, cm);
            }
        }
        (data, gro)
    }
}

/// One `MSG_ZEROCOPY` completion notification: sends `lo..=hi` are done, and
/// whether the kernel copied them after all.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ZcDone {
    /// First send id.
    pub lo: u32,
    /// Last send id.
    pub hi: u32,
    /// The kernel copied the data (e.g. the receiver is local).
    pub copied: bool,
}

/// Reads one notification from the socket's error queue without blocking.
pub fn zerocopy_reap(fd: BorrowedFd<'_>) -> io::Result<Option<ZcDone>> {
    let mut control = [0u64; 16];
    // SAFETY: all-zero msghdr is valid; no data buffers, only control.
    let mut h: libc::msghdr = unsafe { zeroed() };
    h.msg_control = control.as_mut_ptr().cast();
    h.msg_controllen = std::mem::size_of_val(&control);
    // SAFETY: h points at `control`, writable for msg_controllen bytes.
    let rc = unsafe {
        libc::recvmsg(
            fd.as_raw_fd(),
            &mut h,
            libc::MSG_ERRQUEUE | libc::MSG_DONTWAIT,
        )
    };
    if rc < 0 {
        let e = io::Error::last_os_error();
        return match e.kind() {
            io::ErrorKind::WouldBlock => Ok(None),
            _ => Err(e),
        };
    }
    // SAFETY: the kernel filled the control buffer within msg_controllen.
    unsafe {
        let mut cm = libc::CMSG_FIRSTHDR(&h);
        while !cm.is_null() {
            let level_ok = ((*cm).cmsg_level == libc::SOL_IP
                && (*cm).cmsg_type == libc::IP_RECVERR)
                || ((*cm).cmsg_level == libc::SOL_IPV6 && (*cm).cmsg_type == libc::IPV6_RECVERR);
            if level_ok {
                let ee =
                    std::ptr::read_unaligned(libc::CMSG_DATA(cm).cast::<libc::sock_extended_err>());
                if ee.ee_errno == 0 && ee.ee_origin == SO_EE_ORIGIN_ZEROCOPY {
                    return Ok(Some(ZcDone {
                        lo: ee.ee_info,
                        hi: ee.ee_data,
                        copied: ee.ee_code & SO_EE_CODE_ZEROCOPY_COPIED != 0,
                    }));
                }
            }
            cm = libc::CMSG_NXTHDR(&h, cm);
        }
    }
    Ok(None)
}

/// Waits up to `timeout` for the socket's error queue to have something.
pub fn wait_errqueue(fd: BorrowedFd<'_>, timeout: Duration) -> io::Result<bool> {
    let mut p = libc::pollfd {
        fd: fd.as_raw_fd(),
        events: 0, // POLLERR is always reported
        revents: 0,
    };
    let ms = timeout.as_millis().min(i32::MAX as u128) as libc::c_int;
    // SAFETY: p is one valid pollfd.
    let rc = check(unsafe { libc::poll(&mut p, 1, ms) })?;
    Ok(rc > 0 && p.revents & libc::POLLERR != 0)
}

/// The inode of the calling thread's network namespace (what
/// `/proc/self/ns/net` names), to tell namespaces apart.
pub fn netns_inode() -> io::Result<u64> {
    use std::os::unix::fs::MetadataExt;
    // Of the thread, not the process: setns moves one thread.
    Ok(std::fs::metadata("/proc/thread-self/ns/net")?.ino())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::UdpSocket;
    use std::os::fd::AsFd;

    #[test]
    fn sendmmsg_and_recvmmsg_carry_every_datagram() {
        let rx = UdpSocket::bind("127.0.0.1:0").unwrap();
        let tx = UdpSocket::bind("127.0.0.1:0").unwrap();
        tx.connect(rx.local_addr().unwrap()).unwrap();
        let a = [1u8; 100];
        let b = [2u8; 50];
        let mut m = MmsgTx::new(4);
        let mut ab = a.to_vec();
        ab.extend_from_slice(&b);
        assert_eq!(m.send(tx.as_fd(), &ab, 100, None).unwrap(), 2);
        rx.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        let mut r = MmsgRx::new(4, 2048);
        let mut got = Vec::new();
        while got.len() < 2 {
            let n = r.recv(rx.as_fd()).unwrap();
            for i in 0..n {
                got.push(r.get(i).0.to_vec());
            }
        }
        assert_eq!(got, vec![a.to_vec(), b.to_vec()]);
    }

    #[test]
    fn a_gso_train_arrives_as_segments_or_merged_with_gro() {
        let rx = UdpSocket::bind("127.0.0.1:0").unwrap();
        rx.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        set_int(rx.as_fd(), libc::SOL_UDP, UDP_GRO, 1).unwrap();
        let tx = UdpSocket::bind("127.0.0.1:0").unwrap();
        tx.connect(rx.local_addr().unwrap()).unwrap();
        let train = [7u8; 1000];
        assert_eq!(
            MmsgTx::new(1)
                .send(tx.as_fd(), &train, 1000, Some(100))
                .unwrap(),
            1
        );
        let mut r = MmsgRx::new(16, 65536);
        let mut bytes = 0;
        let mut segs = 0;
        while bytes < 1000 {
            let n = r.recv(rx.as_fd()).unwrap();
            for i in 0..n {
                let (d, gro) = r.get(i);
                bytes += d.len();
                segs += gro.map_or(1, |g| d.len().div_ceil(g));
            }
        }
        assert_eq!((bytes, segs), (1000, 10));
    }

    #[test]
    fn threads_have_times() {
        let (u, s) = thread_rusage();
        assert!(u + s < Duration::from_secs(3600));
        assert!(clock_ticks() > 0.0);
        assert!(pin_thread(usize::MAX).is_err());
    }
}
