//! How a provider makes a write visible at its target before a later
//! operation ([`Ordering`]): what a configuration grants, and finding one
//! that grants the mechanism wanted.

use fabric_sys as ffi;
use serde::Serialize;

use super::{find, getinfo, Hints, Info};
use crate::error::{Error, Result};

/// How a provider makes a write visible at its target before a later
/// operation to that target: the mechanism behind
/// [`Completion::Delivery`](crate::Completion). fi_cq(3), "Target completion
/// semantics": an RMA write that completes as transmit-complete says nothing
/// about when its bytes are visible; the initiator must "take additional
/// steps". The variants are those steps, in the order fabkit prefers them
/// ([`Ordering::PREFERENCE`]); a rank picks one at setup from what the
/// provider grants in `fi_getinfo` and asks for it in the hints its endpoint
/// is opened with.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Ordering {
    /// `FI_DELIVERY_COMPLETE` in `tx_attr->op_flags` is granted: a Delivery
    /// write is posted with `fi_writemsg(FI_DELIVERY_COMPLETE)`, and its
    /// completion means "processed by the destination endpoint", the result
    /// available (fi_cq(3)). Exact, and costs one acknowledgement.
    DeliveryComplete,
    /// The `FI_FENCE` capability is granted: after a batch with a Delivery
    /// write to a peer, the next operation posted to that peer, in a later
    /// batch (the release), carries `FI_FENCE`. The fenced operation "and
    /// any operation posted after \[it\] will be deferred until all previous
    /// operations targeting the same peer endpoint have completed.
    /// Operations posted after the fencing will see and/or replace the
    /// results of any operations initiated prior to the fenced operation"
    /// (fi_rma(3), fi_atomic(3)). The write's own batch returns at transmit
    /// completion; the ordering is paid by the next operation to that peer.
    Fence,
    /// The endpoint orders an RMA read after an RMA write
    /// (`FI_ORDER_RMA_RAW` in `msg_order`) and keeps data order for
    /// transfers up to `max_order_raw_size` bytes: a Delivery write is
    /// followed, in the same batch, by a read of the same bytes, and the
    /// batch returns when that read has. "Where the target memory locations
    /// overlap, the RMA or atomic read operation will see the results of the
    /// previous RMA or atomic write" (fi_endpoint(3), data ordering), and
    /// ordering is per byte, so the read covers every byte written; writes
    /// are split at `max_order_raw_size`. Costs a round trip and the bytes
    /// again.
    ReadBack,
    /// None of the above is granted: a Delivery write is posted as a
    /// transmit-complete one, and nothing orders it before a later
    /// operation. What depends on such ordering is not safe on this
    /// provider.
    None,
}

impl Ordering {
    /// The mechanisms fabkit uses, best first.
    pub const PREFERENCE: [Ordering; 3] = [
        Ordering::DeliveryComplete,
        Ordering::Fence,
        Ordering::ReadBack,
    ];

    /// Short name, as `fabkit info` prints it.
    pub fn label(self) -> &'static str {
        match self {
            Ordering::DeliveryComplete => "delivery",
            Ordering::Fence => "fence",
            Ordering::ReadBack => "raw",
            Ordering::None => "none",
        }
    }

    /// The libfabric attribute behind it.
    pub fn mechanism(self) -> &'static str {
        match self {
            Ordering::DeliveryComplete => "FI_DELIVERY_COMPLETE",
            Ordering::Fence => "FI_FENCE",
            Ordering::ReadBack => "FI_ORDER_RMA_RAW with max_order_raw_size",
            Ordering::None => "nothing",
        }
    }
}

impl std::fmt::Display for Ordering {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.label())
    }
}

/// Finds a configuration as [`find`] does, together with the ordering
/// mechanism it offers: with `want` set, that one (an error names it if the
/// provider does not offer it); otherwise the first of
/// [`Ordering::PREFERENCE`] the provider offers, else [`Ordering::None`].
/// The returned info was asked for the mechanism, so an endpoint opened
/// from it is set up for it.
pub fn find_ordered(
    hints: &Hints,
    prefer_loopback: bool,
    want: Option<Ordering>,
) -> Result<(Info, Ordering)> {
    let candidates: &[Ordering] = match &want {
        Some(m) => std::slice::from_ref(m),
        None => &Ordering::PREFERENCE,
    };
    for &m in candidates {
        // An error here only says the mechanism is not offered; the plain
        // query below gives the real error if the provider is unusable.
        if let Ok(info) = find(&hints.with_ordering(m), prefer_loopback) {
            return Ok((info, m));
        }
    }
    let info = find(&hints.with_ordering(Ordering::None), prefer_loopback)?;
    match want {
        Some(m) if m != Ordering::None => Err(Error::Unsupported {
            provider: info.provider(),
            what: format!("ordering by {} ({})", m.label(), m.mechanism()),
            hint: format!(
                "leave the ordering unset to use what the provider offers ({}; see `fabkit info`)",
                ordering_offered(hints).map_or("-", Ordering::label)
            ),
        }),
        _ => Ok((info, Ordering::None)),
    }
}

/// The ordering mechanism `hints.provider` offers: the first of
/// [`orderings_offered`], else [`Ordering::None`]. What `fabkit info`
/// reports; a rank picks the same way ([`find_ordered`]).
pub fn ordering_offered(hints: &Hints) -> Result<Ordering> {
    Ok(orderings_offered(hints)?
        .first()
        .copied()
        .unwrap_or(Ordering::None))
}

/// Every mechanism of [`Ordering::PREFERENCE`] that `fi_getinfo` grants
/// `hints.provider` for RDM endpoints with `hints.caps`, best first.
pub fn orderings_offered(hints: &Hints) -> Result<Vec<Ordering>> {
    let mut offered = Vec::new();
    for m in Ordering::PREFERENCE {
        let found = getinfo(Some(&hints.with_ordering(m)))?;
        let matches = |i: &Info| {
            hints.provider.as_ref().is_none_or(|p| i.provider() == *p)
                && i.ep_type() == "FI_EP_RDM"
                && i.offers(m)
        };
        if found.iter().any(matches) {
            offered.push(m);
        }
    }
    Ok(offered)
}

impl Info {
    /// Whether this configuration's attributes grant `ordering`
    /// ([`Ordering::None`] always holds).
    pub fn offers(&self, ordering: Ordering) -> bool {
        match ordering {
            Ordering::DeliveryComplete => {
                self.tx_op_flags() & ffi::FI_DELIVERY_COMPLETE as u64 != 0
            }
            Ordering::Fence => self.caps_bits() & ffi::FI_FENCE as u64 != 0,
            Ordering::ReadBack => {
                let raw = ffi::FI_ORDER_RMA_RAW | u64::from(ffi::FI_ORDER_RAW);
                self.tx_msg_order() & raw != 0 && self.max_order_raw_size() > 0
            }
            Ordering::None => true,
        }
    }

    /// The first of [`Ordering::PREFERENCE`] this configuration's attributes
    /// grant. An entry returned for hints that did not ask for an ordering
    /// may understate what the provider offers (op_flags come back as they
    /// were asked for); [`ordering_offered`] asks.
    pub fn ordering(&self) -> Ordering {
        Ordering::PREFERENCE
            .into_iter()
            .find(|&m| self.offers(m))
            .unwrap_or(Ordering::None)
    }
}
