//! Integration tests of `hidet bench`, `hidet compile` and `hidet zoo` on the small zoo
//! models (each test compiles into its own kernel cache).

use std::path::Path;
use std::process::{Command, Output};

use hidet::graph::Tensor;
use hidet::pipeline;
use hidet::zoo;

use crate::common;
use common::write_npy;

fn hidet(cache: &Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_hidet"))
        .args(args)
        .env("HIDET_CACHE_DIR", cache)
        .output()
        .expect("the hidet binary runs")
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// The last stdout line, parsed as one JSON object.
fn last_json(o: &Output) -> serde_json::Value {
    let out = text(&o.stdout);
    let line = out.lines().last().unwrap_or_default();
    let v: serde_json::Value = serde_json::from_str(line)
        .unwrap_or_else(|e| panic!("last line is not JSON ({e}): {line}\nstdout:\n{out}"));
    assert!(v.is_object(), "{line}");
    v
}

fn num(v: &serde_json::Value, key: &str) -> f64 {
    v[key]
        .as_f64()
        .unwrap_or_else(|| panic!("`{key}` is missing or not a number in {v}"))
}

#[test]
fn bench_json_has_the_fields_and_matches_the_reference() {
    let cache = tempfile::tempdir().unwrap();
    let o = hidet(
        cache.path(),
        &[
            "bench",
            "zoo:tiny_cnn",
            "--json",
            "--runs",
            "3",
            "--warmup",
            "1",
            "--threads",
            "2",
            "--check",
        ],
    );
    assert!(o.status.success(), "{}", text(&o.stderr));
    let v = last_json(&o);
    assert_eq!(v["model"], "zoo:tiny_cnn");
    assert_eq!(v["runs"], 3);
    assert_eq!(v["threads"], 2);
    let (min, median, max) = (num(&v, "min_ms"), num(&v, "median_ms"), num(&v, "max_ms"));
    assert!(0.0 < min && min <= median && median <= max, "{v}");
    assert!(num(&v, "compile_seconds") > 0.0, "{v}");
    assert!(num(&v, "kernels") >= 1.0, "{v}");
    assert!(num(&v, "intermediate_bytes") > 0.0, "{v}");
    // The compiled outputs agree with the reference executor and are finite and non-trivial.
    assert!(num(&v, "max_rel_diff") < 1e-4, "{v}");
    let out = &v["outputs"][0];
    assert_eq!(out["name"], "output");
    assert_eq!(out["shape"], serde_json::json!([1, 10]));
    assert_eq!(out["finite"], true);
    assert!(
        num(out, "max_abs") > 1e-3 && num(out, "max_abs") < 1e3,
        "{out}"
    );
}

#[test]
fn bench_profile_times_every_kernel() {
    let cache = tempfile::tempdir().unwrap();
    let args = [
        "bench",
        "zoo:tiny_cnn",
        "--runs",
        "3",
        "--warmup",
        "1",
        "--threads",
        "2",
    ];
    let mut with_json = args.to_vec();
    with_json.extend(["--profile", "--json"]);
    let o = hidet(cache.path(), &with_json);
    assert!(o.status.success(), "{}", text(&o.stderr));
    let v = last_json(&o);
    let rows = v["profile"].as_array().expect("a profile array");
    assert_eq!(
        rows.len() as f64,
        num(&v, "kernels"),
        "one row per kernel step: {v}"
    );
    let medians: Vec<f64> = rows.iter().map(|r| num(r, "median_ms")).collect();
    assert!(
        medians.windows(2).all(|w| w[0] >= w[1]),
        "slowest first: {medians:?}"
    );
    assert!(medians.iter().all(|&m| m >= 0.0));
    assert!(
        rows.iter()
            .any(|r| r["label"].as_str().is_some_and(|l| l.contains("conv"))
                && num(r, "gflops") > 0.0),
        "the convolution kernel reports GFLOP/s: {v}"
    );
    let report = text(&o.stdout);
    assert!(
        report.contains("profile:") && report.contains("GFLOP/s"),
        "{report}"
    );
    let mut reference = args.to_vec();
    reference.extend(["--profile", "--reference"]);
    let o = hidet(cache.path(), &reference);
    assert!(!o.status.success(), "--profile times compiled kernels only");
}

#[test]
fn bench_fills_token_ids_and_masks_for_a_transformer() {
    let cache = tempfile::tempdir().unwrap();
    let o = hidet(
        cache.path(),
        &[
            "bench",
            "zoo:tiny_bert",
            "--json",
            "--runs",
            "1",
            "--warmup",
            "0",
            "--check",
        ],
    );
    assert!(o.status.success(), "{}", text(&o.stderr));
    let stdout = text(&o.stdout);
    assert!(
        stdout.contains("input input_ids: i64[1, 19] (random ids in [0, 101))"),
        "{stdout}"
    );
    assert!(
        stdout.contains("input token_type_ids: i64[1, 19] (random ids in [0, 2))"),
        "{stdout}"
    );
    assert!(
        stdout.contains("input attention_mask: i64[1, 19] (ones)"),
        "{stdout}"
    );
    let v = last_json(&o);
    assert!(num(&v, "max_rel_diff") < 1e-4, "{v}");
    assert_eq!(v["outputs"].as_array().map(Vec::len), Some(2), "{v}");
}

#[test]
fn bench_uses_a_given_input_and_times_the_reference_executor() {
    let dir = tempfile::tempdir().unwrap();
    let x: Vec<f32> = (0..3 * 37)
        .map(|i| ((i * 37 % 101) as f32 - 50.0) / 17.0)
        .collect();
    let xp = dir.path().join("x.npy");
    write_npy(&xp, &[3, 37], &x);
    let o = hidet(
        dir.path(),
        &[
            "bench",
            "zoo:tiny_mlp",
            "--input",
            &format!("input={}", xp.display()),
            "--reference",
            "--runs",
            "2",
            "--json",
        ],
    );
    assert!(o.status.success(), "{}", text(&o.stderr));
    let v = last_json(&o);
    assert_eq!(v["executor"], "reference");
    assert_eq!(v["kernels"], 0);
    // The reported output is the model applied to the given input.
    let graph = zoo::build("tiny_mlp").unwrap();
    let model = hidet::onnx::OnnxModel {
        graph,
        ir_version: 8,
        opsets: vec![(String::new(), 17)],
        producer: "test".into(),
    };
    let want = pipeline::run_reference(
        &model,
        &[("input".into(), Tensor::new(vec![3, 37], x).unwrap())],
    )
    .unwrap();
    let want_max = want[0]
        .1
        .to_f64_vec()
        .iter()
        .fold(0f64, |m, a| m.max(a.abs()));
    let got_max = num(&v["outputs"][0], "max_abs");
    assert!((got_max - want_max).abs() < 1e-6, "{got_max} vs {want_max}");
    assert!(text(&o.stdout).contains("input input: f32[3, 37] (given)"));
}

#[test]
fn compile_emits_sources_and_the_fused_graph() {
    let dir = tempfile::tempdir().unwrap();
    let emit = dir.path().join("emitted");
    let o = hidet(
        dir.path(),
        &[
            "compile",
            "zoo:tiny_mlp",
            "--emit-source",
            emit.to_str().unwrap(),
            "--json",
        ],
    );
    assert!(o.status.success(), "{}", text(&o.stderr));
    let v = last_json(&o);
    let kernels = num(&v, "kernels");
    assert!(kernels >= 1.0, "{v}");
    assert!(num(&v, "compile_seconds") > 0.0, "{v}");
    assert!(num(&v, "intermediate_bytes") > 0.0, "{v}");
    let dump = std::fs::read_to_string(emit.join("partition.txt")).unwrap();
    assert!(
        dump.contains(&format!("{} kernels", kernels as usize)),
        "{dump}"
    );
    for op in ["Relu", "LayerNormalization", "Softmax"] {
        assert!(
            dump.contains(op),
            "{op} missing from the fused graph:\n{dump}"
        );
    }
    let sources: Vec<String> = std::fs::read_dir(&emit)
        .unwrap()
        .filter_map(|e| e.ok())
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|x| x == "src"))
        .map(|p| std::fs::read_to_string(p).unwrap())
        .collect();
    assert!(
        !sources.is_empty(),
        "no kernel sources in {}",
        emit.display()
    );
    assert!(sources.iter().all(|s| s.contains('{') && s.len() > 100));

    // A second compile hits the kernel cache and reports the same kernels.
    let o = hidet(dir.path(), &["compile", "zoo:tiny_mlp", "--json"]);
    assert!(o.status.success(), "{}", text(&o.stderr));
    let again = last_json(&o);
    assert_eq!(again["kernels"], v["kernels"]);
    assert_eq!(again["compiler_invocations"], 0, "{again}");
}

#[test]
fn compile_text_report_names_kernels_and_memory() {
    let dir = tempfile::tempdir().unwrap();
    let o = hidet(dir.path(), &["compile", "zoo:tiny_cnn"]);
    assert!(o.status.success(), "{}", text(&o.stderr));
    let out = text(&o.stdout);
    assert!(
        out.contains("zoo:tiny_cnn:") && out.contains("kernels"),
        "{out}"
    );
    assert!(out.contains("MiB intermediates"), "{out}");
}

#[test]
fn bad_models_fail_with_a_clear_message() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("nope.onnx");
    for cmd in ["bench", "compile"] {
        let o = hidet(dir.path(), &[cmd, missing.to_str().unwrap()]);
        assert!(!o.status.success());
        let e = text(&o.stderr);
        assert!(
            e.contains("no such model file") && e.contains("nope.onnx"),
            "{e}"
        );

        let o = hidet(dir.path(), &[cmd, "zoo:resnet51"]);
        assert!(!o.status.success());
        let e = text(&o.stderr);
        assert!(e.contains("unknown zoo model `resnet51`"), "{e}");
        assert!(e.contains("resnet50") && e.contains("gpt2"), "{e}");
    }
    let garbage = dir.path().join("garbage.onnx");
    std::fs::write(&garbage, b"\xff\xff not a protobuf").unwrap();
    let o = hidet(dir.path(), &["bench", garbage.to_str().unwrap()]);
    assert!(!o.status.success());
    assert!(
        text(&o.stderr).starts_with("error: "),
        "{}",
        text(&o.stderr)
    );
}

#[test]
fn bench_rejects_bad_arguments() {
    let dir = tempfile::tempdir().unwrap();
    let o = hidet(dir.path(), &["bench", "zoo:tiny_mlp", "--runs", "0"]);
    assert!(!o.status.success());
    assert!(text(&o.stderr).contains("--runs"), "{}", text(&o.stderr));
    let xp = dir.path().join("x.npy");
    write_npy(&xp, &[3, 37], &[0.5; 111]);
    let o = hidet(
        dir.path(),
        &[
            "bench",
            "zoo:tiny_mlp",
            "--input",
            &format!("nosuch={}", xp.display()),
        ],
    );
    assert!(!o.status.success());
    assert!(text(&o.stderr).contains("nosuch"), "{}", text(&o.stderr));
}

#[test]
fn zoo_lists_every_model() {
    let dir = tempfile::tempdir().unwrap();
    for args in [&["zoo"][..], &["bench", "--list"][..]] {
        let o = hidet(dir.path(), args);
        assert!(o.status.success(), "{}", text(&o.stderr));
        let out = text(&o.stdout);
        for e in zoo::entries() {
            assert!(out.contains(&format!("zoo:{}", e.name)), "{out}");
        }
        for name in [
            "resnet50",
            "inception_v3",
            "mobilenet_v2",
            "bert_base",
            "gpt2",
        ] {
            assert!(out.contains(&format!("zoo:{name} ")), "{out}");
        }
    }
}

/// The kernel sources `hidet compile zoo:tiny_mlp` emits under `HIDET_CPU_FEATURES=features`
/// (compiling only, so any x86-64 target works on any x86-64 host), and the JSON report.
fn sources_for_features(cache: &Path, features: &str) -> (String, serde_json::Value) {
    let emit = cache.join(format!("emitted-{features}"));
    let o = Command::new(env!("CARGO_BIN_EXE_hidet"))
        .args(["compile", "zoo:tiny_mlp", "--json", "--emit-source"])
        .arg(&emit)
        .env("HIDET_CACHE_DIR", cache)
        .env("HIDET_CPU_FEATURES", features)
        .output()
        .expect("the hidet binary runs");
    assert!(o.status.success(), "{features}: {}", text(&o.stderr));
    let mut sources = String::new();
    for entry in std::fs::read_dir(&emit).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_some_and(|x| x == "src") {
            sources += &std::fs::read_to_string(path).unwrap();
        }
    }
    (sources, last_json(&o))
}

#[test]
fn cpu_features_env_pins_the_target_of_generated_code() {
    if !cfg!(target_arch = "x86_64") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let (avx2, report) = sources_for_features(dir.path(), "avx2,fma");
    assert!(avx2.contains("f32x8") && !avx2.contains("f32x16"), "{avx2}");
    assert_eq!(
        report["target_features"],
        serde_json::json!(["sse2", "avx", "avx2", "fma"])
    );
    let (avx512, report) = sources_for_features(dir.path(), "avx512f,avx512bw,avx512dq,avx512vl");
    assert!(avx512.contains("f32x16"), "{avx512}");
    assert!(report["target_features"]
        .as_array()
        .unwrap()
        .contains(&serde_json::json!("avx512f")));

    let o = Command::new(env!("CARGO_BIN_EXE_hidet"))
        .args(["compile", "zoo:tiny_mlp"])
        .env("HIDET_CACHE_DIR", dir.path())
        .env("HIDET_CPU_FEATURES", "avx2,sse9")
        .output()
        .unwrap();
    assert!(!o.status.success());
    let e = text(&o.stderr);
    assert!(
        e.contains("HIDET_CPU_FEATURES") && e.contains("`sse9`"),
        "{e}"
    );
}

#[test]
fn threads_must_be_a_positive_count() {
    let dir = tempfile::tempdir().unwrap();
    for cmd in ["bench", "compile", "tune"] {
        let o = hidet(dir.path(), &[cmd, "zoo:tiny_mlp", "--threads", "0"]);
        assert!(!o.status.success());
        let e = text(&o.stderr);
        assert!(e.contains("--threads") && e.contains("`0`"), "{cmd}: {e}");
    }
    let o = hidet(
        dir.path(),
        &[
            "bench",
            "zoo:tiny_mlp",
            "--threads",
            "1",
            "--runs",
            "2",
            "--json",
        ],
    );
    assert!(o.status.success(), "{}", text(&o.stderr));
    assert_eq!(last_json(&o)["threads"], 1);
}
