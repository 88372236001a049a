//! `TensorScatter` (opset 24), a key/value cache update, expanded when the graph is built
//! (see `contrib_util`) into `ScatterElements`:
//!
//! `TensorScatter(past_cache, update, write_indices?; axis = −2, mode)` writes `update` (the
//! cache's shape but `S` along `axis`) into a copy of `past_cache` (`L` along `axis`) at
//! positions `write_indices[b] + s` of each batch row `b` (0 without indices; modulo `L` when
//! `mode` is `circular`). The positions become an index tensor of `update`'s shape, and the
//! write a `ScatterElements` along `axis`.

use crate::attribute::Attribute;
use crate::dtype::DType;
use crate::expansion::Expansion;
use crate::operator::OpError;
use crate::registry::{Registry, LATEST_OPSET};

use super::contrib_rotary::positions_from;
use super::contrib_util::{attrs, dim, first_output, int, op, op0, op_into, optional_input, reshape};

/// Registers the expansion.
pub fn register(r: &mut Registry) {
    r.register_expansion("", "TensorScatter", 24..=LATEST_OPSET, tensor_scatter);
}

fn tensor_scatter(e: &mut Expansion<'_>) -> Result<(), OpError> {
    let past = e.input_name(0)?.to_string();
    let update = e.input_name(1)?.to_string();
    let rank = e.rank(1)?;
    let axis = e.attrs().int_or("axis", -2)?;
    let axis = if axis < 0 { axis + rank as i64 } else { axis };
    if axis < 1 || axis >= rank as i64 {
        return Err(OpError::attr(
            "axis",
            format!("must name a non-batch axis of rank {rank}, got {axis}"),
        ));
    }
    let circular = match e.attrs().string_or("mode", "linear")?.as_str() {
        "linear" => false,
        "circular" => true,
        other => {
            return Err(OpError::attr(
                "mode",
                format!("must be linear or circular, got `{other}`"),
            ))
        }
    };
    let starts = match optional_input(e, 2) {
        Some(indices) => {
            let to_i64 = attrs([("to", Attribute::Int(DType::I64.onnx_code().into()))]);
            op(e, "Cast", to_i64, &[&indices])
        }
        None => {
            let zero = int(e, 0);
            super::contrib_util::unsqueeze(e, &zero, &[0])
        }
    };
    let length = dim(e, &update, axis);
    let mut positions = positions_from(e, &starts, &length);
    if circular {
        let slots = dim(e, &past, axis);
        positions = op0(e, "Mod", &[&positions, &slots]);
    }
    // `[B or 1, S]` → `[B or 1, 1, …, S, 1, …]` with `S` at `axis`, then `update`'s shape.
    let shape: Vec<i64> = (0..rank as i64)
        .map(|a| match a {
            0 => 0,
            a if a == axis => -1,
            _ => 1,
        })
        .collect();
    let placed = reshape(e, &positions, &shape);
    let update_shape = op0(e, "Shape", &[&update]);
    let indices = op0(e, "Expand", &[&placed, &update_shape]);
    let output = first_output(e)?;
    op_into(
        e,
        "ScatterElements",
        attrs([("axis", Attribute::Int(axis))]),
        &[&past, &indices, &update],
        &[&output],
    );
    Ok(())
}
