//! Expansions: a node that the registry does not construct directly (an operator of an old
//! opset, with attributes whose meaning later opsets changed) is rewritten, while the graph is
//! built, into nodes of registered operators — usually the same operator at a newer opset with
//! its attributes converted, and shape operators adapting its inputs.
//!
//! An expansion ([`crate::Registry::register_expansion`]) sees the node, its attributes and
//! the types (and import-time values) of its inputs, and emits nodes in order: each emitted
//! node reads the node's inputs or values emitted before it, and together they define every
//! output the node declares, under the node's output names. The builder then builds the
//! emitted nodes as if the model had contained them (an emitted node may itself be expanded).
//! The built graph never contains the original node.

use std::collections::HashSet;

use crate::attribute::{Attribute, Attributes};
use crate::graph::NodeSpec;
use crate::operator::{InferInput, OpError};
use crate::tensor::Tensor;

/// The opset at which expansions emit `Constant` nodes (the `value` attribute form).
const CONSTANT_OPSET: i64 = 13;

/// One node being expanded, and the nodes emitted for it so far.
pub struct Expansion<'a> {
    spec: &'a NodeSpec,
    types: &'a [Option<InferInput<'a>>],
    /// Every value name of the graph (declared, emitted or read): fresh names avoid them.
    taken: &'a mut HashSet<String>,
    emitted: Vec<NodeSpec>,
}

impl<'a> Expansion<'a> {
    /// An expansion of `spec`, whose declared inputs have the types `types` (`None` for an
    /// absent input); fresh names avoid `taken` and are added to it.
    pub(crate) fn new(
        spec: &'a NodeSpec,
        types: &'a [Option<InferInput<'a>>],
        taken: &'a mut HashSet<String>,
    ) -> Expansion<'a> {
        Expansion {
            spec,
            types,
            taken,
            emitted: Vec::new(),
        }
    }

    /// The node's name.
    pub fn node(&self) -> &str {
        &self.spec.name
    }

    /// The node's operator type.
    pub fn op_type(&self) -> &str {
        &self.spec.op_type
    }

    /// The model's opset for the node's domain.
    pub fn opset(&self) -> i64 {
        self.spec.opset
    }

    /// The node's attributes.
    pub fn attrs(&self) -> &Attributes {
        &self.spec.attrs
    }

    /// The node's input names (`""` for an absent optional input).
    pub fn input_names(&self) -> &[String] {
        &self.spec.inputs
    }

    /// The node's output names (`""` for an unused optional output).
    pub fn output_names(&self) -> &[String] {
        &self.spec.outputs
    }

    /// The name of input `i`, or [`OpError::MissingInput`] if it is absent.
    pub fn input_name(&self, i: usize) -> Result<&str, OpError> {
        match self.spec.inputs.get(i) {
            Some(n) if !n.is_empty() => Ok(n),
            _ => Err(OpError::MissingInput(i)),
        }
    }

    /// The type (and import-time value) of input `i`; `None` if it is absent.
    pub fn input(&self, i: usize) -> Option<InferInput<'a>> {
        self.types.get(i).copied().flatten()
    }

    /// [`Expansion::input`] of a required input.
    pub fn req_input(&self, i: usize) -> Result<InferInput<'a>, OpError> {
        self.input(i).ok_or(OpError::MissingInput(i))
    }

    /// The rank of input `i`; [`OpError::Unsupported`] when inference does not know it (the
    /// conversion needs it).
    pub fn rank(&self, i: usize) -> Result<usize, OpError> {
        self.req_input(i)?.ty.rank().ok_or_else(|| {
            OpError::Unsupported(format!(
                "{}-{}: the rank of input #{i} must be known to convert the node",
                self.spec.op_type, self.spec.opset
            ))
        })
    }

    /// The node's attributes without `names` (attributes that the emitted operator does not
    /// know, once their meaning has been converted).
    pub fn attrs_without(&self, names: &[&str]) -> Attributes {
        let mut a = Attributes::new();
        for (k, v) in self.spec.attrs.iter() {
            if !names.contains(&k) {
                a.insert(k, v.clone());
            }
        }
        a
    }

    /// A value name used nowhere in the graph, derived from the node's name and `hint`.
    pub fn fresh(&mut self, hint: &str) -> String {
        let base = format!("{}/{hint}", self.spec.name);
        let mut name = base.clone();
        let mut k = 1;
        while self.taken.contains(&name) {
            name = format!("{base}#{k}");
            k += 1;
        }
        self.taken.insert(name.clone());
        name
    }

    /// Emits a node of `op_type` (in the node's domain) at opset `opset`, reading `inputs`
    /// (`""` for an absent input) and defining `outputs`. A node defining one of the node's
    /// own outputs takes the node's name; the others are named after it.
    pub fn emit(
        &mut self,
        op_type: &str,
        opset: i64,
        attrs: Attributes,
        inputs: &[&str],
        outputs: &[&str],
    ) {
        let domain = self.spec.domain.clone();
        self.emit_in(&domain, op_type, opset, attrs, inputs, outputs);
    }

    /// [`Expansion::emit`] of an operator of `domain` (a contrib operator expanded into
    /// default-domain ones).
    pub fn emit_in(
        &mut self,
        domain: &str,
        op_type: &str,
        opset: i64,
        attrs: Attributes,
        inputs: &[&str],
        outputs: &[&str],
    ) {
        let defines_own = outputs
            .iter()
            .any(|o| !o.is_empty() && self.spec.outputs.iter().any(|n| n == o));
        let name = if defines_own {
            self.spec.name.clone()
        } else {
            format!("{}/{op_type}#{}", self.spec.name, self.emitted.len())
        };
        self.emitted.push(NodeSpec {
            name,
            domain: domain.to_string(),
            op_type: op_type.to_string(),
            opset,
            attrs,
            inputs: inputs.iter().map(|s| s.to_string()).collect(),
            outputs: outputs.iter().map(|s| s.to_string()).collect(),
        });
    }

    /// Emits a node with one output, a fresh value named after `op_type`; returns its name.
    pub fn emit_value(
        &mut self,
        op_type: &str,
        opset: i64,
        attrs: Attributes,
        inputs: &[&str],
    ) -> String {
        let out = self.fresh(op_type);
        self.emit(op_type, opset, attrs, inputs, &[&out]);
        out
    }

    /// Emits a (default-domain) `Constant` node holding `value`; returns the name of its
    /// output.
    pub fn constant(&mut self, value: Tensor) -> String {
        let mut attrs = Attributes::new();
        attrs.insert("value", Attribute::Tensor(value));
        let out = self.fresh("Constant");
        self.emit_in("", "Constant", CONSTANT_OPSET, attrs, &[], &[&out]);
        out
    }

    /// The emitted nodes, in order.
    pub(crate) fn finish(self) -> Vec<NodeSpec> {
        self.emitted
    }
}
