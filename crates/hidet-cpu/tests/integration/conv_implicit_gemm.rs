//! Convolution as implicit GEMM, end to end on the CPU: after the default passes, a
//! conv-bias-relu-add block is ONE kernel — the matmul template with the im2col gather fused
//! into the packing of its right operand (a prologue) and the bias, reshape, ReLU and residual
//! add fused into its stores (epilogues) — and it computes what the reference executor and
//! direct float64 loops compute. Convolutions with few output channels and short windows run
//! as direct convolutions (pixels as rows, nothing packed); padded ones read a padded copy of
//! their input made by a kernel of its own.

use crate::common;

use std::sync::Arc;

use common::{codegen_targets, cpu_backend, cpu_backend_for, node, random, runs_here, Rng};
use hidet_cpu::graph_backend::CpuBackend;
use hidet_cpu::graph_passes::default_passes;
use hidet_cpu::CpuTarget;
use hidet_graph::compiled::{CompileOptions, CompiledGraph};
use hidet_graph::passes::run_passes;
use hidet_graph::{
    run_reference, Attribute, Attributes, DType, Graph, GraphBuilder, Registry, Tensor, TensorType,
};

/// A square 2-D convolution's window.
#[derive(Clone, Copy)]
struct Window {
    kernel: usize,
    stride: usize,
    pad: usize,
}

impl Window {
    fn out(&self, size: usize) -> usize {
        (size + 2 * self.pad - self.kernel) / self.stride + 1
    }
}

/// `y = relu(conv(x, w) + b) + r` for `x` `[1, c, hw, hw]` and `oc` output channels.
struct Block {
    graph: Graph,
    x: Tensor,
    r: Tensor,
    w: Tensor,
    b: Tensor,
    win: Window,
}

fn block(rng: &mut Rng, c: usize, hw: usize, oc: usize, win: Window) -> Block {
    let o = win.out(hw);
    let w = random(rng, &[oc, c, win.kernel, win.kernel]);
    let b = random(rng, &[oc]);
    let mut g = GraphBuilder::new("conv_block");
    g.input("x", TensorType::fixed(DType::F32, &[1, c, hw, hw]));
    g.input("r", TensorType::fixed(DType::F32, &[1, oc, o, o]));
    g.initializer("w", w.clone());
    g.initializer("b", b.clone());
    let s = win.stride as i64;
    let p = win.pad as i64;
    let mut attrs = Attributes::new();
    attrs.insert("strides", Attribute::Ints(vec![s, s]));
    attrs.insert("pads", Attribute::Ints(vec![p, p, p, p]));
    g.node(node("Conv", &["x", "w", "b"], "conv", attrs));
    g.node(node("Relu", &["conv"], "act", Attributes::new()));
    g.node(node("Add", &["act", "r"], "y", Attributes::new()));
    g.output("y");
    Block {
        graph: g.build(Registry::global()).unwrap(),
        x: random(rng, &[1, c, hw, hw]),
        r: random(rng, &[1, oc, o, o]),
        w,
        b,
        win,
    }
}

/// Direct float64 loops of the block.
fn block_f64(bl: &Block) -> Vec<f64> {
    let (xs, ws) = (bl.x.shape(), bl.w.shape());
    let (c, hw, oc, k) = (xs[1], xs[2], ws[0], ws[2]);
    let o = bl.win.out(hw);
    let (x, w, b, r) = (
        bl.x.to_f64_vec(),
        bl.w.to_f64_vec(),
        bl.b.to_f64_vec(),
        bl.r.to_f64_vec(),
    );
    let mut y = vec![0f64; oc * o * o];
    for m in 0..oc {
        for i in 0..o {
            for j in 0..o {
                let mut acc = b[m];
                for ci in 0..c {
                    for a in 0..k {
                        for bb in 0..k {
                            let hi = (i * bl.win.stride + a) as i64 - bl.win.pad as i64;
                            let wi = (j * bl.win.stride + bb) as i64 - bl.win.pad as i64;
                            if hi < 0 || wi < 0 || hi >= hw as i64 || wi >= hw as i64 {
                                continue;
                            }
                            acc += x[(ci * hw + hi as usize) * hw + wi as usize]
                                * w[((m * c + ci) * k + a) * k + bb];
                        }
                    }
                }
                let at = (m * o + i) * o + j;
                y[at] = acc.max(0.0) + r[at];
            }
        }
    }
    y
}

fn assert_close(got: &Tensor, want: &[f64], what: &str) {
    let got = got.to_f64_vec();
    assert_eq!(got.len(), want.len(), "{what}: length");
    assert!(want.iter().any(|v| *v != 0.0), "{what}: all-zero reference");
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        assert!(
            (g - w).abs() <= 1e-4 + 1e-4 * w.abs(),
            "{what}[{i}]: {g} vs {w}"
        );
    }
}

/// How the product reads the image.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Gather {
    /// The input itself (a pointwise convolution): no gather.
    None,
    /// `hidet::Im2Col`, packed by the matrix product.
    Im2Col,
    /// `hidet::OffsetGather`, a direct convolution: the product broadcasts the pixels where
    /// they are, with nothing packed.
    Direct,
}

/// What [`check`] saw of the fused kernel.
struct Checked {
    /// The `f32` lanes of the target the sources are for.
    lanes: u16,
    /// The partition's line of the kernel's epilogues.
    epilogues: String,
    /// The C sources of every kernel.
    source: String,
}

/// Compiles the block after the default passes for every target of [`codegen_targets`];
/// checks one fused template kernel with the `gather` as a prologue, and the outputs where
/// the target runs here.
fn check(seed: u64, c: usize, hw: usize, oc: usize, win: Window, gather: Gather) -> Vec<Checked> {
    check_kernels(seed, c, hw, oc, win, gather, 1)
}

/// [`check`], expecting `kernels` kernels (a direct convolution's padded input is one more).
fn check_kernels(
    seed: u64,
    c: usize,
    hw: usize,
    oc: usize,
    win: Window,
    gather: Gather,
    kernels: usize,
) -> Vec<Checked> {
    let mut rng = Rng::new(seed);
    let bl = block(&mut rng, c, hw, oc, win);
    let want = block_f64(&bl);
    let inputs = vec![
        ("x".to_string(), bl.x.clone()),
        ("r".to_string(), bl.r.clone()),
    ];
    let reference = run_reference(&bl.graph, &inputs).unwrap();
    assert_close(&reference[0].1, &want, "reference");
    let graph = run_passes(bl.graph.clone(), &default_passes()).unwrap();
    let o = win.out(hw);
    let mut checked = Vec::new();
    for target in codegen_targets() {
        let (compiled, source) =
            compile_for(&target, &graph, &[vec![1, c, hw, hw], vec![1, oc, o, o]]);
        let report = compiled.report();
        assert_eq!(report.kernels, kernels, "{}", report.partition);
        assert_eq!(report.host_nodes(), 0, "{}", report.partition);
        assert!(report.refusals.is_empty(), "{:?}", report.refusals);
        let dump = &report.partition;
        assert!(dump.contains("[anchored] MatMul"), "{dump}");
        let prologue_line = dump.lines().find(|l| l.contains("prologues:"));
        let reads = |op: &str| prologue_line.is_some_and(|l| l.contains(op));
        match gather {
            Gather::None => assert!(!reads("Im2Col") && !reads("OffsetGather"), "{dump}"),
            Gather::Im2Col => assert!(reads("Im2Col"), "{dump}"),
            Gather::Direct => assert!(reads("OffsetGather") && !reads("Im2Col"), "{dump}"),
        }
        let epilogues = dump
            .lines()
            .find(|l| l.contains("epilogues:"))
            .unwrap_or_default();
        for op in ["Add", "Reshape", "Relu"] {
            assert!(epilogues.contains(op), "{op} is not an epilogue:\n{dump}");
        }
        if runs_here(&target) {
            let out = compiled.run(&inputs).unwrap();
            assert_eq!(out[0].0, "y");
            assert_close(&out[0].1, &want, "compiled");
        } else {
            let error = compiled.run(&inputs).unwrap_err().to_string();
            assert!(error.contains(target.missing_here()[0]), "{error}");
        }
        checked.push(Checked {
            lanes: target.f32_lanes(),
            epilogues: epilogues.to_string(),
            source,
        });
    }
    checked
}

/// `graph` compiled for `target` and `shapes` into a private kernel cache, and the C
/// sources of its kernels, concatenated (never empty).
fn compile_for(
    target: &CpuTarget,
    graph: &Graph,
    shapes: &[Vec<usize>],
) -> (CompiledGraph<CpuBackend>, String) {
    let dir = tempfile::tempdir().unwrap();
    let sources = tempfile::tempdir().unwrap();
    let options = CompileOptions {
        emit_source_dir: Some(sources.path().to_path_buf()),
        ..CompileOptions::default()
    };
    let backend = Arc::new(cpu_backend_for(dir.path(), true, target));
    let compiled = CompiledGraph::compile(graph, shapes, backend, &options).unwrap();
    let mut source = String::new();
    for entry in std::fs::read_dir(sources.path()).unwrap() {
        source += &std::fs::read_to_string(entry.unwrap().path()).unwrap();
    }
    assert!(!source.is_empty(), "no kernel source was emitted");
    (compiled, source)
}

/// [`assert_direct`] on every target's source, and the stores transposed back channels-first.
fn assert_direct_transposed(checked: &[Checked]) {
    for c in checked {
        assert!(c.epilogues.contains("Transpose"), "{}", c.epilogues);
        assert_direct(&c.source, c.lanes);
    }
}

/// A padded 3×3 convolution block (37 channels, `K` = 333) is a direct convolution: one
/// kernel pads the input, one fused kernel broadcasts its pixels in place and stores the
/// product back channels-first with the bias, ReLU and residual add.
#[test]
fn padded_conv_bias_relu_add_is_a_pad_and_one_fused_direct_kernel() {
    for (seed, stride, oc) in [(11, 1, 19), (12, 2, 10)] {
        let win = Window {
            kernel: 3,
            stride,
            pad: 1,
        };
        assert_direct_transposed(&check_kernels(seed, 37, 17, oc, win, Gather::Direct, 2));
    }
}

#[test]
fn pointwise_conv_block_is_one_fused_matmul_kernel() {
    let win = Window {
        kernel: 1,
        stride: 1,
        pad: 0,
    };
    check(13, 13, 17, 7, win, Gather::None);
}

/// Unpadded windows read the image through `p / width`: the packing loops are cut at output
/// rows (`split_divided_loops`), 20 and 19 pixels wide, so that a pack crosses rows
/// mid-vector. (2×2 windows: rows too short for a direct convolution; 67 output channels:
/// more than a short direct one takes.)
#[test]
fn unpadded_convolutions_whose_packs_cross_output_rows() {
    for (seed, stride, hw) in [(14, 1, 21), (15, 2, 39)] {
        let win = Window {
            kernel: 2,
            stride,
            pad: 0,
        };
        for checked in check(seed, 5, hw, 67, win, Gather::Im2Col) {
            assert!(
                !checked.epilogues.contains("Transpose"),
                "{}",
                checked.epilogues
            );
        }
    }
}

/// The kernel of a direct convolution packs nothing, and its micro-kernel broadcasts the
/// input at an address made of two table reads, `in0[rows[i] + window[k]]`, with no division:
/// through a pointer per tile row declared before the loop (`in0_row = &in0[rows[i]]`, see
/// `hidet_ir::passes::hoist_gather_bases`) and read at `in0_row[window[k]]`.
fn assert_direct(source: &str, lanes: u16) {
    assert!(!source.contains("packed_a"), "{source}");
    let broadcast = format!("hidet_broadcast_f32x{lanes}(in0");
    let broadcasts: Vec<&str> = source.lines().filter(|l| l.contains(&broadcast)).collect();
    assert!(!broadcasts.is_empty(), "{source}");
    assert!(
        broadcasts
            .iter()
            .any(|l| l.contains(&format!("{broadcast}_row"))),
        "{source}"
    );
    let row_pointers = source.lines().filter(|l| l.contains("float* in0_row"));
    for line in broadcasts.iter().copied().chain(row_pointers) {
        let address = &line[line.find("in0").unwrap()..];
        let address = &address[..address.find("]) *").unwrap_or(address.len())];
        for division in [" / ", " % ", "floordiv", "floormod"] {
            assert!(!address.contains(division), "{address}");
        }
    }
}

/// Unpadded windows with few output channels run as direct convolutions: pixels as rows,
/// the im2col elements broadcast where they are in the input (nothing packed, addresses from
/// offset tables), the channels-last product transposed back in the stores. 19 and 17 output
/// pixels per row make register tiles that straddle output rows; 11 channels are not a whole
/// vector.
#[test]
fn unpadded_convolutions_with_few_channels_are_direct() {
    for (seed, stride, kernel, hw) in [(17, 1, 3, 21), (18, 2, 3, 39), (19, 2, 5, 38)] {
        let win = Window {
            kernel,
            stride,
            pad: 0,
        };
        assert_direct_transposed(&check(seed, 5, hw, 11, win, Gather::Direct));
    }
}

/// A direct convolution with more output channels than a register tile is wide (40: wider
/// than every AVX2 tile; 64, the most a direct convolution takes) still reads its gathered
/// pixels in place, once per column panel, each address one offset-table read: nothing is
/// packed, and the result is exact.
#[test]
fn direct_convolutions_wider_than_the_register_tile_read_pixels_in_place() {
    for (seed, stride, hw, oc) in [(22, 1, 23, 40), (23, 2, 29, 40), (24, 1, 13, 64)] {
        let win = Window {
            kernel: 3,
            stride,
            pad: 0,
        };
        assert_direct_transposed(&check(seed, 5, hw, oc, win, Gather::Direct));
    }
}

/// A padded convolution with few output channels and a short window (`C·∏k` = 5·9 = 45)
/// is direct too: its input is zero-padded once by a kernel of its own (a `Pad` hinted
/// `materialize`), which the product then reads without guards.
#[test]
fn padded_convolutions_with_short_windows_are_direct_over_a_padded_copy() {
    for (seed, stride, hw) in [(20, 1, 19), (21, 2, 23)] {
        let win = Window {
            kernel: 3,
            stride,
            pad: 1,
        };
        assert_direct_transposed(&check_kernels(seed, 5, hw, 11, win, Gather::Direct, 2));
    }
}

/// A 7×7 output makes the product transposed (pixels as rows, output channels as vector
/// lanes): the outer transpose is one more epilogue of the same kernel. With 2×2 windows
/// (rows too short for a direct convolution, 7×7 outputs, more than 64 output channels) the
/// gathered rows are packed; with
/// 3×3 windows, unpadded (a 9×9 input) or padded, the convolution is direct.
#[test]
fn a_conv_on_few_pixels_is_a_transposed_product_in_one_kernel() {
    let short = Window {
        kernel: 2,
        stride: 1,
        pad: 0,
    };
    for checked in check(14, 37, 8, 67, short, Gather::Im2Col) {
        assert!(
            checked.epilogues.contains("Transpose"),
            "{}",
            checked.epilogues
        );
    }
    let unpadded = Window {
        kernel: 3,
        stride: 1,
        pad: 0,
    };
    assert_direct_transposed(&check(15, 37, 9, 37, unpadded, Gather::Direct));
    let padded = Window {
        kernel: 3,
        stride: 1,
        pad: 1,
    };
    assert_direct_transposed(&check_kernels(16, 37, 7, 37, padded, Gather::Direct, 2));
}

/// `t` with every element replaced by its absolute value: run through a convolution, the
/// sum of the magnitudes of each output's terms, the scale of its rounding error.
fn absolute(t: &Tensor) -> Tensor {
    let v: Vec<f32> = t
        .as_slice::<f32>()
        .unwrap()
        .iter()
        .map(|x| x.abs())
        .collect();
    Tensor::new(t.shape().to_vec(), v).unwrap()
}

/// 3×3 stride-1 convolutions with enough channels and tiles run by Winograd's algorithm
/// (`hidet_cpu::graph_passes::ConvWinograd`): a padded copy of the input, three products (the
/// input transform reading the tiles through `hidet::OffsetGather`, the per-position
/// product, the output transform) and, when the tiles overhang the output, a cropping
/// kernel; the result matches float64 loops. Cases: `F(4×4)` over 7×7 tiles, exact (28²)
/// and cropped (25², and an unpadded 27² input); `F(2×2)` where `F(4×4)` has too few tiles
/// (14²: 16 tiles of 4, 49 of 2; 13², cropped), with 64 to 100 input channels. The
/// per-position product reads its weights as a batch of panels. Each output is within `1e-5`
/// of the sum of the magnitudes of its terms (Winograd's transforms round more than a dot
/// product does).
#[test]
fn winograd_convolutions_match_float64_loops() {
    for (seed, c, hw, oc, pad) in [
        (31, 64, 28, 72, 1),
        (32, 66, 25, 64, 1),
        (33, 64, 27, 70, 0),
        (34, 64, 14, 64, 1),
        (36, 100, 13, 70, 1),
        (37, 96, 24, 48, 1),
    ] {
        let what = format!("{c} → {oc} channels, {hw}², pad {pad}");
        let dir = tempfile::tempdir().unwrap();
        let mut rng = Rng::new(seed);
        let win = Window {
            kernel: 3,
            stride: 1,
            pad,
        };
        let bl = block(&mut rng, c, hw, oc, win);
        let want = block_f64(&bl);
        let magnitude = block_f64(&Block {
            graph: bl.graph.clone(),
            x: absolute(&bl.x),
            r: absolute(&bl.r),
            w: absolute(&bl.w),
            b: absolute(&bl.b),
            win,
        });
        let graph = run_passes(bl.graph.clone(), &default_passes()).unwrap();
        let ops: Vec<&str> = graph.nodes().iter().map(|n| n.op_type.as_str()).collect();
        assert!(!ops.contains(&"Conv"), "{what}: {ops:?}");
        assert_eq!(
            ops.iter().filter(|o| **o == "MatMul").count(),
            3,
            "{what}: {ops:?}"
        );
        assert!(ops.contains(&"OffsetGather"), "{what}: {ops:?}");
        let batched_panels = graph
            .nodes()
            .iter()
            .filter(|n| n.op_type == "ColumnPanels")
            .filter_map(|n| n.outputs.first().copied().flatten())
            .filter(|v| graph.value(*v).ty.shape.as_ref().map(Vec::len) == Some(3))
            .count();
        assert_eq!(batched_panels, 1, "{what}: {ops:?}");
        let o = win.out(hw);
        let compiled = CompiledGraph::compile(
            &graph,
            &[vec![1, c, hw, hw], vec![1, oc, o, o]],
            Arc::new(cpu_backend(dir.path(), true)),
            &CompileOptions::default(),
        )
        .unwrap();
        let report = compiled.report();
        assert_eq!(report.host_nodes(), 0, "{what}: {}", report.partition);
        assert!(report.refusals.is_empty(), "{what}: {:?}", report.refusals);
        let inputs = vec![("x".to_string(), bl.x), ("r".to_string(), bl.r)];
        let out = compiled.run(&inputs).unwrap();
        let got = out[0].1.to_f64_vec();
        assert_eq!(got.len(), want.len(), "{what}");
        for (i, ((g, w), m)) in got.iter().zip(&want).zip(&magnitude).enumerate() {
            assert!(
                (g - w).abs() <= 1e-5 * m,
                "{what}[{i}]: {g} vs {w} (terms {m})"
            );
        }
    }
}

/// A direct convolution whose input is computed by an element-wise operator that could be
/// inlined (here a `Relu` of the graph input) still reads its pixels in place: the
/// partition never inlines into `hidet::OffsetGather`, so the `Relu` is stored by a kernel of
/// its own and the product broadcasts from it (inlined, every gathered address would
/// recompute it and the product would pack the operand).
#[test]
fn a_direct_convolution_reads_a_computed_input_in_place() {
    let mut rng = Rng::new(35);
    let (c, hw, oc) = (5, 19, 11);
    let w = random(&mut rng, &[oc, c, 3, 3]);
    let mut g = GraphBuilder::new("relu_conv");
    g.input("x", TensorType::fixed(DType::F32, &[1, c, hw, hw]));
    g.initializer("w", w.clone());
    g.node(node("Relu", &["x"], "act", Attributes::new()));
    g.node(node("Conv", &["act", "w"], "y", Attributes::new()));
    g.output("y");
    let graph = g.build(Registry::global()).unwrap();
    let x = random(&mut rng, &[1, c, hw, hw]);
    let inputs = vec![("x".to_string(), x)];
    let want = run_reference(&graph, &inputs).unwrap();
    let want: Vec<f64> = want[0].1.to_f64_vec();
    let optimized = run_passes(graph, &default_passes()).unwrap();
    for target in codegen_targets() {
        let (compiled, source) = compile_for(&target, &optimized, &[vec![1, c, hw, hw]]);
        let report = compiled.report();
        assert_eq!(report.kernels, 2, "{}", report.partition);
        if runs_here(&target) {
            let out = compiled.run(&inputs).unwrap();
            assert_close(&out[0].1, &want, "relu then direct convolution");
        }
        assert_direct(&source, target.f32_lanes());
    }
}

/// Inception-V3's factorized windows, 1×7 and 7×1 at 17² with 64 channels, run by the
/// one-axis Winograd transform `F(4, 7)` (the tiles overhang the output: a crop) and
/// match the reference executor within `1e-5` of the sum of their terms' magnitudes (the
/// reference executor run on the absolute values).
#[test]
fn one_axis_winograd_convolutions_match_the_reference() {
    for (seed, kernel, pads) in [(36, [1i64, 7], [0i64, 3, 0, 3]), (37, [7, 1], [3, 0, 3, 0])] {
        let what = format!("{kernel:?}");
        let dir = tempfile::tempdir().unwrap();
        let mut rng = Rng::new(seed);
        let (c, hw, oc) = (64, 17, 64);
        let shape = [oc, c, kernel[0] as usize, kernel[1] as usize];
        let graph = |w: Tensor, b: Tensor| {
            let mut g = GraphBuilder::new("factorized");
            g.input("x", TensorType::fixed(DType::F32, &[1, c, hw, hw]));
            g.initializer("w", w);
            g.initializer("b", b);
            let mut attrs = Attributes::new();
            attrs.insert("pads", Attribute::Ints(pads.to_vec()));
            g.node(node("Conv", &["x", "w", "b"], "y", attrs));
            g.output("y");
            g.build(Registry::global()).unwrap()
        };
        let (w, b, x) = (
            random(&mut rng, &shape),
            random(&mut rng, &[oc]),
            random(&mut rng, &[1, c, hw, hw]),
        );
        let inputs = vec![("x".to_string(), x.clone())];
        let want = run_reference(&graph(w.clone(), b.clone()), &inputs).unwrap();
        let magnitude = run_reference(
            &graph(absolute(&w), absolute(&b)),
            &[("x".to_string(), absolute(&x))],
        )
        .unwrap();
        let optimized = run_passes(graph(w, b), &default_passes()).unwrap();
        let ops: Vec<&str> = optimized
            .nodes()
            .iter()
            .map(|n| n.op_type.as_str())
            .collect();
        assert!(!ops.contains(&"Conv"), "{what}: {ops:?}");
        assert_eq!(
            ops.iter().filter(|o| **o == "MatMul").count(),
            3,
            "{what}: {ops:?}"
        );
        let compiled = CompiledGraph::compile(
            &optimized,
            &[vec![1, c, hw, hw]],
            Arc::new(cpu_backend(dir.path(), true)),
            &CompileOptions::default(),
        )
        .unwrap();
        let out = compiled.run(&inputs).unwrap();
        let (got, want, magnitude) = (
            out[0].1.to_f64_vec(),
            want[0].1.to_f64_vec(),
            magnitude[0].1.to_f64_vec(),
        );
        assert_eq!(got.len(), want.len(), "{what}");
        for (i, ((g, w), m)) in got.iter().zip(&want).zip(&magnitude).enumerate() {
            assert!(
                (g - w).abs() <= 1e-5 * m,
                "{what}[{i}]: {g} vs {w} (terms {m})"
            );
        }
    }
}
