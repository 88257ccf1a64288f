"""A real kernelserve-server process on a free loopback port, for the client tests.

The binaries come from the environment (set by tests/client/CMakeLists.txt):
KERNELSERVE_SERVER (the server) and KERNELSERVE_CLI (the kernelserve tool).
"""

import os
import socket
import subprocess
import tempfile
import time

import kernelserve

SERVER = os.environ.get("KERNELSERVE_SERVER", "")
TOY_SERVER = os.environ.get("KERNELSERVE_TOY_SERVER", "")  # with the tests' toy kernel
CLI = os.environ.get("KERNELSERVE_CLI", "")
# As root (CI machines) a server serves system shared memory only when told to; each
# registration is still checked against the caller's access to the object.
AS_ROOT = ("--shared-memory-as-root",) if os.geteuid() == 0 else ()


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class ServerProcess:
    """Starts the server with an in-memory config cache and waits until health is SERVING."""

    def __init__(self, *extra_args, timeout=30.0, binary=None):
        binary = binary or SERVER
        if not os.access(binary, os.X_OK):
            raise RuntimeError(f"server binary {binary!r} is not an executable")
        self.target = f"127.0.0.1:{free_port()}"
        self._log = tempfile.NamedTemporaryFile(prefix="kernelserve-server-", suffix=".log",
                                                delete=False)
        args = [binary, f"--listen={self.target}", "--metrics-listen=off", "--cache=memory",
                *AS_ROOT, *extra_args]
        self.process = subprocess.Popen(args, stdout=self._log, stderr=subprocess.STDOUT)
        try:
            self._wait_serving(timeout)
        except Exception:
            self.stop()
            raise

    def _wait_serving(self, timeout):
        deadline = time.monotonic() + timeout
        with kernelserve.Client(self.target, timeout=1.0) as client:
            while time.monotonic() < deadline:
                if self.process.poll() is not None:
                    raise RuntimeError(f"kernelserve-server exited with "
                                       f"{self.process.returncode}:\n{self.log()}")
                try:
                    if client.health() == "SERVING":
                        return
                except kernelserve.KernelserveError:
                    pass
                time.sleep(0.1)
        raise RuntimeError(f"kernelserve-server not SERVING after {timeout} s:\n{self.log()}")

    def log(self):
        with open(self._log.name, errors="replace") as f:
            return f.read()

    def stop(self):
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(15)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self._log.close()
        if os.path.exists(self._log.name):
            os.unlink(self._log.name)
