//! Byte-level BPE (`tokenizer.ggml.model = gpt2`) and the vocabulary / merge plumbing shared by
//! all BPE-based families.

use std::collections::hash_map::Entry;

use tokenizers::decoders::DecoderWrapper;
use tokenizers::models::bpe::{BPE, Merges, Vocab};
use tokenizers::pre_tokenizers::byte_level::ByteLevel;

use super::error::TokenizerError;
use super::metadata::{TokenType, TokenizerMetadata, split_merge};
use super::pretokenizer::{self, PreProfile};
use super::rank_merges::merges_from_ranks;

/// Token text to id. Empty entries get llama.cpp's placeholder text so that ids stay aligned;
/// duplicate texts are refused because one of the ids would become unreachable.
pub(crate) fn vocab_map(tokens: &[String]) -> Result<Vocab, TokenizerError> {
    let mut vocab = Vocab::with_capacity(tokens.len());
    for (id, text) in tokens.iter().enumerate() {
        let id = u32::try_from(id).map_err(|_| TokenizerError::InvalidKey {
            key: "tokenizer.ggml.tokens",
            reason: format!("more than {} tokens", u32::MAX),
        })?;
        let text = if text.is_empty() { format!("[EMPTY_{id}]") } else { text.clone() };
        match vocab.entry(text) {
            Entry::Vacant(slot) => {
                slot.insert(id);
            }
            Entry::Occupied(slot) => {
                return Err(TokenizerError::DuplicateToken {
                    text: slot.key().clone(),
                    first: *slot.get(),
                    second: id,
                });
            }
        }
    }
    Ok(vocab)
}

/// Parses `"left right"` merge rules, keeping their order (= priority). Both parts and their
/// concatenation must be vocabulary entries (the `tokenizers` builder panics otherwise).
pub(crate) fn parse_merges(rules: &[String], vocab: &Vocab) -> Result<Merges, TokenizerError> {
    let mut joined = String::new();
    rules
        .iter()
        .enumerate()
        .map(|(index, rule)| {
            let malformed = || TokenizerError::MalformedMerge { index, merge: rule.clone() };
            let (left, right) = split_merge(rule).ok_or_else(malformed)?;
            joined.clear();
            joined.push_str(left);
            joined.push_str(right);
            if [left, right, joined.as_str()].iter().all(|part| vocab.contains_key(*part)) {
                Ok((left.to_owned(), right.to_owned()))
            } else {
                Err(malformed())
            }
        })
        .collect()
}

/// Options of the BPE model itself.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct BpeOptions {
    /// A word that is a vocabulary entry is taken whole (Llama 3 style).
    pub ignore_merges: bool,
    /// Characters missing from the vocabulary become `<0xNN>` byte tokens.
    pub byte_fallback: bool,
}

/// Builds the BPE model; merges naming unknown tokens are reported as errors.
pub(crate) fn bpe_model(
    vocab: Vocab,
    merges: Merges,
    options: BpeOptions,
    unk_token: Option<String>,
) -> Result<BPE, TokenizerError> {
    let mut builder = BPE::builder()
        .vocab_and_merges(vocab, merges)
        .ignore_merges(options.ignore_merges)
        .byte_fallback(options.byte_fallback);
    if let Some(unk) = unk_token {
        builder = builder.unk_token(unk).fuse_unk(true);
    }
    builder.build().map_err(TokenizerError::library)
}

/// A byte-level BPE tokenizer (GPT-2, Llama 3, Qwen, ...): regex splits from the `pre` profile,
/// bytes mapped to printable characters, BPE over those characters.
pub(crate) fn build(
    meta: &TokenizerMetadata,
    profile: &PreProfile,
) -> Result<tokenizers::Tokenizer, TokenizerError> {
    let vocab = vocab_map(&meta.tokens)?;
    let merges = if !meta.merges.is_empty() {
        parse_merges(&meta.merges, &vocab)?
    } else if profile.ids_are_merge_ranks {
        // Control, user-defined and unused entries (special tokens, padding) are no merge ranks.
        let mergeable = meta.tokens.iter().enumerate().filter(|&(id, _)| {
            matches!(meta.token_type(id), TokenType::Normal | TokenType::Byte | TokenType::Undefined)
        });
        merges_from_ranks(mergeable.map(|(id, text)| (id, text.as_str())))
    } else {
        return Err(TokenizerError::MissingKey("tokenizer.ggml.merges"));
    };
    let options = BpeOptions { ignore_merges: profile.ignore_merges, byte_fallback: false };
    let mut tokenizer = tokenizers::Tokenizer::new(bpe_model(vocab, merges, options, None)?);
    tokenizer.with_pre_tokenizer(Some(pretokenizer::build(profile)?));
    tokenizer.with_decoder(Some(DecoderWrapper::ByteLevel(ByteLevel::new(false, false, false))));
    Ok(tokenizer)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn strings(items: &[&str]) -> Vec<String> {
        items.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn duplicate_tokens_are_refused() {
        let err = vocab_map(&strings(&["a", "b", "a"])).unwrap_err();
        assert!(matches!(err, TokenizerError::DuplicateToken { first: 0, second: 2, .. }));
    }

    #[test]
    fn empty_tokens_keep_their_id() {
        let vocab = vocab_map(&strings(&["a", "", "b"])).unwrap();
        assert_eq!(vocab.get("[EMPTY_1]"), Some(&1));
        assert_eq!(vocab.get("b"), Some(&2));
    }

    #[test]
    fn merges_naming_unknown_tokens_are_errors() {
        let vocab = vocab_map(&strings(&["a", "b", "ab"])).unwrap();
        assert_eq!(parse_merges(&strings(&["a b"]), &vocab).unwrap(), [("a".into(), "b".into())]);
        assert!(parse_merges(&strings(&["ab"]), &vocab).is_err());
        assert!(parse_merges(&strings(&["a c"]), &vocab).is_err());
        assert!(parse_merges(&strings(&["b a"]), &vocab).is_err());
    }

    #[test]
    fn merges_apply_by_priority() {
        let profile = pretokenizer::profile("gpt-2").unwrap();
        let meta = TokenizerMetadata {
            model: "gpt2".into(),
            tokens: strings(&["a", "b", "c", "ab", "bc", "abc"]),
            merges: strings(&["b c", "a bc", "a b"]),
            ..Default::default()
        };
        let tokenizer = build(&meta, &profile).unwrap();
        assert_eq!(tokenizer.encode("abc", false).unwrap().get_ids(), [5]);
        assert_eq!(tokenizer.encode("ab", false).unwrap().get_ids(), [3]);
        assert_eq!(tokenizer.decode(&[3, 2], false).unwrap(), "abc");
    }

    /// A Kimi-K2 style vocabulary: ids are tiktoken ranks, one control token, no merge list.
    fn kimi_without_merges(pre: &str) -> TokenizerMetadata {
        let mut types = vec![TokenType::Normal; 9];
        types[6] = TokenType::Control;
        TokenizerMetadata {
            model: "gpt2".into(),
            pre: Some(pre.into()),
            tokens: strings(&["a", "b", "c", "bc", "ab", "abc", "<|im_end|>", "Ġ", "Ġa"]),
            token_types: types,
            ..Default::default()
        }
    }

    #[test]
    fn kimi_k2_without_merges_rebuilds_them_from_the_ranks() {
        let meta = kimi_without_merges("kimi-k2");
        let tokenizer = build(&meta, &pretokenizer::profile("kimi-k2").unwrap()).unwrap();
        let encode = |text: &str| tokenizer.encode(text, false).unwrap().get_ids().to_vec();
        // Rebuilt rules, by rank: "b c", "a b", "a bc", "Ġ a". "abc" takes "bc" first; " abc"
        // never uses "Ġ a", whose rank comes after "a bc".
        assert_eq!(encode("abc"), [5]);
        assert_eq!(encode("ab"), [4]);
        assert_eq!(encode("cab"), [2, 4]);
        assert_eq!(encode(" abc"), [7, 5]);
        assert_eq!(encode(" a"), [8]);
        assert_eq!(tokenizer.decode(&[7, 5], false).unwrap(), " abc");
    }

    #[test]
    fn other_profiles_still_require_merges() {
        let meta = kimi_without_merges("qwen2");
        let err = build(&meta, &pretokenizer::profile("qwen2").unwrap()).unwrap_err();
        assert!(matches!(err, TokenizerError::MissingKey("tokenizer.ggml.merges")), "{err}");
    }
}
