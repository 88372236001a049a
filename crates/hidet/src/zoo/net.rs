//! The vocabulary the zoo models are written in: a [`GraphBuilder`] that names values,
//! creates seeded weights and emits ONNX nodes (default domain, opset 17) the way exporters
//! write them.
//!
//! Weights are uniform in `[-b, b]` with `b = gain · sqrt(3 / fan_in)` (He/Kaiming uniform:
//! standard deviation `gain / sqrt(fan_in)`), drawn from a stream derived from the model seed
//! and the weight's name, so a weight does not depend on the order layers are built in.

use hidet_graph::{
    Attribute, Attributes, DType, Graph, GraphBuilder, NodeSpec, Registry, Tensor, TensorType,
};

use super::rng::Rng;
use super::ZooError;

/// The opset every zoo node is built for.
pub const OPSET: i64 = 17;

/// ReLU gain of He initialization (`sqrt(2)`).
pub const RELU_GAIN: f64 = std::f64::consts::SQRT_2;

/// A 2-D convolution's shape (weights `[cout, cin / group, kh, kw]`, bias `[cout]`).
#[derive(Debug, Clone, Copy)]
pub struct ConvSpec {
    pub cout: usize,
    pub kernel: (usize, usize),
    pub stride: usize,
    /// Symmetric padding per spatial axis (`pads = [ph, pw, ph, pw]`).
    pub pad: (usize, usize),
    pub group: usize,
}

impl ConvSpec {
    /// A square `k`×`k` convolution to `cout` channels with stride `stride` and padding `pad`.
    pub fn square(cout: usize, k: usize, stride: usize, pad: usize) -> ConvSpec {
        ConvSpec {
            cout,
            kernel: (k, k),
            stride,
            pad: (pad, pad),
            group: 1,
        }
    }

    /// A `kh`×`kw` convolution with stride 1 and padding `(ph, pw)`.
    pub fn rect(cout: usize, kh: usize, kw: usize, ph: usize, pw: usize) -> ConvSpec {
        ConvSpec {
            cout,
            kernel: (kh, kw),
            stride: 1,
            pad: (ph, pw),
            group: 1,
        }
    }

    /// The same convolution with `group` groups.
    pub fn grouped(self, group: usize) -> ConvSpec {
        ConvSpec { group, ..self }
    }
}

/// Attributes from `(name, value)` pairs.
pub fn attrs(pairs: Vec<(&str, Attribute)>) -> Attributes {
    let mut a = Attributes::new();
    for (k, v) in pairs {
        a.insert(k, v);
    }
    a
}

fn ints(v: &[usize]) -> Attribute {
    Attribute::Ints(v.iter().map(|&x| x as i64).collect())
}

/// A graph under construction (see the module docs).
#[derive(Debug)]
pub struct Net {
    builder: GraphBuilder,
    /// Nodes, added to `builder` by [`Net::finish`] (so outputs can still be renamed).
    nodes: Vec<NodeSpec>,
    seed: u64,
    anonymous: usize,
}

impl Net {
    /// An empty model named `name` whose weights derive from `seed`.
    pub fn new(name: &str, seed: u64) -> Net {
        Net {
            builder: GraphBuilder::new(name),
            nodes: Vec::new(),
            seed,
            anonymous: 0,
        }
    }

    /// Declares a runtime input and returns its name.
    pub fn input(&mut self, name: &str, dtype: DType, shape: &[usize]) -> String {
        self.builder.input(name, TensorType::fixed(dtype, shape));
        name.to_string()
    }

    /// A new value name `{hint}_{n}`, unique within the model.
    pub fn fresh(&mut self, hint: &str) -> String {
        self.anonymous += 1;
        format!("{hint}_{}", self.anonymous)
    }

    /// Adds `tensor` as a weight named `name` and returns the name.
    pub fn constant(&mut self, name: &str, tensor: Tensor) -> String {
        self.builder.initializer(name, tensor);
        name.to_string()
    }

    /// A seeded weight of `shape` uniform in `[-bound, bound]`.
    pub fn uniform(&mut self, name: &str, shape: &[usize], bound: f64) -> Result<String, ZooError> {
        let n = shape.iter().product();
        let mut rng = Rng::derived(self.seed, name);
        let t = Tensor::new(shape.to_vec(), rng.uniform_vec(n, -bound, bound))?;
        Ok(self.constant(name, t))
    }

    /// A seeded He-uniform weight: standard deviation `gain / sqrt(fan_in)`.
    pub fn he(
        &mut self,
        name: &str,
        shape: &[usize],
        fan_in: usize,
        gain: f64,
    ) -> Result<String, ZooError> {
        let bound = gain * (3.0 / fan_in.max(1) as f64).sqrt();
        self.uniform(name, shape, bound)
    }

    /// A seeded vector of `n` values uniform in `[center - spread, center + spread]`.
    pub fn around(
        &mut self,
        name: &str,
        n: usize,
        center: f64,
        spread: f64,
    ) -> Result<String, ZooError> {
        let mut rng = Rng::derived(self.seed, name);
        let t = Tensor::new(
            vec![n],
            rng.uniform_vec(n, center - spread, center + spread),
        )?;
        Ok(self.constant(name, t))
    }

    /// A constant int64 tensor (shapes, axes, split sizes).
    pub fn const_i64(&mut self, name: &str, values: &[i64]) -> Result<String, ZooError> {
        let t = Tensor::new(vec![values.len()], values.to_vec())?;
        Ok(self.constant(name, t))
    }

    /// A constant f32 scalar.
    pub fn scalar_f32(&mut self, name: &str, v: f32) -> String {
        self.constant(name, Tensor::scalar(v))
    }

    /// Adds node `name` (`op_type`, opset [`OPSET`]) with `outputs` outputs named
    /// `name`, `name:1`, …; returns the output names.
    pub fn node(
        &mut self,
        name: &str,
        op_type: &str,
        inputs: &[&str],
        attributes: Attributes,
        outputs: usize,
    ) -> Vec<String> {
        let outs: Vec<String> = (0..outputs)
            .map(|i| {
                if i == 0 {
                    name.to_string()
                } else {
                    format!("{name}:{i}")
                }
            })
            .collect();
        self.nodes.push(NodeSpec {
            name: name.to_string(),
            domain: String::new(),
            op_type: op_type.to_string(),
            opset: OPSET,
            attrs: attributes,
            inputs: inputs.iter().map(|s| s.to_string()).collect(),
            outputs: outs.clone(),
        });
        outs
    }

    /// A single-output node named `name`; returns its output.
    pub fn op(&mut self, name: &str, op_type: &str, inputs: &[&str], a: Attributes) -> String {
        self.node(name, op_type, inputs, a, 1).remove(0)
    }

    /// Renames the value `from` (which must not be used yet) to `to`, by giving the node
    /// that outputs it the output name `to`. Returns `to`; a no-op if nothing outputs `from`.
    pub fn rename_output(&mut self, from: &str, to: &str) -> String {
        for n in &mut self.nodes {
            for o in &mut n.outputs {
                if o == from {
                    *o = to.to_string();
                }
            }
        }
        to.to_string()
    }

    /// An attribute-less single-output node with a generated name.
    pub fn anon(&mut self, op_type: &str, inputs: &[&str]) -> String {
        let name = self.fresh(&op_type.to_ascii_lowercase());
        self.op(&name, op_type, inputs, Attributes::new())
    }

    /// `Relu(x)`, named `{x}.relu`.
    pub fn relu(&mut self, x: &str) -> String {
        self.op(&format!("{x}.relu"), "Relu", &[x], Attributes::new())
    }

    /// `Clip(x, 0, 6)` (ReLU6) with the bounds as inputs, as opset ≥ 11 exports write it.
    pub fn relu6(&mut self, x: &str) -> String {
        let lo = self.scalar_f32(&format!("{x}.relu6.min"), 0.0);
        let hi = self.scalar_f32(&format!("{x}.relu6.max"), 6.0);
        self.op(
            &format!("{x}.relu6"),
            "Clip",
            &[x, &lo, &hi],
            Attributes::new(),
        )
    }

    /// `Conv` named `name` with a bias (a folded BatchNorm), weights of standard deviation
    /// `gain / sqrt(fan_in)` and a bias uniform in `[-0.1, 0.1]`.
    pub fn conv(
        &mut self,
        name: &str,
        x: &str,
        cin: usize,
        s: ConvSpec,
        gain: f64,
    ) -> Result<String, ZooError> {
        let (kh, kw) = s.kernel;
        let per_group = cin / s.group.max(1);
        let w = self.he(
            &format!("{name}.weight"),
            &[s.cout, per_group, kh, kw],
            per_group * kh * kw,
            gain,
        )?;
        let b = self.around(&format!("{name}.bias"), s.cout, 0.0, 0.1)?;
        let a = attrs(vec![
            ("dilations", ints(&[1, 1])),
            ("group", Attribute::Int(s.group as i64)),
            ("kernel_shape", ints(&[kh, kw])),
            ("pads", ints(&[s.pad.0, s.pad.1, s.pad.0, s.pad.1])),
            ("strides", ints(&[s.stride, s.stride])),
        ]);
        Ok(self.op(name, "Conv", &[x, &w, &b], a))
    }

    /// `MaxPool` (or `AveragePool` with `count_include_pad=1`) with a square window.
    pub fn pool(
        &mut self,
        name: &str,
        op_type: &str,
        x: &str,
        k: usize,
        stride: usize,
        pad: usize,
    ) -> String {
        let mut pairs = vec![
            ("ceil_mode", Attribute::Int(0)),
            ("kernel_shape", ints(&[k, k])),
            ("pads", ints(&[pad, pad, pad, pad])),
            ("strides", ints(&[stride, stride])),
        ];
        if op_type == "AveragePool" {
            pairs.push(("count_include_pad", Attribute::Int(1)));
        } else {
            pairs.push(("dilations", ints(&[1, 1])));
        }
        self.op(name, op_type, &[x], attrs(pairs))
    }

    /// The classifier head of the CNNs: `GlobalAveragePool`, `Flatten`, `Gemm(transB=1)`
    /// (node `fc`) whose output is named `output`, as in the exports.
    pub fn classifier(
        &mut self,
        x: &str,
        channels: usize,
        classes: usize,
    ) -> Result<String, ZooError> {
        let pooled = self.op("avgpool", "GlobalAveragePool", &[x], Attributes::new());
        let flat = self.op(
            "flatten",
            "Flatten",
            &[&pooled],
            attrs(vec![("axis", Attribute::Int(1))]),
        );
        let fc = self.gemm("fc", &flat, channels, classes, true, 1.0)?;
        Ok(self.rename_output(&fc, "output"))
    }

    /// `Gemm(x, W, b)`: with `trans_b` the weight is `[out, in]` (torch `Linear`), else
    /// `[in, out]` (GPT-2's `Conv1D`). Weights of standard deviation `gain / sqrt(fan_in)`.
    pub fn gemm(
        &mut self,
        name: &str,
        x: &str,
        fan_in: usize,
        fan_out: usize,
        trans_b: bool,
        gain: f64,
    ) -> Result<String, ZooError> {
        let shape = if trans_b {
            [fan_out, fan_in]
        } else {
            [fan_in, fan_out]
        };
        let w = self.he(&format!("{name}.weight"), &shape, fan_in, gain)?;
        let b = self.around(&format!("{name}.bias"), fan_out, 0.0, 0.05)?;
        let mut pairs = vec![
            ("alpha", Attribute::Float(1.0)),
            ("beta", Attribute::Float(1.0)),
        ];
        if trans_b {
            pairs.push(("transB", Attribute::Int(1)));
        }
        Ok(self.op(name, "Gemm", &[x, &w, &b], attrs(pairs)))
    }

    /// `MatMul(x, W) + b` with `W: [fan_in, fan_out]` (a transformer's linear layer on 3-D
    /// activations).
    pub fn linear(
        &mut self,
        name: &str,
        x: &str,
        fan_in: usize,
        fan_out: usize,
        gain: f64,
    ) -> Result<String, ZooError> {
        let w = self.he(&format!("{name}.weight"), &[fan_in, fan_out], fan_in, gain)?;
        let b = self.around(&format!("{name}.bias"), fan_out, 0.0, 0.05)?;
        let y = self.op(
            &format!("{name}.matmul"),
            "MatMul",
            &[x, &w],
            Attributes::new(),
        );
        Ok(self.op(name, "Add", &[&y, &b], Attributes::new()))
    }

    /// `LayerNormalization` over the last axis with a scale near 1 and a small shift.
    pub fn layer_norm(
        &mut self,
        name: &str,
        x: &str,
        n: usize,
        eps: f32,
    ) -> Result<String, ZooError> {
        let g = self.around(&format!("{name}.weight"), n, 1.0, 0.1)?;
        let b = self.around(&format!("{name}.bias"), n, 0.0, 0.1)?;
        let a = attrs(vec![
            ("axis", Attribute::Int(-1)),
            ("epsilon", Attribute::Float(eps)),
        ]);
        Ok(self.op(name, "LayerNormalization", &[x, &g, &b], a))
    }

    /// `Reshape(x, shape)` with a constant shape input.
    pub fn reshape(&mut self, name: &str, x: &str, shape: &[i64]) -> Result<String, ZooError> {
        let s = self.const_i64(&format!("{name}.shape"), shape)?;
        Ok(self.op(
            name,
            "Reshape",
            &[x, &s],
            attrs(vec![("allowzero", Attribute::Int(0))]),
        ))
    }

    /// `Transpose(x, perm)`.
    pub fn transpose(&mut self, name: &str, x: &str, perm: &[usize]) -> String {
        self.op(name, "Transpose", &[x], attrs(vec![("perm", ints(perm))]))
    }

    /// `Softmax(x, axis=-1)`.
    pub fn softmax(&mut self, name: &str, x: &str) -> String {
        self.op(
            name,
            "Softmax",
            &[x],
            attrs(vec![("axis", Attribute::Int(-1))]),
        )
    }

    /// Builds the graph with the global operator registry, declaring `outputs`.
    ///
    /// Errors: [`ZooError::Build`] naming every operator the registry lacks, or the first
    /// node whose construction or shape inference fails.
    pub fn finish(mut self, model: &str, outputs: &[&str]) -> Result<Graph, ZooError> {
        for n in std::mem::take(&mut self.nodes) {
            self.builder.node(n);
        }
        for o in outputs {
            self.builder.output(*o);
        }
        self.builder
            .build(Registry::global())
            .map_err(|source| ZooError::Build {
                model: model.to_string(),
                source,
            })
    }
}
