//! Shared helpers of the graph-pass tests: random non-zero data, node specs, graph building
//! and the before/after comparison through the reference executor.

#![allow(dead_code)]

use hidet_graph::{
    run_reference, Attribute, Attributes, DType, Graph, GraphBuilder, NodeSpec, Registry, Tensor,
    TensorType,
};

/// A small deterministic generator (xorshift64*).
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1)
    }

    pub fn next_u64(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    /// Uniform in `[lo, hi)`.
    pub fn uniform(&mut self, lo: f64, hi: f64) -> f64 {
        lo + (hi - lo) * ((self.next_u64() >> 11) as f64 / (1u64 << 53) as f64)
    }

    /// Magnitude in `[0.1, 2)`, random sign: never zero.
    pub fn nonzero(&mut self) -> f64 {
        let m = self.uniform(0.1, 2.0);
        if self.next_u64() & 1 == 0 {
            m
        } else {
            -m
        }
    }

    pub fn f32s(&mut self, shape: &[usize]) -> Tensor {
        let n = shape.iter().product();
        Tensor::new(
            shape.to_vec(),
            (0..n).map(|_| self.nonzero() as f32).collect(),
        )
        .unwrap()
    }

    /// Positive values in `[lo, hi)` (variances).
    pub fn positive(&mut self, shape: &[usize], lo: f64, hi: f64) -> Tensor {
        let n = shape.iter().product();
        Tensor::new(
            shape.to_vec(),
            (0..n).map(|_| self.uniform(lo, hi) as f32).collect(),
        )
        .unwrap()
    }
}

/// A default-domain node at `opset` named after its first output.
pub fn node(
    op: &str,
    opset: i64,
    inputs: &[&str],
    outputs: &[&str],
    attrs: Attributes,
) -> NodeSpec {
    NodeSpec {
        name: format!("{op}_{}", outputs[0]),
        domain: String::new(),
        op_type: op.into(),
        opset,
        attrs,
        inputs: inputs.iter().map(|s| s.to_string()).collect(),
        outputs: outputs.iter().map(|s| s.to_string()).collect(),
    }
}

/// Attributes from (name, value) pairs.
pub fn attrs(list: Vec<(&str, Attribute)>) -> Attributes {
    let mut a = Attributes::new();
    for (n, v) in list {
        a.insert(n, v);
    }
    a
}

pub fn ints(v: &[i64]) -> Attribute {
    Attribute::Ints(v.to_vec())
}

pub fn i64s(v: &[i64]) -> Tensor {
    Tensor::new(vec![v.len()], v.to_vec()).unwrap()
}

pub fn f32_input(shape: &[usize]) -> TensorType {
    TensorType::fixed(DType::F32, shape)
}

/// Builds with the global registry.
pub fn build(b: GraphBuilder) -> Graph {
    b.build(Registry::global()).expect("test graph builds")
}

/// Adds `out = Relu(Conv(input, w, b?))` with `attrs` (the initializer `w` already added; a
/// random bias `b` of `oc` channels when `bias`), makes `out` the output and builds.
pub fn conv_relu_graph(
    mut b: GraphBuilder,
    rng: &mut Rng,
    input: &str,
    oc: usize,
    attrs: Attributes,
    bias: bool,
) -> Graph {
    let mut conv_in = vec![input, "w"];
    if bias {
        b.initializer("b", rng.f32s(&[oc]));
        conv_in.push("b");
    }
    b.node(node("Conv", 17, &conv_in, &["y"], attrs));
    b.node(node("Relu", 17, &["y"], &["out"], Attributes::new()));
    b.output("out");
    build(b)
}

/// Op types of the graph's nodes, in order.
pub fn ops(g: &Graph) -> Vec<String> {
    g.nodes().iter().map(|n| n.op_type.clone()).collect()
}

/// How many nodes have `op`.
pub fn count(g: &Graph, op: &str) -> usize {
    g.nodes().iter().filter(|n| n.op_type == op).count()
}

/// Runs both graphs on `inputs` and checks that every output (matched by position, with the
/// same name) agrees: `|a - b| <= tol * (1 + |a|)`, exactly when `tol == 0`. Also checks that
/// the outputs are not all zero (the comparison must mean something).
pub fn assert_same_outputs(before: &Graph, after: &Graph, inputs: &[(String, Tensor)], tol: f64) {
    let a = run_reference(before, inputs).expect("graph before the pass runs");
    let b = run_reference(after, inputs).expect("graph after the pass runs");
    assert_eq!(a.len(), b.len());
    for ((na, ta), (nb, tb)) in a.iter().zip(&b) {
        assert_eq!(na, nb, "output names are kept");
        assert_eq!(ta.dtype(), tb.dtype(), "{na}: dtype");
        assert_eq!(ta.shape(), tb.shape(), "{na}: shape");
        let (va, vb) = (ta.to_f64_vec(), tb.to_f64_vec());
        assert!(
            va.iter().any(|v| *v != 0.0),
            "{na}: reference output is all zero"
        );
        for (i, (x, y)) in va.iter().zip(&vb).enumerate() {
            let ok = if tol == 0.0 {
                x.to_bits() == y.to_bits() || (x.is_nan() && y.is_nan())
            } else {
                (x - y).abs() <= tol * (1.0 + x.abs())
            };
            assert!(ok, "{na}[{i}]: before {x}, after {y}");
        }
    }
}
