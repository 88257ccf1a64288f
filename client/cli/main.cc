// The kernelserve command-line tool. See client/cli/cli.h and docs/CLIENT.md.
#include <unistd.h>

#include <iostream>
#include <string>
#include <vector>

#include "client/cli/cli.h"
#include "server/process_tuning.h"

int main(int argc, char** argv) {
  kernelserve::TuneProcess();  // large tensors reuse freed memory (server/process_tuning.h)
  std::vector<std::string> args(argv + 1, argv + argc);
  return kernelserve::cli::RunCli(args, std::cout, std::cerr, isatty(STDERR_FILENO) == 1);
}
