//! Where a report was made, by what and how: the fields every report's
//! `meta` carries ([`Provenance`]), spelled as they always were, so a
//! results file says its command, commit, host, machine and launch.

use serde::{Deserialize, Serialize};

/// The provenance of one report. Flattened into each report's `meta`, so
/// its fields sit beside the report's own. Fields a file written by an
/// older fabkit lacks read as absent (`None`); a new file has them all.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Provenance {
    /// The command line.
    #[serde(default)]
    pub command: String,
    /// The git commit the tool was built from (`git describe --dirty`).
    #[serde(default)]
    pub commit: String,
    /// The host name of the reporting rank.
    #[serde(default)]
    pub host: String,
    /// CPU model, cores, memory and kernel, in one line.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub machine: Option<String>,
    /// The machine's online cores, as a number (what `machine` says in
    /// words); absent in files written before it was recorded.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cores: Option<usize>,
    /// How the ranks were started (threads, processes, namespaces,
    /// mpirun); absent for reports made from other reports.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub launch: Option<String>,
    /// The same as a value, for the code that reads the report back;
    /// absent where `launch` is, and in files written before it was
    /// recorded.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub launcher: Option<Launcher>,
    /// The tool's version.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fabkit: Option<String>,
}

/// How a job's ranks were started, as a value (what a report's `launch`
/// says in words).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Launcher {
    /// Threads of one process: in-process ranks, which share its CPU time.
    Threads,
    /// Processes that met through a shared directory (`fabkit launch`).
    Processes,
    /// Processes under an MPI launcher (mpirun, srun).
    Mpi,
}

impl Provenance {
    /// This process, built from `commit`, at version `version`: its
    /// command line, host and machine, started as `launch` (if ranks were).
    pub fn here(commit: &str, version: &str, launch: Option<String>) -> Provenance {
        Provenance {
            command: std::env::args().collect::<Vec<_>>().join(" "),
            commit: commit.to_string(),
            host: crate::bootstrap::hostname(),
            machine: Some(crate::host::machine()),
            cores: Some(crate::host::online_cpus()),
            launch,
            launcher: None,
            fabkit: Some(version.to_string()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_older_meta_without_machine_cores_or_launch_reads_them_as_absent() {
        let p: Provenance =
            serde_json::from_str(r#"{"command": "fabkit perf", "commit": "abc", "host": "h"}"#)
                .unwrap();
        assert_eq!(p.machine, None);
        assert_eq!(p.cores, None);
        assert_eq!(p.launch, None);
        assert_eq!(p.launcher, None);
        assert_eq!(p.commit, "abc");
    }

    #[test]
    fn here_records_the_machine_and_its_cores_as_a_number() {
        let p = Provenance::here("c0ffee", "0.1.0", Some("2 threads".into()));
        assert_eq!(p.cores, Some(crate::host::online_cpus()));
        let machine = p.machine.as_deref().unwrap();
        assert!(
            machine.contains(&format!("{} cores", crate::host::online_cpus())),
            "{machine}"
        );
        let json = serde_json::to_value(&p).unwrap();
        for key in [
            "command", "commit", "host", "machine", "cores", "launch", "fabkit",
        ] {
            assert!(json.get(key).is_some(), "{key} missing in {json}");
        }
    }
}
