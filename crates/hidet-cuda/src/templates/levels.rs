//! Iterating a composed task mapping level by level, so that a template
//! knows not only each task's index but also which register slot holds it.
//!
//! For `f = f_0 * f_1 * … * f_{L-1}` (atoms `spatial`/`repeat`), worker `w`
//! runs, by the definition of composition, the tasks
//! `t = Σ_l t_l ⊙ (D_{l+1} ⊙ … ⊙ D_{L-1})` for `t_l ∈ f_l(w_l)` in nested
//! order, where `w_l = (w / (n_{l+1}·…·n_{L-1})) mod n_l`. Emitting one
//! `for … in f_l.on(w_l)` per atom produces exactly `f.on(w)` (the outermost
//! atom gets `w_0` without the `mod`, so that workers `w ≥ n` fail its bound
//! check and run nothing, as `f.on(w)` requires); in addition,
//! the indices `t_l` of the `repeat` atoms number the worker's tasks
//! (a *slot*), which is how a register tile mirrors the mapping that fills
//! it (DESIGN §2: `local(…) * row_major(…)`).

use hidet_ir::builder::FunctionBuilder;
use hidet_ir::expr::Expr;
use hidet_ir::mapping::{repeat_with, MappingError, MappingNode, TaskMapping};
use hidet_ir::stmt::LoopKind;

/// One task of a level-by-level iteration.
#[derive(Clone, Debug)]
pub struct LevelTask {
    /// The task index in the composed mapping's task shape.
    pub index: Vec<Expr>,
    /// The task index within each atom, outermost atom first.
    pub levels: Vec<Vec<Expr>>,
    /// The position of this task in the worker's task list, counting only
    /// `repeat` atoms (row-major over their shapes): a number in
    /// `0..mapping.tasks_per_worker()`, distinct for distinct tasks of one worker.
    pub slot: Expr,
}

/// The `spatial`/`repeat` atoms of a mapping, outermost first.
pub fn atoms(mapping: &TaskMapping) -> Vec<TaskMapping> {
    match mapping.node() {
        MappingNode::Compose(outer, inner) => {
            let mut v = atoms(outer);
            v.extend(atoms(inner));
            v
        }
        _ => vec![mapping.clone()],
    }
}

/// `mapping` with every `repeat` atom's loops fully unrolled, so that the
/// register slots they index are compile-time constants.
pub fn unrolled(mapping: &TaskMapping) -> Result<TaskMapping, MappingError> {
    let mut out: Option<TaskMapping> = None;
    for atom in atoms(mapping) {
        let atom = match atom.node() {
            MappingNode::Repeat { shape, ranks, .. } => repeat_with(
                shape.clone(),
                ranks.clone(),
                vec![LoopKind::Unroll(None); shape.len()],
            )?,
            _ => atom.clone(),
        };
        out = Some(match out {
            Some(o) => o * atom,
            None => atom,
        });
    }
    Ok(out.unwrap_or_else(|| mapping.clone()))
}

fn add(a: Expr, b: Expr) -> Expr {
    match (a.as_int(), b.as_int()) {
        (Some(0), _) => b,
        (_, Some(0)) => a,
        (Some(x), Some(y)) => Expr::int(x + y),
        _ => a + b,
    }
}

fn mul(a: &Expr, f: i64) -> Expr {
    match (a.as_int(), f) {
        (_, 0) => Expr::int(0),
        (_, 1) => a.clone(),
        (Some(x), _) => Expr::int(x * f),
        _ => a * f,
    }
}

/// `for task in mapping.on(worker)`, emitted as one `for_each` per atom (see
/// the module docs); `body` receives each task with its per-atom indices and
/// register slot.
pub fn for_each_levels(
    fb: &mut FunctionBuilder,
    mapping: &TaskMapping,
    worker: impl Into<Expr>,
    body: impl FnOnce(&mut FunctionBuilder, &LevelTask),
) {
    let atoms = atoms(mapping);
    let rank = mapping.rank();
    let atoms: Vec<TaskMapping> = atoms.iter().map(|a| a.padded_to(rank)).collect();
    let worker = worker.into();
    let mut body = Some(body);
    nest(fb, &atoms, 0, &worker, &mut Vec::new(), &mut body);
}

fn nest<F: FnOnce(&mut FunctionBuilder, &LevelTask)>(
    fb: &mut FunctionBuilder,
    atoms: &[TaskMapping],
    level: usize,
    worker: &Expr,
    bound: &mut Vec<Vec<Expr>>,
    body: &mut Option<F>,
) {
    if level == atoms.len() {
        if let Some(body) = body.take() {
            let task = combine(atoms, bound);
            body(fb, &task);
        }
        return;
    }
    let atom = &atoms[level];
    let n = atom.num_workers();
    let below: i64 = atoms[level + 1..]
        .iter()
        .map(TaskMapping::num_workers)
        .product();
    let shifted = || {
        if below == 1 {
            worker.clone()
        } else {
            worker / below
        }
    };
    // The outermost atom sees `w / below` unreduced, so that workers past the
    // mapping's count fail its bound check and run no task; inner atoms see
    // their digit of `w`.
    let atom_worker = if level == 0 {
        shifted()
    } else if n == 1 {
        Expr::int(0)
    } else {
        shifted() % n
    };
    fb.for_each(atom.on(atom_worker), |fb, idx| {
        bound.push(idx.to_vec());
        nest(fb, atoms, level + 1, worker, bound, body);
        bound.pop();
    });
}

fn combine(atoms: &[TaskMapping], bound: &[Vec<Expr>]) -> LevelTask {
    let rank = atoms.first().map_or(0, TaskMapping::rank);
    let mut index = vec![Expr::int(0); rank];
    for (atom, t) in atoms.iter().zip(bound) {
        let shape = atom.task_shape();
        for d in 0..rank {
            index[d] = add(mul(&index[d], shape[d]), t[d].clone());
        }
    }
    let mut slot = Expr::int(0);
    for (atom, t) in atoms.iter().zip(bound) {
        if let MappingNode::Repeat { shape, .. } = atom.node() {
            for d in 0..rank {
                slot = add(mul(&slot, shape[d]), t[d].clone());
            }
        }
    }
    LevelTask {
        index,
        levels: bound.to_vec(),
        slot,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use hidet_ir::mapping::{repeat, spatial};

    #[test]
    fn atoms_flatten_compositions_in_order() {
        let m = spatial([2, 2]).unwrap() * repeat([2, 1]).unwrap() * spatial([4, 8]).unwrap();
        let a = atoms(&m);
        assert_eq!(a.len(), 3);
        assert_eq!(a[1].task_shape(), vec![2, 1]);
        assert_eq!(a[2].num_workers(), 32);
    }

    #[test]
    fn unrolled_keeps_the_task_lists() {
        let m = repeat([3, 2]).unwrap() * spatial([4, 8]).unwrap() * repeat([2, 2]).unwrap();
        let u = unrolled(&m).unwrap();
        for w in 0..32 {
            assert_eq!(m.tasks_of(w), u.tasks_of(w));
        }
        for atom in atoms(&u) {
            if let MappingNode::Repeat { attrs, .. } = atom.node() {
                assert!(attrs.iter().all(|a| *a == LoopKind::Unroll(None)));
            }
        }
    }
}
