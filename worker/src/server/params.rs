//! The non-input fields of a `GenerateRequest`, checked and turned into engine types: sampling,
//! stop conditions, log-probabilities and the deadline.

use std::time::{Duration, Instant, SystemTime};

use canopy_proto::Timestamp;
use canopy_proto::v1;

use super::error::RequestError;
use crate::engine::StopConditions;
use crate::sampling::SamplingParams;

/// The longest request id accepted, in bytes.
pub const MAX_REQUEST_ID_BYTES: usize = 128;
/// The most stop strings of one request.
pub const MAX_STOP_STRINGS: usize = 16;
/// The most alternatives reported per generated token.
pub const MAX_TOP_LOGPROBS: u32 = 20;

/// Checks the request id's length.
pub fn check_request_id(request_id: &str) -> Result<(), RequestError> {
    if request_id.len() > MAX_REQUEST_ID_BYTES {
        return Err(RequestError::invalid(format!(
            "request_id has {} bytes, at most {MAX_REQUEST_ID_BYTES} are allowed",
            request_id.len()
        )));
    }
    Ok(())
}

/// The sampling parameters; unset fields stay unset and an absent message is greedy decoding.
pub fn sampling(params: Option<&v1::SamplingParams>) -> Result<SamplingParams, RequestError> {
    let Some(params) = params else { return Ok(SamplingParams::greedy()) };
    let sampling = SamplingParams {
        temperature: params.temperature,
        top_k: params.top_k,
        top_p: params.top_p,
        min_p: params.min_p,
        seed: params.seed,
        repetition_penalty: params.repetition_penalty,
        presence_penalty: params.presence_penalty,
        frequency_penalty: params.frequency_penalty,
    };
    sampling.validate()?;
    Ok(sampling)
}

/// The stop conditions: stop strings, the token limit (unset: until the context is full) and
/// whether end-of-generation tokens are ignored.
pub fn stop_conditions(request: &v1::GenerateRequest) -> Result<StopConditions, RequestError> {
    if request.stop.len() > MAX_STOP_STRINGS {
        return Err(RequestError::invalid(format!(
            "{} stop strings given, at most {MAX_STOP_STRINGS} are allowed",
            request.stop.len()
        )));
    }
    if let Some(index) = request.stop.iter().position(String::is_empty) {
        return Err(RequestError::invalid(format!("stop[{index}] is empty")));
    }
    let max_tokens = match request.max_tokens {
        Some(0) => return Err(RequestError::invalid("max_tokens must be at least 1")),
        Some(max) => max as usize,
        None => usize::MAX,
    };
    Ok(StopConditions { max_tokens, stop_strings: request.stop.clone(), ignore_eos: request.ignore_eos })
}

/// How many alternatives to report per token.
pub fn top_logprobs(top: Option<u32>) -> Result<Option<usize>, RequestError> {
    match top {
        Some(top) if top > MAX_TOP_LOGPROBS => Err(RequestError::invalid(format!(
            "top_logprobs is {top}, at most {MAX_TOP_LOGPROBS} are allowed"
        ))),
        top => Ok(top.map(|top| top as usize)),
    }
}

/// The instant the request must be done by: the earlier of its `deadline` and the gRPC timeout
/// (the `grpc-timeout` header), if either is set. A deadline already past is an error.
pub fn deadline(
    deadline: Option<&Timestamp>,
    grpc_timeout: Option<&str>,
    now: Instant,
) -> Result<Option<Instant>, RequestError> {
    let from_timestamp = match deadline {
        None => None,
        Some(timestamp) => {
            let at = SystemTime::try_from(*timestamp)
                .map_err(|error| RequestError::invalid(format!("deadline is not a valid time: {error}")))?;
            let left = at.duration_since(SystemTime::now()).map_err(|_| RequestError::DeadlineExceeded)?;
            // A deadline too far ahead to represent is no deadline.
            now.checked_add(left)
        }
    };
    let from_header = match grpc_timeout {
        None => None,
        Some(header) => {
            let timeout = parse_grpc_timeout(header)
                .ok_or_else(|| RequestError::invalid(format!("grpc-timeout {header:?} is malformed")))?;
            now.checked_add(timeout)
        }
    };
    let earliest = from_timestamp.into_iter().chain(from_header).min();
    match earliest {
        Some(at) if at <= now => Err(RequestError::DeadlineExceeded),
        earliest => Ok(earliest),
    }
}

/// Parses a `grpc-timeout` header value: up to 8 digits and a unit (`H`, `M`, `S`, `m`, `u`, `n`).
pub fn parse_grpc_timeout(value: &str) -> Option<Duration> {
    let unit_at = value.len().checked_sub(1)?;
    let (digits, unit) = value.split_at(unit_at);
    if digits.is_empty() || digits.len() > 8 || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let amount: u64 = digits.parse().ok()?;
    Some(match unit {
        "H" => Duration::from_secs(amount * 3600),
        "M" => Duration::from_secs(amount * 60),
        "S" => Duration::from_secs(amount),
        "m" => Duration::from_millis(amount),
        "u" => Duration::from_micros(amount),
        "n" => Duration::from_nanos(amount),
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn grpc_timeouts_parse_every_unit_and_refuse_garbage() {
        assert_eq!(parse_grpc_timeout("2H"), Some(Duration::from_secs(7200)));
        assert_eq!(parse_grpc_timeout("3M"), Some(Duration::from_secs(180)));
        assert_eq!(parse_grpc_timeout("5S"), Some(Duration::from_secs(5)));
        assert_eq!(parse_grpc_timeout("250m"), Some(Duration::from_millis(250)));
        assert_eq!(parse_grpc_timeout("7u"), Some(Duration::from_micros(7)));
        assert_eq!(parse_grpc_timeout("9n"), Some(Duration::from_nanos(9)));
        for bad in ["", "S", "5", "5x", "-5S", "123456789S", "1.5S"] {
            assert_eq!(parse_grpc_timeout(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn the_earlier_deadline_wins_and_a_past_one_is_refused() {
        let now = Instant::now();
        let in_a_minute = Timestamp::from(SystemTime::now() + Duration::from_secs(60));
        let at = deadline(Some(&in_a_minute), Some("2S"), now).unwrap().unwrap();
        assert_eq!(at, now + Duration::from_secs(2));
        let at = deadline(Some(&in_a_minute), None, now).unwrap().unwrap();
        assert!(at > now + Duration::from_secs(50));
        assert_eq!(deadline(None, None, now).unwrap(), None);
        let past = Timestamp::from(SystemTime::now() - Duration::from_secs(1));
        assert!(matches!(deadline(Some(&past), None, now), Err(RequestError::DeadlineExceeded)));
        assert!(matches!(deadline(None, Some("0S"), now), Err(RequestError::DeadlineExceeded)));
        let unrepresentable = Timestamp { seconds: i64::MIN, nanos: 0 };
        assert!(matches!(deadline(Some(&unrepresentable), None, now), Err(RequestError::InvalidField(_))));
        let far_ahead = Timestamp { seconds: i64::MAX, nanos: 0 };
        assert!(deadline(Some(&far_ahead), None, now).is_ok());
    }
}
