//! Real vocabularies against llama.cpp's reference tokenizations (`testdata/vocab`), plus round
//! trips, special tokens and streaming on the same vocabularies. Each vocabulary is read from its
//! GGUF file once per test binary.

use std::path::PathBuf;
use std::sync::OnceLock;

use canopy_models::gguf::GgufFile;
use canopy_models::tokenizer::Tokenizer;

const SEPARATOR: &str = "\n__ggml_vocab_test__\n";

/// Vocabularies whose reference files exist in `testdata/vocab`.
const VOCABS: &[&str] = &["qwen2", "qwen35", "llama-bpe", "llama-spm", "gemma-4"];

fn testdata(relative: &str) -> PathBuf {
    PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/testdata")).join(relative)
}

fn vocab(name: &str) -> &'static Tokenizer {
    static CELLS: [OnceLock<Tokenizer>; 5] = [const { OnceLock::new() }; 5];
    let index = VOCABS.iter().position(|v| *v == name).expect("known vocabulary");
    CELLS[index].get_or_init(|| {
        let file = GgufFile::open(testdata(&format!("vocab/ggml-vocab-{name}.gguf"))).expect("open GGUF");
        Tokenizer::from_gguf(&file).unwrap_or_else(|e| panic!("{name}: {e}"))
    })
}

struct Case {
    text: String,
    ids: Vec<u32>,
}

/// The reference cases: texts separated by `__ggml_vocab_test__` lines (a trailing separator
/// ends the last text), and one line of space-separated ids per text.
fn cases(name: &str) -> Vec<Case> {
    let read = |ext: &str| {
        std::fs::read_to_string(testdata(&format!("vocab/ggml-vocab-{name}.gguf.{ext}"))).expect("read")
    };
    let (inp, out) = (read("inp"), read("out"));
    let inp = inp.strip_suffix(SEPARATOR).unwrap_or(&inp);
    let texts: Vec<&str> = inp.split(SEPARATOR).collect();
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(texts.len(), lines.len(), "{name}: number of texts and of expected lines differ");
    texts
        .into_iter()
        .zip(lines)
        .map(|(text, line)| Case {
            text: text.to_owned(),
            ids: line.split_whitespace().map(|id| id.parse().expect("token id")).collect(),
        })
        .collect()
}

fn check_reference(name: &str) {
    let tokenizer = vocab(name);
    let cases = cases(name);
    assert!(cases.len() > 40, "{name}: only {} cases", cases.len());
    for (index, case) in cases.iter().enumerate() {
        let ids = tokenizer.encode(&case.text, false).expect("encode");
        assert!(
            ids == case.ids,
            "{name}: case {index} of {}, text {:?}\n  expected {:?}\n  got      {:?}",
            cases.len(),
            case.text,
            case.ids,
            ids
        );
    }
}

fn check_round_trip(name: &str) {
    let tokenizer = vocab(name);
    for case in cases(name) {
        let decoded = tokenizer.decode(&case.ids, false).expect("decode");
        assert_eq!(decoded, case.text, "{name}: reference ids do not decode to their text");
    }
}

#[test]
fn qwen2_matches_reference() {
    check_reference("qwen2");
}

#[test]
fn qwen35_matches_reference() {
    check_reference("qwen35");
}

#[test]
fn llama_bpe_matches_reference() {
    check_reference("llama-bpe");
}

#[test]
fn llama_spm_matches_reference() {
    check_reference("llama-spm");
}

#[test]
fn gemma4_matches_reference() {
    check_reference("gemma-4");
}

#[test]
fn reference_ids_decode_to_their_text() {
    for name in VOCABS {
        check_round_trip(name);
    }
}

#[test]
fn special_token_text_is_one_token() {
    let qwen2 = vocab("qwen2");
    let im_start = qwen2.token_to_id("<|im_start|>").unwrap();
    let im_end = qwen2.token_to_id("<|im_end|>").unwrap();
    let ids = qwen2.encode("<|im_start|>user\nhi<|im_end|>", false).unwrap();
    assert_eq!(ids.first(), Some(&im_start));
    assert_eq!(ids.last(), Some(&im_end));
    assert_eq!(qwen2.decode(&ids, false).unwrap(), "<|im_start|>user\nhi<|im_end|>");
    assert_eq!(qwen2.decode(&ids, true).unwrap(), "user\nhi");
    // User-defined tokens are matched too, and stay visible when special tokens are skipped.
    let pad = qwen2.token_to_id("[PAD151646]").unwrap();
    assert_eq!(qwen2.encode("x[PAD151646]", false).unwrap().last(), Some(&pad));
    assert_eq!(qwen2.decode(&[pad], true).unwrap(), "[PAD151646]");

    let llama3 = vocab("llama-bpe");
    let eot = llama3.token_to_id("<|eot_id|>").unwrap();
    assert_eq!(llama3.encode("Hi<|eot_id|>", false).unwrap().last(), Some(&eot));
    assert_eq!(llama3.special().eot.as_ref().map(|t| t.id), Some(eot));

    let gemma = vocab("gemma-4");
    let turn = gemma.token_to_id("<|turn>").unwrap();
    let quote = gemma.token_to_id("<|\"|>").unwrap();
    let ids = gemma.encode("<|turn>user say <|\"|>hi<|\"|>", false).unwrap();
    assert_eq!(ids[0], turn);
    assert_eq!(ids.iter().filter(|&&id| id == quote).count(), 2);
    assert_eq!(gemma.special().eot.as_ref().map(|t| t.text.as_str()), Some("<turn|>"));

    let spm = vocab("llama-spm");
    assert_eq!(spm.encode("<s>", false).unwrap(), [1]);
}

#[test]
fn add_special_follows_the_vocabulary() {
    let with_bos = [("llama-spm", 1), ("llama-bpe", 128000), ("gemma-4", 2)];
    for (name, bos) in with_bos {
        let tokenizer = vocab(name);
        let plain = tokenizer.encode("Hello world", false).unwrap();
        let special = tokenizer.encode("Hello world", true).unwrap();
        assert_eq!(special[0], bos, "{name}");
        assert_eq!(&special[1..], plain, "{name}");
        assert_eq!(tokenizer.special().bos.as_ref().map(|t| t.id), Some(bos), "{name}");
    }
    let qwen2 = vocab("qwen2");
    assert!(!qwen2.special().add_bos);
    assert_eq!(qwen2.encode("Hello world", true).unwrap(), qwen2.encode("Hello world", false).unwrap());
    assert_eq!(qwen2.special().eos.as_ref().map(|t| t.text.as_str()), Some("<|endoftext|>"));
    assert_eq!(qwen2.special().eot.as_ref().map(|t| t.text.as_str()), Some("<|im_end|>"));
}

#[test]
fn decoding_rejects_ids_outside_the_vocabulary() {
    let qwen2 = vocab("qwen2");
    let size = qwen2.vocab_size() as u32;
    assert!(qwen2.decode(&[size], false).is_err());
    assert!(qwen2.stream_decoder(false).step(u32::MAX).is_err());
    assert_eq!(qwen2.id_to_token(size), None);
}

const MULTIBYTE: &str = "Hi 🦙 llamas! 日本語のテキスト 😶‍🌫️ ✅ naïve café — Ελληνικά 🙂🙂";

#[test]
fn streaming_emits_whole_characters_and_matches_full_decode() {
    for name in VOCABS {
        let tokenizer = vocab(name);
        let ids = tokenizer.encode(MULTIBYTE, false).unwrap();
        let splits_characters =
            ids.iter().any(|&id| tokenizer.decode(&[id], false).unwrap().contains('\u{FFFD}'));
        assert!(splits_characters, "{name}: no token holds a partial character, the test proves nothing");

        let mut stream = tokenizer.stream_decoder(false);
        let mut chunks = Vec::new();
        for &id in &ids {
            chunks.extend(stream.step(id).unwrap());
        }
        chunks.extend(stream.finish().unwrap());
        for chunk in &chunks {
            assert!(!chunk.is_empty() && !chunk.contains('\u{FFFD}'), "{name}: chunk {chunk:?}");
        }
        assert_eq!(chunks.concat(), tokenizer.decode(&ids, false).unwrap(), "{name}");
        assert_eq!(chunks.concat(), MULTIBYTE, "{name}");
    }
}

#[test]
fn streaming_holds_byte_fallback_tokens_until_the_character_is_complete() {
    let spm = vocab("llama-spm");
    let byte = |b: u8| spm.token_to_id(&format!("<0x{b:02X}>")).unwrap();
    let hello = spm.encode("Hello", false).unwrap();
    let mut stream = spm.stream_decoder(false);
    let mut out = String::new();
    for &id in &hello {
        out.extend(stream.step(id).unwrap());
    }
    assert_eq!(out, "Hello");
    // 日 is E6 97 A5.
    assert_eq!(stream.step(byte(0xE6)).unwrap(), None);
    assert_eq!(stream.step(byte(0x97)).unwrap(), None);
    assert_eq!(stream.step(byte(0xA5)).unwrap().as_deref(), Some("日"));
    // An incomplete character at the end is flushed as replacement characters.
    assert_eq!(stream.step(byte(0xE6)).unwrap(), None);
    let rest = stream.finish().unwrap().unwrap();
    assert!(!rest.is_empty() && rest.chars().all(|c| c == '\u{FFFD}'), "{rest:?}");
}

#[test]
fn streaming_skips_special_tokens_when_asked() {
    let qwen2 = vocab("qwen2");
    let ids = qwen2.encode("<|im_start|>assistant\n日本<|im_end|>", false).unwrap();
    let mut stream = qwen2.stream_decoder(true);
    let mut out = String::new();
    for &id in &ids {
        out.extend(stream.step(id).unwrap());
    }
    out.extend(stream.finish().unwrap());
    assert_eq!(out, "assistant\n日本");
}
