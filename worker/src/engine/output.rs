//! Generated tokens to streamed text: incremental detokenization, end-of-generation tokens, stop
//! strings and the token limit, in one place.

use canopy_models::tokenizer::{SpecialTokens, StreamDecoder, Tokenizer, TokenizerError};

use super::stop::{FinishReason, StopScan, StopStrings};

/// When a generation ends besides the model's end-of-generation tokens.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StopConditions {
    /// The most new tokens to generate (the end-of-generation token included).
    pub max_tokens: usize,
    /// Texts that end the generation; they are not part of the output.
    pub stop_strings: Vec<String>,
    /// Keep going past end-of-generation tokens (benchmarks, tests).
    pub ignore_eos: bool,
}

impl StopConditions {
    /// Stop after `max_tokens` or at an end-of-generation token.
    pub fn max_tokens(max_tokens: usize) -> Self {
        Self { max_tokens, stop_strings: Vec::new(), ignore_eos: false }
    }
}

/// The outcome of one generated token.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum OutputStep {
    /// Keep generating; this text (possibly empty) is ready to show.
    Continue(String),
    /// The generation is over: show this last text (possibly empty) and stop.
    Finished {
        /// Text released by the end: held-back characters or text before a stop string.
        text: String,
        /// Why it ended.
        reason: FinishReason,
    },
}

/// Follows one sequence's generated tokens and decides what text to emit and when to stop.
pub struct OutputTracker<'t> {
    decoder: Option<StreamDecoder<'t>>,
    special: &'t SpecialTokens,
    stops: StopStrings,
    max_tokens: usize,
    ignore_eos: bool,
    generated: usize,
    finished: Option<FinishReason>,
}

impl<'t> OutputTracker<'t> {
    /// A tracker for text decoded by `tokenizer` without its control tokens.
    pub fn new(tokenizer: &'t Tokenizer, conditions: &StopConditions) -> Self {
        Self {
            decoder: Some(tokenizer.stream_decoder(true)),
            special: tokenizer.special(),
            stops: StopStrings::new(conditions.stop_strings.iter().cloned()),
            max_tokens: conditions.max_tokens,
            ignore_eos: conditions.ignore_eos,
            generated: 0,
            finished: None,
        }
    }

    /// New tokens generated so far.
    pub fn generated(&self) -> usize {
        self.generated
    }

    /// Takes the next generated token. After the generation finished, every call reports the
    /// same reason again with no text.
    pub fn push(&mut self, token: u32) -> Result<OutputStep, TokenizerError> {
        if let Some(reason) = &self.finished {
            return Ok(OutputStep::Finished { text: String::new(), reason: reason.clone() });
        }
        self.generated += 1;
        let piece = match self.decoder.as_mut() {
            Some(_) if !self.ignore_eos && self.special.is_end_of_generation(token) => {
                return self.finished_step(String::new(), FinishReason::Stop);
            }
            Some(decoder) => decoder.step(token)?,
            None => None,
        };
        let text = match piece.map(|piece| self.stops.push(&piece)) {
            Some(StopScan::Stopped { before, stop }) => {
                self.decoder = None;
                self.finished = Some(FinishReason::StopString(stop.clone()));
                return Ok(OutputStep::Finished { text: before, reason: FinishReason::StopString(stop) });
            }
            Some(StopScan::Text(text)) => text,
            None => String::new(),
        };
        if self.generated < self.max_tokens {
            Ok(OutputStep::Continue(text))
        } else {
            self.finished_step(text, FinishReason::Length)
        }
    }

    /// Ends the generation for a reason decided outside (a full context window). Returns the
    /// text still held back and the reason, which is a stop string if the held text reaches one.
    pub fn end(&mut self, reason: FinishReason) -> Result<(String, FinishReason), TokenizerError> {
        self.end_after(String::new(), reason)
    }

    fn finished_step(&mut self, text: String, reason: FinishReason) -> Result<OutputStep, TokenizerError> {
        let (text, reason) = self.end_after(text, reason)?;
        Ok(OutputStep::Finished { text, reason })
    }

    /// Ends after `text`, flushing the decoder and the stop-string watcher behind it.
    fn end_after(
        &mut self,
        mut text: String,
        reason: FinishReason,
    ) -> Result<(String, FinishReason), TokenizerError> {
        if let Some(reason) = &self.finished {
            return Ok((text, reason.clone()));
        }
        let tail = match self.decoder.take() {
            Some(decoder) => decoder.finish()?.unwrap_or_default(),
            None => String::new(),
        };
        let reason = match self.stops.push(&tail) {
            StopScan::Text(flushed) => {
                text.push_str(&flushed);
                text.push_str(&self.stops.finish());
                reason
            }
            StopScan::Stopped { before, stop } => {
                text.push_str(&before);
                FinishReason::StopString(stop)
            }
        };
        self.finished = Some(reason.clone());
        Ok((text, reason))
    }
}

#[cfg(test)]
mod tests {
    use canopy_models::gguf::GgufFile;

    use super::*;

    const MODEL: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../models/testdata/models/qwen3-tiny-f32.gguf");

    fn tokenizer() -> Tokenizer {
        Tokenizer::from_gguf(&GgufFile::open(MODEL).unwrap()).unwrap()
    }

    /// Pushes `tokens` until the tracker finishes; returns the text and the reason, if any.
    fn follow(tracker: &mut OutputTracker<'_>, tokens: &[u32]) -> (String, Option<FinishReason>) {
        let mut text = String::new();
        for &token in tokens {
            match tracker.push(token).unwrap() {
                OutputStep::Continue(piece) => text.push_str(&piece),
                OutputStep::Finished { text: piece, reason } => {
                    text.push_str(&piece);
                    return (text, Some(reason));
                }
            }
        }
        (text, None)
    }

    const TEXT: &str = "def quicksort(arr):\n    if len(arr) <= 1:\n        return arr\n";

    #[test]
    fn streamed_text_reassembles_the_decoding() {
        let tokenizer = tokenizer();
        let ids = tokenizer.encode(TEXT, false).unwrap();
        let mut tracker = OutputTracker::new(&tokenizer, &StopConditions::max_tokens(1000));
        let (text, reason) = follow(&mut tracker, &ids);
        assert_eq!(reason, None);
        let (rest, reason) = tracker.end(FinishReason::ContextFull).unwrap();
        assert_eq!(text + &rest, TEXT);
        assert_eq!(reason, FinishReason::ContextFull);
    }

    #[test]
    fn the_token_limit_ends_with_length_and_flushes_the_text() {
        let tokenizer = tokenizer();
        let ids = tokenizer.encode(TEXT, false).unwrap();
        let mut tracker = OutputTracker::new(&tokenizer, &StopConditions::max_tokens(5));
        let (text, reason) = follow(&mut tracker, &ids);
        assert_eq!(reason, Some(FinishReason::Length));
        assert_eq!(tracker.generated(), 5);
        assert_eq!(text, tokenizer.decode(&ids[..5], true).unwrap());
    }

    #[test]
    fn an_end_of_generation_token_stops_unless_ignored() {
        let tokenizer = tokenizer();
        let eos = tokenizer.special().eos.as_ref().unwrap().id;
        let mut ids = tokenizer.encode("return arr", false).unwrap();
        ids.push(eos);
        ids.extend(tokenizer.encode(" more", false).unwrap());

        let mut tracker = OutputTracker::new(&tokenizer, &StopConditions::max_tokens(100));
        assert_eq!(follow(&mut tracker, &ids), ("return arr".into(), Some(FinishReason::Stop)));
        // Once finished, the tracker stays finished.
        assert_eq!(
            tracker.push(ids[0]).unwrap(),
            OutputStep::Finished { text: String::new(), reason: FinishReason::Stop }
        );

        let conditions = StopConditions { ignore_eos: true, ..StopConditions::max_tokens(100) };
        let mut ignoring = OutputTracker::new(&tokenizer, &conditions);
        assert_eq!(follow(&mut ignoring, &ids).1, None);
    }

    #[test]
    fn a_stop_string_across_tokens_ends_before_it() {
        let tokenizer = tokenizer();
        let ids = tokenizer.encode(TEXT, false).unwrap();
        let conditions = StopConditions {
            stop_strings: vec!["<= 1".into(), "never".into()],
            ..StopConditions::max_tokens(100)
        };
        let mut tracker = OutputTracker::new(&tokenizer, &conditions);
        let (text, reason) = follow(&mut tracker, &ids);
        assert_eq!(text, "def quicksort(arr):\n    if len(arr) ");
        assert_eq!(reason, Some(FinishReason::StopString("<= 1".into())));
        assert!(tracker.generated() < ids.len());
    }

    #[test]
    fn a_stop_string_completed_by_the_last_allowed_token_wins_over_length() {
        let tokenizer = tokenizer();
        let ids = tokenizer.encode("return arr", false).unwrap();
        let conditions =
            StopConditions { stop_strings: vec!["arr".into()], ..StopConditions::max_tokens(ids.len()) };
        let mut tracker = OutputTracker::new(&tokenizer, &conditions);
        assert_eq!(
            follow(&mut tracker, &ids),
            ("return ".into(), Some(FinishReason::StopString("arr".into())))
        );
    }
}
