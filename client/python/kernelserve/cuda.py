"""CUDA tensors of other libraries, as CUDA shared memory (kernelserve.shm.CudaSharedMemory)
needs them: where they are, and the IPC handle of the allocation holding them.

describe(tensor) reads a tensor's device address, shape and dtype, from (in this order)
  - a torch.Tensor on a GPU (data_ptr and its dtype; bfloat16 too, which torch's
    __cuda_array_interface__ does not give),
  - __cuda_array_interface__ (CuPy, Numba, PyTorch, ...),
  - DLPack: __dlpack_device__ a CUDA device (JAX, ...), the capsule read in place.
None of these libraries is imported here; a tensor brings its own.

export(address) gives the cudaIpcMemHandle_t (64 bytes) of the whole allocation holding
`address`, the allocation's base address and size, and its device ordinal in this process, from
the CUDA driver API through ctypes on libcuda.so.1 (cuPointerGetAttribute,
cuMemGetAddressRange_v2, cuIpcGetMemHandle): the driver is there wherever a GPU tensor is, and
nothing else (CuPy, cuda-python, the runtime library) is needed. The handle of a driver
allocation is the same one cudaIpcGetMemHandle gives. Memory that IPC cannot export (pool
allocations of cudaMallocAsync, PyTorch's expandable_segments, managed memory) fails there with
the driver's error.
"""

from __future__ import annotations

import ctypes
import dataclasses
import functools
import sys
from typing import Any, Optional

import grpc
import ml_dtypes
import numpy as np

from kernelserve.errors import ArgumentError, KernelserveError

HANDLE_BYTES = 64  # sizeof(cudaIpcMemHandle_t)

_BF16 = np.dtype(ml_dtypes.bfloat16)
_F8E4M3 = np.dtype(ml_dtypes.float8_e4m3fn)
_F8E5M2 = np.dtype(ml_dtypes.float8_e5m2)
# The dtypes a CUDA tensor may have (uint16: bf16 bits, as for arrays).
_DTYPES = {np.dtype("<f4"), np.dtype("<f2"), _BF16, np.dtype("<i4"), np.dtype("<i8"),
           np.dtype("bool"), np.dtype("<u2"), _F8E4M3, _F8E5M2}
_TORCH_DTYPES = {"torch.float32": np.dtype("<f4"), "torch.float16": np.dtype("<f2"),
                 "torch.bfloat16": _BF16, "torch.int32": np.dtype("<i4"),
                 "torch.int64": np.dtype("<i8"), "torch.bool": np.dtype("bool"),
                 "torch.uint16": np.dtype("<u2"), "torch.float8_e4m3fn": _F8E4M3,
                 "torch.float8_e5m2": _F8E5M2}
# DLPack (type code, bits) -> dtype: kDLInt 0, kDLUInt 1, kDLFloat 2, kDLBfloat 4, kDLBool 6,
# kDLFloat8_e4m3fn 10, kDLFloat8_e5m2 12.
_DLPACK_DTYPES = {(2, 32): np.dtype("<f4"), (2, 16): np.dtype("<f2"), (4, 16): _BF16,
                  (0, 32): np.dtype("<i4"), (0, 64): np.dtype("<i8"), (6, 8): np.dtype("bool"),
                  (1, 16): np.dtype("<u2"), (10, 8): _F8E4M3, (12, 8): _F8E5M2}
_DLPACK_CUDA = 2  # kDLCUDA


@dataclasses.dataclass(frozen=True)
class CudaTensor:
    """A C-contiguous, non-empty CUDA tensor: its device address, shape and dtype; device is
    the ordinal its library gives (None when it gives none)."""

    address: int
    shape: tuple[int, ...]
    dtype: np.dtype[Any]
    device: Optional[int] = None

    @property
    def nbytes(self) -> int:
        return int(np.prod(self.shape, dtype=np.int64)) * self.dtype.itemsize


@dataclasses.dataclass(frozen=True)
class Allocation:
    """What export() gives: the IPC handle of the allocation, its base address and size, and
    its device ordinal in this process (CUDA_VISIBLE_DEVICES numbering)."""

    handle: bytes
    base: int
    size: int
    device: int


def _torch_tensor(obj: Any) -> bool:
    torch = sys.modules.get("torch")
    return torch is not None and isinstance(obj, torch.Tensor)


def is_cuda_tensor(obj: Any) -> bool:
    """Whether `obj` is a GPU tensor describe() reads (not whether it is a good one): a torch
    tensor on a GPU, an object with __cuda_array_interface__, or DLPack on a CUDA device."""
    if isinstance(obj, (np.ndarray, np.generic, list, tuple, int, float, bool, bytes, str)):
        return False
    if _torch_tensor(obj):
        return bool(obj.is_cuda)
    try:
        if hasattr(obj, "__cuda_array_interface__"):
            return True
        device = getattr(obj, "__dlpack_device__", None)
        return device is not None and int(device()[0]) == _DLPACK_CUDA
    except Exception:  # a property that raises (a CPU tensor, a tensor needing grad, ...)
        return False


def _dtype(dtype: Optional[np.dtype[Any]], shown: str, what: str, strict: bool
           ) -> np.dtype[Any]:
    """`dtype` when it is one that is sent; else ArgumentError, or uint8 when not `strict`."""
    if not strict and (dtype is None or dtype not in _DTYPES):
        return np.dtype(np.uint8)
    if dtype is None or dtype not in _DTYPES:
        raise ArgumentError(f"{what}: dtype {shown} is not sent: use float32, float16, bfloat16, "
                            "int32, int64, bool, float8_e4m3fn or float8_e5m2")
    return dtype


def _c_contiguous(shape: tuple[int, ...], strides: tuple[int, ...], itemsize: int) -> bool:
    """Whether byte `strides` are those of a C-contiguous tensor (a dimension of 1 may have any
    stride)."""
    expected = itemsize
    for n, stride in zip(reversed(shape), reversed(strides)):
        if n != 1 and stride != expected:
            return False
        expected *= n
    return True


def _checked(tensor: CudaTensor, strides: Optional[tuple[int, ...]], what: str, strict: bool
             ) -> CudaTensor:
    itemsize = tensor.dtype.itemsize
    if strict and strides is not None and not _c_contiguous(tensor.shape, strides, itemsize):
        raise ArgumentError(f"{what}: the CUDA tensor is not C-contiguous (strides {strides} "
                            f"bytes, shape {tensor.shape}); make it so (.contiguous(), "
                            "cupy.ascontiguousarray)")
    if tensor.nbytes == 0:
        raise ArgumentError(f"{what}: the CUDA tensor is empty (shape {tensor.shape})")
    return tensor


def _from_torch(obj: Any, what: str, strict: bool) -> CudaTensor:
    dtype = _dtype(_TORCH_DTYPES.get(str(obj.dtype)), str(obj.dtype), what, strict)
    tensor = CudaTensor(int(obj.data_ptr()), tuple(int(n) for n in obj.shape), dtype,
                        obj.device.index)
    strides = tuple(int(s) * dtype.itemsize for s in obj.stride())
    return _checked(tensor, strides, what, strict)


def _from_interface(obj: Any, what: str, strict: bool) -> CudaTensor:
    interface = obj.__cuda_array_interface__
    shape = tuple(int(n) for n in interface["shape"])
    typestr = interface["typestr"]
    try:
        dtype: Optional[np.dtype[Any]] = np.dtype(typestr)
    except TypeError:
        dtype = None
    hint = " (a torch bfloat16 tensor: pass the tensor itself)" if str(typestr) == "<V2" else ""
    dtype = _dtype(dtype, f"{typestr}{hint}", what, strict)
    if strict and interface.get("mask") is not None:
        raise ArgumentError(f"{what}: a masked CUDA array is not sent")
    strides = interface.get("strides")
    tensor = CudaTensor(int(interface["data"][0]), shape, dtype)
    return _checked(tensor, None if strides is None else tuple(int(s) for s in strides), what,
                    strict)


class _DLDevice(ctypes.Structure):
    _fields_ = [("device_type", ctypes.c_int32), ("device_id", ctypes.c_int32)]


class _DLDataType(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]


class DLTensor(ctypes.Structure):
    """DLPack's DLTensor, the head of the DLManagedTensor a "dltensor" capsule points to."""

    _fields_ = [("data", ctypes.c_void_p), ("device", _DLDevice), ("ndim", ctypes.c_int32),
                ("dtype", _DLDataType), ("shape", ctypes.POINTER(ctypes.c_int64)),
                ("strides", ctypes.POINTER(ctypes.c_int64)), ("byte_offset", ctypes.c_uint64)]


_capsule_pointer = ctypes.PYFUNCTYPE(ctypes.c_void_p, ctypes.py_object, ctypes.c_char_p)(
    ("PyCapsule_GetPointer", ctypes.pythonapi))


def _from_dlpack(obj: Any, what: str, strict: bool) -> CudaTensor:
    device_type, device_id = (int(v) for v in obj.__dlpack_device__())
    if device_type != _DLPACK_CUDA:
        raise ArgumentError(f"{what}: the DLPack tensor is on device type {device_type}, not "
                            f"CUDA ({_DLPACK_CUDA})")
    try:
        capsule = obj.__dlpack__()  # not consumed: its destructor calls the deleter
    except (BufferError, TypeError, ValueError, RuntimeError) as error:
        raise ArgumentError(f"{what}: __dlpack__ failed: {error}") from None
    try:
        address = _capsule_pointer(capsule, b"dltensor")
    except ValueError as error:
        raise ArgumentError(f"{what}: __dlpack__ gave no DLPack capsule ({error})") from None
    head = DLTensor.from_address(address)
    shape = tuple(int(head.shape[i]) for i in range(head.ndim))
    code = (int(head.dtype.code), int(head.dtype.bits))
    dtype = _dtype(_DLPACK_DTYPES.get(code) if head.dtype.lanes == 1 else None,
                   f"(DLPack code {code[0]}, {code[1]} bits, {head.dtype.lanes} lanes)", what,
                   strict)
    strides = (None if not head.strides else
               tuple(int(head.strides[i]) * dtype.itemsize for i in range(head.ndim)))
    tensor = CudaTensor((head.data or 0) + int(head.byte_offset), shape, dtype, device_id)
    del head, capsule
    return _checked(tensor, strides, what, strict)


def describe(obj: Any, what: str = "tensor", strict: bool = True) -> CudaTensor:
    """The CudaTensor of `obj` (see the module's doc for what it may be). ArgumentError, naming
    `what`, for an object that is none of those or an empty tensor, and (when `strict`: a
    tensor sent, not one whose memory is registered) a dtype that is not sent or strides that
    are not C-contiguous; not strict, such a tensor is described as uint8 bytes."""
    if _torch_tensor(obj):
        if not obj.is_cuda:
            raise ArgumentError(f"{what}: the torch tensor is on {obj.device}, not a GPU")
        return _from_torch(obj, what, strict)
    try:
        has_interface = hasattr(obj, "__cuda_array_interface__")
    except Exception as error:  # the property raised something other than AttributeError
        raise ArgumentError(f"{what}: __cuda_array_interface__ failed: {error}") from None
    if has_interface:
        return _from_interface(obj, what, strict)
    if hasattr(obj, "__dlpack_device__") and hasattr(obj, "__dlpack__"):
        return _from_dlpack(obj, what, strict)
    raise ArgumentError(f"{what}: expected a CUDA tensor (__cuda_array_interface__, DLPack on a "
                        f"CUDA device, or a torch tensor on a GPU), got {type(obj).__name__}")


# The CUDA driver API, through ctypes.
_POINTER_CONTEXT = 1  # CU_POINTER_ATTRIBUTE_CONTEXT
_POINTER_MEMORY_TYPE = 2  # CU_POINTER_ATTRIBUTE_MEMORY_TYPE
_POINTER_DEVICE_ORDINAL = 9  # CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL
_MEMORY_TYPE_DEVICE = 2  # CU_MEMORYTYPE_DEVICE


@functools.lru_cache(maxsize=1)
def _driver() -> ctypes.CDLL:
    """libcuda.so.1, initialized; FAILED_PRECONDITION without a driver."""
    try:
        lib = ctypes.CDLL("libcuda.so.1")
    except OSError as error:
        raise KernelserveError(grpc.StatusCode.FAILED_PRECONDITION,
                               f"CUDA shared memory needs the NVIDIA driver (libcuda.so.1): "
                               f"{error}") from None
    u64, ptr = ctypes.c_uint64, ctypes.c_void_p
    for name, args in (("cuInit", [ctypes.c_uint]),
                       ("cuGetErrorName", [ctypes.c_int, ctypes.POINTER(ctypes.c_char_p)]),
                       ("cuPointerGetAttribute", [ptr, ctypes.c_int, u64]),
                       ("cuMemGetAddressRange_v2", [ptr, ptr, u64]),
                       ("cuIpcGetMemHandle", [ptr, u64]),
                       ("cuCtxPushCurrent_v2", [ptr]),
                       ("cuCtxPopCurrent_v2", [ptr])):
        function = getattr(lib, name)
        function.argtypes = args
        function.restype = ctypes.c_int
    result = lib.cuInit(0)
    if result != 0:
        raise KernelserveError(grpc.StatusCode.FAILED_PRECONDITION,
                               f"cuInit failed: {_error_name(lib, result)}")
    return lib


def _error_name(lib: ctypes.CDLL, result: int) -> str:
    name = ctypes.c_char_p()
    if lib.cuGetErrorName(result, ctypes.byref(name)) == 0 and name.value:
        return name.value.decode()
    return f"CUresult {result}"


def export(address: int) -> Allocation:
    """The IPC handle, base, size and device ordinal of the allocation holding the device
    `address`. ArgumentError when it is not device memory the driver can export (the
    driver's error named); FAILED_PRECONDITION without a CUDA driver."""
    lib = _driver()

    def check(result: int, call: str) -> None:
        if result != 0:
            raise ArgumentError(f"{call} of address {address:#x}: {_error_name(lib, result)} "
                                "(export device memory from cudaMalloc or a library's default "
                                "allocator; not cudaMallocAsync pools, expandable segments or "
                                "managed memory)")

    memory_type = ctypes.c_uint()
    check(lib.cuPointerGetAttribute(ctypes.byref(memory_type), _POINTER_MEMORY_TYPE, address),
          "cuPointerGetAttribute")
    if memory_type.value != _MEMORY_TYPE_DEVICE:
        raise ArgumentError(f"address {address:#x} is not device memory (CUmemorytype "
                            f"{memory_type.value})")
    ordinal = ctypes.c_int()
    check(lib.cuPointerGetAttribute(ctypes.byref(ordinal), _POINTER_DEVICE_ORDINAL, address),
          "cuPointerGetAttribute")
    context = ctypes.c_void_p()
    check(lib.cuPointerGetAttribute(ctypes.byref(context), _POINTER_CONTEXT, address),
          "cuPointerGetAttribute")
    pushed = bool(context.value) and lib.cuCtxPushCurrent_v2(context) == 0
    try:
        base, size = ctypes.c_uint64(), ctypes.c_size_t()
        check(lib.cuMemGetAddressRange_v2(ctypes.byref(base), ctypes.byref(size), address),
              "cuMemGetAddressRange")
        handle = (ctypes.c_char * HANDLE_BYTES)()
        check(lib.cuIpcGetMemHandle(ctypes.byref(handle), base.value), "cuIpcGetMemHandle")
    finally:
        if pushed:
            lib.cuCtxPopCurrent_v2(ctypes.byref(ctypes.c_void_p()))
    return Allocation(bytes(handle.raw), int(base.value), int(size.value), int(ordinal.value))
