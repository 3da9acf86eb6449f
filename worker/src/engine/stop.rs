//! Stop strings over streamed text, and the reasons a generation ends.
//!
//! A stop string may span several tokens, so text that could be the start of one is held back
//! until the following text settles it. The stop string itself is never emitted, nor anything
//! after it.

use std::fmt;

/// Why a generation ended.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum FinishReason {
    /// The model produced an end-of-generation token (EOS, end of turn, end of message).
    Stop,
    /// The text reached one of the request's stop strings (the one given here).
    StopString(String),
    /// The request's maximum number of new tokens was generated.
    Length,
    /// The sequence filled the model's context window (or the KV cache reserved for it).
    ContextFull,
    /// The caller stopped listening (a client went away).
    Cancelled,
    /// The request's deadline passed while it was running.
    Deadline,
    /// The worker shut down before the generation ended.
    Aborted,
}

impl fmt::Display for FinishReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Stop => f.write_str("stop"),
            Self::StopString(stop) => write!(f, "stop string {stop:?}"),
            Self::Length => f.write_str("length"),
            Self::ContextFull => f.write_str("context full"),
            Self::Cancelled => f.write_str("cancelled"),
            Self::Deadline => f.write_str("deadline"),
            Self::Aborted => f.write_str("aborted"),
        }
    }
}

/// What [`StopStrings::push`] found in the text so far.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum StopScan {
    /// No stop string yet; this text is safe to emit (possibly empty while text is held back).
    Text(String),
    /// A stop string was reached: emit `before`, then end.
    Stopped {
        /// The text between what was emitted earlier and the stop string.
        before: String,
        /// The stop string that matched (the earliest in the text; the first listed on ties).
        stop: String,
    },
}

/// Watches streamed text for stop strings.
#[derive(Clone, Debug, Default)]
pub struct StopStrings {
    stops: Vec<String>,
    held: String,
}

impl StopStrings {
    /// Watches for `stops`; empty strings are ignored (they would match before any text).
    pub fn new(stops: impl IntoIterator<Item = String>) -> Self {
        Self { stops: stops.into_iter().filter(|s| !s.is_empty()).collect(), held: String::new() }
    }

    /// Adds the next piece of text.
    pub fn push(&mut self, text: &str) -> StopScan {
        if self.stops.is_empty() {
            return StopScan::Text(text.to_owned());
        }
        self.held.push_str(text);
        let earliest = self
            .stops
            .iter()
            .filter_map(|stop| self.held.find(stop.as_str()).map(|at| (at, stop)))
            .min_by_key(|(at, _)| *at);
        if let Some((at, stop)) = earliest {
            let stop = stop.clone();
            let mut before = std::mem::take(&mut self.held);
            before.truncate(at);
            return StopScan::Stopped { before, stop };
        }
        let hold = self.stops.iter().map(|stop| partial_match_len(&self.held, stop)).max().unwrap_or(0);
        let emit_len = self.held.len() - hold;
        StopScan::Text(self.held.drain(..emit_len).collect())
    }

    /// The held-back text, once no more text will come.
    pub fn finish(&mut self) -> String {
        std::mem::take(&mut self.held)
    }
}

/// The length of the longest suffix of `text` that is a proper prefix of `stop`.
fn partial_match_len(text: &str, stop: &str) -> usize {
    (1..stop.len()).rev().find(|&len| stop.is_char_boundary(len) && text.ends_with(&stop[..len])).unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Feeds `pieces` and returns the emitted text and the stop string, if one matched.
    fn run(stops: &[&str], pieces: &[&str]) -> (String, Option<String>) {
        let mut watcher = StopStrings::new(stops.iter().map(|s| s.to_string()));
        let mut out = String::new();
        for piece in pieces {
            match watcher.push(piece) {
                StopScan::Text(text) => out.push_str(&text),
                StopScan::Stopped { before, stop } => {
                    out.push_str(&before);
                    return (out, Some(stop));
                }
            }
        }
        out.push_str(&watcher.finish());
        (out, None)
    }

    #[test]
    fn text_without_stop_strings_passes_through() {
        assert_eq!(run(&[], &["a", "b"]), ("ab".into(), None));
        assert_eq!(run(&["zz"], &["a", "b", "z"]), ("abz".into(), None));
        assert_eq!(run(&[""], &["a"]), ("a".into(), None));
    }

    #[test]
    fn a_stop_string_inside_one_piece_cuts_the_text() {
        assert_eq!(run(&["END"], &["hello END world"]), ("hello ".into(), Some("END".into())));
    }

    #[test]
    fn a_stop_string_spanning_pieces_is_never_emitted() {
        let mut watcher = StopStrings::new(["</answer>".to_string()]);
        assert_eq!(watcher.push("42</"), StopScan::Text("42".into()));
        assert_eq!(watcher.push("ans"), StopScan::Text(String::new()));
        assert_eq!(
            watcher.push("wer> more"),
            StopScan::Stopped { before: String::new(), stop: "</answer>".into() }
        );
    }

    #[test]
    fn held_text_is_released_when_it_stops_matching() {
        let mut watcher = StopStrings::new(["STOP".to_string()]);
        assert_eq!(watcher.push("a ST"), StopScan::Text("a ".into()));
        assert_eq!(watcher.push("OR"), StopScan::Text("STOR".into()));
        assert_eq!(watcher.push("S"), StopScan::Text(String::new()));
        assert_eq!(watcher.finish(), "S");
    }

    #[test]
    fn the_earliest_of_several_stop_strings_wins() {
        let (text, stop) = run(&["world", "lo w"], &["hel", "lo wor", "ld"]);
        assert_eq!((text.as_str(), stop.as_deref()), ("hel", Some("lo w")));
        let (text, stop) = run(&["ab", "a"], &["xab"]);
        assert_eq!((text.as_str(), stop.as_deref()), ("x", Some("ab")));
    }

    #[test]
    fn multibyte_stop_strings_hold_back_whole_characters() {
        let mut watcher = StopStrings::new(["日本語".to_string()]);
        assert_eq!(watcher.push("x日本"), StopScan::Text("x".into()));
        assert_eq!(watcher.push("人"), StopScan::Text("日本人".into()));
        assert_eq!(run(&["é!"], &["caf", "é", "!"]), ("caf".into(), Some("é!".into())));
    }

    #[test]
    fn a_stop_string_repeating_its_own_prefix_is_found() {
        assert_eq!(run(&["aab"], &["a", "a", "a", "b"]), ("a".into(), Some("aab".into())));
    }
}
