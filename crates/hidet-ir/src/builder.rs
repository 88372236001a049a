//! The kernel-building API: write a kernel template as the program it generates.
//!
//! ```
//! use hidet_ir::prelude::*;
//!
//! // c[i] = a[i] + b[i] for 1000 elements, 4 CPU threads, 250 tasks each.
//! let mut fb = FunctionBuilder::cpu_kernel("vector_add");
//! let a = fb.tensor_param("a", DataType::F32, [1000]);
//! let b = fb.tensor_param("b", DataType::F32, [1000]);
//! let c = fb.tensor_param("c", DataType::F32, [1000]);
//! let threads = spatial([4]).unwrap();
//! let per_thread = repeat([250]).unwrap();
//! fb.for_range_with("t", 4, LoopKind::Parallel, |fb, t| {
//!     fb.for_each((&threads * &per_thread).on(t), |fb, i| {
//!         fb.store(&c, i, a.at(i) + b.at(i));
//!     });
//! });
//! let kernel = fb.finish();
//! assert_eq!(kernel.params.len(), 3);
//! ```

use crate::dtype::DataType;
use crate::expr::{Expr, Var};
use crate::function::{CudaLaunch, Function, FunctionKind};
use crate::intrinsic::Intrinsic;
use crate::layout::{row_major, Layout};
use crate::mapping::MappingOn;
use crate::stmt::{Barrier, LoopKind, Scope, Stmt};
use crate::ty::Type;

/// Builds one [`Function`] statement by statement. Nested bodies are written
/// in closures that receive the builder back.
pub struct FunctionBuilder {
    name: String,
    kind: FunctionKind,
    params: Vec<Var>,
    ret: Type,
    blocks: Vec<Vec<Stmt>>,
}

impl FunctionBuilder {
    fn new(name: impl Into<String>, kind: FunctionKind, ret: Type) -> Self {
        FunctionBuilder {
            name: name.into(),
            kind,
            params: Vec::new(),
            ret,
            blocks: vec![Vec::new()],
        }
    }

    /// An exported CPU kernel.
    pub fn cpu_kernel(name: impl Into<String>) -> Self {
        Self::new(name, FunctionKind::CpuKernel, Type::Void)
    }

    /// A CUDA kernel with `grid` blocks of `block` threads and no dynamic
    /// shared memory (see [`FunctionBuilder::dynamic_shared_bytes`]).
    pub fn cuda_kernel<G: Into<Expr>>(
        name: impl Into<String>,
        grid: [G; 3],
        block: [i64; 3],
    ) -> Self {
        let launch = CudaLaunch {
            grid: grid.map(Into::into),
            block,
            min_blocks_per_sm: None,
            dynamic_shared_bytes: Expr::int(0),
        };
        Self::new(name, FunctionKind::CudaKernel(launch), Type::Void)
    }

    /// A helper function callable from kernels of the same module.
    pub fn internal(name: impl Into<String>, ret: impl Into<Type>) -> Self {
        Self::new(name, FunctionKind::Internal, ret.into())
    }

    /// A host function that launches CUDA kernels.
    pub fn host_launcher(name: impl Into<String>) -> Self {
        Self::new(name, FunctionKind::HostLauncher, Type::Void)
    }

    /// Sets the dynamic shared memory of a CUDA kernel; ignored for other kinds.
    pub fn dynamic_shared_bytes(&mut self, bytes: impl Into<Expr>) {
        if let FunctionKind::CudaKernel(l) = &mut self.kind {
            l.dynamic_shared_bytes = bytes.into();
        }
    }

    /// Sets `__launch_bounds__`' minimum blocks per SM of a CUDA kernel.
    pub fn min_blocks_per_sm(&mut self, blocks: u32) {
        if let FunctionKind::CudaKernel(l) = &mut self.kind {
            l.min_blocks_per_sm = Some(blocks);
        }
    }

    /// Adds a parameter of any type.
    pub fn param(&mut self, name: &str, ty: impl Into<Type>) -> Var {
        let v = Var::new(name, ty);
        self.params.push(v.clone());
        v
    }

    /// Adds an existing variable as the next parameter (for kernels whose
    /// parameter types refer to variables defined elsewhere, such as the
    /// shape variables of a compute definition).
    pub fn param_var(&mut self, var: Var) -> Var {
        self.params.push(var.clone());
        var
    }

    /// Adds a row-major global tensor parameter.
    pub fn tensor_param<I: Into<Expr>>(
        &mut self,
        name: &str,
        dtype: DataType,
        shape: impl IntoIterator<Item = I>,
    ) -> Var {
        self.param(name, Type::tensor(dtype, row_major(shape)))
    }

    /// Adds a global tensor parameter with an explicit layout.
    pub fn tensor_param_with_layout(&mut self, name: &str, dtype: DataType, layout: Layout) -> Var {
        self.param(name, Type::tensor(dtype, layout))
    }

    /// Appends a statement to the current block.
    pub fn push(&mut self, stmt: Stmt) {
        self.blocks
            .last_mut()
            .expect("the builder always has an open block")
            .push(stmt);
    }

    fn nested(&mut self, body: impl FnOnce(&mut Self)) -> Stmt {
        self.blocks.push(Vec::new());
        body(self);
        let stmts = self.blocks.pop().expect("pushed just above");
        Stmt::seq(stmts)
    }

    /// Declares a variable of any type in `scope`, uninitialized.
    pub fn declare(&mut self, name: &str, ty: impl Into<Type>, scope: Scope) -> Var {
        let var = Var::new(name, ty);
        self.push(Stmt::Declare {
            var: var.clone(),
            scope,
            init: None,
        });
        var
    }

    /// Declares a tensor in CUDA shared memory.
    pub fn shared_tensor(&mut self, name: &str, dtype: DataType, layout: Layout) -> Var {
        self.declare(name, Type::tensor(dtype, layout), Scope::Shared)
    }

    /// Declares a tensor in registers (thread-local storage on the CPU).
    pub fn register_tensor(&mut self, name: &str, dtype: DataType, layout: Layout) -> Var {
        self.declare(name, Type::tensor(dtype, layout), Scope::Register)
    }

    /// Declares a tensor view of existing storage starting at pointer `base`.
    pub fn view(
        &mut self,
        name: &str,
        dtype: DataType,
        layout: Layout,
        base: impl Into<Expr>,
    ) -> Var {
        let var = Var::new(name, Type::tensor(dtype, layout));
        self.push(Stmt::Declare {
            var: var.clone(),
            scope: Scope::Global,
            init: Some(base.into()),
        });
        var
    }

    /// Declares a mutable register variable initialized to `init`; its type is `init`'s.
    pub fn var(&mut self, name: &str, init: impl Into<Expr>) -> Var {
        let init = init.into();
        let var = Var::new(name, init.ty());
        self.push(Stmt::Declare {
            var: var.clone(),
            scope: Scope::Register,
            init: Some(init),
        });
        var
    }

    /// Binds `name = value` for the statements written in `body`.
    pub fn let_in(
        &mut self,
        name: &str,
        value: impl Into<Expr>,
        body: impl FnOnce(&mut Self, Expr),
    ) {
        let value = value.into();
        let var = Var::new(name, value.ty());
        let e = var.expr();
        let body = self.nested(|fb| body(fb, e));
        self.push(Stmt::Let {
            var,
            value,
            body: Box::new(body),
        });
    }

    /// `tensor[indices] = value`.
    pub fn store<I: Into<Expr>>(
        &mut self,
        tensor: &Var,
        indices: impl IntoIterator<Item = I>,
        value: impl Into<Expr>,
    ) {
        self.push(Stmt::Store {
            tensor: tensor.clone(),
            indices: indices.into_iter().map(Into::into).collect(),
            value: value.into(),
        });
    }

    /// `var = value`.
    pub fn assign(&mut self, var: &Var, value: impl Into<Expr>) {
        self.push(Stmt::Assign {
            var: var.clone(),
            value: value.into(),
        });
    }

    /// A serial `for name in 0..extent` loop.
    pub fn for_range(
        &mut self,
        name: &str,
        extent: impl Into<Expr>,
        body: impl FnOnce(&mut Self, Expr),
    ) {
        self.for_range_with(name, extent, LoopKind::Serial, body)
    }

    /// A `for name in 0..extent` loop run as `kind`.
    pub fn for_range_with(
        &mut self,
        name: &str,
        extent: impl Into<Expr>,
        kind: LoopKind,
        body: impl FnOnce(&mut Self, Expr),
    ) {
        let var = Var::new(name, DataType::I32);
        let e = var.expr();
        let body = self.nested(|fb| body(fb, e));
        self.push(Stmt::For {
            var,
            extent: extent.into(),
            kind,
            body: Box::new(body),
        });
    }

    /// `for task in mapping.on(worker)`: `body` receives the task's index,
    /// one expression per task dimension.
    pub fn for_each(&mut self, on: MappingOn, body: impl FnOnce(&mut Self, &[Expr])) {
        let names = ["i", "j", "k", "l", "m", "n"];
        let vars: Vec<Var> = (0..on.mapping.rank())
            .map(|d| Var::new(names.get(d).copied().unwrap_or("t"), DataType::I32))
            .collect();
        let exprs: Vec<Expr> = vars.iter().map(Var::expr).collect();
        let body = self.nested(|fb| body(fb, &exprs));
        self.push(Stmt::ForMapping {
            vars,
            mapping: on.mapping,
            worker: on.worker,
            body: Box::new(body),
        });
    }

    /// `if cond { then }`.
    pub fn if_then(&mut self, cond: impl Into<Expr>, then: impl FnOnce(&mut Self)) {
        let then_body = self.nested(then);
        self.push(Stmt::If {
            cond: cond.into(),
            then_body: Box::new(then_body),
            else_body: None,
        });
    }

    /// `if cond { then } else { otherwise }`.
    pub fn if_then_else(
        &mut self,
        cond: impl Into<Expr>,
        then: impl FnOnce(&mut Self),
        otherwise: impl FnOnce(&mut Self),
    ) {
        let then_body = self.nested(then);
        let else_body = self.nested(otherwise);
        self.push(Stmt::If {
            cond: cond.into(),
            then_body: Box::new(then_body),
            else_body: Some(Box::new(else_body)),
        });
    }

    /// `__syncthreads()`.
    pub fn sync_threads(&mut self) {
        self.push(Stmt::Barrier(Barrier::Block));
    }

    /// `__syncwarp()`.
    pub fn sync_warp(&mut self) {
        self.push(Stmt::Barrier(Barrier::Warp));
    }

    /// Calls an intrinsic for its effect.
    pub fn call(&mut self, intrinsic: Intrinsic, args: Vec<Expr>) {
        self.push(Stmt::Evaluate(Expr::call(intrinsic, args)));
    }

    /// Aborts with `message` unless `cond` holds.
    pub fn assert(&mut self, cond: impl Into<Expr>, message: impl Into<String>) {
        self.push(Stmt::Assert {
            cond: cond.into(),
            message: message.into(),
        });
    }

    /// Launches a CUDA kernel of the same module (in a host launcher).
    pub fn launch(&mut self, kernel: &Function, args: Vec<Expr>) {
        if let FunctionKind::CudaKernel(l) = &kernel.kind {
            self.push(Stmt::Launch {
                kernel: kernel.name.clone(),
                grid: l.grid.clone(),
                block: l.block.map(Expr::int),
                shared_bytes: l.dynamic_shared_bytes.clone(),
                args,
            });
        }
    }

    /// `return value`.
    pub fn ret(&mut self, value: impl Into<Expr>) {
        self.push(Stmt::Return(Some(value.into())));
    }

    /// The finished function.
    pub fn finish(mut self) -> Function {
        let body = Stmt::seq(
            self.blocks
                .pop()
                .expect("the root block is never popped early"),
        );
        Function {
            name: self.name,
            kind: self.kind,
            params: self.params,
            ret: self.ret,
            body,
        }
    }
}
