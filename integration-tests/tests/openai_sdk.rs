//! The official `openai` Python SDK as a client of `canopy serve`: python/openai_sdk_check.py
//! runs chat (whole and streamed), completions and models and asserts on the parsed objects.
//!
//! Runs `$CANOPY_PYTHON` (default `python3`). Without a Python that can `import openai` the test
//! is skipped, unless `CANOPY_REQUIRE_ORACLE=1` (scripts/test.sh sets it), which makes that a
//! failure.

use std::process::{Command, Stdio};

use canopy_integration_tests::MODEL_ID;
use canopy_integration_tests::cluster::start_serve;

const SCRIPT: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/python/openai_sdk_check.py");

/// The Python to use, or `None` (after saying so) when the SDK is unavailable and not required.
fn python_with_openai() -> Option<String> {
    let python = std::env::var("CANOPY_PYTHON").unwrap_or_else(|_| "python3".to_owned());
    let importable = Command::new(&python)
        .args(["-c", "import openai"])
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|status| status.success());
    if importable {
        return Some(python);
    }
    assert!(
        std::env::var("CANOPY_REQUIRE_ORACLE").as_deref() != Ok("1"),
        "CANOPY_REQUIRE_ORACLE=1 but {python} cannot import openai (pip install -r scripts/requirements-test.txt)"
    );
    println!("skipped: {python} cannot import openai");
    None
}

#[test]
fn the_openai_python_sdk_gets_what_it_expects() {
    let Some(python) = python_with_openai() else { return };
    let serve = start_serve(&[]);
    let output = Command::new(python)
        .arg(SCRIPT)
        .arg(format!("http://{}/v1", serve.address))
        .arg(MODEL_ID)
        .output()
        .expect("python runs");
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "the SDK check failed:\n{stdout}\n{stderr}");
    assert!(stdout.contains("all as expected"), "{stdout}");
}
