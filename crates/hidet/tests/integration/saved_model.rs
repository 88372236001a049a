//! Compiled models saved to one file (`hidet compile -o`, `CompiledModel::save`) and run
//! from it with no C compiler and an empty kernel cache, against the compiled model they
//! came from and the reference executor; and every damaged file an error.

use std::path::Path;
use std::process::{Command, Output};

use hidet::onnx::proto::{GraphProto, ModelProto, OperatorSetIdProto};
use hidet::{CompiledModel, Device, Model, Options, Tensor};
use prost::Message;

use crate::common;
use common::{node, value_info, write_npy};

/// `r = Relu(MatMul(x, y) - 0.25)`, `nz = NonZero(r)` (a host step: its shape depends on the
/// data); x: f32[N, 5] (symbolic N), y: f32[5, 7].
fn model_bytes() -> Vec<u8> {
    let quarter = hidet::onnx::proto::TensorProto {
        name: Some("q".into()),
        dims: vec![],
        data_type: Some(1),
        raw_data: Some(0.25f32.to_le_bytes().to_vec()),
        ..Default::default()
    };
    ModelProto {
        ir_version: Some(8),
        opset_import: vec![OperatorSetIdProto {
            domain: Some(String::new()),
            version: Some(17),
        }],
        graph: Some(GraphProto {
            name: Some("saved".into()),
            node: vec![
                node("MatMul", &["x", "y"], &["m"]),
                node("Sub", &["m", "q"], &["s"]),
                node("Relu", &["s"], &["r"]),
                node("NonZero", &["r"], &["nz"]),
            ],
            initializer: vec![quarter],
            input: vec![
                value_info("x", 1, &[Err("N"), Ok(5)]),
                value_info("y", 1, &[Ok(5), Ok(7)]),
            ],
            output: vec![
                value_info("r", 1, &[Err("N"), Ok(7)]),
                value_info("nz", 7, &[Ok(2), Err("K")]),
            ],
            ..Default::default()
        }),
        ..Default::default()
    }
    .encode_to_vec()
}

/// Deterministic values in [-1, 1), none zero.
fn values(n: usize, seed: u32) -> Vec<f32> {
    let mut s = seed.wrapping_mul(2654435761).wrapping_add(12345);
    (0..n)
        .map(|_| {
            s ^= s << 13;
            s ^= s >> 17;
            s ^= s << 5;
            let v = (s % 2000) as f32 / 1000.0 - 1.0;
            if v == 0.0 {
                0.5
            } else {
                v
            }
        })
        .collect()
}

fn inputs(n: usize) -> Vec<(&'static str, Tensor)> {
    vec![
        (
            "x",
            Tensor::new(vec![n, 5], values(n * 5, n as u32)).unwrap(),
        ),
        ("y", Tensor::new(vec![5, 7], values(35, 99)).unwrap()),
    ]
}

#[test]
fn a_saved_model_runs_every_saved_shape_exactly_as_compiled() {
    let dir = tempfile::tempdir().unwrap();
    let model = Model::from_bytes(&model_bytes()).unwrap();
    let compiled = model.compile(&Options::default().threads(2)).unwrap();
    for n in [3, 11] {
        compiled
            .prepare(&[vec![n, 5], vec![5, 7]])
            .expect("compiles for N");
    }
    let path = dir.path().join("m.hidet");
    assert_eq!(
        compiled.save(&path).expect("saves"),
        2,
        "two sets of shapes"
    );
    let loaded = CompiledModel::load(&path, &Options::default().threads(2)).expect("loads");
    assert_eq!(
        loaded.inputs(),
        compiled.inputs(),
        "declared inputs, symbols included"
    );
    assert_eq!(loaded.outputs(), compiled.outputs());
    for n in [3, 11] {
        let want = compiled.run(&inputs(n)).unwrap();
        let got = loaded.run(&inputs(n)).unwrap();
        assert_eq!(got, want, "N = {n}: bit for bit");
        let reference = model.run_reference(&inputs(n)).unwrap();
        assert_eq!(
            got[1], reference[1],
            "NonZero, run on the host, as the reference"
        );
        let shapes = [vec![n, 5], vec![5, 7]];
        let (a, b) = (
            loaded.report(&shapes).unwrap(),
            compiled.report(&shapes).unwrap(),
        );
        assert_eq!(a.kernels, b.kernels);
        assert_eq!(a.host_steps, b.host_steps);
        assert_eq!(a.intermediate_bytes, b.intermediate_bytes);
    }
    let err = loaded.run(&inputs(4)).expect_err("N = 4 was not saved");
    let message = err.to_string();
    assert!(
        message.starts_with("input `x`: expected shape [3, 5] or [11, 5] (a saved model runs"),
        "{message}"
    );
    let err = loaded
        .run(&[("x", Tensor::new(vec![3, 5], values(15, 1)).unwrap())])
        .expect_err("a missing input");
    assert_eq!(err.to_string(), "missing input `y`");
    let err = loaded
        .save(dir.path().join("again.hidet"))
        .expect_err("a loaded model is not saved again");
    assert!(err.to_string().contains("copy that file"), "{err}");
}

#[test]
fn zoo_models_round_trip_through_a_file() {
    let dir = tempfile::tempdir().unwrap();
    for name in ["tiny_cnn", "tiny_bert"] {
        let model = Model::zoo(name).unwrap();
        let compiled = model.compile(&Options::default().threads(2)).unwrap();
        let path = dir.path().join(format!("{name}.hidet"));
        assert_eq!(compiled.save(&path).unwrap(), 1);
        let loaded = CompiledModel::load(&path, &Options::default()).unwrap();
        let feeds: Vec<(String, Tensor)> =
            hidet::zoo::inputs::complete_inputs(model.graph(), &[], hidet::zoo::SEED)
                .unwrap()
                .into_iter()
                .map(|(name, t, _)| (name, t))
                .collect();
        let outputs = compiled.run(&feeds).unwrap();
        assert!(
            outputs
                .iter()
                .all(|(_, t)| t.to_f64_vec().iter().all(|v| v.is_finite())),
            "{name}: finite outputs"
        );
        assert_eq!(
            loaded.run(&feeds).unwrap(),
            compiled.run(&feeds).unwrap(),
            "{name}: bit for bit"
        );
    }
}

#[test]
fn what_cannot_be_saved_or_loaded_is_an_error() {
    let dir = tempfile::tempdir().unwrap();
    let model = Model::from_bytes(&model_bytes()).unwrap();
    let compiled = model.compile(&Options::default()).unwrap();
    let err = compiled
        .save(dir.path().join("none.hidet"))
        .expect_err("nothing compiled yet (symbolic N)");
    assert!(err.to_string().contains("nothing is compiled yet"), "{err}");
    assert!(!dir.path().join("none.hidet").exists(), "no file is left");
    let sim = Model::zoo("tiny_mlp")
        .unwrap()
        .compile(&Options {
            device: Device::CudaSim,
            ..Options::default()
        })
        .unwrap();
    let err = sim
        .save(dir.path().join("sim.hidet"))
        .expect_err("GPU models");
    assert!(
        err.to_string().contains("only models compiled for the CPU"),
        "{err}"
    );

    let path = dir.path().join("tiny.hidet");
    let tiny = Model::zoo("tiny_mlp").unwrap();
    tiny.compile(&Options::default())
        .unwrap()
        .save(&path)
        .unwrap();
    let err = CompiledModel::load(
        &path,
        &Options {
            device: Device::CudaSim,
            ..Options::default()
        },
    )
    .expect_err("saved models run on the CPU");
    assert!(
        err.to_string().contains("saved models run on the CPU"),
        "{err}"
    );
    let err = CompiledModel::load(dir.path().join("missing.hidet"), &Options::default())
        .expect_err("no such file");
    assert!(err.to_string().contains("missing.hidet"), "{err}");
}

/// Truncations at every boundary of the format and flipped bytes in the header, the
/// manifest, the weights and a kernel library: each is an error that names the file, never a
/// crash, both through the API and through `hidet run`.
#[test]
fn damaged_files_are_errors() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("good.hidet");
    let compiled = Model::zoo("tiny_cnn")
        .unwrap()
        .compile(&Options::default())
        .unwrap();
    compiled.save(&path).unwrap();
    let good = std::fs::read(&path).unwrap();
    let len = good.len();
    let mut damaged: Vec<(String, Vec<u8>)> = Vec::new();
    for cut in [
        0,
        7,
        8,
        20,
        51,
        52,
        200,
        len / 3,
        len / 2,
        len - 100,
        len - 1,
    ] {
        damaged.push((format!("cut at {cut}"), good[..cut].to_vec()));
    }
    for at in [9, 15, 30, 60, 300, len / 3, len / 2, len - 200, len - 70] {
        let mut bytes = good.clone();
        bytes[at] ^= 0x10;
        damaged.push((format!("byte {at} flipped"), bytes));
    }
    let loads = |bytes: &[u8]| {
        let p = dir.path().join("bad.hidet");
        std::fs::write(&p, bytes).unwrap();
        CompiledModel::load(&p, &Options::default())
    };
    assert!(loads(&good).is_ok());
    for (what, bytes) in &damaged {
        let err = loads(bytes).expect_err(what);
        let message = err.to_string();
        assert!(message.contains("bad.hidet"), "{what}: {message}");
    }
    // Through the CLI, a damaged file is an error too (the last one written: a flipped byte
    // near the end, in a blob).
    let input = dir.path().join("x.npy");
    write_npy(&input, &[1, 3, 16, 16], &values(3 * 16 * 16, 5));
    let bad = dir.path().join("bad.hidet");
    let o = hidet(
        &[
            "run",
            bad.to_str().unwrap(),
            "--input",
            &format!("input={}", input.display()),
            "--output-dir",
            dir.path().join("out").to_str().unwrap(),
        ],
        &[],
    );
    assert!(!o.status.success());
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("truncated or corrupted"), "{err}");
    assert!(!err.contains("panicked"), "{err}");
}

fn read_npy(path: &Path) -> Vec<f32> {
    let bytes = std::fs::read(path).unwrap();
    npyz::NpyFile::new(&bytes[..])
        .unwrap()
        .into_vec::<f32>()
        .unwrap()
}

fn hidet(args: &[&str], env: &[(&str, &Path)]) -> Output {
    let mut command = Command::new(env!("CARGO_BIN_EXE_hidet"));
    command.args(args);
    for (k, v) in env {
        command.env(k, v);
    }
    command.output().unwrap()
}

/// `hidet compile -o` writes the file; `hidet run FILE` in a fresh process, with `CC`
/// naming no compiler and an empty kernel cache, writes what `hidet run model.onnx` writes.
#[test]
fn the_cli_saves_and_runs_without_a_c_compiler() {
    let dir = tempfile::tempdir().unwrap();
    let onnx = dir.path().join("model.onnx");
    std::fs::write(&onnx, model_bytes()).unwrap();
    let saved = dir.path().join("model.hidet");
    let cache = dir.path().join("cache");
    let o = hidet(
        &[
            "compile",
            onnx.to_str().unwrap(),
            "-o",
            saved.to_str().unwrap(),
        ],
        &[("HIDET_CACHE_DIR", &cache)],
    );
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let stdout = String::from_utf8_lossy(&o.stdout);
    assert!(stdout.contains("saved the compiled model to"), "{stdout}");
    // `hidet compile` binds the symbolic N to 1.
    let (x, y) = (dir.path().join("x.npy"), dir.path().join("y.npy"));
    write_npy(&x, &[1, 5], &values(5, 1));
    write_npy(&y, &[5, 7], &values(35, 99));
    let run = |model: &Path, out: &str, env: &[(&str, &Path)]| {
        let out = dir.path().join(out);
        let o = hidet(
            &[
                "run",
                model.to_str().unwrap(),
                "--input",
                &format!("x={}", x.display()),
                "--input",
                &format!("y={}", y.display()),
                "--output-dir",
                out.to_str().unwrap(),
            ],
            env,
        );
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        read_npy(&out.join("r.npy"))
    };
    let empty = dir.path().join("empty-cache");
    let no_compiler = dir.path().join("no-such-compiler");
    let from_file = run(
        &saved,
        "saved",
        &[("CC", &no_compiler), ("HIDET_CACHE_DIR", &empty)],
    );
    let from_onnx = run(&onnx, "onnx", &[("HIDET_CACHE_DIR", &cache)]);
    assert_eq!(from_file, from_onnx);
    assert!(
        from_file.iter().any(|v| *v > 0.0),
        "some outputs are not zero"
    );
    let cached = std::fs::read_dir(&empty).map_or(0, |d| d.count());
    assert_eq!(
        cached, 0,
        "running the saved model wrote nothing to the kernel cache"
    );
    // `hidet bench` times the saved model as loaded, with synthesized inputs.
    let o = hidet(
        &["bench", saved.to_str().unwrap(), "--runs", "2", "--json"],
        &[("CC", &no_compiler), ("HIDET_CACHE_DIR", &empty)],
    );
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let stdout = String::from_utf8_lossy(&o.stdout);
    let v: serde_json::Value = serde_json::from_str(stdout.lines().last().unwrap()).unwrap();
    assert_eq!(v["compile_seconds"], 0.0, "{v}");
    assert_eq!(v["outputs"][0]["shape"], serde_json::json!([1, 7]), "{v}");
    let o = hidet(&["bench", saved.to_str().unwrap(), "--check"], &[]);
    assert!(
        !o.status.success(),
        "no reference executor for a saved model"
    );
    // `--shape` compiles (and saves) another size of the symbolic N; bad shapes are named.
    let saved4 = dir.path().join("model4.hidet");
    let o = hidet(
        &[
            "compile",
            onnx.to_str().unwrap(),
            "--shape",
            "x=4x5",
            "-o",
            saved4.to_str().unwrap(),
        ],
        &[("HIDET_CACHE_DIR", &cache)],
    );
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let o = hidet(
        &["bench", saved4.to_str().unwrap(), "--runs", "1", "--json"],
        &[],
    );
    let stdout = String::from_utf8_lossy(&o.stdout);
    let v: serde_json::Value = serde_json::from_str(stdout.lines().last().unwrap()).unwrap();
    assert_eq!(v["outputs"][0]["shape"], serde_json::json!([4, 7]), "{v}");
    for (shape, message) in [
        ("x=4x6", "`x`"),
        ("z=1", "`z` is not an input of the model (inputs: x, y)"),
        ("x=4by5", "expected NAME=D1xD2"),
    ] {
        let o = hidet(
            &["compile", onnx.to_str().unwrap(), "--shape", shape],
            &[("HIDET_CACHE_DIR", &cache)],
        );
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(
            !o.status.success() && err.contains(message),
            "{shape}: {err}"
        );
    }
    // The compiler really is absent: compiling the ONNX file there fails.
    let o = hidet(
        &["compile", onnx.to_str().unwrap()],
        &[("CC", &no_compiler), ("HIDET_CACHE_DIR", &empty)],
    );
    assert!(!o.status.success(), "compiling needs the C compiler");
}
