//! Recurrent layers: RNN, GRU and LSTM (opset 7+, `layout` from 14).
//!
//! Inputs: `X [seq, batch, input]` (`layout = 1`: `[batch, seq, input]`), `W [dirs, G·hidden,
//! input]`, `R [dirs, G·hidden, hidden]`, optional `B [dirs, 2·G·hidden]` (input then recurrent
//! biases), `sequence_lens [batch]`, `initial_h [dirs, batch, hidden]` (layout 1: `[batch,
//! dirs, hidden]`), and for LSTM `initial_c` and peepholes `P [dirs, 3·hidden]` (`i, o, f`).
//! `G` is 1 (RNN), 3 (GRU, gates `z, r, h`) or 4 (LSTM, gates `i, o, f, c`). Per step, with
//! `clip` (if set) bounding every gate pre-activation to `[-clip, clip]`:
//! - RNN: `H = f(X·Wᵀ + H₋·Rᵀ + Wb + Rb)`;
//! - GRU: `z = f(X·Wzᵀ + H₋·Rzᵀ + Wbz + Rbz)`, `r` likewise, `h = g(X·Whᵀ + (r⊙H₋)·Rhᵀ + Rbh +
//!   Wbh)`, or with `linear_before_reset` `h = g(X·Whᵀ + r⊙(H₋·Rhᵀ + Rbh) + Wbh)`;
//!   `H = (1 - z)⊙h + z⊙H₋`;
//! - LSTM: `i = f(X·Wiᵀ + H₋·Riᵀ + Pi⊙C₋ + Wbi + Rbi)`, `f = f(... + Pf⊙C₋ ...)` (or
//!   `1 - i` with `input_forget`), `c = g(X·Wcᵀ + H₋·Rcᵀ + Wbc + Rbc)`, `C = f⊙C₋ + i⊙c`,
//!   `o = f(X·Woᵀ + H₋·Roᵀ + Po⊙C + Wbo + Rbo)`, `H = o⊙h(C)`.
//!
//! Activations default to Tanh (RNN), Sigmoid/Tanh (GRU), Sigmoid/Tanh/Tanh (LSTM), listed per
//! direction; `activation_alpha`/`activation_beta` are consumed in order by the activations
//! that take them. A `reverse` direction runs from the last valid step to the first. Steps at
//! or past a batch entry's `sequence_lens` leave its state unchanged and output zeros.
//! Outputs: `Y [seq, dirs, batch, hidden]` (layout 1: `[batch, seq, dirs, hidden]`), `Y_h`
//! (and LSTM `Y_c`) the last valid state, shaped like `initial_h`. Computed in f64.

use crate::dtype::DType;
use crate::graph::Node;
use crate::kernels::values::float_tensor;
use crate::operator::{arg, infer_arg, opt_arg, InferInput, OpContext, OpError, Operator};
use crate::ops::common::{check_dtype, float};
use crate::registry::{Registry, LATEST_OPSET};
use crate::shape::{Dim, TensorType};
use crate::tensor::Tensor;

/// The cell of a recurrent layer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Cell {
    Rnn,
    Gru { linear_before_reset: bool },
    Lstm { input_forget: bool },
}

impl Cell {
    /// How many gates the weights stack: 1 (RNN), 3 (GRU), 4 (LSTM).
    pub(crate) fn gates(self) -> usize {
        match self {
            Cell::Rnn => 1,
            Cell::Gru { .. } => 3,
            Cell::Lstm { .. } => 4,
        }
    }

    fn default_activations(self) -> &'static [&'static str] {
        match self {
            Cell::Rnn => &["Tanh"],
            Cell::Gru { .. } => &["Sigmoid", "Tanh"],
            Cell::Lstm { .. } => &["Sigmoid", "Tanh", "Tanh"],
        }
    }
}

/// An activation function with its parameters.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) enum Act {
    Relu,
    Tanh,
    Sigmoid,
    Affine(f64, f64),
    LeakyRelu(f64),
    ThresholdedRelu(f64),
    ScaledTanh(f64, f64),
    HardSigmoid(f64, f64),
    Elu(f64),
    Softsign,
    Softplus,
}

impl Act {
    fn apply(self, x: f64) -> f64 {
        match self {
            Act::Relu => x.max(0.0),
            Act::Tanh => x.tanh(),
            Act::Sigmoid => 1.0 / (1.0 + (-x).exp()),
            Act::Affine(a, b) => a * x + b,
            Act::LeakyRelu(a) => {
                if x < 0.0 {
                    a * x
                } else {
                    x
                }
            }
            Act::ThresholdedRelu(a) => {
                if x > a {
                    x
                } else {
                    0.0
                }
            }
            Act::ScaledTanh(a, b) => a * (b * x).tanh(),
            Act::HardSigmoid(a, b) => (a * x + b).clamp(0.0, 1.0),
            Act::Elu(a) => {
                if x < 0.0 {
                    a * (x.exp() - 1.0)
                } else {
                    x
                }
            }
            Act::Softsign => x / (1.0 + x.abs()),
            Act::Softplus => x.exp().ln_1p(),
        }
    }
}

/// Builds the activation list from names and the alpha/beta lists (consumed in order by the
/// functions that take them; ONNX operator defaults otherwise).
fn activations(names: &[String], alphas: &[f32], betas: &[f32]) -> Result<Vec<Act>, OpError> {
    let (mut ai, mut bi) = (alphas.iter(), betas.iter());
    let mut alpha = |d: f64| ai.next().map_or(d, |&v| v as f64);
    let mut out = Vec::with_capacity(names.len());
    for name in names {
        let act = match name.to_ascii_lowercase().as_str() {
            "relu" => Act::Relu,
            "tanh" => Act::Tanh,
            "sigmoid" => Act::Sigmoid,
            "affine" => {
                let a = alpha(1.0);
                Act::Affine(a, bi.next().map_or(0.0, |&v| v as f64))
            }
            "leakyrelu" => Act::LeakyRelu(alpha(0.01)),
            "thresholdedrelu" => Act::ThresholdedRelu(alpha(1.0)),
            "scaledtanh" => {
                let a = alpha(1.0);
                Act::ScaledTanh(a, bi.next().map_or(1.0, |&v| v as f64))
            }
            "hardsigmoid" => {
                let a = alpha(0.2);
                Act::HardSigmoid(a, bi.next().map_or(0.5, |&v| v as f64))
            }
            "elu" => Act::Elu(alpha(1.0)),
            "softsign" => Act::Softsign,
            "softplus" => Act::Softplus,
            other => {
                return Err(OpError::attr(
                    "activations",
                    format!("unknown activation `{other}`"),
                ))
            }
        };
        out.push(act);
    }
    Ok(out)
}

/// A recurrent layer's attributes, checked.
#[derive(Debug)]
pub(crate) struct Recurrent {
    pub(crate) cell: Cell,
    pub(crate) hidden: Option<usize>,
    pub(crate) dirs: usize,
    /// `direction = reverse`: the one direction runs backwards.
    pub(crate) reverse_only: bool,
    /// Per direction, the cell's activations (1, 2 or 3).
    pub(crate) acts: Vec<Vec<Act>>,
    pub(crate) clip: Option<f64>,
    /// `layout = 1`: `X` and `Y` batch first.
    pub(crate) batch_major: bool,
}

/// The attributes of an `RNN`, `GRU` or `LSTM` node of the default domain, checked as its
/// constructor checks them; `None` for any other node or invalid attributes.
pub(crate) fn recurrent_of(node: &Node) -> Option<Recurrent> {
    if !node.domain.is_empty() {
        return None;
    }
    let c = OpContext {
        domain: &node.domain,
        op_type: &node.op_type,
        opset: node.opset,
        attrs: &node.attrs,
        num_inputs: node.inputs.len(),
        num_outputs: node.outputs.len(),
    };
    let cell = match node.op_type.as_str() {
        "RNN" => Cell::Rnn,
        "GRU" => Cell::Gru {
            linear_before_reset: flag(&c, "linear_before_reset").ok()?,
        },
        "LSTM" => Cell::Lstm {
            input_forget: flag(&c, "input_forget").ok()?,
        },
        _ => return None,
    };
    parse(&c, cell, node.opset >= 14).ok()
}

fn build(c: &OpContext<'_>, cell: Cell, with_layout: bool) -> Result<Box<dyn Operator>, OpError> {
    Ok(Box::new(parse(c, cell, with_layout)?))
}

fn parse(c: &OpContext<'_>, cell: Cell, with_layout: bool) -> Result<Recurrent, OpError> {
    let (dirs, reverse_only) = match c.attrs.string_or("direction", "forward")?.as_str() {
        "forward" => (1, false),
        "reverse" => (1, true),
        "bidirectional" => (2, false),
        other => {
            return Err(OpError::attr(
                "direction",
                format!("must be forward, reverse or bidirectional, got `{other}`"),
            ))
        }
    };
    let per_dir = cell.default_activations().len();
    let names: Vec<String> = match c.attrs.strings("activations")? {
        Some(n) => n.clone(),
        None => (0..dirs)
            .flat_map(|_| cell.default_activations().iter().map(|s| s.to_string()))
            .collect(),
    };
    if names.len() != per_dir * dirs {
        return Err(OpError::attr(
            "activations",
            format!(
                "needs {} functions ({per_dir} per direction), got {}",
                per_dir * dirs,
                names.len()
            ),
        ));
    }
    let empty = Vec::new();
    let acts = activations(
        &names,
        c.attrs.floats("activation_alpha")?.unwrap_or(&empty),
        c.attrs.floats("activation_beta")?.unwrap_or(&empty),
    )?;
    let hidden = match c.attrs.int("hidden_size")? {
        None => None,
        Some(&h) if h > 0 => Some(h as usize),
        Some(&h) => return Err(OpError::attr("hidden_size", format!("must be positive, got {h}"))),
    };
    let clip = match c.attrs.float("clip")? {
        None => None,
        Some(&v) if v > 0.0 => Some(v as f64),
        Some(&v) => return Err(OpError::attr("clip", format!("must be positive, got {v}"))),
    };
    let batch_major = match (with_layout, c.attrs.int_or("layout", 0)?) {
        (_, 0) => false,
        (true, 1) => true,
        (_, v) => return Err(OpError::attr("layout", format!("invalid value {v}"))),
    };
    Ok(Recurrent {
        cell,
        hidden,
        dirs,
        reverse_only,
        acts: acts.chunks(per_dir).map(<[Act]>::to_vec).collect(),
        clip,
        batch_major,
    })
}

fn flag(c: &OpContext<'_>, name: &str) -> Result<bool, OpError> {
    match c.attrs.int_or(name, 0)? {
        0 => Ok(false),
        1 => Ok(true),
        v => Err(OpError::attr(name, format!("must be 0 or 1, got {v}"))),
    }
}

/// Registers RNN, GRU and LSTM.
pub fn register(r: &mut Registry) {
    for (range, layout) in [(7..=13, false), (14..=LATEST_OPSET, true)] {
        r.register("", "RNN", range.clone(), move |c| build(c, Cell::Rnn, layout));
        r.register("", "GRU", range.clone(), move |c| {
            let cell = Cell::Gru {
                linear_before_reset: flag(c, "linear_before_reset")?,
            };
            build(c, cell, layout)
        });
        r.register("", "LSTM", range, move |c| {
            let cell = Cell::Lstm {
                input_forget: flag(c, "input_forget")?,
            };
            build(c, cell, layout)
        });
    }
}

/// `y[j] += Σ_k m[j, k]·v[k]` for a row-major `m` of `y.len()` rows.
fn matvec_add(y: &mut [f64], m: &[f64], v: &[f64]) {
    let cols = v.len();
    for (j, out) in y.iter_mut().enumerate() {
        *out += m[j * cols..(j + 1) * cols]
            .iter()
            .zip(v)
            .map(|(a, b)| a * b)
            .sum::<f64>();
    }
}

impl Recurrent {
    fn outputs(&self) -> usize {
        if matches!(self.cell, Cell::Lstm { .. }) {
            3
        } else {
            2
        }
    }

    fn clip(&self, x: f64) -> f64 {
        self.clip.map_or(x, |c| x.clamp(-c, c))
    }

    /// One step of direction `d` for one batch entry: updates `h` (and `c`).
    #[allow(clippy::too_many_arguments)]
    fn step(
        &self,
        d: usize,
        x: &[f64],
        w: &[f64],
        r: &[f64],
        b: &[f64],
        p: &[f64],
        h: &mut [f64],
        c: &mut [f64],
    ) {
        let hs = h.len();
        let g = self.cell.gates();
        let acts = &self.acts[d];
        // Input and recurrent contributions of every gate (with their biases).
        let mut xw: Vec<f64> = b[..g * hs].to_vec();
        matvec_add(&mut xw, w, x);
        let mut hr: Vec<f64> = b[g * hs..2 * g * hs].to_vec();
        match self.cell {
            Cell::Rnn => {
                matvec_add(&mut hr, r, h);
                for j in 0..hs {
                    h[j] = acts[0].apply(self.clip(xw[j] + hr[j]));
                }
            }
            Cell::Gru {
                linear_before_reset,
            } => {
                // z and r use the full recurrent product; h's depends on the mode.
                matvec_add(&mut hr[..2 * hs], &r[..2 * hs * hs], h);
                let z: Vec<f64> = (0..hs)
                    .map(|j| acts[0].apply(self.clip(xw[j] + hr[j])))
                    .collect();
                let rg: Vec<f64> = (0..hs)
                    .map(|j| acts[0].apply(self.clip(xw[hs + j] + hr[hs + j])))
                    .collect();
                let rh = &r[2 * hs * hs..];
                let cand: Vec<f64> = if linear_before_reset {
                    let mut lin = hr[2 * hs..].to_vec();
                    matvec_add(&mut lin, rh, h);
                    (0..hs)
                        .map(|j| acts[1].apply(self.clip(xw[2 * hs + j] + rg[j] * lin[j])))
                        .collect()
                } else {
                    let gated: Vec<f64> = (0..hs).map(|j| rg[j] * h[j]).collect();
                    let mut lin = hr[2 * hs..].to_vec();
                    matvec_add(&mut lin, rh, &gated);
                    (0..hs)
                        .map(|j| acts[1].apply(self.clip(xw[2 * hs + j] + lin[j])))
                        .collect()
                };
                for j in 0..hs {
                    h[j] = (1.0 - z[j]) * cand[j] + z[j] * h[j];
                }
            }
            Cell::Lstm { input_forget } => {
                matvec_add(&mut hr, r, h);
                let pre = |k: usize, j: usize| xw[k * hs + j] + hr[k * hs + j];
                for j in 0..hs {
                    let i = acts[0].apply(self.clip(pre(0, j) + p[j] * c[j]));
                    let f = if input_forget {
                        1.0 - i
                    } else {
                        acts[0].apply(self.clip(pre(2, j) + p[2 * hs + j] * c[j]))
                    };
                    let cand = acts[1].apply(self.clip(pre(3, j)));
                    let cn = f * c[j] + i * cand;
                    let o = acts[0].apply(self.clip(pre(1, j) + p[hs + j] * cn));
                    c[j] = cn;
                    h[j] = o * acts[2].apply(cn);
                }
            }
        }
    }
}

impl Operator for Recurrent {
    fn infer(&self, inputs: &[Option<InferInput<'_>>]) -> Result<Vec<TensorType>, OpError> {
        let x = infer_arg(inputs, 0)?;
        let w = infer_arg(inputs, 1)?;
        let r = infer_arg(inputs, 2)?;
        check_dtype(0, x.ty.dtype, float)?;
        for (i, t) in [(1, &w), (2, &r)] {
            if t.ty.dtype != x.ty.dtype {
                return Err(OpError::DType {
                    index: i,
                    dtype: t.ty.dtype,
                });
            }
        }
        let hidden = match (self.hidden, r.ty.shape.as_deref()) {
            (Some(h), _) => Dim::Fixed(h),
            (None, Some([_, _, h])) => h.clone(),
            _ => Dim::Unknown,
        };
        let (seq, batch) = match x.ty.shape.as_deref() {
            Some([a, b, _]) if self.batch_major => (b.clone(), a.clone()),
            Some([a, b, _]) => (a.clone(), b.clone()),
            Some(s) => {
                return Err(OpError::Shape(format!(
                    "X must have rank 3, got rank {}",
                    s.len()
                )))
            }
            None => (Dim::Unknown, Dim::Unknown),
        };
        let dirs = Dim::Fixed(self.dirs);
        let y = if self.batch_major {
            vec![batch.clone(), seq, dirs.clone(), hidden.clone()]
        } else {
            vec![seq, dirs.clone(), batch.clone(), hidden.clone()]
        };
        let state = if self.batch_major {
            vec![batch, dirs, hidden]
        } else {
            vec![dirs, batch, hidden]
        };
        let dtype = x.ty.dtype;
        let mut out = vec![TensorType {
            dtype,
            shape: Some(y),
        }];
        for _ in 1..self.outputs() {
            out.push(TensorType {
                dtype,
                shape: Some(state.clone()),
            });
        }
        Ok(out)
    }

    fn eval(&self, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>, OpError> {
        let x = arg(inputs, 0)?;
        let (w, r) = (arg(inputs, 1)?, arg(inputs, 2)?);
        check_dtype(0, x.dtype(), float)?;
        let &[a0, a1, input] = x.shape() else {
            return Err(OpError::Shape(format!("X must have rank 3, got {:?}", x.shape())));
        };
        let (seq, batch) = if self.batch_major { (a1, a0) } else { (a0, a1) };
        let g = self.cell.gates();
        let dirs = self.dirs;
        let hs = match (self.hidden, r.shape()) {
            (Some(h), _) => h,
            (None, &[_, _, h]) => h,
            _ => return Err(OpError::Shape(format!("R must have rank 3, got {:?}", r.shape()))),
        };
        let expect = |t: &Tensor, want: &[usize], what: &str| -> Result<Vec<f64>, OpError> {
            if t.shape() != want {
                return Err(OpError::Shape(format!(
                    "{what} has shape {:?}, expected {want:?}",
                    t.shape()
                )));
            }
            if t.dtype() != x.dtype() {
                return Err(OpError::Invalid(format!(
                    "{what} has dtype {}, X has {}",
                    t.dtype(),
                    x.dtype()
                )));
            }
            Ok(t.to_f64_vec())
        };
        let wv = expect(w, &[dirs, g * hs, input], "W")?;
        let rv = expect(r, &[dirs, g * hs, hs], "R")?;
        let bv = match opt_arg(inputs, 3) {
            Some(b) => expect(b, &[dirs, 2 * g * hs], "B")?,
            None => vec![0.0; dirs * 2 * g * hs],
        };
        let lens: Vec<usize> = match opt_arg(inputs, 4) {
            Some(l) => {
                if l.shape() != [batch] || !l.dtype().is_int() {
                    return Err(OpError::Shape(format!(
                        "sequence_lens must be an integer [{batch}], got {}{:?}",
                        l.dtype(),
                        l.shape()
                    )));
                }
                l.to_i64_vec()
                    .into_iter()
                    .map(|v| {
                        usize::try_from(v).ok().filter(|&v| v <= seq).ok_or_else(|| {
                            OpError::Invalid(format!("sequence length {v} is outside [0, {seq}]"))
                        })
                    })
                    .collect::<Result<_, _>>()?
            }
            None => vec![seq; batch],
        };
        let state_shape = if self.batch_major {
            [batch, dirs, hs]
        } else {
            [dirs, batch, hs]
        };
        // State element (d, b, j) in the layout of initial_h / Y_h.
        let state_at = |d: usize, b: usize, j: usize| -> usize {
            if self.batch_major {
                (b * dirs + d) * hs + j
            } else {
                (d * batch + b) * hs + j
            }
        };
        let init = |slot: usize, what: &str| -> Result<Option<Vec<f64>>, OpError> {
            opt_arg(inputs, slot)
                .map(|t| expect(t, &state_shape, what))
                .transpose()
        };
        let h0 = init(5, "initial_h")?;
        let is_lstm = matches!(self.cell, Cell::Lstm { .. });
        let c0 = if is_lstm { init(6, "initial_c")? } else { None };
        let pv = match (is_lstm, opt_arg(inputs, 7)) {
            (true, Some(p)) => expect(p, &[dirs, 3 * hs], "P")?,
            _ => vec![0.0; dirs * 3 * hs],
        };
        let xv = x.to_f64_vec();
        let x_at = |t: usize, b: usize| -> &[f64] {
            let row = if self.batch_major { b * seq + t } else { t * batch + b };
            &xv[row * input..(row + 1) * input]
        };
        let y_at = |t: usize, d: usize, b: usize| -> usize {
            if self.batch_major {
                ((b * seq + t) * dirs + d) * hs
            } else {
                ((t * dirs + d) * batch + b) * hs
            }
        };
        let mut y = vec![0.0f64; seq * dirs * batch * hs];
        let mut yh = vec![0.0f64; dirs * batch * hs];
        let mut yc = vec![0.0f64; dirs * batch * hs];
        for d in 0..dirs {
            let reverse = self.reverse_only || d == 1;
            let wd = &wv[d * g * hs * input..(d + 1) * g * hs * input];
            let rd = &rv[d * g * hs * hs..(d + 1) * g * hs * hs];
            let bd = &bv[d * 2 * g * hs..(d + 1) * 2 * g * hs];
            let pd = &pv[d * 3 * hs..(d + 1) * 3 * hs];
            for b in 0..batch {
                let load = |v: &Option<Vec<f64>>| -> Vec<f64> {
                    (0..hs)
                        .map(|j| v.as_ref().map_or(0.0, |v| v[state_at(d, b, j)]))
                        .collect()
                };
                let (mut h, mut c) = (load(&h0), load(&c0));
                let n = lens[b];
                for k in 0..n {
                    let t = if reverse { n - 1 - k } else { k };
                    self.step(d, x_at(t, b), wd, rd, bd, pd, &mut h, &mut c);
                    let o = y_at(t, d, b);
                    y[o..o + hs].copy_from_slice(&h);
                }
                for j in 0..hs {
                    yh[state_at(d, b, j)] = h[j];
                    yc[state_at(d, b, j)] = c[j];
                }
            }
        }
        let dt: DType = x.dtype();
        let y_shape = if self.batch_major {
            vec![batch, seq, dirs, hs]
        } else {
            vec![seq, dirs, batch, hs]
        };
        let mut out = vec![
            float_tensor(dt, y_shape, &y, 0)?,
            float_tensor(dt, state_shape.to_vec(), &yh, 0)?,
        ];
        if is_lstm {
            out.push(float_tensor(dt, state_shape.to_vec(), &yc, 0)?);
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use crate::attribute::Attribute;
    use crate::kernels::movement::testing::Rng;
    use crate::ops::common::build_op;
    use crate::tensor::Tensor;

    fn sig(x: f64) -> f64 {
        1.0 / (1.0 + (-x).exp())
    }

    /// A one-unit LSTM with scalar input, written out by hand.
    #[test]
    fn lstm_scalar_by_hand() {
        let op = build_op("", "LSTM", 14, &[("hidden_size", Attribute::Int(1))], 8, 3).unwrap();
        let xs = [0.5f32, -1.0, 2.0];
        let x = Tensor::new(vec![3, 1, 1], xs.to_vec()).unwrap();
        let wv = [0.3f32, -0.2, 0.7, 0.4]; // i, o, f, c
        let rv = [0.1f32, 0.5, -0.3, 0.2];
        let bv = [0.01f32, 0.02, 0.03, 0.04, -0.01, -0.02, -0.03, -0.04];
        let pv = [0.2f32, -0.1, 0.3]; // i, o, f
        let w = Tensor::new(vec![1, 4, 1], wv.to_vec()).unwrap();
        let r = Tensor::new(vec![1, 4, 1], rv.to_vec()).unwrap();
        let b = Tensor::new(vec![1, 8], bv.to_vec()).unwrap();
        let p = Tensor::new(vec![1, 3], pv.to_vec()).unwrap();
        let out = op
            .eval(&[Some(&x), Some(&w), Some(&r), Some(&b), None, None, None, Some(&p)])
            .unwrap();
        let (mut h, mut c) = (0.0f64, 0.0f64);
        let mut ys = vec![];
        for &xt in &xs {
            let pre = |k: usize| {
                wv[k] as f64 * xt as f64 + rv[k] as f64 * h + bv[k] as f64 + bv[4 + k] as f64
            };
            let i = sig(pre(0) + pv[0] as f64 * c);
            let f = sig(pre(2) + pv[2] as f64 * c);
            let cc = pre(3).tanh();
            c = f * c + i * cc;
            let o = sig(pre(1) + pv[1] as f64 * c);
            h = o * c.tanh();
            ys.push(h);
        }
        let got = out[0].to_f64_vec();
        for (a, b) in got.iter().zip(&ys) {
            assert!((a - b).abs() < 1e-6, "{got:?} vs {ys:?}");
        }
        assert!((out[1].to_f64_vec()[0] - h).abs() < 1e-6);
        assert!((out[2].to_f64_vec()[0] - c).abs() < 1e-6);
    }

    /// A bidirectional GRU equals two single-direction GRUs, the backward one run on the
    /// reversed sequence; sequence_lens cuts each batch entry and zeroes the tail of Y.
    #[test]
    fn bidirectional_gru_and_sequence_lens() {
        let mut rng = Rng::new(11);
        let (seq, batch, input, hs) = (4usize, 2usize, 3usize, 5usize);
        let x = rng.tensor(&[seq, batch, input]);
        let w = rng.tensor(&[2, 3 * hs, input]);
        let r = rng.tensor(&[2, 3 * hs, hs]);
        let b = rng.tensor(&[2, 6 * hs]);
        let lens = Tensor::new(vec![batch], vec![4i32, 2]).unwrap();
        let attrs = |dir: &str| {
            vec![
                ("hidden_size", Attribute::Int(hs as i64)),
                ("direction", Attribute::String(dir.into())),
                ("linear_before_reset", Attribute::Int(1)),
            ]
        };
        let bi = build_op("", "GRU", 14, &attrs("bidirectional"), 6, 2).unwrap();
        let out = bi
            .eval(&[Some(&x), Some(&w), Some(&r), Some(&b), Some(&lens)])
            .unwrap();
        assert_eq!(out[0].shape(), &[seq, 2, batch, hs]);
        let half = |t: &Tensor, d: usize| {
            let s = t.shape();
            let n: usize = s[1..].iter().product();
            Tensor::new(
                [&[1][..], &s[1..]].concat(),
                t.to_f64_vec()[d * n..(d + 1) * n]
                    .iter()
                    .map(|&v| v as f32)
                    .collect::<Vec<f32>>(),
            )
            .unwrap()
        };
        for (d, dir) in [(0, "forward"), (1, "reverse")] {
            let op = build_op("", "GRU", 14, &attrs(dir), 6, 2).unwrap();
            let one = op
                .eval(&[
                    Some(&x),
                    Some(&half(&w, d)),
                    Some(&half(&r, d)),
                    Some(&half(&b, d)),
                    Some(&lens),
                ])
                .unwrap();
            let y = out[0].to_f64_vec();
            let y1 = one[0].to_f64_vec();
            for t in 0..seq {
                for bb in 0..batch {
                    for j in 0..hs {
                        let a = y[((t * 2 + d) * batch + bb) * hs + j];
                        let e = y1[(t * batch + bb) * hs + j];
                        assert!((a - e).abs() < 1e-6);
                        if bb == 1 && t >= 2 {
                            assert_eq!(a, 0.0, "steps past sequence_lens output zeros");
                        }
                    }
                }
            }
            let yh = out[1].to_f64_vec();
            for (k, v) in one[1].to_f64_vec().iter().enumerate() {
                assert!((yh[d * batch * hs + k] - v).abs() < 1e-6);
            }
        }
        let bad = Tensor::new(vec![batch], vec![5i32, 1]).unwrap();
        assert!(bi
            .eval(&[Some(&x), Some(&w), Some(&r), Some(&b), Some(&bad)])
            .is_err());
    }

    #[test]
    fn rnn_layout_1_and_bad_attributes() {
        let mut rng = Rng::new(5);
        let (seq, batch, input, hs) = (3usize, 2usize, 4usize, 3usize);
        let x = rng.tensor(&[seq, batch, input]);
        let w = rng.tensor(&[1, hs, input]);
        let r = rng.tensor(&[1, hs, hs]);
        let op0 = build_op("", "RNN", 14, &[("hidden_size", Attribute::Int(3))], 3, 2).unwrap();
        let op1 = build_op(
            "",
            "RNN",
            14,
            &[("hidden_size", Attribute::Int(3)), ("layout", Attribute::Int(1))],
            3,
            2,
        )
        .unwrap();
        // Batch-major X: transpose of the sequence-major one.
        let xv = x.to_f64_vec();
        let xt: Vec<f32> = (0..batch)
            .flat_map(|b| {
                let xv = &xv;
                (0..seq).flat_map(move |t| {
                    (0..input).map(move |i| xv[(t * batch + b) * input + i] as f32)
                })
            })
            .collect();
        let xt = Tensor::new(vec![batch, seq, input], xt).unwrap();
        let a = op0.eval(&[Some(&x), Some(&w), Some(&r)]).unwrap();
        let b = op1.eval(&[Some(&xt), Some(&w), Some(&r)]).unwrap();
        assert_eq!(b[0].shape(), &[batch, seq, 1, hs]);
        assert_eq!(b[1].shape(), &[batch, 1, hs]);
        let (ya, yb) = (a[0].to_f64_vec(), b[0].to_f64_vec());
        for t in 0..seq {
            for bb in 0..batch {
                for j in 0..hs {
                    assert_eq!(ya[(t * batch + bb) * hs + j], yb[(bb * seq + t) * hs + j]);
                }
            }
        }
        assert!(build_op("", "RNN", 14, &[("direction", Attribute::String("up".into()))], 3, 2)
            .is_err());
        assert!(build_op(
            "",
            "LSTM",
            14,
            &[("activations", Attribute::Strings(vec!["Tanh".into()]))],
            3,
            3
        )
        .is_err());
    }
}
