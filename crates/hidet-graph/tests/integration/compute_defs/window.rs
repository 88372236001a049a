//! The convolution, pooling and Gemm families: Conv (groups, depthwise, strides, dilations,
//! explicit pads and every `auto_pad`, bias, 1-D/2-D/3-D, f16/f64), MaxPool / AveragePool /
//! LpPool (pads, strides, dilations, `ceil_mode`, `count_include_pad`, u8/i8 max), the global
//! pools and Gemm (transA/transB, alpha/beta, every C broadcast, C absent).
//!
//! Tolerance: f32 definitions accumulate in f32 while `eval` accumulates in f64 and rounds
//! once; sums here fold at most a few hundred products of values in `[-3, 3]`, so f32 outputs
//! are compared within `1e-4 + 1e-4·|want|`.

use super::*;

/// Every operator of the family; each must appear in [`window_cases`].
pub(super) const WINDOW_OPS: &[&str] = &[
    "Conv",
    "ConvInteger",
    "MaxPool",
    "AveragePool",
    "LpPool",
    "GlobalMaxPool",
    "GlobalAveragePool",
    "GlobalLpPool",
    "Gemm",
    "Col2Im",
];

/// A case whose f32 outputs are compared within the accumulation tolerance.
fn acc(op: &'static str, inputs: Vec<In>) -> Case {
    case(op, inputs).tol(1e-4, 1e-4)
}

fn conv_cases(c: &mut Vec<Case>) {
    // 2-D, stride 1 and 2, pad 1, odd sizes, with and without bias.
    for stride in [1, 2] {
        c.push(
            acc(
                "Conv",
                vec![f(F32, &[1, 5, 9, 11]), f(F32, &[7, 5, 3, 3]), f(F32, &[7])],
            )
            .attr("pads", ints(&[1, 1, 1, 1]))
            .attr("strides", ints(&[stride, stride])),
        );
    }
    c.push(acc(
        "Conv",
        vec![f(F32, &[2, 3, 7, 6]), f(F32, &[4, 3, 2, 3])],
    ));
    // Groups, asymmetric pads, dilations and strides together.
    c.push(
        acc(
            "Conv",
            vec![f(F32, &[2, 6, 11, 9]), f(F32, &[4, 3, 3, 2]), f(F32, &[4])],
        )
        .attr("group", int_attr(2))
        .attr("strides", ints(&[2, 1]))
        .attr("dilations", ints(&[1, 2]))
        .attr("pads", ints(&[1, 0, 2, 3])),
    );
    // Depthwise (group = channels), channel multiplier 2.
    c.push(
        acc(
            "Conv",
            vec![f(F32, &[1, 5, 8, 7]), f(F32, &[10, 1, 3, 3]), f(F32, &[10])],
        )
        .attr("group", int_attr(5))
        .attr("pads", ints(&[1, 1, 1, 1])),
    );
    // auto_pad modes (the odd padding on opposite sides), kernel_shape given.
    for mode in ["SAME_UPPER", "SAME_LOWER", "VALID"] {
        c.push(
            acc("Conv", vec![f(F32, &[1, 3, 8, 7]), f(F32, &[2, 3, 4, 3])])
                .attr("auto_pad", Attribute::String(mode.into()))
                .attr("strides", ints(&[2, 3]))
                .attr("kernel_shape", ints(&[4, 3])),
        );
    }
    // 1×1, 1-D and 3-D.
    c.push(acc(
        "Conv",
        vec![f(F32, &[1, 13, 5, 3]), f(F32, &[6, 13, 1, 1]), f(F32, &[6])],
    ));
    c.push(
        acc("Conv", vec![f(F32, &[2, 3, 17]), f(F32, &[4, 3, 5])])
            .attr("pads", ints(&[2, 1]))
            .attr("dilations", ints(&[3])),
    );
    c.push(
        acc(
            "Conv",
            vec![f(F32, &[1, 2, 5, 4, 6]), f(F32, &[3, 2, 2, 3, 2])],
        )
        .attr("pads", ints(&[1, 0, 1, 0, 1, 1])),
    );
    // Other float types (f16 accumulates in f32; f64 exact).
    c.push(
        case(
            "Conv",
            vec![f(F16, &[1, 3, 6, 5]), f(F16, &[2, 3, 3, 3]), f(F16, &[2])],
        )
        .attr("pads", ints(&[1, 1, 1, 1])),
    );
    c.push(
        case("Conv", vec![f(F64, &[1, 2, 5, 5]), f(F64, &[3, 2, 2, 2])])
            .attr("strides", ints(&[2, 2])),
    );
    c.push(
        case(
            "ConvInteger",
            vec![
                int(U8, &[1, 2, 4, 4], 1, 200),
                int(U8, &[3, 2, 2, 2], 1, 200),
            ],
        )
        .none("integer convolutions have no definition"),
    );
}

fn pool_cases(c: &mut Vec<Case>) {
    let window = |op: &'static str, x: In| {
        acc(op, vec![x])
            .attr("kernel_shape", ints(&[3, 2]))
            .attr("strides", ints(&[2, 3]))
            .attr("dilations", ints(&[1, 2]))
            .attr("pads", ints(&[1, 1, 1, 0]))
    };
    for op in ["MaxPool", "AveragePool", "LpPool"] {
        c.push(window(op, f(F32, &[2, 3, 9, 7])));
        // ceil_mode: the last windows run past the padded input.
        if op != "LpPool" {
            c.push(
                acc(op, vec![f(F32, &[1, 2, 8, 7])])
                    .attr("kernel_shape", ints(&[3, 3]))
                    .attr("strides", ints(&[2, 2]))
                    .attr("pads", ints(&[1, 0, 0, 1]))
                    .attr("ceil_mode", int_attr(1)),
            );
        }
        // auto_pad, 1-D and 3-D.
        c.push(
            acc(op, vec![f(F32, &[1, 3, 10, 9])])
                .attr("kernel_shape", ints(&[3, 2]))
                .attr("strides", ints(&[2, 2]))
                .attr("auto_pad", Attribute::String("SAME_LOWER".into())),
        );
        c.push(
            acc(op, vec![f(F32, &[2, 2, 11])])
                .attr("kernel_shape", ints(&[4]))
                .attr("strides", ints(&[3])),
        );
        c.push(
            acc(op, vec![f(F32, &[1, 2, 5, 4, 6])])
                .attr("kernel_shape", ints(&[2, 2, 3]))
                .attr("pads", ints(&[1, 0, 1, 0, 1, 1])),
        );
        c.push(window(op, f(F16, &[1, 2, 7, 6])));
    }
    // AveragePool counting the padding (including ceil_mode's extension).
    c.push(window("AveragePool", f(F32, &[1, 3, 9, 8])).attr("count_include_pad", int_attr(1)));
    c.push(
        acc("AveragePool", vec![f(F32, &[1, 2, 7, 7])])
            .attr("kernel_shape", ints(&[3, 3]))
            .attr("strides", ints(&[2, 2]))
            .attr("pads", ints(&[1, 1, 1, 1]))
            .attr("ceil_mode", int_attr(1))
            .attr("count_include_pad", int_attr(1)),
    );
    // Lp with p = 1, 3.
    for p in [1, 3] {
        c.push(window("LpPool", f(F32, &[1, 2, 8, 7])).attr("p", int_attr(p)));
    }
    // 8-bit max pooling: padding never wins, exact.
    c.push(window("MaxPool", int(U8, &[1, 2, 9, 7], 1, 250)));
    c.push(window("MaxPool", int(I8, &[1, 2, 9, 7], -120, 120)));
    // ResNet's stem pool.
    c.push(
        acc("MaxPool", vec![f(F32, &[1, 4, 15, 15])])
            .attr("kernel_shape", ints(&[3, 3]))
            .attr("strides", ints(&[2, 2]))
            .attr("pads", ints(&[1, 1, 1, 1])),
    );
    c.push(
        acc("MaxPool", vec![f(F32, &[1, 2, 6, 5])])
            .outputs(2)
            .attr("kernel_shape", ints(&[2, 2]))
            .none("the Indices output (an argmax) has no definition"),
    );
    for op in ["GlobalMaxPool", "GlobalAveragePool", "GlobalLpPool"] {
        c.push(acc(op, vec![f(F32, &[2, 3, 7, 5])]));
        c.push(acc(op, vec![f(F32, &[1, 4, 9])]));
        c.push(acc(op, vec![f(F16, &[1, 3, 4, 5])]));
        c.push(acc(op, vec![f(F32, &[2, 3])]));
    }
    c.push(acc("GlobalLpPool", vec![f(F32, &[1, 2, 5, 3])]).attr("p", int_attr(3)));
    c.push(case("GlobalMaxPool", vec![int(U8, &[1, 3, 5, 4], 1, 250)]));
    c.push(
        acc("GlobalAveragePool", vec![f(F32, &[1, 2, 0, 3])])
            .none("an empty plane's mean is NaN in eval"),
    );
}

fn gemm_cases(c: &mut Vec<Case>) {
    for (ta, tb) in [(0, 0), (1, 0), (0, 1), (1, 1)] {
        let a = if ta == 1 { [11, 7] } else { [7, 11] };
        let b = if tb == 1 { [9, 11] } else { [11, 9] };
        c.push(
            acc("Gemm", vec![f(F32, &a), f(F32, &b), f(F32, &[7, 9])])
                .attr("transA", int_attr(ta))
                .attr("transB", int_attr(tb))
                .attr("alpha", Attribute::Float(0.75))
                .attr("beta", Attribute::Float(-1.5)),
        );
    }
    // C broadcast from [N], [M, 1], [1, 1] and a scalar; C absent; beta = 0.
    for cs in [vec![9], vec![7, 1], vec![1, 1], vec![]] {
        c.push(acc(
            "Gemm",
            vec![f(F32, &[7, 5]), f(F32, &[5, 9]), f(F32, &cs)],
        ));
    }
    c.push(acc("Gemm", vec![f(F32, &[7, 5]), f(F32, &[5, 9])]));
    c.push(
        acc("Gemm", vec![f(F32, &[7, 5]), f(F32, &[5, 9]), In::Absent])
            .attr("alpha", Attribute::Float(2.5)),
    );
    c.push(
        acc("Gemm", vec![f(F32, &[3, 4]), f(F32, &[4, 6]), f(F32, &[6])])
            .attr("beta", Attribute::Float(0.0)),
    );
    c.push(
        acc(
            "Gemm",
            vec![f(F32, &[3, 4]), f(F32, &[4, 6]), f(F32, &[3, 6])],
        )
        .opset(9),
    );
    c.push(case(
        "Gemm",
        vec![f(F16, &[5, 6]), f(F16, &[6, 3]), f(F16, &[3])],
    ));
    c.push(
        case(
            "Gemm",
            vec![f(F64, &[4, 3]), f(F64, &[5, 3]), f(F64, &[4, 5])],
        )
        .attr("transB", int_attr(1)),
    );
    c.push(
        case(
            "Gemm",
            vec![int(I32, &[3, 4], -9, 9), int(I32, &[4, 2], -9, 9)],
        )
        .none("integer Gemm wraps in i128: no definition"),
    );
}

/// Col2Im (a transposed convolution's scatter): overlapping and strided blocks, dilation,
/// pads, 1-D to 3-D images, f16; non-constant shapes leave it on the host.
fn col2im_cases(c: &mut Vec<Case>) {
    /// (image, block, strides, dilations, pads, channels, batch)
    type Geometry<'a> = (
        &'a [i64],
        &'a [i64],
        &'a [i64],
        &'a [i64],
        &'a [i64],
        usize,
        usize,
    );
    let geometries: [Geometry; 5] = [
        (&[5, 7], &[2, 3], &[1, 1], &[1, 1], &[0, 0, 0, 0], 2, 1),
        (&[9, 8], &[4, 4], &[2, 2], &[1, 1], &[1, 1, 1, 1], 3, 2),
        (&[7, 6], &[3, 2], &[2, 3], &[2, 1], &[1, 0, 2, 1], 2, 1),
        (&[11], &[3], &[3], &[1], &[2, 1], 4, 2),
        (
            &[4, 5, 6],
            &[2, 2, 3],
            &[2, 1, 2],
            &[1, 2, 1],
            &[0, 1, 1, 1, 0, 2],
            2,
            1,
        ),
    ];
    for (image, block, strides, dilations, pads, channels, batch) in geometries {
        let r = image.len();
        let positions: usize = (0..r)
            .map(|a| {
                let span = dilations[a] * (block[a] - 1) + 1;
                ((image[a] + pads[a] + pads[r + a] - span) / strides[a] + 1) as usize
            })
            .product();
        let k: usize = block.iter().map(|&b| b as usize).product();
        for dt in [F32, F16] {
            c.push(
                acc(
                    "Col2Im",
                    vec![
                        f(dt, &[batch, channels * k, positions]),
                        i64s(&[r], image),
                        i64s(&[r], block),
                    ],
                )
                .attr("strides", ints(strides))
                .attr("dilations", ints(dilations))
                .attr("pads", ints(pads)),
            );
        }
    }
}

pub(super) fn window_cases() -> Vec<Case> {
    let mut c = Vec::new();
    col2im_cases(&mut c);
    conv_cases(&mut c);
    pool_cases(&mut c);
    gemm_cases(&mut c);
    c
}
