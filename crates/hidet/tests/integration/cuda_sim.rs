//! The CUDA backend on the simulator device (`--device cuda-sim`): the small zoo models
//! compile to CUDA kernels, run in the GPU simulator (every block, with its checkers), and
//! match the reference executor; every kernel passes NVRTC when NVRTC is available.

use hidet::graph::compiled::CompileOptions;
use hidet::graph::{Graph, Tensor};
use hidet::onnx::OnnxModel;
use hidet::pipeline;
use hidet::zoo::{self, inputs::complete_inputs};
use hidet_cuda::graph_backend::{CudaBackendOptions, NvrtcCheck};

fn model_of(g: Graph) -> OnnxModel {
    OnnxModel {
        graph: g,
        ir_version: 8,
        opsets: vec![(String::new(), 17)],
        producer: "test".into(),
    }
}

/// Largest |got - want| relative to max |want|, after checking names and shapes.
fn relative_error(got: &[(String, Tensor)], want: &[(String, Tensor)]) -> f64 {
    assert_eq!(got.len(), want.len());
    let mut worst = 0f64;
    for ((gn, g), (wn, w)) in got.iter().zip(want) {
        assert_eq!(gn, wn);
        assert_eq!(g.shape(), w.shape(), "{gn}");
        let (g, w) = (g.to_f64_vec(), w.to_f64_vec());
        let scale = w.iter().fold(0f64, |m, x| m.max(x.abs()));
        assert!(scale > 1e-3, "{gn} is (nearly) all zeros");
        let diff = g.iter().zip(&w).fold(0f64, |m, (a, b)| {
            if a.is_nan() != b.is_nan() {
                f64::INFINITY
            } else {
                m.max((a - b).abs())
            }
        });
        worst = worst.max(diff / scale);
    }
    worst
}

fn nvrtc_available() -> bool {
    let found = hidet_cuda::Nvrtc::global().is_ok();
    if !found {
        eprintln!("NVRTC not found: kernels are simulated but not compiled to PTX");
    }
    found
}

#[test]
fn small_models_run_in_the_simulator_and_match_the_reference() {
    let nvrtc = nvrtc_available();
    for name in ["tiny_cnn", "tiny_mlp", "tiny_bert", "tiny_gpt2"] {
        let start = std::time::Instant::now();
        let model = model_of(zoo::build(name).unwrap());
        let inputs: Vec<(String, Tensor)> = complete_inputs(&model.graph, &[], 7)
            .unwrap()
            .into_iter()
            .map(|(n, t, _)| (n, t))
            .collect();
        let want = pipeline::run_reference(&model, &inputs).unwrap();
        let options = CudaBackendOptions {
            nvrtc: if nvrtc {
                NvrtcCheck::Required
            } else {
                NvrtcCheck::Off
            },
            ptxas: nvrtc,
            // Every elementwise task whose layout allows it vectorized, however small.
            min_vector_threads: Some(0),
            ..CudaBackendOptions::default()
        };
        let compiled = pipeline::compile_sim(&model, CompileOptions::default(), options);
        let shapes: Vec<Vec<usize>> = inputs.iter().map(|(_, t)| t.shape().to_vec()).collect();
        let graph = compiled.compiled(&shapes).unwrap();
        let report = graph.report();
        assert!(report.kernels > 0, "{name}: no kernels");
        assert_eq!(
            graph.module().ptx_compiled(),
            nvrtc,
            "{name}: every kernel went through NVRTC"
        );
        let spilling: Vec<String> = graph
            .module()
            .ptxas_reports()
            .iter()
            .flat_map(|(_, r)| r.spilling().map(|k| k.name.clone()))
            .collect();
        let rowwise = graph
            .module()
            .origins()
            .iter()
            .filter(|o| {
                **o == hidet_cuda::graph_backend::KernelOrigin::Scheduler(
                    hidet_cuda::schedule::ScheduleKind::Rowwise,
                )
            })
            .count();
        let template = graph
            .module()
            .origins()
            .iter()
            .filter(|o| {
                matches!(
                    o,
                    hidet_cuda::graph_backend::KernelOrigin::Template
                        | hidet_cuda::graph_backend::KernelOrigin::FusedTemplate
                )
            })
            .count();
        let fused_template = graph
            .module()
            .origins()
            .iter()
            .filter(|o| **o == hidet_cuda::graph_backend::KernelOrigin::FusedTemplate)
            .count();
        if name == "tiny_mlp" {
            assert!(
                fused_template > 0,
                "{name}: no matmul with its bias and activation fused into the SIMT template"
            );
        }
        if name == "tiny_bert" || name == "tiny_gpt2" {
            assert!(
                rowwise > 0,
                "{name}: no kernel was scheduled one warp per row"
            );
        }
        let got = pipeline::run(&compiled, &inputs).unwrap();
        let err = relative_error(&got, &want);
        eprintln!(
            "{name}: {} kernels ({rowwise} one warp per row, {template} SIMT matmul template, {fused_template} of them fused), {} host steps, relative error {err:.2e}, {} ptxas reports, spilling: {spilling:?}, {:.1} s",
            report.kernels,
            report.host_nodes(),
            graph.module().ptxas_reports().len(),
            start.elapsed().as_secs_f64()
        );
        assert!(err <= 1e-4, "{name}: relative error {err}");
    }
}

/// Odd shapes on the simulated GPU: a 3×3 stride-2 padded convolution with bias and ReLU at
/// batch 3 and 2 groups (an implicit GEMM in the SIMT template: im2col prologue, bias and
/// ReLU epilogue, one batch entry per group), a 97×130 by 61 `Gemm` with bias and ReLU (the
/// SIMT template with a fused epilogue, partial tiles on both axes), and softmax and layer
/// normalization over rows of 130 (one warp per row, lanes past the row's end idle).
#[test]
fn odd_shapes_match_the_reference() {
    use hidet::graph::DType;
    use hidet::zoo::net::{ConvSpec, Net};
    let mut net = Net::new("odd", 11);
    let x = net.input("x", DType::F32, &[3, 4, 9, 11]);
    let conv = net
        .conv("conv", &x, 4, ConvSpec::square(16, 3, 2, 1).grouped(2), 1.0)
        .unwrap();
    let conv = net.relu(&conv);
    let a = net.input("a", DType::F32, &[97, 61]);
    let g = net.gemm("fc", &a, 61, 130, true, 1.0).unwrap();
    let g = net.relu(&g);
    let s = net.softmax("softmax", &g);
    let l = net.layer_norm("ln", &g, 130, 1e-5).unwrap();
    let graph = net.finish("odd", &[&conv, &g, &s, &l]).unwrap();
    let model = model_of(graph);
    let inputs: Vec<(String, Tensor)> = complete_inputs(&model.graph, &[], 3)
        .unwrap()
        .into_iter()
        .map(|(n, t, _)| (n, t))
        .collect();
    let want = pipeline::run_reference(&model, &inputs).unwrap();
    let compiled = pipeline::compile_sim(
        &model,
        CompileOptions::default(),
        CudaBackendOptions::default(),
    );
    let shapes: Vec<Vec<usize>> = inputs.iter().map(|(_, t)| t.shape().to_vec()).collect();
    let origins = compiled
        .compiled(&shapes)
        .unwrap()
        .module()
        .origins()
        .to_vec();
    use hidet_cuda::graph_backend::KernelOrigin;
    use hidet_cuda::schedule::ScheduleKind;
    let fused = origins
        .iter()
        .filter(|o| **o == KernelOrigin::FusedTemplate)
        .count();
    assert!(
        fused >= 2,
        "the convolution (implicit GEMM) and the Gemm use the template: {origins:?}"
    );
    assert!(
        origins.contains(&KernelOrigin::Scheduler(ScheduleKind::Rowwise)),
        "softmax or layer norm is one warp per row: {origins:?}"
    );
    let got = pipeline::run(&compiled, &inputs).unwrap();
    let err = relative_error(&got, &want);
    assert!(err <= 1e-4, "relative error {err}");
}

/// Parallel-k on the simulated GPU: products whose output tiles are far fewer than the SMs
/// and whose reduction is long split it (`CudaModule::parallel_k`): a 6×20 by 600 `Gemm`
/// with bias and ReLU (the epilogue on the reduction kernel) and a grouped 3×3 padded
/// convolution with 288 reduction elements per group, bias and ReLU (im2col on the partial
/// products). Outputs match the reference executor, and match the same model compiled
/// without parallel-k.
#[test]
fn parallel_k_matches_the_reference_and_the_unsplit_kernels() {
    use hidet::graph::DType;
    use hidet::zoo::net::{ConvSpec, Net};
    let mut net = Net::new("split_k", 5);
    let a = net.input("a", DType::F32, &[6, 600]);
    let g = net.gemm("fc", &a, 600, 20, true, 1.0).unwrap();
    let g = net.relu(&g);
    let x = net.input("x", DType::F32, &[2, 64, 5, 5]);
    let conv = net
        .conv(
            "conv",
            &x,
            64,
            ConvSpec::square(16, 3, 1, 1).grouped(2),
            1.0,
        )
        .unwrap();
    let conv = net.relu(&conv);
    let graph = net.finish("split_k", &[&g, &conv]).unwrap();
    let model = model_of(graph);
    let inputs: Vec<(String, Tensor)> = complete_inputs(&model.graph, &[], 5)
        .unwrap()
        .into_iter()
        .map(|(n, t, _)| (n, t))
        .collect();
    let shapes: Vec<Vec<usize>> = inputs.iter().map(|(_, t)| t.shape().to_vec()).collect();
    let want = pipeline::run_reference(&model, &inputs).unwrap();
    let mut outputs = Vec::new();
    for parallel_k in [true, false] {
        let options = CudaBackendOptions {
            parallel_k,
            ..CudaBackendOptions::default()
        };
        let compiled = pipeline::compile_sim(&model, CompileOptions::default(), options);
        let graph = compiled.compiled(&shapes).unwrap();
        let split: Vec<i64> = graph
            .module()
            .parallel_k()
            .iter()
            .flatten()
            .copied()
            .collect();
        if parallel_k {
            assert_eq!(
                split.len(),
                2,
                "the Gemm and the convolution split k: {split:?}"
            );
            assert!(graph.module().workspace_bytes() > 0);
        } else {
            assert!(split.is_empty());
        }
        let got = pipeline::run(&compiled, &inputs).unwrap();
        let err = relative_error(&got, &want);
        assert!(err <= 1e-4, "parallel-k {parallel_k}: relative error {err}");
        outputs.push(got);
    }
    let err = relative_error(&outputs[0], &outputs[1]);
    assert!(err <= 1e-5, "with and without parallel-k: {err}");
}

/// CUDA graphs through the device trait, on the simulator device: with
/// `CudaBackendOptions::cuda_graphs`, the first run of a compiled graph captures its
/// launches once (the parallel-k Gemm's two kernels included) and every run replays the
/// graph; a profiled run launches kernel by kernel; outputs equal those of a backend without
/// graphs, which never captures.
#[test]
fn runs_capture_one_graph_and_replay_it() {
    use hidet::graph::compiled::CompiledModel;
    use hidet::graph::DType;
    use hidet::zoo::net::Net;
    use hidet_cuda::graph_backend::CudaBackend;
    use hidet_cuda::sim_device::{SimDevice, SimDeviceOptions};
    use std::sync::Arc;
    let mut net = Net::new("graphs", 3);
    let a = net.input("a", DType::F32, &[3, 520]);
    let g = net.gemm("fc", &a, 520, 24, true, 1.0).unwrap();
    let g = net.relu(&g);
    let h = net.gemm("fc2", &g, 24, 10, true, 1.0).unwrap();
    let s = net.softmax("softmax", &h);
    let model = model_of(net.finish("graphs", &[&s]).unwrap());
    let mut outputs = Vec::new();
    for cuda_graphs in [true, false] {
        let device = Arc::new(SimDevice::new(SimDeviceOptions::default()));
        let options = CudaBackendOptions {
            cuda_graphs,
            ..CudaBackendOptions::default()
        };
        let compiled = CompiledModel::new(
            model.graph.clone(),
            CudaBackend::new(device.clone(), options),
            CompileOptions::default(),
        );
        let mut runs = Vec::new();
        for seed in [1, 2, 3] {
            let inputs: Vec<(String, Tensor)> = complete_inputs(&model.graph, &[], seed)
                .unwrap()
                .into_iter()
                .map(|(n, t, _)| (n, t))
                .collect();
            let want = pipeline::run_reference(&model, &inputs).unwrap();
            let got = compiled.run(&inputs).unwrap();
            assert!(relative_error(&got, &want) <= 1e-4, "graphs {cuda_graphs}");
            runs.push(got);
        }
        let shapes = vec![vec![3, 520]];
        let graph = compiled.compiled(&shapes).unwrap();
        assert!(graph.module().parallel_k().iter().any(Option::is_some));
        let inputs: Vec<(String, Tensor)> = complete_inputs(&model.graph, &[], 1)
            .unwrap()
            .into_iter()
            .map(|(n, t, _)| (n, t))
            .collect();
        let (profiled, _) = graph.run_profiled(&inputs).unwrap();
        assert!(relative_error(&profiled, &runs[0]) <= 1e-6);
        if cuda_graphs {
            assert_eq!(device.graph_counts(), (1, 3), "one capture, three replays");
            assert_eq!(graph.module().graph_counts(), (1, 3));
        } else {
            assert_eq!(device.graph_counts(), (0, 0));
        }
        outputs.push(runs);
    }
    for (with, without) in outputs[0].iter().zip(&outputs[1]) {
        assert!(relative_error(with, without) <= 1e-6);
    }
}

/// A normalization whose statistics an epilogue reads through a reshape (GroupNorm's
/// instance normalization over `[N, G, C/G·H·W]`, then the per-channel scale on `[N, C, H,
/// W]`) would re-run its 4096-element reductions in every output's thread under the
/// elementwise schedule; the backend refuses that fusion, so the normalization runs a row at
/// a time and the scale is a kernel of its own. The result matches the reference.
#[test]
fn long_reductions_are_not_left_to_the_elementwise_schedule() {
    use hidet::graph::{Attributes, DType, GraphBuilder, NodeSpec, Registry, TensorType};
    let node = |op: &str, inputs: &[&str], output: &str| NodeSpec {
        name: output.to_string(),
        domain: String::new(),
        op_type: op.into(),
        opset: 17,
        attrs: Attributes::new(),
        inputs: inputs.iter().map(|s| s.to_string()).collect(),
        outputs: vec![output.to_string()],
    };
    let values = |n: usize, seed: u32| -> Vec<f32> {
        (0..n)
            .map(|i| {
                ((i as u32).wrapping_mul(2654435761).wrapping_add(seed) % 1000) as f32 / 500.0 - 0.9
            })
            .collect()
    };
    let mut b = GraphBuilder::new("group_norm");
    b.input("x", TensorType::fixed(DType::F32, &[1, 2, 4096]));
    b.initializer("gamma", Tensor::new(vec![2], values(2, 1)).unwrap());
    b.initializer("beta", Tensor::new(vec![2], values(2, 2)).unwrap());
    b.initializer(
        "shape",
        Tensor::new(vec![4], vec![1i64, 4, 32, 64]).unwrap(),
    );
    b.initializer(
        "scale",
        Tensor::new(vec![1, 4, 1, 1], values(4, 3)).unwrap(),
    );
    b.node(node("InstanceNormalization", &["x", "gamma", "beta"], "n"));
    b.node(node("Reshape", &["n", "shape"], "r"));
    b.node(node("Mul", &["r", "scale"], "y"));
    b.output("y");
    let model = model_of(b.build(Registry::global()).unwrap());
    let inputs = vec![(
        "x".to_string(),
        Tensor::new(vec![1, 2, 4096], values(8192, 4)).unwrap(),
    )];
    let want = pipeline::run_reference(&model, &inputs).unwrap();
    let compiled = pipeline::compile_sim(
        &model,
        CompileOptions::default(),
        CudaBackendOptions::default(),
    );
    let graph = compiled.compiled(&[vec![1, 2, 4096]]).unwrap();
    let report = graph.report();
    assert!(
        report
            .refusals
            .iter()
            .any(|r| r.contains("re-run a reduction")),
        "{:?}",
        report.refusals
    );
    use hidet_cuda::graph_backend::KernelOrigin;
    use hidet_cuda::schedule::ScheduleKind;
    assert!(graph
        .module()
        .origins()
        .contains(&KernelOrigin::Scheduler(ScheduleKind::Rowwise)));
    let got = pipeline::run(&compiled, &inputs).unwrap();
    let err = relative_error(&got, &want);
    assert!(err <= 1e-4, "relative error {err}");
}

/// A model with a symbolic batch on the simulated GPU: each batch compiles its own graph, and
/// the later ones read the weights from the arena the first one uploaded (a third device
/// allocation beside the graph's own constants and its run arena).
#[test]
fn symbolic_batches_share_the_uploaded_weights() {
    use hidet::graph::{Attributes, DType, Dim, GraphBuilder, NodeSpec, Registry, TensorType};
    use std::sync::Arc;
    let mut rng = 0x2545_f491_4f6c_dd1du64;
    let mut random = |shape: &[usize]| {
        let n = shape.iter().product();
        let data: Vec<f32> = (0..n)
            .map(|_| {
                rng ^= rng << 13;
                rng ^= rng >> 7;
                rng ^= rng << 17;
                (rng >> 40) as f32 / (1u64 << 24) as f32 - 0.5
            })
            .collect();
        Tensor::new(shape.to_vec(), data).unwrap()
    };
    let mut g = GraphBuilder::new("sym_dense");
    let batch = Dim::Symbol(Arc::from("B"));
    g.input(
        "x",
        TensorType {
            dtype: DType::F32,
            shape: Some(vec![batch, Dim::Fixed(72)]),
        },
    );
    g.initializer("w", random(&[72, 80]));
    g.initializer("b", random(&[80]));
    let node = |op: &str, inputs: &[&str], output: &str| NodeSpec {
        name: output.to_string(),
        op_type: op.to_string(),
        domain: String::new(),
        inputs: inputs.iter().map(|s| s.to_string()).collect(),
        outputs: vec![output.to_string()],
        attrs: Attributes::new(),
        opset: 17,
    };
    g.node(node("MatMul", &["x", "w"], "xw"));
    g.node(node("Add", &["xw", "b"], "y"));
    g.output("y");
    let model = model_of(g.build(Registry::global()).unwrap());
    let compiled = pipeline::compile_sim(
        &model,
        CompileOptions::default(),
        CudaBackendOptions::default(),
    );
    for rows in [5usize, 9, 5] {
        let inputs = vec![("x".to_string(), random(&[rows, 72]))];
        let want = pipeline::run_reference(&model, &inputs).unwrap();
        let got = pipeline::run(&compiled, &inputs).unwrap();
        let err = relative_error(&got, &want);
        assert!(err <= 1e-4, "batch {rows}: relative error {err}");
        let report = compiled
            .compiled(&[vec![rows, 72]])
            .unwrap()
            .report()
            .clone();
        assert!(
            report.shared_constant_bytes >= 72 * 80 * 4,
            "batch {rows}: own {} bytes, shared {}",
            report.constant_bytes,
            report.shared_constant_bytes
        );
        // Device memory: every constant is uploaded, none read where the host holds it.
        assert_eq!(report.held_constant_bytes, 0);
    }
}
