//! Recurrent layers as their steps.
//!
//! ```text
//! LSTM / GRU / RNN(X, W, R, B?, sequence_lens?, initial_h?, initial_c?, P?)   (f32, static shapes)
//!   →  XW_d = MatMul(X, W_dᵀ) + biases            one product for every step of direction d
//!      per step t (backwards for a reverse direction):
//!        pre = XW_d[t] + MatMul(H, R_dᵀ)           the recurrence
//!        H, C = the cell's gates on pre, elementwise (Slice, Sigmoid, Tanh, Mul, Add, …)
//!      Y = Concat of every step's H; Y_h, Y_c = the last states
//! ```
//!
//! The operator's definition written with plain tensor operators (see `ops/rnn.rs` for the
//! equations): the input projections of all steps become one large matrix product, and each
//! step a small product plus one or two fused elementwise kernels, instead of one node that
//! runs on the host. Biases that add to the same pre-activation are summed once (all of
//! them, except a GRU's recurrent `h` bias under `linear_before_reset`, which the reset gate
//! multiplies). With `sequence_lens`, step `t` of batch entry `b` is valid when
//! `t < sequence_lens[b]`: an invalid step keeps the state and outputs zeros (`Where`), which
//! is also what a reverse direction needs, as its first valid step is each entry's last. A
//! runtime length above the sequence acts as the sequence's length, a negative one as zero
//! (the host operator refuses both).
//!
//! Weight preparation (the per-direction slices and transposes) is written as nodes too, so
//! that [`super::ConstantFolding`], which runs after this pass, turns it into constants when
//! the weights are initializers; a model that feeds its weights as inputs computes them.
//!
//! Left as one node: layers of other dtypes, symbolic shapes, more than
//! [`MAX_UNROLLED_STEPS`] steps (sequence length × directions), a constant `sequence_lens`
//! outside `[0, seq]` (the operator reports it), and zero-sized axes.

use crate::attribute::{Attribute, Attributes};
use crate::dtype::DType;
use crate::graph::{FusionHints, Graph, GraphError, NodeId, ValueId};
use crate::ops::rnn::{recurrent_of, Act, Cell, Recurrent};
use crate::passes::rewrite::Rewriter;
use crate::passes::GraphPass;
use crate::tensor::Tensor;

/// The most steps (sequence length × directions) a layer is unrolled to. Each step is a few
/// kernels (identical ones compile once), so this bounds the launch list, not compile work.
pub const MAX_UNROLLED_STEPS: usize = 4096;

/// Rewrites each `RNN`, `GRU` and `LSTM` node (default domain, f32, static shapes) into its
/// steps, see the module docs.
pub struct RecurrentAsSteps;

impl GraphPass for RecurrentAsSteps {
    fn name(&self) -> &'static str {
        "recurrent-as-steps"
    }

    fn run(&self, graph: Graph) -> Result<Graph, GraphError> {
        let mut rw = Rewriter::new(graph);
        for i in 0..rw.graph().nodes().len() {
            let Some(layer) = plan(&rw, NodeId(i)) else {
                continue;
            };
            rw.focus(NodeId(i));
            let replaced = Steps {
                rw: &mut rw,
                layer: &layer,
            }
            .emit()?;
            for (old, new) in replaced {
                rw.replace(old, new);
            }
            rw.remove_node(NodeId(i));
        }
        rw.finish()
    }
}

/// One applicable node: its attributes, inputs and sizes.
struct Layer {
    spec: Recurrent,
    x: ValueId,
    w: ValueId,
    r: ValueId,
    b: Option<ValueId>,
    /// `sequence_lens`, unless it is a constant equal to the sequence length everywhere.
    lens: Option<(ValueId, DType)>,
    h0: Option<ValueId>,
    c0: Option<ValueId>,
    p: Option<ValueId>,
    seq: usize,
    batch: usize,
    input: usize,
    hidden: usize,
    /// The node's outputs: `Y`, `Y_h`, and for LSTM `Y_c`.
    outputs: Vec<Option<ValueId>>,
}

fn plan(rw: &Rewriter, n: NodeId) -> Option<Layer> {
    let g = rw.graph();
    let node = &g.nodes()[n.0];
    let spec = recurrent_of(node)?;
    let input = |k: usize| node.inputs.get(k).copied().flatten();
    let f32_shape = |v: ValueId| {
        let ty = &g.value(v).ty;
        (ty.dtype == DType::F32).then(|| ty.fixed_shape()).flatten()
    };
    let (x, w, r) = (input(0)?, input(1)?, input(2)?);
    let &[a0, a1, width] = f32_shape(x)?.as_slice() else {
        return None;
    };
    let (seq, batch) = if spec.batch_major { (a1, a0) } else { (a0, a1) };
    let dirs = spec.dirs;
    let rs = f32_shape(r)?;
    let hidden = spec.hidden.or(rs.get(2).copied())?;
    let gh = spec.cell.gates() * hidden;
    if seq == 0
        || batch == 0
        || width == 0
        || seq.checked_mul(dirs)? > MAX_UNROLLED_STEPS
        || f32_shape(w)? != [dirs, gh, width]
        || rs != [dirs, gh, hidden]
    {
        return None;
    }
    let state = if spec.batch_major {
        [batch, dirs, hidden]
    } else {
        [dirs, batch, hidden]
    };
    let optional = |k: usize, shape: &[usize]| -> Option<Option<ValueId>> {
        match input(k) {
            None => Some(None),
            Some(v) => (f32_shape(v)? == shape).then_some(Some(v)),
        }
    };
    let b = optional(3, &[dirs, 2 * gh])?;
    let h0 = optional(5, &state)?;
    let is_lstm = matches!(spec.cell, Cell::Lstm { .. });
    let (c0, p) = if is_lstm {
        (optional(6, &state)?, optional(7, &[dirs, 3 * hidden])?)
    } else {
        (None, None)
    };
    let lens = match input(4) {
        None => None,
        Some(l) => {
            let ty = &g.value(l).ty;
            if !ty.dtype.is_int() || ty.fixed_shape()? != [batch] {
                return None;
            }
            match rw.constant(l) {
                Some(t) => {
                    let values = t.to_i64_vec();
                    if values.iter().any(|&v| v < 0 || v as usize > seq) {
                        return None;
                    }
                    (!values.iter().all(|&v| v as usize == seq)).then_some((l, ty.dtype))
                }
                None => Some((l, ty.dtype)),
            }
        }
    };
    Some(Layer {
        spec,
        x,
        w,
        r,
        b,
        lens,
        h0,
        c0,
        p,
        seq,
        batch,
        input: width,
        hidden,
        outputs: node.outputs.clone(),
    })
}

/// The weights of one direction, as values of the rewritten graph.
struct Direction {
    acts: Vec<Act>,
    /// The input projection of every step, with the biases that add to it:
    /// `[seq, batch, G·hidden]` (batch first under `layout = 1`).
    xw: ValueId,
    /// `R_dᵀ`, `[hidden, G·hidden]`; for a GRU without `linear_before_reset`, the `z, r`
    /// columns only, the `h` columns in `rt_h`.
    rt: ValueId,
    rt_h: Option<ValueId>,
    /// A GRU's recurrent `h` bias under `linear_before_reset`.
    rb_h: Option<ValueId>,
    /// LSTM peepholes `i, o, f`, each `[hidden]`.
    peep: Option<[ValueId; 3]>,
}

/// The recurrent state of one direction between steps.
#[derive(Clone, Copy)]
struct State {
    h: Option<ValueId>,
    c: Option<ValueId>,
}

struct Steps<'a> {
    rw: &'a mut Rewriter,
    layer: &'a Layer,
}

impl Steps<'_> {
    /// Adds the steps of every direction; returns each used output of the node with the value
    /// that replaces it.
    fn emit(mut self) -> Result<Vec<(ValueId, ValueId)>, GraphError> {
        let l = self.layer;
        let (dirs, batch, hidden) = (l.spec.dirs, l.batch, l.hidden);
        let mut ys = Vec::with_capacity(dirs);
        let mut finals = Vec::with_capacity(dirs);
        for d in 0..dirs {
            let dir = self.direction(d)?;
            let reverse = l.spec.reverse_only || d == 1;
            let mut state = State {
                h: l.h0.map(|v| self.state_of(v, d)).transpose()?,
                c: l.c0.map(|v| self.state_of(v, d)).transpose()?,
            };
            let mut outputs = vec![None; l.seq];
            for k in 0..l.seq {
                let t = if reverse { l.seq - 1 - k } else { k };
                let (y, next) = self.step(&dir, t, state)?;
                // Stored by its step's kernel, so that `Y` is a concatenation of stored
                // values, which runs in place.
                self.rw.set_hints(
                    y,
                    FusionHints {
                        materialize: true,
                        ..FusionHints::default()
                    },
                )?;
                outputs[t] = Some(self.reshape(y, &[1, 1, batch, hidden])?);
                state = next;
            }
            ys.push(outputs);
            finals.push(state);
        }
        let mut replaced = Vec::new();
        if let Some(Some(y)) = l.outputs.first() {
            // One concatenation along the first axis, in `[seq, dirs]` order, which the
            // memory plan runs in place: every step's output is computed into `Y`.
            let parts: Vec<ValueId> = (0..l.seq)
                .flat_map(|t| ys.iter().filter_map(move |y| y[t]))
                .collect();
            let all = self.concat(&parts, 0)?;
            let mut all = self.reshape(all, &[l.seq, dirs, batch, hidden])?;
            if l.spec.batch_major {
                all = self.transpose(all, &[2, 0, 1, 3])?;
            }
            replaced.push((*y, all));
        }
        for slot in [1, 2] {
            let Some(Some(out)) = l.outputs.get(slot) else {
                continue;
            };
            let mut parts = Vec::with_capacity(dirs);
            for state in &finals {
                let v = match if slot == 1 { state.h } else { state.c } {
                    Some(v) => v,
                    None => self.zeros(&[batch, hidden]),
                };
                parts.push(self.reshape(v, &[1, batch, hidden])?);
            }
            let mut v = self.concat(&parts, 0)?;
            if l.spec.batch_major {
                v = self.transpose(v, &[1, 0, 2])?;
            }
            replaced.push((*out, v));
        }
        Ok(replaced)
    }

    /// The weights of direction `d`.
    fn direction(&mut self, d: usize) -> Result<Direction, GraphError> {
        let l = self.layer;
        let (h, input) = (l.hidden, l.input);
        let gh = l.spec.cell.gates() * h;
        let lbr = matches!(
            l.spec.cell,
            Cell::Gru {
                linear_before_reset: true
            }
        );
        let w = self.of_direction(l.w, d, &[gh, input])?;
        let wt = self.transpose(w, &[1, 0])?;
        let r = self.of_direction(l.r, d, &[gh, h])?;
        let mut rt = self.transpose(r, &[1, 0])?;
        let mut xw = self.op("MatMul", &[l.x, wt])?;
        let mut rb_h = None;
        if let Some(b) = l.b {
            let bd = self.of_direction(b, d, &[2 * gh])?;
            let wb = self.slice(bd, 0, 0, gh)?;
            let mut rb = self.slice(bd, 0, gh, 2 * gh)?;
            if lbr {
                rb_h = Some(self.slice(rb, 0, 2 * h, 3 * h)?);
                let keep: Vec<f32> = (0..gh).map(|j| f32::from(j < 2 * h)).collect();
                let keep = self.constant(&[gh], keep);
                rb = self.op("Mul", &[rb, keep])?;
            }
            let bias = self.op("Add", &[wb, rb])?;
            xw = self.op("Add", &[xw, bias])?;
        }
        let mut rt_h = None;
        if matches!(
            l.spec.cell,
            Cell::Gru {
                linear_before_reset: false
            }
        ) {
            rt_h = Some(self.slice(rt, 1, 2 * h, 3 * h)?);
            rt = self.slice(rt, 1, 0, 2 * h)?;
        }
        let peep = match l.p {
            None => None,
            Some(p) => {
                let pd = self.of_direction(p, d, &[3 * h])?;
                Some([
                    self.slice(pd, 0, 0, h)?,
                    self.slice(pd, 0, h, 2 * h)?,
                    self.slice(pd, 0, 2 * h, 3 * h)?,
                ])
            }
        };
        Ok(Direction {
            acts: l.spec.acts[d].clone(),
            xw,
            rt,
            rt_h,
            rb_h,
            peep,
        })
    }

    /// Step `t` of `dir` from `state`: the step's output and the next state.
    fn step(
        &mut self,
        dir: &Direction,
        t: usize,
        state: State,
    ) -> Result<(ValueId, State), GraphError> {
        let l = self.layer;
        let gh = l.spec.cell.gates() * l.hidden;
        let seq_axis = usize::from(l.spec.batch_major);
        let xt = self.slice(dir.xw, seq_axis, t, t + 1)?;
        let xt = self.reshape(xt, &[l.batch, gh])?;
        let (h, c) = match l.spec.cell {
            Cell::Rnn => {
                let pre = self.plus_product(xt, state.h, dir.rt)?;
                (self.activate(pre, dir.acts[0])?, None)
            }
            Cell::Lstm { input_forget } => {
                let (h, c) = self.lstm(dir, xt, state, input_forget)?;
                (h, Some(c))
            }
            Cell::Gru {
                linear_before_reset,
            } => (self.gru(dir, xt, state.h, linear_before_reset)?, None),
        };
        let Some((lens, dtype)) = l.lens else {
            return Ok((h, State { h: Some(h), c }));
        };
        let now = self.rw.add_constant("rnn_step", Tensor::scalar(t as i64));
        let now = if dtype == DType::I64 {
            now
        } else {
            self.rw.add_cast(now, dtype)?
        };
        let valid = self.op("Less", &[now, lens])?;
        let valid = self.reshape(valid, &[l.batch, 1])?;
        let zero = self.scalar(0.0);
        let y = self.op("Where", &[valid, h, zero])?;
        let keep = |prev: Option<ValueId>| prev.unwrap_or(zero);
        let h = self.op("Where", &[valid, h, keep(state.h)])?;
        let c = match c {
            Some(c) => Some(self.op("Where", &[valid, c, keep(state.c)])?),
            None => None,
        };
        Ok((y, State { h: Some(h), c }))
    }

    /// One LSTM step: the new hidden and cell states.
    fn lstm(
        &mut self,
        dir: &Direction,
        xt: ValueId,
        state: State,
        input_forget: bool,
    ) -> Result<(ValueId, ValueId), GraphError> {
        let [fa, ga, ha] = [dir.acts[0], dir.acts[1], dir.acts[2]];
        let pre = self.plus_product(xt, state.h, dir.rt)?;
        let peep = |k: usize| dir.peep.map(|p| p[k]);
        let mut gate_i = self.gate(pre, 0)?;
        if let (Some(p), Some(c)) = (peep(0), state.c) {
            let pc = self.op("Mul", &[p, c])?;
            gate_i = self.op("Add", &[gate_i, pc])?;
        }
        let i = self.activate(gate_i, fa)?;
        let cand = self.gate(pre, 3)?;
        let cand = self.activate(cand, ga)?;
        let mut c = self.op("Mul", &[i, cand])?;
        if let Some(c_prev) = state.c {
            let f = if input_forget {
                let one = self.scalar(1.0);
                self.op("Sub", &[one, i])?
            } else {
                let mut gate_f = self.gate(pre, 2)?;
                if let Some(p) = peep(2) {
                    let pc = self.op("Mul", &[p, c_prev])?;
                    gate_f = self.op("Add", &[gate_f, pc])?;
                }
                self.activate(gate_f, fa)?
            };
            let kept = self.op("Mul", &[f, c_prev])?;
            c = self.op("Add", &[kept, c])?;
        }
        let mut gate_o = self.gate(pre, 1)?;
        if let Some(p) = peep(1) {
            let pc = self.op("Mul", &[p, c])?;
            gate_o = self.op("Add", &[gate_o, pc])?;
        }
        let o = self.activate(gate_o, fa)?;
        let hc = self.act(c, ha)?;
        Ok((self.op("Mul", &[o, hc])?, c))
    }

    /// One GRU step: the new hidden state.
    fn gru(
        &mut self,
        dir: &Direction,
        xt: ValueId,
        h: Option<ValueId>,
        linear_before_reset: bool,
    ) -> Result<ValueId, GraphError> {
        let (fa, ga) = (dir.acts[0], dir.acts[1]);
        let hr = h.map(|h| self.op("MatMul", &[h, dir.rt])).transpose()?;
        let mut gates = [None, None];
        for (k, gate) in gates.iter_mut().enumerate() {
            let mut pre = self.gate(xt, k)?;
            if let Some(hr) = hr {
                let part = self.gate(hr, k)?;
                pre = self.op("Add", &[pre, part])?;
            }
            *gate = Some(self.activate(pre, fa)?);
        }
        let [Some(z), Some(reset)] = gates else {
            unreachable!("both gates are set by the loop above")
        };
        let mut cand = self.gate(xt, 2)?;
        if linear_before_reset {
            let lin = match (hr, dir.rb_h) {
                (Some(hr), rb) => {
                    let part = self.gate(hr, 2)?;
                    match rb {
                        Some(rb) => Some(self.op("Add", &[part, rb])?),
                        None => Some(part),
                    }
                }
                (None, rb) => rb,
            };
            if let Some(lin) = lin {
                let gated = self.op("Mul", &[reset, lin])?;
                cand = self.op("Add", &[cand, gated])?;
            }
        } else if let (Some(h), Some(rt_h)) = (h, dir.rt_h) {
            let gated = self.op("Mul", &[reset, h])?;
            let lin = self.op("MatMul", &[gated, rt_h])?;
            cand = self.op("Add", &[cand, lin])?;
        }
        let n = self.activate(cand, ga)?;
        // (1 - z)·n + z·h = n + z·(h - n)
        match h {
            Some(h) => {
                let diff = self.op("Sub", &[h, n])?;
                let kept = self.op("Mul", &[z, diff])?;
                self.op("Add", &[n, kept])
            }
            None => {
                let one = self.scalar(1.0);
                let keep = self.op("Sub", &[one, z])?;
                self.op("Mul", &[keep, n])
            }
        }
    }

    /// `x + h·rt`, or `x` without a state.
    fn plus_product(
        &mut self,
        x: ValueId,
        h: Option<ValueId>,
        rt: ValueId,
    ) -> Result<ValueId, GraphError> {
        match h {
            Some(h) => {
                let hr = self.op("MatMul", &[h, rt])?;
                self.op("Add", &[x, hr])
            }
            None => Ok(x),
        }
    }

    /// Gate `k` (`[batch, hidden]`) of a `[batch, G·hidden]` pre-activation.
    fn gate(&mut self, pre: ValueId, k: usize) -> Result<ValueId, GraphError> {
        let h = self.layer.hidden;
        self.slice(pre, 1, k * h, (k + 1) * h)
    }

    /// `act(clip(x))`.
    fn activate(&mut self, x: ValueId, act: Act) -> Result<ValueId, GraphError> {
        let x = match self.layer.spec.clip {
            Some(c) => {
                let (lo, hi) = (self.scalar(-c as f32), self.scalar(c as f32));
                self.op("Clip", &[x, lo, hi])?
            }
            None => x,
        };
        self.act(x, act)
    }

    /// `act(x)` as operators.
    fn act(&mut self, x: ValueId, act: Act) -> Result<ValueId, GraphError> {
        let alpha = |a: f64| {
            let mut attrs = Attributes::new();
            attrs.insert("alpha", Attribute::Float(a as f32));
            attrs
        };
        match act {
            Act::Relu => self.op("Relu", &[x]),
            Act::Tanh => self.op("Tanh", &[x]),
            Act::Sigmoid => self.op("Sigmoid", &[x]),
            Act::Softsign => self.op("Softsign", &[x]),
            Act::Softplus => self.op("Softplus", &[x]),
            Act::LeakyRelu(a) => self.rw.add_op("LeakyRelu", alpha(a), &[x]),
            Act::ThresholdedRelu(a) => self.rw.add_op("ThresholdedRelu", alpha(a), &[x]),
            Act::Elu(a) => self.rw.add_op("Elu", alpha(a), &[x]),
            Act::HardSigmoid(a, b) => {
                let mut attrs = alpha(a);
                attrs.insert("beta", Attribute::Float(b as f32));
                self.rw.add_op("HardSigmoid", attrs, &[x])
            }
            Act::Affine(a, b) => {
                let (a, b) = (self.scalar(a as f32), self.scalar(b as f32));
                let ax = self.op("Mul", &[x, a])?;
                self.op("Add", &[ax, b])
            }
            Act::ScaledTanh(a, b) => {
                let (a, b) = (self.scalar(a as f32), self.scalar(b as f32));
                let bx = self.op("Mul", &[x, b])?;
                let t = self.op("Tanh", &[bx])?;
                self.op("Mul", &[t, a])
            }
        }
    }

    /// Direction `d` of a `[dirs, …]` weight, reshaped to `shape`.
    fn of_direction(
        &mut self,
        v: ValueId,
        d: usize,
        shape: &[usize],
    ) -> Result<ValueId, GraphError> {
        let part = self.slice(v, 0, d, d + 1)?;
        self.reshape(part, shape)
    }

    /// Direction `d` of an initial state (`[dirs, batch, hidden]`, batch first under
    /// `layout = 1`) as `[batch, hidden]`.
    fn state_of(&mut self, v: ValueId, d: usize) -> Result<ValueId, GraphError> {
        let axis = usize::from(self.layer.spec.batch_major);
        let part = self.slice(v, axis, d, d + 1)?;
        self.reshape(part, &[self.layer.batch, self.layer.hidden])
    }

    fn op(&mut self, op_type: &str, inputs: &[ValueId]) -> Result<ValueId, GraphError> {
        self.rw.add_op(op_type, Attributes::new(), inputs)
    }

    fn slice(
        &mut self,
        v: ValueId,
        axis: usize,
        start: usize,
        end: usize,
    ) -> Result<ValueId, GraphError> {
        let one = |rw: &mut Rewriter, hint: &str, value: usize| {
            let tensor = Tensor::new(vec![1], vec![value as i64])
                .expect("one element matches the shape [1]");
            rw.add_constant(hint, tensor)
        };
        let starts = one(self.rw, "rnn_start", start);
        let ends = one(self.rw, "rnn_end", end);
        let axes = one(self.rw, "rnn_axis", axis);
        self.op("Slice", &[v, starts, ends, axes])
    }

    fn reshape(&mut self, v: ValueId, shape: &[usize]) -> Result<ValueId, GraphError> {
        let shape = self.rw.add_shape(shape);
        self.op("Reshape", &[v, shape])
    }

    fn transpose(&mut self, v: ValueId, perm: &[i64]) -> Result<ValueId, GraphError> {
        let mut attrs = Attributes::new();
        attrs.insert("perm", Attribute::Ints(perm.to_vec()));
        self.rw.add_op("Transpose", attrs, &[v])
    }

    /// `parts` concatenated on `axis` (the one part itself when there is one).
    fn concat(&mut self, parts: &[ValueId], axis: i64) -> Result<ValueId, GraphError> {
        if let [one] = parts {
            return Ok(*one);
        }
        let mut attrs = Attributes::new();
        attrs.insert("axis", Attribute::Int(axis));
        self.rw.add_op("Concat", attrs, parts)
    }

    fn scalar(&mut self, v: f32) -> ValueId {
        self.rw.add_constant("rnn_scalar", Tensor::scalar(v))
    }

    /// A constant of `shape`; `values` must hold as many elements as the shape.
    fn constant(&mut self, shape: &[usize], values: Vec<f32>) -> ValueId {
        let tensor = Tensor::new(shape.to_vec(), values)
            .expect("callers pass as many values as the shape holds");
        self.rw.add_constant("rnn_constant", tensor)
    }

    fn zeros(&mut self, shape: &[usize]) -> ValueId {
        self.constant(shape, vec![0.0; shape.iter().product()])
    }
}
