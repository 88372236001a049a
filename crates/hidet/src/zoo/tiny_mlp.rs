//! A small MLP for fast tests: `Gemm(transB=1)` + `Relu`, `MatMul` + `Add`,
//! `LayerNormalization`, `Gemm`, `Softmax`, at sizes that are not multiples of tile sizes.

use hidet_graph::{DType, Graph};

use super::net::{Net, RELU_GAIN};
use super::{ZooError, SEED};

/// Input `input` f32[3, 37], output `probs` f32[3, 11].
pub fn build() -> Result<Graph, ZooError> {
    let mut net = Net::new("tiny_mlp", SEED);
    let x = net.input("input", DType::F32, &[3, 37]);
    let h = net.gemm("fc1", &x, 37, 70, true, RELU_GAIN)?;
    let h = net.relu(&h);
    let h = net.linear("fc2", &h, 70, 45, RELU_GAIN)?;
    let h = net.relu(&h);
    let h = net.layer_norm("norm", &h, 45, 1e-5)?;
    let logits = net.gemm("head", &h, 45, 11, false, 1.0)?;
    let probs = net.softmax("probs", &logits);
    net.finish("tiny_mlp", &[&probs])
}
