//! Turns a worker's stream of check results into a health verdict that does not flap on one blip.

/// Whether a worker answers its checks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Health {
    /// Not checked successfully yet since the router started.
    Unknown,
    Healthy,
    Unhealthy,
}

/// Counts consecutive check outcomes: a healthy worker turns unhealthy after `failure_threshold`
/// failures in a row and an unhealthy one recovers after `success_threshold` successes in a row.
/// The first success after start makes a worker healthy at once: there is no verdict to protect yet.
#[derive(Debug, Clone)]
pub(crate) struct HealthTracker {
    health: Health,
    consecutive_failures: u32,
    consecutive_successes: u32,
    failure_threshold: u32,
    success_threshold: u32,
}

impl HealthTracker {
    pub(crate) fn new(failure_threshold: u32, success_threshold: u32) -> Self {
        Self {
            health: Health::Unknown,
            consecutive_failures: 0,
            consecutive_successes: 0,
            failure_threshold: failure_threshold.max(1),
            success_threshold: success_threshold.max(1),
        }
    }

    pub(crate) fn health(&self) -> Health {
        self.health
    }

    /// Records an answered check; returns true when this turned the worker healthy.
    pub(crate) fn record_success(&mut self) -> bool {
        self.consecutive_failures = 0;
        self.consecutive_successes = self.consecutive_successes.saturating_add(1);
        let recovers = match self.health {
            Health::Unknown => true,
            Health::Unhealthy => self.consecutive_successes >= self.success_threshold,
            Health::Healthy => false,
        };
        if recovers {
            self.health = Health::Healthy;
        }
        recovers
    }

    /// Records a failed check or call; returns true when this turned the worker unhealthy.
    pub(crate) fn record_failure(&mut self) -> bool {
        self.consecutive_successes = 0;
        self.consecutive_failures = self.consecutive_failures.saturating_add(1);
        let fails = self.health != Health::Unhealthy && self.consecutive_failures >= self.failure_threshold;
        if fails {
            self.health = Health::Unhealthy;
        }
        fails
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn first_success_makes_an_unknown_worker_healthy() {
        let mut tracker = HealthTracker::new(3, 2);
        assert_eq!(tracker.health(), Health::Unknown);
        assert!(tracker.record_success());
        assert_eq!(tracker.health(), Health::Healthy);
    }

    #[test]
    fn one_blip_does_not_take_a_healthy_worker_out() {
        let mut tracker = HealthTracker::new(3, 2);
        tracker.record_success();
        assert!(!tracker.record_failure());
        assert!(!tracker.record_failure());
        tracker.record_success();
        assert!(!tracker.record_failure());
        assert!(!tracker.record_failure());
        assert_eq!(tracker.health(), Health::Healthy);
        assert!(tracker.record_failure());
        assert_eq!(tracker.health(), Health::Unhealthy);
    }

    #[test]
    fn recovery_needs_consecutive_successes() {
        let mut tracker = HealthTracker::new(1, 2);
        tracker.record_success();
        tracker.record_failure();
        assert_eq!(tracker.health(), Health::Unhealthy);
        assert!(!tracker.record_success());
        tracker.record_failure();
        assert!(!tracker.record_success());
        assert!(tracker.record_success());
        assert_eq!(tracker.health(), Health::Healthy);
    }

    #[test]
    fn an_unreachable_worker_becomes_unhealthy_from_unknown() {
        let mut tracker = HealthTracker::new(2, 2);
        assert!(!tracker.record_failure());
        assert_eq!(tracker.health(), Health::Unknown);
        assert!(tracker.record_failure());
        assert_eq!(tracker.health(), Health::Unhealthy);
        assert!(!tracker.record_failure(), "already unhealthy: no new transition");
    }
}
