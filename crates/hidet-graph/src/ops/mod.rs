//! Built-in operator families.
//!
//! Each family is one file `src/ops/<family>.rs` exposing
//! `pub fn register(r: &mut Registry)`; the `families!` list below is the only place that
//! names them. Adding a family = adding its file and one name to that list
//! (see `docs/adding-operators.md`).

use crate::registry::Registry;

pub mod common;
pub mod compute_util;
pub mod contrib_util;
pub mod window_compute;

/// The domain of hidet's own operators, which expansions and passes build (not an ONNX domain).
pub const HIDET_DOMAIN: &str = "hidet";

macro_rules! families {
    ($($family:ident),* $(,)?) => {
        $(pub mod $family;)*
        /// Registers every built-in family into `r`.
        pub fn register_all(r: &mut Registry) {
            $($family::register(r);)*
        }
    };
}

families! {
    binary,
    contrib_quant,
    contrib_activation,
    contrib_fused,
    contrib_normalization,
    contrib_rotary,
    contrib_attention,
    contrib_matmul,
    dequantize_blocks,
    tensor_scatter,
    unary,
    clip,
    prelu,
    variadic,
    where_op,
    cast,
    constant,
    reshape,
    matmul,
    control_flow,
    reduce,
    conv,
    squeeze,
    transpose,
    concat_split,
    slice,
    gather,
    scatter,
    expand_tile,
    pad,
    generators,
    depth_space,
    trilu,
    select,
    reverse_sequence,
    softmax,
    cumsum,
    topk,
    dropout,
    normalization,
    einsum,
    conv_transpose,
    gemm,
    pool,
    quantize,
    resize,
    loss,
    center_crop_pad,
    affine_grid,
    det,
    max_unpool,
    optimizers,
    signal_windows,
    mel_weight_matrix,
    col2im,
    unique,
    ml,
    grid_sample,
    rnn,
    spectral,
    nms,
    roi_align,
    deform_conv,
    tfidf,
    tree_ensemble,
    strings,
    label_encoder,
    regex_full_match,
    optional,
    sequence,
    sequence_map,
    legacy,
}
