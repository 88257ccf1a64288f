"""kernelserve: a Python client of the kernelserve gRPC service. See docs/CLIENT.md."""

from kernelserve.client import Client
from kernelserve.results import Candidate, ConfigEntry, KernelServeError, Result, TuneResult
from kernelserve.tensors import TensorSpec, from_bf16, to_bf16

__all__ = ["Candidate", "Client", "ConfigEntry", "KernelServeError", "Result", "TensorSpec",
           "TuneResult", "from_bf16", "to_bf16"]
