//! Property test of post-scheduling fusion: random small graphs (elementwise ops, broadcast
//! constants, reshapes, transposes and casts around a matmul or a row reduction) compiled
//! fused and unfused, both checked against the reference executor.

use crate::common;

use std::sync::Arc;

use common::Rng;
use hidet_cpu::graph_backend::{CpuBackend, CpuBackendOptions};
use hidet_cpu::{BuildOptions, KernelCache};
use hidet_graph::compiled::{CompileOptions, CompiledGraph};
use hidet_graph::operator::{arg, infer_arg};
use hidet_graph::{
    run_reference, Attribute, Attributes, ComputeDef, ComputeInput, DType, GraphBuilder,
    InferInput, NodeSpec, OpError, Operator, Registry, Tensor, TensorType,
};
use hidet_ir::compute::{grid, reduce, tensor_input, ReduceKind};

/// `test.Transpose2D`: `y[j, i] = x[i, j]` (with a compute definition, unlike the ONNX
/// Transpose today), so transposes can be prologues and epilogues.
#[derive(Debug)]
struct Transpose2D;

impl Operator for Transpose2D {
    fn infer(&self, inputs: &[Option<InferInput<'_>>]) -> Result<Vec<TensorType>, OpError> {
        let x = infer_arg(inputs, 0)?;
        let shape = x.ty.shape.clone().map(|s| s.into_iter().rev().collect());
        Ok(vec![TensorType {
            dtype: x.ty.dtype,
            shape,
        }])
    }

    fn eval(&self, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>, OpError> {
        let x = arg(inputs, 0)?;
        let [r, c] = x.shape() else {
            return Err(OpError::Shape("rank 2 expected".into()));
        };
        let v = x.as_slice::<f32>()?;
        let out: Vec<f32> = (0..r * c).map(|i| v[(i % r) * c + i / r]).collect();
        Ok(vec![Tensor::new(vec![*c, *r], out)?])
    }

    fn compute(&self, inputs: &[Option<ComputeInput<'_>>]) -> Result<Option<ComputeDef>, OpError> {
        let x = inputs[0].ok_or(OpError::MissingInput(0))?;
        let (r, c) = (x.shape[0] as i64, x.shape[1] as i64);
        let xv = tensor_input("x", x.dtype.to_ir(), [r, c]);
        let (y, node) = grid("y", x.dtype.to_ir(), [c, r], |i| {
            xv.at([i[1].clone(), i[0].clone()])
        });
        Ok(Some(
            ComputeDef::new(vec![xv], vec![(y.clone(), node)], vec![y]).unwrap(),
        ))
    }
}

/// `test.RowSum`: `y[i, 0] = Σ_j x[i, j]`, a reducing anchor that is not a matmul.
#[derive(Debug)]
struct RowSum;

impl Operator for RowSum {
    fn infer(&self, inputs: &[Option<InferInput<'_>>]) -> Result<Vec<TensorType>, OpError> {
        let x = infer_arg(inputs, 0)?;
        let shape =
            x.ty.shape
                .clone()
                .map(|s| vec![s[0].clone(), hidet_graph::Dim::Fixed(1)]);
        Ok(vec![TensorType {
            dtype: x.ty.dtype,
            shape,
        }])
    }

    fn eval(&self, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>, OpError> {
        let x = arg(inputs, 0)?;
        let [r, c] = x.shape() else {
            return Err(OpError::Shape("rank 2 expected".into()));
        };
        let v = x.as_slice::<f32>()?;
        let out: Vec<f32> = (0..*r)
            .map(|i| v[i * c..(i + 1) * c].iter().map(|&a| a as f64).sum::<f64>() as f32)
            .collect();
        Ok(vec![Tensor::new(vec![*r, 1], out)?])
    }

    fn compute(&self, inputs: &[Option<ComputeInput<'_>>]) -> Result<Option<ComputeDef>, OpError> {
        let x = inputs[0].ok_or(OpError::MissingInput(0))?;
        let (r, c) = (x.shape[0] as i64, x.shape[1] as i64);
        let xv = tensor_input("x", x.dtype.to_ir(), [r, c]);
        let (y, node) = reduce(
            "y",
            x.dtype.to_ir(),
            [r, 1],
            [c],
            ReduceKind::Sum,
            |i, k| xv.at([i[0].clone(), k[0].clone()]),
        );
        Ok(Some(
            ComputeDef::new(vec![xv], vec![(y.clone(), node)], vec![y]).unwrap(),
        ))
    }
}

fn registry() -> Registry {
    let mut r = Registry::new();
    hidet_graph::ops::register_all(&mut r);
    r.register("test", "Transpose2D", 1..=1, |_| Ok(Box::new(Transpose2D)));
    r.register("test", "RowSum", 1..=1, |_| Ok(Box::new(RowSum)));
    r
}

/// Builds a random graph node by node, tracking the current value and its shape.
struct Gen<'a> {
    rng: &'a mut Rng,
    b: GraphBuilder,
    next: usize,
    cur: String,
    shape: Vec<usize>,
    inputs: Vec<(String, Tensor)>,
    ops: Vec<String>,
}

impl Gen<'_> {
    fn fresh(&mut self, prefix: &str) -> String {
        self.next += 1;
        format!("{prefix}{}", self.next)
    }

    fn node(&mut self, domain: &str, op: &str, ins: Vec<String>, attrs: Attributes) -> String {
        let out = self.fresh("v");
        self.b.node(NodeSpec {
            name: format!("{op}_{out}"),
            domain: domain.into(),
            op_type: op.into(),
            opset: if domain.is_empty() { 17 } else { 1 },
            attrs,
            inputs: ins,
            outputs: vec![out.clone()],
        });
        self.ops.push(op.to_string());
        out
    }

    fn constant(&mut self, shape: &[usize]) -> String {
        let name = self.fresh("c");
        let n: usize = shape.iter().product();
        let data: Vec<f32> = (0..n).map(|_| self.rng.nonzero_f32()).collect();
        self.b
            .initializer(name.clone(), Tensor::new(shape.to_vec(), data).unwrap());
        name
    }

    fn pick(&mut self, n: u64) -> u64 {
        self.rng.next_u64() % n
    }

    /// One shape-preserving (or transposing) elementwise-like step on the current value.
    fn step(&mut self, allow_transpose: bool) {
        let cur = self.cur.clone();
        let (r, c) = (self.shape[0], self.shape[1]);
        match self.pick(if allow_transpose { 6 } else { 5 }) {
            0 => {
                let op = ["Relu", "Neg", "Tanh", "Abs", "Sigmoid"][self.pick(5) as usize];
                self.cur = self.node("", op, vec![cur], Attributes::new());
            }
            1 => {
                let shape: Vec<usize> = match self.pick(4) {
                    0 => vec![c],
                    1 => vec![r, 1],
                    2 => vec![1, c],
                    _ => vec![],
                };
                let k = self.constant(&shape);
                let op = ["Add", "Mul", "Sub"][self.pick(3) as usize];
                let ins = if self.pick(2) == 0 {
                    vec![cur, k]
                } else {
                    vec![k, cur]
                };
                self.cur = self.node("", op, ins, Attributes::new());
            }
            2 => {
                let mut to = Attributes::new();
                to.insert("to", Attribute::Int(DType::F64.onnx_code() as i64));
                let wide = self.node("", "Cast", vec![cur], to);
                let mut back = Attributes::new();
                back.insert("to", Attribute::Int(DType::F32.onnx_code() as i64));
                self.cur = self.node("", "Cast", vec![wide], back);
            }
            3 => {
                let flat = self.fresh("s");
                self.b.initializer(
                    flat.clone(),
                    Tensor::new(vec![1], vec![(r * c) as i64]).unwrap(),
                );
                let v = self.node("", "Reshape", vec![cur, flat], Attributes::new());
                let back = self.fresh("s");
                self.b.initializer(
                    back.clone(),
                    Tensor::new(vec![2], vec![r as i64, c as i64]).unwrap(),
                );
                self.cur = self.node("", "Reshape", vec![v, back], Attributes::new());
            }
            4 => {
                // A full-size second operand from a graph input.
                let name = self.fresh("in");
                self.b
                    .input(name.clone(), TensorType::fixed(DType::F32, &[r, c]));
                let n = r * c;
                let data: Vec<f32> = (0..n).map(|_| self.rng.nonzero_f32()).collect();
                self.inputs
                    .push((name.clone(), Tensor::new(vec![r, c], data).unwrap()));
                self.cur = self.node("", "Add", vec![cur, name], Attributes::new());
            }
            _ => {
                self.cur = self.node("test", "Transpose2D", vec![cur], Attributes::new());
                self.shape = vec![c, r];
            }
        }
    }
}

fn backend(dir: &std::path::Path, template: bool) -> Arc<CpuBackend> {
    Arc::new(CpuBackend::new(CpuBackendOptions {
        build: BuildOptions {
            cache: Some(KernelCache::new(dir)),
            ..BuildOptions::default()
        },
        matmul_template: template,
        compile_jobs: Some(2),
        loaded_threads: None,
    }))
}

fn close(got: &Tensor, want: &Tensor) -> Result<(), String> {
    if got.shape() != want.shape() || got.dtype() != want.dtype() {
        return Err(format!("{:?} vs {:?}", got.shape(), want.shape()));
    }
    for (i, (g, w)) in got.to_f64_vec().iter().zip(want.to_f64_vec()).enumerate() {
        if (g - w).abs() > 1e-4 + 1e-4 * w.abs() {
            return Err(format!("element {i}: {g} vs {w}"));
        }
    }
    Ok(())
}

#[test]
fn random_graphs_fused_unfused_and_reference_agree() {
    let dir = tempfile::tempdir().unwrap();
    let registry = registry();
    let mut rng = Rng::new(2024);
    let (mut fused_kernels, mut unfused_kernels) = (0usize, 0usize);
    for case in 0..24 {
        let (m, k, n) = (
            2 + (rng.next_u64() % 18) as usize,
            2 + (rng.next_u64() % 18) as usize,
            2 + (rng.next_u64() % 18) as usize,
        );
        let mut g = Gen {
            rng: &mut rng,
            b: GraphBuilder::new(format!("case{case}")),
            next: 0,
            cur: "x".into(),
            shape: vec![m, k],
            inputs: vec![],
            ops: vec![],
        };
        // The input, possibly transposed into place.
        if g.pick(3) == 0 {
            g.b.input("x", TensorType::fixed(DType::F32, &[k, m]));
            let data: Vec<f32> = (0..m * k).map(|_| g.rng.nonzero_f32()).collect();
            g.inputs
                .push(("x".into(), Tensor::new(vec![k, m], data).unwrap()));
            g.cur = g.node("test", "Transpose2D", vec!["x".into()], Attributes::new());
        } else {
            g.b.input("x", TensorType::fixed(DType::F32, &[m, k]));
            let data: Vec<f32> = (0..m * k).map(|_| g.rng.nonzero_f32()).collect();
            g.inputs
                .push(("x".into(), Tensor::new(vec![m, k], data).unwrap()));
        }
        for _ in 0..g.pick(4) {
            g.step(false);
        }
        let extra_output = (g.pick(4) == 0).then(|| g.cur.clone());
        // The anchor.
        let cur = g.cur.clone();
        if g.pick(3) == 0 {
            g.cur = g.node("test", "RowSum", vec![cur], Attributes::new());
            g.shape = vec![m, 1];
        } else {
            let w = g.constant(&[k, n]);
            g.cur = g.node("", "MatMul", vec![cur, w], Attributes::new());
            g.shape = vec![m, n];
        }
        for _ in 0..g.pick(5) {
            g.step(true);
        }
        let out = g.cur.clone();
        g.b.output(out);
        if let Some(e) = &extra_output {
            if e != "x" {
                g.b.output(e.clone());
            }
        }
        let ops = g.ops.join(" ");
        let inputs = g.inputs.clone();
        let graph =
            g.b.build(&registry)
                .unwrap_or_else(|e| panic!("case {case} ({ops}): {e}"));
        let shapes: Vec<Vec<usize>> = graph
            .inputs()
            .iter()
            .map(|id| {
                let name = &graph.value(*id).name;
                inputs
                    .iter()
                    .find(|(n, _)| n == name)
                    .unwrap()
                    .1
                    .shape()
                    .to_vec()
            })
            .collect();
        let want = run_reference(&graph, &inputs).unwrap();
        for no_fusion in [false, true] {
            let opts = CompileOptions {
                no_fusion,
                ..CompileOptions::default()
            };
            let compiled =
                CompiledGraph::compile(&graph, &shapes, backend(dir.path(), case % 2 == 0), &opts)
                    .unwrap_or_else(|e| panic!("case {case} ({ops}): {e}"));
            let got = compiled.run(&inputs).unwrap();
            let report = compiled.report();
            if no_fusion {
                unfused_kernels += report.kernels;
            } else {
                fused_kernels += report.kernels;
                assert_eq!(
                    report.host_nodes(),
                    0,
                    "case {case} ({ops}):\n{}",
                    report.partition
                );
            }
            for ((name, g), (_, w)) in got.iter().zip(&want) {
                if let Err(e) = close(g, w) {
                    panic!(
                        "case {case} ({ops}), {} output `{name}`: {e}\n{}",
                        if no_fusion { "unfused" } else { "fused" },
                        report.partition
                    );
                }
            }
        }
    }
    assert!(
        fused_kernels < unfused_kernels,
        "fusion should reduce kernels: {fused_kernels} fused vs {unfused_kernels} unfused"
    );
}
