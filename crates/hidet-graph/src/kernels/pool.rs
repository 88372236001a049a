//! N-d pooling (max with argmax, average, Lp) over `[planes, spatial...]` data in f64.

use crate::kernels::window::{Geometry, BEYOND_PADDING};
use crate::operator::OpError;

/// The reduction a pooling window applies.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum PoolKind {
    /// Maximum over the input positions of the window (padding ignored).
    Max,
    /// Mean; with `count_include_pad`, the divisor is the kernel size: padding, including
    /// the positions `ceil_mode` adds past the end, counts as zeros (as in the ONNX
    /// reference and its conformance data).
    Average { count_include_pad: bool },
    /// `(sum |x|^p)^(1/p)` over the input positions (padding contributes 0).
    Lp { p: f64 },
}

/// Result of [`pool_nd`]: values `[planes, output...]` and, for max pooling, the spatial
/// offset (row-major, within the plane) of each maximum.
#[derive(Debug, Clone, PartialEq)]
pub struct Pooled {
    pub values: Vec<f64>,
    pub argmax: Vec<usize>,
}

/// Pools `x` (`planes` planes of `g.input_size()` elements) with window geometry `g`.
/// A max window that covers no input element yields `-inf` and argmax 0.
pub fn pool_nd(kind: PoolKind, g: &Geometry, planes: usize, x: &[f64]) -> Result<Pooled, OpError> {
    let (ni, no, nk) = (g.input_size(), g.output_size(), g.kernel_size());
    if x.len() != planes * ni {
        return Err(OpError::Shape(
            "pooling input size does not match its shape".into(),
        ));
    }
    let offsets = g.offsets()?;
    let mut values = vec![0f64; planes * no];
    let mut argmax = if kind == PoolKind::Max {
        vec![0usize; planes * no]
    } else {
        vec![]
    };
    let mut count = vec![0usize; no];
    if let PoolKind::Average { count_include_pad } = kind {
        for kk in 0..nk {
            for (c, &off) in count.iter_mut().zip(&offsets[kk * no..(kk + 1) * no]) {
                if off < BEYOND_PADDING || count_include_pad {
                    *c += 1;
                }
            }
        }
    }
    for p in 0..planes {
        let xp = &x[p * ni..(p + 1) * ni];
        let yp = &mut values[p * no..(p + 1) * no];
        match kind {
            PoolKind::Max => {
                let ap = &mut argmax[p * no..(p + 1) * no];
                yp.iter_mut().for_each(|v| *v = f64::NEG_INFINITY);
                let mut seen = vec![false; no];
                for kk in 0..nk {
                    for (o, &off) in offsets[kk * no..(kk + 1) * no].iter().enumerate() {
                        if off >= BEYOND_PADDING {
                            continue;
                        }
                        let v = xp[off];
                        if !seen[o] || v > yp[o] || (v.is_nan() && !yp[o].is_nan()) {
                            yp[o] = v;
                            ap[o] = off;
                            seen[o] = true;
                        }
                    }
                }
            }
            PoolKind::Average { .. } | PoolKind::Lp { .. } => {
                for kk in 0..nk {
                    for (y, &off) in yp.iter_mut().zip(&offsets[kk * no..(kk + 1) * no]) {
                        if off < BEYOND_PADDING {
                            *y += match kind {
                                PoolKind::Lp { p } => xp[off].abs().powf(p),
                                _ => xp[off],
                            };
                        }
                    }
                }
                match kind {
                    PoolKind::Lp { p } => yp.iter_mut().for_each(|y| *y = y.powf(1.0 / p)),
                    _ => yp
                        .iter_mut()
                        .zip(&count)
                        .for_each(|(y, &c)| *y = if c == 0 { f64::NAN } else { *y / c as f64 }),
                }
            }
        }
    }
    Ok(Pooled { values, argmax })
}
