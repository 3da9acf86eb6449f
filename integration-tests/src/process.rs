//! One running `canopy` process: started with its stdout piped (for the `listening on ADDR`
//! line) and its stderr in a file that a failing test prints; killed when dropped, so a failing
//! test never leaves a process behind.

use std::ffi::OsStr;
use std::fs::File;
use std::io::{BufRead, BufReader, Read};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use crate::binary::canopy_binary;

/// Long enough for a model to load on a loaded 2-core machine, short enough to fail a stuck test.
pub const START_TIMEOUT: Duration = Duration::from_secs(120);

pub struct CanopyProcess {
    /// How failures name it: `router`, `worker 1`, `serve`.
    pub name: String,
    /// The address it announced.
    pub address: String,
    child: Child,
    stderr: tempfile::NamedTempFile,
}

impl CanopyProcess {
    /// Runs `canopy ARGS` and waits for its `listening on ADDR` line.
    pub fn start<I, S>(name: &str, args: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: AsRef<OsStr>,
    {
        let stderr = tempfile::NamedTempFile::new().unwrap();
        let mut child = Command::new(canopy_binary())
            .args(args)
            .env("RUST_LOG", "warn")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(stderr.reopen().unwrap())
            .spawn()
            .unwrap_or_else(|error| panic!("starting the {name}: {error}"));
        // A blocking read on a thread, so that a process that never speaks fails the test in time.
        let stdout = child.stdout.take().unwrap();
        let (line_sender, line) = mpsc::channel();
        std::thread::spawn(move || {
            let mut reader = BufReader::new(stdout);
            let mut first = String::new();
            let _ = line_sender.send(reader.read_line(&mut first).map(|_| first));
            // Keep draining, so that nothing the process prints later can block it.
            let _ = std::io::copy(&mut reader, &mut std::io::sink());
        });
        let mut process = Self { name: name.to_owned(), address: String::new(), child, stderr };
        let line = match line.recv_timeout(START_TIMEOUT) {
            Ok(Ok(line)) => line,
            Ok(Err(error)) => process.fail(&format!("reading its stdout failed: {error}")),
            Err(_) => process.fail(&format!("said nothing within {START_TIMEOUT:?}")),
        };
        match line.trim().strip_prefix("listening on ") {
            Some(address) => process.address = address.to_owned(),
            None => process.fail(&format!("said {line:?} instead of `listening on ADDR`")),
        }
        process
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Sends `signal` (`TERM`, `KILL`, ...) through kill(1).
    pub fn signal(&self, signal: &str) {
        let sent =
            Command::new("kill").arg(format!("-{signal}")).arg(self.pid().to_string()).status().unwrap();
        assert!(sent.success(), "kill -{signal} {} ({})", self.pid(), self.name);
    }

    /// Waits (at most `timeout`) for the process to exit.
    pub fn wait_exit(&mut self, timeout: Duration) -> ExitStatus {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                return status;
            }
            if Instant::now() > deadline {
                self.fail(&format!("did not exit within {timeout:?}"));
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Whether the process still runs.
    pub fn is_running(&mut self) -> bool {
        self.child.try_wait().unwrap().is_none()
    }

    /// What the process wrote to stderr so far.
    pub fn stderr(&self) -> String {
        let mut text = String::new();
        File::open(self.stderr.path()).and_then(|mut file| file.read_to_string(&mut text)).unwrap();
        text
    }

    /// Fails the test; dropping the process then prints its stderr.
    pub fn fail(&mut self, what: &str) -> ! {
        panic!("the {} {what}", self.name);
    }
}

impl Drop for CanopyProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        if std::thread::panicking() {
            eprintln!("--- stderr of the {} ---\n{}", self.name, self.stderr());
        }
    }
}

/// The processes whose parent is `pid`, from /proc (Linux).
pub fn children_of(pid: u32) -> Vec<u32> {
    let Ok(entries) = std::fs::read_dir("/proc") else { return Vec::new() };
    entries
        .flatten()
        .filter_map(|entry| entry.file_name().to_str()?.parse::<u32>().ok())
        .filter(|&child| stat_fields(child).is_some_and(|(_, parent)| parent == pid))
        .collect()
}

/// Whether `pid` runs: it exists and is not a zombie waiting to be reaped.
pub fn is_alive(pid: u32) -> bool {
    stat_fields(pid).is_some_and(|(state, _)| state != 'Z' && state != 'X')
}

/// The state letter and parent pid from /proc/PID/stat (after the parenthesised command name,
/// which may itself hold spaces and parentheses).
fn stat_fields(pid: u32) -> Option<(char, u32)> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let mut fields = stat.get(stat.rfind(')')? + 1..)?.split_whitespace();
    let state = fields.next()?.chars().next()?;
    let parent = fields.next()?.parse().ok()?;
    Some((state, parent))
}
