//! `hidet bench`: compile a model (or use the reference executor) and time its runs.
//!
//! Prints the input summary, compile time and min/median/max latency; with `--json` the
//! last stdout line is one JSON object (see [`BenchReport`]).

use std::path::PathBuf;
use std::time::{Duration, Instant};

use hidet::graph::compiled::{Backend, CompileOptions, CompiledGraph, CompiledModel, StepInfo};
use hidet::graph::Tensor;
use hidet::pipeline::{self, Device, PipelineError};
use hidet::zoo::inputs::{complete_declared_inputs, complete_inputs, InputKind};
use hidet::zoo::{self, SEED};
use hidet_cpu::CpuTarget;
use hidet_cuda::graph_backend::CudaBackendOptions;

use super::progress::CompileBar;
use super::{npy, source, CliError};

/// Options of `hidet bench`.
#[derive(Debug, Clone)]
pub struct BenchArgs {
    pub model: String,
    /// `NAME=FILE.npy` inputs; the others are synthesized.
    pub inputs: Vec<String>,
    pub threads: Option<usize>,
    pub runs: usize,
    pub warmup: usize,
    pub json: bool,
    /// Time the reference executor instead of the compiled model.
    pub reference: bool,
    /// Also run the reference executor once and report the largest difference.
    pub check: bool,
    /// The largest difference (relative to the reference's largest magnitude) `check`
    /// accepts; above it, the command fails after reporting.
    pub check_tolerance: f64,
    /// Time every step of the launch list during the timed runs.
    pub profile: bool,
    /// Where the compiled kernels run.
    pub device: Device,
}

/// Latency statistics of `times` (non-empty), in milliseconds: (min, median, max, mean).
pub fn stats_ms(times: &[Duration]) -> (f64, f64, f64, f64) {
    let mut ms: Vec<f64> = times.iter().map(|t| t.as_secs_f64() * 1e3).collect();
    ms.sort_by(f64::total_cmp);
    let n = ms.len();
    if n == 0 {
        return (0.0, 0.0, 0.0, 0.0);
    }
    let median = if n % 2 == 1 {
        ms[n / 2]
    } else {
        0.5 * (ms[n / 2 - 1] + ms[n / 2])
    };
    (ms[0], median, ms[n - 1], ms.iter().sum::<f64>() / n as f64)
}

fn describe(t: &Tensor) -> String {
    let dims: Vec<String> = t.shape().iter().map(|d| d.to_string()).collect();
    format!("{}[{}]", t.dtype(), dims.join(", "))
}

/// Summary of one output: shape, finiteness, magnitude.
fn output_summary(name: &str, t: &Tensor) -> serde_json::Value {
    let v = t.to_f64_vec();
    let finite = v.iter().all(|x| x.is_finite());
    let max_abs = v.iter().fold(0f64, |m, x| m.max(x.abs()));
    let mean_abs = if v.is_empty() {
        0.0
    } else {
        v.iter().map(|x| x.abs()).sum::<f64>() / v.len() as f64
    };
    serde_json::json!({
        "name": name,
        "shape": t.shape(),
        "dtype": t.dtype().to_string(),
        "finite": finite,
        "max_abs": max_abs,
        "mean_abs": mean_abs,
    })
}

/// Largest absolute and relative (to the reference's largest magnitude) differences.
fn compare(got: &[(String, Tensor)], want: &[(String, Tensor)]) -> Result<(f64, f64), CliError> {
    let (mut abs, mut rel) = (0f64, 0f64);
    for ((gn, g), (wn, w)) in got.iter().zip(want) {
        if gn != wn || g.shape() != w.shape() {
            return Err(CliError::Other(format!(
                "compiled output `{gn}` {} differs in kind from the reference's `{wn}` {}",
                describe(g),
                describe(w)
            )));
        }
        let (gv, wv) = (g.to_f64_vec(), w.to_f64_vec());
        let scale = wv.iter().fold(0f64, |m, x| m.max(x.abs())).max(1e-30);
        let diff = gv.iter().zip(&wv).fold(0f64, |m, (a, b)| {
            if a.is_nan() != b.is_nan() {
                f64::INFINITY
            } else {
                m.max((a - b).abs())
            }
        });
        abs = abs.max(diff);
        rel = rel.max(diff / scale);
    }
    Ok((abs, rel))
}

/// Runs `hidet bench` (see the module docs).
pub fn run(args: &BenchArgs) -> Result<(), CliError> {
    if args.runs == 0 {
        return Err(CliError::Other("--runs must be at least 1".into()));
    }
    if !args.reference {
        args.device.check_runnable()?;
    }
    let device = args.device;
    let specs = super::run::parse_inputs(&args.inputs)?;
    if pipeline::is_compiled_model(std::path::Path::new(&args.model)) {
        return bench_saved(args, &specs);
    }
    let loaded = source::load(&args.model)?;
    let graph = &loaded.model.graph;
    let given: Vec<(String, Tensor)> = specs
        .iter()
        .map(|(name, path): &(String, PathBuf)| Ok((name.clone(), npy::read(path)?)))
        .collect::<Result<_, CliError>>()?;
    let completed = complete_inputs(graph, &given, SEED)?;
    println!(
        "model {} ({} nodes, loaded in {:.2} s)",
        loaded.label,
        graph.nodes().len(),
        loaded.load_time.as_secs_f64()
    );
    for (name, t, kind) in &completed {
        let what = match kind {
            InputKind::Given => "given".to_string(),
            InputKind::Ids { rows } => format!("random ids in [0, {rows})"),
            InputKind::Ones => "ones".to_string(),
            InputKind::Random => "random".to_string(),
        };
        println!("  input {name}: {} ({what})", describe(t));
    }
    let inputs: Vec<(String, Tensor)> = completed.into_iter().map(|(n, t, _)| (n, t)).collect();

    let mut kernels = 0usize;
    let mut compile_seconds = 0f64;
    let mut intermediate_bytes = 0usize;
    let mut times = Vec::with_capacity(args.runs);
    let outputs: Vec<(String, Tensor)>;
    let mut check = None;
    let mut profile: Option<Vec<ProfileRow>> = None;
    if args.reference {
        for _ in 0..args.warmup {
            pipeline::run_reference(&loaded.model, &inputs)?;
        }
        let mut last = Vec::new();
        for _ in 0..args.runs {
            let t = Instant::now();
            last = pipeline::run_reference(&loaded.model, &inputs)?;
            times.push(t.elapsed());
        }
        outputs = last;
    } else {
        let bar = CompileBar::new(&loaded.label);
        let opts = CompileOptions {
            threads: args.threads,
            progress: Some(bar.sink()),
            ..CompileOptions::default()
        };
        let timed = match device {
            Device::Cpu => {
                time_compiled(args, pipeline::compile(&loaded.model, opts), &inputs, bar)?
            }
            Device::CudaSim => time_compiled(
                args,
                pipeline::compile_sim(&loaded.model, opts, CudaBackendOptions::default()),
                &inputs,
                bar,
            )?,
            Device::Cuda => time_compiled(
                args,
                pipeline::compile_gpu(&loaded.model, opts)?,
                &inputs,
                bar,
            )?,
        };
        kernels = timed.kernels;
        compile_seconds = timed.compile_seconds;
        intermediate_bytes = timed.intermediate_bytes;
        times = timed.times;
        outputs = timed.outputs;
        profile = timed.profile;
        if args.check {
            let want = pipeline::run_reference(&loaded.model, &inputs)?;
            check = Some(compare(&outputs, &want)?);
        }
    }
    report(
        args,
        Measured {
            label: loaded.label,
            load_seconds: loaded.load_time.as_secs_f64(),
            kernels,
            compile_seconds,
            intermediate_bytes,
            times,
            outputs,
            check,
            profile,
        },
    )
}

/// `hidet bench` of a saved compiled model: loads it (no compiler), synthesizes the inputs
/// not given for its first saved set of shapes, and times its runs.
fn bench_saved(args: &BenchArgs, specs: &[(String, PathBuf)]) -> Result<(), CliError> {
    let path = std::path::Path::new(&args.model);
    if args.reference || args.check {
        return Err(CliError::Other(format!(
            "{} is a compiled model, which has no graph for the reference executor (--reference, \
             --check): give the .onnx file",
            path.display()
        )));
    }
    if args.device != Device::Cpu {
        return Err(CliError::Other(format!(
            "saved models run on the CPU, not {}",
            args.device.name()
        )));
    }
    let start = Instant::now();
    let loaded = pipeline::load_compiled(path, args.threads)?;
    let load_seconds = start.elapsed().as_secs_f64();
    let given: Vec<(String, Tensor)> = specs
        .iter()
        .map(|(name, path)| Ok((name.clone(), npy::read(path)?)))
        .collect::<Result<_, CliError>>()?;
    let first = loaded.graphs()[0].input_shapes();
    let declared: Vec<(String, hidet::DType, Vec<usize>)> = loaded
        .inputs()
        .iter()
        .zip(first)
        .map(|(d, shape)| (d.name.clone(), d.dtype, shape))
        .collect();
    let inputs: Vec<(String, Tensor)> = complete_declared_inputs(&declared, &given, SEED)?
        .into_iter()
        .map(|(name, t, _)| (name, t))
        .collect();
    println!(
        "saved model {} ({} compiled input shapes, loaded in {load_seconds:.3} s without a compiler)",
        path.display(),
        loaded.graphs().len()
    );
    for (name, t) in &inputs {
        println!("  input {name}: {}", describe(t));
    }
    let data: Vec<(String, hidet::graph::Datum)> = inputs
        .iter()
        .map(|(n, t)| (n.clone(), hidet::graph::Datum::Tensor(t.clone())))
        .collect();
    let compiled = loaded.compiled_for(&data).map_err(PipelineError::from)?;
    let timed = time_graph(args, &compiled, 0.0, &inputs)?;
    report(
        args,
        Measured {
            label: args.model.clone(),
            load_seconds,
            kernels: timed.kernels,
            compile_seconds: 0.0,
            intermediate_bytes: timed.intermediate_bytes,
            times: timed.times,
            outputs: timed.outputs,
            check: None,
            profile: timed.profile,
        },
    )
}

/// What a bench measured, for the report [`report`] prints.
struct Measured {
    label: String,
    load_seconds: f64,
    kernels: usize,
    compile_seconds: f64,
    intermediate_bytes: usize,
    times: Vec<Duration>,
    outputs: Vec<(String, Tensor)>,
    check: Option<(f64, f64)>,
    profile: Option<Vec<ProfileRow>>,
}

/// Prints the outputs, the check, the profile and the latencies (and the JSON line), and
/// fails when the check is above tolerance.
fn report(args: &BenchArgs, m: Measured) -> Result<(), CliError> {
    let Measured {
        label,
        load_seconds,
        kernels,
        compile_seconds,
        intermediate_bytes,
        times,
        outputs,
        check,
        profile,
    } = m;
    let device = args.device;
    let (min_ms, median_ms, max_ms, mean_ms) = stats_ms(&times);
    let summaries: Vec<serde_json::Value> =
        outputs.iter().map(|(n, t)| output_summary(n, t)).collect();
    for s in &summaries {
        println!(
            "  output {}: {}[{}] finite={} max|x|={:.4} mean|x|={:.4}",
            s["name"].as_str().unwrap_or(""),
            s["dtype"].as_str().unwrap_or(""),
            s["shape"]
                .as_array()
                .map(|a| a
                    .iter()
                    .map(|d| d.to_string())
                    .collect::<Vec<_>>()
                    .join(", "))
                .unwrap_or_default(),
            s["finite"],
            s["max_abs"].as_f64().unwrap_or(f64::NAN),
            s["mean_abs"].as_f64().unwrap_or(f64::NAN),
        );
    }
    if let Some((abs, rel)) = check {
        println!(
            "  vs reference: max abs diff {abs:.3e}, relative to max |ref| {rel:.3e} ({} tolerance {:.0e})",
            if rel <= args.check_tolerance { "within" } else { "ABOVE" },
            args.check_tolerance
        );
    }
    if let Some(rows) = &profile {
        print_profile(rows);
    }
    println!(
        "latency over {} runs ({} warmup): min {min_ms:.3} ms, median {median_ms:.3} ms, max {max_ms:.3} ms, mean {mean_ms:.3} ms",
        args.runs, args.warmup
    );
    if args.json {
        let mut obj = serde_json::json!({
            "model": label,
            "executor": if args.reference { "reference" } else { "compiled" },
            "device": device.name(),
            "threads": if args.reference { 1 } else { args.threads.unwrap_or(CpuTarget::host().cores) },
            "runs": args.runs,
            "warmup": args.warmup,
            "min_ms": min_ms,
            "median_ms": median_ms,
            "max_ms": max_ms,
            "mean_ms": mean_ms,
            "compile_seconds": compile_seconds,
            "load_seconds": load_seconds,
            "kernels": kernels,
            "intermediate_bytes": intermediate_bytes,
            "outputs": summaries,
        });
        if let Some((abs, rel)) = check {
            obj["max_abs_diff"] = abs.into();
            obj["max_rel_diff"] = rel.into();
        }
        if let Some(rows) = &profile {
            obj["profile"] = rows
                .iter()
                .map(|r| {
                    serde_json::json!({
                        "step": r.step,
                        "label": r.label,
                        "median_ms": r.median_ms,
                        "gflops": r.gflops,
                    })
                })
                .collect();
        }
        println!("{obj}");
    }
    match check {
        Some((_, rel)) if rel.is_nan() || rel > args.check_tolerance => {
            Err(CliError::Other(format!(
                "the compiled outputs differ from the reference executor by {rel:.3e} of the \
             largest reference magnitude, above --check-tolerance {}",
                args.check_tolerance
            )))
        }
        _ => Ok(()),
    }
}

/// What timing a compiled model gave.
struct Timed {
    kernels: usize,
    compile_seconds: f64,
    intermediate_bytes: usize,
    times: Vec<Duration>,
    outputs: Vec<(String, Tensor)>,
    profile: Option<Vec<ProfileRow>>,
}

/// Compiles `model` for the inputs' shapes, then runs the warmup and the timed runs.
fn time_compiled<B: Backend>(
    args: &BenchArgs,
    model: CompiledModel<B>,
    inputs: &[(String, Tensor)],
    bar: CompileBar,
) -> Result<Timed, CliError> {
    let shapes: Vec<Vec<usize>> = inputs.iter().map(|(_, t)| t.shape().to_vec()).collect();
    let start = Instant::now();
    let compiled = model.compiled(&shapes).map_err(PipelineError::from);
    bar.finish();
    let compiled = compiled?;
    let compile_seconds = start.elapsed().as_secs_f64();
    let report = compiled.report();
    println!(
        "compiled in {compile_seconds:.2} s: {} kernels ({} compiled, {} cached units), {} host nodes, {:.1} MiB intermediates",
        report.kernels,
        report.module.compiled,
        report.module.cached,
        report.host_nodes(),
        report.intermediate_bytes as f64 / (1 << 20) as f64
    );
    time_graph(args, &compiled, compile_seconds, inputs)
}

/// Runs the warmup and the timed runs of a compiled graph.
fn time_graph<B: Backend>(
    args: &BenchArgs,
    compiled: &CompiledGraph<B>,
    compile_seconds: f64,
    inputs: &[(String, Tensor)],
) -> Result<Timed, CliError> {
    let report = compiled.report();
    for _ in 0..args.warmup {
        compiled.run(inputs).map_err(PipelineError::from)?;
    }
    let mut times = Vec::with_capacity(args.runs);
    let mut last = Vec::new();
    let mut step_times: Vec<Vec<Duration>> = vec![Vec::new(); compiled.steps().len()];
    for _ in 0..args.runs {
        let t = Instant::now();
        if args.profile {
            let (out, per_step) = compiled.run_profiled(inputs).map_err(PipelineError::from)?;
            times.push(t.elapsed());
            last = out;
            for (all, d) in step_times.iter_mut().zip(per_step) {
                all.push(d);
            }
        } else {
            last = compiled.run(inputs).map_err(PipelineError::from)?;
            times.push(t.elapsed());
        }
    }
    Ok(Timed {
        kernels: report.kernels,
        compile_seconds,
        intermediate_bytes: report.intermediate_bytes,
        times,
        outputs: last,
        profile: args
            .profile
            .then(|| profile_rows(&compiled.steps(), &step_times)),
    })
}

/// One step of the launch list in a `--profile` report.
#[derive(Debug, Clone)]
struct ProfileRow {
    /// Position in the launch list.
    step: usize,
    label: String,
    median_ms: f64,
    /// Achieved GFLOP/s of the step's reductions at the median time.
    gflops: Option<f64>,
}

/// One row per step (the median of its times), slowest first.
fn profile_rows(steps: &[StepInfo], times: &[Vec<Duration>]) -> Vec<ProfileRow> {
    let mut rows: Vec<ProfileRow> = steps
        .iter()
        .zip(times)
        .enumerate()
        .filter(|(_, (_, t))| !t.is_empty())
        .map(|(step, (info, t))| {
            let (_, median_ms, _, _) = stats_ms(t);
            ProfileRow {
                step,
                label: info.label.clone(),
                median_ms,
                gflops: info
                    .flops
                    .filter(|_| median_ms > 0.0)
                    .map(|f| f / (median_ms * 1e6)),
            }
        })
        .collect();
    rows.sort_by(|a, b| b.median_ms.total_cmp(&a.median_ms));
    rows
}

/// Prints the profile: the 25 slowest steps, then the total of the rest.
fn print_profile(rows: &[ProfileRow]) {
    const SHOWN: usize = 25;
    let total: f64 = rows.iter().map(|r| r.median_ms).sum();
    println!(
        "profile: {} steps, {total:.3} ms in steps (sum of per-step medians)",
        rows.len()
    );
    println!(
        "  {:>4}  {:>9}  {:>6}  {:>8}  kernel",
        "step", "ms", "share", "GFLOP/s"
    );
    for r in rows.iter().take(SHOWN) {
        let gflops = r
            .gflops
            .map(|g| format!("{g:.1}"))
            .unwrap_or_else(|| "-".into());
        println!(
            "  {:>4}  {:>9.3}  {:>5.1}%  {:>8}  {}",
            r.step,
            r.median_ms,
            100.0 * r.median_ms / total.max(f64::MIN_POSITIVE),
            gflops,
            r.label
        );
    }
    if rows.len() > SHOWN {
        let rest: f64 = rows[SHOWN..].iter().map(|r| r.median_ms).sum();
        println!("  ({} more steps: {rest:.3} ms)", rows.len() - SHOWN);
        print_profile_by_kind(rows, total);
    }
}

/// Prints the steps grouped by kernel kind (the kernel's name without its position `k<N>_`
/// and its node), the costliest kinds first: where a model repeats one block many times,
/// the kinds say what each repetition costs.
fn print_profile_by_kind(rows: &[ProfileRow], total: f64) {
    const SHOWN: usize = 12;
    let mut kinds: std::collections::BTreeMap<String, (usize, f64)> = Default::default();
    for r in rows {
        let name = r.label.split(' ').next().unwrap_or(&r.label);
        let kind = match name
            .strip_prefix('k')
            .map(|t| t.trim_start_matches(|c: char| c.is_ascii_digit()))
        {
            Some(tail) if tail.starts_with('_') && tail.len() < name.len() - 1 => &tail[1..],
            _ => name,
        };
        let e = kinds.entry(kind.to_string()).or_default();
        e.0 += 1;
        e.1 += r.median_ms;
    }
    let mut kinds: Vec<(String, usize, f64)> =
        kinds.into_iter().map(|(k, (n, ms))| (k, n, ms)).collect();
    kinds.sort_by(|a, b| b.2.total_cmp(&a.2));
    println!("by kernel kind ({} kinds):", kinds.len());
    println!(
        "  {:>6}  {:>9}  {:>6}  {:>9}  kind",
        "steps", "ms", "share", "ms/step"
    );
    for (kind, n, ms) in kinds.iter().take(SHOWN) {
        println!(
            "  {n:>6}  {ms:>9.3}  {:>5.1}%  {:>9.4}  {kind}",
            100.0 * ms / total.max(f64::MIN_POSITIVE),
            ms / *n as f64
        );
    }
}

/// Prints the zoo (`hidet zoo`, `hidet bench --list`).
pub fn list_zoo() {
    for e in zoo::entries() {
        println!("{}{:<14} {}", zoo::PREFIX, e.name, e.description);
    }
}
