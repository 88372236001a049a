//! Functions and modules.

use crate::expr::{Expr, Var};
use crate::stmt::Stmt;
use crate::ty::Type;

/// The launch configuration of a CUDA kernel.
#[derive(Clone, Debug, PartialEq)]
pub struct CudaLaunch {
    /// Blocks per grid; may depend on the kernel's scalar parameters.
    pub grid: [Expr; 3],
    /// Threads per block; static so that `__launch_bounds__` and the verifier
    /// can use it.
    pub block: [i64; 3],
    /// `__launch_bounds__` minimum resident blocks per SM, if any.
    pub min_blocks_per_sm: Option<u32>,
    /// Bytes of dynamic shared memory requested at launch.
    pub dynamic_shared_bytes: Expr,
}

impl CudaLaunch {
    /// Threads per block.
    pub fn threads_per_block(&self) -> i64 {
        self.block.iter().product()
    }
}

/// What a function is and where it runs.
#[derive(Clone, Debug, PartialEq)]
pub enum FunctionKind {
    /// An exported CPU entry point, called by the runtime with its parameters.
    CpuKernel,
    /// A CUDA `__global__` kernel.
    CudaKernel(CudaLaunch),
    /// A helper called from kernels of the same module (`__device__` on CUDA,
    /// `static inline` on the CPU).
    Internal,
    /// A host function that launches CUDA kernels of the same module.
    HostLauncher,
}

/// A function: parameters, a body and a kind.
#[derive(Clone, Debug, PartialEq)]
pub struct Function {
    pub name: String,
    pub kind: FunctionKind,
    pub params: Vec<Var>,
    pub ret: Type,
    pub body: Stmt,
}

impl Function {
    /// The tensor parameters, in order.
    pub fn tensor_params(&self) -> impl Iterator<Item = &Var> {
        self.params
            .iter()
            .filter(|p| matches!(p.ty(), Type::Tensor(_) | Type::Pointer(_)))
    }

    /// Whether this function runs on a CUDA device.
    pub fn is_cuda(&self) -> bool {
        matches!(self.kind, FunctionKind::CudaKernel(_))
    }
}

/// The target a module is generated for.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Target {
    Cpu,
    Cuda,
}

/// A compilation unit: functions compiled and loaded together.
#[derive(Clone, Debug, PartialEq)]
pub struct IRModule {
    pub name: String,
    pub target: Target,
    pub functions: Vec<Function>,
}

impl IRModule {
    pub fn new(name: impl Into<String>, target: Target) -> IRModule {
        IRModule {
            name: name.into(),
            target,
            functions: Vec::new(),
        }
    }

    /// Adds a function and returns `self` for chaining.
    pub fn with(mut self, f: Function) -> IRModule {
        self.functions.push(f);
        self
    }

    pub fn function(&self, name: &str) -> Option<&Function> {
        self.functions.iter().find(|f| f.name == name)
    }
}
