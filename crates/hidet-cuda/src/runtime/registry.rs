//! The registry of a GPU's live allocations, against which every device address handed to
//! the runtime is checked.

use std::collections::BTreeMap;
use std::sync::{Mutex, PoisonError};

/// Live allocations as disjoint byte ranges `[start, start + len)` of the device's address
/// space.
#[derive(Debug, Default)]
pub(crate) struct AllocationRegistry {
    ranges: Mutex<BTreeMap<u64, usize>>,
}

impl AllocationRegistry {
    /// Records the allocation `[start, start + bytes)`.
    pub(crate) fn insert(&self, start: u64, bytes: usize) {
        self.lock().insert(start, bytes);
    }

    /// Forgets the allocation starting at `start`.
    pub(crate) fn remove(&self, start: u64) {
        self.lock().remove(&start);
    }

    /// Whether `[address, address + bytes)` lies inside one live allocation. A zero-length
    /// range may sit at the allocation's end (a pointer one past it).
    pub(crate) fn contains(&self, address: u64, bytes: usize) -> bool {
        self.lock()
            .range(..=address)
            .next_back()
            .is_some_and(|(&start, &len)| {
                let end = start + len as u64;
                address
                    .checked_add(bytes as u64)
                    .is_some_and(|last| last <= end)
            })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, BTreeMap<u64, usize>> {
        self.ranges.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranges_inside_live_allocations_only() {
        let r = AllocationRegistry::default();
        r.insert(0x1000, 256);
        r.insert(0x2000, 0);
        assert!(r.contains(0x1000, 256));
        assert!(r.contains(0x10ff, 1));
        assert!(r.contains(0x1100, 0), "one past the end, zero bytes");
        assert!(!r.contains(0x10ff, 2), "runs past the end");
        assert!(!r.contains(0x0fff, 1), "before the first allocation");
        assert!(!r.contains(0x1800, 0), "between allocations");
        assert!(r.contains(0x2000, 0), "a zero-byte allocation's address");
        assert!(!r.contains(0x2000, 1));
        assert!(!r.contains(u64::MAX, 2), "overflow is outside");
        r.remove(0x1000);
        assert!(!r.contains(0x1000, 1), "freed");
    }
}
