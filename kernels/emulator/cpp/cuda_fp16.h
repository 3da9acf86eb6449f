// The kernels include <cuda_fp16.h>; emulation.h already defines what they use of it.
