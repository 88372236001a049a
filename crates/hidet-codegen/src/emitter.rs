//! The dialect-agnostic emitter: a lowered [`IRModule`] to one C-family
//! translation unit.
//!
//! Layout of the output: the dialect's prelude, the helpers the bodies
//! required (in dependency order), forward declarations of every function,
//! the function definitions, and the dialect's epilogue.
//!
//! Semantics the emitter guarantees for every dialect:
//! - integer `Div`/`Mod` are floor division/modulo: plain `/`, `%` only where
//!   both operands are unsigned or proven non-negative by the bound analysis
//!   of [`hidet_ir::passes::bounds`] (loop variables, built-ins, constants,
//!   `let` values); elsewhere a `hidet_floordiv_*`/`hidet_floormod_*` helper;
//! - `Shr` is C's `>>` (arithmetic on signed operands with GCC, Clang, NVCC);
//! - a tensor element is `ptr[layout.offset(indices)]` on a flat pointer:
//!   tensor parameters are `T* __restrict__`, register and shared tensors are
//!   arrays of `layout.size()` elements, a tensor declared with an initializer
//!   is a pointer view;
//! - `Let` is a `const` local in its own block, `Select` is `?:`.

use crate::dialect::{Declaration, Dialect, EmittedFunction, EmittedParam, ParamClass, Uses};
use crate::error::{CodegenError, Unsupported};
use crate::names::{is_valid_identifier, NameTable};
use hidet_ir::dtype::DataType;
use hidet_ir::expr::{BinaryOp, Constant, Expr, ExprKind, UnaryOp, Var};
use hidet_ir::function::{Function, IRModule};
use hidet_ir::intrinsic::Intrinsic;
use hidet_ir::passes::bounds::{bound_of, Interval, VarRanges};
use hidet_ir::passes::simplify_expr;
use hidet_ir::print::Printer;
use hidet_ir::stmt::{LoopKind, Scope, Stmt};
use hidet_ir::ty::Type;
use std::collections::HashSet;
use std::fmt::Write as _;

/// Emits `module` as one self-contained translation unit of `dialect`.
///
/// Requires a lowered module (no `Stmt::ForMapping`; run
/// `hidet_ir::passes::lower_module` first), else [`CodegenError::NotLowered`].
/// Function names must be distinct valid C identifiers not starting with
/// `hidet_` or `__`. Constructs the dialect cannot express give
/// [`CodegenError::Unsupported`] naming the function and statement. Output is
/// deterministic.
pub fn emit_module(module: &IRModule, dialect: &dyn Dialect) -> Result<String, CodegenError> {
    check_function_names(module)?;
    let function_names: Vec<&str> = module.functions.iter().map(|f| f.name.as_str()).collect();
    let mut uses = Uses::default();
    let mut heads = Vec::new();
    let mut bodies = Vec::new();
    let mut emitted = Vec::new();
    for f in &module.functions {
        let mut fe = FunctionEmitter::new(f, dialect, &mut uses, &function_names);
        let (params, ret) = fe.signature()?;
        let head = dialect
            .function_head(f, &ret, &params)
            .map_err(|u| fe.unsupported_at(None, u))?;
        let body = fe.body()?;
        let tasks = std::mem::take(&mut fe.tasks);
        heads.push(head);
        bodies.push((tasks, body));
        emitted.push(EmittedFunction {
            function: f,
            params,
            ret,
        });
    }
    let epilogue =
        dialect
            .epilogue(module, &emitted, &mut uses)
            .map_err(|u| CodegenError::Unsupported {
                dialect: dialect.name(),
                function: module.name.clone(),
                stmt: "module epilogue".to_string(),
                what: u.0,
            })?;

    let mut out = String::new();
    out.push_str(&dialect.prelude(module, &uses));
    out.push('\n');
    for (_, def) in uses.helpers() {
        out.push_str(def.trim_end());
        out.push_str("\n\n");
    }
    let guards: Vec<Option<String>> = module
        .functions
        .iter()
        .map(|f| dialect.function_guard(f))
        .collect();
    for (head, guard) in heads.iter().zip(&guards) {
        match guard {
            Some(cond) => {
                let _ = writeln!(out, "#if {cond}\n{head};\n#endif");
            }
            None => {
                let _ = writeln!(out, "{head};");
            }
        }
    }
    out.push('\n');
    for ((head, (tasks, body)), guard) in heads.iter().zip(&bodies).zip(&guards) {
        let tasks: String = tasks.iter().map(|t| format!("{t}\n")).collect();
        match guard {
            Some(cond) => {
                let _ = writeln!(out, "#if {cond}\n{tasks}{head} {{\n{body}}}\n#endif\n");
            }
            None => {
                let _ = writeln!(out, "{tasks}{head} {{\n{body}}}\n");
            }
        }
    }
    out.push_str(&epilogue);
    Ok(out)
}

fn check_function_names(module: &IRModule) -> Result<(), CodegenError> {
    let mut seen = HashSet::new();
    for f in &module.functions {
        if !is_valid_identifier(&f.name) {
            return Err(CodegenError::BadFunctionName {
                name: f.name.clone(),
                why: "not a C identifier, a reserved word, or starts with `hidet_`/`__`"
                    .to_string(),
            });
        }
        if !seen.insert(f.name.as_str()) {
            return Err(CodegenError::BadFunctionName {
                name: f.name.clone(),
                why: "two functions of the module have this name".to_string(),
            });
        }
    }
    Ok(())
}

/// Emits one function; holds the per-function naming and bound state.
struct FunctionEmitter<'a> {
    f: &'a Function,
    d: &'a dyn Dialect,
    uses: &'a mut Uses,
    names: NameTable,
    ranges: VarRanges,
    out: String,
    indent: usize,
    cur: Option<&'a Stmt>,
    /// The variable of the innermost enclosing loop.
    innermost: Option<Var>,
    /// Task functions outlined from parallel loops (see [`Dialect::parallel_launch`]),
    /// complete definitions in the order they must appear (inner loops first).
    tasks: Vec<String>,
    /// Task functions named so far (a nested loop is named before its enclosing one is done).
    task_names: usize,
}

type R<T> = Result<T, CodegenError>;

impl<'a> FunctionEmitter<'a> {
    fn new(
        f: &'a Function,
        d: &'a dyn Dialect,
        uses: &'a mut Uses,
        function_names: &[&str],
    ) -> Self {
        FunctionEmitter {
            f,
            d,
            uses,
            names: NameTable::with_taken(function_names.iter().copied()),
            ranges: VarRanges::for_function(f),
            out: String::new(),
            indent: 1,
            cur: None,
            innermost: None,
            tasks: Vec::new(),
            task_names: 0,
        }
    }

    fn stmt_text(&self, s: Option<&Stmt>) -> String {
        match s {
            Some(s) => Printer::for_function(self.f).stmt_head(s),
            None => "function signature".to_string(),
        }
    }

    fn unsupported_at(&self, s: Option<&Stmt>, u: Unsupported) -> CodegenError {
        CodegenError::Unsupported {
            dialect: self.d.name(),
            function: self.f.name.clone(),
            stmt: self.stmt_text(s),
            what: u.0,
        }
    }

    fn unsupported(&self, u: Unsupported) -> CodegenError {
        self.unsupported_at(self.cur, u)
    }

    fn invalid(&self, what: impl Into<String>) -> CodegenError {
        CodegenError::Invalid {
            function: self.f.name.clone(),
            stmt: self.stmt_text(self.cur),
            what: what.into(),
        }
    }

    // ---- types ----

    fn value_type(&mut self, d: DataType) -> R<String> {
        self.d
            .value_type(d, self.uses)
            .map_err(|u| self.unsupported(u))
    }

    fn storage_type(&mut self, d: DataType) -> R<String> {
        self.d
            .storage_type(d, self.uses)
            .map_err(|u| self.unsupported(u))
    }

    /// The C type of a pointer to values of type `pointee`.
    fn pointer_type(&mut self, pointee: &Type) -> R<String> {
        Ok(match pointee {
            Type::Data(d) => format!("{}*", self.storage_type(*d)?),
            Type::Tensor(t) => format!("{}*", self.storage_type(t.dtype)?),
            Type::Pointer(inner) => format!("{}*", self.pointer_type(inner)?),
            Type::Void => "void*".to_string(),
        })
    }

    /// The C type of a variable or return value of IR type `ty` (tensors
    /// decay to element pointers).
    fn c_type(&mut self, ty: &Type) -> R<String> {
        match ty {
            Type::Data(d) => self.value_type(*d),
            Type::Pointer(inner) => self.pointer_type(inner),
            Type::Tensor(t) => Ok(format!("{}*", self.storage_type(t.dtype)?)),
            Type::Void => Ok("void".to_string()),
        }
    }

    fn signature(&mut self) -> R<(Vec<EmittedParam>, String)> {
        let mut params = Vec::new();
        for p in &self.f.params {
            let name = self.names.name(p);
            let (c_type, class) = match p.ty() {
                Type::Data(d) => (self.value_type(*d)?, ParamClass::Value { dtype: *d }),
                Type::Tensor(t) => (
                    format!("{}* __restrict__", self.storage_type(t.dtype)?),
                    ParamClass::Pointer {
                        elem: Some(t.dtype),
                    },
                ),
                Type::Pointer(inner) => (
                    format!("{} __restrict__", self.pointer_type(inner)?),
                    ParamClass::Pointer {
                        elem: inner.as_data(),
                    },
                ),
                Type::Void => {
                    return Err(self.invalid(format!("parameter `{}` has type void", p.name())))
                }
            };
            params.push(EmittedParam {
                name,
                c_type,
                class,
            });
        }
        let ret = self.c_type(&self.f.ret.clone())?;
        Ok((params, ret))
    }

    fn body(&mut self) -> R<String> {
        self.stmt(&self.f.body)?;
        Ok(std::mem::take(&mut self.out))
    }

    // ---- statements ----

    fn line(&mut self, text: &str) {
        for _ in 0..self.indent {
            self.out.push_str("    ");
        }
        self.out.push_str(text);
        self.out.push('\n');
    }

    fn nested(&mut self, s: &'a Stmt) -> R<()> {
        self.indent += 1;
        let r = self.stmt(s);
        self.indent -= 1;
        r
    }

    fn stmt(&mut self, s: &'a Stmt) -> R<()> {
        let outer = self.cur.replace(s);
        self.stmt_inner(s)?;
        self.cur = outer;
        Ok(())
    }

    fn stmt_inner(&mut self, s: &'a Stmt) -> R<()> {
        match s {
            Stmt::Declare { var, scope, init } => self.declare(var, *scope, init.as_ref()),
            Stmt::Store {
                tensor,
                indices,
                value,
            } => {
                let (lvalue, dtype) = self.element(tensor, indices)?;
                let v = self.expr(value)?;
                let v = self
                    .d
                    .store(dtype, v, self.uses)
                    .map_err(|u| self.unsupported(u))?;
                self.line(&format!("{lvalue} = {v};"));
                Ok(())
            }
            Stmt::Assign { var, value } => {
                let name = self.names.name(var);
                let v = self.expr(value)?;
                self.line(&format!("{name} = {v};"));
                Ok(())
            }
            Stmt::Let { var, value, body } => {
                let v = self.expr(value)?;
                let name = self.names.name(var);
                let decl = match var.ty() {
                    Type::Data(d) => format!("const {} {name}", self.value_type(*d)?),
                    other => format!("{} const {name}", self.c_type(&other.clone())?),
                };
                let range = bound_of(value, &self.ranges);
                let previous = self.ranges.set(var, range);
                self.line("{");
                self.indent += 1;
                self.line(&format!("{decl} = {v};"));
                let r = self.stmt(body);
                self.indent -= 1;
                self.ranges.restore(var, previous);
                r?;
                self.line("}");
                Ok(())
            }
            Stmt::For {
                var,
                extent,
                kind,
                body,
            } => {
                if *kind == LoopKind::Parallel {
                    if let Some(launch) = self.parallel_launch()? {
                        return self.parallel_for(var, extent, body, &launch);
                    }
                }
                let ext = self.expr(extent)?;
                let ty = self.c_type(&var.ty().clone())?;
                let name = self.names.name(var);
                if let Some(p) = self
                    .d
                    .loop_pragma(*kind, extent.as_int())
                    .map_err(|u| self.unsupported(u))?
                {
                    self.line(&p);
                }
                let hi = bound_of(extent, &self.ranges).hi.map(|h| h - 1);
                let previous = self.ranges.set(var, Interval { lo: Some(0), hi });
                self.line(&format!(
                    "for ({ty} {name} = 0; {name} < {ext}; {name}++) {{"
                ));
                let outer = self.innermost.replace(var.clone());
                let r = self.nested(body);
                self.innermost = outer;
                self.ranges.restore(var, previous);
                r?;
                self.line("}");
                Ok(())
            }
            Stmt::ForMapping { .. } => Err(CodegenError::NotLowered {
                function: self.f.name.clone(),
                stmt: self.stmt_text(Some(s)),
            }),
            Stmt::If {
                cond,
                then_body,
                else_body,
            } => {
                let c = self.expr(cond)?;
                self.line(&format!("if ({c}) {{"));
                self.nested(then_body)?;
                if let Some(e) = else_body {
                    self.line("} else {");
                    self.nested(e)?;
                }
                self.line("}");
                Ok(())
            }
            Stmt::Seq(stmts) => {
                for st in stmts {
                    self.stmt(st)?;
                }
                Ok(())
            }
            Stmt::Barrier(b) => {
                let text = self.d.barrier(*b).map_err(|u| self.unsupported(u))?;
                self.line(&format!("{text};"));
                Ok(())
            }
            Stmt::Evaluate(e) => {
                let text = self.expr(e)?;
                self.line(&format!("{text};"));
                Ok(())
            }
            Stmt::Assert { cond, message } => {
                let c = self.expr(cond)?;
                let fail = self
                    .d
                    .assert_fail(&self.f.name, message, self.uses)
                    .map_err(|u| self.unsupported(u))?;
                self.line(&format!("if (!{c}) {{"));
                self.indent += 1;
                self.line(&format!("{fail};"));
                self.indent -= 1;
                self.line("}");
                Ok(())
            }
            Stmt::Launch {
                kernel,
                grid,
                block,
                shared_bytes,
                args,
            } => {
                let g = [
                    self.expr(&grid[0])?,
                    self.expr(&grid[1])?,
                    self.expr(&grid[2])?,
                ];
                let b = [
                    self.expr(&block[0])?,
                    self.expr(&block[1])?,
                    self.expr(&block[2])?,
                ];
                let sh = self.expr(shared_bytes)?;
                let a = args.iter().map(|x| self.expr(x)).collect::<R<Vec<_>>>()?;
                let text = self
                    .d
                    .launch(kernel, &g, &b, &sh, &a, self.uses)
                    .map_err(|u| self.unsupported(u))?;
                self.line(&format!("{text};"));
                Ok(())
            }
            Stmt::Return(value) => {
                match value {
                    Some(v) => {
                        let text = self.expr(v)?;
                        self.line(&format!("return {text};"));
                    }
                    None => self.line("return;"),
                }
                Ok(())
            }
        }
    }

    fn parallel_launch(&mut self) -> R<Option<String>> {
        self.d
            .parallel_launch(self.uses)
            .map_err(|u| self.unsupported(u))
    }

    /// A parallel loop as a task function and a call of `launch` (see
    /// [`Dialect::parallel_launch`]). The body may not assign a scalar declared outside it
    /// (each task sees its own copy); tensors it reads and writes are shared.
    fn parallel_for(&mut self, var: &Var, extent: &Expr, body: &'a Stmt, launch: &str) -> R<()> {
        let ext = self.expr(extent)?;
        let task = format!("hidet_{}_task{}", self.f.name, self.task_names);
        self.task_names += 1;
        let assigned = body.assigned_vars();
        let free = body.free_vars();
        let uses_index = free.contains(var);
        let captured: Vec<Var> = free.into_iter().filter(|v| v != var).collect();
        let arrays = self.local_arrays();
        let mut fields = Vec::new();
        let mut bindings = Vec::new();
        let mut inits = Vec::new();
        for v in &captured {
            if assigned.contains(v) {
                return Err(self.unsupported(Unsupported::new(format!(
                    "a parallel loop assigning `{}`, declared outside it",
                    v.name()
                ))));
            }
            let name = self.names.name(v);
            let ty = self.c_type(&v.ty().clone())?;
            let unaliased = self.f.params.contains(v) || arrays.contains(v);
            let local = match v.ty() {
                Type::Data(_) => format!("const {ty} {name}"),
                _ if unaliased => format!("{ty} __restrict__ {name}"),
                _ => format!("{ty} const {name}"),
            };
            fields.push(format!("    {ty} {name};\n"));
            bindings.push(format!("{local} = hidet_env->{name};"));
            inits.push(name);
        }
        let index_ty = self.c_type(&var.ty().clone())?;
        let index = self.names.name(var);

        let outer_out = std::mem::take(&mut self.out);
        let outer_indent = std::mem::replace(&mut self.indent, 1);
        let struct_name = format!("{task}_env");
        if captured.is_empty() {
            self.line("(void)hidet_env_ptr;");
        } else {
            self.line(&format!(
                "const struct {struct_name} *hidet_env = (const struct {struct_name} *)hidet_env_ptr;"
            ));
        }
        for b in &bindings {
            self.line(b);
        }
        self.line(&format!("const {index_ty} {index} = hidet_task;"));
        if !uses_index {
            self.line(&format!("(void){index};"));
        }
        let hi = bound_of(extent, &self.ranges).hi.map(|h| h - 1);
        let previous = self.ranges.set(var, Interval { lo: Some(0), hi });
        let outer_innermost = self.innermost.replace(var.clone());
        let r = self.stmt(body);
        self.innermost = outer_innermost;
        self.ranges.restore(var, previous);
        let task_body = std::mem::replace(&mut self.out, outer_out);
        self.indent = outer_indent;
        r?;

        let mut definition = String::new();
        if !captured.is_empty() {
            let _ = write!(
                definition,
                "struct {struct_name} {{\n{}}};\n",
                fields.concat()
            );
        }
        let _ = write!(
            definition,
            "static void {task}(void *hidet_env_ptr, int32_t hidet_task) {{\n{task_body}}}\n"
        );
        self.tasks.push(definition);
        if captured.is_empty() {
            self.line(&format!("{launch}({task}, NULL, {ext});"));
        } else {
            self.line("{");
            self.indent += 1;
            self.line(&format!(
                "struct {struct_name} hidet_args = {{ {} }};",
                inits.join(", ")
            ));
            self.line(&format!("{launch}({task}, &hidet_args, {ext});"));
            self.indent -= 1;
            self.line("}");
        }
        Ok(())
    }

    /// Tensors of the function declared with storage of their own (arrays, not views).
    fn local_arrays(&self) -> HashSet<Var> {
        let mut arrays = HashSet::new();
        self.f.body.visit(&mut |s| {
            if let Stmt::Declare {
                var, init: None, ..
            } = s
            {
                if matches!(var.ty(), Type::Tensor(_)) {
                    arrays.insert(var.clone());
                }
            }
        });
        arrays
    }

    fn declare(&mut self, var: &Var, scope: Scope, init: Option<&Expr>) -> R<()> {
        let name = self.names.name(var);
        let init_text = init.map(|e| self.expr(e)).transpose()?;
        let decl = match var.ty() {
            Type::Data(d) => Declaration {
                scope,
                ty: self.value_type(*d)?,
                name,
                array_len: None,
                align: d.bytes(),
                init: init_text,
            },
            Type::Pointer(inner) => Declaration {
                scope,
                ty: self.pointer_type(&inner.as_ref().clone())?,
                name,
                array_len: None,
                align: 8,
                init: init_text,
            },
            Type::Tensor(t) => {
                let elem = self.storage_type(t.dtype)?;
                match init_text {
                    Some(base) => Declaration {
                        scope,
                        ty: format!("{elem}*"),
                        name,
                        array_len: None,
                        align: 8,
                        init: Some(format!("(({elem}*){base})")),
                    },
                    None => {
                        if scope == Scope::Global {
                            return Err(self.unsupported(Unsupported::new(
                                "a global tensor declared without storage (use a parameter or a view)",
                            )));
                        }
                        let len = t.layout.size().as_int().ok_or_else(|| {
                            self.unsupported(Unsupported::new(format!(
                                "tensor `{}` of non-constant size",
                                var.name()
                            )))
                        })?;
                        if len <= 0 {
                            return Err(self.invalid(format!(
                                "tensor `{}` has storage size {len}",
                                var.name()
                            )));
                        }
                        Declaration {
                            scope,
                            ty: elem,
                            name,
                            array_len: Some(len),
                            align: t.dtype.bytes().max(16),
                            init: None,
                        }
                    }
                }
            }
            Type::Void => {
                return Err(self.invalid(format!("variable `{}` has type void", var.name())))
            }
        };
        let text = self.d.declare(&decl).map_err(|u| self.unsupported(u))?;
        self.line(&format!("{text};"));
        Ok(())
    }

    /// `cond ? tensor[..] : other` through the dialect's unconditional gather, when the read
    /// is a gather (see [`FunctionEmitter::gathers`]) of a non-empty tensor.
    fn guarded_gather(
        &mut self,
        cond: &Expr,
        read: &Expr,
        other: &Expr,
        dtype: DataType,
    ) -> R<Option<String>> {
        let ExprKind::TensorElement { tensor, indices } = read.kind() else {
            return Ok(None);
        };
        let Type::Tensor(t) = tensor.ty() else {
            return Ok(None);
        };
        let non_empty = t.layout.size().as_int().is_some_and(|n| n > 0);
        if !non_empty || indices.len() != t.layout.rank() || t.dtype != dtype {
            return Ok(None);
        }
        let offset = element_offset(&t.layout, indices);
        if !self.gathers(&offset) {
            return Ok(None);
        }
        let name = self.names.name(tensor);
        let (c, off, o) = (
            self.eager_condition(cond)?,
            self.expr(&offset)?,
            self.expr(other)?,
        );
        Ok(self
            .d
            .unconditional_gather(&name, &off, &c, &o, dtype, self.uses))
    }

    /// `cond` with `&&` and `||` of its top levels spelled `&` and `|` (both sides always
    /// evaluated, no branches for the compiler to keep). Requires a `cond` whose later
    /// operands are safe to evaluate when an earlier one decides ([`reads_nothing`]), such as
    /// the comparisons of bounds guards; a short-circuit chain of guards would keep C
    /// compilers from if-converting, and so vectorizing, the guarded read it selects.
    fn eager_condition(&mut self, cond: &Expr) -> R<String> {
        match cond.kind() {
            ExprKind::Binary(op @ (BinaryOp::And | BinaryOp::Or), a, b) => {
                let (a, b) = (self.eager_condition(a)?, self.eager_condition(b)?);
                let sym = if *op == BinaryOp::And { "&" } else { "|" };
                Ok(format!("(({a}) {sym} ({b}))"))
            }
            _ => self.expr(cond),
        }
    }

    /// Whether `offset` is not affine in the innermost loop variable (it divides it): such an
    /// access vectorizes as a gather, which C compilers recognize only on an offset computed
    /// in one type.
    fn gathers(&self, offset: &Expr) -> bool {
        let Some(var) = &self.innermost else {
            return false;
        };
        let mut found = false;
        offset.visit(&mut |e| {
            if let ExprKind::Binary(BinaryOp::Div | BinaryOp::Mod, a, _) = e.kind() {
                found |= a.mentions(var);
            }
        });
        found
    }

    /// `e` summed in type `wide`: each term of its top-level `+`/`-` chain converted first.
    fn wide_sum(&mut self, e: &Expr, wide: &str) -> R<String> {
        let terms = e.additive_terms();
        if terms.len() < 2 {
            return self.expr(e);
        }
        let mut text = String::new();
        for (i, (term, negative)) in terms.iter().enumerate() {
            let t = self.expr(term)?;
            let sign = match (i, negative) {
                (0, false) => "",
                (0, true) => "-",
                (_, false) => " + ",
                (_, true) => " - ",
            };
            let _ = write!(text, "{sign}({wide})({t})");
        }
        Ok(text)
    }

    /// The lvalue of `tensor[indices]` and the element data type.
    fn element(&mut self, tensor: &Var, indices: &[Expr]) -> R<(String, DataType)> {
        let name = self.names.name(tensor);
        match tensor.ty() {
            Type::Tensor(t) => {
                if indices.len() != t.layout.rank() {
                    return Err(self.invalid(format!(
                        "tensor `{}` of rank {} indexed with {} indices",
                        tensor.name(),
                        t.layout.rank(),
                        indices.len()
                    )));
                }
                let offset = element_offset(&t.layout, indices);
                let off = match self.d.offset_type() {
                    Some(wide) if !self.gathers(&offset) => self.wide_sum(&offset, wide)?,
                    _ => self.expr(&offset)?,
                };
                Ok((format!("{name}[{off}]"), t.dtype))
            }
            Type::Pointer(inner) => {
                let Some(dtype) = inner.as_data() else {
                    return Err(self.invalid(format!(
                        "pointer `{}` does not point to data",
                        tensor.name()
                    )));
                };
                if indices.len() != 1 {
                    return Err(self.invalid(format!(
                        "pointer `{}` indexed with {} indices (needs 1)",
                        tensor.name(),
                        indices.len()
                    )));
                }
                let off = self.expr(&indices[0])?;
                Ok((format!("{name}[{off}]"), dtype))
            }
            other => Err(self.invalid(format!(
                "`{}` of type {other} is indexed like a tensor",
                tensor.name()
            ))),
        }
    }

    // ---- expressions ----

    fn dtype_of(&self, e: &Expr) -> R<DataType> {
        e.dtype()
            .ok_or_else(|| self.invalid(format!("expression {e:?} has no value type")))
    }

    fn non_negative(&self, e: &Expr) -> bool {
        bound_of(e, &self.ranges).is_non_negative()
    }

    fn expr(&mut self, e: &Expr) -> R<String> {
        match e.kind() {
            ExprKind::Const(c) => self.constant(c),
            ExprKind::Var(v) => Ok(self.names.name(v)),
            ExprKind::Builtin(b) => self.d.builtin(*b).map_err(|u| self.unsupported(u)),
            ExprKind::Unary(op, a) => {
                let x = self.expr(a)?;
                match op {
                    UnaryOp::Neg => self.wrapped(e, format!("(-{x})")),
                    UnaryOp::Not => Ok(format!("(!{x})")),
                    UnaryOp::BitNot => self.wrapped(e, format!("(~{x})")),
                }
            }
            ExprKind::Binary(op, a, b) => self.binary(e, *op, a, b),
            ExprKind::Select(c, a, b) => {
                let dtype = self.dtype_of(e)?;
                if let Some(text) = self.guarded_gather(c, a, b, dtype)? {
                    return Ok(text);
                }
                let guard_select =
                    (is_index_guard(c) || is_mask_read(c)) && reads_nothing(a) && reads_nothing(b);
                let c = if reads_nothing(c) {
                    self.eager_condition(c)?
                } else {
                    self.expr(c)?
                };
                let (a, b) = (self.expr(a)?, self.expr(b)?);
                if guard_select {
                    if let Some(text) = self.d.guard_select(&c, &a, &b, dtype, self.uses) {
                        return Ok(text);
                    }
                }
                self.d
                    .select(&c, &a, &b, dtype, self.uses)
                    .map_err(|u| self.unsupported(u))
            }
            ExprKind::Cast(a, to) => {
                let from = self.dtype_of(a)?;
                let x = self.expr(a)?;
                if from == *to {
                    return Ok(x);
                }
                if from.lanes != to.lanes {
                    return Err(self.invalid(format!("cast from {from} to {to} changes lanes")));
                }
                self.d
                    .cast(&x, from, *to, self.uses)
                    .map_err(|u| self.unsupported(u))
            }
            ExprKind::Broadcast(a, lanes) => {
                let scalar = self.dtype_of(a)?;
                let x = self.expr(a)?;
                if *lanes == 1 {
                    return Ok(x);
                }
                self.d
                    .broadcast(&x, scalar.with_lanes(*lanes), self.uses)
                    .map_err(|u| self.unsupported(u))
            }
            ExprKind::Math(func, args) => {
                if args.len() != func.arity() {
                    return Err(self.invalid(format!(
                        "{} takes {} arguments, got {}",
                        func.name(),
                        func.arity(),
                        args.len()
                    )));
                }
                let dtype = if func.returns_bool() {
                    self.dtype_of(&args[0])?
                } else {
                    self.dtype_of(e)?
                };
                let texts = args.iter().map(|a| self.expr(a)).collect::<R<Vec<_>>>()?;
                self.d
                    .math(*func, dtype, &texts, self.uses)
                    .map_err(|u| self.unsupported(u))
            }
            ExprKind::Call(intr, args) => {
                let texts = args.iter().map(|a| self.expr(a)).collect::<R<Vec<_>>>()?;
                if let Intrinsic::Function { name, .. } = intr {
                    if !is_valid_identifier(name) {
                        return Err(self.invalid(format!("call of invalid function name `{name}`")));
                    }
                    return Ok(format!("{name}({})", texts.join(", ")));
                }
                let types: Vec<Type> = args.iter().map(Expr::ty).collect();
                self.d
                    .intrinsic(intr, &texts, &types, self.uses)
                    .map_err(|u| self.unsupported(u))
            }
            ExprKind::TensorElement { tensor, indices } => {
                let (lvalue, dtype) = self.element(tensor, indices)?;
                self.d
                    .load(dtype, lvalue, self.uses)
                    .map_err(|u| self.unsupported(u))
            }
            ExprKind::Address(inner) => match inner.kind() {
                ExprKind::TensorElement { tensor, indices } => {
                    let (lvalue, _) = self.element(tensor, indices)?;
                    Ok(format!("(&{lvalue})"))
                }
                ExprKind::Var(v) if matches!(v.ty(), Type::Data(_)) => {
                    Ok(format!("(&{})", self.names.name(v)))
                }
                _ => Err(self.unsupported(Unsupported::new(format!(
                    "address of {inner:?} (only tensor elements and scalar variables)"
                )))),
            },
        }
    }

    fn constant(&mut self, c: &Constant) -> R<String> {
        match c {
            Constant::Bool(b) => Ok(self.d.bool_literal(*b)),
            Constant::Int(v, t) => self.d.int_literal(*v, *t).map_err(|u| self.unsupported(u)),
            Constant::Float(v, t) => self
                .d
                .float_literal(*v, *t, self.uses)
                .map_err(|u| self.unsupported(u)),
        }
    }

    /// `text`, the C form of `e`, converted back to `e`'s type when that is a scalar integer
    /// narrower than `int`: C computes such arithmetic in `int` (integer promotion), where the
    /// IR wraps in the type itself (`~x` of a `uint16_t` 5 is 65530, not -6).
    fn wrapped(&mut self, e: &Expr, text: String) -> R<String> {
        let dtype = self.dtype_of(e)?;
        if dtype.is_vector() || !dtype.is_integer() || dtype.scalar.bytes() >= 4 {
            return Ok(text);
        }
        let ty = self
            .d
            .value_type(dtype, self.uses)
            .map_err(|u| self.unsupported(u))?;
        Ok(format!("(({ty}){text})"))
    }

    fn binary(&mut self, e: &Expr, op: BinaryOp, a: &Expr, b: &Expr) -> R<String> {
        let is_divmod = matches!(op, BinaryOp::Div | BinaryOp::Mod);
        if !is_divmod {
            let (x, y) = (self.expr(a)?, self.expr(b)?);
            let text = format!("({x} {} {y})", op.symbol());
            return match op {
                BinaryOp::Add | BinaryOp::Sub | BinaryOp::Mul | BinaryOp::Shl => {
                    self.wrapped(e, text)
                }
                _ => Ok(text),
            };
        }
        let dtype = self.dtype_of(e)?;
        let (x, y) = (self.expr(a)?, self.expr(b)?);
        if dtype.is_float() {
            return match op {
                BinaryOp::Div => Ok(format!("({x} / {y})")),
                _ => self
                    .d
                    .float_mod(dtype, &x, &y, self.uses)
                    .map_err(|u| self.unsupported(u)),
            };
        }
        let unsigned = !dtype.scalar.is_signed();
        if unsigned || (!dtype.is_vector() && self.non_negative(a) && self.non_negative(b)) {
            return Ok(format!("({x} {} {y})", op.symbol()));
        }
        if dtype.is_vector() {
            return Err(self.unsupported(Unsupported::new(format!(
                "floor {} of signed vector type {dtype}",
                if op == BinaryOp::Div {
                    "division"
                } else {
                    "modulo"
                }
            ))));
        }
        let helper = crate::helpers::floor_div_mod(self.d, op == BinaryOp::Div, dtype, self.uses)
            .map_err(|u| self.unsupported(u))?;
        self.wrapped(e, format!("{helper}({x}, {y})"))
    }
}

/// The flat offset of `layout` at `indices`, simplified: fused index maps (an im2col read,
/// a reshape) become affine in the loop variables where they can.
fn element_offset(layout: &hidet_ir::layout::Layout, indices: &[Expr]) -> Expr {
    simplify_expr(&layout.offset(indices), &VarRanges::default())
}

/// Whether `cond` is built of `&&`, `||` and `!` over comparisons of integers only (bounds
/// guards), reading nothing.
fn is_index_guard(cond: &Expr) -> bool {
    match cond.kind() {
        ExprKind::Binary(op, a, b) if op.is_logical() => is_index_guard(a) && is_index_guard(b),
        ExprKind::Unary(UnaryOp::Not, a) => is_index_guard(a),
        ExprKind::Binary(op, a, b) if op.is_comparison() => {
            let integer = |e: &Expr| e.dtype().is_some_and(|t| t.is_integer() && !t.is_vector());
            integer(a) && integer(b) && reads_nothing(a) && reads_nothing(b)
        }
        _ => false,
    }
}

/// Whether `cond` is one element of a `bool` tensor at indices that read nothing (a mask, such
/// as attention's causal mask): the condition is read whichever value it picks, so a pick
/// between values that read nothing can be a bitwise blend, which the C compiler vectorizes
/// where a `?:` on a loaded byte stays a branch per element.
fn is_mask_read(cond: &Expr) -> bool {
    match cond.kind() {
        ExprKind::TensorElement { indices, .. } => {
            cond.dtype() == Some(DataType::BOOL) && indices.iter().all(reads_nothing)
        }
        _ => false,
    }
}

/// Whether `e` neither reads memory, calls an intrinsic nor divides integers by a
/// non-constant:
/// evaluating it can neither fault nor have an effect, whatever an enclosing condition
/// decided.
fn reads_nothing(e: &Expr) -> bool {
    let mut pure = true;
    e.visit(&mut |x| {
        pure &= match x.kind() {
            ExprKind::TensorElement { .. } | ExprKind::Call(..) => false,
            ExprKind::Binary(BinaryOp::Div | BinaryOp::Mod, _, d) => {
                x.dtype().is_some_and(|t| t.is_float()) || d.as_int().is_some_and(|d| d != 0)
            }
            _ => true,
        }
    });
    pure
}
