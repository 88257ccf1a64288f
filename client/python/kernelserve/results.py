"""What the calls return: the result classes, built from response messages."""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import Mapping
from typing import Any, Optional, Union

import grpc
import numpy as np

from kernelserve import tensors
from kernelserve.errors import ArgumentError, KernelserveError, error_of
from kernelserve.resident import ResidentTensorBase
from kernelserve.shm import OutputPlace
from kernelserve.v1 import kernel_service_pb2 as pb

_TIMINGS = ("recv_us", "queue_us", "select_us", "h2d_us", "launch_us", "kernel_us", "d2h_us",
            "total_us")


# Taken while a lazily built Result sets its fields (Result._build).
_BUILD_LOCK = threading.Lock()


@dataclasses.dataclass
class Result:
    """The answer to one kernel call. execute() returns it before reading the answer's fields:
    they are made from the answer's message the first time one of them is read (all at once;
    their values are those the answer has)."""

    # name -> array (bf16 as ml_dtypes.bfloat16): read-only, sharing the response's bytes, or
    # for an output placed in shared memory (outputs=) the writable view the server wrote; for
    # one placed in a CUDA region, the CUDA tensor (or RegionTensor) given for it; for one
    # written into a resident tensor, that ResidentTensor (its .read() reads it).
    outputs: dict[str, Any]
    timings: dict[str, int]  # recv_us, queue_us, select_us, h2d_us, launch_us, kernel_us, d2h_us,
    #                          total_us
    config: dict[str, Union[int, str]]  # the KernelConfig that ran, by field name
    source: str  # "memory", "heuristic", "autotune", "override", ...
    platform: str
    device: int  # -1 = CPU
    device_fingerprint: str
    cache_key: str
    warnings: list[str]
    request_id: str = ""  # the caller's request_id, echoed

    @property
    def out(self) -> Any:
        """outputs["out"]."""
        return self.outputs["out"]

    @property
    def lse(self) -> Optional[Any]:
        """outputs["lse"] (flash_attention with return_lse=True), else None."""
        return self.outputs.get("lse")

    def __getattr__(self, name: str) -> Any:
        """Any other output by name: r.dx (mean_pooling_bwd), r.dq, r.dk, r.dv, r.dbias
        (flash_attention_bwd). AttributeError naming the outputs there are otherwise. (The
        fields of a Result not built yet come here too: see _build.)"""
        if not name.startswith("_") and "_answer" in self.__dict__:
            self._build()
            return getattr(self, name)
        outputs = self.__dict__.get("outputs")
        if name.startswith("_") or outputs is None or name not in outputs:
            raise AttributeError(f"{type(self).__name__} has no attribute {name!r}; outputs: "
                                 f"{sorted(outputs or {})}")
        return outputs[name]

    def _build(self) -> None:
        """Sets the fields of a Result made without them (result_of, lazy_result) from its
        answer, but those set already (assigned by the caller); once, whichever thread comes
        first."""
        with _BUILD_LOCK:
            answer = self.__dict__.get("_answer")
            if answer is None:
                return
            response, places, datas = answer
            if isinstance(response, bytes):  # (lazy_result's) INTERNAL when it does not parse
                response = parsed_response(response)
            for name, value in fields_of(response, places, datas).items():
                self.__dict__.setdefault(name, value)
            del self.__dict__["_answer"]

    def __getstate__(self) -> dict[str, Any]:
        """The fields (built first), for pickle and copy."""
        self._build()
        return dict(self.__dict__)


class _BuiltDefault:
    """The class attribute of a Result field with a default (request_id): its default, but read
    from a Result whose fields are not built yet (no value of its own), the answer's value."""

    def __init__(self, name: str, default: Any) -> None:
        self._name = name
        self._default = default

    def __get__(self, result: Optional[Result], owner: Any = None) -> Any:
        if result is None or "_answer" not in result.__dict__:
            return self._default
        result._build()
        return result.__dict__[self._name]


Result.request_id = _BuiltDefault("request_id", "")  # type: ignore[assignment]

# One item of execute_batch or execute_stream: its result, or the error of that item alone.
ItemResult = Union[Result, KernelserveError]


@dataclasses.dataclass
class Candidate:
    """One config timed by a tune: its median, or the error that ruled it out."""

    config: dict[str, Union[int, str]]
    median_us: Optional[float]  # None when it failed
    error: Optional[KernelserveError]  # None when it ran and matched the reference


@dataclasses.dataclass
class TuneProgress:
    """Where an autotune stands, as its progress callback is told: after the reference run
    (candidates_done 0) and after each candidate (a slow callback may miss some)."""

    candidates_done: int  # timed (or failed on their own) so far; never decreases
    candidates_total: int  # 0 until known
    best_us: Optional[float]  # the fastest so far; None before any candidate matched
    elapsed_seconds: float


@dataclasses.dataclass
class TuneResult:
    """The answer to autotune: the winner (stored by the server) and every candidate. When the
    time budget cut it short (budget_reached), the winner is the best of candidates_timed of
    candidates_total, kept in the server's memory but not written to its config store; the
    candidates skipped have a DEADLINE_EXCEEDED error."""

    best: dict[str, Union[int, str]]  # the winning KernelConfig, by field name
    best_us: float
    source: str  # "autotune", or "heuristic" when every candidate failed
    candidates: list[Candidate]
    cache_key: str
    device_fingerprint: str
    platform: str
    device: int  # -1 = CPU
    elapsed_seconds: float
    warnings: list[str]
    candidates_timed: int = 0
    candidates_total: int = 0
    budget_reached: bool = False
    time_budget: Optional[float] = None  # seconds, the budget that applied; None = none


@dataclasses.dataclass
class ConfigEntry:
    """One cached config as list_configs reports it."""

    kernel: str  # "mean_pooling@v1"
    cache_key: str
    device_fingerprint: str  # "" for the memory tier
    config: dict[str, Union[int, str]]
    origin: str  # "autotune", "heuristic", "pinned"; "" for the memory tier
    measured_us: float
    host: str
    stored_at_unix_ms: int
    tier: str  # "memory", "file", "redis"


@dataclasses.dataclass
class RegionStatus:
    """One registered shared-memory region as shm_status reports it."""

    name: str
    kind: str  # "system" or "cuda"
    key: str  # the shm_open name of a "system" region
    offset: int  # of the registered part in the object
    byte_size: int
    in_use: int  # calls holding it now
    device: int  # the GPU of a "cuda" region; -1 for "system"
    owner: str = ""  # the identity that registered it ("anonymous" without authentication)
    pinned: bool = False  # a "system" region page-locked for the server's GPUs


# The fixed fields of KernelConfig a config dict has, in field order (not the retired backend).
_CONFIG_NAMES = tuple(f.name for f in pb.KernelConfig.DESCRIPTOR.fields
                      if f.name not in ("fields", "backend"))


def config_dict(config: pb.KernelConfig) -> dict[str, Union[int, str]]:
    """A pb.KernelConfig as a dict: every fixed field but the retired `backend`, then the named
    fields (`fields`) by their names ({"block_size": 64, ..., "threads": 2})."""
    out: dict[str, Union[int, str]] = {name: getattr(config, name) for name in _CONFIG_NAMES}
    out.update(sorted(config.fields.items()))
    return out


def source_name(source: int) -> str:
    """pb.ConfigSource -> "memory", "autotune", ..."""
    name: str = pb.ConfigSource.Name(source)
    return name.removeprefix("CONFIG_SOURCE_").lower()


def placed_output(name: str, tensor: pb.Tensor, place: OutputPlace) -> Any:
    """The array of an output the server wrote into shared memory (`tensor` has its dtype and
    shape, no data): the caller's view when it has that shape and dtype, else a view of them at
    the same place. In a CUDA region: the caller's CUDA tensor (or RegionTensor) when it has
    that shape and dtype, else a RegionTensor of them at the same place."""
    shape = tuple(tensor.shape)
    if place.ref.device is not None:
        same = place.ref.shape == shape
        try:
            same = same and tensors.wire_dtype(place.ref.dtype, name) == tensor.dtype
        except ArgumentError:
            same = False
        if same:
            return place.ref if place.array is None else place.array
        try:
            dtype = tensors.numpy_dtype(tensor.dtype)
        except ValueError as error:
            raise KernelserveError(grpc.StatusCode.INTERNAL, f"output {name!r}: {error}") from None
        return dataclasses.replace(place.ref, shape=shape, dtype=dtype, byte_size=None)
    array = place.array
    if array is not None and array.shape == shape:
        try:
            if tensors.wire_dtype(array.dtype, name) == tensor.dtype:
                return array
        except ArgumentError:
            pass
    try:
        return place.ref.view(shape, tensors.numpy_dtype(tensor.dtype))
    except ValueError as error:
        raise KernelserveError(grpc.StatusCode.INTERNAL,
                               f"output {name!r} in shared memory: {error}") from None


# Where each output of a call goes: a place in shared memory, or a resident tensor.
Places = Mapping[str, Union[OutputPlace, ResidentTensorBase]]


def output_of(name: str, tensor: pb.Tensor, places: Optional[Places],
              data: Optional[memoryview] = None) -> Any:
    """The value of output `name`: its array, the view it was written into, or the resident
    tensor that holds it. data: the output's bytes when kernelserve.wire read them beside the
    message (`tensor` then has no data)."""
    if data is not None:
        try:
            return tensors.from_data(tensor, data)
        except ValueError as error:
            raise KernelserveError(grpc.StatusCode.INTERNAL, f"output {name!r}: {error}") from None
    place = places.get(name) if places else None
    if isinstance(place, ResidentTensorBase) and not tensor.data:
        return place  # written into the resident tensor: read it with place.read()
    if place is None or isinstance(place, ResidentTensorBase) or tensor.data:
        return tensors.from_proto(tensor)
    return placed_output(name, tensor, place)


def item_of(response: pb.ExecuteResponse, places: Optional[Places] = None,
            datas: Optional[Mapping[str, memoryview]] = None) -> ItemResult:
    """The Result of a pb.ExecuteResponse, or its in-band error. places: the outputs the call
    put in shared memory. datas: the outputs' bytes that kernelserve.wire read beside the
    message."""
    error = error_of(response.status)
    if error is not None:
        return error
    return Result(**fields_of(response, places, datas))


def fields_of(response: pb.ExecuteResponse, places: Optional[Places] = None,
              datas: Optional[Mapping[str, memoryview]] = None) -> dict[str, Any]:
    """The fields of the Result of a successful pb.ExecuteResponse, by name (see item_of)."""
    datas = datas or {}
    return dict(
        outputs={name: output_of(name, t, places, datas.get(name))
                 for name, t in response.outputs.items()},
        timings={name: getattr(response.timing, name) for name in _TIMINGS},
        config=config_dict(response.config),
        source=source_name(response.config_source),
        platform=response.platform,
        device=response.device,
        device_fingerprint=response.device_fingerprint,
        cache_key=response.cache_key,
        warnings=list(response.warnings),
        request_id=response.request_id,
    )


def result_of(response: pb.ExecuteResponse, places: Optional[Places] = None,
              datas: Optional[Mapping[str, memoryview]] = None) -> Result:
    """The Result of a pb.ExecuteResponse; raises its in-band error. datas: as for item_of.
    With outputs placed (places), the Result is built now (a place that does not fit is an
    error of the call); otherwise on first use (lazy_result)."""
    if response.HasField("status"):  # (without a Python object of its own when not there)
        error = error_of(response.status)
        if error is not None:
            raise error
    if places:
        return Result(**fields_of(response, places, datas))
    result: Result = _new_result(Result)  # lazy: see Result._build
    result.__dict__["_answer"] = (response, None, datas)
    return result


def lazy_result(message: bytes) -> Result:
    """The Result of an ExecuteResponse's bytes that carry no in-band status (outputs inline),
    parsed when its fields are first read (an answer that does not parse is INTERNAL then)."""
    result: Result = _new_result(Result)
    result.__dict__["_answer"] = (message, None, None)
    return result


def result_of_answer(answer: Union[bytes, tuple[pb.ExecuteResponse, dict[str, memoryview]]]
                     ) -> Result:
    """The Result of a lean call's answer (transport's execute_lazily and
    execute_lazily_async): lazy for its bytes, else of the parsed response and its outputs'
    data (raising its in-band error)."""
    if type(answer) is bytes:
        return lazy_result(answer)
    return result_of(answer[0], None, answer[1])  # type: ignore[index]


def parsed_response(message: bytes) -> pb.ExecuteResponse:
    """The ExecuteResponse of an answer's bytes; INTERNAL when they do not parse."""
    try:
        return pb.ExecuteResponse.FromString(message)
    except Exception as error:  # protobuf's DecodeError
        raise KernelserveError(grpc.StatusCode.INTERNAL,
                               f"Execute's answer does not parse: {error}") from None


_new_result = object.__new__  # a Result without its fields (Result._build makes them)


def tune_result_of(response: pb.AutotuneResponse) -> TuneResult:
    """The TuneResult of a pb.AutotuneResponse."""
    candidates = []
    for c in response.candidates:
        error = error_of(c.status)
        candidates.append(Candidate(config=config_dict(c.config),
                                    median_us=None if error else c.median_us, error=error))
    return TuneResult(
        best=config_dict(response.best), best_us=response.best_us,
        source=source_name(response.config_source), candidates=candidates,
        cache_key=response.cache_key, device_fingerprint=response.device_fingerprint,
        platform=response.platform, device=response.device,
        elapsed_seconds=response.elapsed_seconds, warnings=list(response.warnings),
        candidates_timed=response.candidates_timed, candidates_total=response.candidates_total,
        budget_reached=response.budget_reached,
        time_budget=response.time_budget_ms / 1e3 if response.time_budget_ms else None)


def tune_progress_of(progress: pb.AutotuneProgress) -> TuneProgress:
    """The TuneProgress of a pb.AutotuneProgress."""
    return TuneProgress(candidates_done=progress.candidates_done,
                        candidates_total=progress.candidates_total,
                        best_us=progress.best_us or None,
                        elapsed_seconds=progress.elapsed_seconds)


def entry_of(entry: pb.ConfigEntry) -> ConfigEntry:
    """The ConfigEntry of a pb.ConfigEntry."""
    return ConfigEntry(
        kernel=entry.kernel, cache_key=entry.cache_key,
        device_fingerprint=entry.device_fingerprint, config=config_dict(entry.config),
        origin=entry.origin, measured_us=entry.measured_us, host=entry.host,
        stored_at_unix_ms=entry.stored_at_unix_ms, tier=entry.tier)


def region_status_of(region: pb.SharedMemoryRegion) -> RegionStatus:
    """The RegionStatus of a pb.SharedMemoryRegion."""
    return RegionStatus(name=region.name, kind=region.kind, key=region.key, offset=region.offset,
                        byte_size=region.byte_size, in_use=region.in_use, device=region.device,
                        owner=region.owner, pinned=region.pinned)
