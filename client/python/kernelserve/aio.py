"""kernelserve.aio.Client: the client for asyncio, on grpc.aio.

    async with kernelserve.aio.Client("127.0.0.1:50051") as client:
        result = await client.mean_pooling(x)
        results = await client.execute_stream([kernelserve.Request("mean_pooling", {"x": x})])
        async with client.register_system_shm("tensors", 1 << 26) as region:
            await client.mean_pooling(region.put(x))
        async with await client.create_tensor(k, name="k") as k_res:
            await client.flash_attention(q, k_res, v)        # k goes by name

The same methods as kernelserve.Client, each a coroutine, with the same arguments, results and
errors; every kernel the server lists is a method here too. Make the client inside the event
loop that uses it (grpc.aio channels belong to one loop).
"""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Iterable, Sequence
from typing import Any, Awaitable, Callable, Optional

import grpc
import grpc.aio
import numpy as np
import numpy.typing as npt

from kernelserve import autoshm, calls, plain, resident, results, shm, tensors, transport, wire
from kernelserve import health as health_wire
from kernelserve.calls import Config, Inputs, Outputs, Params, Request
from kernelserve.client import health_name
from kernelserve.errors import ArgumentError, KernelserveError, from_rpc_error
from kernelserve.info import KernelSchema, ServerInfo, kernel_schema_of, server_info_of
from kernelserve.v1 import kernel_service_pb2 as pb
from kernelserve.v1 import kernel_service_pb2_grpc as pb_grpc


async def _close_quietly(region: shm.SharedMemoryRegion) -> None:
    """Closes a region of the client's own, whatever the server says."""
    try:
        await region.close()  # type: ignore[attr-defined]  # AsyncSystemSharedMemory
    except KernelserveError:
        pass


class Client:
    """A grpc.aio connection to one server; see kernelserve.Client for what each call does."""

    def __init__(self, target: str = "127.0.0.1:50051", *, token: Optional[str] = None,
                 tls: bool = False, root_certificates: Optional[bytes] = None,
                 private_key: Optional[bytes] = None, certificate_chain: Optional[bytes] = None,
                 timeout: Optional[float] = 60.0, max_message_bytes: int = 1 << 30,
                 native: Optional[bool] = None, local_shm: Optional[bool] = None) -> None:
        """As kernelserve.Client: token, TLS/mTLS PEM bytes, timeout in seconds per call, native
        (a tiny call starts on the native transport and wakes the loop when it ends; a large
        one runs in the loop's default executor, the GIL released), local_shm."""
        options = calls.channel_options(max_message_bytes)
        credentials = calls.channel_credentials(tls, root_certificates, private_key,
                                                certificate_chain)
        if credentials is None:
            self._channel = grpc.aio.insecure_channel(target, options)
        else:
            self._channel = grpc.aio.secure_channel(target, credentials, options)
        self._stub = pb_grpc.KernelServiceStub(self._channel)
        # Execute calls with large inputs (kernelserve.wire, kernelserve.transport).
        self._native = (transport.NativeTransport(target, max_message_bytes)
                        if transport.use_native(native, credentials is not None) else None)
        self._grpcio = transport.GrpcioTransport(self._channel, target)
        self._plain = plain.PlainRequests()  # the cached pieces of tiny calls' requests
        # Regions the client takes by itself for large calls to a server on this host.
        self._auto = autoshm.AutoRegions() if autoshm.wanted(local_shm, target) else None
        self._health = health_wire.check_method(self._channel)
        self._metadata = calls.call_metadata(token)
        self._target = target
        self._timeout = timeout
        self._max_message_bytes = max_message_bytes
        self._server_max_message_bytes: Optional[int] = None  # from info(), when needed
        self._schemas: Optional[dict[str, KernelSchema]] = None  # from ListKernels
        self._regions = shm.Regions()  # the shared-memory regions registered and not closed

    async def close(self) -> None:
        """See kernelserve.Client.close."""
        for region in self._regions:
            try:
                await region.close()  # type: ignore[union-attr]  # Async*SharedMemory
            except KernelserveError:
                pass
        if self._native is not None:
            await self._native.close_async()
        await self._channel.close()

    async def __aenter__(self) -> Client:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def _call(self, method: Any, request: Any, timeout: Optional[float] = None) -> Any:
        timeout = calls.call_timeout(timeout, self._timeout)
        try:
            return await method(request, timeout=timeout, metadata=self._metadata)
        except grpc.RpcError as error:
            raise from_rpc_error(error, self._target, timeout) from None

    async def execute(self, kernel: str, inputs: Inputs, params: Optional[Params] = None, *,
                      config: Optional[Config] = None, platform: str = "",
                      device: Optional[int] = None, allow_autotune: Optional[bool] = None,
                      request_id: str = "", timeout: Optional[float] = None,
                      outputs: Optional[Outputs] = None) -> results.Result:
        """See kernelserve.Client.execute (large calls to a server on this host through shared
        memory of the client's own included)."""
        if config is None and outputs is None and self._regions.empty():
            # A tiny call's lean path (kernelserve.plain): its request written from cached
            # pieces, started on the native transport (or sent on the grpc.aio channel), its
            # answer read lazily.
            pieces = self._plain.pieces(kernel, inputs, params, platform, device,
                                        allow_autotune, request_id)
            if pieces is not None:
                sender = self._native if self._native is not None else self._grpcio
                answer = await sender.execute_lazily_async(
                    pieces, calls.call_timeout(timeout, self._timeout), self._metadata)
                return results.result_of_answer(answer)
        run: dict[str, Any] = dict(config=config, platform=platform, device=device,
                                   allow_autotune=allow_autotune, request_id=request_id,
                                   timeout=timeout)
        plan = (self._auto.plan(kernel, inputs, params, platform, self._regions)
                if self._auto is not None and outputs is None else None)
        region = await self._auto_region(plan.nbytes) if plan is not None else None
        if plan is None or region is None:
            return await self._execute(kernel, inputs, params, outputs=outputs, **run)
        try:  # through a region of the client's own (kernelserve.autoshm)
            placed_inputs, placed_outputs = autoshm.place(plan, region)
            result = await self._execute(kernel, placed_inputs, params, outputs=placed_outputs,
                                         **run)
            result.outputs = autoshm.copied_out(result.outputs, region)
        except BaseException:
            await _close_quietly(region)  # the server may still be using it
            raise
        finally:
            self._auto.release(region)  # type: ignore[union-attr]  # plan implies _auto
        self._auto.learn(plan, result.outputs)  # type: ignore[union-attr]
        return result

    async def _auto_region(self, nbytes: int) -> Optional[shm.AsyncSystemSharedMemory]:
        """See kernelserve.Client._auto_region."""
        assert self._auto is not None
        region, size = self._auto.lease(nbytes)
        if size == 0:
            return region  # type: ignore[return-value]  # registered by _auto_region
        if region is not None:
            await _close_quietly(region)
        try:
            made = await self.register_system_shm(autoshm.AutoRegions.new_name(), size)
        except KernelserveError as error:
            self._auto.added(None)
            self._auto.refused(error)
            return None
        self._auto.added(made)
        return made

    async def _execute(self, kernel: str, inputs: Inputs, params: Optional[Params] = None, *,
                       config: Optional[Config] = None, platform: str = "",
                       device: Optional[int] = None, allow_autotune: Optional[bool] = None,
                       request_id: str = "", timeout: Optional[float] = None,
                       outputs: Optional[Outputs] = None) -> results.Result:
        """execute() itself: the call as given, through gRPC."""
        places = calls.output_places(outputs, self._regions)
        aside: calls.Aside = {}
        request = calls.execute_request(Request(
            kernel=kernel, inputs=inputs, params=params, config=config, platform=platform,
            device=device, allow_autotune=allow_autotune, request_id=request_id),
            regions=self._regions, places=places, aside=aside)
        if not aside:
            return results.result_of(await self._call(self._stub.Execute, request, timeout),
                                     places)
        spliced = wire.splice(request.SerializeToString(), aside)
        timeout = calls.call_timeout(timeout, self._timeout)
        if self._native is not None:
            response, datas = await asyncio.get_running_loop().run_in_executor(
                None, self._native.execute, spliced, timeout, self._metadata)
        else:
            response, datas = await self._grpcio.execute_async(spliced, timeout, self._metadata)
        return results.result_of(response, places, datas)

    async def execute_batch(self, kernel: str, items: Sequence[Inputs],
                            params: Optional[Params] = None, *, config: Optional[Config] = None,
                            platform: str = "", devices: Sequence[int] = (),
                            allow_autotune: Optional[bool] = None, request_id: str = "",
                            timeout: Optional[float] = None) -> list[results.ItemResult]:
        """See kernelserve.Client.execute_batch: a Result or a KernelserveError per item."""
        request = calls.batch_request(kernel, items, params, config, platform, devices,
                                      allow_autotune, request_id)
        response = await self._call(self._stub.ExecuteBatch, request, timeout)
        return [results.item_of(item) for item in response.items]

    async def execute_stream(self, requests: Iterable[Request], *,
                             timeout: Optional[float] = None) -> list[results.ItemResult]:
        """See kernelserve.Client.execute_stream: a Result or a KernelserveError per request,
        in request order, over one ExecuteStream call."""
        answers = calls.StreamAnswers(list(requests), self._regions)
        timeout = calls.call_timeout(timeout, self._timeout)
        try:
            stream = self._stub.ExecuteStream(answers.wire_requests(), timeout=timeout,
                                              metadata=self._metadata)
            async for response in stream:
                answers.add(response)
        except grpc.RpcError as error:
            raise from_rpc_error(error, self._target, timeout) from None
        return answers.results()

    async def kernels(self) -> list[KernelSchema]:
        """The kernels the server serves, with their schemas."""
        response = await self._call(self._stub.ListKernels, pb.ListKernelsRequest())
        return [kernel_schema_of(kernel) for kernel in response.kernels]

    async def schema(self, kernel: str) -> KernelSchema:
        """See kernelserve.Client.schema."""
        if self._schemas is None:
            self._schemas = {k.name: k for k in await self.kernels()}
        if kernel not in self._schemas:
            raise calls.unknown_kernel(kernel, self._schemas)
        return self._schemas[kernel]

    async def call(self, kernel: str, *args: Any, **kwargs: Any) -> results.Result:
        """See kernelserve.Client.call."""
        inputs, params, run = calls.split_call(await self.schema(kernel), args, kwargs)
        return await self.execute(kernel, inputs, params, **run)

    def __getattr__(self, name: str) -> Callable[..., Awaitable[results.Result]]:
        """await client.<kernel>(...) for every kernel the server lists: see call(). Until the
        kernels are known (the first call fetches them), an unknown name fails when awaited."""
        if name.startswith("_"):
            raise AttributeError(name)
        if self._schemas is None:
            async def first(*args: Any, **kwargs: Any) -> results.Result:
                await self.schema(name)  # fetches the kernels; UnknownKernelError
                return await getattr(self, name)(*args, **kwargs)

            first.__name__ = first.__qualname__ = name
            return first
        if name not in self._schemas:
            raise calls.unknown_kernel(name, self._schemas)
        schema = self._schemas[name]
        split = calls.CallSplitter(schema).split

        async def method(*args: Any, **kwargs: Any) -> results.Result:
            inputs, params, run = split(args, kwargs)  # call(), the schema's names kept
            return await self.execute(name, inputs, params, **run)

        method.__name__ = method.__qualname__ = name
        method.__doc__ = calls.method_doc(schema)
        method.__signature__ = calls.method_signature(schema)  # type: ignore[attr-defined]
        self.__dict__[name] = method  # found without __getattr__ from now on
        return method

    async def health(self, service: str = "") -> str:
        """See kernelserve.Client.health."""
        try:
            status = await self._health(service, timeout=self._timeout)
        except grpc.RpcError as error:
            raise from_rpc_error(error, self._target, self._timeout) from None
        return health_name(status)

    async def info(self) -> ServerInfo:
        """See kernelserve.Client.info."""
        return server_info_of(await self._call(self._stub.GetServerInfo,
                                               pb.GetServerInfoRequest()))

    async def autotune(self, kernel: str, inputs: Inputs, params: Optional[Params] = None, *,
                       platform: str = "", device: Optional[int] = None,
                       persist: Optional[bool] = None, timeout: Optional[float] = None,
                       time_budget: Optional[float] = None,
                       progress: Optional[Callable[[results.TuneProgress], Any]] = None
                       ) -> results.TuneResult:
        """See kernelserve.Client.autotune. progress may also be a coroutine function: each
        call is awaited before the next message is read."""
        request = calls.autotune_request(kernel, inputs, params, platform, device, persist,
                                         time_budget)
        if progress is None:
            return results.tune_result_of(await self._call(self._stub.Autotune, request,
                                                           timeout))
        timeout = calls.call_timeout(timeout, self._timeout)
        response = None
        stream = self._stub.AutotuneStream(request, timeout=timeout, metadata=self._metadata)
        try:
            async for message in stream:
                if message.HasField("result"):
                    response = message.result
                    continue
                try:
                    told = progress(results.tune_progress_of(message))
                    if inspect.isawaitable(told):
                        await told
                except BaseException:
                    stream.cancel()  # the tuning stops on the server too
                    raise
        except grpc.RpcError as error:
            if error.code() == grpc.StatusCode.UNIMPLEMENTED and response is None:
                # A server from before AutotuneStream: no progress.
                return results.tune_result_of(await self._call(self._stub.Autotune, request,
                                                               timeout))
            raise from_rpc_error(error, self._target, timeout) from None
        if response is None:
            raise KernelserveError(grpc.StatusCode.INTERNAL,
                                   "AutotuneStream ended without its result")
        return results.tune_result_of(response)

    async def list_configs(self, kernel: str = "") -> list[results.ConfigEntry]:
        """See kernelserve.Client.list_configs."""
        response = await self._call(self._stub.ListConfigs, pb.ListConfigsRequest(kernel=kernel))
        return [results.entry_of(entry) for entry in response.entries]

    async def put_config(self, kernel: str, inputs: Inputs, config: Config,
                         params: Optional[Params] = None, *, platform: str = "",
                         device: Optional[int] = None) -> tuple[str, str]:
        """See kernelserve.Client.put_config."""
        request = calls.put_config_request(kernel, inputs, config, params, platform, device)
        response = await self._call(self._stub.PutConfig, request)
        return response.cache_key, response.device_fingerprint

    async def delete_config(self, cache_key: str, device_fingerprint: str = "") -> None:
        """See kernelserve.Client.delete_config."""
        await self._call(self._stub.DeleteConfig,
                         pb.DeleteConfigRequest(cache_key=cache_key,
                                                device_fingerprint=device_fingerprint))

    def register_system_shm(self, name: str, byte_size: int, *,
                            timeout: Optional[float] = None
                            ) -> shm.Registering[shm.AsyncSystemSharedMemory]:
        """See kernelserve.Client.register_system_shm. Awaited, the region, whose close() is a
        coroutine (`await region.close()`); or `async with client.register_system_shm(...) as
        region:`, which closes it at the end of the block (shm.Registering)."""
        return shm.Registering(self._register_system_shm(name, byte_size, timeout))

    async def _register_system_shm(self, name: str, byte_size: int,
                                   timeout: Optional[float]) -> shm.AsyncSystemSharedMemory:
        if byte_size <= 0:
            raise ArgumentError(f"register_system_shm: byte_size must be positive, got "
                                f"{byte_size}")
        region = shm.AsyncSystemSharedMemory(name, byte_size)
        request = pb.RegisterSystemSharedMemoryRequest(name=name, key=region.key,
                                                       byte_size=byte_size)
        try:
            await self._call(self._stub.RegisterSystemSharedMemory, request, timeout)
        except BaseException:
            await region.close()  # not registered: only unlinks
            raise
        region._unregister = self._unregister_region
        self._regions.add(region)
        return region

    def register_cuda_shm(self, name: str, tensor: Any, *, device: Optional[int] = None,
                          timeout: Optional[float] = None
                          ) -> shm.Registering[shm.AsyncCudaSharedMemory]:
        """See kernelserve.Client.register_cuda_shm. Awaited, the region, whose close() is a
        coroutine (`await region.close()`); or `async with client.register_cuda_shm(...) as
        region:`, which closes it at the end of the block (shm.Registering)."""
        return shm.Registering(self._register_cuda_shm(name, tensor, device, timeout))

    async def _register_cuda_shm(self, name: str, tensor: Any, device: Optional[int],
                                 timeout: Optional[float]) -> shm.AsyncCudaSharedMemory:
        region = shm.AsyncCudaSharedMemory(name, tensor, device)
        request = pb.RegisterCudaSharedMemoryRequest(name=name, raw_handle=region.handle,
                                                     device=region.device,
                                                     byte_size=region.byte_size)
        await self._call(self._stub.RegisterCudaSharedMemory, request, timeout)
        region._unregister = self._unregister_region
        self._regions.add(region)
        return region

    async def _unregister_region(self, name: str) -> None:
        await self._call(self._stub.UnregisterSharedMemory,
                         pb.UnregisterSharedMemoryRequest(name=name))

    async def unregister_shm(self, name: str = "") -> None:
        """See kernelserve.Client.unregister_shm."""
        await self._unregister_region(name)
        self._regions.forget(name)

    async def shm_status(self, name: str = "") -> list[results.RegionStatus]:
        """See kernelserve.Client.shm_status."""
        response = await self._call(self._stub.SharedMemoryStatus,
                                    pb.SharedMemoryStatusRequest(name=name))
        return [results.region_status_of(region) for region in response.regions]

    async def create_tensor(self, array: Optional[npt.ArrayLike] = None, *, name: str,
                            dtype: Optional[npt.DTypeLike] = None,
                            shape: Optional[tuple[int, ...]] = None,
                            device: Optional[int] = None, ttl: Optional[float] = None,
                            timeout: Optional[float] = None) -> resident.AsyncResidentTensor:
        """See kernelserve.Client.create_tensor: the tensor's calls are coroutines (`await
        t.read()`, `async with`)."""
        request = resident.create_request(name, array, dtype, shape, device, ttl, self._regions)
        try:
            response = await self._call(self._stub.CreateTensor, request, timeout)
        except KernelserveError as error:
            if not await self._too_big(error, request.contents):
                raise
            response = await self._create_in_pieces(request, timeout)
        return resident.AsyncResidentTensor(self, resident.info_of(response.tensor),
                                            response.created)

    async def _piece_bytes(self) -> int:
        """See kernelserve.Client._piece_bytes."""
        if self._server_max_message_bytes is None:
            try:
                self._server_max_message_bytes = (await self.info()).max_message_bytes
            except KernelserveError:
                self._server_max_message_bytes = 0
        return resident.piece_bytes(self._max_message_bytes, self._server_max_message_bytes)

    async def _too_big(self, error: KernelserveError, contents: pb.Tensor) -> bool:
        """See kernelserve.Client._too_big."""
        return (error.code == grpc.StatusCode.RESOURCE_EXHAUSTED and
                len(contents.data) > await self._piece_bytes())

    async def _create_in_pieces(self, request: pb.CreateTensorRequest,
                                timeout: Optional[float]) -> pb.CreateTensorResponse:
        """See kernelserve.Client._create_in_pieces."""
        write = pb.WriteTensorRequest(name=request.name, contents=request.contents)
        request.ClearField("contents")
        response = await self._call(self._stub.CreateTensor, request, timeout)
        if not response.created:
            return response
        try:
            for piece in resident.write_pieces(write, 0, await self._piece_bytes()):
                answer = await self._call(self._stub.WriteTensor, piece, timeout)
                response.tensor.CopyFrom(answer.tensor)
        except BaseException:
            try:
                await self.delete_tensor(request.name)  # not left half written
            except KernelserveError:
                pass
            raise
        return response

    async def get_tensor(self, name: str) -> resident.AsyncResidentTensor:
        """See kernelserve.Client.get_tensor."""
        for info in await self.list_tensors(name):
            if info.name == name:
                return resident.AsyncResidentTensor(self, info, created=False)
        raise resident.not_found(name)

    async def write_tensor(self, name: str, array: npt.ArrayLike, *, row: int = 0,
                           byte_offset: Optional[int] = None, timeout: Optional[float] = None
                           ) -> resident.ResidentTensorInfo:
        """See kernelserve.Client.write_tensor."""
        request = resident.write_request(name, array, row, byte_offset, self._regions)
        try:
            response = await self._call(self._stub.WriteTensor, request, timeout)
            return resident.info_of(response.tensor)
        except KernelserveError as error:
            if not await self._too_big(error, request.contents):
                raise
        start = resident.write_start((await self.get_tensor(name))._info, request)
        for piece in resident.write_pieces(request, start, await self._piece_bytes()):
            response = await self._call(self._stub.WriteTensor, piece, timeout)
        return resident.info_of(response.tensor)

    async def read_tensor(self, name: str, rows: resident.Rows = None, *,
                          timeout: Optional[float] = None) -> np.ndarray:
        """See kernelserve.Client.read_tensor."""
        request = resident.read_request(name, rows)
        try:
            return tensors.from_proto((await self._call(self._stub.ReadTensor, request,
                                                        timeout)).tensor)
        except KernelserveError as error:
            if error.code != grpc.StatusCode.RESOURCE_EXHAUSTED:
                raise
            pieces = resident.read_pieces((await self.get_tensor(name))._info, request,
                                          await self._piece_bytes())
            if pieces is None:
                raise
        return np.concatenate([tensors.from_proto((await self._call(
            self._stub.ReadTensor, piece, timeout)).tensor) for piece in pieces])

    async def delete_tensor(self, name: str, *, owner: str = "",
                            timeout: Optional[float] = None) -> int:
        """See kernelserve.Client.delete_tensor."""
        request = pb.DeleteTensorRequest(name=name, owner=owner)
        return int((await self._call(self._stub.DeleteTensor, request, timeout)).deleted)

    async def list_tensors(self, name: str = "", *, owner: str = "",
                           timeout: Optional[float] = None) -> resident.ResidentTensors:
        """See kernelserve.Client.list_tensors."""
        request = pb.ListTensorsRequest(name=name, owner=owner)
        return resident.list_of(await self._call(self._stub.ListTensors, request, timeout))
