// The gRPC service kernelserve.v1.KernelService: protoc's kernel_service.grpc.pb.h (stubs and
// service bases), with the serialization traits of the messages that carry tensors
// (proto/tensor_wire.h) declared before it.
//
// Include this header, never the generated one: C++ requires an explicit specialization to be
// declared before any use that would instantiate the primary template, in every translation
// unit that uses it, and the generated header's templates use SerializationTraits of these
// messages. proto/tensor_wire.h refuses to come after the generated header, and the generated
// kernel_service.grpc.pb.cc is compiled through proto/kernel_service_grpc.cc, which includes
// this header first.
#ifndef KERNELSERVE_PROTO_KERNEL_SERVICE_GRPC_H_
#define KERNELSERVE_PROTO_KERNEL_SERVICE_GRPC_H_

// The traits first, whatever the include sorter thinks.
// clang-format off
#include "proto/tensor_wire.h"
#include "kernelserve/v1/kernel_service.grpc.pb.h"
// clang-format on

#endif  // KERNELSERVE_PROTO_KERNEL_SERVICE_GRPC_H_
