"""grpc.health.v1 Health/Check without generated stubs: its two messages are encoded here by
hand (HealthCheckRequest {string service = 1}, HealthCheckResponse {ServingStatus status = 1}).

The package then needs no stubs but its own, which load on every protobuf runtime from the one
they were generated for. grpcio-health-checking's stubs are generated for the newest protobuf:
after a later install that moves protobuf back (tritonclient[grpc] takes protobuf < 7), they no
longer imported, and `import kernelserve` with them.
"""

from __future__ import annotations

from typing import Any

METHOD = "/grpc.health.v1.Health/Check"
_STATUS_NAMES = {0: "UNKNOWN", 1: "SERVING", 2: "NOT_SERVING", 3: "SERVICE_UNKNOWN"}


def _varint(value: int) -> bytes:
    out = bytearray()
    while value > 0x7F:
        out.append(value & 0x7F | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def _read_varint(data: bytes, pos: int) -> tuple[int, int]:
    """The varint at data[pos:] and the position after it. ValueError past the end."""
    value = shift = 0
    while shift < 70:
        if pos >= len(data):
            break
        byte = data[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return value, pos
        shift += 7
    raise ValueError("grpc.health.v1.HealthCheckResponse: a truncated or overlong varint")


def encode_request(service: str) -> bytes:
    """The bytes of HealthCheckRequest{service}."""
    name = service.encode()
    return b"\x0a" + _varint(len(name)) + name if name else b""


def decode_status(data: bytes) -> int:
    """The status of a HealthCheckResponse's bytes (0, UNKNOWN, when absent); other fields are
    skipped. ValueError for bytes that are no message."""
    status, pos = 0, 0
    while pos < len(data):
        key, pos = _read_varint(data, pos)
        field, wire_type = key >> 3, key & 7
        if wire_type == 0:
            value, pos = _read_varint(data, pos)
            if field == 1:
                status = value
        elif wire_type == 2:
            length, pos = _read_varint(data, pos)
            pos += length
        elif wire_type in (1, 5):
            pos += 8 if wire_type == 1 else 4
        else:
            raise ValueError(f"grpc.health.v1.HealthCheckResponse: wire type {wire_type}")
    if pos > len(data):
        raise ValueError("grpc.health.v1.HealthCheckResponse: a field past the end")
    return status


def status_name(status: int) -> str:
    """A grpc.health.v1 serving status by name ("SERVING", ...; "UNKNOWN" for a new one)."""
    return _STATUS_NAMES.get(status, "UNKNOWN")


def check_method(channel: Any) -> Any:
    """Health/Check on `channel` (grpc's or grpc.aio's): called with a service name ("" = the
    whole server) and the call's options, it returns the status number (await it on grpc.aio)."""
    return channel.unary_unary(METHOD, request_serializer=encode_request,
                               response_deserializer=decode_status)
