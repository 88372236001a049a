//! Spreading independent work items over CPU threads, and turning a linear
//! item number back into a multi-index.

use super::error::ScheduleError;
use hidet_ir::builder::FunctionBuilder;
use hidet_ir::expr::Expr;
use hidet_ir::mapping::{repeat, spatial};
use hidet_ir::stmt::LoopKind;

/// Runs `body(fb, item)` once for every `item` in `0..total`: a
/// `LoopKind::Parallel` loop over thread ids, each thread taking one
/// contiguous chunk of items in increasing order.
///
/// With a constant `total` the chunks are the task mapping
/// `spatial([t]) * repeat([chunk])` (`t ≤ threads` threads that have work,
/// the last chunk predicated); otherwise the chunk bounds are computed at
/// run time. A `total` of zero (or less) runs nothing.
pub(crate) fn parallel_items(
    fb: &mut FunctionBuilder,
    total: &Expr,
    threads: i64,
    body: impl FnOnce(&mut FunctionBuilder, Expr),
) -> Result<(), ScheduleError> {
    match total.as_int() {
        Some(n) if n <= 0 => Ok(()),
        Some(n) => {
            let chunk = ceil_div(n, threads);
            let busy = ceil_div(n, chunk);
            let mapping = spatial([busy])? * repeat([chunk])?;
            let exact = busy * chunk == n;
            fb.for_range_with("t", busy, LoopKind::Parallel, |fb, t| {
                fb.for_each(mapping.on(t), |fb, item| {
                    let item = item[0].clone();
                    if exact {
                        body(fb, item);
                    } else {
                        fb.if_then(item.lt(n), |fb| body(fb, item));
                    }
                });
            });
            Ok(())
        }
        None => {
            let total = total.clone();
            fb.for_range_with("t", threads, LoopKind::Parallel, |fb, t| {
                let chunk = (&total + (threads - 1)) / threads;
                fb.let_in("chunk", chunk, |fb, chunk| {
                    fb.let_in("first", &t * &chunk, |fb, first| {
                        let count = chunk.min(&total - &first);
                        fb.for_range("k", count, |fb, k| body(fb, &first + k));
                    });
                });
            });
            Ok(())
        }
    }
}

/// `⌈a / b⌉` for `a ≥ 0`, `b > 0`.
pub(crate) fn ceil_div(a: i64, b: i64) -> i64 {
    (a + b - 1) / b
}

/// The row-major multi-index of `linear` over `shape` (the last dimension
/// fastest). Dimensions of constant extent 1 give the constant 0.
pub(crate) fn unravel(linear: &Expr, shape: &[Expr]) -> Vec<Expr> {
    let mut index = vec![Expr::int(0); shape.len()];
    let mut rest = linear.clone();
    for d in (0..shape.len()).rev() {
        if shape[d].as_int() == Some(1) {
            continue;
        }
        index[d] = if d == 0 {
            rest.clone()
        } else {
            &rest % &shape[d]
        };
        rest = &rest / &shape[d];
    }
    index
}

type BoundBody<'a> = Box<dyn FnOnce(&mut FunctionBuilder, Vec<Expr>) + 'a>;

/// Binds each of `values` to a fresh immutable variable (constants and
/// variables stay as they are) and calls `body` with the bound expressions.
pub(crate) fn bind_all(
    fb: &mut FunctionBuilder,
    name: &str,
    values: &[Expr],
    body: impl FnOnce(&mut FunctionBuilder, Vec<Expr>),
) {
    fn go(
        fb: &mut FunctionBuilder,
        name: &str,
        values: &[Expr],
        bound: Vec<Expr>,
        body: BoundBody<'_>,
    ) {
        match values.split_first() {
            None => body(fb, bound),
            Some((first, rest)) => {
                let trivial = first.as_int().is_some() || first.as_var().is_some();
                if trivial {
                    let mut bound = bound;
                    bound.push(first.clone());
                    go(fb, name, rest, bound, body);
                } else {
                    fb.let_in(name, first.clone(), move |fb, v| {
                        let mut bound = bound;
                        bound.push(v);
                        go(fb, name, rest, bound, body);
                    });
                }
            }
        }
    }
    go(fb, name, values, Vec::new(), Box::new(body));
}

/// The product of constant extents, or `None` when one is not constant
/// or the product overflows.
pub(crate) fn static_product(shape: &[Expr]) -> Option<i64> {
    shape
        .iter()
        .try_fold(1i64, |acc, d| d.as_int().and_then(|v| acc.checked_mul(v)))
}

/// The product of extents as an expression (constants folded).
pub(crate) fn product(shape: &[Expr]) -> Expr {
    match static_product(shape) {
        Some(n) => Expr::int(n),
        None => shape
            .iter()
            .cloned()
            .reduce(|a, b| a * b)
            .unwrap_or_else(|| Expr::int(1)),
    }
}
