"""A kernelserve-server process on a free loopback port, driven through tritonclient.grpc.

For the KServe v2 tests, which drive the server through tritonclient alone (so
tests/client/server_fixture.py, which waits through the kernelserve package, is not used).
"""

import os
import socket
import subprocess
import tempfile
import time

import tritonclient.grpc as grpcclient
from tritonclient.utils import InferenceServerException


# As root (CI machines) a server serves system shared memory only when told to.
AS_ROOT = ("--shared-memory-as-root",) if os.geteuid() == 0 else ()


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class TritonServer:
    """Starts `binary` with an in-memory config cache; `client` is ready when this returns."""

    def __init__(self, binary, timeout=60.0):
        self.target = f"127.0.0.1:{free_port()}"
        self.log = tempfile.NamedTemporaryFile(prefix="kernelserve-v2-", suffix=".log")
        self.process = subprocess.Popen(
            [binary, f"--listen={self.target}", "--metrics-listen=off", "--cache=memory",
             *AS_ROOT],
            stdout=self.log, stderr=subprocess.STDOUT)
        self.client = grpcclient.InferenceServerClient(self.target)
        deadline = time.monotonic() + timeout
        while True:
            try:
                if self.client.is_server_ready():
                    return
            except InferenceServerException:
                pass
            if time.monotonic() > deadline or self.process.poll() is not None:
                self.process.kill()
                with open(self.log.name) as log:
                    raise RuntimeError(f"kernelserve-server not ready:\n{log.read()}")
            time.sleep(0.1)

    def stop(self):
        self.client.close()
        self.process.terminate()
        self.process.wait(timeout=30)
        self.log.close()
