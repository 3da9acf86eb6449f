//! The JSON body extractor of the API routes. It replaces axum's `Json`, whose rejections are plain
//! text: ours answer in the OpenAI error shape, name the field at fault, map an oversized body to
//! 413, and accept bodies whatever their content type says (many clients send none).

use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::{FromRequest, Request};
use axum::http::StatusCode;
use serde::de::DeserializeOwned;
use serde_json::error::Category;

use super::error::ApiError;

/// A request body parsed as `T`, or an [`ApiError`] naming what is wrong with it.
pub(crate) struct JsonBody<T>(pub(crate) T);

/// The body limit, so that a 413 can say what it is.
#[derive(Debug, Clone, Copy)]
pub(crate) struct BodyLimit(pub(crate) usize);

impl<S, T> FromRequest<S> for JsonBody<T>
where
    S: Send + Sync,
    T: DeserializeOwned,
    BodyLimit: axum::extract::FromRef<S>,
{
    type Rejection = ApiError;

    async fn from_request(request: Request, state: &S) -> Result<Self, Self::Rejection> {
        let BodyLimit(limit) = axum::extract::FromRef::from_ref(state);
        let bytes =
            Bytes::from_request(request, state).await.map_err(|rejection| read_error(rejection, limit))?;
        parse(&bytes).map(JsonBody)
    }
}

fn read_error(rejection: BytesRejection, limit: usize) -> ApiError {
    if rejection.status() == StatusCode::PAYLOAD_TOO_LARGE {
        ApiError::body_too_large(limit)
    } else {
        ApiError::invalid_body(format!("Could not read the request body: {}", rejection.body_text()))
    }
}

/// Parses a body, reporting syntax errors as malformed JSON and type errors with the path of the
/// field (e.g. `messages[1].content`) as the error's `param`.
pub(crate) fn parse<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, ApiError> {
    if bytes.iter().all(u8::is_ascii_whitespace) {
        return Err(ApiError::invalid_body("The request body is empty; expected a JSON object."));
    }
    let mut deserializer = serde_json::Deserializer::from_slice(bytes);
    let value = serde_path_to_error::deserialize(&mut deserializer).map_err(|error| {
        let path = error.path().to_string();
        field_error(&path, error.into_inner())
    })?;
    deserializer.end().map_err(|error| field_error(".", error))?;
    Ok(value)
}

fn field_error(path: &str, error: serde_json::Error) -> ApiError {
    match error.classify() {
        Category::Syntax | Category::Eof | Category::Io => {
            ApiError::invalid_body(format!("The request body is not valid JSON: {error}"))
        }
        Category::Data => {
            let message = strip_position(&error.to_string());
            let param = match missing_field(&message) {
                Some(field) if path == "." => field.to_string(),
                Some(field) => format!("{path}.{field}"),
                None => path.to_string(),
            };
            ApiError::invalid_field(param.clone(), format!("Invalid value for `{param}`: {message}"))
        }
    }
}

/// serde_json ends messages with " at line L column C", which points into the client's body and
/// only adds noise once the field is named.
fn strip_position(message: &str) -> String {
    match message.rfind(" at line ") {
        Some(index) => message[..index].to_string(),
        None => message.to_string(),
    }
}

/// The field named by serde's "missing field `name`" message.
fn missing_field(message: &str) -> Option<&str> {
    message.strip_prefix("missing field `")?.split('`').next()
}

#[cfg(test)]
mod tests {
    use serde::Deserialize;

    use super::*;

    #[derive(Debug, Deserialize)]
    #[allow(dead_code)]
    struct Outer {
        model: String,
        messages: Vec<Inner>,
        temperature: Option<f32>,
    }

    #[derive(Debug, Deserialize)]
    #[allow(dead_code)]
    struct Inner {
        role: String,
    }

    fn param_of(error: &ApiError) -> String {
        error.to_json()["error"]["param"].as_str().unwrap_or_default().to_string()
    }

    #[test]
    fn syntax_errors_are_malformed_json() {
        let error = parse::<Outer>(b"{\"model\": ").unwrap_err();
        assert_eq!(error.code(), "invalid_json");
        let error = parse::<Outer>(br#"{"model": "m", "messages": []} trailing"#).unwrap_err();
        assert_eq!(error.code(), "invalid_json");
        let error = parse::<Outer>(b"  ").unwrap_err();
        assert_eq!(error.code(), "invalid_json");
    }

    #[test]
    fn missing_fields_are_named() {
        let error = parse::<Outer>(br#"{"messages": []}"#).unwrap_err();
        assert_eq!(param_of(&error), "model");
        let error = parse::<Outer>(br#"{"model": "m", "messages": [{}]}"#).unwrap_err();
        assert_eq!(param_of(&error), "messages[0].role");
        let message = error.to_json()["error"]["message"].to_string();
        assert!(message.contains("missing field `role`"), "{message}");
    }

    #[test]
    fn wrong_types_name_the_field_without_positions() {
        let error = parse::<Outer>(br#"{"model": "m", "messages": [], "temperature": "hot"}"#).unwrap_err();
        assert_eq!(param_of(&error), "temperature");
        let message = error.to_json()["error"]["message"].to_string();
        assert!(!message.contains("line"), "{message}");
    }
}
