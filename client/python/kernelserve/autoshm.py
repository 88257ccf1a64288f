"""Shared memory a client takes by itself for large calls to a server on its own host.

A client whose target is on this host (loopback or a unix socket) moves the tensors of a call
with at least MIN_BYTES of inputs through a system shared-memory region it registers and manages
(kernelserve.shm), instead of through gRPC: the inputs are copied into the region (one copy,
into pages already mapped after the first call) and sent as references; the outputs are written
by the server into the region and copied out into fresh arrays, so nothing the caller holds
points into memory the client reuses. An output's place needs its size before the call, so the
first call of a kernel with given input shapes, dtypes and params brings its outputs inline and
teaches the client their shapes; later ones place them in the region too.

Regions are leased one per call (concurrent calls get regions of their own), kept for the next
call, grown by replacing a small free one, at most MAX_REGIONS per client. The first refusal
that says the server cannot use them (UNIMPLEMENTED: shared memory off there, e.g. a server
running as root without --shared-memory-as-root; NOT_FOUND: a server in another container or
host that cannot see the object; PERMISSION_DENIED) switches the client to gRPC for good; other
refusals (RESOURCE_EXHAUSTED: the server's caps) send that one call through gRPC. A client made
with local_shm=False (or the environment KERNELSERVE_LOCAL_SHM=0) never does any of this.
"""

from __future__ import annotations

import concurrent.futures
import dataclasses
import os
import threading
import uuid
from collections.abc import Mapping
from typing import Any, Optional

import grpc
import numpy as np

from kernelserve import tensors
from kernelserve.errors import KernelserveError
from kernelserve.shm import Regions, SharedMemoryRegion

# A call goes through a region when its inputs have at least this many bytes: below, the copy
# into the region and the extra bookkeeping cost about what gRPC's copies do (measured with
# bench/python_client.py: at 1 MiB the two ways are within noise, at 8 MiB the region is 2x).
MIN_BYTES = 1 << 20
# Regions one client keeps at most (one per call in flight); past it a call goes through gRPC.
MAX_REGIONS = 8
# A new region's size: the call's need rounded up to a power of two, at least this.
_MIN_REGION = 4 << 20
_ALIGN = 64  # each tensor's offset in a region (the server reads in place from 16 up)
# Refusals after which the server cannot use this client's regions at all.
_PERMANENT = (grpc.StatusCode.UNIMPLEMENTED, grpc.StatusCode.NOT_FOUND,
              grpc.StatusCode.PERMISSION_DENIED)
_LOCAL_PREFIXES = ("unix:", "unix-abstract:", "localhost", "127.", "[::1]", "ipv4:127.",
                   "ipv6:[::1]")


def is_local(target: str) -> bool:
    """Whether a gRPC target is on this host: a unix socket or a loopback address."""
    return target.startswith(_LOCAL_PREFIXES)


def wanted(local_shm: Optional[bool], target: str) -> bool:
    """Whether a client takes regions by itself. local_shm: None = for a target on this host
    unless the environment has KERNELSERVE_LOCAL_SHM=0; True = for any target (the server must
    still see this host's /dev/shm); False = never."""
    if local_shm is None:
        return is_local(target) and os.environ.get("KERNELSERVE_LOCAL_SHM", "1") != "0"
    return local_shm


def _aligned(n: int) -> int:
    return (n + _ALIGN - 1) // _ALIGN * _ALIGN


def _region_size(need: int) -> int:
    """A new region's size for a call of `need` bytes: rounded up to an eighth of the next
    power of two (at most 1/8 more than needed; a few sizes for calls that grow), at least
    _MIN_REGION."""
    power = 1 << max(need - 1, 1).bit_length()
    step = max(power // 16, 1)
    return max(_MIN_REGION, (need + step - 1) // step * step)


OutputSpecs = dict[str, tuple[np.dtype, tuple[int, ...]]]


@dataclasses.dataclass
class Plan:
    """Where one call's tensors go in its region: inputs' and outputs' byte offsets."""

    key: tuple[Any, ...]  # the call's output-shape key
    inputs: dict[str, tuple[int, np.ndarray]]  # name -> offset, the C-contiguous array sent
    outputs: dict[str, tuple[int, np.dtype, tuple[int, ...]]]  # name -> offset, dtype, shape
    nbytes: int


class AutoRegions:
    """The regions of one client. Thread-safe."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._free: list[SharedMemoryRegion] = []  # registered, not leased
        self._count = 0  # registered, leased or not
        self._off = False  # the server cannot use them
        self._specs: dict[tuple[Any, ...], OutputSpecs] = {}  # output shapes learnt

    @property
    def off(self) -> bool:
        return self._off

    def plan(self, kernel: str, inputs: Mapping[str, Any], params: Optional[Mapping[str, Any]],
             platform: str, regions: Regions) -> Optional[Plan]:
        """The plan of a call that goes through a region, or None (a call whose inputs are not
        all plain arrays, or smaller than MIN_BYTES, or lie in one of `regions` already (they go
        as references as they are), or the server cannot use regions)."""
        if self._off or not inputs:
            return None
        if sum(getattr(v, "nbytes", 0) for v in inputs.values()) < MIN_BYTES:
            return None  # a small call, decided before any other work
        arrays: dict[str, np.ndarray] = {}
        for name, value in inputs.items():
            if type(value) is not np.ndarray:  # RegionTensors, resident tensors...
                return None
            if regions.locate(value) is not None:  # in a region the caller registered
                return None
            held = tensors.sent_aside(value, name, 0)
            if held is None:
                return None
            arrays[name] = held[1]
        if sum(a.nbytes for a in arrays.values()) < MIN_BYTES:
            return None
        key = (kernel, platform, tuple((n, a.dtype.str, a.shape) for n, a in arrays.items()),
               tuple(sorted((params or {}).items())))
        try:
            hash(key)
        except TypeError:  # a param that is no scalar: the call's own checks say what is wrong
            return None
        offset = 0
        placed: dict[str, tuple[int, np.ndarray]] = {}
        for name, array in arrays.items():
            placed[name] = (offset, array)
            offset += _aligned(array.nbytes)
        outputs: dict[str, tuple[int, np.dtype, tuple[int, ...]]] = {}
        for name, (dtype, shape) in self._specs.get(key, {}).items():
            outputs[name] = (offset, dtype, shape)
            offset += _aligned(int(np.prod(shape, dtype=np.int64)) * dtype.itemsize)
        return Plan(key, placed, outputs, max(offset, 1))

    def learn(self, plan: Plan, outputs: Mapping[str, Any]) -> None:
        """Keeps the shapes of a call's outputs (those that came back as arrays)."""
        if plan.outputs:
            return
        specs = {name: (value.dtype, value.shape) for name, value in sorted(outputs.items())
                 if isinstance(value, np.ndarray)}  # by name: a layout that does not vary
        with self._lock:
            if len(self._specs) > 1024:  # many shapes: forget the oldest half
                for stale in list(self._specs)[:512]:
                    del self._specs[stale]
            self._specs[plan.key] = specs

    def lease(self, nbytes: int) -> tuple[Optional[SharedMemoryRegion], int]:
        """A free region of at least `nbytes`, or (None, size) for a region of `size` to
        register and add (size 0: none, the call goes through gRPC). A too small free region
        is handed back as the first value with size > 0: close it, then register."""
        with self._lock:
            fits = [r for r in self._free if r.byte_size >= nbytes]
            if fits:
                region = min(fits, key=lambda r: r.byte_size)
                self._free.remove(region)
                return region, 0
            if self._free:  # replace the smallest free one
                region = min(self._free, key=lambda r: r.byte_size)
                self._free.remove(region)
                self._count -= 1
                return region, _region_size(nbytes)
            if self._count >= MAX_REGIONS:
                return None, 0
            self._count += 1  # reserved for the caller's registration
            return None, _region_size(nbytes)

    def added(self, region: Optional[SharedMemoryRegion]) -> None:
        """After lease asked for a registration: the region registered (leased to the caller),
        or None when it failed."""
        if region is None:
            with self._lock:
                self._count -= 1

    def refused(self, error: KernelserveError) -> None:
        """A registration the server refused: a refusal that says it cannot use this client's
        regions turns them off."""
        if error.code in _PERMANENT:
            self._off = True

    def release(self, region: SharedMemoryRegion) -> None:
        """Gives back a leased region for the next call. Only after a call that succeeded: a
        call that failed (a deadline, say) may still be running on the server, reading and
        writing the region; close such a region instead, then release it."""
        with self._lock:
            if not region.closed:
                self._free.append(region)
            else:
                self._count -= 1

    @staticmethod
    def new_name() -> str:
        return f"kernelserve-auto-{uuid.uuid4().hex[:16]}"


# A copy of at least this many bytes is split over threads (NumPy copies without the GIL): one
# core's memcpy is well below what the memory system gives several.
_SPLIT_COPY_BYTES = 16 << 20
_copiers: Optional[concurrent.futures.ThreadPoolExecutor] = None
_copiers_lock = threading.Lock()


def _copy(dst: np.ndarray, src: np.ndarray) -> None:
    """dst[...] = src for C-contiguous arrays of one dtype and size, large ones in parallel."""
    workers = min(4, len(os.sched_getaffinity(0)))
    if src.nbytes < _SPLIT_COPY_BYTES or workers < 2:
        np.copyto(dst, src, casting="no")
        return
    global _copiers
    with _copiers_lock:
        if _copiers is None:
            _copiers = concurrent.futures.ThreadPoolExecutor(4, "kernelserve-copy")
    to, of = dst.reshape(-1), src.reshape(-1)
    step = -(-of.size // workers)
    parts = [(to[i:i + step], of[i:i + step]) for i in range(0, of.size, step)]
    for done in _copiers.map(lambda part: np.copyto(part[0], part[1], casting="no"), parts):
        del done


def place(plan: Plan, region: SharedMemoryRegion) -> tuple[dict[str, np.ndarray],
                                                           dict[str, np.ndarray]]:
    """Copies the plan's inputs into `region`; returns the inputs and the outputs as views into
    it (for execute)."""
    inputs = {}
    for name, (offset, array) in plan.inputs.items():
        view = region.ndarray(array.shape, array.dtype, offset)
        _copy(view, array)
        inputs[name] = view
    outputs = {name: region.ndarray(shape, dtype, offset)
               for name, (offset, dtype, shape) in plan.outputs.items()}
    return inputs, outputs


def copied_out(outputs: dict[str, Any], region: SharedMemoryRegion) -> dict[str, Any]:
    """The outputs with every array that lies in `region` copied out of it."""
    copied = {}
    for name, value in outputs.items():
        if isinstance(value, np.ndarray) and region.offset_of(value) is not None:
            mine = np.empty_like(value)
            _copy(mine, value)
            value = mine
        copied[name] = value
    return copied
