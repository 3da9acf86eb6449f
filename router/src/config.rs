//! The router's settings, as command-line flags that are also environment variables.

use std::net::SocketAddr;
use std::time::Duration;

/// Everything the router needs to run. Every flag can also be set through the environment variable
/// named beside it, so a container can be configured without a command line.
#[derive(Debug, Clone, clap::Args)]
pub struct RouterConfig {
    /// Address to serve HTTP on. Port 0 picks a free port (the real one is printed).
    #[arg(long, env = "CANOPY_ROUTER_LISTEN", default_value = "127.0.0.1:8000")]
    pub listen: SocketAddr,

    /// Workers to forward requests to, as a comma-separated list of grpc://host:port addresses.
    /// Workers that are down at start are retried in the background.
    #[arg(long, env = "CANOPY_ROUTER_WORKERS", value_delimiter = ',')]
    pub workers: Vec<String>,

    /// Largest request body accepted, in bytes; larger bodies get 413.
    #[arg(long, env = "CANOPY_ROUTER_MAX_BODY_BYTES", default_value_t = 16 * 1024 * 1024)]
    pub max_body_bytes: usize,

    /// Longest a request may take end to end (e.g. "30s", "5m"), passed to the worker as the
    /// gRPC deadline. Unset: no limit.
    #[arg(long, env = "CANOPY_ROUTER_REQUEST_TIMEOUT", value_parser = parse_duration)]
    pub request_timeout: Option<Duration>,

    /// Further workers to try when one fails before the first token of a request.
    #[arg(long, env = "CANOPY_ROUTER_MAX_RETRIES", default_value_t = 2)]
    pub max_retries: u32,

    /// Time between two health checks of a worker.
    #[arg(long, env = "CANOPY_ROUTER_HEALTH_INTERVAL", default_value = "2s", value_parser = parse_duration)]
    pub health_interval: Duration,

    /// Longest a health check (or an Info call) may take before it counts as failed.
    #[arg(long, env = "CANOPY_ROUTER_HEALTH_TIMEOUT", default_value = "1s", value_parser = parse_duration)]
    pub health_timeout: Duration,

    /// Consecutive failed checks that take a healthy worker out of rotation.
    #[arg(long, env = "CANOPY_ROUTER_HEALTH_FAILURE_THRESHOLD", default_value_t = 3,
          value_parser = clap::value_parser!(u32).range(1..))]
    pub health_failure_threshold: u32,

    /// Consecutive successful checks that bring an unhealthy worker back.
    #[arg(long, env = "CANOPY_ROUTER_HEALTH_SUCCESS_THRESHOLD", default_value_t = 2,
          value_parser = clap::value_parser!(u32).range(1..))]
    pub health_success_threshold: u32,

    /// Longest a TCP connection to a worker may take to open.
    #[arg(long, env = "CANOPY_ROUTER_CONNECT_TIMEOUT", default_value = "2s", value_parser = parse_duration)]
    pub connect_timeout: Duration,

    /// Fewest time between two load reports a worker pushes (coalescing changes).
    #[arg(long, env = "CANOPY_ROUTER_STATE_MIN_INTERVAL", default_value = "100ms", value_parser = parse_duration)]
    pub state_min_interval: Duration,

    /// Most time between two load reports (the worker's heartbeat); three missed heartbeats
    /// restart the subscription.
    #[arg(long, env = "CANOPY_ROUTER_STATE_MAX_INTERVAL", default_value = "2s", value_parser = parse_duration)]
    pub state_max_interval: Duration,

    /// Silence after which a streaming response gets an SSE comment, so that proxies keep the
    /// connection open and a gone client is noticed while the worker is still queued or prefilling.
    #[arg(long, env = "CANOPY_ROUTER_SSE_KEEP_ALIVE", default_value = "10s", value_parser = parse_duration)]
    pub sse_keep_alive: Duration,
}

impl RouterConfig {
    /// The defaults of every flag, with the given workers: what `canopy router --workers ...` runs.
    pub fn with_workers(workers: Vec<String>) -> Self {
        Self {
            listen: SocketAddr::from(([127, 0, 0, 1], 8000)),
            workers,
            max_body_bytes: 16 * 1024 * 1024,
            request_timeout: None,
            max_retries: 2,
            health_interval: Duration::from_secs(2),
            health_timeout: Duration::from_secs(1),
            health_failure_threshold: 3,
            health_success_threshold: 2,
            connect_timeout: Duration::from_secs(2),
            state_min_interval: Duration::from_millis(100),
            state_max_interval: Duration::from_secs(2),
            sse_keep_alive: Duration::from_secs(10),
        }
    }
}

/// Parses a duration such as "250ms", "30s", "5m", "1h" or a bare number of seconds ("1.5").
pub fn parse_duration(text: &str) -> Result<Duration, String> {
    let text = text.trim();
    let split = text.find(|c: char| !(c.is_ascii_digit() || c == '.')).unwrap_or(text.len());
    let (number, unit) = text.split_at(split);
    let value: f64 =
        number.parse().map_err(|_| format!("`{text}` is not a duration such as 30s or 500ms"))?;
    let seconds_per_unit = match unit.trim() {
        "" | "s" => 1.0,
        "ms" => 1e-3,
        "m" => 60.0,
        "h" => 3600.0,
        other => return Err(format!("unknown duration unit `{other}` (use ms, s, m or h)")),
    };
    Duration::try_from_secs_f64(value * seconds_per_unit).map_err(|err| format!("`{text}`: {err}"))
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::*;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        config: RouterConfig,
    }

    #[test]
    fn durations_accept_units_and_bare_seconds() {
        assert_eq!(parse_duration("250ms"), Ok(Duration::from_millis(250)));
        assert_eq!(parse_duration("30s"), Ok(Duration::from_secs(30)));
        assert_eq!(parse_duration("2m"), Ok(Duration::from_secs(120)));
        assert_eq!(parse_duration("1h"), Ok(Duration::from_secs(3600)));
        assert_eq!(parse_duration("1.5"), Ok(Duration::from_millis(1500)));
        assert!(parse_duration("soon").is_err());
        assert!(parse_duration("5 days").is_err());
        assert!(parse_duration("").is_err());
    }

    #[test]
    fn flag_defaults_match_with_workers() {
        let cli = Cli::try_parse_from(["router", "--workers", "grpc://a:1,grpc://b:2"]).expect("parses");
        let expected = RouterConfig::with_workers(vec!["grpc://a:1".into(), "grpc://b:2".into()]);
        assert_eq!(format!("{:?}", cli.config), format!("{expected:?}"));
    }

    #[test]
    fn thresholds_must_be_positive() {
        assert!(Cli::try_parse_from(["router", "--health-failure-threshold", "0"]).is_err());
    }
}
