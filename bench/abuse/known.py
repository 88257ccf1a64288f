"""Cases 1-9: the requests the probe found taking the server down (or the channel, or its
memory). Each states what is expected once they are fixed."""

import contextlib
import os
import random
import sys
import threading
import time
import warnings

import grpc
import numpy as np

from abuse.harness import (CHANNEL_OPTIONS, CODE_NAMES, GRPC_BUFFERS, MIB, SMALL, autotune,
                           case, channel, flash_attention, join_all, mb, mean_pooling, metric,
                           output, pb, run_threads, stream, unary, uniform)

CLEAR_ERRORS = ("INVALID_ARGUMENT", "RESOURCE_EXHAUSTED")
INT32_MAX = 2**31 - 1
# The probe's request: mean_pooling x f32 [1,1,1] with config num_warps=1e9.
OVERRIDE_HEX = ("0a0c6d65616e5f706f6f6c696e6712120a0178120d080112030101011a04000000002a06"
                "208094ebdc03")


def expect_invalid(ctx, label, outcome):
    """INVALID_ARGUMENT with a message, else a failure named by `label`."""
    if outcome.code != "INVALID_ARGUMENT":
        ctx.fail(f"{label}: {outcome.code} (want INVALID_ARGUMENT)")
    elif not outcome.details:
        ctx.fail(f"{label}: INVALID_ARGUMENT with an empty message")


def huge_overrides(rng, large):
    """(label, request bytes) of the huge-override calls; `large`: inputs over 64 KiB, so
    that they run on the worker thread rather than inline."""
    if large:
        x = uniform(rng, (1, 128, 256))  # 128 KiB
        q, k, v = (uniform(rng, (1, 128, 2, 64)) for _ in range(3))  # 64 KiB each
    else:
        x = np.zeros((1, 1, 1), np.float32)
        q, k, v = (uniform(rng, (1, 4, 1, 8)) for _ in range(3))
    first = (bytes.fromhex(OVERRIDE_HEX) if not large else
             mean_pooling(x, {"num_warps": 10**9}).SerializeToString())
    return [
        ("mean_pooling num_warps=1e9", first),
        ("flash_attention block_q=block_k=2^31-1",
         flash_attention(q, k, v, {"block_q": INT32_MAX, "block_k": INT32_MAX})
         .SerializeToString()),
        ("mean_pooling block_size=1e9",
         mean_pooling(x, {"block_size": 10**9}).SerializeToString()),
    ]


def run_overrides(ctx, large):
    rng = np.random.default_rng(1)
    for label, request in huge_overrides(rng, large):
        with channel(ctx.server.target) as ch:
            outcome = ctx.call(unary(ch, "Execute"), request, ctx.dur(5.0, 3.0))
        expect_invalid(ctx, label, outcome)
        ctx.note(f"{label}: {outcome.code} in {outcome.seconds:.2f} s "
                 f"{outcome.details[:80]!r}")
        ctx.healthy(f"after {label}")


@case("override-huge", 90, 60, rss_growth_mb=256)
def override_huge(ctx):
    """An explicit config with num_warps=1e9, block_q=block_k=2^31-1 or block_size=1e9 on a
    tiny input: INVALID_ARGUMENT, and the server keeps answering (before: it hung)."""
    run_overrides(ctx, large=False)


def stream_items(ctx, requests, timeout):
    """Sends `requests` (bytes) on one ExecuteStream. Returns (stream code, the answers as
    pb.ExecuteResponse, in arrival order)."""
    answers = []
    with channel(ctx.server.target) as ch:
        responses = stream(ch)(iter(requests), timeout=timeout)
        code = "OK"
        try:
            for raw in responses:
                answers.append(pb.ExecuteResponse.FromString(raw))
        except Exception as error:  # grpc.RpcError; the stream's own failure
            code = error.code().name if hasattr(error, "code") else type(error).__name__
    ctx.tally(f"stream:{code}")
    for answer in answers:
        ctx.tally_inband(CODE_NAMES.get(answer.status.code, str(answer.status.code)))
    return code, answers


def check_middle_item(ctx, label, code, answers, ids):
    """[valid, bad, valid] on a stream: three answers, the bad one INVALID_ARGUMENT in-band,
    the valid ones OK, the stream OK."""
    by_id = {a.request_id: a for a in answers}
    if code != "OK":
        ctx.fail(f"{label}: the stream ended {code} (want OK)")
    if len(answers) != 3:
        ctx.fail(f"{label}: {len(answers)} answers (want 3)")
    for i, request_id in enumerate(ids):
        answer = by_id.get(request_id)
        want = 3 if i == 1 else 0
        if answer is None:
            continue
        got = answer.status.code
        if got != want:
            ctx.fail(f"{label}: item {i} in-band {CODE_NAMES.get(got, got)} "
                     f"(want {CODE_NAMES[want]})")
        elif i == 1 and not answer.status.message:
            ctx.fail(f"{label}: item 1 INVALID_ARGUMENT with an empty message")
    ctx.note(f"{label}: stream {code}, answers " + ", ".join(
        f"{a.request_id}={CODE_NAMES.get(a.status.code, a.status.code)}" for a in answers))


def with_id(request_bytes, request_id):
    request = pb.ExecuteRequest.FromString(request_bytes)
    request.request_id = request_id
    return request.SerializeToString()


@case("override-huge-large", 90, 60, rss_growth_mb=256)
def override_huge_large(ctx):
    """The same overrides with inputs over 64 KiB (they run on the worker thread), and one
    as the middle item of an ExecuteStream (before: the server aborted)."""
    run_overrides(ctx, large=True)
    _, bad = huge_overrides(np.random.default_rng(2), large=True)[0]
    ids = ["valid-0", "override-1", "valid-2"]
    requests = [with_id(SMALL, ids[0]), with_id(bad, ids[1]), with_id(SMALL, ids[2])]
    code, answers = stream_items(ctx, requests, ctx.dur(10.0, 5.0))
    check_middle_item(ctx, "stream [valid, num_warps=1e9, valid]", code, answers, ids)
    ctx.healthy("after the stream")


@case("autotune-synth-huge", 180, 120)
def autotune_synth_huge(ctx):
    """Shapes-only Autotune whose made-up inputs cannot or should not be made: x declared
    [2^20, 2^20, 1024], and x of 256 MiB with no data. Expected: RESOURCE_EXHAUSTED or
    INVALID_ARGUMENT with a message for the first; the second is within the default
    --max-synthetic-bytes (1 GiB), so OK or a clear error; RSS back near where it started."""
    baseline = ctx.server.rss.now_kib()
    steps = [("x [2^20,2^20,1024] shapes only", (1 << 20, 1 << 20, 1024), 30.0, False),
             ("x [1,65536,1024] (256 MiB) shapes only", (1, 65536, 1024), 120.0, True)]
    for label, shape, timeout, may_run in steps:
        request = autotune("mean_pooling", {"x": shape}).SerializeToString()
        with channel(ctx.server.target) as ch:
            outcome = ctx.call(unary(ch, "Autotune"), request, timeout)
        ctx.note(f"{label}: {outcome.code} in {outcome.seconds:.1f} s {outcome.details[:80]!r}")
        if outcome.code == "OK" and may_run:
            pass
        elif outcome.code not in CLEAR_ERRORS:
            ctx.fail(f"{label}: {outcome.code} (want RESOURCE_EXHAUSTED or INVALID_ARGUMENT)")
        elif not outcome.details:
            ctx.fail(f"{label}: {outcome.code} with an empty message")
        if not ctx.healthy(f"after {label}"):
            baseline = ctx.server.rss.now_kib()
    # The server gives freed memory back after 30 s without requests (server.cc).
    seconds, kib = ctx.rss_wait(baseline, 64, ctx.dur(45.0, 40.0))
    ctx.data["rss_return_seconds"] = seconds
    if kib is not None:
        ctx.note(f"RSS {mb(baseline):.0f} MB before, {mb(kib):.0f} MB after"
                 + (f" (back in {seconds:.0f} s)" if seconds is not None else ""))
        if seconds is None:
            ctx.fail(f"RSS stayed at {mb(kib):.0f} MB (started at {mb(baseline):.0f} MB)")


@case("autotune-starve", 240, 120)
def autotune_starve(ctx):
    """A shapes-only Autotune of flash_attention q/k/v [1,2048,8,64] with a 2 s deadline,
    while small valid Executes with 1 s deadlines go on for 10 s (--quick: 6 s). Executes queued
    behind the Autotune may time out while it runs within its own deadline; once that deadline
    has passed (plus an Execute's 1 s and 0.5 s of slack) none may fail: the server stops the
    tuning there. Checks on /metrics that the Autotune was counted with the code its client saw
    (DEADLINE_EXCEEDED), not OK. Before: the worker was held for ~30 s."""
    before = ctx.server.metrics()
    load_seconds = ctx.dur(10.0, 6.0)
    failed, times, stop = [], [], threading.Event()

    def small_calls(_):
        with channel(ctx.server.target) as ch:
            execute = unary(ch, "Execute")
            while not stop.is_set() and not ctx.stop.is_set():
                outcome = ctx.call(execute, SMALL, 1.0)
                times.append((time.monotonic(), outcome.code))
                if outcome.code != "OK":
                    failed.append(outcome.code)
                time.sleep(0.05)

    shape = (1, 2048, 8, 64)
    request = autotune("flash_attention", {"q": shape, "k": shape, "v": shape})
    start = time.monotonic()
    threads = run_threads(1, small_calls)
    time.sleep(0.3)
    tune_sent = time.monotonic()
    with channel(ctx.server.target) as ch:
        tune = ctx.call(unary(ch, "Autotune"), request.SerializeToString(), 2.0)
    ctx.note(f"Autotune: {tune.code} after {tune.seconds:.1f} s")
    time.sleep(max(0.0, load_seconds - (time.monotonic() - start)))
    stop.set()
    join_all(threads, 5.0)
    bad_times = [t for t, code in times if code != "OK"]
    held = (bad_times[-1] - bad_times[0] + 1.0) if bad_times else 0.0
    total = len(times)
    ctx.data.update(small_calls=total, small_failed=len(failed), held_seconds=round(held, 1))
    ctx.note(f"small Executes: {len(failed)} of {total} failed; the worker was held for "
             f"{held:.1f} s or more" + (" (to the end of the load)" if bad_times and
                                        times[-1][1] != "OK" else ""))
    late = [t for t in bad_times if t > tune_sent + 2.0 + 1.0 + 0.5]
    if late:
        ctx.fail(f"{len(late)} of {total} small Executes failed after the Autotune's deadline "
                 f"(the last {late[-1] - tune_sent:.1f} s after it was sent)")

    # The Autotune's own count: the only flash_attention request of the case.
    wait = ctx.dur(120.0, 60.0)  # the buggy server tunes on for ~30 s on an idle machine
    deadline, counted, after = time.monotonic() + wait, {}, None
    while time.monotonic() < deadline and not ctx.stop.is_set():
        after = ctx.server.metrics()
        counted = {code: metric(after, "kernelserve_requests_total", kernel="flash_attention",
                                code=code) - metric(before, "kernelserve_requests_total",
                                                    kernel="flash_attention", code=code)
                   for code in ("OK", "DEADLINE_EXCEEDED", "CANCELLED")}
        if any(counted.values()):
            break
        time.sleep(1.0)
    counted = {k: v for k, v in counted.items() if v}
    ctx.data["autotune_counted"] = counted
    tuned = (metric(after, "kernelserve_autotune_duration_seconds_sum")
             - metric(before, "kernelserve_autotune_duration_seconds_sum"))
    if tuned:
        ctx.data["autotune_seconds"] = round(tuned, 1)
        ctx.note(f"the server tuned for {tuned:.1f} s (kernelserve_autotune_duration_seconds)")
    if not counted:
        ctx.fail(f"the Autotune was not counted on /metrics within {wait:.0f} s "
                 "(still running)")
    else:
        ctx.note(f"/metrics counted the Autotune as {counted} after "
                 f"{time.monotonic() - start:.0f} s")
        if counted.get("OK"):
            ctx.fail(f"the Autotune was counted OK on /metrics, the client saw {tune.code}")


@case("stream-garbage", 60, 30)
def stream_garbage(ctx):
    """ExecuteStream of [valid, the raw bytes b'\\xff', valid]: three answers, the middle one
    INVALID_ARGUMENT in-band, the stream OK."""
    ids = ["valid-0", "", "valid-2"]  # the garbage item cannot carry an id
    requests = [with_id(SMALL, ids[0]), b"\xff", with_id(SMALL, ids[2])]
    code, answers = stream_items(ctx, requests, ctx.dur(10.0, 5.0))
    check_middle_item(ctx, "stream [valid, b'\\xff', valid]", code, answers, ids)


def mutations(rng, valid, count):
    """`count` mutations of the bytes `valid`: bit flips, byte changes, truncations, insertions,
    deletions, duplicated slices."""
    out = []
    for _ in range(count):
        data = bytearray(valid)
        for _ in range(rng.randint(1, 4)):
            kind, pos = rng.randrange(6), rng.randrange(len(data))
            if kind == 0:
                data[pos] ^= 1 << rng.randrange(8)
            elif kind == 1:
                data[pos] = rng.randrange(256)
            elif kind == 2:
                del data[pos:]
            elif kind == 3:
                data.insert(pos, rng.randrange(256))
            elif kind == 4:
                del data[pos]
            else:
                end = min(len(data), pos + rng.randint(1, 8))
                data[pos:pos] = data[pos:end]
            if not data:
                data = bytearray(b"\xff")
        out.append(bytes(data))
    return out


def parses(data):
    """Whether protobuf parses `data` as an ExecuteRequest. The C++ implementation behind
    Python's protobuf warns (and stops) at a stray end-group tag rather than failing: a
    warning counts as a failure."""
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        try:
            pb.ExecuteRequest.FromString(data)
            return True
        except Exception:  # DecodeError, or the RuntimeWarning raised as an error
            return False


@contextlib.contextmanager
def quiet_stderr():
    """Silences fd 2: libprotobuf logs every invalid UTF-8 string it meets there."""
    sys.stderr.flush()
    saved = os.dup(2)
    with open(os.devnull, "w") as null:
        os.dup2(null.fileno(), 2)
    try:
        yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)


@case("unparseable", 240, 90)
def unparseable(ctx):
    """Unary Execute with bytes that do not parse (b'\\xff', truncated varints, a length past the
    end) and random mutations of a valid request (2,000; --quick: 200). Those that do not parse
    must get INVALID_ARGUMENT with a message (before: UNIMPLEMENTED, empty); those that parse
    get an answer of their own (never UNIMPLEMENTED, UNKNOWN, INTERNAL, UNAVAILABLE or a
    timeout)."""
    rng = random.Random(7)
    valid = mean_pooling(uniform(np.random.default_rng(7), (1, 4, 8)),
                         request_id="m").SerializeToString()
    fixed = [b"\xff", b"\x08", b"\x08\xff", b"\x08\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff",
             b"\x0a\x05ab", b"\x12\x80\x80\x80\x80\x10", valid[:-1]]
    requests = fixed + mutations(rng, valid, ctx.dur(2000, 200))
    with quiet_stderr():
        parsed = [parses(data) for data in requests]
    bad_unparsed, bad_parsed, examples = 0, 0, {}
    codes_unparsed = {}
    with channel(ctx.server.target) as ch:
        execute = unary(ch, "Execute")
        for data, ok in zip(requests, parsed):
            if ctx.stop.is_set():
                break
            outcome = ctx.call(execute, data, 2.0)
            if ok:
                wrong = outcome.code in ("UNIMPLEMENTED", "UNKNOWN", "INTERNAL", "UNAVAILABLE",
                                         "DEADLINE_EXCEEDED")
                bad_parsed += wrong
            else:
                codes_unparsed[outcome.code] = codes_unparsed.get(outcome.code, 0) + 1
                wrong = outcome.code != "INVALID_ARGUMENT" or not outcome.details
                bad_unparsed += wrong
            if wrong and outcome.code not in examples:
                examples[outcome.code] = (data[:24].hex(), outcome.details[:80])
            if outcome.code in ("DEADLINE_EXCEEDED", "UNAVAILABLE"):
                if not ctx.healthy(f"after request {data[:24].hex()}"):
                    ch.close()
                    ch = channel(ctx.server.target)
                    execute = unary(ch, "Execute")
        ch.close()
    n_unparsed = sum(codes_unparsed.values())
    ctx.data.update(unparsed=n_unparsed, unparsed_codes=codes_unparsed,
                    examples=examples)
    ctx.note(f"{n_unparsed} of {len(requests)} did not parse: {codes_unparsed}")
    for code, (head, details) in examples.items():
        ctx.note(f"e.g. {code} {details!r} for {head}...")
    if bad_unparsed:
        ctx.fail(f"{bad_unparsed} of {n_unparsed} unparseable requests did not get "
                 "INVALID_ARGUMENT with a message")
    if bad_parsed:
        ctx.fail(f"{bad_parsed} parseable mutations got UNIMPLEMENTED/UNKNOWN/INTERNAL/"
                 "UNAVAILABLE/timeout")


@case("huge-error", 90, 60)
def huge_error(ctx):
    """x with a 100,000-dim shape: INVALID_ARGUMENT with a short message (< 1 KiB, read on a
    channel that accepts large metadata); then, on one channel with default options, 200 valid
    calls in flight together with 4 of those calls, and 50 valid calls after: all the valid
    ones OK (before: the 200 KB message in the trailers failed up to ~170 of the 200 with
    RESOURCE_EXHAUSTED 'received initial metadata size exceeds limit')."""
    request = pb.ExecuteRequest(kernel="mean_pooling")
    x = request.inputs["x"]
    x.dtype = pb.DTYPE_F32
    x.shape[:] = [1] * 100_000
    x.data = b"\0\0\0\0"
    request.mean_pooling.SetInParent()
    huge = request.SerializeToString()
    options = CHANNEL_OPTIONS + [("grpc.max_metadata_size", 64 * MIB)]
    with grpc.insecure_channel(ctx.server.target, options) as ch:
        outcome = ctx.call(unary(ch, "Execute"), huge, 5.0)
    size = len(outcome.details.encode())
    ctx.data["error_bytes"] = size
    ctx.note(f"100,000-dim shape: {outcome.code}, message of {size} bytes "
             f"{outcome.details[:60]!r}")
    if outcome.code != "INVALID_ARGUMENT":
        ctx.fail(f"100,000-dim shape: {outcome.code} (want INVALID_ARGUMENT)")
    if size >= 1024:
        ctx.fail(f"error message of {size} bytes (want < 1 KiB)")

    with channel(ctx.server.target) as ch:
        execute = unary(ch, "Execute")
        futures = []  # the huge call, then every 50 valid calls once more
        for i in range(200):
            if i % 50 == 0:
                futures.append((False, execute.future(huge, timeout=5.0)))
            futures.append((True, execute.future(SMALL, timeout=5.0)))
        valid, huge_codes = [], []
        for is_valid, f in futures:
            try:
                f.result()
                code = "OK"
            except grpc.RpcError as error:
                code = error.code().name
            ctx.tally(code)
            (valid if is_valid else huge_codes).append(code)
        after = [ctx.call(execute, SMALL, 2.0).code for _ in range(50)]
    ctx.note(f"on a default channel the 100,000-dim calls got {sorted(set(huge_codes))}")
    for label, got in (("valid calls in flight with 4 of them", valid),
                       ("50 valid calls after it", after)):
        failed = [c for c in got if c != "OK"]
        ctx.note(f"{label}: {len(failed)} failed {sorted(set(failed))}")
        if failed:
            ctx.fail(f"{len(failed)} of {len(got)} {label} failed "
                     f"({', '.join(sorted(set(failed)))})")


def tensor_bytes(first, second, shape):
    """A pb.Tensor of f32 `shape` whose wire form carries two data fields."""
    head = pb.Tensor(dtype=pb.DTYPE_F32, shape=shape).SerializeToString()
    return (head + pb.Tensor(data=first).SerializeToString()
            + pb.Tensor(data=second).SerializeToString())


def execute_bytes(tensor_wire):
    """An ExecuteRequest of mean_pooling whose input x is the Tensor wire `tensor_wire`."""
    entry = b"\x0a\x01x" + b"\x12" + _varint(len(tensor_wire)) + tensor_wire  # key, value
    return (pb.ExecuteRequest(kernel="mean_pooling").SerializeToString()
            + b"\x12" + _varint(len(entry)) + entry)  # ExecuteRequest.inputs = 2


def _varint(value):
    out = bytearray()
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


@case("dup-data", 60, 40)
def dup_data(ctx):
    """A > 1 MiB ExecuteRequest (the server's own large-message parser) whose x carries two
    data fields: protobuf keeps the last, so mean_pooling must give the mean of the last."""
    rng = np.random.default_rng(8)
    variants = [  # (label, first data, last data (x of this shape), shape)
        ("2 MiB junk, then 128 KiB x", uniform(rng, (MIB // 2,)).tobytes(), (1, 128, 256)),
        ("128 KiB junk, then 2 MiB x", uniform(rng, (32768,)).tobytes(), (1, 2048, 256)),
        ("1 MiB x, then another 1 MiB x", uniform(rng, (1, 1024, 256)).tobytes(),
         (1, 1024, 256)),
        ("2 MiB junk, then 16 B x", uniform(rng, (MIB // 2,)).tobytes(), (1, 1, 4)),
    ]
    with channel(ctx.server.target) as ch:
        execute = unary(ch, "Execute")
        for label, first, shape in variants:
            last = uniform(rng, shape)
            wire = execute_bytes(tensor_bytes(first, last.tobytes(), shape))
            assert pb.ExecuteRequest.FromString(wire).inputs["x"].data == last.tobytes()
            outcome = ctx.call(execute, wire, 10.0)
            if outcome.code != "OK":
                ctx.fail(f"{label}: {outcome.code} {outcome.details[:60]!r} (want OK, the "
                         "mean of the last data)")
                ctx.note(f"{label}: {outcome.code} {outcome.details[:80]!r}")
                continue
            got = output(outcome.response)
            want = last.mean(axis=1)
            if np.allclose(got, want, rtol=1e-4, atol=1e-5):
                ctx.note(f"{label}: the mean of the last data (as protobuf)")
                continue
            first_x = np.frombuffer(first, np.float32)
            which = "some other data"
            if first_x.size >= last.size and np.allclose(
                    got, first_x[:last.size].reshape(shape).mean(axis=1), rtol=1e-4, atol=1e-5):
                which = "the first data"
            ctx.fail(f"{label}: the answer is the mean of {which}, not of the last")
            ctx.note(f"{label}: the mean of {which}")


@case("inflight-rss", 200, 120, server_args=("--max-inflight-bytes=300000000",))
def inflight_rss(ctx):
    """A server with --max-inflight-bytes=300000000; 8 concurrent 100 MiB Executes. OK or
    RESOURCE_EXHAUSTED each; the peak RSS should stay within the documented bound (start + 2 x
    cap + gRPC's own connection buffers: gRPC's buffers of the requests being received are held
    to a soft quota of the cap, the accepted calls to the in-flight budget; docs/SERVER.md,
    "Limits") and RSS come back within a minute (--quick: 40 s; the server trims after 30 s
    idle).
    Before: a peak of 797 MB that stayed."""
    cap = 300_000_000
    baseline = ctx.server.rss.now_kib()
    x = uniform(np.random.default_rng(9), (1, 25600, 1024))  # 100 MiB
    request = mean_pooling(x).SerializeToString()
    del x
    outcomes = [None] * 8

    def send(i):
        with channel(ctx.server.target) as ch:
            outcomes[i] = ctx.call(unary(ch, "Execute"), request, 60.0)

    start = time.monotonic()
    if join_all(run_threads(8, send), 70.0):
        ctx.fail("calls still running after 70 s")
    ctx.note(f"8 calls of 100 MiB done in {time.monotonic() - start:.1f} s: "
             + ", ".join(sorted({o.code for o in outcomes if o})))
    for o in outcomes:
        if o is not None and o.code not in ("OK", "RESOURCE_EXHAUSTED"):
            ctx.fail(f"a 100 MiB call got {o.code} {o.details[:60]!r}")
    peak = ctx.server.rss.peak()
    limit_kib = baseline + (2 * cap + GRPC_BUFFERS) / 1024
    ctx.data.update(peak_mb=mb(peak), baseline_mb=mb(baseline))
    if peak > limit_kib:
        ctx.fail(f"peak RSS {mb(peak):.0f} MB (cap {cap / 1e6:.0f} MB, want <= "
                 f"{mb(limit_kib):.0f} MB)")
    wait = ctx.dur(60.0, 40.0)
    seconds, kib = ctx.rss_wait(baseline, 64, wait)
    ctx.data.update(rss_after_wait_mb=mb(kib), rss_return_seconds=seconds)
    ctx.note(f"RSS {mb(baseline):.0f} MB at the start, peak {mb(peak):.0f} MB, "
             + (f"back to {mb(kib):.0f} MB in {seconds:.0f} s" if seconds is not None else
                f"{mb(kib) if kib else 0:.0f} MB after {wait:.0f} s"))
    if seconds is None:
        ctx.fail(f"RSS stayed at {mb(kib) if kib else 0:.0f} MB {wait:.0f} s later")
