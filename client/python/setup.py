"""Builds the kernelserve package with its gRPC stubs, generated from the protos at build time.

The stubs (kernelserve/v1/kernel_service_pb2.py and .pyi, kernel_service_pb2_grpc.py) are not
kept in git and not made by the C++ build: build_py runs grpc_tools.protoc (grpcio-tools, a
build requirement) on kernelserve/v1/*.proto and writes them into the built package only (into
the source tree only for an editable install, where git ignores them).

The protos are read where they are: the repository's proto/ two levels up. Nothing is copied
into client/python; an sdist gets a copy of the .proto files alone, under proto/ in the archive,
so that it builds without the repository.

The extension kernelserve._native (kernelserve/_native.cc: the transport of calls with large
tensors over gRPC's C++ library, see kernelserve/transport.py) is built with nanobind (a build
requirement) against the gRPC that pkg-config finds (grpc++, the library the server is built
with; Debian's libgrpc++-dev). Where either is missing, or the compiler fails, the package is
built without it and uses grpcio alone; KERNELSERVE_BUILD_NATIVE=0 skips it on purpose.

Generated code refuses to load on a grpcio older than the grpcio-tools that wrote it, or on a
protobuf older than the protoc inside it, so those two floors are read from this build and
become the package's dependencies; protobuf also gets the ceiling of protobuf's cross-version
guarantee (code generated for major version V loads on runtimes V and V+1); the others are fixed
below. The build requirement pins grpcio-tools to 1.72.x, whose protoc writes gencode 6.30.0:
the stubs then load on every protobuf from 6.30.0 to 7.x, which covers the protobuf < 7 of
tritonclient[grpc] (Triton's client, for the KServe v2 front door) as well as the newest, so
that pip installs both in one environment, in one command or one after the other.
"""

import importlib.metadata
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from setuptools import Extension, setup
from setuptools.command.build_py import build_py
from setuptools.command.sdist import sdist

HERE = Path(__file__).absolute().parent
PROTO_DIR = "kernelserve/v1"  # the package of the stubs, and the protos' folder under the root
# No grpcio-health-checking: its stubs are generated for the newest protobuf alone (health.py
# encodes the two health messages instead).
REQUIREMENTS = ["numpy>=1.21", "ml_dtypes>=0.2"]


def proto_root() -> Path:
    """The folder the protos are found under: proto/ inside an unpacked sdist (which has a
    PKG-INFO), else the repository's proto/ (client/python is two levels below the root)."""
    root = HERE / "proto" if (HERE / "PKG-INFO").is_file() else HERE.parent.parent / "proto"
    if not any((root / PROTO_DIR).glob("*.proto")):
        sys.exit(f"kernelserve: no {PROTO_DIR}/*.proto under {root}. Build the package from a "
                 "kernelserve checkout (pip install ./client/python) or from its sdist; "
                 "client/python copied out of the repository lacks the protos.")
    return root


def proto_files(root: Path) -> list:
    """The protos the stubs are made of, relative to `root`."""
    return sorted(str(p.relative_to(root)) for p in (root / PROTO_DIR).glob("*.proto"))


def generate_stubs(out: Path) -> str:
    """Writes the stubs of the protos under `out`; returns the protobuf version they need."""
    import grpc_tools  # a build requirement (pyproject.toml)
    from grpc_tools import protoc

    root = proto_root()
    protos = proto_files(root)
    well_known = Path(grpc_tools.__file__).parent / "_proto"  # google/protobuf/*.proto
    args = ["grpc_tools.protoc", f"--proto_path={root}", f"--proto_path={well_known}",
            f"--python_out={out}", f"--pyi_out={out}", f"--grpc_python_out={out}", *protos]
    if protoc.main(args) != 0:
        sys.exit(f"kernelserve: grpc_tools.protoc failed on {', '.join(protos)} (see above)")
    generated = (out / protos[0].replace(".proto", "_pb2.py")).read_text()
    stamp = re.search(r"^# Protobuf Python Version: (\d+\.\d+\.\d+)", generated, re.MULTILINE)
    # Older protocs stamp no version: then ask for the protobuf this build ran with.
    return stamp.group(1) if stamp else importlib.metadata.version("protobuf")


def stub_requirements() -> list:
    """grpcio at least as new as the stubs this build generates need, and protobuf from their
    gencode version up to the last major version that loads it (the next one)."""
    with tempfile.TemporaryDirectory() as tmp:
        protobuf = generate_stubs(Path(tmp))
    ceiling = int(protobuf.split(".")[0]) + 2
    return [f"grpcio>={importlib.metadata.version('grpcio-tools')}",
            f"protobuf>={protobuf},<{ceiling}"]


def pkg_config(*args: str) -> list:
    """pkg-config's answer as arguments; [] when it fails or is missing."""
    try:
        done = subprocess.run(["pkg-config", *args], capture_output=True, text=True, check=True)
    except (OSError, subprocess.CalledProcessError):
        return []
    return shlex.split(done.stdout)


def native_extensions() -> list:
    """kernelserve._native when nanobind and gRPC's C++ library are here; [] otherwise (the
    package then sends through grpcio alone), saying why."""
    if os.environ.get("KERNELSERVE_BUILD_NATIVE", "1") == "0":
        return []
    try:
        import nanobind  # a build requirement (pyproject.toml)
    except ImportError:
        print("kernelserve: nanobind is missing: building without kernelserve._native")
        return []
    cflags, libs = pkg_config("--cflags", "grpc++"), pkg_config("--libs", "grpc++")
    if not libs:
        print("kernelserve: pkg-config finds no grpc++ (Debian: libgrpc++-dev): building "
              "without kernelserve._native")
        return []
    nb = Path(nanobind.__file__).parent
    return [Extension(
        "kernelserve._native",
        sources=["kernelserve/_native.cc", str(nb / "src" / "nb_combined.cpp")],
        include_dirs=[str(nb / "include"), str(nb / "ext" / "robin_map" / "include")],
        extra_compile_args=["-std=c++17", "-O2", "-fvisibility=hidden",
                            "-fno-strict-aliasing", *cflags],
        extra_link_args=libs, language="c++",
        optional=True)]  # a compiler error leaves the extension out, not the package


class BuildPyWithStubs(build_py):
    """build_py into a clean package folder, then the gRPC stubs into it."""

    def run(self):
        if not self.editable_mode:
            # setuptools never empties build/lib: a module removed from the sources would
            # otherwise stay in every later wheel.
            shutil.rmtree(Path(self.build_lib) / "kernelserve", ignore_errors=True)
        super().run()
        generate_stubs(HERE if self.editable_mode else Path(self.build_lib))


class SdistWithProtos(sdist):
    """sdist, plus a copy of the .proto files (and nothing else of proto/) in the archive."""

    def make_release_tree(self, base_dir, files):
        super().make_release_tree(base_dir, files)
        root = proto_root()
        for name in proto_files(root):
            target = Path(base_dir, "proto", name)
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(root / name, target)


setup(cmdclass={"build_py": BuildPyWithStubs, "sdist": SdistWithProtos},
      install_requires=REQUIREMENTS + stub_requirements(),
      ext_modules=native_extensions())
