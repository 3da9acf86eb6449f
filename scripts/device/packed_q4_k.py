#!/usr/bin/env python3
"""The packed Q4_K experiment (packed_q4_k.cu) on the device: the GGUF kernel and the packed
ones against a NumPy reference on random Q4_K blocks, then their times at Qwen3-8B's Q4_K verify
shapes for 23 input rows (50 launches recorded into a CUDA graph, rotating over enough weight
copies to miss the 50 MB L2; the median of 7 replays by CUDA events). docs/performance.md,
session 36, has the results.

Needs PyTorch with CUDA (memory, events, the context) and NVRTC (nvrtc.py). Usage:
scripts/device/packed_q4_k.py [--compile-only]
"""
import ctypes
import os
import sys

import numpy as np

import nvrtc

SOURCES = ["mmq.cu", "mmq_f16.cu", os.path.join(os.path.dirname(os.path.abspath(__file__)), "packed_q4_k.cu")]
# Q4_K block bytes; input rows, the kernels' tile of them, and weight rows a block.
BLOCK_BYTES, N_ROWS, TILE_N, TILE_ROWS = 144, 23, 24, 64
KERNEL_NAMES = ("gguf_q4_k_24", "packed_q4_k_24", "packed_wide_q4_k_24")


def random_q4_k(rows, cols, seed):
    """Random Q4_K rows (rows, blocks, 144) with small positive d and dmin."""
    rng = np.random.default_rng(seed)
    blocks = rng.integers(0, 256, size=(rows, cols // 256, BLOCK_BYTES), dtype=np.uint8)
    scales = rng.uniform(1e-3, 1e-2, size=(rows, cols // 256, 2)).astype(np.float16)
    blocks[:, :, 0:4] = scales.view(np.uint8).reshape(rows, cols // 256, 4)
    return blocks


def dequantize(blocks):
    rows, nb, _ = blocks.shape
    d = blocks[:, :, 0:2].copy().view(np.float16)[..., 0].astype(np.float32)
    dmin = blocks[:, :, 2:4].copy().view(np.float16)[..., 0].astype(np.float32)
    s = blocks[:, :, 4:16].astype(np.int32)
    sc = np.empty((rows, nb, 8), np.int32)
    mn = np.empty((rows, nb, 8), np.int32)
    sc[..., :4] = s[..., 0:4] & 63
    mn[..., :4] = s[..., 4:8] & 63
    sc[..., 4:] = (s[..., 8:12] & 15) | ((s[..., 0:4] >> 6) << 4)
    mn[..., 4:] = (s[..., 8:12] >> 4) | ((s[..., 4:8] >> 6) << 4)
    qs = blocks[:, :, 16:].astype(np.int32).reshape(rows, nb, 4, 32)
    q = np.stack([qs & 15, qs >> 4], axis=3).reshape(rows, nb, 8, 32)
    w = (d[..., None] * sc)[..., None] * q - (dmin[..., None] * mn)[..., None]
    return w.reshape(rows, nb * 256)


def pack(blocks, wide=False):
    """The tiles of packed_q4_k.cu: (row tile, group) -> 16 heads, then [h][g][t][i][r][8 bytes]
    ([h][i][g][t][r][8 bytes] if `wide`)."""
    rows, nb, _ = blocks.shape
    tiles = rows // 16
    heads = blocks[:, :, :16].reshape(tiles, 16, nb, 16).transpose(0, 2, 1, 3)
    qs = blocks[:, :, 16:].reshape(tiles, 2, 8, nb, 2, 2, 4, 8)  # w, r, g, G, h, i, t, byte
    quants = qs.transpose(0, 3, 4, 5, 2, 6, 1, 7) if wide else qs.transpose(0, 3, 4, 2, 6, 5, 1, 7)
    packed = np.concatenate([heads.reshape(tiles, nb, 256), quants.reshape(tiles, nb, 2048)], axis=2)
    return np.ascontiguousarray(packed).reshape(-1)


class Kernels:
    def __init__(self, torch):
        self.torch = torch
        major, minor = torch.cuda.get_device_capability()
        cubin, _ = nvrtc.compile_cubin(SOURCES, "packed_q4_k.cu", f"sm_{major}{minor}")
        torch.zeros(1, device="cuda")  # the primary context, current on this thread
        self.cuda = ctypes.CDLL("libcuda.so.1")
        module = ctypes.c_void_p()
        self.check(self.cuda.cuModuleLoadData(ctypes.byref(module), cubin))
        self.functions = {}
        for name in KERNEL_NAMES:
            function = ctypes.c_void_p()
            self.check(self.cuda.cuModuleGetFunction(ctypes.byref(function), module, name.encode()))
            self.functions[name] = function

    def check(self, status):
        if status:
            raise RuntimeError(f"CUDA driver error {status}")

    def launch(self, name, x, x_scales, weight, rows, out, cols, splits, partials, arrivals):
        values = [ctypes.c_uint64(x.data_ptr()), ctypes.c_uint64(x_scales.data_ptr()),
                  ctypes.c_uint64(weight.data_ptr()), ctypes.c_uint32(rows), ctypes.c_uint64(out.data_ptr()),
                  ctypes.c_uint32(cols), ctypes.c_uint32(N_ROWS), ctypes.c_uint64(partials.data_ptr()),
                  ctypes.c_uint64(arrivals.data_ptr())]
        params = (ctypes.c_void_p * len(values))(*[ctypes.cast(ctypes.byref(v), ctypes.c_void_p) for v in values])
        stream = ctypes.c_void_p(self.torch.cuda.current_stream().cuda_stream)
        self.check(self.cuda.cuLaunchKernel(self.functions[name], rows // TILE_ROWS, splits, 1, 256, 1, 1, 0,
                                            stream, params, None))


def run(torch, kernels, rows, cols, splits, check):
    device = "cuda"
    blocks = random_q4_k(rows, cols, rows + cols)
    rng = np.random.default_rng(1)
    x = rng.uniform(-1, 1, size=(N_ROWS, cols)).astype(np.float16)
    x_gpu = torch.from_numpy(x.view(np.int16)).to(device)
    x_scales = torch.ones(N_ROWS, device=device)
    tiles = rows // TILE_ROWS
    partials = torch.zeros(tiles * splits * TILE_ROWS * TILE_N, device=device)
    arrivals = torch.zeros(tiles, dtype=torch.int32, device=device)
    layouts = {"gguf_q4_k_24": blocks.reshape(-1), "packed_q4_k_24": pack(blocks),
               "packed_wide_q4_k_24": pack(blocks, wide=True)}
    weights = {name: torch.from_numpy(layout).to(device) for name, layout in layouts.items()}
    line = f"{rows} x {cols}, {splits} split(s)"
    if check:
        reference = x.astype(np.float32) @ dequantize(blocks).T
        outs = {}
        for name, weight in weights.items():
            out = torch.zeros(N_ROWS * rows, device=device)
            kernels.launch(name, x_gpu, x_scales, weight, rows, out, cols, splits, partials, arrivals)
            torch.cuda.synchronize()
            outs[name] = out.cpu().numpy().reshape(N_ROWS, rows)
            error = np.linalg.norm(outs[name] - reference) / np.linalg.norm(reference)
            line += f"; {name} relative L2 {error:.2e}"
        same = [np.array_equal(outs["gguf_q4_k_24"], outs[name]) for name in KERNEL_NAMES[1:]]
        line += f"; packed outputs bitwise equal to gguf's {same}"
    copies = max(1, (256 << 20) // (rows * cols // 256 * BLOCK_BYTES))
    out = torch.zeros(N_ROWS * rows, device=device)
    for name, weight in weights.items():
        rotation = [weight.clone() for _ in range(copies)]
        launches = 50

        def launch_all():
            for i in range(launches):
                kernels.launch(name, x_gpu, x_scales, rotation[i % copies], rows, out, cols, splits, partials,
                               arrivals)

        # Recorded into a graph: launched one by one from Python, a launch costs more than the kernel.
        side = torch.cuda.Stream()
        with torch.cuda.stream(side):
            launch_all()
        torch.cuda.synchronize()
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            launch_all()
        times = []
        for repeat in range(8):
            start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            graph.replay()
            stop.record()
            torch.cuda.synchronize()
            if repeat:  # the first is the warm-up
                times.append(start.elapsed_time(stop) / launches * 1e3)
        median = sorted(times)[len(times) // 2]
        gbps = rows * cols // 256 * BLOCK_BYTES / median / 1e3
        line += f"; {name} {median:.2f} us ({gbps:.0f} GB/s)"
        del rotation
    print(line, flush=True)


def main():
    if "--compile-only" in sys.argv:
        nvrtc.compile_cubin(SOURCES, "packed_q4_k.cu")
        return
    import torch

    kernels = Kernels(torch)
    print(torch.cuda.get_device_name())
    run(torch, kernels, 256, 4096, 1, check=True)
    run(torch, kernels, 1024, 12288, 3, check=True)
    for rows, cols, splits in ((24576, 4096, 1), (12288, 4096, 1), (4096, 4096, 4), (4096, 4096, 1), (1024, 4096, 4)):
        run(torch, kernels, rows, cols, splits, check=False)


if __name__ == "__main__":
    main()
