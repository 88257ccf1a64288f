#!/usr/bin/python3
"""Memory probe of kernelserve-server: what the calls of issue 32 hold, against what they count.

    bench/memory_probe.py BUILD [--cases a,b,...] [--json FILE] [--idle-seconds N]

BUILD is a build directory (server/kernelserve-server). Each case starts a server of its own
(--devices=cpu, --cache=memory, free loopback ports), runs one kind of call and prints the
server's idle RSS before it, its peak (VmHWM: the kernel's high-water mark, not a sample), its
RSS after, the call's gRPC code and time, and the message of an error.

Cases:
  execute-bwd    Execute of mean_pooling_bwd whose x is shape-only [1,262000,1024] f32: a
                 ~1 GiB dx from a 4 KiB request (default --max-inflight-bytes, 4 GiB)
  autotune-bwd   shapes-only Autotune of mean_pooling_bwd, x [1,131072,1024] f32 (512 MiB)
  batch-bwd      --max-inflight-bytes=512MiB: ExecuteBatch of mean_pooling_bwd, a first item
                 with a 4 KiB dx, then ten with a ~207 MiB dx each (~2 GiB of answer)
  batch-budget   the same with ten items of 80 MiB (an answer under --max-message-bytes, over
                 the in-flight budget)
  batch-message  --max-message-bytes=64MiB: ExecuteBatch of four items of 20 MiB dx each
  stream-stuck   --max-inflight-bytes=512MiB: an ExecuteStream whose client sends 24 requests
                 of a 72 MiB dx each and reads nothing for --stuck-seconds (35: past the 30 s of
                 idle after which the server gives memory back), then cancels; RSS while stuck,
                 then every 5 s for --idle-seconds (70)
  stream-stuck-v2  the same through the KServe v2 ModelStreamInfer
"""
import argparse
import json
import os
import queue
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from abuse.harness import (MIB, Server, call, channel, inference_messages,  # noqa: E402
                           pb, tensor, unary)
import grpc  # noqa: E402
import numpy as np  # noqa: E402

GIB = 1 << 30
STUCK_SECONDS = 35.0  # --stuck-seconds
LARGE_CHANNEL = [("grpc.max_send_message_length", -1), ("grpc.max_receive_message_length", -1)]


def status_kib(pid, field):
    """A field of /proc/PID/status in KiB (VmRSS, VmHWM), or None."""
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith(field + ":"):
                    return int(line.split()[1])
    except OSError:
        pass
    return None


def mb(kib):
    return None if kib is None else round(kib / 1024.0)


def bwd_request(x_shape, request_id=""):
    """An ExecuteRequest of mean_pooling_bwd: dout [B,H] with data, x by shape alone."""
    request = pb.ExecuteRequest(kernel="mean_pooling_bwd", request_id=request_id)
    batch, hidden = x_shape[0], x_shape[-1]
    tensor(request.inputs["dout"], np.ones((batch, hidden), np.float32))
    tensor(request.inputs["x"], shape=x_shape)
    return request


def infer_bwd_request(inference, x_shape, request_id):
    """A ModelInferRequest of mean_pooling_bwd: dout as typed contents, x shape-only (an empty
    raw_input_contents entry)."""
    request = inference.ModelInferRequest(model_name="mean_pooling_bwd", id=request_id)
    dout = request.inputs.add(name="dout", datatype="FP32", shape=[x_shape[0], x_shape[-1]])
    dout.contents.fp32_contents.extend([1.0] * (x_shape[0] * x_shape[-1]))
    request.inputs.add(name="x", datatype="FP32", shape=list(x_shape))
    request.raw_input_contents.append(b"")
    return request


class Probe:
    def __init__(self, build, args):
        self.server = Server(build, "memory", args, rss_limit_mb=6144)
        self.pid = self.server.process.pid
        time.sleep(1.0)
        self.row = {"flags": " ".join(args), "idle_mb": mb(status_kib(self.pid, "VmRSS"))}

    def finish(self, **fields):
        self.row["peak_mb"] = mb(status_kib(self.pid, "VmHWM"))
        self.row["after_mb"] = mb(status_kib(self.pid, "VmRSS"))
        self.row.update(fields)
        self.server.stop()
        return self.row


def outcome_fields(outcome):
    return {"code": outcome.code, "seconds": round(outcome.seconds, 2),
            "message": outcome.details[:300]}


def case_execute_bwd(build, idle_seconds):
    probe = Probe(build, [])
    with grpc.insecure_channel(probe.server.target, LARGE_CHANNEL) as ch:
        request = bwd_request([1, 262000, 1024]).SerializeToString()
        outcome = call(unary(ch, "Execute"), request, 120.0)
    return probe.finish(**outcome_fields(outcome), counted_mb=round(262000 * 1024 * 4 / MIB))


def case_autotune_bwd(build, idle_seconds):
    probe = Probe(build, [])
    request = pb.AutotuneRequest(kernel="mean_pooling_bwd")
    tensor(request.inputs["dout"], shape=[1, 1024])
    tensor(request.inputs["x"], shape=[1, 131072, 1024])
    with channel(probe.server.target) as ch:
        outcome = call(unary(ch, "Autotune"), request.SerializeToString(), 300.0)
    return probe.finish(**outcome_fields(outcome))


def batch_request(shapes):
    request = pb.ExecuteBatchRequest(kernel="mean_pooling_bwd")
    for shape in shapes:
        request.items.append(bwd_request(shape))
    return request.SerializeToString()


def batch_case(server_args, shapes):
    """A case: one ExecuteBatch of mean_pooling_bwd with dx of each of `shapes`, on a server
    with `server_args`."""
    def run(build, idle_seconds):
        probe = Probe(build, server_args)
        with grpc.insecure_channel(probe.server.target, LARGE_CHANNEL) as ch:
            outcome = call(unary(ch, "ExecuteBatch"), batch_request(shapes), 120.0)
        return probe.finish(**outcome_fields(outcome))
    return run


# A small first item and ten large ones: past the message size, then past the budget; four
# items whose answers together pass a 64 MiB --max-message-bytes.
case_batch_bwd = batch_case(["--max-inflight-bytes=536870912"],
                            [[1, 1, 1024]] + [[1, 53000, 1024]] * 10)
case_batch_budget = batch_case(["--max-inflight-bytes=536870912"],
                               [[1, 1, 1024]] + [[1, 20480, 1024]] * 10)
case_batch_message = batch_case(["--max-message-bytes=67108864"], [[1, 5120, 1024]] * 4)


def stuck_stream(probe, method, requests, idle_seconds):
    """Sends `requests` on `method` without reading for STUCK_SECONDS, cancels, waits idle."""
    fields = {}
    with grpc.insecure_channel(probe.server.target, LARGE_CHANNEL) as ch:
        sent = queue.Queue()

        def generate():
            for request in requests:
                yield request
                sent.put(1)

        responses = ch.stream_stream(method)(generate(), timeout=120.0)
        time.sleep(STUCK_SECONDS)
        fields["sent_while_stuck"] = sent.qsize()
        fields["stuck_mb"] = mb(status_kib(probe.pid, "VmRSS"))
        fields["stuck_peak_mb"] = mb(status_kib(probe.pid, "VmHWM"))
        responses.cancel()
    start = time.monotonic()
    samples = []
    while time.monotonic() - start < idle_seconds:
        time.sleep(5.0)
        samples.append(mb(status_kib(probe.pid, "VmRSS")))
    fields["idle_after_cancel_mb"] = samples
    return fields


def case_stream_stuck(build, idle_seconds):
    probe = Probe(build, ["--max-inflight-bytes=536870912"])
    requests = [bwd_request([1, 18432, 1024], f"r{i}").SerializeToString() for i in range(24)]
    fields = stuck_stream(probe, "/kernelserve.v1.KernelService/ExecuteStream", requests,
                          idle_seconds)
    return probe.finish(**fields)


def case_stream_stuck_v2(build, idle_seconds):
    inference = inference_messages()
    probe = Probe(build, ["--max-inflight-bytes=536870912"])
    requests = [infer_bwd_request(inference, [1, 18432, 1024], f"r{i}").SerializeToString()
                for i in range(24)]
    fields = stuck_stream(probe, "/inference.GRPCInferenceService/ModelStreamInfer", requests,
                          idle_seconds)
    return probe.finish(**fields)


CASES = {
    "execute-bwd": case_execute_bwd,
    "autotune-bwd": case_autotune_bwd,
    "batch-bwd": case_batch_bwd,
    "batch-budget": case_batch_budget,
    "batch-message": case_batch_message,
    "stream-stuck": case_stream_stuck,
    "stream-stuck-v2": case_stream_stuck_v2,
}


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("build")
    parser.add_argument("--cases", default=",".join(CASES))
    parser.add_argument("--json")
    parser.add_argument("--idle-seconds", type=float, default=70.0)
    parser.add_argument("--stuck-seconds", type=float, default=35.0)
    opts = parser.parse_args()
    global STUCK_SECONDS
    STUCK_SECONDS = opts.stuck_seconds
    rows = []
    for name in opts.cases.split(","):
        row = {"case": name, **CASES[name](opts.build, opts.idle_seconds)}
        print(json.dumps(row), flush=True)
        rows.append(row)
    if opts.json:
        with open(opts.json, "w") as f:
            json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
