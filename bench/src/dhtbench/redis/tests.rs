use std::ffi::OsStr;
use std::fs;
use std::io;
use std::net::{Ipv4Addr, TcpListener};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use super::client::*;
use super::dir::*;
use super::resp::*;
use super::server::*;
use super::*;
use crate::held::LOCK;
use redis::Value;

#[test]
fn a_start_reaps_the_directories_killed_runs_left_and_keeps_live_ones() {
    use std::io::BufRead;
    let base = tempfile::tempdir().unwrap();
    let dir = |name: &str, lock: bool| {
        let d = base.path().join(name);
        std::os::unix::fs::DirBuilderExt::mode(&mut fs::DirBuilder::new(), 0o700)
            .create(&d)
            .unwrap();
        fs::write(d.join("redis.log"), "x").unwrap();
        if lock {
            fs::File::create(d.join(LOCK)).unwrap();
        }
        d
    };
    // A dead run's: its lock file is there and nobody holds it.
    let stale = dir("fabkit-redis-999999-0", true);
    // A live run's, held by another process (one in another PID
    // namespace alike): flock(1) says so once it holds the lock.
    let live = dir("fabkit-redis-999998-0", true);
    let mut holder = std::process::Command::new("flock")
        .arg(live.join(LOCK))
        .args(["-c", "echo held; cat"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    io::BufReader::new(holder.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    assert_eq!(line, "held\n");
    // Without a lock file, or a name not ours: kept.
    let unlocked = dir("fabkit-redis-999997-0", false);
    let other = dir("fabkit-redis-999999-x", true);
    // One being made right now (`.new`) is kept; one a killed run left
    // while making it, minutes old, is removed.
    let making = dir("fabkit-redis-999996-0.new", false);
    let left = dir("fabkit-redis-999995-0.new", false);
    let minutes_ago = std::time::SystemTime::now() - Duration::from_secs(300);
    fs::File::open(&left)
        .unwrap()
        .set_modified(minutes_ago)
        .unwrap();
    reap_stale(base.path(), false);
    assert!(making.exists(), "a directory being made is kept");
    assert!(
        !left.exists(),
        "a half-made directory of a dead run is removed"
    );
    assert!(!stale.exists(), "a dead run's directory is removed");
    assert!(live.exists(), "a live run's directory is kept");
    assert!(unlocked.exists(), "a directory without a lock is kept");
    assert!(other.exists(), "a name not ours to judge is kept");
    drop(holder.stdin.take());
    holder.wait().unwrap();
    assert_eq!(stale_pid("fabkit-redis-12-3"), Some(12));
    assert_eq!(stale_pid("fabkit-redis-0-3"), None);
    assert_eq!(stale_pid("fabkit-redis-12"), None);
}

const TIMEOUT: Duration = Duration::from_secs(5);
const PW: &str = "0123456789abcdef0123456789abcdef";

/// The installed redis-server, or None after printing why the test
/// is skipped.
fn installed() -> Option<PathBuf> {
    let p = available();
    if p.is_none() {
        println!("SKIPPED: redis-server not installed");
    }
    p
}

fn key(i: usize) -> Vec<u8> {
    format!("key-{i:04}").into_bytes()
}

fn value(i: usize, len: usize) -> Vec<u8> {
    (0..len).map(|j| (i * 31 + j) as u8).collect()
}

#[test]
fn redis_write_then_read_over_two_servers() {
    if installed().is_none() {
        return;
    }
    let a = Server::start(Ipv4Addr::LOCALHOST, TIMEOUT, PW).unwrap();
    let b = Server::start(Ipv4Addr::LOCALHOST, TIMEOUT, PW).unwrap();
    assert_ne!(a.port(), b.port());
    // Only a client that knows the run's password gets in, nor does a
    // readiness check without it.
    let wrong = Client::connect(&[a.addr()], TIMEOUT, "not-the-password").unwrap_err();
    let msg = format!("{wrong:#}");
    assert!(msg.contains(&a.addr().to_string()), "{msg}");
    assert!(ping(a.addr(), "not-the-password", TIMEOUT).is_err());
    let mut client = Client::connect(&[a.addr(), b.addr()], TIMEOUT, PW).unwrap();

    let (n, vlen) = (10, 104);
    let keys: Vec<Vec<u8>> = (0..n).map(key).collect();
    let values: Vec<Vec<u8>> = (0..n).map(|i| value(i, vlen)).collect();
    let servers: Vec<u32> = (0..n as u32).map(|i| i % 2).collect();
    let key_refs: Vec<&[u8]> = keys.iter().map(|k| k.as_slice()).collect();
    let value_refs: Vec<&[u8]> = values.iter().map(|v| v.as_slice()).collect();
    client
        .write_batch(&servers, &key_refs, &value_refs)
        .unwrap();
    assert_eq!(client.dbsize().unwrap(), n as u64);
    let (sent, _) = client.bytes();
    let payload: usize = keys.iter().chain(&values).map(|b| b.len()).sum();
    assert!(sent >= payload as u64, "sent {sent} < {payload}");

    // All written keys plus as many absent ones, interleaved, each
    // asked of the server it was written to.
    let absent: Vec<Vec<u8>> = (n..2 * n).map(key).collect();
    let mut ask: Vec<&[u8]> = Vec::new();
    let mut on: Vec<u32> = Vec::new();
    for i in 0..n {
        ask.push(&keys[i]);
        on.push(servers[i]);
        ask.push(&absent[i]);
        on.push((i % 2) as u32);
    }
    let before = client.bytes();
    let mut out = vec![0u8; ask.len() * vlen];
    let mut found = vec![true; ask.len()];
    client
        .read_batch(&on, &ask, vlen, &mut out, &mut found)
        .unwrap();
    for i in 0..n {
        assert!(found[2 * i], "key {i} not found");
        assert_eq!(&out[2 * i * vlen..(2 * i + 1) * vlen], &values[i][..]);
        assert!(!found[2 * i + 1], "absent key {i} found");
    }
    let after = client.bytes();
    let read_payload: u64 = ask.iter().map(|k| k.len() as u64).sum();
    assert!(after.0 - before.0 >= read_payload);
    assert!(after.1 - before.1 >= (n * vlen) as u64);

    // Each key went to its own server only.
    let mut only_a = Client::connect(&[a.addr()], TIMEOUT, PW).unwrap();
    assert_eq!(only_a.dbsize().unwrap(), n as u64 / 2);

    // A batch of one takes the same path.
    let mut one = vec![0u8; vlen];
    let mut hit = [false];
    client
        .read_batch(&[1], &[&keys[1]], vlen, &mut one, &mut hit)
        .unwrap();
    assert!(hit[0]);
    assert_eq!(one, values[1]);

    client.flush_all().unwrap();
    assert_eq!(client.dbsize().unwrap(), 0);
    // The ns clock agrees with /proc's ticks to a tick (10 ms at 100 Hz)
    // and has seen the server work at all.
    let (ns, ticks) = (a.cpu_time().unwrap(), a.cpu_ticks_time().unwrap());
    assert!(ns > Duration::ZERO, "{ns:?}");
    assert!(
        ns + Duration::from_millis(20) >= ticks,
        "{ns:?} vs {ticks:?}"
    );
    assert!(
        ticks + Duration::from_millis(20) >= ns,
        "{ns:?} vs {ticks:?}"
    );
}

#[test]
fn redis_server_killed_mid_run_is_an_error_naming_it() {
    if installed().is_none() {
        return;
    }
    let timeout = Duration::from_secs(2);
    let a = Server::start(Ipv4Addr::LOCALHOST, timeout, PW).unwrap();
    let mut b = Server::start(Ipv4Addr::LOCALHOST, timeout, PW).unwrap();
    let mut client = Client::connect(&[a.addr(), b.addr()], timeout, PW).unwrap();
    let keys: [&[u8]; 2] = [b"k0", b"k1"];
    client.write_batch(&[0, 1], &keys, &[b"v0", b"v1"]).unwrap();

    // SAFETY: kill(2) touches no memory; b's child is not reaped yet,
    // so the pid still names it.
    let rc = unsafe { libc::kill(b.pid() as libc::pid_t, libc::SIGKILL) };
    assert_eq!(rc, 0);
    let start = Instant::now();
    let mut out = [0u8; 4];
    let mut found = [false; 2];
    let err = client
        .read_batch(&[0, 1], &keys, 2, &mut out, &mut found)
        .unwrap_err();
    let msg = format!("{err:#}");
    assert!(start.elapsed() < timeout + Duration::from_secs(1));
    assert!(
        msg.contains(&format!("127.0.0.1:{} (pid {})", b.port(), b.pid())),
        "{msg}"
    );
    assert!(msg.contains("MGET"), "{msg}");

    // The owner sees it exited, by SIGKILL.
    let deadline = Instant::now() + timeout;
    let exited = loop {
        match b.check_alive() {
            Err(e) => break format!("{e:#}"),
            Ok(()) if Instant::now() < deadline => std::thread::sleep(NAP),
            Ok(()) => panic!("server killed but still running"),
        }
    };
    assert!(
        exited.contains("exited") && exited.contains("SIGKILL"),
        "{exited}"
    );
}

#[test]
fn redis_silent_server_is_an_error_within_the_timeout() {
    if installed().is_none() {
        return;
    }
    let timeout = Duration::from_millis(300);
    let mut s = Server::start(Ipv4Addr::LOCALHOST, TIMEOUT, PW).unwrap();
    let mut client = Client::connect(&[s.addr()], timeout, PW).unwrap();
    let pid = s.pid() as libc::pid_t;
    // SAFETY: kill(2) touches no memory; the child is not reaped, so
    // the pid still names it.
    assert_eq!(unsafe { libc::kill(pid, libc::SIGSTOP) }, 0);
    let start = Instant::now();
    let mut out = [0u8; 1];
    let mut found = [false];
    let err = client
        .read_batch(&[0], &[b"k"], 1, &mut out, &mut found)
        .unwrap_err();
    let elapsed = start.elapsed();
    // SAFETY: as above; a stopped child is not reaped either.
    assert_eq!(unsafe { libc::kill(pid, libc::SIGCONT) }, 0);
    let msg = format!("{err:#}");
    assert!(elapsed >= timeout && elapsed < timeout * 3, "{elapsed:?}");
    assert!(msg.contains(&format!("127.0.0.1:{}", s.port())), "{msg}");
    assert!(msg.contains("no reply within 300ms"), "{msg}");
    s.check_alive().unwrap();

    // The connection is not trusted again: the next batch is refused
    // before anything is sent, naming the earlier failure.
    let err = client
        .read_batch(&[0], &[b"k"], 1, &mut out, &mut found)
        .unwrap_err();
    let msg = format!("{err:#}");
    assert!(
        msg.contains("failed earlier (reading the reply to MGET"),
        "{msg}"
    );
}

#[test]
fn redis_drop_leaves_no_process_and_no_directory() {
    if installed().is_none() {
        return;
    }
    let mut s = Server::start(Ipv4Addr::LOCALHOST, TIMEOUT, PW).unwrap();
    s.check_alive().unwrap();
    let (pid, dir) = (s.pid(), s.dir.path.clone());
    assert!(dir.join("redis.log").exists());
    drop(s);
    assert!(!Path::new(&format!("/proc/{pid}")).exists());
    assert!(!dir.exists());
}

#[test]
fn redis_server_dies_with_the_thread_that_started_it() {
    if installed().is_none() {
        return;
    }
    // The server is leaked by its thread (no Drop runs), as if fabkit
    // had been killed: the kernel's death signal must end it.
    let (pid, dir) = std::thread::spawn(|| {
        let s = Server::start(Ipv4Addr::LOCALHOST, TIMEOUT, PW).unwrap();
        let got = (s.pid(), s.dir.path.clone());
        std::mem::forget(s);
        got
    })
    .join()
    .unwrap();
    let deadline = Instant::now() + TIMEOUT;
    let mut status = 0;
    loop {
        // SAFETY: waitpid writes only `status`, a live local; the pid
        // is our own unreaped child (the leaked Child never waits).
        let r = unsafe { libc::waitpid(pid as libc::pid_t, &mut status, libc::WNOHANG) };
        if r == pid as libc::pid_t {
            break;
        }
        assert_eq!(r, 0, "waitpid: {}", io::Error::last_os_error());
        assert!(Instant::now() < deadline, "server outlived its thread");
        std::thread::sleep(NAP);
    }
    fs::remove_dir_all(&dir).unwrap();
    assert!(libc::WIFSIGNALED(status) && libc::WTERMSIG(status) == libc::SIGKILL);
}

#[test]
fn redis_port_in_use_is_skipped() {
    let Some(program) = installed() else {
        return;
    };
    let held = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).unwrap();
    let taken = held.local_addr().unwrap().port();
    let mut tries = 0;
    let lo = Ipv4Addr::LOCALHOST;
    let s = start_with(&program, lo, PW, TIMEOUT, || {
        tries += 1;
        if tries == 1 {
            Ok(taken)
        } else {
            free_port(lo)
        }
    })
    .unwrap();
    assert_eq!(tries, 2);
    assert_ne!(s.port(), taken);
    ping(s.addr(), PW, TIMEOUT).unwrap();

    // Only taken ports: one error naming them, after a few tries.
    let err = start_with(&program, lo, PW, TIMEOUT, || Ok(taken)).unwrap_err();
    let msg = format!("{err:#}");
    assert!(msg.contains(&format!("127.0.0.1 port {taken})")), "{msg}");
    assert!(msg.contains(&format!("127.0.0.1:{taken}")), "{msg}");
    assert!(msg.contains("exited (exit status: 1)"), "{msg}");
    assert!(msg.contains("Address already in use"), "{msg}");
}

#[test]
fn redis_value_of_wrong_length_is_an_error() {
    if installed().is_none() {
        return;
    }
    let a = Server::start(Ipv4Addr::LOCALHOST, TIMEOUT, PW).unwrap();
    let b = Server::start(Ipv4Addr::LOCALHOST, TIMEOUT, PW).unwrap();
    let mut client = Client::connect(&[a.addr(), b.addr()], TIMEOUT, PW).unwrap();
    let keys: [&[u8]; 2] = [b"short", b"right"];
    client
        .write_batch(&[0, 1], &keys, &[b"123", b"12345678"])
        .unwrap();
    let mut out = [0u8; 16];
    let mut found = [false; 2];
    let err = client
        .read_batch(&[0, 1], &keys, 8, &mut out, &mut found)
        .unwrap_err();
    let msg = format!("{err:#}");
    assert!(msg.contains("key 0"), "{msg}");
    assert!(msg.contains(&format!("127.0.0.1:{}", a.port())), "{msg}");
    assert!(msg.contains("3 B"), "{msg}");

    // Both replies were read: the next batch gets its own answers.
    let mut one = [0u8; 8];
    let mut hit = [false];
    client
        .read_batch(&[1], &keys[1..], 8, &mut one, &mut hit)
        .unwrap();
    assert!(hit[0]);
    assert_eq!(&one, b"12345678");
}

#[test]
fn redis_bad_batches_are_errors() {
    if installed().is_none() {
        return;
    }
    let a = Server::start(Ipv4Addr::LOCALHOST, TIMEOUT, PW).unwrap();
    let mut client = Client::connect(&[a.addr()], TIMEOUT, PW).unwrap();
    let mut out = [0u8; 4];
    let mut found = [false];
    // A server index past the end, and buffers of the wrong size.
    assert!(client
        .read_batch(&[1], &[b"k"], 4, &mut out, &mut found)
        .is_err());
    assert!(client
        .read_batch(&[0], &[b"k"], 3, &mut out, &mut found)
        .is_err());
    assert!(client.write_batch(&[0], &[b"k"], &[]).is_err());
    // Nothing was left half-sent.
    assert_eq!(client.dbsize().unwrap(), 0);
}

#[test]
fn redis_lookup_and_log_parsing() {
    assert_eq!(
        find_program(OsStr::new("/nonexistent:/also/not"), PROGRAM),
        None
    );
    let e = anyhow::Error::from(NotInstalled);
    assert!(e.is::<NotInstalled>());
    assert_eq!(e.to_string(), INSTALL_HINT);

    assert_eq!(
        log_message(
            "8115:M 26 Nov 2026 11:36:59.050 # Failed listening on port 1 (TCP), aborting."
        ),
        "Failed listening on port 1 (TCP), aborting."
    );
    assert_eq!(
        log_message("*** FATAL CONFIG FILE ERROR ***"),
        "*** FATAL CONFIG FILE ERROR ***"
    );
    assert_eq!(shorten("abcdef", 3), "abc...");
    assert_eq!(shorten("abc", 3), "abc");
    assert_eq!(shorten("äöüß", 2), "äö...");

    let stat = "42 (redis (x) y) S 1 2 3 4 5 6 7 8 9 10 17 25 0 0";
    assert_eq!(stat_cpu_ticks(stat).unwrap(), 42);
    assert!(stat_cpu_ticks("42 (x) S 1").is_err());
}

#[test]
fn redis_reply_sizes_and_info() {
    assert_eq!(
        info_pid(b"# Server\r\nredis_version:7.0.15\r\nprocess_id:812\r\n"),
        Some(812)
    );

    // Sizes against the RESP the server really sends.
    let cases: &[(&[u8], Value)] = &[
        (b"+OK\r\n", Value::Okay),
        (b"$-1\r\n", Value::Nil),
        (b":-12\r\n", Value::Int(-12)),
        (b"$3\r\nabc\r\n", Value::BulkString(b"abc".to_vec())),
        (
            b"*2\r\n$10\r\n0123456789\r\n$-1\r\n",
            Value::Array(vec![Value::BulkString(b"0123456789".to_vec()), Value::Nil]),
        ),
    ];
    for (wire, v) in cases {
        assert_eq!(resp_len(v), wire.len() as u64, "{v:?}");
        assert_eq!(&redis::parse_redis_value(wire).unwrap(), v);
    }
    let err = redis::parse_redis_value(b"-ERR unknown command\r\n").unwrap();
    assert_eq!(resp_len(&err), "-ERR unknown command\r\n".len() as u64);
}
