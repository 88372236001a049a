//! Constants that graph passes derive from a model's constants (a weight packed into panels,
//! a transformed filter), remembered across the model's compilations.
//!
//! A model with symbolic dimensions runs its backend's graph passes once per set of input
//! shapes, each time on the same initializers; a pass that derives a large constant from one
//! asks [`DerivedConstants`] first, so the work (and the memory of its result) is done once
//! per model rather than once per shape.

use std::collections::HashMap;
use std::sync::Mutex;

use crate::tensor::Tensor;

/// Derived constants by what they were derived from. `Send + Sync`: passes on several
/// threads may share one.
///
/// Sources are identified by their storage ([`Tensor::storage_address`]), not compared by
/// content: an entry keeps its sources alive, so a source's address cannot be reused by
/// another tensor while the entry exists. A derivation is found again when a pass derives
/// from the same initializer (shared by every binding of a model's graph), not from an equal
/// copy.
#[derive(Debug, Default)]
pub struct DerivedConstants {
    entries: Mutex<HashMap<Key, Entry>>,
}

/// What a derivation is: its label (what it computes, with every parameter it depends on)
/// and the storage addresses of its sources.
type Key = (String, Vec<usize>);

#[derive(Debug)]
struct Entry {
    /// Kept alive so that their addresses identify them (see [`DerivedConstants`]).
    _sources: Vec<Tensor>,
    value: Tensor,
}

impl DerivedConstants {
    /// The constant `label` derives from `sources`: remembered from an earlier call with the
    /// same label and the same source tensors (same storage), else `derive()`'s result,
    /// remembered when it is `Some`. `label` must name everything besides the sources that
    /// the result depends on (a width, a transposition).
    pub fn get_or_derive(
        &self,
        label: &str,
        sources: &[&Tensor],
        derive: impl FnOnce() -> Option<Tensor>,
    ) -> Option<Tensor> {
        let key = (
            label.to_string(),
            sources.iter().map(|t| t.storage_address()).collect(),
        );
        if let Some(entry) = self.entries.lock().ok()?.get(&key) {
            return Some(entry.value.clone());
        }
        let value = derive()?;
        if let Ok(mut entries) = self.entries.lock() {
            entries.insert(
                key,
                Entry {
                    _sources: sources.iter().map(|t| (*t).clone()).collect(),
                    value: value.clone(),
                },
            );
        }
        Some(value)
    }

    /// Forgets every derived constant (and the sources it kept alive); later calls derive
    /// again.
    pub fn clear(&self) {
        if let Ok(mut entries) = self.entries.lock() {
            entries.clear();
        }
    }

    /// How many derived constants are remembered.
    pub fn len(&self) -> usize {
        self.entries.lock().map_or(0, |e| e.len())
    }

    /// Whether none is.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn derives_once_per_source_storage_and_label() {
        let memo = DerivedConstants::default();
        let w = Tensor::new(vec![2, 3], vec![1f32, 2., 3., 4., 5., 6.]).unwrap();
        let mut calls = 0;
        let mut derive = |label: &str, t: &Tensor| {
            memo.get_or_derive(label, &[t], || {
                calls += 1;
                Some(Tensor::new(vec![3], vec![t.numel() as f32; 3]).unwrap())
            })
            .unwrap()
        };
        let first = derive("sum", &w);
        let again = derive("sum", &w.clone());
        assert!(first.same_storage(&again));
        // An equal copy in other storage, or another label, derives again.
        let copy = Tensor::new(vec![2, 3], vec![1f32, 2., 3., 4., 5., 6.]).unwrap();
        derive("sum", &copy);
        derive("other", &w);
        assert_eq!(calls, 3);
        assert_eq!(memo.len(), 3);
    }

    #[test]
    fn a_failed_derivation_is_not_remembered() {
        let memo = DerivedConstants::default();
        let w = Tensor::new(vec![2], vec![1f32, 2.]).unwrap();
        assert!(memo.get_or_derive("none", &[&w], || None).is_none());
        assert!(memo.is_empty());
    }
}
