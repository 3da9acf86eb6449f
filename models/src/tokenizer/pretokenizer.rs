//! Pre-tokenizer profiles named by `tokenizer.ggml.pre`.
//!
//! A profile is a list of regular expressions applied one after another: each splits every piece
//! left by the previous one into matches and the text between them, keeping both (the `Isolated`
//! behaviour of Hugging Face's `Split`). The table follows the profiles llama.cpp knows; where
//! llama.cpp rewrote a pattern to suit its regex engine (`\p{Lu}` emulated with look-aheads), the
//! original pattern of the model's `tokenizer.json` is used, since the reference tokenizations
//! come from it. Contractions are spelled `'[sS]` rather than `(?i:'s)` because Unicode case
//! folding would also fold `ſ` and the Kelvin sign.

use tokenizers::pre_tokenizers::PreTokenizerWrapper;
use tokenizers::pre_tokenizers::byte_level::ByteLevel;
use tokenizers::pre_tokenizers::sequence::Sequence;
use tokenizers::pre_tokenizers::split::{Split, SplitPattern};
use tokenizers::tokenizer::SplitDelimiterBehavior;

use super::error::TokenizerError;

/// What the BPE merges of a profile see: the text after the regex splits.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum PieceEncoding {
    /// Every byte mapped to a printable character (GPT-2 style).
    ByteLevel,
    /// Raw UTF-8 with spaces written as `▁` (SentencePiece-style BPE, Gemma 4).
    SpaceEscaped,
    /// Raw UTF-8 as it is; characters missing from the vocabulary fall back to `<0xNN>` tokens.
    RawUtf8,
}

/// How one `tokenizer.ggml.pre` name tokenizes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct PreProfile {
    /// Regular expressions applied in order.
    pub splits: &'static [&'static str],
    /// What the merges work on.
    pub encoding: PieceEncoding,
    /// A piece that is itself a vocabulary entry becomes that token without merging.
    pub ignore_merges: bool,
    /// BOS is added by default (the file's `add_bos_token` overrides).
    pub add_bos: bool,
    /// Token ids are tiktoken merge ranks, so a file without merges gets them rebuilt from the
    /// vocabulary (see `rank_merges`).
    pub ids_are_merge_ranks: bool,
}

/// English contractions as a non-capturing group, for `concat!`.
macro_rules! contractions {
    () => {
        r"(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])"
    };
}

const GPT2: &[&str] = &[r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)"];

const DEFAULT: &[&str] = &[r"[\p{P}\$\+<=>\^~\|]+", GPT2[0], r"\p{N}+", r"[0-9][0-9][0-9]"];

const LLAMA3: &[&str] = &[concat!(
    contractions!(),
    r"|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)];

const JAIS2: &[&str] = &[concat!(
    contractions!(),
    r"|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+",
    r"|\s{512}(?!\S)|\s{256}(?!\S)|\s{128}(?!\S)|\s{64}(?!\S)|\s{32}(?!\S)|\s{16}(?!\S)",
    r"|\s{8}(?!\S)|\s{4}(?!\S)|\s{1,2}(?!\S)|\s{1}"
)];

const QWEN2: &[&str] = &[concat!(
    contractions!(),
    r"|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)];

/// Qwen 3.5: combining marks stay with their letters and out of punctuation runs.
const QWEN35: &[&str] = &[concat!(
    contractions!(),
    r"|[^\r\n\p{L}\p{N}]?[\p{L}\p{M}]+|\p{N}| ?[^\s\p{L}\p{M}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)];

const DEEPSEEK_LLM: &[&str] = &[
    r"[\r\n]",
    concat!(
        r"\s?[A-Za-z",
        r"\x{B5}\x{C0}-\x{D6}\x{D8}-\x{F6}\x{F8}-\x{1BA}\x{1BC}-\x{1BF}\x{1C4}-\x{293}",
        r"\x{295}-\x{2AF}\x{370}-\x{373}\x{376}\x{377}\x{37B}-\x{37D}\x{37F}\x{386}",
        r"\x{388}-\x{38A}\x{38C}\x{38E}-\x{3A1}\x{3A3}-\x{3F5}\x{3F7}-\x{481}\x{48A}-\x{52F}",
        r"\x{531}-\x{556}\x{10A0}-\x{10C5}\x{13A0}-\x{13F5}\x{13F8}-\x{13FD}\x{1C90}-\x{1CBA}",
        r"\x{1CBD}-\x{1CBF}\x{1D00}-\x{1D2B}\x{1D6B}-\x{1D77}\x{1D79}-\x{1D9A}",
        r"\x{1E00}-\x{1F15}\x{1F18}-\x{1F1D}\x{1F20}-\x{1F45}\x{1F48}-\x{1F4D}",
        r"\x{1F50}-\x{1F57}\x{1F59}\x{1F5B}\x{1F5D}\x{1F5F}-\x{1F7D}\x{1F80}-\x{1FB4}",
        r"\x{1FB6}-\x{1FBC}\x{1FBE}\x{1FC2}-\x{1FC4}\x{1FC6}-\x{1FCC}\x{1FD0}-\x{1FD3}",
        r"\x{1FD6}-\x{1FDB}\x{1FE0}-\x{1FEC}\x{1FF2}-\x{1FF4}\x{1FF6}-\x{1FFC}\x{2102}\x{2107}",
        r"\x{210A}-\x{2113}\x{2115}\x{2119}-\x{211D}\x{2124}\x{2126}\x{2128}\x{212A}-\x{212D}",
        r"\x{212F}-\x{2134}\x{2139}\x{213C}-\x{213F}\x{2145}-\x{2149}\x{214E}\x{2183}\x{2184}",
        r"\x{2C00}-\x{2C7B}\x{2C7E}-\x{2CE4}\x{2CEB}-\x{2CEE}\x{2CF2}\x{2CF3}\x{A640}-\x{A66D}",
        r"\x{A680}-\x{A69B}\x{A722}-\x{A76F}\x{A771}-\x{A787}\x{A78B}-\x{A78E}",
        r"\x{AB70}-\x{ABBF}\x{FB00}-\x{FB06}\x{FB13}-\x{FB17}\x{FF21}-\x{FF3A}",
        r"\x{FF41}-\x{FF5A}\x{10400}-\x{1044F}\x{104B0}-\x{104D3}\x{104D8}-\x{104FB}",
        r"\x{10C80}-\x{10CB2}\x{10CC0}-\x{10CF2}\x{118A0}-\x{118DF}\x{1E900}-\x{1E943}",
        r"]+"
    ),
    r"\s?[!-/:-~！-／：-～‘-‟　-。]+",
    r"\s+$",
    r"[一-龥ࠀ-一가-퟿]+",
    r"\p{N}+",
];

const DEEPSEEK_CODER: &[&str] = &[r"[\r\n]", r"\s?\p{L}+", r"\s?\p{P}+", r"[一-龥ࠀ-一가-퟿]+", r"\p{N}"];

const DEEPSEEK_V3: &[&str] = &[
    r"\p{N}{1,3}",
    r"[一-龥぀-ゟ゠-ヿ]+",
    concat!(
        r##"[!"#$%&'()*+,\-./:;<=>?@\[\\\]^_`{|}~][A-Za-z]+|[^\r\n\p{L}\p{P}\p{S}]?[\p{L}\p{M}]+"##,
        r"| ?[\p{P}\p{S}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
    ),
];

const SPARK2_5: &[&str] = &[
    r"\p{N}{1,3}",
    r"[一-龥぀-ゟ゠-ヿ]+",
    concat!(
        r##"[!"#$%&'()*+,\-./:;<=>?@\[\\\]^_`{|}~][A-Za-z]+|[^\r\n\p{L}\p{P}\p{S}]?[\p{L}\p{M}]+"##,
        r"| ?[\p{P}\p{S}]+|[\r\n]|\s+(?!\S)|\s+"
    ),
    r"\p{N}",
];

const YOUTU: &[&str] = &[
    r"[가-힣ㄱ-ㆎ]+|[！…“”‘’—：；，、-〿︰-﹏]+|[ㄅ-ㄯ]+|[一-龥぀-ゟ゠-ヿ]+",
    concat!(
        r"[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+",
        contractions!(),
        "?",
        r"|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*",
        contractions!(),
        "?",
        r"|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+"
    ),
];

const FALCON: &[&str] = &[r"[\p{P}\$\+<=>\^~\|`]+", GPT2[0], r"[0-9][0-9][0-9]"];

const STARCODER: &[&str] = &[r"\p{N}", GPT2[0]];

const PORO: &[&str] = &[r" ?[^(\s|.,!?…。，、।۔،)]+"];

const VIKING: &[&str] = &[r" ?[^(\s|.,!?…。，、।۔،)]+", r"\p{N}"];

const TEKKEN: &[&str] = &[concat!(
    r"[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+",
    r"|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*",
    r"|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)];

const CHAMELEON: &[&str] = &[
    r"<sentinel:[0-9]+>",
    r"(IMGIMG)((A|B|C|D|E|F|G|H|I){1,4})Z",
    r"([\t\n]|    |  )",
    r"\p{N}",
    r"[\p{P}!-/:-@\[-`{-~]",
    GPT2[0],
];

const GPT4O: &[&str] = &[concat!(
    r"[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+",
    contractions!(),
    "?",
    r"|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*",
    contractions!(),
    "?",
    r"|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)];

const TINY_AYA: &[&str] = &[r"\d{1,3}(?=(?:\d{3})*\b)", GPT4O[0]];

/// SuperBPE: no word splits at all (its merges span spaces); number runs are cut off, and within
/// them ASCII digits are grouped in threes counted from the right. The second pattern only matches
/// empty strings: each match is a cut, and the empty pieces it leaves are dropped. llama.cpp runs
/// `\d` with an engine whose `\d` is ASCII-only, hence `[0-9]`.
const SUPERBPE: &[&str] = &[r"\p{N}+", r"(?=(?:[0-9]{3})+(?![0-9]))"];

/// AFMoE (Arcee Trinity): number runs grouped in threes from the right, the leading one or two
/// digits first (llama.cpp's hand-written `\p{AFMoE_digits}`, here as a regex that cuts the same
/// pieces), then runs of CJK and South-East Asian scripts, then DeepSeek V3's word pattern. The
/// script ranges are llama.cpp's as written, Thai from U+0E40 on included.
const AFMOE: &[&str] = &[
    r"\p{N}{1,3}(?=(?:\p{N}{3})*(?!\p{N}))",
    concat!(
        r"[\x{4E00}-\x{9FFF}\x{3400}-\x{4DBF}\x{F900}-\x{FAFF}\x{3040}-\x{309F}\x{30A0}-\x{30FF}",
        r"\x{FF65}-\x{FF9F}\x{2F00}-\x{2FDF}\x{0E40}-\x{0E7F}\x{0E80}-\x{0EFF}\x{1780}-\x{17FF}",
        r"\x{1000}-\x{109F}\x{AA60}-\x{AA7F}\x{A9E0}-\x{A9FF}\x{AC00}-\x{D7AF}\x{1100}-\x{11FF}]+"
    ),
    DEEPSEEK_V3[2],
];

const KIMI_K2: &[&str] = &[concat!(
    r"\p{Han}+",
    r"|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}&&[^\p{Han}]]*[\p{Ll}\p{Lm}\p{Lo}\p{M}&&[^\p{Han}]]+",
    contractions!(),
    "?",
    r"|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}&&[^\p{Han}]]+[\p{Ll}\p{Lm}\p{Lo}\p{M}&&[^\p{Han}]]*",
    contractions!(),
    "?",
    r"|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)];

const BAILINGMOE: &[&str] = &[concat!(
    r"'(?:[sSdDmMtT]|[lL][lL]|[vV][eE]|[rR][eE])",
    r"|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]|\s+(?!\S)|\s+"
)];

const SEED_CODER: &[&str] = &[concat!(
    contractions!(),
    r"|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1}| ?[^\s\p{L}\p{N}\r\n]+|\s*[\r\n]+|\s+(?!\S)|\s+"
)];

/// Qwen2's pattern without contractions, so Turkish apostrophe suffixes stay attached.
const UFAKZEKA: &[&str] =
    &[r"[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"];

const LAGUNA: &[&str] = &[r"[^\n]+|[\n]+", QWEN2[0]];

const EXAONE_MOE: &[&str] = &[concat!(
    contractions!(),
    r"|[^\r\n\p{L}\p{N}]?(?:\p{L}\p{M}*(?: \p{L}\p{M}*)*)+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n/]?",
    r"|\s*[\r\n]|\s+(?!\S)|\s+"
)];

const MINICPM5: &[&str] = &[
    r"\p{N}{1,3}",
    concat!(
        contractions!(),
        r"|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}+| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
    ),
];

/// SentencePiece-style BPE (Gemma 4): only newline runs are split off; merges see whole lines.
pub(crate) const GEMMA4: PreProfile = PreProfile {
    splits: &[r"[^\n]+|[\n]+"],
    encoding: PieceEncoding::SpaceEscaped,
    ignore_merges: false,
    add_bos: false,
    ids_are_merge_ranks: false,
};

/// Whitespace-separated words over raw UTF-8 (jina-embeddings-v2-base-zh). The whitespace between
/// words stays a piece of its own, as in llama.cpp, and becomes a token only if the vocabulary has
/// one for it.
const WHITESPACE: PreProfile = PreProfile {
    splits: &[r"\S+"],
    encoding: PieceEncoding::RawUtf8,
    ignore_merges: false,
    add_bos: false,
    ids_are_merge_ranks: false,
};

const fn byte_level(splits: &'static [&'static str]) -> PreProfile {
    PreProfile {
        splits,
        encoding: PieceEncoding::ByteLevel,
        ignore_merges: false,
        add_bos: false,
        ids_are_merge_ranks: false,
    }
}

/// Looks up the profile of a `tokenizer.ggml.pre` name.
pub(crate) fn profile(name: &str) -> Option<PreProfile> {
    let profile = match name {
        "default" => byte_level(DEFAULT),
        "llama3" | "llama-v3" | "llama-bpe" | "falcon3" | "falcon-h1" | "pixtral" | "midm-2.0" | "lfm2"
        | "jina-v5-nano" => PreProfile { ignore_merges: true, add_bos: true, ..byte_level(LLAMA3) },
        "dbrx" | "smaug-bpe" | "glm4" | "chatglm-bpe" => byte_level(LLAMA3),
        "jais-2" => byte_level(JAIS2),
        "deepseek-llm" => byte_level(DEEPSEEK_LLM),
        "deepseek-coder" => byte_level(DEEPSEEK_CODER),
        "deepseek-v3" | "hunyuan-dense" | "joyai-llm" | "hy_v4" => byte_level(DEEPSEEK_V3),
        "spark2_5" => byte_level(SPARK2_5),
        "youtu" => PreProfile { ignore_merges: true, ..byte_level(YOUTU) },
        "falcon" => byte_level(FALCON),
        "starcoder" | "refact" | "command-r" | "smollm" | "codeshell" | "exaone" | "minerva-7b"
        | "mellum2" => byte_level(STARCODER),
        "gpt-2" | "phi-2" | "jina-es" | "jina-de" | "gigachat" | "jina-v2-es" | "jina-v2-de" | "a.x-4.0"
        | "mellum" | "modern-bert" | "mpt" | "olmo" | "jais" | "trillion" | "granite-docling" | "exaone4"
        | "jina-v1-en" | "jina-v2-code" | "roberta-bpe" => byte_level(GPT2),
        "qwen2" | "deepseek-r1-qwen" | "kormo" | "f2llmv2" | "megrez" | "stablelm2" | "hunyuan"
        | "solar-open" | "grok-2" => byte_level(QWEN2),
        "qwen35" => byte_level(QWEN35),
        "poro-chat" | "bloom" | "gpt3-finnish" => byte_level(PORO),
        "viking" => byte_level(VIKING),
        "tekken" => PreProfile { ignore_merges: true, add_bos: true, ..byte_level(TEKKEN) },
        "chameleon" => PreProfile { add_bos: true, ..byte_level(CHAMELEON) },
        "gpt-4o" | "llama4" | "kanana2" | "talkie" | "minimax-m2" => byte_level(GPT4O),
        // llama.cpp emulates GPT-4o's case classes with look-aheads and, for this model, adds the
        // combining marks the original pattern (used here) already has.
        "granite-embed-multi-97m" => PreProfile { ignore_merges: true, ..byte_level(GPT4O) },
        "superbpe" => byte_level(SUPERBPE),
        "afmoe" => byte_level(AFMOE),
        "whitespace" => WHITESPACE,
        "tiny_aya" | "cohere2moe" => byte_level(TINY_AYA),
        "kimi-k2" => PreProfile { ids_are_merge_ranks: true, ..byte_level(KIMI_K2) },
        "bailingmoe" | "bailingmoe2" | "llada-moe" => byte_level(BAILINGMOE),
        "seed-coder" => byte_level(SEED_CODER),
        "ufakzeka" => byte_level(UFAKZEKA),
        "laguna" => byte_level(LAGUNA),
        "exaone-moe" => byte_level(EXAONE_MOE),
        "minicpm5" => PreProfile { ignore_merges: true, ..byte_level(MINICPM5) },
        "gemma4" | "granite-embed-multi-311m" | "sarvam-moe" => GEMMA4,
        _ => return None,
    };
    Some(profile)
}

/// The regex splits of a profile as one `tokenizers` pre-tokenizer, followed by the GPT-2 byte
/// mapping when the profile is byte-level.
pub(crate) fn build(profile: &PreProfile) -> Result<PreTokenizerWrapper, TokenizerError> {
    let mut steps = profile
        .splits
        .iter()
        .map(|pattern| {
            Split::new(SplitPattern::Regex((*pattern).to_owned()), SplitDelimiterBehavior::Isolated, false)
                .map(PreTokenizerWrapper::Split)
                .map_err(|e| TokenizerError::library(format!("pre-tokenizer pattern {pattern:?}: {e}")))
        })
        .collect::<Result<Vec<_>, _>>()?;
    if profile.encoding == PieceEncoding::ByteLevel {
        steps.push(PreTokenizerWrapper::ByteLevel(ByteLevel::new(false, false, false)));
    }
    Ok(PreTokenizerWrapper::Sequence(Sequence::new(steps)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokenizers::{OffsetReferential, OffsetType, PreTokenizedString, PreTokenizer};

    const ALL_NAMES: &[&str] = &[
        "default",
        "llama-bpe",
        "dbrx",
        "jais-2",
        "deepseek-llm",
        "deepseek-coder",
        "deepseek-v3",
        "spark2_5",
        "youtu",
        "falcon",
        "starcoder",
        "gpt-2",
        "qwen2",
        "qwen35",
        "poro-chat",
        "viking",
        "tekken",
        "chameleon",
        "gpt-4o",
        "tiny_aya",
        "kimi-k2",
        "bailingmoe",
        "seed-coder",
        "ufakzeka",
        "laguna",
        "exaone-moe",
        "minicpm5",
        "gemma4",
        "granite-embed-multi-97m",
        "superbpe",
        "afmoe",
        "whitespace",
    ];

    fn pieces(name: &str, text: &str) -> Vec<String> {
        let mut profile = profile(name).expect("known profile");
        profile.encoding = PieceEncoding::RawUtf8;
        let pre = build(&profile).expect("patterns compile");
        let mut pretokenized = PreTokenizedString::from(text);
        pre.pre_tokenize(&mut pretokenized).expect("pre-tokenize");
        pretokenized
            .get_splits(OffsetReferential::Original, OffsetType::Byte)
            .into_iter()
            .map(|(piece, _, _)| piece.to_owned())
            .collect()
    }

    #[test]
    fn every_profile_compiles_and_covers_its_input() {
        let text = "Hello y'all, 12345 ÄÖ日本語 \n\n  tabs\there 🙂 résumé iPhone";
        for name in ALL_NAMES {
            assert_eq!(pieces(name, text).concat(), text, "profile {name} lost text");
        }
    }

    #[test]
    fn digit_grouping_differs_between_llama3_and_qwen2() {
        assert_eq!(pieces("llama-bpe", "12345"), ["123", "45"]);
        assert_eq!(pieces("qwen2", "12345"), ["1", "2", "3", "4", "5"]);
    }

    #[test]
    fn qwen35_keeps_combining_marks_with_letters() {
        let decomposed = "re\u{301}sume\u{301}";
        assert_eq!(pieces("qwen35", decomposed), [decomposed]);
        assert_eq!(pieces("qwen2", decomposed), ["re", "\u{301}sume", "\u{301}"]);
    }

    #[test]
    fn contractions_split_off_except_in_ufakzeka() {
        assert_eq!(pieces("llama-bpe", "we'RE"), ["we", "'RE"]);
        assert_eq!(pieces("ufakzeka", "Ankara'da"), ["Ankara", "'da"]);
    }

    #[test]
    fn kimi_splits_han_runs_from_other_letters() {
        assert_eq!(pieces("kimi-k2", "abc日本xyz"), ["abc", "日本", "xyz"]);
    }

    #[test]
    fn superbpe_splits_only_numbers_and_groups_ascii_digits_from_the_right() {
        assert_eq!(pieces("superbpe", "I paid 1234567 dollars"), ["I paid ", "1", "234", "567", " dollars"]);
        assert_eq!(pieces("superbpe", "x123y45z"), ["x", "123", "y", "45", "z"]);
        assert_eq!(pieces("superbpe", "a 99,1000"), ["a ", "99", ",", "1", "000"]);
        // `\p{N}` ends the number run, but only ASCII digits count towards the groups of three.
        assert_eq!(pieces("superbpe", "12\u{663}456"), ["12\u{663}", "456"]);
    }

    #[test]
    fn afmoe_groups_digits_with_the_short_group_first() {
        assert_eq!(pieces("afmoe", "12345"), ["12", "345"]);
        assert_eq!(pieces("afmoe", "1234567"), ["1", "234", "567"]);
        assert_eq!(pieces("afmoe", "123456"), ["123", "456"]);
        assert_eq!(pieces("afmoe", "v2.10"), ["v", "2", ".", "10"]);
    }

    #[test]
    fn afmoe_isolates_han_hangul_and_lao_runs_and_splits_words_like_deepseek_v3() {
        assert_eq!(pieces("afmoe", "hello世界ok"), ["hello", "世界", "ok"]);
        assert_eq!(pieces("afmoe", "ສະບາຍດີabc"), ["ສະບາຍດີ", "abc"]);
        assert_eq!(pieces("afmoe", "안녕 하세요"), ["안녕", " ", "하세요"]);
        assert_eq!(pieces("afmoe", "Hello, world.foo"), ["Hello", ",", " world", ".foo"]);
    }

    #[test]
    fn granite_embed_multi_97m_cuts_at_case_and_keeps_marks_with_letters() {
        let profile = profile("granite-embed-multi-97m").unwrap();
        assert!(profile.ignore_merges);
        assert_eq!(
            pieces("granite-embed-multi-97m", "HelloWorld's 12345"),
            ["Hello", "World's", " ", "123", "45"]
        );
        let devanagari = "नमस्ते";
        assert_eq!(pieces("granite-embed-multi-97m", devanagari), [devanagari]);
    }

    #[test]
    fn whitespace_profile_splits_at_whitespace_runs_and_keeps_them() {
        let profile = profile("whitespace").unwrap();
        assert_eq!(profile.encoding, PieceEncoding::RawUtf8);
        assert_eq!(pieces("whitespace", "你好 世界,\t ok"), ["你好", " ", "世界,", "\t ", "ok"]);
    }

    #[test]
    fn unknown_names_have_no_profile() {
        assert!(profile("qwen3").is_none());
        assert!(profile("").is_none());
    }
}
