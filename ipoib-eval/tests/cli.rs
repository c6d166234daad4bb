//! The `ipoib-eval` binary: bad input is one line and exit 2, a failed run
//! one line and exit 1, and a real run writes the JSON and CSV it promises.

use std::process::{Child, Command, Output, Stdio};

fn bin() -> Command {
    Command::new(env!("CARGO_BIN_EXE_ipoib-eval"))
}

fn run(args: &[&str]) -> Output {
    bin().args(args).output().expect("running ipoib-eval")
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// Kills the server when the test ends, however it ends.
struct Killed(Child);
impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Starts a server and waits (on its own output, not a sleep) until it listens.
fn server(port: u16, extra: &[&str]) -> Killed {
    let mut c = bin()
        .args(["server", "-p", &port.to_string()])
        .args(extra)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let out = c.stdout.take().unwrap();
    let mut line = String::new();
    std::io::BufRead::read_line(&mut std::io::BufReader::new(out), &mut line).unwrap();
    assert!(line.contains("listening"), "{line}");
    Killed(c)
}

fn one_line(o: &Output) -> String {
    let e = String::from_utf8_lossy(&o.stderr).into_owned();
    assert_eq!(e.trim_end().lines().count(), 1, "not one line: {e:?}");
    e
}

#[test]
fn bad_values_are_one_line_and_exit_2() {
    let cases: &[(&[&str], &str)] = &[
        (&["client", "h", "-c", "g"], "--client"),
        (&["client", "h", "-l", "0"], "-l"),
        (&["client", "h", "-l", "18446744073709551615K"], "-l"),
        (&["client", "h", "-t", "1e300"], "-t"),
        (&["client", "h", "-t", "0"], "-t"),
        (&["client", "h", "-t", "nan"], "-t"),
        (&["client", "h", "-P", "0"], "-P"),
        (&["client", "h", "-P", "65536"], "65536"),
        (&["client", "h", "-b", "fast"], "-b"),
        (&["client", "h", "-u", "-b", "1e300"], "-b"),
        (
            &["client", "h", "-u", "-l", "1472", "--send", "gso:64"],
            "gso:44",
        ),
        (&["client", "h", "--send", "mmsg:8"], "UDP"),
        (&["client", "h", "--send", "warp"], "send path"),
        (&["client", "h", "-u", "--recv", "gro:0"], "batch"),
        (&["client", "h", "-w", "0"], "-w"),
        (&["client", "h", "-k", "0"], "-k"),
        (&["client", "h", "-i", "0.0001"], "-i"),
        (&["client", "h", "--cpus", "99999"], "--cpus"),
        (&["client", "h", "--cpus", "4095"], "--cpus"),
        (&["client", "h", "-p", "70000"], "70000"),
        (&["client", "h", "--rr", "-u"], "--rr"),
        (&["client", "h", "--timeout", "0"], "--timeout"),
        (&["server", "--idle-timeout", "-1"], "idle-timeout"),
        (&["server", "--max-sessions", "0"], "max-sessions"),
        (&["frobnicate"], "frobnicate"),
        (&["client"], "<HOST>"),
        (&["client", "h", "--server-cpus", "x"], "--server-cpus"),
        (
            &["client", "h", "-u", "-l", "20", "--send", "sg:10"],
            "sg:5",
        ),
        (
            &[
                "client",
                "h",
                "-u",
                "-P",
                "128",
                "--bidir",
                "-l",
                "65000",
                "--send",
                "gso:1:1024",
                "--recv",
                "gro:1024",
            ],
            "MiB of buffers",
        ),
    ];
    for (args, needle) in cases {
        let o = run(args);
        assert_eq!(o.status.code(), Some(2), "{args:?}: {o:?}");
        let e = one_line(&o);
        assert!(e.contains(needle), "{args:?}: {e}");
        assert!(!e.contains("panicked"), "{e}");
    }
}

#[test]
fn a_testbed_offload_ethtool_does_not_know_is_one_line_and_exit_2_with_nothing_made() {
    let name = fabkit_netns::testbed::auto_name();
    for offload in ["bogus=on", "gro=off,bogus=on"] {
        let mut args = vec!["testbed", "up", "--name", &name];
        for o in offload.split(',') {
            args.extend(["--offload", o]);
        }
        let o = run(&args);
        assert_eq!(o.status.code(), Some(2), "{args:?}: {o:?}");
        let e = one_line(&o);
        assert!(
            e.contains("offload `bogus`: no such feature") && e.contains("ethtool -k"),
            "{e}"
        );
        assert!(o.stdout.is_empty(), "{o:?}");
        let made = fabkit_netns::testbed::status(&name);
        assert!(made.is_empty(), "{made:?}");
    }
}

#[test]
fn failed_runs_are_one_line_and_exit_1() {
    let port = free_port().to_string();
    let o = run(&["client", "127.0.0.1", "-p", &port, "-t", "1"]);
    assert_eq!(o.status.code(), Some(1), "{o:?}");
    assert!(one_line(&o).contains("cannot reach the server"));
    let o = run(&["client", "no-such-host.invalid", "-t", "1"]);
    assert_eq!(o.status.code(), Some(1));
    assert!(one_line(&o).contains("resolve"));
    // A port that is taken.
    let held = std::net::TcpListener::bind("[::]:0").unwrap();
    let p = held.local_addr().unwrap().port().to_string();
    let o = run(&["server", "-p", &p]);
    assert_eq!(o.status.code(), Some(1));
    assert!(one_line(&o).contains("in use"));
}

#[test]
fn a_run_writes_json_and_appends_csv_rows_under_one_header() {
    let port = free_port();
    let _s = server(port, &["-q"]);
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("r.json");
    let csv = dir.path().join("r.csv");
    for send in ["gso:8", "mmsg:8"] {
        let o = run(&[
            "client",
            "127.0.0.1",
            "-p",
            &port.to_string(),
            "-u",
            "-b",
            "0",
            "-l",
            "1000",
            "-k",
            "800",
            "-w",
            "8M",
            "--send",
            send,
            "--recv",
            "gro",
            "--json-file",
            json.to_str().unwrap(),
            "--csv",
            csv.to_str().unwrap(),
        ]);
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        let text = String::from_utf8_lossy(&o.stdout);
        assert!(
            text.contains("[SUM] client->server") && text.contains("cycles/message"),
            "{text}"
        );
    }
    let v: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    assert_eq!(v["schema"], "ipoib-eval/1");
    assert_eq!(v["spec"]["send"]["path"], "mmsg");
    assert_eq!(v["totals"][0]["received_msgs"], 800);
    assert_eq!(v["client"]["iface"]["name"], "lo");
    assert!(v["commit"].as_str().is_some_and(|c| !c.is_empty()));
    // One header, then a row per run, each as long as the header.
    let text = std::fs::read_to_string(&csv).unwrap();
    let mut rd = csv::ReaderBuilder::new()
        .has_headers(false)
        .flexible(true)
        .from_reader(text.as_bytes());
    let rows: Vec<csv::StringRecord> = rd.records().map(Result::unwrap).collect();
    assert_eq!(rows.len(), 3, "{rows:?}");
    assert_eq!(
        rows[0].iter().take(3).collect::<Vec<_>>(),
        ["commit", "proto", "len"]
    );
    let col = |name: &str| rows[0].iter().position(|h| h == name).unwrap();
    let (send, recv) = (col("send"), col("recv"));
    assert_eq!((&rows[1][send], &rows[1][recv]), ("gso:8", "gro"));
    assert_eq!((&rows[2][send], &rows[2][recv]), ("mmsg:8", "gro"));
    let cols = rows[0].len();
    assert!(rows.iter().all(|r| r.len() == cols));

    // -J: the JSON report alone on stdout.
    let o = run(&[
        "client",
        "127.0.0.1",
        "-p",
        &port.to_string(),
        "-k",
        "10",
        "-J",
    ]);
    assert!(o.status.success());
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["totals"][0]["received_msgs"], 10);
    // iperf3's spelling of the server: -c HOST.
    let o = run(&[
        "client",
        "-c",
        "127.0.0.1",
        "-p",
        &port.to_string(),
        "-k",
        "7",
        "-J",
    ]);
    assert!(o.status.success(), "{o:?}");
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["totals"][0]["received_msgs"], 7);
}

#[test]
fn a_one_off_server_exits_after_its_test() {
    let port = free_port();
    let mut s = server(port, &["-1", "-q"]);
    let o = run(&[
        "client",
        "127.0.0.1",
        "-p",
        &port.to_string(),
        "-k",
        "5",
        "-l",
        "100",
        "-i",
        "0",
    ]);
    assert!(o.status.success(), "{o:?}");
    let status = s.0.wait().unwrap();
    assert!(status.success());
}
