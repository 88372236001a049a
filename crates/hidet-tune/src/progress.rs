//! A progress bar for tuning sessions (to stderr, hidden when stderr is not a terminal), and a
//! collector of the task summaries.

use std::io::IsTerminal;
use std::sync::Mutex;
use std::time::Duration;

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

use crate::observer::{TaskSummary, TuneEvent, TuneObserver};

/// Shows one bar while candidates compile and one while they are measured, each with an
/// ETA; prints warnings above the bar; keeps every [`TaskSummary`].
#[derive(Debug, Default)]
pub struct ProgressReporter {
    bar: Mutex<Option<ProgressBar>>,
    candidates: Mutex<usize>,
    summaries: Mutex<Vec<TaskSummary>>,
    warnings: Mutex<Vec<String>>,
}

impl ProgressReporter {
    pub fn new() -> ProgressReporter {
        ProgressReporter::default()
    }

    /// The summaries of every finished task, in the order they finished.
    pub fn summaries(&self) -> Vec<TaskSummary> {
        self.summaries.lock().map(|s| s.clone()).unwrap_or_default()
    }

    /// Every warning reported so far.
    pub fn warnings(&self) -> Vec<String> {
        self.warnings.lock().map(|w| w.clone()).unwrap_or_default()
    }

    fn start_bar(&self, len: usize, prefix: &'static str) {
        let target = if std::io::stderr().is_terminal() {
            ProgressDrawTarget::stderr()
        } else {
            ProgressDrawTarget::hidden()
        };
        let bar = ProgressBar::with_draw_target(Some(len as u64), target);
        if let Ok(style) = ProgressStyle::with_template(
            "{prefix:>9} [{bar:30}] {pos}/{len} {elapsed_precise} ETA {eta} {wide_msg}",
        ) {
            bar.set_style(style.progress_chars("=> "));
        }
        bar.set_prefix(prefix);
        bar.enable_steady_tick(Duration::from_millis(200));
        if let Ok(mut b) = self.bar.lock() {
            if let Some(old) = b.replace(bar) {
                old.finish_and_clear();
            }
        }
    }

    fn with_bar(&self, f: impl FnOnce(&ProgressBar)) {
        if let Ok(b) = self.bar.lock() {
            if let Some(bar) = b.as_ref() {
                f(bar);
            }
        }
    }

    /// Removes the bar (called when a session ends).
    pub fn finish(&self) {
        if let Ok(mut b) = self.bar.lock() {
            if let Some(bar) = b.take() {
                bar.finish_and_clear();
            }
        }
    }
}

impl TuneObserver for ProgressReporter {
    fn event(&self, event: &TuneEvent<'_>) {
        match event {
            TuneEvent::Started {
                units, candidates, ..
            } => {
                if let Ok(mut c) = self.candidates.lock() {
                    *c = *candidates;
                }
                if *units > 0 {
                    self.start_bar(*units, "compiling");
                }
            }
            TuneEvent::UnitCompiled { .. } => self.with_bar(|b| b.inc(1)),
            TuneEvent::CompileFinished { .. } => {
                let n = self.candidates.lock().map(|c| *c).unwrap_or(0);
                self.start_bar(n, "measuring");
            }
            TuneEvent::CandidateMeasured { label, .. } => self.with_bar(|b| {
                b.inc(1);
                b.set_message(label.to_string());
            }),
            TuneEvent::TaskFinished(summary) => {
                if let Ok(mut s) = self.summaries.lock() {
                    s.push((*summary).clone());
                }
            }
            TuneEvent::Warning(message) => {
                let mut printed = false;
                self.with_bar(|b| {
                    b.suspend(|| eprintln!("warning: {message}"));
                    printed = true;
                });
                if !printed {
                    eprintln!("warning: {message}");
                }
                if let Ok(mut w) = self.warnings.lock() {
                    w.push(message.to_string());
                }
            }
        }
    }
}
