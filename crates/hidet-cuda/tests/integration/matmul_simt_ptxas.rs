//! Every schedule the `matmul_cuda` example emits compiles with NVRTC for
//! sm_80 and sm_90, assembles with `ptxas -v`, and uses no local memory: no
//! register spills, no stack frame, registers within the launch bound.
//! Fails (never skips) when NVRTC or ptxas is missing.

use crate::common;

use common::{require_nvrtc, require_ptxas};
use hidet_cuda::ptxas::assemble_with;
use hidet_cuda::templates::matmul_simt::{
    build, kernel_name, schedule_space, showcase_schedules, MatmulSimtSchedule, SimtLimits,
};
use hidet_cuda::{emit_cuda, Arch, CompileOptions};

fn compile_and_check(schedule: &MatmulSimtSchedule, m: i64, n: i64, k: i64) {
    let nvrtc = require_nvrtc();
    let ptxas = require_ptxas();
    let name = kernel_name(schedule);
    let module = build(m, n, k, schedule).expect("valid schedule and shape");
    let source = emit_cuda(&module).expect("the template emits CUDA C");
    // A single-warp block also asks for one block per SM (see `matmul_simt::build_general`).
    let bounds = match schedule.threads() {
        t if t <= 32 => format!("__launch_bounds__({t}, 1)"),
        t => format!("__launch_bounds__({t})"),
    };
    assert!(source.contains(&format!("{bounds} {name}(")), "{bounds}");
    for arch in [Arch::SM80, Arch::SM90] {
        let ptx = nvrtc
            .compile_to_ptx(&name, &source, arch, &CompileOptions::default())
            .unwrap_or_else(|e| panic!("{schedule} for {arch}: {e}"));
        let report =
            assemble_with(&ptxas, &name, &ptx).unwrap_or_else(|e| panic!("{schedule}: {e}"));
        let kernel = report
            .kernel(&name)
            .unwrap_or_else(|| panic!("ptxas reported no kernel {name}: {report:?}"));
        assert!(kernel.is_entry);
        assert!(
            !kernel.spills(),
            "{schedule} on {arch} spills: {} B stored, {} B loaded ({} registers)",
            kernel.spill_store_bytes,
            kernel.spill_load_bytes,
            kernel.registers
        );
        assert_eq!(
            kernel.stack_frame_bytes, 0,
            "{schedule} on {arch} keeps arrays in local memory"
        );
        let cap = 255.min(65536 / schedule.threads()) as u32;
        assert!(
            kernel.registers <= cap,
            "{schedule}: {} registers",
            kernel.registers
        );
        // Tiles above 48 KiB live in dynamic shared memory, which ptxas does not count.
        let static_bytes = schedule.shared_bytes() - schedule.dynamic_shared_bytes();
        assert_eq!(kernel.shared_bytes, static_bytes as u64);
        assert!(report.cubin_bytes > 0);
    }
}

#[test]
fn showcase_schedules_compile_for_sm80_and_sm90_without_spills() {
    let schedules = showcase_schedules();
    assert!(schedules.len() >= 6);
    for s in &schedules {
        compile_and_check(s, 2039, 1000, 517);
    }
}

#[test]
fn divisible_shapes_compile_without_spills_too() {
    for s in &showcase_schedules()[..2] {
        compile_and_check(s, 1024, 1024, 1024);
    }
}

#[test]
fn the_register_heaviest_schedules_of_the_space_do_not_spill() {
    let mut space = schedule_space(&SimtLimits::default());
    space.sort_by_key(|s| std::cmp::Reverse(s.estimated_registers()));
    for s in space.iter().take(3) {
        compile_and_check(s, 999, 997, 995);
    }
}

/// Tiles whose buffers exceed 48 KiB (in the space of sm_80 and sm_90, not of the static
/// limit): their buffers are views of `extern __shared__` memory, launched with it as
/// dynamic shared memory; they compile without spills and declare no static shared memory.
#[test]
fn dynamic_shared_memory_tiles_compile_for_sm80_and_sm90() {
    let big: Vec<MatmulSimtSchedule> = schedule_space(&SimtLimits::for_arch(Arch::SM80))
        .into_iter()
        .filter(|s| s.dynamic_shared_bytes() > 0)
        .collect();
    assert!(!big.is_empty(), "sm_80's space has tiles above 48 KiB");
    let mut paper = showcase_schedules()[0];
    paper.block_k = 32;
    assert_eq!(paper.dynamic_shared_bytes(), 64 * 1024);
    let source = emit_cuda(&build(2039, 1000, 517, &paper).unwrap()).unwrap();
    assert!(source.contains("extern __shared__"), "{source}");
    compile_and_check(&paper, 2039, 1000, 517);
    let largest = big.iter().max_by_key(|s| s.shared_bytes()).unwrap();
    compile_and_check(largest, 999, 997, 995);
}
