//! A name-independent fingerprint of a compute definition, for tuning keys: two tasks that
//! compute the same thing on the same shapes get the same fingerprint, whatever their tensors
//! and axes are called and whichever model they come from. Target-neutral: every backend's
//! tunable tasks key their fused work with it (the CPU's matmul, the CUDA SIMT matmul).
//! [`canonical_digest`] tells the same apart without printing, for keys that live in one
//! process (a backend's memo of lowered tasks, looked up for every task of every new shape).

use std::collections::HashMap;
use std::hash::{Hash, Hasher};

use hidet_ir::compute::{ComputeDef, ComputeNode};
use hidet_ir::expr::{Constant, Expr, ExprKind, Var};
use hidet_ir::layout::{Layout, LayoutNode};
use hidet_ir::ty::Type;
use sha2::{Digest, Sha256};

/// The first 16 hex digits of the SHA-256 of [`canonical_text`].
pub fn fingerprint(def: &ComputeDef) -> String {
    let digest = Sha256::digest(canonical_text(def).as_bytes());
    digest.iter().take(8).map(|b| format!("{b:02x}")).collect()
}

/// `def` printed with every variable renamed by its role and position (`in0`, `t1`,
/// `a1_0`, `r1_0`), types and reduction kinds included.
pub fn canonical_text(def: &ComputeDef) -> String {
    let mut names: HashMap<Var, Var> = HashMap::new();
    let mut text = String::new();
    for (i, v) in def.inputs.iter().enumerate() {
        let c = rename(v, format!("in{i}"), &mut names);
        text.push_str(&format!("input {}: {}\n", c.name(), c.ty()));
    }
    for (j, (out, node)) in def.nodes.iter().enumerate() {
        let c = rename(out, format!("t{j}"), &mut names);
        let axes: Vec<String> = node
            .axes()
            .iter()
            .enumerate()
            .map(|(d, a)| {
                rename(a, format!("a{j}_{d}"), &mut names)
                    .name()
                    .to_string()
            })
            .collect();
        let head = format!("{}: {} [{}]", c.name(), c.ty(), axes.join(", "));
        match node {
            ComputeNode::Grid { value, .. } => {
                text.push_str(&format!("{head} = {}\n", canonical_expr(value, &names)));
            }
            ComputeNode::Reduce {
                reduce_axes,
                reduce_shape,
                kind,
                value,
                ..
            } => {
                let raxes: Vec<String> = reduce_axes
                    .iter()
                    .enumerate()
                    .map(|(d, a)| {
                        rename(a, format!("r{j}_{d}"), &mut names)
                            .name()
                            .to_string()
                    })
                    .collect();
                let shape: Vec<String> = reduce_shape
                    .iter()
                    .map(|e| canonical_expr(e, &names).to_string())
                    .collect();
                text.push_str(&format!(
                    "{head} = {kind:?}[{}] over [{}] {}\n",
                    raxes.join(", "),
                    shape.join(", "),
                    canonical_expr(value, &names)
                ));
            }
        }
    }
    let outputs: Vec<String> = def
        .outputs
        .iter()
        .map(|v| names.get(v).map_or("?", |c| c.name()).to_string())
        .collect();
    text.push_str(&format!("outputs {}\n", outputs.join(", ")));
    text
}

/// The canonical variable of `v`, created as `name` (with `v`'s type) on first use.
fn rename(v: &Var, name: String, names: &mut HashMap<Var, Var>) -> Var {
    names
        .entry(v.clone())
        .or_insert_with(|| Var::new(name, v.ty().clone()))
        .clone()
}

/// `e` with its variables (including tensors of element reads) replaced by their canonical
/// counterparts; variables without one are kept.
fn canonical_expr(e: &Expr, names: &HashMap<Var, Var>) -> Expr {
    e.rewrite(&mut |node| match node.kind() {
        ExprKind::Var(v) => names.get(v).map(Var::expr),
        ExprKind::TensorElement { tensor, indices } => {
            names.get(tensor).map(|t| t.at(indices.iter().cloned()))
        }
        _ => None,
    })
}

/// The SHA-256 of a binary encoding of `def` with its variables numbered by role and
/// position, as [`canonical_text`] names them: two definitions that differ only in their
/// variables' names get the same digest, and equal digests mean the same computation (types,
/// layouts, reduction kinds and constants' exact bits included). Enum tags are encoded as
/// this build numbers them: compare digests within one process, never persist them.
pub fn canonical_digest(def: &ComputeDef) -> [u8; 32] {
    let mut enc = Encoder::default();
    enc.len(def.inputs.len());
    for v in &def.inputs {
        enc.define(v);
    }
    enc.len(def.nodes.len());
    for (out, node) in &def.nodes {
        enc.define(out);
        enc.len(node.axes().len());
        for a in node.axes() {
            enc.define(a);
        }
        match node {
            ComputeNode::Grid { value, .. } => {
                enc.tag(0);
                enc.expr(value);
            }
            ComputeNode::Reduce {
                reduce_axes,
                reduce_shape,
                kind,
                value,
                ..
            } => {
                enc.tag(1);
                enc.len(reduce_axes.len());
                for a in reduce_axes {
                    enc.define(a);
                }
                enc.exprs(reduce_shape);
                kind.hash(&mut enc);
                enc.expr(value);
            }
        }
    }
    enc.len(def.outputs.len());
    for v in &def.outputs {
        enc.var(v);
    }
    Sha256::digest(&enc.bytes).into()
}

/// The bytes [`canonical_digest`] hashes, written through [`Hasher`] so that the IR's
/// `Hash` enums encode themselves.
#[derive(Default)]
struct Encoder {
    bytes: Vec<u8>,
    /// Each defined variable's number, in order of definition.
    ids: HashMap<Var, u32>,
}

impl Hasher for Encoder {
    fn write(&mut self, bytes: &[u8]) {
        self.bytes.extend_from_slice(bytes);
    }

    fn finish(&self) -> u64 {
        0
    }
}

impl Encoder {
    fn tag(&mut self, tag: u8) {
        self.bytes.push(tag);
    }

    fn len(&mut self, n: usize) {
        self.write_u64(n as u64);
    }

    fn text(&mut self, text: &str) {
        self.len(text.len());
        self.write(text.as_bytes());
    }

    /// Numbers `v` (its type encoded with it); a variable defined twice keeps its first number.
    fn define(&mut self, v: &Var) {
        let next = self.ids.len() as u32;
        let id = *self.ids.entry(v.clone()).or_insert(next);
        self.write_u32(id);
        self.ty(v.ty());
    }

    /// A use of `v`: its number, or its name and type when the definition never defines it.
    fn var(&mut self, v: &Var) {
        match self.ids.get(v) {
            Some(&id) => {
                self.tag(0);
                self.write_u32(id);
            }
            None => {
                self.tag(1);
                self.text(v.name());
                self.ty(v.ty());
            }
        }
    }

    fn ty(&mut self, ty: &Type) {
        match ty {
            Type::Data(dtype) => {
                self.tag(0);
                dtype.hash(self);
            }
            Type::Pointer(inner) => {
                self.tag(1);
                self.ty(inner);
            }
            Type::Tensor(t) => {
                self.tag(2);
                t.dtype.hash(self);
                self.layout(&t.layout);
            }
            Type::Void => self.tag(3),
        }
    }

    fn layout(&mut self, layout: &Layout) {
        match layout.node() {
            LayoutNode::Strided { shape, strides } => {
                self.tag(0);
                self.exprs(shape);
                self.exprs(strides);
            }
            LayoutNode::Local { shape } => {
                self.tag(1);
                shape.hash(self);
            }
            LayoutNode::Compose(outer, inner) => {
                self.tag(2);
                self.layout(outer);
                self.layout(inner);
            }
            LayoutNode::Swizzle {
                base,
                dim,
                regards_dim,
                log_step,
            } => {
                self.tag(3);
                self.layout(base);
                (dim, regards_dim, log_step).hash(self);
            }
        }
    }

    fn exprs(&mut self, exprs: &[Expr]) {
        self.len(exprs.len());
        for e in exprs {
            self.expr(e);
        }
    }

    fn expr(&mut self, e: &Expr) {
        match e.kind() {
            ExprKind::Const(c) => {
                self.tag(0);
                match *c {
                    Constant::Bool(b) => (0u8, b).hash(self),
                    Constant::Int(v, t) => (1u8, v, t).hash(self),
                    Constant::Float(v, t) => (2u8, v.to_bits(), t).hash(self),
                }
            }
            ExprKind::Var(v) => {
                self.tag(1);
                self.var(v);
            }
            ExprKind::Builtin(b) => {
                self.tag(2);
                b.hash(self);
            }
            ExprKind::Unary(op, a) => {
                self.tag(3);
                op.hash(self);
                self.expr(a);
            }
            ExprKind::Binary(op, a, b) => {
                self.tag(4);
                op.hash(self);
                self.expr(a);
                self.expr(b);
            }
            ExprKind::Select(c, a, b) => {
                self.tag(5);
                self.expr(c);
                self.expr(a);
                self.expr(b);
            }
            ExprKind::Cast(a, t) => {
                self.tag(6);
                t.hash(self);
                self.expr(a);
            }
            ExprKind::Broadcast(a, lanes) => {
                self.tag(7);
                lanes.hash(self);
                self.expr(a);
            }
            ExprKind::Math(f, args) => {
                self.tag(8);
                f.hash(self);
                self.exprs(args);
            }
            ExprKind::Call(intrinsic, args) => {
                self.tag(9);
                self.text(&format!("{intrinsic:?}"));
                self.exprs(args);
            }
            ExprKind::TensorElement { tensor, indices } => {
                self.tag(10);
                self.var(tensor);
                self.exprs(indices);
            }
            ExprKind::Address(a) => {
                self.tag(11);
                self.expr(a);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use hidet_ir::compute::{reduce, tensor_input, ReduceKind};
    use hidet_ir::dtype::DataType;

    fn matmul(prefix: &str, m: i64, n: i64, k: i64, relu: bool) -> ComputeDef {
        let a = tensor_input(&format!("{prefix}a"), DataType::F32, [m, k]);
        let b = tensor_input(&format!("{prefix}b"), DataType::F32, [k, n]);
        let (c, node) = reduce(
            &format!("{prefix}c"),
            DataType::F32,
            [m, n],
            [k],
            ReduceKind::Sum,
            |i, r| {
                let prod = a.at([i[0].clone(), r[0].clone()]) * b.at([r[0].clone(), i[1].clone()]);
                if relu {
                    prod.clone() * prod
                } else {
                    prod
                }
            },
        );
        ComputeDef {
            inputs: vec![a, b],
            nodes: vec![(c.clone(), node)],
            outputs: vec![c],
        }
    }

    #[test]
    fn names_do_not_matter_but_shapes_and_math_do() {
        let base = fingerprint(&matmul("x", 5, 7, 9, false));
        assert_eq!(base, fingerprint(&matmul("other_", 5, 7, 9, false)));
        assert_ne!(base, fingerprint(&matmul("x", 5, 7, 10, false)));
        assert_ne!(base, fingerprint(&matmul("x", 5, 7, 9, true)));
        let digest = canonical_digest(&matmul("x", 5, 7, 9, false));
        assert_eq!(digest, canonical_digest(&matmul("other_", 5, 7, 9, false)));
        assert_ne!(digest, canonical_digest(&matmul("x", 5, 7, 10, false)));
        assert_ne!(digest, canonical_digest(&matmul("x", 5, 7, 9, true)));
        let text = canonical_text(&matmul("x", 5, 7, 9, false));
        assert!(
            !text.contains("xa") && text.contains("in0") && text.contains("r0_0"),
            "{text}"
        );
    }
}
