//! `hidet::Im2Col`: the column matrix of a convolution, the right operand of convolution as
//! a matrix product (`Y[oc, (n, o)] = Σ_r Wmat[oc, r] · Col[r, (n, o)]`).
//!
//! `Im2Col(X; kernel_shape, strides, dilations, pads)` with `X` of shape `[N, C, d…]` gives
//! `Col` of shape `[C·∏k, N·∏o]`: row `r = (c, k…)` (row-major over the channel and the
//! kernel position), column `(n, o)` (row-major over the image and the output positions),
//! holding the element of image `n` the window at `o` reads at kernel position `k` of channel
//! `c`, or the attribute `padding_value` (an integer, default 0) in the padding. `X` is a float
//! tensor, or `uint8` (quantized activations, padded with their zero point). The window geometry is the convolution's
//! ([`hidet_graph::kernels::window`]) with explicit pads. With the attribute `batched` = 1,
//! `Col` is `[N, C·∏k, ∏o]` instead, one column matrix per image, `Col[n, r, o]`: a product
//! batched over the images then finds each column's image as its batch index, never by
//! dividing the column by the image's pixel count.
//!
//! The operator is internal (domain [`HIDET_DOMAIN`]): the implicit-GEMM pass creates it in
//! front of a matrix product, whose kernel inlines its compute definition into the loads of
//! its right operand, so the column matrix is never stored.

use crate::graph_ops::HIDET_DOMAIN;
use hidet_graph::dispatch_float;
use hidet_graph::dtype::DType;
use hidet_graph::kernels::window::{Geometry, WindowAttrs, WindowSpec, BEYOND_PADDING};
use hidet_graph::operator::{
    arg, infer_arg, ComputeDef, ComputeInput, InferInput, OpContext, OpError, Operator,
};
use hidet_graph::ops::common::check_dtype;
use hidet_graph::ops::compute_util::{grid_def, input, placeholders, unravel};
use hidet_graph::ops::window_compute::{fits_i32, guarded, window_read};
use hidet_graph::registry::{Registry, LATEST_OPSET};
use hidet_graph::shape::{Dim, TensorType};
use hidet_graph::tensor::{Element, Tensor};
use hidet_ir::expr::Expr;

/// An `Im2Col` node (see the module docs).
#[derive(Debug)]
struct Im2Col {
    window: WindowAttrs,
    /// The value of the padding.
    padding: i64,
    /// One column matrix per image, `[N, C·∏k, ∏o]`.
    batched: bool,
}

/// The element types `Im2Col` takes.
fn supported(d: DType) -> bool {
    d.is_float() || d == DType::U8
}

/// Registers `hidet::Im2Col` (every opset of the domain).
pub fn register(r: &mut Registry) {
    r.register(
        HIDET_DOMAIN,
        "Im2Col",
        1..=LATEST_OPSET,
        |c: &OpContext<'_>| {
            let padding = c.attrs.int_or("padding_value", 0)?;
            if !(0..=255).contains(&padding) {
                return Err(OpError::attr(
                    "padding_value",
                    format!("must be a uint8 value, got {padding}"),
                ));
            }
            let batched = match c.attrs.int_or("batched", 0)? {
                0 => false,
                1 => true,
                other => {
                    return Err(OpError::attr(
                        "batched",
                        format!("must be 0 or 1, got {other}"),
                    ))
                }
            };
            Ok(Box::new(Im2Col {
                window: WindowSpec::explicit(c.attrs, "Im2Col")?,
                padding,
                batched,
            }))
        },
    );
}

impl Im2Col {
    /// The geometry for input spatial sizes `spatial`, after checking `X`'s shape.
    fn geometry(&self, xs: &[usize]) -> Result<Geometry, OpError> {
        if xs.len() != self.window.rank() + 2 {
            return Err(OpError::Shape(format!(
                "Im2Col needs X of shape [N, C, d…] with {} spatial dimensions, got {xs:?}",
                self.window.rank()
            )));
        }
        self.window.resolve(&xs[2..])
    }

    /// The shape of `Col` for `batch` images of `rows` rows (`C·∏k`) of `pixels` columns.
    fn output_shape<T: Copy + std::ops::Mul<Output = T>>(
        &self,
        batch: T,
        rows: T,
        pixels: T,
    ) -> Vec<T> {
        if self.batched {
            vec![batch, rows, pixels]
        } else {
            vec![rows, batch * pixels]
        }
    }
}

impl Operator for Im2Col {
    fn infer(&self, inputs: &[Option<InferInput<'_>>]) -> Result<Vec<TensorType>, OpError> {
        let x = infer_arg(inputs, 0)?;
        check_dtype(0, x.ty.dtype, supported)?;
        let kernel: usize = self.window.kernel.iter().product();
        let shape = match x.ty.fixed_shape() {
            Some(xs) => {
                let g = self.geometry(&xs)?;
                self.output_shape(xs[0], xs[1] * kernel, g.output_size())
                    .into_iter()
                    .map(Dim::Fixed)
                    .collect()
            }
            None => vec![Dim::Unknown; if self.batched { 3 } else { 2 }],
        };
        Ok(vec![TensorType {
            dtype: x.ty.dtype,
            shape: Some(shape),
        }])
    }

    fn eval(&self, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>, OpError> {
        let x = arg(inputs, 0)?;
        check_dtype(0, x.dtype(), supported)?;
        let g = self.geometry(x.shape())?;
        let (ni, no, nk) = (g.input_size(), g.output_size(), g.kernel_size());
        let (batch, channels) = (x.shape()[0], x.shape()[1]);
        let offsets = g.offsets()?;
        let xv = x.to_f64_vec();
        let mut col = Vec::with_capacity(channels * nk * batch * no);
        let mut push_row = |n: usize, c: usize, k: usize| {
            let plane = &xv[(n * channels + c) * ni..][..ni];
            col.extend(offsets[k * no..][..no].iter().map(|&off| {
                if off < BEYOND_PADDING {
                    plane[off]
                } else {
                    self.padding as f64
                }
            }));
        };
        if self.batched {
            for n in 0..batch {
                for c in 0..channels {
                    for k in 0..nk {
                        push_row(n, c, k);
                    }
                }
            }
        } else {
            for c in 0..channels {
                for k in 0..nk {
                    for n in 0..batch {
                        push_row(n, c, k);
                    }
                }
            }
        }
        let shape = self.output_shape(batch, channels * nk, no);
        let dtype = x.dtype();
        if dtype == DType::U8 {
            // Exact: every value is an input element or the padding, both in 0..=255.
            let bytes: Vec<u8> = col.iter().map(|&v| v as u8).collect();
            return Ok(vec![Tensor::new(shape, bytes)?]);
        }
        let out = dispatch_float!(dtype,
            T => Tensor::new(shape, col.iter().map(|&v| T::from_f64(v)).collect::<Vec<T>>())?,
            else return Err(OpError::DType { index: 0, dtype }));
        Ok(vec![out])
    }

    /// `Col[r, j] = x[n, c, o·s + k·d - pad]` (`padding_value` in the padding: a select on the
    /// index bounds), with `(c, k…)` unraveled from `r` and `(n, o…)` from `j`; batched,
    /// `Col[n, r, j]` with `o…` unraveled from `j`.
    fn compute(&self, inputs: &[Option<ComputeInput<'_>>]) -> Result<Option<ComputeDef>, OpError> {
        let x = input(inputs, 0)?;
        check_dtype(0, x.dtype, supported)?;
        let g = self.geometry(x.shape)?;
        let (batch, channels) = (x.shape[0], x.shape[1]);
        let shape = self.output_shape(batch, channels * g.kernel_size(), g.output_size());
        if !fits_i32(&[x.shape, &shape]) {
            return Ok(None);
        }
        let dtype = x.dtype.to_ir();
        let vars = placeholders(inputs);
        let vx = vars[0].clone();
        let mut row_shape = vec![channels];
        row_shape.extend(&g.kernel);
        grid_def(vars, dtype, &shape, |i| {
            let (image, row, column) = match i {
                [n, r, j] => (n.clone(), r, unravel(j, &g.output)),
                [r, j] => {
                    let mut column_shape = vec![batch];
                    column_shape.extend(&g.output);
                    let mut column = unravel(j, &column_shape);
                    (column.remove(0), r, column)
                }
                _ => unreachable!("the grid has the rank of `output_shape`, 2 or 3"),
            };
            let row = unravel(row, &row_shape);
            let read = window_read(&g, &column, &row[1..]);
            let mut idx = vec![image, row[0].clone()];
            idx.extend(read.index);
            let padding = if self.padding == 0 {
                Expr::zero(dtype)
            } else {
                Expr::int(self.padding).cast(dtype)
            };
            guarded(&read.inside, vx.at(idx), padding)
        })
        .map(Some)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::graph_ops::build_op;
    use hidet_graph::attribute::Attribute;

    fn build(attrs: &[(&str, Attribute)]) -> Result<Box<dyn Operator>, OpError> {
        build_op(HIDET_DOMAIN, "Im2Col", 1, attrs, 1, 1)
    }

    #[test]
    fn columns_hold_the_window_reads_with_zero_padding() {
        // 3 images of 2 channels of 4×5, kernel 3×2, stride (2, 1), dilation (1, 2), pads
        // (1, 0, 0, 1).
        let (n, c, h, w) = (3usize, 2usize, 4usize, 5usize);
        let xv: Vec<f32> = (0..n * c * h * w).map(|i| 0.25 * i as f32 - 3.1).collect();
        let x = Tensor::new(vec![n, c, h, w], xv.clone()).unwrap();
        let op = build(&[
            ("kernel_shape", Attribute::Ints(vec![3, 2])),
            ("strides", Attribute::Ints(vec![2, 1])),
            ("dilations", Attribute::Ints(vec![1, 2])),
            ("pads", Attribute::Ints(vec![1, 0, 0, 1])),
        ])
        .unwrap();
        let col = op.eval(&[Some(&x)]).unwrap().remove(0);
        let (oh, ow) = ((h + 1 - 3) / 2 + 1, (w + 1 - 3) + 1);
        let cols = n * oh * ow;
        assert_eq!(col.shape(), &[c * 6, cols]);
        let got = col.as_slice::<f32>().unwrap();
        for ni in 0..n {
            for ci in 0..c {
                for a in 0..3 {
                    for b in 0..2 {
                        for i in 0..oh {
                            for j in 0..ow {
                                let hi = (i * 2 + a) as i64 - 1;
                                let wi = (j + 2 * b) as i64;
                                let want = if hi < 0 || hi >= h as i64 || wi >= w as i64 {
                                    0.0
                                } else {
                                    xv[((ni * c + ci) * h + hi as usize) * w + wi as usize]
                                };
                                let r = (ci * 3 + a) * 2 + b;
                                let o = (ni * oh + i) * ow + j;
                                assert_eq!(got[r * cols + o], want, "row {r} column {o}");
                            }
                        }
                    }
                }
            }
        }
        let ty = TensorType::fixed(DType::F32, &[n, c, h, w]);
        let inferred = op
            .infer(&[Some(InferInput {
                ty: &ty,
                value: None,
            })])
            .unwrap();
        assert_eq!(inferred[0], TensorType::fixed(DType::F32, &[c * 6, cols]));
    }

    #[test]
    fn batched_columns_are_one_matrix_per_image() {
        let (n, c, h, w) = (2usize, 3usize, 5usize, 4usize);
        let xv: Vec<f32> = (0..n * c * h * w).map(|i| 0.5 * i as f32 - 7.3).collect();
        let x = Tensor::new(vec![n, c, h, w], xv).unwrap();
        let attrs = |batched: i64| {
            vec![
                ("kernel_shape", Attribute::Ints(vec![3, 3])),
                ("pads", Attribute::Ints(vec![1, 1, 1, 1])),
                ("batched", Attribute::Int(batched)),
            ]
        };
        let flat = build(&attrs(0))
            .unwrap()
            .eval(&[Some(&x)])
            .unwrap()
            .remove(0);
        let op = build(&attrs(1)).unwrap();
        let batched = op.eval(&[Some(&x)]).unwrap().remove(0);
        let (rows, pixels) = (c * 9, h * w);
        assert_eq!(flat.shape(), &[rows, n * pixels]);
        assert_eq!(batched.shape(), &[n, rows, pixels]);
        let (flat, batched) = (
            flat.as_slice::<f32>().unwrap(),
            batched.as_slice::<f32>().unwrap(),
        );
        for ni in 0..n {
            for r in 0..rows {
                for o in 0..pixels {
                    let want = flat[r * n * pixels + ni * pixels + o];
                    assert_eq!(batched[(ni * rows + r) * pixels + o], want);
                }
            }
        }
        let ty = TensorType::fixed(DType::F32, &[n, c, h, w]);
        let input = InferInput {
            ty: &ty,
            value: None,
        };
        let inferred = op.infer(&[Some(input)]).unwrap();
        assert_eq!(
            inferred[0],
            TensorType::fixed(DType::F32, &[n, rows, pixels])
        );
        assert!(build(&attrs(2)).is_err());
    }

    #[test]
    fn wrong_ranks_auto_pad_and_missing_kernel_are_errors() {
        let op = build(&[("kernel_shape", Attribute::Ints(vec![2, 2]))]).unwrap();
        let x = Tensor::new(vec![2, 3, 3], vec![1.0f32; 18]).unwrap();
        assert!(matches!(op.eval(&[Some(&x)]), Err(OpError::Shape(_))));
        assert!(matches!(build(&[]), Err(OpError::Attribute { .. })));
        assert!(matches!(
            build(&[
                ("kernel_shape", Attribute::Ints(vec![2, 2])),
                ("auto_pad", Attribute::String("SAME_UPPER".into())),
            ]),
            Err(OpError::Attribute { .. })
        ));
        let xi = Tensor::new(vec![1, 1, 3, 3], vec![1i32; 9]).unwrap();
        assert!(matches!(op.eval(&[Some(&xi)]), Err(OpError::DType { .. })));
    }
}
