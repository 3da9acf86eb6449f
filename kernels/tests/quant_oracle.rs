//! Checks the quant kernels against gguf-py (the `gguf` Python package), an implementation
//! independent of ours: type sizes, and dequantization bit for bit on random blocks and on blocks
//! our quantizers produce. gguf-py has no Q8_K decoder, so the oracle script decodes Q8_K itself
//! with numpy from ggml's layout (`d: f32, qs: [i8; 256], bsums: [i16; 16]`).
//!
//! Needs `$CANOPY_PYTHON` (default `python3`) with `gguf` and `numpy`; skips without them unless
//! `CANOPY_REQUIRE_ORACLE=1`.

mod common;

use std::collections::HashMap;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use canopy_kernels::quant::{
    GgmlType, dequantize_row, is_dequantize_supported, is_quantize_supported, quantize_row,
};
use common::{Floats, Rng, gaussian_row, random_blocks};

/// Reads jobs `OP TYPE SRC DST` from stdin. `dequantize` decodes the bytes in SRC and writes
/// little-endian f32s to DST; `quantize` encodes the f32s in SRC (float types only, which have a
/// single right answer) and writes the bytes to DST. `sizes` prints `NAME ID BLOCK_SIZE TYPE_SIZE`
/// for every type gguf-py knows.
const ORACLE_SCRIPT: &str = r#"
import sys
import numpy as np
import gguf
from gguf.constants import GGML_QUANT_SIZES, GGMLQuantizationType as T

def dequantize(name, raw):
    qt = T[name]
    if qt == T.Q8_K:
        blocks = raw.reshape(-1, 292)
        d = blocks[:, :4].copy().view('<f4')
        q = blocks[:, 4:260].copy().view(np.int8).astype(np.float32)
        return d * q
    return gguf.quants.dequantize(raw.reshape(1, -1), qt)

for line in sys.stdin:
    op, *args = line.split()
    if op == 'sizes':
        for qt, (block, size) in GGML_QUANT_SIZES.items():
            print(qt.name, int(qt), block, size)
    elif op == 'dequantize':
        name, src, dst = args
        out = dequantize(name, np.fromfile(src, dtype=np.uint8))
        np.ascontiguousarray(out, dtype='<f4').tofile(dst)
    elif op == 'quantize':
        name, src, dst = args
        out = gguf.quants.quantize(np.fromfile(src, dtype='<f4').reshape(1, -1), T[name])
        np.ascontiguousarray(out).view(np.uint8).tofile(dst)
    else:
        raise SystemExit('unknown op ' + op)
"#;

/// The Python to run, or `None` (after printing why) when the oracle is unavailable and not
/// required.
fn oracle_python() -> Option<String> {
    let python = std::env::var("CANOPY_PYTHON").unwrap_or_else(|_| "python3".to_owned());
    let usable = Command::new(&python)
        .args(["-c", "import gguf, numpy"])
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if usable {
        return Some(python);
    }
    assert!(
        std::env::var("CANOPY_REQUIRE_ORACLE").as_deref() != Ok("1"),
        "CANOPY_REQUIRE_ORACLE=1 but {python} cannot import gguf and numpy"
    );
    println!("skipped: {python} cannot import gguf and numpy");
    None
}

/// Runs the oracle script on `jobs` (one line each) and returns its stdout.
fn run_oracle(python: &str, jobs: &[String]) -> String {
    let mut child = Command::new(python)
        .args(["-c", ORACLE_SCRIPT])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start the oracle");
    let mut stdin = child.stdin.take().expect("oracle stdin");
    for job in jobs {
        writeln!(stdin, "{job}").expect("write an oracle job");
    }
    drop(stdin);
    let output = child.wait_with_output().expect("run the oracle");
    assert!(output.status.success(), "oracle failed: {}", String::from_utf8_lossy(&output.stderr));
    String::from_utf8(output.stdout).expect("oracle output is UTF-8")
}

/// A scratch directory removed on drop.
struct ScratchDir(PathBuf);

impl ScratchDir {
    fn new(tag: &str) -> Self {
        let dir = std::env::temp_dir().join(format!("canopy-quant-oracle-{}-{tag}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("create scratch dir");
        Self(dir)
    }

    fn path(&self, name: &str) -> PathBuf {
        self.0.join(name)
    }
}

impl Drop for ScratchDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// gguf-py's name of a type.
fn oracle_name(ty: GgmlType) -> String {
    ty.name().to_uppercase()
}

fn read_f32s(path: &Path) -> Vec<f32> {
    let bytes = std::fs::read(path).expect("read oracle output");
    bytes.chunks_exact(4).map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]])).collect()
}

/// Decodes each `(type, bytes)` with gguf-py and with [`dequantize_row`] and asserts identical
/// bits for every element.
fn assert_dequantize_matches_oracle(python: &str, dir: &ScratchDir, cases: &[(GgmlType, Vec<u8>)]) {
    let mut jobs = Vec::new();
    for (i, (ty, bytes)) in cases.iter().enumerate() {
        let src = dir.path(&format!("{i}.in"));
        std::fs::write(&src, bytes).expect("write blocks");
        let dst = dir.path(&format!("{i}.out"));
        jobs.push(format!("dequantize {} {} {}", oracle_name(*ty), src.display(), dst.display()));
    }
    run_oracle(python, &jobs);
    for (i, (ty, bytes)) in cases.iter().enumerate() {
        let expected = read_f32s(&dir.path(&format!("{i}.out")));
        let n = bytes.len() / ty.type_size() * ty.block_size();
        assert_eq!(expected.len(), n, "{ty}: oracle returned the wrong element count");
        let mut ours = vec![0f32; n];
        dequantize_row(*ty, bytes, &mut ours).expect("our dequantize accepts the blocks");
        for (j, (&theirs, &ours)) in expected.iter().zip(&ours).enumerate() {
            assert_eq!(
                theirs.to_bits(),
                ours.to_bits(),
                "{ty} case {i} element {j} (block {}): gguf-py {theirs:e}, ours {ours:e}",
                j / ty.block_size()
            );
        }
    }
}

#[test]
fn type_sizes_match_gguf_py() {
    let Some(python) = oracle_python() else { return };
    let listing = run_oracle(&python, &["sizes".to_owned()]);
    let known: HashMap<&str, (u32, usize, usize)> = listing
        .lines()
        .map(|line| {
            let fields: Vec<&str> = line.split_whitespace().collect();
            let parse = |i: usize| fields[i].parse::<usize>().expect("a number");
            (fields[0], (parse(1) as u32, parse(2), parse(3)))
        })
        .collect();
    for ty in GgmlType::ALL {
        let name = oracle_name(ty);
        let &(id, block_size, type_size) =
            known.get(name.as_str()).unwrap_or_else(|| panic!("gguf-py does not know {name}"));
        // gguf-py still lists Q8_1 with ggml's old two-f32 header (40 bytes); ggml's block_q8_1
        // has held two f16s (36 bytes) since 2024. GGUF files never store Q8_1 (ggml uses it only
        // for activations), so gguf-py never had to notice.
        let type_size = if ty == GgmlType::Q8_1 && type_size == 40 { 36 } else { type_size };
        assert_eq!((ty.id(), ty.block_size(), ty.type_size()), (id, block_size, type_size), "{ty}");
    }
}

#[test]
fn dequantize_matches_gguf_py_on_random_blocks() {
    let Some(python) = oracle_python() else { return };
    let dir = ScratchDir::new("random");
    let mut rng = Rng::new(0x5eed_0001);
    let mut cases = Vec::new();
    for ty in GgmlType::ALL.into_iter().filter(|&ty| is_dequantize_supported(ty)) {
        // Float types need many elements to cover their bit patterns; block formats a few blocks.
        let n_blocks = if ty.block_size() == 1 { 4096 } else { 64 };
        cases.push((ty, random_blocks(ty, n_blocks, &mut rng, Floats::AnyFinite)));
        cases.push((ty, random_blocks(ty, n_blocks, &mut rng, Floats::Moderate)));
    }
    assert_dequantize_matches_oracle(&python, &dir, &cases);
}

#[test]
fn dequantize_matches_gguf_py_on_quantized_blocks() {
    let Some(python) = oracle_python() else { return };
    let dir = ScratchDir::new("quantized");
    let mut rng = Rng::new(0x5eed_0002);
    let mut cases = Vec::new();
    for ty in GgmlType::ALL.into_iter().filter(|&ty| is_quantize_supported(ty)) {
        for scale in [1e-3, 1.0, 300.0] {
            let row = gaussian_row(4 * 256, scale, &mut rng);
            let mut bytes = vec![0u8; row.len() / ty.block_size() * ty.type_size()];
            quantize_row(ty, &row, &mut bytes).unwrap();
            cases.push((ty, bytes));
        }
    }
    assert_dequantize_matches_oracle(&python, &dir, &cases);
}

#[test]
fn float_quantize_matches_gguf_py_byte_for_byte() {
    let Some(python) = oracle_python() else { return };
    let dir = ScratchDir::new("float");
    let mut rng = Rng::new(0x5eed_0003);
    // Wide magnitudes (including f16 overflow and subnormals), exact ties and non-finite values.
    let mut row: Vec<f32> = (0..4096).map(|i| rng.gaussian() * 10f32.powi(i % 12 - 6)).collect();
    row.extend([1.0 + 2f32.powi(-8), 1.0 + 3.0 * 2f32.powi(-8), 65520.0, -1e9, f32::INFINITY, -0.0]);
    let src = dir.path("row.in");
    std::fs::write(&src, row.iter().flat_map(|v| v.to_le_bytes()).collect::<Vec<u8>>()).unwrap();
    for ty in [GgmlType::F32, GgmlType::F16, GgmlType::Bf16] {
        let dst = dir.path(&format!("{ty}.out"));
        run_oracle(&python, &[format!("quantize {} {} {}", oracle_name(ty), src.display(), dst.display())]);
        let expected = std::fs::read(&dst).unwrap();
        let mut ours = vec![0u8; row.len() * ty.type_size()];
        quantize_row(ty, &row, &mut ours).unwrap();
        for (i, (theirs, ours)) in
            expected.chunks(ty.type_size()).zip(ours.chunks(ty.type_size())).enumerate()
        {
            assert_eq!(theirs, ours, "{ty} element {i}: {}", row[i]);
        }
        assert_eq!(expected.len(), ours.len(), "{ty}");
    }
}
