//! ResNet-50 (torchvision v1.5: the stride sits on the 3×3 convolution of a bottleneck) as
//! exported with BatchNorm folded: 53 `Conv`, 49 `Relu`, 16 `Add`, `MaxPool`,
//! `GlobalAveragePool`, `Flatten`, `Gemm`.

use hidet_graph::{DType, Graph};

use super::net::{ConvSpec, Net, RELU_GAIN};
use super::{ZooError, SEED};

/// Gain of the last convolution of a residual branch: keeps the variance growth of the
/// 16 residual additions modest (as BatchNorm statistics do in a trained network).
const BRANCH_GAIN: f64 = 0.4;

/// ResNet-50 for one 224×224 image.
pub fn build() -> Result<Graph, ZooError> {
    build_for(224)
}

/// ResNet-50 for one `size`×`size` image (size ≥ 32).
pub fn build_for(size: usize) -> Result<Graph, ZooError> {
    let mut net = Net::new("resnet50", SEED);
    let x = net.input("input", DType::F32, &[1, 3, size, size]);
    let c = net.conv("conv1", &x, 3, ConvSpec::square(64, 7, 2, 3), RELU_GAIN)?;
    let c = net.relu(&c);
    let mut h = net.pool("maxpool", "MaxPool", &c, 3, 2, 1);
    let mut channels = 64;
    for (stage, (width, blocks, stride)) in [(64, 3, 1), (128, 4, 2), (256, 6, 2), (512, 3, 2)]
        .into_iter()
        .enumerate()
    {
        for block in 0..blocks {
            let s = if block == 0 { stride } else { 1 };
            let name = format!("layer{}.{block}", stage + 1);
            h = bottleneck(&mut net, &name, &h, channels, width, s)?;
            channels = width * 4;
        }
    }
    let logits = net.classifier(&h, channels, 1000)?;
    net.finish("resnet50", &[&logits])
}

fn bottleneck(
    net: &mut Net,
    name: &str,
    x: &str,
    cin: usize,
    width: usize,
    stride: usize,
) -> Result<String, ZooError> {
    let cout = width * 4;
    let a = net.conv(
        &format!("{name}.conv1"),
        x,
        cin,
        ConvSpec::square(width, 1, 1, 0),
        RELU_GAIN,
    )?;
    let a = net.relu(&a);
    let b = net.conv(
        &format!("{name}.conv2"),
        &a,
        width,
        ConvSpec::square(width, 3, stride, 1),
        RELU_GAIN,
    )?;
    let b = net.relu(&b);
    let c = net.conv(
        &format!("{name}.conv3"),
        &b,
        width,
        ConvSpec::square(cout, 1, 1, 0),
        BRANCH_GAIN,
    )?;
    let shortcut = if stride != 1 || cin != cout {
        net.conv(
            &format!("{name}.downsample"),
            x,
            cin,
            ConvSpec::square(cout, 1, stride, 0),
            1.0,
        )?
    } else {
        x.to_string()
    };
    let sum = net.op(
        &format!("{name}.add"),
        "Add",
        &[&c, &shortcut],
        Default::default(),
    );
    Ok(net.relu(&sum))
}
