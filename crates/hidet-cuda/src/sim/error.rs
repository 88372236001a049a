//! The simulator's typed errors.
//!
//! A [`SimError::Fault`] is something the kernel did wrong while it ran: it carries the
//! [`Fault`] (what), the statement (printed with the IR printer), the block and the thread.
//! The other variants are about the launch itself (arguments, unsupported constructs).

use std::fmt;

/// A launch index (`blockIdx` or `threadIdx`): `(x, y, z)`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Idx3(pub [i64; 3]);

impl fmt::Display for Idx3 {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "({}, {}, {})", self.0[0], self.0[1], self.0[2])
    }
}

/// How two accesses of a data race conflict.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RaceKind {
    /// A write after another thread's read.
    WriteAfterRead,
    /// A read after another thread's write.
    ReadAfterWrite,
    /// Two writes.
    WriteAfterWrite,
}

impl fmt::Display for RaceKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            RaceKind::WriteAfterRead => "write after a read by",
            RaceKind::ReadAfterWrite => "read after a write by",
            RaceKind::WriteAfterWrite => "write after a write by",
        })
    }
}

/// What went wrong in one thread (or warp) of a running kernel.
#[derive(thiserror::Error, Debug, Clone, PartialEq)]
pub enum Fault {
    /// Two threads touched one element without a barrier between them (on global memory:
    /// or in two different blocks, which nothing orders), at least one writing.
    #[error("data race on `{memory}` byte {offset}: {kind} thread {other_thread} of block {other_block} in the same barrier interval")]
    DataRace {
        memory: String,
        offset: i64,
        kind: RaceKind,
        other_block: Idx3,
        other_thread: Idx3,
    },
    /// A read of memory nothing has written (shared and register tensors start poisoned,
    /// and so do buffers passed as outputs).
    #[error("read of uninitialised memory: `{memory}` byte {offset}")]
    UninitializedRead { memory: String, offset: i64 },
    /// A read of a variable declared without a value and not assigned since.
    #[error("read of the uninitialised variable `{var}`")]
    UninitializedVariable { var: String },
    /// A read or write of bytes an issued `cp.async` has not yet been waited for.
    #[error("access to `{memory}` byte {offset}, which a cp.async of thread {issuer} still targets (missing cp.async wait)")]
    PendingCpAsync {
        memory: String,
        offset: i64,
        issuer: Idx3,
    },
    /// An access outside the allocation a pointer points into.
    #[error("out-of-bounds access of {bytes} bytes at byte {offset} of `{memory}` ({size} bytes)")]
    OutOfBounds {
        memory: String,
        offset: i64,
        bytes: usize,
        size: usize,
    },
    /// A tensor index outside its dimension (the IR's bounds, stricter than the allocation's).
    #[error("index {index} of dimension {dim} of `{tensor}` is not in 0..{extent}")]
    IndexOutOfBounds {
        tensor: String,
        dim: usize,
        index: i64,
        extent: i64,
    },
    /// An access whose address is not a multiple of what the instruction requires.
    #[error("{what}: byte {offset} of `{memory}` is not aligned to {align} bytes")]
    Misaligned {
        what: String,
        memory: String,
        offset: i64,
        align: usize,
    },
    /// An instruction that needs memory of one kind got a pointer into another.
    #[error("{what} needs {expected} memory, got a pointer into `{memory}`")]
    WrongMemory {
        what: String,
        expected: &'static str,
        memory: String,
    },
    /// `__syncthreads` not reached by every live thread of the block, or warps waiting at
    /// different barriers.
    #[error("divergent barrier: {detail}")]
    DivergentBarrier { detail: String },
    /// A warp-collective operation (shuffle with the full mask, `mma.sync`, `ldmatrix`,
    /// `__syncwarp`) run without all 32 lanes of the warp.
    #[error(
        "divergent {what}: active lanes {active:#010x}, the operation needs all 32 (0xffffffff)"
    )]
    DivergentCollective { what: String, active: u32 },
    /// An element of an output written a second time.
    #[error("output `{tensor}` element {element} written twice (first by thread {first_thread} of block {first_block})")]
    OutputWrittenTwice {
        tensor: String,
        element: i64,
        first_block: Idx3,
        first_thread: Idx3,
    },
    /// An `Assert` statement failed.
    #[error("assertion failed: {message}")]
    AssertFailed { message: String },
    /// Overflow of a signed integer, division by zero, a float converted to an integer
    /// it does not fit, a shift out of range.
    #[error("arithmetic error: {what}")]
    Arithmetic { what: String },
    /// A pointer used as a number, a number used as a pointer, or a malformed operand
    /// that the verifier does not reject.
    #[error("invalid operand: {what}")]
    Invalid { what: String },
}

/// A fault with its context: the statement, printed with the IR printer (its enclosing
/// statements' headers first), the block and the thread.
#[derive(thiserror::Error, Debug, Clone, PartialEq)]
#[error("{fault}\n  in block {block}, thread {thread}, at:\n{}", indent(.stmt))]
pub struct FaultReport {
    pub fault: Fault,
    pub stmt: String,
    pub block: Idx3,
    pub thread: Idx3,
}

/// `text` with every line indented by four spaces.
fn indent(text: &str) -> String {
    text.lines()
        .map(|l| format!("    {l}"))
        .collect::<Vec<_>>()
        .join("\n")
}

/// Errors of [`crate::sim::Simulator`].
#[derive(thiserror::Error, Debug, Clone, PartialEq)]
pub enum SimError {
    /// The kernel faulted: what, where and in which thread (boxed to keep results small).
    #[error("{0}")]
    Fault(Box<FaultReport>),
    /// An output element no simulated thread wrote (checked only when every block ran).
    #[error("output `{tensor}`: {count} elements never written, the first is element {first}")]
    OutputNeverWritten {
        tensor: String,
        first: i64,
        count: usize,
    },
    /// The kernel uses something the simulator does not model (named), so it refuses to
    /// run it rather than run it wrongly.
    #[error("kernel `{kernel}`: the simulator cannot run {what}{}", stmt.as_ref().map(|s| format!(" (at `{s}`)")).unwrap_or_default())]
    Unsupported {
        kernel: String,
        what: String,
        stmt: Option<String>,
    },
    /// The function is not a lowered CUDA kernel.
    #[error("`{function}` is not a lowered CUDA kernel: {reason}")]
    NotAKernel { function: String, reason: String },
    /// The arguments do not match the kernel's parameters.
    #[error("kernel `{kernel}`: {what}")]
    Arguments { kernel: String, what: String },
    /// Verifying or lowering the module failed.
    #[error("preparing the module: {0}")]
    Prepare(String),
}
