//! The `--backend` choice of the commands that run a model, and loading a model onto it.

use canopy_kernels::backend::cpu::CpuBackend;
use canopy_models::arch::ArchError;
use canopy_models::gguf::GgufFile;
use canopy_worker::engine::{Qwen3Lm, Qwen3LmOptions};

/// A compute backend.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum BackendKind {
    /// The reference CPU backend (rayon).
    Cpu,
}

impl BackendKind {
    /// The name shown in reports.
    pub fn name(self) -> &'static str {
        match self {
            Self::Cpu => "cpu",
        }
    }

    /// Loads a Qwen3 model from `file` onto this backend.
    pub fn load(self, file: &GgufFile, options: Qwen3LmOptions) -> Result<Qwen3Lm<CpuBackend>, ArchError> {
        match self {
            Self::Cpu => Qwen3Lm::load(CpuBackend::new(), file, options),
        }
    }
}
