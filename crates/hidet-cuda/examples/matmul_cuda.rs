//! The paper's SIMT fp32 matmul template, instantiated for a sample of its
//! schedule space and written out as CUDA C.
//!
//! ```text
//! cargo run --release -p hidet-cuda --example matmul_cuda -- --emit DIR [--shape M,N,K]
//! ```
//!
//! Writes one self-contained `.cu` file per schedule into `DIR` and prints
//! each file with its schedule. When NVRTC and `ptxas` are available (see
//! `scripts/setup_python.sh`), each file is also compiled for sm_80 and the
//! registers, spills and shared memory per thread block are printed.

use hidet_cuda::templates::matmul_simt::{
    build, kernel_name, schedule_space, showcase_schedules, SimtLimits,
};
use hidet_cuda::{assemble, compile_to_ptx, emit_cuda, Arch, CompileOptions};
use std::path::PathBuf;
use std::process::ExitCode;

struct Args {
    emit: PathBuf,
    shape: [i64; 3],
}

fn parse_args() -> Result<Args, String> {
    let mut emit = None;
    let mut shape = [1024, 1024, 1024];
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
            "-h" | "--help" => {
                return Err("usage: matmul_cuda --emit DIR [--shape M,N,K]".to_string())
            }
            other => {
                return Err(format!(
                    "unknown argument {other:?}; usage: matmul_cuda --emit DIR [--shape M,N,K]"
                ))
            }
        }
    }
    let emit = emit.ok_or("usage: matmul_cuda --emit DIR [--shape M,N,K]")?;
    Ok(Args { emit, shape })
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
    }
    Ok(())
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
