//! The scheduler stepped by hand on the tiny Qwen3, so every interleaving is deterministic.

use std::ops::ControlFlow;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use canopy_kernels::backend::cpu::CpuBackend;
use canopy_models::tokenizer::Tokenizer;
use tokio::sync::mpsc::UnboundedReceiver;

use super::*;
use crate::engine::{
    CausalLm, FinishReason, GenerateRequest, KvUsage, Qwen3Lm, SequenceChunk, StopConditions, generate,
};
use crate::sampling::SamplingParams;
use crate::test_model::{tiny_model, tiny_tokenizer};

type TinyScheduler<'t> = Scheduler<'t, Qwen3Lm<CpuBackend>>;

fn config(max_running: usize, max_queued: usize, prefill_chunk: usize) -> SchedulerConfig {
    SchedulerConfig { max_running, max_queued, prefill_chunk }
}

fn scheduler(tokenizer: &Tokenizer, config: SchedulerConfig) -> TinyScheduler<'_> {
    Scheduler::new(tiny_model(config.max_running, config.max_batch_tokens()), tokenizer, config).unwrap()
}

/// A greedy request for `max_tokens` tokens that ignores end-of-generation tokens.
fn greedy(tokenizer: &Tokenizer, prompt: &str, max_tokens: usize) -> GenerateRequest {
    GenerateRequest {
        prompt: tokenizer.encode(prompt, true).unwrap(),
        sampling: SamplingParams::greedy(),
        stop: StopConditions { ignore_eos: true, ..StopConditions::max_tokens(max_tokens) },
        top_logprobs: None,
    }
}

fn submit(
    scheduler: &mut TinyScheduler<'_>,
    request: GenerateRequest,
    priority: i32,
) -> UnboundedReceiver<JobEvent> {
    let (mut job, events) = Job::new(request);
    job.priority = priority;
    scheduler.submit(job);
    events
}

fn drain_events(events: &mut UnboundedReceiver<JobEvent>) -> Vec<JobEvent> {
    std::iter::from_fn(|| events.try_recv().ok()).collect()
}

fn run_until_idle(scheduler: &mut TinyScheduler<'_>) {
    while !scheduler.is_idle() {
        scheduler.step();
    }
}

/// The generated token ids and the finish of a job's events.
fn outcome(events: &[JobEvent]) -> (Vec<u32>, String, Option<FinishSummary>) {
    let mut tokens = Vec::new();
    let mut text = String::new();
    let mut finish = None;
    for event in events {
        match event {
            JobEvent::Token(token) => {
                tokens.push(token.id);
                text.push_str(&token.text);
            }
            JobEvent::Finished(summary) => {
                text.push_str(&summary.text);
                finish = Some(summary.clone());
            }
            _ => {}
        }
    }
    (tokens, text, finish)
}

const PROMPTS: [&str; 4] = [
    "def quicksort(arr):",
    "The quick brown fox jumps over the lazy dog, and then",
    "1, 2, 3,",
    "Once upon a time in a land far away there lived a programmer who",
];

#[test]
fn greedy_output_is_the_same_batched_as_alone() {
    let tokenizer = tiny_tokenizer();
    let requests: Vec<GenerateRequest> =
        PROMPTS.iter().enumerate().map(|(i, prompt)| greedy(&tokenizer, prompt, 20 + 3 * i)).collect();
    let alone: Vec<(Vec<u32>, String)> = requests
        .iter()
        .map(|request| {
            let mut model = tiny_model(1, 64);
            let generation =
                generate(&mut model, &tokenizer, request, 64, |_| ControlFlow::Continue(())).unwrap();
            (generation.tokens, generation.text)
        })
        .collect();

    // Three slots for four jobs, and a prefill budget smaller than the prompts: prefill chunks
    // share steps with decoding sequences, and the fourth job joins when the first leaves.
    let mut scheduler = scheduler(&tokenizer, config(3, 8, 5));
    let mut receivers: Vec<_> =
        requests.iter().map(|request| submit(&mut scheduler, request.clone(), 0)).collect();
    run_until_idle(&mut scheduler);
    for (index, (receiver, (tokens, text))) in receivers.iter_mut().zip(&alone).enumerate() {
        let (batched_tokens, batched_text, finish) = outcome(&drain_events(receiver));
        assert_eq!(&batched_tokens, tokens, "request {index}");
        assert_eq!(&batched_text, text, "request {index}");
        assert_eq!(finish.unwrap().reason, FinishReason::Length);
    }
    let load = scheduler.load();
    assert_eq!((load.requests_started, load.requests_finished, load.running, load.queued), (4, 4, 0, 0));
    assert_eq!(load.tokens_generated, alone.iter().map(|(tokens, _)| tokens.len() as u64).sum::<u64>());
    assert_eq!(load.kv_blocks_used, 0, "finished sequences give their KV blocks back");
}

/// Steps whose sequences are all greedy without log-probabilities take the argmax where the
/// logits are; a sequence that wants log-probabilities puts its steps on the logits path. Both
/// kinds of step, and a mix of both kinds of sequence in one step, give the tokens of a lone run.
#[test]
fn argmax_steps_and_logits_steps_give_the_same_tokens() {
    let tokenizer = tiny_tokenizer();
    let mut requests: Vec<GenerateRequest> =
        PROMPTS.iter().map(|prompt| greedy(&tokenizer, prompt, 12)).collect();
    // Ends first, so the steps after it pick by argmax alone.
    requests[1].top_logprobs = Some(2);
    requests[1].stop.max_tokens = 4;
    let alone: Vec<Vec<u32>> = requests
        .iter()
        .map(|request| {
            let mut model = tiny_model(1, 64);
            generate(&mut model, &tokenizer, request, 64, |_| ControlFlow::Continue(())).unwrap().tokens
        })
        .collect();
    let mut scheduler = scheduler(&tokenizer, config(4, 8, 64));
    let mut receivers: Vec<_> =
        requests.iter().map(|request| submit(&mut scheduler, request.clone(), 0)).collect();
    run_until_idle(&mut scheduler);
    for (index, (receiver, tokens)) in receivers.iter_mut().zip(&alone).enumerate() {
        let events = drain_events(receiver);
        let with_logprobs =
            events.iter().filter(|e| matches!(e, JobEvent::Token(t) if t.logprobs.is_some())).count();
        assert_eq!(with_logprobs, if index == 1 { 4 } else { 0 }, "request {index}");
        assert_eq!(&outcome(&events).0, tokens, "request {index}");
    }
}

#[test]
fn waiting_jobs_run_by_priority_then_arrival_and_hear_their_positions() {
    let tokenizer = tiny_tokenizer();
    let mut scheduler = scheduler(&tokenizer, config(1, 8, 64));
    let mut first = submit(&mut scheduler, greedy(&tokenizer, PROMPTS[0], 3), 0);
    scheduler.step();
    assert!(matches!(drain_events(&mut first)[0], JobEvent::Started { .. }), "a free slot starts at once");

    let mut low_a = submit(&mut scheduler, greedy(&tokenizer, PROMPTS[1], 2), 0);
    let mut low_b = submit(&mut scheduler, greedy(&tokenizer, PROMPTS[2], 2), 0);
    let mut high = submit(&mut scheduler, greedy(&tokenizer, PROMPTS[3], 2), 5);
    scheduler.step();
    assert_eq!(drain_events(&mut high), [JobEvent::Queued { position: 0 }]);
    assert_eq!(drain_events(&mut low_a), [JobEvent::Queued { position: 1 }]);
    assert_eq!(drain_events(&mut low_b), [JobEvent::Queued { position: 2 }]);

    // The running job ends; the high-priority job starts and the others move up.
    let mut started = Vec::new();
    while !scheduler.is_idle() {
        scheduler.step();
        for (name, receiver) in [("high", &mut high), ("low_a", &mut low_a), ("low_b", &mut low_b)] {
            for event in drain_events(receiver) {
                match event {
                    JobEvent::Started { .. } => started.push(name.to_owned()),
                    JobEvent::Queued { position } => started.push(format!("{name} at {position}")),
                    _ => {}
                }
            }
        }
    }
    assert_eq!(started, ["high", "low_a at 0", "low_b at 1", "low_a", "low_b at 0", "low_b"]);
}

#[test]
fn a_full_queue_rejects_at_once() {
    let tokenizer = tiny_tokenizer();
    let mut scheduler = scheduler(&tokenizer, config(1, 2, 64));
    // One job can start in the free slot and two may wait; the fourth does not fit.
    let mut receivers: Vec<_> =
        (0..4).map(|_| submit(&mut scheduler, greedy(&tokenizer, PROMPTS[0], 2), 0)).collect();
    assert_eq!(drain_events(&mut receivers[3]), [JobEvent::Rejected(Rejection::QueueFull { max_queued: 2 })]);
    assert!(receivers[..3].iter_mut().all(|receiver| drain_events(receiver).is_empty()));
    run_until_idle(&mut scheduler);
    for receiver in &mut receivers[..3] {
        assert!(outcome(&drain_events(receiver)).2.is_some());
    }
}

#[test]
fn dropping_the_receiver_cancels_and_frees_the_slot() {
    let tokenizer = tiny_tokenizer();
    let mut scheduler = scheduler(&tokenizer, config(1, 8, 64));
    let long = submit(&mut scheduler, greedy(&tokenizer, PROMPTS[1], 200), 0);
    scheduler.step();
    scheduler.step();
    assert!(scheduler.load().kv_blocks_used > 0);
    let mut waiting = submit(&mut scheduler, greedy(&tokenizer, PROMPTS[0], 2), 0);
    let queued_then_dropped = submit(&mut scheduler, greedy(&tokenizer, PROMPTS[2], 2), 0);
    scheduler.step();
    assert_eq!(drain_events(&mut waiting), [JobEvent::Queued { position: 0 }]);

    drop(long);
    drop(queued_then_dropped);
    scheduler.step();
    let load = scheduler.load();
    assert_eq!((load.requests_cancelled, load.requests_finished, load.queued), (2, 1, 0));
    assert!(matches!(drain_events(&mut waiting)[0], JobEvent::Started { .. }), "the freed slot is reused");
    run_until_idle(&mut scheduler);
    assert_eq!(scheduler.load().kv_blocks_used, 0);
}

#[test]
fn deadlines_reject_waiting_jobs_and_finish_running_ones() {
    let tokenizer = tiny_tokenizer();
    let mut scheduler = scheduler(&tokenizer, config(1, 8, 64));
    let (mut job, mut running) = Job::new(greedy(&tokenizer, PROMPTS[1], 10_000));
    let deadline = Instant::now() + Duration::from_millis(30);
    job.deadline = Some(deadline);
    scheduler.submit(job);
    let (mut expired, mut waiting) = Job::new(greedy(&tokenizer, PROMPTS[0], 2));
    expired.deadline = Some(Instant::now());
    scheduler.submit(expired);
    scheduler.step();
    assert_eq!(drain_events(&mut waiting), [JobEvent::Rejected(Rejection::DeadlineExceeded)]);

    // The deadline itself is what the test waits for.
    std::thread::sleep(deadline.saturating_duration_since(Instant::now()));
    scheduler.step();
    let (tokens, _, finish) = outcome(&drain_events(&mut running));
    let finish = finish.unwrap();
    assert_eq!(finish.reason, FinishReason::Deadline);
    assert_eq!(finish.completion_tokens, tokens.len());
    assert!(scheduler.is_idle());
}

#[test]
fn the_token_limit_and_stop_strings_end_jobs() {
    let tokenizer = tiny_tokenizer();
    let mut scheduler = scheduler(&tokenizer, config(2, 8, 64));
    let mut limited = submit(&mut scheduler, greedy(&tokenizer, PROMPTS[0], 5), 0);
    run_until_idle(&mut scheduler);
    let (tokens, text, finish) = outcome(&drain_events(&mut limited));
    let finish = finish.unwrap();
    assert_eq!((tokens.len(), finish.reason, finish.completion_tokens), (5, FinishReason::Length, 5));
    assert_eq!(finish.prompt_tokens, tokenizer.encode(PROMPTS[0], true).unwrap().len());

    // A stop string out of the text the model produces ends the generation before it.
    let stop: String = text.chars().skip(2).take(3).collect();
    let mut request = greedy(&tokenizer, PROMPTS[0], 5);
    request.stop.stop_strings = vec![stop.clone()];
    let mut stopped = submit(&mut scheduler, request, 0);
    run_until_idle(&mut scheduler);
    let (_, stopped_text, finish) = outcome(&drain_events(&mut stopped));
    assert_eq!(finish.unwrap().reason, FinishReason::StopString(stop.clone()));
    assert_eq!(stopped_text, text[..text.find(&stop).unwrap()]);
}

#[test]
fn abort_finishes_running_jobs_and_rejects_waiting_ones() {
    let tokenizer = tiny_tokenizer();
    let mut scheduler = scheduler(&tokenizer, config(1, 8, 64));
    let mut running = submit(&mut scheduler, greedy(&tokenizer, PROMPTS[1], 1000), 0);
    let mut waiting = submit(&mut scheduler, greedy(&tokenizer, PROMPTS[0], 2), 0);
    scheduler.step();
    scheduler.drain();
    let mut late = submit(&mut scheduler, greedy(&tokenizer, PROMPTS[0], 2), 0);
    assert_eq!(drain_events(&mut late), [JobEvent::Rejected(Rejection::Draining)]);
    scheduler.abort();
    assert_eq!(outcome(&drain_events(&mut running)).2.unwrap().reason, FinishReason::Aborted);
    assert_eq!(drain_events(&mut waiting).last(), Some(&JobEvent::Rejected(Rejection::Aborted)));
    assert!(scheduler.is_idle() && scheduler.load().draining);
}

#[test]
fn invalid_jobs_are_rejected_on_submission() {
    let tokenizer = tiny_tokenizer();
    let mut scheduler = scheduler(&tokenizer, config(1, 8, 64));
    let mut request = greedy(&tokenizer, PROMPTS[0], 2);
    request.prompt.push(5000);
    let mut events = submit(&mut scheduler, request, 0);
    assert!(matches!(&drain_events(&mut events)[..], [JobEvent::Rejected(Rejection::Invalid(message))]
        if message.contains("5000")));
    assert!(matches!(
        Scheduler::new(tiny_model(1, 8), &tokenizer, config(0, 8, 8)),
        Err(SchedulerError::ZeroMaxRunning)
    ));
}

#[tokio::test]
async fn the_engine_thread_streams_events_and_notices_a_dropped_receiver() {
    let tokenizer = Arc::new(tiny_tokenizer());
    let config = config(2, 8, 64);
    let engine = Engine::start(Arc::clone(&tokenizer), config, move || {
        Ok::<_, std::convert::Infallible>(tiny_model(config.max_running, config.max_batch_tokens()))
    })
    .unwrap();
    assert_eq!(engine.limits().vocab_size, 1024);

    let (job, mut events) = Job::new(greedy(&tokenizer, PROMPTS[0], 4));
    engine.submit(job);
    let mut finished = None;
    while let Some(event) = events.recv().await {
        if let JobEvent::Finished(summary) = event {
            finished = Some(summary);
        }
    }
    assert_eq!(finished.unwrap().completion_tokens, 4);

    let (job, mut events) = Job::new(greedy(&tokenizer, PROMPTS[1], 100_000));
    engine.submit(job);
    assert!(matches!(events.recv().await, Some(JobEvent::Started { .. })));
    assert!(matches!(events.recv().await, Some(JobEvent::Token(_))));
    drop(events);
    let mut load = engine.load();
    let load = *load.wait_for(|load| load.requests_cancelled == 1).await.unwrap();
    assert_eq!((load.running, load.requests_finished, load.kv_blocks_used), (0, 2, 0));
    tokio::task::spawn_blocking(move || engine.stop()).await.unwrap();
}

#[derive(Debug, thiserror::Error)]
#[error("device lost")]
struct DeviceLost;

/// The tiny model, failing its forward passes while `failing` is set.
struct Flaky {
    model: Qwen3Lm<CpuBackend>,
    failing: Arc<AtomicBool>,
}

impl CausalLm for Flaky {
    type Error = DeviceLost;

    fn vocab_size(&self) -> usize {
        self.model.vocab_size()
    }

    fn max_sequence_len(&self) -> usize {
        self.model.max_sequence_len()
    }

    fn forward(&mut self, batch: &[SequenceChunk<'_>], logits: &mut [f32]) -> Result<(), DeviceLost> {
        if self.failing.load(Ordering::Relaxed) {
            return Err(DeviceLost);
        }
        self.model.forward(batch, logits).map_err(|_| DeviceLost)
    }

    fn release(&mut self, sequence: usize) {
        self.model.release(sequence);
    }

    fn kv_usage(&self) -> KvUsage {
        self.model.kv_usage()
    }
}

#[test]
fn a_failed_forward_pass_fails_its_jobs_and_the_scheduler_goes_on() {
    let tokenizer = tiny_tokenizer();
    let failing = Arc::new(AtomicBool::new(false));
    let config = config(2, 8, 64);
    let model = Flaky { model: tiny_model(2, config.max_batch_tokens()), failing: Arc::clone(&failing) };
    let mut scheduler = Scheduler::new(model, &tokenizer, config).unwrap();
    let (job, mut doomed) = Job::new(greedy(&tokenizer, PROMPTS[0], 50));
    scheduler.submit(job);
    scheduler.step();
    failing.store(true, Ordering::Relaxed);
    scheduler.step();
    let events = drain_events(&mut doomed);
    assert!(
        matches!(&events[..], [JobEvent::Started { .. }, JobEvent::Token(_), JobEvent::Failed(message)]
        if message.contains("device lost")),
        "{events:?}"
    );
    assert_eq!(scheduler.load().kv_blocks_used, 0);

    failing.store(false, Ordering::Relaxed);
    let (job, mut healthy) = Job::new(greedy(&tokenizer, PROMPTS[0], 3));
    scheduler.submit(job);
    while !scheduler.is_idle() {
        scheduler.step();
    }
    assert_eq!(outcome(&drain_events(&mut healthy)).0.len(), 3);
}
