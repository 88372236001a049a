//! Expressions evaluated for a whole warp at once: each node of a compiled expression is
//! computed for every lane of a mask before the next node, so the interpretation cost of a
//! node is paid once per warp rather than once per thread. `&&`, `||` and `?:` evaluate
//! their later operands only for the lanes that need them (as C does per thread), so a
//! guarded read never runs for a lane its guard excludes.
//!
//! Faults come with the thread that raised them: the first faulting lane of the first
//! node (in evaluation order) that faults.

use super::error::Fault;
use super::memory::{ptr, unptr};
use super::program::{Access, Offset, E};
use super::value::{self, fw, wf, Word};
use super::warp::{BlockRun, F};
use hidet_ir::dtype::ScalarType as S;
use hidet_ir::expr::BinaryOp;

/// One word per lane of a warp.
pub(crate) type Lanes = [Word; 32];

/// A fault and the thread (in the block) it is reported for.
pub(crate) type WF<T> = Result<T, (Fault, usize)>;

/// The lanes of a mask, lowest first.
#[derive(Clone, Copy)]
pub(crate) struct Bits(pub u32);

impl Iterator for Bits {
    type Item = usize;
    #[inline]
    fn next(&mut self) -> Option<usize> {
        if self.0 == 0 {
            return None;
        }
        let lane = self.0.trailing_zeros() as usize;
        self.0 &= self.0 - 1;
        Some(lane)
    }
}

/// The lanes of `mask` whose word in `v` is non-zero.
#[inline]
fn nonzero(mask: u32, v: &Lanes) -> u32 {
    Bits(mask).fold(0, |m, l| if v[l] != 0 { m | 1 << l } else { m })
}

impl BlockRun<'_> {
    /// Variable `slot` of thread `t`.
    #[inline]
    pub(crate) fn slot(&self, slot: u32, t: usize) -> F<Word> {
        let i = slot as usize * self.threads + t;
        if !self.init[i] {
            return Err(Fault::UninitializedVariable {
                var: self.prog.slot_names[slot as usize].clone(),
            });
        }
        Ok(self.regs[i])
    }

    /// Sets variable `slot` of thread `t`.
    #[inline]
    pub(crate) fn set_slot(&mut self, slot: u32, t: usize, w: Word) {
        let i = slot as usize * self.threads + t;
        self.regs[i] = w;
        self.init[i] = true;
    }

    /// Marks variable `slot` of thread `t` unassigned.
    #[inline]
    pub(crate) fn unset_slot(&mut self, slot: u32, t: usize) {
        self.init[slot as usize * self.threads + t] = false;
    }

    /// The value of the scalar (or pointer) expression `e` in thread `t` alone.
    pub(crate) fn eval(&mut self, e: &E, t: usize) -> F<Word> {
        let (base, lane) = (t - t % 32, t % 32);
        let mut out = [0; 32];
        self.eval_w(e, base, 1 << lane, &mut out)
            .map_err(|(f, _)| f)?;
        Ok(out[lane])
    }

    /// The value of the scalar (or pointer) expression `e` in the lanes `mask` of the warp
    /// whose first thread is `base`, into `out` (other lanes of `out` are unspecified).
    pub(crate) fn eval_w(&mut self, e: &E, base: usize, mask: u32, out: &mut Lanes) -> WF<()> {
        if mask == 0 {
            return Ok(());
        }
        let at = |lane: usize| base + lane;
        match e {
            E::Const(w) => *out = [*w; 32],
            E::Slot(s) => {
                let row = *s as usize * self.threads + base;
                for l in Bits(mask) {
                    if !self.init[row + l] {
                        let var = self.prog.slot_names[*s as usize].clone();
                        return Err((Fault::UninitializedVariable { var }, at(l)));
                    }
                    out[l] = self.regs[row + l];
                }
            }
            E::Builtin(k) => {
                let d = (*k % 3) as usize;
                for l in Bits(mask) {
                    out[l] = match k / 3 {
                        0 => self.thread_idx(at(l))[d],
                        1 => self.block_idx[d],
                        2 => self.prog.block[d],
                        _ => self.grid[d],
                    } as u64;
                }
            }
            E::Unary(op, ty, a) => {
                self.eval_w(a, base, mask, out)?;
                for l in Bits(mask) {
                    out[l] = value::unary(*op, *ty, out[l]).map_err(|f| (f, at(l)))?;
                }
            }
            E::Binary(op, ty, a, b) => {
                self.eval_w(a, base, mask, out)?;
                let mut y = [0; 32];
                self.eval_w(b, base, mask, &mut y)?;
                binary_lanes(*op, *ty, mask, out, &y).map_err(|(f, l)| (f, at(l)))?;
            }
            E::Cmp(op, ta, tb, a, b) => {
                self.eval_w(a, base, mask, out)?;
                let mut y = [0; 32];
                self.eval_w(b, base, mask, &mut y)?;
                for l in Bits(mask) {
                    out[l] = Word::from(compare_mixed(*op, *ta, out[l], *tb, y[l]));
                }
            }
            E::And(a, b) | E::Or(a, b) => {
                let and = matches!(e, E::And(..));
                self.eval_w(a, base, mask, out)?;
                let first = nonzero(mask, out);
                // `b` decides where `a` does not.
                let rest = if and { first } else { mask & !first };
                let mut y = [0; 32];
                self.eval_w(b, base, rest, &mut y)?;
                let second = nonzero(rest, &y);
                let result = if and { second } else { first | second };
                for l in Bits(mask) {
                    out[l] = Word::from(result >> l & 1 == 1);
                }
            }
            E::Select(c, a, b) => {
                let mut cv = [0; 32];
                self.eval_w(c, base, mask, &mut cv)?;
                let taken = nonzero(mask, &cv);
                self.eval_w(a, base, taken, out)?;
                let mut y = [0; 32];
                let other = mask & !taken;
                self.eval_w(b, base, other, &mut y)?;
                for l in Bits(other) {
                    out[l] = y[l];
                }
            }
            E::Cast(from, to, a) => {
                self.eval_w(a, base, mask, out)?;
                for l in Bits(mask) {
                    out[l] = value::cast(out[l], *from, *to).map_err(|f| (f, at(l)))?;
                }
            }
            E::Math(f, ty, args) => {
                let mut xs = [[0; 32]; 3];
                for (i, a) in args.iter().enumerate().take(3) {
                    self.eval_w(a, base, mask, &mut xs[i])?;
                }
                let n = args.len().min(3);
                for l in Bits(mask) {
                    let lane_args = [xs[0][l], xs[1][l], xs[2][l]];
                    out[l] = value::math(*f, *ty, &lane_args[..n]).map_err(|x| (x, at(l)))?;
                }
            }
            E::Load(a) => {
                self.address_w(a, base, mask, true, out)?;
                for l in Bits(mask) {
                    out[l] = self
                        .load(out[l], a.dtype.scalar, at(l))
                        .map_err(|f| (f, at(l)))?;
                }
            }
            E::Addr(a) => self.address_w(a, base, mask, false, out)?,
            E::VecLoad(p, dtype) if dtype.lanes == 1 => {
                self.eval_w(p, base, mask, out)?;
                for l in Bits(mask) {
                    out[l] = self
                        .load(out[l], dtype.scalar, at(l))
                        .map_err(|f| (f, at(l)))?;
                }
            }
            E::Lane(v, lane) => {
                for l in Bits(mask) {
                    let mut lanes = [0; 4];
                    self.eval_vec(v, at(l), &mut lanes)
                        .map_err(|f| (f, at(l)))?;
                    out[l] = lanes[usize::from(*lane)];
                }
            }
            E::VSlot(..) | E::VBinary(..) | E::Broadcast(..) | E::VecLoad(..) | E::Pack(..) => {
                let what = "a vector value where a scalar is expected".to_string();
                return Err((Fault::Invalid { what }, at(mask.trailing_zeros() as usize)));
            }
        }
        Ok(())
    }

    /// The address of an access in thread `t` alone.
    pub(crate) fn address(&mut self, a: &Access, t: usize, check: bool) -> F<u64> {
        let mut p = [0; 32];
        self.address_w(a, t - t % 32, 1 << (t % 32), check, &mut p)
            .map_err(|(f, _)| f)?;
        Ok(p[t % 32])
    }

    /// The addresses of an access in the lanes `mask`; `check` tests each index against
    /// its dimension.
    pub(crate) fn address_w(
        &mut self,
        a: &Access,
        base: usize,
        mask: u32,
        check: bool,
        out: &mut Lanes,
    ) -> WF<()> {
        let mut bases = [0; 32];
        self.eval_w(&E::Slot(a.base), base, mask, &mut bases)?;
        let mut off = [0i64; 32];
        let mut idx = [0; 32];
        let check_dim = |this: &mut Self, d: usize, idx: &Lanes| -> WF<()> {
            let Some(extents) = &a.extents else {
                return Ok(());
            };
            let mut ext = [0; 32];
            this.eval_w(&extents[d], base, mask, &mut ext)?;
            for l in Bits(mask) {
                let (i, n) = (idx[l] as i64, ext[l] as i64);
                if i < 0 || i >= n {
                    let fault = Fault::IndexOutOfBounds {
                        tensor: a.tensor.clone(),
                        dim: d,
                        index: i,
                        extent: n,
                    };
                    return Err((fault, base + l));
                }
            }
            Ok(())
        };
        match &a.offset {
            Offset::Index => {
                self.eval_w(&a.indices[0], base, mask, &mut idx)?;
                for l in Bits(mask) {
                    off[l] = idx[l] as i64;
                }
            }
            Offset::Strides(strides) => {
                for (d, (ie, se)) in a.indices.iter().zip(strides).enumerate() {
                    self.eval_w(ie, base, mask, &mut idx)?;
                    if check {
                        check_dim(self, d, &idx)?;
                    }
                    if let E::Const(s) = se {
                        let s = *s as i64;
                        for l in Bits(mask) {
                            off[l] = off[l].wrapping_add((idx[l] as i64).wrapping_mul(s));
                        }
                    } else {
                        let mut st = [0; 32];
                        self.eval_w(se, base, mask, &mut st)?;
                        for l in Bits(mask) {
                            off[l] =
                                off[l].wrapping_add((idx[l] as i64).wrapping_mul(st[l] as i64));
                        }
                    }
                }
            }
            Offset::Expr(oe) => {
                if check {
                    for (d, ie) in a.indices.iter().enumerate() {
                        self.eval_w(ie, base, mask, &mut idx)?;
                        check_dim(self, d, &idx)?;
                    }
                }
                self.eval_w(oe, base, mask, &mut idx)?;
                for l in Bits(mask) {
                    off[l] = idx[l] as i64;
                }
            }
        }
        let eb = a.dtype.bytes() as i64;
        for l in Bits(mask) {
            let (r, o) = unptr(bases[l]);
            out[l] = ptr(r, o.wrapping_add(off[l].wrapping_mul(eb)));
        }
        Ok(())
    }
}

/// `x[l] = x[l] op y[l]` for the lanes of `mask`, with fast paths for the index and `f32`
/// arithmetic that dominates kernels; a fault comes with its lane.
fn binary_lanes(
    op: BinaryOp,
    ty: S,
    mask: u32,
    x: &mut Lanes,
    y: &Lanes,
) -> Result<(), (Fault, usize)> {
    macro_rules! each {
        (|$a:ident, $b:ident| $e:expr) => {
            for l in Bits(mask) {
                let ($a, $b) = (x[l], y[l]);
                x[l] = $e;
            }
        };
    }
    match (op, ty) {
        (BinaryOp::Add, S::F32) => each!(|a, b| fw(f64::from(wf(a) as f32 + wf(b) as f32))),
        (BinaryOp::Sub, S::F32) => each!(|a, b| fw(f64::from(wf(a) as f32 - wf(b) as f32))),
        (BinaryOp::Mul, S::F32) => each!(|a, b| fw(f64::from(wf(a) as f32 * wf(b) as f32))),
        (BinaryOp::Add | BinaryOp::Sub | BinaryOp::Mul, S::I32 | S::I64) => {
            for l in Bits(mask) {
                let (a, b) = (x[l] as i64, y[l] as i64);
                let r = match op {
                    BinaryOp::Add => a.checked_add(b),
                    BinaryOp::Sub => a.checked_sub(b),
                    _ => a.checked_mul(b),
                };
                x[l] = match r {
                    Some(r) if ty == S::I64 || i32::try_from(r).is_ok() => r as u64,
                    _ => value::binary(op, ty, x[l], y[l]).map_err(|f| (f, l))?,
                };
            }
        }
        // Bitwise operations of two values of one signed type fit that type.
        (BinaryOp::BitAnd, S::I32 | S::I64) => each!(|a, b| a & b),
        (BinaryOp::BitOr, S::I32 | S::I64) => each!(|a, b| a | b),
        (BinaryOp::BitXor, S::I32 | S::I64) => each!(|a, b| a ^ b),
        // Floor division and modulo by a positive divisor (index arithmetic): the
        // Euclidean ones agree with floor semantics there.
        (BinaryOp::Div | BinaryOp::Mod | BinaryOp::Shr, S::I32 | S::I64) => {
            for l in Bits(mask) {
                let (a, b) = (x[l] as i64, y[l] as i64);
                x[l] = match op {
                    BinaryOp::Div if b > 0 => a.div_euclid(b) as u64,
                    BinaryOp::Mod if b > 0 => a.rem_euclid(b) as u64,
                    BinaryOp::Shr if (0..32).contains(&b) => (a >> b) as u64,
                    _ => value::binary(op, ty, x[l], y[l]).map_err(|f| (f, l))?,
                };
            }
        }
        _ => {
            for l in Bits(mask) {
                x[l] = value::binary(op, ty, x[l], y[l]).map_err(|f| (f, l))?;
            }
        }
    }
    Ok(())
}

/// `a op b` for an `ta` and a `tb` word: as integers when both are integers (or bools),
/// else as floats.
pub(crate) fn compare_mixed(op: BinaryOp, ta: S, a: Word, tb: S, b: Word) -> bool {
    if ta == tb {
        return value::compare(op, ta, a, b);
    }
    let as_f = |w: Word, t: S| {
        if t.is_float() {
            value::wf(w)
        } else {
            value::wi(w, t) as f64
        }
    };
    if !ta.is_float() && !tb.is_float() {
        let (x, y) = (value::wi(a, ta), value::wi(b, tb));
        return match op {
            BinaryOp::Eq => x == y,
            BinaryOp::Ne => x != y,
            BinaryOp::Lt => x < y,
            BinaryOp::Le => x <= y,
            BinaryOp::Gt => x > y,
            _ => x >= y,
        };
    }
    value::compare(op, S::F64, value::fw(as_f(a, ta)), value::fw(as_f(b, tb)))
}
