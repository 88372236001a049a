//! Products by 4-bit block-quantized weights (`hidet::DequantizeBlocks`, what ONNX Runtime's
//! `MatMulNBits` expands to) compiled through the CPU passes run as `hidet::Int4Linear`, reading
//! the blocks as stored, and agree with the reference executor (the weights decoded, then a
//! float product). Shapes are not multiples of the panel width, the block size or the row
//! chunk: partial last blocks, a block longer than the depth, more rows than one chunk, an
//! activation of rank 3, a fused bias and ReLU; on an AVX-512 host both the 8-lane and the
//! 16-lane kernels run.

use crate::common;

use std::sync::Arc;

use common::{codegen_targets, cpu_backend_for, node, runs_here, Rng};
use hidet_cpu::graph_backend::KernelOrigin;
use hidet_cpu::graph_passes::default_passes;
use hidet_graph::compiled::{CompileOptions, CompiledGraph};
use hidet_graph::passes::run_passes;
use hidet_graph::{
    run_reference, Attribute, Attributes, DType, GraphBuilder, NodeSpec, Registry, Tensor,
    TensorType,
};

/// One product: `A` of `a_shape` (last axis `k`) times `k × n` weights in blocks of `block`,
/// by `hidet::DequantizeBlocks` (`qdq: None`) or by a blocked `DequantizeLinear` of `int4`
/// (`Some(true)`) or `uint4` (`Some(false)`) weights with zero points.
#[derive(Clone, Copy, Debug)]
struct Case {
    a_shape: &'static [usize],
    n: usize,
    block: usize,
    bias_relu: bool,
    qdq: Option<bool>,
}

fn dequantize_node(k: usize, block: usize) -> NodeSpec {
    let mut attrs = Attributes::new();
    attrs.insert("k", Attribute::Int(k as i64));
    attrs.insert("bits", Attribute::Int(4));
    attrs.insert("block_size", Attribute::Int(block as i64));
    NodeSpec {
        name: "dequantize".into(),
        domain: "hidet".into(),
        op_type: "DequantizeBlocks".into(),
        opset: 1,
        attrs,
        inputs: vec!["q".into(), "scales".into(), "zeros".into()],
        outputs: vec!["w".into()],
    }
}

fn check(seed: u64, case: Case) {
    let mut rng = Rng::new(seed);
    let k = *case.a_shape.last().unwrap();
    let (n, block) = (case.n, case.block);
    let blocks = k.div_ceil(block);
    let blob = block / 2;
    let q: Vec<u8> = (0..n * blocks * blob)
        .map(|_| rng.next_u64() as u8)
        .collect();
    let scales: Vec<f32> = (0..n * blocks).map(|_| 0.1 * rng.nonzero_f32()).collect();
    let zeros: Vec<f32> = (0..n * blocks)
        .map(|_| (rng.next_u64() % 16) as f32)
        .collect();
    let a_len: usize = case.a_shape.iter().product();
    let a = Tensor::new(case.a_shape.to_vec(), rng.vec_f32(a_len)).unwrap();

    let mut g = GraphBuilder::new("int4_product");
    g.input("a", TensorType::fixed(DType::F32, case.a_shape));
    match case.qdq {
        None => {
            g.initializer("q", Tensor::new(vec![n, blocks, blob], q).unwrap());
            g.initializer("scales", Tensor::new(vec![n, blocks], scales).unwrap());
            g.initializer("zeros", Tensor::new(vec![n, blocks], zeros).unwrap());
            g.node(dequantize_node(k, block));
        }
        Some(signed) => {
            let (dtype, offset) = if signed {
                (DType::I4, 8)
            } else {
                (DType::U4, 0)
            };
            let int4 = |values: Vec<i64>, shape: Vec<usize>| {
                let shifted = values.into_iter().map(|v| v - offset).collect();
                Tensor::new(shape, shifted).unwrap().cast(dtype)
            };
            let x = (0..k * n).map(|_| (rng.next_u64() % 16) as i64).collect();
            let z = zeros.iter().map(|&v| v as i64).collect();
            g.initializer("x", int4(x, vec![k, n]));
            g.initializer("scale", Tensor::new(vec![blocks, n], scales).unwrap());
            g.initializer("zero", int4(z, vec![blocks, n]));
            let mut attrs = Attributes::new();
            attrs.insert("axis", Attribute::Int(0));
            attrs.insert("block_size", Attribute::Int(block as i64));
            let mut dq = node("DequantizeLinear", &["x", "scale", "zero"], "w", attrs);
            dq.opset = 21;
            g.node(dq);
        }
    }
    if case.bias_relu {
        g.initializer("bias", Tensor::new(vec![n], rng.vec_f32(n)).unwrap());
        g.node(node("MatMul", &["a", "w"], "product", Attributes::new()));
        g.node(node("Add", &["product", "bias"], "sum", Attributes::new()));
        g.node(node("Relu", &["sum"], "y", Attributes::new()));
    } else {
        g.node(node("MatMul", &["a", "w"], "y", Attributes::new()));
    }
    g.output("y");
    let graph = g.build(Registry::global()).unwrap();
    let inputs = vec![("a".to_string(), a)];
    let want = run_reference(&graph, &inputs).unwrap()[0].1.to_f64_vec();

    let rewritten = run_passes(graph, &default_passes()).unwrap();
    let ops: Vec<&str> = rewritten
        .nodes()
        .iter()
        .map(|n| n.op_type.as_str())
        .collect();
    assert!(
        ops.contains(&"Int4Linear")
            && !ops.contains(&"DequantizeBlocks")
            && !ops.contains(&"DequantizeLinear"),
        "{case:?}: the product is not read as stored: {ops:?}"
    );
    for target in codegen_targets().iter().filter(|t| runs_here(t)) {
        let dir = tempfile::tempdir().unwrap();
        let compiled = CompiledGraph::compile(
            &rewritten,
            &[case.a_shape.to_vec()],
            Arc::new(cpu_backend_for(dir.path(), true, target)),
            &CompileOptions::default(),
        )
        .unwrap();
        let report = compiled.report();
        assert_eq!(report.host_nodes(), 0, "{case:?}");
        // One kernel: the template, with the bias and ReLU (and the reshapes) fused in.
        assert!(
            report.refusals.is_empty(),
            "{case:?}: {:?}",
            report.refusals
        );
        assert_eq!(report.kernels, 1, "{case:?}: {}", report.partition);
        let origins = compiled.module().origins();
        assert!(
            matches!(
                origins,
                [KernelOrigin::Template | KernelOrigin::FusedTemplate]
            ),
            "{case:?}: not the 4-bit template: {origins:?}"
        );
        let got = compiled.run(&inputs).unwrap()[0].1.to_f64_vec();
        assert_eq!(got.len(), want.len(), "{case:?}");
        let scale = want.iter().fold(0f64, |m, v| m.max(v.abs()));
        assert!(
            scale > 0.1,
            "{case:?}: outputs near zero, the check means little"
        );
        for (i, (g, w)) in got.iter().zip(&want).enumerate() {
            assert!(
                (g - w).abs() <= 1e-5 * scale + 1e-6,
                "{case:?} on {:?}: output {i}: {g} vs {w}",
                target.features
            );
        }
    }
}

#[test]
fn one_token_with_a_partial_last_block_and_ragged_columns() {
    let case = Case {
        a_shape: &[1, 200],
        n: 37,
        block: 32,
        bias_relu: false,
        qdq: None,
    };
    check(1, case);
}

#[test]
fn rows_of_a_rank_three_activation_with_bias_and_relu() {
    let case = Case {
        a_shape: &[2, 3, 96],
        n: 50,
        block: 16,
        bias_relu: true,
        qdq: None,
    };
    check(2, case);
}

#[test]
fn more_rows_than_one_chunk() {
    let case = Case {
        a_shape: &[70, 130],
        n: 33,
        block: 64,
        bias_relu: false,
        qdq: None,
    };
    check(3, case);
}

#[test]
fn blocks_longer_than_the_depth_and_the_longest_blocks() {
    for (seed, a_shape, block) in [(4, &[3usize, 64][..], 128), (5, &[1, 300][..], 256)] {
        let case = Case {
            a_shape,
            n: 20,
            block,
            bias_relu: false,
            qdq: None,
        };
        check(seed, case);
    }
}

#[test]
fn blocked_dequantize_linear_of_int4_and_uint4_weights() {
    for (seed, signed, a_shape) in [(6, true, &[3usize, 88][..]), (7, false, &[1, 1, 40][..])] {
        let case = Case {
            a_shape,
            n: 19,
            block: 16,
            bias_relu: signed,
            qdq: Some(signed),
        };
        check(seed, case);
    }
}
