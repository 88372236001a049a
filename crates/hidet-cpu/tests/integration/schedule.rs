//! The rule-based CPU scheduler against the interpreter reference (each
//! node's naive kernel) and against float64 loops, with 1 and 2 threads.

use crate::schedule_harness as harness;

use harness::{assert_close, check_all, random_inputs, reference, run_scheduled, Case, Rng};
use hidet_cpu::schedule::{schedule, ScheduleError};
use hidet_cpu::CpuTarget;
use hidet_ir::compute::{grid, reduce, tensor_input, ComputeDef, ReduceKind};
use hidet_ir::prelude::*;
use std::collections::HashMap;

fn def(
    inputs: Vec<Var>,
    nodes: Vec<(Var, hidet_ir::compute::ComputeNode)>,
    outputs: Vec<Var>,
) -> ComputeDef {
    ComputeDef::new(inputs, nodes, outputs).expect("valid definition")
}

/// `x[...]` at the last `rank(x)` of `index`, size-1 dimensions read at 0:
/// numpy-style broadcasting written as index expressions.
fn bcast(x: &Var, index: &[Expr]) -> Expr {
    let shape = hidet_ir::compute::tensor_shape(x);
    let offset = index.len() - shape.len();
    x.at(shape.iter().enumerate().map(|(d, e)| {
        if e.as_int() == Some(1) {
            Expr::int(0)
        } else {
            index[offset + d].clone()
        }
    }))
}

#[test]
fn elementwise_chains_with_broadcasting_share_one_nest() {
    let a = tensor_input("a", DataType::F32, [3, 4, 37]);
    let b = tensor_input("b", DataType::F32, [37]);
    let c = tensor_input("c", DataType::F32, [4, 1]);
    let (t, t_node) = grid("t", DataType::F32, [3, 4, 37], |i| {
        bcast(&a, i) * bcast(&b, i) + bcast(&c, i)
    });
    let (u, u_node) = grid("u", DataType::F32, [3, 4, 37], |i| {
        ((t.at(i.to_vec()) * Expr::f32(0.5)).exp() - a.at(i.to_vec())).max(Expr::f32(0.1))
    });
    let chain = def(
        vec![a.clone(), b.clone(), c.clone()],
        vec![(t.clone(), t_node), (u.clone(), u_node)],
        vec![u, t],
    );
    // add + relu on a large-ish odd shape, rank 6 with broadcasting, rank 0.
    let x = tensor_input("x", DataType::F32, [2, 3, 5, 131]);
    let y = tensor_input("y", DataType::F32, [2, 3, 5, 131]);
    let (r, r_node) = grid("relu", DataType::F32, [2, 3, 5, 131], |i| {
        (x.at(i.to_vec()) + y.at(i.to_vec())).max(Expr::f32(0.0))
    });
    let add_relu = def(vec![x, y], vec![(r.clone(), r_node)], vec![r]);
    let p = tensor_input("p", DataType::F32, [2, 1, 3, 1, 2, 5]);
    let q = tensor_input("q", DataType::F32, [5]);
    let (s, s_node) = grid("s", DataType::F32, [2, 4, 3, 2, 2, 5], |i| {
        bcast(&p, i) - bcast(&q, i)
    });
    let rank6 = def(vec![p, q], vec![(s.clone(), s_node)], vec![s]);
    let e = tensor_input("e", DataType::F32, Vec::<i64>::new());
    let f = tensor_input("f", DataType::F32, Vec::<i64>::new());
    let (g, g_node) = grid("g", DataType::F32, Vec::<i64>::new(), |_| {
        e.at(Vec::<Expr>::new()) * f.at(Vec::<Expr>::new())
    });
    let rank0 = def(vec![e, f], vec![(g.clone(), g_node)], vec![g]);
    let k = tensor_input("k", DataType::F32, [1, 1, 17]);
    let (m, m_node) = grid("m", DataType::F32, [1, 1, 17], |i| {
        k.at(i.to_vec()).sqrt() + Expr::f32(1.0)
    });
    let unit_dims = def(vec![k.clone()], vec![(m.clone(), m_node)], vec![m, k]);
    // Few long rows: rows are cut into column blocks for the threads.
    let w = tensor_input("w", DataType::F32, [2, 5003]);
    let (v, v_node) = grid("v", DataType::F32, [2, 5003], |i| {
        w.at(i.to_vec()) * Expr::f32(3.0)
    });
    let few_rows = def(vec![w], vec![(v.clone(), v_node)], vec![v]);
    check_all(&[chain, add_relu, rank6, rank0, unit_dims, few_rows], 1);
}

#[test]
fn transposes_and_reshapes_as_index_arithmetic() {
    let x = tensor_input("x", DataType::F32, [5, 6, 7]);
    let (t, t_node) = grid("t", DataType::F32, [7, 5, 6], |i| {
        x.at([i[1].clone(), i[2].clone(), i[0].clone()])
    });
    let transpose = def(vec![x.clone()], vec![(t.clone(), t_node)], vec![t]);
    let (r, r_node) = grid("r", DataType::F32, [6, 35], |i| {
        let flat = &i[0] * 35 + &i[1];
        x.at([&flat / 42, (&flat / 7) % 6, &flat % 7]) + Expr::f32(1.0)
    });
    let reshape = def(vec![x], vec![(r.clone(), r_node)], vec![r]);
    check_all(&[transpose, reshape], 2);
}

/// A transpose moving the input's contiguous axis outward runs that axis just outside the
/// innermost loop (in blocks of the innermost when it is long), and still computes the
/// transpose: channels-last to channels-first images with rows longer than a block and not a
/// multiple of it, a 2-D transpose, and a fused add reading one operand transposed.
#[test]
fn transposed_reads_run_their_contiguous_axis_inside() {
    let x = tensor_input("x", DataType::F32, [3, 5, 150, 19]);
    let (t, t_node) = grid("t", DataType::F32, [3, 19, 5, 150], |i| {
        x.at([i[0].clone(), i[2].clone(), i[3].clone(), i[1].clone()])
    });
    let images = def(vec![x], vec![(t.clone(), t_node)], vec![t]);
    let m = tensor_input("m", DataType::F32, [301, 70]);
    let (mt, mt_node) = grid("mt", DataType::F32, [70, 301], |i| {
        m.at([i[1].clone(), i[0].clone()])
    });
    let matrix = def(vec![m], vec![(mt.clone(), mt_node)], vec![mt]);
    let a = tensor_input("a", DataType::F32, [6, 9, 33]);
    let b = tensor_input("b", DataType::F32, [6, 33, 9]);
    let (s, s_node) = grid("s", DataType::F32, [6, 9, 33], |i| {
        a.at(i.to_vec()) + b.at([i[0].clone(), i[2].clone(), i[1].clone()])
    });
    let fused = def(vec![a, b], vec![(s.clone(), s_node)], vec![s]);
    for (d, axis_extent) in [(&images, 19), (&matrix, 70)] {
        let f = schedule(d, "transpose", CpuTarget::host(), 2).expect("schedules");
        let mut around_vector_loop = Vec::new();
        f.body.visit(&mut |st| {
            if let Stmt::For { extent, body, .. } = st {
                let mut direct = false;
                body.visit(&mut |inner| {
                    direct |= matches!(
                        inner,
                        Stmt::For {
                            kind: LoopKind::Vectorize,
                            ..
                        }
                    );
                });
                if direct {
                    around_vector_loop.push(extent.as_int());
                }
            }
        });
        assert!(
            around_vector_loop.contains(&Some(axis_extent)),
            "the input's contiguous axis ({axis_extent}) loops around the vectorized one: {around_vector_loop:?}"
        );
    }
    check_all(&[images, matrix, fused], 3);
}

#[test]
fn casts_comparisons_and_integer_ops() {
    let x = tensor_input("x", DataType::F32, [9, 13]);
    let n = tensor_input("n", DataType::I32, [9, 13]);
    let d = tensor_input("d", DataType::I32, [13]);
    let (to_int, ti) = grid("to_int", DataType::I32, [9, 13], |i| {
        (x.at(i.to_vec()) * Expr::f32(10.0)).cast(DataType::I32) + n.at(i.to_vec())
    });
    let (to_float, tf) = grid("to_float", DataType::F32, [9, 13], |i| {
        n.at(i.to_vec()).cast(DataType::F32) * x.at(i.to_vec())
    });
    let (positive, pos) = grid("positive", DataType::BOOL, [9, 13], |i| {
        x.at(i.to_vec()).gt(Expr::f32(0.2))
    });
    let (chosen, ch) = grid("chosen", DataType::F32, [9, 13], |i| {
        Expr::select(
            x.at(i.to_vec()).gt(Expr::f32(0.0)),
            x.at(i.to_vec()),
            n.at(i.to_vec()).cast(DataType::F32),
        )
    });
    let (ints, io) = grid("ints", DataType::I32, [9, 13], |i| {
        let (a, b) = (n.at(i.to_vec()), d.at([i[1].clone()]));
        (&a / &b) * Expr::int(3) + (&a % &b) + (a ^ b)
    });
    let casts = def(
        vec![x, n.clone(), d.clone()],
        vec![
            (to_int.clone(), ti),
            (to_float.clone(), tf),
            (positive.clone(), pos),
            (chosen.clone(), ch),
            (ints.clone(), io),
        ],
        vec![to_int, to_float, positive, chosen, ints],
    );
    let (isum, is) = reduce("isum", DataType::I32, [9], [13], ReduceKind::Sum, |i, r| {
        n.at([i[0].clone(), r[0].clone()]) * d.at([r[0].clone()])
    });
    let (imax, im) = reduce("imax", DataType::I32, [9], [13], ReduceKind::Max, |i, r| {
        n.at([i[0].clone(), r[0].clone()])
    });
    let int_reduce = def(
        vec![n, d],
        vec![(isum.clone(), is), (imax.clone(), im)],
        vec![isum, imax],
    );
    let u = tensor_input("u", DataType::U8, [4, 11]);
    let (umin, um) = reduce("umin", DataType::U8, [4], [11], ReduceKind::Min, |i, r| {
        u.at([i[0].clone(), r[0].clone()])
    });
    let bytes = def(vec![u], vec![(umin.clone(), um)], vec![umin]);
    check_all(&[casts, int_reduce, bytes], 3);
}

/// `x[5, 7, 9]` reduced over `axis` with `kind`, keeping a size-1 dimension.
fn reduce_axis(axis: usize, kind: ReduceKind) -> ComputeDef {
    let shape = [5i64, 7, 9];
    let x = tensor_input("x", DataType::F32, shape);
    let mut out_shape = shape.to_vec();
    out_shape[axis] = 1;
    let (y, node) = reduce(
        "y",
        DataType::F32,
        out_shape,
        [shape[axis]],
        kind,
        |i, r| {
            let mut index = i.to_vec();
            index[axis] = r[0].clone();
            x.at(index) * Expr::f32(1.5)
        },
    );
    def(vec![x], vec![(y.clone(), node)], vec![y])
}

#[test]
fn reductions_over_every_axis_with_keepdims() {
    let mut defs = Vec::new();
    for axis in 0..3 {
        for kind in [ReduceKind::Sum, ReduceKind::Max, ReduceKind::Min] {
            defs.push(reduce_axis(axis, kind));
        }
    }
    // Two reduction axes, a product, a full reduction to rank 0.
    let x = tensor_input("x", DataType::F32, [4, 6, 5]);
    let (y, node) = reduce("y", DataType::F32, [6], [4, 5], ReduceKind::Sum, |i, r| {
        x.at([r[0].clone(), i[0].clone(), r[1].clone()])
    });
    defs.push(def(vec![x.clone()], vec![(y.clone(), node)], vec![y]));
    let (p, node) = reduce("p", DataType::F32, [4, 6], [5], ReduceKind::Prod, |i, r| {
        x.at([i[0].clone(), i[1].clone(), r[0].clone()]) + Expr::f32(1.0)
    });
    defs.push(def(vec![x.clone()], vec![(p.clone(), node)], vec![p]));
    let (all, node) = reduce(
        "all",
        DataType::F32,
        Vec::<i64>::new(),
        [4, 6, 5],
        ReduceKind::Sum,
        |_, r| x.at(r.to_vec()),
    );
    defs.push(def(vec![x], vec![(all.clone(), node)], vec![all]));
    check_all(&defs, 4);
}

/// `mean = sum / n` as a reduce node and a grid over its shape, and a
/// keepdims variant that also outputs the sum.
#[test]
fn mean_is_a_reduction_followed_by_a_grid() {
    let x = tensor_input("x", DataType::F32, [10, 77]);
    let (s, s_node) = reduce(
        "s",
        DataType::F32,
        [10, 1],
        [77],
        ReduceKind::Sum,
        |i, r| x.at([i[0].clone(), r[0].clone()]),
    );
    let (m, m_node) = grid("mean", DataType::F32, [10, 1], |i| {
        s.at(i.to_vec()) / Expr::f32(77.0)
    });
    let keepdims = def(
        vec![x.clone()],
        vec![(s.clone(), s_node), (m.clone(), m_node)],
        vec![m, s],
    );
    let (s2, s2_node) = reduce("s", DataType::F32, [10], [77], ReduceKind::Sum, |i, r| {
        x.at([i[0].clone(), r[0].clone()])
    });
    let (m2, m2_node) = grid("mean", DataType::F32, [10], |i| {
        s2.at(i.to_vec()) / Expr::f32(77.0)
    });
    let plain = def(
        vec![x],
        vec![(s2, s2_node), (m2.clone(), m2_node)],
        vec![m2],
    );
    check_all(&[keepdims, plain], 5);
}

/// Softmax over the last axis of `[batch, rows, cols]`.
fn softmax(batch: i64, rows: i64, cols: i64) -> ComputeDef {
    let x = tensor_input("x", DataType::F32, [batch, rows, cols]);
    let (m, m_node) = reduce(
        "m",
        DataType::F32,
        [batch, rows],
        [cols],
        ReduceKind::Max,
        |i, r| x.at([i[0].clone(), i[1].clone(), r[0].clone()]),
    );
    let (e, e_node) = grid("e", DataType::F32, [batch, rows, cols], |i| {
        (x.at(i.to_vec()) - m.at([i[0].clone(), i[1].clone()])).exp()
    });
    let (s, s_node) = reduce(
        "s",
        DataType::F32,
        [batch, rows],
        [cols],
        ReduceKind::Sum,
        |i, r| e.at([i[0].clone(), i[1].clone(), r[0].clone()]),
    );
    let (y, y_node) = grid("y", DataType::F32, [batch, rows, cols], |i| {
        e.at(i.to_vec()) / s.at([i[0].clone(), i[1].clone()])
    });
    def(
        vec![x],
        vec![(m, m_node), (e, e_node), (s, s_node), (y.clone(), y_node)],
        vec![y],
    )
}

/// Layernorm over the last axis of `[rows, cols]` with `gamma`, `beta`.
fn layernorm(rows: i64, cols: i64, eps: f32) -> ComputeDef {
    let x = tensor_input("x", DataType::F32, [rows, cols]);
    let gamma = tensor_input("gamma", DataType::F32, [cols]);
    let beta = tensor_input("beta", DataType::F32, [cols]);
    let n = Expr::f32(cols as f32);
    let (s, s_node) = reduce(
        "s",
        DataType::F32,
        [rows],
        [cols],
        ReduceKind::Sum,
        |i, r| x.at([i[0].clone(), r[0].clone()]),
    );
    let (mean, mean_node) = grid("mean", DataType::F32, [rows], |i| {
        s.at(i.to_vec()) / n.clone()
    });
    let (d, d_node) = grid("d", DataType::F32, [rows, cols], |i| {
        x.at(i.to_vec()) - mean.at([i[0].clone()])
    });
    let (v, v_node) = reduce(
        "v",
        DataType::F32,
        [rows],
        [cols],
        ReduceKind::Sum,
        |i, r| {
            let t = d.at([i[0].clone(), r[0].clone()]);
            t.clone() * t
        },
    );
    let (y, y_node) = grid("y", DataType::F32, [rows, cols], |i| {
        let inv = Expr::math(
            MathFunc::Rsqrt,
            vec![v.at([i[0].clone()]) / n.clone() + Expr::f32(eps)],
        );
        d.at(i.to_vec()) * inv * gamma.at([i[1].clone()]) + beta.at([i[1].clone()])
    });
    def(
        vec![x, gamma, beta],
        vec![
            (s, s_node),
            (mean, mean_node),
            (d, d_node),
            (v, v_node),
            (y.clone(), y_node),
        ],
        vec![y],
    )
}

#[test]
fn softmax_and_layernorm_match_float64_loops() {
    let (b, r, c) = (3, 5, 129);
    let (lr, lc) = (11, 100);
    let sm = softmax(b, r, c);
    let ln = layernorm(lr, lc, 1e-5);
    let mut rng = Rng::new(6);
    let none = HashMap::new();
    let sm_in = random_inputs(&sm, &none, &mut rng);
    let ln_in = random_inputs(&ln, &none, &mut rng);
    let results = run_scheduled(
        &[
            Case {
                def: &sm,
                inputs: &sm_in,
                scalars: &none,
                scalar_order: &[],
            },
            Case {
                def: &ln,
                inputs: &ln_in,
                scalars: &none,
                scalar_order: &[],
            },
        ],
        &[1, 2],
    );

    let x = &sm_in[0];
    let mut want = vec![0.0; x.len()];
    for row in 0..(b * r) as usize {
        let xs = &x[row * c as usize..(row + 1) * c as usize];
        let m = xs.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
        let s: f64 = xs.iter().map(|v| (v - m).exp()).sum();
        for (j, v) in xs.iter().enumerate() {
            want[row * c as usize + j] = (v - m).exp() / s;
        }
    }
    for outs in &results[0] {
        assert_close(&outs[0], &want, 1e-5, 1e-7, "softmax");
    }

    let (x, gamma, beta) = (&ln_in[0], &ln_in[1], &ln_in[2]);
    let mut want = vec![0.0; x.len()];
    for row in 0..lr as usize {
        let xs = &x[row * lc as usize..(row + 1) * lc as usize];
        let mean = xs.iter().sum::<f64>() / lc as f64;
        let var = xs.iter().map(|v| (v - mean) * (v - mean)).sum::<f64>() / lc as f64;
        for (j, v) in xs.iter().enumerate() {
            want[row * lc as usize + j] = (v - mean) / (var + 1e-5).sqrt() * gamma[j] + beta[j];
        }
    }
    for outs in &results[1] {
        assert_close(&outs[0], &want, 1e-4, 1e-4, "layernorm");
    }
    // The same definitions also agree with the interpreter reference.
    check_all(&[softmax(2, 3, 17), layernorm(3, 9, 1e-3)], 7);
}

#[test]
fn half_precision_is_computed_in_f32() {
    for dtype in [DataType::F16, DataType::BF16] {
        let x = tensor_input("x", dtype, [6, 45]);
        let (y, y_node) = grid("y", dtype, [6, 45], |i| {
            x.at(i.to_vec()) * x.at(i.to_vec()) + x.at(i.to_vec())
        });
        let (s, s_node) = reduce("s", dtype, [6], [45], ReduceKind::Sum, |i, r| {
            x.at([i[0].clone(), r[0].clone()])
        });
        check_all(
            &[def(
                vec![x],
                vec![(y.clone(), y_node), (s.clone(), s_node)],
                vec![y, s],
            )],
            8,
        );
    }
}

/// `y = x + 2` and a row sum over `x[rows, 33]`.
fn row_sum_and_shift(rows: Expr) -> ComputeDef {
    let x = tensor_input("x", DataType::F32, [rows.clone(), Expr::int(33)]);
    let (y, y_node) = grid("y", DataType::F32, [rows.clone(), Expr::int(33)], |i| {
        x.at(i.to_vec()) + Expr::f32(2.0)
    });
    let (s, s_node) = reduce("s", DataType::F32, [rows], [33], ReduceKind::Sum, |i, r| {
        x.at([i[0].clone(), r[0].clone()])
    });
    def(
        vec![x],
        vec![(y.clone(), y_node), (s.clone(), s_node)],
        vec![y, s],
    )
}

#[test]
fn dynamic_rows_are_chunked_at_run_time() {
    let n = Var::new("n", DataType::I32);
    let dynamic = row_sum_and_shift(n.expr());
    for rows in [1i64, 7] {
        let scalars: HashMap<Var, i64> = [(n.clone(), rows)].into_iter().collect();
        let none = HashMap::new();
        let fixed = row_sum_and_shift(Expr::int(rows));
        let mut rng = Rng::new(9);
        let inputs = random_inputs(&fixed, &none, &mut rng);
        let want = reference(&fixed, &inputs, &none);
        let results = run_scheduled(
            &[Case {
                def: &dynamic,
                inputs: &inputs,
                scalars: &scalars,
                scalar_order: std::slice::from_ref(&n),
            }],
            &[1, 2],
        );
        for outs in &results[0] {
            assert_close(&outs[0], &want[0], 1e-6, 1e-6, "dynamic grid");
            assert_close(&outs[1], &want[1], 2e-5, 2e-5, "dynamic sum");
        }
    }
}

#[test]
fn kernels_are_parallel_and_vectorized() {
    let f = schedule(&softmax(2, 4, 64), "softmax", CpuTarget::host(), 2).expect("schedules");
    let (mut parallel, mut simd_loop, mut vector_load) = (false, false, false);
    f.body.visit(&mut |s| {
        if let Stmt::For { kind, .. } = s {
            parallel |= *kind == LoopKind::Parallel;
            simd_loop |= *kind == LoopKind::Vectorize;
        }
        for e in s.exprs() {
            e.visit(&mut |x| {
                vector_load |= matches!(x.kind(), ExprKind::Call(Intrinsic::VectorLoad { .. }, _));
            });
        }
    });
    assert!(parallel, "one parallel loop over rows");
    assert!(simd_loop, "the output row is a vectorized loop");
    if CpuTarget::host().f32_lanes() > 1 {
        assert!(vector_load, "the row reductions use explicit SIMD");
    }
    assert_eq!(f.params.len(), 2, "x, then y");
}

/// A kernel of little work runs its parallel loop as one task (waking a second thread would
/// cost more than it saves); a larger one spreads over the threads it is given.
#[test]
fn small_kernels_run_on_one_thread() {
    let tasks = |def: &ComputeDef| {
        let f = schedule(def, "softmax", CpuTarget::host(), 2).expect("schedules");
        let mut extents = Vec::new();
        f.body.visit(&mut |s| {
            if let Stmt::For {
                kind: LoopKind::Parallel,
                extent,
                ..
            } = s
            {
                extents.push(extent.as_int());
            }
        });
        extents
    };
    assert_eq!(tasks(&softmax(2, 4, 64)), vec![Some(1)]);
    assert_eq!(tasks(&softmax(4, 8, 512)), vec![Some(2)]);
}

#[test]
fn unsupported_structures_are_typed_errors() {
    let target = CpuTarget::host();
    let x = tensor_input("x", DataType::F32, [4, 6]);
    let (rows, rows_node) = reduce("rows", DataType::F32, [4], [6], ReduceKind::Sum, |i, r| {
        x.at([i[0].clone(), r[0].clone()])
    });
    let (cols, cols_node) = reduce("cols", DataType::F32, [6], [4], ReduceKind::Sum, |i, r| {
        x.at([r[0].clone(), i[0].clone()])
    });
    let two_shapes = def(
        vec![x.clone()],
        vec![(rows.clone(), rows_node.clone()), (cols.clone(), cols_node)],
        vec![rows.clone(), cols],
    );
    assert!(matches!(
        schedule(&two_shapes, "k", target, 1),
        Err(ScheduleError::Unsupported { .. })
    ));
    let (other_row, node) = grid("y", DataType::F32, [4, 6], |i| {
        x.at(i.to_vec()) - rows.at([Expr::int(0)])
    });
    let other = def(
        vec![x.clone()],
        vec![(rows.clone(), rows_node.clone()), (other_row.clone(), node)],
        vec![other_row],
    );
    assert!(matches!(
        schedule(&other, "k", target, 1),
        Err(ScheduleError::Unsupported { .. })
    ));
    let ok = def(vec![x], vec![(rows.clone(), rows_node)], vec![rows]);
    assert_eq!(
        schedule(&ok, "k", target, 0),
        Err(ScheduleError::InvalidThreads(0))
    );
    let ghost = tensor_input("ghost", DataType::F32, [3]);
    let (g, g_node) = grid("g", DataType::F32, [3], |i| ghost.at(i.to_vec()));
    let invalid = ComputeDef {
        inputs: vec![],
        nodes: vec![(g.clone(), g_node)],
        outputs: vec![g],
    };
    assert!(matches!(
        schedule(&invalid, "k", target, 1),
        Err(ScheduleError::Invalid(_))
    ));
}

/// A padded 2-D window read of `x: [c, h, w]` for output `(c, i, j)` and window point
/// `(r, s)`: `x[c, i*stride + r - pad, j*stride + s - pad]`, or `pad_value` outside.
fn window(x: &Var, i: &[Expr], r: &[Expr], stride: i64, pad: i64, pad_value: Expr) -> Expr {
    let shape: Vec<i64> = hidet_ir::compute::tensor_shape(x)
        .iter()
        .map(|d| d.as_int().expect("static shape"))
        .collect();
    let y = &i[1] * stride + &r[0] - pad;
    let z = &i[2] * stride + &r[1] - pad;
    let inside = y.ge(0).and(y.lt(shape[1])).and(z.ge(0)).and(z.lt(shape[2]));
    Expr::select(inside, x.at([i[0].clone(), y, z]), pad_value)
}

fn pooled_extent(n: i64, k: i64, stride: i64, pad: i64) -> i64 {
    (n + 2 * pad - k) / stride + 1
}

/// Pooling and depthwise convolution (many short, padded window reductions): the
/// lane-blocked rows with interior blocks free of bounds guards, on widths that leave
/// border, interior and tail blocks (30 leaves a remainder of at least half a block with
/// 8 or 16 lanes, computed by a whole block overlapping the one before).
#[test]
fn padded_windows_match_the_reference() {
    let mut defs = Vec::new();
    for (h, w, k, stride, pad) in [
        (9, 37, 3, 1, 1),
        (5, 30, 3, 1, 1),
        (11, 45, 3, 2, 1),
        (6, 21, 5, 1, 2),
        (7, 7, 3, 1, 1),
    ] {
        let (oh, ow) = (
            pooled_extent(h, k, stride, pad),
            pooled_extent(w, k, stride, pad),
        );
        let x = tensor_input("x", DataType::F32, [3, h, w]);
        let (m, node) = reduce(
            "m",
            DataType::F32,
            [3, oh, ow],
            [k, k],
            ReduceKind::Max,
            |i, r| window(&x, i, r, stride, pad, Expr::f32(f32::NEG_INFINITY)),
        );
        defs.push(def(vec![x.clone()], vec![(m.clone(), node)], vec![m]));

        // Average excluding the padding: a sum, a count, and their quotient.
        let (s, s_node) = reduce(
            "s",
            DataType::F32,
            [3, oh, ow],
            [k, k],
            ReduceKind::Sum,
            |i, r| window(&x, i, r, stride, pad, Expr::f32(0.0)),
        );
        let (n, n_node) = reduce(
            "n",
            DataType::F32,
            [3, oh, ow],
            [k, k],
            ReduceKind::Sum,
            |i, r| {
                let y = &i[1] * stride + &r[0] - pad;
                let z = &i[2] * stride + &r[1] - pad;
                let inside = y.ge(0).and(y.lt(h)).and(z.ge(0)).and(z.lt(w));
                Expr::select(inside, Expr::f32(1.0), Expr::f32(0.0))
            },
        );
        let (avg, avg_node) = grid("avg", DataType::F32, [3, oh, ow], |i| {
            s.at(i.to_vec()) / n.at(i.to_vec())
        });
        defs.push(def(
            vec![x.clone()],
            vec![(s, s_node), (n, n_node), (avg.clone(), avg_node)],
            vec![avg],
        ));

        // Depthwise convolution with a bias and a clip epilogue.
        let wt = tensor_input("wt", DataType::F32, [3, k, k]);
        let b = tensor_input("b", DataType::F32, [3]);
        let (acc, acc_node) = reduce(
            "acc",
            DataType::F32,
            [3, oh, ow],
            [k, k],
            ReduceKind::Sum,
            |i, r| {
                window(&x, i, r, stride, pad, Expr::f32(0.0))
                    * wt.at([i[0].clone(), r[0].clone(), r[1].clone()])
            },
        );
        let (y, y_node) = grid("y", DataType::F32, [3, oh, ow], |i| {
            (acc.at(i.to_vec()) + b.at([i[0].clone()]))
                .max(Expr::f32(-0.5))
                .min(Expr::f32(0.5))
        });
        defs.push(def(
            vec![x, wt, b],
            vec![(acc, acc_node), (y.clone(), y_node)],
            vec![y],
        ));
    }
    for d in &defs {
        let f = schedule(d, "window", CpuTarget::host(), 2).expect("schedules");
        let mut guarded_copy = false;
        f.body.visit(&mut |s| {
            guarded_copy |= matches!(
                s,
                Stmt::If {
                    else_body: Some(_),
                    ..
                }
            )
        });
        assert!(guarded_copy, "interior blocks get a guard-free copy");
    }
    check_all(&defs, 11);
}

/// Softmax computes each exponential once: the sum's fold stores `exp(x - max)` into the
/// output, whose pass only divides (no store of `y` computes an exponential), and the
/// results still match float64 loops on rows that are not a multiple of the SIMD width
/// (vector chunks, single vectors and a scalar tail).
#[test]
fn softmax_stores_its_exponentials_in_the_sum_pass() {
    let def = softmax(2, 3, 133);
    let f = schedule(&def, "softmax", CpuTarget::host(), 2).expect("schedules");
    let y = f.params.last().expect("y is the last parameter").clone();
    let (mut stores_of_y, mut exp_stores) = (0, 0);
    f.body.visit(&mut |s| {
        if let Stmt::Store { tensor, value, .. } = s {
            if *tensor == y {
                stores_of_y += 1;
                value.visit(&mut |x| {
                    exp_stores += usize::from(matches!(x.kind(), ExprKind::Math(MathFunc::Exp, _)));
                });
            }
        }
    });
    assert!(
        stores_of_y >= 2,
        "the fold's tail and the output pass store y"
    );
    assert_eq!(exp_stores, 0, "no store of y computes an exponential");
    check_all(&[def, softmax(1, 2, 16), softmax(1, 3, 5)], 17);
}
