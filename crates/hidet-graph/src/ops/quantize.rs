//! Linear quantization: QuantizeLinear, DequantizeLinear (per tensor, per axis, blocked),
//! DynamicQuantizeLinear, MatMulInteger and QLinearMatMul.
//!
//! Quotients and products are rounded to the precision of the float operand's dtype before
//! rounding to integers, as the ONNX reference does (it computes in that dtype).
//!
//! QuantizeLinear and DequantizeLinear have compute definitions (so they fuse into
//! element-wise kernels) for f32 data quantized to 8- or 16-bit integers with a scale and zero
//! point per tensor or per axis; blocked and float8 quantization run on the host.

use crate::ops::common::typed_input;
use crate::dtype::DType;
use crate::kernels::broadcast::{broadcast_offsets, broadcast_shapes};
use crate::kernels::gemm::gemm_rows;
use crate::kernels::quant::{
    int_range, int_values, param_index, quantize_to, saturate_round, scalar_f64,
};
use crate::operator::{
    arg, infer_arg, infer_opt, opt_arg, ComputeDef, ComputeInput, InferInput, OpContext, OpError,
    Operator,
};
use crate::ops::common::check_dtype;
use crate::ops::compute_util::{input, int_bounds, math1, opt_input, placeholders, try_grid_def};
use hidet_ir::expr::{Expr, Var};
use hidet_ir::intrinsic::MathFunc;
use crate::registry::{Registry, LATEST_OPSET};
use crate::shape::{broadcast_dims, TensorType};
use crate::tensor::{Element, Tensor};
use crate::{dispatch_float, dispatch_int};

#[derive(Debug)]
struct Quantize {
    axis: i64,
    block_size: i64,
    output_dtype: Option<DType>,
    /// Float8 outputs: out-of-range values saturate (opset 19+ `saturate`, default 1).
    saturate: bool,
    /// Opset 10–12: scale and zero point must be scalars.
    per_tensor_only: bool,
}

#[derive(Debug)]
struct Dequantize {
    /// The declared output type (opset 23), checked against the scale's.
    output_dtype: Option<DType>,
    axis: i64,
    block_size: i64,
    per_tensor_only: bool,
}

#[derive(Debug)]
struct DynamicQuantize;

/// MatMulInteger (`qlinear == false`) or QLinearMatMul.
#[derive(Debug)]
struct IntMatMul {
    qlinear: bool,
}

fn block_size(c: &OpContext<'_>) -> Result<i64, OpError> {
    let b = c.attrs.int_or("block_size", 0)?;
    if b < 0 {
        return Err(OpError::attr(
            "block_size",
            format!("must be >= 0, got {b}"),
        ));
    }
    Ok(b)
}

fn saturate(c: &OpContext<'_>) -> Result<bool, OpError> {
    match c.attrs.int_or("saturate", 1)? {
        0 => Ok(false),
        1 => Ok(true),
        v => Err(OpError::attr("saturate", format!("must be 0 or 1, got {v}"))),
    }
}

/// Registers the quantization family.
pub fn register(r: &mut Registry) {
    r.register("", "QuantizeLinear", 10..=12, |_| {
        Ok(Box::new(Quantize {
            axis: 1,
            block_size: 0,
            output_dtype: None,
            saturate: true,
            per_tensor_only: true,
        }))
    });
    r.register("", "QuantizeLinear", 13..=20, |c: &OpContext<'_>| {
        Ok(Box::new(Quantize {
            axis: c.attrs.int_or("axis", 1)?,
            block_size: 0,
            output_dtype: None,
            saturate: saturate(c)?,
            per_tensor_only: false,
        }))
    });
    r.register(
        "",
        "QuantizeLinear",
        21..=LATEST_OPSET,
        |c: &OpContext<'_>| {
            let output_dtype = match c.attrs.int_or("output_dtype", 0)? {
                0 => None,
                code => Some(
                    i32::try_from(code)
                        .ok()
                        .and_then(DType::from_onnx_code)
                        .ok_or_else(|| {
                            OpError::Unsupported(format!("QuantizeLinear output_dtype {code}"))
                        })?,
                ),
            };
            Ok(Box::new(Quantize {
                axis: c.attrs.int_or("axis", 1)?,
                block_size: block_size(c)?,
                output_dtype,
                saturate: saturate(c)?,
                per_tensor_only: false,
            }))
        },
    );
    r.register("", "DequantizeLinear", 10..=12, |_| {
        Ok(Box::new(Dequantize {
            output_dtype: None,
            axis: 1,
            block_size: 0,
            per_tensor_only: true,
        }))
    });
    r.register("", "DequantizeLinear", 13..=20, |c: &OpContext<'_>| {
        Ok(Box::new(Dequantize {
            output_dtype: None,
            axis: c.attrs.int_or("axis", 1)?,
            block_size: 0,
            per_tensor_only: false,
        }))
    });
    r.register(
        "",
        "DequantizeLinear",
        21..=LATEST_OPSET,
        |c: &OpContext<'_>| {
            // Opset 23's `output_dtype` must name the scale's type, which is the output's.
            let output_dtype = c.attrs.int_or("output_dtype", 0)?;
            Ok(Box::new(Dequantize {
                output_dtype: i32::try_from(output_dtype)
                    .ok()
                    .filter(|&code| code != 0)
                    .map(|code| {
                        DType::from_onnx_code(code).ok_or_else(|| {
                            OpError::Unsupported(format!("DequantizeLinear output_dtype {code}"))
                        })
                    })
                    .transpose()?,
                axis: c.attrs.int_or("axis", 1)?,
                block_size: block_size(c)?,
                per_tensor_only: false,
            }))
        },
    );
    r.register("", "DynamicQuantizeLinear", 11..=LATEST_OPSET, |_| {
        Ok(Box::new(DynamicQuantize))
    });
    r.register("", "MatMulInteger", 10..=LATEST_OPSET, |_| {
        Ok(Box::new(IntMatMul { qlinear: false }))
    });
    r.register("", "QLinearMatMul", 10..=LATEST_OPSET, |_| {
        Ok(Box::new(IntMatMul { qlinear: true }))
    });
}

/// The quantized types: 8- and 16-bit integers, 4-bit integers, float8.
fn quant_type(d: DType) -> bool {
    (int_range(d).is_some() && d != DType::U32) || d.is_float8()
}

/// Rounds `v` to the precision of float dtype `d` (identity for f64 and non-floats).
fn round_to(d: DType, v: f64) -> f64 {
    dispatch_float!(d, T => T::from_f64(v).to_f64(), else v)
}

/// Per-element parameter values of `p` for a tensor of shape `x`.
fn expand(
    p: &Tensor,
    x: &[usize],
    axis: i64,
    block: i64,
    per_tensor_only: bool,
    what: &str,
) -> Result<Vec<f64>, OpError> {
    if per_tensor_only && p.numel() != 1 {
        return Err(OpError::Shape(format!(
            "{what} must be a scalar before opset 13, got shape {:?}",
            p.shape()
        )));
    }
    let v = p.to_f64_vec();
    Ok(param_index(x, p.shape(), axis, block)?
        .into_iter()
        .map(|i| v[i])
        .collect())
}

impl Quantize {
    fn out_dtype(&self, zp: Option<DType>) -> Result<DType, OpError> {
        let d = match (zp, self.output_dtype) {
            (Some(z), Some(o)) if z != o => {
                return Err(OpError::Invalid(format!(
                    "zero point dtype {z} differs from output_dtype {o}"
                )))
            }
            (Some(z), _) => z,
            (None, Some(o)) => o,
            (None, None) => DType::U8,
        };
        if !quant_type(d) {
            return Err(OpError::Unsupported(format!("quantization to {d}")));
        }
        Ok(d)
    }
}

impl Operator for Quantize {
    fn infer(&self, inputs: &[Option<InferInput<'_>>]) -> Result<Vec<TensorType>, OpError> {
        let x = infer_arg(inputs, 0)?;
        check_dtype(0, x.ty.dtype, |d| d.is_float() || d == DType::I32)?;
        let dtype = self.out_dtype(infer_opt(inputs, 2).map(|z| z.ty.dtype))?;
        Ok(vec![TensorType {
            dtype,
            shape: x.ty.shape.clone(),
        }])
    }

    fn eval(&self, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>, OpError> {
        let (x, scale) = (arg(inputs, 0)?, arg(inputs, 1)?);
        check_dtype(0, x.dtype(), |d| d.is_float() || d == DType::I32)?;
        check_dtype(1, scale.dtype(), DType::is_float)?;
        let zp = opt_arg(inputs, 2);
        let dtype = self.out_dtype(zp.map(Tensor::dtype))?;
        let s = expand(
            scale,
            x.shape(),
            self.axis,
            self.block_size,
            self.per_tensor_only,
            "y_scale",
        )?;
        let z = match zp {
            Some(z) => expand(
                z,
                x.shape(),
                self.axis,
                self.block_size,
                self.per_tensor_only,
                "y_zero_point",
            )?,
            None => vec![0.0; x.numel()],
        };
        let prec = if x.dtype().is_float() {
            x.dtype()
        } else {
            scale.dtype()
        };
        let scaled = x
            .to_f64_vec()
            .into_iter()
            .zip(&s)
            .map(|(xv, &sv)| round_to(prec, xv / sv));
        if dtype.is_float8() {
            // The zero point of a float8 type is 0 by the spec; it is added all the same.
            let v: Vec<f32> = scaled.zip(&z).map(|(q, &zv)| (q + zv) as f32).collect();
            return Ok(vec![to_float8(&v, x.shape().to_vec(), dtype, self.saturate)?]);
        }
        let (lo, hi) = int_range(dtype).ok_or(OpError::DType { index: 2, dtype })?;
        let v: Vec<f64> = scaled
            .zip(&z)
            .map(|(q, &zv)| saturate_round(q, zv, lo, hi))
            .collect();
        Ok(vec![quantize_to(&v, x.shape().to_vec(), 0.0, dtype)?])
    }

    /// `y = saturate(round_half_even(x / scale) + zero_point)` (a NaN quotient counts as 0),
    /// for f32 `x` and an 8- or 16-bit integer `y`, with the parameters per tensor or per
    /// axis ([`param_read`]); `None` otherwise.
    fn compute(&self, inputs: &[Option<ComputeInput<'_>>]) -> Result<Option<ComputeDef>, OpError> {
        let (x, scale) = (input(inputs, 0)?, input(inputs, 1)?);
        let zp = opt_input(inputs, 2);
        let dtype = self.out_dtype(zp.map(|z| z.dtype))?;
        let narrow_int = matches!(dtype, DType::I8 | DType::U8 | DType::I16 | DType::U16);
        if x.dtype != DType::F32 || scale.dtype != DType::F32 || !narrow_int || self.block_size != 0
        {
            return Ok(None);
        }
        let vars = placeholders(inputs);
        let (to, f32) = (dtype.to_ir(), DType::F32.to_ir());
        let read = |p: usize, shape: &[usize], i: &[Expr]| {
            param_read(&vars[p], shape, i, x.shape, self.axis, self.per_tensor_only)
        };
        try_grid_def(vars.clone(), to, x.shape, |i| {
            let s = read(1, scale.shape, i)?;
            let q = vars[0].at(i.to_vec()) / s;
            let rounded = Expr::select(
                math1(MathFunc::IsNan, q.clone()),
                Expr::zero(f32),
                math1(MathFunc::Round, q),
            );
            let shifted = match zp {
                Some(z) => rounded + read(2, z.shape, i)?.cast(f32),
                None => rounded,
            };
            // Saturated in f32, then converted unconditionally: `shifted` is an integer (or
            // an infinity), never NaN, so clamping to the type's bounds and truncating equals
            // the saturating conversion, and the C compiler vectorizes selects between floats
            // where it would not if-convert a guarded float-to-int conversion.
            let (lo, hi) = int_bounds(to);
            let (lo, hi) = (Expr::float_of(lo as f64, f32), Expr::float_of(hi as f64, f32));
            let saturated = Expr::select(
                shifted.le(lo.clone()),
                lo,
                Expr::select(shifted.ge(hi.clone()), hi, shifted),
            );
            Some(saturated.cast(to))
        })
    }
}

/// The read of a quantization parameter `p` of shape `shape` at the element `i` of data of
/// shape `data`: one value (`[]` or `[1]`) or, unless `per_tensor_only`, one per index along
/// `axis` (a 1-D `p` as long as that axis); `None` for other shapes (blocked parameters, or
/// shapes `eval` rejects with an error).
fn param_read(
    p: &Var,
    shape: &[usize],
    i: &[Expr],
    data: &[usize],
    axis: i64,
    per_tensor_only: bool,
) -> Option<Expr> {
    match shape {
        [] => Some(p.at(Vec::<Expr>::new())),
        [1] => Some(p.at([Expr::int(0)])),
        [len] if !per_tensor_only => {
            let rank = data.len() as i64;
            let axis = if axis < 0 { axis + rank } else { axis };
            let at = usize::try_from(axis).ok().filter(|&a| a < data.len())?;
            (data[at] == *len).then(|| p.at([i[at].clone()]))
        }
        _ => None,
    }
}

/// Float8 tensor of `dtype` from f32 values (see [`crate::narrow`] for the rounding).
fn to_float8(v: &[f32], shape: Vec<usize>, dtype: DType, saturate: bool) -> Result<Tensor, OpError> {
    use crate::narrow::{F8E4M3FN, F8E4M3FNUZ, F8E5M2, F8E5M2FNUZ};
    Ok(match dtype {
        DType::F8E4M3FN => Tensor::new(shape, v.iter().map(|&a| F8E4M3FN::from_f32(a, saturate)).collect())?,
        DType::F8E4M3FNUZ => Tensor::new(shape, v.iter().map(|&a| F8E4M3FNUZ::from_f32(a, saturate)).collect())?,
        DType::F8E5M2 => Tensor::new(shape, v.iter().map(|&a| F8E5M2::from_f32(a, saturate)).collect())?,
        DType::F8E5M2FNUZ => Tensor::new(shape, v.iter().map(|&a| F8E5M2FNUZ::from_f32(a, saturate)).collect())?,
        other => return Err(OpError::DType { index: 2, dtype: other }),
    })
}

impl Operator for Dequantize {
    fn infer(&self, inputs: &[Option<InferInput<'_>>]) -> Result<Vec<TensorType>, OpError> {
        let (x, scale) = (infer_arg(inputs, 0)?, infer_arg(inputs, 1)?);
        check_dtype(0, x.ty.dtype, quant_type)?;
        check_dtype(1, scale.ty.dtype, DType::is_float)?;
        if let Some(out) = self.output_dtype.filter(|&d| d != scale.ty.dtype) {
            return Err(OpError::Unsupported(format!(
                "DequantizeLinear with output_dtype {out} and a {} scale",
                scale.ty.dtype
            )));
        }
        Ok(vec![TensorType {
            dtype: scale.ty.dtype,
            shape: x.ty.shape.clone(),
        }])
    }

    fn eval(&self, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>, OpError> {
        let (x, scale) = (arg(inputs, 0)?, arg(inputs, 1)?);
        check_dtype(0, x.dtype(), quant_type)?;
        let dtype = scale.dtype();
        let s = expand(
            scale,
            x.shape(),
            self.axis,
            self.block_size,
            self.per_tensor_only,
            "x_scale",
        )?;
        let z = match opt_arg(inputs, 2) {
            Some(z) => {
                if z.dtype() != x.dtype() {
                    return Err(OpError::DType {
                        index: 2,
                        dtype: z.dtype(),
                    });
                }
                expand(
                    z,
                    x.shape(),
                    self.axis,
                    self.block_size,
                    self.per_tensor_only,
                    "x_zero_point",
                )?
            }
            None => vec![0.0; x.numel()],
        };
        let xv = if x.dtype().is_storage_only() {
            x.to_f64_vec()
        } else {
            int_values(x, 0)?
        };
        let v = xv
            .iter()
            .zip(&s)
            .zip(&z)
            .map(|((&a, &sv), &zv)| (a - zv) * sv);
        let out = dispatch_float!(dtype, T => Tensor::new(x.shape().to_vec(), v.map(T::from_f64).collect::<Vec<T>>())?,
            else return Err(OpError::DType { index: 1, dtype }));
        Ok(vec![out])
    }

    /// `y = (x - zero_point) · scale` in f32 for 8- or 16-bit integer `x`, with the
    /// parameters per tensor or per axis ([`param_read`]); `None` otherwise. The difference
    /// is exact in f32, so the product rounds once, as the reference's does.
    fn compute(&self, inputs: &[Option<ComputeInput<'_>>]) -> Result<Option<ComputeDef>, OpError> {
        let (x, scale) = (input(inputs, 0)?, input(inputs, 1)?);
        let zp = opt_input(inputs, 2);
        let narrow_int = matches!(x.dtype, DType::I8 | DType::U8 | DType::I16 | DType::U16);
        if scale.dtype != DType::F32 || !narrow_int || self.block_size != 0 {
            return Ok(None);
        }
        if zp.is_some_and(|z| z.dtype != x.dtype) {
            return Err(OpError::DType {
                index: 2,
                dtype: zp.map_or(x.dtype, |z| z.dtype),
            });
        }
        let vars = placeholders(inputs);
        let f32 = DType::F32.to_ir();
        let read = |p: usize, shape: &[usize], i: &[Expr]| {
            param_read(&vars[p], shape, i, x.shape, self.axis, self.per_tensor_only)
        };
        try_grid_def(vars.clone(), f32, x.shape, |i| {
            let s = read(1, scale.shape, i)?;
            let v = vars[0].at(i.to_vec()).cast(f32);
            let centered = match zp {
                Some(z) => v - read(2, z.shape, i)?.cast(f32),
                None => v,
            };
            Some(centered * s)
        })
    }
}

impl Operator for DynamicQuantize {
    fn infer(&self, inputs: &[Option<InferInput<'_>>]) -> Result<Vec<TensorType>, OpError> {
        let x = infer_arg(inputs, 0)?;
        check_dtype(0, x.ty.dtype, |d| d == DType::F32)?;
        Ok(vec![
            TensorType {
                dtype: DType::U8,
                shape: x.ty.shape.clone(),
            },
            TensorType::fixed(DType::F32, &[]),
            TensorType::fixed(DType::U8, &[]),
        ])
    }

    fn eval(&self, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>, OpError> {
        let x = arg(inputs, 0)?;
        let xv = typed_input::<f32>(x, 0)?;
        let lo = xv.iter().fold(0f32, |a, &b| a.min(b)) as f64;
        let hi = xv.iter().fold(0f32, |a, &b| a.max(b)) as f64;
        let scale = ((hi - lo) / 255.0) as f32 as f64;
        let (zp, y): (f64, Vec<u8>) = if scale == 0.0 || !scale.is_finite() {
            (0.0, vec![0; xv.len()])
        } else {
            let zp = saturate_round(round_to(DType::F32, -(lo / scale)), 0.0, 0.0, 255.0);
            let y = xv
                .iter()
                .map(|&v| {
                    saturate_round(round_to(DType::F32, v as f64 / scale), zp, 0.0, 255.0) as u8
                })
                .collect();
            (zp, y)
        };
        Ok(vec![
            Tensor::new(x.shape().to_vec(), y)?,
            Tensor::scalar(scale as f32),
            Tensor::scalar(zp as u8),
        ])
    }
}

impl IntMatMul {
    fn slots(&self) -> (usize, usize) {
        if self.qlinear {
            (0, 3)
        } else {
            (0, 1)
        }
    }
}

/// Zero point of MatMulInteger/QLinearMatMul operand: scalar, or 1-D along the operand's
/// rows (A: length M) / columns (B: length N). Returns one value per row/column.
fn zero_points(t: Option<&Tensor>, n: usize, what: &str) -> Result<Vec<f64>, OpError> {
    match t {
        None => Ok(vec![0.0; n]),
        Some(t) => {
            let v = int_values(t, 0)?;
            match v.len() {
                1 => Ok(vec![v[0]; n]),
                l if l == n => Ok(v),
                _ => Err(OpError::Shape(format!(
                    "{what} must have 1 or {n} elements, got shape {:?}",
                    t.shape()
                ))),
            }
        }
    }
}

impl Operator for IntMatMul {
    fn infer(&self, inputs: &[Option<InferInput<'_>>]) -> Result<Vec<TensorType>, OpError> {
        let (sa, sb) = self.slots();
        let (a, b) = (infer_arg(inputs, sa)?, infer_arg(inputs, sb)?);
        check_dtype(sa, a.ty.dtype, |d| matches!(d, DType::I8 | DType::U8))?;
        check_dtype(sb, b.ty.dtype, |d| matches!(d, DType::I8 | DType::U8))?;
        let dtype = if self.qlinear {
            infer_arg(inputs, 7)?.ty.dtype
        } else {
            DType::I32
        };
        let shape = match (&a.ty.shape, &b.ty.shape) {
            (Some(x), Some(y)) if !x.is_empty() && !y.is_empty() => {
                let (bx, m) = if x.len() == 1 {
                    (&x[..0], None)
                } else {
                    (&x[..x.len() - 2], Some(x[x.len() - 2].clone()))
                };
                let (by, n) = if y.len() == 1 {
                    (&y[..0], None)
                } else {
                    (&y[..y.len() - 2], Some(y[y.len() - 1].clone()))
                };
                let mut out = broadcast_dims(bx, by)
                    .ok_or_else(|| OpError::Shape("batch dimensions do not broadcast".into()))?;
                out.extend(m);
                out.extend(n);
                Some(out)
            }
            (Some(_), Some(_)) => {
                return Err(OpError::Shape("matmul operands must have rank >= 1".into()))
            }
            _ => None,
        };
        Ok(vec![TensorType { dtype, shape }])
    }

    fn eval(&self, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>, OpError> {
        let (sa, sb) = self.slots();
        let (a, b) = (arg(inputs, sa)?, arg(inputs, sb)?);
        check_dtype(sa, a.dtype(), |d| matches!(d, DType::I8 | DType::U8))?;
        check_dtype(sb, b.dtype(), |d| matches!(d, DType::I8 | DType::U8))?;
        if a.rank() == 0 || b.rank() == 0 {
            return Err(OpError::Shape("matmul operands must have rank >= 1".into()));
        }
        let ash: Vec<usize> = if a.rank() == 1 {
            vec![1, a.shape()[0]]
        } else {
            a.shape().to_vec()
        };
        let bsh: Vec<usize> = if b.rank() == 1 {
            vec![b.shape()[0], 1]
        } else {
            b.shape().to_vec()
        };
        let (m, k) = (ash[ash.len() - 2], ash[ash.len() - 1]);
        let (k2, n) = (bsh[bsh.len() - 2], bsh[bsh.len() - 1]);
        if k != k2 {
            return Err(OpError::Shape(format!(
                "inner dimensions {k} and {k2} differ"
            )));
        }
        let (azp_slot, bzp_slot) = if self.qlinear { (2, 5) } else { (2, 3) };
        let azp = zero_points(opt_arg(inputs, azp_slot), m, "a_zero_point")?;
        let bzp = zero_points(opt_arg(inputs, bzp_slot), n, "b_zero_point")?;
        let av: Vec<f64> = int_values(a, sa)?
            .iter()
            .enumerate()
            .map(|(i, v)| v - azp[(i / k.max(1)) % m.max(1)])
            .collect();
        let bv: Vec<f64> = int_values(b, sb)?
            .iter()
            .enumerate()
            .map(|(i, v)| v - bzp[i % n.max(1)])
            .collect();
        let (ba, bb) = (&ash[..ash.len() - 2], &bsh[..bsh.len() - 2]);
        let batch = broadcast_shapes(&[ba, bb])?;
        let (oa, ob) = (broadcast_offsets(ba, &batch), broadcast_offsets(bb, &batch));
        let mut acc = vec![0f64; oa.len() * m * n];
        for (t, (&pa, &pb)) in oa.iter().zip(&ob).enumerate() {
            gemm_rows(
                &av[pa * m * k..(pa + 1) * m * k],
                &bv[pb * k * n..(pb + 1) * k * n],
                &mut acc[t * m * n..(t + 1) * m * n],
                k,
                n,
            );
        }
        let mut shape = batch;
        if a.rank() > 1 {
            shape.push(m);
        }
        if b.rank() > 1 {
            shape.push(n);
        }
        if !self.qlinear {
            return Ok(vec![Tensor::new(
                shape,
                acc.iter().map(|&v| v as i32).collect(),
            )?]);
        }
        let a_scale = arg(inputs, 1)?;
        let sd = a_scale.dtype();
        check_dtype(1, sd, DType::is_float)?;
        let (asc, bsc, ysc) = (
            scalar_f64(a_scale, "a_scale")?,
            scalar_f64(arg(inputs, 4)?, "b_scale")?,
            scalar_f64(arg(inputs, 6)?, "y_scale")?,
        );
        let multiplier = round_to(sd, round_to(sd, asc * bsc) / ysc);
        let y_zp = arg(inputs, 7)?;
        let yz = scalar_f64(y_zp, "y_zero_point")?;
        let out_dtype = y_zp.dtype();
        // Like the ONNX reference (numpy `rint(...).astype`), out-of-range results wrap.
        let out = dispatch_int!(out_dtype, T => {
            let v: Vec<T> = acc.iter().map(|&v| T::from_i128((v * multiplier + yz).round_ties_even() as i128)).collect();
            Tensor::new(shape, v)?
        }, else return Err(OpError::DType { index: 7, dtype: out_dtype }));
        Ok(vec![out])
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ops::common::build_op;
    use crate::attribute::Attribute;

    fn build(
        name: &str,
        opset: i64,
        attrs: &[(&str, Attribute)],
    ) -> Result<Box<dyn Operator>, OpError> {
        build_op("", name, opset, attrs, 3, 1)
    }

    #[test]
    fn quantize_rounds_half_to_even_and_saturates_per_axis() {
        let x = Tensor::new(vec![2, 3], vec![2.5f32, 3.5, -300.0, 1.0, 100.0, -0.5]).unwrap();
        let s = Tensor::new(vec![2], vec![1.0f32, 0.5]).unwrap();
        let z = Tensor::new(vec![2], vec![0i8, -3]).unwrap();
        let op = build("QuantizeLinear", 13, &[("axis", Attribute::Int(-2))]).unwrap();
        let y = op.eval(&[Some(&x), Some(&s), Some(&z)]).unwrap().remove(0);
        // row 0: 2.5→2, 3.5→4, -300→-128; row 1: 1/0.5=2-3=-1, 200-3=197→127, -1-3=-4
        assert_eq!(y.as_slice::<i8>().unwrap(), &[2, 4, -128, -1, 127, -4]);
        // Opset 10 rejects per-axis scales.
        assert!(matches!(
            build("QuantizeLinear", 10, &[])
                .unwrap()
                .eval(&[Some(&x), Some(&s), Some(&z)]),
            Err(OpError::Shape(_))
        ));
    }

    #[test]
    fn blocked_dequantize_and_quantize_round_trip() {
        let x = Tensor::new(vec![2, 5], vec![10u8, 20, 30, 40, 50, 60, 70, 80, 90, 100]).unwrap();
        let s = Tensor::new(vec![2, 3], vec![0.5f32, 2.0, 4.0, 1.0, 0.25, 8.0]).unwrap();
        let z = Tensor::new(vec![2, 3], vec![1u8, 2, 3, 4, 5, 6]).unwrap();
        let attrs = [
            ("axis", Attribute::Int(1)),
            ("block_size", Attribute::Int(2)),
        ];
        let d = build("DequantizeLinear", 21, &attrs)
            .unwrap()
            .eval(&[Some(&x), Some(&s), Some(&z)])
            .unwrap()
            .remove(0);
        let want = [4.5, 9.5, 56.0, 76.0, 188.0, 56.0, 66.0, 18.75, 21.25, 752.0];
        assert_eq!(d.to_f64_vec(), want);
        let q = build("QuantizeLinear", 21, &attrs)
            .unwrap()
            .eval(&[Some(&d), Some(&s), Some(&z)])
            .unwrap()
            .remove(0);
        assert_eq!(q, x);
    }

    #[test]
    fn dynamic_quantize_matches_formula() {
        let x = Tensor::new(vec![5], vec![-1.0f32, 0.5, 2.0, 1.27, -0.3]).unwrap();
        let out = DynamicQuantize.eval(&[Some(&x)]).unwrap();
        let scale = (3.0f32 / 255.0) as f64;
        assert_eq!(out[1].to_f64_vec(), vec![scale]);
        let zp = (1.0 / scale).round_ties_even();
        assert_eq!(out[2].to_f64_vec(), vec![zp]);
        let want: Vec<f64> = [-1.0f32, 0.5, 2.0, 1.27, -0.3]
            .iter()
            .map(|&v| ((v as f64 / scale) as f32 as f64).round_ties_even() + zp)
            .map(|v| v.clamp(0.0, 255.0))
            .collect();
        assert_eq!(out[0].to_f64_vec(), want);
    }

    #[test]
    fn matmul_integer_with_row_and_column_zero_points_batched() {
        let a = Tensor::new(vec![2, 2, 3], vec![1u8, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12]).unwrap();
        let b = Tensor::new(vec![3, 2], vec![3u8, 1, 4, 1, 5, 9]).unwrap();
        let az = Tensor::new(vec![2], vec![1u8, 2]).unwrap();
        let bz = Tensor::new(vec![2], vec![2u8, 1]).unwrap();
        let y = build("MatMulInteger", 10, &[])
            .unwrap()
            .eval(&[Some(&a), Some(&b), Some(&az), Some(&bz)])
            .unwrap()
            .remove(0);
        assert_eq!(y.shape(), &[2, 2, 2]);
        let (av, bv) = (a.to_f64_vec(), b.to_f64_vec());
        let mut want = vec![];
        for t in 0..2 {
            for i in 0..2 {
                for j in 0..2 {
                    let s: f64 = (0..3)
                        .map(|p| {
                            (av[t * 6 + i * 3 + p] - [1.0, 2.0][i])
                                * (bv[p * 2 + j] - [2.0, 1.0][j])
                        })
                        .sum();
                    want.push(s as i32);
                }
            }
        }
        assert_eq!(y.as_slice::<i32>().unwrap(), &want[..]);
    }

    #[test]
    fn qlinear_matmul_requantizes() {
        let a = Tensor::new(vec![1, 2], vec![130u8, 120]).unwrap();
        let b = Tensor::new(vec![2, 1], vec![140u8, 100]).unwrap();
        let f = |v: f32| Tensor::scalar(v);
        let z = |v: u8| Tensor::scalar(v);
        let op = build("QLinearMatMul", 10, &[]).unwrap();
        let y = op
            .eval(&[
                Some(&a),
                Some(&f(0.1)),
                Some(&z(128)),
                Some(&b),
                Some(&f(0.2)),
                Some(&z(128)),
                Some(&f(0.05)),
                Some(&z(10)),
            ])
            .unwrap()
            .remove(0);
        // (2*12 + (-8)*(-28)) = 248; * (0.1*0.2/0.05 = 0.4) = 99.2 → 99 + 10
        assert_eq!(y.as_slice::<u8>().unwrap(), &[109]);
    }

    #[test]
    fn qlinear_matmul_wraps_out_of_range_like_the_reference() {
        let a = Tensor::new(vec![1, 1], vec![-100i8]).unwrap();
        let b = Tensor::new(vec![1, 1], vec![100i8]).unwrap();
        let f = |v: f32| Tensor::scalar(v);
        let z = |v: i8| Tensor::scalar(v);
        let op = build("QLinearMatMul", 10, &[]).unwrap();
        let y = op
            .eval(&[
                Some(&a),
                Some(&f(0.25)),
                Some(&z(0)),
                Some(&b),
                Some(&f(0.5)),
                Some(&z(0)),
                Some(&f(10.0)),
                Some(&z(-9)),
            ])
            .unwrap()
            .remove(0);
        // -10000 * 0.0125 = -125, - 9 = -134 → wraps to 122.
        assert_eq!(y.as_slice::<i8>().unwrap(), &[122]);
    }

    #[test]
    fn errors_are_typed() {
        let x = Tensor::new(vec![2, 3], vec![1.0f32; 6]).unwrap();
        let s = Tensor::new(vec![4], vec![1.0f32; 4]).unwrap();
        let op = build("QuantizeLinear", 13, &[]).unwrap();
        assert!(matches!(
            op.eval(&[Some(&x), Some(&s)]),
            Err(OpError::Shape(_))
        ));
        let op = build("QuantizeLinear", 13, &[("axis", Attribute::Int(5))]).unwrap();
        let s2 = Tensor::new(vec![3], vec![1.0f32; 3]).unwrap();
        assert!(matches!(
            op.eval(&[Some(&x), Some(&s2)]),
            Err(OpError::Attribute { .. })
        ));
        assert!(matches!(
            build("DequantizeLinear", 13, &[])
                .unwrap()
                .eval(&[Some(&x), Some(&s2)]),
            Err(OpError::DType { .. })
        ));
        assert!(matches!(
            build("QuantizeLinear", 21, &[("block_size", Attribute::Int(-1))]),
            Err(OpError::Attribute { .. })
        ));
        let a = Tensor::new(vec![2, 3], vec![1u8; 6]).unwrap();
        assert!(matches!(
            build("MatMulInteger", 10, &[])
                .unwrap()
                .eval(&[Some(&a), Some(&a)]),
            Err(OpError::Shape(_))
        ));
    }
}
