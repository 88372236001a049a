//! The default GPU schedule for any compute definition: one output element per thread over a
//! 1-D grid. Injective tasks are exactly this; a task with reductions gets serial reduction
//! loops in each thread (correct for any definition, fast only when reductions are short).
//!
//! Grids are inlined into their readers; a read of a reduce node becomes an accumulator loop
//! right before the element that needs it, so no intermediate buffer exists. A reduce node
//! read at several indices per element is recomputed for each read.
//!
//! Thread `t` of the grid (`blockIdx.x · THREADS + threadIdx.x`) computes element `t` (in
//! row-major order) of every output that has more than `t` elements.
//!
//! Vectorized where the layout allows: when every output's last dimension is a multiple of
//! `V` (16 bytes of the narrowest output element that has a CUDA vector type: 4 `f32`, 2
//! `f16`) and the outputs are large enough to keep every SM busy with `V` elements per
//! thread ([`GpuTarget::min_vector_threads`]), thread `t` computes elements `V·t … V·t + V − 1` of every
//! output, which share their leading indices, and writes them with one vector store. A read
//! of an input that is contiguous across those `V` elements (its element offset grows by one
//! per element: the layout's last stride is 1 and the index moves with the output's last
//! axis) and is not under a condition (a `select` branch, the right side of `&&`/`||`) is
//! one vector load. Every other read stays a scalar load per element, as in the scalar
//! schedule, so each element reads exactly what the scalar schedule would.

use std::collections::HashMap;

use hidet_ir::inline::element;

use hidet_ir::builder::FunctionBuilder;
use hidet_ir::compute::{ComputeDef, ComputeNode};
use hidet_ir::dtype::{DataType, ScalarType};
use hidet_ir::expr::{BinaryOp, Dim, Expr, ExprKind, Var};
use hidet_ir::function::Function;
use hidet_ir::inline::expand;
use hidet_ir::intrinsic::Intrinsic;
use hidet_ir::passes::{simplify_expr, VarRanges};

use super::{const_shape, output_params, GpuTarget, ScheduleError};

/// Threads per block of the elementwise schedule.
pub const THREADS: i64 = 256;

/// The kernel `name(inputs…, outputs…)` computing `def` on `target` (see the module docs).
pub fn schedule_elementwise(
    def: &ComputeDef,
    name: &str,
    target: &GpuTarget,
) -> Result<Function, ScheduleError> {
    let def = def.inline_grids();
    let out_params = output_params(&def);
    let nodes: HashMap<Var, ComputeNode> = def.nodes.iter().cloned().collect();
    let mut sizes = Vec::with_capacity(out_params.len());
    for p in &out_params {
        let shape = const_shape(p)?;
        sizes.push((shape.iter().product::<i64>(), shape));
    }
    let total = sizes.iter().map(|(n, _)| *n).max().unwrap_or(0);
    if total > i64::from(i32::MAX) - THREADS {
        return Err(ScheduleError::TooLarge { elements: total });
    }
    let lanes = vector_width(&out_params, &sizes, target.min_vector_threads);
    let work = total / i64::from(lanes);
    let threads = if work < THREADS {
        (work.max(1) + 31) / 32 * 32
    } else {
        THREADS
    };
    let blocks = ((work + threads - 1) / threads).max(1);
    let mut fb = FunctionBuilder::cuda_kernel(name, [blocks, 1, 1].map(Expr::int), [threads, 1, 1]);
    let t = fb.var(
        "t",
        Expr::block_idx(Dim::X) * threads + Expr::thread_idx(Dim::X),
    );
    for ((o, p), (n, shape)) in def.outputs.iter().zip(&out_params).zip(&sizes) {
        if lanes > 1 {
            let v = i64::from(lanes);
            fb.if_then(t.expr().lt(*n / v), |fb| {
                let base = unravel(&(t.expr() * v), shape);
                store_vector(fb, &def, o, p, &base, lanes, &nodes);
            });
            continue;
        }
        fb.if_then(t.expr().lt(*n), |fb| {
            let index = unravel(&t.expr(), shape);
            let value = match nodes.get(o) {
                None => o.at(index.clone()),
                Some(node) => element(fb, node, &index, &nodes),
            };
            fb.store(p, index, value);
        });
    }
    let mut f = fb.finish();
    f.params = def.inputs.iter().cloned().chain(out_params).collect();
    Ok(f)
}

/// The row-major multi-index of flat index `flat` in `shape`.
pub fn unravel(flat: &Expr, shape: &[i64]) -> Vec<Expr> {
    let mut stride: i64 = shape.iter().product();
    let mut index = Vec::with_capacity(shape.len());
    for (d, &extent) in shape.iter().enumerate() {
        stride /= extent.max(1);
        let q = if stride == 1 {
            flat.clone()
        } else {
            flat / Expr::int(stride)
        };
        index.push(if d == 0 { q } else { q % Expr::int(extent) });
    }
    index
}

/// Lanes of the vector a thread of the vectorized schedule computes per output, or 1 when
/// the schedule stays scalar (see the module docs).
fn vector_width(outputs: &[Var], sizes: &[(i64, Vec<i64>)], min_threads: i64) -> u16 {
    let mut lanes = 4u16;
    for (o, (_, shape)) in outputs.iter().zip(sizes) {
        let width = o.ty().as_tensor().map_or(1, |t| vector_lanes_of(t.dtype));
        lanes = lanes.min(width);
        if shape
            .last()
            .is_none_or(|&last| last % i64::from(lanes) != 0)
        {
            return 1;
        }
    }
    let total = sizes.iter().map(|(n, _)| *n).max().unwrap_or(0);
    if lanes < 2 || total / i64::from(lanes) < min_threads {
        return 1;
    }
    lanes
}

/// The lanes of the widest CUDA vector type (at most 16 bytes) of scalar type `d`, 1 where
/// the dialect has none.
fn vector_lanes_of(d: DataType) -> u16 {
    if d.is_vector() {
        return 1;
    }
    match d.scalar {
        ScalarType::F32 | ScalarType::I32 | ScalarType::U32 => 4,
        ScalarType::F64 | ScalarType::F16 | ScalarType::BF16 => 2,
        _ => 1,
    }
}

/// Stores elements `base … base + lanes − 1` (along the last axis) of output `o` into `p`
/// with one vector store, the contiguous unconditional input reads as vector loads.
fn store_vector(
    fb: &mut FunctionBuilder,
    def: &ComputeDef,
    o: &Var,
    p: &Var,
    base: &[Expr],
    lanes: u16,
    nodes: &HashMap<Var, ComputeNode>,
) {
    let at_lane = |l: u16| -> Vec<Expr> {
        let mut index = base.to_vec();
        if let Some(last) = index.last_mut() {
            *last = last.clone() + i64::from(l);
        }
        index
    };
    let values: Vec<Expr> = match nodes.get(o) {
        Some(node @ ComputeNode::Reduce { .. }) => (0..lanes)
            .map(|l| element(fb, node, &at_lane(l), nodes))
            .collect(),
        grid => {
            let (axes, value) = match grid {
                Some(ComputeNode::Grid { axes, value }) => (axes.clone(), value.clone()),
                _ => {
                    let axes: Vec<Var> = (0..base.len())
                        .map(|d| Var::new(format!("i{d}"), DataType::I32))
                        .collect();
                    let value = o.at(axes.iter().map(Var::expr));
                    (axes, value)
                }
            };
            let last_axis = axes.last().cloned();
            let mut reads = VectorReads {
                inputs: &def.inputs,
                last_axis: last_axis.as_ref(),
                lanes,
                found: Vec::new(),
            };
            let value = reads.hoist(&value, false);
            let env0: HashMap<Var, Expr> = axes.iter().cloned().zip(base.iter().cloned()).collect();
            let loaded: Vec<(Var, Var)> = reads
                .found
                .iter()
                .map(|(read, placeholder)| {
                    let dtype = read.dtype().map_or(DataType::F32, |d| d.with_lanes(lanes));
                    let address = read.substitute(&env0).address();
                    let vector = fb.var(
                        "xv",
                        Expr::call(Intrinsic::VectorLoad { dtype }, vec![address]),
                    );
                    (placeholder.clone(), vector)
                })
                .collect();
            (0..lanes)
                .map(|l| {
                    let mut env: HashMap<Var, Expr> =
                        axes.iter().cloned().zip(at_lane(l)).collect();
                    for (placeholder, vector) in &loaded {
                        let lane =
                            Expr::call(Intrinsic::ExtractLane { lane: l }, vec![vector.expr()]);
                        env.insert(placeholder.clone(), lane);
                    }
                    expand(fb, &value.substitute(&env), nodes)
                })
                .collect()
        }
    };
    let dtype = p
        .ty()
        .as_tensor()
        .map_or(DataType::F32, |t| t.dtype.with_lanes(lanes));
    let packed = Expr::call(Intrinsic::PackLanes { dtype }, values);
    fb.call(
        Intrinsic::VectorStore,
        vec![p.at(base.to_vec()).address(), packed],
    );
}

/// The reads of an element expression that become vector loads: of a kernel input, not
/// under a condition, contiguous across the lanes.
struct VectorReads<'a> {
    inputs: &'a [Var],
    /// The output's last axis, along which the lanes lie (`None` for a rank-0 output).
    last_axis: Option<&'a Var>,
    lanes: u16,
    /// Each read found (at the output's axes) and the variable standing for its value.
    found: Vec<(Expr, Var)>,
}

impl VectorReads<'_> {
    /// `e` with every read that becomes a vector load replaced by its placeholder variable;
    /// `conditional` when `e` is evaluated only under a condition.
    fn hoist(&mut self, e: &Expr, conditional: bool) -> Expr {
        match e.kind() {
            ExprKind::TensorElement { tensor, indices } => {
                if !conditional && self.contiguous(tensor, indices) {
                    if let Some((_, v)) = self.found.iter().find(|(r, _)| r == e) {
                        return v.expr();
                    }
                    let v = Var::new("x_lane", e.ty());
                    self.found.push((e.clone(), v.clone()));
                    return v.expr();
                }
                e.clone()
            }
            ExprKind::Select(c, a, b) => Expr::select(
                self.hoist(c, conditional),
                self.hoist(a, true),
                self.hoist(b, true),
            ),
            ExprKind::Binary(op @ (BinaryOp::And | BinaryOp::Or), a, b) => {
                Expr::binary(*op, self.hoist(a, conditional), self.hoist(b, true))
            }
            _ => {
                let children = e
                    .children()
                    .into_iter()
                    .map(|c| self.hoist(c, conditional))
                    .collect();
                e.with_children(children)
            }
        }
    }

    /// Whether `tensor[indices]` is a kernel input read whose element offset grows by one
    /// with each step of the output's last axis, of an element type with a vector type of
    /// `lanes` lanes.
    fn contiguous(&self, tensor: &Var, indices: &[Expr]) -> bool {
        let (Some(axis), Some(t)) = (self.last_axis, tensor.ty().as_tensor()) else {
            return false;
        };
        if !self.inputs.contains(tensor) || vector_lanes_of(t.dtype) < self.lanes {
            return false;
        }
        if !indices.iter().any(|i| i.mentions(axis)) {
            return false;
        }
        let ranges = VarRanges::new();
        let offset = t.layout.offset(indices);
        (1..self.lanes).all(|l| {
            let env: HashMap<Var, Expr> = [(axis.clone(), axis.expr() + i64::from(l))].into();
            let shifted: Vec<Expr> = indices.iter().map(|i| i.substitute(&env)).collect();
            simplify_expr(&t.layout.offset(&shifted), &ranges)
                == simplify_expr(&(offset.clone() + i64::from(l)), &ranges)
        })
    }
}
