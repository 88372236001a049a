//! A small CNN for fast tests, covering the CNN operators of the paper models at sizes that
//! are not multiples of tile sizes: `Conv` + `Relu`, a residual block, a depthwise
//! convolution with `Clip` (ReLU6), `Concat`, `MaxPool`, `AveragePool`,
//! `GlobalAveragePool`, `Flatten`, `Gemm`.

use hidet_graph::{Attribute, DType, Graph};

use super::net::{attrs, ConvSpec, Net, RELU_GAIN};
use super::{ZooError, SEED};

/// Input `input` f32[1, 3, 30, 30], output `output` f32[1, 10].
pub fn build() -> Result<Graph, ZooError> {
    let mut net = Net::new("tiny_cnn", SEED);
    let x = net.input("input", DType::F32, &[1, 3, 30, 30]);
    let h = net.conv("stem", &x, 3, ConvSpec::square(12, 3, 1, 1), RELU_GAIN)?;
    let h = net.relu(&h);
    let h = net.pool("stem.pool", "MaxPool", &h, 3, 2, 1); // 15×15
                                                           // Residual block.
    let a = net.conv(
        "block.conv1",
        &h,
        12,
        ConvSpec::square(12, 3, 1, 1),
        RELU_GAIN,
    )?;
    let a = net.relu(&a);
    let a = net.conv("block.conv2", &a, 12, ConvSpec::square(12, 3, 1, 1), 0.5)?;
    let r = net.op("block.add", "Add", &[&a, &h], Default::default());
    let r = net.relu(&r);
    // Two branches, concatenated: depthwise + ReLU6, and average pool + 1×1.
    let d = net.conv(
        "dw",
        &r,
        12,
        ConvSpec::square(12, 3, 2, 1).grouped(12),
        RELU_GAIN,
    )?;
    let d = net.relu6(&d); // 8×8
    let p = net.pool("branch.pool", "AveragePool", &r, 3, 2, 1);
    let p = net.conv(
        "branch.conv",
        &p,
        12,
        ConvSpec::square(7, 1, 1, 0),
        RELU_GAIN,
    )?;
    let p = net.relu(&p);
    let c = net.op(
        "concat",
        "Concat",
        &[&d, &p],
        attrs(vec![("axis", Attribute::Int(1))]),
    );
    let logits = net.classifier(&c, 19, 10)?;
    net.finish("tiny_cnn", &[&logits])
}
