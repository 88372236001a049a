//! Shape and data-movement operators: built through the registry at several opsets, shape
//! inference with every input known must agree with the evaluated outputs (dtype and shape),
//! on every dtype family, and inference with unknown values must stay consistent (never a
//! fixed dimension that evaluation contradicts).

use hidet_graph::half::{bf16, f16};
use hidet_graph::{
    Attribute, Attributes, DType, Dim, InferInput, OpContext, Operator, Registry, Tensor,
    TensorType,
};

fn build(
    op: &str,
    opset: i64,
    attrs: &[(&str, Attribute)],
    inputs: usize,
    outputs: usize,
) -> Box<dyn Operator> {
    let mut a = Attributes::new();
    for (k, v) in attrs {
        a.insert(*k, v.clone());
    }
    let ctx = OpContext {
        domain: "",
        op_type: op,
        opset,
        attrs: &a,
        num_inputs: inputs,
        num_outputs: outputs,
    };
    Registry::global()
        .lookup("", op, opset)
        .unwrap_or_else(|| panic!("{op} is registered at opset {opset}"))
        .build(&ctx)
        .unwrap_or_else(|e| panic!("{op}: {e}"))
}

fn ints(v: &[i64]) -> Tensor {
    Tensor::new(vec![v.len()], v.to_vec()).unwrap()
}

/// A tensor of `dtype` and `shape` with values 1, 2, 3, ... (wrapping for narrow types).
fn data(dtype: DType, shape: &[usize]) -> Tensor {
    let n: usize = shape.iter().product();
    let v: Vec<f64> = (0..n).map(|i| (i % 97 + 1) as f64).collect();
    Tensor::new(shape.to_vec(), v).unwrap().cast(dtype)
}

/// Checks infer (with values, then without) against eval for one node.
fn check(op: &dyn Operator, inputs: &[Option<Tensor>]) {
    let types: Vec<Option<TensorType>> = inputs
        .iter()
        .map(|t| t.as_ref().map(|t| TensorType::fixed(t.dtype(), t.shape())))
        .collect();
    let with_values: Vec<Option<InferInput<'_>>> = inputs
        .iter()
        .zip(&types)
        .map(|(t, ty)| {
            Some(InferInput {
                ty: ty.as_ref()?,
                value: t.as_ref(),
            })
        })
        .collect();
    let without_values: Vec<Option<InferInput<'_>>> = types
        .iter()
        .map(|ty| {
            Some(InferInput {
                ty: ty.as_ref()?,
                value: None,
            })
        })
        .collect();
    let args: Vec<Option<&Tensor>> = inputs.iter().map(Option::as_ref).collect();
    let outs = op
        .eval(&args)
        .unwrap_or_else(|e| panic!("{op:?}: eval: {e}"));
    let full = op
        .infer(&with_values)
        .unwrap_or_else(|e| panic!("{op:?}: infer: {e}"));
    let partial = op
        .infer(&without_values)
        .unwrap_or_else(|e| panic!("{op:?}: infer: {e}"));
    assert_eq!(outs.len(), full.len(), "{op:?}");
    for ((o, f), p) in outs.iter().zip(&full).zip(&partial) {
        assert_eq!(
            *f,
            TensorType::fixed(o.dtype(), o.shape()),
            "{op:?} with values"
        );
        assert_eq!(p.dtype, o.dtype(), "{op:?} without values");
        if let Some(dims) = &p.shape {
            assert_eq!(dims.len(), o.rank(), "{op:?} without values: rank");
            for (d, &n) in dims.iter().zip(o.shape()) {
                assert!(
                    !matches!(d, Dim::Fixed(f) if *f != n),
                    "{op:?}: {dims:?} vs {:?}",
                    o.shape()
                );
            }
        }
    }
}

const DTYPES: [DType; 6] = [
    DType::F32,
    DType::F16,
    DType::BF16,
    DType::I8,
    DType::U64,
    DType::Bool,
];

#[test]
fn layout_ops_agree_on_every_dtype() {
    for dt in DTYPES {
        let x = data(dt, &[2, 1, 3, 5]);
        check(
            &*build("Flatten", 13, &[("axis", Attribute::Int(-2))], 1, 1),
            &[Some(x.clone())],
        );
        check(
            &*build("Squeeze", 13, &[], 2, 1),
            &[Some(x.clone()), Some(ints(&[-3]))],
        );
        check(&*build("Squeeze", 11, &[], 1, 1), &[Some(x.clone())]);
        check(
            &*build("Unsqueeze", 13, &[], 2, 1),
            &[Some(x.clone()), Some(ints(&[5, 0]))],
        );
        check(
            &*build("Unsqueeze", 9, &[("axes", Attribute::Ints(vec![-1]))], 1, 1),
            &[Some(x.clone())],
        );
        check(
            &*build(
                "Transpose",
                13,
                &[("perm", Attribute::Ints(vec![3, 1, 0, 2]))],
                1,
                1,
            ),
            &[Some(x.clone())],
        );
        check(
            &*build("Concat", 13, &[("axis", Attribute::Int(-1))], 2, 1),
            &[Some(x.clone()), Some(data(dt, &[2, 1, 3, 2]))],
        );
        check(
            &*build(
                "Split",
                18,
                &[
                    ("axis", Attribute::Int(3)),
                    ("num_outputs", Attribute::Int(2)),
                ],
                1,
                2,
            ),
            &[Some(x.clone())],
        );
        check(
            &*build("Split", 13, &[("axis", Attribute::Int(-1))], 2, 3),
            &[Some(x.clone()), Some(ints(&[1, 4, 0]))],
        );
        check(
            &*build("Split", 11, &[("axis", Attribute::Int(2))], 1, 3),
            &[Some(x.clone())],
        );
        check(
            &*build("Slice", 13, &[], 5, 1),
            &[
                Some(x.clone()),
                Some(ints(&[-1, 1])),
                Some(ints(&[-100, 9])),
                Some(ints(&[3, 0])),
                Some(ints(&[-2, 1])),
            ],
        );
        check(
            &*build(
                "Slice",
                9,
                &[
                    ("starts", Attribute::Ints(vec![1])),
                    ("ends", Attribute::Ints(vec![3])),
                    ("axes", Attribute::Ints(vec![2])),
                ],
                1,
                1,
            ),
            &[Some(x.clone())],
        );
        check(
            &*build("Expand", 13, &[], 2, 1),
            &[Some(data(dt, &[3, 1])), Some(ints(&[2, 1, 4]))],
        );
        check(
            &*build("Tile", 13, &[], 2, 1),
            &[Some(x.clone()), Some(ints(&[1, 3, 2, 1]))],
        );
        check(
            &*build(
                "DepthToSpace",
                13,
                &[
                    ("blocksize", Attribute::Int(2)),
                    ("mode", Attribute::String("CRD".into())),
                ],
                1,
                1,
            ),
            &[Some(data(dt, &[1, 8, 3, 2]))],
        );
        check(
            &*build(
                "SpaceToDepth",
                13,
                &[("blocksize", Attribute::Int(3))],
                1,
                1,
            ),
            &[Some(data(dt, &[2, 1, 3, 6]))],
        );
        check(
            &*build("Trilu", 14, &[("upper", Attribute::Int(0))], 2, 1),
            &[Some(x.clone()), Some(Tensor::scalar(1i64))],
        );
        check(
            &*build(
                "ReverseSequence",
                10,
                &[
                    ("batch_axis", Attribute::Int(0)),
                    ("time_axis", Attribute::Int(1)),
                ],
                2,
                1,
            ),
            &[Some(data(dt, &[3, 4, 2])), Some(ints(&[4, 1, 2]))],
        );
        check(&*build("Size", 13, &[], 1, 1), &[Some(x.clone())]);
        check(&*build("NonZero", 13, &[], 1, 1), &[Some(x.clone())]);
        check(
            &*build("Compress", 11, &[("axis", Attribute::Int(-1))], 2, 1),
            &[
                Some(x.clone()),
                Some(Tensor::new(vec![4], vec![true, false, false, true]).unwrap()),
            ],
        );
        check(&*build("EyeLike", 9, &[], 1, 1), &[Some(data(dt, &[3, 5]))]);
    }
}

#[test]
fn indexed_ops_agree_on_every_dtype() {
    for dt in DTYPES {
        let x = data(dt, &[3, 4, 5]);
        let idx = Tensor::new(vec![2, 2], vec![-1i32, 0, 2, 1]).unwrap();
        check(
            &*build("Gather", 13, &[("axis", Attribute::Int(1))], 2, 1),
            &[Some(x.clone()), Some(idx.clone())],
        );
        let e = Tensor::new(vec![2, 4, 1], vec![0i64, 2, -1, 1, 2, 0, 0, 1]).unwrap();
        check(
            &*build("GatherElements", 13, &[("axis", Attribute::Int(0))], 2, 1),
            &[Some(x.clone()), Some(e.clone())],
        );
        let nd = Tensor::new(vec![3, 1, 2], vec![0i64, 1, 2, -1, 1, 3]).unwrap();
        check(
            &*build("GatherND", 13, &[("batch_dims", Attribute::Int(1))], 2, 1),
            &[Some(x.clone()), Some(nd.clone())],
        );
        let upd = data(dt, &[2, 4, 1]);
        check(
            &*build(
                "ScatterElements",
                18,
                &[("reduction", Attribute::String("max".into()))],
                3,
                1,
            ),
            &[Some(x.clone()), Some(e), Some(upd)],
        );
        let snd = Tensor::new(vec![2, 2], vec![0i64, 1, -1, 3]).unwrap();
        check(
            &*build(
                "ScatterND",
                16,
                &[("reduction", Attribute::String("add".into()))],
                3,
                1,
            ),
            &[Some(x.clone()), Some(snd), Some(data(dt, &[2, 5]))],
        );
        let fill = data(dt, &[]);
        for mode in ["constant", "reflect", "edge", "wrap"] {
            let op = build("Pad", 19, &[("mode", Attribute::String(mode.into()))], 4, 1);
            check(
                &*op,
                &[
                    Some(x.clone()),
                    Some(ints(&[2, -1, 0, 3])),
                    Some(fill.clone()),
                    Some(ints(&[0, -1])),
                ],
            );
        }
        check(
            &*build(
                "Pad",
                2,
                &[("pads", Attribute::Ints(vec![0, 1, 1, 0, 0, 2]))],
                1,
                1,
            ),
            &[Some(x.clone())],
        );
        let values = Tensor::new(vec![2], vec![0.0f64, 3.0]).unwrap().cast(dt);
        check(
            &*build("OneHot", 11, &[("axis", Attribute::Int(0))], 3, 1),
            &[Some(idx.clone()), Some(Tensor::scalar(4i64)), Some(values)],
        );
        let shape_value = Attribute::Tensor(data(dt, &[1]));
        check(
            &*build("ConstantOfShape", 20, &[("value", shape_value)], 1, 1),
            &[Some(ints(&[2, 0, 3]))],
        );
    }
}

#[test]
fn range_agrees_for_numeric_dtypes() {
    let op = build("Range", 11, &[], 3, 1);
    for dt in [DType::F32, DType::F64, DType::I16, DType::I32, DType::I64] {
        let s = |v: f64| Tensor::scalar(v).cast(dt);
        check(&*op, &[Some(s(7.0)), Some(s(-6.0)), Some(s(-3.0))]);
    }
    assert!(op
        .eval(&[
            Some(&Tensor::scalar(f16::from_f32(1.0))),
            Some(&Tensor::scalar(bf16::from_f32(2.0))),
            Some(&Tensor::scalar(f16::from_f32(1.0)))
        ])
        .is_err());
}

#[test]
fn version_specific_attributes_are_rejected_at_old_opsets() {
    let reg = Registry::global();
    let mut a = Attributes::new();
    a.insert("reduction", Attribute::String("max".into()));
    let ctx = |opset| OpContext {
        domain: "",
        op_type: "ScatterND",
        opset,
        attrs: &a,
        num_inputs: 3,
        num_outputs: 1,
    };
    assert!(reg
        .lookup("", "ScatterND", 17)
        .unwrap()
        .build(&ctx(17))
        .is_err());
    assert!(reg
        .lookup("", "ScatterND", 18)
        .unwrap()
        .build(&ctx(18))
        .is_ok());
    let mut p = Attributes::new();
    p.insert("mode", Attribute::String("wrap".into()));
    let ctx = |opset| OpContext {
        domain: "",
        op_type: "Pad",
        opset,
        attrs: &p,
        num_inputs: 2,
        num_outputs: 1,
    };
    assert!(reg.lookup("", "Pad", 18).unwrap().build(&ctx(18)).is_err());
    assert!(reg.lookup("", "Pad", 19).unwrap().build(&ctx(19)).is_ok());
    assert!(reg.lookup("", "Slice", 1).is_some() && reg.lookup("", "Squeeze", 21).is_some());
    assert!(reg.lookup("", "GatherElements", 10).is_none());
}
