// The tensor (TMA) maps of the warp-specialized Hopper forward kernel (flash_attention_ws.cuh):
// q, k and v each as a 3-d tensor [rows, heads, D] (innermost D), read in boxes of 64 columns
// of one head and a tile of rows, 128-byte swizzled as wgmma reads them. Host code: the maps
// are encoded by the driver's cuTensorMapEncodeTiled, found at run time (the server links the
// CUDA runtime only). Thread-safe.
#ifndef KERNELSERVE_KERNELS_FLASH_ATTENTION_CUDA_FLASH_TENSOR_MAPS_H_
#define KERNELSERVE_KERNELS_FLASH_ATTENTION_CUDA_FLASH_TENSOR_MAPS_H_

#include <cuda.h>
#include <cuda_runtime_api.h>

#include "kernels/flash_attention/cuda/flash_attention_launch.h"

namespace kernelserve::cuda {

struct FlashTensorMaps {
  CUtensorMap q;  // boxes of [block_q rows, 1 head, 64 columns]
  CUtensorMap k;  // boxes of [block_k rows, 1 head, 64 columns]
  CUtensorMap v;  // as k
};

// Encodes the maps of `args` (q, k, v of 2-byte elements: bf16 when `bf16`, else f16) for
// head dim `head_dim` (64, 96, 128 or 256; columns past D in the last 64-column box read as
// zeros). cudaErrorInvalidValue when the kernel cannot read these tensors this way (a base
// pointer not 16-byte aligned, more rows than an int32 coordinate holds, a box over 256 rows);
// cudaErrorNotSupported when the driver lacks cuTensorMapEncodeTiled.
cudaError_t EncodeFlashTensorMaps(const FlashDeviceArgs& args, int head_dim, bool bf16, int block_q,
                                  int block_k, FlashTensorMaps* maps);

// The bias of `args` (f32, dense) as a 3-d tensor [planes, Sq, Sk] (innermost Sk), plane
// (b, h) at (b * bias_batch_stride + h * bias_head_stride) / (Sq * Sk), read in boxes of
// `box_rows` rows and 32 columns (128 bytes), 128-byte swizzled. cudaErrorInvalidValue when
// it cannot be read this way (no bias, varlen, a row of Sk floats not a multiple of 16 bytes, a
// base not 16-byte aligned, a stride not a whole number of planes, more than 2^31 rows or
// columns); cudaErrorNotSupported when the driver lacks cuTensorMapEncodeTiled.
cudaError_t EncodeFlashBiasMap(const FlashDeviceArgs& args, int box_rows, CUtensorMap* map);

}  // namespace kernelserve::cuda

#endif  // KERNELSERVE_KERNELS_FLASH_ATTENTION_CUDA_FLASH_TENSOR_MAPS_H_
