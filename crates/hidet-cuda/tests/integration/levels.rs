//! `for_each_levels` iterates exactly `mapping.tasks_of(w)`, in order, and
//! numbers each worker's tasks with distinct slots — checked by running the
//! IR (before and after lowering) in `hidet_ir::interp`, one CUDA thread per
//! worker.

use hidet_cuda::templates::levels::for_each_levels;
use hidet_ir::interp::{run_cuda_block, Arg, Buffer};
use hidet_ir::passes::lower_function;
use hidet_ir::prelude::*;

/// A kernel in which thread `w` writes, for its `i`-th task, the task's
/// index and slot into `out[w, i, 0..rank+1]`.
fn recorder(mapping: &TaskMapping, threads: i64) -> Function {
    let rank = mapping.rank() as i64;
    let per_worker = mapping.tasks_per_worker();
    let mut fb = FunctionBuilder::cuda_kernel("record", [1, 1, 1], [threads, 1, 1]);
    let out = fb.tensor_param("out", DataType::I32, [threads, per_worker, rank + 1]);
    let tid = Expr::thread_idx(Dim::X);
    let ordinal = fb.var("ordinal", Expr::int(0));
    for_each_levels(&mut fb, mapping, tid.clone(), |fb, t| {
        for (d, e) in t.index.iter().enumerate() {
            fb.store(
                &out,
                [tid.clone(), ordinal.expr(), Expr::int(d as i64)],
                e.clone(),
            );
        }
        fb.store(
            &out,
            [tid.clone(), ordinal.expr(), Expr::int(rank)],
            t.slot.clone(),
        );
        fb.assign(&ordinal, ordinal.expr() + 1);
    });
    fb.finish()
}

fn check(mapping: &TaskMapping, threads: i64) {
    let rank = mapping.rank();
    let per_worker = mapping.tasks_per_worker() as usize;
    let original = recorder(mapping, threads);
    let lowered = lower_function(original.clone()).expect("lowering succeeds");
    for f in [&original, &lowered] {
        let len = threads as usize * per_worker * (rank + 1);
        let mut args = [Arg::Buffer(Buffer::from_i64(DataType::I32, &vec![-1; len]))];
        run_cuda_block(f, [0, 0, 0], &mut args).expect("the kernel runs");
        let Arg::Buffer(out) = &args[0] else {
            unreachable!("the argument is a buffer")
        };
        let out = out.to_i64();
        for w in 0..threads {
            let expected = mapping.tasks_of(w);
            let base = w as usize * per_worker * (rank + 1);
            let mut slots = Vec::new();
            for (i, task) in expected.iter().enumerate() {
                let rec = &out[base + i * (rank + 1)..base + (i + 1) * (rank + 1)];
                assert_eq!(
                    &rec[..rank],
                    task.as_slice(),
                    "{mapping}: worker {w}, task {i}"
                );
                slots.push(rec[rank]);
            }
            if expected.is_empty() {
                assert!(out[base..base + per_worker * (rank + 1)]
                    .iter()
                    .all(|&v| v == -1));
            }
            slots.sort_unstable();
            slots.dedup();
            assert_eq!(
                slots.len(),
                expected.len(),
                "{mapping}: slots of worker {w} repeat"
            );
            assert!(slots.iter().all(|&s| (0..per_worker as i64).contains(&s)));
        }
    }
}

#[test]
fn warp_style_composition_matches_enumeration() {
    let m = spatial([2, 2]).unwrap()
        * repeat([2, 1]).unwrap()
        * column_spatial([4, 8]).unwrap()
        * repeat_unrolled([2, 3]).unwrap();
    check(&m, 128);
}

#[test]
fn copy_mapping_from_auto_map_matches_enumeration() {
    check(&auto_map(&[12, 8], 32).unwrap(), 32);
}

#[test]
fn extra_threads_run_no_tasks() {
    // 24 workers, 40 threads: threads 24..40 must do nothing.
    let m = repeat([3]).unwrap() * spatial([6, 4]).unwrap();
    check(&m, 40);
}
