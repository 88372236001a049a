//! Operator attributes, independent of any file format.

use std::collections::BTreeMap;
use std::sync::Arc;

use crate::graph::{Graph, GraphBuilder};
use crate::operator::OpError;
use crate::tensor::Tensor;

/// One attribute value of a node (the ONNX `AttributeProto` kinds hidet understands).
#[derive(Debug, Clone)]
pub enum Attribute {
    Float(f32),
    Int(i64),
    /// ONNX strings are bytes; they are decoded as UTF-8 (lossily).
    String(String),
    Tensor(Tensor),
    Graph(Arc<Graph>),
    Floats(Vec<f32>),
    Ints(Vec<i64>),
    Strings(Vec<String>),
    Tensors(Vec<Tensor>),
    Graphs(Vec<Arc<Graph>>),
    /// A value type (ONNX `TYPE_PROTO` attributes, e.g. Optional's `type`): the tensor type
    /// and, for sequences and optionals, the kind around it.
    Type(crate::shape::TensorType, crate::value::ValueKind),
    /// A subgraph as declared (ONNX `GRAPH` attributes: If branches, Loop/Scan bodies). It is
    /// built per node by the owning operator, because its input types and the outer-scope
    /// values it reads depend on that node (see [`crate::graph::SubgraphContext`]).
    GraphDef(Arc<GraphBuilder>),
}

impl Attribute {
    fn kind(&self) -> &'static str {
        match self {
            Attribute::Float(_) => "float",
            Attribute::Int(_) => "int",
            Attribute::String(_) => "string",
            Attribute::Tensor(_) => "tensor",
            Attribute::Graph(_) => "graph",
            Attribute::Floats(_) => "floats",
            Attribute::Ints(_) => "ints",
            Attribute::Strings(_) => "strings",
            Attribute::Type(..) => "type",
            Attribute::Tensors(_) => "tensors",
            Attribute::Graphs(_) => "graphs",
            Attribute::GraphDef(_) => "graph",
        }
    }
}

/// The attributes of a node, by name. Typed getters fail with [`OpError::Attribute`] when an
/// attribute is present with the wrong kind, so a malformed model is reported, not ignored.
#[derive(Debug, Clone, Default)]
pub struct Attributes {
    map: BTreeMap<String, Attribute>,
}

macro_rules! getter {
    ($name:ident, $variant:ident, $t:ty, $kind:literal) => {
        /// The attribute as this kind, `None` if absent, an error if of another kind.
        pub fn $name(&self, name: &str) -> Result<Option<&$t>, OpError> {
            match self.map.get(name) {
                None => Ok(None),
                Some(Attribute::$variant(v)) => Ok(Some(v)),
                Some(other) => Err(OpError::attr(
                    name,
                    format!("expected {}, found {}", $kind, other.kind()),
                )),
            }
        }
    };
}

impl Attributes {
    /// An empty attribute set.
    pub fn new() -> Attributes {
        Attributes::default()
    }

    /// Sets (or replaces) an attribute.
    pub fn insert(&mut self, name: impl Into<String>, value: Attribute) {
        self.map.insert(name.into(), value);
    }

    /// Removes an attribute; returns it if it was present.
    pub fn remove(&mut self, name: &str) -> Option<Attribute> {
        self.map.remove(name)
    }

    /// The raw attribute, if present.
    pub fn get(&self, name: &str) -> Option<&Attribute> {
        self.map.get(name)
    }

    /// Names and values, sorted by name.
    pub fn iter(&self) -> impl Iterator<Item = (&str, &Attribute)> {
        self.map.iter().map(|(k, v)| (k.as_str(), v))
    }

    getter!(int, Int, i64, "int");
    getter!(float, Float, f32, "float");
    getter!(string, String, String, "string");
    getter!(tensor, Tensor, Tensor, "tensor");
    getter!(graph, Graph, Arc<Graph>, "graph");
    getter!(ints, Ints, Vec<i64>, "ints");
    getter!(floats, Floats, Vec<f32>, "floats");
    getter!(strings, Strings, Vec<String>, "strings");
    getter!(graph_def, GraphDef, Arc<GraphBuilder>, "graph");

    /// The value type attribute `name`, `None` if absent, an error if of another kind.
    pub fn value_type(
        &self,
        name: &str,
    ) -> Result<Option<(&crate::shape::TensorType, crate::value::ValueKind)>, OpError> {
        match self.map.get(name) {
            None => Ok(None),
            Some(Attribute::Type(t, k)) => Ok(Some((t, *k))),
            Some(other) => Err(OpError::attr(
                name,
                format!("expected type, found {}", other.kind()),
            )),
        }
    }

    /// Required subgraph definition.
    pub fn req_graph_def(&self, name: &str) -> Result<&Arc<GraphBuilder>, OpError> {
        self.graph_def(name)?
            .ok_or_else(|| OpError::attr(name, "required attribute is missing"))
    }

    /// Integer attribute with a default.
    pub fn int_or(&self, name: &str, default: i64) -> Result<i64, OpError> {
        Ok(self.int(name)?.copied().unwrap_or(default))
    }

    /// Float attribute with a default. An `Int` value is accepted and converted.
    pub fn float_or(&self, name: &str, default: f32) -> Result<f32, OpError> {
        match self.map.get(name) {
            Some(Attribute::Int(i)) => Ok(*i as f32),
            _ => Ok(self.float(name)?.copied().unwrap_or(default)),
        }
    }

    /// String attribute with a default.
    pub fn string_or(&self, name: &str, default: &str) -> Result<String, OpError> {
        Ok(self
            .string(name)?
            .cloned()
            .unwrap_or_else(|| default.to_string()))
    }

    /// Required integer attribute.
    pub fn req_int(&self, name: &str) -> Result<i64, OpError> {
        self.int(name)?
            .copied()
            .ok_or_else(|| OpError::attr(name, "required attribute is missing"))
    }
}
