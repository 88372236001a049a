//! Byte-addressed memory with the checkers' shadow state.
//!
//! Every allocation is a [`Region`]: a kernel's buffer argument (global), a shared tensor
//! or the dynamic shared memory of the block being simulated (shared), one register tensor
//! of one thread (local). A pointer is a word holding the region's number and a signed
//! byte offset ([`ptr`], [`unptr`]), so typed views of any region (vector loads, `half2`,
//! `cp.async`, `ldmatrix`) are byte reads and writes.
//!
//! Per region, what the checkers (`checks.rs`) need:
//! - `init`: which bytes were written (shared and register tensors start poisoned, as do
//!   buffers passed as outputs): reading an unwritten byte is a fault;
//! - `shadow` (global and shared memory): per element, the last writer and a summary of
//!   the readers since, with the barrier interval (`epoch`) of each, to find data races;
//! - `pending` (shared memory): the bytes an issued `cp.async` has not yet written;
//! - `writer` (outputs): the first writer of each element, to find elements written twice
//!   or never.
//!
//! Threads are numbered globally: `g = block_seq · threads_per_block + thread`, where
//! `block_seq` counts the blocks simulated so far. Two accesses to one element, at least
//! one a write, by different threads race when they are in different blocks (nothing
//! orders blocks), or in the same block and barrier interval and different warps. Within
//! a warp, reads and writes are ordered by the lockstep execution (as if `__syncwarp` were
//! between statements); two writes of one element by two lanes in one interval still race.

use super::checks::{Shadow, FRESH, NONE};
use super::error::{Fault, Idx3};

const OFFSET_BITS: u32 = 40;
const OFFSET_MASK: u64 = (1 << OFFSET_BITS) - 1;

/// The pointer to byte `offset` of region `region`.
#[inline]
pub(crate) fn ptr(region: usize, offset: i64) -> u64 {
    ((region as u64) << OFFSET_BITS) | (offset as u64 & OFFSET_MASK)
}

/// The region and byte offset of a pointer.
#[inline]
pub(crate) fn unptr(p: u64) -> (usize, i64) {
    let region = (p >> OFFSET_BITS) as usize;
    let offset = ((p << (64 - OFFSET_BITS)) as i64) >> (64 - OFFSET_BITS);
    (region, offset)
}

/// Which memory a region is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Space {
    Global,
    Shared,
    Local,
}

/// One allocation.
pub(crate) struct Region {
    pub name: String,
    pub space: Space,
    pub data: Vec<u8>,
    /// `None`: every byte is initialised.
    pub(super) init: Option<Vec<bool>>,
    /// Race shadow per element of `1 << shift` bytes.
    pub(crate) shadow: Option<Vec<Shadow>>,
    pub(super) shift: u32,
    /// Per byte, `1 + g` of the thread whose `cp.async` still targets it, or 0.
    pub(super) pending: Option<Vec<u32>>,
    /// For outputs: per element, the first writer's `g`.
    pub(super) writer: Option<Vec<u32>>,
}

impl Region {
    /// A region of `size` bytes with elements of `elem_bytes` (a power of two) for the race
    /// shadow; `poisoned` starts it uninitialised; `output` tracks writes per element.
    pub fn new(
        name: String,
        space: Space,
        data: Vec<u8>,
        elem_bytes: usize,
        poisoned: bool,
        output: bool,
    ) -> Region {
        let size = data.len();
        let shift = elem_bytes.max(1).trailing_zeros();
        let elems = size.div_ceil(1 << shift);
        Region {
            name,
            space,
            init: poisoned.then(|| vec![false; size]),
            shadow: (space != Space::Local).then(|| vec![FRESH; elems]),
            shift,
            pending: (space == Space::Shared).then(|| vec![0; size]),
            writer: output.then(|| vec![NONE; elems]),
            data,
        }
    }

    /// Poisons every byte and forgets the shadow state (a new block's shared memory, a
    /// register tensor declared again).
    pub fn reset(&mut self) {
        if let Some(init) = &mut self.init {
            init.fill(false);
        } else {
            self.init = Some(vec![false; self.data.len()]);
        }
        if let Some(s) = &mut self.shadow {
            s.fill(FRESH);
        }
        if let Some(p) = &mut self.pending {
            p.fill(0);
        }
    }

    /// The elements of an output never written: `(first, count)`.
    pub fn unwritten(&self) -> Option<(i64, usize)> {
        let w = self.writer.as_ref()?;
        let count = w.iter().filter(|&&g| g == NONE).count();
        let first = w.iter().position(|&g| g == NONE)?;
        Some((first as i64, count))
    }
}

/// Who accesses memory: a thread's global number, its block's sequence number and its
/// warp's global number.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Actor {
    pub g: u32,
    pub block: u32,
    pub warp: u32,
}

/// Every region of a launch and the current barrier interval.
pub(crate) struct Memory {
    pub regions: Vec<Region>,
    /// The current barrier interval, increased at every barrier and every new block.
    pub epoch: u32,
    pub threads_per_block: u32,
    pub block_dim: [i64; 3],
    /// The `blockIdx` of each simulated block, by sequence number.
    pub blocks: Vec<[i64; 3]>,
}

impl Memory {
    /// `blockIdx` and `threadIdx` of thread `g`.
    pub fn who(&self, g: u32) -> (Idx3, Idx3) {
        let tpb = self.threads_per_block;
        let block = self
            .blocks
            .get((g / tpb) as usize)
            .copied()
            .unwrap_or([-1; 3]);
        let t = i64::from(g % tpb);
        let [bx, by, _] = self.block_dim;
        (Idx3(block), Idx3([t % bx, t / bx % by, t / (bx * by)]))
    }

    /// The region and offset of `n` bytes at `p`, checked against the region's bounds.
    #[inline]
    pub fn locate(&self, p: u64, n: usize) -> Result<(usize, usize), Fault> {
        let (r, off) = unptr(p);
        let Some(region) = self.regions.get(r) else {
            return Err(Fault::Invalid {
                what: format!("a pointer to no allocation ({p:#x})"),
            });
        };
        if off < 0 || off as usize + n > region.data.len() {
            return Err(Fault::OutOfBounds {
                memory: region.name.clone(),
                offset: off,
                bytes: n,
                size: region.data.len(),
            });
        }
        Ok((r, off as usize))
    }

    /// Checks `p` is aligned to `align` bytes (regions start 16-byte aligned).
    pub fn aligned(&self, p: u64, align: usize, what: &str) -> Result<(), Fault> {
        let (r, off) = unptr(p);
        if off.rem_euclid(align as i64) != 0 {
            let memory = self.regions.get(r).map_or("?".into(), |x| x.name.clone());
            return Err(Fault::Misaligned {
                what: what.to_string(),
                memory,
                offset: off,
                align,
            });
        }
        Ok(())
    }

    /// Reads `out.len()` bytes at `p` for `who`, running the checkers.
    pub fn read(&mut self, p: u64, out: &mut [u8], who: Actor) -> Result<(), Fault> {
        let n = out.len();
        let (ri, off) = self.locate(p, n)?;
        self.check_pending(ri, off, n)?;
        let region = &self.regions[ri];
        if let Some(init) = &region.init {
            if let Some(i) = init[off..off + n].iter().position(|b| !b) {
                return Err(Fault::UninitializedRead {
                    memory: region.name.clone(),
                    offset: (off + i) as i64,
                });
            }
        }
        if self.regions[ri].shadow.is_some() {
            self.track(ri, off, n, who, false)?;
        }
        let data = &self.regions[ri].data;
        match n {
            // Fixed sizes compile to plain moves.
            4 => out[..4].copy_from_slice(&data[off..off + 4]),
            8 => out[..8].copy_from_slice(&data[off..off + 8]),
            _ => out.copy_from_slice(&data[off..off + n]),
        }
        Ok(())
    }

    /// Writes `bytes` at `p` for `who`, running the checkers.
    pub fn write(&mut self, p: u64, bytes: &[u8], who: Actor) -> Result<(), Fault> {
        let n = bytes.len();
        let (ri, off) = self.locate(p, n)?;
        self.check_pending(ri, off, n)?;
        self.store(ri, off, bytes, who)
    }

    /// Writes without the pending-copy check (a `cp.async` completing).
    fn store(&mut self, ri: usize, off: usize, bytes: &[u8], who: Actor) -> Result<(), Fault> {
        let n = bytes.len();
        if self.regions[ri].writer.is_some() {
            self.track_output(ri, off, n, who)?;
        }
        if self.regions[ri].shadow.is_some() {
            self.track(ri, off, n, who, true)?;
        }
        let region = &mut self.regions[ri];
        if let Some(init) = &mut region.init {
            init[off..off + n].fill(true);
        }
        region.data[off..off + n].copy_from_slice(bytes);
        Ok(())
    }

    /// Marks the `n` bytes at `p` as targeted by a `cp.async` of thread `g` (they must be
    /// in bounds, not already pending).
    pub fn mark_pending(&mut self, p: u64, n: usize, g: u32) -> Result<(), Fault> {
        let (ri, off) = self.locate(p, n)?;
        self.check_pending(ri, off, n)?;
        if let Some(pend) = &mut self.regions[ri].pending {
            pend[off..off + n].fill(g + 1);
        }
        Ok(())
    }

    /// Completes a `cp.async`: clears the pending marks and writes `bytes` at `p`.
    pub fn complete(&mut self, p: u64, bytes: &[u8], who: Actor) -> Result<(), Fault> {
        let (ri, off) = self.locate(p, bytes.len())?;
        if let Some(pend) = &mut self.regions[ri].pending {
            pend[off..off + bytes.len()].fill(0);
        }
        self.store(ri, off, bytes, who)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sim::error::RaceKind;

    fn memory() -> Memory {
        Memory {
            regions: vec![Region::new(
                "s".into(),
                Space::Shared,
                vec![0; 64],
                4,
                true,
                false,
            )],
            epoch: 1,
            threads_per_block: 64,
            block_dim: [64, 1, 1],
            blocks: vec![[0, 0, 0]],
        }
    }

    fn actor(t: u32) -> Actor {
        Actor {
            g: t,
            block: 0,
            warp: t / 32,
        }
    }

    #[test]
    fn pointers_round_trip_negative_offsets() {
        assert_eq!(unptr(ptr(7, -12)), (7, -12));
        assert_eq!(unptr(ptr(0, 1 << 30)), (0, 1 << 30));
    }

    #[test]
    fn reads_of_poison_and_races_across_warps_are_faults() {
        let mut m = memory();
        let mut b = [0u8; 4];
        assert!(matches!(
            m.read(ptr(0, 0), &mut b, actor(0)),
            Err(Fault::UninitializedRead { .. })
        ));
        m.write(ptr(0, 0), &[1, 2, 3, 4], actor(0)).unwrap();
        // Same warp: ordered by lockstep.
        m.read(ptr(0, 0), &mut b, actor(1)).unwrap();
        assert_eq!(b, [1, 2, 3, 4]);
        assert!(matches!(
            m.read(ptr(0, 0), &mut b, actor(40)),
            Err(Fault::DataRace {
                kind: RaceKind::ReadAfterWrite,
                ..
            })
        ));
        m.epoch += 1;
        m.read(ptr(0, 0), &mut b, actor(40)).unwrap();
        assert!(matches!(
            m.write(ptr(0, 0), &[0; 4], actor(3)),
            Err(Fault::DataRace {
                kind: RaceKind::WriteAfterRead,
                ..
            })
        ));
        assert!(matches!(
            m.read(ptr(0, 62), &mut b, actor(0)),
            Err(Fault::OutOfBounds { .. })
        ));
    }
}
