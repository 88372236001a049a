//! `hidet ops`: the supported operators with their opset ranges.

use hidet::graph::Registry;

use super::CliError;

/// Prints one line per operator: domain, op type and its opset ranges.
pub fn run() -> Result<(), CliError> {
    let mut rows: Vec<(String, String, Vec<String>)> = Vec::new();
    for s in Registry::global().schemas() {
        let domain = if s.domain.is_empty() {
            "ai.onnx".to_string()
        } else {
            s.domain.clone()
        };
        let range = format!("{}-{}", s.opsets.start(), s.opsets.end());
        match rows.last_mut() {
            Some(r) if r.0 == domain && r.1 == s.op_type => r.2.push(range),
            _ => rows.push((domain, s.op_type.clone(), vec![range])),
        }
    }
    println!("{:<10} {:<24} opsets", "domain", "operator");
    for (d, op, ranges) in &rows {
        println!("{d:<10} {op:<24} {}", ranges.join(", "));
    }
    println!("{} operators", rows.len());
    Ok(())
}
