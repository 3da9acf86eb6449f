//! `canopy tokenize`: text to token ids and back with a model's tokenizer.

use std::path::PathBuf;

use anyhow::Context;
use canopy_models::gguf::GgufFile;
use canopy_models::tokenizer::Tokenizer;

#[derive(clap::Args)]
#[command(group(clap::ArgGroup::new("input").required(true).args(["text", "input_file"])))]
pub struct Args {
    /// The GGUF file whose tokenizer to use (a vocab-only file is enough).
    #[arg(env = "CANOPY_MODEL")]
    file: PathBuf,
    /// The input: text, or with --detokenize a JSON array of token ids.
    #[arg(long, env = "CANOPY_TEXT")]
    text: Option<String>,
    /// Read the input from this file instead.
    #[arg(long = "file", value_name = "PATH", env = "CANOPY_INPUT_FILE")]
    input_file: Option<PathBuf>,
    /// Add the special tokens the model adds around a prompt (BOS, EOS). Special-token text in the
    /// input is recognised either way.
    #[arg(long, env = "CANOPY_ADD_SPECIAL")]
    add_special: bool,
    /// Turn token ids back into text.
    #[arg(long, env = "CANOPY_DETOKENIZE")]
    detokenize: bool,
    /// With --detokenize, leave control tokens (BOS, EOS, ...) out of the text.
    #[arg(long, env = "CANOPY_SKIP_SPECIAL", requires = "detokenize")]
    skip_special: bool,
    /// Use this Hugging Face tokenizer.json instead of the GGUF's vocabulary (special token ids
    /// still come from the GGUF).
    #[arg(long, value_name = "PATH", env = "CANOPY_TOKENIZER_JSON")]
    tokenizer_json: Option<PathBuf>,
}

pub fn run(args: &Args) -> anyhow::Result<()> {
    let file = GgufFile::open(&args.file).with_context(|| format!("reading {}", args.file.display()))?;
    let tokenizer = match &args.tokenizer_json {
        Some(path) => Tokenizer::from_tokenizer_json(path, Some(&file))
            .with_context(|| format!("loading {}", path.display()))?,
        None => Tokenizer::from_gguf(&file)
            .with_context(|| format!("building the tokenizer of {}", args.file.display()))?,
    };
    let input = match (&args.text, &args.input_file) {
        (Some(text), _) => text.clone(),
        (None, Some(path)) => {
            std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?
        }
        (None, None) => anyhow::bail!("give the input with --text or --file"),
    };
    if args.detokenize {
        let ids: Vec<u32> =
            serde_json::from_str(&input).context("the input is not a JSON array of token ids")?;
        print!("{}", tokenizer.decode(&ids, args.skip_special)?);
    } else {
        let ids = tokenizer.encode(&input, args.add_special)?;
        println!("{}", serde_json::to_string(&ids)?);
    }
    Ok(())
}
