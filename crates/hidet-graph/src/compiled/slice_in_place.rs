//! Slicing without a copy: a `Slice` whose result is one contiguous byte range of its input
//! becomes a view of that range.
//!
//! A slice is contiguous when, past its last axis that it cuts short, it keeps every axis
//! whole, and before that axis every kept extent is 1: one step of a sequence out of
//! `[seq, batch, features]`, a row block of a matrix, a leading chunk of a batch. Its output
//! is then placed in its input's buffer at the byte offset of its first element, and the
//! slice runs no kernel (a recurrent layer's steps read their input projections this way).
//! Reads of the view share the input's lifetime in the memory plan, as reshape aliases do.

use super::concat_in_place::through_reshapes;
use crate::fusion::{Group, GroupKind, Specialization};
use crate::graph::{Graph, ValueId};

/// Places the output of `group` inside its input's buffer and returns true, when `group` is
/// an injective default-domain `Slice` (inputs form, opset 10 on), alone or followed by a
/// chain of reshape-like nodes, whose result is contiguous in its input (see the module docs)
/// with static shapes, constant starts, ends, axes and unit steps, and a run-time input (not
/// a constant); changes nothing and returns false otherwise. Value `v` lives at byte `at[v]`
/// of the buffer of value `root[v]`.
pub(super) fn place(
    graph: &Graph,
    spec: &Specialization,
    group: &Group,
    root: &mut [usize],
    at: &mut [usize],
) -> bool {
    let Some((src, out, offset)) = view(graph, spec, group) else {
        return false;
    };
    root[out.0] = root[src.0];
    at[out.0] = at[src.0] + offset;
    true
}

/// Whether [`place`] places `group` (it depends on the group and the shapes only, so the
/// compiler knows before lowering that the group needs no kernel).
pub(super) fn is_view(graph: &Graph, spec: &Specialization, group: &Group) -> bool {
    view(graph, spec, group).is_some()
}

/// The sliced value, the group's output and its byte offset in the sliced value.
fn view(graph: &Graph, spec: &Specialization, group: &Group) -> Option<(ValueId, ValueId, usize)> {
    if group.kind != GroupKind::Injective {
        return None;
    }
    let (node_id, reshapes) = group.nodes.split_first()?;
    let node = &graph.nodes()[node_id.0];
    if node.op_type != "Slice" || !node.domain.is_empty() || node.opset < 10 {
        return None;
    }
    let [Some(sliced)] = node.outputs.as_slice() else {
        return None;
    };
    let out = through_reshapes(graph, *sliced, reshapes)?;
    if group.outputs != [out] {
        return None;
    }
    let src = node.inputs.first().copied().flatten()?;
    let (info, result) = (&spec.values[src.0], &spec.values[sliced.0]);
    let input_shape = info.shape.as_ref()?;
    let output_shape = result.shape.as_ref()?;
    if info.constant.is_some()
        || info.size_in_bytes().is_none()
        || result.dtype != info.dtype
        || output_shape.len() != input_shape.len()
        || spec.values[out.0].size_in_bytes() != result.size_in_bytes()
        || info.size_in_bytes()
            != Some(input_shape.iter().product::<usize>() * info.dtype.size_in_bytes())
    {
        return None;
    }
    let constant = |k: usize| -> Option<Option<Vec<i64>>> {
        match node.inputs.get(k).copied().flatten() {
            None => Some(None),
            Some(v) => Some(Some(spec.values[v.0].constant.as_ref()?.to_i64_vec())),
        }
    };
    let starts = constant(1)??;
    let rank = input_shape.len();
    let axes = constant(3)?.unwrap_or_else(|| (0..starts.len() as i64).collect());
    if constant(4)?.is_some_and(|steps| steps.iter().any(|&s| s != 1)) || axes.len() != starts.len()
    {
        return None;
    }
    let mut first = vec![0usize; rank];
    for (&axis, &start) in axes.iter().zip(&starts) {
        let axis = if axis < 0 { axis + rank as i64 } else { axis };
        let axis = usize::try_from(axis).ok().filter(|&a| a < rank)?;
        let dim = input_shape[axis] as i64;
        let start = if start < 0 { start + dim } else { start };
        first[axis] = start.clamp(0, dim) as usize;
    }
    // The last axis cut short; every axis before it keeps one index.
    let cut = (0..rank).rev().find(|&a| output_shape[a] != input_shape[a]);
    if let Some(cut) = cut {
        if output_shape[..cut].iter().any(|&d| d != 1)
            || first[cut] + output_shape[cut] > input_shape[cut]
        {
            return None;
        }
    }
    let mut offset = 0usize;
    let mut stride = info.dtype.size_in_bytes();
    for a in (0..rank).rev() {
        offset += first[a] * stride;
        stride *= input_shape[a];
    }
    Some((src, out, offset))
}
