"""Conversions between numpy arrays and kernelserve.v1.Tensor messages.

numpy has no bfloat16, so bf16 tensors travel as uint16 arrays holding the raw bits: a uint16
array is sent as DTYPE_BF16 and a DTYPE_BF16 output comes back as uint16. Use to_bf16 and
from_bf16 to convert from and to float32. A TensorSpec stands for a tensor by its shape alone,
for the calls that need no data (autotune, put_config).
"""

import dataclasses

import numpy as np

from kernelserve.v1 import kernel_service_pb2 as pb

# numpy dtype (little-endian) <-> wire dtype.
_TO_WIRE = {
    np.dtype("<f4"): pb.DTYPE_F32,
    np.dtype("<f2"): pb.DTYPE_F16,
    np.dtype("<u2"): pb.DTYPE_BF16,
    np.dtype("<i4"): pb.DTYPE_I32,
    np.dtype("<i8"): pb.DTYPE_I64,
    np.dtype("bool"): pb.DTYPE_BOOL,
}
_FROM_WIRE = {wire: dtype for dtype, wire in _TO_WIRE.items()}


@dataclasses.dataclass(frozen=True)
class TensorSpec:
    """A tensor without data: its shape and numpy dtype (np.uint16 = bf16)."""

    shape: tuple
    dtype: object = np.float32


def _wire_dtype(dtype):
    wire = _TO_WIRE.get(np.dtype(dtype).newbyteorder("<"))
    if wire is None:
        raise TypeError(
            f"dtype {np.dtype(dtype)} is not sent: use float32, float16, uint16 (bf16 bits), "
            "int32, int64 or bool (e.g. .astype(np.float32))")
    return wire


def to_proto(array, out):
    """Writes `array` (array-like, or a TensorSpec: shape only) into the pb.Tensor `out`."""
    if isinstance(array, TensorSpec):
        out.dtype = _wire_dtype(array.dtype)
        out.shape[:] = array.shape
        return
    array = np.asarray(array)
    wire = _wire_dtype(array.dtype)
    out.dtype = wire
    out.shape[:] = array.shape
    out.data = np.ascontiguousarray(array, dtype=_FROM_WIRE[wire]).tobytes()


def from_proto(tensor):
    """The array of a pb.Tensor (read-only, sharing the message's bytes). bf16 -> uint16."""
    dtype = _FROM_WIRE.get(tensor.dtype)
    if dtype is None:
        raise ValueError(f"tensor has unknown dtype {tensor.dtype}")
    return np.frombuffer(tensor.data, dtype=dtype).reshape(tuple(tensor.shape))


def to_bf16(array):
    """float array -> uint16 bf16 bits, rounding to nearest even; NaN stays NaN."""
    values = np.ascontiguousarray(array, dtype=np.float32)
    bits = values.view(np.uint32)
    rounded = (bits + np.uint32(0x7FFF) + ((bits >> 16) & np.uint32(1))) >> 16
    return np.where(np.isnan(values), (bits >> 16) | np.uint32(0x40), rounded).astype(np.uint16)


def from_bf16(bits):
    """uint16 bf16 bits -> float32."""
    return (np.asarray(bits, dtype=np.uint16).astype(np.uint32) << 16).view(np.float32)
