//! The fault injector's own tests: each fault alone and together, on a
//! local transport, seeded so that a failure replays.

use super::*;
use crate::transport::hooked::HookedTransport;
use crate::transport::local::LocalTransport;
use crate::transport::recording::{Logged, RecordingTransport};
use fabkit_core::OpKind;
use std::sync::Arc;

fn group() -> Vec<LocalTransport> {
    LocalTransport::group(2, 256)
}

/// Reads through a plain handle, as another rank would.
fn peek(t: &LocalTransport, rank: usize, offset: u64, len: usize) -> Vec<u8> {
    let mut out = vec![0; len];
    t.execute(&mut [Op::Read {
        from: Remote::new(rank, offset),
        into: &mut out,
    }])
    .unwrap();
    out
}

fn poke(t: &LocalTransport, rank: usize, offset: u64, data: &[u8]) {
    write(t, Remote::new(rank, offset), data, Completion::Transmit);
}

/// A batch of one write through `t`, which must succeed.
fn write(t: &impl Transport, to: Remote, from: &[u8], completion: Completion) {
    t.execute(&mut [Op::Write {
        to,
        from,
        completion,
    }])
    .unwrap();
}

fn logged(ops: &[Op<'_>]) -> Vec<Logged> {
    ops.iter()
        .map(|o| Logged {
            kind: o.kind(),
            at: o.target(),
            len: o.len(),
        })
        .collect()
}

fn pattern() -> Vec<u8> {
    (0..64u8)
        .map(|i| i.wrapping_mul(37).wrapping_add(11))
        .collect()
}

#[test]
fn name_and_delegation() {
    let g = group();
    let f = FaultyTransport::new(g[1].clone(), Faults::default());
    assert_eq!(f.name(), "faulty local");
    assert_eq!((f.rank(), f.ranks(), f.region_len(0)), (1, 2, 256));
    assert!(f.caps().atomics);
    assert!(!f.lock_region(0, true).unwrap());
    f.unlock_region(0).unwrap();
}

#[test]
fn no_faults_pass_batches_through_whole() {
    let g = group();
    let f = FaultyTransport::new(RecordingTransport::new(g[0].clone()), Faults::seeded(3));
    let mut got = [0u8; 32];
    let mut ops = [
        Op::Write {
            to: Remote::new(1, 0),
            from: &[5; 16],
            completion: Completion::Transmit,
        },
        Op::Read {
            from: Remote::new(1, 64),
            into: &mut got,
        },
    ];
    let submitted = logged(&ops);
    f.execute(&mut ops).unwrap();
    assert_eq!(f.inner().batches(), vec![submitted]);
    assert_eq!(f.injected(), Injected::default());
    assert_eq!(f.ops_seen(), 2);
}

#[test]
fn fail_op_fails_only_the_nth_op_once() {
    let mut outcomes = [0; 2];
    for seed in 0..32 {
        let g = group();
        let f = FaultyTransport::new(g[0].clone(), Faults::seeded(seed).fail_op(3));
        let data: Vec<[u8; 8]> = (1..=5u8).map(|i| [i; 8]).collect();
        let mut ops: Vec<Op<'_>> = data
            .iter()
            .enumerate()
            .map(|(i, d)| Op::Write {
                to: Remote::new(1, 8 * i as u64),
                from: d,
                completion: Completion::Transmit,
            })
            .collect();
        let err = f.execute(&mut ops).unwrap_err();
        assert!(
            matches!(
                err,
                Error::Timeout {
                    op: OpKind::Write,
                    peer: 1,
                    timeout: Duration::ZERO
                }
            ),
            "{err:?}"
        );
        assert_eq!(f.ops_seen(), 5);
        let inj = f.injected();
        assert_eq!(inj.failed_ops, 1);
        let applied = inj.failed_applied == 1;
        outcomes[usize::from(applied)] += 1;
        for (i, d) in data.iter().enumerate() {
            let got = peek(&g[1], 1, 8 * i as u64, 8);
            if i == 2 && !applied {
                assert_eq!(got, [0; 8], "seed {seed}: the skipped op landed");
            } else {
                assert_eq!(got, d, "seed {seed}: op {} did not land", i + 1);
            }
        }
        // The next batch succeeds.
        write(&f, Remote::new(1, 64), &[9; 8], Completion::Transmit);
        assert_eq!(f.ops_seen(), 6);
        assert_eq!(peek(&g[1], 1, 64, 8), [9; 8]);
        assert_eq!(f.injected().failed_ops, 1);
    }
    assert!(
        outcomes[0] > 0 && outcomes[1] > 0,
        "both outcomes over 32 seeds: {outcomes:?}"
    );
}

#[test]
fn fail_op_armed_after_setup() {
    let g = group();
    let f = FaultyTransport::new(g[0].clone(), Faults::seeded(1));
    let mut v = 0;
    for _ in 0..4 {
        f.execute(&mut [Op::Fetch {
            at: Remote::new(1, 0),
            value: &mut v,
        }])
        .unwrap();
    }
    assert_eq!(f.ops_seen(), 4);
    f.reset_count();
    f.set_fail_op(Some(2));
    let mut old = 0;
    let mut add = |f: &FaultyTransport<LocalTransport>| {
        f.execute(&mut [Op::FetchAdd {
            at: Remote::new(0, 8),
            delta: 1,
            old: &mut old,
        }])
    };
    add(&f).unwrap();
    let err = add(&f).unwrap_err();
    assert!(matches!(
        err,
        Error::Timeout {
            op: OpKind::FetchAdd,
            peer: 0,
            ..
        }
    ));
    add(&f).unwrap();
    // Disarmed once fired, even if the count restarts.
    f.reset_count();
    add(&f).unwrap();
    add(&f).unwrap();
    assert_eq!(f.injected().failed_ops, 1);
    let word = u64::from_le_bytes(peek(&g[0], 0, 8, 8).try_into().unwrap());
    assert_eq!(word, 4 + f.injected().failed_applied);
}

/// Index of the first byte where `a` and `b` differ.
fn first_diff(a: &[u8], b: &[u8]) -> Option<usize> {
    a.iter().zip(b).position(|(x, y)| x != y)
}

#[test]
fn torn_read_differs_in_the_second_half_only_and_leaves_the_table_intact() {
    let pattern = pattern();
    let mut cuts = std::collections::BTreeSet::new();
    for seed in 0..16 {
        let g = group();
        poke(&g[1], 1, 0, &pattern);
        let f = FaultyTransport::new(
            g[0].clone(),
            Faults::seeded(seed).split_reads(1.0).tear_reads(1.0),
        );
        let mut got = [0u8; 64];
        f.execute(&mut [Op::Read {
            from: Remote::new(1, 0),
            into: &mut got,
        }])
        .unwrap();
        let d = first_diff(&got, &pattern).expect("the read was not torn");
        assert!(
            d.is_multiple_of(8) && d > 0 && d < 64,
            "seed {seed}: cut at {d}"
        );
        cuts.insert(d);
        // Every whole word of the second half is garbage.
        for w in d / 8..8 {
            assert_ne!(got[8 * w..8 * w + 8], pattern[8 * w..8 * w + 8]);
        }
        let inj = f.injected();
        assert_eq!((inj.split_reads, inj.torn_reads), (1, 1));
        // Intact afterwards, for another rank and for this one.
        assert_eq!(peek(&g[1], 1, 0, 64), pattern);
        assert_eq!(peek(&g[0], 1, 0, 64), pattern);
    }
    assert!(cuts.len() > 1, "the cut is random: {cuts:?}");
}

#[test]
fn unaligned_torn_read_is_cut_at_an_aligned_remote_offset() {
    let pattern = pattern();
    for seed in 0..16 {
        let g = group();
        poke(&g[1], 1, 0, &pattern);
        let f = FaultyTransport::new(
            g[0].clone(),
            Faults::seeded(seed).split_reads(1.0).tear_reads(1.0),
        );
        // Remote bytes 3..43: boundaries 8, 16, 24, 32, 40.
        let mut got = [0u8; 40];
        f.execute(&mut [Op::Read {
            from: Remote::new(1, 3),
            into: &mut got,
        }])
        .unwrap();
        let want = &pattern[3..43];
        assert_eq!(f.injected().split_reads, 1);
        if f.injected().torn_reads == 1 {
            let d = first_diff(&got, want).expect("counted torn but not torn");
            assert_eq!((3 + d) % 8, 0, "seed {seed}");
        } else {
            // Cut at 40: the second half has no whole word to tear.
            assert_eq!(got, want);
        }
        assert_eq!(peek(&g[1], 1, 0, 64), pattern);
    }
}

/// A local transport that claims no atomics.
#[derive(Debug)]
struct NoAtomics(LocalTransport);

impl Transport for NoAtomics {
    type Error = Error;
    type Lane = ();

    fn rank(&self) -> usize {
        self.0.rank()
    }
    fn ranks(&self) -> usize {
        self.0.ranks()
    }
    fn region_len(&self, rank: usize) -> usize {
        self.0.region_len(rank)
    }
    fn caps(&self) -> Caps {
        Caps {
            atomics: false,
            ..self.0.caps()
        }
    }
    fn execute(&self, ops: &mut [Op<'_>]) -> Result<(), Error> {
        self.0.execute(ops)
    }
    fn name(&self) -> String {
        "no atomics".into()
    }
}

#[test]
fn no_tear_without_atomics() {
    let pattern = pattern();
    let g = group();
    poke(&g[1], 1, 0, &pattern);
    let f = FaultyTransport::new(
        NoAtomics(g[0].clone()),
        Faults::seeded(5).split_reads(1.0).tear_reads(1.0),
    );
    let mut got = [0u8; 64];
    f.execute(&mut [Op::Read {
        from: Remote::new(1, 0),
        into: &mut got,
    }])
    .unwrap();
    assert_eq!(got[..], pattern[..]);
    let inj = f.injected();
    assert_eq!((inj.split_reads, inj.torn_reads), (1, 0));
}

#[test]
fn out_of_bounds_ops_are_not_faulted_and_fail_as_the_inner_one_does() {
    let g = group();
    let f = FaultyTransport::new(
        g[0].clone(),
        Faults::seeded(2)
            .split_reads(1.0)
            .tear_reads(1.0)
            .delay_writes(Delay::UntilNextBatch, 1.0),
    );
    let mut got = [0u8; 32];
    let err = f
        .execute(&mut [Op::Read {
            from: Remote::new(1, 240),
            into: &mut got,
        }])
        .unwrap_err();
    assert!(matches!(err, Error::OutOfBounds { .. }));
    let err = f
        .execute(&mut [Op::Write {
            to: Remote::new(2, 0),
            from: &[1; 8],
            completion: Completion::Transmit,
        }])
        .unwrap_err();
    assert!(matches!(err, Error::NoSuchRank { .. }));
    assert_eq!(f.injected(), Injected::default());
}

#[test]
fn delay_past_next_batch_lands_after_the_next_batch_or_at_flush() {
    let g = group();
    let f = FaultyTransport::new(
        g[0].clone(),
        Faults::seeded(1).delay_writes(Delay::PastNextBatch, 1.0),
    );
    write(&f, Remote::new(1, 0), &[7; 16], Completion::Transmit);
    assert_eq!(peek(&g[1], 1, 0, 16), [0; 16], "visible at once");
    assert_eq!(f.pending_writes(), 1);
    // The next batch: a write elsewhere, and a read of the delayed bytes,
    // which does not see them (they land after the batch's ops).
    let mut got = [0u8; 16];
    f.execute(&mut [
        Op::Write {
            to: Remote::new(1, 128),
            from: &[8; 16],
            completion: Completion::Transmit,
        },
        Op::Read {
            from: Remote::new(1, 0),
            into: &mut got,
        },
    ])
    .unwrap();
    assert_eq!(got, [0; 16], "visible to the next batch's ops");
    assert_eq!(peek(&g[1], 1, 0, 16), [7; 16], "not applied after it");
    // The second write is now the pending one: invisible until flush.
    assert_eq!(peek(&g[1], 1, 128, 16), [0; 16]);
    assert_eq!(f.pending_writes(), 1);
    f.flush().unwrap();
    assert_eq!(peek(&g[1], 1, 128, 16), [8; 16]);
    assert_eq!(f.pending_writes(), 0);
    assert_eq!(f.injected().delayed_writes, 2);
}

#[test]
fn delay_until_next_batch_lands_before_the_next_batch() {
    let g = group();
    let f = FaultyTransport::new(
        g[0].clone(),
        Faults::seeded(1).delay_writes(Delay::UntilNextBatch, 1.0),
    );
    write(&f, Remote::new(1, 0), &[7; 16], Completion::Transmit);
    assert_eq!(peek(&g[1], 1, 0, 16), [0; 16]);
    let mut got = [0u8; 16];
    f.execute(&mut [Op::Read {
        from: Remote::new(1, 0),
        into: &mut got,
    }])
    .unwrap();
    assert_eq!(got, [7; 16], "the next batch sees it");
    assert_eq!(f.pending_writes(), 0);
}

#[test]
fn pending_writes_land_on_drop() {
    let g = group();
    let f = FaultyTransport::new(
        g[0].clone(),
        Faults::seeded(1).delay_writes(Delay::UntilNextBatch, 1.0),
    );
    write(&f, Remote::new(1, 8), &[3; 5], Completion::Transmit);
    assert_eq!(peek(&g[1], 1, 8, 5), [0; 5]);
    drop(f);
    assert_eq!(peek(&g[1], 1, 8, 5), [3; 5]);
}

#[test]
fn delayed_writes_of_one_transport_to_the_same_bytes_keep_their_order() {
    let mut checked = 0;
    for seed in 0..64 {
        let g = group();
        let f = FaultyTransport::new(
            g[0].clone(),
            Faults::seeded(seed).delay_writes(Delay::PastNextBatch, 0.5),
        );
        write(&f, Remote::new(1, 4), &[1; 12], Completion::Transmit);
        if f.injected().delayed_writes == 0 {
            continue;
        }
        checked += 1;
        write(&f, Remote::new(1, 8), &[2; 8], Completion::Transmit);
        f.flush().unwrap();
        let mut want = vec![0; 4];
        want.extend([1; 4]);
        want.extend([2; 8]);
        assert_eq!(peek(&g[1], 1, 0, 16), want, "seed {seed}");
    }
    assert!(checked > 0);
}

/// A writer's publish: data with `completion`, then (a later batch) the
/// release of a lock word. Returns the data a reader sees at the
/// release, the data after the writer's batches, and what was injected.
fn publish(faults: Faults, completion: Completion) -> (Vec<u8>, Vec<u8>, Injected) {
    let g = group();
    let data = Remote::new(1, 64);
    // Right after each inner batch that holds a compare-and-swap, the
    // bytes another rank would read at `data`: what a reader that takes
    // the lock as soon as it is released sees.
    let observer = HookedTransport::new(g[0].clone());
    let seen = Arc::new(Mutex::new(Vec::new()));
    let (local, seen2) = (g[0].clone(), seen.clone());
    observer.after(Some(Box::new(move |ops| {
        if ops.iter().any(|o| o.kind() == OpKind::CompareAndSwap) {
            seen2.lock().unwrap().push(peek(&local, 1, 64, 24));
        }
    })));
    let f = FaultyTransport::new(observer, faults);
    poke(&g[1], 1, 0, &1u64.to_le_bytes()); // locked by the writer
    write(&f, data, &[7; 24], completion);
    let mut old = 0;
    f.execute(&mut [Op::CompareAndSwap {
        at: Remote::new(1, 0),
        expected: 1,
        new: 0,
        old: &mut old,
    }])
    .unwrap();
    assert_eq!(old, 1);
    let seen = seen.lock().unwrap().clone();
    assert_eq!(seen.len(), 1, "one release");
    let after = peek(&g[1], 1, 64, 24);
    (seen[0].clone(), after, f.injected())
}

#[test]
fn delivery_writes_are_never_delayed() {
    for delay in [Delay::UntilNextBatch, Delay::PastNextBatch] {
        let faults = || Faults::seeded(5).reorder().delay_writes(delay, 1.0);
        // Alone: visible when its batch returns.
        let g = group();
        let f = FaultyTransport::new(g[0].clone(), faults());
        f.execute(&mut [
            Op::Write {
                to: Remote::new(1, 0),
                from: &[3; 16],
                completion: Completion::Delivery,
            },
            Op::Write {
                to: Remote::new(1, 32),
                from: &[4; 16],
                completion: Completion::Transmit,
            },
        ])
        .unwrap();
        assert_eq!(peek(&g[1], 1, 0, 16), [3; 16], "{delay:?}");
        assert_eq!(
            peek(&g[1], 1, 32, 16),
            [0; 16],
            "{delay:?}: transmit delayed"
        );
        assert_eq!(f.injected().delayed_writes, 1, "{delay:?}");
        assert_eq!(f.pending_writes(), 1, "{delay:?}");
        // In a publish: the reader sees the data once the lock is free.
        let (at_release, _, inj) = publish(faults(), Completion::Delivery);
        assert_eq!(at_release, [7; 24], "{delay:?}");
        assert_eq!(inj.delayed_writes, 0, "{delay:?}");
    }
}

#[test]
fn a_delivery_write_lands_after_older_pending_writes_to_the_same_bytes() {
    let g = group();
    let f = FaultyTransport::new(
        g[0].clone(),
        Faults::seeded(1).delay_writes(Delay::PastNextBatch, 1.0),
    );
    write(&f, Remote::new(1, 4), &[1; 12], Completion::Transmit);
    assert_eq!(f.pending_writes(), 1);
    write(&f, Remote::new(1, 8), &[2; 8], Completion::Delivery);
    // The older write landed first, the Delivery one over it.
    assert_eq!(
        peek(&g[1], 1, 0, 16),
        [&[0; 4][..], &[1; 4], &[2; 8]].concat()
    );
    assert_eq!(f.pending_writes(), 0);
    f.flush().unwrap();
    assert_eq!(
        peek(&g[1], 1, 0, 16),
        [&[0; 4][..], &[1; 4], &[2; 8]].concat()
    );
}

#[test]
fn ignore_delivery_delays_delivery_writes_and_a_reader_sees_old_bytes_after_the_release() {
    let faults = Faults::seeded(1)
        .delay_writes(Delay::PastNextBatch, 1.0)
        .ignore_delivery();
    assert!(faults.ignore_delivery);
    // What a transport without delivery completion does to a publish:
    // when the lock is released, the data are still the old bytes; they
    // land later.
    let (at_release, after, inj) = publish(faults.clone(), Completion::Delivery);
    assert_eq!((at_release, after), (vec![0; 24], vec![7; 24]));
    assert_eq!(inj.delayed_writes, 1);
    // A transmit-complete write does the same with or without the knob.
    let past = Faults::seeded(1).delay_writes(Delay::PastNextBatch, 1.0);
    let (at_release, _, _) = publish(past.clone(), Completion::Transmit);
    assert_eq!(at_release, [0; 24]);
    // Without the knob, the same faults leave a Delivery write alone.
    let (at_release, _, inj) = publish(past, Completion::Delivery);
    assert_eq!((at_release, inj.delayed_writes), (vec![7; 24], 0));
    // The knob alone delays nothing: it only widens delay_writes.
    let (at_release, _, inj) = publish(Faults::seeded(1).ignore_delivery(), Completion::Delivery);
    assert_eq!((at_release, inj.delayed_writes), (vec![7; 24], 0));
}

#[test]
fn reorder_changes_the_order_and_executes_every_op_once() {
    let mut reordered = 0;
    for seed in 0..32 {
        let g = group();
        let f = FaultyTransport::new(
            RecordingTransport::new(g[0].clone()),
            Faults::seeded(seed).reorder(),
        );
        let (mut got, mut old, mut value) = ([0u8; 8], 0, 0);
        let mut ops = [
            Op::Write {
                to: Remote::new(1, 0),
                from: &[1; 8],
                completion: Completion::Transmit,
            },
            Op::Write {
                to: Remote::new(1, 8),
                from: &[2; 8],
                completion: Completion::Transmit,
            },
            Op::Read {
                from: Remote::new(1, 16),
                into: &mut got,
            },
            Op::FetchAdd {
                at: Remote::new(1, 24),
                delta: 5,
                old: &mut old,
            },
            Op::Write {
                to: Remote::new(0, 32),
                from: &[3; 16],
                completion: Completion::Transmit,
            },
            Op::Fetch {
                at: Remote::new(1, 48),
                value: &mut value,
            },
        ];
        let submitted = logged(&ops);
        f.execute(&mut ops).unwrap();
        let batches = f.inner().batches();
        assert!(batches.iter().all(|b| b.len() == 1), "one by one");
        let executed: Vec<Logged> = batches.into_iter().flatten().collect();
        assert_eq!(executed.len(), submitted.len());
        for s in &submitted {
            assert_eq!(executed.iter().filter(|e| *e == s).count(), 1);
        }
        let differs = executed != submitted;
        reordered += usize::from(differs);
        assert_eq!(f.injected().reordered_batches, u64::from(differs));
        // And they all took effect.
        assert_eq!(peek(&g[1], 1, 0, 16), [[1; 8], [2; 8]].concat());
        assert_eq!(peek(&g[1], 0, 32, 16), [3; 16]);
        assert_eq!(peek(&g[1], 1, 24, 8), 5u64.to_le_bytes());
    }
    assert!(reordered > 0, "never reordered over 32 seeds");
}

#[test]
fn reordered_split_read_halves_run_apart() {
    let pattern = pattern();
    let mut apart = 0;
    for seed in 0..32 {
        let g = group();
        poke(&g[1], 1, 0, &pattern);
        let f = FaultyTransport::new(
            RecordingTransport::new(g[0].clone()),
            Faults::seeded(seed).reorder().split_reads(1.0),
        );
        let mut got = [0u8; 32];
        let mut value = 0;
        f.execute(&mut [
            Op::Read {
                from: Remote::new(1, 0),
                into: &mut got,
            },
            Op::Write {
                to: Remote::new(1, 64),
                from: &[1; 8],
                completion: Completion::Transmit,
            },
            Op::Fetch {
                at: Remote::new(1, 72),
                value: &mut value,
            },
        ])
        .unwrap();
        assert_eq!(got[..], pattern[..32]);
        let executed: Vec<Logged> = f.inner().batches().into_iter().flatten().collect();
        let reads: Vec<usize> = (0..executed.len())
            .filter(|&k| executed[k].kind == OpKind::Read)
            .collect();
        assert_eq!((executed.len(), reads.len()), (4, 2));
        let (a, b) = (executed[reads[0]], executed[reads[1]]);
        assert_eq!(a.len + b.len, 32);
        let (lo, hi) = if a.at.offset < b.at.offset {
            (a, b)
        } else {
            (b, a)
        };
        assert_eq!((lo.at.offset, hi.at.offset), (0, lo.len as u64));
        assert_eq!(hi.at.offset % 8, 0);
        apart += usize::from(reads[1] - reads[0] > 1);
    }
    assert!(apart > 0, "halves always adjacent over 32 seeds");
}

#[test]
fn messages_pass_through_together_when_reordering() {
    let g = group();
    let f = FaultyTransport::new(
        RecordingTransport::new(g[0].clone()),
        Faults::seeded(4).reorder(),
    );
    let (mut into, mut len) = ([0u8; 8], 0);
    // The local transport has no messages: the error comes from it.
    let err = f
        .execute(&mut [
            Op::Send {
                to: 1,
                data: &[1; 4],
            },
            Op::Write {
                to: Remote::new(1, 0),
                from: &[1; 8],
                completion: Completion::Transmit,
            },
            Op::Recv {
                from: 1,
                into: &mut into,
                len: &mut len,
            },
        ])
        .unwrap_err();
    assert!(matches!(err, Error::InvalidArgument(_)));
    let kinds = f.inner().kinds();
    assert!(
        kinds.contains(&vec![OpKind::Send, OpKind::Recv]),
        "{kinds:?}"
    );
    assert!(kinds.contains(&vec![OpKind::Write]), "{kinds:?}");
}

/// A mixed workload with every fault on; returns what it observed.
fn workload(seed: u64) -> (Vec<Vec<Logged>>, Vec<u8>, Injected, Vec<u8>) {
    let g = group();
    poke(&g[1], 1, 0, &pattern());
    let f = FaultyTransport::new(
        RecordingTransport::new(g[0].clone()),
        Faults::seeded(seed)
            .reorder()
            .split_reads(0.5)
            .tear_reads(0.5)
            .delay_writes(Delay::PastNextBatch, 0.5)
            .fail_op(7),
    );
    let mut seen = Vec::new();
    for round in 0..12u8 {
        let (mut a, mut b, mut old) = ([0u8; 32], [0u8; 24], 0);
        let r = f.execute(&mut [
            Op::Read {
                from: Remote::new(1, 8 * u64::from(round % 4)),
                into: &mut a,
            },
            Op::Write {
                to: Remote::new(1, 128 + 8 * u64::from(round % 3)),
                from: &[round; 16],
                completion: Completion::Transmit,
            },
            Op::Read {
                from: Remote::new(1, 130),
                into: &mut b,
            },
            Op::FetchAdd {
                at: Remote::new(1, 200),
                delta: 1,
                old: &mut old,
            },
        ]);
        seen.push(u8::from(r.is_ok()));
        seen.extend(a);
        seen.extend(b);
        seen.extend(old.to_le_bytes());
    }
    f.flush().unwrap();
    (
        f.inner().batches(),
        seen,
        f.injected(),
        peek(&g[1], 1, 0, 256),
    )
}

#[test]
fn same_seed_same_faults() {
    let first = workload(42);
    assert_eq!(first, workload(42));
    let inj = first.2;
    assert!(inj.reordered_batches > 0 && inj.split_reads > 0 && inj.torn_reads > 0);
    assert!(inj.delayed_writes > 0 && inj.failed_ops == 1);
    assert!((0..4).any(|s| workload(s) != first), "the seed matters");
}
