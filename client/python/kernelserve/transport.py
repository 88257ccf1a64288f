"""How an Execute call with large inputs travels (kernelserve.wire makes its message's pieces).

Two transports, one result:

- NativeTransport: kernelserve._native, the extension `pip install ./client/python` builds
  against gRPC's C++ library where it can (nanobind and gRPC's headers present). The pieces go
  to gRPC as they are (the arrays' memory, no copy) with the GIL released; the answer is copied
  once, into an aligned block where the first output's bytes start 64-byte aligned.
- GrpcioTransport: grpcio, the fallback: the pieces joined into one bytes object (one copy; grpcio
  makes another), the answer's bytes as grpcio gives them.

`native_available()` says whether the extension loaded; `import_error()` why not. A client uses
the native transport for plaintext channels when the extension is there (TLS calls take
grpcio's path, which has the channel's credentials), unless it is created with native=False or
the environment has KERNELSERVE_NATIVE=0.
"""

from __future__ import annotations

import asyncio
import itertools
import os
from collections.abc import Sequence
from typing import Any, Optional, Union

import grpc
import numpy as np

from kernelserve import results, wire
from kernelserve.errors import ArgumentError, KernelserveError, from_rpc_error, from_status
from kernelserve.v1 import kernel_service_pb2 as pb

_native: Any
try:
    from kernelserve import _native  # type: ignore[attr-defined, no-redef]
    _IMPORT_ERROR: Optional[str] = None
except ImportError as error:  # not built (no compiler, nanobind or gRPC headers at install)
    _native = None
    _IMPORT_ERROR = str(error)

_STATUS = pb.ExecuteResponse.DESCRIPTOR.fields_by_name["status"].number
# Answers of fewer bytes come as one bytes object that protobuf parses (when the Result is first
# read, on the lean path); larger ones are copied once into an aligned block and read in place
# (_read_in_place). On a 2-core machine a decode step's 128 KiB answer took 41-51 us less as
# bytes, and answers of 256-900 KiB 31-433 us less in six of seven alternated runs (103 us more
# in one at 900 KiB): a fresh aligned block and the Python walk of its fields cost more than
# protobuf's copy there.
BYTES_ANSWER_BELOW = 1 << 20
# The answer's first bytes read to find where its first tensor starts (its map key, dtype and
# shape come before; the server writes the outputs first).
_HEAD_BYTES = 4096
# How long an asyncio client's close() waits for its cancelled calls to end (they end at once
# unless gRPC is stuck; close() never hangs on them).
CLOSE_WAIT_SECONDS = 10.0
Answer = tuple[pb.ExecuteResponse, dict[str, memoryview]]
Metadata = Sequence[tuple[str, str]]


def native_available() -> bool:
    """Whether kernelserve._native (the extension) loaded."""
    return _native is not None


def import_error() -> Optional[str]:
    """Why kernelserve._native did not load; None when it did."""
    return _IMPORT_ERROR


def use_native(native: Optional[bool], secure: bool) -> bool:
    """Whether a client takes the native transport. native: True = required (ArgumentError when
    it cannot: not built, or a TLS channel), False = never, None = where it can, unless the
    environment has KERNELSERVE_NATIVE=0."""
    if native is None:
        return (native_available() and not secure
                and os.environ.get("KERNELSERVE_NATIVE", "1") != "0")
    if native and not native_available():
        raise ArgumentError(f"native=True, but kernelserve._native is not built "
                            f"({_IMPORT_ERROR}); reinstall the package where nanobind and gRPC's "
                            "C++ headers are present (pip install ./client/python), or pass "
                            "native=None")
    if native and secure:
        raise ArgumentError("native=True takes plaintext channels only; a TLS client sends "
                            "through grpcio (native=None or False)")
    return native


def answer_of(message: Any) -> Answer:
    """The ExecuteResponse of an answer's wire bytes with its outputs' bytes read in place
    (wire.split_answer); INTERNAL for bytes that are not an ExecuteResponse."""
    try:
        return wire.split_answer(message)
    except wire.WireError as error:
        raise KernelserveError(grpc.StatusCode.INTERNAL, f"Execute's answer: {error}") from None


class NativeTransport:
    """Execute over kernelserve._native. Thread-safe; its coroutines belong to one event loop
    at a time (the one that last awaited one)."""

    def __init__(self, target: str, max_message_bytes: int) -> None:
        self._channel = _native.Channel(target, max_message_bytes)
        self._target = target
        self._loop: Optional[asyncio.AbstractEventLoop] = None  # watching completion_fd
        # The futures of started calls not yet collected, by the token the extension holds (a
        # number: no reference from C++ to Python objects that the garbage collector cannot see).
        self._pending: dict[int, asyncio.Future[Any]] = {}
        self._tokens = itertools.count()

    def close(self) -> None:
        """Closes the channel (its connection goes once calls in flight end)."""
        self._channel.close()

    async def close_async(self) -> None:
        """close() for a client of an event loop: calls started here and still in flight end
        as CANCELLED first (waited for up to CLOSE_WAIT_SECONDS, on this loop only), and the
        loop stops watching for them."""
        self._channel.cancel_all()
        loop = asyncio.get_running_loop()
        ending = [f for f in self._pending.values() if not f.done() and f.get_loop() is loop]
        if ending and self._loop is loop:
            await asyncio.wait(ending, timeout=CLOSE_WAIT_SECONDS)
        if self._loop is not None and not self._loop.is_closed():
            self._loop.remove_reader(self._channel.completion_fd)
        self._loop = None
        self._channel.close()

    def execute(self, spliced: wire.Spliced, timeout: Optional[float],
                metadata: Metadata) -> Answer:
        """Sends the message; raises KernelserveError for a failed call. Releases the GIL while
        the call is in flight."""
        answer = self.execute_lazily(spliced.pieces, timeout, metadata)
        return (results.parsed_response(answer), {}) if type(answer) is bytes else answer

    def execute_lazily(self, pieces: list[wire.Piece], timeout: Optional[float],
                       metadata: Metadata) -> Union[bytes, Answer]:
        """execute() of a message as its pieces (wire.Spliced.pieces), but a small answer
        without an in-band status comes back as its bytes, not parsed (results.lazy_result
        parses them when its fields are read)."""
        code, message, answer = self._channel.call(wire.EXECUTE_METHOD, pieces, timeout,
                                                   metadata, BYTES_ANSWER_BELOW)
        if code != 0:
            raise from_status(code, message, self._target, timeout)
        if type(answer) is not bytes:  # large: its outputs read in place
            return _read_in_place(answer)
        return _small_answer(answer)

    async def execute_lazily_async(self, pieces: list[wire.Piece], timeout: Optional[float],
                                   metadata: Metadata) -> Union[bytes, Answer]:
        """execute_lazily() for asyncio: the call starts at once and the running loop is woken
        by gRPC's thread when it ends (no executor thread between them); a large answer is
        copied out in the loop's default executor. Cancelling the awaiting task cancels the
        call."""
        loop = asyncio.get_running_loop()
        if not self._watch(loop):  # a loop that cannot watch a pipe: through its executor
            return await loop.run_in_executor(None, self.execute_lazily, pieces, timeout,
                                              metadata)
        future: asyncio.Future[Any] = loop.create_future()
        token = next(self._tokens)
        call = self._channel.start(wire.EXECUTE_METHOD, pieces, timeout, metadata,
                                   BYTES_ANSWER_BELOW, token)
        self._pending[token] = future
        try:
            code, message, answer = await future
        except asyncio.CancelledError:
            self._channel.cancel(call)
            raise
        if code != 0:
            raise from_status(code, message, self._target, timeout)
        if type(answer) is not bytes:  # large: copied out beside the loop
            return await loop.run_in_executor(None, _read_in_place, answer)
        return _small_answer(answer)

    def _watch(self, loop: asyncio.AbstractEventLoop) -> bool:
        """Makes `loop` collect the finished calls (the last loop that started one does);
        False for a loop that cannot watch a file descriptor (Windows' proactor loop)."""
        if self._loop is loop:
            return True
        fd = self._channel.completion_fd
        try:
            loop.add_reader(fd, self._collect)
        except NotImplementedError:
            return False
        if self._loop is not None and not self._loop.is_closed():
            self._loop.remove_reader(fd)
        self._loop = loop
        return True

    def _collect(self) -> None:
        """Hands each finished call's outcome to its future (on the future's own loop)."""
        for token, code, message, answer in self._channel.completed():
            future = self._pending.pop(token, None)
            if future is None:
                continue
            outcome = (code, message, answer)
            if future.get_loop() is self._loop:
                _settle(future, outcome)
                continue
            try:  # started on a loop the transport has left since
                future.get_loop().call_soon_threadsafe(_settle, future, outcome)
            except RuntimeError:  # that loop is closed: nobody awaits the outcome
                pass


def _settle(future: asyncio.Future[Any], outcome: tuple[int, str, Any]) -> None:
    if not future.done():  # a cancelled call's outcome is dropped
        future.set_result(outcome)


def _small_answer(message: bytes) -> Union[bytes, Answer]:
    """A small answer as its bytes, to be parsed when read (results.lazy_result), or parsed
    now where it may carry an in-band status (to raise it) or where the extension, which finds
    the status without parsing, did not load."""
    if _native is None or _native.has_field(message, _STATUS):
        return results.parsed_response(message), {}
    return message


def _read_in_place(answer: Any) -> Answer:
    """The Answer of a large native answer (kernelserve._native.Answer): copied once into an
    aligned block where its first output's bytes start 64-byte aligned, read in place."""
    offset = wire.first_data_offset(answer.head(_HEAD_BYTES))
    pad = (-offset) % 64 if offset is not None else 0
    block: np.ndarray = answer.take(pad)
    return answer_of(memoryview(block)[pad:])


class GrpcioTransport:
    """Execute over a grpcio channel (sync or grpc.aio), on one joined bytes object."""

    def __init__(self, channel: Any, target: str) -> None:
        self._method = channel.unary_unary(wire.EXECUTE_METHOD)
        self._target = target

    def execute(self, spliced: wire.Spliced, timeout: Optional[float],
                metadata: Metadata) -> Answer:
        """A sync channel's call; raises KernelserveError for a failed one."""
        try:
            return answer_of(self._method(spliced.join(), timeout=timeout, metadata=metadata))
        except grpc.RpcError as error:
            raise from_rpc_error(error, self._target, timeout) from None

    async def execute_lazily_async(self, pieces: list[wire.Piece], timeout: Optional[float],
                                   metadata: Metadata) -> Union[bytes, Answer]:
        """A grpc.aio channel's call of a message as its pieces (kernelserve.plain's): a small
        answer without an in-band status comes back as its bytes, not parsed (as
        NativeTransport.execute_lazily; parsed at once where the extension, which finds the
        status without parsing, did not load)."""
        try:
            message = await self._method(b"".join(pieces), timeout=timeout, metadata=metadata)
        except grpc.RpcError as error:
            raise from_rpc_error(error, self._target, timeout) from None
        if len(message) >= BYTES_ANSWER_BELOW:
            return answer_of(message)
        return _small_answer(message)

    async def execute_async(self, spliced: wire.Spliced, timeout: Optional[float],
                            metadata: Metadata) -> Answer:
        """A grpc.aio channel's call; raises KernelserveError for a failed one."""
        try:
            message = await self._method(spliced.join(), timeout=timeout, metadata=metadata)
        except grpc.RpcError as error:
            raise from_rpc_error(error, self._target, timeout) from None
        return answer_of(message)
