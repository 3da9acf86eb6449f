//! `canopy bench`: prefill, decode and forward-pass speed of a model, like llama-bench.

use std::path::PathBuf;

use anyhow::Context;
use canopy_models::gguf::GgufFile;
use canopy_worker::bench::{BenchConfig, BenchKind, BenchReport, BenchResult, run_bench};
use canopy_worker::engine::Qwen3LmOptions;
use serde_json::json;

use crate::backend::BackendKind;

#[derive(clap::Args)]
pub struct Args {
    /// The GGUF model.
    #[arg(env = "CANOPY_MODEL")]
    model: PathBuf,
    /// Print one JSON object instead of a table.
    #[arg(long, env = "CANOPY_JSON")]
    json: bool,
    /// Prompt lengths to prefill (sizes beyond the model's context are skipped).
    #[arg(long, value_delimiter = ',', env = "CANOPY_BENCH_PREFILL", default_value = "512")]
    prefill: Vec<usize>,
    /// Also prefill 2048 tokens, and decode and run the forward passes at context depths 4096
    /// and 16384.
    #[arg(long, env = "CANOPY_BENCH_LONG")]
    long: bool,
    /// Tokens to decode one at a time (0 skips the decode runs).
    #[arg(long, env = "CANOPY_BENCH_DECODE", default_value_t = 128)]
    decode: usize,
    /// Context depths to decode and run the forward passes after (prefilled once each, untimed).
    #[arg(long, value_delimiter = ',', env = "CANOPY_BENCH_DEPTHS", default_value = "0")]
    depths: Vec<usize>,
    /// Batch sizes of single forward passes (1 is a decode step, 23 a default tree verify).
    #[arg(long, value_delimiter = ',', env = "CANOPY_BENCH_FORWARD", default_value = "1,8,16,23,32,64")]
    forward: Vec<usize>,
    /// Timed runs of each measurement; the table shows the median.
    #[arg(long, env = "CANOPY_BENCH_REPETITIONS", default_value_t = 5)]
    repetitions: usize,
    /// Untimed warm-up runs before the timed ones.
    #[arg(long, env = "CANOPY_BENCH_WARMUP", default_value_t = 1)]
    warmup: usize,
    /// Prompt tokens per prefill forward pass.
    #[arg(long, env = "CANOPY_PREFILL_CHUNK", default_value_t = canopy_worker::engine::DEFAULT_PREFILL_CHUNK)]
    prefill_chunk: usize,
    /// Compute backend.
    #[arg(long, value_enum, env = "CANOPY_BACKEND", default_value_t = BackendKind::Auto)]
    backend: BackendKind,
}

/// The long prefill `--long` adds.
const LONG_PREFILL: usize = 2048;
/// The context depths `--long` adds.
const LONG_DEPTHS: [usize; 2] = [4096, 16384];

pub fn run(args: &Args) -> anyhow::Result<()> {
    anyhow::ensure!(args.repetitions > 0, "--repetitions must be at least 1");
    let file = GgufFile::open(&args.model).with_context(|| format!("reading {}", args.model.display()))?;
    let mut prefill_sizes = args.prefill.clone();
    let mut depths = args.depths.clone();
    if args.long {
        if !prefill_sizes.contains(&LONG_PREFILL) {
            prefill_sizes.push(LONG_PREFILL);
        }
        depths.extend(LONG_DEPTHS.iter().filter(|depth| !args.depths.contains(depth)));
    }
    let deepest = depths.iter().max().copied().unwrap_or(0);
    let after_deepest = args.forward.iter().copied().chain([args.decode]).max().unwrap_or(0);
    let longest = prefill_sizes.iter().copied().chain([deepest + after_deepest]).max().unwrap_or(1);
    let largest_pass =
        args.forward.iter().copied().chain([args.prefill_chunk.min(longest)]).max().unwrap_or(1);
    let options = Qwen3LmOptions {
        max_sequence_len: Some(longest.max(1)),
        max_batch_tokens: largest_pass.max(1),
        max_sequences: 1,
    };
    let mut model =
        args.backend.load(&file, options).with_context(|| format!("loading {}", args.model.display()))?;
    let config = BenchConfig {
        prefill_sizes,
        prefill_chunk: args.prefill_chunk,
        decode_tokens: args.decode,
        depths,
        forward_sizes: args.forward.clone(),
        repetitions: args.repetitions,
        warmup: args.warmup,
    };
    let report = run_bench(&mut model, &config)?;
    let floor = model
        .read_bandwidth()?
        .map(|bandwidth| DecodeFloor { bytes_per_token: decode_bytes_per_token(&file), bandwidth });
    let model_name = args
        .model
        .file_name()
        .map_or_else(|| args.model.display().to_string(), |name| name.to_string_lossy().into_owned());
    if args.json {
        println!(
            "{}",
            serde_json::to_string_pretty(&json_report(
                &model_name,
                model.backend_name(),
                args,
                &report,
                floor
            ))?
        );
    } else {
        print!("{}", table(&model_name, model.backend_name(), &report));
        for result in &report.results {
            if let Some(cost) = report.cost_in_one_token_passes(result) {
                println!("{}: {cost:.2}x a one-token pass", result.name());
            }
        }
        if let Some(floor) = floor {
            println!("{}", floor.describe(&report));
        }
    }
    Ok(())
}

/// The least time a decode step can take: every weight byte it needs, read once at the
/// device's measured bandwidth.
#[derive(Clone, Copy)]
struct DecodeFloor {
    bytes_per_token: u64,
    /// Bytes per second.
    bandwidth: f64,
}

impl DecodeFloor {
    fn seconds(self) -> f64 {
        self.bytes_per_token as f64 / self.bandwidth
    }

    /// The floor over the measured step time of a decode run (1.0 would be at the floor).
    fn fraction(self, result: &BenchResult) -> f64 {
        let step = result.median().as_secs_f64() / result.tokens.max(1) as f64;
        if step > 0.0 { self.seconds() / step } else { 0.0 }
    }

    fn describe(self, report: &BenchReport) -> String {
        let mut out = format!(
            "decode floor: {:.3} GB of weights per token at a measured {:.0} GB/s read bandwidth = {:.3} ms ({:.0} tok/s)",
            self.bytes_per_token as f64 / 1e9,
            self.bandwidth / 1e9,
            self.seconds() * 1e3,
            1.0 / self.seconds()
        );
        for result in report.results.iter().filter(|result| result.kind == BenchKind::Decode) {
            out += &format!("\n{}: {:.1} % of the floor", result.name(), 100.0 * self.fraction(result));
        }
        out
    }
}

/// Bytes a decode step reads from the weights: every tensor but the embedding table, of which
/// it reads one row, unless the LM head is tied to it.
fn decode_bytes_per_token(file: &GgufFile) -> u64 {
    let tied = file.tensor("output.weight").is_none();
    file.tensors()
        .iter()
        .filter(|tensor| tied || tensor.name != "token_embd.weight")
        .map(|tensor| tensor.n_bytes())
        .sum()
}

fn table(model: &str, backend: &str, report: &BenchReport) -> String {
    let header = ["model", "backend", "test", "tokens", "ms (median)", "t/s"];
    let rows: Vec<[String; 6]> = report
        .results
        .iter()
        .map(|result| {
            [
                model.to_owned(),
                backend.to_owned(),
                result.name(),
                result.tokens.to_string(),
                format!("{:.3}", result.median().as_secs_f64() * 1e3),
                format!("{:.2}", result.tokens_per_second()),
            ]
        })
        .collect();
    let widths: Vec<usize> = (0..header.len())
        .map(|col| rows.iter().map(|row| row[col].len()).chain([header[col].len()]).max().unwrap_or(0))
        .collect();
    // Text columns left-aligned, numbers right-aligned, as llama-bench does.
    let line = |cells: &[&str]| {
        let padded: Vec<String> = cells
            .iter()
            .zip(&widths)
            .enumerate()
            .map(
                |(col, (cell, &width))| {
                    if col < 3 { format!("{cell:<width$}") } else { format!("{cell:>width$}") }
                },
            )
            .collect();
        format!("| {} |\n", padded.join(" | "))
    };
    let mut out = line(&header);
    let rule: Vec<String> = widths
        .iter()
        .enumerate()
        .map(|(col, &width)| if col < 3 { "-".repeat(width) } else { format!("{}:", "-".repeat(width - 1)) })
        .collect();
    out += &format!("| {} |\n", rule.join(" | "));
    for row in &rows {
        out += &line(&row.iter().map(String::as_str).collect::<Vec<_>>());
    }
    for name in &report.skipped {
        out += &format!("skipped {name}: beyond the model's sequence limit or empty\n");
    }
    out
}

fn json_report(
    model: &str,
    backend: &str,
    args: &Args,
    report: &BenchReport,
    floor: Option<DecodeFloor>,
) -> serde_json::Value {
    let result = |result: &BenchResult| {
        json!({
            "test": result.name(),
            "tokens": result.tokens,
            "median_ms": result.median().as_secs_f64() * 1e3,
            "tokens_per_second": result.tokens_per_second(),
            "runs_ms": result.runs.iter().map(|run| run.as_secs_f64() * 1e3).collect::<Vec<_>>(),
            "fraction_of_floor": floor.filter(|_| result.kind == BenchKind::Decode).map(|floor| floor.fraction(result)),
            "cost_in_one_token_passes": report.cost_in_one_token_passes(result),
        })
    };
    json!({
        "model": model,
        "backend": backend,
        "repetitions": args.repetitions,
        "warmup": args.warmup,
        "results": report.results.iter().map(result).collect::<Vec<_>>(),
        "skipped": report.skipped,
        "decode_floor": floor.map(|floor| json!({
            "bytes_per_token": floor.bytes_per_token,
            "read_bandwidth_bytes_per_second": floor.bandwidth,
            "ms_per_token": floor.seconds() * 1e3,
        })),
    })
}
