//! Grouped N-d convolution and transposed convolution in f64 (im2col / col2im + row GEMM).
//!
//! Integer convolutions use these kernels too: products of 8/16-bit values summed in f64 are
//! exact while the partial sums stay below 2^53.

use crate::kernels::gemm::gemm_rows;
use crate::kernels::window::{Geometry, BEYOND_PADDING};
use crate::operator::OpError;

/// Shapes of a grouped convolution: `x[batch, in_ch, spatial...]`,
/// `w[out_ch, in_ch / groups, kernel...]`.
#[derive(Debug, Clone, Copy)]
pub struct ConvShape {
    pub batch: usize,
    pub in_ch: usize,
    pub out_ch: usize,
    pub groups: usize,
}

fn check_groups(s: &ConvShape) -> Result<(usize, usize), OpError> {
    if s.groups == 0 || !s.in_ch.is_multiple_of(s.groups) || !s.out_ch.is_multiple_of(s.groups) {
        return Err(OpError::Shape(format!(
            "group {} must divide input channels {} and output channels {}",
            s.groups, s.in_ch, s.out_ch
        )));
    }
    Ok((s.in_ch / s.groups, s.out_ch / s.groups))
}

/// Convolution: `y[n, m, o] = sum_{c, k} x[n, g*cg + c, pos(o, k)] * w[m, c, k]` where
/// `g = m / (out_ch / groups)` and padded positions read 0. Returns `y` row-major with shape
/// `[batch, out_ch, geom.output...]`.
///
/// Requires `x.len() == batch * in_ch * geom.input_size()` and
/// `w.len() == out_ch * (in_ch / groups) * geom.kernel_size()`.
pub fn conv_nd(s: &ConvShape, g: &Geometry, x: &[f64], w: &[f64]) -> Result<Vec<f64>, OpError> {
    let (cg, mg) = check_groups(s)?;
    let (ni, no, nk) = (g.input_size(), g.output_size(), g.kernel_size());
    if x.len() != s.batch * s.in_ch * ni || w.len() != s.out_ch * cg * nk {
        return Err(OpError::Shape(
            "convolution operand sizes do not match their shapes".into(),
        ));
    }
    let offsets = g.offsets()?;
    let mut y = vec![0f64; s.batch * s.out_ch * no];
    let mut cols = vec![0f64; cg * nk * no];
    for n in 0..s.batch {
        for grp in 0..s.groups {
            for c in 0..cg {
                let xc = &x[(n * s.in_ch + grp * cg + c) * ni..][..ni];
                for kk in 0..nk {
                    let dst = &mut cols[(c * nk + kk) * no..][..no];
                    for (d, &off) in dst.iter_mut().zip(&offsets[kk * no..(kk + 1) * no]) {
                        *d = if off >= BEYOND_PADDING { 0.0 } else { xc[off] };
                    }
                }
            }
            let wg = &w[grp * mg * cg * nk..(grp + 1) * mg * cg * nk];
            let yg = &mut y[(n * s.out_ch + grp * mg) * no..][..mg * no];
            gemm_rows(wg, &cols, yg, cg * nk, no);
        }
    }
    Ok(y)
}

/// Transposed convolution with `w[in_ch, out_ch / groups, kernel...]`:
/// `y[n, g*mg + m, i*s + k*d - pad_begin] += x[n, g*cg + c, i] * w[g*cg + c, m, k]`; positions
/// outside `[0, out)` are dropped. `pads_begin` may be negative (output larger than the
/// natural size). Returns `y` with shape `[batch, out_ch, out...]`.
#[allow(clippy::too_many_arguments)]
pub fn conv_transpose_nd(
    s: &ConvShape,
    input: &[usize],
    out: &[usize],
    kernel: &[usize],
    strides: &[usize],
    dilations: &[usize],
    pads_begin: &[i64],
    x: &[f64],
    w: &[f64],
) -> Result<Vec<f64>, OpError> {
    let (cg, mg) = check_groups(s)?;
    let rank = input.len();
    if [
        out.len(),
        kernel.len(),
        strides.len(),
        dilations.len(),
        pads_begin.len(),
    ]
    .iter()
    .any(|&l| l != rank)
    {
        return Err(OpError::Shape(
            "transposed convolution attribute ranks differ".into(),
        ));
    }
    let (ni, no, nk): (usize, usize, usize) = (
        input.iter().product(),
        out.iter().product(),
        kernel.iter().product(),
    );
    if x.len() != s.batch * s.in_ch * ni || w.len() != s.in_ch * mg * nk {
        return Err(OpError::Shape(
            "transposed convolution operand sizes do not match their shapes".into(),
        ));
    }
    // target[k * ni + i]: output offset written by input position i through kernel position k.
    let mut target = vec![usize::MAX; nk * ni];
    let mut kidx = vec![0usize; rank];
    for kk in 0..nk {
        let mut iidx = vec![0usize; rank];
        for ii in 0..ni {
            let mut off = Some(0usize);
            for d in 0..rank {
                let pos =
                    (iidx[d] * strides[d] + kidx[d] * dilations[d]) as i128 - pads_begin[d] as i128;
                off = match off {
                    Some(o) if pos >= 0 && (pos as usize) < out[d] => {
                        Some(o * out[d] + pos as usize)
                    }
                    _ => None,
                };
            }
            target[kk * ni + ii] = off.unwrap_or(usize::MAX);
            crate::kernels::window::increment(&mut iidx, input);
        }
        crate::kernels::window::increment(&mut kidx, kernel);
    }
    let mut y = vec![0f64; s.batch * s.out_ch * no];
    // wt[(m, k), c] = w[g*cg + c, m, k] for one group.
    let mut wt = vec![0f64; mg * nk * cg];
    let mut cols = vec![0f64; mg * nk * ni];
    for grp in 0..s.groups {
        for c in 0..cg {
            for m in 0..mg {
                for kk in 0..nk {
                    wt[(m * nk + kk) * cg + c] = w[((grp * cg + c) * mg + m) * nk + kk];
                }
            }
        }
        for n in 0..s.batch {
            cols.iter_mut().for_each(|v| *v = 0.0);
            let xg = &x[(n * s.in_ch + grp * cg) * ni..][..cg * ni];
            gemm_rows(&wt, xg, &mut cols, cg, ni);
            for m in 0..mg {
                let ym = &mut y[(n * s.out_ch + grp * mg + m) * no..][..no];
                for kk in 0..nk {
                    let src = &cols[(m * nk + kk) * ni..][..ni];
                    for (&t, &v) in target[kk * ni..(kk + 1) * ni].iter().zip(src) {
                        if t != usize::MAX {
                            ym[t] += v;
                        }
                    }
                }
            }
        }
    }
    Ok(y)
}
