"""The KServe v2 (Open Inference Protocol) front door through Triton's own Python client,
tritonclient.grpc (the newest, installed with the kernelserve package in the client tests'
virtualenv: tests/client/CMakeLists.txt): what
Triton's tools call, results against float64 references and bit for bit against the native API
(through the kernelserve CLI), system shared memory through tritonclient.utils.shared_memory,
and the messages' field numbers against tritonclient's own.

The binaries come from the environment: KERNELSERVE_SERVER and KERNELSERVE_CLI.
"""

import os
import queue
import shutil
import subprocess
import tempfile
import time
import unittest

import ml_dtypes
import numpy as np
import tritonclient.grpc as grpcclient
from google.protobuf import descriptor_pb2
from tritonclient.grpc import model_config_pb2, service_pb2
from tritonclient.utils import InferenceServerException
from tritonclient.utils import shared_memory as shm

import references
from triton_fixture import TritonServer, free_port

SERVER = os.environ.get("KERNELSERVE_SERVER", "")
TOY_SERVER = os.environ.get("KERNELSERVE_TOY_SERVER", "")  # with the tests' extra kernels
CLI = os.environ.get("KERNELSERVE_CLI", "")
SOURCE = os.environ.get("KERNELSERVE_SOURCE_DIR", "")
REQUIRED = {"mean_pooling": {"x"}, "flash_attention": {"q", "k", "v"},
            "mean_pooling_bwd": {"dout", "x"},
            "flash_attention_bwd": {"q", "k", "v", "out", "lse", "dout"},
            "paged_attention": {"q", "k_cache", "v_cache", "block_table", "cache_seqlens"}}
TOLERANCE = {np.float32: 2e-5, np.float16: 2e-3, ml_dtypes.bfloat16: 2e-2}


def make_input(name, array):
    datatype = {np.dtype(np.float32): "FP32", np.dtype(np.float16): "FP16",
                np.dtype(ml_dtypes.bfloat16): "BF16", np.dtype(np.int32): "INT32",
                np.dtype(np.int64): "INT64", np.dtype(np.bool_): "BOOL"}[array.dtype]
    tensor = grpcclient.InferInput(name, list(array.shape), datatype)
    tensor.set_data_from_numpy(array)
    return tensor


class V2ServerCase(unittest.TestCase):
    """A server of `binary` for the class's tests, Triton's client on it, and the helpers that
    call it through both front doors."""
    binary = SERVER

    @classmethod
    def setUpClass(cls):
        cls.server = TritonServer(cls.binary, timeout=30)
        cls.target, cls.client = cls.server.target, cls.server.client
        cls.dir = tempfile.mkdtemp(prefix="kernelserve-v2-")

    @classmethod
    def tearDownClass(cls):
        cls.server.stop()
        shutil.rmtree(cls.dir, ignore_errors=True)

    def setUp(self):
        self.rng = np.random.default_rng(abs(hash(self.id())) % (1 << 32))

    def uniform(self, shape, dtype=np.float32):
        return self.rng.uniform(-1.0, 1.0, size=shape).astype(dtype)

    def native(self, kernel, inputs, params):
        """The native API's outputs of the same call, through the CLI: {name: array}."""
        out = tempfile.mkdtemp(dir=self.dir)
        args = [CLI, "--target", self.target, "run", kernel, f"--output-dir={out}"]
        for name, array in inputs.items():
            path = os.path.join(out, f"in-{name}.npy")
            bf16 = array.dtype == ml_dtypes.bfloat16
            np.save(path, array.view(np.uint16) if bf16 else array)
            args.append(f"--input={name}={'bf16:' if bf16 else ''}{path}")
        args += [f"--param={k}={str(v).lower() if isinstance(v, bool) else v}"
                 for k, v in params.items()]
        proc = subprocess.run(args, capture_output=True, text=True, timeout=120)
        self.assertEqual(proc.returncode, 0, proc.stderr)
        return {f[:-4]: np.load(os.path.join(out, f)) for f in os.listdir(out)
                if f.endswith(".npy") and not f.startswith("in-")}

    def infer(self, model, inputs, params, outputs=None):
        requested = [grpcclient.InferRequestedOutput(o) for o in outputs] if outputs else None
        return self.client.infer(model, [make_input(n, a) for n, a in inputs.items()],
                                 parameters=params, outputs=requested)

    def assert_same_bits(self, result, native):
        outputs = result.get_response().outputs
        self.assertEqual(sorted(native), sorted(o.name for o in outputs))
        for name, want in native.items():
            got = result.as_numpy(name)
            self.assertIsNotNone(got, name)
            self.assertEqual(got.shape, want.shape, name)
            if got.dtype == ml_dtypes.bfloat16:
                got = got.view(np.uint16)
            self.assertEqual(got.tobytes(), want.tobytes(), f"{name} differs from the native")


class KServeV2Test(V2ServerCase):
    def test_live_ready_and_server_metadata(self):
        self.assertTrue(self.client.is_server_live())
        self.assertTrue(self.client.is_server_ready())
        for model in REQUIRED:
            self.assertTrue(self.client.is_model_ready(model))
            self.assertTrue(self.client.is_model_ready(model, "1"))
        metadata = self.client.get_server_metadata()
        self.assertEqual(metadata.name, "kernelserve")
        self.assertTrue({"model_configuration", "statistics", "parameters"}
                        <= set(metadata.extensions))
        index = self.client.get_model_repository_index()
        self.assertEqual({(m.name, m.version, m.state) for m in index.models},
                         {(m, "1", "READY") for m in REQUIRED})

    def test_unknown_models_are_not_ready_as_triton_answers(self):
        """ModelReady of a model or version the server lacks answers False (Triton's ModelReady
        is OK with ready false); the calls that describe a model raise NOT_FOUND naming the
        models there are."""
        self.assertFalse(self.client.is_model_ready("no_such_model"))
        self.assertFalse(self.client.is_model_ready("mean_pooling", "2"))
        self.assertFalse(self.client.is_model_ready("mean_pooling@v1"))  # the native id
        for describe in (self.client.get_model_metadata, self.client.get_model_config,
                         self.client.get_inference_statistics):
            with self.assertRaises(InferenceServerException) as caught:
                describe("no_such_model")
            self.assertIn("NOT_FOUND", str(caught.exception.status()), describe.__name__)
            self.assertIn("mean_pooling", caught.exception.message(), describe.__name__)

    def test_metadata_and_config_agree_as_perf_analyzer_needs(self):
        for model, required in REQUIRED.items():
            metadata = self.client.get_model_metadata(model)
            config = self.client.get_model_config(model).config
            self.assertEqual(config.name, model)
            self.assertEqual(config.max_batch_size, 0)
            self.assertEqual(list(metadata.versions), ["1"])
            listed = {t.name: t for t in metadata.inputs}
            self.assertEqual([i.name for i in config.input], [t.name for t in metadata.inputs])
            for tensor in config.input:
                self.assertEqual(tensor.optional, tensor.name not in required, tensor.name)
                entry = listed[tensor.name]
                self.assertEqual(model_config_pb2.DataType.Name(tensor.data_type),
                                 "TYPE_" + entry.datatype)
                self.assertEqual(list(tensor.dims), list(entry.shape))
            outputs = {t.name: t for t in metadata.outputs}
            self.assertEqual([o.name for o in config.output], list(outputs))
            for tensor in config.output:
                self.assertEqual(model_config_pb2.DataType.Name(tensor.data_type),
                                 "TYPE_" + outputs[tensor.name].datatype)
                self.assertEqual(list(tensor.dims), list(outputs[tensor.name].shape))

    def test_attention_in_every_dtype_with_params(self):
        params = {"causal": True, "window_left": 5, "softmax_scale": 0.4, "return_lse": True}
        for dtype, tol in TOLERANCE.items():
            q = self.uniform((2, 13, 4, 32), dtype)
            k = self.uniform((2, 17, 2, 32), dtype)
            v = self.uniform((2, 17, 2, 32), dtype)
            result = self.infer("flash_attention", {"q": q, "k": k, "v": v}, params)
            out, lse = references.attention(q.astype(np.float64), k.astype(np.float64),
                                            v.astype(np.float64), causal=True, window_left=5,
                                            softmax_scale=0.4)
            np.testing.assert_allclose(result.as_numpy("out").astype(np.float64), out,
                                       rtol=tol, atol=tol)
            np.testing.assert_allclose(result.as_numpy("lse"), lse, rtol=1e-4, atol=1e-4)
            self.assert_same_bits(result, self.native("flash_attention",
                                                      {"q": q, "k": k, "v": v}, params))
            response = result.get_response()
            self.assertEqual(response.model_name, "flash_attention")
            self.assertEqual(response.parameters["platform"].string_param, "cpu")

    def test_attention_with_every_optional_input_equals_the_native(self):
        q, k, v = (self.uniform(s) for s in ((2, 11, 4, 16), (2, 11, 4, 16), (2, 11, 4, 16)))
        ids = self.rng.integers(0, 3, size=(2, 11)).astype(np.int32)
        dense = {"q": q, "k": k, "v": v, "bias": self.uniform((1, 4, 11, 11)),
                 "q_segment_ids": ids, "kv_segment_ids": ids}
        params = {"window_right": 3, "logits_soft_cap": 5.0, "return_lse": True}
        self.assert_same_bits(self.infer("flash_attention", dense, params),
                              self.native("flash_attention", dense, params))
        varlen = {"q": self.uniform((9, 4, 16)), "k": self.uniform((12, 4, 16)),
                  "v": self.uniform((12, 4, 16)),
                  "cu_seqlens_q": np.array([0, 4, 9], np.int64),
                  "cu_seqlens_k": np.array([0, 5, 12], np.int64)}
        self.assert_same_bits(self.infer("flash_attention", varlen, {"causal": True}),
                              self.native("flash_attention", varlen, {"causal": True}))

    def test_mean_pooling_with_mask_and_varlen(self):
        for dtype, tol in TOLERANCE.items():
            x = self.uniform((3, 21, 40), dtype)
            mask = self.rng.integers(0, 2, size=(3, 21)).astype(np.bool_)
            result = self.infer("mean_pooling", {"x": x, "mask": mask}, {"chunk_size": 7},
                                outputs=["out"])
            np.testing.assert_allclose(result.as_numpy("out").astype(np.float64),
                                       references.mean_pooling(x.astype(np.float64), mask),
                                       rtol=tol, atol=tol)
            self.assert_same_bits(result, self.native("mean_pooling", {"x": x, "mask": mask},
                                                      {"chunk_size": 7}))
        x = self.uniform((10, 8))
        cu = np.array([0, 3, 3, 10], np.int32)
        result = self.infer("mean_pooling", {"x": x, "cu_seqlens": cu}, {})
        np.testing.assert_allclose(result.as_numpy("out"), references.mean_pooling(x, None, cu),
                                   rtol=2e-5, atol=2e-5)

    def test_async_and_stream_infer(self):
        x = self.uniform((2, 9, 16))
        want = self.native("mean_pooling", {"x": x}, {})
        done = queue.Queue()
        self.client.async_infer("mean_pooling", [make_input("x", x)],
                                callback=lambda result, error: done.put((result, error)))
        result, error = done.get(timeout=30)
        self.assertIsNone(error)
        self.assert_same_bits(result, want)
        answers = queue.Queue()
        self.client.start_stream(callback=lambda result, error: answers.put((result, error)))
        try:
            for i in range(3):
                self.client.async_stream_infer("mean_pooling", [make_input("x", x)],
                                               request_id=f"s{i}")
            self.client.async_stream_infer("no_such_model", [make_input("x", x)],
                                           request_id="bad")
            got = [answers.get(timeout=30) for _ in range(4)]
        finally:
            self.client.stop_stream()
        ok = [r for r, e in got if e is None]
        errors = [e for r, e in got if e is not None]
        self.assertEqual(len(ok), 3)
        for result in ok:
            self.assert_same_bits(result, want)
        self.assertEqual(sorted(r.get_response().id for r in ok), ["s0", "s1", "s2"])
        self.assertEqual(len(errors), 1)
        self.assertIn("unknown model 'no_such_model'", str(errors[0]))

    def test_statistics_count_the_calls(self):
        def stats():
            return self.client.get_inference_statistics("mean_pooling").model_stats[0]
        before = stats()
        x = self.uniform((1, 4, 8))
        for _ in range(3):
            self.infer("mean_pooling", {"x": x}, {})
        after = stats()
        self.assertEqual(after.inference_count - before.inference_count, 3)
        self.assertEqual(after.execution_count - before.execution_count, 3)
        ok = after.inference_stats.success
        self.assertEqual(ok.count - before.inference_stats.success.count, 3)
        self.assertGreater(ok.ns, before.inference_stats.success.ns)
        every = self.client.get_inference_statistics()
        self.assertEqual({s.name for s in every.model_stats}, set(REQUIRED))

    def test_shared_memory_calls_triton_tools_make(self):
        # perf_analyzer unregisters everything before and after a run.
        self.client.unregister_system_shared_memory()
        self.client.unregister_cuda_shared_memory()
        self.assertEqual(len(self.client.get_system_shared_memory_status().regions), 0)
        with self.assertRaises(InferenceServerException) as caught:
            self.client.register_cuda_shared_memory("c", b"\0" * 64, 0, 64)
        self.assertIn("UNIMPLEMENTED", str(caught.exception.status()))

    def test_system_shared_memory_register_infer_unregister(self):
        q, k, v = (self.uniform((1, 24, 4, 32), np.float16) for _ in range(3))
        params = {"causal": True, "return_lse": True}
        want = self.native("flash_attention", {"q": q, "k": k, "v": v}, params)
        size = q.nbytes * 3 + want["out"].nbytes + want["lse"].nbytes
        key = f"/kernelserve-v2-{os.getpid()}"
        handle = shm.create_shared_memory_region("tensors", key, size)
        try:
            shm.set_shared_memory_region(handle, [q, k, v])
            self.client.register_system_shared_memory("tensors", key, size)
            status = self.client.get_system_shared_memory_status()
            self.assertEqual([r.name for r in status.regions.values()], ["tensors"])
            inputs = []
            for i, (name, array) in enumerate((("q", q), ("k", k), ("v", v))):
                tensor = grpcclient.InferInput(name, list(array.shape), "FP16")
                tensor.set_shared_memory("tensors", array.nbytes, offset=i * q.nbytes)
                inputs.append(tensor)
            out = grpcclient.InferRequestedOutput("out")
            out.set_shared_memory("tensors", want["out"].nbytes, offset=3 * q.nbytes)
            lse = grpcclient.InferRequestedOutput("lse")
            lse.set_shared_memory("tensors", want["lse"].nbytes,
                                  offset=3 * q.nbytes + want["out"].nbytes)
            result = self.client.infer("flash_attention", inputs, outputs=[out, lse],
                                       parameters=params)
            self.assertEqual([o.name for o in result.get_response().outputs], ["out", "lse"])
            got_out = shm.get_contents_as_numpy(handle, np.float16, want["out"].shape,
                                                offset=3 * q.nbytes)
            got_lse = shm.get_contents_as_numpy(handle, np.float32, want["lse"].shape,
                                                offset=3 * q.nbytes + want["out"].nbytes)
            self.assertEqual(got_out.tobytes(), want["out"].tobytes())
            self.assertEqual(got_lse.tobytes(), want["lse"].tobytes())
            self.client.unregister_system_shared_memory("tensors")
            with self.assertRaises(InferenceServerException) as caught:
                self.client.infer("flash_attention", inputs, outputs=[out, lse],
                                  parameters=params)
            self.assertIn("NOT_FOUND", str(caught.exception.status()))
        finally:
            self.client.unregister_system_shared_memory()
            shm.destroy_shared_memory_region(handle)

    def test_bad_requests(self):
        x = self.uniform((2, 5, 8))
        cases = [("no_model", {"x": x}, {}, "NOT_FOUND", "unknown model"),
                 ("mean_pooling", {"y": x}, {}, "INVALID_ARGUMENT", "input 'y'"),
                 ("mean_pooling", {"x": x}, {"bogus": 1}, "INVALID_ARGUMENT", "bogus"),
                 ("mean_pooling", {"x": x}, {"chunk_size": "big"}, "INVALID_ARGUMENT",
                  "chunk_size")]
        for model, inputs, params, code, says in cases:
            with self.assertRaises(InferenceServerException) as caught:
                self.infer(model, inputs, params)
            self.assertIn(code, str(caught.exception.status()), (model, inputs.keys(), params))
            self.assertIn(says, caught.exception.message())
        self.assertTrue(self.client.is_server_live())

    def test_field_numbers_are_the_published_ones(self):
        protoc = shutil.which("protoc")
        self.assertIsNotNone(protoc, "protoc (Debian's protobuf-compiler) is needed")
        out = os.path.join(self.dir, "inference.desc")
        subprocess.run([protoc, f"--proto_path={SOURCE}/proto", f"--descriptor_set_out={out}",
                        "inference/model_config.proto", "inference/grpc_service.proto"],
                       check=True)
        with open(out, "rb") as f:
            ours = descriptor_pb2.FileDescriptorSet.FromString(f.read())
        pools = {"inference/grpc_service.proto": service_pb2.DESCRIPTOR,
                 "inference/model_config.proto": model_config_pb2.DESCRIPTOR}
        checked = 0

        def compare(message, theirs):
            nonlocal checked
            for field in message.field:
                published = theirs.fields_by_name.get(field.name)
                self.assertIsNotNone(published, f"{message.name}.{field.name} is not published")
                self.assertEqual(field.number, published.number, f"{message.name}.{field.name}")
                self.assertEqual(field.type, published.type, f"{message.name}.{field.name}")
                checked += 1
            for nested in message.nested_type:
                if not nested.options.map_entry:
                    compare(nested, theirs.nested_types_by_name[nested.name])

        for file in ours.file:
            theirs = pools[file.name]
            for message in file.message_type:
                compare(message, theirs.message_types_by_name[message.name])
            for enum in file.enum_type:
                published = theirs.enum_types_by_name[enum.name]
                for value in enum.value:
                    self.assertEqual(value.number, published.values_by_name[value.name].number)
            for service in file.service:
                published = theirs.services_by_name[service.name]
                for method in service.method:
                    self.assertIn(method.name, published.methods_by_name)
        self.assertGreater(checked, 100)


@unittest.skipUnless(TOY_SERVER, "KERNELSERVE_TOY_SERVER is not set")
class KServeV2ExampleKernelTest(V2ServerCase):
    """rms_norm, the example kernel of docs/ADDING_A_KERNEL.md, which only the toy server
    registers: a model of the v2 front door from its schema alone, against the float64
    reference and bit for bit against the native API."""
    binary = TOY_SERVER

    def setUp(self):
        self.rng = np.random.default_rng(41)

    def test_model_from_the_schema(self):
        self.assertTrue(self.client.is_model_ready("rms_norm"))
        metadata = self.client.get_model_metadata("rms_norm")
        self.assertEqual([t.name for t in metadata.inputs], ["x", "weight"])
        self.assertEqual([t.name for t in metadata.outputs], ["out"])
        config = self.client.get_model_config("rms_norm").config
        self.assertEqual([t.optional for t in config.input], [False, True])

    def test_rms_norm_in_every_dtype_with_eps(self):
        for dtype, tol in TOLERANCE.items():
            x = self.uniform((3, 9, 48), dtype)
            weight = self.uniform((48,), dtype)
            inputs = {"x": x, "weight": weight}
            result = self.infer("rms_norm", inputs, {"eps": 0.05})
            got = result.as_numpy("out")
            self.assertEqual((got.dtype, got.shape), (x.dtype, x.shape))
            np.testing.assert_allclose(got.astype(np.float64),
                                       references.rms_norm(x.astype(np.float64),
                                                           weight.astype(np.float64), 0.05),
                                       rtol=tol, atol=tol)
            self.assert_same_bits(result, self.native("rms_norm", inputs, {"eps": 0.05}))

    def test_bad_requests(self):
        x = self.uniform((2, 5))
        cases = [({"x": x, "weight": self.uniform((4,))}, {},
                  "input 'weight': expected shape [H] = [5], got [4]"),
                 ({"x": x}, {"eps": 0.0}, "param 'eps' = 0 is out of range"),
                 ({"x": x}, {"epsilon": 0.1}, "epsilon")]
        for inputs, params, says in cases:
            with self.assertRaises(InferenceServerException) as caught:
                self.infer("rms_norm", inputs, params)
            self.assertIn("INVALID_ARGUMENT", str(caught.exception.status()), says)
            self.assertIn(says, caught.exception.message())


class KServeV2TokenTest(unittest.TestCase):
    """With --auth-token-file, the front door needs the token like the native service."""

    def test_calls_need_the_bearer_token(self):
        directory = tempfile.mkdtemp(prefix="kernelserve-v2-token-")
        token_file = os.path.join(directory, "token")
        with open(token_file, "w") as f:
            f.write("s3cret\n")
        target = f"127.0.0.1:{free_port()}"
        process = subprocess.Popen(
            [SERVER, f"--listen={target}", "--metrics-listen=off", "--cache=memory",
             f"--auth-token-file={token_file}"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        client = grpcclient.InferenceServerClient(target)
        good = {"authorization": "Bearer s3cret"}
        try:
            deadline = time.monotonic() + 30
            while True:
                try:
                    if client.is_server_live(headers=good):
                        break
                except InferenceServerException:
                    if time.monotonic() > deadline:
                        raise
                    time.sleep(0.1)
            x = np.ones((1, 4, 8), np.float32)
            result = client.infer("mean_pooling", [make_input("x", x)], headers=good)
            np.testing.assert_array_equal(result.as_numpy("out"), np.ones((1, 8), np.float32))
            for headers in (None, {"authorization": "Bearer wrong"}):
                for call in (lambda h: client.is_server_ready(headers=h),
                             lambda h: client.get_model_metadata("mean_pooling", headers=h),
                             lambda h: client.infer("mean_pooling", [make_input("x", x)],
                                                    headers=h)):
                    with self.assertRaises(InferenceServerException) as caught:
                        call(headers)
                    self.assertIn("UNAUTHENTICATED", str(caught.exception.status()))
        finally:
            client.close()
            process.terminate()
            process.wait(timeout=30)
            shutil.rmtree(directory, ignore_errors=True)


if __name__ == "__main__":
    unittest.main()
