//! Task mappings: who does which task, in what order (DESIGN §2).
//!
//! A [`TaskMapping`] has `n` workers and a task shape `D`; each worker
//! `w < n` owns an ordered list of tasks `f(w)` (multi-indices in `D`).
//! Mappings are built from [`spatial`] and [`repeat`] atoms and composed with
//! `*`: in `outer * inner`, the outer mapping hands out tiles and the inner one
//! places tasks inside a tile. Composing mappings of different ranks first
//! pads the shorter one with leading dimensions of extent 1.

use crate::expr::Expr;
use crate::stmt::LoopKind;
use std::fmt;
use std::sync::Arc;

/// Errors constructing a task mapping.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum MappingError {
    #[error("task mapping dimension {dim} has extent {extent}; extents must be positive")]
    NonPositiveExtent { dim: usize, extent: i64 },
    #[error("ranks {ranks:?} are not a permutation of 0..{rank}")]
    BadRanks { ranks: Vec<usize>, rank: usize },
    #[error("{attrs} loop attributes given for a mapping of rank {rank}")]
    BadAttrs { attrs: usize, rank: usize },
    #[error("cannot spread task shape {shape:?} evenly over {workers} workers")]
    CannotAutoMap { shape: Vec<i64>, workers: i64 },
}

/// A task mapping. Cheap to clone.
#[derive(Clone, PartialEq)]
pub struct TaskMapping(Arc<MappingNode>);

/// The structure of a task mapping.
#[derive(Clone, Debug, PartialEq)]
pub enum MappingNode {
    /// `∏shape` workers, one task each: worker `w` runs the unravel of `w`
    /// over `shape` in the dimension order given by `ranks`.
    Spatial { shape: Vec<i64>, ranks: Vec<usize> },
    /// One worker runs every task of `shape`, in the order given by `ranks`;
    /// `attrs[i]` is how the loop over dimension `i` is run.
    Repeat {
        shape: Vec<i64>,
        ranks: Vec<usize>,
        attrs: Vec<LoopKind>,
    },
    /// `outer * inner`.
    Compose(TaskMapping, TaskMapping),
}

fn check_shape(shape: &[i64]) -> Result<(), MappingError> {
    match shape.iter().position(|&e| e <= 0) {
        Some(dim) => Err(MappingError::NonPositiveExtent {
            dim,
            extent: shape[dim],
        }),
        None => Ok(()),
    }
}

fn check_ranks(ranks: &[usize], rank: usize) -> Result<(), MappingError> {
    let mut seen = vec![false; rank];
    let ok = ranks.len() == rank
        && ranks
            .iter()
            .all(|&r| r < rank && !std::mem::replace(&mut seen[r], true));
    if ok {
        Ok(())
    } else {
        Err(MappingError::BadRanks {
            ranks: ranks.to_vec(),
            rank,
        })
    }
}

fn row_major_ranks(rank: usize) -> Vec<usize> {
    (0..rank).collect()
}

fn column_major_ranks(rank: usize) -> Vec<usize> {
    (0..rank).rev().collect()
}

/// The dimensions of a shape listed from outermost (slowest) to innermost
/// (fastest) according to `ranks` (`ranks[d]` is dimension `d`'s position).
pub fn dims_in_order(ranks: &[usize]) -> Vec<usize> {
    let mut dims: Vec<usize> = (0..ranks.len()).collect();
    dims.sort_by_key(|&d| ranks[d]);
    dims
}

/// Unravels `linear` (in `0..∏shape`) into a multi-index over `shape`, the
/// last dimension in `ranks` order varying fastest.
fn unravel(mut linear: i64, shape: &[i64], ranks: &[usize]) -> Vec<i64> {
    let mut index = vec![0; shape.len()];
    for &d in dims_in_order(ranks).iter().rev() {
        index[d] = linear % shape[d];
        linear /= shape[d];
    }
    index
}

/// `spatial(shape)`: `∏shape` workers, worker `w` runs task `unravel(w)` (row-major).
/// Fails if an extent is not positive.
pub fn spatial(shape: impl Into<Vec<i64>>) -> Result<TaskMapping, MappingError> {
    let shape = shape.into();
    let ranks = row_major_ranks(shape.len());
    spatial_ranked(shape, ranks)
}

/// `spatial` with an explicit dimension order.
pub fn spatial_ranked(
    shape: impl Into<Vec<i64>>,
    ranks: Vec<usize>,
) -> Result<TaskMapping, MappingError> {
    let shape = shape.into();
    check_shape(&shape)?;
    check_ranks(&ranks, shape.len())?;
    Ok(TaskMapping(Arc::new(MappingNode::Spatial { shape, ranks })))
}

/// `spatial` with a column-major order (the first dimension varies fastest).
pub fn column_spatial(shape: impl Into<Vec<i64>>) -> Result<TaskMapping, MappingError> {
    let shape = shape.into();
    let ranks = column_major_ranks(shape.len());
    spatial_ranked(shape, ranks)
}

/// `repeat(shape)`: one worker runs every task in row-major order, serial loops.
pub fn repeat(shape: impl Into<Vec<i64>>) -> Result<TaskMapping, MappingError> {
    let shape = shape.into();
    let rank = shape.len();
    repeat_with(shape, row_major_ranks(rank), vec![LoopKind::Serial; rank])
}

/// `repeat` whose loops are all fully unrolled.
pub fn repeat_unrolled(shape: impl Into<Vec<i64>>) -> Result<TaskMapping, MappingError> {
    let shape = shape.into();
    let rank = shape.len();
    repeat_with(
        shape,
        row_major_ranks(rank),
        vec![LoopKind::Unroll(None); rank],
    )
}

/// `repeat` with a column-major order.
pub fn column_repeat(shape: impl Into<Vec<i64>>) -> Result<TaskMapping, MappingError> {
    let shape = shape.into();
    let rank = shape.len();
    repeat_with(
        shape,
        column_major_ranks(rank),
        vec![LoopKind::Serial; rank],
    )
}

/// `repeat` with an explicit dimension order and per-dimension loop kinds.
pub fn repeat_with(
    shape: impl Into<Vec<i64>>,
    ranks: Vec<usize>,
    attrs: Vec<LoopKind>,
) -> Result<TaskMapping, MappingError> {
    let shape = shape.into();
    check_shape(&shape)?;
    check_ranks(&ranks, shape.len())?;
    if attrs.len() != shape.len() {
        return Err(MappingError::BadAttrs {
            attrs: attrs.len(),
            rank: shape.len(),
        });
    }
    Ok(TaskMapping(Arc::new(MappingNode::Repeat {
        shape,
        ranks,
        attrs,
    })))
}

/// `repeat(r) * spatial(s)` with `r ⊙ s == task_shape` and `∏s == workers`,
/// choosing `s` from the innermost dimension outwards so that consecutive
/// workers get consecutive tasks. Fails when `workers` cannot be spread
/// evenly (each `s_i` must divide `task_shape[i]`).
pub fn auto_map(task_shape: &[i64], workers: i64) -> Result<TaskMapping, MappingError> {
    check_shape(task_shape)?;
    let mut remaining = workers;
    let mut spatial_shape = vec![1; task_shape.len()];
    for d in (0..task_shape.len()).rev() {
        let s = gcd(task_shape[d], remaining);
        spatial_shape[d] = s;
        remaining /= s;
    }
    if remaining != 1 || workers <= 0 {
        return Err(MappingError::CannotAutoMap {
            shape: task_shape.to_vec(),
            workers,
        });
    }
    let repeat_shape: Vec<i64> = task_shape
        .iter()
        .zip(&spatial_shape)
        .map(|(t, s)| t / s)
        .collect();
    Ok(repeat(repeat_shape)? * spatial(spatial_shape)?)
}

fn gcd(a: i64, b: i64) -> i64 {
    if b == 0 {
        a.abs()
    } else {
        gcd(b, a % b)
    }
}

impl TaskMapping {
    pub fn node(&self) -> &MappingNode {
        &self.0
    }

    /// The number of workers `n`.
    pub fn num_workers(&self) -> i64 {
        match self.node() {
            MappingNode::Spatial { shape, .. } => shape.iter().product(),
            MappingNode::Repeat { .. } => 1,
            MappingNode::Compose(a, b) => a.num_workers() * b.num_workers(),
        }
    }

    /// The task shape `D`.
    pub fn task_shape(&self) -> Vec<i64> {
        match self.node() {
            MappingNode::Spatial { shape, .. } | MappingNode::Repeat { shape, .. } => shape.clone(),
            MappingNode::Compose(a, b) => a
                .task_shape()
                .iter()
                .zip(b.task_shape())
                .map(|(x, y)| x * y)
                .collect(),
        }
    }

    /// The number of task dimensions.
    pub fn rank(&self) -> usize {
        match self.node() {
            MappingNode::Spatial { shape, .. } | MappingNode::Repeat { shape, .. } => shape.len(),
            MappingNode::Compose(a, _) => a.rank(),
        }
    }

    /// The number of tasks each worker runs.
    pub fn tasks_per_worker(&self) -> i64 {
        match self.node() {
            MappingNode::Spatial { .. } => 1,
            MappingNode::Repeat { shape, .. } => shape.iter().product(),
            MappingNode::Compose(a, b) => a.tasks_per_worker() * b.tasks_per_worker(),
        }
    }

    /// The ordered task list `f(w)`; empty when `w` is not in `0..n`.
    pub fn tasks_of(&self, w: i64) -> Vec<Vec<i64>> {
        if w < 0 || w >= self.num_workers() {
            return Vec::new();
        }
        match self.node() {
            MappingNode::Spatial { shape, ranks } => vec![unravel(w, shape, ranks)],
            MappingNode::Repeat { shape, ranks, .. } => {
                let total: i64 = shape.iter().product();
                (0..total).map(|i| unravel(i, shape, ranks)).collect()
            }
            MappingNode::Compose(outer, inner) => {
                let n2 = inner.num_workers();
                let d2 = inner.task_shape();
                let inner_tasks = inner.tasks_of(w % n2);
                let mut out = Vec::new();
                for t1 in outer.tasks_of(w / n2) {
                    for t2 in &inner_tasks {
                        out.push(
                            t1.iter()
                                .zip(&d2)
                                .zip(t2)
                                .map(|((a, d), b)| a * d + b)
                                .collect(),
                        );
                    }
                }
                out
            }
        }
    }

    /// This mapping with `rank - self.rank()` leading dimensions of extent 1.
    /// Requires `rank >= self.rank()`.
    pub fn padded_to(&self, rank: usize) -> TaskMapping {
        let extra = rank.saturating_sub(self.rank());
        if extra == 0 {
            return self.clone();
        }
        let pad_shape = |shape: &[i64]| -> Vec<i64> {
            std::iter::repeat_n(1, extra)
                .chain(shape.iter().copied())
                .collect()
        };
        let pad_ranks = |ranks: &[usize]| -> Vec<usize> {
            (0..extra).chain(ranks.iter().map(|r| r + extra)).collect()
        };
        let node = match self.node() {
            MappingNode::Spatial { shape, ranks } => MappingNode::Spatial {
                shape: pad_shape(shape),
                ranks: pad_ranks(ranks),
            },
            MappingNode::Repeat {
                shape,
                ranks,
                attrs,
            } => MappingNode::Repeat {
                shape: pad_shape(shape),
                ranks: pad_ranks(ranks),
                attrs: std::iter::repeat_n(LoopKind::Serial, extra)
                    .chain(attrs.iter().copied())
                    .collect(),
            },
            MappingNode::Compose(a, b) => {
                MappingNode::Compose(a.padded_to(rank), b.padded_to(rank))
            }
        };
        TaskMapping(Arc::new(node))
    }

    /// `for task in self.on(worker)`: the tasks of the worker given by an expression.
    pub fn on(&self, worker: impl Into<Expr>) -> MappingOn {
        MappingOn {
            mapping: self.clone(),
            worker: worker.into(),
        }
    }
}

impl std::ops::Mul for TaskMapping {
    type Output = TaskMapping;

    /// Composition `self * inner` (see the module docs); ranks are padded to match.
    fn mul(self, inner: TaskMapping) -> TaskMapping {
        let rank = self.rank().max(inner.rank());
        TaskMapping(Arc::new(MappingNode::Compose(
            self.padded_to(rank),
            inner.padded_to(rank),
        )))
    }
}

impl std::ops::Mul for &TaskMapping {
    type Output = TaskMapping;
    fn mul(self, inner: &TaskMapping) -> TaskMapping {
        self.clone() * inner.clone()
    }
}

/// A mapping applied to a worker expression, as iterated by
/// `FunctionBuilder::for_each`.
#[derive(Clone, Debug)]
pub struct MappingOn {
    pub mapping: TaskMapping,
    pub worker: Expr,
}

impl fmt::Display for TaskMapping {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let list = |v: &[i64]| v.iter().map(i64::to_string).collect::<Vec<_>>().join(", ");
        let ordered = |ranks: &[usize]| ranks.iter().enumerate().all(|(i, &r)| i == r);
        match self.node() {
            MappingNode::Spatial { shape, ranks } => {
                write!(f, "spatial({})", list(shape))?;
                if !ordered(ranks) {
                    write!(f, ".ranks({ranks:?})")?;
                }
                Ok(())
            }
            MappingNode::Repeat { shape, ranks, .. } => {
                write!(f, "repeat({})", list(shape))?;
                if !ordered(ranks) {
                    write!(f, ".ranks({ranks:?})")?;
                }
                Ok(())
            }
            MappingNode::Compose(a, b) => write!(f, "{a} * {b}"),
        }
    }
}

impl fmt::Debug for TaskMapping {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn design_examples() {
        let a = spatial([4, 2]).unwrap() * repeat([2, 2]).unwrap();
        assert_eq!(a.num_workers(), 8);
        assert_eq!(a.task_shape(), vec![8, 4]);
        assert_eq!(
            a.tasks_of(0),
            vec![vec![0, 0], vec![0, 1], vec![1, 0], vec![1, 1]]
        );
        let b = repeat([2, 2]).unwrap() * spatial([4, 2]).unwrap();
        assert_eq!(
            b.tasks_of(0),
            vec![vec![0, 0], vec![0, 2], vec![4, 0], vec![4, 2]]
        );
        assert!(b.tasks_of(8).is_empty());
    }

    #[test]
    fn column_major_order() {
        let m = column_spatial([2, 3]).unwrap();
        assert_eq!(m.tasks_of(1), vec![vec![1, 0]]);
        let r = column_repeat([2, 2]).unwrap();
        assert_eq!(
            r.tasks_of(0),
            vec![vec![0, 0], vec![1, 0], vec![0, 1], vec![1, 1]]
        );
    }

    #[test]
    fn composition_pads_ranks() {
        let m = spatial([4]).unwrap() * repeat([2, 3]).unwrap();
        assert_eq!(m.task_shape(), vec![2, 12]);
        assert_eq!(m.tasks_of(1)[0], vec![0, 3]);
    }

    #[test]
    fn auto_map_gives_consecutive_workers_consecutive_tasks() {
        let m = auto_map(&[16, 8], 32).unwrap();
        assert_eq!(m.num_workers(), 32);
        assert_eq!(m.tasks_of(0)[0], vec![0, 0]);
        assert_eq!(m.tasks_of(1)[0], vec![0, 1]);
        assert_eq!(m.tasks_of(8)[0], vec![1, 0]);
        assert!(auto_map(&[3, 5], 2).is_err());
    }

    #[test]
    fn invalid_mappings_are_errors() {
        assert!(spatial([0, 2]).is_err());
        assert!(spatial_ranked([2, 2], vec![0, 0]).is_err());
    }
}
