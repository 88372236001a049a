//! Rotary position embeddings, as ONNX Runtime's contrib `RotaryEmbedding` (`com.microsoft`)
//! and `GroupQueryAttention`'s `do_rotary` apply them, expanded into default-domain operators
//! (see `contrib_util`).
//!
//! `RotaryEmbedding(input, position_ids, cos_cache, sin_cache; interleaved, num_heads,
//! rotary_embedding_dim)` — ONNX's own (opset 23) takes `(X, cos_cache, sin_cache,
//! position_ids?)`, the caches already gathered (`[B, S, r/2]`) when the ids are absent —: `input` is `[B, S, hidden]` (heads side by side) or `[B, N, S, h]`;
//! `position_ids` is `[B, S]`, or `[1]` holding the first position of every row; the caches are
//! `[max_position, r/2]`. The first `r` channels of every head are rotated by the angle of
//! their position — pairs `(x[i], x[i + r/2])`, or `(x[2i], x[2i + 1])` when interleaved:
//! `(a, b) → (a·cos − b·sin, b·cos + a·sin)` — and the rest pass through.

use crate::attribute::Attribute;
use crate::expansion::Expansion;
use crate::operator::OpError;
use crate::registry::{Registry, LATEST_OPSET};

use super::contrib_util::{
    attrs, dim, first_output, fixed_dim, int, ints, op, op0, op_into, optional_input, require_attr,
    reshape, split,
    transpose, unsqueeze, MS_DOMAIN,
};

/// Registers the expansion (every opset of the contrib domain).
pub fn register(r: &mut Registry) {
    r.register_expansion(MS_DOMAIN, "RotaryEmbedding", 1..=i64::MAX, rotary_embedding);
    r.register_expansion("", "RotaryEmbedding", 23..=LATEST_OPSET, onnx_rotary_embedding);
}

/// How the channels of a head are rotated.
#[derive(Debug, Clone, Copy)]
pub(super) struct Rotary {
    /// Channels per head.
    pub head_size: usize,
    /// The leading channels rotated (even, at most `head_size`).
    pub rotary_dim: usize,
    /// Pairs `(2i, 2i + 1)` rather than `(i, i + r/2)`.
    pub interleaved: bool,
}

impl Rotary {
    /// Checks the sizes.
    pub fn new(head_size: usize, rotary_dim: usize, interleaved: bool) -> Result<Rotary, OpError> {
        if rotary_dim == 0 || !rotary_dim.is_multiple_of(2) || rotary_dim > head_size {
            return Err(OpError::Invalid(format!(
                "rotary dimension {rotary_dim} must be even, positive and at most the head size \
                 {head_size}"
            )));
        }
        Ok(Rotary {
            head_size,
            rotary_dim,
            interleaved,
        })
    }

    /// The cosine and sine tables gathered at `positions` (`int64`, `[B, S]` or broadcasting to
    /// it), shaped `[B, S, 1, r/2]` to broadcast over the heads of a `[B, S, N, h]` value.
    pub fn tables(
        &self,
        e: &mut Expansion<'_>,
        cos_cache: &str,
        sin_cache: &str,
        positions: &str,
    ) -> (String, String) {
        let mut gathered = |cache: &str| {
            let rows = op(e, "Gather", attrs([("axis", Attribute::Int(0))]), &[cache, positions]);
            unsqueeze(e, &rows, &[2])
        };
        let cos = gathered(cos_cache);
        let sin = gathered(sin_cache);
        (cos, sin)
    }

    /// `x` (`[B, S, N, h]`) with its heads rotated by the tables of [`Rotary::tables`].
    pub fn apply(&self, e: &mut Expansion<'_>, x: &str, cos: &str, sin: &str) -> String {
        let (r, h) = (self.rotary_dim as i64, self.head_size as i64);
        let (rotated, rest) = if r < h {
            let parts = split(e, x, -1, &[r, h - r]);
            (parts[0].clone(), Some(parts[1].clone()))
        } else {
            (x.to_string(), None)
        };
        let turned = if self.interleaved {
            let pairs = reshape(e, &rotated, &[0, 0, 0, r / 2, 2]);
            let halves = split(e, &pairs, -1, &[1, 1]);
            let (cos, sin) = (unsqueeze(e, cos, &[-1]), unsqueeze(e, sin, &[-1]));
            let (a, b) = turn(e, &halves[0], &halves[1], &cos, &sin);
            let pairs = op(e, "Concat", attrs([("axis", Attribute::Int(-1))]), &[&a, &b]);
            reshape(e, &pairs, &[0, 0, 0, r])
        } else {
            let halves = split(e, &rotated, -1, &[r / 2, r / 2]);
            let (a, b) = turn(e, &halves[0], &halves[1], cos, sin);
            op(e, "Concat", attrs([("axis", Attribute::Int(-1))]), &[&a, &b])
        };
        match rest {
            Some(rest) => op(e, "Concat", attrs([("axis", Attribute::Int(-1))]), &[&turned, &rest]),
            None => turned,
        }
    }
}

/// `(a·cos − b·sin, b·cos + a·sin)`.
fn turn(e: &mut Expansion<'_>, a: &str, b: &str, cos: &str, sin: &str) -> (String, String) {
    let (a_cos, b_sin) = (op0(e, "Mul", &[a, cos]), op0(e, "Mul", &[b, sin]));
    let first = op0(e, "Sub", &[&a_cos, &b_sin]);
    let (b_cos, a_sin) = (op0(e, "Mul", &[b, cos]), op0(e, "Mul", &[a, sin]));
    let second = op0(e, "Add", &[&b_cos, &a_sin]);
    (first, second)
}

/// Positions `start[b] + s` for `s` in `0..length` (`start` is `int64` `[B]` or `[1]`):
/// `int64` `[B or 1, length]`.
pub(super) fn positions_from(e: &mut Expansion<'_>, start: &str, length: &str) -> String {
    let (zero, one) = (int(e, 0), int(e, 1));
    let steps = op0(e, "Range", &[&zero, length, &one]);
    let steps = unsqueeze(e, &steps, &[0]);
    let start = unsqueeze(e, start, &[1]);
    op0(e, "Add", &[&start, &steps])
}

fn rotary_embedding(e: &mut Expansion<'_>) -> Result<(), OpError> {
    require_attr(e, "is_packed_batching", 0)?;
    rotate_node(e, [0, 2, 3], Some(1))
}

/// ONNX's `RotaryEmbedding` (opset 23): inputs `(X, cos_cache, sin_cache, position_ids?)`;
/// without `position_ids` the caches are already `[B, S, r/2]`.
fn onnx_rotary_embedding(e: &mut Expansion<'_>) -> Result<(), OpError> {
    let positions = optional_input(e, 3).map(|_| 3);
    rotate_node(e, [0, 1, 2], positions)
}

/// The rotary embedding of the node's input `x` by the caches `cos`, `sin` (input indices), at
/// the positions of input `positions` (`[B, S]`, or `[1]` holding the first position); without
/// one, the caches are the tables themselves (`[B, S, r/2]`).
fn rotate_node(
    e: &mut Expansion<'_>,
    [x, cos_input, sin_input]: [usize; 3],
    positions: Option<usize>,
) -> Result<(), OpError> {
    let cos_cache = e.input_name(cos_input)?.to_string();
    let sin_cache = e.input_name(sin_input)?.to_string();
    let rank = e.rank(x)?;
    let x_name = e.input_name(x)?.to_string();
    let half = fixed_dim(e, cos_input, -1).ok_or_else(|| {
        OpError::Unsupported("RotaryEmbedding with a cos_cache of unknown width".into())
    })?;
    let attr_dim = e.attrs().int_or("rotary_embedding_dim", 0)?;
    let rotary_dim = if attr_dim > 0 { attr_dim as usize } else { 2 * half };
    let interleaved = e.attrs().int_or("interleaved", 0)? != 0;
    let num_heads = e.attrs().int_or("num_heads", 0)?;
    let head_size = match rank {
        4 => fixed_dim(e, x, 3),
        3 if num_heads > 0 => fixed_dim(e, x, 2).map(|hidden| hidden / num_heads as usize),
        3 => Some(rotary_dim),
        _ => {
            return Err(OpError::Shape(format!(
                "RotaryEmbedding's input must have rank 3 or 4, got {rank}"
            )))
        }
    }
    .ok_or_else(|| OpError::Unsupported("RotaryEmbedding with a head size not known".into()))?;
    let rotary = Rotary::new(head_size, rotary_dim, interleaved)?;
    let bsnh = match rank {
        4 => transpose(e, &x_name, &[0, 2, 1, 3]),
        _ => reshape(e, &x_name, &[0, 0, -1, head_size as i64]),
    };
    let (cos, sin) = match positions {
        Some(i) => {
            let position_ids = e.input_name(i)?.to_string();
            let positions = match e.rank(i)? {
                2 => position_ids,
                1 => {
                    let length = dim(e, &bsnh, 1);
                    positions_from(e, &position_ids, &length)
                }
                r => {
                    return Err(OpError::Shape(format!(
                        "RotaryEmbedding's position_ids must have rank 1 or 2, got {r}"
                    )))
                }
            };
            rotary.tables(e, &cos_cache, &sin_cache, &positions)
        }
        None => (
            unsqueeze(e, &cos_cache, &[2]),
            unsqueeze(e, &sin_cache, &[2]),
        ),
    };
    let turned = rotary.apply(e, &bsnh, &cos, &sin);
    let output = first_output(e)?;
    match rank {
        4 => op_into(
            e,
            "Transpose",
            attrs([("perm", Attribute::Ints(vec![0, 2, 1, 3]))]),
            &[&turned],
            &[&output],
        ),
        _ => {
            let shape = ints(e, &[0, 0, -1]);
            op_into(e, "Reshape", Default::default(), &[&turned, &shape], &[&output]);
        }
    }
    Ok(())
}
