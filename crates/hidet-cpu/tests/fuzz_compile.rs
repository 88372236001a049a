//! Fuzz test of the compile path: random small graphs (1–8 nodes) drawn from the operator
//! registry are optimized by the graph passes for this host (`passes_for(pass_options(host))`,
//! as `hidet run` does), compiled by the CPU backend and run, and every output is compared
//! with the reference executor (`run_reference`: every operator's own `eval`, the oracle).
//!
//! The generator draws element-wise unary and binary operators (numpy broadcasting, size-1
//! axes included), comparisons and logic, Where, Cast (f64, f16, bf16, integers, bool), Clip,
//! reductions, ArgMax/ArgMin, CumSum, Softmax/LogSoftmax/Hardmax, Layer-, Batch-, Instance-
//! and GroupNormalization, MatMul (batched, broadcast, vector operands), Gemm and Einsum, Conv
//! (kernel, stride, padding, dilation, groups, auto-padding; the 3×3, 1×7 and 7×1 windows the
//! graph passes rewrite), pooling, and the data-movement operators (Transpose, Reshape,
//! Flatten, Squeeze, Unsqueeze, Slice, Gather, GatherElements, Pad, Expand, Tile, Concat,
//! Split, DepthToSpace, SpaceToDepth, Trilu), on shapes with 1s and primes (one case in ten
//! allows four times the elements and sizes up to 300). It continues from the newest value
//! more often than not, so chains form that fusion merges (element-wise after products,
//! transposes feeding products), reuses values for several consumers, and makes every unread
//! value a graph output (plus some read ones). Each case also draws whether matmul anchors use
//! the template, how many threads kernels are scheduled for, and (a third of the cases, where
//! the graph still builds) whether the inputs' first axes are symbolic, so that the passes
//! that need static shapes leave operators to their own compute definitions.
//!
//! Data: inputs and weights lie in `[-1, -0.05] ∪ [0.05, 1]` (integers in `[-9, -1] ∪ [1, 9]`).
//! Partial functions only see their domain: Log, Sqrt, Reciprocal and Acosh read `|x| + c`
//! (`c ≥ 0.5`), Asin/Acos/Atanh/Tan a squashed `tanh`, divisors are fresh data bounded away
//! from zero, Exp/Sinh/Cosh only values whose tracked magnitude bound is small. Discontinuous
//! functions (rounding, Sign, comparisons, casts to integers, ArgMax, Hardmax, Shrink,
//! ThresholdedRelu) only read values that every executor computes exactly (inputs moved,
//! selected or scaled by powers of two). Normalizations only read rows that are not constant
//! by broadcasting and whose |mean| is at most 8 standard deviations (on the reference values).
//!
//! Each case is compiled once and run twice, on its inputs and on the same inputs with the
//! elements of every float input reversed; neither run may write an input or a tensor the
//! first run returned. Comparison contract ([`compare`]): integer and boolean outputs, and
//! float outputs computed exactly in the above sense, are equal element for element. Other
//! float outputs agree within `rtol·|w| + rtol/10·(S + max S/10) + rtol/100·max|w|`, where `S`
//! is the element's sensitivity to a relative perturbation of every float value, inputs,
//! weights and intermediates alike (measured with the reference executor: the magnitude of the
//! terms it sums, amplified by any cancellation), and `rtol` is 1e-3, or 1e-2 (f16) and 3e-2 (bf16) once the value passed
//! through a narrower float; such a value may also differ by `rtol/10` times the bound of its
//! terms, since a fused kernel keeps f16 intermediates in f32 where the reference rounds them.
//!
//! Modes:
//! - default (CI): the cases of seeds `1..=QUICK_SEEDS`, sharing one kernel cache.
//! - `HIDET_FUZZ_SECONDS=N`: new cases, from seed `HIDET_FUZZ_SEED` (default: the clock)
//!   upwards, until N seconds have passed, [`CASES_PER_CHILD`] at a time in a child process
//!   (a crash names the seed it was running). Each failure is printed at once, marked
//!   `FAILURE`, with its seed and a minimized graph (nodes cut into inputs holding their
//!   reference values, or bypassed, while the same kind of failure remains); the test fails at
//!   the end: `HIDET_FUZZ_SECONDS=3600 nice -n 10 cargo test --release -p hidet-cpu --test
//!   fuzz_compile -- fuzz_random_graphs --nocapture`.
//! - `HIDET_FUZZ_SEED=S` alone: replays the case of seed S, printing its graph.
//!
//! Each real failure found is kept below as a named regression test (`regression_*`), a small
//! fixed graph.

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::Path;
use std::sync::{Arc, Mutex, Once};
use std::time::{Duration, Instant};

use common::{cpu_backend, Rng};
use hidet_cpu::graph_backend::{pass_options, CpuBackend};
use hidet_cpu::graph_passes::passes_for;
use hidet_cpu::CpuTarget;
use hidet_graph::compiled::{CompileOptions, CompiledGraph};
use hidet_graph::passes::run_passes;
use hidet_graph::{
    run_reference, Attribute, Attributes, DType, Dim, Graph, GraphBuilder, NodeSpec, Registry,
    Tensor, TensorType,
};

/// Cases of the default (CI) mode: seeds `1..=QUICK_SEEDS`.
const QUICK_SEEDS: u64 = 48;
/// Sizes drawn for axes: 1s (broadcasting, squeezing) and primes weighted in.
const DIMS: [usize; 12] = [1, 1, 2, 3, 4, 5, 6, 7, 8, 13, 16, 31];
/// Larger sizes, drawn in the cases with a larger element limit.
const BIG_DIMS: [usize; 8] = [17, 33, 48, 64, 97, 130, 257, 300];
/// Default element limit of a value.
const MAX_ELEMS: usize = 4096;

fn numel(shape: &[usize]) -> usize {
    shape.iter().product()
}

/// How an output is compared with the reference.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Cmp {
    /// Element for element.
    Exact,
    /// Within a tolerance of relative size `rtol` plus `atol` (see [`compare`]).
    Close { rtol: f64, atol: f64 },
}

/// One fuzz case: a graph by names, its input data, and how it is compiled.
#[derive(Debug, Clone)]
struct Case {
    inputs: Vec<(String, Tensor)>,
    consts: Vec<(String, Tensor)>,
    /// In topological order.
    nodes: Vec<NodeSpec>,
    outputs: Vec<(String, Cmp)>,
    /// Whether matmul anchors use the CPU template.
    template: bool,
    threads: usize,
    /// Whether the graph declares the first axis of each input longer than 1 symbolic (one
    /// symbol per size), so passes see symbolic shapes and compilation specializes them.
    symbolic: bool,
}

impl Case {
    fn graph(&self) -> Result<Graph, String> {
        let mut b = GraphBuilder::new("fuzz");
        for (n, t) in &self.inputs {
            let shape = t
                .shape()
                .iter()
                .enumerate()
                .map(|(i, &d)| {
                    if self.symbolic && i == 0 && d > 1 {
                        Dim::Symbol(Arc::from(format!("n{d}").as_str()))
                    } else {
                        Dim::Fixed(d)
                    }
                })
                .collect();
            b.input(
                n.clone(),
                TensorType {
                    dtype: t.dtype(),
                    shape: Some(shape),
                },
            );
        }
        for (n, t) in &self.consts {
            b.initializer(n.clone(), t.clone());
        }
        for n in &self.nodes {
            b.node(n.clone());
        }
        for (n, _) in &self.outputs {
            b.output(n.clone());
        }
        b.build(Registry::global()).map_err(|e| e.to_string())
    }

    /// The case without the nodes, initializers and inputs that no output needs.
    fn pruned(mut self) -> Case {
        let mut needed: BTreeSet<String> = self.outputs.iter().map(|(n, _)| n.clone()).collect();
        let mut keep = vec![false; self.nodes.len()];
        for (i, n) in self.nodes.iter().enumerate().rev() {
            if n.outputs.iter().any(|o| needed.contains(o)) {
                keep[i] = true;
                needed.extend(n.inputs.iter().filter(|s| !s.is_empty()).cloned());
            }
        }
        let mut k = keep.into_iter();
        self.nodes.retain(|_| k.next().unwrap_or(false));
        self.consts.retain(|(n, _)| needed.contains(n));
        self.inputs.retain(|(n, _)| needed.contains(n));
        self
    }

    /// Node `i` replaced by graph inputs holding its outputs' reference values.
    fn cut(&self, i: usize) -> Option<Case> {
        let mut probe = self.clone();
        probe.outputs = self.nodes[i]
            .outputs
            .iter()
            .filter(|o| !o.is_empty())
            .map(|o| (o.clone(), Cmp::Exact))
            .collect();
        let values = run_reference(&probe.graph().ok()?, &probe.inputs).ok()?;
        let mut c = self.clone();
        c.nodes.remove(i);
        c.inputs.extend(values);
        Some(c.pruned())
    }

    /// Node `i` removed, its single output replaced by an input of the same type.
    fn bypass(&self, i: usize) -> Option<Case> {
        let node = &self.nodes[i];
        if node.outputs.len() != 1 {
            return None;
        }
        let graph = self.graph().ok()?;
        let ty = |name: &str| {
            graph
                .values()
                .iter()
                .find(|v| v.name == name)
                .map(|v| v.ty.clone())
        };
        let out = &node.outputs[0];
        let out_ty = ty(out)?;
        let src = node
            .inputs
            .iter()
            .find(|s| !s.is_empty() && ty(s) == Some(out_ty.clone()))?
            .clone();
        if self.outputs.iter().any(|(n, _)| *n == src) {
            return None;
        }
        let mut c = self.clone();
        c.nodes.remove(i);
        for n in &mut c.nodes {
            for s in &mut n.inputs {
                if s == out {
                    *s = src.clone();
                }
            }
        }
        for (n, _) in &mut c.outputs {
            if n == out {
                *n = src.clone();
            }
        }
        Some(c.pruned())
    }
}

fn attr_text(a: &Attribute) -> String {
    match a {
        Attribute::Int(v) => v.to_string(),
        Attribute::Float(v) => format!("{v:?}"),
        Attribute::String(s) => format!("{s:?}"),
        Attribute::Ints(v) => format!("{v:?}"),
        Attribute::Floats(v) => format!("{v:?}"),
        other => format!("{other:?}"),
    }
}

fn tensor_text(t: &Tensor) -> String {
    let head = format!("{}{:?}", t.dtype(), t.shape());
    if t.numel() > 16 {
        return head;
    }
    if t.dtype().is_float() {
        format!("{head} = {:?}", t.to_f64_vec())
    } else {
        format!("{head} = {:?}", t.to_i64_vec())
    }
}

impl fmt::Display for Case {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "  compiled with the matmul template {}, {} threads{}",
            if self.template { "on" } else { "off" },
            self.threads,
            if self.symbolic {
                ", inputs' first axes symbolic"
            } else {
                ""
            }
        )?;
        for (n, t) in &self.inputs {
            writeln!(f, "  input {n}: {}", tensor_text(t))?;
        }
        for (n, t) in &self.consts {
            writeln!(f, "  initializer {n}: {}", tensor_text(t))?;
        }
        for n in &self.nodes {
            let attrs: Vec<String> = n
                .attrs
                .iter()
                .map(|(k, v)| format!("{k}: {}", attr_text(v)))
                .collect();
            writeln!(
                f,
                "  {} = {}(opset {})({}){}",
                n.outputs.join(", "),
                n.op_type,
                n.opset,
                n.inputs.join(", "),
                if attrs.is_empty() {
                    String::new()
                } else {
                    format!(" {{{}}}", attrs.join(", "))
                }
            )?;
        }
        for (n, c) in &self.outputs {
            writeln!(f, "  output {n}: {c:?}")?;
        }
        Ok(())
    }
}

/// A value the generator can read, with what it knows about it.
#[derive(Debug, Clone)]
struct Val {
    name: String,
    dtype: DType,
    shape: Vec<usize>,
    /// An upper bound of |element| (of the terms summed into it).
    bound: f64,
    /// Whether every executor computes it exactly (inputs moved, selected, scaled by 2^k).
    exact: bool,
    /// Per axis: whether the value may be constant along it (broadcast there, or size 1).
    uniform: Vec<bool>,
    /// The relative tolerance its computation needs.
    rtol: f64,
}

impl Val {
    fn is_float(&self) -> bool {
        self.dtype.is_float()
    }

    /// Whether some axis in `axes` of size above 1 is not constant by construction.
    fn varies_along(&self, axes: &[usize]) -> bool {
        axes.iter().any(|&a| self.shape[a] > 1 && !self.uniform[a])
    }

    fn any_uniform(&self) -> bool {
        self.shape
            .iter()
            .zip(&self.uniform)
            .any(|(&d, &u)| d > 1 && u)
    }
}

fn rtol_of(d: DType) -> f64 {
    match d {
        DType::F16 => 1e-2,
        DType::BF16 => 3e-2,
        _ => 1e-3,
    }
}

/// Whether `bound` is safely representable in `d` (no overflow, no integer wrapping).
fn fits(d: DType, bound: f64) -> bool {
    let limit = match d {
        DType::F16 => 3e4,
        DType::F32 | DType::BF16 | DType::F64 => 1e30,
        DType::I32 => 1e8,
        DType::I64 => 1e15,
        // Unsigned and narrow integers wrap (defined in C after promotion, like numpy).
        DType::I8 | DType::U8 | DType::I16 | DType::U16 | DType::U32 | DType::U64 => f64::INFINITY,
        DType::Bool => 2.0,
        _ => 100.0,
    };
    bound < limit || (limit.is_infinite() && !bound.is_nan())
}

fn broadcast_shapes(a: &[usize], b: &[usize]) -> Option<Vec<usize>> {
    let r = a.len().max(b.len());
    let at = |s: &[usize], i: usize| {
        if i + s.len() >= r {
            s[i + s.len() - r]
        } else {
            1
        }
    };
    (0..r)
        .map(|i| {
            let (x, y) = (at(a, i), at(b, i));
            if x == y || y == 1 {
                Some(x)
            } else if x == 1 {
                Some(y)
            } else {
                None
            }
        })
        .collect()
}

/// Per axis of a broadcast result `out` of `vals`: whether it may be constant along it.
fn broadcast_uniform(out: &[usize], vals: &[&Val]) -> Vec<bool> {
    let r = out.len();
    (0..r)
        .map(|i| {
            out[i] == 1
                || vals.iter().all(|v| {
                    let off = r - v.shape.len();
                    i < off || v.shape[i - off] == 1 || v.uniform[i - off]
                })
        })
        .collect()
}

/// Uniformity for outputs of operators that mix axes: every axis may be constant when some
/// input axis may be.
fn mixed_uniform(out: &[usize], vals: &[&Val]) -> Vec<bool> {
    let any = vals.iter().any(|v| v.any_uniform());
    out.iter().map(|&d| d == 1 || any).collect()
}

fn attrs(items: Vec<(&str, Attribute)>) -> Attributes {
    let mut a = Attributes::new();
    for (k, v) in items {
        a.insert(k, v);
    }
    a
}

fn divisors(n: usize) -> Vec<usize> {
    (1..=n).filter(|&d| n.is_multiple_of(d)).collect()
}

/// Which convolution [`Gen::conv_on`] draws.
#[derive(Debug, Clone, Copy)]
enum ConvKind {
    Random,
    /// 1×1 with this many output channels.
    Pointwise(usize),
    /// 3×3, one group per channel, padded to keep the size.
    Depthwise,
}

/// A random-graph generator: the case so far and the values it may read.
struct Gen {
    rng: Rng,
    case: Case,
    pool: Vec<Val>,
    next: usize,
    max_nodes: usize,
    max_elems: usize,
    /// Nodes that building the graph refused (generator mistakes or inference bugs).
    rejected: Vec<String>,
}

type Step = fn(&mut Gen) -> Option<()>;

impl Gen {
    fn new(seed: u64) -> Gen {
        let mut rng = Rng::new(seed);
        let max_nodes = 1 + (rng.next_u64() % 8) as usize;
        let template = !rng.next_u64().is_multiple_of(5);
        let threads = [1, 2, 2, 4][(rng.next_u64() % 4) as usize];
        let max_elems = if rng.next_u64().is_multiple_of(10) {
            4 * MAX_ELEMS
        } else {
            MAX_ELEMS
        };
        Gen {
            rng,
            case: Case {
                inputs: vec![],
                consts: vec![],
                nodes: vec![],
                outputs: vec![],
                template,
                threads,
                symbolic: false,
            },
            pool: vec![],
            next: 0,
            max_nodes,
            max_elems,
            rejected: vec![],
        }
    }

    fn below(&mut self, n: usize) -> usize {
        (self.rng.next_u64() % n as u64) as usize
    }

    fn chance(&mut self, percent: u64) -> bool {
        self.rng.next_u64() % 100 < percent
    }

    fn choose<T: Copy>(&mut self, items: &[T]) -> T {
        items[self.below(items.len())]
    }

    /// A float in `[lo, hi)`.
    fn uniform_f(&mut self, lo: f64, hi: f64) -> f64 {
        lo + (hi - lo) * (self.rng.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }

    fn fresh(&mut self, prefix: &str) -> String {
        self.next += 1;
        format!("{prefix}{}", self.next)
    }

    /// Whether `nodes` more fit in the case (Constant nodes do not count).
    fn room(&self, nodes: usize) -> bool {
        self.counted() + nodes <= self.max_nodes
    }

    fn counted(&self) -> usize {
        self.case
            .nodes
            .iter()
            .filter(|n| n.op_type != "Constant")
            .count()
    }

    /// An axis size: from [`DIMS`], or in a case with a larger element limit sometimes one
    /// crossing the matmul template's blocks.
    fn dim(&mut self) -> usize {
        if self.max_elems > MAX_ELEMS && self.chance(30) {
            self.choose(&BIG_DIMS)
        } else {
            self.choose(&DIMS)
        }
    }

    fn shape(&mut self, rank: usize) -> Vec<usize> {
        loop {
            let s: Vec<usize> = (0..rank).map(|_| self.dim()).collect();
            if numel(&s) <= self.max_elems {
                return s;
            }
        }
    }

    fn image_shape(&mut self) -> Vec<usize> {
        loop {
            let big = self.max_elems > MAX_ELEMS && self.chance(50);
            let c = if big {
                self.choose(&[16, 32, 64])
            } else {
                self.choose(&[1, 2, 3, 4, 6, 8, 16])
            };
            let hw = [1, 2, 3, 5, 7, 8, 12, 13, 16];
            let mut s = vec![self.choose(&[1, 1, 2]), c, self.choose(&hw)];
            if self.chance(80) {
                s.push(self.choose(&hw));
            }
            if numel(&s) <= self.max_elems {
                return s;
            }
        }
    }

    /// Random data of `dtype`: floats in `[-1, -0.05] ∪ [0.05, 1]`, integers in
    /// `[-9, -1] ∪ [1, 9]`, booleans either way.
    fn data(&mut self, dtype: DType, shape: &[usize]) -> Tensor {
        let n = numel(shape);
        if dtype.is_float() {
            return Tensor::new(shape.to_vec(), self.rng.vec_f32(n))
                .expect("the data has the shape's length")
                .cast(dtype);
        }
        if dtype == DType::Bool {
            let v: Vec<bool> = (0..n).map(|_| self.chance(50)).collect();
            return Tensor::new(shape.to_vec(), v).expect("the data has the shape's length");
        }
        let v: Vec<i64> = (0..n)
            .map(|_| {
                let m = 1 + self.below(9) as i64;
                if self.chance(50) {
                    m
                } else {
                    -m
                }
            })
            .collect();
        Tensor::new(shape.to_vec(), v)
            .expect("the data has the shape's length")
            .cast(dtype)
    }

    fn leaf_val(name: String, dtype: DType, shape: Vec<usize>) -> Val {
        Val {
            name,
            dtype,
            uniform: shape.iter().map(|&d| d == 1).collect(),
            shape,
            bound: if dtype.is_float() || dtype == DType::Bool {
                1.0
            } else {
                9.0
            },
            exact: true,
            rtol: rtol_of(dtype),
        }
    }

    /// A new initializer (with probability `constant_percent`) or graph input of random data.
    fn leaf(&mut self, dtype: DType, shape: Vec<usize>, constant_percent: u64) -> Val {
        let constant = self.chance(constant_percent);
        let name = self.fresh(if constant { "c" } else { "x" });
        let t = self.data(dtype, &shape);
        if constant {
            self.case.consts.push((name.clone(), t));
        } else {
            self.case.inputs.push((name.clone(), t));
        }
        Gen::leaf_val(name, dtype, shape)
    }

    /// A constant: an initializer, or sometimes the output of a Constant node.
    fn const_tensor(&mut self, t: Tensor) -> String {
        let name = self.fresh("c");
        if self.chance(15) {
            self.case.nodes.push(NodeSpec {
                name: format!("Constant_{name}"),
                domain: String::new(),
                op_type: "Constant".into(),
                opset: 13,
                attrs: attrs(vec![("value", Attribute::Tensor(t))]),
                inputs: vec![],
                outputs: vec![name.clone()],
            });
        } else {
            self.case.consts.push((name.clone(), t));
        }
        name
    }

    /// An initializer of `dtype` holding `values` (converted).
    fn const_f(&mut self, dtype: DType, shape: &[usize], values: Vec<f32>) -> String {
        let t = Tensor::new(shape.to_vec(), values)
            .expect("values match the shape")
            .cast(dtype);
        self.const_tensor(t)
    }

    /// An i64 vector initializer.
    fn ints(&mut self, values: &[i64]) -> String {
        let t = Tensor::new(vec![values.len()], values.to_vec()).expect("a vector");
        self.const_tensor(t)
    }

    /// Appends a node with `outputs` outputs and returns their names, dtypes and shapes; `None`
    /// (the node removed) when the graph does not build with it (kept in `rejected`), or when an
    /// output is empty or too large.
    fn emit(
        &mut self,
        op: &str,
        opset: i64,
        inputs: &[&str],
        attrs: Attributes,
        outputs: usize,
    ) -> Option<Vec<(String, DType, Vec<usize>)>> {
        let outs: Vec<String> = (0..outputs).map(|_| self.fresh("v")).collect();
        self.case.nodes.push(NodeSpec {
            name: format!("{op}_{}", outs[0]),
            domain: String::new(),
            op_type: op.into(),
            opset,
            attrs,
            inputs: inputs.iter().map(|s| s.to_string()).collect(),
            outputs: outs.clone(),
        });
        let mut probe = self.case.clone();
        probe.outputs = outs.iter().map(|o| (o.clone(), Cmp::Exact)).collect();
        let graph = match probe.graph() {
            Ok(g) => g,
            Err(e) => {
                let node = self.case.nodes.pop().expect("just pushed");
                self.rejected
                    .push(format!("{op} {:?} {:?}: {e}", node.inputs, node.attrs));
                return None;
            }
        };
        // Static inference may leave a shape unknown (a Reshape to a shape computed from
        // `Shape`, which the graph builder does not fold); the reference values tell it.
        let static_types: Option<Vec<(String, DType, Vec<usize>)>> = outs
            .iter()
            .map(|o| {
                let v = graph.values().iter().find(|v| v.name == *o)?;
                Some((o.clone(), v.ty.dtype, v.ty.fixed_shape()?))
            })
            .collect();
        let types = static_types.or_else(|| {
            let values = run_reference(&graph, &probe.inputs).ok()?;
            Some(
                values
                    .into_iter()
                    .map(|(n, t)| (n, t.dtype(), t.shape().to_vec()))
                    .collect(),
            )
        });
        let ok = types.as_ref().is_some_and(|t| {
            t.iter()
                .all(|(_, _, s)| numel(s) > 0 && numel(s) <= 2 * self.max_elems)
        });
        if !ok {
            let node = self.case.nodes.pop().expect("just pushed");
            if types.is_none() {
                self.rejected.push(format!(
                    "{op} {:?}: the reference executor refuses it",
                    node.inputs
                ));
            }
            return None;
        }
        types
    }

    /// [`Gen::emit`] of a single-output node, the output added to the pool.
    #[allow(clippy::too_many_arguments)]
    fn emit1(
        &mut self,
        op: &str,
        opset: i64,
        inputs: &[&str],
        attrs: Attributes,
        bound: f64,
        exact: bool,
        uniform: impl FnOnce(&[usize]) -> Vec<bool>,
        rtol: f64,
    ) -> Option<Val> {
        let (name, dtype, shape) = self.emit(op, opset, inputs, attrs, 1)?.pop()?;
        let v = Val {
            name,
            dtype,
            uniform: uniform(&shape),
            shape,
            bound,
            exact: exact || !(dtype.is_float()),
            rtol: rtol.max(rtol_of(dtype)),
        };
        self.pool.push(v.clone());
        Some(v)
    }

    /// A pool value satisfying `ok`: the newest one more often than not.
    fn pick(&mut self, ok: impl Fn(&Val) -> bool) -> Option<Val> {
        let idx: Vec<usize> = (0..self.pool.len())
            .filter(|&i| ok(&self.pool[i]))
            .collect();
        let last = *idx.last()?;
        let i = if self.chance(60) {
            last
        } else {
            idx[self.below(idx.len())]
        };
        Some(self.pool[i].clone())
    }

    /// A shape broadcasting with `shape`: the same, some axes 1, leading axes dropped, size-1
    /// axes widened, or a leading axis added.
    fn partner_shape(&mut self, shape: &[usize]) -> Vec<usize> {
        for _ in 0..8 {
            let mut s = shape.to_vec();
            match self.below(6) {
                0 => {}
                1 => {
                    for d in &mut s {
                        if self.chance(40) {
                            *d = 1;
                        }
                    }
                }
                2 => {
                    let k = self.below(s.len() + 1);
                    s.drain(..k);
                }
                3 => {
                    for d in &mut s {
                        if *d == 1 && self.chance(60) {
                            *d = self.dim();
                        }
                    }
                }
                4 => {
                    if s.len() < 4 {
                        let d = self.choose(&[1, 2, 3, 5]);
                        s.insert(0, d);
                    }
                }
                _ => {
                    let k = self.below(s.len() + 1);
                    s.drain(..k);
                    for d in &mut s {
                        if self.chance(30) {
                            *d = 1;
                        }
                    }
                }
            }
            if broadcast_shapes(shape, &s).is_some_and(|b| numel(&b) <= self.max_elems) {
                return s;
            }
        }
        shape.to_vec()
    }

    /// A second operand for `x`: a pool value of its dtype whose shape broadcasts with it, or
    /// new data of a partner shape.
    fn partner(&mut self, x: &Val, from_pool: bool) -> Val {
        if from_pool && self.chance(30) {
            let (dtype, shape, name) = (x.dtype, x.shape.clone(), x.name.clone());
            let limit = self.max_elems;
            let avoid_self = self.chance(80);
            if let Some(v) = self.pick(|v| {
                v.dtype == dtype
                    && !(avoid_self && v.name == name)
                    && broadcast_shapes(&v.shape, &shape).is_some_and(|s| numel(&s) <= limit)
            }) {
                return v;
            }
        }
        let shape = self.partner_shape(&x.shape);
        self.leaf(x.dtype, shape, 50)
    }

    /// `x · 2^k`: exact.
    fn scale_pow2(&mut self, x: &Val) -> Option<Val> {
        if !self.room(1) || x.dtype == DType::Bool {
            return None;
        }
        let k: f32 = if x.is_float() {
            self.choose(&[0.5, 2.0, 4.0, 8.0])
        } else {
            self.choose(&[2.0, 4.0])
        };
        if !fits(x.dtype, x.bound * k as f64) {
            return None;
        }
        let c = self.const_f(x.dtype, &[], vec![k]);
        let (a, b) = if self.chance(50) {
            (x.name.clone(), c)
        } else {
            (c, x.name.clone())
        };
        let u = x.uniform.clone();
        self.emit1(
            "Mul",
            17,
            &[&a, &b],
            Attributes::new(),
            x.bound * k as f64,
            x.exact,
            |_| u,
            x.rtol,
        )
    }

    /// `|x| + c` with `c ≥ lo`: positive, at least `lo`.
    fn positive(&mut self, x: &Val, lo: f64) -> Option<Val> {
        if !self.room(3) {
            return None;
        }
        let u = x.uniform.clone();
        let a = self.emit1(
            "Abs",
            13,
            &[&x.name],
            Attributes::new(),
            x.bound,
            x.exact,
            |_| u,
            x.rtol,
        )?;
        let shape = if self.chance(50) {
            vec![]
        } else {
            self.partner_shape(&x.shape)
                .into_iter()
                .map(|d| if self.chance(50) { 1 } else { d })
                .collect()
        };
        let shape: Vec<usize> =
            if broadcast_shapes(&x.shape, &shape).as_deref() == Some(&x.shape[..]) {
                shape
            } else {
                vec![]
            };
        let values: Vec<f32> = (0..numel(&shape))
            .map(|_| (lo + self.uniform_f(0.0, 0.5)) as f32)
            .collect();
        let c = self.const_f(x.dtype, &shape, values);
        let cv = Gen::leaf_val(c.clone(), x.dtype, shape);
        let out = broadcast_shapes(&x.shape, &cv.shape)?;
        let u = broadcast_uniform(&out, &[&a, &cv]);
        self.emit1(
            "Add",
            14,
            &[&a.name, &c],
            Attributes::new(),
            x.bound + lo + 0.5,
            false,
            |_| u,
            x.rtol,
        )
    }

    /// `s · tanh(x)`: in `(-s, s)`.
    fn squash(&mut self, x: &Val, s: f32) -> Option<Val> {
        if !self.room(3) {
            return None;
        }
        let u = x.uniform.clone();
        let t = self.emit1(
            "Tanh",
            13,
            &[&x.name],
            Attributes::new(),
            1.0,
            false,
            |_| u.clone(),
            x.rtol,
        )?;
        let c = self.const_f(x.dtype, &[], vec![s]);
        self.emit1(
            "Mul",
            14,
            &[&t.name, &c],
            Attributes::new(),
            s as f64,
            false,
            |_| u,
            x.rtol,
        )
    }

    fn step(&mut self) {
        let steps: &[(usize, Step)] = &[
            (14, Gen::unary),
            (14, Gen::binary),
            (3, Gen::compare),
            (2, Gen::logic),
            (3, Gen::where_),
            (5, Gen::cast),
            (3, Gen::clip),
            (10, Gen::matmul),
            (4, Gen::gemm),
            (7, Gen::conv),
            (5, Gen::pool),
            (8, Gen::reduce),
            (2, Gen::arg_reduce),
            (5, Gen::softmax),
            (6, Gen::normalization),
            (4, Gen::transpose),
            (3, Gen::reshape),
            (2, Gen::squeeze),
            (2, Gen::slice),
            (2, Gen::gather),
            (2, Gen::pad),
            (2, Gen::expand_tile),
            (2, Gen::concat),
            (1, Gen::split),
            (1, Gen::depth_space),
            (1, Gen::trilu),
            (2, Gen::einsum),
            (3, Gen::diamond),
            (3, Gen::pattern),
            (3, Gen::int_unary),
            (2, Gen::shape_reshape),
            (3, Gen::shuffle),
            (1, Gen::gather_elements),
            (1, Gen::cumsum),
        ];
        let total: usize = steps.iter().map(|(w, _)| w).sum();
        let mut r = self.below(total);
        for (w, f) in steps {
            if r < *w {
                let _ = f(self);
                return;
            }
            r -= w;
        }
    }

    fn start(&mut self) {
        let n = 1 + self.below(2);
        for _ in 0..n {
            let shape = if self.chance(30) {
                self.image_shape()
            } else {
                let r = self.choose(&[1, 2, 2, 3, 3, 4]);
                self.shape(r)
            };
            let dtype = if self.chance(10) {
                self.choose(&[DType::I32, DType::I64])
            } else {
                DType::F32
            };
            let v = self.leaf(dtype, shape, 0);
            self.pool.push(v);
        }
    }

    /// The case: every unread node output is a graph output, and some read ones are too.
    fn finish(mut self) -> (Case, Vec<String>) {
        let read: BTreeSet<String> = self
            .case
            .nodes
            .iter()
            .flat_map(|n| n.inputs.iter().cloned())
            .collect();
        let produced: Vec<String> = self
            .case
            .nodes
            .iter()
            .flat_map(|n| n.outputs.iter().cloned())
            .collect();
        let multi: BTreeSet<String> = self
            .case
            .nodes
            .iter()
            .filter(|n| n.outputs.len() > 1)
            .flat_map(|n| n.outputs.iter().cloned())
            .collect();
        let mut outs: Vec<String> = vec![];
        for o in produced {
            // An unread output of a node with several is sometimes left dead.
            let dead = multi.contains(&o) && self.chance(40);
            if (!read.contains(&o) && !dead) || self.chance(15) {
                outs.push(o);
            }
        }
        if outs.is_empty() {
            if let Some(last) = self.pool.last() {
                outs.push(last.name.clone());
            }
        }
        if self.chance(8) && !self.case.inputs.is_empty() {
            outs.push(self.case.inputs[0].0.clone());
        }
        for o in outs {
            let Some(v) = self.pool.iter().find(|v| v.name == o) else {
                continue;
            };
            // A value that passed through f16 or bf16 may differ by a rounding of an
            // intermediate that the fused kernel keeps in f32, relative to its terms.
            let cmp = if v.exact {
                Cmp::Exact
            } else if v.rtol > rtol_of(DType::F32) {
                Cmp::Close {
                    rtol: v.rtol,
                    atol: v.rtol / 10.0 * v.bound,
                }
            } else {
                Cmp::Close {
                    rtol: v.rtol,
                    atol: 0.0,
                }
            };
            self.case.outputs.push((o, cmp));
        }
        let mut case = self.case.pruned();
        // Symbolic first axes where the graph still builds and runs with them (static
        // inference may not see through every broadcast of a symbol).
        if self.rng.next_u64().is_multiple_of(3) {
            case.symbolic = true;
            let runs = case
                .graph()
                .is_ok_and(|g| run_reference(&g, &case.inputs).is_ok());
            case.symbolic = runs;
        }
        (case, self.rejected)
    }

    fn unary(&mut self) -> Option<()> {
        const UNARY: &[&str] = &[
            "Neg",
            "Abs",
            "Relu",
            "Sigmoid",
            "Tanh",
            "Erf",
            "Softsign",
            "Atan",
            "Asinh",
            "HardSwish",
            "LeakyRelu",
            "Elu",
            "Selu",
            "Celu",
            "HardSigmoid",
            "Softplus",
            "Mish",
            "Gelu",
            "Sin",
            "Cos",
            "Exp",
            "Sinh",
            "Cosh",
            "Log",
            "Sqrt",
            "Reciprocal",
            "Acosh",
            "Asin",
            "Acos",
            "Atanh",
            "Tan",
            "Floor",
            "Ceil",
            "Round",
            "Sign",
            "ThresholdedRelu",
            "Shrink",
            "Identity",
            "Dropout",
        ];
        let x = self.pick(|v| v.is_float())?;
        if !self.room(1) {
            return None;
        }
        let op = self.choose(UNARY);
        let b = x.bound;
        let mut input = x.clone();
        let mut opset = 17;
        let mut a = Attributes::new();
        let (bound, exact) = match op {
            "Neg" | "Abs" | "Relu" | "Identity" | "Dropout" => (b, x.exact),
            "Sigmoid" | "Tanh" | "Erf" | "Softsign" | "Sin" | "Cos" => (1.0, false),
            "Atan" => (1.6, false),
            "Asinh" => ((2.0 * b + 1.0).ln() + 1.0, false),
            "HardSigmoid" => {
                a.insert("alpha", Attribute::Float(self.choose(&[0.2, 0.5])));
                a.insert("beta", Attribute::Float(self.choose(&[0.5, 0.6])));
                (1.0, false)
            }
            "LeakyRelu" => {
                a.insert("alpha", Attribute::Float(self.choose(&[0.01, 0.2, 1.5])));
                (1.5 * b, false)
            }
            "Elu" | "Celu" => {
                a.insert("alpha", Attribute::Float(self.choose(&[1.0, 0.5, 2.0])));
                (2.0 * b + 2.0, false)
            }
            "HardSwish" | "Softplus" | "Selu" => (2.0 * b + 2.0, false),
            "Mish" => {
                opset = 18;
                (b + 1.0, false)
            }
            "Gelu" => {
                opset = 20;
                if self.chance(50) {
                    a.insert("approximate", Attribute::String("tanh".into()));
                }
                (b + 1.0, false)
            }
            "Exp" | "Sinh" | "Cosh" => {
                if b > 10.0 {
                    return None;
                }
                (b.exp() + 1.0, false)
            }
            "Log" | "Sqrt" | "Reciprocal" | "Acosh" => {
                input = self.positive(&x, if op == "Acosh" { 1.1 } else { 0.5 })?;
                (input.bound + 2.0, false)
            }
            "Asin" | "Acos" | "Atanh" | "Tan" => {
                input = self.squash(&x, if op == "Tan" { 1.2 } else { 0.9 })?;
                (4.0, false)
            }
            "Floor" | "Ceil" | "Round" | "Sign" | "ThresholdedRelu" | "Shrink" => {
                if !x.exact {
                    return None;
                }
                if self.chance(60) && self.room(2) {
                    input = self.scale_pow2(&x)?;
                }
                match op {
                    "ThresholdedRelu" => {
                        a.insert("alpha", Attribute::Float(self.choose(&[0.1, 0.5, 1.0])));
                    }
                    "Shrink" => {
                        a.insert("lambd", Attribute::Float(self.choose(&[0.2, 0.5])));
                        a.insert("bias", Attribute::Float(self.choose(&[0.0, 0.25])));
                    }
                    _ => {}
                }
                let exact = op != "Shrink"
                    || matches!(a.get("bias"), Some(Attribute::Float(b)) if *b == 0.0);
                (input.bound + 1.0, exact)
            }
            _ => unreachable!("every listed operator is handled"),
        };
        if !fits(input.dtype, bound) {
            return None;
        }
        let u = input.uniform.clone();
        let rtol = input.rtol;
        self.emit1(op, opset, &[&input.name], a, bound, exact, |_| u, rtol)
            .map(|_| ())
    }

    fn binary(&mut self) -> Option<()> {
        let x = self.pick(|v| v.dtype != DType::Bool)?;
        if !self.room(1) {
            return None;
        }
        let int = x.dtype.is_int();
        let op = if int {
            self.choose(&[
                "Add",
                "Sub",
                "Mul",
                "Max",
                "Min",
                "Sum",
                "Div",
                "Mod",
                "Scale",
                "BitwiseAnd",
                "BitwiseOr",
                "BitwiseXor",
                "BitShift",
            ])
        } else {
            self.choose(&[
                "Add", "Sub", "Mul", "Div", "Pow", "Max", "Min", "Sum", "Mean", "PRelu", "Scale",
                "Mod",
            ])
        };
        let b = x.bound;
        match op {
            "Scale" => self.scale_pow2(&x).map(|_| ()),
            "PRelu" => {
                let k = self.below(x.shape.len() + 1);
                let shape: Vec<usize> = x.shape[k..]
                    .iter()
                    .map(|&d| if self.chance(40) { 1 } else { d })
                    .collect();
                let slope = self.leaf(x.dtype, shape, 80);
                let u = x.uniform.clone();
                self.emit1(
                    "PRelu",
                    16,
                    &[&x.name, &slope.name],
                    Attributes::new(),
                    b,
                    false,
                    |_| u,
                    x.rtol,
                )
                .map(|_| ())
            }
            "Div" | "Mod" => {
                if op == "Mod" && !int && !x.exact {
                    return None;
                }
                let shape = self.partner_shape(&x.shape);
                let d = self.leaf(x.dtype, shape, 60);
                let out = broadcast_shapes(&x.shape, &d.shape)?;
                let u = broadcast_uniform(&out, &[&x, &d]);
                let mut a = Attributes::new();
                if op == "Mod" && (!int || self.chance(50)) {
                    a.insert("fmod", Attribute::Int(1));
                }
                let bound = if op == "Div" { 20.0 * b } else { 9.0 };
                self.emit1(op, 14, &[&x.name, &d.name], a, bound, int, |_| u, x.rtol)
                    .map(|_| ())
            }
            "BitwiseAnd" | "BitwiseOr" | "BitwiseXor" => {
                let y = self.partner(&x, true);
                let out = broadcast_shapes(&x.shape, &y.shape)?;
                let u = broadcast_uniform(&out, &[&x, &y]);
                let bound = if x.dtype.is_signed_int() {
                    2.0 * x.bound.max(y.bound)
                } else {
                    f64::INFINITY
                };
                if !fits(x.dtype, bound) {
                    return None;
                }
                self.emit1(
                    op,
                    18,
                    &[&x.name, &y.name],
                    Attributes::new(),
                    bound,
                    true,
                    |_| u,
                    0.0,
                )
                .map(|_| ())
            }
            "BitShift" => {
                if x.dtype.is_signed_int() {
                    return None;
                }
                let shape = self.partner_shape(&x.shape);
                let bits = (x.dtype.size_in_bytes() * 8) as u64;
                let amounts: Vec<f32> = (0..numel(&shape))
                    .map(|_| (self.rng.next_u64() % bits) as f32)
                    .collect();
                let c = self.const_f(x.dtype, &shape, amounts);
                let cv = Gen::leaf_val(c.clone(), x.dtype, shape);
                let out = broadcast_shapes(&x.shape, &cv.shape)?;
                let u = broadcast_uniform(&out, &[&x, &cv]);
                let dir = self.choose(&["LEFT", "RIGHT"]);
                self.emit1(
                    op,
                    11,
                    &[&x.name, &c],
                    attrs(vec![("direction", Attribute::String(dir.into()))]),
                    f64::INFINITY,
                    true,
                    |_| u,
                    0.0,
                )
                .map(|_| ())
            }
            "Pow" => {
                if self.chance(50) {
                    let e: f32 = self.choose(&[2.0, 3.0]);
                    if !fits(x.dtype, b.powi(3)) {
                        return None;
                    }
                    let c = if self.chance(30) {
                        let t = Tensor::new(vec![], vec![e as i64]).expect("a scalar");
                        self.const_tensor(t)
                    } else {
                        self.const_f(x.dtype, &[], vec![e])
                    };
                    let u = x.uniform.clone();
                    self.emit1(
                        "Pow",
                        15,
                        &[&x.name, &c],
                        Attributes::new(),
                        b.powi(3) + 1.0,
                        false,
                        |_| u,
                        x.rtol,
                    )
                    .map(|_| ())
                } else {
                    let p = self.positive(&x, 0.5)?;
                    let shape = self.partner_shape(&p.shape);
                    let e = self.leaf(x.dtype, shape, 60);
                    let bound = (p.bound + 1.0).max(2.0);
                    let out = broadcast_shapes(&p.shape, &e.shape)?;
                    let u = broadcast_uniform(&out, &[&p, &e]);
                    self.emit1(
                        "Pow",
                        15,
                        &[&p.name, &e.name],
                        Attributes::new(),
                        bound,
                        false,
                        |_| u,
                        x.rtol,
                    )
                    .map(|_| ())
                }
            }
            _ => {
                let variadic = matches!(op, "Sum" | "Mean" | "Max" | "Min");
                let n = if variadic {
                    self.choose(&[1, 2, 2, 3])
                } else {
                    2
                };
                let mut vals = vec![x.clone()];
                for _ in 1..n {
                    let mut y = self.partner(&x, true);
                    let shape = vals
                        .iter()
                        .try_fold(y.shape.clone(), |s, v| broadcast_shapes(&s, &v.shape));
                    if shape.is_none_or(|s| numel(&s) > self.max_elems) {
                        y = self.leaf(x.dtype, x.shape.clone(), 100);
                    }
                    vals.push(y);
                }
                if self.chance(50) {
                    vals.reverse();
                }
                let out = vals
                    .iter()
                    .try_fold(vec![], |s: Vec<usize>, v| broadcast_shapes(&s, &v.shape))?;
                let bsum: f64 = vals.iter().map(|v| v.bound).sum();
                let bmax = vals.iter().fold(0.0f64, |m, v| m.max(v.bound));
                let bound = match op {
                    "Mul" => vals.iter().map(|v| v.bound).product(),
                    "Max" | "Min" | "Mean" => bmax,
                    _ => bsum,
                };
                if !fits(x.dtype, bound) {
                    return None;
                }
                let exact = matches!(op, "Max" | "Min") && vals.iter().all(|v| v.exact);
                let refs: Vec<&Val> = vals.iter().collect();
                let u = broadcast_uniform(&out, &refs);
                let rtol = vals.iter().fold(0.0f64, |m, v| m.max(v.rtol));
                let names: Vec<&str> = vals.iter().map(|v| v.name.as_str()).collect();
                self.emit1(op, 14, &names, Attributes::new(), bound, exact, |_| u, rtol)
                    .map(|_| ())
            }
        }
    }

    fn compare(&mut self) -> Option<()> {
        let x = self.pick(|v| v.exact && v.dtype != DType::Bool)?;
        if !self.room(1) {
            return None;
        }
        let op = self.choose(&["Less", "Greater", "Equal", "LessOrEqual", "GreaterOrEqual"]);
        let y = self.partner(&x, true);
        if !y.exact {
            return None;
        }
        let out = broadcast_shapes(&x.shape, &y.shape)?;
        let u = broadcast_uniform(&out, &[&x, &y]);
        self.emit1(
            op,
            16,
            &[&x.name, &y.name],
            Attributes::new(),
            1.0,
            true,
            |_| u,
            0.0,
        )
        .map(|_| ())
    }

    fn logic(&mut self) -> Option<()> {
        let x = self.pick(|v| v.dtype == DType::Bool)?;
        if !self.room(1) {
            return None;
        }
        if self.chance(30) {
            let u = x.uniform.clone();
            return self
                .emit1(
                    "Not",
                    1,
                    &[&x.name],
                    Attributes::new(),
                    1.0,
                    true,
                    |_| u,
                    0.0,
                )
                .map(|_| ());
        }
        let op = self.choose(&["And", "Or", "Xor"]);
        let y = self.partner(&x, true);
        let out = broadcast_shapes(&x.shape, &y.shape)?;
        let u = broadcast_uniform(&out, &[&x, &y]);
        self.emit1(
            op,
            7,
            &[&x.name, &y.name],
            Attributes::new(),
            1.0,
            true,
            |_| u,
            0.0,
        )
        .map(|_| ())
    }

    fn where_(&mut self) -> Option<()> {
        let c = self.pick(|v| v.dtype == DType::Bool)?;
        if !self.room(1) {
            return None;
        }
        let limit = self.max_elems;
        let cs = c.shape.clone();
        let x = self.pick(|v| {
            v.dtype != DType::Bool
                && broadcast_shapes(&v.shape, &cs).is_some_and(|s| numel(&s) <= limit)
        })?;
        let both = broadcast_shapes(&x.shape, &cs)?;
        let shape = self.partner_shape(&both);
        let y = self.leaf(x.dtype, shape, 50);
        let (a, b) = if self.chance(50) { (x, y) } else { (y, x) };
        let out = broadcast_shapes(&both, &b.shape)?;
        let u = broadcast_uniform(&out, &[&c, &a, &b]);
        let rtol = a.rtol.max(b.rtol);
        self.emit1(
            "Where",
            16,
            &[&c.name, &a.name, &b.name],
            Attributes::new(),
            a.bound.max(b.bound),
            a.exact && b.exact,
            |_| u,
            rtol,
        )
        .map(|_| ())
    }

    fn cast(&mut self) -> Option<()> {
        let x = self.pick(|_| true)?;
        if !self.room(1) {
            return None;
        }
        let mut input = x.clone();
        const INTS: [DType; 8] = [
            DType::I8,
            DType::U8,
            DType::I16,
            DType::U16,
            DType::I32,
            DType::U32,
            DType::I64,
            DType::U64,
        ];
        let to = match x.dtype {
            DType::F32 => {
                let to = if self.chance(30) {
                    self.choose(&INTS)
                } else {
                    self.choose(&[
                        DType::F64,
                        DType::F16,
                        DType::BF16,
                        DType::I32,
                        DType::I64,
                        DType::Bool,
                        DType::F32,
                    ])
                };
                if !to.is_float() {
                    if !x.exact {
                        return None;
                    }
                    if to != DType::Bool && self.room(2) && self.chance(70) {
                        input = self.scale_pow2(&x)?;
                    }
                }
                to
            }
            d if d.is_int() => {
                if self.chance(50) {
                    self.choose(&INTS)
                } else {
                    self.choose(&[DType::F32, DType::F64, DType::Bool])
                }
            }
            DType::Bool => self.choose(&[DType::F32, DType::I32, DType::I64]),
            _ => self.choose(&[DType::F32, DType::F32, DType::F64]),
        };
        if !fits(to, input.bound) {
            return None;
        }
        let u = input.uniform.clone();
        let rtol = input.rtol;
        let a = attrs(vec![("to", Attribute::Int(to.onnx_code() as i64))]);
        self.emit1(
            "Cast",
            19,
            &[&input.name],
            a,
            input.bound,
            input.exact,
            |_| u,
            rtol,
        )
        .map(|_| ())
    }

    fn clip(&mut self) -> Option<()> {
        let x = self.pick(|v| v.dtype != DType::Bool)?;
        if !self.room(1) {
            return None;
        }
        let b = x.bound.min(9.0);
        let (mut lo, mut hi) = (-self.uniform_f(0.1, 0.8) * b, self.uniform_f(0.1, 0.8) * b);
        if x.dtype.is_int() {
            lo = lo.floor();
            hi = hi.ceil();
        }
        if self.chance(5) {
            std::mem::swap(&mut lo, &mut hi);
        }
        let u = x.uniform.clone();
        if x.dtype == DType::F32 && self.chance(20) {
            let a = attrs(vec![
                ("min", Attribute::Float(lo as f32)),
                ("max", Attribute::Float(hi as f32)),
            ]);
            return self
                .emit1("Clip", 6, &[&x.name], a, x.bound, x.exact, |_| u, x.rtol)
                .map(|_| ());
        }
        let which = self.below(4);
        let lo_name = if which != 1 {
            self.const_f(x.dtype, &[], vec![lo as f32])
        } else {
            String::new()
        };
        let mut inputs = vec![x.name.clone(), lo_name];
        if which != 0 {
            let hi_name = self.const_f(x.dtype, &[], vec![hi as f32]);
            inputs.push(hi_name);
        }
        if which == 3 {
            inputs.truncate(1);
        }
        let names: Vec<&str> = inputs.iter().map(String::as_str).collect();
        self.emit1(
            "Clip",
            13,
            &names,
            Attributes::new(),
            x.bound,
            x.exact,
            |_| u,
            x.rtol,
        )
        .map(|_| ())
    }

    /// The transpose of the last two axes of `x`.
    fn transpose_last2(&mut self, x: &Val) -> Option<Val> {
        let r = x.shape.len();
        let mut perm: Vec<i64> = (0..r as i64).collect();
        perm.swap(r - 2, r - 1);
        let mut u = x.uniform.clone();
        u.swap(r - 2, r - 1);
        self.emit1(
            "Transpose",
            13,
            &[&x.name],
            attrs(vec![("perm", Attribute::Ints(perm))]),
            x.bound,
            x.exact,
            |_| u,
            x.rtol,
        )
    }

    /// New data of `shape` for a product's other operand; sometimes computed from a new input
    /// through a prologue the product may inline (a transpose, a reshape or an element-wise
    /// function), leaving room for the product itself.
    fn operand(&mut self, dtype: DType, shape: Vec<usize>, constant_percent: u64) -> Option<Val> {
        if !self.room(2) || !self.chance(30) {
            return Some(self.leaf(dtype, shape, constant_percent));
        }
        let r = shape.len();
        match self.below(3) {
            0 if r >= 2 => {
                let mut t = shape.clone();
                t.swap(r - 2, r - 1);
                let x = self.leaf(dtype, t, 0);
                self.transpose_last2(&x)
            }
            1 => {
                let flat = if r >= 2 && self.chance(50) {
                    let mut f = shape[..r - 2].to_vec();
                    f.push(shape[r - 2] * shape[r - 1]);
                    f
                } else {
                    vec![numel(&shape)]
                };
                let x = self.leaf(dtype, flat, 0);
                let target: Vec<i64> = shape.iter().map(|&d| d as i64).collect();
                let c = self.ints(&target);
                let xv = x.clone();
                self.emit1(
                    "Reshape",
                    14,
                    &[&x.name, &c],
                    Attributes::new(),
                    x.bound,
                    x.exact,
                    |s| mixed_uniform(s, &[&xv]),
                    x.rtol,
                )
            }
            _ => {
                let x = self.leaf(dtype, shape, 0);
                let op = if dtype.is_float() {
                    self.choose(&["Relu", "Neg", "Tanh", "Abs"])
                } else {
                    self.choose(&["Neg", "Abs"])
                };
                let u = x.uniform.clone();
                self.emit1(
                    op,
                    14,
                    &[&x.name],
                    Attributes::new(),
                    x.bound,
                    op != "Tanh",
                    |_| u,
                    x.rtol,
                )
            }
        }
    }

    fn matmul(&mut self) -> Option<()> {
        let x =
            self.pick(|v| matches!(v.dtype, DType::F32 | DType::F64 | DType::I32 | DType::I64))?;
        if x.shape.is_empty() || !self.room(1) {
            return None;
        }
        let mut a = x.clone();
        if a.shape.len() >= 2 && self.room(2) && self.chance(25) {
            a = self.transpose_last2(&a)?;
        }
        let r = a.shape.len();
        let constant = if self.chance(60) { 100 } else { 0 };
        let (left, right, k) = if r >= 2 && self.chance(20) {
            let k = a.shape[r - 2];
            let m = self.dim();
            let shape = if self.chance(60) {
                vec![m, k]
            } else {
                let mut s = a.shape[..r - 2].to_vec();
                s.extend([m, k]);
                s
            };
            let l = self.operand(a.dtype, shape, constant)?;
            (l, a, k)
        } else {
            let k = a.shape[r - 1];
            let n = self.dim();
            let shape = match self.below(5) {
                0 => vec![k],
                1 | 2 => vec![k, n],
                _ => {
                    let mut s: Vec<usize> = if r >= 3 {
                        a.shape[..r - 2]
                            .iter()
                            .map(|&d| if self.chance(30) { 1 } else { d })
                            .collect()
                    } else {
                        vec![self.choose(&[1, 2, 3])]
                    };
                    s.extend([k, n]);
                    s
                }
            };
            let b = self.operand(a.dtype, shape, constant)?;
            (a, b, k)
        };
        let bound = k as f64 * left.bound * right.bound;
        if !fits(x.dtype, bound) {
            return None;
        }
        let rtol = left.rtol.max(right.rtol);
        let (l, rr) = (left.clone(), right.clone());
        self.emit1(
            "MatMul",
            13,
            &[&left.name, &right.name],
            Attributes::new(),
            bound,
            false,
            |s| mixed_uniform(s, &[&l, &rr]),
            rtol,
        )
        .map(|_| ())
    }

    fn gemm(&mut self) -> Option<()> {
        let x = self.pick(|v| v.dtype == DType::F32 && v.shape.len() == 2)?;
        if !self.room(1) {
            return None;
        }
        let trans_a = self.chance(30);
        let (m, k) = if trans_a {
            (x.shape[1], x.shape[0])
        } else {
            (x.shape[0], x.shape[1])
        };
        let n = self.dim();
        let trans_b = self.chance(40);
        let b = self.leaf(
            DType::F32,
            if trans_b { vec![n, k] } else { vec![k, n] },
            70,
        );
        let mut a = Attributes::new();
        if trans_a {
            a.insert("transA", Attribute::Int(1));
        }
        if trans_b {
            a.insert("transB", Attribute::Int(1));
        }
        let alpha: f32 = self.choose(&[1.0, 1.0, 0.5, -1.25]);
        let beta: f32 = self.choose(&[1.0, 1.0, 2.0, -0.5]);
        if alpha != 1.0 {
            a.insert("alpha", Attribute::Float(alpha));
        }
        if beta != 1.0 {
            a.insert("beta", Attribute::Float(beta));
        }
        let mut inputs = vec![x.name.clone(), b.name.clone()];
        let c_shape = match self.below(6) {
            0 => None,
            1 => Some(vec![n]),
            2 => Some(vec![1, n]),
            3 => Some(vec![m, n]),
            4 => Some(vec![m, 1]),
            _ => Some(vec![]),
        };
        if let Some(s) = c_shape {
            let c = self.leaf(DType::F32, s, 70);
            inputs.push(c.name);
        }
        let names: Vec<&str> = inputs.iter().map(String::as_str).collect();
        let bound = alpha.abs() as f64 * k as f64 * x.bound + beta.abs() as f64;
        let xv = x.clone();
        self.emit1(
            "Gemm",
            13,
            &names,
            a,
            bound,
            false,
            |s| mixed_uniform(s, &[&xv]),
            x.rtol,
        )
        .map(|_| ())
    }

    fn conv(&mut self) -> Option<()> {
        let x =
            self.pick(|v| v.dtype == DType::F32 && (v.shape.len() == 3 || v.shape.len() == 4))?;
        if !self.room(1) {
            return None;
        }
        self.conv_on(&x, ConvKind::Random).map(|_| ())
    }

    /// A convolution of `x` (rank 3 or 4, f32) with new weights (and sometimes a bias).
    fn conv_on(&mut self, x: &Val, kind: ConvKind) -> Option<Val> {
        let c = x.shape[1];
        let spatial = x.shape[2..].to_vec();
        let g = match kind {
            ConvKind::Random if self.chance(25) => c,
            ConvKind::Random => {
                let d = divisors(c);
                self.choose(&d)
            }
            ConvKind::Pointwise(_) => 1,
            ConvKind::Depthwise => c,
        };
        let oc = if g == 1 {
            self.choose(&[1, 2, 3, 4, 5, 8, 16])
        } else {
            g * self.choose(&[1, 1, 2, 3])
        };
        let oc = match kind {
            ConvKind::Pointwise(oc) => oc,
            ConvKind::Depthwise => c,
            ConvKind::Random if c >= 16 && g == 1 && self.chance(50) => c,
            ConvKind::Random => oc,
        };
        let mut kernel = vec![];
        let mut strides = vec![];
        let mut dilations = vec![];
        let (mut pb, mut pe) = (vec![], vec![]);
        let mut out = vec![];
        let mut valid_fits = true;
        // Sometimes the windows the graph passes rewrite: 3×3, 1×7 and 7×1 at stride 1, padded
        // to keep the size (Winograd, direct convolutions).
        let same = match kind {
            ConvKind::Pointwise(_) => Some([1, 1]),
            ConvKind::Depthwise => Some([3, 3]),
            ConvKind::Random if spatial.len() == 2 && self.chance(30) => {
                Some(self.choose(&[[3, 3], [3, 3], [1, 7], [7, 1]]))
            }
            ConvKind::Random => None,
        };
        for (axis, &d) in spatial.iter().enumerate() {
            let (k, dil, s, b, e) = match same {
                Some(ks) => (ks[axis], 1, 1, ks[axis] / 2, ks[axis] / 2),
                None => {
                    let k = self.choose(&[1, 1, 2, 3, 3, 3, 5, 7]);
                    let dil = self.choose(&[1, 1, 1, 2]);
                    let s = self.choose(&[1, 1, 1, 2, 3]);
                    (k, dil, s, self.below(k), self.below(k))
                }
            };
            let span = dil * (k - 1) + 1;
            if d + b + e < span {
                return None;
            }
            valid_fits &= d >= span;
            out.push((d + b + e - span) / s + 1);
            kernel.push(k as i64);
            strides.push(s as i64);
            dilations.push(dil as i64);
            pb.push(b as i64);
            pe.push(e as i64);
        }
        let cost =
            x.shape[0] * oc * numel(&out) * (c / g) * kernel.iter().product::<i64>() as usize;
        if cost > 20_000_000 {
            return None;
        }
        let mut a = Attributes::new();
        if g > 1 {
            a.insert("group", Attribute::Int(g as i64));
        }
        if self.chance(50) {
            a.insert("kernel_shape", Attribute::Ints(kernel.clone()));
        }
        if strides.iter().any(|&s| s != 1) || self.chance(20) {
            a.insert("strides", Attribute::Ints(strides));
        }
        if dilations.iter().any(|&s| s != 1) {
            a.insert("dilations", Attribute::Ints(dilations));
        }
        if self.chance(10) {
            let mode = self.auto_pad(valid_fits);
            a.insert("auto_pad", Attribute::String(mode.into()));
        } else if pb.iter().chain(&pe).any(|&p| p != 0) {
            a.insert("pads", Attribute::Ints([pb, pe].concat()));
        }
        let mut wshape = vec![oc, c / g];
        wshape.extend(kernel.iter().map(|&k| k as usize));
        let w = self.leaf(DType::F32, wshape, 90);
        let mut inputs = vec![x.name.clone(), w.name.clone()];
        if self.chance(60) {
            let bias = self.leaf(DType::F32, vec![oc], 100);
            inputs.push(bias.name);
        }
        let names: Vec<&str> = inputs.iter().map(String::as_str).collect();
        let bound = (c / g) as f64 * kernel.iter().product::<i64>() as f64 * x.bound + 1.0;
        let xv = x.clone();
        self.emit1(
            "Conv",
            11,
            &names,
            a,
            bound,
            false,
            |s| mixed_uniform(s, &[&xv]),
            x.rtol,
        )
    }

    /// Chains the graph passes rewrite: a convolution and a BatchNormalization (folded), an
    /// average pooling before a pointwise convolution with fewer channels (moved after it),
    /// a depthwise convolution, an activation and a pointwise convolution (channels-last).
    fn pattern(&mut self) -> Option<()> {
        let x = self.pick(|v| v.dtype == DType::F32 && v.shape.len() == 4)?;
        let c = x.shape[1];
        match self.below(3) {
            0 => {
                if !self.room(2) {
                    return None;
                }
                let y = self.conv_on(&x, ConvKind::Random)?;
                self.batch_norm_on(&y, 1e-5).map(|_| ())
            }
            1 => {
                if !self.room(2) || c < 2 {
                    return None;
                }
                let (h, w) = (x.shape[2], x.shape[3]);
                let a = if h >= 2 && w >= 2 && self.chance(60) {
                    attrs(vec![
                        ("kernel_shape", Attribute::Ints(vec![2, 2])),
                        ("strides", Attribute::Ints(vec![2, 2])),
                    ])
                } else {
                    attrs(vec![
                        ("kernel_shape", Attribute::Ints(vec![3, 3])),
                        ("pads", Attribute::Ints(vec![1, 1, 1, 1])),
                        ("count_include_pad", Attribute::Int(self.below(2) as i64)),
                    ])
                };
                let xv = x.clone();
                let p = self.emit1(
                    "AveragePool",
                    19,
                    &[&x.name],
                    a,
                    x.bound,
                    false,
                    |s| mixed_uniform(s, &[&xv]),
                    x.rtol,
                )?;
                let oc = 1 + self.below(c - 1);
                self.conv_on(&p, ConvKind::Pointwise(oc)).map(|_| ())
            }
            _ => {
                if !self.room(3) {
                    return None;
                }
                let d = self.conv_on(&x, ConvKind::Depthwise)?;
                let u = d.uniform.clone();
                let act = if self.chance(50) {
                    self.emit1(
                        "Relu",
                        14,
                        &[&d.name],
                        Attributes::new(),
                        d.bound,
                        false,
                        |_| u,
                        d.rtol,
                    )?
                } else {
                    let lo = self.const_f(DType::F32, &[], vec![0.0]);
                    let hi = self.const_f(DType::F32, &[], vec![6.0]);
                    self.emit1(
                        "Clip",
                        13,
                        &[&d.name, &lo, &hi],
                        Attributes::new(),
                        d.bound,
                        false,
                        |_| u,
                        d.rtol,
                    )?
                };
                let oc = self.choose(&[1, 3, 8, 16, 24]);
                self.conv_on(&act, ConvKind::Pointwise(oc)).map(|_| ())
            }
        }
    }

    fn pool(&mut self) -> Option<()> {
        let x =
            self.pick(|v| v.dtype == DType::F32 && (v.shape.len() == 3 || v.shape.len() == 4))?;
        if !self.room(1) {
            return None;
        }
        let op = self.choose(&[
            "MaxPool",
            "MaxPool",
            "AveragePool",
            "AveragePool",
            "LpPool",
            "GlobalAveragePool",
            "GlobalMaxPool",
            "GlobalLpPool",
        ]);
        let xv = x.clone();
        let max = op.contains("Max");
        let exact = max && x.exact;
        if op.starts_with("Global") {
            let plane = numel(&x.shape[2..]) as f64;
            let bound = if op == "GlobalLpPool" {
                plane * x.bound
            } else {
                x.bound
            };
            return self
                .emit1(
                    op,
                    2,
                    &[&x.name],
                    Attributes::new(),
                    bound,
                    exact,
                    |s| mixed_uniform(s, &[&xv]),
                    x.rtol,
                )
                .map(|_| ());
        }
        let mut kernel = vec![];
        let mut strides = vec![];
        let mut dilations = vec![];
        let (mut pb, mut pe) = (vec![], vec![]);
        let mut valid_fits = true;
        for &d in &x.shape[2..] {
            let k = self.choose(&[1, 2, 2, 3, 3, 4]).min(d + 1);
            let dil = if op == "AveragePool" {
                1
            } else {
                self.choose(&[1, 1, 1, 2])
            };
            let s = self.choose(&[1, 1, 2, 2, 3]);
            let (b, e) = (self.below(k), self.below(k));
            if d + b + e < dil * (k - 1) + 1 {
                return None;
            }
            valid_fits &= d > dil * (k - 1);
            kernel.push(k as i64);
            strides.push(s as i64);
            dilations.push(dil as i64);
            pb.push(b as i64);
            pe.push(e as i64);
        }
        let mut a = attrs(vec![("kernel_shape", Attribute::Ints(kernel.clone()))]);
        if strides.iter().any(|&s| s != 1) || self.chance(20) {
            a.insert("strides", Attribute::Ints(strides));
        }
        if dilations.iter().any(|&s| s != 1) {
            a.insert("dilations", Attribute::Ints(dilations));
        }
        if self.chance(10) {
            let mode = self.auto_pad(valid_fits);
            a.insert("auto_pad", Attribute::String(mode.into()));
        } else if pb.iter().chain(&pe).any(|&p| p != 0) {
            a.insert("pads", Attribute::Ints([pb, pe].concat()));
        }
        if op != "LpPool" && self.chance(25) {
            a.insert("ceil_mode", Attribute::Int(1));
        }
        if op == "AveragePool" && self.chance(50) {
            a.insert("count_include_pad", Attribute::Int(1));
        }
        let window = kernel.iter().product::<i64>() as f64;
        let bound = if op == "LpPool" {
            let p = self.choose(&[1, 2, 3]);
            a.insert("p", Attribute::Int(p));
            window * x.bound
        } else {
            x.bound
        };
        let opset = if op == "LpPool" { 18 } else { 19 };
        let outputs = if op == "MaxPool" && self.chance(15) {
            2
        } else {
            1
        };
        for (i, (name, dtype, shape)) in self
            .emit(op, opset, &[&x.name], a, outputs)?
            .into_iter()
            .enumerate()
        {
            self.pool.push(Val {
                name,
                dtype,
                uniform: mixed_uniform(&shape, &[&xv]),
                bound: if i == 0 {
                    bound
                } else {
                    numel(&x.shape) as f64
                },
                exact: exact || i == 1,
                rtol: x.rtol,
                shape,
            });
        }
        Some(())
    }

    /// An `auto_pad` mode; `VALID` only when every window fits in the unpadded input.
    fn auto_pad(&mut self, valid_fits: bool) -> &'static str {
        if valid_fits {
            self.choose(&["SAME_UPPER", "SAME_LOWER", "VALID"])
        } else {
            self.choose(&["SAME_UPPER", "SAME_LOWER"])
        }
    }

    /// Random axes of a rank-`r` value: a non-empty subset, each possibly negative.
    fn axes(&mut self, r: usize) -> Vec<i64> {
        loop {
            let mut axes: Vec<i64> = vec![];
            for a in 0..r as i64 {
                if self.chance(45) {
                    axes.push(if self.chance(30) { a - r as i64 } else { a });
                }
            }
            if !axes.is_empty() {
                return axes;
            }
        }
    }

    fn reduce(&mut self) -> Option<()> {
        let x = self.pick(|v| v.dtype != DType::Bool && v.dtype != DType::BF16)?;
        if !self.room(1) {
            return None;
        }
        let int = x.dtype.is_int();
        let op = if int {
            self.choose(&[
                "ReduceSum",
                "ReduceMax",
                "ReduceMin",
                "ReduceProd",
                "ReduceL1",
                "ReduceSumSquare",
            ])
        } else {
            self.choose(&[
                "ReduceSum",
                "ReduceSum",
                "ReduceMean",
                "ReduceMax",
                "ReduceMin",
                "ReduceProd",
                "ReduceL1",
                "ReduceL2",
                "ReduceLogSum",
                "ReduceLogSumExp",
                "ReduceSumSquare",
            ])
        };
        let r = x.shape.len();
        let all = r == 0 || self.chance(20);
        let axes: Vec<i64> = if all { vec![] } else { self.axes(r) };
        let reduced: Vec<usize> = if all {
            (0..r).collect()
        } else {
            axes.iter()
                .map(|&a| {
                    if a < 0 {
                        (a + r as i64) as usize
                    } else {
                        a as usize
                    }
                })
                .collect()
        };
        let n = reduced.iter().map(|&a| x.shape[a]).product::<usize>() as f64;
        let mut input = x.clone();
        if op == "ReduceLogSum" {
            input = self.positive(&x, 0.5)?;
        }
        let b = input.bound;
        let bound = match op {
            "ReduceSum" | "ReduceL1" => n * b,
            "ReduceMean" | "ReduceMax" | "ReduceMin" => b,
            "ReduceProd" => {
                if b > 1.0 && n * b.ln() > 20.0 {
                    return None;
                }
                b.max(1.0).powf(n)
            }
            "ReduceL2" => n.sqrt() * b,
            "ReduceSumSquare" => n * b * b,
            _ => b + n.ln() + 1.0,
        };
        if !fits(x.dtype, bound) {
            return None;
        }
        let keepdims = self.chance(50);
        let mut a = Attributes::new();
        if !keepdims {
            a.insert("keepdims", Attribute::Int(0));
        } else if self.chance(30) {
            a.insert("keepdims", Attribute::Int(1));
        }
        let axes_input = op == "ReduceSum" || self.chance(50);
        let opset = if op == "ReduceSum" || !axes_input {
            17
        } else {
            18
        };
        let mut inputs = vec![input.name.clone()];
        if all {
            if axes_input && self.chance(30) {
                let empty = Tensor::new(vec![0], Vec::<i64>::new()).expect("an empty vector");
                let e = self.const_tensor(empty);
                inputs.push(e);
                if self.chance(30) {
                    a.insert("noop_with_empty_axes", Attribute::Int(1));
                }
            }
        } else if axes_input {
            let c = self.ints(&axes);
            inputs.push(c);
        } else {
            a.insert("axes", Attribute::Ints(axes));
        }
        let exact = matches!(op, "ReduceMax" | "ReduceMin") && input.exact;
        let uniform_in = input.uniform.clone();
        let shape_in = input.shape.clone();
        let names: Vec<&str> = inputs.iter().map(String::as_str).collect();
        self.emit1(
            op,
            opset,
            &names,
            a,
            bound,
            exact,
            |s| {
                if s.len() == shape_in.len() {
                    s.iter()
                        .zip(&uniform_in)
                        .map(|(&d, &u)| d == 1 || u)
                        .collect()
                } else {
                    let kept: Vec<bool> = (0..shape_in.len())
                        .filter(|d| !reduced.contains(d))
                        .map(|d| uniform_in[d])
                        .collect();
                    s.iter()
                        .enumerate()
                        .map(|(i, &d)| d == 1 || kept.get(i).copied().unwrap_or(true))
                        .collect()
                }
            },
            input.rtol,
        )
        .map(|_| ())
    }

    fn arg_reduce(&mut self) -> Option<()> {
        let x = self.pick(|v| v.exact && v.dtype != DType::Bool && !v.shape.is_empty())?;
        if !self.room(1) {
            return None;
        }
        let r = x.shape.len() as i64;
        let axis = self.below(r as usize) as i64 - if self.chance(30) { r } else { 0 };
        let mut a = attrs(vec![("axis", Attribute::Int(axis))]);
        if self.chance(50) {
            a.insert("keepdims", Attribute::Int(0));
        }
        if self.chance(30) {
            a.insert("select_last_index", Attribute::Int(1));
        }
        let op = self.choose(&["ArgMax", "ArgMin"]);
        let bound = x.shape.iter().max().copied().unwrap_or(1) as f64;
        let xv = x.clone();
        self.emit1(
            op,
            13,
            &[&x.name],
            a,
            bound,
            true,
            |s| mixed_uniform(s, &[&xv]),
            0.0,
        )
        .map(|_| ())
    }

    fn softmax(&mut self) -> Option<()> {
        let x = self.pick(|v| v.is_float() && v.dtype != DType::BF16 && !v.shape.is_empty())?;
        if !self.room(1) {
            return None;
        }
        let op = if x.exact && self.chance(20) {
            "Hardmax"
        } else {
            self.choose(&["Softmax", "LogSoftmax"])
        };
        let r = x.shape.len() as i64;
        let opset = if self.chance(20) { 11 } else { 13 };
        let axis = self.below(r as usize) as i64 - if self.chance(30) { r } else { 0 };
        let a = attrs(vec![("axis", Attribute::Int(axis))]);
        let n = numel(&x.shape) as f64;
        let bound = if op == "LogSoftmax" {
            2.0 * x.bound + n.ln() + 1.0
        } else {
            1.0
        };
        let u = if opset == 11 {
            mixed_uniform(&x.shape, &[&x])
        } else {
            x.uniform.clone()
        };
        self.emit1(
            op,
            opset,
            &[&x.name],
            a,
            bound,
            op == "Hardmax",
            |_| u,
            x.rtol,
        )
        .map(|_| ())
    }

    /// The reference value of `x` for the case so far.
    fn value(&self, x: &Val) -> Option<Tensor> {
        let mut probe = self.case.clone();
        probe.outputs = vec![(x.name.clone(), Cmp::Exact)];
        let mut out = run_reference(&probe.graph().ok()?, &probe.inputs).ok()?;
        out.pop().map(|(_, t)| t)
    }

    /// Whether normalizing `x` over contiguous rows of `row` elements is well conditioned:
    /// every row's |mean| at most 8 standard deviations (a row of zeros is fine). A worse row
    /// cancels most digits of `x - mean` in f32 (the reference works in f64).
    fn well_conditioned(&self, x: &Val, row: usize) -> bool {
        let Some(t) = self.value(x) else {
            return false;
        };
        t.to_f64_vec().chunks(row.max(1)).all(|r| {
            let n = r.len() as f64;
            let mean = r.iter().sum::<f64>() / n;
            let var = r.iter().map(|v| (v - mean) * (v - mean)).sum::<f64>() / n;
            mean == 0.0 && var == 0.0 || mean.abs() <= 8.0 * var.sqrt()
        })
    }

    /// Inference BatchNormalization of `x` (rank ≥ 2) with constant statistics.
    fn batch_norm_on(&mut self, x: &Val, eps: f32) -> Option<Val> {
        let c = x.shape[1];
        let names: Vec<String> = (0..4)
            .map(|i| {
                let values: Vec<f32> = (0..c)
                    .map(|_| {
                        let v = self.rng.nonzero_f32();
                        if i == 3 {
                            v.abs() + 0.1
                        } else {
                            v
                        }
                    })
                    .collect();
                self.const_f(DType::F32, &[c], values)
            })
            .collect();
        let u = x.uniform.clone();
        self.emit1(
            "BatchNormalization",
            15,
            &[&x.name, &names[0], &names[1], &names[2], &names[3]],
            attrs(vec![("epsilon", Attribute::Float(eps))]),
            4.0 * x.bound + 4.0,
            false,
            |_| u,
            x.rtol,
        )
    }

    fn normalization(&mut self) -> Option<()> {
        let x = self.pick(|v| v.dtype == DType::F32 && !v.shape.is_empty())?;
        if !self.room(1) {
            return None;
        }
        let r = x.shape.len();
        let u = x.uniform.clone();
        let eps: f32 = self.choose(&[1e-5, 1e-5, 1e-3]);
        match self.below(4) {
            0 => {
                let axis = self.below(r);
                let normalized: Vec<usize> = (axis..r).collect();
                if !x.varies_along(&normalized)
                    || !self.well_conditioned(&x, numel(&x.shape[axis..]))
                {
                    return None;
                }
                let pshape: Vec<usize> = x.shape[axis..]
                    .iter()
                    .enumerate()
                    .map(|(i, &d)| if i > 0 && self.chance(20) { 1 } else { d })
                    .collect();
                let pshape = if self.chance(30) {
                    pshape[pshape.len() - 1..].to_vec()
                } else {
                    pshape
                };
                let scale = self.leaf(DType::F32, pshape.clone(), 80);
                let mut inputs = vec![x.name.clone(), scale.name];
                if self.chance(60) {
                    let b = self.leaf(DType::F32, pshape, 100);
                    inputs.push(b.name);
                }
                let axis = if self.chance(30) {
                    axis as i64 - r as i64
                } else {
                    axis as i64
                };
                let mut a = attrs(vec![("axis", Attribute::Int(axis))]);
                if eps != 1e-5 {
                    a.insert("epsilon", Attribute::Float(eps));
                }
                let n = numel(&x.shape[axis.rem_euclid(r as i64) as usize..]) as f64;
                let names: Vec<&str> = inputs.iter().map(String::as_str).collect();
                // Sometimes the statistics too: the mean and the inverse standard deviation.
                let outputs = if self.chance(20) { 3 } else { 1 };
                let outs = self.emit("LayerNormalization", 17, &names, a, outputs)?;
                for (i, (name, dtype, shape)) in outs.into_iter().enumerate() {
                    let bound = [n.sqrt() + 1.0, x.bound, 1.0 / (eps as f64).sqrt()][i];
                    let uniform = if i == 0 {
                        u.clone()
                    } else {
                        mixed_uniform(&shape, &[&x])
                    };
                    self.pool.push(Val {
                        name,
                        dtype,
                        shape,
                        bound,
                        exact: false,
                        uniform,
                        rtol: x.rtol,
                    });
                }
                Some(())
            }
            1 => {
                if r < 2 {
                    return None;
                }
                self.batch_norm_on(&x, eps).map(|_| ())
            }
            2 => {
                if r < 3
                    || !x.varies_along(&(2..r).collect::<Vec<_>>())
                    || !self.well_conditioned(&x, numel(&x.shape[2..]))
                {
                    return None;
                }
                let c = x.shape[1];
                let s = self.leaf(DType::F32, vec![c], 100);
                let b = self.leaf(DType::F32, vec![c], 100);
                let n = numel(&x.shape[2..]) as f64;
                self.emit1(
                    "InstanceNormalization",
                    6,
                    &[&x.name, &s.name, &b.name],
                    attrs(vec![("epsilon", Attribute::Float(eps))]),
                    n.sqrt() + 1.0,
                    false,
                    |_| u,
                    x.rtol,
                )
                .map(|_| ())
            }
            _ => {
                if r < 3 {
                    return None;
                }
                let c = x.shape[1];
                let d = divisors(c);
                let groups = self.choose(&d);
                let per_group = c / groups;
                let spatial_varies = x.varies_along(&(2..r).collect::<Vec<_>>());
                if !(spatial_varies || (per_group > 1 && !x.uniform[1]))
                    || !self.well_conditioned(&x, per_group * numel(&x.shape[2..]))
                {
                    return None;
                }
                let s = self.leaf(DType::F32, vec![c], 100);
                let b = self.leaf(DType::F32, vec![c], 100);
                let n = (per_group * numel(&x.shape[2..])) as f64;
                self.emit1(
                    "GroupNormalization",
                    21,
                    &[&x.name, &s.name, &b.name],
                    attrs(vec![
                        ("epsilon", Attribute::Float(eps)),
                        ("num_groups", Attribute::Int(groups as i64)),
                    ]),
                    n.sqrt() + 1.0,
                    false,
                    |_| u,
                    x.rtol,
                )
                .map(|_| ())
            }
        }
    }

    fn transpose(&mut self) -> Option<()> {
        let x = self.pick(|v| v.shape.len() >= 2)?;
        if !self.room(1) {
            return None;
        }
        let r = x.shape.len();
        let mut perm: Vec<usize> = (0..r).collect();
        for i in (1..r).rev() {
            let j = self.below(i + 1);
            perm.swap(i, j);
        }
        let mut a = Attributes::new();
        if self.chance(85) {
            a.insert(
                "perm",
                Attribute::Ints(perm.iter().map(|&p| p as i64).collect()),
            );
        } else {
            perm = (0..r).rev().collect();
        }
        let u: Vec<bool> = perm.iter().map(|&p| x.uniform[p]).collect();
        self.emit1(
            "Transpose",
            13,
            &[&x.name],
            a,
            x.bound,
            x.exact,
            |_| u,
            x.rtol,
        )
        .map(|_| ())
    }

    fn reshape(&mut self) -> Option<()> {
        let x = self.pick(|_| true)?;
        if !self.room(1) {
            return None;
        }
        let n = numel(&x.shape);
        let xv = x.clone();
        if self.chance(25) {
            let r = x.shape.len() as i64;
            let axis = self.below(r as usize + 1) as i64 - if self.chance(20) { r } else { 0 };
            return self
                .emit1(
                    "Flatten",
                    13,
                    &[&x.name],
                    attrs(vec![("axis", Attribute::Int(axis))]),
                    x.bound,
                    x.exact,
                    |s| mixed_uniform(s, &[&xv]),
                    x.rtol,
                )
                .map(|_| ());
        }
        let rank = self.choose(&[1, 2, 2, 3, 3, 4]);
        let mut target: Vec<i64> = vec![];
        let mut rest = n;
        for _ in 1..rank {
            let d = divisors(rest);
            let f = self.choose(&d);
            target.push(f as i64);
            rest /= f;
        }
        target.push(rest as i64);
        if self.chance(40) {
            let i = self.below(target.len());
            target[i] = -1;
        }
        for (i, t) in target.iter_mut().enumerate() {
            if *t > 0 && x.shape.get(i) == Some(&(*t as usize)) && self.chance(40) {
                *t = 0;
            }
        }
        let s = self.ints(&target);
        self.emit1(
            "Reshape",
            14,
            &[&x.name, &s],
            Attributes::new(),
            x.bound,
            x.exact,
            |s| mixed_uniform(s, &[&xv]),
            x.rtol,
        )
        .map(|_| ())
    }

    fn squeeze(&mut self) -> Option<()> {
        let x = self.pick(|_| true)?;
        if !self.room(1) {
            return None;
        }
        let r = x.shape.len();
        let ones: Vec<usize> = (0..r).filter(|&a| x.shape[a] == 1).collect();
        if !ones.is_empty() && self.chance(50) {
            let axes: Vec<usize> = ones.iter().copied().filter(|_| self.chance(70)).collect();
            let mut inputs = vec![x.name.clone()];
            if !axes.is_empty() {
                let neg: Vec<i64> = axes
                    .iter()
                    .map(|&a| {
                        if self.chance(30) {
                            a as i64 - r as i64
                        } else {
                            a as i64
                        }
                    })
                    .collect();
                inputs.push(self.ints(&neg));
            }
            let u: Vec<bool> = (0..r)
                .filter(|a| !(if axes.is_empty() { &ones } else { &axes }).contains(a))
                .map(|a| x.uniform[a])
                .collect();
            let names: Vec<&str> = inputs.iter().map(String::as_str).collect();
            return self
                .emit1(
                    "Squeeze",
                    13,
                    &names,
                    Attributes::new(),
                    x.bound,
                    x.exact,
                    |_| u,
                    x.rtol,
                )
                .map(|_| ());
        }
        if r >= 5 {
            return None;
        }
        let k = self.choose(&[1, 1, 2]).min(5 - r);
        let out_rank = r + k;
        let mut axes: Vec<usize> = vec![];
        while axes.len() < k {
            let a = self.below(out_rank);
            if !axes.contains(&a) {
                axes.push(a);
            }
        }
        let given: Vec<i64> = axes
            .iter()
            .map(|&a| {
                if self.chance(30) {
                    a as i64 - out_rank as i64
                } else {
                    a as i64
                }
            })
            .collect();
        let c = self.ints(&given);
        let mut src = x.uniform.iter();
        let u: Vec<bool> = (0..out_rank)
            .map(|a| {
                if axes.contains(&a) {
                    true
                } else {
                    *src.next().unwrap_or(&true)
                }
            })
            .collect();
        self.emit1(
            "Unsqueeze",
            13,
            &[&x.name, &c],
            Attributes::new(),
            x.bound,
            x.exact,
            |_| u,
            x.rtol,
        )
        .map(|_| ())
    }

    fn slice(&mut self) -> Option<()> {
        let x = self.pick(|v| !v.shape.is_empty())?;
        if !self.room(1) {
            return None;
        }
        let r = x.shape.len();
        let (mut starts, mut ends, mut axes, mut steps) = (vec![], vec![], vec![], vec![]);
        for a in 0..r {
            if !self.chance(60) {
                continue;
            }
            let d = x.shape[a] as i64;
            let step: i64 = self.choose(&[1, 1, 1, 2, 3, -1, -2]);
            let pos =
                |g: &mut Gen| g.below(d as usize + 1) as i64 - if g.chance(30) { d } else { 0 };
            let (s, e) = if step > 0 {
                let s = pos(self);
                let e = if self.chance(15) { i64::MAX } else { pos(self) };
                (s, e)
            } else {
                let s = if self.chance(15) { i64::MAX } else { pos(self) };
                let e = if self.chance(15) {
                    i64::MIN
                } else {
                    pos(self) - 1
                };
                (s, e)
            };
            starts.push(s);
            ends.push(e);
            axes.push(if self.chance(30) {
                a as i64 - r as i64
            } else {
                a as i64
            });
            steps.push(step);
        }
        if axes.is_empty() {
            return None;
        }
        let s = self.ints(&starts);
        let e = self.ints(&ends);
        let mut inputs = vec![x.name.clone(), s, e];
        let all_axes = axes.len() == r && axes.iter().enumerate().all(|(i, &a)| a == i as i64);
        if !all_axes || self.chance(50) || steps.iter().any(|&s| s != 1) {
            inputs.push(self.ints(&axes));
            if steps.iter().any(|&s| s != 1) || self.chance(50) {
                inputs.push(self.ints(&steps));
            }
        }
        let xu = x.uniform.clone();
        let names: Vec<&str> = inputs.iter().map(String::as_str).collect();
        self.emit1(
            "Slice",
            13,
            &names,
            Attributes::new(),
            x.bound,
            x.exact,
            |s| s.iter().zip(&xu).map(|(&d, &u)| d == 1 || u).collect(),
            x.rtol,
        )
        .map(|_| ())
    }

    fn gather(&mut self) -> Option<()> {
        let x = self.pick(|v| !v.shape.is_empty())?;
        if !self.room(1) {
            return None;
        }
        let r = x.shape.len();
        let axis = self.below(r);
        let d = x.shape[axis] as i64;
        let ishape: Vec<usize> = match self.below(4) {
            0 => vec![],
            1 | 2 => vec![self.choose(&[1, 2, 3, 5, 7])],
            _ => vec![self.choose(&[1, 2, 3]), self.choose(&[2, 4])],
        };
        let values: Vec<i64> = (0..numel(&ishape))
            .map(|_| self.below(2 * d as usize) as i64 - d)
            .collect();
        let distinct = values
            .iter()
            .map(|&v| v.rem_euclid(d))
            .collect::<BTreeSet<_>>()
            .len()
            == values.len();
        let t = Tensor::new(ishape.clone(), values).expect("values match the shape");
        let idx_dtype = if self.chance(25) {
            DType::I32
        } else {
            DType::I64
        };
        let t = t.cast(idx_dtype);
        let prefix = if self.chance(25) { "x" } else { "c" };
        let name = self.fresh(prefix);
        if name.starts_with('x') {
            self.case.inputs.push((name.clone(), t));
        } else {
            self.case.consts.push((name.clone(), t));
        }
        let mut u: Vec<bool> = x.uniform[..axis].to_vec();
        u.extend(
            ishape
                .iter()
                .map(|&n| n == 1 || !distinct || x.uniform[axis]),
        );
        u.extend(&x.uniform[axis + 1..]);
        let ax = if self.chance(30) {
            axis as i64 - r as i64
        } else {
            axis as i64
        };
        self.emit1(
            "Gather",
            13,
            &[&x.name, &name],
            attrs(vec![("axis", Attribute::Int(ax))]),
            x.bound,
            x.exact,
            |_| u,
            x.rtol,
        )
        .map(|_| ())
    }

    fn pad(&mut self) -> Option<()> {
        let x = self.pick(|v| !v.shape.is_empty() && v.dtype != DType::Bool)?;
        if !self.room(1) {
            return None;
        }
        let r = x.shape.len();
        let mode = self.choose(&["constant", "constant", "reflect", "edge"]);
        let mut pads = vec![0i64; 2 * r];
        for a in 0..r {
            let d = x.shape[a] as i64;
            for side in [a, a + r] {
                if self.chance(50) {
                    pads[side] = match mode {
                        "reflect" => self.below(d as usize) as i64,
                        "edge" => self.below(3) as i64,
                        _ => {
                            if d > 1 && self.chance(15) {
                                -(self.below(d as usize - 1) as i64) - 1
                            } else {
                                self.below(3) as i64
                            }
                        }
                    };
                }
            }
            if pads[a] + pads[a + r] <= -d {
                pads[a + r] = 0;
            }
        }
        let opset = self.choose(&[13, 18]);
        let mut inputs = vec![x.name.clone()];
        let use_axes = opset == 18 && self.chance(50);
        if use_axes {
            let axes: Vec<usize> = (0..r)
                .filter(|&a| pads[a] != 0 || pads[a + r] != 0)
                .collect();
            if axes.is_empty() {
                return None;
            }
            let begins: Vec<i64> = axes.iter().map(|&a| pads[a]).collect();
            let ends: Vec<i64> = axes.iter().map(|&a| pads[a + r]).collect();
            inputs.push(self.ints(&[begins, ends].concat()));
            let c = if mode == "constant" && self.chance(50) {
                self.const_f(x.dtype, &[], vec![0.5])
            } else {
                String::new()
            };
            inputs.push(c);
            let ax: Vec<i64> = axes.iter().map(|&a| a as i64).collect();
            inputs.push(self.ints(&ax));
        } else {
            inputs.push(self.ints(&pads));
            if mode == "constant" && self.chance(50) {
                inputs.push(self.const_f(x.dtype, &[], vec![-0.75]));
            }
        }
        let a = attrs(vec![("mode", Attribute::String(mode.into()))]);
        let xu = x.uniform.clone();
        let names: Vec<&str> = inputs.iter().map(String::as_str).collect();
        self.emit1(
            "Pad",
            opset,
            &names,
            a,
            x.bound.max(1.0),
            x.exact,
            |s| s.iter().zip(&xu).map(|(&d, &u)| d == 1 || u).collect(),
            x.rtol,
        )
        .map(|_| ())
    }

    fn expand_tile(&mut self) -> Option<()> {
        let x = self.pick(|_| true)?;
        if !self.room(1) {
            return None;
        }
        let r = x.shape.len();
        if self.chance(50) {
            let mut target: Vec<usize> = x
                .shape
                .iter()
                .map(|&d| {
                    if d == 1 && self.chance(60) {
                        self.dim()
                    } else if self.chance(20) {
                        1
                    } else {
                        d
                    }
                })
                .collect();
            if r < 4 && self.chance(40) {
                let d = self.choose(&[1, 2, 3]);
                target.insert(0, d);
            }
            let out = broadcast_shapes(&x.shape, &target)?;
            if numel(&out) > self.max_elems {
                return None;
            }
            let t: Vec<i64> = target.iter().map(|&d| d as i64).collect();
            let c = self.ints(&t);
            let off = out.len() - r;
            let u: Vec<bool> = (0..out.len())
                .map(|i| i < off || x.uniform[i - off] || out[i] == 1)
                .collect();
            return self
                .emit1(
                    "Expand",
                    13,
                    &[&x.name, &c],
                    Attributes::new(),
                    x.bound,
                    x.exact,
                    |_| u,
                    x.rtol,
                )
                .map(|_| ());
        }
        let reps: Vec<i64> = (0..r).map(|_| self.choose(&[1, 1, 2, 3]) as i64).collect();
        if numel(&x.shape) * reps.iter().product::<i64>() as usize > self.max_elems {
            return None;
        }
        let c = self.ints(&reps);
        let u = x.uniform.clone();
        self.emit1(
            "Tile",
            13,
            &[&x.name, &c],
            Attributes::new(),
            x.bound,
            x.exact,
            |_| u,
            x.rtol,
        )
        .map(|_| ())
    }

    fn concat(&mut self) -> Option<()> {
        let x = self.pick(|v| !v.shape.is_empty())?;
        if !self.room(1) {
            return None;
        }
        let r = x.shape.len();
        let axis = self.below(r);
        let mut parts = vec![x.clone()];
        for _ in 0..self.choose(&[1, 1, 2]) {
            let (dtype, shape) = (x.dtype, x.shape.clone());
            let from_pool = self.chance(40);
            let found = if from_pool {
                self.pick(|v| {
                    v.dtype == dtype
                        && v.shape.len() == r
                        && (0..r).all(|d| d == axis || v.shape[d] == shape[d])
                })
            } else {
                None
            };
            let part = match found {
                Some(v) => v,
                None => {
                    let mut s = shape.clone();
                    s[axis] = self.dim();
                    self.leaf(dtype, s, 50)
                }
            };
            parts.push(part);
        }
        if self.chance(50) {
            parts.reverse();
        }
        let total: usize = parts.iter().map(|p| p.shape[axis]).sum();
        if numel(&x.shape) / x.shape[axis] * total > self.max_elems {
            return None;
        }
        let ax = if self.chance(30) {
            axis as i64 - r as i64
        } else {
            axis as i64
        };
        let bound = parts.iter().fold(0.0f64, |m, p| m.max(p.bound));
        let exact = parts.iter().all(|p| p.exact);
        let rtol = parts.iter().fold(0.0f64, |m, p| m.max(p.rtol));
        let u: Vec<bool> = (0..r)
            .map(|a| parts.iter().any(|p| p.shape[a] > 1 && p.uniform[a]))
            .collect();
        let names: Vec<&str> = parts.iter().map(|p| p.name.as_str()).collect();
        self.emit1(
            "Concat",
            13,
            &names,
            attrs(vec![("axis", Attribute::Int(ax))]),
            bound,
            exact,
            |s| s.iter().zip(&u).map(|(&d, &u)| d == 1 || u).collect(),
            rtol,
        )
        .map(|_| ())
    }

    fn split(&mut self) -> Option<()> {
        let x = self.pick(|v| v.shape.iter().any(|&d| d >= 2))?;
        if !self.room(1) {
            return None;
        }
        let r = x.shape.len();
        let candidates: Vec<usize> = (0..r).filter(|&a| x.shape[a] >= 2).collect();
        let axis = self.choose(&candidates);
        let d = x.shape[axis];
        let n = self.choose(&[2, 2, 3]).min(d);
        let mut inputs = vec![x.name.clone()];
        let mut a = attrs(vec![("axis", Attribute::Int(axis as i64))]);
        if self.chance(50) {
            let mut sizes = vec![1i64; n];
            for _ in 0..d - n {
                let i = self.below(n);
                sizes[i] += 1;
            }
            inputs.push(self.ints(&sizes));
        } else {
            a.insert("num_outputs", Attribute::Int(n as i64));
        }
        let names: Vec<&str> = inputs.iter().map(String::as_str).collect();
        let outs = self.emit("Split", 18, &names, a, n)?;
        for (name, dtype, shape) in outs {
            let uniform = shape
                .iter()
                .zip(&x.uniform)
                .map(|(&d, &u)| d == 1 || u)
                .collect();
            self.pool.push(Val {
                name,
                dtype,
                shape,
                bound: x.bound,
                exact: x.exact,
                uniform,
                rtol: x.rtol,
            });
        }
        Some(())
    }

    fn depth_space(&mut self) -> Option<()> {
        let x = self.pick(|v| v.shape.len() == 4)?;
        if !self.room(1) {
            return None;
        }
        let (c, h, w) = (x.shape[1], x.shape[2], x.shape[3]);
        let xv = x.clone();
        let b = self.choose(&[2, 3]);
        let (op, a) = if c % (b * b) == 0 && self.chance(60) {
            let mode = self.choose(&["DCR", "CRD"]);
            (
                "DepthToSpace",
                attrs(vec![
                    ("blocksize", Attribute::Int(b as i64)),
                    ("mode", Attribute::String(mode.into())),
                ]),
            )
        } else if h % b == 0 && w % b == 0 {
            (
                "SpaceToDepth",
                attrs(vec![("blocksize", Attribute::Int(b as i64))]),
            )
        } else {
            return None;
        };
        self.emit1(
            op,
            13,
            &[&x.name],
            a,
            x.bound,
            x.exact,
            |s| mixed_uniform(s, &[&xv]),
            x.rtol,
        )
        .map(|_| ())
    }

    fn trilu(&mut self) -> Option<()> {
        let x = self.pick(|v| v.shape.len() >= 2)?;
        if !self.room(1) {
            return None;
        }
        let mut a = Attributes::new();
        if self.chance(50) {
            a.insert("upper", Attribute::Int(0));
        }
        let mut inputs = vec![x.name.clone()];
        if self.chance(60) {
            let k = self.below(7) as i64 - 3;
            let t = Tensor::new(vec![], vec![k]).expect("a scalar");
            inputs.push(self.const_tensor(t));
        }
        let u = x.uniform.clone();
        let names: Vec<&str> = inputs.iter().map(String::as_str).collect();
        self.emit1("Trilu", 14, &names, a, x.bound, x.exact, |_| u, x.rtol)
            .map(|_| ())
    }
    fn einsum(&mut self) -> Option<()> {
        let x = self.pick(|v| {
            matches!(v.dtype, DType::F32 | DType::F64) && (1..=3).contains(&v.shape.len())
        })?;
        if !self.room(1) {
            return None;
        }
        let s = x.shape.clone();
        let n = self.dim();
        let (eq, other, k): (&str, Option<Vec<usize>>, usize) = match (s.len(), self.below(4)) {
            (1, 0 | 1) => ("i,i->", Some(s.clone()), s[0]),
            (1, _) => ("i,j->ij", Some(vec![n]), 1),
            (2, 0) => ("ij,jk->ik", Some(vec![s[1], n]), s[1]),
            (2, 1) => ("ij,kj->ik", Some(vec![n, s[1]]), s[1]),
            (2, 2) => ("ij,ij->i", Some(s.clone()), s[1]),
            (2, _) => ("ij->ji", None, 1),
            (_, 0 | 1) => ("bij,bjk->bik", Some(vec![s[0], s[2], n]), s[2]),
            (_, 2) => ("bij->bj", None, s[1]),
            (_, _) => ("bij->jbi", None, 1),
        };
        let mut inputs = vec![x.name.clone()];
        let mut bound = x.bound * k as f64;
        if let Some(shape) = other {
            let y = self.leaf(x.dtype, shape, 60);
            bound *= y.bound;
            inputs.push(y.name);
        }
        let exact = eq == "ij->ji" || eq == "bij->jbi";
        let xv = x.clone();
        let names: Vec<&str> = inputs.iter().map(String::as_str).collect();
        self.emit1(
            "Einsum",
            12,
            &names,
            attrs(vec![("equation", Attribute::String(eq.into()))]),
            bound,
            exact && x.exact,
            |s| mixed_uniform(s, &[&xv]),
            x.rtol,
        )
        .map(|_| ())
    }

    fn gather_elements(&mut self) -> Option<()> {
        let x = self.pick(|v| !v.shape.is_empty())?;
        if !self.room(1) {
            return None;
        }
        let r = x.shape.len();
        let axis = self.below(r);
        let shape: Vec<usize> = (0..r)
            .map(|a| {
                if a == axis {
                    self.choose(&[1, 2, 3, 5])
                } else {
                    1 + self.below(x.shape[a])
                }
            })
            .collect();
        let d = x.shape[axis];
        let values: Vec<i64> = (0..numel(&shape))
            .map(|_| self.below(2 * d) as i64 - d as i64)
            .collect();
        let t = Tensor::new(shape.clone(), values).expect("values match the shape");
        let idx = self.const_tensor(t);
        let xv = x.clone();
        self.emit1(
            "GatherElements",
            13,
            &[&x.name, &idx],
            attrs(vec![("axis", Attribute::Int(axis as i64))]),
            x.bound,
            x.exact,
            |s| mixed_uniform(s, &[&xv]),
            x.rtol,
        )
        .map(|_| ())
    }

    fn cumsum(&mut self) -> Option<()> {
        let x = self.pick(|v| {
            !v.shape.is_empty()
                && matches!(v.dtype, DType::F32 | DType::F64 | DType::I32 | DType::I64)
        })?;
        if !self.room(1) {
            return None;
        }
        let r = x.shape.len();
        let axis = self.below(r);
        let bound = x.bound * x.shape[axis] as f64;
        if !fits(x.dtype, bound) {
            return None;
        }
        let t = Tensor::new(
            vec![],
            vec![axis as i64 - if self.chance(30) { r as i64 } else { 0 }],
        )
        .expect("a scalar");
        let c = self.const_tensor(t);
        let mut a = Attributes::new();
        if self.chance(30) {
            a.insert("exclusive", Attribute::Int(1));
        }
        if self.chance(30) {
            a.insert("reverse", Attribute::Int(1));
        }
        let xv = x.clone();
        self.emit1(
            "CumSum",
            14,
            &[&x.name, &c],
            a,
            bound,
            false,
            |s| mixed_uniform(s, &[&xv]),
            x.rtol,
        )
        .map(|_| ())
    }
    /// `x ∘ f(x)`: a closed element-wise region reading `x` twice (as GELU reads a product).
    fn diamond(&mut self) -> Option<()> {
        let x = self.pick(|v| matches!(v.dtype, DType::F32 | DType::F64))?;
        if !self.room(2) {
            return None;
        }
        let f = self.choose(&["Sigmoid", "Tanh", "Erf", "Relu", "Abs", "Neg"]);
        let u = x.uniform.clone();
        let bound = if matches!(f, "Relu" | "Abs" | "Neg") {
            x.bound
        } else {
            1.0
        };
        let y = self.emit1(
            f,
            13,
            &[&x.name],
            Attributes::new(),
            bound,
            false,
            |_| u.clone(),
            x.rtol,
        )?;
        let op = self.choose(&["Mul", "Add", "Sub", "Max"]);
        let (a, b) = if self.chance(50) { (&x, &y) } else { (&y, &x) };
        let bound = if op == "Mul" {
            x.bound * bound
        } else {
            x.bound + bound
        };
        self.emit1(
            op,
            14,
            &[&a.name, &b.name],
            Attributes::new(),
            bound,
            false,
            |_| u,
            x.rtol,
        )
        .map(|_| ())
    }

    /// An axis split in two, a transpose, and the axes merged again (attention's head split,
    /// the Winograd output's interleaving): a chain the epilogue inversion steps through.
    fn shuffle(&mut self) -> Option<()> {
        let x = self.pick(|v| !v.shape.is_empty() && v.shape.len() <= 3)?;
        if !self.room(3) {
            return None;
        }
        let r = x.shape.len();
        let splittable: Vec<usize> = (0..r).filter(|&a| divisors(x.shape[a]).len() > 2).collect();
        if splittable.is_empty() {
            return None;
        }
        let a = self.choose(&splittable);
        let d = x.shape[a];
        let inner: Vec<usize> = divisors(d)
            .into_iter()
            .filter(|&f| f > 1 && f < d)
            .collect();
        let f = self.choose(&inner);
        let mut split = x.shape.clone();
        split[a] = d / f;
        split.insert(a + 1, f);
        let target: Vec<i64> = split.iter().map(|&d| d as i64).collect();
        let c = self.ints(&target);
        let xv = x.clone();
        let y = self.emit1(
            "Reshape",
            14,
            &[&x.name, &c],
            Attributes::new(),
            x.bound,
            x.exact,
            |s| mixed_uniform(s, &[&xv]),
            x.rtol,
        )?;
        let n = split.len();
        let mut perm: Vec<usize> = (0..n).collect();
        for i in (1..n).rev() {
            let j = self.below(i + 1);
            perm.swap(i, j);
        }
        let t = self.emit1(
            "Transpose",
            13,
            &[&y.name],
            attrs(vec![(
                "perm",
                Attribute::Ints(perm.iter().map(|&p| p as i64).collect()),
            )]),
            x.bound,
            x.exact,
            |s| mixed_uniform(s, &[&xv]),
            x.rtol,
        )?;
        let shape: Vec<usize> = perm.iter().map(|&p| split[p]).collect();
        let merged: Vec<i64> = if self.chance(50) {
            let k = self.below(n - 1);
            let mut m: Vec<i64> = shape.iter().map(|&d| d as i64).collect();
            let joined = m[k] * m[k + 1];
            m.splice(k..k + 2, [joined]);
            m
        } else {
            vec![-1]
        };
        let c2 = self.ints(&merged);
        self.emit1(
            "Reshape",
            14,
            &[&t.name, &c2],
            Attributes::new(),
            x.bound,
            x.exact,
            |s| mixed_uniform(s, &[&xv]),
            x.rtol,
        )
        .map(|_| ())
    }
    fn int_unary(&mut self) -> Option<()> {
        let x = self.pick(|v| v.dtype.is_int())?;
        if !self.room(1) {
            return None;
        }
        let signed = x.dtype.is_signed_int();
        let op = if signed {
            self.choose(&["Neg", "Abs", "Sign", "Relu", "BitwiseNot"])
        } else {
            self.choose(&["Abs", "Sign", "BitwiseNot"])
        };
        let bound = match op {
            "Sign" => 1.0,
            "BitwiseNot" if !signed => f64::INFINITY,
            _ => x.bound + 1.0,
        };
        if !fits(x.dtype, bound) {
            return None;
        }
        let u = x.uniform.clone();
        let opset = if op == "BitwiseNot" { 18 } else { 14 };
        self.emit1(
            op,
            opset,
            &[&x.name],
            Attributes::new(),
            bound,
            true,
            |_| u,
            0.0,
        )
        .map(|_| ())
    }

    /// `Reshape(x, Concat(Shape(x)[..k], [-1]))`: a target computed from a shape, as exported
    /// models compute them (folded once the input shapes are known).
    fn shape_reshape(&mut self) -> Option<()> {
        let x = self.pick(|v| v.shape.len() >= 2)?;
        if !self.room(4) {
            return None;
        }
        let r = x.shape.len() as i64;
        let k = 1 + self.below(r as usize - 1) as i64;
        let head = if self.chance(50) {
            let (_, _, _) = self
                .emit(
                    "Shape",
                    15,
                    &[&x.name],
                    attrs(vec![("end", Attribute::Int(k))]),
                    1,
                )?
                .pop()?;
            self.case.nodes.last()?.outputs[0].clone()
        } else {
            let (s, _, _) = self
                .emit("Shape", 13, &[&x.name], Attributes::new(), 1)?
                .pop()?;
            let idx: Vec<i64> = (0..k).collect();
            let t = Tensor::new(vec![k as usize], idx).expect("a vector");
            let i = self.const_tensor(t);
            let (g, _, _) = self
                .emit(
                    "Gather",
                    13,
                    &[&s, &i],
                    attrs(vec![("axis", Attribute::Int(0))]),
                    1,
                )?
                .pop()?;
            g
        };
        let tail = self.ints(&[-1]);
        let (target, _, _) = self
            .emit(
                "Concat",
                13,
                &[&head, &tail],
                attrs(vec![("axis", Attribute::Int(0))]),
                1,
            )?
            .pop()?;
        let xv = x.clone();
        self.emit1(
            "Reshape",
            14,
            &[&x.name, &target],
            Attributes::new(),
            x.bound,
            x.exact,
            |s| mixed_uniform(s, &[&xv]),
            x.rtol,
        )
        .map(|_| ())
    }
}

/// The case of `seed`, and the nodes building refused while generating it.
fn generate(seed: u64) -> (Case, Vec<String>) {
    let mut g = Gen::new(seed);
    g.start();
    let mut attempts = 0;
    while g.counted() < g.max_nodes && attempts < 300 {
        attempts += 1;
        g.step();
    }
    g.finish()
}

/// The kind of a failure: a smaller case reproduces a failure when it fails the same way.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    /// The graph does not build or the reference refuses it: a generator mistake.
    Invalid,
    /// Passes, compilation or the run panicked.
    Panic,
    /// Passes, compilation or the run returned an error.
    Error,
    /// An output differs from the reference.
    Mismatch,
}

#[derive(Debug)]
struct Failure {
    kind: Kind,
    message: String,
}

fn fail(kind: Kind, message: impl Into<String>) -> Failure {
    Failure {
        kind,
        message: message.into(),
    }
}

/// The message and location of the last panic (kept by the hook [`install_panic_hook`]).
static LAST_PANIC: Mutex<Option<String>> = Mutex::new(None);

/// Records each panic's message with its location, then reports it as usual.
fn install_panic_hook() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        let previous = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            if let Ok(mut last) = LAST_PANIC.lock() {
                *last = Some(info.to_string());
            }
            previous(info);
        }));
    });
}

/// What a passing case compiled to.
#[derive(Default)]
struct Outcome {
    kernels: usize,
    host_nodes: usize,
}

type Outputs = Vec<(String, Tensor)>;

/// The inputs of a second run: every float input's elements in reverse order (the same values,
/// so each stays in its operators' domains), other inputs unchanged.
fn reversed_inputs(case: &Case) -> Vec<(String, Tensor)> {
    case.inputs
        .iter()
        .map(|(n, t)| {
            if !t.dtype().is_float() || t.numel() <= 1 {
                return (n.clone(), t.clone());
            }
            let mut v = t.to_f64_vec();
            v.reverse();
            let r = Tensor::new(t.shape().to_vec(), v)
                .expect("same shape")
                .cast(t.dtype());
            (n.clone(), r)
        })
        .collect()
}

/// The reference outputs of `case`, and those of its [`perturbed`] form (empty when the
/// reference refuses the perturbed inputs).
fn references(case: &Case, graph: &Graph) -> Result<(Outputs, Outputs), Failure> {
    let want = run_reference(graph, &case.inputs).map_err(|e| {
        fail(
            Kind::Invalid,
            format!("the reference executor refuses it: {e}"),
        )
    })?;
    let sensitivity = perturbed(case)
        .and_then(|p| run_reference(&p.graph().ok()?, &p.inputs).ok())
        .unwrap_or_default();
    Ok((want, sensitivity))
}

/// The bits of every element, for checking that a tensor was not written.
fn snapshot(t: &Tensor) -> Vec<u64> {
    if t.dtype().is_float() {
        t.to_f64_vec().iter().map(|v| v.to_bits()).collect()
    } else {
        t.to_i64_vec().iter().map(|&v| v as u64).collect()
    }
}

/// `case` optimized, compiled with a kernel cache in `dir` and run twice (on its inputs, then
/// on [`reversed_inputs`]); both runs are compared with the reference executor, and neither
/// run may write the inputs or the tensors the first run returned.
fn check(case: &Case, dir: &Path) -> Result<Outcome, Failure> {
    let graph = case
        .graph()
        .map_err(|e| fail(Kind::Invalid, format!("the graph does not build: {e}")))?;
    let second = Case {
        inputs: reversed_inputs(case),
        ..case.clone()
    };
    let refs = [references(case, &graph)?, references(&second, &graph)?];
    let inputs_before: Vec<Vec<u64>> = case.inputs.iter().map(|(_, t)| snapshot(t)).collect();
    install_panic_hook();
    let result = catch_unwind(AssertUnwindSafe(|| {
        let compiled = compile(case, graph, dir)?;
        let first = compiled
            .run(&case.inputs)
            .map_err(|e| format!("run: {e}"))?;
        let first_bits: Vec<Vec<u64>> = first.iter().map(|(_, t)| snapshot(t)).collect();
        let again = compiled
            .run(&second.inputs)
            .map_err(|e| format!("second run: {e}"))?;
        let report = compiled.report();
        let outcome = Outcome {
            kernels: report.kernels,
            host_nodes: report.host_nodes(),
        };
        Ok::<_, String>((
            [first, again],
            first_bits,
            outcome,
            report.partition.clone(),
        ))
    }));
    let (runs, first_bits, outcome, partition) = match result {
        Ok(Ok(v)) => v,
        Ok(Err(e)) => return Err(fail(Kind::Error, e)),
        Err(_) => {
            let message = LAST_PANIC
                .lock()
                .ok()
                .and_then(|mut l| l.take())
                .unwrap_or_else(|| "a panic".into());
            return Err(fail(Kind::Panic, message));
        }
    };
    let mismatch = |what: String| fail(Kind::Mismatch, format!("{what}\npartition:\n{partition}"));
    for (k, (got, (want, sensitivity))) in runs.iter().zip(&refs).enumerate() {
        for (name, cmp) in &case.outputs {
            let find = |list: &[(String, Tensor)]| {
                list.iter().find(|(n, _)| n == name).map(|(_, t)| t.clone())
            };
            let (Some(g), Some(w)) = (find(got), find(want)) else {
                return Err(mismatch(format!(
                    "run {}: output `{name}` is missing",
                    k + 1
                )));
            };
            compare(&g, &w, find(sensitivity).as_ref(), *cmp)
                .map_err(|e| mismatch(format!("run {}: output `{name}` ({cmp:?}): {e}", k + 1)))?;
        }
    }
    for ((name, t), bits) in runs[0].iter().zip(&first_bits) {
        if snapshot(t) != *bits {
            return Err(mismatch(format!(
                "the second run wrote output `{name}` of the first"
            )));
        }
    }
    for ((name, t), bits) in case.inputs.iter().zip(&inputs_before) {
        if snapshot(t) != *bits {
            return Err(mismatch(format!("a run wrote input `{name}`")));
        }
    }
    Ok(outcome)
}

/// `graph` optimized by the passes for this host and compiled for `case`'s input shapes.
fn compile(case: &Case, graph: Graph, dir: &Path) -> Result<CompiledGraph<CpuBackend>, String> {
    let optimized = run_passes(graph, &passes_for(&pass_options(CpuTarget::host())))
        .map_err(|e| format!("graph passes: {e}"))?;
    let shapes = optimized
        .inputs()
        .iter()
        .map(|id| {
            let name = &optimized.value(*id).name;
            case.inputs
                .iter()
                .find(|(n, _)| n == name)
                .map(|(_, t)| t.shape().to_vec())
                .ok_or_else(|| format!("the optimized graph reads an unknown input `{name}`"))
        })
        .collect::<Result<Vec<_>, String>>()?;
    let opts = CompileOptions {
        threads: Some(case.threads),
        ..CompileOptions::default()
    };
    CompiledGraph::compile(
        &optimized,
        &shapes,
        Arc::new(cpu_backend(dir, case.template)),
        &opts,
    )
    .map_err(|e| format!("compile: {e}"))
}

/// Relative size of the perturbation that measures how sensitive each output is.
const PERTURBATION: f64 = 1e-5;

/// `case` with every float value multiplied elementwise by `1 + PERTURBATION·u`, `u` uniform
/// in `[-1, 1]`: inputs, initializers and constants of more than one element (scalars, such as
/// exponents and clip bounds, stay), and every computed value (through a `Mul` by a constant
/// after its node), so that the outputs move as the roundings of every intermediate can move
/// them. `None` when the reference refuses the case.
fn perturbed(case: &Case) -> Option<Case> {
    let mut rng = Rng::new(0x5eed);
    let mut noise = |shape: &[usize]| -> Vec<f64> {
        (0..numel(shape))
            .map(|_| {
                let u = (rng.next_u64() >> 11) as f64 / (1u64 << 53) as f64 * 2.0 - 1.0;
                1.0 + PERTURBATION * u
            })
            .collect()
    };
    let is_float = |t: &Tensor| matches!(t.dtype(), DType::F32 | DType::F64);
    let mut c = case.clone();
    for (_, t) in c.inputs.iter_mut().chain(c.consts.iter_mut()) {
        if is_float(t) && t.numel() > 1 {
            let v: Vec<f64> = t
                .to_f64_vec()
                .iter()
                .zip(noise(t.shape()))
                .map(|(x, n)| x * n)
                .collect();
            *t = Tensor::new(t.shape().to_vec(), v).ok()?.cast(t.dtype());
        }
    }
    let mut probe = case.clone();
    probe.outputs = case
        .nodes
        .iter()
        .flat_map(|n| n.outputs.iter().filter(|o| !o.is_empty()))
        .map(|o| (o.clone(), Cmp::Exact))
        .collect();
    let values = run_reference(&probe.graph().ok()?, &probe.inputs).ok()?;
    c.nodes.clear();
    for node in &case.nodes {
        let mut n = node.clone();
        let mut scaled = vec![];
        for o in n.outputs.iter_mut().filter(|o| !o.is_empty()) {
            let Some((_, t)) = values.iter().find(|(name, _)| name == o) else {
                continue;
            };
            if !is_float(t) || (node.op_type == "Constant" && t.numel() <= 1) {
                continue;
            }
            let raw = format!("{o}~raw");
            let factor = format!("{o}~noise");
            let f = Tensor::new(t.shape().to_vec(), noise(t.shape()))
                .ok()?
                .cast(t.dtype());
            c.consts.push((factor.clone(), f));
            scaled.push(NodeSpec {
                name: format!("{o}~perturb"),
                domain: String::new(),
                op_type: "Mul".into(),
                opset: 14,
                attrs: Attributes::new(),
                inputs: vec![raw.clone(), factor],
                outputs: vec![o.clone()],
            });
            *o = raw;
        }
        c.nodes.push(n);
        c.nodes.extend(scaled);
    }
    Some(c)
}

/// `got` against `want` under `cmp`; integer and boolean tensors always exactly.
///
/// `Close { rtol, atol }` allows `rtol·|w| + rtol/10·(S + max S/10) + rtol/100·max|w| + atol` at each
/// element, where `S = |w' - w| / PERTURBATION` is the element's sensitivity, `w'` its
/// reference value in the [`perturbed`] case (`perturbed`, when given): the magnitude of the
/// terms it sums and how much cancellation amplifies their rounding. An element whose
/// perturbed value is not finite (an unstable one) is not compared.
fn compare(
    got: &Tensor,
    want: &Tensor,
    perturbed: Option<&Tensor>,
    cmp: Cmp,
) -> Result<(), String> {
    if got.dtype() != want.dtype() || got.shape() != want.shape() {
        return Err(format!(
            "got {}{:?}, want {}{:?}",
            got.dtype(),
            got.shape(),
            want.dtype(),
            want.shape()
        ));
    }
    let bad: Vec<(usize, String)> = if want.dtype().is_float() {
        let (g, w) = (got.to_f64_vec(), want.to_f64_vec());
        let sens: Vec<f64> = match perturbed {
            Some(p) if p.shape() == want.shape() => p
                .to_f64_vec()
                .iter()
                .zip(&w)
                .map(|(p, w)| {
                    if w.is_finite() && !p.is_finite() {
                        f64::INFINITY
                    } else if p == w {
                        0.0
                    } else {
                        (p - w).abs() / PERTURBATION
                    }
                })
                .collect(),
            _ => vec![0.0; w.len()],
        };
        let finite_max = |v: &[f64]| {
            v.iter()
                .filter(|x| x.is_finite())
                .fold(0.0f64, |m, x| m.max(x.abs()))
        };
        let (scale, max_sens) = (finite_max(&w), finite_max(&sens));
        (0..w.len())
            .filter(|&i| {
                let (a, b) = (g[i], w[i]);
                let same = a == b || (a.is_nan() && b.is_nan());
                !same
                    && match cmp {
                        Cmp::Exact => true,
                        Cmp::Close { rtol, atol } => {
                            let tol = rtol * b.abs()
                                + rtol / 10.0 * (sens[i] + max_sens / 10.0)
                                + rtol / 100.0 * scale
                                + atol;
                            let within = (a - b).abs() <= tol;
                            !within
                        }
                    }
            })
            .map(|i| {
                (
                    i,
                    format!("{} vs {} (sensitivity {:.3e})", g[i], w[i], sens[i]),
                )
            })
            .collect()
    } else {
        let (g, w) = (got.to_i64_vec(), want.to_i64_vec());
        (0..w.len())
            .filter(|&i| g[i] != w[i])
            .map(|i| (i, format!("{} vs {}", g[i], w[i])))
            .collect()
    };
    if bad.is_empty() {
        return Ok(());
    }
    let shown: Vec<String> = bad
        .iter()
        .take(4)
        .map(|(i, s)| format!("[{i}] got {s}"))
        .collect();
    Err(format!(
        "{} of {} elements differ (shape {:?}): {}",
        bad.len(),
        want.numel(),
        want.shape(),
        shown.join(", ")
    ))
}

/// A smaller case failing as `kind` does: outputs dropped, nodes cut into inputs or bypassed,
/// while the failure stays.
fn minimize(case: &Case, kind: Kind, dir: &Path) -> Case {
    let fails = |c: &Case| matches!(check(c, dir), Err(f) if f.kind == kind);
    let mut best = case.clone();
    if best.outputs.len() > 1 {
        for k in 0..best.outputs.len() {
            let mut c = best.clone();
            c.outputs = vec![best.outputs[k].clone()];
            let c = c.pruned();
            if fails(&c) {
                best = c;
                break;
            }
        }
    }
    'shrink: loop {
        for i in (0..best.nodes.len()).rev() {
            if let Some(c) = best.cut(i) {
                if fails(&c) {
                    best = c;
                    continue 'shrink;
                }
            }
        }
        for i in (0..best.nodes.len()).rev() {
            if let Some(c) = best.bypass(i) {
                if fails(&c) {
                    best = c;
                    continue 'shrink;
                }
            }
        }
        return best;
    }
}

/// The tally of a fuzz run.
#[derive(Default)]
struct Run {
    cases: usize,
    symbolic: usize,
    nodes: usize,
    kernels: usize,
    host_nodes: usize,
    ops: BTreeMap<String, usize>,
    failures: Vec<String>,
}

impl Run {
    /// Generates, checks and (on failure) minimizes the case of `seed`.
    fn case(&mut self, seed: u64, dir: &Path, verbose: bool) {
        let (case, rejected) = generate(seed);
        self.cases += 1;
        self.symbolic += usize::from(case.symbolic);
        self.nodes += case.nodes.len();
        for n in &case.nodes {
            *self.ops.entry(n.op_type.clone()).or_default() += 1;
        }
        if verbose {
            println!("seed {seed}:\n{case}");
        }
        let replay = format!(
            "replay: HIDET_FUZZ_SEED={seed} cargo test --release -p hidet-cpu --test fuzz_compile -- fuzz_random_graphs --nocapture"
        );
        if !rejected.is_empty() {
            let report = format!(
                "seed {seed}: building the graph refused generated nodes: {}\n{replay}\n{case}",
                rejected.join("; ")
            );
            println!("FAILURE {report}");
            self.failures.push(report);
        }
        let started = Instant::now();
        match check(&case, dir) {
            Ok(o) => {
                self.kernels += o.kernels;
                self.host_nodes += o.host_nodes;
                if verbose {
                    println!(
                        "seed {seed}: ok, {} kernels, {} host nodes, {:.1?}",
                        o.kernels,
                        o.host_nodes,
                        started.elapsed()
                    );
                }
            }
            Err(f) => {
                let small = if f.kind == Kind::Invalid {
                    case.clone()
                } else {
                    minimize(&case, f.kind, dir)
                };
                let detail = check(&small, dir)
                    .err()
                    .map(|f| f.message)
                    .unwrap_or_default();
                let report = format!(
                    "seed {seed}: {:?}: {}\n{replay}\nminimized ({} of {} nodes):\n{small}{detail}",
                    f.kind,
                    f.message,
                    small.nodes.len(),
                    case.nodes.len()
                );
                println!("FAILURE {report}");
                self.failures.push(report);
            }
        }
    }

    fn summary(&self, elapsed: Duration) -> String {
        format!(
            "{} cases ({} symbolic; {} nodes, {} kernels, {} host nodes) in {:.1?}, {} failures",
            self.cases,
            self.symbolic,
            self.nodes,
            self.kernels,
            self.host_nodes,
            elapsed,
            self.failures.len(),
        )
    }

    fn op_counts(&self) -> String {
        let ops: Vec<String> = self.ops.iter().map(|(k, v)| format!("{k} {v}")).collect();
        format!("operators drawn: {}", ops.join(", "))
    }
}

fn env_u64(name: &str) -> Option<u64> {
    let v = std::env::var(name).ok()?;
    Some(
        v.trim()
            .parse()
            .unwrap_or_else(|_| panic!("{name} must be a non-negative integer, got `{v}`")),
    )
}

/// Cases per child process of the timed mode. A process never unloads a kernel library (the
/// CPU backend opens them `RTLD_NODELETE`), so one running many thousands of distinct kernels
/// exhausts the kernel's limit on memory maps; a child also confines a crash (a kernel that
/// faults) to its own cases.
const CASES_PER_CHILD: u64 = 500;

/// The fuzz run: the quick CI mode, the timed mode, or a replay (see the module doc).
#[test]
fn fuzz_random_graphs() {
    let seconds = env_u64("HIDET_FUZZ_SECONDS");
    let seed = env_u64("HIDET_FUZZ_SEED");
    match (seconds, seed) {
        (None, None) => run_seeds(1..QUICK_SEEDS + 1, None, false),
        (None, Some(s)) => run_seeds(s..s + 1, None, true),
        (Some(t), start) => {
            let start = start.unwrap_or_else(|| {
                std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .map_or(1, |d| d.as_secs())
            });
            let deadline = Instant::now() + Duration::from_secs(t);
            match std::env::var_os("HIDET_FUZZ_PROGRESS") {
                Some(progress) => {
                    let cases = env_u64("HIDET_FUZZ_CASES").unwrap_or(u64::MAX);
                    let seeds = start..start.saturating_add(cases);
                    run_seeds(seeds, Some((deadline, progress.into())), false);
                }
                None => supervise(start, deadline),
            }
        }
    }
}

/// Runs the cases of `seeds` in this process (until `until`'s deadline, writing each seed to
/// its progress file before running it, when given) and fails if any case failed.
fn run_seeds(
    seeds: std::ops::Range<u64>,
    until: Option<(Instant, std::path::PathBuf)>,
    verbose: bool,
) {
    let dir = tempfile::tempdir().unwrap();
    let started = Instant::now();
    let mut run = Run::default();
    for s in seeds {
        if let Some((deadline, progress)) = &until {
            if Instant::now() >= *deadline {
                break;
            }
            std::fs::write(progress, format!("seed {s}\n")).unwrap();
        }
        run.case(s, dir.path(), verbose);
        if run.cases % 50 == 0 {
            println!("{}", run.summary(started.elapsed()));
        }
    }
    let summary = run.summary(started.elapsed());
    if let Some((_, progress)) = &until {
        let done = format!("done {} {}\n", run.cases, run.failures.len());
        std::fs::write(progress, done).unwrap();
    }
    println!("{summary}\n{}", run.op_counts());
    assert!(
        run.failures.is_empty(),
        "{summary}\n\n{}",
        run.failures.join("\n\n")
    );
    assert!(
        run.cases == 0 || run.kernels > 0,
        "no case compiled a kernel: {summary}"
    );
}

/// The timed mode's parent: runs [`CASES_PER_CHILD`] seeds at a time in a child process (this
/// test binary, `HIDET_FUZZ_PROGRESS` naming the file where it reports its progress) until
/// `deadline`; a child that dies, or makes no progress for 15 minutes, is reported with the
/// seed it was running.
fn supervise(start: u64, deadline: Instant) {
    let dir = tempfile::tempdir().unwrap();
    let progress = dir.path().join("progress");
    let exe = std::env::current_exe().unwrap();
    println!(
        "fuzzing until {:.0?} from now from seed {start}, {CASES_PER_CHILD} cases per process",
        deadline - Instant::now()
    );
    let (mut cases, mut failures, mut crashes) = (0u64, 0u64, vec![]);
    let mut next = start;
    while deadline.saturating_duration_since(Instant::now()) >= Duration::from_secs(1) {
        let left = deadline - Instant::now();
        let _ = std::fs::remove_file(&progress);
        let mut child = std::process::Command::new(&exe)
            .args(["fuzz_random_graphs", "--exact", "--nocapture"])
            .env("HIDET_FUZZ_SEED", next.to_string())
            .env("HIDET_FUZZ_SECONDS", left.as_secs().max(1).to_string())
            .env("HIDET_FUZZ_CASES", CASES_PER_CHILD.to_string())
            .env("HIDET_FUZZ_PROGRESS", &progress)
            .spawn()
            .unwrap();
        // A child whose progress stands still for `HUNG` is stopped: its threads' stacks are
        // printed (where gdb is at hand) and its current seed reported.
        const HUNG: Duration = Duration::from_secs(900);
        let (mut last, mut since) = (String::new(), Instant::now());
        let status = loop {
            if let Some(status) = child.try_wait().unwrap() {
                break status.to_string();
            }
            let now = std::fs::read_to_string(&progress).unwrap_or_default();
            if now != last {
                (last, since) = (now, Instant::now());
            } else if since.elapsed() > HUNG {
                let _ = std::process::Command::new("gdb")
                    .args(["-p", &child.id().to_string(), "-batch"])
                    .args(["-ex", "thread apply all bt"])
                    .status();
                let _ = child.kill();
                let _ = child.wait();
                break format!("no progress for {HUNG:?}, stopped");
            }
            std::thread::sleep(Duration::from_millis(500));
        };
        let report = std::fs::read_to_string(&progress).unwrap_or_default();
        let words: Vec<&str> = report.split_whitespace().collect();
        match words.as_slice() {
            ["done", n, f] => {
                cases += n.parse::<u64>().unwrap_or(0);
                failures += f.parse::<u64>().unwrap_or(0);
            }
            ["seed", s] => {
                let s: u64 = s.parse().unwrap_or(next);
                cases += s - next + 1;
                let crash = format!("seed {s}: the process died ({status})");
                println!("FAILURE {crash}");
                crashes.push(crash);
                next = s + 1;
                continue;
            }
            _ => panic!("the child process reported nothing ({status})"),
        }
        next += CASES_PER_CHILD;
    }
    println!(
        "{cases} cases in all from seed {start}, {failures} failures, {} crashes",
        crashes.len()
    );
    assert!(
        failures == 0 && crashes.is_empty(),
        "{failures} failing cases (printed above as FAILURE), crashes: {crashes:?}"
    );
}

/// A fixed case for a regression test: inputs of given values and nodes added through the
/// generator's [`Gen::emit`], compiled with the matmul template on two threads.
struct Fixed(Gen);

impl Fixed {
    fn new() -> Fixed {
        let mut g = Gen::new(1);
        g.case.template = true;
        g.case.threads = 2;
        g.max_nodes = usize::MAX;
        Fixed(g)
    }

    /// Declares the inputs' first axes symbolic ([`Case::symbolic`]).
    fn symbolic(mut self) -> Fixed {
        self.0.case.symbolic = true;
        self
    }

    fn input(&mut self, shape: &[usize], values: Vec<f32>) -> String {
        let name = self.0.fresh("x");
        let t = Tensor::new(shape.to_vec(), values).expect("values match the shape");
        self.0.case.inputs.push((name.clone(), t));
        name
    }

    fn typed_input(&mut self, t: Tensor) -> String {
        let name = self.0.fresh("x");
        self.0.case.inputs.push((name.clone(), t));
        name
    }

    fn node(&mut self, op: &str, opset: i64, inputs: &[&str], attrs: Attributes) -> String {
        match self.0.emit(op, opset, inputs, attrs, 1) {
            Some(mut outs) => outs.remove(0).0,
            None => panic!("{op} does not build: {:?}", self.0.rejected),
        }
    }

    /// Compiles and runs the case with `outputs` as its f32 outputs ([`check`]); panics with
    /// the failure and the case.
    fn check(mut self, outputs: &[&str]) {
        self.0.case.outputs = outputs
            .iter()
            .map(|o| {
                let cmp = Cmp::Close {
                    rtol: rtol_of(DType::F32),
                    atol: 0.0,
                };
                (o.to_string(), cmp)
            })
            .collect();
        let dir = tempfile::tempdir().unwrap();
        if let Err(f) = check(&self.0.case, dir.path()) {
            panic!("{:?}: {}\n{}", f.kind, f.message, self.0.case);
        }
    }
}

/// Elu, Selu and Celu near 0, where `exp(x) - 1` in f32 cancelled every digit: Selu of
/// -1.35e-15 was 0 where the reference gives -2.38e-15 (seed 122531, minimized to one Selu of
/// a ReduceProd's tiny products). Values well away from 0 keep their accuracy.
#[test]
fn regression_expm1_near_zero() {
    let mut c = Fixed::new();
    let tiny = c.input(
        &[8],
        vec![
            -1.354e-15, -6.3e-18, -3.8e-14, -1e-9, -2.5e-7, -1e-6, -3e-8, -1e-30,
        ],
    );
    let wide = c.input(&[8], vec![-1e-4, -0.3, -0.49, -0.51, -2.0, -20.0, 0.0, 0.7]);
    let mut outputs = vec![];
    for x in [&tiny, &wide] {
        outputs.push(c.node(
            "Elu",
            6,
            &[x],
            attrs(vec![("alpha", Attribute::Float(0.5))]),
        ));
        outputs.push(c.node("Selu", 6, &[x], Attributes::new()));
        outputs.push(c.node(
            "Celu",
            12,
            &[x],
            attrs(vec![("alpha", Attribute::Float(2.0))]),
        ));
    }
    let names: Vec<&str> = outputs.iter().map(String::as_str).collect();
    c.check(&names);
}

/// Softplus and Mish far below 0, where `log(1 + exp(x))` in f32 rounded `1 + exp(x)` to 1
/// and gave 0 instead of about `exp(x)` (the same cancellation as
/// [`regression_expm1_near_zero`], found by reviewing the other element functions).
#[test]
fn regression_softplus_far_below_zero() {
    let mut c = Fixed::new();
    let x = c.input(&[6], vec![-17.0, -20.0, -30.0, -45.0, -60.0, -80.0]);
    let softplus = c.node("Softplus", 1, &[&x], Attributes::new());
    let mish = c.node("Mish", 18, &[&x], Attributes::new());
    c.check(&[&softplus, &mish]);
}

/// A Gemm without C whose `alpha` is not 1 and that the graph passes leave as a Gemm (here its
/// left operand's rank is unknown statically: an Einsum of inputs with symbolic axes): its
/// compute definition read the placeholder of the absent C and panicked (index out of
/// bounds; seed 143543).
#[test]
fn regression_gemm_without_c_scaled() {
    let mut c = Fixed::new().symbolic();
    let values: Vec<f32> = (0..8).map(|i| 0.1 * i as f32 - 0.35).collect();
    let x = c.input(&[8], values.clone());
    let y = c.input(&[8], values.iter().rev().copied().collect());
    let outer = c.node(
        "Einsum",
        12,
        &[&x, &y],
        attrs(vec![("equation", Attribute::String("i,j->ij".into()))]),
    );
    let w = c.input(&[1, 8], values);
    let gemm = c.node(
        "Gemm",
        13,
        &[&outer, &w],
        attrs(vec![
            ("alpha", Attribute::Float(0.5)),
            ("transB", Attribute::Int(1)),
        ]),
    );
    c.check(&[&gemm]);
}

/// Integer operations on types narrower than 32 bits in one kernel with a comparison: C
/// evaluates `~x`, `x + y`, `-x`, `x * y`, `x << y` (and the floor-division helper of `i8`
/// and `i16` works in `int32_t`: -128 / -1) of such types in `int`, so a kernel
/// compared `~5` as -6 where the IR and the reference have the `uint16_t` 65530 (seed 213290:
/// BitwiseNot then LessOrEqual on u16).
#[test]
fn regression_narrow_integers_wrap_before_a_comparison() {
    let mut c = Fixed::new();
    let a = c.typed_input(Tensor::new(vec![6], vec![5u16, 0, 65535, 300, 7, 40000]).unwrap());
    let b = c.typed_input(Tensor::new(vec![6], vec![65530u16, 1, 0, 65000, 9, 30000]).unwrap());
    let p = c.typed_input(Tensor::new(vec![6], vec![-128i8, 100, 127, 1, 64, 3]).unwrap());
    let q = c.typed_input(Tensor::new(vec![6], vec![-1i8, 100, 1, -128, 2, 50]).unwrap());
    let shift = c.typed_input(Tensor::new(vec![6], vec![200u8, 1, 255, 16, 129, 3]).unwrap());
    let by = c.typed_input(Tensor::new(vec![6], vec![1u8, 7, 4, 4, 1, 6]).unwrap());
    let none = Attributes::new;
    let not = c.node("BitwiseNot", 18, &[&a], none());
    let sum = c.node("Add", 14, &[&a, &b], none());
    let neg = c.node("Neg", 13, &[&p], none());
    let product = c.node("Mul", 14, &[&p, &q], none());
    let difference = c.node("Sub", 14, &[&q, &p], none());
    let quotient = c.node("Div", 14, &[&p, &q], none());
    let left = c.node(
        "BitShift",
        11,
        &[&shift, &by],
        attrs(vec![("direction", Attribute::String("LEFT".into()))]),
    );
    let mut outputs = vec![];
    for (x, y) in [
        (&not, &b),
        (&sum, &b),
        (&neg, &q),
        (&product, &q),
        (&difference, &p),
        (&quotient, &q),
        (&left, &shift),
    ] {
        outputs.push(c.node("LessOrEqual", 16, &[x, y], none()));
    }
    let names: Vec<&str> = outputs.iter().map(String::as_str).collect();
    c.check(&names);
}
