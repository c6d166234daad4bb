//! Pure maths on what the streams counted: rates, loss, reordering, and CPU
//! cost per message. The readers of `/proc` and of interface counters are in
//! their own small files ([`cpu`], [`iface`]); nothing here does I/O.

pub mod cpu;
pub mod iface;

use serde::{Deserialize, Serialize};

/// Tracks the sequence numbers one UDP receiver saw: how many arrived, how
/// many arrived after a later one (reordered), and the highest seen.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SeqTracker {
    /// Messages received.
    pub received: u64,
    /// Messages that arrived after one with a higher sequence number.
    pub reordered: u64,
    /// One past the highest sequence number seen (0 before any).
    pub next: u64,
}

impl SeqTracker {
    /// Counts one message.
    pub fn observe(&mut self, seq: u64) {
        self.received += 1;
        if seq < self.next {
            self.reordered += 1;
        } else {
            self.next = seq.saturating_add(1);
        }
    }

    /// Messages missing between the first and the highest seen: an estimate
    /// of loss for an interval, before the sender's count is known (reordered
    /// late arrivals make it exact again later).
    pub fn gaps(&self) -> u64 {
        self.next.saturating_sub(self.received)
    }
}

/// `count / seconds`, 0 when no time passed.
pub fn per_second(count: f64, seconds: f64) -> f64 {
    if seconds > 0.0 {
        count / seconds
    } else {
        0.0
    }
}

/// Fraction of sent messages that did not arrive: `1 - received/sent`, 0 when
/// nothing was sent or duplicates made `received` exceed `sent`.
pub fn loss(sent: u64, received: u64) -> f64 {
    if sent == 0 || received >= sent {
        0.0
    } else {
        1.0 - received as f64 / sent as f64
    }
}

/// "Without loss": at least 99.9 % of sent messages received, decided on
/// the integers (`1 - 999/1000` is not `0.001` in floating point).
pub fn lossless(sent: u64, received: u64) -> bool {
    u128::from(received) * 1000 >= u128::from(sent) * 999
}

/// CPU seconds of a side, from `getrusage` of its stream threads and from
/// the machine's `/proc/stat` over the run.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct CpuTime {
    /// User time of this end's stream threads.
    pub user_s: f64,
    /// System time of this end's stream threads (with tick-based accounting
    /// this includes softirq work done in their context).
    pub sys_s: f64,
    /// The machine's softirq time over the run, all CPUs.
    pub softirq_s: f64,
    /// The machine's busy time over the run, all CPUs (user, nice, system,
    /// irq, softirq; not idle, iowait or steal).
    pub busy_s: f64,
    /// Wall seconds the machine counters covered.
    pub wall_s: f64,
}

/// Cost per message and per byte, in cycles.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Cycles {
    /// Busy CPU seconds charged (both machines, or the one shared machine once).
    pub busy_s: f64,
    /// Clock rate used, Hz.
    pub hz: f64,
    /// Cycles per message received.
    pub per_msg: f64,
    /// Cycles per byte received.
    pub per_byte: f64,
}

/// Cycles per message: `busy seconds × clock / messages` (with two machines
/// of different clocks, `hz` is their busy-weighted mean), the netperf
/// service-demand method. Machine busy time is used rather than thread time
/// plus softirq time because with tick-based accounting the two overlap.
pub fn cycles(busy_s: f64, hz: f64, msgs: u64, bytes: u64) -> Cycles {
    let c = busy_s * hz;
    Cycles {
        busy_s,
        hz,
        per_msg: if msgs > 0 { c / msgs as f64 } else { 0.0 },
        per_byte: if bytes > 0 { c / bytes as f64 } else { 0.0 },
    }
}

/// Formats bits per second with an SI prefix: `12.3 Gbit/s`.
pub fn fmt_bits(bps: f64) -> String {
    let (v, u) = si(bps);
    format!("{v:.3} {u}bit/s")
}

/// Formats a count per second with an SI prefix: `1.23 M/s`.
pub fn fmt_rate(per_s: f64) -> String {
    let (v, u) = si(per_s);
    format!("{v:.3} {u}/s")
}

fn si(x: f64) -> (f64, &'static str) {
    for (scale, unit) in [(1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k")] {
        if x.abs() >= scale {
            return (x / scale, unit);
        }
    }
    (x, "")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn in_order_stream_has_no_reorder_and_no_gaps() {
        let mut t = SeqTracker::default();
        for s in 0..100 {
            t.observe(s);
        }
        assert_eq!(
            (t.received, t.reordered, t.next, t.gaps()),
            (100, 0, 100, 0)
        );
    }

    #[test]
    fn late_arrivals_count_as_reordered_and_close_gaps() {
        let mut t = SeqTracker::default();
        for s in [0, 1, 3, 4, 2, 7] {
            t.observe(s);
        }
        assert_eq!(t.received, 6);
        assert_eq!(t.reordered, 1); // 2 came after 4
        assert_eq!(t.next, 8);
        assert_eq!(t.gaps(), 2); // 5 and 6 missing
    }

    #[test]
    fn sequence_at_the_top_of_u64_does_not_overflow() {
        let mut t = SeqTracker::default();
        t.observe(u64::MAX);
        assert_eq!(t.next, u64::MAX);
    }

    #[test]
    fn loss_is_one_minus_received_over_sent() {
        assert_eq!(loss(0, 0), 0.0);
        assert_eq!(loss(1000, 1000), 0.0);
        assert_eq!(loss(1000, 1001), 0.0);
        assert!((loss(1000, 999) - 0.001).abs() < 1e-12);
        assert_eq!(loss(10, 0), 1.0);
        assert!(lossless(1000, 999));
        assert!(!lossless(1000, 998));
        assert!(lossless(0, 0));
        assert!(lossless(u64::MAX, u64::MAX));
    }

    #[test]
    fn cycles_divide_busy_time_by_messages() {
        let c = cycles(2.0, 2.5e9, 1_000_000, 1_472_000_000);
        assert_eq!(c.per_msg, 5000.0);
        assert!((c.per_byte - 5e9 / 1.472e9).abs() < 1e-9);
        assert_eq!(cycles(1.0, 1e9, 0, 0).per_msg, 0.0);
    }

    #[test]
    fn rates_and_units() {
        assert_eq!(per_second(10.0, 0.0), 0.0);
        assert_eq!(per_second(10.0, 2.0), 5.0);
        assert_eq!(fmt_bits(32.1e9), "32.100 Gbit/s");
        assert_eq!(fmt_rate(290_000.0), "290.000 k/s");
        assert_eq!(fmt_rate(12.0), "12.000 /s");
    }
}
