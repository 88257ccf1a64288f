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

CUDA shared memory keeps tensors on the GPU (the server on this host, on the GPU that holds them):

    buffer = torch.empty(64 << 20, dtype=torch.uint8, device="cuda")   # any allocation
    with client.register_cuda_shm("gpu", buffer) as region:
        x = buffer[:n].view(torch.float16).view(8, 512, 1024)          # views into it
        out = buffer[32 << 20:][:m].view(torch.float16).view(8, 1024)
        client.mean_pooling(x, outputs={"out": out}).out is out      # True, written on the GPU

register_cuda_shm exports the IPC handle of the whole allocation holding the tensor
(kernelserve.cuda) and registers it with RegisterCudaSharedMemory. A CUDA tensor lying in such a
region (torch, CuPy, anything with __cuda_array_interface__ or DLPack) is sent as a Tensor.ref,
and as an output the server writes it in place; region.ref(tensor) makes the RegionTensor. The
region holds the tensor it was made from (so its memory stays allocated) until close(), which
unregisters it and frees nothing.
"""

from __future__ import annotations

import dataclasses
import threading
import weakref
from collections.abc import Coroutine, Generator, Iterator
from multiprocessing import resource_tracker, shared_memory
from typing import Any, Callable, Generic, Optional, TypeVar, Union

import grpc
import numpy as np
import numpy.typing as npt

from kernelserve import cuda
from kernelserve.errors import ArgumentError, KernelserveError

Shape = Union[int, tuple[int, ...], list[int]]


@dataclasses.dataclass(frozen=True)
class RegionTensor:
    """A tensor in a registered shared-memory region, sent as a Tensor.ref (an input of
    execute or execute_stream) or an output_regions entry (in `outputs=`). region.ref(view)
    makes one; built by hand it may name any region the server has, e.g. one another process
    registered (as an input; an output needs the region's memory, which region.ref gives). In
    a CUDA region `device` is the region's GPU (as the server numbers them), None in a system
    one; a RegionTensor with a device may name any CUDA region as an output too, since nothing
    of it is read back."""

    region: str  # the region's name on the server
    offset: int  # bytes from the start of the region
    shape: tuple[int, ...]
    dtype: npt.DTypeLike = np.float32  # bfloat16 or uint16 = bf16
    byte_size: Optional[int] = None  # None = the tensor's bytes (an output's: room for it)
    memory: Optional[np.ndarray] = dataclasses.field(default=None, compare=False, repr=False)
    device: Optional[int] = None

    @property
    def nbytes(self) -> int:
        """byte_size, or the tensor's bytes when it is None."""
        if self.byte_size is not None:
            return self.byte_size
        return int(np.prod(self.shape, dtype=np.int64)) * np.dtype(self.dtype).itemsize

    def view(self, shape: tuple[int, ...], dtype: npt.DTypeLike) -> np.ndarray:
        """A writable array of `shape` and `dtype` at this place (an output the server wrote);
        ValueError without the region's memory (a CUDA region: on the GPU) or past its end."""
        if self.memory is None:
            raise ValueError(f"region {self.region!r}: no memory of it here")
        return _view(self.memory, self.region, shape, dtype, self.offset)


@dataclasses.dataclass(frozen=True)
class OutputPlace:
    """Where one output of a call goes: `ref` (with the region's memory, or a CUDA region's
    device) and the view the caller gave, if any: a NumPy view, or a CUDA tensor (the result's
    output is that object when it has the output's shape and dtype)."""

    ref: RegionTensor
    array: Optional[Any] = None


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
        self._forget: Callable[[Any], None] = lambda region: None
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


def _close(region: AnyRegion) -> None:
    """Unregisters `region` through its blocking client (a region already unregistered is
    fine), then releases it here; raises the server's error otherwise, after releasing."""
    if region.closed:
        return
    unregister, region._unregister = region._unregister, None
    try:
        if unregister is not None:
            unregister(region.name)
    except KernelserveError as error:
        if not _unregistered(error):
            raise
    finally:
        region._release()


async def _aclose(region: AnyRegion) -> None:
    """_close through an asyncio client."""
    if region.closed:
        return
    unregister, region._unregister = region._unregister, None
    try:
        if unregister is not None:
            await unregister(region.name)
    except KernelserveError as error:
        if not _unregistered(error):
            raise
    finally:
        region._release()


class SystemSharedMemory(SharedMemoryRegion):
    """A region registered through kernelserve.Client.register_system_shm. close() (or the
    end of a with block) unregisters it and unlinks the object; views stay valid until they
    go."""

    def close(self) -> None:
        """Unregisters the region (a region already unregistered is fine) and unlinks the
        object. Raises the server's error otherwise, after unlinking."""
        _close(self)

    def __enter__(self) -> SystemSharedMemory:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class AsyncSystemSharedMemory(SharedMemoryRegion):
    """A region registered through kernelserve.aio.Client.register_system_shm: as
    SystemSharedMemory, with `await region.close()` and `async with`."""

    async def close(self) -> None:
        """See SystemSharedMemory.close."""
        await _aclose(self)

    async def __aenter__(self) -> AsyncSystemSharedMemory:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()


class CudaRegion:
    """A CUDA region: the GPU allocation holding a tensor, exported with an IPC handle;
    `name` (the server's name for it), `device` (its GPU as the server numbers them),
    `local_device` (as this process numbers them), `base` (the allocation's device address),
    `byte_size` (the allocation's), `handle` (the 64 bytes of its cudaIpcMemHandle_t). See
    CudaSharedMemory for the blocking client's region and AsyncCudaSharedMemory for asyncio's."""

    def __init__(self, name: str, tensor: Any, device: Optional[int] = None) -> None:
        """Exports the allocation holding `tensor` (not registered yet). ArgumentError for an
        object that is no CUDA tensor (kernelserve.cuda.describe) or memory the driver cannot
        export."""
        if device is not None and (not isinstance(device, int) or device < 0):
            raise ArgumentError(f"register_cuda_shm {name!r}: device must be a GPU ordinal "
                                f"(0, 1, ...), got {device!r}")
        described = cuda.describe(tensor, f"register_cuda_shm {name!r}", strict=False)
        allocation = cuda.export(described.address)
        if len(allocation.handle) != cuda.HANDLE_BYTES:
            raise ArgumentError(f"register_cuda_shm {name!r}: the IPC handle has "
                                f"{len(allocation.handle)} bytes, not {cuda.HANDLE_BYTES}")
        self.name = name
        self.handle = allocation.handle
        self.base = allocation.base
        self.byte_size = allocation.size
        self.local_device = allocation.device
        self.device = allocation.device if device is None else device
        self._tensor: Optional[Any] = tensor  # keeps the memory allocated while registered
        self._forget: Callable[[Any], None] = lambda region: None
        self._unregister: Optional[Callable[[str], Any]] = None  # as SharedMemoryRegion's

    @property
    def closed(self) -> bool:
        return self._tensor is None

    @property
    def tensor(self) -> Any:
        """The tensor the region was made from (None once closed)."""
        return self._tensor

    def _offset(self, described: cuda.CudaTensor) -> Optional[int]:
        offset = described.address - self.base
        inside = 0 <= offset and offset + described.nbytes <= self.byte_size
        return offset if inside and not self.closed else None

    def offset_of(self, tensor: Any) -> Optional[int]:
        """The byte offset of `tensor` in this region when it is a CUDA tensor lying wholly
        inside it (kernelserve.cuda.describe takes it), else None."""
        if self.closed or not cuda.is_cuda_tensor(tensor):
            return None
        try:
            return self._offset(cuda.describe(tensor))
        except ArgumentError:
            return None

    def _ref(self, described: cuda.CudaTensor) -> Optional[RegionTensor]:
        offset = self._offset(described)
        if offset is None:
            return None
        return RegionTensor(self.name, offset, described.shape, described.dtype,
                            described.nbytes, device=self.device)

    def ref(self, tensor: Any) -> RegionTensor:
        """The RegionTensor of `tensor`, a C-contiguous CUDA tensor in this region's allocation
        (offset: its address less the allocation's base; shape and dtype its own): an input
        sent as a Tensor.ref, or an output place. ArgumentError for one that is not."""
        if self.closed:
            raise ArgumentError(f"region {self.name!r} is closed")
        ref = self._ref(cuda.describe(tensor, f"region {self.name!r}"))
        if ref is None:
            raise ArgumentError(f"region {self.name!r}: the tensor does not lie in this region's "
                                f"allocation ({self.byte_size} bytes at {self.base:#x})")
        return ref

    def _release(self) -> None:
        """Drops the region's hold of the tensor (nothing is freed here)."""
        self._forget(self)
        self._tensor = None

    def __repr__(self) -> str:
        state = " closed" if self.closed else ""
        return (f"<{type(self).__name__} {self.name!r} device={self.device} "
                f"base={self.base:#x} byte_size={self.byte_size}{state}>")


class CudaSharedMemory(CudaRegion):
    """A region registered through kernelserve.Client.register_cuda_shm. close() (or the end
    of a with block) unregisters it; the memory stays the caller's."""

    def close(self) -> None:
        """Unregisters the region (a region already unregistered is fine) and lets go of the
        tensor. Raises the server's error otherwise."""
        _close(self)

    def __enter__(self) -> CudaSharedMemory:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class AsyncCudaSharedMemory(CudaRegion):
    """A region registered through kernelserve.aio.Client.register_cuda_shm: as
    CudaSharedMemory, with `await region.close()` and `async with`."""

    async def close(self) -> None:
        """See CudaSharedMemory.close."""
        await _aclose(self)

    async def __aenter__(self) -> AsyncCudaSharedMemory:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()


AsyncRegion = TypeVar("AsyncRegion", AsyncSystemSharedMemory, AsyncCudaSharedMemory)


class Registering(Generic[AsyncRegion]):
    """What kernelserve.aio.Client.register_system_shm and register_cuda_shm return: awaited,
    the registered region (`region = await client.register_system_shm(...)`); or an async
    context manager that registers the region on entry and closes it at the end of the block,
    as the blocking client's region is in a with block (`async with
    client.register_system_shm(...) as region:`). Registers once: await it or enter it, once."""

    def __init__(self, registration: Coroutine[Any, Any, AsyncRegion]) -> None:
        self._registration = registration
        self._region: Optional[AsyncRegion] = None

    def __await__(self) -> Generator[Any, None, AsyncRegion]:
        return self._registration.__await__()

    async def __aenter__(self) -> AsyncRegion:
        self._region = await self._registration
        return self._region

    async def __aexit__(self, *exc: object) -> None:
        if self._region is not None:
            await self._region.close()


AnyRegion = Union[SharedMemoryRegion, CudaRegion]


class Regions:
    """The regions one client registered and has not closed, by name (weakly held: a region
    dropped without close() leaves). A view into one of them, or a CUDA tensor in one, is sent
    as a reference."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._regions: weakref.WeakValueDictionary[str, AnyRegion] = (
            weakref.WeakValueDictionary())

    def add(self, region: AnyRegion) -> None:
        with self._lock:
            self._regions[region.name] = region
        region._forget = self.remove

    def remove(self, region: AnyRegion) -> None:
        with self._lock:
            if self._regions.get(region.name) is region:
                del self._regions[region.name]

    def forget(self, name: str) -> list[AnyRegion]:
        """Takes the region `name` ("" = all) out after the server unregistered it: its close()
        then only releases it here. Returns those taken out."""
        with self._lock:
            names = list(self._regions) if not name else [name]
            taken = [r for r in (self._regions.pop(n, None) for n in names) if r is not None]
        for region in taken:
            region._unregister = None
        return taken

    def empty(self) -> bool:
        """Whether there is no region (none registered, or all closed); a dropped one whose
        removal is still pending counts as there. (`data`, the dict under the weak one: its
        len() is a Python call.)"""
        return not self._regions.data

    def __iter__(self) -> Iterator[AnyRegion]:
        with self._lock:
            return iter(list(self._regions.values()))

    def get(self, name: str) -> Optional[AnyRegion]:
        with self._lock:
            return self._regions.get(name)

    def locate(self, array: Any, what: str = "tensor") -> Optional[RegionTensor]:
        """The RegionTensor of `array` when it is a view into one of the system regions, None
        for any other array. A CUDA tensor must lie in one of the CUDA regions: ArgumentError,
        naming `what`, when it does not (or is no good, see kernelserve.cuda.describe)."""
        if isinstance(array, np.ndarray):
            if array.nbytes == 0 or not self._regions:  # none registered: the common case
                return None
            for region in self:
                if isinstance(region, SharedMemoryRegion) and region.offset_of(array) is not None:
                    return region.ref(array)
            return None
        if not cuda.is_cuda_tensor(array):
            return None
        described = cuda.describe(array, what)
        for region in self:
            ref = region._ref(described) if isinstance(region, CudaRegion) else None
            if ref is not None:
                return ref
        raise ArgumentError(f"{what}: a CUDA tensor (address {described.address:#x}) outside "
                            "every CUDA region this client registered: register the allocation "
                            "holding it (client.register_cuda_shm) or copy it to the host")
