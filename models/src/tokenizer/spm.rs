//! SentencePiece BPE (`tokenizer.ggml.model = llama`).
//!
//! llama.cpp tokenizes these vocabularies by repeatedly joining the adjacent pair whose
//! concatenation is the highest-scoring vocabulary entry (leftmost on ties), then falling back to
//! `<0xNN>` byte tokens for characters the vocabulary lacks. That is BPE whose merge priority is
//! the score of the merged piece, so the merges are derived from the scores and handed to the
//! `tokenizers` BPE model with byte fallback. Spaces become `▁`, and a `▁` is prepended to every
//! stretch of text between special tokens when `add_space_prefix` is set.

use tokenizers::decoders::DecoderWrapper;
use tokenizers::decoders::byte_fallback::ByteFallback;
use tokenizers::decoders::fuse::Fuse;
use tokenizers::decoders::sequence::Sequence as DecoderSequence;
use tokenizers::decoders::strip::Strip;
use tokenizers::models::bpe::{Merges, Vocab};
use tokenizers::normalizers::{NormalizerWrapper, Prepend, Replace, Sequence as NormalizerSequence};

use super::bpe::{BpeOptions, bpe_model, vocab_map};
use super::error::TokenizerError;
use super::metadata::TokenizerMetadata;

/// SentencePiece's visible space.
pub(crate) const SPACE_MARK: &str = "\u{2581}";

/// Spaces to `▁`, optionally with a leading `▁`.
pub(crate) fn normalizer(add_space_prefix: bool) -> Result<NormalizerWrapper, TokenizerError> {
    let escape = NormalizerWrapper::Replace(Replace::new(" ", SPACE_MARK).map_err(TokenizerError::library)?);
    Ok(if add_space_prefix {
        NormalizerWrapper::Sequence(NormalizerSequence::new(vec![
            NormalizerWrapper::Prepend(Prepend::new(SPACE_MARK.to_owned())),
            escape,
        ]))
    } else {
        escape
    })
}

/// `▁` back to spaces, byte tokens back to bytes, and the prepended space removed again.
pub(crate) fn decoder(strip_space_prefix: bool) -> Result<DecoderWrapper, TokenizerError> {
    let mut steps = vec![
        DecoderWrapper::Replace(Replace::new(SPACE_MARK, " ").map_err(TokenizerError::library)?),
        DecoderWrapper::ByteFallback(ByteFallback::new()),
        DecoderWrapper::Fuse(Fuse::new()),
    ];
    if strip_space_prefix {
        steps.push(DecoderWrapper::Strip(Strip::new(' ', 1, 0)));
    }
    Ok(DecoderWrapper::Sequence(DecoderSequence::new(steps)))
}

/// Every split of a vocabulary entry into two vocabulary entries is a merge; merges producing
/// higher-scoring entries come first (ties: lower id, then the shorter left part).
fn merges_from_scores(tokens: &[String], scores: &[f32], vocab: &Vocab) -> Merges {
    let mut ranked = Vec::new();
    for (id, token) in tokens.iter().enumerate() {
        for (split, _) in token.char_indices().skip(1) {
            let (left, right) = token.split_at(split);
            if vocab.contains_key(left) && vocab.contains_key(right) {
                ranked.push((scores[id], id, split));
            }
        }
    }
    ranked.sort_by(|a, b| b.0.total_cmp(&a.0).then(a.1.cmp(&b.1)).then(a.2.cmp(&b.2)));
    ranked
        .into_iter()
        .map(|(_, id, split)| {
            let (left, right) = tokens[id].split_at(split);
            (left.to_owned(), right.to_owned())
        })
        .collect()
}

/// Builds a SentencePiece tokenizer; `unk_text` is the unknown token's text when one is defined.
pub(crate) fn build(
    meta: &TokenizerMetadata,
    add_space_prefix: bool,
    unk_text: Option<String>,
) -> Result<tokenizers::Tokenizer, TokenizerError> {
    let scores = meta.scores.as_deref().ok_or(TokenizerError::MissingKey("tokenizer.ggml.scores"))?;
    if scores.len() < meta.tokens.len() {
        return Err(TokenizerError::InvalidKey {
            key: "tokenizer.ggml.scores",
            reason: format!("{} scores for {} tokens", scores.len(), meta.tokens.len()),
        });
    }
    let vocab = vocab_map(&meta.tokens)?;
    let merges = merges_from_scores(&meta.tokens, scores, &vocab);
    let options = BpeOptions { ignore_merges: false, byte_fallback: true };
    let mut tokenizer = tokenizers::Tokenizer::new(bpe_model(vocab, merges, options, unk_text)?);
    tokenizer.with_normalizer(Some(normalizer(add_space_prefix)?)).map_err(TokenizerError::library)?;
    tokenizer.with_decoder(Some(decoder(add_space_prefix)?));
    Ok(tokenizer)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tiny(tokens: &[&str], scores: &[f32]) -> TokenizerMetadata {
        TokenizerMetadata {
            model: "llama".into(),
            tokens: tokens.iter().map(|s| s.to_string()).collect(),
            scores: Some(scores.to_vec()),
            ..Default::default()
        }
    }

    #[test]
    fn the_highest_scoring_pair_is_joined_first() {
        // "abc" could start with "ab" or with "bc"; "bc" scores higher.
        let meta = tiny(&["a", "b", "c", "ab", "bc", "\u{2581}"], &[0.0, 0.0, 0.0, -2.0, -1.0, 0.0]);
        let tokenizer = build(&meta, false, None).unwrap();
        assert_eq!(tokenizer.encode("abc", false).unwrap().get_ids(), [0, 4]);
    }

    #[test]
    fn missing_characters_fall_back_to_bytes() {
        let mut tokens = vec!["<unk>".to_string(), "\u{2581}".to_string(), "a".to_string()];
        tokens.extend((0..=255).map(|b| format!("<0x{b:02X}>")));
        let scores = Some(vec![0.0; tokens.len()]);
        let meta = TokenizerMetadata { model: "llama".into(), tokens, scores, ..Default::default() };
        let tokenizer = build(&meta, true, Some("<unk>".into())).unwrap();
        let ids = tokenizer.encode("a é", false).unwrap().get_ids().to_vec();
        // "▁a▁é": é is U+00E9 = C3 A9, byte tokens start at id 3.
        assert_eq!(ids, [1, 2, 1, 3 + 0xC3, 3 + 0xA9]);
        assert_eq!(tokenizer.decode(&ids, false).unwrap(), "a é");
    }

    #[test]
    fn scores_must_cover_the_vocabulary() {
        let meta = tiny(&["a", "b"], &[0.0]);
        assert!(matches!(build(&meta, true, None), Err(TokenizerError::InvalidKey { .. })));
    }
}
