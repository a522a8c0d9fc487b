//! Progress on stderr: bars with bytes, rate and ETA on a terminal (`indicatif`), and
//! plain lines otherwise (a log file, CI, a pipe) — no control characters, a line at
//! the start, every quarter and at the end.

use std::io::IsTerminal;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

use crate::output::bytes;

/// Whether stderr is a terminal (and `FORGE_NO_PROGRESS` is unset).
pub fn interactive() -> bool {
    std::io::stderr().is_terminal() && std::env::var_os("FORGE_NO_PROGRESS").is_none()
}

/// A line for people on stderr.
pub fn note(message: impl std::fmt::Display) {
    eprintln!("{message}");
}

/// A byte-counting task (packing, uploading).
pub struct Bar {
    what: String,
    total: u64,
    started: Instant,
    bar: Option<ProgressBar>,
    /// Plain mode: bytes done and the next quarter to report.
    plain: Mutex<(u64, u64)>,
}

impl Bar {
    /// A task of `total` bytes, `what` naming it (`packing`, `uploading`).
    pub fn new(what: &str, total: u64) -> Self {
        let bar = interactive().then(|| {
            let bar = ProgressBar::with_draw_target(Some(total), ProgressDrawTarget::stderr());
            bar.set_style(
                ProgressStyle::with_template(
                    "{msg:>10} [{bar:30}] {bytes}/{total_bytes} {bytes_per_sec} ETA {eta}",
                )
                .unwrap_or_else(|_| ProgressStyle::default_bar())
                .progress_chars("=> "),
            );
            bar.set_message(what.to_string());
            bar.enable_steady_tick(Duration::from_millis(200));
            bar
        });
        if bar.is_none() {
            note(format!("{what}: {}", bytes(total)));
        }
        Bar {
            what: what.to_string(),
            total,
            started: Instant::now(),
            bar,
            plain: Mutex::new((0, 1)),
        }
    }

    /// `n` more bytes are done.
    pub fn inc(&self, n: u64) {
        if let Some(bar) = &self.bar {
            bar.inc(n);
            return;
        }
        let mut p = self
            .plain
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        p.0 += n;
        let total = self.total.max(1);
        while p.1 < 4 && p.0 * 4 >= total * p.1 {
            note(format!(
                "{}: {}% ({} of {})",
                self.what,
                p.1 * 25,
                bytes(p.0),
                bytes(self.total)
            ));
            p.1 += 1;
        }
    }

    /// Already done before this run (a resumed upload).
    pub fn skip(&self, n: u64) {
        if let Some(bar) = &self.bar {
            bar.set_position(n);
            bar.reset_eta();
        } else {
            let mut p = self
                .plain
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            p.0 += n;
        }
    }

    /// Done: one summary line.
    pub fn finish(&self, summary: &str) {
        if let Some(bar) = &self.bar {
            bar.finish_and_clear();
        }
        let secs = self.started.elapsed().as_secs_f64();
        #[allow(
            clippy::cast_precision_loss,
            clippy::cast_possible_truncation,
            clippy::cast_sign_loss
        )]
        let rate = if secs > 0.0 {
            bytes((self.total as f64 / secs) as u64)
        } else {
            bytes(self.total)
        };
        note(format!("{summary} in {secs:.1} s ({rate}/s)"));
    }

    /// Stops without a summary (on an error).
    pub fn abandon(&self) {
        if let Some(bar) = &self.bar {
            bar.abandon();
        }
    }
}
