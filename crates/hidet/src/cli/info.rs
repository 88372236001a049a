//! `hidet info`: a model summary.

use std::collections::BTreeMap;

use hidet::graph::{Graph, Node};

use super::{source, CliError};

/// Prints inputs, outputs, operator histogram, parameters and estimated FLOPs of `spec` (an
/// `.onnx` file or `zoo:NAME`).
pub fn run(spec: &str) -> Result<(), CliError> {
    let loaded = source::load(spec)?;
    let m = &loaded.model;
    let g = &m.graph;
    println!(
        "model: {} (ir {}, producer `{}`)",
        loaded.label, m.ir_version, m.producer
    );
    let opsets: Vec<String> = m
        .opsets
        .iter()
        .map(|(d, v)| format!("{}={v}", if d.is_empty() { "ai.onnx" } else { d }))
        .collect();
    println!("opsets: {}", opsets.join(", "));
    println!("inputs:");
    for &id in g.inputs() {
        let v = g.value(id);
        println!("  {}: {}", v.name, v.ty);
    }
    println!("outputs:");
    for &id in g.outputs() {
        let v = g.value(id);
        println!("  {}: {}", v.name, v.ty);
    }
    let mut hist: BTreeMap<&str, usize> = BTreeMap::new();
    for n in g.nodes() {
        *hist.entry(n.op_type.as_str()).or_default() += 1;
    }
    println!("operators ({} nodes):", g.nodes().len());
    let mut by_count: Vec<(&str, usize)> = hist.into_iter().collect();
    by_count.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(b.0)));
    for (op, c) in by_count {
        println!("  {op:<24} {c}");
    }
    let (count, bytes) = g.initializers().fold((0usize, 0usize), |(c, b), (_, t)| {
        (c + t.numel(), b + t.size_in_bytes())
    });
    println!("parameters: {count} ({bytes} bytes)");
    let (flops, unknown) = estimate_flops(g);
    print!("estimated FLOPs (MatMul, Gemm, Conv): {flops}");
    if unknown > 0 {
        print!(" (+{unknown} nodes with symbolic or unknown shapes not counted)");
    }
    println!();
    Ok(())
}

fn fixed(g: &Graph, id: Option<hidet::graph::ValueId>) -> Option<Vec<usize>> {
    g.value(id?).ty.fixed_shape()
}

/// 2·MACs of MatMul, Gemm and Conv nodes whose shapes are fully known; and how many such
/// nodes could not be counted.
pub fn estimate_flops(g: &Graph) -> (u128, usize) {
    let mut total: u128 = 0;
    let mut unknown = 0;
    for n in g.nodes() {
        let f = match n.op_type.as_str() {
            "MatMul" | "Gemm" | "Conv" | "ConvTranspose" => node_flops(g, n),
            _ => continue,
        };
        match f {
            Some(f) => total += f,
            None => unknown += 1,
        }
    }
    (total, unknown)
}

fn node_flops(g: &Graph, n: &Node) -> Option<u128> {
    let out = fixed(g, n.outputs.first().copied().flatten())?;
    let a = fixed(g, n.inputs.first().copied().flatten())?;
    let w = fixed(g, n.inputs.get(1).copied().flatten())?;
    let out_elems: u128 = out.iter().map(|&d| d as u128).product();
    let k: u128 = match n.op_type.as_str() {
        "MatMul" => *a.last()? as u128,
        "Gemm" => {
            let trans_a = n.attrs.int_or("transA", 0).ok()? != 0;
            (if trans_a { *a.first()? } else { *a.last()? }) as u128
        }
        // Conv weight [Cout, Cin/groups, k...]: each output element needs Cin/groups·∏k MACs.
        "Conv" => w.iter().skip(1).map(|&d| d as u128).product(),
        // ConvTranspose weight [Cin, Cout/groups, k...]: each input element scatters Cout/groups·∏k.
        _ => {
            let in_elems: u128 = a.iter().map(|&d| d as u128).product();
            return Some(2 * in_elems * w.iter().skip(1).map(|&d| d as u128).product::<u128>());
        }
    };
    Some(2 * out_elems * k)
}
