"""The error every failed call raises (or, for batch and stream items, returns)."""

from __future__ import annotations

from typing import Any, Optional

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


# Pieces of gRPC's own messages (lower case) for a target where no server answers, and for a
# connection lost under a call (the CLI's client/cli/explain.cc looks for the same).
_TRANSPORT_FAILURES = ("failed to connect", "dns resolution failed", "errors resolving",
                       "socket closed", "connection reset", "broken pipe", "stream removed",
                       "goaway")


def is_connection_failure(code: grpc.StatusCode, message: str) -> bool:
    """Whether an error is gRPC's own UNAVAILABLE for a target where no server answers (refused,
    no such socket, a name that does not resolve) or a connection lost under a call; False for
    an UNAVAILABLE the server sent (shutting down, its Redis store)."""
    lower = message.lower()
    return (code == grpc.StatusCode.UNAVAILABLE and not lower.startswith("redis")
            and any(piece in lower for piece in _TRANSPORT_FAILURES))


def _hint(code: grpc.StatusCode, message: str, target: Optional[str],
          timeout: Optional[float]) -> str:
    """What to add to the message of a failed call for the person reading it; "" for none."""
    if target is not None and is_connection_failure(code, message):
        return (f"; no kernelserve server answers at {target} (not started, or stopped): start "
                f"one with `make run` in a kernelserve checkout or `kernelserve-server --listen "
                f"{target}`, or give the Client the target of a running one")
    # A tuning's own time budget (time_budget=) is not the call's deadline.
    if (timeout is not None and code == grpc.StatusCode.DEADLINE_EXCEEDED
            and not message.startswith("the tuning time budget")):
        return (f"; the deadline was {timeout:g} s: timeout= of the call or of the Client sets "
                f"it (None = none)")
    return ""


def from_rpc_error(error: grpc.RpcError, target: Optional[str] = None,
                   timeout: Optional[float] = None) -> KernelserveError:
    """The KernelserveError of a failed gRPC call (sync or grpc.aio). Given the client's
    `target`, the message of a connection failure also says that no server answers there and
    how to start one; given the call's `timeout` (seconds), a DEADLINE_EXCEEDED names it."""
    code_of_error = getattr(error, "code", None)
    details = getattr(error, "details", None)
    code = code_of_error() if code_of_error else grpc.StatusCode.UNKNOWN
    message = (details() if details else None) or str(error)
    return KernelserveError(code, message + _hint(code, message, target, timeout))


def from_status(number: int, message: str, target: Optional[str] = None,
                timeout: Optional[float] = None) -> KernelserveError:
    """from_rpc_error for a failed call of the native transport (kernelserve._native), which
    gives the status as its number and message."""
    code = code_of(number)
    return KernelserveError(code, message + _hint(code, message, target, timeout))
