"""kernelserve.wire, kernelserve.plain and kernelserve.transport without a server: the spliced
request and a plain call's cached pieces are the message protobuf writes, an answer read in
place is the message protobuf parses, a lazily built Result is the one built at once, and the
choice of transport follows its flag.

Runs in the virtualenv of client/python/scripts/make_venv.py (ctest fixture client_python_env).
"""

import copy
import dataclasses
import os
import pickle
import threading
import time
import unittest
from unittest import mock

import grpc
import numpy as np

import kernelserve
from kernelserve import calls, plain, resident, results, tensors, transport, wire
from kernelserve.v1 import kernel_service_pb2 as pb

LARGE = wire.LARGE_TENSOR_BYTES


def request_of(inputs, aside=None, **kwargs):
    call = kernelserve.Request("flash_attention", inputs, params={"causal": True},
                               config={"block_q": 64}, request_id="r-1", **kwargs)
    return calls.execute_request(call, aside=aside)


def spliced_request(inputs, **kwargs):
    aside = {}
    header = request_of(inputs, aside, **kwargs).SerializeToString()
    return wire.splice(header, aside), aside


def random_response(rng, outputs):
    response = pb.ExecuteResponse(platform="cpu", device=-1, cache_key="k", request_id="r-1",
                                  warnings=["w1"])
    response.config.block_q = 64
    response.timing.kernel_us = 12
    for name, array in outputs.items():
        tensors.to_proto(array, response.outputs[name], name)
    return response


class SpliceTest(unittest.TestCase):
    def setUp(self):
        self.rng = np.random.default_rng(7)

    def test_spliced_message_is_the_message_protobuf_writes(self):
        q = self.rng.standard_normal((2, 64, 4, 64), dtype=np.float32)  # 128 KiB: aside
        k = q.astype(np.float16)  # 64 KiB: aside
        v = self.rng.standard_normal((1, 3, 4, 64)).astype(np.float32)  # small: in the message
        bias = self.rng.standard_normal((2, 4, 64, 300)).astype(kernelserve.bfloat16)
        strided = q[:, ::2]  # not contiguous: sent as its contiguous copy
        for inputs in ({"q": q, "k": k, "v": v}, {"q": strided, "k": k, "v": v, "bias": bias},
                       {"q": v, "k": v, "v": v}):
            spliced, aside = spliced_request(inputs)
            self.assertEqual(set(aside), {n for n, a in inputs.items() if a.nbytes >= LARGE})
            joined = spliced.join()
            self.assertEqual(len(joined), spliced.nbytes)
            self.assertEqual(pb.ExecuteRequest.FromString(joined), request_of(inputs))
            for name, (_, array) in aside.items():  # the arrays' own memory where they can be
                if inputs[name].flags.c_contiguous:
                    self.assertTrue(np.shares_memory(array, inputs[name]), name)

    def test_uint16_bits_and_empty_and_integer_inputs(self):
        bits = self.rng.integers(0, 1 << 16, size=(LARGE,), dtype=np.uint16)
        ints = self.rng.integers(-5, 5, size=(LARGE // 4 + 3,), dtype=np.int32)
        empty = np.zeros((0, 4), np.float32)
        inputs = {"q": bits, "k": ints, "v": empty}
        spliced, aside = spliced_request(inputs)
        self.assertEqual(set(aside), {"q", "k"})
        self.assertEqual(pb.ExecuteRequest.FromString(spliced.join()), request_of(inputs))

    def test_small_inputs_stay_in_the_message(self):
        x = np.ones((2, 3), np.float32)
        aside = {}
        request = request_of({"q": x, "k": x, "v": x}, aside)
        self.assertEqual(aside, {})
        self.assertEqual(len(request.inputs), 3)


class SplitAnswerTest(unittest.TestCase):
    def setUp(self):
        self.rng = np.random.default_rng(11)

    def check(self, message):
        """split_answer of `message` gives what protobuf's parse gives."""
        want = pb.ExecuteResponse.FromString(message)
        got, datas = wire.split_answer(message)
        self.assertEqual(set(datas), {n for n, t in want.outputs.items() if t.data})
        for name, tensor in want.outputs.items():
            self.assertEqual(got.outputs[name].data, b"")
            self.assertEqual(bytes(datas.get(name, b"")), tensor.data, name)
            got.outputs[name].data = tensor.data
        self.assertEqual(got, want)

    def test_answers_read_in_place(self):
        out = self.rng.standard_normal((3, 50, 4, 64), dtype=np.float32)
        lse = self.rng.standard_normal((3, 4, 50), dtype=np.float32)
        half = out.astype(kernelserve.bfloat16)
        for outputs in ({"out": out, "lse": lse}, {"out": half}, {}, {"out": out[:0]}):
            message = random_response(self.rng, outputs).SerializeToString()
            self.check(message)
            response, datas = wire.split_answer(message)
            for name, array in outputs.items():
                got = tensors.from_data(response.outputs[name], datas[name]) if array.size else None
                if got is not None:
                    np.testing.assert_array_equal(got, array)

    def test_repeated_keys_and_fields_follow_protobuf(self):
        first = random_response(self.rng, {"out": np.arange(20000, dtype=np.float32)})
        second = random_response(self.rng, {"out": np.arange(7, dtype=np.float32),
                                            "lse": np.ones(3, np.float32)})
        second.platform = "cuda"
        no_data = pb.ExecuteResponse()
        no_data.outputs["lse"].dtype = pb.DTYPE_F32  # replaces lse's entry: no data left
        for message in (first.SerializeToString() + second.SerializeToString(),
                        second.SerializeToString() + first.SerializeToString(),
                        second.SerializeToString() + no_data.SerializeToString()):
            self.check(message)
        # One entry whose value comes twice: the values merge (data from the one that has it).
        tensor = pb.Tensor(dtype=pb.DTYPE_F32, data=b"\x01\x02\x03\x04")
        meta = pb.Tensor(shape=[1]).SerializeToString()
        entry = (b"\x0a\x03out" + b"\x12" + wire.varint(len(tensor.SerializeToString()))
                 + tensor.SerializeToString() + b"\x12" + wire.varint(len(meta)) + meta)
        self.check(b"\x0a" + wire.varint(len(entry)) + entry)

    def test_malformed_answers_are_wire_errors(self):
        message = random_response(self.rng, {"out": np.ones(5000, np.float32)}).SerializeToString()
        for bad in (message[:-1], message[:7], b"\x0a\xff", b"\x00\x01", b"\x0b\x00",
                    b"\xff" * 11):
            with self.assertRaises(wire.WireError, msg=bad[:16]):
                wire.split_answer(bad)
        small = random_response(self.rng, {"out": np.ones(6, np.float32)}).SerializeToString()
        for _ in range(300):  # random damage: an error, or exactly protobuf's parse
            damaged = bytearray(small)
            damaged[self.rng.integers(len(damaged))] = self.rng.integers(256)
            try:
                want = pb.ExecuteResponse.FromString(bytes(damaged))
            except Exception:  # protobuf's DecodeError
                want = None
            try:
                got, datas = wire.split_answer(bytes(damaged))
            except wire.WireError:
                continue
            self.assertIsNotNone(want, bytes(damaged))
            for name, data in datas.items():
                got.outputs[name].data = bytes(data)
            self.assertEqual(got, want)

    def test_first_data_offset(self):
        out = np.arange(1000, dtype=np.float32)
        message = random_response(self.rng, {"out": out}).SerializeToString()
        at = wire.first_data_offset(message[:4096])
        self.assertEqual(message[at:at + out.nbytes], out.tobytes())
        self.assertIsNone(wire.first_data_offset(message[:at - 1]))
        self.assertIsNone(wire.first_data_offset(pb.ExecuteResponse(platform="cpu")
                                                 .SerializeToString()))

    def test_unaligned_outputs_are_copied_aligned_ones_shared(self):
        data = memoryview(bytearray(4 * 64 + 1))
        tensor = pb.Tensor(dtype=pb.DTYPE_F32, shape=[64])
        shared = tensors.from_data(tensor, data[:256])
        self.assertTrue(np.shares_memory(shared, np.frombuffer(data, np.uint8)))
        copied = tensors.from_data(tensor, data[1:257])
        self.assertTrue(copied.flags.aligned)
        self.assertFalse(copied.flags.writeable)
        self.assertFalse(np.shares_memory(copied, np.frombuffer(data, np.uint8)))


def plain_request(requests, kernel, inputs, params=None, **run):
    """The message of a plain call as kernelserve.plain writes it (None when it is not plain)."""
    run = dict(dict(platform="", device=None, allow_autotune=None, request_id=""), **run)
    pieces = requests.pieces(kernel, inputs, params, run["platform"], run["device"],
                             run["allow_autotune"], run["request_id"])
    return None if pieces is None else pb.ExecuteRequest.FromString(b"".join(pieces))


def usual_request(kernel, inputs, params=None, **run):
    """The message calls.execute_request builds for the same call."""
    return calls.execute_request(kernelserve.Request(kernel, inputs, params=params, **run))


class PlainRequestTest(unittest.TestCase):
    def setUp(self):
        self.rng = np.random.default_rng(5)
        self.requests = plain.PlainRequests()

    def check(self, kernel, inputs, params=None, **run):
        got = plain_request(self.requests, kernel, inputs, params, **run)
        self.assertIsNotNone(got, (inputs, params, run))
        self.assertEqual(got, usual_request(kernel, inputs, params, **run))

    def test_every_dtype_sent_as_it_is_and_odd_shapes(self):
        x = self.rng.standard_normal((2, 3, 5), dtype=np.float32)
        for array in (x, x.astype(np.float16), x.astype(kernelserve.bfloat16),
                      tensors.to_bf16(x), (x * 9).astype(np.int32), (x * 9).astype(np.int64),
                      x > 0, x.astype(kernelserve.float8_e4m3fn),
                      x.astype(kernelserve.float8_e5m2), x[:, ::2], x.T, x[:0],
                      np.full((), 2.5, np.float32)):
            self.check("mean_pooling", {"x": array})

    def test_calls_in_a_row_keep_nothing_of_each_other(self):
        x = self.rng.standard_normal((1, 16, 64), dtype=np.float32)
        y = self.rng.standard_normal((3, 4, 8), dtype=np.float32)
        calls_in_a_row = [
            ({"x": x}, {"chunk_size": 8}, dict(platform="cpu")),
            ({"x": x + 1}, {"chunk_size": 16}, dict(platform="cpu")),  # same key, new bytes
            ({"x": y}, {"chunk_size": 16}, dict(platform="cpu", request_id="r-7")),
            ({"x": y.astype(np.float16)}, None, dict(device=0, allow_autotune=True)),
            ({"x": x, "mask": x[..., 0] > 0}, {"flag": True}, dict(device=-1)),
            ({"x": x, "mask": x[..., 0] > 0}, {"flag": 1}, {}),  # True == 1: not the same
            ({"x": x}, {"flag": 1.0}, dict(allow_autotune=False)),
            ({"x": x}, {"flag": "1", "scale": np.float32(0.5)}, dict(request_id="r-8")),
            ({"x": x}, None, {}),
        ]
        for _ in range(2):  # the second time from the caches
            for inputs, params, run in calls_in_a_row:
                self.check("mean_pooling", inputs, params, **run)
        self.check("flash_attention", {"q": y, "k": y, "v": y}, {"causal": True})

    def test_resident_tensors_go_by_name(self):
        def resident_tensor(name):
            info = resident.ResidentTensorInfo(
                name=name, dtype=np.dtype(np.float32), shape=(64, 16, 8, 128), device=0,
                byte_size=4 << 20, owner="", created_unix_ms=0, last_used_unix_ms=0, calls=0,
                ttl_seconds=0)
            return resident.ResidentTensorBase(None, info)

        q = self.rng.standard_normal((16, 1, 32, 128), dtype=np.float32).astype(
            kernelserve.bfloat16)
        table = self.rng.permutation(64).astype(np.int32).reshape(16, 4)
        for k_name, v_name in (("pages-k", "pages-v"), ("pages-v", "pages-k"), ("a b", "a b")):
            step = {"q": q, "k_cache": resident_tensor(k_name), "v_cache": resident_tensor(v_name),
                    "block_table": table, "cache_seqlens": np.full(16, 9, np.int32)}
            for _ in range(2):  # the second time from the cache
                self.check("paged_attention", step, request_id="step")
        self.check("paged_attention", {"k_cache": resident_tensor("pages-k")})
        self.assertIsNone(plain_request(self.requests, "paged_attention",
                                        {"k\udc80": resident_tensor("pages-k")}))

    def test_arrays_past_the_wire_threshold_are_sent_from_their_own_memory(self):
        x = self.rng.standard_normal((16, 32, 128), dtype=np.float32)  # 256 KiB
        self.assertGreaterEqual(x.nbytes, wire.LARGE_TENSOR_BYTES)
        for array in (x, x.astype(kernelserve.bfloat16), x.T, x[:, ::2], x[:1]):
            self.check("mean_pooling", {"x": array})
        pieces = self.requests.pieces("mean_pooling", {"x": x}, None, "", None, None, "")
        views = [p for p in pieces if isinstance(p, memoryview)]
        self.assertEqual(len(views), 1)
        self.assertTrue(np.shares_memory(np.frombuffer(views[0], np.uint8), x))
        pieces = self.requests.pieces("mean_pooling", {"x": x.T}, None, "", None, None, "")
        self.assertFalse(any(isinstance(p, memoryview) for p in pieces))  # copied in C order

    def test_calls_that_are_not_plain_take_the_usual_path(self):
        x = np.ones((2, 3), np.float32)
        big = np.ones(plain.MAX_BYTES // 4, np.float32)
        for inputs, params in (({"x": x.astype(np.float64)}, None),  # converted
                               ({"x": x.astype(">f4")}, None),  # byte-swapped
                               ({"x": x.tolist()}, None),
                               ({"x": kernelserve.TensorSpec((2, 3))}, None),
                               ({"x": big}, None),  # through shared memory, or aside
                               ({"x": big[:len(big) // 2], "y": big[len(big) // 2:]}, None),
                               ({"x": np.ones(3, np.uint8)}, None),  # not sent: an error
                               ({"x": x}, {"chunk_size": [1, 2]}),  # unhashable
                               ({"x": x}, {"chunk_size": None}),  # not a param value
                               ({"x": x}, {"chunk_size": object()})):
            self.assertIsNone(plain_request(self.requests, "mean_pooling", inputs, params),
                              (inputs, params))
        for inputs in ({1: x}, {("x",): x}, {"x\udc80": x}):  # names protobuf refuses
            self.assertIsNone(plain_request(self.requests, "mean_pooling", inputs), inputs)
        self.assertIsNone(plain_request(self.requests, "mean_pooling", {"x": x}, device="0"))
        self.assertIsNone(plain_request(self.requests, "mean_pooling", {"x": x}, device=1.0))
        self.check("mean_pooling", {"x": x}, device=1)  # 1.0 above left no entry for 1
        self.assertIsNone(plain_request(self.requests, "mean_pooling", {"x": x}, device=1.0))

    def test_caches_stay_bounded(self):
        x = np.ones(3, np.float32)
        for n in range(plain.MAX_CACHED * 2 + 5):
            self.check("mean_pooling", {f"x{n}": x}, {"chunk_size": n})
        self.assertLessEqual(len(self.requests._headers), plain.MAX_CACHED)
        self.assertLessEqual(len(self.requests._inputs), plain.MAX_CACHED)


class LazyResultTest(unittest.TestCase):
    def setUp(self):
        self.rng = np.random.default_rng(9)
        self.response = random_response(self.rng, {
            "out": self.rng.standard_normal((3, 4), dtype=np.float32),
            "lse": self.rng.standard_normal(3, dtype=np.float32).astype(kernelserve.bfloat16)})
        self.response.config.fields["threads"] = 2
        self.response.timing.total_us = 99
        self.response.config_source = pb.CONFIG_SOURCE_MEMORY

    def lazy(self):
        """A Result not built yet: of a parsed response, or (the plain path's) of its bytes."""
        message = self.response.SerializeToString()
        self.of_bytes = not getattr(self, "of_bytes", False)  # each kind in turn
        if self.of_bytes:
            return results.lazy_result(message)
        return results.result_of(pb.ExecuteResponse.FromString(message))

    def test_the_same_fields_as_a_result_built_at_once(self):
        eager = results.item_of(self.response)
        self.assertNotIn("outputs", vars(self.lazy()))  # not built before it is read
        for read in (lambda r: dataclasses.asdict(r), lambda r: r.outputs, lambda r: r.lse,
                     lambda r: r.timings, lambda r: repr(r), lambda r: r.cache_key):
            lazy = self.lazy()
            read(lazy)
            self.assertEqual(repr(dataclasses.replace(lazy, outputs={})),  # (map order: upb's)
                             repr(dataclasses.replace(eager, outputs={})))
            self.assertEqual(lazy.request_id, "r-1")
            self.assertEqual(lazy.config, eager.config)
            self.assertEqual(lazy.source, "memory")
            self.assertEqual(lazy.timings, eager.timings)
            self.assertEqual(set(lazy.outputs), {"out", "lse"})
            for name in ("out", "lse"):
                np.testing.assert_array_equal(getattr(lazy, name), eager.outputs[name])
                self.assertEqual(lazy.outputs[name].dtype, eager.outputs[name].dtype)
                self.assertFalse(lazy.outputs[name].flags.writeable)

    def test_unknown_outputs_assignments_copies_and_pickles(self):
        lazy = self.lazy()
        with self.assertRaisesRegex(AttributeError,
                                    r"no attribute 'dq'; outputs: \['lse', 'out'\]"):
            lazy.dq
        unread = self.lazy()
        self.assertFalse(hasattr(unread, "_private"))  # answered without building the fields
        self.assertNotIn("outputs", vars(unread))
        assigned = self.lazy()
        assigned.platform = "mine"  # set before the fields are built: kept
        self.assertEqual(assigned.cache_key, "k")
        self.assertEqual(assigned.platform, "mine")
        for made in (pickle.loads(pickle.dumps(self.lazy())), copy.copy(self.lazy()),
                     copy.deepcopy(self.lazy()), dataclasses.replace(self.lazy(), device=3)):
            self.assertIs(type(made), results.Result)
            self.assertNotIn("_answer", vars(made))
            np.testing.assert_array_equal(made.out, results.item_of(self.response).out)
            self.assertEqual(made.warnings, ["w1"])

    def test_threads_reading_one_result_see_the_same_outputs(self):
        build = results.fields_of

        def slow_build(*args):  # lets the other threads in while the fields are made
            time.sleep(0.01)
            return build(*args)

        lazy = self.lazy()
        seen = []
        threads = [threading.Thread(target=lambda: seen.append(lazy.out)) for _ in range(4)]
        with mock.patch.object(results, "fields_of", slow_build):
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join()
        self.assertEqual(len(seen), 4)
        self.assertTrue(all(out is seen[0] for out in seen))

    def test_request_id_is_the_answers_and_the_default_stays(self):
        for _ in range(2):
            self.assertEqual(self.lazy().request_id, "r-1")  # read first: the answer's
        self.assertEqual(results.Result.request_id, "")
        self.assertEqual([f.default for f in dataclasses.fields(results.Result)
                          if f.name == "request_id"], [""])
        made = results.Result(outputs={}, timings={}, config={}, source="memory", platform="cpu",
                              device=-1, device_fingerprint="", cache_key="", warnings=[])
        self.assertEqual(made.request_id, "")
        self.response.request_id = ""
        self.assertEqual(self.lazy().request_id, "")

    def test_an_answer_that_does_not_parse_is_internal_when_read(self):
        message = self.response.SerializeToString()
        lazy = results.lazy_result(message[:-3])
        for _ in range(2):  # the same error each time
            with self.assertRaises(kernelserve.KernelserveError) as raised:
                lazy.out
            self.assertEqual(raised.exception.code, grpc.StatusCode.INTERNAL)
            self.assertIn("does not parse", str(raised.exception))

    def test_an_in_band_error_is_raised_by_the_call(self):
        self.response.status.code = 3
        self.response.status.message = "bad x"
        with self.assertRaises(kernelserve.KernelserveError) as raised:  # (bytes: transport's)
            results.result_of(pb.ExecuteResponse.FromString(self.response.SerializeToString()))
        self.assertEqual(raised.exception.code, grpc.StatusCode.INVALID_ARGUMENT)
        self.assertIn("bad x", str(raised.exception))


class FakeChannel:
    """A kernelserve._native.Channel that answers every call with `answer`."""

    def __init__(self, code, answer):
        self.code, self.answer = code, answer

    def call(self, method, pieces, timeout, metadata, bytes_below=0):
        return self.code, "no" if self.code else "", self.answer


class LazyAnswerTest(unittest.TestCase):
    def setUp(self):
        self.rng = np.random.default_rng(13)

    def test_has_field_reads_the_tags_as_protobuf_does(self):
        from kernelserve import _native
        status = pb.RpcStatus(code=5, message="gone")
        for outputs in ({}, {"out": np.ones((2, 3), np.float32)}):
            response = random_response(self.rng, outputs)
            self.assertFalse(_native.has_field(response.SerializeToString(), 10))
            self.assertTrue(_native.has_field(response.SerializeToString(), 4))  # platform
            response.status.CopyFrom(status)
            self.assertTrue(_native.has_field(response.SerializeToString(), 10))
            response.ClearField("status")
            response.status.SetInParent()  # there, empty
            self.assertTrue(_native.has_field(response.SerializeToString(), 10))
        self.assertFalse(_native.has_field(b"", 10))
        message = random_response(self.rng, {}).SerializeToString()
        for bad in (message[:-1], b"\x0a\xff", b"\x00\x01", b"\x0b\x00", b"\xff" * 11,
                    b"\x09\x01"):
            self.assertTrue(_native.has_field(bad, 10), bad)  # for the caller's parse to say

    def transport(self, code, answer):
        native = transport.NativeTransport.__new__(transport.NativeTransport)
        native._channel, native._target = FakeChannel(code, answer), "t"
        return native

    def test_execute_lazily(self):
        response = random_response(self.rng, {"out": np.ones(4, np.float32)})
        message = response.SerializeToString()
        self.assertEqual(self.transport(0, message).execute_lazily([b""], 1.0, ()), message)
        self.assertEqual(self.transport(0, message).execute(wire.Spliced([b""], 0), 1.0, ()),
                         (response, {}))
        response.status.code, response.status.message = 3, "bad x"
        parsed, datas = self.transport(0, response.SerializeToString()).execute_lazily(
            [b""], 1.0, ())
        self.assertEqual((parsed, datas), (response, {}))
        with self.assertRaises(kernelserve.KernelserveError) as raised:
            self.transport(0, message + b"\x52\x05ab").execute_lazily([b""], 1.0, ())
        self.assertEqual(raised.exception.code, grpc.StatusCode.INTERNAL)
        with self.assertRaises(kernelserve.KernelserveError) as raised:
            self.transport(14, None).execute_lazily([b""], 1.0, ())
        self.assertEqual(raised.exception.code, grpc.StatusCode.UNAVAILABLE)


class TransportChoiceTest(unittest.TestCase):
    def test_the_extension_is_built(self):
        # make test installs the package with its extension; the fallback is tested by choice.
        self.assertTrue(transport.native_available(), transport.import_error())

    def test_use_native(self):
        with mock.patch.dict(os.environ, {"KERNELSERVE_NATIVE": "1"}):
            self.assertTrue(transport.use_native(None, secure=False))
            self.assertFalse(transport.use_native(None, secure=True))
            self.assertFalse(transport.use_native(False, secure=False))
            self.assertTrue(transport.use_native(True, secure=False))
            with self.assertRaisesRegex(kernelserve.ArgumentError, "plaintext"):
                transport.use_native(True, secure=True)
        with mock.patch.dict(os.environ, {"KERNELSERVE_NATIVE": "0"}):
            self.assertFalse(transport.use_native(None, secure=False))
        with mock.patch.object(transport, "_native", None):
            self.assertFalse(transport.use_native(None, secure=False))
            with self.assertRaisesRegex(kernelserve.ArgumentError, "not built"):
                transport.use_native(True, secure=False)


if __name__ == "__main__":
    unittest.main()
