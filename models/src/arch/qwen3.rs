//! Qwen3 dense: pre-norm decoder layers with per-head RMSNorm of queries and keys before NEOX
//! RoPE, grouped-query attention over the paged KV cache, and a SwiGLU feed-forward network.
//!
//! [`Qwen3::forward`] runs a batch of sequences (prefill chunks, single decode tokens, draft
//! trees) in one pass. Every per-step buffer is allocated at load time for `max_batch_tokens`
//! rows and reused, so decoding allocates nothing on the device; the host-side inputs of a step
//! (tokens, logit rows, attention layout) live in buffers kept between steps, so a decode step
//! whose batch is no larger than an earlier one's allocates nothing on the host either.

use canopy_kernels::backend::{
    AttentionBatch, AttentionLayout, AttentionParams, AttentionProjections, AttentionTargets, Backend,
    DeviceArray, HeadParams, RopeParams, RopeStyle, SequenceSpec,
};

use super::load::{MetadataReader, invalid, matrix, vector};
use super::step_graphs::{StepGraphs, StepShape};
use super::{ArchError, ForwardOutput, LogitRows, SequenceInput};
use crate::gguf::GgufFile;
use crate::kv::{KvCache, KvConfig};

/// The `general.architecture` this module reads.
pub const ARCHITECTURE: &str = "qwen3";

/// Hyperparameters of a Qwen3 model, from its GGUF metadata and embedding table.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Qwen3Config {
    /// Decoder layers (`block_count`).
    pub n_layers: usize,
    /// Width of the residual stream (`embedding_length`).
    pub hidden: usize,
    /// Width of the feed-forward network (`feed_forward_length`).
    pub ffn: usize,
    /// Query heads (`attention.head_count`).
    pub n_heads: usize,
    /// Key/value heads (`attention.head_count_kv`).
    pub n_kv_heads: usize,
    /// Elements per head (`attention.key_length`, else `hidden / n_heads`).
    pub head_dim: usize,
    /// RoPE frequency base (`rope.freq_base`).
    pub rope_theta: f32,
    /// RMSNorm epsilon (`attention.layer_norm_rms_epsilon`).
    pub rms_eps: f32,
    /// Trained context length (`context_length`).
    pub context_length: usize,
    /// Rows of `token_embd.weight`.
    pub vocab_size: usize,
}

impl Qwen3Config {
    /// Reads and cross-checks the `qwen3.*` metadata; every error names the offending key.
    pub fn from_gguf(file: &GgufFile) -> Result<Self, ArchError> {
        let found = file.architecture()?;
        if found != ARCHITECTURE {
            return Err(ArchError::WrongArchitecture { expected: ARCHITECTURE, found: found.to_owned() });
        }
        let meta = MetadataReader { file, arch: ARCHITECTURE };
        let hidden = meta.positive("embedding_length")?;
        let n_heads = meta.positive("attention.head_count")?;
        let n_kv_heads = meta.positive("attention.head_count_kv")?;
        if !n_heads.is_multiple_of(n_kv_heads) {
            let detail = format!("{n_kv_heads} does not divide attention.head_count {n_heads}");
            return Err(invalid(&meta.key("attention.head_count_kv"), detail));
        }
        let head_dim = match meta.optional_positive("attention.key_length")? {
            Some(key_length) => key_length,
            None if hidden.is_multiple_of(n_heads) => hidden / n_heads,
            None => {
                let detail = format!("{n_heads} does not divide embedding_length {hidden}");
                return Err(invalid(&meta.key("attention.head_count"), detail));
            }
        };
        if !head_dim.is_multiple_of(2) || head_dim > RopeParams::MAX_ROTARY_DIM {
            let detail =
                format!("head dimension {head_dim} must be even and at most {}", RopeParams::MAX_ROTARY_DIM);
            return Err(invalid(&meta.key("attention.key_length"), detail));
        }
        if let Some(value_length) = meta.optional_positive("attention.value_length")?
            && value_length != head_dim
        {
            let detail = format!("{value_length} differs from the key length {head_dim}");
            return Err(invalid(&meta.key("attention.value_length"), detail));
        }
        if n_heads.checked_mul(head_dim).is_none() {
            return Err(invalid(&meta.key("attention.head_count"), "heads * head_dim overflows".to_owned()));
        }
        let embedding = file
            .tensor(TOKEN_EMBD)
            .ok_or_else(|| ArchError::MissingTensor { name: TOKEN_EMBD.to_owned() })?;
        let vocab_size = match embedding.dims[..] {
            [width, vocab] if width == hidden as u64 => usize::try_from(vocab).ok(),
            _ => None,
        }
        .ok_or_else(|| ArchError::TensorShape {
            name: TOKEN_EMBD.to_owned(),
            expected: vec![hidden as u64, 0],
            found: embedding.dims.clone(),
        })?;
        Ok(Self {
            n_layers: meta.positive("block_count")?,
            hidden,
            ffn: meta.positive("feed_forward_length")?,
            n_heads,
            n_kv_heads,
            head_dim,
            rope_theta: meta.positive_f32("rope.freq_base")?,
            rms_eps: meta.positive_f32("attention.layer_norm_rms_epsilon")?,
            context_length: meta.positive("context_length")?,
            vocab_size,
        })
    }

    /// The shape of a KV cache for this model.
    pub fn kv_config(&self, block_size: usize, n_blocks: usize) -> KvConfig {
        KvConfig {
            n_layers: self.n_layers,
            n_kv_heads: self.n_kv_heads,
            head_dim: self.head_dim,
            block_size,
            n_blocks,
        }
    }

    fn attention_params(&self) -> AttentionParams {
        AttentionParams {
            n_heads: self.n_heads,
            n_kv_heads: self.n_kv_heads,
            head_dim: self.head_dim,
            scale: 1.0 / (self.head_dim as f32).sqrt(),
        }
    }

    fn rope_params(&self, n_heads: usize) -> RopeParams {
        RopeParams {
            n_heads,
            head_dim: self.head_dim,
            rotary_dim: self.head_dim,
            theta: self.rope_theta,
            style: RopeStyle::Neox,
        }
    }
}

const TOKEN_EMBD: &str = "token_embd.weight";

/// Sizes of the per-step buffers and which hidden states a forward pass can capture.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Qwen3Options {
    /// The most new tokens one forward pass takes, over all its sequences.
    pub max_batch_tokens: usize,
    /// The most rows of logits one forward pass returns (at most `max_batch_tokens`).
    pub max_logit_rows: usize,
    /// Layers (0-based) whose output, the residual stream after the layer and before the final
    /// norm, a forward pass captures when asked (the DFlash drafter's features).
    pub capture_layers: Vec<usize>,
}

struct Layer<B: Backend> {
    attn_norm: B::Tensor,
    attn_q: B::Weight,
    attn_k: B::Weight,
    attn_v: B::Weight,
    attn_output: B::Weight,
    attn_q_norm: B::Tensor,
    attn_k_norm: B::Tensor,
    ffn_norm: B::Tensor,
    ffn_gate: B::Weight,
    ffn_up: B::Weight,
    ffn_down: B::Weight,
}

impl<B: Backend> Layer<B> {
    fn load(backend: &B, file: &GgufFile, config: &Qwen3Config, index: usize) -> Result<Self, ArchError> {
        let name = |part: &str| format!("blk.{index}.{part}.weight");
        let (d, q_width, kv_width) =
            (config.hidden, config.n_heads * config.head_dim, config.n_kv_heads * config.head_dim);
        Ok(Self {
            attn_norm: vector(backend, file, &name("attn_norm"), d)?,
            attn_q: matrix(backend, file, &name("attn_q"), q_width, d)?,
            attn_k: matrix(backend, file, &name("attn_k"), kv_width, d)?,
            attn_v: matrix(backend, file, &name("attn_v"), kv_width, d)?,
            attn_output: matrix(backend, file, &name("attn_output"), d, q_width)?,
            attn_q_norm: vector(backend, file, &name("attn_q_norm"), config.head_dim)?,
            attn_k_norm: vector(backend, file, &name("attn_k_norm"), config.head_dim)?,
            ffn_norm: vector(backend, file, &name("ffn_norm"), d)?,
            ffn_gate: matrix(backend, file, &name("ffn_gate"), config.ffn, d)?,
            ffn_up: matrix(backend, file, &name("ffn_up"), config.ffn, d)?,
            ffn_down: matrix(backend, file, &name("ffn_down"), d, config.ffn)?,
        })
    }
}

/// Per-step device buffers, sized for the largest batch.
struct Scratch<B: Backend> {
    token_ids: B::Index,
    positions: B::Index,
    kv_slots: B::Index,
    logit_rows: B::Index,
    all_rows: B::Index,
    residual: B::Tensor,
    normed: B::Tensor,
    q_raw: B::Tensor,
    k_raw: B::Tensor,
    q: B::Tensor,
    k: B::Tensor,
    v: B::Tensor,
    attn: B::Tensor,
    delta: B::Tensor,
    gate: B::Tensor,
    up: B::Tensor,
    act: B::Tensor,
    picked: B::Tensor,
    logits: B::Tensor,
    captured: Vec<B::Tensor>,
    batch: AttentionBatch<B>,
    batch_sequences: usize,
    batch_table_entries: usize,
}

impl<B: Backend> Scratch<B> {
    fn new(backend: &B, config: &Qwen3Config, options: &Qwen3Options) -> Result<Self, ArchError> {
        let rows = options.max_batch_tokens;
        let tensor = |width: usize, rows: usize| -> Result<B::Tensor, ArchError> {
            let len = rows
                .checked_mul(width)
                .ok_or_else(|| ArchError::Batch(format!("{rows} rows of {width} elements overflow usize")))?;
            Ok(backend.zeros(len)?)
        };
        let index = || backend.upload_index(&vec![0; rows]);
        let all_rows: Vec<u32> = (0..rows as u32).collect();
        let (q_width, kv_width) = (config.n_heads * config.head_dim, config.n_kv_heads * config.head_dim);
        Ok(Self {
            token_ids: index()?,
            positions: index()?,
            kv_slots: index()?,
            logit_rows: index()?,
            all_rows: backend.upload_index(&all_rows)?,
            residual: tensor(config.hidden, rows)?,
            normed: tensor(config.hidden, rows)?,
            q_raw: tensor(q_width, rows)?,
            k_raw: tensor(kv_width, rows)?,
            q: tensor(q_width, rows)?,
            k: tensor(kv_width, rows)?,
            v: tensor(kv_width, rows)?,
            attn: tensor(q_width, rows)?,
            delta: tensor(config.hidden, rows)?,
            gate: tensor(config.ffn, rows)?,
            up: tensor(config.ffn, rows)?,
            act: tensor(config.ffn, rows)?,
            picked: tensor(config.hidden, options.max_logit_rows)?,
            logits: tensor(config.vocab_size, options.max_logit_rows)?,
            captured: options
                .capture_layers
                .iter()
                .map(|_| tensor(config.hidden, rows))
                .collect::<Result<_, _>>()?,
            batch: AttentionBatch::with_capacity(backend, 1, rows, 1)?,
            batch_sequences: 1,
            batch_table_entries: 1,
        })
    }

    /// Rewrites the attention batch in place, growing its buffers only when `layout` exceeds
    /// them; says whether they grew (and so moved).
    fn set_batch(
        &mut self,
        backend: &B,
        layout: &AttentionLayout,
        table_entries: usize,
    ) -> Result<bool, ArchError> {
        let grow = layout.n_sequences() > self.batch_sequences || table_entries > self.batch_table_entries;
        if grow {
            self.batch_sequences = self.batch_sequences.max(layout.n_sequences().next_power_of_two());
            self.batch_table_entries = self.batch_table_entries.max(table_entries.next_power_of_two());
            let rows = self.token_ids.len();
            self.batch =
                AttentionBatch::with_capacity(backend, self.batch_sequences, rows, self.batch_table_entries)?;
        }
        self.batch.update(backend, layout)?;
        Ok(grow)
    }
}

/// The host-side inputs of a step, kept between steps for their buffers.
#[derive(Default)]
struct HostInputs {
    /// Every sequence's new tokens, in batch order.
    tokens: Vec<u32>,
    /// The rows that get logits, when [`LogitPlan::Picked`].
    picked_rows: Vec<u32>,
    /// Each sequence's length before the step.
    n_pasts: Vec<usize>,
    /// Where the step's keys and values go and what each new token sees.
    layout: AttentionLayout,
}

/// A loaded Qwen3 model with its per-step buffers.
pub struct Qwen3<B: Backend> {
    config: Qwen3Config,
    options: Qwen3Options,
    token_embd: B::Weight,
    /// `None` when the LM head is tied to the embedding table.
    output: Option<B::Weight>,
    output_norm: B::Tensor,
    layers: Vec<Layer<B>>,
    scratch: Scratch<B>,
    host: HostInputs,
    graphs: StepGraphs<B>,
}

impl<B: Backend> Qwen3<B> {
    /// Reads the configuration and uploads every weight, checking each tensor's shape.
    pub fn load(backend: &B, file: &GgufFile, options: Qwen3Options) -> Result<Self, ArchError> {
        let config = Qwen3Config::from_gguf(file)?;
        if options.max_batch_tokens == 0 || options.max_logit_rows > options.max_batch_tokens {
            let detail =
                format!("max_batch_tokens must be positive and at least max_logit_rows: {options:?}");
            return Err(ArchError::Batch(detail));
        }
        if let Some(&layer) = options.capture_layers.iter().find(|&&l| l >= config.n_layers) {
            return Err(ArchError::Batch(format!(
                "capture layer {layer} of a {}-layer model",
                config.n_layers
            )));
        }
        let output = match file.tensor("output.weight") {
            Some(_) => Some(matrix(backend, file, "output.weight", config.vocab_size, config.hidden)?),
            None => None,
        };
        Ok(Self {
            token_embd: matrix(backend, file, TOKEN_EMBD, config.vocab_size, config.hidden)?,
            output,
            output_norm: vector(backend, file, "output_norm.weight", config.hidden)?,
            layers: (0..config.n_layers)
                .map(|i| Layer::load(backend, file, &config, i))
                .collect::<Result<_, _>>()?,
            scratch: Scratch::new(backend, &config, &options)?,
            host: HostInputs::default(),
            graphs: StepGraphs::new(),
            config,
            options,
        })
    }

    /// The model's hyperparameters.
    pub fn config(&self) -> &Qwen3Config {
        &self.config
    }

    /// The buffer sizes and capture layers the model was loaded with.
    pub fn options(&self) -> &Qwen3Options {
        &self.options
    }

    /// Logits of the last forward pass: `[n_logit_rows, vocab_size]` leading elements.
    pub fn logits(&self) -> &B::Tensor {
        &self.scratch.logits
    }

    /// Hidden states captured by the last forward pass for `options().capture_layers[i]`:
    /// `[n_rows, hidden]` leading elements, one row per new token in batch order.
    pub fn captured(&self, i: usize) -> Option<&B::Tensor> {
        self.scratch.captured.get(i)
    }

    /// Copies the logits of the last forward pass to the host.
    pub fn download_logits(&self, backend: &B, output: &ForwardOutput) -> Result<Vec<f32>, ArchError> {
        let mut host = vec![0.0; output.n_logit_rows * self.config.vocab_size];
        backend.download(&self.scratch.logits, &mut host)?;
        Ok(host)
    }

    /// Runs one batched forward pass: appends each sequence's new tokens to `cache` (their keys
    /// and values at the slots the attention layout gives), computes the logits of `logit_rows`
    /// into [`Self::logits`], and, when `capture` is set, the hidden states of the capture layers
    /// into [`Self::captured`]. On any error the cache's sequences keep their previous lengths.
    pub fn forward(
        &mut self,
        backend: &B,
        cache: &mut KvCache<B>,
        batch: &[SequenceInput<'_>],
        logit_rows: LogitRows<'_>,
        capture: bool,
    ) -> Result<ForwardOutput, ArchError> {
        let logits = self.check_batch(cache, batch, logit_rows)?;
        self.host.n_pasts.clear();
        for input in batch {
            match cache.append(input.seq, input.tokens.len()) {
                Ok(n_past) => self.host.n_pasts.push(n_past),
                Err(err) => {
                    rollback(cache, batch, &self.host.n_pasts);
                    return Err(err.into());
                }
            }
        }
        let result = self.run(backend, cache, batch, logits, capture);
        if result.is_err() {
            rollback(cache, batch, &self.host.n_pasts);
        }
        result
    }

    /// Validates the batch on the host and flattens it into [`Self::host`]'s tokens and picked
    /// rows.
    fn check_batch(
        &mut self,
        cache: &KvCache<B>,
        batch: &[SequenceInput<'_>],
        logit_rows: LogitRows<'_>,
    ) -> Result<LogitPlan, ArchError> {
        let kv = cache.config();
        let expected = self.config.kv_config(kv.block_size, kv.n_blocks);
        if *kv != expected {
            return Err(ArchError::Batch(format!("the KV cache {kv:?} does not fit the model {expected:?}")));
        }
        let HostInputs { tokens, picked_rows, .. } = &mut self.host;
        tokens.clear();
        tokens.extend(batch.iter().flat_map(|input| input.tokens.iter().copied()));
        if tokens.is_empty() || tokens.len() > self.options.max_batch_tokens {
            let detail = format!("{} tokens, 1 to {} allowed", tokens.len(), self.options.max_batch_tokens);
            return Err(ArchError::Batch(detail));
        }
        if let Some(&token) = tokens.iter().find(|&&t| t as usize >= self.config.vocab_size) {
            return Err(ArchError::Batch(format!(
                "token {token} is beyond the vocabulary of {}",
                self.config.vocab_size
            )));
        }
        for (i, input) in batch.iter().enumerate() {
            if input.tokens.is_empty() {
                return Err(ArchError::Batch(format!("sequence {i} has no new tokens")));
            }
            if batch[..i].iter().any(|other| other.seq == input.seq) {
                return Err(ArchError::Batch(format!("sequence {:?} appears twice", input.seq)));
            }
        }
        picked_rows.clear();
        let logits = match logit_rows {
            LogitRows::All => LogitPlan::Every,
            LogitRows::None => LogitPlan::Picked(0),
            LogitRows::LastPerSequence => {
                picked_rows.extend(batch.iter().scan(0u32, |end, input| {
                    *end += input.tokens.len() as u32;
                    Some(*end - 1)
                }));
                LogitPlan::Picked(picked_rows.len())
            }
            LogitRows::Rows(rows) => {
                if let Some(&row) = rows.iter().find(|&&r| r as usize >= tokens.len()) {
                    return Err(ArchError::Batch(format!("logit row {row} of a {}-row batch", tokens.len())));
                }
                picked_rows.extend_from_slice(rows);
                LogitPlan::Picked(rows.len())
            }
        };
        let n_logit_rows = match logits {
            LogitPlan::Every => tokens.len(),
            LogitPlan::Picked(rows) => rows,
        };
        if n_logit_rows > self.options.max_logit_rows {
            let detail = format!("{n_logit_rows} logit rows, at most {}", self.options.max_logit_rows);
            return Err(ArchError::Batch(detail));
        }
        Ok(logits)
    }

    /// Runs the step whose inputs [`Self::forward`] left in [`Self::host`].
    fn run(
        &mut self,
        backend: &B,
        cache: &mut KvCache<B>,
        batch: &[SequenceInput<'_>],
        logits: LogitPlan,
        capture: bool,
    ) -> Result<ForwardOutput, ArchError> {
        let HostInputs { tokens, picked_rows, n_pasts, layout } = &mut self.host;
        layout.clear(cache.config().block_size)?;
        let mut table_entries = 0;
        for (input, &n_past) in batch.iter().zip(n_pasts.iter()) {
            let n_new = input.tokens.len();
            table_entries += cache.config().blocks_for(n_past + n_new);
            let block_table = cache.block_table(input.seq)?;
            layout.push(&SequenceSpec { n_past, n_new, block_table, mask: input.mask })?;
        }

        let n = tokens.len();
        let s = &mut self.scratch;
        if s.set_batch(backend, layout, table_entries)? {
            self.graphs.invalidate();
        }
        backend.write_index(&mut s.token_ids, tokens)?;
        backend.write_index(&mut s.positions, layout.positions())?;
        backend.write_index(&mut s.kv_slots, layout.slots())?;
        if let LogitPlan::Picked(_) = logits {
            backend.write_index(&mut s.logit_rows, picked_rows)?;
        }
        let shape = StepShape {
            tokens: n,
            sequences: batch.len(),
            logit_rows: match logits {
                LogitPlan::Every => None,
                LogitPlan::Picked(rows) => Some(rows),
            },
            capture,
            cache: cache.instance(),
            context_class: backend.attention_context_class(layout.max_kv_len()),
        };
        let weights = Weights {
            config: &self.config,
            capture_layers: &self.options.capture_layers,
            token_embd: &self.token_embd,
            output: self.output.as_ref(),
            output_norm: &self.output_norm,
            layers: &self.layers,
        };
        self.graphs.run(backend, shape, || weights.submit(backend, s, cache, n, logits, capture))?;
        let n_logit_rows = match logits {
            LogitPlan::Every => n,
            LogitPlan::Picked(rows) => rows,
        };
        Ok(ForwardOutput { n_rows: n, n_logit_rows })
    }
}

/// Which rows of a step get logits.
#[derive(Clone, Copy)]
enum LogitPlan {
    /// Every row, in batch order.
    Every,
    /// The first `.0` entries of the scratch's `logit_rows`.
    Picked(usize),
}

/// The weights a forward pass reads, borrowed apart from the scratch buffers it writes.
struct Weights<'a, B: Backend> {
    config: &'a Qwen3Config,
    capture_layers: &'a [usize],
    token_embd: &'a B::Weight,
    output: Option<&'a B::Weight>,
    output_norm: &'a B::Tensor,
    layers: &'a [Layer<B>],
}

impl<B: Backend> Weights<'_, B> {
    /// Submits every op of a step whose inputs are already in `s`. Only device ops: the step
    /// may be recorded and replayed.
    fn submit(
        &self,
        backend: &B,
        s: &mut Scratch<B>,
        cache: &mut KvCache<B>,
        n: usize,
        logits: LogitPlan,
        capture: bool,
    ) -> Result<(), ArchError> {
        let config = self.config;
        let attention = config.attention_params();
        let (q_rope, k_rope) = (config.rope_params(config.n_heads), config.rope_params(config.n_kv_heads));
        let eps = config.rms_eps;
        backend.embed(self.token_embd, &s.token_ids, n, &mut s.residual)?;
        // Whether `delta` holds the last FFN output, not yet added to the residual: the next
        // layer adds it in its first norm (one kernel instead of two).
        let mut delta_pending = false;
        for (index, layer) in self.layers.iter().enumerate() {
            if delta_pending {
                backend.add_rms_norm(&mut s.residual, &s.delta, &layer.attn_norm, n, eps, &mut s.normed)?;
            } else {
                backend.rms_norm(&s.residual, &layer.attn_norm, n, eps, &mut s.normed)?;
            }
            let (k_pool, v_pool) = cache
                .pools_mut(index)
                .ok_or_else(|| ArchError::Batch(format!("the KV cache has no layer {index}")))?;
            let projections = AttentionProjections {
                x: &s.normed,
                q: (&layer.attn_q, &mut s.q_raw),
                k: (&layer.attn_k, &mut s.k_raw),
                v: (&layer.attn_v, &mut s.v),
            };
            let heads = HeadParams {
                q_norm: &layer.attn_q_norm,
                k_norm: &layer.attn_k_norm,
                eps,
                positions: &s.positions,
                slots: &s.kv_slots,
                n_rows: n,
                q_rope,
                k_rope,
            };
            let targets = AttentionTargets { q: &mut s.q, k: &mut s.k, k_pool, v_pool };
            backend.project_attention_inputs(projections, &heads, targets)?;
            backend.attention(&s.q, k_pool, v_pool, &s.batch, &attention, &mut s.attn)?;
            backend.matmul(&s.attn, &layer.attn_output, n, &mut s.delta)?;
            backend.add_rms_norm(&mut s.residual, &s.delta, &layer.ffn_norm, n, eps, &mut s.normed)?;
            backend.swiglu_matmuls(
                &s.normed,
                n,
                (&layer.ffn_gate, &mut s.gate),
                (&layer.ffn_up, &mut s.up),
                &mut s.act,
            )?;
            backend.matmul(&s.act, &layer.ffn_down, n, &mut s.delta)?;
            delta_pending = true;
            if capture && self.capture_layers.contains(&index) {
                backend.add(&mut s.residual, &s.delta, n * config.hidden)?;
                delta_pending = false;
                // Gathering every row is a plain copy: the backend has no separate copy op.
                for (&layer, captured) in self.capture_layers.iter().zip(&mut s.captured) {
                    if layer == index {
                        backend.gather_rows(&s.residual, &s.all_rows, n, config.hidden, captured)?;
                    }
                }
            }
        }

        let lm_head = self.output.unwrap_or(self.token_embd);
        match logits {
            // Nothing reads the final residual.
            LogitPlan::Picked(0) => {}
            LogitPlan::Every => {
                if delta_pending {
                    backend.add_rms_norm(
                        &mut s.residual,
                        &s.delta,
                        self.output_norm,
                        n,
                        eps,
                        &mut s.normed,
                    )?;
                } else {
                    backend.rms_norm(&s.residual, self.output_norm, n, eps, &mut s.normed)?;
                }
                backend.matmul(&s.normed, lm_head, n, &mut s.logits)?;
            }
            LogitPlan::Picked(rows) => {
                if delta_pending {
                    backend.add(&mut s.residual, &s.delta, n * config.hidden)?;
                }
                backend.gather_rows(&s.residual, &s.logit_rows, rows, config.hidden, &mut s.picked)?;
                backend.rms_norm(&s.picked, self.output_norm, rows, eps, &mut s.normed)?;
                backend.matmul(&s.normed, lm_head, rows, &mut s.logits)?;
            }
        }
        Ok(())
    }
}

/// Returns the sequences of `batch` that were already extended back to their lengths before.
fn rollback<B: Backend>(cache: &mut KvCache<B>, batch: &[SequenceInput<'_>], n_pasts: &[usize]) {
    for (input, &n_past) in batch.iter().zip(n_pasts) {
        // The sequence was just extended from `n_past`, so truncating back cannot fail.
        let _ = cache.truncate(input.seq, n_past);
    }
}
