//! A graph compiled for concrete input shapes: one module of fused kernels, a static memory
//! plan and a flat launch list.
//!
//! # Running, and why it is `Send + Sync`
//! Weights and folded constants live in one read-only arena shared by every run. Everything a
//! run writes (inputs, intermediates, outputs) lives in a *run state*: an arena laid out by
//! the memory plan, with the address of every kernel argument computed once when the state is
//! created. Run states come from a pool: a run takes one (creating it only when every state is
//! in use by another thread), runs the launch list, and puts it back. So concurrent runs never
//! share writable memory and get identical results, and after the first run on a thread no
//! run allocates anything on the compiled path. What a run does allocate: the returned output
//! tensors, and the tensors of host (reference `eval`) nodes, if the graph has any.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use super::backend::{
    ArgAddress, Backend, BackendError, CompileOptions, CompileProgress, ModuleReport, OutputSlot,
};
use super::constant_pool::{place_constants, ConstantPool, Placement, SharedConstants};
use super::plan::{plan_memory, BufferRequest, ALIGN};
use super::{concat_in_place, slice_in_place};
use crate::dtype::DType;
use crate::executor::{match_inputs, DeclaredShape, ExecError, InputDecl};
use crate::fusion::{
    partition_with, FusedTask, Group, GroupKind, HostReason, Partition, Specialization,
    SpecializeError, TaskError,
};
use crate::graph::{Graph, ValueId};
use crate::operator::{OpError, Operator};
use crate::tensor::{checked_numel, Tensor};
use crate::value::{Datum, ValueKind};

/// Errors of compiling or running a compiled graph.
#[derive(Debug, thiserror::Error)]
pub enum CompiledError {
    #[error(transparent)]
    Specialize(#[from] SpecializeError),
    #[error(transparent)]
    Task(#[from] TaskError),
    #[error(transparent)]
    Backend(#[from] BackendError),
    /// Bad inputs, or a host node failed.
    #[error(transparent)]
    Exec(#[from] ExecError),
    /// Input shapes that contradict the graph, or graph passes that failed on the graph
    /// bound to them.
    #[error(transparent)]
    Bind(#[from] crate::bind::BindError),
    /// A saved compiled model could not be written or read.
    #[error(transparent)]
    Artifact(#[from] super::artifact::ArtifactError),
    /// A compiled model that cannot be saved, or a saved one that cannot run here.
    #[error("{0}")]
    Saved(String),
}

/// Where a value lives while a compiled graph runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
pub(super) enum Loc {
    /// In the constant arena at this offset.
    Const(usize),
    /// In the model's shared constant arena at this offset ([`ConstantPool`]). Never saved:
    /// saving moves such constants into the saved graph's own arena.
    Shared(usize),
    /// Read where the constant tensor of this root value (in `const_tensors`) lies, at the
    /// backend's [`Backend::host_address`] of it: no copy. Never saved, like `Shared`.
    Held(usize),
    /// In the run arena at this offset.
    Run(usize),
    /// In a host slot of the run state (data-dependent shape).
    Host(usize),
    /// Not needed by anything.
    Unused,
}

#[derive(Debug, Clone)]
pub(super) struct ValueSlot {
    pub(super) name: String,
    pub(super) dtype: DType,
    pub(super) kind: ValueKind,
    pub(super) shape: Option<Vec<usize>>,
    pub(super) loc: Loc,
}

#[derive(Debug)]
pub(super) enum Step {
    Kernel {
        kernel: usize,
        /// `(value, written)` per kernel argument.
        args: Vec<(ValueId, bool)>,
        info: StepInfo,
    },
    Host {
        node: String,
        op_type: String,
        /// The node's domain, opset and attributes: what rebuilds `op` from the registry
        /// when a saved model is loaded.
        domain: String,
        opset: i64,
        attrs: crate::attribute::Attributes,
        op: Arc<dyn Operator>,
        inputs: Vec<Option<ValueId>>,
        outputs: Vec<Option<ValueId>>,
    },
}

/// A graph input or output that kernels use where the caller has it instead of in the run
/// arena: every kernel argument inside its buffer, as (step, argument, byte offset in the
/// value).
///
/// An input is read where the caller keeps it (when the backend can, see
/// [`Backend::host_address`]) instead of from a copy in the arena. Only inputs that no host
/// step reads and that no graph output aliases are bound, since those read the arena copy
/// (and none that a kernel writes).
///
/// An output is written straight into the tensor returned to the caller (when the backend
/// can, see [`Backend::output_in_place`]) instead of into the arena, from which it would be
/// copied. Only outputs that span their whole buffer, that no host step reads or writes,
/// that are not graph inputs and that share their buffer with no other output are bound.
pub(super) struct Bound {
    pub(super) value: ValueId,
    pub(super) uses: Vec<(usize, usize, u64)>,
}

/// What [`CompiledGraph::run_profiled`] returns: the named outputs and each step's time.
pub type ProfiledRun = (Vec<(String, Tensor)>, Vec<Duration>);

/// One entry of the launch list, as a profile names it.
#[derive(Debug, Clone, PartialEq)]
pub struct StepInfo {
    /// The kernel's task name and the graph node it is anchored at (or its first node); for
    /// a host step, `host` with the operator type and node name.
    pub label: String,
    /// Floating-point operations of the step's reductions (see
    /// [`ComputeDef::reduction_flops`](hidet_ir::compute::ComputeDef::reduction_flops)).
    pub flops: Option<f64>,
}

/// A node that a compiled graph runs with its reference `eval` on the host.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct HostStep {
    pub node: String,
    pub op_type: String,
    pub reason: HostReason,
}

/// What a compilation produced.
#[derive(Debug, Clone, Default)]
pub struct CompileReport {
    /// Compiled kernels (one per fused task).
    pub kernels: usize,
    /// Every node run on the host, in launch order, with why it has no kernel.
    pub host_steps: Vec<HostStep>,
    /// Groups that became buffer aliases (no kernel).
    pub aliases: usize,
    /// Nodes evaluated at compile time.
    pub folded: usize,
    /// Graph inputs that kernels read where the caller keeps them, without a copy into the
    /// run arena, when the backend allows it (see [`Backend::host_address`]).
    pub inputs_in_place: usize,
    /// Graph outputs that kernels write into the returned tensor, without a copy out of
    /// the run arena, when the backend allows it (see [`Backend::output_in_place`]).
    pub outputs_in_place: usize,
    /// Every fused task a backend refused, with its reason (each was split and retried).
    pub refusals: Vec<String>,
    /// Peak bytes of the run arena (inputs, intermediates, outputs) after reuse.
    pub intermediate_bytes: usize,
    /// What the run buffers would take without reuse.
    pub unplanned_bytes: usize,
    /// Bytes of this graph's own constants: its constant arena, and those kernels read in
    /// place ([`Backend::host_address`]).
    pub constant_bytes: usize,
    /// Bytes of the constants this graph reads from its model's shared pool (one copy for
    /// every set of input shapes the model is compiled for; not in `constant_bytes`).
    pub shared_constant_bytes: usize,
    /// Bytes of the constants (own or shared) that kernels read where their tensors lie,
    /// without a copy ([`Backend::host_address`]): a weight of the model is then in memory
    /// once, however many graphs read it.
    pub held_constant_bytes: usize,
    /// Wall time of the whole compilation.
    pub compile_time: Duration,
    pub module: ModuleReport,
    /// The readable partition dump (which operators went into which kernel).
    pub partition: String,
}

impl CompileReport {
    /// How many nodes run with their reference `eval` on the host.
    pub fn host_nodes(&self) -> usize {
        self.host_steps.len()
    }

    /// How many host steps each operator type has, in name order.
    pub fn host_ops(&self) -> std::collections::BTreeMap<String, usize> {
        let mut ops = std::collections::BTreeMap::new();
        for step in &self.host_steps {
            *ops.entry(step.op_type.clone()).or_insert(0) += 1;
        }
        ops
    }

    /// Writes `partition.txt` (the partition dump) and every kept kernel source
    /// (`<unit>.src`, `<unit>_2.src` for a second source of the same name) into `dir`, creating
    /// it.
    pub fn write_sources(&self, dir: &std::path::Path) -> std::io::Result<()> {
        std::fs::create_dir_all(dir)?;
        std::fs::write(dir.join("partition.txt"), &self.partition)?;
        let mut taken = HashSet::new();
        for (name, text) in &self.module.sources {
            let mut file: String = name
                .chars()
                .map(|c| {
                    if c.is_ascii_alphanumeric() || c == '_' {
                        c
                    } else {
                        '_'
                    }
                })
                .collect();
            // Kernels named by content may share a name (one task kind at several shapes).
            if !taken.insert(file.clone()) {
                let base = file.clone();
                let mut n = 2;
                while !taken.insert(format!("{base}_{n}")) {
                    n += 1;
                }
                file = format!("{base}_{n}");
            }
            std::fs::write(dir.join(format!("{file}.src")), text)?;
        }
        Ok(())
    }
}

/// A run between [`Backend::begin_run`] and [`Backend::end_run`]; dropped without
/// [`BackendRun::end`] (a step failed), it ends the run as not completed.
struct BackendRun<'a, B: Backend> {
    backend: &'a B,
    module: &'a B::Module,
    open: bool,
}

impl<'a, B: Backend> BackendRun<'a, B> {
    fn begin(backend: &'a B, module: &'a B::Module) -> Result<Self, BackendError> {
        backend.begin_run(module)?;
        Ok(BackendRun {
            backend,
            module,
            open: true,
        })
    }

    fn end(mut self) -> Result<(), BackendError> {
        self.open = false;
        self.backend.end_run(self.module, true)
    }
}

impl<B: Backend> Drop for BackendRun<'_, B> {
    fn drop(&mut self) {
        if self.open {
            // The run already failed; its own error is the one reported.
            let _ = self.backend.end_run(self.module, false);
        }
    }
}

pub(super) struct RunState<B: Backend> {
    arena: B::Arena,
    /// Argument addresses of each step (empty for host steps).
    addresses: Vec<Vec<u64>>,
    host: Vec<Option<Datum>>,
}

/// A graph compiled for one set of input shapes (see the module docs).
pub struct CompiledGraph<B: Backend> {
    pub(super) backend: Arc<B>,
    pub(super) module: B::Module,
    pub(super) consts: B::Arena,
    /// The model's shared constants that `Loc::Shared` values lie in, if any.
    pub(super) shared: Option<Arc<SharedConstants<B>>>,
    /// Where each constant root lies in `consts` (`const_bytes` in all).
    pub(super) const_layout: Vec<(ValueId, usize)>,
    pub(super) const_bytes: usize,
    /// Every constant as host steps and reads see it (roots and their reshaped aliases).
    pub(super) const_tensors: HashMap<ValueId, Tensor>,
    pub(super) values: Vec<ValueSlot>,
    pub(super) steps: Vec<Step>,
    pub(super) inputs: Vec<ValueId>,
    pub(super) bound_inputs: Vec<Bound>,
    pub(super) bound_outputs: Vec<Bound>,
    pub(super) outputs: Vec<ValueId>,
    pub(super) run_bytes: usize,
    pub(super) host_slots: usize,
    pub(super) pool: Mutex<Vec<RunState<B>>>,
    pub(super) report: CompileReport,
}

impl<B: Backend> std::fmt::Debug for CompiledGraph<B> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CompiledGraph")
            .field("backend", &self.backend)
            .field("report", &self.report)
            .finish_non_exhaustive()
    }
}

impl<B: Backend> CompiledGraph<B> {
    /// Compiles `graph` for `input_shapes` (one per runtime input, in the graph's input order)
    /// with `backend`: specialize, partition, lower every kernel group (splitting groups the
    /// backend refuses to fuse), build one module, plan memory, upload constants.
    pub fn compile(
        graph: &Graph,
        input_shapes: &[Vec<usize>],
        backend: Arc<B>,
        opts: &CompileOptions,
    ) -> Result<CompiledGraph<B>, CompiledError> {
        Self::compile_pooled(graph, input_shapes, backend, opts, None)
    }

    /// [`CompiledGraph::compile`] with large constants placed through `pool`: those equal to
    /// one the pool holds are read from its arena, not copied (see [`ConstantPool`]).
    pub fn compile_pooled(
        graph: &Graph,
        input_shapes: &[Vec<usize>],
        backend: Arc<B>,
        opts: &CompileOptions,
        pool: Option<&ConstantPool<B>>,
    ) -> Result<CompiledGraph<B>, CompiledError> {
        let start = Instant::now();
        let given: Vec<(ValueId, Vec<usize>)> = graph
            .inputs()
            .iter()
            .copied()
            .zip(input_shapes.iter().cloned())
            .collect();
        let spec = Specialization::new(graph, &given)?;
        let part = partition_with(graph, &spec, !opts.no_fusion);
        let mut report = CompileReport {
            folded: part.folded.len(),
            ..Default::default()
        };

        // Lower every kernel group, splitting refused ones.
        let mut groups: Vec<(Group, Option<usize>)> = Vec::new();
        let mut kernels = Vec::new();
        let mut tasks: Vec<FusedTask> = Vec::new();
        let mut planned = part
            .groups
            .iter()
            .filter(|g| matches!(g.kind, GroupKind::Anchored | GroupKind::Injective))
            .count();
        for group in &part.groups {
            let view = slice_in_place::is_view(graph, &spec, group);
            if view || !matches!(group.kind, GroupKind::Anchored | GroupKind::Injective) {
                planned -= usize::from(view);
                groups.push((group.clone(), None));
                continue;
            }
            // Groups to lower, each with its split level and, for a head cut off a refused
            // group, the task and kernel already lowered while searching for the cut.
            let mut pending = vec![(group.clone(), 0u8, None)];
            let mut done: Vec<(Group, Option<usize>)> = Vec::new();
            while let Some((g, level, lowered)) = pending.pop() {
                let (task, lowering) = match lowered {
                    Some((task, k)) => (task, Ok(k)),
                    None => {
                        let task = FusedTask::new(graph, &spec, &g, tasks.len())?;
                        let lowering = backend.lower(&task, opts);
                        (task, lowering)
                    }
                };
                match lowering {
                    Ok(k) => {
                        kernels.push(k);
                        done.push((g, Some(tasks.len())));
                        tasks.push(task);
                        if let Some(p) = &opts.progress {
                            p.report(CompileProgress::Lowered {
                                done: tasks.len(),
                                total: planned,
                            });
                        }
                    }
                    Err(BackendError::Refused { task: t, reason })
                        if g.has_fusion() && level < 2 =>
                    {
                        report.refusals.push(format!("{t}: {reason}"));
                        // First the longest prefix of the epilogue chain the backend takes,
                        // the rest one injective kernel.
                        let mut cut = None;
                        for keep in (0..g.epilogues.len()).rev().filter(|_| level == 0) {
                            let Some((head, tail)) = g.cut_epilogues(graph, &spec, keep) else {
                                continue;
                            };
                            let task = FusedTask::new(graph, &spec, &head, tasks.len())?;
                            match backend.lower(&task, opts) {
                                Ok(k) => {
                                    cut = Some((head, tail, task, k));
                                    break;
                                }
                                Err(BackendError::Refused { .. }) => {}
                                Err(e) => return Err(e.into()),
                            }
                        }
                        if let Some((head, tail, task, k)) = cut {
                            if tail.kind == GroupKind::Alias {
                                done.push((tail, None));
                            } else {
                                planned += 1;
                                pending.push((tail, 2, None));
                            }
                            // Popped next, so its task index is still the next one.
                            pending.push((head, level, Some((task, k))));
                            continue;
                        }
                        let keep_prologues = level == 0 && !g.prologues.is_empty();
                        let next = if keep_prologues { 1 } else { 2 };
                        let pieces = g.split(graph, keep_prologues);
                        planned += pieces.len().saturating_sub(1);
                        for piece in pieces.into_iter().rev() {
                            pending.push((piece, next, None));
                        }
                    }
                    Err(e) => return Err(e.into()),
                }
            }
            done.sort_by_key(|(g, _)| g.nodes.last().copied());
            groups.extend(done);
        }
        if let Some(p) = &opts.progress {
            p.report(CompileProgress::Building {
                kernels: kernels.len(),
            });
        }
        let (module, module_report) = backend.build(kernels, opts)?;
        report.module = module_report;
        let final_partition = Partition {
            groups: groups.iter().map(|(g, _)| g.clone()).collect(),
            folded: part.folded.clone(),
        };
        report.partition = final_partition.dump(graph, &spec).to_string();
        for r in &report.refusals {
            report
                .partition
                .push_str(&format!("split after refusal: {r}\n"));
        }

        // Values, steps, aliases.
        let mut values: Vec<ValueSlot> = graph
            .values()
            .iter()
            .zip(&spec.values)
            .map(|(v, info)| ValueSlot {
                name: v.name.clone(),
                dtype: info.dtype,
                kind: v.kind,
                shape: info.shape.clone(),
                loc: Loc::Unused,
            })
            .collect();
        let mut root: Vec<usize> = (0..values.len()).collect();
        // Byte offset of each value within its root's buffer (non-zero for the inputs of a
        // concatenation run in place).
        let mut at: Vec<usize> = vec![0; values.len()];
        let pinned: HashSet<usize> = graph.inputs().iter().map(|v| v.0).collect();
        let mut steps: Vec<Step> = Vec::new();
        for (group, task) in &groups {
            if concat_in_place::place(graph, &spec, group, &mut root, &mut at, &pinned) {
                report.aliases += 1;
                report.partition.push_str(&format!(
                    "in place: {} (its inputs are computed into its output)\n",
                    graph.nodes()[group.nodes[0].0].name
                ));
                continue;
            }
            if slice_in_place::place(graph, &spec, group, &mut root, &mut at) {
                report.aliases += 1;
                report.partition.push_str(&format!(
                    "in place: {} (a view of its input)\n",
                    graph.nodes()[group.nodes[0].0].name
                ));
                continue;
            }
            match (&group.kind, task) {
                (_, Some(t)) => {
                    let task = &tasks[*t];
                    let args = task
                        .inputs
                        .iter()
                        .map(|v| (*v, false))
                        .chain(task.outputs.iter().map(|v| (*v, true)))
                        .collect();
                    let at = task
                        .anchor
                        .as_ref()
                        .map(|a| a.node)
                        .or(task.nodes.first().copied());
                    let node_name = at.map(|n| graph.nodes()[n.0].name.as_str()).unwrap_or("");
                    let info = StepInfo {
                        label: format!("{} {node_name}", task.name),
                        flops: task.def.reduction_flops(),
                    };
                    steps.push(Step::Kernel {
                        kernel: *t,
                        args,
                        info,
                    });
                    report.kernels += 1;
                }
                (GroupKind::Alias, _) => {
                    let (Some(src), Some(dst)) = (group.inputs.first(), group.outputs.first())
                    else {
                        continue;
                    };
                    root[dst.0] = root[src.0];
                    at[dst.0] = at[src.0];
                    report.aliases += 1;
                }
                (kind, None) => {
                    for id in &group.nodes {
                        let n = &graph.nodes()[id.0];
                        if let GroupKind::Host(reason) = kind {
                            report.host_steps.push(HostStep {
                                node: n.name.clone(),
                                op_type: n.op_type.clone(),
                                reason: reason.clone(),
                            });
                        }
                        steps.push(Step::Host {
                            node: n.name.clone(),
                            op_type: n.op_type.clone(),
                            domain: n.domain.clone(),
                            opset: n.opset,
                            attrs: n.attrs.clone(),
                            op: Arc::clone(&n.op),
                            inputs: n.inputs.clone(),
                            outputs: n.outputs.clone(),
                        });
                    }
                }
            }
        }

        // Lifetimes of run buffers, by root.
        let step_count = steps.len();
        let mut span: HashMap<usize, (usize, usize)> = HashMap::new();
        let touch = |v: ValueId, at: usize, span: &mut HashMap<usize, (usize, usize)>| {
            let r = root[v.0];
            let e = span.entry(r).or_insert((at, at));
            e.0 = e.0.min(at);
            e.1 = e.1.max(at);
        };
        for v in graph.inputs() {
            touch(*v, 0, &mut span);
        }
        for (i, s) in steps.iter().enumerate() {
            match s {
                Step::Kernel { args, .. } => args.iter().for_each(|(v, _)| touch(*v, i, &mut span)),
                Step::Host {
                    inputs, outputs, ..
                } => inputs
                    .iter()
                    .chain(outputs)
                    .flatten()
                    .for_each(|v| touch(*v, i, &mut span)),
            }
        }
        for v in graph.outputs() {
            touch(*v, step_count, &mut span);
        }
        let mut const_tensors = HashMap::new();
        let mut const_layout: Vec<(usize, usize)> = Vec::new();
        let mut const_bytes = 0usize;
        let mut requests = Vec::new();
        let mut request_roots = Vec::new();
        let mut host_slots = 0usize;
        let mut roots: Vec<usize> = span.keys().copied().collect();
        roots.sort_unstable();
        let byte_constants: Vec<(usize, &Tensor)> = roots
            .iter()
            .filter_map(|&r| spec.values[r].constant.as_ref().map(|t| (r, t)))
            .filter(|(_, t)| !t.dtype().is_string())
            .collect();
        let tensors: Vec<&Tensor> = byte_constants.iter().map(|(_, t)| *t).collect();
        let (placements, shared) = place_constants(backend.as_ref(), pool, &tensors)?;
        let mut placed: HashMap<usize, Placement> = HashMap::new();
        for ((r, t), placement) in byte_constants.iter().zip(placements) {
            match &placement {
                Placement::Shared(_, pooled) => {
                    report.shared_constant_bytes += pooled.size_in_bytes()
                }
                Placement::Pooled(pooled) => {
                    report.shared_constant_bytes += pooled.size_in_bytes();
                    report.held_constant_bytes += pooled.size_in_bytes();
                }
                Placement::Held(_) => {
                    report.constant_bytes += t.size_in_bytes();
                    report.held_constant_bytes += t.size_in_bytes();
                }
                Placement::Own => {}
            }
            placed.insert(*r, placement);
        }
        let mut root_loc: HashMap<usize, Loc> = HashMap::new();
        for r in roots {
            let info = &spec.values[r];
            let loc = if let Some(t) = info.constant.as_ref().filter(|t| t.dtype().is_string()) {
                // Strings have no byte encoding: host steps read them from `const_tensors`.
                const_tensors.insert(ValueId(r), t.clone());
                Loc::Const(0)
            } else if let Some(Placement::Shared(offset, pooled)) = placed.get(&r) {
                const_tensors.insert(ValueId(r), pooled.clone());
                Loc::Shared(*offset)
            } else if let Some(Placement::Held(held) | Placement::Pooled(held)) = placed.get(&r) {
                const_tensors.insert(ValueId(r), held.clone());
                Loc::Held(r)
            } else if let Some(t) = &info.constant {
                let offset = const_bytes;
                const_bytes += t.size_in_bytes().div_ceil(ALIGN).max(1) * ALIGN;
                const_tensors.insert(ValueId(r), t.clone());
                const_layout.push((r, offset));
                Loc::Const(offset)
            } else if let Some(bytes) = info.size_in_bytes() {
                let (start, end) = span[&r];
                requests.push(BufferRequest { bytes, start, end });
                request_roots.push(r);
                Loc::Run(0)
            } else {
                host_slots += 1;
                Loc::Host(host_slots - 1)
            };
            root_loc.insert(r, loc);
        }
        let plan = plan_memory(&requests);
        for (r, offset) in request_roots.iter().zip(&plan.offsets) {
            root_loc.insert(*r, Loc::Run(*offset));
        }
        for (i, slot) in values.iter_mut().enumerate() {
            if let Some(loc) = root_loc.get(&root[i]) {
                slot.loc = match *loc {
                    Loc::Run(offset) => Loc::Run(offset + at[i]),
                    other => other,
                };
            }
        }
        // Aliases of constants are constants too (for host reads).
        for (i, slot) in values.iter().enumerate() {
            if let (Loc::Const(_) | Loc::Shared(_) | Loc::Held(_), Some(t)) =
                (slot.loc, const_tensors.get(&ValueId(root[i])))
            {
                let t = t.clone();
                let shape = slot.shape.clone().unwrap_or_default();
                if let Ok(view) = t.reshape(shape) {
                    const_tensors.insert(ValueId(i), view);
                }
            }
        }
        let bound_inputs = bind_inputs(graph.inputs(), graph.outputs(), &steps, &root, &at);
        report.inputs_in_place = bound_inputs.len();
        let bound_outputs =
            bind_outputs(graph.inputs(), graph.outputs(), &steps, &root, &at, &values);
        report.outputs_in_place = bound_outputs.len();
        let mut consts = backend.alloc(const_bytes)?;
        for (r, offset) in &const_layout {
            backend.upload(&mut consts, *offset, &const_tensors[&ValueId(*r)])?;
        }
        let const_layout = const_layout
            .into_iter()
            .map(|(r, offset)| (ValueId(r), offset))
            .collect();
        report.intermediate_bytes = plan.arena_bytes;
        report.unplanned_bytes = plan.unplanned_bytes;
        report.constant_bytes += const_bytes;
        report.compile_time = start.elapsed();
        Ok(CompiledGraph {
            backend,
            module,
            consts,
            shared,
            const_layout,
            const_bytes,
            const_tensors,
            values,
            steps,
            inputs: graph.inputs().to_vec(),
            bound_inputs,
            bound_outputs,
            outputs: graph.outputs().to_vec(),
            run_bytes: plan.arena_bytes,
            host_slots,
            pool: Mutex::new(Vec::new()),
            report,
        })
    }

    /// What the compilation produced.
    pub fn report(&self) -> &CompileReport {
        &self.report
    }

    /// The input shapes this graph was compiled for, in input order.
    pub fn input_shapes(&self) -> Vec<Vec<usize>> {
        self.inputs
            .iter()
            .map(|v| self.values[v.0].shape.clone().unwrap_or_default())
            .collect()
    }

    pub(super) fn new_state(&self) -> Result<RunState<B>, CompiledError> {
        let arena = self.backend.alloc(self.run_bytes)?;
        let (cbase, rbase) = (self.backend.base(&self.consts), self.backend.base(&arena));
        let sbase = self.shared.as_ref().map_or(0, |s| s.base);
        let mut addresses = Vec::with_capacity(self.steps.len());
        for step in &self.steps {
            let Step::Kernel { kernel, args, .. } = step else {
                addresses.push(Vec::new());
                continue;
            };
            let mut checked = Vec::with_capacity(args.len());
            for (v, written) in args {
                let slot = &self.values[v.0];
                let bytes = slot.shape.as_ref().map_or(0, |s| {
                    s.iter().product::<usize>() * slot.dtype.size_in_bytes()
                });
                let address = match slot.loc {
                    Loc::Const(o) if !written => cbase + o as u64,
                    Loc::Shared(o) if !written && self.shared.is_some() => sbase + o as u64,
                    Loc::Held(root) if !written => self
                        .const_tensors
                        .get(&ValueId(root))
                        .and_then(|t| self.backend.host_address(t))
                        .ok_or_else(|| {
                            BackendError::Memory(format!(
                                "constant `{}` cannot be read in place",
                                slot.name
                            ))
                        })?,
                    Loc::Run(o) => rbase + o as u64,
                    other => {
                        return Err(BackendError::Launch {
                            kernel: *kernel,
                            message: format!(
                                "argument `{}` has no kernel-visible buffer ({other:?})",
                                slot.name
                            ),
                        }
                        .into())
                    }
                };
                checked.push(ArgAddress {
                    address,
                    bytes,
                    written: *written,
                });
            }
            self.backend.check_args(&self.module, *kernel, &checked)?;
            addresses.push(checked.iter().map(|a| a.address).collect());
        }
        Ok(RunState {
            arena,
            addresses,
            host: vec![None; self.host_slots],
        })
    }

    /// Runs on named inputs, which must have exactly the dtypes and shapes this graph was
    /// compiled for; returns every graph output as (name, tensor), in output order.
    pub fn run(&self, inputs: &[(String, Tensor)]) -> Result<Vec<(String, Tensor)>, CompiledError> {
        self.run_tensors(inputs, None)
    }

    /// [`CompiledGraph::run`] that also times every step of the launch list: the returned
    /// durations are in [`CompiledGraph::steps`] order. Kernels run exactly as in `run`; the
    /// only cost added is one clock read per step.
    pub fn run_profiled(&self, inputs: &[(String, Tensor)]) -> Result<ProfiledRun, CompiledError> {
        let mut times = Vec::with_capacity(self.steps.len());
        let outputs = self.run_tensors(inputs, Some(&mut times))?;
        Ok((outputs, times))
    }

    /// The backend's module of this graph's kernels.
    pub fn module(&self) -> &B::Module {
        &self.module
    }

    /// For each step of the launch list (in [`CompiledGraph::steps`] order), the index in
    /// [`CompiledGraph::module`] of the kernel it launches; `None` for a host step.
    pub fn step_kernels(&self) -> Vec<Option<usize>> {
        self.steps
            .iter()
            .map(|step| match step {
                Step::Kernel { kernel, .. } => Some(*kernel),
                Step::Host { .. } => None,
            })
            .collect()
    }

    /// The launch list, in run order.
    pub fn steps(&self) -> Vec<StepInfo> {
        self.steps
            .iter()
            .map(|step| match step {
                Step::Kernel { info, .. } => info.clone(),
                Step::Host { node, op_type, .. } => StepInfo {
                    label: format!("host {op_type} {node}"),
                    flops: None,
                },
            })
            .collect()
    }

    fn run_tensors(
        &self,
        inputs: &[(String, Tensor)],
        times: Option<&mut Vec<Duration>>,
    ) -> Result<Vec<(String, Tensor)>, CompiledError> {
        let outputs = self.run_data_with(&crate::executor::as_data(inputs), times)?;
        Ok(crate::executor::into_tensors(outputs)?)
    }

    /// [`CompiledGraph::run`] for inputs and outputs of any kind: sequences and optionals
    /// live in host slots (the nodes that read or write them run on the host).
    pub fn run_data(
        &self,
        inputs: &[(String, Datum)],
    ) -> Result<Vec<(String, Datum)>, CompiledError> {
        self.run_data_with(inputs, None)
    }

    fn run_data_with(
        &self,
        inputs: &[(String, Datum)],
        times: Option<&mut Vec<Duration>>,
    ) -> Result<Vec<(String, Datum)>, CompiledError> {
        let declared: Vec<InputDecl<'_>> = self
            .inputs
            .iter()
            .map(|v| {
                let slot = &self.values[v.0];
                InputDecl {
                    name: &slot.name,
                    kind: slot.kind,
                    dtype: slot.dtype,
                    shape: slot
                        .shape
                        .as_deref()
                        .map_or(DeclaredShape::Unknown, DeclaredShape::Sizes),
                }
            })
            .collect();
        match_inputs(&declared, inputs)?;
        let by_name: HashMap<&str, &Datum> = inputs.iter().map(|(n, t)| (n.as_str(), t)).collect();
        let taken = self
            .pool
            .lock()
            .map_err(|_| BackendError::Memory("run-state pool poisoned".into()))?
            .pop();
        let mut state = match taken {
            Some(s) => s,
            None => self.new_state()?,
        };
        let result = self.run_with(&mut state, &by_name, times);
        state.host.iter_mut().for_each(|h| *h = None);
        if let Ok(mut pool) = self.pool.lock() {
            pool.push(state);
        }
        result
    }

    fn run_with(
        &self,
        state: &mut RunState<B>,
        inputs: &HashMap<&str, &Datum>,
        mut times: Option<&mut Vec<Duration>>,
    ) -> Result<Vec<(String, Datum)>, CompiledError> {
        let arena_base = self.backend.base(&state.arena);
        for v in &self.inputs {
            let slot = &self.values[v.0];
            let Loc::Run(offset) = slot.loc else {
                continue;
            };
            let given = match inputs.get(slot.name.as_str()) {
                Some(Datum::Tensor(t)) => Some(t),
                _ => None,
            };
            let bound = self.bound_inputs.iter().find(|b| b.value == *v);
            let in_place = bound.and(given).and_then(|t| self.backend.host_address(t));
            if let (None, Some(t)) = (in_place, given) {
                self.backend.upload(&mut state.arena, offset, t)?;
            }
            // Every run rewrites a bound input's arguments, so none keeps pointing at the
            // tensor of an earlier run.
            if let Some(bound) = bound {
                let base = in_place.unwrap_or(arena_base + offset as u64);
                for &(step, arg, at) in &bound.uses {
                    state.addresses[step][arg] = base + at;
                }
            }
        }
        let mut placed: HashMap<ValueId, Box<dyn OutputSlot>> = HashMap::new();
        for bound in &self.bound_outputs {
            let slot = &self.values[bound.value.0];
            let Loc::Run(offset) = slot.loc else {
                continue;
            };
            let shape = slot.shape.as_deref().unwrap_or(&[]);
            let base = match self.backend.output_in_place(slot.dtype, shape) {
                Some(output) => {
                    let address = output.address();
                    placed.insert(bound.value, output);
                    address
                }
                None => arena_base + offset as u64,
            };
            // Every run rewrites a bound output's arguments, so none keeps pointing at the
            // tensor handed out by an earlier run.
            for &(step, arg, at) in &bound.uses {
                state.addresses[step][arg] = base + at;
            }
        }
        // A run of kernels only (not timed per step) is one unit for the backend, which may
        // defer its launches to the end (a CUDA graph replay); `run` ends it on every path.
        let mut run = (times.is_none()
            && self.steps.iter().all(|s| matches!(s, Step::Kernel { .. })))
        .then(|| BackendRun::begin(&*self.backend, &self.module))
        .transpose()?;
        for (i, step) in self.steps.iter().enumerate() {
            let started = times.is_some().then(Instant::now);
            match step {
                Step::Kernel { kernel, .. } => {
                    // SAFETY: the addresses were computed for this state's arena and the
                    // constant arena, both alive for the call, and passed `check_args` when
                    // the state was created; a bound input's arguments point instead into
                    // the caller's tensor, borrowed for this run, of the size `check_args`
                    // saw (dtype and shape were checked), and only read. The memory plan
                    // gives simultaneously live buffers disjoint bytes, and the arena is
                    // owned by this run alone.
                    unsafe {
                        self.backend
                            .launch(&self.module, *kernel, &state.addresses[i])?
                    };
                }
                Step::Host {
                    node,
                    op_type,
                    op,
                    inputs: ins,
                    outputs: outs,
                    ..
                } => self.run_host(state, inputs, node, op_type, op.as_ref(), ins, outs)?,
            }
            if let (Some(times), Some(t)) = (times.as_deref_mut(), started) {
                times.push(t.elapsed());
            }
        }
        if let Some(run) = run.take() {
            run.end()?;
        }
        let mut finished: HashMap<ValueId, Tensor> = HashMap::with_capacity(placed.len());
        for (v, output) in placed {
            // SAFETY: every step ran without error. A bound output spans its whole buffer,
            // which no other output shares and no host step writes, and the kernels that
            // produce a value write every element of it (a compute definition defines every
            // output element; an in-place concatenation's parts cover it), so all elements
            // were written through the address this run gave them.
            finished.insert(v, unsafe { output.finish() });
        }
        self.outputs
            .iter()
            .map(|v| {
                let value = match finished.get(v) {
                    Some(t) => Datum::Tensor(t.clone()),
                    None => self.read(state, inputs, *v)?,
                };
                Ok((self.values[v.0].name.clone(), value))
            })
            .collect()
    }

    fn read(
        &self,
        state: &RunState<B>,
        inputs: &HashMap<&str, &Datum>,
        v: ValueId,
    ) -> Result<Datum, CompiledError> {
        let slot = &self.values[v.0];
        if self.inputs.contains(&v) {
            if let Some(t) = inputs.get(slot.name.as_str()) {
                return Ok((*t).clone());
            }
        }
        match slot.loc {
            Loc::Const(_) | Loc::Shared(_) | Loc::Held(_) => self
                .const_tensors
                .get(&v)
                .cloned()
                .map(Datum::Tensor)
                .ok_or_else(|| {
                    BackendError::Memory(format!("constant `{}` is missing", slot.name)).into()
                }),
            Loc::Run(offset) => Ok(Datum::Tensor(self.backend.download(
                &state.arena,
                offset,
                slot.dtype,
                slot.shape.as_deref().unwrap_or(&[]),
            )?)),
            Loc::Host(h) => state.host[h]
                .clone()
                .ok_or_else(|| ExecError::MissingInput(slot.name.clone()).into()),
            Loc::Unused => Err(ExecError::MissingInput(slot.name.clone()).into()),
        }
    }

    #[allow(clippy::too_many_arguments)]
    fn run_host(
        &self,
        state: &mut RunState<B>,
        inputs: &HashMap<&str, &Datum>,
        node: &str,
        op_type: &str,
        op: &dyn Operator,
        ins: &[Option<ValueId>],
        outs: &[Option<ValueId>],
    ) -> Result<(), CompiledError> {
        let node_err = |source: OpError| ExecError::Node {
            node: node.to_string(),
            op_type: op_type.to_string(),
            source,
        };
        let args: Vec<Option<Datum>> = ins
            .iter()
            .map(|i| i.map(|v| self.read(state, inputs, v)).transpose())
            .collect::<Result<_, _>>()?;
        let refs: Vec<Option<&Datum>> = args.iter().map(Option::as_ref).collect();
        let results = op.eval_host(&refs).map_err(node_err)?;
        for (slot_index, o) in outs.iter().enumerate() {
            let Some(o) = o else { continue };
            let t = results.get(slot_index).ok_or_else(|| {
                node_err(OpError::Invalid(format!(
                    "operator returned {} outputs, node declares #{slot_index}",
                    results.len()
                )))
            })?;
            let slot = &self.values[o.0];
            if !t.is_kind(slot.kind) {
                return Err(ExecError::InferenceMismatch {
                    node: node.to_string(),
                    op_type: op_type.to_string(),
                    slot: slot_index,
                    expected: slot.kind.to_string(),
                    given: t.describe(),
                }
                .into());
            }
            match (slot.loc, t) {
                (Loc::Run(offset), Datum::Tensor(t)) => {
                    if t.dtype() != slot.dtype || Some(t.shape()) != slot.shape.as_deref() {
                        return Err(ExecError::InferenceMismatch {
                            node: node.to_string(),
                            op_type: op_type.to_string(),
                            slot: slot_index,
                            expected: format!(
                                "{}{:?}",
                                slot.dtype,
                                slot.shape.clone().unwrap_or_default()
                            ),
                            given: format!("{}{:?}", t.dtype(), t.shape()),
                        }
                        .into());
                    }
                    self.backend.upload(&mut state.arena, offset, t)?;
                }
                (Loc::Run(_), other) => {
                    return Err(ExecError::WrongKind {
                        name: slot.name.clone(),
                        expected: ValueKind::Tensor,
                        given: other.describe(),
                    }
                    .into())
                }
                (Loc::Host(h), _) => state.host[h] = Some(t.clone()),
                (Loc::Const(_) | Loc::Shared(_) | Loc::Held(_) | Loc::Unused, _) => {}
            }
        }
        Ok(())
    }
}

/// Every kernel argument inside the buffer of root `r`, as (step, argument, byte offset in
/// the buffer).
fn kernel_uses(steps: &[Step], root: &[usize], at: &[usize], r: usize) -> Vec<(usize, usize, u64)> {
    let mut uses = Vec::new();
    for (i, step) in steps.iter().enumerate() {
        if let Step::Kernel { args, .. } = step {
            for (j, (a, _)) in args.iter().enumerate() {
                if root[a.0] == r {
                    uses.push((i, j, at[a.0] as u64));
                }
            }
        }
    }
    uses
}

/// The outputs kernels may write in place (see [`Bound`]), given each value's root
/// buffer and byte offset in it.
fn bind_outputs(
    inputs: &[ValueId],
    outputs: &[ValueId],
    steps: &[Step],
    root: &[usize],
    at: &[usize],
    values: &[ValueSlot],
) -> Vec<Bound> {
    let bytes = |v: usize| {
        let slot = &values[v];
        slot.shape
            .as_deref()
            .and_then(checked_numel)
            .and_then(|n| n.checked_mul(slot.dtype.size_in_bytes()))
    };
    let mut kept: HashSet<usize> = inputs.iter().map(|v| root[v.0]).collect();
    for step in steps {
        if let Step::Host {
            inputs, outputs, ..
        } = step
        {
            kept.extend(inputs.iter().chain(outputs).flatten().map(|v| root[v.0]));
        }
    }
    let mut outputs_of_root: HashMap<usize, usize> = HashMap::new();
    for v in outputs {
        *outputs_of_root.entry(root[v.0]).or_default() += 1;
    }
    outputs
        .iter()
        .filter(|v| {
            let r = root[v.0];
            matches!(values[v.0].loc, Loc::Run(_))
                && at[v.0] == 0
                && outputs_of_root[&r] == 1
                && !kept.contains(&r)
                && bytes(v.0).is_some_and(|b| b > 0 && Some(b) == bytes(r))
        })
        .map(|v| Bound {
            value: *v,
            uses: kernel_uses(steps, root, at, root[v.0]),
        })
        .collect()
}

/// The inputs kernels may read in place (see [`Bound`]), given each value's root buffer
/// and byte offset in it.
fn bind_inputs(
    inputs: &[ValueId],
    outputs: &[ValueId],
    steps: &[Step],
    root: &[usize],
    at: &[usize],
) -> Vec<Bound> {
    // Roots that must stay in the arena: read by a host step or a graph output, or written
    // by a kernel (never an input's, by the memory plan; checked rather than assumed, since
    // a bound input is the caller's immutable tensor).
    let mut kept: HashSet<usize> = outputs.iter().map(|v| root[v.0]).collect();
    for step in steps {
        match step {
            Step::Host {
                inputs, outputs, ..
            } => kept.extend(inputs.iter().chain(outputs).flatten().map(|v| root[v.0])),
            Step::Kernel { args, .. } => kept.extend(
                args.iter()
                    .filter(|(_, written)| *written)
                    .map(|(v, _)| root[v.0]),
            ),
        }
    }
    inputs
        .iter()
        .filter(|v| root[v.0] == v.0 && at[v.0] == 0 && !kept.contains(&v.0))
        .map(|v| Bound {
            value: *v,
            uses: kernel_uses(steps, root, at, v.0),
        })
        .collect()
}
