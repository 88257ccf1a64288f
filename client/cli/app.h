// The kernelserve command line as a CLI11 app: every command, verb, argument and flag, with the
// help text of each. Only client/cli/*.cc include this (CLI11 is a header-only library).
#ifndef KERNELSERVE_CLIENT_CLI_APP_H_
#define KERNELSERVE_CLIENT_CLI_APP_H_

#include <memory>

#include "CLI/CLI.hpp"

namespace kernelserve::cli {

// Environment variables read when the flag is absent (the flag wins).
inline constexpr const char* kTargetEnv = "KERNELSERVE_TARGET";
inline constexpr const char* kTokenFileEnv = "KERNELSERVE_TOKEN_FILE";

// A new app: global flags on the root (they may also follow a command), one subcommand per
// command (cache has one per verb), plus `help [COMMAND [VERB]]`. Every app allows extras and
// falls through to its parent, so that the parser, not CLI11, reports unknown words (with a
// suggestion). Flags keep every value given (repeatable ones) or the last one.
std::unique_ptr<CLI::App> MakeApp();

}  // namespace kernelserve::cli

#endif  // KERNELSERVE_CLIENT_CLI_APP_H_
