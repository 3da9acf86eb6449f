//! `canopy router` through the real binary: it prints the bound address, serves, survives a
//! worker that is down, and shuts down cleanly on SIGTERM.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// Kills the router if a test fails before it exits.
struct Running(Child);

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// One HTTP/1.1 request over a plain socket; returns the whole response.
fn http_get(address: &str, path: &str) -> String {
    let mut stream = TcpStream::connect(address).expect("the router accepts connections");
    stream.set_read_timeout(Some(Duration::from_secs(10))).expect("a read timeout");
    write!(stream, "GET {path} HTTP/1.1\r\nHost: {address}\r\nConnection: close\r\n\r\n")
        .expect("request sent");
    let mut response = String::new();
    stream.read_to_string(&mut response).expect("a response");
    response
}

#[test]
fn router_serves_on_the_printed_port_and_stops_on_sigterm() {
    // Port 1 on loopback: nothing listens there, so the worker is down the whole time.
    let child = Command::new(env!("CARGO_BIN_EXE_canopy"))
        .args(["router", "--listen", "127.0.0.1:0", "--workers", "grpc://127.0.0.1:1"])
        .env("RUST_LOG", "warn")
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("the canopy binary runs");
    let mut router = Running(child);
    let stdout = router.0.stdout.take().expect("piped stdout");
    let mut first_line = String::new();
    BufReader::new(stdout).read_line(&mut first_line).expect("a first line");
    let address = first_line.trim().strip_prefix("listening on ").expect("`listening on ADDR`").to_string();
    assert!(!address.ends_with(":0"), "the real port is printed: {address}");

    assert!(http_get(&address, "/health").starts_with("HTTP/1.1 200"));
    let ready = http_get(&address, "/ready");
    assert!(ready.starts_with("HTTP/1.1 503"), "{ready}");
    assert!(ready.contains("not_ready"), "{ready}");

    let killed =
        Command::new("kill").args(["-TERM", &router.0.id().to_string()]).status().expect("kill runs");
    assert!(killed.success());
    let deadline = Instant::now() + Duration::from_secs(10);
    let status = loop {
        if let Some(status) = router.0.try_wait().expect("wait on the router") {
            break status;
        }
        assert!(Instant::now() < deadline, "the router did not exit after SIGTERM");
        std::thread::sleep(Duration::from_millis(20));
    };
    assert!(status.success(), "{status}");
}

#[test]
fn router_flags_are_also_environment_variables() {
    let output = Command::new(env!("CARGO_BIN_EXE_canopy"))
        .args(["router", "--help"])
        .output()
        .expect("the canopy binary runs");
    let help = String::from_utf8_lossy(&output.stdout);
    for variable in [
        "CANOPY_ROUTER_LISTEN",
        "CANOPY_ROUTER_WORKERS",
        "CANOPY_ROUTER_MAX_BODY_BYTES",
        "CANOPY_ROUTER_REQUEST_TIMEOUT",
        "CANOPY_ROUTER_MAX_RETRIES",
    ] {
        assert!(help.contains(variable), "{variable} in:\n{help}");
    }

    let output = Command::new(env!("CARGO_BIN_EXE_canopy"))
        .args(["router"])
        .env("CANOPY_ROUTER_WORKERS", "ftp://nowhere:1")
        .output()
        .expect("the canopy binary runs");
    assert!(!output.status.success());
    assert!(String::from_utf8_lossy(&output.stderr).contains("ftp://nowhere:1"));
}
