//! Quantized convolutions as 8-bit products: a `Conv` of dequantized operands (a QDQ model,
//! as ONNX Runtime's static quantization writes it) becomes an integer product accumulated in
//! 32 bits, `hidet::IntegerMatMul`, followed by the arithmetic that dequantizes its result.
//!
//! ```text
//! Conv(DequantizeLinear(xq, sx, zx), DequantizeLinear(wq, sw, 0), B?)
//!     →  Reshape(Add(Mul(Cast(Sub(IntegerMatMul(A, X), corr), f32), scale), B[OC, 1]), [N, OC, o…])
//!     X = Transpose(Reshape(hidet::Im2Col(Pad(u, zu)), [K, N, ∏o]), [1, 0, 2])   [N, K, ∏o]
//!     u = xq as uint8 (int8 shifted by 128: Cast(Add(Cast(xq, int32), 128), uint8)), zu = zx (+128)
//!     Pad(u, zu): u padded with zu (stored once), for a padded convolution
//!     A = wq as [OC, K] (K = C·∏k), rows padded with zeros to a multiple of 4 columns,
//!         int8, or int16 for a target without VNNI (the template multiplies 16-bit pairs)
//!     corr[oc] = zu · Σ_k wq[oc, k],  scale[oc] = sx · sw[oc]
//! ```
//!
//! and likewise `MatMul(DequantizeLinear(xq), DequantizeLinear(wq))` by a 2-D weight, or
//! `Gemm` (`alpha = beta = 1`, `A` not transposed, a bias of `[N]`), as
//! `hidet::IntegerLinear` of the activations as rows, `[M, K]`, by the weight stored in
//! panels of 32 columns (`graph_ops/integer_linear.rs`), reshaped to the output;
//!
//! which is exact: `Σ_k (x - zx)·w = Σ_k u·w - zu·Σ_k w`, and the padding, `zu`, dequantizes
//! to 0 as the float convolution's does. The weight is stored once as 8-bit integers, the
//! activations are read as bytes, and the kernel multiplies four byte pairs per 32-bit lane
//! (`vpdpbusd` with VNNI, exact 16-bit multiply-adds without).
//!
//! ONNX's integer operators with a constant `int8` weight take the same product:
//! `ConvInteger` and `MatMulInteger` (the `int32` sum less the zero-point correction, nothing
//! dequantized), `QLinearConv` and `QLinearMatMul` (dequantized, with `QLinearConv`'s `int32`
//! bias dequantized at compile time, then `QuantizeLinear` by the output's scale and zero
//! point), so a model in ONNX Runtime's "QOperator" form runs no product on the host.
//!
//! The pass runs before constant folding, which would otherwise fold the weight's
//! `DequantizeLinear` into a float tensor. It applies to ungrouped convolutions and products
//! with static shapes, a constant `int8` weight with zero points all 0 (symmetric, ONNX Runtime's default)
//! and a per-tensor or per-output-channel scale, and activations of `int8` or `uint8` with a
//! constant per-tensor scale and zero point. Others keep their float form.

use crate::graph_ops::integer_linear::{panel_offset, panel_shape, OP_TYPE as INTEGER_LINEAR};
use crate::graph_ops::integer_matmul::OP_TYPE as INTEGER_MATMUL;
use crate::graph_ops::HIDET_DOMAIN;
use crate::templates::integer_matmul::padded_depth;
use hidet_graph::attribute::Attributes;
use hidet_graph::dtype::DType;
use hidet_graph::graph::{Graph, GraphError, NodeId, ValueId};
use hidet_graph::kernels::window::{Geometry, WindowSpec};
use hidet_graph::passes::rewrite::Rewriter;
use hidet_graph::passes::GraphPass;
use hidet_graph::tensor::{Tensor, TensorError};
use hidet_graph::{Attribute, FusionHints};

/// Rewrites convolutions and matrix products of dequantized operands into 8-bit products (see
/// the module docs).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct QuantizedProducts {
    /// Consecutive `k` of a column side by side in `hidet::IntegerLinear`'s weight panels: 4
    /// or 2 ([`crate::templates::integer_linear::depth_group_for`] of the target).
    pub depth_group: usize,
}

impl Default for QuantizedProducts {
    /// Groups of four `k`.
    fn default() -> Self {
        QuantizedProducts { depth_group: 4 }
    }
}

impl GraphPass for QuantizedProducts {
    fn name(&self) -> &'static str {
        "quantized-products"
    }

    fn run(&self, graph: Graph) -> Result<Graph, GraphError> {
        Rewriter::with_registry(graph, crate::graph_ops::registry()).replace_each(
            plan,
            |p| p.y,
            |rw, p| rewrite(rw, p, self.depth_group),
        )
    }
}

/// One applicable product.
struct Plan {
    node: String,
    op_type: &'static str,
    /// The quantized activations `xq` (`int8` or `uint8`).
    xq: ValueId,
    signed: bool,
    /// The activations' scale and zero point.
    x_scale: f32,
    x_zero: ZeroPoint,
    /// The weight as `[OC, K]` rows of `int8`, and its scale per output channel.
    weight: Vec<i8>,
    out_ch: usize,
    w_scale: Vec<f32>,
    bias: Bias,
    output: Output,
    y: ValueId,
    form: Form,
}

/// The bias a product adds.
enum Bias {
    None,
    /// A float value of `[OC]`.
    Value(ValueId),
    /// `QLinearConv`'s `int32` bias dequantized at compile time (`B · sx · sw`).
    Constant(Vec<f32>),
}

/// What a product gives.
enum Output {
    /// The float product (a QDQ model's `Conv`, `MatMul`, `Gemm`).
    Float,
    /// The `int32` sum itself (`ConvInteger`, `MatMulInteger`).
    Int32,
    /// The float product quantized by `QuantizeLinear(·, scale, zero)` (`QLinearConv`,
    /// `QLinearMatMul`).
    Quantized { scale: ValueId, zero: ValueId },
}

impl Output {
    /// The element type of the product's output.
    fn dtype(&self, rw: &Rewriter) -> DType {
        match self {
            Output::Float => DType::F32,
            Output::Int32 => DType::I32,
            Output::Quantized { zero, .. } => rw.graph().value(*zero).ty.dtype,
        }
    }
}

/// An operand of 8-bit integers with its quantization parameters (absent: scale 1, zero 0),
/// per channel along `axis` where they are tensors.
struct QuantizedOperand {
    value: ValueId,
    scale: Option<ValueId>,
    zero: Option<ValueId>,
    axis: i64,
}

/// Input `i` of node `n` when present.
fn input(rw: &Rewriter, n: NodeId, i: usize) -> Option<ValueId> {
    rw.graph().nodes()[n.0].inputs.get(i).copied().flatten()
}

/// What the product multiplies the weight with.
enum Form {
    /// A convolution over `[N, C, d…]`.
    Conv {
        input_shape: Vec<usize>,
        geometry: Geometry,
    },
    /// A matrix product of `[…, K]` activations (`rows` rows) by the weight, giving
    /// `output_shape`.
    MatMul {
        rows: usize,
        output_shape: Vec<usize>,
    },
}

/// The quantized activations of a product: `(xq, signed, scale, zero point)`, when `x` holds
/// `int8` or `uint8` values with a constant per-tensor scale and a per-tensor zero point.
fn activations(rw: &Rewriter, x: &QuantizedOperand) -> Option<(ValueId, bool, f32, ZeroPoint)> {
    let dtype = rw.graph().value(x.value).ty.dtype;
    let signed = match dtype {
        DType::I8 => true,
        DType::U8 => false,
        _ => return None,
    };
    let scale = match x.scale {
        Some(s) => scalar_f32(rw, s)?,
        None => 1.0,
    };
    Some((x.value, signed, scale, zero_point(rw, x.zero, dtype)?))
}

/// The weight of a product: its `int8` values and shape, and its scale for each channel
/// along `channel_axis`, when `w` is a constant `int8` tensor with zero points all 0 and a
/// per-tensor or per-channel (along `channel_axis`) scale.
fn weight(
    rw: &Rewriter,
    w: &QuantizedOperand,
    channel_axis: usize,
) -> Option<(Vec<i8>, Vec<usize>, Vec<f32>)> {
    let (w_zero, w_axis) = (w.zero, w.axis);
    let weight = rw.constant(w.value)?;
    if weight.dtype() != DType::I8 || weight.numel() == 0 {
        return None;
    }
    let shape = weight.shape().to_vec();
    let out_ch = *shape.get(channel_axis)?;
    if let Some(z) = w_zero {
        let z = rw.constant(z)?;
        if z.dtype() != DType::I8 || z.to_f64_vec().iter().any(|&v| v != 0.0) {
            return None;
        }
    }
    let scales = match w.scale {
        Some(scale) => {
            let scales = rw.constant(scale)?;
            if scales.dtype() != DType::F32 {
                return None;
            }
            scales.as_slice::<f32>().ok()?.to_vec()
        }
        None => vec![1.0],
    };
    let rank = shape.len() as i64;
    let axis = if w_axis < 0 { w_axis + rank } else { w_axis };
    let scales = match scales.len() {
        1 => vec![scales[0]; out_ch],
        len if len == out_ch && axis == channel_axis as i64 => scales,
        _ => return None,
    };
    Some((weight.as_slice::<i8>().ok()?.to_vec(), shape, scales))
}

/// Whether `bias` is absent, an `f32` value of shape `[out_ch]` or `out_ch` constants.
fn bias_fits(rw: &Rewriter, bias: &Bias, out_ch: usize) -> bool {
    match bias {
        Bias::None => true,
        Bias::Value(b) => {
            let ty = &rw.graph().value(*b).ty;
            ty.dtype == DType::F32 && ty.fixed_shape().is_some_and(|s| s == [out_ch])
        }
        Bias::Constant(values) => values.len() == out_ch,
    }
}

/// `QLinearConv`'s bias (`int32` `[OC]`, scale `sx · sw`, zero 0) as floats, when constant.
fn integer_bias(
    rw: &Rewriter,
    bias: Option<ValueId>,
    x_scale: f32,
    w_scale: &[f32],
) -> Option<Bias> {
    let Some(b) = bias else {
        return Some(Bias::None);
    };
    let t = rw.constant(b)?;
    if t.dtype() != DType::I32 || t.numel() != w_scale.len() {
        return None;
    }
    let values = t.as_slice::<i32>().ok()?;
    Some(Bias::Constant(
        values
            .iter()
            .zip(w_scale)
            .map(|(&v, &s)| (f64::from(v) * f64::from(x_scale) * f64::from(s)) as f32)
            .collect(),
    ))
}

/// The operand of the `DequantizeLinear` node (default domain) producing `v`.
fn dequantize(rw: &Rewriter, v: ValueId) -> Option<QuantizedOperand> {
    let g = rw.graph();
    let (producer, _) = g.value(v).producer?;
    let node = &g.nodes()[producer.0];
    if node.op_type != "DequantizeLinear" || !node.domain.is_empty() {
        return None;
    }
    let x = node.inputs.first().copied().flatten()?;
    let scale = node.inputs.get(1).copied().flatten()?;
    let zero = node.inputs.get(2).copied().flatten();
    // Blocked quantization (opset 21's `block_size`) is not per-tensor or per-axis.
    if node.attrs.int_or("block_size", 0).ok()? != 0 {
        return None;
    }
    Some(QuantizedOperand {
        value: x,
        scale: Some(scale),
        zero,
        axis: node.attrs.int_or("axis", 1).ok()?,
    })
}

/// The one value of a constant `f32` tensor of one element.
fn scalar_f32(rw: &Rewriter, v: ValueId) -> Option<f32> {
    let t = rw.constant(v)?;
    (t.dtype() == DType::F32 && t.numel() == 1)
        .then(|| t.as_slice::<f32>().ok()?.first().copied())?
}

/// The activations' zero point: a constant, or a value computed at run time (dynamic
/// quantization's `DynamicQuantizeLinear`).
#[derive(Clone, Copy)]
enum ZeroPoint {
    Constant(i32),
    Value(ValueId),
}

/// The zero point `v` of activations of `dtype` (`int8` or `uint8`), one element of that type
/// (0 when absent).
fn zero_point(rw: &Rewriter, v: Option<ValueId>, dtype: DType) -> Option<ZeroPoint> {
    let Some(v) = v else {
        return Some(ZeroPoint::Constant(0));
    };
    if let Some(t) = rw.constant(v) {
        if t.dtype() != dtype || t.numel() != 1 {
            return None;
        }
        let value = t.to_f64_vec().first().copied()?;
        return Some(ZeroPoint::Constant(value as i32));
    }
    let ty = &rw.graph().value(v).ty;
    let one = ty.fixed_shape()?.iter().product::<usize>() == 1;
    (ty.dtype == dtype && one).then_some(ZeroPoint::Value(v))
}

/// The zero point of the unsigned bytes the product reads: the activations' (`int8` shifted
/// by 128), as a constant, or as a scalar `int32` value.
fn unsigned_zero(
    rw: &mut Rewriter,
    p: &Plan,
) -> Result<(Option<i32>, Option<ValueId>), GraphError> {
    let shift = if p.signed { 128 } else { 0 };
    match p.x_zero {
        ZeroPoint::Constant(z) => Ok((Some(z + shift), None)),
        ZeroPoint::Value(v) => {
            let wide = rw.add_cast(v, DType::I32)?;
            let shape = rw.add_shape(&[]);
            let wide = rw.add_op("Reshape", Attributes::new(), &[wide, shape])?;
            if shift == 0 {
                return Ok((None, Some(wide)));
            }
            let shift = Tensor::new(vec![], vec![shift]).map_err(|e| node_error(p, e))?;
            let shift = rw.add_constant("int8_shift", shift);
            Ok((
                None,
                Some(rw.add_op("Add", Attributes::new(), &[wide, shift])?),
            ))
        }
    }
}

fn plan(rw: &Rewriter, n: NodeId) -> Option<Plan> {
    let node = &rw.graph().nodes()[n.0];
    if !node.domain.is_empty() {
        return None;
    }
    let operand = |value: usize, scale: Option<usize>, zero: usize, axis: i64| {
        Some(QuantizedOperand {
            value: input(rw, n, value)?,
            scale: match scale {
                Some(i) => Some(input(rw, n, i)?),
                None => None,
            },
            zero: input(rw, n, zero),
            axis,
        })
    };
    match node.op_type.as_str() {
        "Conv" | "MatMul" | "Gemm" => {
            let x = dequantize(rw, input(rw, n, 0)?)?;
            let w = dequantize(rw, input(rw, n, 1)?)?;
            let bias = match input(rw, n, 2) {
                Some(b) if node.op_type != "MatMul" => Bias::Value(b),
                _ => Bias::None,
            };
            if node.op_type == "Conv" {
                conv_plan(rw, n, (x, w), bias, Output::Float)
            } else {
                matmul_plan(rw, n, (x, w), bias, Output::Float)
            }
        }
        // ConvInteger(x, w, x_zero?, w_zero?), MatMulInteger(a, b, a_zero?, b_zero?).
        "ConvInteger" => {
            let (x, w) = (operand(0, None, 2, 1)?, operand(1, None, 3, 0)?);
            conv_plan(rw, n, (x, w), Bias::None, Output::Int32)
        }
        "MatMulInteger" => {
            let (x, w) = (operand(0, None, 2, 1)?, operand(1, None, 3, 1)?);
            matmul_plan(rw, n, (x, w), Bias::None, Output::Int32)
        }
        // QLinearConv(x, sx, zx, w, sw, zw, sy, zy, B?), QLinearMatMul(a, sa, za, b, sb, zb,
        // sy, zy).
        "QLinearConv" | "QLinearMatMul" => {
            let conv = node.op_type == "QLinearConv";
            let x = operand(0, Some(1), 2, 1)?;
            let w = operand(3, Some(4), 5, if conv { 0 } else { 1 })?;
            let output = Output::Quantized {
                scale: input(rw, n, 6)?,
                zero: input(rw, n, 7)?,
            };
            if conv {
                // The bias is dequantized with the product's scales, known once planned.
                let plan = conv_plan(rw, n, (x, w), Bias::None, output)?;
                let bias = integer_bias(rw, input(rw, n, 8), plan.x_scale, &plan.w_scale)?;
                Some(Plan { bias, ..plan })
            } else {
                matmul_plan(rw, n, (x, w), Bias::None, output)
            }
        }
        _ => None,
    }
}

/// An ungrouped convolution of static shapes (see the module docs).
fn conv_plan(
    rw: &Rewriter,
    n: NodeId,
    (x, w): (QuantizedOperand, QuantizedOperand),
    bias: Bias,
    output: Output,
) -> Option<Plan> {
    let g = rw.graph();
    let node = &g.nodes()[n.0];
    if node.attrs.int_or("group", 1).ok()? != 1 {
        return None;
    }
    let y = match node.outputs.as_slice() {
        [Some(y)] => *y,
        _ => return None,
    };
    let (xq, signed, x_scale, x_zero) = activations(rw, &x)?;
    let (weight, weight_shape, w_scale) = weight(rw, &w, 0)?;
    let input_shape = g.value(xq).ty.fixed_shape()?;
    let out_ch = weight_shape[0];
    if g.value(y).ty.dtype != output.dtype(rw)
        || input_shape.len() < 3
        || weight_shape.len() != input_shape.len()
        || weight_shape[1] != input_shape[1]
        || input_shape[0] == 0
        || !bias_fits(rw, &bias, out_ch)
    {
        return None;
    }
    let spec = WindowSpec::from_attrs(&node.attrs).ok()?;
    let window = spec.attrs(&weight_shape[2..]).ok()?;
    if window.kernel != weight_shape[2..] {
        return None;
    }
    let geometry = window.resolve(&input_shape[2..]).ok()?;
    if geometry.output_size() == 0 {
        return None;
    }
    Some(Plan {
        node: node.name.clone(),
        op_type: "Conv",
        xq,
        signed,
        x_scale,
        x_zero,
        weight,
        out_ch,
        w_scale,
        bias,
        output,
        y,
        form: Form::Conv {
            input_shape,
            geometry,
        },
    })
}

/// A matrix product of static shapes by a constant 2-D weight: `MatMul` and its integer
/// forms, or a `Gemm` (`alpha = 1`, `beta = 1`, `A` not transposed) with a bias of `[N]` or
/// none.
fn matmul_plan(
    rw: &Rewriter,
    n: NodeId,
    (x, w): (QuantizedOperand, QuantizedOperand),
    bias: Bias,
    output: Output,
) -> Option<Plan> {
    let g = rw.graph();
    let node = &g.nodes()[n.0];
    let gemm = node.op_type == "Gemm";
    let y = match node.outputs.as_slice() {
        [Some(y)] => *y,
        _ => return None,
    };
    let transposed = gemm && node.attrs.int_or("transB", 0).ok()? != 0;
    if gemm
        && (node.attrs.int_or("transA", 0).ok()? != 0
            || node.attrs.float_or("alpha", 1.0).ok()? != 1.0
            || node.attrs.float_or("beta", 1.0).ok()? != 1.0)
    {
        return None;
    }
    let (xq, signed, x_scale, x_zero) = activations(rw, &x)?;
    let (stored, weight_shape, w_scale) = weight(rw, &w, usize::from(!transposed))?;
    let input_shape = g.value(xq).ty.fixed_shape()?;
    let output_shape = g.value(y).ty.fixed_shape()?;
    let [k, out_ch] = match (weight_shape.as_slice(), transposed) {
        ([k, n], false) => [*k, *n],
        ([n, k], true) => [*k, *n],
        _ => return None,
    };
    if g.value(y).ty.dtype != output.dtype(rw)
        || input_shape.len() < 2
        || (gemm && input_shape.len() != 2)
        || input_shape.last() != Some(&k)
        || !bias_fits(rw, &bias, out_ch)
    {
        return None;
    }
    let rows: usize = input_shape[..input_shape.len() - 1].iter().product();
    if rows == 0 {
        return None;
    }
    // The weight as [OC, K] rows.
    let weight = if transposed {
        stored
    } else {
        (0..out_ch * k)
            .map(|i| stored[(i % k) * out_ch + i / k])
            .collect()
    };
    Some(Plan {
        node: node.name.clone(),
        op_type: if gemm { "Gemm" } else { "MatMul" },
        xq,
        signed,
        x_scale,
        x_zero,
        weight,
        out_ch,
        w_scale,
        bias,
        output,
        y,
        form: Form::MatMul { rows, output_shape },
    })
}

fn node_error(p: &Plan, e: TensorError) -> GraphError {
    GraphError::Node {
        node: p.node.clone(),
        op_type: p.op_type.into(),
        source: e.into(),
    }
}

/// For a padded convolution: `u` padded with its zero point `zu` by a `Pad` node stored once
/// ([`FusionHints::materialize`]: the column matrix then reads it without guards, and whatever
/// computes `u`, such as the quantization of a float input, runs once per element rather than
/// once per window that reads it), and the geometry of the same convolution over it without
/// padding. An unpadded convolution reads `u` as it is.
fn padded(
    rw: &mut Rewriter,
    p: &Plan,
    g: &Geometry,
    u: ValueId,
    (zu, zu_value): (Option<i32>, Option<ValueId>),
) -> Result<(ValueId, Geometry), GraphError> {
    if g.pads_begin.iter().chain(&g.pads_end).all(|&v| v == 0) {
        return Ok((u, g.clone()));
    }
    let mut pads = vec![0i64; 2];
    pads.extend(g.pads_begin.iter().map(|&v| v as i64));
    pads.extend([0, 0]);
    pads.extend(g.pads_end.iter().map(|&v| v as i64));
    let pads = Tensor::new(vec![pads.len()], pads).map_err(|e| node_error(p, e))?;
    let pads = rw.add_constant("qconv_pads", pads);
    // `zu` is in 0..=255: the zero point of unsigned (or shifted signed) bytes.
    let value = match (zu, zu_value) {
        (Some(zu), _) => {
            let value = Tensor::new(vec![], vec![zu as u8]).map_err(|e| node_error(p, e))?;
            rw.add_constant("qconv_pad_value", value)
        }
        (None, Some(v)) => rw.add_cast(v, DType::U8)?,
        (None, None) => {
            let value = Tensor::new(vec![], vec![0u8]).map_err(|e| node_error(p, e))?;
            rw.add_constant("qconv_pad_value", value)
        }
    };
    let padded = rw.add_op("Pad", Attributes::new(), &[u, pads, value])?;
    rw.set_hints(
        padded,
        FusionHints {
            materialize: true,
            ..FusionHints::default()
        },
    )?;
    let n = g.input.len();
    let unpadded = Geometry {
        input: (0..n)
            .map(|d| g.input[d] + g.pads_begin[d] + g.pads_end[d])
            .collect(),
        pads_begin: vec![0; n],
        pads_end: vec![0; n],
        ..g.clone()
    };
    Ok((padded, unpadded))
}

/// Adds the integer product of `p`; returns the value that replaces the product's output.
/// Rewrites the product `p`, `hidet::IntegerLinear`'s weight panels in groups of
/// `depth_group` `k` (and `hidet::IntegerMatMul`'s weight widened to `int16` for pairs).
fn rewrite(rw: &mut Rewriter, p: &Plan, depth_group: usize) -> Result<ValueId, GraphError> {
    // The activations as unsigned bytes, and their zero point.
    let u = if p.signed {
        let wide = rw.add_cast(p.xq, DType::I32)?;
        let shift = Tensor::new(vec![], vec![128i32]).map_err(|e| node_error(p, e))?;
        let shift = rw.add_constant("int8_shift", shift);
        let shifted = rw.add_op("Add", Attributes::new(), &[wide, shift])?;
        rw.add_cast(shifted, DType::U8)?
    } else {
        p.xq
    };
    let (zu, zu_value) = unsigned_zero(rw, p)?;
    let out_ch = p.out_ch;
    let depth = p.weight.len() / out_ch;
    let sums: Vec<i64> = p
        .weight
        .chunks(depth)
        .map(|row| row.iter().map(|&w| i64::from(w)).sum())
        .collect();
    // The product, and the shape of per-channel constants beside its result: channels are
    // its rows for a convolution (`[N, OC, ∏o]`), its columns for a matrix product (`[M, OC]`).
    let (mut y, channels) = match &p.form {
        Form::Conv {
            input_shape,
            geometry,
        } => {
            let (u, unpadded) = padded(rw, p, geometry, u, (zu, zu_value))?;
            let attrs = unpadded.explicit_attrs();
            let col = rw.add_domain_op(HIDET_DOMAIN, "Im2Col", attrs, &[u])?;
            let shape = [depth, input_shape[0], geometry.output_size()];
            let shape = rw.add_shape(&shape);
            let col = rw.add_op("Reshape", Attributes::new(), &[col, shape])?;
            let x = rw.add_op("Transpose", perm(vec![1, 0, 2]), &[col])?;
            // The weight as [OC, Kp] bytes, or widened to 16 bits when products go by pairs.
            let kp = padded_depth(depth as i64) as usize;
            let mut a = vec![0i8; out_ch * kp];
            for (oc, row) in p.weight.chunks(depth).enumerate() {
                a[oc * kp..oc * kp + depth].copy_from_slice(row);
            }
            let a = if depth_group == 2 {
                let wide: Vec<i16> = a.iter().map(|&v| i16::from(v)).collect();
                Tensor::new(vec![out_ch, kp], wide)
            } else {
                Tensor::new(vec![out_ch, kp], a)
            };
            let a = a.map_err(|e| node_error(p, e))?;
            let a = rw.add_constant("quantized_weight", a);
            let y = rw.add_domain_op(HIDET_DOMAIN, INTEGER_MATMUL, Attributes::new(), &[a, x])?;
            (y, vec![out_ch, 1])
        }
        Form::MatMul { rows, .. } => {
            let shape = rw.add_shape(&[*rows, depth]);
            let x = rw.add_op("Reshape", Attributes::new(), &[u, shape])?;
            // The weight as panels of LINEAR_PANEL_WIDTH columns, `depth_group` k of a column
            // together.
            let shape = panel_shape(out_ch, depth, depth_group);
            let groups = shape[1];
            let mut w = vec![0i8; shape.iter().product()];
            for (n, row) in p.weight.chunks(depth).enumerate() {
                for (k, &v) in row.iter().enumerate() {
                    w[panel_offset(n, k, groups, depth_group)] = v;
                }
            }
            let w = Tensor::new(shape, w).map_err(|e| node_error(p, e))?;
            let w = rw.add_constant("quantized_weight_panels", w);
            let mut attrs = Attributes::new();
            attrs.insert("columns", Attribute::Int(out_ch as i64));
            attrs.insert("depth_group", Attribute::Int(depth_group as i64));
            let y = rw.add_domain_op(HIDET_DOMAIN, INTEGER_LINEAR, attrs, &[x, w])?;
            (y, vec![out_ch])
        }
    };
    // The zero-point correction `zu · Σ_k w[oc, k]`; |zu · Σ_k w| ≤ 255 · 128 · K: within i32
    // for any K the template runs.
    let corr = match (zu, zu_value) {
        (Some(0), _) => None,
        (Some(zu), _) => {
            let corr: Vec<i32> = sums.iter().map(|&s| (i64::from(zu) * s) as i32).collect();
            let corr = Tensor::new(channels.clone(), corr).map_err(|e| node_error(p, e))?;
            Some(rw.add_constant("quantized_zero_correction", corr))
        }
        (None, Some(zu)) => {
            let sums: Vec<i32> = sums.iter().map(|&s| s as i32).collect();
            let sums = Tensor::new(channels.clone(), sums).map_err(|e| node_error(p, e))?;
            let sums = rw.add_constant("quantized_weight_sums", sums);
            Some(rw.add_op("Mul", Attributes::new(), &[sums, zu])?)
        }
        (None, None) => None,
    };
    if let Some(corr) = corr {
        y = rw.add_op("Sub", Attributes::new(), &[y, corr])?;
    }
    let y = match p.output {
        Output::Int32 => y,
        Output::Float | Output::Quantized { .. } => {
            let y = rw.add_cast(y, DType::F32)?;
            let scale: Vec<f32> = p.w_scale.iter().map(|&s| s * p.x_scale).collect();
            let scale = Tensor::new(channels.clone(), scale).map_err(|e| node_error(p, e))?;
            let scale = rw.add_constant("quantized_scale", scale);
            rw.add_op("Mul", Attributes::new(), &[y, scale])?
        }
    };
    // The bias as a value of `shape`.
    let bias = |rw: &mut Rewriter, shape: &[usize]| -> Result<Option<ValueId>, GraphError> {
        Ok(match &p.bias {
            Bias::None => None,
            Bias::Value(b) => {
                let dims = rw.add_shape(shape);
                Some(rw.add_op("Reshape", Attributes::new(), &[*b, dims])?)
            }
            Bias::Constant(values) => {
                let t =
                    Tensor::new(shape.to_vec(), values.clone()).map_err(|e| node_error(p, e))?;
                Some(rw.add_constant("quantized_bias", t))
            }
        })
    };
    let y = match &p.form {
        Form::Conv {
            input_shape,
            geometry,
        } => {
            let y = match bias(rw, &[out_ch, 1])? {
                Some(b) => rw.add_op("Add", Attributes::new(), &[y, b])?,
                None => y,
            };
            let mut out_shape = vec![input_shape[0], out_ch];
            out_shape.extend(&geometry.output);
            let shape = rw.add_shape(&out_shape);
            rw.add_op("Reshape", Attributes::new(), &[y, shape])?
        }
        Form::MatMul { output_shape, .. } => {
            let mut y = y;
            if let Some(b) = bias(rw, &[out_ch])? {
                y = rw.add_op("Add", Attributes::new(), &[y, b])?;
            }
            let shape = rw.add_shape(output_shape);
            rw.add_op("Reshape", Attributes::new(), &[y, shape])?
        }
    };
    match p.output {
        Output::Quantized { scale, zero } => {
            rw.add_op("QuantizeLinear", Attributes::new(), &[y, scale, zero])
        }
        Output::Float | Output::Int32 => Ok(y),
    }
}

/// The attributes of a `Transpose` by `perm`.
fn perm(perm: Vec<i64>) -> Attributes {
    let mut attrs = Attributes::new();
    attrs.insert("perm", Attribute::Ints(perm));
    attrs
}
