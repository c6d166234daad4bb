//! A test as text: the per-stream and total lines, latency, wire rates,
//! CPU and cost, and the notes to read them with.

use super::Report;
use crate::spec::Proto;
use crate::stats;

impl Report {
    /// The human-readable summary (intervals are printed live).
    pub fn text(&self) -> String {
        let mut o = String::new();
        let w = |o: &mut String, s: String| {
            o.push_str(&s);
            o.push('\n');
        };
        w(
            &mut o,
            "- - - - - - - - - - - - - - - - - - - - - - - - -".into(),
        );
        w(
            &mut o,
            format!(
                "{:>5} {:<15} {:>8} {:>11} {:>11} {:>12} {:>8} {:>7} {:>6}",
                "[ ID]",
                "direction",
                "seconds",
                "MBytes",
                "Gbit/s",
                "msgs/s",
                "loss%",
                "reord",
                "retr"
            ),
        );
        let row = |id: String,
                   dir: &str,
                   secs: f64,
                   bytes: u64,
                   gbit: f64,
                   mps: f64,
                   loss: f64,
                   reord: u64,
                   retr: Option<u64>| {
            format!(
                "{:>5} {:<15} {:>8.2} {:>11.1} {:>11.3} {:>12.0} {:>8.3} {:>7} {:>6}",
                id,
                dir,
                secs,
                bytes as f64 / 1e6,
                gbit,
                mps,
                loss * 100.0,
                reord,
                retr.map_or("-".into(), |r| r.to_string())
            )
        };
        for s in &self.streams {
            w(
                &mut o,
                row(
                    format!("[{:>3}]", s.id),
                    &s.direction,
                    s.seconds,
                    s.received_bytes,
                    s.gbit_s,
                    s.msgs_per_s,
                    s.loss,
                    s.reordered,
                    s.retransmits,
                ),
            );
        }
        for t in &self.totals {
            w(
                &mut o,
                row(
                    "[SUM]".into(),
                    &t.direction,
                    t.seconds,
                    t.received_bytes,
                    t.gbit_s,
                    t.msgs_per_s,
                    t.loss,
                    t.reordered,
                    t.retransmits,
                ),
            );
            w(
                &mut o,
                format!(
                    "      {}: sent {} messages, received {} ({}){}",
                    t.direction,
                    t.sent_msgs,
                    t.received_msgs,
                    if t.lossless {
                        "without loss"
                    } else {
                        "LOSSY: under 99.9 % received"
                    },
                    if self.spec.proto == Proto::Tcp {
                        " [TCP messages = bytes / -l]"
                    } else {
                        ""
                    }
                ),
            );
        }
        if let Some(l) = &self.latency {
            w(
                &mut o,
                format!(
                    "latency (us, {} transactions): min {:.1} p50 {:.1} p90 {:.1} p99 {:.1} p99.9 {:.1} max {:.1}",
                    l.count, l.min_us, l.p50_us, l.p90_us, l.p99_us, l.p999_us, l.max_us
                ),
            );
        }
        for x in &self.wire {
            w(
                &mut o,
                format!(
                    "wire  {:<6} {:<10} tx {:>12} rx {:>12}",
                    x.side,
                    x.iface,
                    stats::fmt_rate(x.tx_pps),
                    stats::fmt_rate(x.rx_pps)
                ),
            );
        }
        w(
            &mut o,
            format!(
                "      messages per received wire packet: {:.2}",
                self.msgs_per_wire_packet
            ),
        );
        let c = &self.client.cpu;
        let s = &self.server.cpu;
        w(
            &mut o,
            format!(
                "cpu   client threads user {:.2} s sys {:.2} s | server threads user {:.2} s sys {:.2} s | softirq {:.2} s | busy {:.2} s",
                c.user_s,
                c.sys_s,
                s.user_s,
                s.sys_s,
                if self.same_host { c.softirq_s } else { c.softirq_s + s.softirq_s },
                self.cycles.busy_s
            ),
        );
        w(
            &mut o,
            format!(
                "cost  {:.0} cycles/message, {:.3} cycles/byte ({})",
                self.cycles.per_msg,
                self.cycles.per_byte,
                if self.same_host {
                    "one machine, busy time counted once"
                } else {
                    "both machines"
                }
            ),
        );
        for x in &self.warnings {
            w(&mut o, format!("note: {x}"));
        }
        o
    }
}
