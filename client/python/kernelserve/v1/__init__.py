"""The generated modules of proto/kernelserve/v1: kernel_service_pb2 (messages, with a .pyi),
kernel_service_pb2_grpc (the service stub). Written by the package build (setup.py), not kept in
git."""
