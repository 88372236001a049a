//! Sliding-window reads in compute definitions (convolution, pooling, im2col): the input
//! position a window reads for an output position and a kernel position, and the condition
//! under which that position lies inside the input rather than in the padding.

use hidet_ir::expr::Expr;

use crate::kernels::window::Geometry;

/// The spatial input index a window reads, and when it is a real input element.
#[derive(Debug, Clone)]
pub struct WindowRead {
    /// One `i32` expression per spatial dimension: `out·stride + k·dilation - pad_begin`.
    /// Out of range where `inside` is false.
    pub index: Vec<Expr>,
    /// True where every component of `index` is in range; `None` when that holds for every
    /// output and kernel position of the geometry (no padding is ever read).
    pub inside: Option<Expr>,
}

/// The read of the window at output position `out` and kernel position `k` (one expression per
/// spatial dimension each) of geometry `g`. Bounds are only tested on the sides where some
/// window of `g` reaches past the input.
///
/// Requires `out.len() == k.len() == g.input.len()`.
pub fn window_read(g: &Geometry, out: &[Expr], k: &[Expr]) -> WindowRead {
    let mut index = Vec::with_capacity(out.len());
    let mut inside: Option<Expr> = None;
    let mut and = |c: Expr| {
        inside = Some(match inside.take() {
            Some(acc) => acc.and(c),
            None => c,
        });
    };
    for (d, (o, kk)) in out.iter().zip(k).enumerate() {
        let (s, dil, pb) = (g.strides[d], g.dilations[d], g.pads_begin[d]);
        let mut pos = scaled(o, s);
        if g.kernel[d] > 1 {
            pos = pos + scaled(kk, dil);
        }
        if pb > 0 {
            pos = pos - Expr::int(pb as i64);
        }
        if g.reads_before(d) {
            and(pos.ge(Expr::int(0)));
        }
        if g.reads_past(d) {
            and(pos.lt(Expr::int(g.input[d] as i64)));
        }
        index.push(pos);
    }
    WindowRead { index, inside }
}

/// True when some window of `g` reads a position outside the input (padding, or the
/// extension `ceil_mode` adds), i.e. when [`window_read`] gives an `inside` condition.
pub fn reads_padding(g: &Geometry) -> bool {
    (0..g.input.len()).any(|d| g.reads_before(d) || g.reads_past(d))
}

fn scaled(e: &Expr, factor: usize) -> Expr {
    if factor == 1 {
        e.clone()
    } else {
        e.clone() * Expr::int(factor as i64)
    }
}

/// The window position `pos` along spatial dimension `d` of `g` clamped into the input on
/// each side where [`window_read`] guards it (`max(pos, 0)` before the start, `min(pos,
/// n - 1)` past the end): a read at the clamped position is always in bounds, and equals
/// the guarded read wherever the guard holds.
pub fn clamp_into_input(g: &Geometry, d: usize, pos: Expr) -> Expr {
    let mut pos = pos;
    if g.reads_before(d) {
        pos = pos.max(Expr::int(0));
    }
    if g.reads_past(d) {
        pos = pos.min(Expr::int(g.input[d] as i64 - 1));
    }
    pos
}

/// `value` where `inside` holds, else `fill`.
pub fn guarded(inside: &Option<Expr>, value: Expr, fill: Expr) -> Expr {
    match inside {
        Some(c) => Expr::select(c.clone(), value, fill),
        None => value,
    }
}

/// True when every element offset of tensors of `shapes` fits the `i32` index arithmetic of
/// window definitions.
pub fn fits_i32(shapes: &[&[usize]]) -> bool {
    shapes.iter().all(|s| {
        crate::tensor::checked_numel(s).is_some_and(|n| n <= i32::MAX as usize)
            && s.iter().all(|&d| d <= i32::MAX as usize)
    })
}
