//! The operator registry: (domain, op_type, opset range) → constructor, or → expansion (a
//! node of an old opset rewritten into nodes of registered operators when the graph is built,
//! see [`Expansion`]).

use std::collections::BTreeMap;
use std::ops::RangeInclusive;
use std::sync::OnceLock;

use crate::expansion::Expansion;
use crate::operator::{OpContext, OpError, Operator};

/// Newest default-domain opset whose semantics hidet claims to know (ONNX 1.23: opset 28).
/// Opsets 23–28 changed the operators hidet runs only by new element types and attributes
/// that are handled where they matter (`DequantizeLinear`'s `output_dtype`, `SpaceToDepth`'s
/// `mode`, `Cast`'s `round_mode` for float8) and added `Attention`, `RMSNormalization`,
/// `RotaryEmbedding`, `Swish`, `SwiGLU` and `TensorScatter` (expansions) besides operators
/// hidet does not run.
pub const LATEST_OPSET: i64 = 28;

/// Constructor of an operator from a node.
pub type OpBuilder =
    Box<dyn Fn(&OpContext<'_>) -> Result<Box<dyn Operator>, OpError> + Send + Sync>;

/// One registration: which model opsets of which op it handles, and how to build it.
pub struct OpSchema {
    /// Normalized domain (`""` for the default ONNX domain).
    pub domain: String,
    pub op_type: String,
    /// Model opset versions (of `domain`) this constructor handles.
    pub opsets: RangeInclusive<i64>,
    build: OpBuilder,
}

impl OpSchema {
    /// Builds the operator for a node.
    pub fn build(&self, ctx: &OpContext<'_>) -> Result<Box<dyn Operator>, OpError> {
        (self.build)(ctx)
    }
}

/// Rewrites one node into nodes of registered operators (see [`Expansion`]).
pub type ExpandFn = Box<dyn Fn(&mut Expansion<'_>) -> Result<(), OpError> + Send + Sync>;

/// One expansion: which model opsets of which op it rewrites, and how.
pub struct ExpansionSchema {
    /// Normalized domain (`""` for the default ONNX domain).
    pub domain: String,
    pub op_type: String,
    /// Model opset versions (of `domain`) this expansion handles.
    pub opsets: RangeInclusive<i64>,
    expand: ExpandFn,
}

impl ExpansionSchema {
    /// Emits the replacement nodes into `e`.
    pub fn expand(&self, e: &mut Expansion<'_>) -> Result<(), OpError> {
        (self.expand)(e)
    }
}

/// Maps (domain, op_type, opset) to operator constructors or expansions.
#[derive(Default)]
pub struct Registry {
    /// By domain, then op type (looked up without building a key: every node of every graph
    /// built is looked up).
    ops: BTreeMap<String, BTreeMap<String, Vec<OpSchema>>>,
    expansions: BTreeMap<String, BTreeMap<String, Vec<ExpansionSchema>>>,
}

/// `"ai.onnx"` and `""` name the same domain; hidet stores `""`.
pub fn normalize_domain(domain: &str) -> &str {
    if domain == "ai.onnx" {
        ""
    } else {
        domain
    }
}

impl Registry {
    /// An empty registry.
    pub fn new() -> Registry {
        Registry::default()
    }

    /// The registry with every built-in operator family (see `ops/mod.rs`). Built once.
    pub fn global() -> &'static Registry {
        static GLOBAL: OnceLock<Registry> = OnceLock::new();
        GLOBAL.get_or_init(|| {
            let mut r = Registry::new();
            crate::ops::register_all(&mut r);
            r
        })
    }

    /// Registers `build` for `op_type` in `domain` for the model opsets in `opsets`.
    ///
    /// # Panics
    /// If the range overlaps an existing registration of the same op: that is a bug in an op
    /// family, caught by this crate's registry test (every built-in family registers at startup).
    pub fn register<F>(
        &mut self,
        domain: &str,
        op_type: &str,
        opsets: RangeInclusive<i64>,
        build: F,
    ) where
        F: Fn(&OpContext<'_>) -> Result<Box<dyn Operator>, OpError> + Send + Sync + 'static,
    {
        let key = (normalize_domain(domain).to_string(), op_type.to_string());
        self.assert_free(&key, &opsets);
        let list = self
            .ops
            .entry(key.0.clone())
            .or_default()
            .entry(key.1.clone())
            .or_default();
        list.push(OpSchema {
            domain: key.0,
            op_type: key.1,
            opsets,
            build: Box::new(build),
        });
        list.sort_by_key(|s| *s.opsets.start());
    }

    /// Registers `expand` for `op_type` in `domain` for the model opsets in `opsets`: a node of
    /// those opsets is replaced, when the graph is built, by the nodes `expand` emits.
    ///
    /// # Panics
    /// If the range overlaps an existing constructor or expansion of the same op (a bug in an
    /// op family, caught like [`Registry::register`]'s).
    pub fn register_expansion<F>(
        &mut self,
        domain: &str,
        op_type: &str,
        opsets: RangeInclusive<i64>,
        expand: F,
    ) where
        F: Fn(&mut Expansion<'_>) -> Result<(), OpError> + Send + Sync + 'static,
    {
        let key = (normalize_domain(domain).to_string(), op_type.to_string());
        self.assert_free(&key, &opsets);
        let list = self
            .expansions
            .entry(key.0.clone())
            .or_default()
            .entry(key.1.clone())
            .or_default();
        list.push(ExpansionSchema {
            domain: key.0,
            op_type: key.1,
            opsets,
            expand: Box::new(expand),
        });
        list.sort_by_key(|s| *s.opsets.start());
    }

    /// Panics if `opsets` overlaps a constructor or an expansion registered for `key`.
    fn assert_free(&self, key: &(String, String), opsets: &RangeInclusive<i64>) {
        let (domain, op_type) = (key.0.as_str(), key.1.as_str());
        let taken = self
            .lookup_all(domain, op_type)
            .iter()
            .map(|s| &s.opsets)
            .chain(
                self.lookup_all_expansions(domain, op_type)
                    .iter()
                    .map(|s| &s.opsets),
            );
        for r in taken {
            let overlap = r.start() <= opsets.end() && opsets.start() <= r.end();
            assert!(
                !overlap,
                "operator {key:?} registered twice for overlapping opsets {opsets:?} / {r:?}"
            );
        }
    }

    /// The registration handling `op_type` at model opset `opset`, if any.
    pub fn lookup(&self, domain: &str, op_type: &str, opset: i64) -> Option<&OpSchema> {
        self.lookup_all(domain, op_type)
            .iter()
            .find(|s| s.opsets.contains(&opset))
    }

    /// Every registration of `op_type` in `domain`, by opset.
    fn lookup_all(&self, domain: &str, op_type: &str) -> &[OpSchema] {
        self.ops
            .get(normalize_domain(domain))
            .and_then(|ops| ops.get(op_type))
            .map_or(&[], Vec::as_slice)
    }

    /// Every expansion of `op_type` in `domain`, by opset.
    fn lookup_all_expansions(&self, domain: &str, op_type: &str) -> &[ExpansionSchema] {
        self.expansions
            .get(normalize_domain(domain))
            .and_then(|ops| ops.get(op_type))
            .map_or(&[], Vec::as_slice)
    }

    /// The expansion handling `op_type` at model opset `opset`, if any.
    pub fn lookup_expansion(
        &self,
        domain: &str,
        op_type: &str,
        opset: i64,
    ) -> Option<&ExpansionSchema> {
        self.lookup_all_expansions(domain, op_type)
            .iter()
            .find(|s| s.opsets.contains(&opset))
    }

    /// Whether a node of `op_type` at model opset `opset` can be built: a constructor or an
    /// expansion handles it.
    pub fn supports(&self, domain: &str, op_type: &str, opset: i64) -> bool {
        self.lookup(domain, op_type, opset).is_some()
            || self.lookup_expansion(domain, op_type, opset).is_some()
    }

    /// Every registration, sorted by domain, op type and opset.
    pub fn schemas(&self) -> impl Iterator<Item = &OpSchema> {
        self.ops.values().flat_map(BTreeMap::values).flatten()
    }

    /// Every expansion, sorted by domain, op type and opset.
    pub fn expansions(&self) -> impl Iterator<Item = &ExpansionSchema> {
        self.expansions
            .values()
            .flat_map(BTreeMap::values)
            .flatten()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn builtin_registry_has_no_overlaps_and_finds_add() {
        // Registering every family would panic on overlap.
        let r = Registry::global();
        assert!(r.lookup("", "Add", 14).is_some());
        assert!(r.lookup("ai.onnx", "Add", 7).is_some());
        assert!(r.lookup("", "NoSuchOp", 14).is_none());
        assert!(r.lookup("", "Add", 6).is_none() && r.lookup_expansion("", "Add", 6).is_some());
        assert!(r.supports("", "Add", 1) && r.supports("", "Add", 7));
        assert!(!r.supports("", "NoSuchOp", 1));
    }
}
