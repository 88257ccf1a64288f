"""A Python client of kernelserve.v1.KernelService (grpcio + numpy).

    with kernelserve.Client("127.0.0.1:50051") as client:
        result = client.mean_pooling(x)          # x: float32 [B, S, H]
        result.out, result.timings["kernel_us"]

Calls raise KernelServeError carrying the server's status code and message.
"""

import dataclasses

import grpc
import numpy as np

from kernelserve import tensors
from kernelserve.v1 import kernel_service_pb2 as pb
from kernelserve.v1 import kernel_service_pb2_grpc as pb_grpc

_CODES = {code.value[0]: code for code in grpc.StatusCode}
_HEALTH = ["UNKNOWN", "SERVING", "NOT_SERVING", "SERVICE_UNKNOWN"]
_FLASH_INPUTS = ("cu_seqlens_q", "cu_seqlens_k", "q_segment_ids", "kv_segment_ids", "bias")
_TIMINGS = ("queue_us", "select_us", "h2d_us", "kernel_us", "d2h_us", "total_us")


class KernelServeError(Exception):
    """A failed call: `code` is a grpc.StatusCode, `message` the server's text."""

    def __init__(self, code, message):
        super().__init__(f"{code.name}: {message}")
        self.code = code
        self.message = message


@dataclasses.dataclass
class Result:
    """The answer to one kernel call."""

    outputs: dict  # name -> numpy array (read-only; bf16 as uint16 bits)
    timings: dict  # queue_us, select_us, h2d_us, kernel_us, d2h_us, total_us
    config: dict  # the KernelConfig that ran, by field name
    source: str  # "memory", "heuristic", "autotune", "override", ...
    platform: str
    device: int  # -1 = CPU
    device_fingerprint: str
    cache_key: str
    warnings: list

    @property
    def out(self):
        return self.outputs["out"]

    @property
    def lse(self):
        return self.outputs.get("lse")


def _varint(value):
    out = bytearray()
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def _encode_health_request(service):
    """grpc.health.v1.HealthCheckRequest {string service = 1}, encoded by hand."""
    data = service.encode()
    return b"\x0a" + _varint(len(data)) + data if data else b""


def _decode_health_response(data):
    """The status (field 1) of a grpc.health.v1.HealthCheckResponse."""
    pos, status = 0, 0
    while pos < len(data):
        key, shift = 0, 0
        while True:
            key |= (data[pos] & 0x7F) << shift
            pos, shift = pos + 1, shift + 7
            if not data[pos - 1] & 0x80:
                break
        value, shift = 0, 0
        while True:  # every field of this message is a varint
            value |= (data[pos] & 0x7F) << shift
            pos, shift = pos + 1, shift + 7
            if not data[pos - 1] & 0x80:
                break
        if key >> 3 == 1:
            status = value
    return status


def _to_result(response):
    if response.status.code != 0:
        raise KernelServeError(_CODES.get(response.status.code, grpc.StatusCode.UNKNOWN),
                               response.status.message)
    source = pb.ConfigSource.Name(response.config_source).removeprefix("CONFIG_SOURCE_")
    return Result(
        outputs={name: tensors.from_proto(t) for name, t in response.outputs.items()},
        timings={name: getattr(response.timing, name) for name in _TIMINGS},
        config={f.name: getattr(response.config, f.name)
                for f in response.config.DESCRIPTOR.fields},
        source=source.lower(),
        platform=response.platform,
        device=response.device,
        device_fingerprint=response.device_fingerprint,
        cache_key=response.cache_key,
        warnings=list(response.warnings),
    )


class Client:
    """A connection to one server. Thread-safe, as grpc channels are."""

    def __init__(self, target="127.0.0.1:50051", *, token=None, tls=False,
                 root_certificates=None, private_key=None, certificate_chain=None,
                 timeout=60.0, max_message_bytes=1 << 30):
        """token: bearer token. tls (or any PEM bytes given): a TLS channel; private_key and
        certificate_chain make it mTLS. timeout: seconds per call (None = none)."""
        options = [("grpc.max_send_message_length", max_message_bytes),
                   ("grpc.max_receive_message_length", max_message_bytes)]
        if tls or root_certificates or private_key or certificate_chain:
            credentials = grpc.ssl_channel_credentials(root_certificates, private_key,
                                                       certificate_chain)
            self._channel = grpc.secure_channel(target, credentials, options)
        else:
            self._channel = grpc.insecure_channel(target, options)
        self._stub = pb_grpc.KernelServiceStub(self._channel)
        self._metadata = [("authorization", f"Bearer {token}")] if token else []
        self._timeout = timeout
        self._health = self._channel.unary_unary(
            "/grpc.health.v1.Health/Check", request_serializer=_encode_health_request,
            response_deserializer=_decode_health_response)

    def close(self):
        self._channel.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def _call(self, method, request, timeout=None):
        try:
            return method(request, timeout=timeout or self._timeout, metadata=self._metadata)
        except grpc.RpcError as error:
            raise KernelServeError(error.code(), error.details()) from None

    def execute(self, kernel, inputs, params=None, *, config=None, platform="", device=None,
                allow_autotune=None, request_id="", timeout=None):
        """Runs `kernel` on `inputs` (name -> array). params: the kernel's params (dict).
        config: an explicit KernelConfig (dict of its fields)."""
        request = pb.ExecuteRequest(kernel=kernel, platform=platform, request_id=request_id)
        for name, array in inputs.items():
            tensors.to_proto(array, request.inputs[name])
        if kernel == "mean_pooling":
            request.mean_pooling.CopyFrom(pb.MeanPoolingParams(**(params or {})))
        elif kernel == "flash_attention":
            request.flash_attention.CopyFrom(pb.FlashAttentionParams(**(params or {})))
        elif params:
            raise TypeError(f"params are known for mean_pooling and flash_attention, not {kernel}")
        if config:
            request.config.CopyFrom(pb.KernelConfig(**config))
        if device is not None:
            request.device = device
        if allow_autotune is not None:
            request.policy.allow_autotune = allow_autotune
        return _to_result(self._call(self._stub.Execute, request, timeout))

    def mean_pooling(self, x, cu_seqlens=None, mask=None, chunk_size=0, **run):
        """The mean over the rows of each sequence: x [B,S,H] -> out [B,H]; with mask [B,S]
        only rows whose mask is nonzero count; x [T,H] with cu_seqlens [N+1] -> out [N,H]."""
        inputs = {"x": x}
        if cu_seqlens is not None:
            inputs["cu_seqlens"] = cu_seqlens
        if mask is not None:
            inputs["mask"] = mask
        return self.execute("mean_pooling", inputs, {"chunk_size": chunk_size}, **run)

    def flash_attention(self, q, k, v, *, config=None, platform="", device=None,
                        allow_autotune=None, request_id="", timeout=None, **params):
        """Attention forward: q [B,Sq,Hq,D], k and v [B,Sk,Hkv,D] -> out (and lse).
        params: causal, softmax_scale, window_left, window_right, logits_soft_cap, return_lse,
        and the optional inputs cu_seqlens_q, cu_seqlens_k, q_segment_ids, kv_segment_ids,
        bias (arrays)."""
        inputs = {"q": q, "k": k, "v": v}
        for name in _FLASH_INPUTS:
            array = params.pop(name, None)
            if array is not None:
                inputs[name] = array
        return self.execute("flash_attention", inputs, params, config=config, platform=platform,
                            device=device, allow_autotune=allow_autotune, request_id=request_id,
                            timeout=timeout)

    def health(self, service=""):
        """"SERVING", "NOT_SERVING", "SERVICE_UNKNOWN" or "UNKNOWN" (no token is sent)."""
        try:
            status = self._health(service, timeout=self._timeout)
        except grpc.RpcError as error:
            raise KernelServeError(error.code(), error.details()) from None
        return _HEALTH[status] if 0 <= status < len(_HEALTH) else "UNKNOWN"

    def info(self):
        """The server's pb.ServerInfo (version, devices, cache tiers, limits)."""
        return self._call(self._stub.GetServerInfo, pb.GetServerInfoRequest())

    def kernels(self):
        """The server's kernels: a list of pb.KernelInfo."""
        return list(self._call(self._stub.ListKernels, pb.ListKernelsRequest()).kernels)
