"""NVRTC from Python, as the backend compiles (sources.rs, compile.rs): the shared headers, then
the sources, to an sm_XX cubin. Finds CUDA 13 in the pip wheels (site-packages/nvidia/cu13, the
venv of scripts/test.sh) or in /usr/local/cuda (the device machines)."""
import ctypes
import glob
import os
import sys

KERNELS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "kernels", "cuda")
HEADERS = ["common.cuh", "quant.cuh", "heads.cuh"]


def cuda_root():
    """The first CUDA 13 root with libnvrtc.so.13 and cuda_fp16.h: the pip wheels, then
    /usr/local/cuda."""
    roots = [root for base in sys.path for root in glob.glob(os.path.join(base, "nvidia", "cu13"))]
    for root in roots + ["/usr/local/cuda"]:
        if glob.glob(os.path.join(root, "lib*", "libnvrtc.so.13*")) and os.path.exists(
                os.path.join(root, "include", "cuda_fp16.h")):
            return root
    sys.exit("no libnvrtc.so.13 with cuda_fp16.h in the nvidia pip wheels or /usr/local/cuda")


def compile_cubin(paths, name, arch="sm_90"):
    """The cubin of the shared headers followed by the files `paths` (a name relative to
    kernels/cuda or a path), and NVRTC's log with ptxas's resource lines."""
    root = cuda_root()
    library = glob.glob(os.path.join(root, "lib*", "libnvrtc.so.13*"))[0]
    # NVRTC opens its builtins library by name, so that one is loaded from the same place first.
    for builtins in glob.glob(os.path.join(os.path.dirname(library), "libnvrtc-builtins.so.13*"))[:1]:
        ctypes.CDLL(builtins, mode=ctypes.RTLD_GLOBAL)
    nvrtc = ctypes.CDLL(library)
    headers = [os.path.join(KERNELS, h) for h in HEADERS if os.path.exists(os.path.join(KERNELS, h))]
    parts = [open(path).read() for path in headers]
    parts.append(f'#line 1 "{name}"')
    parts += [open(os.path.join(KERNELS, path)).read() for path in paths]
    program = ctypes.c_void_p()
    if nvrtc.nvrtcCreateProgram(ctypes.byref(program), "\n".join(parts).encode(), name.encode(), 0, None, None):
        sys.exit("nvrtcCreateProgram failed")
    options = [f"--gpu-architecture={arch}", "--std=c++17", "--ptxas-options=-v"]
    options += [f"-I{d}" for d in (os.path.join(root, "include"), os.path.join(root, "include", "cccl"))
                if os.path.isdir(d)]
    encoded = [option.encode() for option in options]
    status = nvrtc.nvrtcCompileProgram(program, len(encoded), (ctypes.c_char_p * len(encoded))(*encoded))
    size = ctypes.c_size_t()
    nvrtc.nvrtcGetProgramLogSize(program, ctypes.byref(size))
    log = ctypes.create_string_buffer(size.value)
    nvrtc.nvrtcGetProgramLog(program, log)
    if status:
        sys.exit(log.value.decode())
    nvrtc.nvrtcGetCUBINSize(program, ctypes.byref(size))
    cubin = ctypes.create_string_buffer(size.value)
    nvrtc.nvrtcGetCUBIN(program, cubin)
    return cubin.raw, log.value.decode()
