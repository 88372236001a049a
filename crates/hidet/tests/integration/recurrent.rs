//! Recurrent layers compiled end to end against the reference executor (the operator's own
//! step-by-step implementation in f64): `LSTM`, `GRU` and `RNN` nodes become their steps
//! (`RecurrentAsSteps`), every step a kernel, on the CPU and on the simulated GPU. Covered:
//! both directions and reverse, batch-first layout, peepholes, `input_forget`, `clip`,
//! non-default activations, both GRU reset modes, initial states present and absent, and
//! `sequence_lens` as a constant and as a runtime input.

use crate::common;
use common::{assert_compiled_matches_reference, assert_outputs_close, seeded_tensor};
use hidet::graph::compiled::CompileOptions;
use hidet::graph::{
    Attribute, Attributes, DType, Graph, GraphBuilder, NodeSpec, Registry, Tensor, TensorType,
};
use hidet::onnx::OnnxModel;
use hidet::pipeline;

/// One recurrent layer and how its model feeds it.
struct Case {
    op: &'static str,
    attrs: Vec<(&'static str, Attribute)>,
    seq: usize,
    batch: usize,
    input: usize,
    hidden: usize,
    dirs: usize,
    batch_major: bool,
    bias: bool,
    /// `sequence_lens`: `None`, a constant, or (`true`) a runtime input.
    lens: Option<(Vec<i32>, bool)>,
    initial: bool,
    peepholes: bool,
}

impl Case {
    fn gates(&self) -> usize {
        match self.op {
            "LSTM" => 4,
            "GRU" => 3,
            _ => 1,
        }
    }

    fn state_shape(&self) -> Vec<usize> {
        if self.batch_major {
            vec![self.batch, self.dirs, self.hidden]
        } else {
            vec![self.dirs, self.batch, self.hidden]
        }
    }

    fn x_shape(&self) -> Vec<usize> {
        if self.batch_major {
            vec![self.batch, self.seq, self.input]
        } else {
            vec![self.seq, self.batch, self.input]
        }
    }

    /// The model and its runtime inputs.
    fn model(&self) -> (OnnxModel, Vec<(String, Tensor)>) {
        let (g, h, d) = (self.gates(), self.hidden, self.dirs);
        let lstm = self.op == "LSTM";
        let mut b = GraphBuilder::new("recurrent");
        let mut inputs = vec![("x".to_string(), seeded_tensor(&self.x_shape(), 1))];
        b.input("x", TensorType::fixed(DType::F32, &self.x_shape()));
        // Recurrent weights scaled down so that the states stay in the activations' range.
        let small = |t: Tensor| {
            let v: Vec<f32> = t.to_f64_vec().iter().map(|&x| 0.6 * x as f32).collect();
            Tensor::new(t.shape().to_vec(), v).unwrap()
        };
        b.initializer("w", seeded_tensor(&[d, g * h, self.input], 2));
        b.initializer("r", small(seeded_tensor(&[d, g * h, h], 3)));
        let mut names = vec!["x", "w", "r"];
        if self.bias {
            b.initializer("b", seeded_tensor(&[d, 2 * g * h], 4));
            names.push("b");
        } else {
            names.push("");
        }
        match &self.lens {
            None => names.push(""),
            Some((lens, runtime)) => {
                let t = Tensor::new(vec![self.batch], lens.clone()).unwrap();
                if *runtime {
                    b.input("lens", TensorType::fixed(DType::I32, &[self.batch]));
                    inputs.push(("lens".to_string(), t));
                } else {
                    b.initializer("lens", t);
                }
                names.push("lens");
            }
        }
        if self.initial {
            b.input("h0", TensorType::fixed(DType::F32, &self.state_shape()));
            inputs.push(("h0".to_string(), seeded_tensor(&self.state_shape(), 5)));
            names.push("h0");
            if lstm {
                b.initializer("c0", seeded_tensor(&self.state_shape(), 6));
                names.push("c0");
            }
        } else {
            names.push("");
            if lstm {
                names.push("");
            }
        }
        if self.peepholes {
            b.initializer("p", seeded_tensor(&[d, 3 * h], 7));
            names.push("p");
        }
        while names.last() == Some(&"") {
            names.pop();
        }
        let mut attrs = Attributes::new();
        attrs.insert("hidden_size", Attribute::Int(h as i64));
        attrs.insert("layout", Attribute::Int(i64::from(self.batch_major)));
        for (n, v) in &self.attrs {
            attrs.insert(*n, v.clone());
        }
        let mut outputs = vec!["y".to_string(), "y_h".to_string()];
        if lstm {
            outputs.push("y_c".to_string());
        }
        b.node(NodeSpec {
            name: "layer".into(),
            domain: String::new(),
            op_type: self.op.into(),
            opset: 14,
            attrs,
            inputs: names.iter().map(|s| s.to_string()).collect(),
            outputs: outputs.clone(),
        });
        for o in &outputs {
            b.output(o.as_str());
        }
        let graph: Graph = b.build(Registry::global()).unwrap();
        let model = OnnxModel {
            graph,
            ir_version: 8,
            opsets: vec![(String::new(), 14)],
            producer: "test".into(),
        };
        (model, inputs)
    }
}

/// Compiles `case` for the CPU (and, with `sim`, the simulated GPU), checks that the layer
/// left no host step and that every output matches the reference.
fn run(case: &Case, sim: bool) {
    let (model, inputs) = case.model();
    assert_compiled_matches_reference(&model, &inputs, 0, 1e-5, sim, case.op);
}

fn strings(v: &[&str]) -> Attribute {
    Attribute::Strings(v.iter().map(|s| s.to_string()).collect())
}

#[test]
fn bidirectional_lstm_with_peepholes_and_initial_states() {
    run(
        &Case {
            op: "LSTM",
            attrs: vec![("direction", Attribute::String("bidirectional".into()))],
            seq: 7,
            batch: 3,
            input: 5,
            hidden: 6,
            dirs: 2,
            batch_major: false,
            bias: true,
            lens: None,
            initial: true,
            peepholes: true,
        },
        true,
    );
}

#[test]
fn batch_first_lstm_with_input_forget_clip_and_runtime_lengths() {
    run(
        &Case {
            op: "LSTM",
            attrs: vec![
                ("input_forget", Attribute::Int(1)),
                ("clip", Attribute::Float(0.7)),
                ("direction", Attribute::String("reverse".into())),
            ],
            seq: 5,
            batch: 4,
            input: 3,
            hidden: 7,
            dirs: 1,
            batch_major: true,
            bias: false,
            lens: Some((vec![5, 2, 0, 4], true)),
            initial: false,
            peepholes: false,
        },
        true,
    );
}

#[test]
fn gru_reset_after_the_product_bidirectional() {
    run(
        &Case {
            op: "GRU",
            attrs: vec![
                ("linear_before_reset", Attribute::Int(1)),
                ("direction", Attribute::String("bidirectional".into())),
            ],
            seq: 6,
            batch: 2,
            input: 9,
            hidden: 5,
            dirs: 2,
            batch_major: true,
            bias: true,
            lens: None,
            initial: true,
            peepholes: false,
        },
        true,
    );
}

#[test]
fn gru_reset_before_the_product_with_constant_lengths_and_other_activations() {
    run(
        &Case {
            op: "GRU",
            attrs: vec![
                ("direction", Attribute::String("reverse".into())),
                ("activations", strings(&["HardSigmoid", "Softsign"])),
                ("activation_alpha", Attribute::Floats(vec![0.3])),
                ("activation_beta", Attribute::Floats(vec![0.45])),
            ],
            seq: 5,
            batch: 3,
            input: 4,
            hidden: 6,
            dirs: 1,
            batch_major: false,
            bias: true,
            lens: Some((vec![3, 5, 1], false)),
            initial: false,
            peepholes: false,
        },
        false,
    );
}

#[test]
fn rnn_with_every_other_activation() {
    let configs: [(&[&str], Vec<f32>, Vec<f32>); 3] = [
        (&["ScaledTanh", "Affine"], vec![0.9, 1.3], vec![0.8, 0.1]),
        (&["LeakyRelu", "ThresholdedRelu"], vec![0.2, 0.1], vec![]),
        (&["Relu", "Sigmoid"], vec![], vec![]),
    ];
    for (acts, alpha, beta) in configs {
        run(
            &Case {
                op: "RNN",
                attrs: vec![
                    ("direction", Attribute::String("bidirectional".into())),
                    ("activations", strings(acts)),
                    ("activation_alpha", Attribute::Floats(alpha)),
                    ("activation_beta", Attribute::Floats(beta)),
                ],
                seq: 4,
                batch: 3,
                input: 6,
                hidden: 5,
                dirs: 2,
                batch_major: false,
                bias: true,
                lens: None,
                initial: true,
                peepholes: false,
            },
            false,
        );
    }
}

#[test]
fn lstm_with_custom_activations_and_no_bias() {
    run(
        &Case {
            op: "LSTM",
            attrs: vec![("activations", strings(&["HardSigmoid", "Elu", "Softplus"]))],
            seq: 3,
            batch: 2,
            input: 3,
            hidden: 4,
            dirs: 1,
            batch_major: false,
            bias: false,
            lens: None,
            initial: true,
            peepholes: true,
        },
        false,
    );
}

/// A layer of more steps than `MAX_UNROLLED_STEPS` stays one node and runs on the host, with
/// the same result.
#[test]
fn a_layer_longer_than_the_unrolling_bound_runs_on_the_host() {
    let case = Case {
        op: "GRU",
        attrs: vec![],
        seq: hidet::graph::passes::MAX_UNROLLED_STEPS + 1,
        batch: 1,
        input: 2,
        hidden: 3,
        dirs: 1,
        batch_major: false,
        bias: true,
        lens: None,
        initial: false,
        peepholes: false,
    };
    let (model, inputs) = case.model();
    let want = pipeline::run_reference(&model, &inputs).unwrap();
    let shapes: Vec<Vec<usize>> = inputs.iter().map(|(_, t)| t.shape().to_vec()).collect();
    let cpu = pipeline::compile(&model, CompileOptions::default());
    let graph = cpu.compiled(&shapes).unwrap();
    assert_eq!(graph.report().host_ops().get("GRU"), Some(&1));
    assert_outputs_close(
        &pipeline::run(&cpu, &inputs).unwrap(),
        &want,
        1e-5,
        "GRU on the host",
    );
}
