#!/usr/bin/python3
"""Checks every metric name in the Grafana dashboard and the Prometheus rules against the
names a real kernelserve-server exports.

Starts the server binary on free loopback ports (CPU, a Redis URL where nothing listens so that
the store error counter appears), makes one Execute and one Autotune call through grpcio stubs
generated from the proto by protoc + grpc_python_plugin, scrapes /metrics and compares.
Exit 0 = every name exported, 1 = a name is not, 77 = skipped (no server binary).
Run with /usr/bin/python3 (Debian's python3-grpcio, python3-yaml).
"""

import argparse
import contextlib
import json
import os
import random
import re
import shutil
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import time
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import promql_names  # noqa: E402

SKIP = 77
# The metric families the service contract (issue 3) fixes, with their types.
CONTRACT = {
    "kernelserve_requests_total": "counter",
    "kernelserve_request_duration_seconds": "histogram",
    "kernelserve_kernel_duration_seconds": "histogram",
    "kernelserve_config_selections_total": "counter",
    "kernelserve_autotune_runs_total": "counter",
    "kernelserve_autotune_duration_seconds": "histogram",
    "kernelserve_queue_depth": "gauge",
    "kernelserve_inflight_requests": "gauge",
    "kernelserve_store_errors_total": "counter",
    "kernelserve_device_memory_used_bytes": "gauge",
    "kernelserve_device_memory_total_bytes": "gauge",
    "kernelserve_received_bytes_total": "counter",
    "kernelserve_sent_bytes_total": "counter",
}
# Series Prometheus itself makes for every target.
PROMETHEUS_BUILTIN = {"up", "scrape_duration_seconds", "scrape_samples_scraped"}


def free_port():
    with contextlib.closing(socket.socket(socket.AF_INET, socket.SOCK_STREAM)) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def generate_stubs(proto, out_dir):
    protoc, plugin = shutil.which("protoc"), shutil.which("grpc_python_plugin")
    if not protoc or not plugin:
        raise RuntimeError("protoc and grpc_python_plugin are needed (Debian: protobuf-compiler, "
                           "protobuf-compiler-grpc)")
    root = os.path.dirname(os.path.dirname(os.path.dirname(proto)))  # .../proto
    rel = os.path.relpath(proto, root)
    subprocess.run([protoc, f"--proto_path={root}", f"--python_out={out_dir}",
                    f"--grpc_python_out={out_dir}", f"--plugin=protoc-gen-grpc_python={plugin}",
                    rel], check=True)
    sys.path.insert(0, out_dir)
    from kernelserve.v1 import kernel_service_pb2 as pb  # noqa: E402
    from kernelserve.v1 import kernel_service_pb2_grpc as pb_grpc  # noqa: E402
    return pb, pb_grpc


def start_server(binary, log):
    grpc_port, metrics_port, dead_port = free_port(), free_port(), free_port()
    args = [binary, f"--listen=127.0.0.1:{grpc_port}",
            f"--metrics-listen=127.0.0.1:{metrics_port}",
            f"--cache=redis://127.0.0.1:{dead_port}/0", "--devices=cpu", "--grace-period=2s"]
    print("starting:", " ".join(args))
    proc = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT)
    return proc, grpc_port, metrics_port


def random_tensor(pb, shape, rng):
    count = 1
    for d in shape:
        count *= d
    values = [rng.uniform(-1.0, 1.0) for _ in range(count)]
    return pb.Tensor(dtype=pb.DTYPE_F32, shape=shape, data=struct.pack(f"<{count}f", *values))


def make_calls(pb, pb_grpc, port, deadline):
    import grpc
    channel = grpc.insecure_channel(f"127.0.0.1:{port}")
    grpc.channel_ready_future(channel).result(timeout=max(1.0, deadline - time.monotonic()))
    stub = pb_grpc.KernelServiceStub(channel)
    rng = random.Random(6)
    shape = [1, 16, 64]
    response = stub.Execute(pb.ExecuteRequest(kernel="mean_pooling",
                                              inputs={"x": random_tensor(pb, shape, rng)},
                                              mean_pooling=pb.MeanPoolingParams(chunk_size=8)),
                            timeout=30)
    if response.status.code != 0 or "out" not in response.outputs:
        raise RuntimeError(f"Execute failed: {response.status}")
    print(f"Execute: ok, config source {pb.ConfigSource.Name(response.config_source)}, "
          f"out shape {list(response.outputs['out'].shape)}")
    tune = stub.Autotune(pb.AutotuneRequest(
        kernel="mean_pooling", inputs={"x": pb.Tensor(dtype=pb.DTYPE_F32, shape=[2, 32, 64])},
        mean_pooling=pb.MeanPoolingParams()), timeout=120)
    print(f"Autotune: {len(tune.candidates)} candidates, source "
          f"{pb.ConfigSource.Name(tune.config_source)}")
    channel.close()


def dockerfile_healthcheck(path):
    """The argv of the Dockerfile's HEALTHCHECK CMD (exec form), or None."""
    text = open(path, encoding="utf-8").read().replace("\\\n", " ")
    match = re.search(r"^HEALTHCHECK\b.*?\bCMD\s+(\[.*\])\s*$", text, re.M)
    return json.loads(match.group(1)) if match else None


def run_healthcheck(dockerfile, cli, port):
    """Runs the image's HEALTHCHECK with the built CLI against the test server; error or None."""
    argv = dockerfile_healthcheck(dockerfile)
    if not argv or argv[0] != "kernelserve":
        return f"Dockerfile HEALTHCHECK is not an exec-form `kernelserve` command: {argv}"
    argv = [cli] + [a.replace("127.0.0.1:50051", f"127.0.0.1:{port}") for a in argv[1:]]
    result = subprocess.run(argv, capture_output=True, text=True, timeout=30)
    print(f"HEALTHCHECK {' '.join(argv[1:])}: exit {result.returncode}, "
          f"{(result.stdout + result.stderr).strip()}")
    if result.returncode != 0:
        return f"HEALTHCHECK command exited {result.returncode} against a serving server"
    return None


def scrape(port):
    """(sample names, {family: type}) of the server's /metrics."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as r:
        return parse_exposition(r.read().decode("utf-8"))


def parse_exposition(text):
    """(sample names, {family: type}) of a Prometheus text exposition."""
    samples, types = set(), {}
    for line in text.splitlines():
        if line.startswith("# TYPE "):
            _, _, name, kind = line.split(None, 3)
            types[name] = kind.strip()
        elif line and not line.startswith("#"):
            samples.add(line.split("{", 1)[0].split(" ", 1)[0])
    return samples, types


def used_names(dashboards, rules):
    """[(file, where, name)] of every metric name the files' expressions use."""
    used = []
    for path in dashboards:
        for where, expr, kind in promql_names.dashboard_expressions(path):
            names = (promql_names.template_query_names(expr) if kind == "template"
                     else promql_names.metric_names(expr))
            if not names and kind == "promql":
                used.append((path, where, "<no metric in expression>"))
            used += [(path, where, n) for n in sorted(names)]
    for path in rules:
        for where, expr in promql_names.rule_expressions(path):
            names = promql_names.metric_names(expr)
            if not names:
                used.append((path, where, "<no metric in expression>"))
            used += [(path, where, n) for n in sorted(names)]
    return used


def check(samples, types, used):
    errors = []
    for family, kind in CONTRACT.items():
        if types.get(family) != kind:
            errors.append(f"server: family {family}: expected type {kind}, got "
                          f"{types.get(family, 'absent')}")
    for path, where, name in used:
        if name not in samples and name not in PROMETHEUS_BUILTIN:
            errors.append(f"{os.path.basename(path)}: {where}: metric '{name}' is not exported "
                          "by the server")
    return errors


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--server", required=True, help="path of kernelserve-server")
    parser.add_argument("--proto", required=True, help="proto/kernelserve/v1/kernel_service.proto")
    parser.add_argument("--dashboard", action="append", default=[])
    parser.add_argument("--rules", action="append", default=[])
    parser.add_argument("--timeout", type=float, default=60.0)
    parser.add_argument("--cli", help="path of the kernelserve CLI (runs the HEALTHCHECK)")
    parser.add_argument("--dockerfile", help="Dockerfile whose HEALTHCHECK to run with --cli")
    parser.add_argument("--metrics-file", help="check against this saved /metrics text (e.g. "
                        "scraped from a GPU server) instead of starting --server")
    args = parser.parse_args()
    used = used_names(args.dashboard, args.rules)
    if args.metrics_file:
        with open(args.metrics_file, encoding="utf-8") as f:
            samples, types = parse_exposition(f.read())
        return report(check(samples, types, used), samples, used, args)
    if not (os.path.isfile(args.server) and os.access(args.server, os.X_OK)):
        print(f"SKIP: kernelserve-server not built at '{args.server}'; build the "
              "kernelserve-server target to check the dashboard and rules against it")
        return SKIP
    return check_live_server(args, used)


def check_live_server(args, used):
    """Starts the server, calls it, scrapes it and checks `used` against the scrape."""
    with tempfile.TemporaryDirectory(prefix="ks-deploy-") as tmp:
        pb, pb_grpc = generate_stubs(os.path.abspath(args.proto), tmp)
        with open(os.path.join(tmp, "server.log"), "w+") as log:
            proc, grpc_port, metrics_port = start_server(args.server, log)
            try:
                make_calls(pb, pb_grpc, grpc_port, time.monotonic() + args.timeout)
                samples, types = scrape(metrics_port)
                health_error = None
                if args.cli and args.dockerfile and os.access(args.cli, os.X_OK):
                    health_error = run_healthcheck(args.dockerfile, args.cli, grpc_port)
                elif args.dockerfile:
                    print(f"note: CLI not built at '{args.cli}'; HEALTHCHECK not run")
            except Exception:
                log.flush()
                log.seek(0)
                print("server log:\n" + log.read())
                raise
            finally:
                proc.send_signal(signal.SIGTERM)
                try:
                    proc.wait(timeout=15)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait()
    errors = check(samples, types, used)
    if health_error:
        errors.append(health_error)
    if proc.returncode != 0:
        errors.append(f"server exited {proc.returncode} after SIGTERM, expected 0")
    return report(errors, samples, used, args)


def report(errors, samples, used, args):
    print(f"server exports {len(samples)} sample names "
          f"({sum(1 for n in samples if n.startswith('kernelserve_'))} kernelserve_*); "
          f"{len(used)} metric references in {len(args.dashboard)} dashboard(s) and "
          f"{len(args.rules)} rule file(s), {len({n for _, _, n in used})} distinct")
    for e in errors:
        print("FAIL:", e)
    if errors:
        return 1
    print("OK: every metric name used is exported; every contract family has its type")
    return 0


if __name__ == "__main__":
    sys.exit(main())
