//! Constants that graph passes derive from a model's constants (a weight packed into panels,
//! a transformed filter), remembered across the model's compilations.
//!
//! A model with symbolic dimensions runs its backend's graph passes once per set of input
//! shapes, each time on the same initializers; a pass that derives a large constant from one
//! asks [`DerivedConstants`] first, so the work (and the memory of its result) is done once
//! per model rather than once per shape.

use std::collections::HashMap;
use std::sync::Mutex;

use crate::dtype::DType;
use crate::tensor::Tensor;

/// Derived constants by what they were derived from. `Send + Sync`: passes on several
/// threads may share one.
///
/// A derivation is found again from the same sources: the same storage (an initializer
/// shared by every binding of a model's graph), or, failing that, sources of the same dtype,
/// shape and bits ([`Tensor::bitwise_eq`]) — a constant that an earlier pass of this
/// compilation derived again (a `Gemm` weight transposed, a batch normalization folded into
/// a convolution's weight), equal to the one an earlier compilation derived. An entry keeps
/// its sources alive, so a source's address cannot be reused by another tensor while the
/// entry exists; a derivation found by content adds no entry (its fresh sources are not
/// kept).
#[derive(Debug, Default)]
pub struct DerivedConstants {
    memo: Mutex<Memo>,
}

/// What a derivation is: its label (what it computes, with every parameter it depends on)
/// and the storage addresses of its sources.
type Key = (String, Vec<usize>);

/// A label and the dtype and shape of each source: the derivations whose sources may be
/// equal in content to a lookup's.
type Kind = (String, Vec<(DType, Vec<usize>)>);

#[derive(Debug, Default)]
struct Memo {
    entries: Vec<Entry>,
    by_storage: HashMap<Key, usize>,
    by_kind: HashMap<Kind, Vec<usize>>,
}

#[derive(Debug)]
struct Entry {
    /// Kept alive so that their addresses identify them, and compared with a lookup's
    /// sources when the addresses differ.
    sources: Vec<Tensor>,
    value: Tensor,
}

impl Memo {
    /// The entry derived by `label` from `sources`: same storage, else same content.
    fn find(&self, label: &str, sources: &[&Tensor]) -> Option<&Entry> {
        let key = storage_key(label, sources);
        if let Some(&i) = self.by_storage.get(&key) {
            return Some(&self.entries[i]);
        }
        self.by_kind
            .get(&kind(label, sources))?
            .iter()
            .map(|&i| &self.entries[i])
            // Deferred sources are not computed just to be compared: at worst the constant
            // is derived again.
            .filter(|e| !e.sources.iter().any(Tensor::is_deferred))
            .find(|e| e.sources.iter().zip(sources).all(|(a, b)| a.bitwise_eq(b)))
    }
}

fn storage_key(label: &str, sources: &[&Tensor]) -> Key {
    (
        label.to_string(),
        sources.iter().map(|t| t.storage_address()).collect(),
    )
}

fn kind(label: &str, sources: &[&Tensor]) -> Kind {
    (
        label.to_string(),
        sources
            .iter()
            .map(|t| (t.dtype(), t.shape().to_vec()))
            .collect(),
    )
}

impl DerivedConstants {
    /// The constant `label` derives from `sources`: remembered from an earlier call with the
    /// same label and the same sources (same storage, or same dtype, shape and bits), else
    /// `derive()`'s result, remembered when it is `Some`. `label` must name everything
    /// besides the sources that the result depends on (a width, a transposition).
    pub fn get_or_derive(
        &self,
        label: &str,
        sources: &[&Tensor],
        derive: impl FnOnce() -> Option<Tensor>,
    ) -> Option<Tensor> {
        if let Some(entry) = self.memo.lock().ok()?.find(label, sources) {
            return Some(entry.value.clone());
        }
        let value = derive()?;
        if let Ok(mut memo) = self.memo.lock() {
            let i = memo.entries.len();
            memo.entries.push(Entry {
                sources: sources.iter().map(|t| (*t).clone()).collect(),
                value: value.clone(),
            });
            memo.by_storage.insert(storage_key(label, sources), i);
            memo.by_kind
                .entry(kind(label, sources))
                .or_default()
                .push(i);
        }
        Some(value)
    }

    /// For the derivation `label` made from `source` alone (same storage): a tensor equal to
    /// `source` whose elements `rebuild` computes from the derived constant when first read
    /// ([`Tensor::deferred`]), which the derivation then keeps instead of `source` (found
    /// again through it by storage). `None` when no such derivation is remembered, or
    /// `source` is deferred already, or is a stand-in that was rebuilt (a later compilation
    /// read it: it would be rebuilt again every time). `rebuild` must return `source`'s
    /// elements exactly.
    pub fn defer_source(
        &self,
        label: &str,
        source: &Tensor,
        rebuild: impl Fn(&Tensor) -> Vec<f32> + Send + Sync + 'static,
    ) -> Option<Tensor> {
        if source.is_deferred() || source.is_rebuilt() || source.dtype() != DType::F32 {
            return None;
        }
        let mut memo = self.memo.lock().ok()?;
        let old_key = storage_key(label, &[source]);
        let i = *memo.by_storage.get(&old_key)?;
        let value = memo.entries[i].value.clone();
        let deferred = Tensor::deferred(source.shape().to_vec(), move || rebuild(&value)).ok()?;
        memo.by_storage.remove(&old_key);
        memo.by_storage.insert(storage_key(label, &[&deferred]), i);
        memo.entries[i].sources = vec![deferred.clone()];
        Some(deferred)
    }

    /// Forgets every derived constant (and the sources it kept alive); later calls derive
    /// again.
    pub fn clear(&self) {
        if let Ok(mut memo) = self.memo.lock() {
            *memo = Memo::default();
        }
    }

    /// How many derived constants are remembered.
    pub fn len(&self) -> usize {
        self.memo.lock().map_or(0, |m| m.entries.len())
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
        let calls = std::cell::Cell::new(0);
        let derive = |label: &str, t: &Tensor| {
            memo.get_or_derive(label, &[t], || {
                calls.set(calls.get() + 1);
                Some(Tensor::new(vec![3], vec![t.numel() as f32; 3]).unwrap())
            })
            .unwrap()
        };
        let first = derive("sum", &w);
        let again = derive("sum", &w.clone());
        assert!(first.same_storage(&again));
        // An equal copy in other storage finds the derivation without a new entry; another
        // label, or sources differing in one bit (-0.0 for 0.0), derives again.
        let copy = Tensor::new(vec![2, 3], vec![1f32, 2., 3., 4., 5., 6.]).unwrap();
        assert!(derive("sum", &copy).same_storage(&first));
        assert_eq!((calls.get(), memo.len()), (1, 1));
        derive("other", &w);
        let zero = Tensor::new(vec![2], vec![0f32, 1.]).unwrap();
        let negative_zero = Tensor::new(vec![2], vec![-0f32, 1.]).unwrap();
        let a = derive("sum", &zero);
        let b = derive("sum", &negative_zero);
        assert!(!a.same_storage(&b));
        let reshaped = Tensor::new(vec![3, 2], vec![1f32, 2., 3., 4., 5., 6.]).unwrap();
        derive("sum", &reshaped);
        assert_eq!(calls.get(), 5);
        assert_eq!(memo.len(), 5);
    }

    #[test]
    fn a_failed_derivation_is_not_remembered() {
        let memo = DerivedConstants::default();
        let w = Tensor::new(vec![2], vec![1f32, 2.]).unwrap();
        assert!(memo.get_or_derive("none", &[&w], || None).is_none());
        assert!(memo.is_empty());
    }
}
