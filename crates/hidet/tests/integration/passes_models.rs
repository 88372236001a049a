//! Node counts of the paper models (`models/*/model.onnx`, made by
//! `scripts/export_paper_models.py`) before and after each default graph pass, and the
//! reference outputs before vs after the whole pipeline. Ignored by default (the models are
//! not committed); run with
//! `cargo test -p hidet --release --test integration passes_models:: -- --ignored --nocapture`.

use std::collections::BTreeMap;
use std::path::PathBuf;

use hidet::graph::passes::default_passes;
use hidet::graph::{run_reference, Graph};
use hidet::zoo::inputs::complete_inputs;

fn histogram(g: &Graph) -> BTreeMap<String, usize> {
    let mut h = BTreeMap::new();
    for n in g.nodes() {
        *h.entry(n.op_type.clone()).or_insert(0) += 1;
    }
    h
}

#[test]
#[ignore = "needs models/*/model.onnx (scripts/export_paper_models.py)"]
fn paper_models_before_and_after_passes() {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../models");
    let names = [
        "resnet50",
        "inception_v3",
        "mobilenet_v2",
        "bert_base",
        "gpt2",
    ];
    let mut found = 0;
    for name in names {
        let path = root.join(name).join("model.onnx");
        if !path.exists() {
            println!("{name}: not present, skipped");
            continue;
        }
        found += 1;
        let model = hidet::onnx::load_model(&path).expect("model imports");
        let before = model.graph;
        let mut g = before.clone();
        let mut line = format!("{name}: {} nodes", g.nodes().len());
        for p in default_passes() {
            let t = std::time::Instant::now();
            g = p.run(g).expect("pass succeeds");
            line += &format!(
                " -> {} {} ({:.2}s)",
                p.name(),
                g.nodes().len(),
                t.elapsed().as_secs_f64()
            );
        }
        println!("{line}");
        println!("  before: {:?}", histogram(&before));
        println!("  after:  {:?}", histogram(&g));
        let inputs: Vec<_> = complete_inputs(&before, &[], 7)
            .expect("inputs synthesize")
            .into_iter()
            .map(|(n, t, _)| (n, t))
            .collect();
        let a = run_reference(&before, &inputs).expect("runs before");
        let b = run_reference(&g, &inputs).expect("runs after");
        for ((na, ta), (nb, tb)) in a.iter().zip(&b) {
            assert_eq!(na, nb);
            assert_eq!(ta.shape(), tb.shape());
            let (va, vb) = (ta.to_f64_vec(), tb.to_f64_vec());
            let worst = va
                .iter()
                .zip(&vb)
                .map(|(x, y)| (x - y).abs() / (1.0 + x.abs()))
                .fold(0.0f64, f64::max);
            println!("  output {na}: max |before - after| / (1 + |before|) = {worst:.2e}");
            assert!(worst <= 1e-4, "{name} output {na} changed by {worst}");
        }
    }
    println!("{found} of {} models present", names.len());
}
