//! A name-independent fingerprint of a compute definition, for tuning keys: two tasks that
//! compute the same thing on the same shapes get the same fingerprint, whatever their tensors
//! and axes are called and whichever model they come from. Target-neutral: every backend's
//! tunable tasks key their fused work with it (the CPU's matmul, the CUDA SIMT matmul).

use std::collections::HashMap;

use hidet_ir::compute::{ComputeDef, ComputeNode};
use hidet_ir::expr::{Expr, ExprKind, Var};
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
        let text = canonical_text(&matmul("x", 5, 7, 9, false));
        assert!(
            !text.contains("xa") && text.contains("in0") && text.contains("r0_0"),
            "{text}"
        );
    }
}
