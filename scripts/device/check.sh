#!/usr/bin/env bash
# One device call: parity of every CUDA op with the CPU, the whole tiny model against its HF
# reference logits and CPU-vs-CUDA greedy ids,
# then `canopy bench` on the synthetic Qwen3 shapes. Binaries come prebuilt (stripped) in
# target/device/; results go to $OUT.
# Usage: scripts/device/check.sh [parity] [small] [8b] [verify] [kernels] [serve] [profile] [durations] [bf16] [ab]
#        [ab-verify] [ab-depths] [switches] [mmq-profile] [durations23] [verify-depth] [attention-profile]
#        [narrow] [skip] [lines]
# (default: parity small 8b). Build them here first with scripts/device/build.sh, or pack them with
# scripts/device/pack.sh and run with BIN=target/carry (`ab` needs pack.sh's revisions).
set -uo pipefail
bin=${BIN:-target/device}
out=${OUT:-/tmp/canopy-out}
mkdir -p "$out"
if [ -f "$bin/canopy.tar.xz" ]; then
    unpacked=/tmp/canopy-bin
    mkdir -p "$unpacked"
    for archive in "$bin"/*.tar.xz; do tar xJf "$archive" -C "$unpacked"; done
    cp "$bin"/backend_cuda "$bin"/qwen3_cuda "$bin"/cuda_matmul_timing "$unpacked"/
    bin=$unpacked
fi
steps=${*:-parity small 8b}
models=/tmp/canopy-models
mkdir -p "$models"
export CANOPY_KERNEL_CACHE=${CANOPY_KERNEL_CACHE:-/tmp/canopy-kernel-cache}
nvidia-smi --query-gpu=name,memory.total,clocks.max.sm,clocks.max.mem --format=csv | tee "$out/gpu.txt"

ldconfig -p | grep -E "libcublas\.|libnvrtc\." | head -4

has() { [[ " $steps " == *" $1 "* ]]; }
# The builds of pack.sh's revisions (canopy-<revision>), for the A/B steps.
packed_builds() { (cd "$bin" && ls canopy-* 2>/dev/null | grep -v '\.tar\.xz$'); }
# Nsight Compute's metrics for each stall reason's cycles per issued instruction.
stall_reasons="regex:smsp__average_warps_issue_stalled_.*_per_issue_active\.ratio"

# The synthetic models, made at most once a call. The 8B with --fast-fit: the kernels' time does
# not depend on the weights' values, and the searched fit costs over a minute of device time.
need_q06() { [ -f "$models/q06.gguf" ] || "$bin/canopy" synth --arch qwen3 --shape qwen3-0.6b --type q8_0 --out "$models/q06.gguf" >/dev/null; }
need_q8b() { [ -f "$models/q8b.gguf" ] || "$bin/canopy" synth --arch qwen3 --shape qwen3-8b --type q4_k_m --fast-fit --out "$models/q8b.gguf" >/dev/null; }

same_ids() {  # model prompt tokens
    local cpu cuda
    cpu=$("$bin/canopy" generate "$1" --prompt "$2" -n "$3" --ids --backend cpu 2>/dev/null)
    cuda=$("$bin/canopy" generate "$1" --prompt "$2" -n "$3" --ids --backend cuda 2>>"$out/generate.err")
    if [ "$cpu" == "$cuda" ]; then echo "ids equal: $1 ($3 tokens)"; else echo "IDS DIFFER: $1"; echo " cpu  $cpu"; echo " cuda $cuda"; fi
}

if has parity; then
    CANOPY_REQUIRE_CUDA=1 "$bin/backend_cuda" --test-threads 1 --nocapture >"$out/parity.txt" 2>&1
    echo "parity exit $?"; grep -E "^parity|test result|FAILED|panicked" "$out/parity.txt" | tail -40
    CARGO_MANIFEST_DIR=$PWD/models CANOPY_REQUIRE_CUDA=1 "$bin/qwen3_cuda" --test-threads 1 --nocapture >"$out/model.txt" 2>&1
    echo "model parity exit $?"; grep -E "relative L2|test result|FAILED|panicked" "$out/model.txt"
    same_ids models/testdata/models/qwen3-tiny-f32.gguf "Hello there" 24 | tee -a "$out/ids.txt"
    if command -v cuobjdump >/dev/null; then
        for cubin in "$CANOPY_KERNEL_CACHE"/*; do cuobjdump -res-usage "$cubin" 2>/dev/null; done >"$out/resources.txt"
        grep -A1 "matvec_q8_decode_q4_k\|matvec_q8_decode_q6_k\|mmq_q4_k_24\|mmq_q6_k_24" "$out/resources.txt" | grep -o "REG:[0-9]*\|STACK:[0-9]*\|LOCAL:[0-9]*" | tr '\n' ' '; echo
    fi
fi
if has small; then
    need_q06
    same_ids "$models/q06.gguf" "The quick brown fox" 32 | tee -a "$out/ids.txt"
    "$bin/canopy" bench "$models/q06.gguf" --backend cuda --long --repetitions 5 2>&1 | tee "$out/bench-q06.txt"
    # A/B: the same without programmatic dependent launch.
    CANOPY_CUDA_PDL=0 "$bin/canopy" bench "$models/q06.gguf" --backend cuda --decode 64 \
        --forward 1,23 --repetitions 5 2>&1 | tee "$out/bench-q06-nopdl.txt"
fi
if has 8b; then
    start=$(date +%s)
    need_q8b
    echo "synth 8b: $(( $(date +%s) - start )) s"
    same_ids "$models/q8b.gguf" "The quick brown fox" 16 | tee -a "$out/ids.txt"
    "$bin/canopy" bench "$models/q8b.gguf" --backend cuda --long --forward 1,2,4,8,16,23,32,64 --repetitions 3 \
        2>&1 | tee "$out/bench-q8b.txt"
    # A/B: without programmatic dependent launch; verify sizes on the f16 GEMM instead of mmq.
    CANOPY_CUDA_PDL=0 "$bin/canopy" bench "$models/q8b.gguf" --backend cuda --decode 64 \
        --forward 1,23 --repetitions 3 2>&1 | tee "$out/bench-q8b-nopdl.txt"
    CANOPY_CUDA_MMQ_MIN_ROWS=65 "$bin/canopy" bench "$models/q8b.gguf" --backend cuda --decode 0 \
        --forward 16,23,32,64 --repetitions 3 2>&1 | tee "$out/bench-q8b-gemm.txt"
fi
if has verify; then
    # Verify-sized forwards of both models with the GEMM from MIN_ROWS rows (default 4), recorded
    # graphs included, and greedy ids whose prompt prefill takes the GEMM.
    min_rows=${MIN_ROWS:-4}
    need_q06
    need_q8b
    for model in q06 q8b; do
        CANOPY_CUDA_GEMM_MIN_ROWS=$min_rows same_ids "$models/$model.gguf" "The quick brown fox jumps over" 16 | tee -a "$out/ids.txt"
        CANOPY_CUDA_GEMM_MIN_ROWS=$min_rows "$bin/canopy" bench "$models/$model.gguf" --backend cuda --prefill 512 \
            --decode 128 --forward 1,2,4,8,16,23,32,64 --repetitions 3 2>&1 | tee "$out/bench-$model-verify.txt"
    done
fi
if has kernels; then
    # Per-shape matmul time against the measured read bandwidth (8B decode and verify shapes).
    "$bin/cuda_matmul_timing" 1,8,23 2>&1 | tee "$out/kernels.txt"
fi
if has serve; then
    # `canopy serve` on the GPU end to end: one worker per visible GPU, a chat completion over HTTP.
    need_q06
    "$bin/canopy" serve --model "$models/q06.gguf" --listen 127.0.0.1:8123 >"$out/serve.log" 2>&1 &
    serve=$!
    for _ in $(seq 120); do grep -q "listening on" "$out/serve.log" && break; sleep 0.5; done
    # The served name is the GGUF's general.name; ask for whichever model the router lists first.
    model=$(curl -s http://127.0.0.1:8123/v1/models | python3 -c 'import json, sys; print(json.load(sys.stdin)["data"][0]["id"])')
    curl -s http://127.0.0.1:8123/v1/chat/completions -H 'content-type: application/json' \
        -d "{\"model\":\"$model\",\"messages\":[{\"role\":\"user\",\"content\":\"Hello\"}],\"max_tokens\":16}" |
        tee "$out/serve.json"; echo
    grep -i "backend\|cuda" "$out/serve.log" | head -5
    kill -TERM "$serve"; wait "$serve"; echo "serve exit $?"
fi
if has profile; then
    # Per-kernel device time of 8B decode steps and a 512-token prefill, graph nodes included.
    nsys=$(command -v nsys || ls /usr/local/cuda/bin/nsys /opt/nvidia/nsight-systems/*/bin/nsys 2>/dev/null | head -1)
    if [ -n "$nsys" ] && [ -f "$models/q8b.gguf" ]; then
        "$nsys" profile --cuda-graph-trace=node -o /tmp/canopy-decode --force-overwrite true \
            "$bin/canopy" bench "$models/q8b.gguf" --backend cuda --prefill 512 --decode 32 --forward 1 --repetitions 2 >/dev/null 2>&1
        "$nsys" stats --report cuda_gpu_kern_sum --format csv /tmp/canopy-decode.nsys-rep >"$out/kernels-q8b.csv" 2>/dev/null
        cut -d, -f1-4,9 "$out/kernels-q8b.csv" | head -25
    else
        echo "no nsys (or no 8b model): skipping the profile"
    fi
fi
# Each kernel's device time in one run of `canopy bench` on the 8B, every launch alone under
# Nsight Compute (graph nodes included), summed per kernel into $out/$1.txt; the rest of the
# arguments go to ncu before the command.
kernel_durations() {
    local name=$1
    shift
    local ncu
    ncu=$(command -v ncu || ls /usr/local/cuda/bin/ncu 2>/dev/null | head -1)
    if [ -z "$ncu" ]; then
        echo "no ncu: skipping the kernel durations"
        return
    fi
    need_q8b
    "$ncu" --metrics gpu__time_duration.sum --csv "$@" >"$out/$name.csv" 2>"$out/$name.err"
    python3 scripts/device/kernel_times.py "$out/$name.csv" | tee "$out/$name.txt"
}
if has durations; then
    # A few decode steps, past the op-by-op and recording steps: the launches of about one
    # replayed step. Which kernels a step spends its time in, and, summed against fwd1, how much
    # the overlap of programmatic launches and the gaps between kernels add or save.
    kernel_durations durations --launch-skip 700 --launch-count 340 \
        "$bin/canopy" bench "$models/q8b.gguf" --backend cuda --prefill 0 --decode 6 --forward 0 --repetitions 1 --warmup 0
fi
if has mmq-profile; then
    # Nsight Compute's throughput, memory, occupancy and stall sections, with each stall reason's
    # cycles per issued instruction and the L1/TEX pipe's wavefronts (global and shared), for the
    # first three f16 mmq launches of a 23-row verify forward (q/k/v, attn_output, gate/up): what
    # limits them.
    ncu=$(command -v ncu || ls /usr/local/cuda/bin/ncu 2>/dev/null | head -1)
    need_q8b
    wavefronts="l1tex__data_pipe_lsu_wavefronts.avg.pct_of_peak_sustained_elapsed,l1tex__data_pipe_lsu_wavefronts_mem_shared.sum,l1tex__data_bank_conflicts_pipe_lsu_mem_shared.sum"
    if [ -n "$ncu" ]; then
        "$ncu" --section SpeedOfLight --section MemoryWorkloadAnalysis --section Occupancy --section WarpStateStats \
            --section LaunchStats --metrics "$stall_reasons,$wavefronts" \
            -k regex:mmq_f16_q._k_ --launch-count 3 \
            "$bin/canopy" bench "$models/q8b.gguf" --backend cuda --prefill 0 --decode 0 --forward 23 \
            --repetitions 1 --warmup 0 >"$out/mmq-profile.txt" 2>&1
        grep -E "mmq_f16|Duration|Throughput|Hit Rate|l1tex|Achieved Occupancy|Theoretical Occupancy|Registers|Grid Size|Block Limit|Warp Cycles Per Issued|Issued Warp|Stall|stalled|One or More" "$out/mmq-profile.txt" | head -180
    else
        echo "no ncu: skipping the mmq profile"
    fi
fi
if has durations23; then
    # One verify forward of 23 rows, op by op (the first forward of a shape runs before its graph
    # is recorded).
    kernel_durations durations23 --launch-count 600 \
        "$bin/canopy" bench "$models/q8b.gguf" --backend cuda --prefill 0 --decode 0 --forward 23 --repetitions 1 --warmup 0
fi
if has verify-depth; then
    # Verify-sized forwards after long contexts, with the tensor-core attention (verify batches'
    # default), which reads each key and value row once for all the rows of a block, and with the
    # split kernels of attention.cu (the tensor-core kernel from 65 rows only), which read them
    # once per row or two.
    need_q8b
    for min_rows in 2 65; do
        echo "== CANOPY_CUDA_MMA_ATTENTION_MIN_ROWS=$min_rows"
        CANOPY_CUDA_MMA_ATTENTION_MIN_ROWS=$min_rows "$bin/canopy" bench "$models/q8b.gguf" --backend cuda \
            --prefill 0 --decode 0 --depths 0,4096,16384 --forward 1,8,16,23,32 --repetitions 3 2>&1 | grep -E "fwd"
    done | tee "$out/verify-depth.txt"
fi
if has attention-profile; then
    # Nsight Compute's throughput, memory and stall sections for the tensor-core attention in a
    # decode step (attention_mma_narrow) and in a 23-row verify (attention_mma_long, the long
    # context's) after 16384 tokens, prefilled in one chunk (36 launches): launch 37 is the first
    # decode step's first layer, 109 the verify's. What keeps it from the read bandwidth.
    ncu=$(command -v ncu || ls /usr/local/cuda/bin/ncu 2>/dev/null | head -1)
    need_q8b
    if [ -n "$ncu" ]; then
        for skip in 36 108; do
            "$ncu" --section SpeedOfLight --section MemoryWorkloadAnalysis --section Occupancy \
                --section WarpStateStats --section LaunchStats -k "regex:^attention_mma(_narrow|_long)?\$" --launch-skip "$skip" \
                --metrics "$stall_reasons" \
                --launch-count 1 "$bin/canopy" bench "$models/q8b.gguf" --backend cuda --prefill 0 \
                --prefill-chunk 16384 --depths 16384 --decode 2 --forward 23 --repetitions 1 --warmup 0 \
                >"$out/attention-profile-$skip.txt" 2>&1
            echo "== tensor-core attention launch $((skip + 1))"
            grep -E "Duration|DRAM Throughput|Memory Throughput|L2 Hit|L1/TEX Hit|Achieved Occupancy|Theoretical Occupancy|Registers Per|Grid Size|Dynamic Shared|Warp Cycles Per Issued|Stall|One or More|No Eligible|stalled" \
                "$out/attention-profile-$skip.txt" | awk '!/stalled/ || $NF + 0 >= 0.1' | head -40
        done
    else
        echo "no ncu: skipping the attention profile"
    fi
fi
if has narrow; then
    # Same-binary A/B of decode rows in narrow one-warp blocks (default) against wide ones
    # (CANOPY_CUDA_MMA_ATTENTION_NARROW=0), alternating, twice: the 8B on an empty context and
    # after 16384 tokens, the 0.6B after 4096.
    need_q8b
    need_q06
    for round in 1 2; do
        for narrow in 1 0; do
            echo "== CANOPY_CUDA_MMA_ATTENTION_NARROW=$narrow (round $round)"
            CANOPY_CUDA_MMA_ATTENTION_NARROW=$narrow "$bin/canopy" bench "$models/q8b.gguf" --backend cuda \
                --prefill 0 --decode 128 --depths 0,16384 --forward 1,8,23 --repetitions 3 2>&1 | grep -E "tg|fwd"
            CANOPY_CUDA_MMA_ATTENTION_NARROW=$narrow "$bin/canopy" bench "$models/q06.gguf" --backend cuda \
                --prefill 0 --decode 128 --depths 0,4096 --forward 1 --repetitions 3 2>&1 | grep -E "tg|fwd"
        done
    done | tee "$out/narrow.txt"
fi
if has skip; then
    # What each kernel family costs inside the replayed step (Nsight Systems is not on the device,
    # and Nsight Compute runs each launch alone): the 8B's fwd1, fwd8 and fwd23 with the family's
    # launches dropped (CANOPY_CUDA_SKIP_KERNELS, name prefixes; the outputs are then wrong)
    # against nothing dropped, two rounds. `attention_mma` drops the merge too; the q/k/v line is
    # the mixed Q4_K + Q6_K launch.
    need_q8b
    families="none attention_mma_merge attention_mma attention_inputs add_rms_norm,rms_norm swiglu round_f16_rows \
        matvec_q8_decode_q4_k_q6_k,mmq_f16_q4_k_q6_k \
        attention_mma,attention_inputs,add_rms_norm,rms_norm,swiglu,round_f16_rows matvec_q8,mmq_f16"
    for round in 1 2; do
        for skipped in $families; do
            echo "== skipped: $skipped (round $round)"
            CANOPY_CUDA_SKIP_KERNELS=${skipped#none} "$bin/canopy" bench "$models/q8b.gguf" --backend cuda \
                --prefill 0 --decode 0 --forward 1,8,23 --repetitions 3 2>&1 | grep -E "^\| .*fwd"
        done
    done | tee "$out/skip.txt"
fi
if has bf16; then
    "$bin/canopy" synth --arch qwen3 --shape qwen3-8b --type bf16 --out "$models/b8b.gguf" >/dev/null
    "$bin/canopy" bench "$models/b8b.gguf" --backend cuda --prefill 512 --decode 128 --forward 1,23 --repetitions 3 2>&1 | tee "$out/bench-b8b.txt"
fi
if has switches; then
    # The switchable paths: matmul and attention parity with the int8 mmq kernels instead of the
    # default f16 ones, and same-binary A/Bs of verify forwards (the f16 mmq kernels against the
    # int8 ones, and mmq from 2 rows against the dp4a pair and quad kernels).
    for filter in matmul attention; do
        CANOPY_CUDA_MMQ_F16=0 CANOPY_REQUIRE_CUDA=1 "$bin/backend_cuda" --test-threads 1 \
            --nocapture "$filter" >"$out/parity-switched-$filter.txt" 2>&1
        echo "$filter parity, int8 mmq: exit $?"; grep -E "test result|FAILED|panicked" "$out/parity-switched-$filter.txt"
    done
    need_q8b
    for round in 1 2; do
        for f16 in 1 0; do
            echo "== CANOPY_CUDA_MMQ_F16=$f16 (round $round)"
            CANOPY_CUDA_MMQ_F16=$f16 "$bin/canopy" bench "$models/q8b.gguf" --backend cuda --prefill 0 --decode 0 \
                --forward 1,8,16,23,32 --repetitions 3 2>&1 | grep -E "fwd"
        done
        # With the f16 kernels cheaper per weight, batches of 2 to 4 rows may now be faster on mmq
        # than on the dp4a pair and quad kernels.
        for min_rows in 5 2; do
            echo "== CANOPY_CUDA_MMQ_MIN_ROWS=$min_rows (round $round)"
            CANOPY_CUDA_MMQ_MIN_ROWS=$min_rows "$bin/canopy" bench "$models/q8b.gguf" --backend cuda --prefill 0 \
                --decode 0 --forward 2,3,4 --repetitions 3 2>&1 | grep -E "fwd"
        done
    done | tee "$out/switches.txt"
fi
if has lines; then
    # The decode kernels that read whole lines of the Q4_K and Q6_K tiles (session 37, opt-in by
    # CANOPY_CUDA_DECODE_LINES=1): matmul parity and 8B greedy ids with them, then a same-binary
    # A/B against the default decode kernels, twice.
    CANOPY_CUDA_DECODE_LINES=1 CANOPY_REQUIRE_CUDA=1 "$bin/backend_cuda" --test-threads 1 --nocapture matmul \
        >"$out/parity-lines.txt" 2>&1
    echo "matmul parity, line kernels: exit $?"; grep -E "test result|FAILED|panicked" "$out/parity-lines.txt"
    need_q8b
    CANOPY_CUDA_DECODE_LINES=1 same_ids "$models/q8b.gguf" "The quick brown fox" 16 | tee -a "$out/ids.txt"
    for round in 1 2; do
        for lines in 0 1; do
            echo "CANOPY_CUDA_DECODE_LINES=$lines (round $round):" $(CANOPY_CUDA_DECODE_LINES=$lines "$bin/canopy" bench \
                "$models/q8b.gguf" --backend cuda --prefill 0 --decode 128 --depths 0,4096 --forward 1,23 \
                --repetitions 3 2>&1 | grep -E "^\|.*(tg|fwd)" | tr -s ' ' | cut -d'|' -f4,6)
        done
    done | tee "$out/lines.txt"
fi
if has ab; then
    # The same decode and verify measurements, on an empty context and after 16384 tokens, with
    # each of pack.sh's revisions and this build, alternating, twice, in one call on one file; the
    # 0.6B's decode on an empty context and after 4096 tokens too.
    need_q8b
    need_q06
    for round in 1 2; do
        for build in $(packed_builds) canopy; do
            echo "== $build (round $round)"
            "$bin/$build" bench "$models/q8b.gguf" --backend cuda --prefill 0 --decode 128 --depths 0,16384 \
                --forward 1,8,23,32,64 --repetitions 3 2>&1 | grep -E "tg|fwd"
            "$bin/$build" bench "$models/q06.gguf" --backend cuda --prefill 0 --decode 128 --depths 0,4096 \
                --forward 1 --repetitions 3 2>&1 | grep -E "tg|fwd"
        done
    done | tee "$out/ab.txt"
fi
# Every packed build and this one in turn on the 8B, `rounds` times, with `canopy bench`'s
# arguments after the first two; one line a run (pp and tg in ms for their tokens, fwd in ms),
# into $out/NAME.txt.
# With AB_SWITCH set (say CANOPY_CUDA_PDL=0), the worktree's build also runs with that
# environment, as a build of its own.
ab_lines() {
    local name=$1 rounds=$2
    shift 2
    need_q8b
    for round in $(seq "$rounds"); do
        for build in $(packed_builds) canopy ${AB_SWITCH:+switched}; do
            local run=("$bin/$build")
            [ "$build" == switched ] && run=(env "$AB_SWITCH" "$bin/canopy") && build="canopy $AB_SWITCH"
            echo "$build (round $round):" $("${run[@]}" bench "$models/q8b.gguf" --backend cuda "$@" 2>&1 |
                grep -E "^\|.*(pp|tg|fwd)" | tr -s ' ' | cut -d'|' -f4,6)
        done
    done | tee "$out/$name.txt"
}
# The short A/B of the verify matmuls' experiments: decode and the verify sizes on an empty context.
if has ab-verify; then
    ab_lines ab-verify 3 --prefill 0 --decode 128 --forward 1,8,16,23,32 --repetitions 3
fi
# The A/B of the attention's experiments: a 2048-token prefill (whose chunk reads up to 2048 keys),
# then decode and the verify sizes on an empty context and after 512 to 16384 tokens.
if has ab-depths; then
    ab_lines ab-depths 2 --prefill 2048 --decode 128 --depths 0,512,1024,4096,16384 --forward 1,8,23 \
        --repetitions 3
fi
