"""Cases of resident tensors (CreateTensor, WriteTensor, ReadTensor, DeleteTensor, ListTensors):
bad names, offsets and dtypes, floods against the caps, tensors deleted between calls, writes
racing calls, and another identity's tensors. Each must leave the server healthy, answering
with the code the docs name, within its memory bound (the resident bytes count like regions).
"""

import collections
import threading
import time

import numpy as np

from abuse.harness import (MIB, case, channel, join_all, output, pb, run_threads, tensor, unary,
                           uniform)
from abuse.surfaces import as_, expect, token_server

CAP_RESIDENT = ("--max-resident-bytes=268435456", "--quota-resident-bytes=134217728",
                "--max-inflight-bytes=268435456")


def create(ctx, ch, name, shape, data=None, metadata=None, device=-1):
    """CreateTensor of f32 `shape` (zeros, or `data`); an OK one counts its bytes as held."""
    request = pb.CreateTensorRequest(name=name, dtype=pb.DTYPE_F32, shape=shape, device=device)
    if data is not None:
        tensor(request.contents, data)
    outcome = ctx.call(unary(ch, "CreateTensor"), request.SerializeToString(), 10.0, metadata)
    if outcome.code == "OK":
        made = pb.CreateTensorResponse.FromString(outcome.response)
        if made.created:
            ctx.registered(made.tensor.byte_size)
    return outcome


def delete(ctx, ch, name="", metadata=None, owner=""):
    request = pb.DeleteTensorRequest(name=name, owner=owner)
    return ctx.call(unary(ch, "DeleteTensor"), request.SerializeToString(), 10.0, metadata)


def listed(ctx, ch, metadata=None, owner=""):
    outcome = ctx.call(unary(ch, "ListTensors"), pb.ListTensorsRequest(owner=owner)
                       .SerializeToString(), 10.0, metadata)
    if outcome.code != "OK":
        return outcome, None
    return outcome, pb.ListTensorsResponse.FromString(outcome.response)


def pooling_of(name):
    """mean_pooling whose x is resident tensor `name`."""
    request = pb.ExecuteRequest(kernel="mean_pooling")
    request.inputs["x"].ref.tensor = name
    request.mean_pooling.SetInParent()
    return request.SerializeToString()


@case("resident-bad", 90, 60, server_args=CAP_RESIDENT)
def resident_bad(ctx):
    """Names, offsets, dtypes and shapes that break the rules: 1 MiB and NUL-bearing names,
    an empty and a negative shape, data of the wrong size, writes past the end and with the
    wrong dtype, reads of rows not there, a GPU on a CPU server, a ref with a region's range too,
    an output of the wrong shape: each INVALID_ARGUMENT with a printable message under 1 KiB; a
    tensor deleted between two calls NOT_FOUND; ALREADY_EXISTS for a name with another shape."""
    x = uniform(np.random.default_rng(1), (2, 8, 16))
    with channel(ctx.server.target) as ch:
        bad = [("1 MiB name", "n" * MIB, [4], None), ("NUL in the name", "a\0b", [4], None),
               ("empty shape", "e", [0, 4], None), ("negative dim", "neg", [4, -1], None),
               ("short data", "s", [4], np.zeros(3, np.float32))]
        for label, name, shape, data in bad:
            expect(ctx, label, create(ctx, ch, name, shape, data), "INVALID_ARGUMENT")
        expect(ctx, "a GPU on a CPU server", create(ctx, ch, "g", [4], device=0),
               "INVALID_ARGUMENT", "no GPUs")
        expect(ctx, "create x", create(ctx, ch, "x", list(x.shape), x), "OK")
        expect(ctx, "x again, another shape", create(ctx, ch, "x", [3]), "ALREADY_EXISTS")
        write = pb.WriteTensorRequest(name="x", byte_offset=x.nbytes - 4)
        write.contents.data = b"\0" * 8
        expect(ctx, "a write past the end",
               ctx.call(unary(ch, "WriteTensor"), write.SerializeToString(), 5.0),
               "INVALID_ARGUMENT", "do not fit")
        write = pb.WriteTensorRequest(name="x", row_offset=1)
        write.contents.dtype = pb.DTYPE_F16
        write.contents.data = b"\0" * (8 * 16 * 4)
        expect(ctx, "a write of another dtype",
               ctx.call(unary(ch, "WriteTensor"), write.SerializeToString(), 5.0),
               "INVALID_ARGUMENT")
        read = pb.ReadTensorRequest(name="x", row_offset=1, rows=5)
        expect(ctx, "rows not there", ctx.call(unary(ch, "ReadTensor"), read.SerializeToString(),
                                               5.0), "INVALID_ARGUMENT")
        ref = pb.ExecuteRequest.FromString(pooling_of("x"))
        ref.inputs["x"].ref.region = "r"
        expect(ctx, "a ref naming a tensor and a region", ctx.call(
            unary(ch, "Execute"), ref.SerializeToString(), 5.0), "INVALID_ARGUMENT")
        wrong_out = pb.ExecuteRequest.FromString(pooling_of("x"))
        wrong_out.output_regions["out"].tensor = "x"
        expect(ctx, "an output into a tensor of another shape", ctx.call(
            unary(ch, "Execute"), wrong_out.SerializeToString(), 5.0), "INVALID_ARGUMENT")
        first = ctx.call(unary(ch, "Execute"), pooling_of("x"), 10.0)
        expect(ctx, "a call on x", first, "OK")
        if first.code == "OK" and not np.allclose(output(first.response), x.mean(axis=1),
                                                  atol=1e-5):
            ctx.fail("a call on resident x: a wrong answer")
        expect(ctx, "delete x", delete(ctx, ch, "x"), "OK")
        ctx.registered(-x.nbytes)
        expect(ctx, "a call on x after its delete",
               ctx.call(unary(ch, "Execute"), pooling_of("x"), 10.0), "NOT_FOUND", "ttl")
        ctx.healthy("after the bad requests")


@case("resident-flood", 150, 90, prepare=token_server({"alice": "caller", "bob": "caller",
                                                        "ops": "admin"}, *CAP_RESIDENT))
def resident_flood(ctx):
    """Two identities each create 16 MiB tensors until refused: alice (who made a small tensor
    first) stops at her quota (128 MiB), bob at what the server has left (256 MiB in all), both RESOURCE_EXHAUSTED naming
    the flag; nothing of either is evicted; bob cannot see, read, call on or delete alice's
    tensors; 2,000 (quick 300) creates with distinct 1 MiB names are INVALID_ARGUMENT without
    growth; deleting them all gives the memory back."""
    shape = [4 << 20]  # 16 MiB of f32
    made = collections.Counter()
    with channel(ctx.server.target) as ch:
        expect(ctx, "alice's own", create(ctx, ch, "mine", [4], metadata=as_("alice")), "OK")
        for who in ("alice", "bob"):
            for i in range(40):
                outcome = create(ctx, ch, f"t{i}", shape, metadata=as_(who))
                if outcome.code == "OK":
                    made[who] += 1
                    continue
                flag = "--quota-resident-bytes" if who == "alice" else "--max-resident-bytes"
                expect(ctx, f"{who}'s create {i}", outcome, "RESOURCE_EXHAUSTED", flag)
                break
        ctx.note(f"created: {dict(made)}")
        # alice: 7 x 16 MiB and "mine" within her 128 MiB; bob: 8 more within the 256 MiB.
        if made["alice"] != 7 or made["bob"] != 8:
            ctx.fail(f"creates before the caps: {dict(made)} (want alice 7, bob 8)")
        outcome, theirs = listed(ctx, ch, as_("bob"))
        if theirs is None or any(t.owner != "bob" for t in theirs.tensors):
            ctx.fail("bob lists tensors that are not his")
        expect(ctx, "bob reads alice's", ctx.call(
            unary(ch, "ReadTensor"), pb.ReadTensorRequest(name="mine").SerializeToString(), 5.0,
            as_("bob")), "NOT_FOUND")
        expect(ctx, "bob calls on alice's",
               ctx.call(unary(ch, "Execute"), pooling_of("mine"), 5.0, as_("bob")), "NOT_FOUND")
        expect(ctx, "bob lists alice's", listed(ctx, ch, as_("bob"), owner="alice")[0],
               "PERMISSION_DENIED")
        _, everyone = listed(ctx, ch, as_("ops"), owner="*")
        if everyone is None or len(everyone.tensors) < 16:
            ctx.fail("the admin does not list the 16 tensors")
        count = ctx.dur(2000, 300)
        wrong = collections.Counter()

        def worker(i):
            with channel(ctx.server.target) as flood_ch:
                for n in range(i, count, 4):
                    if ctx.stop.is_set():
                        return
                    outcome = create(ctx, flood_ch, f"{n:08d}".ljust(MIB, "n"), [4],
                                     metadata=as_("alice"))
                    if outcome.code != "INVALID_ARGUMENT":
                        wrong[outcome.code] += 1

        join_all(run_threads(4, worker), ctx.dur(120.0, 50.0))
        if wrong:
            ctx.fail(f"creates with 1 MiB names: {dict(wrong)} (want INVALID_ARGUMENT)")
        for who in ("alice", "bob"):
            expect(ctx, f"{who} deletes all", delete(ctx, ch, "", as_(who)), "OK")
        ctx.registered(-sum(made.values()) * (16 << 20) - 16)
        ctx.healthy("after the floods")


@case("resident-race", 120, 60, server_args=CAP_RESIDENT)
def resident_race(ctx):
    """Four threads call mean_pooling on resident x while two rewrite x (all of it, rows, bytes)
    and one deletes and re-creates it: every call is OK with the mean of one whole version of x
    (never a torn mix), NOT_FOUND (between delete and create) or its write's OK; a delete of x
    while a call holds it is FAILED_PRECONDITION; the server healthy after."""
    rng = np.random.default_rng(2)
    versions = [np.full((4, 64, 32), float(v), np.float32) for v in range(8)]
    means = {float(v): None for v in range(8)}
    stop = threading.Event()
    codes = collections.Counter()
    torn = []
    with channel(ctx.server.target) as ch:
        expect(ctx, "create x", create(ctx, ch, "x", [4, 64, 32], versions[0]), "OK")

    def caller(i):
        with channel(ctx.server.target) as c:
            while not stop.is_set():
                outcome = ctx.call(unary(c, "Execute"), pooling_of("x"), 10.0)
                codes[f"call:{outcome.code}"] += 1
                if outcome.code == "OK":
                    got = output(outcome.response)
                    if not np.all(got == got.flat[0]) or float(got.flat[0]) not in means:
                        torn.append(got.flat[:4].tolist())

    def writer(i):
        with channel(ctx.server.target) as c:
            while not stop.is_set():
                v = versions[int(rng.integers(0, 8))]
                write = pb.WriteTensorRequest(name="x")
                write.contents.data = v.tobytes()
                outcome = ctx.call(unary(c, "WriteTensor"), write.SerializeToString(), 10.0)
                codes[f"write:{outcome.code}"] += 1

    def deleter(i):
        with channel(ctx.server.target) as c:
            while not stop.is_set():
                outcome = delete(ctx, c, "x")
                codes[f"delete:{outcome.code}"] += 1
                if outcome.code == "OK":
                    ctx.registered(-versions[0].nbytes)
                    create(ctx, c, "x", [4, 64, 32], versions[0])
                time.sleep(0.01)

    threads = run_threads(4, caller) + run_threads(2, writer) + run_threads(1, deleter)
    time.sleep(ctx.dur(20.0, 6.0))
    stop.set()
    join_all(threads, 30.0)
    ctx.note(f"outcomes: {dict(codes)}")
    if torn:
        ctx.fail(f"{len(torn)} calls read a torn x, e.g. {torn[0]}")
    allowed = {"call:OK", "call:NOT_FOUND", "write:OK", "write:NOT_FOUND", "delete:OK",
               "delete:FAILED_PRECONDITION", "delete:NOT_FOUND"}
    if set(codes) - allowed:
        ctx.fail(f"unexpected outcomes: {sorted(set(codes) - allowed)}")
    if codes["call:OK"] == 0 or codes["write:OK"] == 0:
        ctx.fail("no call or no write went through")
    with channel(ctx.server.target) as ch:
        delete(ctx, ch, "")
    ctx.healthy("after the race")
