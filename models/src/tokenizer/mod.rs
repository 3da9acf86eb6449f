//! Tokenizers rebuilt from GGUF metadata (or loaded from a `tokenizer.json`) on top of the
//! Hugging Face `tokenizers` crate.
//!
//! Families: byte-level BPE (`gpt2`, with the pre-tokenizer profile named by
//! `tokenizer.ggml.pre`), SentencePiece (`llama`) and Gemma 4 (`gemma4`). Control, unknown and
//! user-defined tokens are registered as added tokens, so their text in the input is always
//! recognised as the token. BOS / EOS are added only when the caller asks for special tokens.

mod bpe;
mod error;
mod gemma4;
mod metadata;
mod pretokenizer;
mod rank_merges;
mod special;
mod spm;
mod stream;

use std::path::Path;

use tokenizers::AddedToken;
use tokenizers::processors::PostProcessorWrapper;

use crate::gguf::GgufFile;

pub use error::TokenizerError;
pub use metadata::{SpecialMetadata, TokenType, TokenizerMetadata};
pub use special::{SpecialToken, SpecialTokens};
pub use stream::StreamDecoder;

use pretokenizer::PieceEncoding;
use special::FamilyDefaults;

/// A ready-to-use tokenizer: the `tokenizers` pipeline plus the vocabulary's special tokens.
pub struct Tokenizer {
    inner: tokenizers::Tokenizer,
    special: SpecialTokens,
}

impl Tokenizer {
    /// Builds the tokenizer embedded in a GGUF file's metadata.
    pub fn from_gguf(file: &GgufFile) -> Result<Self, TokenizerError> {
        Self::from_metadata(&TokenizerMetadata::from_gguf(file)?)
    }

    /// Builds the tokenizer described by GGUF-style metadata.
    pub fn from_metadata(meta: &TokenizerMetadata) -> Result<Self, TokenizerError> {
        if meta.tokens.is_empty() {
            return Err(TokenizerError::EmptyVocabulary);
        }
        if !meta.token_types.is_empty() && meta.token_types.len() < meta.tokens.len() {
            return Err(TokenizerError::InvalidKey {
                key: "tokenizer.ggml.token_type",
                reason: format!("{} types for {} tokens", meta.token_types.len(), meta.tokens.len()),
            });
        }
        let mut inner = build_pipeline(meta)?;
        let added = meta.tokens.iter().enumerate().filter_map(|(id, text)| {
            let kind = meta.token_type(id);
            kind.is_added().then(|| AddedToken::from(text.as_str(), kind.is_special()).normalized(false))
        });
        inner.add_tokens(added).map_err(TokenizerError::library)?;
        let defaults = FamilyDefaults::of(&meta.model, meta.pre.as_deref());
        let special = resolve_special(&meta.special, defaults, &inner)?;
        Ok(Self { inner, special })
    }

    /// Loads a Hugging Face `tokenizer.json`. With `special_from` (the model's GGUF), BOS / EOS
    /// and the other special ids and flags come from its metadata and the file's own
    /// post-processor is dropped; without it the file's post-processor decides what
    /// `add_special` adds and no BOS / EOS ids are known.
    pub fn from_tokenizer_json(path: &Path, special_from: Option<&GgufFile>) -> Result<Self, TokenizerError> {
        let mut inner = tokenizers::Tokenizer::from_file(path)
            .map_err(|e| TokenizerError::TokenizerJson { path: path.to_owned(), message: e.to_string() })?;
        let special = match special_from {
            Some(file) => {
                let meta = SpecialMetadata::from_gguf(file)?;
                let model = metadata::optional(file, "tokenizer.ggml.model", GgufFile::get_str)?;
                let pre = metadata::optional(file, "tokenizer.ggml.pre", GgufFile::get_str)?;
                inner.with_post_processor(None::<PostProcessorWrapper>);
                resolve_special(&meta, FamilyDefaults::of(model.unwrap_or_default(), pre), &inner)?
            }
            None => resolve_special(&SpecialMetadata::default(), FamilyDefaults::default(), &inner)?,
        };
        Ok(Self { inner, special })
    }

    /// Encodes `text`. Special-token text is always recognised; `add_special` adds BOS / EOS as
    /// the vocabulary asks.
    pub fn encode(&self, text: &str, add_special: bool) -> Result<Vec<u32>, TokenizerError> {
        let encoding = self.inner.encode_fast(text, add_special).map_err(TokenizerError::library)?;
        let bos = self.special.bos.as_ref().filter(|_| add_special && self.special.add_bos);
        let eos = self.special.eos.as_ref().filter(|_| add_special && self.special.add_eos);
        let mut ids = Vec::with_capacity(encoding.len() + 2);
        ids.extend(bos.map(|token| token.id));
        ids.extend_from_slice(encoding.get_ids());
        ids.extend(eos.map(|token| token.id));
        Ok(ids)
    }

    /// Decodes `ids` to text; `skip_special` drops control tokens (user-defined ones stay).
    pub fn decode(&self, ids: &[u32], skip_special: bool) -> Result<String, TokenizerError> {
        for &id in ids {
            self.check_id(id)?;
        }
        self.inner.decode(ids, skip_special).map_err(TokenizerError::library)
    }

    /// A decoder for generated tokens that emits text only in whole characters.
    pub fn stream_decoder(&self, skip_special: bool) -> StreamDecoder<'_> {
        StreamDecoder::new(self, skip_special)
    }

    /// The vocabulary's special tokens.
    pub fn special(&self) -> &SpecialTokens {
        &self.special
    }

    /// Number of token ids, added tokens included.
    pub fn vocab_size(&self) -> usize {
        self.inner.get_vocab_size(true)
    }

    /// The id of a vocabulary entry given its stored text.
    pub fn token_to_id(&self, token: &str) -> Option<u32> {
        self.inner.token_to_id(token)
    }

    /// The stored text of token `id`.
    pub fn id_to_token(&self, id: u32) -> Option<String> {
        self.inner.id_to_token(id)
    }

    /// The underlying `tokenizers` pipeline (it adds no BOS / EOS for GGUF vocabularies).
    pub fn inner(&self) -> &tokenizers::Tokenizer {
        &self.inner
    }

    fn check_id(&self, id: u32) -> Result<(), TokenizerError> {
        let vocab_size = self.vocab_size();
        if (id as usize) < vocab_size { Ok(()) } else { Err(TokenizerError::UnknownId { id, vocab_size }) }
    }
}

/// The `tokenizers` pipeline of one tokenizer family, without added tokens.
fn build_pipeline(meta: &TokenizerMetadata) -> Result<tokenizers::Tokenizer, TokenizerError> {
    match meta.model.as_str() {
        "gpt2" => {
            let pre = meta
                .pre
                .as_deref()
                .ok_or_else(|| TokenizerError::MissingPreTokenizer { model: meta.model.clone() })?;
            let profile = pretokenizer::profile(pre)
                .ok_or_else(|| TokenizerError::UnknownPreTokenizer(pre.to_owned()))?;
            match profile.encoding {
                PieceEncoding::ByteLevel => bpe::build(meta, &profile),
                PieceEncoding::SpaceEscaped | PieceEncoding::RawUtf8 => gemma4::build(meta, &profile),
            }
        }
        "gemma4" => gemma4::build(meta, &pretokenizer::GEMMA4),
        "llama" => {
            let unk_id = meta.special.unk_id.or(FamilyDefaults::of("llama", None).unk_id);
            let unk_text = unk_id
                .and_then(|id| usize::try_from(id).ok())
                .and_then(|id| meta.tokens.get(id))
                .filter(|text| !text.is_empty())
                .cloned();
            spm::build(meta, meta.special.add_space_prefix.unwrap_or(true), unk_text)
        }
        other => Err(TokenizerError::UnsupportedModel(other.to_owned())),
    }
}

fn resolve_special(
    meta: &SpecialMetadata,
    defaults: FamilyDefaults,
    inner: &tokenizers::Tokenizer,
) -> Result<SpecialTokens, TokenizerError> {
    special::resolve(
        meta,
        defaults,
        inner.get_vocab_size(true),
        |id| inner.id_to_token(id),
        |text| inner.token_to_id(text),
    )
}
