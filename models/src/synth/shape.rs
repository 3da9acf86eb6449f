//! Model architectures and shapes that `synth` can produce.

use std::fmt;
use std::str::FromStr;

use super::SynthError;

/// The architecture of a synthetic model (the GGUF `general.architecture`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Arch {
    /// Qwen3 dense: q/k RMSNorm, GQA, SwiGLU.
    Qwen3,
}

impl Arch {
    /// The name GGUF files use for this architecture.
    pub const fn name(self) -> &'static str {
        match self {
            Self::Qwen3 => "qwen3",
        }
    }
}

impl FromStr for Arch {
    type Err = SynthError;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        match text.to_ascii_lowercase().as_str() {
            "qwen3" => Ok(Self::Qwen3),
            _ => Err(SynthError::UnknownArch(text.to_owned())),
        }
    }
}

impl fmt::Display for Arch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A model shape: the hyperparameters of a real checkpoint (or of the repository's tiny fixture).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Shape {
    /// The shape of `models/testdata/models/qwen3-tiny-*.gguf`.
    Tiny,
    /// Qwen/Qwen3-0.6B.
    Qwen3_0_6B,
    /// Qwen/Qwen3-8B.
    Qwen3_8B,
}

/// Hyperparameters of a [`Shape`], as the Hugging Face `config.json` states them.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct ShapeConfig {
    /// `general.name` of the converted file.
    pub display_name: &'static str,
    /// `hidden_size`.
    pub hidden: u32,
    /// `num_hidden_layers`.
    pub layers: u32,
    /// `num_attention_heads`.
    pub heads: u32,
    /// `num_key_value_heads`.
    pub kv_heads: u32,
    /// `head_dim`.
    pub head_dim: u32,
    /// `intermediate_size`.
    pub ffn: u32,
    /// `vocab_size` (rows of the embedding, including padding ids).
    pub vocab: u32,
    /// `tie_word_embeddings`: the LM head reuses the embedding and the file has no `output.weight`.
    pub tied_embeddings: bool,
    /// `max_position_embeddings`.
    pub context: u32,
    /// `rope_theta`.
    pub rope_theta: f32,
    /// `rms_norm_eps`.
    pub rms_eps: f32,
    /// Id of the first added (special) token; the real Qwen3 vocabulary places them at 151643.
    pub special_tokens_start: u32,
}

impl Shape {
    /// Every shape, in the order `synth --help` lists them.
    pub const ALL: [Shape; 3] = [Self::Tiny, Self::Qwen3_0_6B, Self::Qwen3_8B];

    /// The name used on the command line.
    pub const fn name(self) -> &'static str {
        match self {
            Self::Tiny => "tiny",
            Self::Qwen3_0_6B => "qwen3-0.6b",
            Self::Qwen3_8B => "qwen3-8b",
        }
    }

    /// The hyperparameters.
    pub const fn config(self) -> ShapeConfig {
        match self {
            // qwen3-tiny.json `hf_config` of the test fixture.
            Self::Tiny => ShapeConfig {
                display_name: "Qwen3 Tiny",
                hidden: 64,
                layers: 2,
                heads: 4,
                kv_heads: 2,
                head_dim: 16,
                ffn: 192,
                vocab: 1024,
                tied_embeddings: false,
                context: 4096,
                rope_theta: 1_000_000.0,
                rms_eps: 1e-6,
                special_tokens_start: 1024 - QWEN3_ADDED_TOKENS,
            },
            Self::Qwen3_0_6B => ShapeConfig {
                display_name: "Qwen3 0.6B",
                hidden: 1024,
                layers: 28,
                heads: 16,
                kv_heads: 8,
                head_dim: 128,
                ffn: 3072,
                vocab: 151_936,
                tied_embeddings: true,
                context: 40_960,
                rope_theta: 1_000_000.0,
                rms_eps: 1e-6,
                special_tokens_start: QWEN3_FIRST_ADDED_TOKEN,
            },
            Self::Qwen3_8B => ShapeConfig {
                display_name: "Qwen3 8B",
                hidden: 4096,
                layers: 36,
                heads: 32,
                kv_heads: 8,
                head_dim: 128,
                ffn: 12_288,
                vocab: 151_936,
                tied_embeddings: false,
                context: 40_960,
                rope_theta: 1_000_000.0,
                rms_eps: 1e-6,
                special_tokens_start: QWEN3_FIRST_ADDED_TOKEN,
            },
        }
    }
}

/// Id of `<|endoftext|>`, the first added token of the real Qwen2/Qwen3 vocabulary.
const QWEN3_FIRST_ADDED_TOKEN: u32 = 151_643;

/// Number of added tokens of the Qwen3 vocabulary (ChatML, vision, FIM, tool and think markers).
const QWEN3_ADDED_TOKENS: u32 = 26;

impl FromStr for Shape {
    type Err = SynthError;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        let wanted = text.to_ascii_lowercase();
        Self::ALL
            .into_iter()
            .find(|shape| shape.name() == wanted)
            .ok_or_else(|| SynthError::UnknownShape(text.to_owned()))
    }
}

impl fmt::Display for Shape {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shapes_parse_by_name_and_reject_others() {
        assert_eq!("qwen3-8b".parse::<Shape>().unwrap(), Shape::Qwen3_8B);
        assert_eq!("Qwen3-0.6B".parse::<Shape>().unwrap(), Shape::Qwen3_0_6B);
        assert_eq!("tiny".parse::<Shape>().unwrap(), Shape::Tiny);
        assert!(matches!("qwen3-9b".parse::<Shape>(), Err(SynthError::UnknownShape(s)) if s == "qwen3-9b"));
        assert_eq!("QWEN3".parse::<Arch>().unwrap(), Arch::Qwen3);
        assert!(matches!("llama".parse::<Arch>(), Err(SynthError::UnknownArch(_))));
    }

    #[test]
    fn attention_widths_follow_head_counts() {
        for shape in Shape::ALL {
            let c = shape.config();
            assert_eq!(c.heads % c.kv_heads, 0, "{shape}: GQA groups must be whole");
            assert!(c.special_tokens_start + QWEN3_ADDED_TOKENS <= c.vocab, "{shape}");
        }
        // Qwen3-0.6B's attention is wider than its residual stream (16 x 128 = 2048 > 1024).
        let small = Shape::Qwen3_0_6B.config();
        assert_eq!(small.heads * small.head_dim, 2048);
    }
}
