//! Integration tests of the `hidet` binary on small models built with the prost types.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use hidet::onnx::proto::{GraphProto, ModelProto, NodeProto, OperatorSetIdProto, TensorProto};
use prost::Message;

use crate::common;
use common::{node, value_info, write_npy};

/// out:0 = Relu(x + y) * w, x: f32[N, 3] (symbolic N), y: f32[3], w: initializer f32[3].
fn model(extra_nodes: Vec<NodeProto>) -> ModelProto {
    let w = TensorProto {
        name: Some("w".into()),
        dims: vec![3],
        data_type: Some(1),
        raw_data: Some(
            [0.5f32, -2.0, 3.0]
                .iter()
                .flat_map(|v| v.to_le_bytes())
                .collect(),
        ),
        ..Default::default()
    };
    let mut nodes = vec![
        node("Add", &["x", "y"], &["s"]),
        node("Relu", &["s"], &["r"]),
        node("Mul", &["r", "w"], &["out:0"]),
    ];
    nodes.extend(extra_nodes);
    ModelProto {
        ir_version: Some(8),
        opset_import: vec![OperatorSetIdProto {
            domain: Some(String::new()),
            version: Some(17),
        }],
        graph: Some(GraphProto {
            name: Some("tiny".into()),
            node: nodes,
            initializer: vec![w],
            input: vec![
                value_info("x", 1, &[Err("N"), Ok(3)]),
                value_info("y", 1, &[Ok(3)]),
            ],
            output: vec![value_info("out:0", 1, &[Err("N"), Ok(3)])],
            ..Default::default()
        }),
        ..Default::default()
    }
}

fn write_model(dir: &Path, m: &ModelProto) -> PathBuf {
    let p = dir.join("model.onnx");
    std::fs::write(&p, m.encode_to_vec()).unwrap();
    p
}

fn hidet(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_hidet"))
        .args(args)
        .output()
        .unwrap()
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

#[test]
fn run_writes_sanitized_outputs_with_correct_values() {
    let dir = tempfile::tempdir().unwrap();
    let m = write_model(dir.path(), &model(vec![]));
    let x: Vec<f32> = vec![0.3, -1.7, 2.2, -0.4, 1.1, -2.9];
    let y: Vec<f32> = vec![0.6, 1.3, -0.8];
    let xp = write_npy(&dir.path().join("x.npy"), &[2, 3], &x);
    let yp = write_npy(&dir.path().join("y.npy"), &[3], &y);
    let out = dir.path().join("out");
    let o = hidet(&[
        "run",
        m.to_str().unwrap(),
        "--input",
        &format!("x={xp}"),
        "--input",
        &format!("y={yp}"),
        "--output-dir",
        out.to_str().unwrap(),
        "--reference",
        "--threads",
        "1",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let f = std::fs::File::open(out.join("out_0.npy")).unwrap();
    let npy = npyz::NpyFile::new(std::io::BufReader::new(f)).unwrap();
    assert_eq!(npy.shape(), &[2, 3]);
    let got: Vec<f32> = npy.into_vec().unwrap();
    let w = [0.5f32, -2.0, 3.0];
    let want: Vec<f32> = (0..6)
        .map(|i| (x[i] + y[i % 3]).max(0.0) * w[i % 3])
        .collect();
    assert_eq!(got, want);
}

#[test]
fn missing_input_is_named() {
    let dir = tempfile::tempdir().unwrap();
    let m = write_model(dir.path(), &model(vec![]));
    let xp = write_npy(&dir.path().join("x.npy"), &[1, 3], &[1.0f32, 2.0, 3.0]);
    let o = hidet(&[
        "run",
        m.to_str().unwrap(),
        "--input",
        &format!("x={xp}"),
        "--output-dir",
        dir.path().to_str().unwrap(),
    ]);
    assert!(!o.status.success());
    assert!(stderr(&o).contains("missing input `y`"), "{}", stderr(&o));
}

#[test]
fn wrong_shape_and_dtype_name_expected_and_given() {
    let dir = tempfile::tempdir().unwrap();
    let m = write_model(dir.path(), &model(vec![]));
    let xp = write_npy(&dir.path().join("x.npy"), &[1, 3], &[1.0f32, 2.0, 3.0]);
    let bad_shape = write_npy(&dir.path().join("y4.npy"), &[4], &[1.0f32; 4]);
    let o = hidet(&[
        "run",
        m.to_str().unwrap(),
        "--input",
        &format!("x={xp}"),
        "--input",
        &format!("y={bad_shape}"),
        "--output-dir",
        dir.path().to_str().unwrap(),
    ]);
    assert!(!o.status.success());
    let e = stderr(&o);
    assert!(
        e.contains("`y`") && e.contains("[3]") && e.contains("[4]"),
        "{e}"
    );
    let bad_dtype = write_npy(&dir.path().join("yi.npy"), &[3], &[1i64, 2, 3]);
    let o = hidet(&[
        "run",
        m.to_str().unwrap(),
        "--input",
        &format!("x={xp}"),
        "--input",
        &format!("y={bad_dtype}"),
        "--output-dir",
        dir.path().to_str().unwrap(),
    ]);
    assert!(!o.status.success());
    let e = stderr(&o);
    assert!(
        e.contains("`y`") && e.contains("f32") && e.contains("i64"),
        "{e}"
    );
}

#[test]
fn malformed_and_unsupported_models_fail_cleanly() {
    let dir = tempfile::tempdir().unwrap();
    let m = write_model(dir.path(), &model(vec![]));
    let bytes = std::fs::read(&m).unwrap();
    let truncated = dir.path().join("truncated.onnx");
    std::fs::write(&truncated, &bytes[..bytes.len() / 2]).unwrap();
    let o = hidet(&["info", truncated.to_str().unwrap()]);
    assert!(!o.status.success());
    assert!(stderr(&o).contains("error:"), "{}", stderr(&o));

    let unsupported = model(vec![
        node("FancyOp", &["x"], &["f1"]),
        node("FancyOp", &["f1"], &["f2"]),
        node("OtherOp", &["x"], &["f3"]),
    ]);
    let p = write_model(dir.path(), &unsupported);
    let o = hidet(&["info", p.to_str().unwrap()]);
    assert!(!o.status.success());
    let e = stderr(&o);
    assert!(
        e.contains("FancyOp x2") && e.contains("OtherOp x1") && e.contains("opset ai.onnx 17"),
        "{e}"
    );
}

#[test]
fn info_and_ops_succeed() {
    let dir = tempfile::tempdir().unwrap();
    let m = write_model(dir.path(), &model(vec![]));
    let o = hidet(&["info", m.to_str().unwrap()]);
    assert!(o.status.success(), "{}", stderr(&o));
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(
        out.contains("x: f32[N, 3]") && out.contains("parameters: 3 (12 bytes)"),
        "{out}"
    );
    let o = hidet(&["ops"]);
    assert!(o.status.success());
    assert!(String::from_utf8_lossy(&o.stdout).contains("MatMul"));
}

#[test]
fn zoo_models_export_and_run_by_name() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("tiny_mlp.onnx");
    let o = hidet(&["export", "zoo:tiny_mlp", "-o", file.to_str().unwrap()]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(String::from_utf8_lossy(&o.stdout).contains("8 nodes"));
    let info = |model: &str| {
        let o = hidet(&["info", model]);
        assert!(o.status.success(), "{}", stderr(&o));
        let out = String::from_utf8_lossy(&o.stdout).into_owned();
        out.lines().skip(2).collect::<Vec<_>>().join("\n")
    };
    // Everything but the model line and opsets is the same for the zoo model and its file.
    let from_zoo = info("zoo:tiny_mlp");
    assert!(from_zoo.contains("input: f32[3, 37]"), "{from_zoo}");
    assert_eq!(from_zoo, info(file.to_str().unwrap()));

    let x: Vec<f32> = (0..3 * 37)
        .map(|i| ((i * 7 % 23) as f32 - 11.0) / 5.0)
        .collect();
    let xp = write_npy(&dir.path().join("x.npy"), &[3, 37], &x);
    let outputs = |model: &str, out: &str| {
        let out = dir.path().join(out);
        let input = format!("input={xp}");
        let o = hidet(&[
            "run",
            model,
            "--input",
            &input,
            "--output-dir",
            out.to_str().unwrap(),
        ]);
        assert!(o.status.success(), "{}", stderr(&o));
        std::fs::read(out.join("probs.npy")).unwrap()
    };
    assert_eq!(
        outputs("zoo:tiny_mlp", "zoo"),
        outputs(file.to_str().unwrap(), "file")
    );

    let o = hidet(&["export", "zoo:no_such_model", "-o", file.to_str().unwrap()]);
    assert!(!o.status.success());
    assert!(stderr(&o).contains("no_such_model"), "{}", stderr(&o));
    let o = hidet(&["export", "zoo:tiny_mlp", "-o", "/nonexistent/dir/m.onnx"]);
    assert!(
        stderr(&o).contains("cannot write `/nonexistent/dir/m.onnx`"),
        "{}",
        stderr(&o)
    );
}

/// The test model and its inputs, written under `dir`: `--input` arguments and the model.
fn cached_run_files(dir: &Path) -> (PathBuf, [String; 4]) {
    let m = write_model(dir, &model(vec![]));
    let xp = write_npy(
        &dir.join("x.npy"),
        &[2, 3],
        &[0.3f32, -1.7, 2.2, -0.4, 1.1, -2.9],
    );
    let yp = write_npy(&dir.join("y.npy"), &[3], &[0.6f32, 1.3, -0.8]);
    let inputs = [
        "--input".into(),
        format!("x={xp}"),
        "--input".into(),
        format!("y={yp}"),
    ];
    (m, inputs)
}

/// `hidet run` of the files of [`cached_run_files`] with a private kernel cache at `cache`,
/// writing under `out`; the process's output and the values written.
fn run_cached(files: &(PathBuf, [String; 4]), cache: &Path, out: &Path) -> (Output, Vec<f32>) {
    let o = Command::new(env!("CARGO_BIN_EXE_hidet"))
        .arg("run")
        .arg(&files.0)
        .args(&files.1)
        .arg("--output-dir")
        .arg(out)
        .env("HIDET_CACHE_DIR", cache)
        .output()
        .unwrap();
    if !o.status.success() {
        return (o, Vec::new());
    }
    let f = std::fs::File::open(out.join("out_0.npy")).unwrap();
    let values = npyz::NpyFile::new(std::io::BufReader::new(f))
        .unwrap()
        .into_vec()
        .unwrap();
    (o, values)
}

/// Every `lib.so` of the kernel cache under `cache`.
fn cached_libraries(cache: &Path) -> Vec<PathBuf> {
    let mut found = Vec::new();
    let mut dirs = vec![cache.to_path_buf()];
    while let Some(dir) = dirs.pop() {
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                dirs.push(path);
            } else if path.file_name().is_some_and(|n| n == "lib.so") {
                found.push(path);
            }
        }
    }
    found
}

/// A cached kernel library overwritten with garbage (its digest then disagrees), or with
/// garbage under a matching digest (it then fails to load), is rebuilt by the next run, with
/// a warning naming it, and the outputs are the same.
#[test]
fn a_damaged_kernel_cache_heals_itself() {
    let dir = tempfile::tempdir().unwrap();
    let cache = dir.path().join("cache");
    let files = cached_run_files(dir.path());
    let (o, first) = run_cached(&files, &cache, &dir.path().join("out0"));
    assert!(o.status.success(), "{}", stderr(&o));
    let libraries = cached_libraries(&cache);
    assert!(!libraries.is_empty());
    for (round, matching_digest) in [false, true].into_iter().enumerate() {
        for lib in &libraries {
            let garbage = b"\x7fELF but not really a library";
            std::fs::write(lib, garbage).unwrap();
            if matching_digest {
                use sha2::Digest;
                let digest: String = sha2::Sha256::digest(garbage)
                    .iter()
                    .map(|b| format!("{b:02x}"))
                    .collect();
                std::fs::write(lib.with_extension("so.sha256"), digest).unwrap();
            }
        }
        let out = dir.path().join(format!("out{}", round + 1));
        let (o, again) = run_cached(&files, &cache, &out);
        assert!(o.status.success(), "{}", stderr(&o));
        let warning = stderr(&o);
        assert!(
            warning.contains("rebuilding") && warning.contains(libraries[0].to_str().unwrap()),
            "{warning}"
        );
        assert_eq!(again, first);
    }
}

/// Processes compiling the same kernels into one empty cache at once all load complete
/// libraries and compute the same outputs.
#[test]
fn concurrent_processes_share_a_cache_safely() {
    let dir = tempfile::tempdir().unwrap();
    let cache = dir.path().join("cache");
    let files = cached_run_files(dir.path());
    let runs: Vec<(Output, Vec<f32>)> = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..4)
            .map(|i| {
                let (files, cache) = (&files, &cache);
                let out = dir.path().join(format!("out{i}"));
                scope.spawn(move || run_cached(files, cache, &out))
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    for (o, values) in &runs {
        assert!(o.status.success(), "{}", stderr(o));
        assert_eq!(values, &runs[0].1);
        assert!(!stderr(o).contains("rebuilding"), "{}", stderr(o));
    }
    assert_eq!(runs[0].1.len(), 6);
}

/// `hidet compile --json` counts the host steps and names their operators (a `NonZero`,
/// whose output shape depends on the data, cannot be a kernel); the text report lists them.
#[test]
fn compile_reports_host_steps_by_operator() {
    let dir = tempfile::tempdir().unwrap();
    let mut m = model(vec![node("NonZero", &["out:0"], &["nz"])]);
    let graph = m.graph.as_mut().unwrap();
    graph.output.push(value_info("nz", 7, &[Ok(2), Err("K")]));
    let path = write_model(dir.path(), &m);
    let path = path.to_str().unwrap();
    let o = hidet(&["compile", path, "--json"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let stdout = String::from_utf8_lossy(&o.stdout);
    let v: serde_json::Value = serde_json::from_str(stdout.lines().last().unwrap()).unwrap();
    assert_eq!(v["host_steps"], 1, "{v}");
    assert_eq!(v["host_ops"], serde_json::json!({"NonZero": 1}), "{v}");
    let o = hidet(&["compile", path]);
    assert!(o.status.success(), "{}", stderr(&o));
    let stdout = String::from_utf8_lossy(&o.stdout);
    assert!(stdout.contains("host steps: NonZero x1"), "{stdout}");
}

/// `hidet run --device cuda-sim` runs the compiled CUDA kernels in the GPU simulator and
/// writes the same values as the CPU; `--device cuda` (also through `HIDET_DEVICE`) on a
/// machine without an NVIDIA driver or GPU is a clear error saying which.
#[test]
fn run_on_the_simulated_gpu_and_cuda_without_a_gpu() {
    let dir = tempfile::tempdir().unwrap();
    let m = write_model(dir.path(), &model(vec![]));
    let x: Vec<f32> = vec![0.3, -1.7, 2.2, -0.4, 1.1, -2.9];
    let y: Vec<f32> = vec![0.6, 1.3, -0.8];
    let xp = write_npy(&dir.path().join("x.npy"), &[2, 3], &x);
    let yp = write_npy(&dir.path().join("y.npy"), &[3], &y);
    let out = dir.path().join("out");
    let args = |device: &str| -> Vec<String> {
        [
            "run",
            m.to_str().unwrap(),
            "--input",
            &format!("x={xp}"),
            "--input",
            &format!("y={yp}"),
            "--output-dir",
            out.to_str().unwrap(),
            "--device",
            device,
        ]
        .map(String::from)
        .to_vec()
    };
    let run = |a: Vec<String>| {
        let a: Vec<&str> = a.iter().map(String::as_str).collect();
        hidet(&a)
    };
    let o = run(args("cuda-sim"));
    assert!(o.status.success(), "{}", stderr(&o));
    let f = std::fs::File::open(out.join("out_0.npy")).unwrap();
    let got: Vec<f32> = npyz::NpyFile::new(std::io::BufReader::new(f))
        .unwrap()
        .into_vec()
        .unwrap();
    let w = [0.5f32, -2.0, 3.0];
    let want: Vec<f32> = (0..6)
        .map(|i| (x[i] + y[i % 3]).max(0.0) * w[i % 3])
        .collect();
    assert_eq!(got, want);

    // Where a GPU is present the run succeeds; elsewhere the error names the device and why.
    let no_gpu = |o: &std::process::Output| {
        let e = stderr(o);
        o.status.success()
            || (e.contains("--device cuda:") && (e.contains("driver") || e.contains("device")))
    };
    let o = run(args("cuda"));
    assert!(no_gpu(&o), "{}", stderr(&o));
    let mut a = args("cpu");
    a.truncate(a.len() - 2);
    let o = Command::new(env!("CARGO_BIN_EXE_hidet"))
        .args(&a)
        .env("HIDET_DEVICE", "cuda")
        .output()
        .unwrap();
    assert!(no_gpu(&o), "{}", stderr(&o));
    let o = run(args("tpu"));
    assert!(!o.status.success());
    assert!(
        stderr(&o).contains("unknown device `tpu`"),
        "{}",
        stderr(&o)
    );
}

/// `hidet compile --device cuda-sim --arch sm_90 --json` reports the device and architecture
/// and, where NVRTC is found, that every kernel compiled without spills.
#[test]
fn compile_for_the_simulated_gpu_reports_the_architecture() {
    let o = hidet(&[
        "compile",
        "zoo:tiny_mlp",
        "--device",
        "cuda-sim",
        "--arch",
        "sm_90",
        "--json",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let stdout = String::from_utf8_lossy(&o.stdout);
    let last = stdout.lines().last().unwrap_or_default();
    let v: serde_json::Value = serde_json::from_str(last).unwrap();
    assert_eq!(v["device"], "cuda-sim");
    assert_eq!(v["arch"], "sm_90");
    assert_eq!(v["host_steps"], 0);
    assert!(v["kernels"].as_u64().unwrap() > 0);
    if v["nvrtc"] == true {
        assert_eq!(v["spilling_kernels"], serde_json::json!([]));
    }
    let o = hidet(&[
        "compile",
        "zoo:tiny_mlp",
        "--device",
        "cuda-sim",
        "--arch",
        "sm_75",
    ]);
    assert!(!o.status.success());
}

/// `hidet compile --device cuda --arch sm_90` on a machine without a GPU compiles every kernel
/// with NVRTC into the cubin/PTX cache under `HIDET_CACHE_DIR`, keyed exactly as the GPU
/// device looks kernels up: each emitted kernel source is found there for sm_90 without a
/// compiler. Skipped where NVRTC is missing or a GPU is present (the command then compiles
/// for that GPU instead).
#[test]
fn compile_for_cuda_without_a_gpu_fills_the_kernel_cache() {
    use hidet_cuda::{Arch, CompileOptions, CudaKernelCache, Nvrtc};
    if Nvrtc::global().is_err() {
        eprintln!("skipped: NVRTC not found (scripts/setup_python.sh installs it)");
        return;
    }
    if hidet_cuda::runtime::Gpu::device_count().is_ok_and(|n| n > 0) {
        eprintln!("skipped: a GPU is present");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let (cache, emit) = (dir.path().join("cache"), dir.path().join("emit"));
    let o = Command::new(env!("CARGO_BIN_EXE_hidet"))
        .args([
            "compile",
            "zoo:tiny_mlp",
            "--device",
            "cuda",
            "--arch",
            "sm_90",
        ])
        .arg("--emit-source")
        .arg(&emit)
        .arg("--json")
        .env("HIDET_CACHE_DIR", &cache)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", stderr(&o));
    let report: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(report["arch"], "sm_90");
    assert_eq!(report["nvrtc"], true);
    let kernels = report["kernels"].as_u64().unwrap();
    let found = std::fs::read_dir(&emit)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "src"))
        .map(|p| {
            let source = std::fs::read_to_string(&p).unwrap();
            CudaKernelCache::new(&cache)
                .find_compiled(&source, Arch::SM90, &CompileOptions::default())
                .unwrap()
                .unwrap_or_else(|| panic!("{} is not in the cache", p.display()))
        })
        .count();
    // One source per distinct kernel: identical tasks share one image.
    let distinct = report["compiler_invocations"].as_u64().unwrap();
    assert_eq!(found as u64, distinct);
    assert!(
        distinct >= 1 && distinct <= kernels,
        "{distinct} of {kernels}"
    );
}

/// A reader that has gone (`hidet ops | head -1`) ends the tool quietly: no panic message,
/// killed by `SIGPIPE` like any other command-line tool.
#[cfg(unix)]
#[test]
fn a_closed_pipe_ends_the_tool_without_a_panic() {
    use std::os::unix::process::ExitStatusExt;

    let (reader, writer) = std::io::pipe().unwrap();
    drop(reader);
    let o = Command::new(env!("CARGO_BIN_EXE_hidet"))
        .arg("ops")
        .stdout(writer)
        .output()
        .unwrap();
    assert!(!stderr(&o).contains("panicked"), "{}", stderr(&o));
    // SIGPIPE is signal 13 on every Unix this runs on.
    assert_eq!(
        o.status.signal(),
        Some(13),
        "{:?}: {}",
        o.status,
        stderr(&o)
    );
}
