"""Execute calls with large tensors, without copying their bytes into protobuf messages.

Sending a message through protobuf costs the data four copies before gRPC sees it (the array's
`tobytes`, the copy into the message, `SerializeToString`) and gRPC's own; reading the answer
one more (the parse into the message). Each lands in freshly faulted pages, which is most of the
cost of a large call. Here a request's large input tensors are kept aside while protobuf writes
the rest of the message (small), and the wire bytes are spliced around the arrays' own buffers:
`Spliced.pieces` is that message as a list of byte strings and buffers, in order. The pure-Python
path joins them into one bytes object for grpcio (one copy); the native path (kernelserve._native)
hands them to gRPC as they are. An answer is read the other way round: `split_answer` finds the
bytes of each output tensor in the received message and returns them as views, letting protobuf
parse only the rest.

The wire format written and read here is protobuf's own (a map entry is a message of key = 1,
value = 2; a Tensor's data is field 3), so the server cannot tell a spliced message from one
protobuf wrote, and what split_answer returns is what protobuf's parse gives (a map key given
twice keeps the last entry, a data field given twice the last one).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any, Union

import numpy as np

from kernelserve.v1 import kernel_service_pb2 as pb

# An input of at least this many bytes goes beside the message, not through it. Below, the copy
# protobuf makes costs less than the Python-level work of splicing (a few microseconds).
LARGE_TENSOR_BYTES = 64 << 10

# The method that Client calls with wire bytes (grpcio sends bytes as they are).
EXECUTE_METHOD = "/kernelserve.v1.KernelService/Execute"

# A piece of a message on the wire: protobuf's bytes or a tensor's own buffer.
Piece = Union[bytes, memoryview]

_LEN = 2  # the wire type of length-delimited fields
_INPUTS = pb.ExecuteRequest.DESCRIPTOR.fields_by_name["inputs"].number
_OUTPUTS = pb.ExecuteResponse.DESCRIPTOR.fields_by_name["outputs"].number
_DATA = pb.Tensor.DESCRIPTOR.fields_by_name["data"].number
_MAP_KEY, _MAP_VALUE = 1, 2


def varint(value: int) -> bytes:
    """The base-128 varint of a non-negative int."""
    out = bytearray()
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def _tag(field: int, wire_type: int) -> bytes:
    return varint((field << 3) | wire_type)


def _length_prefix(field: int, size: int) -> bytes:
    return _tag(field, _LEN) + varint(size)


@dataclasses.dataclass
class Spliced:
    """A request message as pieces: `pieces` concatenated are its wire bytes. The buffers among
    them are the inputs' own memory: they must not change until the call is done."""

    pieces: list[Piece]
    nbytes: int  # the message's size

    def join(self) -> bytes:
        """The message as one bytes object (one copy of everything)."""
        return b"".join(self.pieces)


def splice(header: bytes, aside: Mapping[str, tuple[pb.Tensor, np.ndarray]]) -> Spliced:
    """The pieces of an ExecuteRequest whose message without the `aside` inputs serializes to
    `header`, and whose input `name` is aside[name]: (its Tensor with dtype and shape and no
    data, its bytes as a C-contiguous array)."""
    pieces: list[Piece] = [header]
    total = len(header)
    for name, (tensor, array) in aside.items():
        data = data_view(array)
        prefix = input_prefix(name, tensor.SerializeToString(), data.nbytes)
        pieces += [prefix, data]
        total += len(prefix) + data.nbytes
    return Spliced(pieces, total)


def data_view(array: np.ndarray) -> memoryview:
    """A C-contiguous array's bytes as a flat view of its own memory (as bytes: bfloat16 arrays
    export no buffer of their own dtype)."""
    return memoryview(array.reshape(-1).view(np.uint8))


def input_prefix(name: str, meta: bytes, nbytes: int) -> bytes:
    """The bytes of an ExecuteRequest's `inputs` map entry for input `name` up to its tensor's
    data: `meta` is the serialized Tensor without data (dtype and shape), `nbytes` the size of
    the data that follows."""
    key = name.encode()
    value_size = len(meta) + len(_length_prefix(_DATA, nbytes)) + nbytes
    value = _length_prefix(_MAP_VALUE, value_size)
    entry_size = len(_length_prefix(_MAP_KEY, len(key))) + len(key) + len(value) + value_size
    return b"".join([_length_prefix(_INPUTS, entry_size), _length_prefix(_MAP_KEY, len(key)),
                     key, value, meta, _length_prefix(_DATA, nbytes)])


def string_field(field: int, text: str) -> bytes:
    """The bytes of a string field `field` of value `text` (for a message that is pieces)."""
    value = text.encode()
    return _length_prefix(field, len(value)) + value


class WireError(ValueError):
    """An answer that is not a well-formed message."""


def _varint_at(buf: memoryview, pos: int, end: int) -> tuple[int, int]:
    """The varint at buf[pos] and the position after it."""
    value = shift = 0
    while pos < end:
        byte = buf[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        if byte < 0x80:
            return value, pos
        shift += 7
        if shift > 63:
            break
    raise WireError("a varint runs past its message or is too long")


def _field_end(buf: memoryview, wire_type: int, pos: int, end: int) -> int:
    """Where a field whose value starts at `pos` ends."""
    if wire_type == 0:
        return _varint_at(buf, pos, end)[1]
    if wire_type == 1:
        stop = pos + 8
    elif wire_type == 5:
        stop = pos + 4
    elif wire_type == _LEN:
        size, pos = _varint_at(buf, pos, end)
        stop = pos + size
    else:
        raise WireError(f"wire type {wire_type} is not used by these messages")
    if stop > end:
        raise WireError("a field runs past its message")
    return stop


def _fields(buf: memoryview, pos: int, end: int) -> Any:
    """(field number, wire type, start of the field's tag, start of its value, end) of each field
    of the message buf[pos:end]."""
    while pos < end:
        start = pos
        tag, pos = _varint_at(buf, pos, end)
        field, wire_type = tag >> 3, tag & 7
        if field == 0:
            raise WireError("field number 0")
        stop = _field_end(buf, wire_type, pos, end)
        yield field, wire_type, start, pos, stop
        pos = stop


def _payload(buf: memoryview, value: int, stop: int) -> int:
    """Where the bytes of a length-delimited field whose length prefix starts at `value` begin
    (they end at the field's end, `stop`)."""
    return _varint_at(buf, value, stop)[1]


def _tensor_without_data(buf: memoryview, start: int, end: int
                         ) -> tuple[bytes, Union[memoryview, None]]:
    """A Tensor's bytes with its data fields left out, and its (last) data field's bytes."""
    kept: list[bytes] = []
    data = None
    for field, wire_type, tag, value, stop in _fields(buf, start, end):
        if field == _DATA and wire_type == _LEN:
            begin = _payload(buf, value, stop)
            data = buf[begin:stop]
        else:
            kept.append(bytes(buf[tag:stop]))
    return b"".join(kept), data


def _output_entry(buf: memoryview, start: int, end: int
                  ) -> tuple[bytes, str, Union[memoryview, None]]:
    """An outputs map entry rewritten without its tensor's data, its key, and that data."""
    kept: list[bytes] = []
    key = b""
    data = None
    for field, wire_type, tag, value, stop in _fields(buf, start, end):
        if field == _MAP_KEY and wire_type == _LEN:
            begin = _payload(buf, value, stop)
            key = bytes(buf[begin:stop])
            kept.append(bytes(buf[tag:stop]))
        elif field == _MAP_VALUE and wire_type == _LEN:
            begin = _payload(buf, value, stop)
            meta, value_data = _tensor_without_data(buf, begin, stop)
            data = value_data if value_data is not None else data  # values given twice merge
            kept.append(_length_prefix(_MAP_VALUE, len(meta)) + meta)
        else:
            kept.append(bytes(buf[tag:stop]))
    try:
        name = key.decode()
    except UnicodeDecodeError:
        raise WireError("an output's name is not UTF-8") from None
    return b"".join(kept), name, data


def split_answer(message: Union[bytes, memoryview]
                 ) -> tuple[pb.ExecuteResponse, dict[str, memoryview]]:
    """An ExecuteResponse's wire bytes -> the response without its outputs' data (protobuf parses
    only that), and each output's data as a view of `message` (which the views keep alive).
    WireError for bytes that are not a well-formed message."""
    buf = memoryview(message).cast("B")
    kept: list[bytes] = []
    datas: dict[str, memoryview] = {}
    for field, wire_type, tag, value, stop in _fields(buf, 0, buf.nbytes):
        if field == _OUTPUTS and wire_type == _LEN:
            begin = _payload(buf, value, stop)
            entry, name, data = _output_entry(buf, begin, stop)
            kept.append(_length_prefix(_OUTPUTS, len(entry)) + entry)
            if data is None:
                datas.pop(name, None)
            else:
                datas[name] = data
        else:
            kept.append(bytes(buf[tag:stop]))
    response = pb.ExecuteResponse()
    try:
        response.ParseFromString(b"".join(kept))
    except Exception as error:  # protobuf's DecodeError
        raise WireError(f"the answer does not parse: {error}") from None
    return response, datas


def first_data_offset(head: Union[bytes, memoryview]) -> Union[int, None]:
    """Where the bytes of the first output tensor start in an ExecuteResponse whose first bytes
    are `head`; None when they do not start within it (or there is no such tensor)."""
    buf = memoryview(head).cast("B")
    pos, end = 0, buf.nbytes
    try:
        for field in (_OUTPUTS, _MAP_VALUE, _DATA):
            while True:
                tag, value = _varint_at(buf, pos, end)
                if tag >> 3 == field and tag & 7 == _LEN:
                    size, pos = _varint_at(buf, value, end)
                    end = min(end, pos + size)
                    break
                pos = _field_end(buf, tag & 7, value, end)
    except WireError:
        return None
    return pos
