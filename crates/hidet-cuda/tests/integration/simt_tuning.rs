//! Tuning the SIMT matmul template (`hidet_cuda::tuning`) without a GPU: every level-1
//! candidate of odd-shaped tasks (sizes not multiples of any tile, a broadcast batch, a
//! grouped strided convolution with bias and ReLU fused) lowers to CUDA C; several, among them
//! parallel-k pairs, run through the tuning backend on the simulator device and match float64
//! references; the simulator refuses to time; records round-trip and are validated; and a
//! record in the tuning cache is what the graph backend compiles with. The level-1 candidates
//! of the fused convolution and of the parallel-k product compile with NVRTC and `ptxas` for
//! sm_90 (fails, never skips, without NVRTC and ptxas).

use crate::common;

use std::sync::Arc;

use hidet_cuda::device::GpuDevice;
use hidet_cuda::graph_backend::{kernel_image, CudaBackend, CudaBackendOptions};
use hidet_cuda::schedule::simt_anchor::SimtAnchorKind;
use hidet_cuda::schedule::GpuTarget;
use hidet_cuda::sim_device::{SimDevice, SimDeviceOptions};
use hidet_cuda::templates::matmul_simt::SimtLimits;
use hidet_cuda::tuning::candidates::LEVEL1_CANDIDATES;
use hidet_cuda::tuning::{
    task_identity, CudaTuneBackend, CudaTuning, SimtCandidate, SimtTask, SIMT_SPACE,
};
use hidet_cuda::Arch;
use hidet_graph::compiled::{CompileOptions, CompiledModel};
use hidet_graph::fusion::{partition_with, FusedTask, GroupKind, Specialization};
use hidet_graph::{
    Attribute, Attributes, DType, Graph, GraphBuilder, NodeSpec, Registry, Tensor, TensorType,
};
use hidet_ir::function::{IRModule, Target};
use hidet_tune::record::RECORD_FORMAT;
use hidet_tune::{
    CandidateOutcome, CandidateRecord, Environment, Stats, Tunable, TuneBackend, TuneLevel,
    TuningCache, TuningRecord,
};

fn node(op: &str, inputs: &[&str], output: &str, attrs: Attributes) -> NodeSpec {
    NodeSpec {
        name: format!("{op}_{output}"),
        domain: String::new(),
        op_type: op.into(),
        opset: 17,
        attrs,
        inputs: inputs.iter().map(|s| s.to_string()).collect(),
        outputs: vec![output.to_string()],
    }
}

/// Deterministic values in [-1, 1].
fn values(seed: u64, n: usize) -> Vec<f32> {
    let mut s = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..n)
        .map(|_| {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            ((s >> 11) as f64 / (1u64 << 53) as f64 * 2.0 - 1.0) as f32
        })
        .collect()
}

fn tensor(seed: u64, shape: &[usize]) -> Tensor {
    Tensor::new(shape.to_vec(), values(seed, shape.iter().product())).expect("shape matches")
}

/// `y = relu(x[37, 71] · w[71, 53] + b)`.
fn dense() -> Graph {
    let mut g = GraphBuilder::new("dense");
    g.input("x", TensorType::fixed(DType::F32, &[37, 71]));
    g.initializer("w", tensor(1, &[71, 53]));
    g.initializer("b", tensor(2, &[53]));
    g.node(node("MatMul", &["x", "w"], "xw", Attributes::new()));
    g.node(node("Add", &["xw", "b"], "biased", Attributes::new()));
    g.node(node("Relu", &["biased"], "y", Attributes::new()));
    g.output("y");
    g.build(Registry::global()).expect("valid graph")
}

/// `y = a[3, 5, 300] · b[1, 300, 19]`: a batch of 3 against one broadcast right operand, with a
/// reduction long enough for parallel-k.
fn batched() -> Graph {
    let mut g = GraphBuilder::new("batched");
    g.input("a", TensorType::fixed(DType::F32, &[3, 5, 300]));
    g.initializer("b", tensor(3, &[1, 300, 19]));
    g.node(node("MatMul", &["a", "b"], "y", Attributes::new()));
    g.output("y");
    g.build(Registry::global()).expect("valid graph")
}

/// `y = relu(conv(x[2, 6, 9, 11], w[16, 3, 3, 3], b))`, 2 groups, stride 2, padding 1.
fn conv() -> Graph {
    let mut g = GraphBuilder::new("conv");
    g.input("x", TensorType::fixed(DType::F32, &[2, 6, 9, 11]));
    g.initializer("w", tensor(4, &[16, 3, 3, 3]));
    g.initializer("b", tensor(5, &[16]));
    let ints = |v: &[i64]| Attribute::Ints(v.to_vec());
    let mut attrs = Attributes::new();
    attrs.insert("kernel_shape", ints(&[3, 3]));
    attrs.insert("strides", ints(&[2, 2]));
    attrs.insert("pads", ints(&[1, 1, 1, 1]));
    attrs.insert("group", Attribute::Int(2));
    g.node(node("Conv", &["x", "w", "b"], "c", attrs));
    g.node(node("Relu", &["c"], "y", Attributes::new()));
    g.output("y");
    g.build(Registry::global()).expect("valid graph")
}

/// The graph's anchored task at its declared input shapes.
fn anchored_task(graph: &Graph) -> FusedTask {
    let given: Vec<_> = graph
        .inputs()
        .iter()
        .map(|&v| {
            let shape = graph.value(v).ty.fixed_shape().expect("a fixed shape");
            (v, shape)
        })
        .collect();
    let spec = Specialization::new(graph, &given).expect("specializes");
    let part = partition_with(graph, &spec, true);
    let group = part
        .groups
        .iter()
        .find(|g| g.kind == GroupKind::Anchored)
        .expect("an anchored group");
    FusedTask::new(graph, &spec, group, 0).expect("a task")
}

fn h100() -> GpuTarget {
    GpuTarget::for_arch(Arch::SM90)
}

fn environment() -> Environment {
    Environment {
        device: "simulated H100".into(),
        features: vec!["sm_90".into(), "sms=132".into()],
        compiler: "nvrtc test".into(),
        flags: vec![],
    }
}

/// The float64 result of the task named by `graph` from its inputs `inputs` (by graph
/// value name).
fn reference(graph: &str, inputs: &[(String, Vec<f64>)]) -> Vec<f64> {
    let get = |name: &str| {
        &inputs
            .iter()
            .find(|(n, _)| n == name)
            .unwrap_or_else(|| {
                panic!(
                    "no input `{name}` among {:?}",
                    inputs.iter().map(|i| &i.0).collect::<Vec<_>>()
                )
            })
            .1
    };
    let matmul = |a: &[f64], b: &[f64], m: usize, n: usize, k: usize| -> Vec<f64> {
        let mut c = vec![0.0; m * n];
        for i in 0..m {
            for j in 0..n {
                c[i * n + j] = (0..k).map(|p| a[i * k + p] * b[p * n + j]).sum();
            }
        }
        c
    };
    match graph {
        "dense" => {
            let (b, mut y) = (get("b"), matmul(get("x"), get("w"), 37, 53, 71));
            for (i, v) in y.iter_mut().enumerate() {
                *v = (*v + b[i % 53]).max(0.0);
            }
            y
        }
        "batched" => (0..3)
            .flat_map(|e| matmul(&get("a")[e * 1500..(e + 1) * 1500], get("b"), 5, 19, 300))
            .collect(),
        "conv" => {
            let (x, w, b) = (get("x"), get("w"), get("b"));
            let (oh, ow) = (5, 6);
            let mut y = vec![0.0; 2 * 16 * oh * ow];
            for n in 0..2 {
                for o in 0..16 {
                    let g = o / 8;
                    for i in 0..oh {
                        for j in 0..ow {
                            let mut acc = b[o];
                            for c in 0..3 {
                                for p in 0..3 {
                                    for q in 0..3 {
                                        let (h, v) =
                                            ((2 * i + p) as i64 - 1, (2 * j + q) as i64 - 1);
                                        if (0..9).contains(&h) && (0..11).contains(&v) {
                                            let xc = g * 3 + c;
                                            acc += w[((o * 3 + c) * 3 + p) * 3 + q]
                                                * x[((n * 6 + xc) * 9 + h as usize) * 11
                                                    + v as usize];
                                        }
                                    }
                                }
                            }
                            y[((n * 16 + o) * oh + i) * ow + j] = acc.max(0.0);
                        }
                    }
                }
            }
            y
        }
        other => panic!("no reference for {other}"),
    }
}

fn graphs() -> Vec<(&'static str, Graph)> {
    vec![("dense", dense()), ("batched", batched()), ("conv", conv())]
}

#[test]
fn every_level_one_candidate_of_odd_tasks_lowers_on_every_arch() {
    for (name, graph) in graphs() {
        let task = anchored_task(&graph);
        for arch in [Arch::SM80, Arch::SM86, Arch::SM90] {
            let simt =
                SimtTask::from_fused(&task, &GpuTarget { arch, ..h100() }).expect("a SIMT anchor");
            let kind = simt.anchor().kind;
            assert_eq!(kind == SimtAnchorKind::Conv, name == "conv", "{name}");
            let candidates = simt.candidates(TuneLevel::Subset);
            assert_eq!(candidates[0], simt.heuristic(), "{name}");
            assert!(
                candidates.len() > LEVEL1_CANDIDATES / 2
                    && candidates.len() <= LEVEL1_CANDIDATES + 1,
                "{name} {arch}: {} candidates",
                candidates.len()
            );
            let limits = SimtLimits::for_arch(arch);
            for (i, c) in candidates.iter().enumerate() {
                c.0.schedule
                    .validate(&limits)
                    .unwrap_or_else(|e| panic!("{name} {arch}: {e}"));
                let label = simt.label(c);
                let kernels = simt
                    .kernels(c, &format!("{name}_c{i}"))
                    .unwrap_or_else(|e| panic!("{name} {arch} {label}: {e}"));
                assert_eq!(
                    kernels.len(),
                    if c.0.k_parts > 1 { 2 } else { 1 },
                    "{label}"
                );
                for f in kernels {
                    let inputs = f.params.len() - 1;
                    let module = IRModule::new(f.name.clone(), Target::Cuda).with(f);
                    kernel_image(inputs, module)
                        .unwrap_or_else(|e| panic!("{name} {arch} {label}: {e}"));
                }
            }
        }
    }
}

#[test]
fn candidates_run_correctly_through_the_tuning_backend_in_the_simulator() {
    let device = Arc::new(SimDevice::new(SimDeviceOptions::default()));
    let runner = CudaTuneBackend::new(device.clone(), environment()).with_cold_bytes(0);
    let mut parallel_k_runs = 0;
    let mut dynamic_smem_runs = 0;
    for (name, graph) in graphs() {
        let task = anchored_task(&graph);
        let simt = SimtTask::from_fused(&task, &h100()).unwrap_or_else(|| {
            panic!(
                "{name}: not a SIMT anchor: {:?}",
                task.anchor
                    .as_ref()
                    .map(|a| (&a.op_type, a.def.inputs.len()))
            )
        });
        let all = simt.candidates(TuneLevel::Full);
        // The heuristic, the first parallel-k pair, the first in dynamic shared memory and
        // two spread over the level-1 list: each small enough to simulate in a moment.
        let one = simt.candidates(TuneLevel::Subset);
        let mut picked = vec![one[0], one[one.len() / 2], one[one.len() - 1]];
        picked.extend(all.iter().find(|c| c.0.k_parts > 1).copied());
        picked.extend(
            all.iter()
                .find(|c| {
                    c.0.schedule.dynamic_shared_bytes() > 0 && c.0.schedule.block_tile()[0] <= 64
                })
                .copied(),
        );
        let kernels: Vec<Vec<_>> = picked
            .iter()
            .enumerate()
            .map(|(i, c)| simt.kernels(c, &format!("{name}_c{i}")).expect("kernels"))
            .collect();
        let unit = runner
            .compile(&format!("{name}_unit"), kernels.clone())
            .expect("loads in the simulator");
        let mut workload = runner.workload(&kernels[0]).expect("a workload");
        // Inputs as the graph names them (the task's inputs in order, then its output).
        let buffers = workload.buffers();
        let inputs: Vec<(String, Vec<f64>)> = task
            .inputs
            .iter()
            .zip(&buffers)
            .map(|(&v, (ptr, param))| {
                let mut bytes = vec![0u8; param.bytes()];
                device.download(*ptr, &mut bytes).expect("download");
                let vals = bytes
                    .chunks_exact(4)
                    .map(|c| f64::from(f32::from_le_bytes([c[0], c[1], c[2], c[3]])))
                    .collect::<Vec<f64>>();
                assert!(vals.iter().all(|v| v.abs() >= 0.05 && v.abs() <= 1.0));
                (graph.value(v).name.clone(), vals)
            })
            .collect();
        let want = reference(name, &inputs);
        let (out_ptr, out_param) = buffers.last().cloned().expect("an output");
        for (i, c) in picked.iter().enumerate() {
            let label = simt.label(c);
            runner
                .run(&unit, &format!("{name}_c{i}"), &mut workload)
                .unwrap_or_else(|e| panic!("{name} {label}: {e}"));
            let mut bytes = vec![0u8; out_param.bytes()];
            device.download(out_ptr, &mut bytes).expect("download");
            let got: Vec<f32> = bytes
                .chunks_exact(4)
                .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
                .collect();
            assert_eq!(got.len(), want.len());
            for (j, (g, w)) in got.iter().zip(&want).enumerate() {
                assert!(
                    (f64::from(*g) - w).abs() <= 1e-4 * (1.0 + w.abs()),
                    "{name} {label}: [{j}] {g} vs {w}"
                );
            }
            parallel_k_runs += usize::from(c.0.k_parts > 1);
            dynamic_smem_runs += usize::from(c.0.schedule.dynamic_shared_bytes() > 0);
        }
        // The simulator has no clock: timing is refused, naming why.
        let err = runner
            .time(&unit, &format!("{name}_c0"), &mut workload)
            .expect_err("the simulator cannot time");
        assert!(err.to_string().contains("cannot time"), "{err}");
    }
    assert!(parallel_k_runs >= 1 && dynamic_smem_runs >= 1);
}

#[test]
fn records_round_trip_and_keys_name_the_arch_and_the_fusion() {
    let task = anchored_task(&dense());
    let on90 = SimtTask::from_fused(&task, &h100()).expect("a SIMT anchor");
    let on80 = SimtTask::from_fused(
        &task,
        &GpuTarget {
            arch: Arch::SM80,
            ..h100()
        },
    )
    .expect("a SIMT anchor");
    assert_ne!(on90.key(), on80.key());
    assert!(
        on90.key()
            .starts_with("matmul_f32 m=37 n=53 k=71 arch=sm_90"),
        "{}",
        on90.key()
    );
    assert!(on90.key().contains("fusion="), "{}", on90.key());
    assert_eq!(on90.space(), SIMT_SPACE);
    let conv = SimtTask::from_fused(&anchored_task(&conv()), &h100()).expect("conv");
    assert!(
        conv.key().starts_with("conv2d_f32 batch=2"),
        "{}",
        conv.key()
    );
    for c in on90.candidates(TuneLevel::Full) {
        let json = serde_json::to_string(&c).expect("serializable");
        let back: SimtCandidate = serde_json::from_str(&json).expect("valid");
        assert_eq!(back, c);
    }
    let mut bad = serde_json::to_value(on90.heuristic()).expect("serializable");
    bad["lanes"] = serde_json::json!([4, 4]);
    assert!(serde_json::from_value::<SimtCandidate>(bad.clone()).is_err());
    bad["lanes"] = serde_json::json!([4, 8]);
    bad["k_parts"] = serde_json::json!(0);
    assert!(serde_json::from_value::<SimtCandidate>(bad).is_err());
}

fn stats(seconds: f64) -> Stats {
    Stats {
        median: seconds,
        min: seconds,
        max: seconds,
        mad: 0.0,
        runs: 5,
    }
}

#[test]
fn the_graph_backend_compiles_with_the_cached_choice_and_refuses_to_tune_without_a_clock() {
    let dir = tempfile::tempdir().expect("temp dir");
    let cache = TuningCache::in_cache_dir(dir.path());
    let graph = dense();
    let task = anchored_task(&graph);
    let options = CudaBackendOptions {
        arch: Arch::SM90,
        ..CudaBackendOptions::default()
    };
    let simt = SimtTask::from_fused(&task, &options.gpu_target()).expect("simt");
    let heuristic = simt.heuristic();
    let winner = *simt
        .candidates(TuneLevel::Subset)
        .iter()
        .find(|c| c.0.schedule.threads() != heuristic.0.schedule.threads())
        .expect("a candidate of another block size");
    let record = TuningRecord {
        format: RECORD_FORMAT,
        identity: task_identity(&simt, &environment()),
        level: TuneLevel::Subset,
        winner: 1,
        heuristic: Some(0),
        candidates: vec![
            CandidateRecord {
                schedule: heuristic,
                label: simt.label(&heuristic),
                outcome: CandidateOutcome::Measured(stats(2e-5)),
            },
            CandidateRecord {
                schedule: winner,
                label: simt.label(&winner),
                outcome: CandidateOutcome::Measured(stats(1e-5)),
            },
        ],
        tuning_seconds: 1.0,
        created_unix: 0,
        in_model: None,
    };
    cache.store(&record).expect("stored");
    let x = tensor(9, &[37, 71]);
    let inputs = vec![("x".to_string(), x)];
    let want = hidet_graph::run_reference(&graph, &inputs).expect("reference runs");
    let block_threads = |tuning: CudaTuning| {
        let backend = CudaBackend::new(
            Arc::new(SimDevice::new(SimDeviceOptions::default())),
            options.clone(),
        )
        .with_tuning(tuning);
        let model = CompiledModel::new(graph.clone(), backend, CompileOptions::default());
        let got = model.run(&inputs).expect("runs in the simulator");
        let (g, w) = (got[0].1.to_f64_vec(), want[0].1.to_f64_vec());
        for (a, b) in g.iter().zip(&w) {
            assert!((a - b).abs() <= 1e-4 * (1.0 + b.abs()), "{a} vs {b}");
        }
        let compiled = model.compiled(&[vec![37, 71]]).expect("compiled");
        let module = compiled.module();
        assert_eq!(module.tuned().len(), 1);
        (module.images()[0].block[0], module.tuned()[0])
    };
    let with_record = CudaTuning {
        environment: Some(environment()),
        cache: Some(cache.clone()),
        ..CudaTuning::default()
    };
    assert_eq!(
        block_threads(with_record.clone()),
        (winner.0.schedule.threads() as u32, true)
    );
    // Without an environment (no GPU) or ignoring the cache: the heuristic.
    let no_environment = CudaTuning {
        cache: Some(cache.clone()),
        ..CudaTuning::default()
    };
    assert_eq!(
        block_threads(no_environment),
        (heuristic.0.schedule.threads() as u32, false)
    );
    let ignoring = CudaTuning {
        ignore_cache: true,
        ..with_record
    };
    assert_eq!(
        block_threads(ignoring),
        (heuristic.0.schedule.threads() as u32, false)
    );

    // Tuning on the simulator: a clear error, not a panic.
    let backend = CudaBackend::new(
        Arc::new(SimDevice::new(SimDeviceOptions::default())),
        options.clone(),
    )
    .with_tuning(CudaTuning {
        level: Some(TuneLevel::Subset),
        cache: Some(cache),
        ..CudaTuning::default()
    });
    let err = CompiledModel::new(graph.clone(), backend, CompileOptions::default())
        .run(&inputs)
        .expect_err("the simulator cannot tune");
    assert!(err.to_string().contains("tuning needs a GPU"), "{err}");
}

/// Every level-1 candidate of the parallel-k product assembles without spills or stack, and
/// so does the fused convolution's heuristic. A few of the convolution's small-block
/// candidates may spill a few bytes around the inlined im2col arithmetic (ptxas at sm_90
/// caps a 64-thread kernel at 64 registers; single-warp kernels ask for one block per SM,
/// which avoids it): they are valid kernels, slower ones, which measurement ranks; they are
/// listed, not failed.
#[test]
fn level_one_candidates_of_fused_tasks_assemble() {
    let nvrtc = common::require_nvrtc();
    let ptxas = common::require_ptxas();
    // (label, must not spill, image)
    let mut images = Vec::new();
    for (name, graph) in [("conv", conv()), ("batched", batched())] {
        let task = anchored_task(&graph);
        let simt = SimtTask::from_fused(&task, &h100()).expect("a SIMT anchor");
        for (i, c) in simt.candidates(TuneLevel::Subset).iter().enumerate() {
            let strict = name == "batched" || i == 0;
            for f in simt.kernels(c, &format!("{name}_c{i}")).expect("kernels") {
                let inputs = f.params.len() - 1;
                let module = IRModule::new(f.name.clone(), Target::Cuda).with(f);
                let image = kernel_image(inputs, module).expect("lowers");
                images.push((simt.label(c), strict, image));
            }
        }
    }
    let next = std::sync::atomic::AtomicUsize::new(0);
    let failures = std::sync::Mutex::new(Vec::new());
    std::thread::scope(|s| {
        for _ in 0..2 {
            s.spawn(|| loop {
                let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                let Some((label, strict, image)) = images.get(i) else {
                    break;
                };
                let report = nvrtc
                    .compile_to_ptx(&image.name, &image.source, Arch::SM90, &Default::default())
                    .map_err(|e| e.to_string())
                    .and_then(|ptx| {
                        hidet_cuda::ptxas::assemble_with(&ptxas, &image.name, &ptx)
                            .map_err(|e| e.to_string())
                    });
                let line = match report.as_ref().map(|r| r.kernel(&image.name)) {
                    Ok(Some(k)) if !k.spills() && k.stack_frame_bytes == 0 => continue,
                    Ok(Some(k)) => format!(
                        "{label} ({}): {} registers, {} B spilled, {} B stack",
                        image.name, k.registers, k.spill_store_bytes, k.stack_frame_bytes
                    ),
                    Ok(None) => format!("{label}: ptxas reported no kernel {}", image.name),
                    Err(e) => format!("{label}: {e}"),
                };
                let fatal = *strict || !line.contains("spilled");
                if let Ok(mut f) = failures.lock() {
                    f.push((fatal, line));
                }
            });
        }
    });
    let failures = failures.into_inner().expect("no worker panicked");
    for (fatal, line) in &failures {
        eprintln!("{}{line}", if *fatal { "FAIL " } else { "spills: " });
    }
    assert!(failures.iter().all(|(fatal, _)| !fatal), "see above");
}
