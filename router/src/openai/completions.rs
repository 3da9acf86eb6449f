//! `POST /v1/completions`: the legacy text completion API, for one prompt (text or token ids).

use axum::extract::State;
use axum::response::Response;
use canopy_proto::v1::{Finished, GenerateRequest, TextDelta, TokenIds, Usage, generate_request::Input};
use serde::Deserialize;
use serde_json::{Map, Value, json};

use super::error::ApiError;
use super::json::JsonBody;
use super::logprobs;
use super::params::{self, SamplingFields, Stop, StreamOptions};
use super::respond::{self, ChunkRenderer, Job, finish_reason, unix_seconds, usage_json};
use crate::ids::random_hex;
use crate::middleware::RequestId;
use crate::state::AppState;

/// OpenAI's default limit for this API when `max_tokens` is absent.
const DEFAULT_MAX_TOKENS: u32 = 16;

/// A completion request; unknown fields (`user`, ...) are accepted and ignored.
#[derive(Debug, Deserialize)]
pub(crate) struct CompletionRequest {
    model: String,
    prompt: Prompt,
    stream: Option<bool>,
    stream_options: Option<StreamOptions>,
    n: Option<u32>,
    best_of: Option<u32>,
    echo: Option<bool>,
    suffix: Option<String>,
    max_tokens: Option<u32>,
    stop: Option<Stop>,
    seed: Option<u64>,
    temperature: Option<f64>,
    top_p: Option<f64>,
    top_k: Option<i64>,
    min_p: Option<f64>,
    presence_penalty: Option<f64>,
    frequency_penalty: Option<f64>,
    repetition_penalty: Option<f64>,
    logprobs: Option<u32>,
    logit_bias: Option<Map<String, Value>>,
    ignore_eos: Option<bool>,
    priority: Option<i32>,
}

#[derive(Debug, Deserialize)]
#[serde(untagged, expecting = "a string, an array of strings, or an array of token ids")]
enum Prompt {
    Text(String),
    Texts(Vec<String>),
    Ids(Vec<u32>),
    IdLists(Vec<Vec<u32>>),
}

#[derive(Debug)]
struct CompletionJob {
    request: GenerateRequest,
    stream: bool,
    include_usage: bool,
    logprobs: bool,
}

impl CompletionRequest {
    fn into_job(self) -> Result<CompletionJob, ApiError> {
        if self.model.trim().is_empty() {
            return Err(ApiError::invalid_field("model", "`model` must name a model (see GET /v1/models)"));
        }
        params::single_choice("n", self.n)?;
        params::single_choice("best_of", self.best_of)?;
        params::no_logit_bias(self.logit_bias.as_ref())?;
        if self.echo.unwrap_or(false) {
            return Err(ApiError::unsupported("echo", "`echo` is not supported"));
        }
        if self.suffix.as_ref().is_some_and(|suffix| !suffix.is_empty()) {
            return Err(ApiError::unsupported("suffix", "`suffix` (fill in the middle) is not supported"));
        }
        let input = prompt_input(self.prompt)?;
        let top_logprobs = self.logprobs.map(|count| params::top_logprobs("logprobs", count)).transpose()?;
        let sampling = SamplingFields {
            temperature: self.temperature,
            top_p: self.top_p,
            top_k: self.top_k,
            min_p: self.min_p,
            seed: self.seed,
            presence_penalty: self.presence_penalty,
            frequency_penalty: self.frequency_penalty,
            repetition_penalty: self.repetition_penalty,
        }
        .into_params()?;
        let max_tokens =
            params::max_new_tokens(&[("max_tokens", self.max_tokens)])?.unwrap_or(DEFAULT_MAX_TOKENS);
        let stream = self.stream.unwrap_or(false);
        Ok(CompletionJob {
            request: GenerateRequest {
                model: self.model,
                input: Some(input),
                sampling: Some(sampling),
                stop: params::stop_sequences(self.stop)?,
                max_tokens: Some(max_tokens),
                ignore_eos: self.ignore_eos.unwrap_or(false),
                top_logprobs,
                priority: self.priority.unwrap_or(0),
                ..GenerateRequest::default()
            },
            stream,
            include_usage: stream && self.stream_options.is_some_and(|options| options.include_usage),
            logprobs: top_logprobs.is_some(),
        })
    }
}

/// One prompt: a string, or token ids; an array must hold exactly one prompt.
fn prompt_input(prompt: Prompt) -> Result<Input, ApiError> {
    let empty = || ApiError::invalid_field("prompt", "`prompt` must not be empty");
    let several = || {
        ApiError::unsupported("prompt", "`prompt` must hold exactly one prompt; send one request per prompt")
    };
    match prompt {
        Prompt::Text(text) => Ok(Input::Prompt(text)),
        Prompt::Ids(ids) if ids.is_empty() => Err(empty()),
        Prompt::Ids(ids) => Ok(Input::TokenIds(TokenIds { ids })),
        Prompt::Texts(texts) => match <[String; 1]>::try_from(texts) {
            Ok([text]) => Ok(Input::Prompt(text)),
            Err(texts) if texts.is_empty() => Err(empty()),
            Err(_) => Err(several()),
        },
        Prompt::IdLists(lists) => match <[Vec<u32>; 1]>::try_from(lists) {
            Ok([ids]) if ids.is_empty() => Err(empty()),
            Ok([ids]) => Ok(Input::TokenIds(TokenIds { ids })),
            Err(lists) if lists.is_empty() => Err(empty()),
            Err(_) => Err(several()),
        },
    }
}

pub(crate) async fn completions(
    State(state): State<AppState>,
    request_id: RequestId,
    JsonBody(body): JsonBody<CompletionRequest>,
) -> Result<Response, ApiError> {
    let job = body.into_job()?;
    let id = format!("cmpl-{}", random_hex());
    let created = unix_seconds();
    let model = job.request.model.clone();
    let work = Job { request: job.request, input_param: "prompt" };
    if job.stream {
        let renderer = CompletionChunks {
            id,
            created,
            model,
            include_usage: job.include_usage,
            logprobs: job.logprobs,
            characters_sent: 0,
        };
        return respond::stream(&state, &request_id, work, renderer).await;
    }
    let collected = respond::collect(&state, &request_id, work).await?;
    let logprobs = if job.logprobs { logprobs::legacy(&collected.logprobs, 0) } else { Value::Null };
    let body = json!({
        "id": id,
        "object": "text_completion",
        "created": created,
        "model": model,
        "choices": [{
            "index": 0,
            "text": collected.text,
            "logprobs": logprobs,
            "finish_reason": finish_reason(&collected.finished),
        }],
        "usage": usage_json(&collected.usage),
    });
    Ok(respond::json_answer(body, &collected.worker))
}

struct CompletionChunks {
    id: String,
    created: u64,
    model: String,
    include_usage: bool,
    logprobs: bool,
    /// Characters of text streamed so far, where the next logprobs' offsets start.
    characters_sent: usize,
}

impl CompletionChunks {
    fn chunk(&self, choices: Value) -> Value {
        let mut chunk = json!({
            "id": self.id,
            "object": "text_completion",
            "created": self.created,
            "model": self.model,
            "choices": choices,
        });
        if self.include_usage {
            chunk["usage"] = Value::Null;
        }
        chunk
    }
}

impl ChunkRenderer for CompletionChunks {
    fn opening(&mut self) -> Vec<Value> {
        Vec::new()
    }

    fn text(&mut self, delta: &TextDelta) -> Option<Value> {
        let logprobs = if self.logprobs && !delta.logprobs.is_empty() {
            logprobs::legacy(&delta.logprobs, self.characters_sent)
        } else {
            Value::Null
        };
        self.characters_sent += delta.text.chars().count();
        if delta.text.is_empty() && logprobs.is_null() {
            return None;
        }
        Some(
            self.chunk(
                json!([{"index": 0, "text": delta.text, "logprobs": logprobs, "finish_reason": null}]),
            ),
        )
    }

    fn closing(&mut self, finished: &Finished, usage: Option<&Usage>) -> Vec<Value> {
        let mut chunks = vec![self.chunk(json!([{
            "index": 0, "text": "", "logprobs": null, "finish_reason": finish_reason(finished),
        }]))];
        if self.include_usage {
            let mut last = self.chunk(json!([]));
            last["usage"] = usage_json(&usage.cloned().unwrap_or_default());
            chunks.push(last);
        }
        chunks
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::openai::json::parse;

    fn job(body: &str) -> Result<CompletionJob, ApiError> {
        parse::<CompletionRequest>(body.as_bytes())?.into_job()
    }

    #[test]
    fn prompts_may_be_text_one_text_or_token_ids() {
        let text = job(r#"{"model": "m", "prompt": "hi"}"#).unwrap();
        assert_eq!(text.request.input, Some(Input::Prompt("hi".into())));
        assert_eq!(text.request.max_tokens, Some(DEFAULT_MAX_TOKENS));
        let one = job(r#"{"model": "m", "prompt": ["hi"], "max_tokens": 3}"#).unwrap();
        assert_eq!(one.request.input, Some(Input::Prompt("hi".into())));
        assert_eq!(one.request.max_tokens, Some(3));
        let ids = job(r#"{"model": "m", "prompt": [1, 2, 3]}"#).unwrap();
        assert_eq!(ids.request.input, Some(Input::TokenIds(TokenIds { ids: vec![1, 2, 3] })));
        let nested = job(r#"{"model": "m", "prompt": [[4, 5]]}"#).unwrap();
        assert_eq!(nested.request.input, Some(Input::TokenIds(TokenIds { ids: vec![4, 5] })));
    }

    #[test]
    fn batches_and_unsupported_options_are_refused() {
        for (body, param) in [
            (r#"{"model": "m", "prompt": ["a", "b"]}"#, "prompt"),
            (r#"{"model": "m", "prompt": [[1], [2]]}"#, "prompt"),
            (r#"{"model": "m", "prompt": []}"#, "prompt"),
            (r#"{"model": "m", "prompt": [-1]}"#, "prompt"),
            (r#"{"model": "m", "prompt": "x", "echo": true}"#, "echo"),
            (r#"{"model": "m", "prompt": "x", "suffix": "y"}"#, "suffix"),
            (r#"{"model": "m", "prompt": "x", "best_of": 3}"#, "best_of"),
            (r#"{"model": "m", "prompt": "x", "logprobs": 50}"#, "logprobs"),
            (r#"{"model": "m"}"#, "prompt"),
        ] {
            let error = job(body).unwrap_err();
            assert_eq!(error.to_json()["error"]["param"], param, "{body}");
        }
    }
}
