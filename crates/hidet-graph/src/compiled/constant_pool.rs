//! Constants shared by the graphs one model compiles for different input shapes.
//!
//! A model with symbolic dimensions is compiled once per distinct set of input shapes, and
//! every compilation re-derives its constants (folded weights, packed panels) from the same
//! initializers. Without sharing, each set of shapes would hold its own copy of every weight:
//! a decoder run at a growing sequence length would grow by the whole model per step. The
//! pool keeps one arena of the large constants of the first compilation; a later compilation
//! points its kernels at the pooled copy of every large constant whose dtype, shape and
//! elements are equal, and uploads only the rest into its own arena.
//!
//! A backend whose kernels read host memory ([`Backend::host_address`], the CPU) copies no
//! constant at all: kernels read each one where its tensor lies ([`Placement::Held`]), so a
//! weight the model file holds is in memory once, shared by the imported graph, every
//! compiled graph and the pool. Only backends with their own memory (a GPU) upload.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use super::backend::{Backend, BackendError};
use super::plan::ALIGN;
use crate::dtype::DType;
use crate::tensor::Tensor;

/// Constants smaller than this stay in each compiled graph's own arena: comparing them costs
/// more than it saves, and small constants are the ones that depend on the shapes (offset
/// tables, masks).
pub const SHARED_MIN_BYTES: usize = 16 * 1024;

/// The per-model pool: empty until the first compilation that uses it fills it.
/// `Send + Sync`; compilations that use one pool must not run at the same time as its first
/// (a [`super::CompiledModel`] serializes them).
pub struct ConstantPool<B: Backend> {
    shared: Mutex<Option<Arc<SharedConstants<B>>>>,
}

impl<B: Backend> Default for ConstantPool<B> {
    fn default() -> Self {
        ConstantPool {
            shared: Mutex::new(None),
        }
    }
}

impl<B: Backend> std::fmt::Debug for ConstantPool<B> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let bytes = self
            .shared
            .lock()
            .ok()
            .and_then(|s| s.as_ref().map(|s| s.bytes));
        f.debug_struct("ConstantPool")
            .field("bytes", &bytes)
            .finish()
    }
}

/// Pooled tensors by dtype and shape, each with its offset in the arena, or `None` when
/// kernels read it in place.
type Entries = HashMap<(DType, Vec<usize>), Vec<(Option<usize>, Tensor)>>;

/// Where a compilation's constants go ([`Placement`] each) and the arena of those shared.
pub(super) type Placements<B> = (Vec<Placement>, Option<Arc<SharedConstants<B>>>);

/// One arena of constants, read-only once built, with the tensors it holds by dtype and shape.
pub(super) struct SharedConstants<B: Backend> {
    /// Kept alive for the kernels that read it; never written after [`ConstantPool::share`]
    /// builds it. In a mutex only so that the pool is `Sync` whatever the arena type is.
    /// `None` when every pooled constant is read in place.
    _arena: Option<Mutex<B::Arena>>,
    /// The address of the arena's first byte (0 without an arena).
    pub(super) base: u64,
    /// Bytes of the pooled constants (in the arena or read in place).
    pub(super) bytes: usize,
    entries: Entries,
}

impl<B: Backend> SharedConstants<B> {
    /// The offset (`None`: read in place) and pooled copy of a constant equal to `t` (dtype,
    /// shape and every element's bits, [`Tensor::bitwise_eq`]), if the pool holds one.
    fn find(&self, t: &Tensor) -> Option<(Option<usize>, Tensor)> {
        self.entries
            .get(&(t.dtype(), t.shape().to_vec()))?
            .iter()
            .find(|(_, pooled)| pooled.bitwise_eq(t))
            .cloned()
    }
}

/// Where each constant of a compilation lies.
pub(super) enum Placement {
    /// In the pool's arena at this offset; the tensor is the pooled copy (read by host steps).
    Shared(usize, Tensor),
    /// Read by kernels where this tensor, the pool's copy, lies (the backend's
    /// [`Backend::host_address`]).
    Pooled(Tensor),
    /// Read by kernels where this tensor, the constant itself, lies.
    Held(Tensor),
    /// The compiled graph's own arena holds a copy.
    Own,
}

/// Where each of `constants` (a compilation's constant roots, in its order) lies: through
/// `pool` when given ([`ConstantPool::share`]), and read in place when the backend's kernels
/// can read it there. Returns one placement per constant and the pool's arena when a
/// placement is in it.
pub(super) fn place_constants<B: Backend>(
    backend: &B,
    pool: Option<&ConstantPool<B>>,
    constants: &[&Tensor],
) -> Result<Placements<B>, BackendError> {
    let (placements, shared) = match pool {
        Some(pool) => pool.share(backend, constants)?,
        None => (constants.iter().map(|_| Placement::Own).collect(), None),
    };
    let placements = placements
        .into_iter()
        .zip(constants)
        .map(|(p, t)| match p {
            Placement::Own if backend.host_address(t).is_some() => Placement::Held((*t).clone()),
            other => other,
        })
        .collect();
    Ok((placements, shared))
}

impl<B: Backend> ConstantPool<B> {
    /// Places `constants` (a compilation's constant roots, in its order): an empty pool is
    /// filled with those of at least [`SHARED_MIN_BYTES`] (distinct by content), uploaded by
    /// `backend` unless its kernels read them in place; a filled pool places those equal to
    /// one it holds. Returns one placement per constant and the arena they are shared from,
    /// if any constant is in it.
    fn share(&self, backend: &B, constants: &[&Tensor]) -> Result<Placements<B>, BackendError> {
        let mut shared = self
            .shared
            .lock()
            .map_err(|_| BackendError::Memory("constant pool poisoned".into()))?;
        if shared.is_none() {
            *shared = Self::build(backend, constants)?;
        }
        let Some(pool) = shared.as_ref() else {
            return Ok((constants.iter().map(|_| Placement::Own).collect(), None));
        };
        let placements: Vec<Placement> = constants
            .iter()
            // The pool holds only large constants, so only large ones are found.
            .map(|t| match pool.find(t) {
                Some((Some(offset), pooled)) => Placement::Shared(offset, pooled),
                Some((None, pooled)) => Placement::Pooled(pooled),
                None => Placement::Own,
            })
            .collect();
        let used = placements
            .iter()
            .any(|p| matches!(p, Placement::Shared(..)));
        Ok((placements, used.then(|| Arc::clone(pool))))
    }

    /// The pool of the large, distinct `constants` (those the backend's kernels cannot read
    /// in place uploaded into one arena), or `None` when there are none.
    fn build(
        backend: &B,
        constants: &[&Tensor],
    ) -> Result<Option<Arc<SharedConstants<B>>>, BackendError> {
        let mut entries = Entries::new();
        let (mut bytes, mut arena_bytes) = (0usize, 0usize);
        for t in constants {
            if t.size_in_bytes() < SHARED_MIN_BYTES || t.dtype().is_string() {
                continue;
            }
            let same = entries.entry((t.dtype(), t.shape().to_vec())).or_default();
            if same.iter().any(|(_, pooled)| pooled.bitwise_eq(t)) {
                continue;
            }
            bytes += t.size_in_bytes();
            if backend.host_address(t).is_some() {
                same.push((None, (*t).clone()));
            } else {
                same.push((Some(arena_bytes), (*t).clone()));
                arena_bytes += t.size_in_bytes().div_ceil(ALIGN) * ALIGN;
            }
        }
        if entries.is_empty() {
            return Ok(None);
        }
        let (arena, base) = if arena_bytes > 0 {
            let mut arena = backend.alloc(arena_bytes)?;
            for (offset, t) in entries.values().flatten() {
                if let Some(offset) = offset {
                    backend.upload(&mut arena, *offset, t)?;
                }
            }
            let base = backend.base(&arena);
            (Some(Mutex::new(arena)), base)
        } else {
            (None, 0)
        };
        Ok(Some(Arc::new(SharedConstants {
            _arena: arena,
            base,
            bytes,
            entries,
        })))
    }
}
