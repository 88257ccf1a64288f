// kernelserve-server: serves the built-in kernels over gRPC until SIGTERM or SIGINT.
#include "server/run.h"

int main(int argc, char** argv) { return kernelserve::server::RunServerMain(argc, argv); }
