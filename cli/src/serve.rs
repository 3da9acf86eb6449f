//! `canopy serve`: everything on one box in one command. One `canopy worker` process per visible
//! GPU (one on the CPU when there is none) and the router in front of them; `listening on ADDR`
//! once the router can route to every worker. SIGTERM or Ctrl-C drains it all; a worker that dies
//! stops it all (with an error), so that a supervisor restarts the box as a whole.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::pin::pin;
use std::time::Duration;

use anyhow::{Context, anyhow, bail};
use canopy_router::{BoundRouter, RouterConfig};
use tokio::sync::oneshot;

use crate::backend::BackendKind;
use crate::gpus::visible_gpus;
use crate::local_workers::{LocalWorkers, WorkerLaunch, describe_exit};
use crate::router::init_logging;
use crate::signals::{self, EXIT_INTERRUPTED};
use crate::worker_options::EngineOptions;

/// The model served when none is named: the bundled one, found from the repository root.
const DEFAULT_MODEL: &str = "models/tiny/qwen3-tiny.gguf";

/// The longest the router may take to see the announced workers as ready. Its first health
/// check runs at once over loopback, so this is only reached when something is broken.
const READY_TIMEOUT: Duration = Duration::from_secs(60);

/// How often the router's view of the workers is looked at while waiting for them.
const READY_POLL: Duration = Duration::from_millis(10);

/// Serve a model on this machine: a router (the OpenAI API) in front of one worker per GPU.
#[derive(clap::Args)]
#[command(mut_arg("workers", |workers| workers.hide(true)))]
pub struct Args {
    /// The GGUF model every worker serves; the default is the bundled tiny model, relative to the
    /// current directory.
    #[arg(long, env = "CANOPY_MODEL", default_value = DEFAULT_MODEL)]
    model: PathBuf,
    #[command(flatten, next_help_heading = "Router")]
    router: RouterConfig,
    #[command(flatten, next_help_heading = "Workers")]
    engine: EngineOptions,
}

pub fn run(args: Args) -> anyhow::Result<()> {
    init_logging();
    // The flag is the router's; serve hides it and fills it with its own workers.
    if !args.router.workers.is_empty() {
        bail!("canopy serve starts its own workers: --workers (CANOPY_ROUTER_WORKERS) is for canopy router");
    }
    check_model(&args.model)?;
    let program = std::env::current_exe().context("locating the canopy binary to start the workers")?;
    let launches = worker_launches(&args.model, &args.engine)?;
    let runtime = tokio::runtime::Runtime::new().context("starting the async runtime")?;
    // The workers are spawned inside this block_on, so from the main thread, which their death
    // signal is tied to (see local_workers).
    runtime.block_on(serve(&program, launches, args.router))
}

fn check_model(model: &Path) -> anyhow::Result<()> {
    if model.is_file() {
        return Ok(());
    }
    let hint = if model == Path::new(DEFAULT_MODEL) {
        " (the default, the bundled model, is found from the repository root: run there, or pass \
         --model or CANOPY_MODEL)"
    } else {
        ""
    };
    bail!("no model file at {}{hint}", model.display())
}

/// A CUDA worker per visible GPU, or one CPU worker: with `--backend cpu`, or `auto` without a
/// usable GPU. `--backend cuda` without a GPU is an error.
fn worker_launches(model: &Path, engine: &EngineOptions) -> anyhow::Result<Vec<WorkerLaunch>> {
    let gpus = match engine.backend {
        BackendKind::Cpu => Vec::new(),
        BackendKind::Cuda => visible_gpus().map_err(|why| anyhow!("--backend cuda: {why}"))?,
        BackendKind::Auto => visible_gpus().unwrap_or_else(|why| {
            eprintln!("canopy serve: one worker on the CPU: {why}");
            Vec::new()
        }),
    };
    let worker_args = |backend: BackendKind| {
        let mut args = vec!["--model".into(), model.into(), "--listen".into(), "127.0.0.1:0".into()];
        args.extend(EngineOptions { backend, ..engine.clone() }.to_args());
        args
    };
    if gpus.is_empty() {
        return Ok(vec![WorkerLaunch {
            label: "cpu".to_owned(),
            args: worker_args(BackendKind::Cpu),
            visible_devices: None,
        }]);
    }
    Ok(gpus
        .into_iter()
        .map(|device| WorkerLaunch {
            label: format!("gpu {device}"),
            args: worker_args(BackendKind::Cuda),
            visible_devices: Some(device),
        })
        .collect())
}

/// Why serving ended.
enum Stop {
    Signal,
    WorkerExited(String),
    RouterFailed(anyhow::Error),
}

async fn serve(program: &Path, launches: Vec<WorkerLaunch>, mut config: RouterConfig) -> anyhow::Result<()> {
    let labels: Vec<&str> = launches.iter().map(|launch| launch.label.as_str()).collect();
    eprintln!("canopy serve: starting {} worker(s): {}", labels.len(), labels.join(", "));
    let worker_count = launches.len();
    let mut signal = pin!(signals::termination());
    let mut workers = tokio::select! {
        started = LocalWorkers::start(program, launches) => started?,
        // Dropping the half-started workers kills them: none of them serves anything yet.
        () = &mut signal => return Ok(()),
    };

    config.workers = workers.addresses();
    let router = canopy_router::bind(config).await?;
    let ready = tokio::select! {
        ready = wait_until_ready(&router, worker_count) => ready.map_err(Stop::RouterFailed),
        (label, status) = workers.first_exit() => Err(Stop::WorkerExited(describe_exit(&label, &status))),
        () = &mut signal => Err(Stop::Signal),
    };
    if let Err(stop) = ready {
        let stopped = stop_workers(&mut workers).await;
        return match stop {
            Stop::Signal => stopped,
            Stop::WorkerExited(why) => Err(anyhow!("{why} while starting")),
            Stop::RouterFailed(error) => Err(error),
        };
    }
    announce(&router)?;

    let (stop_router, router_stopped) = oneshot::channel::<()>();
    let mut router_task = tokio::spawn(router.run(async {
        let _ = router_stopped.await;
    }));
    let stop = tokio::select! {
        () = &mut signal => Stop::Signal,
        (label, status) = workers.first_exit() => Stop::WorkerExited(describe_exit(&label, &status)),
        served = &mut router_task => Stop::RouterFailed(match served {
            Ok(Ok(())) => anyhow!("the router stopped by itself"),
            Ok(Err(error)) => error.into(),
            Err(error) => anyhow!("the router task failed: {error}"),
        }),
    };
    match &stop {
        Stop::Signal => {
            eprintln!("canopy serve: draining; open requests may finish (signal again to exit now)")
        }
        Stop::WorkerExited(why) => eprintln!("canopy serve: {why}; stopping"),
        Stop::RouterFailed(why) => eprintln!("canopy serve: {why:#}; stopping"),
    }

    // The router stops accepting and waits for its open requests while the workers finish them.
    let _ = stop_router.send(());
    let router_running = !matches!(stop, Stop::RouterFailed(_));
    let drained = {
        let drained = async {
            if router_running {
                match router_task.await {
                    Ok(served) => served?,
                    Err(error) => bail!("the router task failed: {error}"),
                }
            }
            Ok(())
        };
        let workers_stopped = stop_workers(&mut workers);
        tokio::select! {
            (router, workers) = async { tokio::join!(drained, workers_stopped) } => Some(router.and(workers)),
            () = signals::termination() => None,
        }
    };
    let Some(drained) = drained else {
        workers.kill();
        std::process::exit(EXIT_INTERRUPTED);
    };
    match stop {
        Stop::Signal => drained,
        Stop::WorkerExited(why) => Err(anyhow!(why)),
        Stop::RouterFailed(error) => Err(error),
    }
}

/// Waits until the router can route to all `count` workers.
async fn wait_until_ready(router: &BoundRouter, count: usize) -> anyhow::Result<()> {
    let ready = async {
        while router.ready_workers() < count {
            tokio::time::sleep(READY_POLL).await;
        }
    };
    tokio::time::timeout(READY_TIMEOUT, ready).await.map_err(|_| {
        anyhow!("the router saw {} of {count} workers ready after {READY_TIMEOUT:?}", router.ready_workers())
    })
}

/// Drains the workers and waits for them to exit.
async fn stop_workers(workers: &mut LocalWorkers) -> anyhow::Result<()> {
    workers.drain();
    workers.wait().await
}

fn announce(router: &BoundRouter) -> anyhow::Result<()> {
    let mut stdout = std::io::stdout().lock();
    writeln!(stdout, "listening on {}", router.local_addr())
        .and_then(|()| stdout.flush())
        .context("writing to stdout")?;
    Ok(())
}
