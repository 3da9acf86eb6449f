//! Unique ids for requests and responses, and jitter for retry waits. Neither needs cryptographic
//! randomness, only values that differ between calls, processes and router replicas.

use std::collections::hash_map::RandomState;
use std::hash::{BuildHasher, Hasher};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// A random-looking 64-bit value: a per-call counter hashed with a per-process random key.
pub(crate) fn random_u64() -> u64 {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let mut hasher = RandomState::new().build_hasher();
    hasher.write_u64(COUNTER.fetch_add(1, Ordering::Relaxed));
    hasher.finish()
}

/// 24 hex digits, e.g. for `chatcmpl-...` ids and request ids the router makes.
pub(crate) fn random_hex() -> String {
    format!("{:016x}{:08x}", random_u64(), random_u64() as u32)
}

/// `base` plus up to a quarter more, so that many routers retrying at once spread out.
pub(crate) fn jitter(base: Duration) -> Duration {
    let quarter_nanos = u64::try_from(base.as_nanos() / 4).unwrap_or(u64::MAX);
    base + Duration::from_nanos(random_u64() % quarter_nanos.max(1))
}

#[cfg(test)]
mod tests {
    use std::collections::HashSet;

    use super::*;

    #[test]
    fn ids_do_not_repeat() {
        let ids: HashSet<String> = (0..1000).map(|_| random_hex()).collect();
        assert_eq!(ids.len(), 1000);
        assert!(ids.iter().all(|id| id.len() == 24 && id.chars().all(|c| c.is_ascii_hexdigit())));
    }

    #[test]
    fn jitter_stays_within_a_quarter() {
        let base = Duration::from_millis(400);
        for _ in 0..100 {
            let waited = jitter(base);
            assert!(waited >= base && waited < base + Duration::from_millis(100));
        }
    }
}
