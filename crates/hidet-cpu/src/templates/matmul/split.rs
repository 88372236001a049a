//! How the row (or column) panels of a product are shared among the threads of
//! one grid dimension.

use super::schedule::ceil_div;
use hidet_ir::prelude::*;

/// `panels` panels of `unit` granules each (rows, or `W`-column vectors), except the last,
/// which holds what is left of `granules`, shared among `parts` threads in contiguous runs:
/// the last thread takes `last` panels (the partial one among them), every other thread `per`
/// panels counted back from there, and the first threads whatever is left (possibly none).
/// `per` minimizes the granules of the busiest thread, so a partial last panel counts for
/// what it holds: cutting after every `⌈panels / parts⌉` panels instead can leave the first
/// thread almost a whole panel over an even share and the last one short.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct PanelSplit {
    panels: i64,
    parts: i64,
    unit: i64,
    granules: i64,
    per: i64,
    last: i64,
}

impl PanelSplit {
    /// The split of `extent` elements in panels of `panel` elements measured in granules of
    /// `granule` elements, among `parts` threads. Requires positive arguments and `granule`
    /// dividing `panel`.
    pub fn new(extent: i64, panel: i64, granule: i64, parts: i64) -> PanelSplit {
        let panels = ceil_div(extent, panel);
        let unit = panel / granule;
        let granules = ceil_div(extent, granule);
        let edge = granules - (panels - 1) * unit;
        let last_for = |per: i64| (panels - (parts - 1) * per).max(1);
        let busiest = |per: i64| (per * unit).max((last_for(per) - 1) * unit + edge);
        let per = (1..=panels)
            .min_by_key(|&per| busiest(per))
            .expect("an extent of one element or more has a panel");
        PanelSplit {
            panels,
            parts,
            unit,
            granules,
            per,
            last: last_for(per),
        }
    }

    /// The first panel of thread `t` (`panels` for `t = parts`).
    pub fn start(&self, t: i64) -> i64 {
        if t >= self.parts {
            return self.panels;
        }
        (self.panels - self.last - (self.parts - 1 - t) * self.per).max(0)
    }

    /// [`PanelSplit::start`] of a thread index computed at run time, `0 ≤ t < parts`.
    pub fn start_expr(&self, t: &Expr) -> Expr {
        if self.parts == 1 {
            return Expr::int(0);
        }
        let first = self.panels - self.last - (self.parts - 1) * self.per;
        (t * self.per + first).max(0)
    }

    /// The panel after the last of thread `t`, `0 ≤ t < parts`.
    pub fn end_expr(&self, t: &Expr) -> Expr {
        if self.parts == 1 {
            return Expr::int(self.panels);
        }
        let next = self.start_expr(&(t + 1));
        Expr::select(t.eq(self.parts - 1), self.panels, next)
    }

    /// Panels of the thread with the most.
    pub fn max_panels(&self) -> i64 {
        (0..self.parts)
            .map(|t| self.start(t + 1) - self.start(t))
            .max()
            .unwrap_or(0)
    }

    /// Granules of the thread with the most.
    pub fn max_granules(&self) -> i64 {
        (0..self.parts)
            .map(|t| self.granules_before(self.start(t + 1)) - self.granules_before(self.start(t)))
            .max()
            .unwrap_or(0)
    }

    /// Some thread has no panel.
    pub fn has_idle_thread(&self) -> bool {
        (0..self.parts).any(|t| self.start(t + 1) == self.start(t))
    }

    fn granules_before(&self, panel: i64) -> i64 {
        (panel * self.unit).min(self.granules)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_partial_last_panel_counts_for_its_granules() {
        // 784 columns in 32-column panels of 16-lane vectors: 24 full panels and a
        // half one. Whole-panel cuts gave 13 vs 11.5 panels.
        let s = PanelSplit::new(784, 32, 16, 2);
        assert_eq!((s.start(0), s.start(1), s.start(2)), (0, 12, 25));
        assert_eq!(s.max_panels(), 13);
        assert_eq!(s.max_granules(), 25);
        // 256 rows in 14-row panels: 18 full panels and 4 rows.
        let s = PanelSplit::new(256, 14, 1, 2);
        assert_eq!(s.start(1), 9);
        assert_eq!(s.max_granules(), 130);
    }

    #[test]
    fn every_panel_has_one_thread_and_shares_are_near_even() {
        for extent in 1..200 {
            for (panel, granule) in [(14, 1), (6, 1), (32, 16), (64, 16), (16, 8)] {
                for parts in 1..6 {
                    let s = PanelSplit::new(extent, panel, granule, parts);
                    let starts: Vec<i64> = (0..=parts).map(|t| s.start(t)).collect();
                    assert_eq!(starts[0], 0);
                    assert_eq!(starts[parts as usize], s.panels);
                    assert!(starts.windows(2).all(|w| w[0] <= w[1]), "{starts:?}");
                    let granules = ceil_div(extent, granule);
                    let even = ceil_div(granules, parts);
                    let unit = panel / granule;
                    assert!(s.max_granules() <= even + unit, "{s:?}");
                    assert!(
                        s.max_granules() <= ceil_div(s.panels, parts) * unit,
                        "{s:?} {starts:?}"
                    );
                    for t in 0..parts {
                        let value = |e: Expr| {
                            e.eval_int(&|_| None)
                                .expect("a constant expression evaluates")
                        };
                        let ti = Expr::int(t);
                        assert_eq!(value(s.start_expr(&ti)), s.start(t));
                        assert_eq!(value(s.end_expr(&ti)), s.start(t + 1));
                    }
                }
            }
        }
    }
}
