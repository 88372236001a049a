//! Saving a compiled model to one file and loading it without compiling anything.
//!
//! A saved model ([`CompiledModel::save`]) holds every graph the model has compiled so far
//! (one per set of input shapes), each as its launch list, memory plan, constants and the
//! backend's module ([`Backend::save_module`]: for the CPU, the kernels' shared libraries and
//! the CPU features they need), plus the model's declared inputs and outputs. The file format
//! is [`super::artifact`]'s. [`LoadedModel::load`] reads it back, checks it, loads the modules
//! ([`Backend::load_module`]: no compiler runs) and runs inputs of the saved shapes.
//!
//! Host steps (nodes run with their reference `eval`) are saved as their operator type,
//! domain, opset and attributes, and rebuilt from the operator registry when loaded; a host
//! step with a subgraph attribute (If, Loop, Scan) cannot be saved yet, and saving says so.
//!
//! A saved model contains machine code that loading executes: load only files you trust as
//! you would trust a shared library. Checksums catch corruption, not forgery.

use std::collections::{BTreeMap, HashMap};
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use serde::{Deserialize, Serialize};

use super::artifact::{ArtifactReader, ArtifactWriter, BlobId};
use super::backend::{Backend, ModuleReport};
use super::constant_pool::{place_constants, ConstantPool, Placement};
use super::graph::{Bound, CompileReport, CompiledError, CompiledGraph, HostStep, Loc, Step};
use super::graph::{StepInfo, ValueSlot};
use super::model::CompiledModel;
use super::plan::ALIGN;
use crate::attribute::{Attribute, Attributes};
use crate::dtype::DType;
use crate::executor::{match_inputs, DeclaredShape, ExecError, InputDecl};
use crate::graph::{Graph, ValueId};
use crate::operator::{OpContext, Operator};
use crate::registry::Registry;
use crate::shape::{Dim, TensorType};
use crate::string::Str;
use crate::tensor::Tensor;
use crate::value::{Datum, ValueKind};

/// One dimension of a declared input or output.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum SavedDim {
    Fixed(usize),
    Symbol(String),
    Unknown,
}

impl SavedDim {
    fn of(d: &Dim) -> SavedDim {
        match d {
            Dim::Fixed(n) => SavedDim::Fixed(*n),
            Dim::Symbol(s) => SavedDim::Symbol(s.to_string()),
            Dim::Unknown => SavedDim::Unknown,
        }
    }

    fn dim(&self) -> Dim {
        match self {
            SavedDim::Fixed(n) => Dim::Fixed(*n),
            SavedDim::Symbol(s) => Dim::Symbol(s.as_str().into()),
            SavedDim::Unknown => Dim::Unknown,
        }
    }
}

/// A graph input or output as the model declares it (symbolic dimensions included).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SavedDecl {
    pub name: String,
    pub kind: ValueKind,
    pub dtype: DType,
    /// `None` for an unknown rank.
    pub shape: Option<Vec<SavedDim>>,
}

impl SavedDecl {
    fn of(graph: &Graph, id: ValueId) -> SavedDecl {
        let v = graph.value(id);
        SavedDecl {
            name: v.name.clone(),
            kind: v.kind,
            dtype: v.ty.dtype,
            shape: v
                .ty
                .shape
                .as_ref()
                .map(|s| s.iter().map(SavedDim::of).collect()),
        }
    }

    /// The declared dimensions (`None` for an unknown rank).
    pub fn dims(&self) -> Option<Vec<Dim>> {
        self.shape
            .as_ref()
            .map(|s| s.iter().map(SavedDim::dim).collect())
    }
}

#[derive(Debug, Clone, Serialize, Deserialize)]
enum SavedData {
    /// Little-endian elements.
    Bytes(BlobId),
    Strings(Vec<String>),
}

#[derive(Debug, Clone, Serialize, Deserialize)]
struct SavedTensor {
    dtype: DType,
    shape: Vec<usize>,
    data: SavedData,
}

impl SavedTensor {
    fn save(t: &Tensor, blobs: &mut ArtifactWriter) -> Result<SavedTensor, CompiledError> {
        let data = if t.dtype() == DType::String {
            let strings = t
                .as_slice::<Str>()
                .map_err(|e| CompiledError::Saved(e.to_string()))?;
            SavedData::Strings(strings.iter().map(|s| s.as_str().to_string()).collect())
        } else {
            let bytes = t
                .to_le_bytes()
                .map_err(|e| CompiledError::Saved(e.to_string()))?;
            SavedData::Bytes(blobs.add(bytes))
        };
        Ok(SavedTensor {
            dtype: t.dtype(),
            shape: t.shape().to_vec(),
            data,
        })
    }

    /// [`SavedTensor::load`] that reads each blob once: a blob loaded before as `dtype`
    /// (by another graph of the model, or as another shape of the same constant) is shared.
    fn load_once(
        &self,
        blobs: &ArtifactReader,
        loaded: &mut HashMap<(BlobId, DType), Tensor>,
    ) -> Result<Tensor, CompiledError> {
        let SavedData::Bytes(id) = &self.data else {
            return self.load(blobs);
        };
        if let Some(t) = loaded.get(&(*id, self.dtype)) {
            if let Ok(view) = t.reshape(self.shape.clone()) {
                return Ok(view);
            }
        }
        let t = self.load(blobs)?;
        loaded.insert((*id, self.dtype), t.clone());
        Ok(t)
    }

    fn load(&self, blobs: &ArtifactReader) -> Result<Tensor, CompiledError> {
        let bad = |e: crate::tensor::TensorError| blobs.manifest_error(format!("a tensor: {e}"));
        Ok(match &self.data {
            SavedData::Bytes(id) => {
                Tensor::from_le_bytes(self.dtype, self.shape.clone(), blobs.blob(*id)?)
                    .map_err(bad)?
            }
            SavedData::Strings(s) if self.dtype == DType::String => Tensor::new(
                self.shape.clone(),
                s.iter().map(|s| Str::new(s)).collect::<Vec<_>>(),
            )
            .map_err(bad)?,
            SavedData::Strings(_) => {
                return Err(blobs
                    .manifest_error(format!("{} tensor stored as strings", self.dtype))
                    .into())
            }
        })
    }
}

/// An attribute of a host step. Floats are stored as their bits (JSON has no NaN or
/// infinity).
#[derive(Debug, Clone, Serialize, Deserialize)]
enum SavedAttr {
    Float(u32),
    Int(i64),
    String(String),
    Tensor(SavedTensor),
    Floats(Vec<u32>),
    Ints(Vec<i64>),
    Strings(Vec<String>),
    Tensors(Vec<SavedTensor>),
    Type {
        dtype: DType,
        shape: Option<Vec<SavedDim>>,
        kind: ValueKind,
    },
}

fn save_attrs(
    node: &str,
    attrs: &Attributes,
    blobs: &mut ArtifactWriter,
) -> Result<BTreeMap<String, SavedAttr>, CompiledError> {
    let mut out = BTreeMap::new();
    for (name, a) in attrs.iter() {
        let saved = match a {
            Attribute::Float(x) => SavedAttr::Float(x.to_bits()),
            Attribute::Int(x) => SavedAttr::Int(*x),
            Attribute::String(x) => SavedAttr::String(x.clone()),
            Attribute::Tensor(t) => SavedAttr::Tensor(SavedTensor::save(t, blobs)?),
            Attribute::Floats(x) => SavedAttr::Floats(x.iter().map(|f| f.to_bits()).collect()),
            Attribute::Ints(x) => SavedAttr::Ints(x.clone()),
            Attribute::Strings(x) => SavedAttr::Strings(x.clone()),
            Attribute::Tensors(ts) => SavedAttr::Tensors(
                ts.iter()
                    .map(|t| SavedTensor::save(t, blobs))
                    .collect::<Result<_, _>>()?,
            ),
            Attribute::Type(ty, kind) => SavedAttr::Type {
                dtype: ty.dtype,
                shape: ty
                    .shape
                    .as_ref()
                    .map(|s| s.iter().map(SavedDim::of).collect()),
                kind: *kind,
            },
            Attribute::Graph(_) | Attribute::Graphs(_) | Attribute::GraphDef(_) => {
                return Err(CompiledError::Saved(format!(
                    "cannot save the compiled model: node `{node}` runs on the host and has a \
                     subgraph attribute `{name}`, which saved models do not hold yet"
                )))
            }
        };
        out.insert(name.to_string(), saved);
    }
    Ok(out)
}

fn load_attrs(
    saved: &BTreeMap<String, SavedAttr>,
    blobs: &ArtifactReader,
) -> Result<Attributes, CompiledError> {
    let mut attrs = Attributes::new();
    for (name, a) in saved {
        let value = match a {
            SavedAttr::Float(b) => Attribute::Float(f32::from_bits(*b)),
            SavedAttr::Int(x) => Attribute::Int(*x),
            SavedAttr::String(x) => Attribute::String(x.clone()),
            SavedAttr::Tensor(t) => Attribute::Tensor(t.load(blobs)?),
            SavedAttr::Floats(x) => {
                Attribute::Floats(x.iter().map(|b| f32::from_bits(*b)).collect())
            }
            SavedAttr::Ints(x) => Attribute::Ints(x.clone()),
            SavedAttr::Strings(x) => Attribute::Strings(x.clone()),
            SavedAttr::Tensors(ts) => {
                Attribute::Tensors(ts.iter().map(|t| t.load(blobs)).collect::<Result<_, _>>()?)
            }
            SavedAttr::Type { dtype, shape, kind } => Attribute::Type(
                TensorType {
                    dtype: *dtype,
                    shape: shape
                        .as_ref()
                        .map(|s| s.iter().map(SavedDim::dim).collect()),
                },
                *kind,
            ),
        };
        attrs.insert(name.clone(), value);
    }
    Ok(attrs)
}

/// The operator of a host step, built again from the registry.
fn rebuild_op(
    node: &str,
    domain: &str,
    op_type: &str,
    opset: i64,
    attrs: &Attributes,
    num_inputs: usize,
    num_outputs: usize,
) -> Result<Arc<dyn Operator>, String> {
    let schema = Registry::global()
        .lookup(domain, op_type, opset)
        .ok_or_else(|| {
            format!("node `{node}`: operator {op_type} (opset {opset}) is not registered")
        })?;
    let op = schema
        .build(&OpContext {
            domain,
            op_type,
            opset,
            attrs,
            num_inputs,
            num_outputs,
        })
        .map_err(|e| format!("node `{node}` ({op_type}): {e}"))?;
    Ok(Arc::from(op))
}

#[derive(Debug, Clone, Serialize, Deserialize)]
struct SavedValue {
    name: String,
    dtype: DType,
    kind: ValueKind,
    shape: Option<Vec<usize>>,
    loc: Loc,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
enum SavedStep {
    Kernel {
        kernel: usize,
        args: Vec<(usize, bool)>,
        label: String,
        flops: Option<f64>,
    },
    Host {
        node: String,
        op_type: String,
        domain: String,
        opset: i64,
        attrs: BTreeMap<String, SavedAttr>,
        inputs: Vec<Option<usize>>,
        outputs: Vec<Option<usize>>,
    },
}

#[derive(Debug, Clone, Serialize, Deserialize)]
struct SavedBound {
    value: usize,
    uses: Vec<(usize, usize, u64)>,
}

/// What [`CompileReport`] says, minus the parts that only a compilation has (sources).
#[derive(Debug, Clone, Serialize, Deserialize)]
struct SavedReport {
    kernels: usize,
    host_steps: Vec<HostStep>,
    aliases: usize,
    folded: usize,
    refusals: Vec<String>,
    unplanned_bytes: usize,
    partition: String,
}

/// One compiled graph of a saved model.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct SavedGraph {
    input_shapes: Vec<Vec<usize>>,
    values: Vec<SavedValue>,
    steps: Vec<SavedStep>,
    inputs: Vec<usize>,
    outputs: Vec<usize>,
    bound_inputs: Vec<SavedBound>,
    bound_outputs: Vec<SavedBound>,
    run_bytes: usize,
    host_slots: usize,
    const_bytes: usize,
    /// `(value, offset)` of every constant uploaded into the constant arena.
    const_layout: Vec<(usize, usize)>,
    /// Every constant host steps and reads see, by value.
    const_tensors: Vec<(usize, SavedTensor)>,
    module: serde_json::Value,
    report: SavedReport,
}

/// The payload of a saved model's manifest.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct SavedModel {
    /// The `hidet-graph` version that wrote the file (informational).
    writer: String,
    /// [`Backend::name`] of the backend the graphs were compiled for.
    backend: String,
    name: String,
    inputs: Vec<SavedDecl>,
    outputs: Vec<SavedDecl>,
    graphs: Vec<SavedGraph>,
}

impl<B: Backend> CompiledGraph<B> {
    fn save(&self, blobs: &mut ArtifactWriter) -> Result<SavedGraph, CompiledError> {
        let steps = self
            .steps
            .iter()
            .map(|step| {
                Ok(match step {
                    Step::Kernel { kernel, args, info } => SavedStep::Kernel {
                        kernel: *kernel,
                        args: args.iter().map(|(v, w)| (v.0, *w)).collect(),
                        label: info.label.clone(),
                        flops: info.flops,
                    },
                    Step::Host {
                        node,
                        op_type,
                        domain,
                        opset,
                        attrs,
                        inputs,
                        outputs,
                        ..
                    } => {
                        // A step that cannot be rebuilt is refused now, not when loading.
                        rebuild_op(
                            node,
                            domain,
                            op_type,
                            *opset,
                            attrs,
                            inputs.len(),
                            outputs.len(),
                        )
                        .map_err(|e| {
                            CompiledError::Saved(format!("cannot save the compiled model: {e}"))
                        })?;
                        SavedStep::Host {
                            node: node.clone(),
                            op_type: op_type.clone(),
                            domain: domain.clone(),
                            opset: *opset,
                            attrs: save_attrs(node, attrs, blobs)?,
                            inputs: inputs.iter().map(|v| v.map(|v| v.0)).collect(),
                            outputs: outputs.iter().map(|v| v.map(|v| v.0)).collect(),
                        }
                    }
                })
            })
            .collect::<Result<Vec<_>, CompiledError>>()?;
        let bound = |b: &Vec<Bound>| {
            b.iter()
                .map(|b| SavedBound {
                    value: b.value.0,
                    uses: b.uses.clone(),
                })
                .collect()
        };
        let mut const_tensors: Vec<(usize, SavedTensor)> = self
            .const_tensors
            .iter()
            .map(|(v, t)| Ok((v.0, SavedTensor::save(t, blobs)?)))
            .collect::<Result<_, CompiledError>>()?;
        const_tensors.sort_by_key(|(v, _)| *v);
        // Constants read from the model's shared pool or in place are stored in the saved
        // graph's own arena, after the ones already there.
        let mut const_bytes = self.const_bytes;
        let mut const_layout: Vec<(usize, usize)> =
            self.const_layout.iter().map(|(v, o)| (v.0, *o)).collect();
        let mut moved: HashMap<Loc, usize> = HashMap::new();
        let mut values = Vec::with_capacity(self.values.len());
        for (i, v) in self.values.iter().enumerate() {
            let loc = match v.loc {
                Loc::Shared(_) | Loc::Held(_) => {
                    Loc::Const(*moved.entry(v.loc).or_insert_with(|| {
                        let offset = const_bytes;
                        let bytes = v
                            .shape
                            .as_deref()
                            .map_or(0, |s| s.iter().product::<usize>() * v.dtype.size_in_bytes());
                        const_bytes += bytes.div_ceil(ALIGN).max(1) * ALIGN;
                        const_layout.push((i, offset));
                        offset
                    }))
                }
                other => other,
            };
            values.push(SavedValue {
                name: v.name.clone(),
                dtype: v.dtype,
                kind: v.kind,
                shape: v.shape.clone(),
                loc,
            });
        }
        let r = &self.report;
        Ok(SavedGraph {
            input_shapes: self.input_shapes(),
            values,
            steps,
            inputs: self.inputs.iter().map(|v| v.0).collect(),
            outputs: self.outputs.iter().map(|v| v.0).collect(),
            bound_inputs: bound(&self.bound_inputs),
            bound_outputs: bound(&self.bound_outputs),
            run_bytes: self.run_bytes,
            host_slots: self.host_slots,
            const_bytes,
            const_layout,
            const_tensors,
            module: self.backend.save_module(&self.module, blobs)?,
            report: SavedReport {
                kernels: r.kernels,
                host_steps: r.host_steps.clone(),
                aliases: r.aliases,
                folded: r.folded,
                refusals: r.refusals.clone(),
                unplanned_bytes: r.unplanned_bytes,
                partition: r.partition.clone(),
            },
        })
    }

    /// The graph `saved` describes, for `backend`. Constants are read once per model
    /// (`loaded`, by blob) and the large ones placed through the model's `pool`, so the
    /// graphs of one model for several input shapes hold one copy of its weights.
    fn load(
        saved: &SavedGraph,
        blobs: &ArtifactReader,
        backend: Arc<B>,
        loaded: &mut HashMap<(BlobId, DType), Tensor>,
        pool: &ConstantPool<B>,
    ) -> Result<CompiledGraph<B>, CompiledError> {
        let start = Instant::now();
        check_structure(saved).map_err(|what| blobs.manifest_error(what))?;
        let mut values: Vec<ValueSlot> = saved
            .values
            .iter()
            .map(|v| ValueSlot {
                name: v.name.clone(),
                dtype: v.dtype,
                kind: v.kind,
                shape: v.shape.clone(),
                loc: v.loc,
            })
            .collect();
        let steps = saved
            .steps
            .iter()
            .map(|s| {
                Ok(match s {
                    SavedStep::Kernel {
                        kernel,
                        args,
                        label,
                        flops,
                    } => Step::Kernel {
                        kernel: *kernel,
                        args: args.iter().map(|(v, w)| (ValueId(*v), *w)).collect(),
                        info: StepInfo {
                            label: label.clone(),
                            flops: *flops,
                        },
                    },
                    SavedStep::Host {
                        node,
                        op_type,
                        domain,
                        opset,
                        attrs,
                        inputs,
                        outputs,
                    } => {
                        let attrs = load_attrs(attrs, blobs)?;
                        let op = rebuild_op(
                            node,
                            domain,
                            op_type,
                            *opset,
                            &attrs,
                            inputs.len(),
                            outputs.len(),
                        )
                        .map_err(|e| blobs.manifest_error(e))?;
                        Step::Host {
                            node: node.clone(),
                            op_type: op_type.clone(),
                            domain: domain.clone(),
                            opset: *opset,
                            attrs,
                            op,
                            inputs: inputs.iter().map(|v| v.map(ValueId)).collect(),
                            outputs: outputs.iter().map(|v| v.map(ValueId)).collect(),
                        }
                    }
                })
            })
            .collect::<Result<Vec<_>, CompiledError>>()?;
        let mut const_tensors = HashMap::new();
        for (v, t) in &saved.const_tensors {
            const_tensors.insert(ValueId(*v), t.load_once(blobs, loaded)?);
        }
        let module = backend.load_module(&saved.module, blobs)?;
        let laid_out = saved
            .const_layout
            .iter()
            .map(|(v, _)| {
                const_tensors.get(&ValueId(*v)).cloned().ok_or_else(|| {
                    blobs.manifest_error(format!("constant #{v} is laid out but not stored"))
                })
            })
            .collect::<Result<Vec<Tensor>, _>>()?;
        let (placements, shared) = place_constants(
            backend.as_ref(),
            Some(pool),
            &laid_out.iter().collect::<Vec<_>>(),
        )?;
        // The constants not shared are laid out again, without the shared ones' gaps.
        let mut moved: HashMap<usize, Loc> = HashMap::new();
        let mut const_layout = Vec::new();
        let (mut const_bytes, mut shared_constant_bytes) = (0usize, 0usize);
        let (mut held_bytes, mut own_held_bytes) = (0usize, 0usize);
        for (((v, offset), t), placement) in
            saved.const_layout.iter().zip(&laid_out).zip(placements)
        {
            let loc = match placement {
                Placement::Shared(at, pooled) => {
                    shared_constant_bytes += pooled.size_in_bytes();
                    const_tensors.insert(ValueId(*v), pooled);
                    Loc::Shared(at)
                }
                Placement::Pooled(pooled) => {
                    shared_constant_bytes += pooled.size_in_bytes();
                    held_bytes += pooled.size_in_bytes();
                    const_tensors.insert(ValueId(*v), pooled);
                    Loc::Held(*v)
                }
                Placement::Held(held) => {
                    held_bytes += held.size_in_bytes();
                    own_held_bytes += held.size_in_bytes();
                    Loc::Held(*v)
                }
                Placement::Own => {
                    let at = const_bytes;
                    const_bytes += t.size_in_bytes().div_ceil(ALIGN).max(1) * ALIGN;
                    const_layout.push((ValueId(*v), at, t.clone()));
                    Loc::Const(at)
                }
            };
            moved.entry(*offset).or_insert(loc);
        }
        for v in &mut values {
            if let (Loc::Const(o), false) = (v.loc, v.dtype.is_string()) {
                if let Some(loc) = moved.get(&o) {
                    v.loc = *loc;
                }
            }
        }
        let mut consts = backend.alloc(const_bytes)?;
        for (_, offset, t) in &const_layout {
            backend.upload(&mut consts, *offset, t)?;
        }
        let bound = |b: &Vec<SavedBound>| {
            b.iter()
                .map(|b| Bound {
                    value: ValueId(b.value),
                    uses: b.uses.clone(),
                })
                .collect()
        };
        let r = &saved.report;
        let report = CompileReport {
            kernels: r.kernels,
            host_steps: r.host_steps.clone(),
            aliases: r.aliases,
            folded: r.folded,
            refusals: r.refusals.clone(),
            unplanned_bytes: r.unplanned_bytes,
            partition: r.partition.clone(),
            intermediate_bytes: saved.run_bytes,
            constant_bytes: const_bytes + own_held_bytes,
            shared_constant_bytes,
            held_constant_bytes: held_bytes,
            inputs_in_place: saved.bound_inputs.len(),
            outputs_in_place: saved.bound_outputs.len(),
            compile_time: start.elapsed(),
            module: ModuleReport {
                kernels: saved
                    .steps
                    .iter()
                    .filter_map(|s| match s {
                        SavedStep::Kernel { kernel, .. } => Some(kernel + 1),
                        SavedStep::Host { .. } => None,
                    })
                    .max()
                    .unwrap_or(0),
                build_time: start.elapsed(),
                ..ModuleReport::default()
            },
        };
        let graph = CompiledGraph {
            backend,
            module,
            consts,
            shared,
            const_layout: const_layout
                .into_iter()
                .map(|(v, offset, _)| (v, offset))
                .collect(),
            const_bytes,
            const_tensors,
            values,
            steps,
            inputs: saved.inputs.iter().copied().map(ValueId).collect(),
            bound_inputs: bound(&saved.bound_inputs),
            bound_outputs: bound(&saved.bound_outputs),
            outputs: saved.outputs.iter().copied().map(ValueId).collect(),
            run_bytes: saved.run_bytes,
            host_slots: saved.host_slots,
            pool: Mutex::new(Vec::new()),
            report,
        };
        // Checks every kernel's arguments against the loaded module now (a file whose launch
        // list does not fit its kernels fails to load, not to run) and keeps the run state.
        let state = graph.new_state()?;
        graph
            .pool
            .lock()
            .map_err(|_| CompiledError::Saved("run-state pool poisoned".into()))?
            .push(state);
        Ok(graph)
    }
}

/// Checks that every index and byte range of `g` is consistent (values exist, buffers lie
/// inside their arenas, bound uses name kernel arguments), so a manifest that passed its
/// checksum but was written wrong cannot make a run read or write outside its memory.
fn check_structure(g: &SavedGraph) -> Result<(), String> {
    let n = g.values.len();
    let value = |v: usize| {
        (v < n)
            .then_some(())
            .ok_or(format!("value #{v} does not exist"))
    };
    for (i, v) in g.values.iter().enumerate() {
        let bytes = v
            .shape
            .as_deref()
            .and_then(crate::tensor::checked_numel)
            .and_then(|e| e.checked_mul(v.dtype.size_in_bytes()))
            .unwrap_or(0);
        let within = |offset: usize, limit: usize| {
            offset
                .checked_add(bytes)
                .is_some_and(|end| end <= limit)
                .then_some(())
                .ok_or(format!("value #{i} `{}` lies outside its memory", v.name))
        };
        match v.loc {
            Loc::Run(o) => within(o, g.run_bytes)?,
            Loc::Const(o) if v.dtype != DType::String => within(o, g.const_bytes)?,
            Loc::Shared(_) | Loc::Held(_) => {
                return Err(format!(
                    "value #{i} `{}` lies outside the saved graph's constant arena",
                    v.name
                ))
            }
            Loc::Host(h) if h >= g.host_slots => {
                return Err(format!(
                    "value #{i} names host slot {h} of {}",
                    g.host_slots
                ))
            }
            _ => {}
        }
    }
    for v in g.inputs.iter().chain(&g.outputs) {
        value(*v)?;
    }
    if g.input_shapes.len() != g.inputs.len() {
        return Err("input shapes do not match the inputs".into());
    }
    for s in &g.steps {
        match s {
            SavedStep::Kernel { args, .. } => args.iter().try_for_each(|(v, _)| value(*v))?,
            SavedStep::Host {
                inputs, outputs, ..
            } => inputs
                .iter()
                .chain(outputs)
                .flatten()
                .try_for_each(|v| value(*v))?,
        }
    }
    for v in g
        .const_layout
        .iter()
        .map(|(v, _)| v)
        .chain(g.const_tensors.iter().map(|(v, _)| v))
    {
        value(*v)?;
    }
    for b in g.bound_inputs.iter().chain(&g.bound_outputs) {
        value(b.value)?;
        let slot = &g.values[b.value];
        let bytes = slot
            .shape
            .as_deref()
            .and_then(crate::tensor::checked_numel)
            .map_or(0, |e| e * slot.dtype.size_in_bytes()) as u64;
        for &(step, arg, at) in &b.uses {
            let Some(SavedStep::Kernel { args, .. }) = g.steps.get(step) else {
                return Err(format!(
                    "bound value #{} names step {step}, not a kernel",
                    b.value
                ));
            };
            let Some((a, _)) = args.get(arg) else {
                return Err(format!(
                    "bound value #{} names argument {arg} of step {step}",
                    b.value
                ));
            };
            let arg_slot = &g.values[*a];
            let arg_bytes = arg_slot
                .shape
                .as_deref()
                .and_then(crate::tensor::checked_numel)
                .map_or(0, |e| e * arg_slot.dtype.size_in_bytes())
                as u64;
            if at.checked_add(arg_bytes).is_none_or(|end| end > bytes) {
                return Err(format!(
                    "bound value #{} is used outside its buffer",
                    b.value
                ));
            }
        }
    }
    Ok(())
}

impl<B: Backend> CompiledModel<B> {
    /// Saves every graph compiled so far (one per set of input shapes: a model with fixed
    /// input shapes has one once compiled) to `path`, with what loading needs to run them
    /// without compiling (see the module docs). Returns how many graphs were saved. Fails
    /// when nothing is compiled yet, when the backend cannot save its modules, or when a host
    /// step cannot be saved.
    pub fn save(&self, path: &Path) -> Result<usize, CompiledError> {
        self.clone_fixed()?.save(path)
    }

    /// The graphs compiled so far as a model that compiles nothing more ([`LoadedModel`]):
    /// it runs their input shapes only and holds no source graph, so once `self` is dropped
    /// the weights the graph passes replaced (packed into panels) are freed; the backend
    /// forgets what it remembered for later compilations
    /// ([`Backend::forget_compilation_memos`]). Meant for a model with fixed input shapes,
    /// compiled once. Fails when nothing is compiled yet.
    pub fn into_fixed(self) -> Result<LoadedModel<B>, CompiledError> {
        let fixed = self.clone_fixed()?;
        self.backend().forget_compilation_memos();
        Ok(fixed)
    }

    fn clone_fixed(&self) -> Result<LoadedModel<B>, CompiledError> {
        let graphs = self.compiled_graphs()?;
        if graphs.is_empty() {
            return Err(CompiledError::Saved(
                "nothing is compiled yet: compile the model for at least one set of input shapes \
                 before saving it"
                    .into(),
            ));
        }
        let graph = self.graph();
        let graph = &*graph;
        let decls = |ids: &[ValueId]| ids.iter().map(|v| SavedDecl::of(graph, *v)).collect();
        let inputs: Vec<SavedDecl> = decls(graph.inputs());
        Ok(LoadedModel {
            name: graph.name.clone(),
            input_dims: inputs.iter().map(SavedDecl::dims).collect(),
            inputs,
            outputs: decls(graph.outputs()),
            graph_shapes: graphs.iter().map(|g| g.input_shapes()).collect(),
            graphs,
        })
    }
}

/// A model that runs a fixed set of compiled graphs, one per set of input shapes, and
/// compiles nothing: a saved model loaded for running (see the module docs), or a compiled
/// model made fixed ([`CompiledModel::into_fixed`]). `Send + Sync`, like [`CompiledModel`].
pub struct LoadedModel<B: Backend> {
    name: String,
    inputs: Vec<SavedDecl>,
    /// The declared dimensions of each input (`None`: unknown rank), kept for the input check
    /// of every run.
    input_dims: Vec<Option<Vec<Dim>>>,
    outputs: Vec<SavedDecl>,
    graphs: Vec<Arc<CompiledGraph<B>>>,
    /// `graphs[i]`'s input shapes, by which a run picks its graph.
    graph_shapes: Vec<Vec<Vec<usize>>>,
}

impl<B: Backend> std::fmt::Debug for LoadedModel<B> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LoadedModel")
            .field("name", &self.name)
            .field("graphs", &self.graphs.len())
            .finish_non_exhaustive()
    }
}

impl<B: Backend> LoadedModel<B> {
    /// Reads the saved model at `path` and loads every graph in it for `backend`, which must
    /// be the backend it was saved from. Nothing is compiled. Fails with an error naming the
    /// problem for a file that is not a saved model, is truncated or corrupted, was saved for
    /// another backend, or needs what this machine lacks (for the CPU: a feature such as
    /// AVX-512).
    pub fn load(path: &Path, backend: B) -> Result<LoadedModel<B>, CompiledError> {
        let blobs = ArtifactReader::read(path)?;
        let saved: SavedModel = blobs.payload()?;
        if saved.backend != backend.name() {
            return Err(CompiledError::Saved(format!(
                "{}: the model was compiled for the {} backend, not {}",
                path.display(),
                saved.backend,
                backend.name()
            )));
        }
        if saved.graphs.is_empty() {
            return Err(blobs.manifest_error("no compiled graph").into());
        }
        let backend = Arc::new(backend);
        let (mut loaded, pool) = (HashMap::new(), ConstantPool::default());
        let graphs = saved
            .graphs
            .iter()
            .map(|g| {
                CompiledGraph::load(g, &blobs, Arc::clone(&backend), &mut loaded, &pool)
                    .map(Arc::new)
            })
            .collect::<Result<Vec<_>, _>>()?;
        Ok(LoadedModel {
            name: saved.name,
            input_dims: saved.inputs.iter().map(SavedDecl::dims).collect(),
            inputs: saved.inputs,
            outputs: saved.outputs,
            graph_shapes: graphs.iter().map(|g| g.input_shapes()).collect(),
            graphs,
        })
    }

    /// Saves the model's graphs to `path`, as [`CompiledModel::save`] does; returns how many
    /// were saved. Fails when the backend cannot save a module (a module loaded from a saved
    /// file is not saved again) or a host step cannot be saved.
    pub fn save(&self, path: &Path) -> Result<usize, CompiledError> {
        let mut blobs = ArtifactWriter::new();
        let graphs = self
            .graphs
            .iter()
            .map(|g| g.save(&mut blobs))
            .collect::<Result<Vec<_>, _>>()?;
        let backend = self.graphs.first().map_or("", |g| g.backend.name());
        let model = SavedModel {
            writer: format!("hidet-graph {}", env!("CARGO_PKG_VERSION")),
            backend: backend.to_string(),
            name: self.name.clone(),
            inputs: self.inputs.clone(),
            outputs: self.outputs.clone(),
            graphs,
        };
        blobs.write(path, &model)?;
        Ok(self.graphs.len())
    }

    /// The model's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The model's inputs as declared (symbolic dimensions included).
    pub fn inputs(&self) -> &[SavedDecl] {
        &self.inputs
    }

    /// The model's outputs as declared.
    pub fn outputs(&self) -> &[SavedDecl] {
        &self.outputs
    }

    /// The compiled graphs, one per saved set of input shapes.
    pub fn graphs(&self) -> &[Arc<CompiledGraph<B>>] {
        &self.graphs
    }

    /// The graph compiled for `shapes` (one per input, in input order), if one was saved;
    /// otherwise an [`ExecError::WrongShape`] naming the first input whose shape no saved
    /// graph has (or the first input) with the shapes that were saved for it.
    pub fn compiled(&self, shapes: &[Vec<usize>]) -> Result<Arc<CompiledGraph<B>>, CompiledError> {
        let saved = &self.graph_shapes;
        if let Some(i) = saved.iter().position(|s| s == shapes) {
            return Ok(Arc::clone(&self.graphs[i]));
        }
        let input = (0..self.inputs.len())
            .find(|&i| !saved.iter().any(|s| s.get(i) == shapes.get(i)))
            .unwrap_or(0);
        let mut expected: Vec<String> = saved
            .iter()
            .filter_map(|s| s.get(input).map(|shape| format!("{shape:?}")))
            .collect();
        expected.dedup();
        Err(ExecError::WrongShape {
            name: self
                .inputs
                .get(input)
                .map_or_else(String::new, |d| d.name.clone()),
            expected: format!(
                "{} (a saved model runs the shapes it was compiled for: compile it for these \
                 shapes and save it again)",
                expected.join(" or ")
            ),
            given: shapes.get(input).cloned().unwrap_or_default(),
        }
        .into())
    }

    /// Checks `inputs` against the declared inputs (names, kinds, dtypes, fixed and
    /// symbolic dimensions) and returns the graph compiled for their shapes.
    pub fn compiled_for(
        &self,
        inputs: &[(String, Datum)],
    ) -> Result<Arc<CompiledGraph<B>>, CompiledError> {
        let declared: Vec<InputDecl<'_>> = self
            .inputs
            .iter()
            .zip(&self.input_dims)
            .map(|(d, dims)| InputDecl {
                name: &d.name,
                kind: d.kind,
                dtype: d.dtype,
                shape: dims
                    .as_deref()
                    .map_or(DeclaredShape::Any, DeclaredShape::Dims),
            })
            .collect();
        match_inputs(&declared, inputs)?;
        let shapes: Vec<Vec<usize>> = self
            .inputs
            .iter()
            .map(|d| {
                inputs
                    .iter()
                    .find(|(n, _)| *n == d.name)
                    .and_then(|(_, v)| v.as_tensor())
                    .map(|t| t.shape().to_vec())
                    .unwrap_or_default()
            })
            .collect();
        self.compiled(&shapes)
    }

    /// Runs inputs of any kind on the graph compiled for their shapes.
    pub fn run_data(
        &self,
        inputs: &[(String, Datum)],
    ) -> Result<Vec<(String, Datum)>, CompiledError> {
        self.compiled_for(inputs)?.run_data(inputs)
    }

    /// Runs tensor inputs; every output must be a tensor.
    pub fn run(&self, inputs: &[(String, Tensor)]) -> Result<Vec<(String, Tensor)>, CompiledError> {
        Ok(crate::executor::into_tensors(
            self.run_data(&crate::executor::as_data(inputs))?,
        )?)
    }
}
