//! `POST /v1/chat/completions`: the answer object and the `chat.completion.chunk` stream.

use axum::extract::State;
use axum::response::Response;
use canopy_proto::v1::{Finished, TextDelta, Usage};
use serde_json::{Value, json};

use super::chat_request::ChatCompletionRequest;
use super::error::ApiError;
use super::json::JsonBody;
use super::logprobs;
use super::respond::{self, ChunkRenderer, Job, finish_reason, unix_seconds, usage_json};
use crate::ids::random_hex;
use crate::middleware::RequestId;
use crate::state::AppState;

pub(crate) async fn chat_completions(
    State(state): State<AppState>,
    request_id: RequestId,
    JsonBody(body): JsonBody<ChatCompletionRequest>,
) -> Result<Response, ApiError> {
    let job = body.into_job()?;
    let identity = Identity {
        id: format!("chatcmpl-{}", random_hex()),
        created: unix_seconds(),
        model: job.request.model.clone(),
    };
    let work = Job { request: job.request, input_param: "messages" };
    if job.stream {
        let renderer = ChatChunks { identity, include_usage: job.include_usage, logprobs: job.logprobs };
        return respond::stream(&state, &request_id, work, renderer).await;
    }
    let collected = respond::collect(&state, &request_id, work).await?;
    let logprobs = if job.logprobs { logprobs::chat(&collected.logprobs) } else { Value::Null };
    let body = json!({
        "id": identity.id,
        "object": "chat.completion",
        "created": identity.created,
        "model": identity.model,
        "choices": [{
            "index": 0,
            "message": {"role": "assistant", "content": collected.text},
            "logprobs": logprobs,
            "finish_reason": finish_reason(&collected.finished),
        }],
        "usage": usage_json(&collected.usage),
    });
    Ok(respond::json_answer(body, &collected.worker))
}

/// The fields every chunk of one answer repeats.
struct Identity {
    id: String,
    created: u64,
    model: String,
}

struct ChatChunks {
    identity: Identity,
    include_usage: bool,
    logprobs: bool,
}

impl ChatChunks {
    fn chunk(&self, choices: Value) -> Value {
        let mut chunk = json!({
            "id": self.identity.id,
            "object": "chat.completion.chunk",
            "created": self.identity.created,
            "model": self.identity.model,
            "choices": choices,
        });
        // With include_usage every chunk carries `usage`, null until the last one (as OpenAI does).
        if self.include_usage {
            chunk["usage"] = Value::Null;
        }
        chunk
    }
}

impl ChunkRenderer for ChatChunks {
    fn opening(&mut self) -> Vec<Value> {
        vec![self.chunk(json!([{
            "index": 0,
            "delta": {"role": "assistant", "content": ""},
            "logprobs": null,
            "finish_reason": null,
        }]))]
    }

    fn text(&mut self, delta: &TextDelta) -> Option<Value> {
        let logprobs = if self.logprobs && !delta.logprobs.is_empty() {
            logprobs::chat(&delta.logprobs)
        } else {
            Value::Null
        };
        if delta.text.is_empty() && logprobs.is_null() {
            return None;
        }
        Some(self.chunk(json!([{
            "index": 0,
            "delta": {"content": delta.text},
            "logprobs": logprobs,
            "finish_reason": null,
        }])))
    }

    fn closing(&mut self, finished: &Finished, usage: Option<&Usage>) -> Vec<Value> {
        let mut chunks = vec![self.chunk(json!([{
            "index": 0,
            "delta": {},
            "logprobs": null,
            "finish_reason": finish_reason(finished),
        }]))];
        if self.include_usage {
            let mut last = self.chunk(json!([]));
            last["usage"] = usage_json(&usage.cloned().unwrap_or_default());
            chunks.push(last);
        }
        chunks
    }
}
