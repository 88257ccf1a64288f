// A third kernel, written as a newcomer would add one, for the tests that show that nothing
// outside a kernel's own files and a registry line has to change: "toy_scale" v1, out = factor
// * x, with its schema, analysis and a CPU platform, all in this header's .cc.
#ifndef KERNELSERVE_TESTS_SUPPORT_TOY_KERNEL_H_
#define KERNELSERVE_TESTS_SUPPORT_TOY_KERNEL_H_

#include <memory>

#include "core/kernel.h"

namespace kernelserve::testing {

// "toy_scale": x f32 of rank 1 to 3 -> out = factor * x (f32, x's shape); param factor (float,
// default 2, within -1000..1000). One platform, cpu.
std::unique_ptr<Kernel> MakeToyKernel();

}  // namespace kernelserve::testing

#endif  // KERNELSERVE_TESTS_SUPPORT_TOY_KERNEL_H_
