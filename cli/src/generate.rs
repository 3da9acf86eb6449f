//! `canopy generate`: continue a prompt with a model and stream the text.

use std::io::Write;
use std::ops::ControlFlow;
use std::path::PathBuf;

use anyhow::Context;
use canopy_models::chat_template::{ChatRender, ChatTemplate, Message, Role};
use canopy_models::gguf::GgufFile;
use canopy_models::tokenizer::Tokenizer;
use canopy_worker::engine::{GenerateRequest, Qwen3LmOptions, StopConditions, generate};
use canopy_worker::sampling::SamplingParams;

use crate::backend::BackendKind;

#[derive(clap::Args)]
pub struct Args {
    /// The GGUF model.
    #[arg(env = "CANOPY_MODEL")]
    model: PathBuf,
    /// The prompt text (special-token text in it is recognised).
    #[arg(long, env = "CANOPY_PROMPT")]
    prompt: String,
    /// Send the prompt as one user message through the model's chat template.
    #[arg(long, env = "CANOPY_CHAT")]
    chat: bool,
    /// Use this Jinja chat template instead of the model's.
    #[arg(long, value_name = "FILE", env = "CANOPY_CHAT_TEMPLATE", requires = "chat")]
    chat_template: Option<PathBuf>,
    /// The most new tokens to generate.
    #[arg(short = 'n', long = "max-tokens", env = "CANOPY_MAX_TOKENS", default_value_t = 128)]
    max_tokens: usize,
    /// Sampling temperature; 0 or unset is greedy decoding.
    #[arg(long, env = "CANOPY_TEMPERATURE")]
    temperature: Option<f32>,
    /// Keep only the K most likely tokens.
    #[arg(long, env = "CANOPY_TOP_K")]
    top_k: Option<u32>,
    /// Nucleus sampling: keep the most likely tokens up to this probability mass.
    #[arg(long, env = "CANOPY_TOP_P")]
    top_p: Option<f32>,
    /// Drop tokens less likely than this fraction of the most likely one.
    #[arg(long, env = "CANOPY_MIN_P")]
    min_p: Option<f32>,
    /// Repetition penalty over the generated tokens (1 is off).
    #[arg(long, env = "CANOPY_REPETITION_PENALTY")]
    repetition_penalty: Option<f32>,
    /// Presence penalty over the generated tokens.
    #[arg(long, env = "CANOPY_PRESENCE_PENALTY")]
    presence_penalty: Option<f32>,
    /// Frequency penalty over the generated tokens.
    #[arg(long, env = "CANOPY_FREQUENCY_PENALTY")]
    frequency_penalty: Option<f32>,
    /// Seed of the random draws.
    #[arg(long, env = "CANOPY_SEED")]
    seed: Option<u64>,
    /// Stop before this text (repeat the flag for several).
    #[arg(long = "stop", value_name = "TEXT", env = "CANOPY_STOP")]
    stop: Vec<String>,
    /// Keep generating past end-of-generation tokens.
    #[arg(long, env = "CANOPY_IGNORE_EOS")]
    ignore_eos: bool,
    /// Print the generated token ids (space-separated) instead of text.
    #[arg(long, env = "CANOPY_IDS")]
    ids: bool,
    /// Prompt tokens per prefill forward pass.
    #[arg(long, env = "CANOPY_PREFILL_CHUNK", default_value_t = canopy_worker::engine::DEFAULT_PREFILL_CHUNK)]
    prefill_chunk: usize,
    /// The most positions (prompt and generated tokens) the KV cache holds; capped at the
    /// model's context length.
    #[arg(long, env = "CANOPY_CTX_SIZE", default_value_t = 4096)]
    ctx_size: usize,
    /// Compute backend.
    #[arg(long, value_enum, env = "CANOPY_BACKEND", default_value_t = BackendKind::Auto)]
    backend: BackendKind,
}

pub fn run(args: &Args) -> anyhow::Result<()> {
    let file = GgufFile::open(&args.model).with_context(|| format!("reading {}", args.model.display()))?;
    let tokenizer = Tokenizer::from_gguf(&file)
        .with_context(|| format!("building the tokenizer of {}", args.model.display()))?;
    let prompt = prompt_ids(args, &file, &tokenizer)?;
    let options = Qwen3LmOptions {
        max_sequence_len: Some(args.ctx_size),
        max_batch_tokens: args.prefill_chunk.max(1),
        max_sequences: 1,
    };
    let mut model =
        args.backend.load(&file, options).with_context(|| format!("loading {}", args.model.display()))?;

    let request = GenerateRequest {
        prompt,
        sampling: SamplingParams {
            temperature: args.temperature,
            top_k: args.top_k,
            top_p: args.top_p,
            min_p: args.min_p,
            seed: args.seed,
            repetition_penalty: args.repetition_penalty,
            presence_penalty: args.presence_penalty,
            frequency_penalty: args.frequency_penalty,
        },
        stop: StopConditions {
            max_tokens: args.max_tokens,
            stop_strings: args.stop.clone(),
            ignore_eos: args.ignore_eos,
        },
        top_logprobs: None,
    };
    let mut stdout = std::io::stdout().lock();
    let mut write_error = None;
    let mut first = true;
    let generation = generate(&mut model, &tokenizer, &request, args.prefill_chunk, |event| {
        let written = if args.ids {
            let separator = if std::mem::take(&mut first) { "" } else { " " };
            write!(stdout, "{separator}{}", event.id)
        } else {
            stdout.write_all(event.text.as_bytes())
        };
        match written.and_then(|()| stdout.flush()) {
            Ok(()) => ControlFlow::Continue(()),
            Err(err) => {
                write_error = Some(err);
                ControlFlow::Break(())
            }
        }
    })?;
    if let Some(err) = write_error {
        return Err(err).context("writing to stdout");
    }
    writeln!(stdout).context("writing to stdout")?;
    let timing = generation.timing;
    eprintln!(
        "prompt: {} tokens, {:.2} tok/s | decode: {} tokens, {:.2} tok/s | finish: {}",
        timing.prompt_tokens,
        timing.prompt_tokens_per_second(),
        generation.tokens.len(),
        timing.decode_tokens_per_second(),
        generation.finish_reason,
    );
    Ok(())
}

/// The prompt's token ids: the text as given, or rendered as one user turn of a chat.
fn prompt_ids(args: &Args, file: &GgufFile, tokenizer: &Tokenizer) -> anyhow::Result<Vec<u32>> {
    if !args.chat {
        return Ok(tokenizer.encode(&args.prompt, true)?);
    }
    let template = ChatTemplate::for_model(file, tokenizer, args.chat_template.as_deref())
        .context("loading the chat template")?;
    let messages = [Message::text(Role::User, args.prompt.clone())];
    let rendered = template
        .render(&ChatRender {
            messages: &messages,
            tools: None,
            add_generation_prompt: true,
            kwargs: &serde_json::Map::new(),
        })
        .context("rendering the chat template")?;
    // Templates write BOS themselves when the model wants it.
    Ok(tokenizer.encode(&rendered, false)?)
}
