//! BERT (encoder, as `transformers` exports `BertModel`): `Gather` embeddings (words,
//! positions, token types) + `LayerNormalization`; per layer, attention with `MatMul` + `Add`
//! projections, `Reshape`/`Transpose` into heads, scores `Div` by √d, the additive mask,
//! `Softmax`, and the exact GELU (`Div`, `Erf`, `Add`, `Mul`) in the feed-forward block; the
//! pooler takes token 0 (`Gather` axis 1) through `Gemm(transB=1)` and `Tanh`.
//!
//! The attention mask input (int64, 1 = attend) becomes `(1 - mask) · f32::MIN` added to the
//! scores: `Unsqueeze`, `Cast`, `Sub`, `Mul`, as the exporter writes it.

use hidet_graph::{Attribute, Attributes, DType, Graph, Tensor};

use super::net::{attrs, Net};
use super::{ZooError, SEED};

/// The sizes of a BERT model.
#[derive(Debug, Clone, Copy)]
pub struct BertConfig {
    pub layers: usize,
    pub hidden: usize,
    pub heads: usize,
    pub intermediate: usize,
    pub vocab: usize,
    pub max_positions: usize,
    pub type_vocab: usize,
    /// Sequence length of the inputs (batch is 1).
    pub seq: usize,
}

impl BertConfig {
    /// BERT-base (uncased) with sequence length 128.
    pub const BASE: BertConfig = BertConfig {
        layers: 12,
        hidden: 768,
        heads: 12,
        intermediate: 3072,
        vocab: 30522,
        max_positions: 512,
        type_vocab: 2,
        seq: 128,
    };

    /// A 2-layer model with sizes that are not multiples of common tile sizes.
    pub const TINY: BertConfig = BertConfig {
        layers: 2,
        hidden: 48,
        heads: 4,
        intermediate: 76,
        vocab: 101,
        max_positions: 40,
        type_vocab: 2,
        seq: 19,
    };
}

/// LayerNormalization epsilon of BERT.
const EPS: f32 = 1e-12;

/// BERT-base, sequence length 128.
pub fn build_base() -> Result<Graph, ZooError> {
    build(&BertConfig::BASE, "bert_base")
}

/// The tiny test configuration.
pub fn build_tiny() -> Result<Graph, ZooError> {
    build(&BertConfig::TINY, "tiny_bert")
}

/// BERT with `cfg`; inputs `input_ids`, `attention_mask`, `token_type_ids` (int64
/// `[1, seq]`), outputs `last_hidden_state` `[1, seq, hidden]` and `pooler_output`
/// `[1, hidden]`.
pub fn build(cfg: &BertConfig, name: &str) -> Result<Graph, ZooError> {
    let (h, s) = (cfg.hidden, cfg.seq);
    let mut net = Net::new(name, SEED);
    let ids = net.input("input_ids", DType::I64, &[1, s]);
    let mask = net.input("attention_mask", DType::I64, &[1, s]);
    let types = net.input("token_type_ids", DType::I64, &[1, s]);

    // Embeddings (HF initializes them with std 0.02).
    let emb_bound = 0.02 * 3f64.sqrt();
    let wte = net.uniform(
        "embeddings.word_embeddings.weight",
        &[cfg.vocab, h],
        emb_bound,
    )?;
    let wpe = net.uniform(
        "embeddings.position_embeddings.weight",
        &[cfg.max_positions, h],
        emb_bound,
    )?;
    let wtt = net.uniform(
        "embeddings.token_type_embeddings.weight",
        &[cfg.type_vocab, h],
        emb_bound,
    )?;
    let positions: Vec<i64> = (0..s as i64).collect();
    let pos = net.constant(
        "embeddings.position_ids",
        Tensor::new(vec![1, s], positions)?,
    );
    let e_words = net.op(
        "embeddings.words",
        "Gather",
        &[&wte, &ids],
        Attributes::new(),
    );
    let e_types = net.op(
        "embeddings.types",
        "Gather",
        &[&wtt, &types],
        Attributes::new(),
    );
    let e_pos = net.op(
        "embeddings.positions",
        "Gather",
        &[&wpe, &pos],
        Attributes::new(),
    );
    let e = net.op(
        "embeddings.add1",
        "Add",
        &[&e_words, &e_types],
        Attributes::new(),
    );
    let e = net.op("embeddings.add2", "Add", &[&e, &e_pos], Attributes::new());
    let mut x = net.layer_norm("embeddings.LayerNorm", &e, h, EPS)?;

    // Extended attention mask [1, 1, 1, seq].
    let axes = net.const_i64("mask.axes", &[1, 2])?;
    let m = net.op(
        "mask.unsqueeze",
        "Unsqueeze",
        &[&mask, &axes],
        Attributes::new(),
    );
    let m = net.op(
        "mask.cast",
        "Cast",
        &[&m],
        attrs(vec![("to", Attribute::Int(1))]),
    );
    let one = net.scalar_f32("mask.one", 1.0);
    let m = net.op("mask.invert", "Sub", &[&one, &m], Attributes::new());
    let min = net.scalar_f32("mask.min", f32::MIN);
    let ext_mask = net.op("mask.scale", "Mul", &[&m, &min], Attributes::new());

    for l in 0..cfg.layers {
        x = layer(&mut net, cfg, &format!("encoder.layer.{l}"), &x, &ext_mask)?;
    }
    let last = net.op("last_hidden_state", "Identity", &[&x], Attributes::new());

    let zero = net.constant("pooler.index", Tensor::scalar(0i64));
    let first = net.op(
        "pooler.first",
        "Gather",
        &[&last, &zero],
        attrs(vec![("axis", Attribute::Int(1))]),
    );
    let dense = net.gemm("pooler.dense", &first, h, h, true, 1.0)?;
    let pooled = net.op("pooler_output", "Tanh", &[&dense], Attributes::new());
    net.finish(name, &[&last, &pooled])
}

/// Splits `[1, seq, hidden]` into heads: `[1, heads, seq, d]` (or `[1, heads, d, seq]` with
/// `keys`, the transposed layout the exporter gives K).
fn heads(
    net: &mut Net,
    name: &str,
    x: &str,
    cfg: &BertConfig,
    keys: bool,
) -> Result<String, ZooError> {
    let d = cfg.hidden / cfg.heads;
    let r = net.reshape(
        &format!("{name}.split_heads"),
        x,
        &[1, cfg.seq as i64, cfg.heads as i64, d as i64],
    )?;
    let perm: &[usize] = if keys { &[0, 2, 3, 1] } else { &[0, 2, 1, 3] };
    Ok(net.transpose(&format!("{name}.heads"), &r, perm))
}

fn layer(
    net: &mut Net,
    cfg: &BertConfig,
    n: &str,
    x: &str,
    mask: &str,
) -> Result<String, ZooError> {
    let (h, s) = (cfg.hidden, cfg.seq);
    let d = h / cfg.heads;
    let q = net.linear(&format!("{n}.attention.self.query"), x, h, h, 1.0)?;
    let k = net.linear(&format!("{n}.attention.self.key"), x, h, h, 1.0)?;
    let v = net.linear(&format!("{n}.attention.self.value"), x, h, h, 1.0)?;
    let q = heads(net, &format!("{n}.q"), &q, cfg, false)?;
    let k = heads(net, &format!("{n}.k"), &k, cfg, true)?;
    let v = heads(net, &format!("{n}.v"), &v, cfg, false)?;
    let scores = net.op(
        &format!("{n}.scores"),
        "MatMul",
        &[&q, &k],
        Attributes::new(),
    );
    let sqrt_d = net.scalar_f32(&format!("{n}.sqrt_d"), (d as f32).sqrt());
    let scores = net.op(
        &format!("{n}.scaled"),
        "Div",
        &[&scores, &sqrt_d],
        Attributes::new(),
    );
    let scores = net.op(
        &format!("{n}.masked"),
        "Add",
        &[&scores, mask],
        Attributes::new(),
    );
    let probs = net.softmax(&format!("{n}.probs"), &scores);
    let ctx = net.op(
        &format!("{n}.context"),
        "MatMul",
        &[&probs, &v],
        Attributes::new(),
    );
    let ctx = net.transpose(&format!("{n}.merge"), &ctx, &[0, 2, 1, 3]);
    let ctx = net.reshape(&format!("{n}.merge_heads"), &ctx, &[1, s as i64, h as i64])?;
    let o = net.linear(&format!("{n}.attention.output.dense"), &ctx, h, h, 1.0)?;
    let o = net.op(
        &format!("{n}.attention.residual"),
        "Add",
        &[&o, x],
        Attributes::new(),
    );
    let a = net.layer_norm(&format!("{n}.attention.output.LayerNorm"), &o, h, EPS)?;

    let f = net.linear(
        &format!("{n}.intermediate.dense"),
        &a,
        h,
        cfg.intermediate,
        1.0,
    )?;
    let f = gelu_erf(net, &format!("{n}.intermediate.gelu"), &f);
    let f = net.linear(&format!("{n}.output.dense"), &f, cfg.intermediate, h, 1.0)?;
    let f = net.op(
        &format!("{n}.output.residual"),
        "Add",
        &[&f, &a],
        Attributes::new(),
    );
    net.layer_norm(&format!("{n}.output.LayerNorm"), &f, h, EPS)
}

/// The exact GELU as exported: `x · 0.5 · (1 + erf(x / √2))`.
fn gelu_erf(net: &mut Net, n: &str, x: &str) -> String {
    let sqrt2 = net.scalar_f32(&format!("{n}.sqrt2"), std::f32::consts::SQRT_2);
    let one = net.scalar_f32(&format!("{n}.one"), 1.0);
    let half = net.scalar_f32(&format!("{n}.half"), 0.5);
    let t = net.op(&format!("{n}.div"), "Div", &[x, &sqrt2], Attributes::new());
    let t = net.op(&format!("{n}.erf"), "Erf", &[&t], Attributes::new());
    let t = net.op(&format!("{n}.add"), "Add", &[&t, &one], Attributes::new());
    let t = net.op(&format!("{n}.mul"), "Mul", &[x, &t], Attributes::new());
    net.op(n, "Mul", &[&t, &half], Attributes::new())
}
