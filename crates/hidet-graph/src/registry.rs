//! The operator registry: (domain, op_type, opset range) → constructor.

use std::collections::BTreeMap;
use std::ops::RangeInclusive;
use std::sync::OnceLock;

use crate::operator::{OpContext, OpError, Operator};

/// Newest default-domain opset whose semantics hidet claims to know (onnx 1.17: opset 22).
pub const LATEST_OPSET: i64 = 22;

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

/// Maps (domain, op_type, opset) to operator constructors.
#[derive(Default)]
pub struct Registry {
    ops: BTreeMap<(String, String), Vec<OpSchema>>,
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
        let list = self.ops.entry(key.clone()).or_default();
        for s in list.iter() {
            let overlap = s.opsets.start() <= opsets.end() && opsets.start() <= s.opsets.end();
            assert!(
                !overlap,
                "operator {key:?} registered twice for overlapping opsets {opsets:?} / {:?}",
                s.opsets
            );
        }
        list.push(OpSchema {
            domain: key.0,
            op_type: key.1,
            opsets,
            build: Box::new(build),
        });
        list.sort_by_key(|s| *s.opsets.start());
    }

    /// The registration handling `op_type` at model opset `opset`, if any.
    pub fn lookup(&self, domain: &str, op_type: &str, opset: i64) -> Option<&OpSchema> {
        let key = (normalize_domain(domain).to_string(), op_type.to_string());
        self.ops
            .get(&key)?
            .iter()
            .find(|s| s.opsets.contains(&opset))
    }

    /// Every registration, sorted by domain, op type and opset.
    pub fn schemas(&self) -> impl Iterator<Item = &OpSchema> {
        self.ops.values().flatten()
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
    }
}
