//! The simulator's form of a kernel: the lowered IR function translated once into a flat
//! instruction list over dense variable slots, so that running it looks nothing up by name.
//!
//! - Every scalar/pointer variable gets a slot (a vector variable one per lane), numbered
//!   densely; each thread has its own copy of every slot.
//! - Structured control flow becomes `If`/`Else`/`EndIf` and `For`/`EndFor` instructions
//!   with jump targets, so a warp can stop at a barrier in the middle of a loop and resume.
//! - A tensor access keeps its index expressions and its layout as stride expressions
//!   (constants for the usual layouts) or, for composed and swizzled layouts, the layout's
//!   offset expression; the element's bounds are the layout's shape.
//! - Warp shuffles are hoisted out of the expressions that contain them into `Shuffle`
//!   instructions before the statement (a shuffle exchanges the values of all 32 lanes, so
//!   it must run for the whole warp at once); the expression reads the result's slot.
//!
//! Constructs the simulator does not model are refused here, each with a
//! [`SimError::Unsupported`] naming it.

use super::error::SimError;
use super::value::{fit, fw, lossless, round, Word};
use hidet_ir::dtype::{DataType, ScalarType as S};
use hidet_ir::expr::{BinaryOp, Builtin, Constant, Dim, Expr, ExprKind, UnaryOp, Var};
use hidet_ir::function::{Function, FunctionKind};
use hidet_ir::intrinsic::{Intrinsic, MathFunc, MmaShape, ShuffleKind};
use hidet_ir::layout::LayoutNode;
use hidet_ir::print::Printer;
use hidet_ir::stmt::{Barrier, LoopKind, Scope, Stmt};
use hidet_ir::ty::Type;
use std::collections::HashMap;

/// A compiled expression. Words are typed statically (see `value.rs`).
#[derive(Debug, Clone)]
pub(crate) enum E {
    Const(Word),
    /// A scalar or pointer variable.
    Slot(u32),
    /// A vector variable: `lanes` consecutive slots.
    VSlot(u32, u16),
    /// `threadIdx`, `blockIdx`, `blockDim`, `gridDim` (0..12: kind·3 + dim).
    Builtin(u8),
    Unary(UnaryOp, S, Box<E>),
    /// Arithmetic or bitwise operation of type `S` (operands already of type `S`, except a
    /// shift amount).
    Binary(BinaryOp, S, Box<E>, Box<E>),
    /// Lane-wise vector arithmetic of element type `S`.
    VBinary(BinaryOp, S, u16, Box<E>, Box<E>),
    /// Comparison of an `S0` and an `S1` value.
    Cmp(BinaryOp, S, S, Box<E>, Box<E>),
    And(Box<E>, Box<E>),
    Or(Box<E>, Box<E>),
    Select(Box<E>, Box<E>, Box<E>),
    Cast(S, S, Box<E>),
    Broadcast(Box<E>, u16),
    Math(MathFunc, S, Vec<E>),
    Load(Box<Access>),
    Addr(Box<Access>),
    /// `vector_load<dtype>(ptr)`.
    VecLoad(Box<E>, DataType),
    /// Lane `u16` of a vector expression (a scalar).
    Lane(Box<E>, u16),
    /// A vector of the scalar expressions, one per lane.
    Pack(Vec<E>),
}

/// A tensor element `tensor[indices]` (or `pointer[index]`).
#[derive(Debug, Clone)]
pub(crate) struct Access {
    /// The slot of the tensor's (or pointer's) base pointer.
    pub base: u32,
    pub tensor: String,
    pub indices: Vec<E>,
    /// Per dimension, the extent to check the index against (`None` for a pointer).
    pub extents: Option<Vec<E>>,
    pub offset: Offset,
    pub dtype: DataType,
}

/// How an access's element offset is computed.
#[derive(Debug, Clone)]
pub(crate) enum Offset {
    /// `Σ index_d · stride_d`.
    Strides(Vec<E>),
    /// The layout's offset expression of the indices.
    Expr(E),
    /// A pointer's single index.
    Index,
}

/// One instruction.
#[derive(Debug, Clone)]
pub(crate) enum Instr {
    /// Sets `lanes` slots from `value`, or marks them uninitialised.
    Set {
        slot: u32,
        lanes: u16,
        value: Option<E>,
    },
    /// A register tensor's declaration: points the slot at this thread's region `local`
    /// and poisons it.
    DeclLocal {
        slot: u32,
        local: usize,
    },
    /// A static shared tensor's declaration.
    DeclShared {
        slot: u32,
        shared: usize,
    },
    /// The dynamic shared memory pointer.
    DeclDynamic {
        slot: u32,
    },
    Store {
        access: Access,
        value: E,
        lanes: u16,
    },
    If {
        cond: E,
        else_pc: usize,
        end_pc: usize,
    },
    Else {
        end_pc: usize,
    },
    EndIf,
    For {
        slot: u32,
        extent: E,
        end_pc: usize,
    },
    /// The end of the loop starting at `begin_pc`, whose variable is `slot`.
    EndFor {
        begin_pc: usize,
        slot: u32,
    },
    SyncThreads,
    SyncWarp,
    Eval(E),
    Assert {
        cond: E,
        message: String,
    },
    Return,
    Shuffle {
        slot: u32,
        kind: ShuffleKind,
        width: u32,
        value: E,
        arg: E,
    },
    Mma {
        shape: MmaShape,
        input: DataType,
        acc: DataType,
        a: E,
        b: E,
        c: E,
    },
    LdMatrix {
        count: u32,
        trans: bool,
        dst: E,
        src: E,
    },
    CpAsync {
        bytes: u32,
        dst: E,
        src: E,
        src_bytes: E,
    },
    CpCommit,
    CpWait {
        n: u32,
    },
    VectorStore {
        ptr: E,
        value: E,
        dtype: DataType,
    },
}

/// An instruction with the statement it comes from (an index into [`Program::stmts`]).
#[derive(Debug, Clone)]
pub(crate) struct Op {
    pub instr: Instr,
    pub stmt: u32,
}

/// How a parameter is passed.
#[derive(Debug, Clone)]
pub(crate) enum ParamKind {
    Scalar(DataType),
    /// A tensor or pointer: a buffer of this element type.
    Buffer(DataType),
}

/// A kernel parameter.
#[derive(Debug, Clone)]
pub(crate) struct Param {
    pub var: Var,
    pub slot: u32,
    pub kind: ParamKind,
}

/// A tensor with storage of its own: a shared tensor (per block) or a register tensor (per
/// thread).
#[derive(Debug, Clone)]
pub(crate) struct Storage {
    pub name: String,
    pub bytes: usize,
    pub elem_bytes: usize,
}

/// A kernel ready to simulate.
#[derive(Debug, Clone)]
pub(crate) struct Program {
    pub name: String,
    pub ops: Vec<Op>,
    /// Printed statements (with their enclosing headers), for errors.
    pub stmts: Vec<String>,
    pub slots: usize,
    pub slot_names: Vec<String>,
    pub params: Vec<Param>,
    pub shared: Vec<Storage>,
    pub locals: Vec<Storage>,
    pub block: [i64; 3],
    pub grid: [Expr; 3],
    pub dynamic_shared_bytes: Expr,
}

type R<T> = Result<T, SimError>;

struct Compiler<'f> {
    name: String,
    ops: Vec<Op>,
    stmts: Vec<String>,
    slots: HashMap<u64, (u32, u16)>,
    slot_names: Vec<String>,
    shared: Vec<Storage>,
    locals: Vec<Storage>,
    printer: Printer,
    path: Vec<&'f Stmt>,
    cur_stmt: u32,
}

/// Translates a lowered CUDA kernel.
pub(crate) fn compile(f: &Function) -> R<Program> {
    let FunctionKind::CudaKernel(launch) = &f.kind else {
        return Err(SimError::NotAKernel {
            function: f.name.clone(),
            reason: "not a CUDA kernel".into(),
        });
    };
    let mut c = Compiler {
        name: f.name.clone(),
        ops: Vec::new(),
        stmts: Vec::new(),
        slots: HashMap::new(),
        slot_names: Vec::new(),
        shared: Vec::new(),
        locals: Vec::new(),
        printer: Printer::for_function(f),
        path: Vec::new(),
        cur_stmt: 0,
    };
    let mut params = Vec::new();
    for p in &f.params {
        let kind = match p.ty() {
            Type::Data(d) if !d.is_vector() => ParamKind::Scalar(*d),
            Type::Tensor(t) => ParamKind::Buffer(t.dtype),
            Type::Pointer(inner) => match inner.as_data() {
                Some(d) => ParamKind::Buffer(d),
                None => return Err(c.unsupported(format!("parameter `{}: {}`", p.name(), p.ty()))),
            },
            other => return Err(c.unsupported(format!("parameter `{}: {other}`", p.name()))),
        };
        let slot = c.new_slot(p, 1);
        params.push(Param {
            var: p.clone(),
            slot,
            kind,
        });
    }
    c.stmt(&f.body)?;
    Ok(Program {
        name: f.name.clone(),
        ops: c.ops,
        stmts: c.stmts,
        slots: c.slot_names.len(),
        slot_names: c.slot_names,
        params,
        shared: c.shared,
        locals: c.locals,
        block: launch.block,
        grid: launch.grid.clone(),
        dynamic_shared_bytes: launch.dynamic_shared_bytes.clone(),
    })
}

fn scalar_of(ty: &Type) -> Option<DataType> {
    ty.as_data()
}

impl<'f> Compiler<'f> {
    fn unsupported(&self, what: impl Into<String>) -> SimError {
        SimError::Unsupported {
            kernel: self.name.clone(),
            what: what.into(),
            stmt: self.path.last().map(|s| Printer::new().stmt_head(s)),
        }
    }

    fn new_slot(&mut self, var: &Var, lanes: u16) -> u32 {
        let slot = self.slot_names.len() as u32;
        for _ in 0..lanes {
            self.slot_names.push(var.name().to_string());
        }
        self.slots.insert(var.id(), (slot, lanes));
        slot
    }

    fn temp_slot(&mut self, name: &str) -> u32 {
        let slot = self.slot_names.len() as u32;
        self.slot_names.push(name.to_string());
        slot
    }

    fn slot_of(&self, var: &Var) -> R<(u32, u16)> {
        self.slots
            .get(&var.id())
            .copied()
            .ok_or_else(|| SimError::NotAKernel {
                function: self.name.clone(),
                reason: format!("variable `{}` is used outside its definition", var.name()),
            })
    }

    fn push(&mut self, instr: Instr) -> usize {
        self.ops.push(Op {
            instr,
            stmt: self.cur_stmt,
        });
        self.ops.len() - 1
    }

    fn stmt(&mut self, s: &'f Stmt) -> R<()> {
        self.path.push(s);
        if !matches!(s, Stmt::Seq(_)) {
            self.stmts.push(self.printer.stmt_path(&self.path));
            self.cur_stmt = (self.stmts.len() - 1) as u32;
        }
        let r = self.stmt_inner(s);
        self.path.pop();
        r
    }

    fn stmt_inner(&mut self, s: &'f Stmt) -> R<()> {
        match s {
            Stmt::Declare { var, scope, init } => self.declare(var, *scope, init.as_ref()),
            Stmt::Store {
                tensor,
                indices,
                value,
            } => {
                let access = self.access(tensor, indices)?;
                let lanes = access.dtype.lanes;
                let value = self.value_as(value, access.dtype)?;
                self.push(Instr::Store {
                    access,
                    value,
                    lanes,
                });
                Ok(())
            }
            Stmt::Assign { var, value } => {
                let (slot, lanes) = self.slot_of(var)?;
                let value = match var.ty() {
                    Type::Data(d) => self.value_as(value, *d)?,
                    _ => self.expr(value)?,
                };
                self.push(Instr::Set {
                    slot,
                    lanes,
                    value: Some(value),
                });
                Ok(())
            }
            Stmt::Let { var, value, body } => {
                let v = match var.ty() {
                    Type::Data(d) => self.value_as(value, *d)?,
                    _ => self.expr(value)?,
                };
                let lanes = scalar_of(var.ty()).map_or(1, |d| d.lanes);
                let slot = self.new_slot(var, lanes);
                self.push(Instr::Set {
                    slot,
                    lanes,
                    value: Some(v),
                });
                self.stmt(body)
            }
            Stmt::For {
                var,
                extent,
                kind,
                body,
            } => {
                if *kind == LoopKind::Parallel {
                    return Err(self.unsupported("a parallel (CPU) loop"));
                }
                let extent = self.expr(extent)?;
                let slot = self.new_slot(var, 1);
                let begin = self.push(Instr::For {
                    slot,
                    extent,
                    end_pc: 0,
                });
                let here = self.cur_stmt;
                self.stmt(body)?;
                self.cur_stmt = here;
                let end = self.push(Instr::EndFor {
                    begin_pc: begin,
                    slot,
                });
                if let Instr::For { end_pc, .. } = &mut self.ops[begin].instr {
                    *end_pc = end;
                }
                Ok(())
            }
            Stmt::ForMapping { .. } => Err(SimError::NotAKernel {
                function: self.name.clone(),
                reason: "it still has task mappings (run hidet_ir::passes::lower_module)".into(),
            }),
            Stmt::If {
                cond,
                then_body,
                else_body,
            } => {
                let cond = self.expr(cond)?;
                let here = self.cur_stmt;
                let at = self.push(Instr::If {
                    cond,
                    else_pc: 0,
                    end_pc: 0,
                });
                self.stmt(then_body)?;
                self.cur_stmt = here;
                let else_at = self.push(Instr::Else { end_pc: 0 });
                if let Some(e) = else_body {
                    self.stmt(e)?;
                    self.cur_stmt = here;
                }
                let end = self.push(Instr::EndIf);
                if let Instr::If {
                    else_pc, end_pc, ..
                } = &mut self.ops[at].instr
                {
                    *else_pc = else_at + 1;
                    *end_pc = end;
                }
                if let Instr::Else { end_pc } = &mut self.ops[else_at].instr {
                    *end_pc = end;
                }
                Ok(())
            }
            Stmt::Seq(stmts) => {
                for st in stmts {
                    self.stmt(st)?;
                }
                Ok(())
            }
            Stmt::Barrier(Barrier::Block) => {
                self.push(Instr::SyncThreads);
                Ok(())
            }
            Stmt::Barrier(Barrier::Warp) => {
                self.push(Instr::SyncWarp);
                Ok(())
            }
            Stmt::Evaluate(e) => self.evaluate(e),
            Stmt::Assert { cond, message } => {
                let cond = self.expr(cond)?;
                self.push(Instr::Assert {
                    cond,
                    message: message.clone(),
                });
                Ok(())
            }
            Stmt::Launch { kernel, .. } => {
                Err(self.unsupported(format!("a kernel launch (of `{kernel}`) inside a kernel")))
            }
            Stmt::Return(None) => {
                self.push(Instr::Return);
                Ok(())
            }
            Stmt::Return(Some(_)) => Err(self.unsupported("a kernel returning a value")),
        }
    }

    fn declare(&mut self, var: &Var, scope: Scope, init: Option<&Expr>) -> R<()> {
        match var.ty() {
            Type::Data(d) => {
                if scope == Scope::Shared {
                    return Err(self.unsupported(format!(
                        "the shared scalar variable `{}` (only shared tensors)",
                        var.name()
                    )));
                }
                if d.lanes > 4 {
                    return Err(self.unsupported(format!("the vector type {d}")));
                }
                let value = init.map(|e| self.value_as(e, *d)).transpose()?;
                let slot = self.new_slot(var, d.lanes);
                self.push(Instr::Set {
                    slot,
                    lanes: d.lanes,
                    value,
                });
            }
            Type::Pointer(_) => {
                if scope == Scope::Shared && init.is_none() {
                    let slot = self.new_slot(var, 1);
                    self.push(Instr::DeclDynamic { slot });
                    return Ok(());
                }
                let value = init.map(|e| self.expr(e)).transpose()?;
                let slot = self.new_slot(var, 1);
                self.push(Instr::Set {
                    slot,
                    lanes: 1,
                    value,
                });
            }
            Type::Tensor(t) => {
                if let Some(e) = init {
                    let value = self.expr(e)?;
                    let slot = self.new_slot(var, 1);
                    self.push(Instr::Set {
                        slot,
                        lanes: 1,
                        value: Some(value),
                    });
                    return Ok(());
                }
                let Some(size) = t.layout.size().as_int() else {
                    return Err(self
                        .unsupported(format!("the tensor `{}` of non-constant size", var.name())));
                };
                let storage = Storage {
                    name: var.name().to_string(),
                    bytes: (size.max(0) as usize) * t.dtype.bytes(),
                    elem_bytes: t.dtype.scalar.bytes(),
                };
                let slot = self.new_slot(var, 1);
                match scope {
                    Scope::Shared => {
                        self.shared.push(storage);
                        let shared = self.shared.len() - 1;
                        self.push(Instr::DeclShared { slot, shared });
                    }
                    Scope::Register => {
                        self.locals.push(storage);
                        let local = self.locals.len() - 1;
                        self.push(Instr::DeclLocal { slot, local });
                    }
                    Scope::Global => {
                        return Err(self.unsupported(format!(
                            "the global tensor `{}` declared without storage",
                            var.name()
                        )))
                    }
                }
            }
            Type::Void => {
                return Err(self.unsupported(format!("the void variable `{}`", var.name())))
            }
        }
        Ok(())
    }

    fn evaluate(&mut self, e: &Expr) -> R<()> {
        if let ExprKind::Call(intr, args) = e.kind() {
            let instr = match (intr, args.as_slice()) {
                (Intrinsic::Mma { shape, input, acc }, [a, b, c]) => {
                    let supported = matches!(
                        (shape, input.scalar, acc.scalar),
                        (_, S::F16 | S::BF16, S::F32)
                            | (_, S::F16, S::F16)
                            | (MmaShape::M16N8K8, S::F32, S::F32)
                    ) && !input.is_vector()
                        && !acc.is_vector();
                    if !supported {
                        return Err(self.unsupported(format!("the intrinsic {intr}")));
                    }
                    Instr::Mma {
                        shape: *shape,
                        input: *input,
                        acc: *acc,
                        a: self.expr(a)?,
                        b: self.expr(b)?,
                        c: self.expr(c)?,
                    }
                }
                (Intrinsic::LdMatrix { count, trans }, [dst, src]) => {
                    if !matches!(count, 1 | 2 | 4) {
                        return Err(self.unsupported(format!("{intr}")));
                    }
                    Instr::LdMatrix {
                        count: *count,
                        trans: *trans,
                        dst: self.expr(dst)?,
                        src: self.expr(src)?,
                    }
                }
                (Intrinsic::CpAsync { bytes }, [dst, src, n]) => {
                    if !matches!(bytes, 4 | 8 | 16) {
                        return Err(self.unsupported(format!("{intr}")));
                    }
                    Instr::CpAsync {
                        bytes: *bytes,
                        dst: self.expr(dst)?,
                        src: self.expr(src)?,
                        src_bytes: self.value_as(n, DataType::I32)?,
                    }
                }
                (Intrinsic::CpAsyncCommit, []) => Instr::CpCommit,
                (Intrinsic::CpAsyncWait { n }, []) => Instr::CpWait { n: *n },
                (Intrinsic::VectorStore, [p, v]) => {
                    let Some(dtype) = v.dtype() else {
                        return Err(self.unsupported("vector_store of a non-data value"));
                    };
                    if dtype.lanes > 4 {
                        return Err(self.unsupported(format!("vector_store of {dtype}")));
                    }
                    Instr::VectorStore {
                        ptr: self.expr(p)?,
                        value: self.expr(v)?,
                        dtype,
                    }
                }
                (Intrinsic::WarpShuffle { .. } | Intrinsic::VectorLoad { .. }, _) => {
                    let v = self.expr(e)?;
                    Instr::Eval(v)
                }
                _ => {
                    return Err(self.unsupported(format!(
                        "the intrinsic {intr} with {} arguments",
                        args.len()
                    )))
                }
            };
            self.push(instr);
            return Ok(());
        }
        let v = self.expr(e)?;
        self.push(Instr::Eval(v));
        Ok(())
    }

    /// `e` converted (a C cast) to `dtype` where its type differs.
    fn value_as(&mut self, e: &Expr, dtype: DataType) -> R<E> {
        let compiled = self.expr(e)?;
        let Some(from) = e.dtype() else {
            return Err(self.unsupported(format!(
                "a value of type {} where {dtype} is expected",
                e.ty()
            )));
        };
        self.convert(compiled, from, dtype)
    }

    fn convert(&self, e: E, from: DataType, to: DataType) -> R<E> {
        if from == to || (!from.is_vector() && !to.is_vector() && lossless(from.scalar, to.scalar))
        {
            return Ok(e);
        }
        if from.lanes != to.lanes || to.is_vector() {
            return Err(self.unsupported(format!("a conversion from {from} to {to}")));
        }
        Ok(match e {
            // A constant whose conversion fails stays a run-time cast, so the fault is
            // reported where it happens.
            E::Const(w) => match const_cast(w, from.scalar, to.scalar) {
                Some(c) => E::Const(c),
                None => E::Cast(from.scalar, to.scalar, Box::new(E::Const(w))),
            },
            e => E::Cast(from.scalar, to.scalar, Box::new(e)),
        })
    }

    fn access(&mut self, tensor: &Var, indices: &[Expr]) -> R<Access> {
        let (base, _) = self.slot_of(tensor)?;
        let idx: Vec<E> = indices.iter().map(|i| self.index(i)).collect::<R<_>>()?;
        match tensor.ty() {
            Type::Tensor(t) => {
                let layout = &t.layout;
                if indices.len() != layout.rank() {
                    return Err(self.unsupported(format!(
                        "`{}` of rank {} indexed with {} indices",
                        tensor.name(),
                        layout.rank(),
                        indices.len()
                    )));
                }
                let extents = layout
                    .shape()
                    .iter()
                    .map(|s| self.index(s))
                    .collect::<R<Vec<_>>>()?;
                let offset = match layout.node() {
                    LayoutNode::Strided { strides, .. } => {
                        Offset::Strides(strides.iter().map(|s| self.index(s)).collect::<R<_>>()?)
                    }
                    _ => Offset::Expr(self.index(&layout.offset(indices))?),
                };
                if t.dtype.lanes > 4 {
                    return Err(self.unsupported(format!("tensor elements of type {}", t.dtype)));
                }
                Ok(Access {
                    base,
                    tensor: tensor.name().to_string(),
                    indices: idx,
                    extents: Some(extents),
                    offset,
                    dtype: t.dtype,
                })
            }
            Type::Pointer(inner) => {
                let (Some(dtype), 1) = (inner.as_data(), indices.len()) else {
                    return Err(self.unsupported(format!(
                        "pointer `{}` indexed with {} indices",
                        tensor.name(),
                        indices.len()
                    )));
                };
                Ok(Access {
                    base,
                    tensor: tensor.name().to_string(),
                    indices: idx,
                    extents: None,
                    offset: Offset::Index,
                    dtype,
                })
            }
            other => Err(self.unsupported(format!("indexing `{}` of type {other}", tensor.name()))),
        }
    }

    /// An integer index expression, as a word of type `i64`.
    fn index(&mut self, e: &Expr) -> R<E> {
        let t = e.dtype().unwrap_or(DataType::I32);
        if !t.is_integer() || t.is_vector() {
            return Err(self.unsupported(format!("an index of type {t}")));
        }
        self.value_as(e, DataType::I64)
    }

    fn expr(&mut self, e: &Expr) -> R<E> {
        Ok(match e.kind() {
            ExprKind::Const(c) => match c {
                Constant::Bool(b) => E::Const(Word::from(*b)),
                Constant::Int(v, t) => E::Const(
                    fit(i128::from(*v), t.scalar).map_err(|f| self.unsupported(f.to_string()))?,
                ),
                Constant::Float(v, t) => E::Const(fw(round(*v, t.scalar))),
            },
            ExprKind::Var(v) => {
                let (slot, lanes) = self.slot_of(v)?;
                if lanes > 1 {
                    E::VSlot(slot, lanes)
                } else {
                    E::Slot(slot)
                }
            }
            ExprKind::Builtin(b) => {
                let (kind, d) = match b {
                    Builtin::ThreadIdx(d) => (0, d),
                    Builtin::BlockIdx(d) => (1, d),
                    Builtin::BlockDim(d) => (2, d),
                    Builtin::GridDim(d) => (3, d),
                };
                let d = match d {
                    Dim::X => 0,
                    Dim::Y => 1,
                    Dim::Z => 2,
                };
                E::Builtin(kind * 3 + d)
            }
            ExprKind::Unary(op, a) => {
                let t = self.dtype(e)?;
                if t.is_vector() {
                    return Err(self.unsupported(format!("a vector `{op:?}`")));
                }
                let x = self.value_as(a, t)?;
                E::Unary(*op, t.scalar, Box::new(x))
            }
            ExprKind::Binary(op, a, b) => self.binary(e, *op, a, b)?,
            ExprKind::Select(c, a, b) => {
                let t = self.dtype(e)?;
                let c = self.value_as(c, DataType::BOOL)?;
                let (x, y) = (self.value_as(a, t)?, self.value_as(b, t)?);
                E::Select(Box::new(c), Box::new(x), Box::new(y))
            }
            ExprKind::Cast(a, to) => self.value_as(a, *to)?,
            ExprKind::Broadcast(a, lanes) => {
                let x = self.expr(a)?;
                if *lanes == 1 {
                    x
                } else if *lanes > 4 {
                    return Err(self.unsupported(format!("a broadcast to {lanes} lanes")));
                } else {
                    E::Broadcast(Box::new(x), *lanes)
                }
            }
            ExprKind::Math(f, args) => {
                let t = if f.returns_bool() {
                    args.first().and_then(Expr::dtype).unwrap_or(DataType::F32)
                } else {
                    self.dtype(e)?
                };
                if t.is_vector() {
                    return Err(self.unsupported(format!("{} of vector type {t}", f.name())));
                }
                if !t.is_float() && !matches!(f, MathFunc::Min | MathFunc::Max | MathFunc::Abs) {
                    return Err(self.unsupported(format!("{} of {t}", f.name())));
                }
                let xs = args
                    .iter()
                    .map(|a| self.value_as(a, t))
                    .collect::<R<Vec<_>>>()?;
                E::Math(*f, t.scalar, xs)
            }
            ExprKind::Call(intr, args) => match (intr, args.as_slice()) {
                (Intrinsic::WarpShuffle { kind, width }, [value, arg]) => {
                    if !width.is_power_of_two() || *width > 32 {
                        return Err(self.unsupported(format!("{intr}")));
                    }
                    let t = self.dtype(value)?;
                    if t.is_vector() {
                        return Err(self.unsupported(format!("a shuffle of {t}")));
                    }
                    let value = self.expr(value)?;
                    let arg = self.value_as(arg, DataType::I32)?;
                    let slot = self.temp_slot("shfl");
                    self.push(Instr::Shuffle {
                        slot,
                        kind: *kind,
                        width: *width,
                        value,
                        arg,
                    });
                    E::Slot(slot)
                }
                (Intrinsic::VectorLoad { dtype }, [p]) => {
                    if dtype.lanes > 4 {
                        return Err(self.unsupported(format!("{intr}")));
                    }
                    E::VecLoad(Box::new(self.expr(p)?), *dtype)
                }
                (Intrinsic::ExtractLane { lane }, [v]) => {
                    let t = self.dtype(v)?;
                    if *lane >= t.lanes.min(4) {
                        return Err(self.unsupported(format!("{intr} of {t}")));
                    }
                    E::Lane(Box::new(self.expr(v)?), *lane)
                }
                (Intrinsic::PackLanes { dtype }, xs) => {
                    if dtype.lanes > 4 || xs.len() != usize::from(dtype.lanes) {
                        return Err(self.unsupported(format!("{intr} of {} values", xs.len())));
                    }
                    E::Pack(
                        xs.iter()
                            .map(|x| self.value_as(x, dtype.element()))
                            .collect::<R<Vec<_>>>()?,
                    )
                }
                (Intrinsic::Function { name, .. }, _) => {
                    return Err(self.unsupported(format!("the call of device function `{name}`")))
                }
                _ => return Err(self.unsupported(format!("the intrinsic {intr} used as a value"))),
            },
            ExprKind::TensorElement { tensor, indices } => {
                E::Load(Box::new(self.access(tensor, indices)?))
            }
            ExprKind::Address(inner) => match inner.kind() {
                ExprKind::TensorElement { tensor, indices } => {
                    E::Addr(Box::new(self.access(tensor, indices)?))
                }
                _ => return Err(self.unsupported("the address of a variable")),
            },
        })
    }

    fn dtype(&self, e: &Expr) -> R<DataType> {
        e.dtype()
            .ok_or_else(|| self.unsupported(format!("an expression of type {}", e.ty())))
    }

    fn binary(&mut self, e: &Expr, op: BinaryOp, a: &Expr, b: &Expr) -> R<E> {
        if op.is_logical() {
            let (x, y) = (
                self.value_as(a, DataType::BOOL)?,
                self.value_as(b, DataType::BOOL)?,
            );
            return Ok(if op == BinaryOp::And {
                E::And(Box::new(x), Box::new(y))
            } else {
                E::Or(Box::new(x), Box::new(y))
            });
        }
        let (ta, tb) = (self.dtype(a)?, self.dtype(b)?);
        if op.is_comparison() {
            if ta.is_vector() || tb.is_vector() {
                return Err(self.unsupported("a vector comparison"));
            }
            let (x, y) = (self.expr(a)?, self.expr(b)?);
            return Ok(E::Cmp(op, ta.scalar, tb.scalar, Box::new(x), Box::new(y)));
        }
        let t = self.dtype(e)?;
        let shift = matches!(op, BinaryOp::Shl | BinaryOp::Shr);
        if t.is_vector() {
            if ta != t || tb != t {
                return Err(self.unsupported(format!("`{}` of {ta} and {tb}", op.symbol())));
            }
            let (x, y) = (self.expr(a)?, self.expr(b)?);
            return Ok(E::VBinary(op, t.scalar, t.lanes, Box::new(x), Box::new(y)));
        }
        let x = self.value_as(a, t)?;
        let y = if shift {
            self.value_as(b, DataType::I64)?
        } else {
            self.value_as(b, t)?
        };
        Ok(E::Binary(op, t.scalar, Box::new(x), Box::new(y)))
    }
}

/// A constant converted at compile time, when the conversion is defined.
fn const_cast(w: Word, from: S, to: S) -> Option<Word> {
    super::value::cast(w, from, to).ok()
}
