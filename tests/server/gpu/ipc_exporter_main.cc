// kernelserve-ipc-exporter: a client process's GPU buffer, for the CUDA shared-memory tests and
// benchmarks. Allocates BYTES bytes on GPU DEVICE (cudaMalloc, filled with 0xff), prints its
// cudaIpcMemHandle_t as 128 hex digits on one line, and frees it when its stdin closes.
//
//   kernelserve-ipc-exporter BYTES [DEVICE]
#include <cuda_runtime_api.h>

#include <cstdio>
#include <cstdlib>

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: %s BYTES [DEVICE]\n", argv[0]);
    return 2;
  }
  const size_t bytes = std::strtoull(argv[1], nullptr, 10);
  const int device = argc > 2 ? std::atoi(argv[2]) : 0;
  void* buffer = nullptr;
  cudaIpcMemHandle_t handle{};
  cudaError_t error = cudaSetDevice(device);
  if (error == cudaSuccess) error = cudaMalloc(&buffer, bytes);
  if (error == cudaSuccess) error = cudaMemset(buffer, 0xff, bytes);
  if (error == cudaSuccess) error = cudaDeviceSynchronize();
  if (error == cudaSuccess) error = cudaIpcGetMemHandle(&handle, buffer);
  if (error != cudaSuccess) {
    std::fprintf(stderr, "kernelserve-ipc-exporter: %s\n", cudaGetErrorString(error));
    return 1;
  }
  const auto* raw = reinterpret_cast<const unsigned char*>(&handle);
  for (size_t i = 0; i < sizeof(handle); ++i) std::printf("%02x", raw[i]);
  std::printf("\n");
  std::fflush(stdout);
  while (std::fgetc(stdin) != EOF) {
  }
  cudaFree(buffer);
  return 0;
}
