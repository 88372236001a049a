//! Data layouts: maps from a multi-index to a storage offset (DESIGN §2).
//!
//! Layouts compose like task mappings: in `outer * inner` the shape is the
//! element-wise product, index `i` splits into `(i / inner.shape, i % inner.shape)`
//! and the offset is `outer.offset(i_outer) * inner.size + inner.offset(i_inner)`.
//! A [`local`] layout spreads its dimensions over workers and takes no storage,
//! so `local([4, 2]) * row_major([2, 2])` is the 2×2 register tile each of 8
//! workers holds of an 8×4 tensor.

use crate::expr::{BinaryOp, Expr, ExprKind, Var};
use std::fmt;
use std::sync::Arc;

/// Errors constructing a layout.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum LayoutError {
    #[error("strided layout has {shape} dimensions but {strides} strides")]
    RankMismatch { shape: usize, strides: usize },
    #[error("swizzle dimensions {dim} and {regards_dim} must differ and be < rank {rank}")]
    BadSwizzleDims {
        dim: usize,
        regards_dim: usize,
        rank: usize,
    },
    #[error("swizzled dimension must have a constant power-of-two extent, found {0}")]
    SwizzleExtent(String),
}

/// A data layout. Cheap to clone.
#[derive(Clone, PartialEq)]
pub struct Layout(Arc<LayoutNode>);

#[derive(Clone, Debug, PartialEq)]
pub enum LayoutNode {
    /// `offset(i) = Σ i_d · strides_d`.
    Strided {
        shape: Vec<Expr>,
        strides: Vec<Expr>,
    },
    /// Dimensions spread over workers: offset 0, storage size 1.
    Local { shape: Vec<i64> },
    /// `outer * inner`.
    Compose(Layout, Layout),
    /// `base` with `i[dim] ^= (i[regards_dim] >> log_step) % extent(dim)`,
    /// the usual bank-conflict-avoiding permutation of shared memory.
    Swizzle {
        base: Layout,
        dim: usize,
        regards_dim: usize,
        log_step: u32,
    },
}

fn exprs<I: Into<Expr>>(v: impl IntoIterator<Item = I>) -> Vec<Expr> {
    v.into_iter().map(Into::into).collect()
}

/// `a * b`, folding integer constants and multiplications by 0 and 1.
pub(crate) fn mul_folded(a: &Expr, b: &Expr) -> Expr {
    match (a.as_int(), b.as_int()) {
        (Some(x), Some(y)) => Expr::int(x * y),
        (Some(0), _) | (_, Some(0)) => Expr::int(0),
        (Some(1), _) => b.clone(),
        (_, Some(1)) => a.clone(),
        _ => a * b,
    }
}

/// `index * stride`, distributed over the sums and differences of `index` when `stride`
/// is a constant: `(y + kh) * W` becomes `y * W + kh * W`, so an offset is a sum of terms
/// that each depend on fewer loop variables, and a C compiler hoists each out of the
/// loops it does not vary in (a direct convolution's pixel and window offsets).
fn scaled(index: &Expr, stride: &Expr) -> Expr {
    if stride.as_int().is_some() {
        if let ExprKind::Binary(op @ (BinaryOp::Add | BinaryOp::Sub), a, b) = index.kind() {
            let (a, b) = (scaled(a, stride), scaled(b, stride));
            return match op {
                BinaryOp::Add => add_folded(&a, &b),
                _ => &a - &b,
            };
        }
    }
    mul_folded(index, stride)
}

/// `a + b`, folding integer constants and additions of 0.
pub(crate) fn add_folded(a: &Expr, b: &Expr) -> Expr {
    match (a.as_int(), b.as_int()) {
        (Some(x), Some(y)) => Expr::int(x + y),
        (Some(0), _) => b.clone(),
        (_, Some(0)) => a.clone(),
        _ => a + b,
    }
}

fn div_folded(a: &Expr, b: &Expr) -> Expr {
    match (a.as_int(), b.as_int()) {
        (Some(x), Some(y)) if y != 0 => Expr::int(crate::expr::floor_div(x, y)),
        (_, Some(1)) => a.clone(),
        _ => a / b,
    }
}

fn mod_folded(a: &Expr, b: &Expr) -> Expr {
    match (a.as_int(), b.as_int()) {
        (Some(x), Some(y)) if y != 0 => Expr::int(crate::expr::floor_mod(x, y)),
        (_, Some(1)) => Expr::int(0),
        _ => a % b,
    }
}

/// Row-major strides of a shape (last dimension contiguous).
fn row_major_strides(shape: &[Expr]) -> Vec<Expr> {
    let mut strides = vec![Expr::int(1); shape.len()];
    for d in (0..shape.len().saturating_sub(1)).rev() {
        strides[d] = mul_folded(&strides[d + 1], &shape[d + 1]);
    }
    strides
}

/// A row-major (C order) layout.
pub fn row_major<I: Into<Expr>>(shape: impl IntoIterator<Item = I>) -> Layout {
    let shape = exprs(shape);
    let strides = row_major_strides(&shape);
    Layout(Arc::new(LayoutNode::Strided { shape, strides }))
}

/// A column-major (Fortran order) layout.
pub fn column_major<I: Into<Expr>>(shape: impl IntoIterator<Item = I>) -> Layout {
    let shape = exprs(shape);
    let reversed: Vec<Expr> = shape.iter().rev().cloned().collect();
    let strides = row_major_strides(&reversed).into_iter().rev().collect();
    Layout(Arc::new(LayoutNode::Strided { shape, strides }))
}

/// A layout with explicit strides. Fails if the ranks differ.
pub fn strided<I: Into<Expr>, J: Into<Expr>>(
    shape: impl IntoIterator<Item = I>,
    strides: impl IntoIterator<Item = J>,
) -> Result<Layout, LayoutError> {
    let (shape, strides) = (exprs(shape), exprs(strides));
    if shape.len() != strides.len() {
        return Err(LayoutError::RankMismatch {
            shape: shape.len(),
            strides: strides.len(),
        });
    }
    Ok(Layout(Arc::new(LayoutNode::Strided { shape, strides })))
}

/// A layout whose dimensions are spread over workers (no storage).
pub fn local(shape: impl Into<Vec<i64>>) -> Layout {
    Layout(Arc::new(LayoutNode::Local {
        shape: shape.into(),
    }))
}

/// `base` with dimension `dim` XOR-permuted by `(i[regards_dim] >> log_step)`.
/// Requires distinct in-range dimensions and a constant power-of-two extent
/// for `dim`.
pub fn swizzle(
    base: Layout,
    dim: usize,
    regards_dim: usize,
    log_step: u32,
) -> Result<Layout, LayoutError> {
    let rank = base.rank();
    if dim == regards_dim || dim >= rank || regards_dim >= rank {
        return Err(LayoutError::BadSwizzleDims {
            dim,
            regards_dim,
            rank,
        });
    }
    let extent = &base.shape()[dim];
    match extent.as_int() {
        Some(e) if e > 0 && (e & (e - 1)) == 0 => {}
        _ => return Err(LayoutError::SwizzleExtent(format!("{extent:?}"))),
    }
    Ok(Layout(Arc::new(LayoutNode::Swizzle {
        base,
        dim,
        regards_dim,
        log_step,
    })))
}

impl Layout {
    pub fn node(&self) -> &LayoutNode {
        &self.0
    }

    /// The variables the layout's extents and strides mention, in order, with repeats.
    pub fn vars(&self) -> Vec<Var> {
        let mut vars = Vec::new();
        let mut from = |e: &Expr| {
            e.visit(&mut |e| {
                if let ExprKind::Var(v) = e.kind() {
                    vars.push(v.clone());
                }
            })
        };
        let mut stack = vec![self];
        while let Some(layout) = stack.pop() {
            match layout.node() {
                LayoutNode::Strided { shape, strides } => {
                    shape.iter().chain(strides).for_each(&mut from);
                }
                LayoutNode::Local { .. } => {}
                LayoutNode::Compose(outer, inner) => stack.extend([outer, inner]),
                LayoutNode::Swizzle { base, .. } => stack.push(base),
            }
        }
        vars
    }

    /// The layout `node` describes, as it is (no folding or checks: `node` is taken to be
    /// well formed, as one taken from another layout and rebuilt part by part).
    pub fn from_node(node: LayoutNode) -> Layout {
        Layout(Arc::new(node))
    }

    pub fn rank(&self) -> usize {
        match self.node() {
            LayoutNode::Strided { shape, .. } => shape.len(),
            LayoutNode::Local { shape } => shape.len(),
            LayoutNode::Compose(a, _) => a.rank(),
            LayoutNode::Swizzle { base, .. } => base.rank(),
        }
    }

    /// The logical shape (what indices range over).
    pub fn shape(&self) -> Vec<Expr> {
        match self.node() {
            LayoutNode::Strided { shape, .. } => shape.clone(),
            LayoutNode::Local { shape } => shape.iter().map(|&e| Expr::int(e)).collect(),
            LayoutNode::Compose(a, b) => a
                .shape()
                .iter()
                .zip(b.shape())
                .map(|(x, y)| mul_folded(x, &y))
                .collect(),
            LayoutNode::Swizzle { base, .. } => base.shape(),
        }
    }

    /// The shape as integers, when every extent is a constant.
    pub fn const_shape(&self) -> Option<Vec<i64>> {
        self.shape().iter().map(Expr::as_int).collect()
    }

    /// The number of storage elements the layout needs.
    pub fn size(&self) -> Expr {
        match self.node() {
            LayoutNode::Strided { shape, strides } => {
                let mut size = Expr::int(1);
                for (s, st) in shape.iter().zip(strides) {
                    let last = add_folded(s, &Expr::int(-1));
                    size = add_folded(&size, &mul_folded(&last, st));
                }
                size
            }
            LayoutNode::Local { .. } => Expr::int(1),
            LayoutNode::Compose(a, b) => mul_folded(&a.size(), &b.size()),
            LayoutNode::Swizzle { base, .. } => base.size(),
        }
    }

    /// The storage offset of `index`. Requires `index.len() == self.rank()`.
    pub fn offset(&self, index: &[Expr]) -> Expr {
        match self.node() {
            LayoutNode::Strided { strides, .. } => index
                .iter()
                .zip(strides)
                .fold(Expr::int(0), |acc, (i, s)| add_folded(&acc, &scaled(i, s))),
            LayoutNode::Local { .. } => Expr::int(0),
            LayoutNode::Compose(outer, inner) => {
                let inner_shape = inner.shape();
                let outer_index: Vec<Expr> = index
                    .iter()
                    .zip(&inner_shape)
                    .map(|(i, s)| div_folded(i, s))
                    .collect();
                let inner_index: Vec<Expr> = index
                    .iter()
                    .zip(&inner_shape)
                    .map(|(i, s)| mod_folded(i, s))
                    .collect();
                add_folded(
                    &mul_folded(&outer.offset(&outer_index), &inner.size()),
                    &inner.offset(&inner_index),
                )
            }
            LayoutNode::Swizzle {
                base,
                dim,
                regards_dim,
                log_step,
            } => {
                let extent = &base.shape()[*dim];
                let mut permuted = index.to_vec();
                let shifted = match (index[*regards_dim].as_int(), *log_step) {
                    (_, 0) => index[*regards_dim].clone(),
                    (Some(r), s) => Expr::int(r >> s),
                    (None, s) => &index[*regards_dim] >> Expr::int(s as i64),
                };
                let mask = mod_folded(&shifted, extent);
                permuted[*dim] = match (index[*dim].as_int(), mask.as_int()) {
                    (Some(i), Some(m)) => Expr::int(i ^ m),
                    (_, Some(0)) => index[*dim].clone(),
                    _ => &index[*dim] ^ mask,
                };
                base.offset(&permuted)
            }
        }
    }

    /// Whether the layout takes no storage beyond one element per worker.
    pub fn is_local(&self) -> bool {
        matches!(self.node(), LayoutNode::Local { .. })
    }
}

impl std::ops::Mul for Layout {
    type Output = Layout;
    /// Composition `self * inner`; ranks must match (shorter layouts are
    /// padded with leading extent-1 dimensions).
    fn mul(self, inner: Layout) -> Layout {
        let rank = self.rank().max(inner.rank());
        Layout(Arc::new(LayoutNode::Compose(
            self.padded_to(rank),
            inner.padded_to(rank),
        )))
    }
}

impl Layout {
    /// This layout with `rank - self.rank()` leading dimensions of extent 1.
    fn padded_to(&self, rank: usize) -> Layout {
        let extra = rank.saturating_sub(self.rank());
        if extra == 0 {
            return self.clone();
        }
        let node = match self.node() {
            LayoutNode::Strided { shape, strides } => LayoutNode::Strided {
                shape: std::iter::repeat_n(Expr::int(1), extra)
                    .chain(shape.iter().cloned())
                    .collect(),
                strides: std::iter::repeat_n(Expr::int(0), extra)
                    .chain(strides.iter().cloned())
                    .collect(),
            },
            LayoutNode::Local { shape } => LayoutNode::Local {
                shape: std::iter::repeat_n(1, extra)
                    .chain(shape.iter().copied())
                    .collect(),
            },
            LayoutNode::Compose(a, b) => LayoutNode::Compose(a.padded_to(rank), b.padded_to(rank)),
            LayoutNode::Swizzle {
                base,
                dim,
                regards_dim,
                log_step,
            } => LayoutNode::Swizzle {
                base: base.padded_to(rank),
                dim: dim + extra,
                regards_dim: regards_dim + extra,
                log_step: *log_step,
            },
        };
        Layout(Arc::new(node))
    }
}

impl fmt::Display for Layout {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let list = |v: &[Expr]| {
            v.iter()
                .map(|e| match e.kind() {
                    ExprKind::Const(c) => c.as_int().map_or(format!("{e:?}"), |i| i.to_string()),
                    ExprKind::Var(v) => v.name().to_string(),
                    _ => "?".to_string(),
                })
                .collect::<Vec<_>>()
                .join(", ")
        };
        match self.node() {
            LayoutNode::Strided { shape, strides } => {
                write!(f, "strided([{}], [{}])", list(shape), list(strides))
            }
            LayoutNode::Local { shape } => write!(
                f,
                "local({})",
                shape
                    .iter()
                    .map(i64::to_string)
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
            LayoutNode::Compose(a, b) => write!(f, "{a} * {b}"),
            LayoutNode::Swizzle {
                base,
                dim,
                regards_dim,
                log_step,
            } => write!(
                f,
                "swizzle({base}, dim={dim}, regards={regards_dim}, log_step={log_step})"
            ),
        }
    }
}

impl fmt::Debug for Layout {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn offset_of(l: &Layout, idx: &[i64]) -> i64 {
        let idx: Vec<Expr> = idx.iter().map(|&i| Expr::int(i)).collect();
        l.offset(&idx)
            .as_int()
            .expect("constant index gives constant offset")
    }

    #[test]
    fn row_and_column_major() {
        let r = row_major([3i64, 4]);
        assert_eq!(offset_of(&r, &[1, 2]), 6);
        assert_eq!(r.size().as_int(), Some(12));
        let c = column_major([3i64, 4]);
        assert_eq!(offset_of(&c, &[1, 2]), 7);
    }

    #[test]
    fn local_times_row_major_is_a_register_tile() {
        let l = local([4, 2]) * row_major([2i64, 2]);
        assert_eq!(l.const_shape(), Some(vec![8, 4]));
        assert_eq!(l.size().as_int(), Some(4));
        assert_eq!(offset_of(&l, &[5, 3]), 3);
    }

    #[test]
    fn composition_tiles_storage() {
        let l = row_major([2i64, 2]) * row_major([3i64, 4]);
        assert_eq!(l.const_shape(), Some(vec![6, 8]));
        assert_eq!(offset_of(&l, &[4, 5]), 3 * 12 + 4 + 1);
    }

    #[test]
    fn swizzle_permutes_within_rows() {
        let s = swizzle(row_major([8i64, 8]), 1, 0, 0).unwrap();
        let mut offsets: Vec<i64> = (0..8).map(|j| offset_of(&s, &[3, j])).collect();
        offsets.sort();
        assert_eq!(offsets, (24..32).collect::<Vec<_>>());
        assert!(swizzle(row_major([8i64, 6]), 1, 0, 0).is_err());
    }
}
