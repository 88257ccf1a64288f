"""Triton's own CUDA shared-memory utilities against a kernelserve-server on this host's GPU.

Not part of ctest (it needs a GPU); run it on a GPU machine with tritonclient[grpc] and
cuda-python (tritonclient.utils.cuda_shared_memory imports cuda.bindings) importable:

    KERNELSERVE_SERVER=build/server/kernelserve-server \
        python3 -m unittest -v tests/client/gpu/test_tritonclient_cuda_shm.py

It does what a Triton user's script, or perf_analyzer --shared-memory=cuda, does: creates a CUDA
region with tritonclient.utils.cuda_shared_memory, fills it, registers its raw IPC handle over
KServe v2, runs mean_pooling and flash_attention with inputs and outputs in the region, and reads
the outputs back with the same utilities. Outputs are poisoned first and compared bit for bit
with the same calls made inline over v2, and with the NumPy references.
"""

import os
import sys
import unittest

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import references  # noqa: E402

IMPORT_ERROR = ""
try:
    import tritonclient.grpc as grpcclient
    import tritonclient.utils.cuda_shared_memory as cudashm
    from tritonclient.utils import InferenceServerException
    from triton_fixture import TritonServer
except (ImportError, RuntimeError) as error:  # no tritonclient; no cuda-python: RuntimeError
    grpcclient = None
    IMPORT_ERROR = str(error)

SERVER = os.environ.get("KERNELSERVE_SERVER", "")


@unittest.skipUnless(grpcclient is not None and SERVER,
                     f"needs tritonclient, cuda-python and KERNELSERVE_SERVER {IMPORT_ERROR}")
class TritonCudaSharedMemoryTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.server = TritonServer(SERVER)
        cls.client = cls.server.client
        extensions = cls.client.get_server_metadata().extensions
        if "cuda_shared_memory" not in extensions:
            cls.server.stop()
            raise unittest.SkipTest(f"the server offers no CUDA shared memory: {extensions}")

    @classmethod
    def tearDownClass(cls):
        cls.client.unregister_cuda_shared_memory()
        cls.server.stop()

    def setUp(self):
        self.rng = np.random.default_rng(abs(hash(self.id())) % (1 << 32))
        self.client.unregister_cuda_shared_memory()  # as perf_analyzer does before a run

    def uniform(self, shape, dtype):
        return self.rng.uniform(-1.0, 1.0, size=shape).astype(dtype)

    def region(self, name, arrays):
        """A CUDA region holding `arrays` back to back, registered as `name`."""
        size = sum(a.nbytes for a in arrays)
        handle = cudashm.create_shared_memory_region(name, size, 0)
        self.addCleanup(cudashm.destroy_shared_memory_region, handle)
        cudashm.set_shared_memory_region(handle, list(arrays))
        self.client.register_cuda_shared_memory(name, cudashm.get_raw_handle(handle), 0, size)
        return handle

    def output_region(self, name, nbytes):
        """A region for one output, poisoned with 0xff (read back from its start)."""
        return self.region(name, [np.full(nbytes, 0xFF, dtype=np.uint8)])

    def inline(self, model, inputs, params):
        tensors = []
        for name, array in inputs.items():
            tensor = grpcclient.InferInput(name, list(array.shape), "FP16")
            tensor.set_data_from_numpy(array)
            tensors.append(tensor)
        return self.client.infer(model, tensors, parameters=params)

    def shm_inputs(self, name, inputs):
        tensors, offset = [], 0
        for input_name, array in inputs.items():
            tensor = grpcclient.InferInput(input_name, list(array.shape), "FP16")
            tensor.set_shared_memory(name, array.nbytes, offset=offset)
            tensors.append(tensor)
            offset += array.nbytes
        return tensors, offset

    def test_mean_pooling_in_and_out_of_the_region(self):
        x = self.uniform((3, 333, 96), np.float16)
        want = self.inline("mean_pooling", {"x": x}, {}).as_numpy("out")
        self.region("pool", [x])
        handle = self.output_region("pool_out", want.nbytes)
        tensors, _ = self.shm_inputs("pool", {"x": x})
        out = grpcclient.InferRequestedOutput("out")
        out.set_shared_memory("pool_out", want.nbytes)
        result = self.client.infer("mean_pooling", tensors, outputs=[out])
        self.assertEqual([o.name for o in result.get_response().outputs], ["out"])
        self.assertEqual(len(result.get_response().raw_output_contents[0]), 0,
                         "an output in shared memory has no inline bytes")
        got = cudashm.get_contents_as_numpy(handle, np.float16, want.shape)
        self.assertEqual(got.tobytes(), want.tobytes(), "differs from the inline call")
        np.testing.assert_allclose(got.astype(np.float64),
                                   references.mean_pooling(x.astype(np.float64)),
                                   rtol=2e-3, atol=2e-3)

    def test_flash_attention_in_and_out_of_the_region(self):
        shape = (2, 257, 4, 64)
        q, k, v = (self.uniform(shape, np.float16) for _ in range(3))
        params = {"causal": True}
        want = self.inline("flash_attention", {"q": q, "k": k, "v": v}, params).as_numpy("out")
        self.region("attention", [q, k, v])
        handle = self.output_region("attention_out", want.nbytes)
        tensors, _ = self.shm_inputs("attention", {"q": q, "k": k, "v": v})
        out = grpcclient.InferRequestedOutput("out")
        out.set_shared_memory("attention_out", want.nbytes)
        self.client.infer("flash_attention", tensors, outputs=[out], parameters=params)
        got = cudashm.get_contents_as_numpy(handle, np.float16, want.shape)
        self.assertEqual(got.tobytes(), want.tobytes(), "differs from the inline call")
        expected, _ = references.attention(q, k, v, causal=True)
        np.testing.assert_allclose(got.astype(np.float32), expected, rtol=1e-2, atol=5e-3)

    def test_status_and_unregister(self):
        x = self.uniform((1, 64, 64), np.float16)
        self.region("status", [x])
        status = self.client.get_cuda_shared_memory_status()
        self.assertEqual([r.name for r in status.regions.values()], ["status"])
        region = status.regions["status"]
        self.assertEqual((region.device_id, region.byte_size), (0, x.nbytes))
        self.client.unregister_cuda_shared_memory("status")
        self.assertEqual(len(self.client.get_cuda_shared_memory_status().regions), 0)
        tensors, _ = self.shm_inputs("status", {"x": x})
        with self.assertRaises(InferenceServerException) as caught:
            self.client.infer("mean_pooling", tensors)
        self.assertIn("NOT_FOUND", str(caught.exception.status()))


if __name__ == "__main__":
    unittest.main()
