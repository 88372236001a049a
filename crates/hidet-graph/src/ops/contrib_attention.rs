//! ONNX Runtime's contrib attention operators (`com.microsoft`), which its transformer
//! optimizer and its generative model builder write, expanded into default-domain operators
//! (see `contrib_util`): projections and head splits as `MatMul`/`Reshape`/`Transpose`, then
//! `Softmax(Q·Kᵀ·scale + bias)·V` — the pattern the graph passes already fuse for exported
//! PyTorch attention.
//!
//! - `Attention(input, weights, bias?, mask_index?, past?, attention_bias?; num_heads,
//!   qkv_hidden_sizes, unidirectional, scale, mask_filter_value)`: the packed projection
//!   `input·weights + bias` split into Q, K, V; `past` is `[2, B, N, P, h]` and the second
//!   output `present` the same with `P + S` keys. `mask_index`: `[B]` (keys at or past the row's
//!   value are masked), `[B, T]` or `[B, S, T]` (zero entries are masked); masked scores get
//!   `mask_filter_value` (−10000) added. Not supported: `[2B]` start/end and 4-D masks,
//!   `do_rotary`, shared past/present buffers.
//! - `QAttention(input, weight, bias, input_scale, weight_scale, mask_index?, input_zero_point?,
//!   weight_zero_point?, past?)` (ONNX Runtime's dynamic quantization of `Attention`): the
//!   same after the integer projection `float(MatMulInteger(input, weight)) · scales + bias`.
//! - `MultiHeadAttention(query, key?, value?, bias?, key_padding_mask?, attention_bias?,
//!   past_key?, past_value?; num_heads, unidirectional, scale, mask_filter_value)`: query
//!   `[B, S, D]` with key/value `[B, L, D]` (projected here by `bias`) or `[B, N, L, h]`
//!   (already split into heads), key `[B, L, N, 2, h]` packing key and value, or query
//!   `[B, S, N, 3, h]` packing all three; outputs the context and, from `past_key`/`past_value`
//!   `[B, N, P, h]`, `present_key`/`present_value`.
//! - `GroupQueryAttention(query, key?, value?, past_key?, past_value?, seqlens_k,
//!   total_sequence_length, cos_cache?, sin_cache?, position_ids?; num_heads, kv_num_heads,
//!   scale, softcap, local_window_size, do_rotary, rotary_interleaved)`: causal attention of
//!   `num_heads` query heads over `kv_num_heads` key/value heads (query head `n` reads
//!   key/value head `n / (num_heads / kv_num_heads)`), the new keys appended to `past_*`
//!   (`[B, Nk, P, h]`) as `present_*`. Row `b` holds `seqlens_k[b] + 1` valid tokens; its
//!   queries sit at positions `past_b + s` with `past_b = seqlens_k[b] + 1 − S` (0 for the
//!   first prompt, `S = total_sequence_length`), which also place the rotary embedding; a
//!   row's new keys are stored right after its own past (a padded batch's shorter rows leave
//!   unused slots at the end of `present_*`, as ONNX Runtime does). With
//!   `local_window_size = W > 0` a query sees only the `W` latest keys, itself included; with
//!   `sliding_window_cache = 1` the past holds the `P` latest keys (of positions
//!   `past_b − P .. past_b`, those below 0 unused) and the present keeps the last `P` of the past
//!   and the new keys. Not supported: `attention_bias`, `head_sink`, `smooth_softmax`.
//!
//! ONNX's own `Attention(Q, K, V, attn_mask?, past_key?, past_value?, nonpad_kv_seqlen?;
//! is_causal, q_num_heads, kv_num_heads, scale, softcap, left_window_size, right_window_size)`
//! (opsets 23–25) expands the same way: heads `[B, N, S, h]` or side by side (`[B, S, N·h]`,
//! with the head counts as attributes), grouped when `kv_num_heads < q_num_heads`, the past
//! prepended to the keys as the presents; soft capping before the mask; `attn_mask` boolean
//! (true attends) or additive, broadcasting to `[B, N, S, T]`; `is_causal` lets query `i` see
//! keys `j ≤ i + offset` (`offset` the past length, or `nonpad_kv_seqlen[b] − S` for an external
//! cache) and the windows keys within `left_window_size` before and `right_window_size` after
//! `i + offset`; keys at or past `nonpad_kv_seqlen[b]` are masked. Not supported: the
//! `qk_matmul_output` output, a mask shorter than the keys.

use crate::attribute::Attribute;
use crate::dtype::DType;
use crate::expansion::Expansion;
use crate::operator::OpError;
use crate::registry::{Registry, LATEST_OPSET};

use super::contrib_rotary::{positions_from, Rotary};
use super::contrib_util::{
    attrs, dim, first_output, fixed_dim, float, float_dtype, int, ints, op, op0, op_into,
    optional_input, optional_output, positive_attr, require_attr, reshape, split, transpose,
    unsqueeze, MS_DOMAIN,
};

/// ONNX Runtime's default `mask_filter_value`.
const MASK_FILTER_VALUE: f32 = -10000.0;

/// Registers the expansions (every opset of the contrib domain).
pub fn register(r: &mut Registry) {
    r.register_expansion(MS_DOMAIN, "Attention", 1..=i64::MAX, attention);
    r.register_expansion(MS_DOMAIN, "QAttention", 1..=i64::MAX, quantized_attention);
    r.register_expansion(MS_DOMAIN, "MultiHeadAttention", 1..=i64::MAX, multi_head_attention);
    r.register_expansion(MS_DOMAIN, "GroupQueryAttention", 1..=i64::MAX, group_query_attention);
    r.register_expansion("", "Attention", 23..=LATEST_OPSET, onnx_attention);
}

/// `x` (`[B, S, N·h]`) as heads `[B, N, S, h]`.
fn heads(e: &mut Expansion<'_>, x: &str, num_heads: usize, head_size: usize) -> String {
    let split = reshape(e, x, &[0, 0, num_heads as i64, head_size as i64]);
    transpose(e, &split, &[0, 2, 1, 3])
}

/// Heads `[B, N, S, h]` side by side again, `[B, S, N·h]`, into `output`.
fn merge_heads_into(e: &mut Expansion<'_>, x: &str, output: &str) {
    let sequence_major = transpose(e, x, &[0, 2, 1, 3]);
    let shape = ints(e, &[0, 0, -1]);
    op_into(e, "Reshape", Default::default(), &[&sequence_major, &shape], &[output]);
}

/// `Concat(past, new)` along the sequence axis 2 into `output` (a fresh value when `None`), or
/// `new` alone without a past.
fn append(
    e: &mut Expansion<'_>,
    past: Option<&str>,
    new: &str,
    output: Option<&str>,
) -> String {
    let concat = attrs([("axis", Attribute::Int(2))]);
    match (past, output) {
        (Some(past), Some(out)) => {
            op_into(e, "Concat", concat, &[past, new], &[out]);
            out.to_string()
        }
        (Some(past), None) => op(e, "Concat", concat, &[past, new]),
        (None, Some(out)) => {
            op_into(e, "Identity", Default::default(), &[new], &[out]);
            out.to_string()
        }
        (None, None) => new.to_string(),
    }
}

/// `0..n` of the scalar `int64` `n`.
fn range(e: &mut Expansion<'_>, n: &str) -> String {
    let (zero, one) = (int(e, 0), int(e, 1));
    op0(e, "Range", &[&zero, n, &one])
}

/// Which keys a padding mask leaves valid, `bool` broadcasting to `[B, 1, S, T]`: `mask` of
/// rank 1 holds each row's valid length (`keys` is `0..T`), of rank 2 (`[B, T]`) or 3
/// (`[B, S, T]`) marks valid keys with non-zero entries.
fn padding_valid(
    e: &mut Expansion<'_>,
    mask_input: usize,
    keys: &str,
    batch: Option<usize>,
) -> Result<String, OpError> {
    let mask = e.input_name(mask_input)?.to_string();
    let to_bool = attrs([("to", Attribute::Int(DType::Bool.onnx_code().into()))]);
    match e.rank(mask_input)? {
        1 => {
            if let (Some(b), Some(n)) = (batch, fixed_dim(e, mask_input, 0)) {
                if n != b {
                    return Err(OpError::Unsupported(format!(
                        "{} with a 1-D mask of {n} entries for batch {b} (start and end \
                         positions)",
                        e.op_type()
                    )));
                }
            }
            let to_i64 = attrs([("to", Attribute::Int(DType::I64.onnx_code().into()))]);
            let ends = op(e, "Cast", to_i64, &[&mask]);
            let ends = unsqueeze(e, &ends, &[1]);
            let valid = op0(e, "Less", &[keys, &ends]);
            Ok(unsqueeze(e, &valid, &[1, 2]))
        }
        2 => {
            let valid = op(e, "Cast", to_bool, &[&mask]);
            Ok(unsqueeze(e, &valid, &[1, 2]))
        }
        3 => {
            let valid = op(e, "Cast", to_bool, &[&mask]);
            Ok(unsqueeze(e, &valid, &[1]))
        }
        r => Err(OpError::Unsupported(format!(
            "{} with a mask of rank {r}",
            e.op_type()
        ))),
    }
}

/// Causal validity `[S, T]`: query `i` sees keys `j ≤ i + T − S`.
fn causal_valid(e: &mut Expansion<'_>, queries: &str, keys: &str, past: &str) -> String {
    let shifted = op0(e, "Add", &[queries, past]);
    let column = unsqueeze(e, &shifted, &[1]);
    op0(e, "LessOrEqual", &[keys, &column])
}

/// `a ∧ b` of optional conditions.
fn both(e: &mut Expansion<'_>, a: Option<String>, b: Option<String>) -> Option<String> {
    match (a, b) {
        (Some(a), Some(b)) => Some(op0(e, "And", &[&a, &b])),
        (a, b) => a.or(b),
    }
}

/// `0` where `valid`, `filter` elsewhere, in `dtype`.
fn additive_mask(e: &mut Expansion<'_>, valid: &str, filter: f64, dtype: DType) -> String {
    let zero = float(e, 0.0, dtype);
    let filter = float(e, filter, dtype);
    op0(e, "Where", &[valid, &zero, &filter])
}

/// Scaled dot-product attention.
struct Sdpa {
    /// Query heads per key/value head.
    groups: usize,
    /// Key/value heads, and the channels of a query and of a value head (read only when
    /// `groups > 1`).
    kv_heads: usize,
    head_size: usize,
    value_head_size: usize,
    scale: f64,
    /// `c·tanh(scores / c)` after scaling when positive.
    softcap: f32,
    dtype: DType,
}

impl Sdpa {
    /// `Softmax(q·kᵀ·scale + bias)·v` of heads `q` `[B, N, S, h]`, `k` `[B, Nk, T, h]`, `v`
    /// `[B, Nk, T, hv]` (`N = groups·Nk`); `bias` broadcasts to `[B, N, S, T]` and, when
    /// `groups > 1`, has a head axis of 1. Returns `[B, N, S, hv]`.
    fn apply(&self, e: &mut Expansion<'_>, q: &str, k: &str, v: &str, bias: Option<&str>) -> String {
        let grouped = self.groups > 1;
        let (q, k, v) = if grouped {
            let shape = [
                0,
                self.kv_heads as i64,
                self.groups as i64,
                -1,
                self.head_size as i64,
            ];
            let q = reshape(e, q, &shape);
            (q, unsqueeze(e, k, &[2]), unsqueeze(e, v, &[2]))
        } else {
            (q.to_string(), k.to_string(), v.to_string())
        };
        let rank = if grouped { 5 } else { 4 };
        let mut perm: Vec<i64> = (0..rank).collect();
        perm.swap(rank as usize - 2, rank as usize - 1);
        let kt = transpose(e, &k, &perm);
        let scores = op0(e, "MatMul", &[&q, &kt]);
        let scale = float(e, self.scale, self.dtype);
        let mut scores = op0(e, "Mul", &[&scores, &scale]);
        if self.softcap > 0.0 {
            let cap = float(e, f64::from(self.softcap), self.dtype);
            let ratio = op0(e, "Div", &[&scores, &cap]);
            let squashed = op0(e, "Tanh", &[&ratio]);
            scores = op0(e, "Mul", &[&squashed, &cap]);
        }
        if let Some(bias) = bias {
            let bias = if grouped { unsqueeze(e, bias, &[1]) } else { bias.to_string() };
            scores = op0(e, "Add", &[&scores, &bias]);
        }
        let probs = op(e, "Softmax", attrs([("axis", Attribute::Int(-1))]), &[&scores]);
        let context = op0(e, "MatMul", &[&probs, &v]);
        if grouped {
            let heads = (self.kv_heads * self.groups) as i64;
            reshape(e, &context, &[0, heads, -1, self.value_head_size as i64])
        } else {
            context
        }
    }
}

/// The `scale` attribute, or `1/√head_size` when absent or zero.
fn scale_attr(e: &Expansion<'_>, head_size: usize) -> Result<f64, OpError> {
    let scale = e.attrs().float_or("scale", 0.0)?;
    Ok(if scale == 0.0 {
        1.0 / (head_size as f64).sqrt()
    } else {
        f64::from(scale)
    })
}

/// `n / parts`, or an error naming `what` when it does not divide.
fn per_head(n: usize, parts: usize, what: &str) -> Result<usize, OpError> {
    if parts == 0 || !n.is_multiple_of(parts) {
        return Err(OpError::Shape(format!(
            "{what} ({n}) is not a multiple of the number of heads ({parts})"
        )));
    }
    Ok(n / parts)
}

fn attention(e: &mut Expansion<'_>) -> Result<(), OpError> {
    let dtype = float_dtype(e, 0)?;
    let sizes: Vec<usize> = match e.attrs().ints("qkv_hidden_sizes")? {
        Some(s) if !s.is_empty() => s
            .iter()
            .map(|&n| usize::try_from(n).ok().filter(|&n| n > 0))
            .collect::<Option<Vec<_>>>()
            .filter(|s| s.len() == 3)
            .ok_or_else(|| {
                OpError::attr("qkv_hidden_sizes", format!("must be 3 positive sizes, got {s:?}"))
            })?,
        _ => equal_thirds(e)?,
    };
    let input = e.input_name(0)?.to_string();
    let weights = e.input_name(1)?.to_string();
    let projected = op0(e, "MatMul", &[&input, &weights]);
    let projected = super::contrib_activation::add_optional(e, &projected, 2);
    let places = Places {
        mask: 3,
        past: 4,
        bias: Some(5),
    };
    attention_of_projection(e, &projected, &sizes, places, dtype)
}

/// `QAttention(input, weight, bias, input_scale, weight_scale, mask_index?, input_zero_point?,
/// weight_zero_point?, past?)`: `Attention` of the integer product
/// `float(MatMulInteger(input, weight)) · input_scale · weight_scale + bias`.
fn quantized_attention(e: &mut Expansion<'_>) -> Result<(), OpError> {
    let dtype = float_dtype(e, 3)?;
    let sizes = equal_thirds(e)?;
    let name = |e: &Expansion<'_>, i: usize| e.input_names().get(i).cloned().unwrap_or_default();
    let (input, weights) = (e.input_name(0)?.to_string(), e.input_name(1)?.to_string());
    let (input_zero, weight_zero) = (name(e, 6), name(e, 7));
    let product = op0(e, "MatMulInteger", &[&input, &weights, &input_zero, &weight_zero]);
    let to = attrs([("to", Attribute::Int(dtype.onnx_code().into()))]);
    let product = op(e, "Cast", to, &[&product]);
    let (input_scale, weight_scale) = (e.input_name(3)?.to_string(), e.input_name(4)?.to_string());
    let scale = op0(e, "Mul", &[&input_scale, &weight_scale]);
    let scaled = op0(e, "Mul", &[&product, &scale]);
    let bias = e.input_name(2)?.to_string();
    let projected = op0(e, "Add", &[&scaled, &bias]);
    let places = Places {
        mask: 5,
        past: 8,
        bias: None,
    };
    attention_of_projection(e, &projected, &sizes, places, dtype)
}

/// The query, key and value widths of packed weights (input 1) split in three equal parts.
fn equal_thirds(e: &Expansion<'_>) -> Result<Vec<usize>, OpError> {
    let total = fixed_dim(e, 1, -1).ok_or_else(|| {
        OpError::Unsupported(format!("{} with weights of unknown width", e.op_type()))
    })?;
    Ok(vec![per_head(total, 3, "the weights' width")?; 3])
}

/// Where the `Attention` family's optional inputs are.
#[derive(Debug, Clone, Copy)]
struct Places {
    mask: usize,
    past: usize,
    /// The additive attention bias, if the operator has one.
    bias: Option<usize>,
}

/// `Attention` after the packed projection `projected` (`[B, S, q + k + v]`, widths `sizes`).
fn attention_of_projection(
    e: &mut Expansion<'_>,
    projected: &str,
    sizes: &[usize],
    places: Places,
    dtype: DType,
) -> Result<(), OpError> {
    require_attr(e, "do_rotary", 0)?;
    require_attr(e, "past_present_share_buffer", 0)?;
    let num_heads = positive_attr(e, "num_heads")?;
    if sizes[0] != sizes[1] {
        return Err(OpError::attr(
            "qkv_hidden_sizes",
            format!("query and key sizes differ: {sizes:?}"),
        ));
    }
    let head_size = per_head(sizes[0], num_heads, "the query size")?;
    let value_head_size = per_head(sizes[2], num_heads, "the value size")?;
    let parts = split(e, projected, -1, &sizes.iter().map(|&n| n as i64).collect::<Vec<_>>());
    let q = heads(e, &parts[0], num_heads, head_size);
    let mut k = heads(e, &parts[1], num_heads, head_size);
    let mut v = heads(e, &parts[2], num_heads, value_head_size);
    if let Some(past) = optional_input(e, places.past) {
        let axis0 = attrs([("axis", Attribute::Int(0))]);
        let (first, second) = (int(e, 0), int(e, 1));
        let past_k = op(e, "Gather", axis0.clone(), &[&past, &first]);
        let past_v = op(e, "Gather", axis0, &[&past, &second]);
        k = append(e, Some(&past_k), &k, None);
        v = append(e, Some(&past_v), &v, None);
    }
    if let Some(present) = optional_output(e, 1) {
        let (k0, v0) = (unsqueeze(e, &k, &[0]), unsqueeze(e, &v, &[0]));
        op_into(
            e,
            "Concat",
            attrs([("axis", Attribute::Int(0))]),
            &[&k0, &v0],
            &[&present],
        );
    }
    let batch = fixed_dim(e, 0, 0);
    let bias = attention_bias(e, &q, &k, places.mask, places.bias, batch, dtype)?;
    attend_into_output(e, [&q, &k, &v], bias.as_deref(), head_size, dtype)
}

/// Ungrouped attention of heads `[q, k, v]` with `bias`, its heads side by side into the
/// node's first output.
fn attend_into_output(
    e: &mut Expansion<'_>,
    [q, k, v]: [&str; 3],
    bias: Option<&str>,
    head_size: usize,
    dtype: DType,
) -> Result<(), OpError> {
    let sdpa = Sdpa {
        groups: 1,
        kv_heads: 0,
        head_size,
        value_head_size: 0,
        scale: scale_attr(e, head_size)?,
        softcap: 0.0,
        dtype,
    };
    let context = sdpa.apply(e, q, k, v, bias);
    let output = first_output(e)?;
    merge_heads_into(e, &context, &output);
    Ok(())
}

/// The additive bias of `Attention` and `MultiHeadAttention` for heads `q` `[B, N, S, h]` and
/// `k` `[B, N, T, h]`: the padding mask of input `mask_input`, the causal mask when
/// `unidirectional`, then the additive `attention_bias` of input `bias_input`.
fn attention_bias(
    e: &mut Expansion<'_>,
    q: &str,
    k: &str,
    mask_input: usize,
    bias_input: Option<usize>,
    batch: Option<usize>,
    dtype: DType,
) -> Result<Option<String>, OpError> {
    let filter = f64::from(e.attrs().float_or("mask_filter_value", MASK_FILTER_VALUE)?);
    let causal = e.attrs().int_or("unidirectional", 0)? != 0;
    let mut valid = None;
    if optional_input(e, mask_input).is_some() || causal {
        let total = dim(e, k, 2);
        let keys = range(e, &total);
        if optional_input(e, mask_input).is_some() {
            valid = Some(padding_valid(e, mask_input, &keys, batch)?);
        }
        if causal {
            let length = dim(e, q, 2);
            let queries = range(e, &length);
            let past = op0(e, "Sub", &[&total, &length]);
            let c = causal_valid(e, &queries, &keys, &past);
            valid = both(e, valid, Some(c));
        }
    }
    let mut bias = valid.map(|v| additive_mask(e, &v, filter, dtype));
    if let Some(extra) = bias_input.and_then(|i| optional_input(e, i)) {
        bias = Some(match bias {
            Some(b) => op0(e, "Add", &[&b, &extra]),
            None => extra,
        });
    }
    Ok(bias)
}

fn multi_head_attention(e: &mut Expansion<'_>) -> Result<(), OpError> {
    let num_heads = positive_attr(e, "num_heads")?;
    let dtype = float_dtype(e, 0)?;
    let query = e.input_name(0)?.to_string();
    let unknown = |what: &str| OpError::Unsupported(format!("MultiHeadAttention with {what}"));
    let has_bias = optional_input(e, 3).is_some();
    let (q, k, v, head_size) = match e.rank(0)? {
        5 => {
            if has_bias {
                return Err(unknown("a bias and packed query, key and value"));
            }
            let head_size = fixed_dim(e, 0, 4).ok_or_else(|| unknown("a head size not known"))?;
            let parts = split(e, &query, 3, &[1, 1, 1]);
            let mut bnsh = parts.iter().map(|p| {
                let squeezed = reshape(e, p, &[0, 0, 0, head_size as i64]);
                transpose(e, &squeezed, &[0, 2, 1, 3])
            });
            let (q, k, v) = (
                bnsh.next().expect("three parts"),
                bnsh.next().expect("three parts"),
                bnsh.next().expect("three parts"),
            );
            (q, k, v, head_size)
        }
        3 => {
            let width = fixed_dim(e, 0, 2).ok_or_else(|| unknown("a query of unknown width"))?;
            let head_size = per_head(width, num_heads, "the query width")?;
            let key = e.input_name(1)?.to_string();
            let key_rank = e.rank(1)?;
            if has_bias && key_rank != 3 {
                return Err(unknown("a bias and keys already split into heads"));
            }
            let value_width = match optional_input(e, 2) {
                Some(_) if e.rank(2)? == 3 => fixed_dim(e, 2, 2),
                Some(_) => fixed_dim(e, 2, 3).map(|h| h * num_heads),
                None => fixed_dim(e, 1, 4).map(|h| h * num_heads),
            }
            .ok_or_else(|| unknown("values of unknown width"))?;
            let value_head_size = per_head(value_width, num_heads, "the value width")?;
            let (mut q, mut k_in, mut v_in) = (query, key, optional_input(e, 2));
            if let Some(bias) = optional_input(e, 3) {
                let biases = split(
                    e,
                    &bias,
                    0,
                    &[width as i64, width as i64, value_width as i64],
                );
                q = op0(e, "Add", &[&q, &biases[0]]);
                k_in = op0(e, "Add", &[&k_in, &biases[1]]);
                if let Some(value) = v_in {
                    v_in = Some(op0(e, "Add", &[&value, &biases[2]]));
                }
            }
            let q = heads(e, &q, num_heads, head_size);
            let (k, v) = match (key_rank, v_in) {
                (3, Some(value)) => (
                    heads(e, &k_in, num_heads, head_size),
                    heads(e, &value, num_heads, value_head_size),
                ),
                (4, Some(value)) => (k_in, value),
                (5, None) => {
                    let parts = split(e, &k_in, 3, &[1, 1]);
                    let mut bnsh = parts.iter().map(|p| {
                        let squeezed = reshape(e, p, &[0, 0, 0, head_size as i64]);
                        transpose(e, &squeezed, &[0, 2, 1, 3])
                    });
                    (
                        bnsh.next().expect("two parts"),
                        bnsh.next().expect("two parts"),
                    )
                }
                (r, _) => return Err(unknown(&format!("keys of rank {r} and these values"))),
            };
            (q, k, v, head_size)
        }
        r => return Err(unknown(&format!("a query of rank {r}"))),
    };
    let past_key = optional_input(e, 6);
    let past_value = optional_input(e, 7);
    let (present_key, present_value) = (optional_output(e, 1), optional_output(e, 2));
    let k = append(e, past_key.as_deref(), &k, present_key.as_deref());
    let v = append(e, past_value.as_deref(), &v, present_value.as_deref());
    let bias = attention_bias(e, &q, &k, 4, Some(5), fixed_dim(e, 0, 0), dtype)?;
    attend_into_output(e, [&q, &k, &v], bias.as_deref(), head_size, dtype)
}

fn group_query_attention(e: &mut Expansion<'_>) -> Result<(), OpError> {
    require_attr(e, "smooth_softmax", 0)?;
    for (input, what) in [(10, "attention_bias"), (11, "head_sink")] {
        if optional_input(e, input).is_some() {
            return Err(OpError::Unsupported(format!("GroupQueryAttention with {what}")));
        }
    }
    let num_heads = positive_attr(e, "num_heads")?;
    let kv_heads = positive_attr(e, "kv_num_heads")?;
    let groups = per_head(num_heads, kv_heads, "num_heads")?;
    let dtype = float_dtype(e, 0)?;
    let unknown = |what: &str| OpError::Unsupported(format!("GroupQueryAttention with {what}"));
    let width = fixed_dim(e, 0, 2).ok_or_else(|| unknown("a query of unknown width"))?;
    let query = e.input_name(0)?.to_string();
    let (q, k, v, head_size) = match optional_input(e, 1) {
        Some(key) => {
            let value = e.input_name(2)?.to_string();
            (query, key, value, per_head(width, num_heads, "the query width")?)
        }
        None => {
            let head_size = per_head(width, num_heads + 2 * kv_heads, "the packed width")?;
            let (nq, nk) = ((num_heads * head_size) as i64, (kv_heads * head_size) as i64);
            let parts = split(e, &query, 2, &[nq, nk, nk]);
            (parts[0].clone(), parts[1].clone(), parts[2].clone(), head_size)
        }
    };
    let (h, nq, nk) = (head_size as i64, num_heads as i64, kv_heads as i64);
    let mut q = reshape(e, &q, &[0, 0, nq, h]);
    let mut k = reshape(e, &k, &[0, 0, nk, h]);
    let v = reshape(e, &v, &[0, 0, nk, h]);

    // Each row's past length and the positions of its queries.
    let to_i64 = attrs([("to", Attribute::Int(DType::I64.onnx_code().into()))]);
    let seqlens = e.input_name(5)?.to_string();
    let seqlens = op(e, "Cast", to_i64.clone(), &[&seqlens]);
    let total = e.input_name(6)?.to_string();
    let total = op(e, "Cast", to_i64, &[&total]);
    let total = reshape(e, &total, &[]);
    let one = int(e, 1);
    let valid_lengths = op0(e, "Add", &[&seqlens, &one]);
    let length = dim(e, &q, 1);
    let first_prompt = op0(e, "Equal", &[&length, &total]);
    let zero = int(e, 0);
    let later_past = op0(e, "Sub", &[&valid_lengths, &length]);
    let past_lengths = op0(e, "Where", &[&first_prompt, &zero, &later_past]);
    let query_positions = positions_from(e, &past_lengths, &length);

    if e.attrs().int_or("do_rotary", 0)? != 0 {
        let cos_cache = e.input_name(7)?.to_string();
        let sin_cache = e.input_name(8)?.to_string();
        let half = fixed_dim(e, 7, -1).ok_or_else(|| unknown("a cos_cache of unknown width"))?;
        let interleaved = e.attrs().int_or("rotary_interleaved", 0)? != 0;
        let rotary = Rotary::new(head_size, 2 * half, interleaved)?;
        let positions = optional_input(e, 9).unwrap_or_else(|| query_positions.clone());
        let (cos, sin) = rotary.tables(e, &cos_cache, &sin_cache, &positions);
        q = rotary.apply(e, &q, &cos, &sin);
        k = rotary.apply(e, &k, &cos, &sin);
    }
    let q = transpose(e, &q, &[0, 2, 1, 3]);
    let k = transpose(e, &k, &[0, 2, 1, 3]);
    let v = transpose(e, &v, &[0, 2, 1, 3]);
    let past_key = optional_input(e, 3);
    let past_value = optional_input(e, 4);
    let past_slots = match &past_key {
        Some(p) => dim(e, p, 2),
        None => int(e, 0),
    };
    let sliding_cache = e.attrs().int_or("sliding_window_cache", 0)? != 0 && past_key.is_some();
    let (present_key, present_value) = (optional_output(e, 1), optional_output(e, 2));
    let (k, v) = if sliding_cache {
        // The cache is a window of the `P` latest keys: the present keeps the last `P` of the
        // past and the new keys.
        let k = append(e, past_key.as_deref(), &k, None);
        let v = append(e, past_value.as_deref(), &v, None);
        let negated = op0(e, "Neg", &[&past_slots]);
        let start = unsqueeze(e, &negated, &[0]);
        let (end, axis) = (ints(e, &[i64::MAX]), ints(e, &[2]));
        for (all, present) in [(&k, &present_key), (&v, &present_value)] {
            if let Some(present) = present {
                op_into(e, "Slice", Default::default(), &[all, &start, &end, &axis], &[present]);
            }
        }
        (k, v)
    } else {
        // Row `b`'s new keys follow its own past: present slot `t` holds past slot `t` below
        // `past_b`, new key `t − past_b` up to `past_b + S` (at `P + t − past_b` of the
        // concatenation), and past slot `t` (unused) after — the identity for full rows.
        let k = append(e, past_key.as_deref(), &k, None);
        let v = append(e, past_value.as_deref(), &v, None);
        let slots = dim(e, &k, 2);
        let t = range(e, &slots);
        let past_column = unsqueeze(e, &past_lengths, &[1]);
        let after_past = op0(e, "GreaterOrEqual", &[&t, &past_column]);
        let new_end = op0(e, "Add", &[&past_column, &length]);
        let before_end = op0(e, "Less", &[&t, &new_end]);
        let is_new = op0(e, "And", &[&after_past, &before_end]);
        let shift = op0(e, "Sub", &[&past_slots, &past_column]);
        let from_new = op0(e, "Add", &[&t, &shift]);
        let source = op0(e, "Where", &[&is_new, &from_new, &t]);
        let source = reshape(e, &source, &[0, 1, -1, 1]);
        let mut placed = Vec::with_capacity(2);
        for (all, present) in [(&k, &present_key), (&v, &present_value)] {
            let shape = op0(e, "Shape", &[all]);
            let index = op0(e, "Expand", &[&source, &shape]);
            let gather = attrs([("axis", Attribute::Int(2))]);
            let inputs = [all.as_str(), index.as_str()];
            placed.push(match present {
                Some(present) => {
                    op_into(e, "GatherElements", gather, &inputs, &[present]);
                    present.clone()
                }
                None => op(e, "GatherElements", gather, &inputs),
            });
        }
        let v = placed.pop().expect("two values placed");
        (placed.pop().expect("two values placed"), v)
    };

    // Key `t` sits at position `t`, or at `past_b + t − P` in a sliding cache (whose slots
    // below position 0 are unused).
    let slots = dim(e, &k, 2);
    let keys = range(e, &slots);
    let (key_positions, stored) = if sliding_cache {
        let past_column = unsqueeze(e, &past_lengths, &[1]);
        let from_new = op0(e, "Sub", &[&keys, &past_slots]);
        let shifted = op0(e, "Add", &[&past_column, &from_new]);
        let zero = int(e, 0);
        let stored = op0(e, "GreaterOrEqual", &[&shifted, &zero]);
        (shifted, Some(stored))
    } else {
        (unsqueeze(e, &keys, &[0]), None)
    };
    let key_positions = unsqueeze(e, &key_positions, &[1]);
    let query_column = unsqueeze(e, &query_positions, &[2]);
    let causal = op0(e, "LessOrEqual", &[&key_positions, &query_column]);
    let lengths = unsqueeze(e, &valid_lengths, &[1, 2]);
    let in_row = op0(e, "Less", &[&key_positions, &lengths]);
    let mut valid = op0(e, "And", &[&causal, &in_row]);
    if let Some(stored) = stored {
        let stored = unsqueeze(e, &stored, &[1]);
        valid = op0(e, "And", &[&valid, &stored]);
    }
    let window = e.attrs().int_or("local_window_size", -1)?;
    if window > 0 {
        let reach = op0(e, "Sub", &[&query_column, &key_positions]);
        let limit = int(e, window);
        let near = op0(e, "Less", &[&reach, &limit]);
        valid = op0(e, "And", &[&valid, &near]);
    }
    let valid = unsqueeze(e, &valid, &[1]);
    let bias = additive_mask(e, &valid, f64::from(f32::MIN), dtype);
    let sdpa = Sdpa {
        groups,
        kv_heads,
        head_size,
        value_head_size: head_size,
        scale: scale_attr(e, head_size)?,
        softcap: e.attrs().float_or("softcap", 0.0)?,
        dtype,
    };
    let context = sdpa.apply(e, &q, &k, &v, Some(&bias));
    let output = first_output(e)?;
    merge_heads_into(e, &context, &output);
    Ok(())
}

/// Input `i` as heads `[B, N, S, h]`: split when it is `[B, S, N·h]` (with `N` from the
/// attribute `heads_attr`); returns the heads, their count and their size.
fn onnx_heads(
    e: &mut Expansion<'_>,
    i: usize,
    heads_attr: &str,
) -> Result<(String, usize, usize), OpError> {
    let x = e.input_name(i)?.to_string();
    let unknown = |what: &str| OpError::Unsupported(format!("Attention with {what}"));
    match e.rank(i)? {
        4 => {
            let n = fixed_dim(e, i, 1).ok_or_else(|| unknown("an unknown head count"))?;
            let h = fixed_dim(e, i, 3).ok_or_else(|| unknown("an unknown head size"))?;
            Ok((x, n, h))
        }
        3 => {
            let n = positive_attr(e, heads_attr)?;
            let width = fixed_dim(e, i, 2).ok_or_else(|| unknown("an input of unknown width"))?;
            let h = per_head(width, n, "the input width")?;
            Ok((heads(e, &x, n, h), n, h))
        }
        r => Err(OpError::Shape(format!(
            "Attention's input #{i} must have rank 3 or 4, got {r}"
        ))),
    }
}

/// `x` (`[B, Nk, T, h]`) with each head repeated `groups` times, `[B, Nk·groups, T, h]`.
fn repeat_heads(e: &mut Expansion<'_>, x: &str, kv_heads: usize, groups: usize, h: usize) -> String {
    let spread = unsqueeze(e, x, &[2]);
    let times = ints(e, &[1, 1, groups as i64, 1, 1]);
    let repeated = op0(e, "Expand", &[&spread, &times]);
    reshape(e, &repeated, &[0, (kv_heads * groups) as i64, -1, h as i64])
}

fn onnx_attention(e: &mut Expansion<'_>) -> Result<(), OpError> {
    if optional_output(e, 3).is_some() {
        return Err(OpError::Unsupported("Attention's qk_matmul_output".into()));
    }
    let dtype = float_dtype(e, 0)?;
    let (q, num_heads, head_size) = onnx_heads(e, 0, "q_num_heads")?;
    let (k, kv_heads, key_size) = onnx_heads(e, 1, "kv_num_heads")?;
    let (v, value_heads, value_size) = onnx_heads(e, 2, "kv_num_heads")?;
    if key_size != head_size || value_heads != kv_heads {
        return Err(OpError::Shape(format!(
            "Attention: query heads of {head_size} against keys of {key_size}, {kv_heads} key \
             heads against {value_heads} value heads"
        )));
    }
    let groups = per_head(num_heads, kv_heads, "q_num_heads")?;
    let past_key = optional_input(e, 4);
    let past_value = optional_input(e, 5);
    let (present_key, present_value) = (optional_output(e, 1), optional_output(e, 2));
    let k = append(e, past_key.as_deref(), &k, present_key.as_deref());
    let v = append(e, past_value.as_deref(), &v, present_value.as_deref());

    // Masks are built with four axes, `[B or 1, 1, S or 1, T]`, for the grouped product.
    let total = dim(e, &k, 2);
    let length = dim(e, &q, 2);
    let keys = range(e, &total);
    let queries = range(e, &length);
    let queries = unsqueeze(e, &queries, &[0, 1, 3]);
    let nonpad = optional_input(e, 6).map(|lengths| {
        let to_i64 = attrs([("to", Attribute::Int(DType::I64.onnx_code().into()))]);
        let lengths = op(e, "Cast", to_i64, &[&lengths]);
        unsqueeze(e, &lengths, &[1, 2, 3])
    });
    // Query `i`'s position among the keys: `i + offset`.
    let query_positions = match (&past_key, &nonpad) {
        (Some(past), _) => {
            let past = dim(e, past, 2);
            op0(e, "Add", &[&queries, &past])
        }
        (None, Some(lengths)) => {
            let offset = op0(e, "Sub", &[lengths, &length]);
            op0(e, "Add", &[&queries, &offset])
        }
        (None, None) => queries,
    };
    let mut valid = None;
    if e.attrs().int_or("is_causal", 0)? != 0 {
        valid = Some(op0(e, "LessOrEqual", &[&keys, &query_positions]));
    }
    for (name, before) in [("left_window_size", true), ("right_window_size", false)] {
        let window = e.attrs().int_or(name, -1)?;
        if window >= 0 {
            let reach = if before {
                op0(e, "Sub", &[&query_positions, &keys])
            } else {
                op0(e, "Sub", &[&keys, &query_positions])
            };
            let limit = int(e, window);
            let near = op0(e, "LessOrEqual", &[&reach, &limit]);
            valid = both(e, valid, Some(near));
        }
    }
    if let Some(lengths) = &nonpad {
        let stored = op0(e, "Less", &[&keys, lengths]);
        valid = both(e, valid, Some(stored));
    }
    let mut bias = None;
    let mut per_head_mask = false;
    if let Some(mask) = optional_input(e, 3) {
        let rank = e.rank(3)?;
        if rank > 4 {
            return Err(OpError::Shape(format!(
                "Attention's attn_mask must have rank at most 4, got {rank}"
            )));
        }
        let past = past_key.as_ref().map_or(Some(0), |_| fixed_dim(e, 4, 2));
        if let (Some(width), Some(new), Some(past)) =
            (fixed_dim(e, 3, -1), fixed_dim(e, 1, -2), past)
        {
            if width < new + past {
                return Err(OpError::Unsupported(format!(
                    "Attention with a mask of {width} keys for {}",
                    new + past
                )));
            }
        }
        per_head_mask = rank == 4 && fixed_dim(e, 3, 1) != Some(1);
        let mask = if rank < 4 {
            let leading: Vec<i64> = (0..(4 - rank) as i64).collect();
            unsqueeze(e, &mask, &leading)
        } else {
            mask
        };
        if e.req_input(3)?.ty.dtype == DType::Bool {
            valid = both(e, valid, Some(mask));
        } else {
            bias = Some(mask);
        }
    }
    if let Some(valid) = valid {
        let masked = additive_mask(e, &valid, f64::from(f32::MIN), dtype);
        bias = Some(match bias {
            Some(b) => op0(e, "Add", &[&b, &masked]),
            None => masked,
        });
    }
    let (k, v, groups) = if groups > 1 && per_head_mask {
        (
            repeat_heads(e, &k, kv_heads, groups, head_size),
            repeat_heads(e, &v, kv_heads, groups, value_size),
            1,
        )
    } else {
        (k, v, groups)
    };
    let sdpa = Sdpa {
        groups,
        kv_heads: num_heads / groups,
        head_size,
        value_head_size: value_size,
        scale: scale_attr(e, head_size)?,
        softcap: e.attrs().float_or("softcap", 0.0)?,
        dtype,
    };
    let context = sdpa.apply(e, &q, &k, &v, bias.as_deref());
    let output = first_output(e)?;
    if e.rank(0)? == 3 {
        merge_heads_into(e, &context, &output);
    } else {
        op_into(e, "Identity", Default::default(), &[&context], &[&output]);
    }
    Ok(())
}
