"""Cases 16-28: the surfaces of issue 32 (shared memory, connections, streams, batches, configs,
identities and their quotas). Each was a way to kill, hang or bloat the server; each states what
is expected now that it is fixed.

Shared-memory objects are made here as files of /dev/shm (what shm_open("/NAME") opens) and
written and shrunk through their descriptor, never mapped: a shrunk object would fault this
process too.
"""

import collections
import itertools
import os
import re
import resource
import secrets
import socket
import threading
import time
import urllib.error
import urllib.request

import grpc
import numpy as np

from abuse.harness import (CODE_NAMES, MIB, SMALL, SMALL_X, autotune, case, channel,
                           inference_messages, join_all, mb, mean_pooling, metric, output, pb,
                           run_threads, scrape, stream, tensor, unary, uniform)
from abuse.known import check_middle_item, with_id

V2 = "/inference.GRPCInferenceService/"
LARGE_CHANNEL = [("grpc.max_send_message_length", -1), ("grpc.max_receive_message_length", -1)]
CAP_256 = "--max-inflight-bytes=268435456"  # a cap small enough for the RSS bound to mean much
SMALL_MEAN = SMALL_X.mean(axis=1)
# The longest error message: server/status.h keeps messages within 1 KiB, the mark of a cut
# included.
MAX_MESSAGE = 1024


# ---------------------------------------------------------------------------------------------
# Helpers


def bearer(token):
    return [("authorization", f"Bearer {token}")]


def printable(text):
    return all(" " <= c <= "~" for c in text)


def token_server(roles, *flags):
    """A Case.prepare: writes a token file (an identity per entry of `roles`, {identity: role},
    each with a random token) into the run's folder. The server gets --auth-token-file and
    `flags`; its checks go as the first admin. The tokens are in TOKENS[identity] once the
    server starts."""
    def prepare(workdir):
        path = os.path.join(workdir, f"tokens-{secrets.token_hex(4)}")
        with open(path, "w") as f:
            f.write("# identity role token\n")
            for identity, role in roles.items():
                TOKENS[identity] = secrets.token_hex(16)
                f.write(f"{identity} {role} {TOKENS[identity]}\n")
        admin = next(i for i, role in roles.items() if role == "admin")
        return [f"--auth-token-file={path}", *flags], bearer(TOKENS[admin])
    return prepare


TOKENS = {}


def as_(identity):
    """The metadata of a call made as `identity` of the token file."""
    return bearer(TOKENS[identity])


class ShmObject:
    """A POSIX shared-memory object of the case's, written through its descriptor; close()
    unlinks it."""

    _count = itertools.count()

    def __init__(self, size):
        name = f"ks-abuse-{os.getpid()}-{next(ShmObject._count)}"
        self.key, self.path = "/" + name, "/dev/shm/" + name
        self.fd = os.open(self.path, os.O_CREAT | os.O_EXCL | os.O_RDWR, 0o600)
        self.resize(size)

    def resize(self, size):
        os.ftruncate(self.fd, size)
        self.size = size

    def write(self, offset, data):
        os.pwrite(self.fd, data, offset)

    def read(self, offset, size):
        return os.pread(self.fd, size, offset)

    def close(self):
        os.close(self.fd)
        try:
            os.unlink(self.path)
        except OSError:
            pass


def register(ctx, ch, name, key, offset, byte_size, metadata=None, timeout=5.0):
    """RegisterSystemSharedMemory; an OK one is counted in ctx.registered."""
    request = pb.RegisterSystemSharedMemoryRequest(name=name, key=key, offset=offset,
                                                   byte_size=byte_size)
    outcome = ctx.call(unary(ch, "RegisterSystemSharedMemory"), request.SerializeToString(),
                       timeout, metadata)
    if outcome.code == "OK":
        ctx.registered(byte_size)
    return outcome


def unregister(ctx, ch, name, byte_size, metadata=None, owner=""):
    """UnregisterSharedMemory of `name` ("" = all of the caller's) holding `byte_size` bytes."""
    request = pb.UnregisterSharedMemoryRequest(name=name, owner=owner)
    outcome = ctx.call(unary(ch, "UnregisterSharedMemory"), request.SerializeToString(), 5.0,
                       metadata)
    if outcome.code == "OK":
        ctx.registered(-byte_size)
    return outcome


def shm_status(ctx, ch, metadata=None, owner=""):
    """SharedMemoryStatus: (outcome, the regions listed or None)."""
    request = pb.SharedMemoryStatusRequest(owner=owner).SerializeToString()
    outcome = ctx.call(unary(ch, "SharedMemoryStatus"), request, 5.0, metadata)
    regions = (None if outcome.code != "OK" else
               list(pb.SharedMemoryStatusResponse.FromString(outcome.response).regions))
    return outcome, regions


def set_ref(t, shape, region, offset, dtype=pb.DTYPE_F32):
    """Makes the pb.Tensor `t` a reference to f32 `shape` at `offset` of `region`."""
    t.Clear()
    t.dtype = dtype
    t.shape[:] = shape
    t.ref.region, t.ref.offset = region, offset
    t.ref.byte_size = int(np.prod(shape)) * 4


def pooling_ref(region, offset, shape, out=None):
    """An ExecuteRequest of mean_pooling whose x is in `region`; `out`: (region, offset,
    byte_size) for the output."""
    request = pb.ExecuteRequest(kernel="mean_pooling")
    set_ref(request.inputs["x"], shape, region, offset)
    request.mean_pooling.SetInParent()
    if out is not None:
        place = request.output_regions["out"]
        place.region, place.offset, place.byte_size = out
    return request.SerializeToString()


def expect(ctx, label, outcome, codes, contains=None):
    """Fails the case unless `outcome` has one of `codes` (a str or a tuple) and, for an error,
    a printable message of at most MAX_MESSAGE bytes holding `contains`. Notes the outcome."""
    codes = (codes,) if isinstance(codes, str) else codes
    ctx.note(f"{label}: {outcome.code} in {outcome.seconds:.2f} s {outcome.details[:100]!r}")
    if outcome.code not in codes:
        ctx.fail(f"{label}: {outcome.code} {outcome.details[:80]!r} (want {' or '.join(codes)})")
        return False
    if outcome.code != "OK":
        if not outcome.details or len(outcome.details.encode()) > MAX_MESSAGE:
            ctx.fail(f"{label}: a message of {len(outcome.details.encode())} bytes")
        elif not printable(outcome.details):
            ctx.fail(f"{label}: a message with bytes that are not printable")
        elif contains and contains not in outcome.details:
            ctx.fail(f"{label}: the message does not say {contains!r}: "
                     f"{outcome.details[:100]!r}")
    return True


def bwd_request(x_shape, request_id=""):
    """An ExecuteRequest of mean_pooling_bwd: dout [B,H] with data, x by shape alone (an
    answer of prod(x_shape) floats from a few KiB)."""
    request = pb.ExecuteRequest(kernel="mean_pooling_bwd", request_id=request_id)
    tensor(request.inputs["dout"], np.ones((x_shape[0], x_shape[-1]), np.float32))
    tensor(request.inputs["x"], shape=x_shape)
    return request


# KServe v2


def v2_pooling(x=None, *, shape=None, region=None, offset=0, timeout=None, request_id=""):
    """A ModelInferRequest of mean_pooling: x as raw bytes, or (shape, region, offset) in a
    registered region; `timeout` (an InferParameter's fields) when given."""
    inference = inference_messages()
    request = inference.ModelInferRequest(model_name="mean_pooling", id=request_id)
    shape = list(x.shape) if x is not None else list(shape)
    entry = request.inputs.add(name="x", datatype="FP32", shape=shape)
    if region is None:
        request.raw_input_contents.append(np.ascontiguousarray(x, np.float32).tobytes())
    else:
        entry.parameters["shared_memory_region"].string_param = region
        entry.parameters["shared_memory_offset"].int64_param = offset
        entry.parameters["shared_memory_byte_size"].int64_param = int(np.prod(shape)) * 4
    for field, value in (timeout or {}).items():
        setattr(request.parameters["timeout"], field, value)
    return request.SerializeToString()


def v2_register(ctx, ch, name, key, offset, byte_size, metadata=None):
    request = inference_messages().SystemSharedMemoryRegisterRequest(
        name=name, key=key, offset=offset, byte_size=byte_size)
    outcome = ctx.call(ch.unary_unary(V2 + "SystemSharedMemoryRegister"),
                       request.SerializeToString(), 5.0, metadata)
    if outcome.code == "OK":
        ctx.registered(byte_size)
    return outcome


def v2_unregister(ctx, ch, name, byte_size, metadata=None):
    request = inference_messages().SystemSharedMemoryUnregisterRequest(name=name)
    outcome = ctx.call(ch.unary_unary(V2 + "SystemSharedMemoryUnregister"),
                       request.SerializeToString(), 5.0, metadata)
    if outcome.code == "OK":
        ctx.registered(-byte_size)
    return outcome


def v2_infer(ctx, ch, request, timeout=10.0, metadata=None):
    return ctx.call(ch.unary_unary(V2 + "ModelInfer"), request, timeout, metadata)


def v2_output(response_bytes):
    """The first output of a serialized ModelInferResponse, as float32 of its shape."""
    response = inference_messages().ModelInferResponse.FromString(response_bytes)
    data = np.frombuffer(response.raw_output_contents[0], np.float32)
    return data.reshape(tuple(response.outputs[0].shape))


# Server processes


def open_fds(pid):
    try:
        return len(os.listdir(f"/proc/{pid}/fd"))
    except OSError:
        return None


def map_count(pid):
    try:
        with open(f"/proc/{pid}/maps") as f:
            return sum(1 for _ in f)
    except OSError:
        return None


def step_peak_note(ctx, label, start_kib):
    """Notes the RSS peak of the step begun at ctx.server.rss.start_step(); returns it in
    KiB above `start_kib`."""
    peak = ctx.server.rss.step_peak()
    ctx.note(f"{label}: peak RSS {mb(peak):.0f} MB ({mb(peak - start_kib):+.0f} MB)")
    return peak - start_kib


# ---------------------------------------------------------------------------------------------
# 16-17: objects shrunk under their regions


@case("shm-shrink", 90, 60, server_args=(CAP_256,))
def shm_shrink(ctx):
    """A 1 MiB object registered as region 'r' (kernelserve.v1) and 'v2r' (KServe v2), then
    shrunk to 16 KiB with ftruncate: a ref into the lost part, an output_regions entry there,
    such a ref as the middle item of an ExecuteStream and a v2 input there all get
    INVALID_ARGUMENT naming the object's size now ("16384 bytes now"; in-band on the stream,
    which ends OK); a ref into the part still there is OK with the right answer, before and
    after; shrunk to 0, that one is INVALID_ARGUMENT too. Before: the server died of SIGBUS."""
    x = uniform(np.random.default_rng(16), (2, 8, 16))
    obj = ShmObject(MIB)
    try:
        for offset in (0, 40 << 10):
            obj.write(offset, x.tobytes())
        with channel(ctx.server.target) as ch:
            execute = unary(ch, "Execute")
            expect(ctx, "register r", register(ctx, ch, "r", obj.key, 0, MIB), "OK")
            expect(ctx, "v2 register v2r", v2_register(ctx, ch, "v2r", obj.key, 0, MIB), "OK")
            kept = pooling_ref("r", 0, x.shape)
            lost = pooling_ref("r", 40 << 10, x.shape)
            outcome = ctx.call(execute, kept, 5.0)
            if expect(ctx, "a ref into the object", outcome, "OK") and not np.allclose(
                    output(outcome.response), x.mean(axis=1), rtol=1e-5, atol=1e-6):
                ctx.fail("a ref into the object: a wrong answer")
            obj.resize(16 << 10)
            ctx.note("object shrunk to 16384 bytes")
            steps = [
                ("a ref into the lost part", lost, "16384 bytes now"),
                ("output_regions into the lost part",
                 pooling_ref("r", 0, x.shape, out=("r", 48 << 10, 4096)), "output 'out'"),
            ]
            for label, request, says in steps:
                expect(ctx, label, ctx.call(execute, request, 5.0), "INVALID_ARGUMENT", says)
                ctx.healthy(f"after {label}")
            ids = ["kept-0", "lost-1", "kept-2"]
            code, answers = stream_items(ctx, [with_id(kept, ids[0]), with_id(lost, ids[1]),
                                               with_id(kept, ids[2])])
            check_middle_item(ctx, "stream [kept, lost, kept]", code, answers, ids)
            ctx.healthy("after the stream")
            outcome = v2_infer(ctx, ch, v2_pooling(shape=x.shape, region="v2r",
                                                   offset=40 << 10))
            expect(ctx, "v2 input in the lost part", outcome, "INVALID_ARGUMENT",
                   "16384 bytes now")
            ctx.healthy("after the v2 input")
            outcome = ctx.call(execute, kept, 5.0)
            if expect(ctx, "the part still there, after", outcome, "OK") and not np.allclose(
                    output(outcome.response), x.mean(axis=1), rtol=1e-5, atol=1e-6):
                ctx.fail("the part still there: a wrong answer")
            obj.resize(0)
            expect(ctx, "a ref into an object shrunk to 0", ctx.call(execute, kept, 5.0),
                   "INVALID_ARGUMENT", "0 bytes now")
            ctx.healthy("after the object shrunk to 0")
            expect(ctx, "unregister r", unregister(ctx, ch, "r", MIB), "OK")
            expect(ctx, "v2 unregister v2r", v2_unregister(ctx, ch, "v2r", MIB), "OK")
    finally:
        obj.close()


def stream_items(ctx, requests, timeout=10.0):
    """Sends `requests` on one ExecuteStream; (stream code, answers)."""
    answers = []
    with channel(ctx.server.target) as ch:
        code = "OK"
        try:
            for raw in stream(ch)(iter(requests), timeout=timeout):
                answers.append(pb.ExecuteResponse.FromString(raw))
        except grpc.RpcError as error:
            code = error.code().name
    ctx.tally(f"stream:{code}")
    for answer in answers:
        ctx.tally_inband(CODE_NAMES.get(answer.status.code, str(answer.status.code)))
    return code, answers


def attention_in_region(region, shape, out_offset=None):
    """flash_attention with q, k, v at 0, 1 and 2 x their size in `region`; its output there
    at `out_offset` when given."""
    request = pb.ExecuteRequest(kernel="flash_attention")
    size = int(np.prod(shape)) * 4
    for i, name in enumerate("qkv"):
        set_ref(request.inputs[name], shape, region, i * size)
    request.flash_attention.SetInParent()
    if out_offset is not None:
        place = request.output_regions["out"]
        place.region, place.offset, place.byte_size = region, out_offset, size
    return request.SerializeToString()


@case("shm-shrink-race", 180, 90, server_args=(CAP_256,))
def shm_shrink_race(ctx):
    """flash_attention reading q, k, v [1,1024,4,64] from a region (its output inline, or in the
    region every other round), the object shrunk to 512 KiB while the call runs (at 15% to 85%
    of the call's time; 6 rounds, --quick 3). The call ends OK (the shrink came after its
    reads), DATA_LOSS naming the region (the fault the SIGBUS guard covered) or
    INVALID_ARGUMENT (the size check saw it); a later call into the region gets
    FAILED_PRECONDITION (damaged) or INVALID_ARGUMENT (too small); after unregister, restoring
    the object and registering it again, the call is OK with the answer of the first run.
    Before: SIGBUS killed the server."""
    shape = (1, 1024, 4, 64)
    size = int(np.prod(shape)) * 4
    rng = np.random.default_rng(17)
    data = b"".join(uniform(rng, shape).tobytes() for _ in range(3))
    obj = ShmObject(4 * size)
    outcomes = collections.Counter()
    try:
        obj.write(0, data)
        with channel(ctx.server.target) as ch:
            execute = unary(ch, "Execute")
            expect(ctx, "register", register(ctx, ch, "race-0", obj.key, 0, 4 * size), "OK")
            first = ctx.call(execute, attention_in_region("race-0", shape), 30.0)
            if not expect(ctx, "the call on the whole object", first, "OK"):
                return
            reference = output(first.response)
            seconds = first.seconds
            expect(ctx, "unregister", unregister(ctx, ch, "race-0", 4 * size), "OK")
            fractions = ctx.dur([0.15, 0.3, 0.5, 0.7, 0.85, 0.4], [0.3, 0.5, 0.7])
            for i, fraction in enumerate(fractions, start=1):
                if ctx.stop.is_set():
                    break
                name = f"race-{i}"
                obj.resize(4 * size)
                obj.write(0, data)
                expect(ctx, f"round {i}: register", register(ctx, ch, name, obj.key, 0, 4 * size),
                       "OK")
                request = attention_in_region(name, shape, 3 * size if i % 2 else None)
                future = execute.future(request, timeout=30.0)
                time.sleep(seconds * fraction)
                obj.resize(512 << 10)
                try:
                    future.result()
                    outcome_code, details = "OK", ""
                except grpc.RpcError as error:
                    outcome_code, details = error.code().name, error.details() or ""
                ctx.tally(outcome_code)
                outcomes[outcome_code] += 1
                ctx.note(f"round {i}: shrunk at {fraction:.0%} of the call: {outcome_code} "
                         f"{details[:90]!r}")
                if outcome_code not in ("OK", "DATA_LOSS", "INVALID_ARGUMENT"):
                    ctx.fail(f"round {i}: the call got {outcome_code} {details[:60]!r} (want OK, "
                             "DATA_LOSS or INVALID_ARGUMENT)")
                elif outcome_code == "DATA_LOSS" and name not in details:
                    ctx.fail(f"round {i}: DATA_LOSS without the region's name: {details[:80]!r}")
                if not ctx.healthy(f"round {i}: after the shrink"):
                    return
                later = ctx.call(execute, attention_in_region(name, shape), 30.0)
                expect(ctx, f"round {i}: a later call", later,
                       ("FAILED_PRECONDITION", "INVALID_ARGUMENT"), name)
                expect(ctx, f"round {i}: unregister", unregister(ctx, ch, name, 4 * size), "OK")
                obj.resize(4 * size)
                obj.write(0, data)
                expect(ctx, f"round {i}: register again",
                       register(ctx, ch, name, obj.key, 0, 4 * size), "OK")
                again = ctx.call(execute, attention_in_region(name, shape), 30.0)
                if expect(ctx, f"round {i}: the call again", again, "OK") and not np.allclose(
                        output(again.response), reference, rtol=1e-5, atol=1e-6):
                    ctx.fail(f"round {i}: the region registered again gives another answer")
                unregister(ctx, ch, name, 4 * size)
    finally:
        obj.close()
    ctx.data["outcomes"] = dict(outcomes)
    ctx.note(f"the shrunk calls: {dict(outcomes)} (the call took {seconds:.2f} s unshrunk)")
    if not outcomes.get("DATA_LOSS"):
        ctx.note("no shrink fell inside a call's reads this time (DATA_LOSS not seen)")


# ---------------------------------------------------------------------------------------------
# 18-19: floods of regions and of names


REGION_FLOOD_IDENTITIES = {"ops": "admin", "a": "caller", "b": "caller", "c": "caller",
                           "d": "caller", "e": "caller"}


def flood(ctx, ch, identity, key, count, prefix):
    """`count` registrations of 1 byte of `key` as `identity`, names prefix-0.... Returns the
    Counter of codes and the first message of each error code."""
    codes, messages = collections.Counter(), {}
    for i in range(count):
        if ctx.stop.is_set():
            break
        outcome = register(ctx, ch, f"{prefix}-{i}", key, i % 4096, 1, as_(identity))
        codes[outcome.code] += 1
        if outcome.code != "OK":
            messages.setdefault(outcome.code, outcome.details)
    return codes, messages


@case("shm-region-flood", 150, 120,
      prepare=token_server(REGION_FLOOD_IDENTITIES, CAP_256))
def shm_region_flood(ctx):
    """Five caller identities (a token file) each try 300 registrations of 1 byte of one 4 KiB
    object: a, b, c and d get 256 each (--quota-shared-memory-regions), then
    RESOURCE_EXHAUSTED naming that flag; e gets RESOURCE_EXHAUSTED naming
    --max-shared-memory-regions (1024 in all). The server's mappings and descriptors grow by
    at most the 1024 regions. Then: an Execute and a v2 ModelInfer into a's region are OK
    (before: 65,076 regions exhausted vm.max_map_count and the next Execute segfaulted),
    a's status lists its 256, ops's (admin, owner '*') 1024; b can neither use, list nor
    unregister a's regions (NOT_FOUND, PERMISSION_DENIED for owner 'a'); after each unregisters
    all, the mappings are back."""
    pid = ctx.server.process.pid
    obj = ShmObject(4096)
    x = np.asarray(np.arange(4, dtype=np.float32).reshape(1, 1, 4))
    obj.write(0, x.tobytes())
    maps0, fds0 = map_count(pid), open_fds(pid)
    try:
        with channel(ctx.server.target) as ch:
            expect(ctx, "a registers a-private",
                   register(ctx, ch, "a-private", obj.key, 0, 16, as_("a")), "OK")
            results = {}
            for identity in "abcde":
                count = 300 if identity != "a" else 299
                results[identity] = flood(ctx, ch, identity, obj.key, count, "f")
                ctx.note(f"{identity}: {dict(results[identity][0])}")
            quota, cap = "--quota-shared-memory-regions", "--max-shared-memory-regions"
            # d's 256th region is the 1024th: both caps are reached at once.
            want = {"a": (255, (quota,)), "b": (256, (quota,)), "c": (256, (quota,)),
                    "d": (256, (quota, cap)), "e": (0, (cap,))}
            for identity, (ok, flags) in want.items():
                codes, messages = results[identity]
                if codes["OK"] != ok or set(codes) - {"OK", "RESOURCE_EXHAUSTED"}:
                    ctx.fail(f"{identity}: {dict(codes)} (want {ok} OK, the rest "
                             "RESOURCE_EXHAUSTED)")
                message = messages.get("RESOURCE_EXHAUSTED", "")
                if not any(flag in message for flag in flags):
                    ctx.fail(f"{identity}: the refusal does not name {' or '.join(flags)}: "
                             f"{message[:100]!r}")
            maps1, fds1 = map_count(pid), open_fds(pid)
            ctx.data.update(maps=[maps0, maps1], fds=[fds0, fds1])
            ctx.note(f"mappings {maps0} -> {maps1}, descriptors {fds0} -> {fds1} with 1024 "
                     "regions registered")
            if maps1 - maps0 > 1024 + 64 or fds1 - fds0 > 1024 + 64:
                ctx.fail(f"mappings {maps0} -> {maps1}, descriptors {fds0} -> {fds1} for 1024 "
                         "regions")
            ctx.healthy("after the flood")

            region_call = pooling_ref("a-private", 0, x.shape)
            outcome = ctx.call(unary(ch, "Execute"), region_call, 5.0, as_("a"))
            if expect(ctx, "a: Execute into its region", outcome, "OK") and not np.allclose(
                    output(outcome.response), x.mean(axis=1)):
                ctx.fail("a: Execute into its region: a wrong answer")
            outcome = v2_infer(ctx, ch, v2_pooling(shape=x.shape, region="a-private"),
                               metadata=as_("a"))
            expect(ctx, "a: v2 ModelInfer into its region", outcome, "OK")
            outcome, regions = shm_status(ctx, ch, as_("a"))
            if regions is None or len(regions) != 256:
                ctx.fail(f"a's status: {outcome.code}, {None if regions is None else len(regions)}"
                         " regions (want 256)")
            outcome, regions = shm_status(ctx, ch, as_("ops"), owner="*")
            if regions is None or len(regions) != 1024:
                ctx.fail(f"ops's status of '*': {outcome.code}, "
                         f"{None if regions is None else len(regions)} regions (want 1024)")
            ctx.data["status_bytes"] = len(outcome.response or b"")

            expect(ctx, "b: Execute into a's region",
                   ctx.call(unary(ch, "Execute"), region_call, 5.0, as_("b")), "NOT_FOUND")
            expect(ctx, "b: unregister a's region", unregister(ctx, ch, "a-private", 0, as_("b")),
                   "NOT_FOUND")
            outcome, regions = shm_status(ctx, ch, as_("b"))
            if regions is None or any(r.name == "a-private" for r in regions):
                ctx.fail("b's status lists a's region (or failed)")
            expect(ctx, "b: status of owner a", shm_status(ctx, ch, as_("b"), owner="a")[0],
                   "PERMISSION_DENIED")

            for identity in "abcd":
                held = 16 + 255 if identity == "a" else 256
                expect(ctx, f"{identity}: unregister all",
                       unregister(ctx, ch, "", held, as_(identity)), "OK")
            outcome, regions = shm_status(ctx, ch, as_("ops"), owner="*")
            if regions != []:
                ctx.fail(f"after unregistering: {None if regions is None else len(regions)} "
                         "regions left")
    finally:
        obj.close()
    time.sleep(0.5)
    maps2, fds2 = map_count(pid), open_fds(pid)
    ctx.data.update(maps_after=maps2, fds_after=fds2)
    ctx.note(f"after unregistering: mappings {maps2}, descriptors {fds2}")
    if maps2 - maps0 > 64 or fds2 - fds0 > 64:
        ctx.fail(f"after unregistering: mappings {maps0} -> {maps2}, descriptors "
                 f"{fds0} -> {fds2}")


def bad_names_and_keys(key):
    """(label, name, key, where in the message) of registrations breaking the rules."""
    return [
        ("a 1 MiB name", "n" * MIB, key, "region name"),
        ("a 1 MiB key", "r", "/" + "k" * MIB, "key"),
        ("a NUL in the key", "r", key + "\0x", "expected a POSIX shared-memory name"),
        ("a relative key", "r", key[1:], "key"),
        ("a '/' in the key", "r", key + "/x", "key"),
        ("key '/..'", "r", "/..", "key"),
        ("a 300-byte key", "r", "/" + "k" * 299, "key"),
        ("a space in the name", "a b", key, "region name"),
        ("a 129-byte name", "n" * 129, key, "region name"),
        ("a NUL in the name", "r\0x", key, "region name"),
        ("a name of bytes past ASCII", "r\xe9", key, "region name"),
    ]


@case("shm-name-flood", 150, 60, server_args=(CAP_256,), rss_growth_mb=256)
def shm_name_flood(ctx):
    """Registrations whose name or key breaks the rules (1 MiB names and keys, NUL bytes, '/',
    '..', 129 bytes, spaces; kernelserve.v1 and KServe v2) are INVALID_ARGUMENT with a
    printable message under 1 KiB (the text escaped and cut); a 128-byte name is OK. Then
    1,100 (--quick 200) registrations with distinct 1 MiB names, 4 at a time: all
    INVALID_ARGUMENT, the RSS back within 64 MB of where it started, and both status calls
    answer OK in under 64 KiB. A ref naming a 1 MiB region is NOT_FOUND with a short
    message. Before: 1,100 such regions took 2.2 GB and the v2 status answer aborted the
    server."""
    obj = ShmObject(4096)
    start_kib = ctx.server.rss.now_kib()
    try:
        with channel(ctx.server.target) as ch:
            for label, name, key, says in bad_names_and_keys(obj.key):
                expect(ctx, label, register(ctx, ch, name, key, 0, 16), "INVALID_ARGUMENT", says)
                expect(ctx, f"v2: {label}", v2_register(ctx, ch, name, key, 0, 16),
                       "INVALID_ARGUMENT")
            expect(ctx, "a 128-byte name", register(ctx, ch, "n" * 128, obj.key, 0, 16), "OK")
            expect(ctx, "unregister it", unregister(ctx, ch, "n" * 128, 16), "OK")
            ref = pooling_ref("r" * MIB, 0, (1, 1, 4))
            expect(ctx, "a ref naming a 1 MiB region", ctx.call(unary(ch, "Execute"), ref, 5.0),
                   ("NOT_FOUND", "INVALID_ARGUMENT"))
            ctx.healthy("after the bad names and keys")

        count = ctx.dur(1100, 200)
        wrong = collections.Counter()

        def worker(i):
            with channel(ctx.server.target) as ch:
                for n in range(i, count, 4):
                    if ctx.stop.is_set():
                        return
                    name = f"{n:08d}".ljust(MIB, "n")
                    outcome = register(ctx, ch, name, obj.key, 0, 16)
                    if outcome.code != "INVALID_ARGUMENT":
                        wrong[outcome.code] += 1

        started = time.monotonic()
        join_all(run_threads(4, worker), ctx.dur(120.0, 50.0))
        ctx.note(f"{count} registrations with 1 MiB names in "
                 f"{time.monotonic() - started:.1f} s")
        if wrong:
            ctx.fail(f"registrations with 1 MiB names: {dict(wrong)} (want INVALID_ARGUMENT)")
        with channel(ctx.server.target) as ch:
            outcome, regions = shm_status(ctx, ch)
            size = len(outcome.response or b"")
            v2 = ctx.call(ch.unary_unary(V2 + "SystemSharedMemoryStatus"), b"", 5.0)
            v2_size = len(v2.response or b"")
        ctx.note(f"status answers: v1 {outcome.code} {size} bytes, v2 {v2.code} {v2_size} bytes")
        if outcome.code != "OK" or v2.code != "OK" or max(size, v2_size) >= 64 << 10:
            ctx.fail(f"status answers: v1 {outcome.code} {size} bytes, v2 {v2.code} "
                     f"{v2_size} bytes (want OK, < 64 KiB)")
        now = ctx.server.rss.now_kib()
        ctx.note(f"RSS {mb(start_kib):.0f} MB before, {mb(now):.0f} MB after the flood")
        if now is not None and now - start_kib > 64 * 1024:
            ctx.fail(f"RSS {mb(start_kib):.0f} MB before, {mb(now):.0f} MB after the flood")
    finally:
        obj.close()


# ---------------------------------------------------------------------------------------------
# 20: descriptors


def hold_connections(target_port, count, seconds):
    """Opens up to `count` TCP connections to the server (each within `seconds` in all).
    Returns the sockets and how many did not connect."""
    sockets, failed = [], 0
    deadline = time.monotonic() + seconds
    for _ in range(count):
        try:
            s = socket.create_connection(("127.0.0.1", target_port),
                                         timeout=max(0.05, min(1.0, deadline - time.monotonic())))
            sockets.append(s)
        except OSError:
            failed += 1
    return sockets, failed


def raise_own_file_limit(need):
    """Raises this process's soft RLIMIT_NOFILE to at least `need` (up to the hard limit)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < need:
        want = need if hard == resource.RLIM_INFINITY else min(need, hard)
        resource.setrlimit(resource.RLIMIT_NOFILE, (want, hard))
    return resource.getrlimit(resource.RLIMIT_NOFILE)[0]


def first_ok_after(ctx, seconds):
    """Seconds until a new channel's Execute is OK (each try with a 1 s deadline), or None."""
    start = time.monotonic()
    while time.monotonic() - start < seconds and not ctx.stop.is_set():
        with channel(ctx.server.target) as ch:
            if ctx.call(unary(ch, "Execute"), SMALL, 1.0).code == "OK":
                return time.monotonic() - start
        time.sleep(0.1)
    return None


@case("fd-exhaustion", 150, 90, launcher=("prlimit", "--nofile=1024:1024", "--"))
def fd_exhaustion(ctx):
    """A server started under RLIMIT_NOFILE 1024 (soft and hard: it cannot raise it). Rounds
    (3, --quick 2) of 1,100 TCP connections opened and held: while they are held, a new
    client's Execute is answered OK or fails at once (UNAVAILABLE within 2 s, never a
    timeout); once they are closed, a new client's Execute is OK within 5 s and the server's
    descriptors are back within 32 of where they were. Before: after 1,030 connections opened
    and closed, the listener never accepted again."""
    pid = ctx.server.process.pid
    raise_own_file_limit(4096)
    with open(ctx.server.log_path, errors="replace") as f:
        said = re.search(r"\bfds (\d+)", f.read(4096))
    fds = said.group(0) if said else "no fds in the startup line"
    ctx.note(f"the startup line says: {fds}")
    if fds != "fds 1024":
        ctx.fail(f"the server runs with {fds!r} (want fds 1024)")
    fds0 = open_fds(pid)
    for round_ in range(1, ctx.dur(3, 2) + 1):
        sockets, failed = hold_connections(ctx.server.port, 1100, 30.0)
        time.sleep(0.5)
        held_fds = open_fds(pid)
        with channel(ctx.server.target) as ch:
            during = ctx.call(unary(ch, "Execute"), SMALL, 2.0)
        ctx.note(f"round {round_}: {len(sockets)} connections held ({failed} did not connect); "
                 f"the server holds {held_fds} descriptors; a new client: {during.code} in "
                 f"{during.seconds:.2f} s")
        if during.code not in ("OK", "UNAVAILABLE"):
            ctx.fail(f"round {round_}: a new client while 1,100 connections are held: "
                     f"{during.code} after {during.seconds:.1f} s (want OK or UNAVAILABLE at "
                     "once)")
        for s in sockets:
            s.close()
        back = first_ok_after(ctx, 5.0)
        if back is None:
            ctx.fail(f"round {round_}: no new client served within 5 s of the close")
        else:
            ctx.note(f"round {round_}: a new client served {back:.2f} s after the close")
        if not ctx.healthy(f"round {round_}: after the close"):
            pid, fds0 = ctx.server.process.pid, open_fds(ctx.server.process.pid)
            continue
        deadline, fds = time.monotonic() + 10.0, open_fds(pid)
        while fds is not None and fds - fds0 > 32 and time.monotonic() < deadline:
            time.sleep(0.2)
            fds = open_fds(pid)
        ctx.data.setdefault("fds", []).append([fds0, held_fds, fds])
        if fds is None or fds - fds0 > 32:
            ctx.fail(f"round {round_}: the server holds {fds} descriptors 10 s after the close "
                     f"({fds0} before)")


# ---------------------------------------------------------------------------------------------
# 21-23: streams whose client does not read


def stuck_requests(count, x_shape, v2):
    """`count` requests of mean_pooling_bwd (an answer of prod(x_shape) floats each), native or
    KServe v2."""
    if not v2:
        return [bwd_request(x_shape, f"r{i}").SerializeToString() for i in range(count)]
    inference = inference_messages()
    out = []
    for i in range(count):
        request = inference.ModelInferRequest(model_name="mean_pooling_bwd", id=f"r{i}")
        dout = request.inputs.add(name="dout", datatype="FP32", shape=[x_shape[0], x_shape[-1]])
        dout.contents.fp32_contents.extend([1.0] * (x_shape[0] * x_shape[-1]))
        request.inputs.add(name="x", datatype="FP32", shape=list(x_shape))
        request.raw_input_contents.append(b"")
        out.append(request.SerializeToString())
    return out


class StuckStream:
    """A stream that sends `requests` and reads nothing until read_all() or cancel()."""

    def __init__(self, target, requests, v2, timeout):
        self.ch = grpc.insecure_channel(target, LARGE_CHANNEL)
        method = V2 + "ModelStreamInfer" if v2 else "/kernelserve.v1.KernelService/ExecuteStream"
        self.sent = 0

        def generate():
            for request in requests:
                yield request
                self.sent += 1

        self.responses = self.ch.stream_stream(method)(generate(), timeout=timeout)
        self.v2 = v2

    def read_all(self):
        """(stream code, the in-band codes of the answers)."""
        codes, code = [], "OK"
        try:
            for raw in self.responses:
                if self.v2:
                    answer = inference_messages().ModelStreamInferResponse.FromString(raw)
                    codes.append("OK" if not answer.error_message else "error")
                else:
                    answer = pb.ExecuteResponse.FromString(raw)
                    codes.append(CODE_NAMES.get(answer.status.code, str(answer.status.code)))
        except grpc.RpcError as error:
            code = error.code().name
        self.ch.close()
        return code, codes

    def cancel(self):
        self.responses.cancel()
        self.ch.close()


def served_meanwhile(ctx, seconds, large):
    """Another client's calls for `seconds`: small Executes (1 s deadlines) and `large`
    (request bytes, 10 s). Returns the failures."""
    failed = []
    deadline = time.monotonic() + seconds
    with channel(ctx.server.target) as ch:
        execute = unary(ch, "Execute")
        n = 0
        while time.monotonic() < deadline and not ctx.stop.is_set():
            n += 1
            outcome = ctx.call(execute, large if n % 10 == 0 else SMALL,
                               10.0 if n % 10 == 0 else 1.0)
            if outcome.code != "OK":
                failed.append(outcome.code)
            time.sleep(0.1)
    return failed


def slow_reader(ctx, v2):
    """The slow-reader cases: 24 requests of a 16 MiB answer each on one stream, nothing read
    for 15 s (--quick 6 s) while another client is served, then every answer read."""
    start_kib = ctx.server.rss.now_kib()
    stuck = StuckStream(ctx.server.target, stuck_requests(24, (1, 4096, 1024), v2), v2,
                        ctx.dur(120.0, 60.0))
    large = bwd_request((1, 4096, 1024)).SerializeToString()
    failed = served_meanwhile(ctx, ctx.dur(15.0, 6.0), large)
    rss = ctx.server.rss.now_kib()
    sent = stuck.sent
    code, codes = stuck.read_all()
    ctx.tally(f"stream:{code}")
    for c in codes:
        ctx.tally_inband(c)
    ctx.data.update(sent_while_stuck=sent, rss_stuck_mb=mb(rss), answers=len(codes))
    ctx.note(f"{sent} of 24 requests sent while nothing was read; RSS {mb(start_kib):.0f} MB "
             f"before, {mb(rss):.0f} MB while stuck; then {len(codes)} answers, stream {code}")
    if failed:
        ctx.fail(f"another client's calls while the stream was stuck: {len(failed)} failed "
                 f"({', '.join(sorted(set(failed)))})")
    if code != "OK" or codes.count("OK") != 24:
        ctx.fail(f"the stream: {code}, {codes.count('OK')} of 24 answers OK")


@case("slow-reader", 150, 90, server_args=(CAP_256,))
def slow_reader_native(ctx):
    """ExecuteStream of 24 mean_pooling_bwd requests with a 16 MiB dx each, nothing read for
    15 s (--quick 6 s): meanwhile another client's small (1 s deadline) and 16 MiB calls are all
    OK; then all 24 answers arrive OK. The peak stays within the bound (the stream holds at
    most a quarter of --max-inflight-bytes). Before: the answers queued without bound
    (2.7 GB)."""
    slow_reader(ctx, v2=False)


@case("slow-reader-v2", 150, 90, server_args=(CAP_256,))
def slow_reader_v2(ctx):
    """The same through the KServe v2 ModelStreamInfer."""
    slow_reader(ctx, v2=True)


@case("stuck-stream-release", 240, 120, server_args=("--max-inflight-bytes=536870912",))
def stuck_stream_release(ctx):
    """A native and a KServe v2 stream of 24 mean_pooling_bwd requests of a 72 MiB dx each,
    nothing read for 35 s (past the 30 s idle time; --quick 8 s), then both cancelled: RSS back
    within 64 MB of where it started within 60 s (--quick 45 s). Before: 536 MB held idle
    after the cancel."""
    start_kib = ctx.server.rss.now_kib()
    streams = [StuckStream(ctx.server.target, stuck_requests(24, (1, 18432, 1024), v2), v2,
                           ctx.dur(120.0, 60.0)) for v2 in (False, True)]
    time.sleep(ctx.dur(35.0, 8.0))
    rss = ctx.server.rss.now_kib()
    sent = [s.sent for s in streams]
    for s in streams:
        s.cancel()
        ctx.tally("stream:CANCELLED")
    ctx.note(f"sent while stuck: native {sent[0]}, v2 {sent[1]} of 24; RSS {mb(rss):.0f} MB "
             "while stuck")
    seconds, kib = ctx.rss_wait(start_kib, 64, ctx.dur(60.0, 45.0))
    ctx.data.update(rss_stuck_mb=mb(rss), rss_return_seconds=seconds, rss_after_wait_mb=mb(kib))
    ctx.note(f"RSS {mb(start_kib):.0f} MB at the start, {mb(kib) or 0:.0f} MB "
             + (f"{seconds:.0f} s after the cancel" if seconds is not None else
                "when the wait ended"))
    if seconds is None:
        ctx.fail(f"RSS stayed at {mb(kib) or 0:.0f} MB after the cancel (started at "
                 f"{mb(start_kib):.0f} MB)")


# ---------------------------------------------------------------------------------------------
# 24-25: batches and the large calls of mean_pooling_bwd


def batch_request(shapes):
    request = pb.ExecuteBatchRequest(kernel="mean_pooling_bwd")
    for shape in shapes:
        request.items.append(bwd_request(shape))
    return request.SerializeToString()


@case("batch-sizing", 120, 60, server_args=("--max-inflight-bytes=536870912",))
def batch_sizing(ctx):
    """ExecuteBatch of mean_pooling_bwd under --max-inflight-bytes=512MiB, each request a few
    KiB: a 4 KiB first item, then ten of 80 MiB (839 MB of answer) is RESOURCE_EXHAUSTED naming
    --max-inflight-bytes, and then ten of 207 MiB (2.2 GB) RESOURCE_EXHAUSTED naming
    --max-message-bytes, each within 2 s and with no RSS growth past 64 MB; four items of
    16 MiB are OK with four answers of the right shape. Before: the budget counted the first
    item's outputs 11 times, 3.1 GB, then INTERNAL."""
    start_kib = ctx.server.rss.now_kib()
    first = [[1, 1, 1024]]
    refusals = [("a 4 KiB item and ten of 80 MiB", first + [[1, 20480, 1024]] * 10,
                 "--max-inflight-bytes"),
                ("a 4 KiB item and ten of 207 MiB", first + [[1, 53000, 1024]] * 10,
                 "--max-message-bytes")]
    with grpc.insecure_channel(ctx.server.target, LARGE_CHANNEL) as ch:
        batch = unary(ch, "ExecuteBatch")
        for label, shapes, flag in refusals:
            ctx.server.rss.start_step()
            outcome = ctx.call(batch, batch_request(shapes), 60.0)
            expect(ctx, label, outcome, "RESOURCE_EXHAUSTED", flag)
            if outcome.seconds > 2.0:
                ctx.fail(f"{label}: refused after {outcome.seconds:.1f} s (want at once)")
            if step_peak_note(ctx, label, start_kib) > 64 * 1024:
                ctx.fail(f"{label}: the RSS grew past 64 MB before the refusal")
            ctx.healthy(f"after {label}")
        outcome = ctx.call(batch, batch_request([[1, 4096, 1024]] * 4), 60.0)
        if expect(ctx, "four items of 16 MiB", outcome, "OK"):
            answer = pb.ExecuteBatchResponse.FromString(outcome.response)
            shapes = [list(item.outputs["dx"].shape) for item in answer.items]
            if shapes != [[1, 4096, 1024]] * 4 or any(i.status.code for i in answer.items):
                ctx.fail(f"four items of 16 MiB: answers of shapes {shapes}")


@case("bwd-peaks", 420, 150, server_args=("--max-inflight-bytes=2147483648",))
def bwd_peaks(ctx):
    """The large calls of mean_pooling_bwd under --max-inflight-bytes=2GiB: an Execute whose x
    is shape-only [1,262000,1024] (a 1023 MiB dx from 4 KiB; --quick [1,65536,1024], 256 MiB)
    is OK with a peak of at most the dx plus 128 MiB (the answer held once); a shapes-only
    Autotune of x [1,131072,1024] (512 MiB; --quick 128 MiB) is OK or RESOURCE_EXHAUSTED
    with a peak of at most three dx (what it counts) plus 128 MiB. Before: peaks of 3.1 GB and
    4.6 GB."""
    start_kib = ctx.server.rss.now_kib()
    rows = ctx.dur(262000, 65536)
    dx_bytes = rows * 1024 * 4
    with grpc.insecure_channel(ctx.server.target, LARGE_CHANNEL) as ch:
        ctx.server.rss.start_step()
        outcome = ctx.call(unary(ch, "Execute"), bwd_request([1, rows, 1024]).SerializeToString(),
                           ctx.dur(180.0, 60.0))
        if expect(ctx, f"Execute of a {dx_bytes / MIB:.0f} MiB dx", outcome, "OK"):
            shape = list(pb.ExecuteResponse.FromString(outcome.response).outputs["dx"].shape)
            if shape != [1, rows, 1024]:
                ctx.fail(f"Execute: dx of shape {shape}")
        del outcome
        grown = step_peak_note(ctx, "Execute", start_kib)
        ctx.data["execute_peak_growth_mb"] = mb(grown)
        if grown > (dx_bytes + 128 * MIB) / 1024:
            ctx.fail(f"Execute: the RSS grew by {mb(grown):.0f} MB for a "
                     f"{dx_bytes / MIB:.0f} MiB dx (want at most the dx + 128 MiB)")
        ctx.healthy("after the Execute")

        tune_rows = ctx.dur(131072, 32768)
        x_bytes = tune_rows * 1024 * 4
        ctx.server.rss.start_step()
        request = pb.AutotuneRequest(kernel="mean_pooling_bwd")
        tensor(request.inputs["dout"], shape=(1, 1024))
        tensor(request.inputs["x"], shape=(1, tune_rows, 1024))
        outcome = ctx.call(unary(ch, "Autotune"), request.SerializeToString(),
                           ctx.dur(300.0, 100.0))
        expect(ctx, f"Autotune of a {x_bytes / MIB:.0f} MiB x", outcome,
               ("OK", "RESOURCE_EXHAUSTED"))
        grown = step_peak_note(ctx, "Autotune", start_kib)
        ctx.data["autotune_peak_growth_mb"] = mb(grown)
        if grown > (3 * x_bytes + 128 * MIB) / 1024:
            ctx.fail(f"Autotune: the RSS grew by {mb(grown):.0f} MB for a {x_bytes / MIB:.0f} "
                     "MiB x (want at most 3 x + 128 MiB, what it counts)")


# ---------------------------------------------------------------------------------------------
# 26: config strings and roles


CONFIG_IDENTITIES = {"ops": "admin", "alice": "caller"}


def put_config(config, inputs_shape=(1, 16, 64)):
    request = pb.PutConfigRequest(kernel="mean_pooling")
    tensor(request.inputs["x"], shape=inputs_shape)
    request.mean_pooling.SetInParent()
    request.config.CopyFrom(config)
    return request.SerializeToString()


def metrics_status(port, token=None):
    """The HTTP status of a /metrics scrape (with `token` as a bearer token)."""
    request = urllib.request.Request(f"http://127.0.0.1:{port}/metrics")
    if token:
        request.add_header("Authorization", f"Bearer {token}")
    try:
        with urllib.request.urlopen(request, timeout=2.0) as r:
            return r.status
    except urllib.error.HTTPError as error:
        return error.code
    except OSError:
        return None


METRICS_TOKEN = secrets.token_hex(16)


def config_server(workdir):
    """token_server for the config-strings case, with /metrics behind a token file too."""
    path = os.path.join(workdir, "metrics-token")
    with open(path, "w") as f:
        f.write(METRICS_TOKEN + "\n")
    return token_server(CONFIG_IDENTITIES, f"--metrics-auth-token-file={path}")(workdir)


@case("config-strings", 150, 60, prepare=config_server)
def config_strings(ctx):
    """A server with a token file (ops: admin, alice: caller). As ops, PutConfig with a 1 MiB
    algorithm or backend is INVALID_ARGUMENT with a short message, 1,000 times (--quick 100)
    with the RSS back within 64 MB; the heuristic's own config pins OK, ListConfigs lists it in
    a small answer, DeleteConfig removes it. As alice, PutConfig and DeleteConfig are
    PERMISSION_DENIED naming her role, an Execute whose config override has a 1 MiB algorithm
    is INVALID_ARGUMENT, Autotune is OK. Without a token (or with a wrong one) every call is
    UNAUTHENTICATED; /metrics is 401 without its token, 200 with it. Before: 1 GB for 1,000 such
    configs, and any caller could write them."""
    start_kib = ctx.server.rss.now_kib()
    huge = "a" * MIB
    with channel(ctx.server.target) as ch:
        put, delete = unary(ch, "PutConfig"), unary(ch, "DeleteConfig")
        execute = unary(ch, "Execute")
        heuristic = ctx.call(execute, SMALL, 5.0, as_("ops"))
        if not expect(ctx, "an Execute as ops", heuristic, "OK"):
            return
        answer = pb.ExecuteResponse.FromString(heuristic.response)
        config, key = answer.config, answer.cache_key
        for field in ("algorithm", "backend"):
            bad = pb.KernelConfig()
            bad.CopyFrom(config)
            setattr(bad, field, huge)
            expect(ctx, f"ops: PutConfig with a 1 MiB {field}",
                   ctx.call(put, put_config(bad), 5.0, as_("ops")), "INVALID_ARGUMENT", field)
        wrong = collections.Counter()
        for i in range(ctx.dur(1000, 100)):
            if ctx.stop.is_set():
                break
            bad = pb.KernelConfig()
            bad.CopyFrom(config)
            setattr(bad, "algorithm" if i % 2 else "backend", f"{i:08d}" + huge)
            outcome = ctx.call(put, put_config(bad), 5.0, as_("ops"))
            if outcome.code != "INVALID_ARGUMENT" or len(outcome.details) > MAX_MESSAGE:
                wrong[outcome.code] += 1
        if wrong:
            ctx.fail(f"PutConfig with 1 MiB strings: {dict(wrong)} (want INVALID_ARGUMENT with "
                     "a message of at most 1 KiB and the cut's mark)")
        now = ctx.server.rss.now_kib()
        ctx.note(f"RSS {mb(start_kib):.0f} MB before the 1 MiB configs, {mb(now):.0f} MB after")
        if now is not None and now - start_kib > 64 * 1024:
            ctx.fail(f"RSS {mb(start_kib):.0f} MB before the 1 MiB configs, {mb(now):.0f} MB "
                     "after")
        expect(ctx, "ops: PutConfig of the heuristic's config",
               ctx.call(put, put_config(config), 5.0, as_("ops")), "OK")
        listed = ctx.call(unary(ch, "ListConfigs"), b"", 5.0, as_("alice"))
        if expect(ctx, "alice: ListConfigs", listed, "OK"):
            entries = pb.ListConfigsResponse.FromString(listed.response).entries
            pinned = any(e.cache_key == key for e in entries)
            if not pinned or len(listed.response) > 64 << 10:
                ctx.fail(f"ListConfigs: {len(entries)} entries in {len(listed.response)} bytes, "
                         f"the pinned key {'listed' if pinned else 'missing'}")
        expect(ctx, "alice: PutConfig", ctx.call(put, put_config(config), 5.0, as_("alice")),
               "PERMISSION_DENIED", "alice")
        bad = pb.KernelConfig()
        bad.CopyFrom(config)
        bad.algorithm = huge
        expect(ctx, "alice: PutConfig with a 1 MiB algorithm",
               ctx.call(put, put_config(bad), 5.0, as_("alice")), "PERMISSION_DENIED")
        forget = pb.DeleteConfigRequest(cache_key=key).SerializeToString()
        expect(ctx, "alice: DeleteConfig", ctx.call(delete, forget, 5.0, as_("alice")),
               "PERMISSION_DENIED", "alice")
        override = mean_pooling(SMALL_X)
        override.config.CopyFrom(bad)
        expect(ctx, "alice: Execute with a 1 MiB algorithm override",
               ctx.call(execute, override.SerializeToString(), 5.0, as_("alice")),
               "INVALID_ARGUMENT", "algorithm")
        tune = autotune("mean_pooling", {"x": (1, 64, 256)}).SerializeToString()
        expect(ctx, "alice: Autotune", ctx.call(unary(ch, "Autotune"), tune, 60.0, as_("alice")),
               "OK")
        expect(ctx, "ops: DeleteConfig", ctx.call(delete, forget, 5.0, as_("ops")), "OK")
        for label, metadata in (("no token", None), ("a wrong token", bearer("not-a-token"))):
            for method, request in (("Execute", SMALL), ("PutConfig", put_config(config))):
                expect(ctx, f"{method} with {label}",
                       ctx.call(unary(ch, method), request, 5.0, metadata), "UNAUTHENTICATED")
    statuses = (metrics_status(ctx.server.metrics_port),
                metrics_status(ctx.server.metrics_port, METRICS_TOKEN))
    ctx.note(f"/metrics: {statuses[0]} without its token, {statuses[1]} with it")
    if statuses != (401, 200):
        ctx.fail(f"/metrics: {statuses[0]} without its token, {statuses[1]} with it (want 401, "
                 "200)")


# ---------------------------------------------------------------------------------------------
# 27: one identity's flood and another's calls


QUOTA_IDENTITIES = {"ops": "admin", "alice": "caller", "bob": "caller"}
QUOTA_RATE, QUOTA_BURST, QUOTA_BYTES = 100, 20, 64 * MIB


def flood_and_trickle(ctx, seconds, flood_request, flood_threads, trickle_request, pause):
    """alice sends `flood_request` from `flood_threads` threads as fast as answers come while
    bob sends `trickle_request` every `pause` s, for `seconds`. Returns (alice's Counter of
    codes and first message of each, bob's outcomes)."""
    stop = threading.Event()
    alice, messages, bob = collections.Counter(), {}, []

    def flooder(_):
        with channel(ctx.server.target) as ch:
            execute = unary(ch, "Execute")
            while not stop.is_set() and not ctx.stop.is_set():
                outcome = ctx.call(execute, flood_request, 10.0, as_("alice"))
                alice[outcome.code] += 1
                messages.setdefault(outcome.code, outcome.details)

    threads = run_threads(flood_threads, flooder)
    time.sleep(0.2)
    with channel(ctx.server.target) as ch:
        execute = unary(ch, "Execute")
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline and not ctx.stop.is_set():
            bob.append(ctx.call(execute, trickle_request, 10.0, as_("bob")))
            time.sleep(pause)
    stop.set()
    join_all(threads, 15.0)
    return alice, messages, bob


def bob_served(ctx, label, bob, slowest):
    """Every call of bob's OK, the slowest within `slowest` s."""
    failed = [o.code for o in bob if o.code != "OK"]
    worst = max((o.seconds for o in bob), default=0.0)
    ctx.note(f"{label}: bob {len(bob)} calls, {len(failed)} failed, slowest {worst:.2f} s")
    if failed or not bob:
        ctx.fail(f"{label}: {len(failed)} of bob's {len(bob)} calls failed "
                 f"({', '.join(sorted(set(failed)))})")
    if worst > slowest:
        ctx.fail(f"{label}: bob's slowest call took {worst:.1f} s (want <= {slowest:.0f} s)")


@case("identity-quotas", 150, 90,
      prepare=token_server(QUOTA_IDENTITIES, "--max-inflight-bytes=536870912",
                           f"--quota-requests-per-second={QUOTA_RATE}",
                           f"--quota-request-burst={QUOTA_BURST}",
                           f"--quota-inflight-bytes={QUOTA_BYTES}"))
def identity_quotas(ctx):
    """Token identities alice and bob with --quota-requests-per-second=100,
    --quota-request-burst=20 and --quota-inflight-bytes=64MiB. Rate: alice floods small
    Executes from 8 threads for 8 s (--quick 4 s) while bob calls every 50 ms: bob's calls are
    all OK within 1 s; alice gets at most burst + rate x time OK, the rest RESOURCE_EXHAUSTED
    naming her and the rate. In flight: alice sends 40 MiB Executes from 4 threads for 8 s
    (--quick 4 s; one fits her quota at a time) while bob sends 16 MiB ones: bob's all OK;
    alice's refusals name her in-flight quota. /metrics counts refusals for alice only. Before:
    one identity's flood took every caller's share."""
    seconds = ctx.dur(8.0, 4.0)
    start = time.monotonic()
    alice, messages, bob = flood_and_trickle(ctx, seconds, SMALL, 8, SMALL, 0.05)
    elapsed = time.monotonic() - start
    ctx.note(f"rate: alice {dict(alice)} in {elapsed:.1f} s")
    bob_served(ctx, "rate", bob, 1.0)
    allowed = QUOTA_BURST + QUOTA_RATE * elapsed
    if alice["OK"] > allowed * 1.05 + 5:
        ctx.fail(f"rate: alice got {alice['OK']} calls OK in {elapsed:.1f} s (at most "
                 f"{allowed:.0f} allowed)")
    refusal = messages.get("RESOURCE_EXHAUSTED", "")
    if not alice["RESOURCE_EXHAUSTED"] or \
            "identity 'alice' is over its request rate" not in refusal:
        ctx.fail(f"rate: alice's refusals {alice['RESOURCE_EXHAUSTED']}, {refusal[:80]!r}")
    if set(alice) - {"OK", "RESOURCE_EXHAUSTED"}:
        ctx.fail(f"rate: alice's calls got {dict(alice)}")
    ctx.data["rate"] = {"alice": dict(alice), "bob_calls": len(bob), "seconds": round(elapsed, 1)}
    time.sleep(1.0)  # alice's bucket fills again

    rng = np.random.default_rng(27)
    heavy = mean_pooling(uniform(rng, (1, 10240, 1024))).SerializeToString()  # 40 MiB
    medium = mean_pooling(uniform(rng, (1, 4096, 1024))).SerializeToString()  # 16 MiB
    alice, messages, bob = flood_and_trickle(ctx, seconds, heavy, 4, medium, 0.2)
    ctx.note(f"in flight: alice {dict(alice)}")
    bob_served(ctx, "in flight", bob, 10.0)
    refusal = messages.get("RESOURCE_EXHAUSTED", "")
    if not alice["OK"] or (alice["RESOURCE_EXHAUSTED"] and
                           "in-flight bytes of identity 'alice'" not in refusal
                           and "request rate" not in refusal):
        ctx.fail(f"in flight: alice {dict(alice)}, {refusal[:80]!r}")
    if set(alice) - {"OK", "RESOURCE_EXHAUSTED"}:
        ctx.fail(f"in flight: alice's calls got {dict(alice)}")
    ctx.data["inflight"] = {"alice": dict(alice), "bob_calls": len(bob)}

    text = scrape(ctx.server.metrics_port)
    refusals = {(who, quota): metric(text, "kernelserve_quota_refusals_total", identity=who,
                                     quota=quota)
                for who in ("alice", "bob") for quota in ("rate", "inflight_bytes")}
    ctx.data["refusals"] = {f"{who}/{quota}": n for (who, quota), n in refusals.items()}
    ctx.note(f"kernelserve_quota_refusals_total: {ctx.data['refusals']}")
    if not refusals[("alice", "rate")] or refusals[("bob", "rate")] or \
            refusals[("bob", "inflight_bytes")]:
        ctx.fail(f"/metrics refusals {ctx.data['refusals']} (want alice's only)")
    with channel(ctx.server.target) as ch:
        expect(ctx, "Execute without a token", ctx.call(unary(ch, "Execute"), SMALL, 5.0),
               "UNAUTHENTICATED")


# ---------------------------------------------------------------------------------------------
# 28: KServe v2 timeouts


@case("v2-timeout", 60, 30)
def v2_timeout(ctx):
    """ModelInfer of a small mean_pooling with the parameter timeout: 0 (none), 2^63-1 as an
    int64 and 2^64-1 as a uint64 (saturated) are OK with the right answer; 1 us is OK or
    DEADLINE_EXCEEDED; -1 is INVALID_ARGUMENT. Before: 0 expired at once and huge values
    overflowed the deadline."""
    x = SMALL_X
    steps = [("timeout 0", {"int64_param": 0}, ("OK",)),
             ("timeout 2^63-1", {"int64_param": 2**63 - 1}, ("OK",)),
             ("timeout 2^64-1 (uint64)", {"uint64_param": 2**64 - 1}, ("OK",)),
             ("timeout 1 us", {"int64_param": 1}, ("OK", "DEADLINE_EXCEEDED")),
             ("timeout -1", {"int64_param": -1}, ("INVALID_ARGUMENT",))]
    with channel(ctx.server.target) as ch:
        for label, timeout, codes in steps:
            outcome = v2_infer(ctx, ch, v2_pooling(x, timeout=timeout), 5.0)
            if expect(ctx, label, outcome, codes) and outcome.code == "OK" and not np.allclose(
                    v2_output(outcome.response), SMALL_MEAN, rtol=1e-5, atol=1e-6):
                ctx.fail(f"{label}: a wrong answer")
        streamed = ch.stream_stream(V2 + "ModelStreamInfer")(
            iter([v2_pooling(x, timeout={"int64_param": 2**63 - 1}, request_id="s")]),
            timeout=5.0)
        try:
            answers = [inference_messages().ModelStreamInferResponse.FromString(r)
                       for r in streamed]
            code = "OK"
        except grpc.RpcError as error:
            answers, code = [], error.code().name
        ctx.tally(f"stream:{code}")
        errors = [a.error_message for a in answers if a.error_message]
        ctx.note(f"ModelStreamInfer with timeout 2^63-1: stream {code}, {len(answers)} answers, "
                 f"errors {errors}")
        if code != "OK" or len(answers) != 1 or errors:
            ctx.fail(f"ModelStreamInfer with timeout 2^63-1: stream {code}, {len(answers)} "
                     f"answers, errors {errors}")

