//! The `canopy worker` processes that `canopy serve` runs: started from this same binary, each
//! one pinned to its GPU through `CUDA_VISIBLE_DEVICES`, announcing its port on stdout, in a
//! process group of its own (so that a terminal's Ctrl-C reaches `canopy serve` alone, which then
//! drains them in order), and killed by the kernel when `canopy serve` dies, however it dies.

use std::ffi::OsString;
use std::io;
use std::net::SocketAddr;
use std::path::Path;
use std::process::{ExitStatus, Stdio};

use anyhow::{Context, bail};
use futures_util::future::{select_all, try_join_all};
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, ChildStdout, Command};

use crate::gpus::CUDA_VISIBLE_DEVICES;

/// What one worker process is started with.
#[derive(Debug, Clone)]
pub struct WorkerLaunch {
    /// How the logs name it: `gpu 0`, `cpu`.
    pub label: String,
    /// The arguments after `canopy worker`.
    pub args: Vec<OsString>,
    /// The `CUDA_VISIBLE_DEVICES` value that shows it its GPU; `None` leaves the variable as is.
    pub visible_devices: Option<String>,
}

/// A started worker process.
#[derive(Debug)]
struct LocalWorker {
    label: String,
    /// Where it serves gRPC, as it announced.
    address: SocketAddr,
    child: Child,
}

/// The worker processes of one `canopy serve`.
#[derive(Debug)]
pub struct LocalWorkers {
    workers: Vec<LocalWorker>,
}

impl LocalWorkers {
    /// Starts every worker at once (they load their models in parallel) and waits until each has
    /// announced its address. A worker that exits or says something else first fails the whole
    /// start; the workers started so far are then killed (dropping them kills them).
    pub async fn start(program: &Path, launches: Vec<WorkerLaunch>) -> anyhow::Result<Self> {
        let mut starting = Vec::with_capacity(launches.len());
        for launch in launches {
            let child =
                spawn(program, &launch).with_context(|| format!("starting the {} worker", launch.label))?;
            starting.push((launch.label, child));
        }
        let workers =
            try_join_all(starting.into_iter().map(|(label, child)| announced(label, child))).await?;
        Ok(Self { workers })
    }

    /// The workers' gRPC addresses, as the router takes them.
    pub fn addresses(&self) -> Vec<String> {
        self.workers.iter().map(|worker| format!("grpc://{}", worker.address)).collect()
    }

    /// Resolves when the first worker exits, naming it and how it ended. Cancel-safe: a worker
    /// that exits while this is not awaited is reported by the next call.
    pub async fn first_exit(&mut self) -> (String, io::Result<ExitStatus>) {
        if self.workers.is_empty() {
            return std::future::pending().await;
        }
        let waits = self
            .workers
            .iter_mut()
            .map(|worker| Box::pin(async move { (worker.label.clone(), worker.child.wait().await) }));
        select_all(waits).await.0
    }

    /// Asks every worker still running to drain (SIGTERM): it stops taking requests, lets the
    /// running ones finish within its grace period, and exits.
    pub fn drain(&self) {
        for worker in &self.workers {
            // `id` is None once the process was waited for, so an exited worker's recycled pid is
            // never signalled.
            if let Some(pid) = worker.child.id() {
                send_sigterm(pid);
            }
        }
    }

    /// Kills every worker still running at once (SIGKILL).
    pub fn kill(&mut self) {
        for worker in &mut self.workers {
            // Fails only when the process is gone already.
            let _ = worker.child.start_kill();
        }
    }

    /// Waits until every worker has exited; an error names the first that did not exit cleanly.
    pub async fn wait(&mut self) -> anyhow::Result<()> {
        let mut first_failure = None;
        for worker in &mut self.workers {
            let status = worker.child.wait().await;
            let clean = matches!(&status, Ok(status) if status.success());
            if !clean && first_failure.is_none() {
                first_failure = Some(describe_exit(&worker.label, &status));
            }
        }
        match first_failure {
            Some(failure) => bail!(failure),
            None => Ok(()),
        }
    }
}

/// "the gpu 1 worker exited with exit status: 2", for logs and errors.
pub fn describe_exit(label: &str, status: &io::Result<ExitStatus>) -> String {
    match status {
        Ok(status) => format!("the {label} worker exited ({status})"),
        Err(error) => format!("the {label} worker could not be waited for: {error}"),
    }
}

fn spawn(program: &Path, launch: &WorkerLaunch) -> io::Result<Child> {
    let mut command = Command::new(program);
    command
        .arg("worker")
        .args(&launch.args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .kill_on_drop(true);
    if let Some(devices) = &launch.visible_devices {
        command.env(CUDA_VISIBLE_DEVICES, devices);
    }
    #[cfg(unix)]
    command.process_group(0);
    #[cfg(target_os = "linux")]
    die_with_this_process(&mut command);
    command.spawn()
}

/// Has the kernel SIGKILL the child when this process dies, even by SIGKILL, when no drop or
/// signal handler runs. The death signal follows the *thread* that spawned the child, so workers
/// must be spawned from a thread that lives as long as the process: `canopy serve` spawns them
/// from its main thread (the one that runs `block_on`).
#[cfg(target_os = "linux")]
fn die_with_this_process(command: &mut Command) {
    let parent = std::process::id();
    // SAFETY: the closure runs in the forked child before exec and calls only the async-signal-
    // safe prctl and getppid; it neither allocates nor takes locks.
    unsafe {
        command.pre_exec(move || {
            if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) != 0 {
                return Err(io::Error::last_os_error());
            }
            // This process may have died before the prctl, and then nothing would kill the child.
            if u32::try_from(libc::getppid()).ok() != Some(parent) {
                return Err(io::Error::from_raw_os_error(libc::ESRCH));
            }
            Ok(())
        });
    }
}

#[cfg(unix)]
fn send_sigterm(pid: u32) {
    if let Ok(pid) = libc::pid_t::try_from(pid) {
        // SAFETY: kill has no memory effects; the pid is a child this process has not reaped, so
        // it cannot belong to another process.
        unsafe {
            libc::kill(pid, libc::SIGTERM);
        }
    }
}

#[cfg(not(unix))]
fn send_sigterm(_pid: u32) {}

/// Waits for the worker's `listening on ADDR` line; then keeps its stdout drained in the
/// background, so that nothing it prints later can block it.
async fn announced(label: String, mut child: Child) -> anyhow::Result<LocalWorker> {
    let stdout = child.stdout.take().context("the worker's stdout is not piped")?;
    let mut lines = BufReader::new(stdout).lines();
    let line = lines.next_line().await.with_context(|| format!("reading the {label} worker's output"))?;
    let Some(line) = line else {
        let status = child.wait().await;
        bail!("{} before it served", describe_exit(&label, &status));
    };
    let address = line
        .trim()
        .strip_prefix("listening on ")
        .and_then(|address| address.parse::<SocketAddr>().ok())
        .with_context(|| format!("the {label} worker said {line:?} instead of `listening on ADDR`"))?;
    tokio::spawn(discard(lines));
    Ok(LocalWorker { label, address, child })
}

async fn discard(mut lines: tokio::io::Lines<BufReader<ChildStdout>>) {
    while let Ok(Some(_)) = lines.next_line().await {}
}
