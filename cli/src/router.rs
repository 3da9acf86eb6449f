//! `canopy router`: the HTTP front end that forwards OpenAI API requests to worker daemons.

use anyhow::Context;
use canopy_router::RouterConfig;

use crate::signals;

#[derive(clap::Args)]
pub struct Args {
    #[command(flatten)]
    config: RouterConfig,
}

pub fn run(args: Args) -> anyhow::Result<()> {
    init_logging();
    let runtime = tokio::runtime::Runtime::new().context("cannot start the async runtime")?;
    runtime.block_on(canopy_router::serve(args.config, shutdown_requested()))?;
    Ok(())
}

/// Logs to stderr (stdout carries the `listening on` line); `RUST_LOG` picks what, info by default.
pub(crate) fn init_logging() {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    // Fails only when a subscriber is already set, which then keeps logging.
    let _ = tracing_subscriber::fmt().with_writer(std::io::stderr).with_env_filter(filter).try_init();
}

/// Resolves on the first Ctrl-C or SIGTERM (what container runtimes send): the router then stops
/// accepting and lets open requests finish. A second signal exits at once, for when a stream
/// would hold the shutdown up for too long.
async fn shutdown_requested() {
    signals::termination().await;
    eprintln!("canopy router: shutting down; open requests may finish (signal again to exit now)");
    tokio::spawn(async {
        signals::termination().await;
        std::process::exit(signals::EXIT_INTERRUPTED);
    });
}
