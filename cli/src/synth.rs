//! `canopy synth`: random-weight models at real shapes.

use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::PathBuf;
use std::time::Instant;

use anyhow::Context;
use canopy_models::synth::{self, Arch, ScaleFit, Shape, SynthOptions, WeightType};

#[derive(clap::Args)]
pub struct Args {
    /// Architecture.
    #[arg(long, env = "CANOPY_SYNTH_ARCH", default_value = "qwen3")]
    arch: Arch,
    /// Model shape: tiny, qwen3-0.6b or qwen3-8b.
    #[arg(long, env = "CANOPY_SYNTH_SHAPE")]
    shape: Shape,
    /// Weight format: f32, bf16, q8_0 or q4_k_m (the per-tensor types of llama-quantize's recipe).
    #[arg(long = "type", env = "CANOPY_SYNTH_TYPE")]
    weight_type: WeightType,
    /// Where to write the GGUF file.
    #[arg(long, env = "CANOPY_SYNTH_OUT")]
    out: PathBuf,
    /// Seed of the weights; the same flags give a bit-identical file.
    #[arg(long, env = "CANOPY_SYNTH_SEED", default_value_t = 0)]
    seed: u64,
    /// Fit each K-quant sub-block's scale on the grid its extremes span, without llama-quantize's
    /// search around it: a Q4_K_M model is written several times faster, with the same tensor
    /// types and a slightly larger rounding error. For benchmark files.
    #[arg(long, env = "CANOPY_SYNTH_FAST_FIT")]
    fast_fit: bool,
}

pub fn run(args: &Args) -> anyhow::Result<()> {
    let options = SynthOptions {
        arch: args.arch,
        shape: args.shape,
        weight_type: args.weight_type,
        seed: args.seed,
        scale_fit: if args.fast_fit { ScaleFit::Nominal } else { ScaleFit::Search },
    };
    // Write beside the target and rename at the end, so a failed run never leaves a partial model.
    let partial = partial_path(&args.out);
    let started = Instant::now();
    let result = write(&options, &partial);
    let summary = match result {
        Ok(summary) => summary,
        Err(err) => {
            let _ = std::fs::remove_file(&partial);
            return Err(err);
        }
    };
    std::fs::rename(&partial, &args.out)
        .with_context(|| format!("moving the model to {}", args.out.display()))?;
    let types: Vec<String> = summary.type_counts.iter().map(|(ty, n)| format!("{n} {ty}")).collect();
    println!(
        "wrote {}: {} {} {}, {} tensors ({}), {} parameters, {} bytes, {:.1} s",
        args.out.display(),
        args.arch,
        args.shape,
        args.weight_type,
        summary.tensor_count,
        types.join(", "),
        human_count(summary.parameter_count),
        summary.file_bytes,
        started.elapsed().as_secs_f64(),
    );
    Ok(())
}

fn write(options: &SynthOptions, path: &std::path::Path) -> anyhow::Result<synth::SynthSummary> {
    let file = File::create(path).with_context(|| format!("creating {}", path.display()))?;
    let mut out = BufWriter::with_capacity(1 << 20, file);
    let summary = synth::write_model(options, &mut out)?;
    out.flush().with_context(|| format!("writing {}", path.display()))?;
    Ok(summary)
}

fn human_count(n: u64) -> String {
    match n {
        0..1_000_000 => n.to_string(),
        1_000_000..1_000_000_000 => format!("{:.1} M", n as f64 / 1e6),
        _ => format!("{:.2} B", n as f64 / 1e9),
    }
}

fn partial_path(out: &std::path::Path) -> PathBuf {
    let mut name = out.file_name().map(|n| n.to_os_string()).unwrap_or_default();
    name.push(".partial");
    out.with_file_name(name)
}
