//! The `hidet` command-line tool: `hidet info`, `hidet ops`, `hidet run`, `hidet bench`,
//! `hidet compile`, `hidet zoo`, `hidet export`, `hidet tune`.
//! Every error is printed to stderr and exits with status 1; nothing panics on bad input.

mod cli;

// mimalloc, configured at load (see `hidet::allocator`).
hidet::use_mimalloc!();

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};
use hidet::pipeline::Device;
use hidet_cpu::graph_backend::tuning::model_check::DEFAULT_MAX_SPREAD;
use hidet_cuda::{Arch, CudaError};

#[derive(Parser)]
#[command(name = "hidet", version, about = "hidet deep-learning compiler")]
struct Args {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Print a model's inputs, outputs, operator histogram, parameters and estimated FLOPs.
    Info {
        /// The .onnx file, or zoo:NAME for a built-in model (see `hidet zoo`).
        model: String,
    },
    /// Write a model (an .onnx file or zoo:NAME) as an .onnx file, as imported or built (no
    /// graph pass applied): a zoo model, for other runtimes to run.
    Export {
        /// The .onnx file, or zoo:NAME for a built-in model (see `hidet zoo`).
        model: String,
        /// The .onnx file to write (replaced if it exists).
        #[arg(short, long, value_name = "FILE.onnx")]
        output: PathBuf,
    },
    /// List the supported operators with their opset ranges.
    Ops,
    /// Run a model on .npy inputs and write every output to DIR/<name>.npy.
    Run {
        /// The .onnx file, zoo:NAME for a built-in model (see `hidet zoo`), or a compiled
        /// model saved by `hidet compile -o` (run without a C compiler).
        model: PathBuf,
        /// An input as NAME=FILE.npy (repeat for every input).
        #[arg(long = "input", value_name = "NAME=FILE.npy")]
        inputs: Vec<String>,
        /// Folder for the outputs (created if missing).
        #[arg(long, value_name = "DIR")]
        output_dir: PathBuf,
        /// Use the reference executor (every operator's `eval`, on the graph as imported)
        /// instead of compiled kernels.
        #[arg(long)]
        reference: bool,
        /// Threads the compiled kernels run on (default: all cores; the reference executor
        /// runs on one).
        #[arg(long, value_name = "N", value_parser = parse_threads)]
        threads: Option<usize>,
        /// Where compiled kernels run: cpu, cuda-sim (CUDA kernels in the GPU simulator:
        /// slow, for small models) or cuda (NVIDIA GPU 0, driver loaded at run time). Default:
        /// $HIDET_DEVICE, else cpu.
        #[arg(long, value_name = "DEVICE")]
        device: Option<Device>,
    },
    /// Compile a model (an .onnx file or zoo:NAME) and time its runs.
    Bench {
        /// The .onnx file, zoo:NAME for a built-in model (see `hidet zoo`), or a compiled model
        /// saved by `hidet compile -o` (timed as loaded: no compiler, its saved shapes).
        #[arg(required_unless_present = "list")]
        model: Option<String>,
        /// An input as NAME=FILE.npy (repeatable); missing inputs get seeded random data.
        #[arg(long = "input", value_name = "NAME=FILE.npy")]
        inputs: Vec<String>,
        /// Threads the compiled kernels run on (default: all cores; the reference executor
        /// runs on one).
        #[arg(long, value_name = "N", value_parser = parse_threads)]
        threads: Option<usize>,
        /// Timed runs.
        #[arg(long, value_name = "N", default_value_t = 10)]
        runs: usize,
        /// Untimed runs before the timed ones.
        #[arg(long, value_name = "N", default_value_t = 2)]
        warmup: usize,
        /// Print one JSON object as the last line of stdout.
        #[arg(long)]
        json: bool,
        /// Time the reference executor (every operator's `eval`) instead of compiled kernels.
        #[arg(long, conflicts_with = "check")]
        reference: bool,
        /// Also run the reference executor once and report the largest output difference;
        /// fail when it exceeds --check-tolerance.
        #[arg(long)]
        check: bool,
        /// The largest output difference --check accepts, relative to the largest magnitude
        /// of the reference's output.
        #[arg(long, value_name = "FRACTION", default_value_t = 1e-3, value_parser = parse_spread)]
        check_tolerance: f64,
        /// Time every kernel of the launch list over the timed runs and print the slowest,
        /// with GFLOP/s where the kernel reduces (matmul, convolution).
        #[arg(long, conflicts_with = "reference")]
        profile: bool,
        /// List the built-in models instead.
        #[arg(long)]
        list: bool,
        /// Where compiled kernels run: cpu, cuda-sim (CUDA kernels in the GPU simulator:
        /// slow, for small models) or cuda (NVIDIA GPU 0, driver loaded at run time). Default:
        /// $HIDET_DEVICE, else cpu.
        #[arg(long, value_name = "DEVICE")]
        device: Option<Device>,
    },
    /// Compile a model (an .onnx file or zoo:NAME) through the kernel cache and report it.
    Compile {
        /// The .onnx file, or zoo:NAME for a built-in model (see `hidet zoo`).
        model: String,
        /// Write every kernel's source and the fused graph (`partition.txt`) to DIR.
        #[arg(long, value_name = "DIR")]
        emit_source: Option<PathBuf>,
        /// Print one JSON object instead of the text report.
        #[arg(long)]
        json: bool,
        /// Threads the kernels are scheduled for (default: all cores).
        #[arg(long, value_name = "N", value_parser = parse_threads)]
        threads: Option<usize>,
        /// Where compiled kernels run: cpu, cuda-sim (CUDA kernels in the GPU simulator:
        /// slow, for small models) or cuda (NVIDIA GPU 0, driver loaded at run time). Default:
        /// $HIDET_DEVICE, else cpu.
        #[arg(long, value_name = "DEVICE")]
        device: Option<Device>,
        /// The GPU architecture CUDA kernels are compiled for, with --device cuda-sim, or
        /// with --device cuda on a machine without a GPU (the kernels then go into the
        /// cubin cache for a GPU elsewhere): sm_80, sm_86, sm_89 or sm_90.
        #[arg(long, value_name = "ARCH", default_value = "sm_80", value_parser = parse_arch)]
        arch: Arch,
        /// Save the compiled model to FILE (CPU only): kernels' machine code, memory plan,
        /// weights and the CPU features it needs, in one file that `hidet run FILE` runs
        /// on another machine with no C compiler.
        #[arg(short = 'o', long = "output", value_name = "FILE")]
        output: Option<PathBuf>,
        /// Compile input NAME for this shape (`NAME=8x3x224x224`; repeatable) instead of
        /// taking every symbolic dimension as 1.
        #[arg(long = "shape", value_name = "NAME=DIMS")]
        shapes: Vec<String>,
    },
    /// List the built-in models (use them as zoo:NAME).
    Zoo,
    /// Compile a model, tuning every matmul (and, on cuda, convolution) task at --level (0:
    /// heuristic, 1: a few dozen candidates, 2: the whole space); results go to the tuning
    /// cache for later commands.
    Tune {
        /// The .onnx file, or zoo:NAME for a built-in model (see `hidet zoo`).
        model: String,
        /// Tuning level: 0, 1 or 2.
        #[arg(long, value_name = "N", default_value_t = 1)]
        level: u32,
        /// Threads the kernels are scheduled and measured with (default: all cores).
        #[arg(long, value_name = "N", value_parser = parse_threads)]
        threads: Option<usize>,
        /// An input as NAME=FILE.npy (repeatable), fixing its shape.
        #[arg(long = "input", value_name = "NAME=FILE.npy")]
        inputs: Vec<String>,
        /// At most N candidates per task (the most promising first). A result tuned with a
        /// limit is cached for its level like a complete one; use --retune to redo it.
        #[arg(long, value_name = "N")]
        max_candidates: Option<usize>,
        /// Measure again even where the tuning cache has a result.
        #[arg(long)]
        retune: bool,
        /// Runs of the model with the tuned winners and with the heuristics, interleaved,
        /// that decide per task which schedule later builds use (0: no check; winners are
        /// then used as measured alone).
        #[arg(long, value_name = "N", default_value_t = 20,
              value_parser = clap::value_parser!(u32).range(0..=10_000))]
        model_check_runs: u32,
        /// The in-model check stores its verdicts only when the model's run times spread by
        /// at most this fraction (median absolute deviation over the median); a busy machine
        /// spreads them more, and its verdicts would be noise.
        #[arg(long, value_name = "FRACTION", default_value_t = DEFAULT_MAX_SPREAD,
              value_parser = parse_spread)]
        model_check_max_spread: f64,
        /// Print one JSON object (per-task summaries) as the last stdout line.
        #[arg(long)]
        json: bool,
        /// The device tuned for: cpu (measured here), or cuda (GPU 0: the SIMT matmul and
        /// convolution schedules, timed with CUDA events; fails naming what is missing
        /// without a driver or GPU). cuda-sim is refused (the simulator has no timing).
        /// Default: $HIDET_DEVICE, else cpu.
        #[arg(long, value_name = "DEVICE")]
        device: Option<Device>,
    },
}

/// A `--model-check-max-spread` or `--check-tolerance` value: a finite, non-negative
/// fraction.
fn parse_spread(text: &str) -> Result<f64, String> {
    match text.parse::<f64>() {
        Ok(v) if v.is_finite() && v >= 0.0 => Ok(v),
        _ => Err(format!(
            "`{text}` is not a non-negative fraction (such as 0.05)"
        )),
    }
}

/// A `--arch` value: one of the architectures hidet compiles CUDA kernels for.
fn parse_arch(text: &str) -> Result<Arch, String> {
    match text {
        "sm_80" | "sm_86" | "sm_89" | "sm_90" => text.parse().map_err(|e: CudaError| e.to_string()),
        _ => Err(format!("`{text}` is not one of sm_80, sm_86, sm_89, sm_90")),
    }
}

/// A `--threads` value: a whole number of at least 1.
fn parse_threads(text: &str) -> Result<usize, String> {
    match text.parse::<usize>() {
        Ok(n) if n >= 1 => Ok(n),
        _ => Err(format!("`{text}` is not a thread count (1 or more)")),
    }
}

/// Lets a closed pipe end the process quietly, as it does other command-line tools
/// (`hidet info MODEL | head`): Rust ignores `SIGPIPE`, which turns every later `println!`
/// into a panic.
fn exit_quietly_on_closed_pipe() {
    #[cfg(unix)]
    // SAFETY: restores the default disposition of one signal before any thread is started;
    // `signal` with `SIG_DFL` installs no handler code and touches no Rust state.
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_DFL);
    }
}

fn main() -> ExitCode {
    exit_quietly_on_closed_pipe();
    let args = Args::parse();
    if let Err(e) = hidet_cpu::CpuTarget::try_host() {
        eprintln!("error: {e}");
        return ExitCode::FAILURE;
    }
    let result = match args.command {
        Command::Info { model } => cli::info::run(&model),
        Command::Export { model, output } => cli::export::run(&model, &output),
        Command::Ops => cli::ops::run(),
        Command::Run {
            model,
            inputs,
            output_dir,
            reference,
            threads,
            device,
        } => Device::resolve(device)
            .map_err(cli::CliError::from)
            .and_then(|device| {
                cli::run::run(&model, &inputs, &output_dir, reference, threads, device)
            }),
        Command::Bench {
            model,
            inputs,
            threads,
            runs,
            warmup,
            json,
            reference,
            check,
            check_tolerance,
            profile,
            list,
            device,
        } => match model {
            Some(model) if !list => Device::resolve(device)
                .map_err(cli::CliError::from)
                .and_then(|device| {
                    cli::bench::run(&cli::bench::BenchArgs {
                        model,
                        inputs,
                        threads,
                        runs,
                        warmup,
                        json,
                        reference,
                        check,
                        check_tolerance,
                        profile,
                        device,
                    })
                }),
            _ => {
                cli::bench::list_zoo();
                Ok(())
            }
        },
        Command::Compile {
            model,
            emit_source,
            json,
            threads,
            device,
            arch,
            output,
            shapes,
        } => Device::resolve(device)
            .map_err(cli::CliError::from)
            .and_then(|device| {
                cli::compile::run(&cli::compile::CompileArgs {
                    model,
                    emit_source,
                    json,
                    threads,
                    device,
                    arch,
                    output,
                    shapes,
                })
            }),
        Command::Zoo => {
            cli::bench::list_zoo();
            Ok(())
        }
        Command::Tune {
            model,
            level,
            threads,
            inputs,
            max_candidates,
            retune,
            model_check_runs,
            model_check_max_spread,
            json,
            device,
        } => Device::resolve(device)
            .map_err(cli::CliError::from)
            .and_then(|device| cli::tune::check_device(device).map(|()| device))
            .and_then(|device| {
                cli::tune::run(&cli::tune::TuneArgs {
                    device,
                    model,
                    inputs,
                    level,
                    threads,
                    max_candidates,
                    retune,
                    model_check_runs: model_check_runs as usize,
                    model_check_max_spread,
                    json,
                })
            }),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}
