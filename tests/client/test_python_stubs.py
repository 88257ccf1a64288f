"""The type stubs of the Python clients, kernelserve/client.pyi and kernelserve/aio.pyi: the
checked-in files are what client/python/scripts/gen_stubs.py makes from the built server's
kernels, their kernel methods agree with the ones the clients make at run time, and mypy
accepts right calls of them and rejects wrong ones (a misspelt param, a wrong type, a missing
input)."""

import ast
import dataclasses
import importlib.util
import inspect
import os
import subprocess
import sys
import tempfile
import textwrap
import unittest
from pathlib import Path

import kernelserve
from kernelserve import calls
from server_fixture import SERVER, ServerProcess

SOURCE = Path(os.environ.get("KERNELSERVE_SOURCE_DIR", Path(__file__).parents[2]))
PACKAGE_SOURCE = SOURCE / "client" / "python" / "kernelserve"
GEN_STUBS = SOURCE / "client" / "python" / "scripts" / "gen_stubs.py"
STUB_FILES = ("client.pyi", "aio.pyi")


def load_gen_stubs():
    spec = importlib.util.spec_from_file_location("gen_stubs", GEN_STUBS)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


class StubsTestBase(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.server = ServerProcess()
        cls.gen = load_gen_stubs()
        cls.kernels = cls.gen.kernels_of(cls.server.target)

    @classmethod
    def tearDownClass(cls):
        cls.server.stop()


class StubsUpToDateTest(StubsTestBase):
    def test_the_checked_in_stubs_are_the_servers_kernels(self):
        # As a maintainer runs it: the script starts the server binary itself.
        proc = subprocess.run([sys.executable, str(GEN_STUBS), "--server", SERVER, "--check"],
                              capture_output=True, text=True, timeout=120)
        self.assertEqual(proc.returncode, 0,
                         f"the checked-in stubs are out of date:\n{proc.stderr}\n"
                         f"Regenerate them from the repository's root, after building:\n"
                         f"  {sys.executable} {GEN_STUBS} --server {SERVER}")
        self.assertEqual(proc.stdout + proc.stderr, "")

    def test_a_new_param_makes_the_check_fail_naming_the_command(self):
        self.assertEqual(self.gen.check(self.gen.stubs(self.kernels), PACKAGE_SOURCE, "CMD"), [])
        changed = [dataclasses.replace(k, params=k.params + [kernelserve.ParamSchema(
            name="new_param", type="int", default=3, min=0.0, max=None, doc="a new param")])
            if k.name == "mean_pooling" else k for k in self.kernels]
        problems = self.gen.check(self.gen.stubs(changed), PACKAGE_SOURCE, "CMD")
        self.assertEqual(len(problems), len(STUB_FILES) + 1, problems)
        for problem in problems[:-1]:
            self.assertIn("+            new_param: int = 3,", problem)
        self.assertIn("out of date", problems[-1])
        self.assertTrue(problems[-1].endswith("\n  CMD"), problems[-1])

    def test_a_kernel_whose_names_cannot_be_a_method_is_left_out_saying_why(self):
        [pooling] = [k for k in self.kernels if k.name == "mean_pooling"]
        odd = [dataclasses.replace(pooling, name="execute"),
               dataclasses.replace(pooling, name="with-dash"),
               dataclasses.replace(pooling, name="uses_timeout", params=pooling.params + [
                   dataclasses.replace(pooling.params[0], name="timeout")])]
        text = self.gen.stubs(odd)["client.pyi"]
        self.assertIn("# No method for kernel 'execute': 'execute' is a method of the client "
                      "already.", text)
        self.assertIn("# No method for kernel 'with-dash': its name 'with-dash' is not a Python "
                      "identifier.", text)
        self.assertIn("# No method for kernel 'uses_timeout': its argument 'timeout' is the "
                      "name of a run option.", text)


class StubsMatchTheRuntimeTest(StubsTestBase):
    """Each stub's kernel method has the names, kinds and defaults of the method the client makes
    from the schema at run time (calls.method_signature, which split_call follows)."""

    def stub_methods(self, name):
        tree = ast.parse((PACKAGE_SOURCE / name).read_text())
        [client] = [n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "Client"]
        return {n.name: n for n in client.body
                if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))}

    def test_every_kernel_has_its_method_in_both_stubs(self):
        for name, is_async in (("client.pyi", False), ("aio.pyi", True)):
            methods = self.stub_methods(name)
            for schema in self.kernels:
                with self.subTest(stub=name, kernel=schema.name):
                    method = methods[schema.name]
                    self.assertEqual(isinstance(method, ast.AsyncFunctionDef), is_async)
                    runtime = calls.method_signature(schema)
                    args = method.args
                    positional = [a.arg for a in args.args[1:]]  # less self
                    self.assertEqual(positional, [
                        p.name for p in runtime.parameters.values()
                        if p.kind is inspect.Parameter.POSITIONAL_OR_KEYWORD])
                    keywords = {a.arg: ast.literal_eval(d)
                                for a, d in zip(args.kwonlyargs, args.kw_defaults)
                                if a.arg not in calls.RUN_OPTIONS}
                    self.assertEqual(keywords, {
                        p.name: p.default for p in runtime.parameters.values()
                        if p.kind is inspect.Parameter.KEYWORD_ONLY
                        and p.name not in calls.RUN_OPTIONS})
                    self.assertEqual([a.arg for a in args.kwonlyargs][-len(calls.RUN_OPTIONS):],
                                     list(calls.RUN_OPTIONS))
                    self.assertEqual(ast.unparse(method.returns), "_Result")


@unittest.skipUnless(importlib.util.find_spec("mypy"), "mypy is not installed (the test "
                     "virtualenv installs it: tests/client/CMakeLists.txt)")
class MypyTest(unittest.TestCase):
    """mypy against the installed package (its stubs), as a user's project runs it."""

    GOOD = """\
        import numpy as np
        import kernelserve
        import kernelserve.aio

        def blocking(q: np.ndarray) -> kernelserve.Result:
            with kernelserve.Client("127.0.0.1:50051") as client:
                client.mean_pooling(q, mask=None, chunk_size=16, config={"threads": 1})
                client.mean_pooling(x=q, platform="cpu", timeout=3.0)
                client.execute("mean_pooling", {"x": q})
                client.a_kernel_the_stubs_do_not_know(q, anything=1)
                return client.flash_attention(q, q, q, causal=True, softmax_scale=0.5,
                                              window_left=8, request_id="r1")

        async def asynchronous(q: np.ndarray) -> kernelserve.Result:
            async with kernelserve.aio.Client() as client:
                await client.mean_pooling(q)
                return await client.flash_attention(q, q, q, causal=True)
        """
    # File name -> (a body using `client` and an array `q`, what mypy says of it).
    BAD = {
        "misspelt.py": ("client.flash_attention(q, q, q, casual=True)",
                        'Unexpected keyword argument "casual" for "flash_attention" of "Client"; '
                        'did you mean "causal"?'),
        "wrong_type.py": ('client.flash_attention(q, q, q, causal="yes")',
                          'Argument "causal" to "flash_attention" of "Client" has incompatible '
                          'type "str"; expected "bool"'),
        "missing_input.py": ("client.flash_attention(q, q)",
                             'Missing positional argument "v" in call to "flash_attention" of '
                             '"Client"'),
        "int_param.py": ("client.mean_pooling(q, chunk_size=1.5)",
                         'Argument "chunk_size" to "mean_pooling" of "Client" has incompatible '
                         'type "float"; expected "int"'),
        "run_option.py": ('client.mean_pooling(q, device="0")',
                          'Argument "device" to "mean_pooling" of "Client" has incompatible '
                          'type "str"; expected "int | None"'),
    }

    def mypy(self, files, *flags):
        with tempfile.TemporaryDirectory(prefix="kernelserve-mypy-") as folder:
            for name, text in files.items():
                Path(folder, name).write_text(textwrap.dedent(text))
            proc = subprocess.run(
                [sys.executable, "-m", "mypy", "--no-incremental", "--no-error-summary",
                 "--cache-dir", os.path.join(folder, ".cache"), *flags, *files],
                cwd=folder, capture_output=True, text=True, timeout=300,
                env={k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "MYPYPATH")})
        return proc

    def test_right_calls_pass_strict_mypy(self):
        proc = self.mypy({"good.py": self.GOOD}, "--strict")
        self.assertEqual((proc.returncode, proc.stdout), (0, ""), proc.stdout + proc.stderr)

    def test_wrong_calls_fail_naming_the_mistake(self):
        files = {name: ("import numpy as np\nimport kernelserve\n\n"
                        "def f(q: np.ndarray) -> None:\n"
                        "    with kernelserve.Client() as client:\n"
                        f"        {body}\n")
                 for name, (body, _) in self.BAD.items()}
        files["aio_misspelt.py"] = ("import numpy as np\nimport kernelserve.aio\n\n"
                                    "async def f(q: np.ndarray) -> None:\n"
                                    "    async with kernelserve.aio.Client() as client:\n"
                                    "        await client.flash_attention(q, q, q, casual=True)\n")
        proc = self.mypy(files)
        self.assertEqual(proc.returncode, 1, proc.stdout + proc.stderr)
        errors = {}
        for line in proc.stdout.splitlines():
            name, _, rest = line.partition(":")
            if ": error: " in rest:
                errors.setdefault(name, []).append(rest.split(": error: ", 1)[1])
        expected = {name: message for name, (_, message) in self.BAD.items()}
        expected["aio_misspelt.py"] = self.BAD["misspelt.py"][1]
        for name, message in expected.items():
            with self.subTest(file=name):
                [error] = errors.get(name, ["(none)"])
                self.assertIn(message, error)


if __name__ == "__main__":
    unittest.main()
