//! A transposed convolution as one convolution per output phase, interleaved.
//!
//! Along an axis of stride `s`, input position `i` reaches output position `u - pad_begin` with
//! `u = i·s + t` through kernel tap `t`. The outputs of one phase `ρ = u mod s` receive only the
//! taps `t = ρ + s·m`: writing `u = q·s + ρ`,
//!
//! ```text
//! Y[q·s + ρ - pad_begin] = Σ_m X[q - m] · W[ρ + s·m]
//! ```
//!
//! which is an ordinary convolution of `X` with the phase's taps reversed (`M_ρ = ⌈(k - ρ)/s⌉`
//! of them, input and output channels swapped), padded by `M_ρ - 1` in front. Over every
//! spatial axis there are `∏ s` phases; their outputs are stacked, interleaved (a reshape
//! and a transpose: `[…, Q, s]` → `[…, Q·s]` per axis) and cropped to the output:
//!
//! ```text
//! ConvTranspose(X, W, B?)  →  Slice(Reshape(Transpose(Reshape(Concat_ρ(Conv(X, W_ρ, B?))))))
//! ```
//!
//! Each output element is computed once, by a convolution the backends run as a matrix
//! product (the CPU's implicit GEMM), instead of the `MatMul` + `Col2Im` of
//! [`super::ConvTransposeAsMatMul`], whose column buffer holds `∏ k / ∏ s` times the output
//! (4× for a 4×4 kernel at stride 2) and is written and read back. Applied to f32
//! transposed convolutions with static shapes, any groups (each phase a grouped convolution),
//! dilation 1, constant weights (and
//! bias), non-negative begin padding, and a kernel at least as long as the stride on every
//! axis (so every phase has taps); others are left to [`super::ConvTransposeAsMatMul`].

use crate::attribute::{Attribute, Attributes};
use crate::dtype::DType;
use crate::graph::{Graph, GraphError, NodeId, ValueId};
use crate::ops::conv_transpose::geometry;
use crate::passes::rewrite::Rewriter;
use crate::passes::GraphPass;
use crate::tensor::Tensor;

/// The most phases (`∏ strides`) a transposed convolution is split into.
pub const MAX_PHASES: usize = 16;

/// Rewrites each applicable `ConvTranspose` into one `Conv` per output phase, see the module
/// docs.
pub struct ConvTransposeAsPhases;

impl GraphPass for ConvTransposeAsPhases {
    fn name(&self) -> &'static str {
        "conv-transpose-as-phases"
    }

    fn run(&self, graph: Graph) -> Result<Graph, GraphError> {
        Rewriter::new(graph).replace_each(plan, |p| p.y, emit)
    }
}

/// One applicable node, resolved.
struct Plan {
    x: ValueId,
    y: ValueId,
    weight: Tensor,
    bias: Option<ValueId>,
    /// `[N, C_in, L…]`.
    input: Vec<usize>,
    kernel: Vec<usize>,
    strides: Vec<usize>,
    pads_begin: Vec<usize>,
    out: Vec<usize>,
    /// Groups (`G`): the weight is `[C_in, C_out/G, k…]`.
    group: usize,
}

impl Plan {
    /// Output channels (`C_out`).
    fn c_out(&self) -> usize {
        self.weight.shape()[1] * self.group
    }
}

fn plan(rw: &Rewriter, n: NodeId) -> Option<Plan> {
    let g = rw.graph();
    let node = &g.nodes()[n.0];
    if node.op_type != "ConvTranspose" || !node.domain.is_empty() {
        return None;
    }
    let [Some(y)] = node.outputs.as_slice() else {
        return None;
    };
    let x = node.inputs.first().copied().flatten()?;
    let weight = rw.constant(node.inputs.get(1).copied().flatten()?)?.clone();
    let bias = node.inputs.get(2).copied().flatten();
    if let Some(b) = bias {
        rw.constant(b)?;
    }
    let input = g.value(x).ty.fixed_shape()?;
    let ws = weight.shape().to_vec();
    if g.value(x).ty.dtype != DType::F32
        || weight.dtype() != DType::F32
        || input.len() < 3
        || ws.len() != input.len()
        || ws[0] != input[1]
        || input.contains(&0)
    {
        return None;
    }
    let (geo, group) = geometry(&node.attrs, &input[2..], &ws[2..]).ok()?;
    let phases = geo
        .strides
        .iter()
        .try_fold(1usize, |p, &s| p.checked_mul(s))?;
    let fits = (0..geo.kernel.len()).all(|a| {
        geo.dilations[a] == 1 && geo.kernel[a] >= geo.strides[a] && geo.pads_begin[a] >= 0
    });
    if group == 0 || ws[0] % group != 0 || !fits || phases > MAX_PHASES || geo.out.contains(&0) {
        return None;
    }
    Some(Plan {
        x,
        y: *y,
        weight,
        bias,
        input,
        kernel: geo.kernel,
        strides: geo.strides,
        pads_begin: geo.pads_begin.iter().map(|&p| p as usize).collect(),
        out: geo.out,
        group,
    })
}

/// Adds the phase convolutions and their interleaving; returns the output.
fn emit(rw: &mut Rewriter, p: &Plan) -> Result<ValueId, GraphError> {
    let d = p.kernel.len();
    let (batch, c_out) = (p.input[0], p.c_out());
    // Positions per phase: enough to cover the output after the crop, and at least the
    // input's length (a convolution cannot pad by a negative amount).
    let q: Vec<usize> = (0..d)
        .map(|a| {
            (p.pads_begin[a] + p.out[a])
                .div_ceil(p.strides[a])
                .max(p.input[2 + a])
        })
        .collect();
    let phases: usize = p.strides.iter().product();
    let mut all = if phases > 1 && (0..d).all(|a| p.kernel[a].is_multiple_of(p.strides[a])) {
        one_convolution(rw, p, &q)?
    } else {
        phase_convolutions(rw, p, &q)?
    };
    let mut full = vec![batch, c_out];
    full.extend((0..d).map(|a| q[a] * p.strides[a]));
    let target = rw.add_shape(&full);
    all = rw.add_op("Reshape", Attributes::new(), &[all, target])?;
    let crop = (0..d).any(|a| p.pads_begin[a] > 0 || q[a] * p.strides[a] != p.out[a]);
    if !crop {
        return Ok(all);
    }
    let list = |rw: &mut Rewriter, hint: &str, v: Vec<i64>| {
        let t = Tensor::new(vec![v.len()], v).expect("one value per spatial axis");
        rw.add_constant(hint, t)
    };
    let starts = list(
        rw,
        "phase_crop_starts",
        p.pads_begin.iter().map(|&b| b as i64).collect(),
    );
    let ends = list(
        rw,
        "phase_crop_ends",
        (0..d)
            .map(|a| (p.pads_begin[a] + p.out[a]) as i64)
            .collect(),
    );
    let axes = list(
        rw,
        "phase_crop_axes",
        (0..d).map(|a| 2 + a as i64).collect(),
    );
    rw.add_op("Slice", Attributes::new(), &[all, starts, ends, axes])
}

/// Phase `index` (row-major over the axes' phases) as one phase per axis.
fn phase_of(p: &Plan, index: usize) -> Vec<usize> {
    let d = p.kernel.len();
    let mut rho = vec![0usize; d];
    let mut rest = index;
    for a in (0..d).rev() {
        rho[a] = rest % p.strides[a];
        rest /= p.strides[a];
    }
    rho
}

/// The attributes of a phase convolution of `taps` taps per axis producing `q` positions.
fn phase_attrs(p: &Plan, taps: &[usize], q: &[usize]) -> Attributes {
    let d = taps.len();
    let mut attrs = Attributes::new();
    attrs.insert(
        "kernel_shape",
        Attribute::Ints(taps.iter().map(|&m| m as i64).collect()),
    );
    let pads: Vec<i64> = taps
        .iter()
        .map(|&m| m as i64 - 1)
        .chain((0..d).map(|a| (q[a] - p.input[2 + a]) as i64))
        .collect();
    attrs.insert("pads", Attribute::Ints(pads));
    if p.group > 1 {
        attrs.insert("group", Attribute::Int(p.group as i64));
    }
    attrs
}

/// When every phase has as many taps (each kernel a multiple of its stride): one
/// convolution whose output channels are `(channel, phase…)`, the phase weights stacked,
/// rearranged as a depth-to-space, `[N, C, (Q, s)…]`. The rearrangement is a bijection of the
/// convolution's output, so it fuses into it as an epilogue.
fn one_convolution(rw: &mut Rewriter, p: &Plan, q: &[usize]) -> Result<ValueId, GraphError> {
    let d = p.kernel.len();
    let (batch, c_in, c_out) = (p.input[0], p.input[1] / p.group, p.c_out());
    let phases: usize = p.strides.iter().product();
    let taps: Vec<usize> = (0..d).map(|a| p.kernel[a] / p.strides[a]).collect();
    let block = c_in * taps.iter().product::<usize>();
    let mut stacked = vec![0f32; c_out * phases * block];
    for index in 0..phases {
        let w = phase_weight(p, &phase_of(p, index), &taps).to_f64_vec();
        for co in 0..c_out {
            let to = (co * phases + index) * block;
            for (dst, src) in stacked[to..to + block]
                .iter_mut()
                .zip(&w[co * block..(co + 1) * block])
            {
                *dst = *src as f32;
            }
        }
    }
    let mut shape = vec![c_out * phases, c_in];
    shape.extend(&taps);
    let w = rw.add_constant(
        "phase_weights",
        Tensor::new(shape, stacked).expect("one value per element of the stacked weight"),
    );
    let bias = match p.bias {
        None => None,
        Some(b) => {
            let values = rw
                .constant(b)
                .expect("the plan admits constant biases only")
                .to_f64_vec();
            let per_phase: Vec<f32> = values
                .iter()
                .flat_map(|&v| std::iter::repeat_n(v as f32, phases))
                .collect();
            let t = Tensor::new(vec![c_out * phases], per_phase)
                .expect("one bias per output channel and phase");
            Some(rw.add_constant("phase_bias", t))
        }
    };
    let conv = rw.add_node(
        "Conv",
        phase_attrs(p, &taps, q),
        &[Some(p.x), Some(w), bias],
        1,
        None,
    )?[0];
    // [N, C·∏s, Q…] → [N, C, s…, Q…] → [N, C, (Q, s)…]
    let mut split = vec![batch, c_out];
    split.extend(&p.strides);
    split.extend(q);
    let target = rw.add_shape(&split);
    let all = rw.add_op("Reshape", Attributes::new(), &[conv, target])?;
    let mut perm = vec![0i64, 1];
    for a in 0..d {
        perm.push(2 + (d + a) as i64);
        perm.push(2 + a as i64);
    }
    let mut attrs = Attributes::new();
    attrs.insert("perm", Attribute::Ints(perm));
    rw.add_op("Transpose", attrs, &[all])
}

/// One convolution per phase, stacked and interleaved: `[N, C, (Q, s)…]`.
fn phase_convolutions(rw: &mut Rewriter, p: &Plan, q: &[usize]) -> Result<ValueId, GraphError> {
    let d = p.kernel.len();
    let (batch, c_out) = (p.input[0], p.c_out());
    let phases: usize = p.strides.iter().product();
    let mut stacked = Vec::with_capacity(phases);
    let mut shape = vec![batch, c_out];
    shape.extend(q);
    shape.push(1);
    for index in 0..phases {
        let rho = phase_of(p, index);
        let taps: Vec<usize> = (0..d)
            .map(|a| (p.kernel[a] - rho[a]).div_ceil(p.strides[a]))
            .collect();
        let w = rw.add_constant("phase_weight", phase_weight(p, &rho, &taps));
        let attrs = phase_attrs(p, &taps, q);
        let conv = rw.add_node("Conv", attrs, &[Some(p.x), Some(w), p.bias], 1, None)?[0];
        let target = rw.add_shape(&shape);
        stacked.push(rw.add_op("Reshape", Attributes::new(), &[conv, target])?);
    }
    let mut all = if let [one] = stacked.as_slice() {
        *one
    } else {
        let mut attrs = Attributes::new();
        attrs.insert("axis", Attribute::Int(2 + d as i64));
        rw.add_op("Concat", attrs, &stacked)?
    };
    if phases > 1 {
        // [N, C, Q…, ∏s] → [N, C, Q…, s…] → [N, C, (Q, s)…]
        let mut split = vec![batch, c_out];
        split.extend(q);
        split.extend(&p.strides);
        let target = rw.add_shape(&split);
        all = rw.add_op("Reshape", Attributes::new(), &[all, target])?;
        let mut perm = vec![0i64, 1];
        for a in 0..d {
            perm.push(2 + a as i64);
            perm.push(2 + (d + a) as i64);
        }
        let mut attrs = Attributes::new();
        attrs.insert("perm", Attribute::Ints(perm));
        all = rw.add_op("Transpose", attrs, &[all])?;
    }
    Ok(all)
}

/// The convolution weight of phase `rho`: `v[co, ci, j…] = w[g·C_in/G + ci, co mod C_out/G, ρ +
/// s·(M - 1 - j)…]` for output channel `co` of group `g` and input channel `ci` of that group
/// (`[C_out, C_in/G, M…]`, a grouped convolution's weight).
fn phase_weight(p: &Plan, rho: &[usize], taps: &[usize]) -> Tensor {
    let ws = p.weight.shape();
    let (group_in, group_out) = (ws[0] / p.group, ws[1]);
    let c_out = p.c_out();
    let values = p.weight.to_f64_vec();
    let d = taps.len();
    let count: usize = taps.iter().product();
    let mut out = vec![0f32; c_out * group_in * count];
    let mut j = vec![0usize; d];
    let block: usize = ws[2..].iter().product();
    for tap in 0..count {
        let mut rest = tap;
        for a in (0..d).rev() {
            j[a] = rest % taps[a];
            rest /= taps[a];
        }
        // The source tap's flat offset inside one `[k…]` block.
        let mut source = 0usize;
        for a in 0..d {
            let t = rho[a] + p.strides[a] * (taps[a] - 1 - j[a]);
            source = source * ws[2 + a] + t;
        }
        for co in 0..c_out {
            let (g, local) = (co / group_out, co % group_out);
            for ci in 0..group_in {
                let from = ((g * group_in + ci) * group_out + local) * block + source;
                out[(co * group_in + ci) * count + tap] = values[from] as f32;
            }
        }
    }
    let mut shape = vec![c_out, group_in];
    shape.extend(taps);
    Tensor::new(shape, out).expect("one value per element of the phase weight")
}
