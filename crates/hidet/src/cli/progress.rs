//! The compile progress bar: kernels lowered, then kernels built, out of the model's total,
//! drawn on stderr and hidden when stderr is not a terminal (pipes, CI logs, tests).

use std::io::IsTerminal;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use hidet::graph::compiled::{CompileProgress, ProgressSink};
use indicatif::{ProgressBar, ProgressStyle};

/// What the bar shows: the phase and the counts it has seen.
#[derive(Debug, Default)]
struct State {
    building: bool,
    built: usize,
}

/// A progress bar for one compilation (see the module docs).
pub struct CompileBar {
    bar: ProgressBar,
    state: Arc<Mutex<State>>,
}

impl CompileBar {
    /// A bar labelled `label`; hidden unless stderr is a terminal.
    pub fn new(label: &str) -> CompileBar {
        let bar = if std::io::stderr().is_terminal() {
            ProgressBar::new(0)
        } else {
            ProgressBar::hidden()
        };
        let style = ProgressStyle::with_template(
            "{spinner} {prefix} {msg:9} [{bar:30}] {pos}/{len} kernels ({elapsed})",
        )
        .map(|s| s.progress_chars("=> "))
        .unwrap_or_else(|_| ProgressStyle::default_bar());
        bar.set_style(style);
        bar.set_prefix(label.to_string());
        bar.set_message("lowering");
        bar.enable_steady_tick(Duration::from_millis(120));
        CompileBar {
            bar,
            state: Arc::new(Mutex::new(State::default())),
        }
    }

    /// The sink to put in `CompileOptions::progress`.
    pub fn sink(&self) -> ProgressSink {
        let bar = self.bar.clone();
        let state = Arc::clone(&self.state);
        ProgressSink::new(move |event| {
            let Ok(mut s) = state.lock() else { return };
            match event {
                CompileProgress::Lowered { done, total } => {
                    bar.set_length(total as u64);
                    bar.set_position(done as u64);
                }
                CompileProgress::Building { kernels } => {
                    s.building = true;
                    bar.set_message("compiling");
                    bar.set_length(kernels as u64);
                    bar.set_position(0);
                }
                CompileProgress::Built { kernels } if s.building => {
                    s.built += kernels;
                    bar.set_position(s.built as u64);
                }
                CompileProgress::Built { .. } => {}
            }
        })
    }

    /// Removes the bar from the terminal.
    pub fn finish(&self) {
        self.bar.finish_and_clear();
    }
}

impl Drop for CompileBar {
    fn drop(&mut self) {
        self.bar.finish_and_clear();
    }
}
