//! The CUDA intrinsics of the IR, with the semantics of the PTX the dialect emits.
//!
//! - Warp shuffles (`__shfl*_sync(0xffffffff, v, x, width)`): PTX `shfl.sync` with the
//!   segment mask of `width`; a source lane outside the lane's segment (or below it, for
//!   `up`) gives the lane its own value. The full mask requires all 32 lanes active.
//! - `mma.sync.aligned.m16n8k{8,16}.row.col`: each lane's fragment registers are read
//!   through its pointers and placed by the PTX ISA's fragment layouts (`groupID = lane / 4`,
//!   `threadID_in_group = lane % 4`); products are exact and summed in `f64`, then rounded
//!   once to the accumulator type (hardware accumulates with its own internal precision:
//!   identical whenever the sums are exact, e.g. integer-valued data); `tf32` inputs keep
//!   the 10 mantissa bits of tf32 (the low 13 bits of the `f32` are dropped).
//! - `ldmatrix.sync.aligned.m8n8.x{1,2,4}[.trans].shared.b16`: lanes `8i..8i+8` give the
//!   16-byte-aligned row addresses (in shared memory) of matrix `i`; lane `l` receives, in
//!   its register `i`, elements `(l / 4, 2(l % 4) + {0, 1})` of matrix `i`, or with `.trans`
//!   elements `(2(l % 4) + {0, 1}, l / 4)`.
//! - `cp.async` of 4, 8 or 16 bytes global → shared, both addresses aligned to the size:
//!   the source's first `src_bytes` bytes are read when the copy is issued, the rest is
//!   zero; the destination bytes are *pending* (any access to them is a fault) until a
//!   `cp.async.wait_group n` of the issuing thread leaves at most `n` younger committed
//!   groups, when they are written. Copies not yet committed are not waited for.
//! - `vector_store`: the lanes of a vector at an element-aligned address.
//!
//! Fragment registers are read and written through the pointers the IR passes, as the
//! emitted helpers do (`uint32_t*` casts): they must be 4-byte aligned.

use super::error::Fault;
use super::memory::Space;
use super::program::Instr;
use super::value::{self, fw};
use super::warp::{space_of, BlockRun, PendingCopy, F};
use half::{bf16, f16};
use hidet_ir::dtype::{DataType, ScalarType as S};
use hidet_ir::intrinsic::{MmaShape, ShuffleKind};

impl BlockRun<'_> {
    /// Runs a warp-level or asynchronous intrinsic for the `active` lanes of the warp whose
    /// first thread is `base`; a fault comes with the thread it is reported for.
    pub(crate) fn intrinsic(
        &mut self,
        instr: &Instr,
        base: usize,
        active: u32,
    ) -> Result<(), (Fault, usize)> {
        let first = base + (active.trailing_zeros() as usize).min(31);
        let full = |what: &str| {
            if active == u32::MAX {
                Ok(())
            } else {
                Err((
                    Fault::DivergentCollective {
                        what: what.to_string(),
                        active,
                    },
                    first,
                ))
            }
        };
        match instr {
            Instr::Shuffle {
                slot,
                kind,
                width,
                value,
                arg,
            } => {
                full(&format!("warp shuffle ({kind:?}, width {width})"))?;
                let (mut vals, mut args) = ([0; 32], [0; 32]);
                self.eval_w(value, base, active, &mut vals)?;
                self.eval_w(arg, base, active, &mut args)?;
                for (lane, &x) in args.iter().enumerate() {
                    let src = shuffle_source(*kind, *width, lane, x as i64);
                    self.set_slot(*slot, base + lane, vals[src]);
                }
                Ok(())
            }
            Instr::Mma {
                shape,
                input,
                acc,
                a,
                b,
                c,
            } => {
                full("mma.sync")?;
                self.mma(*shape, *input, *acc, [a, b, c], base)
            }
            Instr::LdMatrix {
                count,
                trans,
                dst,
                src,
            } => {
                full("ldmatrix")?;
                self.ldmatrix(*count as usize, *trans, dst, src, base)
            }
            Instr::CpAsync {
                bytes,
                dst,
                src,
                src_bytes,
            } => {
                let mut m = active;
                while m != 0 {
                    let t = base + m.trailing_zeros() as usize;
                    m &= m - 1;
                    self.cp_async(*bytes as usize, dst, src, src_bytes, t)
                        .map_err(|f| (f, t))?;
                }
                Ok(())
            }
            Instr::CpCommit => {
                let mut m = active;
                while m != 0 {
                    let t = base + m.trailing_zeros() as usize;
                    m &= m - 1;
                    let group = std::mem::take(&mut self.cp[t].uncommitted);
                    self.cp[t].groups.push_back(group);
                }
                Ok(())
            }
            Instr::CpWait { n } => {
                let mut m = active;
                while m != 0 {
                    let t = base + m.trailing_zeros() as usize;
                    m &= m - 1;
                    while self.cp[t].groups.len() > *n as usize {
                        let group = self.cp[t].groups.pop_front().unwrap_or_default();
                        for copy in group {
                            let who = self.actor(t);
                            self.mem
                                .complete(copy.dst, &copy.data[..copy.len], who)
                                .map_err(|f| (f, t))?;
                        }
                    }
                }
                Ok(())
            }
            Instr::VectorStore { ptr, value, dtype } => {
                let mut m = active;
                while m != 0 {
                    let t = base + m.trailing_zeros() as usize;
                    m &= m - 1;
                    let r: F<()> = (|| {
                        let p = self.eval(ptr, t)?;
                        if dtype.lanes == 1 {
                            let w = self.eval(value, t)?;
                            return self.store(p, dtype.scalar, w, t);
                        }
                        let mut out = [0; 4];
                        self.eval_vec(value, t, &mut out)?;
                        self.store_lanes(p, *dtype, &out, t)
                    })();
                    r.map_err(|f| (f, t))?;
                }
                Ok(())
            }
            _ => Ok(()),
        }
    }

    fn expect_space(&self, p: u64, space: Space, what: &str) -> F<()> {
        match space_of(self.mem, p) {
            Some((s, _)) if s == space => Ok(()),
            other => Err(Fault::WrongMemory {
                what: what.to_string(),
                expected: match space {
                    Space::Global => "global",
                    Space::Shared => "shared",
                    Space::Local => "register",
                },
                memory: other.map_or_else(|| format!("{p:#x}"), |(_, name)| name),
            }),
        }
    }

    fn cp_async(
        &mut self,
        bytes: usize,
        dst: &super::program::E,
        src: &super::program::E,
        src_bytes: &super::program::E,
        t: usize,
    ) -> F<()> {
        let d = self.eval(dst, t)?;
        let s = self.eval(src, t)?;
        let n = self.eval(src_bytes, t)? as i64;
        self.expect_space(d, Space::Shared, "cp.async's destination")?;
        self.mem.aligned(d, bytes, "cp.async's destination")?;
        if !(0..=bytes as i64).contains(&n) {
            return Err(Fault::Invalid {
                what: format!("cp.async of {bytes} bytes with src_bytes {n}"),
            });
        }
        let mut data = [0u8; 16];
        if n > 0 {
            self.expect_space(s, Space::Global, "cp.async's source")?;
            self.mem.aligned(s, bytes, "cp.async's source")?;
            let who = self.actor(t);
            self.mem.read(s, &mut data[..n as usize], who)?;
        }
        let g = self.actor(t).g;
        self.mem.mark_pending(d, bytes, g)?;
        self.cp[t].uncommitted.push(PendingCopy {
            dst: d,
            data,
            len: bytes,
        });
        Ok(())
    }

    /// Reads `n` 32-bit registers of thread `t` at `p`.
    fn regs_of(&mut self, p: u64, n: usize, t: usize) -> F<[u32; 4]> {
        self.mem.aligned(p, 4, "mma's fragment registers")?;
        let mut buf = [0u8; 16];
        let who = self.actor(t);
        self.mem.read(p, &mut buf[..4 * n], who)?;
        let mut out = [0u32; 4];
        for (i, o) in out.iter_mut().enumerate().take(n) {
            *o = u32::from_le_bytes([buf[4 * i], buf[4 * i + 1], buf[4 * i + 2], buf[4 * i + 3]]);
        }
        Ok(out)
    }

    fn mma(
        &mut self,
        shape: MmaShape,
        input: DataType,
        acc: DataType,
        ptrs: [&super::program::E; 3],
        base: usize,
    ) -> Result<(), (Fault, usize)> {
        let k16 = shape == MmaShape::M16N8K16;
        let (a_regs, b_regs, c_regs) = match (input.scalar, acc.scalar, k16) {
            (S::F16 | S::BF16, S::F32, false) => (2, 1, 4),
            (S::F16 | S::BF16, S::F32, true) => (4, 2, 4),
            (S::F16, S::F16, false) => (2, 1, 2),
            (S::F16, S::F16, true) => (4, 2, 2),
            (S::F32, S::F32, false) => (4, 2, 4),
            _ => {
                return Err((
                    Fault::Invalid {
                        what: format!("mma {shape:?} with {input} inputs and {acc} accumulators"),
                    },
                    base,
                ))
            }
        };
        let k = if k16 { 16 } else { 8 };
        let mut a = [[0f64; 16]; 16];
        let mut b = [[0f64; 8]; 16];
        let mut c = [[0f64; 8]; 16];
        let mut addr = [[0u64; 3]; 32];
        for (lane, at) in addr.iter_mut().enumerate() {
            let t = base + lane;
            for (i, p) in ptrs.iter().enumerate() {
                at[i] = self.eval(p, t).map_err(|f| (f, t))?;
            }
            let (group, tig) = (lane / 4, lane % 4);
            let ra = self.regs_of(at[0], a_regs, t).map_err(|f| (f, t))?;
            let rb = self.regs_of(at[1], b_regs, t).map_err(|f| (f, t))?;
            let rc = self.regs_of(at[2], c_regs, t).map_err(|f| (f, t))?;
            if input.scalar == S::F32 {
                // tf32 m16n8k8: a0..a3, b0..b1, one element per register.
                for (i, &r) in ra.iter().enumerate().take(4) {
                    let row = group + 8 * (i % 2);
                    let col = tig + 4 * (i / 2);
                    a[row][col] = tf32(r);
                }
                for (i, &r) in rb.iter().enumerate().take(2) {
                    b[tig + 4 * i][group] = tf32(r);
                }
            } else {
                let half = |bits: u16| half_value(bits, input.scalar);
                for i in 0..2 * a_regs {
                    let bits = (ra[i / 2] >> (16 * (i % 2))) as u16;
                    let row = group + if matches!(i, 2 | 3 | 6 | 7) { 8 } else { 0 };
                    let col = tig * 2 + (i & 1) + if i >= 4 { 8 } else { 0 };
                    a[row][col] = half(bits);
                }
                for i in 0..2 * b_regs {
                    let bits = (rb[i / 2] >> (16 * (i % 2))) as u16;
                    let row = tig * 2 + (i & 1) + if i >= 2 { 8 } else { 0 };
                    b[row][group] = half(bits);
                }
            }
            for i in 0..4 {
                let row = group + if i >= 2 { 8 } else { 0 };
                let col = tig * 2 + (i & 1);
                c[row][col] = if acc.scalar == S::F32 {
                    f64::from(f32::from_bits(rc[i]))
                } else {
                    half_value((rc[i / 2] >> (16 * (i % 2))) as u16, S::F16)
                };
            }
        }
        let mut d = [[0f64; 8]; 16];
        for (i, row) in d.iter_mut().enumerate() {
            for (j, x) in row.iter_mut().enumerate() {
                let mut s = c[i][j];
                for kk in 0..k {
                    s += a[i][kk] * b[kk][j];
                }
                *x = value::round(s, acc.scalar);
            }
        }
        for (lane, at) in addr.iter().enumerate() {
            let t = base + lane;
            let (group, tig) = (lane / 4, lane % 4);
            let mut out = [0u8; 16];
            for i in 0..4 {
                let v = d[group + if i >= 2 { 8 } else { 0 }][tig * 2 + (i & 1)];
                if acc.scalar == S::F32 {
                    out[4 * i..4 * i + 4].copy_from_slice(&(v as f32).to_le_bytes());
                } else {
                    value::encode(fw(v), S::F16, &mut out[2 * i..2 * i + 2]);
                }
            }
            let who = self.actor(t);
            self.mem
                .write(at[2], &out[..4 * c_regs], who)
                .map_err(|f| (f, t))?;
        }
        Ok(())
    }

    fn ldmatrix(
        &mut self,
        count: usize,
        trans: bool,
        dst: &super::program::E,
        src: &super::program::E,
        base: usize,
    ) -> Result<(), (Fault, usize)> {
        // rows[i][r]: the 8 b16 elements of row r of matrix i.
        let mut rows = [[[0u16; 8]; 8]; 4];
        for lane in 0..8 * count {
            let t = base + lane;
            let r: F<()> = (|| {
                let p = self.eval(src, t)?;
                self.expect_space(p, Space::Shared, "ldmatrix's row address")?;
                self.mem.aligned(p, 16, "ldmatrix's row address")?;
                let mut buf = [0u8; 16];
                let who = self.actor(t);
                self.mem.read(p, &mut buf, who)?;
                for (e, x) in rows[lane / 8][lane % 8].iter_mut().enumerate() {
                    *x = u16::from_le_bytes([buf[2 * e], buf[2 * e + 1]]);
                }
                Ok(())
            })();
            r.map_err(|f| (f, t))?;
        }
        for lane in 0..32 {
            let t = base + lane;
            let r: F<()> = (|| {
                let p = self.eval(dst, t)?;
                self.mem.aligned(p, 4, "ldmatrix's destination registers")?;
                let mut out = [0u8; 16];
                for (i, m) in rows.iter().enumerate().take(count) {
                    let pair = if trans {
                        [m[2 * (lane % 4)][lane / 4], m[2 * (lane % 4) + 1][lane / 4]]
                    } else {
                        [m[lane / 4][2 * (lane % 4)], m[lane / 4][2 * (lane % 4) + 1]]
                    };
                    out[4 * i..4 * i + 2].copy_from_slice(&pair[0].to_le_bytes());
                    out[4 * i + 2..4 * i + 4].copy_from_slice(&pair[1].to_le_bytes());
                }
                let who = self.actor(t);
                self.mem.write(p, &out[..4 * count], who)
            })();
            r.map_err(|f| (f, t))?;
        }
        Ok(())
    }
}

/// The lane a `shfl.sync` lane `lane` reads, for `kind`, `width` and operand `x` (PTX:
/// `segmask = 32 - width`, out-of-segment sources read the lane itself).
pub(crate) fn shuffle_source(kind: ShuffleKind, width: u32, lane: usize, x: i64) -> usize {
    let width = width as i64;
    let lane_i = lane as i64;
    let seg_start = lane_i & !(width - 1);
    let seg_end = seg_start + width - 1;
    let b = x & 31;
    let (j, ok) = match kind {
        ShuffleKind::Up => {
            let j = lane_i - b;
            (j, j >= seg_start)
        }
        ShuffleKind::Down => {
            let j = lane_i + b;
            (j, j <= seg_end)
        }
        ShuffleKind::Xor => {
            let j = lane_i ^ b;
            (j, j <= seg_end)
        }
        ShuffleKind::Idx => {
            let j = seg_start | (b & (width - 1));
            (j, j <= seg_end)
        }
    };
    if ok && (0..32).contains(&j) {
        j as usize
    } else {
        lane
    }
}

/// The value of 16 bits of `f16` or `bf16`.
fn half_value(bits: u16, t: S) -> f64 {
    if t == S::BF16 {
        bf16::from_bits(bits).to_f64()
    } else {
        f16::from_bits(bits).to_f64()
    }
}

/// The tf32 value of an `f32` register (its low 13 mantissa bits dropped).
fn tf32(bits: u32) -> f64 {
    f64::from(f32::from_bits(bits & !0x1fff))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shuffle_sources_follow_ptx_segments() {
        // xor within 32 lanes.
        assert_eq!(shuffle_source(ShuffleKind::Xor, 32, 5, 16), 21);
        // down by 1 with width 16: lane 15 is the end of its segment.
        assert_eq!(shuffle_source(ShuffleKind::Down, 16, 15, 1), 15);
        assert_eq!(shuffle_source(ShuffleKind::Down, 16, 14, 1), 15);
        // up by 2 with width 8: lanes 8, 9 keep their own value.
        assert_eq!(shuffle_source(ShuffleKind::Up, 8, 9, 2), 9);
        assert_eq!(shuffle_source(ShuffleKind::Up, 8, 10, 2), 8);
        // idx 0 with width 32 and 8.
        assert_eq!(shuffle_source(ShuffleKind::Idx, 32, 17, 0), 0);
        assert_eq!(shuffle_source(ShuffleKind::Idx, 8, 17, 3), 19);
    }
}
