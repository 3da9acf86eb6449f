//! Matrix products against the CPU: every weight type and batch size, the int8 tensor-core
//! kernels, several projections per launch, and the int8 copies of their inputs.

use super::*;

#[test]
fn matmul_matches_cpu_for_every_supported_type_and_batch() {
    let Some(gpu) = cuda() else { return };
    let mut rng = Rng::new(2);
    // 37 rows leave a partial block of rows. 256 columns leave warps without a group of blocks,
    // 1280 a partial group (five Q4_K blocks), 5376 more groups than warps (each warp loops);
    // 1030 columns are no whole number of 16-byte loads for the element-wise formats. 2, 3 and 4
    // input rows take the small-batch kernels (3 a partial tile), 5, 8 and 11 the batch kernel for
    // the element-wise formats and mmq for the block-quantized ones; 70 take the GEMM.
    let rows = 37;
    let element_wise = [GgmlType::F32, GgmlType::F16, GgmlType::Bf16].map(|ty| (ty, 1030));
    let shapes = WEIGHT_TYPES.iter().flat_map(|&ty| [(ty, 256), (ty, 1280), (ty, 5376)]).chain(element_wise);
    for (ty, cols) in shapes {
        matmul_parity(gpu, ty, (rows, cols), &[1, 2, 3, 4, 5, 8, 11, 70], &mut rng);
    }
    // One input row over more blocks of four weight rows than the GPU holds at once (1025 here,
    // the last one partial), with one group of columns (warps without one) or several per warp.
    for ty in WEIGHT_TYPES {
        for cols in [512, 5376] {
            matmul_parity(gpu, ty, (4099, cols), &[1], &mut rng);
        }
    }
}

/// A random `rows x cols` weight of type `ty` by random inputs of each batch size in `batches`,
/// on the device against the CPU.
fn matmul_parity(
    gpu: &CudaBackend,
    ty: GgmlType,
    (rows, cols): (usize, usize),
    batches: &[usize],
    rng: &mut Rng,
) {
    let cpu = CpuBackend::new();
    let bytes = random_weight(ty, rows, cols, rng);
    let cpu_weight = cpu.upload_weight(ty, rows, cols, &bytes).unwrap();
    let gpu_weight = gpu.upload_weight(ty, rows, cols, &bytes).unwrap();
    for &n_rows in batches {
        let x = gaussian_row(n_rows * cols, 1.0, rng);
        let xs = (&cpu.upload(&x).unwrap(), &gpu.upload(&x).unwrap());
        let label = format!("matmul {ty} {rows}x{cols} by {n_rows}");
        check_matmul(&label, (&cpu, gpu), xs, (&cpu_weight, &gpu_weight), n_rows);
    }
}

/// See the module docs: the block-quantized kernels round activations to int8 up to 64 rows;
/// larger batches, and batches of 16 rows or more of the element-wise formats, take the
/// tensor-core GEMM, whose operands are rounded to 16 bits.
pub(super) fn matmul_tolerance(ty: GgmlType, n_rows: usize) -> f32 {
    let element_wise = matches!(ty, GgmlType::F32 | GgmlType::F16 | GgmlType::Bf16);
    match ty {
        _ if n_rows < 16 && element_wise => 2e-5,
        _ if n_rows <= 64 && !element_wise => 2e-2,
        GgmlType::F32 => 2e-5,
        GgmlType::Bf16 => 1e-2,
        _ => 2e-3,
    }
}

/// `x · weightᵀ` on both backends, each from its own copy of `x` and of the weight, compared within
/// the weight type's tolerance at `n_rows`.
pub(super) fn check_matmul(
    label: &str,
    (cpu, gpu): (&CpuBackend, &CudaBackend),
    (cpu_x, gpu_x): (&<CpuBackend as Backend>::Tensor, &<CudaBackend as Backend>::Tensor),
    (cpu_weight, gpu_weight): (&<CpuBackend as Backend>::Weight, &<CudaBackend as Backend>::Weight),
    n_rows: usize,
) {
    let m = n_rows * gpu_weight.rows();
    let (mut cpu_out, mut gpu_out) = (cpu.zeros(m).unwrap(), gpu.zeros(m).unwrap());
    cpu.matmul(cpu_x, cpu_weight, n_rows, &mut cpu_out).unwrap();
    gpu.matmul(gpu_x, gpu_weight, n_rows, &mut gpu_out).unwrap();
    let tolerance = matmul_tolerance(gpu_weight.ty(), n_rows);
    check(label, &fetch(gpu, &gpu_out, m), &fetch(cpu, &cpu_out, m), tolerance);
}

/// Verify-sized batches of the block-quantized formats take the int8 tensor-core kernels (mmq.cu).
/// 37 and 100 weight rows leave part of a 64-row tile empty; 256 columns are one group of the K
/// loop, 1280 five (K not split), 5376 twenty-one (split five ways, the last split shorter) and
/// 12800 fifty (split twelve ways by five groups, the last two splits empty, on all but the
/// smallest GPUs); 5, 8, 16, 23, 32 and 64 input rows fill or leave part of the tiles of 8, 16,
/// 24, 32 and 64.
#[test]
fn verify_batches_match_cpu_for_every_quantized_type() {
    let Some(gpu) = cuda() else { return };
    let mut rng = Rng::new(12);
    for ty in [GgmlType::Q8_0, GgmlType::Q4K, GgmlType::Q5K, GgmlType::Q6K] {
        for (rows, cols) in
            [37, 100].into_iter().flat_map(|rows| [256, 1280, 5376, 12800].map(|cols| (rows, cols)))
        {
            matmul_parity(gpu, ty, (rows, cols), &[5, 8, 16, 23, 32, 64], &mut rng);
        }
    }
}

#[test]
fn unsupported_weight_types_are_refused() {
    let Some(gpu) = cuda() else { return };
    let bytes = vec![0u8; GgmlType::Q4_0.type_size()];
    let refused = gpu.upload_weight(GgmlType::Q4_0, 1, 32, &bytes).unwrap_err();
    assert_eq!(refused, BackendError::Unsupported { op: "upload_weight", ty: GgmlType::Q4_0 });
}

/// Norms and SwiGLU write the int8 copy of their output that the quantized matmuls read instead
/// of quantizing it themselves (rows of whole blocks of 32: per-warp and per-block norm kernels,
/// SwiGLU over 4 and 23 rows). The matmul after each must match the CPU's.
#[test]
fn int8_copies_written_by_norms_and_swiglu_feed_the_matmuls() {
    let Some(gpu) = cuda() else { return };
    let cpu = CpuBackend::new();
    let mut rng = Rng::new(14);
    for (cols, n_rows) in [(512, 1), (512, 23), (2048, 4), (4096, 1)] {
        let ty = GgmlType::Q4K;
        let rows = 96;
        let bytes = random_weight(ty, rows, cols, &mut rng);
        let weights = (
            cpu.upload_weight(ty, rows, cols, &bytes).unwrap(),
            gpu.upload_weight(ty, rows, cols, &bytes).unwrap(),
        );
        let n = n_rows * cols;
        let [residual, delta, gate, up] = [(); 4].map(|_| gaussian_row(n, 1.0, &mut rng));
        let norm = gaussian_row(cols, 1.0, &mut rng);
        // add_rms_norm, then the matmul.
        let (mut cpu_residual, mut gpu_residual) =
            (cpu.upload(&residual).unwrap(), gpu.upload(&residual).unwrap());
        let (mut cpu_x, mut gpu_x) = (cpu.zeros(n).unwrap(), gpu.zeros(n).unwrap());
        let (cpu_norm, gpu_norm) = (cpu.upload(&norm).unwrap(), gpu.upload(&norm).unwrap());
        cpu.add_rms_norm(
            &mut cpu_residual,
            &cpu.upload(&delta).unwrap(),
            &cpu_norm,
            n_rows,
            1e-6,
            &mut cpu_x,
        )
        .unwrap();
        gpu.add_rms_norm(
            &mut gpu_residual,
            &gpu.upload(&delta).unwrap(),
            &gpu_norm,
            n_rows,
            1e-6,
            &mut gpu_x,
        )
        .unwrap();
        let backends = (&cpu, gpu);
        let weights = (&weights.0, &weights.1);
        check_matmul(
            &format!("norm -> matmul {cols} cols by {n_rows}"),
            backends,
            (&cpu_x, &gpu_x),
            weights,
            n_rows,
        );
        // rms_norm of the new residual, then the matmul: the copy is rewritten.
        cpu.rms_norm(&cpu_residual, &cpu_norm, n_rows, 1e-6, &mut cpu_x).unwrap();
        gpu.rms_norm(&gpu_residual, &gpu_norm, n_rows, 1e-6, &mut gpu_x).unwrap();
        let label = format!("rms_norm -> matmul {cols} cols by {n_rows}");
        check_matmul(&label, backends, (&cpu_x, &gpu_x), weights, n_rows);
        // SwiGLU, then the matmul.
        let (cpu_gate, gpu_gate) = (cpu.upload(&gate).unwrap(), gpu.upload(&gate).unwrap());
        let (cpu_up, gpu_up) = (cpu.upload(&up).unwrap(), gpu.upload(&up).unwrap());
        cpu.swiglu(&cpu_gate, &cpu_up, n, &mut cpu_x).unwrap();
        gpu.swiglu(&gpu_gate, &gpu_up, n, &mut gpu_x).unwrap();
        check(&format!("swiglu {n}"), &fetch(gpu, &gpu_x, n), &fetch(&cpu, &cpu_x, n), 2e-6);
        let label = format!("swiglu -> matmul {cols} cols by {n_rows}");
        check_matmul(&label, backends, (&cpu_x, &gpu_x), weights, n_rows);
    }
}

/// The int8 copy a quantized matmul keeps of its input must not outlive the input's contents:
/// neither when an op rewrites the input between two matmuls, nor across graph replays, whose
/// ops the host never sees. The batch of 23 rows takes the int8 tensor-core kernel with K split in
/// two (eight groups of 256 columns), whose arrival counters must be back at zero after every
/// launch and replay.
#[test]
fn quantized_matmul_requantizes_a_rewritten_input() {
    /// `x = rms_norm(src)`, then `out = x · wᵀ`.
    struct Step<B: Backend> {
        src: B::Tensor,
        norm: B::Tensor,
        weight: B::Weight,
        x: B::Tensor,
        out: B::Tensor,
    }
    impl<B: Backend> Step<B> {
        fn new(
            b: &B,
            source: &[f32],
            norm: &[f32],
            (ty, rows, cols, bytes): (GgmlType, usize, usize, &[u8]),
        ) -> Self {
            Step {
                src: b.upload(source).unwrap(),
                norm: b.upload(norm).unwrap(),
                weight: b.upload_weight(ty, rows, cols, bytes).unwrap(),
                x: b.zeros(source.len()).unwrap(),
                out: b.zeros(source.len() / cols * rows).unwrap(),
            }
        }
        fn run(&mut self, b: &B, n_rows: usize) -> Result<(), BackendError> {
            b.rms_norm(&self.src, &self.norm, n_rows, 1e-6, &mut self.x)?;
            b.matmul(&self.x, &self.weight, n_rows, &mut self.out)
        }
        fn shift_source(&mut self, b: &B, delta: &[f32]) {
            b.add(&mut self.src, &b.upload(delta).unwrap(), delta.len()).unwrap();
        }
    }

    let Some(gpu) = cuda() else { return };
    let cpu = CpuBackend::new();
    let mut rng = Rng::new(9);
    for (ty, rows, cols, n_rows) in [(GgmlType::Q4K, 64, 512, 2), (GgmlType::Q4K, 100, 2048, 23)] {
        let n = n_rows * cols;
        let bytes = random_weight(ty, rows, cols, &mut rng);
        let norm = gaussian_row(cols, 1.0, &mut rng);
        let source = gaussian_row(n, 1.0, &mut rng);
        let mut on_cpu = Step::new(&cpu, &source, &norm, (ty, rows, cols, &bytes));
        let mut on_gpu = Step::new(gpu, &source, &norm, (ty, rows, cols, &bytes));
        let mut compare = |label: &str, on_gpu: &mut Step<CudaBackend>, replay: Option<&CudaGraphExec>| {
            let delta = gaussian_row(n, 1.0, &mut rng);
            on_cpu.shift_source(&cpu, &delta);
            on_gpu.shift_source(gpu, &delta);
            on_cpu.run(&cpu, n_rows).unwrap();
            match replay {
                Some(graph) => gpu.replay(graph).unwrap(),
                None => on_gpu.run(gpu, n_rows).unwrap(),
            }
            let len = n_rows * rows;
            check(
                label,
                &fetch(gpu, &on_gpu.out, len),
                &fetch(&cpu, &on_cpu.out, len),
                matmul_tolerance(ty, n_rows),
            );
        };
        compare("matmul after its input was rewritten, 1", &mut on_gpu, None);
        compare("matmul after its input was rewritten, 2", &mut on_gpu, None);
        // The graph's matmul must quantize what the graph's norm writes at each replay.
        let graph = gpu.record(|| on_gpu.run(gpu, n_rows)).unwrap().unwrap();
        compare("replayed matmul, 1", &mut on_gpu, Some(&graph));
        compare("replayed matmul, 2", &mut on_gpu, Some(&graph));
        compare("matmul after replays", &mut on_gpu, None);
    }
}

/// Projections of one input by several weights: runs of one quantized type share a launch (up to
/// three), other types break the run, except that a Q4_K run takes the Q6_K weights after it into
/// its launch for one input row and for the f16 mmq batches, 5 and 23 rows here (9 + 20 rows, and
/// 40 + 7 + 3); every output must equal its own matmul on the CPU.
#[test]
fn matmuls_match_cpu_per_projection() {
    let Some(gpu) = cuda() else { return };
    let cpu = CpuBackend::new();
    let mut rng = Rng::new(11);
    // Ten groups of 256 columns: the int8 tensor-core kernels split K in two.
    let cols = 2560;
    let weights = [
        (GgmlType::Q4K, 37),
        (GgmlType::Q4K, 64),
        (GgmlType::Q4K, 5),
        (GgmlType::Q4K, 9),
        (GgmlType::Q6K, 20),
        (GgmlType::F16, 12),
        (GgmlType::Q4K, 40),
        (GgmlType::Q6K, 7),
        (GgmlType::Q6K, 3),
        (GgmlType::Q8_0, 33),
    ];
    let uploaded: Vec<_> = weights
        .iter()
        .map(|&(ty, rows)| {
            let bytes = random_weight(ty, rows, cols, &mut rng);
            (
                ty,
                rows,
                cpu.upload_weight(ty, rows, cols, &bytes).unwrap(),
                gpu.upload_weight(ty, rows, cols, &bytes).unwrap(),
            )
        })
        .collect();
    // 23 rows take the int8 tensor-core kernels for the quantized weights, cuBLAS for the F16 one.
    for n_rows in [1, 5, 23, 70] {
        let x = gaussian_row(n_rows * cols, 1.0, &mut rng);
        let (cpu_x, gpu_x) = (cpu.upload(&x).unwrap(), gpu.upload(&x).unwrap());
        let mut outs: Vec<_> = weights.iter().map(|&(_, rows)| gpu.zeros(n_rows * rows).unwrap()).collect();
        let mut projections: Vec<_> = uploaded.iter().map(|(_, _, _, w)| w).zip(outs.iter_mut()).collect();
        gpu.matmuls(&gpu_x, n_rows, &mut projections).unwrap();
        for ((ty, rows, cpu_w, _), gpu_out) in uploaded.iter().zip(&outs) {
            let mut cpu_out = cpu.zeros(n_rows * rows).unwrap();
            cpu.matmul(&cpu_x, cpu_w, n_rows, &mut cpu_out).unwrap();
            let n = n_rows * rows;
            let label = format!("matmuls {ty} {rows}x{cols} by {n_rows}");
            check(&label, &fetch(gpu, gpu_out, n), &fetch(&cpu, &cpu_out, n), matmul_tolerance(*ty, n_rows));
        }
    }
}

/// `swiglu_matmuls` against the CPU: one input row takes the decode kernels, then with 256 weight
/// rows the SwiGLU that writes the int8 copy and with 100 (not whole blocks of 32) the one
/// without; 23 input rows take mmq. With 256 rows the activations then feed a down projection
/// through the copies made of them, at 23 rows with outputs past f16's range (random weights of
/// moderate size make SwiGLU outputs in the millions).
#[test]
fn swiglu_matmuls_match_cpu() {
    let Some(gpu) = cuda() else { return };
    let cpu = CpuBackend::new();
    let mut rng = Rng::new(15);
    let cols = 1024;
    for ty in [GgmlType::Q8_0, GgmlType::Q4K, GgmlType::Q6K] {
        let mut weight = |rows: usize, cols: usize| {
            let bytes = random_weight(ty, rows, cols, &mut rng);
            (
                cpu.upload_weight(ty, rows, cols, &bytes).unwrap(),
                gpu.upload_weight(ty, rows, cols, &bytes).unwrap(),
            )
        };
        let cases = [(256, 1), (100, 1), (256, 23)].map(|(rows, n_rows)| {
            (rows, n_rows, weight(rows, cols), weight(rows, cols), (rows == 256).then(|| weight(64, rows)))
        });
        for (rows, n_rows, gate_weight, up_weight, down_weight) in &cases {
            let (rows, n_rows, m) = (*rows, *n_rows, *rows * *n_rows);
            let x = gaussian_row(n_rows * cols, 1.0, &mut rng);
            let (cpu_x, gpu_x) = (cpu.upload(&x).unwrap(), gpu.upload(&x).unwrap());
            let [mut cpu_gate, mut cpu_up, mut cpu_act] = [(); 3].map(|_| cpu.zeros(m).unwrap());
            let [mut gpu_gate, mut gpu_up, mut gpu_act] = [(); 3].map(|_| gpu.zeros(m).unwrap());
            cpu.swiglu_matmuls(
                &cpu_x,
                n_rows,
                (&gate_weight.0, &mut cpu_gate),
                (&up_weight.0, &mut cpu_up),
                &mut cpu_act,
            )
            .unwrap();
            gpu.swiglu_matmuls(
                &gpu_x,
                n_rows,
                (&gate_weight.1, &mut gpu_gate),
                (&up_weight.1, &mut gpu_up),
                &mut gpu_act,
            )
            .unwrap();
            let label = format!("swiglu_matmuls {ty} {rows}x{cols} by {n_rows}");
            let tolerance = matmul_tolerance(ty, n_rows);
            let (gate, up) = (fetch(gpu, &gpu_gate, m), fetch(gpu, &gpu_up, m));
            check(&format!("{label}: gate"), &gate, &fetch(&cpu, &cpu_gate, m), tolerance);
            check(&format!("{label}: up"), &up, &fetch(&cpu, &cpu_up, m), tolerance);
            // SwiGLU of the device's own gate and up, so that the matmuls' error does not
            // compound.
            let mut want_act = cpu.zeros(m).unwrap();
            cpu.swiglu(&cpu.upload(&gate).unwrap(), &cpu.upload(&up).unwrap(), m, &mut want_act).unwrap();
            let act = fetch(gpu, &gpu_act, m);
            check(&format!("{label}: act"), &act, &fetch(&cpu, &want_act, m), 2e-6);
            if let Some(down) = down_weight {
                let cpu_act = cpu.upload(&act).unwrap();
                let label = format!("{label}: down");
                check_matmul(&label, (&cpu, gpu), (&cpu_act, &gpu_act), (&down.0, &down.1), n_rows);
            }
        }
    }
}
