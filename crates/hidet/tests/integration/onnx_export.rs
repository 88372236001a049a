//! ONNX export round trip (`cargo test -p hidet --test integration onnx_export::`): every case of
//! `tests/conformance/expected_pass.txt` is imported, written back with
//! `hidet::onnx::encode_model`, imported again, and run on its own node-test data with the
//! reference executor (the harness and tolerances of `tests/conformance.rs`). A case whose
//! graph holds what the exporter does not write (subgraphs) must be refused with an error
//! saying so; every other case must pass from its exported file. The zoo models are
//! written and re-imported too.

#[allow(dead_code)]
#[path = "../conformance.rs"]
mod conformance;

use std::path::Path;

use conformance::Outcome;
use hidet::onnx::{encode_model, OnnxError, OnnxModel};
use hidet::pipeline::{self, CpuModel};

/// The fewest node-test cases that must be exported (1240 of the 1266 that pass both ways
/// today; the 26 with If/Loop/Scan/SequenceMap bodies are refused).
const MIN_EXPORTED: usize = 1200;

/// Writes `model`'s export into `dir` beside links to `case`'s data sets, as a node-test case.
fn exported_case(case: &Path, bytes: &[u8], dir: &Path) -> std::io::Result<()> {
    std::fs::create_dir_all(dir)?;
    std::fs::write(dir.join("model.onnx"), bytes)?;
    for entry in std::fs::read_dir(case)?.flatten() {
        if entry.path().is_dir() {
            std::os::unix::fs::symlink(entry.path(), dir.join(entry.file_name()))?;
        }
    }
    Ok(())
}

#[test]
fn node_test_models_survive_export() {
    let data = conformance::data_dir().expect("ONNX node-test data (scripts/setup_python.sh)");
    let pass_list =
        conformance::read_pass_list(&conformance::list_dir().join("expected_pass.txt")).unwrap();
    let scratch = tempfile::tempdir().unwrap();
    let (mut exported, mut refused, mut failures) = (0, Vec::new(), Vec::new());
    for name in &pass_list {
        let case = data.join(name);
        let model = pipeline::load(&case.join("model.onnx")).unwrap();
        let bytes = match encode_model(&model) {
            Ok(b) => b,
            Err(OnnxError::Unsupported(why)) if why.contains("not exported") => {
                refused.push(format!("{name}: {why}"));
                continue;
            }
            Err(e) => {
                failures.push(format!("{name}: export: {e}"));
                continue;
            }
        };
        let dir = scratch.path().join(name);
        exported_case(&case, &bytes, &dir).unwrap();
        let again = pipeline::load(&dir.join("model.onnx")).unwrap();
        let ops = |m: &OnnxModel| -> Vec<String> {
            m.graph.nodes().iter().map(|n| n.op_type.clone()).collect()
        };
        if ops(&again) != ops(&model) || again.opsets != model.opsets {
            failures.push(format!("{name}: nodes or opsets differ after export"));
            continue;
        }
        match conformance::run_case_with(&dir, None::<fn(&OnnxModel) -> CpuModel>, None) {
            Outcome::Pass => exported += 1,
            other => failures.push(format!("{name}: {}", conformance::reason_of(&other))),
        }
    }
    println!(
        "{exported} node-test models pass from their exported files, {} refused",
        refused.len()
    );
    for r in &refused {
        println!("  refused {r}");
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    assert!(exported >= MIN_EXPORTED, "only {exported} cases exported");
}

#[test]
fn zoo_models_reimport_with_the_same_outputs() {
    let scratch = tempfile::tempdir().unwrap();
    for name in [
        "tiny_cnn",
        "tiny_mlp",
        "tiny_bert",
        "tiny_gpt2",
        "mobilenet_v2",
    ] {
        let model = hidet::Model::zoo(name).unwrap();
        let path = scratch.path().join(format!("{name}.onnx"));
        model.save_onnx(&path).unwrap();
        let again = hidet::Model::load(&path).unwrap();
        assert_eq!(again.inputs(), model.inputs(), "{name}");
        assert_eq!(again.outputs(), model.outputs(), "{name}");
        let inputs: Vec<(String, hidet::Tensor)> =
            hidet::zoo::inputs::complete_inputs(model.graph(), &[], 5)
                .unwrap()
                .into_iter()
                .map(|(n, t, _)| (n, t))
                .collect();
        let want = model.run_reference(&inputs).unwrap();
        let got = again.run_reference(&inputs).unwrap();
        for ((n, w), (_, g)) in want.iter().zip(&got) {
            assert_eq!(
                w.to_le_bytes().unwrap(),
                g.to_le_bytes().unwrap(),
                "{name}: output `{n}` differs after export"
            );
        }
    }
}

#[test]
fn subgraphs_are_refused_naming_the_node() {
    let data = conformance::data_dir().expect("ONNX node-test data (scripts/setup_python.sh)");
    let model = pipeline::load(&data.join("test_if/model.onnx")).unwrap();
    let err = encode_model(&model).unwrap_err().to_string();
    assert!(
        err.contains("(If)") && err.contains("subgraphs are not exported"),
        "{err}"
    );
}
