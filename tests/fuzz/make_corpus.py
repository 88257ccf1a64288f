#!/usr/bin/python3
"""Writes the seed corpora of the fuzz harnesses into tests/fuzz/corpus/<harness>/.

A handful of small valid inputs per harness, named by what they hold. The messages are built
with protobuf (the Python classes protoc generates from proto/kernelserve/v1 into a temporary
folder); the other harnesses' inputs follow tests/fuzz/byte_reader.h. Run it again after
changing an input format: tests/fuzz/make_corpus.py (Debian's python3 with
python3-protobuf, as scripts/install-deps.sh installs it)
"""
import importlib
import json
import os
import struct
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
CORPUS = os.path.join(ROOT, "tests", "fuzz", "corpus")


def load_messages(tmp):
    subprocess.run(["protoc", "--proto_path=" + os.path.join(ROOT, "proto"),
                    "--python_out=" + tmp, "kernelserve/v1/kernel_service.proto"], check=True)
    sys.path.insert(0, tmp)
    return importlib.import_module("kernelserve.v1.kernel_service_pb2")


def write(harness, name, data):
    folder = os.path.join(CORPUS, harness)
    os.makedirs(folder, exist_ok=True)
    with open(os.path.join(folder, name), "wb") as f:
        f.write(data)


# --- protobuf messages ---------------------------------------------------------------------

F32, F16, BF16, I32, I64, BOOL = 1, 2, 3, 4, 5, 6
ITEM = {F32: 4, F16: 2, BF16: 2, I32: 4, I64: 8, BOOL: 1}


def tensor(pb, dtype, shape, values=None):
    t = pb.Tensor(dtype=dtype, shape=shape)
    count = 1
    for d in shape:
        count *= d
    values = values if values is not None else [(i % 7) * 0.25 - 0.5 for i in range(count)]
    if dtype == F32:
        t.data = struct.pack("<%df" % count, *values)
    elif dtype in (F16, BF16):
        t.data = bytes(2 * count)  # zeros
    elif dtype == I32:
        t.data = struct.pack("<%di" % count, *[int(v) for v in values])
    elif dtype == I64:
        t.data = struct.pack("<%dq" % count, *[int(v) for v in values])
    else:
        t.data = bytes(int(v) != 0 for v in values)
    return t


def requests(pb):
    """Small valid ExecuteRequests of both kernels, by name."""
    out = {}
    r = pb.ExecuteRequest(kernel="mean_pooling", platform="cpu", request_id="dense")
    r.inputs["x"].CopyFrom(tensor(pb, F32, [2, 3, 4]))
    out["mean_pooling_dense"] = r
    r = pb.ExecuteRequest(kernel="mean_pooling", platform="cpu")
    r.inputs["x"].CopyFrom(tensor(pb, BF16, [2, 3, 4]))
    r.inputs["mask"].CopyFrom(tensor(pb, BOOL, [2, 3], [1, 0, 1, 1, 1, 0]))
    r.mean_pooling.chunk_size = 2
    out["mean_pooling_masked"] = r
    r = pb.ExecuteRequest(kernel="mean_pooling", device=-1)
    r.inputs["x"].CopyFrom(tensor(pb, F16, [5, 4]))
    r.inputs["cu_seqlens"].CopyFrom(tensor(pb, I64, [3], [0, 2, 5]))
    out["mean_pooling_varlen"] = r
    r = pb.ExecuteRequest(kernel="flash_attention", platform="cpu")
    r.inputs["q"].CopyFrom(tensor(pb, F32, [1, 4, 2, 8]))
    r.inputs["k"].CopyFrom(tensor(pb, F32, [1, 5, 1, 8]))
    r.inputs["v"].CopyFrom(tensor(pb, F32, [1, 5, 1, 8]))
    r.flash_attention.causal = True
    r.flash_attention.return_lse = True
    out["flash_dense_gqa_causal"] = r
    r = pb.ExecuteRequest(kernel="flash_attention")
    r.inputs["q"].CopyFrom(tensor(pb, BF16, [6, 2, 4]))
    r.inputs["k"].CopyFrom(tensor(pb, BF16, [7, 2, 4]))
    r.inputs["v"].CopyFrom(tensor(pb, BF16, [7, 2, 4]))
    r.inputs["cu_seqlens_q"].CopyFrom(tensor(pb, I32, [3], [0, 2, 6]))
    r.inputs["cu_seqlens_k"].CopyFrom(tensor(pb, I32, [3], [0, 3, 7]))
    r.flash_attention.window_left = 2
    r.flash_attention.window_right = 0
    out["flash_varlen_window"] = r
    r = pb.ExecuteRequest(kernel="flash_attention", platform="auto")
    r.inputs["q"].CopyFrom(tensor(pb, F32, [2, 3, 2, 4]))
    r.inputs["k"].CopyFrom(tensor(pb, F32, [2, 3, 2, 4]))
    r.inputs["v"].CopyFrom(tensor(pb, F32, [2, 3, 2, 4]))
    r.inputs["bias"].CopyFrom(tensor(pb, F32, [1, 2, 3, 3]))
    r.inputs["q_segment_ids"].CopyFrom(tensor(pb, I64, [2, 3], [1, 1, 2, 1, 0, 0]))
    r.inputs["kv_segment_ids"].CopyFrom(tensor(pb, I64, [2, 3], [1, 2, 2, 1, 1, 0]))
    r.flash_attention.softmax_scale = 0.5
    r.flash_attention.logits_soft_cap = 30.0
    out["flash_bias_segments_softcap"] = r
    r = pb.ExecuteRequest(kernel="mean_pooling@v1", platform="cpu")
    r.inputs["x"].CopyFrom(tensor(pb, F32, [1, 2, 3]))
    r.config.block_size = 16
    r.config.fields["threads"] = 1
    r.config.platform = "cpu"
    r.policy.allow_autotune = False
    r.policy.persist = False
    out["mean_pooling_config_policy"] = r
    r = pb.ExecuteRequest(kernel="flash_attention", platform="cpu")
    for name in ("q", "k", "v"):
        r.inputs[name].CopyFrom(tensor(pb, F32, [1, 3, 1, 8]))
    r.parameters["causal"].bool_value = True
    r.parameters["window_left"].int64_value = 1
    r.parameters["softmax_scale"].double_value = 0.25
    out["parameters_map"] = r
    return out


def varint(value):
    out = bytearray()
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def delimited(number, payload):
    return varint(number << 3 | 2) + varint(len(payload)) + payload


def wire_corpus(pb):
    """wire_fuzz: byte 0 the type (0 ExecuteRequest ... 9 ModelInferRequest), byte 1 the cuts."""
    for i, (name, r) in enumerate(sorted(requests(pb).items())):
        write("wire_fuzz", "execute_request_" + name, bytes([0, i]) + r.SerializeToString())
    small = tensor(pb, F32, [2]).SerializeToString()
    other = tensor(pb, F32, [3]).SerializeToString()
    entry = lambda key, *values: delimited(2, delimited(1, key) + b"".join(
        delimited(2, v) for v in values))
    write("wire_fuzz", "execute_request_repeated_data", bytes([0, 1]) + entry(b"x", small + other))
    write("wire_fuzz", "execute_request_value_twice", bytes([0, 2]) + entry(b"x", small, other))
    write("wire_fuzz", "execute_request_key_twice", bytes([0, 3]) + entry(b"x", small) +
          entry(b"x", other))

    response = pb.ExecuteResponse(platform="cpu", device=-1, cache_key="k", request_id="r")
    response.outputs["out"].CopyFrom(tensor(pb, F32, [2, 2]))
    response.outputs["lse"].CopyFrom(tensor(pb, F32, [1, 2]))
    response.config.block_q = 16
    response.config_source = pb.CONFIG_SOURCE_HEURISTIC
    response.timing.total_us = 12
    response.warnings.append("w")
    write("wire_fuzz", "execute_response", bytes([1, 3]) + response.SerializeToString())
    failed = pb.ExecuteResponse(request_id="bad")
    failed.status.code = 3
    failed.status.message = "input 'x': bad"
    write("wire_fuzz", "execute_response_status", bytes([1, 0]) + failed.SerializeToString())

    batch = pb.ExecuteBatchRequest(kernel="mean_pooling", platform="cpu", devices=[-1])
    for shape in ([1, 2, 2], [2, 1, 2]):
        batch.items.add().inputs["x"].CopyFrom(tensor(pb, F32, shape))
    batch.mean_pooling.chunk_size = 4
    write("wire_fuzz", "execute_batch_request", bytes([2, 2]) + batch.SerializeToString())
    batch_response = pb.ExecuteBatchResponse(request_id="b")
    batch_response.items.add().CopyFrom(response)
    batch_response.items.add().CopyFrom(failed)
    write("wire_fuzz", "execute_batch_response", bytes([3, 1]) +
          batch_response.SerializeToString())

    tune = pb.AutotuneRequest(kernel="flash_attention", platform="cpu")
    tune.inputs["q"].CopyFrom(pb.Tensor(dtype=BF16, shape=[1, 16, 2, 32]))
    tune.inputs["k"].CopyFrom(pb.Tensor(dtype=BF16, shape=[1, 16, 2, 32]))
    tune.inputs["v"].CopyFrom(pb.Tensor(dtype=BF16, shape=[1, 16, 2, 32]))
    tune.flash_attention.causal = True
    write("wire_fuzz", "autotune_request", bytes([4, 0]) + tune.SerializeToString())
    pin = pb.PutConfigRequest(kernel="mean_pooling", platform="cpu")
    pin.inputs["x"].CopyFrom(pb.Tensor(dtype=F32, shape=[4, 8, 16]))
    pin.config.block_size = 32
    pin.config.fields["threads"] = 2
    write("wire_fuzz", "put_config_request", bytes([5, 2]) + pin.SerializeToString())
    create = pb.CreateTensorRequest(name="k", dtype=F16, shape=[2, 3], ttl_seconds=60)
    create.contents.CopyFrom(tensor(pb, F16, [2, 3]))
    write("wire_fuzz", "create_tensor_request", bytes([6, 1]) + create.SerializeToString())
    from_region = pb.CreateTensorRequest(name="v", dtype=F32, shape=[4], device=-1)
    from_region.contents.ref.region = "r"
    from_region.contents.ref.byte_size = 16
    write("wire_fuzz", "create_tensor_request_region", bytes([6, 0]) +
          from_region.SerializeToString())
    rows = pb.WriteTensorRequest(name="k", row_offset=1)
    rows.contents.CopyFrom(tensor(pb, F16, [1, 3]))
    write("wire_fuzz", "write_tensor_request", bytes([7, 2]) + rows.SerializeToString())
    read = pb.ReadTensorResponse()
    read.tensor.CopyFrom(tensor(pb, F32, [2, 2]))
    write("wire_fuzz", "read_tensor_response", bytes([8, 3]) + read.SerializeToString())
    # KServe v2 ModelInferRequest (byte 0 = 9), by hand: model_name, input x FP32 [2,3] with a
    # parameter, a requested output, two raw entries (the second after a field), then the id.
    param = delimited(1, b"binary_data_size") + delimited(2, varint(2 << 3) + varint(24))
    infer_input = (delimited(1, b"x") + delimited(2, b"FP32") + delimited(3, varint(2) + varint(3))
                   + delimited(4, param))
    infer = (delimited(1, b"mean_pooling") + delimited(5, infer_input) +
             delimited(6, delimited(1, b"out")) + delimited(7, struct.pack("<6f", *range(6))) +
             delimited(2, b"1") + delimited(7, b"") + delimited(3, b"req-1"))
    write("wire_fuzz", "model_infer_request", bytes([9, 2]) + infer)


def request_corpus(pb):
    """request_fuzz: an ExecuteRequest as sent."""
    for name, r in requests(pb).items():
        write("request_fuzz", name, r.SerializeToString())
    # Overrides with an algorithm no CPU candidate has, or a backend (no longer a config
    # field): INVALID_ARGUMENT.
    for field, value in (("algorithm", "wgmma"), ("backend", "b" * 300)):
        r = pb.ExecuteRequest(kernel="mean_pooling", platform="cpu")
        r.inputs["x"].CopyFrom(tensor(pb, F32, [1, 2, 3]))
        r.config.block_size = 32
        r.config.fields["threads"] = 1
        r.config.platform = "cpu"
        setattr(r.config, field, value)
        write("request_fuzz", f"mean_pooling_config_{field}", r.SerializeToString())


# --- ByteReader inputs (tests/fuzz/byte_reader.h) ------------------------------------------

def zigzag(value):
    return varint((value << 1) ^ (value >> 63) if value >= 0 else ((-value - 1) << 1) | 1)


def u8(*values):
    return bytes(values)


def string(text):
    data = text.encode()
    return u8(len(data)) + data


def long_string(text):
    data = text.encode()
    return struct.pack("<H", len(data)) + data


INPUT = {n: i for i, n in enumerate(["x", "mask", "cu_seqlens", "q", "k", "v", "cu_seqlens_q",
                                     "cu_seqlens_k", "q_segment_ids", "kv_segment_ids", "bias"])}
ATTR = {n: i for i, n in enumerate(["chunk_size", "causal", "softmax_scale", "window_left",
                                    "window_right", "logits_soft_cap", "return_lse"])}
DTYPE = {"f32": 0, "f16": 1, "bf16": 2, "i32": 3, "i64": 4, "bool": 5}


def kernel_input(kernel, inputs, attrs=(), config=(0,) * 6, gpu=False, data=(), variants=0,
                 strings=(), named_value=0):
    """kernel_validation_fuzz: see Run() in kernel_validation_fuzz.cc for the order."""
    out = u8(0 if kernel == "mean_pooling" else 1, len(inputs))
    for name, dtype, shape in inputs:
        out += u8(INPUT[name], DTYPE[dtype], len(shape)) + b"".join(zigzag(d) for d in shape)
    out += u8(len(attrs))
    for name, value in attrs:
        out += u8(ATTR[name])
        if isinstance(value, bool):
            out += u8(0, int(value))
        elif isinstance(value, int):
            out += u8(1) + zigzag(value)
        else:
            out += u8(2) + struct.pack("<d", value)
    # The platform ("cpu" or ""), then which fields follow (see ReadConfig): an algorithm, a
    # named field (its name, then `named_value`).
    out += b"".join(zigzag(v) for v in config) + u8(1 if config[0] else 0, variants)
    out += b"".join(string(text) for text in strings)
    if variants & 2:
        out += zigzag(named_value)
    out += u8(1, 0, 0) + zigzag(132) + zigzag(232448) + zigzag(0) if gpu else u8(0)
    return out + b"".join(zigzag(v) for v in data)


def kernel_corpus():
    seeds = {
        "mean_pooling_dense": kernel_input("mean_pooling", [("x", "f32", [2, 3, 4])]),
        "mean_pooling_masked": kernel_input(
            "mean_pooling", [("mask", "bool", [2, 3]), ("x", "bf16", [2, 3, 4])],
            [("chunk_size", 8)], data=[1, 0, 1, 1, 1, 0]),
        "mean_pooling_varlen_gpu": kernel_input(
            "mean_pooling", [("cu_seqlens", "i64", [3]), ("x", "f16", [5, 4])], gpu=True,
            data=[0, 2, 5]),
        "flash_dense_cpu_config": kernel_input(
            "flash_attention", [("q", "f32", [1, 4, 2, 8]), ("k", "f32", [1, 5, 1, 8]),
                                ("v", "f32", [1, 5, 1, 8])],
            [("causal", True), ("return_lse", True)], config=(16, 32, 0, 0, 0, 0)),
        "flash_varlen_gpu": kernel_input(
            "flash_attention", [("cu_seqlens_k", "i32", [3]), ("cu_seqlens_q", "i32", [3]),
                                ("k", "bf16", [7, 2, 64]), ("q", "bf16", [6, 2, 64]),
                                ("v", "bf16", [7, 2, 64])],
            [("window_left", 2), ("window_right", 0)], config=(128, 64, 0, 8, 3, 0), gpu=True,
            data=[0, 3, 7, 0, 2, 6]),
        "flash_bias_segments": kernel_input(
            "flash_attention", [("bias", "f32", [1, 2, 3, 3]), ("k", "f32", [2, 3, 2, 4]),
                                ("kv_segment_ids", "i64", [2, 3]), ("q", "f32", [2, 3, 2, 4]),
                                ("q_segment_ids", "i64", [2, 3]), ("v", "f32", [2, 3, 2, 4])],
            [("softmax_scale", 0.5), ("logits_soft_cap", 30.0)]),
        # An algorithm and a named field the CPU platform does not have: refused.
        "mean_pooling_config_strings": kernel_input(
            "mean_pooling", [("x", "f32", [2, 3, 4])], config=(0, 0, 0, 0, 0, 32), variants=3,
            strings=("wgmma", "lanes"), named_value=4),
        # The first candidate's variants (none on the CPU): taken.
        "flash_config_candidate_variants": kernel_input(
            "flash_attention", [("q", "f32", [1, 4, 2, 8]), ("k", "f32", [1, 5, 1, 8]),
                                ("v", "f32", [1, 5, 1, 8])], config=(16, 32, 0, 0, 0, 0),
            variants=12),
    }
    for name, data in seeds.items():
        write("kernel_validation_fuzz", name, data)


def stored(kernel="mean_pooling@v1"):
    return {"schema": 1, "config": {"schema": 2, "block_size": 32, "fields": {"threads": 2},
                                    "platform": "cpu"},
            "kernel": kernel, "fingerprint": "0123456789abcdef", "key": kernel + ":00ff",
            "measured_seconds": 1.5e-05, "origin": "autotune", "host": "h",
            "stored_at_unix_ms": 1700000000000}


def reply(kind, integer=0, text="", children=()):
    """A reply tree for store_fuzz: type, integer, then elements or a string."""
    types = {"string": 1, "array": 2, "integer": 3, "nil": 4, "status": 5, "error": 6}
    out = u8(types[kind] - 1) + zigzag(integer)
    if kind == "array":
        return out + u8(len(children)) + b"".join(children)
    return out + long_string(text)


def store_corpus():
    value = json.dumps(stored())
    seeds = {
        "kernel_config": u8(0) + json.dumps(
            {"schema": 2, "block_q": 64, "block_k": 64, "num_warps": 4, "num_stages": 2,
             "platform": "cuda", "algorithm": "wgmma", "priority": 1}).encode(),
        "stored_config": u8(1) + value.encode(),
        "file_store": u8(2) + string("0123456789abcdef") + string("mean_pooling@v1:00ff") +
        json.dumps({"schema": 1, "entries": {
            "0123456789abcdef/mean_pooling@v1:00ff": stored(),
            "0123456789abcdef/bad": {"schema": 2}}}, indent=2).encode(),
        "redis_get": u8(3, 1) + string("") + reply("string", text=value),
        "redis_scan": u8(3, 0) + string("mean") + reply("array", children=[
            reply("string", text="17"),
            reply("array", children=[reply("string", text="kernelserve:v1:cfg:0123:mean"),
                                     reply("integer", 5)])]),
        "redis_mget": u8(3, 3) + string("flash") + reply("array", children=[
            reply("string", text=json.dumps(stored("flash_attention@v1"))), reply("nil"),
            reply("string", text="{}")]),
        "redis_url": u8(4) + b"redis://:secret@[::1]:6380/2",
    }
    for name, data in seeds.items():
        write("store_fuzz", name, data)


def tenancy_corpus(pb):
    """tenancy_fuzz: byte 0 the kind (see tenancy_fuzz.cc), then its fields."""
    token_file = "# identity role token\nops admin tok-ops\nalice caller tok-alice\n" \
        "bob\tcaller\tsha256:" + "ab" * 32 + "\n\nlegacy-single-token\n"

    def alpha(*picks):
        """FromAlphabet's input: a length byte (1 + its value), then an index a character."""
        return u8(len(picks) - 1, *picks)

    seeds = {
        "token_file": u8(0) + long_string(token_file) + string("Bearer tok-alice") +
        string("ipv4:127.0.0.1:40000"),
        "token_file_wrong_scheme": u8(0) + long_string("tok\n") + string("Basic tok") +
        string("fd:7"),
        # Entries (kind; identity pick and letters; role; token pick and letters): a caller
        # with its token, a comment, an admin with the token's digest (tabs, a CR), a token
        # alone as its digest in capitals; then: the first identity made an admin too, the
        # cases of "Bearer" for each token, and a token the file does not hold.
        "token_file_built": u8(1, 4) +
        u8(2) + u8(1) + alpha(0, 1, 2, 3) + u8(0) + u8(2) + alpha(10, 11, 12, 13, 14, 15) +
        u8(10) + string("a comment") +
        u8(7) + u8(1) + alpha(20, 21, 22) + u8(2) + u8(82) + alpha(30, 31, 32, 33, 34, 35, 36) +
        u8(6) + u8(50) + alpha(40, 41, 42, 43, 44, 45) +
        u8(1) + u8(0, 5, 63) + string("stranger") + u8(0),
        # The same caller twice with one token: refused.
        "token_file_built_twice": u8(1, 2) +
        u8(2) + u8(1) + alpha(0, 1) + u8(0) + u8(2) + alpha(10, 11, 12) +
        u8(2) + u8(1) + alpha(3, 4) + u8(0) + u8(0, 0),
        "peer_ipv4": u8(2) + string("ipv4:127.0.0.1:40000") + zigzag(7) + zigzag(1000) +
        zigzag(1000) + zigzag(4242) + u8(0) + u8(0x40, 0x9c) + bytes([127, 0, 0, 1] + [0] * 12) +
        u8(0),
        "peer_ipv6_encoded": u8(2) + string("ipv6:%5B::1%5D:50051") + zigzag(3) + zigzag(0) +
        zigzag(-1) + zigzag(1) + u8(1) + u8(0x01, 0x02) + bytes([0] * 15 + [1]) + u8(1),
        "socket_table": u8(3) + long_string(
            "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid"
            "  timeout inode\n   0: 0100007F:9C40 0100007F:C351 01 00000000:00000000 "
            "00:00000000 00000000  1000        0 12345 1 0000000000000000 20 4 30 10 -1\n") +
        string("ipv4:127.0.0.1:40000") + zigzag(50001),
        "socket_table_built": u8(4) + u8(0, 127, 0, 0, 1, 0x40, 0x9c) + u8(1) + bytes(15) +
        u8(1, 0x41, 0x9c) + u8(0x51, 0xc3, 0x52, 0xc3) + u8(3) +
        u8(0) + u8(0, 127, 0, 0, 1, 0, 0) + u8(1, 0) +
        u8(16) + u8(0, 127, 0, 0, 1, 0, 0) + u8(1, 2) +
        u8(4) + u8(0, 127, 0, 0, 1, 0, 0) + u8(1, 0),
        "listen_tcp": u8(5) + b"127.0.0.1:50051",
        "listen_ipv6": u8(5) + b"[::1]:0",
        "listen_unix": u8(5) + b"unix:///run/kernelserve.sock",
        "listen_abstract": u8(5) + b"unix-abstract:kernelserve",
        "region_name": u8(6, 0) + b"tensors-0",
        "object_key": u8(6, 1) + b"psm_1a2b3c",
        "object_key_nul": u8(6, 1) + b"psm\0x",
        "access_owner": u8(7) + zigzag(1000) + zigzag(1000) + zigzag(0o600) + u8(3) + u8(0) +
        u8(0),
        "access_group": u8(7) + zigzag(1000) + zigzag(100) + zigzag(0o660) + u8(7) + u8(2) +
        zigzag(1001) + u8(0) + zigzag(4242),
        "access_unknown_peer": u8(7) + zigzag(0) + zigzag(0) + zigzag(0o666) + u8(0),
        # rate 100, burst 3, in-flight 1 MiB, 4 labels; requests, holds, releases, identities.
        "quotas": u8(8, 4, 1, 3, 1) + zigzag(1 << 20) + u8(4, 8) +
        u8(0) + zigzag(0) + u8(0) + zigzag(0) + u8(0) + zigzag(0) + u8(0) + zigzag(0) +
        u8(0) + zigzag(20000) + u8(1) + zigzag(600000) + u8(1) + zigzag(600000) +
        u8(2) + zigzag(300000) + u8(3) + string("alice") + string("bob") + string("known"),
    }
    batch = pb.ExecuteBatchRequest(kernel="mean_pooling_bwd", platform="cpu")
    for shape in ([1, 1, 8], [1, 64, 8], [2, 3, 8]):
        item = batch.items.add()
        item.inputs["dout"].CopyFrom(tensor(pb, F32, [shape[0], shape[2]]))
        item.inputs["x"].CopyFrom(pb.Tensor(dtype=F32, shape=shape))  # shape only
    seeds["batch_bwd_growing_items"] = u8(9) + batch.SerializeToString()
    batch = pb.ExecuteBatchRequest(kernel="flash_attention", platform="cpu")
    for seq in (2, 5):
        item = batch.items.add()
        for name in ("q", "k", "v"):
            item.inputs[name].CopyFrom(tensor(pb, F32, [1, seq, 2, 8]))
    batch.flash_attention.return_lse = True
    seeds["batch_flash_two_items"] = u8(9) + batch.SerializeToString()
    batch = pb.ExecuteBatchRequest(kernel="mean_pooling")
    batch.items.add().inputs["x"].CopyFrom(tensor(pb, F32, [1, 2, 4]))
    bad = batch.items.add()
    bad.inputs["x"].CopyFrom(tensor(pb, F32, [1, 2, 4]))
    bad.inputs["x"].data = b"\0" * 4  # short: fails alone
    batch.items.add().inputs["x"].CopyFrom(tensor(pb, F32, [3, 1, 4]))
    seeds["batch_pooling_bad_item"] = u8(9) + batch.SerializeToString()
    for name, data in seeds.items():
        write("tenancy_fuzz", name, data)


def resident_corpus():
    """resident_fuzz: steps, each a kind byte (see resident_fuzz.cc) then its fields."""
    def create(caller, name, dtype, shape, device, ttl):
        return (u8(0, caller, ord(name) - ord("a"), dtype, len(shape)) +
                b"".join(zigzag(d) for d in shape) + u8(device) + zigzag(ttl))

    def pick(name):
        return u8(ord(name) - ord("a"))

    def copy(caller, name, offset, size, write, data=b""):
        return u8(2, caller) + pick(name) + zigzag(offset) + zigzag(size) + u8(0 if write else 1) + data

    def hold(caller, names, writes):
        out = u8(3, caller, 2, len(names) - 1)
        for name, write in zip(names, writes):
            out += pick(name) + u8(0 if write else 1)
        return out

    seeds = {
        "create_write_read": create(0, "a", 0, [4, 3], 1, 0) + copy(0, "a", 8, 16, True, bytes(range(16))) +
        copy(0, "a", 0, 48, False),
        "gpu_room_and_quota": create(0, "a", 0, [60, 60], 2, 0) + create(0, "b", 0, [60, 60], 1, 0) +
        create(1, "a", 0, [60, 60], 1, 0) + create(1, "b", 1, [50], 3, 5),
        "held_then_deleted_and_expired": create(0, "a", 2, [8], 1, 3) + hold(0, ["a"], [True]) +
        u8(4, 0, 0, 1) + pick("a") + u8(5) + zigzag(200) + u8(3, 0, 0) + u8(5) + zigzag(200),
        "readers_and_a_writer": create(1, "c", 3, [2, 2], 1, 0) + hold(1, ["c"], [False]) +
        hold(1, ["c"], [False]) + copy(1, "c", 0, 16, True, bytes(16)) + copy(1, "c", 0, 16, False),
        "other_owners": create(0, "a", 0, [4], 1, 0) + copy(1, "a", 0, 4, False) +
        u8(4, 1, 2, 1) + pick("a") + u8(4, 2, 1, 0),
    }
    for name, data in seeds.items():
        write("resident_fuzz", name, data)


def main():
    with tempfile.TemporaryDirectory() as tmp:
        pb = load_messages(tmp)
        wire_corpus(pb)
        request_corpus(pb)
        tenancy_corpus(pb)
    kernel_corpus()
    store_corpus()
    resident_corpus()


if __name__ == "__main__":
    main()
