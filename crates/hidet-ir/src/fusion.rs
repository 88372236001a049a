//! Post-scheduling fusion (DESIGN §2): inlining prologues and epilogues into
//! an already scheduled kernel.
//!
//! A template is written with no knowledge of fusion: it loads its inputs
//! with `A[idx]` and stores its output with `C[idx] = v`. [`fuse`] rewrites
//! such a kernel so that
//!
//! - every load `A[idx]` of a fused input becomes the prologue's expression
//!   with its axes replaced by `idx` (reading the fused kernel's own inputs),
//! - every store `C[idx] = v` of the fused output becomes
//!   `Out[inverse(idx)] = epilogue(v, idx)`.
//!
//! Where the template touches a fused tensor in a way the rewrite cannot
//! follow — taking its address, passing it on as a pointer, loading from the
//! output — [`fuse`] refuses with a [`FusionError`], and the caller keeps the
//! operators as separate kernels. It never produces a kernel that computes
//! something else.

use crate::expr::{Expr, ExprKind, Var};
use crate::function::Function;
use crate::stmt::Stmt;
use std::collections::{HashMap, HashSet};

/// Why a kernel could not be fused.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum FusionError {
    #[error("in `{function}`: `{param}` is not a parameter of the kernel")]
    NotAParameter { function: String, param: String },
    #[error("in `{function}`: `{param}` is used other than by element loads/stores ({how}); cannot fuse through it")]
    Untraceable {
        function: String,
        param: String,
        how: &'static str,
    },
    #[error("in `{function}`: {what} has {given} axes/indices but `{param}` has rank {rank}")]
    RankMismatch {
        function: String,
        param: String,
        what: &'static str,
        given: usize,
        rank: usize,
    },
    #[error("in `{function}`: after fusion the body uses `{var}`, which is not among the new parameters")]
    MissingParameter { function: String, var: String },
    #[error("in `{function}`: `{param}` is both a prologue and the epilogue")]
    Conflict { function: String, param: String },
}

/// Replaces the loads of one input parameter of a template.
#[derive(Clone, Debug)]
pub struct Prologue {
    /// The template's tensor parameter whose element loads are replaced.
    pub param: Var,
    /// One index variable per dimension of `param`.
    pub axes: Vec<Var>,
    /// The element `param[axes]` as an expression of `axes` that reads only
    /// the fused kernel's parameters.
    pub value: Expr,
}

/// Replaces the stores to the template's output parameter.
#[derive(Clone, Debug)]
pub struct Epilogue {
    /// The template's output tensor parameter.
    pub param: Var,
    /// One index variable per dimension of `param` (the template's store index).
    pub axes: Vec<Var>,
    /// Stands for the value the template stores, inside `value`.
    pub stored: Var,
    /// The tensor really written (a parameter of the fused kernel).
    pub output: Var,
    /// The index of `output` as expressions of `axes` (the epilogue's inverse index map).
    pub indices: Vec<Expr>,
    /// The value written, an expression of `stored`, `axes` and the fused kernel's parameters.
    pub value: Expr,
}

fn rank_of(v: &Var) -> usize {
    v.ty().as_tensor().map_or(1, |t| t.layout.rank())
}

/// Rewrites `template` with `prologues` and `epilogue` (see the module docs).
/// The fused kernel has exactly `params`, in that order; every variable the
/// rewritten body reads that is not defined inside it must be among them.
pub fn fuse(
    template: &Function,
    params: Vec<Var>,
    prologues: &[Prologue],
    epilogue: Option<&Epilogue>,
) -> Result<Function, FusionError> {
    let function = template.name.clone();
    let is_param = |v: &Var| template.params.contains(v);
    let mut fused: HashSet<Var> = HashSet::new();
    for p in prologues {
        if !is_param(&p.param) {
            return Err(FusionError::NotAParameter {
                function,
                param: p.param.name().to_string(),
            });
        }
        if p.axes.len() != rank_of(&p.param) {
            return Err(FusionError::RankMismatch {
                function,
                param: p.param.name().to_string(),
                what: "the prologue",
                given: p.axes.len(),
                rank: rank_of(&p.param),
            });
        }
        fused.insert(p.param.clone());
    }
    if let Some(e) = epilogue {
        if !is_param(&e.param) {
            return Err(FusionError::NotAParameter {
                function,
                param: e.param.name().to_string(),
            });
        }
        if fused.contains(&e.param) {
            return Err(FusionError::Conflict {
                function,
                param: e.param.name().to_string(),
            });
        }
        if e.axes.len() != rank_of(&e.param) {
            return Err(FusionError::RankMismatch {
                function,
                param: e.param.name().to_string(),
                what: "the epilogue",
                given: e.axes.len(),
                rank: rank_of(&e.param),
            });
        }
        if e.indices.len() != rank_of(&e.output) {
            return Err(FusionError::RankMismatch {
                function,
                param: e.output.name().to_string(),
                what: "the epilogue's output index",
                given: e.indices.len(),
                rank: rank_of(&e.output),
            });
        }
    }
    check_traceable(template, &fused, epilogue.map(|e| &e.param))?;

    let by_param: HashMap<&Var, &Prologue> = prologues.iter().map(|p| (&p.param, p)).collect();
    let mut rewrite_expr = |e: &Expr| -> Expr {
        e.rewrite(&mut |x| match x.kind() {
            ExprKind::TensorElement { tensor, indices } => by_param.get(tensor).map(|p| {
                let map: HashMap<Var, Expr> = p
                    .axes
                    .iter()
                    .cloned()
                    .zip(indices.iter().cloned())
                    .collect();
                p.value.substitute(&map)
            }),
            _ => None,
        })
    };
    let mut rewrite_stmt = |s: Stmt| -> Stmt {
        match (s, epilogue) {
            (
                Stmt::Store {
                    tensor,
                    indices,
                    value,
                },
                Some(e),
            ) if tensor == e.param => {
                let stored = Var::new(e.stored.name(), e.stored.ty().clone());
                let mut map: HashMap<Var, Expr> = e
                    .axes
                    .iter()
                    .cloned()
                    .zip(indices.iter().cloned())
                    .collect();
                let out_indices: Vec<Expr> = e.indices.iter().map(|i| i.substitute(&map)).collect();
                map.insert(e.stored.clone(), stored.expr());
                Stmt::Let {
                    var: stored,
                    value,
                    body: Box::new(Stmt::Store {
                        tensor: e.output.clone(),
                        indices: out_indices,
                        value: e.value.substitute(&map),
                    }),
                }
            }
            (s, _) => s,
        }
    };
    let body = template.body.rewrite(&mut rewrite_stmt, &mut rewrite_expr);
    let result = Function {
        name: template.name.clone(),
        kind: template.kind.clone(),
        params,
        ret: template.ret.clone(),
        body,
    };
    check_parameters(&result)?;
    Ok(result)
}

/// Refuses uses of fused tensors other than element loads of prologue
/// params and element stores to the epilogue param.
fn check_traceable(
    f: &Function,
    inputs: &HashSet<Var>,
    output: Option<&Var>,
) -> Result<(), FusionError> {
    let is_fused = |v: &Var| inputs.contains(v) || output == Some(v);
    let mut problem: Option<(String, &'static str)> = None;
    let check_expr = |e: &Expr, problem: &mut Option<(String, &'static str)>| {
        e.visit(&mut |x| match x.kind() {
            ExprKind::Var(v) if is_fused(v) => {
                problem.get_or_insert((v.name().to_string(), "used as a value or pointer"));
            }
            ExprKind::Address(inner) => {
                if let ExprKind::TensorElement { tensor, .. } = inner.kind() {
                    if is_fused(tensor) {
                        problem.get_or_insert((tensor.name().to_string(), "its address is taken"));
                    }
                }
            }
            ExprKind::TensorElement { tensor, .. } if output == Some(tensor) => {
                problem.get_or_insert((tensor.name().to_string(), "the output is read back"));
            }
            _ => {}
        });
    };
    f.body.visit(&mut |s| {
        for e in s.exprs() {
            check_expr(e, &mut problem);
        }
        match s {
            Stmt::Store { tensor, .. } if inputs.contains(tensor) => {
                problem.get_or_insert((tensor.name().to_string(), "a fused input is written"));
            }
            Stmt::Assign { var, .. } if is_fused(var) => {
                problem.get_or_insert((var.name().to_string(), "it is reassigned"));
            }
            _ => {}
        }
    });
    match problem {
        Some((param, how)) => Err(FusionError::Untraceable {
            function: f.name.clone(),
            param,
            how,
        }),
        None => Ok(()),
    }
}

/// Every free variable or tensor of the body must be a parameter.
fn check_parameters(f: &Function) -> Result<(), FusionError> {
    let mut bound: HashSet<Var> = f.params.iter().cloned().collect();
    f.body.visit(&mut |s| match s {
        Stmt::Declare { var, .. } | Stmt::Let { var, .. } | Stmt::For { var, .. } => {
            bound.insert(var.clone());
        }
        Stmt::ForMapping { vars, .. } => bound.extend(vars.iter().cloned()),
        _ => {}
    });
    let mut missing: Option<String> = None;
    let mut note = |v: &Var| {
        if !bound.contains(v) {
            missing.get_or_insert(v.name().to_string());
        }
    };
    f.body.visit(&mut |s| {
        if let Stmt::Store { tensor, .. } | Stmt::Assign { var: tensor, .. } = s {
            note(tensor);
        }
        for e in s.exprs() {
            e.visit(&mut |x| match x.kind() {
                ExprKind::Var(v) => note(v),
                ExprKind::TensorElement { tensor, .. } => note(tensor),
                _ => {}
            });
        }
    });
    match missing {
        Some(var) => Err(FusionError::MissingParameter {
            function: f.name.clone(),
            var,
        }),
        None => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::builder::FunctionBuilder;
    use crate::dtype::DataType;
    use crate::interp::{run_function, Arg, Buffer};
    use crate::layout::row_major;
    use crate::ty::Type;

    const M: i64 = 5;
    const N: i64 = 3;
    const K: i64 = 7;

    /// A naive matmul template: c[i, j] = Σ_k a[i, k] · b[k, j].
    fn matmul_template() -> (Function, Var, Var, Var) {
        let mut fb = FunctionBuilder::cpu_kernel("matmul");
        let a = fb.tensor_param("a", DataType::F32, [M, K]);
        let b = fb.tensor_param("b", DataType::F32, [K, N]);
        let c = fb.tensor_param("c", DataType::F32, [M, N]);
        fb.for_range("i", M, |fb, i| {
            fb.for_range("j", N, |fb, j| {
                let acc = fb.var("acc", Expr::f32(0.0));
                fb.for_range("k", K, |fb, k| {
                    fb.assign(
                        &acc,
                        acc.expr() + a.at([i.clone(), k.clone()]) * b.at([k, j.clone()]),
                    );
                });
                fb.store(&c, [i, j], acc.expr());
            });
        });
        (fb.finish(), a, b, c)
    }

    fn data(len: i64, seed: i64) -> Vec<f64> {
        (0..len)
            .map(|i| (((i * 37 + seed * 11) % 23) as f64 - 11.0) * 0.13)
            .collect()
    }

    #[test]
    fn prologue_and_transposing_epilogue_compute_the_fused_graph() {
        let (template, a, b, c) = matmul_template();
        // x -> relu -> a;  out[j, i] = c[i, j] + bias[j]
        let x = Var::new("x", Type::tensor(DataType::F32, row_major([M, K])));
        let bias = Var::new("bias", Type::tensor(DataType::F32, row_major([N])));
        let out = Var::new("out", Type::tensor(DataType::F32, row_major([N, M])));
        let (p0, p1) = (Var::new("p0", DataType::I32), Var::new("p1", DataType::I32));
        let prologue = Prologue {
            param: a.clone(),
            axes: vec![p0.clone(), p1.clone()],
            value: x.at([p0.expr(), p1.expr()]).max(Expr::f32(0.0)),
        };
        let (e0, e1) = (Var::new("e0", DataType::I32), Var::new("e1", DataType::I32));
        let stored = Var::new("v", DataType::F32);
        let epilogue = Epilogue {
            param: c.clone(),
            axes: vec![e0.clone(), e1.clone()],
            stored: stored.clone(),
            output: out.clone(),
            indices: vec![e1.expr(), e0.expr()],
            value: stored.expr() + bias.at([e1.expr()]),
        };
        let fused = fuse(
            &template,
            vec![x, b, bias, out],
            &[prologue],
            Some(&epilogue),
        )
        .unwrap();

        let (xs, bs, biases) = (data(M * K, 1), data(K * N, 2), data(N, 3));
        let mut args = vec![
            Arg::Buffer(Buffer::from_f64(DataType::F32, &xs)),
            Arg::Buffer(Buffer::from_f64(DataType::F32, &bs)),
            Arg::Buffer(Buffer::from_f64(DataType::F32, &biases)),
            Arg::Buffer(Buffer::zeros(DataType::F32, (N * M) as usize)),
        ];
        run_function(&fused, &mut args).unwrap();
        let Arg::Buffer(got) = &args[3] else {
            unreachable!("argument 3 is a buffer")
        };
        let got = got.to_f64();
        for i in 0..M {
            for j in 0..N {
                let dot: f64 = (0..K)
                    .map(|k| xs[(i * K + k) as usize].max(0.0) * bs[(k * N + j) as usize])
                    .sum();
                let want = dot + biases[j as usize];
                let g = got[(j * M + i) as usize];
                assert!((g - want).abs() < 1e-4, "out[{j}, {i}] = {g}, want {want}");
            }
        }
    }

    #[test]
    fn refuses_a_template_that_takes_an_input_address() {
        let mut fb = FunctionBuilder::cpu_kernel("copy");
        let a = fb.tensor_param("a", DataType::F32, [4i64]);
        let c = fb.tensor_param("c", DataType::F32, [4i64]);
        let view = fb.view("v", DataType::F32, row_major([4i64]), a.at([0]).address());
        fb.for_range("i", 4, |fb, i| fb.store(&c, [i.clone()], view.at([i])));
        let template = fb.finish();
        let x = Var::new("x", Type::tensor(DataType::F32, row_major([4i64])));
        let p = Var::new("p", DataType::I32);
        let prologue = Prologue {
            param: a,
            axes: vec![p.clone()],
            value: x.at([p.expr()]) * Expr::f32(2.0),
        };
        let err = fuse(&template, vec![x, c], &[prologue], None).unwrap_err();
        assert!(
            matches!(
                err,
                FusionError::Untraceable {
                    how: "its address is taken",
                    ..
                }
            ),
            "{err}"
        );
    }

    #[test]
    fn refuses_reading_the_output_back_and_missing_parameters() {
        let (template, a, b, c) = matmul_template();
        let out = Var::new("out", Type::tensor(DataType::F32, row_major([M, N])));
        let (e0, e1) = (Var::new("e0", DataType::I32), Var::new("e1", DataType::I32));
        let stored = Var::new("v", DataType::F32);
        let epilogue = Epilogue {
            param: c.clone(),
            axes: vec![e0.clone(), e1.clone()],
            stored: stored.clone(),
            output: out.clone(),
            indices: vec![e0.expr(), e1.expr()],
            value: stored.expr(),
        };
        let err = fuse(&template, vec![a.clone(), b.clone()], &[], Some(&epilogue)).unwrap_err();
        assert!(matches!(err, FusionError::MissingParameter { .. }), "{err}");

        let mut fb = FunctionBuilder::cpu_kernel("accumulate");
        let x = fb.tensor_param("x", DataType::F32, [3i64]);
        let y = fb.tensor_param("y", DataType::F32, [3i64]);
        fb.for_range("i", 3, |fb, i| {
            fb.store(&y, [i.clone()], y.at([i.clone()]) + x.at([i]))
        });
        let template = fb.finish();
        let out = Var::new("out", Type::tensor(DataType::F32, row_major([3i64])));
        let e = Var::new("e", DataType::I32);
        let epilogue = Epilogue {
            param: y,
            axes: vec![e.clone()],
            stored: stored.clone(),
            output: out.clone(),
            indices: vec![e.expr()],
            value: stored.expr(),
        };
        let err = fuse(&template, vec![x, out], &[], Some(&epilogue)).unwrap_err();
        assert!(
            matches!(
                err,
                FusionError::Untraceable {
                    how: "the output is read back",
                    ..
                }
            ),
            "{err}"
        );
    }
}
