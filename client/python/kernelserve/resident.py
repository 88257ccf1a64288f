"""Resident tensors: tensors the server keeps between calls, each its caller's, by name.

    with client.create_tensor(k, name="k") as k_res, client.create_tensor(v, name="v") as v_res:
        for q in queries:                                     # k and v's bytes went once
            client.flash_attention(q, k_res, v_res)           # they go by name
        k_res.write(new_rows, row=4)                          # rows 4.. of dimension 0
        k_res.read(rows=slice(0, 2))                          # a NumPy array of rows 0 and 1
    out = client.create_tensor(None, name="out", dtype=np.float32, shape=(8, 1024))   # zeros
    client.mean_pooling(x, outputs={"out": out}).out is out   # True: written on the server

client.create_tensor makes one (CreateTensor) and returns a ResidentTensor: as an input of
execute, a kernel method or execute_stream it is sent as Tensor.ref.tensor (its name alone; the
server has its dtype and shape), and in `outputs=` the server writes that output into it in
place (the tensor must have the output's dtype and shape; the result's output is then the
ResidentTensor itself, read with .read()). An output may be written into a tensor the same call
reads only where the kernel's schema says so (OutputSchema.in_place_of).

A resident tensor outlives the client that made it: it lives in the server's memory until
deleted (.delete(), the end of a with block, client.delete_tensor), until it has been idle for
its TTL, or until the server restarts. Tensors belong to the caller's identity (its token):
another client with the same token sees and uses them; client.list_tensors() lists them.
kernelserve.aio.Client has the same calls, returning AsyncResidentTensor (`await t.read()`,
`async with`).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterator
from typing import Any, Optional, Union

import grpc
import numpy as np
import numpy.typing as npt

from kernelserve import cuda, tensors
from kernelserve.errors import ArgumentError, KernelserveError
from kernelserve.shm import Regions, RegionTensor
from kernelserve.v1 import kernel_service_pb2 as pb

# Rows of dimension 0 to read: slice(start, stop) (stop None = to the last row) or
# (start, stop); None = all.
Rows = Optional[Union[slice, tuple[int, Optional[int]]]]


@dataclasses.dataclass(frozen=True)
class ResidentTensorInfo:
    """A resident tensor as the server lists it (ListTensors, CreateTensor, WriteTensor)."""

    name: str
    dtype: np.dtype  # bf16: ml_dtypes.bfloat16
    shape: tuple[int, ...]
    device: int  # the GPU holding it; -1 = host memory
    byte_size: int
    owner: str  # the identity that created it
    created_unix_ms: int
    last_used_unix_ms: int  # its last call, read or write
    calls: int  # calls holding it now (queued or running)
    ttl_seconds: int  # idle seconds after which it expires (never while a call holds it)


@dataclasses.dataclass(frozen=True)
class ResidentTensors:
    """What list_tensors answers: the tensors (iterating over it, len() and [i] give them) and
    the server's totals."""

    tensors: list[ResidentTensorInfo]
    server_started_unix_ms: int  # a restart of the server loses every resident tensor
    resident_bytes: int  # of every owner, now
    max_resident_bytes: int  # the server's --max-resident-bytes
    quota_bytes: int  # the caller's identity's quota (0 = max_resident_bytes alone)
    owner_bytes: int  # the caller's identity's, now

    def __iter__(self) -> Iterator[ResidentTensorInfo]:
        return iter(self.tensors)

    def __len__(self) -> int:
        return len(self.tensors)

    def __getitem__(self, index: int) -> ResidentTensorInfo:
        return self.tensors[index]

    def names(self) -> list[str]:
        """The tensors' names, in the server's order."""
        return [t.name for t in self.tensors]


def info_of(info: pb.ResidentTensorInfo) -> ResidentTensorInfo:
    """The ResidentTensorInfo of a pb.ResidentTensorInfo."""
    try:
        dtype = tensors.numpy_dtype(info.dtype)
    except ValueError as error:
        raise KernelserveError(grpc.StatusCode.INTERNAL,
                               f"resident tensor {info.name!r}: {error}") from None
    return ResidentTensorInfo(
        name=info.name, dtype=dtype, shape=tuple(info.shape), device=info.device,
        byte_size=info.byte_size, owner=info.owner, created_unix_ms=info.created_unix_ms,
        last_used_unix_ms=info.last_used_unix_ms, calls=info.calls, ttl_seconds=info.ttl_seconds)


def list_of(response: pb.ListTensorsResponse) -> ResidentTensors:
    """The ResidentTensors of a pb.ListTensorsResponse."""
    return ResidentTensors(
        tensors=[info_of(t) for t in response.tensors],
        server_started_unix_ms=response.server_started_unix_ms,
        resident_bytes=response.resident_bytes, max_resident_bytes=response.max_resident_bytes,
        quota_bytes=response.quota_bytes, owner_bytes=response.owner_bytes)


def _contents(array: Any, out: pb.Tensor, what: str, regions: Optional[Regions],
              with_shape: bool = True) -> None:
    """Writes the contents of a create or write into `out`: a reference when `array` is a
    RegionTensor or lies in one of `regions` (shared memory), else its bytes. with_shape False
    leaves the shape out (a write at a byte offset)."""
    ref = array if isinstance(array, RegionTensor) else (
        regions.locate(array, what) if regions is not None else None)
    if ref is None:
        tensors.to_proto(array, out, what)
    else:
        out.dtype = tensors.wire_dtype(ref.dtype, what)  # type: ignore[assignment]
        out.shape[:] = ref.shape
        out.ref.region = ref.region
        out.ref.offset = ref.offset
        out.ref.byte_size = ref.nbytes
    if not with_shape:
        del out.shape[:]


def _ttl_seconds(ttl: Optional[float], name: str) -> int:
    if ttl is None:
        return 0
    if isinstance(ttl, bool) or not isinstance(ttl, (int, float)) or ttl < 0:
        raise ArgumentError(f"create_tensor {name!r}: ttl must be seconds >= 0 (0 or None = the "
                            f"server's default), got {ttl!r}")
    return math.ceil(ttl)


def create_request(name: str, array: Optional[npt.ArrayLike], dtype: Optional[npt.DTypeLike],
                   shape: Optional[tuple[int, ...]], device: Optional[int],
                   ttl: Optional[float], regions: Optional[Regions] = None
                   ) -> pb.CreateTensorRequest:
    """The CreateTensorRequest of client.create_tensor: `array`'s dtype, shape and bytes (dtype
    given: the array converted to it; shape given: it must be the array's), or without an
    array zeros of `shape` and `dtype` (float32 by default). ArgumentError for a shape that is
    missing or not the array's, or a dtype that is not sent."""
    what = f"create_tensor {name!r}"
    if not isinstance(name, str) or not name:
        raise ArgumentError(f"create_tensor: name must be a non-empty str, got {name!r}")
    request = pb.CreateTensorRequest(name=name, ttl_seconds=_ttl_seconds(ttl, name))
    if device is not None:
        request.device = device
    if array is None:
        if shape is None:
            raise ArgumentError(f"{what}: give an array, or a shape (and dtype) for zeros")
        request.dtype = tensors.wire_dtype(  # type: ignore[assignment]
            np.float32 if dtype is None else dtype, name)
        request.shape[:] = tuple(shape)
        return request
    if dtype is not None and not isinstance(array, RegionTensor) and (
            regions is None or regions.locate(array, what) is None):
        array = np.asarray(array, dtype=dtype)
    _contents(array, request.contents, name, regions)
    if shape is not None and tuple(shape) != tuple(request.contents.shape):
        raise ArgumentError(f"{what}: shape {tuple(shape)} is not the array's "
                            f"{tuple(request.contents.shape)}; leave shape out with an array")
    request.dtype = request.contents.dtype
    request.shape[:] = request.contents.shape
    return request


def write_request(name: str, array: npt.ArrayLike, row: int = 0,
                  byte_offset: Optional[int] = None, regions: Optional[Regions] = None
                  ) -> pb.WriteTensorRequest:
    """The WriteTensorRequest of write_tensor: `array` (rows [row, row + len(array)) of
    dimension 0, or its bytes from byte_offset on). ArgumentError for a negative place or
    both."""
    if byte_offset is not None and row:
        raise ArgumentError(f"write_tensor {name!r}: give row or byte_offset, not both")
    if row < 0 or (byte_offset is not None and byte_offset < 0):
        raise ArgumentError(f"write_tensor {name!r}: row and byte_offset must be >= 0")
    request = pb.WriteTensorRequest(name=name, row_offset=row)
    if byte_offset is not None:
        request.byte_offset = byte_offset
    _contents(array, request.contents, name, regions, with_shape=byte_offset is None)
    return request


def read_request(name: str, rows: Rows = None) -> pb.ReadTensorRequest:
    """The ReadTensorRequest of rows `rows` (None = all) of tensor `name`."""
    request = pb.ReadTensorRequest(name=name)
    if rows is None:
        return request
    if isinstance(rows, slice):
        if rows.step not in (None, 1):
            raise ArgumentError(f"read_tensor {name!r}: rows take no step, got {rows}")
        start, stop = rows.start, rows.stop
    elif isinstance(rows, tuple) and len(rows) == 2:
        start, stop = rows
    else:
        raise ArgumentError(f"read_tensor {name!r}: rows must be slice(start, stop) or "
                            f"(start, stop), got {rows!r}")
    start = 0 if start is None else start
    if not isinstance(start, int) or start < 0 or (
            stop is not None and (not isinstance(stop, int) or stop < start)):
        raise ArgumentError(f"read_tensor {name!r}: rows ({start}, {stop}): expected "
                            "0 <= start <= stop (stop None = to the last row)")
    request.row_offset = start
    if stop is not None:
        request.rows = stop - start
    return request


# Bytes of a create's, write's or read's other fields, beside the tensor's bytes (the server
# keeps 4 KiB for an answer's).
OTHER_FIELDS_BYTES = 8 << 10


def piece_bytes(client_max: int, server_max: int) -> int:
    """The most tensor bytes one message carries: the smaller of the client's largest message
    and the server's (0 = unknown: the client's alone), less room for the other fields."""
    limit = min(client_max, server_max) if server_max > 0 else client_max
    return limit - OTHER_FIELDS_BYTES if limit > 2 * OTHER_FIELDS_BYTES else limit // 2


def split(total: int, most: int, unit: int) -> list[tuple[int, int]]:
    """(offset, size) pieces of `total` of at most `most` each, all but the last whole `unit`s
    (one unit when `most` is less)."""
    step = max(unit, most // unit * unit)
    return [(offset, min(step, total - offset)) for offset in range(0, total, step)]


def write_pieces(request: pb.WriteTensorRequest, start: int, most: int
                 ) -> list[pb.WriteTensorRequest]:
    """The writes, at byte offsets from `start` on, that together write request's inline
    contents in pieces of at most `most` bytes of whole elements."""
    data = request.contents.data
    item = tensors.numpy_dtype(request.contents.dtype).itemsize
    return [pb.WriteTensorRequest(name=request.name, byte_offset=start + offset,
                                  contents=pb.Tensor(dtype=request.contents.dtype,
                                                     data=data[offset:offset + size]))
            for offset, size in split(len(data), most, item)]


def row_bytes(info: ResidentTensorInfo) -> int:
    """The bytes of one row of dimension 0 (all of them for a scalar)."""
    rows = info.shape[0] if info.shape else 0
    return info.byte_size // rows if rows > 0 else info.byte_size


def write_start(info: ResidentTensorInfo, request: pb.WriteTensorRequest) -> int:
    """Where `request` writes in `info`'s tensor, after checking what the server checks of a
    whole write (dtype, whole rows, the end), so that no piece is written of a write that
    cannot be: ArgumentError otherwise."""
    what = f"write_tensor {info.name!r}"
    data = len(request.contents.data)
    if tensors.numpy_dtype(request.contents.dtype) != info.dtype:
        names = tensors.DTYPE_NAMES
        raise ArgumentError(f"{what}: contents are {names[request.contents.dtype]}; the tensor "
                            f"is {names[tensors.wire_dtype(info.dtype, info.name)]}")
    row = row_bytes(info)
    if request.HasField("byte_offset"):
        start = request.byte_offset
    elif data % row:
        raise ArgumentError(f"{what}: {data} bytes: expected whole rows of {row} bytes")
    else:
        start = request.row_offset * row
    if start + data > info.byte_size:
        raise ArgumentError(f"{what}: {data} bytes at byte {start} do not fit its "
                            f"{info.byte_size} bytes")
    return start


def read_pieces(info: ResidentTensorInfo, request: pb.ReadTensorRequest, most: int
                ) -> Optional[list[pb.ReadTensorRequest]]:
    """The reads of whole rows of at most `most` bytes each that together read `request`'s
    rows; None when one read does (or the server is to refuse the range)."""
    rows_in = info.shape[0] if info.shape else 1
    first = request.row_offset
    count = request.rows if request.HasField("rows") else rows_in - first
    row = row_bytes(info)
    if row == 0 or first > rows_in or count < 0 or count > rows_in - first or count * row <= most:
        return None
    return [pb.ReadTensorRequest(name=request.name, row_offset=first + offset, rows=size)
            for offset, size in split(count, max(1, most // row), 1)]


def not_found(name: str) -> KernelserveError:
    """The error for a name the caller has no resident tensor of."""
    return KernelserveError(grpc.StatusCode.NOT_FOUND, f"no resident tensor {name!r}")


class ResidentTensorBase:
    """A resident tensor on the server, by name: an input of execute, the kernel methods and
    execute_stream (sent as its name), or an output place (`outputs={"out": t}`). See
    ResidentTensor for the blocking client's and AsyncResidentTensor for asyncio's."""

    def __init__(self, client: Any, info: ResidentTensorInfo, created: bool = True) -> None:
        """`client`: the kernelserve.Client (or aio.Client) that reaches it."""
        self._client = client
        self._info = info
        self.created = created  # False: create_tensor found it there already (left as it was)
        self.deleted = False  # delete() ran

    @property
    def name(self) -> str:
        return self._info.name

    @property
    def dtype(self) -> np.dtype:
        return self._info.dtype

    @property
    def shape(self) -> tuple[int, ...]:
        return self._info.shape

    @property
    def device(self) -> int:
        """The GPU holding it; -1 = host memory."""
        return self._info.device

    @property
    def nbytes(self) -> int:
        return self._info.byte_size

    def _rows(self, array: npt.ArrayLike, byte_offset: Optional[int]) -> Any:
        """`array`, as rows: one row of this tensor (its rank one less) becomes [1, ...]."""
        if byte_offset is not None or isinstance(array, RegionTensor) or cuda.is_cuda_tensor(
                array):
            return array
        values = array if isinstance(array, np.ndarray) else np.asarray(array)
        return values[np.newaxis] if values.ndim == len(self.shape) - 1 else values

    def __repr__(self) -> str:
        state = " deleted" if self.deleted else ""
        return (f"<{type(self).__name__} {self.name!r} {np.dtype(self.dtype).name}"
                f"{list(self.shape)} device={self.device}{state}>")


class ResidentTensor(ResidentTensorBase):
    """A resident tensor reached through a kernelserve.Client. The end of a with block deletes
    it."""

    def write(self, array: npt.ArrayLike, *, row: int = 0,
              byte_offset: Optional[int] = None) -> ResidentTensorInfo:
        """Writes `array` into rows [row, row + len(array)) of dimension 0 (one row may be
        given without its leading 1), or its bytes from byte_offset on. See
        Client.write_tensor."""
        self._info = self._client.write_tensor(self.name, self._rows(array, byte_offset),
                                                row=row, byte_offset=byte_offset)
        return self._info

    def read(self, rows: Rows = None) -> np.ndarray:
        """Its rows `rows` of dimension 0 (slice or (start, stop); None = all), as a read-only
        array."""
        return self._client.read_tensor(self.name, rows)

    def info(self) -> ResidentTensorInfo:
        """The tensor as the server lists it now (calls, last use); NOT_FOUND once gone."""
        self._info = self._client.get_tensor(self.name)._info
        return self._info

    def delete(self) -> None:
        """Deletes it on the server (idempotent here; NOT_FOUND when it was gone already,
        e.g. expired; FAILED_PRECONDITION while a call holds it)."""
        if not self.deleted:
            self._client.delete_tensor(self.name)
            self.deleted = True

    def __enter__(self) -> ResidentTensor:
        return self

    def __exit__(self, *exc: object) -> None:
        try:
            self.delete()
        except KernelserveError as error:
            if error.code != grpc.StatusCode.NOT_FOUND:
                raise
            self.deleted = True


class AsyncResidentTensor(ResidentTensorBase):
    """A resident tensor reached through a kernelserve.aio.Client: as ResidentTensor, each call
    a coroutine, and `async with`."""

    async def write(self, array: npt.ArrayLike, *, row: int = 0,
                    byte_offset: Optional[int] = None) -> ResidentTensorInfo:
        """See ResidentTensor.write."""
        self._info = await self._client.write_tensor(self.name, self._rows(array, byte_offset),
                                                      row=row, byte_offset=byte_offset)
        return self._info

    async def read(self, rows: Rows = None) -> np.ndarray:
        """See ResidentTensor.read."""
        return await self._client.read_tensor(self.name, rows)

    async def info(self) -> ResidentTensorInfo:
        """See ResidentTensor.info."""
        self._info = (await self._client.get_tensor(self.name))._info
        return self._info

    async def delete(self) -> None:
        """See ResidentTensor.delete."""
        if not self.deleted:
            await self._client.delete_tensor(self.name)
            self.deleted = True

    async def __aenter__(self) -> AsyncResidentTensor:
        return self

    async def __aexit__(self, *exc: object) -> None:
        try:
            await self.delete()
        except KernelserveError as error:
            if error.code != grpc.StatusCode.NOT_FOUND:
                raise
            self.deleted = True
