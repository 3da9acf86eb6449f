//! `canopy bench` through the real binary, with tiny sizes.

use std::process::{Command, Output};

const MODEL: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../models/testdata/models/qwen3-tiny-q8_0.gguf");

fn canopy(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_canopy")).args(args).output().expect("the canopy binary runs")
}

const TINY: [&str; 10] =
    ["--prefill", "8,16", "--decode", "4", "--forward", "1,3", "--repetitions", "3", "--warmup", "1"];

#[test]
fn bench_prints_a_table_with_every_test() {
    let out = canopy(&[&["bench", MODEL][..], &TINY[..]].concat());
    let stdout = String::from_utf8(out.stdout).unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let lines: Vec<&str> = stdout.lines().take_while(|line| line.starts_with('|')).collect();
    assert!(lines[0].starts_with("| model") && lines[0].contains("t/s"), "{stdout}");
    let tests: Vec<&str> = lines[2..].iter().map(|line| line.split('|').nth(3).unwrap().trim()).collect();
    assert_eq!(tests, ["pp8", "pp16", "tg4", "fwd1", "fwd3"]);
    for line in &lines[2..] {
        let rate: f64 = line.split('|').nth(6).unwrap().trim().parse().unwrap();
        assert!(rate > 0.0, "{line}");
    }
    // Below the table, the 3-token pass priced in one-token passes.
    let footer: Vec<&str> = stdout.lines().skip(lines.len()).collect();
    let cost = footer
        .iter()
        .find_map(|line| line.strip_prefix("fwd3: ")?.strip_suffix("x a one-token pass"))
        .unwrap_or_else(|| panic!("no cost of fwd3 in {stdout}"));
    assert!(cost.parse::<f64>().unwrap() > 0.0, "{stdout}");
}

#[test]
fn bench_json_is_valid_and_consistent() {
    let out = canopy(&[&["bench", MODEL, "--json"][..], &TINY[..]].concat());
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(report["backend"], "cpu");
    let results = report["results"].as_array().unwrap();
    assert_eq!(results.len(), 5);
    for result in results {
        let runs: Vec<f64> =
            result["runs_ms"].as_array().unwrap().iter().map(|run| run.as_f64().unwrap()).collect();
        assert_eq!(runs.len(), 3);
        let mut sorted = runs.clone();
        sorted.sort_by(f64::total_cmp);
        let median = result["median_ms"].as_f64().unwrap();
        assert!((median - sorted[1]).abs() < 1e-9, "{result}");
        let rate = result["tokens_per_second"].as_f64().unwrap();
        let tokens = result["tokens"].as_f64().unwrap();
        assert!((rate - tokens / (median / 1e3)).abs() <= 1e-6 * rate, "{result}");
    }
    // Only the several-token pass is priced in one-token passes: its median over fwd1's.
    let median = |i: usize| results[i]["median_ms"].as_f64().unwrap();
    let costs: Vec<Option<f64>> = results.iter().map(|r| r["cost_in_one_token_passes"].as_f64()).collect();
    assert_eq!(costs[..4], [None; 4]);
    let cost = costs[4].unwrap();
    assert!((cost - median(4) / median(3)).abs() <= 1e-9 * cost, "{cost}");
}

#[test]
fn sizes_beyond_the_context_are_skipped() {
    // The tiny model's context is 4096 positions.
    let out = canopy(&["bench", MODEL, "--json", "--prefill", "8,5000", "--decode", "0", "--forward", "2"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let tests: Vec<&str> =
        report["results"].as_array().unwrap().iter().map(|r| r["test"].as_str().unwrap()).collect();
    assert_eq!(tests, ["pp8", "fwd2"]);
    assert_eq!(report["skipped"], serde_json::json!(["pp5000"]));
}

#[test]
fn decode_and_forward_passes_run_at_every_depth() {
    let out = canopy(&[
        "bench",
        MODEL,
        "--json",
        "--prefill",
        "8",
        "--decode",
        "2",
        "--forward",
        "1,3",
        "--depths",
        "0,32",
        "--repetitions",
        "1",
    ]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let tests: Vec<&str> =
        report["results"].as_array().unwrap().iter().map(|r| r["test"].as_str().unwrap()).collect();
    assert_eq!(tests, ["pp8", "tg2", "fwd1", "fwd3", "tg2@d32", "fwd1@d32", "fwd3@d32"]);
}
