// ClientServerTest: a suite fixture that starts one kernelserve-server process (the binary in
// $KERNELSERVE_SERVER, --cache=memory on a free port) and connects a kernelserve::Client to it.
#ifndef KERNELSERVE_TESTS_CLIENT_E2E_CLIENT_FIXTURE_H_
#define KERNELSERVE_TESTS_CLIENT_E2E_CLIENT_FIXTURE_H_

#include <sys/types.h>

#include <vector>

#include "client/client.h"
#include "core/tensor.h"
#include "gtest/gtest.h"

namespace kernelserve {

// One server for the whole suite; client_ has a 30 s default deadline.
class ClientServerTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite();
  static void TearDownTestSuite();
  void SetUp() override { ASSERT_NE(client_, nullptr) << "the server did not start"; }

  static pid_t pid_;
  static Client* client_;
};

// Means over axis 1 of x [B,S,H] in double.
std::vector<double> MeanOverRows(const Tensor& x);

}  // namespace kernelserve

#endif  // KERNELSERVE_TESTS_CLIENT_E2E_CLIENT_FIXTURE_H_
