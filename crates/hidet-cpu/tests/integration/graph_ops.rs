//! The compute definitions of the CPU backend's internal operators (`hidet_cpu::graph_ops`)
//! against their reference `eval`: every node of each definition runs as its naive kernel
//! (`ComputeDef::node_function`, verified) through the IR interpreter on random non-zero
//! inputs of odd sizes, and every output must equal `eval`'s: bit for bit for the operators
//! that only move data, within f32 rounding for the depthwise convolution (its definition
//! sums in f32, `eval` in f64).

use hidet_cpu::graph_ops::{registry, HIDET_DOMAIN};
use hidet_graph::ops::common::build_registered;
use hidet_graph::{Attribute, ComputeInput, DType, Tensor};
use hidet_ir::compute::{tensor_dtype, tensor_shape};
use hidet_ir::function::Target;
use hidet_ir::interp::{run_function, Arg, Buffer};
use hidet_ir::verify::verify_function;

/// Deterministic values in `[-2, 2)`, never within 0.05 of zero.
fn values(n: usize, seed: u64) -> Vec<f32> {
    let mut state = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    (0..n)
        .map(|_| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            let x = (state >> 40) as f32 / (1u64 << 24) as f32 * 4.0 - 2.0;
            if x.abs() < 0.05 {
                0.5
            } else {
                x
            }
        })
        .collect()
}

fn floats(shape: &[usize], seed: u64) -> Tensor {
    Tensor::new(shape.to_vec(), values(shape.iter().product(), seed)).expect("sized to shape")
}

fn offsets(v: &[i32]) -> Tensor {
    Tensor::new(vec![v.len()], v.to_vec()).expect("sized to shape")
}

fn buffer(t: &Tensor) -> Buffer {
    if t.dtype().is_float() {
        Buffer::from_f64(t.dtype().to_ir(), &t.to_f64_vec())
    } else {
        Buffer::from_i64(t.dtype().to_ir(), &t.to_i64_vec())
    }
}

/// Checks that operator `op` with `attrs` computes by its definition what `eval` gives on
/// `inputs`, within `tol` relative to the magnitude (bit for bit when 0).
fn check(op: &str, attrs: &[(&str, Attribute)], inputs: &[Tensor], tol: f64) {
    let label = format!("{op} {attrs:?}");
    let operator = build_registered(registry(), HIDET_DOMAIN, op, 1, attrs, inputs.len(), 1)
        .unwrap_or_else(|e| panic!("{label}: {e}"));
    let refs: Vec<Option<&Tensor>> = inputs.iter().map(Some).collect();
    let want = operator.eval(&refs).expect("eval succeeds").remove(0);
    let typed: Vec<Option<ComputeInput<'_>>> = inputs
        .iter()
        .map(|t| {
            Some(ComputeInput {
                dtype: t.dtype(),
                shape: t.shape(),
                value: Some(t),
            })
        })
        .collect();
    let def = operator
        .compute(&typed)
        .expect("compute succeeds")
        .unwrap_or_else(|| panic!("{label}: no compute definition"));
    let mut buffers: Vec<Buffer> = inputs.iter().map(buffer).collect();
    for (i, (out, _)) in def.nodes.iter().enumerate() {
        let f = def.node_function(i, "node");
        verify_function(&f, Target::Cpu).unwrap_or_else(|e| panic!("{label}: node {i}: {e}"));
        let dtype = tensor_dtype(out).expect("node outputs are tensors");
        let numel: i64 = tensor_shape(out)
            .iter()
            .map(|d| d.as_int().expect("static shapes"))
            .product();
        let mut args: Vec<Arg> = buffers.iter().cloned().map(Arg::Buffer).collect();
        args.push(Arg::Buffer(Buffer::zeros(dtype, numel as usize)));
        run_function(&f, &mut args).unwrap_or_else(|e| panic!("{label}: node {i}: {e}"));
        let Some(Arg::Buffer(b)) = args.pop() else {
            panic!("{label}: the output argument is not a buffer");
        };
        buffers.push(b);
    }
    let out = &def.outputs[0];
    let position = def
        .inputs
        .iter()
        .chain(def.nodes.iter().map(|(v, _)| v))
        .position(|v| v == out)
        .expect("the output is an input or a node");
    let got = buffers[position].to_f64();
    let want = want.to_f64_vec();
    assert_eq!(got.len(), want.len(), "{label}: element count");
    for (k, (g, w)) in got.iter().zip(&want).enumerate() {
        let close = g.to_bits() == w.to_bits() || (g - w).abs() <= tol * (1.0 + w.abs());
        assert!(close, "{label}: element {k}: {g} vs {w}");
    }
}

fn ints(v: &[i64]) -> Attribute {
    Attribute::Ints(v.to_vec())
}

#[test]
fn im2col_definitions_agree_with_eval() {
    check(
        "Im2Col",
        &[
            ("kernel_shape", ints(&[3, 3])),
            ("pads", ints(&[1, 1, 1, 1])),
        ],
        &[floats(&[2, 5, 9, 7], 1)],
        0.0,
    );
    check(
        "Im2Col",
        &[
            ("kernel_shape", ints(&[3, 2])),
            ("strides", ints(&[2, 3])),
            ("dilations", ints(&[1, 2])),
            ("pads", ints(&[1, 0, 2, 1])),
        ],
        &[floats(&[1, 3, 9, 8], 2)],
        0.0,
    );
    check(
        "Im2Col",
        &[("kernel_shape", ints(&[4])), ("strides", ints(&[2]))],
        &[floats(&[3, 2, 11], 3).cast(DType::F16)],
        0.0,
    );
    // One column matrix per image.
    check(
        "Im2Col",
        &[
            ("kernel_shape", ints(&[3, 3])),
            ("strides", ints(&[2, 1])),
            ("pads", ints(&[1, 0, 1, 1])),
            ("batched", Attribute::Int(1)),
        ],
        &[floats(&[3, 4, 9, 7], 5)],
        0.0,
    );
    // Quantized activations padded with their zero point.
    check(
        "Im2Col",
        &[
            ("kernel_shape", ints(&[3, 3])),
            ("strides", ints(&[2, 1])),
            ("pads", ints(&[1, 2, 0, 1])),
            ("padding_value", Attribute::Int(131)),
        ],
        &[bytes(&[2, 3, 7, 6], 4)],
        0.0,
    );
}

/// A `uint8` tensor of `shape` spanning the byte range, from `seed`.
fn bytes(shape: &[usize], seed: u64) -> Tensor {
    let n: usize = shape.iter().product();
    let v: Vec<u8> = (0..n as u64)
        .map(|i| ((i * 97 + seed * 31) % 256) as u8)
        .collect();
    Tensor::new(shape.to_vec(), v).unwrap()
}

#[test]
fn integer_matmul_definitions_agree_with_eval() {
    // K = 10, stored as 12 columns whose last two hold values the product must ignore.
    let a: Vec<i8> = (0..5 * 12).map(|i| ((i * 53 % 256) as u8) as i8).collect();
    let a = Tensor::new(vec![5, 12], a).unwrap();
    check(
        "IntegerMatMul",
        &[],
        &[a.clone(), bytes(&[2, 10, 7], 5)],
        0.0,
    );
    // The same weights widened to 16 bits.
    check(
        "IntegerMatMul",
        &[],
        &[a.cast(DType::I16), bytes(&[2, 10, 7], 5)],
        0.0,
    );
    // 37 columns of depth 10: two panels of 32 columns, 3 groups of 4 (the padding holds
    // values the product must ignore).
    let w: Vec<i8> = (0..2 * 3 * 32 * 4)
        .map(|i| ((i * 29 % 256) as u8) as i8)
        .collect();
    let w = Tensor::new(vec![2, 3, 32, 4], w).unwrap();
    check(
        "IntegerLinear",
        &[("columns", Attribute::Int(37))],
        &[bytes(&[9, 10], 6), w.clone()],
        0.0,
    );
    // The same bytes as 6 groups of 2.
    let pairs = Tensor::new(vec![2, 6, 32, 2], w.as_slice::<i8>().unwrap().to_vec()).unwrap();
    check(
        "IntegerLinear",
        &[
            ("columns", Attribute::Int(37)),
            ("depth_group", Attribute::Int(2)),
        ],
        &[bytes(&[9, 10], 6), pairs],
        0.0,
    );
}

#[test]
fn integer_linear_refuses_other_depth_groups_and_mismatched_panels() {
    let attrs = [
        ("columns", Attribute::Int(37)),
        ("depth_group", Attribute::Int(3)),
    ];
    let err = build_registered(registry(), HIDET_DOMAIN, "IntegerLinear", 1, &attrs, 2, 1)
        .expect_err("a depth group of 3 is refused");
    assert!(err.to_string().contains("depth_group"), "{err}");
    // Panels in groups of 4 given to a node that reads pairs.
    let attrs = [
        ("columns", Attribute::Int(37)),
        ("depth_group", Attribute::Int(2)),
    ];
    let op = build_registered(registry(), HIDET_DOMAIN, "IntegerLinear", 1, &attrs, 2, 1).unwrap();
    let w = Tensor::new(vec![2, 3, 32, 4], vec![1i8; 2 * 3 * 32 * 4]).unwrap();
    let x = bytes(&[9, 10], 6);
    let err = op.eval(&[Some(&x), Some(&w)]).unwrap_err();
    assert!(err.to_string().contains("groups of 2"), "{err}");
}

#[test]
fn offset_gather_definitions_agree_with_eval() {
    // A 4-D input read at flat offsets up to its last element (33 + 38 = 71 of 72).
    check(
        "OffsetGather",
        &[],
        &[
            floats(&[1, 3, 9, 8], 4),
            offsets(&[0, 7, 9, 20, 33]),
            offsets(&[0, 1, 8, 38]),
        ],
        0.0,
    );
    check(
        "OffsetGather",
        &[],
        &[
            floats(&[2, 11], 5).cast(DType::F16),
            offsets(&[3, 0, 10]),
            offsets(&[11, 2]),
        ],
        0.0,
    );
}

#[test]
fn depthwise_nhwc_definitions_agree_with_eval() {
    check(
        "DepthwiseConvNhwc",
        &[
            ("kernel_shape", ints(&[3, 2])),
            ("strides", ints(&[2, 1])),
            ("dilations", ints(&[1, 2])),
            ("pads", ints(&[1, 2, 0, 1])),
        ],
        &[
            floats(&[2, 6, 7, 5], 6),
            floats(&[3, 2, 5], 7),
            floats(&[5], 8),
        ],
        1e-5,
    );
}

#[test]
fn column_panels_definitions_agree_with_eval() {
    check(
        "ColumnPanels",
        &[("columns", Attribute::Int(37))],
        &[floats(&[3, 5, 16], 9)],
        0.0,
    );
    check(
        "ColumnPanels",
        &[
            ("columns", Attribute::Int(23)),
            ("width", Attribute::Int(6)),
        ],
        &[floats(&[2, 4, 7, 6], 10)],
        0.0,
    );
}
