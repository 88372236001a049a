//! ONNX Runtime's quantized contrib operators (domain `com.microsoft`) that its static
//! quantization writes in the QOperator format beside `QLinearConv`, expanded when the graph is
//! built into default-domain operators — dequantize, compute in float, quantize — so the graph
//! passes and fusion treat them like a QDQ model's nodes:
//!
//! - `QLinearAdd(A, sa, za, B, sb, zb, sc, zc)`, `QLinearMul(…)` →
//!   `QuantizeLinear(DequantizeLinear(A) op DequantizeLinear(B), sc, zc)`;
//! - `QLinearGlobalAveragePool(X, sx, zx, sy, zy)` (channels first) →
//!   `QuantizeLinear(GlobalAveragePool(DequantizeLinear(X)), sy, zy)`;
//! - `QGemm(A, sa, za, B, sb, zb, C?, sy?, zy?; alpha, transA, transB)` →
//!   `Gemm(DequantizeLinear(A), DequantizeLinear(B), DequantizeLinear(C, sa·sb))`, quantized by
//!   `(sy, zy)` when `sy` is given.

use crate::attribute::{Attribute, Attributes};
use crate::expansion::Expansion;
use crate::operator::OpError;
use crate::registry::Registry;

use super::contrib_util::{op, op_into, MS_DOMAIN};


/// Registers the expansions (every opset of the contrib domain).
pub fn register(r: &mut Registry) {
    for op in ["QLinearAdd", "QLinearMul"] {
        r.register_expansion(MS_DOMAIN, op, 1..=i64::MAX, binary);
    }
    r.register_expansion(MS_DOMAIN, "QLinearGlobalAveragePool", 1..=i64::MAX, pool);
    r.register_expansion(MS_DOMAIN, "QGemm", 1..=i64::MAX, gemm);
}

/// `DequantizeLinear(x, scale, zero)` of inputs `x`, `scale`, `zero` (`zero` may be absent).
fn dequantize(e: &mut Expansion<'_>, x: usize, scale: usize, zero: usize) -> Result<String, OpError> {
    dequantize_along(e, x, scale, zero, 1)
}

/// [`dequantize`] with per-channel parameters along `axis`.
fn dequantize_along(
    e: &mut Expansion<'_>,
    x: usize,
    scale: usize,
    zero: usize,
    axis: i64,
) -> Result<String, OpError> {
    let inputs = [
        e.input_name(x)?.to_string(),
        e.input_name(scale)?.to_string(),
        e.input_names().get(zero).cloned().unwrap_or_default(),
    ];
    let inputs: Vec<&str> = inputs.iter().map(String::as_str).collect();
    let mut attrs = Attributes::new();
    attrs.insert("axis", Attribute::Int(axis));
    Ok(op(e, "DequantizeLinear", attrs, &inputs))
}

/// `QuantizeLinear(value, scale, zero)` into the node's output.
fn quantize_into_output(
    e: &mut Expansion<'_>,
    value: &str,
    scale: usize,
    zero: usize,
) -> Result<(), OpError> {
    let output = e.output_names().first().cloned().unwrap_or_default();
    let scale = e.input_name(scale)?.to_string();
    let zero = e.input_names().get(zero).cloned().unwrap_or_default();
    op_into(
        e,
        "QuantizeLinear",
        Attributes::new(),
        &[value, &scale, &zero],
        &[&output],
    );
    Ok(())
}

fn binary(e: &mut Expansion<'_>) -> Result<(), OpError> {
    let arithmetic = if e.op_type() == "QLinearAdd" { "Add" } else { "Mul" };
    let a = dequantize(e, 0, 1, 2)?;
    let b = dequantize(e, 3, 4, 5)?;
    let sum = op(e, arithmetic, Attributes::new(), &[&a, &b]);
    quantize_into_output(e, &sum, 6, 7)
}

fn pool(e: &mut Expansion<'_>) -> Result<(), OpError> {
    if e.attrs().int_or("channels_last", 0)? != 0 {
        return Err(OpError::Unsupported(
            "QLinearGlobalAveragePool with channels_last = 1".into(),
        ));
    }
    let x = dequantize(e, 0, 1, 2)?;
    let pooled = op(e, "GlobalAveragePool", Attributes::new(), &[&x]);
    quantize_into_output(e, &pooled, 3, 4)
}

fn gemm(e: &mut Expansion<'_>) -> Result<(), OpError> {
    let a = dequantize(e, 0, 1, 2)?;
    // B's per-channel parameters run along its output columns.
    let trans_b = e.attrs().int_or("transB", 0)? != 0;
    let b = dequantize_along(e, 3, 4, 5, if trans_b { 0 } else { 1 })?;
    let mut attrs = Attributes::new();
    for name in ["transA", "transB"] {
        attrs.insert(name, Attribute::Int(e.attrs().int_or(name, 0)?));
    }
    attrs.insert("alpha", Attribute::Float(e.attrs().float_or("alpha", 1.0)?));
    let mut inputs = vec![a, b];
    if e.input(6).is_some() {
        // The int32 bias has the scale of the product, sa·sb, and zero point 0.
        let (sa, sb) = (e.input_name(1)?.to_string(), e.input_name(4)?.to_string());
        let scale = op(e, "Mul", Attributes::new(), &[&sa, &sb]);
        let c = e.input_name(6)?.to_string();
        let mut along = Attributes::new();
        along.insert("axis", Attribute::Int(0));
        inputs.push(op(e, "DequantizeLinear", along, &[&c, &scale]));
    }
    let inputs: Vec<&str> = inputs.iter().map(String::as_str).collect();
    if e.input(7).is_some() {
        let product = op(e, "Gemm", attrs, &inputs);
        quantize_into_output(e, &product, 7, 8)
    } else {
        let output = e.output_names().first().cloned().unwrap_or_default();
        op_into(e, "Gemm", attrs, &inputs, &[&output]);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use crate::graph::{GraphBuilder, NodeSpec};
    use crate::shape::TensorType;
    use crate::tensor::Tensor;
    use crate::{run_reference, DType, Registry};

    fn contrib(op: &str, inputs: &[&str], attrs: crate::Attributes) -> NodeSpec {
        NodeSpec {
            name: op.into(),
            domain: super::MS_DOMAIN.into(),
            op_type: op.into(),
            opset: 1,
            attrs,
            inputs: inputs.iter().map(|s| s.to_string()).collect(),
            outputs: vec!["y".into()],
        }
    }

    /// `round_half_even(v) + zero`, saturated to uint8.
    fn quantize(v: f64, zero: f64) -> f64 {
        (v.round_ties_even() + zero).clamp(0.0, 255.0)
    }

    fn scalar(v: f32) -> Tensor {
        Tensor::new(vec![], vec![v]).unwrap()
    }

    fn zero(v: u8) -> Tensor {
        Tensor::new(vec![], vec![v]).unwrap()
    }

    #[test]
    fn qlinear_add_is_the_quantized_sum_of_the_dequantized_operands() {
        let a: Vec<u8> = (0..12).map(|i| (i * 23 % 256) as u8).collect();
        let b: Vec<u8> = (0..12).map(|i| (i * 71 % 256) as u8).collect();
        let mut g = GraphBuilder::new("qlinear_add");
        g.input("a", TensorType::fixed(DType::U8, &[3, 4]));
        g.input("b", TensorType::fixed(DType::U8, &[3, 4]));
        for (name, t) in [("sa", scalar(0.05)), ("sb", scalar(0.02)), ("sc", scalar(0.09))] {
            g.initializer(name, t);
        }
        for (name, t) in [("za", zero(100)), ("zb", zero(7)), ("zc", zero(128))] {
            g.initializer(name, t);
        }
        let inputs = ["a", "sa", "za", "b", "sb", "zb", "sc", "zc"];
        g.node(contrib("QLinearAdd", &inputs, crate::Attributes::new()));
        g.output("y");
        let graph = g.build(Registry::global()).unwrap();
        assert!(graph.nodes().iter().all(|n| n.domain.is_empty()));
        let feeds = vec![
            ("a".to_string(), Tensor::new(vec![3, 4], a.clone()).unwrap()),
            ("b".to_string(), Tensor::new(vec![3, 4], b.clone()).unwrap()),
        ];
        let got = run_reference(&graph, &feeds).unwrap()[0].1.to_f64_vec();
        for i in 0..12 {
            let sum = (f64::from(a[i]) - 100.0) * f64::from(0.05f32)
                + (f64::from(b[i]) - 7.0) * f64::from(0.02f32);
            let want = quantize((sum as f32 / 0.09f32) as f64, 128.0);
            assert_eq!(got[i], want, "element {i}");
        }
    }

    #[test]
    fn qgemm_dequantizes_its_bias_with_the_product_scale() {
        // A [2, 3] u8, B [4, 3] i8 (transB), C [4] i32, no output scale: a float result.
        let a: Vec<u8> = vec![10, 200, 35, 0, 255, 128];
        let b: Vec<i8> = vec![1, -2, 3, -4, 5, -6, 7, -8, 9, 10, 0, -127];
        let c: Vec<i32> = vec![100, -50, 7, 0];
        let mut g = GraphBuilder::new("qgemm");
        g.input("a", TensorType::fixed(DType::U8, &[2, 3]));
        g.initializer("sa", scalar(0.1));
        g.initializer("za", zero(128));
        g.initializer("b", Tensor::new(vec![4, 3], b.clone()).unwrap());
        g.initializer("sb", scalar(0.03));
        g.initializer("zb", Tensor::new(vec![], vec![0i8]).unwrap());
        g.initializer("c", Tensor::new(vec![4], c.clone()).unwrap());
        let mut attrs = crate::Attributes::new();
        attrs.insert("transB", crate::Attribute::Int(1));
        g.node(contrib("QGemm", &["a", "sa", "za", "b", "sb", "zb", "c"], attrs));
        g.output("y");
        let graph = g.build(Registry::global()).unwrap();
        let feeds = vec![("a".to_string(), Tensor::new(vec![2, 3], a.clone()).unwrap())];
        let got = run_reference(&graph, &feeds).unwrap()[0].1.to_f64_vec();
        let (sa, sb) = (f64::from(0.1f32), f64::from(0.03f32));
        for i in 0..2 {
            for n in 0..4 {
                let dot: f64 = (0..3)
                    .map(|k| (f64::from(a[i * 3 + k]) - 128.0) * f64::from(b[n * 3 + k]))
                    .sum();
                let want = dot * sa * sb + f64::from(c[n]) * f64::from((sa * sb) as f32);
                let g = got[i * 4 + n];
                assert!((g - want).abs() <= 1e-5 * (1.0 + want.abs()), "{i},{n}: {g} vs {want}");
            }
        }
    }
}
