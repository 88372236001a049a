//! Sizes as run-time parameters: one kernel for the shapes of a task that differ only in
//! some extents (a decoder's attention at every cache length).
//!
//! A lowered function is split into its *skeleton* — everything but the integer constants
//! that may become run-time values — and the list of those constants, its *sites*, in a
//! fixed order. Two lowerings of one task for different sizes that have equal skeletons
//! differ only at some sites; [`lift`] replaces the constants at chosen sites by new scalar
//! parameters (one per group of sites), giving a function `g` such that `g` called with a
//! group's value equal to the site constants of `f` computes exactly what `f` computes.
//! Whether a new lowering is such an instance is decided exactly, by comparing skeletons and
//! sites ([`Sites::instance_of`]), never guessed from a few samples.
//!
//! Liftable sites are the integer constants of expressions (indices, extents, conditions)
//! and of the layouts of tensor parameters and of views (a view's storage belongs to
//! someone else). Constants that size storage a kernel declares (local arrays) stay in the
//! skeleton, as do float and boolean constants, types, loop kinds and names of intrinsics.
//! Variables are numbered by first appearance, so lowerings that differ only in variable
//! identities have equal skeletons.

use std::collections::HashMap;
use std::fmt::Write;

use crate::dtype::DataType;
use crate::expr::{Constant, Expr, ExprKind, Var};
use crate::function::{Function, FunctionKind};
use crate::layout::{Layout, LayoutNode};
use crate::stmt::Stmt;
use crate::ty::{TensorType, Type};

/// One liftable constant: its value, integer type and what it may become.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Site {
    pub value: i64,
    pub dtype: DataType,
    pub kind: SiteKind,
}

/// What a site may become in a lifted function.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum SiteKind {
    /// A scalar parameter: the value is used as it is.
    Exact,
    /// A larger constant: an extent of an array the kernel declares (with constant
    /// strides), whose storage only has to hold what an instance addresses;
    /// `unit_bytes` of storage per unit of the extent.
    Capacity { unit_bytes: i64 },
}

/// At most this many bytes in an array a lifted function declares larger than its
/// instances need.
pub const MAX_CAPACITY_BYTES: i64 = 1 << 20;
/// A declared extent that varies is lifted to this many times the largest seen (within
/// [`MAX_CAPACITY_BYTES`]).
pub const CAPACITY_GROWTH: i64 = 4;

/// A lowered function taken apart: the skeleton text and the liftable constants in order.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Sites {
    pub skeleton: String,
    pub sites: Vec<Site>,
}

/// Sites that become one scalar parameter: all of them hold the same value in every
/// instance, of type `dtype`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SiteGroup {
    pub sites: Vec<usize>,
    pub dtype: DataType,
}

/// How a function is lifted: sites that become parameters (`groups`, one parameter each),
/// and declared extents that become larger constants (`capacities`: site and the extent
/// declared).
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct Lifting {
    pub groups: Vec<SiteGroup>,
    pub capacities: Vec<(usize, i64)>,
}

impl Sites {
    /// The skeleton and sites of `f`, a lowered CPU kernel (no task mappings left); `None`
    /// for other kinds of function (a CUDA launch configuration is not taken apart).
    pub fn of(f: &Function) -> Option<Sites> {
        if f.kind != FunctionKind::CpuKernel {
            return None;
        }
        let mut walk = Walk::default();
        walk.function(f);
        Some(Sites {
            skeleton: walk.skeleton,
            sites: walk.sites,
        })
    }

    /// The parameter values that make the function lifted from `self` by `lifting` exactly
    /// `other`, up to the storage of its declared arrays: `None` unless the skeletons are
    /// equal, every group's sites hold one value in `other`, every lifted extent of a
    /// declared array is at least `other`'s, and every other site holds `self`'s constant.
    pub fn instance_of(&self, lifting: &Lifting, other: &Sites) -> Option<Vec<i64>> {
        if self.skeleton != other.skeleton {
            return None;
        }
        lifting.values(&self.sites, &other.sites)
    }
}

impl Lifting {
    /// [`Sites::instance_of`] for the sites of two lowerings whose skeletons the caller has
    /// found equal: `base`, the lowering lifted, and `other`.
    pub fn values(&self, base: &[Site], other: &[Site]) -> Option<Vec<i64>> {
        if base.len() != other.len() {
            return None;
        }
        let mut covered = vec![false; base.len()];
        let mut values = Vec::with_capacity(self.groups.len());
        for group in &self.groups {
            let first = other.get(*group.sites.first()?)?.value;
            for &s in &group.sites {
                if other[s].value != first || other[s].dtype != group.dtype {
                    return None;
                }
                covered[s] = true;
            }
            values.push(first);
        }
        for &(s, capacity) in &self.capacities {
            if other[s].value > capacity {
                return None;
            }
            covered[s] = true;
        }
        let (mine, theirs) = (base, other);
        let fixed_equal = (0..mine.len()).all(|s| {
            covered[s] || (mine[s].value == theirs[s].value && mine[s].dtype == theirs[s].dtype)
        });
        fixed_equal.then_some(values)
    }
}

/// How to lift the function of `samples` (the sites of lowerings whose skeletons the caller
/// has found equal) so that each is an instance: the exact sites where they do not all agree
/// become parameters, grouped by the values they take across the samples (sites equal in
/// every sample share one); the declared extents where they disagree become
/// [`CAPACITY_GROWTH`] times the largest. `None` when the samples agree everywhere, differ in
/// length, or an array would exceed [`MAX_CAPACITY_BYTES`].
pub fn lifting_for(samples: &[&[Site]]) -> Option<Lifting> {
    let first = *samples.first()?;
    if samples.iter().any(|s| s.len() != first.len()) {
        return None;
    }
    let mut lifting = Lifting::default();
    let mut by_values: HashMap<(DataType, Vec<i64>), usize> = HashMap::new();
    for s in 0..first.len() {
        let values: Vec<i64> = samples.iter().map(|x| x[s].value).collect();
        if values.iter().all(|&v| v == values[0]) {
            continue;
        }
        let dtype = first[s].dtype;
        match first[s].kind {
            SiteKind::Capacity { unit_bytes } => {
                let largest = values.iter().copied().max()?;
                let capacity = largest.checked_mul(CAPACITY_GROWTH)?;
                if capacity.checked_mul(unit_bytes.max(1))? > MAX_CAPACITY_BYTES {
                    return None;
                }
                lifting.capacities.push((s, capacity));
            }
            SiteKind::Exact => match by_values.get(&(dtype, values.clone())) {
                Some(&g) => lifting.groups[g].sites.push(s),
                None => {
                    by_values.insert((dtype, values), lifting.groups.len());
                    lifting.groups.push(SiteGroup {
                        sites: vec![s],
                        dtype,
                    });
                }
            },
        }
    }
    (!lifting.groups.is_empty() || !lifting.capacities.is_empty()).then_some(lifting)
}

/// `f` lifted by `lifting`: the constants at each group's sites replaced by a new scalar
/// parameter of the group's type, appended to the parameters in group order (named `size0`,
/// `size1`, …), and each lifted extent of a declared array by its capacity. `f` must be the
/// function `Sites::of` took apart into the sites `lifting` indexes.
pub fn lift(f: &Function, lifting: &Lifting) -> Function {
    let params: Vec<Var> = lifting
        .groups
        .iter()
        .enumerate()
        .map(|(i, g)| Var::new(format!("size{i}"), g.dtype))
        .collect();
    let mut walk = Walk::default();
    for (g, p) in lifting.groups.iter().zip(&params) {
        for &s in &g.sites {
            walk.replace.insert(s, p.expr());
        }
    }
    for &(s, capacity) in &lifting.capacities {
        walk.capacities.insert(s, capacity);
    }
    let mut lifted = walk.function(f);
    lifted.params.extend(params);
    lifted
}

/// One pass over a function that writes its skeleton, collects its sites and rebuilds it
/// with `replace`d sites (variables whose types changed are renewed, and every mention of
/// them follows).
#[derive(Default)]
struct Walk {
    skeleton: String,
    sites: Vec<Site>,
    replace: HashMap<usize, Expr>,
    capacities: HashMap<usize, i64>,
    numbers: HashMap<u64, usize>,
    renewed: HashMap<u64, Var>,
}

impl Walk {
    fn token(&mut self, text: &str) {
        self.skeleton.push_str(text);
        self.skeleton.push(' ');
    }

    fn function(&mut self, f: &Function) -> Function {
        let _ = write!(self.skeleton, "fn {:?} {:?} (", f.kind, f.ret);
        let params = f.params.iter().map(|p| self.define(p, true)).collect();
        self.token(")");
        let body = self.stmt(&f.body);
        Function {
            name: f.name.clone(),
            kind: f.kind.clone(),
            params,
            ret: f.ret.clone(),
            body,
        }
    }

    /// Numbers a defined variable and walks its type; a tensor type's layout is liftable
    /// when `liftable`, else (storage the kernel declares) its extents are capacities where
    /// its strides are constants. Returns the variable to use from here on (renewed if its
    /// type changed).
    fn define(&mut self, var: &Var, liftable: bool) -> Var {
        let number = self.numbers.len();
        self.numbers.insert(var.id(), number);
        let _ = write!(self.skeleton, "v{number}:");
        let ty = match var.ty() {
            Type::Tensor(t) if !liftable => self.declared_array(t),
            ty => self.ty(ty, liftable),
        };
        if &ty == var.ty() {
            var.clone()
        } else {
            let renewed = Var::new(var.name(), ty);
            self.renewed.insert(var.id(), renewed.clone());
            renewed
        }
    }

    fn mention(&mut self, var: &Var) -> Var {
        let next = self.numbers.len();
        let number = *self.numbers.entry(var.id()).or_insert(next);
        let _ = write!(self.skeleton, "v{number} ");
        self.renewed.get(&var.id()).unwrap_or(var).clone()
    }

    /// The type of an array the kernel declares: with constant strides, its extents are
    /// capacity sites; otherwise the layout is kept whole.
    fn declared_array(&mut self, t: &TensorType) -> Type {
        let LayoutNode::Strided { shape, strides } = t.layout.node() else {
            return self.ty(&Type::Tensor(t.clone()), false);
        };
        let Some(constant_strides) = strides.iter().map(Expr::as_int).collect::<Option<Vec<_>>>()
        else {
            return self.ty(&Type::Tensor(t.clone()), false);
        };
        let _ = write!(self.skeleton, "array {:?} [", t.dtype);
        let extents = shape;
        let element_bytes = i64::try_from(t.dtype.bytes()).unwrap_or(i64::MAX);
        let shape = shape
            .iter()
            .zip(&constant_strides)
            .map(|(extent, &stride)| match extent.kind() {
                ExprKind::Const(Constant::Int(value, dtype)) => {
                    let site = self.sites.len();
                    self.sites.push(Site {
                        value: *value,
                        dtype: *dtype,
                        kind: SiteKind::Capacity {
                            unit_bytes: stride.saturating_mul(element_bytes),
                        },
                    });
                    let _ = write!(self.skeleton, "cap#{dtype} ");
                    match self.capacities.get(&site) {
                        Some(&capacity) => Expr::int_of(capacity, *dtype),
                        None => extent.clone(),
                    }
                }
                _ => {
                    let _ = write!(self.skeleton, "{extent} ");
                    extent.clone()
                }
            })
            .collect();
        // The stride of an extent-1 dimension addresses nothing (its index is always 0), so
        // it is left out of the skeleton: a row-major `[1, n, r]` array's outer stride `n·r`
        // is no reason to tell two lowerings apart.
        self.token(";");
        for (extent, stride) in extents.iter().zip(&constant_strides) {
            if extent.as_int() == Some(1) {
                self.token("_");
            } else {
                let _ = write!(self.skeleton, "{stride} ");
            }
        }
        self.token("]");
        Type::Tensor(TensorType {
            dtype: t.dtype,
            layout: Layout::from_node(LayoutNode::Strided {
                shape,
                strides: strides.clone(),
            }),
        })
    }

    fn ty(&mut self, ty: &Type, liftable: bool) -> Type {
        match ty {
            Type::Tensor(t) => {
                let _ = write!(self.skeleton, "tensor {:?} ", t.dtype);
                let layout = self.layout(&t.layout, liftable);
                Type::Tensor(TensorType {
                    dtype: t.dtype,
                    layout,
                })
            }
            Type::Pointer(inner) => {
                self.token("ptr");
                Type::pointer_to(self.ty(inner, liftable))
            }
            other => {
                let _ = write!(self.skeleton, "{other:?} ");
                other.clone()
            }
        }
    }

    fn layout(&mut self, layout: &Layout, liftable: bool) -> Layout {
        match layout.node() {
            LayoutNode::Strided { shape, strides } => {
                self.token("strided[");
                let shape = shape
                    .iter()
                    .map(|e| self.layout_expr(e, liftable))
                    .collect();
                self.token(";");
                let strides = strides
                    .iter()
                    .map(|e| self.layout_expr(e, liftable))
                    .collect();
                self.token("]");
                Layout::from_node(LayoutNode::Strided { shape, strides })
            }
            LayoutNode::Compose(outer, inner) => {
                self.token("compose(");
                let outer = self.layout(outer, liftable);
                let inner = self.layout(inner, liftable);
                self.token(")");
                Layout::from_node(LayoutNode::Compose(outer, inner))
            }
            LayoutNode::Swizzle {
                base,
                dim,
                regards_dim,
                log_step,
            } => {
                let _ = write!(self.skeleton, "swizzle {dim} {regards_dim} {log_step} (");
                let base = self.layout(base, liftable);
                self.token(")");
                Layout::from_node(LayoutNode::Swizzle {
                    base,
                    dim: *dim,
                    regards_dim: *regards_dim,
                    log_step: *log_step,
                })
            }
            local @ LayoutNode::Local { .. } => {
                let _ = write!(self.skeleton, "{local:?} ");
                layout.clone()
            }
        }
    }

    /// A layout expression: liftable, or kept whole in the skeleton (the extents of storage
    /// the kernel declares).
    fn layout_expr(&mut self, e: &Expr, liftable: bool) -> Expr {
        if liftable {
            self.expr(e)
        } else {
            let _ = write!(self.skeleton, "{e} ");
            e.clone()
        }
    }

    fn expr(&mut self, e: &Expr) -> Expr {
        match e.kind() {
            ExprKind::Const(Constant::Int(value, dtype)) => {
                let site = self.sites.len();
                self.sites.push(Site {
                    value: *value,
                    dtype: *dtype,
                    kind: SiteKind::Exact,
                });
                let _ = write!(self.skeleton, "#{dtype} ");
                self.replace
                    .get(&site)
                    .cloned()
                    .unwrap_or_else(|| e.clone())
            }
            ExprKind::Const(other) => {
                let text = match other {
                    Constant::Float(v, t) => format!("f{:x}:{t:?} ", v.to_bits()),
                    other => format!("{other:?} "),
                };
                self.skeleton.push_str(&text);
                e.clone()
            }
            ExprKind::Var(v) => {
                let v = self.mention(v);
                v.expr()
            }
            ExprKind::Builtin(b) => {
                let _ = write!(self.skeleton, "{b:?} ");
                e.clone()
            }
            ExprKind::Unary(op, a) => {
                let _ = write!(self.skeleton, "({op:?} ");
                let a = self.expr(a);
                self.token(")");
                Expr::new(ExprKind::Unary(*op, a))
            }
            ExprKind::Binary(op, a, b) => {
                let _ = write!(self.skeleton, "({op:?} ");
                let (a, b) = (self.expr(a), self.expr(b));
                self.token(")");
                Expr::new(ExprKind::Binary(*op, a, b))
            }
            ExprKind::Select(c, a, b) => {
                self.token("(select");
                let (c, a, b) = (self.expr(c), self.expr(a), self.expr(b));
                self.token(")");
                Expr::new(ExprKind::Select(c, a, b))
            }
            ExprKind::Cast(a, t) => {
                let _ = write!(self.skeleton, "(cast {t:?} ");
                let a = self.expr(a);
                self.token(")");
                Expr::new(ExprKind::Cast(a, *t))
            }
            ExprKind::Broadcast(a, lanes) => {
                let _ = write!(self.skeleton, "(broadcast {lanes} ");
                let a = self.expr(a);
                self.token(")");
                Expr::new(ExprKind::Broadcast(a, *lanes))
            }
            ExprKind::Math(f, args) => {
                let _ = write!(self.skeleton, "({f:?} ");
                let args = args.iter().map(|a| self.expr(a)).collect();
                self.token(")");
                Expr::new(ExprKind::Math(*f, args))
            }
            ExprKind::Call(intrinsic, args) => {
                let _ = write!(self.skeleton, "({intrinsic:?} ");
                let args = args.iter().map(|a| self.expr(a)).collect();
                self.token(")");
                Expr::new(ExprKind::Call(intrinsic.clone(), args))
            }
            ExprKind::TensorElement { tensor, indices } => {
                self.token("(at");
                let tensor = self.mention(tensor);
                let indices = indices.iter().map(|i| self.expr(i)).collect();
                self.token(")");
                Expr::new(ExprKind::TensorElement { tensor, indices })
            }
            ExprKind::Address(a) => {
                self.token("(addr");
                let a = self.expr(a);
                self.token(")");
                Expr::new(ExprKind::Address(a))
            }
        }
    }

    fn stmt(&mut self, s: &Stmt) -> Stmt {
        match s {
            Stmt::Declare { var, scope, init } => {
                let _ = write!(self.skeleton, "declare {scope:?} ");
                // A view's layout addresses storage declared elsewhere; a declared array's
                // layout sizes storage of its own.
                let init = init.as_ref().map(|e| self.expr(e));
                let var = self.define(var, init.is_some());
                Stmt::Declare {
                    var,
                    scope: *scope,
                    init,
                }
            }
            Stmt::Store {
                tensor,
                indices,
                value,
            } => {
                self.token("store");
                let tensor = self.mention(tensor);
                let indices = indices.iter().map(|i| self.expr(i)).collect();
                let value = self.expr(value);
                Stmt::Store {
                    tensor,
                    indices,
                    value,
                }
            }
            Stmt::Assign { var, value } => {
                self.token("assign");
                let var = self.mention(var);
                let value = self.expr(value);
                Stmt::Assign { var, value }
            }
            Stmt::Let { var, value, body } => {
                self.token("let");
                let value = self.expr(value);
                let var = self.define(var, false);
                let body = Box::new(self.stmt(body));
                self.token("end");
                Stmt::Let { var, value, body }
            }
            Stmt::For {
                var,
                extent,
                kind,
                body,
            } => {
                let _ = write!(self.skeleton, "for {kind:?} ");
                let extent = self.expr(extent);
                let var = self.define(var, false);
                let body = Box::new(self.stmt(body));
                self.token("end");
                Stmt::For {
                    var,
                    extent,
                    kind: *kind,
                    body,
                }
            }
            Stmt::ForMapping { .. } => {
                // Not lowered: kept whole (its mapping's extents are not sites).
                let _ = write!(self.skeleton, "{s:?} ");
                s.clone()
            }
            Stmt::If {
                cond,
                then_body,
                else_body,
            } => {
                self.token("if");
                let cond = self.expr(cond);
                let then_body = Box::new(self.stmt(then_body));
                self.token("else");
                let else_body = else_body.as_ref().map(|e| Box::new(self.stmt(e)));
                self.token("end");
                Stmt::If {
                    cond,
                    then_body,
                    else_body,
                }
            }
            Stmt::Seq(stmts) => {
                self.token("{");
                let stmts = stmts.iter().map(|s| self.stmt(s)).collect();
                self.token("}");
                Stmt::Seq(stmts)
            }
            Stmt::Barrier(b) => {
                let _ = write!(self.skeleton, "barrier {b:?} ");
                s.clone()
            }
            Stmt::Evaluate(e) => {
                self.token("eval");
                Stmt::Evaluate(self.expr(e))
            }
            Stmt::Assert { cond, message } => {
                let _ = write!(self.skeleton, "assert {message:?} ");
                Stmt::Assert {
                    cond: self.expr(cond),
                    message: message.clone(),
                }
            }
            Stmt::Launch {
                kernel,
                grid,
                block,
                shared_bytes,
                args,
            } => {
                let _ = write!(self.skeleton, "launch {kernel:?} ");
                Stmt::Launch {
                    kernel: kernel.clone(),
                    grid: grid.clone().map(|e| self.expr(&e)),
                    block: block.clone().map(|e| self.expr(&e)),
                    shared_bytes: self.expr(shared_bytes),
                    args: args.iter().map(|a| self.expr(a)).collect(),
                }
            }
            Stmt::Return(e) => {
                self.token("return");
                Stmt::Return(e.as_ref().map(|e| self.expr(e)))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::interp::{run_function, Arg, Buffer};
    use crate::passes::lower_function;
    use crate::prelude::*;

    /// `out[r] = Σ_j x[r, j] · (j + 1)` over `ROWS` rows of `n` columns, through a declared
    /// array of `n` elements per row: lowered.
    fn weighted_row_sums(n: i64) -> Function {
        const ROWS: i64 = 3;
        let mut fb = FunctionBuilder::cpu_kernel("row_sums");
        let x = fb.tensor_param("x", DataType::F32, [ROWS, n]);
        let out = fb.tensor_param("out", DataType::F32, [ROWS]);
        let row = fb.register_tensor("row", DataType::F32, row_major([1, n]));
        fb.for_range("r", ROWS, |fb, r| {
            fb.for_range("j", n, |fb, j| {
                let weight = Expr::cast(&(&j + 1), DataType::F32);
                fb.store(
                    &row,
                    [Expr::int(0), j.clone()],
                    x.at([r.clone(), j]) * weight,
                );
            });
            let acc = fb.var("acc", Expr::f32(0.0));
            fb.for_range("j", n, |fb, j| {
                fb.assign(&acc, acc.expr() + row.at([Expr::int(0), j]));
            });
            fb.store(&out, [r], acc.expr());
        });
        lower_function(fb.finish()).expect("a well-formed kernel lowers")
    }

    fn run(f: &Function, x: &[f64], sizes: &[i64]) -> Vec<f64> {
        let mut args = vec![
            Arg::Buffer(Buffer::from_f64(DataType::F32, x)),
            Arg::Buffer(Buffer::zeros(DataType::F32, 3)),
        ];
        args.extend(
            sizes
                .iter()
                .map(|&v| Arg::Scalar(crate::interp::Scalar::Int(v))),
        );
        run_function(f, &mut args).expect("the kernel runs");
        match &args[1] {
            Arg::Buffer(out) => out.to_f64(),
            Arg::Scalar(_) => unreachable!("argument 1 is the output buffer"),
        }
    }

    #[test]
    fn lowerings_that_differ_in_sizes_share_a_skeleton_and_an_instance_runs_like_its_own() {
        let sites = |n| Sites::of(&weighted_row_sums(n)).expect("a CPU kernel");
        assert_eq!(sites(9), sites(9), "variable identities do not matter");
        let (s5, s6, s11) = (sites(5), sites(6), sites(11));
        assert_eq!(s5.skeleton, s6.skeleton);
        assert_ne!(s5.sites, s6.sites);

        let lifting = lifting_for(&[&s5.sites, &s6.sites]).expect("the sizes differ");
        assert_eq!(
            lifting.groups.len(),
            1,
            "every varying site holds n: {lifting:?}"
        );
        assert_eq!(lifting.capacities.len(), 1, "the declared row: {lifting:?}");
        let lifted = lift(&weighted_row_sums(6), &lifting);
        assert_eq!(lifted.params.len(), 3, "x, out and n");

        let values = s6
            .instance_of(&lifting, &s11)
            .expect("11 columns fit 4 × 6");
        assert_eq!(values, vec![11]);
        let x: Vec<f64> = (0..33).map(|i| ((i * 7) % 13) as f64 - 6.5).collect();
        assert_eq!(
            run(&lifted, &x, &values),
            run(&weighted_row_sums(11), &x, &[])
        );

        assert_eq!(
            s6.instance_of(&lifting, &sites(25)),
            None,
            "25 columns exceed the row's capacity of 24"
        );
        assert!(
            lifting_for(&[&s5.sites, &s5.sites]).is_none(),
            "nothing varies"
        );
    }
}
