//! `canopy worker` through the real binary: it announces its port, serves the generated gRPC
//! client, and drains on SIGTERM (health NOT_SERVING, new requests refused, the running one
//! finishes, exit code 0).

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};

use canopy_proto::v1::{self, generate_event::Event, worker_client::WorkerClient};
use tonic::transport::Channel;
use tonic_health::pb::HealthCheckRequest;
use tonic_health::pb::health_check_response::ServingStatus;
use tonic_health::pb::health_client::HealthClient;

const MODEL: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../models/tiny/qwen3-tiny.gguf");

/// Starts `canopy worker` on a free port; returns the process and the address it announced.
fn start_worker(extra: &[&str]) -> (Child, String) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_canopy"))
        .args(["worker", "--listen", "127.0.0.1:0", "--backend", "cpu", "--max-seq-len", "256"])
        .args(extra)
        .env("CANOPY_MODEL", MODEL)
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("the canopy binary starts");
    let stdout = child.stdout.take().expect("piped stdout");
    let mut line = String::new();
    BufReader::new(stdout).read_line(&mut line).expect("a line on stdout");
    let address =
        line.trim().strip_prefix("listening on ").unwrap_or_else(|| panic!("unexpected line {line:?}"));
    (child, address.to_owned())
}

fn request(prompt: &str, max_tokens: u32) -> v1::GenerateRequest {
    v1::GenerateRequest {
        input: Some(v1::generate_request::Input::Prompt(prompt.into())),
        max_tokens: Some(max_tokens),
        ignore_eos: true,
        ..v1::GenerateRequest::default()
    }
}

async fn last_event(mut stream: tonic::Streaming<v1::GenerateEvent>) -> Event {
    let mut last = None;
    while let Some(event) = stream.message().await.expect("the generation streams") {
        last = event.event;
    }
    last.expect("at least one event")
}

#[tokio::test]
async fn the_worker_serves_then_drains_on_sigterm_and_exits_cleanly() {
    let (mut child, address) = start_worker(&["--model-id", "tiny", "--max-running", "2"]);
    let channel = Channel::from_shared(format!("http://{address}")).unwrap().connect().await.unwrap();
    let mut client = WorkerClient::new(channel.clone());
    let mut health = HealthClient::new(channel);

    let info = client.info(v1::InfoRequest {}).await.unwrap().into_inner();
    assert_eq!((info.model_id.as_str(), info.max_running, info.context_length), ("tiny", 2, 256));
    let finished = last_event(client.generate(request("hello", 4)).await.unwrap().into_inner()).await;
    assert!(matches!(finished, Event::Finished(f) if f.reason() == v1::FinishReason::Length));

    let mut watch =
        health.watch(HealthCheckRequest { service: "canopy.v1.Worker".into() }).await.unwrap().into_inner();
    assert_eq!(watch.message().await.unwrap().unwrap().status(), ServingStatus::Serving);
    let mut running = client.generate(request("hello", 40)).await.unwrap().into_inner();
    assert!(matches!(running.message().await.unwrap().unwrap().event, Some(Event::Started(_))));

    let killed = Command::new("kill").args(["-TERM", &child.id().to_string()]).status().unwrap();
    assert!(killed.success());
    assert_eq!(watch.message().await.unwrap().unwrap().status(), ServingStatus::NotServing);
    let refused = client.generate(request("hi", 2)).await.unwrap_err();
    assert_eq!(refused.code(), tonic::Code::Unavailable, "{refused:?}");
    let finished = last_event(running).await;
    assert!(matches!(finished, Event::Finished(f) if f.reason() == v1::FinishReason::Length));
    drop(watch);

    let status = tokio::task::spawn_blocking(move || child.wait()).await.unwrap().unwrap();
    assert!(status.success(), "{status:?}");
}

#[test]
fn a_missing_model_is_a_clear_error() {
    let out = Command::new(env!("CARGO_BIN_EXE_canopy"))
        .args(["worker", "--model", "/nonexistent/model.gguf", "--listen", "127.0.0.1:0"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("/nonexistent/model.gguf"), "{stderr}");
    assert!(out.stdout.is_empty());
}
