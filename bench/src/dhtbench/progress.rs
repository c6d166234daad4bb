//! A progress bar on standard error for phases longer than a few seconds,
//! drawn by the reporting rank only and updated from the clock reading the
//! timed loop takes anyway (no clock read of its own).

use std::time::{Duration, Instant};

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

/// After how long a phase shows a bar.
const SHOW_AFTER: Duration = Duration::from_secs(3);
/// How often the bar is redrawn.
const EVERY: Duration = Duration::from_millis(200);

/// A phase's progress, in batches.
#[derive(Debug)]
pub struct Progress {
    /// Off on every rank but the reporting one.
    on: bool,
    label: String,
    total: usize,
    next: Instant,
    bar: Option<ProgressBar>,
}

impl Progress {
    /// Progress of `total` batches of the phase `label`, shown if `on`.
    pub fn new(on: bool, label: String, total: usize) -> Progress {
        let start = Instant::now();
        Progress {
            on,
            label,
            total,
            next: start + SHOW_AFTER,
            bar: None,
        }
    }

    /// `done` batches are done at `now`.
    pub fn at(&mut self, done: usize, now: Instant) {
        if !self.on || now < self.next {
            return;
        }
        self.next = now + EVERY;
        let bar = self.bar.get_or_insert_with(|| {
            // Hidden when stderr is not a terminal (CI logs, pipes).
            let b = ProgressBar::with_draw_target(
                Some(self.total as u64),
                ProgressDrawTarget::stderr(),
            );
            if let Ok(style) =
                ProgressStyle::with_template("{prefix} [{bar:30}] {pos}/{len} batches, {eta} left")
            {
                b.set_style(style.progress_chars("=> "));
            }
            b.set_prefix(self.label.clone());
            b
        });
        bar.set_position(done as u64);
    }
}

impl Drop for Progress {
    fn drop(&mut self) {
        if let Some(b) = self.bar.take() {
            b.finish_and_clear();
        }
    }
}
