"""The Python package against a real kernelserve-server process (see server_fixture.py).

Runs in the virtualenv that client/python/scripts/make_venv.py makes (ctest fixture
client_python_env): the package under test is the one pip installed there.
"""

import asyncio
import concurrent.futures
import dataclasses
import gc
import os
import tempfile
import threading
import unittest
import weakref
from multiprocessing import shared_memory
from unittest import mock

import grpc
import numpy as np

import kernelserve
import references
from server_fixture import TOY_SERVER, ServerProcess, free_port

SOURCES = {"override", "overlay", "memory", "file", "redis", "autotune", "heuristic"}


def uniform(rng, shape, dtype=np.float32):
    return rng.uniform(-1.0, 1.0, size=shape).astype(dtype)


class PythonClientTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.server = ServerProcess()
        cls.client = kernelserve.Client(cls.server.target)

    @classmethod
    def tearDownClass(cls):
        cls.client.close()
        cls.server.stop()

    def setUp(self):
        self.rng = np.random.default_rng(int.from_bytes(self.id().encode()[-4:], "little"))

    def assertCode(self, code, fn, *args, **kwargs):
        with self.assertRaises(kernelserve.KernelserveError) as ctx:
            fn(*args, **kwargs)
        self.assertEqual(ctx.exception.code, code, ctx.exception.message)
        return ctx.exception

    def test_health_info_kernels(self):
        self.assertEqual(self.client.health(), "SERVING")
        self.assertEqual(self.client.health("kernelserve.v1.KernelService"), "SERVING")
        info = self.client.info()
        # Plain Python values, not the protobuf message.
        self.assertIsInstance(info, kernelserve.ServerInfo)
        self.assertIsInstance(info.version, str)
        self.assertTrue(info.version)
        self.assertIsInstance(info.cache_tiers, list)
        self.assertIn("memory", info.cache_tiers)
        self.assertIsInstance(info.max_message_bytes, int)
        self.assertGreaterEqual(len(info.devices), 1)
        self.assertTrue(all(isinstance(d, kernelserve.DeviceInfo) for d in info.devices))
        self.assertIn(-1, [d.device for d in info.devices])  # this server runs on the CPU
        self.assertEqual(info.autotune_budget, 30.0)  # --autotune-budget's default, in seconds
        kernels = {k.name: k for k in self.client.kernels()}
        self.assertTrue({"mean_pooling", "flash_attention"} <= set(kernels), kernels)
        pool = kernels["mean_pooling"]
        self.assertIsInstance(pool, kernelserve.KernelSchema)
        self.assertEqual(pool.id, "mean_pooling@v1")
        self.assertTrue(pool.input("x").required)
        self.assertIn("f32", pool.input("x").dtypes)
        self.assertEqual(self.client.schema("flash_attention").param("causal").default, False)

    def test_health_of_an_unknown_service_is_not_found(self):
        self.assertCode(grpc.StatusCode.NOT_FOUND, self.client.health, "no.such.Service")

    def test_mean_pooling_dense_f32(self):
        x = uniform(self.rng, (3, 37, 24))
        r = self.client.mean_pooling(x, chunk_size=8)
        self.assertEqual(r.out.dtype, np.float32)
        self.assertEqual(r.out.shape, (3, 24))
        np.testing.assert_allclose(r.out, references.mean_pooling(x), rtol=1e-5, atol=1e-6)
        self.assertIn(r.source, SOURCES)
        self.assertEqual(r.platform, "cpu")
        self.assertEqual(set(r.timings), {"recv_us", "queue_us", "select_us", "h2d_us",
                                          "launch_us", "kernel_us", "d2h_us", "total_us"})
        self.assertEqual(r.timings["launch_us"], 0)  # the CPU's kernel_us covers it
        self.assertTrue(all(v >= 0 for v in r.timings.values()), r.timings)
        self.assertGreaterEqual(r.timings["total_us"], r.timings["kernel_us"])
        self.assertTrue(r.cache_key.startswith("mean_pooling"), r.cache_key)

    def test_second_identical_call_reports_memory(self):
        x = uniform(self.rng, (2, 19, 40))
        self.client.mean_pooling(x)
        second = self.client.mean_pooling(uniform(self.rng, (2, 19, 40)))
        self.assertEqual(second.source, "memory")

    def test_mean_pooling_mask(self):
        x = uniform(self.rng, (4, 21, 16))
        mask = self.rng.integers(0, 2, size=(4, 21)).astype(bool)
        mask[2] = False  # a sequence with no counted row gives zeros
        r = self.client.mean_pooling(x, mask=mask)
        np.testing.assert_allclose(r.out, references.mean_pooling(x, mask=mask), rtol=1e-5,
                                   atol=1e-6)
        self.assertTrue(np.all(r.out[2] == 0))

    def test_mean_pooling_varlen(self):
        cu = np.array([0, 5, 5, 17, 30], dtype=np.int32)
        x = uniform(self.rng, (30, 12))
        r = self.client.mean_pooling(x, cu_seqlens=cu)
        self.assertEqual(r.out.shape, (4, 12))
        np.testing.assert_allclose(r.out, references.mean_pooling(x, cu_seqlens=cu), rtol=1e-5,
                                   atol=1e-6)

    def test_mean_pooling_bwd_with_x_by_shape_only(self):
        kernels = {k.name: k for k in self.client.kernels()}
        self.assertEqual(kernels["mean_pooling"].vjp, "mean_pooling_bwd")
        self.assertEqual(kernels["mean_pooling_bwd"].vjp_of, "mean_pooling")
        self.assertTrue(kernels["mean_pooling_bwd"].input("x").shape_only)
        cu = np.array([0, 5, 5, 17], dtype=np.int32)
        dout = uniform(self.rng, (3, 12))
        r = self.client.mean_pooling_bwd(dout, kernelserve.TensorSpec((20, 12), np.float32),
                                         cu_seqlens=cu)
        self.assertEqual(r.dx.shape, (20, 12))
        expected = np.zeros((20, 12), np.float32)
        expected[0:5] = dout[0] / np.float32(5)
        expected[5:17] = dout[2] / np.float32(12)  # sequence 1 is empty; rows 17.. count nowhere
        np.testing.assert_array_equal(r.dx, expected)
        # x with data works too (its values are not read).
        same = self.client.mean_pooling_bwd(dout, uniform(self.rng, (20, 12)), cu_seqlens=cu)
        np.testing.assert_array_equal(same.dx, expected)

    def test_mean_pooling_f16(self):
        x = uniform(self.rng, (2, 33, 64), np.float16)
        r = self.client.mean_pooling(x)
        self.assertEqual(r.out.dtype, np.float16)
        expected = references.mean_pooling(x.astype(np.float32))
        np.testing.assert_allclose(r.out.astype(np.float32), expected, rtol=1e-3, atol=1e-4)

    def test_mean_pooling_bf16(self):
        x = uniform(self.rng, (3, 16, 32)).astype(kernelserve.bfloat16)  # ml_dtypes.bfloat16
        r = self.client.mean_pooling(x)
        self.assertEqual(r.out.dtype, kernelserve.bfloat16)  # bf16 comes back as bfloat16
        self.assertEqual(r.out.shape, (3, 32))
        expected = references.mean_pooling(x.astype(np.float32))
        # Within one rounding of bf16 (8 significant bits).
        np.testing.assert_allclose(r.out.astype(np.float32), expected, rtol=2**-8, atol=1e-5)
        # uint16 arrays are still sent as bf16 bits, as before.
        bits = self.client.mean_pooling(x.view(np.uint16))
        np.testing.assert_array_equal(bits.out.view(np.uint16), r.out.view(np.uint16))

    def test_flash_attention_bf16(self):
        q, k, v = (uniform(self.rng, (1, 16, 2, 32)).astype(kernelserve.bfloat16)
                   for _ in range(3))
        r = self.client.flash_attention(q, k, v, causal=True)
        self.assertEqual(r.out.dtype, kernelserve.bfloat16)
        out, _ = references.attention(*(t.astype(np.float32) for t in (q, k, v)), causal=True)
        np.testing.assert_allclose(r.out.astype(np.float32), out, rtol=2**-7, atol=2e-2)

    def test_flash_attention_gqa_with_lse(self):
        q = uniform(self.rng, (2, 9, 4, 16))
        k = uniform(self.rng, (2, 11, 2, 16))
        v = uniform(self.rng, (2, 11, 2, 16))
        r = self.client.flash_attention(q, k, v, return_lse=True)
        out, lse = references.attention(q, k, v)
        self.assertEqual(r.out.shape, q.shape)
        self.assertEqual(r.lse.shape, (2, 4, 9))
        np.testing.assert_allclose(r.out, out, rtol=1e-4, atol=1e-5)
        np.testing.assert_allclose(r.lse, lse, rtol=1e-4, atol=1e-5)

    def test_flash_attention_causal_window_softcap_scale(self):
        # Sq > Sk: with causal, the first Sq - Sk rows see no key (zeros, lse -inf).
        q = uniform(self.rng, (1, 12, 2, 8))
        k = uniform(self.rng, (1, 8, 2, 8))
        v = uniform(self.rng, (1, 8, 2, 8))
        params = dict(causal=True, softmax_scale=0.7, window_left=3, logits_soft_cap=2.5)
        r = self.client.flash_attention(q, k, v, return_lse=True, **params)
        out, lse = references.attention(q, k, v, **params)
        np.testing.assert_allclose(r.out, out, rtol=1e-4, atol=1e-5)
        np.testing.assert_allclose(r.lse, lse, rtol=1e-4, atol=1e-5)
        self.assertTrue(np.all(np.isneginf(r.lse[0, :, :4])))
        self.assertIsNone(self.client.flash_attention(q, k, v, **params).lse)

    def test_flash_attention_f16(self):
        q, k, v = (uniform(self.rng, (1, 16, 2, 32), np.float16) for _ in range(3))
        r = self.client.flash_attention(q, k, v, window_left=4, window_right=2)
        self.assertEqual(r.out.dtype, np.float16)
        out, _ = references.attention(q, k, v, window_left=4, window_right=2)
        np.testing.assert_allclose(r.out.astype(np.float32), out, rtol=1e-3, atol=1e-4)

    def test_tiny_calls_in_a_row_with_other_params_shapes_and_dtypes(self):
        # Tiny calls take kernelserve.plain's cached request pieces (with the native transport):
        # no call may carry another's params, shapes, dtypes or bytes.
        q, k, v = (uniform(self.rng, (1, 12, 2, 8)) for _ in range(3))
        x, y = uniform(self.rng, (2, 7, 16)), uniform(self.rng, (3, 5, 8))
        mask = self.rng.integers(0, 2, size=(2, 7)).astype(bool)
        with kernelserve.Client(self.server.target) as client:
            make_pieces = client._plain.pieces
            taken = []  # what kernelserve.plain made of each call: its pieces, or None
            client._plain.pieces = lambda *args: taken.append(make_pieces(*args)) or taken[-1]
            for _ in range(2):
                for causal in (True, False, True):
                    r = client.flash_attention(q, k, v, causal=causal, request_id=f"c{causal}")
                    self.assertEqual(r.request_id, f"c{causal}")
                    out, _ = references.attention(q, k, v, causal=causal)
                    np.testing.assert_allclose(r.out, out, rtol=1e-4, atol=1e-5)
                for args, kwargs, want in (
                        ((x,), {}, references.mean_pooling(x)),
                        ((x,), dict(mask=mask), references.mean_pooling(x, mask=mask)),
                        ((y,), dict(chunk_size=8), references.mean_pooling(y)),
                        ((x + 1,), {}, references.mean_pooling(x + 1)),
                        ((y.astype(np.float16),), {}, references.mean_pooling(
                            y.astype(np.float16)))):
                    r = client.mean_pooling(*args, **kwargs)
                    self.assertEqual(r.out.dtype, args[0].dtype)
                    np.testing.assert_allclose(r.out, want, rtol=1e-3, atol=1e-3)
                    self.assertEqual(r.request_id, "")
        # Every one of them took the plain path; without the native transport, none.
        self.assertEqual(len(taken), 16 if client._native is not None else 0)
        self.assertNotIn(None, taken)

    def test_explicit_config_is_an_override(self):
        x = uniform(self.rng, (2, 64, 8))
        r = self.client.mean_pooling(x, config={"block_size": 16, "threads": 1})
        self.assertEqual(r.source, "override")
        self.assertEqual(r.config["block_size"], 16)
        self.assertEqual(r.config["threads"], 1)  # a named field, flattened into the dict
        self.assertNotIn("backend", r.config)
        np.testing.assert_allclose(r.out, references.mean_pooling(x), rtol=1e-5, atol=1e-6)

    def test_bad_inputs_are_invalid_argument(self):
        bad = grpc.StatusCode.INVALID_ARGUMENT
        x = uniform(self.rng, (2, 3, 4))
        err = self.assertCode(bad, self.client.execute, "mean_pooling", {"x": x, "y": x})
        self.assertIn("'y'", err.message)
        mask = np.ones((2, 3), dtype=bool)
        err = self.assertCode(bad, self.client.execute, "mean_pooling", {"mask": mask})
        self.assertIn("'x'", err.message)
        self.assertCode(bad, self.client.execute, "no_such_kernel", {"x": x})
        self.assertCode(bad, self.client.mean_pooling, uniform(self.rng, (2, 3)))
        q = uniform(self.rng, (1, 4, 3, 8))
        kv = uniform(self.rng, (1, 4, 2, 8))
        self.assertCode(bad, self.client.flash_attention, q, kv, kv)  # Hq % Hkv != 0
        cu = np.array([0, 9], dtype=np.int32)  # ends after T = 6
        self.assertCode(bad, self.client.mean_pooling, uniform(self.rng, (6, 4)), cu_seqlens=cu)

    def test_client_side_errors(self):
        with self.assertRaisesRegex(TypeError, "input 'x': dtype float64 is not sent"):
            self.client.mean_pooling(np.zeros((2, 3, 4), dtype=np.float64))
        with self.assertRaisesRegex(TypeError, "did you mean 'causal'"):
            self.client.flash_attention(*(uniform(self.rng, (1, 2, 1, 4)),) * 3, causl=True)
        with self.assertRaisesRegex(TypeError, "missing input"):
            self.client.flash_attention(uniform(self.rng, (1, 2, 1, 4)))
        with self.assertRaisesRegex(AttributeError, "no kernel 'softmax'"):
            self.client.softmax(np.zeros(3, np.float32))
        self.assertFalse(hasattr(self.client, "softmax"))

    def test_misspelt_param_names_it_and_every_param_the_kernel_has(self):
        q = uniform(self.rng, (1, 4, 2, 8))
        with self.assertRaises(kernelserve.ArgumentError) as raised:
            self.client.flash_attention(q, q, q, casual=True)
        error = raised.exception
        # A KernelserveError (INVALID_ARGUMENT, as the server would say) and a TypeError.
        self.assertIsInstance(error, kernelserve.KernelserveError)
        self.assertIsInstance(error, TypeError)
        self.assertEqual(error.code, grpc.StatusCode.INVALID_ARGUMENT)
        self.assertIn("unexpected keyword argument 'casual'", error.message)
        self.assertIn("did you mean 'causal'?", error.message)
        for param in self.client.schema("flash_attention").params:  # the names from the schema
            self.assertIn(param.name, error.message)
        for name in ("q", "k", "v"):
            self.assertIn(name, error.message)

    def test_misspelt_param_of_execute_is_the_servers_invalid_argument(self):
        q = uniform(self.rng, (1, 4, 2, 8))
        err = self.assertCode(grpc.StatusCode.INVALID_ARGUMENT, self.client.execute,
                              "flash_attention", {"q": q, "k": q, "v": q}, {"casual": True})
        self.assertIn("casual", err.message)

    def test_misspelt_config_field_names_it_and_the_fields(self):
        x = uniform(self.rng, (2, 8, 4))
        with self.assertRaises(kernelserve.ArgumentError) as raised:
            self.client.mean_pooling(x, config={"blok_size": 16})
        self.assertIn("'blok_size'", raised.exception.message)
        self.assertIn("did you mean 'block_size'?", raised.exception.message)
        self.assertIn("num_warps", raised.exception.message)
        with self.assertRaises(kernelserve.ArgumentError):
            self.client.mean_pooling(x, config={"block_size": "sixteen"})

    def test_config_named_fields_are_checked_by_the_server(self):
        x = uniform(self.rng, (2, 8, 4))
        # A field the cpu platform does not have: the server names it and the platform's fields.
        with self.assertRaises(kernelserve.KernelserveError) as raised:
            self.client.mean_pooling(x, config={"lanes": 4})
        self.assertIn("config 'lanes'=4: not a field of mean_pooling on cpu (its fields: "
                      "block_size, threads)", raised.exception.message)
        # num_warps meant the CPU's threads before config schema 2: refused, naming 'threads'.
        with self.assertRaises(kernelserve.KernelserveError) as raised:
            self.client.mean_pooling(x, config={"num_warps": 2})
        self.assertIn("is 'threads' (0..1024)", raised.exception.message)

    def test_kernels_list_each_platforms_config_fields(self):
        [pooling] = [k for k in self.client.kernels() if k.name == "mean_pooling"]
        self.assertEqual([f.name for f in pooling.configs["cpu"]], ["block_size", "threads"])
        threads = pooling.configs["cpu"][1]
        self.assertEqual((threads.kind, threads.min, threads.max, threads.named),
                         ("int", 0, 1024, True))
        self.assertIsInstance(threads, kernelserve.ConfigFieldSchema)
        self.assertEqual(sorted(pooling.configs), sorted(pooling.platforms))

    def test_errors_carry_the_status_code(self):
        err = self.assertCode(grpc.StatusCode.INVALID_ARGUMENT, self.client.mean_pooling,
                              uniform(self.rng, (2, 3)))
        self.assertIsInstance(err, kernelserve.KernelserveError)
        self.assertTrue(str(err).startswith("INVALID_ARGUMENT: "), str(err))
        self.assertIs(kernelserve.KernelServeError, kernelserve.KernelserveError)  # old name
        with kernelserve.Client(f"127.0.0.1:{free_port()}", timeout=2.0) as nobody:
            self.assertCode(grpc.StatusCode.UNAVAILABLE, nobody.info)

    def test_an_fp8_input_is_refused_naming_the_input_and_its_dtypes(self):
        # fp8 travels the wire, but mean_pooling computes in f32, f16 and bf16 alone.
        for dtype, name in ((kernelserve.float8_e4m3fn, "f8_e4m3"),
                            (kernelserve.float8_e5m2, "f8_e5m2")):
            x = uniform(self.rng, (2, 4, 8)).astype(dtype)
            err = self.assertCode(grpc.StatusCode.INVALID_ARGUMENT, self.client.mean_pooling, x)
            self.assertEqual(err.message, f"input 'x': dtype {name}: expected f32|f16|bf16")

    def test_execute_batch_keeps_per_item_errors(self):
        xs = [uniform(self.rng, (2, 6, 4)), uniform(self.rng, (2, 6)),  # bad rank
              uniform(self.rng, (2, 6, 4))]
        items = self.client.execute_batch("mean_pooling", [{"x": x} for x in xs],
                                          {"chunk_size": 2})
        self.assertEqual(len(items), 3)
        self.assertIsInstance(items[1], kernelserve.KernelserveError)
        self.assertEqual(items[1].code, grpc.StatusCode.INVALID_ARGUMENT)
        for i in (0, 2):
            self.assertIsInstance(items[i], kernelserve.Result)
            np.testing.assert_allclose(items[i].out, references.mean_pooling(xs[i]), rtol=1e-5,
                                       atol=1e-6)
        self.assertCode(grpc.StatusCode.INVALID_ARGUMENT, self.client.execute_batch,
                        "no_such_kernel", [{"x": xs[0]}])

    def test_execute_stream_answers_in_request_order(self):
        x0, x1 = uniform(self.rng, (2, 5, 8)), uniform(self.rng, (3, 7, 4))
        q = uniform(self.rng, (1, 6, 2, 8))
        requests = [
            kernelserve.Request("mean_pooling", {"x": x0}, request_id="same"),
            kernelserve.Request("flash_attention", {"q": q, "k": q, "v": q}, {"causal": True},
                                request_id="same"),
            kernelserve.Request("mean_pooling", {"x": uniform(self.rng, (4,))}),  # bad rank
            kernelserve.Request("mean_pooling", {"x": x1}, config={"block_size": 4},
                                request_id="last"),
        ]
        answers = self.client.execute_stream(iter(requests))
        self.assertEqual(len(answers), 4)
        np.testing.assert_allclose(answers[0].out, references.mean_pooling(x0), rtol=1e-5,
                                   atol=1e-6)
        np.testing.assert_allclose(answers[1].out, references.attention(q, q, q, causal=True)[0],
                                   rtol=1e-4, atol=1e-5)
        self.assertIsInstance(answers[2], kernelserve.KernelserveError)
        self.assertEqual(answers[2].code, grpc.StatusCode.INVALID_ARGUMENT)
        np.testing.assert_allclose(answers[3].out, references.mean_pooling(x1), rtol=1e-5,
                                   atol=1e-6)
        self.assertEqual(answers[3].source, "override")
        self.assertEqual([a.request_id for a in (answers[0], answers[1], answers[3])],
                         ["same", "same", "last"])
        self.assertEqual(self.client.execute_stream([]), [])



class TuneAndCacheTest(unittest.TestCase):
    """autotune, list_configs, put_config and delete_config against one server."""

    @classmethod
    def setUpClass(cls):
        cls.server = ServerProcess()
        cls.client = kernelserve.Client(cls.server.target)

    @classmethod
    def tearDownClass(cls):
        cls.client.close()
        cls.server.stop()

    def entries(self, kernel, key):
        return [e for e in self.client.list_configs(kernel) if e.cache_key == key]

    def test_autotune_shapes_only_then_execute_uses_the_winner(self):
        spec = kernelserve.TensorSpec((2, 64, 16), np.float32)
        tuned = self.client.autotune("mean_pooling", {"x": spec}, {"chunk_size": 16})
        self.assertEqual(tuned.source, "autotune")
        self.assertTrue(tuned.cache_key.startswith("mean_pooling@v1:"), tuned.cache_key)
        self.assertEqual(tuned.platform, "cpu")
        self.assertGreater(len(tuned.candidates), 1)
        timed = [c for c in tuned.candidates if c.error is None]
        self.assertTrue(timed)
        self.assertTrue(all(c.median_us > 0 for c in timed), timed)
        self.assertIn(tuned.best, [c.config for c in timed])
        self.assertAlmostEqual(tuned.best_us, min(c.median_us for c in timed), delta=1e-6)

        x = np.random.default_rng(5).uniform(-1, 1, (2, 64, 16)).astype(np.float32)
        r = self.client.mean_pooling(x, chunk_size=16)
        self.assertEqual(r.source, "memory")
        self.assertEqual(r.config, tuned.best)
        self.assertEqual(r.cache_key, tuned.cache_key)
        np.testing.assert_allclose(r.out, references.mean_pooling(x), rtol=1e-5, atol=1e-6)
        [entry] = self.entries("mean_pooling", tuned.cache_key)
        self.assertEqual((entry.tier, entry.kernel, entry.config),
                         ("memory", "mean_pooling@v1", tuned.best))

    def test_autotune_with_data_and_params(self):
        rng = np.random.default_rng(6)
        q, k, v = (rng.uniform(-1, 1, (1, 24, 2, 16)).astype(np.float32) for _ in range(3))
        tuned = self.client.autotune("flash_attention", {"q": q, "k": k, "v": v},
                                     {"causal": True})
        self.assertEqual(tuned.source, "autotune")
        self.assertTrue(tuned.cache_key.startswith("flash_attention@v1:"), tuned.cache_key)
        r = self.client.flash_attention(q, k, v, causal=True)
        self.assertEqual((r.source, r.config), ("memory", tuned.best))
        np.testing.assert_allclose(r.out, references.attention(q, k, v, causal=True)[0],
                                   rtol=1e-4, atol=1e-5)

    def test_autotune_progress_callback(self):
        spec = kernelserve.TensorSpec((4, 512, 128), np.float32)
        told = []
        tuned = self.client.autotune("mean_pooling", {"x": spec}, progress=told.append)
        self.assertEqual(tuned.source, "autotune")
        self.assertFalse(tuned.budget_reached)
        self.assertEqual(tuned.candidates_timed, tuned.candidates_total)
        self.assertEqual(tuned.candidates_total, len(tuned.candidates))
        self.assertTrue(told)
        self.assertTrue(all(isinstance(p, kernelserve.TuneProgress) for p in told), told)
        self.assertEqual(told[0].candidates_done, 0)  # once the reference run is done
        self.assertIsNone(told[0].best_us)
        done = [p.candidates_done for p in told]
        self.assertEqual(done, sorted(done))  # never decreases
        self.assertTrue(all(p.candidates_total == tuned.candidates_total for p in told), told)
        self.assertTrue(all(p.best_us > 0 for p in told if p.candidates_done > 0), told)

    def test_autotune_progress_callback_that_raises_cancels_the_tuning(self):
        spec = {"x": kernelserve.TensorSpec((4, 512, 128), np.float32)}

        def stop(progress):
            raise KeyboardInterrupt

        with self.assertRaises(KeyboardInterrupt):
            self.client.autotune("mean_pooling", spec, progress=stop)
        self.assertEqual(self.client.health(), "SERVING")
        self.assertEqual(self.client.autotune("mean_pooling", spec).source, "autotune")

    def test_autotune_time_budget(self):
        spec = {"x": kernelserve.TensorSpec((8, 2048, 256), np.float32)}
        full = self.client.autotune("mean_pooling", spec, time_budget=0)
        self.assertFalse(full.budget_reached)
        self.assertEqual(full.time_budget, 30.0)  # the server's --autotune-budget
        self.assertGreaterEqual(full.candidates_total, 3)
        # One and a half candidates' time: the first starts, the third does not.
        budget = 1.5 * full.elapsed_seconds / full.candidates_total
        told = []
        cut = self.client.autotune("mean_pooling", spec, time_budget=budget,
                                   progress=told.append)
        self.assertTrue(cut.budget_reached)
        self.assertLess(cut.candidates_timed, cut.candidates_total)
        self.assertGreaterEqual(cut.candidates_timed, 1)
        self.assertEqual(cut.source, "autotune")
        skipped = [c for c in cut.candidates if c.error is not None
                   and c.error.code == grpc.StatusCode.DEADLINE_EXCEEDED]
        self.assertEqual(len(skipped), cut.candidates_total - cut.candidates_timed)
        self.assertLessEqual(max(p.candidates_done for p in told), cut.candidates_timed)
        self.assertTrue(any("not written to the config store" in w for w in cut.warnings),
                        cut.warnings)
        with self.assertRaises(kernelserve.KernelserveError) as ctx:
            self.client.autotune("mean_pooling", spec, time_budget=-1)
        self.assertEqual(ctx.exception.code, grpc.StatusCode.INVALID_ARGUMENT)
        self.assertIn("time_budget_ms", ctx.exception.message)
        with self.assertRaises(kernelserve.KernelserveError) as ctx:
            self.client.autotune("mean_pooling", {"x": kernelserve.TensorSpec(
                (16, 4096, 256), np.float32)}, time_budget=1e-3, progress=told.append)
        self.assertEqual(ctx.exception.code, grpc.StatusCode.DEADLINE_EXCEEDED)
        self.assertIn("time budget", ctx.exception.message)
        self.assertNotIn("timeout=", ctx.exception.message)  # not the call's deadline

    def test_put_list_delete_config(self):
        spec = {"x": kernelserve.TensorSpec((3, 40, 8), np.float32)}
        pinned = {"block_size": 8, "threads": 1}
        key, fingerprint = self.client.put_config("mean_pooling", spec, pinned)
        self.assertTrue(key.startswith("mean_pooling@v1:"), key)
        self.assertTrue(fingerprint)
        [entry] = self.entries("mean_pooling", key)
        self.assertEqual(entry.tier, "memory")
        self.assertEqual((entry.config["block_size"], entry.config["threads"]), (8, 1))
        self.assertEqual(self.entries("flash_attention", key), [])  # filtered by kernel

        x = np.random.default_rng(7).uniform(-1, 1, (3, 40, 8)).astype(np.float32)
        r = self.client.mean_pooling(x)
        self.assertEqual((r.source, r.cache_key, r.config["block_size"]), ("memory", key, 8))

        self.client.delete_config(key, fingerprint)
        self.assertEqual(self.entries("mean_pooling", key), [])
        self.assertEqual(self.client.mean_pooling(x).source, "heuristic")
        self.client.delete_config(key)  # the heuristic answer was cached; the default device
        with self.assertRaises(kernelserve.KernelserveError) as ctx:
            self.client.delete_config(key)
        self.assertEqual(ctx.exception.code, grpc.StatusCode.NOT_FOUND)

    def test_put_config_that_cannot_run_is_invalid_argument(self):
        spec = {"x": kernelserve.TensorSpec((2, 8, 4), np.float32)}
        with self.assertRaises(kernelserve.KernelserveError) as ctx:
            self.client.put_config("mean_pooling", spec, {"block_size": 8, "platform": "cuda"})
        self.assertEqual(ctx.exception.code, grpc.StatusCode.INVALID_ARGUMENT)
        with self.assertRaises(kernelserve.KernelserveError) as ctx:
            self.client.put_config("no_such_kernel", spec, {"block_size": 8})
        self.assertEqual(ctx.exception.code, grpc.StatusCode.INVALID_ARGUMENT)


class AuthTest(unittest.TestCase):
    TOKEN = "client-test-token"

    @classmethod
    def setUpClass(cls):
        cls.token_file = tempfile.NamedTemporaryFile("w", suffix=".token", delete=False)
        cls.token_file.write(cls.TOKEN + "\n")
        cls.token_file.close()
        cls.server = ServerProcess(f"--auth-token-file={cls.token_file.name}")

    @classmethod
    def tearDownClass(cls):
        cls.server.stop()
        os.unlink(cls.token_file.name)

    def test_token(self):
        x = np.random.default_rng(3).uniform(-1, 1, (2, 4, 8)).astype(np.float32)
        for token in (None, "wrong-token"):
            with kernelserve.Client(self.server.target, token=token) as client:
                self.assertEqual(client.health(), "SERVING")  # health needs no token
                with self.assertRaises(kernelserve.KernelserveError) as ctx:
                    client.execute("mean_pooling", {"x": x})
                self.assertEqual(ctx.exception.code, grpc.StatusCode.UNAUTHENTICATED)
                # The stream's own error, not an item's.
                with self.assertRaises(kernelserve.KernelserveError) as ctx:
                    client.execute_stream([kernelserve.Request("mean_pooling", {"x": x})])
                self.assertEqual(ctx.exception.code, grpc.StatusCode.UNAUTHENTICATED)
        with kernelserve.Client(self.server.target, token=self.TOKEN) as client:
            r = client.mean_pooling(x)
            np.testing.assert_allclose(r.out, references.mean_pooling(x), rtol=1e-5, atol=1e-6)
            [s] = client.execute_stream([kernelserve.Request("mean_pooling", {"x": x})])
            np.testing.assert_allclose(s.out, r.out)


class LargeCallTest(unittest.TestCase):
    """Calls whose inputs go beside the message (kernelserve.wire), through the native transport
    (kernelserve._native) and through grpcio."""

    @classmethod
    def setUpClass(cls):
        cls.server = ServerProcess()
        cls.clients = {"native": kernelserve.Client(cls.server.target, native=True,
                                                    local_shm=False),
                       "grpcio": kernelserve.Client(cls.server.target, native=False,
                                                    local_shm=False)}

    @classmethod
    def tearDownClass(cls):
        for client in cls.clients.values():
            client.close()
        cls.server.stop()

    def setUp(self):
        self.rng = np.random.default_rng(int.from_bytes(self.id().encode()[-4:], "little"))

    def test_large_calls_match_the_references(self):
        for name, client in self.clients.items():
            with self.subTest(transport=name):
                x = uniform(self.rng, (4, 300, 96))
                r = client.mean_pooling(x, chunk_size=8)
                np.testing.assert_allclose(r.out, references.mean_pooling(x), rtol=1e-5,
                                           atol=1e-6)
                q, k, v = (uniform(self.rng, (1, 160, 2, 64)) for _ in range(3))
                a = client.flash_attention(q, k, v, causal=True, return_lse=True)
                out, lse = references.attention(q, k, v, causal=True)
                np.testing.assert_allclose(a.out, out, rtol=1e-4, atol=1e-5)
                np.testing.assert_allclose(a.lse, lse, rtol=1e-4, atol=1e-5)
                self.assertTrue(a.out.flags.aligned)
                self.assertGreater(a.timings["total_us"], 0)
                qb, kb, vb = (t.astype(kernelserve.bfloat16) for t in (q, k, v))
                b = client.flash_attention(qb, kb, vb)
                self.assertEqual(b.out.dtype, kernelserve.bfloat16)
                want, _ = references.attention(*(t.astype(np.float32) for t in (qb, kb, vb)))
                np.testing.assert_allclose(b.out.astype(np.float32), want, rtol=2e-2, atol=2e-2)

    def test_errors_of_large_calls(self):
        flat = uniform(self.rng, (300, 100))
        for name, client in self.clients.items():
            with self.subTest(transport=name):
                with self.assertRaises(kernelserve.KernelserveError) as raised:
                    client.mean_pooling(flat)
                self.assertEqual(raised.exception.code, grpc.StatusCode.INVALID_ARGUMENT)
                self.assertIn("x", raised.exception.message)
                q = uniform(self.rng, (1, 2048, 4, 64))
                with self.assertRaises(kernelserve.KernelserveError) as raised:
                    client.flash_attention(q, q, q, timeout=0.001)
                self.assertEqual(raised.exception.code, grpc.StatusCode.DEADLINE_EXCEEDED)
                self.assertIn("the deadline was 0.001 s", raised.exception.message)

    def test_huge_timeouts_are_no_deadline(self):
        x = uniform(self.rng, (4, 300, 96))
        for name, client in self.clients.items():
            with self.subTest(transport=name):
                np.testing.assert_allclose(client.mean_pooling(x, timeout=1e15).out,
                                           references.mean_pooling(x), rtol=1e-5, atol=1e-6)

    def test_no_server(self):
        target = f"127.0.0.1:{free_port()}"
        for native in (True, False):
            with kernelserve.Client(target, native=native, timeout=10, local_shm=False) as client:
                with self.assertRaises(kernelserve.KernelserveError) as raised:
                    client.mean_pooling(uniform(self.rng, (4, 300, 96)))
                self.assertEqual(raised.exception.code, grpc.StatusCode.UNAVAILABLE)
                self.assertIn(f"no kernelserve server answers at {target}",
                              raised.exception.message)

    def test_native_calls_release_the_gil(self):
        counted = []
        stop = threading.Event()

        def count():
            n = 0
            while not stop.is_set():
                n += 1
            counted.append(n)

        q = uniform(self.rng, (1, 1024, 4, 64))
        self.clients["native"].flash_attention(q, q, q)  # warm
        thread = threading.Thread(target=count)
        thread.start()
        try:
            self.clients["native"].flash_attention(q, q, q)
        finally:
            stop.set()
            thread.join()
        self.assertGreater(counted[0], 1000)  # the thread ran while the call was in flight

    def test_token_goes_with_native_calls(self):
        token_file = tempfile.NamedTemporaryFile("w", suffix=".token", delete=False)
        token_file.write("large-call-token\n")
        token_file.close()
        server = ServerProcess(f"--auth-token-file={token_file.name}")
        try:
            x = uniform(self.rng, (4, 300, 96))
            with kernelserve.Client(server.target, native=True) as client:
                with self.assertRaises(kernelserve.KernelserveError) as raised:
                    client.mean_pooling(x)
                self.assertEqual(raised.exception.code, grpc.StatusCode.UNAUTHENTICATED)
            with kernelserve.Client(server.target, native=True,
                                    token="large-call-token") as client:
                np.testing.assert_allclose(client.mean_pooling(x).out,
                                           references.mean_pooling(x), rtol=1e-5, atol=1e-6)
        finally:
            server.stop()
            os.unlink(token_file.name)


class LocalSharedMemoryTest(unittest.TestCase):
    """A client on the server's host moves large calls through regions of its own
    (kernelserve.autoshm): the same answers, outputs as arrays of their own, regions reused and
    given back, and gRPC whenever the server cannot take them."""

    @classmethod
    def setUpClass(cls):
        cls.server = ServerProcess()

    @classmethod
    def tearDownClass(cls):
        cls.server.stop()

    def setUp(self):
        self.rng = np.random.default_rng(int.from_bytes(self.id().encode()[-4:], "little"))
        self.client = kernelserve.Client(self.server.target)
        self.addCleanup(self.client.close)

    def auto_regions(self, client=None):
        return [r for r in (client or self.client).shm_status()
                if r.name.startswith("kernelserve-auto-")]

    def test_large_calls_go_through_a_region_and_outputs_are_copied_out(self):
        q, k, v = (uniform(self.rng, (1, 1100, 2, 64)) for _ in range(3))  # 563 KB each
        want, want_lse = references.attention(q, k, v, causal=True)
        for attempt in range(3):  # the first learns the outputs' shapes; later ones place them
            a = self.client.flash_attention(q, k, v, causal=True, return_lse=True)
            np.testing.assert_allclose(a.out, want, rtol=1e-4, atol=1e-5)
            np.testing.assert_allclose(a.lse, want_lse, rtol=1e-4, atol=1e-5)
            [region] = self.auto_regions()
            self.assertEqual(region.in_use, 0)
            [mine] = [r for r in self.client._regions if r.name == region.name]
            for out in (a.out, a.lse):
                self.assertIsNone(mine.offset_of(out))  # an array of its own
                self.assertEqual(out.flags.writeable, attempt > 0)  # copied out, or the answer's
            if attempt > 0:  # the server wrote out into the region: inputs, then lse, out
                offset = 3 * q.nbytes + (a.lse.nbytes + 63) // 64 * 64
                placed = mine.ndarray(want.shape, np.float32, offset)
                np.testing.assert_array_equal(placed, a.out)
        x = uniform(self.rng, (3, 400, 300))  # another size: the region grows, still one
        np.testing.assert_allclose(self.client.mean_pooling(x).out, references.mean_pooling(x),
                                   rtol=1e-5, atol=1e-6)
        self.assertEqual(len(self.auto_regions()), 1)
        self.client.close()
        self.assertEqual(self.auto_regions(kernelserve.Client(self.server.target)), [])

    def test_small_calls_remote_targets_and_opting_out_send_bytes(self):
        self.client.mean_pooling(uniform(self.rng, (2, 8, 16)))
        self.assertEqual(self.auto_regions(), [])
        x = uniform(self.rng, (2, 600, 300))
        with kernelserve.Client(self.server.target, local_shm=False) as off:
            np.testing.assert_allclose(off.mean_pooling(x).out, references.mean_pooling(x),
                                       rtol=1e-5, atol=1e-6)
            self.assertEqual(self.auto_regions(off), [])
        with mock.patch.dict(os.environ, {"KERNELSERVE_LOCAL_SHM": "0"}):
            with kernelserve.Client(self.server.target) as off:
                off.mean_pooling(x)
                self.assertEqual(self.auto_regions(off), [])
        self.assertTrue(kernelserve.autoshm.is_local("unix:/tmp/ks.sock"))
        self.assertTrue(kernelserve.autoshm.is_local("localhost:50051"))
        self.assertTrue(kernelserve.autoshm.is_local("[::1]:50051"))
        self.assertFalse(kernelserve.autoshm.is_local("10.0.0.7:50051"))
        self.assertFalse(kernelserve.autoshm.is_local("gpu-host:50051"))

    def test_a_server_without_shared_memory_gets_bytes(self):
        server = ServerProcess("--shared-memory=off")
        try:
            x = uniform(self.rng, (2, 600, 300))
            with kernelserve.Client(server.target) as client:
                for _ in range(2):
                    np.testing.assert_allclose(client.mean_pooling(x).out,
                                               references.mean_pooling(x), rtol=1e-5, atol=1e-6)
                self.assertTrue(client._auto.off)  # asked once, then never again
        finally:
            server.stop()

    def test_inputs_in_the_callers_own_region_go_as_they_are(self):
        x = uniform(self.rng, (2, 600, 300))
        with self.client.register_system_shm("mine", 4 << 20) as region:
            view = region.put(x)
            np.testing.assert_allclose(self.client.mean_pooling(view).out,
                                       references.mean_pooling(x), rtol=1e-5, atol=1e-6)
            self.assertEqual(self.auto_regions(), [])  # no copy into a region of the client's
        with self.assertRaises(kernelserve.KernelserveError) as raised:  # a param that is a list
            self.client.mean_pooling(x, chunk_size=[4])
        self.assertEqual(raised.exception.code, grpc.StatusCode.INVALID_ARGUMENT)

    def test_a_failed_call_does_not_reuse_its_region(self):
        x = uniform(self.rng, (2, 600, 300))
        self.client.mean_pooling(x)
        [before] = self.auto_regions()
        with self.assertRaises(kernelserve.KernelserveError) as raised:
            self.client.mean_pooling(x, chunk_size=-3)
        self.assertEqual(raised.exception.code, grpc.StatusCode.INVALID_ARGUMENT)
        self.assertNotIn(before.name, [r.name for r in self.auto_regions()])
        np.testing.assert_allclose(self.client.mean_pooling(x).out, references.mean_pooling(x),
                                   rtol=1e-5, atol=1e-6)

    def test_concurrent_calls_lease_regions_of_their_own(self):
        xs = [uniform(self.rng, (2, 500 + 10 * i, 300)) for i in range(6)]
        with concurrent.futures.ThreadPoolExecutor(6) as pool:
            for _ in range(3):
                outs = list(pool.map(lambda x: self.client.mean_pooling(x).out, xs))
                for x, out in zip(xs, outs):
                    np.testing.assert_allclose(out, references.mean_pooling(x), rtol=1e-5,
                                               atol=1e-6)
        self.assertLessEqual(len(self.auto_regions()), kernelserve.autoshm.MAX_REGIONS)


class AsyncServerTest(unittest.IsolatedAsyncioTestCase):
    """A server for the class and an asyncio client for each test (self.client, self.rng)."""

    SEED = 11

    @classmethod
    def setUpClass(cls):
        cls.server = ServerProcess()

    @classmethod
    def tearDownClass(cls):
        cls.server.stop()

    async def asyncSetUp(self):
        # The test loop runs in debug mode, which logs any step over 0.1 s; a channel's first
        # call can take that long on a busy machine.
        asyncio.get_running_loop().slow_callback_duration = 1.0
        self.client = kernelserve.aio.Client(self.server.target)  # in the test's event loop
        self.rng = np.random.default_rng(self.SEED)

    async def asyncTearDown(self):
        await self.client.close()


class AsyncClientTest(AsyncServerTest):
    """kernelserve.aio.Client: the same calls as coroutines, on grpc.aio."""

    async def test_health_info_and_kernel_methods(self):
        self.assertEqual(await self.client.health(), "SERVING")
        info = await self.client.info()
        self.assertIsInstance(info, kernelserve.ServerInfo)
        x = uniform(self.rng, (2, 9, 8))
        r = await self.client.mean_pooling(x, chunk_size=4)
        self.assertIsInstance(r, kernelserve.Result)
        np.testing.assert_allclose(r.out, references.mean_pooling(x), rtol=1e-5, atol=1e-6)
        q = uniform(self.rng, (1, 5, 2, 8))
        a = await self.client.flash_attention(q, q, q, causal=True, return_lse=True)
        out, lse = references.attention(q, q, q, causal=True)
        np.testing.assert_allclose(a.out, out, rtol=1e-4, atol=1e-5)
        np.testing.assert_allclose(a.lse, lse, rtol=1e-4, atol=1e-5)
        r = await self.client.execute("mean_pooling", {"x": x}, {"chunk_size": 4})
        np.testing.assert_allclose(r.out, references.mean_pooling(x), rtol=1e-5, atol=1e-6)

    async def test_tiny_calls_in_a_row_with_other_params_shapes_and_dtypes(self):
        # Tiny calls take kernelserve.plain's cached request pieces on the grpc.aio channel,
        # with the native transport or without: no call may carry another's params, shapes,
        # dtypes, request id or bytes.
        q = uniform(self.rng, (1, 12, 2, 8))
        x, y = uniform(self.rng, (2, 7, 16)), uniform(self.rng, (3, 5, 8))
        mask = self.rng.integers(0, 2, size=(2, 7)).astype(bool)
        for native in (None, False):
            async with kernelserve.aio.Client(self.server.target, native=native) as client:
                make_pieces = client._plain.pieces
                taken = []  # what kernelserve.plain made of each call: its pieces, or None
                client._plain.pieces = lambda *args: taken.append(make_pieces(*args)) or taken[-1]
                for causal in (True, False, True):
                    r = await client.flash_attention(q, q + 1, q - 1, causal=causal,
                                                     request_id=f"c{causal}")
                    self.assertEqual(r.request_id, f"c{causal}")
                    out, _ = references.attention(q, q + 1, q - 1, causal=causal)
                    np.testing.assert_allclose(r.out, out, rtol=1e-4, atol=1e-5)
                for args, kwargs, want in (
                        ((x,), {}, references.mean_pooling(x)),
                        ((x,), dict(mask=mask), references.mean_pooling(x, mask=mask)),
                        ((y,), dict(chunk_size=8), references.mean_pooling(y)),
                        ((y.astype(np.float16),), {}, references.mean_pooling(
                            y.astype(np.float16)))):
                    r = await client.mean_pooling(*args, **kwargs)
                    self.assertEqual(r.out.dtype, args[0].dtype)
                    np.testing.assert_allclose(r.out, want, rtol=1e-3, atol=1e-3)
                    self.assertEqual(r.request_id, "")
                    self.assertEqual(r.platform, "cpu")
                with self.assertRaises(kernelserve.KernelserveError) as raised:
                    await client.mean_pooling(uniform(self.rng, (2, 3)))
                self.assertEqual(raised.exception.code, grpc.StatusCode.INVALID_ARGUMENT)
            self.assertEqual(len(taken), 8)
            self.assertNotIn(None, taken)

    async def test_autotune_progress_and_time_budget(self):
        spec = {"x": kernelserve.TensorSpec((4, 512, 128), np.float32)}
        told = []

        async def tell(progress):
            told.append(progress)

        tuned = await self.client.autotune("mean_pooling", spec, progress=tell)
        self.assertEqual(tuned.source, "autotune")
        self.assertEqual(tuned.candidates_timed, tuned.candidates_total)
        self.assertTrue(told)
        done = [p.candidates_done for p in told]
        self.assertEqual(done, sorted(done))
        plain = []
        tuned = await self.client.autotune("mean_pooling", spec, time_budget=60,
                                           progress=plain.append)  # a plain function too
        self.assertTrue(plain)
        self.assertEqual(tuned.time_budget, 30.0)  # at most the server's
        with self.assertRaises(kernelserve.KernelserveError) as raised:
            await self.client.autotune("mean_pooling", spec, time_budget=-0.5)
        self.assertEqual(raised.exception.code, grpc.StatusCode.INVALID_ARGUMENT)

    async def test_concurrent_calls(self):
        xs = [uniform(self.rng, (2, 4 + i, 8)) for i in range(8)]
        results = await asyncio.gather(*(self.client.mean_pooling(x) for x in xs))
        for x, r in zip(xs, results):
            np.testing.assert_allclose(r.out, references.mean_pooling(x), rtol=1e-5, atol=1e-6)

    async def test_errors(self):
        with self.assertRaises(kernelserve.KernelserveError) as raised:
            await self.client.mean_pooling(uniform(self.rng, (2, 3)))
        self.assertEqual(raised.exception.code, grpc.StatusCode.INVALID_ARGUMENT)
        q = uniform(self.rng, (1, 4, 2, 8))
        with self.assertRaisesRegex(kernelserve.ArgumentError, "'casual'.*did you mean 'causal'"):
            await self.client.flash_attention(q, q, q, casual=True)
        with self.assertRaisesRegex(kernelserve.UnknownKernelError, "no kernel 'softmax'"):
            await self.client.softmax(q)
        with self.assertRaises(kernelserve.KernelserveError) as raised:
            await self.client.health("no.such.Service")
        self.assertEqual(raised.exception.code, grpc.StatusCode.NOT_FOUND)

    async def test_batch_and_stream(self):
        xs = [uniform(self.rng, (2, 6, 4)), uniform(self.rng, (2, 6)), uniform(self.rng, (2, 6, 4))]
        items = await self.client.execute_batch("mean_pooling", [{"x": x} for x in xs])
        self.assertEqual(items[1].code, grpc.StatusCode.INVALID_ARGUMENT)
        for i in (0, 2):
            np.testing.assert_allclose(items[i].out, references.mean_pooling(xs[i]), rtol=1e-5,
                                       atol=1e-6)
        answers = await self.client.execute_stream(
            [kernelserve.Request("mean_pooling", {"x": x}, request_id=str(i))
             for i, x in enumerate(xs)])
        self.assertIsInstance(answers[1], kernelserve.KernelserveError)
        for i in (0, 2):
            self.assertEqual(answers[i].request_id, str(i))
            np.testing.assert_allclose(answers[i].out, references.mean_pooling(xs[i]),
                                       rtol=1e-5, atol=1e-6)




class AsyncNativeStartTest(AsyncServerTest):
    """kernelserve.aio.Client's tiny calls on the native transport: started at once, the loop
    woken by the call's end (transport.NativeTransport.execute_lazily_async)."""

    SEED = 13

    async def asyncSetUp(self):
        await super().asyncSetUp()
        if self.client._native is None:
            self.skipTest("the client does not use kernelserve._native (KERNELSERVE_NATIVE=0, "
                          f"or not built: {kernelserve.transport.import_error()})")

        async def not_grpcio(*args, **kwargs):
            raise AssertionError("a tiny call went through grpc.aio")

        self.client._grpcio.execute_lazily_async = not_grpcio

    async def test_concurrent_calls_get_their_own_answers(self):
        xs = [uniform(self.rng, (1 + i % 3, 5 + i, 8)) for i in range(40)]
        got = await asyncio.gather(*(self.client.mean_pooling(x, request_id=str(i))
                                     for i, x in enumerate(xs)))
        for i, (x, r) in enumerate(zip(xs, got)):
            self.assertEqual(r.request_id, str(i))
            np.testing.assert_allclose(r.out, references.mean_pooling(x), rtol=1e-5, atol=1e-6)
        self.assertFalse(self.client._native._pending)

    async def test_errors_deadline_and_closed(self):
        with self.assertRaises(kernelserve.KernelserveError) as raised:
            await self.client.mean_pooling(uniform(self.rng, (2, 3)))
        self.assertEqual(raised.exception.code, grpc.StatusCode.INVALID_ARGUMENT)
        q = uniform(self.rng, (1, 2048, 4, 64))  # sent by name: a plain call that takes long
        rq = await self.client.create_tensor(q, name="slow_q")  # held by the cut call a while
        with self.assertRaisesRegex(kernelserve.KernelserveError, "deadline") as raised:
            await self.client.flash_attention(rq, rq, rq, timeout=0.001)
        self.assertEqual(raised.exception.code, grpc.StatusCode.DEADLINE_EXCEEDED)
        x = uniform(self.rng, (2, 7, 8))
        r = await self.client.mean_pooling(x)  # the client goes on
        np.testing.assert_allclose(r.out, references.mean_pooling(x), rtol=1e-5, atol=1e-6)
        await self.client.close()
        with self.assertRaisesRegex(kernelserve.KernelserveError, "closed") as raised:
            await self.client.mean_pooling(x)
        self.assertEqual(raised.exception.code, grpc.StatusCode.UNAVAILABLE)

    async def test_cancelled_task_cancels_its_call(self):
        x = uniform(self.rng, (2, 7, 8))
        await self.client.schema("mean_pooling")  # the kernels fetched: calls start at once
        channel = self.client._native._channel
        started, cancelled = [], []

        class Watched:  # the extension's channel, its starts and cancels counted
            def start(self, *args):
                started.append(channel.start(*args))
                return started[-1]

            def cancel(self, call):
                cancelled.append(call)
                channel.cancel(call)

            def __getattr__(self, name):
                return getattr(channel, name)

        self.client._native._channel = Watched()
        for i in range(20):
            task = asyncio.ensure_future(self.client.mean_pooling(x))
            await asyncio.sleep(0)  # started
            self.assertEqual(len(started), i + 1)
            task.cancel()
            with self.assertRaises(asyncio.CancelledError):
                await task
        self.assertEqual(cancelled, started)
        r = await self.client.mean_pooling(x)
        np.testing.assert_allclose(r.out, references.mean_pooling(x), rtol=1e-5, atol=1e-6)
        for _ in range(200):  # the cancelled calls' ends are collected and dropped
            if not self.client._native._pending:
                break
            await asyncio.sleep(0.01)
        self.assertFalse(self.client._native._pending)

    async def test_close_with_calls_in_flight(self):
        xs = [uniform(self.rng, (2, 9, 8)) for _ in range(16)]
        await self.client.schema("mean_pooling")  # the kernels fetched (through grpc.aio)
        tasks = [asyncio.ensure_future(self.client.mean_pooling(x)) for x in xs]
        await asyncio.sleep(0)
        await asyncio.wait_for(self.client.close(), 30)  # never waits on a call for long
        for x, task in zip(xs, tasks):
            try:
                r = await task
            except kernelserve.KernelserveError as error:
                self.assertEqual(error.code, grpc.StatusCode.CANCELLED)
            else:
                np.testing.assert_allclose(r.out, references.mean_pooling(x), rtol=1e-5,
                                           atol=1e-6)

    async def test_large_answer_and_a_loop_without_readers(self):
        # A resident q sends nothing inline, so the call is plain while its answer (2 MiB)
        # comes as kernelserve._native.Answer, copied out in the loop's executor.
        q = uniform(self.rng, (1, 256, 16, 128))
        async with await self.client.create_tensor(q, name="q13") as rq:
            r = await self.client.flash_attention(rq, rq, rq, causal=True)
            out, _ = references.attention(q, q, q, causal=True)
            np.testing.assert_allclose(r.out, out, rtol=1e-4, atol=1e-5)
        loop = asyncio.get_running_loop()
        other = kernelserve.aio.Client(self.server.target)
        refuse = mock.patch.object(loop, "add_reader", side_effect=NotImplementedError)
        try:
            other._grpcio.execute_lazily_async = self.client._grpcio.execute_lazily_async
            with refuse:  # as Windows' proactor loop: through the loop's executor instead
                x = uniform(self.rng, (2, 7, 8))
                r = await other.mean_pooling(x)
            np.testing.assert_allclose(r.out, references.mean_pooling(x), rtol=1e-5, atol=1e-6)
        finally:
            await other.close()


class NativeStartLifetimeTest(unittest.TestCase):
    """A loop that ends with native calls started and never collected, and a client dropped
    without close(): the extension cancels and frees those calls, with no crash or hang."""

    @classmethod
    def setUpClass(cls):
        cls.server = ServerProcess()

    @classmethod
    def tearDownClass(cls):
        cls.server.stop()

    def test_loop_ends_with_calls_in_flight(self):
        if not kernelserve.transport.native_available():
            self.skipTest("kernelserve._native is not built")
        rng = np.random.default_rng(14)
        xs = [uniform(rng, (2, 9, 8)) for _ in range(12)]

        async def start_calls():  # native=True: in the grpcio-only run too
            client = kernelserve.aio.Client(self.server.target, native=True)
            await client.schema("mean_pooling")
            tasks = [asyncio.ensure_future(client.mean_pooling(x)) for x in xs]
            await asyncio.sleep(0)  # the tasks ran first: each call started, none collected yet
            self.assertEqual(len(client._native._pending), len(xs))
            return client, tasks

        loop = asyncio.new_event_loop()
        client, tasks = loop.run_until_complete(start_calls())
        loop.close()  # never runs again: calls in flight or finished stay uncollected
        transport = weakref.ref(client._native)
        del client, tasks
        gc.collect()  # the channel cancels, waits for and frees its twelve calls
        self.assertIsNone(transport())

        async def again():  # the extension still serves a new client
            async with kernelserve.aio.Client(self.server.target, native=True) as fresh:
                return await fresh.mean_pooling(xs[0])

        r = asyncio.run(again())
        np.testing.assert_allclose(r.out, references.mean_pooling(xs[0]), rtol=1e-5, atol=1e-6)


class AsyncLargeCallTest(AsyncServerTest):
    """kernelserve.aio.Client's calls with large inputs, native (in the loop's executor) and
    through grpc.aio."""

    async def test_large_calls_both_transports(self):
        x = uniform(self.rng, (4, 300, 96))
        for native in (True, False):
            client = kernelserve.aio.Client(self.server.target, native=native)
            try:
                results = await asyncio.gather(*(client.mean_pooling(x[i:]) for i in range(3)))
                for i, r in enumerate(results):
                    np.testing.assert_allclose(r.out, references.mean_pooling(x[i:]), rtol=1e-5,
                                               atol=1e-6)
                with self.assertRaises(kernelserve.KernelserveError) as raised:
                    await client.mean_pooling(x[0])
                self.assertEqual(raised.exception.code, grpc.StatusCode.INVALID_ARGUMENT)
            finally:
                await client.close()


class AsyncLocalSharedMemoryTest(AsyncServerTest):
    """kernelserve.aio.Client's own regions for large calls to a server on this host."""

    async def test_large_calls_through_a_region(self):
        x = uniform(self.rng, (2, 600, 300))
        for _ in range(2):  # learns the output's shape, then places it
            outs = await asyncio.gather(*(self.client.mean_pooling(x[i:]) for i in range(2)))
            for i, r in enumerate(outs):
                np.testing.assert_allclose(r.out, references.mean_pooling(x[i:]), rtol=1e-5,
                                           atol=1e-6)
        regions = [r for r in await self.client.shm_status()
                   if r.name.startswith("kernelserve-auto-")]
        self.assertTrue(1 <= len(regions) <= 2, regions)
        with self.assertRaises(kernelserve.KernelserveError) as raised:
            await self.client.mean_pooling(x, chunk_size=-3)
        self.assertEqual(raised.exception.code, grpc.StatusCode.INVALID_ARGUMENT)


def shm_objects():
    """The names of the POSIX shared-memory objects Python made (multiprocessing's "psm_")."""
    return {n for n in os.listdir("/dev/shm") if n.startswith("psm_")}


class RecordedObjects:
    """Records the names of the shared-memory objects made while it is on (the package makes
    them with multiprocessing.shared_memory.SharedMemory), so that a test can check that its
    own are gone whatever other processes do in /dev/shm."""

    def __init__(self):
        self.names = []
        names = self.names

        class Recording(shared_memory.SharedMemory):
            def __init__(self, *args, **kwargs):
                super().__init__(*args, **kwargs)
                names.append(self.name)

        self._patch = mock.patch.object(shared_memory, "SharedMemory", Recording)

    def __enter__(self):
        self._patch.start()
        return self

    def __exit__(self, *exc):
        self._patch.stop()

    def linked(self):
        """Those of the recorded objects that still exist."""
        present = shm_objects()
        return [name for name in self.names if name in present]


def same_bytes(test, got, want):
    """Bit for bit: the same dtype, shape and bytes."""
    test.assertEqual((got.dtype, got.shape), (want.dtype, want.shape))
    test.assertEqual(np.ascontiguousarray(got).tobytes(), np.ascontiguousarray(want).tobytes())


def poisoned(view):
    """`view` filled with NaN (or all ones for integers), so that an output left unwritten
    shows."""
    view[...] = np.nan if view.dtype.kind == "f" or view.dtype == kernelserve.bfloat16 else 1
    return view


class SystemSharedMemoryTest(unittest.TestCase):
    """register_system_shm: inputs read from a region and outputs written into it, equal to the
    inline calls bit for bit; status, unregister, close; every bad case with its code."""

    @classmethod
    def setUpClass(cls):
        cls.server = ServerProcess()
        # The regions of these tests alone (LocalSharedMemoryTest has the client's own).
        cls.client = kernelserve.Client(cls.server.target, local_shm=False)

    @classmethod
    def tearDownClass(cls):
        cls.client.close()
        cls.server.stop()

    def setUp(self):
        self.rng = np.random.default_rng(int.from_bytes(self.id().encode()[-4:], "little"))
        self.objects = RecordedObjects().__enter__()
        self.addCleanup(self.objects.__exit__)

    def tearDown(self):
        self.client.unregister_shm()  # every region, whatever the test left
        self.assertEqual(self.client.shm_status(), [])

    def assertNoObjectLeft(self):
        self.assertTrue(self.objects.names)
        self.assertEqual(self.objects.linked(), [])

    def assertCode(self, code, fn, *args, **kwargs):
        with self.assertRaises(kernelserve.KernelserveError) as ctx:
            fn(*args, **kwargs)
        self.assertEqual(ctx.exception.code, code, ctx.exception.message)
        return ctx.exception

    def test_register_status_and_close(self):
        region = self.client.register_system_shm("status", 1 << 16)
        self.assertIsInstance(region, kernelserve.SystemSharedMemory)
        self.assertEqual((region.name, region.byte_size), ("status", 1 << 16))
        self.assertTrue(region.key.startswith("/psm_"), region.key)
        self.assertIn(region.key[1:], shm_objects())  # the POSIX object, "/" + its name
        [listed] = self.client.shm_status()
        self.assertIsInstance(listed, kernelserve.RegionStatus)
        self.assertEqual((listed.name, listed.kind, listed.key, listed.offset, listed.byte_size,
                          listed.in_use, listed.device),
                         ("status", "system", region.key, 0, 1 << 16, 0, -1))
        # The server has no authentication (one identity) and no GPU.
        self.assertEqual((listed.owner, listed.pinned), ("anonymous", False))
        with self.client.register_system_shm("other", 4096) as other:
            self.assertEqual(sorted(r.name for r in self.client.shm_status()),
                             ["other", "status"])
            self.assertEqual([r.key for r in self.client.shm_status("other")], [other.key])
        # The with block closed it: unregistered and unlinked.
        self.assertTrue(other.closed)
        self.assertEqual([r.name for r in self.client.shm_status()], ["status"])
        self.assertCode(grpc.StatusCode.NOT_FOUND, self.client.shm_status, "other")
        region.close()
        self.assertTrue(region.closed)
        self.assertEqual(self.client.shm_status(), [])
        self.assertNoObjectLeft()
        region.close()  # again: nothing to do
        with self.assertRaisesRegex(ValueError, "closed"):
            region.ndarray(4)

    def test_views_outlive_close(self):
        region = self.client.register_system_shm("views", 4096)
        view = region.put(np.arange(16, dtype=np.int32), offset=64)
        region.close()
        self.assertEqual(self.client.shm_status(), [])
        self.assertNoObjectLeft()
        view += 1  # still mapped while the view lives
        np.testing.assert_array_equal(view, np.arange(1, 17, dtype=np.int32))

    def test_mean_pooling_in_and_out_of_a_region_equals_inline(self):
        x = uniform(self.rng, (3, 37, 24))
        mask = self.rng.integers(0, 2, size=(3, 37)).astype(bool)
        want = self.client.mean_pooling(x, mask=mask, chunk_size=8)
        with self.client.register_system_shm("pool", 1 << 16) as region:
            x_in = region.put(x)
            out = poisoned(region.ndarray((3, 24), np.float32, offset=32 * 1024))
            got = self.client.mean_pooling(x_in, mask=mask, chunk_size=8,
                                           outputs={"out": out})  # mask inline
            self.assertIs(got.out, out)  # the view, written by the server
            self.assertFalse(np.isnan(out).any())
            same_bytes(self, got.out, want.out)
            np.testing.assert_allclose(out, references.mean_pooling(x, mask=mask), rtol=1e-5,
                                       atol=1e-6)
            # Fresh inputs in the same place give a fresh answer there.
            x2 = uniform(self.rng, (3, 37, 24))
            region.put(x2)
            poisoned(out)
            again = self.client.execute("mean_pooling", {"x": x_in, "mask": mask},
                                        outputs={"out": out})
            self.assertIs(again.out, out)
            same_bytes(self, out, self.client.mean_pooling(x2, mask=mask).out)

    def test_bf16_and_an_unaligned_input(self):
        x = uniform(self.rng, (2, 19, 40)).astype(kernelserve.bfloat16)
        want = self.client.mean_pooling(x)
        with self.client.register_system_shm("bf16", 1 << 16) as region:
            # Offset 8: not a multiple of 16, so the server copies it; the same answer.
            x_in = region.put(x, offset=8)
            out = poisoned(region.ndarray((2, 40), kernelserve.bfloat16, offset=8192))
            got = self.client.mean_pooling(x_in, outputs={"out": out})
            self.assertIs(got.out, out)
            same_bytes(self, got.out, want.out)
            # uint16 views are bf16 bits, as inline.
            bits = poisoned(region.ndarray((2, 40), np.uint16, offset=16384))
            got = self.client.mean_pooling(x_in.view(np.uint16), outputs={"out": bits})
            self.assertIs(got.out, bits)
            same_bytes(self, bits.view(kernelserve.bfloat16), want.out)

    def test_flash_attention_mixed_inline_and_region(self):
        q = uniform(self.rng, (2, 21, 4, 40), np.float16)
        k = uniform(self.rng, (2, 30, 2, 40), np.float16)
        v = uniform(self.rng, (2, 30, 2, 40), np.float16)
        params = dict(causal=True, return_lse=True, logits_soft_cap=3.0)
        want = self.client.flash_attention(q, k, v, **params)
        with self.client.register_system_shm("attention", 1 << 20) as region:
            q_in = region.put(q, offset=0)
            k_in = region.put(k, offset=64 * 1024)  # v inline
            out = poisoned(region.ndarray(q.shape, np.float16, offset=256 * 1024))
            got = self.client.flash_attention(q_in, k_in, v, outputs={"out": out}, **params)
            self.assertIs(got.out, out)
            same_bytes(self, got.out, want.out)
            same_bytes(self, got.lse, want.lse)  # inline, from the response
            self.assertFalse(got.lse.flags.writeable)

            # Both outputs in the region, all inputs too; lse through region.ref.
            v_in = region.put(v, offset=128 * 1024)
            poisoned(out)
            lse = poisoned(region.ndarray(want.lse.shape, np.float32, offset=512 * 1024))
            got = self.client.execute("flash_attention", {"q": q_in, "k": k_in, "v": v_in},
                                      params, outputs={"out": out, "lse": region.ref(lse)})
            self.assertIs(got.out, out)
            self.assertTrue(np.shares_memory(got.lse, lse))
            same_bytes(self, got.out, want.out)
            same_bytes(self, lse, want.lse)
            same_bytes(self, got.lse, want.lse)

            # An output place with room but another shape: the result has the output's own
            # shape, at that place.
            flat = poisoned(region.ndarray(q.size + 100, np.float16, offset=768 * 1024))
            got = self.client.flash_attention(q_in, k_in, v_in, causal=True,
                                              outputs={"out": flat})
            self.assertEqual(got.out.shape, q.shape)
            self.assertTrue(np.shares_memory(got.out, flat))
            same_bytes(self, got.out, self.client.flash_attention(q, k, v, causal=True).out)
            self.assertTrue(np.isnan(flat[q.size:]).all())  # past the output: untouched

    def test_region_tensors_stay_out_of_the_messages(self):
        """A client whose messages are limited to 64 KiB both ways runs a call of a 4 MiB input
        and a 1 MiB output through a region; inline, the same call is too big."""
        x = uniform(self.rng, (256, 4, 1024))
        want = self.client.mean_pooling(x)  # the default limit, 1 GiB
        with kernelserve.Client(self.server.target, max_message_bytes=64 * 1024,
                                local_shm=False) as small:
            self.assertCode(grpc.StatusCode.RESOURCE_EXHAUSTED, small.mean_pooling, x)
            region = small.register_system_shm("big", 8 << 20)
            out = poisoned(region.ndarray((256, 1024), offset=4 << 20))
            got = small.mean_pooling(region.put(x), outputs={"out": out})
            self.assertIs(got.out, out)
            same_bytes(self, out, want.out)
        # Closing the client closed the region it left open.
        self.assertTrue(region.closed)
        self.assertEqual(self.client.shm_status(), [])
        self.assertNoObjectLeft()

    def test_execute_stream_takes_regions(self):
        x = uniform(self.rng, (2, 9, 16))
        q = uniform(self.rng, (1, 12, 2, 8))
        with self.client.register_system_shm("stream", 1 << 16) as region:
            x_in = region.put(x)
            q_in = region.put(q, offset=4096)
            out_x = poisoned(region.ndarray((2, 16), offset=16384))
            out_q = poisoned(region.ndarray(q.shape, offset=20480))
            answers = self.client.execute_stream([
                kernelserve.Request("mean_pooling", {"x": x_in}, outputs={"out": out_x}),
                kernelserve.Request("mean_pooling", {"x": kernelserve.RegionTensor(
                    "stream", 0, (2, 9, 16), byte_size=100)}),  # not its size: in-band error
                kernelserve.Request("flash_attention", {"q": q_in, "k": q_in, "v": q},
                                    {"causal": True}, outputs={"out": out_q}),
            ])
            self.assertIs(answers[0].out, out_x)
            same_bytes(self, out_x, self.client.mean_pooling(x).out)
            self.assertIsInstance(answers[1], kernelserve.KernelserveError)
            self.assertEqual(answers[1].code, grpc.StatusCode.INVALID_ARGUMENT)
            self.assertIs(answers[2].out, out_q)
            same_bytes(self, out_q, self.client.flash_attention(q, q, q, causal=True).out)

    def test_bad_references_get_the_servers_codes(self):
        x = uniform(self.rng, (2, 8, 16))
        with self.client.register_system_shm("bad", 64 * 1024) as region:
            x_in = region.put(x, offset=1024)
            good = region.ref(x_in)
            self.assertEqual((good.region, good.offset, good.shape, good.nbytes),
                             ("bad", 1024, (2, 8, 16), x.nbytes))
            same_bytes(self, self.client.execute("mean_pooling", {"x": good}).out,
                       self.client.mean_pooling(x).out)
            ref = kernelserve.RegionTensor
            cases = [
                ("unknown region", grpc.StatusCode.NOT_FOUND, ref("nope", 0, x.shape)),
                ("past the end", grpc.StatusCode.INVALID_ARGUMENT,
                 ref("bad", 63 * 1024 + 4, x.shape)),
                ("not the tensor's size", grpc.StatusCode.INVALID_ARGUMENT,
                 ref("bad", 1024, x.shape, byte_size=100)),
            ]
            for what, code, tensor in cases:
                with self.subTest(what):
                    err = self.assertCode(code, self.client.execute, "mean_pooling",
                                          {"x": tensor})
                    self.assertIn("nope" if code == grpc.StatusCode.NOT_FOUND else "bad",
                                  err.message)
            # Outputs: too small, past the end, one the kernel does not produce.
            small = region.ndarray(8, np.float32, offset=8192)
            self.assertCode(grpc.StatusCode.INVALID_ARGUMENT, self.client.mean_pooling, x_in,
                            outputs={"out": small})
            self.assertCode(grpc.StatusCode.INVALID_ARGUMENT, self.client.mean_pooling, x_in,
                            outputs={"out": ref("bad", 64 * 1024 - 8, (2, 16))})
            self.assertCode(grpc.StatusCode.INVALID_ARGUMENT, self.client.mean_pooling, x_in,
                            outputs={"lse": region.ndarray(64, offset=8192)})

    def test_duplicate_name_is_already_exists_and_leaves_no_object(self):
        with self.client.register_system_shm("twice", 4096) as region:
            self.assertCode(grpc.StatusCode.ALREADY_EXISTS, self.client.register_system_shm,
                            "twice", 4096)
            self.assertEqual(len(self.objects.names), 2)  # the second made, then removed
            self.assertEqual(self.objects.linked(), [region.key[1:]])
            [listed] = self.client.shm_status()
            self.assertEqual(listed.key, region.key)  # the first one's
        self.assertCode(grpc.StatusCode.INVALID_ARGUMENT, self.client.register_system_shm,
                        "", 4096)  # the server's: a region needs a name
        with self.assertRaises(kernelserve.ArgumentError):
            self.client.register_system_shm("empty", 0)
        self.assertNoObjectLeft()

    def test_unregister_then_use_is_not_found(self):
        x = uniform(self.rng, (2, 5, 8))
        region = self.client.register_system_shm("gone", 4096)
        x_in = region.put(x)
        ref = region.ref(x_in)
        self.client.unregister_shm("gone")
        self.assertEqual(self.client.shm_status(), [])
        self.assertCode(grpc.StatusCode.NOT_FOUND, self.client.execute, "mean_pooling",
                        {"x": ref})
        self.assertCode(grpc.StatusCode.NOT_FOUND, self.client.unregister_shm, "gone")
        # The region is no longer this client's: its views go inline again, and it is no
        # place for outputs.
        same_bytes(self, self.client.mean_pooling(x_in).out, self.client.mean_pooling(x).out)
        with self.assertRaisesRegex(kernelserve.ArgumentError, "output 'out'"):
            self.client.mean_pooling(x_in, outputs={"out": region.ndarray((2, 8), offset=2048)})
        region.close()  # only unlinks now
        self.assertNoObjectLeft()

    def test_client_side_checks(self):
        x = uniform(self.rng, (2, 5, 8))
        with self.client.register_system_shm("checks", 4096) as region:
            x_in = region.put(x)
            with self.assertRaisesRegex(kernelserve.ArgumentError, "output 'out'"):
                self.client.mean_pooling(x, outputs={"out": np.zeros((2, 8), np.float32)})
            with self.assertRaisesRegex(kernelserve.ArgumentError, "output 'out'.*'elsewhere'"):
                self.client.mean_pooling(x, outputs={
                    "out": kernelserve.RegionTensor("elsewhere", 0, (2, 8))})
            with self.assertRaisesRegex(ValueError, "not a non-empty, C-contiguous view"):
                region.ref(x)
            with self.assertRaisesRegex(ValueError, "do not fit"):
                region.ndarray(1025, np.float32)
            # Batch takes data only: a view goes as its bytes, a RegionTensor is refused.
            [item] = self.client.execute_batch("mean_pooling", [{"x": x_in}])
            same_bytes(self, item.out, self.client.mean_pooling(x).out)
            with self.assertRaisesRegex(kernelserve.ArgumentError, "execute and execute_stream"):
                self.client.execute_batch("mean_pooling", [{"x": region.ref(x_in)}])
            # A view that is not C-contiguous goes inline.
            wide = region.ndarray((2, 5, 16), offset=1024)
            wide[..., :8] = x
            same_bytes(self, self.client.mean_pooling(wide[..., :8]).out,
                       self.client.mean_pooling(x).out)

    def test_shared_memory_off_and_limit(self):
        off = ServerProcess("--shared-memory=off")
        try:
            with kernelserve.Client(off.target) as client:
                err = self.assertCode(grpc.StatusCode.UNIMPLEMENTED, client.register_system_shm,
                                      "r", 4096)
                self.assertIn("--shared-memory=off", err.message)
        finally:
            off.stop()
        limited = ServerProcess("--max-shared-memory-bytes=8192")
        try:
            with kernelserve.Client(limited.target) as client:
                with client.register_system_shm("a", 8192):
                    self.assertCode(grpc.StatusCode.RESOURCE_EXHAUSTED,
                                    client.register_system_shm, "b", 4096)
        finally:
            limited.stop()
        self.assertNoObjectLeft()


class FakeCudaArray:
    """A GPU array as __cuda_array_interface__ shows one (made up: this host has no GPU)."""

    def __init__(self, address, shape, typestr="<f4"):
        self.__cuda_array_interface__ = {"version": 3, "shape": shape, "typestr": typestr,
                                         "data": (address, False), "strides": None}


def fake_export(address):
    """kernelserve.cuda.export of an allocation at 0x7f0000000000 (a made-up handle)."""
    return kernelserve.cuda.Allocation(bytes(range(64)), 0x7F0000000000, 1 << 20, 0)


class CudaSharedMemoryTest(unittest.TestCase):
    """register_cuda_shm against this CPU-only server: UNIMPLEMENTED, saying why."""

    @classmethod
    def setUpClass(cls):
        cls.server = ServerProcess()

    @classmethod
    def tearDownClass(cls):
        cls.server.stop()

    def test_register_without_a_gpu_is_unimplemented(self):
        buffer = FakeCudaArray(0x7F0000000000 + 256, (1024,), "|u1")
        with mock.patch.object(kernelserve.cuda, "export", fake_export), \
                kernelserve.Client(self.server.target) as client:
            with self.assertRaises(kernelserve.KernelserveError) as raised:
                client.register_cuda_shm("gpu", buffer)
            self.assertEqual(raised.exception.code, grpc.StatusCode.UNIMPLEMENTED)
            self.assertIn("needs a GPU", raised.exception.message)
            self.assertEqual(client.shm_status(), [])
            # Nothing registered: its tensors are refused before any call, and so is an
            # object that is no CUDA tensor.
            with self.assertRaisesRegex(kernelserve.ArgumentError, "outside every CUDA region"):
                client.mean_pooling(FakeCudaArray(0x7F0000000000 + 4096, (2, 3, 4)))
            with self.assertRaisesRegex(kernelserve.ArgumentError, "expected a CUDA tensor"):
                client.register_cuda_shm("gpu", np.zeros(4, np.float32).tolist())

            async def register():
                async with kernelserve.aio.Client(self.server.target) as aclient:
                    await aclient.register_cuda_shm("gpu", buffer)

            async def register_in_a_block():
                async with kernelserve.aio.Client(self.server.target) as aclient:
                    async with aclient.register_cuda_shm("gpu", buffer):
                        self.fail("entered a region that was not registered")

            for attempt in (register, register_in_a_block):
                with self.assertRaises(kernelserve.KernelserveError) as raised:
                    asyncio.run(attempt())
                self.assertEqual(raised.exception.code, grpc.StatusCode.UNIMPLEMENTED)


class AsyncSharedMemoryTest(AsyncServerTest):
    """kernelserve.aio.Client.register_system_shm."""

    SEED = 12

    async def test_region_in_and_out(self):
        objects = RecordedObjects().__enter__()
        self.addCleanup(objects.__exit__)
        x = uniform(self.rng, (3, 11, 32))
        want = await self.client.mean_pooling(x)
        async with await self.client.register_system_shm("async", 1 << 16) as region:
            self.assertIsInstance(region, kernelserve.AsyncSystemSharedMemory)
            [listed] = await self.client.shm_status()
            self.assertEqual((listed.name, listed.key), ("async", region.key))
            out = poisoned(region.ndarray((3, 32), offset=32768))
            got = await self.client.mean_pooling(region.put(x), outputs={"out": out})
            self.assertIs(got.out, out)
            same_bytes(self, out, want.out)
            [streamed] = await self.client.execute_stream(
                [kernelserve.Request("mean_pooling", {"x": region.ref(region.ndarray(
                    x.shape))}, outputs={"out": poisoned(out)})])
            self.assertIs(streamed.out, out)
            same_bytes(self, out, want.out)
        self.assertEqual(await self.client.shm_status(), [])
        with self.assertRaises(kernelserve.KernelserveError) as raised:
            await self.client.unregister_shm("async")
        self.assertEqual(raised.exception.code, grpc.StatusCode.NOT_FOUND)
        region = await self.client.register_system_shm("left-open", 4096)
        await self.client.close()  # closes the region too
        self.assertTrue(region.closed)
        self.assertEqual(len(objects.names), 2)
        self.assertEqual(objects.linked(), [])
        self.client = kernelserve.aio.Client(self.server.target)
        self.assertEqual(await self.client.shm_status(), [])

    async def test_async_with_registers_and_closes_the_region(self):
        objects = RecordedObjects().__enter__()
        self.addCleanup(objects.__exit__)
        x = uniform(self.rng, (2, 5, 8))
        async with self.client.register_system_shm("with", 4096) as region:
            self.assertIsInstance(region, kernelserve.AsyncSystemSharedMemory)
            [listed] = await self.client.shm_status()
            self.assertEqual((listed.name, listed.key), ("with", region.key))
            got = await self.client.mean_pooling(region.put(x))
            np.testing.assert_allclose(got.out, references.mean_pooling(x), rtol=1e-5,
                                       atol=1e-6)
        self.assertTrue(region.closed)  # unregistered and unlinked at the end of the block
        self.assertEqual(await self.client.shm_status(), [])
        self.assertEqual(len(objects.names), 1)
        self.assertEqual(objects.linked(), [])
        # A registration the server refuses raises on entry, and the block does not run.
        async with self.client.register_system_shm("taken", 4096):
            with self.assertRaises(kernelserve.KernelserveError) as raised:
                async with self.client.register_system_shm("taken", 4096):
                    self.fail("entered a region that was not registered")
            self.assertEqual(raised.exception.code, grpc.StatusCode.ALREADY_EXISTS)
        self.assertEqual(objects.linked(), [])


@unittest.skipUnless(TOY_SERVER, "KERNELSERVE_TOY_SERVER is not set")
class ToyKernelTest(unittest.TestCase):
    """A kernel this package has never heard of is a method with its schema's arguments."""

    @classmethod
    def setUpClass(cls):
        cls.server = ServerProcess(binary=TOY_SERVER)
        cls.client = kernelserve.Client(cls.server.target)

    @classmethod
    def tearDownClass(cls):
        cls.client.close()
        cls.server.stop()

    def test_toy_kernel_method(self):
        x = np.arange(6, dtype=np.float32).reshape(2, 3)
        r = self.client.toy_scale(x, factor=-0.5)
        np.testing.assert_array_equal(r.out, -0.5 * x)
        np.testing.assert_array_equal(self.client.toy_scale(x=x).out, 2 * x)  # the default
        with self.assertRaisesRegex(TypeError, "did you mean 'factor'"):
            self.client.toy_scale(x, facter=3)
        with self.assertRaises(kernelserve.KernelserveError) as raised:
            self.client.toy_scale(x, factor="big")
        self.assertIn("param 'factor': expected float", str(raised.exception))

    def test_example_kernel_method(self):
        """rms_norm, the example of docs/ADDING_A_KERNEL.md, as a method with its schema's
        arguments, in every dtype against the float64 reference."""
        rng = np.random.default_rng(31)
        for dtype, tol in ((np.float32, 1e-5), (np.float16, 2e-3), (kernelserve.bfloat16, 2e-2)):
            x = uniform(rng, (3, 4, 65)).astype(dtype)
            weight = uniform(rng, (65,)).astype(dtype)
            r = self.client.rms_norm(x, weight=weight, eps=1e-3)
            self.assertEqual((r.out.dtype, r.out.shape), (x.dtype, x.shape))
            np.testing.assert_allclose(r.out.astype(np.float64),
                                       references.rms_norm(x.astype(np.float64),
                                                           weight.astype(np.float64), 1e-3),
                                       rtol=tol, atol=tol)
        x = uniform(rng, (7,))
        np.testing.assert_allclose(self.client.rms_norm(x).out, references.rms_norm(x),
                                   rtol=1e-5, atol=1e-6)  # weight ones, eps the default
        with self.assertRaises(kernelserve.KernelserveError) as raised:
            self.client.rms_norm(x, weight=uniform(rng, (6,)))
        self.assertEqual(raised.exception.code, grpc.StatusCode.INVALID_ARGUMENT)
        self.assertIn("input 'weight': expected shape [H] = [7], got [6]", str(raised.exception))

class ResidentTensorTest(unittest.TestCase):
    """Resident tensors: kept on the server between calls, named by inputs and outputs."""

    @classmethod
    def setUpClass(cls):
        cls.server = ServerProcess()
        cls.client = kernelserve.Client(cls.server.target)

    @classmethod
    def tearDownClass(cls):
        cls.client.close()
        cls.server.stop()

    def setUp(self):
        self.rng = np.random.default_rng(int.from_bytes(self.id().encode()[-4:], "little"))

    def tearDown(self):
        self.client.delete_tensor("")  # every tensor of the test's identity

    def assertCode(self, code, fn, *args, **kwargs):
        with self.assertRaises(kernelserve.KernelserveError) as ctx:
            fn(*args, **kwargs)
        self.assertEqual(ctx.exception.code, code, ctx.exception.message)
        return ctx.exception

    def test_create_from_data_and_zeros(self):
        x = uniform(self.rng, (3, 7, 8))
        t = self.client.create_tensor(x, name="x")
        self.assertIsInstance(t, kernelserve.ResidentTensor)
        self.assertTrue(t.created)
        self.assertEqual((t.name, t.shape, t.dtype, t.nbytes), ("x", (3, 7, 8),
                                                                np.dtype(np.float32), x.nbytes))
        self.assertEqual(t.device, -1)  # a server without GPUs holds it in host memory
        np.testing.assert_array_equal(t.read(), x)
        z = self.client.create_tensor(None, name="z", dtype=kernelserve.bfloat16, shape=(4, 2),
                                      ttl=30)
        zeros = z.read()
        self.assertEqual((zeros.dtype, zeros.shape), (np.dtype(kernelserve.bfloat16), (4, 2)))
        self.assertFalse(zeros.astype(np.float32).any())
        self.assertLessEqual(z.info().ttl_seconds, 30)
        self.assertGreater(z.info().ttl_seconds, 0)
        # Idempotent: the same name, dtype and shape leaves it as it is, contents too.
        again = self.client.create_tensor(None, name="x", shape=(3, 7, 8))
        self.assertFalse(again.created)
        np.testing.assert_array_equal(again.read(), x)

    def test_fp8_round_trips_through_the_server(self):
        # Every one of the 256 codes, written as a resident tensor and read back: the server
        # keeps fp8 bytes as they are, and they come back as the ml_dtypes dtype.
        codes = np.arange(256, dtype=np.uint8).reshape(16, 16)
        for dtype, wire_name in ((kernelserve.float8_e4m3fn, "f8e4"),
                                 (kernelserve.float8_e5m2, "f8e5")):
            with self.client.create_tensor(codes.view(dtype), name=wire_name) as t:
                self.assertEqual((t.dtype, t.shape, t.nbytes), (np.dtype(dtype), (16, 16), 256))
                back = t.read()
                self.assertEqual(back.dtype, np.dtype(dtype))
                np.testing.assert_array_equal(back.view(np.uint8), codes)
                np.testing.assert_array_equal(t.read(rows=(3, 5)).view(np.uint8), codes[3:5])
                # Zeros of fp8, and rows written from values ml_dtypes rounded.
                values = np.array([[0.5, -2.0] * 8], dtype=np.float32).astype(dtype)
                t.write(values, row=7)
                np.testing.assert_array_equal(t.read(rows=(7, 8)).astype(np.float32),
                                              values.astype(np.float32))
            z = self.client.create_tensor(None, name=wire_name + "z", dtype=dtype, shape=(3, 2))
            zeros = z.read()
            self.assertEqual((zeros.dtype, zeros.shape), (np.dtype(dtype), (3, 2)))
            self.assertFalse(zeros.astype(np.float32).any())

    def test_resident_inputs_equal_inline(self):
        x = uniform(self.rng, (2, 9, 16))
        with self.client.create_tensor(x, name="pool-x") as resident_x:
            by_name = self.client.mean_pooling(resident_x, chunk_size=4)
            inline = self.client.mean_pooling(x, chunk_size=4)
            np.testing.assert_array_equal(by_name.out, inline.out)
            self.assertEqual(by_name.cache_key, inline.cache_key)
        q = uniform(self.rng, (1, 6, 4, 8))
        k, v = uniform(self.rng, (1, 10, 2, 8)), uniform(self.rng, (1, 10, 2, 8))
        with self.client.create_tensor(k, name="k") as rk, \
                self.client.create_tensor(v, name="v") as rv:
            mixed = self.client.flash_attention(q, rk, rv, causal=True, return_lse=True)
            inline = self.client.flash_attention(q, k, v, causal=True, return_lse=True)
            np.testing.assert_array_equal(mixed.out, inline.out)
            np.testing.assert_array_equal(mixed.lse, inline.lse)
            # A stream names them the same way.
            [streamed] = self.client.execute_stream([kernelserve.Request(
                "flash_attention", {"q": q, "k": rk, "v": rv}, params={"causal": True})])
            np.testing.assert_array_equal(streamed.out, inline.out)
        self.assertEqual(list(self.client.list_tensors()), [])  # the with blocks deleted them

    def test_output_into_a_resident_tensor(self):
        x = uniform(self.rng, (3, 5, 8))
        out = self.client.create_tensor(None, name="pooled", shape=(3, 8))
        r = self.client.mean_pooling(x, outputs={"out": out})
        self.assertIs(r.out, out)
        np.testing.assert_allclose(out.read(), references.mean_pooling(x), rtol=1e-5, atol=1e-6)
        # In and out both resident: nothing but names on the wire.
        with self.client.create_tensor(x * 2, name="x2") as x2:
            self.client.execute("mean_pooling", {"x": x2}, outputs={"out": out})
        np.testing.assert_allclose(out.read(), references.mean_pooling(x * 2), rtol=1e-5,
                                   atol=1e-6)
        # The output's dtype and shape must be the tensor's.
        wrong = self.client.create_tensor(None, name="wrong", shape=(3, 9))
        self.assertCode(grpc.StatusCode.INVALID_ARGUMENT, self.client.mean_pooling, x,
                        outputs={"out": wrong})

    def test_in_place_only_where_the_schema_says(self):
        [out] = [o for o in self.client.schema("flash_attention").outputs if o.name == "out"]
        self.assertEqual(out.in_place_of, "q")
        q = uniform(self.rng, (1, 5, 2, 8))
        k, v = uniform(self.rng, (1, 7, 2, 8)), uniform(self.rng, (1, 7, 2, 8))
        want = self.client.flash_attention(q, k, v).out
        with self.client.create_tensor(q, name="q") as rq:
            r = self.client.flash_attention(rq, k, v, outputs={"out": rq})  # out over q
            self.assertIs(r.out, rq)
            np.testing.assert_allclose(rq.read(), want, rtol=1e-6, atol=1e-6)
        # mean_pooling_bwd's dx has x's shape, but its schema writes no output over an input.
        dout = uniform(self.rng, (2, 4))
        with self.client.create_tensor(uniform(self.rng, (2, 3, 4)), name="x") as rx:
            self.client.mean_pooling_bwd(dout, rx)  # read alone: fine
            error = self.assertCode(grpc.StatusCode.INVALID_ARGUMENT, self.client.mean_pooling_bwd,
                                    dout, rx, outputs={"dx": rx})
            self.assertIn("dx", error.message)

    def test_paged_decode_loop_appends_into_resident_caches(self):
        # The remote decode loop: the caches live on the server; each step sends q and the new
        # k, v only, and the server appends them in place and attends.
        pages, page_size, hkv, hq, d, batch = 12, 4, 2, 4, 8, 3
        k_pages = uniform(self.rng, (pages, page_size, hkv, d))
        v_pages = uniform(self.rng, (pages, page_size, hkv, d))
        table = self.rng.permutation(pages).astype(np.int32).reshape(batch, 4)
        lens = np.array([3, 0, 6], np.int32)  # sequence 1 is an empty slot of the batch
        kc = self.client.create_tensor(k_pages, name="k-pages")
        vc = self.client.create_tensor(v_pages, name="v-pages")
        [schema_k] = [i for i in self.client.schema("paged_attention").inputs
                      if i.name == "k_cache"]
        self.assertTrue(schema_k.updated)

        def gathered(pool, b):
            t = np.arange(lens[b])
            return pool[table[b, t // page_size], t % page_size][None]

        # With the native transport a step takes kernelserve.plain's lean path (the caches go by
        # name); the answers below are the same either way.
        make_pieces = self.client._plain.pieces
        taken = []  # what kernelserve.plain made of each step: its pieces, or None
        self.client._plain.pieces = lambda *args: taken.append(make_pieces(*args)) or taken[-1]
        self.addCleanup(delattr, self.client._plain, "pieces")
        for step in range(3):
            lens = np.where(lens > 0, lens + 1, 0).astype(np.int32)
            q = uniform(self.rng, (batch, 1, hq, d))
            k, v = uniform(self.rng, (batch, 1, hkv, d)), uniform(self.rng, (batch, 1, hkv, d))
            r = self.client.paged_attention(q, kc, vc, table, lens, k=k, v=v, return_lse=True)
            for b in np.flatnonzero(lens):  # the host's copy of the cache, appended the same way
                t = lens[b] - 1
                k_pages[table[b, t // page_size], t % page_size] = k[b, 0]
                v_pages[table[b, t // page_size], t % page_size] = v[b, 0]
            np.testing.assert_array_equal(kc.read(), k_pages)
            np.testing.assert_array_equal(vc.read(), v_pages)
            for b in range(batch):
                if lens[b] == 0:
                    self.assertFalse(r.out[b].any())
                    self.assertTrue(np.all(np.isneginf(r.lse[b])))
                    continue
                want, lse = references.attention(q[b:b + 1], gathered(k_pages, b),
                                                 gathered(v_pages, b))
                np.testing.assert_allclose(r.out[b:b + 1], want, rtol=1e-5, atol=1e-6,
                                           err_msg=f"step {step} sequence {b}")
                np.testing.assert_allclose(r.lse[b:b + 1], lse, rtol=1e-5, atol=1e-6)
        self.assertEqual(len(taken), 3 if self.client._native is not None else 0)
        self.assertNotIn(None, taken)
        # Inline caches are updated in the call's own copy only: the answer is the same, the
        # caller's arrays stay as they were.
        mine = k_pages.copy()
        r2 = self.client.paged_attention(q, mine, v_pages, table, lens, k=k, v=v)
        np.testing.assert_array_equal(mine, k_pages)
        np.testing.assert_allclose(r2.out, r.out, rtol=1e-6, atol=1e-7)

    def test_paged_decode_loop_over_fp8_caches_with_scales(self):
        # fp8 caches (e4m3) with a scale per kv head, bf16 q, k, v: the server appends
        # fp8(float(x) / scale[h]) and attends over float(cache) * scale[h].
        pages, page_size, hkv, hq, d, batch = 12, 4, 2, 4, 8, 3
        f8, bf16 = kernelserve.float8_e4m3fn, kernelserve.bfloat16
        k_scale = np.array([0.75, 1.5], np.float32)
        v_scale = np.array([1.25, 0.625], np.float32)
        k_pages = uniform(self.rng, (pages, page_size, hkv, d)).astype(f8)
        v_pages = uniform(self.rng, (pages, page_size, hkv, d)).astype(f8)
        table = self.rng.permutation(pages).astype(np.int32).reshape(batch, 4)
        lens = np.array([3, 0, 6], np.int32)
        kc = self.client.create_tensor(k_pages, name="k-pages-fp8")
        vc = self.client.create_tensor(v_pages, name="v-pages-fp8")

        def dequantized(pool, scale, b):
            t = np.arange(lens[b])
            return (pool[table[b, t // page_size], t % page_size].astype(np.float64)
                    * scale[None, :, None])[None]

        for step in range(2):
            lens = np.where(lens > 0, lens + 1, 0).astype(np.int32)
            q = uniform(self.rng, (batch, 1, hq, d)).astype(bf16)
            k = uniform(self.rng, (batch, 1, hkv, d), np.float32).astype(bf16)
            v = uniform(self.rng, (batch, 1, hkv, d), np.float32).astype(bf16)
            r = self.client.paged_attention(q, kc, vc, table, lens, k=k, v=v, k_scale=k_scale,
                                            v_scale=v_scale, return_lse=True)
            self.assertEqual(r.out.dtype, bf16)
            for b in np.flatnonzero(lens):  # quantized as the server does: the quotient in f32
                t = lens[b] - 1
                page, slot = table[b, t // page_size], t % page_size
                k_pages[page, slot] = (k[b, 0].astype(np.float32) / k_scale[:, None]).astype(f8)
                v_pages[page, slot] = (v[b, 0].astype(np.float32) / v_scale[:, None]).astype(f8)
            self.assertEqual(kc.read().tobytes(), k_pages.tobytes(), f"step {step}")
            self.assertEqual(vc.read().tobytes(), v_pages.tobytes(), f"step {step}")
            for b in np.flatnonzero(lens):
                want, lse = references.attention(q[b:b + 1].astype(np.float32),
                                                 dequantized(k_pages, k_scale, b),
                                                 dequantized(v_pages, v_scale, b))
                np.testing.assert_allclose(r.out[b:b + 1].astype(np.float32), want, rtol=1e-2,
                                           atol=1e-2, err_msg=f"step {step} sequence {b}")
                np.testing.assert_allclose(r.lse[b:b + 1], lse, rtol=1e-5, atol=1e-5)

    def test_write_rows_and_bytes_then_read_rows(self):
        t = self.client.create_tensor(None, name="rows", shape=(5, 3))
        rows = uniform(self.rng, (2, 3))
        info = t.write(rows, row=1)
        self.assertEqual(info.name, "rows")
        t.write(np.full(3, 7, np.float32), row=4)  # one row, without its leading 1
        t.write(np.array([9], np.float32), byte_offset=4)  # element [0, 1]
        want = np.zeros((5, 3), np.float32)
        want[1:3] = rows
        want[4] = 7
        want[0, 1] = 9
        np.testing.assert_array_equal(t.read(), want)
        np.testing.assert_array_equal(t.read(rows=slice(1, 3)), rows)
        np.testing.assert_array_equal(t.read(rows=(4, None)), want[4:])
        np.testing.assert_array_equal(self.client.read_tensor("rows", (0, 1)), want[:1])

    def test_list_info_and_delete(self):
        a = self.client.create_tensor(uniform(self.rng, (2, 4)), name="list-a")
        self.client.create_tensor(None, name="list-b", dtype=np.int32, shape=(8,))
        listed = self.client.list_tensors()
        self.assertEqual(sorted(listed.names()), ["list-a", "list-b"])
        self.assertGreaterEqual(listed.resident_bytes, 2 * 4 * 4 + 8 * 4)
        self.assertEqual(listed.owner_bytes, 2 * 4 * 4 + 8 * 4)
        self.assertGreater(listed.server_started_unix_ms, 0)
        b = next(t for t in listed if t.name == "list-b")
        self.assertEqual((b.dtype, b.shape, b.byte_size, b.calls), (np.dtype(np.int32), (8,), 32,
                                                                     0))
        self.assertTrue(b.owner)
        self.assertGreater(b.created_unix_ms, 0)
        info = self.client.info()
        self.assertEqual(info.resident_tensors, 2)
        self.assertEqual(info.started_unix_ms, listed.server_started_unix_ms)
        self.assertEqual(a.info().name, "list-a")
        self.assertEqual(self.client.get_tensor("list-b").shape, (8,))
        a.delete()
        self.assertEqual(self.client.list_tensors().names(), ["list-b"])
        self.assertCode(grpc.StatusCode.NOT_FOUND, a.info)
        self.assertCode(grpc.StatusCode.NOT_FOUND, self.client.delete_tensor, "list-a")
        self.assertEqual(self.client.delete_tensor(""), 1)
        self.assertEqual(list(self.client.list_tensors()), [])

    def test_errors_carry_the_right_codes(self):
        x = uniform(self.rng, (2, 4))
        t = self.client.create_tensor(x, name="e")
        # An unknown name: NOT_FOUND, whatever names it.
        self.assertCode(grpc.StatusCode.NOT_FOUND, self.client.read_tensor, "nope")
        self.assertCode(grpc.StatusCode.NOT_FOUND, self.client.write_tensor, "nope", x)
        self.assertCode(grpc.StatusCode.NOT_FOUND, self.client.delete_tensor, "nope")
        self.assertCode(grpc.StatusCode.NOT_FOUND, self.client.get_tensor, "nope")
        unknown = kernelserve.ResidentTensor(self.client, dataclasses.replace(t.info(),
                                                                              name="nope"))
        self.assertCode(grpc.StatusCode.NOT_FOUND, self.client.mean_pooling, unknown)
        # The same name with another shape or dtype: ALREADY_EXISTS.
        self.assertCode(grpc.StatusCode.ALREADY_EXISTS, self.client.create_tensor, None,
                        name="e", shape=(4, 2))
        self.assertCode(grpc.StatusCode.ALREADY_EXISTS, self.client.create_tensor, None,
                        name="e", shape=(2, 4), dtype=np.float16)
        # Past the end: INVALID_ARGUMENT; nothing written.
        self.assertCode(grpc.StatusCode.INVALID_ARGUMENT, t.write, x, row=1)
        self.assertCode(grpc.StatusCode.INVALID_ARGUMENT, t.write, x[0], byte_offset=4 * 5)
        self.assertCode(grpc.StatusCode.INVALID_ARGUMENT, t.write, x.astype(np.float16))
        self.assertCode(grpc.StatusCode.INVALID_ARGUMENT, t.read, (1, 3))
        np.testing.assert_array_equal(t.read(), x)
        self.assertCode(grpc.StatusCode.INVALID_ARGUMENT, self.client.create_tensor, x,
                        name="has space")


class ResidentPiecesTest(unittest.TestCase):
    """Contents larger than the server's largest message go in and out in pieces."""

    @classmethod
    def setUpClass(cls):
        cls.server = ServerProcess("--max-message-bytes=65536")
        cls.client = kernelserve.Client(cls.server.target)

    @classmethod
    def tearDownClass(cls):
        cls.client.close()
        cls.server.stop()

    def test_create_write_read_past_a_message(self):
        rng = np.random.default_rng(5)
        x = uniform(rng, (4, 25, 512))  # 200 KiB: four messages
        with self.assertRaises(kernelserve.KernelserveError) as raised:
            self.client.mean_pooling(x)  # inline: too big
        self.assertEqual(raised.exception.code, grpc.StatusCode.RESOURCE_EXHAUSTED)
        with self.client.create_tensor(x, name="big") as t:
            self.assertTrue(t.created)
            np.testing.assert_array_equal(t.read(), x)
            np.testing.assert_array_equal(t.read(rows=(1, 3)), x[1:3])
            np.testing.assert_allclose(self.client.mean_pooling(t).out,
                                       references.mean_pooling(x), rtol=1e-5, atol=1e-6)
            rows = uniform(rng, (3, 25, 512))
            t.write(rows, row=1)
            x[1:] = rows
            np.testing.assert_array_equal(t.read(), x)
            # A write that cannot be is refused whole, before any piece.
            with self.assertRaisesRegex(kernelserve.ArgumentError, "do not fit"):
                t.write(rows, row=2)
            np.testing.assert_array_equal(t.read(), x)

        async def by_aio():
            async with kernelserve.aio.Client(self.server.target) as client:
                async with await client.create_tensor(x, name="abig") as t:
                    await t.write(rows[:2], row=2)
                    return await t.read()

        want = x.copy()
        want[2:4] = rows[:2]
        np.testing.assert_array_equal(asyncio.run(by_aio()), want)
        self.assertEqual(list(self.client.list_tensors()), [])


class AsyncResidentTensorTest(AsyncServerTest):
    """kernelserve.aio.Client's resident tensors."""

    SEED = 12

    async def test_create_call_write_read_delete(self):
        x = uniform(self.rng, (2, 6, 4))
        async with await self.client.create_tensor(x, name="ax") as rx:
            self.assertIsInstance(rx, kernelserve.AsyncResidentTensor)
            out = await self.client.create_tensor(None, name="aout", shape=(2, 4))
            r = await self.client.mean_pooling(rx, outputs={"out": out})
            self.assertIs(r.out, out)
            np.testing.assert_allclose(await out.read(), references.mean_pooling(x),
                                       rtol=1e-5, atol=1e-6)
            await rx.write(np.zeros((1, 6, 4), np.float32), row=1)
            np.testing.assert_array_equal(await rx.read(rows=slice(1, 2)),
                                          np.zeros((1, 6, 4), np.float32))
            self.assertEqual((await rx.info()).shape, (2, 6, 4))
            self.assertEqual(sorted((await self.client.list_tensors()).names()), ["aout", "ax"])
            await out.delete()
        self.assertEqual(list(await self.client.list_tensors()), [])
        with self.assertRaises(kernelserve.KernelserveError) as raised:
            await self.client.read_tensor("ax")
        self.assertEqual(raised.exception.code, grpc.StatusCode.NOT_FOUND)


if __name__ == "__main__":
    unittest.main()
