//! The checkers that watch memory accesses: data races, pending `cp.async` targets and
//! output coverage (the shadow state lives in each [`Region`]; poisoned bytes and bounds
//! are checked by `memory.rs` itself).
//!
//! Races: per element of a global or shared region, the last writer and its barrier
//! interval (`epoch`), and a summary of the readers since: one reader (named in reports),
//! the warp of the readers (or several), the block of the readers (or several). Two
//! accesses to one element, at least one a write, by different threads race when they
//! are in different blocks (nothing orders blocks), or in the same block and barrier
//! interval and different warps. Within a warp, reads and writes are ordered by the
//! lockstep execution; two writes of one element by two lanes of a warp in one interval
//! still race.

use super::error::{Fault, RaceKind};
use super::memory::{Actor, Memory, Region};

/// No thread / no block.
pub(super) const NONE: u32 = u32::MAX;
/// More than one warp / block.
const MULTI: u32 = u32::MAX - 1;

/// The race shadow of one element: its last writer and the readers since (threads as
/// global numbers `g`, see `memory.rs`).
#[derive(Clone, Copy)]
pub(crate) struct Shadow {
    writer: u32,
    w_epoch: u32,
    reader: u32,
    r_epoch: u32,
    r_warp: u32,
    r_block: u32,
}

/// The shadow of an element nobody touched.
pub(super) const FRESH: Shadow = Shadow {
    writer: NONE,
    w_epoch: 0,
    reader: NONE,
    r_epoch: 0,
    r_warp: NONE,
    r_block: NONE,
};

impl Memory {
    fn warp_of(&self, g: u32) -> u32 {
        let tpb = self.threads_per_block;
        (g / tpb) * tpb.div_ceil(32) + (g % tpb) / 32
    }

    fn race(&self, r: &Region, offset: i64, kind: RaceKind, other: u32) -> Fault {
        let (other_block, other_thread) = self.who(other);
        Fault::DataRace {
            memory: r.name.clone(),
            offset,
            kind,
            other_block,
            other_thread,
        }
    }

    pub(super) fn check_pending(&self, ri: usize, off: usize, n: usize) -> Result<(), Fault> {
        let region = &self.regions[ri];
        if let Some(p) = &region.pending {
            if let Some(i) = p[off..off + n].iter().position(|&x| x != 0) {
                let (_, issuer) = self.who(p[off + i] - 1);
                return Err(Fault::PendingCpAsync {
                    memory: region.name.clone(),
                    offset: (off + i) as i64,
                    issuer,
                });
            }
        }
        Ok(())
    }

    pub(super) fn track_output(
        &mut self,
        ri: usize,
        off: usize,
        n: usize,
        who: Actor,
    ) -> Result<(), Fault> {
        let shift = self.regions[ri].shift;
        let (first, last) = (off >> shift, (off + n - 1) >> shift);
        for e in first..=last {
            let prev = self.regions[ri].writer.as_ref().map_or(NONE, |w| w[e]);
            if prev != NONE {
                let (first_block, first_thread) = self.who(prev);
                return Err(Fault::OutputWrittenTwice {
                    tensor: self.regions[ri].name.clone(),
                    element: e as i64,
                    first_block,
                    first_thread,
                });
            }
            if let Some(w) = &mut self.regions[ri].writer {
                w[e] = who.g;
            }
        }
        Ok(())
    }

    /// Updates the race shadow of the elements covering `off..off + n`, failing on a race.
    pub(super) fn track(
        &mut self,
        ri: usize,
        off: usize,
        n: usize,
        who: Actor,
        write: bool,
    ) -> Result<(), Fault> {
        let epoch = self.epoch;
        let tpb = self.threads_per_block;
        let shift = self.regions[ri].shift;
        let (first, last) = (off >> shift, (off + n - 1) >> shift);
        for e in first..=last {
            let s = match &self.regions[ri].shadow {
                Some(sh) => sh[e],
                None => return Ok(()),
            };
            let offset = (e << shift) as i64;
            let other_block = |g: u32| g / tpb != who.block;
            if s.writer != NONE && s.writer != who.g {
                let ordered = !other_block(s.writer)
                    && (s.w_epoch != epoch || (!write && self.warp_of(s.writer) == who.warp));
                if !ordered {
                    let kind = if write {
                        RaceKind::WriteAfterWrite
                    } else {
                        RaceKind::ReadAfterWrite
                    };
                    return Err(self.race(&self.regions[ri], offset, kind, s.writer));
                }
            }
            let mut s = s;
            if write {
                if s.reader != NONE && s.reader != who.g {
                    let race = s.r_block == MULTI
                        || s.r_block != who.block
                        || (s.r_epoch == epoch && (s.r_warp == MULTI || s.r_warp != who.warp));
                    if race {
                        return Err(self.race(
                            &self.regions[ri],
                            offset,
                            RaceKind::WriteAfterRead,
                            s.reader,
                        ));
                    }
                }
                s.writer = who.g;
                s.w_epoch = epoch;
            } else if s.reader == NONE || (s.r_block == who.block && s.r_epoch != epoch) {
                s.reader = who.g;
                s.r_epoch = epoch;
                s.r_warp = who.warp;
                s.r_block = who.block;
            } else {
                if s.r_warp != who.warp {
                    s.r_warp = MULTI;
                }
                if s.r_block != who.block {
                    s.r_block = MULTI;
                }
                s.r_epoch = epoch;
            }
            if let Some(sh) = &mut self.regions[ri].shadow {
                sh[e] = s;
            }
        }
        Ok(())
    }
}
