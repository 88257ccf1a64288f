"""A Python client of kernelserve.v1.KernelService (grpcio + numpy).

    with kernelserve.Client("127.0.0.1:50051") as client:
        result = client.mean_pooling(x)          # x: float32 [B, S, H]
        result.out, result.timings["kernel_us"]
        client.flash_attention(q, k, v, causal=True)   # any kernel the server lists
        tuned = client.autotune("mean_pooling", {"x": kernelserve.TensorSpec((8, 512, 64))})
        client.list_configs("mean_pooling"), client.delete_config(tuned.cache_key)

Every kernel the server lists (ListKernels) is a method: its required inputs positional or by
name, its optional inputs and params by name, checked against the kernel's schema before the
call (a misspelt name is a TypeError that suggests the right one).

Calls raise KernelServeError carrying the server's status code and message.
"""

import difflib

import grpc

from kernelserve import results
from kernelserve import tensors
from kernelserve.results import KernelServeError
from kernelserve.v1 import kernel_service_pb2 as pb
from kernelserve.v1 import kernel_service_pb2_grpc as pb_grpc

_HEALTH = ["UNKNOWN", "SERVING", "NOT_SERVING", "SERVICE_UNKNOWN"]
# Keyword arguments of every kernel method that are not the kernel's: how the call runs.
_RUN_OPTIONS = ("config", "platform", "device", "allow_autotune", "request_id", "timeout")


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


def _param_value(name, value):
    """A Python value as a pb.ParamValue (the server's schema checks its type and range)."""
    if isinstance(value, bool):
        return pb.ParamValue(bool_value=value)
    if isinstance(value, int):
        return pb.ParamValue(int64_value=value)
    if isinstance(value, float):
        return pb.ParamValue(double_value=value)
    if isinstance(value, str):
        return pb.ParamValue(string_value=value)
    raise TypeError(f"param {name!r}: expected bool, int, float or str, got {type(value).__name__}")


def _fill_call(request, kernel, inputs, params):
    """Sets the kernel, inputs (name -> array or TensorSpec) and params (name -> value, sent as
    `parameters`) of `request` (ExecuteRequest, AutotuneRequest or PutConfigRequest)."""
    request.kernel = kernel
    for name, array in inputs.items():
        tensors.to_proto(array, request.inputs[name])
    for name, value in (params or {}).items():
        request.parameters[name].CopyFrom(_param_value(name, value))


def _unexpected(kernel, name, known):
    close = difflib.get_close_matches(name, known, n=1)
    hint = f"; did you mean {close[0]!r}?" if close else f"; expected one of {', '.join(known)}"
    return TypeError(f"{kernel}() got an unexpected keyword argument {name!r}{hint}")


def _split_call(info, args, kwargs):
    """Inputs, params and run options of a kernel method call, by the kernel's schema `info`
    (pb.KernelInfo): required inputs in schema order may be positional."""
    required = [i.name for i in info.input_schema if i.required]
    if len(args) > len(required):
        raise TypeError(f"{info.name}() takes {len(required)} positional inputs "
                        f"({', '.join(required)}), got {len(args)}")
    inputs = dict(zip(required, args))
    input_names = {i.name for i in info.input_schema}
    param_names = {p.name for p in info.param_schema}
    params, run = {}, {}
    for name, value in kwargs.items():
        if name in _RUN_OPTIONS:
            run[name] = value
        elif name in input_names:
            if name in inputs:
                raise TypeError(f"{info.name}() got input {name!r} twice")
            if value is not None:
                inputs[name] = value
        elif name in param_names:
            params[name] = value
        else:
            raise _unexpected(info.name, name, sorted(input_names | param_names) +
                              list(_RUN_OPTIONS))
    missing = [name for name in required if name not in inputs]
    if missing:
        raise TypeError(f"{info.name}() missing input(s): {', '.join(missing)}")
    return inputs, params, run


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
        self._schemas = None  # kernel name -> pb.KernelInfo, from ListKernels on first use
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

    def schema(self, kernel):
        """The kernel's pb.KernelInfo (inputs, outputs, params with types and defaults), as the
        server lists it. AttributeError for a kernel the server does not serve."""
        if self._schemas is None:
            self._schemas = {k.name: k for k in self.kernels()}
        if kernel not in self._schemas:
            raise AttributeError(f"the server has no kernel {kernel!r}; it serves "
                                 f"{', '.join(sorted(self._schemas))}")
        return self._schemas[kernel]

    def call(self, kernel, *args, **kwargs):
        """Runs `kernel` with its inputs and params by the kernel's schema (required inputs may
        be positional), plus the run options of execute(). Returns a RunResult."""
        inputs, params, run = _split_call(self.schema(kernel), args, kwargs)
        return self.execute(kernel, inputs, params, **run)

    def __getattr__(self, name):
        """client.<kernel>(...) for every kernel the server lists: see call()."""
        if name.startswith("_"):
            raise AttributeError(name)
        self.schema(name)  # AttributeError when the server does not serve it

        def method(*args, **kwargs):
            return self.call(name, *args, **kwargs)

        method.__name__ = name
        method.__doc__ = self.schema(name).doc
        return method

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
