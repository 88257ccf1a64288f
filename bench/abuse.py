#!/usr/bin/python3
"""Abuse and soak run of kernelserve-server: one request never takes the server down.

    bench/abuse.py BUILD [--cases a,b,...] [--quick] [--json FILE] [--cache memory|file]
                         [--fresh] [--rss-limit-mb N] [--keep-logs]

BUILD is a build directory (server/kernelserve-server). The script starts its own server
(--devices=cpu, --cache=memory or a temp file store, free ports for gRPC and metrics) and, for
redis-faults, its own redis-server on a free port. Cases run one after another on one server
(--fresh: a new server for each); a case with flags of its own (a token file, a launcher such
as prlimit) gets a server of its own.
After each case the server is checked: process alive (else its exit code), health SERVING and
a valid Execute answered OK, each within a second. A server that died or hung is restarted, so
later cases still run; cases with several steps check (and restart) after each step.
Every call has a deadline and every case a time limit, so a hung server shows as FAIL "hang".
RSS of the server comes from /proc every 50 ms; past --rss-limit-mb (4096) the server is killed,
and its address space is limited to 4x that (RLIMIT_AS), so that a ballooning server cannot
take the machine with it (--rss-limit-mb 0: neither).

Memory, per case: the peak is the kernel's high-water mark (VmHWM, reset at the start of each
case through /proc/PID/clear_refs; the highest 50 ms sample where that cannot be done). It must
stay within the bound of docs/SERVER.md ("Limits"): the RSS at the case's start + 2 x the
server's --max-inflight-bytes + 64 MiB of gRPC's own connection buffers + the pools, which on
the CPU are the shared-memory regions the case held registered at once (their pages the server
touches count in its RSS; the page-locked pool is GPU-only). Then the server is left idle, and
its RSS must come back within 64 MB (the growth past which the server gives memory back) of its
idle baseline, its RSS once it served, within 60 s: a case's own server is watched right after the case (while later cases run) and
then stopped; the shared server once, after the last case, for all the rows it served.

Printed: one row per case (requests sent, outcomes by gRPC code, healthy after, peak RSS /
bound, RSS after idle and how long it took to come back, time, verdict), then each case's notes
and reasons. `stream:CODE` counts streams by their final status, `item:CODE` the in-band
statuses of stream items. --json FILE writes the rows (with start_rss_mb, inflight_cap_mb,
regions_mb, bound_mb, idle_check, idle_baseline_mb, rss_idle_mb, idle_back_seconds). --quick
shortens durations and counts for a smoke run.

Known bugs (expected to FAIL until fixed):
  override-huge        config num_warps=1e9, block_q=block_k=2^31-1 (flash_attention),
                       block_size=1e9 on tiny inputs: INVALID_ARGUMENT, server keeps answering
  override-huge-large  the same on inputs over 64 KiB (worker thread), and as the middle item
                       of an ExecuteStream: in-band INVALID_ARGUMENT, stream OK
  autotune-synth-huge  shapes-only Autotune of x [2^20,2^20,1024] (RESOURCE_EXHAUSTED or
                       INVALID_ARGUMENT with a message) and of a 256 MiB x (OK or a clear
                       error), RSS comes back
  autotune-starve      shapes-only flash_attention Autotune [1,2048,8,64], 2 s deadline, while
                       small Executes (1 s deadlines) run for 10 s: none fails once the
                       Autotune's deadline has passed; /metrics counts it with the client's code
  stream-garbage       ExecuteStream [valid, b'\\xff', valid]: 3 answers, the middle one
                       INVALID_ARGUMENT in-band, stream OK
  unparseable          Execute with bytes that do not parse and 2,000 (quick: 200) mutations
                       of a valid request: INVALID_ARGUMENT with a message for those that do
                       not parse; never UNIMPLEMENTED/UNKNOWN/INTERNAL/timeouts
  huge-error           a 100,000-dim shape: message < 1 KiB; 200 valid calls on the same
                       channel after it all OK
  dup-data             a > 1 MiB request whose x has two data fields: result = mean of the
                       last (protobuf semantics)
  inflight-rss         --max-inflight-bytes=300000000, 8 concurrent 100 MiB calls: peak RSS
                       within start + 2 x cap (received + accepted), RSS back within 60 s
Clean (must stay clean):
  soak                 60 s (quick: 10 s), concurrency 64, 10% invalid: every valid call OK,
                       every invalid one INVALID_ARGUMENT; RSS every 5 s, no growth
  idle-streams         200 idle ExecuteStreams: items on 5 of them answered, valid calls OK,
                       all 200 end OK when closed
  cancels              1,000 calls cancelled right after sending; healthy, nothing in flight
  deadlines            1,000 calls with 1 ms deadlines; healthy, nothing in flight
  redis-faults         Redis SIGSTOPped 5 s, continued, killed, restarted, under load: every
                       valid call OK, configs written to the restarted Redis
  sigterm              32 calls in flight, then SIGTERM: all 32 OK, exit code 0
The surfaces of issue 32 (must stay clean):
  shm-shrink           a registered object shrunk with ftruncate: a ref, an output_regions
                       entry, a stream item and a KServe v2 input in the lost part are
                       INVALID_ARGUMENT naming its size; the part still there serves
  shm-shrink-race      the object shrunk while flash_attention reads it from the region: OK,
                       DATA_LOSS or INVALID_ARGUMENT, then FAILED_PRECONDITION; registered again
                       it serves the same answer
  shm-region-flood     five identities of a token file register 300 regions of 1 byte each:
                       256 each, 1024 in all, then RESOURCE_EXHAUSTED naming the flag; calls into
                       regions still work; identities see only their own regions
  shm-name-flood       names and keys that break the rules (1 MiB, NUL, '/', '..'; v1 and v2):
                       INVALID_ARGUMENT, printable and short; 1,100 (quick: 200) 1 MiB names:
                       no growth, status answers small
  fd-exhaustion        a server under prlimit --nofile=1024:1024, 1,100 connections held and
                       closed (3 rounds, quick 2): new clients get OK or UNAVAILABLE at once,
                       and are served again within 5 s of the close
  slow-reader          ExecuteStream of 24 x 16 MiB answers, unread for 15 s (quick: 6):
                       others served meanwhile, then all 24 answers; RSS within the bound
  slow-reader-v2       the same through ModelStreamInfer
  stuck-stream-release a native and a v2 stream stuck for 35 s (quick: 8), then cancelled:
                       RSS back within 60 s
  batch-sizing         ExecuteBatch of mean_pooling_bwd with a small first item: RESOURCE_EXHAUSTED
                       at once naming --max-inflight-bytes or --max-message-bytes; one that fits
                       is OK
  bwd-peaks            --max-inflight-bytes=2GiB: Execute of a 1023 MiB dx (quick: 256 MiB) and a
                       shapes-only Autotune of a 512 MiB x (quick: 128 MiB): peaks within what
                       they count
  config-strings       a token file (admin and caller): 1 MiB algorithm/backend configs refused
                       (1,000, quick 100) without growth; PutConfig/DeleteConfig by a caller
                       PERMISSION_DENIED; no token UNAUTHENTICATED; /metrics behind its token
  identity-quotas      one identity floods (rate, then in-flight bytes) while another calls:
                       the other is always served, the flood is refused naming its identity
  v2-timeout           KServe v2 timeout 0 (none), 2^63-1, 2^64-1 (uint64): OK; -1 INVALID_ARGUMENT
Resident tensors (must stay clean):
  resident-bad         bad names (1 MiB, NUL), shapes, sizes, offsets, dtypes, rows, a GPU on a
                       CPU server, a ref with a region too, an output of another shape:
                       INVALID_ARGUMENT; another shape ALREADY_EXISTS; deleted between calls
                       NOT_FOUND
  resident-flood       two identities create 16 MiB tensors until their quota / the server's
                       cap: RESOURCE_EXHAUSTED naming the flag, nothing evicted, each sees its
                       own; 2,000 (quick 300) 1 MiB names INVALID_ARGUMENT without growth
  resident-race        calls, whole writes and delete/re-create of one tensor at once: no call
                       reads a torn tensor; OK, NOT_FOUND or FAILED_PRECONDITION only
"""
import argparse
import atexit
import faulthandler
import json
import os
import shutil
import signal
import sys
import tempfile
import threading
import time

# bench/abuse/ (the package) is found before this file under the name `abuse`.
from abuse import known, clean, surfaces, resident  # noqa: F401,I100  (they register the cases, in order)
from abuse.harness import (CASES, GRPC_BUFFERS, IDLE_SECONDS, IDLE_SLACK_MB, MIB, Ctx, IdleWatch,
                           Redis, Server, check, kill_children, mb)


class Runner:
    """Runs the cases, keeps the shared server and restarts it when a case leaves it down; then
    watches each server idle (IdleWatch): a case's own server right after it (in the
    background, while the next cases run), the shared server once at the end."""

    def __init__(self, opts):
        self.opts = opts
        self.workdir = tempfile.mkdtemp(prefix="ks-abuse-")
        self.cache = "memory" if opts.cache == "memory" else f"file:{self.workdir}/configs.json"
        self.shared = None
        self.shared_rows = []  # rows of the cases run on self.shared, for its final idle check
        self.watches = []  # (row, IdleWatch) of the cases' own servers

    def new_server(self, extra_args=(), cache=None, launcher=(), metadata=None):
        return Server(self.opts.build, cache or self.cache, extra_args, self.opts.rss_limit_mb,
                      self.workdir, launcher, metadata)

    def forget_shared(self, why):
        """The shared server is gone: its rows get no idle check."""
        for row in self.shared_rows:
            row["idle_check"] = f"none ({why})"
        self.shared_rows = []
        self.shared = None

    def replace_server(self, ctx):
        """Kills ctx's current server and starts one like it (called when it died or hung)."""
        old = ctx.server
        old.kill()
        ctx.note(f"server restarted ({old.exit_text()})")
        ctx.restarts += 1
        new = old.restarted()
        ctx.servers.append(new)
        if old is self.shared:
            self.forget_shared("the server went down in a later case")
            self.shared = new

    def run(self, spec):
        redis = Redis() if spec.redis else None
        args, metadata = list(spec.server_args), None
        if spec.prepare is not None:
            more, metadata = spec.prepare(self.workdir)
            args += list(more)
        owned = (bool(args) or bool(spec.launcher) or redis is not None or self.opts.fresh)
        if owned:
            server = self.new_server(args, redis.url if redis else None, spec.launcher, metadata)
        else:
            if self.shared is None or not self.shared.alive():
                if self.shared is not None:
                    self.forget_shared("the server went down")
                self.shared = self.new_server()
            server = self.shared
        self.server = server
        ctx = Ctx(self, spec, self.opts.quick)
        ctx.redis = redis
        start_kib = server.rss.now_kib() or 0
        server.rss.reset_peak()
        limit = spec.quick_limit if self.opts.quick else spec.limit
        start = time.monotonic()

        def body():
            try:
                spec.func(ctx)
            except Exception as error:  # a bug of the case, or of the server it met
                ctx.fail(f"the case raised {type(error).__name__}: {error}")

        thread = threading.Thread(target=body, daemon=True)
        thread.start()
        thread.join(limit)
        if thread.is_alive():
            ctx.stop.set()
            ctx.fail(f"hang: the case did not finish in {limit:.0f} s")
        seconds = time.monotonic() - start

        ok = True
        if spec.ends_server:
            healthy = "exited" if not ctx.server.alive() else "running"
        else:
            ok, reason = check(ctx.server)
            healthy = "yes" if ok and not ctx.restarts else "no"
            if ctx.restarts:  # it went down during the case
                healthy += f" (restarted {ctx.restarts}x)"
            if not ok:
                ctx.fail(f"after the case: {reason}")
        peak = max(s.rss.peak() for s in ctx.servers)
        after = ctx.server.rss.now_kib()
        if spec.rss_growth_mb and peak - start_kib > spec.rss_growth_mb * 1024:
            ctx.fail(f"RSS grew by {mb(peak - start_kib):.0f} MB (limit {spec.rss_growth_mb} MB)")
        # The bound of docs/SERVER.md ("Limits"): received and accepted calls within twice
        # --max-inflight-bytes, plus gRPC's own connection buffers (its resource quota is a
        # soft one); on the CPU the only pool is the shared memory the case held registered
        # (the server's RSS counts the pages of it that it touched).
        cap = ctx.server.inflight_cap
        bound = start_kib + (2 * cap + GRPC_BUFFERS + ctx.pool_bytes) / 1024
        if peak > bound:
            ctx.fail(f"peak RSS {mb(peak):.0f} MB over the bound {mb(bound):.0f} MB (start "
                     f"{mb(start_kib):.0f} + 2 x {cap / MIB:.0f} MiB in flight + "
                     f"{GRPC_BUFFERS / MIB:.0f} MiB of gRPC's buffers + "
                     f"{ctx.pool_bytes / MIB:.0f} MiB of regions)")
        row = {
            "case": spec.name, "sent": ctx.sent, "codes": dict(ctx.codes.most_common()),
            "healthy_after": healthy, "max_rss_mb": mb(peak), "rss_after_mb": mb(after),
            "start_rss_mb": mb(start_kib), "inflight_cap_mb": round(cap / MIB, 1),
            "regions_mb": round(ctx.pool_bytes / MIB, 1), "bound_mb": mb(bound),
            "idle_check": None, "idle_baseline_mb": None, "rss_idle_mb": None,
            "idle_back_seconds": None,
            "seconds": round(seconds, 1), "verdict": "FAIL" if ctx.problems else "ok",
            "reasons": list(ctx.problems), "notes": list(ctx.notes), "data": dict(ctx.data),
        }
        if spec.ends_server:
            row["idle_check"] = "none (the case stops its server)"
            if ctx.server.alive():
                ctx.server.kill()
        elif owned:
            if ok:
                self.watches.append((row, IdleWatch(ctx.server, ctx.server.baseline_kib,
                                                    stop_after=True)))
            else:
                row["idle_check"] = "none (the server was unhealthy)"
                ctx.server.kill()
        elif not ok:
            ctx.server.kill()
            self.shared_rows.append(row)
            self.forget_shared("the server was unhealthy after a case")
        else:
            self.shared_rows.append(row)
        if redis is not None:
            redis.stop()
        return row

    def finish(self):
        """Waits for the idle checks: the shared server's (once, now) and those of the cases'
        own servers still running; records each in its rows (a FAIL when RSS did not come back
        within IDLE_SECONDS)."""
        checks = list(self.watches)
        if self.shared is not None and self.shared.alive() and self.shared_rows:
            final = IdleWatch(self.shared, self.shared.baseline_kib)
            checks += [(row, final) for row in self.shared_rows]
        for row, watch in checks:
            watch.join()
            row["idle_check"] = "case" if watch.stop_after else "final (shared server)"
            row["idle_baseline_mb"] = mb(watch.baseline_kib)
            row["rss_idle_mb"] = mb(watch.rss_kib)
            row["idle_back_seconds"] = (None if watch.back_seconds is None
                                        else round(watch.back_seconds, 1))
            if watch.back_seconds is None:
                row["reasons"].append(
                    f"RSS {mb(watch.rss_kib) or 0:.0f} MB {IDLE_SECONDS:.0f} s idle after "
                    f"the case{'' if watch.stop_after else 's'}, not back within "
                    f"{IDLE_SLACK_MB} MB of the idle baseline {mb(watch.baseline_kib):.0f} MB")
                row["verdict"] = "FAIL"

    def close(self):
        if self.shared is not None:
            self.shared.stop()
        if self.opts.keep_logs:
            print(f"server logs kept in {self.workdir}")
        else:
            shutil.rmtree(self.workdir, ignore_errors=True)


def codes_text(codes):
    return ", ".join(f"{code} {n}" for code, n in codes.items()) or "-"


def verdict_text(row):
    if row["verdict"] == "ok":
        return "ok"
    first, more = row["reasons"][0], len(row["reasons"]) - 1
    if len(first) > 72:
        first = first[:69] + "..."
    return f"FAIL: {first}" + (f" (+{more} more)" if more else "")


def peak_text(row):
    """'PEAK / BOUND MB'."""
    if not row["max_rss_mb"]:
        return "-"
    return f"{row['max_rss_mb']:.0f} / {row['bound_mb']:.0f} MB"


def idle_text(row):
    """The RSS after idle and how long it took to come back, or why there is none."""
    check = row["idle_check"] or "none"
    if check.startswith("none"):
        return "-"
    rss = f"{row['rss_idle_mb']:.0f} MB" if row["rss_idle_mb"] is not None else "?"
    when = (f"in {row['idle_back_seconds']:.0f} s" if row["idle_back_seconds"] is not None
            else f"not back in {IDLE_SECONDS:.0f} s")
    return f"{rss} {when}" + (" (final)" if check.startswith("final") else "")


def print_table(rows):
    header = ["case", "sent", "outcomes", "healthy", "peak / bound", "after idle", "time",
              "verdict"]
    table = [[r["case"], str(r["sent"]), codes_text(r["codes"]), r["healthy_after"],
              peak_text(r), idle_text(r), f"{r['seconds']:.0f} s", verdict_text(r)]
             for r in rows]
    widths = [max(len(line[i]) for line in [header] + table) for i in range(len(header) - 1)]
    for line in [header] + table:
        print("  ".join(cell.ljust(w) if i != 1 else cell.rjust(w)
                        for i, (cell, w) in enumerate(zip(line, widths + [0]))).rstrip())


def print_details(rows):
    for r in rows:
        print(f"\n{r['case']}: {r['verdict']}")
        for reason in r["reasons"]:
            print(f"  FAIL {reason}")
        for note in r["notes"]:
            print(f"  - {note}")


def main():
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("build", help="build directory with server/kernelserve-server")
    parser.add_argument("--cases", default=",".join(CASES),
                        help="comma-separated cases (default: all, in the order above)")
    parser.add_argument("--quick", action="store_true", help="short durations: a smoke run")
    parser.add_argument("--json", metavar="FILE", help="write the rows to FILE")
    parser.add_argument("--cache", choices=("memory", "file"), default="memory",
                        help="the server's store: none, or a file in a temp dir")
    parser.add_argument("--fresh", action="store_true", help="a new server for every case")
    parser.add_argument("--rss-limit-mb", type=int, default=4096,
                        help="kill the server when its RSS passes this (default 4096; 0: no "
                        "limit, no address-space limit either)")
    parser.add_argument("--keep-logs", action="store_true", help="keep the servers' logs")
    opts = parser.parse_args()
    names = [n for n in opts.cases.split(",") if n]
    unknown = [n for n in names if n not in CASES]
    if unknown:
        parser.error(f"unknown cases {', '.join(unknown)}; known: {', '.join(CASES)}")
    server_binary = os.path.join(opts.build, "server/kernelserve-server")
    if not os.access(server_binary, os.X_OK):
        parser.error(f"{server_binary} is not an executable")

    faulthandler.enable()  # a crash of the client (grpc) shows where each thread was
    atexit.register(kill_children)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # through the finally below
    runner = Runner(opts)
    rows, start = [], time.monotonic()
    try:
        for name in names:
            print(f"[{time.monotonic() - start:5.0f} s] {name} ...", file=sys.stderr, flush=True)
            row = runner.run(CASES[name])
            print(f"[{time.monotonic() - start:5.0f} s] {name}: {verdict_text(row)}",
                  file=sys.stderr, flush=True)
            rows.append(row)
        print(f"[{time.monotonic() - start:5.0f} s] waiting for the servers' RSS after idle ...",
              file=sys.stderr, flush=True)
        runner.finish()
    finally:
        runner.close()
        kill_children()
    total = time.monotonic() - start
    print(f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, {opts.build}, "
          f"{'quick' if opts.quick else 'full'} run, cache {opts.cache}, {os.cpu_count()} CPUs, "
          f"{total:.0f} s")
    print_table(rows)
    print_details(rows)
    if opts.json:
        with open(opts.json, "w") as f:
            json.dump({"mode": "quick" if opts.quick else "full", "build": opts.build,
                       "cache": opts.cache, "seconds": round(total, 1), "rows": rows}, f,
                      indent=2)
    failed = sum(r["verdict"] != "ok" for r in rows)
    print(f"\n{len(rows) - failed} ok, {failed} FAIL")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
