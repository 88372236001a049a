//! The tensor-program IR of hidet: data types, expressions, statements,
//! functions and modules; task mappings and data layouts; the kernel-building
//! API. Kernels written here are lowered by [`passes`] and turned into C or
//! CUDA C by the backend crates.

pub mod builder;
pub mod compute;
pub mod dtype;
pub mod expr;
pub mod function;
pub mod fusion;
pub mod inline;
pub mod interp;
pub mod intrinsic;
pub mod layout;
pub mod mapping;
pub mod passes;
pub mod print;
pub mod size_params;
pub mod stmt;
pub mod ty;
pub mod verify;

/// Everything a kernel template usually needs, in one import.
pub mod prelude {
    pub use crate::builder::FunctionBuilder;
    pub use crate::dtype::{DataType, ScalarType};
    pub use crate::expr::{BinaryOp, Builtin, Constant, Dim, Expr, ExprKind, UnaryOp, Var};
    pub use crate::function::{CudaLaunch, Function, FunctionKind, IRModule, Target};
    pub use crate::intrinsic::{Intrinsic, MathFunc, MmaShape, ShuffleKind};
    pub use crate::layout::{column_major, local, row_major, strided, swizzle, Layout};
    pub use crate::mapping::{
        auto_map, column_repeat, column_spatial, repeat, repeat_unrolled, repeat_with, spatial,
        spatial_ranked, TaskMapping,
    };
    pub use crate::stmt::{Barrier, LoopKind, Scope, Stmt};
    pub use crate::ty::{TensorType, Type};
}
