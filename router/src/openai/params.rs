//! Request fields shared by chat completions and completions: sampling, stop sequences, limits,
//! and the fields accepted only with their default value. Each check names the offending field.

use canopy_proto::v1::SamplingParams;
use serde::Deserialize;

use super::error::ApiError;

/// The most stop sequences a worker accepts (worker.proto).
const MAX_STOP_SEQUENCES: usize = 16;

/// The most alternatives per token a worker returns (worker.proto).
const MAX_TOP_LOGPROBS: u32 = 20;

/// `stop` is a string or an array of strings.
#[derive(Debug, Deserialize)]
#[serde(untagged, expecting = "a string or an array of strings")]
pub(crate) enum Stop {
    One(String),
    Many(Vec<String>),
}

/// `stream_options`.
#[derive(Debug, Default, Deserialize)]
pub(crate) struct StreamOptions {
    #[serde(default)]
    pub(crate) include_usage: bool,
}

/// The sampling fields of a request as the client sent them, before validation.
#[derive(Debug, Default)]
pub(crate) struct SamplingFields {
    pub(crate) temperature: Option<f64>,
    pub(crate) top_p: Option<f64>,
    pub(crate) top_k: Option<i64>,
    pub(crate) min_p: Option<f64>,
    pub(crate) seed: Option<u64>,
    pub(crate) presence_penalty: Option<f64>,
    pub(crate) frequency_penalty: Option<f64>,
    pub(crate) repetition_penalty: Option<f64>,
}

impl SamplingFields {
    /// Checks every range and converts to the worker's form; unset stays unset.
    pub(crate) fn into_params(self) -> Result<SamplingParams, ApiError> {
        let top_k = match self.top_k {
            None => None,
            // -1 is how vLLM and others spell "off"; the worker spells it 0.
            Some(-1 | 0) => Some(0),
            Some(k) => Some(u32::try_from(k).map_err(|_| {
                ApiError::invalid_field(
                    "top_k",
                    "`top_k` must be a positive integer, or 0 or -1 for no limit",
                )
            })?),
        };
        Ok(SamplingParams {
            temperature: checked("temperature", self.temperature, |t| t >= 0.0, "at least 0")?,
            top_k,
            top_p: checked("top_p", self.top_p, |p| p > 0.0 && p <= 1.0, "greater than 0 and at most 1")?,
            min_p: checked("min_p", self.min_p, |p| (0.0..=1.0).contains(&p), "between 0 and 1")?,
            seed: self.seed,
            repetition_penalty: checked(
                "repetition_penalty",
                self.repetition_penalty,
                |p| p > 0.0,
                "greater than 0",
            )?,
            presence_penalty: checked(
                "presence_penalty",
                self.presence_penalty,
                |p| (-2.0..=2.0).contains(&p),
                "between -2 and 2",
            )?,
            frequency_penalty: checked(
                "frequency_penalty",
                self.frequency_penalty,
                |p| (-2.0..=2.0).contains(&p),
                "between -2 and 2",
            )?,
        })
    }
}

fn checked(
    name: &str,
    value: Option<f64>,
    allowed: impl Fn(f64) -> bool,
    range: &str,
) -> Result<Option<f32>, ApiError> {
    match value {
        None => Ok(None),
        Some(value) if value.is_finite() && allowed(value) => Ok(Some(value as f32)),
        Some(value) => Err(ApiError::invalid_field(name, format!("`{name}` must be {range}, got {value}"))),
    }
}

/// The stop sequences for the worker: empty strings dropped (they would match everywhere).
pub(crate) fn stop_sequences(stop: Option<Stop>) -> Result<Vec<String>, ApiError> {
    let sequences: Vec<String> = match stop {
        None => Vec::new(),
        Some(Stop::One(one)) => vec![one],
        Some(Stop::Many(many)) => many,
    };
    let sequences: Vec<String> = sequences.into_iter().filter(|sequence| !sequence.is_empty()).collect();
    if sequences.len() > MAX_STOP_SEQUENCES {
        return Err(ApiError::invalid_field(
            "stop",
            format!("`stop` may hold at most {MAX_STOP_SEQUENCES} sequences, got {}", sequences.len()),
        ));
    }
    Ok(sequences)
}

/// The limit on new tokens: the smaller of the ones given (a client that sends both expects both
/// to hold). Zero is refused: it would ask for nothing.
pub(crate) fn max_new_tokens(limits: &[(&str, Option<u32>)]) -> Result<Option<u32>, ApiError> {
    let mut smallest: Option<u32> = None;
    for &(name, limit) in limits {
        match limit {
            Some(0) => return Err(ApiError::invalid_field(name, format!("`{name}` must be at least 1"))),
            Some(limit) => smallest = Some(smallest.map_or(limit, |current| current.min(limit))),
            None => {}
        }
    }
    Ok(smallest)
}

/// Refuses more than one choice: canopy generates one sequence per request.
pub(crate) fn single_choice(name: &str, value: Option<u32>) -> Result<(), ApiError> {
    match value {
        None | Some(1) => Ok(()),
        Some(other) => Err(ApiError::unsupported(
            name,
            format!("`{name}` must be 1 (got {other}); send one request per choice instead"),
        )),
    }
}

/// Checks the number of alternatives per token asked for.
pub(crate) fn top_logprobs(name: &str, count: u32) -> Result<u32, ApiError> {
    if count > MAX_TOP_LOGPROBS {
        return Err(ApiError::invalid_field(
            name,
            format!("`{name}` must be at most {MAX_TOP_LOGPROBS}, got {count}"),
        ));
    }
    Ok(count)
}

/// Refuses a non-empty `logit_bias`: silently ignoring it would change what the client gets.
pub(crate) fn no_logit_bias(
    logit_bias: Option<&serde_json::Map<String, serde_json::Value>>,
) -> Result<(), ApiError> {
    match logit_bias {
        Some(bias) if !bias.is_empty() => {
            Err(ApiError::unsupported("logit_bias", "`logit_bias` is not supported"))
        }
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unset_sampling_stays_unset() {
        assert_eq!(SamplingFields::default().into_params().unwrap(), SamplingParams::default());
    }

    #[test]
    fn sampling_ranges_are_checked_by_name() {
        let error = SamplingFields { top_p: Some(0.0), ..Default::default() }.into_params().unwrap_err();
        assert_eq!(error.to_json()["error"]["param"], "top_p");
        let error =
            SamplingFields { temperature: Some(-0.5), ..Default::default() }.into_params().unwrap_err();
        assert_eq!(error.to_json()["error"]["param"], "temperature");
        let error = SamplingFields { top_k: Some(-3), ..Default::default() }.into_params().unwrap_err();
        assert_eq!(error.to_json()["error"]["param"], "top_k");
    }

    #[test]
    fn top_k_minus_one_means_off() {
        let params = SamplingFields { top_k: Some(-1), ..Default::default() }.into_params().unwrap();
        assert_eq!(params.top_k, Some(0));
    }

    #[test]
    fn stops_accept_one_or_many_and_drop_empty_ones() {
        assert_eq!(stop_sequences(Some(Stop::One("x".into()))).unwrap(), vec!["x"]);
        assert_eq!(stop_sequences(Some(Stop::Many(vec!["a".into(), String::new()]))).unwrap(), vec!["a"]);
        assert!(stop_sequences(Some(Stop::Many(vec!["s".into(); 17]))).is_err());
    }

    #[test]
    fn the_smaller_token_limit_holds() {
        assert_eq!(max_new_tokens(&[("a", Some(10)), ("b", Some(5))]).unwrap(), Some(5));
        assert_eq!(max_new_tokens(&[("a", None), ("b", Some(7))]).unwrap(), Some(7));
        assert_eq!(max_new_tokens(&[("a", None)]).unwrap(), None);
        assert!(max_new_tokens(&[("a", Some(0))]).is_err());
    }
}
