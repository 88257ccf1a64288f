"""What the calls return: the error type and the result classes, built from response messages."""

import dataclasses

import grpc

from kernelserve import tensors
from kernelserve.v1 import kernel_service_pb2 as pb

_CODES = {code.value[0]: code for code in grpc.StatusCode}
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


@dataclasses.dataclass
class Candidate:
    """One config timed by a tune: its median, or the error that ruled it out."""

    config: dict
    median_us: float  # None when it failed
    error: KernelServeError  # None when it ran and matched the reference


@dataclasses.dataclass
class TuneResult:
    """The answer to autotune: the winner (stored by the server) and every candidate."""

    best: dict  # the winning KernelConfig, by field name
    best_us: float
    source: str  # "autotune", or "heuristic" when every candidate failed
    candidates: list  # of Candidate
    cache_key: str
    device_fingerprint: str
    platform: str
    device: int  # -1 = CPU
    elapsed_seconds: float
    warnings: list


@dataclasses.dataclass
class ConfigEntry:
    """One cached config as list_configs reports it."""

    kernel: str  # "mean_pooling@v1"
    cache_key: str
    device_fingerprint: str  # "" for the memory tier
    config: dict
    origin: str  # "autotune", "heuristic", "pinned"; "" for the memory tier
    measured_us: float
    host: str
    stored_at_unix_ms: int
    tier: str  # "memory", "file", "redis"


def error_of(status):
    """The KernelServeError of an in-band pb.RpcStatus; None when it is OK."""
    if status.code == 0:
        return None
    return KernelServeError(_CODES.get(status.code, grpc.StatusCode.UNKNOWN), status.message)


def config_dict(config):
    """A pb.KernelConfig as a dict of every field."""
    return {f.name: getattr(config, f.name) for f in config.DESCRIPTOR.fields}


def source_name(source):
    """pb.ConfigSource -> "memory", "autotune", ..."""
    return pb.ConfigSource.Name(source).removeprefix("CONFIG_SOURCE_").lower()


def result_of(response):
    """The Result of a pb.ExecuteResponse; raises its in-band error."""
    error = error_of(response.status)
    if error is not None:
        raise error
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
    )


def tune_result_of(response):
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


def entry_of(entry):
    """The ConfigEntry of a pb.ConfigEntry."""
    return ConfigEntry(
        kernel=entry.kernel, cache_key=entry.cache_key,
        device_fingerprint=entry.device_fingerprint, config=config_dict(entry.config),
        origin=entry.origin, measured_us=entry.measured_us, host=entry.host,
        stored_at_unix_ms=entry.stored_at_unix_ms, tier=entry.tier)
