//! One block of a launch: its threads' registers and warps run in lockstep.
//!
//! Each warp executes the program's instructions for all its *active* lanes at once, one
//! instruction after the other (lockstep), with the usual SIMT rules:
//! - `if` splits the active mask into the lanes whose condition holds (run first) and the
//!   others (run next); both reconverge at its end;
//! - a loop runs while any lane is active: each iteration runs for the lanes whose extent
//!   is not reached yet;
//! - `return` retires the active lanes for the rest of the kernel.
//!
//! Warps run one at a time, each until it reaches `__syncthreads` or its end. When every
//! warp waits or is done, the barrier opens (the memory's barrier interval advances) and
//! the waiting warps go on. A barrier that not every live thread of a warp reaches, or
//! warps waiting at different barriers, is a [`Fault::DivergentBarrier`].

use super::error::{Fault, FaultReport, Idx3, SimError};
use super::eval::Bits;
use super::memory::{ptr, unptr, Actor, Memory, Space};
use super::program::{Instr, Program, E};
use super::value::{self, Word};
use hidet_ir::dtype::{DataType, ScalarType as S};
use std::collections::VecDeque;

/// A `cp.async` issued and not yet written: the destination and the bytes to write.
#[derive(Clone, Copy)]
pub(crate) struct PendingCopy {
    pub dst: u64,
    pub data: [u8; 16],
    pub len: usize,
}

/// A thread's `cp.async` state: copies not yet committed, committed groups in order.
#[derive(Default)]
pub(crate) struct CpState {
    pub uncommitted: Vec<PendingCopy>,
    pub groups: VecDeque<Vec<PendingCopy>>,
}

enum Frame {
    If {
        saved: u32,
        else_mask: u32,
    },
    For {
        saved: u32,
        iter: i64,
        extents: Box<[i64; 32]>,
    },
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum WarpState {
    Running,
    AtBarrier,
    Done,
}

/// One warp: where it is, which lanes run, which lanes have returned.
pub(crate) struct Warp {
    pc: usize,
    active: u32,
    retired: u32,
    /// Lanes that exist (a block's last warp may be partial).
    exists: u32,
    stack: Vec<Frame>,
    state: WarpState,
}

/// The state of the block being simulated.
pub(crate) struct BlockRun<'a> {
    pub prog: &'a Program,
    pub mem: &'a mut Memory,
    pub regs: Vec<Word>,
    pub init: Vec<bool>,
    pub threads: usize,
    pub block_idx: [i64; 3],
    pub grid: [i64; 3],
    pub block_seq: u32,
    /// Region numbers of the program's shared tensors, and of the dynamic shared memory.
    pub shared_regions: Vec<usize>,
    pub dynamic_region: usize,
    /// Region number of thread 0's first register tensor.
    pub local_base: usize,
    pub cp: Vec<CpState>,
    /// Instructions executed (per warp), for the report.
    pub steps: u64,
}

pub(crate) type F<T> = Result<T, Fault>;

impl BlockRun<'_> {
    /// The `threadIdx` of thread `t`.
    pub fn thread_idx(&self, t: usize) -> [i64; 3] {
        let [bx, by, _] = self.prog.block;
        let t = t as i64;
        [t % bx, t / bx % by, t / (bx * by)]
    }

    /// Who thread `t` is, for the memory checkers.
    #[inline]
    pub fn actor(&self, t: usize) -> Actor {
        let tpb = self.threads as u32;
        Actor {
            g: self.block_seq * tpb + t as u32,
            block: self.block_seq,
            warp: self.block_seq * tpb.div_ceil(32) + (t / 32) as u32,
        }
    }

    /// A fault of thread `t` at op `pc`, with its context.
    pub fn error(&self, fault: Fault, pc: usize, t: usize) -> SimError {
        let stmt = self
            .prog
            .ops
            .get(pc)
            .and_then(|op| self.prog.stmts.get(op.stmt as usize))
            .cloned()
            .unwrap_or_default();
        SimError::Fault(Box::new(FaultReport {
            fault,
            stmt,
            block: Idx3(self.block_idx),
            thread: Idx3(self.thread_idx(t)),
        }))
    }

    /// Runs the block to its end.
    pub fn run(&mut self) -> Result<(), SimError> {
        let n_warps = self.threads.div_ceil(32);
        let mut warps: Vec<Warp> = (0..n_warps)
            .map(|w| {
                let lanes = (self.threads - w * 32).min(32);
                let exists = if lanes == 32 {
                    u32::MAX
                } else {
                    (1u32 << lanes) - 1
                };
                Warp {
                    pc: 0,
                    active: exists,
                    retired: 0,
                    exists,
                    stack: Vec::new(),
                    state: WarpState::Running,
                }
            })
            .collect();
        loop {
            for (w, warp) in warps.iter_mut().enumerate() {
                if warp.state == WarpState::Running {
                    self.run_warp(w, warp)?;
                }
            }
            let mut waiting = warps
                .iter()
                .enumerate()
                .filter(|(_, w)| w.state == WarpState::AtBarrier);
            let Some((w0, first)) = waiting.next() else {
                break;
            };
            let pc0 = first.pc;
            if let Some((w1, other)) = waiting.find(|(_, w)| w.pc != pc0) {
                let detail = format!(
                    "warp {w0} waits at this barrier while warp {w1} waits at another:\n{}",
                    self.prog.stmts[self.prog.ops[other.pc].stmt as usize]
                );
                let lane = (other.active.trailing_zeros() as usize).min(31);
                return Err(self.error(Fault::DivergentBarrier { detail }, pc0, w1 * 32 + lane));
            }
            self.mem.epoch += 1;
            for warp in warps.iter_mut() {
                if warp.state == WarpState::AtBarrier {
                    warp.state = WarpState::Running;
                    warp.pc += 1;
                }
            }
        }
        Ok(())
    }

    /// The lanes of the vector expression `e` in thread `t` (into `out[..lanes]`).
    pub fn eval_vec(&mut self, e: &E, t: usize, out: &mut [Word; 4]) -> F<()> {
        match e {
            E::VSlot(s, lanes) => {
                for (l, o) in out.iter_mut().enumerate().take(*lanes as usize) {
                    *o = self.slot(s + l as u32, t)?;
                }
            }
            E::Broadcast(a, lanes) => {
                let x = self.eval(a, t)?;
                out[..*lanes as usize].fill(x);
            }
            E::VBinary(op, ty, lanes, a, b) => {
                let (mut x, mut y) = ([0; 4], [0; 4]);
                self.eval_vec(a, t, &mut x)?;
                self.eval_vec(b, t, &mut y)?;
                for (l, o) in out.iter_mut().enumerate().take(*lanes as usize) {
                    *o = value::binary(*op, *ty, x[l], y[l])?;
                }
            }
            E::Select(c, a, b) => {
                if self.eval(c, t)? != 0 {
                    self.eval_vec(a, t, out)?;
                } else {
                    self.eval_vec(b, t, out)?;
                }
            }
            E::Load(a) => {
                let p = self.address(a, t, true)?;
                self.mem
                    .aligned(p, a.dtype.bytes(), "a vector element access")?;
                self.load_lanes(p, a.dtype, t, out)?;
            }
            E::VecLoad(p, dtype) => {
                let p = self.eval(p, t)?;
                self.load_lanes(p, *dtype, t, out)?;
            }
            E::Pack(xs) => {
                for (o, x) in out.iter_mut().zip(xs) {
                    *o = self.eval(x, t)?;
                }
            }
            _ => {
                return Err(Fault::Invalid {
                    what: "a scalar value where a vector is expected".into(),
                })
            }
        }
        Ok(())
    }

    /// Reads `dtype.lanes` consecutive elements at `p` (element-aligned), as the dialect's
    /// `vector_load` helper does.
    fn load_lanes(&mut self, p: u64, dtype: DataType, t: usize, out: &mut [Word; 4]) -> F<()> {
        let eb = dtype.scalar.bytes();
        self.mem.aligned(p, eb, "a vector load")?;
        let mut buf = [0u8; 32];
        let n = eb * dtype.lanes as usize;
        self.mem.read(p, &mut buf[..n], self.actor(t))?;
        for l in 0..dtype.lanes as usize {
            out[l] = value::decode(&buf[l * eb..(l + 1) * eb], dtype.scalar);
        }
        Ok(())
    }

    /// Reads one `ty` element at `p` (naturally aligned).
    #[inline]
    pub fn load(&mut self, p: u64, ty: S, t: usize) -> F<Word> {
        let n = ty.bytes();
        if unptr(p).1 % n as i64 != 0 {
            self.mem.aligned(p, n, "a load")?;
        }
        let mut buf = [0u8; 8];
        self.mem.read(p, &mut buf[..n], self.actor(t))?;
        if ty == S::F32 {
            let v = f32::from_le_bytes([buf[0], buf[1], buf[2], buf[3]]);
            return Ok(value::fw(f64::from(v)));
        }
        Ok(value::decode(&buf[..n], ty))
    }

    /// Writes the `ty` word `w` at `p` (naturally aligned).
    #[inline]
    pub fn store(&mut self, p: u64, ty: S, w: Word, t: usize) -> F<()> {
        let n = ty.bytes();
        if unptr(p).1 % n as i64 != 0 {
            self.mem.aligned(p, n, "a store")?;
        }
        let mut buf = [0u8; 8];
        value::encode(w, ty, &mut buf[..n]);
        self.mem.write(p, &buf[..n], self.actor(t))
    }

    /// Writes `lanes` words of element type `ty` at `p` (element-aligned).
    pub fn store_lanes(&mut self, p: u64, dtype: DataType, ws: &[Word; 4], t: usize) -> F<()> {
        let eb = dtype.scalar.bytes();
        self.mem.aligned(p, eb, "a vector store")?;
        let mut buf = [0u8; 32];
        for l in 0..dtype.lanes as usize {
            value::encode(ws[l], dtype.scalar, &mut buf[l * eb..(l + 1) * eb]);
        }
        self.mem
            .write(p, &buf[..eb * dtype.lanes as usize], self.actor(t))
    }

    /// Runs warp `w` until it reaches a barrier or its end.
    fn run_warp(&mut self, w: usize, warp: &mut Warp) -> Result<(), SimError> {
        let prog = self.prog;
        let base = w * 32;
        macro_rules! lanes {
            ($mask:expr, |$t:ident| $body:expr) => {{
                let mut m = $mask;
                while m != 0 {
                    let lane = m.trailing_zeros() as usize;
                    m &= m - 1;
                    let $t = base + lane;
                    if let Err(f) = $body {
                        return Err(self.error(f, warp.pc, $t));
                    }
                }
            }};
        }
        while warp.pc < prog.ops.len() {
            self.steps += 1;
            let pc = warp.pc;
            let active = warp.active;
            match &prog.ops[pc].instr {
                Instr::Set { slot, lanes, value } => {
                    let (slot, n) = (*slot, *lanes as usize);
                    match value {
                        None => lanes!(active, |t| {
                            for l in 0..n {
                                self.unset_slot(slot + l as u32, t);
                            }
                            F::Ok(())
                        }),
                        Some(v) if n == 1 => {
                            let mut out = [0; 32];
                            self.eval_w(v, base, active, &mut out)
                                .map_err(|(f, t)| self.error(f, pc, t))?;
                            for l in Bits(active) {
                                self.set_slot(slot, base + l, out[l]);
                            }
                        }
                        Some(v) => lanes!(active, |t| {
                            let mut out = [0; 4];
                            self.eval_vec(v, t, &mut out).map(|()| {
                                for (l, x) in out.iter().enumerate().take(n) {
                                    self.set_slot(slot + l as u32, t, *x);
                                }
                            })
                        }),
                    }
                }
                Instr::DeclLocal { slot, local } => {
                    let n_locals = prog.locals.len();
                    lanes!(active, |t| {
                        let r = self.local_base + t * n_locals + local;
                        self.mem.regions[r].reset();
                        self.set_slot(*slot, t, ptr(r, 0));
                        F::Ok(())
                    })
                }
                Instr::DeclShared { slot, shared } => {
                    let r = self.shared_regions[*shared];
                    lanes!(active, |t| {
                        self.set_slot(*slot, t, ptr(r, 0));
                        F::Ok(())
                    })
                }
                Instr::DeclDynamic { slot } => {
                    let r = self.dynamic_region;
                    lanes!(active, |t| {
                        self.set_slot(*slot, t, ptr(r, 0));
                        F::Ok(())
                    })
                }
                Instr::Store {
                    access,
                    value,
                    lanes,
                } => {
                    if *lanes == 1 {
                        let (mut vals, mut ptrs) = ([0; 32], [0; 32]);
                        self.eval_w(value, base, active, &mut vals)
                            .and_then(|()| self.address_w(access, base, active, true, &mut ptrs))
                            .map_err(|(f, t)| self.error(f, pc, t))?;
                        lanes!(active, |t| {
                            let l = t - base;
                            self.store(ptrs[l], access.dtype.scalar, vals[l], t)
                        })
                    } else {
                        lanes!(active, |t| {
                            let mut out = [0; 4];
                            self.eval_vec(value, t, &mut out).and_then(|()| {
                                let p = self.address(access, t, true)?;
                                self.mem.aligned(
                                    p,
                                    access.dtype.bytes(),
                                    "a vector element access",
                                )?;
                                self.store_lanes(p, access.dtype, &out, t)
                            })
                        })
                    }
                }
                Instr::If {
                    cond,
                    else_pc,
                    end_pc,
                } => {
                    if active == 0 {
                        warp.pc = end_pc + 1;
                        continue;
                    }
                    let mut c = [0; 32];
                    self.eval_w(cond, base, active, &mut c)
                        .map_err(|(f, t)| self.error(f, pc, t))?;
                    let taken =
                        Bits(active).fold(0u32, |m, l| if c[l] != 0 { m | 1 << l } else { m });
                    let else_mask = active & !taken;
                    warp.stack.push(Frame::If {
                        saved: active,
                        else_mask,
                    });
                    if taken != 0 {
                        warp.active = taken;
                        warp.pc += 1;
                    } else {
                        warp.active = else_mask;
                        warp.pc = *else_pc;
                    }
                    continue;
                }
                Instr::Else { .. } => {
                    if let Some(Frame::If { else_mask, .. }) = warp.stack.last() {
                        warp.active = else_mask & !warp.retired;
                    }
                }
                Instr::EndIf => {
                    if let Some(Frame::If { saved, .. }) = warp.stack.pop() {
                        warp.active = saved & !warp.retired;
                    }
                }
                Instr::For {
                    slot,
                    extent,
                    end_pc,
                } => {
                    if active == 0 {
                        warp.pc = end_pc + 1;
                        continue;
                    }
                    let mut extents = Box::new([0i64; 32]);
                    let mut run = 0u32;
                    let mut ext = [0; 32];
                    self.eval_w(extent, base, active, &mut ext)
                        .map_err(|(f, t)| self.error(f, pc, t))?;
                    for l in Bits(active) {
                        extents[l] = ext[l] as i64;
                        if extents[l] > 0 {
                            run |= 1 << l;
                            self.set_slot(*slot, base + l, 0);
                        }
                    }
                    if run == 0 {
                        warp.pc = end_pc + 1;
                        continue;
                    }
                    warp.stack.push(Frame::For {
                        saved: active,
                        iter: 0,
                        extents,
                    });
                    warp.active = run;
                }
                Instr::EndFor { begin_pc, slot } => {
                    let retired = warp.retired;
                    let Some(Frame::For {
                        saved,
                        iter,
                        extents,
                    }) = warp.stack.last_mut()
                    else {
                        return Err(self.error(
                            Fault::Invalid {
                                what: "a loop end without its loop".into(),
                            },
                            pc,
                            base,
                        ));
                    };
                    *iter += 1;
                    let i = *iter;
                    let mut run = 0u32;
                    let mut m = *saved & !retired;
                    while m != 0 {
                        let lane = m.trailing_zeros() as usize;
                        m &= m - 1;
                        if i < extents[lane] {
                            run |= 1 << lane;
                        }
                    }
                    if run != 0 {
                        let mut m = run;
                        while m != 0 {
                            let lane = m.trailing_zeros() as usize;
                            m &= m - 1;
                            self.set_slot(*slot, base + lane, i as u64);
                        }
                        warp.active = run;
                        warp.pc = begin_pc + 1;
                        continue;
                    }
                    let saved = *saved;
                    warp.stack.pop();
                    warp.active = saved & !retired;
                }
                Instr::SyncThreads => {
                    let live = warp.exists & !warp.retired;
                    if active != live {
                        let missing = (live & !active).trailing_zeros() as usize;
                        let detail = format!(
                            "thread {} of the same warp is live but does not reach it",
                            Idx3(self.thread_idx(base + missing))
                        );
                        let t = base + (active.trailing_zeros() as usize).min(31);
                        return Err(self.error(Fault::DivergentBarrier { detail }, pc, t));
                    }
                    if live != 0 {
                        warp.state = WarpState::AtBarrier;
                        return Ok(());
                    }
                }
                Instr::SyncWarp => {
                    if active != u32::MAX {
                        let t = base + (active.trailing_zeros() as usize).min(31);
                        return Err(self.error(
                            Fault::DivergentCollective {
                                what: "__syncwarp".into(),
                                active,
                            },
                            pc,
                            t,
                        ));
                    }
                }
                Instr::Eval(e) => match e {
                    E::VecLoad(_, d) if d.lanes > 1 => lanes!(active, |t| {
                        let mut out = [0; 4];
                        self.eval_vec(e, t, &mut out)
                    }),
                    _ => {
                        let mut out = [0; 32];
                        self.eval_w(e, base, active, &mut out)
                            .map_err(|(f, t)| self.error(f, pc, t))?;
                    }
                },
                Instr::Assert { cond, message } => {
                    let mut c = [0; 32];
                    self.eval_w(cond, base, active, &mut c)
                        .map_err(|(f, t)| self.error(f, pc, t))?;
                    if let Some(l) = Bits(active).find(|&l| c[l] == 0) {
                        let fault = Fault::AssertFailed {
                            message: message.clone(),
                        };
                        return Err(self.error(fault, pc, base + l));
                    }
                }
                Instr::Return => {
                    warp.retired |= active;
                    warp.active = 0;
                }
                Instr::Shuffle { .. }
                | Instr::Mma { .. }
                | Instr::LdMatrix { .. }
                | Instr::CpAsync { .. }
                | Instr::CpCommit
                | Instr::CpWait { .. }
                | Instr::VectorStore { .. } => {
                    self.intrinsic(&prog.ops[pc].instr, base, active)
                        .map_err(|(f, t)| self.error(f, pc, t))?;
                }
            }
            warp.pc += 1;
        }
        warp.state = WarpState::Done;
        Ok(())
    }
}

/// Where a pointer points, for the intrinsics' checks.
pub(crate) fn space_of(mem: &Memory, p: u64) -> Option<(Space, String)> {
    let (r, _) = unptr(p);
    mem.regions.get(r).map(|x| (x.space, x.name.clone()))
}
