"""Makes, or reuses, a virtualenv with the kernelserve package pip-installed from this checkout.

    python3 client/python/scripts/make_venv.py VENV [REQUIREMENT ...]

The client tests run in it (ctest fixture client_python_env, tests/client/CMakeLists.txt); the
REQUIREMENTs are installed with the package, in the same pip command, so that pip resolves them
together (the tests add `build` and the newest `tritonclient[grpc]`: the kernelserve suites and
the KServe v2 suite run in one environment, as a user's would). VENV is
reused while its stamp matches a hash of client/python's files, the protos, the requirements and
the Python that made it; otherwise it is made afresh: `python3 -m venv VENV`, then `pip install
client/python REQUIREMENT...`, which needs PyPI (or a mirror). Wheels already downloaded are
reused: pip's cache, and the folder KERNELSERVE_WHEEL_DIR names (default: `.whl` at the
repository's root) when it exists, given to pip as --find-links. Exits 1 saying what to do when
either step fails.
"""

import hashlib
import os
import subprocess
import sys
import venv
from pathlib import Path

PACKAGE = Path(__file__).absolute().parent.parent  # client/python
PROTOS = PACKAGE.parent.parent / "proto"  # the repository's proto/, read by setup.py
WHEELS = PACKAGE.parent.parent / ".whl"  # a cache of wheels, where one is kept (git ignores it)
STAMP = "kernelserve-install.stamp"
# What building leaves in client/python.
SKIPPED = {"build", "dist", "__pycache__"}

NO_VENV = """\
make_venv: `{python} -m venv {venv}` failed (above). On Debian install python3-venv
(scripts/install-deps.sh does), or set the CMake cache variable KERNELSERVE_PYTHON to a Python 3
with the venv module, then run the tests again."""

NO_PIP = """\
make_venv: `pip install {package}` into {venv} failed (above). It downloads from PyPI:
setuptools and grpcio-tools to build the package, grpcio, protobuf, numpy and ml_dtypes to run
it, and the requirements named. Without network access, point pip at a mirror
(PIP_INDEX_URL=https://...) or at a directory of those wheels (PIP_NO_INDEX=1
KERNELSERVE_WHEEL_DIR=/path/to/wheels), then run the tests again; the client tests cannot run
without this virtualenv."""


def _hashed_files():
    """(name, path) of every file that goes into the package: client/python's own files and
    the protos."""
    for root, dirs, files in os.walk(PACKAGE):
        dirs[:] = sorted(d for d in dirs if d not in SKIPPED and not d.endswith(".egg-info"))
        for name in sorted(files):
            path = Path(root, name)
            if "_pb2" not in name:  # stubs an editable install wrote
                yield str(path.relative_to(PACKAGE)), path
    for path in sorted(PROTOS.rglob("*.proto")):
        yield f"proto/{path.relative_to(PROTOS)}", path


def source_hash(requirements):
    """A hash of the package's files, the extra requirements and the Python that makes the
    virtualenv."""
    digest = hashlib.sha256(f"{sys.version}\n{sys.executable}\n{requirements}\n".encode())
    for name, path in _hashed_files():
        digest.update(f"{name}\n{len(path.read_bytes())}\n".encode())
        digest.update(path.read_bytes())
    return digest.hexdigest()


def wheel_dir():
    """The folder of cached wheels to look in first, or None when there is none."""
    folder = Path(os.environ.get("KERNELSERVE_WHEEL_DIR", WHEELS))
    return folder if folder.is_dir() else None


def main(argv):
    if len(argv) < 2:
        sys.exit(__doc__)
    target = Path(argv[1]).absolute()
    requirements = argv[2:]
    stamp = target / STAMP
    python = target / "bin" / "python"
    wanted = source_hash(requirements)
    if python.exists() and stamp.exists() and stamp.read_text().strip() == wanted:
        print(f"make_venv: {target} is up to date with {PACKAGE}")
        return 0
    what = " ".join([str(PACKAGE), *requirements])
    print(f"make_venv: making {target} and installing {what} into it")
    try:
        venv.EnvBuilder(clear=True, with_pip=True).create(target)
    except (OSError, subprocess.CalledProcessError) as error:
        print(f"make_venv: {error}", file=sys.stderr)
        print(NO_VENV.format(python=sys.executable, venv=target), file=sys.stderr)
        return 1
    wheels = wheel_dir()
    pip = [str(python), "-m", "pip", "install", "--disable-pip-version-check", "--no-input",
           "--progress-bar=off", "-q", *([f"--find-links={wheels}"] if wheels else []),
           str(PACKAGE), *requirements]
    if subprocess.run(pip).returncode != 0:
        print(NO_PIP.format(package=what, venv=target), file=sys.stderr)
        return 1
    stamp.write_text(wanted + "\n")
    print(f"make_venv: {target} ready")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
