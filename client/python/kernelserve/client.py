"""A Python client of kernelserve.v1.KernelService (grpcio + numpy).

    with kernelserve.Client("127.0.0.1:50051") as client:
        result = client.mean_pooling(x)          # x: float32 [B, S, H]
        result.out, result.timings["kernel_us"]
        tuned = client.autotune("mean_pooling", {"x": kernelserve.TensorSpec((8, 512, 64))})
        client.list_configs("mean_pooling"), client.delete_config(tuned.cache_key)

Calls raise KernelServeError carrying the server's status code and message.
"""

import grpc

from kernelserve import results
from kernelserve import tensors
from kernelserve.results import KernelServeError
from kernelserve.v1 import kernel_service_pb2 as pb
from kernelserve.v1 import kernel_service_pb2_grpc as pb_grpc

_HEALTH = ["UNKNOWN", "SERVING", "NOT_SERVING", "SERVICE_UNKNOWN"]
_FLASH_INPUTS = ("cu_seqlens_q", "cu_seqlens_k", "q_segment_ids", "kv_segment_ids", "bias")


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


def _fill_call(request, kernel, inputs, params):
    """Sets the kernel, inputs (name -> array or TensorSpec) and params (dict) of `request`
    (ExecuteRequest, AutotuneRequest or PutConfigRequest)."""
    request.kernel = kernel
    for name, array in inputs.items():
        tensors.to_proto(array, request.inputs[name])
    if kernel == "mean_pooling":
        request.mean_pooling.CopyFrom(pb.MeanPoolingParams(**(params or {})))
    elif kernel == "flash_attention":
        request.flash_attention.CopyFrom(pb.FlashAttentionParams(**(params or {})))
    elif params:
        raise TypeError(f"params are known for mean_pooling and flash_attention, not {kernel}")


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
        request = pb.ExecuteRequest(platform=platform, request_id=request_id)
        _fill_call(request, kernel, inputs, params)
        if config:
            request.config.CopyFrom(pb.KernelConfig(**config))
        if device is not None:
            request.device = device
        if allow_autotune is not None:
            request.policy.allow_autotune = allow_autotune
        return results.result_of(self._call(self._stub.Execute, request, timeout))

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

    def autotune(self, kernel, inputs, params=None, *, platform="", device=None, persist=None,
                 timeout=None):
        """Times every candidate config of `kernel` for these inputs and stores the winner
        (memory, and the server's store unless persist=False). inputs: name -> array, or
        name -> TensorSpec for shapes only (the server then makes up random inputs).
        Returns a TuneResult."""
        request = pb.AutotuneRequest(platform=platform)
        _fill_call(request, kernel, inputs, params)
        if device is not None:
            request.device = device
        if persist is not None:
            request.policy.persist = persist
        return results.tune_result_of(self._call(self._stub.Autotune, request, timeout))

    def list_configs(self, kernel=""):
        """The server's cached configs (memory tier, then its store) whose key starts with
        `kernel` ("" = all): a list of ConfigEntry."""
        response = self._call(self._stub.ListConfigs, pb.ListConfigsRequest(kernel=kernel))
        return [results.entry_of(entry) for entry in response.entries]

    def put_config(self, kernel, inputs, config, params=None, *, platform="", device=None):
        """Pins `config` (dict of KernelConfig fields) for the key of this call (inputs may be
        TensorSpecs). Returns (cache_key, device_fingerprint). INVALID_ARGUMENT when the config
        does not run on these inputs."""
        request = pb.PutConfigRequest(platform=platform, config=pb.KernelConfig(**config))
        _fill_call(request, kernel, inputs, params)
        if device is not None:
            request.device = device
        response = self._call(self._stub.PutConfig, request)
        return response.cache_key, response.device_fingerprint

    def delete_config(self, cache_key, device_fingerprint=""):
        """Removes `cache_key` from the server's memory and store (device_fingerprint "" = the
        server's default device). NOT_FOUND when neither held it."""
        self._call(self._stub.DeleteConfig,
                   pb.DeleteConfigRequest(cache_key=cache_key,
                                          device_fingerprint=device_fingerprint))
