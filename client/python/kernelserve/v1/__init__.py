# Generated modules of proto/kernelserve/v1 (kernel_service_pb2*.py), written here by the
# CMake target python_stubs; not kept in git.
