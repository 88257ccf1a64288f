// kernelserve-toy-server: kernelserve-server with the tests' toy kernel and the example kernel of
// docs/ADDING_A_KERNEL.md (rms_norm) registered besides the built-in ones, the way a binary
// with kernels of its own would be made.
#include "server/run.h"
#include "tests/support/example_kernel.h"
#include "tests/support/toy_kernel.h"

int main(int argc, char** argv) {
  return kernelserve::server::RunServerMain(
      argc, argv, {&kernelserve::testing::MakeToyKernel, &kernelserve::testing::MakeExampleKernel});
}
