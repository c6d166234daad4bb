//! One way to make a table (`fabkit_dht::open`): every path the
//! configuration can ask for, over a real provider, with ranks as threads
//! of one process (one node: `auto` takes memory there), gives a table of
//! the kind the plan says, whose writes every rank reads back.

mod common;

use std::time::Duration;

use common::{key, small, value};
use fabkit_core::bootstrap::{Bootstrap, ThreadGroup};
use fabkit_dht::open::{open, Recipe};
use fabkit_dht::{Path, Read, Variant};

#[test]
fn each_path_opens_the_table_its_plan_says_and_works() {
    for (path, label) in [
        (Path::Auto, "memory"),
        (Path::Memory, "memory"),
        (Path::Rma, "rma"),
        (Path::Message, "message"),
    ] {
        for variant in [Variant::Lockfree, Variant::Fine] {
            let mut cfg = small(variant, 128);
            cfg.path = path;
            let boots = ThreadGroup::members(2, Duration::from_secs(30));
            std::thread::scope(|s| {
                for b in &boots {
                    s.spawn(move || {
                        let mut r = Recipe::fabric("tcp;ofi_rxm");
                        r.timeout = Duration::from_millis(2500);
                        let t = open(&cfg, &r, b).unwrap();
                        assert_eq!(t.path.name(), label, "{path:?} {variant:?}: {}", t.plan.why);
                        let me = b.rank() as u64;
                        fabkit_dht::with_table!(&t.table, d => {
                            // A reply is waited for as long as the recipe's
                            // timeout says (`--timeout`), not the default.
                            if label == "message" {
                                assert_eq!(d.deadline(), r.timeout);
                            }
                            let k = key(me);
                            d.write(&k, &value(&k, me, 0, 24)).unwrap();
                            b.barrier().unwrap();
                            for r in 0..2 {
                                let k = key(r);
                                assert_eq!(d.read(&k).unwrap(), Read::Hit(value(&k, r, 0, 24)));
                            }
                            // On the message path the key of the rank that
                            // does not own it went as a request.
                            let all = d.stats_all(b).unwrap();
                            assert_eq!(all.requests > 0, label == "message", "{path:?}");
                        });
                        b.barrier().unwrap();
                        t.table.close(b).unwrap();
                    });
                }
            });
        }
    }
}

#[test]
fn a_provider_that_cannot_name_a_requests_sender_is_refused_for_the_message_path() {
    // udp;ofi_rxd (1.17) gives FI_SOURCE, but another address than the
    // sender's: the owner could not tell members from strangers, and every
    // call would time out. The mailbox finds it at once and says so.
    let mut cfg = small(Variant::Lockfree, 128);
    cfg.path = Path::Message;
    let boots = ThreadGroup::members(2, Duration::from_secs(30));
    let start = std::time::Instant::now();
    std::thread::scope(|s| {
        for b in &boots {
            s.spawn(move || {
                let mut r = Recipe::fabric("udp;ofi_rxd");
                r.timeout = Duration::from_secs(20);
                let e = match open(&cfg, &r, b) {
                    Ok(_) => panic!("udp;ofi_rxd was taken for the message path"),
                    Err(e) => e.to_string(),
                };
                assert!(
                    e.contains("udp;ofi_rxd") && e.contains("FI_SOURCE") && e.contains("rma path"),
                    "{e}"
                );
            });
        }
    });
    assert!(
        start.elapsed() < Duration::from_secs(10),
        "{:?}",
        start.elapsed()
    );
}
