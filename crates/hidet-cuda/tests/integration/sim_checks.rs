//! Planted bugs, each reported by the GPU simulator as its named error, with the statement
//! (printed by the IR printer), the block and the thread; and the SIMT rules the checkers
//! rely on (early return, divergent branches that reconverge).

// Index loops mirror the references' formulas (lane, row, column).
#![allow(clippy::needless_range_loop)]

use crate::common;

use common::dialect_kernels::{cp_async_row, kernel, ldmatrix_module, module_of, tid};
use common::sim_support::{buf, f32s, fault, out_f32, output, simulate, simulate_with};
use hidet_cuda::sim::{
    BlockSelection, DeviceBuffer, Fault, LaunchOptions, RaceKind, SimArg, SimError, Simulator,
};
use hidet_ir::prelude::*;

/// Simulates the kernel of `module` with `args`, asserts that it faults as `pattern`
/// (matched against `&Fault`, with an optional guard) in thread `thread`, and evaluates to
/// the faulting statement.
macro_rules! assert_fault {
    ($module:expr, $args:expr, $pattern:pat $(if $guard:expr)?, $thread:expr) => {{
        let (f, stmt, thread) = fault(simulate(&$module, $args));
        assert!(matches!(&f, $pattern $(if $guard)?), "{f}");
        assert_eq!(thread, $thread);
        stmt
    }};
}

#[test]
fn missing_syncthreads_between_a_shared_store_and_another_threads_load_is_a_race() {
    // Interval 1 fills `smem`; interval 2 overwrites it and reads another warp's element
    // without a barrier in between.
    let build = |name: &str, barrier: bool| {
        let mut fb = kernel(name, 64);
        let x = fb.tensor_param("x", DataType::F32, [64]);
        let y = fb.tensor_param("y", DataType::F32, [64]);
        let smem = fb.shared_tensor("smem", DataType::F32, row_major([64]));
        fb.store(&smem, [tid()], Expr::f32(0.0));
        fb.sync_threads();
        fb.store(&smem, [tid()], x.at([tid()]));
        if barrier {
            fb.sync_threads();
        }
        fb.store(&y, [tid()], smem.at([(tid() + 32) % 64]));
        module_of(fb)
    };
    let (f, stmt, thread) = fault(simulate(
        &build("missing_sync", false),
        &mut [f32s(64), output(64)],
    ));
    let Fault::DataRace {
        memory,
        kind,
        other_thread,
        ..
    } = f
    else {
        panic!("expected a data race, got {f}");
    };
    assert_eq!(memory, "smem");
    assert_eq!(kind, RaceKind::WriteAfterRead);
    assert_eq!((thread, other_thread.0), ([32, 0, 0], [0, 0, 0]));
    assert!(
        stmt.contains("smem[threadIdx.x] = x[threadIdx.x]"),
        "{stmt}"
    );

    // With the barrier, the same kernel is clean.
    let mut args = [f32s(64), output(64)];
    simulate(&build("with_sync", true), &mut args).unwrap_or_else(|e| panic!("{e}"));
    let y = out_f32(&args, 1);
    assert!((0..64).all(|t| y[t] == ((t + 32) % 64) as f32));
}

#[test]
fn a_shuffle_under_a_lane_dependent_branch_is_divergent() {
    let mut fb = kernel("shuffle_if", 32);
    let x = fb.tensor_param("x", DataType::F32, [32]);
    let y = fb.tensor_param("y", DataType::F32, [32]);
    fb.if_then((tid() % 32).lt(16), |fb| {
        let s = Expr::call(
            Intrinsic::WarpShuffle {
                kind: ShuffleKind::Down,
                width: 32,
            },
            vec![x.at([tid()]), Expr::int(1)],
        );
        fb.store(&y, [tid()], s);
    });
    let stmt = assert_fault!(
        module_of(fb),
        &mut [f32s(32), f32s(32)],
        Fault::DivergentCollective { active: 0xffff, what } if what.contains("shuffle"),
        [0, 0, 0]
    );
    assert!(
        stmt.contains("< 16:") && stmt.contains("shfl_down"),
        "{stmt}"
    );
}

#[test]
fn a_barrier_under_a_thread_dependent_branch_is_divergent() {
    let mut fb = kernel("barrier_if", 64);
    let y = fb.tensor_param("y", DataType::F32, [64]);
    fb.if_then((tid() % 2).eq(0), |fb| {
        fb.sync_threads();
    });
    fb.store(&y, [tid()], Expr::f32(1.0));
    let (f, stmt, _) = fault(simulate(&module_of(fb), &mut [output(64)]));
    assert!(
        matches!(&f, Fault::DivergentBarrier { detail } if detail.contains("(1, 0, 0)")),
        "{f}"
    );
    assert!(stmt.contains("sync_threads()"), "{stmt}");

    // Warps waiting at two different barriers.
    let mut fb = kernel("two_barriers", 64);
    let y = fb.tensor_param("y", DataType::F32, [64]);
    fb.if_then_else(tid().lt(32), |fb| fb.sync_threads(), |fb| fb.sync_threads());
    fb.store(&y, [tid()], Expr::f32(1.0));
    let (f, _, _) = fault(simulate(&module_of(fb), &mut [output(64)]));
    assert!(
        matches!(&f, Fault::DivergentBarrier { detail } if detail.contains("another")),
        "{f}"
    );
}

#[test]
fn a_missing_cp_async_wait_leaves_pending_bytes() {
    let mut fb = kernel("no_wait", 32);
    let g = fb.tensor_param("g", DataType::F32, [32, 4]);
    let y = fb.tensor_param("y", DataType::F32, [32]);
    let smem = fb.shared_tensor("smem", DataType::F32, row_major([32, 4]));
    cp_async_row(&mut fb, 16, &smem, &g, 0, Expr::int(16));
    fb.call(Intrinsic::CpAsyncCommit, vec![]);
    fb.sync_threads();
    fb.store(&y, [tid()], smem.at([(tid() + 1) % 32, Expr::int(2)]));
    let (f, stmt, thread) = fault(simulate(&module_of(fb), &mut [f32s(128), output(32)]));
    let Fault::PendingCpAsync {
        memory,
        offset,
        issuer,
    } = f
    else {
        panic!("expected a pending cp.async, got {f}");
    };
    assert_eq!((memory.as_str(), offset, issuer.0), ("smem", 24, [1, 0, 0]));
    assert_eq!(thread, [0, 0, 0]);
    assert!(stmt.contains("y[threadIdx.x] = smem["), "{stmt}");
}

#[test]
fn ldmatrix_on_a_misaligned_row_is_reported() {
    // Rows of 9 halves (18 bytes): row 1 starts at byte 18.
    let module = ldmatrix_module(4, false, 9);
    let mut args = [
        buf(&[1.0; 32 * 9], DataType::F16),
        SimArg::Buffer(DeviceBuffer::output(DataType::F16, 32 * 8)),
    ];
    let stmt = assert_fault!(
        module,
        &mut args,
        Fault::Misaligned { align: 16, offset: 18, memory, .. } if memory == "smem",
        [1, 0, 0]
    );
    assert!(stmt.contains("ldmatrix<x4"), "{stmt}");
}

#[test]
fn a_read_of_uninitialised_shared_memory_is_reported() {
    let mut fb = kernel("uninit_shared", 64);
    let y = fb.tensor_param("y", DataType::F32, [64]);
    let smem = fb.shared_tensor("smem", DataType::F32, row_major([64]));
    fb.if_then(tid().lt(48), |fb| {
        fb.store(&smem, [tid()], Expr::f32(2.0));
    });
    fb.sync_threads();
    fb.store(&y, [tid()], smem.at([tid()]));
    let stmt = assert_fault!(
        module_of(fb),
        &mut [output(64)],
        Fault::UninitializedRead { memory, offset: 192 } if memory == "smem",
        [48, 0, 0]
    );
    assert!(
        stmt.contains("y[threadIdx.x] = smem[threadIdx.x]"),
        "{stmt}"
    );
}

#[test]
fn two_threads_writing_one_output_element_are_reported() {
    let build = |name: &str| {
        let mut fb = kernel(name, 64);
        let x = fb.tensor_param("x", DataType::F32, [64]);
        let y = fb.tensor_param("y", DataType::F32, [32]);
        fb.store(&y, [tid() / 2], x.at([tid()]));
        module_of(fb)
    };
    let stmt = assert_fault!(
        build("write_twice"),
        &mut [f32s(64), output(32)],
        Fault::OutputWrittenTwice { tensor, element: 0, first_thread, .. }
            if tensor == "y" && first_thread.0 == [0, 0, 0],
        [1, 0, 0]
    );
    assert!(
        stmt.contains("y[threadIdx.x >> 1] = x[threadIdx.x]"),
        "{stmt}"
    );

    // Without the output check, the same writes are a race (same warp, two writes).
    let (f, _, _) = fault(simulate(
        &build("write_twice_race"),
        &mut [f32s(64), f32s(32)],
    ));
    assert!(
        matches!(
            f,
            Fault::DataRace {
                kind: RaceKind::WriteAfterWrite,
                ..
            }
        ),
        "{f}"
    );
}

#[test]
fn output_elements_never_written_are_reported() {
    let mut fb = kernel("write_half", 64);
    let y = fb.tensor_param("y", DataType::F32, [64]);
    fb.if_then(tid().lt(60), |fb| fb.store(&y, [tid()], Expr::f32(1.0)));
    match simulate(&module_of(fb), &mut [output(64)]) {
        Err(SimError::OutputNeverWritten {
            tensor,
            first,
            count,
        }) => assert_eq!((tensor.as_str(), first, count), ("y", 60, 4)),
        other => panic!("expected OutputNeverWritten, got {other:?}"),
    }
}

#[test]
fn out_of_bounds_accesses_and_uninitialised_variables_are_reported() {
    let mut fb = kernel("oob", 32);
    let x = fb.tensor_param("x", DataType::F32, [32]);
    let y = fb.tensor_param("y", DataType::F32, [32]);
    fb.store(&y, [tid()], x.at([tid() + 1]));
    assert_fault!(
        module_of(fb),
        &mut [f32s(32), f32s(32)],
        Fault::IndexOutOfBounds { tensor, index: 32, extent: 32, .. } if tensor == "x",
        [31, 0, 0]
    );

    // A pointer indexed past its buffer.
    let mut fb = kernel("oob_ptr", 32);
    let p = fb.param("p", Type::pointer_to(Type::Data(DataType::F32)));
    fb.store(&p, [tid() * 2], Expr::f32(0.0));
    let (f, _, _) = fault(simulate(&module_of(fb), &mut [f32s(32)]));
    assert!(matches!(f, Fault::OutOfBounds { offset: 128, .. }), "{f}");

    let mut fb = kernel("uninit_var", 32);
    let y = fb.tensor_param("y", DataType::F32, [32]);
    let v = fb.declare("v", DataType::F32, Scope::Register);
    fb.if_then(tid().lt(8), |fb| fb.assign(&v, Expr::f32(1.0)));
    fb.store(&y, [tid()], v.expr());
    assert_fault!(
        module_of(fb),
        &mut [f32s(32)],
        Fault::UninitializedVariable { var } if var == "v",
        [8, 0, 0]
    );
}

#[test]
fn early_return_retires_lanes_and_branches_reconverge() {
    // Threads past `n` return; the rest meet at the barrier (returned threads are not
    // live, so the barrier is not divergent). A loop whose trip count differs per lane
    // runs while any lane is active.
    let mut fb = kernel("early_return", 64);
    let y = fb.tensor_param("y", DataType::F32, [64]);
    let n = fb.param("n", DataType::I32);
    let smem = fb.shared_tensor("smem", DataType::F32, row_major([64]));
    fb.if_then(tid().ge(n.expr()), |fb| fb.push(Stmt::Return(None)));
    let acc = fb.var("acc", Expr::f32(0.0));
    fb.for_range("i", tid() % 5, |fb, i| {
        fb.assign(&acc, acc.expr() + i.cast(DataType::F32));
    });
    fb.store(&smem, [tid()], acc.expr());
    fb.sync_threads();
    fb.store(&y, [tid()], smem.at([(tid() + 1) % n.expr()]));
    let mut args = [
        SimArg::Buffer(DeviceBuffer::from_f32(&[-1.0; 64])),
        SimArg::Scalar(hidet_ir::interp::Scalar::Int(40)),
    ];
    let sim_result = simulate(&module_of(fb), &mut args);
    sim_result.unwrap_or_else(|e| panic!("{e}"));
    let y = out_f32(&args, 0);
    for t in 0..64usize {
        let want = if t < 40 {
            let s = (t + 1) % 40;
            (0..s % 5).sum::<usize>() as f32
        } else {
            -1.0
        };
        assert_eq!(y[t], want, "y[{t}]");
    }
}

#[test]
fn sampled_launches_run_the_corner_blocks_and_skip_the_coverage_check() {
    let mut fb = FunctionBuilder::cuda_kernel(
        "grid",
        [Expr::int(10), Expr::int(7), Expr::int(1)],
        [32, 1, 1],
    );
    let y = fb.tensor_param("y", DataType::F32, [7, 10, 32]);
    fb.store(
        &y,
        [Expr::block_idx(Dim::Y), Expr::block_idx(Dim::X), tid()],
        Expr::f32(1.0),
    );
    let module = module_of(fb);
    let mut args = [output(7 * 10 * 32)];
    let options = LaunchOptions {
        blocks: BlockSelection::Sample { random: 3, seed: 7 },
        ..LaunchOptions::default()
    };
    let report = simulate_with(&module, &mut args, &options).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!((report.blocks_simulated, report.blocks_total), (7, 70));
    let y = args[0].buffer().expect("buffer").to_f64();
    for (bx, by) in [(0, 0), (9, 0), (0, 6), (9, 6)] {
        assert_eq!(y[(by * 10 + bx) * 32], 1.0, "corner block ({bx}, {by})");
    }
}

#[test]
fn blocks_touching_one_global_element_race() {
    // Every block accumulates into y[0]: nothing orders blocks.
    let mut fb = FunctionBuilder::cuda_kernel(
        "blocks_race",
        [Expr::int(2), Expr::int(1), Expr::int(1)],
        [32, 1, 1],
    );
    let y = fb.tensor_param("y", DataType::F32, [1]);
    fb.if_then(tid().eq(0), |fb| {
        fb.store(&y, [Expr::int(0)], y.at([Expr::int(0)]) + 1.0f32);
    });
    let module = module_of(fb);
    let mut args = [f32s(1)];
    match simulate(&module, &mut args) {
        Err(SimError::Fault(r)) => {
            assert!(
                matches!(&r.fault, Fault::DataRace { kind: RaceKind::ReadAfterWrite, other_block, .. } if other_block.0 == [0, 0, 0]),
                "{r}"
            );
            assert_eq!(r.block.0, [1, 0, 0]);
        }
        other => panic!("expected a race between blocks, got {other:?}"),
    }
    // Without the global race checker the launch runs (blocks one after another).
    let mut args = [f32s(1)];
    let options = LaunchOptions {
        global_races: false,
        ..LaunchOptions::default()
    };
    simulate_with(&module, &mut args, &options).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(out_f32(&args, 0), vec![2.0]);
}

#[test]
fn wait_group_leaves_the_youngest_groups_pending() {
    // Two groups; `wait_group 1` completes only the first: reading the second's bytes
    // faults, reading the first's does not.
    let build = |read_col: i64| {
        let mut fb = kernel("groups", 32);
        let g = fb.tensor_param("g", DataType::F32, [32, 2]);
        let y = fb.tensor_param("y", DataType::F32, [32]);
        let smem = fb.shared_tensor("smem", DataType::F32, row_major([32, 2]));
        for col in 0..2 {
            cp_async_row(&mut fb, 4, &smem, &g, col, Expr::int(4));
            fb.call(Intrinsic::CpAsyncCommit, vec![]);
        }
        fb.call(Intrinsic::CpAsyncWait { n: 1 }, vec![]);
        fb.store(&y, [tid()], smem.at([tid(), Expr::int(read_col)]));
        fb.call(Intrinsic::CpAsyncWait { n: 0 }, vec![]);
        fb
    };
    let mut args = [f32s(64), output(32)];
    simulate(&module_of(build(0)), &mut args).unwrap_or_else(|e| panic!("{e}"));
    let y = out_f32(&args, 1);
    assert!((0..32).all(|t| y[t] == (2 * t) as f32));
    let (f, _, _) = fault(simulate(&module_of(build(1)), &mut [f32s(64), output(32)]));
    assert!(matches!(f, Fault::PendingCpAsync { .. }), "{f}");
}

#[test]
fn register_tensors_start_poisoned() {
    let mut fb = kernel("uninit_regs", 32);
    let y = fb.tensor_param("y", DataType::F32, [32]);
    let r = fb.register_tensor("r", DataType::F32, row_major([4]));
    fb.store(&r, [Expr::int(0)], Expr::f32(1.0));
    fb.store(&y, [tid()], r.at([Expr::int(0)]) + r.at([Expr::int(1)]));
    assert_fault!(
        module_of(fb),
        &mut [output(32)],
        Fault::UninitializedRead { memory, offset: 4 } if memory.starts_with("r of thread"),
        [0, 0, 0]
    );
}

#[test]
fn constructs_the_simulator_does_not_model_are_refused_by_name() {
    let mut fb = kernel("calls", 32);
    let y = fb.tensor_param("y", DataType::F32, [32]);
    let call = Expr::call(
        Intrinsic::Function {
            name: "helper".into(),
            ret: Type::Data(DataType::F32),
        },
        vec![],
    );
    fb.store(&y, [tid()], call);
    match Simulator::new(&fb.finish()) {
        Err(SimError::Unsupported { what, .. }) => assert!(what.contains("`helper`"), "{what}"),
        other => panic!("expected Unsupported, got {other:?}"),
    }
    let mut fb = kernel("shared_scalar", 32);
    fb.declare("s", DataType::F32, Scope::Shared);
    match Simulator::new(&fb.finish()) {
        Err(SimError::Unsupported { what, .. }) => assert!(what.contains("`s`"), "{what}"),
        other => panic!("expected Unsupported, got {other:?}"),
    }
}
