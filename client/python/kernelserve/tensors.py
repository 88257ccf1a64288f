"""Conversions between NumPy arrays and kernelserve.v1.Tensor messages.

bf16 is `ml_dtypes.bfloat16` (re-exported as `kernelserve.bfloat16`): a bfloat16 array is sent
as DTYPE_BF16 and a DTYPE_BF16 output comes back as a bfloat16 array. For compatibility a
uint16 array is also sent as bf16 (its values are the raw bits); `to_bf16` and `from_bf16`
convert between floats and those bits. The fp8 dtypes are `ml_dtypes.float8_e4m3fn` (f8_e4m3,
re-exported as `kernelserve.float8_e4m3fn`) and `ml_dtypes.float8_e5m2` (f8_e5m2,
`kernelserve.float8_e5m2`), both ways; no integer array stands for fp8 bits (view uint8 bits as
one of them). ml_dtypes' float -> fp8 casts give NaN (e4m3) or infinity (e5m2) on overflow; the
server's own conversions saturate at the largest finite value. A TensorSpec stands for a tensor by its shape alone, for
the calls that need no data (autotune, put_config); a RegionTensor (kernelserve.shm) for one in a
registered shared-memory region, for execute and execute_stream.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Optional, Union

import ml_dtypes
import numpy as np
import numpy.typing as npt

from kernelserve import cuda
from kernelserve.errors import ArgumentError
from kernelserve.shm import RegionTensor
from kernelserve.v1 import kernel_service_pb2 as pb

bfloat16: type = ml_dtypes.bfloat16
_BF16 = np.dtype(bfloat16)
float8_e4m3fn: type = ml_dtypes.float8_e4m3fn
float8_e5m2: type = ml_dtypes.float8_e5m2
_F8E4M3 = np.dtype(float8_e4m3fn)
_F8E5M2 = np.dtype(float8_e5m2)
# The ml_dtypes dtypes, looked up as they are (not by byte order).
_ML_DTYPES = (_BF16, _F8E4M3, _F8E5M2)

# NumPy dtype (little-endian) -> wire dtype. uint16 is bf16 bits.
_TO_WIRE: dict[np.dtype[Any], int] = {
    np.dtype("<f4"): pb.DTYPE_F32,
    np.dtype("<f2"): pb.DTYPE_F16,
    _BF16: pb.DTYPE_BF16,
    np.dtype("<u2"): pb.DTYPE_BF16,
    np.dtype("<i4"): pb.DTYPE_I32,
    np.dtype("<i8"): pb.DTYPE_I64,
    np.dtype("bool"): pb.DTYPE_BOOL,
    _F8E4M3: pb.DTYPE_F8_E4M3,
    _F8E5M2: pb.DTYPE_F8_E5M2,
}
# Wire dtype -> the dtype of the arrays this package returns.
_FROM_WIRE: dict[int, np.dtype[Any]] = {
    pb.DTYPE_F32: np.dtype("<f4"),
    pb.DTYPE_F16: np.dtype("<f2"),
    pb.DTYPE_BF16: _BF16,
    pb.DTYPE_I32: np.dtype("<i4"),
    pb.DTYPE_I64: np.dtype("<i8"),
    pb.DTYPE_BOOL: np.dtype("bool"),
    pb.DTYPE_F8_E4M3: _F8E4M3,
    pb.DTYPE_F8_E5M2: _F8E5M2,
}
# Wire dtype -> the short name the schema and the CLI use.
DTYPE_NAMES = {pb.DTYPE_F32: "f32", pb.DTYPE_F16: "f16", pb.DTYPE_BF16: "bf16",
               pb.DTYPE_I32: "i32", pb.DTYPE_I64: "i64", pb.DTYPE_BOOL: "bool",
               pb.DTYPE_F8_E4M3: "f8_e4m3", pb.DTYPE_F8_E5M2: "f8_e5m2"}


@dataclasses.dataclass(frozen=True)
class TensorSpec:
    """A tensor without data: its shape and NumPy dtype (bfloat16 or uint16 = bf16;
    float8_e4m3fn, float8_e5m2 = fp8)."""

    shape: tuple[int, ...]
    dtype: npt.DTypeLike = np.float32


# What an input may be: an array (or anything np.asarray takes), a TensorSpec, or a RegionTensor
# (execute and execute_stream).
TensorLike = Union[npt.ArrayLike, TensorSpec, RegionTensor]


def wire_dtype(dtype_like: npt.DTypeLike, name: str) -> int:
    """The wire dtype of a NumPy dtype; ArgumentError naming the input `name` for one that is
    not sent."""
    dtype = np.dtype(dtype_like)
    wire = _TO_WIRE.get(dtype if dtype in _ML_DTYPES else dtype.newbyteorder("<"))
    if wire is None:
        raise ArgumentError(
            f"input {name!r}: dtype {dtype} is not sent: use float32, float16, ml_dtypes.bfloat16 "
            "(or uint16 bf16 bits), int32, int64, bool, ml_dtypes.float8_e4m3fn or "
            "ml_dtypes.float8_e5m2 (e.g. .astype(np.float32))")
    return wire


def to_proto(array: TensorLike, out: pb.Tensor, name: str = "") -> None:
    """Writes `array` (array-like, or a TensorSpec: shape only) into the pb.Tensor `out`;
    ArgumentError naming the input `name` for a dtype that is not sent, or a RegionTensor (a
    reference goes in execute and execute_stream only)."""
    if isinstance(array, RegionTensor):
        raise ArgumentError(f"input {name!r}: a shared-memory tensor (RegionTensor) is taken by "
                            "execute and execute_stream only; pass the array here")
    if isinstance(array, TensorSpec):
        out.dtype = wire_dtype(array.dtype, name)  # type: ignore[assignment]
        out.shape[:] = array.shape
        return
    if cuda.is_cuda_tensor(array):
        raise ArgumentError(f"input {name!r}: a CUDA tensor is sent only from a CUDA region this "
                            "client registered (register_cuda_shm), by execute and "
                            "execute_stream; copy it to the host here")
    wire, values = _wire_array(array, name)
    out.dtype = wire  # type: ignore[assignment]  # an enum value; the .pyi wants its type
    out.shape[:] = values.shape
    out.data = values.tobytes()


def _wire_array(array: Any, name: str) -> tuple[int, np.ndarray]:
    """The wire dtype of an array-like and its values as the C-contiguous little-endian array
    whose bytes are sent (the array itself when it is one already)."""
    values = np.asarray(array)
    wire = wire_dtype(values.dtype, name)
    bits = wire == pb.DTYPE_BF16 and values.dtype != _BF16  # uint16 bf16 bits
    dtype = np.dtype("<u2") if bits else _FROM_WIRE[wire]
    return wire, np.ascontiguousarray(values, dtype=dtype)


def sent_aside(array: TensorLike, name: str, min_bytes: int
               ) -> Optional[tuple[pb.Tensor, np.ndarray]]:
    """For an array (not a TensorSpec, RegionTensor or CUDA tensor) of at least `min_bytes`:
    its Tensor without data (dtype and shape) and the C-contiguous array whose bytes are its data
    (no copy when the array is one already), for kernelserve.wire to send beside the message;
    None for anything else. ArgumentError naming the input `name` for a dtype that is not
    sent."""
    if isinstance(array, (TensorSpec, RegionTensor)) or cuda.is_cuda_tensor(array):
        return None
    if isinstance(array, np.ndarray) and array.nbytes < min_bytes:
        return None  # without np.asarray's cost for the small arrays of tiny calls
    wire, values = _wire_array(array, name)
    if values.nbytes < min_bytes:
        return None
    return pb.Tensor(dtype=wire, shape=values.shape), values  # type: ignore[arg-type]


def numpy_dtype(wire: int) -> np.dtype[Any]:
    """The NumPy dtype of the arrays this package returns for a wire dtype (bf16: bfloat16;
    f8_e4m3, f8_e5m2: ml_dtypes.float8_e4m3fn, float8_e5m2); ValueError for an unknown one."""
    dtype = _FROM_WIRE.get(wire)
    if dtype is None:
        raise ValueError(f"tensor has unknown dtype {wire}")
    return dtype


def from_proto(tensor: pb.Tensor) -> np.ndarray:
    """The array of a pb.Tensor (read-only, sharing the message's bytes); bf16 is bfloat16."""
    dtype = numpy_dtype(tensor.dtype)
    array: np.ndarray = np.frombuffer(tensor.data, dtype=dtype)
    return array.reshape(tuple(tensor.shape))


def from_data(tensor: pb.Tensor, data: memoryview) -> np.ndarray:
    """The array of a Tensor (dtype and shape) whose bytes are `data` (kernelserve.wire's view of
    an answer): read-only, sharing `data` when it lies at an address aligned for the dtype, else
    a copy (NumPy takes unaligned arrays, but many libraries do not)."""
    dtype = numpy_dtype(tensor.dtype)
    array: np.ndarray = np.frombuffer(data, dtype=dtype)
    if not array.flags.aligned:
        array = array.copy()
    array.flags.writeable = False  # as from_proto's: the answer's bytes, not the caller's
    return array.reshape(tuple(tensor.shape))


def to_bf16(array: npt.ArrayLike) -> np.ndarray:
    """Numbers -> uint16 bf16 bits, rounded to nearest even (NaN stays NaN). For a bfloat16
    array itself use `np.asarray(values).astype(kernelserve.bfloat16)`."""
    return np.ascontiguousarray(np.asarray(array).astype(bfloat16)).view(np.uint16)


def from_bf16(bits: Any) -> np.ndarray:
    """uint16 bf16 bits, or a bfloat16 array -> float32."""
    array = np.asarray(bits)
    if array.dtype != _BF16:
        array = np.ascontiguousarray(array, dtype=np.uint16).view(bfloat16)
    return array.astype(np.float32)
