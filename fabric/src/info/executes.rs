//! Who carries out a one-sided operation at its target, per provider: the
//! fact the DHT's `auto` path reads (owner-executed messages where the
//! target's CPU would execute the operations anyway, one-sided RMA where
//! a NIC or the kernel does), and `fabkit info` prints.
//!
//! From the providers' sources and documentation (libfabric 1.17):
//! - `ofi_rxm` passes RMA through to its core provider but emulates every
//!   atomic with the target's CPU (`rxm_handle_atomic_req`, libfabric issue
//!   9253: "rxm uses cpu based atomics, while verbs is NIC based"); `ofi_rxd`
//!   runs everything in the target's progress.
//! - `tcp`, `sockets`, `udp`, `net`: the target's libfabric, in its progress.
//! - `shm`: reads and writes are copied by the initiator itself (CMA or
//!   xpmem) when the region is addressed virtually (`FI_MR_VIRT_ADDR`) and
//!   no RMA ordering is asked for (fabkit asks none: its writes ask for
//!   delivery completion), else in the target's progress; atomics always in
//!   the target's progress (`smr_do_atomic`).
//! - `verbs` (fi_verbs(7)): reads and writes in the NIC, or in the target's
//!   kernel for soft-RoCE (`rxe` devices), without the target process.
//! - `cxi` (fi_cxi(7)): reads, writes and atomics in the NIC.
//! - `efa` (fi_efa(7), 1.17): RDMA reads in the NIC where the device has
//!   them; writes and atomics are emulated by the target's CPU.
//! - `psm2`, `psm3`, `opx`: onload providers; the target's library, in its
//!   progress.

use fabkit_core::Executor;
use serde::{Deserialize, Serialize};

/// Who carries out a provider's reads and writes, and its atomics.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Executes {
    /// RMA reads and writes.
    pub rma: Executor,
    /// u64 atomics.
    pub atomics: Executor,
}

impl Executes {
    /// For a provider name as `fi_info` gives it (`verbs;ofi_rxm`, `cxi`)
    /// on `domain` (a device such as `rxe0` or `mlx5_0`; empty if unknown),
    /// whose regions are addressed virtually when `virt_addr`
    /// (`FI_MR_VIRT_ADDR`).
    pub fn of(provider: &str, domain: &str, virt_addr: bool) -> Executes {
        let layers: Vec<&str> = provider.split(';').collect();
        let core = layers.first().copied().unwrap_or("");
        let rxd = layers.contains(&"ofi_rxd");
        let rxm = layers.contains(&"ofi_rxm");
        let rma = if rxd {
            Executor::TargetCpu
        } else {
            match core {
                "verbs" if domain.starts_with("rxe") => Executor::Kernel,
                "verbs" | "cxi" => Executor::Nic,
                // Reads in the NIC, writes emulated: the slower of the two
                // decides for a table that does both.
                "efa" => Executor::TargetCpu,
                "shm" if virt_addr => Executor::Initiator,
                "shm" | "sm2" | "tcp" | "sockets" | "udp" | "net" | "psm2" | "psm3" | "opx" => {
                    Executor::TargetCpu
                }
                _ => Executor::Unknown,
            }
        };
        let atomics = if rxm || rxd {
            Executor::TargetCpu
        } else {
            match core {
                "cxi" => Executor::Nic,
                "verbs" => Executor::Unknown,
                "shm" | "sm2" | "tcp" | "sockets" | "udp" | "net" | "efa" | "psm2" | "psm3"
                | "opx" => Executor::TargetCpu,
                _ => Executor::Unknown,
            }
        };
        Executes { rma, atomics }
    }
}

impl super::Info {
    /// Who executes this entry's reads, writes and atomics at the target:
    /// [`Executes::of`] its provider, domain and `FI_MR_VIRT_ADDR`.
    pub fn executes(&self) -> Executes {
        let virt = self.mr_mode() & crate::fabric_sys::FI_MR_VIRT_ADDR != 0;
        Executes::of(&self.provider(), &self.domain_name(), virt)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn recorded_facts_of_the_providers_here_and_of_verbs_cxi_and_efa() {
        let e = |p, d, v| Executes::of(p, d, v);
        let cpu = Executor::TargetCpu;
        assert_eq!(
            e("tcp;ofi_rxm", "lo", false),
            Executes {
                rma: cpu,
                atomics: cpu
            }
        );
        assert_eq!(
            e("sockets", "lo", false),
            Executes {
                rma: cpu,
                atomics: cpu
            }
        );
        assert_eq!(
            e("udp;ofi_rxd", "lo", false),
            Executes {
                rma: cpu,
                atomics: cpu
            }
        );
        assert_eq!(e("shm", "shm", true).rma, Executor::Initiator);
        assert_eq!(e("shm", "shm", true).atomics, cpu);
        // verbs: RMA in the NIC (soft-RoCE: the kernel); rxm's atomics on
        // the target's CPU.
        assert_eq!(e("verbs;ofi_rxm", "mlx5_0", false).rma, Executor::Nic);
        assert_eq!(e("verbs;ofi_rxm", "rxe0", false).rma, Executor::Kernel);
        assert_eq!(e("verbs;ofi_rxm", "mlx5_0", false).atomics, cpu);
        assert_eq!(
            e("cxi", "cxi0", false),
            Executes {
                rma: Executor::Nic,
                atomics: Executor::Nic
            }
        );
        assert_eq!(
            e("efa", "rdmap0s6-rdm", false),
            Executes {
                rma: cpu,
                atomics: cpu
            }
        );
        assert_eq!(e("psm3", "ib0", false).rma, cpu);
        assert_eq!(e("something-new", "x", false).rma, Executor::Unknown);
    }
}
