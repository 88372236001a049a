//! The static memory plan: offsets of every intermediate buffer in one arena, reusing memory
//! between buffers whose lifetimes do not overlap.
//!
//! Lifetimes are inclusive step ranges: a buffer is written at its `start` step (or before
//! step 0 for graph inputs) and read last at its `end` step. Two buffers may share bytes only
//! if their ranges are disjoint, so a kernel never reads and writes the same bytes (the
//! CPU kernels' arguments are `restrict`). Placement is greedy, largest buffer first, at the
//! lowest offset that does not collide with an already placed, simultaneously live buffer.

/// Alignment of every buffer, in bytes.
pub const ALIGN: usize = 64;

/// One buffer to place.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BufferRequest {
    pub bytes: usize,
    /// First step at which the buffer holds data.
    pub start: usize,
    /// Last step that reads it (`>= start`).
    pub end: usize,
}

/// The placement of every requested buffer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MemoryPlan {
    /// `offsets[i]` is the offset of request `i`, a multiple of [`ALIGN`].
    pub offsets: Vec<usize>,
    /// Size of the arena: the peak of the plan.
    pub arena_bytes: usize,
    /// What the buffers would take without any reuse.
    pub unplanned_bytes: usize,
}

fn align(n: usize) -> usize {
    n.div_ceil(ALIGN) * ALIGN
}

/// Places `requests` (see the module docs).
pub fn plan_memory(requests: &[BufferRequest]) -> MemoryPlan {
    let mut order: Vec<usize> = (0..requests.len()).collect();
    order.sort_by_key(|&i| (std::cmp::Reverse(requests[i].bytes), requests[i].start, i));
    let mut offsets = vec![0usize; requests.len()];
    let mut placed: Vec<usize> = Vec::new();
    let mut arena_bytes = 0usize;
    for i in order {
        let r = requests[i];
        let size = align(r.bytes.max(1));
        let mut busy: Vec<(usize, usize)> = placed
            .iter()
            .filter(|&&j| requests[j].start <= r.end && r.start <= requests[j].end)
            .map(|&j| (offsets[j], offsets[j] + align(requests[j].bytes.max(1))))
            .collect();
        busy.sort_unstable();
        let mut offset = 0usize;
        for (lo, hi) in busy {
            if offset + size <= lo {
                break;
            }
            offset = offset.max(hi);
        }
        offsets[i] = offset;
        arena_bytes = arena_bytes.max(offset + size);
        placed.push(i);
    }
    MemoryPlan {
        offsets,
        arena_bytes,
        unplanned_bytes: requests.iter().map(|r| align(r.bytes.max(1))).sum(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn overlaps(a: (usize, usize), b: (usize, usize)) -> bool {
        a.0 < b.1 && b.0 < a.1
    }

    #[test]
    fn live_buffers_never_overlap_and_dead_ones_are_reused() {
        // A chain a -> b -> c -> d: a and c can share, b and d can share.
        let reqs = vec![
            BufferRequest {
                bytes: 1000,
                start: 0,
                end: 1,
            },
            BufferRequest {
                bytes: 1000,
                start: 1,
                end: 2,
            },
            BufferRequest {
                bytes: 1000,
                start: 2,
                end: 3,
            },
            BufferRequest {
                bytes: 1000,
                start: 3,
                end: 4,
            },
        ];
        let p = plan_memory(&reqs);
        assert_eq!(p.arena_bytes, 2 * align(1000));
        assert_eq!(p.unplanned_bytes, 4 * align(1000));
        check(&reqs, &p);
    }

    fn check(reqs: &[BufferRequest], p: &MemoryPlan) {
        for i in 0..reqs.len() {
            assert_eq!(p.offsets[i] % ALIGN, 0);
            assert!(p.offsets[i] + reqs[i].bytes <= p.arena_bytes);
            for j in 0..i {
                let live = reqs[i].start <= reqs[j].end && reqs[j].start <= reqs[i].end;
                let a = (p.offsets[i], p.offsets[i] + reqs[i].bytes.max(1));
                let b = (p.offsets[j], p.offsets[j] + reqs[j].bytes.max(1));
                assert!(!(live && overlaps(a, b)), "{i} and {j} collide");
            }
        }
    }

    #[test]
    fn random_lifetimes_are_placed_without_collisions() {
        let mut seed = 0x2545f4914f6cdd1du64;
        let mut next = |m: u64| {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed % m
        };
        for _ in 0..50 {
            let n = 1 + next(40) as usize;
            let reqs: Vec<BufferRequest> = (0..n)
                .map(|_| {
                    let start = next(30) as usize;
                    BufferRequest {
                        bytes: 1 + next(5000) as usize,
                        start,
                        end: start + next(6) as usize,
                    }
                })
                .collect();
            let p = plan_memory(&reqs);
            check(&reqs, &p);
            assert!(p.arena_bytes <= p.unplanned_bytes);
        }
    }
}
