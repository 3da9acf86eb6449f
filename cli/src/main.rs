//! The `canopy` command-line tool.

mod backend;
mod bench;
mod generate;
mod gpus;
mod inspect;
mod local_workers;
mod router;
mod serve;
mod signals;
mod synth;
mod tokenize;
mod worker;
mod worker_options;

use std::process::ExitCode;

use clap::{Parser, Subcommand};

/// canopy: distributed LLM inference with speculative decoding.
#[derive(Parser)]
#[command(name = "canopy", version, about, propagate_version = true)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Print a GGUF file's architecture, metadata and tensor table.
    Inspect(inspect::Args),
    /// Turn text into token ids (or ids into text) with a model's tokenizer.
    Tokenize(tokenize::Args),
    /// Write a random-weight GGUF model with the tensors and metadata of a real one.
    Synth(synth::Args),
    /// Continue a prompt (or answer it as a chat) and stream the text.
    Generate(generate::Args),
    /// Measure prefill, decode and forward-pass speed, like llama-bench.
    Bench(bench::Args),
    /// Serve a model over gRPC as a canopy worker until SIGTERM, then drain.
    Worker(worker::Args),
    /// Serve the OpenAI API over HTTP, forwarding requests to worker daemons.
    Router(router::Args),
    /// Serve a model on this machine: the router in front of one worker per GPU (or a CPU one).
    Serve(serve::Args),
}

/// Exit code for input the tool cannot use (a bad file, bad ids); clap uses 2 for bad flags too.
const EXIT_BAD_INPUT: u8 = 2;

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Inspect(args) => inspect::run(&args),
        Command::Tokenize(args) => tokenize::run(&args),
        Command::Synth(args) => synth::run(&args),
        Command::Generate(args) => generate::run(&args),
        Command::Bench(args) => bench::run(&args),
        Command::Worker(args) => worker::run(&args),
        Command::Router(args) => router::run(args),
        Command::Serve(args) => serve::run(args),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => {
            // One line: the chain of causes joined by ": ".
            eprintln!("canopy: error: {err:#}");
            ExitCode::from(EXIT_BAD_INPUT)
        }
    }
}
