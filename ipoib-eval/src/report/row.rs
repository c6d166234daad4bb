//! A test as CSV: one row per direction.

use super::Report;

impl Report {
    /// The CSV header; one row per direction follows from [`Report::csv_rows`].
    pub const CSV_HEADER: &'static str =
        "commit,proto,len,streams,direction,send,recv,rate_bps,window,nodelay,rr,\
seconds,sent_msgs,received_msgs,received_bytes,gbit_s,msgs_per_s,loss,reordered,retransmits,\
client_iface,client_mtu,client_txq,client_rxq,client_qdisc,server_iface,server_mtu,\
client_tx_pps,client_rx_pps,server_tx_pps,server_rx_pps,msgs_per_wire_packet,\
busy_s,clock_hz,cycles_per_msg,cycles_per_byte,same_host,p50_us,p99_us,kernel";

    /// CSV rows, one per direction, in the columns of [`Report::CSV_HEADER`].
    pub fn csv_rows(&self) -> Vec<String> {
        let sp = &self.spec;
        let opt = |v: Option<u32>| v.map_or(String::new(), |x| x.to_string());
        let wire = |side: &str, tx: bool| {
            self.wire.iter().find(|x| x.side == side).map_or(0.0, |x| {
                if tx {
                    x.tx_pps
                } else {
                    x.rx_pps
                }
            })
        };
        self.totals
            .iter()
            .map(|t| {
                [
                    self.commit.clone(),
                    format!("{:?}", sp.proto).to_lowercase(),
                    sp.len.to_string(),
                    sp.streams.to_string(),
                    t.direction.clone(),
                    sp.send.to_string(),
                    sp.recv.to_string(),
                    format!("{}", sp.rate_bps),
                    sp.window.map_or(String::new(), |w| w.to_string()),
                    sp.nodelay.to_string(),
                    sp.rr.to_string(),
                    format!("{:.4}", t.seconds),
                    t.sent_msgs.to_string(),
                    t.received_msgs.to_string(),
                    t.received_bytes.to_string(),
                    format!("{:.4}", t.gbit_s),
                    format!("{:.1}", t.msgs_per_s),
                    format!("{:.6}", t.loss),
                    t.reordered.to_string(),
                    t.retransmits.map_or(String::new(), |r| r.to_string()),
                    self.client.iface.name.clone(),
                    opt(self.client.iface.mtu),
                    opt(self.client.iface.tx_queues),
                    opt(self.client.iface.rx_queues),
                    self.client.iface.qdisc.clone().unwrap_or_default(),
                    self.server.iface.name.clone(),
                    opt(self.server.iface.mtu),
                    format!("{:.1}", wire("client", true)),
                    format!("{:.1}", wire("client", false)),
                    format!("{:.1}", wire("server", true)),
                    format!("{:.1}", wire("server", false)),
                    format!("{:.3}", self.msgs_per_wire_packet),
                    format!("{:.3}", self.cycles.busy_s),
                    format!("{:.0}", self.cycles.hz),
                    format!("{:.1}", self.cycles.per_msg),
                    format!("{:.4}", self.cycles.per_byte),
                    self.same_host.to_string(),
                    self.latency
                        .map_or(String::new(), |l| format!("{:.2}", l.p50_us)),
                    self.latency
                        .map_or(String::new(), |l| format!("{:.2}", l.p99_us)),
                    self.client.host.kernel.clone(),
                ]
                .iter()
                .map(|f| csv_field(f))
                .collect::<Vec<_>>()
                .join(",")
            })
            .collect()
    }
}

/// Quotes a CSV field when it holds a comma, quote or newline.
pub fn csv_field(f: &str) -> String {
    if f.contains([',', '"', '\n']) {
        format!("\"{}\"", f.replace('"', "\"\""))
    } else {
        f.to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn csv_fields_with_commas_are_quoted() {
        assert_eq!(csv_field("a,b"), "\"a,b\"");
        assert_eq!(
            csv_field("x\"y"),
            "x\"y"
                .replace('"', "\"\"")
                .to_string()
                .replace("x\"\"y", "\"x\"\"y\"")
        );
        assert_eq!(csv_field("plain"), "plain");
    }
}
