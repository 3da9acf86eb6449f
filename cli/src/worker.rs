//! `canopy worker`: serve one model over gRPC (`canopy.v1.Worker` plus gRPC health) until SIGTERM
//! or Ctrl-C, then drain.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::mpsc;
use std::time::Instant;

use anyhow::Context;
use canopy_models::chat_template::{ChatTemplate, ChatTemplateError};
use canopy_models::gguf::GgufFile;
use canopy_models::tokenizer::Tokenizer;
use canopy_worker::engine::Qwen3LmOptions;
use canopy_worker::scheduler::{Engine, SchedulerConfig};
use canopy_worker::server::{ServedModel, WorkerService, serve, shutdown_signal};

use crate::worker_options::EngineOptions;

/// Serve a model as a canopy worker. Progress goes to stderr; once the server accepts
/// connections, stdout gets the line `listening on ADDR`.
#[derive(clap::Args)]
pub struct Args {
    /// The GGUF model.
    #[arg(long, env = "CANOPY_MODEL")]
    model: PathBuf,
    /// Address to listen on; port 0 picks a free port (the line `listening on` names it).
    #[arg(long, env = "CANOPY_LISTEN", default_value = "127.0.0.1:50051")]
    listen: String,
    #[command(flatten)]
    engine: EngineOptions,
}

pub fn run(args: &Args) -> anyhow::Result<()> {
    anyhow::ensure!(args.engine.max_running > 0, "--max-running must be at least 1");
    anyhow::ensure!(args.engine.prefill_chunk > 0, "--prefill-chunk must be at least 1");
    let started = Instant::now();
    let path = &args.model;
    let backend_choice = format!("{:?}", args.engine.backend).to_lowercase();
    eprintln!("canopy worker: loading {} (backend {backend_choice})", path.display());
    let file = GgufFile::open(path).with_context(|| format!("reading {}", path.display()))?;
    let tokenizer = Arc::new(
        Tokenizer::from_gguf(&file)
            .with_context(|| format!("building the tokenizer of {}", path.display()))?,
    );
    let template = chat_template(&file, &tokenizer, args.engine.chat_template.as_deref())?;
    let model_id = args.engine.model_id.clone().unwrap_or_else(|| default_model_id(&file, path));
    let architecture = file.architecture().context("reading general.architecture")?.to_owned();

    let config = SchedulerConfig {
        max_running: args.engine.max_running,
        max_queued: args.engine.max_queued,
        prefill_chunk: args.engine.prefill_chunk,
    };
    let options = Qwen3LmOptions {
        max_sequence_len: args.engine.max_seq_len,
        max_batch_tokens: config.max_batch_tokens(),
        max_sequences: config.max_running,
    };
    // The model is loaded on the engine thread, which then owns the device; it reports back
    // where it ended up.
    let backend = args.engine.backend;
    let (placed, placement) = mpsc::channel();
    let engine = Engine::start(Arc::clone(&tokenizer), config, move || {
        let model = backend.load(&file, options)?;
        let _ = placed.send((model.backend_name(), model.device()));
        anyhow::Ok(model)
    })
    .with_context(|| format!("loading {}", path.display()))?;
    let (backend_name, device) = placement.recv().context("the engine thread did not report its device")?;
    let limits = engine.limits();
    eprintln!(
        "canopy worker: loaded {model_id:?} ({architecture}, {device}, {} positions x {} sequences) in {:.1}s",
        limits.max_sequence_len,
        config.max_running,
        started.elapsed().as_secs_f64()
    );

    let model = ServedModel { model_id, architecture, backend: backend_name.to_owned(), device };
    let service = WorkerService::new(Arc::new(engine), tokenizer, template, model, config);
    let runtime = tokio::runtime::Runtime::new().context("starting the async runtime")?;
    runtime.block_on(async {
        let listener = tokio::net::TcpListener::bind(&args.listen)
            .await
            .with_context(|| format!("listening on {}", args.listen))?;
        let address = listener.local_addr().context("reading the bound address")?;
        // Installed before the announcement, so that a SIGTERM right after it drains.
        let shutdown = shutdown_signal().context("installing the SIGTERM handler")?;
        let mut stdout = std::io::stdout().lock();
        writeln!(stdout, "listening on {address}")
            .and_then(|()| stdout.flush())
            .context("writing to stdout")?;
        drop(stdout);
        serve(listener, service, args.engine.drain_grace, async {
            shutdown.await;
            eprintln!("canopy worker: draining (grace {:?})", args.engine.drain_grace);
        })
        .await?;
        eprintln!("canopy worker: stopped");
        Ok(())
    })
}

/// The model's chat template, or none (with a note) when the model has none and no file is
/// given: the worker then serves prompts and token ids only.
fn chat_template(
    file: &GgufFile,
    tokenizer: &Tokenizer,
    override_path: Option<&Path>,
) -> anyhow::Result<Option<ChatTemplate>> {
    match ChatTemplate::for_model(file, tokenizer, override_path) {
        Ok(template) => Ok(Some(template)),
        Err(ChatTemplateError::Missing) => {
            eprintln!("canopy worker: the model has no chat template; chat input will be refused");
            Ok(None)
        }
        Err(error) => Err(error).context("loading the chat template"),
    }
}

/// `general.name`, else the file name without its extension.
fn default_model_id(file: &GgufFile, path: &Path) -> String {
    match file.get_str("general.name") {
        Ok(name) if !name.trim().is_empty() => name.to_owned(),
        _ => path.file_stem().map_or_else(|| "model".to_owned(), |stem| stem.to_string_lossy().into_owned()),
    }
}
