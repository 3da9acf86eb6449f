//! The `canopy.v1` worker protocol: messages, the tonic client and the tonic server of the
//! `Worker` service, generated from `canopy/v1/worker.proto` (read it for what every field means).

/// Generated code of the `canopy.v1` package.
#[allow(clippy::all, clippy::pedantic, missing_docs)]
pub mod v1 {
    tonic::include_proto!("canopy.v1");
}

pub use prost_types::Timestamp;

#[cfg(test)]
mod tests {
    use prost::Message;

    use super::v1::{GenerateRequest, SamplingParams, generate_request::Input};

    #[test]
    fn unset_sampling_fields_stay_distinct_from_zero() {
        let request = GenerateRequest {
            input: Some(Input::Prompt("hi".into())),
            sampling: Some(SamplingParams { temperature: Some(0.0), ..SamplingParams::default() }),
            ..GenerateRequest::default()
        };
        let decoded = GenerateRequest::decode(request.encode_to_vec().as_slice()).expect("decodes");
        let sampling = decoded.sampling.expect("sampling survives");
        assert_eq!(sampling.temperature, Some(0.0));
        assert_eq!(sampling.top_p, None);
        assert_eq!(decoded.max_tokens, None);
        assert_eq!(decoded.input, Some(Input::Prompt("hi".into())));
    }
}
