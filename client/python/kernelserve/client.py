"""kernelserve.Client: a blocking client of kernelserve.v1.KernelService.

    with kernelserve.Client("127.0.0.1:50051") as client:
        result = client.mean_pooling(x)          # x: float32 [B, S, H]
        result.out, result.timings["kernel_us"]
        client.flash_attention(q, k, v, causal=True)   # any kernel the server lists
        client.execute_batch("mean_pooling", [{"x": x0}, {"x": x1}])
        client.execute_stream([kernelserve.Request("mean_pooling", {"x": x})])
        with client.register_system_shm("tensors", 1 << 26) as region:   # on the server's host
            out = region.ndarray((8, 1024), offset=1 << 25)
            client.mean_pooling(region.put(x), outputs={"out": out})   # out holds the result
        with client.register_cuda_shm("gpu", gpu_buffer):   # a torch/CuPy GPU tensor's memory
            client.mean_pooling(gpu_x, outputs={"out": gpu_out})   # views of it, on its GPU
        with client.create_tensor(k, name="k") as k_res:     # kept on the server by name
            client.flash_attention(q, k_res, v)               # k goes by name, not its bytes

Every kernel the server lists (ListKernels) is a method: its required inputs positional or by
name, its optional inputs and params by name, checked against the kernel's schema before the
call: a misspelt name is an ArgumentError (a KernelserveError and a TypeError) that names it,
the closest right one and every one the kernel takes.

Calls raise KernelserveError carrying the server's status code and message. kernelserve.aio
has the same client for asyncio; kernelserve.shm describes the shared-memory regions,
kernelserve.resident the resident tensors.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any, Callable, Optional

import grpc
import numpy as np
import numpy.typing as npt

from kernelserve import (autoshm, calls, plain, resident, results, shm, tensors, transport,
                         wire)
from kernelserve import health as health_wire
from kernelserve.calls import Config, Inputs, Outputs, Params, Request
from kernelserve.errors import ArgumentError, KernelserveError, from_rpc_error
from kernelserve.info import KernelSchema, ServerInfo, kernel_schema_of, server_info_of
from kernelserve.v1 import kernel_service_pb2 as pb
from kernelserve.v1 import kernel_service_pb2_grpc as pb_grpc


def _close_quietly(region: shm.SharedMemoryRegion) -> None:
    """Closes a region of the client's own, whatever the server says."""
    try:
        region.close()  # type: ignore[attr-defined]  # System/AsyncSystemSharedMemory
    except KernelserveError:
        pass


def health_name(status: int) -> str:
    """A grpc.health.v1 serving status by name ("SERVING", ...; "UNKNOWN" for a new one)."""
    return health_wire.status_name(status)


class Client:
    """A connection to one server. Thread-safe, as grpc channels are."""

    def __init__(self, target: str = "127.0.0.1:50051", *, token: Optional[str] = None,
                 tls: bool = False, root_certificates: Optional[bytes] = None,
                 private_key: Optional[bytes] = None, certificate_chain: Optional[bytes] = None,
                 timeout: Optional[float] = 60.0, max_message_bytes: int = 1 << 30,
                 native: Optional[bool] = None, local_shm: Optional[bool] = None) -> None:
        """token: bearer token. tls (or any PEM bytes given): a TLS channel; private_key and
        certificate_chain make it mTLS. timeout: seconds per call (None = none). native: send
        calls through kernelserve._native (gRPC's C++ library, no copy of the arrays): None =
        when it is built and the channel is plaintext, True = required, False = never
        (kernelserve.transport). local_shm: move the tensors of large execute() calls through
        shared-memory regions the client manages: None = when the target is on this host and
        the server takes them, False = never (kernelserve.autoshm)."""
        options = calls.channel_options(max_message_bytes)
        credentials = calls.channel_credentials(tls, root_certificates, private_key,
                                                certificate_chain)
        if credentials is None:
            self._channel = grpc.insecure_channel(target, options)
        else:
            self._channel = grpc.secure_channel(target, credentials, options)
        self._stub = pb_grpc.KernelServiceStub(self._channel)
        # Execute calls (kernelserve.wire, kernelserve.transport): every one through the native
        # transport when it is there, else those with large inputs through grpcio on wire bytes.
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
        self._plain_timeout = calls.call_timeout(None, timeout)  # a call's without its own
        self._max_message_bytes = max_message_bytes
        self._server_max_message_bytes: Optional[int] = None  # from info(), when needed
        self._schemas: Optional[dict[str, KernelSchema]] = None  # from ListKernels
        self._regions = shm.Regions()  # the shared-memory regions registered and not closed

    def close(self) -> None:
        """Closes the regions this client registered and left open (unregistering them when
        the server answers), then the channel."""
        for region in self._regions:
            try:
                region.close()  # type: ignore[union-attr]  # System/CudaSharedMemory
            except KernelserveError:
                pass
        self._channel.close()
        if self._native is not None:
            self._native.close()

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _call(self, method: Any, request: Any, timeout: Optional[float] = None) -> Any:
        timeout = calls.call_timeout(timeout, self._timeout)
        try:
            return method(request, timeout=timeout, metadata=self._metadata)
        except grpc.RpcError as error:
            raise from_rpc_error(error, self._target, timeout) from None

    def execute(self, kernel: str, inputs: Inputs, params: Optional[Params] = None, *,
                config: Optional[Config] = None, platform: str = "",
                device: Optional[int] = None, allow_autotune: Optional[bool] = None,
                request_id: str = "", timeout: Optional[float] = None,
                outputs: Optional[Outputs] = None) -> results.Result:
        """Runs `kernel` on `inputs` (name -> array). params: the kernel's params by name.
        config: an explicit KernelConfig (dict of its fields). platform: "" or "auto" (the best
        that runs it), "cpu", "cuda" (the own kernels), "cudnn" (cuDNN's plans).
        allow_autotune: tune on a cache miss for this call. An input that is a view into a
        region of register_system_shm (or a RegionTensor, region.ref(view)) is sent as a
        reference, not its bytes. outputs: output name -> such a view (or RegionTensor), for the
        server to write that output into; the result's output is then that view. A large call
        to a server on this host may go through shared memory of the client's own (the
        Client's local_shm); its outputs are then arrays of their own."""
        if (self._native is not None and config is None and outputs is None
                and self._regions.empty()):  # a tiny call's lean path (kernelserve.plain)
            pieces = self._plain.pieces(kernel, inputs, params, platform, device,
                                        allow_autotune, request_id)
            if pieces is not None:  # through the native transport, the answer read lazily
                answer = self._native.execute_lazily(
                    pieces, self._plain_timeout if not timeout else
                    calls.call_timeout(timeout, None), self._metadata)
                return results.result_of_answer(answer)
        run: dict[str, Any] = dict(config=config, platform=platform, device=device,
                                   allow_autotune=allow_autotune, request_id=request_id,
                                   timeout=timeout)
        plan = (self._auto.plan(kernel, inputs, params, platform, self._regions)
                if self._auto is not None and outputs is None else None)
        region = self._auto_region(plan.nbytes) if plan is not None else None
        if plan is None or region is None:
            return self._execute(kernel, inputs, params, outputs=outputs, **run)
        try:  # through a region of the client's own (kernelserve.autoshm)
            placed_inputs, placed_outputs = autoshm.place(plan, region)
            result = self._execute(kernel, placed_inputs, params, outputs=placed_outputs, **run)
            result.outputs = autoshm.copied_out(result.outputs, region)
        except BaseException:
            _close_quietly(region)  # the server may still be using it
            raise
        finally:
            self._auto.release(region)  # type: ignore[union-attr]  # plan implies _auto
        self._auto.learn(plan, result.outputs)  # type: ignore[union-attr]
        return result

    def _auto_region(self, nbytes: int) -> Optional[shm.SystemSharedMemory]:
        """A region of the client's own for a call of `nbytes`, or None (through gRPC)."""
        assert self._auto is not None
        region, size = self._auto.lease(nbytes)
        if size == 0:
            return region  # type: ignore[return-value]  # registered by _auto_region
        if region is not None:
            _close_quietly(region)
        try:
            made = self.register_system_shm(autoshm.AutoRegions.new_name(), size)
        except KernelserveError as error:
            self._auto.added(None)
            self._auto.refused(error)
            return None
        self._auto.added(made)
        return made

    def _execute(self, kernel: str, inputs: Inputs, params: Optional[Params] = None, *,
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
        if self._native is None and not aside:
            return results.result_of(self._call(self._stub.Execute, request, timeout), places)
        # The message spliced around the large inputs' buffers, the answer's tensors read in
        # place (kernelserve.wire); every call, when the native transport is there: it is also
        # the faster way for a tiny call (gRPC's C++ library, not grpcio's Python layers).
        spliced = wire.splice(request.SerializeToString(), aside)
        sender = self._native if self._native is not None else self._grpcio
        response, datas = sender.execute(spliced, calls.call_timeout(timeout, self._timeout),
                                         self._metadata)
        return results.result_of(response, places, datas)

    def execute_batch(self, kernel: str, items: Sequence[Inputs], params: Optional[Params] = None,
                      *, config: Optional[Config] = None, platform: str = "",
                      devices: Sequence[int] = (), allow_autotune: Optional[bool] = None,
                      request_id: str = "", timeout: Optional[float] = None
                      ) -> list[results.ItemResult]:
        """Runs `kernel` with the same params and config on each item of `items` (name -> array
        each) in one ExecuteBatch call. Returns one entry per item, in order: its Result, or the
        KernelserveError of that item alone. devices: spread the items over these."""
        request = calls.batch_request(kernel, items, params, config, platform, devices,
                                      allow_autotune, request_id)
        response = self._call(self._stub.ExecuteBatch, request, timeout)
        return [results.item_of(item) for item in response.items]

    def execute_stream(self, requests: Iterable[Request], *, timeout: Optional[float] = None
                       ) -> list[results.ItemResult]:
        """Sends every request on one ExecuteStream call. Returns one entry per request, in
        request order: its Result (with its own request_id), or the KernelserveError of that
        request alone; the stream goes on past a bad one. Raises the stream's own error
        (UNAVAILABLE, UNAUTHENTICATED, DEADLINE_EXCEEDED: the timeout covers the whole
        stream). Shared-memory inputs and Request.outputs as in execute()."""
        answers = calls.StreamAnswers(list(requests), self._regions)
        timeout = calls.call_timeout(timeout, self._timeout)
        try:
            for response in self._stub.ExecuteStream(answers.wire_requests(), timeout=timeout,
                                                     metadata=self._metadata):
                answers.add(response)
        except grpc.RpcError as error:
            raise from_rpc_error(error, self._target, timeout) from None
        return answers.results()

    def kernels(self) -> list[KernelSchema]:
        """The kernels the server serves, with their schemas."""
        response = self._call(self._stub.ListKernels, pb.ListKernelsRequest())
        return [kernel_schema_of(kernel) for kernel in response.kernels]

    def schema(self, kernel: str) -> KernelSchema:
        """The kernel's schema (inputs, outputs, params with types and defaults), as the server
        lists it (fetched once per client). UnknownKernelError (an AttributeError) for a kernel
        the server does not serve."""
        if self._schemas is None:
            self._schemas = {k.name: k for k in self.kernels()}
        if kernel not in self._schemas:
            raise calls.unknown_kernel(kernel, self._schemas)
        return self._schemas[kernel]

    def call(self, kernel: str, *args: Any, **kwargs: Any) -> results.Result:
        """Runs `kernel` with its inputs and params by the kernel's schema (required inputs may
        be positional), plus the run options of execute()."""
        inputs, params, run = calls.split_call(self.schema(kernel), args, kwargs)
        return self.execute(kernel, inputs, params, **run)

    def __getattr__(self, name: str) -> Callable[..., results.Result]:
        """client.<kernel>(...) for every kernel the server lists: see call()."""
        if name.startswith("_"):
            raise AttributeError(name)
        schema = self.schema(name)  # UnknownKernelError, an AttributeError
        split = calls.CallSplitter(schema).split

        def method(*args: Any, **kwargs: Any) -> results.Result:
            inputs, params, run = split(args, kwargs)  # call(), the schema's names kept
            return self.execute(name, inputs, params, **run)

        method.__name__ = method.__qualname__ = name
        method.__doc__ = calls.method_doc(schema)
        method.__signature__ = calls.method_signature(schema)  # type: ignore[attr-defined]
        self.__dict__[name] = method  # found without __getattr__ from now on
        return method

    def health(self, service: str = "") -> str:
        """grpc.health.v1 Check: "SERVING", "NOT_SERVING", "SERVICE_UNKNOWN" or "UNKNOWN". No
        token is sent (the server answers health without one)."""
        try:
            status = self._health(service, timeout=self._timeout)
        except grpc.RpcError as error:
            raise from_rpc_error(error, self._target, self._timeout) from None
        return health_name(status)

    def info(self) -> ServerInfo:
        """The server's version, devices, cache tiers, policy and limits."""
        return server_info_of(self._call(self._stub.GetServerInfo,
                                              pb.GetServerInfoRequest()))

    def autotune(self, kernel: str, inputs: Inputs, params: Optional[Params] = None, *,
                 platform: str = "", device: Optional[int] = None,
                 persist: Optional[bool] = None, timeout: Optional[float] = None,
                 time_budget: Optional[float] = None,
                 progress: Optional[Callable[[results.TuneProgress], Any]] = None
                 ) -> results.TuneResult:
        """Times every candidate config of `kernel` for these inputs and stores the winner
        (memory, and the server's store unless persist=False). inputs: name -> array, or
        name -> TensorSpec for shapes only (the server then makes up random inputs).
        time_budget: seconds the tuning may take (None = the server's --autotune-budget, also
        the most it gives): once spent no candidate is started, and the result is the best so
        far (result.budget_reached; kept in the server's memory only, never its store);
        DEADLINE_EXCEEDED when it ends before any candidate is timed, INVALID_ARGUMENT when
        negative. progress: called on this thread with a TuneProgress as candidates are timed
        (the call then goes over AutotuneStream); an exception it raises cancels the call and
        propagates."""
        request = calls.autotune_request(kernel, inputs, params, platform, device, persist,
                                         time_budget)
        if progress is None:
            return results.tune_result_of(self._call(self._stub.Autotune, request, timeout))
        timeout = calls.call_timeout(timeout, self._timeout)
        response = None
        stream = self._stub.AutotuneStream(request, timeout=timeout, metadata=self._metadata)
        try:
            for message in stream:
                if message.HasField("result"):
                    response = message.result
                else:
                    try:
                        progress(results.tune_progress_of(message))
                    except BaseException:
                        stream.cancel()  # the tuning stops on the server too
                        raise
        except grpc.RpcError as error:
            if error.code() == grpc.StatusCode.UNIMPLEMENTED and response is None:
                # A server from before AutotuneStream: no progress.
                return results.tune_result_of(self._call(self._stub.Autotune, request, timeout))
            raise from_rpc_error(error, self._target, timeout) from None
        if response is None:
            raise KernelserveError(grpc.StatusCode.INTERNAL,
                                   "AutotuneStream ended without its result")
        return results.tune_result_of(response)

    def list_configs(self, kernel: str = "") -> list[results.ConfigEntry]:
        """The server's cached configs (memory tier, then its store) whose key starts with
        `kernel` ("" = all)."""
        response = self._call(self._stub.ListConfigs, pb.ListConfigsRequest(kernel=kernel))
        return [results.entry_of(entry) for entry in response.entries]

    def put_config(self, kernel: str, inputs: Inputs, config: Config,
                   params: Optional[Params] = None, *, platform: str = "",
                   device: Optional[int] = None) -> tuple[str, str]:
        """Pins `config` (dict of KernelConfig fields) for the key of this call (inputs may be
        TensorSpecs). Returns (cache_key, device_fingerprint). INVALID_ARGUMENT when the config
        does not run on these inputs."""
        request = calls.put_config_request(kernel, inputs, config, params, platform, device)
        response = self._call(self._stub.PutConfig, request)
        return response.cache_key, response.device_fingerprint

    def delete_config(self, cache_key: str, device_fingerprint: str = "") -> None:
        """Removes `cache_key` from the server's memory and store (device_fingerprint "" = the
        server's default device). NOT_FOUND when neither held it."""
        self._call(self._stub.DeleteConfig,
                   pb.DeleteConfigRequest(cache_key=cache_key,
                                          device_fingerprint=device_fingerprint))

    def register_system_shm(self, name: str, byte_size: int, *,
                            timeout: Optional[float] = None) -> shm.SystemSharedMemory:
        """Creates a POSIX shared-memory object of `byte_size` bytes (its key "/" + a fresh
        name) and registers it with the server as region `name`; the server must run on this
        host. Returns the region: region.ndarray(shape, dtype, offset) and region.put(array,
        offset) give views into it, which execute and execute_stream send as references
        (inputs) or have the server write (outputs=); region.close() (or a with block)
        unregisters it and removes the object. The region belongs to this client's identity
        (its token): calls name it only with that identity. Codes: INVALID_ARGUMENT for a name
        that is not 1 to 128 printable ASCII characters without spaces, ALREADY_EXISTS for a
        name the identity has taken, RESOURCE_EXHAUSTED past the server's caps on regions and
        their bytes (--max-shared-memory-bytes and the others), UNIMPLEMENTED where
        the server serves no shared memory (--shared-memory=off, or a listener that is not
        loopback or unix), NOT_FOUND from a server on another host (it cannot see the
        object); the object is removed then."""
        if byte_size <= 0:
            raise ArgumentError(f"register_system_shm: byte_size must be positive, got "
                                f"{byte_size}")
        region = shm.SystemSharedMemory(name, byte_size)
        request = pb.RegisterSystemSharedMemoryRequest(name=name, key=region.key,
                                                       byte_size=byte_size)
        try:
            self._call(self._stub.RegisterSystemSharedMemory, request, timeout)
        except BaseException:
            region.close()  # not registered: only unlinks
            raise
        region._unregister = self._unregister_region
        self._regions.add(region)
        return region

    def register_cuda_shm(self, name: str, tensor: Any, *, device: Optional[int] = None,
                          timeout: Optional[float] = None) -> shm.CudaSharedMemory:
        """Registers the GPU allocation holding `tensor` (a torch tensor on a GPU, a CuPy or
        Numba array, anything with __cuda_array_interface__ or DLPack on a CUDA device) with
        the server as CUDA region `name`: its IPC handle (cuIpcGetMemHandle through libcuda.so.1,
        see kernelserve.cuda) and the whole allocation's size. The server must run on this host.
        device: the GPU as the server numbers them; by default this process's ordinal of it,
        which is the server's only when both see the same GPUs (CUDA_VISIBLE_DEVICES). Returns
        the region: CUDA tensors in the allocation go as references (inputs; the server reads
        them on that GPU) and as outputs= the server writes in place (the result's output is
        then the tensor given); region.ref(tensor) gives the RegionTensor. region.close() (or a
        with block) unregisters it and frees nothing; the caller synchronizes its own writes
        before a call. ArgumentError for an object that is no C-contiguous CUDA tensor or
        memory the driver cannot export; FAILED_PRECONDITION without a CUDA driver; the
        server's codes otherwise: UNIMPLEMENTED where it serves no CUDA shared memory (no GPU,
        --shared-memory=off, a listener that is not loopback or unix), INVALID_ARGUMENT for a
        handle that does not open there or a GPU it lacks, ALREADY_EXISTS, RESOURCE_EXHAUSTED
        as for system regions."""
        region = shm.CudaSharedMemory(name, tensor, device)
        request = pb.RegisterCudaSharedMemoryRequest(name=name, raw_handle=region.handle,
                                                     device=region.device,
                                                     byte_size=region.byte_size)
        self._call(self._stub.RegisterCudaSharedMemory, request, timeout)
        region._unregister = self._unregister_region
        self._regions.add(region)
        return region

    def _unregister_region(self, name: str) -> None:
        self._call(self._stub.UnregisterSharedMemory,
                   pb.UnregisterSharedMemoryRequest(name=name))

    def unregister_shm(self, name: str = "") -> None:
        """Unregisters the shared-memory region `name` ("" = every region of this client's
        identity, this client's or another's with the same token); NOT_FOUND for a name the
        identity does not have. A call holding it keeps it mapped until it ends. This client's
        region of that name stays here (its views go as data from now on) until closed."""
        self._unregister_region(name)
        self._regions.forget(name)

    def shm_status(self, name: str = "") -> list[results.RegionStatus]:
        """The shared-memory regions this client's identity registered ("" = all; NOT_FOUND for
        a name it does not have), with their owner, whether pinned and the calls holding
        each."""
        response = self._call(self._stub.SharedMemoryStatus,
                              pb.SharedMemoryStatusRequest(name=name))
        return [results.region_status_of(region) for region in response.regions]

    def create_tensor(self, array: Optional[npt.ArrayLike] = None, *, name: str,
                      dtype: Optional[npt.DTypeLike] = None,
                      shape: Optional[tuple[int, ...]] = None, device: Optional[int] = None,
                      ttl: Optional[float] = None, timeout: Optional[float] = None
                      ) -> resident.ResidentTensor:
        """Creates the resident tensor `name` (1 to 128 printable ASCII characters, no space)
        of this client's identity: `array`'s dtype, shape and bytes (dtype given: the array
        converted to it; a view into a shared-memory region of this client goes as a
        reference), or with array None zeros of `shape` and `dtype` (float32). device: a GPU,
        or -1 for host memory (None: the server places it). ttl: idle seconds before it
        expires (None: the server's default; more than its maximum is cut to it). Returns the
        ResidentTensor (an input or output place of execute; `with` deletes it at the end).
        Idempotent: a tensor of that name with the same dtype, shape and device is left as it
        is, contents too (`.created` False); with another, ALREADY_EXISTS. The server's
        INVALID_ARGUMENT for a bad name, shape or device, RESOURCE_EXHAUSTED past its limits
        (--max-resident-bytes, --quota-resident-bytes)."""
        request = resident.create_request(name, array, dtype, shape, device, ttl, self._regions)
        try:
            response = self._call(self._stub.CreateTensor, request, timeout)
        except KernelserveError as error:
            if not self._too_big(error, request.contents):
                raise
            response = self._create_in_pieces(request, timeout)
        return resident.ResidentTensor(self, resident.info_of(response.tensor), response.created)

    def _piece_bytes(self) -> int:
        """The most tensor bytes a message carries (resident.piece_bytes), asking the server
        its limit once."""
        if self._server_max_message_bytes is None:
            try:
                self._server_max_message_bytes = self.info().max_message_bytes
            except KernelserveError:
                self._server_max_message_bytes = 0
        return resident.piece_bytes(self._max_message_bytes, self._server_max_message_bytes)

    def _too_big(self, error: KernelserveError, contents: pb.Tensor) -> bool:
        """Whether a create or write failed because its inline contents pass a message."""
        return (error.code == grpc.StatusCode.RESOURCE_EXHAUSTED and
                len(contents.data) > self._piece_bytes())

    def _create_in_pieces(self, request: pb.CreateTensorRequest, timeout: Optional[float]
                          ) -> pb.CreateTensorResponse:
        """Creates the tensor as zeros, then writes its contents in pieces (deleting it again
        when a piece fails); one that was there is left as it is."""
        write = pb.WriteTensorRequest(name=request.name, contents=request.contents)
        request.ClearField("contents")
        response = self._call(self._stub.CreateTensor, request, timeout)
        if not response.created:
            return response
        try:
            for piece in resident.write_pieces(write, 0, self._piece_bytes()):
                response.tensor.CopyFrom(self._call(self._stub.WriteTensor, piece, timeout).tensor)
        except BaseException:
            try:
                self.delete_tensor(request.name)  # not left half written
            except KernelserveError:
                pass
            raise
        return response

    def get_tensor(self, name: str) -> resident.ResidentTensor:
        """The ResidentTensor of the existing tensor `name` of this client's identity (made by
        another client or the CLI, say); NOT_FOUND when there is none."""
        for info in self.list_tensors(name):
            if info.name == name:
                return resident.ResidentTensor(self, info, created=False)
        raise resident.not_found(name)

    def write_tensor(self, name: str, array: npt.ArrayLike, *, row: int = 0,
                     byte_offset: Optional[int] = None, timeout: Optional[float] = None
                     ) -> resident.ResidentTensorInfo:
        """Writes `array` into the resident tensor `name`: rows [row, row + len(array)) of
        dimension 0 (array is [rows, shape[1:]...]), or with byte_offset its bytes from that
        byte on whatever the shape. Calls on the tensor wait meanwhile. Returns the tensor as
        it is then. NOT_FOUND for an unknown name; INVALID_ARGUMENT for another dtype or a
        write past its end. Bytes larger than a message (the client's or the server's largest)
        go in pieces, checked whole first (an ArgumentError then), calls possibly running
        between two of them; create_tensor and read_tensor do the same."""
        request = resident.write_request(name, array, row, byte_offset, self._regions)
        try:
            return resident.info_of(self._call(self._stub.WriteTensor, request, timeout).tensor)
        except KernelserveError as error:
            if not self._too_big(error, request.contents):
                raise
        start = resident.write_start(self.get_tensor(name)._info, request)
        for piece in resident.write_pieces(request, start, self._piece_bytes()):
            answer = self._call(self._stub.WriteTensor, piece, timeout).tensor
        return resident.info_of(answer)

    def read_tensor(self, name: str, rows: resident.Rows = None, *,
                    timeout: Optional[float] = None) -> np.ndarray:
        """Rows `rows` of dimension 0 of the resident tensor `name` (slice(start, stop) or
        (start, stop), stop None = to the last row; None = all) as a read-only array.
        NOT_FOUND for an unknown name; INVALID_ARGUMENT for rows past its end."""
        request = resident.read_request(name, rows)
        try:
            return tensors.from_proto(self._call(self._stub.ReadTensor, request, timeout).tensor)
        except KernelserveError as error:
            if error.code != grpc.StatusCode.RESOURCE_EXHAUSTED:
                raise
            pieces = resident.read_pieces(self.get_tensor(name)._info, request,
                                          self._piece_bytes())
            if pieces is None:
                raise
        return np.concatenate([tensors.from_proto(self._call(self._stub.ReadTensor, piece,
                                                             timeout).tensor)
                               for piece in pieces])

    def delete_tensor(self, name: str, *, owner: str = "", timeout: Optional[float] = None
                      ) -> int:
        """Deletes the resident tensor `name` ("" = every one not in use) of `owner` ("" =
        this client's identity; another identity or "*" for every one: admins only,
        PERMISSION_DENIED otherwise). Returns how many went. NOT_FOUND for an unknown name;
        FAILED_PRECONDITION, naming its calls, for a tensor a call holds."""
        request = pb.DeleteTensorRequest(name=name, owner=owner)
        return int(self._call(self._stub.DeleteTensor, request, timeout).deleted)

    def list_tensors(self, name: str = "", *, owner: str = "",
                     timeout: Optional[float] = None) -> resident.ResidentTensors:
        """The resident tensors `name` ("" = all) of `owner` (as delete_tensor): iterate over
        the answer for each ResidentTensorInfo; it also says when the server started (a restart
        loses them) and the bytes held against its limits."""
        request = pb.ListTensorsRequest(name=name, owner=owner)
        return resident.list_of(self._call(self._stub.ListTensors, request, timeout))
