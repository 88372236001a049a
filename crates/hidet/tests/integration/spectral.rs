//! Short-time Fourier transforms and the filterbank products after them, compiled end to end
//! against the reference executor (the operator's direct transform in f64): a real `STFT` with
//! constant framing becomes a gather of its frames and one product with the windowed basis
//! (`StftAsProduct`), on the CPU and on the simulated GPU; a complex signal stays with the
//! operator. A constant matrix applied to a batch of spectrograms (`MatMul([M, K], [d…, K,
//! N])`, a log-mel filterbank) runs on the matrix template.

use crate::common;
use common::{assert_compiled_matches_reference, seeded_tensor};
use hidet::graph::{
    Attribute, Attributes, DType, Graph, GraphBuilder, NodeSpec, Registry, Tensor, TensorType,
};
use hidet::onnx::OnnxModel;

fn node(op: &str, inputs: &[&str], output: &str, attrs: Attributes) -> NodeSpec {
    NodeSpec {
        name: output.into(),
        domain: String::new(),
        op_type: op.into(),
        opset: 17,
        attrs,
        inputs: inputs.iter().map(|s| s.to_string()).collect(),
        outputs: vec![output.into()],
    }
}

fn model(graph: Graph) -> OnnxModel {
    OnnxModel {
        graph,
        ir_version: 8,
        opsets: vec![(String::new(), 17)],
        producer: "test".into(),
    }
}

fn scalar_i64(v: i64) -> Tensor {
    Tensor::new(vec![1], vec![v]).unwrap()
}

/// A Hann window of `n` points (never all zero).
fn hann(n: usize) -> Tensor {
    let w: Vec<f32> = (0..n)
        .map(|i| (0.5 - 0.5 * (2.0 * std::f64::consts::PI * i as f64 / n as f64).cos()) as f32)
        .collect();
    Tensor::new(vec![n], w).unwrap()
}

/// `STFT(signal, step, window?, length?)`, then `|X|²` summed over the complex axis and a
/// constant `[mels, bins]` filterbank applied (`MatMul(fbank, Transpose(power))`), as a
/// log-mel front end computes it. Returns the model and its input.
fn stft_model(
    signal: &[usize],
    step: i64,
    window: Option<usize>,
    length: Option<i64>,
    onesided: bool,
    mels: Option<usize>,
) -> (OnnxModel, Vec<(String, Tensor)>) {
    let mut b = GraphBuilder::new("stft");
    b.input("x", TensorType::fixed(DType::F32, signal));
    b.initializer("step", scalar_i64(step));
    let mut inputs = vec!["x", "step"];
    if let Some(w) = window {
        b.initializer("window", hann(w));
        inputs.push("window");
    } else if length.is_some() {
        inputs.push("");
    }
    if let Some(l) = length {
        b.initializer("length", scalar_i64(l));
        inputs.push("length");
    }
    let mut attrs = Attributes::new();
    attrs.insert("onesided", Attribute::Int(i64::from(onesided)));
    b.node(node("STFT", &inputs, "spectrum", attrs));
    match mels {
        None => {
            b.output("spectrum");
        }
        Some(mels) => {
            let frame = length.map_or_else(|| window.unwrap_or(signal[1]), |l| l as usize);
            let bins = if onesided { frame / 2 + 1 } else { frame };
            b.initializer("two", Tensor::scalar(2.0f32));
            b.node(node(
                "Pow",
                &["spectrum", "two"],
                "squares",
                Attributes::new(),
            ));
            b.initializer("last", scalar_i64(-1));
            let mut keep = Attributes::new();
            keep.insert("keepdims", Attribute::Int(0));
            b.node(node("ReduceSum", &["squares", "last"], "power", keep));
            let mut perm = Attributes::new();
            perm.insert("perm", Attribute::Ints(vec![0, 2, 1]));
            b.node(node("Transpose", &["power"], "power_t", perm));
            b.initializer("fbank", seeded_tensor(&[mels, bins], 11));
            b.node(node(
                "MatMul",
                &["fbank", "power_t"],
                "mel",
                Attributes::new(),
            ));
            b.output("mel");
        }
    }
    let graph = b.build(Registry::global()).unwrap();
    let x = seeded_tensor(signal, 3);
    (model(graph), vec![("x".to_string(), x)])
}

fn check(model: &OnnxModel, inputs: &[(String, Tensor)], host_nodes: usize, what: &str) {
    assert_compiled_matches_reference(model, inputs, host_nodes, 1e-5, true, what);
}

#[test]
fn real_transforms_are_one_product() {
    // PyTorch's export: a 2-D signal, a window, onesided; frames that do not tile the signal.
    let (m, x) = stft_model(&[2, 301], 17, Some(52), None, true, None);
    check(&m, &x, 0, "2-D signal, Hann window");
    // [batch, len, 1], no window, an explicit frame length, both halves of the spectrum.
    let (m, x) = stft_model(&[1, 257, 1], 32, None, Some(64), false, None);
    check(&m, &x, 0, "no window, two-sided");
}

#[test]
fn a_filterbank_after_the_transform_runs_as_a_product() {
    let (m, x) = stft_model(&[1, 400], 40, Some(100), None, true, Some(23));
    check(&m, &x, 0, "log-mel front end, one signal");
    let (m, x) = stft_model(&[3, 250], 25, Some(64), None, true, Some(10));
    check(&m, &x, 0, "log-mel front end, three signals");
}

#[test]
fn a_complex_signal_stays_with_the_operator() {
    let (m, x) = stft_model(&[1, 90, 2], 10, Some(30), None, false, None);
    check(&m, &x, 1, "complex signal");
}
