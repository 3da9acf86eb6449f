//! BPE over raw UTF-8 rather than GPT-2 byte symbols: Gemma 4 (`tokenizer.ggml.model = gemma4`)
//! and the `gpt2` files whose pre-tokenizer profile is not byte-level.
//!
//! Characters missing from the vocabulary fall back to `<0xNN>` byte tokens. Gemma 4 style
//! (SentencePiece-style BPE) writes spaces as `▁`, splits only at newline runs and prepends no
//! space; the `whitespace` profile leaves the text as it is.

use tokenizers::decoders::DecoderWrapper;
use tokenizers::decoders::byte_fallback::ByteFallback;
use tokenizers::decoders::fuse::Fuse;
use tokenizers::decoders::sequence::Sequence as DecoderSequence;

use super::bpe::{BpeOptions, bpe_model, parse_merges, vocab_map};
use super::error::TokenizerError;
use super::metadata::TokenizerMetadata;
use super::pretokenizer::{self, PieceEncoding, PreProfile};
use super::spm;

/// Builds a raw UTF-8 BPE tokenizer with the splits and space handling of `profile`.
pub(crate) fn build(
    meta: &TokenizerMetadata,
    profile: &PreProfile,
) -> Result<tokenizers::Tokenizer, TokenizerError> {
    if meta.merges.is_empty() {
        return Err(TokenizerError::MissingKey("tokenizer.ggml.merges"));
    }
    let vocab = vocab_map(&meta.tokens)?;
    let merges = parse_merges(&meta.merges, &vocab)?;
    let options = BpeOptions { ignore_merges: profile.ignore_merges, byte_fallback: true };
    let mut tokenizer = tokenizers::Tokenizer::new(bpe_model(vocab, merges, options, None)?);
    if profile.encoding == PieceEncoding::SpaceEscaped {
        tokenizer.with_normalizer(Some(spm::normalizer(false)?)).map_err(TokenizerError::library)?;
        tokenizer.with_decoder(Some(spm::decoder(false)?));
    } else {
        let steps =
            vec![DecoderWrapper::ByteFallback(ByteFallback::new()), DecoderWrapper::Fuse(Fuse::new())];
        tokenizer.with_decoder(Some(DecoderWrapper::Sequence(DecoderSequence::new(steps))));
    }
    tokenizer.with_pre_tokenizer(Some(pretokenizer::build(profile)?));
    Ok(tokenizer)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn strings(items: &[&str]) -> Vec<String> {
        items.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn whitespace_profile_merges_raw_words_and_keeps_spaces_only_if_known() {
        let profile = pretokenizer::profile("whitespace").unwrap();
        let meta = TokenizerMetadata {
            model: "gpt2".into(),
            tokens: strings(&["你", "好", "你好", "a", "b", "ab", "<0x21>", " "]),
            merges: strings(&["你 好", "a b"]),
            ..Default::default()
        };
        let tokenizer = build(&meta, &profile).unwrap();
        let encode = |text: &str| tokenizer.encode(text, false).unwrap().get_ids().to_vec();
        // No byte-level mapping: "你好" merges as characters, "!" is not a token and falls back
        // to its byte; merges never cross the space between words.
        assert_eq!(encode("你好 ab!"), [2, 7, 5, 6]);
        assert_eq!(encode("ab ab"), [5, 7, 5]);
        assert_eq!(tokenizer.decode(&[2, 7, 5, 6], false).unwrap(), "你好 ab!");
    }
}
