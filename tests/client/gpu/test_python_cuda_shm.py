"""The Python client's CUDA shared memory against a kernelserve-server on this host's GPU.

Not part of ctest; run it on a GPU machine, with the kernelserve package installed (or on
PYTHONPATH) and torch with CUDA:

    KERNELSERVE_SERVER=build/server/kernelserve-server PYTHONPATH=<site-packages with kernelserve> \
        python3 -m unittest -v tests/client/gpu/test_python_cuda_shm.py

It starts the server (tests/client/server_fixture.py), registers a torch CUDA buffer (and a CuPy
one when CuPy is there), runs mean_pooling and flash_attention (f16) with inputs and outputs in
the region, and checks them bit for bit against the same calls made inline and against the
NumPy references. Skipped without torch and a GPU, or when the server sees no GPU.
"""

import os
import sys
import unittest

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import kernelserve  # noqa: E402
import references  # noqa: E402
from server_fixture import ServerProcess  # noqa: E402

try:
    import torch
    HAVE_GPU = torch.cuda.is_available()
except ImportError:
    torch = None
    HAVE_GPU = False
try:
    import cupy
except ImportError:
    cupy = None

MIB = 1 << 20


def place(buffer, offset, shape, dtype):
    """A C-contiguous torch view of `shape` and `dtype` at byte `offset` of a uint8 buffer."""
    nbytes = int(np.prod(shape)) * torch.empty(0, dtype=dtype).element_size()
    return buffer[offset:offset + nbytes].view(dtype).view(*shape)


@unittest.skipUnless(HAVE_GPU, "needs torch with a CUDA GPU")
class CudaSharedMemoryTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.server = ServerProcess()
        cls.client = kernelserve.Client(cls.server.target)
        if not any(d.device >= 0 for d in cls.client.info().devices):
            cls.tearDownClass()
            raise unittest.SkipTest("the server sees no GPU")

    @classmethod
    def tearDownClass(cls):
        cls.client.close()
        cls.server.stop()

    def setUp(self):
        self.rng = np.random.default_rng()  # fresh inputs on every run
        self.buffer = torch.empty(16 * MIB, dtype=torch.uint8, device="cuda")

    def tearDown(self):
        self.client.unregister_shm()
        self.assertEqual(self.client.shm_status(), [])

    def put(self, offset, array):
        """The array copied into the buffer at `offset`, as a torch view."""
        view = place(self.buffer, offset, array.shape, torch.float16)
        view.copy_(torch.from_numpy(array))
        return view

    def poisoned(self, offset, shape):
        view = place(self.buffer, offset, shape, torch.float16)
        view.fill_(float("nan"))
        return view

    def test_status_and_close(self):
        region = self.client.register_cuda_shm("gpu", self.buffer)
        self.assertIsInstance(region, kernelserve.CudaSharedMemory)
        self.assertEqual(region.base, self.buffer.data_ptr())  # torch: a fresh segment
        self.assertGreaterEqual(region.byte_size, self.buffer.numel())
        [status] = self.client.shm_status()
        self.assertEqual((status.name, status.kind, status.device, status.byte_size),
                         ("gpu", "cuda", torch.cuda.current_device(), region.byte_size))
        ref = region.ref(place(self.buffer, 4096, (16, 8), torch.float16))
        self.assertEqual((ref.region, ref.offset, ref.shape, ref.nbytes),
                         ("gpu", 4096, (16, 8), 256))
        region.close()
        self.assertTrue(region.closed)
        self.assertEqual(self.client.shm_status(), [])
        self.buffer.fill_(1)  # the memory stays the caller's
        torch.cuda.synchronize()

    def test_mean_pooling_in_and_out_of_the_region(self):
        x = self.rng.uniform(-1, 1, (4, 300, 512)).astype(np.float16)
        with self.client.register_cuda_shm("pool", self.buffer) as region:
            gx = self.put(0, x)
            out = self.poisoned(8 * MIB, (4, 512))
            torch.cuda.synchronize()
            r = self.client.mean_pooling(gx, outputs={"out": out})
            self.assertIs(r.out, out)
            self.assertGreaterEqual(r.device, 0)
            inline = self.client.mean_pooling(x, platform="cuda").out
            np.testing.assert_array_equal(out.cpu().numpy().view(np.uint16),
                                          inline.view(np.uint16))
            np.testing.assert_allclose(out.cpu().numpy().astype(np.float32),
                                       references.mean_pooling(x.astype(np.float32)),
                                       rtol=1e-2, atol=2e-3)
            # The RegionTensor as an input and an output: the output is that RegionTensor.
            out.fill_(float("nan"))
            ref = region.ref(out)
            r = self.client.mean_pooling(region.ref(gx), outputs={"out": ref})
            self.assertEqual(r.out, ref)
            np.testing.assert_array_equal(out.cpu().numpy().view(np.uint16),
                                          inline.view(np.uint16))

    def test_flash_attention_f16(self):
        shape = (2, 257, 4, 64)
        q, k, v = (self.rng.uniform(-1, 1, shape).astype(np.float16) for _ in range(3))
        with self.client.register_cuda_shm("attention", self.buffer):
            gq, gk = self.put(0, q), self.put(2 * MIB, k)  # v inline
            out = self.poisoned(4 * MIB, shape)
            torch.cuda.synchronize()
            r = self.client.flash_attention(gq, gk, v, causal=True, outputs={"out": out})
            self.assertIs(r.out, out)
            inline = self.client.flash_attention(q, k, v, causal=True, platform="cuda").out
            np.testing.assert_array_equal(out.cpu().numpy().view(np.uint16),
                                          inline.view(np.uint16))
            expected, _ = references.attention(q, k, v, causal=True)
            np.testing.assert_allclose(out.cpu().numpy().astype(np.float32), expected,
                                       rtol=1e-2, atol=5e-3)

    @unittest.skipUnless(cupy is not None, "needs CuPy")
    def test_cupy_array(self):
        x = self.rng.uniform(-1, 1, (3, 100, 256)).astype(np.float16)
        memory = cupy.empty(4 * MIB, cupy.uint8)
        with self.client.register_cuda_shm("cupy", memory) as region:
            gx = memory[:x.nbytes].view(cupy.float16).reshape(x.shape)
            gx.set(x)
            out = memory[MIB:MIB + 3 * 256 * 2].view(cupy.float16).reshape(3, 256)
            out.fill(np.nan)
            cupy.cuda.runtime.deviceSynchronize()
            self.assertEqual(region.ref(out).offset, MIB)
            r = self.client.mean_pooling(gx, outputs={"out": out})
            self.assertIs(r.out, out)
            inline = self.client.mean_pooling(x, platform="cuda").out
            np.testing.assert_array_equal(out.get().view(np.uint16), inline.view(np.uint16))

    def test_errors(self):
        outside = torch.zeros(64, dtype=torch.float16, device="cuda")
        with self.client.register_cuda_shm("errors", self.buffer):
            with self.assertRaises(kernelserve.ArgumentError):  # not in any region
                self.client.mean_pooling(outside.view(1, 8, 8))
            with self.assertRaises(kernelserve.ArgumentError):  # not C-contiguous
                self.client.mean_pooling(place(self.buffer, 0, (8, 8), torch.float16).t()[None])
            with self.assertRaises(kernelserve.KernelserveError) as raised:
                self.client.register_cuda_shm("errors", self.buffer)
            self.assertEqual(raised.exception.code.name, "ALREADY_EXISTS")


if __name__ == "__main__":
    unittest.main()
