//! The `hidet` command-line tool: `hidet info`, `hidet ops`, `hidet run`.
//! Every error is printed to stderr and exits with status 1; nothing panics on bad input.

mod cli;

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};

#[derive(Parser)]
#[command(name = "hidet", version, about = "hidet deep-learning compiler")]
struct Args {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Print a model's inputs, outputs, operator histogram, parameters and estimated FLOPs.
    Info {
        /// The .onnx file.
        model: PathBuf,
    },
    /// List the supported operators with their opset ranges.
    Ops,
    /// Run a model on .npy inputs and write every output to DIR/<name>.npy.
    Run {
        /// The .onnx file.
        model: PathBuf,
        /// An input as NAME=FILE.npy (repeat for every input).
        #[arg(long = "input", value_name = "NAME=FILE.npy")]
        inputs: Vec<String>,
        /// Folder for the outputs (created if missing).
        #[arg(long, value_name = "DIR")]
        output_dir: PathBuf,
        /// Use the reference executor (every operator's `eval`) instead of compiled kernels.
        #[arg(long)]
        reference: bool,
        /// Worker threads (default: all cores).
        #[arg(long, value_name = "N")]
        threads: Option<usize>,
    },
}

fn main() -> ExitCode {
    let args = Args::parse();
    let result = match args.command {
        Command::Info { model } => cli::info::run(&model),
        Command::Ops => cli::ops::run(),
        Command::Run {
            model,
            inputs,
            output_dir,
            reference,
            threads,
        } => cli::run::run(&model, &inputs, &output_dir, reference, threads),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}
