"""kernelserve: a Python client of the kernelserve gRPC service. See docs/CLIENT.md."""

from kernelserve.client import Client, KernelServeError, Result
from kernelserve.tensors import from_bf16, to_bf16

__all__ = ["Client", "KernelServeError", "Result", "from_bf16", "to_bf16"]
