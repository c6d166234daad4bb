//! The sweep's CSV: its columns (a point's settings, the report's, the
//! queues'), and the keys of the runs a file already holds, for resume.

use std::collections::HashSet;

use super::point::{gateway_str, offload_str};
use super::Point;
use crate::report::csv_field;
use crate::spec::SpecError;

/// The settings columns that precede [`crate::report::Report::CSV_HEADER`]'s.
pub const CSV_SETTINGS: &str =
    "key,experiment,rep,queues,policy,mtu,gateway,offloads,qdisc,txqueuelen,cpus,udp_socket";

/// The per-queue columns that follow the report's (space-separated lists,
/// one number per queue or bucket).
pub const CSV_QUEUES: &str = "tx_queue_packets,tx_queue_segments,rx_queue_packets,\
rx_unrecorded,tx_size_log2,tx_segs_log2,rx_size_log2,tx_queues_used,policy_effect";

/// The sweep's CSV header.
pub fn csv_header() -> String {
    format!(
        "{CSV_SETTINGS},{},{CSV_QUEUES}",
        crate::report::Report::CSV_HEADER
    )
}

/// The settings fields of a row.
pub fn csv_settings(p: &Point) -> String {
    [
        p.key(),
        p.experiment.clone(),
        p.rep.to_string(),
        p.queues.to_string(),
        p.policy.to_string(),
        p.mtu.to_string(),
        gateway_str(p.gateway),
        offload_str(&p.offloads),
        p.qdisc.clone().unwrap_or_else(|| "default".into()),
        p.txqueuelen.to_string(),
        p.cpus.clone(),
        if p.unconnected() {
            "unconnected"
        } else {
            "connected"
        }
        .to_string(),
    ]
    .iter()
    .map(|f| csv_field(f))
    .collect::<Vec<_>>()
    .join(",")
}

/// The keys of the runs already in a sweep CSV (its first column), to skip
/// them on resume. A file with another header is refused: appending would
/// mix two layouts.
pub fn done_keys(csv: &str) -> Result<HashSet<String>, SpecError> {
    let mut lines = csv.lines();
    match lines.next() {
        None => return Ok(HashSet::new()),
        Some(h) if h == csv_header() => {}
        Some(_) => {
            return Err(SpecError(
                "the output file has another header (another tool or version wrote it): \
                 give a new file"
                    .into(),
            ))
        }
    }
    let mut done = HashSet::new();
    for l in lines.filter(|l| !l.is_empty()) {
        // Keys are quoted when a CPU list puts a comma in them.
        done.insert(crate::summary::csv_fields(l).swap_remove(0));
    }
    Ok(done)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sweep::SweepFile;

    fn file(axes: &str) -> SweepFile {
        SweepFile::parse(&format!("seconds = 1\n[axes]\n{axes}")).unwrap()
    }

    #[test]
    fn resume_skips_the_runs_in_the_file_and_refuses_another_layout() {
        let f = file("queues = [1, 2]");
        let p = f.expand().unwrap();
        let row = format!("{},{}", csv_settings(&p[0]), "rest");
        let csv = format!("{}\n{row}\n", csv_header());
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
        let csv = format!("{}\n{},rest\n", csv_header(), csv_settings(&pinned[0]));
        assert!(done_keys(&csv).unwrap().contains(&pinned[0].key()));
        // The settings columns match their header.
        assert_eq!(
            csv_settings(&p[0]).split(',').count(),
            CSV_SETTINGS.split(',').count()
        );
    }
}
