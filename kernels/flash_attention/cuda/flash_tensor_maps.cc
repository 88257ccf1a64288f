#include "kernels/flash_attention/cuda/flash_tensor_maps.h"

#include <cudaTypedefs.h>

#include <cstdint>

#include "kernels/runtime/cuda/driver_function.h"

namespace kernelserve::cuda {
namespace {

PFN_cuTensorMapEncodeTiled_v12000 EncodeTiled() {
  static const auto encode = reinterpret_cast<PFN_cuTensorMapEncodeTiled_v12000>(
      FindDriverFunction("cuTensorMapEncodeTiled", 12000));
  return encode;
}

// A 3-d map over `base` with sizes `dims` (innermost first), byte strides `strides` of the
// outer two dims and boxes `box`, 128-byte swizzled as wgmma reads them.
cudaError_t Encode3d(PFN_cuTensorMapEncodeTiled_v12000 encode, CUtensorMapDataType type,
                     const void* base, const cuuint64_t (&dims)[3], const cuuint64_t (&strides)[2],
                     const cuuint32_t (&box)[3], CUtensorMap* map) {
  const cuuint32_t element_strides[3] = {1, 1, 1};
  const CUresult result =
      encode(map, type, 3, const_cast<void*>(base), dims, strides, box, element_strides,
             CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
             CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  return result == CUDA_SUCCESS ? cudaSuccess : cudaErrorInvalidValue;
}

// One map of `rows` rows x `heads` heads x `head_dim` columns at `base`, boxes of `box_rows`
// rows of one head and 64 columns.
cudaError_t EncodeOne(PFN_cuTensorMapEncodeTiled_v12000 encode, const void* base, bool bf16,
                      int64_t rows, int64_t heads, int head_dim, int box_rows, CUtensorMap* map) {
  if (reinterpret_cast<uintptr_t>(base) % 16 != 0 || rows < 1 || rows > INT32_MAX || box_rows < 1 ||
      box_rows > 256) {
    return cudaErrorInvalidValue;
  }
  const cuuint64_t dims[3] = {static_cast<cuuint64_t>(head_dim), static_cast<cuuint64_t>(heads),
                              static_cast<cuuint64_t>(rows)};
  // Bytes between heads and between rows (the innermost dim is contiguous).
  const cuuint64_t strides[2] = {static_cast<cuuint64_t>(head_dim) * 2,
                                 static_cast<cuuint64_t>(heads * head_dim) * 2};
  const cuuint32_t box[3] = {64, 1, static_cast<cuuint32_t>(box_rows)};
  return Encode3d(encode, bf16 ? CU_TENSOR_MAP_DATA_TYPE_BFLOAT16 : CU_TENSOR_MAP_DATA_TYPE_FLOAT16,
                  base, dims, strides, box, map);
}

}  // namespace

cudaError_t EncodeFlashTensorMaps(const FlashDeviceArgs& args, int head_dim, bool bf16, int block_q,
                                  int block_k, FlashTensorMaps* maps) {
  const PFN_cuTensorMapEncodeTiled_v12000 encode = EncodeTiled();
  if (encode == nullptr) return cudaErrorNotSupported;
  cudaError_t error =
      EncodeOne(encode, args.q, bf16, args.total_q, args.num_heads_q, head_dim, block_q, &maps->q);
  if (error == cudaSuccess) {
    error = EncodeOne(encode, args.k, bf16, args.total_k, args.num_heads_kv, head_dim, block_k,
                      &maps->k);
  }
  if (error == cudaSuccess) {
    error = EncodeOne(encode, args.v, bf16, args.total_k, args.num_heads_kv, head_dim, block_k,
                      &maps->v);
  }
  return error;
}

cudaError_t EncodeFlashBiasMap(const FlashDeviceArgs& args, int box_rows, CUtensorMap* map) {
  const PFN_cuTensorMapEncodeTiled_v12000 encode = EncodeTiled();
  if (encode == nullptr) return cudaErrorNotSupported;
  const int64_t plane = args.seq_len_q * args.seq_len_k;
  if (args.bias == nullptr || args.cu_seqlens_q != nullptr || plane == 0 ||
      args.seq_len_k % 4 != 0 || reinterpret_cast<uintptr_t>(args.bias) % 16 != 0 ||
      args.bias_batch_stride % plane != 0 || args.bias_head_stride % plane != 0 ||
      args.seq_len_q > INT32_MAX || args.seq_len_k > INT32_MAX || box_rows < 1 || box_rows > 256) {
    return cudaErrorInvalidValue;
  }
  const int64_t planes = ((args.num_sequences - 1) * args.bias_batch_stride +
                          (args.num_heads_q - 1) * args.bias_head_stride) /
                             plane +
                         1;
  const cuuint64_t dims[3] = {static_cast<cuuint64_t>(args.seq_len_k),
                              static_cast<cuuint64_t>(args.seq_len_q),
                              static_cast<cuuint64_t>(planes)};
  const cuuint64_t strides[2] = {static_cast<cuuint64_t>(args.seq_len_k) * 4,
                                 static_cast<cuuint64_t>(plane) * 4};
  const cuuint32_t box[3] = {32, static_cast<cuuint32_t>(box_rows), 1};
  return Encode3d(encode, CU_TENSOR_MAP_DATA_TYPE_FLOAT32, args.bias, dims, strides, box, map);
}

}  // namespace kernelserve::cuda
