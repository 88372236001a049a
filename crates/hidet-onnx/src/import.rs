//! ModelProto → hidet [`Graph`].

use std::collections::HashMap;
use std::path::Path;
use std::sync::Arc;

use hidet_graph::registry::normalize_domain;
use hidet_graph::{
    Attribute, Attributes, DType, Dim, GraphBuilder, NodeSpec, Registry, TensorType, UnsupportedOp,
    ValueKind,
};
use prost::Message;

use crate::error::OnnxError;
use crate::proto::{
    attribute_proto::AttributeType, tensor_shape_proto::dimension, type_proto, GraphProto,
    ModelProto, NodeProto, TypeProto, ValueInfoProto,
};
use crate::tensor::tensor_from_proto;
use crate::Graph;

/// An imported model.
#[derive(Debug, Clone)]
pub struct OnnxModel {
    pub graph: Graph,
    pub ir_version: i64,
    /// (domain, version) of every imported opset; `""` is the default ONNX domain.
    pub opsets: Vec<(String, i64)>,
    pub producer: String,
}

/// Decodes the bytes of an `.onnx` file. Malformed or truncated bytes give
/// [`OnnxError::Decode`].
pub fn decode_model(bytes: &[u8]) -> Result<ModelProto, OnnxError> {
    Ok(ModelProto::decode(bytes)?)
}

/// Reads and imports an `.onnx` file with the built-in operator registry. External data is
/// resolved in the file's folder.
pub fn load_model(path: &Path) -> Result<OnnxModel, OnnxError> {
    let bytes = std::fs::read(path).map_err(|e| OnnxError::Io {
        path: path.to_path_buf(),
        source: e,
    })?;
    let proto = decode_model(&bytes)?;
    // The decoded protobuf holds its own copy of the weights: the file's bytes go before the
    // tensors are made, so the three are never alive together.
    drop(bytes);
    let base = path.parent().unwrap_or(Path::new("."));
    import_model(&proto, Some(base), Registry::global())
}

/// Converts a decoded model. `base_dir` is the folder external data is confined to.
///
/// Unsupported operators are reported all at once ([`OnnxError::UnsupportedOps`]) before any
/// other per-node conversion.
pub fn import_model(
    m: &ModelProto,
    base_dir: Option<&Path>,
    registry: &Registry,
) -> Result<OnnxModel, OnnxError> {
    let g = m
        .graph
        .as_ref()
        .ok_or_else(|| OnnxError::Invalid("model has no graph".into()))?;
    let mut opsets: HashMap<String, i64> = HashMap::new();
    for o in &m.opset_import {
        opsets.insert(normalize_domain(o.domain()).to_string(), o.version());
    }
    if m.ir_version() < 3 && !opsets.contains_key("") {
        opsets.insert(String::new(), 1);
    }
    let cx = Importer {
        opsets: &opsets,
        base_dir,
        registry,
    };

    // All unsupported operators first (subgraphs included), in one error.
    let mut missing: Vec<UnsupportedOp> = Vec::new();
    cx.collect_missing(g, &mut missing)?;
    if !missing.is_empty() {
        missing.sort_by(|a, b| (&a.domain, &a.op_type).cmp(&(&b.domain, &b.op_type)));
        return Err(OnnxError::UnsupportedOps(missing));
    }

    let b = cx.graph_builder(g, false)?;
    let graph = b.build(registry)?;
    let mut opsets: Vec<(String, i64)> = opsets.into_iter().collect();
    opsets.sort();
    Ok(OnnxModel {
        graph,
        ir_version: m.ir_version(),
        opsets,
        producer: m.producer_name().to_string(),
    })
}

/// What converting one graph (and its subgraphs) needs.
struct Importer<'a> {
    opsets: &'a HashMap<String, i64>,
    base_dir: Option<&'a Path>,
    registry: &'a Registry,
}

impl Importer<'_> {
    /// The model's opset for the node's domain.
    fn opset_of(&self, n: &NodeProto) -> Result<i64, OnnxError> {
        let d = normalize_domain(n.domain());
        self.opsets.get(d).copied().ok_or_else(|| {
            OnnxError::Invalid(format!(
                "node `{}` uses domain `{d}` which the model does not import",
                n.name()
            ))
        })
    }

    /// Adds every node of `g` and of its subgraphs without a registration to `missing`.
    fn collect_missing(
        &self,
        g: &GraphProto,
        missing: &mut Vec<UnsupportedOp>,
    ) -> Result<(), OnnxError> {
        for n in &g.node {
            let opset = self.opset_of(n)?;
            let domain = normalize_domain(n.domain());
            if !self.registry.supports(domain, n.op_type(), opset) {
                match missing
                    .iter_mut()
                    .find(|u| u.domain == domain && u.op_type == n.op_type() && u.opset == opset)
                {
                    Some(u) => u.count += 1,
                    None => missing.push(UnsupportedOp {
                        domain: domain.into(),
                        op_type: n.op_type().into(),
                        opset,
                        count: 1,
                    }),
                }
            }
            for a in &n.attribute {
                if let Some(sub) = &a.g {
                    self.collect_missing(sub, missing)?;
                }
                for sub in &a.graphs {
                    self.collect_missing(sub, missing)?;
                }
            }
        }
        Ok(())
    }

    /// Converts a graph; in a subgraph (`subgraph`), inputs may be untyped (the owning
    /// operator types them) and names may refer to the enclosing graphs.
    fn graph_builder(&self, g: &GraphProto, subgraph: bool) -> Result<GraphBuilder, OnnxError> {
        let mut b = GraphBuilder::new(g.name());
        for init in &g.initializer {
            b.initializer(init.name(), tensor_from_proto(init, self.base_dir)?);
        }
        if !g.sparse_initializer.is_empty() {
            return Err(OnnxError::Unsupported("sparse initializers".into()));
        }
        for vi in &g.input {
            match value_type(vi, subgraph)? {
                Some((ty, kind)) => b.input_of_kind(vi.name(), ty, kind),
                None => b.input_untyped(vi.name()),
            };
        }
        for (i, n) in g.node.iter().enumerate() {
            let name = if n.name().is_empty() {
                format!("{}_{i}", n.op_type())
            } else {
                n.name().to_string()
            };
            b.node(NodeSpec {
                attrs: self.attributes(n, &name)?,
                name,
                domain: normalize_domain(n.domain()).to_string(),
                op_type: n.op_type().to_string(),
                opset: self.opset_of(n)?,
                inputs: n.input.clone(),
                outputs: n.output.clone(),
            });
        }
        for o in &g.output {
            b.output(o.name());
        }
        Ok(b)
    }
}

/// The static type and kind of a graph input (for a sequence or optional, the type of the
/// tensors inside); `None` for a subgraph input without a type.
fn value_type(
    vi: &ValueInfoProto,
    subgraph: bool,
) -> Result<Option<(TensorType, ValueKind)>, OnnxError> {
    type_of(
        vi.r#type.as_ref(),
        &format!("input `{}`", vi.name()),
        subgraph,
    )
}

/// The tensor type and kind a `TypeProto` describes (`what` names it in errors); `None` when
/// it is absent or its dtype undefined and `untyped_ok`.
fn type_of(
    tp: Option<&TypeProto>,
    what: &str,
    untyped_ok: bool,
) -> Result<Option<(TensorType, ValueKind)>, OnnxError> {
    let unsupported = |kind: &str| OnnxError::Unsupported(format!("{what}: {kind} types"));
    let subgraph = untyped_ok;
    let (t, kind) = match tp.and_then(|t| t.value.as_ref()) {
        Some(type_proto::Value::TensorType(t)) => (t, ValueKind::Tensor),
        Some(type_proto::Value::SequenceType(s)) => match sequence_elem(s) {
            Some(t) => (t, ValueKind::Sequence),
            None => return Err(unsupported("sequences of non-tensor")),
        },
        Some(type_proto::Value::OptionalType(o)) => {
            match o.elem_type.as_ref().and_then(|e| e.value.as_ref()) {
                Some(type_proto::Value::TensorType(t)) => (t, ValueKind::OptionalTensor),
                Some(type_proto::Value::SequenceType(s)) => match sequence_elem(s) {
                    Some(t) => (t, ValueKind::OptionalSequence),
                    None => return Err(unsupported("optional sequences of non-tensor")),
                },
                _ => return Err(unsupported("optional non-tensor")),
            }
        }
        Some(_) => return Err(unsupported("map and sparse tensor")),
        None if subgraph => return Ok(None),
        None => return Err(OnnxError::Invalid(format!("{what} has no type"))),
    };
    if subgraph && t.elem_type() == 0 {
        return Ok(None);
    }
    let code = t.elem_type();
    let dtype = DType::from_onnx_code(code)
        .ok_or_else(|| OnnxError::Unsupported(format!("{what}: ONNX data type {code}")))?;
    let shape = t.shape.as_ref().map(|s| {
        s.dim
            .iter()
            .map(|d| match &d.value {
                Some(dimension::Value::DimValue(v)) if *v >= 0 => Dim::Fixed(*v as usize),
                Some(dimension::Value::DimParam(p)) if !p.is_empty() => {
                    Dim::Symbol(Arc::from(p.as_str()))
                }
                _ => Dim::Unknown,
            })
            .collect()
    });
    // The shape of a sequence's elements may differ from one element to the next.
    let shape = if kind == ValueKind::Tensor || kind == ValueKind::OptionalTensor {
        shape
    } else {
        None
    };
    Ok(Some((TensorType { dtype, shape }, kind)))
}

/// The tensor type of a sequence's elements (`None` unless they are tensors).
fn sequence_elem(s: &type_proto::Sequence) -> Option<&type_proto::Tensor> {
    match s.elem_type.as_ref()?.value.as_ref()? {
        type_proto::Value::TensorType(t) => Some(t),
        _ => None,
    }
}

fn string(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

impl Importer<'_> {
    /// Converts a node's attributes; a `GRAPH` attribute becomes an unbuilt subgraph definition
    /// ([`Attribute::GraphDef`]), built later by the owning operator for its node.
    fn attributes(&self, n: &NodeProto, node: &str) -> Result<Attributes, OnnxError> {
        let base_dir = self.base_dir;
        let mut attrs = Attributes::new();
        for a in &n.attribute {
            let name = a.name();
            if !a.ref_attr_name().is_empty() {
                return Err(OnnxError::Unsupported(format!(
                    "node `{node}`: attribute references (`{name}`)"
                )));
            }
            let value = match a.r#type() {
                AttributeType::Float => Attribute::Float(a.f()),
                AttributeType::Int => Attribute::Int(a.i()),
                AttributeType::String => Attribute::String(string(a.s())),
                AttributeType::Tensor => match &a.t {
                    Some(t) => Attribute::Tensor(tensor_from_proto(t, base_dir)?),
                    None => {
                        return Err(OnnxError::Invalid(format!(
                            "node `{node}`: tensor attribute `{name}` is empty"
                        )))
                    }
                },
                AttributeType::Floats => Attribute::Floats(a.floats.clone()),
                AttributeType::Ints => Attribute::Ints(a.ints.clone()),
                AttributeType::Strings => {
                    Attribute::Strings(a.strings.iter().map(|s| string(s)).collect())
                }
                AttributeType::Tensors => Attribute::Tensors(
                    a.tensors
                        .iter()
                        .map(|t| tensor_from_proto(t, base_dir))
                        .collect::<Result<_, _>>()?,
                ),
                AttributeType::Graph => match &a.g {
                    Some(g) => Attribute::GraphDef(Arc::new(self.graph_builder(g, true)?)),
                    None => {
                        return Err(OnnxError::Invalid(format!(
                            "node `{node}`: graph attribute `{name}` is empty"
                        )))
                    }
                },
                AttributeType::TypeProto => {
                    match type_of(
                        a.tp.as_ref(),
                        &format!("node `{node}`: attribute `{name}`"),
                        false,
                    )? {
                        Some((t, k)) => Attribute::Type(t, k),
                        None => {
                            return Err(OnnxError::Invalid(format!(
                                "node `{node}`: type attribute `{name}` is empty"
                            )))
                        }
                    }
                }
                AttributeType::Graphs => {
                    return Err(OnnxError::Unsupported(format!(
                        "node `{node}`: attribute `{name}` with a list of graphs"
                    )))
                }
                AttributeType::Undefined => {
                    return Err(OnnxError::Invalid(format!(
                        "node `{node}`: attribute `{name}` has no type"
                    )))
                }
                other => {
                    return Err(OnnxError::Unsupported(format!(
                        "node `{node}`: attribute `{name}` of kind {other:?}"
                    )))
                }
            };
            attrs.insert(name, value);
        }
        Ok(attrs)
    }
}
