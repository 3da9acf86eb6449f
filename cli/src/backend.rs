//! The `--backend` choice of the commands that run a model, and loading a model onto it.

use anyhow::Context;
use canopy_kernels::backend::Backend;
use canopy_kernels::backend::cpu::CpuBackend;
use canopy_kernels::backend::cuda::CudaBackend;
use canopy_models::arch::ArchError;
use canopy_models::gguf::GgufFile;
use canopy_worker::engine::{CausalLm, KvUsage, Qwen3Lm, Qwen3LmOptions, SequenceChunk};

/// A compute backend.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum BackendKind {
    /// CUDA when a GPU and the CUDA libraries are present, else the CPU (with a note on stderr).
    Auto,
    /// The reference CPU backend (rayon).
    Cpu,
    /// The first CUDA device; kernels are compiled by NVRTC at start and cached on disk.
    Cuda,
}

/// A model loaded onto the backend chosen at run time (boxed: the variants differ in size).
pub enum LoadedModel {
    Cpu(Box<Qwen3Lm<CpuBackend>>),
    Cuda(Box<Qwen3Lm<CudaBackend>>),
}

impl BackendKind {
    /// Loads a Qwen3 model from `file` onto this backend.
    pub fn load(self, file: &GgufFile, options: Qwen3LmOptions) -> anyhow::Result<LoadedModel> {
        let cuda = match self {
            Self::Cpu => None,
            Self::Cuda => Some(CudaBackend::new(0).context("opening CUDA device 0")?),
            Self::Auto => match CudaBackend::new(0) {
                Ok(backend) => Some(backend),
                Err(error) => {
                    eprintln!("canopy: using the CPU backend: {error}");
                    None
                }
            },
        };
        Ok(match cuda {
            Some(backend) => LoadedModel::Cuda(Box::new(Qwen3Lm::load(backend, file, options)?)),
            None => LoadedModel::Cpu(Box::new(Qwen3Lm::load(CpuBackend::new(), file, options)?)),
        })
    }
}

impl LoadedModel {
    /// The backend's name for reports (`cpu`, `cuda:0`).
    pub fn backend_name(&self) -> &'static str {
        match self {
            Self::Cpu(_) => "cpu",
            Self::Cuda(_) => "cuda",
        }
    }

    /// The device in words, e.g. `cuda:0 (sm_90)`.
    pub fn device(&self) -> String {
        match self {
            Self::Cpu(_) => {
                let threads = std::thread::available_parallelism().map_or(1, usize::from);
                format!("CPU ({threads} threads)")
            }
            Self::Cuda(model) => format!("{} ({})", model.backend().name(), model.backend().arch()),
        }
    }
}

impl LoadedModel {
    /// The device's measured read bandwidth in bytes per second; `None` on the CPU, where it is
    /// not measured.
    pub fn read_bandwidth(&self) -> anyhow::Result<Option<f64>> {
        match self {
            Self::Cpu(_) => Ok(None),
            Self::Cuda(model) => {
                Ok(Some(model.backend().read_bandwidth().context("measuring read bandwidth")?))
            }
        }
    }
}

impl CausalLm for LoadedModel {
    type Error = ArchError;

    fn vocab_size(&self) -> usize {
        match self {
            Self::Cpu(model) => model.vocab_size(),
            Self::Cuda(model) => model.vocab_size(),
        }
    }

    fn max_sequence_len(&self) -> usize {
        match self {
            Self::Cpu(model) => model.max_sequence_len(),
            Self::Cuda(model) => model.max_sequence_len(),
        }
    }

    fn forward(&mut self, batch: &[SequenceChunk<'_>], logits: &mut [f32]) -> Result<(), ArchError> {
        match self {
            Self::Cpu(model) => model.forward(batch, logits),
            Self::Cuda(model) => model.forward(batch, logits),
        }
    }

    fn forward_argmax(&mut self, batch: &[SequenceChunk<'_>], ids: &mut [u32]) -> Result<(), ArchError> {
        match self {
            Self::Cpu(model) => model.forward_argmax(batch, ids),
            Self::Cuda(model) => model.forward_argmax(batch, ids),
        }
    }

    fn release(&mut self, sequence: usize) {
        match self {
            Self::Cpu(model) => model.release(sequence),
            Self::Cuda(model) => model.release(sequence),
        }
    }

    fn kv_usage(&self) -> KvUsage {
        match self {
            Self::Cpu(model) => model.kv_usage(),
            Self::Cuda(model) => model.kv_usage(),
        }
    }
}
