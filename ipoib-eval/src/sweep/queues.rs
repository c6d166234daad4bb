//! The per-queue columns: how a run's packets spread over the queues, as
//! the eBPF views saw them, and whether the queue policy took effect.

use serde::Serialize;

use super::{Point, Policy};
use crate::spec::Proto;

/// How packets of one run spread over the queues, as the eBPF views saw
/// them: the columns after the report's. Lists are space-separated, one
/// number per queue or size bucket; a side with no view (the peer's, on a
/// real interface) has empty columns.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct QueueColumns {
    /// Packets per TX queue.
    pub tx_queue_packets: String,
    /// Wire segments per TX queue (a GSO packet counts its segments).
    pub tx_queue_segments: String,
    /// Packets per RX queue.
    pub rx_queue_packets: String,
    /// Received packets no RX queue was recorded for.
    pub rx_unrecorded: Option<u64>,
    /// TX packets per log2 size bucket.
    pub tx_size_log2: String,
    /// TX packets per log2 bucket of GSO segment counts.
    pub tx_segs_log2: String,
    /// RX packets per log2 size bucket.
    pub rx_size_log2: String,
    /// TX queues that carried at least 1 % of the packets.
    pub tx_queues_used: Option<usize>,
    /// Whether the point's policy took effect, in words.
    pub policy_effect: String,
}

impl QueueColumns {
    /// The columns of a run of `p` from its TX and RX views (`cpus`: the
    /// CPUs an XPS map spreads over).
    pub fn of(
        p: &Point,
        tx: Option<&fabkit_ebpf::QueueCounts>,
        rx: Option<&fabkit_ebpf::QueueCounts>,
        cpus: usize,
    ) -> QueueColumns {
        let list = |v: &mut dyn Iterator<Item = u64>| {
            v.map(|x| x.to_string()).collect::<Vec<_>>().join(" ")
        };
        let mut c = QueueColumns::default();
        match tx {
            None => {
                c.policy_effect = "not seen (the peer sent: its queues are not watched)".into();
            }
            Some(tx) => {
                let total = tx.tx_total().packets;
                let used = tx
                    .tx
                    .iter()
                    .filter(|q| total > 0 && q.packets * 100 >= total)
                    .count();
                c.policy_effect = match p.policy {
                    Policy::Hash => "kernel flow hash".to_string(),
                    Policy::Xps => {
                        let mapped: Vec<usize> =
                            (0..cpus).map(|c| c % usize::from(p.queues)).collect();
                        let outside: u64 = tx
                            .tx
                            .iter()
                            .enumerate()
                            .filter(|(i, _)| !mapped.contains(i))
                            .map(|(_, q)| q.packets)
                            .sum();
                        if total == 0 {
                            "no packets seen".into()
                        } else if outside == 0 {
                            "took effect".into()
                        } else {
                            format!(
                                "NOT in effect: {:.1}% of packets on queues outside the XPS map",
                                outside as f64 * 100.0 / total as f64
                            )
                        }
                    }
                    Policy::Rr => rr_effect(&tx.tx.iter().map(|q| q.packets).collect::<Vec<_>>()),
                };
                c.tx_queue_packets = list(&mut tx.tx.iter().map(|q| q.packets));
                c.tx_queue_segments = list(&mut tx.tx.iter().map(|q| q.segments));
                c.tx_size_log2 = list(&mut tx.tx_size_log2.iter().copied());
                c.tx_segs_log2 = list(&mut tx.tx_segs_log2.iter().copied());
                c.tx_queues_used = Some(used);
            }
        }
        if let Some(rx) = rx {
            c.rx_queue_packets = list(&mut rx.rx.iter().map(|q| q.packets));
            c.rx_unrecorded = Some(rx.rx_unrecorded.packets);
            c.rx_size_log2 = list(&mut rx.rx_size_log2.iter().copied());
        }
        c
    }
}

/// The IP protocol number of a test's flows, for the eBPF flow rules.
pub(super) fn ip_proto(p: Proto) -> u8 {
    match p {
        Proto::Tcp => 6,
        Proto::Udp => 17,
    }
}

/// Whether round-robin dealt the packets out evenly: every queue within
/// 10 % (and 8 packets) of an equal share.
fn rr_effect(per_queue: &[u64]) -> String {
    let total: u64 = per_queue.iter().sum();
    if total == 0 {
        return "no packets seen".into();
    }
    let share = total as f64 / per_queue.len() as f64;
    let worst = per_queue
        .iter()
        .map(|&p| (p as f64 - share).abs())
        .fold(0.0, f64::max);
    if worst <= share * 0.1 + 8.0 {
        "took effect".into()
    } else {
        let pct = |p: u64| p as f64 * 100.0 / total as f64;
        format!(
            "NOT in effect: queue shares {:.1}% to {:.1}%, not {:.1}% each",
            pct(*per_queue.iter().min().unwrap_or(&0)),
            pct(*per_queue.iter().max().unwrap_or(&0)),
            100.0 / per_queue.len() as f64
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_robin_is_judged_by_the_counts() {
        assert_eq!(rr_effect(&[250, 251, 249, 250]), "took effect");
        assert_eq!(rr_effect(&[0, 0, 0, 0]), "no packets seen");
        let e = rr_effect(&[1000, 0, 0, 0]);
        assert!(
            e.starts_with("NOT in effect: queue shares 0.0% to 100.0%"),
            "{e}"
        );
        assert_eq!(rr_effect(&[7]), "took effect");
    }
}
