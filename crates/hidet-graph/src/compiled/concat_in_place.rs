//! Concatenation without a copy: the inputs of a `Concat` are computed straight into their
//! slices of its output.
//!
//! Along an axis preceded only by dimensions of extent 1 (channels of a single image), each
//! input of a concatenation is one contiguous byte range of the output. When every input is
//! a run-time buffer that nothing else is placed in, the memory plan puts each input's
//! buffer at its range, and the concatenation itself runs no kernel (Inception joins its
//! branches this way; a stack of `Unsqueeze`d values, a recurrent layer its steps).

use std::collections::{HashMap, HashSet};

use crate::fusion::{Group, Specialization, RESHAPE_LIKE};
use crate::graph::{Graph, ValueId};

/// Places the inputs of `group` in its output and returns true, when `group` is a
/// default-domain `Concat`, alone or followed by a chain of reshape-like nodes
/// ([`RESHAPE_LIKE`]: they keep its bytes; the last one's output is the group's) and
/// preceded by reshape-like nodes of its inputs (each input placed is then the value its
/// chain starts from), that can
/// run in place (see the module docs); changes nothing and returns false otherwise. Value `v` is placed at byte `at[v]` of the buffer of value
/// `root[v]` (an alias shares its source's place); every value placed with an input's
/// buffer moves with it. An input must fill its buffer (not be a slice of another
/// concatenation) and have a buffer of its own, distinct from the other inputs' and the
/// output's; `pinned` roots (graph inputs) keep their buffers.
pub(super) fn place(
    graph: &Graph,
    spec: &Specialization,
    group: &Group,
    root: &mut [usize],
    at: &mut [usize],
    pinned: &HashSet<usize>,
) -> bool {
    let Some((out, offsets)) = input_offsets(graph, spec, group, root, at, pinned) else {
        return false;
    };
    for (v, offset) in offsets {
        let (from, base) = (root[v.0], at[out.0] + offset);
        for i in 0..root.len() {
            if root[i] == from {
                root[i] = root[out.0];
                at[i] += base;
            }
        }
    }
    true
}

/// The output of a concatenation `place` takes (the last reshape's, after a chain of
/// them), and the byte offset of each input in it.
fn input_offsets(
    graph: &Graph,
    spec: &Specialization,
    group: &Group,
    root: &[usize],
    at: &[usize],
    pinned: &HashSet<usize>,
) -> Option<(ValueId, Vec<(ValueId, usize)>)> {
    let concat_at = group
        .nodes
        .iter()
        .position(|n| graph.nodes()[n.0].op_type == "Concat")?;
    let (before, rest) = group.nodes.split_at(concat_at);
    let (node_id, reshapes) = rest.split_first()?;
    let node = &graph.nodes()[node_id.0];
    if !node.domain.is_empty() {
        return None;
    }
    // Members before the concatenation reshape its inputs (a stack's `Unsqueeze`s): the
    // value a chain of them starts from is what is placed, as it has the same bytes.
    let mut source: HashMap<ValueId, ValueId> = HashMap::new();
    for id in before {
        let reshape = &graph.nodes()[id.0];
        let (Some(Some(input)), [Some(output)]) =
            (reshape.inputs.first(), reshape.outputs.as_slice())
        else {
            return None;
        };
        if !RESHAPE_LIKE.contains(&reshape.op_type.as_str()) || !reshape.domain.is_empty() {
            return None;
        }
        let from = source.get(input).copied().unwrap_or(*input);
        source.insert(*output, from);
    }
    let [Some(concatenated)] = node.outputs.as_slice() else {
        return None;
    };
    let out = through_reshapes(graph, *concatenated, reshapes)?;
    if group.outputs != [out] {
        return None;
    }
    let out = &out;
    let out_info = &spec.values[out.0];
    let shape = spec.values[concatenated.0].shape.as_ref()?;
    out_info.size_in_bytes()?;
    if out_info.constant.is_some() || pinned.contains(&root[out.0]) {
        return None;
    }
    let rank = shape.len() as i64;
    let axis = node.attrs.int_or("axis", 0).ok()?;
    let axis = if axis < 0 { axis + rank } else { axis };
    if !(0..rank).contains(&axis) || shape[..axis as usize].iter().any(|&d| d != 1) {
        return None;
    }
    let mut seen = HashSet::new();
    let mut offsets = Vec::new();
    let mut next = 0usize;
    for v in node.inputs.iter() {
        let v = (*v)?;
        let v = source.get(&v).copied().unwrap_or(v);
        let info = &spec.values[v.0];
        let bytes = info.size_in_bytes()?;
        let r = root[v.0];
        let movable = info.dtype == out_info.dtype
            && info.constant.is_none()
            && spec.values[r].constant.is_none()
            && at[v.0] == 0
            && spec.values[r].size_in_bytes() == Some(bytes)
            && r != root[out.0]
            && !pinned.contains(&r)
            && seen.insert(r);
        if !movable {
            return None;
        }
        offsets.push((v, next));
        next += bytes;
    }
    (next == out_info.size_in_bytes()?).then_some((*out, offsets))
}

/// The value at the end of `reshapes`, a chain of default-domain reshape-like nodes
/// ([`RESHAPE_LIKE`], they keep the bytes) starting from `value`, each reading the previous
/// one's output; `None` when they are not such a chain.
pub(super) fn through_reshapes(
    graph: &Graph,
    mut value: ValueId,
    reshapes: &[crate::graph::NodeId],
) -> Option<ValueId> {
    for id in reshapes {
        let reshape = &graph.nodes()[id.0];
        let reads_value = reshape.inputs.first() == Some(&Some(value));
        let keeps_bytes = RESHAPE_LIKE.contains(&reshape.op_type.as_str());
        if !keeps_bytes || !reshape.domain.is_empty() || !reads_value {
            return None;
        }
        let [Some(next)] = reshape.outputs.as_slice() else {
            return None;
        };
        value = *next;
    }
    Some(value)
}
