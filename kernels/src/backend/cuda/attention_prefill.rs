//! Attention of prefill-sized batches on the tensor cores (`attention_prefill` in attention.cu):
//! a block takes 16 query rows of one sequence and up to four query heads of one KV head, and
//! multiplies f16 copies of each tile of keys and values with mma.sync, so that every key and
//! value row read serves 64 queries. The split-K kernel of attention.rs keeps decode and verify
//! batches, whose few rows leave this kernel's blocks too few or too long.

use cudarc::driver::LaunchConfig;

use super::CudaBackend;
use super::context::{Device, driver, rows_from_env, to_u32};
use super::divisor::FastDivisor;
use super::memory::CudaTensor;
use crate::backend::{AttentionBatch, AttentionParams, BackendError};

/// The only head size of the kernel (`PREFILL_HEAD_DIM`).
const HEAD_DIM: usize = 128;
/// Query rows per block (`PREFILL_ROWS`).
const ROWS: usize = 16;
/// Warps per block, one per query head (`PREFILL_WARPS`).
const WARPS: usize = 4;
/// The fewest rows that take the kernel by default: more than the largest verify batch.
const DEFAULT_MIN_ROWS: usize = 65;

/// The kernel's switch: present on devices with f16 mma.sync (sm_80 and later).
pub(super) struct PrefillAttention {
    /// The fewest rows of a batch that take the kernel: `CANOPY_CUDA_PREFILL_ATTENTION_MIN_ROWS`
    /// or [`DEFAULT_MIN_ROWS`].
    min_rows: usize,
}

impl PrefillAttention {
    pub fn new(device: &Device) -> Option<Self> {
        let sm = device.arch.strip_prefix("sm_")?.parse::<u32>().ok()?;
        (sm >= 80).then(|| Self {
            min_rows: rows_from_env("CANOPY_CUDA_PREFILL_ATTENTION_MIN_ROWS", DEFAULT_MIN_ROWS),
        })
    }

    /// Whether the kernel takes a batch of `n_rows` rows with heads of `params`.
    pub fn takes(&self, params: &AttentionParams, n_rows: usize) -> bool {
        params.head_dim == HEAD_DIM && n_rows >= self.min_rows
    }
}

/// Launches the kernel; the caller has checked the shapes and [`PrefillAttention::takes`].
pub(super) fn launch(
    backend: &CudaBackend,
    q: &CudaTensor,
    k_pool: &CudaTensor,
    v_pool: &CudaTensor,
    batch: &AttentionBatch<CudaBackend>,
    params: &AttentionParams,
    out: &mut CudaTensor,
) -> Result<(), BackendError> {
    const OP: &str = "attention";
    let group = params.n_heads / params.n_kv_heads;
    let heads_per_block = group.div_ceil(group.div_ceil(WARPS));
    let chunks = group.div_ceil(heads_per_block);
    // Each sequence's rows start a tile of their own, so there are at most this many tiles.
    let tiles = batch.n_rows().div_ceil(ROWS) + batch.n_sequences();
    let config = LaunchConfig {
        grid_dim: (
            to_u32(OP, "row tiles", tiles)?,
            to_u32(OP, "head chunks", params.n_kv_heads * chunks)?,
            1,
        ),
        block_dim: (to_u32(OP, "threads", 32 * WARPS)?, 1, 1),
        shared_mem_bytes: 0,
    };
    let n_sequences = to_u32(OP, "sequences", batch.n_sequences())?;
    let block_size = FastDivisor::new(OP, batch.block_size())?;
    let n_heads = to_u32(OP, "n_heads", params.n_heads)?;
    let n_kv_heads = to_u32(OP, "n_kv_heads", params.n_kv_heads)?;
    let heads_per_block = to_u32(OP, "heads per block", heads_per_block)?;
    let mut launch = backend.device.launch(OP, "attention_prefill")?;
    launch
        .arg(&q.buf)
        .arg(&k_pool.buf)
        .arg(&v_pool.buf)
        .arg(&batch.sequences.buf)
        .arg(&n_sequences)
        .arg(&batch.block_tables.buf)
        .arg(&batch.tree_parents.buf)
        .value(&block_size)
        .arg(&n_heads)
        .arg(&n_kv_heads)
        .arg(&params.scale)
        .arg(&heads_per_block)
        .arg(&mut out.buf);
    // SAFETY: the caller's shape check sizes `q`, `out` and both pools against the batch, whose
    // arrays come from a validated layout; the kernel reads only keys below each row's end, which
    // lie inside its sequence's block table, and writes only rows of the batch.
    unsafe { launch.launch(config) }.map_err(driver(OP))?;
    Ok(())
}
