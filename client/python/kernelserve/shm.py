"""System shared memory: tensors that stay out of gRPC, for a client on the server's host.

    with client.register_system_shm("tensors", 64 << 20) as region:
        x = region.put(x_array)                      # a view into the region, holding x
        out = region.ndarray((8, 1024), np.float32, offset=32 << 20)
        result = client.mean_pooling(x, outputs={"out": out})
        result.out is out                            # True: the server wrote into it

register_system_shm creates a POSIX shared-memory object (multiprocessing.shared_memory, key
"/" + its name) and registers it with RegisterSystemSharedMemory. An input that is a
C-contiguous view into a region the client registered (or `region.ref(view)`) goes as a
Tensor.ref, the server reading its bytes in place (it copies them when the offset is not a
multiple of 16); `outputs={name: view}` has the server write an output into the region, and the
result's output is then that view. Batch, Autotune and PutConfig take data only: there views go
inline as any array.

The region's memory lives as long as the region object or any view of it: close() unregisters
the region and removes the object's name (shm_unlink), and the mapping goes when the last view
does. Python's resource_tracker knows of the object from its creation (so that a process that
dies leaves nothing in /dev/shm) and forgets it when it is unlinked; a region that is never
closed is unlinked when it is garbage-collected or at exit (its registration stays on the server
until unregistered).
"""

from __future__ import annotations

import dataclasses
import threading
import weakref
from collections.abc import Iterator
from multiprocessing import resource_tracker, shared_memory
from typing import Any, Callable, Optional, Union

import grpc
import numpy as np
import numpy.typing as npt

from kernelserve.errors import KernelserveError

Shape = Union[int, tuple[int, ...], list[int]]


@dataclasses.dataclass(frozen=True)
class RegionTensor:
    """A tensor in a registered shared-memory region, sent as a Tensor.ref (an input of
    execute or execute_stream) or an output_regions entry (in `outputs=`). region.ref(view)
    makes one; built by hand it may name any region the server has, e.g. one another process
    registered (as an input; an output needs the region's memory, which region.ref gives)."""

    region: str  # the region's name on the server
    offset: int  # bytes from the start of the region
    shape: tuple[int, ...]
    dtype: npt.DTypeLike = np.float32  # bfloat16 or uint16 = bf16
    byte_size: Optional[int] = None  # None = the tensor's bytes (an output's: room for it)
    memory: Optional[np.ndarray] = dataclasses.field(default=None, compare=False, repr=False)

    @property
    def nbytes(self) -> int:
        """byte_size, or the tensor's bytes when it is None."""
        if self.byte_size is not None:
            return self.byte_size
        return int(np.prod(self.shape, dtype=np.int64)) * np.dtype(self.dtype).itemsize

    def view(self, shape: tuple[int, ...], dtype: npt.DTypeLike) -> np.ndarray:
        """A writable array of `shape` and `dtype` at this place (an output the server wrote);
        ValueError without the region's memory or past its end."""
        if self.memory is None:
            raise ValueError(f"region {self.region!r}: no memory of it here")
        return _view(self.memory, self.region, shape, dtype, self.offset)


@dataclasses.dataclass(frozen=True)
class OutputPlace:
    """Where one output of a call goes: `ref` (with the region's memory) and the view the
    caller gave, if any (the result's output is that view when it has the output's shape and
    dtype)."""

    ref: RegionTensor
    array: Optional[np.ndarray] = None


def _view(memory: np.ndarray, region: str, shape: Shape, dtype: npt.DTypeLike,
          offset: int) -> np.ndarray:
    """An array over `memory` (a region's bytes) at `offset`; ValueError past its end."""
    shape = (shape,) if isinstance(shape, int) else tuple(shape)
    dtype = np.dtype(dtype)
    nbytes = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
    if offset < 0 or any(n < 0 for n in shape) or offset + nbytes > memory.nbytes:
        raise ValueError(f"region {region!r}: {nbytes} bytes at offset {offset} do not fit in "
                         f"its {memory.nbytes} bytes")
    return np.ndarray(shape, dtype, buffer=memory, offset=offset)


class _Mapping:
    """A region's mapping as an array interface. Arrays made of it hold this object, and so the
    SharedMemory: the mapping is closed (SharedMemory.__del__) only when the last array goes,
    never under a live view, and no buffer of SharedMemory.buf stays exported to make its
    close() fail."""

    def __init__(self, memory: shared_memory.SharedMemory, size: int) -> None:
        probe = np.frombuffer(memory.buf, np.uint8, count=size)
        address = probe.__array_interface__["data"][0]
        del probe  # releases the export of memory.buf
        self.memory = memory
        self.__array_interface__ = {"version": 3, "shape": (size,), "typestr": "|u1",
                                    "data": (address, False)}


def _unlink(memory: shared_memory.SharedMemory) -> None:
    """Removes the object's name (the resource_tracker forgets it too); the mapping stays."""
    try:
        memory.unlink()
    except FileNotFoundError:  # someone else removed it: the tracker is still to be told
        resource_tracker.unregister("/" + memory.name, "shared_memory")


class SharedMemoryRegion:
    """The memory of a system shared-memory region this process created and registered:
    `name` (the server's name for it), `key` (the shm_open name, "/psm_..."), `byte_size`.
    Views into it are NumPy arrays; see SystemSharedMemory for the blocking client's region and
    AsyncSystemSharedMemory for asyncio's."""

    def __init__(self, name: str, byte_size: int) -> None:
        """Creates the POSIX shared-memory object (not registered yet)."""
        if byte_size <= 0:
            raise ValueError(f"region {name!r}: byte_size must be positive, got {byte_size}")
        memory = shared_memory.SharedMemory(create=True, size=byte_size)
        self.name = name
        self.key = "/" + memory.name
        self.byte_size = byte_size
        self._memory: Optional[np.ndarray] = np.asarray(_Mapping(memory, byte_size))
        self._address: int = self._memory.__array_interface__["data"][0]
        self._unlink = weakref.finalize(self, _unlink, memory)
        self._forget: Callable[[SharedMemoryRegion], None] = lambda region: None
        # Unregisters the region on the server (a coroutine function for asyncio's); None
        # before it is registered and once it need not be.
        self._unregister: Optional[Callable[[str], Any]] = None

    @property
    def closed(self) -> bool:
        return self._memory is None

    def _bytes(self) -> np.ndarray:
        if self._memory is None:
            raise ValueError(f"region {self.name!r} is closed")
        return self._memory

    @property
    def buffer(self) -> memoryview:
        """The region's bytes, writable."""
        return memoryview(self._bytes())

    def ndarray(self, shape: Shape, dtype: npt.DTypeLike = np.float32, offset: int = 0
                ) -> np.ndarray:
        """A writable, C-contiguous view of `shape` and `dtype` at byte `offset` of the region.
        The server reads inputs in place when the offset is a multiple of 16 (and copies them
        otherwise). ValueError past the region's end."""
        return _view(self._bytes(), self.name, shape, dtype, offset)

    def put(self, array: npt.ArrayLike, offset: int = 0) -> np.ndarray:
        """Copies `array` into the region at byte `offset`; returns the view holding it."""
        values = np.asarray(array)
        view = self.ndarray(values.shape, values.dtype, offset)
        view[...] = values
        return view

    def offset_of(self, array: np.ndarray) -> Optional[int]:
        """The byte offset of `array` in this region when it is a non-empty, C-contiguous view
        lying wholly inside it, else None."""
        if self._memory is None or not isinstance(array, np.ndarray) or array.nbytes == 0:
            return None
        if not array.flags.c_contiguous:
            return None
        offset = array.__array_interface__["data"][0] - self._address
        return offset if 0 <= offset and offset + array.nbytes <= self.byte_size else None

    def ref(self, array: np.ndarray) -> RegionTensor:
        """The RegionTensor of `array`, a C-contiguous view into this region: an input sent as
        a Tensor.ref, or an output place (`outputs={"out": region.ref(view)}`). ValueError for
        an array that is not one."""
        offset = self.offset_of(array)
        if offset is None:
            raise ValueError(f"region {self.name!r}: the array is not a non-empty, C-contiguous "
                             "view into this region (make one with region.ndarray or "
                             "region.put)")
        return RegionTensor(self.name, offset, tuple(array.shape), array.dtype, array.nbytes,
                            self._memory)

    def _release(self) -> None:
        """Unlinks the object and drops this object's hold of the mapping (views keep it)."""
        self._forget(self)
        self._unlink()
        self._memory = None

    def __repr__(self) -> str:
        state = " closed" if self.closed else ""
        return (f"<{type(self).__name__} {self.name!r} key={self.key!r} "
                f"byte_size={self.byte_size}{state}>")


def _unregistered(error: KernelserveError) -> bool:
    """Whether an Unregister error means that the region was already gone."""
    return error.code == grpc.StatusCode.NOT_FOUND


class SystemSharedMemory(SharedMemoryRegion):
    """A region registered through kernelserve.Client.register_system_shm. close() (or the
    end of a with block) unregisters it and unlinks the object; views stay valid until they
    go."""

    def close(self) -> None:
        """Unregisters the region (a region already unregistered is fine) and unlinks the
        object. Raises the server's error otherwise, after unlinking."""
        if self.closed:
            return
        unregister, self._unregister = self._unregister, None
        try:
            if unregister is not None:
                unregister(self.name)
        except KernelserveError as error:
            if not _unregistered(error):
                raise
        finally:
            self._release()

    def __enter__(self) -> SystemSharedMemory:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class AsyncSystemSharedMemory(SharedMemoryRegion):
    """A region registered through kernelserve.aio.Client.register_system_shm: as
    SystemSharedMemory, with `await region.close()` and `async with`."""

    async def close(self) -> None:
        """See SystemSharedMemory.close."""
        if self.closed:
            return
        unregister, self._unregister = self._unregister, None
        try:
            if unregister is not None:
                await unregister(self.name)
        except KernelserveError as error:
            if not _unregistered(error):
                raise
        finally:
            self._release()

    async def __aenter__(self) -> AsyncSystemSharedMemory:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()


class Regions:
    """The regions one client registered and has not closed, by name (weakly held: a region
    dropped without close() leaves). A view into one of them is sent as a reference."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._regions: weakref.WeakValueDictionary[str, SharedMemoryRegion] = (
            weakref.WeakValueDictionary())

    def add(self, region: SharedMemoryRegion) -> None:
        with self._lock:
            self._regions[region.name] = region
        region._forget = self.remove

    def remove(self, region: SharedMemoryRegion) -> None:
        with self._lock:
            if self._regions.get(region.name) is region:
                del self._regions[region.name]

    def forget(self, name: str) -> list[SharedMemoryRegion]:
        """Takes the region `name` ("" = all) out after the server unregistered it: its close()
        then only unlinks. Returns those taken out."""
        with self._lock:
            names = list(self._regions) if not name else [name]
            taken = [r for r in (self._regions.pop(n, None) for n in names) if r is not None]
        for region in taken:
            region._unregister = None
        return taken

    def __iter__(self) -> Iterator[SharedMemoryRegion]:
        with self._lock:
            return iter(list(self._regions.values()))

    def get(self, name: str) -> Optional[SharedMemoryRegion]:
        with self._lock:
            return self._regions.get(name)

    def locate(self, array: Any) -> Optional[RegionTensor]:
        """The RegionTensor of `array` when it is a view into one of these regions, else
        None."""
        if not isinstance(array, np.ndarray) or array.nbytes == 0:
            return None
        for region in self:
            if region.offset_of(array) is not None:
                return region.ref(array)
        return None
