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
    /// A count arrived: the bar replaced the initial spinner.
    counting: bool,
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
        CompileBar::with_bar(bar, label)
    }

    /// A compile bar drawing through `bar`.
    fn with_bar(bar: ProgressBar, label: &str) -> CompileBar {
        let spinner = ProgressStyle::with_template("{spinner} {prefix} {msg} ({elapsed})")
            .unwrap_or_else(|_| ProgressStyle::default_spinner());
        bar.set_style(spinner);
        bar.set_prefix(label.to_string());
        bar.set_message("partitioning");
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
                    show_counts(&bar, &mut s);
                }
                CompileProgress::Building { kernels } => {
                    s.building = true;
                    bar.set_position(0);
                    bar.set_length(kernels as u64);
                    bar.set_message("compiling");
                    show_counts(&bar, &mut s);
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

/// Replaces the initial spinner by the counting bar, once.
fn show_counts(bar: &ProgressBar, s: &mut State) {
    if s.counting {
        return;
    }
    s.counting = true;
    let style = ProgressStyle::with_template(
        "{spinner} {prefix} {msg:9} [{bar:30}] {pos}/{len} kernels ({elapsed})",
    )
    .map(|st| st.progress_chars("=> "))
    .unwrap_or_else(|_| ProgressStyle::default_bar());
    bar.set_style(style);
    if !s.building {
        bar.set_message("lowering");
    }
}

impl Drop for CompileBar {
    fn drop(&mut self) {
        self.bar.finish_and_clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_lowered_then_built_kernels() {
        let cb = CompileBar::with_bar(ProgressBar::hidden(), "m");
        let sink = cb.sink();
        assert_eq!(cb.bar.message(), "partitioning");
        sink.report(CompileProgress::Lowered { done: 1, total: 3 });
        assert_eq!((cb.bar.position(), cb.bar.length()), (1, Some(3)));
        assert_eq!(cb.bar.message(), "lowering");
        // A split group raises the total.
        sink.report(CompileProgress::Lowered { done: 4, total: 4 });
        sink.report(CompileProgress::Building { kernels: 4 });
        assert_eq!((cb.bar.position(), cb.bar.length()), (0, Some(4)));
        assert_eq!(cb.bar.message(), "compiling");
        std::thread::scope(|s| {
            for k in [1, 3] {
                let sink = sink.clone();
                s.spawn(move || sink.report(CompileProgress::Built { kernels: k }));
            }
        });
        assert_eq!(cb.bar.position(), 4);
        cb.finish();
    }
}
