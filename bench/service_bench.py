#!/usr/bin/python3
"""Service benchmark on this machine (CPU platform): kernelserve-server and `kernelserve bench`
on one loopback, for the speed targets of issue 3.

    bench/service_bench.py BUILD [BUILD2 ...] [--cases tiny,c32,in,both] [--rounds N] [--floor]
                           [--protocols native,v2]

Each BUILD is a build directory (server/kernelserve-server, client/kernelserve). Every build
gets its own server (--cache memory, metrics off, a free port); the runs are interleaved
round by round, so that builds compared in one call share the machine's load. Printed per
build and case: the median over rounds of the client p50 (and the spread), throughput,
server time, CPU time per call of the server and the client processes, load and steal.

--floor adds the first build's bench/kernelserve-grpc-floor, a bare gRPC server that answers
Execute with a same-sized reply and does nothing else, as one more server in the rounds: the
same client against it measures what gRPC itself costs on this machine.

--protocols native,v2 sends each case through both front doors of the same server (the
native Execute and the KServe v2 ModelInfer, `kernelserve bench --protocol`), interleaved in
each round, and prints the v2 / native ratios of p50 and req/s round by round (the front
door's target: <= 1.10 and >= 0.90).

Cases:
  tiny  mean_pooling x=f32:1,16,64, concurrency 1, 3 s      (target: p50 <= 150 us)
  c32   the same at concurrency 32, 3 s                       (target: >= 10,000 req/s)
  in    mean_pooling x=f32:1,65536,1024: 256 MiB in, 256 KiB out, 4 calls per round
  both  mean_pooling x=f32:65536,1024 with cu_seqlens 0..65536 (every sequence one row):
        256 MiB in, 256 MiB out, 3 calls per round
For in and both, GB/s is 256 MiB / p50 (the input round trip, as issue 3 states it).
"""
import argparse
import json
import os
import resource
import shlex
import socket
import statistics
import subprocess
import sys
import tempfile
import time

MIB = 1 << 20
TICK = os.sysconf("SC_CLK_TCK")


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def proc_cpu(pid):
    fields = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICK


def steal_counters():
    values = list(map(int, open("/proc/stat").readline().split()[1:]))
    return values[7], sum(values)


def cases(workdir, names):
    cu = os.path.join(workdir, "cu_seqlens_65536.npy")
    if "both" in names and not os.path.exists(cu):
        import numpy as np
        np.save(cu, np.arange(65537, dtype=np.int32))
    return {
        "tiny": ["--shape", "x=f32:1,16,64", "--concurrency", "1", "--duration", "3s"],
        "c32": ["--shape", "x=f32:1,16,64", "--concurrency", "32", "--duration", "3s"],
        "in": ["--shape", "x=f32:1,65536,1024", "--requests", "4", "--duration", "600s"],
        "both": ["--shape", "x=f32:65536,1024", "--input", f"cu_seqlens={cu}",
                 "--requests", "3", "--duration", "600s"],
    }


def run_once(build, port, args, server_pid, protocol):
    st0, cpu0 = steal_counters(), proc_cpu(server_pid)
    ru0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    out = subprocess.run([f"{build}/client/kernelserve", "bench", "mean_pooling", *args,
                          "--target", f"127.0.0.1:{port}", "--json", "--protocol", protocol],
                         capture_output=True, text=True, check=True).stdout
    ru1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    st1, cpu1 = steal_counters(), proc_cpu(server_pid)
    d = json.loads(out)
    n = max(1, d["ok"])
    return {
        "p50": d["latency_us"]["p50"], "p90": d["latency_us"]["p90"],
        "rps": d["throughput_rps"], "server_total": d["server_mean"]["total_us"],
        "server_cpu": (cpu1 - cpu0) / n * 1e6,
        # The client's whole process: for in/both it includes making the random input once.
        "client_cpu": (ru1.ru_utime + ru1.ru_stime - ru0.ru_utime - ru0.ru_stime) / n * 1e6,
        "steal": 100.0 * (st1[0] - st0[0]) / max(1, st1[1] - st0[1]),
        "load": os.getloadavg()[0],
    }


def fmt_us(us):
    return f"{us / 1000:.1f} ms" if us >= 10000 else f"{us:.0f} us"


def main():
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("builds", nargs="+")
    parser.add_argument("--cases", default="tiny,c32,in,both")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--server-args", default="",
                        help="more kernelserve-server flags, e.g. '--devices cpu' on a GPU host")
    parser.add_argument("--floor", action="store_true",
                        help="also measure the bare gRPC server (bench/kernelserve-grpc-floor)")
    parser.add_argument("--protocols", default="native",
                        help="front doors to compare on each server: native, v2 or native,v2")
    opts = parser.parse_args()
    protocols = opts.protocols.split(",")
    workdir = tempfile.mkdtemp(prefix="ks-service-bench-")
    names = opts.cases.split(",")
    all_cases = cases(workdir, names)
    # (label, build whose client runs, server command line without --listen)
    targets = [(b, b, [f"{b}/server/kernelserve-server", "--metrics-listen", "off", "--cache",
                       "memory", *shlex.split(opts.server_args)]) for b in opts.builds]
    if opts.floor:
        first = opts.builds[0]
        targets.append((f"grpc-floor({first})", first, [f"{first}/bench/kernelserve-grpc-floor"]))
    servers = []
    # (label, server index, protocol): what each round measures, in order.
    lanes = []
    try:
        for label, client_build, command in targets:
            port = free_port()
            p = subprocess.Popen(command + ["--listen", f"127.0.0.1:{port}"],
                                 stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            # The floor answers Execute only.
            for protocol in (["native"] if label.startswith("grpc-floor") else protocols):
                suffix = "" if len(protocols) == 1 else f" [{protocol}]"
                lanes.append((label + suffix, len(servers), protocol))
            servers.append((client_build, port, p))
        time.sleep(1.0)
        labels = [label for label, _, _ in lanes]
        results = {(b, c): [] for b in labels for c in names}
        for r in range(opts.rounds):
            for case in names:
                for label, index, protocol in lanes:
                    client_build, port, p = servers[index]
                    results[(label, case)].append(
                        run_once(client_build, port, all_cases[case], p.pid, protocol))
            print(f"round {r + 1}/{opts.rounds} done", file=sys.stderr)
    finally:
        for _, _, p in servers:
            p.terminate()
            p.wait()
    print(f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, {os.cpu_count()} CPUs, "
          f"{opts.rounds} rounds")
    for case in names:
        for build in labels:
            rows = results[(build, case)]
            med = lambda key: statistics.median(row[key] for row in rows)
            p50s = sorted(row["p50"] for row in rows)
            line = (f"{case:>5} {build}: p50 {fmt_us(med('p50'))} (rounds {fmt_us(p50s[0])}.."
                    f"{fmt_us(p50s[-1])}), p90 {fmt_us(med('p90'))}, {med('rps'):.0f} req/s, "
                    f"server total {fmt_us(med('server_total'))}, CPU/call server "
                    f"{fmt_us(med('server_cpu'))} client {fmt_us(med('client_cpu'))}")
            if case in ("in", "both"):
                line += f", {256 * MIB / (med('p50') * 1e-6) / 1e9:.2f} GB/s"
            line += (f"; load {statistics.mean(r['load'] for r in rows):.2f}, steal "
                     f"{statistics.mean(r['steal'] for r in rows):.0f}%")
            print(line)
    if "v2" in protocols and "native" in protocols:
        print_protocol_ratios(opts.builds, names, results)


def print_protocol_ratios(builds, names, results):
    """v2 / native of p50 and req/s, round by round (the same server, adjacent runs)."""
    for build in builds:
        for case in names:
            native, v2 = results[(f"{build} [native]", case)], results[(f"{build} [v2]", case)]
            p50 = [b["p50"] / a["p50"] for a, b in zip(native, v2)]
            rps = [b["rps"] / a["rps"] for a, b in zip(native, v2)]
            print(f"{case:>5} {build} v2/native: p50 " + " ".join(f"{x:.2f}" for x in p50) +
                  f" (median {statistics.median(p50):.2f}); req/s " +
                  " ".join(f"{x:.2f}" for x in rps) + f" (median {statistics.median(rps):.2f})")


if __name__ == "__main__":
    main()
