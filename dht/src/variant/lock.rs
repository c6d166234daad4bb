//! Lock words given back: the release step of the locking variants
//! (coarse, fine) after success or a failed batch.

use std::time::{Duration, Instant};

use super::{word, Batch, Hold, Probe, Role, Run, Shape, Step};
use crate::outcome::Error;
use crate::transport::Remote;

/// Plans the release of every lock-word hold of `run`'s probes (fine, and
/// coarse per region), after rewriting the data of a dirty hold whose write
/// may not have landed: first the rewrites, then (next batch) the releases.
/// Returns false if nothing is held any more.
pub(crate) fn plan_lock_release(run: &mut Run<'_>, b: &mut Batch) -> bool {
    b.clear();
    let shape = *run.shape;
    // Rewrites first: a hold whose write failed still owns the bucket, and
    // the record must be whole before the version moves on.
    for i in 0..run.probes.len() {
        let p = run.probes[i];
        // (Coarse: the hold is the region's, kept by the group's first
        // probe; every probe that stored under it is dirty.)
        if p.dirty && p.phase == Some(Role::Store) {
            run.plan_store(b, i);
        }
    }
    if !b.is_empty() {
        return true;
    }
    for i in 0..run.probes.len() {
        let p = run.probes[i];
        if p.hold == Hold::None {
            continue;
        }
        let to = if p.dirty {
            word::bumped(p.word)
        } else {
            p.free
        };
        b.cas(
            Remote::new(p.rank, word_offset(&shape, p)),
            p.word,
            to,
            i,
            Role::Release,
        );
        run.probes[i].phase = Some(Role::Release);
    }
    !b.is_empty()
}

/// The offset of the lock word a probe holds: its bucket's (fine) or the
/// region's (coarse).
fn word_offset(shape: &Shape, p: Probe) -> u64 {
    match shape.layout.variant {
        crate::Variant::Coarse => 0,
        _ => shape.layout.offset(p.bucket),
    }
}

/// After a release batch: the releases that completed hold nothing any
/// more; a completed rewrite leaves its hold to be released next.
pub(crate) fn released(run: &mut Run<'_>, b: &Batch) {
    for i in 0..b.len() {
        let op = b.op(i);
        let p = &mut run.probes[op.probe as usize];
        match op.role {
            Role::Release => {
                p.hold = Hold::None;
                p.phase = None;
            }
            Role::Store => p.phase = None,
            _ => {}
        }
    }
}

/// The release loop shared by the locking variants, after an error:
/// re-plans until nothing is held, or until releases must stop. The
/// error stays the one that started it.
pub(crate) fn release_step(run: &mut Run<'_>, b: &mut Batch, now: Instant) -> Step {
    if plan_lock_release(run, b) {
        if run.may_retry_release(now) {
            return Step::Issue;
        }
        b.clear();
    }
    Step::Done
}

/// A failed batch in a locking variant: an acquire in it may have landed,
/// so it counts as held until its release says otherwise; then release.
/// Retries of a failed release wait a millisecond between attempts.
pub(crate) fn lock_failed(
    run: &mut Run<'_>,
    releasing: &mut bool,
    e: Error,
    b: &mut Batch,
    now: Instant,
) -> Step {
    run.failed(e, now);
    for p in run.probes.iter_mut() {
        if p.phase == Some(Role::Acquire) && p.hold == Hold::None {
            p.hold = Hold::Maybe;
        }
        p.done = true;
    }
    let retry = std::mem::replace(releasing, true);
    let step = release_step(run, b, now);
    if retry && step == Step::Issue {
        b.wait = Some(Duration::from_millis(1));
    }
    step
}

/// A release batch of a locking variant completed.
pub(crate) fn lock_released(run: &mut Run<'_>, b: &mut Batch, now: Instant) -> Step {
    released(run, b);
    release_step(run, b, now)
}
