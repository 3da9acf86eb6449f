#!/usr/bin/env python3
"""Counts the instructions of a kernel's main loop in its sm_90 SASS, on a machine without a GPU.

Compiles a kernels/cuda/ source with NVRTC as the backend does (the shared headers, then the file;
sources.rs), disassembles the cubin with cuobjdump, takes the longest backward branch of each
named kernel as its main loop, and prints the loop's static instruction count by opcode, with
ptxas's registers and spills. That is how docs/performance.md counts instructions per K group.

Needs the venv of scripts/test.sh (NVRTC) and a cuobjdump: CUOBJDUMP=path, or the pip packages
nvidia-cuda-cuobjdump and nvidia-cuda-nvdisasm (13.2 reads the cubins of NVRTC 13.0) in that
venv, whose bin directory must then be on PATH (cuobjdump runs nvdisasm).
Usage: scripts/device/sass.py FILE.cu[+FILE.cu...] KERNEL [KERNEL...]
"""
import collections
import ctypes
import os
import re
import subprocess
import sys
import tempfile

import nvidia

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "kernels", "cuda")
HEADERS = ["common.cuh", "quant.cuh", "heads.cuh"]
CUDA = os.path.join(list(nvidia.__path__)[0], "cu13")


def compile_cubin(name):
    """The cubin of kernels/cuda/NAME and ptxas's resource lines."""
    # NVRTC opens its builtins library by name, so that one is loaded from the venv first.
    ctypes.CDLL(os.path.join(CUDA, "lib", "libnvrtc-builtins.so.13.0"), mode=ctypes.RTLD_GLOBAL)
    nvrtc = ctypes.CDLL(os.path.join(CUDA, "lib", "libnvrtc.so.13"))
    parts = [open(os.path.join(ROOT, h)).read() for h in HEADERS if os.path.exists(os.path.join(ROOT, h))]
    # NAME may join files that sources.rs compiles as one unit: mmq.cu+mmq_f16.cu.
    files = "".join(open(os.path.join(ROOT, part)).read() for part in name.split("+"))
    source = "\n".join(parts) + f'\n#line 1 "{name}"\n' + files
    program = ctypes.c_void_p()
    if nvrtc.nvrtcCreateProgram(ctypes.byref(program), source.encode(), name.encode(), 0, None, None):
        sys.exit("nvrtcCreateProgram failed")
    options = [b"--gpu-architecture=sm_90", b"--std=c++17", b"--ptxas-options=-v",
               f"-I{CUDA}/include".encode(), f"-I{CUDA}/include/cccl".encode()]
    status = nvrtc.nvrtcCompileProgram(program, len(options), (ctypes.c_char_p * len(options))(*options))
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


def cuobjdump():
    found = os.environ.get("CUOBJDUMP") or os.path.join(CUDA, "bin", "cuobjdump")
    if not os.path.exists(found):
        sys.exit("no cuobjdump: set CUOBJDUMP or pip install nvidia-cuda-cuobjdump into the venv")
    return found


def resources(log, kernel):
    """ptxas's register and spill lines for KERNEL."""
    block = log.split(f"Compiling entry function '{kernel}'")
    if len(block) < 2:
        return "no ptxas lines"
    lines = block[1].split("Compiling entry function")[0]
    spills = re.search(r"(\d+) bytes stack frame, (\d+) bytes spill stores", lines)
    registers = re.search(r"Used (\d+) registers", lines)
    return f"{registers.group(1)} registers, {spills.group(1)} bytes stack, {spills.group(2)} bytes spilled"


def main(name, kernels):
    cubin, log = compile_cubin(name)
    with tempfile.NamedTemporaryFile(suffix=".cubin") as f:
        f.write(cubin)
        f.flush()
        for kernel in kernels:
            sass = subprocess.run([cuobjdump(), "-sass", "-fun", kernel, f.name], capture_output=True,
                                  text=True, check=True).stdout
            instructions = [(int(m.group(1), 16), m.group(2).strip())
                            for m in re.finditer(r"/\*([0-9a-f]{4,})\*/\s+([^;]*);", sass)]
            loops = [(int(m.group(1), 16), address) for address, text in instructions
                     for m in [re.search(r"BRA (0x[0-9a-f]+)", text)] if m and int(m.group(1), 16) < address]
            if not loops:
                print(f"{kernel}: no loop ({len(instructions)} instructions; {resources(log, kernel)})")
                continue
            begin, end = max(loops, key=lambda loop: loop[1] - loop[0])
            body = [text for address, text in instructions if begin <= address <= end]
            opcodes = collections.Counter(re.sub(r"^@!?U?P\w+\s+", "", text).split()[0].split(".")[0]
                                          for text in body)
            top = ", ".join(f"{op} {count}" for op, count in opcodes.most_common(12))
            print(f"{kernel}: loop of {len(body)} instructions ({resources(log, kernel)})\n  {top}")


if __name__ == "__main__":
    if len(sys.argv) < 3:
        sys.exit(__doc__)
    main(sys.argv[1], sys.argv[2:])
