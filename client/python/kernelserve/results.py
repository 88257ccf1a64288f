"""What the calls return: the result classes, built from response messages."""

from __future__ import annotations

import dataclasses
from typing import Optional, Union

import numpy as np

from kernelserve import tensors
from kernelserve.errors import KernelserveError, error_of
from kernelserve.v1 import kernel_service_pb2 as pb

_TIMINGS = ("recv_us", "queue_us", "select_us", "h2d_us", "kernel_us", "d2h_us", "total_us")


@dataclasses.dataclass
class Result:
    """The answer to one kernel call."""

    outputs: dict[str, np.ndarray]  # name -> array (read-only; bf16 as ml_dtypes.bfloat16)
    timings: dict[str, int]  # recv_us, queue_us, select_us, h2d_us, kernel_us, d2h_us, total_us
    config: dict[str, Union[int, str]]  # the KernelConfig that ran, by field name
    source: str  # "memory", "heuristic", "autotune", "override", ...
    platform: str
    device: int  # -1 = CPU
    device_fingerprint: str
    cache_key: str
    warnings: list[str]
    request_id: str = ""  # the caller's request_id, echoed

    @property
    def out(self) -> np.ndarray:
        """outputs["out"]."""
        return self.outputs["out"]

    @property
    def lse(self) -> Optional[np.ndarray]:
        """outputs["lse"] (flash_attention with return_lse=True), else None."""
        return self.outputs.get("lse")


# One item of execute_batch or execute_stream: its result, or the error of that item alone.
ItemResult = Union[Result, KernelserveError]


@dataclasses.dataclass
class Candidate:
    """One config timed by a tune: its median, or the error that ruled it out."""

    config: dict[str, Union[int, str]]
    median_us: Optional[float]  # None when it failed
    error: Optional[KernelserveError]  # None when it ran and matched the reference


@dataclasses.dataclass
class TuneResult:
    """The answer to autotune: the winner (stored by the server) and every candidate."""

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


def config_dict(config: pb.KernelConfig) -> dict[str, Union[int, str]]:
    """A pb.KernelConfig as a dict of every field."""
    return {f.name: getattr(config, f.name) for f in config.DESCRIPTOR.fields}


def source_name(source: int) -> str:
    """pb.ConfigSource -> "memory", "autotune", ..."""
    name: str = pb.ConfigSource.Name(source)
    return name.removeprefix("CONFIG_SOURCE_").lower()


def item_of(response: pb.ExecuteResponse) -> ItemResult:
    """The Result of a pb.ExecuteResponse, or its in-band error."""
    error = error_of(response.status)
    if error is not None:
        return error
    return Result(
        outputs={name: tensors.from_proto(t) for name, t in response.outputs.items()},
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


def result_of(response: pb.ExecuteResponse) -> Result:
    """The Result of a pb.ExecuteResponse; raises its in-band error."""
    item = item_of(response)
    if isinstance(item, KernelserveError):
        raise item
    return item


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
        elapsed_seconds=response.elapsed_seconds, warnings=list(response.warnings))


def entry_of(entry: pb.ConfigEntry) -> ConfigEntry:
    """The ConfigEntry of a pb.ConfigEntry."""
    return ConfigEntry(
        kernel=entry.kernel, cache_key=entry.cache_key,
        device_fingerprint=entry.device_fingerprint, config=config_dict(entry.config),
        origin=entry.origin, measured_us=entry.measured_us, host=entry.host,
        stored_at_unix_ms=entry.stored_at_unix_ms, tier=entry.tier)
