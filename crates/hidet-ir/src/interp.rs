//! An exact interpreter of IR functions: the test oracle of the passes and
//! the basis of the GPU simulator.
//!
//! Scalars are `bool`, `i64` (every integer type, range-checked: signed
//! overflow is an error, unsigned arithmetic wraps at the type's width) and
//! `f64` (rounded to the value's type after every operation: `f32` exactly,
//! `f16`/`bf16` by round-to-nearest-even). Integer `/` and `%` use floor
//! semantics ([`floor_div`], [`floor_mod`]). Tensors live in [`Buffer`]s;
//! every access goes through the tensor's layout and is checked against the
//! layout's shape and size and against the buffer. `for … in mapping.on(w)`
//! is run by enumerating [`crate::mapping::TaskMapping::tasks_of`].
//!
//! CUDA kernels run one thread at a time ([`run_cuda_thread`],
//! [`run_cuda_block`]); shared tensors are shared by the threads of a block.
//! Barriers are only accepted when a block has one thread. Vector types,
//! intrinsic calls and kernel launches are reported as unsupported.

use crate::dtype::{DataType, ScalarType};
use crate::expr::{
    floor_div, floor_mod, BinaryOp, Builtin, Constant, Dim, Expr, ExprKind, UnaryOp, Var,
};
use crate::function::{Function, FunctionKind};
use crate::intrinsic::MathFunc;
use crate::stmt::{Scope, Stmt};
use crate::ty::Type;
use std::collections::HashMap;

/// Why the interpreter stopped.
#[derive(thiserror::Error, Debug, Clone, PartialEq)]
pub enum InterpError {
    #[error("in `{function}`: variable `{var}` is used outside its definition")]
    UndefinedVariable { function: String, var: String },
    #[error("in `{function}`: variable `{var}` is read before it is assigned")]
    Uninitialized { function: String, var: String },
    #[error("in `{function}`: access `{tensor}[{index:?}]` is out of bounds: {reason}")]
    OutOfBounds {
        function: String,
        tensor: String,
        index: Vec<i64>,
        reason: String,
    },
    #[error("in `{function}`: division by zero in `{expr}`")]
    DivisionByZero { function: String, expr: String },
    #[error("in `{function}`: `{expr}` overflows {dtype}")]
    Overflow {
        function: String,
        expr: String,
        dtype: String,
    },
    #[error("in `{function}`: assertion failed: {message}")]
    AssertFailed { function: String, message: String },
    #[error("in `{function}`: not supported by the interpreter: {what}")]
    Unsupported { function: String, what: String },
    #[error("in `{function}`: {what}")]
    TypeMismatch { function: String, what: String },
    #[error("`{function}` takes {expected} arguments, {got} given")]
    ArgCount {
        function: String,
        expected: usize,
        got: usize,
    },
}

/// A scalar value.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Scalar {
    Bool(bool),
    Int(i64),
    Float(f64),
}

impl Scalar {
    /// The value as a float (bools as 0/1).
    pub fn as_f64(self) -> f64 {
        match self {
            Scalar::Bool(b) => f64::from(u8::from(b)),
            Scalar::Int(v) => v as f64,
            Scalar::Float(v) => v,
        }
    }

    /// The value as an integer, when it is a bool or an integer.
    pub fn as_i64(self) -> Option<i64> {
        match self {
            Scalar::Bool(b) => Some(i64::from(b)),
            Scalar::Int(v) => Some(v),
            Scalar::Float(_) => None,
        }
    }
}

/// The storage of a tensor: a typed array of scalars.
#[derive(Clone, Debug, PartialEq)]
pub struct Buffer {
    dtype: DataType,
    data: Vec<Scalar>,
}

impl Buffer {
    /// `len` zeros of `dtype`.
    pub fn zeros(dtype: DataType, len: usize) -> Buffer {
        let zero = if dtype.is_float() {
            Scalar::Float(0.0)
        } else if dtype.is_bool() {
            Scalar::Bool(false)
        } else {
            Scalar::Int(0)
        };
        Buffer {
            dtype,
            data: vec![zero; len],
        }
    }

    /// A float buffer; values are rounded to `dtype`.
    pub fn from_f64(dtype: DataType, values: &[f64]) -> Buffer {
        let data = values
            .iter()
            .map(|&v| Scalar::Float(round_float(v, dtype.scalar)))
            .collect();
        Buffer { dtype, data }
    }

    /// An integer buffer of type `dtype`.
    pub fn from_i64(dtype: DataType, values: &[i64]) -> Buffer {
        let data = values.iter().map(|&v| Scalar::Int(v)).collect();
        Buffer { dtype, data }
    }

    /// A `bool` buffer.
    pub fn from_bool(values: &[bool]) -> Buffer {
        let data = values.iter().map(|&v| Scalar::Bool(v)).collect();
        Buffer {
            dtype: DataType::BOOL,
            data,
        }
    }

    pub fn dtype(&self) -> DataType {
        self.dtype
    }

    pub fn len(&self) -> usize {
        self.data.len()
    }

    pub fn is_empty(&self) -> bool {
        self.data.is_empty()
    }

    pub fn get(&self, i: usize) -> Option<Scalar> {
        self.data.get(i).copied()
    }

    /// Every element as a float.
    pub fn to_f64(&self) -> Vec<f64> {
        self.data.iter().map(|s| s.as_f64()).collect()
    }

    /// Every element as an integer (floats truncated toward zero).
    pub fn to_i64(&self) -> Vec<i64> {
        self.data
            .iter()
            .map(|s| s.as_i64().unwrap_or_else(|| s.as_f64() as i64))
            .collect()
    }
}

/// An argument of an interpreted function: a scalar for a scalar parameter,
/// a buffer for a tensor or pointer parameter (written back in place).
#[derive(Clone, Debug, PartialEq)]
pub enum Arg {
    Scalar(Scalar),
    Buffer(Buffer),
}

/// Runs a CPU kernel or internal function; returns its return value, if any.
/// CUDA built-ins are undefined here.
pub fn run_function(f: &Function, args: &mut [Arg]) -> Result<Option<Scalar>, InterpError> {
    let mut m = Machine::new(f, None);
    m.run(f, args)
}

/// Runs one thread `thread_idx` of block `block_idx` of a CUDA kernel.
/// Shared tensors start zeroed and are private to this call.
pub fn run_cuda_thread(
    f: &Function,
    block_idx: [i64; 3],
    thread_idx: [i64; 3],
    args: &mut [Arg],
) -> Result<(), InterpError> {
    let ctx = Launch::of(f, block_idx)?;
    let mut m = Machine::new(f, Some(ctx));
    m.threads_in_block = 1;
    m.launch_thread(thread_idx);
    m.run(f, args).map(|_| ())
}

/// Runs every thread of block `block_idx` of a CUDA kernel, one after the
/// other in `threadIdx` order (x fastest). Shared tensors are shared by the
/// block's threads. Fails on a barrier when the block has more than one thread.
pub fn run_cuda_block(
    f: &Function,
    block_idx: [i64; 3],
    args: &mut [Arg],
) -> Result<(), InterpError> {
    let ctx = Launch::of(f, block_idx)?;
    let [bx, by, bz] = ctx.block_dim;
    let mut m = Machine::new(f, Some(ctx));
    m.threads_in_block = bx * by * bz;
    for z in 0..bz {
        for y in 0..by {
            for x in 0..bx {
                m.launch_thread([x, y, z]);
                m.run(f, args)?;
            }
        }
    }
    Ok(())
}

#[derive(Clone, Copy)]
struct Launch {
    block_idx: [i64; 3],
    thread_idx: [i64; 3],
    block_dim: [i64; 3],
    grid_dim: [Option<i64>; 3],
}

impl Launch {
    fn of(f: &Function, block_idx: [i64; 3]) -> Result<Launch, InterpError> {
        match &f.kind {
            FunctionKind::CudaKernel(l) => Ok(Launch {
                block_idx,
                thread_idx: [0; 3],
                block_dim: l.block,
                grid_dim: [l.grid[0].as_int(), l.grid[1].as_int(), l.grid[2].as_int()],
            }),
            _ => Err(InterpError::TypeMismatch {
                function: f.name.clone(),
                what: "not a CUDA kernel".into(),
            }),
        }
    }
}

#[derive(Clone, Copy, Debug)]
enum Value {
    Scalar(Scalar),
    /// A tensor base or pointer: element `offset` of buffer `buf`.
    Ptr {
        buf: usize,
        offset: i64,
    },
    /// Declared, not yet assigned.
    Uninit,
}

enum Flow {
    Next,
    Return(Option<Scalar>),
}

struct Machine {
    function: String,
    buffers: Vec<Buffer>,
    env: HashMap<Var, Value>,
    shared: HashMap<Var, usize>,
    launch: Option<Launch>,
    threads_in_block: i64,
}

type R<T> = Result<T, InterpError>;

impl Machine {
    fn new(f: &Function, launch: Option<Launch>) -> Machine {
        Machine {
            function: f.name.clone(),
            buffers: Vec::new(),
            env: HashMap::new(),
            shared: HashMap::new(),
            launch,
            threads_in_block: 1,
        }
    }

    fn launch_thread(&mut self, thread_idx: [i64; 3]) {
        if let Some(l) = &mut self.launch {
            l.thread_idx = thread_idx;
        }
    }

    fn unsupported<T>(&self, what: impl Into<String>) -> R<T> {
        Err(InterpError::Unsupported {
            function: self.function.clone(),
            what: what.into(),
        })
    }

    fn mismatch<T>(&self, what: impl Into<String>) -> R<T> {
        Err(InterpError::TypeMismatch {
            function: self.function.clone(),
            what: what.into(),
        })
    }

    /// Binds the parameters, runs the body, writes buffers back to `args`.
    fn run(&mut self, f: &Function, args: &mut [Arg]) -> R<Option<Scalar>> {
        if args.len() != f.params.len() {
            return Err(InterpError::ArgCount {
                function: f.name.clone(),
                expected: f.params.len(),
                got: args.len(),
            });
        }
        self.env.clear();
        let first_arg_buffer = self.buffers.len();
        let mut slots = Vec::new();
        for (i, (p, a)) in f.params.iter().zip(args.iter_mut()).enumerate() {
            let value = match (p.ty(), a) {
                (Type::Data(d), Arg::Scalar(s)) => {
                    Value::Scalar(self.convert(*s, *d, &p.expr())?)
                }
                (Type::Tensor(_) | Type::Pointer(_), Arg::Buffer(b)) => {
                    let expected = p.ty().element_dtype();
                    if expected != Some(b.dtype) {
                        return self.mismatch(format!(
                            "parameter `{}` expects {:?} elements, got a {} buffer",
                            p.name(),
                            expected,
                            b.dtype
                        ));
                    }
                    let buf = self.buffers.len();
                    self.buffers
                        .push(std::mem::replace(b, Buffer::zeros(b.dtype, 0)));
                    slots.push((i, buf));
                    Value::Ptr { buf, offset: 0 }
                }
                _ => {
                    return self.mismatch(format!(
                        "argument {i} does not match parameter `{}: {}`",
                        p.name(),
                        p.ty()
                    ))
                }
            };
            self.env.insert(p.clone(), value);
        }
        let result = self.exec(&f.body);
        for (i, buf) in slots.iter().rev() {
            let b = std::mem::replace(&mut self.buffers[*buf], Buffer::zeros(DataType::I32, 0));
            args[*i] = Arg::Buffer(b);
        }
        self.buffers
            .truncate(first_arg_buffer.max(self.shared_buffers_end()));
        match result? {
            Flow::Return(v) => Ok(v),
            Flow::Next => Ok(None),
        }
    }

    /// Buffers below this index hold shared tensors, kept across threads.
    fn shared_buffers_end(&self) -> usize {
        self.shared.values().map(|&b| b + 1).max().unwrap_or(0)
    }

    fn exec(&mut self, s: &Stmt) -> R<Flow> {
        match s {
            Stmt::Declare { var, scope, init } => self.declare(var, *scope, init.as_ref())?,
            Stmt::Store {
                tensor,
                indices,
                value,
            } => {
                let v = self.scalar(value)?;
                let (buf, offset, dtype) = self.element(tensor, indices)?;
                let v = self.convert(v, dtype, value)?;
                self.buffers[buf].data[offset] = v;
            }
            Stmt::Assign { var, value } => {
                if !self.env.contains_key(var) {
                    return Err(InterpError::UndefinedVariable {
                        function: self.function.clone(),
                        var: format!("{var:?}"),
                    });
                }
                let v = self.value(value)?;
                let v = match (v, var.ty()) {
                    (Value::Scalar(s), Type::Data(d)) => Value::Scalar(self.convert(s, *d, value)?),
                    (v, _) => v,
                };
                self.env.insert(var.clone(), v);
            }
            Stmt::Let { var, value, body } => {
                let v = self.value(value)?;
                let v = match (v, var.ty()) {
                    (Value::Scalar(s), Type::Data(d)) => Value::Scalar(self.convert(s, *d, value)?),
                    (v, _) => v,
                };
                let prev = self.env.insert(var.clone(), v);
                let flow = self.exec(body);
                self.rebind(var, prev);
                return flow;
            }
            Stmt::For {
                var, extent, body, ..
            } => {
                let n = self.int(extent)?;
                let prev = self.env.get(var).copied();
                for i in 0..n {
                    self.env.insert(var.clone(), Value::Scalar(Scalar::Int(i)));
                    if let Flow::Return(v) = self.exec(body)? {
                        self.rebind(var, prev);
                        return Ok(Flow::Return(v));
                    }
                }
                self.rebind(var, prev);
            }
            Stmt::ForMapping {
                vars,
                mapping,
                worker,
                body,
            } => {
                let w = self.int(worker)?;
                if vars.len() != mapping.rank() {
                    return self.mismatch(format!(
                        "{} variables bound to a mapping of rank {}",
                        vars.len(),
                        mapping.rank()
                    ));
                }
                let prevs: Vec<_> = vars.iter().map(|v| self.env.get(v).copied()).collect();
                let mut flow = Flow::Next;
                for task in mapping.tasks_of(w) {
                    for (v, t) in vars.iter().zip(task) {
                        self.env.insert(v.clone(), Value::Scalar(Scalar::Int(t)));
                    }
                    if let Flow::Return(v) = self.exec(body)? {
                        flow = Flow::Return(v);
                        break;
                    }
                }
                for (v, p) in vars.iter().zip(prevs) {
                    self.rebind(v, p);
                }
                return Ok(flow);
            }
            Stmt::If {
                cond,
                then_body,
                else_body,
            } => {
                if self.bool(cond)? {
                    return self.exec(then_body);
                } else if let Some(e) = else_body {
                    return self.exec(e);
                }
            }
            Stmt::Seq(stmts) => {
                for s in stmts {
                    if let Flow::Return(v) = self.exec(s)? {
                        return Ok(Flow::Return(v));
                    }
                }
            }
            Stmt::Barrier(b) => {
                if self.threads_in_block > 1 {
                    return self.unsupported(format!(
                        "barrier {b:?} in a block of {} threads run one after the other",
                        self.threads_in_block
                    ));
                }
            }
            Stmt::Evaluate(e) => {
                self.value(e)?;
            }
            Stmt::Assert { cond, message } => {
                if !self.bool(cond)? {
                    return Err(InterpError::AssertFailed {
                        function: self.function.clone(),
                        message: message.clone(),
                    });
                }
            }
            Stmt::Launch { kernel, .. } => {
                return self.unsupported(format!("launch of kernel `{kernel}`"))
            }
            Stmt::Return(e) => {
                let v = match e {
                    Some(e) => Some(self.scalar(e)?),
                    None => None,
                };
                return Ok(Flow::Return(v));
            }
        }
        Ok(Flow::Next)
    }

    fn rebind(&mut self, var: &Var, prev: Option<Value>) {
        match prev {
            Some(v) => self.env.insert(var.clone(), v),
            None => self.env.remove(var),
        };
    }

    fn declare(&mut self, var: &Var, scope: Scope, init: Option<&Expr>) -> R<()> {
        let value = match (var.ty(), init) {
            (Type::Tensor(t), None) => {
                if scope == Scope::Shared {
                    if let Some(&buf) = self.shared.get(var) {
                        self.env.insert(var.clone(), Value::Ptr { buf, offset: 0 });
                        return Ok(());
                    }
                }
                let size = self.int(&t.layout.size())?;
                let len = usize::try_from(size).or_else(|_| {
                    self.mismatch(format!("tensor `{}` has negative size {size}", var.name()))
                })?;
                let buf = self.buffers.len();
                self.buffers.push(Buffer::zeros(t.dtype, len));
                if scope == Scope::Shared {
                    self.shared.insert(var.clone(), buf);
                }
                Value::Ptr { buf, offset: 0 }
            }
            (Type::Tensor(_) | Type::Pointer(_), Some(e)) => match self.value(e)? {
                p @ Value::Ptr { .. } => p,
                _ => return self.mismatch(format!("view `{}` of a non-pointer", var.name())),
            },
            (Type::Data(d), Some(e)) => {
                let s = self.scalar(e)?;
                Value::Scalar(self.convert(s, *d, e)?)
            }
            (_, None) => Value::Uninit,
            (Type::Void, Some(_)) => return self.mismatch("void variable with a value"),
        };
        self.env.insert(var.clone(), value);
        Ok(())
    }

    fn lookup(&self, var: &Var) -> R<Value> {
        match self.env.get(var) {
            Some(Value::Uninit) => Err(InterpError::Uninitialized {
                function: self.function.clone(),
                var: format!("{var:?}"),
            }),
            Some(v) => Ok(*v),
            None => Err(InterpError::UndefinedVariable {
                function: self.function.clone(),
                var: format!("{var:?}"),
            }),
        }
    }

    /// The buffer, element offset and element type of `tensor[indices]`.
    fn element(&mut self, tensor: &Var, indices: &[Expr]) -> R<(usize, usize, DataType)> {
        let Value::Ptr { buf, offset: base } = self.lookup(tensor)? else {
            return self.mismatch(format!("`{}` is not a tensor or pointer", tensor.name()));
        };
        let index: Vec<i64> = indices.iter().map(|i| self.int(i)).collect::<R<_>>()?;
        let function = self.function.clone();
        let oob = |reason: String| InterpError::OutOfBounds {
            function: function.clone(),
            tensor: tensor.name().to_string(),
            index: index.clone(),
            reason,
        };
        let (offset, dtype) = match tensor.ty() {
            Type::Tensor(t) => {
                let shape = t.layout.shape();
                if shape.len() != index.len() {
                    return Err(oob(format!(
                        "{} indices for rank {}",
                        index.len(),
                        shape.len()
                    )));
                }
                for (d, (i, s)) in index.iter().zip(&shape).enumerate() {
                    let s = self.int(s)?;
                    if *i < 0 || *i >= s {
                        return Err(oob(format!("index {i} of dimension {d} not in 0..{s}")));
                    }
                }
                let consts: Vec<Expr> = index
                    .iter()
                    .map(|&i| Expr::int_of(i, DataType::I64))
                    .collect();
                let offset = self.int(&t.layout.offset(&consts))?;
                let size = self.int(&t.layout.size())?;
                if offset < 0 || offset >= size {
                    return Err(oob(format!(
                        "offset {offset} not in the layout's 0..{size}"
                    )));
                }
                (offset, t.dtype)
            }
            Type::Pointer(inner) => match (index.as_slice(), inner.as_data()) {
                ([i], Some(d)) => (*i, d),
                _ => return self.mismatch(format!("pointer `{}` needs one index", tensor.name())),
            },
            _ => return self.mismatch(format!("`{}` is not a tensor or pointer", tensor.name())),
        };
        let at = base + offset;
        let len = self.buffers[buf].len();
        match usize::try_from(at) {
            Ok(at) if at < len => Ok((buf, at, dtype)),
            _ => Err(oob(format!("element {at} of a buffer of {len}"))),
        }
    }

    fn int(&mut self, e: &Expr) -> R<i64> {
        match self.scalar(e)?.as_i64() {
            Some(v) => Ok(v),
            None => self.mismatch(format!("`{e}` is not an integer")),
        }
    }

    fn bool(&mut self, e: &Expr) -> R<bool> {
        match self.scalar(e)? {
            Scalar::Bool(b) => Ok(b),
            _ => self.mismatch(format!("`{e}` is not a bool")),
        }
    }

    fn scalar(&mut self, e: &Expr) -> R<Scalar> {
        match self.value(e)? {
            Value::Scalar(s) => Ok(s),
            _ => self.mismatch(format!("`{e}` is not a scalar")),
        }
    }

    fn value(&mut self, e: &Expr) -> R<Value> {
        let dtype = e.dtype();
        if dtype.is_some_and(|d| d.is_vector()) {
            return self.unsupported(format!("vector expression `{e}`"));
        }
        let s = match e.kind() {
            ExprKind::Const(c) => match c {
                Constant::Bool(b) => Scalar::Bool(*b),
                Constant::Int(v, _) => Scalar::Int(*v),
                Constant::Float(v, t) => Scalar::Float(round_float(*v, t.scalar)),
            },
            ExprKind::Var(v) => return self.lookup(v),
            ExprKind::Builtin(b) => Scalar::Int(self.builtin(*b)?),
            ExprKind::Unary(op, a) => {
                let x = self.scalar(a)?;
                let t = dtype.unwrap_or(DataType::I32);
                match (op, x) {
                    (UnaryOp::Not, Scalar::Bool(b)) => Scalar::Bool(!b),
                    (UnaryOp::Neg, Scalar::Int(v)) => self.fit(-i128::from(v), t, e)?,
                    (UnaryOp::Neg, Scalar::Float(v)) => Scalar::Float(-v),
                    (UnaryOp::BitNot, Scalar::Int(v)) => self.fit(i128::from(!v), t, e)?,
                    _ => return self.mismatch(format!("bad operand of `{e}`")),
                }
            }
            ExprKind::Binary(op, a, b) => self.binary(e, *op, a, b)?,
            ExprKind::Select(c, a, b) => {
                let chosen = if self.bool(c)? { a } else { b };
                let s = self.scalar(chosen)?;
                match dtype {
                    Some(d) => self.convert(s, d, e)?,
                    None => s,
                }
            }
            ExprKind::Cast(a, t) => {
                let s = self.scalar(a)?;
                self.convert(s, *t, e)?
            }
            ExprKind::Math(f, args) => {
                let vals: Vec<Scalar> = args.iter().map(|a| self.scalar(a)).collect::<R<_>>()?;
                self.math(e, *f, &vals, dtype.unwrap_or(DataType::F32))?
            }
            ExprKind::Call(intrinsic, _) => {
                return self.unsupported(format!("call of {intrinsic}"))
            }
            ExprKind::TensorElement { tensor, indices } => {
                let (buf, at, _) = self.element(tensor, indices)?;
                self.buffers[buf].data[at]
            }
            ExprKind::Address(inner) => match inner.kind() {
                ExprKind::TensorElement { tensor, indices } => {
                    let (buf, at, _) = self.element(tensor, indices)?;
                    return Ok(Value::Ptr {
                        buf,
                        offset: at as i64,
                    });
                }
                _ => return self.unsupported(format!("address of `{inner}`")),
            },
            ExprKind::Broadcast(..) => return self.unsupported(format!("broadcast `{e}`")),
        };
        Ok(Value::Scalar(s))
    }

    fn builtin(&self, b: Builtin) -> R<i64> {
        let Some(l) = &self.launch else {
            return self.unsupported(format!("`{b}` outside a CUDA kernel"));
        };
        let i = |d: Dim| match d {
            Dim::X => 0,
            Dim::Y => 1,
            Dim::Z => 2,
        };
        match b {
            Builtin::ThreadIdx(d) => Ok(l.thread_idx[i(d)]),
            Builtin::BlockIdx(d) => Ok(l.block_idx[i(d)]),
            Builtin::BlockDim(d) => Ok(l.block_dim[i(d)]),
            Builtin::GridDim(d) => match l.grid_dim[i(d)] {
                Some(g) => Ok(g),
                None => self.unsupported(format!("`{b}` of a grid that depends on parameters")),
            },
        }
    }

    fn binary(&mut self, e: &Expr, op: BinaryOp, a: &Expr, b: &Expr) -> R<Scalar> {
        if op.is_logical() {
            let x = self.bool(a)?;
            let short = match op {
                BinaryOp::And => !x,
                _ => x,
            };
            return Ok(Scalar::Bool(if short { x } else { self.bool(b)? }));
        }
        let (x, y) = (self.scalar(a)?, self.scalar(b)?);
        let t = e.dtype().unwrap_or(DataType::I32);
        if op.is_comparison() {
            let ord = match (x, y) {
                (Scalar::Float(_), _) | (_, Scalar::Float(_)) => {
                    x.as_f64().partial_cmp(&y.as_f64())
                }
                _ => x.as_i64().zip(y.as_i64()).map(|(p, q)| p.cmp(&q)),
            };
            use std::cmp::Ordering::*;
            let v = match (op, ord) {
                (BinaryOp::Ne, None) => true,
                (_, None) => false,
                (BinaryOp::Eq, Some(o)) => o == Equal,
                (BinaryOp::Ne, Some(o)) => o != Equal,
                (BinaryOp::Lt, Some(o)) => o == Less,
                (BinaryOp::Le, Some(o)) => o != Greater,
                (BinaryOp::Gt, Some(o)) => o == Greater,
                _ => ord != Some(Less),
            };
            return Ok(Scalar::Bool(v));
        }
        if t.is_float() {
            let (p, q) = (x.as_f64(), y.as_f64());
            let v = match op {
                BinaryOp::Add => p + q,
                BinaryOp::Sub => p - q,
                BinaryOp::Mul => p * q,
                BinaryOp::Div => p / q,
                BinaryOp::Mod => p % q,
                _ => return self.mismatch(format!("`{e}` is not defined on floats")),
            };
            return Ok(Scalar::Float(round_float(v, t.scalar)));
        }
        let (Some(p), Some(q)) = (x.as_i64(), y.as_i64()) else {
            return self.mismatch(format!("integer operation `{e}` on floats"));
        };
        let (p, q) = (i128::from(p), i128::from(q));
        let bits = (t.bytes() * 8) as i128;
        let div_zero = || InterpError::DivisionByZero {
            function: self.function.clone(),
            expr: e.to_string(),
        };
        let v = match op {
            BinaryOp::Add => p + q,
            BinaryOp::Sub => p - q,
            BinaryOp::Mul => p * q,
            BinaryOp::Div | BinaryOp::Mod if q == 0 => return Err(div_zero()),
            BinaryOp::Div => {
                let (p, q) = (i64::try_from(p), i64::try_from(q));
                match (p, q) {
                    (Ok(p), Ok(q)) if !(p == i64::MIN && q == -1) => i128::from(floor_div(p, q)),
                    _ => return self.overflow(e, t),
                }
            }
            BinaryOp::Mod => match (i64::try_from(p), i64::try_from(q)) {
                (Ok(p), Ok(q)) if !(p == i64::MIN && q == -1) => i128::from(floor_mod(p, q)),
                _ => 0,
            },
            BinaryOp::BitAnd => p & q,
            BinaryOp::BitOr => p | q,
            BinaryOp::BitXor => p ^ q,
            BinaryOp::Shl | BinaryOp::Shr if !(0..bits).contains(&q) => {
                return self.mismatch(format!("shift amount {q} out of range in `{e}`"))
            }
            BinaryOp::Shl => {
                if p < 0 && t.scalar.is_signed() {
                    return self.overflow(e, t);
                }
                p << q
            }
            BinaryOp::Shr => p >> q,
            _ => return self.mismatch(format!("bad integer operation `{e}`")),
        };
        self.fit(v, t, e)
    }

    fn overflow<T>(&self, e: &Expr, t: DataType) -> R<T> {
        Err(InterpError::Overflow {
            function: self.function.clone(),
            expr: e.to_string(),
            dtype: t.to_string(),
        })
    }

    /// `v` as a value of the integer type `t`: unsigned wraps, signed must fit.
    fn fit(&self, v: i128, t: DataType, e: &Expr) -> R<Scalar> {
        if t.is_bool() {
            return Ok(Scalar::Bool(v != 0));
        }
        let bits = (t.bytes() * 8) as u32;
        let v = if t.scalar.is_signed() {
            let (lo, hi) = (-(1i128 << (bits - 1)), (1i128 << (bits - 1)) - 1);
            if v < lo || v > hi {
                return self.overflow(e, t);
            }
            v
        } else {
            v.rem_euclid(1i128 << bits)
        };
        match i64::try_from(v) {
            Ok(v) => Ok(Scalar::Int(v)),
            Err(_) => self.unsupported(format!("u64 value {v} beyond i64 in `{e}`")),
        }
    }

    /// `s` converted to `t` as a C cast does (float to int truncates and
    /// must fit; int to int wraps).
    fn convert(&self, s: Scalar, t: DataType, e: &Expr) -> R<Scalar> {
        if t.is_vector() {
            return self.unsupported(format!("vector type {t}"));
        }
        Ok(match (s, t.scalar) {
            (_, ScalarType::Bool) => Scalar::Bool(match s {
                Scalar::Bool(b) => b,
                Scalar::Int(v) => v != 0,
                Scalar::Float(v) => v != 0.0,
            }),
            (_, st) if st.is_float() => Scalar::Float(round_float(s.as_f64(), st)),
            (Scalar::Float(v), _) => {
                let tr = v.trunc();
                if !tr.is_finite() || tr.abs() > 9.2e18 {
                    return self.overflow(e, t);
                }
                let Scalar::Int(i) = self.fit(tr as i128, t, e)? else {
                    return self.overflow(e, t);
                };
                if (i as f64) != tr {
                    return self.overflow(e, t);
                }
                Scalar::Int(i)
            }
            (Scalar::Int(v), _) => {
                let bits = (t.bytes() * 8) as u32;
                let m = 1i128 << bits;
                let mut w = i128::from(v).rem_euclid(m);
                if t.scalar.is_signed() && w >= m / 2 {
                    w -= m;
                }
                self.fit(w, t, e)?
            }
            (Scalar::Bool(b), _) => Scalar::Int(i64::from(b)),
        })
    }

    fn math(&self, e: &Expr, f: MathFunc, args: &[Scalar], t: DataType) -> R<Scalar> {
        if t.is_integer() || (t.is_bool() && !f.returns_bool()) {
            let ints: Option<Vec<i64>> = args.iter().map(|a| a.as_i64()).collect();
            let Some(ints) = ints else {
                return self.mismatch(format!("float arguments to integer `{e}`"));
            };
            let v = match (f, ints.as_slice()) {
                (MathFunc::Min, [a, b]) => i128::from(*a.min(b)),
                (MathFunc::Max, [a, b]) => i128::from(*a.max(b)),
                (MathFunc::Abs, [a]) => i128::from(*a).abs(),
                _ => return self.unsupported(format!("integer `{e}`")),
            };
            return self.fit(v, t, e);
        }
        let x: Vec<f64> = args.iter().map(|a| a.as_f64()).collect();
        let v = match (f, x.as_slice()) {
            (MathFunc::IsNan, [a]) => return Ok(Scalar::Bool(a.is_nan())),
            (MathFunc::IsInf, [a]) => return Ok(Scalar::Bool(a.is_infinite())),
            (MathFunc::Exp, [a]) => a.exp(),
            (MathFunc::Exp2, [a]) => a.exp2(),
            (MathFunc::Log, [a]) => a.ln(),
            (MathFunc::Log2, [a]) => a.log2(),
            (MathFunc::Sqrt, [a]) => a.sqrt(),
            (MathFunc::Rsqrt, [a]) => 1.0 / a.sqrt(),
            (MathFunc::Tanh, [a]) => a.tanh(),
            (MathFunc::Erf, [a]) => libm::erf(*a),
            (MathFunc::Sigmoid, [a]) => 1.0 / (1.0 + (-a).exp()),
            (MathFunc::Sin, [a]) => a.sin(),
            (MathFunc::Cos, [a]) => a.cos(),
            (MathFunc::Tan, [a]) => a.tan(),
            (MathFunc::Asin, [a]) => a.asin(),
            (MathFunc::Acos, [a]) => a.acos(),
            (MathFunc::Atan, [a]) => a.atan(),
            (MathFunc::Sinh, [a]) => a.sinh(),
            (MathFunc::Cosh, [a]) => a.cosh(),
            (MathFunc::Asinh, [a]) => a.asinh(),
            (MathFunc::Acosh, [a]) => a.acosh(),
            (MathFunc::Atanh, [a]) => a.atanh(),
            (MathFunc::Abs, [a]) => a.abs(),
            (MathFunc::Floor, [a]) => a.floor(),
            (MathFunc::Ceil, [a]) => a.ceil(),
            (MathFunc::Round, [a]) => a.round_ties_even(),
            (MathFunc::Trunc, [a]) => a.trunc(),
            (MathFunc::Pow, [a, b]) => a.powf(*b),
            (MathFunc::Min, [a, b]) => a.min(*b),
            (MathFunc::Max, [a, b]) => a.max(*b),
            (MathFunc::Atan2, [a, b]) => a.atan2(*b),
            (MathFunc::Fma, [a, b, c]) => a.mul_add(*b, *c),
            _ => return self.unsupported(format!("`{e}`")),
        };
        Ok(Scalar::Float(round_float(v, t.scalar)))
    }
}

/// `v` rounded (to nearest, ties to even) to a value of the float type `t`;
/// integers and bools leave `v` as is.
fn round_float(v: f64, t: ScalarType) -> f64 {
    match t {
        ScalarType::F64 => v,
        ScalarType::F32 => f64::from(v as f32),
        ScalarType::F16 => round_to_format(v, 10, -14, 15),
        ScalarType::BF16 => round_to_format(v, 7, -126, 127),
        _ => v,
    }
}

/// Rounds to a binary format with `mantissa` explicit bits and normal
/// exponents `emin..=emax` (subnormals below, infinity above).
fn round_to_format(v: f64, mantissa: i32, emin: i32, emax: i32) -> f64 {
    if !v.is_finite() || v == 0.0 {
        return v;
    }
    let biased = ((v.to_bits() >> 52) & 0x7ff) as i32;
    let e = (biased - 1023).max(emin);
    let quantum = 2f64.powi(e - mantissa);
    let r = (v / quantum).round_ties_even() * quantum;
    let max = (2.0 - 2f64.powi(-mantissa)) * 2f64.powi(emax);
    if r.abs() > max {
        f64::INFINITY.copysign(v)
    } else {
        r
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::builder::FunctionBuilder;
    use crate::layout::row_major;
    use crate::mapping::{repeat, spatial};

    #[test]
    fn floor_semantics_and_layouts() {
        let mut fb = FunctionBuilder::cpu_kernel("k");
        let x = fb.param("x", DataType::I32);
        let out = fb.tensor_param("out", DataType::I32, [2i64, 3]);
        fb.store(&out, [Expr::int(1), Expr::int(2)], &x / 4);
        fb.store(&out, [Expr::int(0), Expr::int(1)], &x % 4);
        let f = fb.finish();
        let mut args = vec![
            Arg::Scalar(Scalar::Int(-7)),
            Arg::Buffer(Buffer::from_i64(DataType::I32, &[0; 6])),
        ];
        run_function(&f, &mut args).unwrap();
        let Arg::Buffer(b) = &args[1] else {
            unreachable!()
        };
        assert_eq!(b.to_i64(), vec![0, 1, 0, 0, 0, -2]);
    }

    #[test]
    fn out_of_bounds_and_undefined_variables_are_errors() {
        let mut fb = FunctionBuilder::cpu_kernel("k");
        let out = fb.tensor_param("out", DataType::F32, [4i64]);
        fb.store(&out, [Expr::int(4)], Expr::f32(1.0));
        let f = fb.finish();
        let mut args = vec![Arg::Buffer(Buffer::zeros(DataType::F32, 4))];
        assert!(matches!(
            run_function(&f, &mut args),
            Err(InterpError::OutOfBounds { .. })
        ));
        let mut fb = FunctionBuilder::cpu_kernel("k");
        let out = fb.tensor_param("out", DataType::F32, [4i64]);
        let ghost = Var::new("ghost", DataType::I32);
        fb.store(&out, [ghost.expr()], Expr::f32(1.0));
        let f = fb.finish();
        assert!(matches!(
            run_function(&f, &mut args),
            Err(InterpError::UndefinedVariable { .. })
        ));
    }

    #[test]
    fn cuda_block_shares_shared_memory_and_enumerates_mappings() {
        let mut fb = FunctionBuilder::cuda_kernel("k", [1, 1, 1], [6, 1, 1]);
        let out = fb.tensor_param("out", DataType::F32, [6i64, 4]);
        let smem = fb.shared_tensor("s", DataType::F32, row_major([6i64]));
        let tid = Expr::thread_idx(Dim::X);
        fb.store(&smem, [tid.clone()], tid.cast(DataType::F32));
        let m = spatial([3, 2]).unwrap() * repeat([2, 2]).unwrap();
        fb.for_each(m.on(tid), |fb, ij| {
            let v = smem.at([Expr::int(0)]) + ij[0].cast(DataType::F32);
            fb.store(&out, ij.to_vec(), v);
        });
        let f = fb.finish();
        let mut args = vec![Arg::Buffer(Buffer::zeros(DataType::F32, 24))];
        run_cuda_block(&f, [0, 0, 0], &mut args).unwrap();
        let Arg::Buffer(b) = &args[0] else {
            unreachable!()
        };
        let expected: Vec<f64> = (0..24).map(|k| (k / 4) as f64).collect();
        assert_eq!(b.to_f64(), expected);
    }

    #[test]
    fn round_is_half_to_even_and_erf_is_evaluated() {
        let mut fb = FunctionBuilder::cpu_kernel("k");
        let x = fb.tensor_param("x", DataType::F64, [4i64]);
        let r = fb.tensor_param("r", DataType::F64, [4i64]);
        let e = fb.tensor_param("e", DataType::F64, [4i64]);
        fb.for_range("i", 4, |fb, i| {
            let v = x.at([i.clone()]);
            fb.store(
                &r,
                [i.clone()],
                Expr::math(MathFunc::Round, vec![v.clone()]),
            );
            fb.store(&e, [i], Expr::math(MathFunc::Erf, vec![v]));
        });
        let f = fb.finish();
        let xs = [0.5, 1.5, -2.5, 0.3];
        let mut args = vec![
            Arg::Buffer(Buffer::from_f64(DataType::F64, &xs)),
            Arg::Buffer(Buffer::zeros(DataType::F64, 4)),
            Arg::Buffer(Buffer::zeros(DataType::F64, 4)),
        ];
        run_function(&f, &mut args).unwrap();
        let (Arg::Buffer(r), Arg::Buffer(e)) = (&args[1], &args[2]) else {
            unreachable!()
        };
        assert_eq!(r.to_f64(), vec![0.0, 2.0, -2.0, 0.0]);
        // erf(0.5), erf(-2.5), erf(0.3) to 12 digits (Abramowitz & Stegun, table 7.1).
        let want = [
            0.520_499_877_813,
            0.0,
            -0.999_593_047_983,
            0.328_626_759_459,
        ];
        for k in [0, 2, 3] {
            assert!((e.to_f64()[k] - want[k]).abs() < 1e-11, "erf({})", xs[k]);
        }
    }

    #[test]
    fn half_precision_rounding() {
        assert_eq!(round_float(1.0 + 1.0 / 4096.0, ScalarType::F16), 1.0);
        assert_eq!(round_float(65520.0, ScalarType::F16), f64::INFINITY);
        assert_eq!(round_float(1.0 / 3.0, ScalarType::BF16), 0.333984375);
    }
}
