//! The public face of the simulator: a kernel prepared once ([`Simulator`]), buffers in
//! simulated device memory ([`DeviceBuffer`]), launches ([`Simulator::launch`]).

use super::error::SimError;
use super::memory::{Memory, Region, Space};
use super::program::{compile, ParamKind, Program};
use super::value::{self, fw, round, Word};
use super::warp::{BlockRun, CpState};
use hidet_ir::dtype::{DataType, ScalarType as S};
use hidet_ir::expr::Var;
use hidet_ir::function::{Function, IRModule};
use hidet_ir::interp::Scalar;

/// A buffer of simulated global memory: `dtype` elements stored little-endian, as the
/// device stores them.
#[derive(Clone, Debug, PartialEq)]
pub struct DeviceBuffer {
    dtype: DataType,
    bytes: Vec<u8>,
    output: bool,
}

impl DeviceBuffer {
    /// `len` zeros of `dtype`.
    pub fn zeros(dtype: DataType, len: usize) -> DeviceBuffer {
        DeviceBuffer {
            dtype,
            bytes: vec![0; len * dtype.bytes()],
            output: false,
        }
    }

    /// An output of `len` elements: it starts *poisoned* (a read before a write is a
    /// fault), and the launch checks that each element is written exactly once (never
    /// written: checked only when every block was simulated).
    pub fn output(dtype: DataType, len: usize) -> DeviceBuffer {
        DeviceBuffer {
            output: true,
            ..DeviceBuffer::zeros(dtype, len)
        }
    }

    /// `values` as elements of `dtype`: rounded to nearest even for a float type, `!= 0`
    /// for `bool`, and for an integer type truncated toward zero, saturated to `i64` (NaN
    /// to 0) and wrapped to the type's width.
    pub fn from_f64(dtype: DataType, values: &[f64]) -> DeviceBuffer {
        let eb = dtype.scalar.bytes();
        let mut bytes = vec![0u8; values.len() * eb];
        for (i, &v) in values.iter().enumerate() {
            let w = if dtype.is_float() {
                fw(round(v, dtype.scalar))
            } else if dtype.is_bool() {
                Word::from(v != 0.0)
            } else {
                let bits = (dtype.scalar.bytes() * 8) as u32;
                let wrapped = (v as i64 as u64) & (u64::MAX >> (64 - bits));
                // Sign-extend a signed type's wrapped bits back into a word.
                if dtype.scalar.is_signed() && bits < 64 {
                    (((wrapped << (64 - bits)) as i64) >> (64 - bits)) as u64
                } else {
                    wrapped
                }
            };
            value::encode(w, dtype.scalar, &mut bytes[i * eb..(i + 1) * eb]);
        }
        DeviceBuffer {
            dtype,
            bytes,
            output: false,
        }
    }

    /// A buffer of `dtype` elements stored little-endian in `bytes` (as a device copy of
    /// host memory would be). `None` when `bytes.len()` is not a multiple of the element
    /// size.
    pub fn from_bytes(dtype: DataType, bytes: Vec<u8>) -> Option<DeviceBuffer> {
        bytes
            .len()
            .is_multiple_of(dtype.bytes().max(1))
            .then_some(DeviceBuffer {
                dtype,
                bytes,
                output: false,
            })
    }

    /// The raw little-endian bytes, giving up the buffer.
    pub fn into_bytes(self) -> Vec<u8> {
        self.bytes
    }

    /// An `f32` buffer.
    pub fn from_f32(values: &[f32]) -> DeviceBuffer {
        let bytes = values.iter().flat_map(|v| v.to_le_bytes()).collect();
        DeviceBuffer {
            dtype: DataType::F32,
            bytes,
            output: false,
        }
    }

    /// An integer buffer of type `dtype` (values wrap to its width).
    pub fn from_i64(dtype: DataType, values: &[i64]) -> DeviceBuffer {
        let eb = dtype.scalar.bytes();
        let mut bytes = vec![0u8; values.len() * eb];
        for (i, &v) in values.iter().enumerate() {
            bytes[i * eb..(i + 1) * eb].copy_from_slice(&v.to_le_bytes()[..eb]);
        }
        DeviceBuffer {
            dtype,
            bytes,
            output: false,
        }
    }

    pub fn dtype(&self) -> DataType {
        self.dtype
    }

    /// Number of elements.
    pub fn len(&self) -> usize {
        self.bytes.len() / self.dtype.bytes().max(1)
    }

    pub fn is_empty(&self) -> bool {
        self.bytes.is_empty()
    }

    /// Whether this buffer is checked as an output.
    pub fn is_output(&self) -> bool {
        self.output
    }

    /// The raw little-endian bytes.
    pub fn bytes(&self) -> &[u8] {
        &self.bytes
    }

    /// Every element as `f64` (exact for every type but 64-bit integers beyond 2^53).
    pub fn to_f64(&self) -> Vec<f64> {
        let eb = self.dtype.scalar.bytes();
        self.bytes
            .chunks_exact(eb)
            .map(|c| {
                let w = value::decode(c, self.dtype.scalar);
                if self.dtype.is_float() {
                    value::wf(w)
                } else {
                    value::wi(w, self.dtype.scalar) as f64
                }
            })
            .collect()
    }

    /// Every element of an `f32` buffer (`None` for other types).
    pub fn to_f32(&self) -> Option<Vec<f32>> {
        (self.dtype == DataType::F32).then(|| {
            self.bytes
                .chunks_exact(4)
                .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
                .collect()
        })
    }
}

/// An argument of a launch: a scalar for a scalar parameter, a buffer for a tensor or
/// pointer parameter (written in place).
#[derive(Clone, Debug, PartialEq)]
pub enum SimArg {
    Scalar(Scalar),
    Buffer(DeviceBuffer),
}

impl SimArg {
    /// The buffer of a buffer argument.
    pub fn buffer(&self) -> Option<&DeviceBuffer> {
        match self {
            SimArg::Buffer(b) => Some(b),
            SimArg::Scalar(_) => None,
        }
    }
}

/// Which blocks of the grid a launch simulates.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum BlockSelection {
    /// Every block.
    All,
    /// The corner blocks of the grid (each coordinate first or last: where partial tiles
    /// are) and `random` other blocks drawn with `seed`; the whole grid when it has no more
    /// blocks than that.
    Sample { random: usize, seed: u64 },
}

/// Options of a launch.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LaunchOptions {
    pub blocks: BlockSelection,
    /// Whether to look for data races on global memory. Their shadow state takes 24 bytes
    /// per element of every buffer, which large launches may not want; shared memory is
    /// always checked.
    pub global_races: bool,
}

impl Default for LaunchOptions {
    /// Every block, every checker.
    fn default() -> Self {
        LaunchOptions {
            blocks: BlockSelection::All,
            global_races: true,
        }
    }
}

/// What a launch did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LaunchReport {
    pub grid: [i64; 3],
    pub block: [i64; 3],
    /// Blocks simulated (all of them, or a sample).
    pub blocks_simulated: usize,
    pub blocks_total: usize,
    /// Barrier intervals opened over all simulated blocks.
    pub barriers: u64,
    /// Warp instructions executed.
    pub warp_steps: u64,
}

/// A CUDA kernel prepared for simulation.
///
/// It runs the kernel's lowered IR — the function the CUDA dialect emits — on the CPU with
/// GPU semantics: blocks one after another, inside a block every thread with its own
/// registers and the block's shared memory, warps in lockstep under an active mask, the
/// IR's intrinsics with the semantics of the PTX they are emitted as, and checkers for data
/// races, uninitialised reads, pending `cp.async` targets, out-of-bounds and misaligned
/// accesses, divergent barriers and collectives, and output elements written twice or
/// never. It does not model timing, caches or the order of memory operations between
/// blocks (blocks run one after another; conflicting accesses between blocks are reported
/// as races).
///
/// ```
/// use hidet_cuda::sim::{DeviceBuffer, LaunchOptions, SimArg, Simulator};
/// use hidet_ir::prelude::*;
///
/// let mut fb = FunctionBuilder::cuda_kernel("double", [1, 1, 1], [32, 1, 1]);
/// let x = fb.tensor_param("x", DataType::F32, [32]);
/// let t = Expr::thread_idx(Dim::X);
/// fb.store(&x, [t.clone()], x.at([t]) * 2.0f32);
/// let module = IRModule::new("double", Target::Cuda).with(fb.finish());
///
/// let sim = Simulator::from_module(&module, "double")?;
/// let mut args = [SimArg::Buffer(DeviceBuffer::from_f32(&[1.5; 32]))];
/// sim.launch(&mut args, &LaunchOptions::default())?;
/// assert_eq!(args[0].buffer().and_then(DeviceBuffer::to_f32), Some(vec![3.0; 32]));
/// # Ok::<(), hidet_cuda::sim::SimError>(())
/// ```
#[derive(Debug, Clone)]
pub struct Simulator {
    program: Program,
}

impl Simulator {
    /// Prepares a lowered CUDA kernel (as `hidet_ir::passes::lower_module` leaves it).
    pub fn new(kernel: &Function) -> Result<Simulator, SimError> {
        Ok(Simulator {
            program: compile(kernel)?,
        })
    }

    /// Verifies and lowers `module` exactly as [`crate::emit_cuda`] does and prepares its
    /// kernel named `kernel`.
    pub fn from_module(module: &IRModule, kernel: &str) -> Result<Simulator, SimError> {
        hidet_ir::verify::verify_module(module).map_err(|e| SimError::Prepare(e.to_string()))?;
        let lowered = hidet_ir::passes::lower_module(module.clone())
            .map_err(|e| SimError::Prepare(e.to_string()))?;
        let f = lowered
            .function(kernel)
            .ok_or_else(|| SimError::NotAKernel {
                function: kernel.to_string(),
                reason: format!("module `{}` has no such function", module.name),
            })?;
        Simulator::new(f)
    }

    /// The kernel's name.
    pub fn name(&self) -> &str {
        &self.program.name
    }

    /// The kernel's parameters, in order.
    pub fn params(&self) -> Vec<&Var> {
        self.program.params.iter().map(|p| &p.var).collect()
    }

    fn arg_error(&self, what: String) -> SimError {
        SimError::Arguments {
            kernel: self.program.name.clone(),
            what,
        }
    }

    fn scalar_args(&self, args: &[SimArg]) -> Result<Vec<Option<Word>>, SimError> {
        if args.len() != self.program.params.len() {
            return Err(self.arg_error(format!(
                "{} arguments for {} parameters",
                args.len(),
                self.program.params.len()
            )));
        }
        let mut out = Vec::new();
        for (p, a) in self.program.params.iter().zip(args) {
            out.push(match (&p.kind, a) {
                (ParamKind::Scalar(d), SimArg::Scalar(s)) => {
                    let (w, from) = match *s {
                        Scalar::Bool(b) => (Word::from(b), S::Bool),
                        Scalar::Int(v) => (v as u64, S::I64),
                        Scalar::Float(v) => (fw(v), S::F64),
                    };
                    Some(
                        value::cast(w, from, d.scalar).map_err(|f| {
                            self.arg_error(format!("argument `{}`: {f}", p.var.name()))
                        })?,
                    )
                }
                (ParamKind::Buffer(d), SimArg::Buffer(b)) => {
                    if b.dtype != *d {
                        return Err(self.arg_error(format!(
                            "parameter `{}` takes {d} elements, got a {} buffer",
                            p.var.name(),
                            b.dtype
                        )));
                    }
                    None
                }
                _ => {
                    return Err(self.arg_error(format!(
                        "argument for `{}: {}` of the wrong kind",
                        p.var.name(),
                        p.var.ty()
                    )))
                }
            });
        }
        Ok(out)
    }

    /// The grid of a launch with `args` (the grid may depend on scalar parameters).
    pub fn grid(&self, args: &[SimArg]) -> Result<[i64; 3], SimError> {
        let scalars = self.scalar_args(args)?;
        let value_of = |v: &Var| {
            self.program
                .params
                .iter()
                .zip(&scalars)
                .find(|(p, _)| &p.var == v)
                .and_then(|(p, w)| match (&p.kind, w) {
                    (ParamKind::Scalar(d), Some(w)) if !d.is_float() => {
                        Some(value::wi(*w, d.scalar) as i64)
                    }
                    _ => None,
                })
        };
        let mut grid = [0i64; 3];
        for (g, e) in grid.iter_mut().zip(&self.program.grid) {
            *g = e
                .eval_int(&value_of)
                .map_err(|e| self.arg_error(format!("grid: {e}")))?;
            if *g <= 0 {
                return Err(self.arg_error(format!("grid dimension {g}")));
            }
        }
        Ok(grid)
    }

    /// Simulates one launch with `args` (buffers are updated in place, also when the
    /// launch fails). Fails with the first fault of the first faulting block.
    pub fn launch(
        &self,
        args: &mut [SimArg],
        options: &LaunchOptions,
    ) -> Result<LaunchReport, SimError> {
        let prog = &self.program;
        let scalars = self.scalar_args(args)?;
        let grid = self.grid(args)?;
        let block = prog.block;
        let threads = block.iter().product::<i64>();
        if !(1..=1024).contains(&threads) {
            return Err(self.arg_error(format!("{threads} threads per block (1..=1024)")));
        }
        let threads = threads as usize;
        let value_of = |v: &Var| {
            prog.params
                .iter()
                .zip(&scalars)
                .find(|(p, _)| &p.var == v)
                .and_then(|(p, w)| match (&p.kind, w) {
                    (ParamKind::Scalar(d), Some(w)) if !d.is_float() => {
                        Some(value::wi(*w, d.scalar) as i64)
                    }
                    _ => None,
                })
        };
        let dynamic = prog
            .dynamic_shared_bytes
            .eval_int(&value_of)
            .map_err(|e| self.arg_error(format!("dynamic shared memory: {e}")))?;

        // Regions: buffers, shared tensors, dynamic shared memory, register tensors.
        let mut regions = Vec::new();
        let mut buffer_of_param = vec![None; prog.params.len()];
        for (i, (p, a)) in prog.params.iter().zip(args.iter_mut()).enumerate() {
            if let SimArg::Buffer(b) = a {
                buffer_of_param[i] = Some(regions.len());
                let mut region = Region::new(
                    p.var.name().to_string(),
                    Space::Global,
                    std::mem::take(&mut b.bytes),
                    b.dtype.scalar.bytes(),
                    b.output,
                    b.output,
                );
                if !options.global_races {
                    region.shadow = None;
                }
                regions.push(region);
            }
        }
        let shared_regions: Vec<usize> = prog
            .shared
            .iter()
            .map(|s| {
                regions.push(Region::new(
                    s.name.clone(),
                    Space::Shared,
                    vec![0; s.bytes],
                    s.elem_bytes,
                    true,
                    false,
                ));
                regions.len() - 1
            })
            .collect();
        let dynamic_region = regions.len();
        regions.push(Region::new(
            "dynamic shared memory".into(),
            Space::Shared,
            vec![0; dynamic.max(0) as usize],
            1,
            true,
            false,
        ));
        let local_base = regions.len();
        for t in 0..threads {
            for l in &prog.locals {
                regions.push(Region::new(
                    format!("{} of thread {t}", l.name),
                    Space::Local,
                    vec![0; l.bytes],
                    l.elem_bytes,
                    true,
                    false,
                ));
            }
        }
        let mut mem = Memory {
            regions,
            epoch: 0,
            threads_per_block: threads as u32,
            block_dim: block,
            blocks: Vec::new(),
        };

        let selected = select_blocks(grid, &options.blocks);
        let mut report = LaunchReport {
            grid,
            block,
            blocks_simulated: selected.len(),
            blocks_total: (grid[0] * grid[1] * grid[2]) as usize,
            barriers: 0,
            warp_steps: 0,
        };
        let mut regs = vec![0 as Word; threads * prog.slots];
        let mut init = vec![false; threads * prog.slots];
        let mut result = Ok(());
        for (seq, &block_idx) in selected.iter().enumerate() {
            mem.blocks.push(block_idx);
            mem.epoch += 1;
            let epoch0 = mem.epoch;
            for &r in shared_regions.iter().chain([&dynamic_region]) {
                mem.regions[r].reset();
            }
            init.fill(false);
            for t in 0..threads {
                for (i, (p, w)) in prog.params.iter().zip(&scalars).enumerate() {
                    let at = p.slot as usize * threads + t;
                    init[at] = true;
                    regs[at] = match (w, buffer_of_param[i]) {
                        (Some(w), _) => *w,
                        (None, Some(r)) => super::memory::ptr(r, 0),
                        (None, None) => 0,
                    };
                }
            }
            let mut run = BlockRun {
                prog,
                mem: &mut mem,
                regs: std::mem::take(&mut regs),
                init: std::mem::take(&mut init),
                threads,
                block_idx,
                grid,
                block_seq: seq as u32,
                shared_regions: shared_regions.clone(),
                dynamic_region,
                local_base,
                cp: (0..threads).map(|_| CpState::default()).collect(),
                steps: 0,
            };
            let r = run.run();
            report.warp_steps += run.steps;
            regs = std::mem::take(&mut run.regs);
            init = std::mem::take(&mut run.init);
            report.barriers += u64::from(mem.epoch - epoch0);
            if let Err(e) = r {
                result = Err(e);
                break;
            }
        }
        if result.is_ok() && selected.len() == report.blocks_total {
            for r in &mem.regions {
                if let Some((first, count)) = r.unwritten() {
                    if count > 0 {
                        result = Err(SimError::OutputNeverWritten {
                            tensor: r.name.clone(),
                            first,
                            count,
                        });
                        break;
                    }
                }
            }
        }
        // Give the buffers back.
        for (i, a) in args.iter_mut().enumerate() {
            if let (SimArg::Buffer(b), Some(r)) = (a, buffer_of_param[i]) {
                b.bytes = std::mem::take(&mut mem.regions[r].data);
            }
        }
        result.map(|()| report)
    }
}

/// The blocks of `grid` a launch runs, in launch order (x fastest).
fn select_blocks(grid: [i64; 3], selection: &BlockSelection) -> Vec<[i64; 3]> {
    let all = || {
        let mut v = Vec::new();
        for z in 0..grid[2] {
            for y in 0..grid[1] {
                for x in 0..grid[0] {
                    v.push([x, y, z]);
                }
            }
        }
        v
    };
    match selection {
        BlockSelection::All => all(),
        BlockSelection::Sample { random, seed } => {
            let total = (grid[0] * grid[1] * grid[2]) as usize;
            if total <= 8 + random {
                return all();
            }
            let mut chosen = std::collections::BTreeSet::new();
            for corner in 0..8 {
                let c = [0, 1, 2].map(|d| if corner >> d & 1 == 1 { grid[d] - 1 } else { 0 });
                chosen.insert((c[2], c[1], c[0]));
            }
            let mut state = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
            let target = chosen.len() + random;
            while chosen.len() < target {
                state ^= state >> 12;
                state ^= state << 25;
                state ^= state >> 27;
                let k = (state.wrapping_mul(0x2545_F491_4F6C_DD1D) % total as u64) as i64;
                let x = k % grid[0];
                let y = k / grid[0] % grid[1];
                let z = k / (grid[0] * grid[1]);
                chosen.insert((z, y, x));
            }
            chosen.into_iter().map(|(z, y, x)| [x, y, z]).collect()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn simulators_and_buffers_can_be_shared_between_threads() {
        fn shareable<T: Send + Sync>() {}
        shareable::<Simulator>();
        shareable::<DeviceBuffer>();
        shareable::<SimError>();
    }

    #[test]
    fn samples_hold_the_corners_and_distinct_random_blocks() {
        let blocks = select_blocks([10, 7, 1], &BlockSelection::Sample { random: 5, seed: 3 });
        assert_eq!(blocks.len(), 9);
        for corner in [[0, 0, 0], [9, 0, 0], [0, 6, 0], [9, 6, 0]] {
            assert!(blocks.contains(&corner), "{corner:?}");
        }
        let mut sorted = blocks.clone();
        sorted.dedup();
        assert_eq!(sorted.len(), blocks.len());
        assert_eq!(
            select_blocks([2, 2, 1], &BlockSelection::Sample { random: 5, seed: 3 }).len(),
            4
        );
    }
}
