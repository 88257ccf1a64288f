// protoc's kernel_service.grpc.pb.cc (the client stubs and the service's method handlers),
// compiled with the traits of proto/tensor_wire.h declared before it (see
// proto/kernel_service_grpc.h). proto/CMakeLists.txt builds this file in place of the generated
// one, which it leaves as protoc wrote it.
#include "proto/kernel_service_grpc.h"

#include "kernelserve/v1/kernel_service.grpc.pb.cc"
