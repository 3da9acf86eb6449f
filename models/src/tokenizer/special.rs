//! Special tokens (BOS, EOS, end of turn, ...) resolved against the built vocabulary.

use super::error::TokenizerError;
use super::metadata::SpecialMetadata;
use super::pretokenizer::{self, PieceEncoding};

/// One special token: its id and its vocabulary text.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SpecialToken {
    /// Token id.
    pub id: u32,
    /// The token's text as stored in the vocabulary.
    pub text: String,
}

/// The special tokens of a vocabulary and whether encoding adds BOS / EOS.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SpecialTokens {
    /// Beginning of sequence.
    pub bos: Option<SpecialToken>,
    /// End of sequence.
    pub eos: Option<SpecialToken>,
    /// End of turn (`<|im_end|>`, `<|eot_id|>`, `<end_of_turn>`, ...).
    pub eot: Option<SpecialToken>,
    /// End of message (`<|eom_id|>`).
    pub eom: Option<SpecialToken>,
    /// Padding.
    pub pad: Option<SpecialToken>,
    /// Unknown-token placeholder.
    pub unk: Option<SpecialToken>,
    /// `encode(.., add_special = true)` starts with BOS.
    pub add_bos: bool,
    /// `encode(.., add_special = true)` ends with EOS.
    pub add_eos: bool,
}

impl SpecialTokens {
    /// Whether `id` ends generation: EOS, end of turn or end of message.
    pub fn is_end_of_generation(&self, id: u32) -> bool {
        [&self.eos, &self.eot, &self.eom].into_iter().flatten().any(|token| token.id == id)
    }
}

/// What a tokenizer family implies when the file is silent (llama.cpp's per-family defaults).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct FamilyDefaults {
    pub bos_id: Option<u64>,
    pub eos_id: Option<u64>,
    pub unk_id: Option<u64>,
    pub add_bos: bool,
    /// Gemma 4 files say `add_bos_token = false` in some conversions, but the model needs BOS.
    pub force_add_bos: bool,
}

impl FamilyDefaults {
    /// Defaults for a `tokenizer.ggml.model` / `tokenizer.ggml.pre` pair.
    pub(crate) fn of(model: &str, pre: Option<&str>) -> Self {
        match model {
            "llama" => Self {
                bos_id: Some(1),
                eos_id: Some(2),
                unk_id: Some(0),
                add_bos: true,
                force_add_bos: false,
            },
            "gemma4" => Self { force_add_bos: true, ..Self::default() },
            "gpt2" => match pre.and_then(pretokenizer::profile) {
                Some(profile) => Self {
                    add_bos: profile.add_bos,
                    force_add_bos: profile.encoding == PieceEncoding::SpaceEscaped,
                    ..Self::default()
                },
                None => Self::default(),
            },
            _ => Self::default(),
        }
    }
}

/// Texts that mark the end of a turn, in order of preference, for files without `eot_token_id`.
const END_OF_TURN_TEXTS: &[&str] =
    &["<|eot_id|>", "<|im_end|>", "<end_of_turn>", "<turn|>", "<|end|>", "<EOT>", "<|endoftext|>"];

const END_OF_MESSAGE_TEXT: &str = "<|eom_id|>";

/// Resolves special tokens against a vocabulary. Ids given explicitly by the file must lie inside
/// the vocabulary; family defaults that do not are dropped, as llama.cpp does.
pub(crate) fn resolve(
    meta: &SpecialMetadata,
    defaults: FamilyDefaults,
    vocab_size: usize,
    id_to_token: impl Fn(u32) -> Option<String>,
    token_to_id: impl Fn(&str) -> Option<u32>,
) -> Result<SpecialTokens, TokenizerError> {
    let token = |id: u32| id_to_token(id).map(|text| SpecialToken { id, text });
    let pick = |role: &'static str, explicit: Option<u64>, default: Option<u64>| match explicit {
        Some(id) => match u32::try_from(id).ok().filter(|&id| (id as usize) < vocab_size) {
            Some(id) => Ok(token(id)),
            None => Err(TokenizerError::SpecialIdOutOfRange { role, id, vocab_size }),
        },
        None => Ok(default
            .and_then(|id| u32::try_from(id).ok())
            .filter(|&id| (id as usize) < vocab_size)
            .and_then(token)),
    };
    let by_text = |texts: &[&str]| texts.iter().find_map(|text| token_to_id(text)).and_then(token);

    let special = SpecialTokens {
        bos: pick("BOS", meta.bos_id, defaults.bos_id)?,
        eos: pick("EOS", meta.eos_id, defaults.eos_id)?,
        eot: match pick("EOT", meta.eot_id, None)? {
            Some(eot) => Some(eot),
            None => by_text(END_OF_TURN_TEXTS),
        },
        eom: match pick("EOM", meta.eom_id, None)? {
            Some(eom) => Some(eom),
            None => by_text(&[END_OF_MESSAGE_TEXT]),
        },
        pad: pick("padding", meta.pad_id, None)?,
        unk: pick("unknown", meta.unk_id, defaults.unk_id)?,
        add_bos: defaults.force_add_bos || meta.add_bos.unwrap_or(defaults.add_bos),
        add_eos: meta.add_eos.unwrap_or(false),
    };
    if special.add_bos && special.bos.is_none() {
        return Err(TokenizerError::MissingSpecialToken { flag: "add_bos_token", role: "BOS" });
    }
    if special.add_eos && special.eos.is_none() {
        return Err(TokenizerError::MissingSpecialToken { flag: "add_eos_token", role: "EOS" });
    }
    Ok(special)
}

#[cfg(test)]
mod tests {
    use super::*;

    const VOCAB: &[&str] = &["<unk>", "<s>", "</s>", "a", "<|im_end|>", "<|endoftext|>"];

    fn resolve_in_vocab(
        meta: &SpecialMetadata,
        defaults: FamilyDefaults,
    ) -> Result<SpecialTokens, TokenizerError> {
        resolve(
            meta,
            defaults,
            VOCAB.len(),
            |id| VOCAB.get(id as usize).map(|text| text.to_string()),
            |text| VOCAB.iter().position(|t| *t == text).map(|id| id as u32),
        )
    }

    #[test]
    fn explicit_ids_out_of_range_are_errors() {
        let meta = SpecialMetadata { eos_id: Some(6), ..Default::default() };
        let err = resolve_in_vocab(&meta, FamilyDefaults::default()).unwrap_err();
        assert!(matches!(err, TokenizerError::SpecialIdOutOfRange { role: "EOS", id: 6, vocab_size: 6 }));
        let meta = SpecialMetadata { pad_id: Some(u64::MAX), ..Default::default() };
        assert!(resolve_in_vocab(&meta, FamilyDefaults::default()).is_err());
    }

    #[test]
    fn llama_defaults_apply_when_the_file_is_silent() {
        let special =
            resolve_in_vocab(&SpecialMetadata::default(), FamilyDefaults::of("llama", None)).unwrap();
        assert_eq!(special.bos, Some(SpecialToken { id: 1, text: "<s>".into() }));
        assert_eq!(special.eos.map(|t| t.id), Some(2));
        assert_eq!(special.unk.map(|t| t.id), Some(0));
        assert!(special.add_bos && !special.add_eos);
    }

    #[test]
    fn end_of_turn_is_found_by_text_in_preference_order() {
        let special = resolve_in_vocab(&SpecialMetadata::default(), FamilyDefaults::default()).unwrap();
        assert_eq!(special.eot.as_ref().map(|t| t.id), Some(4));
        assert!(special.is_end_of_generation(4));
        assert!(!special.is_end_of_generation(5));
        assert_eq!(special.eom, None);
    }

    #[test]
    fn adding_a_token_that_does_not_exist_is_an_error() {
        let meta = SpecialMetadata { add_eos: Some(true), ..Default::default() };
        let err = resolve_in_vocab(&meta, FamilyDefaults::default()).unwrap_err();
        assert!(matches!(err, TokenizerError::MissingSpecialToken { role: "EOS", .. }));
    }

    #[test]
    fn gemma4_always_adds_bos() {
        let meta = SpecialMetadata { bos_id: Some(1), add_bos: Some(false), ..Default::default() };
        assert!(resolve_in_vocab(&meta, FamilyDefaults::of("gemma4", None)).unwrap().add_bos);
        assert!(!resolve_in_vocab(&meta, FamilyDefaults::of("gpt2", Some("llama-bpe"))).unwrap().add_bos);
        let silent = SpecialMetadata { bos_id: Some(1), ..Default::default() };
        assert!(resolve_in_vocab(&silent, FamilyDefaults::of("gpt2", Some("llama-bpe"))).unwrap().add_bos);
        assert!(!resolve_in_vocab(&silent, FamilyDefaults::of("gpt2", Some("qwen2"))).unwrap().add_bos);
    }
}
