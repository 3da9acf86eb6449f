//! Log-probabilities in the two OpenAI forms: the chat form (one object per token) and the legacy
//! completions form (parallel arrays).

use canopy_proto::v1::TokenLogprob;
use serde_json::{Map, Value, json};

/// `{"content": [{"token", "logprob", "bytes", "top_logprobs": [...]}, ...]}` for chat.
pub(crate) fn chat(tokens: &[TokenLogprob]) -> Value {
    let content: Vec<Value> = tokens
        .iter()
        .map(|token| {
            let top: Vec<Value> = token
                .top
                .iter()
                .map(|alternative| {
                    json!({
                        "token": alternative.token,
                        "logprob": alternative.logprob,
                        "bytes": alternative.token.as_bytes(),
                    })
                })
                .collect();
            json!({
                "token": token.token,
                "logprob": token.logprob,
                "bytes": token.token.as_bytes(),
                "top_logprobs": top,
            })
        })
        .collect();
    json!({ "content": content })
}

/// `{"tokens", "token_logprobs", "top_logprobs", "text_offset"}` for completions. Offsets count
/// characters from `start_offset`, the length of the text sent before these tokens.
pub(crate) fn legacy(tokens: &[TokenLogprob], start_offset: usize) -> Value {
    let mut offset = start_offset;
    let mut text_offset = Vec::with_capacity(tokens.len());
    for token in tokens {
        text_offset.push(offset);
        offset += token.token.chars().count();
    }
    let top: Vec<Value> = tokens
        .iter()
        .map(|token| {
            let alternatives: Map<String, Value> = token
                .top
                .iter()
                .map(|alternative| (alternative.token.clone(), json!(alternative.logprob)))
                .collect();
            Value::Object(alternatives)
        })
        .collect();
    json!({
        "tokens": tokens.iter().map(|token| token.token.as_str()).collect::<Vec<_>>(),
        "token_logprobs": tokens.iter().map(|token| token.logprob).collect::<Vec<_>>(),
        "top_logprobs": top,
        "text_offset": text_offset,
    })
}

#[cfg(test)]
mod tests {
    use canopy_proto::v1::TopLogprob;

    use super::*;

    fn tokens() -> Vec<TokenLogprob> {
        vec![
            TokenLogprob {
                token_id: 1,
                token: "Hé".into(),
                logprob: -0.5,
                top: vec![TopLogprob { token_id: 1, token: "Hé".into(), logprob: -0.5 }],
            },
            TokenLogprob { token_id: 2, token: "!".into(), logprob: -1.0, top: vec![] },
        ]
    }

    #[test]
    fn chat_form_has_bytes_and_alternatives() {
        let value = chat(&tokens());
        assert_eq!(value["content"][0]["bytes"], json!([72, 195, 169]));
        assert_eq!(value["content"][0]["top_logprobs"][0]["token"], "Hé");
        assert_eq!(value["content"][1]["logprob"], -1.0);
    }

    #[test]
    fn legacy_form_counts_characters() {
        let value = legacy(&tokens(), 3);
        assert_eq!(value["tokens"], json!(["Hé", "!"]));
        assert_eq!(value["text_offset"], json!([3, 5]));
        assert_eq!(value["top_logprobs"][0]["Hé"], -0.5);
    }
}
