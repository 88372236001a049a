//! SequenceMap (opset 17+): applies the `body` subgraph to each position of the input
//! sequence.
//!
//! Inputs: `input_sequence` and `additional_inputs`, each a sequence (of the first one's
//! length; the body gets its element at the current position) or a tensor (the body gets it
//! whole every time). The body's tensor outputs at each position form the output sequences.
//! An empty input sequence gives empty output sequences. Like If and Loop, the body's
//! outer-scope values are the node's trailing inputs (see [`crate::Graph`]).

use std::sync::Arc;

use crate::executor::run_graph_data;
use crate::graph::{Graph, GraphBuilder, SubgraphContext};
use crate::operator::{infer_arg, InferInput, OpError, Operator};
use crate::registry::{Registry, LATEST_OPSET};
use crate::shape::TensorType;
use crate::tensor::Tensor;
use crate::value::{Datum, ValueKind};

/// SequenceMap before its body is built for the node.
#[derive(Debug)]
struct Unbuilt {
    body: Arc<GraphBuilder>,
}

#[derive(Debug)]
struct SequenceMap {
    body: Graph,
    /// Number of declared inputs (the sequence and the additional inputs).
    declared: usize,
}

/// Registers SequenceMap.
pub fn register(r: &mut Registry) {
    r.register("", "SequenceMap", 17..=LATEST_OPSET, |c| {
        Ok(Box::new(Unbuilt {
            body: c.attrs.req_graph_def("body")?.clone(),
        }))
    });
}

fn not_built() -> OpError {
    OpError::Invalid("the body is not built (instantiate first)".into())
}

impl Operator for Unbuilt {
    fn infer(&self, _: &[Option<InferInput<'_>>]) -> Result<Vec<TensorType>, OpError> {
        Err(not_built())
    }

    fn eval(&self, _: &[Option<&Tensor>]) -> Result<Vec<Tensor>, OpError> {
        Err(not_built())
    }

    fn instantiate(
        &self,
        inputs: &[Option<InferInput<'_>>],
        sub: &SubgraphContext<'_>,
    ) -> Result<Option<Box<dyn Operator>>, OpError> {
        let declared = inputs.len().saturating_sub(sub.num_captures());
        if declared == 0 {
            return Err(OpError::MissingInput(0));
        }
        // One tensor per declared input: a sequence's element (any shape) or the tensor.
        let mut formal = Vec::with_capacity(declared);
        for i in 0..declared {
            let x = infer_arg(inputs, i)?;
            let ty = match sub.input_kind(i) {
                Some(ValueKind::Sequence) => TensorType::unknown_shape(x.ty.dtype),
                Some(ValueKind::Tensor) if i > 0 => x.ty.clone(),
                Some(k) => {
                    return Err(OpError::Invalid(format!(
                        "input #{i} is a {k}; SequenceMap takes a sequence, then sequences \
                         or tensors"
                    )))
                }
                None => return Err(OpError::MissingInput(i)),
            };
            formal.push((ty, ValueKind::Tensor));
        }
        let body = sub
            .build_kinds(&self.body, &formal)
            .map_err(|e| OpError::Subgraph {
                attr: "body".into(),
                source: Box::new(e),
            })?;
        Ok(Some(Box::new(SequenceMap { body, declared })))
    }
}

impl Operator for SequenceMap {
    fn infer_kinds(
        &self,
        inputs: &[Option<ValueKind>],
        num_outputs: usize,
    ) -> Result<Vec<ValueKind>, OpError> {
        if inputs.first().copied().flatten() != Some(ValueKind::Sequence) {
            return Err(OpError::Invalid(
                "SequenceMap's first input must be a sequence".into(),
            ));
        }
        if let Some(o) = self
            .body
            .outputs()
            .iter()
            .find(|&&o| self.body.value(o).kind != ValueKind::Tensor)
        {
            return Err(OpError::Unsupported(format!(
                "SequenceMap bodies returning a {}",
                self.body.value(*o).kind
            )));
        }
        Ok(vec![ValueKind::Sequence; num_outputs])
    }

    fn infer(&self, _: &[Option<InferInput<'_>>]) -> Result<Vec<TensorType>, OpError> {
        Ok(self
            .body
            .outputs()
            .iter()
            .map(|&o| TensorType::unknown_shape(self.body.value(o).ty.dtype))
            .collect())
    }

    fn eval(&self, _: &[Option<&Tensor>]) -> Result<Vec<Tensor>, OpError> {
        Err(OpError::Invalid(
            "SequenceMap runs on sequences (eval_data)".into(),
        ))
    }

    fn eval_data(&self, inputs: &[Option<&Datum>]) -> Result<Vec<Datum>, OpError> {
        let get = |i: usize| inputs.get(i).copied().flatten().ok_or(OpError::MissingInput(i));
        let Datum::Sequence(first) = get(0)? else {
            return Err(OpError::Invalid(
                "SequenceMap's first input must be a sequence".into(),
            ));
        };
        let n = first.len();
        let declared: Vec<&Datum> = (0..self.declared).map(get).collect::<Result<_, _>>()?;
        for (i, d) in declared.iter().enumerate() {
            match d {
                Datum::Sequence(s) if s.len() != n => {
                    return Err(OpError::Invalid(format!(
                        "input #{i} has {} elements, the input sequence {n}",
                        s.len()
                    )))
                }
                Datum::Sequence(_) | Datum::Tensor(_) => {}
                other => {
                    return Err(OpError::Invalid(format!(
                        "input #{i} is a {}",
                        other.describe()
                    )))
                }
            }
        }
        let caps: Vec<&Datum> = (self.declared..inputs.len().max(self.declared))
            .map(get)
            .collect::<Result<_, _>>()?;
        let mut outs: Vec<Vec<Tensor>> = vec![Vec::with_capacity(n); self.body.outputs().len()];
        for pos in 0..n {
            let args: Vec<Datum> = declared
                .iter()
                .map(|d| match d {
                    Datum::Sequence(s) => Datum::Tensor(s[pos].clone()),
                    other => (*other).clone(),
                })
                .collect();
            let refs: Vec<&Datum> = args.iter().collect();
            let res = run_graph_data(&self.body, &refs, &caps).map_err(|e| {
                OpError::SubgraphExec {
                    attr: "body".into(),
                    source: Box::new(e),
                }
            })?;
            for (acc, d) in outs.iter_mut().zip(res) {
                match d {
                    Datum::Tensor(t) => acc.push(t),
                    other => {
                        return Err(OpError::Invalid(format!(
                            "the body returned a {}",
                            other.describe()
                        )))
                    }
                }
            }
        }
        Ok(outs.into_iter().map(Datum::Sequence).collect())
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use crate::{
        run_reference_data, Attribute, Attributes, DType, Datum, GraphBuilder, NodeSpec,
        Registry, Tensor, TensorType, ValueKind,
    };

    fn node(op: &str, opset: i64, inputs: &[&str], outputs: &[&str]) -> NodeSpec {
        NodeSpec {
            name: format!("{op}_{}", outputs.join("_")),
            domain: String::new(),
            op_type: op.into(),
            opset,
            attrs: Attributes::new(),
            inputs: inputs.iter().map(|s| s.to_string()).collect(),
            outputs: outputs.iter().map(|s| s.to_string()).collect(),
        }
    }

    fn t(v: &[f32]) -> Tensor {
        Tensor::new(vec![v.len()], v.to_vec()).unwrap()
    }

    /// y[i] = x[i] + w (a tensor) + s[i] (a second sequence), plus the body reading an outer
    /// value `k`; the elements have different lengths.
    #[test]
    fn maps_each_position() {
        let mut body = GraphBuilder::new("body");
        body.input_untyped("xi")
            .input_untyped("w")
            .input_untyped("si")
            .node(node("Add", 14, &["xi", "w"], &["a"]))
            .node(node("Add", 14, &["a", "si"], &["b"]))
            .node(node("Mul", 14, &["b", "k"], &["yi"]))
            .output("yi");
        let mut map = node("SequenceMap", 17, &["x", "w", "s"], &["y"]);
        map.attrs
            .insert("body", Attribute::GraphDef(Arc::new(body)));
        let mut g = GraphBuilder::new("g");
        let f = TensorType::unknown_shape(DType::F32);
        g.input_of_kind("x", f.clone(), ValueKind::Sequence)
            .input("w", TensorType::fixed(DType::F32, &[1]))
            .input_of_kind("s", f.clone(), ValueKind::Sequence)
            .input("k", TensorType::fixed(DType::F32, &[]))
            .node(map)
            .output("y");
        let g = g.build(Registry::global()).unwrap();
        assert_eq!(g.value(g.outputs()[0]).kind, ValueKind::Sequence);
        let inputs = vec![
            ("x".to_string(), Datum::Sequence(vec![t(&[1., 2.]), t(&[3.])])),
            ("w".to_string(), Datum::Tensor(t(&[10.]))),
            ("s".to_string(), Datum::Sequence(vec![t(&[0.5, 0.25]), t(&[4.])])),
            ("k".to_string(), Datum::Tensor(Tensor::scalar(2.0f32))),
        ];
        let out = run_reference_data(&g, &inputs).unwrap();
        assert_eq!(
            out[0].1,
            Datum::Sequence(vec![t(&[23., 24.5]), t(&[34.])])
        );
        // A sequence of another length is an error, not a panic.
        let mut bad = inputs.clone();
        bad[2].1 = Datum::Sequence(vec![t(&[1.])]);
        assert!(run_reference_data(&g, &bad).is_err());
        // A tensor where the graph declares a sequence is an input error.
        bad[0].1 = Datum::Tensor(t(&[1.]));
        assert!(run_reference_data(&g, &bad).is_err());
    }

    /// A Loop whose carried value starts as an empty optional sequence and comes back as a
    /// sequence, growing by one element per iteration (the shape of ONNX's
    /// test_loop16_seq_none).
    #[test]
    fn loop_carries_an_optional_sequence() {
        let mut then_b = GraphBuilder::new("then");
        let mut empty = node("SequenceEmpty", 17, &[], &["e"]);
        empty.attrs.insert("dtype", Attribute::Int(1));
        then_b.node(empty).output("e");
        let mut else_b = GraphBuilder::new("else");
        else_b
            .node(node("OptionalGetElement", 18, &["opt_in"], &["got"]))
            .output("got");
        let mut if_node = node("If", 18, &["none"], &["seq"]);
        if_node
            .attrs
            .insert("then_branch", Attribute::GraphDef(Arc::new(then_b)));
        if_node
            .attrs
            .insert("else_branch", Attribute::GraphDef(Arc::new(else_b)));
        let mut cast = node("Cast", 18, &["i"], &["fi"]);
        cast.attrs.insert("to", Attribute::Int(1));
        let mut body = GraphBuilder::new("body");
        body.input_untyped("i")
            .input_untyped("c")
            .input_untyped("opt_in")
            .node(node("OptionalHasElement", 18, &["opt_in"], &["has"]))
            .node(node("Not", 18, &["has"], &["none"]))
            .node(if_node)
            .node(cast)
            .node(node("SequenceInsert", 18, &["seq", "fi"], &["seq_out"]))
            .node(node("Identity", 18, &["c"], &["c_out"]))
            .output("c_out")
            .output("seq_out");
        let mut lp = node("Loop", 18, &["m", "", "opt"], &["res"]);
        lp.attrs.insert("body", Attribute::GraphDef(Arc::new(body)));
        let mut g = GraphBuilder::new("g");
        g.input("m", TensorType::fixed(DType::I64, &[]))
            .input_of_kind(
                "opt",
                TensorType::unknown_shape(DType::F32),
                ValueKind::OptionalSequence,
            )
            .node(lp)
            .output("res");
        let g = g.build(Registry::global()).unwrap();
        assert_eq!(g.value(g.outputs()[0]).kind, ValueKind::Sequence);
        let out = run_reference_data(
            &g,
            &[
                ("m".into(), Datum::Tensor(Tensor::scalar(3i64))),
                ("opt".into(), Datum::Optional(None)),
            ],
        )
        .unwrap();
        let want: Vec<Tensor> = [0.0f32, 1.0, 2.0].iter().map(|&v| Tensor::scalar(v)).collect();
        assert_eq!(out[0].1, Datum::Sequence(want));
    }
}
