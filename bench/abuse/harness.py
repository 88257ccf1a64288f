"""What the cases of bench/abuse.py share: the server and Redis processes, RSS sampling, the
health check, request builders, raw (bytes in, bytes out) gRPC methods and the case registry.

Every gRPC call made here carries a deadline, so that a hung server shows as
DEADLINE_EXCEEDED rather than as a hung script.
"""

import collections
import dataclasses
import importlib.util
import os
import resource
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request

import grpc
import numpy as np

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
MIB = 1 << 20
# gRPC's own connection buffers beside its resource quota of --max-inflight-bytes (the server
# gives the quota at least 64 MiB for them; the quota is a soft limit that reads may pass by as
# much): part of the memory bound of docs/SERVER.md ("Limits").
GRPC_BUFFERS = 64 * MIB
SERVICE = "/kernelserve.v1.KernelService/"
CHANNEL_OPTIONS = [("grpc.max_send_message_length", 1 << 30),
                   ("grpc.max_receive_message_length", 1 << 30)]
CODE_NAMES = {code.value[0]: code.name for code in grpc.StatusCode}


def _load_messages():
    """The generated kernel_service_pb2 module (messages only). The build writes it to
    client/python/kernelserve/v1/; without a build it is generated here with protoc
    (protobuf-compiler, installed by scripts/install-deps.sh) into a temp dir."""
    path = os.path.join(REPO, "client/python/kernelserve/v1/kernel_service_pb2.py")
    out = None
    if not os.path.exists(path):
        out = tempfile.mkdtemp(prefix="ks-abuse-stubs-")
        subprocess.run(["protoc", f"--proto_path={REPO}/proto", f"--python_out={out}",
                        "kernelserve/v1/kernel_service.proto"], check=True)
        path = os.path.join(out, "kernelserve/v1/kernel_service_pb2.py")
    spec = importlib.util.spec_from_file_location("kernel_service_pb2", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    if out is not None:
        shutil.rmtree(out, ignore_errors=True)  # loaded: the files are no longer read
    return module


pb = _load_messages()
_INFERENCE = []


def inference_messages():
    """The KServe v2 messages (proto/inference/grpc_service.proto), generated with protoc into
    a temp dir on first use."""
    if not _INFERENCE:
        out = tempfile.mkdtemp(prefix="ks-abuse-v2-")
        subprocess.run(["protoc", f"--proto_path={REPO}/proto", f"--python_out={out}",
                        "inference/grpc_service.proto", "inference/model_config.proto"],
                       check=True)
        sys.path.insert(0, out)  # grpc_service_pb2 imports inference.model_config_pb2
        spec = importlib.util.spec_from_file_location(
            "grpc_service_pb2", os.path.join(out, "inference/grpc_service_pb2.py"))
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        sys.path.remove(out)
        shutil.rmtree(out, ignore_errors=True)  # loaded, model_config_pb2 with it
        _INFERENCE.append(module)
    return _INFERENCE[0]
DTYPES = {np.dtype("<f4"): pb.DTYPE_F32, np.dtype("<f2"): pb.DTYPE_F16,
          np.dtype("<i4"): pb.DTYPE_I32, np.dtype("<i8"): pb.DTYPE_I64,
          np.dtype("bool"): pb.DTYPE_BOOL}


# As root a server serves system shared memory only when told to (the shared-memory cases need
# it); each registration is still checked against the caller's access to the object.
AS_ROOT = ["--shared-memory-as-root"] if os.geteuid() == 0 else []


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def exit_text(returncode):
    """'exit 0', 'killed by SIGABRT (-6)', ..."""
    if returncode is None:
        return "running"
    if returncode < 0:
        try:
            return f"killed by {signal.Signals(-returncode).name} ({returncode})"
        except ValueError:
            return f"killed by signal {-returncode}"
    return f"exit {returncode}"


def mb(kib):
    return None if kib is None else round(kib / 1024.0, 1)


# ---------------------------------------------------------------------------------------------
# Requests


def tensor(out, array=None, *, shape=None, dtype=np.float32):
    """Fills the pb.Tensor `out` from `array`, or with a shape and no data."""
    if array is not None:
        array = np.ascontiguousarray(array)
        out.dtype = DTYPES[array.dtype.newbyteorder("<")]
        out.shape[:] = array.shape
        out.data = array.tobytes()
    else:
        out.dtype = DTYPES[np.dtype(dtype)]
        out.shape[:] = shape


def uniform(rng, shape, dtype=np.float32):
    return rng.uniform(-1.0, 1.0, size=shape).astype(dtype)


def mean_pooling(x, config=None, request_id=""):
    """An ExecuteRequest of mean_pooling on the array x."""
    request = pb.ExecuteRequest(kernel="mean_pooling", request_id=request_id)
    tensor(request.inputs["x"], x)
    request.mean_pooling.SetInParent()
    if config:
        request.config.CopyFrom(pb.KernelConfig(**config))
    return request


def flash_attention(q, k, v, config=None):
    request = pb.ExecuteRequest(kernel="flash_attention")
    for name, array in (("q", q), ("k", k), ("v", v)):
        tensor(request.inputs[name], array)
    request.flash_attention.SetInParent()
    if config:
        request.config.CopyFrom(pb.KernelConfig(**config))
    return request


def autotune(kernel, shapes, dtype=np.float32):
    """A shapes-only AutotuneRequest (no data: the server makes up the inputs)."""
    request = pb.AutotuneRequest(kernel=kernel)
    for name, shape in shapes.items():
        tensor(request.inputs[name], shape=shape, dtype=dtype)
    getattr(request, kernel).SetInParent()
    return request


SMALL_X = uniform(np.random.default_rng(0), (1, 16, 64))
SMALL = mean_pooling(SMALL_X).SerializeToString()  # the valid call of checks and loads


def invalid_requests(rng):
    """Requests that must get INVALID_ARGUMENT, one of each kind of bad input."""
    x = uniform(rng, (2, 3, 4))
    out = []
    r = mean_pooling(x)
    r.inputs["x"].data = r.inputs["x"].data[:-4]  # len(data) != prod(shape) * itemsize
    out.append(r)
    r = mean_pooling(x)
    r.kernel = "no_such_kernel"
    out.append(r)
    r = mean_pooling(x)
    tensor(r.inputs["y"], x)  # an extra input
    out.append(r)
    r = mean_pooling(x)
    r.inputs["x"].shape[:] = [2, -3, 4]  # a negative dim
    out.append(r)
    out.append(flash_attention(uniform(rng, (1, 4, 3, 8)), uniform(rng, (1, 4, 2, 8)),
                               uniform(rng, (1, 4, 2, 8))))  # Hq % Hkv != 0
    return [r.SerializeToString() for r in out]


# ---------------------------------------------------------------------------------------------
# Raw gRPC


def channel(target):
    return grpc.insecure_channel(target, CHANNEL_OPTIONS)


def unary(ch, method):
    """A unary method that sends and returns bytes (no serializer: the bytes go as they are)."""
    return ch.unary_unary(SERVICE + method)


def stream(ch, method="ExecuteStream"):
    return ch.stream_stream(SERVICE + method)


def health_check(ch, timeout):
    """True when grpc.health.v1.Health/Check of the whole server says SERVING."""
    response = ch.unary_unary("/grpc.health.v1.Health/Check")(b"", timeout=timeout)
    return response == b"\x08\x01"  # HealthCheckResponse{status: SERVING}


@dataclasses.dataclass
class Outcome:
    code: str  # gRPC code name
    details: str
    response: bytes  # None unless OK
    seconds: float


def call(method, request, timeout, metadata=None):
    """Sends one request (with `metadata`, a list of (key, value), when given); never raises
    grpc errors."""
    start = time.monotonic()
    try:
        response = method(request, timeout=timeout, metadata=metadata)
        return Outcome("OK", "", response, time.monotonic() - start)
    except grpc.RpcError as error:
        return Outcome(error.code().name, error.details() or "", None, time.monotonic() - start)


def output(response_bytes, name="out"):
    """The float32 output `name` of a serialized ExecuteResponse."""
    t = pb.ExecuteResponse.FromString(response_bytes).outputs[name]
    return np.frombuffer(t.data, dtype=np.float32).reshape(tuple(t.shape))


def scrape(metrics_port, timeout=2.0):
    """Prometheus text of the server's /metrics, or None."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{metrics_port}/metrics",
                                    timeout=timeout) as r:
            return r.read().decode()
    except OSError:
        return None


def metric(text, name, **labels):
    """Sum of the samples of `name` whose labels include `labels`."""
    total = 0.0
    for line in (text or "").splitlines():
        if not line.startswith(name) or line.startswith("#"):
            continue
        head, _, value = line.rpartition(" ")
        metric_name, _, label_text = head.partition("{")
        if metric_name != name:
            continue
        if all(f'{k}="{v}"' in label_text for k, v in labels.items()):
            total += float(value)
    return total


# ---------------------------------------------------------------------------------------------
# Processes


def read_status_kib(pid, field):
    """A field of /proc/PID/status in KiB (VmRSS, VmHWM, RssShmem), or None."""
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith(field + ":"):
                    return int(line.split()[1])
    except OSError:
        pass
    return None


def read_rss_kib(pid):
    return read_status_kib(pid, "VmRSS")


def reset_hwm(pid):
    """Resets the kernel's high-water mark of the process's RSS (VmHWM) to its RSS now (Linux
    4.0 and later: `echo 5 > /proc/PID/clear_refs`). False when the kernel does not let us."""
    try:
        with open(f"/proc/{pid}/clear_refs", "w") as f:
            f.write("5")
        return True
    except OSError:
        return False


_CHILDREN = []  # every server and redis-server started, for kill_children


def spawn(args, **kwargs):
    process = subprocess.Popen(args, **kwargs)
    _CHILDREN.append(process)
    return process


def kill_children():
    """Kills what this run started and is still running (at exit, or after a crash of a case
    or an interrupt)."""
    for process in _CHILDREN:
        if process.poll() is None:
            process.kill()
            process.wait()


class RssSampler(threading.Thread):
    """Samples a process's RSS every 50 ms; kills it (SIGKILL) past `limit_kib`, so that a
    ballooning server cannot take the machine down with it. The peak is also read from the
    kernel's high-water mark (VmHWM), which sees what happens between two samples."""

    def __init__(self, process, limit_kib):
        super().__init__(daemon=True)
        self.process = process
        self.limit_kib = limit_kib
        self.peak_kib = 0  # the highest sample since reset_peak
        self.hwm_kib = 0  # VmHWM as last read, since reset_peak when hwm_reset
        self.hwm_reset = True  # VmHWM counts from the process's start, or from reset_peak
        self.earlier_kib = 0  # the peak of the case's earlier steps (start_step)
        self.last_kib = None
        self.killed_at_kib = None
        self._done = threading.Event()
        self.start()

    def run(self):
        """limit_kib 0: no limit."""
        while not self._done.wait(0.05) and self.process.poll() is None:
            kib = self._read()
            if kib is None:
                continue
            if self.limit_kib and kib > self.limit_kib and self.killed_at_kib is None:
                self.killed_at_kib = kib
                self.process.kill()

    def _read(self):
        """Reads VmRSS and VmHWM; returns VmRSS in KiB, or None when the process is gone."""
        if self.process.poll() is not None:
            return None
        kib = read_rss_kib(self.process.pid)
        hwm = read_status_kib(self.process.pid, "VmHWM")
        if kib is None:
            return None
        self.last_kib = kib
        self.peak_kib = max(self.peak_kib, kib)
        if hwm is not None and self.hwm_reset:
            self.hwm_kib = max(self.hwm_kib, hwm)
        return kib

    def reset_peak(self):
        """Starts a new peak (the next case's): the samples' and, where the kernel lets us
        reset it, VmHWM."""
        self.earlier_kib = 0
        self._reset()

    def start_step(self):
        """Starts the peak of a step of a case (step_peak) without losing the case's (peak)."""
        self.earlier_kib = self.peak()
        self._reset()

    def _reset(self):
        self.hwm_reset = reset_hwm(self.process.pid)
        self.hwm_kib = 0
        self.peak_kib = 0
        self.now_kib()

    def step_peak(self):
        """The peak RSS in KiB since start_step or reset_peak (or the start): VmHWM where it
        counts from then, else the highest sample; the RSS the limit killed the process at, if
        it did."""
        self._read()
        return max(self.peak_kib, self.hwm_kib, self.killed_at_kib or 0)

    def peak(self):
        """The peak RSS in KiB since reset_peak (or the start), steps included."""
        return max(self.earlier_kib, self.step_peak())

    def now_kib(self):
        return self._read()

    def stop(self):
        self._done.set()


DEFAULT_INFLIGHT_BYTES = 4 << 30  # the server's --max-inflight-bytes when not given


def flag_value(args, name):
    """The value of the last `--name=VALUE` (or --name_with_underscores=VALUE) in `args`, or
    None."""
    value = None
    for arg in args:
        for spelling in (name, name.replace("-", "_")):
            if arg.startswith(f"--{spelling}="):
                value = arg.split("=", 1)[1]
    return value


class Server:
    """A kernelserve-server on free loopback ports (gRPC and metrics), CPU only. rss_limit_mb:
    killed past this RSS, and its address space limited to 4x that (0: neither). `launcher`:
    a command that runs the server (its arguments follow), such as prlimit with limits of its
    own. `metadata`: what check() sends with its Execute (a token, under --auth-token-file).
    baseline_kib: its RSS once serving, the idle baseline that RSS should come back to."""

    def __init__(self, build, cache, extra_args=(), rss_limit_mb=6144, log_dir=None,
                 launcher=(), metadata=None):
        self.build, self.cache, self.extra_args = build, cache, list(extra_args)
        self.launcher, self.metadata = tuple(launcher), metadata
        self.rss_limit_mb = rss_limit_mb
        cap = flag_value(self.extra_args, "max-inflight-bytes")
        self.inflight_cap = int(cap) if cap is not None else DEFAULT_INFLIGHT_BYTES
        self.port, self.metrics_port = free_port(), free_port()
        self.target = f"127.0.0.1:{self.port}"
        fd, self.log_path = tempfile.mkstemp(prefix="kernelserve-server-", suffix=".log",
                                             dir=log_dir)
        os.close(fd)
        self.args = [*self.launcher, os.path.join(build, "server/kernelserve-server"),
                     f"--listen={self.target}", f"--metrics-listen=127.0.0.1:{self.metrics_port}",
                     f"--cache={cache}", "--devices=cpu", *AS_ROOT, *self.extra_args]
        with open(self.log_path, "wb") as log:
            # No preexec_fn: a fork() of this many-threaded gRPC client can crash it (grpc's
            # fork handlers); without one, Popen spawns with vfork.
            self.process = spawn(self.args, stdout=log, stderr=subprocess.STDOUT)
        if rss_limit_mb:
            # A backstop under the RSS sampler: address space of 4x the RSS limit, so that
            # memory touched faster than the sampler looks fails to be allocated instead.
            limit = rss_limit_mb * MIB * 4
            resource.prlimit(self.process.pid, resource.RLIMIT_AS, (limit, limit))
        self.rss = RssSampler(self.process, rss_limit_mb * 1024)
        self._wait_serving(30.0)
        self.baseline_kib = self.rss.now_kib()

    def _wait_serving(self, timeout):
        deadline = time.monotonic() + timeout
        with channel(self.target) as ch:
            while time.monotonic() < deadline:
                if self.process.poll() is not None:
                    raise RuntimeError(f"kernelserve-server {exit_text(self.process.returncode)}:"
                                       f"\n{self.log_tail()}")
                try:
                    if health_check(ch, 1.0):
                        return
                except grpc.RpcError:
                    pass
                time.sleep(0.1)
        self.kill()
        raise RuntimeError(f"kernelserve-server not SERVING after {timeout} s:\n{self.log_tail()}")

    def restarted(self):
        """A new server with the same flags (new ports)."""
        return Server(self.build, self.cache, self.extra_args, self.rss_limit_mb,
                      os.path.dirname(self.log_path), self.launcher, self.metadata)

    def alive(self):
        return self.process.poll() is None

    def exit_text(self):
        if self.rss.killed_at_kib is not None:
            return f"killed by the RSS limit at {mb(self.rss.killed_at_kib):.0f} MB"
        return exit_text(self.process.poll())

    def log_tail(self, lines=20):
        try:
            with open(self.log_path, errors="replace") as f:
                return "".join(f.readlines()[-lines:])
        except OSError:
            return ""

    def metrics(self):
        return scrape(self.metrics_port)

    def signal(self, number):
        if self.alive():
            self.process.send_signal(number)

    def wait(self, timeout):
        """The exit code, or None when still running after `timeout` seconds."""
        try:
            return self.process.wait(timeout)
        except subprocess.TimeoutExpired:
            return None

    def kill(self):
        if self.alive():
            self.process.kill()
        self.process.wait()
        self.rss.stop()

    def stop(self, timeout=10.0):
        """SIGTERM, then SIGKILL after `timeout` s. Returns the exit code."""
        self.signal(signal.SIGTERM)
        if self.wait(timeout) is None:
            self.kill()
        self.rss.stop()
        return self.process.returncode


def check(server):
    """The health check after a case: process alive, health SERVING and a valid Execute
    answered OK, each within a second. Returns (healthy, reason)."""
    if not server.alive():
        return False, f"died ({server.exit_text()})"
    with channel(server.target) as ch:
        try:
            grpc.channel_ready_future(ch).result(timeout=2.0)
        except grpc.FutureTimeoutError:
            return False, "hang (no connection in 2 s)" if server.alive() else \
                f"died ({server.exit_text()})"
        try:
            if not health_check(ch, 1.0):
                return False, "health not SERVING"
        except grpc.RpcError as error:
            return False, _reason("health", error.code().name, server)
        outcome = call(unary(ch, "Execute"), SMALL, 1.0, server.metadata)
        if outcome.code != "OK":
            return False, _reason("Execute", outcome.code, server)
    return True, ""


def _reason(what, code, server):
    if not server.alive():
        return f"died ({server.exit_text()})"
    if code == "DEADLINE_EXCEEDED":
        return f"hang ({what} not answered in 1 s)"
    return f"unhealthy ({what}: {code})"


class Redis:
    """A redis-server on a free port, without persistence; stop/cont/kill/restart for faults."""

    def __init__(self):
        self.port = free_port()
        self.url = f"redis://127.0.0.1:{self.port}/0"
        self.process = None
        self.start()

    def start(self):
        self.process = spawn(
            ["redis-server", "--port", str(self.port), "--bind", "127.0.0.1", "--save", "",
             "--appendonly", "no"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            if self.cli("PING") == "PONG":
                return
            time.sleep(0.05)
        raise RuntimeError("redis-server did not answer PING")

    def cli(self, *args):
        try:
            return subprocess.run(["redis-cli", "-p", str(self.port), *args], capture_output=True,
                                  text=True, timeout=5).stdout.strip()
        except subprocess.TimeoutExpired:
            return None

    def signal(self, number):
        if self.process.poll() is None:
            self.process.send_signal(number)

    def kill(self):
        if self.process.poll() is None:
            self.process.kill()
        self.process.wait()

    def stop(self):
        self.signal(signal.SIGCONT)
        self.kill()


# ---------------------------------------------------------------------------------------------
# Cases


@dataclasses.dataclass
class Case:
    name: str
    func: object
    limit: float  # seconds the case may take (full run)
    quick_limit: float  # the same with --quick
    server_args: tuple = ()  # flags of its own server; () = the shared server
    redis: bool = False  # runs on its own server with --cache=redis://... of its own Redis
    ends_server: bool = False  # the case stops its server itself (no health check after)
    rss_growth_mb: float = None  # FAIL when the peak passes the RSS at the start by this
    launcher: tuple = ()  # a command its own server runs under (prlimit ...)
    # prepare(workdir) -> (server flags, metadata of the checks' Execute): for flags naming
    # files the case writes first (a token file); the case then gets a server of its own.
    prepare: object = None


CASES = collections.OrderedDict()


def case(name, limit, quick_limit, **kwargs):
    def register(func):
        CASES[name] = Case(name, func, limit, quick_limit, **kwargs)
        return func
    return register


class Ctx:
    """What a case works with: the server (restarted when a step leaves it down), counters of
    the requests it sent by gRPC code, its failures and notes."""

    def __init__(self, runner, spec, quick):
        self.runner, self.spec, self.quick = runner, spec, quick
        self.codes = collections.Counter()
        self.sent = 0
        self.problems = []
        self.notes = []
        self.data = {}  # more results for --json
        self.servers = [runner.server]
        self.restarts = 0  # times the server went down during the case and was restarted
        self.redis = None  # the Redis of a case with redis=True
        self.stop = threading.Event()  # set when the case ran out of time
        self.pool_bytes = 0  # the most bytes of shared-memory regions it held registered at once
        self._registered = 0
        self._lock = threading.Lock()

    @property
    def server(self):
        return self.servers[-1]

    def dur(self, full, quick):
        return quick if self.quick else full

    def tally(self, code, n=1):
        with self._lock:
            self.sent += n
            self.codes[code] += n

    def tally_inband(self, code):
        """An in-band status (stream or batch item): counted, but not as a request sent."""
        with self._lock:
            self.codes[f"item:{code}"] += 1

    def fail(self, reason):
        with self._lock:
            if reason not in self.problems:
                self.problems.append(reason)

    def note(self, text):
        self.notes.append(text)

    def call(self, method, request, timeout, metadata=None):
        outcome = call(method, request, timeout, metadata)
        self.tally(outcome.code)
        return outcome

    def registered(self, byte_size):
        """Counts `byte_size` bytes of shared memory registered (negative: unregistered), for
        the bound on RSS: a region's pages the server touches are in its RSS."""
        with self._lock:
            self._registered += byte_size
            self.pool_bytes = max(self.pool_bytes, self._registered)

    def healthy(self, label):
        """Checks the server; when it is down or hung, records why (prefixed by `label`) and
        restarts it so that the case can go on. Returns whether it was healthy."""
        ok, reason = check(self.server)
        if not ok:
            self.fail(f"{label}: {reason}")
            self.runner.replace_server(self)
        return ok

    def rss_wait(self, baseline_kib, slack_mb, timeout):
        """Waits until the server's RSS is within `slack_mb` of `baseline_kib`. Returns
        (seconds it took or None, RSS at the end in KiB)."""
        start = time.monotonic()
        while True:
            kib = self.server.rss.now_kib()
            if kib is None:
                return None, None
            if kib <= baseline_kib + slack_mb * 1024:
                return time.monotonic() - start, kib
            if time.monotonic() - start > timeout or self.stop.is_set():
                return None, kib
            time.sleep(0.5)


def run_threads(count, target, *args):
    threads = [threading.Thread(target=target, args=(i, *args), daemon=True)
               for i in range(count)]
    for t in threads:
        t.start()
    return threads


def join_all(threads, timeout):
    deadline = time.monotonic() + timeout
    for t in threads:
        t.join(max(0.0, deadline - time.monotonic()))
    return sum(t.is_alive() for t in threads)


# The server gives memory back once per idle time, when its RSS has grown this much past the
# lowest RSS a release came back to: RSS within it of the baseline is back.
IDLE_SLACK_MB = 64
IDLE_SECONDS = 60.0  # how long after a case its server's RSS may take to come back


class IdleWatch(threading.Thread):
    """Watches a server left idle: its RSS, read from /proc (a request would end the idle
    time), every 0.5 s for up to `seconds`, until it is within IDLE_SLACK_MB of
    `baseline_kib`. Then stops the server when `stop_after`. Results: back_seconds (None when
    it did not come back), rss_kib (at the end), baseline_kib."""

    def __init__(self, server, baseline_kib, seconds=IDLE_SECONDS, stop_after=False):
        super().__init__(daemon=True)
        self.server, self.baseline_kib, self.seconds = server, baseline_kib, seconds
        self.stop_after = stop_after
        self.back_seconds, self.rss_kib = None, None
        self.start()

    def run(self):
        start = time.monotonic()
        try:
            while True:
                kib = self.server.rss.now_kib()
                if kib is None:
                    return
                self.rss_kib = kib
                if kib <= self.baseline_kib + IDLE_SLACK_MB * 1024:
                    self.back_seconds = time.monotonic() - start
                    return
                if time.monotonic() - start > self.seconds:
                    return
                time.sleep(0.5)
        finally:
            if self.stop_after:
                self.server.stop() if self.server.alive() else self.server.kill()
