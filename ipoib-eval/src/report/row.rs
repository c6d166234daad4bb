//! A test as CSV: one [`CsvRow`] per direction, written by the `csv`
//! crate. A row type's fields, in order, are its header, so the header
//! cannot drift from the rows; [`header`] and [`to_text`] serve every row
//! type of the crate (the sweep's rows too).

use serde::Serialize;

use super::Report;

/// One direction of a test as a CSV row: the settings, the totals and both
/// ends' interfaces. Figures are written to a fixed number of decimals;
/// a column with no figure (an unknown MTU, a TCP test's reordering by
/// iperf3) is empty.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct CsvRow {
    /// The ipoib-eval commit.
    pub commit: String,
    /// `tcp` or `udp`.
    pub proto: String,
    /// Message size, bytes (`-l`).
    pub len: usize,
    /// Parallel streams.
    pub streams: u16,
    /// `client->server` or `server->client` (`both`: iperf3's `--bidir`).
    pub direction: String,
    /// Send path.
    pub send: String,
    /// Receive path.
    pub recv: String,
    /// Target rate per stream, bit/s (0: unlimited).
    pub rate_bps: String,
    /// Socket buffer asked for (`-w`), bytes.
    pub window: Option<usize>,
    /// `TCP_NODELAY`.
    pub nodelay: bool,
    /// TCP request/response.
    pub rr: bool,
    /// Longest receiver's seconds.
    pub seconds: String,
    /// Messages sent.
    pub sent_msgs: u64,
    /// Messages received.
    pub received_msgs: u64,
    /// Bytes received.
    pub received_bytes: u64,
    /// Received Gbit/s.
    pub gbit_s: String,
    /// Received messages per second.
    pub msgs_per_s: String,
    /// 1 - received/sent.
    pub loss: String,
    /// Messages received after a later one.
    pub reordered: Option<u64>,
    /// TCP retransmits at the senders.
    pub retransmits: Option<u64>,
    /// The client's interface.
    pub client_iface: String,
    /// Its MTU.
    pub client_mtu: Option<u32>,
    /// Its TX queues.
    pub client_txq: Option<u32>,
    /// Its RX queues.
    pub client_rxq: Option<u32>,
    /// Its root qdisc.
    pub client_qdisc: Option<String>,
    /// The server's interface.
    pub server_iface: String,
    /// Its MTU.
    pub server_mtu: Option<u32>,
    /// Client interface, packets sent per second.
    pub client_tx_pps: String,
    /// Client interface, packets received per second.
    pub client_rx_pps: String,
    /// Server interface, packets sent per second.
    pub server_tx_pps: String,
    /// Server interface, packets received per second.
    pub server_rx_pps: String,
    /// Messages received per packet on the wire.
    pub msgs_per_wire_packet: String,
    /// Busy CPU seconds counted.
    pub busy_s: String,
    /// Clock rate used for cycles, Hz.
    pub clock_hz: String,
    /// CPU cycles per message received.
    pub cycles_per_msg: String,
    /// CPU cycles per byte received.
    pub cycles_per_byte: String,
    /// Both ends on one machine.
    pub same_host: bool,
    /// Request/response: median latency, microseconds.
    pub p50_us: String,
    /// Request/response: 99th percentile, microseconds.
    pub p99_us: String,
    /// The client's kernel.
    pub kernel: String,
}

impl Report {
    /// The CSV rows, one per direction.
    pub fn rows(&self) -> Vec<CsvRow> {
        let sp = &self.spec;
        let wire = |side: &str, tx: bool| {
            self.wire.iter().find(|x| x.side == side).map_or(0.0, |x| {
                if tx {
                    x.tx_pps
                } else {
                    x.rx_pps
                }
            })
        };
        let (c, s) = (&self.client.iface, &self.server.iface);
        self.totals
            .iter()
            .map(|t| CsvRow {
                commit: self.commit.clone(),
                proto: format!("{:?}", sp.proto).to_lowercase(),
                len: sp.len,
                streams: sp.streams,
                direction: t.direction.clone(),
                send: sp.send.to_string(),
                recv: sp.recv.to_string(),
                rate_bps: format!("{}", sp.rate_bps),
                window: sp.window,
                nodelay: sp.nodelay,
                rr: sp.rr,
                seconds: format!("{:.4}", t.seconds),
                sent_msgs: t.sent_msgs,
                received_msgs: t.received_msgs,
                received_bytes: t.received_bytes,
                gbit_s: format!("{:.4}", t.gbit_s),
                msgs_per_s: format!("{:.1}", t.msgs_per_s),
                loss: format!("{:.6}", t.loss),
                reordered: Some(t.reordered),
                retransmits: t.retransmits,
                client_iface: c.name.clone(),
                client_mtu: c.mtu,
                client_txq: c.tx_queues,
                client_rxq: c.rx_queues,
                client_qdisc: c.qdisc.clone(),
                server_iface: s.name.clone(),
                server_mtu: s.mtu,
                client_tx_pps: format!("{:.1}", wire("client", true)),
                client_rx_pps: format!("{:.1}", wire("client", false)),
                server_tx_pps: format!("{:.1}", wire("server", true)),
                server_rx_pps: format!("{:.1}", wire("server", false)),
                msgs_per_wire_packet: format!("{:.3}", self.msgs_per_wire_packet),
                busy_s: format!("{:.3}", self.cycles.busy_s),
                clock_hz: format!("{:.0}", self.cycles.hz),
                cycles_per_msg: format!("{:.1}", self.cycles.per_msg),
                cycles_per_byte: format!("{:.4}", self.cycles.per_byte),
                same_host: self.same_host,
                p50_us: self
                    .latency
                    .map_or(String::new(), |l| format!("{:.2}", l.p50_us)),
                p99_us: self
                    .latency
                    .map_or(String::new(), |l| format!("{:.2}", l.p99_us)),
                kernel: self.client.host.kernel.clone(),
            })
            .collect()
    }
}

/// The header a row type writes: its field names, in order.
pub fn header<T: Serialize + Default>() -> csv::StringRecord {
    // The csv crate writes a header only before a first row: write one
    // with a default row, and read it back.
    let mut w = csv::Writer::from_writer(Vec::new());
    // Into a Vec: the only error would be a row type csv cannot write (a
    // map, a struct in a struct), a bug the tests catch.
    w.serialize(T::default())
        .expect("a row type the csv crate writes");
    let bytes = w.into_inner().expect("flushing CSV to memory");
    csv::Reader::from_reader(bytes.as_slice())
        .headers()
        .expect("the header just written")
        .clone()
}

/// `rows` as CSV text, one line each, after the header if `with_header`.
pub fn to_text<T: Serialize + Default>(rows: &[T], with_header: bool) -> String {
    let mut w = csv::WriterBuilder::new()
        .has_headers(false)
        .from_writer(Vec::new());
    if with_header {
        w.write_record(&header::<T>())
            .expect("writing CSV to memory");
    }
    for r in rows {
        // Into a Vec: see `header`.
        w.serialize(r).expect("a row type the csv crate writes");
    }
    let bytes = w.into_inner().expect("flushing CSV to memory");
    String::from_utf8(bytes).expect("CSV of UTF-8 fields is UTF-8")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_header_is_the_columns_scripts_read() {
        assert_eq!(
            header::<CsvRow>().iter().collect::<Vec<_>>().join(","),
            "commit,proto,len,streams,direction,send,recv,rate_bps,window,nodelay,rr,\
seconds,sent_msgs,received_msgs,received_bytes,gbit_s,msgs_per_s,loss,reordered,retransmits,\
client_iface,client_mtu,client_txq,client_rxq,client_qdisc,server_iface,server_mtu,\
client_tx_pps,client_rx_pps,server_tx_pps,server_rx_pps,msgs_per_wire_packet,\
busy_s,clock_hz,cycles_per_msg,cycles_per_byte,same_host,p50_us,p99_us,kernel"
        );
    }

    #[test]
    fn csv_fields_with_commas_are_quoted() {
        let row = CsvRow {
            commit: "a,b".into(),
            proto: "plain".into(),
            kernel: "x\"y".into(),
            ..CsvRow::default()
        };
        let text = to_text(&[row], false);
        assert!(text.starts_with("\"a,b\",plain,"), "{text}");
        assert!(text.ends_with(",\"x\"\"y\"\n"), "{text}");
    }
}
