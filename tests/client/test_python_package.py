"""The Python package as pip builds and installs it, and what it checks before any call: needs
no kernelserve server.

Runs in the virtualenv that client/python/scripts/make_venv.py makes (ctest fixture
client_python_env). KERNELSERVE_SOURCE_DIR is the repository, for the build test.
"""

import asyncio
import dataclasses
import importlib.metadata
import inspect
import os
import pickle
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
import typing
import unittest
import zipfile
from concurrent import futures
from unittest import mock
from pathlib import Path

import grpc
import numpy as np
from google.protobuf import descriptor_pb2, descriptor_pool, message_factory
from packaging.requirements import Requirement
from packaging.version import Version

import kernelserve
from kernelserve import health as health_wire
from kernelserve import calls, cuda, info, resident, results, shm, tensors
from kernelserve.v1 import kernel_service_pb2 as pb
from server_fixture import free_port

SOURCE = Path(os.environ.get("KERNELSERVE_SOURCE_DIR", Path(__file__).parents[2]))
PACKAGE_SOURCE = SOURCE / "client" / "python"
MODULES = ["__init__.py", "aio.py", "autoshm.py", "calls.py", "client.py", "cuda.py", "errors.py", "health.py",
           "info.py", "plain.py", "resident.py", "results.py", "shm.py", "tensors.py",
           "transport.py", "wire.py"]
STUBS = ["kernel_service_pb2.py", "kernel_service_pb2.pyi", "kernel_service_pb2_grpc.py"]
# The clients' type stubs, with their kernel methods (client/python/scripts/gen_stubs.py).
TYPE_STUBS = ["aio.pyi", "client.pyi"]


class InstalledPackageTest(unittest.TestCase):
    """What pip installed: the package from the virtualenv, with its stubs, hints and deps."""

    def test_imported_from_the_virtualenv_not_the_sources(self):
        self.assertNotEqual(sys.prefix, sys.base_prefix, "not running in a virtualenv")
        installed = Path(kernelserve.__file__).resolve()
        self.assertTrue(installed.is_relative_to(Path(sys.prefix).resolve()), installed)
        self.assertFalse(installed.is_relative_to(PACKAGE_SOURCE.resolve()), installed)
        self.assertFalse(any(Path(p or ".").resolve() == PACKAGE_SOURCE.resolve()
                             for p in sys.path), sys.path)

    def test_stubs_and_py_typed_are_installed(self):
        files = {str(f) for f in importlib.metadata.files("kernelserve")}
        for name in MODULES + TYPE_STUBS + ["py.typed"]:
            self.assertIn(f"kernelserve/{name}", files)
        for name in STUBS:
            self.assertIn(f"kernelserve/v1/{name}", files)
        self.assertTrue(Path(pb.__file__).resolve().is_relative_to(Path(sys.prefix).resolve()))

    def test_dependencies_come_from_pypi_packages(self):
        requires = {re.split(r"[<>=!~ ;\[]", r, maxsplit=1)[0].lower().replace("_", "-")
                    for r in importlib.metadata.requires("kernelserve")}
        self.assertEqual(requires, {"grpcio", "protobuf", "numpy", "ml-dtypes"})
        for name in requires:
            self.assertTrue(importlib.metadata.version(name), name)  # installed here

    def test_stubs_load_on_every_protobuf_tritonclient_takes(self):
        """The newest tritonclient[grpc], which make_venv installs beside the package: the
        package's protobuf range holds the oldest protobuf tritonclient takes and the one
        installed, and its stubs were generated for no newer a protobuf than that oldest."""
        import tritonclient.grpc  # noqa: F401  # both load in one process

        def protobuf_range(package):
            for text in importlib.metadata.requires(package):
                requirement = Requirement(text)
                if requirement.name == "protobuf" and (
                        requirement.marker is None or
                        requirement.marker.evaluate({"extra": "grpc"})):
                    return requirement.specifier
            self.fail(f"{package} does not require protobuf")

        ours, theirs = protobuf_range("kernelserve"), protobuf_range("tritonclient")
        [oldest] = [Version(s.version) for s in theirs if s.operator == ">="]
        installed = importlib.metadata.version("protobuf")
        for version in (oldest, installed):
            self.assertTrue(ours.contains(version), f"protobuf {version} not in {ours}")
        stamp = re.search(r"^# Protobuf Python Version: (\S+)$",
                          Path(pb.__file__).read_text(), re.MULTILINE)
        self.assertIsNotNone(stamp, pb.__file__)
        self.assertLessEqual(Version(stamp.group(1)), oldest)

    def test_public_api_is_annotated(self):
        """Every parameter and return of the public functions and methods has a type hint, and
        the hints resolve."""
        objects = [kernelserve.Client, kernelserve.aio.Client, kernelserve.to_bf16,
                   kernelserve.from_bf16, kernelserve.KernelserveError, shm.SharedMemoryRegion,
                   kernelserve.SystemSharedMemory, kernelserve.AsyncSystemSharedMemory,
                   kernelserve.RegionTensor, shm.CudaRegion, kernelserve.CudaSharedMemory,
                   kernelserve.AsyncCudaSharedMemory, shm.Registering, cuda.describe,
                   cuda.export, resident.ResidentTensorBase, kernelserve.ResidentTensor,
                   kernelserve.AsyncResidentTensor, kernelserve.ResidentTensors]
        checked = 0
        for obj in objects:
            functions = ([obj] if inspect.isfunction(obj) else
                         [f for n, f in vars(obj).items()
                          if inspect.isfunction(f) and (not n.startswith("_") or n in (
                              "__init__", "__enter__", "__exit__", "__aenter__", "__aexit__",
                              "__getattr__"))])
            for function in functions:
                hints = typing.get_type_hints(function)
                signature = inspect.signature(function)
                for name, parameter in signature.parameters.items():
                    if name == "self":
                        continue
                    self.assertIn(name, hints, f"{function.__qualname__}({name})")
                self.assertIn("return", hints, function.__qualname__)
                checked += 1
        self.assertGreater(checked, 25)
        for cls in (kernelserve.Result, kernelserve.ServerInfo, kernelserve.KernelSchema,
                    kernelserve.TuneResult, kernelserve.ConfigEntry, kernelserve.RegionStatus,
                    kernelserve.RegionTensor, kernelserve.ResidentTensorInfo,
                    kernelserve.ResidentTensors):
            self.assertTrue(typing.get_type_hints(cls), cls)


def flash_attention_schema():
    """A KernelSchema shaped like the server's flash_attention, for the client-side checks."""
    inputs = [info.InputSchema(name, True, ["f32"], [4], "[B,S,H,D]", "") for name in "qkv"]
    params = [info.ParamSchema(name, kind, default, None, None, "")
              for name, kind, default in (("causal", "bool", False),
                                          ("softmax_scale", "float", 0.0),
                                          ("window_left", "int", -1),
                                          ("window_right", "int", -1),
                                          ("logits_soft_cap", "float", 0.0),
                                          ("return_lse", "bool", False))]
    return info.KernelSchema("flash_attention", 1, "flash_attention@v1", ["cpu"], "", inputs,
                             [], params)


class ArgumentCheckTest(unittest.TestCase):
    """What the client refuses before sending: ArgumentError, a KernelserveError and a
    TypeError, naming what is wrong and what would be right."""

    def setUp(self):
        self.q = np.zeros((1, 2, 1, 4), np.float32)

    def test_misspelt_param_names_it_and_the_valid_ones(self):
        schema = flash_attention_schema()
        with self.assertRaises(kernelserve.ArgumentError) as raised:
            calls.split_call(schema, (self.q,) * 3, {"casual": True})
        error = raised.exception
        self.assertIsInstance(error, TypeError)
        self.assertIsInstance(error, kernelserve.KernelserveError)
        self.assertEqual(error.code, grpc.StatusCode.INVALID_ARGUMENT)
        self.assertIn("unexpected keyword argument 'casual'", error.message)
        self.assertIn("did you mean 'causal'?", error.message)
        self.assertIn("params causal, softmax_scale, window_left, window_right, logits_soft_cap, "
                      "return_lse", error.message)
        self.assertIn("inputs q, k, v", error.message)
        # A name like none of them still lists them all.
        with self.assertRaisesRegex(kernelserve.ArgumentError,
                                    r"'zzz'; flash_attention takes inputs q, k, v; params causal"):
            calls.split_call(schema, (self.q,) * 3, {"zzz": 1})

    def test_split_call(self):
        inputs, params, run = calls.split_call(flash_attention_schema(), (self.q, self.q),
                                               {"v": self.q, "causal": True, "timeout": 3})
        self.assertEqual(list(inputs), ["q", "k", "v"])
        self.assertEqual((params, run), ({"causal": True}, {"timeout": 3}))
        with self.assertRaisesRegex(kernelserve.ArgumentError, "missing input.*: v"):
            calls.split_call(flash_attention_schema(), (self.q, self.q), {})
        with self.assertRaisesRegex(kernelserve.ArgumentError, "takes 3 positional inputs"):
            calls.split_call(flash_attention_schema(), (self.q,) * 4, {})

    def test_misspelt_config_field(self):
        # Before: protobuf's ValueError ('Protocol message KernelConfig has no "blok_size"').
        with self.assertRaises(kernelserve.ArgumentError) as raised:
            calls.kernel_config({"blok_size": 64})
        self.assertIn("'blok_size'", raised.exception.message)
        self.assertIn("did you mean 'block_size'?", raised.exception.message)
        self.assertIn("num_warps", raised.exception.message)
        with self.assertRaisesRegex(kernelserve.ArgumentError, "config: "):
            calls.kernel_config({"block_size": "big"})
        self.assertEqual(calls.kernel_config({"block_size": 64}).block_size, 64)

    def test_config_dict_named_fields(self):
        # Names other than the fixed fields go into `fields`; results flatten them back.
        proto = calls.kernel_config({"block_size": 64, "threads": 2, "platform": "cpu"})
        self.assertEqual((proto.block_size, proto.platform), (64, "cpu"))
        self.assertEqual(dict(proto.fields), {"threads": 2})
        config = results.config_dict(proto)
        self.assertEqual((config["block_size"], config["threads"]), (64, 2))
        self.assertNotIn("fields", config)
        self.assertNotIn("backend", config)
        self.assertEqual(dict(calls.kernel_config({"plan": 1 << 40}).fields), {"plan": 1 << 40})
        with self.assertRaisesRegex(kernelserve.ArgumentError, "'threads': expected an int"):
            calls.kernel_config({"threads": "2"})
        with self.assertRaisesRegex(kernelserve.ArgumentError, "'threads': expected an int"):
            calls.kernel_config({"threads": True})
        with self.assertRaisesRegex(kernelserve.ArgumentError, "'backend' is no longer"):
            calls.kernel_config({"backend": "wmma"})

    def test_dtype_and_param_type(self):
        with self.assertRaisesRegex(kernelserve.ArgumentError,
                                    "input 'x': dtype float64 is not sent"):
            calls.execute_request(kernelserve.Request("mean_pooling", {"x": np.zeros(3)}))
        with self.assertRaisesRegex(kernelserve.ArgumentError, "param 'causal': expected bool"):
            calls.param_value("causal", [True])
        self.assertEqual(calls.param_value("n", np.int32(3)).int64_value, 3)
        self.assertTrue(calls.param_value("b", np.bool_(True)).bool_value)

    def test_errors_pickle(self):
        for error in (kernelserve.KernelserveError(grpc.StatusCode.NOT_FOUND, "gone"),
                      kernelserve.ArgumentError("bad"), kernelserve.UnknownKernelError("none")):
            copy = pickle.loads(pickle.dumps(error))
            self.assertIs(type(copy), type(error))
            self.assertEqual((copy.code, copy.message, str(copy)),
                             (error.code, error.message, str(error)))


class TensorTest(unittest.TestCase):
    def roundtrip(self, array):
        message = pb.Tensor()
        tensors.to_proto(array, message, "x")
        return message, tensors.from_proto(message)

    def test_bfloat16_both_ways(self):
        values = np.array([[1.0, -2.5], [0.15625, 3e38]], dtype=np.float32)
        message, back = self.roundtrip(values.astype(kernelserve.bfloat16))
        self.assertEqual(message.dtype, pb.DTYPE_BF16)
        self.assertEqual(back.dtype, kernelserve.bfloat16)
        np.testing.assert_array_equal(back.astype(np.float32),
                                      values.astype(kernelserve.bfloat16).astype(np.float32))
        # uint16 arrays are bf16 bits; they come back as bfloat16 with the same bits.
        bits = kernelserve.to_bf16(values)
        message, back = self.roundtrip(bits)
        self.assertEqual(message.dtype, pb.DTYPE_BF16)
        np.testing.assert_array_equal(back.view(np.uint16), bits)

    def test_fp8_both_ways_keeping_every_code(self):
        import ml_dtypes
        self.assertIs(kernelserve.float8_e4m3fn, ml_dtypes.float8_e4m3fn)
        self.assertIs(kernelserve.float8_e5m2, ml_dtypes.float8_e5m2)
        codes = np.arange(256, dtype=np.uint8).reshape(4, 64)
        for dtype, wire, name in ((kernelserve.float8_e4m3fn, pb.DTYPE_F8_E4M3, "f8_e4m3"),
                                  (kernelserve.float8_e5m2, pb.DTYPE_F8_E5M2, "f8_e5m2")):
            message, back = self.roundtrip(codes.view(dtype))
            self.assertEqual(message.dtype, wire)
            self.assertEqual(list(message.shape), [4, 64])
            self.assertEqual(message.data, codes.tobytes())  # one byte an element
            self.assertEqual(back.dtype, np.dtype(dtype))
            np.testing.assert_array_equal(back.view(np.uint8), codes)
            self.assertEqual(tensors.numpy_dtype(wire), np.dtype(dtype))
            self.assertEqual(tensors.wire_dtype(dtype, "kv"), wire)
            self.assertEqual(tensors.DTYPE_NAMES[wire], name)
            # Values as ml_dtypes gives them: 1.0, -2.5 and 0.3 rounded (0.3125 in e4m3).
            values = np.array([1.0, -2.5, 0.3], dtype=np.float32).astype(dtype)
            _, back = self.roundtrip(values)
            np.testing.assert_array_equal(back.astype(np.float32), values.astype(np.float32))
            message = pb.Tensor()
            tensors.to_proto(kernelserve.TensorSpec((2, 8), dtype), message)
            self.assertEqual((message.dtype, list(message.shape), message.data),
                             (wire, [2, 8], b""))
        # uint8 is not fp8 bits: which fp8 would it be?
        with self.assertRaisesRegex(kernelserve.ArgumentError,
                                    "input 'x': dtype uint8 is not sent.*float8_e4m3fn"):
            self.roundtrip(codes)

    def test_other_dtypes(self):
        for dtype in (np.float32, np.float16, np.int32, np.int64, np.bool_):
            array = np.arange(6).reshape(2, 3).astype(dtype)
            _, back = self.roundtrip(array)
            self.assertEqual(back.dtype, np.dtype(dtype))
            np.testing.assert_array_equal(back, array)
        _, back = self.roundtrip(np.arange(4, dtype=">f4"))  # big-endian is converted
        np.testing.assert_array_equal(back, np.arange(4, dtype=np.float32))
        message = pb.Tensor()
        tensors.to_proto(kernelserve.TensorSpec((2, 5), kernelserve.bfloat16), message)
        self.assertEqual((message.dtype, list(message.shape), message.data),
                         (pb.DTYPE_BF16, [2, 5], b""))

    def test_bf16_helpers_round_to_nearest_even(self):
        values = np.array([1.0, 1.0 + 2**-8, 1.0 + 3 * 2**-8, -2.5, np.inf], dtype=np.float32)
        bits = kernelserve.to_bf16(values)
        self.assertEqual(bits.dtype, np.uint16)
        np.testing.assert_array_equal(bits, [0x3F80, 0x3F80, 0x3F82, 0xC020, 0x7F80])
        np.testing.assert_array_equal(kernelserve.from_bf16(bits),
                                      [1.0, 1.0, 1.0 + 2**-6, -2.5, np.inf])
        self.assertTrue(np.isnan(kernelserve.from_bf16(kernelserve.to_bf16([np.nan])))[0])


def psm_objects():
    """The names of the POSIX shared-memory objects Python made (multiprocessing's "psm_")."""
    return {n for n in os.listdir("/dev/shm") if n.startswith("psm_")}


@unittest.skipUnless(os.path.isdir("/dev/shm"), "no /dev/shm")
class SharedMemoryRegionTest(unittest.TestCase):
    """Regions without a server: views, references, the wire form of a call that uses them,
    and the life of the POSIX object (close, garbage, exit, a killed process)."""

    def setUp(self):
        self.region = kernelserve.SystemSharedMemory("r", 4096)  # created, not registered
        self.regions = shm.Regions()
        self.regions.add(self.region)

    def tearDown(self):
        self.region.close()
        self.assertNotIn(self.region.key[1:], psm_objects())

    def test_views_and_refs(self):
        region = self.region
        self.assertIn(region.key[1:], psm_objects())
        view = region.ndarray((4, 8), np.float16, offset=32)
        self.assertTrue(view.flags.writeable and view.flags.c_contiguous)
        view[...] = 2
        self.assertEqual(bytes(region.buffer[32:34]), np.float16(2).tobytes())
        ref = region.ref(view)
        self.assertEqual((ref.region, ref.offset, ref.shape, np.dtype(ref.dtype), ref.nbytes),
                         ("r", 32, (4, 8), np.dtype(np.float16), 64))
        self.assertEqual(region.offset_of(view[1:]), 48)
        self.assertIsNone(region.offset_of(view[:, :4]))  # not C-contiguous
        self.assertIsNone(region.offset_of(view.copy()))
        self.assertIsNone(region.offset_of(view[:0]))  # empty
        put = region.put(np.arange(3, dtype=np.int64), offset=4096 - 24)
        np.testing.assert_array_equal(put, [0, 1, 2])
        for shape, offset in (((1025,), 0), ((1,), 4093), ((-1,), 0)):
            with self.assertRaisesRegex(ValueError, "do not fit"):
                region.ndarray(shape, np.float32, offset)
        self.assertEqual(self.regions.locate(put), region.ref(put))
        self.assertIsNone(self.regions.locate(np.zeros(3)))

    def test_wire_form(self):
        x = self.region.put(np.ones((2, 3, 4), np.float32), offset=64)
        mask = np.ones((2, 3), bool)
        out = self.region.ndarray((2, 4), offset=1024)
        call = kernelserve.Request("mean_pooling", {"x": x, "mask": mask},
                                   outputs={"out": out})
        request = calls.execute_request(call, regions=self.regions)
        tensor = request.inputs["x"]
        self.assertEqual((tensor.dtype, list(tensor.shape), tensor.data), (pb.DTYPE_F32,
                                                                           [2, 3, 4], b""))
        self.assertEqual((tensor.ref.region, tensor.ref.offset, tensor.ref.byte_size),
                         ("r", 64, 96))
        self.assertFalse(request.inputs["mask"].HasField("ref"))  # inline
        self.assertEqual(request.inputs["mask"].data, mask.tobytes())
        place = request.output_regions["out"]
        self.assertEqual((place.region, place.offset, place.byte_size), ("r", 1024, 32))
        # Without the client's regions the same view is only an array: inline.
        self.assertEqual(calls.execute_request(kernelserve.Request("mean_pooling", {"x": x}))
                         .inputs["x"].data, np.ones(24, np.float32).tobytes())
        # bf16 by its bits, and a RegionTensor made by hand.
        bits = self.region.ndarray(6, np.uint16, offset=2048)
        hand = kernelserve.RegionTensor("other", 16, (2, 2), kernelserve.bfloat16)
        request = calls.execute_request(kernelserve.Request("k", {"a": bits, "b": hand}),
                                        regions=self.regions)
        self.assertEqual((request.inputs["a"].dtype, request.inputs["a"].ref.byte_size),
                         (pb.DTYPE_BF16, 12))
        self.assertEqual((request.inputs["b"].ref.region, request.inputs["b"].ref.offset,
                          request.inputs["b"].ref.byte_size), ("other", 16, 8))
        with self.assertRaisesRegex(kernelserve.ArgumentError, "input 'a': dtype float64"):
            calls.execute_request(kernelserve.Request("k", {"a": self.region.ndarray(2, float)}),
                                  regions=self.regions)

    def test_results_are_the_views(self):
        out = self.region.ndarray((2, 4), offset=1024)
        places = calls.output_places({"out": out, "lse": self.region.ref(
            self.region.ndarray(16, np.float32, offset=2048))}, self.regions)
        response = pb.ExecuteResponse()
        response.outputs["out"].dtype = pb.DTYPE_F32
        response.outputs["out"].shape[:] = [2, 4]
        response.outputs["lse"].dtype = pb.DTYPE_F32
        response.outputs["lse"].shape[:] = [2, 2]
        self.region.ndarray(4, np.float32, offset=2048)[...] = [1, 2, 3, 4]
        result = results.result_of(response, places)
        self.assertIs(result.out, out)
        np.testing.assert_array_equal(result.lse, [[1, 2], [3, 4]])
        self.assertTrue(result.lse.flags.writeable)
        # An output bigger than its place: the server does not do that; INTERNAL.
        response.outputs["out"].shape[:] = [2, 1000]
        with self.assertRaises(kernelserve.KernelserveError) as raised:
            results.result_of(response, places)
        self.assertEqual(raised.exception.code, grpc.StatusCode.INTERNAL)

    def test_close_garbage_and_exit_unlink_it(self):
        view = self.region.ndarray(8)
        key = self.region.key[1:]
        self.region.close()
        self.assertNotIn(key, psm_objects())
        view[...] = 1  # the mapping lives on with its views
        self.assertTrue(self.region.closed)
        dropped = kernelserve.SystemSharedMemory("dropped", 4096)
        key = dropped.key[1:]
        self.assertIn(key, psm_objects())
        del dropped  # garbage: unlinked without a warning
        self.assertNotIn(key, psm_objects())
        # A process that exits with its region open: unlinked, and the resource_tracker has
        # nothing to say (it says "leaked shared_memory objects" when it has to clean up).
        code = ("import sys, kernelserve; r = kernelserve.SystemSharedMemory('x', 4096); "
                "v = r.ndarray(4); print(r.key[1:]); sys.stdout.flush()")
        done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                              timeout=60)
        self.assertEqual((done.returncode, done.stderr), (0, ""))
        self.assertNotIn(done.stdout.strip(), psm_objects())

    def test_a_killed_process_leaves_nothing(self):
        """The resource_tracker knows of the object while it is linked: it removes it when the
        process dies without a chance to."""
        code = ("import os, signal, sys, kernelserve; r = kernelserve.SystemSharedMemory('x', "
                "4096); print(r.key[1:]); sys.stdout.flush(); os.kill(os.getpid(), "
                "signal.SIGKILL)")
        done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                              timeout=60)
        key = done.stdout.strip()
        self.assertTrue(key.startswith("psm_"), done.stdout + done.stderr)
        deadline = time.monotonic() + 10
        while key in psm_objects() and time.monotonic() < deadline:
            time.sleep(0.05)
        self.assertNotIn(key, psm_objects())


class FakeCudaArray:
    """A GPU array as __cuda_array_interface__ shows one, at a made-up device address."""

    def __init__(self, address, shape, typestr="<f4", strides=None):
        self.__cuda_array_interface__ = {"version": 3, "shape": shape, "typestr": typestr,
                                         "data": (address, False), "strides": strides}


class FakeDLPack:
    """A NumPy array shown as DLPack on CUDA device 1: the capsule is NumPy's own."""

    def __init__(self, array):
        self.array = array

    def __dlpack_device__(self):
        return (2, 1)

    def __dlpack__(self, **kwargs):
        return self.array.__dlpack__()


BASE = 0x7F0000000000  # the allocation the fake exporter gives


class CudaSharedMemoryTest(unittest.TestCase):
    """CUDA regions without a GPU: tensors described from their interfaces, the handle, base
    and offsets from a fake export, the wire form, results, close."""

    def setUp(self):
        self.exported = []

        def export(address):
            self.exported.append(address)
            return cuda.Allocation(bytes(range(64)), BASE, 1 << 20, 2)

        patcher = mock.patch.object(cuda, "export", export)
        patcher.start()
        self.addCleanup(patcher.stop)
        self.region = kernelserve.CudaSharedMemory("gpu", FakeCudaArray(BASE + 512, (1024,),
                                                                        "|u1"))
        self.regions = shm.Regions()
        self.regions.add(self.region)

    def test_region_from_an_export(self):
        region = self.region
        self.assertEqual(self.exported, [BASE + 512])  # any dtype may be registered
        self.assertEqual((region.name, region.handle, region.base, region.byte_size,
                          region.device, region.local_device), ("gpu", bytes(range(64)), BASE,
                                                                1 << 20, 2, 2))
        x = FakeCudaArray(BASE + 4096, (2, 3, 4), "<f2")
        ref = region.ref(x)
        self.assertEqual((ref.region, ref.offset, ref.shape, np.dtype(ref.dtype), ref.nbytes,
                          ref.device), ("gpu", 4096, (2, 3, 4), np.dtype(np.float16), 48, 2))
        self.assertEqual(self.regions.locate(x, "input 'x'"), ref)
        self.assertEqual(region.offset_of(x), 4096)
        self.assertIsNone(region.offset_of(np.zeros(3)))
        self.assertIsNone(region.offset_of(FakeCudaArray(BASE + (1 << 20) - 4, (2,))))  # past it
        with self.assertRaisesRegex(kernelserve.ArgumentError, "does not lie in"):
            region.ref(FakeCudaArray(BASE - 16, (2,)))
        other = kernelserve.CudaSharedMemory("other", FakeCudaArray(BASE, (4,)), device=0)
        self.assertEqual((other.device, other.local_device), (0, 2))  # the server's ordinal

    def test_describe(self):
        self.assertEqual(cuda.describe(FakeCudaArray(BASE, (2, 3), "<i8")),
                         cuda.CudaTensor(BASE, (2, 3), np.dtype(np.int64)))
        self.assertEqual(cuda.describe(FakeCudaArray(BASE, (2, 1, 3), "|b1",
                                                     strides=(3, 99, 1))).dtype, bool)
        array = np.arange(12, dtype=np.float32).reshape(3, 4)
        described = cuda.describe(FakeDLPack(array[1:]))
        self.assertEqual((described.address, described.shape, described.dtype, described.device),
                         (array[1:].ctypes.data, (2, 4), np.dtype(np.float32), 1))
        bad = [(FakeCudaArray(BASE, (4, 4), strides=(4, 16)), "not C-contiguous"),
               (FakeDLPack(array[:, 1:]), "not C-contiguous"),
               (FakeCudaArray(BASE, (4,), "<f8"), "dtype <f8 is not sent"),
               (FakeCudaArray(BASE, (4,), "<V2"), "torch bfloat16"),
               (FakeCudaArray(BASE, (0, 4)), "empty"),
               (np.zeros(3, np.float32), "not CUDA"),
               (object(), "expected a CUDA tensor")]
        for obj, message in bad:
            with self.assertRaisesRegex(kernelserve.ArgumentError, message):
                cuda.describe(obj)
        with self.assertRaisesRegex(kernelserve.ArgumentError, "expected a CUDA tensor"):
            kernelserve.CudaSharedMemory("x", [1.0])
        with self.assertRaisesRegex(kernelserve.ArgumentError, "GPU ordinal"):
            kernelserve.CudaSharedMemory("x", FakeCudaArray(BASE, (4,)), device=-1)

    def test_wire_form_and_results(self):
        x = FakeCudaArray(BASE + 4096, (2, 3, 4))
        out = FakeCudaArray(BASE + 8192, (2, 4))
        mask = np.ones((2, 3), bool)
        call = kernelserve.Request("mean_pooling", {"x": x, "mask": mask}, outputs={"out": out})
        request = calls.execute_request(call, regions=self.regions)
        tensor = request.inputs["x"]
        self.assertEqual((tensor.dtype, list(tensor.shape), tensor.data, tensor.ref.region,
                          tensor.ref.offset, tensor.ref.byte_size),
                         (pb.DTYPE_F32, [2, 3, 4], b"", "gpu", 4096, 96))
        self.assertEqual(request.inputs["mask"].data, mask.tobytes())
        place = request.output_regions["out"]
        self.assertEqual((place.region, place.offset, place.byte_size), ("gpu", 8192, 32))
        # Outputs come back as the tensor given, or a RegionTensor; no bytes.
        places = calls.output_places({"out": out, "lse": self.region.ref(
            FakeCudaArray(BASE + 16384, (4, 4)))}, self.regions)
        response = pb.ExecuteResponse()
        response.outputs["out"].dtype = pb.DTYPE_F32
        response.outputs["out"].shape[:] = [2, 4]
        response.outputs["lse"].dtype = pb.DTYPE_F32
        response.outputs["lse"].shape[:] = [2, 2]
        result = results.result_of(response, places)
        self.assertIs(result.out, out)
        self.assertEqual(result.lse, kernelserve.RegionTensor("gpu", 16384, (2, 2), np.float32,
                                                              device=2))
        # A RegionTensor by hand: this client's region (its device found), or any CUDA one.
        hand = calls.output_places({"out": kernelserve.RegionTensor("gpu", 0, (2,))},
                                   self.regions)["out"]
        self.assertEqual(hand.ref.device, 2)
        calls.output_places({"out": kernelserve.RegionTensor("elsewhere", 0, (2,), device=0)},
                            self.regions)
        # A CUDA tensor outside every region, or one not C-contiguous, is refused here.
        stray = FakeCudaArray(BASE + (4 << 20), (2, 3, 4))
        for inputs, outputs, message in (
                ({"x": stray}, None, "input 'x': a CUDA tensor .* outside every CUDA region"),
                ({"x": x}, {"out": stray}, "output 'out': a CUDA tensor .* outside"),
                ({"x": FakeCudaArray(BASE, (4, 4), strides=(4, 16))}, None,
                 "input 'x': the CUDA tensor is not C-contiguous")):
            with self.assertRaisesRegex(kernelserve.ArgumentError, message):
                calls.execute_request(kernelserve.Request("k", inputs, outputs=outputs),
                                      regions=self.regions)
        with self.assertRaisesRegex(kernelserve.ArgumentError, "register_cuda_shm"):
            calls.batch_request("k", [{"x": x}], None, None, "", (), None, "")

    def test_close_unregisters_once_and_frees_nothing(self):
        names = []
        self.region._unregister = names.append
        held = self.region.tensor
        with self.region as region:
            self.assertIs(region, self.region)
        self.assertEqual(names, ["gpu"])
        self.assertTrue(self.region.closed)
        self.assertIsNone(self.region.tensor)
        self.assertEqual(list(self.regions), [])  # its views go inline from now on: refused
        self.region.close()
        self.assertEqual(names, ["gpu"])
        self.assertIsNotNone(held)
        with self.assertRaisesRegex(kernelserve.ArgumentError, "closed"):
            self.region.ref(FakeCudaArray(BASE, (4,)))

    def test_async_region(self):
        async def unregister(name):
            names.append(name)

        names = []
        region = kernelserve.AsyncCudaSharedMemory("a", FakeCudaArray(BASE, (4,)))
        region._unregister = unregister

        async def run():
            async with region:
                pass

        asyncio.run(run())
        self.assertEqual((names, region.closed), (["a"], True))

    def test_no_driver_is_failed_precondition(self):
        with mock.patch.object(cuda.ctypes, "CDLL", side_effect=OSError("no libcuda.so.1")):
            cuda._driver.cache_clear()
            try:
                with self.assertRaises(kernelserve.KernelserveError) as raised:
                    cuda._driver()
            finally:
                cuda._driver.cache_clear()
        self.assertEqual(raised.exception.code, grpc.StatusCode.FAILED_PRECONDITION)
        self.assertIn("libcuda.so.1", raised.exception.message)


def health_messages():
    """HealthCheckRequest and HealthCheckResponse of the repository's
    proto/grpc/health/v1/health.proto (the one the server serves), through protoc (Debian's
    protobuf-compiler) and a descriptor pool of their own."""
    protoc = shutil.which("protoc")
    if protoc is None:
        raise RuntimeError("protoc (Debian's protobuf-compiler) is needed")
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "health.desc"
        subprocess.run([protoc, f"--proto_path={SOURCE / 'proto'}", f"--descriptor_set_out={out}",
                        "grpc/health/v1/health.proto"], check=True)
        files = descriptor_pb2.FileDescriptorSet.FromString(out.read_bytes())
    pool = descriptor_pool.DescriptorPool()
    for file in files.file:
        pool.Add(file)
    return [message_factory.GetMessageClass(pool.FindMessageTypeByName(f"grpc.health.v1.{name}"))
            for name in ("HealthCheckRequest", "HealthCheckResponse")]


class HealthServicer:
    """grpc.health.v1 Health/Check of the services in `statuses`; NOT_FOUND for others."""

    def __init__(self):
        self.request, self.response = health_messages()
        self.statuses = {}

    def check(self, request, context):
        if request.service not in self.statuses:
            context.abort(grpc.StatusCode.NOT_FOUND, f"unknown service {request.service!r}")
        return self.response(status=self.statuses[request.service])

    def handler(self):
        return grpc.method_handlers_generic_handler("grpc.health.v1.Health", {
            "Check": grpc.unary_unary_rpc_method_handler(
                self.check, request_deserializer=self.request.FromString,
                response_serializer=self.response.SerializeToString)})


class HealthTest(unittest.TestCase):
    """health() against a servicer of the server's health.proto, and the messages the package
    encodes by hand against that proto's."""

    SERVICE = "kernelserve.v1.KernelService"

    @classmethod
    def setUpClass(cls):
        cls.servicer = HealthServicer()
        cls.server = grpc.server(futures.ThreadPoolExecutor(max_workers=2),
                                 handlers=[cls.servicer.handler()])
        cls.target = f"127.0.0.1:{cls.server.add_insecure_port('127.0.0.1:0')}"
        cls.server.start()

    @classmethod
    def tearDownClass(cls):
        cls.server.stop(None)

    def test_statuses(self):
        status = self.servicer.response
        with kernelserve.Client(self.target, timeout=5.0) as client:
            for value, name in ((status.SERVING, "SERVING"), (status.NOT_SERVING, "NOT_SERVING"),
                                (status.SERVICE_UNKNOWN, "SERVICE_UNKNOWN")):
                self.servicer.statuses[self.SERVICE] = value
                self.assertEqual(client.health(self.SERVICE), name)
            with self.assertRaises(kernelserve.KernelserveError) as raised:
                client.health("no.such.Service")
            self.assertEqual(raised.exception.code, grpc.StatusCode.NOT_FOUND)

    def test_async(self):
        self.servicer.statuses[self.SERVICE] = self.servicer.response.NOT_SERVING

        async def check():
            async with kernelserve.aio.Client(self.target, timeout=5.0) as client:
                return await client.health(self.SERVICE)

        self.assertEqual(asyncio.run(check()), "NOT_SERVING")

    def test_messages_as_protobuf_writes_them(self):
        request, response_class = self.servicer.request, self.servicer.response
        for service in ("", "kernelserve.v1.KernelService", "é" * 200):
            self.assertEqual(health_wire.encode_request(service),
                             request(service=service).SerializeToString())
        response = response_class(status=response_class.SERVING)
        unknown_field = b"\x12\x03abc"  # field 2, bytes: skipped
        self.assertEqual(health_wire.decode_status(response.SerializeToString() + unknown_field),
                         1)
        self.assertEqual(health_wire.decode_status(b""), 0)  # UNKNOWN
        self.assertEqual(health_wire.status_name(7), "UNKNOWN")  # a status added later
        for malformed in (b"\x08", b"\x12\x05ab", b"\x0f"):
            with self.assertRaises(ValueError):
                health_wire.decode_status(malformed)

    def test_no_server_is_unavailable(self):
        target = f"127.0.0.1:{free_port()}"
        with kernelserve.Client(target, timeout=2.0) as client:
            with self.assertRaises(kernelserve.KernelserveError) as raised:
                client.health()
            self.assertEqual(raised.exception.code, grpc.StatusCode.UNAVAILABLE)
            # The message says that no server answers there and how to start one.
            self.assertIn(f"no kernelserve server answers at {target}",
                          raised.exception.message)
            self.assertIn(f"`make run` in a kernelserve checkout or `kernelserve-server --listen "
                          f"{target}`", raised.exception.message)
            with self.assertRaises(kernelserve.KernelserveError) as raised:
                client.info()
            self.assertIn(f"no kernelserve server answers at {target}", str(raised.exception))

        async def info():
            async with kernelserve.aio.Client(target, timeout=2.0) as aclient:
                await aclient.info()

        with self.assertRaises(kernelserve.KernelserveError) as raised:
            asyncio.run(info())
        self.assertEqual(raised.exception.code, grpc.StatusCode.UNAVAILABLE)
        self.assertIn(f"no kernelserve server answers at {target}", raised.exception.message)


class DeadlineTest(unittest.TestCase):
    """A server that answers too late: DEADLINE_EXCEEDED names the deadline that ran out."""

    @classmethod
    def setUpClass(cls):
        def slow_info(request, context):
            time.sleep(3)
            return pb.ServerInfo()

        handler = grpc.method_handlers_generic_handler("kernelserve.v1.KernelService", {
            "GetServerInfo": grpc.unary_unary_rpc_method_handler(
                slow_info, request_deserializer=pb.GetServerInfoRequest.FromString,
                response_serializer=pb.ServerInfo.SerializeToString)})
        cls.server = grpc.server(futures.ThreadPoolExecutor(max_workers=4), handlers=[handler])
        cls.target = f"127.0.0.1:{cls.server.add_insecure_port('127.0.0.1:0')}"
        cls.server.start()

    @classmethod
    def tearDownClass(cls):
        cls.server.stop(None)

    def test_the_client_deadline_is_named(self):
        with kernelserve.Client(self.target, timeout=0.25) as client:
            with self.assertRaises(kernelserve.KernelserveError) as raised:
                client.info()
        self.assertEqual(raised.exception.code, grpc.StatusCode.DEADLINE_EXCEEDED)
        self.assertIn("the deadline was 0.25 s: timeout= of the call or of the Client sets it",
                      raised.exception.message)
        self.assertNotIn("no kernelserve server answers", raised.exception.message)

    def test_async(self):
        async def info():
            async with kernelserve.aio.Client(self.target, timeout=0.5) as client:
                await client.info()

        with self.assertRaises(kernelserve.KernelserveError) as raised:
            asyncio.run(info())
        self.assertEqual(raised.exception.code, grpc.StatusCode.DEADLINE_EXCEEDED)
        self.assertIn("the deadline was 0.5 s", raised.exception.message)


def resident_info(name="w", dtype=np.float32, shape=(4, 3), device=-1):
    return resident.ResidentTensorInfo(name=name, dtype=np.dtype(dtype), shape=shape,
                                       device=device, byte_size=48, owner="anonymous",
                                       created_unix_ms=1, last_used_unix_ms=2, calls=0,
                                       ttl_seconds=600)


class RecordingClient:
    """Stands for a client behind a ResidentTensor: records its calls, answers as told."""

    def __init__(self, error=None):
        self.calls = []
        self.error = error

    def _record(self, *call):
        self.calls.append(call)
        if self.error is not None:
            raise self.error

    def write_tensor(self, name, array, *, row=0, byte_offset=None):
        self._record("write", name, np.asarray(array).shape, row, byte_offset)
        return resident_info(name)

    def read_tensor(self, name, rows=None):
        self._record("read", name, rows)
        return np.zeros((1, 3), np.float32)

    def delete_tensor(self, name):
        self._record("delete", name)
        return 1


class ResidentTensorTest(unittest.TestCase):
    """Resident tensors without a server: the requests that create, write and read them, their
    wire form as inputs and outputs of a call, and the handle's own logic."""

    def test_create_request(self):
        w = np.arange(12, dtype=np.float32).reshape(4, 3)
        request = resident.create_request("w", w, None, None, 0, 90.5)
        self.assertEqual((request.name, request.dtype, list(request.shape), request.device,
                          request.ttl_seconds), ("w", pb.DTYPE_F32, [4, 3], 0, 91))
        self.assertEqual(request.contents.data, w.tobytes())
        self.assertEqual(list(request.contents.shape), [4, 3])
        # dtype converts the array; shape must be its own.
        request = resident.create_request("w", [[1.0, 2.0]], kernelserve.bfloat16, None, None,
                                          None)
        self.assertEqual((request.dtype, list(request.shape)), (pb.DTYPE_BF16, [1, 2]))
        self.assertFalse(request.HasField("device"))
        self.assertEqual(request.ttl_seconds, 0)
        with self.assertRaisesRegex(kernelserve.ArgumentError, r"shape \(3, 4\) is not the "
                                                               r"array's \(4, 3\)"):
            resident.create_request("w", w, None, (3, 4), None, None)
        # Zeros: shape and dtype only, no contents.
        request = resident.create_request("z", None, np.int32, (2, 0, 5), -1, None)
        self.assertEqual((request.dtype, list(request.shape), request.device),
                         (pb.DTYPE_I32, [2, 0, 5], -1))
        self.assertFalse(request.HasField("contents"))
        self.assertEqual(resident.create_request("z", None, None, (3,), None, None).dtype,
                         pb.DTYPE_F32)
        for args, message in (((None, None, None, None, None), "give an array, or a shape"),
                              ((w, None, None, None, -1), "ttl must be seconds >= 0"),
                              ((w.astype(np.float64), None, None, None, None),
                               "dtype float64 is not sent")):
            with self.assertRaisesRegex(kernelserve.ArgumentError, message):
                resident.create_request("w", *args)
        with self.assertRaisesRegex(kernelserve.ArgumentError, "name must be a non-empty str"):
            resident.create_request("", w, None, None, None, None)

    def test_write_and_read_requests(self):
        rows = np.ones((2, 3), np.float16)
        request = resident.write_request("w", rows, row=2)
        self.assertEqual((request.row_offset, request.HasField("byte_offset")), (2, False))
        self.assertEqual((request.contents.dtype, list(request.contents.shape)),
                         (pb.DTYPE_F16, [2, 3]))
        self.assertEqual(request.contents.data, rows.tobytes())
        # At a byte offset the shape is left out: the bytes go whatever the tensor's shape.
        request = resident.write_request("w", rows, byte_offset=6)
        self.assertEqual((request.byte_offset, request.row_offset, list(request.contents.shape)),
                         (6, 0, []))
        for kwargs in ({"row": 1, "byte_offset": 0}, {"row": -1}, {"byte_offset": -2}):
            with self.assertRaises(kernelserve.ArgumentError):
                resident.write_request("w", rows, **kwargs)
        self.assertFalse(resident.read_request("w").HasField("rows"))
        for rows, (offset, count) in ((slice(2, 5), (2, 3)), ((1, 1), (1, 0)),
                                      (slice(None, 4), (0, 4))):
            request = resident.read_request("w", rows)
            self.assertEqual((request.row_offset, request.rows), (offset, count))
        request = resident.read_request("w", slice(3, None))
        self.assertEqual((request.row_offset, request.HasField("rows")), (3, False))
        for rows in (slice(5, 2), slice(0, 4, 2), (-1, 2), 3, (1, 2, 3)):
            with self.assertRaises(kernelserve.ArgumentError, msg=repr(rows)):
                resident.read_request("w", rows)

    def test_wire_form_in_a_call(self):
        weights = resident.ResidentTensorBase(None, resident_info("weights"))
        out = resident.ResidentTensorBase(None, resident_info("pooled", shape=(2, 4)))
        x = np.ones((2, 3, 4), np.float32)
        call = kernelserve.Request("mean_pooling", {"x": x, "w": weights}, outputs={"out": out})
        request = calls.execute_request(call)
        sent = request.inputs["w"]
        # The name alone: no dtype, shape, bytes or region.
        self.assertEqual((sent.ref.tensor, sent.dtype, list(sent.shape), sent.data,
                          sent.ref.region), ("weights", pb.DTYPE_UNSPECIFIED, [], b"", ""))
        self.assertEqual(request.inputs["x"].data, x.tobytes())
        self.assertEqual((request.output_regions["out"].tensor,
                          request.output_regions["out"].region), ("pooled", ""))
        # The result's output is the resident tensor itself.
        places = calls.output_places({"out": out}, None)
        response = pb.ExecuteResponse()
        response.outputs["out"].dtype = pb.DTYPE_F32
        response.outputs["out"].shape[:] = [2, 4]
        response.outputs["lse"].dtype = pb.DTYPE_F32
        response.outputs["lse"].shape[:] = [2]
        response.outputs["lse"].data = np.ones(2, np.float32).tobytes()
        result = results.result_of(response, places)
        self.assertIs(result.out, out)
        np.testing.assert_array_equal(result.lse, [1, 1])
        # Batches take data only.
        with self.assertRaisesRegex(kernelserve.ArgumentError,
                                    "input 'w': a resident tensor is taken by execute"):
            calls.batch_request("k", [{"w": weights}], None, None, "", (), None, "")

    @unittest.skipUnless(os.path.isdir("/dev/shm"), "no /dev/shm")
    def test_contents_in_shared_memory_go_as_a_reference(self):
        with kernelserve.SystemSharedMemory("r", 4096) as region:
            regions = shm.Regions()
            regions.add(region)
            view = region.put(np.ones((4, 3), np.float32), offset=64)
            request = resident.create_request("w", view, None, None, None, None, regions)
            ref = request.contents.ref
            self.assertEqual((ref.region, ref.offset, ref.byte_size, request.contents.data),
                             ("r", 64, 48, b""))
            self.assertEqual((request.dtype, list(request.shape)), (pb.DTYPE_F32, [4, 3]))
            request = resident.write_request("w", view[1:], byte_offset=12, regions=regions)
            self.assertEqual((request.contents.ref.offset, list(request.contents.shape)),
                             (76, []))

    def test_handle_writes_one_row_reads_and_deletes_once(self):
        client = RecordingClient()
        w = kernelserve.ResidentTensor(client, resident_info("w", shape=(4, 3)))
        self.assertEqual((w.name, w.shape, w.dtype, w.device, w.nbytes),
                         ("w", (4, 3), np.dtype(np.float32), -1, 48))
        w.write(np.ones(3, np.float32), row=2)  # one row, without its leading 1
        w.write(np.ones((2, 3), np.float32))
        w.write(np.ones(3, np.float32), byte_offset=4)  # bytes: as given
        w.read(slice(0, 1))
        with w:
            pass
        w.delete()  # once only
        self.assertTrue(w.deleted)
        self.assertEqual(client.calls, [("write", "w", (1, 3), 2, None),
                                        ("write", "w", (2, 3), 0, None),
                                        ("write", "w", (3,), 0, 4),
                                        ("read", "w", slice(0, 1)), ("delete", "w")])
        self.assertIn("deleted", repr(w))

    def test_with_block_ignores_a_tensor_gone_already_but_not_other_errors(self):
        gone = RecordingClient(kernelserve.KernelserveError(grpc.StatusCode.NOT_FOUND, "gone"))
        with kernelserve.ResidentTensor(gone, resident_info()) as w:
            pass
        self.assertTrue(w.deleted)
        busy = RecordingClient(kernelserve.KernelserveError(grpc.StatusCode.FAILED_PRECONDITION,
                                                            "held by 1 call"))
        with self.assertRaises(kernelserve.KernelserveError) as raised:
            with kernelserve.ResidentTensor(busy, resident_info()):
                pass
        self.assertEqual(raised.exception.code, grpc.StatusCode.FAILED_PRECONDITION)

    def test_async_handle(self):
        class AsyncClient:
            def __init__(self):
                self.deleted = []

            async def delete_tensor(self, name):
                self.deleted.append(name)
                return 1

        client = AsyncClient()

        async def use():
            async with kernelserve.AsyncResidentTensor(client, resident_info("a")) as t:
                self.assertEqual(t.name, "a")
            await t.delete()

        asyncio.run(use())
        self.assertEqual(client.deleted, ["a"])

    def test_pieces(self):
        self.assertEqual(resident.split(10, 4, 1), [(0, 4), (4, 4), (8, 2)])
        self.assertEqual(resident.split(12, 10, 4), [(0, 8), (8, 4)])
        self.assertEqual(resident.split(8, 3, 4), [(0, 4), (4, 4)])
        self.assertEqual(resident.piece_bytes(1 << 30, 65536), 65536 - (8 << 10))
        self.assertEqual(resident.piece_bytes(1 << 20, 0), (1 << 20) - (8 << 10))
        write = resident.write_request("w", np.arange(6, dtype=np.float32).reshape(3, 2), row=1)
        pieces = resident.write_pieces(write, 8, 10)  # 10 bytes: two f32 a piece
        self.assertEqual([(p.byte_offset, len(p.contents.data)) for p in pieces],
                         [(8, 8), (16, 8), (24, 8)])
        self.assertEqual(b"".join(p.contents.data for p in pieces), write.contents.data)
        self.assertTrue(all(p.contents.dtype == pb.DTYPE_F32 for p in pieces))
        info = resident_info("w", shape=(4, 2))  # 32 bytes, rows of 8
        info = dataclasses.replace(info, byte_size=32)
        self.assertEqual(resident.write_start(info, write), 8)
        for bad, message in ((resident.write_request("w", np.zeros((4, 2), np.float32), row=1),
                              "do not fit"),
                             (resident.write_request("w", np.zeros(3, np.float32)),
                              "whole rows of 8"),
                             (resident.write_request("w", np.zeros((1, 2), np.float16)),
                              "contents are f16; the tensor is f32")):
            with self.assertRaisesRegex(kernelserve.ArgumentError, message):
                resident.write_start(info, bad)
        reads = resident.read_pieces(info, resident.read_request("w", (1, 4)), 16)
        self.assertEqual([(r.row_offset, r.rows) for r in reads], [(1, 2), (3, 1)])
        self.assertIsNone(resident.read_pieces(info, resident.read_request("w"), 32))
        self.assertIsNone(resident.read_pieces(info, resident.read_request("w", (3, 9)), 8))

    def test_listing(self):
        response = pb.ListTensorsResponse(server_started_unix_ms=5, resident_bytes=96,
                                          max_resident_bytes=1 << 20, quota_bytes=0,
                                          owner_bytes=48)
        t = response.tensors.add(name="w", dtype=pb.DTYPE_BF16, shape=[4, 3], device=-1,
                                 byte_size=24, owner="anonymous", calls=1, ttl_seconds=60)
        listed = resident.list_of(response)
        self.assertEqual(listed.names(), ["w"])
        self.assertEqual(len(listed), 1)
        self.assertEqual(listed[0].dtype, np.dtype(kernelserve.bfloat16))
        self.assertEqual(listed[0].shape, (4, 3))
        self.assertEqual((listed.server_started_unix_ms, listed.owner_bytes), (5, 48))
        self.assertEqual([i.name for i in listed], ["w"])
        t.dtype = 99
        with self.assertRaises(kernelserve.KernelserveError):
            resident.list_of(response)


def git_status(path):
    """`git status` of `path` (untracked files listed one by one), or None without git."""
    if shutil.which("git") is None:
        return None
    result = subprocess.run(["git", "-C", str(path), "status", "--porcelain",
                             "--untracked-files=all", "."], capture_output=True, text=True)
    return result.stdout if result.returncode == 0 else None


class BuildTest(unittest.TestCase):
    """python -m build on client/python: an sdist, then a wheel built from that sdist alone."""

    def test_sdist_and_wheel(self):
        before = git_status(PACKAGE_SOURCE)
        with tempfile.TemporaryDirectory() as out:
            built = subprocess.run([sys.executable, "-m", "build", "--outdir", out,
                                    str(PACKAGE_SOURCE)], capture_output=True, text=True)
            self.assertEqual(built.returncode, 0, built.stdout + built.stderr)
            [sdist] = Path(out).glob("kernelserve-*.tar.gz")
            [wheel] = Path(out).glob("kernelserve-*.whl")
            with tarfile.open(sdist) as archive:
                names = [n.split("/", 1)[1] for n in archive.getnames() if "/" in n]
            with zipfile.ZipFile(wheel) as archive:
                wheel_names = archive.namelist()

        # The sdist: the package's sources and the .proto files alone, no stubs.
        self.assertIn("proto/kernelserve/v1/kernel_service.proto", names)
        self.assertEqual([n for n in names if n.startswith("proto/") and "." in n.rsplit("/")[-1]
                          and not n.endswith(".proto")], [])
        self.assertEqual([n for n in names if "_pb2" in n], [])
        for name in ["pyproject.toml", "setup.py", "kernelserve/py.typed"] + [
                f"kernelserve/{m}" for m in MODULES + TYPE_STUBS]:
            self.assertIn(name, names)
        # The extension's one source file (nanobind's come from the build requirement).
        self.assertEqual([n for n in names if n.endswith((".cc", ".h", ".txt", ".cmake"))
                          and "egg-info" not in n], ["kernelserve/_native.cc"])

        # The wheel: the package, its stubs (generated in the build), py.typed, the extension
        # built from the sdist; nothing else.
        package = sorted(n for n in wheel_names if ".dist-info/" not in n)
        native = [n for n in package if n.startswith("kernelserve/_native.") and n.endswith(".so")]
        self.assertEqual(len(native), 1, package)
        expected = sorted([f"kernelserve/{m}" for m in MODULES + TYPE_STUBS + ["py.typed"]] +
                          native +
                          ["kernelserve/v1/__init__.py"] + [f"kernelserve/v1/{s}" for s in STUBS])
        self.assertEqual(package, expected)

        # Nothing new in the source tree that git would see (build/ and *.egg-info are ignored).
        if before is not None:
            self.assertEqual(git_status(PACKAGE_SOURCE), before)


if __name__ == "__main__":
    unittest.main()
