//! The engine flags that `canopy worker` and `canopy serve` share, and their command-line form:
//! `canopy serve` hands them on to the `canopy worker` processes it starts.

use std::ffi::OsString;
use std::path::PathBuf;
use std::time::Duration;

use canopy_worker::engine::DEFAULT_PREFILL_CHUNK;
use clap::ValueEnum;

use crate::backend::BackendKind;

/// How a worker runs its model.
#[derive(clap::Args, Debug, Clone, PartialEq)]
pub struct EngineOptions {
    /// The name clients use for the model (default: the GGUF's general.name, else the file stem).
    #[arg(long, env = "CANOPY_MODEL_ID")]
    pub model_id: Option<String>,
    /// Compute backend.
    #[arg(long, value_enum, env = "CANOPY_BACKEND", default_value_t = BackendKind::Auto)]
    pub backend: BackendKind,
    /// Sequences decoded together; the KV cache holds this many.
    #[arg(long, env = "CANOPY_MAX_RUNNING", default_value_t = 8)]
    pub max_running: usize,
    /// Requests that may wait for a free sequence; more are refused with RESOURCE_EXHAUSTED.
    #[arg(long, env = "CANOPY_MAX_QUEUED", default_value_t = 256)]
    pub max_queued: usize,
    /// Positions (prompt plus output) one sequence may hold; capped at (and by default) the
    /// model's context length.
    #[arg(long, env = "CANOPY_MAX_SEQ_LEN")]
    pub max_seq_len: Option<usize>,
    /// Prompt tokens run per step, shared by the requests being prefilled.
    #[arg(long, env = "CANOPY_PREFILL_CHUNK", default_value_t = DEFAULT_PREFILL_CHUNK)]
    pub prefill_chunk: usize,
    /// How long requests in flight may run on after SIGTERM before they are aborted
    /// (e.g. 30s, 500ms, 2m).
    #[arg(long, env = "CANOPY_DRAIN_GRACE", default_value = "30s", value_parser = canopy_router::parse_duration)]
    pub drain_grace: Duration,
    /// Use this Jinja chat template instead of the model's.
    #[arg(long, value_name = "FILE", env = "CANOPY_CHAT_TEMPLATE")]
    pub chat_template: Option<PathBuf>,
}

impl EngineOptions {
    /// The flags that make `canopy worker` parse these same options, whatever its environment.
    pub fn to_args(&self) -> Vec<OsString> {
        let mut args: Vec<OsString> = Vec::new();
        let mut flag = |name: &str, value: OsString| {
            args.push(name.into());
            args.push(value);
        };
        if let Some(model_id) = &self.model_id {
            flag("--model-id", model_id.into());
        }
        if let Some(backend) = self.backend.to_possible_value() {
            flag("--backend", backend.get_name().into());
        }
        flag("--max-running", self.max_running.to_string().into());
        flag("--max-queued", self.max_queued.to_string().into());
        if let Some(max_seq_len) = self.max_seq_len {
            flag("--max-seq-len", max_seq_len.to_string().into());
        }
        flag("--prefill-chunk", self.prefill_chunk.to_string().into());
        // Milliseconds with a fraction, so that a sub-millisecond grace survives the trip.
        flag("--drain-grace", format!("{}ms", self.drain_grace.as_secs_f64() * 1e3).into());
        if let Some(chat_template) = &self.chat_template {
            flag("--chat-template", chat_template.into());
        }
        args
    }
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::*;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        options: EngineOptions,
    }

    fn parse(args: &[OsString]) -> EngineOptions {
        let argv = std::iter::once(OsString::from("worker")).chain(args.iter().cloned());
        Cli::try_parse_from(argv).expect("the flags parse").options
    }

    #[test]
    fn the_command_line_form_parses_back_to_the_same_options() {
        let defaults = parse(&[]);
        assert_eq!(parse(&defaults.to_args()), defaults);
        let every_flag = EngineOptions {
            model_id: Some("tiny model".into()),
            backend: BackendKind::Cuda,
            max_running: 3,
            max_queued: 7,
            max_seq_len: Some(256),
            prefill_chunk: 64,
            drain_grace: Duration::from_millis(1500),
            chat_template: Some(PathBuf::from("/templates/chat template.jinja")),
        };
        assert_eq!(parse(&every_flag.to_args()), every_flag);
    }
}
