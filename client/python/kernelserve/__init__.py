"""kernelserve: a Python client of the kernelserve gRPC service. See docs/CLIENT.md.

    import kernelserve
    with kernelserve.Client("127.0.0.1:50051") as client:
        client.mean_pooling(x).out
        region = client.register_system_shm("tensors", 1 << 26)  # shared memory (same host)
        gpu = client.register_cuda_shm("gpu", torch_or_cupy_tensor)  # its GPU allocation
        with client.create_tensor(k, name="k") as k_res:    # kept on the server, by name
            client.flash_attention(q, k_res, v)

kernelserve.aio.Client is the same client for asyncio. Calls go through gRPC's C++ library
where the package built its extension (kernelserve.transport), and large calls to a server on
this host through shared memory the client manages (kernelserve.autoshm).
"""

from kernelserve import aio, autoshm, cuda, transport
from kernelserve.calls import Request
from kernelserve.client import Client
from kernelserve.errors import (ArgumentError, KernelserveError, KernelServeError,
                                UnknownKernelError)
from kernelserve.info import (ConfigFieldSchema, DeviceInfo, InputSchema, KernelSchema,
                              OutputSchema, ParamSchema, ServerInfo)
from kernelserve.results import (Candidate, ConfigEntry, ItemResult, RegionStatus, Result,
                                 TuneProgress, TuneResult)
from kernelserve.resident import (AsyncResidentTensor, ResidentTensor, ResidentTensorInfo,
                                  ResidentTensors)
from kernelserve.shm import (AsyncCudaSharedMemory, AsyncSystemSharedMemory, CudaSharedMemory,
                             RegionTensor, SystemSharedMemory)
from kernelserve.tensors import (TensorSpec, bfloat16, float8_e4m3fn, float8_e5m2, from_bf16,
                                 to_bf16)

__all__ = ["ArgumentError", "AsyncCudaSharedMemory", "AsyncResidentTensor",
           "AsyncSystemSharedMemory", "Candidate",
           "Client", "ConfigEntry", "ConfigFieldSchema", "CudaSharedMemory", "DeviceInfo", "InputSchema", "ItemResult",
           "KernelSchema", "KernelServeError", "KernelserveError", "OutputSchema", "ParamSchema",
           "RegionStatus", "RegionTensor", "Request", "ResidentTensor", "ResidentTensorInfo",
           "ResidentTensors", "Result", "ServerInfo", "SystemSharedMemory",
           "TensorSpec", "TuneProgress", "TuneResult", "UnknownKernelError", "aio", "autoshm",
           "bfloat16", "cuda", "float8_e4m3fn", "float8_e5m2", "from_bf16", "to_bf16",
           "transport"]
