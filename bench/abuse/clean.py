"""Cases 10-15: abuse the probe found handled well. They must stay clean."""

import collections
import queue
import signal
import threading
import time

import grpc
import numpy as np

from abuse.harness import (CODE_NAMES, SMALL, SMALL_X, call, case, channel, flash_attention,
                           invalid_requests, join_all, mb, mean_pooling, metric, output, pb,
                           run_threads, stream, unary, uniform)

MEDIUM = mean_pooling(uniform(np.random.default_rng(3), (1, 1024, 256))).SerializeToString()
SMALL_MEAN = SMALL_X.mean(axis=1)


def drained(ctx, seconds):
    """Polls /metrics for `seconds` until nothing is in flight or queued. Returns (in flight,
    queued) as last read."""
    deadline = time.monotonic() + seconds
    while True:
        text = ctx.server.metrics()
        inflight = metric(text, "kernelserve_inflight_requests")
        queued = metric(text, "kernelserve_queue_depth")
        if (text is not None and inflight == 0 and queued == 0) or time.monotonic() > deadline:
            return inflight, queued
        time.sleep(0.2)


def check_drained(ctx, label):
    """/metrics: no request left in flight and no queued work. The gauges are set after the
    worker's lock is let go, so a burst can leave a stale value (a race in reporting, not a
    leak); one more call on an idle server sets them again. Still nonzero after it: FAIL."""
    inflight, queued = drained(ctx, 2.0)
    if inflight == 0 and queued == 0:
        return
    with channel(ctx.server.target) as ch:
        call(unary(ch, "Execute"), SMALL, 2.0)
    again = drained(ctx, 3.0)
    if again == (0, 0):
        ctx.note(f"{label}: /metrics showed {inflight:.0f} in flight, {queued:.0f} queued "
                 "(stale gauges: set again by the next call)")
    else:
        ctx.fail(f"{label}: /metrics shows {again[0]:.0f} in flight, {again[1]:.0f} queued "
                 "on an idle server")


@case("soak", 150, 60, rss_growth_mb=512)
def soak(ctx):
    """60 s (--quick: 10 s) at concurrency 64, 10% invalid requests: every valid call OK (its
    answer checked), every invalid one INVALID_ARGUMENT. RSS every 5 s; FAIL when it grows by
    more than 64 MB over the second half."""
    seconds = ctx.dur(60.0, 10.0)
    invalid = invalid_requests(np.random.default_rng(4))
    channels = [channel(ctx.server.target) for _ in range(4)]
    wrong, stop = [], threading.Event()
    counts = {"valid": 0, "invalid": 0}

    def worker(i):
        execute = unary(channels[i % len(channels)], "Execute")
        n = 0
        while not stop.is_set() and not ctx.stop.is_set():
            n += 1
            if (n + i) % 10 == 0:
                request, want = invalid[(n // 10 + i) % len(invalid)], "INVALID_ARGUMENT"
            else:
                request, want = (MEDIUM if n % 50 == 0 else SMALL), "OK"
            outcome = ctx.call(execute, request, 10.0)
            counts["valid" if want == "OK" else "invalid"] += 1
            if outcome.code != want:
                wrong.append(f"{'valid' if want == 'OK' else 'invalid'} call: {outcome.code}")
            elif request is SMALL and n % 10 == 1 and not np.allclose(
                    output(outcome.response), SMALL_MEAN, rtol=1e-5, atol=1e-6):
                wrong.append("valid call: a wrong answer")

    start = time.monotonic()
    threads = run_threads(64, worker)
    timeline = []
    while time.monotonic() - start < seconds and not ctx.stop.is_set():
        time.sleep(min(5.0, max(0.0, seconds - (time.monotonic() - start))))
        kib = ctx.server.rss.now_kib()
        timeline.append((round(time.monotonic() - start), mb(kib)))
    stop.set()
    if join_all(threads, 15.0):
        ctx.fail("callers still running 15 s after the end")
    for ch in channels:
        ch.close()
    elapsed = time.monotonic() - start
    ctx.data.update(rss_timeline_mb=timeline, rate=ctx.sent / elapsed)
    ctx.note(f"{ctx.sent / elapsed:.0f} calls/s ({counts['valid']} valid, {counts['invalid']} "
             f"invalid); RSS every 5 s (MB): " + " ".join(f"{v}" for _, v in timeline))
    for problem in sorted(set(wrong)):
        ctx.fail(f"{wrong.count(problem)} x {problem}")
    samples = [v for _, v in timeline if v is not None]
    if len(samples) >= 2:
        growth = samples[-1] - samples[len(samples) // 2]
        if growth > 64:
            ctx.fail(f"RSS grew by {growth:.0f} MB over the second half")
    check_drained(ctx, "after the soak")


@case("idle-streams", 90, 60)
def idle_streams(ctx):
    """200 ExecuteStream streams opened and left idle; one item answered on 5 of them; 20
    valid unary calls OK within 1 s each while they are open; then every stream closed by
    the client ends OK."""
    n = 200
    lifetime = ctx.dur(45.0, 30.0)  # the streams' deadline: a hung stream cannot hang the case
    queues = [queue.Queue() for _ in range(n)]

    def requests(q):
        while True:
            item = q.get()
            if item is None:
                return
            yield item

    ch = channel(ctx.server.target)
    streams = [stream(ch)(requests(q), timeout=lifetime) for q in queues]
    time.sleep(2.0)
    for i in range(0, n, n // 5):
        queues[i].put(SMALL)
        try:
            answer = pb.ExecuteResponse.FromString(next(streams[i]))
            ctx.tally_inband(CODE_NAMES.get(answer.status.code, str(answer.status.code)))
            if answer.status.code != 0:
                ctx.fail(f"stream {i}: its item got {answer.status.message[:60]!r}")
        except grpc.RpcError as error:
            ctx.fail(f"stream {i}: ended {error.code().name} before answering its item")
    with channel(ctx.server.target) as other:
        execute = unary(other, "Execute")
        failed = [o.code for o in (ctx.call(execute, SMALL, 1.0) for _ in range(20))
                  if o.code != "OK"]
    if failed:
        ctx.fail(f"{len(failed)} of 20 valid calls failed with {n} streams open: "
                 f"{sorted(set(failed))}")
    rss_open = ctx.server.rss.now_kib()
    for q in queues:
        q.put(None)
    ends = collections.Counter()
    for s in streams:
        try:
            for _ in s:
                pass
            code = "OK"
        except grpc.RpcError as error:
            code = error.code().name
        ends[code] += 1
        ctx.tally(f"stream:{code}")
    ch.close()
    ctx.note(f"RSS with {n} streams open: {mb(rss_open)} MB; the streams ended {dict(ends)}")
    if ends["OK"] != n:
        ctx.fail(f"the streams ended {dict(ends)} (want {n} OK)")


def fire_and_cancel(ctx, execute, request):
    future = execute.future(request, timeout=10.0)
    future.cancel()
    try:
        future.result(timeout=10.0)
        code = "OK"
    except grpc.FutureCancelledError:
        code = "CANCELLED"
    except grpc.RpcError as error:
        code = error.code().name
    ctx.tally(code)


@case("cancels", 90, 60)
def cancels(ctx):
    """1,000 Executes (small and 1 MiB) cancelled right after sending: the server stays healthy
    and /metrics drains to nothing in flight."""
    with channel(ctx.server.target) as ch:
        execute = unary(ch, "Execute")
        for i in range(1000):
            if ctx.stop.is_set():
                break
            fire_and_cancel(ctx, execute, MEDIUM if i % 2 else SMALL)
    check_drained(ctx, "after the cancels")


@case("deadlines", 90, 60)
def deadlines(ctx):
    """1,000 Executes (small and 1 MiB) with 1 ms deadlines: the server stays healthy and
    /metrics drains to nothing in flight."""
    with channel(ctx.server.target) as ch:
        execute = unary(ch, "Execute")
        for i in range(1000):
            if ctx.stop.is_set():
                break
            outcome = ctx.call(execute, MEDIUM if i % 2 else SMALL, 0.001)
            if outcome.code not in ("OK", "DEADLINE_EXCEEDED"):
                ctx.fail(f"a 1 ms call got {outcome.code} {outcome.details[:60]!r}")
    check_drained(ctx, "after the deadlines")


@case("redis-faults", 150, 90, redis=True)
def redis_faults(ctx):
    """A server on a Redis store of its own, under load (4 callers, new shapes so that calls
    reach the store): Redis stopped (SIGSTOP) for 5 s, continued, killed, started again. Every
    valid call must be OK throughout, and configs must reach the new Redis (redis-cli KEYS)."""
    redis = ctx.redis
    stop, lock = threading.Event(), threading.Lock()
    phase = ["normal"]
    per_phase = {}  # phase -> [calls, failed, max seconds]
    shape_counter = iter(range(10**9))

    def worker(i):
        rng = np.random.default_rng(100 + i)
        with channel(ctx.server.target) as ch:
            execute = unary(ch, "Execute")
            while not stop.is_set() and not ctx.stop.is_set():
                with lock:
                    n = next(shape_counter)
                # A shape not seen before: a memory miss that goes to the store.
                shape = (1, 8 + n % 1024, 8 + n // 1024)
                request = mean_pooling(uniform(rng, shape)).SerializeToString()
                outcome = ctx.call(execute, request, 5.0)
                with lock:
                    stats = per_phase.setdefault(phase[0], [0, 0, 0.0])
                    stats[0] += 1
                    stats[1] += outcome.code != "OK"
                    stats[2] = max(stats[2], outcome.seconds)
                if outcome.code != "OK":
                    ctx.fail(f"{phase[0]}: a valid call got {outcome.code} "
                             f"{outcome.details[:60]!r}")

    def enter(name, seconds):
        with lock:
            phase[0] = name
        time.sleep(seconds)

    threads = run_threads(4, worker)
    enter("normal", 2.0)
    before = len((redis.cli("KEYS", "kernelserve:v1:cfg:*") or "").split())
    ctx.note(f"configs in Redis before the faults: {before}")
    if not before:
        ctx.fail("no config reached Redis before the faults")
    redis.signal(signal.SIGSTOP)
    enter("redis stopped", ctx.dur(5.0, 5.0))
    redis.signal(signal.SIGCONT)
    enter("redis continued", 2.0)
    redis.kill()
    enter("redis killed", ctx.dur(5.0, 3.0))
    redis.start()
    enter("redis restarted", 1.0)
    keys, deadline = 0, time.monotonic() + 10.0
    while time.monotonic() < deadline and not ctx.stop.is_set():
        listed = redis.cli("KEYS", "kernelserve:v1:cfg:*")
        keys = len(listed.split()) if listed else 0
        if keys:
            break
        time.sleep(0.5)
    stop.set()
    join_all(threads, 10.0)
    ctx.data["phases"] = {k: {"calls": v[0], "failed": v[1], "max_seconds": round(v[2], 3)}
                          for k, v in per_phase.items()}
    ctx.note("; ".join(f"{k}: {v[0]} calls, {v[1]} failed, slowest {v[2]:.2f} s"
                       for k, v in per_phase.items()))
    ctx.note(f"configs in the restarted Redis: {keys}")
    if not keys:
        ctx.fail("no config reached Redis in 10 s after its restart")
    text = ctx.server.metrics()
    ctx.note(f"kernelserve_store_errors_total: "
             f"{metric(text, 'kernelserve_store_errors_total'):.0f}")


@case("sigterm", 120, 90, server_args=("--grace-period=30s",), ends_server=True)
def sigterm(ctx):
    """32 flash_attention calls in flight (~0.2 s each on the CPU, one at a time), then
    SIGTERM: all 32 finish OK and the server exits 0 (--grace-period=30s)."""
    rng = np.random.default_rng(5)
    q, k, v = (uniform(rng, (1, 512, 4, 64)) for _ in range(3))
    request = flash_attention(q, k, v).SerializeToString()
    server = ctx.server
    with channel(server.target) as ch:
        execute = unary(ch, "Execute")
        futures = [execute.future(request, timeout=60.0) for _ in range(32)]
        # SIGTERM once the server holds all 32 (in flight, or already answered).
        deadline, inflight = time.monotonic() + 10.0, 0
        while time.monotonic() < deadline:
            inflight = metric(server.metrics(), "kernelserve_inflight_requests")
            if inflight + sum(f.done() for f in futures) >= 32:
                break
            time.sleep(0.01)
        server.signal(signal.SIGTERM)
        done_before = sum(f.done() for f in futures)
        ctx.data["inflight_at_sigterm"] = inflight
        ctx.note(f"SIGTERM with {inflight:.0f} calls in flight ({done_before} of 32 already "
                 "answered)")
        if inflight < 16:
            ctx.fail(f"only {inflight:.0f} of 32 calls in flight at SIGTERM (calls too fast "
                     "for this case, or not received in 10 s)")
        time.sleep(0.2)
        late = ctx.call(execute, SMALL, 2.0)
        ctx.note(f"a call sent after SIGTERM: {late.code}")
        answers = collections.Counter()
        for f in futures:
            try:
                f.result(timeout=max(0.1, 60.0 - (time.monotonic() - deadline)))
                code = "OK"
            except grpc.FutureTimeoutError:
                code = "no answer"
            except grpc.RpcError as error:
                code = error.code().name
            answers[code] += 1
            ctx.tally(code)
    if answers["OK"] != 32:
        ctx.fail(f"{answers['OK']} of the 32 in-flight calls finished OK: {dict(answers)}")
    code = server.wait(30.0)
    ctx.data["exit_code"] = code
    if code is None:
        ctx.fail("still running 30 s after SIGTERM")
        server.kill()
    elif code != 0:
        ctx.fail(f"{server.exit_text()} after SIGTERM (want exit 0)")
    ctx.note(f"the server: {server.exit_text()}")
