//! The mailbox's idle service: where its queue has no wait object (`shm`),
//! it sleeps in the kernel on a doorbell, and a caller's ring wakes it at
//! once, long before the wait it was given ends.

mod common;

use std::time::{Duration, Instant};

use fabkit_core::bootstrap::{Bootstrap, ThreadGroup};
use fabkit_fabric::{Mailbox, MailboxConfig};

#[test]
fn an_idle_shm_service_sleeps_on_its_doorbell_and_a_call_wakes_it() {
    common::init_env();
    let boots = ThreadGroup::members(2, Duration::from_secs(30));
    std::thread::scope(|s| {
        for b in &boots {
            s.spawn(move || {
                let mut cfg = MailboxConfig::new("shm");
                cfg.timeout = Duration::from_secs(20);
                let m = Mailbox::establish(cfg, b).unwrap();
                assert!(m.waits_block(), "shm's service sleeps on its doorbell");
                if b.rank() == 1 {
                    // One serve that would wait 15 s for its first request.
                    let start = Instant::now();
                    let mut got = Vec::new();
                    let n = m
                        .serve(Duration::from_secs(15), &mut |from, bytes| {
                            got.push((from, bytes.to_vec()))
                        })
                        .unwrap();
                    let took = start.elapsed();
                    assert_eq!((n, got.clone()), (1, vec![(Some(0), b"ping".to_vec())]));
                    assert!(took < Duration::from_secs(10), "woken after {took:?}");
                    m.answer(0, 7, b"pong").unwrap();
                } else {
                    // Wait (bounded) until rank 1's service has gone to
                    // sleep, then call it.
                    let deadline = Instant::now() + Duration::from_secs(10);
                    while m.service_sleeps(1) != Some(true) {
                        assert!(Instant::now() < deadline, "rank 1's service never slept");
                        std::thread::sleep(Duration::from_millis(1));
                    }
                    let call = m.call(1, 7, b"ping").unwrap();
                    let reply = m
                        .wait_reply(call, Instant::now() + Duration::from_secs(10), |r| {
                            r.to_vec()
                        })
                        .unwrap();
                    assert_eq!(reply, b"pong");
                }
                b.barrier().unwrap();
            });
        }
    });
}
