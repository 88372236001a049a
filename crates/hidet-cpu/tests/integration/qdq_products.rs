//! Quantized (QDQ) products compiled through the CPU graph passes agree with the reference
//! executor to within one quantization step.
//!
//! Each graph is what ONNX Runtime's `quantize_static` writes in QDQ format: the activation
//! quantized and dequantized (`QuantizeLinear` → `DequantizeLinear`, per tensor, int8 or
//! uint8), an int8 weight constant dequantized per tensor or per output channel, an int32
//! bias dequantized with the product of the scales, the product (a convolution of each form
//! the CPU passes rewrite it into — Winograd, direct, pointwise, depthwise channels-last —
//! or a `MatMul`, or a `Gemm`), and the result quantized again. The compiled graph sums in
//! another order than the reference, so a product that lands next to a rounding tie may
//! round the other way: the quantized outputs may differ by one step, never more, and the
//! few that differ must be few. Shapes are not multiples of any tile.

use crate::common;

use std::sync::Arc;

use common::{cpu_backend, node, Rng};
use hidet_cpu::graph_passes::default_passes;
use hidet_graph::compiled::{CompileOptions, CompiledGraph};
use hidet_graph::passes::run_passes;
use hidet_graph::{
    run_reference, Attribute, Attributes, DType, GraphBuilder, Registry, Tensor, TensorType,
};

/// The product under test, with the shape of its weight.
#[derive(Clone, Copy, Debug)]
enum Product {
    /// `Conv` with `group` groups over `[batch, c, h, w]`, `o` output channels, a `k × k`
    /// window, `stride` and `pad` on every side.
    Conv {
        batch: usize,
        c: usize,
        o: usize,
        hw: usize,
        k: usize,
        stride: usize,
        pad: usize,
        group: usize,
    },
    /// `MatMul` of `[m, k]` (`[batch, m, k]` when `batch > 1`) by a constant `[k, n]`.
    MatMul {
        batch: usize,
        m: usize,
        k: usize,
        n: usize,
    },
    /// `Gemm` of `[m, k]` by a constant `[n, k]` (`transB = 1`) plus a bias.
    Gemm { m: usize, k: usize, n: usize },
}

impl Product {
    fn input_shape(&self) -> Vec<usize> {
        match *self {
            Product::Conv { batch, c, hw, .. } => vec![batch, c, hw, hw],
            Product::MatMul { batch, m, k, .. } if batch > 1 => vec![batch, m, k],
            Product::MatMul { m, k, .. } | Product::Gemm { m, k, .. } => vec![m, k],
        }
    }

    /// The weight's shape, its output-channel axis and the number of output channels.
    fn weight(&self) -> (Vec<usize>, i64, usize) {
        match *self {
            Product::Conv { c, o, k, group, .. } => (vec![o, c / group, k, k], 0, o),
            Product::MatMul { k, n, .. } => (vec![k, n], 1, n),
            Product::Gemm { k, n, .. } => (vec![n, k], 0, n),
        }
    }

    /// The reduction length of one output.
    fn depth(&self) -> usize {
        match *self {
            Product::Conv { c, k, group, .. } => c / group * k * k,
            Product::MatMul { k, .. } | Product::Gemm { k, .. } => k,
        }
    }
}

fn attrs(pairs: &[(&str, Attribute)]) -> Attributes {
    let mut a = Attributes::new();
    for (k, v) in pairs {
        a.insert(*k, v.clone());
    }
    a
}

/// Builds the QDQ graph of `p` with an activation of `act` (int8 or uint8), per-channel
/// weight scales when `per_channel` and a ReLU before the output's quantization when `relu`
/// (ONNX Runtime's exports fold it into the zero point), runs it with the reference executor
/// and compiled after the CPU passes, and checks the quantized output. Returns the number of
/// anchored products of the compiled graph: float (`MatMul` kernels) and 8-bit
/// (`IntegerMatMul` and `IntegerLinear` kernels).
fn check(seed: u64, p: Product, act: DType, per_channel: bool, relu: bool) -> (usize, usize) {
    let mut rng = Rng::new(seed);
    let what = format!("{p:?}, {act:?}, per channel {per_channel}");
    let xs = p.input_shape();
    let (ws, w_axis, oc) = p.weight();
    let wn: usize = ws.iter().product();
    let (sx, zx) = (0.02f32, if act == DType::I8 { -5.0 } else { 120.0 });
    let zero = |v: f64| match act {
        DType::I8 => Tensor::new(vec![], vec![v as i8]).unwrap(),
        _ => Tensor::new(vec![], vec![v as u8]).unwrap(),
    };
    let w_scales: Vec<f32> = if per_channel {
        (0..oc).map(|i| 0.004 + 0.0005 * (i % 7) as f32).collect()
    } else {
        vec![0.005]
    };
    let w_q: Vec<i8> = (0..wn)
        .map(|_| (rng.next_u64() % 256) as u8 as i8)
        .map(|v| v.max(-127))
        .collect();
    let bias_q: Vec<i32> = (0..oc)
        .map(|_| (rng.next_u64() % 2001) as i32 - 1000)
        .collect();
    let bias_scales: Vec<f32> = (0..oc)
        .map(|i| sx * w_scales[if per_channel { i } else { 0 }])
        .collect();
    // The output's scale spreads the products over the int8 range: a sum of `depth` terms
    // with root-mean-square `1.45 · 0.37` (the activations' and the weights') reaches 127
    // steps at 2.5 of its standard deviations.
    let sy = 2.5 * 1.45 * 0.37 * (p.depth() as f32).sqrt() / 127.0;
    let x: Vec<f32> = rng
        .vec_f32(xs.iter().product())
        .iter()
        .map(|v| v * 2.5)
        .collect();

    let mut g = GraphBuilder::new("qdq_product");
    g.input("x", TensorType::fixed(DType::F32, &xs));
    g.initializer("sx", Tensor::new(vec![], vec![sx]).unwrap());
    g.initializer("zx", zero(zx));
    let wsh = if per_channel { vec![oc] } else { vec![] };
    g.initializer("w_q", Tensor::new(ws.clone(), w_q).unwrap());
    g.initializer("sw", Tensor::new(wsh.clone(), w_scales.clone()).unwrap());
    g.initializer(
        "zw",
        Tensor::new(wsh.clone(), vec![0i8; w_scales.len()]).unwrap(),
    );
    g.initializer("b_q", Tensor::new(vec![oc], bias_q).unwrap());
    g.initializer("sb", Tensor::new(vec![oc], bias_scales).unwrap());
    g.initializer("zb", Tensor::new(vec![oc], vec![0i32; oc]).unwrap());
    g.initializer("sy", Tensor::new(vec![], vec![sy]).unwrap());
    g.initializer("zy", zero(if act == DType::I8 { 3.0 } else { 130.0 }));
    g.node(node(
        "QuantizeLinear",
        &["x", "sx", "zx"],
        "xq",
        Attributes::new(),
    ));
    g.node(node(
        "DequantizeLinear",
        &["xq", "sx", "zx"],
        "xd",
        Attributes::new(),
    ));
    g.node(node(
        "DequantizeLinear",
        &["w_q", "sw", "zw"],
        "w",
        attrs(&[("axis", Attribute::Int(w_axis))]),
    ));
    g.node(node(
        "DequantizeLinear",
        &["b_q", "sb", "zb"],
        "b",
        attrs(&[("axis", Attribute::Int(0))]),
    ));
    match p {
        Product::Conv {
            k,
            stride,
            pad,
            group,
            ..
        } => {
            let (k, s, pd) = (k as i64, stride as i64, pad as i64);
            g.node(node(
                "Conv",
                &["xd", "w", "b"],
                "acc",
                attrs(&[
                    ("kernel_shape", Attribute::Ints(vec![k, k])),
                    ("strides", Attribute::Ints(vec![s, s])),
                    ("pads", Attribute::Ints(vec![pd; 4])),
                    ("group", Attribute::Int(group as i64)),
                ]),
            ));
        }
        Product::MatMul { .. } => {
            g.node(node("MatMul", &["xd", "w"], "mm", Attributes::new()));
            g.node(node("Add", &["mm", "b"], "acc", Attributes::new()));
        }
        Product::Gemm { .. } => {
            g.node(node(
                "Gemm",
                &["xd", "w", "b"],
                "acc",
                attrs(&[("transB", Attribute::Int(1))]),
            ));
        }
    }
    if relu {
        g.node(node("Relu", &["acc"], "r", Attributes::new()));
    } else {
        g.node(node("Identity", &["acc"], "r", Attributes::new()));
    }
    g.node(node(
        "QuantizeLinear",
        &["r", "sy", "zy"],
        "yq",
        Attributes::new(),
    ));
    g.node(node(
        "DequantizeLinear",
        &["yq", "sy", "zy"],
        "y",
        Attributes::new(),
    ));
    g.output("yq");
    g.output("y");
    let graph = g.build(Registry::global()).unwrap();
    let inputs = vec![("x".to_string(), Tensor::new(xs.clone(), x).unwrap())];
    let want = run_reference(&graph, &inputs).unwrap();

    let rewritten = run_passes(graph.clone(), &default_passes()).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let compiled = CompiledGraph::compile(
        &rewritten,
        std::slice::from_ref(&xs),
        Arc::new(cpu_backend(dir.path(), true)),
        &CompileOptions::default(),
    )
    .unwrap();
    let report = compiled.report();
    assert_eq!(report.host_nodes(), 0, "{what}: {}", report.partition);
    let got = compiled.run(&inputs).unwrap();

    let (gq, wq) = (got[0].1.to_f64_vec(), want[0].1.to_f64_vec());
    assert_eq!(gq.len(), wq.len(), "{what}");
    let zy = if act == DType::I8 { 3.0 } else { 130.0 };
    let spread = wq.iter().filter(|&&v| (v - zy).abs() > 5.0).count();
    assert!(
        spread * 10 > wq.len(),
        "{what}: outputs mostly at the zero point, the check means little"
    );
    let mut off_by_one = 0;
    for (i, (a, b)) in gq.iter().zip(&wq).enumerate() {
        let d = (a - b).abs();
        assert!(d <= 1.0, "{what}: quantized output {i}: {a} vs {b}");
        off_by_one += usize::from(d == 1.0);
    }
    assert!(
        off_by_one * 100 <= wq.len(),
        "{what}: {off_by_one} of {} outputs one step off",
        wq.len()
    );
    // The dequantized output is the quantized one scaled: equal where the steps agree.
    let (gy, wy) = (got[1].1.to_f64_vec(), want[1].1.to_f64_vec());
    for (i, ((a, b), (qa, qb))) in gy.iter().zip(&wy).zip(gq.iter().zip(&wq)).enumerate() {
        if qa == qb {
            assert_eq!(a, b, "{what}: dequantized output {i}");
        }
    }
    let anchored = |op: &str| {
        report
            .partition
            .lines()
            .filter(|l| l.starts_with("kernel ") && l.contains(&format!("[anchored] {op}")))
            .count()
    };
    (
        anchored("MatMul"),
        anchored("IntegerMatMul") + anchored("IntegerLinear"),
    )
}

#[test]
fn qdq_convolutions_are_8_bit_products_that_match_the_reference_within_one_step() {
    let conv = |batch, c, o, hw, k, stride, pad, group| Product::Conv {
        batch,
        c,
        o,
        hw,
        k,
        stride,
        pad,
        group,
    };
    // Every ungrouped convolution becomes one 8-bit product (`K` = C·k² and the output pixels
    // multiples of no tile, padding at the activations' zero point); a grouped one keeps its
    // float form.
    let cases = [
        // 3×3 stride 1 with enough tiles and channels, a ReLU after it.
        (
            11,
            conv(1, 61, 67, 26, 3, 1, 1, 1),
            DType::I8,
            false,
            true,
            (0, 1),
        ),
        (
            12,
            conv(1, 61, 67, 26, 3, 1, 1, 1),
            DType::U8,
            true,
            true,
            (0, 1),
        ),
        (
            17,
            conv(3, 61, 67, 26, 3, 1, 1, 1),
            DType::I8,
            true,
            false,
            (0, 1),
        ),
        // Few channels, 7×7 stride 2, a batch of 2.
        (
            13,
            conv(2, 3, 21, 37, 7, 2, 3, 1),
            DType::I8,
            true,
            true,
            (0, 1),
        ),
        // 3×3 stride 2 with more channels.
        (
            14,
            conv(1, 70, 81, 15, 3, 2, 1, 1),
            DType::U8,
            false,
            false,
            (0, 1),
        ),
        // Pointwise, a batch of 3.
        (
            15,
            conv(3, 45, 99, 9, 1, 1, 0, 1),
            DType::I8,
            true,
            false,
            (0, 1),
        ),
        // Grouped: the float product batched over the groups.
        (
            18,
            conv(2, 24, 30, 11, 3, 1, 1, 3),
            DType::I8,
            true,
            true,
            (1, 0),
        ),
        // Depthwise 3×3: no product.
        (
            16,
            conv(1, 37, 37, 19, 3, 1, 1, 37),
            DType::U8,
            true,
            true,
            (0, 0),
        ),
    ];
    for (seed, p, act, per_channel, relu, products) in cases {
        let got = check(seed, p, act, per_channel, relu);
        assert_eq!(
            got, products,
            "{p:?}, relu {relu}: anchored products (float, 8-bit)"
        );
    }
}

#[test]
fn qdq_matmul_and_gemm_are_8_bit_products_that_match_the_reference_within_one_step() {
    let (mm, gemm) = (
        |batch, m, k, n| Product::MatMul { batch, m, k, n },
        |m, k, n| Product::Gemm { m, k, n },
    );
    let cases = [
        (21, mm(1, 7, 131, 45), DType::I8, true, true),
        (22, mm(1, 33, 77, 19), DType::U8, false, false),
        // A batch of sequences, as a transformer's projections.
        (25, mm(3, 13, 96, 50), DType::U8, true, false),
        (23, gemm(1, 259, 101), DType::I8, true, false),
        (24, gemm(9, 64, 37), DType::U8, false, true),
    ];
    for (seed, p, act, per_channel, relu) in cases {
        assert_eq!(check(seed, p, act, per_channel, relu), (0, 1), "{p:?}");
    }
}
