#include "kernels/runtime/cpu/host_copy.h"

#include <cstdint>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "gtest/gtest.h"

namespace kernelserve::cpu {
namespace {

std::string RandomBytes(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::string bytes(n, '\0');
  for (char& c : bytes) c = static_cast<char>(rng());
  return bytes;
}

TEST(HostCopyTest, CopiesEverySizeExactlyAndTouchesNothingElse) {
  HostCopier copier(4);
  const size_t mib = size_t{1} << 20;
  for (size_t n : {size_t{0}, size_t{1}, size_t{4095}, 4 * mib - 1, 4 * mib, 4 * mib + 1,
                   9 * mib + 12345, 33 * mib + 7}) {
    const std::string src = RandomBytes(n, static_cast<uint32_t>(n));
    std::string dst(n + 64, '\x5a');  // poisoned, with a guard zone after the copy
    copier.Copy(dst.data(), src.data(), n);
    // compare(), not EXPECT_EQ on strings: a failure names the size, not megabytes of diff.
    EXPECT_EQ(dst.compare(0, n, src), 0) << n << " bytes differ";
    EXPECT_EQ(dst.compare(n, 64, std::string(64, '\x5a')), 0) << n << " bytes: wrote past the end";
  }
}

TEST(HostCopyTest, ManyCallersAtOnceEachGetTheirOwnBytes) {
  HostCopier copier(3);
  constexpr int kCallers = 6;
  const size_t n = (size_t{6} << 20) + 333;
  std::vector<std::string> sources, targets;
  for (int i = 0; i < kCallers; ++i) {
    sources.push_back(RandomBytes(n, 100 + i));
    targets.emplace_back(n, '\0');
  }
  std::vector<std::thread> callers;
  for (int i = 0; i < kCallers; ++i) {
    callers.emplace_back([&, i] {
      for (int round = 0; round < 5; ++round) {
        copier.Copy(targets[i].data(), sources[i].data(), n);
      }
    });
  }
  for (std::thread& t : callers) t.join();
  for (int i = 0; i < kCallers; ++i) EXPECT_TRUE(targets[i] == sources[i]) << "caller " << i;
}

// Pieces of the sizes given, from scattered sources into one destination in order.
void CheckPieces(HostCopier& copier, const std::vector<size_t>& sizes, uint32_t seed) {
  std::vector<std::string> sources;
  size_t total = 0;
  for (size_t n : sizes) {
    sources.push_back(RandomBytes(n, seed++));
    total += n;
  }
  std::string dst(total + 64, '\x5a');
  std::vector<CopyPiece> pieces;
  size_t at = 0;
  for (const std::string& s : sources) {
    pieces.push_back({dst.data() + at, s.data(), s.size()});
    at += s.size();
  }
  copier.CopyPieces(pieces);
  std::string want;
  for (const std::string& s : sources) want += s;
  EXPECT_EQ(dst.compare(0, total, want), 0) << sizes.size() << " pieces, " << total << " bytes";
  EXPECT_EQ(dst.compare(total, 64, std::string(64, '\x5a')), 0) << "wrote past the end";
}

TEST(HostCopyTest, PiecesOfEverySizeAreCopiedInPlace) {
  HostCopier copier(4);
  const size_t kib = size_t{1} << 10, mib = size_t{1} << 20;
  CheckPieces(copier, {}, 1);
  CheckPieces(copier, {0, 5, 0}, 2);                                   // below the parallel size
  CheckPieces(copier, std::vector<size_t>(300, 64 * kib + 3), 3);      // gRPC-sized slices, 19 MiB
  CheckPieces(copier, {9 * mib + 1, 7, 3 * mib, 0, 12 * mib + 5}, 4);  // cut across groups
  CheckPieces(copier, {33 * mib + 7}, 5);                              // one large piece
}

TEST(HostCopyTest, OneThreadCopiesAlone) {
  HostCopier copier(1);
  EXPECT_EQ(copier.threads(), 1);
  const std::string src = RandomBytes(size_t{5} << 20, 7);
  std::string dst(src.size(), '\0');
  copier.Copy(dst.data(), src.data(), src.size());
  EXPECT_TRUE(dst == src);
}

TEST(HostCopyTest, DefaultThreadsAreHalfTheHardwareBetweenOneAndEight) {
  EXPECT_EQ(DefaultHostCopyThreads(0), 1);
  EXPECT_EQ(DefaultHostCopyThreads(2), 1);
  EXPECT_EQ(DefaultHostCopyThreads(16), 8);
  EXPECT_EQ(DefaultHostCopyThreads(128), 8);
  EXPECT_EQ(DefaultHostCopyThreads(6), 3);
}

TEST(HostCopyTest, EnvironmentOverridesOnlyWithASaneNumber) {
  EXPECT_EQ(HostCopyThreadsFromEnv("3", 16), 3);
  EXPECT_EQ(HostCopyThreadsFromEnv(nullptr, 16), 8);
  EXPECT_EQ(HostCopyThreadsFromEnv("0", 16), 8);
  EXPECT_EQ(HostCopyThreadsFromEnv("many", 16), 8);
  EXPECT_EQ(HostCopyThreadsFromEnv("1000", 4), 2);
}

}  // namespace
}  // namespace kernelserve::cpu
