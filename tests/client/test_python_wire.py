"""kernelserve.wire and kernelserve.transport without a server: the spliced request is the
message protobuf writes, an answer read in place is the message protobuf parses, and the
choice of transport follows its flag.

Runs in the virtualenv of client/python/scripts/make_venv.py (ctest fixture client_python_env).
"""

import os
import unittest
from unittest import mock

import numpy as np

import kernelserve
from kernelserve import calls, tensors, transport, wire
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
