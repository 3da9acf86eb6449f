//! A small but working byte-level BPE vocabulary in the layout of Qwen3's.
//!
//! Ids 0-255 are GPT-2's byte tokens, then the tokens of merges learned from an embedded English and
//! Python text, then unused `[PADn]` ids up to where Qwen3 puts its 26 added tokens (ChatML, vision,
//! FIM, tool-call and think markers, with Qwen3's token types), then `[PADn]` up to the vocabulary
//! size, so that the embedding and LM head keep their real shapes.

use super::bpe_train::{byte_char, learn_merges};
use super::shape::ShapeConfig;

/// `tokenizer.ggml.token_type` values (llama.cpp's `llama_token_type`).
const NORMAL: i32 = 1;
const CONTROL: i32 = 3;
const USER_DEFINED: i32 = 4;
const UNUSED: i32 = 5;

/// Qwen3's added tokens from id 151643 on. The converter marks tokens that are `special` in the
/// tokenizer config or look like `<|...|>` as control tokens, the others as user-defined.
const ADDED_TOKENS: [(&str, i32); 26] = [
    ("<|endoftext|>", CONTROL),
    ("<|im_start|>", CONTROL),
    ("<|im_end|>", CONTROL),
    ("<|object_ref_start|>", CONTROL),
    ("<|object_ref_end|>", CONTROL),
    ("<|box_start|>", CONTROL),
    ("<|box_end|>", CONTROL),
    ("<|quad_start|>", CONTROL),
    ("<|quad_end|>", CONTROL),
    ("<|vision_start|>", CONTROL),
    ("<|vision_end|>", CONTROL),
    ("<|vision_pad|>", CONTROL),
    ("<|image_pad|>", CONTROL),
    ("<|video_pad|>", CONTROL),
    ("<tool_call>", USER_DEFINED),
    ("</tool_call>", USER_DEFINED),
    ("<|fim_prefix|>", CONTROL),
    ("<|fim_middle|>", CONTROL),
    ("<|fim_suffix|>", CONTROL),
    ("<|fim_pad|>", CONTROL),
    ("<|repo_name|>", CONTROL),
    ("<|file_sep|>", CONTROL),
    ("<tool_response>", USER_DEFINED),
    ("</tool_response>", USER_DEFINED),
    ("<think>", USER_DEFINED),
    ("</think>", USER_DEFINED),
];

/// Offsets of the tokens Qwen3 names as end of sequence (`<|im_end|>`) and as BOS and padding
/// (`<|endoftext|>`) within [`ADDED_TOKENS`].
const EOS_OFFSET: u32 = 2;
const BOS_OFFSET: u32 = 0;

/// Number of merged tokens to learn: a few hundred, enough to tokenize English and code sensibly
/// while fitting below the added tokens of every shape.
const LEARNED_TOKENS: usize = 512;

/// The text the merges are learned from (written for this purpose).
const CORPUS: &str = include_str!("corpus.txt");

/// The synthetic vocabulary, ready for the `tokenizer.*` keys.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Vocab {
    pub(crate) tokens: Vec<String>,
    pub(crate) token_types: Vec<i32>,
    /// Merges as `"left right"`, in rank order.
    pub(crate) merges: Vec<String>,
    pub(crate) eos_token_id: u32,
    pub(crate) padding_token_id: u32,
    pub(crate) bos_token_id: u32,
}

impl Vocab {
    /// The vocabulary for a shape: `config.vocab` tokens with the added tokens at
    /// `config.special_tokens_start`.
    pub(crate) fn for_shape(config: &ShapeConfig) -> Self {
        let learned = learn_merges(CORPUS, LEARNED_TOKENS);
        let mut byte_tokens: Vec<char> = (0..=255u8).map(byte_char).collect();
        // Qwen's vocabulary lists the byte tokens by code point of their stand-in character.
        byte_tokens.sort_unstable();

        let mut tokens: Vec<String> = byte_tokens.iter().map(char::to_string).collect();
        tokens.extend(learned.new_tokens);
        let mut token_types = vec![NORMAL; tokens.len()];

        let special_start = config.special_tokens_start as usize;
        let vocab_size = config.vocab as usize;
        pad_unused(&mut tokens, &mut token_types, special_start);
        for (text, token_type) in ADDED_TOKENS {
            tokens.push(text.to_owned());
            token_types.push(token_type);
        }
        pad_unused(&mut tokens, &mut token_types, vocab_size);

        let merges = learned.merges.into_iter().map(|(left, right)| format!("{left} {right}")).collect();
        let first_added = config.special_tokens_start;
        Self {
            tokens,
            token_types,
            merges,
            eos_token_id: first_added + EOS_OFFSET,
            padding_token_id: first_added + BOS_OFFSET,
            bos_token_id: first_added + BOS_OFFSET,
        }
    }
}

/// Appends `[PADn]` tokens (n = their id, as llama.cpp's converter names holes) up to `len` tokens.
fn pad_unused(tokens: &mut Vec<String>, token_types: &mut Vec<i32>, len: usize) {
    for id in tokens.len()..len {
        tokens.push(format!("[PAD{id}]"));
        token_types.push(UNUSED);
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashSet;

    use super::*;
    use crate::synth::shape::Shape;

    #[test]
    fn vocabulary_fills_the_shape_with_unique_tokens() {
        for shape in Shape::ALL {
            let config = shape.config();
            let vocab = Vocab::for_shape(&config);
            assert_eq!(vocab.tokens.len(), config.vocab as usize, "{shape}");
            assert_eq!(vocab.token_types.len(), vocab.tokens.len());
            let unique: HashSet<&String> = vocab.tokens.iter().collect();
            assert_eq!(unique.len(), vocab.tokens.len(), "{shape}: duplicate tokens");
            assert_eq!(vocab.tokens[vocab.eos_token_id as usize], "<|im_end|>");
            assert_eq!(vocab.tokens[vocab.bos_token_id as usize], "<|endoftext|>");
            assert_eq!(vocab.tokens[vocab.padding_token_id as usize], "<|endoftext|>");
        }
    }

    #[test]
    fn real_shapes_keep_qwen3_special_ids() {
        let vocab = Vocab::for_shape(&Shape::Qwen3_8B.config());
        // Ids of the real Qwen3 vocabulary.
        assert_eq!(vocab.tokens[151_643], "<|endoftext|>");
        assert_eq!(vocab.tokens[151_644], "<|im_start|>");
        assert_eq!(vocab.eos_token_id, 151_645);
        assert_eq!(vocab.tokens[151_657], "<tool_call>");
        assert_eq!(vocab.token_types[151_657], USER_DEFINED);
        assert_eq!(vocab.tokens[151_667], "<think>");
        assert_eq!(vocab.tokens[151_668], "</think>");
        assert_eq!(vocab.token_types[151_669], UNUSED);
        assert_eq!(vocab.tokens[151_935], "[PAD151935]");
    }

    #[test]
    fn merges_learn_a_few_hundred_tokens_of_english_and_code() {
        let vocab = Vocab::for_shape(&Shape::Tiny.config());
        let normal = vocab.token_types.iter().filter(|&&t| t == NORMAL).count();
        assert_eq!(normal, 256 + LEARNED_TOKENS);
        assert!(vocab.merges.len() >= LEARNED_TOKENS);
        for word in ["Ġthe", "Ġself", "Ġreturn", "def"] {
            assert!(vocab.tokens.iter().any(|t| t == word), "{word} not learned");
        }
        assert_eq!(vocab.tokens[0], "!");
        assert_eq!(vocab.tokens[220], "Ġ");
    }

    #[test]
    fn vocabulary_works_as_a_byte_level_bpe_tokenizer() {
        use tokenizers::Tokenizer;
        use tokenizers::models::bpe::{BPE, Vocab as BpeVocab};
        use tokenizers::pre_tokenizers::byte_level::ByteLevel;

        let vocab = Vocab::for_shape(&Shape::Tiny.config());
        let ids: BpeVocab = vocab.tokens.iter().cloned().zip(0..).collect();
        let merges = vocab
            .merges
            .iter()
            .map(|m| {
                let (left, right) = m.split_once(' ').unwrap();
                (left.to_owned(), right.to_owned())
            })
            .collect();
        let bpe = BPE::builder().vocab_and_merges(ids, merges).build().unwrap();
        let mut tokenizer = Tokenizer::new(bpe);
        tokenizer.with_pre_tokenizer(Some(ByteLevel::new(false, true, true)));
        tokenizer.with_decoder(Some(ByteLevel::default()));

        let text = "def count_words(text):\n    return the_library.report()  # h\u{e9}llo \u{2713}";
        let encoding = tokenizer.encode(text, false).unwrap();
        assert_eq!(tokenizer.decode(encoding.get_ids(), false).unwrap(), text);
        let tokens = encoding.get_tokens();
        assert!(tokens.len() * 5 < text.len() * 3, "merges barely apply: {tokens:?}");
        assert!(tokens.iter().any(|t| t == "Ġreturn"), "{tokens:?}");
    }
}
