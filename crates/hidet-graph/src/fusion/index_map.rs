//! Index maps of epilogues: when a grid `out[axes] = value` reads a tensor `src` through a
//! bijection `src[f(axes)]`, the inverse `g` lets a kernel that produces `src[j]` write
//! `out[g(j)]` directly (DESIGN §2, post-scheduling fusion).
//!
//! Two kinds of bijection are recognized: an axis permutation (identity, transpose), proven
//! structurally, and a row-major reshape `f(i) = unravel(src_shape, ravel(out_shape, i))`,
//! proven by evaluating `f` at every output index (up to [`RESHAPE_CHECK_LIMIT`] elements;
//! larger reshapes are not treated as bijective). Anything else is refused.

use std::collections::HashMap;

use hidet_ir::compute::reads;
use hidet_ir::dtype::DataType;
use hidet_ir::expr::{floor_div, floor_mod, BinaryOp, Expr, ExprKind, UnaryOp, Var};
use hidet_ir::intrinsic::MathFunc;

/// Reshape maps over more elements than this are not checked (and so not inverted).
pub const RESHAPE_CHECK_LIMIT: usize = 1 << 20;

/// The inverse of a bijective read: for `src[src_axes]`, the output element is
/// `out[out_index]`.
#[derive(Debug, Clone)]
pub struct InverseMap {
    /// One `i32` variable per dimension of `src`.
    pub src_axes: Vec<Var>,
    /// The output index as expressions of `src_axes`.
    pub out_index: Vec<Expr>,
}

/// The inverse map of the reads of `src` in `value`, when every read of `src` uses the same
/// index `f(axes)` and `f` is a bijection from `out_shape` onto `src_shape` (see the module
/// docs); `None` otherwise (including when `value` does not read `src`).
pub fn invert_read(
    axes: &[Var],
    out_shape: &[usize],
    value: &Expr,
    src: &Var,
    src_shape: &[usize],
) -> Option<InverseMap> {
    let read_indices: Vec<Vec<Expr>> = reads(value)
        .into_iter()
        .filter(|(t, _)| t == src)
        .map(|(_, i)| i)
        .collect();
    let first = read_indices.first()?;
    if read_indices.iter().any(|i| i != first) || first.len() != src_shape.len() {
        return None;
    }
    if axes.len() != out_shape.len() || numel(out_shape) != numel(src_shape) {
        return None;
    }
    let src_axes: Vec<Var> = (0..src_shape.len())
        .map(|d| Var::new(format!("j{d}"), DataType::I32))
        .collect();
    if let Some(perm) = permutation(axes, out_shape, first, src_shape) {
        let mut out_index = vec![Expr::int(0); axes.len()];
        for (k, &p) in perm.iter().enumerate() {
            out_index[p] = src_axes[k].expr();
        }
        return Some(InverseMap {
            src_axes,
            out_index,
        });
    }
    if is_reshape(axes, out_shape, first, src_shape) {
        let linear = ravel_expr(&src_axes, src_shape);
        let out_index = unravel_expr(&linear, out_shape);
        return Some(InverseMap {
            src_axes,
            out_index,
        });
    }
    None
}

fn numel(shape: &[usize]) -> Option<usize> {
    crate::tensor::checked_numel(shape)
}

/// `Some(p)` when `index[k]` is `axes[p[k]]` for a permutation `p` with matching extents.
/// Unit dimensions may be read at constant 0 on either side.
fn permutation(
    axes: &[Var],
    out_shape: &[usize],
    index: &[Expr],
    src_shape: &[usize],
) -> Option<Vec<usize>> {
    if axes.len() != index.len() {
        return None;
    }
    let mut used = vec![false; axes.len()];
    let mut perm = Vec::with_capacity(index.len());
    for (k, e) in index.iter().enumerate() {
        let v = e.as_var()?;
        let p = axes.iter().position(|a| a == v)?;
        if used[p] || out_shape[p] != src_shape[k] {
            return None;
        }
        used[p] = true;
        perm.push(p);
    }
    Some(perm)
}

fn is_reshape(axes: &[Var], out_shape: &[usize], index: &[Expr], src_shape: &[usize]) -> bool {
    let Some(n) = numel(out_shape) else {
        return false;
    };
    if n > RESHAPE_CHECK_LIMIT {
        return false;
    }
    let mut env: HashMap<Var, i64> = axes.iter().map(|a| (a.clone(), 0)).collect();
    let mut out_idx = vec![0usize; out_shape.len()];
    let src_strides = strides(src_shape);
    for linear in 0..n {
        let mut rest = linear;
        for d in (0..out_shape.len()).rev() {
            out_idx[d] = rest % out_shape[d];
            rest /= out_shape[d];
        }
        for (a, &i) in axes.iter().zip(&out_idx) {
            env.insert(a.clone(), i as i64);
        }
        let mut got = 0usize;
        for (k, e) in index.iter().enumerate() {
            match eval_index(e, &env) {
                Some(v) if v >= 0 && (v as usize) < src_shape[k] => {
                    got += v as usize * src_strides[k]
                }
                _ => return false,
            }
        }
        if got != linear {
            return false;
        }
    }
    true
}

fn strides(shape: &[usize]) -> Vec<usize> {
    let mut s = vec![1usize; shape.len()];
    for d in (0..shape.len().saturating_sub(1)).rev() {
        s[d] = s[d + 1] * shape[d + 1];
    }
    s
}

/// `Σ axes[d] · stride[d]` over a row-major `shape`.
pub fn ravel_expr(axes: &[Var], shape: &[usize]) -> Expr {
    let st = strides(shape);
    let mut acc: Option<Expr> = None;
    for (a, s) in axes.iter().zip(st) {
        let term = if s == 1 {
            a.expr()
        } else {
            a.expr() * Expr::int(s as i64)
        };
        acc = Some(match acc {
            None => term,
            Some(x) => x + term,
        });
    }
    acc.unwrap_or_else(|| Expr::int(0))
}

/// The row-major multi-index of `linear` in `shape`.
pub fn unravel_expr(linear: &Expr, shape: &[usize]) -> Vec<Expr> {
    let st = strides(shape);
    shape
        .iter()
        .zip(st)
        .enumerate()
        .map(|(d, (&extent, s))| {
            let q = if s == 1 {
                linear.clone()
            } else {
                linear / Expr::int(s as i64)
            };
            if d == 0 {
                q
            } else {
                q % Expr::int(extent as i64)
            }
        })
        .collect()
}

/// Evaluates an integer index expression; `None` for anything but integer arithmetic on
/// constants and the variables of `env`.
pub fn eval_index(e: &Expr, env: &HashMap<Var, i64>) -> Option<i64> {
    match e.kind() {
        ExprKind::Const(c) => c.as_int(),
        ExprKind::Var(v) => env.get(v).copied(),
        ExprKind::Unary(UnaryOp::Neg, a) => eval_index(a, env)?.checked_neg(),
        ExprKind::Binary(op, a, b) => {
            let (x, y) = (eval_index(a, env)?, eval_index(b, env)?);
            match op {
                BinaryOp::Add => x.checked_add(y),
                BinaryOp::Sub => x.checked_sub(y),
                BinaryOp::Mul => x.checked_mul(y),
                BinaryOp::Div if y != 0 => Some(floor_div(x, y)),
                BinaryOp::Mod if y != 0 => Some(floor_mod(x, y)),
                BinaryOp::Lt => Some((x < y) as i64),
                BinaryOp::Le => Some((x <= y) as i64),
                BinaryOp::Gt => Some((x > y) as i64),
                BinaryOp::Ge => Some((x >= y) as i64),
                BinaryOp::Eq => Some((x == y) as i64),
                BinaryOp::Ne => Some((x != y) as i64),
                BinaryOp::And => Some((x != 0 && y != 0) as i64),
                BinaryOp::Or => Some((x != 0 || y != 0) as i64),
                _ => None,
            }
        }
        ExprKind::Select(c, a, b) => {
            if eval_index(c, env)? != 0 {
                eval_index(a, env)
            } else {
                eval_index(b, env)
            }
        }
        ExprKind::Cast(a, t) if t.is_integer() => eval_index(a, env),
        ExprKind::Math(MathFunc::Min, args) if args.len() == 2 => {
            Some(eval_index(&args[0], env)?.min(eval_index(&args[1], env)?))
        }
        ExprKind::Math(MathFunc::Max, args) if args.len() == 2 => {
            Some(eval_index(&args[0], env)?.max(eval_index(&args[1], env)?))
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use hidet_ir::compute::tensor_input;

    fn axes(n: usize) -> Vec<Var> {
        (0..n)
            .map(|d| Var::new(format!("i{d}"), DataType::I32))
            .collect()
    }

    fn check_inverse(
        inv: &InverseMap,
        ax: &[Var],
        out_shape: &[usize],
        index: &[Expr],
        src_shape: &[usize],
    ) {
        // For every source index j: f(g(j)) == j.
        let n = numel(src_shape).unwrap();
        let st = strides(src_shape);
        for linear in 0..n {
            let j: Vec<i64> = st
                .iter()
                .zip(src_shape)
                .map(|(s, e)| ((linear / s) % e) as i64)
                .collect();
            let env: HashMap<Var, i64> = inv
                .src_axes
                .iter()
                .cloned()
                .zip(j.iter().copied())
                .collect();
            let out: Vec<i64> = inv
                .out_index
                .iter()
                .map(|e| eval_index(e, &env).unwrap())
                .collect();
            for (o, e) in out.iter().zip(out_shape) {
                assert!(*o >= 0 && (*o as usize) < *e);
            }
            let env2: HashMap<Var, i64> = ax.iter().cloned().zip(out.iter().copied()).collect();
            let back: Vec<i64> = index
                .iter()
                .map(|e| eval_index(e, &env2).unwrap())
                .collect();
            assert_eq!(back, j);
        }
    }

    #[test]
    fn transpose_is_inverted_structurally() {
        let src = tensor_input("s", DataType::F32, [3i64, 5, 2]);
        let ax = axes(3);
        // out[i0, i1, i2] = s[i1, i2, i0] with out shape [2, 3, 5].
        let index = vec![ax[1].expr(), ax[2].expr(), ax[0].expr()];
        let value = src.at(index.clone()) * Expr::f32(2.0);
        let inv = invert_read(&ax, &[2, 3, 5], &value, &src, &[3, 5, 2]).unwrap();
        check_inverse(&inv, &ax, &[2, 3, 5], &index, &[3, 5, 2]);
    }

    #[test]
    fn reshape_is_inverted_by_checking_every_index() {
        let src = tensor_input("s", DataType::F32, [6i64, 7]);
        let ax = axes(3);
        let lin = ravel_expr(&ax, &[3, 7, 2]);
        let index = unravel_expr(&lin, &[6, 7]);
        let value = src.at(index.clone()) + Expr::f32(1.0);
        let inv = invert_read(&ax, &[3, 7, 2], &value, &src, &[6, 7]).unwrap();
        check_inverse(&inv, &ax, &[3, 7, 2], &index, &[6, 7]);
    }

    #[test]
    fn broadcasts_and_mixed_reads_are_refused() {
        let src = tensor_input("s", DataType::F32, [4i64]);
        let ax = axes(2);
        // out[i0, i1] = s[i1]: not bijective.
        let v = src.at([ax[1].expr()]);
        assert!(invert_read(&ax, &[3, 4], &v, &src, &[4]).is_none());
        // Two different reads of the same tensor.
        let ax1 = axes(1);
        let v = src.at([ax1[0].expr()]) + src.at([(ax1[0].expr() + 1) % 4]);
        assert!(invert_read(&ax1, &[4], &v, &src, &[4]).is_none());
        // A shifted (non-bijective within bounds) read.
        let v = src.at([(ax1[0].expr() + 1).min(Expr::int(3))]);
        assert!(invert_read(&ax1, &[4], &v, &src, &[4]).is_none());
    }
}
