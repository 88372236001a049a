//! Post-scheduling fusion into the matmul template: prologues on `A`
//! (relu) and `B` (an im2col-like Toeplitz gather) and epilogues (bias +
//! relu + residual add, and a transposing one) fused with
//! `hidet_ir::fusion::fuse`, built, run, and compared with float64, on odd
//! shapes including `K > KC`, parallel-k, batch matmul and an `A` read
//! through a transpose (packed column by column).

use crate::common;

use common::{options_in, Rng};
use hidet_cpu::templates::matmul::{matmul_f32_with_layout, ALayout, MatmulShape, ThreadSplit};
use hidet_cpu::templates::{batch_matmul_f32, matmul_f32, MatmulSchedule};
use hidet_cpu::{build, CpuTarget, KernelArg};
use hidet_ir::fusion::{fuse, Epilogue, Prologue};
use hidet_ir::prelude::*;

fn tensor(name: &str, shape: &[i64]) -> Var {
    Var::new(name, Type::tensor(DataType::F32, row_major(shape.to_vec())))
}

fn index_vars(prefix: &str, rank: usize) -> Vec<Var> {
    (0..rank)
        .map(|d| Var::new(format!("{prefix}{d}"), DataType::I32))
        .collect()
}

fn exprs(vars: &[Var]) -> Vec<Expr> {
    vars.iter().map(Var::expr).collect()
}

/// The fused epilogue of a case.
#[derive(Clone, Copy, Debug)]
enum Tail {
    /// `out[.., i, j] = relu(C[.., i, j] + bias[j]) + res[.., i, j]`.
    BiasReluResidual,
    /// `out[j, i] = 0.5 · C[i, j] + bias[j]` (rank 2 only).
    Transposed,
}

/// One fused kernel to check.
struct Case {
    shape: MatmulShape,
    batched: bool,
    toeplitz_b: bool,
    /// `X` is stored `[k, m]` and `A = relu(Xᵀ)` (rank 2 only): the template packs `A` as
    /// [`ALayout::ColumnMajor`].
    a_transposed: bool,
    tail: Tail,
    schedule: MatmulSchedule,
}

/// `max(x, 0)`.
fn relu(x: f64) -> f64 {
    x.max(0.0)
}

/// Fuses the case's prologues and epilogue into the template, builds it,
/// runs it on random data and checks every output against float64.
fn run_case(case: &Case, seed: u64) {
    let s = case.shape;
    let template = if case.batched {
        batch_matmul_f32("fused", &s, &case.schedule)
    } else if case.a_transposed {
        matmul_f32_with_layout("fused", s.m, s.n, s.k, ALayout::ColumnMajor, &case.schedule)
    } else {
        matmul_f32("fused", s.m, s.n, s.k, &case.schedule)
    }
    .expect("valid instantiation");
    let [ta, tb, tc] = template.params.as_slice() else {
        panic!("the template takes (A, B, C)");
    };
    let lead = |b: i64| if case.batched { vec![b] } else { vec![] };
    let dims = |b: i64, r: i64, c: i64| [lead(b), vec![r, c]].concat();
    let rank = if case.batched { 3 } else { 2 };

    // A = relu(X), or relu(Xᵀ).
    assert!(
        !(case.a_transposed && case.batched),
        "a transposed A is rank 2"
    );
    let x_shape = if case.a_transposed {
        vec![s.k, s.m]
    } else {
        dims(s.a_batch, s.m, s.k)
    };
    let x = tensor("X", &x_shape);
    let pa = index_vars("a", rank);
    let x_at = if case.a_transposed {
        vec![pa[1].expr(), pa[0].expr()]
    } else {
        exprs(&pa)
    };
    let prologue_a = Prologue {
        param: ta.clone(),
        axes: pa.clone(),
        value: x.at(x_at).max(Expr::f32(0.0)),
    };
    // B[.., r, j] = y[.., r + j] (Toeplitz), or B itself.
    let y_len = s.k + s.n - 1;
    let y = tensor("Y", &[lead(s.b_batch), vec![y_len]].concat());
    let pb = index_vars("b", rank);
    let prologue_b = Prologue {
        param: tb.clone(),
        axes: pb.clone(),
        value: {
            let mut idx: Vec<Expr> = exprs(&pb[..rank - 2]);
            idx.push(pb[rank - 2].expr() + pb[rank - 1].expr());
            y.at(idx)
        },
    };
    let bias = tensor("bias", &[s.n]);
    let e = index_vars("e", rank);
    let stored = Var::new("v", DataType::F32);
    let res = tensor("res", &dims(s.batch, s.m, s.n));
    let (out, epilogue) = match case.tail {
        Tail::BiasReluResidual => {
            let out = tensor("out", &dims(s.batch, s.m, s.n));
            let value = (stored.expr() + bias.at([e[rank - 1].expr()])).max(Expr::f32(0.0))
                + res.at(exprs(&e));
            (
                out.clone(),
                Epilogue {
                    param: tc.clone(),
                    axes: e.clone(),
                    stored: stored.clone(),
                    output: out,
                    indices: exprs(&e),
                    value,
                },
            )
        }
        Tail::Transposed => {
            assert!(!case.batched, "the transposing case is rank 2");
            let out = tensor("out", &[s.n, s.m]);
            let value = stored.expr() * Expr::f32(0.5) + bias.at([e[1].expr()]);
            (
                out.clone(),
                Epilogue {
                    param: tc.clone(),
                    axes: e.clone(),
                    stored: stored.clone(),
                    output: out,
                    indices: vec![e[1].expr(), e[0].expr()],
                    value,
                },
            )
        }
    };
    let mut params = vec![x.clone()];
    let mut prologues = vec![prologue_a];
    if case.toeplitz_b {
        params.push(y.clone());
        prologues.push(prologue_b);
    } else {
        params.push(tb.clone());
    }
    params.push(bias.clone());
    if matches!(case.tail, Tail::BiasReluResidual) {
        params.push(res.clone());
    }
    params.push(out);
    let fused = fuse(&template, params, &prologues, Some(&epilogue))
        .expect("the template only loads A/B elements and stores each C element once");

    let dir = tempfile::tempdir().expect("temp dir");
    let module = IRModule::new("fused_mm", Target::Cpu).with(fused);
    let compiled = build(module, &options_in(dir.path())).expect("builds");
    compiled
        .set_num_threads(case.schedule.threads as usize)
        .expect("exported by the C dialect");

    let (bt, m, n, k) = (s.batch as usize, s.m as usize, s.n as usize, s.k as usize);
    let (ab, bb) = (s.a_batch as usize, s.b_batch as usize);
    let mut rng = Rng::new(seed);
    let xs = rng.vec_f32(ab * m * k);
    let ys = rng.vec_f32(
        bb * if case.toeplitz_b {
            y_len as usize
        } else {
            k * n
        },
    );
    let biases = rng.vec_f32(n);
    let residual = rng.vec_f32(bt * m * n);
    let mut got = vec![f32::NAN; bt * m * n];
    let udims = |d: Vec<i64>| d.into_iter().map(|v| v as usize).collect::<Vec<_>>();
    let x_dims = udims(x_shape);
    let y_dims = if case.toeplitz_b {
        udims([lead(s.b_batch), vec![y_len]].concat())
    } else {
        udims(dims(s.b_batch, s.k, s.n))
    };
    let out_dims = match case.tail {
        Tail::BiasReluResidual => udims(dims(s.batch, s.m, s.n)),
        Tail::Transposed => vec![n, m],
    };
    let mut args = vec![
        KernelArg::tensor(&xs, &x_dims),
        KernelArg::tensor(&ys, &y_dims),
        KernelArg::tensor(&biases, &[n]),
    ];
    if matches!(case.tail, Tail::BiasReluResidual) {
        args.push(KernelArg::tensor(&residual, &out_dims));
    }
    args.push(KernelArg::tensor_mut(&mut got, &out_dims));
    compiled
        .kernel("fused")
        .expect("kernel exists")
        .call(&mut args)
        .expect("arguments match");

    let b_elem = |b: usize, r: usize, j: usize| -> f64 {
        let b = if bb == 1 { 0 } else { b };
        if case.toeplitz_b {
            f64::from(ys[b * y_len as usize + r + j])
        } else {
            f64::from(ys[(b * k + r) * n + j])
        }
    };
    for b in 0..bt {
        let ao = if ab == 1 { 0 } else { b * m * k };
        for i in 0..m {
            for (j, &bias_j) in biases.iter().enumerate() {
                let (mut c, mut magnitude) = (0.0f64, 0.0f64);
                for r in 0..k {
                    let x = if case.a_transposed {
                        xs[r * m + i]
                    } else {
                        xs[ao + i * k + r]
                    };
                    let term = relu(f64::from(x)) * b_elem(b, r, j);
                    c += term;
                    magnitude += term.abs();
                }
                let bias_j = f64::from(bias_j);
                let (want, at) = match case.tail {
                    Tail::BiasReluResidual => {
                        let at = (b * m + i) * n + j;
                        (relu(c + bias_j) + f64::from(residual[at]), at)
                    }
                    Tail::Transposed => (0.5 * c + bias_j, j * m + i),
                };
                let tolerance = 1e-5 * (magnitude + want.abs() + bias_j.abs() + 1.0);
                let g = f64::from(got[at]);
                assert!(
                    (g - want).abs() <= tolerance,
                    "{s:?} {:?} {:?}: element ({b}, {i}, {j}) = {g}, float64 reference {want}",
                    case.tail,
                    case.schedule
                );
            }
        }
    }
}

fn host(threads: i64) -> MatmulSchedule {
    MatmulSchedule::for_target(CpuTarget::host(), threads)
}

#[test]
fn relu_and_toeplitz_prologues_with_bias_relu_residual_epilogue() {
    for threads in [1, 2] {
        run_case(
            &Case {
                shape: MatmulShape::plain(37, 101, 53),
                batched: false,
                toeplitz_b: true,
                a_transposed: false,
                tail: Tail::BiasReluResidual,
                schedule: host(threads),
            },
            200 + threads as u64,
        );
    }
    run_case(
        &Case {
            shape: MatmulShape::plain(129, 67, 300),
            batched: false,
            toeplitz_b: true,
            a_transposed: false,
            tail: Tail::BiasReluResidual,
            schedule: host(2),
        },
        211,
    );
}

#[test]
fn transposing_epilogue_with_k_beyond_one_cache_block() {
    run_case(
        &Case {
            shape: MatmulShape::plain(129, 67, 300),
            batched: false,
            toeplitz_b: false,
            a_transposed: false,
            tail: Tail::Transposed,
            schedule: host(2),
        },
        221,
    );
    run_case(
        &Case {
            shape: MatmulShape::plain(37, 101, 53),
            batched: false,
            toeplitz_b: true,
            a_transposed: false,
            tail: Tail::Transposed,
            schedule: host(1),
        },
        223,
    );
}

#[test]
fn parallel_k_and_batch_matmul_fuse_too() {
    let parallel_k = MatmulSchedule {
        split: ThreadSplit::ParallelK,
        ..host(2)
    };
    run_case(
        &Case {
            shape: MatmulShape::plain(3, 77, 1001),
            batched: false,
            toeplitz_b: true,
            a_transposed: false,
            tail: Tail::BiasReluResidual,
            schedule: parallel_k,
        },
        231,
    );
    run_case(
        &Case {
            shape: MatmulShape {
                batch: 3,
                a_batch: 3,
                b_batch: 1,
                ..MatmulShape::plain(19, 45, 280)
            },
            batched: true,
            toeplitz_b: true,
            a_transposed: false,
            tail: Tail::BiasReluResidual,
            schedule: host(2),
        },
        233,
    );
}

#[test]
fn column_major_a_is_packed_column_by_column() {
    let lanes = CpuTarget::host().f32_lanes().max(4);
    let small = MatmulSchedule::new(
        3,
        2 * i64::from(lanes),
        lanes,
        6,
        4 * i64::from(lanes),
        16,
        2,
    );
    for (shape, schedule, seed) in [
        (MatmulShape::plain(37, 101, 53), host(1), 241),
        (MatmulShape::plain(129, 67, 300), host(2), 243),
        (
            MatmulShape::plain(29, 3 * i64::from(lanes) + 5, 53),
            small,
            245,
        ),
        (MatmulShape::plain(1, 77, 301), host(2), 247),
    ] {
        run_case(
            &Case {
                shape,
                batched: false,
                toeplitz_b: true,
                a_transposed: true,
                tail: Tail::BiasReluResidual,
                schedule,
            },
            seed,
        );
    }
}
