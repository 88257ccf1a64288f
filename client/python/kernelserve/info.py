"""What the server says about itself: info() and the kernels' schemas (kernels(), schema())."""

from __future__ import annotations

import dataclasses
from typing import Optional, Union

from kernelserve import tensors
from kernelserve.v1 import kernel_service_pb2 as pb

# The Python value of a kernel param.
ParamValue = Union[bool, int, float, str]


@dataclasses.dataclass
class DeviceInfo:
    """One device the server runs kernels on."""

    device: int  # -1 = CPU
    platform: str
    name: str
    fingerprint: str  # a hash of fingerprint_json
    fingerprint_json: str
    memory_total_bytes: int
    memory_used_bytes: int
    queue_depth: int


@dataclasses.dataclass
class ServerInfo:
    """The server's version, devices, cache tiers, tuning policy and limits."""

    version: str
    host: str
    devices: list[DeviceInfo]
    cache_tiers: list[str]  # "override", "overlay", "memory", "redis", ...
    store: str  # where the persistent store is
    allow_autotune: bool
    allow_heuristics: bool
    persist: bool
    max_message_bytes: int
    max_queue: int
    max_inflight_bytes: int
    built_with_cuda: bool
    cudnn_version: str = "none"  # cuDNN the server loaded (the cudnn platform), or "none"
    # Resident tensors (create_tensor): the server's limits and what it holds now.
    max_resident_bytes: int = 0  # --max-resident-bytes, of every owner
    quota_resident_bytes: int = 0  # --quota-resident-bytes per identity; 0 = none but the max
    resident_ttl_seconds: int = 0  # --resident-ttl: idle expiry of a tensor that names none
    max_resident_ttl_seconds: int = 0  # --max-resident-ttl
    resident_bytes: int = 0
    resident_tensors: int = 0
    started_unix_ms: int = 0  # resident tensors live in memory only: a restart loses them
    # --autotune-budget (seconds): the time one tuning may take, the default and the most a
    # tune call's time_budget gets; None = no limit.
    autotune_budget: Optional[float] = None


@dataclasses.dataclass
class InputSchema:
    """One input of a kernel."""

    name: str
    required: bool
    dtypes: list[str]  # "f32", "f16", "bf16", "i32", "i64", "bool", "f8_e4m3", "f8_e5m2"
    ranks: list[int]
    shape: str  # for people: "[B,S,H]"
    doc: str
    shape_only: bool = False  # only dtype and shape are read: a TensorSpec may stand for it
    # The kernel writes into it as it runs (a paged cache it appends to): a ResidentTensor
    # passed for it is updated in place; an array only in the call's own copy.
    updated: bool = False


@dataclasses.dataclass
class OutputSchema:
    """One output of a kernel."""

    name: str
    dtype: str  # for people: "dtype of q", "f32"
    shape: str  # for people: "[B,Hq,Sq]"
    doc: str
    # The input whose resident tensor this output may be written into, in place (the same
    # tensor as that input and in outputs=); "" = none.
    in_place_of: str = ""


@dataclasses.dataclass
class ParamSchema:
    """One param of a kernel."""

    name: str
    type: str  # "bool", "int", "float" or "string"
    default: Optional[ParamValue]  # None when the kernel gives none
    min: Optional[float]  # inclusive bounds of an int or float param
    max: Optional[float]
    doc: str


@dataclasses.dataclass
class ConfigFieldSchema:
    """One config field of a platform: a fixed field of KernelConfig or a named one (set in a
    config dict by its name all the same)."""

    name: str  # "threads"
    kind: str  # "int" or "choice"
    min: int  # inclusive bounds of an "int" field
    max: int
    choices: list[str]  # of a "choice" field ("" is always allowed)
    default: str  # what leaving the field out (0 or "") means, for people
    doc: str
    named: bool  # True: sent in KernelConfig.fields; False: a fixed field


@dataclasses.dataclass
class KernelSchema:
    """A kernel the server serves: its inputs, outputs and params (from ListKernels)."""

    name: str
    version: int
    id: str  # "mean_pooling@v1"
    platforms: list[str]
    doc: str
    inputs: list[InputSchema]
    outputs: list[OutputSchema]
    params: list[ParamSchema]
    vjp: str = ""  # the kernel computing this one's VJP ("mean_pooling_bwd"), "" when none
    vjp_of: str = ""  # on a backward kernel: the forward whose VJP it computes
    # Each platform's config fields: platform -> fields ({"cpu": [block_size, threads], ...}).
    configs: dict[str, list[ConfigFieldSchema]] = dataclasses.field(default_factory=dict)

    def input(self, name: str) -> Optional[InputSchema]:
        """The input called `name`, or None."""
        return next((i for i in self.inputs if i.name == name), None)

    def param(self, name: str) -> Optional[ParamSchema]:
        """The param called `name`, or None."""
        return next((p for p in self.params if p.name == name), None)


def param_value_of(value: pb.ParamValue) -> Optional[ParamValue]:
    """The Python value of a pb.ParamValue; None when it holds none."""
    field = value.WhichOneof("value")
    return None if field is None else getattr(value, field)


def server_info_of(info: pb.ServerInfo) -> ServerInfo:
    """The ServerInfo of a pb.ServerInfo."""
    devices = [DeviceInfo(device=d.device, platform=d.platform, name=d.name,
                          fingerprint=d.fingerprint, fingerprint_json=d.fingerprint_json,
                          memory_total_bytes=d.memory_total_bytes,
                          memory_used_bytes=d.memory_used_bytes, queue_depth=d.queue_depth)
               for d in info.devices]
    return ServerInfo(
        version=info.version, host=info.host, devices=devices,
        cache_tiers=list(info.cache_tiers), store=info.store,
        allow_autotune=info.allow_autotune, allow_heuristics=info.allow_heuristics,
        persist=info.persist, max_message_bytes=info.max_message_bytes,
        max_queue=info.max_queue, max_inflight_bytes=info.max_inflight_bytes,
        built_with_cuda=info.built_with_cuda, cudnn_version=info.cudnn_version or "none",
        max_resident_bytes=info.max_resident_bytes,
        quota_resident_bytes=info.quota_resident_bytes,
        resident_ttl_seconds=info.resident_ttl_seconds,
        max_resident_ttl_seconds=info.max_resident_ttl_seconds,
        resident_bytes=info.resident_bytes, resident_tensors=info.resident_tensors,
        started_unix_ms=info.started_unix_ms,
        autotune_budget=info.autotune_budget_ms / 1e3 if info.autotune_budget_ms > 0 else None)


def kernel_schema_of(kernel: pb.KernelInfo) -> KernelSchema:
    """The KernelSchema of a pb.KernelInfo."""
    inputs = [InputSchema(name=i.name, required=i.required,
                          dtypes=[tensors.DTYPE_NAMES.get(d, str(d)) for d in i.dtypes],
                          ranks=list(i.ranks), shape=i.shape, doc=i.doc,
                          shape_only=i.shape_only, updated=i.updated)
              for i in kernel.input_schema]
    outputs = [OutputSchema(name=o.name, dtype=o.dtype, shape=o.shape, doc=o.doc,
                            in_place_of=o.in_place_of)
               for o in kernel.output_schema]
    params = [ParamSchema(name=p.name, type=p.type, default=param_value_of(p.default_value),
                          min=p.min if p.HasField("min") else None,
                          max=p.max if p.HasField("max") else None, doc=p.doc)
              for p in kernel.param_schema]
    configs = {c.platform: [ConfigFieldSchema(name=f.name, kind=f.kind, min=f.min, max=f.max,
                                              choices=list(f.choices), default=f.default_value,
                                              doc=f.doc, named=f.named)
                            for f in c.fields]
               for c in kernel.config_schemas}
    return KernelSchema(name=kernel.name, version=kernel.version, id=kernel.id,
                        platforms=list(kernel.platforms), doc=kernel.doc, inputs=inputs,
                        outputs=outputs, params=params, vjp=kernel.vjp,
                        vjp_of=kernel.vjp_of, configs=configs)
