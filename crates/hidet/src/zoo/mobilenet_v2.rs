//! MobileNet-V2 (torchvision) as exported with BatchNorm folded: 52 `Conv` (17 depthwise),
//! 35 `Clip` (ReLU6), 10 residual `Add`, `GlobalAveragePool`, `Flatten`, `Gemm`.

use hidet_graph::{DType, Graph};

use super::net::{ConvSpec, Net, RELU_GAIN};
use super::{ZooError, SEED};

/// (expansion t, output channels c, repeats n, first stride s) of the inverted residual
/// stages.
const STAGES: [(usize, usize, usize, usize); 7] = [
    (1, 16, 1, 1),
    (6, 24, 2, 2),
    (6, 32, 3, 2),
    (6, 64, 4, 2),
    (6, 96, 3, 1),
    (6, 160, 3, 2),
    (6, 320, 1, 1),
];

/// Gain of the linear projection that ends a residual block.
const PROJECT_GAIN: f64 = 0.6;

/// MobileNet-V2 for one 224×224 image.
pub fn build() -> Result<Graph, ZooError> {
    build_for(224)
}

/// MobileNet-V2 for one `size`×`size` image (size ≥ 32).
pub fn build_for(size: usize) -> Result<Graph, ZooError> {
    let mut net = Net::new("mobilenet_v2", SEED);
    let x = net.input("input", DType::F32, &[1, 3, size, size]);
    let c = net.conv(
        "features.0",
        &x,
        3,
        ConvSpec::square(32, 3, 2, 1),
        RELU_GAIN,
    )?;
    let mut h = net.relu6(&c);
    let mut channels = 32;
    let mut index = 1;
    for (t, c, n, s) in STAGES {
        for i in 0..n {
            let stride = if i == 0 { s } else { 1 };
            h = inverted_residual(
                &mut net,
                &format!("features.{index}"),
                &h,
                channels,
                c,
                stride,
                t,
            )?;
            channels = c;
            index += 1;
        }
    }
    let last = net.conv(
        &format!("features.{index}"),
        &h,
        channels,
        ConvSpec::square(1280, 1, 1, 0),
        RELU_GAIN,
    )?;
    let last = net.relu6(&last);
    let logits = net.classifier(&last, 1280, 1000)?;
    net.finish("mobilenet_v2", &[&logits])
}

fn inverted_residual(
    net: &mut Net,
    name: &str,
    x: &str,
    cin: usize,
    cout: usize,
    stride: usize,
    expand: usize,
) -> Result<String, ZooError> {
    let hidden = cin * expand;
    let mut h = x.to_string();
    if expand != 1 {
        let e = net.conv(
            &format!("{name}.expand"),
            &h,
            cin,
            ConvSpec::square(hidden, 1, 1, 0),
            RELU_GAIN,
        )?;
        h = net.relu6(&e);
    }
    let dw = net.conv(
        &format!("{name}.depthwise"),
        &h,
        hidden,
        ConvSpec::square(hidden, 3, stride, 1).grouped(hidden),
        RELU_GAIN,
    )?;
    let dw = net.relu6(&dw);
    let residual = stride == 1 && cin == cout;
    let gain = if residual { PROJECT_GAIN } else { 1.0 };
    let p = net.conv(
        &format!("{name}.project"),
        &dw,
        hidden,
        ConvSpec::square(cout, 1, 1, 0),
        gain,
    )?;
    if residual {
        Ok(net.op(&format!("{name}.add"), "Add", &[x, &p], Default::default()))
    } else {
        Ok(p)
    }
}
