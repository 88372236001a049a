//! `GridSample` compiled end to end against the reference executor (the operator's f64 `eval`):
//! 2-D samples in `nearest` and `linear` modes with `zeros` and `border` padding, with and
//! without `align_corners`, are kernels on the CPU and on the simulated GPU, over grids that
//! reach past the image on every side; `cubic` and `reflection` stay with the operator.

use crate::common;
use common::{assert_compiled_matches_reference, seeded_tensor};
use hidet::graph::{
    Attribute, Attributes, DType, GraphBuilder, NodeSpec, Registry, Tensor, TensorType,
};
use hidet::onnx::OnnxModel;

/// `GridSample(x [2, 3, 7, 10], grid [2, 5, 6, 2])` with `mode`, `padding` and `align`, the
/// grid spanning `[-1.3, 1.3]` (a sixth of the samples outside the image).
fn model(mode: &str, padding: &str, align: bool) -> (OnnxModel, Vec<(String, Tensor)>) {
    let (xs, gs) = ([2, 3, 7, 10], [2, 5, 6, 2]);
    let mut b = GraphBuilder::new("grid_sample");
    b.input("x", TensorType::fixed(DType::F32, &xs));
    b.input("grid", TensorType::fixed(DType::F32, &gs));
    let mut attrs = Attributes::new();
    attrs.insert("mode", Attribute::String(mode.into()));
    attrs.insert("padding_mode", Attribute::String(padding.into()));
    attrs.insert("align_corners", Attribute::Int(i64::from(align)));
    b.node(NodeSpec {
        name: "sample".into(),
        domain: String::new(),
        op_type: "GridSample".into(),
        opset: 20,
        attrs,
        inputs: vec!["x".into(), "grid".into()],
        outputs: vec!["y".into()],
    });
    b.output("y");
    let graph = b.build(Registry::global()).unwrap();
    let grid = seeded_tensor(&gs, 8);
    let grid: Vec<f32> = grid.to_f64_vec().iter().map(|&u| 1.3 * u as f32).collect();
    let inputs = vec![
        ("x".to_string(), seeded_tensor(&xs, 7)),
        ("grid".to_string(), Tensor::new(gs.to_vec(), grid).unwrap()),
    ];
    let model = OnnxModel {
        graph,
        ir_version: 9,
        opsets: vec![(String::new(), 20)],
        producer: "test".into(),
    };
    (model, inputs)
}

fn check(mode: &str, padding: &str, align: bool, host_nodes: usize) {
    let what = format!("{mode} {padding} align_corners={align}");
    let (model, inputs) = model(mode, padding, align);
    assert_compiled_matches_reference(&model, &inputs, host_nodes, 1e-5, true, &what);
}

#[test]
fn linear_and_nearest_samples_are_kernels() {
    for mode in ["linear", "nearest"] {
        for padding in ["zeros", "border"] {
            for align in [false, true] {
                check(mode, padding, align, 0);
            }
        }
    }
}

#[test]
fn cubic_and_reflection_stay_with_the_operator() {
    check("cubic", "zeros", false, 1);
    check("linear", "reflection", true, 1);
}
