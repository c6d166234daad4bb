//! What one provider configuration offers, in plain words: the summary
//! `fabkit info` prints and reports carry.

use fabric_sys as ffi;
use serde::Serialize;

use super::{Info, Ordering, Progress};

impl Info {
    /// A serialisable summary for reports.
    pub fn summary(&self) -> ProviderInfo {
        ProviderInfo {
            provider: self.provider(),
            provider_version: self.provider_version(),
            fabric: self.fabric_name(),
            domain: self.domain_name(),
            ep_type: self.ep_type().into(),
            msg: self.has_msg(),
            rma: self.has_rma(),
            atomics: self.has_atomics(),
            progress: self.data_progress(),
            mr_mode: mr_mode_names(self.mr_mode()),
            mode: mode_names(self.mode()),
            max_msg_size: self.max_msg_size(),
            inject_size: self.inject_size(),
            tx_size: self.tx_size(),
            rx_size: self.rx_size(),
            ordering: self.ordering(),
        }
    }
}

/// What one provider configuration offers, in plain words.
#[derive(Clone, Debug, Serialize, PartialEq, Eq)]
pub struct ProviderInfo {
    /// Provider name.
    pub provider: String,
    /// Provider version.
    pub provider_version: String,
    /// Fabric name.
    pub fabric: String,
    /// Domain name.
    pub domain: String,
    /// Endpoint type.
    pub ep_type: String,
    /// Two-sided messages.
    pub msg: bool,
    /// One-sided RMA.
    pub rma: bool,
    /// Atomics.
    pub atomics: bool,
    /// Data progress model.
    pub progress: Progress,
    /// Required memory-registration modes.
    pub mr_mode: Vec<String>,
    /// Required mode bits.
    pub mode: Vec<String>,
    /// Largest transfer.
    pub max_msg_size: usize,
    /// Largest inject.
    pub inject_size: usize,
    /// Transmit queue depth.
    pub tx_size: usize,
    /// Receive queue depth.
    pub rx_size: usize,
    /// The ordering mechanism these attributes grant ([`Info::ordering`]).
    pub ordering: Ordering,
}

/// Names of the set `mr_mode` bits.
pub fn mr_mode_names(bits: u32) -> Vec<String> {
    const NAMES: &[(u32, &str)] = &[
        (ffi::FI_MR_LOCAL, "FI_MR_LOCAL"),
        (ffi::FI_MR_RAW, "FI_MR_RAW"),
        (ffi::FI_MR_VIRT_ADDR, "FI_MR_VIRT_ADDR"),
        (ffi::FI_MR_ALLOCATED, "FI_MR_ALLOCATED"),
        (ffi::FI_MR_PROV_KEY, "FI_MR_PROV_KEY"),
        (ffi::FI_MR_MMU_NOTIFY, "FI_MR_MMU_NOTIFY"),
        (ffi::FI_MR_RMA_EVENT, "FI_MR_RMA_EVENT"),
        (ffi::FI_MR_ENDPOINT, "FI_MR_ENDPOINT"),
        (ffi::FI_MR_HMEM, "FI_MR_HMEM"),
        (ffi::FI_MR_COLLECTIVE, "FI_MR_COLLECTIVE"),
    ];
    NAMES
        .iter()
        .filter(|(b, _)| bits & b != 0)
        .map(|(_, n)| (*n).to_string())
        .collect()
}

fn mode_names(bits: u64) -> Vec<String> {
    const NAMES: &[(u64, &str)] = &[
        (ffi::FI_CONTEXT, "FI_CONTEXT"),
        (ffi::FI_CONTEXT2, "FI_CONTEXT2"),
        (ffi::FI_MSG_PREFIX, "FI_MSG_PREFIX"),
        (ffi::FI_RX_CQ_DATA, "FI_RX_CQ_DATA"),
        (ffi::FI_LOCAL_MR, "FI_LOCAL_MR"),
        (ffi::FI_ASYNC_IOV, "FI_ASYNC_IOV"),
    ];
    NAMES
        .iter()
        .filter(|(b, _)| bits & b != 0)
        .map(|(_, n)| (*n).to_string())
        .collect()
}
