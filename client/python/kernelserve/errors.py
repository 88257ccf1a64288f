"""The error every failed call raises (or, for batch and stream items, returns)."""

from __future__ import annotations

from typing import Any

import grpc

from kernelserve.v1 import kernel_service_pb2 as pb

_CODES = {code.value[0]: code for code in grpc.StatusCode}


class KernelserveError(Exception):
    """A failed call: `code` is a grpc.StatusCode, `message` the server's text."""

    def __init__(self, code: grpc.StatusCode, message: str) -> None:
        super().__init__(f"{code.name}: {message}")
        self.code = code
        self.message = message

    def __reduce__(self) -> tuple[Any, ...]:  # picklable, e.g. across multiprocessing
        return (type(self), (self.code, self.message))

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.code}, {self.message!r})"


class ArgumentError(KernelserveError, TypeError):
    """A call the client refuses before sending it, code INVALID_ARGUMENT: a keyword the
    kernel's schema does not have (the message names it and the valid ones), a missing input, a
    dtype that is not sent, a config field that does not exist. Also a TypeError, as Python's
    own errors for a wrong argument are."""

    def __init__(self, message: str) -> None:
        super().__init__(grpc.StatusCode.INVALID_ARGUMENT, message)

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (self.message,))


class UnknownKernelError(KernelserveError, AttributeError):
    """A kernel the server does not serve, asked for as a client method or by name: code
    INVALID_ARGUMENT (as the server answers such a call); the message lists the kernels it
    serves. Also an AttributeError, so that hasattr(client, name) is False."""

    def __init__(self, message: str) -> None:
        super().__init__(grpc.StatusCode.INVALID_ARGUMENT, message)

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (self.message,))


# The earlier spelling of the name; the same class.
KernelServeError = KernelserveError


def code_of(number: int) -> grpc.StatusCode:
    """The grpc.StatusCode of a status number (UNKNOWN for one gRPC does not define)."""
    return _CODES.get(number, grpc.StatusCode.UNKNOWN)


def error_of(status: pb.RpcStatus) -> KernelserveError | None:
    """The error of an in-band pb.RpcStatus; None when it is OK."""
    if status.code == 0:
        return None
    return KernelserveError(code_of(status.code), status.message)


def from_rpc_error(error: grpc.RpcError) -> KernelserveError:
    """The KernelserveError of a failed gRPC call (sync or grpc.aio)."""
    code = getattr(error, "code", None)
    details = getattr(error, "details", None)
    return KernelserveError(code() if code else grpc.StatusCode.UNKNOWN,
                            (details() if details else None) or str(error))
