"""Build the C API with CMake for the tests (tests/test_capi.py, tests/gpu/test_capi_gpu.py)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import sysconfig
import types

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
CAPI_DIR = os.path.join(ROOT, "tests", "capi")
BIN = os.path.dirname(sys.executable)


def env(**extra) -> dict:
    """This process's environment with the interpreter's bin/ (mpicc, mpiexec) first on PATH;
    ``NAME=None`` removes a variable."""
    e = dict(os.environ)
    e["PATH"] = BIN + os.pathsep + e.get("PATH", "")
    for k, v in extra.items():
        if v is None:
            e.pop(k, None)
        else:
            e[k] = str(v)
    return e


def run(cmd, cwd, *, timeout: float = 300, env_: dict | None = None) -> subprocess.CompletedProcess:
    """Run `cmd`; raise AssertionError with its output when it fails."""
    p = subprocess.run([str(c) for c in cmd], cwd=cwd, capture_output=True, text=True, timeout=timeout,
                       env=env_ or env())
    if p.returncode != 0:
        raise AssertionError(f"{' '.join(map(str, cmd))} failed ({p.returncode}):\n{p.stdout}\n{p.stderr}")
    return p


def mpicc() -> str:
    """The MPI C compiler wrapper to build with: $INSITU_MPICC (a machine whose interpreter's bin/
    holds another MPI's wrapper than its mpirun's), else the interpreter's bin/mpicc."""
    return os.environ.get("INSITU_MPICC") or os.path.join(BIN, "mpicc")


def missing_tools() -> list[str]:
    """What building the C API needs and this machine lacks."""
    missing = [t for t in ("cmake", "cc", "c++") if shutil.which(t) is None]
    if not os.path.exists(os.path.join(sysconfig.get_paths()["include"], "Python.h")):
        missing.append(f"Python.h of {sys.executable} (Debian: libpython3.{sys.version_info[1]}-dev)")
    return missing


def build(top, *, consumers: bool = True, fortran: bool = True) -> types.SimpleNamespace:
    """Configure, build and install the library under `top`; then (`consumers`) build both
    examples and the header checks against the installed package."""
    lib_dir, prefix, cons = top / "lib", top / "prefix", top / "consumers"
    run(["cmake", "-S", ROOT, "-B", lib_dir, f"-DPython3_EXECUTABLE={sys.executable}", "-DCMAKE_BUILD_TYPE=Release",
         f"-DINSITU_FORTRAN={'ON' if fortran else 'OFF'}"], top)
    run(["cmake", "--build", lib_dir, "-j", "2"], top)
    run(["cmake", "--install", lib_dir, "--prefix", prefix], top)
    ns = types.SimpleNamespace(top=top, lib_dir=lib_dir, prefix=prefix, lib=str(lib_dir / "libinsitu_adaptor.so"),
                               header_c=None, header_cxx=None, heat_cxx=None, heat_fortran=None)
    if consumers:
        run(["cmake", "-S", CAPI_DIR, "-B", cons, f"-Dinsitu_DIR={prefix}/lib/cmake/insitu",
             "-DCMAKE_BUILD_TYPE=Release"], top)
        run(["cmake", "--build", cons, "-j", "2"], top)
        fort = cons / "heat_fortran" / "heat_fortran"
        ns.header_c, ns.header_cxx = str(cons / "header_check_c"), str(cons / "header_check_cxx")
        ns.heat_cxx = str(cons / "heat_cxx" / "heat_cxx")
        ns.heat_fortran = str(fort) if fort.exists() else None
    return ns
