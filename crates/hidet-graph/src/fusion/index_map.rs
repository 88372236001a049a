//! Index maps of epilogues: when a grid `out[axes] = value` reads a tensor `src` through a
//! bijection `src[f(axes)]`, the inverse `g` lets a kernel that produces `src[j]` write
//! `out[g(j)]` directly (DESIGN §2, post-scheduling fusion).
//!
//! Three kinds of bijection are recognized: an axis permutation (identity, transpose), proven
//! structurally; a row-major reshape, proven structurally when the read is
//! [`reshape_index`]'s expression and otherwise by evaluating it at every output index (up
//! to [`RESHAPE_CHECK_LIMIT`] elements; larger reshapes are not treated as bijective); and a
//! reshape read through an axis permutation (a reshape followed by a transpose, as attention
//! splits heads), proven structurally for one of the permutations of at most
//! [`PERMUTED_RESHAPE_MAX_RANK`] axes. Anything else is refused. A reshape is inverted by the reshape back, which works group by
//! group ([`crate::ops::compute_util::reshape_groups`]): merging `[C, HW]` into
//! `[1, C, H, W]` costs one division and one remainder on the spatial axis and nothing on
//! the channels.

use std::collections::HashMap;

use hidet_ir::compute::reads;
use hidet_ir::dtype::DataType;
use hidet_ir::expr::{Expr, Var};
use hidet_ir::passes::{simplify_expr, Interval, VarRanges};

use crate::ops::compute_util::reshape_index;

/// Reshape maps over more elements than this are not checked (and so not inverted).
pub const RESHAPE_CHECK_LIMIT: usize = 1 << 20;

/// Outputs of more axes than this are not searched for a permuted reshape (`rank!`
/// candidates).
pub const PERMUTED_RESHAPE_MAX_RANK: usize = 6;

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
        for (k, p) in perm.iter().enumerate() {
            if let Some(p) = *p {
                out_index[p] = src_axes[k].expr();
            }
        }
        return Some(InverseMap {
            src_axes,
            out_index,
        });
    }
    let j: Vec<Expr> = src_axes.iter().map(Var::expr).collect();
    if is_reshape(axes, out_shape, first, src_shape) {
        let out_index = reshape_index(&j, src_shape, out_shape);
        return Some(InverseMap {
            src_axes,
            out_index,
        });
    }
    let perm = permuted_reshape(axes, out_shape, first, src_shape)?;
    let shape: Vec<usize> = perm.iter().map(|&p| out_shape[p]).collect();
    let permuted_index = reshape_index(&j, src_shape, &shape);
    let mut out_index = vec![Expr::int(0); axes.len()];
    for (k, &p) in perm.iter().enumerate() {
        out_index[p] = permuted_index[k].clone();
    }
    Some(InverseMap {
        src_axes,
        out_index,
    })
}

/// One grid of a chain read by [`invert_chain`]: `out[axes] = value`, `out` of shape `shape`.
#[derive(Debug, Clone)]
pub struct ChainStep {
    pub out: Var,
    pub shape: Vec<usize>,
    pub axes: Vec<Var>,
    pub value: Expr,
}

/// The inverse of a chain of grids each reading the one before it through a bijection (the
/// first reads `src`, of shape `src_shape`; `chain` in order): the composition of their inverses ([`invert_read`] of each
/// step). A composite such as a reshape, a transpose and a reshape that interleaves split
/// axes (`[m, m, C, T1, T2]` → `[C, T1·m, T2·m]`) is not one of the recognized forms, while
/// each step is. `None` when a step reads no earlier value of the chain or is not invertible.
pub fn invert_chain(chain: &[ChainStep], src: &Var, src_shape: &[usize]) -> Option<InverseMap> {
    let src_axes: Vec<Var> = (0..src_shape.len())
        .map(|d| Var::new(format!("j{d}"), DataType::I32))
        .collect();
    let mut out_index: Vec<Expr> = src_axes.iter().map(Var::expr).collect();
    let (mut prev, mut prev_shape) = (src.clone(), src_shape.to_vec());
    for ChainStep {
        out,
        shape,
        axes,
        value,
    } in chain
    {
        let step = invert_read(axes, shape, value, &prev, &prev_shape)?;
        let map: HashMap<Var, Expr> = step.src_axes.into_iter().zip(out_index).collect();
        out_index = step.out_index.iter().map(|e| e.substitute(&map)).collect();
        prev = out.clone();
        prev_shape = shape.clone();
    }
    Some(InverseMap {
        src_axes,
        out_index,
    })
}

/// A permutation `p` (not the identity) such that `index` is, symbolically, the row-major
/// reshape onto `src_shape` of the grid `[axes[p[0]], axes[p[1]], …]` (extents
/// `out_shape[p[k]]`); `None` when there is none or the rank exceeds
/// [`PERMUTED_RESHAPE_MAX_RANK`].
fn permuted_reshape(
    axes: &[Var],
    out_shape: &[usize],
    index: &[Expr],
    src_shape: &[usize],
) -> Option<Vec<usize>> {
    let rank = axes.len();
    if rank > PERMUTED_RESHAPE_MAX_RANK {
        return None;
    }
    let ranges = axis_ranges(axes, out_shape);
    let simplified: Vec<Expr> = index.iter().map(|x| simplify_expr(x, &ranges)).collect();
    let mut perm: Vec<usize> = (0..rank).collect();
    while next_permutation(&mut perm) {
        let permuted: Vec<Expr> = perm.iter().map(|&p| axes[p].expr()).collect();
        let shape: Vec<usize> = perm.iter().map(|&p| out_shape[p]).collect();
        let expected = reshape_index(&permuted, &shape, src_shape);
        if expected.len() == simplified.len()
            && expected
                .iter()
                .zip(&simplified)
                .all(|(e, s)| simplify_expr(e, &ranges) == *s)
        {
            return Some(perm);
        }
    }
    None
}

/// Advances `p` to the next permutation in lexicographic order; false after the last.
fn next_permutation(p: &mut [usize]) -> bool {
    let Some(i) = (1..p.len()).rev().find(|&i| p[i - 1] < p[i]) else {
        return false;
    };
    let j = (i..p.len())
        .rev()
        .find(|&j| p[j] > p[i - 1])
        .expect("p[i] > p[i - 1], so some j ≥ i qualifies");
    p.swap(i - 1, j);
    p[i..].reverse();
    true
}

/// Each of `axes` ranging over `[0, extent)` of `shape`.
fn axis_ranges(axes: &[Var], shape: &[usize]) -> VarRanges {
    let mut ranges = VarRanges::new();
    for (a, &extent) in axes.iter().zip(shape) {
        ranges.set(a, Interval::below(extent as i64));
    }
    ranges
}

fn numel(shape: &[usize]) -> Option<usize> {
    crate::tensor::checked_numel(shape)
}

/// `Some(p)` when `index[k]` is `axes[p[k]]` for a permutation `p` with matching extents.
/// Unit dimensions may be read at constant 0 (`p[k] == None`) when every output axis left
/// unread has extent 1.
fn permutation(
    axes: &[Var],
    out_shape: &[usize],
    index: &[Expr],
    src_shape: &[usize],
) -> Option<Vec<Option<usize>>> {
    let mut used = vec![false; axes.len()];
    let mut perm = Vec::with_capacity(index.len());
    for (k, e) in index.iter().enumerate() {
        if src_shape[k] == 1 && e.as_int() == Some(0) {
            perm.push(None);
            continue;
        }
        let v = e.as_var()?;
        let p = axes.iter().position(|a| a == v)?;
        if used[p] || out_shape[p] != src_shape[k] {
            return None;
        }
        used[p] = true;
        perm.push(Some(p));
    }
    let unread_are_units = used.iter().zip(out_shape).all(|(&u, &e)| u || e == 1);
    unread_are_units.then_some(perm)
}

/// Whether `index` reads `src` in row-major order from a grid over `out_shape`: structurally
/// when it is [`reshape_index`]'s own expression (what the reshape operators build), also
/// after both are simplified under the axes' ranges (which undoes a reshape and its
/// inverse), else by evaluating it at every output index.
fn is_reshape(axes: &[Var], out_shape: &[usize], index: &[Expr], src_shape: &[usize]) -> bool {
    let axis_exprs: Vec<Expr> = axes.iter().map(Var::expr).collect();
    let expected = reshape_index(&axis_exprs, out_shape, src_shape);
    if index == expected.as_slice() {
        return true;
    }
    let ranges = axis_ranges(axes, out_shape);
    let simplified =
        |e: &[Expr]| -> Vec<Expr> { e.iter().map(|x| simplify_expr(x, &ranges)).collect() };
    if simplified(index) == simplified(&expected) {
        return true;
    }
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

/// Evaluates an integer index expression ([`Expr::eval_int`]); `None` for anything but
/// integer arithmetic on constants and the variables of `env`.
pub fn eval_index(e: &Expr, env: &HashMap<Var, i64>) -> Option<i64> {
    e.eval_int(&|v| env.get(v).copied()).ok()
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
    fn unit_axes_read_at_zero_are_a_permutation() {
        let src = tensor_input("s", DataType::F32, [1i64, 3, 5]);
        let ax = axes(3);
        // out[i0, i1, i2] = s[0, i2, i1] with out shape [1, 5, 3].
        let index = vec![Expr::int(0), ax[2].expr(), ax[1].expr()];
        let value = src.at(index.clone()) * Expr::f32(3.0);
        let inv = invert_read(&ax, &[1, 5, 3], &value, &src, &[1, 3, 5]).unwrap();
        check_inverse(&inv, &ax, &[1, 5, 3], &index, &[1, 3, 5]);
        assert_eq!(inv.out_index[0], Expr::int(0));
        // A non-unit output axis that is never read is not a bijection.
        let index = vec![Expr::int(0), ax[2].expr(), ax[1].expr()];
        let value = src.at(index);
        assert!(invert_read(&ax, &[2, 5, 3], &value, &src, &[1, 3, 5]).is_none());
    }

    #[test]
    fn reshape_is_inverted_by_checking_every_index() {
        let src = tensor_input("s", DataType::F32, [6i64, 7]);
        let ax = axes(3);
        // Row-major, but not in the form `reshape_index` builds.
        let lin = ax[2].expr() + ax[1].expr() * Expr::int(2) + ax[0].expr() * Expr::int(14);
        let index = vec![lin.clone() / Expr::int(7), lin % Expr::int(7)];
        let value = src.at(index.clone()) + Expr::f32(1.0);
        let inv = invert_read(&ax, &[3, 7, 2], &value, &src, &[6, 7]).unwrap();
        check_inverse(&inv, &ax, &[3, 7, 2], &index, &[6, 7]);
    }

    #[test]
    fn grouped_reshape_inverse_keeps_axes_local() {
        let src = tensor_input("s", DataType::F32, [12i64, 35]);
        let ax = axes(4);
        let ax_exprs: Vec<Expr> = ax.iter().map(Var::expr).collect();
        let index = reshape_index(&ax_exprs, &[1, 12, 5, 7], &[12, 35]);
        let value = src.at(index.clone()) - Expr::f32(0.5);
        let inv = invert_read(&ax, &[1, 12, 5, 7], &value, &src, &[12, 35]).unwrap();
        check_inverse(&inv, &ax, &[1, 12, 5, 7], &index, &[12, 35]);
        // The channel axis maps straight through; only the spatial axis is split.
        assert_eq!(inv.out_index[0], Expr::int(0));
        assert_eq!(inv.out_index[1], inv.src_axes[0].expr());
    }

    #[test]
    fn reshape_then_transpose_is_inverted() {
        // out[1, 12, 128, 64] = transpose(reshape(C[128, 768], [1, 128, 12, 64]), [0, 2, 1, 3]),
        // as attention splits heads.
        let src = tensor_input("c", DataType::F32, [128i64, 768]);
        let ax = axes(4);
        let permuted = [ax[0].expr(), ax[2].expr(), ax[1].expr(), ax[3].expr()];
        let index = reshape_index(&permuted, &[1, 128, 12, 64], &[128, 768]);
        let value = src.at(index.clone()) + Expr::f32(0.25);
        let out_shape = [1, 12, 128, 64];
        let inv = invert_read(&ax, &out_shape, &value, &src, &[128, 768]).unwrap();
        check_inverse(&inv, &ax, &out_shape, &index, &[128, 768]);
        // Keys transposed further: out[1, 12, 64, 128] reads c[i3, i1·64 + i2].
        let permuted = [ax[0].expr(), ax[3].expr(), ax[1].expr(), ax[2].expr()];
        let index = reshape_index(&permuted, &[1, 128, 12, 64], &[128, 768]);
        let out_shape = [1, 12, 64, 128];
        let inv = invert_read(&ax, &out_shape, &src.at(index.clone()), &src, &[128, 768]).unwrap();
        check_inverse(&inv, &ax, &out_shape, &index, &[128, 768]);
        // A permuted read that drops an axis is still refused.
        let index = vec![ax[2].expr(), ax[1].expr() * 64];
        assert!(invert_read(&ax, &[1, 12, 128, 64], &src.at(index), &src, &[128, 768]).is_none());
    }

    #[test]
    fn a_chain_that_interleaves_split_axes_is_inverted_step_by_step() {
        // c[3, 4, 4] = reshape(transpose(reshape(s[4, 12], [2, 2, 3, 2, 2]), [2, 3, 0, 4, 1])),
        // a Winograd output transform's store: c[ch, 2·t1 + i, 2·t2 + j] = s[2·i + j, ch·4 + 2·t1 + t2].
        let s_shape = [4usize, 12];
        let (a_shape, b_shape, c_shape) =
            ([2usize, 2, 3, 2, 2], [3usize, 2, 2, 2, 2], [3usize, 4, 4]);
        let src = tensor_input("s", DataType::F32, [4i64, 12]);
        let a = tensor_input("a", DataType::F32, [2i64, 2, 3, 2, 2]);
        let b = tensor_input("b", DataType::F32, [3i64, 2, 2, 2, 2]);
        let c = tensor_input("c", DataType::F32, [3i64, 4, 4]);
        let (ax_a, ax_b, ax_c) = (axes(5), axes(5), axes(3));
        let e = |ax: &[Var]| ax.iter().map(Var::expr).collect::<Vec<Expr>>();
        let read_a = reshape_index(&e(&ax_a), &a_shape, &s_shape);
        let p = &ax_b;
        let read_b = vec![
            p[2].expr(),
            p[4].expr(),
            p[0].expr(),
            p[1].expr(),
            p[3].expr(),
        ];
        let read_c = reshape_index(&e(&ax_c), &c_shape, &b_shape);
        let chain = [
            ChainStep {
                out: a.clone(),
                shape: a_shape.to_vec(),
                axes: ax_a.clone(),
                value: src.at(read_a.clone()),
            },
            ChainStep {
                out: b.clone(),
                shape: b_shape.to_vec(),
                axes: ax_b.clone(),
                value: a.at(read_b.clone()),
            },
            ChainStep {
                out: c,
                shape: c_shape.to_vec(),
                axes: ax_c.clone(),
                value: b.at(read_c.clone()) + Expr::f32(1.0),
            },
        ];
        let inv = invert_chain(&chain, &src, &s_shape).unwrap();
        // The composite read of `s` by `c`'s axes.
        let sub = |index: &[Expr], ax: &[Var], by: &[Expr]| {
            let map: HashMap<Var, Expr> = ax.iter().cloned().zip(by.iter().cloned()).collect();
            index
                .iter()
                .map(|x| x.substitute(&map))
                .collect::<Vec<Expr>>()
        };
        let via_b = sub(&read_b, &ax_b, &read_c);
        let composite = sub(&read_a, &ax_a, &via_b);
        check_inverse(&inv, &ax_c, &c_shape, &composite, &s_shape);
        // A step that is not a bijection breaks the chain.
        let mut broken = chain.clone();
        broken[1].value = a.at(vec![
            p[2].expr(),
            p[4].expr(),
            p[0].expr(),
            p[1].expr(),
            Expr::int(0),
        ]);
        assert!(invert_chain(&broken, &src, &s_shape).is_none());
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
