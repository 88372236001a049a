//! GPT-2 (as `transformers` exports `GPT2Model`): token and position `Gather` embeddings;
//! per layer (pre-LayerNorm), the fused q/k/v projection as a 2-D `Gemm` (GPT-2's `Conv1D`,
//! no `transB`) between `Reshape`s, `Split` into q, k, v, heads by `Reshape`/`Transpose`,
//! scores `Div` by √d, the causal mask applied with `Where`, `Softmax`, and the tanh GELU
//! (`Pow` 3, `Mul`, `Add`, `Tanh`); a final `LayerNormalization`.
//!
//! The causal mask is built from constants the way the export's is: `Trilu` of a ones
//! matrix, `Cast` to bool, `Reshape` to `[1, 1, seq, seq]` — input-independent, so constant
//! folding turns it into one initializer.

use hidet_graph::{Attribute, Attributes, DType, Graph, Tensor};

use super::net::{attrs, Net};
use super::{ZooError, SEED};

/// The sizes of a GPT-2 model.
#[derive(Debug, Clone, Copy)]
pub struct Gpt2Config {
    pub layers: usize,
    pub hidden: usize,
    pub heads: usize,
    pub vocab: usize,
    pub max_positions: usize,
    /// Sequence length of the input (batch is 1).
    pub seq: usize,
}

impl Gpt2Config {
    /// GPT-2 small with sequence length 128.
    pub const BASE: Gpt2Config = Gpt2Config {
        layers: 12,
        hidden: 768,
        heads: 12,
        vocab: 50257,
        max_positions: 1024,
        seq: 128,
    };

    /// A 2-layer model with sizes that are not multiples of common tile sizes.
    pub const TINY: Gpt2Config = Gpt2Config {
        layers: 2,
        hidden: 48,
        heads: 4,
        vocab: 97,
        max_positions: 33,
        seq: 19,
    };
}

/// LayerNormalization epsilon of GPT-2.
const EPS: f32 = 1e-5;

/// GPT-2 small, sequence length 128.
pub fn build_base() -> Result<Graph, ZooError> {
    build(&Gpt2Config::BASE, "gpt2")
}

/// The tiny test configuration.
pub fn build_tiny() -> Result<Graph, ZooError> {
    build(&Gpt2Config::TINY, "tiny_gpt2")
}

/// GPT-2 with `cfg`; input `input_ids` (int64 `[1, seq]`), output `last_hidden_state`
/// `[1, seq, hidden]`.
pub fn build(cfg: &Gpt2Config, name: &str) -> Result<Graph, ZooError> {
    let (h, s) = (cfg.hidden, cfg.seq);
    let mut net = Net::new(name, SEED);
    let ids = net.input("input_ids", DType::I64, &[1, s]);

    let emb_bound = 0.02 * 3f64.sqrt();
    let wte = net.uniform("wte.weight", &[cfg.vocab, h], emb_bound)?;
    let wpe = net.uniform("wpe.weight", &[cfg.max_positions, h], emb_bound)?;
    let positions: Vec<i64> = (0..s as i64).collect();
    let pos = net.constant("position_ids", Tensor::new(vec![1, s], positions)?);
    let t = net.op("wte", "Gather", &[&wte, &ids], Attributes::new());
    let p = net.op("wpe", "Gather", &[&wpe, &pos], Attributes::new());
    let mut x = net.op("embeddings", "Add", &[&t, &p], Attributes::new());

    // Causal mask: lower triangle (including the diagonal) is attended.
    let ones = net.constant("causal.ones", Tensor::new(vec![s, s], vec![1f32; s * s])?);
    let tri = net.op(
        "causal.trilu",
        "Trilu",
        &[&ones],
        attrs(vec![("upper", Attribute::Int(0))]),
    );
    let tri = net.op(
        "causal.bool",
        "Cast",
        &[&tri],
        attrs(vec![("to", Attribute::Int(9))]),
    );
    let causal = net.reshape("causal", &tri, &[1, 1, s as i64, s as i64])?;
    let masked_value = net.scalar_f32("masked_bias", f32::MIN);

    for l in 0..cfg.layers {
        x = block(&mut net, cfg, &format!("h.{l}"), &x, &causal, &masked_value)?;
    }
    let out = net.layer_norm("ln_f", &x, h, EPS)?;
    let out = net.op("last_hidden_state", "Identity", &[&out], Attributes::new());
    net.finish(name, &[&out])
}

/// GPT-2's `Conv1D`: `[1, seq, fan_in]` → `Reshape` to 2-D → `Gemm` → `Reshape` back.
fn conv1d(
    net: &mut Net,
    n: &str,
    x: &str,
    cfg: &Gpt2Config,
    fan_in: usize,
    fan_out: usize,
    gain: f64,
) -> Result<String, ZooError> {
    let flat = net.reshape(&format!("{n}.flatten"), x, &[-1, fan_in as i64])?;
    let y = net.gemm(n, &flat, fan_in, fan_out, false, gain)?;
    net.reshape(
        &format!("{n}.unflatten"),
        &y,
        &[1, cfg.seq as i64, fan_out as i64],
    )
}

fn block(
    net: &mut Net,
    cfg: &Gpt2Config,
    n: &str,
    x: &str,
    causal: &str,
    masked_value: &str,
) -> Result<String, ZooError> {
    let (h, s, nh) = (cfg.hidden, cfg.seq, cfg.heads);
    let d = h / nh;
    // Residual branches are scaled down like GPT-2's 1/sqrt(2 · layers) output projections.
    let out_gain = 1.0 / (2.0 * cfg.layers as f64).sqrt();

    let a = net.layer_norm(&format!("{n}.ln_1"), x, h, EPS)?;
    let qkv = conv1d(net, &format!("{n}.attn.c_attn"), &a, cfg, h, 3 * h, 1.0)?;
    let sizes = net.const_i64(&format!("{n}.attn.split_sizes"), &[h as i64; 3])?;
    let parts = net.node(
        &format!("{n}.attn.split"),
        "Split",
        &[&qkv, &sizes],
        attrs(vec![("axis", Attribute::Int(2))]),
        3,
    );
    let mut hs = Vec::new();
    for (i, (part, perm)) in parts
        .iter()
        .zip([[0, 2, 1, 3], [0, 2, 3, 1], [0, 2, 1, 3]])
        .enumerate()
    {
        let r = net.reshape(
            &format!("{n}.attn.heads{i}"),
            part,
            &[1, s as i64, nh as i64, d as i64],
        )?;
        hs.push(net.transpose(&format!("{n}.attn.perm{i}"), &r, &perm));
    }
    let w = net.op(
        &format!("{n}.attn.scores"),
        "MatMul",
        &[&hs[0], &hs[1]],
        Attributes::new(),
    );
    let sqrt_d = net.scalar_f32(&format!("{n}.attn.sqrt_d"), (d as f32).sqrt());
    let w = net.op(
        &format!("{n}.attn.scaled"),
        "Div",
        &[&w, &sqrt_d],
        Attributes::new(),
    );
    let w = net.op(
        &format!("{n}.attn.masked"),
        "Where",
        &[causal, &w, masked_value],
        Attributes::new(),
    );
    let w = net.softmax(&format!("{n}.attn.probs"), &w);
    let ctx = net.op(
        &format!("{n}.attn.context"),
        "MatMul",
        &[&w, &hs[2]],
        Attributes::new(),
    );
    let ctx = net.transpose(&format!("{n}.attn.merge"), &ctx, &[0, 2, 1, 3]);
    let ctx = net.reshape(
        &format!("{n}.attn.merge_heads"),
        &ctx,
        &[1, s as i64, h as i64],
    )?;
    let o = conv1d(net, &format!("{n}.attn.c_proj"), &ctx, cfg, h, h, out_gain)?;
    let x = net.op(
        &format!("{n}.attn.residual"),
        "Add",
        &[&o, x],
        Attributes::new(),
    );

    let m = net.layer_norm(&format!("{n}.ln_2"), &x, h, EPS)?;
    let m = conv1d(net, &format!("{n}.mlp.c_fc"), &m, cfg, h, 4 * h, 1.0)?;
    let m = gelu_tanh(net, &format!("{n}.mlp.gelu"), &m);
    let m = conv1d(net, &format!("{n}.mlp.c_proj"), &m, cfg, 4 * h, h, out_gain)?;
    Ok(net.op(
        &format!("{n}.mlp.residual"),
        "Add",
        &[&x, &m],
        Attributes::new(),
    ))
}

/// GPT-2's `gelu_new`: `0.5 · x · (1 + tanh(√(2/π) · (x + 0.044715 · x³)))`.
fn gelu_tanh(net: &mut Net, n: &str, x: &str) -> String {
    let three = net.scalar_f32(&format!("{n}.three"), 3.0);
    let c = net.scalar_f32(&format!("{n}.c"), 0.044715);
    let k = net.scalar_f32(&format!("{n}.k"), (2.0 / std::f32::consts::PI).sqrt());
    let one = net.scalar_f32(&format!("{n}.one"), 1.0);
    let half = net.scalar_f32(&format!("{n}.half"), 0.5);
    let cube = net.op(&format!("{n}.pow"), "Pow", &[x, &three], Attributes::new());
    let t = net.op(
        &format!("{n}.mul_c"),
        "Mul",
        &[&cube, &c],
        Attributes::new(),
    );
    let t = net.op(&format!("{n}.add_x"), "Add", &[x, &t], Attributes::new());
    let t = net.op(&format!("{n}.mul_k"), "Mul", &[&t, &k], Attributes::new());
    let t = net.op(&format!("{n}.tanh"), "Tanh", &[&t], Attributes::new());
    let t = net.op(&format!("{n}.add_1"), "Add", &[&t, &one], Attributes::new());
    let t = net.op(&format!("{n}.mul_x"), "Mul", &[x, &t], Attributes::new());
    net.op(n, "Mul", &[&t, &half], Attributes::new())
}
