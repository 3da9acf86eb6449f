//! The tokenizer-relevant part of GGUF metadata (`tokenizer.ggml.*`) as a plain struct.
//!
//! Every value here comes from an untrusted file; this module only extracts and shapes it, the
//! builders validate it.

use crate::gguf::{GgufError, GgufFile};

use super::error::TokenizerError;

/// How a vocabulary entry behaves, from `tokenizer.ggml.token_type` (llama.cpp's numbering).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TokenType {
    /// 0 or any value this crate does not know.
    Undefined,
    /// 1: an ordinary piece of text.
    Normal,
    /// 2: the unknown-token placeholder.
    Unknown,
    /// 3: a control token (BOS, EOS, chat markers); hidden when decoding with `skip_special`.
    Control,
    /// 4: a user-defined token, matched in input text and always rendered.
    UserDefined,
    /// 5: a reserved, unused slot.
    Unused,
    /// 6: a byte-fallback token written `<0xNN>`.
    Byte,
}

impl TokenType {
    /// Maps the GGUF integer code to a token type.
    pub fn from_code(code: i64) -> Self {
        match code {
            1 => Self::Normal,
            2 => Self::Unknown,
            3 => Self::Control,
            4 => Self::UserDefined,
            5 => Self::Unused,
            6 => Self::Byte,
            _ => Self::Undefined,
        }
    }

    /// Whether text equal to this token is cut out of the input before normal tokenization.
    pub(crate) fn is_added(self) -> bool {
        matches!(self, Self::Control | Self::Unknown | Self::UserDefined)
    }

    /// Whether this token is hidden when decoding with `skip_special`.
    pub(crate) fn is_special(self) -> bool {
        matches!(self, Self::Control | Self::Unknown)
    }
}

/// Special-token ids and flags (`tokenizer.ggml.*_token_id`, `add_bos_token`, ...), unvalidated.
///
/// Ids are kept as read (`u64`) so that an out-of-range value can be reported as it was written.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct SpecialMetadata {
    /// `tokenizer.ggml.bos_token_id`
    pub bos_id: Option<u64>,
    /// `tokenizer.ggml.eos_token_id`
    pub eos_id: Option<u64>,
    /// `tokenizer.ggml.eot_token_id`
    pub eot_id: Option<u64>,
    /// `tokenizer.ggml.eom_token_id`
    pub eom_id: Option<u64>,
    /// `tokenizer.ggml.unknown_token_id`
    pub unk_id: Option<u64>,
    /// `tokenizer.ggml.padding_token_id`
    pub pad_id: Option<u64>,
    /// `tokenizer.ggml.add_bos_token`
    pub add_bos: Option<bool>,
    /// `tokenizer.ggml.add_eos_token`
    pub add_eos: Option<bool>,
    /// `tokenizer.ggml.add_space_prefix`
    pub add_space_prefix: Option<bool>,
}

/// Everything needed to rebuild a tokenizer from GGUF metadata.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct TokenizerMetadata {
    /// `tokenizer.ggml.model`: `gpt2` (byte-level BPE), `llama` (SentencePiece) or `gemma4`.
    pub model: String,
    /// `tokenizer.ggml.pre`: the pre-tokenizer profile of BPE vocabularies.
    pub pre: Option<String>,
    /// `tokenizer.ggml.tokens`: token text by id.
    pub tokens: Vec<String>,
    /// `tokenizer.ggml.token_type`: one per token; empty when the key is absent (all normal).
    pub token_types: Vec<TokenType>,
    /// `tokenizer.ggml.scores`: SentencePiece piece scores, one per token.
    pub scores: Option<Vec<f32>>,
    /// `tokenizer.ggml.merges`: BPE merge rules `"left right"`, highest priority first.
    pub merges: Vec<String>,
    /// Special-token ids and flags.
    pub special: SpecialMetadata,
}

impl SpecialMetadata {
    /// Reads the special-token keys of a GGUF file; absent keys stay `None`.
    pub fn from_gguf(file: &GgufFile) -> Result<Self, TokenizerError> {
        let id = |key| optional(file, key, GgufFile::get_u64);
        let flag = |key| optional(file, key, GgufFile::get_bool);
        Ok(Self {
            bos_id: id("tokenizer.ggml.bos_token_id")?,
            eos_id: id("tokenizer.ggml.eos_token_id")?,
            eot_id: id("tokenizer.ggml.eot_token_id")?,
            eom_id: id("tokenizer.ggml.eom_token_id")?,
            unk_id: id("tokenizer.ggml.unknown_token_id")?,
            pad_id: id("tokenizer.ggml.padding_token_id")?,
            add_bos: flag("tokenizer.ggml.add_bos_token")?,
            add_eos: flag("tokenizer.ggml.add_eos_token")?,
            add_space_prefix: flag("tokenizer.ggml.add_space_prefix")?,
        })
    }
}

impl TokenizerMetadata {
    /// Reads the `tokenizer.ggml.*` keys of a GGUF file.
    pub fn from_gguf(file: &GgufFile) -> Result<Self, TokenizerError> {
        let owned = |strings: Vec<&str>| strings.into_iter().map(str::to_owned).collect::<Vec<_>>();
        let token_types = match optional(file, "tokenizer.ggml.token_type", GgufFile::get_array)? {
            Some(array) => numbers(array.values(), "tokenizer.ggml.token_type", |v| {
                v.as_i64().map(TokenType::from_code)
            })?,
            None => Vec::new(),
        };
        let scores = match optional(file, "tokenizer.ggml.scores", GgufFile::get_array)? {
            Some(array) => Some(numbers(array.values(), "tokenizer.ggml.scores", |v| {
                v.as_f64().map(|score| score as f32)
            })?),
            None => None,
        };
        Ok(Self {
            model: file.get_str("tokenizer.ggml.model")?.to_owned(),
            pre: optional(file, "tokenizer.ggml.pre", GgufFile::get_str)?.map(str::to_owned),
            tokens: owned(file.get_string_array("tokenizer.ggml.tokens")?),
            token_types,
            scores,
            merges: optional(file, "tokenizer.ggml.merges", GgufFile::get_string_array)?
                .map(owned)
                .unwrap_or_default(),
            special: SpecialMetadata::from_gguf(file)?,
        })
    }

    /// The type of token `id`; normal when the file has no type list.
    pub(crate) fn token_type(&self, id: usize) -> TokenType {
        self.token_types.get(id).copied().unwrap_or(TokenType::Normal)
    }
}

/// `read(file, key)` when the key is present, `None` when it is absent.
pub(crate) fn optional<'f, T>(
    file: &'f GgufFile,
    key: &str,
    read: impl Fn(&'f GgufFile, &str) -> Result<T, GgufError>,
) -> Result<Option<T>, GgufError> {
    file.get(key).map(|_| read(file, key)).transpose()
}

/// Converts every array element, failing on the first that does not convert.
fn numbers<T>(
    values: &[crate::gguf::Value],
    key: &'static str,
    convert: impl Fn(&crate::gguf::Value) -> Option<T>,
) -> Result<Vec<T>, TokenizerError> {
    values
        .iter()
        .enumerate()
        .map(|(index, value)| {
            convert(value).ok_or_else(|| TokenizerError::InvalidKey {
                key,
                reason: format!("element {index} is a {:?}, not a number", value.value_type()),
            })
        })
        .collect()
}

/// Splits a merge rule `"left right"` at the first space after the first byte, as llama.cpp does,
/// so that a left part that is itself a space still parses.
pub(crate) fn split_merge(rule: &str) -> Option<(&str, &str)> {
    let first_len = rule.chars().next()?.len_utf8();
    let space = rule[first_len..].find(' ')? + first_len;
    let (left, right) = (&rule[..space], &rule[space + 1..]);
    (!right.is_empty()).then_some((left, right))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn merge_rules_split_at_the_first_separating_space() {
        assert_eq!(split_merge("Ġ t"), Some(("Ġ", "t")));
        assert_eq!(split_merge("  x"), Some((" ", "x")));
        assert_eq!(split_merge("ab cd ef"), Some(("ab", "cd ef")));
        assert_eq!(split_merge("abc"), None);
        assert_eq!(split_merge("a "), None);
        assert_eq!(split_merge(""), None);
    }

    #[test]
    fn token_type_codes_follow_llama_cpp() {
        assert_eq!(TokenType::from_code(3), TokenType::Control);
        assert_eq!(TokenType::from_code(6), TokenType::Byte);
        assert_eq!(TokenType::from_code(-7), TokenType::Undefined);
        assert!(TokenType::UserDefined.is_added() && !TokenType::UserDefined.is_special());
        assert!(TokenType::Control.is_special());
        assert!(!TokenType::Byte.is_added());
    }
}
