//! The sweep's CSV: its columns (a point's settings, the report's, the
//! queues'), and the keys of the runs a file already holds, for resume.

use std::collections::HashSet;

use serde::Serialize;

use super::point::{gateway_str, offload_str};
use super::queues::QueueColumns;
use super::Point;
use crate::report::CsvRow;
use crate::spec::SpecError;

/// A point's settings: the columns before the report's.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct Settings {
    /// The point's key ([`Point::key`]): resume finds runs by it.
    pub key: String,
    /// Experiment.
    pub experiment: String,
    /// Repetition (0-based).
    pub rep: u32,
    /// Queues.
    pub queues: u16,
    /// Queue-selection policy.
    pub policy: String,
    /// MTU.
    pub mtu: u32,
    /// `none`, or the far link's MTU behind a gateway.
    pub gateway: String,
    /// `default` or `FEATURE=on|off;...`.
    pub offloads: String,
    /// Root qdisc (`default`: the kernel's).
    pub qdisc: String,
    /// `txqueuelen`.
    pub txqueuelen: u32,
    /// CPU placement as written.
    pub cpus: String,
    /// `connected` or `unconnected`: the client's UDP sockets.
    pub udp_socket: String,
}

impl Settings {
    /// The settings of `p`.
    pub fn of(p: &Point) -> Settings {
        Settings {
            key: p.key(),
            experiment: p.experiment.clone(),
            rep: p.rep,
            queues: p.queues,
            policy: p.policy.to_string(),
            mtu: p.mtu,
            gateway: gateway_str(p.gateway),
            offloads: offload_str(&p.offloads),
            qdisc: p.qdisc.clone().unwrap_or_else(|| "default".into()),
            txqueuelen: p.txqueuelen,
            cpus: p.cpus.clone(),
            udp_socket: if p.unconnected() {
                "unconnected"
            } else {
                "connected"
            }
            .into(),
        }
    }
}

/// One row of a sweep's CSV: the point's settings, the report's columns
/// ([`CsvRow`]) and the queues' ([`QueueColumns`]). The header is their
/// fields, in that order.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct SweepRow(pub Settings, pub CsvRow, pub QueueColumns);

/// The sweep's CSV header.
pub fn header() -> csv::StringRecord {
    crate::report::row::header::<SweepRow>()
}

/// The keys of the runs already in a sweep CSV (its first column), to skip
/// them on resume. A file with another header is refused: appending would
/// mix two layouts.
pub fn done_keys(csv: &str) -> Result<HashSet<String>, SpecError> {
    if csv.is_empty() {
        return Ok(HashSet::new());
    }
    // Rows of a damaged length still name their run: flexible.
    let mut rd = csv::ReaderBuilder::new()
        .flexible(true)
        .from_reader(csv.as_bytes());
    let another = || {
        SpecError(
            "the output file has another header (another tool or version wrote it): \
             give a new file"
                .into(),
        )
    };
    if *rd.headers().map_err(|_| another())? != header() {
        return Err(another());
    }
    let mut done = HashSet::new();
    for r in rd.records() {
        let r = r.map_err(|e| SpecError(format!("the output file: {e}")))?;
        if let Some(key) = r.get(0) {
            done.insert(key.to_string());
        }
    }
    Ok(done)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::row::to_text;
    use crate::sweep::SweepFile;

    fn file(axes: &str) -> SweepFile {
        SweepFile::parse(&format!("seconds = 1\n[axes]\n{axes}")).unwrap()
    }

    #[test]
    fn resume_skips_the_runs_in_the_file_and_refuses_another_layout() {
        let f = file("queues = [1, 2]");
        let p = f.expand().unwrap();
        let row = |p: &Point| SweepRow(Settings::of(p), CsvRow::default(), QueueColumns::default());
        let csv = to_text(&[row(&p[0])], true);
        let done = done_keys(&csv).unwrap();
        assert!(done.contains(&p[0].key()));
        assert!(!done.contains(&p[1].key()));
        assert!(done_keys("").unwrap().is_empty());
        assert!(done_keys("a,b,c\n1,2,3\n")
            .unwrap_err()
            .to_string()
            .contains("another header"));
        // A key with a comma (a CPU list) is quoted, and still found.
        let pinned = file("cpus = [\"0,1:0\"]").expand().unwrap();
        let csv = to_text(&[row(&pinned[0])], true);
        assert!(
            csv.contains(&format!("\n\"{}\",", pinned[0].key())),
            "{csv}"
        );
        assert!(done_keys(&csv).unwrap().contains(&pinned[0].key()));
        // The settings columns match their header.
        let text = to_text(&[Settings::of(&p[0])], true);
        let mut rd = csv::Reader::from_reader(text.as_bytes());
        let cols = rd.headers().unwrap().len();
        assert_eq!(rd.records().next().unwrap().unwrap().len(), cols);
    }

    #[test]
    fn the_header_is_the_columns_scripts_read() {
        // As results/ipoib/seed004.csv has it.
        let want = "key,experiment,rep,queues,policy,mtu,gateway,offloads,qdisc,txqueuelen,\
cpus,udp_socket,commit,proto,len,streams,direction,send,recv,rate_bps,window,nodelay,rr,seconds,\
sent_msgs,received_msgs,received_bytes,gbit_s,msgs_per_s,loss,reordered,retransmits,\
client_iface,client_mtu,client_txq,client_rxq,client_qdisc,server_iface,server_mtu,\
client_tx_pps,client_rx_pps,server_tx_pps,server_rx_pps,msgs_per_wire_packet,busy_s,clock_hz,\
cycles_per_msg,cycles_per_byte,same_host,p50_us,p99_us,kernel,tx_queue_packets,\
tx_queue_segments,rx_queue_packets,rx_unrecorded,tx_size_log2,tx_segs_log2,rx_size_log2,\
tx_queues_used,policy_effect";
        assert_eq!(header().iter().collect::<Vec<_>>().join(","), want);
    }
}
