//! `hidet ops`: the supported operators with their opset ranges.

use std::collections::BTreeMap;

use hidet::graph::Registry;

use super::CliError;

/// An opset range and whether it is converted at import (an expansion).
type Range = (i64, i64, bool);

/// Prints one line per operator: domain, op type and its opset ranges (`1-`: every version of
/// a contrib domain); a range marked `*` is converted at import into other operators (an
/// expansion).
pub fn run() -> Result<(), CliError> {
    let r = Registry::global();
    let mut rows: BTreeMap<(String, String), Vec<Range>> = BTreeMap::new();
    let domain = |d: &str| {
        if d.is_empty() {
            "ai.onnx".to_string()
        } else {
            d.to_string()
        }
    };
    for s in r.schemas() {
        rows.entry((domain(&s.domain), s.op_type.clone()))
            .or_default()
            .push((*s.opsets.start(), *s.opsets.end(), false));
    }
    for s in r.expansions() {
        rows.entry((domain(&s.domain), s.op_type.clone()))
            .or_default()
            .push((*s.opsets.start(), *s.opsets.end(), true));
    }
    println!("{:<10} {:<24} opsets", "domain", "operator");
    for ((d, op), mut ranges) in rows.iter().map(|(k, v)| (k, v.clone())) {
        ranges.sort();
        let text: Vec<String> = ranges
            .iter()
            .map(|(a, b, converted)| {
                let end = if *b == i64::MAX {
                    String::new()
                } else {
                    b.to_string()
                };
                format!("{a}-{end}{}", if *converted { "*" } else { "" })
            })
            .collect();
        println!("{d:<10} {op:<24} {}", text.join(", "));
    }
    println!(
        "{} operators (* converted at import into other operators)",
        rows.len()
    );
    Ok(())
}
