//! The summary table of a tuning session.

use std::collections::BTreeMap;

use crate::observer::{ResultSource, TaskSummary};

/// A human-readable duration: `µs` below a millisecond, `ms` below a second, else `s`.
pub fn format_seconds(s: f64) -> String {
    if s < 1e-3 {
        format!("{:.1} µs", s * 1e6)
    } else if s < 1.0 {
        format!("{:.3} ms", s * 1e3)
    } else {
        format!("{s:.2} s")
    }
}

/// One row per distinct task (repeated tasks are counted in `uses`): task, uses, candidates,
/// best time, heuristic time, speedup of the winner over the heuristic, where the result
/// came from, and the winner's label (followed by the schedule compiled instead, when an
/// in-model check preferred the heuristic). Rows are sorted by task key.
pub fn render_table(summaries: &[TaskSummary]) -> String {
    let mut rows: BTreeMap<&str, (usize, &TaskSummary)> = BTreeMap::new();
    for s in summaries {
        rows.entry(&s.task).or_insert((0, s)).0 += 1;
    }
    let header = [
        "task",
        "uses",
        "candidates",
        "best",
        "heuristic",
        "speedup",
        "source",
        "winner",
    ];
    let mut table: Vec<[String; 8]> = vec![header.map(str::to_string)];
    for (task, (uses, s)) in rows {
        let time = |t: &Option<crate::stats::Stats>| {
            t.as_ref()
                .map_or_else(|| "-".to_string(), |t| format_seconds(t.median))
        };
        let source = match s.source {
            ResultSource::Heuristic => "level 0",
            ResultSource::Cache => "cache",
            ResultSource::Tuned => "tuned",
        };
        table.push([
            task.to_string(),
            uses.to_string(),
            format!(
                "{} ({} pruned, {} failed)",
                s.candidates, s.pruned, s.failed
            ),
            time(&s.best),
            time(&s.heuristic),
            s.speedup()
                .map_or_else(|| "-".to_string(), |x| format!("{x:.2}x")),
            source.to_string(),
            if s.chosen == s.winner || s.chosen.is_empty() {
                s.winner.clone()
            } else {
                format!("{} (in the model: {})", s.winner, s.chosen)
            },
        ]);
    }
    align_columns(&table)
}

/// `rows` as text, one line per row, each column padded to its widest cell and columns two
/// spaces apart (trailing spaces trimmed).
pub fn align_columns<const N: usize>(rows: &[[String; N]]) -> String {
    let widths: Vec<usize> = (0..N)
        .map(|c| rows.iter().map(|r| r[c].chars().count()).max().unwrap_or(0))
        .collect();
    let mut out = String::new();
    for row in rows {
        let cells: Vec<String> = row
            .iter()
            .zip(&widths)
            .map(|(cell, w)| format!("{cell:<w$}"))
            .collect();
        out.push_str(cells.join("  ").trim_end());
        out.push('\n');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::level::TuneLevel;
    use crate::stats::Stats;

    fn summary(task: &str, best: f64, heuristic: f64) -> TaskSummary {
        let stats = |m: f64| Stats {
            median: m,
            min: m,
            max: m,
            mad: 0.0,
            runs: 3,
        };
        TaskSummary {
            task: task.into(),
            space: "s".into(),
            level: TuneLevel::Subset,
            candidates: 7,
            measured: 5,
            pruned: 1,
            failed: 1,
            winner: "w".into(),
            chosen: "w".into(),
            best: Some(stats(best)),
            heuristic: Some(stats(heuristic)),
            source: ResultSource::Tuned,
            seconds: 1.0,
        }
    }

    #[test]
    fn table_merges_repeated_tasks_and_shows_speedup() {
        let t = render_table(&[
            summary("b", 0.002, 0.003),
            summary("a", 0.5e-3, 0.5e-3),
            summary("b", 0.002, 0.003),
        ]);
        let lines: Vec<&str> = t.lines().collect();
        assert_eq!(lines.len(), 3, "{t}");
        assert!(lines[0].starts_with("task"));
        assert!(
            lines[1].starts_with("a ") && lines[1].contains("1.00x"),
            "{t}"
        );
        assert!(
            lines[2].starts_with("b ") && lines[2].contains("1.50x"),
            "{t}"
        );
        assert!(
            lines[2].contains("2.000 ms") && lines[2].contains("3.000 ms"),
            "{t}"
        );
        assert!(lines[2].split_whitespace().nth(1) == Some("2"), "{t}");
    }

    #[test]
    fn table_names_the_schedule_an_in_model_check_kept() {
        let kept = TaskSummary {
            chosen: "h".into(),
            ..summary("c", 0.001, 0.002)
        };
        let t = render_table(&[kept, summary("d", 0.001, 0.002)]);
        assert!(
            t.lines()
                .nth(1)
                .is_some_and(|l| l.ends_with("w (in the model: h)")),
            "{t}"
        );
        assert!(t.lines().nth(2).is_some_and(|l| l.ends_with(" w")), "{t}");
    }

    #[test]
    fn durations_pick_a_unit() {
        assert_eq!(format_seconds(2.5e-5), "25.0 µs");
        assert_eq!(format_seconds(0.0125), "12.500 ms");
        assert_eq!(format_seconds(3.0), "3.00 s");
    }
}
