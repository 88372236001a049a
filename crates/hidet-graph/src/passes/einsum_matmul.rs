//! A two-operand `Einsum` that contracts labels as one batched matrix product.
//!
//! ```text
//! Einsum(A, B; "abcd,cde->abe")
//!   →  Reshape(MatMul(Reshape(A, [ab, cd]), Reshape(B, [cd, e])), [a, b, e])
//! ```
//!
//! The labels split into batch labels (in both operands and the output), row labels (in `A`
//! and the output), column labels (in `B` and the output) and contracted labels (in both
//! operands only). `A` is transposed to `[batch, rows, contracted]` and `B` to
//! `[batch, contracted, columns]` (no-op transposes are not written), each flattened to three
//! axes (two without batch labels), multiplied, and the product unflattened and transposed to
//! the output's order — so the contraction runs on the backend's matrix template instead of a
//! generic reduction (a Keras `EinsumDense` exported by tf2onnx contracts two labels at once).
//! Equations with ellipses, repeated labels, labels summed within one operand, no contracted
//! label, or sizes that differ between the operands are left to the operator.

use crate::attribute::{Attribute, Attributes};
use crate::graph::{Graph, GraphError, NodeId, ValueId};
use crate::ops::einsum::product_labels;
use crate::passes::rewrite::Rewriter;
use crate::passes::GraphPass;

/// Rewrites default-domain two-operand float `Einsum` nodes of static shapes into transposes,
/// reshapes and one `MatMul` (see the module docs).
pub struct EinsumAsMatMul;

impl GraphPass for EinsumAsMatMul {
    fn name(&self) -> &'static str {
        "einsum-as-matmul"
    }

    fn run(&self, graph: Graph) -> Result<Graph, GraphError> {
        Rewriter::new(graph).replace_each(plan, |p| p.y, rewrite)
    }
}

/// One operand's side of the product: its value, the permutation that orders its axes as
/// `[batch, rows or contracted, contracted or columns]`, and the flattened shape.
struct Side {
    value: ValueId,
    perm: Vec<usize>,
    flat: Vec<usize>,
}

struct Plan {
    a: Side,
    b: Side,
    y: ValueId,
    /// The product's shape unflattened: batch, row, then column sizes.
    unflat: Vec<usize>,
    /// The output's axes as positions in `unflat`.
    out_perm: Vec<usize>,
}

fn plan(rw: &Rewriter, n: NodeId) -> Option<Plan> {
    let g = rw.graph();
    let node = &g.nodes()[n.0];
    if node.op_type != "Einsum" || !node.domain.is_empty() {
        return None;
    }
    let (a, b) = match node.inputs.as_slice() {
        [Some(a), Some(b)] => (*a, *b),
        _ => return None,
    };
    let y = match node.outputs.as_slice() {
        [Some(y)] => *y,
        _ => return None,
    };
    let equation = node.attrs.string("equation").ok()??;
    let (la, lb, lo) = product_labels(equation)?;
    let (ta, tb) = (&g.value(a).ty, &g.value(b).ty);
    if !ta.dtype.is_float() || ta.dtype != tb.dtype {
        return None;
    }
    let (sa, sb) = (ta.fixed_shape()?, tb.fixed_shape()?);
    if sa.len() != la.len() || sb.len() != lb.len() {
        return None;
    }
    let size = |l: u8| -> Option<usize> {
        let in_a = la.iter().position(|&x| x == l).map(|i| sa[i]);
        let in_b = lb.iter().position(|&x| x == l).map(|i| sb[i]);
        match (in_a, in_b) {
            (Some(x), Some(y)) if x != y => None,
            (x, y) => x.or(y),
        }
    };
    let (in_a, in_b, in_out) = (
        |l: &u8| la.contains(l),
        |l: &u8| lb.contains(l),
        |l: &u8| lo.contains(l),
    );
    let batch: Vec<u8> = lo.iter().copied().filter(|l| in_a(l) && in_b(l)).collect();
    let rows: Vec<u8> = lo.iter().copied().filter(|l| in_a(l) && !in_b(l)).collect();
    let cols: Vec<u8> = lo.iter().copied().filter(|l| in_b(l) && !in_a(l)).collect();
    let contracted: Vec<u8> = la
        .iter()
        .copied()
        .filter(|l| in_b(l) && !in_out(l))
        .collect();
    let summed_alone =
        la.iter().any(|l| !in_b(l) && !in_out(l)) || lb.iter().any(|l| !in_a(l) && !in_out(l));
    if contracted.is_empty() || summed_alone {
        return None;
    }
    let product = |labels: &[u8]| -> Option<usize> {
        labels
            .iter()
            .try_fold(1usize, |acc, &l| acc.checked_mul(size(l)?))
    };
    let (bt, m, k, nn) = (
        product(&batch)?,
        product(&rows)?,
        product(&contracted)?,
        product(&cols)?,
    );
    let positions = |labels: &[u8], order: &[&[u8]]| -> Vec<usize> {
        order
            .iter()
            .flat_map(|group| group.iter())
            .map(|l| {
                labels
                    .iter()
                    .position(|x| x == l)
                    .expect("label of this operand")
            })
            .collect()
    };
    let with_batch = |dims: [usize; 2]| -> Vec<usize> {
        if batch.is_empty() {
            dims.to_vec()
        } else {
            vec![bt, dims[0], dims[1]]
        }
    };
    let unflat_labels: Vec<u8> = batch.iter().chain(&rows).chain(&cols).copied().collect();
    Some(Plan {
        a: Side {
            value: a,
            perm: positions(&la, &[&batch, &rows, &contracted]),
            flat: with_batch([m, k]),
        },
        b: Side {
            value: b,
            perm: positions(&lb, &[&batch, &contracted, &cols]),
            flat: with_batch([k, nn]),
        },
        y,
        unflat: unflat_labels
            .iter()
            .map(|&l| size(l))
            .collect::<Option<Vec<_>>>()?,
        out_perm: positions(&unflat_labels, &[&lo]),
    })
}

/// `v` transposed by `perm` unless it is the identity.
fn transposed(rw: &mut Rewriter, v: ValueId, perm: &[usize]) -> Result<ValueId, GraphError> {
    if perm.iter().enumerate().all(|(i, &p)| i == p) {
        return Ok(v);
    }
    let mut attrs = Attributes::new();
    attrs.insert(
        "perm",
        Attribute::Ints(perm.iter().map(|&p| p as i64).collect()),
    );
    rw.add_op("Transpose", attrs, &[v])
}

fn reshaped(rw: &mut Rewriter, v: ValueId, dims: &[usize]) -> Result<ValueId, GraphError> {
    let shape = rw.add_shape(dims);
    rw.add_op("Reshape", Attributes::new(), &[v, shape])
}

fn rewrite(rw: &mut Rewriter, p: &Plan) -> Result<ValueId, GraphError> {
    let mut operands = Vec::with_capacity(2);
    for side in [&p.a, &p.b] {
        let ordered = transposed(rw, side.value, &side.perm)?;
        operands.push(reshaped(rw, ordered, &side.flat)?);
    }
    let product = rw.add_op("MatMul", Attributes::new(), &operands)?;
    let unflat = reshaped(rw, product, &p.unflat)?;
    transposed(rw, unflat, &p.out_perm)
}
