//! The paper's SIMT fp32 matmul template, instantiated for a sample of its
//! schedule space and written out as CUDA C.
//!
//! ```text
//! cargo run --release -p hidet-cuda --example matmul_cuda -- --emit DIR [--shape M,N,K] [--simulate]
//! ```
//!
//! Writes one self-contained `.cu` file per schedule into `DIR` and prints
//! each file with its schedule. When NVRTC and `ptxas` are available (see
//! `scripts/setup_python.sh`), each file is also compiled for sm_80 and the
//! registers, spills and shared memory per thread block are printed.
//!
//! With `--simulate`, each schedule also runs in the GPU simulator (`hidet_cuda::sim`) on
//! integer-valued inputs in [-4, 4] (every product and sum exact in `f32`): the corner
//! blocks and 4 random others of the grid, and the largest difference from the f64
//! product over the elements those blocks computed is printed (0 for a correct kernel),
//! or the simulator's error.

use hidet_cuda::sim::{BlockSelection, DeviceBuffer, LaunchOptions, SimArg, Simulator};
use hidet_cuda::templates::matmul_simt::{
    build, kernel_name, schedule_space, showcase_schedules, SimtLimits,
};
use hidet_cuda::{assemble, compile_to_ptx, emit_cuda, Arch, CompileOptions};
use hidet_ir::function::IRModule;
use std::path::PathBuf;
use std::process::ExitCode;

struct Args {
    emit: PathBuf,
    shape: [i64; 3],
    simulate: bool,
}

fn parse_args() -> Result<Args, String> {
    let mut emit = None;
    let mut shape = [1024, 1024, 1024];
    let mut simulate = false;
    let mut it = std::env::args().skip(1);
    while let Some(arg) = it.next() {
        match arg.as_str() {
            "--emit" => emit = Some(PathBuf::from(it.next().ok_or("--emit needs a directory")?)),
            "--shape" => {
                let text = it.next().ok_or("--shape needs M,N,K")?;
                let dims: Vec<i64> = text
                    .split(',')
                    .map(|d| d.trim().parse::<i64>())
                    .collect::<Result<_, _>>()
                    .map_err(|e| format!("--shape {text}: {e}"))?;
                shape = <[i64; 3]>::try_from(dims)
                    .map_err(|_| format!("--shape {text}: expected three sizes M,N,K"))?;
            }
            "--simulate" => simulate = true,
            "-h" | "--help" => {
                return Err("usage: matmul_cuda --emit DIR [--shape M,N,K] [--simulate]".to_string())
            }
            other => {
                return Err(format!(
                    "unknown argument {other:?}; usage: matmul_cuda --emit DIR [--shape M,N,K] [--simulate]"
                ))
            }
        }
    }
    let emit = emit.ok_or("usage: matmul_cuda --emit DIR [--shape M,N,K] [--simulate]")?;
    Ok(Args {
        emit,
        shape,
        simulate,
    })
}

fn run() -> Result<(), String> {
    let args = parse_args()?;
    let [m, n, k] = args.shape;
    std::fs::create_dir_all(&args.emit)
        .map_err(|e| format!("creating {}: {e}", args.emit.display()))?;
    let space = schedule_space(&SimtLimits::default());
    println!(
        "SIMT fp32 matmul C[{m},{n}] = A[{m},{k}] * B[{k},{n}]; schedule space: {} valid schedules; emitting {}",
        space.len(),
        showcase_schedules().len()
    );
    let mut nvrtc_note_printed = false;
    for schedule in showcase_schedules() {
        let module = build(m, n, k, &schedule).map_err(|e| e.to_string())?;
        let source = emit_cuda(&module).map_err(|e| e.to_string())?;
        let name = kernel_name(&schedule);
        let path = args.emit.join(format!("{name}.cu"));
        std::fs::write(&path, &source).map_err(|e| format!("writing {}: {e}", path.display()))?;
        println!("{}  [{schedule}]", path.display());
        match compile_to_ptx(&name, &source, Arch::SM80, &CompileOptions::default()) {
            Ok(ptx) => {
                let report = assemble(&name, &ptx).map_err(|e| e.to_string())?;
                let kernel = report
                    .kernel(&name)
                    .ok_or_else(|| format!("ptxas reported no kernel {name}"))?;
                println!(
                    "    sm_80: {} registers, spill stores {} B, spill loads {} B, shared {} B",
                    kernel.registers,
                    kernel.spill_store_bytes,
                    kernel.spill_load_bytes,
                    kernel.shared_bytes
                );
            }
            Err(hidet_cuda::CudaError::NvrtcNotFound { .. }) if !nvrtc_note_printed => {
                println!("    (NVRTC not found: run scripts/setup_python.sh to see registers and spills)");
                nvrtc_note_printed = true;
            }
            Err(hidet_cuda::CudaError::NvrtcNotFound { .. }) => {}
            Err(e) => return Err(e.to_string()),
        }
        if args.simulate {
            println!("    {}", simulate(&module, &name, [m, n, k]));
        }
    }
    Ok(())
}

/// Simulates the kernel on a sample of its blocks with integer-valued inputs and reports the
/// largest difference from the f64 product among the elements written, or the error.
fn simulate(module: &IRModule, name: &str, [m, n, k]: [i64; 3]) -> String {
    let sim = match Simulator::from_module(module, name) {
        Ok(s) => s,
        Err(e) => return format!("simulator: {e}"),
    };
    let (mu, nu, ku) = (m as usize, n as usize, k as usize);
    let mut state = 0x2545_F491_4F6C_DD1Du64;
    let mut next = move || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        (state % 9) as f32 - 4.0
    };
    let a: Vec<f32> = (0..mu * ku).map(|_| next()).collect();
    let b: Vec<f32> = (0..ku * nu).map(|_| next()).collect();
    // Elements of blocks not simulated keep the NaN sentinel.
    let c0 = DeviceBuffer::from_f32(&vec![f32::NAN; mu * nu]);
    let mut args = vec![
        SimArg::Buffer(DeviceBuffer::from_f32(&a)),
        SimArg::Buffer(DeviceBuffer::from_f32(&b)),
        SimArg::Buffer(c0),
    ];
    let options = LaunchOptions {
        blocks: BlockSelection::Sample { random: 4, seed: 1 },
        ..LaunchOptions::default()
    };
    let start = std::time::Instant::now();
    let report = match sim.launch(&mut args, &options) {
        Ok(r) => r,
        Err(e) => return format!("simulated: ERROR {e}"),
    };
    let elapsed = start.elapsed();
    let Some(c) = args[2].buffer().and_then(DeviceBuffer::to_f32) else {
        return "simulated: no f32 output".to_string();
    };
    let mut worst = 0f64;
    let mut written = 0usize;
    for i in 0..mu {
        for j in 0..nu {
            let got = c[i * nu + j];
            if got.is_nan() {
                continue;
            }
            written += 1;
            let want: f64 = (0..ku)
                .map(|p| f64::from(a[i * ku + p]) * f64::from(b[p * nu + j]))
                .sum();
            worst = worst.max((f64::from(got) - want).abs());
        }
    }
    format!(
        "simulated {} of {} blocks in {elapsed:.2?}: {written} elements written, max error {worst} (exact: 0)",
        report.blocks_simulated, report.blocks_total
    )
}

fn main() -> ExitCode {
    match run() {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("matmul_cuda: {e}");
            ExitCode::FAILURE
        }
    }
}
