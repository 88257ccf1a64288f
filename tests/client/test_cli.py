"""The kernelserve CLI against a real kernelserve-server process (see server_fixture.py)."""

import json
import os
import pty
import re
import shutil
import subprocess
import tempfile
import time
import unittest

import grpc
import numpy as np

import kernelserve
import references
from kernelserve.v1 import kernel_service_pb2 as pb
from kernelserve.v1 import kernel_service_pb2_grpc as rpc
from server_fixture import CLI, TOY_SERVER, ServerProcess, free_port

USAGE, INVALID_ARGUMENT, DEADLINE_EXCEEDED, NOT_FOUND = 2, 3, 4, 5
ALREADY_EXISTS, RESOURCE_EXHAUSTED = 6, 8
UNIMPLEMENTED, UNAVAILABLE, UNAUTHENTICATED = 12, 14, 16


def uniform(rng, shape, dtype=np.float32):
    return rng.uniform(-1.0, 1.0, size=shape).astype(dtype)


class CliTestBase(unittest.TestCase):
    server_args = ()
    server_binary = None  # None: kernelserve-server

    @classmethod
    def setUpClass(cls):
        cls.server = ServerProcess(*cls.server_args, binary=cls.server_binary)
        cls.dir = tempfile.mkdtemp(prefix="kernelserve-cli-test-")

    @classmethod
    def tearDownClass(cls):
        cls.server.stop()
        shutil.rmtree(cls.dir)

    def setUp(self):
        self.rng = np.random.default_rng(int.from_bytes(self.id().encode()[-4:], "little"))

    def cli(self, *args, code=0, target=None, env=None):
        """Runs the tool with --target (none when target is ""), in the environment of the
        tests less KERNELSERVE_* plus `env`; checks its exit code (unless code is None);
        returns the finished process."""
        target = self.server.target if target is None else target
        environ = {k: v for k, v in os.environ.items() if not k.startswith("KERNELSERVE_")}
        environ.update(env or {})
        proc = subprocess.run([CLI, *([f"--target={target}"] if target else []), *args],
                              capture_output=True, text=True, timeout=120, env=environ)
        if code is not None:  # None: any
            self.assertEqual(proc.returncode, code,
                             f"kernelserve {' '.join(args)}\nstdout:\n{proc.stdout}\n"
                             f"stderr:\n{proc.stderr}")
        return proc

    def cli_json(self, *args):
        return json.loads(self.cli(*args, "--json").stdout)

    def save(self, name, array):
        path = os.path.join(self.dir, f"{self.id()}.{name}.npy")
        np.save(path, array)
        return path

    def out_dir(self):
        return os.path.join(self.dir, self.id())



@unittest.skipUnless(TOY_SERVER, "KERNELSERVE_TOY_SERVER is not set")
class CliToyKernelTest(CliTestBase):
    """A kernel the CLI has never heard of, served by a binary that registers it: its params
    are typed by the schema the server lists."""
    server_binary = TOY_SERVER

    def test_toy_kernel_is_listed_and_runs_with_its_params(self):
        names = {k["name"] for k in self.cli_json("kernels")["kernels"]}
        self.assertIn("toy_scale", names)
        self.assertIn("factor", self.cli("kernels").stdout)
        result = self.cli_json("run", "toy_scale", "--values=x=f32:1,2,-3", "--param=factor=3",
                               f"--output-dir={self.out_dir()}")
        self.assertEqual(result["platform"], "cpu")
        out = np.load(os.path.join(self.out_dir(), "out.npy"))
        np.testing.assert_array_equal(out, np.array([3, 6, -9], np.float32))

    def test_toy_kernel_params_are_checked_by_its_schema(self):
        proc = self.cli("run", "toy_scale", "--values=x=f32:1,2", "--param=factor=big",
                        code=INVALID_ARGUMENT)
        self.assertIn("--param factor='big': expected a number", proc.stderr)
        proc = self.cli("run", "toy_scale", "--values=x=f32:1,2", "--param=scale=2",
                        code=INVALID_ARGUMENT)
        self.assertIn("not a param of toy_scale: expected factor", proc.stderr)

    def test_example_kernel_matches_numpy(self):
        """rms_norm, the example of docs/ADDING_A_KERNEL.md: .npy files in and out, its float
        param, against the float64 reference, and a bad weight refused by its analysis."""
        for dtype, tol in ((np.float32, 1e-5), (np.float16, 2e-3)):
            x = uniform(self.rng, (2, 5, 33), dtype)
            weight = uniform(self.rng, (33,), dtype)
            out_dir = f"{self.out_dir()}-{np.dtype(dtype).name}"
            result = self.cli_json("run", "rms_norm", f"--input=x={self.save('x', x)}",
                                   f"--input=weight={self.save('w', weight)}",
                                   "--param=eps=0.01", f"--output-dir={out_dir}")
            self.assertEqual(result["platform"], "cpu")
            out = np.load(os.path.join(out_dir, "out.npy"))
            self.assertEqual((out.dtype, out.shape), (np.dtype(dtype), x.shape))
            np.testing.assert_allclose(out.astype(np.float64),
                                       references.rms_norm(x, weight, eps=0.01),
                                       rtol=tol, atol=tol)
        proc = self.cli("run", "rms_norm", "--values=x=f32:1,2,3", "--values=weight=f32:1,2",
                        code=INVALID_ARGUMENT)
        self.assertIn("input 'weight': expected shape [H] = [3], got [2]", proc.stderr)
        proc = self.cli("run", "rms_norm", "--values=x=f32:1,2,3", "--param=eps=0",
                        code=INVALID_ARGUMENT)
        self.assertIn("param 'eps' = 0 is out of range: expected 1e-12..1", proc.stderr)

class CliTest(CliTestBase):
    def test_health(self):
        self.assertEqual(self.cli("health").stdout.strip(), "SERVING")
        self.assertEqual(self.cli_json("health"), {"service": "", "status": "SERVING"})
        self.assertEqual(self.cli("health", "kernelserve.v1.KernelService").stdout.strip(),
                         "SERVING")
        # A service the server does not know is NOT_FOUND (a name to fix), not UNAVAILABLE.
        proc = self.cli("health", "foo", code=NOT_FOUND)
        self.assertIn("no service 'foo'", proc.stderr)

    def test_help_version_and_usage_errors(self):
        for args in (["--help"], ["-h"], ["help"]):
            proc = self.cli(*args)
            self.assertIn("usage: kernelserve", proc.stdout)
            self.assertIn("KERNELSERVE_TARGET", proc.stdout)
        run_help = self.cli("run", "--help").stdout
        self.assertIn("usage: kernelserve run KERNEL", run_help)
        self.assertIn("--shape", run_help)
        self.assertEqual(self.cli("help", "run").stdout, run_help)
        # The client's version: this build's, as the server reports its own.
        version = self.cli("--version").stdout
        info = self.cli_json("info")
        self.assertEqual(version, f"kernelserve {info['version']} (git {info['git']})\n")
        proc = self.cli("rn", "mean_pooling", code=USAGE)
        self.assertIn("unknown command 'rn'; did you mean 'run'?", proc.stderr)
        proc = self.cli("run", "mean_pooling", "--shap=x=f32:1,2,3", code=USAGE)
        self.assertIn("unknown flag --shap; did you mean '--shape'?", proc.stderr)
        self.cli("run", code=USAGE)  # no kernel
        self.cli(target="", code=USAGE)  # no command

    def test_target_and_token_file_from_the_environment(self):
        env = {"KERNELSERVE_TARGET": self.server.target}
        self.assertEqual(self.cli("health", target="", env=env).stdout.strip(), "SERVING")
        # The flag wins over the variable.
        dead = {"KERNELSERVE_TARGET": f"127.0.0.1:{free_port()}"}
        self.assertEqual(self.cli("health", env=dead).stdout.strip(), "SERVING")
        self.cli("health", target="", env=dead, code=UNAVAILABLE)
        proc = self.cli("info", env={"KERNELSERVE_TOKEN_FILE": "/nonexistent/token"},
                        code=NOT_FOUND)
        self.assertIn("/nonexistent/token", proc.stderr)

    def test_run_refuses_inputs_larger_than_a_message_before_making_them(self):
        cases = [("x=f32:1024,1024,1024", "4 GiB (4294967296 bytes)"),  # 2 GiB and more
                 ("x=f32:10000,1000000,1000", "TiB"),  # 40 TB: more than the memory
                 ("x=f32:4294967296,4294967296,4", "more bytes than 2^63")]
        for shape, says in cases:
            start = time.monotonic()
            proc = self.cli("run", "mean_pooling", f"--shape={shape}", code=INVALID_ARGUMENT)
            self.assertLess(time.monotonic() - start, 5, shape)
            self.assertIn(says, proc.stderr)
            self.assertIn("at most 1 GiB (1073741824 bytes)", proc.stderr)
        # Each input under the limit, together over it.
        proc = self.cli("bench", "mean_pooling", "--shape=x=f32:200,1024,1024",
                        "--shape=mask=bool:300,1024,1024", code=INVALID_ARGUMENT)
        self.assertIn("the inputs are 1.074 GiB (1153433600 bytes) together", proc.stderr)

    def test_info_and_kernels(self):
        info = self.cli_json("info")
        self.assertTrue(info["version"])
        self.assertIn("memory", info["cache_tiers"])
        self.assertIn("fingerprint", self.cli("info").stdout)
        names = {k["name"] for k in self.cli_json("kernels")["kernels"]}
        self.assertTrue({"mean_pooling", "flash_attention"} <= names, names)
        table = self.cli("kernels").stdout
        self.assertIn("cu_seqlens?", table)
        # The schema's rules, as kernels --json has them: dtypes and shapes of the inputs,
        # params with their type, default and range.
        schema = {k["name"]: k for k in self.cli_json("kernels")["kernels"]}["mean_pooling"]
        x = {i["name"]: i for i in schema["input_schema"]}["x"]
        row = next(line for line in table.splitlines() if line.split()[:1] == ["mean_pooling"])
        self.assertIn(x["shape"], row)
        self.assertIn("f32", row)
        chunk = {p["name"]: p for p in schema["param_schema"]}["chunk_size"]
        param = next(line for line in table.splitlines() if " chunk_size " in line)
        self.assertIn(f"{chunk['type']} = ", param)
        # Each platform's config fields: the cpu platform's worker threads are "threads".
        config = next(line for line in table.splitlines()
                      if " threads " in line and " config cpu " in line)
        self.assertIn("0..1024", config)
        cpu = {c["platform"]: c for c in schema["config_schemas"]}["cpu"]
        self.assertEqual([f["name"] for f in cpu["fields"]], ["block_size", "threads"])

    def test_run_mean_pooling_from_npy(self):
        x = uniform(self.rng, (3, 29, 16))
        proc = self.cli("run", "mean_pooling", f"--input=x={self.save('x', x)}",
                        f"--output-dir={self.out_dir()}", "--param=chunk_size=8")
        self.assertIn("out.npy", proc.stdout)
        self.assertIn("kernel", proc.stdout)
        out = np.load(os.path.join(self.out_dir(), "out.npy"))
        self.assertEqual(out.dtype, np.float32)
        np.testing.assert_allclose(out, references.mean_pooling(x), rtol=1e-5, atol=1e-6)

    def test_run_random_shapes_json(self):
        result = self.cli_json("run", "mean_pooling", "--shape=x=f32:4,32,8", "--seed=5",
                               f"--output-dir={self.out_dir()}")
        summary = result["outputs"]["out"]
        self.assertEqual(summary["shape"], [4, 8])
        self.assertEqual(summary["dtype"], "f32")
        out = np.load(summary["file"])
        self.assertAlmostEqual(summary["mean"], float(out.astype(np.float64).mean()), places=6)
        self.assertGreater(np.abs(out).max(), 0)  # random inputs, not zeros
        self.assertIn(result["source"], {"heuristic", "memory", "autotune"})
        timings = result["timings"]
        self.assertGreaterEqual(timings["total_us"], timings["kernel_us"])
        self.assertTrue(result["cache_key"].startswith("mean_pooling"))

    def test_run_prints_where_its_config_came_from(self):
        def source(*flags):
            lines = self.cli("run", "mean_pooling", "--shape=x=f32:3,21,8", *flags).stdout
            lines = lines.splitlines()
            header = next(line for line in lines if line.startswith("config "))
            row = lines[lines.index(header) + 2]  # under the rule
            return row[header.index("source"):header.index("platform")].strip()

        self.assertEqual(source("--config=block_size=8,threads=1"), "override")
        self.assertIn(source(), {"heuristic", "memory"})  # a miss, or what it left
        self.assertEqual(source(), "memory")  # the config the first call chose, cached

    def test_run_mean_pooling_bwd_sends_x_by_shape(self):
        dout = uniform(self.rng, (2, 8))
        result = self.cli_json("run", "mean_pooling_bwd", f"--input=dout={self.save('dout', dout)}",
                               "--shape=x=f32:2,5,8", f"--output-dir={self.out_dir()}")
        self.assertEqual(result["outputs"]["dx"]["shape"], [2, 5, 8])
        dx = np.load(os.path.join(self.out_dir(), "dx.npy"))
        np.testing.assert_array_equal(dx, np.repeat(dout[:, None, :] / np.float32(5), 5, axis=1))

    def test_run_varlen_values(self):
        x = uniform(self.rng, (10, 6))
        self.cli("run", "mean_pooling", f"--input=x={self.save('x', x)}",
                 "--values=cu_seqlens=i32:0,4,4,10", f"--output-dir={self.out_dir()}")
        out = np.load(os.path.join(self.out_dir(), "out.npy"))
        expected = references.mean_pooling(x, cu_seqlens=[0, 4, 4, 10])
        np.testing.assert_allclose(out, expected, rtol=1e-5, atol=1e-6)

    def test_run_f16_and_bf16_npy(self):
        x16 = uniform(self.rng, (2, 24, 32), np.float16)
        self.cli("run", "mean_pooling", f"--input=x={self.save('x16', x16)}",
                 f"--output-dir={self.out_dir()}/f16")
        out16 = np.load(os.path.join(self.out_dir(), "f16", "out.npy"))
        self.assertEqual(out16.dtype, np.float16)
        np.testing.assert_allclose(out16.astype(np.float32),
                                   references.mean_pooling(x16.astype(np.float32)),
                                   rtol=1e-3, atol=1e-4)
        bits = kernelserve.to_bf16(uniform(self.rng, (2, 24, 32)))
        path = self.save("xbf16", bits)
        # '<u2' is bf16 only when asked.
        self.cli("run", "mean_pooling", f"--input=x={path}", code=INVALID_ARGUMENT)
        proc = self.cli("run", "mean_pooling", f"--input=x=bf16:{path}",
                        f"--output-dir={self.out_dir()}/bf16")
        self.assertIn("bf16", proc.stderr)
        out = np.load(os.path.join(self.out_dir(), "bf16", "out.npy"))
        self.assertEqual(out.dtype, np.uint16)
        np.testing.assert_allclose(kernelserve.from_bf16(out),
                                   references.mean_pooling(kernelserve.from_bf16(bits)),
                                   rtol=2**-8, atol=1e-5)

    def test_run_sends_fp8_inputs_and_the_kernel_refuses_them(self):
        # --shape makes random fp8 values, --input reads '|u1' bits as the fp8 dtype named; both
        # reach the server, where mean_pooling (f32|f16|bf16) refuses them naming x.
        for name, dtype in (("f8_e4m3", kernelserve.float8_e4m3fn),
                            ("f8_e5m2", kernelserve.float8_e5m2)):
            want = f"input 'x': dtype {name}: expected f32|f16|bf16"
            proc = self.cli("run", "mean_pooling", f"--shape=x={name}:2,4,8",
                            code=INVALID_ARGUMENT)
            self.assertIn(want, proc.stderr)
            bits = uniform(self.rng, (2, 4, 8)).astype(dtype).view(np.uint8)
            path = self.save(name, bits)
            # '|u1' is fp8 only when the dtype is named.
            proc = self.cli("run", "mean_pooling", f"--input=x={path}", code=INVALID_ARGUMENT)
            self.assertIn("'|u1'", proc.stderr)
            proc = self.cli("run", "mean_pooling", f"--input=x={name}:{path}",
                            code=INVALID_ARGUMENT)
            self.assertIn(want, proc.stderr)

    def test_run_flash_attention_npy_with_lse(self):
        q = uniform(self.rng, (2, 10, 4, 16))
        k = uniform(self.rng, (2, 14, 2, 16))
        v = uniform(self.rng, (2, 14, 2, 16))
        paths = [f"--input={n}={self.save(n, a)}" for n, a in (("q", q), ("k", k), ("v", v))]
        self.cli("run", "flash_attention", *paths, "--param=causal=true",
                 "--param=window_left=5", "--param=return_lse=true",
                 f"--output-dir={self.out_dir()}")
        out, lse = references.attention(q, k, v, causal=True, window_left=5)
        np.testing.assert_allclose(np.load(os.path.join(self.out_dir(), "out.npy")), out,
                                   rtol=1e-4, atol=1e-5)
        np.testing.assert_allclose(np.load(os.path.join(self.out_dir(), "lse.npy")), lse,
                                   rtol=1e-4, atol=1e-5)

    def test_errors_exit_with_the_status_code(self):
        proc = self.cli("run", "mean_pooling", "--shape=x=f32:4,8", code=INVALID_ARGUMENT)
        self.assertIn("INVALID_ARGUMENT", proc.stderr)
        self.assertIn("'x'", proc.stderr)
        self.cli("run", "no_such_kernel", "--shape=x=f32:1,2,3", code=INVALID_ARGUMENT)
        self.cli("run", "mean_pooling", code=INVALID_ARGUMENT)  # no inputs
        self.cli("run", "mean_pooling", "--shape=x=f32:2,2,2", "--param=causal=true",
                 code=INVALID_ARGUMENT)
        self.cli("run", "mean_pooling", "--input=x=/nonexistent.npy", code=NOT_FOUND)
        down = f"127.0.0.1:{free_port()}"
        proc = self.cli("health", target=down, code=UNAVAILABLE)
        self.assertIn("UNAVAILABLE", proc.stderr)
        # No server there: the message names the target and how to start one.
        self.assertIn(f"no kernelserve server answers at {down}", proc.stderr)
        self.assertIn("`make run` in a kernelserve checkout or "
                      f"`kernelserve-server --listen {down}`", proc.stderr)
        # A deadline that runs out is named, with the flag that sets it.
        proc = self.cli("--deadline=1ms", "run", "mean_pooling", "--shape=x=f32:64,512,256",
                        code=DEADLINE_EXCEEDED)
        self.assertIn("the deadline was 1ms per call: --deadline sets it", proc.stderr)

    def test_bench(self):
        report = self.cli_json("bench", "mean_pooling", "--shape=x=f32:1,16,64",
                               "--concurrency=4", "--duration=1s")
        self.assertGreater(report["ok"], 0)
        self.assertEqual(report["errors"], 0)
        self.assertGreater(report["throughput_rps"], 0)
        lat = report["latency_us"]
        self.assertLessEqual(lat["p50"], lat["p90"])
        self.assertLessEqual(lat["p90"], lat["p99"])
        self.assertLessEqual(lat["p99"], lat["max"])
        server = report["server_mean"]
        self.assertGreaterEqual(server["total_us"], server["kernel_us"])
        text = self.cli("bench", "mean_pooling", "--shape=x=f32:1,16,64", "--requests=50").stdout
        for word in ("throughput", "p50", "p99", "queue", "kernel", "total"):
            self.assertIn(word, text)
        # Every call failing exits with the server's code.
        self.cli("bench", "mean_pooling", "--shape=x=f32:4,8", "--requests=5",
                 code=INVALID_ARGUMENT)

    def test_bench_through_the_kserve_v2_front_door(self):
        report = self.cli_json("bench", "mean_pooling", "--shape=x=f32:1,16,64",
                               "--concurrency=2", "--requests=40", "--protocol=v2",
                               "--param=chunk_size=8")
        self.assertEqual(report["ok"], 40)
        self.assertEqual(report["errors"], 0)
        self.assertGreater(report["throughput_rps"], 0)
        self.assertGreater(report["latency_us"]["p50"], 0)
        server = report["server_mean"]
        self.assertGreater(server["total_us"], 0)  # read from the answer's parameters
        self.assertGreaterEqual(server["total_us"], server["kernel_us"])
        text = self.cli("bench", "mean_pooling", "--shape=x=f32:1,16,64", "--requests=20",
                        "--protocol=v2").stdout
        for word in ("throughput", "p50", "p99", "queue", "kernel", "total"):  # the same table
            self.assertIn(word, text)
        # A bad request stops it the same way as the native one.
        proc = self.cli("bench", "mean_pooling", "--shape=x=f32:4,8", "--protocol=v2",
                        "--requests=5", code=INVALID_ARGUMENT)
        self.assertIn("'x'", proc.stderr)
        self.assertEqual(proc.stdout, "")
        # The client's deadline applies to each ModelInfer as to each Execute: calls fail with
        # DEADLINE_EXCEEDED, retried and counted (gRPC lets some calls finish past so short a
        # deadline; when none does, the run exits with DEADLINE_EXCEEDED's code, 4).
        for protocol in ("native", "v2"):
            proc = self.cli("bench", "mean_pooling", "--shape=x=f32:1,16,64", "--requests=40",
                            "--deadline=1ns", f"--protocol={protocol}", "--json", code=None)
            self.assertIn(proc.returncode, (0, 4), proc.stderr)
            report = json.loads(proc.stdout)
            self.assertGreater(report["errors"], 0, protocol)
            for failure in report["failures"]:  # the client's or the server's
                self.assertTrue(failure.startswith("DEADLINE_EXCEEDED: "), failure)

    def test_bench_v2_refuses_what_the_front_door_does_not_take(self):
        down = f"127.0.0.1:{free_port()}"  # refused before any call: no server needed
        for flags in (["--autotune"], ["--config=block_size=64,threads=1"],
                      ["--platform=cuda"], ["--device=0"]):
            for target in (None, down):
                proc = self.cli("bench", "mean_pooling", "--shape=x=f32:1,16,64",
                                "--requests=5", "--protocol=v2", *flags, target=target,
                                code=INVALID_ARGUMENT)
                self.assertIn(f"{flags[0].split('=')[0]} is not taken with --protocol=v2",
                              proc.stderr)
                self.assertEqual(proc.stdout, "")
        # A kernel id pins an implementation: the native API's, not a model name.
        self.cli("bench", "mean_pooling@v1", "--shape=x=f32:1,16,64", "--requests=5")
        proc = self.cli("bench", "mean_pooling@v1", "--shape=x=f32:1,16,64", "--requests=5",
                        "--protocol=v2", code=INVALID_ARGUMENT)
        self.assertIn("give 'mean_pooling' or use --protocol=native", proc.stderr)
        proc = self.cli("bench", "mean_pooling", "--shape=x=f32:1,16,64", "--requests=5",
                        "--protocol=v3", code=INVALID_ARGUMENT)
        self.assertIn("--protocol=v3: expected native or v2", proc.stderr)
        self.assertIn("--protocol native|v2", self.cli("bench", "--help").stdout)

    def test_bench_with_shared_memory(self):
        shapes = [f"--shape={n}=f16:1,40,2,64" for n in ("q", "k", "v")]
        report = self.cli_json("bench", "flash_attention", *shapes, "--param=causal=true",
                               "--param=return_lse=true", "--concurrency=2", "--requests=30",
                               "--shared-memory=system")
        self.assertEqual((report["ok"], report["errors"]), (30, 0), report["failures"])
        # The bench's region is unregistered when it ends.
        with grpc.insecure_channel(self.server.target) as channel:
            status = rpc.KernelServiceStub(channel).SharedMemoryStatus(
                pb.SharedMemoryStatusRequest(), timeout=10)
        self.assertEqual(list(status.regions), [])
        for flags, message in ((["--shared-memory=gpu"], "expected auto, none, system or cuda"),
                               (["--shared-memory=system", "--protocol=v2"],
                                "not taken with --protocol=v2")):
            proc = self.cli("bench", "mean_pooling", "--shape=x=f32:1,16,64", "--requests=5",
                            *flags, code=INVALID_ARGUMENT)
            self.assertIn(message, proc.stderr)

    def test_bench_stops_at_the_first_error_retrying_cannot_cure(self):
        start = time.monotonic()
        proc = self.cli("bench", "mean_pooling", "--shape=x=f32:4,8", "--duration=30s",
                        "--concurrency=4", code=INVALID_ARGUMENT)
        self.assertLess(time.monotonic() - start, 15)
        self.assertIn("INVALID_ARGUMENT", proc.stderr)
        self.assertIn("'x'", proc.stderr)
        self.assertNotIn("throughput", proc.stdout)  # no table of zeros
        self.assertEqual(proc.stdout, "")

    def test_bench_stops_at_the_first_unavailable_when_the_server_dies(self):
        server = ServerProcess()
        environ = {k: v for k, v in os.environ.items() if not k.startswith("KERNELSERVE_")}
        bench = subprocess.Popen([CLI, f"--target={server.target}", "bench", "mean_pooling",
                                  "--shape=x=f32:1,16,64", "--concurrency=4", "--duration=60s"],
                                 stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                 env=environ)
        try:
            time.sleep(2)
            server.process.kill()  # gone, as in a crash
            start = time.monotonic()
            out, err = bench.communicate(timeout=30)
        finally:
            if bench.poll() is None:
                bench.kill()
                bench.communicate()
            server.stop()
        self.assertLess(time.monotonic() - start, 15)  # not the 60 s of failed calls
        self.assertEqual(bench.returncode, UNAVAILABLE, err)
        self.assertIn("bench stopped at the first UNAVAILABLE call (the server is down or went "
                      "away; ", err)
        self.assertIn(f"no kernelserve server answers at {server.target}", err)
        self.assertEqual(out, "")  # no table

    def test_tune(self):
        result = self.cli_json("tune", "mean_pooling", "--shape=x=f32:4,96,32")
        timed = [c for c in result["candidates"] if c["status"]["code"] == 0]
        self.assertGreater(len(timed), 0)
        fastest = min(timed, key=lambda c: c["median_us"])
        self.assertEqual(result["best"], fastest["config"])
        self.assertEqual(result["best_us"], fastest["median_us"])
        text = self.cli("tune", "mean_pooling", "--shape=x=f32:4,96,32").stdout
        self.assertIn("winner:", text)
        self.assertEqual(sum(line.endswith("  ok") for line in text.splitlines()), len(timed))

    def test_tune_budget_cuts_it_short_and_says_so(self):
        shape = "--shape=x=f32:8,2048,256"
        full = self.cli_json("tune", "mean_pooling", shape)
        self.assertFalse(full["budget_reached"])
        self.assertEqual(full["candidates_timed"], full["candidates_total"])
        self.assertGreaterEqual(full["candidates_total"], 3)
        # One and a half candidates' time: the first starts, the third does not.
        per_candidate_ms = full["elapsed_seconds"] * 1e3 / full["candidates_total"]
        budget = max(1, int(1.5 * per_candidate_ms))
        cut = self.cli_json("tune", "mean_pooling", shape, f"--budget={budget}ms")
        self.assertTrue(cut["budget_reached"])
        self.assertEqual(int(cut["time_budget_ms"]), budget)
        self.assertLess(cut["candidates_timed"], cut["candidates_total"])
        proc = self.cli("tune", "mean_pooling", shape, f"--budget={budget / 1e3}")
        match = re.search(r"^timed (\d+) of (\d+) candidates \(budget reached\)$", proc.stdout,
                          re.MULTILINE)
        self.assertIsNotNone(match, proc.stdout)
        self.assertLess(int(match.group(1)), int(match.group(2)))
        self.assertEqual(proc.stderr, "")  # not a terminal: no progress line
        self.assertNotIn("budget reached", self.cli("tune", "mean_pooling", shape).stdout)
        # Spent before any candidate: DEADLINE_EXCEEDED naming the budget, not the deadline.
        none = self.cli("tune", "mean_pooling", "--shape=x=f32:16,4096,256", "--budget=1ms",
                        code=DEADLINE_EXCEEDED)
        self.assertIn("the tuning time budget of 1ms ran out before any of the", none.stderr)
        self.assertNotIn("--deadline", none.stderr)

    def test_tune_shows_progress_on_a_terminal(self):
        leader, follower = pty.openpty()
        try:
            proc = subprocess.run(
                [CLI, f"--target={self.server.target}", "tune", "mean_pooling",
                 "--shape=x=f32:4,512,128"],
                stdout=subprocess.PIPE, stderr=follower, text=True, timeout=120,
                env={k: v for k, v in os.environ.items() if not k.startswith("KERNELSERVE_")})
        finally:
            os.close(follower)
        err = b""
        while True:
            try:
                chunk = os.read(leader, 65536)
            except OSError:  # EIO: the terminal's other end is closed and drained
                break
            if not chunk:
                break
            err += chunk
        os.close(leader)
        self.assertEqual(proc.returncode, 0, err)
        self.assertIn("winner:", proc.stdout)
        self.assertNotIn("tuning:", proc.stdout)
        self.assertRegex(err.decode(), r"\rtuning: \d+/\d+ candidates, best ")

    def test_cache_put_ls_get_rm(self):
        shape = "--shape=x=f32:3,40,8"
        put = self.cli_json("cache", "put", "mean_pooling", shape,
                            "--config=block_size=8,threads=1")
        key = put["cache_key"]
        entries = self.cli_json("cache", "ls", "mean_pooling")
        self.assertIn(key, [e["cache_key"] for e in entries])
        [entry] = self.cli_json("cache", "get", key)
        self.assertEqual(entry["config"]["block_size"], 8)
        self.assertEqual(int(entry["config"]["fields"]["threads"]), 1)  # a named field
        self.assertIn(key, self.cli("cache", "ls").stdout)
        run = self.cli_json("run", "mean_pooling", shape)
        self.assertEqual(run["cache_key"], key)
        self.assertEqual(run["config"]["block_size"], 8)  # the pinned config ran
        self.cli("cache", "rm", key)
        self.cli("cache", "get", key, code=NOT_FOUND)
        self.cli("cache", "put", "mean_pooling", shape, code=INVALID_ARGUMENT)  # no --config
        # A named field the platform does not declare: the server names the platform's fields.
        proc = self.cli("cache", "put", "mean_pooling", shape, "--config=block_size=8,lanes=4",
                        code=INVALID_ARGUMENT)
        self.assertIn("not a field of mean_pooling on cpu (its fields: block_size, threads)",
                      proc.stderr)
        self.cli("cache", "frob", code=USAGE)

    def test_cache_rm_of_a_key_the_device_does_not_hold_is_not_found(self):
        put = self.cli_json("cache", "put", "mean_pooling", "--shape=x=f32:2,24,8",
                            "--config=block_size=8,threads=1")
        key = put["cache_key"]
        proc = self.cli("cache", "rm", key, "--fingerprint=WRONG", code=NOT_FOUND)
        self.assertIn(key, proc.stderr)
        self.assertIn("'WRONG'", proc.stderr)
        self.assertNotIn("deleted", proc.stdout)
        [entry] = self.cli_json("cache", "get", key)  # still there
        self.assertEqual(entry["device_fingerprint"], put["device_fingerprint"])
        self.assertIn(put["device_fingerprint"], self.cli("cache", "ls").stdout)
        self.assertEqual(self.cli("cache", "rm", key, "--fingerprint",
                                  put["device_fingerprint"]).stdout, f"deleted {key}\n")
        self.cli("cache", "rm", key, code=NOT_FOUND)
        self.cli("cache", "get", key, code=NOT_FOUND)


class CliResidentTensorTest(CliTestBase):
    """tensor create|write|read|ls|rm, and run and bench naming resident tensors."""

    def tearDown(self):
        self.cli("tensor", "rm", "--all")

    def read(self, name, *flags):
        path = os.path.join(self.dir, f"{self.id()}.read-{name}.npy")
        self.cli("tensor", "read", name, "-o", path, *flags)
        return np.load(path)

    def test_create_from_a_file_and_zeros_then_ls(self):
        x = uniform(self.rng, (3, 6, 4))
        created = self.cli_json("tensor", "create", "x", f"--input-like={self.save('x', x)}")
        self.assertTrue(created["created"])
        self.assertEqual(created["tensor"]["name"], "x")
        self.assertEqual(int(created["tensor"]["byte_size"]), x.nbytes)
        np.testing.assert_array_equal(self.read("x"), x)
        text = self.cli("tensor", "create", "z", "--input-like=i32:5,2", "--ttl=1m").stdout
        self.assertIn("created z i32[5,2]", text)
        np.testing.assert_array_equal(self.read("z"), np.zeros((5, 2), np.int32))
        # A file's dtype and shape only.
        self.cli("tensor", "create", "xz", f"--input-like={self.save('x', x)}", "--zeros")
        np.testing.assert_array_equal(self.read("xz"), np.zeros_like(x))
        # Again with the same dtype and shape: left as it is.
        text = self.cli("tensor", "create", "x", "--input-like=f32:3,6,4").stdout
        self.assertIn("exists already", text)
        np.testing.assert_array_equal(self.read("x"), x)
        ls = self.cli("tensor", "ls").stdout
        for word in ("name", "dtype", "shape", "device", "bytes", "owner", "created",
                     "last used", "calls", "ttl", "server started", "f32", "[3,6,4]", "host"):
            self.assertIn(word, ls)
        self.assertEqual(sum(line.startswith(("x ", "z ", "xz ")) for line in ls.splitlines()),
                         3, ls)
        listed = self.cli_json("tensor", "ls")
        self.assertEqual(sorted(t["name"] for t in listed["tensors"]), ["x", "xz", "z"])
        self.assertGreater(int(listed["server_started_unix_ms"]), 0)
        [z] = self.cli_json("tensor", "ls", "z")["tensors"]
        self.assertLessEqual(int(z["ttl_seconds"]), 60)
        # info has the server's limits and what it holds.
        info = self.cli("info").stdout
        self.assertRegex(info, r"resident tensors +3 holding %d bytes, of at most" %
                         (2 * x.nbytes + 5 * 2 * 4))
        self.assertRegex(info, r"resident ttl +1h idle \(at most 24h\)")

    def test_run_with_a_resident_input_equals_the_inline_run(self):
        x = uniform(self.rng, (2, 9, 8))
        path = self.save("x", x)
        self.cli("tensor", "create", "rx", f"--input-like={path}")
        inline_dir, resident_dir = self.out_dir() + "-inline", self.out_dir() + "-resident"
        inline = self.cli_json("run", "mean_pooling", f"--input=x={path}",
                               f"--output-dir={inline_dir}")
        resident = self.cli_json("run", "mean_pooling", "--tensor=x=@rx",
                                 f"--output-dir={resident_dir}")
        self.assertEqual(resident["cache_key"], inline["cache_key"])
        np.testing.assert_array_equal(np.load(os.path.join(resident_dir, "out.npy")),
                                      np.load(os.path.join(inline_dir, "out.npy")))
        # The output into a resident tensor, then read.
        self.cli("tensor", "create", "pooled", "--input-like=f32:2,8")
        text = self.cli("run", "mean_pooling", "--tensor=x=@rx", "--output-to=out=@pooled").stdout
        self.assertIn("output out is in resident tensor pooled", text)
        np.testing.assert_allclose(self.read("pooled"), references.mean_pooling(x), rtol=1e-5,
                                   atol=1e-6)
        result = self.cli_json("run", "mean_pooling", f"--input=x={path}",
                               "--output-to=out=@pooled")
        self.assertEqual(result["outputs"]["out"], {"resident_tensor": "pooled"})

    def test_write_rows_and_read_rows(self):
        self.cli("tensor", "create", "w", "--input-like=f32:4,3")
        rows = uniform(self.rng, (2, 3))
        text = self.cli("tensor", "write", "w", self.save("rows", rows), "--row=1").stdout
        self.assertIn("at row 1", text)
        self.cli("tensor", "write", "w", self.save("one", np.array([5.0], np.float32)),
                 "--byte-offset=8")  # element [0, 2]
        want = np.zeros((4, 3), np.float32)
        want[1:3] = rows
        want[0, 2] = 5
        np.testing.assert_array_equal(self.read("w"), want)
        np.testing.assert_array_equal(self.read("w", "--rows=1:3"), rows)
        np.testing.assert_array_equal(self.read("w", "--rows=3:"), want[3:])
        summary = self.cli_json("tensor", "read", "w", "--rows=0:1")
        self.assertEqual((summary["shape"], summary["max"]), ([1, 3], 5.0))

    def test_fp8_tensors_round_trip_as_u1_bits(self):
        codes = np.arange(256, dtype=np.uint8).reshape(16, 16)
        for name in ("f8_e4m3", "f8_e5m2"):
            path = self.save(name, codes)
            text = self.cli("tensor", "create", name, f"--input-like={name}:{path}").stdout
            self.assertIn(f"created {name} {name}[16,16]", text)
            np.testing.assert_array_equal(self.read(name), codes)  # the same bits back
            summary = self.cli_json("tensor", "read", name, "--rows=3:4")
            self.assertEqual((summary["dtype"], summary["shape"]), (name, [1, 16]))
            # Rows written from '|u1' bits named as the dtype; unnamed, '|u1' is refused.
            rows = self.save(name + "-rows", np.full((2, 16), 0x38, np.uint8))
            self.cli("tensor", "write", name, rows, "--row=5", code=INVALID_ARGUMENT)
            self.cli("tensor", "write", name, f"{name}:{rows}", "--row=5")
            want = codes.copy()
            want[5:7] = 0x38
            np.testing.assert_array_equal(self.read(name), want)
            zeros = self.cli_json("tensor", "create", name + "z", f"--input-like={name}:2,3")
            self.assertEqual(zeros["tensor"]["dtype"], "DTYPE_" + name.upper())  # proto JSON
            self.assertFalse(self.read(name + "z").any())

    def test_rm_one_and_all(self):
        for name in ("a", "b", "c"):
            self.cli("tensor", "create", name, "--input-like=f32:2")
        self.assertEqual(self.cli("tensor", "rm", "a").stdout, "deleted 1 tensor (a)\n")
        self.assertEqual(self.cli_json("tensor", "rm", "--all"), {"deleted": 2})
        self.assertEqual(self.cli_json("tensor", "ls")["tensors"], [])

    def test_errors_exit_with_the_status_code(self):
        self.cli("tensor", "read", "nope", code=NOT_FOUND)
        self.cli("tensor", "rm", "nope", code=NOT_FOUND)
        self.cli("run", "mean_pooling", "--tensor=x=@nope", code=NOT_FOUND)
        self.cli("tensor", "create", "t", "--input-like=f32:2,3")
        proc = self.cli("tensor", "create", "t", "--input-like=f32:3,2", code=ALREADY_EXISTS)
        self.assertIn("ALREADY_EXISTS", proc.stderr)
        rows = self.save("rows", np.ones((2, 3), np.float32))
        self.cli("tensor", "write", "t", rows, "--row=1", code=INVALID_ARGUMENT)
        self.cli("tensor", "write", "nope", rows, code=NOT_FOUND)
        self.cli("tensor", "read", "t", "--rows=1:5", code=INVALID_ARGUMENT)
        proc = self.cli("run", "mean_pooling", "--tensor=x=t", code=INVALID_ARGUMENT)
        self.assertIn("expected NAME=@TENSOR", proc.stderr)
        proc = self.cli("tensor", "create", "u", "--input-like=f32:2,x", code=INVALID_ARGUMENT)
        self.assertIn("expected DTYPE:D0,D1,...", proc.stderr)
        self.cli("tensor", "frob", code=USAGE)

    def test_bench_sends_only_the_inputs_that_are_not_resident(self):
        q = uniform(self.rng, (1, 32, 2, 16))
        self.cli("tensor", "create", "bk", f"--input-like={self.save('k', q)}")
        self.cli("tensor", "create", "bv", f"--input-like={self.save('v', q)}")
        report = self.cli_json("bench", "flash_attention", "--shape=q=f32:1,32,2,16",
                               "--tensor=k=@bk", "--tensor=v=@bv", "--requests=20",
                               "--concurrency=2")
        self.assertEqual((report["ok"], report["errors"]), (20, 0), report["failures"])
        # The resident inputs alone, and the output into one as well.
        self.cli("tensor", "create", "bx", "--input-like=f32:2,16,8")
        self.cli("tensor", "create", "bout", "--input-like=f32:2,8")
        report = self.cli_json("bench", "mean_pooling", "--tensor=x=@bx", "--output-to=out=@bout",
                               "--requests=20")
        self.assertEqual((report["ok"], report["errors"]), (20, 0), report["failures"])
        # With shared memory: the other inputs and outputs there, the resident ones named.
        report = self.cli_json("bench", "flash_attention", "--shape=q=f32:1,32,2,16",
                               "--tensor=k=@bk", "--tensor=v=@bv", "--requests=10",
                               "--shared-memory=system")
        self.assertEqual((report["ok"], report["errors"]), (10, 0), report["failures"])
        self.cli("bench", "mean_pooling", "--tensor=x=@nope", "--requests=5", code=NOT_FOUND)
        [held] = self.cli_json("tensor", "ls", "bx")["tensors"]
        self.assertEqual(int(held.get("calls", 0)), 0)  # the bench's calls let go of it


class CliResidentPiecesTest(CliTestBase):
    """Tensors larger than the server's largest message go in and out in pieces."""
    server_args = ("--max-message-bytes=65536",)

    def read(self, name, *flags):
        path = os.path.join(self.dir, f"{self.id()}.read-{name}.npy")
        self.cli("tensor", "read", name, "-o", path, *flags)
        return np.load(path)

    def test_create_write_read_and_run_past_a_message(self):
        x = uniform(self.rng, (4, 25, 512))  # 200 KiB: four messages
        path = self.save("x", x)
        proc = self.cli("run", "mean_pooling", f"--input=x={path}", code=RESOURCE_EXHAUSTED)
        self.assertIn("RESOURCE_EXHAUSTED", proc.stderr)
        self.cli("tensor", "create", "x", f"--input-like={path}")
        np.testing.assert_array_equal(self.read("x"), x)
        np.testing.assert_array_equal(self.read("x", "--rows=1:3"), x[1:3])
        result = self.cli_json("run", "mean_pooling", "--tensor=x=@x",
                               f"--output-dir={self.out_dir()}")
        self.assertEqual(result["outputs"]["out"]["shape"], [4, 512])
        np.testing.assert_allclose(np.load(os.path.join(self.out_dir(), "out.npy")),
                                   references.mean_pooling(x), rtol=1e-5, atol=1e-6)
        rows = uniform(self.rng, (3, 25, 512))
        self.cli("tensor", "write", "x", self.save("rows", rows), "--row=1")
        x[1:] = rows
        np.testing.assert_array_equal(self.read("x"), x)
        # A write that cannot be is refused whole: no piece of it is written.
        proc = self.cli("tensor", "write", "x", self.save("rows", rows), "--row=2",
                        code=INVALID_ARGUMENT)
        self.assertIn("do not fit", proc.stderr)
        proc = self.cli("tensor", "write", "x", self.save("f16", rows.astype(np.float16)),
                        code=INVALID_ARGUMENT)
        self.assertIn("contents are f16; the tensor is f32", proc.stderr)
        np.testing.assert_array_equal(self.read("x"), x)
        # bench sends the resident input by name alone: 200 KiB inline do not fit a message.
        report = self.cli_json("bench", "mean_pooling", "--tensor=x=@x", "--requests=10")
        self.assertEqual((report["ok"], report["errors"]), (10, 0), report["failures"])
        self.cli("bench", "mean_pooling", f"--input=x={path}", "--requests=3",
                 code=RESOURCE_EXHAUSTED)
        self.cli("tensor", "rm", "x")


class CliFileStoreTest(CliTestBase):
    """cache rm against a file store: the entry (key, device) is deleted or NOT_FOUND."""

    @classmethod
    def setUpClass(cls):
        cls.store_dir = tempfile.mkdtemp(prefix="kernelserve-cli-store-")
        cls.server_args = (f"--cache=file:{cls.store_dir}/configs.json",)
        super().setUpClass()

    @classmethod
    def tearDownClass(cls):
        super().tearDownClass()
        shutil.rmtree(cls.store_dir)

    def test_cache_rm_with_a_wrong_fingerprint_keeps_the_stored_entry(self):
        put = self.cli_json("cache", "put", "mean_pooling", "--shape=x=f32:2,16,8",
                            "--config=block_size=8,threads=1")
        key, fingerprint = put["cache_key"], put["device_fingerprint"]
        proc = self.cli("cache", "rm", key, "--fingerprint=WRONG", code=NOT_FOUND)
        self.assertIn(key, proc.stderr)
        self.assertIn("'WRONG'", proc.stderr)
        tiers = {e["tier"] for e in self.cli_json("cache", "get", key)}
        self.assertEqual(tiers, {"memory", "file"})
        run = self.cli_json("run", "mean_pooling", "--shape=x=f32:2,16,8")
        self.assertEqual(run["config"]["block_size"], 8)
        self.cli("cache", "rm", key, f"--fingerprint={fingerprint}")
        self.cli("cache", "get", key, code=NOT_FOUND)
        self.cli("cache", "rm", key, f"--fingerprint={fingerprint}", code=NOT_FOUND)


class CliSharedMemoryOffTest(CliTestBase):
    server_args = ("--shared-memory=off",)

    def test_bench_with_shared_memory_says_it_is_off(self):
        proc = self.cli("bench", "mean_pooling", "--shape=x=f32:1,16,64", "--requests=5",
                        "--shared-memory=system", code=UNIMPLEMENTED)
        self.assertIn("--shared-memory=off", proc.stderr)

    def test_bench_with_cuda_shared_memory_needs_a_gpu(self):
        # Without a CUDA runtime here: UNAVAILABLE naming it; with one but no GPU (CI): the
        # runtime's error; on a GPU host: the server's UNIMPLEMENTED (it is off there).
        proc = self.cli("bench", "mean_pooling", "--shape=x=f32:1,16,64", "--requests=5",
                        "--shared-memory=cuda", code=None)
        self.assertNotEqual(proc.returncode, 0)
        self.assertRegex(proc.stderr, "CUDA runtime|cuda|CUDA|shared-memory=off")

    def test_auto_keeps_a_large_call_in_the_message(self):
        # The server says it serves no region: auto does not try one, and says nothing.
        self.assertEqual(self.cli_json("info")["shared_memory"], [])
        self.assertRegex(self.cli("info").stdout, r"shared memory +off")
        x = uniform(self.rng, (4, 256, 512))  # 2 MiB
        proc = self.cli("run", "mean_pooling", f"--input=x={self.save('x', x)}", "--json")
        self.assertEqual(json.loads(proc.stdout)["shared_memory"], "none")
        self.assertEqual(proc.stderr, "")


def region_names(target):
    """The names of the shared-memory regions the server at `target` holds."""
    with grpc.insecure_channel(target) as channel:
        status = rpc.KernelServiceStub(channel).SharedMemoryStatus(
            pb.SharedMemoryStatusRequest(), timeout=10)
    return [region.name for region in status.regions]


class CliAutoSharedMemoryTest(CliTestBase):
    """--shared-memory=auto, the default of run and bench, against a local server whose messages
    hold 1.5 MiB: a call of 2 MiB reaches it only through a region."""
    server_args = ("--max-message-bytes=1572864",)
    FALLBACK = "refused a shared-memory region"

    def test_the_server_says_it_serves_system_regions(self):
        self.assertIn("system", self.cli_json("info")["shared_memory"])
        self.assertRegex(self.cli("info").stdout, r"shared memory +system")

    def test_run_sends_a_large_call_through_a_region(self):
        x = uniform(self.rng, (4, 256, 512))  # 2 MiB: past the server's messages
        path = self.save("x", x)
        port = self.server.target.rsplit(":", 1)[1]
        for target in (self.server.target, f"localhost:{port}", f"dns:///127.0.0.1:{port}"):
            proc = self.cli("run", "mean_pooling", f"--input=x={path}",
                            f"--output-dir={self.out_dir()}", "--json", target=target)
            self.assertEqual(json.loads(proc.stdout)["shared_memory"], "system", target)
            self.assertNotIn(self.FALLBACK, proc.stderr)
            np.testing.assert_allclose(np.load(os.path.join(self.out_dir(), "out.npy")),
                                       references.mean_pooling(x), rtol=1e-5, atol=1e-6)
            self.assertEqual(region_names(self.server.target), [])  # unregistered at exit

    def test_run_keeps_a_small_call_in_the_message(self):
        result = self.cli_json("run", "mean_pooling", "--shape=x=f32:2,16,8")
        self.assertEqual(result["shared_memory"], "none")

    def test_run_with_none_sends_the_bytes(self):
        x = uniform(self.rng, (4, 256, 512))
        proc = self.cli("run", "mean_pooling", f"--input=x={self.save('x', x)}",
                        "--shared-memory=none", code=RESOURCE_EXHAUSTED)
        self.assertIn("RESOURCE_EXHAUSTED", proc.stderr)
        result = self.cli_json("run", "mean_pooling", "--shape=x=f32:2,16,8",
                               "--shared-memory=none")
        self.assertEqual(result["shared_memory"], "none")
        # system forces a region whatever the size; cuda is bench's alone.
        result = self.cli_json("run", "mean_pooling", "--shape=x=f32:2,16,8",
                               "--shared-memory=system")
        self.assertEqual(result["shared_memory"], "system")
        proc = self.cli("run", "mean_pooling", "--shape=x=f32:2,16,8", "--shared-memory=cuda",
                        code=INVALID_ARGUMENT)
        self.assertIn("expected auto, none, or system", proc.stderr)

    def test_bench_takes_a_region_for_a_large_call(self):
        large = "--shape=x=f32:5,128,512"  # 1.25 MiB: the first call (sizes) still fits
        report = self.cli_json("bench", "mean_pooling", large, "--requests=10")
        self.assertEqual((report["ok"], report["errors"]), (10, 0), report["failures"])
        self.assertEqual(report["shared_memory"], "system")
        self.assertEqual(region_names(self.server.target), [])
        for flags in ([large, "--shared-memory=none"], ["--shape=x=f32:2,16,8"],
                      [large, "--protocol=v2"]):
            report = self.cli_json("bench", "mean_pooling", *flags, "--requests=5")
            self.assertEqual((report["ok"], report["errors"]), (5, 0), report["failures"])
            self.assertEqual(report["shared_memory"], "none", flags)


class CliSharedMemoryRefusedTest(CliTestBase):
    """A server that serves system regions but refuses one of the call's size (as one in
    another container, without this /dev/shm, refuses every one): auto falls back to the
    message with one note; system fails."""
    server_args = ("--max-shared-memory-bytes=65536",)

    def test_auto_falls_back_to_the_message(self):
        x = uniform(self.rng, (4, 256, 512))
        path = self.save("x", x)
        proc = self.cli("run", "mean_pooling", f"--input=x={path}",
                        f"--output-dir={self.out_dir()}", "--json")
        self.assertEqual(json.loads(proc.stdout)["shared_memory"], "none")
        [note] = proc.stderr.splitlines()
        self.assertIn("refused a shared-memory region (RESOURCE_EXHAUSTED", note)
        self.assertIn("--shared-memory=none", note)
        np.testing.assert_allclose(np.load(os.path.join(self.out_dir(), "out.npy")),
                                   references.mean_pooling(x), rtol=1e-5, atol=1e-6)
        report = self.cli_json("bench", "mean_pooling", "--shape=x=f32:5,128,512",
                               "--requests=5")
        self.assertEqual((report["ok"], report["errors"]), (5, 0), report["failures"])
        self.assertEqual(report["shared_memory"], "none")
        self.assertEqual(region_names(self.server.target), [])

    def test_system_fails_when_refused(self):
        x = uniform(self.rng, (4, 256, 512))
        proc = self.cli("run", "mean_pooling", f"--input=x={self.save('x', x)}",
                        "--shared-memory=system", code=RESOURCE_EXHAUSTED)
        self.assertNotIn("sending the tensors in the message", proc.stderr)


class CliAuthTest(CliTestBase):
    TOKEN = "cli-test-token"

    @classmethod
    def setUpClass(cls):
        cls.token_file = tempfile.NamedTemporaryFile("w", suffix=".token", delete=False)
        cls.token_file.write(cls.TOKEN + "\n")
        cls.token_file.close()
        cls.server_args = (f"--auth-token-file={cls.token_file.name}",)
        super().setUpClass()

    @classmethod
    def tearDownClass(cls):
        super().tearDownClass()
        os.unlink(cls.token_file.name)

    def test_token_file(self):
        proc = self.cli("info", code=UNAUTHENTICATED)
        self.assertIn("UNAUTHENTICATED", proc.stderr)
        self.cli("health")  # health needs no token
        self.cli("info", f"--token-file={self.token_file.name}")
        self.cli("info", env={"KERNELSERVE_TOKEN_FILE": self.token_file.name})
        self.cli("run", "mean_pooling", "--shape=x=f32:1,4,4",
                 f"--token-file={self.token_file.name}")

    def test_bench_sends_the_token_on_both_protocols(self):
        for protocol in ("native", "v2"):
            call = ("bench", "mean_pooling", "--shape=x=f32:1,16,64", "--requests=10",
                    f"--protocol={protocol}")
            proc = self.cli(*call, code=UNAUTHENTICATED)
            self.assertIn("UNAUTHENTICATED", proc.stderr)
            report = json.loads(self.cli(*call, f"--token-file={self.token_file.name}",
                                         "--json").stdout)
            self.assertEqual((report["ok"], report["errors"]), (10, 0), protocol)


if __name__ == "__main__":
    unittest.main()
