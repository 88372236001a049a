//! Operators of old opsets (1–6): small hand-built models run through `hidet::pipeline` (the
//! path of `hidet run`) with the reference executor and compiled. The expected outputs follow
//! the operators' definitions in the ONNX changelog, computed here in f64 loops; the error
//! cases check that an attribute value or shape the old operator rejects (or that hidet does
//! not support) is reported with the node and the attribute named.

use std::path::PathBuf;

use hidet::graph::compiled::CompileOptions;
use hidet::graph::Tensor;
use hidet::onnx::proto::{
    attribute_proto::AttributeType,
    tensor_shape_proto::{dimension, Dimension},
    type_proto, AttributeProto, GraphProto, ModelProto, NodeProto, OperatorSetIdProto, TensorProto,
    TensorShapeProto, TypeProto, ValueInfoProto,
};
use hidet::pipeline;
use prost::Message;

const FLOAT: i32 = 1;
const INT64: i32 = 7;
const BOOL: i32 = 9;

fn value_info(name: &str, elem: i32, dims: &[i64]) -> ValueInfoProto {
    let dim = dims
        .iter()
        .map(|d| Dimension {
            value: Some(dimension::Value::DimValue(*d)),
            ..Default::default()
        })
        .collect();
    ValueInfoProto {
        name: Some(name.into()),
        r#type: Some(TypeProto {
            value: Some(type_proto::Value::TensorType(type_proto::Tensor {
                elem_type: Some(elem),
                shape: Some(TensorShapeProto { dim }),
            })),
            ..Default::default()
        }),
        ..Default::default()
    }
}

/// A node named after its first output.
fn node(op: &str, inputs: &[&str], outputs: &[&str], attrs: Vec<AttributeProto>) -> NodeProto {
    NodeProto {
        name: Some(format!("n_{}", outputs[0])),
        op_type: Some(op.into()),
        input: inputs.iter().map(|s| s.to_string()).collect(),
        output: outputs.iter().map(|s| s.to_string()).collect(),
        attribute: attrs,
        ..Default::default()
    }
}

fn attr(name: &str, ty: AttributeType) -> AttributeProto {
    AttributeProto {
        name: Some(name.into()),
        r#type: Some(ty as i32),
        ..Default::default()
    }
}

fn ai(name: &str, v: i64) -> AttributeProto {
    AttributeProto {
        i: Some(v),
        ..attr(name, AttributeType::Int)
    }
}

fn af(name: &str, v: f32) -> AttributeProto {
    AttributeProto {
        f: Some(v),
        ..attr(name, AttributeType::Float)
    }
}

fn aints(name: &str, v: &[i64]) -> AttributeProto {
    AttributeProto {
        ints: v.to_vec(),
        ..attr(name, AttributeType::Ints)
    }
}

fn afloats(name: &str, v: &[f32]) -> AttributeProto {
    AttributeProto {
        floats: v.to_vec(),
        ..attr(name, AttributeType::Floats)
    }
}

fn astr(name: &str, v: &str) -> AttributeProto {
    AttributeProto {
        s: Some(v.as_bytes().to_vec()),
        ..attr(name, AttributeType::String)
    }
}

fn agraph(name: &str, g: GraphProto) -> AttributeProto {
    AttributeProto {
        g: Some(g),
        ..attr(name, AttributeType::Graph)
    }
}

fn init_f32(name: &str, dims: &[i64], v: &[f32]) -> TensorProto {
    TensorProto {
        name: Some(name.into()),
        dims: dims.to_vec(),
        data_type: Some(FLOAT),
        float_data: v.to_vec(),
        ..Default::default()
    }
}

fn init_i64(name: &str, dims: &[i64], v: &[i64]) -> TensorProto {
    TensorProto {
        name: Some(name.into()),
        dims: dims.to_vec(),
        data_type: Some(INT64),
        int64_data: v.to_vec(),
        ..Default::default()
    }
}

/// A model of opset `opset` (IR version 3), or, for `None`, of IR version 2 with no opset
/// import (which means opset 1).
fn model(
    opset: Option<i64>,
    inputs: Vec<ValueInfoProto>,
    inits: Vec<TensorProto>,
    nodes: Vec<NodeProto>,
    outputs: &[&str],
) -> ModelProto {
    ModelProto {
        ir_version: Some(if opset.is_some() { 3 } else { 2 }),
        opset_import: opset
            .map(|v| OperatorSetIdProto {
                domain: Some(String::new()),
                version: Some(v),
            })
            .into_iter()
            .collect(),
        graph: Some(GraphProto {
            name: Some("old".into()),
            node: nodes,
            initializer: inits,
            input: inputs,
            output: outputs
                .iter()
                .map(|o| ValueInfoProto {
                    name: Some(o.to_string()),
                    ..Default::default()
                })
                .collect(),
            ..Default::default()
        }),
        ..Default::default()
    }
}

fn write(m: &ModelProto) -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("model.onnx");
    std::fs::write(&p, m.encode_to_vec()).unwrap();
    (dir, p)
}

/// The outputs of `m` on `inputs`: `[reference, compiled]`, each in graph output order.
fn run(m: &ModelProto, inputs: &[(&str, Tensor)]) -> [Vec<Tensor>; 2] {
    let (_dir, path) = write(m);
    let model = pipeline::load(&path).unwrap_or_else(|e| panic!("load: {e}"));
    let inputs: Vec<(String, Tensor)> = inputs
        .iter()
        .map(|(n, t)| (n.to_string(), t.clone()))
        .collect();
    let reference = pipeline::run_reference(&model, &inputs).unwrap_or_else(|e| panic!("{e}"));
    let compiled = pipeline::compile(&model, CompileOptions::default());
    let compiled = pipeline::run(&compiled, &inputs).unwrap_or_else(|e| panic!("{e}"));
    let strip = |v: Vec<(String, Tensor)>| v.into_iter().map(|(_, t)| t).collect::<Vec<_>>();
    [strip(reference), strip(compiled)]
}

/// The message of the error that loading `m` gives.
fn load_error(m: &ModelProto) -> String {
    let (_dir, path) = write(m);
    match pipeline::load(&path) {
        Ok(_) => panic!("the model loaded"),
        Err(e) => e.to_string(),
    }
}

fn assert_mentions(msg: &str, parts: &[&str]) {
    for p in parts {
        assert!(msg.contains(p), "`{msg}` does not mention `{p}`");
    }
}

/// `n` deterministic values in [-2, 2), none of them 0.
fn data(n: usize, seed: u64) -> Vec<f32> {
    let mut s = seed
        .wrapping_mul(6364136223846793005)
        .wrapping_add(1442695040888963407);
    (0..n)
        .map(|_| {
            s = s
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            let v = ((s >> 40) as f64 / (1u64 << 24) as f64) * 4.0 - 2.0;
            if v.abs() < 1e-3 {
                0.5
            } else {
                v as f32
            }
        })
        .collect()
}

fn tensor(shape: &[usize], v: &[f32]) -> Tensor {
    Tensor::new(shape.to_vec(), v.to_vec()).unwrap()
}

/// Checks output `i` of both executors against `want` (shape and f64 values).
fn check(outs: &[Vec<Tensor>; 2], i: usize, shape: &[usize], want: &[f64]) {
    for (exec, o) in ["reference", "compiled"].iter().zip(outs) {
        let got = &o[i];
        assert_eq!(got.shape(), shape, "{exec} output #{i} shape");
        let g = got.to_f64_vec();
        assert_eq!(g.len(), want.len());
        for (k, (x, y)) in g.iter().zip(want).enumerate() {
            assert!(
                (x - y).abs() <= 1e-5 + 1e-5 * y.abs(),
                "{exec} output #{i} element {k}: {x} != expected {y}"
            );
        }
    }
}

fn f64s(v: &[f32]) -> Vec<f64> {
    v.iter().map(|&x| f64::from(x)).collect()
}

#[test]
fn binary_broadcast_with_axis_suffix_and_one_element() {
    // Add-1: B (3, 4) aligned at axis 1 of A (2, 3, 4, 5); Sub: suffix matching (4, 5);
    // Mul: a one-element B (1, 1); Div: B (2, 1) at axis 0 of A2 (2, 3) (size-1 expansion).
    let a = data(120, 1);
    let b = data(12, 2);
    let s = data(20, 3);
    let one = [1.5f32];
    let a2 = data(6, 4);
    let d = data(2, 5);
    let m = model(
        Some(1),
        vec![
            value_info("a", FLOAT, &[2, 3, 4, 5]),
            value_info("b", FLOAT, &[3, 4]),
            value_info("s", FLOAT, &[4, 5]),
            value_info("a2", FLOAT, &[2, 3]),
        ],
        vec![init_f32("one", &[1, 1], &one), init_f32("d", &[2, 1], &d)],
        vec![
            node(
                "Add",
                &["a", "b"],
                &["add"],
                vec![
                    ai("broadcast", 1),
                    ai("axis", 1),
                    aints("consumed_inputs", &[0, 0]),
                ],
            ),
            node("Sub", &["a", "s"], &["sub"], vec![ai("broadcast", 1)]),
            node("Mul", &["a", "one"], &["mul"], vec![ai("broadcast", 1)]),
            node(
                "Div",
                &["a2", "d"],
                &["div"],
                vec![ai("broadcast", 1), ai("axis", 0)],
            ),
        ],
        &["add", "sub", "mul", "div"],
    );
    let outs = run(
        &m,
        &[
            ("a", tensor(&[2, 3, 4, 5], &a)),
            ("b", tensor(&[3, 4], &b)),
            ("s", tensor(&[4, 5], &s)),
            ("a2", tensor(&[2, 3], &a2)),
        ],
    );
    let (mut add, mut sub, mut mul) = (vec![], vec![], vec![]);
    for n in 0..2 {
        for c in 0..3 {
            for h in 0..4 {
                for w in 0..5 {
                    let x = f64::from(a[((n * 3 + c) * 4 + h) * 5 + w]);
                    add.push(x + f64::from(b[c * 4 + h]));
                    sub.push(x - f64::from(s[h * 5 + w]));
                    mul.push(x * 1.5);
                }
            }
        }
    }
    let div: Vec<f64> = (0..6)
        .map(|k| f64::from(a2[k]) / f64::from(d[k / 3]))
        .collect();
    check(&outs, 0, &[2, 3, 4, 5], &add);
    check(&outs, 1, &[2, 3, 4, 5], &sub);
    check(&outs, 2, &[2, 3, 4, 5], &mul);
    check(&outs, 3, &[2, 3], &div);
}

#[test]
fn model_without_opset_import_is_opset_1() {
    let a = data(6, 7);
    let b = data(2, 8);
    let m = model(
        None,
        vec![
            value_info("a", FLOAT, &[2, 3]),
            value_info("b", FLOAT, &[2]),
        ],
        vec![],
        vec![node(
            "Add",
            &["a", "b"],
            &["y"],
            vec![ai("broadcast", 1), ai("axis", 0)],
        )],
        &["y"],
    );
    let outs = run(&m, &[("a", tensor(&[2, 3], &a)), ("b", tensor(&[2], &b))]);
    let want: Vec<f64> = (0..6)
        .map(|k| f64::from(a[k]) + f64::from(b[k / 3]))
        .collect();
    check(&outs, 0, &[2, 3], &want);
}

#[test]
fn pow_and_comparisons_broadcast() {
    let x: Vec<f32> = data(6, 9).iter().map(|v| v.abs() + 0.25).collect();
    let e = data(3, 10);
    let g = data(2, 11);
    let m = model(
        Some(6),
        vec![
            value_info("x", FLOAT, &[2, 3]),
            value_info("e", FLOAT, &[3]),
            value_info("g", FLOAT, &[2]),
            value_info("p", BOOL, &[2, 3]),
            value_info("q", BOOL, &[3]),
        ],
        vec![],
        vec![
            node("Pow", &["x", "e"], &["pow"], vec![ai("broadcast", 1)]),
            node(
                "Greater",
                &["x", "g"],
                &["gt"],
                vec![ai("broadcast", 1), ai("axis", 0)],
            ),
            node("And", &["p", "q"], &["and"], vec![ai("broadcast", 1)]),
        ],
        &["pow", "gt", "and"],
    );
    let p = [true, false, true, true, true, false];
    let q = [true, true, false];
    let outs = run(
        &m,
        &[
            ("x", tensor(&[2, 3], &x)),
            ("e", tensor(&[3], &e)),
            ("g", tensor(&[2], &g)),
            ("p", Tensor::new(vec![2, 3], p.to_vec()).unwrap()),
            ("q", Tensor::new(vec![3], q.to_vec()).unwrap()),
        ],
    );
    let pow: Vec<f64> = (0..6)
        .map(|k| f64::from(x[k]).powf(f64::from(e[k % 3])))
        .collect();
    check(&outs, 0, &[2, 3], &pow);
    for o in &outs {
        let gt: Vec<bool> = (0..6).map(|k| x[k] > g[k / 3]).collect();
        assert_eq!(o[1], Tensor::new(vec![2, 3], gt).unwrap());
        let and: Vec<bool> = (0..6).map(|k| p[k] && q[k % 3]).collect();
        assert_eq!(o[2], Tensor::new(vec![2, 3], and).unwrap());
    }
}

#[test]
fn binary_broadcast_errors_name_node_and_attribute() {
    let two = |attrs: Vec<AttributeProto>, b: &[i64]| {
        model(
            Some(6),
            vec![value_info("a", FLOAT, &[2, 3]), value_info("b", FLOAT, b)],
            vec![],
            vec![node("Add", &["a", "b"], &["y"], attrs)],
            &["y"],
        )
    };
    let e = load_error(&two(vec![], &[3]));
    assert_mentions(&e, &["n_y", "`broadcast`", "f32[2, 3]", "f32[3]"]);
    let e = load_error(&two(vec![ai("broadcast", 1), ai("axis", 2)], &[3]));
    assert_mentions(&e, &["n_y", "`axis`"]);
    let e = load_error(&two(vec![ai("broadcast", 1)], &[4]));
    assert_mentions(&e, &["n_y", "`broadcast`"]);
    let e = load_error(&two(vec![ai("broadcast", 2)], &[3]));
    assert_mentions(&e, &["n_y", "`broadcast`", "0 or 1"]);
}

#[test]
fn gemm_broadcast_attribute() {
    let a = data(6, 12);
    let b = data(12, 13);
    let c1 = data(4, 14);
    let c2 = data(8, 15);
    let m = model(
        Some(6),
        vec![value_info("a", FLOAT, &[2, 3])],
        vec![
            init_f32("b", &[4, 3], &b),
            init_f32("c1", &[4], &c1),
            init_f32("c2", &[2, 4], &c2),
        ],
        vec![
            node(
                "Gemm",
                &["a", "b", "c1"],
                &["y1"],
                vec![
                    ai("broadcast", 1),
                    ai("transB", 1),
                    af("alpha", 0.5),
                    af("beta", 2.0),
                ],
            ),
            node("Gemm", &["a", "b", "c2"], &["y2"], vec![ai("transB", 1)]),
        ],
        &["y1", "y2"],
    );
    let outs = run(&m, &[("a", tensor(&[2, 3], &a))]);
    let dot = |i: usize, j: usize| -> f64 {
        (0..3)
            .map(|k| f64::from(a[i * 3 + k]) * f64::from(b[j * 3 + k]))
            .sum()
    };
    let y1: Vec<f64> = (0..8)
        .map(|k| 0.5 * dot(k / 4, k % 4) + 2.0 * f64::from(c1[k % 4]))
        .collect();
    let y2: Vec<f64> = (0..8)
        .map(|k| dot(k / 4, k % 4) + f64::from(c2[k]))
        .collect();
    check(&outs, 0, &[2, 4], &y1);
    check(&outs, 1, &[2, 4], &y2);

    let bad = model(
        Some(6),
        vec![value_info("a", FLOAT, &[2, 3])],
        vec![init_f32("b", &[4, 3], &b), init_f32("c1", &[4], &c1)],
        vec![node(
            "Gemm",
            &["a", "b", "c1"],
            &["y"],
            vec![ai("transB", 1)],
        )],
        &["y"],
    );
    assert_mentions(
        &load_error(&bad),
        &["n_y", "`broadcast`", "(M, N) = (2, 4)"],
    );
}

#[test]
fn prelu_slope_is_shared_or_per_channel() {
    let x = data(24, 16);
    let x4 = data(24, 17);
    let per_channel = [0.1f32, -0.5, 2.0];
    let m = model(
        Some(6),
        vec![
            value_info("x", FLOAT, &[2, 3, 4]),
            value_info("x4", FLOAT, &[2, 3, 2, 2]),
        ],
        vec![
            init_f32("s", &[3], &per_channel),
            init_f32("one", &[1], &[0.25]),
        ],
        vec![
            node("PRelu", &["x", "s"], &["y"], vec![]),
            node("PRelu", &["x4", "one"], &["y4"], vec![]),
        ],
        &["y", "y4"],
    );
    let outs = run(
        &m,
        &[
            ("x", tensor(&[2, 3, 4], &x)),
            ("x4", tensor(&[2, 3, 2, 2], &x4)),
        ],
    );
    let prelu = |v: f32, s: f32| {
        let v = f64::from(v);
        if v < 0.0 {
            v * f64::from(s)
        } else {
            v
        }
    };
    let y: Vec<f64> = (0..24)
        .map(|k| prelu(x[k], per_channel[(k / 4) % 3]))
        .collect();
    let y4: Vec<f64> = (0..24).map(|k| prelu(x4[k], 0.25)).collect();
    check(&outs, 0, &[2, 3, 4], &y);
    check(&outs, 1, &[2, 3, 2, 2], &y4);

    let bad = model(
        Some(6),
        vec![value_info("x", FLOAT, &[2, 3, 4])],
        vec![init_f32("s", &[4], &[1.0; 4])],
        vec![node("PRelu", &["x", "s"], &["y"], vec![])],
        &["y"],
    );
    assert_mentions(&load_error(&bad), &["n_y", "not supported", "per channel"]);
}

/// Per-channel mean and biased variance of `x` (`[N, C, S]` flattened).
fn channel_stats(x: &[f32], n: usize, c: usize, s: usize) -> (Vec<f64>, Vec<f64>) {
    let mut mean = vec![0.0; c];
    let mut var = vec![0.0; c];
    for ch in 0..c {
        let vals: Vec<f64> = (0..n)
            .flat_map(|b| (0..s).map(move |i| (b * c + ch) * s + i))
            .map(|k| f64::from(x[k]))
            .collect();
        let m = vals.iter().sum::<f64>() / vals.len() as f64;
        mean[ch] = m;
        var[ch] = vals.iter().map(|v| (v - m) * (v - m)).sum::<f64>() / vals.len() as f64;
    }
    (mean, var)
}

#[test]
fn batch_normalization_test_and_training_modes() {
    let (n, c, s) = (2, 3, 4);
    let x = data(n * c * s, 18);
    let scale = [0.5f32, 1.5, -1.0];
    let bias = [0.1f32, 0.2, -0.3];
    let mean = [0.05f32, -0.1, 0.2];
    let var: [f32; 3] = [0.8, 1.2, 0.5];
    let pa = data(c * s, 19);
    let pb = data(c * s, 20);
    let pm = data(c * s, 21);
    let pv: Vec<f32> = data(c * s, 22).iter().map(|v| v.abs() + 0.1).collect();
    let eps = 1e-3f32;
    let params = |p: &str| -> Vec<TensorProto> {
        vec![
            init_f32(&format!("{p}scale"), &[3], &scale),
            init_f32(&format!("{p}bias"), &[3], &bias),
            init_f32(&format!("{p}mean"), &[3], &mean),
            init_f32(&format!("{p}var"), &[3], &var),
        ]
    };
    let mut inits = params("");
    inits.extend([
        init_f32("pa", &[3, 2, 2], &pa),
        init_f32("pb", &[3, 2, 2], &pb),
        init_f32("pm", &[3, 2, 2], &pm),
        init_f32("pv", &[3, 2, 2], &pv),
    ]);
    let ins = ["x", "scale", "bias", "mean", "var"];
    let m = model(
        Some(6),
        vec![value_info("x", FLOAT, &[2, 3, 2, 2])],
        inits,
        vec![
            node(
                "BatchNormalization",
                &ins,
                &["test"],
                vec![ai("is_test", 1), af("epsilon", eps)],
            ),
            node(
                "BatchNormalization",
                &["x", "pa", "pb", "pm", "pv"],
                &["per_act"],
                vec![ai("is_test", 1), ai("spatial", 0), af("epsilon", eps)],
            ),
            node(
                "BatchNormalization",
                &ins,
                &["train"],
                vec![ai("is_test", 0), af("epsilon", eps)],
            ),
            node(
                "BatchNormalization",
                &ins,
                &["train5", "rmean", "rvar", "smean", "svar"],
                vec![af("epsilon", eps), af("momentum", 0.75)],
            ),
        ],
        &[
            "test", "per_act", "train", "train5", "rmean", "rvar", "smean", "svar",
        ],
    );
    let outs = run(&m, &[("x", tensor(&[2, 3, 2, 2], &x))]);
    let eps = f64::from(eps);
    let norm = |k: usize, ch: usize, m: f64, v: f64| {
        f64::from(scale[ch]) * (f64::from(x[k]) - m) / (v + eps).sqrt() + f64::from(bias[ch])
    };
    let test: Vec<f64> = (0..24)
        .map(|k| {
            let ch = (k / s) % c;
            norm(k, ch, f64::from(mean[ch]), f64::from(var[ch]))
        })
        .collect();
    let per_act: Vec<f64> = (0..24)
        .map(|k| {
            let p = k % 12;
            f64::from(pa[p]) * (f64::from(x[k]) - f64::from(pm[p]))
                / (f64::from(pv[p]) + eps).sqrt()
                + f64::from(pb[p])
        })
        .collect();
    let (bm, bv) = channel_stats(&x, n, c, s);
    let train: Vec<f64> = (0..24)
        .map(|k| {
            let ch = (k / s) % c;
            norm(k, ch, bm[ch], bv[ch])
        })
        .collect();
    let rmean: Vec<f64> = (0..3)
        .map(|ch| f64::from(mean[ch]) * 0.75 + bm[ch] * 0.25)
        .collect();
    let rvar: Vec<f64> = (0..3)
        .map(|ch| f64::from(var[ch]) * 0.75 + bv[ch] * 0.25)
        .collect();
    check(&outs, 0, &[2, 3, 2, 2], &test);
    check(&outs, 1, &[2, 3, 2, 2], &per_act);
    check(&outs, 2, &[2, 3, 2, 2], &train);
    check(&outs, 3, &[2, 3, 2, 2], &train);
    check(&outs, 4, &[3], &rmean);
    check(&outs, 5, &[3], &rvar);
    check(&outs, 6, &[3], &bm);
    check(&outs, 7, &[3], &bv);

    let bn1 = model(
        Some(1),
        vec![value_info("x", FLOAT, &[2, 3, 2, 2])],
        params(""),
        vec![node(
            "BatchNormalization",
            &ins,
            &["y"],
            vec![
                ai("is_test", 1),
                af("epsilon", 1e-3),
                aints("consumed_inputs", &[0, 0, 0, 1, 1]),
            ],
        )],
        &["y"],
    );
    check(
        &run(&bn1, &[("x", tensor(&[2, 3, 2, 2], &x))]),
        0,
        &[2, 3, 2, 2],
        &test,
    );

    let bad = model(
        Some(6),
        vec![value_info("x", FLOAT, &[2, 3, 2, 2])],
        params(""),
        vec![node(
            "BatchNormalization",
            &ins,
            &["y", "m1", "v1", "m2", "v2"],
            vec![ai("is_test", 1)],
        )],
        &["y"],
    );
    assert_mentions(&load_error(&bad), &["n_y", "`is_test`", "5 outputs"]);
}

#[test]
fn dropout_in_test_mode_and_training_refused() {
    let x = data(6, 23);
    let m = model(
        Some(6),
        vec![value_info("x", FLOAT, &[2, 3])],
        vec![],
        vec![
            node(
                "Dropout",
                &["x"],
                &["y", "mask"],
                vec![ai("is_test", 1), af("ratio", 0.3)],
            ),
            node("Dropout", &["y"], &["z"], vec![]),
        ],
        &["z", "mask"],
    );
    let outs = run(&m, &[("x", tensor(&[2, 3], &x))]);
    check(&outs, 0, &[2, 3], &f64s(&x));
    check(&outs, 1, &[2, 3], &[1.0; 6]);

    let bad = model(
        Some(1),
        vec![value_info("x", FLOAT, &[2, 3])],
        vec![],
        vec![node(
            "Dropout",
            &["x"],
            &["y"],
            vec![ai("is_test", 0), aints("consumed_inputs", &[0])],
        )],
        &["y"],
    );
    assert_mentions(&load_error(&bad), &["n_y", "`is_test`", "not supported"]);
}

#[test]
fn variadic_ops_need_one_shape() {
    let (a, b, c) = (data(6, 24), data(6, 25), data(6, 26));
    let ins = vec![
        value_info("a", FLOAT, &[2, 3]),
        value_info("b", FLOAT, &[2, 3]),
        value_info("c", FLOAT, &[2, 3]),
    ];
    let m = model(
        Some(6),
        ins,
        vec![],
        vec![
            node("Max", &["a", "b", "c"], &["max"], vec![]),
            node("Min", &["a", "b", "c"], &["min"], vec![]),
            node("Sum", &["a", "b", "c"], &["sum"], vec![]),
            node("Mean", &["a", "b", "c"], &["mean"], vec![]),
        ],
        &["max", "min", "sum", "mean"],
    );
    let outs = run(
        &m,
        &[
            ("a", tensor(&[2, 3], &a)),
            ("b", tensor(&[2, 3], &b)),
            ("c", tensor(&[2, 3], &c)),
        ],
    );
    let t = |k: usize| [f64::from(a[k]), f64::from(b[k]), f64::from(c[k])];
    let max: Vec<f64> = (0..6)
        .map(|k| t(k).into_iter().fold(f64::MIN, f64::max))
        .collect();
    let min: Vec<f64> = (0..6)
        .map(|k| t(k).into_iter().fold(f64::MAX, f64::min))
        .collect();
    let sum: Vec<f64> = (0..6).map(|k| t(k).iter().sum()).collect();
    let mean: Vec<f64> = sum.iter().map(|v| v / 3.0).collect();
    check(&outs, 0, &[2, 3], &max);
    check(&outs, 1, &[2, 3], &min);
    check(&outs, 2, &[2, 3], &sum);
    check(&outs, 3, &[2, 3], &mean);

    let bad = model(
        Some(7),
        vec![
            value_info("a", FLOAT, &[2, 3]),
            value_info("b", FLOAT, &[3]),
        ],
        vec![],
        vec![node("Sum", &["a", "b"], &["s"], vec![])],
        &["s"],
    );
    assert_mentions(&load_error(&bad), &["n_s", "one shape", "f32[3]"]);
}

#[test]
fn shape_attributes_of_opset_1() {
    // Reshape-1 `shape`, Concat-1 default axis 1, Pad-1 `paddings`, Split-1 `split` as an
    // attribute and as an initializer input, Tile-1 (tiles, axis inputs), Softmax-1 over the
    // input coerced to 2-D.
    let x = data(24, 27);
    let y = data(2, 28);
    let m = model(
        Some(1),
        vec![
            value_info("x", FLOAT, &[2, 3, 4]),
            value_info("y", FLOAT, &[2, 1]),
        ],
        vec![
            init_i64("lens", &[2], &[1, 1]),
            init_f32("tiles", &[], &[3.0]),
            init_f32("axis", &[], &[1.0]),
        ],
        vec![
            node(
                "Reshape",
                &["x"],
                &["r"],
                vec![aints("shape", &[0, -1]), aints("consumed_inputs", &[1])],
            ),
            node("Concat", &["y", "y"], &["cat"], vec![]),
            node(
                "Pad",
                &["y"],
                &["pad"],
                vec![aints("paddings", &[1, 0, 0, 2]), af("value", 1.5)],
            ),
            node(
                "Split",
                &["r"],
                &["s1", "s2"],
                vec![ai("axis", 1), aints("split", &[5, 7])],
            ),
            node(
                "Split",
                &["cat", "lens"],
                &["t1", "t2"],
                vec![ai("axis", 0)],
            ),
            node("Tile", &["s1", "tiles", "axis"], &["tile"], vec![]),
            node("Softmax", &["x"], &["sm"], vec![ai("axis", 1)]),
        ],
        &["r", "cat", "pad", "s1", "s2", "t2", "tile", "sm"],
    );
    let outs = run(
        &m,
        &[("x", tensor(&[2, 3, 4], &x)), ("y", tensor(&[2, 1], &y))],
    );
    let (xs, ys) = (f64s(&x), f64s(&y));
    check(&outs, 0, &[2, 12], &xs);
    check(&outs, 1, &[2, 2], &[ys[0], ys[0], ys[1], ys[1]]);
    let pad = [1.5, 1.5, 1.5, ys[0], 1.5, 1.5, ys[1], 1.5, 1.5];
    check(&outs, 2, &[3, 3], &pad);
    let s1: Vec<f64> = (0..2)
        .flat_map(|r| xs[r * 12..r * 12 + 5].to_vec())
        .collect();
    let s2: Vec<f64> = (0..2)
        .flat_map(|r| xs[r * 12 + 5..r * 12 + 12].to_vec())
        .collect();
    check(&outs, 3, &[2, 5], &s1);
    check(&outs, 4, &[2, 7], &s2);
    check(&outs, 5, &[1, 2], &[ys[1], ys[1]]);
    // Tile-1 repeats the whole slice from `axis` on (Caffe2's Tile), like numpy's `tile`.
    let tile: Vec<f64> = (0..2)
        .flat_map(|r| s1[r * 5..r * 5 + 5].repeat(3))
        .collect();
    check(&outs, 6, &[2, 15], &tile);
    let mut sm = Vec::new();
    for r in 0..2 {
        let row = &xs[r * 12..r * 12 + 12];
        let mx = row.iter().cloned().fold(f64::MIN, f64::max);
        let z: f64 = row.iter().map(|v| (v - mx).exp()).sum();
        sm.extend(row.iter().map(|v| (v - mx).exp() / z));
    }
    check(&outs, 7, &[2, 3, 4], &sm);

    let runtime_split = model(
        Some(1),
        vec![
            value_info("x", FLOAT, &[4]),
            value_info("lens", INT64, &[2]),
        ],
        vec![],
        vec![node("Split", &["x", "lens"], &["a", "b"], vec![])],
        &["a"],
    );
    assert_mentions(
        &load_error(&runtime_split),
        &["n_a", "not supported", "run time"],
    );
    let no_shape = model(
        Some(4),
        vec![value_info("x", FLOAT, &[4])],
        vec![],
        vec![node("Reshape", &["x"], &["r"], vec![])],
        &["r"],
    );
    assert_mentions(&load_error(&no_shape), &["n_r", "`shape`", "missing"]);
}

#[test]
fn unary_ops_of_opset_1_and_their_defaults() {
    let x = data(8, 29);
    let pos: Vec<f32> = x.iter().map(|v| v.abs() + 0.1).collect();
    let consumed = || vec![aints("consumed_inputs", &[0])];
    let unary = |op: &str, input: &str, out: &str| node(op, &[input], &[out], consumed());
    let m = model(
        Some(1),
        vec![
            value_info("x", FLOAT, &[2, 4]),
            value_info("p", FLOAT, &[2, 4]),
        ],
        vec![],
        vec![
            unary("Relu", "x", "relu"),
            unary("Sigmoid", "x", "sigmoid"),
            unary("Tanh", "x", "tanh"),
            unary("Exp", "x", "exp"),
            unary("Log", "p", "log"),
            unary("Neg", "x", "neg"),
            unary("Abs", "x", "abs"),
            unary("Sqrt", "p", "sqrt"),
            unary("Reciprocal", "x", "recip"),
            unary("Floor", "x", "floor"),
            unary("Ceil", "x", "ceil"),
            unary("Elu", "x", "elu"),
            unary("LeakyRelu", "x", "leaky"),
            unary("HardSigmoid", "x", "hsig"),
            unary("Selu", "x", "selu"),
            node("Clip", &["x"], &["clip_lo"], vec![af("min", -0.5)]),
            node("Clip", &["x"], &["clip_hi"], vec![af("max", 0.25)]),
            node("Cast", &["x"], &["cast"], vec![astr("to", "INT32")]),
            node("ThresholdedRelu", &["x"], &["thr"], vec![]),
        ],
        &[
            "relu", "sigmoid", "tanh", "exp", "log", "neg", "abs", "sqrt", "recip", "floor",
            "ceil", "elu", "leaky", "hsig", "selu", "clip_lo", "clip_hi", "cast", "thr",
        ],
    );
    let outs = run(
        &m,
        &[("x", tensor(&[2, 4], &x)), ("p", tensor(&[2, 4], &pos))],
    );
    let xs = f64s(&x);
    let ps = f64s(&pos);
    let map = |f: &dyn Fn(f64) -> f64, v: &[f64]| v.iter().map(|&t| f(t)).collect::<Vec<_>>();
    // Selu-1's defaults are alpha = 1.6732, gamma = 1.0507 (opset 6 made them more precise).
    let (alpha, gamma) = (f64::from(1.6732f32), f64::from(1.0507f32));
    let want: Vec<Vec<f64>> = vec![
        map(&|t| t.max(0.0), &xs),
        map(&|t| 1.0 / (1.0 + (-t).exp()), &xs),
        map(&f64::tanh, &xs),
        map(&f64::exp, &xs),
        map(&f64::ln, &ps),
        map(&|t| -t, &xs),
        map(&f64::abs, &xs),
        map(&f64::sqrt, &ps),
        map(&|t| 1.0 / t, &xs),
        map(&f64::floor, &xs),
        map(&f64::ceil, &xs),
        map(&|t| if t < 0.0 { t.exp() - 1.0 } else { t }, &xs),
        map(&|t| if t < 0.0 { 0.01 * t } else { t }, &xs),
        map(&|t| (0.2 * t + 0.5).clamp(0.0, 1.0), &xs),
        map(
            &|t| gamma * if t <= 0.0 { alpha * (t.exp() - 1.0) } else { t },
            &xs,
        ),
        map(&|t| t.max(-0.5), &xs),
        map(&|t| t.min(0.25), &xs),
        map(&f64::trunc, &xs),
        map(&|t| if t > 1.0 { t } else { 0.0 }, &xs),
    ];
    for (i, w) in want.iter().enumerate() {
        check(&outs, i, &[2, 4], w);
    }
    for o in &outs {
        assert_eq!(o[17].dtype(), hidet::graph::DType::I32);
    }

    let bad_cast = model(
        Some(5),
        vec![value_info("x", FLOAT, &[2])],
        vec![],
        vec![node("Cast", &["x"], &["c"], vec![astr("to", "REAL")])],
        &["c"],
    );
    assert_mentions(&load_error(&bad_cast), &["n_c", "`to`", "REAL"]);
}

#[test]
fn upsample_lp_pool_and_image_scaler() {
    let x = data(4, 30);
    let img = data(12, 31);
    let m = model(
        Some(6),
        vec![
            value_info("x", FLOAT, &[1, 1, 2, 2]),
            value_info("img", FLOAT, &[1, 3, 2, 2]),
        ],
        vec![],
        vec![
            node(
                "Upsample",
                &["x"],
                &["up"],
                vec![af("height_scale", 2.0), af("width_scale", 3.0)],
            ),
            node(
                "ImageScaler",
                &["img"],
                &["scaled"],
                vec![af("scale", 0.5), afloats("bias", &[1.0, -2.0, 3.0])],
            ),
        ],
        &["up", "scaled"],
    );
    let outs = run(
        &m,
        &[
            ("x", tensor(&[1, 1, 2, 2], &x)),
            ("img", tensor(&[1, 3, 2, 2], &img)),
        ],
    );
    let up: Vec<f64> = (0..24)
        .map(|k| f64::from(x[(k / 6 / 2) * 2 + (k % 6) / 3]))
        .collect();
    check(&outs, 0, &[1, 1, 4, 6], &up);
    let bias = [1.0, -2.0, 3.0];
    let scaled: Vec<f64> = (0..12)
        .map(|k| 0.5 * f64::from(img[k]) + bias[k / 4])
        .collect();
    check(&outs, 1, &[1, 3, 2, 2], &scaled);

    let pools = model(
        Some(1),
        vec![value_info("img", FLOAT, &[1, 3, 2, 2])],
        vec![],
        vec![
            node(
                "LpPool",
                &["img"],
                &["lp"],
                vec![af("p", 2.0), aints("kernel_shape", &[2, 2])],
            ),
            node("GlobalLpPool", &["img"], &["glp"], vec![af("p", 3.0)]),
        ],
        &["lp", "glp"],
    );
    let outs = run(&pools, &[("img", tensor(&[1, 3, 2, 2], &img))]);
    let norm = |ch: usize, p: f64| -> f64 {
        img[ch * 4..ch * 4 + 4]
            .iter()
            .map(|v| f64::from(*v).abs().powf(p))
            .sum::<f64>()
            .powf(1.0 / p)
    };
    let lp: Vec<f64> = (0..3).map(|ch| norm(ch, 2.0)).collect();
    let glp: Vec<f64> = (0..3).map(|ch| norm(ch, 3.0)).collect();
    check(&outs, 0, &[1, 3, 1, 1], &lp);
    check(&outs, 1, &[1, 3, 1, 1], &glp);

    let bilinear = model(
        Some(6),
        vec![value_info("x", FLOAT, &[1, 1, 2, 2])],
        vec![],
        vec![node(
            "Upsample",
            &["x"],
            &["up"],
            vec![
                af("height_scale", 2.0),
                af("width_scale", 2.0),
                astr("mode", "bilinear"),
            ],
        )],
        &["up"],
    );
    assert_mentions(&load_error(&bilinear), &["n_up", "`mode`", "not supported"]);
    let fractional = model(
        Some(1),
        vec![value_info("x", FLOAT, &[1, 1, 2, 2])],
        vec![],
        vec![node("GlobalLpPool", &["x"], &["g"], vec![af("p", 2.5)])],
        &["g"],
    );
    assert_mentions(&load_error(&fractional), &["n_g", "`p`", "not supported"]);
}

#[test]
fn rnn_and_gru_of_opset_1() {
    // One direction, 2 steps, batch 1, 2 inputs, hidden size 2.
    let x = data(4, 32);
    let w = data(4, 33);
    let r = data(4, 34);
    let b = data(4, 35);
    let gw = data(12, 36);
    let gr = data(12, 37);
    let gb = data(12, 38);
    let m = model(
        Some(1),
        vec![value_info("x", FLOAT, &[2, 1, 2])],
        vec![
            init_f32("w", &[1, 2, 2], &w),
            init_f32("r", &[1, 2, 2], &r),
            init_f32("b", &[1, 4], &b),
            init_f32("gw", &[1, 6, 2], &gw),
            init_f32("gr", &[1, 6, 2], &gr),
            init_f32("gb", &[1, 12], &gb),
        ],
        vec![
            node(
                "RNN",
                &["x", "w", "r", "b"],
                &["y", "yh"],
                vec![ai("hidden_size", 2), ai("output_sequence", 1)],
            ),
            node(
                "GRU",
                &["x", "gw", "gr", "gb"],
                &["gy", "gyh"],
                vec![
                    ai("hidden_size", 2),
                    astr("direction", "foward"),
                    ai("output_sequence", 1),
                ],
            ),
        ],
        &["y", "yh", "gy", "gyh"],
    );
    let outs = run(&m, &[("x", tensor(&[2, 1, 2], &x))]);
    let f = |v: &[f32]| f64s(v);
    let (x, w, r, b, gw, gr, gb) = (f(&x), f(&w), f(&r), f(&b), f(&gw), f(&gr), f(&gb));
    // Row `j` of a [rows, 2] matrix times a 2-vector.
    let mv = |m: &[f64], j: usize, v: &[f64]| m[j * 2] * v[0] + m[j * 2 + 1] * v[1];
    let sigmoid = |t: f64| 1.0 / (1.0 + (-t).exp());
    let mut h = vec![0.0; 2];
    let mut y = Vec::new();
    let mut gh = vec![0.0; 2];
    let mut gy = Vec::new();
    for t in 0..2 {
        let xt = &x[t * 2..t * 2 + 2];
        h = (0..2)
            .map(|j| (mv(&w, j, xt) + mv(&r, j, &h) + b[j] + b[2 + j]).tanh())
            .collect();
        y.extend(h.iter().copied());
        // GRU gates in the order z, r, h; linear_before_reset = 0.
        let gate = |g: usize, j: usize, hv: &[f64]| {
            mv(&gw, g * 2 + j, xt) + mv(&gr, g * 2 + j, hv) + gb[g * 2 + j] + gb[6 + g * 2 + j]
        };
        let z: Vec<f64> = (0..2).map(|j| sigmoid(gate(0, j, &gh))).collect();
        let rr: Vec<f64> = (0..2).map(|j| sigmoid(gate(1, j, &gh))).collect();
        let rh: Vec<f64> = (0..2).map(|j| rr[j] * gh[j]).collect();
        let ht: Vec<f64> = (0..2).map(|j| gate(2, j, &rh).tanh()).collect();
        gh = (0..2)
            .map(|j| (1.0 - z[j]) * ht[j] + z[j] * gh[j])
            .collect();
        gy.extend(gh.iter().copied());
    }
    check(&outs, 0, &[2, 1, 1, 2], &y);
    check(&outs, 1, &[1, 1, 2], &h);
    check(&outs, 2, &[2, 1, 1, 2], &gy);
    check(&outs, 3, &[1, 1, 2], &gh);
}

#[test]
fn if_of_opset_1() {
    let branch = |v: f32| GraphProto {
        name: Some(format!("b{v}")),
        node: vec![node(
            "Constant",
            &[],
            &["out"],
            vec![AttributeProto {
                t: Some(TensorProto {
                    dims: vec![1],
                    data_type: Some(FLOAT),
                    float_data: vec![v],
                    ..Default::default()
                }),
                ..attr("value", AttributeType::Tensor)
            }],
        )],
        output: vec![value_info("out", FLOAT, &[1])],
        ..Default::default()
    };
    let m = model(
        Some(1),
        vec![value_info("c", BOOL, &[])],
        vec![],
        vec![node(
            "If",
            &["c"],
            &["y"],
            vec![
                agraph("then_branch", branch(1.0)),
                agraph("else_branch", branch(2.0)),
            ],
        )],
        &["y"],
    );
    let yes = run(&m, &[("c", Tensor::scalar(true))]);
    check(&yes, 0, &[1], &[1.0]);
    let no = run(&m, &[("c", Tensor::scalar(false))]);
    check(&no, 0, &[1], &[2.0]);
}
