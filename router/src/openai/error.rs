//! Errors in the OpenAI shape: `{"error": {"message", "type", "param", "code"}}` with a fitting
//! HTTP status, used by every route (including health and unknown paths) so clients parse one form.

use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};

/// Seconds a client is told to wait before retrying an overloaded or unavailable fleet.
const RETRY_AFTER_SECONDS: u64 = 1;

/// An error answered to the client.
#[derive(Debug, Clone, PartialEq)]
pub struct ApiError {
    status: StatusCode,
    kind: &'static str,
    message: String,
    param: Option<String>,
    code: Option<&'static str>,
}

/// The machine-readable code of an error response, left in the response's extensions so that the
/// metrics layer can count errors by code.
#[derive(Debug, Clone, Copy)]
pub(crate) struct ErrorCode(pub(crate) &'static str);

impl ApiError {
    fn new(status: StatusCode, kind: &'static str, message: impl Into<String>) -> Self {
        Self { status, kind, message: message.into(), param: None, code: None }
    }

    fn with_code(mut self, code: &'static str) -> Self {
        self.code = Some(code);
        self
    }

    fn with_param(mut self, param: impl Into<String>) -> Self {
        self.param = Some(param.into());
        self
    }

    /// 400: a field is missing or has a value the API does not allow.
    pub fn invalid_field(param: impl Into<String>, message: impl Into<String>) -> Self {
        Self::new(StatusCode::BAD_REQUEST, "invalid_request_error", message)
            .with_param(param)
            .with_code("invalid_value")
    }

    /// 400: the request is malformed as a whole (not JSON, empty).
    pub fn invalid_body(message: impl Into<String>) -> Self {
        Self::new(StatusCode::BAD_REQUEST, "invalid_request_error", message).with_code("invalid_json")
    }

    /// 400: a valid value of the API that canopy does not implement.
    pub fn unsupported(param: impl Into<String>, message: impl Into<String>) -> Self {
        Self::new(StatusCode::BAD_REQUEST, "invalid_request_error", message)
            .with_param(param)
            .with_code("unsupported_value")
    }

    /// 400: the worker refused the request's parameters.
    pub fn rejected_by_worker(message: impl Into<String>) -> Self {
        Self::new(StatusCode::BAD_REQUEST, "invalid_request_error", message).with_code("invalid_request")
    }

    /// 400: the prompt (plus the tokens asked for) does not fit the model's context window.
    pub fn context_length_exceeded(param: &str, message: impl Into<String>) -> Self {
        Self::new(StatusCode::BAD_REQUEST, "invalid_request_error", message)
            .with_param(param)
            .with_code("context_length_exceeded")
    }

    /// 404: no worker serves the model.
    pub fn model_not_found(model: &str) -> Self {
        Self::new(
            StatusCode::NOT_FOUND,
            "invalid_request_error",
            format!("The model `{model}` does not exist or is not served by any worker."),
        )
        .with_param("model")
        .with_code("model_not_found")
    }

    /// 404: no route at this path.
    pub fn unknown_route(method: &str, path: &str) -> Self {
        Self::new(
            StatusCode::NOT_FOUND,
            "invalid_request_error",
            format!("Unknown request URL: {method} {path}"),
        )
        .with_code("unknown_url")
    }

    /// 405: the path exists, the method does not.
    pub fn method_not_allowed(method: &str, path: &str) -> Self {
        Self::new(
            StatusCode::METHOD_NOT_ALLOWED,
            "invalid_request_error",
            format!("Method {method} is not allowed for {path}"),
        )
        .with_code("method_not_allowed")
    }

    /// 413: the body is larger than the router accepts.
    pub fn body_too_large(limit: usize) -> Self {
        Self::new(
            StatusCode::PAYLOAD_TOO_LARGE,
            "invalid_request_error",
            format!("The request body is larger than the {limit} bytes this router accepts."),
        )
        .with_code("request_too_large")
    }

    /// 429: the workers' queues are full; the client should retry later.
    pub fn queue_full(message: impl Into<String>) -> Self {
        Self::new(StatusCode::TOO_MANY_REQUESTS, "overloaded_error", message).with_code("queue_full")
    }

    /// 503: no worker can take the request now.
    pub fn no_worker_available(message: impl Into<String>) -> Self {
        Self::new(StatusCode::SERVICE_UNAVAILABLE, "service_unavailable_error", message)
            .with_code("no_worker_available")
    }

    /// 504: the request's deadline passed.
    pub fn deadline_exceeded(message: impl Into<String>) -> Self {
        Self::new(StatusCode::GATEWAY_TIMEOUT, "timeout_error", message).with_code("deadline_exceeded")
    }

    /// 502: the worker failed in a way the client cannot fix.
    pub fn worker_failed(message: impl Into<String>) -> Self {
        Self::new(StatusCode::BAD_GATEWAY, "api_error", message).with_code("worker_error")
    }

    /// 500: a bug in the router.
    pub fn internal(message: impl Into<String>) -> Self {
        Self::new(StatusCode::INTERNAL_SERVER_ERROR, "api_error", message).with_code("internal_error")
    }

    /// The error's code, or its type when it has no code.
    pub fn code(&self) -> &'static str {
        self.code.unwrap_or(self.kind)
    }

    /// The `{"error": {...}}` body, also sent as the last event of a stream that fails.
    pub fn to_json(&self) -> Value {
        json!({
            "error": {
                "message": self.message,
                "type": self.kind,
                "param": self.param,
                "code": self.code,
            }
        })
    }
}

impl std::fmt::Display for ApiError {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(formatter, "{} ({})", self.message, self.status)
    }
}

impl std::error::Error for ApiError {}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let mut response = (self.status, axum::Json(self.to_json())).into_response();
        if matches!(self.status, StatusCode::TOO_MANY_REQUESTS | StatusCode::SERVICE_UNAVAILABLE) {
            response.headers_mut().insert(header::RETRY_AFTER, HeaderValue::from(RETRY_AFTER_SECONDS));
        }
        response.extensions_mut().insert(ErrorCode(self.code()));
        response
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn body_has_the_openai_shape() {
        let body = ApiError::invalid_field("temperature", "temperature must be at least 0").to_json();
        assert_eq!(
            body,
            json!({"error": {"message": "temperature must be at least 0", "type": "invalid_request_error",
                             "param": "temperature", "code": "invalid_value"}})
        );
    }

    #[test]
    fn overload_responses_say_when_to_retry() {
        let response = ApiError::queue_full("full").into_response();
        assert_eq!(response.status(), StatusCode::TOO_MANY_REQUESTS);
        assert_eq!(response.headers()[header::RETRY_AFTER], "1");
        let response = ApiError::model_not_found("m").into_response();
        assert!(response.headers().get(header::RETRY_AFTER).is_none());
    }
}
