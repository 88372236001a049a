//! Embedding hidet: load a model, compile it, run it from several threads at once.
//!
//! ```sh
//! cargo run --release -p hidet --example embed                 # zoo:tiny_cnn
//! cargo run --release -p hidet --example embed -- model.onnx   # any .onnx file
//! cargo run --release -p hidet --example embed -- zoo:resnet50 --threads 2 --runs 100
//! ```
//!
//! Inputs the model needs are synthesized (seeded random data, ids in range for embedding
//! tables), as `hidet bench` does. Prints the inputs and outputs, checks that two threads
//! running the model at once get the outputs of a single run, and the median time of a
//! run (`--runs`, default 1000) measured through [`CompiledModel::run`].

use std::time::Instant;

use hidet::zoo::inputs::complete_inputs;
use hidet::{CompiledModel, Model, Options, Tensor};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut spec = "zoo:tiny_cnn".to_string();
    let mut options = Options::default();
    let mut runs = 1000usize;
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--threads" => options.threads = Some(args.next().ok_or("--threads N")?.parse()?),
            "--runs" => runs = args.next().ok_or("--runs N")?.parse()?,
            _ => spec = arg,
        }
    }
    let model = match hidet::zoo::strip_prefix(&spec) {
        Some(name) => Model::zoo(name)?,
        None => Model::load(&spec)?,
    };
    for input in model.inputs() {
        println!("input  {}: {} {:?}", input.name, input.dtype, input.shape);
    }
    let compiled: CompiledModel = model.compile(&options)?;
    let inputs: Vec<(String, Tensor)> = complete_inputs(model.graph(), &[], hidet::zoo::SEED)?
        .into_iter()
        .map(|(name, tensor, _)| (name, tensor))
        .collect();

    let outputs = compiled.run(&inputs)?;
    for (name, t) in &outputs {
        println!("output {name}: {} {:?}", t.dtype(), t.shape());
    }

    // The compiled model is Send + Sync; clones share its kernels.
    let concurrent: Vec<Vec<(String, Tensor)>> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..2)
            .map(|_| {
                let (compiled, inputs) = (compiled.clone(), &inputs);
                s.spawn(move || compiled.run(inputs))
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().map_err(|_| "a run panicked")?.map_err(Into::into))
            .collect::<Result<_, Box<dyn std::error::Error>>>()
    })?;
    for run in &concurrent {
        for ((_, a), (name, b)) in outputs.iter().zip(run) {
            if a.to_f64_vec() != b.to_f64_vec() {
                return Err(format!("output {name} differs between concurrent runs").into());
            }
        }
    }
    println!("two concurrent runs: same outputs");

    let mut times = Vec::with_capacity(runs);
    for _ in 0..runs.max(1) {
        let start = Instant::now();
        compiled.run(&inputs)?;
        times.push(start.elapsed().as_secs_f64());
    }
    times.sort_by(f64::total_cmp);
    println!(
        "median run: {:.1} us over {} runs",
        times[times.len() / 2] * 1e6,
        times.len()
    );
    Ok(())
}
