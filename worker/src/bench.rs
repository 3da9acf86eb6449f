//! Model throughput measurements in the manner of llama-bench: prefill, decode, and the latency
//! of single forward passes of the sizes a speculative verify step uses.

use std::time::{Duration, Instant};

use canopy_kernels::backend::ARGMAX_NONE;

use crate::engine::{CausalLm, EngineError, SequenceChunk};

/// What to measure.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BenchConfig {
    /// Prompt lengths to prefill from an empty cache ("pp" runs).
    pub prefill_sizes: Vec<usize>,
    /// Prompt tokens per prefill forward pass.
    pub prefill_chunk: usize,
    /// Tokens to decode one at a time ("tg" runs); 0 skips them.
    pub decode_tokens: usize,
    /// Context depths the decode runs and the forward passes start from (0 is an empty cache);
    /// the context is prefilled once per depth, untimed.
    pub depths: Vec<usize>,
    /// Batch sizes of single forward passes ("fwd" runs), at every depth: a speculative verify
    /// step is one such pass after the context.
    pub forward_sizes: Vec<usize>,
    /// Timed runs of each measurement; the median is reported.
    pub repetitions: usize,
    /// Untimed runs before the timed ones.
    pub warmup: usize,
}

impl Default for BenchConfig {
    fn default() -> Self {
        Self {
            prefill_sizes: vec![512],
            prefill_chunk: 512,
            decode_tokens: 128,
            depths: vec![0],
            forward_sizes: vec![1, 8, 16, 23, 32, 64],
            repetitions: 5,
            warmup: 1,
        }
    }
}

/// The kind of a measurement.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BenchKind {
    /// Prefill of a prompt from an empty cache.
    Prefill,
    /// Token-by-token decoding after a context of some depth.
    Decode,
    /// One forward pass of a batch of tokens after a context of some depth.
    Forward,
}

impl BenchKind {
    /// The llama-bench style prefix of the test name.
    pub fn prefix(self) -> &'static str {
        match self {
            Self::Prefill => "pp",
            Self::Decode => "tg",
            Self::Forward => "fwd",
        }
    }
}

/// One measurement.
#[derive(Clone, Debug, PartialEq)]
pub struct BenchResult {
    /// What was measured.
    pub kind: BenchKind,
    /// Tokens per run.
    pub tokens: usize,
    /// Context positions already in the cache when a run starts (decode runs only).
    pub depth: usize,
    /// Every timed run, in order.
    pub runs: Vec<Duration>,
}

impl BenchResult {
    /// The llama-bench style name: `pp512`, `tg128`, `tg128@d4096`, `fwd23`.
    pub fn name(&self) -> String {
        test_name(self.kind, self.tokens, self.depth)
    }

    /// The median run time.
    pub fn median(&self) -> Duration {
        let mut runs = self.runs.clone();
        runs.sort_unstable();
        match runs.len() {
            0 => Duration::ZERO,
            n if n % 2 == 1 => runs[n / 2],
            n => (runs[n / 2 - 1] + runs[n / 2]) / 2,
        }
    }

    /// Tokens per second at the median run time.
    pub fn tokens_per_second(&self) -> f64 {
        let seconds = self.median().as_secs_f64();
        if seconds > 0.0 { self.tokens as f64 / seconds } else { 0.0 }
    }
}

fn test_name(kind: BenchKind, tokens: usize, depth: usize) -> String {
    match depth {
        0 => format!("{}{tokens}", kind.prefix()),
        _ => format!("{}{tokens}@d{depth}", kind.prefix()),
    }
}

/// Measures `config` on sequence 0 of `model`'s cache. Sizes beyond the model's sequence limit
/// are skipped and named in the report.
pub fn run_bench<M: CausalLm>(model: &mut M, config: &BenchConfig) -> Result<BenchReport, EngineError> {
    if config.prefill_chunk == 0 {
        return Err(EngineError::ZeroPrefillChunk);
    }
    let max = model.max_sequence_len();
    let vocab_size = model.vocab_size();
    let longest_prompt = config
        .prefill_sizes
        .iter()
        .chain(&config.forward_sizes)
        .chain(&config.depths)
        .copied()
        .max()
        .unwrap_or(0);
    // Ids spread over the vocabulary, made once so that timed runs do not allocate.
    let prompt =
        (0..longest_prompt.min(max)).map(|i| (i.wrapping_mul(7919) % vocab_size.max(1)) as u32).collect();
    let mut bench = Bench {
        model,
        logits: vec![0.0; vocab_size],
        prompt,
        warmup: config.warmup,
        repetitions: config.repetitions,
    };
    let mut report = BenchReport::default();
    let prefills = config.prefill_sizes.iter().map(|&n| (BenchKind::Prefill, n, 0));
    // Each depth's decode run, then its forward passes: the context is prefilled for the first
    // of them and the rest overwrite only what follows it.
    let after_contexts = config.depths.iter().flat_map(|&depth| {
        let decode = (config.decode_tokens > 0).then_some((BenchKind::Decode, config.decode_tokens, depth));
        decode.into_iter().chain(config.forward_sizes.iter().map(move |&n| (BenchKind::Forward, n, depth)))
    });
    // The depth of the benchmark prompt the cache holds at least.
    let mut context = 0;
    for (kind, tokens, depth) in prefills.chain(after_contexts) {
        if tokens == 0 || depth + tokens > max {
            report.skipped.push(test_name(kind, tokens, depth));
            continue;
        }
        if kind != BenchKind::Prefill && depth != context {
            bench.prefill(depth, config.prefill_chunk)?;
            context = depth;
        }
        let runs = bench.measure(|bench| match kind {
            BenchKind::Prefill => bench.prefill(tokens, config.prefill_chunk),
            BenchKind::Decode => bench.decode(depth, tokens),
            BenchKind::Forward => bench.forward(depth, tokens),
        })?;
        report.results.push(BenchResult { kind, tokens, depth, runs });
    }
    Ok(report)
}

/// The measurements of one benchmark run.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct BenchReport {
    /// The measurements, in the order they ran.
    pub results: Vec<BenchResult>,
    /// The names of measurements left out because their size was 0 or beyond the model's
    /// sequence limit.
    pub skipped: Vec<String>,
}

impl BenchReport {
    /// How many times a one-token forward pass at the same depth a forward pass of several tokens
    /// costs (a verify batch's price in decode steps), when both were measured.
    pub fn cost_in_one_token_passes(&self, result: &BenchResult) -> Option<f64> {
        if result.kind != BenchKind::Forward || result.tokens < 2 {
            return None;
        }
        let one = self
            .results
            .iter()
            .find(|r| r.kind == BenchKind::Forward && r.tokens == 1 && r.depth == result.depth)?;
        let one = one.median().as_secs_f64();
        (one > 0.0).then(|| result.median().as_secs_f64() / one)
    }
}

struct Bench<'m, M> {
    model: &'m mut M,
    logits: Vec<f32>,
    prompt: Vec<u32>,
    warmup: usize,
    repetitions: usize,
}

impl<M: CausalLm> Bench<'_, M> {
    fn measure(
        &mut self,
        mut run: impl FnMut(&mut Self) -> Result<(), EngineError>,
    ) -> Result<Vec<Duration>, EngineError> {
        for _ in 0..self.warmup {
            run(self)?;
        }
        let mut runs = Vec::with_capacity(self.repetitions);
        for _ in 0..self.repetitions {
            let start = Instant::now();
            run(self)?;
            runs.push(start.elapsed());
        }
        Ok(runs)
    }

    /// The first `tokens` ids of the benchmark prompt, in chunks of `chunk`.
    fn prefill(&mut self, tokens: usize, chunk: usize) -> Result<(), EngineError> {
        for start in (0..tokens).step_by(chunk) {
            let end = (start + chunk).min(tokens);
            let batch = [SequenceChunk {
                sequence: 0,
                n_past: start,
                tokens: &self.prompt[start..end],
                want_logits: end == tokens,
            }];
            self.model.forward(&batch, &mut self.logits).map_err(|err| EngineError::Model(Box::new(err)))?;
        }
        Ok(())
    }

    /// One forward pass of `tokens` prompt ids at positions `depth..`, logits of the last.
    fn forward(&mut self, depth: usize, tokens: usize) -> Result<(), EngineError> {
        let batch =
            [SequenceChunk { sequence: 0, n_past: depth, tokens: &self.prompt[..tokens], want_logits: true }];
        self.model.forward(&batch, &mut self.logits).map_err(|err| EngineError::Model(Box::new(err)))
    }

    /// `tokens` single-token steps from position `depth`, each feeding back the argmax of the
    /// previous step, picked where the model keeps its logits as greedy serving does.
    fn decode(&mut self, depth: usize, tokens: usize) -> Result<(), EngineError> {
        let mut ids = [0];
        for position in depth..depth + tokens {
            let batch = [SequenceChunk { sequence: 0, n_past: position, tokens: &ids, want_logits: true }];
            let mut picked = [0];
            self.model
                .forward_argmax(&batch, &mut picked)
                .map_err(|err| EngineError::Model(Box::new(err)))?;
            // Random weights can produce logits with nothing finite; any token keeps the pace.
            ids = if picked[0] == ARGMAX_NONE { [0] } else { picked };
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::KvUsage;

    /// Records forward passes; its logits favour `last token + 1`.
    struct Recorder {
        max_len: usize,
        calls: Vec<(usize, Vec<u32>, bool)>,
    }

    #[derive(Debug, thiserror::Error)]
    #[error("never fails")]
    struct NeverFails;

    impl CausalLm for Recorder {
        type Error = NeverFails;
        fn vocab_size(&self) -> usize {
            100
        }
        fn max_sequence_len(&self) -> usize {
            self.max_len
        }
        fn forward(&mut self, batch: &[SequenceChunk<'_>], logits: &mut [f32]) -> Result<(), NeverFails> {
            let chunk = batch[0];
            self.calls.push((chunk.n_past, chunk.tokens.to_vec(), chunk.want_logits));
            let next = (*chunk.tokens.last().unwrap() as usize + 1) % 100;
            logits.iter_mut().enumerate().for_each(|(id, l)| *l = if id == next { 1.0 } else { 0.0 });
            Ok(())
        }
        fn release(&mut self, _sequence: usize) {}
        fn kv_usage(&self) -> KvUsage {
            KvUsage::default()
        }
    }

    #[test]
    fn forward_passes_are_priced_in_one_token_passes_at_their_own_depth() {
        let forward = |tokens, depth, ms| BenchResult {
            kind: BenchKind::Forward,
            tokens,
            depth,
            runs: vec![Duration::from_millis(ms)],
        };
        let report = BenchReport {
            results: vec![
                forward(1, 0, 2),
                forward(23, 0, 3),
                forward(1, 4096, 4),
                forward(23, 4096, 5),
                forward(8, 16384, 9),
            ],
            skipped: Vec::new(),
        };
        let cost = |i: usize| report.cost_in_one_token_passes(&report.results[i]);
        assert_eq!(cost(0), None);
        assert_eq!(cost(1), Some(1.5));
        assert_eq!(cost(3), Some(1.25));
        // No one-token pass at depth 16384.
        assert_eq!(cost(4), None);
        let decode = BenchResult { kind: BenchKind::Decode, ..forward(23, 0, 3) };
        assert_eq!(report.cost_in_one_token_passes(&decode), None);
    }

    #[test]
    fn every_measurement_runs_warmup_plus_repetitions() {
        let mut model = Recorder { max_len: 64, calls: Vec::new() };
        let config = BenchConfig {
            prefill_sizes: vec![10, 100],
            prefill_chunk: 4,
            decode_tokens: 3,
            depths: vec![0],
            forward_sizes: vec![2, 5],
            repetitions: 3,
            warmup: 1,
        };
        let report = run_bench(&mut model, &config).unwrap();
        let names: Vec<String> = report.results.iter().map(BenchResult::name).collect();
        assert_eq!(names, ["pp10", "tg3", "fwd2", "fwd5"]);
        assert_eq!(report.skipped, ["pp100"]);
        assert!(report.results.iter().all(|r| r.runs.len() == 3));
        // pp10 in chunks of 4: 3 passes; tg3: 3 passes; fwd: 1 pass each; 4 runs of each.
        assert_eq!(model.calls.len(), 4 * (3 + 3 + 1 + 1));
        let prefill: Vec<(usize, usize, bool)> =
            model.calls[..3].iter().map(|(n, t, w)| (*n, t.len(), *w)).collect();
        assert_eq!(prefill, [(0, 4, false), (4, 4, false), (8, 2, true)]);
        // Decoding feeds back the argmax: 0, then 1, then 2, at positions 0, 1, 2.
        let decode_start = 4 * 3;
        let decode: Vec<(usize, Vec<u32>)> =
            model.calls[decode_start..decode_start + 3].iter().map(|(n, t, _)| (*n, t.clone())).collect();
        assert_eq!(decode, [(0, vec![0]), (1, vec![1]), (2, vec![2])]);
    }

    #[test]
    fn each_depth_prefills_the_context_once_then_decodes_and_runs_forward_passes_after_it() {
        let mut model = Recorder { max_len: 20, calls: Vec::new() };
        let config = BenchConfig {
            prefill_sizes: vec![],
            prefill_chunk: 8,
            decode_tokens: 2,
            depths: vec![10, 17],
            forward_sizes: vec![3],
            repetitions: 2,
            warmup: 0,
        };
        let report = run_bench(&mut model, &config).unwrap();
        let names: Vec<String> = report.results.iter().map(BenchResult::name).collect();
        assert_eq!(names, ["tg2@d10", "fwd3@d10", "tg2@d17", "fwd3@d17"]);
        let calls: Vec<(usize, usize)> = model.calls.iter().map(|(n, t, _)| (*n, t.len())).collect();
        // Each context in chunks of 8, once; two runs of two steps; two passes of three tokens.
        let at = |depth: usize| {
            let context = (0..depth).step_by(8).map(|start| (start, (depth - start).min(8)));
            let steps = [(depth, 1), (depth + 1, 1)].repeat(2);
            context.chain(steps).chain([(depth, 3), (depth, 3)]).collect::<Vec<_>>()
        };
        assert_eq!(calls, [at(10), at(17)].concat());
        // The forward passes take the prompt's first ids (i * 7919 mod 100) and want logits.
        assert!(
            model
                .calls
                .iter()
                .filter(|(_, t, _)| t.len() == 3)
                .all(|(_, t, want)| t == &[0, 19, 38] && *want)
        );

        let mut model = Recorder { max_len: 20, calls: Vec::new() };
        let config = BenchConfig { depths: vec![19], ..config };
        let report = run_bench(&mut model, &config).unwrap();
        assert!(report.results.is_empty());
        assert_eq!(report.skipped, ["tg2@d19", "fwd3@d19"]);
        assert!(model.calls.is_empty());
    }

    #[test]
    fn the_median_and_rate_come_from_the_runs() {
        let millis = |ms: &[u64]| ms.iter().map(|&m| Duration::from_millis(m)).collect();
        let odd =
            BenchResult { kind: BenchKind::Prefill, tokens: 100, depth: 0, runs: millis(&[30, 10, 20]) };
        assert_eq!(odd.median(), Duration::from_millis(20));
        assert!((odd.tokens_per_second() - 5000.0).abs() < 1e-6);
        let even =
            BenchResult { kind: BenchKind::Decode, tokens: 8, depth: 0, runs: millis(&[40, 10, 20, 30]) };
        assert_eq!(even.median(), Duration::from_millis(25));
        assert_eq!(even.name(), "tg8");
        assert_eq!(BenchResult { depth: 4096, ..even }.name(), "tg8@d4096");
    }
}
