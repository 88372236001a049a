//! `hidet compile`: compile a model for its input shapes (through the kernel cache), report
//! what came out, and optionally write the kernel sources and the fused-graph dump.

use std::path::PathBuf;
use std::time::Instant;

use hidet::graph::compiled::{Backend, CompileOptions, CompileReport, CompiledModel};
use hidet::graph::Dim;
use hidet::pipeline::{self, Device, PipelineError};
use hidet_cuda::device::GpuDevice;
use hidet_cuda::graph_backend::{CudaBackendOptions, CudaModule, KernelOrigin, NvrtcCheck};
use hidet_cuda::Arch;

use super::progress::CompileBar;
use super::{source, CliError};

/// Options of `hidet compile`.
#[derive(Debug, Clone)]
pub struct CompileArgs {
    pub model: String,
    /// Folder for `partition.txt` (which operators went into which kernel) and the kernel
    /// sources.
    pub emit_source: Option<PathBuf>,
    pub json: bool,
    pub threads: Option<usize>,
    pub device: Device,
    /// The architecture CUDA kernels are compiled for (`--device cuda-sim`).
    pub arch: Arch,
    /// Where to save the compiled model (CPU only).
    pub output: Option<PathBuf>,
    /// `NAME=D1xD2…` shapes for inputs (others: symbolic dimensions as 1).
    pub shapes: Vec<String>,
}

/// Parses `NAME=D1xD2…` (`NAME=` alone is a scalar), rejecting a name given twice.
fn parse_shapes(specs: &[String]) -> Result<Vec<(String, Vec<usize>)>, CliError> {
    let mut out: Vec<(String, Vec<usize>)> = Vec::new();
    for spec in specs {
        let bad = || {
            CliError::Other(format!(
                "--shape `{spec}`: expected NAME=D1xD2… (e.g. input=8x3x224x224)"
            ))
        };
        let (name, dims) = spec.split_once('=').ok_or_else(bad)?;
        if name.is_empty() {
            return Err(bad());
        }
        let dims: Vec<usize> = if dims.is_empty() {
            Vec::new()
        } else {
            dims.split('x')
                .map(|d| d.trim().parse::<usize>().map_err(|_| bad()))
                .collect::<Result<_, _>>()?
        };
        if out.iter().any(|(n, _)| n == name) {
            return Err(CliError::Other(format!(
                "--shape gives input `{name}` twice"
            )));
        }
        out.push((name.to_string(), dims));
    }
    Ok(out)
}

/// What a compilation produced beyond the graph layer's report: the target line of the
/// text report and the JSON fields of the target.
struct Target {
    line: String,
    /// What building the kernels was (`C build`, `NVRTC build`).
    build: &'static str,
    json: serde_json::Value,
}

/// The target description of CUDA kernels built for `arch` (`device` names the device in the
/// text): NVRTC and the `ptxas` resource checks.
fn cuda_target<D: GpuDevice>(device: &str, arch: Arch, module: &CudaModule<D>) -> Target {
    let reports = module.ptxas_reports();
    let spilling: Vec<String> = reports
        .iter()
        .flat_map(|(_, r)| r.spilling().map(|k| k.name.clone()))
        .collect();
    let stack: Vec<String> = reports
        .iter()
        .flat_map(|(_, r)| r.kernels.iter())
        .filter(|k| k.stack_frame_bytes > 0)
        .map(|k| k.name.clone())
        .collect();
    let split = module.parallel_k().iter().flatten().count();
    let nvrtc = if module.ptx_compiled() {
        "every kernel compiled by NVRTC"
    } else {
        "NVRTC not found: kernels not compiled to PTX"
    };
    Target {
        line: format!(
            "target: {device} ({}; {nvrtc}; ptxas: {} kernels checked, {} spill, {} use stack; {split} parallel-k)",
            arch.real_name(),
            reports.len(),
            spilling.len(),
            stack.len()
        ),
        build: if module.ptx_compiled() {
            "NVRTC build"
        } else {
            "build"
        },
        json: serde_json::json!({
            "arch": arch.real_name(),
            "nvrtc": module.ptx_compiled(),
            "ptxas_checked": reports.len(),
            "parallel_k_kernels": split,
            "spilling_kernels": spilling,
            "stack_kernels": stack,
        }),
    }
}

/// Compiles `model` for `shapes`; the report and the target description made by `target`
/// from the compiled graph's module.
fn compile_with<B: Backend>(
    model: &CompiledModel<B>,
    shapes: &[Vec<usize>],
    target: impl FnOnce(&B::Module) -> Target,
) -> Result<(CompileReport, Target), CliError> {
    let compiled = model.compiled(shapes).map_err(PipelineError::from)?;
    let target = target(compiled.module());
    Ok((compiled.report().clone(), target))
}

/// Runs `hidet compile` (see the module docs). Symbolic input dimensions are compiled as 1.
pub fn run(args: &CompileArgs) -> Result<(), CliError> {
    if args.output.is_some() && args.device != Device::Cpu {
        return Err(CliError::Other(format!(
            "-o saves models compiled for the CPU; this is --device {}",
            args.device.name()
        )));
    }
    let loaded = source::load(&args.model)?;
    let graph = &loaded.model.graph;
    let given = parse_shapes(&args.shapes)?;
    let names: Vec<&str> = graph
        .inputs()
        .iter()
        .map(|&id| graph.value(id).name.as_str())
        .collect();
    if let Some((name, _)) = given.iter().find(|(n, _)| !names.contains(&n.as_str())) {
        return Err(CliError::Other(format!(
            "--shape: `{name}` is not an input of the model (inputs: {})",
            names.join(", ")
        )));
    }
    let mut shapes = Vec::with_capacity(graph.inputs().len());
    for &id in graph.inputs() {
        let v = graph.value(id);
        if let Some((_, shape)) = given.iter().find(|(n, _)| *n == v.name) {
            shapes.push(shape.clone());
            continue;
        }
        let dims = v.ty.shape.as_ref().ok_or_else(|| {
            CliError::Other(format!(
                "input `{}` has an unknown rank; give its shape with --shape NAME=D1xD2…",
                v.name
            ))
        })?;
        shapes.push(
            dims.iter()
                .map(|d| d.fixed().unwrap_or(1))
                .collect::<Vec<usize>>(),
        );
        if dims.iter().any(|d| !matches!(d, Dim::Fixed(_))) && !args.json {
            println!(
                "input `{}`: symbolic dimensions compiled as 1 (--shape sets them)",
                v.name
            );
        }
    }
    let bar = CompileBar::new(&loaded.label);
    let opts = CompileOptions {
        threads: args.threads,
        progress: Some(bar.sink()),
        ..CompileOptions::default()
    };
    let start = Instant::now();
    let compiled = match args.device {
        Device::Cpu => {
            let model = pipeline::compile(&loaded.model, opts);
            compile_with(&model, &shapes, |_| {
                let host = hidet_cpu::CpuTarget::host();
                Target {
                    line: format!("target: {host}"),
                    build: "C build",
                    json: serde_json::json!({ "target_features": host.features.names() }),
                }
            })
            .and_then(|compiled| {
                if let Some(path) = &args.output {
                    model.save(path).map_err(PipelineError::from)?;
                }
                Ok(compiled)
            })
        }
        Device::CudaSim => {
            let options = CudaBackendOptions {
                arch: args.arch,
                nvrtc: NvrtcCheck::IfAvailable,
                ptxas: true,
                cache_images: false,
                ..CudaBackendOptions::default()
            };
            let model = pipeline::compile_sim(&loaded.model, opts, options);
            compile_with(&model, &shapes, |module| {
                cuda_target("cuda-sim", args.arch, module)
            })
        }
        Device::Cuda if Device::Cuda.check_runnable().is_ok() => {
            let model = pipeline::compile_gpu(&loaded.model, opts)?;
            compile_with(&model, &shapes, |module| {
                let templates = module
                    .origins()
                    .iter()
                    .filter(|o| !matches!(o, KernelOrigin::Scheduler(_)))
                    .count();
                let tuned = module.tuned().iter().filter(|t| **t).count();
                Target {
                    line: format!(
                        "target: cuda (GPU 0; kernels compiled for its architecture, cached; \
                         {tuned} of {templates} template kernels with tuned schedules)"
                    ),
                    build: "NVRTC build",
                    json: serde_json::json!({
                        "device": "cuda",
                        "template_kernels": templates,
                        "tuned_kernels": tuned,
                    }),
                }
            })
        }
        Device::Cuda => {
            // No GPU here: compile every kernel for `--arch` into the cubin/PTX cache, where a
            // GPU of that architecture finds it (the kernels are checked in the simulator's
            // loader, never run).
            let options = CudaBackendOptions {
                arch: args.arch,
                nvrtc: NvrtcCheck::Required,
                ptxas: true,
                cache_images: true,
                ..CudaBackendOptions::default()
            };
            let model = pipeline::compile_sim(&loaded.model, opts, options);
            compile_with(&model, &shapes, |module| {
                cuda_target(
                    "cuda (no GPU here; kernels cached for it)",
                    args.arch,
                    module,
                )
            })
        }
    };
    bar.finish();
    let (report, target) = compiled?;
    let report = &report;
    let compile_seconds = start.elapsed().as_secs_f64();
    if let Some(dir) = &args.emit_source {
        report.write_sources(dir).map_err(|e| CliError::Io {
            path: dir.clone(),
            source: e,
        })?;
    }
    if args.json {
        let mut obj = serde_json::json!({
            "model": loaded.label,
            "device": args.device.name(),
            "kernels": report.kernels,
            "host_nodes": report.host_nodes(),
            "host_steps": report.host_nodes(),
            "host_ops": report.host_ops(),
            "aliases": report.aliases,
            "folded_nodes": report.folded,
            "refusals": report.refusals.len(),
            "compile_seconds": compile_seconds,
            "load_seconds": loaded.load_time.as_secs_f64(),
            "build_seconds": report.module.build_time.as_secs_f64(),
            "compiler_invocations": report.module.compiled,
            "cached_units": report.module.cached,
            "intermediate_bytes": report.intermediate_bytes,
            "unplanned_bytes": report.unplanned_bytes,
            "constant_bytes": report.constant_bytes,
            "shared_constant_bytes": report.shared_constant_bytes,
            "held_constant_bytes": report.held_constant_bytes,
            "emit_source": args.emit_source.as_ref().map(|p| p.display().to_string()),
            "output": args.output.as_ref().map(|p| p.display().to_string()),
        });
        if let (Some(obj), serde_json::Value::Object(fields)) = (obj.as_object_mut(), target.json) {
            obj.extend(fields);
        }
        println!("{obj}");
        return Ok(());
    }
    println!(
        "{}: {} nodes -> {} kernels, {} host nodes, {} aliases, {} folded nodes",
        loaded.label,
        graph.nodes().len(),
        report.kernels,
        report.host_nodes(),
        report.aliases,
        report.folded
    );
    println!("{}", target.line);
    println!(
        "compiled in {compile_seconds:.2} s (load {:.2} s, {} {:.2} s: {} compiler invocations, {} cached)",
        loaded.load_time.as_secs_f64(),
        target.build,
        report.module.build_time.as_secs_f64(),
        report.module.compiled,
        report.module.cached
    );
    let mib = |b: usize| b as f64 / (1 << 20) as f64;
    println!(
        "memory: {:.2} MiB intermediates (peak of the plan; {:.2} MiB without reuse), {:.2} MiB constants{}",
        mib(report.intermediate_bytes),
        mib(report.unplanned_bytes),
        mib(report.constant_bytes + report.shared_constant_bytes),
        [
            (report.held_constant_bytes, "read where the model holds them, no copy"),
            (
                report.shared_constant_bytes,
                "shared with the model's other input shapes",
            ),
        ]
        .iter()
        .filter(|(bytes, _)| *bytes > 0)
        .map(|(bytes, what)| format!(" ({:.2} MiB {what})", mib(*bytes)))
        .collect::<String>()
    );
    if !report.host_steps.is_empty() {
        let ops: Vec<String> = report
            .host_ops()
            .iter()
            .map(|(op, n)| format!("{op} x{n}"))
            .collect();
        println!("host steps: {}", ops.join(", "));
    }
    if !report.refusals.is_empty() {
        println!(
            "{} fused groups were split after a backend refusal",
            report.refusals.len()
        );
    }
    if let Some(path) = &args.output {
        let bytes = std::fs::metadata(path).map(|m| m.len()).unwrap_or(0);
        println!(
            "saved the compiled model to {} ({:.2} MiB; `hidet run {}` runs it without a C compiler)",
            path.display(),
            mib(bytes as usize),
            path.display()
        );
    }
    if let Some(dir) = &args.emit_source {
        println!(
            "wrote {} (fused graph) and {} kernel source files to {}",
            dir.join("partition.txt").display(),
            report.module.sources.len(),
            dir.display()
        );
    }
    Ok(())
}
