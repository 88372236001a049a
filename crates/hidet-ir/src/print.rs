//! A readable printer for the IR, used in error messages and `--dump-ir`.
//!
//! The output is Python/Rust-like pseudo code, indented by four spaces per
//! nesting level:
//!
//! ```text
//! @cuda_kernel(grid=(16, 1, 1), block=(128, 1, 1), dynamic_shared_bytes=0)
//! def copy(a: f32[n], b: f32[n], n: i32):
//!     shared buf: f32[128]
//!     for i in spatial(128) on threadIdx.x:
//!         buf[i] = a[blockIdx.x * 128 + i]
//!     sync_threads()
//! ```
//!
//! Variables are printed by name; when two distinct variables share a name,
//! the one met later gets a numbered suffix (`i`, `i_1`, …). A [`Printer`]
//! keeps this naming across calls, so statements printed for an error
//! message use the same names as the whole function printed by
//! [`Printer::for_function`]. The `Display` impls of [`Expr`], [`Stmt`],
//! [`Function`] and [`IRModule`] each use a fresh printer.

use crate::dtype::{DataType, ScalarType};
use crate::expr::{BinaryOp, Constant, Expr, ExprKind, UnaryOp, Var};
use crate::function::{Function, FunctionKind, IRModule, Target};
use crate::layout::{column_major, row_major, Layout, LayoutNode};
use crate::mapping::{MappingNode, TaskMapping};
use crate::stmt::{Barrier, LoopKind, Scope, Stmt};
use crate::ty::Type;
use std::collections::{HashMap, HashSet};
use std::fmt;

const INDENT: &str = "    ";

/// Precedence of an atom (variable, constant, call, element access).
const PREC_ATOM: u8 = 20;
/// Precedence of prefix operators and negative constants.
const PREC_UNARY: u8 = 15;

/// Prints IR nodes, giving every distinct variable a distinct name.
#[derive(Default, Debug, Clone)]
pub struct Printer {
    names: HashMap<u64, String>,
    taken: HashSet<String>,
}

impl Printer {
    /// A printer that has named no variable yet.
    pub fn new() -> Printer {
        Printer::default()
    }

    /// A printer whose variable names are those [`Printer::function`] gives
    /// when printing `f`, so that statements of `f` printed afterwards (e.g.
    /// in an error message) match a dump of the whole function.
    pub fn for_function(f: &Function) -> Printer {
        let mut p = Printer::new();
        p.function(f);
        p
    }

    /// The printed name of `v`: its own name if no other variable printed by
    /// this printer has it, else the name with the first free suffix `_1`,
    /// `_2`, …. Stable: the same variable always gets the same name.
    pub fn name(&mut self, v: &Var) -> String {
        if let Some(n) = self.names.get(&v.id()) {
            return n.clone();
        }
        let base = if v.name().is_empty() { "v" } else { v.name() };
        let mut candidate = base.to_string();
        let mut suffix = 1;
        while self.taken.contains(&candidate) {
            candidate = format!("{base}_{suffix}");
            suffix += 1;
        }
        self.taken.insert(candidate.clone());
        self.names.insert(v.id(), candidate.clone());
        candidate
    }

    /// An expression on one line, with only the parentheses precedence needs.
    pub fn expr(&mut self, e: &Expr) -> String {
        self.expr_prec(e).0
    }

    /// A type: `f32`, `f32x4`, `f32*`, `f32[m, 64]` for a row-major tensor,
    /// `tensor<f32, LAYOUT>` for any other layout, `void`.
    pub fn ty(&mut self, t: &Type) -> String {
        match t {
            Type::Data(d) => d.to_string(),
            Type::Pointer(inner) => format!("{}*", self.ty(inner)),
            Type::Tensor(tt) => {
                if let LayoutNode::Strided { shape, .. } = tt.layout.node() {
                    if tt.layout == row_major(shape.clone()) {
                        return format!("{}[{}]", tt.dtype, self.expr_list(shape));
                    }
                }
                format!("tensor<{}, {}>", tt.dtype, self.layout(&tt.layout))
            }
            Type::Void => "void".to_string(),
        }
    }

    /// A layout: `row_major(m, k)`, `column_major(8, 4)`,
    /// `strided([8, 4], [1, 9])`, `local(4, 2)`, `outer * inner`,
    /// `swizzle(BASE, dim=1, regards=0, log_step=0)`.
    pub fn layout(&mut self, l: &Layout) -> String {
        match l.node() {
            LayoutNode::Strided { shape, strides } => {
                if *l == row_major(shape.clone()) {
                    format!("row_major({})", self.expr_list(shape))
                } else if *l == column_major(shape.clone()) {
                    format!("column_major({})", self.expr_list(shape))
                } else {
                    format!(
                        "strided([{}], [{}])",
                        self.expr_list(shape),
                        self.expr_list(strides)
                    )
                }
            }
            LayoutNode::Local { shape } => format!("local({})", int_list(shape)),
            LayoutNode::Compose(a, b) => format!("{} * {}", self.layout(a), self.layout(b)),
            LayoutNode::Swizzle {
                base,
                dim,
                regards_dim,
                log_step,
            } => format!(
                "swizzle({}, dim={dim}, regards={regards_dim}, log_step={log_step})",
                self.layout(base)
            ),
        }
    }

    /// A task mapping: `spatial(4, 8) * repeat(2, 2)`; a non-row-major order
    /// prints as `ranks=[…]`, non-serial repeat loops as `attrs=[…]`.
    pub fn mapping(&self, m: &TaskMapping) -> String {
        let ranks_suffix = |ranks: &[usize]| {
            if ranks.iter().enumerate().all(|(i, &r)| i == r) {
                String::new()
            } else {
                format!(", ranks={ranks:?}")
            }
        };
        match m.node() {
            MappingNode::Spatial { shape, ranks } => {
                format!("spatial({}{})", int_list(shape), ranks_suffix(ranks))
            }
            MappingNode::Repeat {
                shape,
                ranks,
                attrs,
            } => {
                let attrs_suffix = if attrs.iter().all(|a| *a == LoopKind::Serial) {
                    String::new()
                } else {
                    let kinds: Vec<String> = attrs.iter().map(|a| loop_kind_name(*a)).collect();
                    format!(", attrs=[{}]", kinds.join(", "))
                };
                format!(
                    "repeat({}{}{})",
                    int_list(shape),
                    ranks_suffix(ranks),
                    attrs_suffix
                )
            }
            MappingNode::Compose(a, b) => format!("{} * {}", self.mapping(a), self.mapping(b)),
        }
    }

    /// A statement and everything nested in it, one line per statement,
    /// nested bodies indented; lines are joined by `\n` (no trailing newline).
    pub fn stmt(&mut self, s: &Stmt) -> String {
        let mut lines = Vec::new();
        self.stmt_lines(s, 0, &mut lines);
        lines.join("\n")
    }

    /// The first line of a statement only: a compound statement's header
    /// (`for i in range(8):`, `if c:`, `let x: i32 = e in`), without its body.
    pub fn stmt_head(&mut self, s: &Stmt) -> String {
        match s {
            Stmt::Let { var, value, .. } => {
                let name = self.name(var);
                let ty = self.ty(var.ty());
                format!("let {name}: {ty} = {} in", self.expr(value))
            }
            Stmt::For {
                var, extent, kind, ..
            } => {
                let name = self.name(var);
                let kind = match kind {
                    LoopKind::Serial => String::new(),
                    k => format!(" {}", loop_kind_name(*k)),
                };
                format!("for {name} in range({}){kind}:", self.expr(extent))
            }
            Stmt::ForMapping {
                vars,
                mapping,
                worker,
                ..
            } => {
                let names: Vec<String> = vars.iter().map(|v| self.name(v)).collect();
                let bound = if names.len() == 1 {
                    names[0].clone()
                } else {
                    format!("({})", names.join(", "))
                };
                format!(
                    "for {bound} in {} on {}:",
                    self.mapping(mapping),
                    self.expr(worker)
                )
            }
            Stmt::If { cond, .. } => format!("if {}:", self.expr(cond)),
            Stmt::Seq(stmts) => match stmts.len() {
                0 => "pass".to_string(),
                n => format!("<sequence of {n} statements>"),
            },
            Stmt::Declare { var, scope, init } => {
                let name = self.name(var);
                let ty = self.ty(var.ty());
                let mut line = format!("{} {name}: {ty}", scope_name(*scope));
                if let Some(init) = init {
                    line.push_str(" = ");
                    line.push_str(&self.expr(init));
                }
                line
            }
            Stmt::Store {
                tensor,
                indices,
                value,
            } => {
                let name = self.name(tensor);
                let idx = self.expr_list(indices);
                format!("{name}[{idx}] = {}", self.expr(value))
            }
            Stmt::Assign { var, value } => {
                let name = self.name(var);
                format!("{name} = {}", self.expr(value))
            }
            Stmt::Barrier(Barrier::Block) => "sync_threads()".to_string(),
            Stmt::Barrier(Barrier::Warp) => "sync_warp()".to_string(),
            Stmt::Evaluate(e) => self.expr(e),
            Stmt::Assert { cond, message } => format!("assert {}, {message:?}", self.expr(cond)),
            Stmt::Launch {
                kernel,
                grid,
                block,
                shared_bytes,
                args,
            } => format!(
                "launch {kernel}<<<({}), ({}), {}>>>({})",
                self.expr_list(grid),
                self.expr_list(block),
                self.expr(shared_bytes),
                self.expr_list(args)
            ),
            Stmt::Return(None) => "return".to_string(),
            Stmt::Return(Some(e)) => format!("return {}", self.expr(e)),
        }
    }

    /// Where a statement sits, for error messages. `path` lists the
    /// enclosing statements from the outermost inwards and ends with the
    /// statement of interest. Each enclosing compound statement prints as
    /// its header on its own line (sequences are skipped, an `if` entered
    /// through its else branch prints as `if c: … else:`), indented by
    /// nesting; the last line is the head of the statement of interest.
    pub fn stmt_path(&mut self, path: &[&Stmt]) -> String {
        let mut lines = Vec::new();
        let mut depth = 0;
        for (i, s) in path.iter().enumerate() {
            let is_last = i + 1 == path.len();
            if !is_last && matches!(s, Stmt::Seq(_)) {
                continue;
            }
            let mut line = self.stmt_head(s);
            if let (Stmt::If { else_body, .. }, Some(next)) = (s, path.get(i + 1)) {
                if else_body.as_deref().is_some_and(|e| std::ptr::eq(e, *next)) {
                    line.push_str(" … else:");
                }
            }
            lines.push(format!("{}{line}", INDENT.repeat(depth)));
            depth += 1;
        }
        lines.join("\n")
    }

    /// A function: a decorator line naming its kind (with the launch
    /// configuration of a CUDA kernel), the `def` line with typed
    /// parameters, and the indented body.
    pub fn function(&mut self, f: &Function) -> String {
        let params: Vec<String> = f
            .params
            .iter()
            .map(|p| {
                let name = self.name(p);
                format!("{name}: {}", self.ty(p.ty()))
            })
            .collect();
        let decorator = match &f.kind {
            FunctionKind::CpuKernel => "@cpu_kernel".to_string(),
            FunctionKind::Internal => "@internal".to_string(),
            FunctionKind::HostLauncher => "@host_launcher".to_string(),
            FunctionKind::CudaKernel(launch) => {
                let mut s = format!(
                    "@cuda_kernel(grid=({}), block=({}), dynamic_shared_bytes={}",
                    self.expr_list(&launch.grid),
                    int_list(&launch.block),
                    self.expr(&launch.dynamic_shared_bytes)
                );
                if let Some(b) = launch.min_blocks_per_sm {
                    s.push_str(&format!(", min_blocks_per_sm={b}"));
                }
                s.push(')');
                s
            }
        };
        let ret = match f.ret {
            Type::Void => String::new(),
            ref t => format!(" -> {}", self.ty(t)),
        };
        let mut lines = vec![
            decorator,
            format!("def {}({}){ret}:", f.name, params.join(", ")),
        ];
        self.body_lines(&f.body, 1, &mut lines);
        lines.join("\n")
    }

    /// A module: a `# module NAME (target: cpu|cuda)` line, then its
    /// functions separated by blank lines. Each function gets fresh names.
    pub fn module(m: &IRModule) -> String {
        let target = match m.target {
            Target::Cpu => "cpu",
            Target::Cuda => "cuda",
        };
        let mut parts = vec![format!("# module {} (target: {target})", m.name)];
        for f in &m.functions {
            parts.push(Printer::new().function(f));
        }
        parts.join("\n\n")
    }

    fn expr_list(&mut self, es: &[Expr]) -> String {
        let parts: Vec<String> = es.iter().map(|e| self.expr(e)).collect();
        parts.join(", ")
    }

    fn body_lines(&mut self, body: &Stmt, depth: usize, out: &mut Vec<String>) {
        let before = out.len();
        self.stmt_lines(body, depth, out);
        if out.len() == before {
            out.push(format!("{}pass", INDENT.repeat(depth)));
        }
    }

    fn stmt_lines(&mut self, s: &Stmt, depth: usize, out: &mut Vec<String>) {
        let pad = INDENT.repeat(depth);
        match s {
            Stmt::Seq(stmts) => {
                for c in stmts {
                    self.stmt_lines(c, depth, out);
                }
            }
            Stmt::Let { body, .. } | Stmt::For { body, .. } | Stmt::ForMapping { body, .. } => {
                let head = self.stmt_head(s);
                out.push(format!("{pad}{head}"));
                self.body_lines(body, depth + 1, out);
            }
            Stmt::If {
                cond,
                then_body,
                else_body,
            } => {
                out.push(format!("{pad}if {}:", self.expr(cond)));
                self.body_lines(then_body, depth + 1, out);
                let mut rest = else_body.as_deref();
                while let Some(e) = rest {
                    if let Stmt::If {
                        cond,
                        then_body,
                        else_body,
                    } = e
                    {
                        out.push(format!("{pad}elif {}:", self.expr(cond)));
                        self.body_lines(then_body, depth + 1, out);
                        rest = else_body.as_deref();
                    } else {
                        out.push(format!("{pad}else:"));
                        self.body_lines(e, depth + 1, out);
                        rest = None;
                    }
                }
            }
            _ => {
                let head = self.stmt_head(s);
                out.push(format!("{pad}{head}"));
            }
        }
    }

    /// The expression and its precedence (higher binds tighter).
    fn expr_prec(&mut self, e: &Expr) -> (String, u8) {
        match e.kind() {
            ExprKind::Const(c) => {
                let s = constant(c);
                let prec = if s.starts_with('-') {
                    PREC_UNARY
                } else {
                    PREC_ATOM
                };
                (s, prec)
            }
            ExprKind::Var(v) => (self.name(v), PREC_ATOM),
            ExprKind::Builtin(b) => (b.to_string(), PREC_ATOM),
            ExprKind::Unary(op, a) => {
                let sym = match op {
                    UnaryOp::Neg => "-",
                    UnaryOp::Not => "!",
                    UnaryOp::BitNot => "~",
                };
                let (s, p) = self.expr_prec(a);
                // `--x` would read as a decrement; a negative constant also starts with '-'.
                let inner = if p < PREC_UNARY || (*op == UnaryOp::Neg && s.starts_with('-')) {
                    format!("({s})")
                } else {
                    s
                };
                (format!("{sym}{inner}"), PREC_UNARY)
            }
            ExprKind::Binary(op, a, b) => {
                let prec = binary_prec(*op);
                let (sa, pa) = self.expr_prec(a);
                let (sb, pb) = self.expr_prec(b);
                let wrap_a = pa < prec || ambiguous_mix(*op, a);
                let wrap_b = pb <= prec || ambiguous_mix(*op, b);
                let sa = if wrap_a { format!("({sa})") } else { sa };
                let sb = if wrap_b { format!("({sb})") } else { sb };
                (format!("{sa} {} {sb}", op.symbol()), prec)
            }
            ExprKind::Select(c, a, b) => {
                let args = self.expr_list(&[c.clone(), a.clone(), b.clone()]);
                (format!("select({args})"), PREC_ATOM)
            }
            ExprKind::Cast(a, t) => (format!("cast<{t}>({})", self.expr(a)), PREC_ATOM),
            ExprKind::Broadcast(a, lanes) => {
                (format!("broadcast<{lanes}>({})", self.expr(a)), PREC_ATOM)
            }
            ExprKind::Math(f, args) => {
                (format!("{}({})", f.name(), self.expr_list(args)), PREC_ATOM)
            }
            ExprKind::Call(intr, args) => (format!("{intr}({})", self.expr_list(args)), PREC_ATOM),
            ExprKind::TensorElement { tensor, indices } => {
                let name = self.name(tensor);
                (format!("{name}[{}]", self.expr_list(indices)), PREC_ATOM)
            }
            ExprKind::Address(a) => {
                let (s, p) = self.expr_prec(a);
                let inner = if p < PREC_ATOM { format!("({s})") } else { s };
                (format!("&{inner}"), PREC_UNARY)
            }
        }
    }
}

/// C precedence of a binary operator (higher binds tighter).
fn binary_prec(op: BinaryOp) -> u8 {
    match op {
        BinaryOp::Mul | BinaryOp::Div | BinaryOp::Mod => 13,
        BinaryOp::Add | BinaryOp::Sub => 12,
        BinaryOp::Shl | BinaryOp::Shr => 11,
        BinaryOp::Lt | BinaryOp::Le | BinaryOp::Gt | BinaryOp::Ge => 10,
        BinaryOp::Eq | BinaryOp::Ne => 9,
        BinaryOp::BitAnd => 8,
        BinaryOp::BitXor => 7,
        BinaryOp::BitOr => 6,
        BinaryOp::And => 5,
        BinaryOp::Or => 4,
    }
}

fn is_bit_op(op: BinaryOp) -> bool {
    matches!(
        op,
        BinaryOp::BitAnd | BinaryOp::BitOr | BinaryOp::BitXor | BinaryOp::Shl | BinaryOp::Shr
    )
}

/// True when `child`, an operand of `parent`, is a different binary operator
/// and one of the two is a bitwise or shift operator: C and Python order
/// these differently, so the printer always parenthesizes such operands.
fn ambiguous_mix(parent: BinaryOp, child: &Expr) -> bool {
    match child.kind() {
        ExprKind::Binary(op, ..) => *op != parent && (is_bit_op(parent) || is_bit_op(*op)),
        _ => false,
    }
}

fn constant(c: &Constant) -> String {
    match c {
        Constant::Bool(b) => b.to_string(),
        Constant::Int(v, t) if *t == DataType::I32 => v.to_string(),
        Constant::Int(v, t) => format!("{v}{t}"),
        Constant::Float(v, t) => {
            let text = if v.is_nan() {
                "nan".to_string()
            } else if v.is_infinite() {
                if *v > 0.0 { "inf" } else { "-inf" }.to_string()
            } else if t.scalar == ScalarType::F64 {
                format!("{v:?}")
            } else {
                // f32, f16 and bf16 values are exact in f32, whose shortest
                // round-tripping text is the readable one.
                format!("{:?}", *v as f32)
            };
            if *t == DataType::F32 {
                text
            } else {
                format!("{text}{t}")
            }
        }
    }
}

fn int_list<T: ToString>(v: &[T]) -> String {
    v.iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join(", ")
}

fn loop_kind_name(k: LoopKind) -> String {
    match k {
        LoopKind::Serial => "serial".to_string(),
        LoopKind::Unroll(None) => "unroll".to_string(),
        LoopKind::Unroll(Some(n)) => format!("unroll({n})"),
        LoopKind::Parallel => "parallel".to_string(),
        LoopKind::Vectorize => "vectorize".to_string(),
    }
}

/// The keyword a declaration in `scope` starts with.
pub fn scope_name(scope: Scope) -> &'static str {
    match scope {
        Scope::Global => "global",
        Scope::Shared => "shared",
        Scope::Register => "register",
    }
}

impl fmt::Display for Expr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&Printer::new().expr(self))
    }
}

impl fmt::Display for Stmt {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&Printer::new().stmt(self))
    }
}

impl fmt::Display for Function {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&Printer::new().function(self))
    }
}

impl fmt::Display for IRModule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&Printer::module(self))
    }
}
