//! The element storage of a tensor: a vector hidet owns, or memory the caller owns (a numpy
//! array, a torch tensor) that a tensor wraps without copying, kept alive by a handle.

use std::fmt;
use std::ptr::NonNull;
use std::sync::OnceLock;

/// Immutable elements: owned, borrowed from a caller for as long as its owner handle lives
/// (see [`Buffer::external`]), or computed when first read (see [`Buffer::deferred`]).
/// Dereferences to `[T]`.
pub struct Buffer<T> {
    repr: Repr<T>,
}

enum Repr<T> {
    Owned(Vec<T>),
    External {
        ptr: NonNull<T>,
        len: usize,
        /// Keeps the memory alive; dropped with the buffer.
        _owner: Box<dyn Send + Sync>,
    },
    Deferred {
        len: usize,
        elements: OnceLock<Vec<T>>,
        make: Box<dyn Fn() -> Vec<T> + Send + Sync>,
    },
}

// SAFETY: an owned buffer is a `Vec<T>`; an external one is an immutable view of `len`
// elements that [`Buffer::external`]'s caller guarantees stay valid and unmodified while the
// owner lives, the owner itself being `Send + Sync`. So sharing or sending a buffer is
// sharing or sending `[T]`.
unsafe impl<T: Send + Sync> Send for Buffer<T> {}
// SAFETY: see `Send`: a buffer only ever hands out `&[T]`.
unsafe impl<T: Send + Sync> Sync for Buffer<T> {}

impl<T> Buffer<T> {
    /// A buffer wrapping `len` elements at `ptr` that someone else owns, without copying
    /// them; `owner` is dropped when the buffer is.
    ///
    /// # Safety
    /// `ptr` must be non-null, aligned for `T` and point to `len` initialized elements that
    /// stay valid and are not written by anyone for as long as `owner` is alive.
    pub unsafe fn external(ptr: *const T, len: usize, owner: Box<dyn Send + Sync>) -> Buffer<T> {
        let ptr = NonNull::new(ptr.cast_mut()).unwrap_or(NonNull::dangling());
        Buffer {
            repr: Repr::External {
                ptr,
                len,
                _owner: owner,
            },
        }
    }

    /// A buffer of `len` elements that `make` computes when they are first read (and that
    /// are kept from then on): a constant held only in case it is needed again, whose
    /// memory is spent only then. `make` must return `len` elements, the same every call.
    pub fn deferred(len: usize, make: Box<dyn Fn() -> Vec<T> + Send + Sync>) -> Buffer<T> {
        Buffer {
            repr: Repr::Deferred {
                len,
                elements: OnceLock::new(),
                make,
            },
        }
    }

    /// Whether the elements are deferred ([`Buffer::deferred`]) and not computed yet.
    pub fn is_deferred(&self) -> bool {
        matches!(&self.repr, Repr::Deferred { elements, .. } if elements.get().is_none())
    }

    /// Whether the elements were deferred ([`Buffer::deferred`]) and have been computed since.
    pub fn is_rebuilt(&self) -> bool {
        matches!(&self.repr, Repr::Deferred { elements, .. } if elements.get().is_some())
    }

    /// The number of elements (without computing deferred ones).
    pub fn len(&self) -> usize {
        match &self.repr {
            Repr::Owned(v) => v.len(),
            Repr::External { len, .. } | Repr::Deferred { len, .. } => *len,
        }
    }

    /// Whether there are no elements.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Whether the elements are the caller's memory (see [`Buffer::external`]).
    pub fn is_external(&self) -> bool {
        matches!(self.repr, Repr::External { .. })
    }

    /// The elements as a vector: the owned one as is, a copy of external memory.
    pub fn into_vec(self) -> Vec<T>
    where
        T: Clone,
    {
        match self.repr {
            Repr::Owned(v) => v,
            Repr::External { .. } => self.to_vec(),
            Repr::Deferred { elements, make, .. } => elements.into_inner().unwrap_or_else(make),
        }
    }
}

impl<T> From<Vec<T>> for Buffer<T> {
    fn from(v: Vec<T>) -> Buffer<T> {
        Buffer {
            repr: Repr::Owned(v),
        }
    }
}

impl<T> std::ops::Deref for Buffer<T> {
    type Target = [T];

    fn deref(&self) -> &[T] {
        match &self.repr {
            Repr::Owned(v) => v,
            // SAFETY: `Buffer::external`'s contract: `len` initialized, aligned elements that
            // nobody writes while the owner, held by `self`, lives. A zero-length view has a
            // dangling but aligned pointer, which `from_raw_parts` accepts.
            Repr::External { ptr, len, .. } => unsafe {
                std::slice::from_raw_parts(ptr.as_ptr(), *len)
            },
            Repr::Deferred {
                len,
                elements,
                make,
            } => {
                let elements = elements.get_or_init(make);
                assert_eq!(elements.len(), *len, "a deferred buffer's elements");
                elements
            }
        }
    }
}

/// One 64-byte, 64-aligned line of [`Buffer::aligned_copy`] storage.
#[derive(Clone, Copy)]
#[repr(C, align(64))]
struct CacheLine([u8; 64]);

/// The bytes a buffer is copied into by [`Buffer::aligned_copy`]: read only through the
/// buffer's pointer, freed with it.
struct AlignedLines(#[allow(dead_code)] Vec<CacheLine>);

impl<T: Copy + Send + Sync + 'static> Buffer<T> {
    /// A copy of `elements` whose first element starts a 64-byte cache line, so a kernel's
    /// vector loads along it straddle no more lines than they must (kernels read constants
    /// where they lie). Element types are plain data of alignment at most 64.
    pub fn aligned_copy(elements: &[T]) -> Buffer<T> {
        const { assert!(std::mem::align_of::<T>() <= 64) };
        let bytes = std::mem::size_of_val(elements);
        let mut lines = vec![CacheLine([0; 64]); bytes.div_ceil(64)];
        let dst = lines.as_mut_ptr().cast::<u8>();
        // SAFETY: `lines` holds at least `bytes` writable bytes, `elements` exactly `bytes`
        // readable ones (plain `Copy` data), and the two allocations are distinct.
        unsafe { std::ptr::copy_nonoverlapping(elements.as_ptr().cast::<u8>(), dst, bytes) };
        let ptr = dst.cast::<T>().cast_const();
        // SAFETY: `ptr` is 64-aligned (so aligned for `T`), points to `elements.len()`
        // initialized elements (the bytes just copied from valid ones), and the vector that
        // owns them moves into the owner without moving its heap storage; nothing writes it.
        unsafe { Buffer::external(ptr, elements.len(), Box::new(AlignedLines(lines))) }
    }
}

impl<T: Clone> Clone for Buffer<T> {
    /// An owned copy of the elements.
    fn clone(&self) -> Buffer<T> {
        Buffer::from(self.to_vec())
    }
}

impl<T: PartialEq> PartialEq for Buffer<T> {
    fn eq(&self, other: &Buffer<T>) -> bool {
        **self == **other
    }
}

impl<T: fmt::Debug> fmt::Debug for Buffer<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        (**self).fmt(f)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::Arc;

    /// Holds the memory (never read: it keeps it alive) and flags its own drop.
    struct Owner(#[allow(dead_code)] Arc<Vec<f32>>, Arc<AtomicBool>);
    impl Drop for Owner {
        fn drop(&mut self) {
            self.1.store(true, Ordering::SeqCst);
        }
    }

    #[test]
    fn an_aligned_copy_starts_a_cache_line_and_holds_the_elements() {
        for len in [0usize, 1, 3, 17, 1000] {
            let v: Vec<f64> = (0..len).map(|i| i as f64 * 0.5 - 3.0).collect();
            let b = Buffer::aligned_copy(&v[..]);
            assert_eq!(b.as_ptr() as usize % 64, 0, "len {len}");
            assert_eq!(&*b, &v[..]);
        }
        let bytes: Vec<u8> = (0..77).collect();
        assert_eq!(&*Buffer::aligned_copy(&bytes[..]), &bytes[..]);
    }

    #[test]
    fn an_external_buffer_reads_the_owner_memory_and_drops_the_owner_with_it() {
        let data = Arc::new(vec![1.5f32, -2.0, 3.25]);
        let dropped = Arc::new(AtomicBool::new(false));
        let owner = Owner(Arc::clone(&data), Arc::clone(&dropped));
        // SAFETY: `data` holds 3 floats, kept alive (and never written) by `owner`.
        let b = unsafe { Buffer::external(data.as_ptr(), data.len(), Box::new(owner)) };
        assert!(b.is_external());
        assert_eq!(b.as_ptr(), data.as_ptr(), "no copy");
        assert_eq!(&*b, &[1.5, -2.0, 3.25]);
        assert_eq!(b.clone(), b);
        assert!(!b.clone().is_external(), "a clone owns its elements");
        assert!(!dropped.load(Ordering::SeqCst));
        assert_eq!(b.into_vec(), vec![1.5, -2.0, 3.25]);
        assert!(
            dropped.load(Ordering::SeqCst),
            "the owner goes with the buffer"
        );
        // SAFETY: no elements are read through a zero-length view.
        let empty = unsafe { Buffer::<f32>::external(std::ptr::null(), 0, Box::new(())) };
        assert!(empty.is_empty());
    }

    #[test]
    fn a_deferred_buffer_computes_its_elements_once_when_first_read() {
        let calls = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let counted = Arc::clone(&calls);
        let b = Buffer::deferred(
            3,
            Box::new(move || {
                counted.fetch_add(1, Ordering::SeqCst);
                vec![1i32, 2, 3]
            }),
        );
        assert!(b.is_deferred());
        assert_eq!((b.len(), calls.load(Ordering::SeqCst)), (3, 0));
        assert_eq!(&*b, &[1, 2, 3]);
        assert_eq!(&*b, &[1, 2, 3]);
        assert!(!b.is_deferred());
        assert_eq!(calls.load(Ordering::SeqCst), 1);
        assert_eq!(b.into_vec(), vec![1, 2, 3]);
        let unread = Buffer::deferred(2, Box::new(|| vec![7u8, 8]));
        assert_eq!(unread.into_vec(), vec![7, 8]);
    }
}
