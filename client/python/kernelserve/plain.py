"""The request of a plain Execute call as wire bytes from cached pieces (the lean path of tiny
calls).

Building an ExecuteRequest with protobuf and serializing it on every call is most of a tiny
call's Python work (bench/python_client.py). A plain call is one whose every input is a NumPy
array of a dtype sent as it is (float32, float16, bfloat16, uint16 bf16 bits, int32, int64,
bool, the fp8 dtypes), under MAX_BYTES in all, or a resident tensor (sent by name), with no
config, outputs or shared-memory regions: a tiny call, or a decode step that sends its new
tokens beside caches kept on the server. Its message is written as pieces: the request without
inputs and request_id (serialized by protobuf once per kernel, params, platform, device and
allow_autotune), then each input's map entry: for an array its head (name, dtype, shape, the
data's length; made once per name, dtype and shape) followed by the array's bytes (its own
memory, not a copy, from wire.LARGE_TENSOR_BYTES up, as wire.splice sends it), for a resident
tensor the whole entry (made once per name and tensor); then the request_id. Protobuf parses
these bytes into the message that calls.execute_request builds: fields may come in any order on
the wire, and every call's own values (its arrays, its request_id) are written afresh, never
cached.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Optional

import numpy as np

from kernelserve import autoshm, calls, tensors, wire
from kernelserve.errors import ArgumentError
from kernelserve.resident import ResidentTensorBase
from kernelserve.v1 import kernel_service_pb2 as pb

# Arrays of fewer bytes than this, all together, take the plain path: below autoshm's threshold,
# so that larger calls to a server on this host still go through shared memory.
MAX_BYTES = autoshm.MIN_BYTES
# Entries each cache keeps at most; a full one starts over (calls whose params change every
# time, say, do not grow it).
MAX_CACHED = 256

_REQUEST_ID = pb.ExecuteRequest.DESCRIPTOR.fields_by_name["request_id"].number
_UINT16 = np.dtype("<u2")  # bf16 bits, sent as they are
_NOT_PLAIN = b""  # a cached "this input takes the usual path"


class PlainRequests:
    """The cached pieces of one client's plain calls. Thread-safe (each cache is a dict, and a
    piece is made again rather than shared half made)."""

    def __init__(self) -> None:
        self._headers: dict[tuple[Any, ...], bytes] = {}
        self._inputs: dict[tuple[Any, ...], bytes] = {}  # arrays' heads and resident entries

    def pieces(self, kernel: str, inputs: Mapping[str, Any], params: Optional[calls.Params],
               platform: str, device: Optional[int], allow_autotune: Optional[bool],
               request_id: str) -> Optional[list[wire.Piece]]:
        """The ExecuteRequest of the call as pieces (their concatenation is the message), or
        None when the call is not plain, or when anything in it is wrong: the usual path then
        builds it, raising what it raises."""
        try:
            # Types too: True == 1 == 1.0, but each is sent (or refused) as its own.
            key = (kernel, platform, device, type(device), allow_autotune, type(allow_autotune),
                   tuple([(n, type(v), v) for n, v in params.items()]) if params else ())
            header = self._headers.get(key)
        except TypeError:  # an unhashable param value (a list, say)
            return None
        if header is None:
            header = self._header(key, kernel, params, platform, device, allow_autotune)
            if header is None:
                return None
        pieces: list[wire.Piece] = [header]
        total = 0
        heads = self._inputs
        for name, value in inputs.items():
            if type(name) is not str:
                return None
            if type(value) is not np.ndarray:
                if not isinstance(value, ResidentTensorBase):
                    return None
                entry = self._resident_entry(name, value.name)
                if not entry:
                    return None
                pieces.append(entry)
                continue
            head_key = (name, value.dtype, value.shape)
            head = heads.get(head_key)
            if head is None:
                head = self._input_head(head_key, name, value)
            total += value.nbytes
            if not head or total >= MAX_BYTES:
                return None
            pieces += (head, _data(value))
        if request_id:
            pieces.append(wire.string_field(_REQUEST_ID, request_id))
        return pieces

    def _header(self, key: tuple[Any, ...], kernel: str, params: Optional[calls.Params],
                platform: str, device: Optional[int], allow_autotune: Optional[bool]
                ) -> Optional[bytes]:
        """The serialized request without inputs and request_id, made and kept under `key`;
        None for anything calls.execute_request or protobuf refuses."""
        header = _serialized_header(kernel, params, platform, device, allow_autotune)
        if header is not None:
            _store(self._headers, key, header)
        return header

    def _input_head(self, key: tuple[Any, ...], name: str, array: np.ndarray) -> bytes:
        """The head of the input's map entry (up to its data), made and kept under `key`;
        _NOT_PLAIN for an array whose bytes are not sent as they are."""
        head = _input_head(name, array)
        _store(self._inputs, key, head)
        return head

    def _resident_entry(self, name: str, tensor: str) -> bytes:
        """The map entry of input `name` sent as resident tensor `tensor`, made and kept;
        _NOT_PLAIN for names protobuf refuses."""
        key = (name, ResidentTensorBase, tensor)
        entry = self._inputs.get(key)
        if entry is None:
            try:
                request = pb.ExecuteRequest()
                request.inputs[name].ref.tensor = tensor
                entry = request.SerializeToString()
            except (TypeError, ValueError):  # protobuf's, for a name that is not UTF-8
                entry = _NOT_PLAIN
            _store(self._inputs, key, entry)
        return entry


def _data(array: np.ndarray) -> wire.Piece:
    """The array's bytes in C order: a view of its own memory when it is large and C-contiguous
    (the call must end before it changes, as wire.splice's), else a copy."""
    if array.nbytes >= wire.LARGE_TENSOR_BYTES and array.flags.c_contiguous:
        return wire.data_view(array)
    return array.tobytes()


def _serialized_header(kernel: str, params: Optional[calls.Params], platform: str,
                       device: Optional[int], allow_autotune: Optional[bool]) -> Optional[bytes]:
    """calls.execute_request's message without inputs, serialized; None when it fails."""
    try:
        request = calls.execute_request(calls.Request(
            kernel=kernel, inputs={}, params=params, platform=platform, device=device,
            allow_autotune=allow_autotune))
    except (ArgumentError, TypeError, ValueError):  # protobuf's, for a value of a wrong type
        return None
    return request.SerializeToString()


def _input_head(name: str, array: np.ndarray) -> bytes:
    """wire.input_prefix of the array, or _NOT_PLAIN when its dtype is not sent as it is (a
    big-endian one, float64: converted on the usual path) or its name is not UTF-8."""
    try:
        dtype = tensors.wire_dtype(array.dtype, name)
        if array.dtype != tensors.numpy_dtype(dtype) and array.dtype != _UINT16:
            return _NOT_PLAIN
        # A 0-d array goes as [1], as tensors.to_proto sends it (np.ascontiguousarray's).
        meta = pb.Tensor(dtype=dtype, shape=array.shape or (1,))  # type: ignore[arg-type]
        return wire.input_prefix(name, meta.SerializeToString(), array.nbytes)
    except (ArgumentError, UnicodeError):
        return _NOT_PLAIN


def _store(cache: dict[tuple[Any, ...], bytes], key: tuple[Any, ...], value: bytes) -> None:
    """cache[key] = value, emptying the cache first when it is full."""
    if len(cache) >= MAX_CACHED:
        cache.clear()
    cache[key] = value
