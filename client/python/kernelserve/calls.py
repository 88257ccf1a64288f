"""How calls become request messages; shared by kernelserve.Client and kernelserve.aio.Client.

Also the two pieces of logic both clients need around a call: the arguments of a kernel method
split by the kernel's schema (split_call), and the answers of a stream put back in request
order (StreamAnswers). Execute and ExecuteStream also take shared-memory tensors (kernelserve.shm):
inputs that are views into a region the client registered go as references, and `outputs` place
outputs in regions.
"""

from __future__ import annotations

import dataclasses
import difflib
import inspect
import math
import numbers
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any, Optional, Union

import grpc
import numpy as np

from kernelserve import results, tensors, wire
from kernelserve.errors import ArgumentError, KernelserveError, UnknownKernelError
from kernelserve.info import KernelSchema, ParamValue
from kernelserve.resident import ResidentTensorBase
from kernelserve.shm import CudaRegion, OutputPlace, Regions, RegionTensor
from kernelserve.tensors import TensorLike
from kernelserve.v1 import kernel_service_pb2 as pb

# Keyword arguments of every kernel method that are not the kernel's: how the call runs.
RUN_OPTIONS = ("config", "platform", "device", "allow_autotune", "request_id", "timeout",
               "outputs")
# The fixed fields of KernelConfig (a config dict's other names are named fields).
_CONFIG_FIELDS = tuple(f.name for f in pb.KernelConfig.DESCRIPTOR.fields if f.name != "fields")

# Input name -> array (or TensorSpec where shapes suffice, or a resident tensor: execute and
# execute_stream).
Inputs = Mapping[str, Union[TensorLike, ResidentTensorBase]]
Params = Mapping[str, ParamValue]  # param name -> value
# KernelConfig field (fixed or a platform's named field) -> value: an explicit config.
Config = Mapping[str, Union[int, str]]
# Output name -> where the server writes it: a view into a shared-memory region the client
# registered (region.ndarray), a CUDA tensor in a CUDA region it registered, or a RegionTensor
# (region.ref(view)), or a resident tensor (client.create_tensor) written in place.
Outputs = Mapping[str, Union[np.ndarray, RegionTensor, ResidentTensorBase, Any]]


@dataclasses.dataclass
class Request:
    """One call of execute_stream: the arguments of execute() as a value."""

    kernel: str
    inputs: Inputs
    params: Optional[Params] = None
    config: Optional[Config] = None
    platform: str = ""
    device: Optional[int] = None
    allow_autotune: Optional[bool] = None
    request_id: str = ""
    outputs: Optional[Outputs] = None


def _hint(name: str, known: Sequence[str]) -> str:
    """"did you mean 'x'? " when a known name is close to `name`, else ""."""
    close = difflib.get_close_matches(name, known, n=1)
    return f"did you mean {close[0]!r}? " if close else ""


def accepted(schema: KernelSchema) -> str:
    """What a kernel method takes, for error messages: "inputs q, k, v, ...; params ...; run
    options ..."."""
    inputs = [i.name if i.required else f"{i.name} (optional)" for i in schema.inputs]
    parts = [f"inputs {', '.join(inputs) or '(none)'}",
             f"params {', '.join(p.name for p in schema.params) or '(none)'}",
             f"run options {', '.join(RUN_OPTIONS)}"]
    return "; ".join(parts)


def param_value(name: str, value: ParamValue) -> pb.ParamValue:
    """A Python (or NumPy scalar) value as a pb.ParamValue; the server's schema checks its type
    and range."""
    if isinstance(value, (bool, np.bool_)):
        return pb.ParamValue(bool_value=bool(value))
    if isinstance(value, numbers.Integral):
        return pb.ParamValue(int64_value=int(value))
    if isinstance(value, numbers.Real):
        return pb.ParamValue(double_value=float(value))
    if isinstance(value, str):
        return pb.ParamValue(string_value=value)
    raise ArgumentError(f"param {name!r}: expected bool, int, float or str, got "
                        f"{type(value).__name__}")


def kernel_config(config: Config) -> pb.KernelConfig:
    """A pb.KernelConfig of a dict of fields: the fixed fields of KernelConfig by their names,
    any other name a platform's named field (an int, sent in `fields`; the server checks the
    name against the platform's config schema, see kernels()). ArgumentError for `backend`
    (no longer a config field), a name close to a fixed field's (a typo), a value of the wrong
    type, or a named field that is not an int."""
    fixed = {name: value for name, value in config.items() if name in _CONFIG_FIELDS}
    named = {name: value for name, value in config.items() if name not in _CONFIG_FIELDS}
    if fixed.get("backend"):
        raise ArgumentError("config field 'backend' is no longer a config field; a kernel "
                            "variant is 'algorithm', a platform's own fields go by their names "
                            "(kernels() lists each platform's config fields)")
    listed = [name for name in _CONFIG_FIELDS if name != "backend"]
    for name, value in named.items():
        hint = _hint(name, listed)
        if hint:  # a near miss of a fixed field's name: a typo, not a named field
            raise ArgumentError(f"config has no field {name!r}; {hint}its fixed fields are "
                                f"{', '.join(listed)}; other names are a platform's named "
                                f"fields (kernels() lists them)")
        if isinstance(value, bool) or not isinstance(value, int):
            raise ArgumentError(f"config field {name!r}: expected an int, got "
                                f"{type(value).__name__} (fields other than platform and "
                                f"algorithm are ints)")
    try:
        proto = pb.KernelConfig(**fixed)  # type: ignore[arg-type]  # checked by protobuf
        for name, value in named.items():
            proto.fields[name] = value
        return proto
    except (TypeError, ValueError) as error:  # protobuf's, for a value of the wrong type
        raise ArgumentError(f"config: {error}") from None


# Inputs sent beside the message (kernelserve.wire): name -> its Tensor without data, its bytes.
Aside = dict[str, tuple[pb.Tensor, np.ndarray]]


def input_tensor(value: Union[tensors.TensorLike, ResidentTensorBase], out: pb.Tensor,
                 name: str, regions: Optional[Regions], aside: Optional[Aside] = None) -> None:
    """Writes the input `value` into `out`: a resident tensor as Tensor.ref.tensor (its name
    alone); a RegionTensor, or an array (or CUDA tensor) lying in one of `regions`, as a
    Tensor.ref (dtype, shape and the place); anything else as data, unless `aside` is given and
    the array is large (wire.LARGE_TENSOR_BYTES): then it goes into aside[name], `out` left
    empty for the caller to drop."""
    if isinstance(value, ResidentTensorBase):
        out.ref.tensor = value.name
        return
    ref = value if isinstance(value, RegionTensor) else (
        regions.locate(value, f"input {name!r}") if regions is not None else None)
    if ref is None:
        held = (tensors.sent_aside(value, name, wire.LARGE_TENSOR_BYTES)
                if aside is not None else None)
        if held is not None and aside is not None:
            aside[name] = held
        else:
            tensors.to_proto(value, out, name)
        return
    out.dtype = tensors.wire_dtype(ref.dtype, name)  # type: ignore[assignment]
    out.shape[:] = ref.shape
    out.ref.region = ref.region
    out.ref.offset = ref.offset
    out.ref.byte_size = ref.nbytes


def fill_call(request: Any, kernel: str, inputs: Inputs, params: Optional[Params],
              regions: Optional[Regions] = None, aside: Optional[Aside] = None) -> None:
    """Sets the kernel, inputs and params (sent as `parameters`) of `request` (ExecuteRequest,
    AutotuneRequest or PutConfigRequest). regions (ExecuteRequest only): inputs lying in one of
    them go as references. aside (ExecuteRequest only): large arrays go there, not into the
    request (see input_tensor)."""
    request.kernel = kernel
    for name, array in inputs.items():
        input_tensor(array, request.inputs[name], name, regions, aside)
        if aside is not None and name in aside:
            del request.inputs[name]
    for name, value in (params or {}).items():
        request.parameters[name].CopyFrom(param_value(name, value))


def output_places(outputs: Optional[Outputs], regions: Optional[Regions]
                  ) -> dict[str, Union[OutputPlace, ResidentTensorBase]]:
    """Where each output of `outputs` goes; ArgumentError for one that is neither a resident
    tensor, a view into a region of `regions`, a CUDA tensor in one, nor a RegionTensor of a
    region whose memory is here (or of a CUDA region: its `device` set)."""
    places: dict[str, Union[OutputPlace, ResidentTensorBase]] = {}
    for name, target in (outputs or {}).items():
        if isinstance(target, ResidentTensorBase):
            places[name] = target
            continue
        if isinstance(target, RegionTensor):
            ref = target
            if ref.memory is None and ref.device is None:
                region = regions.get(ref.region) if regions is not None else None
                if region is None or region.closed:
                    raise ArgumentError(
                        f"output {name!r}: region {ref.region!r} is not one this client "
                        "registered, so its result cannot be read here; pass region.ref(view)")
                if isinstance(region, CudaRegion):
                    ref = dataclasses.replace(target, device=region.device)
                else:
                    ref = dataclasses.replace(target,
                                              memory=region.ndarray(region.byte_size, np.uint8))
            places[name] = OutputPlace(ref)
            continue
        located = (regions.locate(target, f"output {name!r}") if regions is not None else None)
        if located is None:
            raise ArgumentError(
                f"output {name!r}: expected a C-contiguous view into a shared-memory region this "
                "client registered (region.ndarray), a CUDA tensor in a CUDA region it "
                "registered, a RegionTensor (region.ref(view)) or a resident tensor "
                "(client.create_tensor), got "
                f"{type(target).__name__}")
        places[name] = OutputPlace(located, target)
    return places


def execute_request(call: Request, request_id: Optional[str] = None,
                    regions: Optional[Regions] = None,
                    places: Optional[results.Places] = None,
                    aside: Optional[Aside] = None) -> pb.ExecuteRequest:
    """The ExecuteRequest of `call` (request_id: the id to send instead of call.request_id).
    regions: the client's shared-memory regions (inputs lying in one go as references). places:
    output_places(call.outputs, regions), when the caller has it already. aside: large arrays go
    there, not into the request (for wire.splice)."""
    request = pb.ExecuteRequest(platform=call.platform,
                                request_id=call.request_id if request_id is None else request_id)
    fill_call(request, call.kernel, call.inputs, call.params, regions, aside)
    if places is None:
        places = output_places(call.outputs, regions)
    for name, place in places.items():
        target = request.output_regions[name]
        if isinstance(place, ResidentTensorBase):
            target.tensor = place.name
            continue
        target.region = place.ref.region
        target.offset = place.ref.offset
        target.byte_size = place.ref.nbytes
    if call.config:
        request.config.CopyFrom(kernel_config(call.config))
    if call.device is not None:
        request.device = call.device
    if call.allow_autotune is not None:
        request.policy.allow_autotune = call.allow_autotune
    return request


def batch_request(kernel: str, items: Sequence[Inputs], params: Optional[Params],
                  config: Optional[Config], platform: str, devices: Sequence[int],
                  allow_autotune: Optional[bool], request_id: str) -> pb.ExecuteBatchRequest:
    """The ExecuteBatchRequest running `kernel` on each of `items` (their inputs)."""
    request = pb.ExecuteBatchRequest(kernel=kernel, platform=platform, devices=list(devices),
                                     request_id=request_id)
    for inputs in items:
        item = request.items.add()
        for name, array in inputs.items():
            if isinstance(array, ResidentTensorBase):
                raise ArgumentError(f"input {name!r}: a resident tensor is taken by execute and "
                                    "execute_stream only; pass the array here (t.read())")
            tensors.to_proto(array, item.inputs[name], name)
    for name, value in (params or {}).items():
        request.parameters[name].CopyFrom(param_value(name, value))
    if config:
        request.config.CopyFrom(kernel_config(config))
    if allow_autotune is not None:
        request.policy.allow_autotune = allow_autotune
    return request


def autotune_request(kernel: str, inputs: Inputs, params: Optional[Params], platform: str,
                     device: Optional[int], persist: Optional[bool],
                     time_budget: Optional[float] = None) -> pb.AutotuneRequest:
    request = pb.AutotuneRequest(platform=platform, time_budget_ms=time_budget_ms(time_budget))
    fill_call(request, kernel, inputs, params)
    if device is not None:
        request.device = device
    if persist is not None:
        request.policy.persist = persist
    return request


def time_budget_ms(seconds: Optional[float]) -> int:
    """AutotuneRequest.time_budget_ms of a time_budget in seconds: None or 0 -> 0 (the server's
    budget); a positive budget under a millisecond -> 1; a negative one stays negative, for the
    server to refuse (INVALID_ARGUMENT naming the field)."""
    if not seconds:
        return 0
    if seconds > 0:
        return max(1, math.ceil(seconds * 1e3))
    return math.floor(seconds * 1e3)


def put_config_request(kernel: str, inputs: Inputs, config: Config, params: Optional[Params],
                       platform: str, device: Optional[int]) -> pb.PutConfigRequest:
    request = pb.PutConfigRequest(platform=platform, config=kernel_config(config))
    fill_call(request, kernel, inputs, params)
    if device is not None:
        request.device = device
    return request


def unknown_kernel(name: str, served: Iterable[str]) -> UnknownKernelError:
    """The error for a kernel the server does not serve, naming those it does."""
    served = sorted(served)
    return UnknownKernelError(f"the server has no kernel {name!r}; {_hint(name, served)}"
                              f"it serves {', '.join(served) or 'none'}")


def split_call(schema: KernelSchema, args: Sequence[Any], kwargs: Mapping[str, Any]
               ) -> tuple[dict[str, TensorLike], dict[str, ParamValue], dict[str, Any]]:
    """Inputs, params and run options of a kernel method call, by the kernel's schema: required
    inputs in schema order may be positional. ArgumentError (a TypeError) for a name the kernel
    does not have (naming the closest one and every one it takes), a missing input or too many
    positional ones."""
    return CallSplitter(schema).split(args, kwargs)


class CallSplitter:
    """split_call of one kernel, the names of its schema gathered once (a kernel method's)."""

    def __init__(self, schema: KernelSchema) -> None:
        self.schema = schema
        self._required = [i.name for i in schema.inputs if i.required]
        self._input_names = frozenset(i.name for i in schema.inputs)
        self._param_names = frozenset(p.name for p in schema.params)

    def split(self, args: Sequence[Any], kwargs: Mapping[str, Any]
              ) -> tuple[dict[str, TensorLike], dict[str, ParamValue], dict[str, Any]]:
        """split_call(self.schema, args, kwargs)."""
        schema, required = self.schema, self._required
        if len(args) > len(required):
            raise ArgumentError(f"{schema.name}() takes {len(required)} positional inputs "
                                f"({', '.join(required)}), got {len(args)}")
        inputs: dict[str, TensorLike] = dict(zip(required, args))
        params: dict[str, ParamValue] = {}
        run: dict[str, Any] = {}
        for name, value in kwargs.items():
            if name in RUN_OPTIONS:
                run[name] = value
            elif name in self._input_names:
                if name in inputs:
                    raise ArgumentError(f"{schema.name}() got input {name!r} twice")
                if value is not None:
                    inputs[name] = value
            elif name in self._param_names:
                params[name] = value
            else:
                raise self._unexpected(name)
        missing = ([name for name in required if name not in inputs]
                   if len(args) < len(required) else None)  # all positional: none missing
        if missing:
            raise ArgumentError(f"{schema.name}() missing input(s): {', '.join(missing)}; "
                                f"{schema.name} takes {accepted(schema)}")
        return inputs, params, run

    def _unexpected(self, name: str) -> ArgumentError:
        """The error for a keyword argument the kernel does not take."""
        known = sorted(self._input_names | self._param_names) + list(RUN_OPTIONS)
        return ArgumentError(f"{self.schema.name}() got an unexpected keyword argument "
                             f"{name!r}; {_hint(name, known)}{self.schema.name} takes "
                             f"{accepted(self.schema)}")


def method_signature(schema: KernelSchema) -> Optional[inspect.Signature]:
    """The signature of the kernel's method, for help() and editors: required inputs, then
    keyword-only optional inputs, params (with their defaults) and run options. None when the
    schema's names are not Python identifiers."""
    kind = inspect.Parameter
    parameters = [kind(i.name, kind.POSITIONAL_OR_KEYWORD) for i in schema.inputs if i.required]
    parameters += [kind(i.name, kind.KEYWORD_ONLY, default=None)
                   for i in schema.inputs if not i.required]
    parameters += [kind(p.name, kind.KEYWORD_ONLY, default=p.default) for p in schema.params]
    parameters += [kind(name, kind.KEYWORD_ONLY, default=None) for name in RUN_OPTIONS]
    try:
        return inspect.Signature(parameters, return_annotation=results.Result)
    except ValueError:  # a name that is not an identifier, or one used twice
        return None


def method_doc(schema: KernelSchema) -> str:
    """The docstring of the kernel's method: the kernel's doc, its inputs and params."""
    lines = [schema.doc or schema.id, "", "Inputs:"]
    for i in schema.inputs:
        optional = "" if i.required else " (optional)"
        lines.append(f"  {i.name}{optional}: {i.shape} {'/'.join(i.dtypes)}  {i.doc}".rstrip())
    if schema.params:
        lines.append("Params:")
    for p in schema.params:
        default = "" if p.default is None else f" = {p.default!r}"
        lines.append(f"  {p.name}: {p.type}{default}  {p.doc}".rstrip())
    lines.append(f"Run options: {', '.join(RUN_OPTIONS)} (see execute()).")
    return "\n".join(lines)


class StreamAnswers:
    """The answers of execute_stream, put back in request order.

    Each request is sent with request_id "<index>:<its id>", so that answers match their
    requests whatever order the server answers in, even when ids repeat or are empty; each
    result gets its caller's id back. A bad item answers with its own in-band error.
    """

    def __init__(self, requests: Sequence[Request], regions: Optional[Regions] = None) -> None:
        """regions: the client's shared-memory regions. Every request's outputs are checked
        here, before the call."""
        self._requests = requests
        self._regions = regions
        self._places = [output_places(call.outputs, regions) for call in requests]
        self._answers: list[Optional[results.ItemResult]] = [None] * len(requests)
        self._stray: Optional[str] = None  # a request_id that matches no request

    def wire_requests(self) -> Iterator[pb.ExecuteRequest]:
        """The requests to send, built one at a time as the stream takes them."""
        for index, call in enumerate(self._requests):
            yield execute_request(call, request_id=f"{index}:{call.request_id}",
                                  regions=self._regions, places=self._places[index])

    def add(self, response: pb.ExecuteResponse) -> None:
        """Takes one answer off the stream."""
        index_text, colon, _ = response.request_id.partition(":")
        digits = colon and index_text.isascii() and index_text.isdigit()
        index = int(index_text) if digits else -1
        if not 0 <= index < len(self._answers) or self._answers[index] is not None:
            self._stray = response.request_id
            return
        response.request_id = self._requests[index].request_id
        self._answers[index] = results.item_of(response, self._places[index])

    def results(self) -> list[results.ItemResult]:
        """One answer per request, in request order; INTERNAL when an answer matched no
        request or the stream ended without answering every request."""
        if self._stray is not None:
            raise KernelserveError(grpc.StatusCode.INTERNAL,
                                   f"ExecuteStream: an answer's request_id {self._stray!r} "
                                   "matches no request or repeats one")
        answers: list[results.ItemResult] = []
        for index, answer in enumerate(self._answers):
            if answer is None:
                raise KernelserveError(grpc.StatusCode.INTERNAL,
                                       f"ExecuteStream: the stream ended without an answer to "
                                       f"request {index} of {len(self._answers)}")
            answers.append(answer)
        return answers


def channel_options(max_message_bytes: int) -> list[tuple[str, int]]:
    """The gRPC channel options of a client: its message size limit both ways."""
    return [("grpc.max_send_message_length", max_message_bytes),
            ("grpc.max_receive_message_length", max_message_bytes)]


def channel_credentials(tls: bool, root_certificates: Optional[bytes],
                        private_key: Optional[bytes], certificate_chain: Optional[bytes]
                        ) -> Optional[grpc.ChannelCredentials]:
    """TLS credentials when `tls` or any PEM is given (a key and chain make it mTLS); None for
    a plaintext channel."""
    if not (tls or root_certificates or private_key or certificate_chain):
        return None
    return grpc.ssl_channel_credentials(root_certificates, private_key, certificate_chain)


# The longest deadline a call gets, in seconds (a year): gRPC's clocks overflow on longer ones,
# which then expire at once.
LONGEST_TIMEOUT = 365.0 * 24 * 3600


def call_timeout(timeout: Optional[float], default: Optional[float]) -> Optional[float]:
    """The seconds a call may take: its own timeout, else the client's (None = no deadline),
    at most LONGEST_TIMEOUT."""
    chosen = timeout or default
    return None if chosen is None else min(chosen, LONGEST_TIMEOUT)


def call_metadata(token: Optional[str]) -> tuple[tuple[str, str], ...]:
    """The metadata every KernelService call carries: the bearer token, if any."""
    return (("authorization", f"Bearer {token}"),) if token else ()
