//! Storage of large graph outputs, kept for the next run once the caller drops them.
//!
//! A run hands its outputs to the caller, who frees them, and the next run's outputs are new
//! allocations. An allocation of more than a few pages is a fresh mapping each time (the
//! global allocators of the tool and the Python module return freed pages to the system at
//! once), every page of it faulted in and zeroed by the kernel while the run's kernels write
//! it: for a language model's 131 MB logits, 16 ms of a 320 ms run even with huge pages; for a
//! 768 KiB softmax output, 192 faults that took longer than the kernel. Outputs at least
//! [`MIN_BYTES`] large are therefore wrapped as external tensor storage
//! ([`hidet_graph::Tensor::from_external`]) whose owner, when the last clone of the tensor is
//! dropped, returns the allocation to its backend's pool; the next output of the same size
//! takes it instead of allocating. The pool holds at most [`MAX_SPARE`] allocations (the
//! outputs of a run or two of a decoder that returns every layer's cache), and none once its
//! backend is dropped. Only those of at least [`huge_pages::MIN_BYTES`] are advised onto huge
//! pages.

use std::sync::{Mutex, Weak};

use super::huge_pages;

/// Outputs at least this large are pooled (smaller ones come from the allocator's pages for
/// small objects, which it keeps).
pub const MIN_BYTES: usize = 64 << 10;

/// Allocations the pool keeps at most; the oldest goes first.
pub const MAX_SPARE: usize = 64;

/// Storage of large outputs that callers have dropped, by size.
#[derive(Debug, Default)]
pub struct OutputPool {
    spare: Mutex<Vec<Vec<u64>>>,
}

impl OutputPool {
    /// Storage for `bytes` bytes, 8-byte aligned and uninitialized as far as the caller knows:
    /// a spare allocation of the same size class ([`size_class`]), else a new one of the
    /// class's size, marked for huge pages when large enough. `None` when the allocation fails.
    pub fn take(&self, bytes: usize) -> Option<Vec<u64>> {
        let words = size_class(bytes.div_ceil(8));
        if let Ok(mut spare) = self.spare.lock() {
            if let Some(i) = spare.iter().position(|s| s.capacity() == words) {
                return Some(spare.remove(i));
            }
        }
        let mut storage: Vec<u64> = Vec::new();
        storage.try_reserve_exact(words).ok()?;
        huge_pages::advise(storage.as_ptr().cast(), words * 8);
        Some(storage)
    }

    /// Keeps `storage` for a later [`OutputPool::take`], dropping the oldest spare one when
    /// [`MAX_SPARE`] are kept already.
    fn give_back(&self, storage: Vec<u64>) {
        let Ok(mut spare) = self.spare.lock() else {
            return;
        };
        if spare.len() >= MAX_SPARE {
            spare.remove(0);
        }
        spare.push(storage);
    }

    /// How many allocations are kept.
    pub fn spare(&self) -> usize {
        self.spare.lock().map_or(0, |s| s.len())
    }
}

/// `words` rounded up to its size class: eight classes per doubling (at most 1/8 more than
/// asked), so an output that grows a little from run to run (a decoder's cache, one position
/// per step) takes the storage the previous run's output gave back.
pub fn size_class(words: usize) -> usize {
    if words <= 8 {
        return words;
    }
    let step = 1usize << (usize::BITS - 1 - words.leading_zeros() - 3);
    words.div_ceil(step) * step
}

/// The owner of one pooled output's storage (the `owner` of its external tensor storage):
/// returns the storage to the pool when dropped, or frees it when the pool is gone.
pub struct Pooled {
    storage: Vec<u64>,
    pool: Weak<OutputPool>,
}

impl Pooled {
    pub fn new(storage: Vec<u64>, pool: Weak<OutputPool>) -> Pooled {
        Pooled { storage, pool }
    }

    /// The address of the first byte.
    pub fn address(&self) -> *const u8 {
        self.storage.as_ptr().cast()
    }
}

impl Drop for Pooled {
    fn drop(&mut self) {
        if let Some(pool) = self.pool.upgrade() {
            pool.give_back(std::mem::take(&mut self.storage));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    #[test]
    fn dropped_storage_serves_the_next_output_of_its_size() {
        let pool = Arc::new(OutputPool::default());
        let first = Pooled::new(pool.take(MIN_BYTES).unwrap(), Arc::downgrade(&pool));
        let address = first.address();
        let alive = Pooled::new(pool.take(MIN_BYTES).unwrap(), Arc::downgrade(&pool));
        assert_ne!(
            alive.address(),
            address,
            "storage in use is never handed out again"
        );
        drop(first);
        assert_eq!(pool.spare(), 1);
        let other_size = pool.take(MIN_BYTES * 2).unwrap();
        assert_eq!(pool.spare(), 1, "a spare of another size class stays");
        let again = pool.take(MIN_BYTES).unwrap();
        assert_eq!(again.as_ptr().cast::<u8>(), address);
        assert_eq!(pool.spare(), 0);
        drop((alive, other_size, again));
    }

    #[test]
    fn the_pool_keeps_a_few_and_none_once_dropped() {
        let pool = Arc::new(OutputPool::default());
        let outputs: Vec<Pooled> = (0..MAX_SPARE + 2)
            .map(|i| Pooled::new(pool.take(MIN_BYTES + 8 * i).unwrap(), Arc::downgrade(&pool)))
            .collect();
        drop(outputs);
        assert_eq!(pool.spare(), MAX_SPARE);
        let late = Pooled::new(pool.take(MIN_BYTES).unwrap(), Arc::downgrade(&pool));
        drop(pool);
        drop(late);
    }

    #[test]
    fn a_growing_output_takes_the_storage_of_its_last_size() {
        let pool = Arc::new(OutputPool::default());
        // A cache of 2 KiB per position growing by one position per run.
        let mut last = Pooled::new(pool.take(2048 * 100).unwrap(), Arc::downgrade(&pool));
        let mut reused = 0;
        for positions in 101..200 {
            let address = last.address();
            drop(last);
            last = Pooled::new(pool.take(2048 * positions).unwrap(), Arc::downgrade(&pool));
            assert!(last.storage.capacity() * 8 >= 2048 * positions);
            reused += usize::from(last.address() == address);
        }
        assert!(reused >= 90, "{reused} of 99 runs reused the storage");
        // One spare left behind per class crossed (they leave the pool first).
        assert!(pool.spare() <= 10, "{} spares", pool.spare());
    }

    #[test]
    fn size_classes_round_up_by_at_most_an_eighth() {
        for words in (1..5000).chain([1 << 20, (1 << 20) + 1, 123_456_789]) {
            let class = size_class(words);
            assert!(
                class >= words && class - words <= words / 8,
                "{words} -> {class}"
            );
            assert_eq!(size_class(class), class, "{words} -> {class}");
        }
    }
}
