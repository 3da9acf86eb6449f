//! The load a scheduler reports: queue and batch sizes, KV use, recent rates and lifetime
//! counters.

use std::collections::VecDeque;
use std::time::{Duration, Instant};

/// A snapshot of the scheduler's load.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct EngineLoad {
    /// Jobs waiting for a sequence slot.
    pub queued: usize,
    /// Jobs being prefilled or decoded.
    pub running: usize,
    /// KV cache blocks in use.
    pub kv_blocks_used: usize,
    /// KV cache blocks in all.
    pub kv_blocks_total: usize,
    /// Generated tokens per second over the last few seconds.
    pub decode_tokens_per_second: f32,
    /// Forward steps per second over the last few seconds.
    pub step_rate: f32,
    /// The scheduler takes no new jobs and finishes the ones it has.
    pub draining: bool,
    /// Jobs that started since the scheduler began.
    pub requests_started: u64,
    /// Started jobs that ended, cancelled ones included.
    pub requests_finished: u64,
    /// Jobs cancelled because their receiver was dropped, waiting or running.
    pub requests_cancelled: u64,
    /// Tokens generated since the scheduler began.
    pub tokens_generated: u64,
}

impl EngineLoad {
    /// Whether no job waits or runs.
    pub fn is_idle(&self) -> bool {
        self.queued == 0 && self.running == 0
    }
}

/// How far back the rates look.
const RATE_WINDOW: Duration = Duration::from_secs(5);

/// Recent steps and the tokens they generated, for the rates of [`EngineLoad`].
#[derive(Debug, Default)]
pub(super) struct RateWindow {
    steps: VecDeque<(Instant, usize)>,
}

impl RateWindow {
    /// Records a step that ended at `at` and generated `tokens`.
    pub(super) fn record(&mut self, at: Instant, tokens: usize) {
        self.steps.push_back((at, tokens));
        while self.steps.front().is_some_and(|&(time, _)| at.duration_since(time) > RATE_WINDOW) {
            self.steps.pop_front();
        }
    }

    /// Forgets every step: an idle scheduler has no rate.
    pub(super) fn clear(&mut self) {
        self.steps.clear();
    }

    /// Steps per second and tokens per second between the oldest and newest recorded step.
    pub(super) fn rates(&self) -> (f32, f32) {
        let (Some(&(first, _)), Some(&(last, _))) = (self.steps.front(), self.steps.back()) else {
            return (0.0, 0.0);
        };
        let span = last.duration_since(first).as_secs_f32();
        if span <= 0.0 {
            return (0.0, 0.0);
        }
        // Each step's tokens were made in the interval before it, so the oldest step's are
        // outside the span.
        let tokens: usize = self.steps.iter().skip(1).map(|&(_, tokens)| tokens).sum();
        ((self.steps.len() - 1) as f32 / span, tokens as f32 / span)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rates_cover_the_recent_steps_only() {
        let start = Instant::now();
        let mut window = RateWindow::default();
        assert_eq!(window.rates(), (0.0, 0.0));
        window.record(start, 4);
        assert_eq!(window.rates(), (0.0, 0.0));
        for i in 1..=4 {
            window.record(start + Duration::from_millis(100 * i), 2);
        }
        let (steps, tokens) = window.rates();
        assert!((steps - 10.0).abs() < 1e-3 && (tokens - 20.0).abs() < 1e-3, "{steps} {tokens}");
        window.record(start + Duration::from_secs(60), 1);
        assert_eq!(window.rates(), (0.0, 0.0));
        window.clear();
        assert_eq!(window.rates(), (0.0, 0.0));
    }
}
